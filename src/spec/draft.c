/*
 * The draft proposer: a second, smaller (or lower-precision) GGUF model with
 * the target's vocabulary guesses the next k tokens greedily. It has a paged
 * KV pool of its own and a forward context on the engine's worker pool, and
 * keeps, per sequence (keyed by ix_spec_seq.key), the tokens whose K/V its
 * pool holds. Each propose call runs over all speculating sequences at once:
 *
 *   1. sync: a sequence's draft K/V is cut back to the longest prefix it
 *      shares with the sequence's tokens (rejected guesses roll back) --
 *      ix_kv_seq_truncate;
 *   2. catch-up: one forward pass over every sequence's tokens not yet in
 *      the draft (a new sequence's prompt, then the accepted guesses and the
 *      target's own token), with a logits row at each sequence's last token;
 *      at most max_batch_tokens in one call, so a long prompt is prefilled
 *      in chunks over several steps (its sequence guesses once it is in);
 *   3. one forward pass per guess position over every sequence still
 *      guessing, each feeding its previous guess.
 *
 * Guesses are the draft's argmax: one token per place (q one-hot), so the
 * engine's verification by sampling and comparing stays exact (spec.h).
 * When the pool is full, the least recently used sequences of other steps
 * lose their draft K/V (recomputed if they come back); a sequence that still
 * does not fit guesses nothing this step. release (finish, cancel,
 * preemption) frees a sequence's blocks at once.
 */
#include <stdio.h>
#include <string.h>

#include "spec/spec_int.h"

typedef struct dseq {
    uint64_t key;
    int32_t kv_seq;
    ix_token *have; /* (cap) the tokens whose K/V is in the draft pool */
    int32_t n_have, cap;
    uint64_t last_use; /* the propose call that last saw it */
} dseq;

typedef struct draft {
    ix_model *m;
    ix_kv *kv;
    ix_model_ctx *ctx;
    int32_t n_vocab, max_batch, n_ctx; /* n_ctx: the draft's own context */
    dseq *seqs; /* (n_seqs, cap_seqs) */
    int32_t n_seqs, cap_seqs;
    uint64_t clock;
    /* one forward pass's batch, (max_batch) each */
    ix_token *b_tok;
    int32_t *b_pos, *b_seq, *b_q; /* b_q: the query a batch token belongs to */
    uint8_t *b_out;
    float *logits; /* (cap_rows, n_vocab) */
    int32_t cap_rows;
    uint8_t *live; /* (cap_live) per query: 1 while it is guessing */
    int32_t cap_live;
    ix_spec_stats st;
} draft;

static void draft_destroy(void *self) {
    draft *d = self;
    if (!d) return;
    for (int32_t i = 0; i < d->n_seqs; i++) ix_free(d->seqs[i].have);
    ix_free(d->seqs);
    ix_model_ctx_destroy(d->ctx);
    ix_kv_destroy(d->kv);
    ix_model_destroy(d->m);
    ix_free(d->b_tok);
    ix_free(d->b_pos);
    ix_free(d->b_seq);
    ix_free(d->b_q);
    ix_free(d->b_out);
    ix_free(d->logits);
    ix_free(d->live);
    ix_free(d);
}

/* The draft must speak the target's vocabulary token for token: a guess is
 * a token id, compared with the id the target samples. */
static ix_status check_vocab(const ix_model *target, const ix_model *dm, const char *path, ix_errbuf *err) {
    const ix_tokenizer *a = ix_model_tokenizer(target), *b = ix_model_tokenizer(dm);
    int32_t na = ix_tokenizer_n_vocab(a), nb = ix_tokenizer_n_vocab(b);
    int32_t va = ix_model_get_hparams(target)->n_vocab, vb = ix_model_get_hparams(dm)->n_vocab;
    if (na != nb || va != vb)
        return ix_errf(err, IX_ERR_INVALID,
                       "draft model %s has a vocabulary of %d tokens (%d logits), the target %d (%d logits): "
                       "the draft must share the target's vocabulary",
                       path, nb, vb, na, va);
    for (int32_t id = 0; id < na; id++) {
        ix_str pa = ix_tokenizer_piece(a, id), pb = ix_tokenizer_piece(b, id);
        if (pa.len != pb.len || (pa.len && memcmp(pa.ptr, pb.ptr, pa.len) != 0))
            return ix_errf(err, IX_ERR_INVALID,
                           "draft model %s: token %d is '%.*s', the target's '%.*s': the draft must share the "
                           "target's vocabulary",
                           path, id, (int)(pb.len > 40 ? 40 : pb.len), pb.ptr, (int)(pa.len > 40 ? 40 : pa.len),
                           pa.ptr);
    }
    return IX_OK;
}

