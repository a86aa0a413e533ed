/*
 * Row ops written once over an abstract f32 vector, included by avx2.c,
 * avx512.c and neon.c after they define the vector vocabulary below (ggml's
 * GGML_F32_VEC idea). Only the ops whose code is identical across widths live
 * here (RMSNorm, softmax, SiLU*up, add, NEOX RoPE, the attention accumulator);
 * matmul tiles, conversions and the adjacent-pair RoPE shuffle are per ISA.
 * One exception: v_sum_lanes (attention's many-dots reduction) has a ymm, a
 * zmm and a NEON version here, chosen by VW.
 *
 * The includer defines:
 *   VF, VW                       vector type, lanes
 *   vf_zero() vf_set1(f)         constants
 *   vf_load(p) vf_store(p, v)    unaligned f32
 *   vf_load_n(p, n)              first n < VW lanes, the rest 0 (never reads past n)
 *   vf_store_n(p, v, n)          first n lanes only
 *   vf_load_h(p) vf_load_h_n(p, n)   fp16 -> f32, same rules
 *   vf_load_b(p) vf_load_b_n(p, n)   bf16 -> f32, same rules
 *   vq_quantize vq_dot vq_axpy       quantized K/V primitives (attn_q.h)
 *   vf_add vf_sub vf_mul vf_div vf_max   lane-wise
 *   vf_fma(a, b, c)              a * b + c, fused
 *   vf_hsum(v) vf_hmax(v)        horizontal, fixed order
 *   vf_exp(v)                    e^x, ~2 ulp; 0 for -inf and x < -87; clamps x > 88.7
 */
#ifndef VW
#error "include vecops.h from an ISA file that defines the vector vocabulary"
#endif

static void v_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps) {
    VF acc0 = vf_zero(), acc1 = vf_zero();
    size_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        VF a = vf_load(x + i), b = vf_load(x + i + VW);
        acc0 = vf_fma(a, a, acc0);
        acc1 = vf_fma(b, b, acc1);
    }
    for (; i < n; i += VW) {
        VF a = n - i >= VW ? vf_load(x + i) : vf_load_n(x + i, n - i);
        acc0 = vf_fma(a, a, acc0);
    }
    float r = 1.0f / sqrtf(vf_hsum(vf_add(acc0, acc1)) / (float)n + eps);
    VF vr = vf_set1(r);
    for (i = 0; i + VW <= n; i += VW) {
        VF v = vf_mul(vf_load(x + i), vr);
        vf_store(y + i, w ? vf_mul(v, vf_load(w + i)) : v);
    }
    if (i < n) {
        VF v = vf_mul(vf_load_n(x + i, n - i), vr);
        vf_store_n(y + i, w ? vf_mul(v, vf_load_n(w + i, n - i)) : v, n - i);
    }
}

static void v_softmax(float *x, size_t n) {
    size_t i = 0;
    float max = -INFINITY;
    if (n >= VW) {
        VF m = vf_load(x);
        for (i = VW; i + VW <= n; i += VW) m = vf_max(m, vf_load(x + i));
        max = vf_hmax(m);
    }
    for (; i < n; i++) max = fmaxf(max, x[i]);
    if (!(max > -INFINITY)) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    VF vmax = vf_set1(max), sum = vf_zero();
    for (i = 0; i + VW <= n; i += VW) {
        VF e = vf_exp(vf_sub(vf_load(x + i), vmax));
        vf_store(x + i, e);
        sum = vf_add(sum, e);
    }
    if (i < n) {
        /* store only the real lanes, then read them back zero-padded */
        vf_store_n(x + i, vf_exp(vf_sub(vf_load_n(x + i, n - i), vmax)), n - i);
        sum = vf_add(sum, vf_load_n(x + i, n - i));
    }
    VF inv = vf_set1(1.0f / vf_hsum(sum));
    for (i = 0; i + VW <= n; i += VW) vf_store(x + i, vf_mul(vf_load(x + i), inv));
    if (i < n) vf_store_n(x + i, vf_mul(vf_load_n(x + i, n - i), inv), n - i);
}

