/* spec: speculative decoding on the bundled model.
 *   - the proposer table, parameters, prompt lookup, the choice of k from
 *     acceptance and the step-cost line (off when compute-bound)
 *   - greedy identity: every output token equals non-speculative decoding,
 *     k 1..8, batches of 1, 8 and 32 sequences, chunked prefill beside
 *     speculating decodes, preemption (recompute and swap) under a tiny KV
 *     pool, n > 1 choices, prefix cache on
 *   - seeded sampling (temperature, top-k/p, min-p, penalties, logit bias)
 *     gives the same tokens with speculation on and off; stop strings, stop
 *     token ids and max_tokens cut the same text
 *   - distribution: at temperature 1, the tokens where guesses are verified
 *     follow the same distribution as without speculation (chi-square,
 *     independent seeds)
 *   - a request that opts out never speculates; the pool is empty after
 *     every run
 *   - the draft proposer (the bundled draft model): greedy identity at
 *     batches of 1..32 with preemption and a draft pool small enough to
 *     evict, the distribution test, a draft with another vocabulary
 *     refused, its KV back to zero after finish and cancel
 *   - the hidden rows beside the logits (ix_model_forward_out) give the
 *     same logits through the output head alone (ix_model_output_head)
 *   - the medusa proposer (heads trained here, in seconds, on the bundled
 *     model's own greedy continuations; shared and own output heads):
 *     greedy identity at batches of 1..32 and k 1..n_heads, chunked prefill
 *     beside speculating decodes, preemption by recompute and by swap,
 *     n = 3; seeded sampling and the opt-out as for ngram; the first decode
 *     after a prefill guesses from the prefill's
 *     hidden state; the distribution test; heads files that are not heads,
 *     are truncated or are for another model refused with a message */
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/engine.h"
#include "inferx/gguf.h"
#include "inferx/kernels.h"
#include "inferx/medusa.h"
#include "inferx/spec.h"
#include "gguf_copy_util.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define DRAFT IX_SOURCE_DIR "/models/draft-f32.gguf" /* the bundled draft: the same vocabulary */
#define N_PROMPT 6
#define N_NEW 32

static ix_model *g_model;
static ix_token_vec g_prompts[N_PROMPT];
/* Medusa heads files made on first use (test_medusa_*): [0] trained, with
 * the target's output head shared; [1] untrained (W = 0), own output heads */
static char g_heads[2][32];

/* Prose, and prompts whose continuation is in the prompt (where prompt
 * lookup pays). */
static const char *const k_texts[N_PROMPT] = {
    "It was on this point that she had",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition,",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick",
    ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
     "Rewrite with type hints:\n\ndef add(a: int, b: int) -> int:\n    return a + b\n\ndef sub("),
    "one two three four five six seven eight nine ten one two three four five six seven eight nine ten one",
    "Mr. Darcy",
};

