/*
 * Generic C kernels: the reference every ISA path is tested against, and the
 * path that runs where no vector ISA is available. Written for clarity: one
 * output element at a time, sums in a fixed left-to-right order. Quantized
 * weights are read through their type's unpack (quants.c), so a new type
 * needs no code here.
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

/* ---- activation quantization (q8a) --------------------------------------- */
/* g blocks (1, or 8: quantize_act_super) share one scale */
static void quantize_act_g(const float *x, void *dst, size_t k, size_t g) {
    int8_t *qs;
    ix__q8a_blk *blk;
    ix__q8a_out(dst, k, &qs, &blk);
    float amax = 0.0f, id = 0.0f, d = 0.0f;
    for (size_t b = 0; b < k / IX__QK; b++) {
        const float *xb = x + b * IX__QK;
        if (b % g == 0) {
            amax = 0.0f;
            for (size_t j = 0; j < g * IX__QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
            d = ix__q8a_scale(amax, &id);
        }
        blk[b].d = d;
        int32_t sum[2] = {0, 0};
        for (int j = 0; j < IX__QK; j++) {
            float v = fminf(fmaxf(xb[j] * id, -127.0f), 127.0f);
            int q = (int)nearbyintf(v);
            qs[b * IX__QK + j] = (int8_t)q;
            sum[j / 16] += q;
        }
        ix__q8a_set_sums(&blk[b], sum[0], sum[1]);
    }
}
static void quantize_act(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, 1); }
static void quantize_act_super(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, IX__SUPER_BLOCKS); }

