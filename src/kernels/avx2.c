/*
 * AVX2 kernels (with FMA and F16C). Compiled with those flags, so nothing here
 * may run before dispatch.c has checked the CPU.
 *
 * Quantized matmul follows avx512.c's 4-lane tile at half width: one ymm holds
 * the same block of 2 weight rows, 16 bytes per 128-bit lane; two shuffles and
 * two adds per block reduce each row's 4 int32 lanes to its exact dot, then
 * the canonical convert-and-FMA (kernels_int.h), so results match every other
 * path bit for bit. AVX2 has no vpdpbusd, so products go through vpmaddubsw
 * (unsigned x signed bytes -> saturating int16 pairs) and vpmaddwd. Q4_0 codes
 * are unsigned (0..15) and their +8 offset is removed with the q8a block
 * sums; Q8_0 takes |w| and moves w's sign onto x (vpsignb), since
 * (w + 128) * x pairs could saturate int16.
 *
 * Decode (one X row) on packed weights goes to lockstep tiles that read
 * several weight groups side by side, as avx512.c's do (pk_lock_pair,
 * pkf_lock below).
 *
 * Built twice: as itself (table "avx2") and, through avx2_vnni.c with
 * IX_AVX2_VNNI = 1 and -mavxvnni, as the table "avx2-vnni" for CPUs with
 * AVX-VNNI (256-bit vpdpbusd, VEX-encoded; Alder Lake and later, Zen 5).
 * There each vpmaddubsw + vpmaddwd (+ vpaddd) becomes one vpdpbusd over the
 * same operands; no pair sum saturates in either form (|w| <= 128 against
 * |x| <= 127, Q4_0 codes <= 15), so the int32 dots, and every bit after
 * them, are the same. Nothing else differs between the two objects.
 */
#ifndef IX_AVX2_VNNI
#define IX_AVX2_VNNI 0
#endif
#include "kernels/kernels_int.h"

#include <immintrin.h>
#include <math.h>

/* ---- vector vocabulary for vecops.h ------------------------------------------ */
#define VF __m256
#define VW 8

/* maskload/maskstore lanes for a tail of n < 8 */
static inline __m256i tail_mask(size_t n) {
    static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(m + 8 - n));
}

static inline __m256 load_h_n(const uint16_t *p, size_t n) {
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, n * 2);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp));
}

#define vf_zero() _mm256_setzero_ps()
#define vf_set1(f) _mm256_set1_ps(f)
#define vf_load(p) _mm256_loadu_ps(p)
#define vf_store(p, v) _mm256_storeu_ps((p), (v))
#define vf_load_n(p, n) _mm256_maskload_ps((p), tail_mask(n))
#define vf_store_n(p, v, n) _mm256_maskstore_ps((p), tail_mask(n), (v))
#define vf_load_h(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define vf_load_h_n(p, n) load_h_n((p), (n))
#define vf_add _mm256_add_ps
#define vf_sub _mm256_sub_ps
#define vf_mul _mm256_mul_ps
#define vf_div _mm256_div_ps
#define vf_max _mm256_max_ps
#define vf_fma _mm256_fmadd_ps

static inline float vf_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float vf_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x as in avx512.c, with 2^n built in the exponent field: n is kept within
 * the normal range and results below e^-87.3 (subnormal) are flushed to 0. */
static inline __m256 vf_exp(__m256 x) {
    __m256 zero_below = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33f), _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33f)), _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-126, 128]; 2^128 would overflow the field, so scale in two steps */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_and_ps(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), zero_below);
}

/* bf16 -> f32: the half goes to the top of the word */
#define vf_load_b(p)                                                                               \
    _mm256_castsi256_ps(                                                                           \
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p))), 16))

static inline __m256 load_b_n(const uint16_t *p, size_t n) {
    uint16_t tmp[8] = {0};
    memcpy(tmp, p, n * 2);
    return vf_load_b(tmp);
}
#define vf_load_b_n(p, n) load_b_n((p), (n))

/* ---- quantized K/V primitives (attn_q.h) ---- */
static void quantize_act(const float *x, void *dst, size_t k);
#define vq_quantize quantize_act
static inline float vq_half(uint16_t h) { return _cvtsh_ss(h); }

/* Codes i..i+7 of a block of L (i % 8 == 0) as exact int32 lanes (kernels_int.h). */
static inline __attribute__((always_inline)) __m256i vq_codes8(const uint8_t *codes, ix_kv_dtype t,
                                                              size_t i, size_t L) {
    if (t == IX_KV_Q8_0) return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(codes + i)));
    if (t == IX_KV_Q4_0) {
        bool lo = i < L / 2;
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + (lo ? i : i - L / 2))));
        b = lo ? _mm256_and_si256(b, _mm256_set1_epi32(15)) : _mm256_srli_epi32(b, 4);
        return _mm256_sub_epi32(b, _mm256_set1_epi32(8));
    }
    /* E4M3 x 512: (8 | m) << (e - 1), or m when e = 0; then the sign */
    __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(codes + i)));
    __m256i e = _mm256_and_si256(_mm256_srli_epi32(x, 3), _mm256_set1_epi32(15));
    __m256i m = _mm256_and_si256(x, _mm256_set1_epi32(7));
    __m256i normal = _mm256_cmpgt_epi32(e, _mm256_setzero_si256());
    m = _mm256_or_si256(m, _mm256_and_si256(normal, _mm256_set1_epi32(8)));
    __m256i sh = _mm256_max_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), _mm256_setzero_si256());
    __m256i mag = _mm256_sllv_epi32(m, sh);
    __m256i neg = _mm256_srai_epi32(_mm256_slli_epi32(x, 24), 31);
    return _mm256_sub_epi32(_mm256_xor_si256(mag, neg), neg);
}

/* Codes i..i+15 of a Q8_0 / Q4_0 block of L (i % 16 == 0) as int16 lanes. */
static inline __attribute__((always_inline)) __m256i vq_codes16_i8(const uint8_t *codes, ix_kv_dtype t,
                                                                  size_t i, size_t L) {
    if (t == IX_KV_Q8_0) return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(codes + i)));
    const __m128i m4 = _mm_set1_epi8(15);
    __m128i b;
    if (L == 32) {
        b = _mm_loadu_si128((const __m128i *)codes);
        b = i == 0 ? _mm_and_si128(b, m4) : _mm_and_si128(_mm_srli_epi16(b, 4), m4);
    } else { /* 8 bytes: their low nibbles, then their high ones */
        __m128i x = _mm_loadl_epi64((const __m128i *)codes);
        b = _mm_unpacklo_epi64(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
    }
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(b), _mm256_set1_epi16(8));
}

