/*
 * AVX-512 kernels (F + BW + VL, with VNNI and F16C). Compiled with AVX-512
 * flags, so nothing here may run before dispatch.c has checked the CPU. Two
 * tables: VNNI (vpdpbusd) and BW-only (vpmaddubsw + vpmaddwd).
 *
 * Quantized matmul (Q8_0 / Q4_0 weights x q8a activations) has two tiles,
 * both computing the canonical dot of kernels_int.h, so they give the same
 * bits and can be mixed freely:
 *   - the 4-lane tile (decode, and every M on BW): one zmm holds the same
 *     block of 4 W rows, 16 bytes per 128-bit lane; a row's dot ends in 4
 *     int32 lanes, and a few shuffles per block reduce 8 rows at once;
 *   - the wide tile (VNNI, M >= 4): 16 W rows transposed in registers so each
 *     lane is one row, against X dwords broadcast from memory; no reduction,
 *     and the transpose is shared by up to 16 X rows.
 * On this class of CPU every 512-bit ALU op competes for the same ~2 slots
 * per cycle and broadcast loads are free, so the tiles are designed by
 * counting zmm ops per multiply-add (docs/kernels.md).
 *
 * vpdpbusd multiplies unsigned by signed bytes. Q4_0 codes are already
 * unsigned (0..15, value = code - 8); Q8_0 codes are made unsigned by XOR 0x80
 * (= code + 128). The offsets come back out through the q8a block sums s:
 * sum (w + c) x = sum w x + c s, and -c s starts the accumulator so the dots
 * end exact. Without VNNI, Q8_0 takes |w| and moves w's sign onto x instead,
 * because (w + 128) x pairs could saturate vpmaddubsw's int16 sums.
 */
#include "kernels/kernels_int.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <math.h>

/* ---- vector vocabulary for vecops.h ------------------------------------------ */
#define VF __m512
#define VW 16
static inline __mmask16 tail_mask(size_t n) { return (__mmask16)((1u << n) - 1); }
#define vf_zero() _mm512_setzero_ps()
#define vf_set1(f) _mm512_set1_ps(f)
#define vf_load(p) _mm512_loadu_ps(p)
#define vf_store(p, v) _mm512_storeu_ps((p), (v))
#define vf_load_n(p, n) _mm512_maskz_loadu_ps(tail_mask(n), (p))
#define vf_store_n(p, v, n) _mm512_mask_storeu_ps((p), tail_mask(n), (v))
#define vf_load_h(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define vf_load_h_n(p, n) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), (p)))
#define vf_add _mm512_add_ps
#define vf_sub _mm512_sub_ps
#define vf_mul _mm512_mul_ps
#define vf_div _mm512_div_ps
#define vf_max _mm512_max_ps
#define vf_fma _mm512_fmadd_ps
#define vf_hsum _mm512_reduce_add_ps
#define vf_hmax _mm512_reduce_max_ps

/* e^x = 2^n * e^r, n = round(x / ln 2), |r| <= ln2 / 2, e^r by its degree-6
 * Taylor polynomial (truncation < 1.2e-7 relative). scalef does the 2^n with
 * correct underflow to 0 and overflow to inf. */
static inline __m512 vf_exp(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.7f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* bf16 -> f32: the half goes to the top of the word */
#define vf_load_b(p)                                                                               \
    _mm512_castsi512_ps(                                                                           \
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(p))), 16))
#define vf_load_b_n(p, n)                                                                          \
    _mm512_castsi512_ps(                                                                           \
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail_mask(n), (p))), 16))

/* ---- quantized K/V primitives (attn_q.h) ---- */
static void quantize_act(const float *x, void *dst, size_t k);
#define vq_quantize quantize_act
static inline float vq_half(uint16_t h) { return _cvtsh_ss(h); }

/* Codes i..i+15 of a block of L (i = 0, or 16 when L = 32) as exact int32
 * lanes (kernels_int.h). */
static inline __attribute__((always_inline)) __m512i vq_codes16(const uint8_t *codes, ix_kv_dtype t,
                                                               size_t i, size_t L) {
    if (t == IX_KV_Q8_0) return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(codes + i)));
    if (t == IX_KV_Q4_0) {
        __m512i b;
        if (L == 32) {
            b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)codes));
            b = i == 0 ? _mm512_and_si512(b, _mm512_set1_epi32(15)) : _mm512_srli_epi32(b, 4);
        } else { /* 8 bytes: lanes 0-7 their low nibbles, lanes 8-15 their high ones */
            __m128i x = _mm_loadl_epi64((const __m128i *)codes);
            b = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(x, x));
            b = _mm512_srlv_epi32(b, _mm512_set_epi32(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0));
            b = _mm512_and_si512(b, _mm512_set1_epi32(15));
        }
        return _mm512_sub_epi32(b, _mm512_set1_epi32(8));
    }
    /* E4M3 x 512: (8 | m) << (e - 1), or m when e = 0; then the sign */
    __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + i)));
    __m512i e = _mm512_and_si512(_mm512_srli_epi32(x, 3), _mm512_set1_epi32(15));
    __m512i m = _mm512_and_si512(x, _mm512_set1_epi32(7));
    __mmask16 normal = _mm512_cmpgt_epi32_mask(e, _mm512_setzero_si512());
    m = _mm512_mask_or_epi32(m, normal, m, _mm512_set1_epi32(8));
    __m512i sh = _mm512_max_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), _mm512_setzero_si512());
    __m512i mag = _mm512_sllv_epi32(m, sh);
    __mmask16 neg = _mm512_test_epi32_mask(x, _mm512_set1_epi32(0x80));
    return _mm512_mask_sub_epi32(mag, neg, _mm512_setzero_si512(), mag);
}

/* The 32 (or 16) codes of a Q8_0 / Q4_0 block as int16 lanes (the rest 0 for L = 16). */
static inline __attribute__((always_inline)) __m512i vq_codes32_i8(const uint8_t *codes, ix_kv_dtype t,
                                                                  size_t L) {
    if (t == IX_KV_Q8_0)
        return L == 32 ? _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)codes))
                       : _mm512_cvtepi8_epi16(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)codes)));
    const __m128i m4 = _mm_set1_epi8(15);
    __m256i b;
    if (L == 32) {
        __m128i x = _mm_loadu_si128((const __m128i *)codes);
        b = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
    } else {
        __m128i x = _mm_loadl_epi64((const __m128i *)codes);
        b = _mm256_castsi128_si256(
            _mm_unpacklo_epi64(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4)));
    }
    __m512i c = _mm512_sub_epi16(_mm512_cvtepu8_epi16(b), _mm512_set1_epi16(8));
    return L == 32 ? c : _mm512_maskz_mov_epi16(0xffff, c); /* lanes 16..31 of a 16-block: 0 */
}

static inline __attribute__((always_inline)) int32_t vq_dot(const int8_t *q, const uint8_t *codes,
                                                            ix_kv_dtype t, size_t L) {
    if (t != IX_KV_FP8_E4M3) { /* 8-bit codes: int16 pair products (|q c| <= 127 * 128) */
        __m256i qb = L == 32 ? _mm256_loadu_si256((const __m256i *)q)
                             : _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)q));
        __m512i qv = _mm512_cvtepi8_epi16(qb);
        if (L != 32) qv = _mm512_maskz_mov_epi16(0xffff, qv);
        return _mm512_reduce_add_epi32(_mm512_madd_epi16(qv, vq_codes32_i8(codes, t, L)));
    }
    __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
    __m512i acc = _mm512_mullo_epi32(q0, vq_codes16(codes, t, 0, L));
    if (L == 32) {
        __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(q1, vq_codes16(codes, t, 16, L)));
    }
    return _mm512_reduce_add_epi32(acc);
}

static inline __attribute__((always_inline)) void vq_axpy(float *o, float w, const uint8_t *codes,
                                                          ix_kv_dtype t, size_t L) {
    __m512 wv = _mm512_set1_ps(w);
    for (size_t i = 0; i < L; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(wv, _mm512_cvtepi32_ps(vq_codes16(codes, t, i, L)),
                                                _mm512_loadu_ps(o + i)));
}

#include "kernels/vecops.h"

/* ---- conversions --------------------------------------------------------------- */
static void fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) vf_store(dst + i, vf_load_h(src + i));
    if (i < n) vf_store_n(dst + i, vf_load_h_n(src + i, n - i), n - i);
}

static void fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    /* The rounding mode is an immediate: a macro, so -O0 builds compile too. */
#define rc (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(vf_load(src + i), rc));
    if (i < n)
        _mm256_mask_storeu_epi16(dst + i, tail_mask(n - i),
                                 _mm512_cvtps_ph(vf_load_n(src + i, n - i), rc));
}
#undef rc

static inline __m512 bf16x16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static void bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        vf_store(dst + i, bf16x16(_mm256_loadu_si256((const __m256i *)(src + i))));
    if (i < n)
        vf_store_n(dst + i, bf16x16(_mm256_maskz_loadu_epi16(tail_mask(n - i), src + i)), n - i);
}

/* ---- activation quantization (q8a; same bits as generic.c) ------------------------ */
/* g blocks (1, or 8: quantize_act_super) share one scale */
static void quantize_act_g(const float *x, void *dst, size_t k, size_t g) {
    int8_t *qs;
    ix__q8a_blk *blk;
    ix__q8a_out(dst, k, &qs, &blk);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    float d = 0.0f, id = 0.0f;
    for (size_t b = 0; b < k / IX__QK; b++) {
        __m512 x0 = vf_load(x + b * IX__QK), x1 = vf_load(x + b * IX__QK + 16);
        if (b % g == 0) {
            __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));
            for (size_t j = 1; j < g; j++)
                m = _mm512_max_ps(m, _mm512_max_ps(_mm512_abs_ps(vf_load(x + (b + j) * IX__QK)),
                                                   _mm512_abs_ps(vf_load(x + (b + j) * IX__QK + 16))));
            d = ix__q8a_scale(_mm512_reduce_max_ps(m), &id);
        }
        blk[b].d = d;
        __m512 vid = _mm512_set1_ps(id);
        /* cvtps rounds to nearest even like nearbyintf in generic.c */
        __m512i q0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x0, vid), lo), hi));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x1, vid), lo), hi));
        _mm_storeu_si128((__m128i *)(qs + b * IX__QK), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qs + b * IX__QK + 16), _mm512_cvtsepi32_epi8(q1));
        ix__q8a_set_sums(&blk[b], _mm512_reduce_add_epi32(q0), _mm512_reduce_add_epi32(q1));
    }
}
static void quantize_act(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, 1); }
static void quantize_act_super(const float *x, void *dst, size_t k) { quantize_act_g(x, dst, k, IX__SUPER_BLOCKS); }

/* ---- quantized matmul tiles -------------------------------------------------------- */
#define Q_RX 6 /* X rows per tile */
#define Q_RG 2 /* groups of 4 W rows per tile */
#define Q_RW (4 * Q_RG)

/* The fp16 block scales of W rows 0..7 (p, stride ws) as f32, laid out like
 * the reduced dots of qtile_run: 128-bit lane r holds rows (r, r+4, r, r+4). */
static inline __m512 scales8(const uint8_t *p, size_t ws) {
    uint64_t lo = 0, hi = 0;
    for (int j = 0; j < 4; j++) {
        lo |= (uint64_t)ix__load_u16(p + (size_t)j * ws) << (16 * j);
        hi |= (uint64_t)ix__load_u16(p + (size_t)(j + 4) * ws) << (16 * j);
    }
    __m256 f = _mm256_cvtph_ps(_mm_insert_epi64(_mm_cvtsi64_si128((long long)lo), (long long)hi, 1));
    const __m512i idx = _mm512_set_epi32(7, 3, 7, 3, 6, 2, 6, 2, 5, 1, 5, 1, 4, 0, 4, 0);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(f));
}

/* The tile body; t, vnni and rx are constants at every call site, so each
 * instance compiles to straight-line code with the accumulators in registers.
 *
 * Per block, group A (W rows 0-3) and group B (rows 4-7) leave each row's dot
 * in 4 int32 lanes (row r in 128-bit lane r). Two unpacks, a shuffle and two
 * adds reduce both groups at once to exact per-row dots, lane r holding
 * (A_r, B_r, A_r, B_r); then one convert and one FMA per block for all 8
 * rows: acc = fma((float)dot, d_w * d_x, acc), the canonical quantized dot
 * every path computes (see kernels_int.h). */
static inline __attribute__((always_inline)) void qtile_run(const ix__tile *a, ix_dtype t,
                                                            bool vnni, int rx,
                                                            bool pf) {
    const bool q8 = t == IX_DTYPE_Q8_0;
    const size_t nb = a->k / IX__QK;
    const size_t bs = q8 ? IX__Q8_0_BYTES : IX__Q4_0_BYTES, ws = a->ws, xs = a->xs;
    /* Offset removed per lane: Q4_0 codes carry +8 (8 s / 4 lanes), Q8_0 under
     * VNNI +128 (128 s / 4 lanes); BW Q8_0 uses the sign trick, no offset. */
    const int bias_mul = q8 ? (vnni ? -32 : 0) : -2;
    const __m512i nib = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
    const __m512i ones = _mm512_set1_epi16(1);
    __m512 acc[Q_RX];
    for (int i = 0; i < rx; i++) acc[i] = _mm512_setzero_ps();

    for (size_t b = 0; b < nb; b++) {
        if (pf) ix__prefetch_ahead(a, Q_RW, b, nb);
        const uint8_t *wb = a->w + b * bs;
        __m512i wl[Q_RG], wh[Q_RG];
        __mmask64 nl[Q_RG], nh[Q_RG]; /* BW Q8_0: where w < 0 */
        for (int g = 0; g < Q_RG; g++) {
            const uint8_t *p0 = wb + (size_t)(4 * g) * ws, *p1 = p0 + ws, *p2 = p1 + ws, *p3 = p2 + ws;
            if (q8) {
                /* rows' 32 code bytes, then 128-bit lanes regrouped into
                 * lo = (r0[0:16], r1[0:16], r2[0:16], r3[0:16]) and hi = [16:32] */
                __m512i a01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + 2))),
                                                 _mm256_loadu_si256((const __m256i *)(p1 + 2)), 1);
                __m512i a23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p2 + 2))),
                                                 _mm256_loadu_si256((const __m256i *)(p3 + 2)), 1);
                __m512i lo = _mm512_shuffle_i64x2(a01, a23, _MM_SHUFFLE(2, 0, 2, 0));
                __m512i hi = _mm512_shuffle_i64x2(a01, a23, _MM_SHUFFLE(3, 1, 3, 1));
                if (vnni) {
                    wl[g] = _mm512_xor_si512(lo, flip);
                    wh[g] = _mm512_xor_si512(hi, flip);
                } else {
                    nl[g] = _mm512_movepi8_mask(lo);
                    nh[g] = _mm512_movepi8_mask(hi);
                    wl[g] = _mm512_abs_epi8(lo);
                    wh[g] = _mm512_abs_epi8(hi);
                }
            } else {
                __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p0 + 2)));
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p1 + 2)), 1);
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p2 + 2)), 2);
                v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p3 + 2)), 3);
                wl[g] = _mm512_and_si512(v, nib);
                wh[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            }
        }
        __m512 dw = scales8(wb, ws);
        for (int i = 0; i < rx; i++) {
            const uint8_t *xr = a->x + (size_t)i * xs;
            const int8_t *xq = (const int8_t *)xr + b * IX__QK;
            const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            __m512i xl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)xq));
            __m512i xh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xq + 16)));
            __m512i bias = _mm512_set1_epi32(bias_mul * xb->s);
            __m512i iv[Q_RG];
            for (int g = 0; g < Q_RG; g++) {
                if (vnni) {
                    iv[g] = _mm512_dpbusd_epi32(bias, wl[g], xl);
                    iv[g] = _mm512_dpbusd_epi32(iv[g], wh[g], xh);
                } else if (!q8) {
                    __m512i s16 = _mm512_add_epi16(_mm512_maddubs_epi16(wl[g], xl),
                                                   _mm512_maddubs_epi16(wh[g], xh));
                    iv[g] = _mm512_add_epi32(_mm512_madd_epi16(s16, ones), bias);
                } else {
                    __m512i zero = _mm512_setzero_si512();
                    __m512i sl = _mm512_mask_sub_epi8(xl, nl[g], zero, xl);
                    __m512i sh = _mm512_mask_sub_epi8(xh, nh[g], zero, xh);
                    iv[g] = _mm512_add_epi32(_mm512_madd_epi16(_mm512_maddubs_epi16(wl[g], sl), ones),
                                             _mm512_madd_epi16(_mm512_maddubs_epi16(wh[g], sh), ones));
                }
            }
            __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(iv[0], iv[1]), _mm512_unpackhi_epi32(iv[0], iv[1]));
            __m512i dot = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[i]);
        }
    }
    /* lane 4r holds row r, lane 4r + 1 row r + 4 */
    const __m512i gather = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    for (int i = 0; i < rx; i++) {
        __m256 r = _mm512_castps512_ps256(_mm512_permutexvar_ps(gather, acc[i]));
        _mm256_mask_storeu_ps(a->y + (size_t)i * a->ldy, (__mmask8)(a->ncols == Q_RW ? 0xff : 0x01), r);
    }
}

/* ---- the wide VNNI tile (prefill) -------------------------------------------------------
 * 16 W rows against a whole chunk of X rows (band mode of ix__matmul_tiles).
 * Per chunk of W_KC blocks, the 16 rows' codes are first transposed into an
 * L1 buffer so that vector T_j of a block holds dword j (elements 4j..4j+3)
 * of each row, one row per 32-bit lane; then every X row of the chunk, 16 at a
 * time, runs 8 vpdpbusd per block against its own dwords broadcast from
 * memory, leaving the exact dots of all 16 W rows in the 16 lanes. No
 * per-row reduction, the transpose is done once per W tile and K chunk and
 * is off the dot products' critical path, and the float accumulators live in
 * L1 (FMA with a memory addend). Same canonical arithmetic as qtile_run, so
 * the two tiles give the same bits. */
#define W_RW 16         /* W rows per band */
#define W_XR 16         /* X rows per inner tile */
#define W_KC 32         /* blocks per transposed chunk: 18 KiB of buffer */
#define WIDE_MIN_M 4    /* below this the transpose does not pay */

