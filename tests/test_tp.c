/* Tensor- and pipeline-parallel model shards without MPI: the ranks are
 * threads of this process joined by a transport of their own (shared
 * buffers, barriers and mailboxes, a real implementation of ix_model_comm,
 * not a stand-in for one), so the sanitizers see every rank. The logits of 2
 * and 3 shards, of 2 and 3 pipeline stages (with micro-batches) and of 2 x 2
 * must be the same bits as the whole model's over the same script of KV
 * operations: a chunked prefill, a fork whose shared partial block is copied
 * on write (the copy hook's replay on the other ranks), decode steps of both
 * sequences in one batch, hidden states. Also: bad plans are refused with a
 * message. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "inferx/engine.h"
#include "inferx/model.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define MAX_RANKS 4
#define MAX_MAIL 64 /* messages in flight between two ranks */
#define N_DECODE 6

/* ---- the thread transport ------------------------------------------------ */
enum { MSG_START = 1, MSG_STEP, MSG_STOP };

typedef struct mail {
    float *data;
    size_t n;
    int32_t tag;
} mail;

typedef struct shared {
    int32_t n_ranks;       /* tp * pp */
    int32_t tp, pp;        /* rank r: rank r % tp of stage r / tp */
    pthread_barrier_t bar; /* every rank: START, STEP, STOP */
    pthread_barrier_t gbar[MAX_RANKS]; /* each stage's group: the exchanges */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mail box[MAX_RANKS][MAX_RANKS][MAX_MAIL]; /* [from][to]: in order */
    int32_t n_box[MAX_RANKS][MAX_RANKS];
    const float *mine[MAX_RANKS]; /* each rank's block of the exchange in progress */
    int msg;
    ix_kv_params kvp;
    int32_t max_tokens;
    ix_status status[MAX_RANKS];
    ix_model_plan plan; /* rank 0's buffers, valid while its pass runs */
} shared;

typedef struct rank {
    shared *sh;
    int32_t id;
    ix_model_comm comm;
    ix_model *m;
} rank;

/* The blocks of the group of ranks g0 .. g0 + tp - 1 side by side. */
static void copy_blocks(const shared *sh, int32_t g0, float *out, size_t rows, const int32_t *cols) {
    size_t total = 0, col0 = 0;
    for (int32_t r = 0; r < sh->tp; r++) total += (size_t)cols[r];
    for (int32_t r = 0; r < sh->tp; r++) {
        for (size_t i = 0; i < rows; i++)
            memcpy(out + i * total + col0, sh->mine[g0 + r] + i * (size_t)cols[r], (size_t)cols[r] * sizeof(float));
        col0 += (size_t)cols[r];
    }
}

/* Within the stage's group; out NULL: this rank only contributes (a gather
 * to the group's rank 0). */
static ix_status t_exchange(void *user, const float *mine, float *out, size_t rows, const int32_t *cols) {
    rank *rk = user;
    shared *sh = rk->sh;
    int32_t stage = rk->id / sh->tp;
    sh->mine[rk->id] = mine;
    pthread_barrier_wait(&sh->gbar[stage]);
    if (out) copy_blocks(sh, stage * sh->tp, out, rows, cols);
    pthread_barrier_wait(&sh->gbar[stage]); /* no rank reuses its block before all have read it */
    return IX_OK;
}

/* Pipeline: a copy of buf into the mailbox of the same group rank of stage
 * `stage` (the caller may reuse buf at once: flush has nothing to wait for). */
static ix_status t_send(void *user, const float *buf, size_t n, int32_t stage, int32_t tag) {
    rank *rk = user;
    shared *sh = rk->sh;
    int32_t to = stage * sh->tp + rk->id % sh->tp;
    float *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) return IX_ERR_NOMEM;
    memcpy(copy, buf, n * sizeof *copy);
    pthread_mutex_lock(&sh->mu);
    ix_status s = IX_ERR_INTERNAL;
    if (sh->n_box[rk->id][to] < MAX_MAIL) {
        sh->box[rk->id][to][sh->n_box[rk->id][to]++] = (mail){copy, n, tag};
        copy = NULL;
        s = IX_OK;
    }
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
    free(copy);
    return s;
}

