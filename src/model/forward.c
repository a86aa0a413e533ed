/*
 * The forward pass over a ragged batch (llama2.c-style, top to bottom), for
 * every architecture of the table: the recipe in the hyperparameters (norm
 * kind, position encoding, FFN kind, wiring, scales, caps) picks each step;
 * absent optional tensors (biases, q/k norms, post-norms) are skipped.
 *
 * All T tokens of the batch, from any number of sequences, go through each
 * layer together, so every weight matrix is read once per step whatever the
 * batch holds. Per layer: norm, Q/K/V projections (+ biases, per-head q/k
 * norms), RoPE at each token's own position, K/V written into the paged cache
 * through the token's block table, attention of each (token, KV head) -- all
 * the query heads of its group at once -- over its sequence's blocks up to
 * its position (causal, windowed on the layers that slide, soft-capped where
 * the model says), the output projection, then the FFN either after the
 * attention's residual (sequential) or from the same normed input (parallel:
 * falcon), each sub-layer's output optionally normed again (gemma2) before it
 * joins the residual stream. Logits are computed only for the tokens the
 * caller asks for. Matmuls, attention and the per-token row ops between them
 * all run on the context's worker pool.
 *
 * Since a token's K/V is written before any attention of that layer runs, a
 * prefill chunk attends to its own earlier tokens exactly like a decode step
 * attends to the cache: one code path, and a token's result depends only on
 * its sequence (batch invariance).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "model/model_int.h"

/* The feed-forward block runs this many batch rows at a time: its gate and up
 * rows are the widest activations (2 x n_ff floats a token, 44 KiB for a
 * TinyLlama shape), so a 512-token step would keep 22 MiB of them resident
 * for good. The matmuls already pass over W once per 128 rows of X (48 for
 * float weights: IX__MM_MCHUNK, PK_MCHUNK), so the chunks add no weight
 * traffic (docs/model.md). */
#define FFN_CHUNK ((size_t)128)

struct ix_model_ctx {
    const ix_model *m;
    ix_kv *kv;
    ix_kv_layout lay;
    ix_pool *pool;
    bool own_pool; /* false: borrowed (ix_model_ctx_params.pool) */
    int32_t max_tokens;
    ix_errbuf err;
    /* activations, sized once for max_tokens (T) */
    float *x;    /* (T, n_embd) residual stream */
    float *xb;   /* (T, n_embd) normed input of a sub-layer */
    float *q;    /* (T, n_head * head_dim) */
    float *k;    /* (T, n_head_kv * head_dim) */
    float *v;    /* (T, n_head_kv * head_dim) */
    float *att;  /* (T, n_head * head_dim) attention output */
    float *gate; /* (min(T, FFN_CHUNK), n_ff) */
    float *up;   /* (min(T, FFN_CHUNK), n_ff) */
    float *xo;   /* (T, n_embd) normed rows that produce logits */
    float *ya;   /* (T, n_embd) attention output of a parallel block */
    /* tensor parallelism (docs/distributed.md): q, k, v, att, gate and up
     * hold this rank's heads and FFN rows only (n_q, n_kv, n_ff of the shard);
     * the all-gathers fill these (NULL alone) */
    float *att_full;    /* (T, n_head * head_dim) every rank's attention output */
    float *ffn_full;    /* (min(T, FFN_CHUNK), n_ff) every rank's FFN activation */
    float *part;        /* (T, max(shard n_embd, shard n_vocab)) this rank's columns of a matmul */
    int32_t *copies;    /* (cap_copies, 2) KV block copies since the last pass (rank 0) */
    int32_t n_copies, cap_copies;
    bool copies_lost;   /* more copies than cap_copies: the next pass fails */
    int32_t *plan_lens; /* (T) table entries each token reads (rank 0's plans) */
    /* pipeline parallelism: the outputs a stage ships (last stage: logits or
     * hidden rows of the whole step, each micro-batch's rows kept until the
     * sends are flushed) */
    float *pp_out;
    size_t pp_out_cap; /* floats */
    int32_t *mb_out;   /* (T) output rows of the current micro-batch */
    float *hid_out;    /* during a pass of ix_model_forward_out: the hidden rows beside the logits */
    void *scratch; /* quantized activations for the int8 matmuls */
    const int32_t **tables; /* (T) each token's block table, for this forward */
    int32_t *out_rows;      /* (T) batch rows with logits */
    ix_model_profile prof;
    ix_model_mm_observer observe; /* NULL: no observer (the hot path tests one pointer per matmul) */
    void *observe_user;
};

void ix_model_ctx_get_profile(const ix_model_ctx *c, ix_model_profile *out) { *out = c->prof; }

/* Adds the time since *t to *acc and restarts *t: one clock read per stage,
 * a few hundred per forward pass, against milliseconds of work. */
static void lap(uint64_t *acc, uint64_t *t) {
    uint64_t now = ix_time_ns();
    *acc += now - *t;
    *t = now;
}

/* Tensor parallelism: this shard holds part of every layer's heads and rows. */
static bool is_tp(const ix_model *m) { return m->comm && m->shard.n_ranks > 1; }
/* The rank that runs the engine: rank 0 of stage 0 (or the one process). */
static bool is_engine(const ix_model *m) { return !m->comm || (m->comm->rank == 0 && m->comm->stage == 0); }

ix_model_ctx_params ix_model_ctx_default_params(void) {
    return (ix_model_ctx_params){.max_batch_tokens = 512, .n_threads = 0, .pool = NULL};
}

static float *alloc_f32(size_t n) { return ix_aligned_alloc(64, (n ? n : 1) * sizeof(float)); }

void ix_model_ctx_destroy(ix_model_ctx *c) {
    if (!c) return;
    if (c->own_pool) ix_pool_destroy(c->pool);
    if (c->copies) ix_kv_set_copy_hook(c->kv, NULL, NULL);
    float *bufs[] = {c->x, c->xb, c->q, c->k, c->v, c->att, c->gate, c->up, c->xo, c->ya,
                     c->att_full, c->ffn_full, c->part};
    for (size_t i = 0; i < IX_ARRAY_LEN(bufs); i++) ix_aligned_free(bufs[i]);
    ix_aligned_free(c->scratch);
    ix_free(c->tables);
    ix_free(c->out_rows);
    ix_free(c->copies);
    ix_free(c->plan_lens);
    ix_free(c->mb_out);
    ix_aligned_free(c->pp_out);
    ix_free(c);
}

/* Rank 0 of a shard: the pool's copy-on-write copies, replayed on the other
 * ranks' pools before the next pass (kept in order: a later copy may read a
 * block an earlier one wrote). */
static void record_copy(void *user, int32_t dst, int32_t src) {
    ix_model_ctx *c = user;
    if (c->n_copies == c->cap_copies) {
        c->copies_lost = true;
        return;
    }
    c->copies[2 * c->n_copies] = dst;
    c->copies[2 * c->n_copies + 1] = src;
    c->n_copies++;
}

/* The other ranks make a pool of these blocks and a context for max_tokens;
 * rank 0 then records the pool's copies. */
