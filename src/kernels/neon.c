/*
 * AArch64 NEON kernels, two tables: "neon" for every ARMv8.0 core and
 * "neon-dotprod" for cores with the dot-product extension (ARMv8.2+; sdot).
 * They differ only in the quantized matmul tiles (neon_q.h, compiled once
 * for each); everything else is shared. The file itself is built for the
 * baseline architecture, so the binary runs on any AArch64 core, and
 * dispatch.c hands out the dotprod table only after the CPU probe saw the
 * extension (HWCAP_ASIMDDP).
 *
 * Quantized matmul gives the canonical dot (kernels_int.h) bit for bit, like
 * every path. NEON has 32 vector registers of 4 f32 lanes, so the float row
 * tiles are 4 X rows by 4 W rows, the quantized row tiles 4 x 4 with one
 * int32x4 per (X row, W row) reduced by pairwise adds, and the packed tiles
 * take the 16 rows of a group 4 (plain) or 8 (sdot) at a time, one W row per
 * 32-bit lane as the layout lays them out. The fp16 conversions are the base
 * ISA's fcvtl / fcvtn, which round and treat NaN as F16C does.
 */
#include "kernels/kernels_int.h"

#include <arm_neon.h>
#include <math.h>

/* ---- vector vocabulary for vecops.h ----------------------------------------------- */
#define VF float32x4_t
#define VW 4

/* Tails: the first n < 4 lanes from memory, the rest 0, never touching
 * memory past n. Lane by lane rather than a memcpy of n bytes, which is a
 * call: around a call the tiles' accumulators (whole q registers, of which
 * only the low halves of v8-v15 survive a call) were written to the stack on
 * every iteration of the main loop. */
static inline float32x4_t load_n(const float *p, size_t n) {
    float32x4_t v = vdupq_n_f32(0.0f);
    if (n > 0) v = vld1q_lane_f32(p, v, 0);
    if (n > 1) v = vld1q_lane_f32(p + 1, v, 1);
    if (n > 2) v = vld1q_lane_f32(p + 2, v, 2);
    return v;
}

static inline void store_n(float *p, float32x4_t v, size_t n) {
    if (n > 0) vst1q_lane_f32(p, v, 0);
    if (n > 1) vst1q_lane_f32(p + 1, v, 1);
    if (n > 2) vst1q_lane_f32(p + 2, v, 2);
}

static inline float32x4_t load_h4(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* n < 4 halves at p (any alignment), the rest 0, as raw bits */
static inline uint16x4_t load_u16_n(const void *p, size_t n) {
    const uint8_t *b = p;
    uint16x4_t h = vdup_n_u16(0);
    if (n > 0) h = vset_lane_u16(ix__load_u16(b), h, 0);
    if (n > 1) h = vset_lane_u16(ix__load_u16(b + 2), h, 1);
    if (n > 2) h = vset_lane_u16(ix__load_u16(b + 4), h, 2);
    return h;
}

static inline float32x4_t load_h_n(const uint16_t *p, size_t n) {
    return vcvt_f32_f16(vreinterpret_f16_u16(load_u16_n(p, n)));
}

#define vf_zero() vdupq_n_f32(0.0f)
#define vf_set1(f) vdupq_n_f32(f)
#define vf_load(p) vld1q_f32(p)
#define vf_store(p, v) vst1q_f32((p), (v))
#define vf_load_n(p, n) load_n((p), (n))
#define vf_store_n(p, v, n) store_n((p), (v), (n))
#define vf_load_h(p) load_h4(p)
#define vf_load_h_n(p, n) load_h_n((p), (n))
#define vf_add vaddq_f32
#define vf_sub vsubq_f32
#define vf_mul vmulq_f32
#define vf_div vdivq_f32
/* maxNum: a NaN operand yields the other one, as fmaxf (vecops.h relies on it) */
#define vf_max vmaxnmq_f32
#define vf_fma(a, b, c) vfmaq_f32((c), (a), (b))
#define vf_hsum vaddvq_f32
#define vf_hmax vmaxnmvq_f32

/* e^x as in avx2.c: x clamped to [-87.33, 88.7], 2^n built in the exponent
 * field in two halves (2^128 does not fit one), and results below e^-87.33
 * (subnormal) flushed to 0, which also gives 0 for -inf and NaN. */
static inline float32x4_t vf_exp(float32x4_t x) {
    const uint32x4_t keep = vcgeq_f32(x, vdupq_n_f32(-87.33f));
    x = vminnmq_f32(vmaxnmq_f32(x, vdupq_n_f32(-87.33f)), vdupq_n_f32(88.7f));
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 720);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t ni = vcvtq_s32_f32(n), n1 = vshrq_n_s32(ni, 1), n2 = vsubq_s32(ni, n1);
    const int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n1, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n2, bias), 23));
    float32x4_t e = vmulq_f32(vmulq_f32(p, s1), s2);
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(e), keep));
}