static ix_status make_kv(draft *d, const ix_spec_params *p, const ix_spec_env *env, ix_errbuf *err) {
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(d->m, &kp);
    kp.dtype = env->kv_dtype;
    kp.block_size = env->kv_block_size > 0 ? env->kv_block_size : 16;
    kp.max_seq_len = env->n_ctx > 0 ? env->n_ctx + IX_SPEC_MAX_K : 0;
    kp.enable_prefix_cache = true; /* choices forked from one prompt share its draft K/V */
    if (p->draft_kv_mem_bytes > 0) {
        kp.mem_bytes = p->draft_kv_mem_bytes;
    } else { /* as many tokens as the target's pool, and a sequence's guesses */
        int64_t tokens = env->kv_tokens > 0 ? env->kv_tokens : 4096;
        kp.n_blocks = (tokens + IX_SPEC_MAX_K + kp.block_size - 1) / kp.block_size;
    }
    ix_status s = ix_kv_create(&kp, &d->kv, err);
    if (s == IX_ERR_UNSUPPORTED && kp.dtype != IX_KV_F16) { /* a block type the draft's head_dim refuses */
        kp.dtype = IX_KV_F16;
        s = ix_kv_create(&kp, &d->kv, err);
    }
    return s;
}

static ix_status draft_create(void **self, const ix_spec_params *p, const ix_spec_env *env, ix_errbuf *err) {
    *self = NULL;
    if (!env || !env->target)
        return ix_errf(err, IX_ERR_INVALID, "the draft proposer needs the target model (ix_spec_env.target)");
    draft *d = ix_calloc(1, sizeof *d);
    if (!d) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    ix_status s = ix_model_load(&d->m, p->draft_model, err);
    if (s != IX_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        draft_destroy(d);
        return ix_errf(err, s, "draft model: %s", msg);
    }
    if ((s = check_vocab(env->target, d->m, p->draft_model, err)) != IX_OK ||
        (s = make_kv(d, p, env, err)) != IX_OK) {
        draft_destroy(d);
        return s;
    }
    d->n_vocab = ix_model_get_hparams(d->m)->n_vocab;
    d->n_ctx = ix_model_get_hparams(d->m)->n_ctx_train;
    d->max_batch = env->max_batch_tokens > 0 ? env->max_batch_tokens : 512;
    if (d->max_batch < 2 * IX_SPEC_MAX_K) d->max_batch = 2 * IX_SPEC_MAX_K;
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = d->max_batch;
    cp.n_threads = env->n_threads;
    cp.pool = env->pool;
    if ((s = ix_model_ctx_create(&d->ctx, d->m, d->kv, &cp, err)) != IX_OK) {
        draft_destroy(d);
        return s;
    }
    size_t B = (size_t)d->max_batch;
    d->b_tok = ix_malloc(B * sizeof *d->b_tok);
    d->b_pos = ix_malloc(B * sizeof *d->b_pos);
    d->b_seq = ix_malloc(B * sizeof *d->b_seq);
    d->b_q = ix_malloc(B * sizeof *d->b_q);
    d->b_out = ix_malloc(B);
    if (!d->b_tok || !d->b_pos || !d->b_seq || !d->b_q || !d->b_out) {
        draft_destroy(d);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory for the draft's batch");
    }
    const ix_model_hparams *hp = ix_model_get_hparams(d->m);
    IX_LOGI("spec: draft model %s (%d layers, %d dims, %s), its own KV pool of %d blocks", p->draft_model,
            hp->n_layer, hp->n_embd, ix_dtype_name(hp->weight_type), (int)ix_kv_n_available(d->kv));
    *self = d;
    return IX_OK;
}

static dseq *find_seq(draft *d, uint64_t key) {
    for (int32_t i = 0; i < d->n_seqs; i++)
        if (d->seqs[i].key == key) return &d->seqs[i];
    return NULL;
}

static void drop_seq(draft *d, dseq *q) {
    ix_kv_seq_free(d->kv, q->kv_seq);
    ix_free(q->have);
    *q = d->seqs[--d->n_seqs];
}