static inline VF v_silu(VF g) {
    /* g / (1 + e^-g); for g << 0 the clamped exp keeps the quotient finite */
    VF one = vf_set1(1.0f);
    return vf_div(g, vf_add(one, vf_exp(vf_sub(vf_zero(), g))));
}

static void v_silu_mul(float *y, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) vf_store(y + i, vf_mul(v_silu(vf_load(gate + i)), vf_load(up + i)));
    if (i < n)
        vf_store_n(y + i, vf_mul(v_silu(vf_load_n(gate + i, n - i)), vf_load_n(up + i, n - i)), n - i);
}

static void v_add(float *y, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) vf_store(y + i, vf_add(vf_load(a + i), vf_load(b + i)));
    if (i < n) vf_store_n(y + i, vf_add(vf_load_n(a + i, n - i), vf_load_n(b + i, n - i)), n - i);
}

/* NEOX RoPE: pairs (i, i + half) are whole vectors. */
static void v_rope_neox(float *x, const float *cs, size_t n_rot) {
    size_t half = n_rot / 2, i = 0;
    for (; i + VW <= half; i += VW) {
        VF a = vf_load(x + i), b = vf_load(x + half + i);
        VF c = vf_load(cs + i), s = vf_load(cs + half + i);
        vf_store(x + i, vf_sub(vf_mul(a, c), vf_mul(b, s)));
        vf_store(x + half + i, vf_add(vf_mul(a, s), vf_mul(b, c)));
    }
    for (; i < half; i++) {
        float c = cs[i], s = cs[half + i], a = x[i], b = x[half + i];
        x[i] = a * c - b * s;
        x[half + i] = a * s + b * c;
    }
}

/* ---- attention ------------------------------------------------------------
 * v_attn_add runs nq queries (the query heads of one KV head's group) over
 * the same K/V rows, in chunks of up to IX__ATTN_CHUNK tokens. Per chunk:
 *   scores   VW keys at a time per query, one accumulator per key, reduced
 *            all at once by v_sum_lanes (no horizontal sum per key); f16 keys
 *            that several queries share are widened once per tile into kbuf;
 *   softmax  per query: the online rebase, p = exp(s - max), the sum; all
 *            queries' scores come first so their exp chains overlap;
 *   values   o = o * alpha + sum_j p_j v_j for 8, 4, 2 or 1 queries at once,
 *            one VW-slice of o (or several, for few queries) in registers
 *            across the chunk, so each V slice is loaded and widened once.
 * A query's arithmetic is the same, operation for operation, whatever the
 * other queries are (widening is exact), so its result is the same bits
 * alone (nq = 1) as in any group. Head dims 64 and 128 get their own copies
 * (constant row strides and trip counts); others take the general one. */
#define V_ATTN_QB 8 /* queries whose output slices share each V load */
#define V_ATTN_KBUF_HD 256 /* widest head whose keys go through kbuf (VW x 1 KiB) */
_Static_assert(IX__ATTN_CHUNK % VW == 0, "score tiles of VW keys fill a chunk exactly");

static inline VF v_kv_load(const void *row, ix_kv_dtype t, size_t i) {
    if (t == IX_KV_F16) return vf_load_h((const uint16_t *)row + i);
    if (t == IX_KV_BF16) return vf_load_b((const uint16_t *)row + i);
    return vf_load((const float *)row + i);
}

static inline VF v_kv_load_n(const void *row, ix_kv_dtype t, size_t i, size_t n) {
    if (t == IX_KV_F16) return vf_load_h_n((const uint16_t *)row + i, n);
    if (t == IX_KV_BF16) return vf_load_b_n((const uint16_t *)row + i, n);
    return vf_load_n((const float *)row + i, n);
}