static ix_status start_shards(ix_model_ctx *c, ix_errbuf *err) {
    const ix_model_comm *comm = c->m->comm;
    c->cap_copies = 2 * c->lay.n_blocks + 64;
    if (!(c->copies = ix_malloc((size_t)c->cap_copies * 2 * sizeof *c->copies)))
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(c->m, &kp);
    kp.dtype = c->lay.dtype;
    kp.block_size = c->lay.block_size;
    kp.n_blocks = c->lay.n_blocks;
    kp.enable_prefix_cache = false;
    ix_status s = comm->start(comm->user, &kp, c->max_tokens, err);
    if (s != IX_OK) return s;
    ix_kv_set_copy_hook(c->kv, record_copy, c);
    return IX_OK;
}

ix_status ix_model_ctx_create(ix_model_ctx **out, const ix_model *m, ix_kv *kv,
                              const ix_model_ctx_params *p, ix_errbuf *err) {
    *out = NULL;
    const ix_model_hparams *hp = &m->hp;
    if (p->max_batch_tokens <= 0 || p->max_batch_tokens > 65536)
        return ix_errf(err, IX_ERR_INVALID, "max_batch_tokens %d is outside [1, 65536]", p->max_batch_tokens);
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    const ix_model_shard_info *sh = &m->shard;
    if (lay.n_layer != sh->n_layer || lay.n_kv_head != sh->n_kv || lay.head_dim != hp->head_dim)
        return ix_errf(err, IX_ERR_INVALID,
                       "KV cache shape (%d layers, %d heads, dim %d) does not match the model (%d, %d, %d)",
                       lay.n_layer, lay.n_kv_head, lay.head_dim, sh->n_layer, sh->n_kv, hp->head_dim);
    if (ix_kv_dtype_block(lay.dtype) > 1 && hp->head_dim > 1024)
        return ix_errf(err, IX_ERR_UNSUPPORTED,
                       "KV cache type %s: attention takes head_dim up to 1024, the model has %d",
                       ix_kv_dtype_name(lay.dtype), hp->head_dim);
    ix_status s = ix_kernels_init();
    if (s != IX_OK) return ix_errf(err, s, "kernel initialisation failed");

    ix_model_ctx *c = ix_calloc(1, sizeof *c);
    if (!c) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    c->m = m;
    c->kv = kv;
    c->lay = lay;
    c->max_tokens = p->max_batch_tokens;
    size_t T = (size_t)p->max_batch_tokens, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim,
           Q = (size_t)hp->n_head * hd, F = (size_t)hp->n_ff, Ql = (size_t)sh->n_q * hd,
           KVl = (size_t)sh->n_kv * hd, Fl = (size_t)sh->n_ff;
    bool tp = is_tp(m);
    c->x = alloc_f32(T * E);
    c->xb = alloc_f32(T * E);
    c->q = alloc_f32(T * Ql);
    c->k = alloc_f32(T * KVl);
    c->v = alloc_f32(T * KVl);
    c->att = alloc_f32(T * Ql);
    size_t TF = T < FFN_CHUNK ? T : FFN_CHUNK; /* the FFN runs FFN_CHUNK rows at a time */
    c->gate = alloc_f32(TF * Fl);
    c->up = alloc_f32(TF * Fl);
    c->xo = alloc_f32(T * E);
    c->ya = alloc_f32(hp->parallel_blocks ? T * E : 0);
    c->att_full = tp ? alloc_f32(T * Q) : NULL;
    c->ffn_full = tp ? alloc_f32(TF * F) : NULL;
    size_t part = (size_t)(sh->n_embd > sh->n_vocab ? sh->n_embd : sh->n_vocab);
    c->part = tp ? alloc_f32(T * part) : NULL;
    c->plan_lens = m->comm ? ix_malloc(T * sizeof *c->plan_lens) : NULL;
    c->mb_out = ix_malloc(T * sizeof *c->mb_out);
    c->tables = ix_malloc(T * sizeof *c->tables);
    c->out_rows = ix_malloc(T * sizeof *c->out_rows);
    /* Scratch for the widest quantized input of any weight type present. */
    size_t K_max = E > Q ? E : Q;
    K_max = K_max > F ? K_max : F;
    size_t sb = 0;
    const ix_dtype types[] = {IX_DTYPE_F32, IX_DTYPE_F16, IX_DTYPE_BF16, IX_DTYPE_Q8_0, IX_DTYPE_Q4_0};
    for (size_t i = 0; i < IX_ARRAY_LEN(types); i++) {
        size_t b = ix_kernels_matmul_scratch_bytes(types[i], T, K_max);
        sb = b > sb ? b : sb;
    }
    c->scratch = sb ? ix_aligned_alloc(64, sb) : NULL;
    if (!c->x || !c->xb || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->xo || !c->ya ||
        !c->tables || !c->out_rows || !c->mb_out || (sb && !c->scratch) || (m->comm && !c->plan_lens) ||
        (tp && (!c->att_full || !c->ffn_full || !c->part))) {
        ix_model_ctx_destroy(c);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory for activations of %d tokens", p->max_batch_tokens);
    }
    if (p->pool) {
        c->pool = p->pool;
    } else if ((s = ix_pool_create(&c->pool, p->n_threads)) == IX_OK) {
        c->own_pool = true;
    } else {
        ix_model_ctx_destroy(c);
        return ix_errf(err, s, "cannot start %d worker threads", p->n_threads);
    }
    if (m->comm && is_engine(m) && (s = start_shards(c, err)) != IX_OK) {
        ix_model_ctx_destroy(c);
        return s;
    }
    *out = c;
    return IX_OK;
}

const char *ix_model_ctx_errmsg(const ix_model_ctx *c) { return c->err.msg; }
void ix_model_ctx_set_observer(ix_model_ctx *c, ix_model_mm_observer fn, void *user) {
    c->observe = fn;
    c->observe_user = user;
}
ix_pool *ix_model_ctx_pool(ix_model_ctx *c) { return c->pool; }

/* ---- pieces ---------------------------------------------------------------- */

/* Matmuls of one input x (M rows) in one pool run (ix_kernels_matmul_n):
 * y[i] (M, w[i]->ne1) = x (M, w[i]->ne0) . W[i]^T; the threads meet once, not
 * once per weight. */
static ix_status matmul_n(ix_model_ctx *c, const ix__weight *const *w, float *const *y, size_t n,
                          const float *x, size_t M) {
    if (c->observe)
        for (size_t i = 0; i < n; i++) c->observe(c->observe_user, w[i]->name, x, M, (size_t)w[i]->ne0);
    ix_matmul mms[IX_KERNELS_MATMUL_MAX];
    for (size_t i = 0; i < n; i++)
        mms[i] = (ix_matmul){
            .w_type = w[i]->type, .w = w[i]->data, .x = x, .y = y[i],
            .M = M, .N = (size_t)w[i]->ne1, .K = (size_t)w[i]->ne0,
            .scratch = c->scratch, .w_packed = w[i]->packed,
        };
    ix_status s = ix_kernels_matmul_n(mms, n, c->pool);
    if (s != IX_OK) return ix_errf(&c->err, s, "matmul of %s weights failed", ix_dtype_name(w[0]->type));
    return IX_OK;
}

static ix_status matmul(ix_model_ctx *c, const ix__weight *w, const float *x, size_t M, float *y) {
    return matmul_n(c, &w, &y, 1, x, M);
}

/* y (M, all ranks' columns) from part (M, this rank's): every rank gets it,
 * or only rank 0 with to_root. One process: part is y already. */
