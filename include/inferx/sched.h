/*
 * inferx sched: iteration-level scheduling of requests over a paged KV cache.
 *
 * The scheduler owns three queues (waiting, running, swapped) of items - one
 * item per request, holding up to IX_SCHED_MAX_SEQS KV sequences (its
 * parallel samples) - and, once per engine step, builds the plan of that step:
 *   1. every running item that finished its prefill decodes one token per
 *      sequence, plus the draft tokens the engine asks it to verify
 *      (decodes go first so running streams never stall);
 *   2. items still prefilling get their next chunk;
 *   3. swapped items come back, then waiting items are admitted in policy
 *      order, each with a first prefill chunk;
 * all within the step's token budget and max_num_seqs sequences. The budget
 * is max_num_batched_tokens (a hard cap); with target_step_ms set and
 * sequences decoding, it is what the step-cost model (ix_sched_cost below,
 * fitted on the measured steps) predicts fits in target_step_ms, so a step
 * that carries prefill never stalls the decoding streams for much longer
 * than the target (Sarathi-Serve's stall-free batching). Prefill is shared
 * in two rounds: every prefilling sequence, new arrivals included, gets one
 * chunk of at most one KV block in policy order (within half the prefill
 * budget), then what is left goes to the same sequences in policy order; so
 * a new request's prefill starts in the next step even behind a long
 * prompt. It
 * checks the KV cache before promising anything: when the running items'
 * next tokens do not fit, it preempts victims (policy order, last first) by
 * recompute (free the blocks, go back to the front of the waiting queue; the
 * prompt prefix is usually still in the prefix cache) or swap (copy the
 * blocks to the host tier). A waiting item under the priority policy may
 * preempt running items of lower priority.
 *
 * Policies:
 *   fcfs      arrival order.
 *   priority  higher `priority` first, then arrival; victims: lowest first.
 *   deadline  earliest deadline first (items without one after all that have
 *             one, in arrival order). A waiting item whose deadline has passed,
 *             or that cannot finish in time even if started now (estimated
 *             from the measured time per step), is shed: the plan lists it in
 *             `expired` and the engine finishes it with a deadline outcome
 *             instead of spending compute on a late answer. Running items are
 *             never shed; missing a deadline while running is reported.
 *
 * The scheduler does KV bookkeeping only through the public kv.h queries and
 * the operations the plan implies (appends are left to the engine, which
 * writes the tokens). Thread model: owned by the engine thread.
 */
#ifndef INFERX_SCHED_H
#define INFERX_SCHED_H

#include "inferx/core.h"
#include "inferx/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IX_SCHED_MAX_SEQS 16 /* parallel samples (n) per request */

typedef enum ix_sched_policy {
    IX_SCHED_FCFS = 0,
    IX_SCHED_PRIORITY = 1,
    IX_SCHED_DEADLINE = 2,
} ix_sched_policy;

typedef enum ix_preempt_mode {
    IX_PREEMPT_RECOMPUTE = 0,
    IX_PREEMPT_SWAP = 1, /* falls back to recompute when the swap tier is full */
} ix_preempt_mode;

ix_status ix_sched_policy_parse(const char *name, ix_sched_policy *out);
const char *ix_sched_policy_name(ix_sched_policy p);
ix_status ix_preempt_mode_parse(const char *name, ix_preempt_mode *out);
const char *ix_preempt_mode_name(ix_preempt_mode m);

typedef struct ix_sched_params {
    ix_sched_policy policy;
    ix_preempt_mode preempt;
    int32_t max_num_seqs;           /* sequences in one step; default 64 */
    int32_t max_num_batched_tokens; /* tokens in one step, a hard cap; default 512 */
    /* > 0: while sequences decode, a step's prefill is cut so that the step's
     * predicted time stays within this many ms -- but prefill keeps at least
     * as many tokens as there are decodes (and a block), so that it keeps up
     * when the target cannot be met; 0: the cap alone. Default
     * IX_SCHED_TARGET_STEP_MS. */
    double target_step_ms;
} ix_sched_params;

#define IX_SCHED_TARGET_STEP_MS 200.0

ix_sched_params ix_sched_default_params(void);

typedef enum ix_sched_state {
    IX_SCHED_WAITING = 0,
    IX_SCHED_RUNNING = 1,
    IX_SCHED_SWAPPED = 2,
    IX_SCHED_DONE = 3,
} ix_sched_state;

/* One request as the scheduler sees it. The engine owns the memory and fills
 * the first block; the scheduler maintains the rest. */
typedef struct ix_sched_item {
    /* set by the engine */
    uint64_t id;
    int32_t priority;
    uint64_t arrival_ns;
    uint64_t deadline_ns; /* absolute, ix_time_ns clock; 0: none */
    uint64_t ns;          /* KV namespace */
    int32_t n_seqs;       /* choices; 1 until the prompt is prefilled, then n */
    int32_t n_choices;    /* n requested */
    int32_t seqs[IX_SCHED_MAX_SEQS]; /* KV sequence ids, -1 when none */
    const ix_token *prompt; /* (n_prompt) for prefix-cache estimates */
    int32_t n_prompt;
    int32_t max_new;      /* generated tokens at most (per choice) */
    /* tokens each sequence must (re)compute before it decodes: the prompt,
     * plus, after a recompute preemption, the tokens it had generated */
    int32_t n_target[IX_SCHED_MAX_SEQS];
    int32_t n_computed[IX_SCHED_MAX_SEQS]; /* tokens whose K/V is in the cache */
    int32_t n_generated[IX_SCHED_MAX_SEQS];
    bool finished[IX_SCHED_MAX_SEQS];
    /* speculative decoding: draft tokens the engine would verify in the
     * sequence's next decode, set before each plan. A decode work entry then
     * carries 1 + n_draft tokens -- fewer when the step's budget runs out,
     * none when the cache cannot hold every draft (drafts are dropped before
     * anyone is preempted for them). */
    int32_t n_draft[IX_SCHED_MAX_SEQS];
    void *user;
    /* maintained by the scheduler */
    ix_sched_state state;
    int32_t n_preemptions;
    struct ix_sched_item *prev, *next; /* queue links */
} ix_sched_item;

