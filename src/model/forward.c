/*
 * The forward pass over a ragged batch (llama2.c-style, top to bottom).
 *
 * All T tokens of the batch, from any number of sequences, go through each
 * layer together, so every weight matrix is read once per step whatever the
 * batch holds. Per layer: RMSNorm, Q/K/V projections (+ biases for qwen2),
 * RoPE at each token's own position, K/V written into the paged cache through
 * the token's block table, attention of each (token, head) over its sequence's
 * blocks up to its position (causal, and windowed when the model slides), the
 * output projection and the SwiGLU FFN with residuals. Logits are computed only
 * for the tokens the caller asks for.
 *
 * Since a token's K/V is written before any attention of that layer runs, a
 * prefill chunk attends to its own earlier tokens exactly like a decode step
 * attends to the cache: one code path, and a token's result depends only on
 * its sequence (batch invariance).
 */
#include <math.h>
#include <string.h>

#include "model/model_int.h"

struct ix_model_ctx {
    const ix_model *m;
    ix_kv *kv;
    ix_kv_layout lay;
    ix_pool *pool;
    int32_t max_tokens;
    ix_errbuf err;
    /* activations, sized once for max_tokens (T) */
    float *x;    /* (T, n_embd) residual stream */
    float *xb;   /* (T, n_embd) normed input of a sub-layer */
    float *q;    /* (T, n_head * head_dim) */
    float *k;    /* (T, n_head_kv * head_dim) */
    float *v;    /* (T, n_head_kv * head_dim) */
    float *att;  /* (T, n_head * head_dim) attention output */
    float *gate; /* (T, n_ff) */
    float *up;   /* (T, n_ff) */
    float *xo;   /* (T, n_embd) normed rows that produce logits */
    void *scratch; /* quantized activations for the int8 matmuls */
    const int32_t **tables; /* (T) each token's block table, for this forward */
    int32_t *out_rows;      /* (T) batch rows with logits */
};

ix_model_ctx_params ix_model_ctx_default_params(void) {
    return (ix_model_ctx_params){.max_batch_tokens = 512, .n_threads = 0};
}

static float *alloc_f32(size_t n) { return ix_aligned_alloc(64, (n ? n : 1) * sizeof(float)); }

void ix_model_ctx_destroy(ix_model_ctx *c) {
    if (!c) return;
    ix_pool_destroy(c->pool);
    float *bufs[] = {c->x, c->xb, c->q, c->k, c->v, c->att, c->gate, c->up, c->xo};
    for (size_t i = 0; i < IX_ARRAY_LEN(bufs); i++) ix_aligned_free(bufs[i]);
    ix_aligned_free(c->scratch);
    ix_free(c->tables);
    ix_free(c->out_rows);
    ix_free(c);
}

ix_status ix_model_ctx_create(ix_model_ctx **out, const ix_model *m, ix_kv *kv,
                              const ix_model_ctx_params *p, ix_errbuf *err) {
    *out = NULL;
    const ix_model_hparams *hp = &m->hp;
    if (p->max_batch_tokens <= 0 || p->max_batch_tokens > 65536)
        return ix_errf(err, IX_ERR_INVALID, "max_batch_tokens %d is outside [1, 65536]", p->max_batch_tokens);
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    if (lay.n_layer != hp->n_layer || lay.n_kv_head != hp->n_head_kv || lay.head_dim != hp->head_dim)
        return ix_errf(err, IX_ERR_INVALID,
                       "KV cache shape (%d layers, %d heads, dim %d) does not match the model (%d, %d, %d)",
                       lay.n_layer, lay.n_kv_head, lay.head_dim, hp->n_layer, hp->n_head_kv, hp->head_dim);
    if (lay.dtype != IX_KV_F32 && lay.dtype != IX_KV_F16)
        return ix_errf(err, IX_ERR_UNSUPPORTED, "KV cache type %s is not supported by attention",
                       ix_kv_dtype_name(lay.dtype));
    ix_status s = ix_kernels_init();
    if (s != IX_OK) return ix_errf(err, s, "kernel initialisation failed");

    ix_model_ctx *c = ix_calloc(1, sizeof *c);
    if (!c) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    c->m = m;
    c->kv = kv;
    c->lay = lay;
    c->max_tokens = p->max_batch_tokens;
    size_t T = (size_t)p->max_batch_tokens, E = (size_t)hp->n_embd,
           Q = (size_t)hp->n_head * (size_t)hp->head_dim, KV = (size_t)hp->n_head_kv * (size_t)hp->head_dim,
           F = (size_t)hp->n_ff;
    c->x = alloc_f32(T * E);
    c->xb = alloc_f32(T * E);
    c->q = alloc_f32(T * Q);
    c->k = alloc_f32(T * KV);
    c->v = alloc_f32(T * KV);
    c->att = alloc_f32(T * Q);
    c->gate = alloc_f32(T * F);
    c->up = alloc_f32(T * F);
    c->xo = alloc_f32(T * E);
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
    if (!c->x || !c->xb || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->xo ||
        !c->tables || !c->out_rows || (sb && !c->scratch)) {
        ix_model_ctx_destroy(c);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory for activations of %d tokens", p->max_batch_tokens);
    }
    if ((s = ix_pool_create(&c->pool, p->n_threads)) != IX_OK) {
        ix_model_ctx_destroy(c);
        return ix_errf(err, s, "cannot start %d worker threads", p->n_threads);
    }
    *out = c;
    return IX_OK;
}

