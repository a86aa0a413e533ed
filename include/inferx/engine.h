/*
 * inferx engine: continuous batching. One engine thread owns the model
 * context, the KV cache, the scheduler and every request's sampler, and loops:
 * plan a step (sched.h), append KV slots, run one forward pass over the ragged
 * batch, commit K/V, sample, detokenize, apply stop conditions, report. New
 * requests join between steps; a finished request releases its blocks in the
 * step it finishes.
 *
 * This is the one generation loop: the server, the offline batch API and the
 * command line's run and bench all generate through it.
 *
 * Threads: ix_engine_submit / ix_engine_cancel / ix_engine_get_stats may be
 * called from any thread (they take a short mutex and wake the engine thread;
 * the engine thread never blocks on a caller). Callbacks run on the engine
 * thread: they must be quick and must not call back into the engine except
 * ix_engine_cancel. An engine created with start_thread false has no thread
 * of its own: whoever calls ix_engine_step is its engine thread, and the
 * callbacks run inside that call.
 */
#ifndef INFERX_ENGINE_H
#define INFERX_ENGINE_H

#include "inferx/core.h"
#include "inferx/grammar.h"
#include "inferx/kv.h"
#include "inferx/model.h"
#include "inferx/sample.h"
#include "inferx/sched.h"
#include "inferx/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ix_finish_reason {
    IX_FINISH_NONE = 0,
    IX_FINISH_STOP = 1,     /* EOS / stop token / stop string */
    IX_FINISH_LENGTH = 2,   /* max_tokens or the context is full */
    IX_FINISH_ABORT = 3,    /* cancelled, or the engine shut down */
    IX_FINISH_ERROR = 4,    /* see ix_finish_info.message */
    IX_FINISH_DEADLINE = 5, /* shed by the deadline policy before it ran */
} ix_finish_reason;

const char *ix_finish_reason_name(ix_finish_reason r); /* "stop", "length", ... */

typedef struct ix_usage {
    int32_t prompt_tokens;
    int32_t cached_prompt_tokens; /* found in the prefix cache at admission */
    int32_t completion_tokens;    /* over all choices */
} ix_usage;

typedef struct ix_timings {
    double queue_ms;       /* submit -> first scheduled */
    double prefill_ms;     /* first scheduled -> prompt fully computed */
    double first_token_ms; /* submit -> first token (TTFT) */
    double total_ms;       /* submit -> finish */
    /* Its share of the machine: for every engine step it took part in, the
     * step's forward time x its tokens in the step / the step's tokens. The
     * basis of per-request cost (idle time is nobody's). */
    double compute_ms;
} ix_timings;

typedef struct ix_finish_info {
    uint64_t id;
    int32_t n_choices;
    ix_finish_reason reasons[IX_SCHED_MAX_SEQS]; /* per choice */
    ix_finish_reason reason;                     /* of choice 0 */
    ix_usage usage;
    ix_timings timings;
    bool deadline_missed; /* it had a deadline and finished after it */
    int32_t n_preemptions;
    char message[256];    /* for IX_FINISH_ERROR */
    /* For IX_FINISH_ERROR: the request's own content caused it (its grammar
     * or schema proved too ambiguous to follow at some step), not the
     * server; a server answers 400 rather than 500. */
    bool invalid_request;
} ix_finish_info;

/* One new token of one choice: id, the text it completes (may be empty while
 * a UTF-8 character or a possible stop string is held back; the text never
 * contains a stop string), and its logprobs. */
typedef struct ix_token_event {
    uint64_t id;
    int32_t choice;
    ix_token token;
    const char *text;
    size_t text_len;
    const ix_sample_result *sample; /* chosen token's logprob and alternatives */
} ix_token_event;

/* One step's share of computing a request's prompt (a prefill chunk; after
 * a preemption, the recomputation of its tokens so far). */
typedef struct ix_prefill_event {
    uint64_t id;
    int32_t seq;          /* which of the request's sequences (0 until n > 1 forks) */
    int32_t pos;          /* the first position computed in this step */
    int32_t n_tokens;     /* positions computed in this step */
    int32_t n_total;      /* positions to compute before its next token */
    int32_t step_tokens;  /* tokens in the whole step, every request's */
    uint64_t start_ns, end_ns; /* the step's plan-to-forward-end, ix_time_ns() clock */
} ix_prefill_event;

