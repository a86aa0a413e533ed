/*
 * inferx kernels: the compute a Llama-family forward pass needs (matmul over
 * GGUF weight types, norms, RoPE, softmax, SiLU, paged attention), with a
 * generic C reference for every op and AVX2 / AVX-512 / NEON variants chosen
 * at run time from the CPU probe; and the persistent worker pool that splits those
 * ops over threads.
 *
 * Kernels never allocate, never lock and never fail on the hot path: the
 * ix_kernels_* wrappers validate their arguments and return ix_status, the
 * table entries (ix_kernel_table) trust them. Work is split by (ith, nth):
 * every kernel that a caller may run on several threads takes a range or an
 * (ith, nth) pair and writes only its own part of the output.
 *
 * Determinism: a matmul output does not depend on the thread count, the
 * rows a thread got, or the other rows of the batch (M), so a token's result
 * does not depend on what it is batched with. For Q8_0 / Q4_0 weights it is
 * moreover the same bits on every ISA path (one canonical per-block integer
 * dot and FMA order, docs/kernels.md); float weight types agree across paths
 * to rounding only.
 *
 * Thread safety: every function here may be called from any thread; the
 * active table is one atomic pointer set by ix_kernels_init(). An ix_pool has
 * one caller at a time (see below).
 */
#ifndef INFERX_KERNELS_H
#define INFERX_KERNELS_H

#include "inferx/core.h"
#include "inferx/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- worker pool ----------------------------------------------------------
 * n_threads - 1 persistent workers plus the calling thread. A run hands fn to
 * the workers by bumping one atomic word they spin on (then sleep on, after
 * ~spin_us of idleness), so back-to-back runs cost well under a microsecond
 * of handoff while the pool is hot. */
typedef struct ix_pool ix_pool;
typedef void (*ix_pool_fn)(void *ctx, int ith, int nth);

/* n_threads <= 0: every CPU this process may run on. *out is NULL on error. */
ix_status ix_pool_create(ix_pool **out, int n_threads);
/* Stops and joins the workers. NULL is a no-op. Not while a run is active. */
void ix_pool_destroy(ix_pool *pool);
int ix_pool_n_threads(const ix_pool *pool);
/* How long an idle worker (or a waiting caller) spins before it sleeps;
 * default 200 us. 0 sleeps at once (lowest CPU use, slowest handoff). */
void ix_pool_set_spin_us(ix_pool *pool, uint32_t spin_us);

/* Runs fn(ctx, ith, nth) once for every ith in [0, nth), ith 0 on the calling
 * thread, and returns when all have returned; their writes are visible to the
 * caller then. ix_pool_run uses nth = ix_pool_n_threads(); ix_pool_run_n a
 * smaller count (clamped to [1, n_threads]) and leaves the other workers
 * alone. pool NULL runs fn(ctx, 0, 1) inline.
 * One caller at a time: runs on one pool must not overlap (the engine thread
 * owns its pool); fn must not call ix_pool_run on the same pool. */
void ix_pool_run(ix_pool *pool, ix_pool_fn fn, void *ctx);
void ix_pool_run_n(ix_pool *pool, int nth, ix_pool_fn fn, void *ctx);
/* Inside fn only: waits until all nth participants of the current run reach
 * it (a spinning barrier; every participant must call it the same number of
 * times). Lets one run do "quantize, barrier, multiply" without a second
 * handoff. NULL pool or nth == 1: returns at once. */
void ix_pool_barrier(ix_pool *pool);

/* ---- scalar conversions (exact, portable) --------------------------------
 * Round to nearest even; subnormals, infinities and NaN handled exactly like
 * the F16C instructions do (a NaN stays NaN and is made quiet). */
float ix_fp16_to_fp32(uint16_t h);
uint16_t ix_fp32_to_fp16(float f);
float ix_bf16_to_fp32(uint16_t h);
uint16_t ix_fp32_to_bf16(float f);

/* ---- weight types --------------------------------------------------------
 * The kernels read F32, F16, BF16 and the quantized GGUF types Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS (block
 * layouts in docs/kernels.md): matmul, ix_kernels_dequant_row and
 * ix_kernels_quantize_row take all of them, and refuse any other type with
 * IX_ERR_UNSUPPORTED. Rows hold whole blocks (ix_dtype_block_size: 32, or
 * 256 for the K-quants and IQ4_XS). */
bool ix_kernels_has_type(ix_dtype t);
/* The types the kernels read, in type-code order: writes the first cap of
 * them to out (may be NULL when cap is 0) and returns how many there are. */
size_t ix_kernels_types(ix_dtype *out, size_t cap);

