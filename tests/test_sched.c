/* sched: the step planner on a real KV cache, without a model. A small
 * simulated engine (sim_step) carries out each plan -- appends, commits,
 * "samples" a token when a sequence reaches its end -- and reports a
 * synthetic step time to the cost model, so every figure is deterministic:
 *   - the step-cost model converges on synthetic timings, follows a change
 *     of speed, and falls back safely when it cannot separate its terms
 *   - with a target step time, every step keeps all decodes while a long
 *     prompt is prefilled in chunks sized to the target
 *   - a new request's first chunk is planned in the very next step, even
 *     behind a long prefill, and a short prompt gets its first token there
 *   - speculation: a decode carries the draft tokens the engine asks for, cut
 *     by the token budget (never the sequence's own token), all dropped
 *     (nothing preempted) when the cache cannot hold them
 *   - parameters are validated */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "inferx/sched.h"

#define BLOCK 16
#define MAX_ITEMS 24
#define MAX_TOKENS 2048

/* The simulated machine: a step of n tokens takes A_MS + B_MS n. */
#define A_MS 20.0
#define B_MS 2.5

typedef struct sim_item {
    ix_sched_item it;
    int32_t toks[MAX_TOKENS]; /* prompt + generated */
    int32_t n_toks;
    int32_t first_step; /* step in which it was first planned; -1 before */
    int32_t first_token_step;
} sim_item;

typedef struct sim {
    ix_kv *kv;
    ix_sched *s;
    sim_item items[MAX_ITEMS];
    int n_items;
    int32_t n_steps;
    ix_sched_plan plan;
    double last_ms;
} sim;

static ix_status sim_admit(void *ctx, ix_sched_item *it) {
    sim *sm = ctx;
    sim_item *si = it->user;
    for (int i = 0; i < it->n_seqs; i++) {
        if (it->seqs[i] >= 0) continue;
        if (ix_kv_seq_create(sm->kv, it->ns, &it->seqs[i]) != IX_OK) return IX_ERR_NOMEM;
        int32_t cached = 0;
        if (ix_kv_seq_adopt_prefix(sm->kv, it->seqs[i], si->toks, si->n_toks, &cached) != IX_OK)
            return IX_ERR_NOMEM;
        it->n_computed[i] = cached;
    }
    return IX_OK;
}

static void sim_init_swap(sim *sm, int64_t n_blocks, int64_t n_swap_blocks, ix_sched_params p) {
    memset(sm, 0, sizeof *sm);
    ix_kv_params kp = ix_kv_default_params();
    kp.dtype = IX_KV_F32;
    kp.n_layer = 1;
    kp.n_kv_head = 1;
    kp.head_dim = 4;
    kp.block_size = BLOCK;
    kp.n_blocks = n_blocks;
    kp.n_swap_blocks = n_swap_blocks;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kv_create(&kp, &sm->kv, &err), IX_OK);
    if (ix_sched_create(&sm->s, &p, sm->kv, &err) != IX_OK) fail_msg("sched: %s", err.msg);
}

static void sim_init(sim *sm, int64_t n_blocks, ix_sched_params p) { sim_init_swap(sm, n_blocks, 0, p); }

static void sim_free(sim *sm) {
    for (int k = 0; k < sm->n_items; k++) {
        ix_sched_item *it = &sm->items[k].it;
        if (it->state != IX_SCHED_DONE) ix_sched_remove(sm->s, it);
        for (int i = 0; i < it->n_seqs; i++)
            if (it->seqs[i] >= 0) ix_kv_seq_free(sm->kv, it->seqs[i]);
    }
    ix_sched_destroy(sm->s);
    ix_kv_destroy(sm->kv);
}

