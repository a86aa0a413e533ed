/*
 * Kernel dispatch: picks the function table of the ISA path ix_cpu_isa()
 * names, and owns the public ix_kernels_* wrappers, which validate arguments
 * once and then call the active table. Also the parts every path shares: the
 * matmul thread split and driver, the RoPE angle table, the attention
 * accumulator's init/finish and the scalar conversions.
 *
 * The active table is one atomic pointer (derived from the CPU feature table,
 * like it process-wide). Tables are static const, so switching while another
 * thread runs kernels is safe: that thread finishes on the old table.
 */
#include "kernels/kernels_int.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>

static _Atomic(const ix_kernel_table *) g_active;

const ix_kernel_table *ix_kernels_table(ix_isa isa) {
    if ((unsigned)isa >= IX_ISA_COUNT || !ix_cpu_supports(isa)) return NULL;
    switch (isa) {
    case IX_ISA_GENERIC: return ix__kernels_generic();
#if defined(IX_KERNELS_HAVE_X86)
    case IX_ISA_AVX2: return ix__kernels_avx2(ix_cpu_features_get()->avx_vnni);
    case IX_ISA_AVX512: return ix__kernels_avx512(ix_cpu_features_get()->avx512vnni);
#endif
#if defined(IX_KERNELS_HAVE_NEON)
    case IX_ISA_NEON: return ix__kernels_neon(ix_cpu_features_get()->dotprod);
#endif
    default: return NULL; /* a path this architecture's build does not have */
    }
}

ix_status ix_kernels_init(void) {
    ix_isa isa = ix_cpu_isa();
    const ix_kernel_table *t = ix_kernels_table(isa);
    if (!t) {
        IX_LOGD("kernels: no %s path built; using generic", ix_isa_name(isa));
        t = ix__kernels_generic();
    }
    const ix_kernel_table *old = atomic_exchange(&g_active, t);
    if (old != t) IX_LOGD("kernels: using %s", t->name);
    return IX_OK;
}

const ix_kernel_table *ix_kernels(void) {
    const ix_kernel_table *t = atomic_load_explicit(&g_active, memory_order_acquire);
    if (!t) {
        ix_kernels_init();
        t = atomic_load(&g_active);
    }
    return t;
}

ix_isa ix_kernels_isa(void) { return ix_kernels()->isa; }

/* ---- scalar conversions ----------------------------------------------------- */
float ix_fp16_to_fp32(uint16_t h) { return ix__fp16_to_fp32(h); }
uint16_t ix_fp32_to_fp16(float f) { return ix__fp32_to_fp16(f); }
float ix_bf16_to_fp32(uint16_t h) { return ix__bf16_to_fp32(h); }
uint16_t ix_fp32_to_bf16(float f) { return ix__fp32_to_bf16(f); }

void ix_kernels_fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    ix_kernels()->fp16_to_fp32(src, dst, n);
}
void ix_kernels_fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    ix_kernels()->fp32_to_fp16(src, dst, n);
}
void ix_kernels_bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    ix_kernels()->bf16_to_fp32(src, dst, n);
}

/* The row types this module reads and writes: whole blocks. */
static ix_status row_args(ix_dtype t, const void *a, const void *b, size_t n, const ix__wtype **wt) {
    *wt = ix__wtype_of(t);
    if (!*wt) return IX_ERR_UNSUPPORTED;
    if (n % (*wt)->blck) return IX_ERR_INVALID;
    if (n && (!a || !b)) return IX_ERR_INVALID;
    return IX_OK;
}

ix_status ix_kernels_dequant_row(ix_dtype src_type, const void *src, float *dst, size_t n) {
    const ix__wtype *wt;
    ix_status st = row_args(src_type, src, dst, n, &wt);
    if (st == IX_OK && n) wt->dequant(wt, src, dst, n);
    return st;
}

ix_status ix_kernels_quantize_row(ix_dtype dst_type, const float *src, void *dst, size_t n) {
    return ix_kernels_quantize_row_imp(dst_type, src, dst, n, NULL);
}

ix_status ix_kernels_quantize_row_imp(ix_dtype dst_type, const float *src, void *dst, size_t n, const float *imp) {
    const ix__wtype *wt;
    ix_status st = row_args(dst_type, src, dst, n, &wt);
    if (st == IX_OK && imp)
        for (size_t i = 0; i < n; i++)
            if (!(imp[i] >= 0.0f) || isinf(imp[i])) return IX_ERR_INVALID; /* NaN, negative or infinite */
    if (st == IX_OK && n) wt->quantize(src, dst, n, imp);
    return st;
}

/* ---- matmul ------------------------------------------------------------------- */
size_t ix_kernels_matmul_scratch_bytes(ix_dtype w_type, size_t M, size_t K) {
    if (!ix__w_quantized(w_type)) return 0;
    return M * ix__q8a_row_bytes(K);
}

ix_status ix_kernels_matmul_check(const ix_matmul *mm) {
    if (!mm) return IX_ERR_INVALID;
    const ix__wtype *wt = ix__wtype_of(mm->w_type);
    if (!wt) return IX_ERR_UNSUPPORTED;
    if (mm->K == 0 || mm->K % wt->blck) return IX_ERR_INVALID;
    if (mm->M == 0 || mm->N == 0) return IX_OK; /* nothing to read or write */
    bool x_needed = !(wt->q8a && mm->x_ready);
    if (!mm->w || !mm->y || (x_needed && !mm->x)) return IX_ERR_INVALID;
    if (mm->ldx && mm->ldx < mm->K) return IX_ERR_INVALID;
    if (mm->ldy && mm->ldy < mm->N) return IX_ERR_INVALID;
    if (mm->w_stride_bytes && mm->w_stride_bytes < ix__w_row_bytes(mm->w_type, mm->K))
        return IX_ERR_INVALID;
    if (wt->q8a && (!mm->scratch || ((uintptr_t)mm->scratch & 63))) return IX_ERR_INVALID;
    if (mm->w_packed && (!ix_kernels_packable(mm->w_type, mm->N, mm->K) || mm->w_stride_bytes ||
                         ((uintptr_t)mm->w & 63)))
        return IX_ERR_INVALID;
    return IX_OK;
}

void ix__matmul_rows(const ix_kernel_table *kt, const ix_matmul *mm, size_t n0, size_t n1) {
    ix__mm_entry(kt, ix__wtype_of(mm->w_type))(mm, n0, n1);
}