/* bf16 -> f32: the half goes to the top of the word */
#define vf_load_b(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16))
#define vf_load_b_n(p, n) vreinterpretq_f32_u32(vshll_n_u16(load_u16_n((p), (n)), 16))

/* ---- quantized K/V primitives (attn_q.h) ---- */
static void quantize_act(const float *x, void *dst, size_t k);
#define vq_quantize quantize_act
static inline float vq_half(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* E4M3 x 512 of 4 codes (zero-extended in x): (8 | m) << (e - 1), or m when
 * e = 0; then the sign. */
static inline int32x4_t vq_e4m3(int32x4_t x) {
    int32x4_t e = vandq_s32(vshrq_n_s32(x, 3), vdupq_n_s32(15));
    int32x4_t m = vandq_s32(x, vdupq_n_s32(7));
    uint32x4_t normal = vcgtq_s32(e, vdupq_n_s32(0));
    m = vorrq_s32(m, vandq_s32(vreinterpretq_s32_u32(normal), vdupq_n_s32(8)));
    int32x4_t mag = vshlq_s32(m, vmaxq_s32(vsubq_s32(e, vdupq_n_s32(1)), vdupq_n_s32(0)));
    uint32x4_t neg = vtstq_s32(x, vdupq_n_s32(0x80));
    return vbslq_s32(neg, vnegq_s32(mag), mag);
}

/* Codes i..i+7 of a block of L (i % 8 == 0) as exact int32 lanes (kernels_int.h). */
static inline __attribute__((always_inline)) void vq_codes8(const uint8_t *codes, ix_kv_dtype t,
                                                            size_t i, size_t L, int32x4_t out[2]) {
    if (t == IX_KV_FP8_E4M3) {
        uint16x8_t w = vmovl_u8(vld1_u8(codes + i));
        out[0] = vq_e4m3(vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(w))));
        out[1] = vq_e4m3(vreinterpretq_s32_u32(vmovl_high_u16(w)));
        return;
    }
    int16x8_t w;
    if (t == IX_KV_Q8_0) {
        w = vmovl_s8(vld1_s8((const int8_t *)codes + i));
    } else { /* Q4_0 */
        bool lo = i < L / 2;
        uint8x8_t b = vld1_u8(codes + (lo ? i : i - L / 2));
        b = lo ? vand_u8(b, vdup_n_u8(15)) : vshr_n_u8(b, 4);
        w = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(b)), vdupq_n_s16(8));
    }
    out[0] = vmovl_s16(vget_low_s16(w));
    out[1] = vmovl_high_s16(w);
}

static inline __attribute__((always_inline)) int32_t vq_dot(const int8_t *q, const uint8_t *codes,
                                                            ix_kv_dtype t, size_t L) {
    int32x4_t acc = vdupq_n_s32(0);
    for (size_t i = 0; i < L; i += 8) {
        int32x4_t c[2];
        vq_codes8(codes, t, i, L, c);
        int16x8_t qv = vmovl_s8(vld1_s8(q + i));
        acc = vmlaq_s32(acc, vmovl_s16(vget_low_s16(qv)), c[0]);
        acc = vmlaq_s32(acc, vmovl_high_s16(qv), c[1]);
    }
    return vaddvq_s32(acc);
}

static inline __attribute__((always_inline)) void vq_axpy(float *o, float w, const uint8_t *codes,
                                                          ix_kv_dtype t, size_t L) {
    float32x4_t wv = vdupq_n_f32(w);
    for (size_t i = 0; i < L; i += 8) {
        int32x4_t c[2];
        vq_codes8(codes, t, i, L, c);
        vst1q_f32(o + i, vfmaq_f32(vld1q_f32(o + i), vcvtq_f32_s32(c[0]), wv));
        vst1q_f32(o + i + 4, vfmaq_f32(vld1q_f32(o + i + 4), vcvtq_f32_s32(c[1]), wv));
    }
}

