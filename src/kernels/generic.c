/*
 * Generic C kernels: the reference every ISA path is tested against, and the
 * path that runs where no vector ISA is available. Written for clarity: one
 * output element at a time, sums in a fixed left-to-right order. Also owns
 * the weight quantizers (offline work, so no vector versions).
 */
#include "kernels/kernels_int.h"

#include <math.h>

/* ---- conversions ----------------------------------------------------------- */
static void fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ix__fp16_to_fp32(src[i]);
}

static void fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ix__fp32_to_fp16(src[i]);
}

static void bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ix__bf16_to_fp32(src[i]);
}

static void dequant_row(ix_dtype type, const void *src, float *dst, size_t n) {
    const uint8_t *p = src;
    switch (type) {
    case IX_DTYPE_F32: memcpy(dst, src, n * 4); break;
    case IX_DTYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = ix__fp16_to_fp32(ix__load_u16(p + 2 * i));
        break;
    case IX_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = ix__bf16_to_fp32(ix__load_u16(p + 2 * i));
        break;
    case IX_DTYPE_Q8_0:
        for (size_t b = 0; b < n / IX__QK; b++, p += IX__Q8_0_BYTES) {
            float d = ix__block_d(p);
            const int8_t *qs = (const int8_t *)(p + 2);
            for (int j = 0; j < IX__QK; j++) dst[b * IX__QK + j] = d * (float)qs[j];
        }
        break;
    case IX_DTYPE_Q4_0:
        for (size_t b = 0; b < n / IX__QK; b++, p += IX__Q4_0_BYTES) {
            float d = ix__block_d(p);
            for (int j = 0; j < IX__QK / 2; j++) {
                dst[b * IX__QK + j] = d * (float)((p[2 + j] & 15) - 8);
                dst[b * IX__QK + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        break;
    default: break; /* the wrapper rejects other types */
    }
}

/* ---- weight quantizers ------------------------------------------------------ */
void ix__quantize_q8_0(const float *src, void *dst, size_t n) {
    uint8_t *p = dst;
    for (size_t b = 0; b < n / IX__QK; b++, p += IX__Q8_0_BYTES) {
        const float *x = src + b * IX__QK;
        float amax = 0.0f;
        for (int j = 0; j < IX__QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        uint16_t dh = ix__fp32_to_fp16(amax / 127.0f);
        memcpy(p, &dh, 2);
        /* Round against the scale as stored, so the error is at most d/2. */
        float d = ix__fp16_to_fp32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < IX__QK; j++) {
            float v = fminf(fmaxf(x[j] * id, -127.0f), 127.0f);
            p[2 + j] = (uint8_t)(int8_t)nearbyintf(v);
        }
    }
}

void ix__quantize_q4_0(const float *src, void *dst, size_t n) {
    uint8_t *p = dst;
    for (size_t b = 0; b < n / IX__QK; b++, p += IX__Q4_0_BYTES) {
        const float *x = src + b * IX__QK;
        /* The signed value of largest magnitude maps to code 0 (= -8 * d),
         * which spends the asymmetric 16th level on the larger side. */
        float vmax = 0.0f;
        for (int j = 0; j < IX__QK; j++)
            if (fabsf(x[j]) > fabsf(vmax)) vmax = x[j];
        uint16_t dh = ix__fp32_to_fp16(vmax / -8.0f);
        memcpy(p, &dh, 2);
        float d = ix__fp16_to_fp32(dh), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < IX__QK / 2; j++) {
            float lo = fminf(fmaxf(x[j] * id + 8.5f, 0.0f), 15.0f);
            float hi = fminf(fmaxf(x[j + 16] * id + 8.5f, 0.0f), 15.0f);
            p[2 + j] = (uint8_t)((int)lo | ((int)hi << 4));
        }
    }
}

/* ---- activation quantization (q8a) --------------------------------------- */
static void quantize_act(const float *x, void *dst, size_t k) {
    int8_t *qs;
    ix__q8a_blk *blk;
    ix__q8a_out(dst, k, &qs, &blk);
    for (size_t b = 0; b < k / IX__QK; b++) {
        const float *xb = x + b * IX__QK;
        float amax = 0.0f, id;
        for (int j = 0; j < IX__QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        blk[b].d = ix__q8a_scale(amax, &id);
        int32_t sum = 0;
        for (int j = 0; j < IX__QK; j++) {
            float v = fminf(fmaxf(xb[j] * id, -127.0f), 127.0f);
            int q = (int)nearbyintf(v);
            qs[b * IX__QK + j] = (int8_t)q;
            sum += q;
        }
        ix__q8a_set_sum(&blk[b], sum);
    }
}

/* ---- matmul ----------------------------------------------------------------- */
/* Element i of a float-type weight row (rows need not be 4-byte aligned). */
static float w_at(ix_dtype t, const uint8_t *w, size_t i) {
    if (t == IX_DTYPE_F16) return ix__fp16_to_fp32(ix__load_u16(w + 2 * i));
    if (t == IX_DTYPE_BF16) return ix__bf16_to_fp32(ix__load_u16(w + 2 * i));
    float f;
    memcpy(&f, w + 4 * i, 4);
    return f;
}

static float dot_float_row(ix_dtype t, const uint8_t *w, const float *x, size_t k) {
    float sum = 0.0f;
    for (size_t i = 0; i < k; i++) sum += w_at(t, w, i) * x[i];
    return sum;
}

/* The canonical quantized dot (kernels_int.h): an exact integer dot per
 * block, then acc = fma(dot, d_w * d_x, acc) in block order. */
static float dot_q8_0(const uint8_t *w, ix__q8a_row xa, size_t nb) {
    float sum = 0.0f;
    for (size_t b = 0; b < nb; b++, w += IX__Q8_0_BYTES) {
        const int8_t *wq = (const int8_t *)(w + 2), *xq = xa.qs + b * IX__QK;
        int32_t dot = 0;
        for (int j = 0; j < IX__QK; j++) dot += (int32_t)wq[j] * xq[j];
        sum = fmaf((float)dot, ix__block_d(w) * xa.blk[b].d, sum);
    }
    return sum;
}

static float dot_q4_0(const uint8_t *w, ix__q8a_row xa, size_t nb) {
    float sum = 0.0f;
    for (size_t b = 0; b < nb; b++, w += IX__Q4_0_BYTES) {
        const int8_t *xq = xa.qs + b * IX__QK;
        int32_t dot = 0;
        for (int j = 0; j < IX__QK / 2; j++)
            dot += (w[2 + j] & 15) * xq[j] + (w[2 + j] >> 4) * xq[j + 16];
        dot -= 8 * xa.blk[b].s;
        sum = fmaf((float)dot, ix__block_d(w) * xa.blk[b].d, sum);
    }
    return sum;
}

/* The same dots from the packed layout: row r of a 16-row group. */
static float dot_packed(ix_dtype t, const uint8_t *codes, const uint8_t *scales, size_t r,
                        ix__q8a_row xa, size_t nb) {
    const bool q8 = t == IX_DTYPE_Q8_0;
    const size_t cb = ix__pk_code_bytes(t);
    float sum = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *c = codes + b * cb + r * 4;
        const int8_t *xq = xa.qs + b * IX__QK;
        int32_t dot = 0;
        if (q8) {
            for (int j = 0; j < 8; j++)
                for (int i = 0; i < 4; i++) dot += (int32_t)(int8_t)c[j * 64 + i] * xq[4 * j + i];
        } else {
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 4; i++)
                    dot += (c[j * 64 + i] & 15) * xq[4 * j + i] + (c[j * 64 + i] >> 4) * xq[16 + 4 * j + i];
            dot -= 8 * xa.blk[b].s;
        }
        float dw = ix__fp16_to_fp32(ix__load_u16(scales + (b * IX__PK + r) * 2));
        sum = fmaf((float)dot, dw * xa.blk[b].d, sum);
    }
    return sum;
}

static void matmul_rows(const ix_matmul *mm, size_t n0, size_t n1) {
    size_t ldx = ix__mm_ldx(mm), ldy = ix__mm_ldy(mm), nb = mm->K / IX__QK;
    if (mm->w_packed && ix__pk_halves(mm->w_type)) {
        const bool bf = mm->w_type == IX_DTYPE_BF16;
        for (size_t n = n0; n < n1; n++) {
            const uint8_t *h = ix__pk_codes(mm->w_type, mm->w, mm->K, n / IX__PK) + n % IX__PK * 2;
            for (size_t m = 0; m < mm->M; m++) {
                const float *x = mm->x + m * ldx;
                float sum = 0.0f;
                for (size_t k = 0; k < mm->K; k++) {
                    uint16_t v = ix__load_u16(h + k * 2 * IX__PK);
                    sum += (bf ? ix__bf16_to_fp32(v) : ix__fp16_to_fp32(v)) * x[k];
                }
                mm->y[m * ldy + n] = sum;
            }
        }
        return;
    }
    if (mm->w_packed) {
        for (size_t n = n0; n < n1; n++) {
            size_t g = n / IX__PK;
            const uint8_t *codes = ix__pk_codes(mm->w_type, mm->w, mm->K, g);
            const uint8_t *scales = ix__pk_scales(mm->w_type, mm->w, mm->K, g);
            for (size_t m = 0; m < mm->M; m++)
                mm->y[m * ldy + n] = dot_packed(mm->w_type, codes, scales, n % IX__PK,
                                                ix__q8a_at(mm->scratch, mm->K, m), nb);
        }
        return;
    }
    for (size_t n = n0; n < n1; n++) {
        const uint8_t *w = ix__mm_wrow(mm, n);
        for (size_t m = 0; m < mm->M; m++) {
            float v;
            switch (mm->w_type) {
            case IX_DTYPE_Q8_0: v = dot_q8_0(w, ix__q8a_at(mm->scratch, mm->K, m), nb); break;
            case IX_DTYPE_Q4_0: v = dot_q4_0(w, ix__q8a_at(mm->scratch, mm->K, m), nb); break;
            default: v = dot_float_row(mm->w_type, w, mm->x + m * ldx, mm->K); break;
            }
            mm->y[m * ldy + n] = v;
        }
    }
}

/* ---- row ops ----------------------------------------------------------------- */
static void rmsnorm(float *y, const float *x, const float *w, size_t n, float eps) {
    float ss = 0.0f;
    for (size_t i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (size_t i = 0; i < n; i++) y[i] = x[i] * r * (w ? w[i] : 1.0f);
}

static void softmax(float *x, size_t n) {
    float max = -INFINITY;
    for (size_t i = 0; i < n; i++) max = fmaxf(max, x[i]);
    if (!(max > -INFINITY)) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

static void silu_mul(float *y, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void add(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void rope_head(float *x, const float *cs, size_t n_rot, ix_rope_mode mode) {
    size_t half = n_rot / 2;
    for (size_t i = 0; i < half; i++) {
        /* NORM pairs (2i, 2i+1); NEOX pairs (i, i + half) */
        size_t a = mode == IX_ROPE_NEOX ? i : 2 * i, b = mode == IX_ROPE_NEOX ? i + half : 2 * i + 1;
        float c = cs[i], s = cs[half + i], x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

static float kv_at(const void *rows, size_t stride, ix_dtype t, size_t row, size_t i) {
    if (t == IX_DTYPE_F16) return ix__fp16_to_fp32(((const uint16_t *)rows)[row * stride + i]);
    return ((const float *)rows)[row * stride + i];
}

static void attn_add_one(ix_attn_acc *acc, const float *q, const void *k, size_t k_stride,
                         const void *v, size_t v_stride, size_t n_tokens, ix_dtype kv_type) {
    size_t hd = acc->head_dim;
    float s[IX__ATTN_CHUNK];
    for (size_t t0 = 0; t0 < n_tokens; t0 += IX__ATTN_CHUNK) {
        size_t cnt = n_tokens - t0 < IX__ATTN_CHUNK ? n_tokens - t0 : IX__ATTN_CHUNK;
        float cmax = -INFINITY;
        for (size_t t = 0; t < cnt; t++) {
            float dot = 0.0f;
            for (size_t i = 0; i < hd; i++) dot += q[i] * kv_at(k, k_stride, kv_type, t0 + t, i);
            s[t] = dot * acc->scale;
            if (acc->softcap > 0.0f) s[t] = ix__softcap(s[t], acc->softcap);
            cmax = fmaxf(cmax, s[t]);
        }
        bool skip;
        float alpha = ix__attn_rebase(acc, cmax, &skip);
        if (skip) continue;
        if (alpha != 1.0f)
            for (size_t i = 0; i < hd; i++) acc->o[i] *= alpha;
        for (size_t t = 0; t < cnt; t++) {
            float p = expf(s[t] - acc->max);
            acc->sum += p;
            for (size_t i = 0; i < hd; i++) acc->o[i] += p * kv_at(v, v_stride, kv_type, t0 + t, i);
        }
    }
}

/* The reference reads K/V once per query: a group is its queries one by one. */
static void attn_add(ix_attn_acc *accs, const float *q, size_t nq, const void *k, size_t k_stride,
                     const void *v, size_t v_stride, size_t n_tokens, ix_dtype kv_type) {
    for (size_t i = 0; i < nq; i++)
        attn_add_one(accs + i, q + i * accs[0].head_dim, k, k_stride, v, v_stride, n_tokens,
                     kv_type);
}

static const ix_kernel_table k_generic = {
    .isa = IX_ISA_GENERIC,
    .name = "generic",
    .fp16_to_fp32 = fp16_to_fp32,
    .fp32_to_fp16 = fp32_to_fp16,
    .bf16_to_fp32 = bf16_to_fp32,
    .dequant_row = dequant_row,
    .quantize_act = quantize_act,
    .matmul_rows = matmul_rows,
    .rmsnorm = rmsnorm,
    .softmax = softmax,
    .silu_mul = silu_mul,
    .add = add,
    .rope_head = rope_head,
    .attn_add = attn_add,
};

const ix_kernel_table *ix__kernels_generic(void) { return &k_generic; }