const char *ix_model_ctx_errmsg(const ix_model_ctx *c) { return c->err.msg; }
ix_pool *ix_model_ctx_pool(ix_model_ctx *c) { return c->pool; }

/* ---- pieces ---------------------------------------------------------------- */

/* y (M, w->ne1) = x (M, w->ne0) . W^T */
static ix_status matmul(ix_model_ctx *c, const ix__weight *w, const float *x, size_t M, float *y,
                        bool x_ready) {
    ix_matmul mm = {
        .w_type = w->type, .w = w->data, .x = x, .y = y,
        .M = M, .N = (size_t)w->ne1, .K = (size_t)w->ne0,
        .scratch = c->scratch, .x_ready = x_ready,
    };
    ix_status s = ix_kernels_matmul(&mm, c->pool);
    if (s != IX_OK) return ix_errf(&c->err, s, "matmul of %s weights failed", ix_dtype_name(w->type));
    return IX_OK;
}

static void add_bias(float *y, const float *b, size_t M, size_t N) {
    if (!b) return;
    for (size_t i = 0; i < M; i++) ix_kernels_add(y + i * N, y + i * N, b, N);
}

/* Address of K (or V with v = true) of (layer, block, kv head, slot). */
static inline unsigned char *kv_addr(const ix_model_ctx *c, unsigned char *base, int32_t layer,
                                     int32_t block, int32_t head, int32_t slot, bool v) {
    const ix_kv_layout *l = &c->lay;
    return base + (size_t)block * l->block_stride_bytes + (size_t)layer * l->layer_stride_bytes +
           (v ? l->v_offset_bytes : 0) + (size_t)head * l->head_stride_bytes +
           (size_t)slot * l->token_stride_bytes;
}

static void store_kv(ix_model_ctx *c, const ix_batch *b, int32_t layer) {
    const ix_model_hparams *hp = &c->m->hp;
    unsigned char *base = ix_kv_data(c->kv);
    size_t hd = (size_t)hp->head_dim, KV = (size_t)hp->n_head_kv * hd;
    int32_t bs = c->lay.block_size;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t p = b->pos[t], block = c->tables[t][p / bs], slot = p % bs;
        for (int32_t h = 0; h < hp->n_head_kv; h++) {
            const float *ks = c->k + (size_t)t * KV + (size_t)h * hd;
            const float *vs = c->v + (size_t)t * KV + (size_t)h * hd;
            void *kd = kv_addr(c, base, layer, block, h, slot, false);
            void *vd = kv_addr(c, base, layer, block, h, slot, true);
            if (c->lay.dtype == IX_KV_F16) {
                ix_kernels_fp32_to_fp16(ks, kd, hd);
                ix_kernels_fp32_to_fp16(vs, vd, hd);
            } else {
                memcpy(kd, ks, hd * sizeof(float));
                memcpy(vd, vs, hd * sizeof(float));
            }
        }
    }
}

typedef struct attn_job {
    ix_model_ctx *c;
    const ix_batch *b;
    int32_t layer;
} attn_job;

/* Work items are (token, head) pairs, dealt round-robin so long and short
 * sequences of a ragged batch spread over the threads. */
