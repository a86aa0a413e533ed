/*
 * The engine: requests, the step loop and the thread around it. This is the
 * one generation loop: the server, the offline batch API and the CLI's run
 * and bench all drive it (the CLI on its own thread: ix_engine_run_until).
 *
 * A request is one ix_sched_item plus what the engine needs to run it: each
 * choice's full token list (prompt + generated, what a recompute re-prefills),
 * sampler and text stream (detokenizer + stop-string filter, stream.c).
 * Submissions and cancellations cross threads through one mutex-protected
 * list each (the engine thread holds the mutex only to splice them out), so
 * callers never wait on a step.
 *
 * A constrained request holds a reference to a cached compiled grammar
 * (gentry); its choices' matchers are cloned on the engine thread from the
 * entry's template matcher, which only the engine thread touches.
 *
 * One step: splice in submissions, apply cancellations, ask the scheduler for
 * a plan, append the planned KV slots, run one forward pass, commit K/V, then
 * sample every sequence whose tokens reached its end, and report.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "engine/engine_int.h"
#include "inferx/engine.h"
#include "inferx/gguf.h"
#include "inferx/kvstore.h"

/* A compiled constraint, cached by (kind, flags, text). refs counts the
 * requests holding it; an entry out of the cache (evicted, or never cached
 * because every slot was in use) is destroyed by its last request. */
typedef struct gentry {
    ix_constraint_kind kind;
    unsigned flags;
    char *text; /* (len) */
    size_t len;
    uint64_t hash;
    ix_grammar *g;
    ix_grammar_matcher *tmpl; /* start state; engine thread only, created on first use */
    int32_t refs;
    bool cached;
    uint64_t last_use;
} gentry;

#define GCACHE_SLOTS 16

/* Speculation: a choice's acceptance estimate starts at the engine's
 * running acceptance over every verified guess (SPEC_ALPHA_PRIOR before
 * any; it follows each outcome by SPEC_ALPHA_RUN_RATE, so short requests of
 * a proposer that keeps failing do not each probe afresh), moves by
 * SPEC_ALPHA_RATE towards each of its own guesses' outcomes (accepted 1,
 * rejected 0), and, while the choice does not speculate, drifts towards
 * SPEC_ALPHA_PRIOR by SPEC_ALPHA_DRIFT per step -- so a choice that stopped
 * speculating because its guesses failed tries again later. */
#define SPEC_ALPHA_PRIOR 0.5f
#define SPEC_ALPHA_RATE 0.2f
#define SPEC_ALPHA_RUN_RATE 0.05f
#define SPEC_ALPHA_DRIFT 0.05f
/* Steps of fewer tokens than this keep their measured time by size, for the
 * choice of k (ix_spec_choose_k_steps): batch 1 to a few sequences, each
 * with up to IX_SPEC_MAX_K guesses. */
#define SPEC_STEP_TAB 24

/* A proposer's key for choice c of request id. */
static uint64_t spec_key(uint64_t id, int32_t c) { return id * IX_SCHED_MAX_SEQS + (uint64_t)c; }

typedef struct req {
    ix_sched_item it; /* it.user == this */
    ix_request_callbacks cb;
    ix_sample_params sp;
    ix_logit_bias *bias;
    char **stops;
    size_t n_stops;
    ix_token *stop_ids;
    size_t n_stop_ids;
    bool ignore_eos;
    bool no_spec;
    uint64_t session_id, session_tenant; /* 0 id: no session */
    int64_t session_expires_ms;
    ix_token_vec toks[IX_SCHED_MAX_SEQS]; /* prompt + generated, per choice */
    ix_token *prompt;                     /* (it.n_prompt) the scheduler's copy: it never moves */
    ix_sampler *smp[IX_SCHED_MAX_SEQS];
    ix__text_stream *text[IX_SCHED_MAX_SEQS];
    gentry *gram;                           /* NULL: free decoding */
    ix_grammar_matcher *gm[IX_SCHED_MAX_SEQS]; /* per choice, created at its first sample */
    ix_finish_reason reasons[IX_SCHED_MAX_SEQS];
    /* speculation, per choice: the next decode's tokens (its own last
     * token, then it->n_draft[c] guesses) and the acceptance estimate */
    ix_token draft[IX_SCHED_MAX_SEQS][IX_SPEC_MAX_K + 1];
    float alpha[IX_SCHED_MAX_SEQS]; /* < 0: not set yet (the engine thread sets it) */
    /* a proposer that reads the target's hidden state (Medusa): per choice,
     * the final-norm state of the row whose logits gave its last token
     * (n_embd floats at hid + c * n_embd, made on first use), valid while
     * the choice has hid_n[c] tokens */
    float *hid;
    int32_t hid_n[IX_SCHED_MAX_SEQS];
    bool admitted_once;
    int32_t cached_prompt;
    uint64_t t_submit, t_sched, t_prefilled, t_first;
    double compute_ns; /* its share of the steps it took part in */
    char errmsg[256];
    bool err_invalid; /* errmsg names a fault of the request (its grammar) */
    struct req *next, *prev; /* pending list, then the active list */
} req;

struct ix_engine {
    const ix_model *m;
    ix_kvstore *disk;         /* the disk tier's store, or NULL */
    ix_kv_disk_stats disk_snap; /* under mu: as of the last publish */
    ix_kv_session_stats sess_snap; /* under mu: as of the last publish */
    int64_t next_expiry_ms;     /* engine thread: when sessions are next checked for expiry */
    double compute_ns_ewma;   /* forward time per token of prefill-sized steps */
    ix_engine_params p;
    ix_kv *kv;
    ix_model_ctx *ctx;
    ix_sched *sched;
    int32_t n_ctx, n_vocab, block_size;
    int64_t total_blocks;

    pthread_mutex_t mu; /* pending, cancels, session ops, stopping, snapshot */
    pthread_cond_t cv;
    pthread_cond_t ops_cv; /* a session op is done */
    struct session_op *ops; /* waiting for the engine thread */
    req *pending_head, *pending_tail;
    uint64_t *cancels;
    size_t n_cancels, cap_cancels;
    bool stopping;
    uint64_t next_id;
    ix_engine_stats snapshot;
    pthread_t thread;
    bool has_thread;

    /* engine thread only */
    req *active;
    ix_engine_stats stats;
    int32_t max_batch, max_out;
    ix_token *b_tok; /* (max_batch) */
    int32_t *b_pos, *b_seq;
    uint8_t *b_out;
    int32_t *w_rows; /* (max_batch) logits rows of each work entry of the step */
    float *logits;   /* (max_out, n_vocab) */
    float *hidden;   /* (max_out, n_embd) the logits rows' hidden states, when the proposer wants them; else NULL */
    int32_t n_embd;
    ix_proposer *prop;    /* NULL: no speculation */
    ix_spec_seq *spec_q;  /* (max_num_seqs) one step's proposal queries */
    double guess_ms;      /* what a guess costs the proposer (a draft's passes), running mean */
    double step_ms[SPEC_STEP_TAB]; /* [n] a step of n tokens without the proposer's time, running mean; 0: none yet */
    float alpha_run;      /* acceptance over every verified guess, running: a new choice's estimate */
    ix_buf text;     /* a token's text, on its way to on_token */
    uint32_t *mask;  /* (mask_words) a constrained choice's allowed tokens */
    size_t mask_words;

    /* constrained decoding: gmu guards the cache slots, refs and the vocab */
    pthread_mutex_t gmu;
    ix_grammar_vocab *gvocab; /* built on the first constrained request */
    gentry *gcache[GCACHE_SLOTS];
    uint64_t gclock;
};

const char *ix_finish_reason_name(ix_finish_reason r) {
    static const char *const names[] = {"none", "stop", "length", "abort", "error", "deadline"};
    return (unsigned)r < IX_ARRAY_LEN(names) ? names[r] : "?";
}

ix_request_params ix_request_default_params(void) {
    ix_request_params r;
    memset(&r, 0, sizeof r);
    r.sample = ix_sample_default_params();
    r.n = 1;
    return r;
}

ix_engine_params ix_engine_default_params(void) {
    ix_engine_params p;
    memset(&p, 0, sizeof p);
    p.sched = ix_sched_default_params();
    p.kv_dtype = IX_KV_F16;
    p.kv_mem_bytes = 256u << 20;
    p.kv_block_size = 16;
    p.kv_swap_blocks = -1;
    p.enable_prefix_cache = true;
    p.start_thread = true;
    p.spec = ix_spec_default_params();
    return p;
}

const ix_model *ix_engine_model(const ix_engine *e) { return e->m; }
uint64_t ix_engine_kv_pool_resident_bytes(const ix_engine *e) { return ix_kv_pool_resident_bytes(e->kv); }