/* Lane j of the result = the sum of the lanes of a[j], by one tree for every
 * j (x86: lane i + lane i + VW/2, then the same on the halves, ...), so a score
 * does not depend on its key's slot in a tile. Inputs are taken in the order
 * (V_SL) that leaves each sum in its own lane. The one piece of this file
 * written per width: ymm, zmm and NEON shuffle differently. */
#if VW == 16
#define V_SL(j) (4 * ((j) % 4) + (j) / 4)
static inline __attribute__((always_inline)) VF v_sum_lanes(const VF *a) {
    VF c[8], d[4], e[2];
    IX__UNROLL(8)
    for (int i = 0; i < 8; i++) { /* 256-bit halves: lanes 0-7 input 2i, 8-15 input 2i+1 */
        VF x = a[V_SL(2 * i)], y = a[V_SL(2 * i + 1)];
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xee));
    }
    IX__UNROLL(4)
    for (int i = 0; i < 4; i++) /* 128-bit quarters: quarter m holds input 4i + m */
        d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
    IX__UNROLL(2)
    for (int i = 0; i < 2; i++) { /* pairs of lanes */
        __m512d x = _mm512_castps_pd(d[2 * i]), y = _mm512_castps_pd(d[2 * i + 1]);
        e[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    }
    /* lane 4m + r now sums input m + 4r, which V_SL made a[4m + r] */
    return _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xdd));
}
#elif VW == 8
#define V_SL(j) (4 * ((j) % 2) + (j) / 2)
static inline __attribute__((always_inline)) VF v_sum_lanes(const VF *a) {
    VF c[4], e[2];
    IX__UNROLL(4)
    for (int i = 0; i < 4; i++) { /* 128-bit halves: lanes 0-3 input 2i, 4-7 input 2i+1 */
        VF x = a[V_SL(2 * i)], y = a[V_SL(2 * i + 1)];
        c[i] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20),
                             _mm256_permute2f128_ps(x, y, 0x31));
    }
    IX__UNROLL(2)
    for (int i = 0; i < 2; i++) { /* pairs of lanes */
        __m256d x = _mm256_castps_pd(c[2 * i]), y = _mm256_castps_pd(c[2 * i + 1]);
        e[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    /* lane 4m + r now sums input m + 2r, which V_SL made a[4m + r] */
    return _mm256_add_ps(_mm256_shuffle_ps(e[0], e[1], 0x88), _mm256_shuffle_ps(e[0], e[1], 0xdd));
}
#elif VW == 4 && defined(__aarch64__)
/* NEON's pairwise add sums adjacent lanes of two inputs into one vector, so
 * two levels of it leave (a[j]0 + a[j]1) + (a[j]2 + a[j]3) in lane j, the
 * same tree for every j, with the inputs in their own order. */
static inline __attribute__((always_inline)) VF v_sum_lanes(const VF *a) {
    return vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3]));
}
#else
#error "v_sum_lanes: no shuffles for this vector width"
#endif

/* Unscaled scores q.k_j of the VW keys at k + j * row_bytes. Keys j >= n
 * re-read key n - 1, so a short tile runs the same code and its extra lanes
 * repeat a real score (harmless to the max; never stored as probabilities). */
static inline __attribute__((always_inline)) VF v_attn_tile(const float *q, const uint8_t *k,
                                                           size_t row_bytes, size_t n, size_t hd,
                                                           ix_kv_dtype t) {
    const uint8_t *r[VW];
    VF a[VW];
    IX__UNROLL(16)
    for (int j = 0; j < VW; j++) {
        r[j] = k + (n == VW || (size_t)j < n ? (size_t)j : n - 1) * row_bytes;
        a[j] = vf_zero();
    }
    size_t i = 0;
    for (; i + VW <= hd; i += VW) {
        VF qv = vf_load(q + i);
        IX__UNROLL(16)
        for (int j = 0; j < VW; j++) a[j] = vf_fma(qv, v_kv_load(r[j], t, i), a[j]);
    }
    if (i < hd) {
        VF qv = vf_load_n(q + i, hd - i);
        IX__UNROLL(16)
        for (int j = 0; j < VW; j++) a[j] = vf_fma(qv, v_kv_load_n(r[j], t, i, hd - i), a[j]);
    }
    return v_sum_lanes(a);
}