/* ---- matmul ---------------------------------------------------------------
 * Y[m][n] = sum_k X[m][k] * W[n][k]   (Y = X . W^T)
 * W is a GGUF weight tensor: row n holds K contiguous elements of w_type.
 * For the quantized types the activations are quantized once per matmul to
 * 8 bits with one f32 scale per 32 elements (the "q8a" format, see
 * docs/kernels.md) into caller-provided scratch, and every dot product is
 * integer per 32 elements (per 16-element sub-block scale inside them);
 * Q2_K's and Q3_K's activations share one scale per 256 and their integer
 * sums run over the 256 (ix_kernels_same_act).
 * F32 / F16 / BF16 weights are widened to f32 in registers (exact) and
 * multiplied with the f32 activations. */
#define IX_KERNELS_QBLOCK 32 /* elements per q8a block (and per Q8_0 / Q4_0 block) */

typedef struct ix_matmul {
    ix_dtype w_type;       /* a type ix_kernels_has_type() accepts */
    const void *w;         /* (N, K) in w_type */
    size_t w_stride_bytes; /* bytes from row n to row n+1; 0 = packed rows */
    const float *x;        /* (M, ldx): row m at x + m * ldx */
    size_t ldx;            /* 0 = K */
    float *y;              /* (M, ldy): row m at y + m * ldy, N written */
    size_t ldy;            /* 0 = N */
    size_t M, N, K;        /* K a multiple of w_type's block size */
    /* ix_kernels_matmul_scratch_bytes(w_type, M, K) bytes, 64-byte aligned;
     * NULL allowed when that is 0 (float weights). */
    void *scratch;
    /* true: scratch already holds x quantized by an earlier quantized matmul
     * with the same x, M and K whose weight type quantizes x the same way
     * (ix_kernels_same_act: e.g. the Q, K and V projections of one input);
     * the quantize phase is skipped and x may be NULL. Ignored for float
     * weight types, which read x directly. */
    bool x_ready;
    /* true: w is in the packed layout of ix_kernels_pack (w_stride_bytes
     * must be 0); for Q8_0 / Q4_0 the same bits as the GGUF row layout. */
    bool w_packed;
} ix_matmul;

/* ---- packed quantized weights --------------------------------------------
 * Q8_0 / Q4_0 weights with N % 16 == 0 can be repacked once, at load, into a
 * layout made for the integer dot kernels: per group of 16 rows and per
 * 32-element block, the 16 rows' code bytes are interleaved four at a time
 * (dword j of rows 0..15 side by side, one row per 32-bit lane) and the 16
 * fp16 scales are stored together. One vector load then feeds vpdpbusd for
 * 16 rows at once, with no transposes at run time and no per-row reductions
 * (docs/kernels.md). The bytes per group match the GGUF rows (plus padding
 * to 64 bytes). Every path reads it and gives the same bits as from the row
 * layout. */
#define IX_KERNELS_PACK_ROWS 16
/* F16 and BF16 weights pack the same way an element at a time: element k of
 * 16 rows side by side, so one vcvtph2ps (BF16: a widen and a shift) gives a
 * vector of 16 rows to FMA with a broadcast X element (float results agree
 * with the row layout to rounding).
 * Q4_K, Q5_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS pack as Q4_0's code
 * planes per 32 elements (the low 4 bits) plus planes of the high bits, Q2_K
 * and Q3_K as planes of 2-bit codes (plus Q3_K's third bits), with the
 * blocks' fp16 scales and their sub-block scales (and mins) unpacked to
 * bytes apart (Q4_K 2.8%, Q5_K 2.3%, Q3_K 3.6%, IQ4_XS 1.5% more bytes than
 * the rows, the others the same: no decode of scales, no transposes).
 * Whether (type, N, K) can be packed: N % 16 == 0 and F16 / BF16, or a
 * quantized type with K a multiple of its block. Every path reads every
 * packed form. */
bool ix_kernels_packable(ix_dtype type, size_t N, size_t K);
/* Whether the active kernels read type's packed form with tiles of their own
 * (so that a loader should pack it): F16 / BF16 / Q8_0 / Q4_0 everywhere,
 * the other quantized types on AVX-512 only (the other paths read them
 * through the generic code). */
bool ix_kernels_pack_pays(ix_dtype type);
/* Bytes of the packed form (0 when not packable). */
size_t ix_kernels_packed_bytes(ix_dtype type, size_t N, size_t K);
/* Packs W (N rows of K elements, w_stride_bytes apart; 0 = packed rows) into
 * dst (ix_kernels_packed_bytes, 64-byte aligned). Rows [n0, n1) only, n0 and
 * n1 multiples of 16, so callers can split the work over threads. */