static inline __attribute__((always_inline)) int32_t vq_dot(const int8_t *q, const uint8_t *codes,
                                                            ix_kv_dtype t, size_t L) {
    __m256i acc = _mm256_setzero_si256();
    if (t != IX_KV_FP8_E4M3) /* 8-bit codes: int16 pair products (|q c| <= 127 * 128) */
        for (size_t i = 0; i < L; i += 16) {
            __m256i qv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + i)));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(qv, vq_codes16_i8(codes, t, i, L)));
        }
    else
    for (size_t i = 0; i < L; i += 8) {
        __m256i qv = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
        acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(qv, vq_codes8(codes, t, i, L)));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline __attribute__((always_inline)) void vq_axpy(float *o, float w, const uint8_t *codes,
                                                          ix_kv_dtype t, size_t L) {
    __m256 wv = _mm256_set1_ps(w);
    for (size_t i = 0; i < L; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wv, _mm256_cvtepi32_ps(vq_codes8(codes, t, i, L)),
                                                _mm256_loadu_ps(o + i)));
}

#include "kernels/vecops.h"

/* ---- conversions --------------------------------------------------------------- */
static void fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) vf_store(dst + i, vf_load_h(src + i));
    if (i < n) vf_store_n(dst + i, load_h_n(src + i, n - i), n - i);
}

static void fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    /* The rounding mode is an immediate: a macro, so -O0 builds compile too. */
#define rc (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(vf_load(src + i), rc));
    if (i < n) {
        uint16_t tmp[8];
        _mm_storeu_si128((__m128i *)tmp, _mm256_cvtps_ph(vf_load_n(src + i, n - i), rc));
        memcpy(dst + i, tmp, (n - i) * 2);
    }
}
#undef rc

static inline __m256 bf16x8(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static void bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) vf_store(dst + i, bf16x8(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = ix__bf16_to_fp32(ix__load_u16(src + i));
}

/* ---- activation quantization (q8a; same bits as generic.c) ------------------------ */
/* g blocks (1, or 8: quantize_act_super) share one scale */
static void quantize_act_g(const float *x, void *dst, size_t k, size_t g) {
    int8_t *qs;
    ix__q8a_blk *blk;
    ix__q8a_out(dst, k, &qs, &blk);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    float d = 0.0f, id = 0.0f;
    for (size_t b = 0; b < k / IX__QK; b++) {
        const float *xb = x + b * IX__QK;
        __m256 v[4];
        for (int j = 0; j < 4; j++) v[j] = vf_load(xb + 8 * j);
        if (b % g == 0) { /* this block's loads, then the group's other blocks */
            __m256 m = _mm256_setzero_ps();
            for (int j = 0; j < 4; j++) m = _mm256_max_ps(m, _mm256_and_ps(v[j], absmask));
            for (size_t j = 4; j < 4 * g; j++) m = _mm256_max_ps(m, _mm256_and_ps(vf_load(xb + 8 * j), absmask));
            d = ix__q8a_scale(vf_hmax(m), &id);
        }
        blk[b].d = d;
        __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int j = 0; j < 4; j++) /* cvtps rounds to nearest even, as nearbyintf */
            q[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[j], vid), lo), hi));
        /* packs interleave 128-bit lanes; the permute puts the bytes back in order */
        __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(qs + b * IX__QK), p8);
        /* the halves' sums side by side: lanes 0..3 the first 16, 4..7 the second */
        __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(q[0], q[2], 0x20), _mm256_permute2x128_si256(q[0], q[2], 0x31));
        sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_permute2x128_si256(q[1], q[3], 0x20),
                                                     _mm256_permute2x128_si256(q[1], q[3], 0x31)));
        sum = _mm256_hadd_epi32(sum, sum);
        sum = _mm256_hadd_epi32(sum, sum);
        ix__q8a_set_sums(&blk[b], _mm256_cvtsi256_si32(sum), _mm256_extract_epi32(sum, 4));
    }
}
static void quantize_act(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, 1); }
static void quantize_act_super(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, IX__SUPER_BLOCKS); }

/* ---- quantized matmul tiles -------------------------------------------------------- */
#define Q_RX 4 /* X rows per tile */
#define Q_RW 2 /* W rows per tile (one ymm; more would spill the 16 registers) */

static inline __m256i load2x16(const uint8_t *p0, const uint8_t *p1) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p0)),
                                   _mm_loadu_si128((const __m128i *)p1), 1);
}

static inline __attribute__((always_inline)) void qtile_run(const ix__tile *a, ix_dtype t, int rx,
                                                            bool pf) {
    const bool q8 = t == IX_DTYPE_Q8_0;
    const size_t bs = q8 ? IX__Q8_0_BYTES : IX__Q4_0_BYTES, nb = a->k / IX__QK, xs = a->xs;
    const __m256i nib = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    __m256 acc[Q_RX];
    for (int i = 0; i < rx; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (pf) ix__prefetch_ahead(a, Q_RW, b, nb);
        const uint8_t *p0 = a->w + b * bs, *p1 = p0 + a->ws;
        __m256i wl, wh, sl = _mm256_setzero_si256(), sh = sl; /* sl/sh: Q8_0 signs */
        if (q8) {
            sl = load2x16(p0 + 2, p1 + 2);
            sh = load2x16(p0 + 18, p1 + 18);
            wl = _mm256_abs_epi8(sl);
            wh = _mm256_abs_epi8(sh);
        } else {
            __m256i v = load2x16(p0 + 2, p1 + 2);
            wl = _mm256_and_si256(v, nib);
            wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
        }
        uint32_t h = (uint32_t)ix__load_u16(p0) | (uint32_t)ix__load_u16(p1) << 16;
        __m256 dw = _mm256_permutevar8x32_ps(
            _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h))), spread);
        for (int i = 0; i < rx; i++) {
            const uint8_t *xr = a->x + (size_t)i * xs;
            const int8_t *xq = (const int8_t *)xr + b * IX__QK;
            const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            __m256i xl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)xq));
            __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(xq + 16)));
            __m256i iv;
#if IX_AVX2_VNNI
            if (q8)
                iv = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), wl, _mm256_sign_epi8(xl, sl)),
                                             wh, _mm256_sign_epi8(xh, sh));
            else
                iv = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_set1_epi32(-2 * xb->s), wl, xl), wh, xh);
            (void)ones;
#else
            if (q8) {
                __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(wl, _mm256_sign_epi8(xl, sl)), ones);
                __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(wh, _mm256_sign_epi8(xh, sh)), ones);
                iv = _mm256_add_epi32(pl, ph);
            } else {
                __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(wl, xl), _mm256_maddubs_epi16(wh, xh));
                iv = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(-2 * xb->s));
            }
