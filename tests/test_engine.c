/* engine + sched: continuous batching on the bundled model.
 *   - the one generation loop: a thread-less engine stepped by its caller
 *     (how `inferx run` and `inferx bench` drive it) gives the tokens and
 *     text of a plain loop over model + KV cache + sampler
 *   - the text stream (detokenizer + stop filter, the one copy every client
 *     sees): UTF-8 characters split across tokens, stop strings spanning
 *     tokens, what the end of a choice releases
 *   - batch invariance: greedy tokens alone == batched with chunked prefill,
 *     also with the stall-free budget (decodes beside one-block chunks)
 *   - preemption invariance (recompute and swap) under a tiny KV pool, with
 *     and without the stall-free budget
 *   - prefix-cache invariance (hit or miss, same tokens; cached tokens reported)
 *   - a q8_0 KV cache: batching, preemption (recompute and swap), prefix
 *     hits and copy-on-write forks give its alone-tokens exactly; its greedy
 *     tokens stay close to f16's (test_quantized_kv states the criterion)
 *   - cancel frees every block; the pool is empty after every test
 *   - n > 1 forks the prefilled prompt; policies order work as documented
 *   - bad requests are refused at submit
 *   - constrained decoding: outputs match their grammar or schema with every
 *     sampler setting, n > 1, ignore_eos; bad grammars refused at submit */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "inferx/engine.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define N_REQ 8
#define N_NEW 24

static ix_model *g_model;
static ix_token_vec g_prompts[N_REQ];

static const char *const k_texts[N_REQ] = {
    "It was on this point that she had",
    "To Anne herself it was most distressing to",
    "She then found that it consisted of Mrs",
    "They found Mrs Musgrove and her daughter within",
    "Charles and Mary still talked on in the",
    "Mr. Darcy",
    ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
     "must be in want of a wife. However little known the feelings or views of such a man may be"),
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition,",
};