static ix_status gather(ix_model_ctx *c, const float *part, float *y, size_t M, ix__cols which, bool to_root) {
    const ix_model_comm *comm = c->m->comm;
    if (!is_tp(c->m)) return IX_OK;
    const int32_t *cols = c->m->cols[which];
    ix_status s = to_root ? comm->gather(comm->user, part, comm->rank == 0 ? y : NULL, M, cols)
                          : comm->allgather(comm->user, part, y, M, cols);
    if (s != IX_OK) return ix_errf(&c->err, s, "tensor-parallel exchange of %zu rows failed", M);
    return IX_OK;
}

/* y (M, N) = x . W^T where this rank holds rows `which` of W: it computes its
 * columns over the full reduction dimension, then the ranks exchange them. */
static ix_status matmul_gather(ix_model_ctx *c, const ix__weight *w, const float *x, size_t M, float *y,
                               ix__cols which, bool to_root) {
    if (!is_tp(c->m)) return matmul(c, w, x, M, y);
    ix_status s = matmul(c, w, x, M, c->part);
    return s != IX_OK ? s : gather(c, c->part, y, M, which, to_root);
}

/* Address of K (or V with v = true) of (layer, block, kv head, slot). */
static inline unsigned char *kv_addr(const ix_model_ctx *c, unsigned char *base, int32_t layer,
                                     int32_t block, int32_t head, int32_t slot, bool v) {
    const ix_kv_layout *l = &c->lay;
    layer -= c->m->shard.layer0; /* a pipeline stage's pool holds its layers only */
    return base + (size_t)block * l->block_stride_bytes + (size_t)layer * l->layer_stride_bytes +
           (v ? l->v_offset_bytes : 0) + (size_t)head * l->head_stride_bytes +
           (size_t)slot * l->token_stride_bytes;
}

/* ---- per-token row ops ------------------------------------------------------
 * The work between the matmuls (embedding rows, residual adds, RMSNorm, biases,
 * RoPE, K/V stores, SiLU * up) is independent per token, so one pool run per
 * step of a layer splits it by token ranges. A token's row goes through the
 * same calls whatever range it lands in, so the results do not depend on the
 * thread count. Batches too small to pay for waking the workers run on the
 * caller. */
typedef enum row_op {
    ROW_EMBED,      /* x = embedding row (+ position row) * embd_scale; xb = norm(x) of layer 0 */
    ROW_QKV,        /* q, k, v += biases; q/k head norms; RoPE on q and k; k, v into the KV cache */
    ROW_ATTN_RESID, /* sequential block: x += post_norm(xb + bo); xb = ffn_norm(x) */
    ROW_FFN_ACT,    /* gate = act(gate) * up, or up = gelu(up + b_up) */
    ROW_FFN_RESID,  /* x += post_norm(xb + b_down) (+ ya + bo when parallel); xb = next attn_norm(x) */
    ROW_OUT_NORM,   /* last layer's ROW_FFN_RESID on out rows r, then xo[i] = out_norm(x[r]) */
    ROW_STAGE_IN,   /* a pipeline stage's first layer: xb = attn_norm(x) of the x it received */
} row_op;

typedef struct row_job {
    ix_model_ctx *c;
    const ix_batch *b;
    row_op op;
    int32_t layer;
    const ix_rope_params *rope; /* QKV */
    size_t n_rows;
    _Atomic int status; /* first failure of a checked kernel call, else IX_OK */
} row_job;

/* Rows run on the pool from this much work on (row_work: about 0.2 ns per
 * unit on the test machine, e.g. add + RMSNorm of 2048 floats ~0.35 us, RoPE
 * of a TinyLlama token's Q and K ~1.1 us); a handoff costs ~1.2 us, which
 * two threads win back from ~2.5 us of work. */
#define ROWS_PARALLEL_MIN_WORK 16384

static void row_fail(row_job *j, ix_status s) {
    int ok = IX_OK;
    if (s != IX_OK) atomic_compare_exchange_strong(&j->status, &ok, (int)s);
}

static void store_kv(ix_model_ctx *c, const ix_batch *b, int32_t layer, size_t t0, size_t t1) {
    const ix_model_hparams *hp = &c->m->hp;
    unsigned char *base = ix_kv_data(c->kv);
    int32_t n_kv = c->m->shard.n_kv;
    size_t hd = (size_t)hp->head_dim, KV = (size_t)n_kv * hd;
    int32_t bs = c->lay.block_size;
    for (size_t t = t0; t < t1; t++) {
        int32_t p = b->pos[t], block = c->tables[t][p / bs], slot = p % bs;
        for (int32_t h = 0; h < n_kv; h++) {
            const float *ks = c->k + t * KV + (size_t)h * hd;
            const float *vs = c->v + t * KV + (size_t)h * hd;
            /* quantized on write: the cache holds only the dtype's rows */
            ix_kernels_kv_store(c->lay.dtype, ks, kv_addr(c, base, layer, block, h, slot, false), hd);
            ix_kernels_kv_store(c->lay.dtype, vs, kv_addr(c, base, layer, block, h, slot, true), hd);
        }
    }
}

static void add_bias(float *y, const float *bias, size_t t0, size_t t1, size_t n) {
    if (!bias) return;
    for (size_t t = t0; t < t1; t++) ix_kernels_add(y + t * n, y + t * n, bias, n);
}

/* The model's norm (RMS or LayerNorm with bias) of one row. */
static void norm_row(const ix_model_hparams *hp, float *y, const float *x, const float *w, const float *b,
                     size_t n) {
    if (hp->norm == IX_NORM_LAYER) ix_kernels_layernorm(y, x, w, b, n, hp->norm_eps);
    else ix_kernels_rmsnorm(y, x, w, n, hp->norm_eps);
}

/* Adds a sub-layer's output row o (+ bias, post-normed when the model has
 * post-norms) to the residual row x. o is overwritten. */
static void resid_add(const ix_model_hparams *hp, float *x, float *o, const float *bias,
                      const float *post_norm, size_t E) {
    if (bias) ix_kernels_add(o, o, bias, E);
    if (post_norm) norm_row(hp, o, o, post_norm, NULL, E);
    ix_kernels_add(x, x, o, E);
}

/* The end of layer l for batch row r: the FFN's output (in xb) and, in a
 * parallel block, the attention's (in ya) join the residual stream. */
static void ffn_resid_row(ix_model_ctx *c, const ix__layer *l, size_t r) {
    const ix_model_hparams *hp = &c->m->hp;
    size_t E = (size_t)hp->n_embd;
    float *x = c->x + r * E;
    if (hp->parallel_blocks) resid_add(hp, x, c->ya + r * E, l->bo, l->post_attn_norm, E);
    resid_add(hp, x, c->xb + r * E, l->b_down, l->post_ffn_norm, E);
}