typedef struct ix_request_callbacks {
    void (*on_token)(void *user, const ix_token_event *ev);
    /* Exactly once per accepted request, last. */
    void (*on_finish)(void *user, const ix_finish_info *info);
    void *user;
    /* Optional (NULL: none): after every step that computed part of its
     * prompt (tracing, progress). */
    void (*on_prefill)(void *user, const ix_prefill_event *ev);
} ix_request_callbacks;

/* Constrained decoding (grammar.h): every choice of the request gets its own
 * grammar matcher; at each step the sampler sees only the tokens the matcher
 * allows (after logit bias and penalties, before temperature and filtering,
 * so every sampler setting and logprobs work as usual), the chosen token
 * advances the matcher, and the choice finishes with IX_FINISH_STOP when the
 * output is complete and nothing may follow (or the grammar's end-of-
 * generation token is sampled). An end-of-generation token is allowed only
 * where the grammar may end, even with ignore_eos. max_tokens, stop strings
 * and stop token ids still apply and may cut the output short. */
typedef enum ix_constraint_kind {
    IX_CONSTRAINT_NONE = 0,
    IX_CONSTRAINT_GRAMMAR,     /* text: GBNF-like grammar (docs/grammar.md) */
    IX_CONSTRAINT_JSON_SCHEMA, /* text: a JSON Schema; flags IX_GRAMMAR_SCHEMA_* */
    IX_CONSTRAINT_JSON_OBJECT, /* any JSON object; text unused; flags as above */
} ix_constraint_kind;

typedef struct ix_constraint {
    ix_constraint_kind kind;
    const char *text; /* (len) bytes, not NUL-terminated; compiled at submit */
    size_t len;
    unsigned flags;
} ix_constraint;

typedef struct ix_request_params {
    const ix_token *prompt; /* (n_prompt), copied */
    size_t n_prompt;
    ix_sample_params sample; /* logit_bias copied */
    int32_t max_tokens;      /* per choice; <= 0: until the context is full */
    const char *const *stop; /* stop strings, copied */
    size_t n_stop;
    const ix_token *stop_token_ids; /* copied */
    size_t n_stop_token_ids;
    bool ignore_eos;
    int32_t priority;     /* higher runs first under the priority policy */
    int64_t deadline_ms;  /* > 0: the answer is wanted within this many ms */
    uint64_t cache_ns;    /* prefix-cache namespace (tenant / cache_salt) */
    int32_t n;            /* parallel choices, 1..IX_SCHED_MAX_SEQS; 0 = 1 */
    ix_constraint constraint; /* kind IX_CONSTRAINT_NONE (default): free decoding */
    ix_request_callbacks cb;
    /* true: this request never speculates (its tokens are the same either
     * way; an opt-out for latency experiments or a client that wants every
     * step alike). Default false. */
    bool no_spec;
    /* Session (docs/kv-cache.md "Sessions"): session_id != 0 pins this
     * request's KV (its first choice's prompt and output, full blocks)
     * under (session_id, session_tenant) until session_expires_ms (wall
     * clock, Unix ms; 0 never), replacing what the session pinned before. */
    uint64_t session_id;
    uint64_t session_tenant;
    int64_t session_expires_ms;
} ix_request_params;

ix_request_params ix_request_default_params(void);

struct ix_kvstore_stats;

typedef struct ix_engine_params {
    ix_sched_params sched;
    ix_kv_dtype kv_dtype;      /* default f16 */
    size_t kv_mem_bytes;       /* KV pool budget; default 256 MiB */
    int64_t kv_blocks;         /* > 0: exact pool size instead (tests) */
    int32_t kv_block_size;     /* default 16 */
    int64_t kv_swap_blocks;    /* host swap tier for IX_PREEMPT_SWAP; default: pool size */
    bool enable_prefix_cache;  /* default true */
    int32_t n_threads;         /* kernel threads; <= 0 all cores */
    int32_t n_ctx;             /* longest sequence; <= 0: the model's context */
    bool start_thread;         /* default true; false: drive with ix_engine_step */
    /* Disk tier (docs/kv-cache.md): NULL or "" none; else a block store in
     * this folder under the prefix cache -- evicted blocks are written
     * there, prompts read them back, and at destroy every cached block is
     * written so a new engine over the same folder finds them. Copied. */
    const char *kv_disk_dir;
    uint64_t kv_disk_max_bytes; /* 0: unbounded; else LRU on disk past it */
    /* speculative decoding (spec.h); default kind IX_SPEC_NONE. Submit and
     * create refuse what ix_spec_params_check refuses. */
    ix_spec_params spec;
} ix_engine_params;