/* ---- matmul ----------------------------------------------------------------- */
/* The float-type weight at p (rows need not be 4-byte aligned). */
static float w_load(ix_dtype t, const uint8_t *p) {
    if (t == IX_DTYPE_F16) return ix__fp16_to_fp32(ix__load_u16(p));
    if (t == IX_DTYPE_BF16) return ix__bf16_to_fp32(ix__load_u16(p));
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* F32 / F16 / BF16: rows, or F16 / BF16 packed an element at a time. */
void ix__mm_float_generic(const ix_matmul *mm, size_t n0, size_t n1) {
    const ix_dtype t = mm->w_type;
    const size_t ldx = ix__mm_ldx(mm), ldy = ix__mm_ldy(mm);
    for (size_t n = n0; n < n1; n++) {
        /* element k of row n at w + k * step */
        const uint8_t *w = mm->w_packed ? ix__pk_codes(t, mm->w, mm->K, n / IX__PK) + n % IX__PK * 2
                                        : ix__mm_wrow(mm, n);
        const size_t step = mm->w_packed ? 2 * IX__PK : ix__w_row_bytes(t, 1);
        for (size_t m = 0; m < mm->M; m++) {
            const float *x = mm->x + m * ldx;
            float sum = 0.0f;
            for (size_t k = 0; k < mm->K; k++) sum += w_load(t, w + k * step) * x[k];
            mm->y[m * ldy + n] = sum;
        }
    }
}

/* One step of the canonical dot (kernels_int.h): the 32 weights u against
 * q8a block b of xa, added to acc; x_super types: added to the super-block's
 * integer sums is[0] (idot) and is[1] (imin), which the block that closes
 * the super-block adds to acc. */
static float dot32(const ix__q32 *u, const ix__wtype *wt, ix__q8a_row xa, size_t b, float acc, int32_t is[2]) {
    const int8_t *x = xa.qs + b * IX__QK;
    int32_t dot[2] = {0, 0}, sum[2] = {0, 0};
    for (int i = 0; i < IX__QK; i++) {
        dot[i / 16] += (int32_t)u->q[i] * x[i];
        sum[i / 16] += x[i];
    }
    if (wt->x_super) {
        is[0] += u->sc[0] * dot[0] + u->sc[1] * dot[1];
        is[1] += u->mn[0] * sum[0] + u->mn[1] * sum[1];
        if (b % IX__SUPER_BLOCKS == IX__SUPER_BLOCKS - 1) {
            acc = fmaf((float)is[0], u->d * xa.blk[b].d, acc);
            if (wt->has_min) acc = fmaf((float)is[1], u->dm * xa.blk[b].d, acc);
            is[0] = is[1] = 0;
        }
        return acc;
    }
    acc = fmaf((float)(u->sc[0] * dot[0] + u->sc[1] * dot[1]), u->d * xa.blk[b].d, acc);
    if (wt->min_sx) acc = fmaf(u->dm, (float)(sum[0] + sum[1]) * xa.blk[b].d, acc);
    else if (wt->has_min) acc = fmaf((float)(u->mn[0] * sum[0] + u->mn[1] * sum[1]), u->dm * xa.blk[b].d, acc);
    return acc;
}

/* The block codes of row r (of a 16-row group) from the packed layout, as
 * the type's unpack gives them from a row. */
static void unpack_packed(ix_dtype t, const uint8_t *codes, const uint8_t *scales, size_t r, size_t b,
                          ix__q32 *u) {
    const ix__wtype *wt = ix__wtype_of(t);
    const size_t per = ix__pk_unit_blocks(t), ub = ix__pk_unit_bytes(t);
    const uint8_t *c = codes + ix__pk_block_at(b, per, wt->pk_code_bytes, ub) + r * 4;
    const uint8_t *S = scales + b / per * ub; /* the unit's scales */
    const bool k4 = wt->pack == IX__PACK_K4, k6 = wt->pack == IX__PACK_K6, q5 = wt->pk_code_bytes == IX__PK_HI + 64;
    const bool q2 = t == IX_DTYPE_Q2_K, q3 = t == IX_DTYPE_Q3_K, xs = t == IX_DTYPE_IQ4_XS;
    const bool iq = xs || t == IX_DTYPE_IQ4_NL, q32 = wt->pack == IX__PACK_Q32;
    /* the unsigned codes' offset (none: Q4_K, Q5_K, Q2_K, Q4_1, Q5_1; the IQ4 grid indices) */
    const int off = t == IX_DTYPE_Q4_0 ? 8 : k6 ? 32 : q3 ? 4 : t == IX_DTYPE_Q5_0 ? 16 : 0;
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 4; i++) {
            if (t == IX_DTYPE_Q8_0) {
                u->q[4 * j + i] = (int8_t)c[j * 64 + i];
                u->q[16 + 4 * j + i] = (int8_t)c[(j + 4) * 64 + i];
                continue;
            }
            int lo, hi;
            if (q2 || q3) { /* 2-bit planes 0 / 1 at bits 2j, Q3_K's third bits as Q5_K's fifth */
                lo = c[i] >> (2 * j) & 3, hi = c[64 + i] >> (2 * j) & 3;
                if (q3) lo |= (c[128 + i] >> j & 1) << 2, hi |= (c[128 + i] >> (4 + j) & 1) << 2;
                u->q[4 * j + i] = (int8_t)(lo - off);
                u->q[16 + 4 * j + i] = (int8_t)(hi - off);
                continue;
            }
            /* plane j holds elements 4j.. (low nibbles) and 16 + 4j.. (high), the high-bit planes the rest */
            lo = c[j * 64 + i] & 15, hi = c[j * 64 + i] >> 4;
            if (q5) lo |= (c[IX__PK_HI + i] >> j & 1) << 4, hi |= (c[IX__PK_HI + i] >> (4 + j) & 1) << 4;
            if (k6) lo |= (c[IX__PK_HI + i] >> (2 * j) & 3) << 4, hi |= (c[IX__PK_HI + 64 + i] >> (2 * j) & 3) << 4;
            u->q[4 * j + i] = iq ? ix__iq4_grid[lo] : (int8_t)(lo - off);
            u->q[16 + 4 * j + i] = iq ? ix__iq4_grid[hi] : (int8_t)(hi - off);
        }
    if (k4) { /* the sub-block's scale and min folded in, as unpack_q45_k */
        const size_t at = b % 8 * IX__PK + r;
        u->sc[0] = u->sc[1] = 1;
        u->mn[0] = u->mn[1] = 1;
        u->d = ix__fp16_to_fp32(ix__load_u16(S + IX__PK4_D + 2 * r)) * (float)S[IX__PK4_SC + at];
        u->dm = -ix__fp16_to_fp32(ix__load_u16(S + IX__PK4_DMIN + 2 * r)) * (float)S[IX__PK4_MN + at];
        return;
    }
    if (q2) { /* scale and min of sub-blocks 2 (b % 8) and the next, as unpack_q2_k */
        for (size_t k = 0; k < 2; k++) {
            const uint8_t sm = S[IX__PK2_SM + ix__pk_pair_at(b % 8, r, k)];
            u->sc[k] = sm & 15, u->mn[k] = sm >> 4;
        }
        u->d = ix__fp16_to_fp32(ix__load_u16(S + IX__PK2_D + 2 * r));
        u->dm = -ix__fp16_to_fp32(ix__load_u16(S + IX__PK2_DMIN + 2 * r));
        return;
    }
    if (q32 && wt->has_min) { /* Q4_1 / Q5_1: d and m per block, as their unpacks */
        u->sc[0] = u->sc[1] = 1;
        u->mn[0] = u->mn[1] = 1;
        u->d = ix__fp16_to_fp32(ix__load_u16(S + 2 * r));
        u->dm = ix__fp16_to_fp32(ix__load_u16(S + 32 + 2 * r));
        return;
    }
    u->mn[0] = u->mn[1] = 0;
    u->dm = 0.0f;
    if (xs) { /* the block's int8 scale, as ix__sub_scales */
        u->sc[0] = u->sc[1] = (int8_t)S[IX__PKX_SC + b % 8 * IX__PK + r];
        u->d = ix__fp16_to_fp32(ix__load_u16(S + IX__PKX_D + 2 * r));
        return;
    }
    if (k6 || q3) { /* the int8 scales of sub-blocks 2 (b % 8) and the next, as unpack_q6_k / _q3_k */
        for (size_t k = 0; k < 2; k++) /* Q6_K: [16 sub-blocks][16 rows]; Q3_K: [8 blocks][16 rows][2 halves] */
            u->sc[k] = (int8_t)S[IX__PK6_SC + (q3 ? ix__pk_pair_at(b % 8, r, k) : (2 * (b % 8) + k) * IX__PK + r)];
        u->d = ix__fp16_to_fp32(ix__load_u16(S + IX__PK6_D + 2 * r));
        return;
    }
    u->sc[0] = u->sc[1] = 1;
    u->d = ix__fp16_to_fp32(ix__load_u16(S + 2 * r));
}