/* The same for a tile of n <= VW keys: a full tile's row addresses need no clamping. */
static inline __attribute__((always_inline)) VF v_attn_tile_n(const float *q, const uint8_t *k,
                                                             size_t row_bytes, size_t n, size_t hd,
                                                             ix_kv_dtype t) {
    return n == VW ? v_attn_tile(q, k, row_bytes, VW, hd, t)
                   : v_attn_tile(q, k, row_bytes, n, hd, t);
}

/* Scaled scores of nb queries against one tile of n keys, into columns
 * [j0, j0 + VW) of p (lanes past n repeat a score); m[i] keeps the lane max. */
static inline __attribute__((always_inline)) void
v_attn_scores(const ix_attn_acc *accs, const float *q, size_t nb, const uint8_t *k,
              size_t row_bytes, size_t n, size_t hd, ix_kv_dtype t, float (*p)[IX__ATTN_CHUNK],
              size_t j0, VF *m) {
    for (size_t i = 0; i < nb; i++) {
        VF sv = vf_mul(v_attn_tile_n(q + i * hd, k, row_bytes, n, hd, t), vf_set1(accs[i].scale));
        vf_store(p[i] + j0, sv);
        m[i] = vf_max(sv, m[i]); /* NaN scores are ignored, as fmaxf does */
    }
}

/* o[q][i + s VW, + w) = o[q][...] * alpha[q] + sum_j p[q][j] v_j[...] for nq
 * queries and ns slices (constants after inlining; w < VW only when ns = 1).
 * Each V slice is loaded once for all queries; several slices at once give a
 * lone query independent FMA chains. Every element's arithmetic is the same
 * whatever nq and ns are. */
static inline __attribute__((always_inline)) void
v_attn_pv_slices(float *const *o, const float *alpha, const float (*p)[IX__ATTN_CHUNK], int nq,
                 int ns, const uint8_t *v, size_t row_bytes, size_t cnt, size_t i, size_t w,
                 ix_kv_dtype t) {
    VF acc[V_ATTN_QB]; /* (nq, ns) */
    IX__UNROLL(8)
    for (int q = 0; q < nq; q++) {
        VF a = vf_set1(alpha[q]);
        IX__UNROLL(8)
        for (int s = 0; s < ns; s++) {
            const float *os = o[q] + i + (size_t)s * VW;
            acc[q * ns + s] = vf_mul(w == VW ? vf_load(os) : vf_load_n(os, w), a);
        }
    }
    for (size_t j = 0; j < cnt; j++) {
        const uint8_t *vr = v + j * row_bytes;
        IX__UNROLL(8)
        for (int s = 0; s < ns; s++) {
            size_t is = i + (size_t)s * VW;
            VF vv = w == VW ? v_kv_load(vr, t, is) : v_kv_load_n(vr, t, is, w);
            IX__UNROLL(8)
            for (int q = 0; q < nq; q++)
                acc[q * ns + s] = vf_fma(vf_set1(p[q][j]), vv, acc[q * ns + s]);
        }
    }
    IX__UNROLL(8)
    for (int q = 0; q < nq; q++)
        IX__UNROLL(8)
        for (int s = 0; s < ns; s++) {
            float *os = o[q] + i + (size_t)s * VW;
            if (w == VW) vf_store(os, acc[q * ns + s]);
            else vf_store_n(os, acc[q * ns + s], w);
        }
}

