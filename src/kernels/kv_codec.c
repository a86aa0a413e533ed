/*
 * The write and read sides of K/V rows in every ix_kv_dtype (kernels.h):
 * ix_kernels_kv_store quantizes a row as a model writes it into the cache,
 * ix_kernels_kv_load widens it back (tests and tools; attention reads the
 * codes in place). Q8_0 and Q4_0 rows are the weight types' blocks, so they
 * use those rows of the type traits (quants.c); FP8 E4M3 is defined here.
 * Scalar on every path: a row is written once and read at every later step.
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

static void quantize_fp8(const float *src, uint8_t *p, size_t n) {
    for (size_t b = 0; b < n / IX__KV_QK; b++, p += 34) {
        const float *x = src + b * IX__KV_QK;
        float amax = 0.0f;
        for (int j = 0; j < IX__KV_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        uint16_t h = ix__fp32_to_fp16(amax / 448.0f);
        memcpy(p, &h, 2);
        /* against the scale as stored, clamped (it may round below amax / 448) */
        float d = ix__fp16_to_fp32(h), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < IX__KV_QK; j++) p[2 + j] = e4m3_encode(x[j] * id);
    }
}

void ix__kv_quantize_row(ix_kv_dtype t, const float *src, uint8_t *dst, size_t n) {
    switch (t) {
    case IX_KV_F32: memcpy(dst, src, n * sizeof(float)); return;
    case IX_KV_F16: ix_kernels()->fp32_to_fp16(src, (uint16_t *)(void *)dst, n); return;
    case IX_KV_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = ix__fp32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        return;
    case IX_KV_Q8_0: ix__wtype_of(IX_DTYPE_Q8_0)->quantize(src, dst, n, NULL); return;
    case IX_KV_Q4_0: ix__wtype_of(IX_DTYPE_Q4_0)->quantize(src, dst, n, NULL); return;
    case IX_KV_FP8_E4M3: quantize_fp8(src, dst, n); return;
    case IX_KV_DTYPE_COUNT: break;
    }
    IX_ASSERT(!"ix__kv_quantize_row: unknown type");
}

ix_status ix_kernels_kv_store(ix_kv_dtype t, const float *src, void *dst, size_t n) {
    if ((unsigned)t >= IX_KV_DTYPE_COUNT || ix_kv_dtype_row_bytes(t, n) == 0 || !src || !dst)
        return n == 0 && (unsigned)t < IX_KV_DTYPE_COUNT ? IX_OK : IX_ERR_INVALID;
    ix__kv_quantize_row(t, src, dst, n);
    return IX_OK;
}

ix_status ix_kernels_kv_load(ix_kv_dtype t, const void *src, float *dst, size_t n) {
    if ((unsigned)t >= IX_KV_DTYPE_COUNT || ix_kv_dtype_row_bytes(t, n) == 0 || !src || !dst)
        return n == 0 && (unsigned)t < IX_KV_DTYPE_COUNT ? IX_OK : IX_ERR_INVALID;
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
        for (size_t b = 0; b < n / IX__KV_QK; b++) {
            const uint8_t *blk = s + b * ix__kv_block_bytes(t);
            int32_t c[IX__KV_QK];
            ix__kv_codes(blk + 2, t, c);
            float d = ix__kv_block_scale(blk, t);
            for (int i = 0; i < IX__KV_QK; i++) dst[b * IX__KV_QK + i] = d * (float)c[i];
        }
        break;
    case IX_KV_DTYPE_COUNT: break;
    }
    return IX_OK;
}