/* The first message of this tag from that rank; its size must be n. */
static ix_status t_recv(void *user, float *buf, size_t n, int32_t stage, int32_t tag) {
    rank *rk = user;
    shared *sh = rk->sh;
    int32_t from = stage * sh->tp + rk->id % sh->tp;
    pthread_mutex_lock(&sh->mu);
    for (;;) {
        mail *box = sh->box[from][rk->id];
        int32_t nb = sh->n_box[from][rk->id];
        for (int32_t i = 0; i < nb; i++) {
            if (box[i].tag != tag) continue;
            mail got = box[i];
            memmove(box + i, box + i + 1, (size_t)(nb - i - 1) * sizeof *box);
            sh->n_box[from][rk->id]--;
            pthread_mutex_unlock(&sh->mu);
            ix_status s = got.n == n ? IX_OK : IX_ERR_FORMAT;
            if (s == IX_OK) memcpy(buf, got.data, n * sizeof *buf);
            free(got.data);
            return s;
        }
        pthread_cond_wait(&sh->cv, &sh->mu);
    }
}

static ix_status t_flush(void *user) {
    (void)user;
    return IX_OK;
}

static ix_status t_start(void *user, const ix_kv_params *kv, int32_t max_tokens, ix_errbuf *err) {
    rank *rk = user;
    shared *sh = rk->sh;
    sh->kvp = *kv;
    sh->max_tokens = max_tokens;
    sh->msg = MSG_START;
    pthread_barrier_wait(&sh->bar);
    pthread_barrier_wait(&sh->bar); /* the others have answered */
    for (int32_t r = 1; r < sh->n_ranks; r++)
        if (sh->status[r] != IX_OK) return ix_errf(err, sh->status[r], "rank %d could not start", (int)r);
    return IX_OK;
}

static ix_status t_step(void *user, const ix_model_plan *plan) {
    rank *rk = user;
    rk->sh->plan = *plan;
    rk->sh->msg = MSG_STEP;
    pthread_barrier_wait(&rk->sh->bar);
    return IX_OK;
}

static void t_stop(shared *sh) {
    sh->msg = MSG_STOP;
    pthread_barrier_wait(&sh->bar);
}

/* A rank other than 0: START, then each STEP's plan, until STOP. */
static void *worker_main(void *arg) {
    rank *rk = arg;
    shared *sh = rk->sh;
    ix_kv *kv = NULL;
    ix_model_ctx *ctx = NULL;
    for (;;) {
        pthread_barrier_wait(&sh->bar);
        if (sh->msg == MSG_STOP) break;
        if (sh->msg == MSG_START) {
            ix_errbuf err = {{0}};
            ix_kv_params kp = sh->kvp;
            ix_model_kv_params(rk->m, &kp);
            ix_model_ctx_params cp = ix_model_ctx_default_params();
            cp.max_batch_tokens = sh->max_tokens;
            cp.n_threads = 1;
            sh->status[rk->id] = ix_kv_create(&kp, &kv, &err);
            if (sh->status[rk->id] == IX_OK) sh->status[rk->id] = ix_model_ctx_create(&ctx, rk->m, kv, &cp, &err);
            pthread_barrier_wait(&sh->bar);
            continue;
        }
        ix_model_plan plan = sh->plan;
        if (ix_model_forward_plan(ctx, &plan) != IX_OK) { /* cmocka asserts belong to the main thread */
            fprintf(stderr, "rank %d: %s\n", (int)rk->id, ix_model_ctx_errmsg(ctx));
            abort();
        }
    }
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    return NULL;
}

/* ---- the script both runs follow --------------------------------------------- */
typedef struct outputs {
    float *logits; /* (rows, n_vocab) every output row of every pass, in order */
    size_t n_rows;
    float *hidden; /* (2, n_embd) of the last pass, by forward_hidden */
} outputs;