/* A request of n_prompt distinct tokens (seeded by tag) wanting max_new tokens. */
static sim_item *sim_submit(sim *sm, int32_t n_prompt, int32_t max_new, int tag) {
    assert_true(sm->n_items < MAX_ITEMS && n_prompt + max_new <= MAX_TOKENS);
    sim_item *si = &sm->items[sm->n_items];
    memset(si, 0, sizeof *si);
    for (int32_t k = 0; k < n_prompt; k++) si->toks[k] = tag * 100000 + k;
    si->n_toks = n_prompt;
    si->first_step = si->first_token_step = -1;
    ix_sched_item *it = &si->it;
    it->id = (uint64_t)++sm->n_items;
    it->arrival_ns = it->id;
    it->n_seqs = 1;
    it->n_choices = 1;
    for (int i = 0; i < IX_SCHED_MAX_SEQS; i++) it->seqs[i] = -1;
    it->prompt = si->toks;
    it->n_prompt = n_prompt;
    it->max_new = max_new;
    it->user = si;
    ix_sched_add(sm->s, it);
    return si;
}

/* One step: plan, carry it out, report its synthetic time. */
static void sim_step(sim *sm) {
    ix_sched_plan *pl = &sm->plan;
    assert_int_equal(ix_sched_plan_step(sm->s, 0, sim_admit, sm, pl), IX_OK);
    for (int32_t w = 0; w < pl->n_work; w++) {
        ix_sched_work *wk = &pl->work[w];
        ix_sched_item *it = wk->item;
        sim_item *si = it->user;
        int32_t i = wk->seq_index, from = it->n_computed[i];
        if (si->first_step < 0) si->first_step = sm->n_steps;
        assert_int_equal(ix_kv_seq_append(sm->kv, it->seqs[i], wk->n_tokens, si->toks + from), IX_OK);
        it->n_computed[i] += wk->n_tokens;
        ix_kv_seq_commit(sm->kv, it->seqs[i], it->n_computed[i]);
        if (it->n_computed[i] < si->n_toks) continue;
        /* its end: "sample" the next token */
        if (si->first_token_step < 0) si->first_token_step = sm->n_steps;
        si->toks[si->n_toks++] = 7;
        if (++it->n_generated[i] >= it->max_new) {
            it->finished[i] = true;
            ix_sched_remove(sm->s, it);
            ix_kv_seq_free(sm->kv, it->seqs[i]);
            it->seqs[i] = -1;
        }
    }
    sm->last_ms = A_MS + B_MS * pl->n_tokens;
    ix_sched_observe_step(sm->s, pl->n_tokens, (uint64_t)(sm->last_ms * 1e6));
    sm->n_steps++;
}

static int32_t decodes_in_plan(const ix_sched_plan *pl) {
    int32_t n = 0;
    for (int32_t w = 0; w < pl->n_work; w++) n += pl->work[w].decode;
    return n;
}

static int32_t tokens_of(const ix_sched_plan *pl, const sim_item *si) {
    int32_t n = 0;
    for (int32_t w = 0; w < pl->n_work; w++)
        if (pl->work[w].item == &si->it) n += pl->work[w].n_tokens;
    return n;
}