ix_engine_params ix_engine_get_params(const ix_engine *e) {
    ix_engine_params p = e->p;
    if (p.kv_block_size <= 0) p.kv_block_size = 16;
    p.n_ctx = e->n_ctx;
    return p;
}

ix_pool *ix_engine_pool(ix_engine *e) { return ix_model_ctx_pool(e->ctx); }

/* ---- constraints -------------------------------------------------------------- */

static void gentry_destroy(gentry *ge) {
    if (!ge) return;
    ix_grammar_matcher_destroy(ge->tmpl);
    ix_grammar_destroy(ge->g);
    ix_free(ge->text);
    ix_free(ge);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static bool gentry_is(const gentry *ge, const ix_constraint *c, uint64_t hash) {
    return ge->hash == hash && ge->kind == c->kind && ge->flags == c->flags && ge->len == c->len &&
           (c->len == 0 || memcmp(ge->text, c->text, c->len) == 0);
}

/* Drops a request's reference (any thread). */
static void gentry_release(ix_engine *e, gentry *ge) {
    if (!ge) return;
    pthread_mutex_lock(&e->gmu);
    bool dead = --ge->refs == 0 && !ge->cached;
    pthread_mutex_unlock(&e->gmu);
    if (dead) gentry_destroy(ge);
}

static ix_status compile(const ix_constraint *c, ix_grammar **out, ix_errbuf *err) {
    switch (c->kind) {
    case IX_CONSTRAINT_GRAMMAR: return ix_grammar_parse(out, c->text ? c->text : "", c->len, err);
    case IX_CONSTRAINT_JSON_SCHEMA:
        return ix_grammar_from_json_schema(out, c->text ? c->text : "", c->len, c->flags, err);
    case IX_CONSTRAINT_JSON_OBJECT: return ix_grammar_json_object(out, c->flags, err);
    case IX_CONSTRAINT_NONE: break;
    }
    return ix_errf(err, IX_ERR_INVALID, "constraint kind %d is not one of ix_constraint_kind", (int)c->kind);
}

/* A referenced entry for c (compiled, or from the cache). Any thread. */
static ix_status gentry_get(ix_engine *e, const ix_constraint *c, gentry **out, ix_errbuf *err) {
    *out = NULL;
    if (c->kind == IX_CONSTRAINT_JSON_OBJECT && c->len) /* the text plays no part */
        return ix_errf(err, IX_ERR_INVALID, "a JSON-object constraint takes no text");
    if (c->len && !c->text) return ix_errf(err, IX_ERR_INVALID, "constraint text is NULL");
    uint64_t hash = fnv1a(fnv1a(0xcbf29ce484222325ull, &c->kind, sizeof c->kind), c->text ? c->text : "", c->len);
    pthread_mutex_lock(&e->gmu);
    if (!e->gvocab) {
        ix_status s = ix_grammar_vocab_create(&e->gvocab, ix_model_tokenizer(e->m), err);
        if (s != IX_OK) {
            pthread_mutex_unlock(&e->gmu);
            return s;
        }
    }
    for (int i = 0; i < GCACHE_SLOTS; i++) {
        gentry *ge = e->gcache[i];
        if (ge && gentry_is(ge, c, hash)) {
            ge->refs++;
            ge->last_use = ++e->gclock;
            pthread_mutex_unlock(&e->gmu);
            *out = ge;
            return IX_OK;
        }
    }
    pthread_mutex_unlock(&e->gmu);

    /* Compile outside the lock: a large schema takes milliseconds. */
    gentry *ge = ix_calloc(1, sizeof *ge);
    if (!ge || (c->len && !(ge->text = ix_malloc(c->len)))) {
        gentry_destroy(ge);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    if (c->len) memcpy(ge->text, c->text, c->len);
    ge->kind = c->kind;
    ge->flags = c->flags;
    ge->len = c->len;
    ge->hash = hash;
    ge->refs = 1;
    ix_status s = compile(c, &ge->g, err);
    if (s != IX_OK) {
        gentry_destroy(ge);
        return s;
    }
    pthread_mutex_lock(&e->gmu);
    int slot = -1;
    for (int i = 0; i < GCACHE_SLOTS; i++) {
        gentry *o = e->gcache[i];
        if (o && gentry_is(o, c, hash)) { /* compiled meanwhile by another caller */
            o->refs++;
            o->last_use = ++e->gclock;
            pthread_mutex_unlock(&e->gmu);
            gentry_destroy(ge);
            *out = o;
            return IX_OK;
        }
        if (!o) {
            if (slot < 0 || e->gcache[slot]) slot = i;
        } else if (o->refs == 0 && (slot < 0 || (e->gcache[slot] && o->last_use < e->gcache[slot]->last_use))) {
            slot = i;
        }
    }
    gentry *evicted = NULL;
    if (slot >= 0) {
        evicted = e->gcache[slot]; /* unreferenced, or NULL */
        e->gcache[slot] = ge;
        ge->cached = true;
        ge->last_use = ++e->gclock;
    }
    pthread_mutex_unlock(&e->gmu);
    gentry_destroy(evicted);
    *out = ge;
    return IX_OK;
}

ix_status ix_engine_check_constraint(ix_engine *e, const ix_constraint *c, ix_errbuf *err) {
    if (c->kind == IX_CONSTRAINT_NONE) return IX_OK;
    gentry *ge;
    ix_status s = gentry_get(e, c, &ge, err);
    if (s == IX_OK) gentry_release(e, ge);
    return s;
}

/* ---- requests ---------------------------------------------------------------- */

static void req_free(ix_engine *e, req *r) {
    if (!r) return;
    for (int i = 0; i < IX_SCHED_MAX_SEQS; i++) {
        ix_grammar_matcher_destroy(r->gm[i]);
        ix_token_vec_free(&r->toks[i]);
        ix_sampler_destroy(r->smp[i]);
        ix__text_stream_destroy(r->text[i]);
    }
    for (size_t i = 0; i < r->n_stops; i++) ix_free(r->stops[i]);
    ix_free(r->stops);
    ix_free(r->stop_ids);
    ix_free(r->bias);
    ix_free(r->hid);
    ix_free(r->prompt);
    gentry_release(e, r->gram);
    ix_free(r);
}

static ix_status req_build(ix_engine *e, const ix_request_params *rp, req **out, ix_errbuf *err) {
    const ix_tokenizer *tok = ix_model_tokenizer(e->m);
    int32_t n = rp->n > 0 ? rp->n : 1;
    *out = NULL;
    if (n > IX_SCHED_MAX_SEQS)
        return ix_errf(err, IX_ERR_INVALID, "n = %d: at most %d choices per request", n, IX_SCHED_MAX_SEQS);
    if (rp->n_prompt == 0 || !rp->prompt) return ix_errf(err, IX_ERR_INVALID, "the prompt is empty");
    if (rp->n_prompt + 1 > (size_t)e->n_ctx)
        return ix_errf(err, IX_ERR_TOO_LONG,
                       "the prompt is %zu tokens; the context holds %d (prompt + at least 1 generated)",
                       rp->n_prompt, e->n_ctx);
    for (size_t i = 0; i < rp->n_prompt; i++)
        if (rp->prompt[i] < 0 || rp->prompt[i] >= e->n_vocab)
            return ix_errf(err, IX_ERR_INVALID, "prompt token %zu (%d) is outside the vocabulary of %d", i,
                           rp->prompt[i], e->n_vocab);
    for (size_t i = 0; i < rp->n_stop_token_ids; i++)
        if (rp->stop_token_ids[i] < 0 || rp->stop_token_ids[i] >= e->n_vocab)
            return ix_errf(err, IX_ERR_INVALID, "stop token id %d is outside the vocabulary",
                           rp->stop_token_ids[i]);
    ix_status s = ix_sample_params_check(&rp->sample, e->n_vocab, err);
    if (s != IX_OK) return s;
    int32_t room = e->n_ctx - (int32_t)rp->n_prompt;
    int32_t max_new = rp->max_tokens > 0 && rp->max_tokens < room ? rp->max_tokens : room;
    int64_t blocks = ((int64_t)rp->n_prompt + max_new + e->block_size - 1) / e->block_size;
    if (blocks * n > e->total_blocks)
        return ix_errf(err, IX_ERR_TOO_LONG,
                       "the request needs up to %lld KV blocks (%zu prompt + %d new tokens x %d choices); "
                       "the cache holds %lld",
                       (long long)(blocks * n), rp->n_prompt, max_new, n, (long long)e->total_blocks);

    req *r = ix_calloc(1, sizeof *r);
    if (!r) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    if (rp->constraint.kind != IX_CONSTRAINT_NONE &&
        (s = gentry_get(e, &rp->constraint, &r->gram, err)) != IX_OK)
        goto fail;
    s = IX_ERR_NOMEM;
    r->cb = rp->cb;
    r->sp = rp->sample;
    r->ignore_eos = rp->ignore_eos;
    r->no_spec = rp->no_spec;
    r->session_id = rp->session_id;
    r->session_tenant = rp->session_tenant;
    r->session_expires_ms = rp->session_expires_ms;
    if (rp->sample.n_logit_bias) {
        r->bias = ix_malloc(rp->sample.n_logit_bias * sizeof *r->bias);
        if (!r->bias) goto oom;
        memcpy(r->bias, rp->sample.logit_bias, rp->sample.n_logit_bias * sizeof *r->bias);
        r->sp.logit_bias = r->bias;
    }
    if (rp->n_stop) {
        if (!(r->stops = ix_calloc(rp->n_stop, sizeof *r->stops))) goto oom;
        for (size_t i = 0; i < rp->n_stop; i++, r->n_stops++)
            if (!(r->stops[i] = ix_strdup(rp->stop[i] ? rp->stop[i] : ""))) goto oom;
    }
    if (rp->n_stop_token_ids) {
        if (!(r->stop_ids = ix_malloc(rp->n_stop_token_ids * sizeof *r->stop_ids))) goto oom;
        memcpy(r->stop_ids, rp->stop_token_ids, rp->n_stop_token_ids * sizeof *r->stop_ids);
        r->n_stop_ids = rp->n_stop_token_ids;
    }
    for (int32_t c = 0; c < n; c++) {
        ix_sample_params sp = r->sp;
        sp.seed = r->sp.seed + (uint64_t)c * 0x9e3779b97f4a7c15ull; /* distinct streams per choice */
        if ((s = ix_sampler_create(&r->smp[c], &sp, e->n_vocab, err)) != IX_OK) goto fail;
        if (ix_sampler_add_prompt(r->smp[c], rp->prompt, rp->n_prompt) != IX_OK) goto oom;
        if (ix__text_stream_create(&r->text[c], tok, (const char *const *)r->stops, r->n_stops) != IX_OK)
            goto oom;
        r->alpha[c] = -1.0f;
        for (size_t i = 0; i < rp->n_prompt; i++)
            if (ix_token_vec_push(&r->toks[c], rp->prompt[i]) != IX_OK) goto oom;
    }
    ix_sched_item *it = &r->it;
    it->user = r;
    it->priority = rp->priority;
    it->ns = rp->cache_ns;
    it->n_seqs = 1;
    it->n_choices = n;
    for (int i = 0; i < IX_SCHED_MAX_SEQS; i++) it->seqs[i] = -1;
    /* the scheduler's view of the prompt is a copy of its own, never moved:
     * choice 0's token vector grows (and may move) as it generates */
    if (!(r->prompt = ix_malloc(rp->n_prompt * sizeof *r->prompt))) goto oom;
    memcpy(r->prompt, rp->prompt, rp->n_prompt * sizeof *r->prompt);
    it->prompt = r->prompt;
    it->n_prompt = (int32_t)rp->n_prompt;
    it->max_new = max_new;
    r->t_submit = ix_time_ns();
    it->arrival_ns = r->t_submit;
    it->deadline_ns = rp->deadline_ms > 0 ? r->t_submit + (uint64_t)rp->deadline_ms * 1000000ull : 0;
    *out = r;
    return IX_OK;
oom:
    s = ix_errf(err, IX_ERR_NOMEM, "out of memory");
fail:
    req_free(e, r);
    return s;
}

static void list_unlink(req **head, req *r) {
    if (r->prev) r->prev->next = r->next; else *head = r->next;
    if (r->next) r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

static double ms_between(uint64_t a, uint64_t b) { return a && b > a ? (double)(b - a) / 1e6 : 0.0; }

static void publish(ix_engine *e);

/* Frees choice c's sequence; a session's first choice pins its blocks
 * first (the conversation's next turn starts with them). */
static void release_seq(ix_engine *e, req *r, int32_t c) {
    ix_sched_item *it = &r->it;
    if (it->seqs[c] < 0) return;
    if (c == 0 && r->session_id &&
        ix_kv_session_pin(e->kv, r->session_id, r->session_tenant, it->seqs[c], r->session_expires_ms) != IX_OK)
        IX_LOGW("engine: session not pinned: %s", ix_kv_errmsg(e->kv));
    ix_kv_seq_free(e->kv, it->seqs[c]);
    it->seqs[c] = -1;
}

/* Reports and releases a request (engine thread). */
static void req_finish(ix_engine *e, req *r, ix_finish_reason why, const char *msg) {
    ix_sched_item *it = &r->it;
    if (it->state != IX_SCHED_DONE) ix_sched_remove(e->sched, it);
    for (int i = 0; i < IX_SCHED_MAX_SEQS; i++) release_seq(e, r, i);
    for (int c = 0; c < it->n_choices; c++) ix_proposer_release(e->prop, spec_key(it->id, c));
    ix_finish_info info;
    memset(&info, 0, sizeof info);
    info.id = it->id;
    info.n_choices = it->n_choices;
    for (int c = 0; c < it->n_choices; c++) {
        info.reasons[c] = r->reasons[c] != IX_FINISH_NONE ? r->reasons[c] : why;
        info.usage.completion_tokens += it->n_generated[c];
    }
    info.reason = info.reasons[0];
    info.usage.prompt_tokens = it->n_prompt;
    info.usage.cached_prompt_tokens = r->cached_prompt;
    uint64_t now = ix_time_ns();
    info.timings.queue_ms = ms_between(r->t_submit, r->t_sched);
    info.timings.prefill_ms = ms_between(r->t_sched, r->t_prefilled);
    info.timings.first_token_ms = ms_between(r->t_submit, r->t_first);
    info.timings.total_ms = ms_between(r->t_submit, now);
    info.timings.compute_ms = r->compute_ns / 1e6;
    info.deadline_missed = it->deadline_ns && now > it->deadline_ns;
    info.n_preemptions = it->n_preemptions;
    if (msg) snprintf(info.message, sizeof info.message, "%s", msg);
    info.invalid_request = r->err_invalid;

    e->stats.n_finished++;
    if (info.deadline_missed && why != IX_FINISH_DEADLINE) e->stats.n_deadline_missed++;
    if (why == IX_FINISH_DEADLINE) e->stats.n_deadline_shed++;
    list_unlink(&e->active, r);
    publish(e); /* whoever waits on this finish sees the freed blocks */
    /* Freed before the report: once a caller has seen its finish, nothing
     * of the request is left in the engine (a server destroyed right after
     * its last finish leaves no allocation behind). */
    ix_request_callbacks cb = r->cb;
    req_free(e, r);
    if (cb.on_finish) cb.on_finish(cb.user, &info);
}

/* ---- submission (any thread) -------------------------------------------------------- */

ix_status ix_engine_submit(ix_engine *e, const ix_request_params *rp, uint64_t *id_out, ix_errbuf *err) {
    req *r;
    ix_status s = req_build(e, rp, &r, err);
    if (s != IX_OK) return s;
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        req_free(e, r);
        return ix_errf(err, IX_ERR_STATE, "the engine is shutting down");
    }
    r->it.id = ++e->next_id;
    if (id_out) *id_out = r->it.id;
    r->prev = e->pending_tail;
    if (e->pending_tail) e->pending_tail->next = r; else e->pending_head = r;
    e->pending_tail = r;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return IX_OK;
}

void ix_engine_cancel(ix_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    if (e->n_cancels == e->cap_cancels) {
        size_t cap = e->cap_cancels ? e->cap_cancels * 2 : 16;
        uint64_t *c = ix_realloc(e->cancels, cap * sizeof *c);
        if (!c) {
            pthread_mutex_unlock(&e->mu);
            IX_LOGE("out of memory queueing the cancellation of request %llu", (unsigned long long)id);
            return;
        }
        e->cancels = c;
        e->cap_cancels = cap;
    }
    e->cancels[e->n_cancels++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void ix_engine_get_stats(ix_engine *e, ix_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->snapshot;
    pthread_mutex_unlock(&e->mu);
}

bool ix_engine_get_disk_stats(ix_engine *e, ix_kv_disk_stats *kv, struct ix_kvstore_stats *store) {
    if (kv) memset(kv, 0, sizeof *kv);
    if (store) memset(store, 0, sizeof *store);
    if (!e->disk) return false;
    pthread_mutex_lock(&e->mu);
    if (kv) *kv = e->disk_snap;
    pthread_mutex_unlock(&e->mu);
    if (store) ix_kvstore_get_stats(e->disk, store); /* the store has its own lock */
    return true;
}

/* What computes this engine's K/V, for the disk tier's keys: every weight
 * tensor's name, type and shape and three 4 KiB samples of its bytes (a
 * re-quantized or fine-tuned file differs there), and the KV layout. */
static uint64_t kv_fingerprint(const ix_model *m, const ix_kv *kv) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    const ix_gguf *g = ix_model_gguf(m);
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
        XXH3_64bits_update(&st, t->name.ptr, t->name.len);
        int64_t shape[IX_GGUF_MAX_DIMS + 2] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3], (int64_t)t->type,
                                               (int64_t)t->n_bytes};
        XXH3_64bits_update(&st, shape, sizeof shape);
        size_t n = t->n_bytes < 4096 ? (size_t)t->n_bytes : 4096;
        const unsigned char *d = t->data;
        XXH3_64bits_update(&st, d, n);
        XXH3_64bits_update(&st, d + (t->n_bytes - n) / 2, n);
        XXH3_64bits_update(&st, d + (t->n_bytes - n), n);
    }
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    int64_t l[] = {(int64_t)lay.dtype, lay.n_layer, lay.n_kv_head, lay.head_dim, lay.block_size,
                   (int64_t)lay.block_stride_bytes, (int64_t)lay.v_offset_bytes};
    XXH3_64bits_update(&st, l, sizeof l);
    return XXH3_64bits_digest(&st);
}