static int setup(void **state) {
    (void)state;
    ix_errbuf err;
    if (ix_model_load(&g_model, MODEL, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    for (int i = 0; i < N_REQ; i++)
        ix_tokenizer_encode(t, k_texts[i], strlen(k_texts[i]), IX_TOK_ADD_SPECIAL, &g_prompts[i], NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_REQ; i++) ix_token_vec_free(&g_prompts[i]);
    ix_model_destroy(g_model);
    return 0;
}

static ix_engine *mk_engine(ix_engine_params p) {
    ix_engine *e;
    ix_errbuf err = {{0}};
    p.n_threads = 2;
    if (ix_engine_create(&e, g_model, &p, &err) != IX_OK) fail_msg("engine: %s", err.msg);
    return e;
}

static ix_request_params greedy_req(int i) {
    ix_request_params r = ix_request_default_params();
    r.prompt = g_prompts[i].ids;
    r.n_prompt = g_prompts[i].n;
    r.sample.temperature = 0;
    r.max_tokens = N_NEW;
    r.ignore_eos = true;
    return r;
}

static void assert_pool_empty(ix_engine *e) {
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    assert_int_equal(st.kv.n_blocks_used, 0);
    assert_int_equal(st.n_running + st.n_waiting + st.n_swapped, 0);
}

/* Reference: each prompt alone, whole-prompt prefill, ample memory. */
static ix_token g_ref[N_REQ][N_NEW];

static void run_all(ix_engine *e, ix_generation *g) {
    ix_request_params reqs[N_REQ];
    for (int i = 0; i < N_REQ; i++) reqs[i] = greedy_req(i);
    ix_errbuf err = {{0}};
    assert_int_equal(ix_engine_generate(e, reqs, N_REQ, g, &err), IX_OK);
}

static void check_same(ix_generation *g, ix_token (*ref)[N_NEW], const char *what) {
    for (int i = 0; i < N_REQ; i++) {
        if (g[i].info.reason != IX_FINISH_LENGTH)
            fail_msg("%s: request %d finished as %s: %s", what, i, ix_finish_reason_name(g[i].info.reason),
                     g[i].info.message);
        assert_int_equal(g[i].tokens[0].n, N_NEW);
        for (int k = 0; k < N_NEW; k++)
            if (g[i].tokens[0].ids[k] != ref[i][k])
                fail_msg("%s: request %d token %d is %d, alone it is %d", what, i, k, g[i].tokens[0].ids[k],
                         ref[i][k]);
        ix_generation_free(&g[i]);
    }
}

static void check_same_as_ref(ix_generation *g, const char *what) { check_same(g, g_ref, what); }

static void test_reference_and_batch_invariance(void **state) {
    (void)state;
    ix_engine_params p = ix_engine_default_params();
    p.enable_prefix_cache = false;
    ix_engine *e = mk_engine(p);
    for (int i = 0; i < N_REQ; i++) {
        ix_request_params r = greedy_req(i);
        ix_generation g;
        assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
        assert_int_equal(g.tokens[0].n, N_NEW);
        memcpy(g_ref[i], g.tokens[0].ids, sizeof g_ref[i]);
        assert_int_equal(g.info.usage.prompt_tokens, (int)g_prompts[i].n);
        assert_int_equal(g.info.usage.completion_tokens, N_NEW);
        assert_true(g.info.timings.first_token_ms > 0);
        /* alone, it is every step's only request */
        assert_true(g.info.timings.compute_ms > 0 && g.info.timings.compute_ms <= g.info.timings.total_ms);
        ix_generation_free(&g);
    }
    assert_pool_empty(e);
    ix_engine_destroy(e);

    /* All at once, prefill in chunks of 5 tokens mixed with decodes. */
    p.sched.max_num_batched_tokens = 5 + N_REQ;
    e = mk_engine(p);
    ix_generation g[N_REQ];
    uint64_t t0 = ix_time_ns();
    run_all(e, g);
    double wall_ms = (double)(ix_time_ns() - t0) / 1e6, shares = 0;
    for (int i = 0; i < N_REQ; i++) shares += g[i].info.timings.compute_ms;
    /* the shares of the steps add up to at most the time the batch took */
    assert_true(shares > 0 && shares <= wall_ms);
    check_same_as_ref(g, "batched, chunked prefill");
    assert_pool_empty(e);
    ix_engine_destroy(e);

    /* A target step time no step can meet: while anything decodes, prefill
     * moves one block per sequence per step beside the decodes. */
    p.sched.max_num_batched_tokens = 512;
    p.sched.target_step_ms = 1e-3;
    e = mk_engine(p);
    run_all(e, g);
    check_same_as_ref(g, "batched, stall-free budget");
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    assert_true(st.step_cost_per_token_ms > 0);
    /* The profile counts every computed token once (a prompt's cached
     * prefix and each request's last token are not computed), and its
     * stages fit in the forward pass's time. */
    assert_int_equal(st.forward.n_tokens,
                     st.n_prompt_tokens - st.n_cached_prompt_tokens + st.n_generated_tokens - N_REQ);
    assert_int_equal(st.forward.n_forward, st.n_steps);
    assert_true(st.forward.matmul_ns > 0 && st.forward.attention_ns > 0 && st.forward.rows_ns > 0);
    assert_true(st.forward.output_ns > 0 && st.plan_ns > 0 && st.sample_ns > 0);
    assert_true(st.forward_ns >=
                st.forward.matmul_ns + st.forward.attention_ns + st.forward.rows_ns + st.forward.output_ns);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

static void preemption_kv(ix_preempt_mode mode, double target_step_ms, ix_kv_dtype kv_dtype,
                          ix_token (*ref)[N_NEW]) {
    ix_engine_params p = ix_engine_default_params();
    p.kv_dtype = kv_dtype;
    p.sched.preempt = mode;
    p.sched.target_step_ms = target_step_ms;
    p.kv_blocks = 9; /* 144 token slots for 8 requests of 7-45 prompt + 24 new tokens */
    p.kv_block_size = 16;
    p.kv_swap_blocks = 64;
    ix_engine *e = mk_engine(p);
    ix_generation g[N_REQ];
    run_all(e, g);
    check_same(g, ref, ix_preempt_mode_name(mode));
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    fprintf(stderr, "  %s KV, %s, target %g ms: %llu recompute, %llu swap preemptions\n",
            ix_kv_dtype_name(kv_dtype), ix_preempt_mode_name(mode), target_step_ms,
            (unsigned long long)st.n_preempt_recompute, (unsigned long long)st.n_preempt_swap);
    if (mode == IX_PREEMPT_SWAP)
        assert_true(st.n_preempt_swap > 0);
    else
        assert_true(st.n_preempt_recompute > 0);
    assert_int_equal(st.n_finished, N_REQ);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

static void preemption(ix_preempt_mode mode, double target_step_ms) {
    preemption_kv(mode, target_step_ms, IX_KV_F16, g_ref);
}

static void test_preemption_recompute(void **state) {
    (void)state;
    preemption(IX_PREEMPT_RECOMPUTE, 0);
    preemption(IX_PREEMPT_RECOMPUTE, 1e-3); /* the stall-free budget at its floor */
}

static void test_preemption_swap(void **state) {
    (void)state;
    preemption(IX_PREEMPT_SWAP, 0);
    preemption(IX_PREEMPT_SWAP, 1e-3);
}

static void test_prefix_cache(void **state) {
    (void)state;
    ix_engine *e = mk_engine(ix_engine_default_params());
    int i = 6; /* the longest prompt: several full blocks */
    for (int round = 0; round < 2; round++) {
        ix_request_params r = greedy_req(i);
        ix_generation g;
        assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
        assert_memory_equal(g.tokens[0].ids, g_ref[i], sizeof g_ref[i]);
        if (round == 0)
            assert_int_equal(g.info.usage.cached_prompt_tokens, 0);
        else
            assert_true(g.info.usage.cached_prompt_tokens >= 16);
        ix_generation_free(&g);
    }
    /* Another namespace never sees those blocks. */
    ix_request_params r = greedy_req(i);
    r.cache_ns = 42;
    ix_generation g;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
    assert_int_equal(g.info.usage.cached_prompt_tokens, 0);
    assert_memory_equal(g.tokens[0].ids, g_ref[i], sizeof g_ref[i]);
    ix_generation_free(&g);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

/* A q8_0 KV cache (blocks are opaque bytes to the KV manager, quantized by
 * the forward pass): its tokens for each prompt alone are the reference that
 * chunked batching, preemption by recompute and by swap, a prefix-cache hit
 * and n > 1 forks (copy-on-write of the shared partial block) must give
 * exactly, as for f16. Against f16, greedy decoding may part after a near
 * tie; the criterion: at least 6 of the 8 requests give f16's 24 tokens
 * exactly (measured: 7; the other parts from f16 at its third token). */
static void test_quantized_kv(void **state) {
    (void)state;
    static ix_token ref[N_REQ][N_NEW];
    ix_engine_params p = ix_engine_default_params();
    p.kv_dtype = IX_KV_Q8_0;
    p.enable_prefix_cache = false;
    ix_engine *e = mk_engine(p);
    int same = 0;
    for (int i = 0; i < N_REQ; i++) {
        ix_request_params r = greedy_req(i);
        ix_generation g;
        assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
        assert_int_equal(g.tokens[0].n, N_NEW);
        memcpy(ref[i], g.tokens[0].ids, sizeof ref[i]);
        same += !memcmp(ref[i], g_ref[i], sizeof ref[i]);
        ix_generation_free(&g);
    }
    fprintf(stderr, "  q8_0 KV: %d of %d requests give f16's %d greedy tokens exactly\n", same, N_REQ, N_NEW);
    assert_true(same >= 6);
    ix_engine_destroy(e);

    p.sched.max_num_batched_tokens = 5 + N_REQ; /* chunked prefill beside decodes */
    e = mk_engine(p);
    ix_generation gs[N_REQ];
    run_all(e, gs);
    check_same(gs, ref, "q8_0, batched, chunked prefill");
    assert_pool_empty(e);
    ix_engine_destroy(e);

    preemption_kv(IX_PREEMPT_RECOMPUTE, 0, IX_KV_Q8_0, ref);
    preemption_kv(IX_PREEMPT_SWAP, 0, IX_KV_Q8_0, ref);

    /* Prefix hit, then n = 3 forks of the cached prompt. */
    p = ix_engine_default_params();
    p.kv_dtype = IX_KV_Q8_0;
    e = mk_engine(p);
    int i = 6; /* the longest prompt: several full blocks */
    for (int round = 0; round < 2; round++) {
        ix_request_params r = greedy_req(i);
        r.n = round ? 3 : 1;
        ix_generation g;
        assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
        for (int c = 0; c < r.n; c++) assert_memory_equal(g.tokens[c].ids, ref[i], sizeof ref[i]);
        if (round) assert_true(g.info.usage.cached_prompt_tokens >= 16);
        ix_generation_free(&g);
    }
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    assert_true(st.kv.n_forks >= 2 && st.kv.n_cow_copies >= 1);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

typedef struct cancel_ctx {
    ix_engine *e;
    int n_tokens;
    ix_finish_reason reason;
    bool finished;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} cancel_ctx;

static void cancel_on_token(void *user, const ix_token_event *ev) {
    cancel_ctx *c = user;
    if (++c->n_tokens == 3) ix_engine_cancel(c->e, ev->id);
}

static void cancel_on_finish(void *user, const ix_finish_info *info) {
    cancel_ctx *c = user;
    pthread_mutex_lock(&c->mu);
    c->reason = info->reason;
    c->finished = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void test_cancel(void **state) {
    (void)state;
    ix_engine *e = mk_engine(ix_engine_default_params());
    cancel_ctx c = {e, 0, IX_FINISH_NONE, false, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    ix_request_params r = greedy_req(0);
    r.max_tokens = 400;
    r.cb = (ix_request_callbacks){cancel_on_token, cancel_on_finish, &c, NULL};
    uint64_t id;
    assert_int_equal(ix_engine_submit(e, &r, &id, NULL), IX_OK);
    pthread_mutex_lock(&c.mu);
    while (!c.finished) pthread_cond_wait(&c.cv, &c.mu);
    pthread_mutex_unlock(&c.mu);
    assert_int_equal(c.reason, IX_FINISH_ABORT);
    assert_true(c.n_tokens >= 3 && c.n_tokens <= 5); /* stopped within a step or two */
    ix_engine_cancel(e, id);                         /* unknown now: ignored */
    ix_engine_cancel(e, 999999);
    ix_engine_destroy(e); /* the thread has published the freed pool before finishing */
}

static void test_n_choices(void **state) {
    (void)state;
    ix_engine *e = mk_engine(ix_engine_default_params());
    ix_request_params r = greedy_req(1);
    r.n = 3;
    ix_generation g;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
    assert_int_equal(g.info.n_choices, 3);
    for (int c = 0; c < 3; c++) {
        assert_int_equal(g.tokens[c].n, N_NEW);
        assert_memory_equal(g.tokens[c].ids, g_ref[1], sizeof g_ref[1]); /* greedy: all equal */
    }
    assert_int_equal(g.info.usage.completion_tokens, 3 * N_NEW);
    ix_generation_free(&g);
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    assert_true(st.kv.n_forks >= 2);

    r.sample.temperature = 1.0f;
    r.sample.seed = 5;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
    bool differ = memcmp(g.tokens[0].ids, g.tokens[1].ids, N_NEW * sizeof(ix_token)) != 0 ||
                  memcmp(g.tokens[0].ids, g.tokens[2].ids, N_NEW * sizeof(ix_token)) != 0;
    assert_true(differ);
    /* Same seed again: same three streams. */
    ix_generation g2;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g2, NULL), IX_OK);
    for (int c = 0; c < 3; c++) assert_memory_equal(g.tokens[c].ids, g2.tokens[c].ids, N_NEW * sizeof(ix_token));
    ix_generation_free(&g);
    ix_generation_free(&g2);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

/* Completion order under each policy, one sequence at a time. */
typedef struct order_ctx {
    uint64_t ids[8];
    ix_finish_reason reasons[8];
    int n;
} order_ctx;

static void order_on_finish(void *user, const ix_finish_info *info) {
    order_ctx *o = user;
    o->reasons[o->n] = info->reason;
    o->ids[o->n++] = info->id;
}

static void test_policies(void **state) {
    (void)state;
    ix_engine_params p = ix_engine_default_params();
    p.start_thread = false;
    p.sched.max_num_seqs = 1;
    /* priority: higher first, ties in arrival order */
    p.sched.policy = IX_SCHED_PRIORITY;
    ix_engine *e = mk_engine(p);
    order_ctx o = {{0}, {0}, 0};
    int prios[4] = {0, 5, 1, 5};
    uint64_t ids[4];
    for (int i = 0; i < 4; i++) {
        ix_request_params r = greedy_req(i);
        r.max_tokens = 2;
        r.priority = prios[i];
        r.cb = (ix_request_callbacks){NULL, order_on_finish, &o, NULL};
        assert_int_equal(ix_engine_submit(e, &r, &ids[i], NULL), IX_OK);
    }
    bool did = true;
    while (o.n < 4) assert_int_equal(ix_engine_step(e, &did), IX_OK);
    assert_int_equal(o.ids[0], ids[1]);
    assert_int_equal(o.ids[1], ids[3]);
    assert_int_equal(o.ids[2], ids[2]);
    assert_int_equal(o.ids[3], ids[0]);
    ix_engine_destroy(e);

    /* deadline: earliest first, no deadline last; a passed deadline is shed */
    p.sched.policy = IX_SCHED_DEADLINE;
    e = mk_engine(p);
    memset(&o, 0, sizeof o);
    int64_t dl[4] = {60000, 0, 20000, 1};
    for (int i = 0; i < 4; i++) {
        ix_request_params r = greedy_req(i);
        r.max_tokens = 2;
        r.deadline_ms = dl[i];
        r.cb = (ix_request_callbacks){NULL, order_on_finish, &o, NULL};
        assert_int_equal(ix_engine_submit(e, &r, &ids[i], NULL), IX_OK);
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL); /* request 3's 1 ms deadline passes while it waits */
    while (o.n < 4) assert_int_equal(ix_engine_step(e, &did), IX_OK);
    assert_int_equal(o.ids[0], ids[3]);
    assert_int_equal(o.reasons[0], IX_FINISH_DEADLINE);
    assert_int_equal(o.ids[1], ids[2]);
    assert_int_equal(o.ids[2], ids[0]);
    assert_int_equal(o.ids[3], ids[1]);
    assert_int_equal(o.reasons[3], IX_FINISH_LENGTH);
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    assert_int_equal(st.n_deadline_shed, 1);
    ix_engine_destroy(e);

    /* fcfs */
    p.sched.policy = IX_SCHED_FCFS;
    e = mk_engine(p);
    memset(&o, 0, sizeof o);
    for (int i = 0; i < 4; i++) {
        ix_request_params r = greedy_req(i);
        r.max_tokens = 2;
        r.priority = prios[i]; /* ignored */
        r.cb = (ix_request_callbacks){NULL, order_on_finish, &o, NULL};
        assert_int_equal(ix_engine_submit(e, &r, &ids[i], NULL), IX_OK);
    }
    while (o.n < 4) assert_int_equal(ix_engine_step(e, &did), IX_OK);
    for (int i = 0; i < 4; i++) assert_int_equal(o.ids[i], ids[i]);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

typedef struct count_ctx {
    int n_tokens;
    bool finished;
    ix_finish_info info;
} count_ctx;

static void count_on_token(void *user, const ix_token_event *ev) {
    count_ctx *c = user;
    c->n_tokens += ev->token >= 0;
}

static void count_on_finish(void *user, const ix_finish_info *info) {
    count_ctx *c = user;
    c->finished = true;
    c->info = *info;
}

/* A short request that arrives while a long prompt is being prefilled
 * starts in the next step -- its first chunk, here its whole prompt, runs
 * there and its first token comes out of it -- and the long prompt, which
 * is older, keeps the rest of the budget. */
static void test_new_request_next_step(void **state) {
    (void)state;
    ix_request_params ra = greedy_req(6), rb = greedy_req(5); /* ~45 and ~4 tokens */
    ix_engine_params p = ix_engine_default_params();
    p.start_thread = false;
    p.sched.max_num_batched_tokens = 16 + (int32_t)rb.n_prompt; /* one block of A beside all of B */
    p.sched.target_step_ms = 0;
    p.enable_prefix_cache = false;
    ix_engine *e = mk_engine(p);
    count_ctx a = {0}, b = {0};
    assert_true(ra.n_prompt > 32 + rb.n_prompt && rb.n_prompt <= 16);
    ra.cb = (ix_request_callbacks){count_on_token, count_on_finish, &a, NULL};
    rb.cb = (ix_request_callbacks){count_on_token, count_on_finish, &b, NULL};
    assert_int_equal(ix_engine_submit(e, &ra, NULL, NULL), IX_OK);
    bool did;
    assert_int_equal(ix_engine_step(e, &did), IX_OK); /* a budget's worth of A */
    assert_int_equal(ix_engine_submit(e, &rb, NULL, NULL), IX_OK);
    assert_int_equal(ix_engine_step(e, &did), IX_OK); /* A's next chunk beside all of B */
    assert_int_equal(b.n_tokens, 1);
    assert_int_equal(a.n_tokens, 0);
    assert_true(ix_engine_run_until(e, &a.finished, 0) == IX_OK && ix_engine_run_until(e, &b.finished, 0) == IX_OK);
    assert_int_equal(a.info.reason, IX_FINISH_LENGTH);
    assert_int_equal(b.info.reason, IX_FINISH_LENGTH);
    assert_true(b.info.timings.queue_ms <= b.info.timings.first_token_ms);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

static void test_stops_and_bad_requests(void **state) {
    (void)state;
    ix_engine *e = mk_engine(ix_engine_default_params());
    /* The reference continuation of prompt 0 contains "whole party": stop there. */
    ix_request_params r = greedy_req(0);
    const char *stop[] = {"whole"};
    r.stop = stop;
    r.n_stop = 1;
    ix_generation g;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
    assert_int_equal(g.info.reason, IX_FINISH_STOP);
    assert_non_null(g.text[0].data);
    assert_null(strstr(g.text[0].data, "whole"));
    assert_string_equal(g.text[0].data, " been able to give up the ");
    ix_generation_free(&g);

    r = greedy_req(0);
    r.stop_token_ids = &g_ref[0][2];
    r.n_stop_token_ids = 1;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
    assert_int_equal(g.info.reason, IX_FINISH_STOP);
    assert_int_equal(g.tokens[0].n, 3);
    ix_generation_free(&g);

    ix_errbuf err = {{0}};
    r = greedy_req(0);
    r.n_prompt = 0;
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_INVALID);
    static ix_token long_prompt[600];
    for (int i = 0; i < 600; i++) long_prompt[i] = 100;
    r = greedy_req(0);
    r.prompt = long_prompt;
    r.n_prompt = 600;
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_TOO_LONG);
    assert_non_null(strstr(err.msg, "context"));
    long_prompt[3] = 4096;
    r.n_prompt = 10;
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_INVALID);
    r = greedy_req(0);
    r.sample.top_p = 2;
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_INVALID);
    r = greedy_req(0);
    r.n = 17;
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_INVALID);
    bool done = false; /* an engine with a thread is not stepped by callers */
    assert_int_equal(ix_engine_run_until(e, &done, 1), IX_ERR_STATE);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

/* ---- the one generation loop ---------------------------------------------------------------- */

/* The reference: one sequence over model + KV cache + sampler, the prompt in
 * chunks of `chunk` tokens, then one token at a time, each fed back (what
 * `inferx run` did before it drove the engine). Tokens into out. */
static void model_loop(const ix_token_vec *prompt, const ix_sample_params *sp, int32_t n_new, int32_t chunk,
                       ix_token_vec *out) {
    const ix_model_hparams *hp = ix_model_get_hparams(g_model);
    ix_errbuf err = {{0}};
    ix_kv *kv;
    ix_model_ctx *ctx;
    ix_sampler *smp;
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(g_model, &kp);
    kp.n_blocks = (hp->n_ctx_train + kp.block_size - 1) / kp.block_size;
    kp.enable_prefix_cache = false;
    assert_int_equal(ix_kv_create(&kp, &kv, &err), IX_OK);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = chunk;
    cp.n_threads = 2;
    assert_int_equal(ix_model_ctx_create(&ctx, g_model, kv, &cp, &err), IX_OK);
    assert_int_equal(ix_sampler_create(&smp, sp, hp->n_vocab, &err), IX_OK);
    assert_int_equal(ix_sampler_add_prompt(smp, prompt->ids, prompt->n), IX_OK);
    float *logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    int32_t *pos = malloc((size_t)chunk * sizeof *pos), *seq = malloc((size_t)chunk * sizeof *seq);
    uint8_t *want = malloc((size_t)chunk);
    assert_true(logits && pos && seq && want);
    int32_t sq, n_kv = 0;
    assert_int_equal(ix_kv_seq_create(kv, 0, &sq), IX_OK);
    ix_token next = IX_TOKEN_NONE;
    for (size_t done = 0; (int32_t)out->n < n_new;) {
        const ix_token *src = &next;
        int32_t k = 1;
        if (done < prompt->n) {
            src = prompt->ids + done;
            k = prompt->n - done < (size_t)chunk ? (int32_t)(prompt->n - done) : chunk;
            done += (size_t)k;
        }
        assert_int_equal(ix_kv_seq_append(kv, sq, k, src), IX_OK);
        for (int32_t j = 0; j < k; j++) {
            pos[j] = n_kv + j;
            seq[j] = sq;
            want[j] = j == k - 1;
        }
        ix_batch b = {k, src, pos, seq, want};
        assert_int_equal(ix_model_forward(ctx, &b, logits), IX_OK);
        ix_kv_seq_commit(kv, sq, n_kv += k);
        if (done < prompt->n) continue;
        ix_sample_result r;
        assert_int_equal(ix_sampler_sample(smp, logits, &r), IX_OK);
        ix_sampler_accept(smp, r.id);
        assert_int_equal(ix_token_vec_push(out, r.id), IX_OK);
        next = r.id;
    }
    free(logits);
    free(pos);
    free(seq);
    free(want);
    ix_sampler_destroy(smp);
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
}

typedef struct stepped {
    ix_token_vec tokens;
    ix_buf text;
    bool finished;
    ix_finish_info info;
} stepped;

static void stepped_on_token(void *user, const ix_token_event *ev) {
    stepped *st = user;
    if (ev->token != IX_TOKEN_NONE) assert_int_equal(ix_token_vec_push(&st->tokens, ev->token), IX_OK);
    if (ev->text_len) assert_int_equal(ix_buf_append(&st->text, ev->text, ev->text_len), IX_OK);
}

static void stepped_on_finish(void *user, const ix_finish_info *info) {
    stepped *st = user;
    st->info = *info;
    st->finished = true;
}

/* A thread-less engine stepped here, one step at a time, one request, as
 * `inferx run` does it (its engine parameters): the same tokens as the plain
 * loop, and the text is the detokenization of those tokens -- greedy and
 * seeded sampling, a prompt in one chunk and in many. */
static void test_stepped_engine_is_the_model_loop(void **state) {
    (void)state;
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    const ix_model_hparams *hp = ix_model_get_hparams(g_model);
    static const struct {
        int prompt;
        float temperature;
        int32_t chunk;
    } cases[] = {{0, 0.0f, 512}, {6, 0.0f, 512}, {6, 0.0f, 8}, {0, 0.8f, 512}, {7, 0.8f, 16}};
    for (size_t k = 0; k < IX_ARRAY_LEN(cases); k++) {
        ix_sample_params sp = ix_sample_default_params();
        sp.temperature = cases[k].temperature;
        sp.top_k = 40;
        sp.top_p = 0.95f;
        sp.min_p = 0.05f;
        sp.seed = 42;
        ix_token_vec ref = {0};
        model_loop(&g_prompts[cases[k].prompt], &sp, N_NEW, cases[k].chunk, &ref);

        ix_engine_params p = ix_engine_default_params();
        p.start_thread = false;
        p.kv_blocks = (hp->n_ctx_train + p.kv_block_size - 1) / p.kv_block_size + 1;
        p.enable_prefix_cache = false;
        p.sched.max_num_seqs = 1;
        p.sched.max_num_batched_tokens = cases[k].chunk;
        ix_engine *e = mk_engine(p);
        stepped st = {0};
        ix_request_params r = ix_request_default_params();
        r.prompt = g_prompts[cases[k].prompt].ids;
        r.n_prompt = g_prompts[cases[k].prompt].n;
        r.sample = sp;
        r.max_tokens = N_NEW;
        r.ignore_eos = true;
        r.cb = (ix_request_callbacks){stepped_on_token, stepped_on_finish, &st, NULL};
        assert_int_equal(ix_engine_submit(e, &r, NULL, NULL), IX_OK);
        int steps = 0;
        while (!st.finished) {
            assert_int_equal(ix_engine_run_until(e, &st.finished, 1), IX_OK);
            steps++;
        }
        bool did = true, never = false;
        assert_int_equal(ix_engine_step(e, &did), IX_OK); /* idle now */
        assert_false(did);
        assert_int_equal(ix_engine_run_until(e, &never, 0), IX_ERR_STATE);
        /* one step per prefill chunk, then one per decoded token */
        int32_t chunks = ((int32_t)r.n_prompt + cases[k].chunk - 1) / cases[k].chunk;
        assert_int_equal(steps, chunks + N_NEW - 1);
        assert_int_equal(st.info.reason, IX_FINISH_LENGTH);
        assert_int_equal(st.tokens.n, N_NEW);
        for (int i = 0; i < N_NEW; i++)
            if (st.tokens.ids[i] != ref.ids[i])
                fail_msg("case %zu: token %d is %d, the model loop's %d", k, i, st.tokens.ids[i], ref.ids[i]);
        ix_buf want = {0};
        assert_int_equal(ix_tokenizer_decode(t, ref.ids, ref.n, IX_DETOK_KEEP_LEADING_SPACE, &want, NULL),
                         IX_OK);
        assert_int_equal(st.text.len, want.len);
        assert_memory_equal(st.text.data, want.data, want.len);
        if (k == 0) assert_memory_equal(ref.ids, g_ref[0], sizeof g_ref[0]);
        ix_buf_free(&want);
        ix_buf_free(&st.text);
        ix_token_vec_free(&st.tokens);
        ix_token_vec_free(&ref);
        assert_pool_empty(e);
        ix_engine_destroy(e);
    }
}

/* ---- the text stream ------------------------------------------------------------------------ */

/* The byte-fallback token of byte c ("<0xE2>"): any text can be spelled with them. */
static ix_token byte_token(unsigned char c) {
    char piece[8];
    snprintf(piece, sizeof piece, "<0x%02X>", c);
    ix_token id = ix_tokenizer_find(ix_model_tokenizer(g_model), piece, strlen(piece));
    assert_true(id >= 0);
    return id;
}

/* Pushes bytes one byte token each; out gets exactly what the stream shows
 * for them (cleared first). Returns whether a stop string completed. */
static bool push_bytes(ix__text_stream *ts, const char *bytes, ix_buf *out) {
    bool stopped = false;
    ix_buf_clear(out);
    for (const char *b = bytes; *b; b++)
        assert_int_equal(ix__text_stream_push(ts, byte_token((unsigned char)*b), out, &stopped), IX_OK);
    return stopped;
}

static void expect_text(const ix_buf *b, const char *want) {
    if (b->len != strlen(want) || memcmp(b->data ? b->data : "", want, b->len) != 0)
        fail_msg("the stream showed '%.*s', want '%s'", (int)b->len, b->data ? b->data : "", want);
}

/* Ends the stream (destroying it): the end releases exactly want. */
static void expect_finish(ix__text_stream *ts, ix_buf *out, const char *want) {
    ix_buf_clear(out);
    assert_int_equal(ix__text_stream_finish(ts, out), IX_OK);
    expect_text(out, want);
    ix__text_stream_destroy(ts);
}

static void test_text_stream(void **state) {
    (void)state;
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    ix__text_stream *ts;
    ix_buf out = {0};

    /* A character split across tokens shows only once it is whole ("€" is
     * E2 82 AC); an unfinished one is released as its bytes at the end. */
    assert_int_equal(ix__text_stream_create(&ts, t, NULL, 0), IX_OK);
    assert_false(push_bytes(ts, "A\xE2\x82", &out));
    expect_text(&out, "A");
    assert_false(push_bytes(ts, "\xAC", &out));
    expect_text(&out, "\xE2\x82\xAC");
    assert_false(push_bytes(ts, "\xE2\x82", &out));
    expect_text(&out, "");
    expect_finish(ts, &out, "\xE2\x82");

    /* A stop string that spans tokens and a split character: nothing of it
     * is shown, nor anything after it. */
    const char *euro_b[] = {"\xE2\x82\xAC" "B"};
    assert_int_equal(ix__text_stream_create(&ts, t, euro_b, 1), IX_OK);
    assert_false(push_bytes(ts, "x\xE2\x82\xAC", &out));
    expect_text(&out, "x"); /* "€" may start the stop string: held */
    assert_true(push_bytes(ts, "B", &out));
    expect_text(&out, "");
    assert_true(push_bytes(ts, "C", &out)); /* stopped streams take nothing */
    expect_text(&out, "");
    expect_finish(ts, &out, "");

    /* The start of a stop string is held while it may complete, shown when
     * it cannot, and released at the end when the choice ends without it. */
    const char *xyz[] = {"XYZ", ""};
    assert_int_equal(ix__text_stream_create(&ts, t, xyz, 2), IX_OK);
    assert_false(push_bytes(ts, "aXY", &out));
    expect_text(&out, "a");
    assert_false(push_bytes(ts, "Xb", &out));
    expect_text(&out, "XYXb");
    assert_false(push_bytes(ts, "XY", &out));
    expect_text(&out, "");
    expect_finish(ts, &out, "XY");
    /* ... and the end's unfinished character goes through the filter too */
    assert_int_equal(ix__text_stream_create(&ts, t, xyz, 2), IX_OK);
    assert_false(push_bytes(ts, "XY\xE2\x82", &out));
    expect_text(&out, "");
    expect_finish(ts, &out, "XY\xE2\x82");

    /* Real pieces: the SPM leading space of the first token is kept (a
     * completion continues its prompt), and "e wh" spans "▁the" and "▁whole". */
    ix_token_vec ids = {0};
    assert_int_equal(ix_tokenizer_encode(t, "the whole party", 15, 0, &ids, NULL), IX_OK);
    assert_true(ids.n >= 2);
    const char *e_wh[] = {"e wh"};
    assert_int_equal(ix__text_stream_create(&ts, t, e_wh, 1), IX_OK);
    ix_buf_clear(&out);
    bool stopped = false;
    size_t i = 0;
    while (i < ids.n && !stopped)
        assert_int_equal(ix__text_stream_push(ts, ids.ids[i++], &out, &stopped), IX_OK);
    assert_true(stopped);
    assert_int_equal(i, 2);
    expect_text(&out, " th");
    ix__text_stream_destroy(ts);
    ix_token_vec_free(&ids);
    ix__text_stream_destroy(NULL);
    ix_buf_free(&out);
}


/* ---- constrained decoding ---------------------------------------------------------------- */

/* Whether text is a viable prefix of (or, complete, a sentence of) the
 * constraint's grammar: replayed through a fresh matcher. */
static void assert_matches(const ix_constraint *c, const char *text, size_t len, bool complete) {
    ix_errbuf err = {{0}};
    ix_grammar *g = NULL;
    ix_grammar_vocab *v = NULL;
    ix_grammar_matcher *m = NULL;
    ix_status s = c->kind == IX_CONSTRAINT_GRAMMAR ? ix_grammar_parse(&g, c->text, c->len, &err)
                  : c->kind == IX_CONSTRAINT_JSON_SCHEMA
                      ? ix_grammar_from_json_schema(&g, c->text, c->len, c->flags, &err)
                      : ix_grammar_json_object(&g, c->flags, &err);
    assert_int_equal(s, IX_OK);
    assert_int_equal(ix_grammar_vocab_create(&v, ix_model_tokenizer(g_model), &err), IX_OK);
    assert_int_equal(ix_grammar_matcher_create(&m, g, v, NULL, &err), IX_OK);
    if (ix_grammar_matcher_accept_bytes(m, text, len) != IX_OK) fail_msg("output does not match: '%.*s'", (int)len, text);
    if (complete && !ix_grammar_matcher_can_end(m)) fail_msg("output is incomplete: '%.*s'", (int)len, text);
    ix_grammar_matcher_destroy(m);
    ix_grammar_vocab_destroy(v);
    ix_grammar_destroy(g);
}

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"mood\":{\"enum\":[\"happy\",\"sad\",\"cross\"]},"
    "\"count\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":3}},"
    "\"required\":[\"mood\",\"count\",\"ok\",\"tags\"],\"additionalProperties\":false}";

/* The document must parse and hold what the schema says. */
static void assert_schema_doc(const char *text, size_t len) {
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    if (!doc) fail_msg("not JSON (%s): '%.*s'", je.text, (int)len, text);
    assert_true(json_is_object(doc));
    assert_int_equal(json_object_size(doc), 4);
    const char *mood = json_string_value(json_object_get(doc, "mood"));
    assert_non_null(mood);
    assert_true(!strcmp(mood, "happy") || !strcmp(mood, "sad") || !strcmp(mood, "cross"));
    json_t *count = json_object_get(doc, "count");
    assert_true(json_is_integer(count) && json_integer_value(count) >= 0 && json_integer_value(count) <= 99);
    assert_true(json_is_boolean(json_object_get(doc, "ok")));
    json_t *tags = json_object_get(doc, "tags");
    assert_true(json_is_array(tags) && json_array_size(tags) <= 3);
    json_decref(doc);
}

static void test_constrained(void **state) {
    (void)state;
    ix_engine *e = mk_engine(ix_engine_default_params());
    ix_constraint schema = {IX_CONSTRAINT_JSON_SCHEMA, k_schema, sizeof k_schema - 1, 0};
    /* Every sampler setting, n > 1, ignore_eos on and off. */
    struct { float temp; int32_t top_k; float top_p, min_p, rep, pres; bool ignore_eos; int32_t n; } cfg[] = {
        {0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, false, 1},
        {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, true, 3},
        {1.5f, 40, 0.9f, 0.05f, 1.3f, 0.5f, false, 2},
        {0.7f, 5, 1.0f, 0.0f, 1.0f, -1.0f, true, 1},
    };
    for (size_t k = 0; k < IX_ARRAY_LEN(cfg); k++) {
        for (unsigned flags = 0; flags <= IX_GRAMMAR_SCHEMA_COMPACT; flags += IX_GRAMMAR_SCHEMA_COMPACT) {
            ix_request_params r = greedy_req((int)k);
            r.max_tokens = 200;
            r.sample.temperature = cfg[k].temp;
            r.sample.top_k = cfg[k].top_k;
            r.sample.top_p = cfg[k].top_p;
            r.sample.min_p = cfg[k].min_p;
            r.sample.repetition_penalty = cfg[k].rep;
            r.sample.presence_penalty = cfg[k].pres;
            r.sample.seed = 11 + k;
            r.sample.n_logprobs = 3;
            r.ignore_eos = cfg[k].ignore_eos;
            r.n = cfg[k].n;
            r.constraint = schema;
            r.constraint.flags = flags;
            ix_generation g;
            assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
            for (int c = 0; c < r.n; c++) {
                if (g.info.reasons[c] != IX_FINISH_STOP)
                    fail_msg("config %zu choice %d: %s (%s) '%.*s'", k, c, ix_finish_reason_name(g.info.reasons[c]),
                             g.info.message, (int)g.text[c].len, g.text[c].data ? g.text[c].data : "");
                assert_schema_doc(g.text[c].data, g.text[c].len);
                assert_matches(&r.constraint, g.text[c].data, g.text[c].len, true);
            }
            ix_generation_free(&g);
        }
    }

    /* A GBNF grammar, greedy: one of its two sentences, then stop. */
    static const char yn[] = "root ::= \" \"? (\"yes\" | \"no\") \".\"";
    ix_request_params r = greedy_req(5);
    r.constraint = (ix_constraint){IX_CONSTRAINT_GRAMMAR, yn, sizeof yn - 1, 0};
    ix_generation g;
    assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
    assert_int_equal(g.info.reason, IX_FINISH_STOP);
    assert_true(g.tokens[0].n >= 1 && g.tokens[0].n <= 4);
    assert_non_null(g.text[0].data);
    assert_true(!strcmp(g.text[0].data, " yes.") || !strcmp(g.text[0].data, " no.") ||
                !strcmp(g.text[0].data, "yes.") || !strcmp(g.text[0].data, "no."));
    ix_generation_free(&g);

    /* Any JSON object, cut by max_tokens or complete: a viable prefix either way. */
    for (int k = 0; k < 3; k++) {
        r = greedy_req(k);
        r.max_tokens = 48;
        r.sample.temperature = 0.8f;
        r.sample.seed = (uint64_t)k;
        r.constraint = (ix_constraint){IX_CONSTRAINT_JSON_OBJECT, NULL, 0, 0};
        assert_int_equal(ix_engine_generate(e, &r, 1, &g, NULL), IX_OK);
        assert_true(g.info.reason == IX_FINISH_STOP || g.info.reason == IX_FINISH_LENGTH);
        assert_matches(&r.constraint, g.text[0].data ? g.text[0].data : "", g.text[0].len,
                       g.info.reason == IX_FINISH_STOP);
        if (g.info.reason == IX_FINISH_STOP) {
            json_t *doc = json_loadb(g.text[0].data, g.text[0].len, 0, NULL);
            assert_true(json_is_object(doc));
            json_decref(doc);
        }
        ix_generation_free(&g);
    }

    /* Bad constraints are refused at submit, and by the check. */
    ix_errbuf err = {{0}};
    static const char bad_gbnf[] = "root ::= \"a\" undefined-rule";
    static const char bad_schema[] = "{\"type\":\"object\",\"multipleOf\":3}";
    static const char bad_json[] = "{\"type\":";
    r = greedy_req(0);
    r.constraint = (ix_constraint){IX_CONSTRAINT_GRAMMAR, bad_gbnf, sizeof bad_gbnf - 1, 0};
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "undefined-rule"));
    assert_int_equal(ix_engine_check_constraint(e, &r.constraint, &err), IX_ERR_FORMAT);
    r.constraint = (ix_constraint){IX_CONSTRAINT_JSON_SCHEMA, bad_schema, sizeof bad_schema - 1, 0};
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "multipleOf"));
    r.constraint = (ix_constraint){IX_CONSTRAINT_JSON_SCHEMA, bad_json, sizeof bad_json - 1, 0};
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_FORMAT);
    r.constraint = (ix_constraint){(ix_constraint_kind)9, NULL, 0, 0};
    assert_int_equal(ix_engine_submit(e, &r, NULL, &err), IX_ERR_INVALID);
    assert_int_equal(ix_engine_check_constraint(e, &schema, &err), IX_OK);

    /* More distinct grammars than the cache holds, with requests in flight. */
    char texts[20][64];
    ix_request_params many[20];
    ix_generation gs[20];
    for (int i = 0; i < 20; i++) {
        snprintf(texts[i], sizeof texts[i], "root ::= \" \"? \"x%d\" [0-9]", i);
        many[i] = greedy_req(i % N_REQ);
        many[i].constraint = (ix_constraint){IX_CONSTRAINT_GRAMMAR, texts[i], strlen(texts[i]), 0};
    }
    assert_int_equal(ix_engine_generate(e, many, 20, gs, NULL), IX_OK);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(gs[i].info.reason, IX_FINISH_STOP);
        assert_matches(&many[i].constraint, gs[i].text[0].data, gs[i].text[0].len, true);
        ix_generation_free(&gs[i]);
    }
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_and_batch_invariance),
        cmocka_unit_test(test_preemption_recompute),
        cmocka_unit_test(test_preemption_swap),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_quantized_kv),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_policies),
        cmocka_unit_test(test_new_request_next_step),
        cmocka_unit_test(test_stops_and_bad_requests),
        cmocka_unit_test(test_stepped_engine_is_the_model_loop),
        cmocka_unit_test(test_text_stream),
        cmocka_unit_test(test_constrained),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