static void test_cost_model(void **state) {
    (void)state;
    ix_sched_cost c;
    memset(&c, 0, sizeof c);
    double a, b;
    /* Nothing known: no fit, no limit. */
    assert_false(ix_sched_cost_fit(&c, &a, &b));
    assert_int_equal(ix_sched_cost_tokens_within(&c, 100), INT32_MAX);
    assert_true(ix_sched_cost_predict_ms(&c, 10) == 0);
    /* Bad observations are ignored. */
    ix_sched_cost_observe(&c, 0, 5);
    ix_sched_cost_observe(&c, 10, -1);
    ix_sched_cost_observe(&c, 10, NAN);
    ix_sched_cost_observe(&c, 10, INFINITY);
    assert_int_equal(c.n_obs, 0);

    /* t = 20 + 2.5 n with +-5% deterministic noise, over varied step sizes. */
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 400; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int32_t n = 1 + (int32_t)(x % 200);
        double noise = 1.0 + 0.05 * ((double)(x >> 11) / (double)(1ull << 53) * 2 - 1);
        ix_sched_cost_observe(&c, n, (A_MS + B_MS * n) * noise);
    }
    assert_true(ix_sched_cost_fit(&c, &a, &b));
    if (fabs(a - A_MS) > 3 || fabs(b - B_MS) > 0.1) fail_msg("fit a=%.3f b=%.4f", a, b);
    int32_t n = ix_sched_cost_tokens_within(&c, 200);
    assert_in_range(n, 68, 76); /* (200 - 20) / 2.5 = 72 */
    assert_int_equal(ix_sched_cost_tokens_within(&c, 10), 0);

    /* The machine slows down (another job takes a core): the fit follows
     * within five windows of steps. */
    for (int k = 0; k < 5 * IX_SCHED_COST_WINDOW; k++) {
        int32_t m = 8 + (k % 9) * 16;
        ix_sched_cost_observe(&c, m, 2 * (A_MS + B_MS * m));
    }
    for (int32_t m = 8; m <= 136; m += 32) {
        double want = 2 * (A_MS + B_MS * m), got = ix_sched_cost_predict_ms(&c, m);
        if (fabs(got - want) > 0.05 * want) fail_msg("after the change: %d tokens %.2f ms, not %.2f", m, got, want);
    }

    /* Steps all alike: the fixed and per-token costs cannot be told apart; the
     * fallback goes through the origin and the mean, which over-predicts
     * larger steps (a smaller budget: the safe side). */
    memset(&c, 0, sizeof c);
    for (int k = 0; k < 50; k++) ix_sched_cost_observe(&c, 16, A_MS + B_MS * 16);
    assert_true(ix_sched_cost_fit(&c, &a, &b));
    assert_true(a == 0 && fabs(b - (A_MS + B_MS * 16) / 16) < 1e-9);
    assert_true(ix_sched_cost_predict_ms(&c, 64) >= A_MS + B_MS * 64);
    assert_true(ix_sched_cost_tokens_within(&c, 200) <= (int32_t)((200 - A_MS) / B_MS));
}

/* Starts sm with four streams decoding, then submits an n_prompt-token
 * request (returned). */
static sim_item *four_decoders_then(sim *sm, ix_sched_params p, int32_t n_prompt) {
    sim_init(sm, 1024, p);
    for (int k = 0; k < 4; k++) sim_submit(sm, 8 + k, 1000, k + 1);
    for (int k = 0; k < 3; k++) sim_step(sm); /* everyone decodes now */
    assert_int_equal(decodes_in_plan(&sm->plan), 4);
    return sim_submit(sm, n_prompt, 2, 9);
}

/* Four streams decode while a 2000-token prompt arrives: with a 100 ms target
 * every step keeps the four decodes, the prompt moves in every step, and
 * once the model has seen a few steps no step passes the target. Without a
 * target the same prompt goes through in cap-sized steps. */