#include "kernels/vecops.h"

/* ---- conversions ------------------------------------------------------------------ */
static void fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, load_h4(src + i));
    if (i < n) store_n(dst + i, load_h_n(src + i, n - i), n - i);
}

static void fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    /* fcvtn rounds by FPCR (nearest even, the AArch64 Linux default) */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    for (; i + 4 <= n; i += 4) vst1_u16(dst + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    if (i < n) {
        uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(load_n(src + i, n - i)));
        dst[i] = vget_lane_u16(h, 0);
        if (n - i > 1) dst[i + 1] = vget_lane_u16(h, 1);
        if (n - i > 2) dst[i + 2] = vget_lane_u16(h, 2);
    }
}

static void bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(src + i);
        vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
        vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
    }
    for (; i < n; i++) dst[i] = ix__bf16_to_fp32(src[i]);
}

/* Elements k..k+3 of a row of F32 / F16 / BF16 widened to f32 (exactly:
 * fcvtl, or a shift for bf16). Rows of a GGUF file need not be aligned, so
 * bytes are loaded. */
static inline __attribute__((always_inline)) float32x4_t ldw(ix_dtype t, const uint8_t *row, size_t k) {
    if (t == IX_DTYPE_F32) return vreinterpretq_f32_u8(vld1q_u8(row + 4 * k));
    uint16x4_t h = vreinterpret_u16_u8(vld1_u8(row + 2 * k));
    return t == IX_DTYPE_F16 ? vcvt_f32_f16(vreinterpret_f16_u16(h)) : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/* The last n < 4 elements, zero-padded (lane loads: see load_n). */
static inline __attribute__((always_inline)) float32x4_t ldw_n(ix_dtype t, const uint8_t *row, size_t k,
                                                               size_t n) {
    if (t == IX_DTYPE_F32) {
        const uint8_t *p = row + 4 * k;
        uint32x4_t v = vdupq_n_u32(0);
        if (n > 0) v = vsetq_lane_u32(ix__load_u32(p), v, 0);
        if (n > 1) v = vsetq_lane_u32(ix__load_u32(p + 4), v, 1);
        if (n > 2) v = vsetq_lane_u32(ix__load_u32(p + 8), v, 2);
        return vreinterpretq_f32_u32(v);
    }
    uint16x4_t h = load_u16_n(row + 2 * k, n);
    return t == IX_DTYPE_F16 ? vcvt_f32_f16(vreinterpret_f16_u16(h)) : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/* ---- activation quantization (q8a; same bits as generic.c) ---------------------------- */
/* g blocks (1, or 8: quantize_act_super) share one scale */
static void quantize_act_g(const float *x, void *dst, size_t k, size_t g) {
    int8_t *qs;
    ix__q8a_blk *blk;
    ix__q8a_out(dst, k, &qs, &blk);
    const float32x4_t lo = vdupq_n_f32(-127.0f), hi = vdupq_n_f32(127.0f);
    float d = 0.0f, id = 0.0f;
    for (size_t b = 0; b < k / IX__QK; b++) {
        const float *xb = x + b * IX__QK;
        float32x4_t v[8];
        for (int j = 0; j < 8; j++) v[j] = vld1q_f32(xb + 4 * j);
        if (b % g == 0) { /* this block's loads, then the group's other blocks; maxNum skips NaN, as fmaxf */
            float32x4_t m = vdupq_n_f32(0.0f);
            for (int j = 0; j < 8; j++) m = vmaxnmq_f32(m, vabsq_f32(v[j]));
            for (size_t j = 8; j < 8 * g; j++) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xb + 4 * j)));
            d = ix__q8a_scale(vmaxnmvq_f32(m), &id);
        }
        blk[b].d = d;
        int32x4_t q[8], sum[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
        for (int j = 0; j < 8; j++) {
            /* the clamp as fminf / fmaxf (a NaN product becomes -127), then
             * fcvtns: nearest even, as nearbyintf */
            float32x4_t c = vminnmq_f32(vmaxnmq_f32(vmulq_n_f32(v[j], id), lo), hi);
            q[j] = vcvtnq_s32_f32(c);
            sum[j / 4] = vaddq_s32(sum[j / 4], q[j]);
        }
        for (int j = 0; j < 2; j++) {
            int16x8_t a = vmovn_high_s32(vmovn_s32(q[4 * j]), q[4 * j + 1]);
            int16x8_t c = vmovn_high_s32(vmovn_s32(q[4 * j + 2]), q[4 * j + 3]);
            vst1q_s8(qs + b * IX__QK + 16 * j, vmovn_high_s16(vmovn_s16(a), c));
        }
        ix__q8a_set_sums(&blk[b], vaddvq_s32(sum[0]), vaddvq_s32(sum[1]));
    }
}
static void quantize_act(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, 1); }
static void quantize_act_super(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, IX__SUPER_BLOCKS); }