static void rows_run(row_job *j, size_t r0, size_t r1) {
    ix_model_ctx *c = j->c;
    const ix_model *m = c->m;
    const ix_model_hparams *hp = &m->hp;
    const ix_model_shard_info *sh = &m->shard; /* q, k, v, gate, up: this rank's heads and rows */
    size_t E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim, Q = (size_t)sh->n_q * hd,
           KV = (size_t)sh->n_kv * hd, F = (size_t)sh->n_ff;
    const ix__layer *l = &m->layers[j->layer];
    switch (j->op) {
    case ROW_EMBED: {
        uint64_t row_bytes, pos_bytes = 0;
        ix_dtype_row_bytes(m->tok_embd.type, E, &row_bytes);
        if (m->pos_embd.data) ix_dtype_row_bytes(m->pos_embd.type, E, &pos_bytes);
        for (size_t t = r0; t < r1; t++) {
            float *x = c->x + t * E;
            const unsigned char *row =
                (const unsigned char *)m->tok_embd.data + (size_t)j->b->tokens[t] * row_bytes;
            row_fail(j, ix_kernels_dequant_row(m->tok_embd.type, row, x, E));
            if (m->pos_embd.data) { /* learned positions, through xb as scratch */
                row = (const unsigned char *)m->pos_embd.data + (size_t)j->b->pos[t] * pos_bytes;
                row_fail(j, ix_kernels_dequant_row(m->pos_embd.type, row, c->xb + t * E, E));
                ix_kernels_add(x, x, c->xb + t * E, E);
            }
            if (hp->embd_scale != 1.0f)
                for (size_t i = 0; i < E; i++) x[i] *= hp->embd_scale;
            norm_row(hp, c->xb + t * E, x, l->attn_norm, l->attn_norm_b, E);
        }
        break;
    }
    case ROW_QKV:
        add_bias(c->q, l->bq, r0, r1, Q);
        add_bias(c->k, l->bk, r0, r1, KV);
        add_bias(c->v, l->bv, r0, r1, KV);
        for (size_t t = r0; t < r1 && l->q_norm; t++)
            for (int32_t h = 0; h < sh->n_q; h++) {
                float *qh = c->q + t * Q + (size_t)h * hd;
                ix_kernels_rmsnorm(qh, qh, l->q_norm, hd, hp->norm_eps);
            }
        for (size_t t = r0; t < r1 && l->k_norm; t++)
            for (int32_t h = 0; h < sh->n_kv; h++) {
                float *kh = c->k + t * KV + (size_t)h * hd;
                ix_kernels_rmsnorm(kh, kh, l->k_norm, hd, hp->norm_eps);
            }
        if (hp->pos == IX_POS_ROPE) {
            row_fail(j, ix_kernels_rope(c->q + r0 * Q, Q, j->b->pos + r0, r1 - r0, (size_t)sh->n_q, j->rope));
            row_fail(j, ix_kernels_rope(c->k + r0 * KV, KV, j->b->pos + r0, r1 - r0, (size_t)sh->n_kv,
                                        j->rope));
        }
        store_kv(c, j->b, j->layer, r0, r1);
        break;
    case ROW_ATTN_RESID:
        for (size_t t = r0; t < r1; t++) {
            resid_add(hp, c->x + t * E, c->xb + t * E, l->bo, l->post_attn_norm, E);
            norm_row(hp, c->xb + t * E, c->x + t * E, l->ffn_norm, l->ffn_norm_b, E);
        }
        break;
    case ROW_FFN_ACT:
        for (size_t t = r0; t < r1; t++) {
            float *g = c->gate + t * F, *u = c->up + t * F;
            switch (hp->ffn) {
            case IX_FFN_SWIGLU: ix_kernels_silu_mul(g, g, u, F); break;
            case IX_FFN_GEGLU: ix_kernels_gelu_mul(g, g, u, F); break;
            case IX_FFN_GELU:
                if (l->b_up) ix_kernels_add(u, u, l->b_up, F);
                ix_kernels_gelu(u, u, F);
                break;
            }
        }
        break;
    case ROW_FFN_RESID: {
        const ix__layer *next = &m->layers[j->layer + 1];
        for (size_t t = r0; t < r1; t++) {
            ffn_resid_row(c, l, t);
            norm_row(hp, c->xb + t * E, c->x + t * E, next->attn_norm, next->attn_norm_b, E);
        }
        break;
    }
    case ROW_STAGE_IN:
        for (size_t t = r0; t < r1; t++) norm_row(hp, c->xb + t * E, c->x + t * E, l->attn_norm, l->attn_norm_b, E);
        break;
    case ROW_OUT_NORM:
        for (size_t i = r0; i < r1; i++) {
            size_t r = (size_t)c->out_rows[i];
            ffn_resid_row(c, l, r);
            norm_row(hp, c->xo + i * E, c->x + r * E, m->out_norm, m->out_norm_b, E);
        }
        break;
    }
}

static void rows_worker(void *ctx, int ith, int nth) {
    row_job *j = ctx;
    size_t r0 = j->n_rows * (size_t)ith / (size_t)nth,
           r1 = j->n_rows * (size_t)(ith + 1) / (size_t)nth;
    if (r0 < r1) rows_run(j, r0, r1);
}

/* Runs one row op over n_rows rows of row_work units each (see above). */
static ix_status rows(ix_model_ctx *c, const ix_batch *b, row_op op, int32_t layer,
                      const ix_rope_params *rope, size_t n_rows, size_t row_work) {
    row_job j = {.c = c, .b = b, .op = op, .layer = layer, .rope = rope, .n_rows = n_rows};
    atomic_init(&j.status, IX_OK);
    if (n_rows * row_work >= ROWS_PARALLEL_MIN_WORK) ix_pool_run(c->pool, rows_worker, &j);
    else if (n_rows) rows_run(&j, 0, n_rows);
    ix_status s = (ix_status)atomic_load(&j.status);
    if (s != IX_OK)
        return ix_errf(&c->err, s, "%s failed", op == ROW_QKV ? "rope" : "embedding lookup");
    return IX_OK;
}

/* ---- attention -------------------------------------------------------------
 * A work item is (token, KV head, slice of its query heads): the query heads
 * of a GQA group (adjacent in the Q row) go through the sequence's blocks
 * together, so each K/V row is read and widened once per group instead of
 * once per query head. The slice is the whole group unless the batch has too
 * few items to keep every thread busy (one decode token with few KV heads).
 * Threads claim items in small grabs from a shared counter, latest tokens
 * first (a prefill's costliest items), so a thread that the OS parks delays
 * only what it has claimed. */
#define ATTN_MAX_Q 8 /* query heads per item: their accumulators live on the stack */

typedef struct attn_job {
    ix_model_ctx *c;
    const ix_batch *b;
    int32_t layer;
    int32_t window;   /* this layer's sliding window; 0: none */
    int32_t qb;       /* query heads per item */
    int32_t n_slices; /* items per (token, KV head): ceil(group / qb) */
    int64_t n_items, grab;
    _Atomic int64_t next; /* first unclaimed item */
} attn_job;

/* Asks for the K and V rows of slots [first, last] of KV head kvh in a
 * block. A decode step finds its layer's rows cold (the weights streamed
 * since the last step evicted them), and a block is only 16 short rows per
 * head, too short a run for the hardware prefetchers: walking the blocks one
 * ahead of the reads measured attention 1.3-1.5x faster (docs/model.md). */
static void prefetch_kv_rows(const ix_model_ctx *c, unsigned char *base, int32_t layer, int32_t id, int32_t kvh,
                             int32_t first, int32_t last) {
    size_t n = (size_t)(last - first + 1) * c->lay.token_stride_bytes;
    for (int v = 0; v < 2; v++) {
        uintptr_t a = (uintptr_t)kv_addr(c, base, layer, id, kvh, first, v != 0);
        for (uintptr_t p = a & ~(uintptr_t)63; p < a + n; p += 64) __builtin_prefetch((const void *)p, 0, 3);
    }
}

