/*
 * inferx server: an OpenAI-compatible HTTP front end for one engine.
 *
 * Routes (docs/server.md has the fields, errors and metrics):
 *   POST /v1/chat/completions, POST /v1/completions (streaming with SSE or not),
 *   GET /v1/models, POST /tokenize, POST /detokenize, GET /health, GET /ready,
 *   GET /metrics (Prometheus text), GET /v1/usage (the calling key's limits
 *   and usage), GET / (a chat page for browsers), and
 *   OPTIONS on any of them (CORS preflight).
 *
 * Threads: a fixed pool of n_http_threads libmicrohttpd threads (epoll), however
 * many connections are open, plus one watcher thread. HTTP threads parse
 * JSON, tokenize and submit to the engine, then suspend the connection
 * until there is something to send; they never block and never touch the
 * model's compute. The engine thread's callbacks only append to a
 * per-request queue (under its mutex) and resume the connection. The watcher
 * notices clients that hang up while their connection is suspended.
 *
 * Ownership: the server borrows the engine (and through it the model); both
 * must outlive the server. Functions here are called from one controlling
 * thread (the one that created the server).
 */
#ifndef INFERX_SERVER_H
#define INFERX_SERVER_H

#include "inferx/core.h"
#include "inferx/engine.h"
#include "inferx/gguf.h"
#include "inferx/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ix_server_params {
    const char *host;          /* numeric IPv4 or IPv6 address; default "127.0.0.1" */
    uint16_t port;             /* 0: an ephemeral port (see ix_server_port) */
    /* Authentication: with no key (api_key NULL or "" and n_api_keys 0)
     * every request is served; otherwise /v1/..., /tokenize and /detokenize
     * need "Authorization: Bearer K" for one of the keys. Each key is a
     * tenant: its requests get their own prefix-cache namespace, so one
     * key's cached prompts never serve or speed up another's. Copied. */
    const char *api_key;       /* NULL or "": none */
    const char *const *api_keys;    /* (n_api_keys) more keys, each non-empty */
    size_t n_api_keys;
    const char *model_name;    /* the served name; default "inferx" (copied) */
    size_t max_body_bytes;     /* larger request bodies get 413; default 8 MiB */
    int32_t max_waiting;       /* 503 when this many requests wait already; <= 0 off; default 256 */
    int32_t max_connections;   /* concurrent connections; more are answered 503 and closed
                                  (probes excepted); default 256 */
    int32_t conn_timeout_s;    /* idle keep-alive connection timeout; default 120 */
    int32_t n_http_threads;    /* HTTP worker threads (a fixed pool); default 4 */
    int32_t n_ctx;             /* the engine's context length; <= 0: the model's */
    double cost_per_hour_usd;  /* > 0: report each request's cost (usage.cost_usd) */
    /* The chat template: NULL uses the model's tokenizer.chat_template (or,
     * when it has none or it does not parse, the fixed renderer its markers
     * name; the reason logged); a built-in name (ix_server_chat_builtins)
     * selects that fixed renderer; anything else is Jinja source, which must
     * parse (IX_ERR_FORMAT / IX_ERR_UNSUPPORTED otherwise). Copied. */
    const char *chat_template;
    /* Access log: one JSON object per answered HTTP request (ids, status,
     * token counts, timings, cost; never prompt or output text), as one
     * line ending in '\n'. Called from the server's threads, several at
     * once (rarely, at shutdown, from the engine thread): it must be quick
     * and do its own locking. NULL: no access log. */
    void (*access_log)(void *user, const char *line, size_t len);
    void *access_log_user;
    /* Browser clients on other origins (CORS): NULL or "" sends no CORS
     * headers (browsers then refuse cross-origin calls); "*" allows any
     * origin; otherwise a comma-separated list of exact origins
     * ("https://a.example,http://localhost:3000"), each echoed back when a
     * request comes from it. Preflights (OPTIONS) are answered either way. */
    const char *cors_allow_origin;
    /* OpenTelemetry tracing (docs/server.md, "Tracing"): NULL or "" off;
     * else the OTLP/HTTP traces URL (".../v1/traces") that spans of every
     * generation request are POSTed to, batched by an exporter thread (a
     * collector that is down never delays a request). W3C traceparent /
     * tracestate headers are honoured. Copied. */
    const char *otlp_traces_url;
    const char *otlp_service_name; /* resource service.name; NULL: "inferx" */
    double trace_sample_ratio;     /* traces the server starts itself: the
                                      fraction recorded, 0..1; default 1 */
    /* Per-key policy (docs/server.md, "Per-key policy"): a JSON keys file
     * naming each key (its secret or its SHA-256) with its limits --
     * requests and tokens per minute, concurrent requests, max tokens per
     * request, token / USD budgets, models, priority, /metrics access. Read
     * and checked strictly by ix_server_create (IX_ERR_INVALID naming the
     * field; IX_ERR_IO when it cannot be read). Its keys add to api_key(s),
     * which stay unlimited. With it, /metrics needs a plain key or a key
     * with "metrics": true. NULL or "": none. Copied. */
    const char *keys_file;
    /* Where the keys' spent budgets are kept across restarts (written
     * atomically every few seconds when they change, and at destroy; a file
     * that does not parse is IX_ERR_FORMAT). NULL or "": "<keys_file>.usage.json". */
    const char *usage_state;
    /* Request timeout in seconds (a request's own `timeout` may shorten
     * it): past it the request is cancelled in the engine and answered 408
     * (a stream: its last chunk carries the error). <= 0: none (default). */
    double request_timeout_s;
    /* Deadlines that trickled bytes do not move (docs/server.md,
     * "Hardening"): a request's headers must arrive within header_timeout_s
     * (default 10), its body within body_timeout_s of them (default 60);
     * past either the connection gets a 408 and is closed. */
    int32_t header_timeout_s;
    int32_t body_timeout_s;
    int32_t max_conns_per_ip;  /* connections from one address; more are closed at once; <= 0: no limit (default) */
    /* HTTPS: PEM files of the certificate (chain) and its private key, both
     * or neither; IX_ERR_UNSUPPORTED when libmicrohttpd lacks TLS. */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* Sessions (docs/server.md, "Sessions"): a request's `session_id` pins
     * its KV for session_ttl_s seconds (its `session_ttl` may say
     * otherwise); default 3600. */
    double session_ttl_s;
    /* Stored responses (/v1/responses with store: true): at most
     * max_stored_responses of them and max_stored_bytes of JSON (the least
     * recently used go first), each kept stored_response_ttl_s seconds.
     * Defaults (also for values <= 0) 1000, 64 MiB, 30 days. state_dir: where they are kept
     * across restarts (responses.json, written atomically a few seconds
     * after a change and at destroy); NULL or "": in memory only. Copied. */
    int32_t max_stored_responses;
    size_t max_stored_bytes;
    double stored_response_ttl_s;
    const char *state_dir;
} ix_server_params;