ix_engine_params ix_engine_default_params(void);

typedef struct ix_engine ix_engine;

/* The engine borrows the model (it must outlive the engine). */
ix_status ix_engine_create(ix_engine **out, const ix_model *m, const ix_engine_params *p,
                           ix_errbuf *err);
/* Stops the thread; requests still in flight finish with IX_FINISH_ABORT. */
void ix_engine_destroy(ix_engine *e);

/* Validates and queues a request; *id_out (may be NULL) gets its id. Errors
 * (IX_ERR_INVALID for bad parameters, IX_ERR_TOO_LONG when the prompt plus
 * one token does not fit the context, ...) are returned here with the message
 * in err, and no callback is ever called for a refused request. Any thread. */
ix_status ix_engine_submit(ix_engine *e, const ix_request_params *r, uint64_t *id_out,
                           ix_errbuf *err);
/* Compiles a constraint (as submit does) without submitting anything:
 * IX_OK, or the grammar module's error (IX_ERR_FORMAT with "line L, column C"
 * for GBNF and malformed JSON, IX_ERR_UNSUPPORTED naming a schema keyword,
 * IX_ERR_TOO_LONG, IX_ERR_UTF8) with the message in err, so a server can name
 * the request field at fault. Compiled grammars are cached by kind, flags and
 * text (the last 16 distinct ones), each with a matcher in its start state
 * that every request's matchers are cloned from, so a grammar used again
 * starts with its token masks warm. The first constrained request builds the
 * model's token trie for the grammar module (tens of ms, once). Any thread. */
ix_status ix_engine_check_constraint(ix_engine *e, const ix_constraint *c, ix_errbuf *err);
/* Stops a request within one step and frees its blocks; its on_finish reports
 * IX_FINISH_ABORT. Unknown or finished ids are ignored. Any thread. */
void ix_engine_cancel(ix_engine *e, uint64_t id);

/* The synchronous entry point, for an engine created with start_thread false
 * (whose engine thread is then the one caller that steps it): runs one step
 * on the calling thread -- takes in submissions and cancellations, plans,
 * runs at most one forward pass, samples, calls on_token / on_finish -- and
 * returns. A prompt takes one step per chunk of max_num_batched_tokens, then
 * each step decodes one token per running choice; between steps the caller
 * may do its own work (inferx bench measures memory bandwidth there).
 * *did_work is false when there was nothing to do. A request's own failures
 * finish it with IX_FINISH_ERROR; the engine's are returned (IX_ERR_STATE:
 * the engine has a thread of its own). */
ix_status ix_engine_step(ix_engine *e, bool *did_work);

/* Steps a thread-less engine until *done is true -- a flag the caller's
 * on_finish sets (it runs inside these steps) -- or max_steps steps have run
 * (<= 0: no limit): IX_OK. IX_ERR_STATE when the engine has a thread, or when
 * it runs out of work with *done still false (nothing in flight can set it);
 * a step's error otherwise. `inferx run` is one submit and one call of this. */
ix_status ix_engine_run_until(ix_engine *e, const bool *done, int64_t max_steps);

/* vLLM's iteration_tokens_total buckets. */
#define IX_ENGINE_STEP_TOKEN_BUCKETS 13
#define IX_ENGINE_STEP_TOKEN_BOUNDS {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}