/* ---- float matmul tiles (row layout) ----------------------------------------------------
 * F_RX X rows by F_RW W rows, one accumulator per output across K, reduced by
 * pairwise adds at the end: an output's arithmetic does not depend on
 * where it sits in a tile, so the walker may recompute and rows are batch
 * invariant. */
#define F_RX 4
#define F_RW 4

/* The loops over rows are unrolled by pragma: GCC leaves the tail's rolled
 * (their bodies are large), and a run-time row index keeps acc in memory. */
static inline __attribute__((always_inline)) void ftile_run(const ix__tile *a, ix_dtype t, int rx) {
    float32x4_t acc[F_RX][F_RW];
    IX__UNROLL(4)
    for (int i = 0; i < rx; i++)
        IX__UNROLL(4)
        for (int j = 0; j < F_RW; j++) acc[i][j] = vdupq_n_f32(0.0f);
    const size_t ws = a->ws, xs = a->xs, K = a->k;
    size_t k = 0;
    for (; k + 4 <= K; k += 4) {
        float32x4_t w[F_RW];
        IX__UNROLL(4)
        for (int j = 0; j < F_RW; j++) w[j] = ldw(t, a->w + (size_t)j * ws, k);
        IX__UNROLL(4)
        for (int i = 0; i < rx; i++) {
            float32x4_t x = vld1q_f32((const float *)(const void *)(a->x + (size_t)i * xs) + k);
            IX__UNROLL(4)
            for (int j = 0; j < F_RW; j++) acc[i][j] = vfmaq_f32(acc[i][j], w[j], x);
        }
    }
    if (k < K) {
        size_t n = K - k;
        float32x4_t w[F_RW];
        IX__UNROLL(4)
        for (int j = 0; j < F_RW; j++) w[j] = ldw_n(t, a->w + (size_t)j * ws, k, n);
        IX__UNROLL(4)
        for (int i = 0; i < rx; i++) {
            float32x4_t x = load_n((const float *)(const void *)(a->x + (size_t)i * xs) + k, n);
            IX__UNROLL(4)
            for (int j = 0; j < F_RW; j++) acc[i][j] = vfmaq_f32(acc[i][j], w[j], x);
        }
    }
    /* lane j = (a0 + a1) + (a2 + a3) of column j: the same order for every
     * column, and constant indices (a loop to ncols would index acc at run
     * time and keep it in memory, stored on every k step) */
    IX__UNROLL(4)
    for (int i = 0; i < rx; i++) {
        float32x4_t s = vpaddq_f32(vpaddq_f32(acc[i][0], acc[i][1]), vpaddq_f32(acc[i][2], acc[i][3]));
        float *y = a->y + (size_t)i * a->ldy;
        if (a->ncols == F_RW) vst1q_f32(y, s); /* ncols: F_RW, or 1 in the walker's narrow path */
        else vst1q_lane_f32(y, s, 0);
    }
}

#define FTILE(T, R) static void ftile_##T##_##R(const ix__tile *a) { ftile_run(a, IX_DTYPE_##T, R); }
FTILE(F32, 1) FTILE(F32, 2) FTILE(F32, 3) FTILE(F32, 4)
FTILE(F16, 1) FTILE(F16, 2) FTILE(F16, 3) FTILE(F16, 4)
FTILE(BF16, 1) FTILE(BF16, 2) FTILE(BF16, 3) FTILE(BF16, 4)
#undef FTILE
static const ix__tile_fn k_ftiles[3][F_RX] = {{ftile_F32_1, ftile_F32_2, ftile_F32_3, ftile_F32_4},
                                             {ftile_F16_1, ftile_F16_2, ftile_F16_3, ftile_F16_4},
                                             {ftile_BF16_1, ftile_BF16_2, ftile_BF16_3, ftile_BF16_4}};

