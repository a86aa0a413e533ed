/*
 * inferx spec: speculative decoding -- proposers behind one interface, and
 * the arithmetic that decides how far to speculate.
 *
 * A proposer guesses the next tokens of a sequence cheaply; the engine puts
 * the sequence's own next token plus the k guesses through one forward pass
 * of the target (a multi-token decode step, sched.h), samples the k + 1
 * logits rows in order with the request's own sampler, and keeps each guess
 * while it equals the token the target sampled at its place. The first
 * mismatch is replaced by the target's token and the rest is rolled back
 * (ix_kv_seq_truncate). Proposals are deterministic (a proposer's one token
 * per place, q one-hot), and for a one-hot q the modified rejection sampling
 * of Leviathan et al. -- accept x with probability min(1, p(x) / q(x)) =
 * p(x), otherwise sample from norm(max(0, p - q)) = p without x -- is
 * exactly "sample y from p; keep x if y == x, else emit y". So every output
 * token is drawn from the target's distribution after the request's sampler
 * transforms (penalties, bias, grammar, temperature, top-k/p) with the same
 * random draw a non-speculative step makes: greedy and seeded outputs are
 * identical with speculation on and off, token for token.
 *
 * A new proposer is one file: an ix_proposer_ops table registered in
 * spec.c's table. Thread model: a proposer is owned by the engine thread.
 */
#ifndef INFERX_SPEC_H
#define INFERX_SPEC_H

#include "inferx/core.h"
#include "inferx/kernels.h"
#include "inferx/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ix_spec_kind {
    IX_SPEC_NONE = 0,
    IX_SPEC_NGRAM = 1,  /* prompt lookup: the last n tokens matched earlier in the sequence */
    IX_SPEC_DRAFT = 2,  /* a second GGUF model with the target's vocabulary, its own paged KV */
    IX_SPEC_MEDUSA = 3, /* heads on the target's last hidden state (a heads file of inferx medusa-train) */
} ix_spec_kind;

/* "none", "ngram", "draft", "medusa". parse: IX_ERR_INVALID for other names. */
ix_status ix_spec_kind_parse(const char *name, ix_spec_kind *out);
const char *ix_spec_kind_name(ix_spec_kind k);

#define IX_SPEC_MAX_K 8 /* draft tokens per sequence and step, at most */

typedef struct ix_spec_params {
    ix_spec_kind kind;  /* default IX_SPEC_NONE */
    int32_t k;          /* most draft tokens per sequence and step, 1..IX_SPEC_MAX_K; default 4 */
    int32_t ngram_max;  /* ngram: longest suffix matched, 1..8; default 3 */
    int32_t ngram_min;  /* ngram: shortest suffix matched, 1..ngram_max; default 1 */
    /* true (default): each sequence's k follows its measured acceptance and
     * the measured step cost (ix_spec_choose_k), which turns speculation off
     * when the step is compute-bound; false: always k (tests, benchmarks) */
    bool adaptive;
    const char *draft_model; /* IX_SPEC_DRAFT: the draft GGUF's path */
    /* IX_SPEC_DRAFT: bytes of the draft's own KV pool; 0 (default): room
     * for as many tokens as the target's pool holds (ix_spec_env) */
    size_t draft_kv_mem_bytes;
    /* IX_SPEC_MEDUSA: the heads file (inferx medusa-train) for this target;
     * k is capped at its number of heads */
    const char *medusa_heads;
} ix_spec_params;

ix_spec_params ix_spec_default_params(void);
/* IX_OK, or IX_ERR_INVALID / IX_ERR_UNSUPPORTED with a message naming the
 * parameter at fault. */
ix_status ix_spec_params_check(const ix_spec_params *p, ix_errbuf *err);

/* One sequence in a batched proposal: the proposer reads its tokens and
 * writes up to k guesses of what follows them. */
typedef struct ix_spec_seq {
    uint64_t key;           /* stable for the sequence's life: (request, choice) */
    uint64_t ns;            /* its prefix-cache namespace (a proposer's own cache keeps tenants apart) */
    const ix_token *tokens; /* (n_tokens) prompt + generated so far */
    int32_t n_tokens, n_prompt;
    /* (n_embd) the target's final-norm hidden state of the row whose logits
     * gave tokens[n_tokens - 1]; NULL unless the proposer wants it and the
     * engine kept one for this token (the first decode after a preemption
     * by recompute may have none) */
    const float *hidden;
    int32_t k;              /* guesses wanted, 1..IX_SPEC_MAX_K */
    ix_token *out;          /* (k) written by the proposer */
    int32_t n_out;          /* guesses written, 0..k */
} ix_spec_seq;

/* What a proposer may need from the engine it runs in (a draft model: the
 * target to check its vocabulary against, the worker pool to run on, the
 * sizes of a step and of the target's KV pool). Everything is borrowed and
 * outlives the proposer. */
typedef struct ix_spec_env {
    const ix_model *target;   /* the verifying model */
    ix_pool *pool;            /* kernel workers to run on; NULL: a pool of its own */
    int32_t n_threads;        /* for a pool of its own; <= 0 all cores */
    int32_t max_batch_tokens; /* most tokens a proposer's forward pass may carry */
    int32_t n_ctx;            /* longest sequence */
    ix_kv_dtype kv_dtype;     /* the target's KV element type and block size */
    int32_t kv_block_size;
    int64_t kv_tokens;        /* token slots of the target's KV pool */
} ix_spec_env;