/* The last slot of block blk (bs slots) that a query at position p reads. */
static inline int32_t block_last(int32_t blk, int32_t bs, int32_t p) {
    return (blk + 1) * bs - 1 < p ? bs - 1 : p - blk * bs;
}

static void attn_item(const attn_job *j, int64_t it) {
    ix_model_ctx *c = j->c;
    const ix_batch *b = j->b;
    const ix_model_hparams *hp = &c->m->hp;
    const ix_model_shard_info *sh = &c->m->shard; /* this rank's heads (all of them alone) */
    unsigned char *base = ix_kv_data(c->kv);
    size_t hd = (size_t)hp->head_dim, Q = (size_t)sh->n_q * hd;
    int32_t bs = c->lay.block_size, group = hp->n_head / hp->n_head_kv;
    int64_t per_token = (int64_t)sh->n_kv * j->n_slices;
    int32_t t = b->n_tokens - 1 - (int32_t)(it / per_token);
    int32_t kvh = (int32_t)(it % per_token) / j->n_slices,
            slice = (int32_t)(it % per_token) % j->n_slices;
    /* the query heads of KV head kvh held here: [g0, g1) counted from q0 */
    int32_t g = sh->kv0 + kvh;
    int32_t g0 = g * group > sh->q0 ? g * group - sh->q0 : 0;
    int32_t g1 = (g + 1) * group - sh->q0 < sh->n_q ? (g + 1) * group - sh->q0 : sh->n_q;
    int32_t h0 = g0 + slice * j->qb;
    if (h0 >= g1) return;
    int32_t nq = g1 - h0 < j->qb ? g1 - h0 : j->qb;
    int32_t p = b->pos[t];
    int32_t lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    const float *q = c->q + (size_t)t * Q + (size_t)h0 * hd; /* (nq, hd) */
    float *o = c->att + (size_t)t * Q + (size_t)h0 * hd;     /* (nq, hd) */
    ix_attn_acc accs[ATTN_MAX_Q];
    for (int32_t i = 0; i < nq; i++) {
        ix_attn_init(&accs[i], o + (size_t)i * hd, hd, hp->attn_scale);
        accs[i].softcap = hp->attn_softcap;
    }
    const ix_kernel_table *kt = ix_kernels();
    for (int32_t blk = lo / bs; blk <= p / bs; blk++) {
        int32_t first = blk * bs > lo ? 0 : lo - blk * bs, last = block_last(blk, bs, p);
        int32_t id = c->tables[t][blk];
        if (blk == lo / bs) prefetch_kv_rows(c, base, j->layer, id, kvh, first, last);
        if (blk < p / bs) /* the next block's rows, from its slot 0 */
            prefetch_kv_rows(c, base, j->layer, c->tables[t][blk + 1], kvh, 0, block_last(blk + 1, bs, p));
        const void *k = kv_addr(c, base, j->layer, id, kvh, first, false);
        const void *v = kv_addr(c, base, j->layer, id, kvh, first, true);
        kt->attn_add(accs, q, (size_t)nq, k, hd, v, hd, (size_t)(last - first + 1), c->lay.dtype);
    }
    for (int32_t i = 0; i < nq; i++) ix_attn_finish(&accs[i], o + (size_t)i * hd);
}

static void attn_worker(void *ctx, int ith, int nth) {
    (void)ith;
    (void)nth;
    attn_job *j = ctx;
    for (;;) {
        int64_t i0 = atomic_fetch_add_explicit(&j->next, j->grab, memory_order_relaxed);
        if (i0 >= j->n_items) return;
        int64_t i1 = i0 + j->grab < j->n_items ? i0 + j->grab : j->n_items;
        for (int64_t it = i0; it < i1; it++) attn_item(j, it);
    }
}

static void attention(ix_model_ctx *c, const ix_batch *b, int32_t layer) {
    const ix_model_hparams *hp = &c->m->hp;
    const ix_model_shard_info *sh = &c->m->shard;
    /* query heads per KV head here: a whole group, or fewer when a shard
     * holds part of one (more ranks than KV heads) */
    int32_t group = hp->n_head / hp->n_head_kv, nth = ix_pool_n_threads(c->pool);
    if (group > sh->n_q) group = sh->n_q;
    int64_t pairs = (int64_t)b->n_tokens * sh->n_kv;
    /* slices of at most ATTN_MAX_Q heads, split finer while there are fewer
     * than two items per thread */
    int32_t n_slices = (group + ATTN_MAX_Q - 1) / ATTN_MAX_Q;
    while (pairs * n_slices < 2 * (int64_t)nth && n_slices < group) n_slices *= 2;
    if (n_slices > group) n_slices = group;
    int32_t qb = (group + n_slices - 1) / n_slices;
    n_slices = (group + qb - 1) / qb;
    attn_job j = {.c = c, .b = b, .layer = layer, .qb = qb, .n_slices = n_slices,
                  .window = ix_model_layer_slides(hp, layer) ? hp->sliding_window : 0,
                  .n_items = pairs * n_slices};
    j.grab = j.n_items / (16 * (int64_t)nth) > 1 ? j.n_items / (16 * (int64_t)nth) : 1;
    atomic_init(&j.next, 0);
    if (j.n_items < 2) attn_worker(&j, 0, 1);
    else ix_pool_run(c->pool, attn_worker, &j);
}

static ix_status check_batch(ix_model_ctx *c, const ix_batch *b, int32_t *n_out) {
    const ix_model_hparams *hp = &c->m->hp;
    *n_out = 0;
    if (b->n_tokens <= 0 || b->n_tokens > c->max_tokens)
        return ix_errf(&c->err, IX_ERR_INVALID, "batch of %d tokens (this context takes 1..%d)", b->n_tokens,
                       c->max_tokens);
    int32_t bs = c->lay.block_size;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab)
            return ix_errf(&c->err, IX_ERR_RANGE, "batch token %d: id %d is outside the vocabulary of %d",
                           t, b->tokens[t], hp->n_vocab);
        int32_t n_tok = ix_kv_seq_n_tokens(c->kv, b->seq[t]);
        if (n_tok < 0)
            return ix_errf(&c->err, IX_ERR_INVALID, "batch token %d: no KV sequence %d", t, b->seq[t]);
        if (b->pos[t] < 0 || b->pos[t] >= n_tok)
            return ix_errf(&c->err, IX_ERR_RANGE,
                           "batch token %d: position %d has no KV slot (sequence %d holds %d)", t,
                           b->pos[t], b->seq[t], n_tok);
        if (hp->pos == IX_POS_LEARNED && b->pos[t] >= hp->n_ctx_train)
            return ix_errf(&c->err, IX_ERR_RANGE, "batch token %d: position %d is past the %d learned positions",
                           t, b->pos[t], hp->n_ctx_train);
        int32_t nb;
        const int32_t *table = ix_kv_seq_block_table(c->kv, b->seq[t], &nb);
        if (!table || table[b->pos[t] / bs] == IX_KV_NO_BLOCK)
            return ix_errf(&c->err, IX_ERR_STATE, "batch token %d: sequence %d has no block for position %d",
                           t, b->seq[t], b->pos[t]);
        c->tables[t] = table;
        if (b->output[t]) c->out_rows[(*n_out)++] = t;
    }
    return IX_OK;
}