/* ---- F16 / BF16 packed weights --------------------------------------------------------------
 * Element k of the group's 16 rows is 32 bytes: four fcvtl give 4 vectors of
 * 4 rows, each FMAed with X row i's element k taken by lane from a vector of
 * 4 consecutive elements (no broadcasts). Each X row keeps its 16 outputs in
 * 4 accumulators, each summing its row in k order whatever the tile size, so
 * a row's bits do not depend on its batch. */
#define PKF_RX 4
#define PKF_MCHUNK 48

/* the group's 16 rows at element k (BF16: widened by a shift, exactly) */
static inline __attribute__((always_inline)) void pkf_w(const uint8_t *g, size_t k, float32x4_t w[4], bool bf) {
    if (bf) {
        uint16x8_t h0 = vld1q_u16((const uint16_t *)(const void *)(g + k * 32));
        uint16x8_t h1 = vld1q_u16((const uint16_t *)(const void *)(g + k * 32 + 16));
        w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
        w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
        w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
        w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
        return;
    }
    float16x8_t h0 = vreinterpretq_f16_u8(vld1q_u8(g + k * 32));
    float16x8_t h1 = vreinterpretq_f16_u8(vld1q_u8(g + k * 32 + 16));
    w[0] = vcvt_f32_f16(vget_low_f16(h0));
    w[1] = vcvt_high_f32_f16(h0);
    w[2] = vcvt_f32_f16(vget_low_f16(h1));
    w[3] = vcvt_high_f32_f16(h1);
}

/* acc + w * lane l of x. The lane is an immediate: a switch, folded away
 * once the loop over l is unrolled (and -O0 builds still compile). */
static inline __attribute__((always_inline)) float32x4_t fma_lane(float32x4_t acc, float32x4_t w,
                                                                float32x4_t x, int l) {
    switch (l) {
    case 0: return vfmaq_laneq_f32(acc, w, x, 0);
    case 1: return vfmaq_laneq_f32(acc, w, x, 1);
    case 2: return vfmaq_laneq_f32(acc, w, x, 2);
    default: return vfmaq_laneq_f32(acc, w, x, 3);
    }
}

/* The loops over rows and quads are unrolled by pragma, as in ftile_run. */
static inline __attribute__((always_inline)) void pkf_run(const ix__pk_tile *a, int rx, bool bf) {
    const size_t ldx = a->xs / sizeof(float);
    const float *x = (const float *)(const void *)a->x;
    float32x4_t acc[PKF_RX][4];
    IX__UNROLL(4)
    for (int i = 0; i < rx; i++)
        IX__UNROLL(4)
        for (int q = 0; q < 4; q++) acc[i][q] = vdupq_n_f32(0.0f);
    size_t k = 0;
    for (; k + 4 <= a->k; k += 4) {
        float32x4_t xv[PKF_RX]; /* elements k..k+3 of each X row */
        IX__UNROLL(4)
        for (int i = 0; i < rx; i++) xv[i] = vld1q_f32(x + (size_t)i * ldx + k);
        IX__UNROLL(4)
        for (int l = 0; l < 4; l++) {
            float32x4_t w[4];
            pkf_w(a->w, k + (size_t)l, w, bf);
            IX__UNROLL(4)
            for (int i = 0; i < rx; i++)
                IX__UNROLL(4)
                for (int q = 0; q < 4; q++) acc[i][q] = fma_lane(acc[i][q], w[q], xv[i], l);
        }
    }
    for (; k < a->k; k++) {
        float32x4_t w[4];
        pkf_w(a->w, k, w, bf);
        IX__UNROLL(4)
        for (int i = 0; i < rx; i++)
            IX__UNROLL(4)
            for (int q = 0; q < 4; q++) acc[i][q] = vfmaq_n_f32(acc[i][q], w[q], x[(size_t)i * ldx + k]);
    }
    IX__UNROLL(4)
    for (int i = 0; i < rx; i++)
        IX__UNROLL(4)
        for (int q = 0; q < 4; q++) vst1q_f32(a->y + (size_t)i * a->ldy + 4 * q, acc[i][q]);
}