static dseq *new_seq(draft *d, uint64_t key, uint64_t ns) {
    if (d->n_seqs == d->cap_seqs) {
        int32_t cap = d->cap_seqs ? 2 * d->cap_seqs : 16;
        dseq *ns_arr = ix_realloc(d->seqs, (size_t)cap * sizeof *ns_arr);
        if (!ns_arr) return NULL;
        d->seqs = ns_arr;
        d->cap_seqs = cap;
    }
    dseq *q = &d->seqs[d->n_seqs];
    memset(q, 0, sizeof *q);
    q->key = key;
    if (ix_kv_seq_create(d->kv, ns, &q->kv_seq) != IX_OK) return NULL;
    d->n_seqs++;
    return q;
}

/* Adds n tokens to a state's list of what its K/V holds. */
static bool have_push(dseq *q, const ix_token *toks, int32_t n) {
    if (q->n_have + n > q->cap) {
        int32_t cap = q->cap ? q->cap : 64;
        while (cap < q->n_have + n) cap *= 2;
        ix_token *h = ix_realloc(q->have, (size_t)cap * sizeof *h);
        if (!h) return false;
        q->have = h;
        q->cap = cap;
    }
    memcpy(q->have + q->n_have, toks, (size_t)n * sizeof *toks);
    q->n_have += n;
    return true;
}

/* Appends KV slots for n tokens of the state of key (and lists them). When
 * the pool is full, sequences not in this call give theirs back, least
 * recently used first. NULL: no room (nothing changed); else the state
 * (states move when others are dropped). */
static dseq *reserve(draft *d, uint64_t key, const ix_token *toks, int32_t n) {
    dseq *q = find_seq(d, key);
    for (;;) {
        ix_status s = ix_kv_seq_append(d->kv, q->kv_seq, n, toks);
        if (s == IX_OK) break;
        if (s != IX_FULL) return NULL;
        dseq *old = NULL;
        for (int32_t i = 0; i < d->n_seqs; i++)
            if (d->seqs[i].last_use != d->clock && (!old || d->seqs[i].last_use < old->last_use)) old = &d->seqs[i];
        if (!old) return NULL;
        drop_seq(d, old);
        q = find_seq(d, key);
    }
    if (!have_push(q, toks, n)) { /* keep list and slots in step */
        ix_kv_seq_truncate(d->kv, q->kv_seq, q->n_have);
        return NULL;
    }
    return q;
}