/* A plan from rank 0 (other ranks): the same checks against this rank's
 * pool, which holds no sequences: the plan brings each token's table. */
static ix_status check_plan(ix_model_ctx *c, const ix_model_plan *pl, int32_t *n_out) {
    const ix_model_hparams *hp = &c->m->hp;
    const ix_batch *b = &pl->batch;
    int32_t bs = c->lay.block_size, nb = c->lay.n_blocks;
    *n_out = 0;
    if (b->n_tokens <= 0 || b->n_tokens > c->max_tokens)
        return ix_errf(&c->err, IX_ERR_INVALID, "plan of %d tokens (this context takes 1..%d)", b->n_tokens,
                       c->max_tokens);
    for (int32_t i = 0; i < 2 * pl->n_copies; i++)
        if (pl->copies[i] < 0 || pl->copies[i] >= nb)
            return ix_errf(&c->err, IX_ERR_RANGE, "plan block copy %d: block %d is outside the pool of %d", i / 2,
                           pl->copies[i], nb);
    for (int32_t t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab || b->pos[t] < 0 ||
            (hp->pos == IX_POS_LEARNED && b->pos[t] >= hp->n_ctx_train) || pl->n_blocks[t] != b->pos[t] / bs + 1)
            return ix_errf(&c->err, IX_ERR_RANGE, "plan token %d: id %d at position %d with %d table entries", t,
                           b->tokens[t], b->pos[t], pl->n_blocks[t]);
        for (int32_t i = 0; i < pl->n_blocks[t]; i++) {
            int32_t id = pl->tables[t][i];
            /* released window blocks are never read */
            if (id != IX_KV_NO_BLOCK && (id < 0 || id >= nb))
                return ix_errf(&c->err, IX_ERR_RANGE, "plan token %d: block %d is outside the pool of %d", t, id,
                               nb);
        }
        if (pl->tables[t][b->pos[t] / bs] == IX_KV_NO_BLOCK)
            return ix_errf(&c->err, IX_ERR_STATE, "plan token %d: no block for position %d", t, b->pos[t]);
        c->tables[t] = pl->tables[t];
        if (b->output[t]) c->out_rows[(*n_out)++] = t;
    }
    return IX_OK;
}

/* Rank 0: the step's plan to the other ranks, with the pool's copies since
 * the last one. */
static ix_status send_plan(ix_model_ctx *c, const ix_batch *b, bool hidden, int32_t n_micro) {
    if (c->copies_lost) {
        c->copies_lost = false;
        c->n_copies = 0;
        return ix_errf(&c->err, IX_ERR_INTERNAL, "more than %d KV block copies between two passes", c->cap_copies);
    }
    int32_t bs = c->lay.block_size;
    for (int32_t t = 0; t < b->n_tokens; t++) c->plan_lens[t] = b->pos[t] / bs + 1;
    ix_model_plan pl = {.batch = *b, .tables = c->tables, .n_blocks = c->plan_lens, .copies = c->copies,
                        .n_copies = c->n_copies, .hidden = hidden, .n_micro = n_micro};
    const ix_model_comm *comm = c->m->comm;
    ix_status s = comm->step(comm->user, &pl);
    c->n_copies = 0;
    if (s != IX_OK) return ix_errf(&c->err, s, "sending the step to the other ranks failed");
    return IX_OK;
}

/* ---- the pass ------------------------------------------------------------------- */

/* Makes a plan's block copies in this rank's pool (the K/V of this rank's
 * heads and layers, as rank 0's pool made them in its own). */
static void apply_copies(ix_model_ctx *c, const ix_model_plan *pl) {
    unsigned char *base = ix_kv_data(c->kv);
    size_t stride = c->lay.block_stride_bytes;
    for (int32_t i = 0; i < pl->n_copies; i++) {
        int32_t dst = pl->copies[2 * i], src = pl->copies[2 * i + 1];
        if (dst != src) memcpy(base + (size_t)dst * stride, base + (size_t)src * stride, stride);
    }
}

/* This shard's layers over batch b, xb holding the first one's normed input;
 * the last layer of the model leaves its residual to ROW_OUT_NORM. */
static ix_status run_layers(ix_model_ctx *c, const ix_batch *b, const ix_rope_params *rp, uint64_t *t) {
    const ix_model *m = c->m;
    const ix_model_hparams *hp = &m->hp;
    const ix_model_shard_info *sh = &m->shard;
    ix_model_profile *pf = &c->prof;
    size_t T = (size_t)b->n_tokens, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim,
           Q = (size_t)sh->n_q * hd, KV = (size_t)sh->n_kv * hd, F = (size_t)sh->n_ff;
    bool tp = is_tp(m);
    float *att = tp ? c->att_full : c->att; /* (T, n_head * hd): every head's output */
    ix_status s;
    for (int32_t il = sh->layer0; il < sh->layer0 + sh->n_layer; il++) {
        const ix__layer *l = &m->layers[il];
        /* attention; xb holds the normed residual */
        if ((s = matmul_n(c, (const ix__weight *const[]){&l->wq, &l->wk, &l->wv},
                          (float *const[]){c->q, c->k, c->v}, 3, c->xb, T)) != IX_OK)
            return s;
        lap(&pf->matmul_ns, t);
        if ((s = rows(c, b, ROW_QKV, il, rp, T, 2 * (Q + 2 * KV))) != IX_OK) return s;
        lap(&pf->rows_ns, t);
        attention(c, b, il);
        lap(&pf->attention_ns, t);
        if ((s = gather(c, c->att, att, T, IX__COLS_Q, false)) != IX_OK) return s;
        /* sequential: x += attention output, xb = ffn_norm(x); parallel: the
         * FFN reads the same xb and the attention output waits in ya */
        if (hp->parallel_blocks) {
            if ((s = matmul_gather(c, &l->wo, att, T, c->ya, IX__COLS_EMBD, false)) != IX_OK) return s;
        } else {
            if ((s = matmul_gather(c, &l->wo, att, T, c->xb, IX__COLS_EMBD, false)) != IX_OK) return s;
            lap(&pf->matmul_ns, t);
            if ((s = rows(c, b, ROW_ATTN_RESID, il, NULL, T, E)) != IX_OK) return s;
        }
        lap(hp->parallel_blocks ? &pf->matmul_ns : &pf->rows_ns, t);
        /* feed-forward: down(act(gate(xb)) * up(xb)) or down(gelu(up(xb))),
         * FFN_CHUNK rows at a time; the chunk's output replaces its own rows
         * of xb, which nothing reads again */
        for (size_t r0 = 0; r0 < T; r0 += FFN_CHUNK) {
            size_t n = T - r0 < FFN_CHUNK ? T - r0 : FFN_CHUNK;
            float *xc = c->xb + r0 * E;
            const float *ffn_in;
            if (l->w_gate.data) {
                if ((s = matmul_n(c, (const ix__weight *const[]){&l->w_gate, &l->w_up},
                                  (float *const[]){c->gate, c->up}, 2, xc, n)) != IX_OK)
                    return s;
                ffn_in = c->gate;
            } else {
                if ((s = matmul(c, &l->w_up, xc, n, c->up)) != IX_OK) return s;
                ffn_in = c->up;
            }
            lap(&pf->matmul_ns, t);
            if ((s = rows(c, b, ROW_FFN_ACT, il, NULL, n, F)) != IX_OK) return s;
            lap(&pf->rows_ns, t);
            if (tp) {
                if ((s = gather(c, ffn_in, c->ffn_full, n, IX__COLS_FF, false)) != IX_OK) return s;
                ffn_in = c->ffn_full;
            }
            if ((s = matmul_gather(c, &l->w_down, ffn_in, n, xc, IX__COLS_EMBD, false)) != IX_OK) return s;
            lap(&pf->matmul_ns, t);
        }
        /* x += the block's outputs, normed for the next layer (the last
         * layer's residual is needed only in the rows that give logits) */
        if (il + 1 < hp->n_layer && (s = rows(c, b, ROW_FFN_RESID, il, NULL, T, E)) != IX_OK) return s;
        lap(&pf->rows_ns, t);
    }
    return IX_OK;
}