static void attn_worker(void *ctx, int ith, int nth) {
    const attn_job *j = ctx;
    ix_model_ctx *c = j->c;
    const ix_batch *b = j->b;
    const ix_model_hparams *hp = &c->m->hp;
    const ix_kernel_table *kt = ix_kernels();
    unsigned char *base = ix_kv_data(c->kv);
    size_t hd = (size_t)hp->head_dim, Q = (size_t)hp->n_head * hd;
    int32_t bs = c->lay.block_size, group = hp->n_head / hp->n_head_kv;
    ix_dtype kv_type = c->lay.dtype == IX_KV_F16 ? IX_DTYPE_F16 : IX_DTYPE_F32;
    float scale = 1.0f / sqrtf((float)hd);
    int64_t n_items = (int64_t)b->n_tokens * hp->n_head;
    for (int64_t it = ith; it < n_items; it += nth) {
        int32_t t = (int32_t)(it / hp->n_head), h = (int32_t)(it % hp->n_head), kvh = h / group;
        int32_t p = b->pos[t];
        int32_t lo = hp->sliding_window > 0 && p - hp->sliding_window + 1 > 0 ? p - hp->sliding_window + 1 : 0;
        const float *q = c->q + (size_t)t * Q + (size_t)h * hd;
        float *o = c->att + (size_t)t * Q + (size_t)h * hd;
        ix_attn_acc acc;
        ix_attn_init(&acc, o, hd, scale);
        for (int32_t blk = lo / bs; blk <= p / bs; blk++) {
            int32_t first = blk * bs > lo ? 0 : lo - blk * bs;
            int32_t last = (blk + 1) * bs - 1 < p ? bs - 1 : p - blk * bs;
            int32_t id = c->tables[t][blk];
            const void *k = kv_addr(c, base, j->layer, id, kvh, first, false);
            const void *v = kv_addr(c, base, j->layer, id, kvh, first, true);
            kt->attn_add(&acc, q, k, hd, v, hd, (size_t)(last - first + 1), kv_type);
        }
        ix_attn_finish(&acc, o);
    }
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

/* ---- the pass ------------------------------------------------------------------- */

ix_status ix_model_forward(ix_model_ctx *c, const ix_batch *b, float *logits) {
    const ix_model *m = c->m;
    const ix_model_hparams *hp = &m->hp;
    int32_t n_out;
    ix_status s = check_batch(c, b, &n_out);
    if (s != IX_OK) return s;
    size_t T = (size_t)b->n_tokens, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim,
           Q = (size_t)hp->n_head * hd, KV = (size_t)hp->n_head_kv * hd, F = (size_t)hp->n_ff;

    /* x (T, E): embedding rows */
    uint64_t row_bytes;
    ix_dtype_row_bytes(m->tok_embd.type, E, &row_bytes);
    for (size_t t = 0; t < T; t++) {
        const unsigned char *row = (const unsigned char *)m->tok_embd.data + (size_t)b->tokens[t] * row_bytes;
        ix_kernels_dequant_row(m->tok_embd.type, row, c->x + t * E, E);
    }

    ix_rope_params rp = {
        .mode = hp->rope_mode, .head_dim = (uint32_t)hd, .n_rot = (uint32_t)hp->n_rot,
        .freq_base = hp->rope_freq_base, .freq_scale = hp->rope_freq_scale,
        .freq_factors = m->rope_factors,
    };
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const ix__layer *l = &m->layers[il];
        /* attention */
        for (size_t t = 0; t < T; t++)
            ix_kernels_rmsnorm(c->xb + t * E, c->x + t * E, l->attn_norm, E, hp->norm_eps);
        if ((s = matmul(c, &l->wq, c->xb, T, c->q, false)) != IX_OK) return s;
        if ((s = matmul(c, &l->wk, c->xb, T, c->k, l->wk.type == l->wq.type)) != IX_OK) return s;
        if ((s = matmul(c, &l->wv, c->xb, T, c->v, l->wv.type == l->wk.type && l->wk.type == l->wq.type)) != IX_OK)
            return s;
        add_bias(c->q, l->bq, T, Q);
        add_bias(c->k, l->bk, T, KV);
        add_bias(c->v, l->bv, T, KV);
        if ((s = ix_kernels_rope(c->q, Q, b->pos, T, (size_t)hp->n_head, &rp)) != IX_OK ||
            (s = ix_kernels_rope(c->k, KV, b->pos, T, (size_t)hp->n_head_kv, &rp)) != IX_OK)
            return ix_errf(&c->err, s, "rope failed");
        store_kv(c, b, il);
        attn_job job = {c, b, il};
        ix_pool_run(c->pool, attn_worker, &job);
        if ((s = matmul(c, &l->wo, c->att, T, c->xb, false)) != IX_OK) return s;
        for (size_t t = 0; t < T; t++) ix_kernels_add(c->x + t * E, c->x + t * E, c->xb + t * E, E);

        /* feed-forward: down(silu(gate(x)) * up(x)) */
        for (size_t t = 0; t < T; t++)
            ix_kernels_rmsnorm(c->xb + t * E, c->x + t * E, l->ffn_norm, E, hp->norm_eps);
        if ((s = matmul(c, &l->w_gate, c->xb, T, c->gate, false)) != IX_OK) return s;
        if ((s = matmul(c, &l->w_up, c->xb, T, c->up, l->w_up.type == l->w_gate.type)) != IX_OK) return s;
        for (size_t t = 0; t < T; t++) ix_kernels_silu_mul(c->gate + t * F, c->gate + t * F, c->up + t * F, F);
        if ((s = matmul(c, &l->w_down, c->gate, T, c->xb, false)) != IX_OK) return s;
        for (size_t t = 0; t < T; t++) ix_kernels_add(c->x + t * E, c->x + t * E, c->xb + t * E, E);
    }

    if (n_out == 0) return IX_OK;
    for (int32_t i = 0; i < n_out; i++)
        ix_kernels_rmsnorm(c->xo + (size_t)i * E, c->x + (size_t)c->out_rows[i] * E, m->out_norm, E,
                           hp->norm_eps);
    return matmul(c, &m->output, c->xo, (size_t)n_out, logits, false);
}