/* acc += u8 a x s8 (the dword at p, broadcast). GCC 12 emits the broadcast
 * as its own vpbroadcastd (a load, no ALU work); forcing the embedded
 * {1to16} form with inline asm was measured slower, because every memory
 * operand then needs its own address register. */
static inline __m512i dpbusd_bcast(__m512i acc, __m512i a, const void *p) {
    return _mm512_dpbusd_epi32(acc, a, _mm512_broadcastd_epi32(_mm_loadu_si32(p)));
}

/* In-lane 4 x 4 dword transpose across 4 registers: out[q] 128-bit lane l
 * holds dword q of in[0..3] lane l. With in[g] lane l = row 4g + l, lane e of
 * out[q] (e = 4l + g) is row 4g + l: a fixed row order (wide_row) that the
 * scales and the final store follow too. Unpacks stay within 128-bit lanes,
 * which on this class of CPU costs far less than cross-lane shuffles. */
static inline void transpose_4x4(const __m512i in[4], __m512i out[4]) {
    __m512i p0 = _mm512_unpacklo_epi32(in[0], in[1]), p1 = _mm512_unpacklo_epi32(in[2], in[3]);
    __m512i q0 = _mm512_unpackhi_epi32(in[0], in[1]), q1 = _mm512_unpackhi_epi32(in[2], in[3]);
    out[0] = _mm512_unpacklo_epi64(p0, p1);
    out[1] = _mm512_unpackhi_epi64(p0, p1);
    out[2] = _mm512_unpacklo_epi64(q0, q1);
    out[3] = _mm512_unpackhi_epi64(q0, q1);
}

/* The W row in lane e of the transposed vectors. */
#define WIDE_ROW(e) (4 * ((e) % 4) + (e) / 4)

/* Lane e's entry is WIDE_ROW(e): the rows' byte offsets (times ws), and the
 * permutation back to row order. */
static inline __m512i wide_rows(void) {
    return _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
}

/* A band's rows x 16 accumulators (lanes in WIDE_ROW order) to Y in row
 * order (the narrow path: column 0 only). */
static inline void wide_store(const ix__tile *a, const float (*acc)[W_RW], size_t rows) {
    const __m512i order = wide_rows();
    const __mmask16 keep = (__mmask16)(a->ncols == W_RW ? 0xffff : 0x1);
    for (size_t m = 0; m < rows; m++)
        _mm512_mask_storeu_ps(a->y + m * a->ldy, keep, _mm512_permutexvar_ps(order, _mm512_load_ps(acc[m])));
}

typedef struct wide_blk {
    __m512i T[8]; /* dword j of the 16 rows, lanes in WIDE_ROW order */
    __m512 dw;    /* the rows' scales, same order */
} wide_blk;

/* 32 bytes at p of each of 16 rows ws apart, transposed: out[q] lane e holds
 * dword q of row WIDE_ROW(e)'s bytes (out[0..3] from bytes 0-15, out[4..7]
 * from 16-31). */
static inline __attribute__((always_inline)) void wide_load32(const uint8_t *p, size_t ws, __m512i out[8]) {
    const size_t ws3 = 3 * ws;
    const uint8_t *prow[4] = {p, p + 4 * ws, p + 8 * ws, p + 12 * ws};
#define PROW(r) (prow[(r) / 4] + ((r) % 4 == 3 ? ws3 : (size_t)((r) % 4) * ws))
    /* lo[g] / hi[g] 128-bit lane l = bytes 0-15 / 16-31 of row 4g + l */
    __m512i lo[4], hi[4];
    for (int g = 0; g < 4; g++) {
        __m512i a01 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)PROW(4 * g))),
                                         _mm256_loadu_si256((const __m256i *)PROW(4 * g + 1)), 1);
        __m512i a23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)PROW(4 * g + 2))),
                                         _mm256_loadu_si256((const __m256i *)PROW(4 * g + 3)), 1);
        lo[g] = _mm512_shuffle_i64x2(a01, a23, _MM_SHUFFLE(2, 0, 2, 0));
        hi[g] = _mm512_shuffle_i64x2(a01, a23, _MM_SHUFFLE(3, 1, 3, 1));
    }
#undef PROW
    transpose_4x4(lo, out);
    transpose_4x4(hi, out + 4);
}

static inline __attribute__((always_inline)) void wide_transpose(const ix__tile *a, bool q8, size_t b,
                                                                 wide_blk *out) {
    const size_t ws = a->ws, ws3 = 3 * ws;
    const uint8_t *wb = a->w + b * (q8 ? IX__Q8_0_BYTES : IX__Q4_0_BYTES);
    const uint8_t *wrow[4] = {wb, wb + 4 * ws, wb + 8 * ws, wb + 12 * ws};
#define WROW(r) (wrow[(r) / 4] + ((r) % 4 == 3 ? ws3 : (size_t)((r) % 4) * ws))
    if (q8) {
        __m512i t[8];
        wide_load32(wb + 2, ws, t);
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int j = 0; j < 8; j++) _mm512_store_si512(&out->T[j], _mm512_xor_si512(t[j], flip));
    } else {
        __m512i v[4], q[4];
        for (int g = 0; g < 4; g++) {
            __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(WROW(4 * g) + 2)));
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(WROW(4 * g + 1) + 2)), 1);
            z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(WROW(4 * g + 2) + 2)), 2);
            v[g] = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(WROW(4 * g + 3) + 2)), 3);
        }
        transpose_4x4(v, q);
        /* code byte j holds element j (low nibble) and j + 16 (high) */
        const __m512i nib = _mm512_set1_epi8(0x0f);
        for (int j = 0; j < 4; j++) {
            _mm512_store_si512(&out->T[j], _mm512_and_si512(q[j], nib));
            _mm512_store_si512(&out->T[j + 4], _mm512_and_si512(_mm512_srli_epi16(q[j], 4), nib));
        }
    }
    uint64_t h[4] = {0, 0, 0, 0};
    IX__UNROLL(16)
    for (int e = 0; e < W_RW; e++) h[e / 4] |= (uint64_t)ix__load_u16(WROW(WIDE_ROW(e))) << (16 * (e % 4));
#undef WROW
    _mm512_store_ps(&out->dw, _mm512_cvtph_ps(_mm256_set_epi64x((long long)h[3], (long long)h[2],
                                                                 (long long)h[1], (long long)h[0])));
}

/* X rows of an inner tile at block b: row i at base[i / 4] + (i % 4) xs --
 * four bases, xs and 3 xs in registers cover all 16 rows with plain
 * addressing modes; its q8a block db further. */
typedef struct wide_x {
    const uint8_t *base[4];
    size_t xs, xs3, db;
} wide_x;

static inline __attribute__((always_inline)) wide_x wide_x_at(const ix__tile *a, const uint8_t *x, size_t b) {
    const size_t xs = a->xs;
    const uint8_t *xq = x + b * IX__QK;
    return (wide_x){.base = {xq, xq + 4 * xs, xq + 8 * xs, xq + 12 * xs},
                    .xs = xs,
                    .xs3 = 3 * xs,
                    .db = a->blk_off + b * sizeof(ix__q8a_blk) - b * IX__QK};
}
#define WIDE_XROW(w, i) ((w).base[(i) / 4] + ((i) % 4 == 3 ? (w).xs3 : (size_t)((i) % 4) * (w).xs))
#define WIDE_XBLK(w, i) ((const ix__q8a_blk *)(const void *)(WIDE_XROW(w, i) + (w).db))

static inline __attribute__((always_inline)) void wide_codes(const __m512i *src, __m512i T[8]) {
    for (int q = 0; q < 8; q++) T[q] = _mm512_load_si512(&src[q]);
}

/* rx X rows (from x, stride xs) against n transposed blocks starting at
 * block b0; acc (rx, 16) in L1. */
static inline __attribute__((always_inline)) void wide_inner(const ix__tile *a, bool q8, int rx,
                                                             const wide_blk *wb, size_t n, size_t b0,
                                                             const uint8_t *x, float (*acc)[W_RW]) {
    for (size_t j = 0; j < n; j++) {
        const size_t b = b0 + j;
        __m512i T[8];
        wide_codes(wb[j].T, T);
        const wide_x wx = wide_x_at(a, x, b);
        /* each dot starts from the block's offset correction (a broadcast
         * load); the rows' chains interleave (q outer) so rx independent
         * vpdpbusd are in flight */
        __m512i dot[W_XR];
        IX__UNROLL(16)
        for (int i = 0; i < rx; i++) dot[i] = _mm512_set1_epi32(q8 ? WIDE_XBLK(wx, i)->neg128s : WIDE_XBLK(wx, i)->neg8s);
        IX__UNROLL(8)
        for (int q = 0; q < 8; q++) {
            IX__UNROLL(16)
            for (int i = 0; i < rx; i++) dot[i] = dpbusd_bcast(dot[i], T[q], WIDE_XROW(wx, i) + 4 * q);
        }
        const __m512 dw = _mm512_load_ps(&wb[j].dw);
        IX__UNROLL(16)
        for (int i = 0; i < rx; i++) {
            __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(WIDE_XBLK(wx, i)->d));
            _mm512_store_ps(acc[i], _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), sc, _mm512_load_ps(acc[i])));
        }
    }
}

typedef void (*wide_inner_fn)(const ix__tile *a, const wide_blk *wb, size_t n, size_t b0,
                              const uint8_t *x, float (*acc)[W_RW]);
#define WIDE_INST(T, R)                                                                        \
    static void wide_##T##_##R(const ix__tile *a, const wide_blk *wb, size_t n, size_t b0,      \
                               const uint8_t *x, float (*acc)[W_RW]) {                        \
        wide_inner(a, IX_DTYPE_##T == IX_DTYPE_Q8_0, R, wb, n, b0, x, acc);                    \
    }
#define WIDE_ALL(T)                                                                            \
    WIDE_INST(T, 1) WIDE_INST(T, 2) WIDE_INST(T, 3) WIDE_INST(T, 4) WIDE_INST(T, 5)             \
    WIDE_INST(T, 6) WIDE_INST(T, 7) WIDE_INST(T, 8) WIDE_INST(T, 9) WIDE_INST(T, 10)            \
    WIDE_INST(T, 11) WIDE_INST(T, 12) WIDE_INST(T, 13) WIDE_INST(T, 14) WIDE_INST(T, 15)        \
    WIDE_INST(T, 16)
WIDE_ALL(Q8_0)
WIDE_ALL(Q4_0)
#define WIDE_ROWFN(T)                                                                          \
    {wide_##T##_1,  wide_##T##_2,  wide_##T##_3,  wide_##T##_4,  wide_##T##_5,  wide_##T##_6,   \
     wide_##T##_7,  wide_##T##_8,  wide_##T##_9,  wide_##T##_10, wide_##T##_11, wide_##T##_12,  \
     wide_##T##_13, wide_##T##_14, wide_##T##_15, wide_##T##_16}
static const wide_inner_fn k_wide[2][W_XR] = {WIDE_ROWFN(Q8_0), WIDE_ROWFN(Q4_0)};

/* One band: 16 W rows x a->rows X rows (<= IX__MM_MCHUNK). */
static inline __attribute__((always_inline)) void wide_band(const ix__tile *a, bool q8) {
    _Alignas(64) wide_blk wb[W_KC];
    _Alignas(64) float acc[IX__MM_MCHUNK][W_RW];
    const wide_inner_fn *inner = k_wide[!q8];
    const size_t nb = a->k / IX__QK, rows = a->rows;
    for (size_t m = 0; m < rows; m++) _mm512_store_ps(acc[m], _mm512_setzero_ps());
    for (size_t kc = 0; kc < nb; kc += W_KC) {
        size_t n = nb - kc < W_KC ? nb - kc : W_KC;
        for (size_t j = 0; j < n; j++) {
            ix__prefetch_ahead(a, W_RW, kc + j, nb);
            wide_transpose(a, q8, kc + j, &wb[j]);
        }
        for (size_t m = 0; m < rows; m += W_XR) {
            int rx = rows - m < W_XR ? (int)(rows - m) : W_XR;
            inner[rx - 1](a, wb, n, kc, a->x + m * a->xs, acc + m);
        }
    }
    wide_store(a, acc, rows);
}

static void wide_band_q8(const ix__tile *a) { wide_band(a, true); }
static void wide_band_q4(const ix__tile *a) { wide_band(a, false); }
static const ix__tile_fn k_wide_band[2][1] = {{wide_band_q8}, {wide_band_q4}};

#define QTILE_INST(T, TAG, V, R)                                                               \
    static void qtile_##T##_##TAG##_##R(const ix__tile *a) {                                      \
        if (a->prefetch) qtile_run(a, IX_DTYPE_##T, V, R, true);                                 \
        else qtile_run(a, IX_DTYPE_##T, V, R, false);                                            \
    }
#define QTILE_ALL(T, TAG, V)                                                                   \
    QTILE_INST(T, TAG, V, 1)                                                                   \
    QTILE_INST(T, TAG, V, 2)                                                                   \
    QTILE_INST(T, TAG, V, 3)                                                                   \
    QTILE_INST(T, TAG, V, 4)                                                                   \
    QTILE_INST(T, TAG, V, 5)                                                                   \
    QTILE_INST(T, TAG, V, 6)
QTILE_ALL(Q8_0, vnni, true)
QTILE_ALL(Q8_0, bw, false)
QTILE_ALL(Q4_0, vnni, true)
QTILE_ALL(Q4_0, bw, false)
#define QTILE_ROW(T, TAG)                                                                      \
    {qtile_##T##_##TAG##_1, qtile_##T##_##TAG##_2, qtile_##T##_##TAG##_3,                      \
     qtile_##T##_##TAG##_4, qtile_##T##_##TAG##_5, qtile_##T##_##TAG##_6}

/* [vnni][q4][rx - 1] */
static const ix__tile_fn k_qtiles[2][2][Q_RX] = {
    {QTILE_ROW(Q8_0, bw), QTILE_ROW(Q4_0, bw)},
    {QTILE_ROW(Q8_0, vnni), QTILE_ROW(Q4_0, vnni)},
};

/* ---- the other quantized types (row layout) ----------------------------------------------
 * qtile_run's layout and reduction (two groups of 4 W rows, row r's 16 code
 * bytes in 128-bit lane r) for types whose codes come from sub-byte fields
 * and whose blocks carry integer sub-block scales and mins. Each 32-element
 * block of the 8 rows is decoded in registers into unsigned codes u = q + c
 * (c: the type's offset), dotted with the X row, reduced to the 8 rows' exact
 * dots and finished with the canonical dot's integer scale, offset and min
 * terms (kernels_int.h), so the bits are the generic path's:
 *   Q5_0  c = 16, one scale; the fifth bits are spread from qh by a byte mask;
 *   Q4_K  c = 0, the sub-block's 6-bit scale and min (decoded for 4 rows at a
 *         time once per super-block), min term mn * s;
 *   Q5_K  as Q4_K, with the fifth bits from qh;
 *   Q6_K  c = 32 and a scale per 16: the halves are dotted and reduced apart,
 *         each starting from -c times its half's X sum (q8a's s0, s - s0). */
typedef enum kq_type {
    KQ_Q5_0, KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_Q4_1, KQ_Q5_1, KQ_IQ4_NL, KQ_IQ4_XS, KQ_Q2_K, KQ_Q3_K, KQ_N
} kq_type;
/* a scale per 16, the halves dotted apart (Q6_K, Q2_K, Q3_K) */
static inline bool kq_halves(kq_type t) { return t == KQ_Q6_K || t == KQ_Q2_K || t == KQ_Q3_K; }
/* X with one scale per 256 and the integer sums per super-block (kernels_int.h, x_super) */
static inline bool kq_x_super(kq_type t) { return t == KQ_Q2_K || t == KQ_Q3_K; }
/* Further types on the same tile:
 *   Q4_1, Q5_1  c = 0, one scale and min per block: min term m * s;
 *   IQ4_NL      the codes looked up (vpshufb) in the grid + 128 (c = 128);
 *               without VNNI the grid values themselves, dotted as |w| times
 *               x with w's sign (the int16 pairs would saturate otherwise);
 *   IQ4_XS      as IQ4_NL with a signed 6-bit scale per 32;
 *   Q2_K        c = 0, a 4-bit scale and min per 16: halves apart as Q6_K's;
 *   Q3_K        c = 4 (the low 2 bits | the hmask bit << 2), a signed 6-bit
 *               scale per 16, halves apart.
 * Their sub-block scales (IQ4_XS, Q2_K, Q3_K) are decoded per block, for
 * the 8 rows at once, from 16 bytes of each row loaded once per super-block
 * (kq_sub_scales). */

/* The reduced layout (reduce8, kq_pick8): row r's (0..7) dword is at 4 (r % 4) + r / 4
 * and 2 past it. */

/* acc + the 4-byte dots of signed codes w (|w| <= 127) and x per int32 lane
 * without VNNI: |w| times x with w's sign (the IQ4 grid + 128 would saturate
 * vpmaddubsw's int16 pairs). */
static inline __attribute__((always_inline)) __m512i kq_dps(__m512i acc, __m512i w, __m512i x) {
    __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sx), _mm512_set1_epi16(1)));
}

/* 16 bytes at p, p + ws, p + 2 ws, p + 3 ws into 128-bit lanes 0..3. */
static inline __attribute__((always_inline)) __m512i ld4x16(const uint8_t *p, size_t ws) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + ws)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * ws)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * ws)), 3);
}

/* acc + the 4-byte dots of u8 w and s8 x per int32 lane (no int16 pair
 * saturates at these types' code sizes: |pair| <= 2 * 63 * 127). */
static inline __attribute__((always_inline)) __m512i kq_dp(__m512i acc, __m512i w, __m512i x, bool vnni) {
    if (vnni) return _mm512_dpbusd_epi32(acc, w, x);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1)));
}

/* Groups A and B's 4-lane partial dots to the exact dots of their 8 rows,
 * lane r holding (A_r, B_r, A_r, B_r) (as qtile_run). */
static inline __attribute__((always_inline)) __m512i reduce8(__m512i a, __m512i b) {
    __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    return _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC));
}