#define PKF(R)                                                                                 \
    static void pkf_##R(const ix__pk_tile *a) { pkf_run(a, R, false); }                         \
    static void pkbf_##R(const ix__pk_tile *a) { pkf_run(a, R, true); }
PKF(1) PKF(2) PKF(3) PKF(4)
#undef PKF
static const ix__pk_fn k_pkf[PKF_RX] = {pkf_1, pkf_2, pkf_3, pkf_4};
static const ix__pk_fn k_pkbf[PKF_RX] = {pkbf_1, pkbf_2, pkbf_3, pkbf_4};

/* F32 / F16 / BF16 weights, the traits' entry for both tables. */
void ix__mm_float_neon(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) { /* F16 and BF16 pack among the float types */
        ix__pk_walk(mm, n0, n1, mm->w_type == IX_DTYPE_BF16 ? k_pkbf : k_pkf, PKF_RX, PKF_MCHUNK, NULL);
        return;
    }
    int t = mm->w_type == IX_DTYPE_F32 ? 0 : mm->w_type == IX_DTYPE_F16 ? 1 : 2;
    ix__matmul_tiles(mm, n0, n1, k_ftiles[t], F_RX, F_RW);
}

/* ---- the other quantized types: block decoders for neon_q.h's kq tiles -------------------
 * A W row's 32-element block decoded in registers into signed codes q (two
 * int8x16), which the signed dots take as they are: no offsets to remove. */
typedef enum kq_type {
    KQ_Q5_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_Q4_1, KQ_Q5_1, KQ_IQ4_NL, KQ_IQ4_XS, KQ_Q2_K, KQ_Q3_K, KQ_N
} kq_type;
/* a scale per 16, the halves dotted apart (Q6_K, Q2_K, Q3_K) */
static inline bool kq_halves(kq_type t) { return t == KQ_Q6_K || t == KQ_Q2_K || t == KQ_Q3_K; }
/* X with one scale per 256 and the integer sums per super-block (kernels_int.h, x_super) */
static inline bool kq_x_super(kq_type t) { return t == KQ_Q2_K || t == KQ_Q3_K; }

/* v >> n per byte (n a run-time count) */
static inline __attribute__((always_inline)) uint8x16_t shr_u8(uint8x16_t v, int n) {
    return vshlq_u8(v, vdupq_n_s8((int8_t)-n));
}

/* Bits from..from+15 of qh as 0x10 in the bytes whose bit is set (Q5_0). */
static inline __attribute__((always_inline)) uint8x16_t q5_bits(uint32_t qh, int from) {
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)(qh >> from)), vdup_n_u8((uint8_t)(qh >> (from + 8))));
    return vandq_u8(vtstq_u8(v, vld1q_u8(bit)), vdupq_n_u8(16));
}