/* ---- packed weights ------------------------------------------------------------ */
bool ix_kernels_packable(ix_dtype type, size_t N, size_t K) {
    const ix__wtype *wt = ix__wtype_of(type);
    if (!wt || N % IX__PK || K == 0 || K % wt->blck) return false;
    return wt->pack != IX__PACK_NONE;
}

bool ix_kernels_pack_pays(ix_dtype type) {
    const ix__wtype *wt = ix__wtype_of(type);
    if (!wt || wt->pack == IX__PACK_NONE) return false;
    /* Q8_0 / Q4_0 / F16 / BF16 have packed tiles on every path, the others on AVX-512 */
    if (wt->pack == IX__PACK_HALVES || type == IX_DTYPE_Q8_0 || type == IX_DTYPE_Q4_0) return true;
    const unsigned p = ix_kernels()->path;
    return p == IX__PATH_AVX512_BW || p == IX__PATH_AVX512_VNNI;
}

size_t ix_kernels_packed_bytes(ix_dtype type, size_t N, size_t K) {
    if (!ix_kernels_packable(type, N, K)) return 0;
    return N / IX__PK * ix__pk_group_bytes(type, K);
}

/* ---- stealing inside decode's grabs -----------------------------------------
 * A packed walk of a few X rows (below) goes through its grab in steps: in
 * lockstep, step k is group k of each of the G runs; one group at a time,
 * step k is group k. Each step of a grab is claimed from a span word,
 * item << 48 | front << 24 | back, that the walking thread publishes: it
 * takes steps from the front, and a thread that has run out of grabs takes
 * the back half of the steps still unclaimed, by compare-and-swap on the
 * same word, so every step is walked exactly once. The thief walks its
 * steps with the grab's own runs (one more cold start, as any grab), and
 * publishes them in its own word for others to split again. So a run ends
 * with its threads at most a step or two apart (a step is 64 rows: 2.5 us of
 * Q4_0 at K = 2048) however large the grab a slow thread took, and grabs
 * can be few and long (docs/kernels.md, "Threading"). The word lives in
 * the run (mm_run), and the walk finds it through tl_steal, set by
 * mm_run_fn around its calls into the paths' matmul entries: the entries'
 * signature stays (mm, n0, n1). */
#define STEAL_BITS 24 /* a grab has fewer than 2^24 steps (else it walks alone) */
#define STEAL_MASK ((UINT64_C(1) << STEAL_BITS) - 1)

typedef struct mm_span {
    _Alignas(64) _Atomic uint64_t w;
} mm_span;

typedef struct mm_steal {
    _Atomic uint64_t *span; /* this thread's word */
    uint32_t item;          /* the grab being walked */
    bool stolen;            /* steps [f, b) of another thread's grab */
    bool stepped;           /* a walk published its steps */
    uint32_t f, b;
} mm_steal;

static _Thread_local mm_steal *tl_steal;

static inline uint64_t span_word(uint64_t item, uint64_t f, uint64_t b) {
    return item << (2 * STEAL_BITS) | f << STEAL_BITS | b;
}
static inline uint64_t span_item(uint64_t v) { return v >> (2 * STEAL_BITS); }
static inline uint64_t span_front(uint64_t v) { return v >> STEAL_BITS & STEAL_MASK; }
static inline uint64_t span_back(uint64_t v) { return v & STEAL_MASK; }

/* The steps a walk goes through: [0, n) on its own (st NULL), else those
 * of the thread's span, claimed one at a time from its front: [0, n) of a
 * grab, or the stolen st->f.. st->b, published first. */
typedef struct pk_steps {
    mm_steal *st;
    uint64_t k, n;
} pk_steps;

static pk_steps steps_open(mm_steal *st, size_t n) {
    if (st) {
        st->stepped = true;
        atomic_store_explicit(st->span, st->stolen ? span_word(st->item, st->f, st->b) : span_word(st->item, 0, n),
                              memory_order_relaxed);
    }
    return (pk_steps){.st = st, .n = n};
}