ix_status ix_kernels_pack(ix_dtype type, const void *w, size_t w_stride_bytes, size_t N, size_t K,
                          size_t n0, size_t n1, void *dst);

/* Scratch needed for the quantized activations: 0 for float weight types. */
size_t ix_kernels_matmul_scratch_bytes(ix_dtype w_type, size_t M, size_t K);
/* Validates mm (types, sizes, strides, pointers, scratch alignment). */
ix_status ix_kernels_matmul_check(const ix_matmul *mm);
/* The two phases, for callers that schedule threads themselves: every
 * participant runs quantize(ith, nth), then after a barrier compute(ith, nth).
 * quantize splits rows of X, compute splits rows of W (output columns). Both
 * trust that ix_kernels_matmul_check(mm) returned IX_OK. */
void ix_kernels_matmul_quantize(const ix_matmul *mm, int ith, int nth);
void ix_kernels_matmul_compute(const ix_matmul *mm, int ith, int nth);
/* Both phases on pool (NULL: calling thread only), with work handed out in
 * small chunks of N so a core that is busy elsewhere does not hold the rest
 * back. Thread-safe as ix_pool_run. */
ix_status ix_kernels_matmul(const ix_matmul *mm, ix_pool *pool);
/* Up to IX_KERNELS_MATMUL_MAX matmuls of one input (the same x, ldx, M and
 * K, and for quantized weights the same scratch; e.g. the Q, K and V
 * projections, or gate and up) in one pool run: X is quantized once and the
 * W rows of all of them are handed out from one queue, so the threads meet
 * once instead of once per matmul. Each y gets the bits ix_kernels_matmul
 * gives it. The y ranges must not overlap x or each other. */
#define IX_KERNELS_MATMUL_MAX 4
ix_status ix_kernels_matmul_n(const ix_matmul *mms, size_t n, ix_pool *pool);
/* Whether matmuls over weight types a and b read X quantized the same way:
 * one scale per 32 elements, or (Q2_K, Q3_K) per 256 (false unless both are
 * quantized types).
 * A matmul_n whose members differ runs them as one run per way, each
 * quantizing X into the shared scratch in turn; x_ready trusts the scratch
 * to hold X quantized this matmul's way. */
bool ix_kernels_same_act(ix_dtype a, ix_dtype b);

/* Quantizes n values of src into a GGUF row of dst_type (n a multiple of
 * its block size). Reference quality (round to nearest, with the scale
 * searches of llama.cpp's reference quantizers), for tools and tests
 * (generic C only). */
ix_status ix_kernels_quantize_row(ix_dtype dst_type, const float *src, void *dst, size_t n);
/* The same with importance weights imp[n] (one per element of the row, each
 * finite and >= 0, e.g. an imatrix's mean squared activation per column):
 * every type's scale search then minimizes sum imp_i (x_i - q_i)^2 instead
 * of its plain weighting (for Q4_0 / Q5_0 among candidates that include the
 * plain scale, so never worse by that measure); Q8_0 and the float types
 * ignore them. IX_ERR_INVALID for a bad weight. */
ix_status ix_kernels_quantize_row_imp(ix_dtype dst_type, const float *src, void *dst, size_t n, const float *imp);
/* Widens n elements of a GGUF row (n a multiple of its block size) to f32,
 * e.g. for the embedding lookup. */
ix_status ix_kernels_dequant_row(ix_dtype src_type, const void *src, float *dst, size_t n);
void ix_kernels_fp16_to_fp32(const uint16_t *src, float *dst, size_t n);
void ix_kernels_fp32_to_fp16(const float *src, uint16_t *dst, size_t n);
void ix_kernels_bf16_to_fp32(const uint16_t *src, float *dst, size_t n);

/* ---- row ops (one row per call; callers split rows over threads) --------- */
/* y[i] = x[i] * w[i] / sqrt(mean(x^2) + eps); w NULL means all ones. y may be x. */
void ix_kernels_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps);
/* In place, numerically stable (max subtracted). -INFINITY entries get 0; a
 * row of only -INFINITY becomes all zeros. */
void ix_kernels_softmax(float *x, size_t n);
/* y[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). y may alias either. */
void ix_kernels_silu_mul(float *y, const float *gate, const float *up, size_t n);
/* y[i] = a[i] + b[i]. y may alias either. */
void ix_kernels_add(float *y, const float *a, const float *b, size_t n);
/* y[i] = (x[i] - mean(x)) / sqrt(var(x) + eps) * w[i] + b[i]; w or b NULL
 * means ones or zeros. y may be x. Mean and variance in double. */