/* The dword each row's lane selects by pshufb index idx (a byte index and
 * 0x80s), groups A and B into the reduced layout. */
static inline __attribute__((always_inline)) __m512i kq_pick8(__m512i va, __m512i vb, __m512i idx, int dword) {
    __m512i u = _mm512_unpacklo_epi32(_mm512_shuffle_epi8(va, idx), _mm512_shuffle_epi8(vb, idx));
    /* u lane r: (A.d0, B.d0, A.d1, B.d1) */
    return dword ? _mm512_shuffle_epi32(u, _MM_PERM_DCDC) : _mm512_shuffle_epi32(u, _MM_PERM_BABA);
}

/* Q4_K: ix__k4_scales of 4 rows' super-blocks at once (12 bytes at p + 4
 * per row): the 8 scales and 8 mins as bytes 0..7 and 8..15 of the row's
 * lane. */
static inline __attribute__((always_inline)) __m512i q4k_scales4(const uint8_t *p, size_t ws) {
    __m512i v = ld4x16(p + 4, ws); /* dwords a0 a1 a2 (and 4 code bytes) per lane */
    __m512i lo = _mm512_srlv_epi32(_mm512_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)), _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0));
    lo = _mm512_and_si512(lo, _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
    __m512i hi = _mm512_srlv_epi32(_mm512_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)), _mm512_set1_epi32(2));
    hi = _mm512_and_si512(hi, _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0));
    /* (a0 & 3f, (a2 & 0f) | (a0 >> 2 & 30), a1 & 3f, (a2 >> 4 & 0f) | (a1 >> 2 & 30)) */
    return _mm512_or_si512(lo, hi);
}

/* The sub-block scales of IQ4_XS, Q2_K and Q3_K for block j of a tile's 8
 * rows, in the reduced layout: *s0 / *s1 the first / second 16 elements'
 * scale, *m0 / *m1 their mins (Q2_K; else untouched). scm[g] holds 16
 * bytes of each row of group g, loaded once per super-block: Q2_K's scales
 * (offset 0), IQ4_XS's bytes 0..15 (scales_h at 2, scales_l at 4) and
 * Q3_K's bytes 94..109 (scales at 2..13: 94, not 96, keeps the load inside
 * the 110-byte block). The same integers as ix__sub_scales, with vector
 * shuffles and shifts instead of 128 scalar decodes a super-block. */
static inline __attribute__((always_inline)) void kq_sub_scales(kq_type t, const __m512i scm[Q_RG], size_t j,
                                                                __m512i *s0, __m512i *s1, __m512i *m0, __m512i *m1) {
    const __m512i low4 = _mm512_set1_epi32(15), two = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
    if (t == KQ_Q2_K) { /* byte s = 2j + k: scale | min << 4 */
        const uint64_t s = 2 * (uint64_t)j;
        const __m512i idx = _mm512_set1_epi64((int64_t)((0x80808000u | (s + 1)) << 32 | (0x80808000u | s)));
        __m512i u0 = kq_pick8(scm[0], scm[1], idx, 0), u1 = kq_pick8(scm[0], scm[1], idx, 1);
        *s0 = _mm512_and_si512(u0, low4);
        *s1 = _mm512_and_si512(u1, low4);
        *m0 = _mm512_srli_epi32(u0, 4);
        *m1 = _mm512_srli_epi32(u1, 4);
    } else if (t == KQ_IQ4_XS) { /* one scale per 32: nibble j % 2 of byte 4 + j / 2, bits 2j of the u16 at 2 */
        const uint64_t lo = 4 + (uint64_t)j / 2;
        const __m512i idx = _mm512_set1_epi64((int64_t)(0x80030200u | lo));
        __m512i u = kq_pick8(scm[0], scm[1], idx, 0);
        __m512i l = _mm512_and_si512(_mm512_srl_epi32(u, _mm_cvtsi32_si128((int)(4 * (j % 2)))), low4);
        __m512i h = _mm512_and_si512(_mm512_srl_epi32(u, _mm_cvtsi32_si128((int)(8 + 2 * j))), two);
        *s0 = *s1 = _mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(h, 4)), bias);
    } else { /* Q3_K, s = 2j + k: low 4 bits in scales[s % 8] (high nibble for s >= 8), high 2 at bit 2 (s / 4) of scales[8 + s % 4] */
        __m512i *out[2] = {s0, s1};
        for (size_t k = 0; k < 2; k++) {
            const size_t s = 2 * j + k;
            const uint64_t w = 0x80800000u | (uint64_t)(2 + 8 + s % 4) << 8 | (uint64_t)(2 + s % 8);
            __m512i u = kq_pick8(scm[0], scm[1], _mm512_set1_epi64((int64_t)w), 0);
            __m512i l = _mm512_and_si512(_mm512_srl_epi32(u, _mm_cvtsi32_si128((int)(4 * (s / 8)))), low4);
            __m512i h = _mm512_and_si512(_mm512_srl_epi32(u, _mm_cvtsi32_si128((int)(8 + 2 * (s / 4)))), two);
            *out[k] = _mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(h, 4)), bias);
        }
    }
}

/* Q2_K, Q3_K: the super-block's integer sums is (idot) and ims (imin; with
 * mins, Q2_K) into acc as the canonical dot's FMAs (kernels_int.h,
 * x_super), and reset. */
static inline __attribute__((always_inline)) __m512 xs_flush(__m512 acc, __m512i *is, __m512i *ims, __m512 d, __m512 dm,
                                                            __m512 xd, bool mins) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*is), _mm512_mul_ps(d, xd), acc);
    if (mins) acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*ims), _mm512_mul_ps(dm, xd), acc);
    *is = *ims = _mm512_setzero_si512();
    return acc;
}

static inline __attribute__((always_inline)) void kq_run(const ix__tile *a, kq_type t, bool vnni, int rx, bool pf) {
    const size_t nb = a->k / IX__QK, ws = a->ws, xs = a->xs;
    const bool blk32 = t == KQ_Q5_0 || t == KQ_Q4_1 || t == KQ_Q5_1 || t == KQ_IQ4_NL; /* 32-element blocks */
    const size_t per = blk32 ? 1 : 8;
    const size_t bytes = t == KQ_Q5_0 ? 22 : t == KQ_Q4_K ? 144 : t == KQ_Q5_K ? 176 : t == KQ_Q6_K ? 210
                         : t == KQ_Q4_1 ? 20 : t == KQ_Q5_1 ? 24 : t == KQ_IQ4_NL ? 18 : t == KQ_IQ4_XS ? 136
                         : t == KQ_Q2_K ? 84 : 110;
    const bool k4 = t == KQ_Q4_K || t == KQ_Q5_K; /* 6-bit scales and mins per 32 */
    const bool q5 = t == KQ_Q5_0 || t == KQ_Q5_1; /* fifth bits in a u32 qh */
    const bool m1 = t == KQ_Q4_1 || t == KQ_Q5_1; /* min term m * s */
    const bool iq = t == KQ_IQ4_NL || t == KQ_IQ4_XS;
    const bool subsc = t == KQ_IQ4_XS || t == KQ_Q2_K || t == KQ_Q3_K; /* sub-block scales by kq_sub_scales */
    const bool halves = kq_halves(t);
    /* the code offset c over 4: each dword lane starts at -c s / 4 */
    const int c4 = t == KQ_Q5_0 ? 4 : t == KQ_Q6_K ? 8 : t == KQ_Q3_K ? 1 : iq && vnni ? 32 : 0;
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    int8_t grid[16];
    for (int i = 0; i < 16; i++) grid[i] = (int8_t)(ix__iq4_grid[i] ^ (vnni ? (int8_t)0x80 : 0)); /* + 128 as u8 */
    const __m512i vgrid = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)grid));
    __m512 acc[Q_RX];
    __m512i isum[Q_RX], imsum[Q_RX]; /* Q2_K, Q3_K: the super-block's integer sums */
    for (int i = 0; i < rx; i++) {
        acc[i] = _mm512_setzero_ps();
        isum[i] = imsum[i] = _mm512_setzero_si512();
    }
    /* per super-block: Q4_K / Q5_K scales and mins, else 16 bytes of each row (Q6_K, IQ4_XS, Q2_K, Q3_K scales) */
    __m512i scm[Q_RG] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512 dw = _mm512_setzero_ps(), dm = _mm512_setzero_ps();
    /* code bytes that several consecutive blocks decode from, loaded once:
     * K4: qs of sub-blocks 2i, 2i + 1 (and Q5_K's qh of the whole super-block);
     * Q6_K: ql and qh of a 128-element half; Q2_K / Q3_K: the 2-bit planes of
     * a 128-element half (and Q3_K's hmask) */
    __m512i raw[Q_RG][6];
    for (int g = 0; g < Q_RG; g++)
        for (int k = 0; k < 6; k++) raw[g][k] = _mm512_setzero_si512();
    for (size_t b = 0; b < nb; b++) {
        if (pf) ix__prefetch_ahead(a, Q_RW, b, nb);
        const size_t j = b % per;
        const uint8_t *sb = a->w + b / per * bytes; /* row 0's (super-)block */
        if (j == 0 && !blk32) {
            const size_t at = t == KQ_Q6_K ? 192 : t == KQ_Q3_K ? 94 : 0; /* the 16 bytes scm holds */
            for (int g = 0; g < Q_RG; g++)
                scm[g] = k4 ? q4k_scales4(sb + (size_t)(4 * g) * ws, ws) : ld4x16(sb + at + (size_t)(4 * g) * ws, ws);
            dw = scales8(sb + (t == KQ_Q6_K ? 208 : t == KQ_Q2_K ? 80 : t == KQ_Q3_K ? 108 : 0), ws);
            if (k4 || t == KQ_Q2_K) /* -dmin, exactly */
                dm = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(scales8(sb + (k4 ? 2 : 82), ws)), sign));
        }
        __m512i wl[Q_RG], wh[Q_RG], sc0 = _mm512_setzero_si512(), sc1 = sc0, mn = sc0, mn1 = sc0;
        __m512 dsc = _mm512_setzero_ps(), dmn = dsc;
        for (int g = 0; g < Q_RG; g++) {
            const uint8_t *p = sb + (size_t)(4 * g) * ws;
            if (q5) {
                const size_t qh_at = t == KQ_Q5_0 ? 2 : 4;
                __m512i v = ld4x16(p + qh_at + 4, ws);
                wl[g] = _mm512_and_si512(v, nib);
                wh[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                /* fifth bits: bit i of row r's qh to byte i of lane r (lo: i < 16) */
                uint64_t ml = 0, mh = 0;
                for (int r = 0; r < 4; r++) {
                    uint32_t qh = ix__load_u32(p + (size_t)r * ws + qh_at);
                    ml |= (uint64_t)(qh & 0xffff) << (16 * r);
                    mh |= (uint64_t)(qh >> 16) << (16 * r);
                }
                const __m512i b4 = _mm512_set1_epi8(16);
                wl[g] = _mm512_or_si512(wl[g], _mm512_maskz_mov_epi8((__mmask64)ml, b4));
                wh[g] = _mm512_or_si512(wh[g], _mm512_maskz_mov_epi8((__mmask64)mh, b4));
            } else if (t == KQ_Q4_1 || iq) {
                __m512i v = ld4x16(p + (t == KQ_Q4_1 ? 4 : t == KQ_IQ4_NL ? 2 : 8 + 16 * j), ws);
                wl[g] = _mm512_and_si512(v, nib);
                wh[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                if (iq) {
                    wl[g] = _mm512_shuffle_epi8(vgrid, wl[g]);
                    wh[g] = _mm512_shuffle_epi8(vgrid, wh[g]);
                }
            } else if (k4) {
                if (j % 2 == 0) {
                    const uint8_t *q = p + (t == KQ_Q5_K ? 48 : 16) + 32 * (j / 2);
                    raw[g][0] = ld4x16(q, ws);
                    raw[g][1] = ld4x16(q + 16, ws);
                }
                if (t == KQ_Q5_K && j == 0) {
                    raw[g][2] = ld4x16(p + 16, ws);
                    raw[g][3] = ld4x16(p + 32, ws);
                }
                const __m128i sh = _mm_cvtsi32_si128(4 * (int)(j % 2));
                wl[g] = _mm512_and_si512(_mm512_srl_epi16(raw[g][0], sh), nib);
                wh[g] = _mm512_and_si512(_mm512_srl_epi16(raw[g][1], sh), nib);
                if (t == KQ_Q5_K) { /* bit j of qh[i]: element i's fifth bit */
                    const __m128i sj = _mm_cvtsi32_si128((int)j);
                    const __m512i one = _mm512_set1_epi8(1);
                    wl[g] = _mm512_or_si512(wl[g], _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(raw[g][2], sj), one), 4));
                    wh[g] = _mm512_or_si512(wh[g], _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(raw[g][3], sj), one), 4));
                }
            } else if (kq_x_super(t)) {
                /* 2-bit planes: element 32 (j % 4) + i of the half at bits 2 (j % 4) of byte i */
                const size_t qs_at = t == KQ_Q2_K ? 16 : 32;
                if (j % 4 == 0) {
                    raw[g][0] = ld4x16(p + qs_at + 32 * (j / 4), ws);
                    raw[g][1] = ld4x16(p + qs_at + 32 * (j / 4) + 16, ws);
                }
                if (t == KQ_Q3_K && j == 0) {
                    raw[g][2] = ld4x16(p, ws);
                    raw[g][3] = ld4x16(p + 16, ws);
                }
                const __m128i sh = _mm_cvtsi32_si128(2 * (int)(j % 4));
                const __m512i three = _mm512_set1_epi8(3);
                wl[g] = _mm512_and_si512(_mm512_srl_epi16(raw[g][0], sh), three);
                wh[g] = _mm512_and_si512(_mm512_srl_epi16(raw[g][1], sh), three);
                if (t == KQ_Q3_K) { /* u = q + 4 = the 2 bits | bit j of hmask[i] << 2 */
                    const __m128i sj = _mm_cvtsi32_si128((int)j);
                    const __m512i one = _mm512_set1_epi8(1);
                    wl[g] = _mm512_or_si512(wl[g], _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(raw[g][2], sj), one), 2));
                    wh[g] = _mm512_or_si512(wh[g], _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(raw[g][3], sj), one), 2));
                }
            } else {
                const size_t h = j / 4, e = j % 4;
                if (e == 0)
                    for (int k = 0; k < 6; k++) /* ql[64 h ..] by 16, then qh[32 h ..] by 16 */
                        raw[g][k] = ld4x16(p + (k < 4 ? 64 * h + 16 * (size_t)k : 128 + 32 * h + 16 * (size_t)(k - 4)), ws);
                const __m128i sl = _mm_cvtsi32_si128(e < 2 ? 0 : 4), shh = _mm_cvtsi32_si128(2 * (int)e);
                const __m512i three = _mm512_set1_epi8(3);
                __m512i hl = _mm512_and_si512(_mm512_srl_epi16(raw[g][4], shh), three);
                __m512i hh = _mm512_and_si512(_mm512_srl_epi16(raw[g][5], shh), three);
                wl[g] = _mm512_or_si512(_mm512_and_si512(_mm512_srl_epi16(raw[g][2 * (e % 2)], sl), nib), _mm512_slli_epi16(hl, 4));
                wh[g] = _mm512_or_si512(_mm512_and_si512(_mm512_srl_epi16(raw[g][2 * (e % 2) + 1], sl), nib), _mm512_slli_epi16(hh, 4));
            }
        }
        if (blk32) dw = scales8(sb, ws);
        if (m1) dm = scales8(sb + 2, ws);
        if (k4) {
            const uint64_t k = (uint64_t)j; /* unsigned: the top byte's shift must not overflow */
            const __m512i idx = _mm512_set1_epi64((int64_t)((0x80808000u | (8 + k)) << 32 | (0x80808000u | k)));
            sc0 = kq_pick8(scm[0], scm[1], idx, 0);
            mn = kq_pick8(scm[0], scm[1], idx, 1);
            /* the unpack's float scales: d sc and -dmin mn, exact */
            dsc = _mm512_mul_ps(dw, _mm512_cvtepi32_ps(sc0));
            dmn = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(mn));
        } else if (t == KQ_Q6_K) { /* int8 scales 2j and 2j + 1, sign-extended from the top byte */
            const uint64_t k = 2 * (uint64_t)j;
            const __m512i idx = _mm512_set1_epi64((int64_t)((((k + 1) << 24) | 0x808080) << 32 | ((k << 24) | 0x808080)));
            sc0 = _mm512_srai_epi32(kq_pick8(scm[0], scm[1], idx, 0), 24);
            sc1 = _mm512_srai_epi32(kq_pick8(scm[0], scm[1], idx, 1), 24);
        } else if (subsc) {
            kq_sub_scales(t, scm, j, &sc0, &sc1, &mn, &mn1);
        }
        for (int i = 0; i < rx; i++) {
            const uint8_t *xr = a->x + (size_t)i * xs;
            const int8_t *xq = (const int8_t *)xr + b * IX__QK;
            const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            const __m128i x16 = _mm_loadu_si128((const __m128i *)xq);
            const __m512i xl = _mm512_broadcast_i32x4(x16);
            const __m512i xh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(xq + 16)));
            const __m512 sx = _mm512_set1_ps(xb->d);
            __m512i idot;
            int32_t s0 = 0, s1 = 0;
            if (halves) {
                s0 = xb->s0, s1 = xb->s - xb->s0; /* the halves' sums (q8a) */
                __m512i il[Q_RG], ih[Q_RG];
                for (int g = 0; g < Q_RG; g++) {
                    il[g] = kq_dp(_mm512_set1_epi32(-c4 * s0), wl[g], xl, vnni);
                    ih[g] = kq_dp(_mm512_set1_epi32(-c4 * s1), wh[g], xh, vnni);
                }
                idot = _mm512_add_epi32(_mm512_mullo_epi32(sc0, reduce8(il[0], il[1])),
                                        _mm512_mullo_epi32(sc1, reduce8(ih[0], ih[1])));
            } else {
                const __m512i bias = _mm512_set1_epi32(-c4 * xb->s);
                __m512i iv[Q_RG];
                for (int g = 0; g < Q_RG; g++)
                    iv[g] = iq && !vnni ? kq_dps(kq_dps(bias, wl[g], xl), wh[g], xh)
                                        : kq_dp(kq_dp(bias, wl[g], xl, vnni), wh[g], xh, vnni);
                idot = reduce8(iv[0], iv[1]);
                if (t == KQ_IQ4_XS) idot = _mm512_mullo_epi32(sc0, idot);
            }
            if (kq_x_super(t)) { /* the integer sums per super-block */
                isum[i] = _mm512_add_epi32(isum[i], idot);
                if (t == KQ_Q2_K)
                    imsum[i] = _mm512_add_epi32(imsum[i], _mm512_add_epi32(_mm512_mullo_epi32(mn, _mm512_set1_epi32(s0)),
                                                                           _mm512_mullo_epi32(mn1, _mm512_set1_epi32(s1))));
                if (j == 7) acc[i] = xs_flush(acc[i], &isum[i], &imsum[i], dw, dm, sx, t == KQ_Q2_K);
                continue;
            }
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(idot), _mm512_mul_ps(k4 ? dsc : dw, sx), acc[i]);
            if (k4) { /* the min_sx form */
                acc[i] = _mm512_fmadd_ps(dmn, _mm512_set1_ps(xb->sd), acc[i]);
            } else if (m1) {
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->fs), _mm512_mul_ps(dm, sx), acc[i]);
            }
        }
    }
    const __m512i gather = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    for (int i = 0; i < rx; i++) {
        __m256 r = _mm512_castps512_ps256(_mm512_permutexvar_ps(gather, acc[i]));
        _mm256_mask_storeu_ps(a->y + (size_t)i * a->ldy, (__mmask8)(a->ncols == Q_RW ? 0xff : 0x01), r);
    }
}