static inline bool steps_next(pk_steps *s, size_t *k) {
    if (!s->st) {
        if (s->k >= s->n) return false;
        *k = (size_t)s->k++;
        return true;
    }
    for (;;) {
        uint64_t v = atomic_load_explicit(s->st->span, memory_order_relaxed);
        uint64_t f = span_front(v);
        if (f >= span_back(v)) return false;
        if (atomic_compare_exchange_weak_explicit(s->st->span, &v, v + (UINT64_C(1) << STEAL_BITS),
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *k = (size_t)f;
            return true;
        }
    }
}

/* A walk that cannot go in steps goes alone (*st NULL). It never publishes
 * any, so none can have been stolen from it: false for a stolen one (a
 * guard only), whose caller then has nothing to walk. */
static inline bool walk_alone(mm_steal **st) {
    if ((*st)->stolen) return false;
    *st = NULL;
    return true;
}

static void pk_walk(const ix_matmul *mm, size_t n0, size_t n1, const ix__pk_fn *fns, int rx_max, size_t mchunk,
                    const ix__pk_fn *lock, bool dec) {
    const ix_dtype t = mm->w_type;
    const bool q = ix__w_quantized(t);
    const size_t gb = ix__pk_group_bytes(t, mm->K);
    ix__pk_tile a = {.k = mm->K, .ldy = ix__mm_ldy(mm), .blk_off = ix__align64(mm->K),
                     .xs = q ? ix__q8a_row_bytes(mm->K) : ix__mm_ldx(mm) * sizeof(float),
                     .gstride = gb, .ygs = IX__PK};
    const uint8_t *x0 = q ? (const uint8_t *)mm->scratch : (const uint8_t *)mm->x;
    /* group g's codes at w + g * gstride, its scales sc_off further (the
     * traits looked up once per call, not per group) */
    const uint8_t *w = mm->w;
    const size_t sc_off = q ? (size_t)(ix__pk_scales(t, w, mm->K, 0) - w) : 0;
    mm_steal *st = tl_steal; /* NULL: walk alone */
    if (st && (n1 - n0) / IX__PK > STEAL_MASK && !walk_alone(&st)) return;
    if (lock && mm->M <= IX__PK_LOCK_RX && lock[mm->M - 1]) {
        /* One X row (decode) or a few (verification, a few sequences): the
         * range's groups in G runs of adjacent groups, one run a stream, the
         * streams in lockstep; each stream then reads one contiguous
         * stretch of memory, which the hardware prefetcher follows
         * (docs/kernels.md, "Scales inside the stream"). */
        const size_t G = ix__pk_lock_groups(mm->M), g0 = n0 / IX__PK, run = (n1 / IX__PK - g0) / G;
        a.x = x0;
        a.gstride = run * gb;
        a.ygs = run * IX__PK;
        pk_steps it = steps_open(st, run);
        for (size_t k; steps_next(&it, &k);) {
            a.w = w + (g0 + k) * gb;
            a.scales = q ? a.w + sc_off : NULL;
            a.y = mm->y + (g0 + k) * IX__PK;
            lock[mm->M - 1](&a);
        }
        a.gstride = gb;
        a.ygs = IX__PK;
        /* the last few groups, one at a time, by the grab's own walker */
        n0 = st && st->stolen ? n1 : (g0 + G * run) * IX__PK;
        st = NULL;
    }
    /* at most IX__PK_XCHUNK_BYTES of X per chunk, whole tiles of rows */
    if (mchunk * a.xs > IX__PK_XCHUNK_BYTES) {
        const size_t fit = IX__PK_XCHUNK_BYTES / a.xs / (size_t)rx_max * (size_t)rx_max;
        mchunk = fit < (size_t)rx_max ? (size_t)rx_max : fit;
    }
    /* a step is a group for every X row: one chunk only */
    if (st && mm->M > mchunk && !walk_alone(&st)) return;
    /* the decode buffer: only where some chunk has more than one tile of rows */
    uint8_t *buf = NULL;
    if (dec && q && n0 < n1 && mm->M > (size_t)rx_max)
        buf = ix_aligned_alloc(64, mm->K / IX__QK * IX__PK_DEC_BLOCK);
    for (size_t mc = 0; mc < mm->M; mc += mchunk) {
        size_t mend = mm->M - mc < mchunk ? mm->M : mc + mchunk;
        a.dec = mend - mc > (size_t)rx_max ? buf : NULL;
        pk_steps it = steps_open(st, n1 / IX__PK - n0 / IX__PK);
        for (size_t k; steps_next(&it, &k);) {
            const size_t g = n0 / IX__PK + k;
            a.w = w + g * a.gstride;
            a.scales = q ? a.w + sc_off : NULL;
            for (size_t m = mc; m < mend; m += (size_t)rx_max) {
                int rx = mend - m < (size_t)rx_max ? (int)(mend - m) : rx_max;
                a.x = x0 + m * a.xs;
                a.y = mm->y + m * a.ldy + g * IX__PK;
                a.dec_fill = m == mc;
                fns[rx - 1](&a);
            }
        }
    }
    ix_aligned_free(buf);
}

void ix__pk_walk(const ix_matmul *mm, size_t n0, size_t n1, const ix__pk_fn *fns, int rx_max, size_t mchunk,
                 const ix__pk_fn *lock) {
    pk_walk(mm, n0, n1, fns, rx_max, mchunk, lock, false);
}

void ix__pk_walk_dec(const ix_matmul *mm, size_t n0, size_t n1, const ix__pk_fn *fns, int rx_max, size_t mchunk,
                     const ix__pk_fn *lock) {
    pk_walk(mm, n0, n1, fns, rx_max, mchunk, lock, true);
}

/* IX__PACK_K4 / _K6 (Q4_K, Q5_K, Q6_K): per super-block and row, each
 * 32-element sub-block's unsigned codes (its unpack's, Q6_K's + 32)
 * re-paired into Q4_0's nibble planes (element i with element 16 + i) and
 * their high bits into the high-bit planes, and the scales unpacked beside
 * the fp16 d (and dmin) (kernels_int.h). */
static void pack_k(ix_dtype t, const void *w, size_t ws, size_t K, size_t n0, size_t n1, void *dst) {
    const ix__wtype *wt = ix__wtype_of(t);
    const bool k6 = wt->pack == IX__PACK_K6, q5 = wt->pk_code_bytes == IX__PK_HI + 64;
    const bool q2 = t == IX_DTYPE_Q2_K, q3 = t == IX_DTYPE_Q3_K, xs = t == IX_DTYPE_IQ4_XS;
    const bool q32 = wt->pack == IX__PACK_Q32, mins = q32 && wt->has_min; /* Q4_1 / Q5_1: d and m */
    const int off = k6 ? 32 : q3 ? 4 : t == IX_DTYPE_Q5_0 ? 16 : 0; /* the unpack's q to unsigned codes */
    const size_t nsb = K / wt->blck, per = wt->blck / IX__QK, gb = ix__pk_group_bytes(t, K), cb = wt->pk_code_bytes;
    const size_t ub = ix__pk_unit_bytes(t);
    for (size_t g = n0 / IX__PK; g < n1 / IX__PK; g++) {
        uint8_t *codes = (uint8_t *)ix__pk_codes(t, dst, K, g);
        uint8_t *scales = (uint8_t *)ix__pk_scales(t, dst, K, g);
        const uint8_t *src = (const uint8_t *)w + g * IX__PK * ws;
        for (size_t sb = 0; sb < nsb; sb++) {
            uint8_t *S = scales + sb * ub;
            for (size_t r = 0; r < IX__PK; r++) {
                const uint8_t *blk = src + r * ws + sb * wt->bytes;
                if (k6) { /* Q6_K: int8 scales[16] at 192, fp16 d at 208 */
                    memcpy(S + IX__PK6_D + 2 * r, blk + 208, 2);
                    for (size_t s = 0; s < 16; s++) S[IX__PK6_SC + s * IX__PK + r] = blk[192 + s];
                } else if (q3) { /* Q3_K: fp16 d at 108, the 6-bit scales decoded */
                    memcpy(S + IX__PK6_D + 2 * r, blk + 108, 2);
                    for (size_t j = 0; j < 8; j++) {
                        int32_t sc[2], mn[2];
                        ix__sub_scales(t, blk, j, sc, mn);
                        for (size_t k = 0; k < 2; k++) S[IX__PK6_SC + ix__pk_pair_at(j, r, k)] = (uint8_t)(int8_t)sc[k];
                    }
                } else if (q32) { /* fp16 d (and m) at 0 (2) */
                    memcpy(S + 2 * r, blk, 2);
                    if (mins) memcpy(S + 32 + 2 * r, blk + 2, 2);
                } else if (xs) { /* IQ4_XS: fp16 d at 0, the 6-bit scales decoded */
                    memcpy(S + IX__PKX_D + 2 * r, blk, 2);
                    for (size_t j = 0; j < 8; j++) {
                        int32_t sc[2], mn[2];
                        ix__sub_scales(t, blk, j, sc, mn);
                        S[IX__PKX_SC + j * IX__PK + r] = (uint8_t)(int8_t)sc[0];
                    }
                } else if (q2) { /* Q2_K: scale | min << 4 bytes at 0, fp16 d and dmin at 80 */
                    memcpy(S + IX__PK2_D + 2 * r, blk + 80, 2);
                    memcpy(S + IX__PK2_DMIN + 2 * r, blk + 82, 2);
                    for (size_t s = 0; s < 16; s++) S[IX__PK2_SM + ix__pk_pair_at(s / 2, r, s % 2)] = blk[s];
                } else {
                    uint8_t sm[16];
                    memcpy(S + IX__PK4_D + 2 * r, blk, 2);
                    memcpy(S + IX__PK4_DMIN + 2 * r, blk + 2, 2);
                    ix__k4_scales(blk + 4, sm);
                    for (size_t j = 0; j < 8; j++) {
                        S[IX__PK4_SC + j * IX__PK + r] = sm[j];
                        S[IX__PK4_MN + j * IX__PK + r] = sm[8 + j];
                    }
                }
                for (size_t j = 0; j < per; j++) {
                    ix__q32 u;
                    wt->unpack(blk, j, &u);
                    uint8_t q[32];
                    for (size_t i = 0; i < 32; i++) /* IQ4_XS: the grid indices, bytes 8 + 16 j of the block */
                        q[i] = xs ? (uint8_t)(blk[8 + 16 * j + i % 16] >> (i / 16 * 4) & 15) : (uint8_t)(u.q[i] + off);
                    uint8_t *cd = codes + sb * ub + j * cb + r * 4;
                    for (size_t i = 0; i < 4 && (q2 || q3); i++) { /* 2-bit planes (+ the third bits) */
                        uint8_t l0 = 0, l1 = 0, h = 0;
                        for (size_t p = 0; p < 4; p++) {
                            const uint8_t a = q[4 * p + i], b = q[16 + 4 * p + i];
                            l0 |= (uint8_t)((a & 3) << (2 * p)), l1 |= (uint8_t)((b & 3) << (2 * p));
                            h |= (uint8_t)((a >> 2) << p | (b >> 2) << (4 + p));
                        }
                        cd[i] = l0, cd[64 + i] = l1;
                        if (q3) cd[128 + i] = h;
                    }
                    for (size_t i = 0; i < 4 && !(q2 || q3); i++) {
                        uint8_t h0 = 0, h1 = 0;
                        for (size_t p = 0; p < 4; p++) {
                            const uint8_t a = q[4 * p + i], b = q[16 + 4 * p + i];
                            cd[p * 64 + i] = (uint8_t)((a & 15) | (b & 15) << 4);
                            if (q5) h0 |= (uint8_t)((a >> 4) << p | (b >> 4) << (4 + p));
                            if (k6) h0 |= (uint8_t)((a >> 4) << (2 * p)), h1 |= (uint8_t)((b >> 4) << (2 * p));
                        }
                        if (cb > IX__PK_HI) cd[IX__PK_HI + i] = h0;
                        if (k6) cd[IX__PK_HI + 64 + i] = h1;
                    }
                }
            }
        }
        memset(codes + nsb * ub, 0, gb - nsb * ub);
    }
}

ix_status ix_kernels_pack(ix_dtype type, const void *w, size_t w_stride_bytes, size_t N, size_t K,
                          size_t n0, size_t n1, void *dst) {
    if (!ix_kernels_packable(type, N, K)) return IX_ERR_UNSUPPORTED;
    size_t row = ix__w_row_bytes(type, K), ws = w_stride_bytes ? w_stride_bytes : row;
    if (ws < row || n0 > n1 || n1 > N || n0 % IX__PK || n1 % IX__PK) return IX_ERR_INVALID;
    if (n0 == n1) return IX_OK;
    if (!w || !dst || ((uintptr_t)dst & 63)) return IX_ERR_INVALID;
    if (ix__pk_halves(type)) {
        for (size_t g = n0 / IX__PK; g < n1 / IX__PK; g++) {
            uint8_t *out = (uint8_t *)ix__pk_codes(type, dst, K, g);
            const uint8_t *src = (const uint8_t *)w + g * IX__PK * ws;
            for (size_t k = 0; k < K; k++)
                for (size_t r = 0; r < IX__PK; r++) memcpy(out + (k * IX__PK + r) * 2, src + r * ws + k * 2, 2);
            memset(out + K * 2 * IX__PK, 0, ix__pk_group_bytes(type, K) - K * 2 * IX__PK);
        }
        return IX_OK;
    }
    const ix__pack pk = ix__wtype_of(type)->pack;
    if (pk == IX__PACK_K4 || pk == IX__PACK_K6 || pk == IX__PACK_K2 || pk == IX__PACK_Q32 || pk == IX__PACK_XS) {
        pack_k(type, w, ws, K, n0, n1, dst);
        return IX_OK;
    }
    /* IX__PACK_PLANES: a block is an fp16 scale and its code bytes, a dword
     * of them per plane */
    const size_t nb = K / IX__QK, bb = ix__wtype_of(type)->bytes, cb = ix__pk_code_bytes(type);
    const size_t planes = cb / 64, ub = ix__pk_unit_bytes(type);
    for (size_t g = n0 / IX__PK; g < n1 / IX__PK; g++) {
        uint8_t *codes = (uint8_t *)ix__pk_codes(type, dst, K, g);
        const uint8_t *src = (const uint8_t *)w + g * IX__PK * ws;
        /* block-major, so the writes are sequential and the 16 rows are 16
         * forward read streams */
        for (size_t b = 0; b < nb; b++) {
            uint8_t *cd = codes + b * ub;
            for (size_t r = 0; r < IX__PK; r++) {
                const uint8_t *blk = src + r * ws + b * bb;
                memcpy(cd + cb + r * 2, blk, 2);
                for (size_t j = 0; j < planes; j++) memcpy(cd + j * 64 + r * 4, blk + 2 + 4 * j, 4);
            }
        }
        memset(codes + nb * ub, 0, ix__pk_group_bytes(type, K) - nb * ub);
    }
    return IX_OK;
}

/* [*lo, *hi) of n items for participant ith of nth, in units of `align`. */
static void split(size_t n, size_t align, int ith, int nth, size_t *lo, size_t *hi) {
    size_t units = (n + align - 1) / align, per = (units + (size_t)nth - 1) / (size_t)nth;
    size_t a = (size_t)ith * per * align, b = a + per * align;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

bool ix_kernels_same_act(ix_dtype a, ix_dtype b) {
    const ix__wtype *wa = ix__wtype_of(a), *wb = ix__wtype_of(b);
    return wa && wb && wa->q8a && wb->q8a && wa->x_super == wb->x_super;
}

static void matmul_quantize(const ix_kernel_table *kt, const ix_matmul *mm, int ith, int nth) {
    if (!ix__w_quantized(mm->w_type) || mm->x_ready) return;
    size_t m0, m1, ldx = ix__mm_ldx(mm), rb = ix__q8a_row_bytes(mm->K);
    ix__quantize_act_fn quantize = ix__act_quantizer(kt, mm->w_type);
    split(mm->M, 1, ith, nth, &m0, &m1);
    for (size_t m = m0; m < m1; m++) quantize(mm->x + m * ldx, (uint8_t *)mm->scratch + m * rb, mm->K);
}

void ix_kernels_matmul_quantize(const ix_matmul *mm, int ith, int nth) {
    matmul_quantize(ix_kernels(), mm, ith, nth);
}

void ix_kernels_matmul_compute(const ix_matmul *mm, int ith, int nth) {
    size_t n0, n1;
    split(mm->N, 16, ith, nth, &n0, &n1);
    if (n0 < n1) ix__matmul_rows(ix_kernels(), mm, n0, n1);
}

/* One column band [n, n + rw) of W against X rows [m0, m1). */
static void tile_rows(const ix__tile_fn *fns, int rx_max, ix__tile t, const uint8_t *x0, size_t m0,
                      size_t m1) {
    float *y0 = t.y;
    if (rx_max == 0) { /* band mode */
        t.x = x0 + m0 * t.xs;
        t.y = y0 + m0 * t.ldy;
        t.rows = m1 - m0;
        t.prefetch = true; /* a band touches each W block once */
        fns[0](&t);
        return;
    }
    for (size_t m = m0; m < m1; m += (size_t)rx_max) {
        size_t at = m;
        int rx = m1 - m < (size_t)rx_max ? (int)(m1 - m) : rx_max;
        if (rx < rx_max && m1 - m0 >= (size_t)rx_max) { /* move back, recompute a few rows */
            at = m1 - (size_t)rx_max;
            rx = rx_max;
        }
        t.x = x0 + at * t.xs;
        t.y = y0 + at * t.ldy;
        t.prefetch = m == m0;
        fns[rx - 1](&t);
    }
}

void ix__matmul_tiles(const ix_matmul *mm, size_t n0, size_t n1, const ix__tile_fn *fns,
                      int rx_max, int rw) {
    bool q = ix__w_quantized(mm->w_type);
    ix__tile t = {.ws = ix__mm_wstride(mm), .ldy = ix__mm_ldy(mm), .k = mm->K,
                  .blk_off = ix__align64(mm->K), .ncols = rw};
    const uint8_t *x0 = q ? (const uint8_t *)mm->scratch : (const uint8_t *)mm->x;
    t.xs = q ? ix__q8a_row_bytes(mm->K) : ix__mm_ldx(mm) * sizeof(float);
    size_t urw = (size_t)rw;
    const uint8_t *w = mm->w; /* row n at w + n * t.ws */
    /* the tiles prefetch IX__PF_TILES ahead of themselves; the range's own
     * first tiles are requested here, or every grab would start cold */
    size_t head = (size_t)IX__PF_TILES * urw < n1 - n0 ? (size_t)IX__PF_TILES * urw : n1 - n0;
    for (size_t o = 0; o < head * t.ws; o += 64) __builtin_prefetch(w + n0 * t.ws + o, 0, IX__PF_LOC);
    /* X rows per chunk: about IX__MM_XCHUNK_BYTES of X (f32 rows are 4x the
     * bytes of q8a rows), whole tiles; band mode keeps IX__MM_MCHUNK rows,
     * which its transpose is amortized over */
    size_t mchunk = IX__MM_MCHUNK;
    if (rx_max > 0) {
        size_t fit = IX__MM_XCHUNK_BYTES / t.xs / (size_t)rx_max * (size_t)rx_max;
        mchunk = fit < (size_t)rx_max ? (size_t)rx_max : fit < mchunk ? fit : mchunk;
    }
    for (size_t mc = 0; mc < mm->M; mc += mchunk) {
        size_t mend = mm->M - mc < mchunk ? mm->M : mc + mchunk;
        if (n1 - n0 < urw) {
            /* fewer than rw columns in all: one at a time, as a tile whose W
             * rows all alias it */
            ix__tile one = t;
            one.ws = 0;
            one.ncols = 1;
            for (size_t n = n0; n < n1; n++) {
                one.w = w + n * t.ws;
                one.y = mm->y + n;
                tile_rows(fns, rx_max, one, x0, mc, mend);
            }
            continue;
        }
        for (size_t n = n0; n < n1; n += urw) {
            size_t at = n1 - n >= urw ? n : n1 - urw;
            t.w = w + at * t.ws;
            t.y = mm->y + at;
            tile_rows(fns, rx_max, t, x0, mc, mend);
        }
    }
}

/* One grab of a run: rows [n0, n1) of W of matmul mm. */
typedef struct mm_item {
    uint32_t mm;
    size_t n0, n1;
} mm_item;

#define MM_MAX_ITEMS 192

typedef struct mm_run {
    const ix_kernel_table *kt;
    const ix_matmul *mms;  /* (n_mm) one input: x, M, K and scratch shared */
    size_t n_mm;
    const ix_matmul *q;    /* the matmul whose X rows to quantize, or NULL */
    mm_item items[MM_MAX_ITEMS];
    size_t n_items;
    _Atomic size_t q_next; /* X rows handed out for quantizing */
    _Atomic size_t q_done; /* X rows quantized */
    _Atomic size_t next;   /* items handed out */
    /* (nth) each thread's span word (see tl_steal), on its own line; NULL:
     * no stealing (more X rows than the lockstep tiles take, or too many
     * threads for the array) */
    mm_span *spans;
} mm_run;

#define MM_STEAL_THREADS 16 /* spans in a run's array */

/* bench/grab_bench: plan few-row runs as guided grabs without stealing */
static _Atomic bool g_guided;
void ix__kernels_matmul_guided(bool on) { atomic_store_explicit(&g_guided, on, memory_order_relaxed); }

#define MM_QROWS 4 /* X rows per quantize grab */

/* Guided grabs: each takes its share of the rows still left in the whole
 * run, so grabs are large while there is much left and small at the end,
 * where a thread that started a large one last would hold up the other
 * threads waiting at the run's end. The share is 1 / (2 nth), and 1 / nth
 * for a few X rows (decode, verification): there every grab starts the
 * lockstep tile's streams cold (0.6-1.0 us), and a TinyLlama layer's 27
 * grabs instead of 49 measured decode 1.01-1.02x faster as a fraction of
 * the bound. Where the walks are known to go in steps that others can
 * steal (g_stepped), no guiding is needed: one grab of 1 / nth of the run
 * each, split where a matmul ends, and stealing evens out the end (the
 * runs' wall time 0.96-1.02 of the guided grabs', median 0.989, 7 types;
 * docs/kernels.md, "Threading"). Multiples of
 * MM_MIN_GRAB rows, so that a grab is not mostly its cold start and
 * decode's lockstep tiles get whole runs of groups (64 = IX__PK_LOCK groups
 * of 16); a remainder narrower than that goes with the grab before it. */
#define MM_MIN_GRAB (IX__PK_LOCK * IX__PK)

/* [path][weight type]: that path's few-row walk over that type's packed
 * weights went in steps (pk_walk with tl_steal set). Learned from the walks
 * themselves, as only the paths' entries know where they go (the packed
 * walk, or a tile of their own: AVX2's K-quants, the generic path); set
 * once, never cleared. Only the plan reads it, never the bits. */
#define MM_STEP_TYPES 64
static _Atomic unsigned char g_stepped[IX__PATH_COUNT][MM_STEP_TYPES];

static bool mm_stepped(const mm_run *r) {
    if (!r->spans) return false;
    for (size_t i = 0; i < r->n_mm; i++) {
        unsigned t = (unsigned)r->mms[i].w_type;
        if (!r->mms[i].w_packed || t >= MM_STEP_TYPES ||
            !atomic_load_explicit(&g_stepped[r->kt->path][t], memory_order_relaxed))
            return false;
    }
    return true;
}

static void mm_plan(mm_run *r, int nth) {
    size_t left = 0;
    for (size_t i = 0; i < r->n_mm; i++) left += r->mms[i].N;
    const bool equal = mm_stepped(r);
    const size_t share = r->mms[0].M <= IX__PK_LOCK_RX ? (size_t)nth : 2 * (size_t)nth,
                 fixed = (left + (size_t)nth - 1) / (size_t)nth;
    r->n_items = 0;
    for (size_t i = 0; i < r->n_mm; i++) {
        const size_t N = r->mms[i].N;
        for (size_t n0 = 0; n0 < N;) {
            size_t c = equal ? fixed : (left + share - 1) / share;
            c = (c + MM_MIN_GRAB - 1) / MM_MIN_GRAB * MM_MIN_GRAB;
            /* no sliver after it, and room for one item per matmul still to come */
            if (N - n0 < c + MM_MIN_GRAB || r->n_items + (r->n_mm - i) >= MM_MAX_ITEMS) c = N - n0;
            r->items[r->n_items++] = (mm_item){(uint32_t)i, n0, n0 + c};
            n0 += c;
            left -= c;
        }
    }
}

/* Takes the back half of the unclaimed steps of some other thread's walk
 * that has 2 or more, into *st (the steps to walk, published by the walk);
 * false when no walk has. A compare-and-swap lost to a walk that moved on
 * looks at every walk again. */
static bool steal_one(mm_run *r, int ith, int nth, mm_steal *st) {
    for (bool again = true; again;) {
        again = false;
        for (int j = 1; j < nth; j++) {
            _Atomic uint64_t *victim = &r->spans[(ith + j) % nth].w;
            uint64_t v = atomic_load_explicit(victim, memory_order_relaxed);
            const uint64_t f = span_front(v), b = span_back(v), item = span_item(v);
            if (f + 2 > b) continue;
            const uint64_t nb = b - (b - f) / 2;
            if (!atomic_compare_exchange_strong_explicit(victim, &v, span_word(item, f, nb), memory_order_relaxed,
                                                         memory_order_relaxed)) {
                again = true;
                continue;
            }
            *st = (mm_steal){.span = st->span, .item = (uint32_t)item, .stolen = true, .f = (uint32_t)nb,
                             .b = (uint32_t)b};
            return true;
        }
    }
    return false;
}

/* Grab-based, not (ith, nth) slices: whoever shows up takes the next piece,
 * so a participant the OS has parked delays nothing it has not started. */
static void mm_run_fn(void *ctx, int ith, int nth) {
    mm_run *r = ctx;
    (void)ith;
    (void)nth;
    if (r->q) {
        const ix_matmul *mm = r->q;
        size_t ldx = ix__mm_ldx(mm), rb = ix__q8a_row_bytes(mm->K);
        ix__quantize_act_fn quantize = ix__act_quantizer(r->kt, mm->w_type);
        for (;;) {
            size_t m0 = atomic_fetch_add(&r->q_next, MM_QROWS);
            if (m0 >= mm->M) break;
            size_t m1 = m0 + MM_QROWS < mm->M ? m0 + MM_QROWS : mm->M;
            for (size_t m = m0; m < m1; m++) quantize(mm->x + m * ldx, (uint8_t *)mm->scratch + m * rb, mm->K);
            atomic_fetch_add(&r->q_done, m1 - m0); /* release: the rows are written */
        }
        /* every row handed out is being quantized by a running participant;
         * yield now and then in case the OS parked it (shared cores) */
        for (unsigned i = 1; atomic_load(&r->q_done) < mm->M; i++) {
            ix__cpu_relax();
            if ((i & 1023) == 0) sched_yield();
        }
    }
    mm_steal st = {.span = r->spans ? &r->spans[ith].w : NULL};
    tl_steal = st.span ? &st : NULL;
    for (;;) {
        size_t c = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
        if (c >= r->n_items) break;
        const mm_item *it = &r->items[c];
        if (st.span) { /* nothing to steal until the walk publishes its steps */
            st.item = (uint32_t)c;
            st.stepped = false;
            atomic_store_explicit(st.span, span_word(c, 0, 0), memory_order_relaxed);
        }
        ix__matmul_rows(r->kt, &r->mms[it->mm], it->n0, it->n1);
        unsigned t = (unsigned)r->mms[it->mm].w_type;
        if (st.stepped && t < MM_STEP_TYPES)
            atomic_store_explicit(&g_stepped[r->kt->path][t], 1, memory_order_relaxed);
    }
    /* out of grabs: split the others' walks while one has 2 steps left */
    while (st.span && steal_one(r, ith, nth, &st)) {
        const mm_item *it = &r->items[st.item];
        ix__matmul_rows(r->kt, &r->mms[it->mm], it->n0, it->n1);
    }
    tl_steal = NULL;
}

/* The matmuls of one input: same x (or x_ready), ldx, M, K and scratch. */
static ix_status matmul_n_check(const ix_matmul *mms, size_t n) {
    if (!mms || n == 0 || n > IX_KERNELS_MATMUL_MAX) return IX_ERR_INVALID;
    const void *scratch = NULL; /* the quantized members' shared q8a rows */
    for (size_t i = 0; i < n; i++) {
        ix_status st = ix_kernels_matmul_check(&mms[i]);
        if (st != IX_OK) return st;
        const ix_matmul *a = &mms[0], *b = &mms[i];
        if (b->x != a->x || b->M != a->M || b->K != a->K || ix__mm_ldx(b) != ix__mm_ldx(a))
            return IX_ERR_INVALID;
        if (ix__w_quantized(b->w_type)) {
            if (scratch && b->scratch != scratch) return IX_ERR_INVALID;
            scratch = b->scratch;
        }
    }
    return IX_OK;
}

static ix_status matmul_n_with(const ix_kernel_table *kt, const ix_matmul *mms, size_t n, ix_pool *pool) {
    ix_status st = matmul_n_check(mms, n);
    if (st != IX_OK || mms[0].M == 0) return st;
    /* quantized members whose X is quantized two ways: one run per way, the
     * float members with the first (runs in turn, so they share the scratch) */
    const ix_matmul *first = NULL;
    bool mixed = false;
    for (size_t i = 0; i < n; i++) {
        if (!ix__w_quantized(mms[i].w_type)) continue;
        if (!first) first = &mms[i];
        else if (!ix_kernels_same_act(first->w_type, mms[i].w_type)) mixed = true;
    }
    if (mixed) {
        for (size_t i = 0; i < n; i++)
            if (mms[i].x_ready) return IX_ERR_INVALID; /* the scratch holds one way */
        ix_matmul part[IX_KERNELS_MATMUL_MAX];
        for (int pass = 0; pass < 2; pass++) {
            size_t np = 0;
            for (size_t i = 0; i < n; i++) {
                bool q = ix__w_quantized(mms[i].w_type);
                bool same = q && ix_kernels_same_act(first->w_type, mms[i].w_type);
                if (pass == 0 ? same || !q : !same && q) part[np++] = mms[i];
            }
            if ((st = matmul_n_with(kt, part, np, pool)) != IX_OK) return st;
        }
        return IX_OK;
    }
    const ix_matmul *q = NULL; /* quantizes X for all of them */
    double macs = 0;
    for (size_t i = 0; i < n; i++) {
        macs += (double)mms[i].M * (double)mms[i].N * (double)mms[i].K;
        if (!q && ix__w_quantized(mms[i].w_type) && !mms[i].x_ready) q = &mms[i];
    }
    int nth = pool ? ix_pool_n_threads(pool) : 1;
    /* Below ~64k multiply-adds a handoff costs more than it saves. */
    if (nth > 1 && macs < 65536.0) nth = 1;
    /* A few rows (decode) are quantized here, before the handoff. */
    if (q && (nth == 1 || q->M * q->K <= 4 * 4096)) {
        matmul_quantize(kt, q, 0, 1);
        q = NULL;
    }
    if (nth == 1) {
        for (size_t i = 0; i < n; i++)
            if (mms[i].N) ix__matmul_rows(kt, &mms[i], 0, mms[i].N);
        return IX_OK;
    }
    mm_run *r = &(mm_run){.kt = kt, .mms = mms, .n_mm = n, .q = q};
    mm_span spans[MM_STEAL_THREADS];
    if (mms[0].M <= IX__PK_LOCK_RX && nth <= MM_STEAL_THREADS &&
        !atomic_load_explicit(&g_guided, memory_order_relaxed)) {
        for (int i = 0; i < nth; i++) atomic_init(&spans[i].w, 0);
        r->spans = spans;
    }
    mm_plan(r, nth);
    atomic_init(&r->q_next, 0);
    atomic_init(&r->q_done, 0);
    atomic_init(&r->next, 0);
    ix_pool_run_n(pool, nth, mm_run_fn, r);
    return IX_OK;
}

ix_status ix__kernels_matmul_with(const ix_kernel_table *kt, const ix_matmul *mm, ix_pool *pool) {
    return matmul_n_with(kt, mm, 1, pool);
}

ix_status ix_kernels_matmul(const ix_matmul *mm, ix_pool *pool) {
    return matmul_n_with(ix_kernels(), mm, 1, pool);
}

ix_status ix_kernels_matmul_n(const ix_matmul *mms, size_t n, ix_pool *pool) {
    return matmul_n_with(ix_kernels(), mms, n, pool);
}

/* ---- row ops -------------------------------------------------------------------- */
void ix_kernels_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps) {
    if (n) ix_kernels()->rmsnorm(y, x, w, n, eps);
}
void ix_kernels_layernorm(float *y, const float *x, const float *w, const float *b, size_t n, float eps) {
    if (!n) return;
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++) sq += ((double)x[i] - mean) * ((double)x[i] - mean);
    float inv = (float)(1.0 / sqrt(sq / (double)n + (double)eps)), m = (float)mean;
    for (size_t i = 0; i < n; i++) {
        float v = (x[i] - m) * inv;
        y[i] = v * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
    }
}