void ix_kernels_layernorm(float *y, const float *x, const float *w, const float *b, size_t n, float eps);
/* GELU, tanh form (as GPT-2 and the GGUF reference compute it):
 * gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). y may be x. */
void ix_kernels_gelu(float *y, const float *x, size_t n);
/* y[i] = gelu(gate[i]) * up[i] (GeGLU). y may alias either. */
void ix_kernels_gelu_mul(float *y, const float *gate, const float *up, size_t n);
/* x[i] = cap * tanh(x[i] / cap), in place (Gemma 2's logit soft-capping). */
void ix_kernels_softcap(float *x, size_t n, float cap);

/* ---- RoPE -----------------------------------------------------------------
 * Rotates pair i (i < n_rot/2) of every head by pos * freq_scale * theta_i,
 * theta_i = freq_base^(-2i/n_rot) / freq_factors[i]. Angles are computed in
 * double precision, so long positions keep their accuracy. */
typedef enum ix_rope_mode {
    IX_ROPE_NORM = 0, /* adjacent pairs (x[2i], x[2i+1]): llama, mistral */
    IX_ROPE_NEOX = 1  /* split halves (x[i], x[i + n_rot/2]): neox, qwen2 */
} ix_rope_mode;

#define IX_ROPE_MAX_ROT 1024 /* n_rot limit (the angle table lives on the stack) */

typedef struct ix_rope_params {
    ix_rope_mode mode;
    uint32_t head_dim;         /* elements per head */
    uint32_t n_rot;            /* leading elements rotated: even, <= head_dim */
    float freq_base;           /* e.g. 10000 (Llama 2), 500000 (Llama 3) */
    float freq_scale;          /* linear position scaling; 1 = none */
    const float *freq_factors; /* (n_rot/2) frequency divisors, or NULL */
    /* YaRN: with ext_factor > 0, pair i's angle blends the interpolated
     * (freq_scale) and the original angle by a ramp over the pairs whose
     * wavelength falls between n_ctx_orig / beta_fast and n_ctx_orig /
     * beta_slow rotations, and the magnitude gains 1 + 0.1 ln(1/freq_scale).
     * attn_factor multiplies cos and sin (0 means 1): YaRN's and Phi-3
     * longrope's attention scaling. */
    float ext_factor, attn_factor, beta_fast, beta_slow;
    uint32_t n_ctx_orig;
} ix_rope_params;

/* x: (n_tokens, row_stride) floats; head h of token t is the head_dim floats
 * at x + t * row_stride + h * head_dim. pos: (n_tokens). In place. */
ix_status ix_kernels_rope(float *x, size_t row_stride, const int32_t *pos, size_t n_tokens,
                          size_t n_heads, const ix_rope_params *p);

/* ---- attention: online-softmax accumulator ------------------------------
 * For one query head: out = sum_t softmax_t(scale * q.k_t) * v_t over any
 * number of K/V chunks, read chunk by chunk so a caller can walk a paged KV
 * cache's block table:
 *     ix_attn_init(&acc, o_buf, head_dim, 1/sqrt(head_dim));
 *     for each block: ix_kernels_attn_add(&acc, q, k, ks, v, vs, n, IX_KV_F16);
 *     ix_attn_finish(&acc, out);
 * The accumulator keeps the running max, the running sum of exponentials and
 * an unnormalized output in o_buf (caller-owned, head_dim floats).
 * Under grouped-query attention several query heads share one K/V head;
 * ix_kernels_attn_add_group adds the same K/V rows to all of them in one
 * pass, which reads (and widens from f16) each row once instead of once per
 * query head. */
typedef struct ix_attn_acc {
    float max;    /* running max of the scaled scores; -INFINITY: none yet */
    float sum;    /* running sum of exp(score - max) */
    float scale;  /* multiplies q.k */
    float softcap; /* > 0: a score s becomes softcap * tanh(s / softcap) (set after init) */
    uint32_t head_dim;
    float *o;     /* (head_dim) sum of exp(score - max) * v, caller-owned */
} ix_attn_acc;

void ix_attn_init(ix_attn_acc *acc, float *o, size_t head_dim, float scale);
/* Adds n_tokens keys/values. k row t at (elements) k + t * k_stride, v row t
 * at v + t * v_stride, each head_dim elements of kv_type (core.h). Rows of
 * the block types (q8_0, q4_0, fp8_e4m3) are read in place, a block of 32
 * values at a time, never widened to a copy: their head_dim and strides must
 * be multiples of 16 and head_dim at most 1024 (IX_ERR_UNSUPPORTED
 * otherwise), and row t starts at byte t * ix_kv_dtype_row_bytes(kv_type,
 * stride) (a stride of whole rows, core.h).
 * Block types give the same bits on every ISA path (the query is quantized
 * to int8 blocks and every dot is an exact integer sum; src/kernels/attn_q.h);
 * float types agree across paths to rounding. */