/* ---- the step ----------------------------------------------------------------------- */

static ix_status admit(void *ctx, ix_sched_item *it) {
    ix_engine *e = ctx;
    req *r = it->user;
    int32_t created = 0;
    int32_t n = it->n_seqs;
    for (int32_t i = 0; i < n; i++) {
        if (it->finished[i] || it->seqs[i] >= 0) continue;
        int32_t seq;
        if (ix_kv_seq_create(e->kv, it->ns, &seq) != IX_OK) goto undo;
        it->seqs[i] = seq;
        created++;
        int32_t cached = 0;
        if (e->p.enable_prefix_cache &&
            ix_kv_seq_adopt_prefix(e->kv, seq, r->toks[i].ids, (int32_t)r->toks[i].n, &cached) != IX_OK)
            goto undo;
        it->n_computed[i] = cached;
        if (!r->admitted_once && i == 0) r->cached_prompt = cached < it->n_prompt ? cached : it->n_prompt;
    }
    r->admitted_once = true;
    if (!r->t_sched) r->t_sched = ix_time_ns();
    return IX_OK;
undo:
    for (int32_t i = 0; i < n; i++)
        if (it->seqs[i] >= 0 && created-- > 0) {
            ix_kv_seq_free(e->kv, it->seqs[i]);
            it->seqs[i] = -1;
            it->n_computed[i] = 0;
        }
    return IX_ERR_NOMEM;
}