static void test_decodes_never_stall(void **state) {
    (void)state;
    ix_sched_params p = ix_sched_default_params();
    p.max_num_batched_tokens = 512;
    p.target_step_ms = 100;
    sim sm;
    sim_item *big = four_decoders_then(&sm, p, 2000 - 8);
    int32_t steps = 0, over = 0;
    while (big->it.n_computed[0] < big->it.n_prompt) {
        int32_t left = big->it.n_prompt - big->it.n_computed[0];
        sim_step(&sm);
        steps++;
        assert_int_equal(decodes_in_plan(&sm.plan), 4);
        assert_true(tokens_of(&sm.plan, big) >= (left < BLOCK ? left : BLOCK));
        ix_sched_stats st;
        ix_sched_get_stats(sm.s, &st);
        /* the budget is spent, unless the prompt is done */
        if (big->it.n_computed[0] < big->it.n_prompt) assert_int_equal(st.step_budget, sm.plan.n_tokens);
        assert_true(sm.plan.n_tokens <= st.step_budget);
        /* the model learns from the first steps; from then on, within target */
        if (steps > 3 && sm.last_ms > p.target_step_ms + 1e-9) over++;
        assert_true(steps < 200);
    }
    assert_int_equal(over, 0);
    /* (100 - 20) / 2.5 = 32 tokens per step, 4 of them decodes: about 2000 / 28 steps */
    assert_in_range(steps, 1992 / 28 - 4, 1992 / 28 + 8);
    ix_sched_stats st;
    ix_sched_get_stats(sm.s, &st);
    assert_true(fabs(st.cost_a_ms - A_MS) < 1e-6 && fabs(st.cost_b_ms - B_MS) < 1e-6);
    sim_free(&sm);

    /* A target the decodes alone exceed: prefill still moves a block a step. */
    p.target_step_ms = 1;
    big = four_decoders_then(&sm, p, 100);
    for (int k = 0; k < 7; k++) {
        sim_step(&sm);
        assert_int_equal(decodes_in_plan(&sm.plan), 4);
        assert_int_equal(tokens_of(&sm.plan, big), k < 6 ? BLOCK : 100 - 6 * BLOCK);
    }
    sim_free(&sm);

    /* With more decodes than a block, prefill gets as many tokens as they
     * when the target cannot be met: streams bring about as many prompt
     * tokens as they generate, and the queue must not grow. */
    p.target_step_ms = 1;
    sim_init(&sm, 1024, p);
    for (int k = 0; k < 20; k++) sim_submit(&sm, 8, 1000, k + 1);
    for (int k = 0; k < 3; k++) sim_step(&sm);
    big = sim_submit(&sm, 100, 2, 30);
    sim_step(&sm);
    assert_int_equal(decodes_in_plan(&sm.plan), 20);
    assert_int_equal(tokens_of(&sm.plan, big), 20);
    sim_free(&sm);

    /* No target: the cap alone. */
    p.target_step_ms = 0;
    big = four_decoders_then(&sm, p, 1992);
    sim_step(&sm);
    assert_int_equal(tokens_of(&sm.plan, big), 512 - 4);
    sim_free(&sm);
}

/* A long prompt is being prefilled when two requests arrive, a short and a
 * 65-token one: both are admitted and planned in the next step (a block
 * each), the short one gets its first token there, and the long prompt keeps
 * the rest of the budget (it is older). */
static void test_new_request_next_step(void **state) {
    (void)state;
    for (int with_target = 0; with_target < 2; with_target++) {
        ix_sched_params p = ix_sched_default_params();
        p.max_num_batched_tokens = 256;
        p.target_step_ms = with_target ? 400 : 0;
        sim sm;
        sim_init(&sm, 1024, p);
        sim_item *dec = sim_submit(&sm, 5, 1000, 1); /* decodes throughout */
        sim_step(&sm);
        sim_item *big = sim_submit(&sm, 1900, 2, 2);
        sim_step(&sm);
        sim_step(&sm);
        assert_true(big->it.n_computed[0] > 0 && big->it.n_computed[0] < big->it.n_prompt);
        int32_t step = sm.n_steps;
        sim_item *small = sim_submit(&sm, 10, 4, 3);
        sim_item *mid = sim_submit(&sm, 65, 4, 4);
        sim_step(&sm);
        assert_int_equal(small->first_step, step);
        assert_int_equal(mid->first_step, step);
        assert_int_equal(small->first_token_step, step);
        assert_int_equal(tokens_of(&sm.plan, small), 10);
        assert_int_equal(tokens_of(&sm.plan, mid), BLOCK);
        assert_int_equal(tokens_of(&sm.plan, dec), 1);
        assert_int_equal(tokens_of(&sm.plan, big), sm.plan.n_tokens - 1 - 10 - BLOCK);
        assert_true(tokens_of(&sm.plan, big) > BLOCK);
        assert_int_equal(sm.plan.n_admitted, 2);
        /* From the next step on the older prompt comes first again: the
         * 65-token one gets a block a step until the long one is done. */
        sim_step(&sm);
        assert_int_equal(tokens_of(&sm.plan, mid), BLOCK);
        sim_free(&sm);
    }
}