/* Part j of the (super-)block at p: elements 0-15 to *lo, 16-31 to *hi. */
static inline __attribute__((always_inline)) void kq_decode(kq_type t, const uint8_t *p, size_t j, int8x16_t *lo,
                                                           int8x16_t *hi) {
    const uint8x16_t nib = vdupq_n_u8(0x0f);
    uint8x16_t l, h;
    int off;
    if (t == KQ_IQ4_NL || t == KQ_IQ4_XS) { /* codes index the grid: the values are signed already */
        const int8x16_t grid = vld1q_s8(ix__iq4_grid);
        uint8x16_t v = vld1q_u8(p + (t == KQ_IQ4_NL ? 2 : 8 + 16 * j));
        *lo = vqtbl1q_s8(grid, vandq_u8(v, nib));
        *hi = vqtbl1q_s8(grid, vshrq_n_u8(v, 4));
        return;
    }
    if (t == KQ_Q5_0 || t == KQ_Q5_1 || t == KQ_Q4_1) {
        const size_t qs = t == KQ_Q5_0 ? 6 : t == KQ_Q5_1 ? 8 : 4;
        uint8x16_t v = vld1q_u8(p + qs);
        l = vandq_u8(v, nib);
        h = vshrq_n_u8(v, 4);
        if (t != KQ_Q4_1) { /* fifth bits: a u32 qh before the codes */
            uint32_t qh = ix__load_u32(p + qs - 4);
            l = vorrq_u8(l, q5_bits(qh, 0));
            h = vorrq_u8(h, q5_bits(qh, 16));
        }
        off = t == KQ_Q5_0 ? 16 : 0; /* Q4_1 / Q5_1: unsigned codes, the min term below */
    } else if (kq_x_super(t)) {
        /* 2-bit planes: element 32 (j % 4) + i of a 128-element half at bits 2 (j % 4) of byte i */
        const uint8_t *q = p + (t == KQ_Q2_K ? 16 : 32) + 32 * (j / 4);
        const uint8x16_t three = vdupq_n_u8(3);
        const int sh = 2 * (int)(j % 4);
        l = vandq_u8(shr_u8(vld1q_u8(q), sh), three);
        h = vandq_u8(shr_u8(vld1q_u8(q + 16), sh), three);
        if (t == KQ_Q3_K) { /* q + 4 = the 2 bits | bit j of hmask[i] << 2 */
            const uint8x16_t one = vdupq_n_u8(1);
            l = vorrq_u8(l, vshlq_n_u8(vandq_u8(shr_u8(vld1q_u8(p), (int)j), one), 2));
            h = vorrq_u8(h, vshlq_n_u8(vandq_u8(shr_u8(vld1q_u8(p + 16), (int)j), one), 2));
        }
        off = t == KQ_Q3_K ? 4 : 0;
    } else if (t == KQ_Q4_K || t == KQ_Q5_K) {
        const uint8_t *q = p + (t == KQ_Q5_K ? 48 : 16) + 32 * (j / 2);
        l = vandq_u8(shr_u8(vld1q_u8(q), 4 * (int)(j % 2)), nib);
        h = vandq_u8(shr_u8(vld1q_u8(q + 16), 4 * (int)(j % 2)), nib);
        if (t == KQ_Q5_K) { /* bit j of qh[i]: element i's fifth bit */
            const uint8x16_t one = vdupq_n_u8(1);
            l = vorrq_u8(l, vshlq_n_u8(vandq_u8(shr_u8(vld1q_u8(p + 16), (int)j), one), 4));
            h = vorrq_u8(h, vshlq_n_u8(vandq_u8(shr_u8(vld1q_u8(p + 32), (int)j), one), 4));
        }
        off = 0;
    } else {
        const size_t hf = j / 4, e = j % 4;
        const uint8_t *ql = p + 64 * hf + 32 * (e % 2), *qh = p + 128 + 32 * hf;
        const uint8x16_t three = vdupq_n_u8(3);
        l = vorrq_u8(vandq_u8(shr_u8(vld1q_u8(ql), e < 2 ? 0 : 4), nib),
                     vshlq_n_u8(vandq_u8(shr_u8(vld1q_u8(qh), 2 * (int)e), three), 4));
        h = vorrq_u8(vandq_u8(shr_u8(vld1q_u8(ql + 16), e < 2 ? 0 : 4), nib),
                     vshlq_n_u8(vandq_u8(shr_u8(vld1q_u8(qh + 16), 2 * (int)e), three), 4));
        off = 32;
    }
    *lo = vsubq_s8(vreinterpretq_s8_u8(l), vdupq_n_s8((int8_t)off));
    *hi = vsubq_s8(vreinterpretq_s8_u8(h), vdupq_n_s8((int8_t)off));
}