/* A proposer's own resources, for stats and metrics (zeros: none). */
typedef struct ix_spec_stats {
    int64_t n_seqs;                   /* sequences with state in the proposer */
    int64_t kv_blocks_used, kv_blocks_total; /* its own KV pool */
    uint64_t n_forward, n_tokens, forward_ns; /* its forward passes */
} ix_spec_stats;

/* The interface a proposer implements. propose fills every sequence of a
 * step at once (a draft model runs its forward passes over all of them
 * together). release (optional) says a key will not be seen again (its
 * request ended), so per-sequence state can go; a proposer must also cope
 * with keys it never sees released. */
typedef struct ix_proposer_ops {
    const char *name;
    ix_spec_kind kind;
    bool wants_hidden; /* needs the target's last hidden state (Medusa) */
    ix_status (*create)(void **self, const ix_spec_params *p, const ix_spec_env *env, ix_errbuf *err);
    void (*destroy)(void *self);
    ix_status (*propose)(void *self, ix_spec_seq *seqs, int32_t n);
    void (*release)(void *self, uint64_t key);
    void (*get_stats)(const void *self, ix_spec_stats *out); /* optional */
    /* optional: the most guesses it can make per sequence (Medusa: its
     * number of heads); the engine caps k there. NULL: IX_SPEC_MAX_K */
    int32_t (*max_k)(const void *self);
} ix_proposer_ops;

typedef struct ix_proposer ix_proposer;

/* The proposer of p->kind (IX_SPEC_NONE: *out = NULL, IX_OK). Owned by the
 * caller. env may be NULL for proposers that need nothing of it (ngram); the
 * draft proposer refuses a NULL env or target. */
ix_status ix_proposer_create(ix_proposer **out, const ix_spec_params *p, const ix_spec_env *env,
                             ix_errbuf *err);
void ix_proposer_destroy(ix_proposer *pr);
const ix_proposer_ops *ix_proposer_get_ops(const ix_proposer *pr);
ix_status ix_proposer_propose(ix_proposer *pr, ix_spec_seq *seqs, int32_t n);
void ix_proposer_release(ix_proposer *pr, uint64_t key);
/* The most guesses per sequence it can make (ix_proposer_ops.max_k). */
int32_t ix_proposer_max_k(const ix_proposer *pr);
/* Its own resources now (zeros for a proposer without any, or pr NULL). */
void ix_proposer_get_stats(const ix_proposer *pr, ix_spec_stats *out);

/* Prompt lookup on its own (what the ngram proposer does per sequence): the
 * longest suffix of toks, from max_n down to min_n tokens, that also occurs
 * earlier in toks (latest occurrence first); writes the k tokens that
 * followed it into out, reading on through out itself where they reach the
 * end of toks (a loop of period p continues). Returns k, or 0: no match. */
int32_t ix_spec_ngram_lookup(const ix_token *toks, int32_t n, int32_t min_n, int32_t max_n, int32_t k,
                             ix_token *out);

/* Expected tokens a step yields for a sequence that speculates k tokens with
 * per-token acceptance alpha: (1 - alpha^(k+1)) / (1 - alpha). */
double ix_spec_expected_tokens(double alpha, int32_t k);

/* How many draft tokens (0..k_max) to verify for one sequence in a step of
 * n_decode decoding sequences, given its acceptance estimate alpha and the
 * step-cost line t(n) = a_ms + b_ms n (sched.h). It maximises the tokens the
 * step gains for what its extra tokens cost: k pays when
 * E(alpha, k) - 1 > k b / r, r = (a + b n_decode) / n_decode the time a
 * token costs without speculation -- so when the per-token cost b dominates
 * (the step is compute-bound, many sequences) every k > 0 loses and
 * speculation turns off, and it comes back when the load drops. Without a
 * cost line (b_ms <= 0) it returns k_max. */
int32_t ix_spec_choose_k(double alpha, int32_t k_max, double a_ms, double b_ms, int32_t n_decode);
/* The same for a proposer whose guesses cost guess_ms each on top of the
 * target's b_ms (a draft model's forward passes, measured by the engine):
 * each guess then adds b + guess_ms to the step, so a slow draft pays
 * only at a higher acceptance, and never once the step is compute-bound. */
int32_t ix_spec_choose_k_cost(double alpha, int32_t k_max, double a_ms, double b_ms, double guess_ms,
                              int32_t n_decode);
/* The same with measured step times: step_ms[n] (n < n_steps), where
 * positive, is what a step of n tokens has cost the target (without the
 * proposer's own time), and replaces the line there. The line is straight;
 * a step is not always: verifying 5 rows of F16 weights meets the core's
 * FMA rate where 3 rows still cost what one does (docs/kernels.md), so k = 4
 * can lose to k = 3 at an acceptance the line would spend on k = 4. Sizes
 * not yet measured take the line, so a k is tried before it is ruled out. */
int32_t ix_spec_choose_k_steps(double alpha, int32_t k_max, const double *step_ms, int32_t n_steps, double a_ms,
                               double b_ms, double guess_ms, int32_t n_decode);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_SPEC_H */