#endif
            /* exact per-row dots in every lane of the row's half, then the
             * canonical convert and FMA (kernels_int.h) */
            iv = _mm256_add_epi32(iv, _mm256_shuffle_epi32(iv, 0xb1));
            iv = _mm256_add_epi32(iv, _mm256_shuffle_epi32(iv, 0x4e));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), acc[i]);
        }
    }
    for (int i = 0; i < rx; i++) {
        float *y = a->y + (size_t)i * a->ldy;
        y[0] = _mm256_cvtss_f32(acc[i]);
        if (a->ncols > 1) y[1] = _mm_cvtss_f32(_mm256_extractf128_ps(acc[i], 1));
    }
}

#define QTILE_INST(T, R)                                                                       \
    static void qtile_##T##_##R(const ix__tile *a) {                                            \
        if (a->prefetch) qtile_run(a, IX_DTYPE_##T, R, true);                                    \
        else qtile_run(a, IX_DTYPE_##T, R, false);                                               \
    }
#define QTILE_ALL(T) QTILE_INST(T, 1) QTILE_INST(T, 2) QTILE_INST(T, 3) QTILE_INST(T, 4)
QTILE_ALL(Q8_0)
QTILE_ALL(Q4_0)
#define TILE_ROW(F, T) {F##_##T##_1, F##_##T##_2, F##_##T##_3, F##_##T##_4}
static const ix__tile_fn k_qtiles[2][Q_RX] = {TILE_ROW(qtile, Q8_0), TILE_ROW(qtile, Q4_0)};

/* ---- the other quantized types (row layout) ----------------------------------------------
 * avx512.c's kq_run at half width, on qtile_run's layout (2 W rows per ymm,
 * row r's 16 code bytes in 128-bit lane r): each 32-element block decoded in
 * registers into unsigned codes u = q + c, dotted with the X row, reduced to
 * the 2 rows' exact dots and finished with the canonical dot's integer
 * scale, offset and min terms (kernels_int.h); the generic path's bits.
 *   Q5_0  c = 16; the fifth bits spread from qh by a byte shuffle and compare;
 *   Q4_K  c = 0; the rows' 6-bit scales and mins decoded once per super-block;
 *   Q5_K  as Q4_K, with the fifth bits from qh;
 *   Q6_K  c = 32 and a scale per 16: the halves dotted and reduced apart. */
typedef enum kq_type {
    KQ_Q5_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_Q4_1, KQ_Q5_1, KQ_IQ4_NL, KQ_IQ4_XS, KQ_Q2_K, KQ_Q3_K, KQ_N
} kq_type;
/* a scale per 16, the halves dotted apart (Q6_K, Q2_K, Q3_K) */
static inline bool kq_halves(kq_type t) { return t == KQ_Q6_K || t == KQ_Q2_K || t == KQ_Q3_K; }
/* X with one scale per 256 and the integer sums per super-block (kernels_int.h, x_super) */
static inline bool kq_x_super(kq_type t) { return t == KQ_Q2_K || t == KQ_Q3_K; }
/* and, as avx512.c's:
 *   Q4_1, Q5_1  c = 0, one scale and min per block: min term m * s;
 *   IQ4_NL      the codes looked up (vpshufb) in the grid + 128 (c = 128) with
 *               VNNI; without, the grid values dotted as |w| times x with w's
 *               sign (vpsignb: w + 128 would saturate vpmaddubsw's pairs);
 *   IQ4_XS      as IQ4_NL with a signed scale per 32 (ix__sub_scales);
 *   Q2_K        c = 0, a scale and min per 16: halves apart as Q6_K's;
 *   Q3_K        c = 4 (2 bits | the hmask bit << 2), a signed scale per 16. */

static inline __attribute__((always_inline)) __m256i kq_dp(__m256i acc, __m256i w, __m256i x) {
#if IX_AVX2_VNNI
    return _mm256_dpbusd_avx_epi32(acc, w, x);
#else /* no int16 pair saturates at these code sizes: |pair| <= 2 * 63 * 127 */
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
#endif
}

/* kq_dp of signed codes (|w| <= 127) without VNNI: |w| times x with w's sign. */
static inline __attribute__((always_inline)) __m256i kq_dps(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)),
                                                   _mm256_set1_epi16(1)));
}

/* The row's exact dot in every lane of its half. */
static inline __attribute__((always_inline)) __m256i reduce2(__m256i iv) {
    iv = _mm256_add_epi32(iv, _mm256_shuffle_epi32(iv, 0xb1));
    return _mm256_add_epi32(iv, _mm256_shuffle_epi32(iv, 0x4e));
}

/* Row 0's value in the low half, row 1's in the high. */
static inline __m256i rows2_i32(int32_t v0, int32_t v1) {
    return _mm256_set_m128i(_mm_set1_epi32(v1), _mm_set1_epi32(v0));
}

/* The fp16 values at p0 and p1 as floats, row 0's in the low half. */
static inline __m256 rows2_h(const uint8_t *p0, const uint8_t *p1) {
    uint32_t h = (uint32_t)ix__load_u16(p0) | (uint32_t)ix__load_u16(p1) << 16;
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h))),
                                    _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* 16 bits of each row's qh (lane r: bits of qh_r from bit `from`) as 0x10 in
 * the bytes whose bit is set. */
static inline __m256i q5_bits(uint32_t qh0, uint32_t qh1, int from) {
    const __m256i v = _mm256_set_m128i(_mm_cvtsi32_si128((int)(qh1 >> from)), _mm_cvtsi32_si128((int)(qh0 >> from)));
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1,
                                            1, 1, 1, 1, 1, 1);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, spread), bit), bit);
    return _mm256_and_si256(m, _mm256_set1_epi8(16));
}

/* The sub-block scales of IQ4_XS and Q2_K for block j of the tile's 2 rows,
 * in rows2_i32's layout: *s0 / *s1 the first / second 16 elements' scale,
 * *m0 / *m1 their mins (Q2_K; else untouched). sv holds each row's first 16
 * bytes, loaded once per super-block: Q2_K's scales, IQ4_XS's scales_h (at 2)
 * and scales_l (at 4). The integers of ix__sub_scales by one vpshufb pick,
 * shifts and masks (as AVX-512's kq_sub_scales). Q3_K stays scalar here: its
 * tile, with the hmask bits, is short of ymm registers, and the vector decode
 * measured 1.1x slower. */