/* Random arrivals into a KV cache too small for them all, with and without
 * a target, preempting by recompute and by swap: every plan's appends fit
 * (sim_step asserts it), every step moves something while work remains, and
 * every request finishes with all its tokens. */
#define N_RANDOM 8
static void test_random_load(void **state) {
    (void)state;
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int round = 0; round < 24; round++) {
        ix_sched_params p = ix_sched_default_params();
        p.preempt = round % 2 ? IX_PREEMPT_SWAP : IX_PREEMPT_RECOMPUTE;
        p.max_num_batched_tokens = 24 + 8 * (round % 5);
        p.target_step_ms = (double[]){0, 40, 90}[round % 3];
        p.max_num_seqs = 2 + round % 4;
        sim sm;
        sim_init_swap(&sm, 12, round % 2 ? 8 : 0, p); /* 192 token slots */
        int submitted = 0;
        for (int32_t step = 0; step < 2000; step++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (submitted < N_RANDOM && x % 3 == 0) {
                sim_submit(&sm, 1 + (int32_t)((x >> 8) % 60), 1 + (int32_t)((x >> 20) % 30), submitted + 1);
                submitted++;
            }
            ix_sched_stats st;
            ix_sched_get_stats(sm.s, &st);
            bool busy = st.n_waiting + st.n_running + st.n_swapped > 0;
            if (!busy && submitted == N_RANDOM) break;
            sim_step(&sm);
            if (busy && sm.plan.n_work == 0) {
                for (int k = 0; k < submitted; k++) {
                    ix_sched_item *it = &sm.items[k].it;
                    fprintf(stderr, "item %d state %d prompt %d computed %d gen %d/%d seq %d\n", k, it->state,
                            it->n_prompt, it->n_computed[0], it->n_generated[0], it->max_new, it->seqs[0]);
                }
                fprintf(stderr, "avail %lld budget %d\n", (long long)ix_kv_n_available(sm.kv), st.step_budget);
                fail_msg("round %d step %d: nothing moves", round, step);
            }
        }
        for (int k = 0; k < N_RANDOM; k++) {
            ix_sched_item *it = &sm.items[k].it;
            assert_int_equal(it->state, IX_SCHED_DONE);
            assert_int_equal(it->n_generated[0], it->max_new);
        }
        ix_kv_stats ks;
        ix_kv_get_stats(sm.kv, &ks);
        assert_int_equal(ks.n_blocks_used, 0);
        sim_free(&sm);
    }
}

/* Twelve 40-token requests arrive at once into an idle scheduler with a
 * 128-token budget: round one gives a block each to as many as half the
 * budget covers (4), and only those are admitted; round two gives the rest to
 * the oldest, so the first two get their first token in the first step
 * (processor sharing would have finished none). */
static void test_burst(void **state) {
    (void)state;
    ix_sched_params p = ix_sched_default_params();
    p.max_num_batched_tokens = 128;
    sim sm;
    sim_init(&sm, 1024, p);
    sim_item *items[12];
    for (int k = 0; k < 12; k++) items[k] = sim_submit(&sm, 40, 2, k + 1);
    sim_step(&sm);
    assert_int_equal(sm.plan.n_admitted, 4);
    assert_int_equal(sm.plan.n_tokens, 128);
    assert_int_equal(items[0]->first_token_step, 0);
    assert_int_equal(items[1]->first_token_step, 0);
    assert_int_equal(tokens_of(&sm.plan, items[2]), 32);
    assert_int_equal(tokens_of(&sm.plan, items[3]), 16);
    assert_int_equal(items[4]->first_step, -1);
    sim_free(&sm);
}