enum { PP_TAG_ACT = 1, PP_TAG_OUT = 2 };

static ix_status pp_fail(ix_model_ctx *c, ix_status s, const char *what) {
    return ix_errf(&c->err, s, "pipeline stage %d: %s failed", c->m->comm->stage, what);
}

/* One micro-batch b through this rank's stage (S stages, this one st): the
 * embeddings on stage 0, or the residual rows from stage st - 1; the stage's
 * layers; then the rows on to stage st + 1, or, on the last stage, the
 * outputs of its n_out rows (c->out_rows) into out: logits (gathered to the
 * group's rank 0 under tensor parallelism) or hidden states, which the last
 * stage of a pipeline ships to the engine. */
static ix_status stage_pass(ix_model_ctx *c, const ix_batch *b, int32_t n_out, float *out, bool want_hidden,
                            const ix_rope_params *rp, uint64_t *t) {
    const ix_model *m = c->m;
    const ix_model_comm *comm = m->comm;
    const ix_model_hparams *hp = &m->hp;
    int32_t S = ix__n_stages(m), st = ix__stage(m);
    size_t T = (size_t)b->n_tokens, E = (size_t)hp->n_embd;
    ix_status s;
    if (st == 0) {
        /* x (T, E) = embeddings; xb = layer 0's attention norm of x */
        if ((s = rows(c, b, ROW_EMBED, 0, NULL, T, E)) != IX_OK) return s;
    } else {
        if ((s = comm->recv(comm->user, c->x, T * E, st - 1, PP_TAG_ACT)) != IX_OK)
            return pp_fail(c, s, "receiving activations");
        if ((s = rows(c, b, ROW_STAGE_IN, m->shard.layer0, NULL, T, E)) != IX_OK) return s;
    }
    lap(&c->prof.rows_ns, t);
    if ((s = run_layers(c, b, rp, t)) != IX_OK) return s;
    if (st + 1 < S) {
        if ((s = comm->send(comm->user, c->x, T * E, st + 1, PP_TAG_ACT)) != IX_OK)
            return pp_fail(c, s, "sending activations");
        return IX_OK;
    }
    if (n_out == 0) return IX_OK;
    if ((s = rows(c, b, ROW_OUT_NORM, hp->n_layer - 1, NULL, (size_t)n_out, E)) != IX_OK) return s;
    size_t width = want_hidden ? E : (size_t)hp->n_vocab;
    if (c->hid_out) memcpy(c->hid_out, c->xo, (size_t)n_out * E * sizeof *c->hid_out);
    if (want_hidden) {
        if (out) memcpy(out, c->xo, (size_t)n_out * E * sizeof *out);
    } else if ((s = matmul_gather(c, &m->output, c->xo, (size_t)n_out, out, IX__COLS_VOCAB, true)) != IX_OK) {
        return s;
    }
    lap(&c->prof.output_ns, t);
    if (S > 1 && comm->rank == 0 && (s = comm->send(comm->user, out, (size_t)n_out * width, 0, PP_TAG_OUT)) != IX_OK)
        return pp_fail(c, s, "sending outputs");
    return IX_OK;
}

/* Micro-batch mb of M over T tokens: rows [a, e). */
static void micro_range(int32_t T, int32_t M, int32_t mb, int32_t *a, int32_t *e) {
    *a = (int32_t)((int64_t)T * mb / M);
    *e = (int32_t)((int64_t)T * (mb + 1) / M);
}

/* The output rows (c->out_rows, ascending) from *k on that fall in [a, e),
 * relative to a, into mb_out; returns how many. */
static int32_t micro_outputs(ix_model_ctx *c, const int32_t *out_rows, int32_t n_out, int32_t *k, int32_t a,
                             int32_t e) {
    int32_t n = 0;
    while (*k < n_out && out_rows[*k] < e) c->mb_out[n++] = out_rows[(*k)++] - a;
    return n;
}

/* The engine's micro-batches per step: one per stage unless told, at most
 * one per token; 1 without a pipeline. */
static int32_t micro_count(const ix_model_ctx *c, int32_t T) {
    int32_t S = ix__n_stages(c->m);
    if (S == 1) return 1;
    int32_t M = c->m->comm->micro_batches > 0 ? c->m->comm->micro_batches : S;
    return M < T ? M : T;
}

/* Grows the last stage's output buffer to n floats. */
static bool pp_out_reserve(ix_model_ctx *c, size_t n) {
    if (n <= c->pp_out_cap) return true;
    float *p = alloc_f32(n);
    if (!p) return false;
    ix_aligned_free(c->pp_out);
    c->pp_out = p;
    c->pp_out_cap = n;
    return true;
}

/* The pass over b (rank 0 or one process: checked against the KV cache; the
 * other ranks: plan, checked against the pool). Rank 0 ends with the logits
 * or, with want_hidden, the final norm's hidden states; the other ranks with
 * neither (logits and hidden NULL).
 *
 * Pipeline parallelism (docs/distributed.md): the batch goes through in
 * micro-batches of contiguous tokens; each stage runs its layers on
 * micro-batch mb and sends its residual rows on without waiting, so stage
 * s + 1 works on mb while stage s works on mb + 1. A token's result does not
 * depend on the split (every kernel is batch invariant, and a sequence's
 * tokens in a later micro-batch read the K/V its earlier ones wrote, as a
 * chunked prefill does). x, xb, the tables and the output rows are pointed
 * at the micro-batch's rows while it runs. */