typedef struct ix_engine_stats {
    int32_t n_waiting, n_running, n_swapped;
    uint64_t n_steps, n_finished;
    uint64_t n_prompt_tokens, n_cached_prompt_tokens, n_generated_tokens;
    uint64_t n_preempt_recompute, n_preempt_swap, n_deadline_shed, n_deadline_missed;
    /* The scheduler's token budget of the last step, and its step-cost model:
     * a step of n tokens takes about fixed + n x per_token ms (sched.h). */
    int32_t step_budget;
    double step_cost_fixed_ms, step_cost_per_token_ms;
    /* Where the steps' time went, summed: planning and building the batch
     * (scheduler, KV appends), the forward pass (broken down in forward),
     * and sampling plus handing the tokens to the streams. */
    uint64_t plan_ns, forward_ns, sample_ns;
    /* Tokens per step (forward passes run), as a histogram: step_tokens[i]
     * counts steps of at most IX_ENGINE_STEP_TOKEN_BOUNDS[i] tokens (and more
     * than the bound before); the last entry, steps above every bound. */
    uint64_t step_tokens[IX_ENGINE_STEP_TOKEN_BUCKETS + 1];
    uint64_t step_tokens_sum;
    /* Speculative decoding, as vLLM counts it: decodes that verified drafts,
     * the draft tokens verified, those accepted, and accepted by position
     * (spec_accepted_per_pos[j]: the (j+1)-th draft token was accepted). */
    uint64_t spec_n_drafts, spec_n_draft_tokens, spec_n_accepted_tokens;
    uint64_t spec_accepted_per_pos[IX_SPEC_MAX_K];
    /* The proposer's own resources (a draft model): sequences it holds
     * state for, its KV pool's blocks in use and in all, and the time of
     * its forward passes (inside plan_ns). Zeros for ngram. */
    int64_t spec_draft_seqs, spec_draft_blocks_used, spec_draft_blocks_total;
    uint64_t spec_draft_forward_ns;
    ix_model_profile forward;
    ix_kv_stats kv;
} ix_engine_stats;
/* A consistent snapshot (as of the end of the last step). Any thread. */
void ix_engine_get_stats(ix_engine *e, ix_engine_stats *out);
/* The disk tier's counters (zeros without one), as of the last step: the
 * cache's (blocks out and in, reloads refused or skipped, read and compute
 * cost) and the store's (blocks and bytes on disk, hits, evictions,
 * errors). Any thread. false: no disk tier. */
bool ix_engine_get_disk_stats(ix_engine *e, ix_kv_disk_stats *kv, struct ix_kvstore_stats *store);
const ix_model *ix_engine_model(const ix_engine *e);
/* The parameters the engine runs with (defaults filled in). Any thread. */
ix_engine_params ix_engine_get_params(const ix_engine *e);
/* Resident bytes of the KV block pool (ix_kv_pool_resident_bytes). Any
 * thread. */
uint64_t ix_engine_kv_pool_resident_bytes(const ix_engine *e);
/* The kernel worker pool the forward passes run on (owned by the engine).
 * Other work may be run on it (ix_pool_run) only by the thread that steps a
 * thread-less engine, between steps: inferx bench measures memory bandwidth
 * on the threads it measures decode with. */
ix_pool *ix_engine_pool(ix_engine *e);

/* Sessions: what a session holds, its blocks written to the disk tier now
 * (IX_ERR_STATE without one), or deleted (unpinned, its blocks out of RAM
 * and off disk). IX_ERR_NOT_FOUND for no live session (id, tenant). Any
 * thread except the engine's: the engine thread does the work between
 * steps and the caller waits for it (a thread-less engine does it in the
 * caller). Save and delete also rewrite the session index on disk. */
typedef enum ix_session_op { IX_SESSION_GET = 0, IX_SESSION_SAVE = 1, IX_SESSION_DELETE = 2 } ix_session_op;
ix_status ix_engine_session(ix_engine *e, ix_session_op op, uint64_t id, uint64_t tenant, ix_kv_session_info *info);
/* Live sessions, pinned blocks, expiries, as of the last step. Any thread. */
void ix_engine_get_session_stats(ix_engine *e, ix_kv_session_stats *out);

/* ---- offline batch API (vLLM's LLM.generate) ------------------------------
 * Submits every request, runs until all finish, and returns each one's tokens
 * and text per choice. Any thread except the engine's. Callbacks in reqs are
 * ignored (the results replace them). */
typedef struct ix_generation {
    ix_finish_info info;
    ix_token_vec tokens[IX_SCHED_MAX_SEQS]; /* per choice */
    ix_buf text[IX_SCHED_MAX_SEQS];
} ix_generation;

ix_status ix_engine_generate(ix_engine *e, const ix_request_params *reqs, size_t n,
                             ix_generation *out, ix_errbuf *err);
void ix_generation_free(ix_generation *g);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_ENGINE_H */