static inline __attribute__((always_inline)) void kq_sub_scales2(kq_type t, __m256i sv, size_t j, __m256i *s0,
                                                                 __m256i *s1, __m256i *m0, __m256i *m1) {
    const __m256i low4 = _mm256_set1_epi32(15);
    if (t == KQ_Q2_K) { /* byte s = 2j + k: scale | min << 4 */
        const uint32_t s = 2 * (uint32_t)j;
        __m256i u0 = _mm256_shuffle_epi8(sv, _mm256_set1_epi32((int)(0x80808000u | s)));
        __m256i u1 = _mm256_shuffle_epi8(sv, _mm256_set1_epi32((int)(0x80808000u | (s + 1))));
        *s0 = _mm256_and_si256(u0, low4);
        *s1 = _mm256_and_si256(u1, low4);
        *m0 = _mm256_srli_epi32(u0, 4);
        *m1 = _mm256_srli_epi32(u1, 4);
    } else { /* IQ4_XS, one scale per 32: nibble j % 2 of byte 4 + j / 2, bits 2j of the u16 at 2 */
        __m256i u = _mm256_shuffle_epi8(sv, _mm256_set1_epi32((int)(0x80030200u | (4 + (uint32_t)j / 2))));
        __m256i l = _mm256_and_si256(_mm256_srl_epi32(u, _mm_cvtsi32_si128((int)(4 * (j % 2)))), low4);
        __m256i h = _mm256_and_si256(_mm256_srl_epi32(u, _mm_cvtsi32_si128((int)(8 + 2 * j))), _mm256_set1_epi32(3));
        *s0 = *s1 = _mm256_sub_epi32(_mm256_or_si256(l, _mm256_slli_epi32(h, 4)), _mm256_set1_epi32(32));
    }
}