#define KQ_INST(T, TAG, V, R)                                                                  \
    static void kq_##T##_##TAG##_##R(const ix__tile *a) {                                         \
        if (a->prefetch) kq_run(a, KQ_##T, V, R, true);                                           \
        else kq_run(a, KQ_##T, V, R, false);                                                      \
    }
#define KQ_ALL(T, TAG, V)                                                                      \
    KQ_INST(T, TAG, V, 1) KQ_INST(T, TAG, V, 2) KQ_INST(T, TAG, V, 3) KQ_INST(T, TAG, V, 4)     \
    KQ_INST(T, TAG, V, 5) KQ_INST(T, TAG, V, 6)
KQ_ALL(Q5_0, vnni, true)
KQ_ALL(Q5_0, bw, false)
KQ_ALL(Q4_K, vnni, true)
KQ_ALL(Q4_K, bw, false)
KQ_ALL(Q5_K, vnni, true)
KQ_ALL(Q5_K, bw, false)
KQ_ALL(Q6_K, vnni, true)
KQ_ALL(Q6_K, bw, false)
KQ_ALL(Q4_1, vnni, true)
KQ_ALL(Q4_1, bw, false)
KQ_ALL(Q5_1, vnni, true)
KQ_ALL(Q5_1, bw, false)
KQ_ALL(IQ4_NL, vnni, true)
KQ_ALL(IQ4_NL, bw, false)
KQ_ALL(IQ4_XS, vnni, true)
KQ_ALL(IQ4_XS, bw, false)
KQ_ALL(Q2_K, vnni, true)
KQ_ALL(Q2_K, bw, false)
KQ_ALL(Q3_K, vnni, true)
KQ_ALL(Q3_K, bw, false)
#define KQ_ROW(T, TAG)                                                                         \
    {kq_##T##_##TAG##_1, kq_##T##_##TAG##_2, kq_##T##_##TAG##_3,                                \
     kq_##T##_##TAG##_4, kq_##T##_##TAG##_5, kq_##T##_##TAG##_6}
/* [vnni][kq_type][rx - 1] */
static const ix__tile_fn k_kqtiles[2][KQ_N][Q_RX] = {
    {KQ_ROW(Q5_0, bw), KQ_ROW(Q4_K, bw), KQ_ROW(Q5_K, bw), KQ_ROW(Q6_K, bw), KQ_ROW(Q4_1, bw), KQ_ROW(Q5_1, bw),
     KQ_ROW(IQ4_NL, bw), KQ_ROW(IQ4_XS, bw), KQ_ROW(Q2_K, bw), KQ_ROW(Q3_K, bw)},
    {KQ_ROW(Q5_0, vnni), KQ_ROW(Q4_K, vnni), KQ_ROW(Q5_K, vnni), KQ_ROW(Q6_K, vnni), KQ_ROW(Q4_1, vnni),
     KQ_ROW(Q5_1, vnni), KQ_ROW(IQ4_NL, vnni), KQ_ROW(IQ4_XS, vnni), KQ_ROW(Q2_K, vnni), KQ_ROW(Q3_K, vnni)},
};

/* ---- K-quant wide band (prefill, VNNI) ---------------------------------------------------
 * The wide band's scheme for the super-block types Q4_K, Q5_K, Q6_K, Q3_K,
 * Q2_K and IQ4_XS: per super-block the 16 W rows' codes are decoded into bytes and
 * transposed (wide_load32) so that dword q of lane e holds elements 4q.. of
 * row WIDE_ROW(e), the rows' scales and mins become float vectors in the
 * same lane order (gathered with the rows' byte offsets and decoded on 16
 * lanes as ix__k4_scales / ix__sub_scales do), and then every X row of the
 * chunk runs 8 vpdpbusd per block against its own dwords broadcast, leaving
 * the 16 rows' exact dots in the lanes: no per-row reduction and no
 * vpmulld. The canonical dot's integer products become float products that
 * are exact (every factor, product and sum is an integer below 2^24: |dot|
 * <= 32 x 31 x 127 for Q4_K / Q5_K; a half's |sc dot| <= 128 x 16 x 32 x 127
 * for Q6_K, less for Q3_K / Q2_K, two of them below 2^24), so the bits are
 * the generic path's:
 *   Q4_K / Q5_K  unsigned codes; acc = fma(cvt(dot), (d sc) dx, acc);
 *                acc = fma(-dmin mn, s dx, acc)
 *   Q6_K, Q3_K,  a scale per 16: the codes go signed (Q6_K q - 32, Q3_K
 *   Q2_K         q - 4, Q2_K q) and X unsigned instead (x + 128: a copy of
 *                the X rows' codes xor 0x80 per band and K chunk), so each
 *                half's dot starts at -128 times the W half's code sum (from
 *                the decode) and needs no X sums; Q6_K: acc =
 *                fma(fma(sc1, cvt(dot_1), sc0 cvt(dot_0)), d dx, acc);
 *                Q3_K and Q2_K sum the blocks' fma(sc1, cvt(dot_1), sc0
 *                cvt(dot_0)) over the super-block (exact integers in f32),
 *                then acc = fma(sum, d dx, acc), and Q2_K its mins per 16
 *                against the halves' X sums (vpsadbw of the copy), acc =
 *                fma(mins, -dmin dx, acc) (kernels_int.h, x_super).
 *   IQ4_XS       the grid values, signed as above, one dot per block from
 *                -128 times its code sum; acc = fma(cvt(dot) sc, d dx, acc). */
typedef struct kwide_blk {
    __m512i T[8];   /* the block's codes (unsigned; signed: kw_signed), lanes in WIDE_ROW order */
    __m512i hb[2];  /* signed: -128 x the sum of each half's 16 codes (IQ4_XS: of all 32, in hb[0]) */
    __m512 s0, s1;  /* halves: the two scales; IQ4_XS: its scale in s0 */
    __m512 m0, m1;  /* Q2_K: the two mins */
    __m512 dw, dm;  /* Q4_K / Q5_K: d sc and -dmin mn (the unpack's float scales); halves: d, -dmin */
} kwide_blk;

#define KW_XR 8 /* X rows per inner tile: their accumulators stay in registers */
#define KW_HALF_XR 6 /* ... with a scale per 16, whose two dots per row take more of them */

/* the types whose codes go signed, against x + 128 */
static inline bool kw_signed(kq_type t) { return kq_halves(t) || t == KQ_IQ4_XS; }

/* Byte k of each dword of v, as int32. */
static inline __attribute__((always_inline)) __m512i kw_byte(__m512i v, int k, bool sgn) {
    const __m128i sh = _mm_cvtsi32_si128(24 - 8 * k), s24 = _mm_cvtsi32_si128(24);
    __m512i u = _mm512_sll_epi32(v, sh);
    return sgn ? _mm512_sra_epi32(u, s24) : _mm512_srl_epi32(u, s24);
}

static inline __attribute__((always_inline)) __m512 kw_byte_ps(__m512i v, int k, bool sgn) {
    return _mm512_cvtepi32_ps(kw_byte(v, k, sgn));
}

/* fp16 at byte 0 (hi: byte 2) of each dword, as float. */
static inline __attribute__((always_inline)) __m512 kw_half(__m512i v, bool hi) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
}

/* -x, exactly */
static inline __m512 kw_neg(__m512 x) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
}

/* A signed type's block: its codes c[8] stored, with -128 x the code sums
 * of its two halves (halves) or of all 32 (in hb[0]). */
static inline __attribute__((always_inline)) void kw_store_signed(kwide_blk *o, const __m512i c[8], bool halves) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int q = 0; q < 8; q++) {
        sum[halves ? q / 4 : 0] = _mm512_dpbusd_epi32(sum[halves ? q / 4 : 0], ones, c[q]);
        _mm512_store_si512(&o->T[q], c[q]);
    }
    for (int k = 0; k < 2; k++)
        _mm512_store_si512(&o->hb[k], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum[k], 7)));
}

/* Q3_K's signed 6-bit scale of sub-block s (of 16) from its scale words
 * (bytes 96-99, 100-103, 104-107 of the super-block), as float: low 4 bits
 * in byte s % 8 (high nibble for s >= 8), high 2 at bit 2 (s / 4) of byte
 * 8 + s % 4. */
static inline __attribute__((always_inline)) __m512 kw_q3_scale(const __m512i w[3], int s) {
    const int l = s % 8;
    __m512i lo = kw_byte(w[l / 4], l % 4, false);
    lo = s < 8 ? _mm512_and_si512(lo, _mm512_set1_epi32(15)) : _mm512_srli_epi32(lo, 4);
    __m512i hi = _mm512_and_si512(_mm512_srl_epi32(kw_byte(w[2], s % 4, false), _mm_cvtsi32_si128(2 * (s / 4))),
                                  _mm512_set1_epi32(3));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32)));
}

/* Super-block s of the band's 16 rows into out[0..8). off: the rows' byte
 * offsets in WIDE_ROW order. */
static inline __attribute__((always_inline)) void kwide_super(const ix__tile *a, kq_type t, size_t s, __m512i off,
                                                              kwide_blk out[8]) {
    const size_t ws = a->ws;
    const size_t bytes = t == KQ_Q4_K ? 144 : t == KQ_Q5_K ? 176 : t == KQ_Q6_K ? 210 : t == KQ_Q3_K ? 110
                         : t == KQ_Q2_K ? 84 : 136;
    const uint8_t *sb = a->w + s * bytes;
    const __m512i nib = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1), three = _mm512_set1_epi8(3);
    if (t == KQ_IQ4_XS) {
        /* d | scales_h << 16 at 0, scales_l at 4; block j's codes at 8 + 16 j:
         * element i in the low nibble of byte i, 16 + i in the high one */
        const __m512i dd = _mm512_i32gather_epi32(off, sb, 1), sl = _mm512_i32gather_epi32(off, sb + 4, 1);
        const __m512 d = kw_half(dd, false);
        const __m512i vgrid = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)ix__iq4_grid));
        for (int p = 0; p < 4; p++) {
            __m512i Q[8];
            wide_load32(sb + 8 + 32 * p, ws, Q);
            for (int hf = 0; hf < 2; hf++) {
                const int j = 2 * p + hf;
                kwide_blk *o = &out[j];
                __m512i c[8];
                for (int q = 0; q < 4; q++) {
                    c[q] = _mm512_shuffle_epi8(vgrid, _mm512_and_si512(Q[4 * hf + q], nib));
                    c[q + 4] = _mm512_shuffle_epi8(vgrid, _mm512_and_si512(_mm512_srli_epi16(Q[4 * hf + q], 4), nib));
                }
                kw_store_signed(o, c, false);
                /* ls - 32: nibble j % 2 of scales_l[j / 2] | bits 2j of scales_h << 4 */
                __m512i lo = _mm512_and_si512(_mm512_srl_epi32(kw_byte(sl, j / 2, false), _mm_cvtsi32_si128(4 * (j % 2))),
                                              _mm512_set1_epi32(15));
                __m512i hi = _mm512_and_si512(_mm512_srl_epi32(dd, _mm_cvtsi32_si128(16 + 2 * j)), _mm512_set1_epi32(3));
                __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
                _mm512_store_ps(&o->s0, _mm512_cvtepi32_ps(ls));
                _mm512_store_ps(&o->dw, d);
            }
        }
        return;
    }
    if (t == KQ_Q6_K) {
        /* bytes 206..209 (the last two scales and d): no read past the block */
        const __m512 d = kw_half(_mm512_i32gather_epi32(off, sb + 206, 1), true);
        __m512i scw[4];
        for (int w = 0; w < 4; w++) scw[w] = _mm512_i32gather_epi32(off, sb + 192 + 4 * w, 1);
        for (int h = 0; h < 2; h++) {
            __m512i L[2][8], H[8];
            wide_load32(sb + 64 * h, ws, L[0]);
            wide_load32(sb + 64 * h + 32, ws, L[1]);
            wide_load32(sb + 128 + 32 * h, ws, H);
            for (int e = 0; e < 4; e++) {
                kwide_blk *o = &out[4 * h + e];
                const __m128i sl = _mm_cvtsi32_si128(e < 2 ? 0 : 4), shh = _mm_cvtsi32_si128(2 * e);
                __m512i c[8];
                for (int q = 0; q < 8; q++) {
                    __m512i lo = _mm512_and_si512(_mm512_srl_epi16(L[e % 2][q], sl), nib);
                    __m512i hi = _mm512_and_si512(_mm512_srl_epi16(H[q], shh), three);
                    c[q] = _mm512_sub_epi8(_mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)), _mm512_set1_epi8(32));
                }
                kw_store_signed(o, c, true);
                const int j = 4 * h + e; /* scales 2j, 2j + 1: bytes 2 (j % 2), +1 of word j / 2 */
                _mm512_store_ps(&o->s0, kw_byte_ps(scw[j / 2], 2 * (j % 2), true));
                _mm512_store_ps(&o->s1, kw_byte_ps(scw[j / 2], 2 * (j % 2) + 1, true));
                _mm512_store_ps(&o->dw, d);
            }
        }
        return;
    }
    if (t == KQ_Q3_K || t == KQ_Q2_K) {
        const bool q3 = t == KQ_Q3_K;
        /* Q3_K: d at 108 (bytes 106..109 read); Q2_K: d, dmin at 80, 82 */
        const __m512i dd = _mm512_i32gather_epi32(off, sb + (q3 ? 106 : 80), 1);
        const __m512 d = kw_half(dd, q3), dm = q3 ? _mm512_setzero_ps() : kw_neg(kw_half(dd, true));
        __m512i w[4], Hm[8];
        for (int k = 0; k < (q3 ? 3 : 4); k++) w[k] = _mm512_i32gather_epi32(off, sb + (q3 ? 96 : 0) + 4 * k, 1);
        if (q3) wide_load32(sb, ws, Hm);
        for (int h = 0; h < 2; h++) {
            __m512i P[8];
            wide_load32(sb + (q3 ? 32 : 16) + 32 * h, ws, P);
            for (int e = 0; e < 4; e++) {
                const int j = 4 * h + e;
                kwide_blk *o = &out[j];
                const __m128i sh = _mm_cvtsi32_si128(2 * e), sj = _mm_cvtsi32_si128(j);
                __m512i c[8];
                for (int q = 0; q < 8; q++) {
                    c[q] = _mm512_and_si512(_mm512_srl_epi16(P[q], sh), three);
                    if (q3) /* q = the 2 bits | bit j of hmask[i] << 2, minus 4 */
                        c[q] = _mm512_sub_epi8(
                            _mm512_or_si512(c[q], _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(Hm[q], sj), one), 2)),
                            _mm512_set1_epi8(4));
                }
                kw_store_signed(o, c, true);
                if (q3) {
                    _mm512_store_ps(&o->s0, kw_q3_scale(w, 2 * j));
                    _mm512_store_ps(&o->s1, kw_q3_scale(w, 2 * j + 1));
                } else { /* scales[s]: scale | min << 4, s = 2j, 2j + 1 in word j / 2 */
                    const __m512i b0 = kw_byte(w[j / 2], 2 * (j % 2), false), b1 = kw_byte(w[j / 2], 2 * (j % 2) + 1, false);
                    const __m512i m15 = _mm512_set1_epi32(15);
                    _mm512_store_ps(&o->s0, _mm512_cvtepi32_ps(_mm512_and_si512(b0, m15)));
                    _mm512_store_ps(&o->s1, _mm512_cvtepi32_ps(_mm512_and_si512(b1, m15)));
                    _mm512_store_ps(&o->m0, _mm512_cvtepi32_ps(_mm512_srli_epi32(b0, 4)));
                    _mm512_store_ps(&o->m1, _mm512_cvtepi32_ps(_mm512_srli_epi32(b1, 4)));
                }
                _mm512_store_ps(&o->dw, d);
                _mm512_store_ps(&o->dm, dm);
            }
        }
        return;
    }
    const __m512i dd = _mm512_i32gather_epi32(off, sb, 1);
    const __m512 d = kw_half(dd, false), dm = kw_neg(kw_half(dd, true)); /* d, -dmin */
    /* ix__k4_scales on 16 rows at once: v[0], v[1] scales 0-3, 4-7; v[2], v[3] mins */
    const __m512i a0 = _mm512_i32gather_epi32(off, sb + 4, 1), a1 = _mm512_i32gather_epi32(off, sb + 8, 1),
                  a2 = _mm512_i32gather_epi32(off, sb + 12, 1);
    const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                  m30 = _mm512_set1_epi32(0x30303030);
    const __m512i v[4] = {
        _mm512_and_si512(a0, m3f),
        _mm512_or_si512(_mm512_and_si512(a2, m0f), _mm512_and_si512(_mm512_srli_epi32(a0, 2), m30)),
        _mm512_and_si512(a1, m3f),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, 4), m0f), _mm512_and_si512(_mm512_srli_epi32(a1, 2), m30)),
    };
    __m512i H[8];
    if (t == KQ_Q5_K) wide_load32(sb + 16, ws, H);
    for (int p = 0; p < 4; p++) {
        __m512i Q[8];
        wide_load32(sb + (t == KQ_Q5_K ? 48 : 16) + 32 * p, ws, Q);
        for (int hf = 0; hf < 2; hf++) {
            const int j = 2 * p + hf;
            kwide_blk *o = &out[j];
            const __m128i sh = _mm_cvtsi32_si128(4 * hf), sj = _mm_cvtsi32_si128(j);
            for (int q = 0; q < 8; q++) {
                __m512i u = _mm512_and_si512(_mm512_srl_epi16(Q[q], sh), nib);
                if (t == KQ_Q5_K) /* bit j of qh[i]: element i's fifth bit */
                    u = _mm512_or_si512(u, _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(H[q], sj), one), 4));
                _mm512_store_si512(&o->T[q], u);
            }
            _mm512_store_ps(&o->dw, _mm512_mul_ps(d, kw_byte_ps(v[j / 4], j % 4, false)));
            _mm512_store_ps(&o->dm, _mm512_mul_ps(dm, kw_byte_ps(v[2 + j / 4], j % 4, false)));
        }
    }
}