static void emit(ix_engine *e, req *r, int32_t c, ix_token tok, const ix_sample_result *sr,
                 const char *text, size_t len) {
    if (!r->cb.on_token) return;
    ix_token_event ev = {r->it.id, c, tok, text ? text : "", len, sr};
    IX_UNUSED(e);
    r->cb.on_token(r->cb.user, &ev);
}

/* Ends choice c: releases its held-back text (nothing after a stop
 * string), frees its sequence. */
static void finish_choice(ix_engine *e, req *r, int32_t c, ix_finish_reason why) {
    ix_sched_item *it = &r->it;
    if (it->finished[c]) return;
    it->finished[c] = true;
    r->reasons[c] = why;
    ix_buf_clear(&e->text);
    ix__text_stream_finish(r->text[c], &e->text);
    if (e->text.len) emit(e, r, c, IX_TOKEN_NONE, NULL, e->text.data, e->text.len);
    release_seq(e, r, c);
}

static bool all_finished(const ix_sched_item *it) {
    for (int c = 0; c < it->n_choices; c++)
        if (!it->finished[c]) return false;
    return true;
}

static bool is_stop_token(const ix_engine *e, const req *r, ix_token t) {
    if (!r->ignore_eos && ix_tokenizer_is_eog(ix_model_tokenizer(e->m), t)) return true;
    for (size_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == t) return true;
    return false;
}

/* Records r's error: the message and whose fault it is (invalid: the
 * request's own), always set together. */
static void req_error(req *r, bool invalid, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void req_error(req *r, bool invalid, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof r->errmsg, fmt, ap);
    va_end(ap);
    r->err_invalid = invalid;
}

/* Ends choice c with an error; invalid: the request itself is at fault. */
static void choice_error(ix_engine *e, req *r, int32_t c, bool invalid, const char *msg) {
    req_error(r, invalid, "%s", msg);
    finish_choice(e, r, c, IX_FINISH_ERROR);
}

/* Restricts choice c's next sample to what its grammar allows (engine
 * thread). false: the choice was finished (complete, or an error). A
 * matcher's failure other than running out of memory is the grammar's own
 * doing (too ambiguous to follow, nesting past the limit): the request's
 * fault, not the server's. */
static bool constrain(ix_engine *e, req *r, int32_t c) {
    gentry *ge = r->gram;
    char msg[256];
    ix_errbuf err = {{0}};
    if (!r->gm[c]) {
        ix_status s = IX_OK;
        if (!ge->tmpl) s = ix_grammar_matcher_create(&ge->tmpl, ge->g, e->gvocab, NULL, &err);
        if (s == IX_OK) s = ix_grammar_matcher_clone(&r->gm[c], ge->tmpl);
        if (s != IX_OK) {
            snprintf(msg, sizeof msg, "grammar matcher: %.200s", err.msg[0] ? err.msg : ix_status_str(s));
            choice_error(e, r, c, s != IX_ERR_NOMEM, msg);
            return false;
        }
    }
    ix_grammar_matcher *gm = r->gm[c];
    if (ix_grammar_matcher_must_end(gm)) { /* e.g. a grammar of the empty string */
        finish_choice(e, r, c, IX_FINISH_STOP);
        return false;
    }
    ix_status s = ix_grammar_matcher_fill_mask(gm, e->mask, e->mask_words);
    if (s != IX_OK) {
        snprintf(msg, sizeof msg, "grammar: %.200s", ix_grammar_matcher_errmsg(gm));
        choice_error(e, r, c, s != IX_ERR_NOMEM, msg);
        return false;
    }
    ix_sampler_set_mask(r->smp[c], e->mask);
    return true;
}

/* Samples choice c from a logits row and handles what the token means. */
static void take_token(ix_engine *e, req *r, int32_t c, const float *logits, uint64_t now) {
    ix_sched_item *it = &r->it;
    ix_sample_result sr;
    ix_grammar_matcher *gm = NULL;
    if (r->gram) {
        if (!constrain(e, r, c)) return;
        gm = r->gm[c];
    }
    if (ix_sampler_sample(r->smp[c], logits, &sr) != IX_OK) {
        choice_error(e, r, c, true, "the grammar allows no token here (nesting deeper than the matcher's limit)");
        return;
    }
    ix_status s = gm ? ix_grammar_matcher_accept(gm, sr.id) : IX_OK;
    if (s != IX_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "grammar: %.200s", ix_grammar_matcher_errmsg(gm));
        choice_error(e, r, c, s != IX_ERR_NOMEM, msg);
        return;
    }
    ix_sampler_accept(r->smp[c], sr.id);
    if (ix_token_vec_push(&r->toks[c], sr.id) != IX_OK) {
        choice_error(e, r, c, false, "out of memory");
        return;
    }
    it->n_generated[c]++;
    e->stats.n_generated_tokens++;
    if (!r->t_first) r->t_first = now;
    if (is_stop_token(e, r, sr.id) || (gm && ix_grammar_matcher_is_finished(gm))) {
        emit(e, r, c, sr.id, &sr, NULL, 0);
        finish_choice(e, r, c, IX_FINISH_STOP);
        return;
    }
    ix_buf_clear(&e->text);
    bool stopped = false;
    if (ix__text_stream_push(r->text[c], sr.id, &e->text, &stopped) != IX_OK) {
        choice_error(e, r, c, false, "out of memory");
        return;
    }
    emit(e, r, c, sr.id, &sr, e->text.data, e->text.len);
    if (stopped || (gm && ix_grammar_matcher_must_end(gm))) {
        finish_choice(e, r, c, IX_FINISH_STOP);
    } else if (it->n_generated[c] >= it->max_new || (int32_t)r->toks[c].n >= e->n_ctx) {
        finish_choice(e, r, c, IX_FINISH_LENGTH);
    }
}

