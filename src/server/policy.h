/* inferx server: per-key policy (policy.c). Included at the end of
 * server_int.h.
 *
 * A keys file (--keys-file, docs/server.md "Per-key policy") names each key
 * and its limits: requests and tokens per minute (token buckets refilled
 * continuously), concurrent requests, max tokens per request, a token and/or
 * USD budget (kept across restarts in the usage state file), the models it
 * may use, its scheduling priority and whether it may read /metrics. Keys
 * from --api-key are unlimited, as before.
 *
 * Key indices (ixs_conn.key, ixs_job.key): [0, n_api_keys) are the plain
 * keys, from n_api_keys on the keys file's, in its order, then the keys a
 * reload (ix_server_reload_keys) added; an index always means the same
 * key (a key removed by a reload is revoked, not freed).
 *
 * Threads: every entry point may be called from any thread; the policy's
 * mutex guards the buckets, counters and budgets. A saver thread writes the
 * usage state every few seconds when it changed, and once more at destroy. */
#ifndef IX_SERVER_POLICY_H
#define IX_SERVER_POLICY_H

/* What admission decided for one generation job; settled once. */
typedef struct ixs_job_pol {
    int key;                 /* the keys file entry, -1: none (unlimited) */
    bool admitted;           /* counted in the key's concurrency and buckets */
    bool settled;            /* ix__policy_job_end ran */
    int64_t reserved_tokens; /* taken from the tokens bucket at admission */
    uint64_t deadline_ns;    /* 0: no timeout; else on the policy clock */
    double timeout_s;        /* the timeout that applies (for messages) */
    atomic_bool timed_out;   /* the watcher cancelled it at its deadline */
} ixs_job_pol;

/* Reads and checks p->keys_file (strictly: unknown fields, wrong types,
 * duplicate names or keys fail, naming the field), then the usage state
 * file, and starts the saver. No
 * keys file: only the request timeout is kept. IX_ERR_INVALID / IX_ERR_IO /
 * IX_ERR_FORMAT with the reason in err. */
ix_status ix__policy_create(ix_server *s, const ix_server_params *p, ix_errbuf *err);
/* Stops the saver and writes the usage state a last time. */
void ix__policy_destroy(ix_server *s);
/* Whether any key is configured (plain or from the keys file). */
bool ix__policy_has_keys(const ix_server *s);
/* The keys file entry whose secret is token (NUL-terminated), as an index
 * in the server's key numbering; -1 when none. Constant time per key. */
int ix__policy_auth(ix_server *s, const char *token);
/* The tests' clock (nanoseconds, any origin); NULL restores the real one. */
void ix__policy_set_clock(ix_server *s, uint64_t (*now_ns)(void *user), void *user);

/* Admission of a parsed generation request: the key's models, max_tokens
 * cap (clamping r->max_tokens when the request set none), priority,
 * budget, concurrency and rate limits, and the timeout (the request's
 * `timeout`, the server's default). prompt_tokens[i] for each of n_prompts.
 * 0, or -1 with e filled (400 / 404 / 429) and cc->policy_retry_s set. */
int ix__policy_admit(ixs_conn *cc, json_t *req, ix_request_params *r, const size_t *prompt_tokens, int n_prompts,
                     bool max_tokens_given, ixs_job_pol *jp, ixs_err *e);
/* A job is over (any thread, once; later calls do nothing): gives back its
 * concurrency slot and the unused part of its token reservation, and
 * charges usage to the key's counters and budget. */
void ix__policy_job_end(ix_server *s, ixs_job_pol *jp, const ix_usage *u, double cost_usd);
/* The watcher: whether the job has passed its deadline (true once: it
 * then sets timed_out, and the caller cancels the job). */
bool ix__policy_expired(ix_server *s, ixs_job_pol *jp);
/* A timed-out job's answer: true with e filled (408 timeout). */
bool ix__policy_timeout_error(const ixs_job_pol *jp, ixs_err *e);
/* A timed-out stream's last chunk gets an "error" member. */
void ix__policy_stream_error(const ixs_job_pol *jp, json_t *chunk);

/* The rate-limit headers of a limited key (x-ratelimit-*), and Retry-After
 * for its 429s; true when Retry-After was decided here (the caller then
 * adds none). Every response goes through it. */
bool ix__policy_headers(ixs_conn *cc, struct MHD_Response *r, int status);
/* GET /metrics: 0 when the caller may read it (no keys file, or a plain
 * key, or a keys-file key with metrics: true), else -1 with e filled. */
int ix__policy_metrics_access(ixs_conn *cc, ixs_err *e);
/* GET /v1/usage: the calling key's limits, windows and budget. */
enum MHD_Result ix__policy_usage(ixs_conn *cc);
/* The per-key series of /metrics (label key="<name>"), appended to b;
 * model_label is the `model_name="..."` every sample carries. */
ix_status ix__policy_metrics_render(ix_server *s, ix_buf *b, const char *model_label, size_t model_label_len);
/* Whether the key may use the served model (its `models`); any key not
 * from the keys file may. */
bool ix__policy_model_allowed(const ix_server *s, int key);
/* The prefix-cache namespace of a key index (0: none). */
uint64_t ix__policy_key_ns(const ix_server *s, int key);
/* The access log's name for a key (a keys-file key's name), or NULL. */
const char *ix__policy_key_name(const ix_server *s, int key);

/* SHA-256 of data into out (policy.c; the key_sha256 of the keys file). */
void ix__sha256(const void *data, size_t n, uint8_t out[32]);

#endif