/* Every quantized type, rows through its unpack (or the packed planes of
 * Q8_0 / Q4_0). X rows go in runs so that each weight block is decoded once
 * per run, not once per X row. */
#define Q_RUN 8

void ix__mm_q_generic(const ix_matmul *mm, size_t n0, size_t n1) {
    const ix__wtype *wt = ix__wtype_of(mm->w_type);
    const size_t ldy = ix__mm_ldy(mm), nb = mm->K / IX__QK, per = wt->blck / IX__QK;
    for (size_t n = n0; n < n1; n++) {
        const uint8_t *w = NULL, *codes = NULL, *scales = NULL;
        if (mm->w_packed) {
            codes = ix__pk_codes(mm->w_type, mm->w, mm->K, n / IX__PK);
            scales = ix__pk_scales(mm->w_type, mm->w, mm->K, n / IX__PK);
        } else {
            w = ix__mm_wrow(mm, n);
        }
        for (size_t m0 = 0; m0 < mm->M; m0 += Q_RUN) {
            size_t rows = mm->M - m0 < Q_RUN ? mm->M - m0 : Q_RUN;
            float acc[Q_RUN] = {0};
            int32_t is[Q_RUN][2] = {{0}};
            for (size_t b = 0; b < nb; b++) {
                ix__q32 u;
                if (mm->w_packed) unpack_packed(mm->w_type, codes, scales, n % IX__PK, b, &u);
                else wt->unpack(w + b / per * wt->bytes, b % per, &u);
                for (size_t r = 0; r < rows; r++)
                    acc[r] = dot32(&u, wt, ix__q8a_at(mm->scratch, mm->K, m0 + r), b, acc[r], is[r]);
            }
            for (size_t r = 0; r < rows; r++) mm->y[(m0 + r) * ldy + n] = acc[r];
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

static float kv_at(const void *rows, size_t stride, ix_kv_dtype t, size_t row, size_t i) {
    if (t == IX_KV_F16) return ix__fp16_to_fp32(((const uint16_t *)rows)[row * stride + i]);
    if (t == IX_KV_BF16) return ix__bf16_to_fp32(((const uint16_t *)rows)[row * stride + i]);
    return ((const float *)rows)[row * stride + i];
}

static void attn_add_one(ix_attn_acc *acc, const float *q, const void *k, size_t k_stride,
                         const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype kv_type) {
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

/* Quantized K/V (attn_q.h): the reference primitives. */
#define vq_quantize quantize_act
#define vq_half ix__fp16_to_fp32

static inline int32_t vq_dot(const int8_t *q, const uint8_t *codes, ix_kv_dtype t, size_t L) {
    int32_t c[IX__KV_QK], dot = 0;
    ix__kv_codes(codes, t, L, c);
    for (size_t i = 0; i < L; i++) dot += q[i] * c[i];
    return dot;
}

static inline void vq_axpy(float *o, float w, const uint8_t *codes, ix_kv_dtype t, size_t L) {
    int32_t c[IX__KV_QK];
    ix__kv_codes(codes, t, L, c);
    for (size_t i = 0; i < L; i++) o[i] = fmaf(w, (float)c[i], o[i]);
}

#include "kernels/attn_q.h"

/* The reference reads K/V once per query: a group is its queries one by one. */
static void attn_add(ix_attn_acc *accs, const float *q, size_t nq, const void *k, size_t k_stride,
                     const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype kv_type) {
    if (ix__kv_is_block(kv_type)) {
        vq_attn_add(accs, q, nq, k, k_stride, v, v_stride, n_tokens, kv_type);
        return;
    }
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
    .quantize_act = quantize_act,
    .quantize_act_super = quantize_act_super,
    .path = IX__PATH_GENERIC,
    .rmsnorm = rmsnorm,
    .softmax = softmax,
    .silu_mul = silu_mul,
    .add = add,
    .rope_head = rope_head,
    .attn_add = attn_add,
};

const ix_kernel_table *ix__kernels_generic(void) { return &k_generic; }