static int setup(void **state) {
    (void)state;
    ix_errbuf err;
    if (ix_model_load(&g_model, MODEL, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    for (int i = 0; i < N_PROMPT; i++)
        ix_tokenizer_encode(t, k_texts[i], strlen(k_texts[i]), IX_TOK_ADD_SPECIAL, &g_prompts[i], NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < N_PROMPT; i++) ix_token_vec_free(&g_prompts[i]);
    for (int i = 0; i < 2; i++)
        if (g_heads[i][0]) unlink(g_heads[i]);
    ix_model_destroy(g_model);
    return 0;
}

/* ---- the module on its own --------------------------------------------------------- */

static void test_params_and_table(void **state) {
    (void)state;
    ix_spec_kind k;
    assert_int_equal(ix_spec_kind_parse("ngram", &k), IX_OK);
    assert_int_equal(k, IX_SPEC_NGRAM);
    assert_int_equal(ix_spec_kind_parse("bogus", &k), IX_ERR_INVALID);
    assert_int_equal(ix_spec_kind_parse(NULL, &k), IX_ERR_INVALID);
    assert_string_equal(ix_spec_kind_name(IX_SPEC_DRAFT), "draft");

    ix_spec_params p = ix_spec_default_params();
    ix_errbuf err = {{0}};
    ix_proposer *pr = (ix_proposer *)1;
    assert_int_equal(ix_proposer_create(&pr, &p, NULL, &err), IX_OK); /* none: no proposer */
    assert_null(pr);
    p.kind = IX_SPEC_NGRAM;
    p.k = 0;
    assert_int_equal(ix_spec_params_check(&p, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "k = 0"));
    p.k = IX_SPEC_MAX_K + 1;
    assert_int_equal(ix_spec_params_check(&p, &err), IX_ERR_INVALID);
    p.k = 4;
    p.ngram_min = 4;
    p.ngram_max = 2;
    assert_int_equal(ix_spec_params_check(&p, &err), IX_ERR_INVALID);
    p = ix_spec_default_params();
    p.kind = IX_SPEC_DRAFT; /* without a file */
    assert_int_equal(ix_spec_params_check(&p, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--draft-model"));
    p.kind = IX_SPEC_MEDUSA; /* without a heads file */
    assert_int_equal(ix_spec_params_check(&p, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--medusa"));
    p.kind = (ix_spec_kind)42;
    assert_int_equal(ix_spec_params_check(&p, &err), IX_ERR_INVALID);

    /* An engine refuses bad speculation parameters at create. */
    ix_engine_params ep = ix_engine_default_params();
    ep.spec.kind = IX_SPEC_NGRAM;
    ep.spec.k = 99;
    ix_engine *e = (ix_engine *)1;
    assert_int_equal(ix_engine_create(&e, g_model, &ep, &err), IX_ERR_INVALID);
    assert_null(e);

    p = ix_spec_default_params();
    p.kind = IX_SPEC_NGRAM;
    assert_int_equal(ix_proposer_create(&pr, &p, NULL, &err), IX_OK);
    assert_string_equal(ix_proposer_get_ops(pr)->name, "ngram");
    const ix_token toks[] = {1, 2, 3, 9, 1, 2, 3};
    ix_token out[IX_SPEC_MAX_K];
    ix_spec_seq q = {.key = 1, .tokens = toks, .n_tokens = 7, .n_prompt = 7, .k = 4, .out = out};
    assert_int_equal(ix_proposer_propose(pr, &q, 1), IX_OK);
    assert_int_equal(q.n_out, 4); /* 1 2 3 matched: 9 1 2 3 follows */
    assert_int_equal(out[0], 9);
    assert_int_equal(out[3], 3);
    ix_proposer_release(pr, 1);
    ix_proposer_destroy(pr);
    ix_proposer_destroy(NULL);
}

static void test_ngram_lookup(void **state) {
    (void)state;
    ix_token out[8];
    /* latest occurrence wins */
    const ix_token a[] = {5, 6, 7, 5, 6, 8, 5, 6};
    assert_int_equal(ix_spec_ngram_lookup(a, 8, 1, 3, 4, out), 4);
    assert_int_equal(out[0], 8);
    assert_int_equal(out[2], 6);
    assert_int_equal(out[3], 8); /* past the end: the loop (8 5 6) goes on */
    /* longest suffix first: (7 5 6) occurs once, not the later (5 6) */
    const ix_token b[] = {7, 5, 6, 1, 2, 5, 6, 3, 7, 5, 6};
    assert_int_equal(ix_spec_ngram_lookup(b, 11, 1, 3, 2, out), 2);
    assert_int_equal(out[0], 1);
    /* nothing matches; too short; k 0 */
    const ix_token c[] = {1, 2, 3, 4};
    assert_int_equal(ix_spec_ngram_lookup(c, 4, 1, 3, 4, out), 0);
    assert_int_equal(ix_spec_ngram_lookup(c, 1, 1, 3, 4, out), 0);
    assert_int_equal(ix_spec_ngram_lookup(a, 8, 1, 3, 0, out), 0);
    /* min_n above every match */
    assert_int_equal(ix_spec_ngram_lookup(a, 8, 3, 3, 4, out), 0);
}

static void test_choose_k(void **state) {
    (void)state;
    assert_true(fabs(ix_spec_expected_tokens(0.0, 4) - 1.0) < 1e-12);
    assert_true(fabs(ix_spec_expected_tokens(1.0, 4) - 5.0) < 1e-12);
    assert_true(fabs(ix_spec_expected_tokens(0.5, 2) - 1.75) < 1e-12);
    /* no cost line yet: the most allowed */
    assert_int_equal(ix_spec_choose_k(0.5, 6, 0, 0, 1), 6);
    /* a proposer's own cost per guess: none is the plain choice; a draft
     * costing as much as the step gains pays for no guess; a cheaper one
     * guesses less than a free one */
    assert_int_equal(ix_spec_choose_k_cost(0.6, 8, 50.0, 0.5, 0.0, 1), ix_spec_choose_k(0.6, 8, 50.0, 0.5, 1));
    assert_int_equal(ix_spec_choose_k_cost(0.6, 8, 50.0, 0.5, 60.0, 1), 0);
    int32_t k_free = ix_spec_choose_k_cost(0.8, 8, 50.0, 0.5, 0.0, 1),
            k_paid = ix_spec_choose_k_cost(0.8, 8, 50.0, 0.5, 10.0, 1);
    assert_true(k_paid >= 1 && k_paid < k_free);
    /* measured step times by size: a step that jumps at 4 tokens (5 rows of
     * F16 at the FMA rate) moves the choice from k 4 (the line's) to 2;
     * sizes not measured yet take the line, so an empty table is the line */
    {
        double steps[8] = {0, 33.0, 33.0, 33.5, 44.0, 44.0, 0, 0}, none[8] = {0};
        assert_int_equal(ix_spec_choose_k_cost(0.96, 4, 33.0, 0.3, 20.0, 1), 4);
        assert_int_equal(ix_spec_choose_k_steps(0.96, 4, steps, 8, 33.0, 0.3, 20.0, 1), 2);
        assert_int_equal(ix_spec_choose_k_steps(0.96, 4, none, 8, 33.0, 0.3, 20.0, 1), 4);
        /* beyond the table (k 7 needs size 8): the line there */
        assert_int_equal(ix_spec_choose_k_steps(0.99, 7, none, 8, 33.0, 0.3, 0.0, 1),
                         ix_spec_choose_k_cost(0.99, 7, 33.0, 0.3, 0.0, 1));
        /* a table alone (no line yet) still chooses within what it covers */
        assert_int_equal(ix_spec_choose_k_steps(0.96, 4, steps, 8, 0.0, 0.0, 20.0, 1), 2);
    }
    /* memory-bound (a step's fixed cost dominates): speculate, more with
     * better acceptance */
    int32_t k_lo = ix_spec_choose_k(0.4, 8, 50.0, 0.5, 1), k_hi = ix_spec_choose_k(0.9, 8, 50.0, 0.5, 1);
    assert_true(k_lo >= 1 && k_hi >= k_lo);
    /* compute-bound (many sequences, per-token cost dominates): off -- a
     * first guess pays only while alpha > b n / (a + b n) */
    assert_int_equal(ix_spec_choose_k(0.7, 8, 50.0, 0.5, 512), 0);
    assert_int_equal(ix_spec_choose_k(0.99, 8, 0.0, 0.5, 8), 0);
    /* and the switch comes back as the load drops */
    int32_t prev = 0;
    bool came_back = false;
    for (int32_t n = 512; n >= 1; n /= 2) {
        int32_t k = ix_spec_choose_k(0.7, 8, 50.0, 0.5, n);
        assert_true(k >= prev); /* fewer sequences: never less speculation */
        came_back |= k > 0;
        prev = k;
    }
    assert_true(came_back);
    /* a proposer that never hits: off */
    assert_int_equal(ix_spec_choose_k(0.0, 8, 50.0, 0.5, 1), 0);
    assert_int_equal(ix_spec_choose_k(0.9, 0, 50.0, 0.5, 1), 0);
}

/* ---- identity on the engine ------------------------------------------------------ */

static ix_engine *mk_engine(ix_engine_params p) {
    ix_engine *e;
    ix_errbuf err = {{0}};
    p.n_threads = 2;
    if (ix_engine_create(&e, g_model, &p, &err) != IX_OK) fail_msg("engine: %s", err.msg);
    return e;
}

static const char *medusa_heads(bool trained);

/* Speculation of kind with k guesses per decode (k 0: off). */
static ix_engine_params kind_params(ix_spec_kind kind, int32_t k) {
    ix_engine_params p = ix_engine_default_params();
    p.spec.kind = k > 0 ? kind : IX_SPEC_NONE;
    p.spec.k = k > 0 ? k : 4;
    p.spec.adaptive = false; /* every decode speculates: the hardest case */
    if (kind == IX_SPEC_DRAFT) p.spec.draft_model = DRAFT;
    if (kind == IX_SPEC_MEDUSA && k > 0) p.spec.medusa_heads = medusa_heads(true);
    return p;
}

static ix_engine_params spec_params(int32_t k) { return kind_params(IX_SPEC_NGRAM, k); }

static ix_request_params req_for(int i, const ix_sample_params *sp) {
    ix_request_params r = ix_request_default_params();
    r.prompt = g_prompts[i % N_PROMPT].ids;
    r.n_prompt = g_prompts[i % N_PROMPT].n;
    if (sp) r.sample = *sp;
    else r.sample.temperature = 0;
    r.max_tokens = N_NEW;
    r.ignore_eos = true;
    return r;
}

static void assert_pool_empty(ix_engine *e) {
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    assert_int_equal(st.kv.n_blocks_used, 0);
    assert_int_equal(st.n_running + st.n_waiting + st.n_swapped, 0);
    assert_int_equal(st.spec_draft_seqs, 0); /* a draft's sequences go with their requests */
    assert_int_equal(st.spec_draft_blocks_used, 0);
}

/* Runs n requests (built by mk) on an engine of params p; returns the
 * generations (caller frees) and the engine's stats. */
static ix_generation *run(ix_engine_params p, const ix_request_params *reqs, int n, ix_engine_stats *st) {
    ix_engine *e = mk_engine(p);
    ix_generation *g = calloc((size_t)n, sizeof *g);
    ix_errbuf err = {{0}};
    assert_non_null(g);
    if (ix_engine_generate(e, reqs, (size_t)n, g, &err) != IX_OK) fail_msg("generate: %s", err.msg);
    if (st) ix_engine_get_stats(e, st);
    assert_pool_empty(e);
    ix_engine_destroy(e);
    return g;
}

static void free_gens(ix_generation *g, int n) {
    for (int i = 0; i < n; i++) ix_generation_free(&g[i]);
    free(g);
}

static void assert_same(const ix_generation *a, const ix_generation *b, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        if (a[i].info.reason != b[i].info.reason)
            fail_msg("%s: request %d finished as %s, without speculation %s (%s)", what, i,
                     ix_finish_reason_name(b[i].info.reason), ix_finish_reason_name(a[i].info.reason),
                     b[i].info.message);
        assert_int_equal(a[i].info.n_choices, b[i].info.n_choices);
        for (int c = 0; c < a[i].info.n_choices; c++) {
            if (a[i].tokens[c].n != b[i].tokens[c].n)
                fail_msg("%s: request %d choice %d has %zu tokens, without speculation %zu", what, i, c,
                         b[i].tokens[c].n, a[i].tokens[c].n);
            for (size_t k = 0; k < a[i].tokens[c].n; k++)
                if (a[i].tokens[c].ids[k] != b[i].tokens[c].ids[k])
                    fail_msg("%s: request %d choice %d token %zu is %d, without speculation %d", what, i, c, k,
                             b[i].tokens[c].ids[k], a[i].tokens[c].ids[k]);
            assert_int_equal(a[i].text[c].len, b[i].text[c].len);
            if (a[i].text[c].len) assert_memory_equal(a[i].text[c].data, b[i].text[c].data, a[i].text[c].len);
        }
        assert_int_equal(a[i].info.usage.completion_tokens, b[i].info.usage.completion_tokens);
    }
}

/* Acceptance by position adds up to the accepted tokens and never grows
 * with the position (a later guess needs every one before it). */
static void assert_per_pos(const ix_engine_stats *st) {
    uint64_t per_pos = 0;
    for (int j = 0; j < IX_SPEC_MAX_K; j++) per_pos += st->spec_accepted_per_pos[j];
    assert_int_equal(per_pos, st->spec_n_accepted_tokens);
    for (int j = 1; j < IX_SPEC_MAX_K; j++)
        assert_true(st->spec_accepted_per_pos[j] <= st->spec_accepted_per_pos[j - 1]);
}

/* n = 3 choices fork prompt i; each speculates on its own sequence. */
static void assert_n3_same(ix_spec_kind kind, int32_t k, int i, const char *what) {
    ix_request_params r = req_for(i, NULL);
    r.n = 3;
    ix_generation *g0 = run(spec_params(0), &r, 1, NULL), *g1 = run(kind_params(kind, k), &r, 1, NULL);
    assert_same(g0, g1, 1, what);
    free_gens(g0, 1);
    free_gens(g1, 1);
}

static void test_greedy_identity(void **state) {
    (void)state;
    enum { MAXB = 32 };
    ix_request_params reqs[MAXB];
    for (int i = 0; i < MAXB; i++) reqs[i] = req_for(i, NULL);
    ix_generation *ref = run(spec_params(0), reqs, MAXB, NULL);
    static const int32_t ks[] = {1, 4, 8};
    static const int batches[] = {1, 8, 32};
    uint64_t accepted = 0;
    for (size_t ki = 0; ki < IX_ARRAY_LEN(ks); ki++)
        for (size_t bi = 0; bi < IX_ARRAY_LEN(batches); bi++) {
            int n = batches[bi];
            ix_engine_params p = spec_params(ks[ki]);
            if (n > 1) p.sched.max_num_batched_tokens = 64; /* chunked prefill beside speculating decodes */
            ix_engine_stats st;
            char what[64];
            snprintf(what, sizeof what, "k %d, batch %d", ks[ki], n);
            if (n == 1) { /* each alone */
                for (int i = 0; i < N_PROMPT; i++) {
                    ix_generation *g = run(p, &reqs[i], 1, &st);
                    assert_same(&ref[i], g, 1, what);
                    accepted += st.spec_n_accepted_tokens;
                    free_gens(g, 1);
                }
                continue;
            }
            ix_generation *g = run(p, reqs, n, &st);
            assert_same(ref, g, n, what);
            assert_true(st.spec_n_draft_tokens > 0);
            assert_true(st.spec_n_accepted_tokens <= st.spec_n_draft_tokens);
            assert_per_pos(&st);
            fprintf(stderr, "  %s: %llu drafts, %llu of %llu guesses accepted, %llu steps\n", what,
                    (unsigned long long)st.spec_n_drafts, (unsigned long long)st.spec_n_accepted_tokens,
                    (unsigned long long)st.spec_n_draft_tokens, (unsigned long long)st.n_steps);
            accepted += st.spec_n_accepted_tokens;
            free_gens(g, n);
        }
    assert_true(accepted > 0); /* the repeat prompts are guessed right */

    /* Preemption in the mix: 10 blocks of 16 slots for 8 requests of
     * 4-40 prompt + 32 new tokens. */
    for (int mode = 0; mode < 2; mode++) {
        ix_engine_params p = spec_params(4);
        p.kv_blocks = 10;
        p.kv_block_size = 16;
        p.kv_swap_blocks = 64;
        p.sched.preempt = mode ? IX_PREEMPT_SWAP : IX_PREEMPT_RECOMPUTE;
        ix_engine_stats st;
        ix_generation *g = run(p, reqs, 8, &st);
        assert_same(ref, g, 8, mode ? "swap preemption" : "recompute preemption");
        assert_true(st.n_preempt_recompute + st.n_preempt_swap > 0);
        assert_true(st.spec_n_accepted_tokens > 0);
        free_gens(g, 8);
    }
    free_gens(ref, MAXB);

    assert_n3_same(IX_SPEC_NGRAM, 4, 2, "n = 3");
}

/* Seeded sampling with every transform; stops cutting the output. */
static void test_sampling_identity(void **state) {
    (void)state;
    enum { N = 12 };
    ix_logit_bias bias[] = {{13, 2.0f}, {100, -5.0f}};
    ix_request_params reqs[N];
    static const char *const stops[] = {" of the", " I am", "house"};
    ix_token stop_ids[1];
    for (int i = 0; i < N; i++) {
        ix_sample_params sp = ix_sample_default_params();
        sp.temperature = i % 3 == 0 ? 0.0f : 0.7f + 0.1f * (float)(i % 4);
        sp.top_k = i % 2 ? 40 : 0;
        sp.top_p = i % 4 == 1 ? 0.9f : 1.0f;
        sp.min_p = i % 5 == 2 ? 0.05f : 0.0f;
        sp.repetition_penalty = i % 3 == 1 ? 1.1f : 1.0f;
        sp.presence_penalty = i % 4 == 3 ? 0.3f : 0.0f;
        sp.frequency_penalty = i % 5 == 4 ? 0.2f : 0.0f;
        sp.seed = 1000 + (uint64_t)i;
        sp.logprobs = i % 4 == 0;
        sp.n_logprobs = i % 8 == 0 ? 3 : 0;
        if (i % 6 == 5) {
            sp.logit_bias = bias;
            sp.n_logit_bias = IX_ARRAY_LEN(bias);
        }
        reqs[i] = req_for(i, &sp);
        reqs[i].n = i % 4 == 2 ? 2 : 1;
        if (i % 2 == 0) { /* guesses run into (and past) the stops */
            reqs[i].stop = stops;
            reqs[i].n_stop = IX_ARRAY_LEN(stops);
        }
        if (i == 10) {
            stop_ids[0] = g_prompts[4].ids[g_prompts[4].n - 2];
            reqs[i].stop_token_ids = stop_ids;
            reqs[i].n_stop_token_ids = 1;
        }
        if (i == 8) reqs[i].max_tokens = 3;
    }
    ix_engine_stats st;
    ix_generation *ref = run(spec_params(0), reqs, N, NULL);
    for (int32_t k = 2; k <= 10; k += 4) { /* ngram k 2 and 6, medusa k 3 */
        ix_engine_params p = k > 6 ? kind_params(IX_SPEC_MEDUSA, 3) : spec_params(k);
        ix_generation *g = run(p, reqs, N, &st);
        assert_same(ref, g, N, k > 6 ? "seeded sampling, medusa" : "seeded sampling");
        assert_true(st.spec_n_accepted_tokens > 0);
        free_gens(g, N);
    }
    /* the stops did cut some outputs */
    int n_stopped = 0;
    for (int i = 0; i < N; i++) n_stopped += ref[i].info.reason == IX_FINISH_STOP;
    fprintf(stderr, "  %d of %d requests stopped early\n", n_stopped, N);
    assert_true(n_stopped > 0);
    free_gens(ref, N);

    /* Opt-out: the same tokens, and no guesses at all. */
    for (int i = 0; i < N; i++) reqs[i].no_spec = true;
    ref = run(spec_params(4), reqs, N, &st);
    assert_int_equal(st.spec_n_drafts, 0);
    free_gens(ref, N);
    ref = run(kind_params(IX_SPEC_MEDUSA, 3), reqs, N, &st);
    assert_int_equal(st.spec_n_drafts, 0);
    free_gens(ref, N);
}

/* At temperature 1, the token after the repeat prompt's first generated
 * token -- where a guess is verified -- has the same distribution with and
 * without speculation: a chi-square test of homogeneity over the most
 * frequent tokens (plus "other"), independent seeds. */
#ifndef DIST_PROMPT
#define DIST_PROMPT 1
#endif
static void distribution(ix_spec_kind kind) {
    enum { N = 600, NB = 8 };
    ix_request_params *reqs = calloc(N, sizeof *reqs);
    assert_non_null(reqs);
    ix_generation *g[2];
    ix_engine_stats st;
    for (int run_i = 0; run_i < 2; run_i++) {
        for (int i = 0; i < N; i++) {
            ix_sample_params sp = ix_sample_default_params();
            sp.temperature = 1.0f;
            sp.top_k = 8; /* a small slice of the vocabulary, so most cells are well filled */
            sp.seed = (uint64_t)(run_i * 1000003 + i) * 7919u + 17u;
            reqs[i] = req_for(DIST_PROMPT, &sp);
            reqs[i].max_tokens = 3; /* the second token is a verified guess */
        }
        g[run_i] = run(kind_params(kind, run_i ? 4 : 0), reqs, N, &st);
    }
    fprintf(stderr, "  %llu of %d second tokens were verified guesses\n",
            (unsigned long long)st.spec_n_drafts, N);
    assert_true(st.spec_n_drafts >= N / 4);
    /* buckets: the NB most frequent second tokens without speculation */
    ix_token top[NB];
    int counts[2][NB + 1];
    memset(counts, 0, sizeof counts);
    int nb = 0;
    for (int b = 0; b < NB; b++) {
        int best = -1, best_n = 0;
        for (int i = 0; i < N; i++) {
            ix_token t = g[0][i].tokens[0].ids[1];
            bool taken = false;
            for (int x = 0; x < nb; x++) taken |= top[x] == t;
            if (taken) continue;
            int n = 0;
            for (int j = 0; j < N; j++) n += g[0][j].tokens[0].ids[1] == t;
            if (n > best_n) best_n = n, best = t;
        }
        if (best < 0 || best_n < 10) break;
        top[nb++] = best;
    }
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++) {
            ix_token t = g[r][i].tokens[0].ids[1];
            int b = nb;
            for (int x = 0; x < nb; x++)
                if (top[x] == t) b = x;
            counts[r][b]++;
        }
    double chi2 = 0;
    int cells = 0;
    for (int b = 0; b <= nb; b++) {
        double tot = counts[0][b] + counts[1][b];
        if (tot == 0) continue;
        cells++;
        for (int r = 0; r < 2; r++) {
            double expct = tot / 2.0; /* equal sample sizes */
            chi2 += (counts[r][b] - expct) * (counts[r][b] - expct) / expct;
        }
    }
    /* 99.9th percentiles of chi-square for 1..8 degrees of freedom */
    static const double crit[] = {10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12};
    int dof = cells - 1;
    fprintf(stderr, "  second token at temperature 1: %d buckets, chi2 = %.2f (dof %d, 0.1%% critical %.2f)\n",
            cells, chi2, dof, dof >= 1 ? crit[dof - 1] : 0.0);
    assert_true(dof >= 2); /* the distribution is really spread */
    assert_true(chi2 < crit[dof - 1]);
    free_gens(g[0], N);
    free_gens(g[1], N);
    free(reqs);
}

static void test_distribution(void **state) {
    (void)state;
    distribution(IX_SPEC_NGRAM);
}

/* ---- the draft proposer ------------------------------------------------------------ */

/* Greedy identity with the bundled draft model guessing: batches of 1 to 32
 * (prefill chunked beside speculating decodes), preemption by recompute and
 * by swap in a 10-block pool, and a draft pool of a few blocks, so that
 * sequences lose their draft K/V to others and catch up again. */
static void test_draft_greedy_identity(void **state) {
    (void)state;
    enum { MAXB = 32 };
    ix_request_params reqs[MAXB];
    for (int i = 0; i < MAXB; i++) reqs[i] = req_for(i, NULL);
    ix_generation *ref = run(spec_params(0), reqs, MAXB, NULL);
    static const int batches[] = {1, 2, 5, 8, 17, 32};
    uint64_t accepted = 0, drafted = 0;
    for (size_t bi = 0; bi < IX_ARRAY_LEN(batches); bi++) {
        int n = batches[bi];
        ix_engine_params p = kind_params(IX_SPEC_DRAFT, bi % 2 ? 3 : 6);
        if (n > 1) p.sched.max_num_batched_tokens = 64;
        p.spec.adaptive = n == 8; /* k from acceptance, the step cost and the draft's own */
        ix_engine_stats st;
        char what[64];
        snprintf(what, sizeof what, "draft, batch %d", n);
        ix_generation *g = run(p, reqs, n, &st);
        assert_same(ref, g, n, what);
        if (!p.spec.adaptive) assert_true(st.spec_n_draft_tokens > 0); /* adaptive: the machine's timing decides */
        assert_true(st.spec_draft_blocks_total > 0);
        fprintf(stderr, "  %s: %llu of %llu guesses accepted, %llu steps\n", what,
                (unsigned long long)st.spec_n_accepted_tokens, (unsigned long long)st.spec_n_draft_tokens,
                (unsigned long long)st.n_steps);
        accepted += st.spec_n_accepted_tokens;
        drafted += st.spec_n_draft_tokens;
        free_gens(g, n);
    }
    assert_true(accepted > 0 && accepted < drafted); /* the draft agrees with the target, not always */

    for (int mode = 0; mode < 3; mode++) {
        ix_engine_params p = kind_params(IX_SPEC_DRAFT, 4);
        const char *what = "draft, recompute preemption";
        if (mode < 2) {
            p.kv_blocks = 10;
            p.kv_block_size = 16;
            p.kv_swap_blocks = 64;
            p.sched.preempt = mode ? IX_PREEMPT_SWAP : IX_PREEMPT_RECOMPUTE;
            if (mode) what = "draft, swap preemption";
        } else { /* a draft pool of a few blocks: draft K/V evicted and rebuilt */
            p.spec.draft_kv_mem_bytes = 48 << 10;
            what = "draft, a small draft pool";
        }
        ix_engine_stats st;
        ix_generation *g = run(p, reqs, 12, &st);
        assert_same(ref, g, 12, what);
        if (mode < 2) assert_true(st.n_preempt_recompute + st.n_preempt_swap > 0);
        else assert_true(st.spec_draft_blocks_total < 12 * 3);
        assert_true(st.spec_n_accepted_tokens > 0);
        fprintf(stderr, "  %s: %llu of %llu guesses accepted (draft pool %lld blocks)\n", what,
                (unsigned long long)st.spec_n_accepted_tokens, (unsigned long long)st.spec_n_draft_tokens,
                (long long)st.spec_draft_blocks_total);
        free_gens(g, 12);
    }
    free_gens(ref, MAXB);

    assert_n3_same(IX_SPEC_DRAFT, 4, 1, "draft, n = 3"); /* each choice on its own draft sequence */
}

static void test_draft_distribution(void **state) {
    (void)state;
    distribution(IX_SPEC_DRAFT);
}

/* A copy of the draft whose token `id` reads `piece` (the caller unlinks
 * path). */
typedef struct pieces_arg {
    const ix_str *pieces;
    uint64_t n;
} pieces_arg;

static ix_status set_pieces(ix_gguf_writer *w, const char *key, const void *arg) {
    const pieces_arg *a = arg;
    return ix_gguf_writer_set_arr_str(w, key, a->pieces, a->n);
}

static void write_draft_renamed(const char *path, int32_t id, const char *piece) {
    ix_model *dm;
    assert_int_equal(ix_model_load(&dm, DRAFT, NULL), IX_OK);
    const ix_tokenizer *t = ix_model_tokenizer(dm);
    int32_t n = ix_tokenizer_n_vocab(t);
    ix_str *pieces = calloc((size_t)n, sizeof *pieces);
    assert_non_null(pieces);
    for (int32_t i = 0; i < n; i++) pieces[i] = ix_tokenizer_piece(t, i);
    pieces[id] = (ix_str){piece, strlen(piece)};
    pieces_arg arg = {pieces, (uint64_t)n};
    assert_int_equal(ix_test_gguf_copy_with(DRAFT, path, "tokenizer.ggml.tokens", set_pieces, &arg), IX_OK);
    free(pieces);
    ix_model_destroy(dm);
}

/* What a draft proposer refuses at create, each with a message that says
 * why: no file named, a file that is not there, another vocabulary. */
static void test_draft_refused(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    ix_engine *e = (ix_engine *)1;
    ix_engine_params p = kind_params(IX_SPEC_DRAFT, 4);
    p.spec.draft_model = NULL;
    assert_int_equal(ix_engine_create(&e, g_model, &p, &err), IX_ERR_INVALID);
    assert_null(e);
    assert_non_null(strstr(err.msg, "draft model"));
    p.spec.draft_model = "/nonexistent/draft.gguf";
    assert_int_not_equal(ix_engine_create(&e, g_model, &p, &err), IX_OK);
    assert_non_null(strstr(err.msg, "draft model"));
    ix_spec_params sp = kind_params(IX_SPEC_DRAFT, 4).spec;
    ix_proposer *pr = (ix_proposer *)1;
    assert_int_equal(ix_proposer_create(&pr, &sp, NULL, &err), IX_ERR_INVALID); /* no target to check against */
    assert_null(pr);

    char path[] = "/tmp/ix_test_draft_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_draft_renamed(path, 300, "\xe2\x96\x81not-the-target's");
    p.spec.draft_model = path;
    assert_int_equal(ix_engine_create(&e, g_model, &p, &err), IX_ERR_INVALID);
    assert_null(e);
    fprintf(stderr, "  refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "token 300"));
    assert_non_null(strstr(err.msg, "vocabulary"));
    unlink(path);
}

static void count_finish(void *user, const ix_finish_info *info) {
    (void)info;
    (*(int *)user)++;
}

/* The draft's K/V follows its requests: held while they decode, all of it
 * back after a cancel. */
static void test_draft_kv_cancel(void **state) {
    (void)state;
    ix_engine_params p = kind_params(IX_SPEC_DRAFT, 4);
    p.start_thread = false;
    ix_engine *e = mk_engine(p);
    enum { N = 6 };
    int finished = 0;
    uint64_t ids[N];
    ix_errbuf err = {{0}};
    for (int i = 0; i < N; i++) {
        ix_request_params r = req_for(i, NULL);
        r.max_tokens = 200;
        r.cb.on_finish = count_finish;
        r.cb.user = &finished;
        assert_int_equal(ix_engine_submit(e, &r, &ids[i], &err), IX_OK);
    }
    ix_engine_stats st;
    for (int s = 0; s < 12; s++) {
        bool did;
        assert_int_equal(ix_engine_step(e, &did), IX_OK);
    }
    ix_engine_get_stats(e, &st);
    assert_int_equal(st.spec_draft_seqs, N);
    assert_true(st.spec_draft_blocks_used > 0);
    assert_int_equal(finished, 0);
    for (int i = 0; i < N; i++) ix_engine_cancel(e, ids[i]);
    bool did;
    assert_int_equal(ix_engine_step(e, &did), IX_OK);
    assert_int_equal(finished, N);
    assert_pool_empty(e);
    ix_engine_destroy(e);
}

/* ---- the medusa proposer ----------------------------------------------------------- */

/* A temporary file's name in out (the caller unlinks it). */
static void tmp_name(char *out, size_t cap) {
    snprintf(out, cap, "/tmp/ix_test_medusa_XXXXXX");
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
}

/* The target's output head as F32 rows (n_vocab x n_embd); caller frees. */
static float *output_rows(void) {
    const ix_model_hparams *hp = ix_model_get_hparams(g_model);
    const ix_gguf_tensor *t = ix_gguf_find_tensor(ix_model_gguf(g_model), "output.weight");
    if (!t) t = ix_gguf_find_tensor(ix_model_gguf(g_model), "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], hp->n_embd);
    float *u = malloc((size_t)hp->n_vocab * (size_t)hp->n_embd * sizeof *u);
    assert_non_null(u);
    size_t row_bytes = (size_t)t->n_bytes / (size_t)t->ne[1];
    for (int32_t v = 0; v < hp->n_vocab; v++)
        assert_int_equal(ix_kernels_dequant_row(t->type, (const char *)t->data + (size_t)v * row_bytes,
                                                u + (size_t)v * (size_t)hp->n_embd, (size_t)hp->n_embd),
                         IX_OK);
    return u;
}

/* Self-distillation data, as inferx medusa-train makes it: the target's
 * greedy continuation of each test prompt, and one pass over prompt +
 * continuation for the hidden state of every position from the prompt's
 * last token on; head i at position t learns token t + 2 + i. Returns the
 * number of positions (hid: (n, n_embd), lab: (n, H), caller frees). */
static size_t distill(int32_t H, float **hid_out, ix_token **lab_out) {
    ix_request_params reqs[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) reqs[i] = req_for(i, NULL);
    ix_generation *ref = run(spec_params(0), reqs, N_PROMPT, NULL);
    const int32_t E = ix_model_get_hparams(g_model)->n_embd;
    size_t cap = (size_t)N_PROMPT * (N_NEW + 1), n = 0;
    float *hid = malloc(cap * (size_t)E * sizeof *hid);
    ix_token *lab = malloc(cap * (size_t)H * sizeof *lab);
    assert_true(hid && lab);
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(g_model, &kp);
    kp.n_blocks = 64;
    kp.enable_prefix_cache = false;
    ix_kv *kv;
    ix_model_ctx *ctx;
    assert_int_equal(ix_kv_create(&kp, &kv, NULL), IX_OK);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = 256;
    cp.n_threads = 2;
    assert_int_equal(ix_model_ctx_create(&ctx, g_model, kv, &cp, NULL), IX_OK);
    for (int i = 0; i < N_PROMPT; i++) {
        ix_token seq[256];
        int32_t pos[256], sq[256], P = (int32_t)g_prompts[i].n, L = P + (int32_t)ref[i].tokens[0].n, s;
        uint8_t want[256];
        assert_true(L <= 256);
        memcpy(seq, g_prompts[i].ids, (size_t)P * sizeof *seq);
        memcpy(seq + P, ref[i].tokens[0].ids, ref[i].tokens[0].n * sizeof *seq);
        assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
        assert_int_equal(ix_kv_seq_append(kv, s, L, seq), IX_OK);
        for (int32_t t = 0; t < L; t++) pos[t] = t, sq[t] = s, want[t] = t >= P - 1;
        ix_batch b = {L, seq, pos, sq, want};
        assert_int_equal(ix_model_forward_hidden(ctx, &b, hid + n * (size_t)E), IX_OK);
        for (int32_t t = P - 1; t < L; t++, n++)
            for (int32_t h = 0; h < H; h++) lab[n * (size_t)H + (size_t)h] = t + 2 + h < L ? seq[t + 2 + h] : -1;
        ix_kv_seq_free(kv, s);
    }
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    free_gens(ref, N_PROMPT);
    *hid_out = hid;
    *lab_out = lab;
    return n;
}

/* The heads file for the bundled model: trained (3 heads, a few epochs of
 * Adam on distill's positions, the target's output head shared, so the
 * proposer runs it through the model's own matmul) or untrained (2 heads,
 * W = 0, own F32 output heads: each guesses the target's next token). */
static const char *medusa_heads(bool trained) {
    char *path = g_heads[trained ? 0 : 1];
    if (path[0]) return path;
    const ix_model_hparams *hp = ix_model_get_hparams(g_model);
    float *u = output_rows();
    ix_medusa *md;
    int32_t H = trained ? 3 : 2;
    assert_int_equal(ix_medusa_create(&md, H, hp->n_embd, hp->n_vocab, u, trained, NULL), IX_OK);
    if (trained) {
        float *hid;
        ix_token *lab;
        size_t n = distill(H, &hid, &lab);
        float loss0[IX_MEDUSA_MAX_HEADS] = {0}, loss[IX_MEDUSA_MAX_HEADS] = {0};
        for (int ep = 0; ep < 6; ep++)
            for (size_t at = 0; at < n; at += 32) {
                int32_t B = (int32_t)(n - at < 32 ? n - at : 32);
                assert_int_equal(ix_medusa_train_step(md, hid + at * (size_t)hp->n_embd, lab + at * (size_t)H, B,
                                                      1e-2f, loss),
                                 IX_OK);
                if (ep == 0 && at == 0) memcpy(loss0, loss, sizeof loss);
            }
        fprintf(stderr, "  medusa heads trained on %zu positions: loss of head 1 %.2f -> %.2f\n", n, loss0[0],
                loss[0]);
        free(hid);
        free(lab);
    }
    tmp_name(path, sizeof g_heads[0]);
    ix_errbuf err = {{0}};
    if (ix_medusa_save(md, path, "test", &err) != IX_OK) fail_msg("%s", err.msg);
    ix_medusa_destroy(md);
    free(u);
    return path;
}

/* The hidden rows the proposer reads: ix_model_forward_out gives the logits
 * ix_model_forward gives and, beside them, rows that the output head alone
 * (ix_model_output_head) turns into the same logits, bit for bit. */
static void test_forward_out(void **state) {
    (void)state;
    const ix_model_hparams *hp = ix_model_get_hparams(g_model);
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(g_model, &kp);
    kp.n_blocks = 16;
    kp.enable_prefix_cache = false;
    ix_kv *kv;
    ix_model_ctx *ctx;
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.n_threads = 2;
    assert_int_equal(ix_kv_create(&kp, &kv, NULL), IX_OK);
    assert_int_equal(ix_model_ctx_create(&ctx, g_model, kv, &cp, NULL), IX_OK);
    const ix_token_vec *pr = &g_prompts[1];
    int32_t L = (int32_t)pr->n, pos[64], sq[64];
    uint8_t want[64];
    assert_true(L <= 64);
    size_t V = (size_t)hp->n_vocab, E = (size_t)hp->n_embd, rows = 0;
    float *l0 = malloc(3 * V * sizeof(float)), *l1 = malloc(3 * V * sizeof(float)), *l2 = malloc(3 * V * sizeof(float));
    float *hid = malloc(3 * E * sizeof(float));
    assert_true(l0 && l1 && l2 && hid);
    for (int pass = 0; pass < 2; pass++) {
        int32_t s;
        assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
        assert_int_equal(ix_kv_seq_append(kv, s, L, pr->ids), IX_OK);
        rows = 0;
        for (int32_t t = 0; t < L; t++) {
            pos[t] = t, sq[t] = s, want[t] = t >= L - 3;
            rows += want[t];
        }
        ix_batch b = {L, pr->ids, pos, sq, want};
        if (pass == 0) assert_int_equal(ix_model_forward(ctx, &b, l0), IX_OK);
        else assert_int_equal(ix_model_forward_out(ctx, &b, l1, hid), IX_OK);
        ix_kv_seq_free(kv, s);
    }
    assert_memory_equal(l0, l1, rows * V * sizeof(float));
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_output_head(g_model, ix_model_ctx_pool(ctx), hid, rows, l2, &err), IX_OK);
    assert_memory_equal(l1, l2, rows * V * sizeof(float));
    free(l0), free(l1), free(l2), free(hid);
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
}

/* Greedy identity with Medusa heads guessing: k 1..3 (the file's heads) at
 * batches of 1, 8 and 32 (prefill chunked beside speculating decodes), a k
 * above the heads capped, preemption by recompute and by swap in a 10-block
 * pool, n = 3 choices, and untrained heads with their own output heads. */
static void test_medusa_greedy_identity(void **state) {
    (void)state;
    enum { MAXB = 32 };
    ix_request_params reqs[MAXB];
    for (int i = 0; i < MAXB; i++) reqs[i] = req_for(i, NULL);
    ix_generation *ref = run(spec_params(0), reqs, MAXB, NULL);
    static const int batches[] = {1, 8, 32};
    uint64_t accepted = 0, drafted = 0;
    for (int32_t k = 1; k <= 3; k++)
        for (size_t bi = 0; bi < IX_ARRAY_LEN(batches); bi++) {
            int n = batches[bi];
            ix_engine_params p = kind_params(IX_SPEC_MEDUSA, k);
            if (n > 1) p.sched.max_num_batched_tokens = 64;
            ix_engine_stats st;
            char what[64];
            snprintf(what, sizeof what, "medusa, k %d, batch %d", k, n);
            for (int i = 0; i < (n == 1 ? N_PROMPT : 1); i++) { /* batch 1: each alone */
                ix_generation *g = run(p, &reqs[i], n == 1 ? 1 : n, &st);
                assert_same(&ref[i], g, n == 1 ? 1 : n, what);
                assert_true(st.spec_n_draft_tokens > 0);
                assert_per_pos(&st);
                for (int j = k; j < IX_SPEC_MAX_K; j++) assert_int_equal(st.spec_accepted_per_pos[j], 0);
                accepted += st.spec_n_accepted_tokens;
                drafted += st.spec_n_draft_tokens;
                free_gens(g, n == 1 ? 1 : n);
            }
            fprintf(stderr, "  %s: %llu of %llu guesses accepted so far\n", what, (unsigned long long)accepted,
                    (unsigned long long)drafted);
        }
    assert_true(accepted > 0 && accepted < drafted); /* the heads learned something, not everything */

    /* k above the file's heads: capped at them */
    ix_engine *e = mk_engine(kind_params(IX_SPEC_MEDUSA, 8));
    assert_int_equal(ix_engine_get_params(e).spec.k, 3);
    ix_engine_destroy(e);

    for (int mode = 0; mode < 3; mode++) {
        ix_engine_params p = kind_params(IX_SPEC_MEDUSA, 3);
        const char *what = "medusa, untrained own output heads";
        if (mode < 2) {
            p.kv_blocks = 10;
            p.kv_block_size = 16;
            p.kv_swap_blocks = 64;
            p.sched.preempt = mode ? IX_PREEMPT_SWAP : IX_PREEMPT_RECOMPUTE;
            what = mode ? "medusa, swap preemption" : "medusa, recompute preemption";
        } else {
            p.spec.medusa_heads = medusa_heads(false);
            p.spec.k = 2;
        }
        ix_engine_stats st;
        ix_generation *g = run(p, reqs, 12, &st);
        assert_same(ref, g, 12, what);
        if (mode < 2) assert_true(st.n_preempt_recompute + st.n_preempt_swap > 0);
        assert_true(st.spec_n_draft_tokens > 0);
        assert_per_pos(&st);
        fprintf(stderr, "  %s: %llu of %llu guesses accepted\n", what, (unsigned long long)st.spec_n_accepted_tokens,
                (unsigned long long)st.spec_n_draft_tokens);
        free_gens(g, 12);
    }
    free_gens(ref, MAXB);

    assert_n3_same(IX_SPEC_MEDUSA, 3, 4, "medusa, n = 3"); /* each choice keeps its own hidden state */
}

/* The first decode after a prefill guesses: the prefill's last row kept
 * its hidden state. With max_tokens 3 and k 1 that decode is the only one
 * that may guess, so every request makes exactly one draft. */
static void test_medusa_prefill_hidden(void **state) {
    (void)state;
    ix_request_params reqs[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) {
        reqs[i] = req_for(i, NULL);
        reqs[i].max_tokens = 3;
    }
    ix_engine_stats st;
    ix_generation *ref = run(spec_params(0), reqs, N_PROMPT, NULL);
    ix_generation *g = run(kind_params(IX_SPEC_MEDUSA, 1), reqs, N_PROMPT, &st);
    assert_same(ref, g, N_PROMPT, "medusa, first decodes");
    assert_int_equal(st.spec_n_drafts, N_PROMPT);
    assert_int_equal(st.spec_n_draft_tokens, N_PROMPT);
    free_gens(ref, N_PROMPT);
    free_gens(g, N_PROMPT);
}

static void test_medusa_distribution(void **state) {
    (void)state;
    distribution(IX_SPEC_MEDUSA);
}

/* Heads files a medusa proposer refuses at engine create, each with a
 * message that says why. */
static void test_medusa_refused(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    ix_engine *e = (ix_engine *)1;
    ix_engine_params p = kind_params(IX_SPEC_MEDUSA, 3);
    typedef struct refusal {
        const char *path, *says;
        ix_status s;
    } refusal;
    refusal cases[5] = {
        {NULL, "--medusa", IX_ERR_INVALID},
        {"/nonexistent/heads.gguf", "medusa heads", IX_OK},
        {MODEL, "not a Medusa heads file", IX_ERR_FORMAT},
    };
    /* heads for another model: n_embd 64 and 100 logits */
    char other[32], cut[32];
    tmp_name(other, sizeof other);
    float *u = calloc(100 * 64, sizeof *u);
    ix_medusa *md;
    assert_int_equal(ix_medusa_create(&md, 2, 64, 100, u, false, NULL), IX_OK);
    assert_int_equal(ix_medusa_save(md, other, "other", NULL), IX_OK);
    ix_medusa_destroy(md);
    free(u);
    cases[3] = (refusal){other, "n_embd 64", IX_ERR_INVALID};
    /* the trained file cut in half */
    tmp_name(cut, sizeof cut);
    FILE *in = fopen(medusa_heads(true), "rb"), *out = fopen(cut, "wb");
    assert_true(in && out);
    fseek(in, 0, SEEK_END);
    long half = ftell(in) / 2;
    fseek(in, 0, SEEK_SET);
    char buf[4096];
    for (long done = 0; done < half;) {
        size_t want = (size_t)(half - done < (long)sizeof buf ? half - done : (long)sizeof buf);
        size_t got = fread(buf, 1, want, in);
        assert_true(got > 0);
        assert_int_equal(fwrite(buf, 1, got, out), got);
        done += (long)got;
    }
    fclose(in);
    fclose(out);
    cases[4] = (refusal){cut, "medusa heads", IX_OK};
    for (int i = 0; i < 5; i++) {
        p.spec.medusa_heads = cases[i].path;
        ix_status s = ix_engine_create(&e, g_model, &p, &err);
        fprintf(stderr, "  %s: %s\n", cases[i].path ? cases[i].path : "(none)", err.msg);
        if (cases[i].s != IX_OK) assert_int_equal(s, cases[i].s);
        else assert_int_not_equal(s, IX_OK);
        assert_null(e);
        assert_non_null(strstr(err.msg, cases[i].says));
    }
    unlink(other);
    unlink(cut);
}

int main(void) {
    FILE *f = fopen(MODEL, "rb");
    if (!f) {
        fprintf(stderr, "test_spec: %s is missing; skipped\n", MODEL);
        return 77;
    }
    fclose(f);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_and_table), cmocka_unit_test(test_ngram_lookup),
        cmocka_unit_test(test_choose_k),         cmocka_unit_test(test_greedy_identity),
        cmocka_unit_test(test_sampling_identity), cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_draft_refused),    cmocka_unit_test(test_draft_kv_cancel),
        cmocka_unit_test(test_draft_greedy_identity), cmocka_unit_test(test_draft_distribution),
        cmocka_unit_test(test_forward_out),      cmocka_unit_test(test_medusa_refused),
        cmocka_unit_test(test_medusa_prefill_hidden),
        cmocka_unit_test(test_medusa_greedy_identity), cmocka_unit_test(test_medusa_distribution),
    };
    if (getenv("IX_TEST_FILTER")) cmocka_set_test_filter(getenv("IX_TEST_FILTER")); /* e.g. "test_draft*" */
    return cmocka_run_group_tests(tests, setup, teardown);
}