static void pass(ix_model_ctx *c, ix_kv *kv, const int32_t *seqs, const int32_t *n_new, int n_seqs,
                 const ix_token *toks, outputs *o, size_t V, bool hidden) {
    ix_token tk[64];
    int32_t pos[64], sq[64];
    uint8_t out[64];
    int32_t T = 0;
    for (int i = 0; i < n_seqs; i++) {
        int32_t at = ix_kv_seq_n_tokens(kv, seqs[i]);
        assert_int_equal(ix_kv_seq_append(kv, seqs[i], n_new[i], NULL), IX_OK);
        for (int32_t k = 0; k < n_new[i]; k++, T++) {
            tk[T] = toks[T];
            pos[T] = at + k;
            sq[T] = seqs[i];
            out[T] = k == n_new[i] - 1;
        }
    }
    ix_batch b = {.n_tokens = T, .tokens = tk, .pos = pos, .seq = sq, .output = out};
    if (hidden) {
        assert_int_equal(ix_model_forward_hidden(c, &b, o->hidden), IX_OK);
    } else {
        assert_int_equal(ix_model_forward(c, &b, o->logits + o->n_rows * V), IX_OK);
        o->n_rows += (size_t)n_seqs;
    }
    for (int i = 0; i < n_seqs; i++) ix_kv_seq_commit(kv, seqs[i], ix_kv_seq_n_tokens(kv, seqs[i]));
}

/* Prefill 21 tokens in chunks of 13 and 8 (the last block partial), fork,
 * decode both sequences together (the first append into the shared partial
 * block copies it), then the hidden states of one more step. */
static void script(ix_model_ctx *c, ix_kv *kv, outputs *o, size_t V) {
    ix_token prompt[21];
    for (int i = 0; i < 21; i++) prompt[i] = (ix_token)(1 + (i * 97) % 4000);
    int32_t a, b;
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    pass(c, kv, &a, (int32_t[]){13}, 1, prompt, o, V, false);
    pass(c, kv, &a, (int32_t[]){8}, 1, prompt + 13, o, V, false);
    assert_int_equal(ix_kv_seq_fork(kv, a, &b), IX_OK);
    for (int step = 0; step < N_DECODE; step++) {
        ix_token next[2] = {(ix_token)(100 + step * 31), (ix_token)(2000 + step * 17)};
        pass(c, kv, (int32_t[]){a, b}, (int32_t[]){1, 1}, 2, next, o, V, false);
    }
    pass(c, kv, (int32_t[]){a, b}, (int32_t[]){1, 1}, 2, (ix_token[]){5, 6}, o, V, true);
}

static ix_kv *make_kv(const ix_model *m) {
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.n_blocks = 32;
    kp.block_size = 16;
    kp.enable_prefix_cache = false;
    ix_kv *kv = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kv_create(&kp, &kv, &err), IX_OK);
    return kv;
}

static void outputs_alloc(outputs *o, const ix_model_hparams *hp) {
    o->logits = calloc((size_t)(2 + 2 * N_DECODE) * (size_t)hp->n_vocab, sizeof(float));
    o->hidden = calloc(2 * (size_t)hp->n_embd, sizeof(float));
    o->n_rows = 0;
    assert_non_null(o->logits);
    assert_non_null(o->hidden);
}

static void run_one(outputs *o) {
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    assert_int_equal(ix_model_load(&m, MODEL, &err), IX_OK);
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    outputs_alloc(o, hp);
    ix_kv *kv = make_kv(m);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.n_threads = 1;
    ix_model_ctx *c = NULL;
    assert_int_equal(ix_model_ctx_create(&c, m, kv, &cp, &err), IX_OK);
    script(c, kv, o, (size_t)hp->n_vocab);
    ix_model_ctx_destroy(c);
    ix_kv_destroy(kv);
    ix_model_destroy(m);
}

/* tp ranks in each of pp stages (rank r: rank r % tp of stage r / tp);
 * micro: rank 0's micro-batches a step (0: one per stage). */