static inline float gelu1(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}
void ix_kernels_gelu(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = gelu1(x[i]);
}
void ix_kernels_gelu_mul(float *y, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = gelu1(gate[i]) * up[i];
}
void ix_kernels_softcap(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = ix__softcap(x[i], cap);
}

void ix_kernels_softmax(float *x, size_t n) {
    if (n) ix_kernels()->softmax(x, n);
}
void ix_kernels_silu_mul(float *y, const float *gate, const float *up, size_t n) {
    if (n) ix_kernels()->silu_mul(y, gate, up, n);
}
void ix_kernels_add(float *y, const float *a, const float *b, size_t n) {
    if (n) ix_kernels()->add(y, a, b, n);
}

/* ---- RoPE ------------------------------------------------------------------------ */
/* YaRN's pair range: the pair index whose wavelength makes n_rot_turns
 * rotations over the original context. */
static double yarn_corr_dim(const ix_rope_params *p, double n_rot_turns) {
    return (double)p->n_rot * log((double)p->n_ctx_orig / (n_rot_turns * 2.0 * M_PI)) /
           (2.0 * log((double)p->freq_base));
}

void ix__rope_angles(const ix_rope_params *p, int32_t pos, float *cs) {
    size_t half = p->n_rot / 2;
    /* theta_i = base^(-2i/n_rot): one pow, then a running product in double
     * (relative error ~i * 1e-16, far below f32 resolution). */
    double step = pow((double)p->freq_base, -2.0 / (double)p->n_rot), inv_freq = 1.0;
    double mscale = p->attn_factor > 0.0f ? (double)p->attn_factor : 1.0;
    bool yarn = p->ext_factor > 0.0f && p->n_ctx_orig > 0;
    double lo = 0, hi = 0;
    if (yarn) {
        lo = floor(yarn_corr_dim(p, p->beta_fast));
        hi = ceil(yarn_corr_dim(p, p->beta_slow));
        lo = lo > 0 ? lo : 0;
        hi = hi < (double)p->n_rot - 1 ? hi : (double)p->n_rot - 1;
        mscale *= 1.0 + 0.1 * log(1.0 / (double)p->freq_scale);
    }
    for (size_t i = 0; i < half; i++, inv_freq *= step) {
        double extrap = (double)pos * inv_freq;
        if (p->freq_factors) extrap /= (double)p->freq_factors[i];
        double theta = extrap * (double)p->freq_scale;
        if (yarn) {
            double y = ((double)i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
            double ramp = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * (double)p->ext_factor;
            theta = theta * (1.0 - ramp) + extrap * ramp;
        }
        cs[i] = (float)(cos(theta) * mscale);
        cs[half + i] = (float)(sin(theta) * mscale);
    }
}

ix_status ix_kernels_rope(float *x, size_t row_stride, const int32_t *pos, size_t n_tokens,
                          size_t n_heads, const ix_rope_params *p) {
    if (!p || (n_tokens && (!x || !pos))) return IX_ERR_INVALID;
    if (p->mode != IX_ROPE_NORM && p->mode != IX_ROPE_NEOX) return IX_ERR_INVALID;
    if (p->n_rot % 2 || p->n_rot > p->head_dim || !(p->freq_base > 0.0f)) return IX_ERR_INVALID;
    if (p->n_rot > IX_ROPE_MAX_ROT) return IX_ERR_UNSUPPORTED;
    if (n_tokens > 1 && row_stride < n_heads * p->head_dim) return IX_ERR_INVALID;
    if (p->ext_factor > 0.0f && (!(p->freq_scale > 0.0f) || !(p->beta_fast > 0.0f) ||
                                 !(p->beta_slow > 0.0f) || p->n_ctx_orig == 0))
        return IX_ERR_INVALID;
    if (p->n_rot == 0) return IX_OK;
    const ix_kernel_table *kt = ix_kernels();
    float cs[IX_ROPE_MAX_ROT]; /* (n_rot/2 cos, n_rot/2 sin) */
    for (size_t t = 0; t < n_tokens; t++) {
        ix__rope_angles(p, pos[t], cs);
        for (size_t h = 0; h < n_heads; h++)
            kt->rope_head(x + t * row_stride + h * p->head_dim, cs, p->n_rot, p->mode);
    }
    return IX_OK;
}

/* ---- attention accumulator --------------------------------------------------------- */
void ix_attn_init(ix_attn_acc *acc, float *o, size_t head_dim, float scale) {
    acc->max = -INFINITY;
    acc->sum = 0.0f;
    acc->scale = scale;
    acc->softcap = 0.0f;
    acc->head_dim = (uint32_t)head_dim;
    acc->o = o;
    if (o && head_dim) memset(o, 0, head_dim * sizeof *o);
}

ix_status ix_kernels_attn_add_group(ix_attn_acc *accs, const float *q, size_t nq, const void *k,
                                    size_t k_stride, const void *v, size_t v_stride, size_t n_tokens,
                                    ix_kv_dtype kv_type) {
    if (!accs || nq == 0) return IX_ERR_INVALID;
    size_t hd = accs[0].head_dim;
    for (size_t i = 0; i < nq; i++)
        if (!accs[i].o || accs[i].head_dim == 0 || accs[i].head_dim != hd) return IX_ERR_INVALID;
    if ((unsigned)kv_type >= IX_KV_DTYPE_COUNT) return IX_ERR_UNSUPPORTED;
    if (ix__kv_is_block(kv_type) &&
        (!ix_kv_dtype_row_bytes(kv_type, hd) || hd > IX__ATTN_Q_MAX_HD ||
         (n_tokens > 1 && (!ix_kv_dtype_row_bytes(kv_type, k_stride) ||
                           !ix_kv_dtype_row_bytes(kv_type, v_stride)))))
        return IX_ERR_UNSUPPORTED;
    if (n_tokens == 0) return IX_OK;
    if (!q || !k || !v) return IX_ERR_INVALID;
    if (n_tokens > 1 && (k_stride < hd || v_stride < hd)) return IX_ERR_INVALID;
    ix_kernels()->attn_add(accs, q, nq, k, k_stride, v, v_stride, n_tokens, kv_type);
    return IX_OK;
}

ix_status ix_kernels_attn_add(ix_attn_acc *acc, const float *q, const void *k, size_t k_stride,
                              const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype kv_type) {
    return ix_kernels_attn_add_group(acc, q, 1, k, k_stride, v, v_stride, n_tokens, kv_type);
}

void ix_attn_finish(const ix_attn_acc *acc, float *out) {
    float inv = acc->sum > 0.0f ? 1.0f / acc->sum : 0.0f;
    for (size_t i = 0; i < acc->head_dim; i++) out[i] = acc->o[i] * inv;
}