/* nq = 8, 4, 2 or 1 queries: 1, 2, 4, 4 slices at a time while they fit. */
static inline __attribute__((always_inline)) void v_attn_pv(float *const *o, const float *alpha,
                                                           const float (*p)[IX__ATTN_CHUNK], int nq,
                                                           const uint8_t *v, size_t row_bytes,
                                                           size_t cnt, size_t hd, ix_kv_dtype t) {
    int ns = nq >= 8 ? 1 : nq == 4 ? 2 : 4;
    size_t i = 0;
    if (ns > 1)
        for (; i + (size_t)ns * VW <= hd; i += (size_t)ns * VW)
            v_attn_pv_slices(o, alpha, p, nq, ns, v, row_bytes, cnt, i, VW, t);
    for (; i + VW <= hd; i += VW) v_attn_pv_slices(o, alpha, p, nq, 1, v, row_bytes, cnt, i, VW, t);
    if (i < hd) v_attn_pv_slices(o, alpha, p, nq, 1, v, row_bytes, cnt, i, hd - i, t);
}

/* HD: the head dim as a constant for the common dims' copies, 0 for the general one. */
static inline __attribute__((always_inline)) void
v_attn_run(ix_attn_acc *accs, const float *q, size_t nq, const uint8_t *k, size_t krb,
           const uint8_t *v, size_t vrb, size_t n_tokens, ix_kv_dtype t, size_t HD) {
    size_t hd = HD ? HD : accs[0].head_dim;
    float p[V_ATTN_QB][IX__ATTN_CHUNK]; /* scores, then exp(s - max), of the live queries */
    float alpha[V_ATTN_QB];
    float *o[V_ATTN_QB];
    float kbuf[VW * V_ATTN_KBUF_HD];
    for (size_t q0 = 0; q0 < nq; q0 += V_ATTN_QB) {
        size_t nb = nq - q0 < V_ATTN_QB ? nq - q0 : V_ATTN_QB;
        /* f16 keys shared by several queries are widened once per tile into
         * kbuf (exactly, so the scores are the same bits either way) */
        bool widen = (t == IX_KV_F16 || t == IX_KV_BF16) && nb > 1 && hd <= V_ATTN_KBUF_HD;
        for (size_t t0 = 0; t0 < n_tokens; t0 += IX__ATTN_CHUNK) {
            size_t cnt = n_tokens - t0 < IX__ATTN_CHUNK ? n_tokens - t0 : IX__ATTN_CHUNK;
            /* the scores of all queries first, then their exponentials: the
             * exp and sum chains of different queries are independent, and
             * close together the core overlaps them */
            VF m[V_ATTN_QB];
            for (size_t i = 0; i < nb; i++) m[i] = vf_set1(-INFINITY);
            for (size_t j0 = 0; j0 < cnt; j0 += VW) {
                size_t n = cnt - j0 < VW ? cnt - j0 : VW;
                const uint8_t *kt = k + (t0 + j0) * krb;
                if (!widen) {
                    v_attn_scores(accs + q0, q + q0 * hd, nb, kt, krb, n, hd, t, p, j0, m);
                    continue;
                }
                for (size_t j = 0; j < n; j++) {
                    const uint16_t *src = (const uint16_t *)(kt + j * krb);
                    size_t i = 0;
                    for (; i + VW <= hd; i += VW) vf_store(kbuf + j * hd + i, v_kv_load(src, t, i));
                    if (i < hd) vf_store_n(kbuf + j * hd + i, v_kv_load_n(src, t, i, hd - i), hd - i);
                }
                v_attn_scores(accs + q0, q + q0 * hd, nb, (const uint8_t *)kbuf, hd * 4, n, hd,
                              IX_KV_F32, p, j0, m);
            }
            float cmax[V_ATTN_QB];
            for (size_t i = 0; i < nb; i++) cmax[i] = vf_hmax(m[i]);
            if (accs[q0].softcap > 0.0f) /* Gemma 2: rare enough to stay scalar */
                for (size_t i = 0; i < nb; i++) {
                    float cap = accs[q0 + i].softcap;
                    for (size_t j = 0; j < cnt; j++) p[i][j] = ix__softcap(p[i][j], cap);
                    cmax[i] = ix__softcap(cmax[i], cap);
                }
            int live = 0; /* queries of this chunk whose scores are not all -inf */
            for (size_t i = 0; i < nb; i++) {
                ix_attn_acc *acc = accs + q0 + i;
                bool skip;
                float a = ix__attn_rebase(acc, cmax[i], &skip);
                if (skip) continue;
                /* row live <= i: rows below i are spent, so the live
                 * queries' probabilities end up in rows 0..live-1 */
                const float *s = p[i];
                float *e = p[live];
                VF vmax = vf_set1(acc->max), psum = vf_zero();
                size_t j = 0;
                for (; j + VW <= cnt; j += VW) {
                    VF x = vf_exp(vf_sub(vf_load(s + j), vmax));
                    vf_store(e + j, x);
                    psum = vf_add(psum, x);
                }
                if (j < cnt) {
                    VF x = vf_exp(vf_sub(vf_load_n(s + j, cnt - j), vmax));
                    vf_store_n(e + j, x, cnt - j);
                    psum = vf_add(psum, vf_load_n(e + j, cnt - j));
                }
                acc->sum += vf_hsum(psum);
                alpha[live] = a;
                o[live++] = acc->o;
            }
            /* o += p v for the live queries, 8, 4, 2 or 1 at a time: a
             * constant count per copy keeps the accumulators in registers */
            const uint8_t *vc = v + t0 * vrb;
            for (int r = 0; r < live;) {
                int n = live - r >= 8 ? 8 : live - r >= 4 ? 4 : live - r >= 2 ? 2 : 1;
                const float(*pr)[IX__ATTN_CHUNK] = (const float(*)[IX__ATTN_CHUNK])p + r;
                if (n == 8) v_attn_pv(o + r, alpha + r, pr, 8, vc, vrb, cnt, hd, t);
                else if (n == 4) v_attn_pv(o + r, alpha + r, pr, 4, vc, vrb, cnt, hd, t);
                else if (n == 2) v_attn_pv(o + r, alpha + r, pr, 2, vc, vrb, cnt, hd, t);
                else v_attn_pv(o + r, alpha + r, pr, 1, vc, vrb, cnt, hd, t);
                r += n;
            }
        }
    }
}