/* rx X rows (from x, stride xs) against n decoded blocks starting at block
 * b0; acc (rx, 16) in L1. */
static inline __attribute__((always_inline)) void kwide_inner(const ix__tile *a, kq_type t, int rx,
                                                              const kwide_blk *wb, size_t n, size_t b0,
                                                              const uint8_t *x, float (*acc)[W_RW]) {
    const size_t xs = a->xs;
    const bool halves = kq_halves(t), sgn = kw_signed(t), q2 = t == KQ_Q2_K, xsup = kq_x_super(t);
    /* signed types: the rows' X codes of these blocks + 128 (unsigned); Q2_K:
     * the sums of each block's two halves of X codes, as floats */
    _Alignas(64) uint8_t xu[KW_XR][W_KC * IX__QK];
    float xh[KW_XR][W_KC][2];
    if (sgn) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (int i = 0; i < rx; i++)
            for (size_t o = 0; o < n * IX__QK; o += 64)
                _mm512_store_si512(&xu[i][o], _mm512_xor_si512(_mm512_loadu_si512(x + (size_t)i * xs + b0 * IX__QK + o), flip));
    }
    if (q2)
        for (int i = 0; i < rx; i++)
            for (size_t j = 0; j < n; j++)
                for (int k = 0; k < 2; k++) {
                    const __m128i sad = _mm_sad_epu8(_mm_load_si128((const __m128i *)(const void *)&xu[i][j * IX__QK + 16 * (size_t)k]),
                                                     _mm_setzero_si128());
                    xh[i][j][k] = (float)(_mm_cvtsi128_si32(sad) + _mm_extract_epi32(sad, 2) - 16 * 128);
                }
    /* the rows' accumulators stay in registers over the chunk; Q2_K: and
     * the super-block's idot, as an exact float (the chunk holds whole
     * super-blocks) */
    __m512 ra[KW_XR], rs[KW_XR];
    for (int i = 0; i < rx; i++) {
        ra[i] = _mm512_load_ps(acc[i]);
        rs[i] = _mm512_setzero_ps();
    }
    for (size_t j = 0; j < n; j++) {
        const wide_x wx = wide_x_at(a, x, b0 + j);
        __m512i T[8];
        wide_codes(wb[j].T, T);
        __m512i dot[KW_XR], dot1[KW_XR];
        if (halves) {
            const __m512i hb0 = _mm512_load_si512(&wb[j].hb[0]), hb1 = _mm512_load_si512(&wb[j].hb[1]);
            IX__UNROLL(8)
            for (int i = 0; i < rx; i++) {
                dot[i] = hb0;
                dot1[i] = hb1;
            }
            IX__UNROLL(4)
            for (int q = 0; q < 4; q++) {
                IX__UNROLL(8)
                for (int i = 0; i < rx; i++) {
                    const uint8_t *xp = &xu[i][j * IX__QK + 4 * (size_t)q];
                    dot[i] = _mm512_dpbusd_epi32(dot[i], _mm512_broadcastd_epi32(_mm_loadu_si32(xp)), T[q]);
                    dot1[i] = _mm512_dpbusd_epi32(dot1[i], _mm512_broadcastd_epi32(_mm_loadu_si32(xp + 16)), T[q + 4]);
                }
            }
        } else if (sgn) { /* IQ4_XS: one dot, from -128 x the block's code sum */
            const __m512i hb0 = _mm512_load_si512(&wb[j].hb[0]);
            IX__UNROLL(8)
            for (int i = 0; i < rx; i++) dot[i] = hb0;
            IX__UNROLL(8)
            for (int q = 0; q < 8; q++) {
                IX__UNROLL(8)
                for (int i = 0; i < rx; i++)
                    dot[i] = _mm512_dpbusd_epi32(dot[i], _mm512_broadcastd_epi32(_mm_loadu_si32(&xu[i][j * IX__QK + 4 * (size_t)q])), T[q]);
            }
        } else {
            IX__UNROLL(8)
            for (int i = 0; i < rx; i++) dot[i] = _mm512_setzero_si512();
            IX__UNROLL(8)
            for (int q = 0; q < 8; q++) {
                IX__UNROLL(8)
                for (int i = 0; i < rx; i++) dot[i] = dpbusd_bcast(dot[i], T[q], WIDE_XROW(wx, i) + 4 * q);
            }
        }
        const __m512 dw = _mm512_load_ps(&wb[j].dw), dm = _mm512_load_ps(&wb[j].dm);
        /* only what the type's decode stored */
        const __m512 s0 = sgn ? _mm512_load_ps(&wb[j].s0) : _mm512_setzero_ps();
        const __m512 s1 = halves ? _mm512_load_ps(&wb[j].s1) : _mm512_setzero_ps();
        IX__UNROLL(8)
        for (int i = 0; i < rx; i++) {
            const __m512 dx = _mm512_set1_ps(WIDE_XBLK(wx, i)->d);
            __m512 r = ra[i];
            if (xsup) { /* the integer sums per super-block (kernels_int.h, x_super), exact in f32 */
                rs[i] = _mm512_add_ps(rs[i], _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(dot1[i]), _mm512_mul_ps(s0, _mm512_cvtepi32_ps(dot[i]))));
                if ((b0 + j) % IX__SUPER_BLOCKS == IX__SUPER_BLOCKS - 1) {
                    r = _mm512_fmadd_ps(rs[i], _mm512_mul_ps(dw, dx), r);
                    if (q2) {
                        __m512 imin = _mm512_setzero_ps();
                        for (size_t k = j + 1 - IX__SUPER_BLOCKS; k <= j; k++)
                            imin = _mm512_add_ps(imin, _mm512_fmadd_ps(_mm512_load_ps(&wb[k].m1), _mm512_set1_ps(xh[i][k][1]),
                                                                       _mm512_mul_ps(_mm512_load_ps(&wb[k].m0), _mm512_set1_ps(xh[i][k][0]))));
                        r = _mm512_fmadd_ps(imin, _mm512_mul_ps(dm, dx), r);
                    }
                    rs[i] = _mm512_setzero_ps();
                }
            } else if (halves) {
                __m512 idot = _mm512_fmadd_ps(s1, _mm512_cvtepi32_ps(dot1[i]), _mm512_mul_ps(s0, _mm512_cvtepi32_ps(dot[i])));
                r = _mm512_fmadd_ps(idot, _mm512_mul_ps(dw, dx), r);
            } else if (sgn) { /* (float)(sc dot), exact */
                r = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot[i]), s0), _mm512_mul_ps(dw, dx), r);
            } else {
                r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), _mm512_mul_ps(dw, dx), r);
                r = _mm512_fmadd_ps(dm, _mm512_set1_ps(WIDE_XBLK(wx, i)->sd), r);
            }
            ra[i] = r;
        }
    }
    for (int i = 0; i < rx; i++) _mm512_store_ps(acc[i], ra[i]);
}


typedef void (*kwide_inner_fn)(const ix__tile *a, const kwide_blk *wb, size_t n, size_t b0, const uint8_t *x,
                               float (*acc)[W_RW]);
#define KWIDE_INST(T, R)                                                                       \
    static void kwide_##T##_##R(const ix__tile *a, const kwide_blk *wb, size_t n, size_t b0,    \
                                const uint8_t *x, float (*acc)[W_RW]) {                        \
        kwide_inner(a, KQ_##T, R, wb, n, b0, x, acc);                                           \
    }
#define KWIDE_8(T)                                                                             \
    KWIDE_INST(T, 1) KWIDE_INST(T, 2) KWIDE_INST(T, 3) KWIDE_INST(T, 4) KWIDE_INST(T, 5)        \
    KWIDE_INST(T, 6) KWIDE_INST(T, 7) KWIDE_INST(T, 8)
KWIDE_8(Q4_K)
KWIDE_8(Q5_K)
KWIDE_8(Q6_K)
KWIDE_8(Q3_K)
KWIDE_8(Q2_K)
KWIDE_8(IQ4_XS)
#define KWIDE_ROW8(T)                                                                          \
    kwide_##T##_1, kwide_##T##_2, kwide_##T##_3, kwide_##T##_4, kwide_##T##_5, kwide_##T##_6,   \
    kwide_##T##_7, kwide_##T##_8
/* [kw_index][rx - 1] */
static const kwide_inner_fn k_kwide[6][KW_XR] = {
    {KWIDE_ROW8(Q4_K)},
    {KWIDE_ROW8(Q5_K)},
    {KWIDE_ROW8(Q6_K)},
    {KWIDE_ROW8(Q3_K)},
    {KWIDE_ROW8(Q2_K)},
    {KWIDE_ROW8(IQ4_XS)},
};

static inline int kw_index(kq_type t) {
    return t == KQ_Q4_K ? 0 : t == KQ_Q5_K ? 1 : t == KQ_Q6_K ? 2 : t == KQ_Q3_K ? 3 : t == KQ_Q2_K ? 4 : 5;
}

/* One band: 16 W rows x a->rows X rows (<= IX__MM_MCHUNK). */
static inline __attribute__((always_inline)) void kwide_band(const ix__tile *a, kq_type t) {
    _Alignas(64) kwide_blk wb[W_KC];
    _Alignas(64) float acc[IX__MM_MCHUNK][W_RW];
    const kwide_inner_fn *inner = k_kwide[kw_index(t)];
    const size_t nb = a->k / IX__QK, rows = a->rows, xr = kq_halves(t) ? KW_HALF_XR : KW_XR;
    /* the byte offset of lane e's row, WIDE_ROW(e) * ws (kwide_ok: no overflow) */
    const __m512i off = _mm512_mullo_epi32(wide_rows(), _mm512_set1_epi32((int32_t)a->ws));
    for (size_t m = 0; m < rows; m++) _mm512_store_ps(acc[m], _mm512_setzero_ps());
    for (size_t kc = 0; kc < nb; kc += W_KC) {
        size_t n = nb - kc < W_KC ? nb - kc : W_KC; /* whole super-blocks: K % 256 == 0 */
        for (size_t j = 0; j < n; j += 8) {
            for (size_t i = 0; i < 8; i++) ix__prefetch_ahead(a, W_RW, kc + j + i, nb);
            kwide_super(a, t, (kc + j) / 8, off, &wb[j]);
        }
        for (size_t m = 0; m < rows; m += xr) {
            int rx = rows - m < xr ? (int)(rows - m) : (int)xr;
            inner[rx - 1](a, wb, n, kc, a->x + m * a->xs, acc + m);
        }
    }
    wide_store(a, acc, rows);
}

#define KWIDE_BAND(T, t)                                                                       \
    static void kwide_band_##t(const ix__tile *a) { kwide_band(a, KQ_##T); }
KWIDE_BAND(Q4_K, q4_k)
KWIDE_BAND(Q5_K, q5_k)
KWIDE_BAND(Q6_K, q6_k)
KWIDE_BAND(Q3_K, q3_k)
KWIDE_BAND(Q2_K, q2_k)
KWIDE_BAND(IQ4_XS, iq4_xs)
/* [kw_index] */
static const ix__tile_fn k_kwide_band[6][1] = {{kwide_band_q4_k}, {kwide_band_q5_k}, {kwide_band_q6_k},
                                               {kwide_band_q3_k}, {kwide_band_q2_k}, {kwide_band_iq4_xs}};

/* The band when a few X rows share its decoding and the rows' byte offsets
 * fit the gathers' int32 indices. */
static bool kwide_ok(const ix_matmul *mm) {
    return mm->M >= WIDE_MIN_M && ix__mm_wstride(mm) <= (size_t)INT32_MAX / 16;
}

/* ---- packed quantized weights (ix_kernels_pack) ------------------------------------------
 * A packed block is already "transposed": plane j holds dword j of the 16 W
 * rows, one row per 32-bit lane. So a block costs four (Q4_0: plus a mask and
 * a shift each) or eight vector loads for all 16 rows, and each X row then
 * runs 8 vpdpbusd against its own dwords broadcast from memory, leaving the
 * exact dots of the 16 rows in the 16 lanes: no transposes and no per-row
 * reductions, at any M. The accumulators of up to PK_RX X rows stay in
 * registers; more rows re-read the group's codes from L1/L2. Canonical
 * arithmetic (kernels_int.h), so the bits match every other tile and path.
 * Without VNNI (AVX-512BW) a vpdpbusd becomes vpmaddubsw + vpmaddwd, and
 * Q8_0 moves the sign of w onto x so the int16 pairs cannot saturate. */
#define PK_RX 8
#define PK_MCHUNK 128 /* X rows per pass over W (~300 KiB of q8a at K = 2048) */
#define PK_PF_BYTES 4096 /* the one-group tile's prefetch distance along its group's stream, codes
                           * and scales (1 KiB was too short for DRAM latency at ~11 GB/s per
                           * thread; 4 KiB measured 5-10% faster) */

static inline __attribute__((always_inline)) __m512i pk_dp(__m512i acc, __m512i w, const void *x, bool q8,
                                                           bool vnni) {
    __m512i bx = _mm512_broadcastd_epi32(_mm_loadu_si32(x));
    if (vnni) return _mm512_dpbusd_epi32(acc, w, bx);
    const __m512i ones = _mm512_set1_epi16(1);
    if (!q8) return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, bx), ones));
    __m512i sx = _mm512_mask_sub_epi8(bx, _mm512_movepi8_mask(w), _mm512_setzero_si512(), bx);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_abs_epi8(w), sx), ones));
}

/* The packed quantized types, one kind each (kernels_int.h has the layouts):
 * Q8_0, and Q4_0's planes of 4-bit codes for the others (Q2_K / Q3_K: of
 * 2-bit codes), the high bits ORed in from their own planes, the IQ4 grid
 * indices looked up by vpshufb. Q4_K / Q5_K (no offset) take per 32 elements
 * the 16 rows' sub-block scales and mins, two byte loads widened to floats
 * and multiplied into the super-block's d and -dmin: the d sc and -dmin mn
 * of unpack_q45_k, so the canonical min_sx dot and its bits. The types with
 * a scale per 16 (Q6_K: codes q + 32, Q3_K: q + 4, Q2_K) dot their two
 * halves of 16 apart, each starting from -c times the X half's sum, and take
 * the integer scales as the canonical dot does: idot = sc0 dot0 + sc1 dot1
 * (Q2_K: and its integer min term). The 32-element types take Q4_0's one
 * fp16 scale per block (Q4_1 / Q5_1: and m, with the min term s m dx; Q5_0:
 * codes q + 16), IQ4_XS an int8 scale per block times the dot. */
typedef enum pk_kind {
    PK_Q8, PK_Q4, PK_K4, PK_K5, PK_K6, PK_K2, PK_K3,
    PK_NL, PK_XS, PK_41, PK_50, PK_51, /* IQ4_NL, IQ4_XS, Q4_1, Q5_0, Q5_1 */
    PK_KINDS
} pk_kind;

static inline size_t pk_cb(pk_kind kind) {
    return kind == PK_Q8 ? 512 : kind == PK_K5 || kind == PK_50 || kind == PK_51 ? 320 : kind == PK_K6 ? 384
           : kind == PK_K2 ? 128 : kind == PK_K3 ? 192 : 256;
}
/* The kinds with fifth bits (a plane at IX__PK_HI), with grid codes, with a
 * min per block (m s), with scales per super-block of 256 */
static inline bool pk_fifth(pk_kind kind) { return kind == PK_K5 || kind == PK_50 || kind == PK_51; }
static inline bool pk_iq(pk_kind kind) { return kind == PK_NL || kind == PK_XS; }
static inline bool pk_min32(pk_kind kind) { return kind == PK_41 || kind == PK_51; }
static inline bool pk_super(pk_kind kind) {
    return kind == PK_K4 || kind == PK_K5 || kind == PK_K6 || kind == PK_K2 || kind == PK_K3 || kind == PK_XS;
}
/* The offset of a whole block's dot, for the kinds that take one: w + c
 * (Q8_0 and the IQ4 grids on VNNI: + 128) dotted, then -c s */
static inline int32_t pk_blk_off(pk_kind kind, const ix__q8a_blk *xb, bool vnni) {
    return kind == PK_Q4 ? xb->neg8s : (kind == PK_Q8 || pk_iq(kind)) && vnni ? xb->neg128s
           : kind == PK_50 ? -16 * xb->s : 0;
}
/* The kinds with a scale per 16 (Q6_K, Q2_K, Q3_K): halves dotted apart; their code offset */
static inline bool pk_halves(pk_kind kind) { return kind == PK_K6 || kind == PK_K2 || kind == PK_K3; }
static inline int pk_off(pk_kind kind) { return kind == PK_K6 ? 32 : kind == PK_K3 ? 4 : 0; }
/* The kinds whose prefill keeps each group's decoded codes per X chunk
 * (ix__pk_walk_dec, PK_WALK): Q6_K only, see KP_MM. */