/* The fp16 values at p[r] + o of 4 rows as floats. */
static inline float32x4_t rows4_h(const uint8_t *const p[4], size_t o) {
    uint16_t h[4];
    for (int r = 0; r < 4; r++) h[r] = ix__load_u16(p[r] + o);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* ---- quantized matmul: the two instantiations of neon_q.h -------------------------------
 * The sdot copy is compiled for armv8.2-a + dotprod (GCC declares the sdot
 * intrinsics for that target, and any core with dotprod implements v8.2), in
 * a target region so the rest of the file stays baseline. clang 14's
 * arm_neon.h declares them only when the whole file targets dotprod, so
 * there the dotprod table is built only in that case. */
#define NQ_CAT2(a, b) a##b
#define NQ_CAT(a, b) NQ_CAT2(a, b)
#define NQ(name) NQ_CAT(name, NQ_SFX)

#define NQ_SDOT 0
#define NQ_SFX _mull
#define NQ_PATH neon
#include "kernels/neon_q.h"
#undef NQ_SDOT
#undef NQ_SFX
#undef NQ_PATH

#if defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__)
#define NEON_HAVE_SDOT 1
#if !defined(__ARM_FEATURE_DOTPROD)
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif
#define NQ_SDOT 1
#define NQ_SFX _sdot
#define NQ_PATH neondot
#include "kernels/neon_q.h"
#undef NQ_SDOT
#undef NQ_SFX
#undef NQ_PATH
#if !defined(__ARM_FEATURE_DOTPROD)
#pragma GCC pop_options
#endif
#else
/* no sdot build: the dotprod column is never reached (ix__kernels_neon hands
 * out the plain table), but the traits name it */
#define NEON_DOT_AS_PLAIN(t)                                                                     \
    void ix__mm_##t##_neondot(const ix_matmul *mm, size_t n0, size_t n1) { ix__mm_##t##_neon(mm, n0, n1); }
NEON_DOT_AS_PLAIN(q8_0) NEON_DOT_AS_PLAIN(q4_0) NEON_DOT_AS_PLAIN(q5_0) NEON_DOT_AS_PLAIN(q4_k)
NEON_DOT_AS_PLAIN(q5_k) NEON_DOT_AS_PLAIN(q6_k) NEON_DOT_AS_PLAIN(q4_1) NEON_DOT_AS_PLAIN(q5_1)
NEON_DOT_AS_PLAIN(iq4_nl) NEON_DOT_AS_PLAIN(iq4_xs) NEON_DOT_AS_PLAIN(q2_k) NEON_DOT_AS_PLAIN(q3_k)
#undef NEON_DOT_AS_PLAIN
#endif

/* ---- RoPE (adjacent pairs; NEOX is vecops.h's) --------------------------------------------- */
static void rope_head(float *x, const float *cs, size_t n_rot, ix_rope_mode mode) {
    if (mode == IX_ROPE_NEOX) {
        v_rope_neox(x, cs, n_rot);
        return;
    }
    size_t half = n_rot / 2, i = 0;
    for (; i + 4 <= half; i += 4) { /* ld2 splits 4 pairs into their first and second elements */
        float32x4x2_t v = vld2q_f32(x + 2 * i), r;
        float32x4_t c = vld1q_f32(cs + i), s = vld1q_f32(cs + half + i);
        r.val[0] = vfmsq_f32(vmulq_f32(v.val[0], c), v.val[1], s);
        r.val[1] = vfmaq_f32(vmulq_f32(v.val[0], s), v.val[1], c);
        vst2q_f32(x + 2 * i, r);
    }
    for (; i < half; i++) {
        float c = cs[i], s = cs[half + i], x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

#define NEON_TABLE(var, label, path_)                                                            \
    static const ix_kernel_table var = {                                                         \
        .isa = IX_ISA_NEON,                                                                      \
        .name = label,                                                                           \
        .fp16_to_fp32 = fp16_to_fp32,                                                            \
        .fp32_to_fp16 = fp32_to_fp16,                                                            \
        .bf16_to_fp32 = bf16_to_fp32,                                                            \
        .quantize_act = quantize_act,                                                            \
        .quantize_act_super = quantize_act_super,                                                \
        .path = path_,                                                                           \
        .rmsnorm = v_rmsnorm,                                                                    \
        .softmax = v_softmax,                                                                    \
        .silu_mul = v_silu_mul,                                                                  \
        .add = v_add,                                                                            \
        .rope_head = rope_head,                                                                  \
        .attn_add = v_attn_add,                                                                  \
    };
NEON_TABLE(k_neon, "neon", IX__PATH_NEON)
#if defined(NEON_HAVE_SDOT)
NEON_TABLE(k_neon_sdot, "neon-dotprod", IX__PATH_NEON_DOT)
#endif

const ix_kernel_table *ix__kernels_neon(bool dotprod) {
#if defined(NEON_HAVE_SDOT)
    if (dotprod) return &k_neon_sdot;
#endif
    (void)dotprod;
    return &k_neon;
}