/* The prompt of an n > 1 request is computed once; its sequence forks. */
static ix_status fork_choices(ix_engine *e, req *r) {
    ix_sched_item *it = &r->it;
    for (int32_t c = 1; c < it->n_choices; c++) {
        if (ix_kv_seq_fork(e->kv, it->seqs[0], &it->seqs[c]) != IX_OK) {
            for (int32_t k = 1; k < c; k++) {
                ix_kv_seq_free(e->kv, it->seqs[k]);
                it->seqs[k] = -1;
            }
            return IX_ERR_NOMEM;
        }
        it->n_computed[c] = it->n_computed[0];
    }
    it->n_seqs = it->n_choices;
    return IX_OK;
}

/* ---- speculation -------------------------------------------------------------------- */

/* Keeps h, the hidden state of the row whose logits gave choice c its last
 * token, for a proposer that guesses from it (no-op unless one does). */
static void keep_hidden(ix_engine *e, req *r, int32_t c, const float *h) {
    if (!e->hidden) return;
    size_t E = (size_t)e->n_embd;
    if (!r->hid && !(r->hid = ix_malloc((size_t)r->it.n_choices * E * sizeof *r->hid))) return; /* no guesses */
    memcpy(r->hid + (size_t)c * E, h, E * sizeof *h);
    r->hid_n[c] = (int32_t)r->toks[c].n;
}

/* Whether choice c decodes in the next step (its known tokens are all
 * computed but the last): the scheduler's test, on the engine's side. */
static bool choice_decoding(const req *r, int32_t c) {
    const ix_sched_item *it = &r->it;
    return it->state == IX_SCHED_RUNNING && c < it->n_seqs && !it->finished[c] && it->seqs[c] >= 0 &&
           it->n_generated[c] > 0 && it->n_computed[c] == (int32_t)r->toks[c].n - 1;
}

/* Before the plan: asks the proposer for every decoding choice's guesses
 * (one batched call) and sets it->n_draft. How many each choice may guess
 * comes from its acceptance and the step-cost model (ix_spec_choose_k),
 * never past max_tokens or the context. */
static void spec_propose(ix_engine *e) {
    int32_t n_decode = 0, n_q = 0;
    for (req *r = e->active; r; r = r->next) {
        memset(r->it.n_draft, 0, sizeof r->it.n_draft);
        for (int32_t c = 0; c < r->it.n_seqs; c++) n_decode += choice_decoding(r, c);
    }
    if (!e->prop || n_decode == 0) return;
    ix_sched_stats ss;
    ix_sched_get_stats(e->sched, &ss);
    const ix_spec_params *sp = &e->p.spec;
    for (req *r = e->active; r; r = r->next) {
        ix_sched_item *it = &r->it;
        for (int32_t c = 0; c < it->n_seqs; c++) {
            if (!choice_decoding(r, c)) continue;
            if (r->alpha[c] < 0) r->alpha[c] = e->alpha_run;
            int32_t k = r->no_spec ? 0
                        : sp->adaptive ? ix_spec_choose_k_steps(r->alpha[c], sp->k, e->step_ms, SPEC_STEP_TAB,
                                                                ss.cost_a_ms, ss.cost_b_ms, e->guess_ms, n_decode)
                                       : sp->k;
            int32_t n = (int32_t)r->toks[c].n;
            if (k > it->max_new - it->n_generated[c] - 1) k = it->max_new - it->n_generated[c] - 1;
            if (k > e->n_ctx - n) k = e->n_ctx - n;
            if (k <= 0 || n_q >= e->p.sched.max_num_seqs) {
                r->alpha[c] += SPEC_ALPHA_DRIFT * (SPEC_ALPHA_PRIOR - r->alpha[c]);
                continue;
            }
            r->draft[c][0] = r->toks[c].ids[n - 1];
            const float *hid = e->hidden && r->hid && r->hid_n[c] == n ? r->hid + (size_t)c * (size_t)e->n_embd : NULL;
            e->spec_q[n_q++] = (ix_spec_seq){
                .key = spec_key(it->id, c), .ns = it->ns, .tokens = r->toks[c].ids, .n_tokens = n,
                .n_prompt = it->n_prompt, .hidden = hid, .k = k, .out = r->draft[c] + 1};
        }
    }
    /* nobody guesses: the cost per guess is not measured this step, so it
     * drifts down as alpha drifts back, and a high first estimate (a pass
     * that also caught up a whole prompt) cannot keep k at 0 for good */
    if (n_q == 0) e->guess_ms *= 1.0 - SPEC_ALPHA_DRIFT;
    uint64_t t0 = ix_time_ns();
    if (ix_proposer_propose(e->prop, e->spec_q, n_q) != IX_OK) return; /* no guesses this step */
    int32_t n_guessed = 0;
    for (int32_t q = 0; q < n_q; q++) n_guessed += e->spec_q[q].n_out;
    if (n_guessed > 0) { /* the proposer's cost per guess, for the choice of k */
        double per = (double)(ix_time_ns() - t0) / 1e6 / n_guessed;
        e->guess_ms = e->guess_ms > 0 ? 0.8 * e->guess_ms + 0.2 * per : per;
    }
    for (int32_t q = 0; q < n_q; q++) {
        uint64_t key = e->spec_q[q].key;
        req *r = NULL;
        for (req *x = e->active; x && !r; x = x->next)
            if (x->it.id == key / IX_SCHED_MAX_SEQS) r = x;
        int32_t n_out = e->spec_q[q].n_out;
        if (n_out > e->spec_q[q].k) n_out = 0;
        for (int32_t j = 0; j < n_out; j++) /* a guess outside the vocabulary ends the guesses there */
            if (e->spec_q[q].out[j] < 0 || e->spec_q[q].out[j] >= e->n_vocab) n_out = j;
        if (r) r->it.n_draft[key % IX_SCHED_MAX_SEQS] = n_out > 0 ? n_out : 0;
    }
}

/* After the forward pass of a decode that carried d guesses of choice c:
 * samples rows row .. row + d in order with the choice's own sampler, keeping
 * each guess the sampled token equals; the first token that differs (or the
 * one after the last guess) is the target's own. Then the sequence drops the
 * K/V of rejected guesses and commits the rest. hid: the rows' hidden states
 * (NULL unless kept); the one of the row that gave the last token is kept. */
static void spec_verify(ix_engine *e, req *r, int32_t c, int32_t d, const float *rows, const float *hid,
                        uint64_t now) {
    ix_sched_item *it = &r->it;
    int32_t seq = it->seqs[c], base = it->n_computed[c], acc = 0;
    for (int32_t j = 0; j <= d; j++) {
        size_t before = r->toks[c].n;
        take_token(e, r, c, rows + (size_t)j * (size_t)e->n_vocab, now);
        if (hid && r->toks[c].n > before) keep_hidden(e, r, c, hid + (size_t)j * (size_t)e->n_embd);
        if (it->finished[c] || r->toks[c].n == before || j == d) break;
        bool hit = r->toks[c].ids[before] == r->draft[c][1 + j];
        r->alpha[c] += SPEC_ALPHA_RATE * ((hit ? 1.0f : 0.0f) - r->alpha[c]);
        e->alpha_run += SPEC_ALPHA_RUN_RATE * ((hit ? 1.0f : 0.0f) - e->alpha_run);
        if (!hit) break;
        e->stats.spec_accepted_per_pos[j]++;
        acc++;
    }
    e->stats.spec_n_drafts++;
    e->stats.spec_n_draft_tokens += (uint64_t)d;
    e->stats.spec_n_accepted_tokens += (uint64_t)acc;
    if (it->finished[c]) return; /* its sequence is freed */
    it->n_computed[c] = base + 1 + acc;
    if (ix_kv_seq_truncate(e->kv, seq, it->n_computed[c]) != IX_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "KV cache: %.200s", ix_kv_errmsg(e->kv));
        choice_error(e, r, c, false, msg);
        return;
    }
    ix_kv_seq_commit(e->kv, seq, it->n_computed[c]);
}