static inline bool pk_dec(pk_kind kind) { return kind == PK_K6; }
/* Bytes of a super-block's scales */
static inline size_t pk_sup(pk_kind kind) {
    return kind == PK_K6 || kind == PK_K3 ? IX__PK6_SUPER : kind == PK_K2 ? IX__PK2_SUPER
           : kind == PK_XS ? IX__PKX_SUPER : IX__PK4_SUPER;
}

/* A group's stream unit (kernels_int.h): the per-block kinds one block's
 * codes and scales, the super-block kinds eight blocks' codes and the
 * super-block's scales; and where block b's codes start in the group. */
static inline size_t pk_per(pk_kind kind) { return pk_super(kind) ? 8 : 1; }
static inline size_t pk_ub(pk_kind kind) {
    return pk_per(kind) * pk_cb(kind) + (pk_super(kind) ? pk_sup(kind) : pk_min32(kind) ? 64 : 32);
}
static inline size_t pk_at(pk_kind kind, size_t b) { return ix__pk_block_at(b, pk_per(kind), pk_cb(kind), pk_ub(kind)); }
/* How far ahead a lockstep stream prefetches: IX__PK_LOCK_PF, and half as
 * far again for Q4_K, Q5_K and Q6_K, whose 2.3-3.3 KiB stream units (eight
 * blocks' 4-6 bit codes, then their scales) 2 KiB does not clear. In one
 * process, the distances alternated token by token (2026-12-05), time at
 * 2 KiB over time at 3 KiB: Q5_K 1.04-1.12, Q6_K 1.05-1.08, Q4_K
 * 0.98-1.05; Q4_0 0.88-0.91, Q8_0 0.91-0.95, IQ4_XS median 0.95 keep 2 KiB,
 * and so do Q2_K and Q3_K (end to end no better at 3). The measurements,
 * and 1, 1.5 and 4 KiB: docs/kernels.md, "Scales inside the stream". */
static inline size_t pk_lock_pf(pk_kind kind) {
    const bool far = kind == PK_K4 || kind == PK_K5 || kind == PK_K6;
    return far ? IX__PK_LOCK_PF * 3 / 2 : IX__PK_LOCK_PF;
}

/* Each line of the G streams once, from `ahead` bytes past block b's start
 * to as far past the next block's (ix__pk_pf_lines). */
static inline __attribute__((always_inline)) void pk_pf_block(const ix__pk_tile *a, pk_kind kind, size_t b, size_t ahead,
                                                               int G, bool l1) {
    ix__pk_pf_lines(a->w, a->gstride, G, pk_at(kind, b) + ahead, pk_at(kind, b + 1) + ahead, l1);
}

/* `lines` whole lines from first in each of G streams (a->gstride apart),
 * the streams side by side, as straight-line code: one pointer a stream,
 * so each prefetch is one instruction with a displacement (written as one
 * address sum, GCC kept the 16 sums of Q4_0's block in vector registers,
 * three instructions a prefetch). */
static inline __attribute__((always_inline)) void pk_pf_straight(const ix__pk_tile *a, const uint8_t *first,
                                                                  size_t lines, int G, bool l1) {
    const uint8_t *p[IX__PK_LOCK];
    IX__UNROLL(4)
    for (int g = 0; g < G; g++) p[g] = first + (size_t)g * a->gstride;
    IX__UNROLL(17)
    for (size_t l = 0; l < lines; l++)
        IX__UNROLL(4)
        for (int g = 0; g < G; g++) ix__pk_pf(p[g] + 64 * l, l1);
}

/* Q8_0's lockstep stream asks for its lines a pair of units at a time:
 * two 544-byte units are 17 whole lines, so at every even block the 17
 * lines of the next pair (ahead bytes on) go out as straight-line code, not
 * pk_pf_block's loop of 8 or 9 lines a block: with its counter, compare and
 * branch that loop was over a third of the tile's instructions, the
 * counting alone a sixth (Q8_0's arithmetic is only a load-xor and a
 * vpdpbusd a line). The instructions a core executes between its loads are
 * what hold its stream below a plain read (docs/kernels.md, "Scales inside
 * the stream"): in one process, 22
 * layers of TinyLlama's Q8_0 decode matmuls ran 1.03x faster this way
 * (bench/grab_bench's third part, 4 runs of 48 tokens against the same
 * code alternated with itself, 2026-12-05), and bench/stream_bench's
 * "Q8 tile pairs" reads 1.03-1.09x its "Q8 tile loop". The lines that
 * start in bytes [at(b) + ahead, at(b + 2) + ahead): groups start on a line. */
static inline __attribute__((always_inline)) void pk_pf_pair_q8(const ix__pk_tile *a, size_t b, size_t ahead, int G,
                                                                 bool l1) {
    pk_pf_straight(a, a->w + pk_at(PK_Q8, b) + ahead, 2 * pk_ub(PK_Q8) / 64, G, l1);
}

/* The lockstep stream of the other one-block kinds (Q4_0, IQ4_NL, Q4_1,
 * Q5_0, Q5_1) asks for block b's code lines (ahead bytes on) as
 * straight-line code, a whole number of lines from one pointer a stream,
 * and only the lines that start in its scales by pk_pf_block's loop (none
 * or one): a loop iteration a block, not a line. In one process
 * (bench/grab_bench's third part with a throwaway switch, 22 layers of
 * TinyLlama's decode matmuls, runs of 32 tokens, 2026-12-05), time with the
 * loop over time this way: Q4_0 median 1.004 over 10 runs where the same
 * code alternated with itself gave 0.988 (a first form, its addresses
 * spilled, 1.03-1.08 over 4); IQ4_NL, Q5_0, Q4_1 and Q5_1 within that
 * harness's spread. The super-block kinds keep the loop (within +-2%
 * either way, Q3_K 4% slower). */
static inline __attribute__((always_inline)) void pk_pf_codes(const ix__pk_tile *a, pk_kind kind, size_t b, size_t ahead,
                                                               int G, bool l1) {
    const size_t from = pk_at(kind, b) + ahead;
    /* cb is whole lines: they start at the first line start past from */
    pk_pf_straight(a, a->w + ((from + 63) & ~(size_t)63), pk_cb(kind) / 64, G, l1);
    ix__pk_pf_lines(a->w, a->gstride, G, from + pk_cb(kind), pk_at(kind, b + 1) + ahead, l1);
}

/* v's 16-bit lanes shifted left by n (right by -n) */
static inline __attribute__((always_inline)) __m512i pk_shl(__m512i v, int n) {
    return n > 0 ? _mm512_slli_epi16(v, (unsigned)n) : n < 0 ? _mm512_srli_epi16(v, (unsigned)-n) : v;
}

/* The unsigned codes of a 4-bit or K-quant block at c: T[j] elements 4j..
 * of each row's dword, T[4 + j] elements 16 + 4j.. (the high bits from
 * their planes: a shift brings a plane's bits for j to bit 4, a mask keeps
 * them; what a 16-bit shift carries across bytes is masked off). */
static inline __attribute__((always_inline)) void pk_codes(pk_kind kind, const uint8_t *c, __m512i T[8], bool vnni) {
    if (kind == PK_K2 || kind == PK_K3) { /* 2-bit planes at bits 2j (+ Q3_K's third bits at j, 4 + j) */
        const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
        const __m512i l0 = _mm512_loadu_si512((const void *)c), l1 = _mm512_loadu_si512((const void *)(c + 64));
        const __m512i h = kind == PK_K3 ? _mm512_loadu_si512((const void *)(c + 128)) : l0;
        IX__UNROLL(4)
        for (int j = 0; j < 4; j++) {
            T[j] = _mm512_and_si512(pk_shl(l0, -2 * j), m3);
            T[j + 4] = _mm512_and_si512(pk_shl(l1, -2 * j), m3);
            if (kind == PK_K3) {
                T[j] = _mm512_or_si512(T[j], _mm512_and_si512(pk_shl(h, 2 - j), b2));
                T[j + 4] = _mm512_or_si512(T[j + 4], _mm512_and_si512(pk_shl(h, -2 - j), b2));
            }
        }
        return;
    }
    const __m512i nib = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10), b45 = _mm512_set1_epi8(0x30);
    const __m512i h0 = pk_fifth(kind) || kind == PK_K6 ? _mm512_loadu_si512((const void *)(c + IX__PK_HI)) : _mm512_setzero_si512();
    /* the IQ4 grid (+ 128 as u8 for vpdpbusd; signed for the sign trick without VNNI) */
    const __m512i grid = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)ix__iq4_grid)),
                                          _mm512_set1_epi8(vnni ? (char)0x80 : 0));
    const __m512i h1 = kind == PK_K6 ? _mm512_loadu_si512((const void *)(c + IX__PK_HI + 64)) : h0;
    IX__UNROLL(4)
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_loadu_si512((const void *)(c + 64 * j));
        T[j] = _mm512_and_si512(v, nib);
        T[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
        if (pk_iq(kind)) {
            T[j] = _mm512_shuffle_epi8(grid, T[j]);
            T[j + 4] = _mm512_shuffle_epi8(grid, T[j + 4]);
        } else if (pk_fifth(kind)) {
            T[j] = _mm512_or_si512(T[j], _mm512_and_si512(pk_shl(h0, 4 - j), b4));
            T[j + 4] = _mm512_or_si512(T[j + 4], _mm512_and_si512(pk_shl(h0, -j), b4));
        } else if (kind == PK_K6) {
            T[j] = _mm512_or_si512(T[j], _mm512_and_si512(pk_shl(h0, 4 - 2 * j), b45));
            T[j + 4] = _mm512_or_si512(T[j + 4], _mm512_and_si512(pk_shl(h1, 4 - 2 * j), b45));
        }
    }
}

static inline __attribute__((always_inline)) __m512 pk4_sub(const uint8_t *p, __m512 d) {
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p))));
}
/* Q4_K / Q5_K's super-block scales of a group at S: d and -dmin (exact). */
static inline __attribute__((always_inline)) void pk4_super(const uint8_t *S, __m512 *d, __m512 *ndm) {
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + IX__PK4_D)));
    __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + IX__PK4_DMIN)));
    *ndm = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
}
/* Q6_K's int8 scales of sub-block s (of 16) of the 16 rows, as int32 */
static inline __attribute__((always_inline)) __m512i pk6_sc(const uint8_t *S, size_t s) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(S + IX__PK6_SC + s * IX__PK)));
}
/* The int8 scales of block b's halves (sub-blocks 2 (b % 8) and the next)
 * of a Q6_K group whose super-block scales are at S, as int32. */
static inline __attribute__((always_inline)) void pk_half_scales(const uint8_t *S, size_t b, __m512i sc[2]) {
    for (size_t k = 0; k < 2; k++) sc[k] = pk6_sc(S, 2 * (b % 8) + k);
}

/* Q2_K's scales and mins of block b's halves for the 16 rows, each row's
 * pair in one dword: *sc = sc0 | sc1 << 16, *mn = mn0 | mn1 << 16 (the pack
 * layout keeps a row's two scale bytes side by side). */
static inline __attribute__((always_inline)) void pk_q2_scales(const uint8_t *S, size_t b, __m512i *sc, __m512i *mn) {
    const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(S + IX__PK2_SM + ix__pk_pair_at(b % 8, 0, 0))));
    *sc = _mm512_and_si512(v, _mm512_set1_epi16(15));
    *mn = _mm512_srli_epi16(v, 4);
}
/* A q8a block's two half sums as one dword, h0 | h1 << 16 (|h| <= 16 x 128) */
static inline __attribute__((always_inline)) __m512i pk_q2_h(const ix__q8a_blk *xb) {
    return _mm512_set1_epi32((int32_t)(((uint32_t)xb->h0 & 0xffffu) | (uint32_t)xb->h1 << 16));
}

/* A scale-per-16 kind's dot offset for one half of a block, -c h (c =
 * pk_off; h = the half's X sum in the q8a block). A multiply and a
 * broadcast from a scalar register measured 1-3% faster here than a
 * broadcast from memory shifted and negated (Q6_K prefill). */
static inline __attribute__((always_inline)) __m512i pk_half_off(int c, const int32_t *h) {
    return c ? _mm512_set1_epi32(-c * *h) : _mm512_setzero_si512();
}

/* A row's two half dots as one dword, dl | dh << 16 (each fits an int16):
 * the pairwise multiply-add then takes both against the row's scale pair. */
static inline __attribute__((always_inline)) __m512i pk_dot_pair(__m512i dl, __m512i dh) {
    return _mm512_mask_blend_epi16(0xaaaaaaaau, dl, _mm512_slli_epi32(dh, 16));
}
/* Q2_K's block added to the super-block's integer sums: *is += sc0 dl +
 * sc1 dh, *ims += mn0 h0 + mn1 h1, each a pair of int16 products per dword
 * (pk_q2_scales' pairs; h = pk_q2_h): dl and dh go into one dword's low and
 * high word first. Every factor fits an int16 (|dl|, |dh| <= 16 x 3 x 128,
 * |h| <= 16 x 128, scales and mins 0..15), so each sum is exact. */
static inline __attribute__((always_inline)) void pk_q2_sums(__m512i *is, __m512i *ims, __m512i dl, __m512i dh, __m512i sc,
                                                              __m512i mn, __m512i h, bool vnni) {
    const __m512i p = pk_dot_pair(dl, dh);
    if (vnni) {
        *is = _mm512_dpwssd_epi32(*is, p, sc);
        *ims = _mm512_dpwssd_epi32(*ims, mn, h);
        return;
    }
    *is = _mm512_add_epi32(*is, _mm512_madd_epi16(p, sc));
    *ims = _mm512_add_epi32(*ims, _mm512_madd_epi16(mn, h));
}

/* Q3_K's scales of block b's halves for the 16 rows, each row's pair in one
 * dword: sc0 | sc1 << 16, sign-extended words (the pack layout keeps a row's
 * two scales side by side, as Q2_K's). */
static inline __attribute__((always_inline)) __m512i pk_q3_scales(const uint8_t *S, size_t b) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(S + IX__PK6_SC + ix__pk_pair_at(b % 8, 0, 0))));
}
/* Q3_K's block added to the super-block's integer sum: is + sc0 dl + sc1
 * dh, one pair of int16 products per dword (dl and dh blended into one
 * dword's low and high word: |dl|, |dh| <= 16 x 4 x 128, scales -32..31),
 * so the sum is exact. */
static inline __attribute__((always_inline)) __m512i pk_q3_sums(__m512i is, __m512i dl, __m512i dh, __m512i sc, bool vnni) {
    const __m512i p = pk_dot_pair(dl, dh);
    return vnni ? _mm512_dpwssd_epi32(is, p, sc) : _mm512_add_epi32(is, _mm512_madd_epi16(p, sc));
}

/* G groups (a->gstride apart) against rx X rows. G = 1 is the tile of
 * prefill and of the last few groups; G > 1 (at most IX__PK_LOCK, rx at
 * most IX__PK_LOCK_RX) is the few-row lockstep tile of speculative
 * verification, draft catch-up passes and steps of 2 to 6 decoding
 * sequences: G streams in flight, as pk_lock_run at one row. Each group's
 * arithmetic is the same in either, so are its bits. */