static ix_status forward(ix_model_ctx *c, const ix_batch *b, const ix_model_plan *plan, float *logits,
                         float *hidden, bool want_hidden) {
    const ix_model *m = c->m;
    const ix_model_hparams *hp = &m->hp;
    const ix_model_comm *comm = m->comm;
    if (!plan && !is_engine(m))
        return ix_errf(&c->err, IX_ERR_STATE, "rank %d of pipeline stage %d runs rank 0's plans only", comm->rank,
                       comm->stage);
    int32_t n_out;
    ix_status s = plan ? check_plan(c, plan, &n_out) : check_batch(c, b, &n_out);
    if (s != IX_OK) return s;
    int32_t T = b->n_tokens, M = plan ? plan->n_micro : micro_count(c, T);
    if (M < 1 || M > T || (M > 1 && ix__n_stages(m) == 1))
        return ix_errf(&c->err, IX_ERR_RANGE, "plan of %d tokens in %d micro-batches", T, M);
    if (plan) apply_copies(c, plan);
    else if (comm && (s = send_plan(c, b, want_hidden, M)) != IX_OK) return s;
    int32_t S = ix__n_stages(m), st = ix__stage(m);
    size_t E = (size_t)hp->n_embd, V = (size_t)hp->n_vocab, width = want_hidden ? E : V;
    /* hidden rows beside the logits (ix_model_forward_out): one stage only,
     * where the rows that give the logits are at hand (checked before any
     * rank was sent the plan would be better; the engine refuses Medusa over
     * a pipeline at create, so this is the library's guard) */
    if (hidden && !want_hidden && S > 1)
        return ix_errf(&c->err, IX_ERR_UNSUPPORTED, "hidden states beside the logits do not run pipeline-parallel");

    ix_rope_params rp = {
        .mode = hp->rope_mode, .head_dim = (uint32_t)hp->head_dim, .n_rot = (uint32_t)hp->n_rot,
        .freq_base = hp->rope_freq_base, .freq_scale = hp->rope_freq_scale,
        .freq_factors = m->rope_factors, .attn_factor = hp->rope_attn_factor,
        .ext_factor = hp->rope_scaling == IX_ROPE_SCALING_YARN ? 1.0f : 0.0f,
        .beta_fast = 32.0f, .beta_slow = 1.0f, .n_ctx_orig = (uint32_t)hp->rope_orig_ctx,
    };
    ix_model_profile *pf = &c->prof;
    pf->n_forward++;
    pf->n_tokens += (uint64_t)T;
    pf->n_logits += (uint64_t)n_out;
    uint64_t t = ix_time_ns();
    /* where the outputs go: the engine's buffer in one process (or a stage
     * that is both first and last); the last stage of a pipeline keeps the
     * step's outputs until its sends are flushed */
    float *dst = want_hidden ? hidden : logits, *out = dst;
    if (S > 1 && st == S - 1) {
        out = NULL;
        if (comm->rank == 0 && n_out) {
            if (!pp_out_reserve(c, (size_t)n_out * width)) return ix_errf(&c->err, IX_ERR_NOMEM, "out of memory");
            out = c->pp_out;
        }
    }
    float *x0 = c->x, *xb0 = c->xb;
    const int32_t **tab0 = c->tables;
    int32_t *out0 = c->out_rows;
    int32_t k = 0, o_at = 0;
    c->hid_out = hidden && !want_hidden ? hidden : NULL; /* S == 1: one micro-batch */
    for (int32_t mb = 0; mb < M && s == IX_OK; mb++) {
        int32_t a, e;
        micro_range(T, M, mb, &a, &e);
        int32_t n_mo = M == 1 ? n_out : micro_outputs(c, out0, n_out, &k, a, e);
        ix_batch sb = {.n_tokens = e - a, .tokens = b->tokens + a, .pos = b->pos + a, .seq = b->seq + a,
                       .output = b->output + a};
        c->x = x0 + (size_t)a * E;
        c->xb = xb0 + (size_t)a * E;
        c->tables = tab0 + a;
        c->out_rows = M == 1 ? out0 : c->mb_out;
        s = stage_pass(c, M == 1 ? b : &sb, n_mo, out ? out + (size_t)o_at * width : NULL, want_hidden, &rp, &t);
        o_at += n_mo;
    }
    c->x = x0;
    c->xb = xb0;
    c->tables = tab0;
    c->out_rows = out0;
    c->hid_out = NULL;
    if (s != IX_OK) return s;
    if (S > 1) {
        if ((s = comm->flush(comm->user)) != IX_OK) return pp_fail(c, s, "sending");
        /* the engine: each micro-batch's outputs from the last stage */
        if (is_engine(m) && n_out) {
            if (!dst) {
                if (!pp_out_reserve(c, (size_t)n_out * width)) return ix_errf(&c->err, IX_ERR_NOMEM, "out of memory");
                dst = c->pp_out;
            }
            k = o_at = 0;
            for (int32_t mb = 0; mb < M; mb++) {
                int32_t a, e;
                micro_range(T, M, mb, &a, &e);
                int32_t n_mo = micro_outputs(c, out0, n_out, &k, a, e);
                if (n_mo && (s = comm->recv(comm->user, dst + (size_t)o_at * width, (size_t)n_mo * width, S - 1,
                                            PP_TAG_OUT)) != IX_OK)
                    return pp_fail(c, s, "receiving outputs");
                o_at += n_mo;
            }
            lap(&pf->output_ns, &t);
        }
    }
    if (want_hidden || !logits || !is_engine(m)) return IX_OK;
    for (int32_t i = 0; i < n_out && (m->output_b || hp->final_softcap > 0); i++) {
        float *row = logits + (size_t)i * V;
        if (m->output_b) ix_kernels_add(row, row, m->output_b, V);
        if (hp->final_softcap > 0) ix_kernels_softcap(row, V, hp->final_softcap);
    }
    return IX_OK;
}

ix_status ix_model_forward(ix_model_ctx *c, const ix_batch *b, float *logits) {
    return forward(c, b, NULL, logits, NULL, false);
}

ix_status ix_model_forward_hidden(ix_model_ctx *c, const ix_batch *b, float *hidden) {
    return forward(c, b, NULL, NULL, hidden, true);
}

ix_status ix_model_forward_out(ix_model_ctx *c, const ix_batch *b, float *logits, float *hidden) {
    return forward(c, b, NULL, logits, hidden, false);
}

ix_status ix_model_output_head(const ix_model *m, ix_pool *pool, const float *x, size_t M, float *logits,
                               ix_errbuf *err) {
    const ix_model_hparams *hp = &m->hp;
    if (m->comm)
        return ix_errf(err, IX_ERR_UNSUPPORTED,
                       "the output head of a tensor- or pipeline-parallel shard is a slice of it or on another rank");
    if (M == 0) return IX_OK;
    const ix__weight *w = &m->output;
    size_t sb = ix_kernels_matmul_scratch_bytes(w->type, M, (size_t)w->ne0);
    void *scratch = sb ? ix_aligned_alloc(64, sb) : NULL;
    if (sb && !scratch) return ix_errf(err, IX_ERR_NOMEM, "out of memory for the output head's activations");
    ix_matmul mm = {.w_type = w->type, .w = w->data, .x = x, .y = logits, .M = M, .N = (size_t)w->ne1,
                    .K = (size_t)w->ne0, .scratch = scratch, .w_packed = w->packed};
    ix_status s = ix_kernels_matmul(&mm, pool);
    ix_aligned_free(scratch);
    if (s != IX_OK) return ix_errf(err, s, "output head matmul (%s) failed", ix_dtype_name(w->type));
    size_t V = (size_t)hp->n_vocab;
    for (size_t i = 0; i < M && (m->output_b || hp->final_softcap > 0); i++) {
        float *row = logits + i * V;
        if (m->output_b) ix_kernels_add(row, row, m->output_b, V);
        if (hp->final_softcap > 0) ix_kernels_softcap(row, V, hp->final_softcap);
    }
    return IX_OK;
}

ix_status ix_model_forward_plan(ix_model_ctx *c, const ix_model_plan *plan) {
    if (!c->m->comm || is_engine(c->m))
        return ix_errf(&c->err, IX_ERR_STATE, "a plan runs on a rank other than the engine's");
    return forward(c, &plan->batch, plan, NULL, NULL, plan->hidden);
}