static inline __attribute__((always_inline)) void kq_run(const ix__tile *a, kq_type t, int rx, bool pf) {
    const size_t nb = a->k / IX__QK, ws = a->ws, xs = a->xs;
    const bool blk32 = t == KQ_Q5_0 || t == KQ_Q4_1 || t == KQ_Q5_1 || t == KQ_IQ4_NL; /* 32-element blocks */
    const size_t per = blk32 ? 1 : 8;
    const size_t bytes = t == KQ_Q5_0 ? 22 : t == KQ_Q4_K ? 144 : t == KQ_Q5_K ? 176 : t == KQ_Q6_K ? 210
                         : t == KQ_Q4_1 ? 20 : t == KQ_Q5_1 ? 24 : t == KQ_IQ4_NL ? 18 : t == KQ_IQ4_XS ? 136
                         : t == KQ_Q2_K ? 84 : 110;
    const bool k4 = t == KQ_Q4_K || t == KQ_Q5_K; /* 6-bit scales and mins per 32 */
    const bool q5 = t == KQ_Q5_0 || t == KQ_Q5_1;
    const bool m1 = t == KQ_Q4_1 || t == KQ_Q5_1; /* min term m * s */
    const bool iq = t == KQ_IQ4_NL || t == KQ_IQ4_XS;
    const bool halves = kq_halves(t);
    const bool vnni = IX_AVX2_VNNI;
    /* the code offset c over 4: each dword lane starts at -c s / 4 */
    const int c4 = t == KQ_Q5_0 ? 4 : t == KQ_Q6_K ? 8 : t == KQ_Q3_K ? 1 : iq && vnni ? 32 : 0;
    const __m256i nib = _mm256_set1_epi8(0x0f);
    int8_t grid[16];
    for (int i = 0; i < 16; i++) grid[i] = (int8_t)(ix__iq4_grid[i] ^ (vnni ? (int8_t)0x80 : 0)); /* + 128 as u8 */
    const __m256i vgrid = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)grid));
    __m256 acc[Q_RX];
    __m256i isum[Q_RX], imsum[Q_RX]; /* Q2_K, Q3_K: the super-block's integer sums */
    for (int i = 0; i < rx; i++) {
        acc[i] = _mm256_setzero_ps();
        isum[i] = imsum[i] = _mm256_setzero_si256();
    }
    uint8_t scm[2][16] = {{0}}; /* Q4_K: per row, the super-block's scales and mins */
    __m256 dw = _mm256_setzero_ps(), dm = dw;
    __m256i ssv = _mm256_setzero_si256(); /* IQ4_XS, Q2_K: the super-block's scale bytes (kq_sub_scales2) */
    __m256i raw[6]; /* Q6_K: ql and qh of a 128-element half, loaded once for its 4 blocks */
    for (int k = 0; k < 6; k++) raw[k] = _mm256_setzero_si256();
    for (size_t b = 0; b < nb; b++) {
        if (pf) ix__prefetch_ahead(a, Q_RW, b, nb);
        const size_t j = b % per;
        const uint8_t *p0 = a->w + b / per * bytes, *p1 = p0 + ws; /* the rows' (super-)blocks */
        __m256i wl, wh, sc0 = _mm256_setzero_si256(), sc1 = sc0, mn = sc0, mn1 = sc0;
        __m256 dsc = _mm256_setzero_ps(), dmn = dsc;
        if (q5) {
            const size_t qh_at = t == KQ_Q5_0 ? 2 : 4;
            __m256i v = load2x16(p0 + qh_at + 4, p1 + qh_at + 4);
            uint32_t h0 = ix__load_u32(p0 + qh_at), h1 = ix__load_u32(p1 + qh_at);
            wl = _mm256_or_si256(_mm256_and_si256(v, nib), q5_bits(h0, h1, 0));
            wh = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), nib), q5_bits(h0, h1, 16));
            dw = rows2_h(p0, p1);
            if (m1) dm = rows2_h(p0 + 2, p1 + 2);
        } else if (t == KQ_Q4_1 || iq) {
            const size_t o = t == KQ_Q4_1 ? 4 : t == KQ_IQ4_NL ? 2 : 8 + 16 * j;
            __m256i v = load2x16(p0 + o, p1 + o);
            wl = _mm256_and_si256(v, nib);
            wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
            if (iq) {
                wl = _mm256_shuffle_epi8(vgrid, wl);
                wh = _mm256_shuffle_epi8(vgrid, wh);
            }
            if (t != KQ_IQ4_XS || j == 0) dw = rows2_h(p0, p1);
            if (m1) dm = rows2_h(p0 + 2, p1 + 2);
        } else if (k4) {
            if (j == 0) {
                ix__k4_scales(p0 + 4, scm[0]);
                ix__k4_scales(p1 + 4, scm[1]);
                dw = rows2_h(p0, p1);
                dm = _mm256_xor_ps(rows2_h(p0 + 2, p1 + 2), _mm256_set1_ps(-0.0f)); /* -dmin, exactly */
            }
            const size_t o = (t == KQ_Q5_K ? 48 : 16) + 32 * (j / 2);
            const __m128i sh = _mm_cvtsi32_si128(4 * (int)(j % 2));
            wl = _mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + o, p1 + o), sh), nib);
            wh = _mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + o + 16, p1 + o + 16), sh), nib);
            if (t == KQ_Q5_K) { /* bit j of qh[i]: element i's fifth bit */
                const __m128i sj = _mm_cvtsi32_si128((int)j);
                const __m256i one = _mm256_set1_epi8(1);
                wl = _mm256_or_si256(wl, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + 16, p1 + 16), sj), one), 4));
                wh = _mm256_or_si256(wh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + 32, p1 + 32), sj), one), 4));
            }
            /* the unpack's float scales: d sc and -dmin mn, exact */
            dsc = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(rows2_i32(scm[0][j], scm[1][j])));
            dmn = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(rows2_i32(scm[0][8 + j], scm[1][8 + j])));
        } else if (kq_x_super(t)) {
            if (j == 0) {
                const size_t at = t == KQ_Q2_K ? 80 : 108;
                dw = rows2_h(p0 + at, p1 + at);
                if (t == KQ_Q2_K) dm = _mm256_xor_ps(rows2_h(p0 + 82, p1 + 82), _mm256_set1_ps(-0.0f)); /* -dmin */
            }
            /* 2-bit planes: element 32 (j % 4) + i of a 128-element half at bits 2 (j % 4) of byte i */
            const size_t o = (t == KQ_Q2_K ? 16 : 32) + 32 * (j / 4);
            const __m128i sh = _mm_cvtsi32_si128(2 * (int)(j % 4));
            const __m256i three = _mm256_set1_epi8(3);
            wl = _mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + o, p1 + o), sh), three);
            wh = _mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + o + 16, p1 + o + 16), sh), three);
            if (t == KQ_Q3_K) { /* u = q + 4 = the 2 bits | bit j of hmask[i] << 2 */
                const __m128i sj = _mm_cvtsi32_si128((int)j);
                const __m256i one = _mm256_set1_epi8(1);
                wl = _mm256_or_si256(wl, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(load2x16(p0, p1), sj), one), 2));
                wh = _mm256_or_si256(wh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(load2x16(p0 + 16, p1 + 16), sj), one), 2));
            }
        } else {
            if (j == 0) dw = rows2_h(p0 + 208, p1 + 208);
            const size_t h = j / 4, e = j % 4;
            if (e == 0)
                for (int k = 0; k < 6; k++) { /* ql[64 h ..] by 16, then qh[32 h ..] by 16 */
                    const size_t o = k < 4 ? 64 * h + 16 * (size_t)k : 128 + 32 * h + 16 * (size_t)(k - 4);
                    raw[k] = load2x16(p0 + o, p1 + o);
                }
            const __m128i sl = _mm_cvtsi32_si128(e < 2 ? 0 : 4), shh = _mm_cvtsi32_si128(2 * (int)e);
            const __m256i three = _mm256_set1_epi8(3);
            __m256i hl = _mm256_and_si256(_mm256_srl_epi16(raw[4], shh), three);
            __m256i hh = _mm256_and_si256(_mm256_srl_epi16(raw[5], shh), three);
            wl = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(raw[2 * (e % 2)], sl), nib), _mm256_slli_epi16(hl, 4));
            wh = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(raw[2 * (e % 2) + 1], sl), nib),
                                 _mm256_slli_epi16(hh, 4));
            sc0 = rows2_i32((int8_t)p0[192 + 2 * j], (int8_t)p1[192 + 2 * j]);
            sc1 = rows2_i32((int8_t)p0[193 + 2 * j], (int8_t)p1[193 + 2 * j]);
        }
        if (t == KQ_IQ4_XS || t == KQ_Q2_K) {
            if (j == 0) ssv = load2x16(p0, p1);
            kq_sub_scales2(t, ssv, j, &sc0, &sc1, &mn, &mn1);
        } else if (t == KQ_Q3_K) { /* scalar: measured faster here than the vector decode (16 ymm registers) */
            int32_t s[2][2], m[2][2];
            ix__sub_scales(IX_DTYPE_Q3_K, p0, j, s[0], m[0]);
            ix__sub_scales(IX_DTYPE_Q3_K, p1, j, s[1], m[1]);
            sc0 = rows2_i32(s[0][0], s[1][0]);
            sc1 = rows2_i32(s[0][1], s[1][1]);
        }
        for (int i = 0; i < rx; i++) {
            const uint8_t *xr = a->x + (size_t)i * xs;
            const int8_t *xq = (const int8_t *)xr + b * IX__QK;
            const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            const __m128i x16 = _mm_loadu_si128((const __m128i *)xq);
            const __m256i xl = _mm256_broadcastsi128_si256(x16);
            const __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(xq + 16)));
            const __m256 sx = _mm256_set1_ps(xb->d);
            __m256i idot;
            int32_t s0 = 0, s1 = 0;
            if (halves) {
                s0 = xb->s0, s1 = xb->s - xb->s0; /* the halves' sums (q8a) */
                __m256i il = reduce2(kq_dp(_mm256_set1_epi32(-c4 * s0), wl, xl));
                __m256i ih = reduce2(kq_dp(_mm256_set1_epi32(-c4 * s1), wh, xh));
                idot = _mm256_add_epi32(_mm256_mullo_epi32(sc0, il), _mm256_mullo_epi32(sc1, ih));
            } else {
                const __m256i bias = _mm256_set1_epi32(-c4 * xb->s);
                idot = reduce2(iq && !vnni ? kq_dps(kq_dps(bias, wl, xl), wh, xh) : kq_dp(kq_dp(bias, wl, xl), wh, xh));
                if (t == KQ_IQ4_XS) idot = _mm256_mullo_epi32(sc0, idot);
            }
            if (kq_x_super(t)) { /* the integer sums per super-block */
                isum[i] = _mm256_add_epi32(isum[i], idot);
                if (t == KQ_Q2_K)
                    imsum[i] = _mm256_add_epi32(imsum[i], _mm256_add_epi32(_mm256_mullo_epi32(mn, _mm256_set1_epi32(s0)),
                                                                           _mm256_mullo_epi32(mn1, _mm256_set1_epi32(s1))));
                if (j == 7) {
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(dw, sx), acc[i]);
                    if (t == KQ_Q2_K) acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imsum[i]), _mm256_mul_ps(dm, sx), acc[i]);
                    isum[i] = imsum[i] = _mm256_setzero_si256();
                }
                continue;
            }
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(idot), _mm256_mul_ps(k4 ? dsc : dw, sx), acc[i]);
            if (k4) { /* the min_sx form */
                acc[i] = _mm256_fmadd_ps(dmn, _mm256_set1_ps(xb->sd), acc[i]);
            } else if (m1) {
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(xb->fs), _mm256_mul_ps(dm, sx), acc[i]);
            }
        }
    }
    for (int i = 0; i < rx; i++) {
        float *y = a->y + (size_t)i * a->ldy;
        y[0] = _mm256_cvtss_f32(acc[i]);
        if (a->ncols > 1) y[1] = _mm_cvtss_f32(_mm256_extractf128_ps(acc[i], 1));
    }
}

