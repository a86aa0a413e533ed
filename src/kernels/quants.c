/*
 * Weight types: the traits table (one row per type the kernels read, see
 * kernels_int.h) and the codec of every type: for the quantized ones an
 * unpack that decodes 32 elements of a block into the canonical dot's form
 * (integer codes, integer sub-block scales and mins, two float scales),
 * which both dequantization and the generic matmul read, and a reference
 * quantizer (round to nearest against the scales as stored, the scales
 * chosen by the small searches llama.cpp's reference quantizers use).
 *
 * Block layouts are GGUF's (ggml-common.h), little-endian and byte-packed;
 * docs/kernels.md draws each of them. Offline code: clarity over speed.
 */
#include "kernels/kernels_int.h"

#include <float.h>
#include <math.h>

/* Elements and bytes per block, from gguf.h's type table (written once). */
enum {
#define SIZES(name, code, str, blck, size) BLCK_##name = blck, BYTES_##name = size,
    IX_DTYPE_TABLE(SIZES)
#undef SIZES
};

static float ld_h(const uint8_t *p) { return ix__fp16_to_fp32(ix__load_u16(p)); }

/* Stores f as fp16 and returns the value stored. */
static float st_h(uint8_t *p, float f) {
    uint16_t h = ix__fp32_to_fp16(f);
    memcpy(p, &h, 2);
    return ix__fp16_to_fp32(h);
}

/* Round to nearest (ties to even) of v clamped to [lo, hi]: NaN gives lo. */
static int round_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v > (float)hi) return hi;
    return (int)nearbyintf(v);
}

static void q32_plain(ix__q32 *u, float d) {
    u->sc[0] = u->sc[1] = 1;
    u->mn[0] = u->mn[1] = 0;
    u->d = d;
    u->dm = 0.0f;
}

/* ---- float types ------------------------------------------------------------ */
static void dequant_f32(const ix__wtype *wt, const uint8_t *src, float *dst, size_t n) {
    (void)wt;
    memcpy(dst, src, n * 4);
}