ix_status ix_kernels_attn_add(ix_attn_acc *acc, const float *q, const void *k, size_t k_stride,
                              const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype kv_type);
/* The same for nq queries: accs[i] (all with the same head_dim) takes query
 * row q + i * head_dim (the heads of a group are adjacent in a Q row). Query
 * i's accumulator ends with the same bits as ix_kernels_attn_add(&accs[i],
 * ...) would give it alone: the group only shares loads. */
ix_status ix_kernels_attn_add_group(ix_attn_acc *accs, const float *q, size_t nq, const void *k,
                                    size_t k_stride, const void *v, size_t v_stride, size_t n_tokens,
                                    ix_kv_dtype kv_type);
/* One K or V row of n values (n a multiple of ix_kv_dtype_block) from f32
 * to dst (ix_kv_dtype_row_bytes(kv_type, n) bytes): how a model writes the
 * cache. Round to nearest; block types take scale max|x| / 127 (q8_0), the
 * signed max / -8 (q4_0, as GGUF) or max|x| / 448 (fp8_e4m3) per 32 values.
 * A row of a block type closes with a 16-value block when n % 32 == 16.
 * IX_ERR_INVALID for a bad n or type. Any thread. */
ix_status ix_kernels_kv_store(ix_kv_dtype kv_type, const float *src, void *dst, size_t n);
/* The reverse: n values of a row back to f32 (tests, tools). */
ix_status ix_kernels_kv_load(ix_kv_dtype kv_type, const void *src, float *dst, size_t n);

/* out (head_dim) = o / sum; zeros when nothing was added. out may be acc->o. */
void ix_attn_finish(const ix_attn_acc *acc, float *out);

/* ---- dispatch -------------------------------------------------------------
 * One table of function pointers per ISA path. Entries trust their arguments
 * (the ix_kernels_* wrappers above check them). */
typedef struct ix_kernel_table {
    ix_isa isa;
    const char *name; /* "generic", "avx2-vnni", "avx2", "avx512-vnni", "avx512-bw", "neon-dotprod", "neon" */

    void (*fp16_to_fp32)(const uint16_t *src, float *dst, size_t n);
    void (*fp32_to_fp16)(const float *src, uint16_t *dst, size_t n);
    void (*bf16_to_fp32)(const uint16_t *src, float *dst, size_t n);

    /* One row of k (k % 32 == 0) floats into one q8a row (layout in
     * kernels_int.h); the same bits on every path. */
    void (*quantize_act)(const float *x, void *dst, size_t k);
    /* The same with one scale per 256 (k % 256 == 0): the 8 q8a blocks of
     * each 256 share the largest |x| of all of them; the activations of the
     * weight types that sum per super-block (Q2_K, Q3_K). */
    void (*quantize_act_super)(const float *x, void *dst, size_t k);
    /* This table's column in the weight-type traits (kernels_int.h), which
     * hold the matmul of every weight type on every path. */
    unsigned path;

    void (*rmsnorm)(float *y, const float *x, const float *w, size_t n, float eps);
    void (*softmax)(float *x, size_t n);
    void (*silu_mul)(float *y, const float *gate, const float *up, size_t n);
    void (*add)(float *y, const float *a, const float *b, size_t n);
    /* One head in place: cs = (n_rot/2 cosines, then n_rot/2 sines). */
    void (*rope_head)(float *x, const float *cs, size_t n_rot, ix_rope_mode mode);
    /* nq >= 1 queries (ix_kernels_attn_add_group), any kv_type */
    void (*attn_add)(ix_attn_acc *accs, const float *q, size_t nq, const void *k, size_t k_stride,
                     const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype kv_type);
} ix_kernel_table;

/* Chooses the table for ix_cpu_isa() (INFERX_ISA / ix_cpu_force_isa honoured)
 * and makes it the active one. Idempotent; call again after
 * ix_cpu_force_isa() to switch. Wrappers call it on first use. */
ix_status ix_kernels_init(void);
/* The active path and its table (never NULL; initializes on first use). */
ix_isa ix_kernels_isa(void);
const ix_kernel_table *ix_kernels(void);
/* The table of one path, or NULL when it is not built in or this CPU cannot
 * run it. Tests use this to compare every path with the generic one. */
const ix_kernel_table *ix_kernels_table(ix_isa isa);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_KERNELS_H */