#define KQ_INST(T, R)                                                                          \
    static void kq_##T##_##R(const ix__tile *a) {                                               \
        if (a->prefetch) kq_run(a, KQ_##T, R, true);                                            \
        else kq_run(a, KQ_##T, R, false);                                                       \
    }
#define KQ_ALL(T) KQ_INST(T, 1) KQ_INST(T, 2) KQ_INST(T, 3) KQ_INST(T, 4)
KQ_ALL(Q5_0)
KQ_ALL(Q4_K)
KQ_ALL(Q5_K)
KQ_ALL(Q6_K)
KQ_ALL(Q4_1)
KQ_ALL(Q5_1)
KQ_ALL(IQ4_NL)
KQ_ALL(IQ4_XS)
KQ_ALL(Q2_K)
KQ_ALL(Q3_K)
static const ix__tile_fn k_kqtiles[KQ_N][Q_RX] = {TILE_ROW(kq, Q5_0),   TILE_ROW(kq, Q4_K),   TILE_ROW(kq, Q5_K),
                                                  TILE_ROW(kq, Q6_K),   TILE_ROW(kq, Q4_1),   TILE_ROW(kq, Q5_1),
                                                  TILE_ROW(kq, IQ4_NL), TILE_ROW(kq, IQ4_XS), TILE_ROW(kq, Q2_K),
                                                  TILE_ROW(kq, Q3_K)};

/* ---- float matmul tiles ----------------------------------------------------------------- */
#define F_RX 2
#define F_RW 4

static inline __attribute__((always_inline)) __m256 ldw(ix_dtype t, const uint8_t *row, size_t k) {
    if (t == IX_DTYPE_F32) return _mm256_loadu_ps((const float *)(const void *)(row + 4 * k));
    __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * k));
    return t == IX_DTYPE_F16 ? _mm256_cvtph_ps(h) : bf16x8(h);
}

/* The last n < 8 elements, zero-padded (copied: there is no 16-bit maskload). */
static inline __attribute__((always_inline)) __m256 ldw_n(ix_dtype t, const uint8_t *row, size_t k,
                                                          size_t n) {
    if (t == IX_DTYPE_F32) return _mm256_maskload_ps((const float *)(const void *)(row + 4 * k), tail_mask(n));
    uint16_t tmp[8] = {0};
    memcpy(tmp, row + 2 * k, n * 2);
    __m128i h = _mm_loadu_si128((const __m128i *)tmp);
    return t == IX_DTYPE_F16 ? _mm256_cvtph_ps(h) : bf16x8(h);
}

static inline __attribute__((always_inline)) void ftile_run(const ix__tile *a, ix_dtype t, int rx,
                                                            bool pf) {
    __m256 acc[F_RX][F_RW];
    for (int i = 0; i < rx; i++)
        for (int j = 0; j < F_RW; j++) acc[i][j] = _mm256_setzero_ps();
    const size_t ws = a->ws, xs = a->xs, K = a->k;
    size_t k = 0;
    for (; k + 8 <= K; k += 8) {
        if (pf) ix__prefetch_ahead(a, F_RW, k / 8, K / 8);
        __m256 w[F_RW];
        for (int j = 0; j < F_RW; j++) w[j] = ldw(t, a->w + (size_t)j * ws, k);
        for (int i = 0; i < rx; i++) {
            __m256 x = _mm256_loadu_ps((const float *)(const void *)(a->x + (size_t)i * xs) + k);
            for (int j = 0; j < F_RW; j++) acc[i][j] = _mm256_fmadd_ps(w[j], x, acc[i][j]);
        }
    }
    if (k < K) {
        size_t n = K - k;
        __m256 w[F_RW];
        for (int j = 0; j < F_RW; j++) w[j] = ldw_n(t, a->w + (size_t)j * ws, k, n);
        for (int i = 0; i < rx; i++) {
            __m256 x = _mm256_maskload_ps((const float *)(const void *)(a->x + (size_t)i * xs) + k, tail_mask(n));
            for (int j = 0; j < F_RW; j++) acc[i][j] = _mm256_fmadd_ps(w[j], x, acc[i][j]);
        }
    }
    for (int i = 0; i < rx; i++)
        for (int j = 0; j < a->ncols; j++) a->y[(size_t)i * a->ldy + j] = vf_hsum(acc[i][j]);
}

#define FTILE_INST(T, R)                                                                       \
    static void ftile_##T##_##R(const ix__tile *a) {                                            \
        if (a->prefetch) ftile_run(a, IX_DTYPE_##T, R, true);                                    \
        else ftile_run(a, IX_DTYPE_##T, R, false);                                               \
    }
FTILE_INST(F32, 1)
FTILE_INST(F32, 2)
FTILE_INST(F16, 1)
FTILE_INST(F16, 2)
FTILE_INST(BF16, 1)
FTILE_INST(BF16, 2)
static const ix__tile_fn k_ftiles[3][F_RX] = {
    {ftile_F32_1, ftile_F32_2}, {ftile_F16_1, ftile_F16_2}, {ftile_BF16_1, ftile_BF16_2}};

/* ---- packed quantized weights (ix_kernels_pack) ------------------------------------------
 * avx512.c's packed tile at half width: a 64-byte plane of a packed block is
 * two ymm, W rows 0-7 and 8-15 (one row per 32-bit lane), each multiplied
 * with the X row's dword broadcast; the plane loop is outermost so a loaded
 * plane serves every X row of the tile. Exact int32 dots per lane, then the
 * canonical convert-and-FMA. */
#define PK_RX 4
#define PK_MCHUNK 128

static inline __attribute__((always_inline)) __m256i pk_dp(__m256i acc, __m256i w, const void *x, bool q8) {
    __m256i bx = _mm256_set1_epi32((int32_t)ix__load_u32(x));
#if IX_AVX2_VNNI
    if (!q8) return _mm256_dpbusd_avx_epi32(acc, w, bx);
    return _mm256_dpbusd_avx_epi32(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(bx, w));
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (!q8) return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, bx), ones));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(bx, w)), ones));
#endif
}

static inline __attribute__((always_inline)) void pk_run(const ix__pk_tile *a, bool q8, int rx) {
    const size_t ub = (q8 ? 512 : 256) + 2 * IX__PK, nb = a->k / IX__QK; /* a unit: the block's codes, its scales */
    const __m256i nib = _mm256_set1_epi8(0x0f);
    for (int h = 0; h < 2; h++) { /* W rows 8h..8h+7 */
        __m256 acc[PK_RX];
        for (int i = 0; i < rx; i++) acc[i] = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *c = a->w + b * ub + 32 * h;
            __m256i dot[PK_RX];
            for (int i = 0; i < rx; i++) {
                const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(a->x + (size_t)i * a->xs + a->blk_off) + b;
                dot[i] = _mm256_set1_epi32(q8 ? 0 : xb->neg8s);
            }
            for (int j = 0; j < (q8 ? 8 : 4); j++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(c + 64 * j));
                __m256i lo = q8 ? v : _mm256_and_si256(v, nib);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib); /* Q4_0 only */
                for (int i = 0; i < rx; i++) {
                    const uint8_t *xq = a->x + (size_t)i * a->xs + b * IX__QK + 4 * j;
                    dot[i] = pk_dp(dot[i], lo, xq, q8);
                    if (!q8) dot[i] = pk_dp(dot[i], hi, xq + 16, false);
                }
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a->scales + b * ub + 16 * h)));
            for (int i = 0; i < rx; i++) {
                const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(a->x + (size_t)i * a->xs + a->blk_off) + b;
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), acc[i]);
            }
        }
        for (int i = 0; i < rx; i++) _mm256_storeu_ps(a->y + (size_t)i * a->ldy + 8 * h, acc[i]);
    }
}

