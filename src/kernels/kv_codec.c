/*
 * The write and read sides of K/V rows in every ix_kv_dtype (kernels.h):
 * ix_kernels_kv_store quantizes a row as a model writes it into the cache,
 * ix_kernels_kv_load widens it back (tests and tools; attention reads the
 * codes in place). Blocks as kernels_int.h lays them out: GGUF's Q8_0 and
 * Q4_0 rounding (as quants.c's plain quantizers) and FP8 E4M3, on blocks of
 * 32 values and a row's closing block of 16. Scalar on every path: a row is
 * written once and read at every later step.
 */
#include "kernels/kernels_int.h"

#include <math.h>
#include <string.h>

/* E4M3 code of v (|v| <= 448 after clamping), round to nearest even. */
static uint8_t e4m3_encode(float v) {
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fminf(fabsf(v), 448.0f) * 512.0f; /* in units of the smallest subnormal */
    if (!(a >= 0.0f)) a = 0.0f;                 /* NaN: zero */
    if (a < 8.0f) {                             /* subnormal: m * 2^-9 */
        int m = (int)nearbyintf(a);             /* 8 is the first normal, e = 1 m = 0 */
        return (uint8_t)(sign | m);
    }
    int ex;
    frexpf(a, &ex); /* a in [2^(ex-1), 2^ex): e = ex - 3, step 2^(ex - 4) */
    int e = ex - 3;
    int q = (int)nearbyintf(ldexpf(a, 4 - ex)); /* 8..16 */
    if (q == 16) q = 8, e++;
    if (e > 15 || (e == 15 && q > 14)) e = 15, q = 14; /* 448: 0x7f is NaN */
    return (uint8_t)(sign | e << 3 | (q - 8));
}

static float amax_of(const float *x, size_t L) {
    float amax = 0.0f;
    for (size_t j = 0; j < L; j++) amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

/* Stores d as the block's f16 scale and returns it as stored: codes round
 * against the stored scale, so the error is at most half a step of it. */
static float put_scale(uint8_t *p, float d) {
    uint16_t h = ix__fp32_to_fp16(d);
    memcpy(p, &h, 2);
    return ix__fp16_to_fp32(h);
}

/* One block of L (32 or 16) values at x into p. */
static void quantize_block(ix_kv_dtype t, const float *x, size_t L, uint8_t *p) {
    if (t == IX_KV_Q4_0) { /* GGUF: the signed largest magnitude maps to code 0 */
        float vmax = 0.0f;
        for (size_t j = 0; j < L; j++)
            if (fabsf(x[j]) > fabsf(vmax)) vmax = x[j];
        float d = put_scale(p, vmax / -8.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (size_t j = 0; j < L / 2; j++) {
            int lo = (int)fminf(fmaxf(x[j] * id + 8.5f, 0.0f), 15.0f);
            int hi = (int)fminf(fmaxf(x[j + L / 2] * id + 8.5f, 0.0f), 15.0f);
            p[2 + j] = (uint8_t)(lo | hi << 4);
        }
        return;
    }
    float amax = amax_of(x, L);
    float d = put_scale(p, amax / (t == IX_KV_Q8_0 ? 127.0f : 448.0f));
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (size_t j = 0; j < L; j++) {
        if (t == IX_KV_Q8_0) p[2 + j] = (uint8_t)(int8_t)nearbyintf(fminf(fmaxf(x[j] * id, -127.0f), 127.0f));
        else p[2 + j] = e4m3_encode(x[j] * id);
    }
}

/* One row of n values (ix_kv_dtype_row_bytes(t, n) > 0) into dst. */
static void quantize_row(ix_kv_dtype t, const float *src, uint8_t *dst, size_t n) {
    switch (t) {
    case IX_KV_F32: memcpy(dst, src, n * sizeof(float)); return;
    case IX_KV_F16: ix_kernels()->fp32_to_fp16(src, (uint16_t *)(void *)dst, n); return;
    case IX_KV_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = ix__fp32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        return;
    case IX_KV_Q8_0:
    case IX_KV_Q4_0:
    case IX_KV_FP8_E4M3:
        for (size_t i = 0; i < n; i += IX__KV_QK) {
            size_t L = n - i < IX__KV_QK ? n - i : IX__KV_QK;
            quantize_block(t, src + i, L, dst);
            dst += ix__kv_block_bytes(t, L);
        }
        return;
    case IX_KV_DTYPE_COUNT: break;
    }
    IX_ASSERT(!"quantize_row: unknown type");
}

/* The arguments of a row call: a known type, and n whole blocks with both
 * pointers unless n is 0. */
static ix_status check_row(ix_kv_dtype t, const void *src, const void *dst, size_t n) {
    if ((unsigned)t >= IX_KV_DTYPE_COUNT) return IX_ERR_INVALID;
    return n == 0 || (ix_kv_dtype_row_bytes(t, n) && src && dst) ? IX_OK : IX_ERR_INVALID;
}

ix_status ix_kernels_kv_store(ix_kv_dtype t, const float *src, void *dst, size_t n) {
    ix_status st = check_row(t, src, dst, n);
    if (st != IX_OK || n == 0) return st;
    quantize_row(t, src, dst, n);
    return IX_OK;
}

ix_status ix_kernels_kv_load(ix_kv_dtype t, const void *src, float *dst, size_t n) {
    ix_status st = check_row(t, src, dst, n);
    if (st != IX_OK || n == 0) return st;
    const uint8_t *s = src;
    switch (t) {
    case IX_KV_F32: memcpy(dst, src, n * sizeof(float)); break;
    case IX_KV_F16:
    case IX_KV_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = ix__load_u16(s + 2 * i);
            dst[i] = t == IX_KV_F16 ? ix__fp16_to_fp32(h) : ix__bf16_to_fp32(h);
        }
        break;
    case IX_KV_Q8_0:
    case IX_KV_Q4_0:
    case IX_KV_FP8_E4M3:
        for (size_t i = 0; i < n; i += IX__KV_QK) {
            size_t L = n - i < IX__KV_QK ? n - i : IX__KV_QK;
            int32_t c[IX__KV_QK];
            ix__kv_codes(s + 2, t, L, c);
            float d = ix__kv_block_scale(s, t);
            for (size_t j = 0; j < L; j++) dst[i + j] = d * (float)c[j];
            s += ix__kv_block_bytes(t, L);
        }
        break;
    case IX_KV_DTYPE_COUNT: break;
    }
    return IX_OK;
}