static void publish(ix_engine *e) {
    ix_sched_stats ss;
    ix_sched_get_stats(e->sched, &ss);
    e->stats.n_waiting = ss.n_waiting;
    e->stats.n_running = ss.n_running;
    e->stats.n_swapped = ss.n_swapped;
    e->stats.n_preempt_recompute = ss.n_preempt_recompute;
    e->stats.n_preempt_swap = ss.n_preempt_swap;
    e->stats.step_budget = ss.step_budget;
    e->stats.step_cost_fixed_ms = ss.cost_a_ms;
    e->stats.step_cost_per_token_ms = ss.cost_b_ms;
    ix_model_ctx_get_profile(e->ctx, &e->stats.forward);
    ix_kv_get_stats(e->kv, &e->stats.kv);
    ix_spec_stats ps;
    ix_proposer_get_stats(e->prop, &ps);
    e->stats.spec_draft_seqs = ps.n_seqs;
    e->stats.spec_draft_blocks_used = ps.kv_blocks_used;
    e->stats.spec_draft_blocks_total = ps.kv_blocks_total;
    e->stats.spec_draft_forward_ns = ps.forward_ns;
    ix_kv_disk_stats ds;
    ix_kv_get_disk_stats(e->kv, &ds);
    ix_kv_session_stats ss2;
    ix_kv_get_session_stats(e->kv, &ss2);
    pthread_mutex_lock(&e->mu);
    e->snapshot = e->stats;
    e->disk_snap = ds;
    e->sess_snap = ss2;
    pthread_mutex_unlock(&e->mu);
}

/* ---- sessions ------------------------------------------------------------------------ */

typedef struct session_op {
    ix_session_op op;
    uint64_t id, tenant;
    ix_kv_session_info info;
    ix_status result;
    bool done;
    struct session_op *next;
} session_op;

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs one session op on the thread that owns the cache. */
static void session_run(ix_engine *e, session_op *o) {
    memset(&o->info, 0, sizeof o->info);
    switch (o->op) {
    case IX_SESSION_GET:
        o->result = ix_kv_session_get(e->kv, o->id, o->tenant, &o->info);
        break;
    case IX_SESSION_SAVE:
        o->result = ix_kv_session_get(e->kv, o->id, o->tenant, &o->info);
        if (o->result == IX_OK) o->result = ix_kv_session_save(e->kv, o->id, o->tenant, NULL);
        if (o->result == IX_OK) o->result = ix_kv_sessions_persist(e->kv);
        if (o->result == IX_OK) o->result = ix_kv_session_get(e->kv, o->id, o->tenant, &o->info);
        break;
    case IX_SESSION_DELETE:
        o->result = ix_kv_session_drop(e->kv, o->id, o->tenant);
        if (o->result == IX_OK && e->disk) ix_kv_sessions_persist(e->kv);
        break;
    default:
        o->result = IX_ERR_INVALID;
    }
}

/* Session ops queued by other threads, and expiry once a second. */
static void session_work(ix_engine *e) {
    pthread_mutex_lock(&e->mu);
    session_op *ops = e->ops;
    e->ops = NULL;
    pthread_mutex_unlock(&e->mu);
    bool any = ops != NULL;
    for (session_op *o = ops; o; o = o->next) session_run(e, o);
    int64_t now = wall_ms();
    if (now >= e->next_expiry_ms) {
        e->next_expiry_ms = now + 1000;
        if (ix_kv_session_expire(e->kv, now) > 0) any = true;
    }
    if (!any) return;
    publish(e);
    pthread_mutex_lock(&e->mu);
    for (session_op *o = ops, *next; o; o = next) {
        next = o->next;
        o->done = true; /* o belongs to its waiter from here */
    }
    pthread_cond_broadcast(&e->ops_cv);
    pthread_mutex_unlock(&e->mu);
}

ix_status ix_engine_session(ix_engine *e, ix_session_op op, uint64_t id, uint64_t tenant, ix_kv_session_info *info) {
    session_op o = {op, id, tenant, {0}, IX_OK, false, NULL};
    if (!e->has_thread) {
        session_run(e, &o);
        publish(e);
    } else {
        pthread_mutex_lock(&e->mu);
        if (e->stopping) {
            pthread_mutex_unlock(&e->mu);
            return IX_ERR_STATE;
        }
        o.next = e->ops;
        e->ops = &o;
        pthread_cond_signal(&e->cv);
        while (!o.done) pthread_cond_wait(&e->ops_cv, &e->mu);
        pthread_mutex_unlock(&e->mu);
    }
    if (info) *info = o.info;
    return o.result;
}

void ix_engine_get_session_stats(ix_engine *e, ix_kv_session_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->sess_snap;
    pthread_mutex_unlock(&e->mu);
}