/* Decode's lockstep tile (one X row, IX__PK_LOCK groups): pk_run's
 * arithmetic for rx = 1, but both halves of a group from each 64-byte line
 * in one pass and two groups side by side, so each line is loaded once and
 * two forward streams are in flight instead of one (the registers hold no
 * more: 2 groups x 2 halves x (int dot + float sum)). Same bits as pk_run. */

/* Groups w and w + gstride (scales sc and sc + gstride) into y and y + ygs. */
static inline __attribute__((always_inline)) void pk_lock_pair(const ix__pk_tile *a, const uint8_t *w,
                                                                const uint8_t *sc, float *y, bool q8) {
    enum { G = 2 };
    const size_t cb = q8 ? 512 : 256, ub = cb + 2 * IX__PK, nb = a->k / IX__QK, gs = a->gstride;
    const __m256i nib = _mm256_set1_epi8(0x0f);
    __m256 acc[G][2];
    for (int g = 0; g < G; g++) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *c = w + b * ub, *xq = a->x + b * IX__QK;
        const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(a->x + a->blk_off) + b;
        /* each line of the streams once, IX__PK_LOCK_PF ahead */
        ix__pk_pf_lines(w, gs, G, b * ub + IX__PK_LOCK_PF, (b + 1) * ub + IX__PK_LOCK_PF, false);
        __m256i dot[G][2];
        const __m256i d0 = _mm256_set1_epi32(q8 ? 0 : xb->neg8s);
        for (int g = 0; g < G; g++) dot[g][0] = dot[g][1] = d0;
        for (int j = 0; j < (q8 ? 8 : 4); j++)
            for (int g = 0; g < G; g++)
                for (int h = 0; h < 2; h++) {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(c + g * gs + 64 * j + 32 * h));
                    if (q8) {
                        dot[g][h] = pk_dp(dot[g][h], v, xq + 4 * j, true);
                    } else {
                        dot[g][h] = pk_dp(dot[g][h], _mm256_and_si256(v, nib), xq + 4 * j, false);
                        dot[g][h] = pk_dp(dot[g][h], _mm256_and_si256(_mm256_srli_epi16(v, 4), nib), xq + 4 * j + 16,
                                          false);
                    }
                }
        const __m256 xd = _mm256_set1_ps(xb->d);
        for (int g = 0; g < G; g++)
            for (int h = 0; h < 2; h++) {
                const __m256 dw =
                    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(sc + g * gs + b * ub + 16 * h)));
                acc[g][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[g][h]), _mm256_mul_ps(dw, xd), acc[g][h]);
            }
    }
    for (int g = 0; g < G; g++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(y + g * a->ygs + 8 * h, acc[g][h]);
}

static inline __attribute__((always_inline)) void pk_lock_run(const ix__pk_tile *a, bool q8) {
    for (size_t p = 0; p < IX__PK_LOCK; p += 2)
        pk_lock_pair(a, a->w + p * a->gstride, a->scales + p * a->gstride, a->y + p * a->ygs, q8);
}
static void pk_lock_q8(const ix__pk_tile *a) { pk_lock_run(a, true); }
static void pk_lock_q4(const ix__pk_tile *a) { pk_lock_run(a, false); }
static const ix__pk_fn k_lock_q8[IX__PK_LOCK_RX] = {pk_lock_q8}, k_lock_q4[IX__PK_LOCK_RX] = {pk_lock_q4};

#define PK_INST(T, R) static void pk_##T##_##R(const ix__pk_tile *a) { pk_run(a, IX_DTYPE_##T == IX_DTYPE_Q8_0, R); }
PK_INST(Q8_0, 1) PK_INST(Q8_0, 2) PK_INST(Q8_0, 3) PK_INST(Q8_0, 4)
PK_INST(Q4_0, 1) PK_INST(Q4_0, 2) PK_INST(Q4_0, 3) PK_INST(Q4_0, 4)
static const ix__pk_fn k_pk[2][PK_RX] = {{pk_Q8_0_1, pk_Q8_0_2, pk_Q8_0_3, pk_Q8_0_4},
                                        {pk_Q4_0_1, pk_Q4_0_2, pk_Q4_0_3, pk_Q4_0_4}};

/* F16 packed weights (avx512.c's pkf at half width): element k of the 16
 * rows is two vcvtph2ps, rows 0-7 and 8-15, each FMAed with the X row's
 * element k broadcast. */
#define PKF_RX 4
#define PKF_MCHUNK 48

/* The 8 halves at p (16-byte aligned group data) as floats, exactly. */
static inline __attribute__((always_inline)) __m256 pkf_ld(const uint8_t *p, bool bf) {
    const __m128i h = _mm_load_si128((const __m128i *)(const void *)p);
    return bf ? bf16x8(h) : _mm256_cvtph_ps(h);
}