static inline __attribute__((always_inline)) void pk_run_g(const ix__pk_tile *a, pk_kind kind, bool vnni, int rx,
                                                            int G) {
    enum { GMAX = IX__PK_LOCK };
    const bool q8 = kind == PK_Q8, k45 = kind == PK_K4 || kind == PK_K5, k6 = pk_halves(kind), q2 = kind == PK_K2;
    const bool q3 = kind == PK_K3;
    const bool xs = kind == PK_XS, m32 = pk_min32(kind), sgn = q8 || pk_iq(kind); /* sgn: signed w without VNNI */
    const int c6 = pk_off(kind);
    const size_t nb = a->k / IX__QK, gs = a->gstride;
    const size_t pf = G > 1 ? pk_lock_pf(kind) : PK_PF_BYTES;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[GMAX][PK_RX], d[GMAX], ndm[GMAX];
    __m512i isum[GMAX][PK_RX], imsum[GMAX][PK_RX]; /* Q2_K, Q3_K: the super-block's integer sums */
    for (int g = 0; g < G; g++) {
        d[g] = ndm[g] = _mm512_setzero_ps();
        for (int i = 0; i < rx; i++) {
            acc[g][i] = _mm512_setzero_ps();
            isum[g][i] = imsum[g][i] = _mm512_setzero_si512();
        }
    }
    for (size_t b = 0; b < nb; b++) {
        /* each stream's lines once, codes and scales: G > 1 pk_lock_pf
         * ahead (as pk_lock_run), G = 1 PK_PF_BYTES */
        pk_pf_block(a, kind, b, pf, G, false);
        IX__UNROLL(4)
        for (int g = 0; g < G; g++) {
            const uint8_t *c = a->w + g * gs + pk_at(kind, b);
            const uint8_t *S = a->scales + g * gs + b / pk_per(kind) * pk_ub(kind);
            __m512i T[8];
            if (q8) {
                IX__UNROLL(8)
                for (int j = 0; j < 8; j++) {
                    __m512i v = _mm512_loadu_si512((const void *)(c + 64 * j));
                    T[j] = vnni ? _mm512_xor_si512(v, flip) : v;
                }
            } else if (pk_dec(kind) && G == 1 && a->dec && !a->dec_fill) { /* decoded by the chunk's first tile (PK_WALK) */
                IX__UNROLL(8)
                for (int j = 0; j < 8; j++) T[j] = _mm512_load_si512((const void *)(a->dec + b * IX__PK_DEC_BLOCK + 64 * j));
            } else {
                pk_codes(kind, c, T, vnni);
                if (pk_dec(kind) && G == 1 && a->dec)
                    for (int j = 0; j < 8; j++) _mm512_store_si512((void *)(a->dec + b * IX__PK_DEC_BLOCK + 64 * j), T[j]);
            }
            __m512 dw, dmn = _mm512_setzero_ps();
            __m512i sc[2], mn[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, sx = mn[0];
            if (k45) {
                if (b % 8 == 0) pk4_super(S, &d[g], &ndm[g]);
                dw = pk4_sub(S + IX__PK4_SC + b % 8 * IX__PK, d[g]);
                dmn = pk4_sub(S + IX__PK4_MN + b % 8 * IX__PK, ndm[g]);
            } else if (k6) {
                if (b % 8 == 0) {
                    if (q2) pk4_super(S, &d[g], &ndm[g]); /* Q2_K's d and dmin sit where Q4_K's do */
                    else d[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + IX__PK6_D)));
                }
                dw = d[g];
                if (q2) pk_q2_scales(S, b, &sc[0], &mn[0]);
                else if (q3) sc[0] = pk_q3_scales(S, b);
                else pk_half_scales(S, b, sc);
            } else if (xs) { /* d per super-block, an int8 scale per block */
                if (b % 8 == 0) d[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + IX__PKX_D)));
                dw = d[g];
                sx = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(S + IX__PKX_SC + b % 8 * IX__PK)));
            } else { /* fp16 d (and m) per block */
                dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)S));
                if (m32) dmn = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + 32)));
            }
            if (k6) { /* row by row: two dots per row live, not 2 rx (no spills) */
                IX__UNROLL(8)
                for (int i = 0; i < rx; i++) {
                    const uint8_t *xr = a->x + (size_t)i * a->xs, *xq = xr + b * IX__QK;
                    const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
                    __m512i lo = pk_half_off(c6, &xb->h0), hi = pk_half_off(c6, &xb->h1);
                    IX__UNROLL(4)
                    for (int j = 0; j < 4; j++) {
                        lo = pk_dp(lo, T[j], xq + 4 * j, false, vnni);
                        hi = pk_dp(hi, T[j + 4], xq + 16 + 4 * j, false, vnni);
                    }
                    const __m512 xd = _mm512_set1_ps(xb->d);
                    if (q2 || q3) { /* the integer sums per super-block (kernels_int.h, x_super) */
                        if (q2) pk_q2_sums(&isum[g][i], &imsum[g][i], lo, hi, sc[0], mn[0], pk_q2_h(xb), vnni);
                        else isum[g][i] = pk_q3_sums(isum[g][i], lo, hi, sc[0], vnni);
                        if (b % IX__SUPER_BLOCKS == IX__SUPER_BLOCKS - 1)
                            acc[g][i] = xs_flush(acc[g][i], &isum[g][i], &imsum[g][i], dw, ndm[g], xd, q2);
                        continue;
                    }
                    __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(lo, sc[0]), _mm512_mullo_epi32(hi, sc[1]));
                    acc[g][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, xd), acc[g][i]);
                }
                continue;
            }
            __m512i dot[PK_RX];
            IX__UNROLL(8)
            for (int i = 0; i < rx; i++) {
                const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(a->x + (size_t)i * a->xs + a->blk_off) + b;
                dot[i] = _mm512_set1_epi32(pk_blk_off(kind, xb, vnni));
            }
            IX__UNROLL(8)
            for (int j = 0; j < 8; j++) {
                IX__UNROLL(8)
                for (int i = 0; i < rx; i++)
                    dot[i] = pk_dp(dot[i], T[j], a->x + (size_t)i * a->xs + b * IX__QK + 4 * j, sgn, vnni);
            }
            IX__UNROLL(8)
            for (int i = 0; i < rx; i++) {
                const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(a->x + (size_t)i * a->xs + a->blk_off) + b;
                if (xs) dot[i] = _mm512_mullo_epi32(dot[i], sx); /* sc sum0 + sc sum1, one scale per 32 */
                acc[g][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]), _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[g][i]);
                if (k45) acc[g][i] = _mm512_fmadd_ps(dmn, _mm512_set1_ps(xb->sd), acc[g][i]);
                if (m32) /* the integer min term: s times m dx */
                    acc[g][i] = _mm512_fmadd_ps(_mm512_set1_ps(xb->fs), _mm512_mul_ps(dmn, _mm512_set1_ps(xb->d)),
                                                acc[g][i]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int i = 0; i < rx; i++) _mm512_storeu_ps(a->y + (size_t)i * a->ldy + (size_t)g * a->ygs, acc[g][i]);
}
static inline __attribute__((always_inline)) void pk_run(const ix__pk_tile *a, pk_kind kind, bool vnni, int rx) {
    pk_run_g(a, kind, vnni, rx, 1);
}

/* The lockstep tile (IX__PK_LOCK groups, one X row: decode), VNNI. The x
 * broadcasts are shared by the groups. Q4_0 and Q4_K split a byte's
 * nibbles by masking alone: the high nibble stays scaled by 16 in its own
 * sum, which is divided back exactly (a multiple of 16; no int32 overflow at
 * these magnitudes), so the integer dot, and with it every bit, equals
 * pk_run's. Q5_K and Q6_K, whose codes do not fit a byte times 16, take
 * pk_run's codes. */
static inline __attribute__((always_inline)) void pk_lock_run(const ix__pk_tile *a, pk_kind kind, bool l1) {
    enum { G = IX__PK_LOCK };
    const bool q8 = kind == PK_Q8, k45 = kind == PK_K4 || kind == PK_K5, k6 = pk_halves(kind), q2 = kind == PK_K2;
    const bool q3 = kind == PK_K3, xs = kind == PK_XS, m32 = pk_min32(kind), sup_k = pk_super(kind);
    const bool masked = kind == PK_Q4 || kind == PK_K4 || kind == PK_41; /* the nibble split by masks alone */
    const int c6 = pk_off(kind);
    const size_t nb = a->k / IX__QK, gs = a->gstride, ub = pk_ub(kind);
    const __m512i lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8((char)0xf0),
                  flip = _mm512_set1_epi8((char)0x80);
    __m512 acc[G], d[G], ndm[G];
    __m512i isum[G], imsum[G]; /* Q2_K, Q3_K: the super-block's integer sums */
    for (int g = 0; g < G; g++) {
        acc[g] = d[g] = ndm[g] = _mm512_setzero_ps();
        isum[g] = imsum[g] = _mm512_setzero_si512();
    }
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *c = a->w + pk_at(kind, b), *x = a->x + b * IX__QK;
        const uint8_t *S = a->scales + b / pk_per(kind) * ub; /* the unit's scales */
        const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(a->x + a->blk_off) + b;
        if (q8) {
            if (b % 2 == 0) pk_pf_pair_q8(a, b, pk_lock_pf(kind), G, l1);
        } else if (sup_k) pk_pf_block(a, kind, b, pk_lock_pf(kind), G, l1);
        else pk_pf_codes(a, kind, b, pk_lock_pf(kind), G, l1);
        if (sup_k && b % 8 == 0) {
            IX__UNROLL(4)
            for (int g = 0; g < G; g++) {
                if (k45 || q2) pk4_super(S + g * gs, &d[g], &ndm[g]); /* Q2_K's d and dmin sit where Q4_K's do */
                else d[g] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + g * gs))); /* PK6_D, PKX_D */
            }
        }
        const __m512i o0 = pk_half_off(c6, &xb->h0), o1 = pk_half_off(c6, &xb->h1);
        __m512i dl[G], dh[G];
        IX__UNROLL(4)
        for (int g = 0; g < G; g++) {
            dl[g] = o0;
            dh[g] = o1;
        }
        if (q8) {
            IX__UNROLL(8)
            for (int j = 0; j < 8; j++) {
                const __m512i xj = _mm512_set1_epi32((int32_t)ix__load_u32(x + 4 * j));
                IX__UNROLL(4)
                for (int g = 0; g < G; g++) {
                    __m512i v = _mm512_xor_si512(_mm512_loadu_si512((const void *)(c + g * gs + 64 * j)), flip);
                    dl[g] = _mm512_dpbusd_epi32(dl[g], v, xj);
                }
            }
        } else if (masked) {
            IX__UNROLL(4)
            for (int j = 0; j < 4; j++) {
                const __m512i xl = _mm512_set1_epi32((int32_t)ix__load_u32(x + 4 * j));
                const __m512i xh = _mm512_set1_epi32((int32_t)ix__load_u32(x + 16 + 4 * j));
                IX__UNROLL(4)
                for (int g = 0; g < G; g++) {
                    __m512i v = _mm512_loadu_si512((const void *)(c + g * gs + 64 * j));
                    dl[g] = _mm512_dpbusd_epi32(dl[g], _mm512_and_si512(v, lo), xl);
                    dh[g] = _mm512_dpbusd_epi32(dh[g], _mm512_and_si512(v, hi), xh);
                }
            }
        } else {
            __m512i xv[8];
            IX__UNROLL(8)
            for (int j = 0; j < 8; j++) xv[j] = _mm512_set1_epi32((int32_t)ix__load_u32(x + 4 * j));
            IX__UNROLL(4)
            for (int g = 0; g < G; g++) {
                __m512i T[8];
                pk_codes(kind, c + g * gs, T, true);
                IX__UNROLL(4)
                for (int j = 0; j < 4; j++) {
                    dl[g] = _mm512_dpbusd_epi32(dl[g], T[j], xv[j]);
                    dh[g] = _mm512_dpbusd_epi32(dh[g], T[j + 4], xv[j + 4]);
                }
            }
        }
        const __m512i off = _mm512_set1_epi32(pk_blk_off(kind, xb, true));
        const __m512 xd = _mm512_set1_ps(xb->d), sxd = _mm512_set1_ps(xb->sd);
        const __m512i h2 = q2 ? pk_q2_h(xb) : _mm512_setzero_si512();
        IX__UNROLL(4)
        for (int g = 0; g < G; g++) {
            const uint8_t *Sg = S + g * gs;
            __m512i dot, sc[2], mn[2];
            if (q2 || q3) { /* the integer sums per super-block (kernels_int.h, x_super) */
                if (q2) {
                    pk_q2_scales(Sg, b, &sc[0], &mn[0]);
                    pk_q2_sums(&isum[g], &imsum[g], dl[g], dh[g], sc[0], mn[0], h2, true);
                } else {
                    isum[g] = pk_q3_sums(isum[g], dl[g], dh[g], pk_q3_scales(Sg, b), true);
                }
                if (b % IX__SUPER_BLOCKS == IX__SUPER_BLOCKS - 1)
                    acc[g] = xs_flush(acc[g], &isum[g], &imsum[g], d[g], ndm[g], xd, q2);
                continue;
            }
            if (k6) {
                pk_half_scales(Sg, b, sc);
                dot = _mm512_add_epi32(_mm512_mullo_epi32(dl[g], sc[0]), _mm512_mullo_epi32(dh[g], sc[1]));
            }
            else if (masked) dot = _mm512_add_epi32(_mm512_add_epi32(off, dl[g]), _mm512_srai_epi32(dh[g], 4));
            else dot = _mm512_add_epi32(_mm512_add_epi32(off, dl[g]), dh[g]);
            if (xs) /* one int8 scale per 32 */
                dot = _mm512_mullo_epi32(dot, _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(Sg + IX__PKX_SC + b % 8 * IX__PK))));
            const __m512 dw =
                k45 ? pk4_sub(Sg + IX__PK4_SC + b % 8 * IX__PK, d[g])
                : sup_k ? d[g]
                     : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)Sg));
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, xd), acc[g]);
            if (m32) /* the integer min term: s times m dx */
                acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(xb->fs),
                                         _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(Sg + 32))), xd),
                                         acc[g]);
            if (k45) acc[g] = _mm512_fmadd_ps(pk4_sub(Sg + IX__PK4_MN + b % 8 * IX__PK, ndm[g]), sxd, acc[g]);
        }
    }
    for (int g = 0; g < G; g++) _mm512_storeu_ps(a->y + g * a->ygs, acc[g]);
}
/* One X row: pk_lock_run; 2..IX__PK_LOCK_RX rows: pk_run_g over
 * ix__pk_lock_groups(rx) groups. At 6 rows only Q8_0's: the others' code
 * vectors, 12 accumulators and 6 dots outgrow the registers, and their
 * two-group tile measured up to 1.4x slower than the one-group tiles
 * (kernels_bench -d 6; Q8_0's 1.1x faster). */
#define PK_GLOCK(K, R)                                                                         \
    static void pk_glock_##K##_##R(const ix__pk_tile *a) {                                      \
        pk_run_g(a, PK_##K, true, R, (int)ix__pk_lock_groups(R));                               \
    }
#define PK_LOCKS(K)                                                                            \
    static void pk_lock_##K(const ix__pk_tile *a) { pk_lock_run(a, PK_##K, false); }            \
    static void pk_lock_l1_##K(const ix__pk_tile *a) { pk_lock_run(a, PK_##K, true); }          \
    PK_GLOCK(K, 2) PK_GLOCK(K, 3) PK_GLOCK(K, 4) PK_GLOCK(K, 5)
PK_LOCKS(Q8)
PK_LOCKS(Q4)
PK_LOCKS(K4)
PK_LOCKS(K5)
PK_LOCKS(K6)
PK_LOCKS(K2)
PK_LOCKS(K3)
PK_LOCKS(NL)
PK_LOCKS(XS)
PK_LOCKS(41)
PK_LOCKS(50)
PK_LOCKS(51)
PK_GLOCK(Q8, 6)
#define PK_LOCK_ROW(K, L, SIX) {pk_lock_##L##K, pk_glock_##K##_2, pk_glock_##K##_3, pk_glock_##K##_4, pk_glock_##K##_5, SIX}
#define PK_LOCK_TABLE(L)                                                                       \
    {PK_LOCK_ROW(Q8, L, pk_glock_Q8_6), PK_LOCK_ROW(Q4, L, NULL), PK_LOCK_ROW(K4, L, NULL),        \
     PK_LOCK_ROW(K5, L, NULL),          PK_LOCK_ROW(K6, L, NULL), PK_LOCK_ROW(K2, L, NULL),        \
     PK_LOCK_ROW(K3, L, NULL),          PK_LOCK_ROW(NL, L, NULL), PK_LOCK_ROW(XS, L, NULL),        \
     PK_LOCK_ROW(41, L, NULL),          PK_LOCK_ROW(50, L, NULL), PK_LOCK_ROW(51, L, NULL)}
/* [kind][rx - 1]; k_lock_l1: decode's one-row tiles prefetching into L1 */
static const ix__pk_fn k_lock_l2[PK_KINDS][IX__PK_LOCK_RX] = PK_LOCK_TABLE();
static const ix__pk_fn k_lock_l1[PK_KINDS][IX__PK_LOCK_RX] = PK_LOCK_TABLE(l1_);

/* Where decode's one-row lockstep tiles prefetch the weights: into L2
 * (IX__PF_LOC) on the Zen 4 host, where that raised decode 1.13-1.54x over
 * L1, and into L1 on Zen 5 (AMD family 26), where L1 measured better
 * (inferx bench at ~80 GB/s, 3 alternations, 2026-12-04: Q4_0 0.71 -> 0.82
 * of the bound, Q8_0 0.77 -> 0.84, Q2_K 0.63 -> 0.66, Q4_K_M 0.71 -> 0.78;
 * docs/kernels.md). The few-row tiles (pk_run_g) keep prefetching into L2.
 * INFERX_PREFETCH=l1|l2 overrides the choice. Set once, when the table is
 * first asked for; the bits do not depend on it. */
static _Atomic int g_pf_l1 = -1; /* -1: not chosen yet */

static void pf_choose(void) {
    if (atomic_load_explicit(&g_pf_l1, memory_order_relaxed) >= 0) return;
    const char *e = getenv("INFERX_PREFETCH");
    int l1 = ix_cpu_features_get()->amd_family == 26;
    if (e && !strcmp(e, "l1")) l1 = 1;
    else if (e && !strcmp(e, "l2")) l1 = 0;
    else if (e && *e) IX_LOGW("kernels: INFERX_PREFETCH=%s is not l1 or l2; using %s", e, l1 ? "l1" : "l2");
    atomic_store_explicit(&g_pf_l1, l1, memory_order_relaxed);
}

static inline const ix__pk_fn *k_lock(size_t kind) {
    return atomic_load_explicit(&g_pf_l1, memory_order_relaxed) > 0 ? k_lock_l1[kind] : k_lock_l2[kind];
}

#define PK_INST(K, TAG, V, R)                                                                  \
    static void pk_##K##_##TAG##_##R(const ix__pk_tile *a) { pk_run(a, PK_##K, V, R); }
#define PK_ALL(K, TAG, V)                                                                      \
    PK_INST(K, TAG, V, 1) PK_INST(K, TAG, V, 2) PK_INST(K, TAG, V, 3) PK_INST(K, TAG, V, 4)     \
    PK_INST(K, TAG, V, 5) PK_INST(K, TAG, V, 6) PK_INST(K, TAG, V, 7) PK_INST(K, TAG, V, 8)