/* One step (ix_engine_step), on the engine thread or the caller that is one. */
static ix_status step(ix_engine *e, bool *did_work) {
    *did_work = false;
    /* Splice in submissions and cancellations. */
    pthread_mutex_lock(&e->mu);
    req *incoming = e->pending_head;
    e->pending_head = e->pending_tail = NULL;
    size_t n_cancel = e->n_cancels;
    uint64_t cancels[64];
    if (n_cancel > IX_ARRAY_LEN(cancels)) n_cancel = IX_ARRAY_LEN(cancels);
    if (n_cancel) {
        memcpy(cancels, e->cancels, n_cancel * sizeof *cancels);
        memmove(e->cancels, e->cancels + n_cancel, (e->n_cancels - n_cancel) * sizeof *cancels);
        e->n_cancels -= n_cancel;
    }
    pthread_mutex_unlock(&e->mu);
    session_work(e);
    for (req *r = incoming, *next; r; r = next) {
        next = r->next;
        r->prev = NULL;
        r->next = e->active;
        if (e->active) e->active->prev = r;
        e->active = r;
        ix_sched_add(e->sched, &r->it);
        e->stats.n_prompt_tokens += (uint64_t)r->it.n_prompt;
        *did_work = true;
    }
    for (size_t i = 0; i < n_cancel; i++)
        for (req *r = e->active; r; r = r->next)
            if (r->it.id == cancels[i]) {
                req_finish(e, r, IX_FINISH_ABORT, NULL);
                *did_work = true;
                break;
            }
    if (!e->active) {
        publish(e);
        return IX_OK;
    }

    uint64_t t0 = ix_time_ns();
    spec_propose(e);
    const double prop_ms = (double)(ix_time_ns() - t0) / 1e6;
    ix_sched_plan plan;
    ix_status s = ix_sched_plan_step(e->sched, t0, admit, e, &plan);
    if (s != IX_OK) return s;
    for (int32_t i = 0; i < plan.n_expired; i++)
        req_finish(e, plan.expired[i]->user, IX_FINISH_DEADLINE, "deadline cannot be met");
    /* a preempted request's proposer state goes with its blocks (it is
     * rebuilt when the request runs again) */
    for (int32_t i = 0; i < plan.n_preempted; i++)
        for (int32_t c = 0; c < plan.preempted[i]->n_choices; c++)
            ix_proposer_release(e->prop, spec_key(plan.preempted[i]->id, c));
    if (plan.n_work == 0) {
        ix_sched_stats ss;
        ix_sched_get_stats(e->sched, &ss);
        if (ss.n_running == 0 && ss.n_swapped == 0 && e->active) {
            /* Nothing runs and the head of the queue does not fit an empty
             * cache: it never will. */
            for (req *r = e->active; r; r = r->next)
                if (r->it.state == IX_SCHED_WAITING) {
                    req_finish(e, r, IX_FINISH_ERROR, "the KV cache cannot hold this request");
                    *did_work = true;
                    break;
                }
        }
        publish(e);
        *did_work = *did_work || plan.n_expired > 0 || plan.n_preempted > 0 || plan.n_admitted > 0;
        return IX_OK;
    }
    *did_work = true;

    /* Append KV slots and build the batch. */
    int32_t T = 0;
    for (int32_t w = 0; w < plan.n_work; w++) {
        ix_sched_work *wk = &plan.work[w];
        ix_sched_item *it = wk->item;
        req *r = it->user;
        int32_t i = wk->seq_index, from = it->n_computed[i];
        /* a decode with guesses: its last token and the guesses, each
         * with a logits row */
        bool spec = wk->decode && wk->n_tokens > 1;
        const ix_token *src = spec ? r->draft[i] : r->toks[i].ids + from;
        e->w_rows[w] = 0;
        if (ix_kv_seq_append(e->kv, it->seqs[i], wk->n_tokens, src) != IX_OK) {
            /* The plan guaranteed room; treat a failure as this request's error. */
            req_error(r, false, "KV cache: %.200s", ix_kv_errmsg(e->kv));
            wk->n_tokens = 0;
            continue;
        }
        for (int32_t k = 0; k < wk->n_tokens; k++) {
            e->b_tok[T] = src[k];
            e->b_pos[T] = from + k;
            e->b_seq[T] = it->seqs[i];
            e->b_out[T] = spec;
            T++;
        }
        if (spec) e->w_rows[w] = wk->n_tokens;
        else if (from + wk->n_tokens == (int32_t)r->toks[i].n) e->b_out[T - 1] = 1, e->w_rows[w] = 1;
    }
    uint64_t t_fwd = ix_time_ns();
    e->stats.plan_ns += t_fwd - t0;
    if (T > 0) {
        ix_batch b = {T, e->b_tok, e->b_pos, e->b_seq, e->b_out};
        s = ix_model_forward_out(e->ctx, &b, e->logits, e->hidden);
        if (s != IX_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "forward pass failed: %.200s", ix_model_ctx_errmsg(e->ctx));
            for (int32_t w = 0; w < plan.n_work; w++) {
                req *r = plan.work[w].item->user;
                if (r->it.state != IX_SCHED_DONE) req_finish(e, r, IX_FINISH_ERROR, msg);
            }
            publish(e);
            return IX_OK;
        }
    }
    uint64_t now = ix_time_ns();
    e->stats.forward_ns += now - t_fwd;
    if (e->disk && T >= 32) { /* prefill-sized steps: what a token costs to compute */
        double per = (double)(now - t_fwd) / (double)T;
        e->compute_ns_ewma = e->compute_ns_ewma > 0 ? 0.8 * e->compute_ns_ewma + 0.2 * per : per;
        ix_kv_set_compute_cost(e->kv, e->compute_ns_ewma);
    }
    e->stats.n_steps++;
    /* each request's share of this step, by the tokens it put in */
    for (int32_t w = 0; w < plan.n_work && T > 0; w++) {
        const ix_sched_work *wk = &plan.work[w];
        req *r = wk->item->user;
        r->compute_ns += (double)(now - t0) * (double)wk->n_tokens / (double)T;
        if (r->cb.on_prefill && !wk->decode && wk->n_tokens > 0) {
            int32_t i = wk->seq_index;
            ix_prefill_event ev = {r->it.id, i, wk->item->n_computed[i], wk->n_tokens, (int32_t)r->toks[i].n, T, t0, now};
            r->cb.on_prefill(r->cb.user, &ev);
        }
    }

    /* Commit, then sample the sequences that reached their end. */
    for (int32_t w = 0, row = 0; w < plan.n_work; row += e->w_rows[w], w++) {
        ix_sched_work *wk = &plan.work[w];
        ix_sched_item *it = wk->item;
        req *r = it->user;
        int32_t i = wk->seq_index;
        if (it->state == IX_SCHED_DONE) continue;
        if (wk->n_tokens == 0) { /* its append failed */
            req_finish(e, r, IX_FINISH_ERROR, r->errmsg);
            continue;
        }
        const float *l = e->logits + (size_t)row * (size_t)e->n_vocab;
        const float *h = e->hidden ? e->hidden + (size_t)row * (size_t)e->n_embd : NULL;
        if (wk->decode && wk->n_tokens > 1) {
            spec_verify(e, r, i, wk->n_tokens - 1, l, h, now);
            if (all_finished(it)) req_finish(e, r, IX_FINISH_STOP, r->errmsg[0] ? r->errmsg : NULL);
            continue;
        }
        it->n_computed[i] += wk->n_tokens;
        ix_kv_seq_commit(e->kv, it->seqs[i], it->n_computed[i]);
        if (it->n_computed[i] != (int32_t)r->toks[i].n) continue;
        if (!r->t_prefilled) r->t_prefilled = now;
        if (it->n_seqs == 1 && it->n_choices > 1 && it->n_generated[0] == 0) {
            if (fork_choices(e, r) != IX_OK) {
                req_finish(e, r, IX_FINISH_ERROR, "out of memory forking choices");
                continue;
            }
            for (int32_t c = 0; c < it->n_choices; c++) {
                take_token(e, r, c, l, now);
                if (h) keep_hidden(e, r, c, h);
            }
        } else {
            take_token(e, r, i, l, now);
            if (h) keep_hidden(e, r, i, h);
        }
        if (all_finished(it)) req_finish(e, r, IX_FINISH_STOP, r->errmsg[0] ? r->errmsg : NULL);
    }
    /* The whole step, as the streams see it (plan to the last token out):
     * what the scheduler's budget must keep within its target. */
    uint64_t t_end = ix_time_ns();
    e->stats.sample_ns += t_end - now;
    ix_sched_observe_step(e->sched, T, t_end - t0);
    if (e->prop && T > 0 && T < SPEC_STEP_TAB) {
        double ms = (double)(t_end - t0) / 1e6 - prop_ms;
        if (ms > 0) e->step_ms[T] = e->step_ms[T] > 0 ? 0.8 * e->step_ms[T] + 0.2 * ms : ms;
    }
    if (T > 0) {
        static const int32_t bounds[IX_ENGINE_STEP_TOKEN_BUCKETS] = IX_ENGINE_STEP_TOKEN_BOUNDS;
        int b = 0;
        while (b < IX_ENGINE_STEP_TOKEN_BUCKETS && T > bounds[b]) b++;
        e->stats.step_tokens[b]++;
        e->stats.step_tokens_sum += (uint64_t)T;
    }
    publish(e);
    return IX_OK;
}

ix_status ix_engine_step(ix_engine *e, bool *did_work) {
    *did_work = false;
    return e->has_thread ? IX_ERR_STATE : step(e, did_work);
}

ix_status ix_engine_run_until(ix_engine *e, const bool *done, int64_t max_steps) {
    for (int64_t i = 0; !*done && (max_steps <= 0 || i < max_steps); i++) {
        bool did = false;
        ix_status s = ix_engine_step(e, &did);
        if (s != IX_OK) return s;
        if (!did && !*done) return IX_ERR_STATE; /* idle: nothing left could set *done */
    }
    return IX_OK;
}

/* ---- thread and lifecycle ------------------------------------------------------------ */