static void run_dist(int32_t tp, int32_t pp, int32_t micro, outputs *o) {
    shared *shp = calloc(1, sizeof *shp);
    assert_non_null(shp);
    shared *sh = shp;
    int32_t n_ranks = tp * pp;
    sh->n_ranks = n_ranks;
    sh->tp = tp;
    sh->pp = pp;
    pthread_barrier_init(&sh->bar, NULL, (unsigned)n_ranks);
    for (int32_t st = 0; st < pp; st++) pthread_barrier_init(&sh->gbar[st], NULL, (unsigned)tp);
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->cv, NULL);
    rank rk[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    ix_errbuf err = {{0}};
    int32_t layers = 0;
    for (int32_t r = 0; r < n_ranks; r++) {
        rk[r] = (rank){.sh = sh, .id = r};
        rk[r].comm = (ix_model_comm){.user = &rk[r], .rank = r % tp, .n_ranks = tp, .stage = r / tp,
                                     .n_stages = pp, .micro_batches = micro, .allgather = t_exchange,
                                     .gather = t_exchange, .start = t_start, .step = t_step, .send = t_send,
                                     .recv = t_recv, .flush = t_flush};
        assert_int_equal(ix_model_load_shard(&rk[r].m, MODEL, &rk[r].comm, NULL, NULL, &err), IX_OK);
        ix_model_shard_info si;
        ix_model_get_shard(rk[r].m, &si);
        assert_int_equal(si.rank, r % tp);
        assert_true(si.n_q > 0 && si.n_kv > 0 && si.n_ff > 0 && si.n_vocab > 0 && si.n_layer > 0);
        assert_true(ix_model_is_sharded(rk[r].m) == (n_ranks > 1));
        /* the stages' layers: contiguous, in order, all of them */
        if (r % tp == 0) {
            assert_int_equal(si.layer0, layers);
            layers += si.n_layer;
        }
    }
    assert_int_equal(layers, ix_model_get_hparams(rk[0].m)->n_layer);
    for (int32_t r = 1; r < n_ranks; r++) assert_int_equal(pthread_create(&th[r], NULL, worker_main, &rk[r]), 0);
    const ix_model_hparams *hp = ix_model_get_hparams(rk[0].m);
    outputs_alloc(o, hp);
    ix_kv *kv = make_kv(rk[0].m);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.n_threads = 1;
    ix_model_ctx *c = NULL;
    assert_int_equal(ix_model_ctx_create(&c, rk[0].m, kv, &cp, &err), IX_OK);
    script(c, kv, o, (size_t)hp->n_vocab);
    /* rank 0 runs no plans */
    ix_model_plan none = {0};
    assert_int_equal(ix_model_forward_plan(c, &none), IX_ERR_STATE);
    ix_model_ctx_destroy(c);
    ix_kv_destroy(kv);
    t_stop(sh);
    for (int32_t r = 1; r < n_ranks; r++) pthread_join(th[r], NULL);
    for (int32_t r = 0; r < n_ranks; r++) ix_model_destroy(rk[r].m);
    for (int32_t a = 0; a < MAX_RANKS; a++) /* every message was received */
        for (int32_t b = 0; b < MAX_RANKS; b++) assert_int_equal(sh->n_box[a][b], 0);
    pthread_barrier_destroy(&sh->bar);
    for (int32_t st = 0; st < pp; st++) pthread_barrier_destroy(&sh->gbar[st]);
    pthread_mutex_destroy(&sh->mu);
    pthread_cond_destroy(&sh->cv);
    free(shp);
}

static void check_same(int32_t n_tp, int32_t n_pp, int32_t micro) {
    outputs one, tp;
    run_one(&one);
    run_dist(n_tp, n_pp, micro, &tp);
    assert_int_equal(one.n_rows, tp.n_rows);
    ix_model *m = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_load(&m, MODEL, &err), IX_OK);
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    size_t V = (size_t)hp->n_vocab, E = (size_t)hp->n_embd;
    for (size_t i = 0; i < one.n_rows; i++)
        if (memcmp(one.logits + i * V, tp.logits + i * V, V * sizeof(float))) fail_msg("logit row %zu differs", i);
    assert_memory_equal(one.hidden, tp.hidden, 2 * E * sizeof(float));
    ix_model_destroy(m);
    free(one.logits), free(one.hidden), free(tp.logits), free(tp.hidden);
}

static void test_two_ranks(void **state) {
    (void)state;
    check_same(2, 1, 0);
}

/* 6 heads over 3 ranks: the middle one holds query heads of both KV heads
 * (each KV head held by two ranks). */
static void test_three_ranks(void **state) {
    (void)state;
    check_same(3, 1, 0);
}

/* 2 stages of 3 layers (the 13-token chunk in 2 micro-batches), 3 stages
 * of 2 in 4 micro-batches (decode steps of 2 tokens: 2), and 2 stages of 2
 * tensor-parallel ranks. */
static void test_pipeline(void **state) {
    (void)state;
    check_same(1, 2, 0);
    check_same(1, 3, 4);
    check_same(2, 2, 0);
}