#define PK_KIND(K) PK_ALL(K, vnni, true) PK_ALL(K, bw, false)
PK_KIND(Q8)
PK_KIND(Q4)
PK_KIND(K4)
PK_KIND(K5)
PK_KIND(K6)
PK_KIND(K2)
PK_KIND(K3)
PK_KIND(NL)
PK_KIND(XS)
PK_KIND(41)
PK_KIND(50)
PK_KIND(51)
#define PK_ROW(K, TAG)                                                                         \
    {pk_##K##_##TAG##_1, pk_##K##_##TAG##_2, pk_##K##_##TAG##_3, pk_##K##_##TAG##_4,             \
     pk_##K##_##TAG##_5, pk_##K##_##TAG##_6, pk_##K##_##TAG##_7, pk_##K##_##TAG##_8}
/* [vnni][kind][rx - 1] */
static const ix__pk_fn k_pk[2][PK_KINDS][PK_RX] = {
    {PK_ROW(Q8, bw), PK_ROW(Q4, bw), PK_ROW(K4, bw), PK_ROW(K5, bw), PK_ROW(K6, bw), PK_ROW(K2, bw), PK_ROW(K3, bw),
     PK_ROW(NL, bw), PK_ROW(XS, bw), PK_ROW(41, bw), PK_ROW(50, bw), PK_ROW(51, bw)},
    {PK_ROW(Q8, vnni), PK_ROW(Q4, vnni), PK_ROW(K4, vnni), PK_ROW(K5, vnni), PK_ROW(K6, vnni), PK_ROW(K2, vnni),
     PK_ROW(K3, vnni), PK_ROW(NL, vnni), PK_ROW(XS, vnni), PK_ROW(41, vnni), PK_ROW(50, vnni), PK_ROW(51, vnni)},
};

/* F16 / BF16 packed weights: element k of the group's 16 rows is one
 * vcvtph2ps (BF16: a zero-extend and a shift) away from a vector of the 16
 * rows, which each X row multiplies by its element k (a broadcast load) into
 * its own accumulator: 16 outputs per FMA, one convert per PKF_RX FMAs, no
 * horizontal sums. */
#define PKF_RX 12
#define PKF_MCHUNK 48 /* f32 X rows per pass over W (384 KiB at K = 2048) */

/* The 16 halves at p (64-byte aligned group data) as floats, exactly. */
static inline __attribute__((always_inline)) __m512 pkf_ld(const uint8_t *p, bool bf) {
    const __m256i h = _mm256_load_si256((const __m256i *)(const void *)p);
    return bf ? bf16x16(h) : _mm512_cvtph_ps(h);
}

static inline __attribute__((always_inline)) void pkf_run(const ix__pk_tile *a, int rx, bool bf) {
    /* two accumulators per row (even and odd k), so that few rows still
     * cover the FMA latency; for every rx alike, since a row's result must
     * not depend on how many rows share its tile (batch invariance) */
    const uint8_t *wg = a->w;
    const size_t K = a->k, ldx = a->xs / sizeof(float);
    const float *x = (const float *)(const void *)a->x;
    __m512 acc[2][PKF_RX];
    for (int i = 0; i < rx; i++) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 2 <= K; k += 2) {
        __builtin_prefetch(wg + k * 32 + PK_PF_BYTES, 0, IX__PF_LOC);
        __m512 w0 = pkf_ld(wg + k * 32, bf), w1 = pkf_ld(wg + k * 32 + 32, bf);
        IX__UNROLL(12)
        for (int i = 0; i < rx; i++) {
            const float *xr = x + (size_t)i * ldx + k;
            acc[0][i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xr[0]), acc[0][i]);
            acc[1][i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(xr[1]), acc[1][i]);
        }
    }
    if (k < K) {
        __m512 w0 = pkf_ld(wg + k * 32, bf);
        for (int i = 0; i < rx; i++)
            acc[0][i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[(size_t)i * ldx + k]), acc[0][i]);
    }
    for (int i = 0; i < rx; i++)
        _mm512_storeu_ps(a->y + (size_t)i * a->ldy, _mm512_add_ps(acc[0][i], acc[1][i]));
}

/* The F16 / BF16 lockstep tiles: pkf_run's arithmetic for each of rx X rows
 * (1..IX__PK_LOCK_RX), over G = ix__pk_lock_groups(rx) groups side by side:
 * 2 G rx accumulators (at most 24 of the 32 registers), the x broadcasts
 * shared by the groups. */
static inline __attribute__((always_inline)) void pkf_lock_run(const ix__pk_tile *a, int rx, bool bf) {
    enum { GMAX = IX__PK_LOCK };
    const int G = (int)ix__pk_lock_groups((size_t)rx);
    const uint8_t *wg = a->w;
    const size_t K = a->k, gs = a->gstride, ldx = a->xs / sizeof(float);
    const float *x = (const float *)(const void *)a->x;
    __m512 acc[2][GMAX][IX__PK_LOCK_RX];
    for (int g = 0; g < G; g++)
        for (int i = 0; i < rx; i++) acc[0][g][i] = acc[1][g][i] = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + 2 <= K; k += 2) {
        IX__UNROLL(4)
        for (int g = 0; g < G; g++) {
            const uint8_t *w = wg + g * gs + k * 32;
            __builtin_prefetch(wg + g * gs + k * 32 + IX__PK_LOCK_PF, 0, IX__PF_LOC);
            const __m512 w0 = pkf_ld(w, bf), w1 = pkf_ld(w + 32, bf);
            IX__UNROLL(6)
            for (int i = 0; i < rx; i++) {
                const float *xr = x + (size_t)i * ldx + k;
                acc[0][g][i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(xr[0]), acc[0][g][i]);
                acc[1][g][i] = _mm512_fmadd_ps(w1, _mm512_set1_ps(xr[1]), acc[1][g][i]);
            }
        }
    }
    if (k < K) {
        for (int g = 0; g < G; g++) {
            const __m512 w0 = pkf_ld(wg + g * gs + k * 32, bf);
            for (int i = 0; i < rx; i++)
                acc[0][g][i] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[(size_t)i * ldx + k]), acc[0][g][i]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int i = 0; i < rx; i++)
            _mm512_storeu_ps(a->y + (size_t)i * a->ldy + (size_t)g * a->ygs, _mm512_add_ps(acc[0][g][i], acc[1][g][i]));
}

#define PKF_LOCK_INST(R)                                                                       \
    static void pkf_lock_##R(const ix__pk_tile *a) { pkf_lock_run(a, R, false); }               \
    static void pkbf_lock_##R(const ix__pk_tile *a) { pkf_lock_run(a, R, true); }
PKF_LOCK_INST(1) PKF_LOCK_INST(2) PKF_LOCK_INST(3) PKF_LOCK_INST(4) PKF_LOCK_INST(5) PKF_LOCK_INST(6)
static const ix__pk_fn k_pkf_lock[IX__PK_LOCK_RX] = {pkf_lock_1, pkf_lock_2, pkf_lock_3,
                                                     pkf_lock_4, pkf_lock_5, pkf_lock_6};
static const ix__pk_fn k_pkbf_lock[IX__PK_LOCK_RX] = {pkbf_lock_1, pkbf_lock_2, pkbf_lock_3,
                                                      pkbf_lock_4, pkbf_lock_5, pkbf_lock_6};

#define PKF_INST(R)                                                                            \
    static void pkf_##R(const ix__pk_tile *a) { pkf_run(a, R, false); }                         \
    static void pkbf_##R(const ix__pk_tile *a) { pkf_run(a, R, true); }
PKF_INST(1) PKF_INST(2) PKF_INST(3) PKF_INST(4) PKF_INST(5) PKF_INST(6)
PKF_INST(7) PKF_INST(8) PKF_INST(9) PKF_INST(10) PKF_INST(11) PKF_INST(12)
static const ix__pk_fn k_pkf[PKF_RX] = {pkf_1, pkf_2, pkf_3, pkf_4,  pkf_5,  pkf_6,
                                        pkf_7, pkf_8, pkf_9, pkf_10, pkf_11, pkf_12};
static const ix__pk_fn k_pkbf[PKF_RX] = {pkbf_1, pkbf_2, pkbf_3, pkbf_4,  pkbf_5,  pkbf_6,
                                         pkbf_7, pkbf_8, pkbf_9, pkbf_10, pkbf_11, pkbf_12};

/* ---- float matmul tiles (F32 / F16 / BF16 weights widened in registers) -------------- */
#define F_RX 4
#define F_RW 4

static inline __attribute__((always_inline)) __m512 ldw(ix_dtype t, const uint8_t *row, size_t k) {
    if (t == IX_DTYPE_F32) return _mm512_loadu_ps((const float *)(const void *)(row + 4 * k));
    __m256i h = _mm256_loadu_si256((const __m256i *)(row + 2 * k));
    return t == IX_DTYPE_F16 ? _mm512_cvtph_ps(h) : bf16x16(h);
}

static inline __attribute__((always_inline)) __m512 ldw_n(ix_dtype t, const uint8_t *row, size_t k,
                                                          __mmask16 m) {
    if (t == IX_DTYPE_F32) return _mm512_maskz_loadu_ps(m, row + 4 * k);
    __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * k);
    return t == IX_DTYPE_F16 ? _mm512_cvtph_ps(h) : bf16x16(h);
}

static inline __attribute__((always_inline)) void ftile_run(const ix__tile *a, ix_dtype t, int rx,
                                                            bool pf) {
    __m512 acc[F_RX][F_RW];
    for (int i = 0; i < rx; i++)
        for (int j = 0; j < F_RW; j++) acc[i][j] = _mm512_setzero_ps();
    const size_t ws = a->ws, xs = a->xs, K = a->k;
    size_t k = 0;
    for (; k + 16 <= K; k += 16) {
        if (pf) ix__prefetch_ahead(a, F_RW, k / 16, K / 16);
        __m512 w[F_RW];
        for (int j = 0; j < F_RW; j++) w[j] = ldw(t, a->w + (size_t)j * ws, k);
        for (int i = 0; i < rx; i++) {
            __m512 x = _mm512_loadu_ps((const float *)(const void *)(a->x + (size_t)i * xs) + k);
            for (int j = 0; j < F_RW; j++) acc[i][j] = _mm512_fmadd_ps(w[j], x, acc[i][j]);
        }
    }
    if (k < K) {
        __mmask16 m = tail_mask(K - k);
        __m512 w[F_RW];
        for (int j = 0; j < F_RW; j++) w[j] = ldw_n(t, a->w + (size_t)j * ws, k, m);
        for (int i = 0; i < rx; i++) {
            __m512 x = _mm512_maskz_loadu_ps(m, (const float *)(const void *)(a->x + (size_t)i * xs) + k);
            for (int j = 0; j < F_RW; j++) acc[i][j] = _mm512_fmadd_ps(w[j], x, acc[i][j]);
        }
    }
    for (int i = 0; i < rx; i++)
        for (int j = 0; j < a->ncols; j++) a->y[(size_t)i * a->ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

#define FTILE_INST(T, R)                                                                       \
    static void ftile_##T##_##R(const ix__tile *a) {                                            \
        if (a->prefetch) ftile_run(a, IX_DTYPE_##T, R, true);                                    \
        else ftile_run(a, IX_DTYPE_##T, R, false);                                               \
    }
#define FTILE_ALL(T) FTILE_INST(T, 1) FTILE_INST(T, 2) FTILE_INST(T, 3) FTILE_INST(T, 4)
FTILE_ALL(F32)
FTILE_ALL(F16)
FTILE_ALL(BF16)
#define FTILE_ROW(T) {ftile_##T##_1, ftile_##T##_2, ftile_##T##_3, ftile_##T##_4}
static const ix__tile_fn k_ftiles[3][F_RX] = {FTILE_ROW(F32), FTILE_ROW(F16), FTILE_ROW(BF16)};

/* ---- the traits' entries (quants.c): one per weight type and table ---------------------- */
static inline __attribute__((always_inline)) void mm_q(const ix_matmul *mm, size_t n0, size_t n1, bool q4,
                                                       bool vnni) {
    if (mm->w_packed)
        ix__pk_walk(mm, n0, n1, k_pk[vnni][q4], PK_RX, PK_MCHUNK, vnni ? k_lock(q4) : NULL);
    /* the wide tile's transpose pays off once a few X rows share it */
    else if (vnni && mm->M >= WIDE_MIN_M) ix__matmul_tiles(mm, n0, n1, k_wide_band[q4], 0, W_RW);
    else ix__matmul_tiles(mm, n0, n1, k_qtiles[vnni][q4], Q_RX, Q_RW);
}

void ix__mm_q8_0_avx512vnni(const ix_matmul *mm, size_t n0, size_t n1) { mm_q(mm, n0, n1, false, true); }
void ix__mm_q8_0_avx512bw(const ix_matmul *mm, size_t n0, size_t n1) { mm_q(mm, n0, n1, false, false); }
void ix__mm_q4_0_avx512vnni(const ix_matmul *mm, size_t n0, size_t n1) { mm_q(mm, n0, n1, true, true); }
void ix__mm_q4_0_avx512bw(const ix_matmul *mm, size_t n0, size_t n1) { mm_q(mm, n0, n1, true, false); }


/* kq_run's types; the super-block types (BAND) take the K-quant wide band
 * where it pays. */
#define KQ_MM(t, T, BAND)                                                                      \
    void ix__mm_##t##_avx512vnni(const ix_matmul *mm, size_t n0, size_t n1) {                    \
        if (BAND && kwide_ok(mm)) ix__matmul_tiles(mm, n0, n1, k_kwide_band[kw_index(KQ_##T)], 0, W_RW); \
        else ix__matmul_tiles(mm, n0, n1, k_kqtiles[1][KQ_##T], Q_RX, Q_RW);                      \
    }                                                                                          \
    void ix__mm_##t##_avx512bw(const ix_matmul *mm, size_t n0, size_t n1) {                      \
        ix__matmul_tiles(mm, n0, n1, k_kqtiles[0][KQ_##T], Q_RX, Q_RW);                          \
    }
/* The K-quants with a packed form (ix_kernels_pack_pays) through pk_run,
 * else as the others. Q6_K's prefill (pk_dec) decodes each group once per
 * chunk of X rows: its codes cost about as many instructions to decode as a
 * row's dots, and reading them back measured 1.10-1.18x faster (kernels_bench
 * -m prefill, M = 512, Zen 5). The other kinds decode in a few instructions
 * per vector, and the reloads, beside the dots' x broadcasts, made them
 * 0.85-0.97x as fast. */
#define PK_WALK(K) (pk_dec(PK_##K) ? ix__pk_walk_dec : ix__pk_walk)
#define KP_MM(t, T, K)                                                                         \
    void ix__mm_##t##_avx512vnni(const ix_matmul *mm, size_t n0, size_t n1) {                    \
        if (mm->w_packed) PK_WALK(K)(mm, n0, n1, k_pk[1][PK_##K], PK_RX, PK_MCHUNK, k_lock(PK_##K)); \
        else if (kwide_ok(mm)) ix__matmul_tiles(mm, n0, n1, k_kwide_band[kw_index(KQ_##T)], 0, W_RW); \
        else ix__matmul_tiles(mm, n0, n1, k_kqtiles[1][KQ_##T], Q_RX, Q_RW);                      \
    }                                                                                          \
    void ix__mm_##t##_avx512bw(const ix_matmul *mm, size_t n0, size_t n1) {                      \
        if (mm->w_packed) PK_WALK(K)(mm, n0, n1, k_pk[0][PK_##K], PK_RX, PK_MCHUNK, NULL);        \
        else ix__matmul_tiles(mm, n0, n1, k_kqtiles[0][KQ_##T], Q_RX, Q_RW);                      \
    }
KP_MM(q4_k, Q4_K, K4)
KP_MM(iq4_xs, IQ4_XS, XS)
KP_MM(q5_k, Q5_K, K5)
KP_MM(q6_k, Q6_K, K6)
KP_MM(q3_k, Q3_K, K3)
KP_MM(q2_k, Q2_K, K2)
/* the 32-element types: packed, or kq_run's tiles on rows */
#define KP_MM32(t, T, K)                                                                       \
    void ix__mm_##t##_avx512vnni(const ix_matmul *mm, size_t n0, size_t n1) {                    \
        if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pk[1][PK_##K], PK_RX, PK_MCHUNK, k_lock(PK_##K)); \
        else ix__matmul_tiles(mm, n0, n1, k_kqtiles[1][KQ_##T], Q_RX, Q_RW);                      \
    }                                                                                          \
    void ix__mm_##t##_avx512bw(const ix_matmul *mm, size_t n0, size_t n1) {                      \
        if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pk[0][PK_##K], PK_RX, PK_MCHUNK, NULL);        \
        else ix__matmul_tiles(mm, n0, n1, k_kqtiles[0][KQ_##T], Q_RX, Q_RW);                      \
    }
KP_MM32(q4_1, Q4_1, 41)
KP_MM32(q5_0, Q5_0, 50)
KP_MM32(q5_1, Q5_1, 51)
KP_MM32(iq4_nl, IQ4_NL, NL)

/* Float weights: the same on both tables. */
void ix__mm_f32_avx512(const ix_matmul *mm, size_t n0, size_t n1) {
    ix__matmul_tiles(mm, n0, n1, k_ftiles[0], F_RX, F_RW);
}

void ix__mm_f16_avx512(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pkf, PKF_RX, PKF_MCHUNK, k_pkf_lock);
    else ix__matmul_tiles(mm, n0, n1, k_ftiles[1], F_RX, F_RW);
}

void ix__mm_bf16_avx512(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, k_pkbf, PKF_RX, PKF_MCHUNK, k_pkbf_lock);
    else ix__matmul_tiles(mm, n0, n1, k_ftiles[2], F_RX, F_RW);
}

/* ---- RoPE ------------------------------------------------------------------------------- */
static void rope_head(float *x, const float *cs, size_t n_rot, ix_rope_mode mode) {
    if (mode == IX_ROPE_NEOX) {
        v_rope_neox(x, cs, n_rot);
        return;
    }
    /* adjacent pairs: 8 pairs per vector; out = x * c + swap(x) * (-s, +s) */
    size_t half = n_rot / 2, i = 0;
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i neg_even = _mm512_set1_epi64(0x80000000LL); /* sign bit of even lanes */
    for (; i + 8 <= half; i += 8) {
        __m512 c = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(cs + i)));
        __m512 s = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(cs + half + i)));
        __m512 v = _mm512_loadu_ps(x + 2 * i);
        __m512 sw = _mm512_permute_ps(v, 0xb1);
        /* (vxorps on zmm needs AVX512DQ; the integer xor is F) */
        __m512 sgn = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(s), neg_even));
        _mm512_storeu_ps(x + 2 * i, _mm512_fmadd_ps(sw, sgn, _mm512_mul_ps(v, c)));
    }
    for (; i < half; i++) {
        float c = cs[i], s = cs[half + i], x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

#define AVX512_TABLE(NAME, PATH)                                                               \
    {                                                                                          \
        .isa = IX_ISA_AVX512, .name = NAME, .fp16_to_fp32 = fp16_to_fp32,                      \
        .fp32_to_fp16 = fp32_to_fp16, .bf16_to_fp32 = bf16_to_fp32,                            \
        .quantize_act = quantize_act, .quantize_act_super = quantize_act_super, .path = PATH,  \
        .rmsnorm = v_rmsnorm,                                                                  \
        .softmax = v_softmax, .silu_mul = v_silu_mul, .add = v_add, .rope_head = rope_head,    \
        .attn_add = v_attn_add,                                                                \
    }

static const ix_kernel_table k_avx512_vnni = AVX512_TABLE("avx512-vnni", IX__PATH_AVX512_VNNI);
static const ix_kernel_table k_avx512_bw = AVX512_TABLE("avx512-bw", IX__PATH_AVX512_BW);

const ix_kernel_table *ix__kernels_avx512(bool vnni) {
    pf_choose();
    return vnni ? &k_avx512_vnni : &k_avx512_bw;
}