static int32_t argmax(const float *row, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* Runs the batch of T tokens (rows: those with an output flag) and commits
 * every sequence in it. */
static ix_status run_batch(draft *d, int32_t T, int32_t rows) {
    if (rows > d->cap_rows) {
        float *l = ix_realloc(d->logits, (size_t)rows * (size_t)d->n_vocab * sizeof *l);
        if (!l) return IX_ERR_NOMEM;
        d->logits = l;
        d->cap_rows = rows;
    }
    ix_batch b = {T, d->b_tok, d->b_pos, d->b_seq, d->b_out};
    uint64_t t0 = ix_time_ns();
    ix_status s = ix_model_forward(d->ctx, &b, d->logits);
    d->st.forward_ns += ix_time_ns() - t0;
    d->st.n_forward++;
    d->st.n_tokens += (uint64_t)T;
    for (int32_t t = 0; t < T; t++)
        if (t == T - 1 || d->b_seq[t + 1] != d->b_seq[t]) ix_kv_seq_commit(d->kv, d->b_seq[t], d->b_pos[t] + 1);
    return s;
}

static void put(draft *d, int32_t T, int32_t q, const dseq *st, int32_t pos, ix_token tok, bool out) {
    d->b_tok[T] = tok;
    d->b_pos[T] = pos;
    d->b_seq[T] = st->kv_seq;
    d->b_q[T] = q;
    d->b_out[T] = out;
}

/* Sync and catch-up (steps 1-2 above): sets live[q] for every query whose
 * tokens are all in the draft now, and its first guess. */
static ix_status catch_up(draft *d, ix_spec_seq *seqs, int32_t n) {
    int32_t T = 0, rows = 0;
    for (int32_t q = 0; q < n; q++) {
        d->live[q] = 0;
        ix_spec_seq *x = &seqs[q];
        /* a sequence past the draft's own context is not guessed (the target's may be longer) */
        if (x->n_tokens < 1 || x->k < 1 || (d->n_ctx > 0 && x->n_tokens + x->k > d->n_ctx)) continue;
        dseq *st = find_seq(d, x->key);
        if (!st && !(st = new_seq(d, x->key, x->ns))) continue;
        st->last_use = d->clock;
        int32_t lim = x->n_tokens - 1, m = 0; /* the last token is always fed: its logits guess */
        while (m < st->n_have && m < lim && st->have[m] == x->tokens[m]) m++;
        if (m < st->n_have) {
            if (ix_kv_seq_truncate(d->kv, st->kv_seq, m) != IX_OK) { /* start over */
                uint64_t key = st->key;
                drop_seq(d, st);
                if (!(st = new_seq(d, key, x->ns))) continue;
                st->last_use = d->clock;
                m = 0;
            } else {
                st->n_have = m;
            }
        }
        if (m == 0 && st->n_have == 0) { /* a new sequence: its prompt may be cached */
            int32_t n_cached = 0;
            if (ix_kv_seq_adopt_prefix(d->kv, st->kv_seq, x->tokens, lim, &n_cached) == IX_OK && n_cached > 0) {
                if (have_push(st, x->tokens, n_cached)) m = n_cached;
                else ix_kv_seq_truncate(d->kv, st->kv_seq, 0);
            }
        }
        int32_t want = x->n_tokens - m, take = want < d->max_batch - T ? want : d->max_batch - T;
        if (take <= 0 || !(st = reserve(d, x->key, x->tokens + m, take))) continue;
        for (int32_t j = 0; j < take; j++) put(d, T + j, q, st, m + j, x->tokens[m + j], false);
        T += take;
        if (take == want) { /* all in: its last token gives the first guess */
            d->b_out[T - 1] = 1;
            d->live[q] = 1;
            rows++;
        }
    }
    if (T == 0) return IX_OK;
    ix_status s = run_batch(d, T, rows);
    if (s != IX_OK) return s;
    for (int32_t t = 0, row = 0; t < T; t++) {
        if (!d->b_out[t]) continue;
        ix_spec_seq *x = &seqs[d->b_q[t]];
        x->out[0] = argmax(d->logits + (size_t)row++ * (size_t)d->n_vocab, d->n_vocab);
        x->n_out = 1;
    }
    return IX_OK;
}

/* Step 3: one forward pass per guess position j, over every query still
 * guessing, each feeding its guess j - 1. */
static ix_status guess_on(draft *d, ix_spec_seq *seqs, int32_t n) {
    for (int32_t j = 1; j < IX_SPEC_MAX_K; j++) {
        int32_t T = 0;
        for (int32_t q = 0; q < n && T < d->max_batch; q++) {
            ix_spec_seq *x = &seqs[q];
            if (!d->live[q] || x->n_out < j || x->k <= j) {
                d->live[q] = 0;
                continue;
            }
            dseq *st = reserve(d, x->key, &x->out[j - 1], 1);
            if (!st) {
                d->live[q] = 0;
                continue;
            }
            put(d, T++, q, st, st->n_have - 1, x->out[j - 1], true);
        }
        if (T == 0) break;
        ix_status s = run_batch(d, T, T);
        if (s != IX_OK) return s;
        for (int32_t t = 0; t < T; t++) {
            ix_spec_seq *x = &seqs[d->b_q[t]];
            x->out[x->n_out++] = argmax(d->logits + (size_t)t * (size_t)d->n_vocab, d->n_vocab);
        }
    }
    return IX_OK;
}

static ix_status draft_propose(void *self, ix_spec_seq *seqs, int32_t n) {
    draft *d = self;
    d->clock++;
    if (n > d->cap_live) {
        uint8_t *l = ix_realloc(d->live, (size_t)n);
        if (!l) return IX_ERR_NOMEM;
        d->live = l;
        d->cap_live = n;
    }
    ix_status s = catch_up(d, seqs, n);
    if (s == IX_OK) s = guess_on(d, seqs, n);
    if (s != IX_OK) { /* no guesses, and no draft state that may be half written */
        for (int32_t q = 0; q < n; q++) seqs[q].n_out = 0;
        while (d->n_seqs > 0) drop_seq(d, &d->seqs[d->n_seqs - 1]);
    }
    return s;
}

static void draft_release(void *self, uint64_t key) {
    draft *d = self;
    dseq *q = find_seq(d, key);
    if (q) drop_seq(d, q);
}

static void draft_get_stats(const void *self, ix_spec_stats *out) {
    const draft *d = self;
    *out = d->st;
    out->n_seqs = d->n_seqs;
    ix_kv_stats ks;
    ix_kv_get_stats(d->kv, &ks);
    out->kv_blocks_used = ks.n_blocks_used;
    out->kv_blocks_total = ks.n_blocks_total;
}

const ix_proposer_ops ix__proposer_draft = {
    .name = "draft",
    .kind = IX_SPEC_DRAFT,
    .wants_hidden = false,
    .create = draft_create,
    .destroy = draft_destroy,
    .propose = draft_propose,
    .release = draft_release,
    .get_stats = draft_get_stats,
};