static inline __attribute__((always_inline)) void pkf_run(const ix__pk_tile *a, int rx, bool bf) {
    const size_t ldx = a->xs / sizeof(float);
    const float *x = (const float *)(const void *)a->x;
    __m256 acc[PKF_RX][2];
    for (int i = 0; i < rx; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (size_t k = 0; k < a->k; k++) {
        __m256 w0 = pkf_ld(a->w + k * 32, bf), w1 = pkf_ld(a->w + k * 32 + 16, bf);
        for (int i = 0; i < rx; i++) {
            __m256 xv = _mm256_broadcast_ss(x + (size_t)i * ldx + k);
            acc[i][0] = _mm256_fmadd_ps(w0, xv, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(w1, xv, acc[i][1]);
        }
    }
    for (int i = 0; i < rx; i++) {
        _mm256_storeu_ps(a->y + (size_t)i * a->ldy, acc[i][0]);
        _mm256_storeu_ps(a->y + (size_t)i * a->ldy + 8, acc[i][1]);
    }
}

/* The F16 / BF16 lockstep tile: pkf_run's arithmetic for one X row (each half's
 * sum one FMA chain over k, as there), IX__PK_LOCK groups side by side: four
 * streams in flight and eight independent chains instead of two. */
static inline __attribute__((always_inline)) void pkf_lock_run(const ix__pk_tile *a, bool bf) {
    enum { G = IX__PK_LOCK };
    const size_t gs = a->gstride;
    const float *x = (const float *)(const void *)a->x;
    __m256 acc[G][2];
    for (int g = 0; g < G; g++) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (size_t k = 0; k < a->k; k++) {
        const __m256 xv = _mm256_broadcast_ss(x + k);
        for (int g = 0; g < G; g++) {
            const uint8_t *w = a->w + g * gs + k * 32;
            if (!(k & 1)) /* one per 64-byte line */
                __builtin_prefetch(a->w + g * gs + k * 32 + IX__PK_LOCK_PF, 0, IX__PF_LOC);
            acc[g][0] = _mm256_fmadd_ps(pkf_ld(w, bf), xv, acc[g][0]);
            acc[g][1] = _mm256_fmadd_ps(pkf_ld(w + 16, bf), xv, acc[g][1]);
        }
    }
    for (int g = 0; g < G; g++) {
        _mm256_storeu_ps(a->y + g * a->ygs, acc[g][0]);
        _mm256_storeu_ps(a->y + g * a->ygs + 8, acc[g][1]);
    }
}

static void pkf_lock(const ix__pk_tile *a) { pkf_lock_run(a, false); }
static void pkbf_lock(const ix__pk_tile *a) { pkf_lock_run(a, true); }
/* one X row only: 16 vector registers hold no more accumulators */
static const ix__pk_fn k_pkf_lock[IX__PK_LOCK_RX] = {pkf_lock}, k_pkbf_lock[IX__PK_LOCK_RX] = {pkbf_lock};

#define PKF_INST(R)                                                                            \
    static void pkf_##R(const ix__pk_tile *a) { pkf_run(a, R, false); }                         \
    static void pkbf_##R(const ix__pk_tile *a) { pkf_run(a, R, true); }
PKF_INST(1) PKF_INST(2) PKF_INST(3) PKF_INST(4)
static const ix__pk_fn k_pkf[PKF_RX] = {pkf_1, pkf_2, pkf_3, pkf_4};
static const ix__pk_fn k_pkbf[PKF_RX] = {pkbf_1, pkbf_2, pkbf_3, pkbf_4};

/* ---- the traits' entries (quants.c): one per weight type ---------------------------------- */
#if IX_AVX2_VNNI
#define MM(t) ix__mm_##t##_avx2vnni
#else
#define MM(t) ix__mm_##t##_avx2
#endif

void MM(q8_0)(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pk[0], PK_RX, PK_MCHUNK, k_lock_q8);
    else ix__matmul_tiles(mm, n0, n1, k_qtiles[0], Q_RX, Q_RW);
}

void MM(q4_0)(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pk[1], PK_RX, PK_MCHUNK, k_lock_q4);
    else ix__matmul_tiles(mm, n0, n1, k_qtiles[1], Q_RX, Q_RW);
}

/* the packed forms beyond Q8_0 / Q4_0 have tiles on AVX-512 only (ix_kernels_pack_pays): read here
 * exactly, slowly */
#define MM_KP(t, T)                                                                            \
    void MM(t)(const ix_matmul *mm, size_t n0, size_t n1) {                                    \
        if (mm->w_packed) ix__mm_q_generic(mm, n0, n1);                                       \
        else ix__matmul_tiles(mm, n0, n1, k_kqtiles[KQ_##T], Q_RX, Q_RW);                      \
    }
MM_KP(q4_k, Q4_K)
MM_KP(q5_k, Q5_K)
MM_KP(q6_k, Q6_K)
MM_KP(q5_0, Q5_0)
MM_KP(q4_1, Q4_1)
MM_KP(q5_1, Q5_1)
MM_KP(iq4_nl, IQ4_NL)
MM_KP(iq4_xs, IQ4_XS)
MM_KP(q2_k, Q2_K)
MM_KP(q3_k, Q3_K)

void MM(f32)(const ix_matmul *mm, size_t n0, size_t n1) { ix__matmul_tiles(mm, n0, n1, k_ftiles[0], F_RX, F_RW); }

void MM(f16)(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pkf, PKF_RX, PKF_MCHUNK, k_pkf_lock);
    else ix__matmul_tiles(mm, n0, n1, k_ftiles[1], F_RX, F_RW);
}

void MM(bf16)(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pkbf, PKF_RX, PKF_MCHUNK, k_pkbf_lock);
    else ix__matmul_tiles(mm, n0, n1, k_ftiles[2], F_RX, F_RW);
}

/* ---- RoPE ------------------------------------------------------------------------------- */
static void rope_head(float *x, const float *cs, size_t n_rot, ix_rope_mode mode) {
    if (mode == IX_ROPE_NEOX) {
        v_rope_neox(x, cs, n_rot);
        return;
    }
    size_t half = n_rot / 2, i = 0;
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const __m256 neg_even = _mm256_castsi256_ps(_mm256_set1_epi64x(0x80000000LL));
    for (; i + 4 <= half; i += 4) {
        __m256 c = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
        __m256 s = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + half + i)), dup);
        __m256 v = _mm256_loadu_ps(x + 2 * i);
        __m256 sw = _mm256_permute_ps(v, 0xb1);
        _mm256_storeu_ps(x + 2 * i, _mm256_fmadd_ps(sw, _mm256_xor_ps(s, neg_even), _mm256_mul_ps(v, c)));
    }
    for (; i < half; i++) {
        float c = cs[i], s = cs[half + i], x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

static const ix_kernel_table k_avx2 = {
    .isa = IX_ISA_AVX2,
    .name = IX_AVX2_VNNI ? "avx2-vnni" : "avx2",
    .fp16_to_fp32 = fp16_to_fp32,
    .fp32_to_fp16 = fp32_to_fp16,
    .bf16_to_fp32 = bf16_to_fp32,
    .quantize_act = quantize_act,
    .quantize_act_super = quantize_act_super,
    .path = IX_AVX2_VNNI ? IX__PATH_AVX2_VNNI : IX__PATH_AVX2,
    .rmsnorm = v_rmsnorm,
    .softmax = v_softmax,
    .silu_mul = v_silu_mul,
    .add = v_add,
    .rope_head = rope_head,
    .attn_add = v_attn_add,
};

#if IX_AVX2_VNNI
const ix_kernel_table *ix__kernels_avx2_vnni(void) { return &k_avx2; }
#elif defined(IX_KERNELS_HAVE_AVX2_VNNI)
const ix_kernel_table *ix__kernels_avx2(bool vnni) { return vnni ? ix__kernels_avx2_vnni() : &k_avx2; }
#else /* the compiler has no -mavxvnni: this table serves both */
const ix_kernel_table *ix__kernels_avx2(bool vnni) {
    (void)vnni;
    return &k_avx2;
}
#endif