/* The kernel-table entry: one copy per float K/V type and common head dim;
 * the block types go to attn_q.h's canonical loop over the includer's
 * vq_dot / vq_axpy. */
#include "kernels/attn_q.h"

#define V_ATTN_DIMS(T)                                                                             \
    do {                                                                                           \
        if (hd == 64) v_attn_run(accs, q, nq, kb, krb, vb, vrb, n_tokens, T, 64);                  \
        else if (hd == 128) v_attn_run(accs, q, nq, kb, krb, vb, vrb, n_tokens, T, 128);           \
        else v_attn_run(accs, q, nq, kb, krb, vb, vrb, n_tokens, T, 0);                            \
    } while (0)

static void v_attn_add(ix_attn_acc *accs, const float *q, size_t nq, const void *k, size_t k_stride,
                       const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype t) {
    if (ix__kv_is_block(t)) {
        vq_attn_add(accs, q, nq, k, k_stride, v, v_stride, n_tokens, t);
        return;
    }
    size_t hd = accs[0].head_dim, esz = t == IX_KV_F32 ? 4 : 2;
    const uint8_t *kb = k, *vb = v;
    size_t krb = k_stride * esz, vrb = v_stride * esz;
    if (t == IX_KV_F16) V_ATTN_DIMS(IX_KV_F16);
    else if (t == IX_KV_BF16) V_ATTN_DIMS(IX_KV_BF16);
    else V_ATTN_DIMS(IX_KV_F32);
}
#undef V_ATTN_DIMS