/* Loading c's shard fails as invalid, saying why (NULL: anything). */
static void refused(const ix_model_comm *c, const char *why) {
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    assert_int_equal(ix_model_load_shard(&m, MODEL, c, NULL, NULL, &err), IX_ERR_INVALID);
    assert_null(m);
    if (why && !strstr(err.msg, why)) fail_msg("'%s' does not say '%s'", err.msg, why);
}

/* Too many ranks, a bad rank, more stages than layers, a bad stage. */
static void test_refusals(void **state) {
    (void)state;
    ix_model_comm c = {.rank = 0, .n_ranks = 7, .allgather = t_exchange, .gather = t_exchange, .start = t_start,
                       .step = t_step};
    refused(&c, "at most one rank per head");
    c.n_ranks = 2;
    c.rank = 2;
    refused(&c, NULL);
    c.n_ranks = 1;
    c.rank = 0;
    c.n_stages = 7;
    refused(&c, "at most one stage per layer");
    c.n_stages = 2;
    c.stage = 2;
    refused(&c, NULL);
    /* an engine over a pipeline stage refuses the swap and disk tiers (they
     * would move K/V in rank 0's pool only); nothing is started before */
    c.stage = 0;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    assert_int_equal(ix_model_load_shard(&m, MODEL, &c, NULL, NULL, &err), IX_OK);
    ix_engine_params ep = ix_engine_default_params();
    ep.sched.preempt = IX_PREEMPT_SWAP;
    ix_engine *e = NULL;
    assert_int_equal(ix_engine_create(&e, m, &ep, &err), IX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "pipeline parallelism"));
    ep.sched.preempt = IX_PREEMPT_RECOMPUTE;
    ep.kv_disk_dir = "/nonexistent-kv-dir";
    assert_int_equal(ix_engine_create(&e, m, &ep, &err), IX_ERR_UNSUPPORTED);
    assert_null(e);
    ix_model_destroy(m);
}

/* A rank checks every plan against its pool: a block outside it, a table
 * that does not reach the position, a copy outside the pool. */
static void test_bad_plans(void **state) {
    (void)state;
    shared sh = {.n_ranks = 2, .tp = 2, .pp = 1};
    pthread_barrier_init(&sh.bar, NULL, 1);
    rank rk = {.sh = &sh, .id = 1};
    rk.comm = (ix_model_comm){.user = &rk, .rank = 1, .n_ranks = 2, .allgather = t_exchange, .gather = t_exchange,
                              .start = t_start, .step = t_step};
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_load_shard(&rk.m, MODEL, &rk.comm, NULL, NULL, &err), IX_OK);
    ix_kv *kv = make_kv(rk.m);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.n_threads = 1;
    ix_model_ctx *c = NULL;
    assert_int_equal(ix_model_ctx_create(&c, rk.m, kv, &cp, &err), IX_OK);
    /* a rank other than 0 runs plans only */
    ix_batch none = {0};
    assert_int_equal(ix_model_forward(c, &none, NULL), IX_ERR_STATE);
    ix_token tok = 5;
    int32_t pos = 20, seq = 0, n_blocks = 2, far[2] = {0, 999}, copies[2] = {1, 4000};
    uint8_t out = 1;
    const int32_t *tables[1] = {far};
    ix_model_plan p = {.batch = {.n_tokens = 1, .tokens = &tok, .pos = &pos, .seq = &seq, .output = &out},
                       .tables = tables, .n_blocks = &n_blocks};
    assert_int_equal(ix_model_forward_plan(c, &p), IX_ERR_RANGE);
    assert_non_null(strstr(ix_model_ctx_errmsg(c), "outside the pool"));
    n_blocks = 1;
    assert_int_equal(ix_model_forward_plan(c, &p), IX_ERR_RANGE);
    n_blocks = 2;
    far[1] = 3;
    p.copies = copies;
    p.n_copies = 1;
    assert_int_equal(ix_model_forward_plan(c, &p), IX_ERR_RANGE);
    assert_non_null(strstr(ix_model_ctx_errmsg(c), "block copy"));
    ix_model_ctx_destroy(c);
    ix_kv_destroy(kv);
    ix_model_destroy(rk.m);
    pthread_barrier_destroy(&sh.bar);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_three_ranks),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bad_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