ix_server_params ix_server_default_params(void);

typedef struct ix_server ix_server;

/* Loading in the open: ix_server_create with a NULL engine binds and serves
 * at once -- /health 200, /ready 503 {"status": "loading", "progress_percent"},
 * everything else 503 -- while the caller loads the model (reporting
 * ix_server_set_load_progress), then ix_server_attach gives it the engine
 * and requests are served. An orchestrator sees a live process with a
 * readiness probe, not a closed port. */
void ix_server_set_load_progress(ix_server *s, double fraction); /* 0..1; any thread */
/* IX_ERR_STATE when the server has an engine already; the chat template's
 * error when it does not parse. */
ix_status ix_server_attach(ix_server *s, ix_engine *e, ix_errbuf *err);

/* Binds, starts the HTTP threads and serves until shutdown. IX_ERR_IO when
 * the address cannot be bound (message in err). */
ix_status ix_server_create(ix_server **out, ix_engine *e, const ix_server_params *p,
                           ix_errbuf *err);
/* The bound port (the real one when params.port was 0). */
uint16_t ix_server_port(const ix_server *s);
/* Graceful shutdown: stops accepting connections, answers new requests on
 * open connections with 503, lets requests in flight finish for up to
 * drain_ms, then cancels the rest in the engine (they end with finish_reason
 * "abort") and stops the HTTP threads. Idempotent. */
void ix_server_shutdown(ix_server *s, int64_t drain_ms);
/* Reads the keys file (ix_server_params.keys_file) again, as strictly as at
 * creation; on any error the keys stay as they were (the reason in err;
 * IX_ERR_STATE without a keys file). A key whose name is still there gets
 * its new settings and keeps its usage, budget spent and requests in
 * flight; new names are added; names gone are refused from now on (their
 * requests in flight finish). Any thread (inferx serve: SIGHUP). */
ix_status ix_server_reload_keys(ix_server *s, ix_errbuf *err);
/* From another thread while ix_server_shutdown drains: stop waiting for the
 * requests in flight and cancel them now (a second SIGTERM). */
void ix_server_hurry(ix_server *s);
/* Shuts down (drain 0 ms) if that was not done, then frees. NULL is a no-op. */
void ix_server_destroy(ix_server *s);

/* ---- chat prompts, as the server builds them (docs/server.md, "Chat
 * templates"), for tools that are not a server (inferx run, info). Any
 * thread. ---- */

/* The built-in names a chat_template may be (NULL-terminated, static). */
const char *const *ix_server_chat_builtins(void);
/* One line saying which chat template a server of the model in g (its
 * tokenizer t, or NULL) with this chat_template (as in ix_server_params)
 * uses, and why, appended to out. Errors as ix_server_create's for a
 * chat_template that does not parse. */
ix_status ix_server_chat_describe(const ix_gguf *g, const ix_tokenizer *t, const char *chat_template, ix_buf *out,
                                  ix_errbuf *err);
/* The prompt tokens of a chat: messages_json is an OpenAI messages array
 * (JSON text), rendered with the generation prompt as a chat request is.
 * Appends to out. IX_ERR_INVALID with the reason for bad messages or a
 * template that refuses them. */
ix_status ix_server_chat_tokens(const ix_gguf *g, const ix_tokenizer *t, const char *chat_template,
                                const char *messages_json, ix_token_vec *out, ix_errbuf *err);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_SERVER_H */