static void test_params(void **state) {
    (void)state;
    ix_kv_params kp = ix_kv_default_params();
    kp.dtype = IX_KV_F32;
    kp.n_layer = kp.n_kv_head = 1;
    kp.head_dim = 4;
    kp.n_blocks = 4;
    ix_kv *kv;
    assert_int_equal(ix_kv_create(&kp, &kv, NULL), IX_OK);
    ix_sched_params p = ix_sched_default_params();
    assert_true(p.target_step_ms == IX_SCHED_TARGET_STEP_MS && p.max_num_batched_tokens == 512);
    ix_sched *s = NULL;
    ix_errbuf err = {{0}};
    double bad[] = {-1, NAN, INFINITY, 1e12};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        p.target_step_ms = bad[k];
        assert_int_equal(ix_sched_create(&s, &p, kv, &err), IX_ERR_INVALID);
        assert_non_null(strstr(err.msg, "target_step_ms"));
        assert_null(s);
    }
    p.target_step_ms = 0;
    assert_int_equal(ix_sched_create(&s, &p, kv, &err), IX_OK);
    ix_sched_destroy(s);
    ix_kv_destroy(kv);
}

/* Plans of decodes that carry drafts (planned, not carried out). */
static void test_drafts(void **state) {
    (void)state;
    ix_sched_params p = ix_sched_default_params();
    p.target_step_ms = 0;
    p.max_num_batched_tokens = 6;
    sim sm;
    sim_init(&sm, 64, p);
    sim_item *a = sim_submit(&sm, 5, 50, 1), *b = sim_submit(&sm, 5, 50, 2);
    for (int k = 0; k < 4 && (a->it.n_generated[0] == 0 || b->it.n_generated[0] == 0); k++) sim_step(&sm);
    assert_true(a->it.n_generated[0] > 0 && b->it.n_generated[0] > 0);
    a->it.n_draft[0] = 3;
    b->it.n_draft[0] = 3;
    ix_sched_plan *pl = &sm.plan;
    assert_int_equal(ix_sched_plan_step(sm.s, 0, sim_admit, &sm, pl), IX_OK);
    assert_int_equal(pl->n_work, 2);
    /* a budget of 6: the first decode and its 3 drafts, then the second
     * decode and what is left (1 draft) */
    assert_true(pl->work[0].decode && pl->work[1].decode);
    assert_int_equal(pl->work[0].n_tokens, 4);
    assert_int_equal(pl->work[1].n_tokens, 2);
    assert_int_equal(pl->n_tokens, 6);
    a->it.n_draft[0] = b->it.n_draft[0] = 0; /* drafts are the engine's per plan */
    sim_free(&sm);

    /* Two blocks: one sequence of 14 prompt tokens holds one, one is free.
     * 3 drafts cross into the free block; 18 would need two: then every draft
     * is dropped and the decode runs alone, nobody preempted. */
    p = ix_sched_default_params();
    p.target_step_ms = 0;
    sim_init(&sm, 2, p);
    a = sim_submit(&sm, 14, 50, 3);
    for (int k = 0; k < 4 && a->it.n_generated[0] == 0; k++) sim_step(&sm);
    assert_int_equal(a->it.n_generated[0], 1);
    a->it.n_draft[0] = 3;
    assert_int_equal(ix_sched_plan_step(sm.s, 0, sim_admit, &sm, pl), IX_OK);
    assert_int_equal(pl->n_work, 1);
    assert_int_equal(pl->work[0].n_tokens, 4);
    a->it.n_draft[0] = 18;
    assert_int_equal(ix_sched_plan_step(sm.s, 0, sim_admit, &sm, pl), IX_OK);
    assert_int_equal(pl->n_work, 1);
    assert_int_equal(pl->work[0].n_tokens, 1);
    assert_int_equal(pl->n_preempted, 0);
    a->it.n_draft[0] = 0;
    sim_step(&sm); /* and the plain decode runs */
    assert_int_equal(a->it.n_generated[0], 2);
    sim_free(&sm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drafts),
        cmocka_unit_test(test_cost_model),
        cmocka_unit_test(test_decodes_never_stall),
        cmocka_unit_test(test_new_request_next_step),
        cmocka_unit_test(test_burst),
        cmocka_unit_test(test_random_load),
        cmocka_unit_test(test_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