static void dequant_f16(const ix__wtype *wt, const uint8_t *src, float *dst, size_t n) {
    (void)wt;
    if ((uintptr_t)src % 2 == 0) { /* the active path's conversion: the same bits, faster */
        ix_kernels_fp16_to_fp32((const uint16_t *)(const void *)src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = ix__fp16_to_fp32(ix__load_u16(src + 2 * i));
}

static void dequant_bf16(const ix__wtype *wt, const uint8_t *src, float *dst, size_t n) {
    (void)wt;
    for (size_t i = 0; i < n; i++) dst[i] = ix__bf16_to_fp32(ix__load_u16(src + 2 * i));
}

static void quantize_f32(const float *src, uint8_t *dst, size_t n, const float *qw) {
    (void)qw;
    memcpy(dst, src, n * 4);
}

static void quantize_f16(const float *src, uint8_t *dst, size_t n, const float *qw) {
    (void)qw;
    if ((uintptr_t)dst % 2 == 0) {
        ix_kernels_fp32_to_fp16(src, (uint16_t *)(void *)dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++) st_h(dst + 2 * i, src[i]);
}

static void quantize_bf16(const float *src, uint8_t *dst, size_t n, const float *qw) {
    (void)qw;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = ix__fp32_to_bf16(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

/* Every quantized type dequantizes through its unpack: w = (d sc) q + dm mn,
 * the products rounded as llama.cpp's dequantizers round them. */
static void dequant_q(const ix__wtype *wt, const uint8_t *src, float *dst, size_t n) {
    const size_t per = wt->blck / IX__QK;
    for (size_t b = 0; b < n / IX__QK; b++) {
        ix__q32 u;
        wt->unpack(src + b / per * wt->bytes, b % per, &u);
        for (int h = 0; h < 2; h++) {
            float s = u.d * (float)u.sc[h], m = u.dm * (float)u.mn[h];
            for (int i = 16 * h; i < 16 * h + 16; i++)
                dst[b * IX__QK + (size_t)i] = wt->has_min ? s * (float)u.q[i] + m : s * (float)u.q[i];
        }
    }
}

/* ---- importance weights ------------------------------------------------------- */
/* The error of a matmul output y = w . x from rounding w_j by e_j is
 * sum_j e_j x_j: over the calibration inputs its mean square is, leaving out
 * the cross terms, sum_j E[x_j^2] e_j^2. So the importance of element j is
 * its column's mean squared activation qw[j] (an imatrix entry), and the
 * searches minimize sum qw e^2. (llama.cpp multiplies in sqrt(s2 + x^2) as
 * well; on the bundled model that measured worse: docs/quantization.md.) */
static void imp_weights(const float *x, const float *qw, int n, float *w) {
    (void)x;
    for (int i = 0; i < n; i++) w[i] = qw[i];
}

/* ---- scale searches (the reference quantizers' shared parts) ------------------ */
/* x (n <= 32) ~ s * l with integer l in [-nmax, nmax - 1]. Tries the scales
 * that put the element of largest magnitude at -nmax +- 0.9 levels, refits s
 * by least squares weighted by w for each, and keeps the best. Returns s;
 * L gets l. */
static float fit_sym(const float *x, const float *w, int n, int nmax, int8_t *L) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (!(amax > 1e-30f)) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float best = -1.0f, best_is = 0.0f, s = 0.0f;
    for (int k = -9; k <= 9; k++) {
        float is = -((float)nmax + 0.1f * (float)k) / max, sxl = 0.0f, sll = 0.0f;
        for (int i = 0; i < n; i++) {
            int l = round_clamp(is * x[i], -nmax, nmax - 1);
            sxl += w[i] * x[i] * (float)l;
            sll += w[i] * (float)(l * l);
        }
        /* the weighted error is sum w x^2 - sxl^2 / sll: maximize the latter */
        if (sll > 0.0f && sxl * sxl / sll > best) best = sxl * sxl / sll, best_is = is, s = sxl / sll;
    }
    if (best < 0.0f) best_is = -(float)nmax / max, s = 1.0f / best_is;
    for (int i = 0; i < n; i++) L[i] = (int8_t)round_clamp(best_is * x[i], -nmax, nmax - 1);
    return s;
}

/* fit_sym's scales s[16] of the 16 sub-blocks of 16 of a super-block x
 * (256), weighted by x^2 as llama.cpp's Q3_K / Q6_K reference quantizers
 * weigh them (imp_weights with qw); returns the one of largest magnitude,
 * with its sign. */
static float sym_scales16(const float *x, int nmax, const float *qw, float *s) {
    float w[16], smax = 0.0f;
    int8_t L[16];
    for (int j = 0; j < 16; j++) {
        if (qw) imp_weights(x + 16 * j, qw + 16 * j, 16, w);
        else
            for (int i = 0; i < 16; i++) w[i] = x[16 * j + i] * x[16 * j + i];
        s[j] = fit_sym(x + 16 * j, w, 16, nmax, L);
        if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
    }
    return smax;
}

/* x (n <= 32) ~ s * l - m with integer l in [0, nmax] and m >= 0. Tries the
 * scales (nmax + rmin + rdelta k) / (max - min), k = 0..nstep, over the
 * range [min(x, 0), max(x)], refits s and m by weighted least squares for
 * each, and keeps the smallest weighted squared error. Returns s; *m_out
 * gets m. */
static float fit_affine(const float *x, const float *w, int n, int nmax, float rmin, float rdelta, int nstep,
                        float *m_out) {
    float lo = x[0], hi = x[0], sw = 0.0f, sx = 0.0f;
    for (int i = 0; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
        sw += w[i];
        sx += w[i] * x[i];
    }
    lo = fminf(lo, 0.0f);
    if (!(hi > lo)) {
        *m_out = -lo;
        return 0.0f;
    }
    float best_s = (hi - lo) / (float)nmax, best_min = lo, best_err = 0.0f;
    for (int i = 0; i < n; i++) {
        int l = round_clamp((x[i] - lo) / best_s, 0, nmax);
        float e = best_s * (float)l + lo - x[i];
        best_err += w[i] * e * e;
    }
    for (int k = 0; k <= nstep; k++) {
        float is = ((float)nmax + rmin + rdelta * (float)k) / (hi - lo);
        float sl = 0.0f, sll = 0.0f, sxl = 0.0f;
        uint8_t L[32];
        for (int i = 0; i < n; i++) {
            L[i] = (uint8_t)round_clamp(is * (x[i] - lo), 0, nmax);
            sl += w[i] * L[i];
            sll += w[i] * (float)(L[i] * L[i]);
            sxl += w[i] * (float)L[i] * x[i];
        }
        float det = sw * sll - sl * sl;
        if (!(det > 0.0f)) continue;
        float s = (sw * sxl - sx * sl) / det, mn = (sll * sx - sl * sxl) / det;
        if (mn > 0.0f) mn = 0.0f, s = sxl / sll; /* the offset may only lower values */
        float err = 0.0f;
        for (int i = 0; i < n; i++) {
            float e = s * (float)L[i] + mn - x[i];
            err += w[i] * e * e;
        }
        if (err < best_err) best_err = err, best_s = s, best_min = mn;
    }
    *m_out = -best_min;
    return best_s;
}

/* ---- Q8_0: fp16 d | int8 q[32]                      x = d q -------------------- */
static void unpack_q8_0(const uint8_t *b, size_t j, ix__q32 *u) {
    (void)j;
    memcpy(u->q, b + 2, 32);
    q32_plain(u, ld_h(b));
}

static void quantize_q8_0(const float *src, uint8_t *p, size_t n, const float *qw) {
    (void)qw; /* 8 bits: round to nearest is as good as a search */
    for (size_t b = 0; b < n / IX__QK; b++, p += IX__Q8_0_BYTES) {
        const float *x = src + b * IX__QK;
        float amax = 0.0f;
        for (int j = 0; j < IX__QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        /* round against the scale as stored, so the error is at most d/2 */
        float d = st_h(p, amax / 127.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < IX__QK; j++) p[2 + j] = (uint8_t)(int8_t)round_clamp(x[j] * id, -127, 127);
    }
}

/* ---- Q4_0: fp16 d | u8 qs[16]              x[j] = d (lo(qs[j]) - 8), x[j+16] = d (hi - 8) */
static void unpack_q4_0(const uint8_t *b, size_t j, ix__q32 *u) {
    (void)j;
    for (int i = 0; i < 16; i++) {
        u->q[i] = (int8_t)((b[2 + i] & 15) - 8);
        u->q[i + 16] = (int8_t)((b[2 + i] >> 4) - 8);
    }
    q32_plain(u, ld_h(b));
}

/* Codes 0..nmax of x[0..32) for x = d (code - off), nibbles as Q4_0 packs
 * them (element j low, j + 16 high) into qs[16] and the fifth bits into
 * bit j of *qh (5-bit types). Rounds half up against the stored d. */
static void pack_sym_codes(const float *x, float d, int off, int nmax, uint8_t *qs, uint32_t *qh) {
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        int lo = (int)fminf(fmaxf(x[j] * id + (float)off + 0.5f, 0.0f), (float)nmax);
        int hi = (int)fminf(fmaxf(x[j + 16] * id + (float)off + 0.5f, 0.0f), (float)nmax);
        qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
        h |= (uint32_t)(lo >> 4) << j | (uint32_t)(hi >> 4) << (j + 16);
    }
    if (qh) *qh = h;
}

/* The signed value of largest magnitude of 32 (maps to the lowest code, so
 * the asymmetric extra level goes to the larger side). */
static float signed_max(const float *x) {
    float vmax = 0.0f;
    for (int j = 0; j < IX__QK; j++)
        if (fabsf(x[j]) > fabsf(vmax)) vmax = x[j];
    return vmax;
}

/* The weighted squared error of a symmetric 32-block at the stored (fp16)
 * scale d, rounded as pack_sym_codes rounds (codes 0..2 nmax - 1, offset nmax). */
static float sym_err(const float *x, const float *w, float d, int nmax) {
    float dh = ix__fp16_to_fp32(ix__fp32_to_fp16(d)), id = dh != 0.0f ? 1.0f / dh : 0.0f, err = 0.0f;
    for (int j = 0; j < IX__QK; j++) {
        float c = fminf(fmaxf(floorf(x[j] * id + (float)nmax + 0.5f), 0.0f), (float)(2 * nmax - 1));
        float e = x[j] - dh * (c - (float)nmax);
        err += w[j] * e * e;
    }
    return err;
}

/* The scale of a symmetric 32-block with codes in [-nmax, nmax - 1]: the
 * largest magnitude at -nmax; with importance weights, the best by weighted
 * error (as stored and rounded) of that scale, the scales that put the
 * largest magnitude at -nmax +- 2 levels (steps of 0.1) and their weighted least-squares
 * refits, so it is never worse than the plain choice on that measure. */
static float sym_scale32(const float *x, const float *qw, int nmax) {
    const float vmax = signed_max(x), plain = vmax / -(float)nmax;
    if (!qw || !(fabsf(vmax) > 1e-30f)) return plain;
    float w[IX__QK];
    imp_weights(x, qw, IX__QK, w);
    float best = plain, best_err = sym_err(x, w, plain, nmax);
    for (int k = -20; k <= 20; k++) {
        float d = vmax / -((float)nmax + 0.1f * (float)k), sxl = 0.0f, sll = 0.0f;
        for (int j = 0; j < IX__QK; j++) {
            int l = round_clamp(x[j] / d, -nmax, nmax - 1);
            sxl += w[j] * x[j] * (float)l;
            sll += w[j] * (float)(l * l);
        }
        const float cand[2] = {d, sll > 0.0f ? sxl / sll : d};
        for (int c = 0; c < 2; c++) {
            float e = sym_err(x, w, cand[c], nmax);
            if (e < best_err) best_err = e, best = cand[c];
        }
    }
    return best;
}

static void quantize_q4_0(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / IX__QK; b++, p += IX__Q4_0_BYTES) {
        const float *x = src + b * IX__QK;
        pack_sym_codes(x, st_h(p, sym_scale32(x, qw ? qw + b * IX__QK : NULL, 8)), 8, 15, p + 2, NULL);
    }
}

/* ---- Q5_0: fp16 d | u32 qh | u8 qs[16]     x[j] = d ((lo | qh bit j << 4) - 16), x[j+16] likewise */
static void unpack_q5_0(const uint8_t *b, size_t j, ix__q32 *u) {
    (void)j;
    uint32_t qh = ix__load_u32(b + 2);
    for (int i = 0; i < 16; i++) {
        u->q[i] = (int8_t)(((b[6 + i] & 15) | ((qh >> i) & 1) << 4) - 16);
        u->q[i + 16] = (int8_t)(((b[6 + i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - 16);
    }
    q32_plain(u, ld_h(b));
}

static void quantize_q5_0(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / IX__QK; b++, p += BYTES_Q5_0) {
        const float *x = src + b * IX__QK;
        uint32_t qh;
        pack_sym_codes(x, st_h(p, sym_scale32(x, qw ? qw + b * IX__QK : NULL, 16)), 16, 31, p + 6, &qh);
        memcpy(p + 2, &qh, 4);
    }
}

/* ---- Q4_1: fp16 d | fp16 m | u8 qs[16]      x = d code + m -------------------- */
/* ---- Q5_1: fp16 d | fp16 m | u32 qh | u8 qs[16] ---------------------------------- */
static void unpack_q4_1(const uint8_t *b, size_t j, ix__q32 *u) {
    (void)j;
    for (int i = 0; i < 16; i++) {
        u->q[i] = (int8_t)(b[4 + i] & 15);
        u->q[i + 16] = (int8_t)(b[4 + i] >> 4);
    }
    q32_plain(u, ld_h(b));
    u->mn[0] = u->mn[1] = 1;
    u->dm = ld_h(b + 2);
}

static void unpack_q5_1(const uint8_t *b, size_t j, ix__q32 *u) {
    (void)j;
    uint32_t qh = ix__load_u32(b + 4);
    for (int i = 0; i < 16; i++) {
        u->q[i] = (int8_t)((b[8 + i] & 15) | ((qh >> i) & 1) << 4);
        u->q[i + 16] = (int8_t)((b[8 + i] >> 4) | ((qh >> (i + 16)) & 1) << 4);
    }
    q32_plain(u, ld_h(b));
    u->mn[0] = u->mn[1] = 1;
    u->dm = ld_h(b + 2);
}

/* min / max of 32 as d and m (x = d code + m), codes 0..nmax; with
 * importance weights, the weighted affine search of fit_affine. */
static void quantize_minmax(const float *src, uint8_t *p, size_t n, int nmax, size_t bytes, const float *qw) {
    for (size_t b = 0; b < n / IX__QK; b++, p += bytes) {
        const float *x = src + b * IX__QK;
        float lo = FLT_MAX, hi = -FLT_MAX;
        for (int j = 0; j < IX__QK; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
        float scale = (hi - lo) / (float)nmax;
        if (qw) {
            float w[IX__QK], mneg;
            imp_weights(x, qw + b * IX__QK, IX__QK, w);
            scale = fit_affine(x, w, IX__QK, nmax, -0.5f, 0.1f, 10, &mneg);
            lo = -mneg;
        }
        float d = st_h(p, scale), m = st_h(p + 2, lo);
        float shifted[IX__QK];
        for (int j = 0; j < IX__QK; j++) shifted[j] = x[j] - m;
        uint32_t qh;
        pack_sym_codes(shifted, d, 0, nmax, p + (nmax > 15 ? 8 : 4), &qh);
        if (nmax > 15) memcpy(p + 4, &qh, 4);
    }
}

static void quantize_q4_1(const float *src, uint8_t *p, size_t n, const float *qw) {
    quantize_minmax(src, p, n, 15, BYTES_Q4_1, qw);
}
static void quantize_q5_1(const float *src, uint8_t *p, size_t n, const float *qw) {
    quantize_minmax(src, p, n, 31, BYTES_Q5_1, qw);
}

/* ---- IQ4_NL: fp16 d | u8 qs[16]        x[j] = d kv[lo(qs[j])], x[j+16] = d kv[hi] --- */
const int8_t ix__iq4_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void unpack_iq4_nl(const uint8_t *b, size_t j, ix__q32 *u) {
    (void)j;
    for (int i = 0; i < 16; i++) {
        u->q[i] = ix__iq4_grid[b[2 + i] & 15];
        u->q[i + 16] = ix__iq4_grid[b[2 + i] >> 4];
    }
    q32_plain(u, ld_h(b));
}

/* The index of the table value nearest v (ties to the lower). */
static int nearest_iq4(float v) {
    int best = 0;
    for (int i = 1; i < 16; i++)
        if (fabsf(v - (float)ix__iq4_grid[i]) < fabsf(v - (float)ix__iq4_grid[best])) best = i;
    return best;
}

/* The codes of 32 values for scale d, packed as IQ4_NL / IQ4_XS pack them. */
static void pack_iq4_codes(const float *x, float d, uint8_t *qs) {
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(nearest_iq4(x[j] * id) | nearest_iq4(x[j + 16] * id) << 4);
}

/* The scale of 32 values on the IQ4 grid: the value of largest magnitude at
 * -127 (the grid's widest end), then refitted by least squares weighted by
 * x^2 (imp_weights with qw) over the codes that scale gives. */
static float iq4_scale(const float *x, const float *qw) {
    float vmax = signed_max(x);
    if (!(fabsf(vmax) > 1e-30f)) return 0.0f;
    float d = vmax / (float)ix__iq4_grid[0], sqx = 0.0f, sqq = 0.0f;
    for (int j = 0; j < IX__QK; j++) {
        float q = (float)ix__iq4_grid[nearest_iq4(x[j] / d)];
        float w = qw ? qw[j] : x[j] * x[j];
        sqx += w * q * x[j];
        sqq += w * q * q;
    }
    return sqq > 0.0f ? sqx / sqq : d;
}

static void quantize_iq4_nl(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / IX__QK; b++, p += BYTES_IQ4_NL) {
        const float *x = src + b * IX__QK;
        pack_iq4_codes(x, st_h(p, iq4_scale(x, qw ? qw + b * IX__QK : NULL)), p + 2);
    }
}

/* ---- IQ4_XS: fp16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128] -----------------
 * Sub-block j (32 elements): ls = (4 bits of scales_l[j/2], low nibble for
 * even j) | (bits 2j..2j+1 of scales_h) << 4, x = d (ls - 32) kv[code], codes
 * at qs[16 j] packed as IQ4_NL's. */
static void unpack_iq4_xs(const uint8_t *b, size_t j, ix__q32 *u) {
    const uint8_t *qs = b + 8 + 16 * j;
    for (int i = 0; i < 16; i++) {
        u->q[i] = ix__iq4_grid[qs[i] & 15];
        u->q[i + 16] = ix__iq4_grid[qs[i] >> 4];
    }
    q32_plain(u, ld_h(b));
    ix__sub_scales(IX_DTYPE_IQ4_XS, b, j, u->sc, u->mn);
}

static void quantize_iq4_xs(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / 256; b++, p += BYTES_IQ4_XS) {
        const float *x = src + b * 256;
        float s[8], smax = 0.0f;
        for (int j = 0; j < 8; j++) {
            s[j] = iq4_scale(x + 32 * j, qw ? qw + b * 256 + 32 * j : NULL);
            if (fabsf(s[j]) > fabsf(smax)) smax = s[j];
        }
        float d = st_h(p, smax / -32.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t sh = 0;
        memset(p + 4, 0, 4);
        for (int j = 0; j < 8; j++) {
            int l = round_clamp(s[j] * id, -32, 31);
            pack_iq4_codes(x + 32 * j, d * (float)l, p + 8 + 16 * j);
            l += 32;
            p[4 + j / 2] |= (uint8_t)((l & 15) << (4 * (j % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * j));
        }
        memcpy(p + 2, &sh, 2);
    }
}

/* ---- Q2_K: u8 scales[16] | u8 qs[64] | fp16 d | fp16 dmin           (84 bytes) ----
 * 16 sub-blocks of 16: scales[s] = scale (low nibble) | min (high nibble),
 * x = d scale code - dmin min, code 2 bits. Element e: code (qs[32 (e / 128)
 * + e % 32] >> 2 ((e % 128) / 32)) & 3, sub-block e / 16. */
static void unpack_q2_k(const uint8_t *b, size_t j, ix__q32 *u) {
    const uint8_t *qs = b + 16 + 32 * (j / 4);
    const int shift = 2 * (int)(j % 4);
    for (int i = 0; i < 32; i++) u->q[i] = (int8_t)((qs[i] >> shift) & 3);
    ix__sub_scales(IX_DTYPE_Q2_K, b, j, u->sc, u->mn);
    u->d = ld_h(b + 80);
    u->dm = -ld_h(b + 82);
}

/* Codes of 256 values in 2-bit planes as Q2_K / Q3_K / Q6_K store them:
 * byte 32 h + i holds elements 128 h + 32 g + i at bits 2g (g = 0..3). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 32; i++)
            qs[32 * h + i] = (uint8_t)((L[128 * h + i] & 3) | (L[128 * h + 32 + i] & 3) << 2 |
                                       (L[128 * h + 64 + i] & 3) << 4 | (L[128 * h + 96 + i] & 3) << 6);
}

/* Sub-block scales s[n] and mins m[n] (>= 0) to integers of at most qmax
 * against super-block scales d and dmin (stored as fp16 at pd and pm).
 * Returns them in ls / lm and the stored d / dmin in *d / *dmin. */
static void quantize_scales(const float *s, const float *m, int n, int qmax, uint8_t *pd, uint8_t *pm, uint8_t *ls,
                            uint8_t *lm, float *d, float *dmin) {
    float smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < n; j++) smax = fmaxf(smax, s[j]), mmax = fmaxf(mmax, m[j]);
    float is = smax > 0.0f ? (float)qmax / smax : 0.0f, im = mmax > 0.0f ? (float)qmax / mmax : 0.0f;
    for (int j = 0; j < n; j++) {
        ls[j] = (uint8_t)round_clamp(is * s[j], 0, qmax);
        lm[j] = (uint8_t)round_clamp(im * m[j], 0, qmax);
    }
    *d = st_h(pd, smax / (float)qmax);
    *dmin = st_h(pm, mmax / (float)qmax);
}

/* Code of x in [0, nmax] for x = sd code - md (0 when sd is 0). */
static uint8_t affine_code(float x, float sd, float md, int nmax) {
    return sd != 0.0f ? (uint8_t)round_clamp((x + md) / sd, 0, nmax) : 0;
}

static void quantize_q2_k(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / 256; b++, p += BYTES_Q2_K) {
        const float *x = src + b * 256;
        float s[16], m[16], w[16], d, dmin;
        uint8_t ls[16], lm[16], L[256];
        for (int j = 0; j < 16; j++) {
            if (qw) imp_weights(x + 16 * j, qw + b * 256 + 16 * j, 16, w);
            else
                for (int i = 0; i < 16; i++) w[i] = fabsf(x[16 * j + i]);
            s[j] = fit_affine(x + 16 * j, w, 16, 3, -0.5f, 0.1f, 15, &m[j]);
        }
        quantize_scales(s, m, 16, 15, p + 80, p + 82, ls, lm, &d, &dmin);
        for (int j = 0; j < 16; j++) {
            p[j] = (uint8_t)(ls[j] | lm[j] << 4);
            for (int i = 0; i < 16; i++)
                L[16 * j + i] = affine_code(x[16 * j + i], d * (float)ls[j], dmin * (float)lm[j], 3);
        }
        pack_2bit(L, p + 16);
    }
}

/* ---- Q3_K: u8 hmask[32] | u8 qs[64] | u8 scales[12] | fp16 d       (110 bytes) ---
 * 16 sub-blocks of 16 with 6-bit scales (stored + 32): scale s has its low
 * 4 bits in scales[s % 8] (low nibble for s < 8, high for s >= 8) and its
 * high 2 bits at bit 2 (s / 4) of scales[8 + s % 4]. Element e: 2 low bits
 * as Q2_K's, minus 4 unless bit (e / 32) of hmask[e % 32] is set. */
static void unpack_q3_k(const uint8_t *b, size_t j, ix__q32 *u) {
    const uint8_t *qs = b + 32 + 32 * (j / 4);
    const int shift = 2 * (int)(j % 4);
    for (int i = 0; i < 32; i++)
        u->q[i] = (int8_t)(((qs[i] >> shift) & 3) - ((b[i] >> j) & 1 ? 0 : 4));
    q32_plain(u, ld_h(b + 108));
    ix__sub_scales(IX_DTYPE_Q3_K, b, j, u->sc, u->mn);
}

static void quantize_q3_k(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / 256; b++, p += BYTES_Q3_K) {
        const float *x = src + b * 256;
        float s[16], smax = sym_scales16(x, 4, qw ? qw + b * 256 : NULL, s);
        float d = st_h(p + 108, smax / -32.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *sc = p + 96, L[256];
        memset(sc, 0, 12);
        memset(p, 0, 32);
        for (int j = 0; j < 16; j++) {
            int l = round_clamp(s[j] * id, -32, 31);
            float sd = d * (float)l;
            for (int i = 0; i < 16; i++) {
                int c = sd != 0.0f ? round_clamp(x[16 * j + i] / sd, -4, 3) : 0;
                L[16 * j + i] = (uint8_t)(c + 4);
            }
            l += 32;
            sc[j % 8] |= (uint8_t)((l & 15) << (j < 8 ? 0 : 4));
            sc[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        for (int e = 0; e < 256; e++) /* the high bit (+4) of element e: hmask[e % 32], bit e / 32 */
            if (L[e] > 3) p[e % 32] |= (uint8_t)(1u << (e / 32));
        pack_2bit(L, p + 32);
    }
}

/* ---- Q4_K: fp16 d | fp16 dmin | u8 scales[12] | u8 qs[128]          (144 bytes) --
 * ---- Q5_K: fp16 d | fp16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128] (176) -----
 * 8 sub-blocks of 32, x = d scale code - dmin min, with 6-bit scales and
 * mins (ix__k4_scales: for j < 4 scale j = scales[j] & 63, min j =
 * scales[j + 4] & 63; for j >= 4 scale = (scales[j + 4] & 15) | (scales[j - 4]
 * >> 6) << 4, min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4). Sub-block j's codes: the low
 * (even j) or high (odd j) nibbles of qs[32 (j / 2) ..], Q5_K adding bit j
 * of qh[i] as the fifth. */
static void unpack_q45_k(const uint8_t *b, size_t j, const uint8_t *qh, const uint8_t *qs, ix__q32 *u) {
    const uint8_t *q = qs + 32 * (j / 2);
    const int shift = 4 * (int)(j % 2);
    for (int i = 0; i < 32; i++) u->q[i] = (int8_t)(((q[i] >> shift) & 15) | (qh ? ((qh[i] >> j) & 1) << 4 : 0));
    /* the sub-block's scale and min folded into the float scales (exact:
     * an fp16 times a 6-bit integer), so the canonical dot takes one float
     * product per block and no integer scale: what lets the wide bands skip
     * an integer multiply per row and block */
    uint8_t sm[16];
    ix__k4_scales(b + 4, sm);
    u->sc[0] = u->sc[1] = 1;
    u->mn[0] = u->mn[1] = 1;
    u->d = ld_h(b) * (float)sm[j];
    u->dm = -ld_h(b + 2) * (float)sm[8 + j];
}

static void unpack_q4_k(const uint8_t *b, size_t j, ix__q32 *u) { unpack_q45_k(b, j, NULL, b + 16, u); }
static void unpack_q5_k(const uint8_t *b, size_t j, ix__q32 *u) { unpack_q45_k(b, j, b + 16, b + 48, u); }

static void quantize_q45_k(const float *src, uint8_t *p, size_t n, int nmax, const float *qw) {
    const size_t bytes = nmax > 15 ? BYTES_Q5_K : BYTES_Q4_K;
    uint8_t *qh = nmax > 15 ? p + 16 : NULL, *qs = p + (nmax > 15 ? 48 : 16);
    for (size_t b = 0; b < n / 256; b++, p += bytes, qs += bytes, qh = qh ? qh + bytes : NULL) {
        const float *x = src + b * 256;
        float s[8], m[8], w[32], d, dmin;
        uint8_t ls[8], lm[8];
        for (int j = 0; j < 8; j++) {
            const float *xs = x + 32 * j;
            float sq = 0.0f;
            for (int i = 0; i < 32; i++) sq += xs[i] * xs[i];
            float rms = sqrtf(sq / 32.0f);
            if (qw) imp_weights(xs, qw + b * 256 + 32 * j, 32, w);
            else
                for (int i = 0; i < 32; i++) w[i] = rms + fabsf(xs[i]);
            s[j] = nmax > 15 ? fit_affine(xs, w, 32, nmax, -0.5f, 0.1f, 15, &m[j])
                             : fit_affine(xs, w, 32, nmax, -1.0f, 0.1f, 20, &m[j]);
        }
        quantize_scales(s, m, 8, 63, p, p + 2, ls, lm, &d, &dmin);
        uint8_t *sc = p + 4;
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                sc[j] = ls[j];
                sc[j + 4] = lm[j];
            } else {
                sc[j + 4] = (uint8_t)((ls[j] & 15) | (lm[j] & 15) << 4);
                sc[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
                sc[j] |= (uint8_t)((lm[j] >> 4) << 6);
            }
        }
        if (qh) memset(qh, 0, 32);
        memset(qs, 0, 128);
        for (int j = 0; j < 8; j++)
            for (int i = 0; i < 32; i++) {
                uint8_t c = affine_code(x[32 * j + i], d * (float)ls[j], dmin * (float)lm[j], nmax);
                qs[32 * (j / 2) + i] |= (uint8_t)((c & 15) << (4 * (j % 2)));
                if (qh) qh[i] |= (uint8_t)((c >> 4) << j);
            }
    }
}

static void quantize_q4_k(const float *src, uint8_t *p, size_t n, const float *qw) {
    quantize_q45_k(src, p, n, 15, qw);
}
static void quantize_q5_k(const float *src, uint8_t *p, size_t n, const float *qw) {
    quantize_q45_k(src, p, n, 31, qw);
}

/* ---- Q6_K: u8 ql[128] | u8 qh[64] | int8 scales[16] | fp16 d          (210 bytes) -
 * x = d scale code, code 6 bits - 32, 16 sub-blocks of 16. Element e
 * (h = e / 128, g = (e % 128) / 32, i = e % 32): low 4 bits in the low (g < 2)
 * or high nibble of ql[64 h + 32 (g % 2) + i], high 2 bits at bit 2 g of
 * qh[32 h + i]; scale scales[e / 16]. */
static void unpack_q6_k(const uint8_t *b, size_t j, ix__q32 *u) {
    const size_t h = j / 4, g = j % 4;
    const uint8_t *ql = b + 64 * h + 32 * (g % 2), *qh = b + 128 + 32 * h;
    for (int i = 0; i < 32; i++)
        u->q[i] = (int8_t)((((ql[i] >> (g < 2 ? 0 : 4)) & 15) | ((qh[i] >> (2 * g)) & 3) << 4) - 32);
    q32_plain(u, ld_h(b + 208));
    u->sc[0] = (int8_t)b[192 + 2 * j];
    u->sc[1] = (int8_t)b[192 + 2 * j + 1];
}

static void quantize_q6_k(const float *src, uint8_t *p, size_t n, const float *qw) {
    for (size_t b = 0; b < n / 256; b++, p += BYTES_Q6_K) {
        const float *x = src + b * 256;
        float s[16], smax = sym_scales16(x, 32, qw ? qw + b * 256 : NULL, s);
        float d = st_h(p + 208, smax / -128.0f), id = d != 0.0f ? 1.0f / d : 0.0f;
        memset(p, 0, 192);
        for (int j = 0; j < 16; j++) {
            int l = round_clamp(s[j] * id, -128, 127);
            p[192 + j] = (uint8_t)(int8_t)l;
            float sd = d * (float)l;
            for (int i = 0; i < 16; i++) {
                int e = 16 * j + i, h = e / 128, g = (e % 128) / 32, k = e % 32;
                int c = (sd != 0.0f ? round_clamp(x[e] / sd, -32, 31) : 0) + 32;
                p[64 * h + 32 * (g % 2) + k] |= (uint8_t)((c & 15) << (g < 2 ? 0 : 4));
                p[128 + 32 * h + k] |= (uint8_t)((c >> 4) << (2 * g));
            }
        }
    }
}

/* ---- the traits table ------------------------------------------------------------
 * Columns per path. The x86 and NEON files exist only on their architecture;
 * the AVX-VNNI build of avx2.c only where the compiler has -mavxvnni. */
#if defined(IX_KERNELS_HAVE_X86) && defined(IX_KERNELS_HAVE_AVX2_VNNI)
#define AVX2(t) [IX__PATH_AVX2] = ix__mm_##t##_avx2, [IX__PATH_AVX2_VNNI] = ix__mm_##t##_avx2vnni,
#elif defined(IX_KERNELS_HAVE_X86)
#define AVX2(t) [IX__PATH_AVX2] = ix__mm_##t##_avx2,
#else
#define AVX2(t)
#endif
#if defined(IX_KERNELS_HAVE_X86)
#define AVX512(bw, vnni) [IX__PATH_AVX512_BW] = bw, [IX__PATH_AVX512_VNNI] = vnni,
#else
#define AVX512(bw, vnni)
#endif
#if defined(IX_KERNELS_HAVE_NEON)
#define NEON(plain, dot) [IX__PATH_NEON] = plain, [IX__PATH_NEON_DOT] = dot,
#else
#define NEON(plain, dot)
#endif

#define NO_VECTOR_PATH
#define FLOAT_ROW(T, t, pack_)                                                                     \
    [IX_DTYPE_##T] = {IX_DTYPE_##T, BLCK_##T, BYTES_##T, false, false, false, false, pack_, 0, 0, dequant_##t, NULL, \
                      quantize_##t,                                                                \
                      {[IX__PATH_GENERIC] = ix__mm_float_generic, AVX2(t)                          \
                           AVX512(ix__mm_##t##_avx512, ix__mm_##t##_avx512)                         \
                               NEON(ix__mm_float_neon, ix__mm_float_neon)}}
/* min_: 0 none, 1 the integer min term, 2 the min_sx form; with super-block
 * sums (x_super) (kernels_int.h): 3 the integer min term, 4 no min */
#define Q_ROW(T, t, min_, pack_, pk_code_, pk_scale_, paths)                                        \
    [IX_DTYPE_##T] = {IX_DTYPE_##T, BLCK_##T, BYTES_##T, true, (min_) != 0 && (min_) != 4, (min_) == 2, (min_) >= 3, pack_, pk_code_, pk_scale_, \
                      dequant_q, \
                      unpack_##t, quantize_##t, {[IX__PATH_GENERIC] = ix__mm_q_generic, paths}}

/* Indexed by type code. */
static const ix__wtype k_wtypes[] = {
    FLOAT_ROW(F32, f32, IX__PACK_NONE),
    FLOAT_ROW(F16, f16, IX__PACK_HALVES),
    FLOAT_ROW(BF16, bf16, IX__PACK_HALVES),
    Q_ROW(Q8_0, q8_0, 0, IX__PACK_PLANES, 512, 32,
          AVX2(q8_0) AVX512(ix__mm_q8_0_avx512bw, ix__mm_q8_0_avx512vnni)
              NEON(ix__mm_q8_0_neon, ix__mm_q8_0_neondot)),
    Q_ROW(Q4_0, q4_0, 0, IX__PACK_PLANES, 256, 32,
          AVX2(q4_0) AVX512(ix__mm_q4_0_avx512bw, ix__mm_q4_0_avx512vnni)
              NEON(ix__mm_q4_0_neon, ix__mm_q4_0_neondot)),
    Q_ROW(Q4_1, q4_1, 1, IX__PACK_Q32, 256, 64, AVX2(q4_1) AVX512(ix__mm_q4_1_avx512bw, ix__mm_q4_1_avx512vnni)
              NEON(ix__mm_q4_1_neon, ix__mm_q4_1_neondot)),
    Q_ROW(Q5_0, q5_0, 0, IX__PACK_Q32, IX__PK_HI + 64, 32, AVX2(q5_0) AVX512(ix__mm_q5_0_avx512bw, ix__mm_q5_0_avx512vnni)
              NEON(ix__mm_q5_0_neon, ix__mm_q5_0_neondot)),
    Q_ROW(Q5_1, q5_1, 1, IX__PACK_Q32, IX__PK_HI + 64, 64, AVX2(q5_1) AVX512(ix__mm_q5_1_avx512bw, ix__mm_q5_1_avx512vnni)
              NEON(ix__mm_q5_1_neon, ix__mm_q5_1_neondot)),
    Q_ROW(Q2_K, q2_k, 3, IX__PACK_K2, 128, IX__PK2_SUPER, AVX2(q2_k) AVX512(ix__mm_q2_k_avx512bw, ix__mm_q2_k_avx512vnni)
              NEON(ix__mm_q2_k_neon, ix__mm_q2_k_neondot)),
    Q_ROW(Q3_K, q3_k, 4, IX__PACK_K2, 192, IX__PK6_SUPER, AVX2(q3_k) AVX512(ix__mm_q3_k_avx512bw, ix__mm_q3_k_avx512vnni)
              NEON(ix__mm_q3_k_neon, ix__mm_q3_k_neondot)),
    Q_ROW(Q4_K, q4_k, 2, IX__PACK_K4, IX__PK_HI, IX__PK4_SUPER, AVX2(q4_k) AVX512(ix__mm_q4_k_avx512bw, ix__mm_q4_k_avx512vnni)
              NEON(ix__mm_q4_k_neon, ix__mm_q4_k_neondot)),
    Q_ROW(Q5_K, q5_k, 2, IX__PACK_K4, IX__PK_HI + 64, IX__PK4_SUPER,
          AVX2(q5_k) AVX512(ix__mm_q5_k_avx512bw, ix__mm_q5_k_avx512vnni) NEON(ix__mm_q5_k_neon, ix__mm_q5_k_neondot)),
    Q_ROW(Q6_K, q6_k, 0, IX__PACK_K6, IX__PK_HI + 128, IX__PK6_SUPER, AVX2(q6_k) AVX512(ix__mm_q6_k_avx512bw, ix__mm_q6_k_avx512vnni)
              NEON(ix__mm_q6_k_neon, ix__mm_q6_k_neondot)),
    Q_ROW(IQ4_NL, iq4_nl, 0, IX__PACK_PLANES, 256, 32, AVX2(iq4_nl) AVX512(ix__mm_iq4_nl_avx512bw, ix__mm_iq4_nl_avx512vnni)
              NEON(ix__mm_iq4_nl_neon, ix__mm_iq4_nl_neondot)),
    Q_ROW(IQ4_XS, iq4_xs, 0, IX__PACK_XS, 256, IX__PKX_SUPER, AVX2(iq4_xs) AVX512(ix__mm_iq4_xs_avx512bw, ix__mm_iq4_xs_avx512vnni)
              NEON(ix__mm_iq4_xs_neon, ix__mm_iq4_xs_neondot)),
};

const ix__wtype *ix__wtype_of(ix_dtype t) {
    /* the enum may hold any code read from a file */
    unsigned code = (unsigned)t;
    if (code >= IX_ARRAY_LEN(k_wtypes) || !k_wtypes[code].blck) return NULL;
    return &k_wtypes[code];
}

bool ix_kernels_has_type(ix_dtype t) { return ix__wtype_of(t) != NULL; }

size_t ix_kernels_types(ix_dtype *out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_wtypes); i++) {
        if (!k_wtypes[i].blck) continue;
        if (n < cap) out[n] = k_wtypes[i].type;
        n++;
    }
    return n;
}