static void *engine_main(void *arg) {
    ix_engine *e = arg;
    for (;;) {
        bool did = false;
        step(e, &did);
        pthread_mutex_lock(&e->mu);
        if (e->stopping) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        if (!did && !e->pending_head && e->n_cancels == 0 && !e->ops) {
            /* idle: wake for sessions' expiry too */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}

void ix_engine_destroy(ix_engine *e) {
    if (!e) return;
    if (e->has_thread) {
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    /* Requests still queued or running finish as aborted. */
    pthread_mutex_lock(&e->mu);
    req *incoming = e->pending_head;
    e->pending_head = e->pending_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    for (req *r = incoming, *next; r; r = next) {
        next = r->next;
        r->prev = NULL;
        r->next = e->active;
        if (e->active) e->active->prev = r;
        e->active = r;
        r->it.state = IX_SCHED_DONE;
    }
    while (e->active) req_finish(e, e->active, IX_FINISH_ABORT, NULL);
    if (e->sched && e->ctx && e->kv) session_work(e); /* ops that came in as the thread stopped */
    ix_sched_destroy(e->sched);
    ix_proposer_destroy(e->prop); /* a draft model runs on the context's pool */
    e->prop = NULL;
    ix_model_ctx_destroy(e->ctx);
    if (e->disk && e->kv) {
        ix_kv_persist_cached(e->kv); /* a new engine over the folder finds them */
        if (ix_kv_sessions_persist(e->kv) != IX_OK) IX_LOGW("engine: the session index was not written");
    }
    ix_kv_destroy(e->kv);
    ix_kvstore_close(e->disk);
    ix_free(e->b_tok);
    ix_free(e->b_pos);
    ix_free(e->b_seq);
    ix_free(e->b_out);
    ix_free(e->w_rows);
    ix_free(e->logits);
    ix_free(e->hidden);
    ix_free(e->spec_q);
    ix_free(e->cancels);
    ix_buf_free(&e->text);
    for (int i = 0; i < GCACHE_SLOTS; i++) gentry_destroy(e->gcache[i]); /* no request holds one now */
    ix_grammar_vocab_destroy(e->gvocab);
    ix_free(e->mask);
    pthread_mutex_destroy(&e->gmu);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->ops_cv);
    ix_free(e);
}

ix_status ix_engine_create(ix_engine **out, const ix_model *m, const ix_engine_params *p, ix_errbuf *err) {
    *out = NULL;
    /* the swap and disk tiers move K/V inside this process's pool only: a
     * shard's other ranks (tensor or pipeline parallel) would miss it */
    if (ix_model_is_sharded(m) && (p->sched.preempt == IX_PREEMPT_SWAP || (p->kv_disk_dir && *p->kv_disk_dir)))
        return ix_errf(err, IX_ERR_UNSUPPORTED, "swap preemption and the KV disk tier do not work with tensor or "
                                                "pipeline parallelism yet (recompute preemption does)");
    ix_engine *e = ix_calloc(1, sizeof *e);
    if (!e) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->ops_cv, NULL);
    pthread_mutex_init(&e->gmu, NULL);
    e->m = m;
    e->p = *p;
    e->alpha_run = SPEC_ALPHA_PRIOR;
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    e->n_vocab = hp->n_vocab;
    e->n_ctx = p->n_ctx > 0 && p->n_ctx < hp->n_ctx_train ? p->n_ctx : hp->n_ctx_train;
    ix_status s;

    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.dtype = p->kv_dtype;
    kp.block_size = p->kv_block_size > 0 ? p->kv_block_size : 16;
    kp.n_blocks = p->kv_blocks;
    kp.mem_bytes = p->kv_mem_bytes;
    kp.max_seq_len = e->n_ctx;
    kp.enable_prefix_cache = p->enable_prefix_cache;
    if (p->sched.preempt == IX_PREEMPT_SWAP) {
        int64_t blocks = p->kv_blocks > 0 ? p->kv_blocks : 0;
        if (!blocks) {
            size_t per_block = (size_t)hp->n_layer * 2 * (size_t)hp->n_head_kv * (size_t)kp.block_size *
                               ix_kv_dtype_row_bytes(kp.dtype, (size_t)hp->head_dim);
            blocks = per_block ? (int64_t)(p->kv_mem_bytes / per_block) : 0;
        }
        kp.n_swap_blocks = p->kv_swap_blocks >= 0 ? p->kv_swap_blocks : blocks;
    }
    if ((s = ix_kv_create(&kp, &e->kv, err)) != IX_OK) goto fail;
    if (p->kv_disk_dir && *p->kv_disk_dir) {
        ix_kvstore_params dp = ix_kvstore_default_params();
        dp.dir = p->kv_disk_dir;
        dp.max_bytes = p->kv_disk_max_bytes;
        if ((s = ix_kvstore_open(&e->disk, &dp, err)) != IX_OK) goto fail;
        uint64_t fp = kv_fingerprint(m, e->kv);
        ix_kv_attach_disk(e->kv, e->disk, fp);
        if (ix_kv_sessions_load(e->kv, wall_ms()) != IX_OK) IX_LOGW("engine: %s", ix_kv_errmsg(e->kv));
        IX_LOGI("engine: KV disk tier in %s (model fingerprint %016llx%s)", p->kv_disk_dir, (unsigned long long)fp,
                p->kv_disk_max_bytes ? ", LRU past the size given" : "");
    }
    e->p.kv_disk_dir = NULL; /* not kept: the store has its copy */
    ix_kv_layout lay;
    ix_kv_get_layout(e->kv, &lay);
    e->block_size = lay.block_size;
    e->total_blocks = lay.n_blocks;

    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = p->sched.max_num_batched_tokens;
    cp.n_threads = p->n_threads;
    if ((s = ix_model_ctx_create(&e->ctx, m, e->kv, &cp, err)) != IX_OK) goto fail;
    if ((s = ix_sched_create(&e->sched, &p->sched, e->kv, err)) != IX_OK) goto fail;
    ix_spec_env env = {.target = m,
                       .pool = ix_model_ctx_pool(e->ctx),
                       .n_threads = p->n_threads,
                       .max_batch_tokens = p->sched.max_num_batched_tokens,
                       .n_ctx = e->n_ctx,
                       .kv_dtype = kp.dtype,
                       .kv_block_size = e->block_size,
                       .kv_tokens = e->total_blocks * e->block_size};
    if ((s = ix_proposer_create(&e->prop, &p->spec, &env, err)) != IX_OK) goto fail;
    if (e->prop && !(e->spec_q = ix_calloc((size_t)p->sched.max_num_seqs, sizeof *e->spec_q))) {
        s = ix_errf(err, IX_ERR_NOMEM, "out of memory");
        goto fail;
    }

    e->max_batch = p->sched.max_num_batched_tokens;
    e->max_out = e->max_batch;
    e->b_tok = ix_malloc((size_t)e->max_batch * sizeof *e->b_tok);
    e->b_pos = ix_malloc((size_t)e->max_batch * sizeof *e->b_pos);
    e->b_seq = ix_malloc((size_t)e->max_batch * sizeof *e->b_seq);
    e->b_out = ix_malloc((size_t)e->max_batch);
    e->w_rows = ix_malloc((size_t)e->max_batch * sizeof *e->w_rows);
    e->logits = ix_malloc((size_t)e->max_out * (size_t)e->n_vocab * sizeof(float));
    e->n_embd = hp->n_embd;
    if (e->prop && ix_proposer_get_ops(e->prop)->wants_hidden &&
        !(e->hidden = ix_malloc((size_t)e->max_out * (size_t)e->n_embd * sizeof(float)))) {
        s = ix_errf(err, IX_ERR_NOMEM, "out of memory for the hidden states");
        goto fail;
    }
    if (e->prop && e->p.spec.k > ix_proposer_max_k(e->prop)) {
        IX_LOGI("spec: k %d capped at %d, the most the '%s' proposer guesses", e->p.spec.k,
                ix_proposer_max_k(e->prop), ix_proposer_get_ops(e->prop)->name);
        e->p.spec.k = ix_proposer_max_k(e->prop);
    }
    /* The sampler reads n_vocab bits; the grammar writes its vocabulary's
     * words and zeroes the rest, so tokens past the tokenizer's are refused. */
    e->mask_words = ((size_t)e->n_vocab + 31) / 32;
    size_t tok_words = ((size_t)ix_tokenizer_n_vocab(ix_model_tokenizer(m)) + 31) / 32;
    if (tok_words > e->mask_words) e->mask_words = tok_words;
    e->mask = ix_calloc(e->mask_words, sizeof *e->mask);
    if (!e->b_tok || !e->b_pos || !e->b_seq || !e->b_out || !e->w_rows || !e->logits || !e->mask) {
        s = ix_errf(err, IX_ERR_NOMEM, "out of memory for the step buffers");
        goto fail;
    }
    publish(e); /* before the thread exists: from then on only it publishes */
    if (p->start_thread) {
        if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
            s = ix_errf(err, IX_ERR_INTERNAL, "cannot start the engine thread");
            goto fail;
        }
        e->has_thread = true;
    }
    *out = e;
    return IX_OK;
fail:
    ix_engine_destroy(e);
    return s;
}

/* ---- offline batch API ------------------------------------------------------------------ */

typedef struct gen_ctx {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    size_t *remaining;
    bool *all_done; /* remaining reached 0 (the thread-less loop's flag) */
    ix_generation *g;
} gen_ctx;

static void gen_on_token(void *user, const ix_token_event *ev) {
    gen_ctx *gc = user;
    if (ev->token >= 0) ix_token_vec_push(&gc->g->tokens[ev->choice], ev->token);
    if (ev->text_len) ix_buf_append(&gc->g->text[ev->choice], ev->text, ev->text_len);
}

static void gen_on_finish(void *user, const ix_finish_info *info) {
    gen_ctx *gc = user;
    pthread_mutex_lock(gc->mu);
    gc->g->info = *info;
    if (--*gc->remaining == 0) *gc->all_done = true;
    pthread_cond_broadcast(gc->cv);
    pthread_mutex_unlock(gc->mu);
}

ix_status ix_engine_generate(ix_engine *e, const ix_request_params *reqs, size_t n, ix_generation *out,
                             ix_errbuf *err) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    size_t remaining = 0;
    bool all_done = false;
    gen_ctx *ctxs = ix_calloc(n ? n : 1, sizeof *ctxs);
    if (!ctxs) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    memset(out, 0, n * sizeof *out);
    ix_status s = IX_OK;
    for (size_t i = 0; i < n; i++) {
        ctxs[i] = (gen_ctx){&mu, &cv, &remaining, &all_done, &out[i]};
        ix_request_params r = reqs[i];
        r.cb = (ix_request_callbacks){gen_on_token, gen_on_finish, &ctxs[i], NULL};
        pthread_mutex_lock(&mu);
        remaining++;
        pthread_mutex_unlock(&mu);
        s = ix_engine_submit(e, &r, NULL, err);
        if (s != IX_OK) {
            pthread_mutex_lock(&mu);
            remaining--;
            pthread_mutex_unlock(&mu);
            out[i].info.reason = IX_FINISH_ERROR;
            snprintf(out[i].info.message, sizeof out[i].info.message, "%.200s", err ? err->msg : "refused");
            break;
        }
    }
    if (e->has_thread) {
        pthread_mutex_lock(&mu);
        while (remaining > 0) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
    } else if (remaining > 0) {
        ix_status st = ix_engine_run_until(e, &all_done, 0);
        if (st != IX_OK) s = st;
    }
    ix_free(ctxs);
    return s;
}

void ix_generation_free(ix_generation *g) {
    for (int i = 0; i < IX_SCHED_MAX_SEQS; i++) {
        ix_token_vec_free(&g->tokens[i]);
        ix_buf_free(&g->text[i]);
    }
}