/* What one step does. Arrays are owned by the scheduler and valid until the
 * next plan. */
typedef struct ix_sched_work {
    ix_sched_item *item;
    int32_t seq_index; /* which of item->seqs */
    int32_t n_tokens;  /* a decode: 1 + the draft tokens granted; a prefill: the chunk */
    bool decode;
} ix_sched_work;

typedef struct ix_sched_plan {
    ix_sched_work *work; /* prefill chunks and decodes, in batch order */
    int32_t n_work;
    int32_t n_tokens;
    ix_sched_item **preempted; /* preempted in this plan (already requeued) */
    int32_t n_preempted;
    ix_sched_item **admitted; /* entered RUNNING from WAITING this step: the
                                 engine creates their sequences first */
    int32_t n_admitted;
    ix_sched_item **expired; /* shed by the deadline policy (removed) */
    int32_t n_expired;
} ix_sched_plan;

typedef struct ix_sched ix_sched;

ix_status ix_sched_create(ix_sched **out, const ix_sched_params *p, ix_kv *kv, ix_errbuf *err);
void ix_sched_destroy(ix_sched *s);

/* Enqueue a new item (state WAITING, n_seqs 1, seqs[0] = -1). */
void ix_sched_add(ix_sched *s, ix_sched_item *it);
/* Remove an item from whatever queue holds it (finish or cancel); the
 * engine frees its KV sequences. */
void ix_sched_remove(ix_sched *s, ix_sched_item *it);

/* Callback with which the scheduler asks the engine to give an admitted (or
 * recompute-resumed) item its KV sequences: one per unfinished choice
 * (seqs[i], created with prefix adoption), setting n_computed[i] to the
 * tokens found cached. Anything but IX_OK leaves the item waiting. */
typedef ix_status (*ix_sched_admit_fn)(void *ctx, ix_sched_item *it);

/* Builds the plan of the next step at time now_ns. Preemptions and swaps are
 * carried out (KV sequences freed or swapped); admitted items get their
 * sequence through admit_fn before their blocks are counted. */
ix_status ix_sched_plan_step(ix_sched *s, uint64_t now_ns, ix_sched_admit_fn admit_fn, void *ctx,
                             ix_sched_plan *plan);
/* Feeds the measured duration of a step of n_tokens tokens (plan to the end
 * of sampling) to the step-cost model, which sizes the budget and the
 * deadline estimates. */
void ix_sched_observe_step(ix_sched *s, int32_t n_tokens, uint64_t elapsed_ns);

/* The step-cost model: a step of n tokens takes t(n) = a + b n ms (a: what
 * every step pays -- reading the weights once, the pool's hand-offs,
 * sampling; b: the marginal cost of a token), fitted by least squares over
 * the observed steps with exponentially decaying weights (each new step
 * weighs 1/IX_SCHED_COST_WINDOW of the total), so it follows a machine whose
 * speed changes. While the observed token counts are too alike to separate a
 * from b, or the fit is not physical (a < 0 or b <= 0), it falls back to a
 * line through the origin and the weighted means, which over-predicts steps
 * larger than the usual one: the budget errs towards smaller steps. Plain
 * data, no allocation; any thread that owns it. */
#define IX_SCHED_COST_WINDOW 32
typedef struct ix_sched_cost {
    double w, sx, sy, sxx, sxy; /* decayed sums: weight, n, t, n^2, n t */
    uint64_t n_obs;
} ix_sched_cost;

void ix_sched_cost_observe(ix_sched_cost *c, int32_t n_tokens, double ms);
/* The fitted line; false (and 0, 0) before the first observation. */
bool ix_sched_cost_fit(const ix_sched_cost *c, double *a_ms, double *b_ms);
/* Predicted ms of a step of n tokens; 0 before the first observation. */
double ix_sched_cost_predict_ms(const ix_sched_cost *c, int32_t n_tokens);
/* Most tokens a step may hold to take at most ms: floor((ms - a) / b), at
 * least 0; INT32_MAX before the first observation (nothing known yet). */
int32_t ix_sched_cost_tokens_within(const ix_sched_cost *c, double ms);

typedef struct ix_sched_stats {
    int32_t n_waiting, n_running, n_swapped;
    uint64_t n_preempt_recompute, n_preempt_swap, n_expired;
    int32_t step_budget;         /* token budget of the last plan */
    double cost_a_ms, cost_b_ms; /* the step-cost model now (0 before a step) */
} ix_sched_stats;
void ix_sched_get_stats(const ix_sched *s, ix_sched_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_SCHED_H */
