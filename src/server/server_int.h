/* inferx server internals shared by the files of src/server:
 *   server.c   daemon, routing, bodies, auth, errors, access log, small
 *              endpoints, shutdown
 *   generate.c /v1/completions and /v1/chat/completions (parse, submit,
 *              suspend until the engine resumes, answer or stream; the
 *              watcher thread)
 *   chat.c     messages validation, the fixed chat renderers
 *   chat_template.c  choosing the chat template, the Jinja path, tokenizing
 *              rendered prompts (template markers special, message text never)
 *   embed.c    /v1/embeddings (a model context of its own, under a mutex)
 *   responses.c /v1/responses (OpenAI's Responses API over the chat job)
 *   metrics.c  counters, histograms, Prometheus text, cost accounting
 *   ollama.c   Ollama's /api/... (tags, show, ps, version, chat, generate)
 *   policy.c   per-key policy: the keys file, rate limits, budgets and their
 *              state file, /v1/usage, per-key metrics, request timeouts
 *   web.c      the chat page at / (web/chat.html, compiled in), CORS headers
 *              and preflights
 *   admit.c    server-wide admission: --max-waiting counted per sequence
 *   conn.c     connection defences: per-connection deadlines (headers,
 *              body, idle), the connection limit's 503, the sweeper */
#ifndef IX_SERVER_INT_H
#define IX_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include <jansson.h>
#include <microhttpd.h>

#include "inferx/server.h"
#include "inferx/template.h"
#include "inferx/tokenizer.h"
#include "server/trace.h"

/* ---- errors ----------------------------------------------------------- */
typedef struct ixs_err {
    int http;           /* status code */
    const char *type;   /* "invalid_request_error", ... */
    const char *code;   /* NULL or a short code */
    char param[64];     /* "" when none */
    char msg[512];
    int retry_after_s;  /* 429 / 503: the Retry-After to send; 0: the default (1) */
} ixs_err;

int ix__srv_errf(ixs_err *e, int http, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* 400 invalid_request_error naming param. Returns -1. */
#define IXS_BAD(e, param, ...) ix__srv_errf((e), 400, "invalid_request_error", (param), __VA_ARGS__)

/* ---- metrics ---------------------------------------------------------- */
#define IXS_HIST_BUCKETS 24
typedef struct ixs_hist {
    const double *bounds; /* (n) upper bounds in seconds */
    int n;
    uint64_t counts[IXS_HIST_BUCKETS + 1]; /* the last: +Inf */
    double sum;
    uint64_t count;
} ixs_hist;

#define IXS_MAX_STATUS_ROWS 64
typedef struct ixs_metrics {
    pthread_mutex_t mu;
    struct {
        const char *endpoint; /* a static string */
        int status;
        uint64_t count;
    } rows[IXS_MAX_STATUS_ROWS];
    int n_rows;
    ixs_hist ttft, itl, e2e, queue;
    /* vLLM's per-request histograms: token counts (1-2-5 buckets up to the
     * context, tok_bounds), prefill and decode times (vLLM's latency buckets) */
    double tok_bounds[IXS_HIST_BUCKETS];
    ixs_hist req_prompt, req_gen, req_max_tokens, req_prefill, req_decode;
    uint64_t finished[6]; /* by ix_finish_reason */
    uint64_t cancelled_disconnect;
    uint64_t cancelled_shutdown;
    double cost_usd;
} ixs_metrics;

/* n_ctx: the context length (the token histograms' last bucket). */
void ix__metrics_init(ixs_metrics *m, int32_t n_ctx);
/* An accepted request's max_tokens (the context left when it set none). */
void ix__metrics_params(ixs_metrics *m, int64_t max_tokens);
/* The context length, once known (a server created while the model loads). */
void ix__metrics_set_ctx(ixs_metrics *m, int32_t n_ctx);
void ix__metrics_free(ixs_metrics *m);
void ix__metrics_http(ixs_metrics *m, const char *endpoint, int status);
void ix__metrics_itl(ixs_metrics *m, double seconds);
/* One engine request finished (any thread, the engine's included). */
void ix__metrics_finish(ixs_metrics *m, const ix_finish_info *fi);
void ix__metrics_cost(ixs_metrics *m, double usd);
/* Prometheus text of the server's and the engine's numbers. */
ix_status ix__metrics_render(ix_server *s, ix_buf *out);

/* ---- chat templates (chat.c: fixed renderers, validation; chat_template.c:
 * choosing the template, the Jinja path, tokenizing its output) ------------ */
typedef enum ixs_chat_format {
    IXS_CHAT_PLAIN = 0, /* "System: ...\nUser: ...\nAssistant:" (no template / unknown) */
    IXS_CHAT_CHATML,
    IXS_CHAT_LLAMA3,
    IXS_CHAT_LLAMA2,
    IXS_CHAT_PHI3,
    IXS_CHAT_ZEPHYR,
    IXS_CHAT_MISTRAL_V1, /* "[INST] user [/INST]answer</s>" (7B v0.1/v0.2, Mixtral) */
    IXS_CHAT_MISTRAL_V3, /* "[INST] user[/INST] answer</s>" (v0.3, Nemo, Small) */
    IXS_CHAT_GEMMA,
    IXS_CHAT_N_FORMATS
} ixs_chat_format;

/* How the model writes a tool call, read from its template's text (or the
 * fixed renderer's choice): what the tool-call parser of the answer looks
 * for, and how the fixed renderers write past calls into the prompt. */
typedef enum ixs_tool_syntax {
    IXS_TOOLS_GENERIC = 0, /* a JSON object {"name": ..., "arguments": {...}} (one per line) */
    IXS_TOOLS_LLAMA3,      /* Llama 3.x: {"name": ..., "parameters": {...}} as the whole answer
                              (or "<|python_tag|>" then that object) */
    IXS_TOOLS_HERMES,      /* Hermes / Qwen 2.5+: "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>" */
    IXS_TOOLS_MISTRAL,     /* Mistral v0.3+: "[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]" */
    IXS_TOOLS_N_SYNTAXES
} ixs_tool_syntax;

/* A model's chat prompt builder, fixed at server start; read-only afterwards
 * (HTTP threads render concurrently). */
typedef struct ixs_chat {
    ix_template *tmpl;           /* the Jinja template; NULL: the fixed renderer `format` */
    ixs_chat_format format;      /* the fixed renderer (the fallback), or the family the
                                    template looks like (informative) */
    ixs_tool_syntax tool_syntax; /* how this model writes tool calls */
    bool args_as_object;         /* the template wants tool call arguments as objects
                                    (most do: `| tojson`, `| items`), not JSON strings */
    bool mentions_tools;         /* the template reads `tools` (else the fixed tools
                                    preamble is put into the system message) */
    char *bos, *eos;             /* the vocabulary's BOS / EOS text (bos_token,
                                    eos_token); NULL: none */
    int64_t now_unix_s;          /* > 0: strftime_now's instant (tests); 0: the clock */
    char desc[512];              /* one line: which template, from where, why (the log line) */
} ixs_chat;

/* Chooses the template: `override` (NULL: none) is a built-in name
 * (ix__chat_format_from_name) or Jinja source that must parse (else
 * IX_ERR_INVALID / the parse error); without it the GGUF's
 * tokenizer.chat_template (gguf_tmpl, NULL if absent) when it parses, else the
 * fixed renderer its markers name (the reason in desc, logged by the caller). */
ix_status ix__chat_init(ixs_chat *c, const ix_tokenizer *t, const char *gguf_tmpl, size_t gguf_len,
                        const char *override, ix_errbuf *err);
/* A chat for a fixed renderer (tests; --chat-template NAME). */
void ix__chat_init_format(ixs_chat *c, ixs_chat_format f);
void ix__chat_free(ixs_chat *c);

ixs_chat_format ix__chat_detect(const char *tmpl, size_t len);
ixs_tool_syntax ix__chat_detect_tools(const char *tmpl, size_t len);
const char *ix__chat_format_name(ixs_chat_format f);
const char *ix__tool_syntax_name(ixs_tool_syntax s);
/* The built-in format a --chat-template NAME selects ("mistral" is v3);
 * IXS_CHAT_N_FORMATS if none. */
ixs_chat_format ix__chat_format_from_name(const char *name);

/* Renders a validated messages array (ix__chat_validate) and the request's
 * `tools` array (NULL, or an empty array: none) into tokens. With a Jinja
 * template: messages, tools, add_generation_prompt, bos_token, eos_token and
 * strftime_now go to the template; the template's text becomes special tokens
 * where the vocabulary has them, text copied from messages or tools never
 * does. With a fixed renderer: the same guarantee, markers only. BOS first as
 * the vocabulary says, unless the text starts with it. Errors: IX_ERR_INVALID
 * (the template's raise_exception, message in err), IX_ERR_TYPE, IX_ERR_RANGE,
 * IX_ERR_TOO_LONG, IX_ERR_UTF8 (all the request's fault: 400), IX_ERR_NOMEM. */
ix_status ix__chat_render(const ixs_chat *c, const ix_tokenizer *t, json_t *messages, json_t *tools,
                          ix_token_vec *out, ix_errbuf *err);
/* ix__chat_render with the request's chat_template_kwargs: an object whose
 * members become further template variables (e.g. {"enable_thinking":
 * false}; messages, tools, add_generation_prompt, bos_token and eos_token
 * win over members of those names); NULL: none. The fixed renderers have no
 * variables. */
ix_status ix__chat_render_kw(const ixs_chat *c, const ix_tokenizer *t, json_t *messages, json_t *tools,
                             json_t *kwargs, ix_token_vec *out, ix_errbuf *err);
/* The same prompt as text (without an added BOS), appended to out. */
ix_status ix__chat_render_text(const ixs_chat *c, json_t *messages, json_t *tools, json_t *kwargs, ix_buf *out,
                               ix_errbuf *err);
/* The request's chat_template_kwargs (absent or null: *out NULL): 0, or -1
 * with a 400 naming it when it is not an object. */
int ix__chat_kwargs(json_t *req, json_t **out, ixs_err *e);
/* chat.c's side: the fixed renderer f as text with everything but its
 * markers as data ranges (freed with ix_template_result_free). */
ix_status ix__chat_render_fixed(ixs_chat_format f, ixs_tool_syntax ts, json_t *messages, json_t *tools,
                                ix_template_result *out);
/* messages with a description of tools (and how to call them in syntax ts)
 * at the end of the first system message, or in a new first one; a new
 * reference (messages itself when tools is NULL or empty), NULL on out of
 * memory. For templates that do not read `tools`, and the fixed renderers. */
json_t *ix__chat_with_tools(json_t *messages, json_t *tools, ixs_tool_syntax ts);
/* Checks the shape of messages (roles; content; assistant tool_calls with
 * id, type "function", function.name and function.arguments; tool messages'
 * tool_call_id) and flattens array-of-parts content into strings (in place).
 * 0, or -1 with e filled (400 naming messages[i]...). */
int ix__chat_validate(json_t *messages, ixs_err *e);
/* Maps a render status to the HTTP error (400 naming "messages", 500 for
 * out of memory). Returns -1. */
int ix__chat_error(ixs_err *e, ix_status st, const char *msg);

/* ---- request fields (fields.c) ------------------------------------------ */
/* Every top-level field of a generation request must be one this server
 * implements or accepts as metadata (the table in fields.c, the same as
 * docs/server.md): 0, or -1 with a 400 naming the first one that is not. */
int ix__srv_check_fields(json_t *req, bool chat, ixs_err *e);

/* ---- constraints (constrain.c) ------------------------------------------ */
/* A request's constraint: the engine's view, the text it points into (when
 * the server had to write it), and the field that set it (for errors). */
typedef struct ixs_constraint_req {
    ix_constraint c;
    char *text;      /* NULL, or c.text (malloc'd by jansson) */
    char param[64];  /* "response_format", "grammar", ... */
} ixs_constraint_req;

/* Reads response_format and grammar into out (kind NONE when neither
 * constrains), compiling the constraint through the engine: 0, or -1 with e
 * filled (400 naming the field). Free out with ix__srv_constraint_free. */
int ix__srv_parse_constraint(ix_server *s, json_t *req, ixs_constraint_req *out, ixs_err *e);
void ix__srv_constraint_free(ixs_constraint_req *c);
/* Compiles c through the engine's cache: 0, or -1 with a 400 naming param. */
int ix__srv_check_constraint(ix_server *s, const ix_constraint *c, const char *param, ixs_err *e);

/* ---- tool calling (tools.c) ---------------------------------------------- */
#define IXS_MAX_TOOLS 128

typedef enum ixs_tool_choice {
    IXS_TOOL_CHOICE_NONE = 0, /* no tools, or "none": no calls are parsed */
    IXS_TOOL_CHOICE_AUTO,     /* the model decides; calls are parsed from its answer */
    IXS_TOOL_CHOICE_REQUIRED, /* at least one call, forced by a grammar */
    IXS_TOOL_CHOICE_NAMED,    /* one call of `named`, forced by a grammar */
} ixs_tool_choice;

/* The request's tool fields; pointers borrow the request's JSON. */
typedef struct ixs_tools_req {
    json_t *tools;        /* validated non-empty array of function tools, or NULL */
    ixs_tool_choice choice;
    const char *named;    /* IXS_TOOL_CHOICE_NAMED: the function */
    bool parallel;        /* parallel_tool_calls (default true) */
} ixs_tools_req;

/* Reads and checks tools, tool_choice and parallel_tool_calls: 0, or -1 with
 * a 400 naming the field. */
int ix__tools_parse_request(json_t *req, ixs_tools_req *out, ixs_err *e);
/* A GBNF grammar (appended to out) whose sentences are the calls a forcing
 * tool_choice allows, in syntax ts's JSON shape: {"name": ..., "arguments"
 * (Llama 3: "parameters"): <the function's parameters schema>}; one call, or
 * a JSON array of calls when parallel calls are allowed (Mistral: always an
 * array). A parameters schema the grammar module refuses: its error, naming
 * the function. */
ix_status ix__tools_grammar(const ixs_tools_req *t, ixs_tool_syntax ts, ix_buf *out, ix_errbuf *err);
/* For tool_choice auto with a constrained answer (response_format or
 * grammar): the calls of ix__tools_grammar or a sentence of doc, whose rules
 * are renamed apart ("c-" and "d-"). */
ix_status ix__tools_grammar_or(const ixs_tools_req *t, ixs_tool_syntax ts, const ix_constraint *doc, ix_buf *out,
                               ix_errbuf *err);
/* Parses an answer: in syntax ts, then the generic fallback (the whole answer
 * is call objects or an array of them). *calls gets a new array of
 * {"name", "arguments" (a JSON text)} of functions in tools, and content the
 * rest of the text (empty when only whitespace); or, when the answer holds no
 * call that parses, *calls NULL and content the whole text. IX_ERR_NOMEM. */
ix_status ix__tools_parse_output(const char *text, size_t len, ixs_tool_syntax ts, json_t *tools, json_t **calls,
                                 ix_buf *content);

/* ---- admission (admit.c) ------------------------------------------------ */
/* The server-wide waiting limit. Per-key limits (429) are separate checks
 * beside ix__admit_take. */
typedef struct ixs_admit {
    int32_t max_waiting;     /* <= 0: no limit */
    atomic_int n_waiting;    /* sequences admitted that have not started yet */
    pthread_mutex_t mu;      /* guards the drain measurement below */
    uint64_t last_start_ns;  /* the last start (or when the queue began to fill) */
    double gap_s;            /* average seconds between starts; 0: not measured */
} ixs_admit;

void ix__admit_init(ixs_admit *a, int32_t max_waiting);
void ix__admit_free(ixs_admit *a);
/* Reserves n_seqs waiting places, all or none: 0, or -1 with e filled (503
 * "overloaded" with its retry_after_s; 400 when n_seqs alone is over the
 * limit). Any thread. */
int ix__admit_take(ixs_admit *a, int32_t n_seqs, ixs_err *e);
/* n_seqs reserved places were never submitted. */
void ix__admit_give_back(ixs_admit *a, int32_t n_seqs);
/* n_seqs admitted sequences started (or finished before starting): their
 * places free, and the drain rate learns. Any thread (the engine's). */
void ix__admit_started(ixs_admit *a, int32_t n_seqs);
/* clamp(ceil(need * gap_s), 1, 60): the Retry-After of an overload answer. */
int ix__admit_retry_after_s(int32_t need, double gap_s);

/* ---- connections (conn.c) ----------------------------------------------- */
/* Where a connection is in its current request; each phase but BUSY has a
 * deadline that trickling bytes cannot move. */
typedef enum ixs_sock_phase {
    IXS_SOCK_HEADERS, /* from accept (or the request line) to the end of the headers */
    IXS_SOCK_BODY,    /* from the headers to the end of the body */
    IXS_SOCK_BUSY,    /* the request is being answered: no deadline */
    IXS_SOCK_IDLE,    /* kept alive between requests */
    IXS_SOCK_LINGER,  /* answered before its body ended: discarding it, briefly */
} ixs_sock_phase;

/* One open connection (MHD's socket context). */
typedef struct ixs_sock {
    struct ixs_sock *prev, *next; /* s->socks, under s->socks_mu */
    MHD_socket fd;
    atomic_uint_fast64_t deadline_ns; /* 0: none */
    atomic_int phase;                 /* ixs_sock_phase */
    bool excess;                      /* opened over max_connections: refused with 503 */
    bool refused;                     /* its request line was answered 414 (MHD's thread only) */
    atomic_uint gen;                  /* bumped by every phase change */
    uint64_t eof_ns;                  /* the sweeper's: when it saw the client's end of stream mid-request */
    unsigned eof_gen;                 /* the sweeper's: gen at eof_ns */
} ixs_sock;

/* The MHD options of the connection defences (notify-connection, the
 * request-line callback, limits, timeouts), appended to opts from *n. */
void ix__conn_options(ix_server *s, struct MHD_OptionItem *opts, size_t *n);
/* The socket context of c; NULL if MHD has none. */
ixs_sock *ix__conn_sock(struct MHD_Connection *c);
void ix__conn_phase(ix_server *s, ixs_sock *k, ixs_sock_phase ph);
/* Writes a whole JSON error answer (Connection: close) straight to the
 * socket, for when MHD cannot queue one (clear text only; msg and code
 * must need no JSON escaping). Whether all of it was sent. */
bool ix__conn_send_raw(MHD_socket fd, int status, const char *reason, const char *code, const char *msg);
/* Closes the connections past their deadline (the watcher, every round). */
void ix__conn_sweep(ix_server *s);
/* Shuts every connection not being answered and waits, until end_ns at
 * most, for libmicrohttpd to close them all (before MHD_stop_daemon; see
 * conn.c). The connections still open. */
int ix__conn_close_all(ix_server *s, uint64_t end_ns);

/* ---- the listening socket (listen.c) ---------------------------------- */
/* Binds and listens on ss (host names it in errors); sets listen_fd, the
 * accept thread's pipe and port (the one bound, for port 0). */
ix_status ix__listen_open(ix_server *s, const struct sockaddr_storage *ss, const char *host, ix_errbuf *err);
/* Starts the thread that hands accepted sockets to s->daemon. */
ix_status ix__listen_start(ix_server *s, ix_errbuf *err);
/* Stops the accept thread and closes the socket: new connections are
 * refused from here on. Safe to call more than once. */
void ix__listen_close(ix_server *s);

/* ---- the server ------------------------------------------------------- */
typedef struct ixs_job ixs_job; /* one generation request (generate.c) */
typedef struct ixs_embedder ixs_embedder; /* embeddings' model context (embed.c) */
typedef struct ixs_policy ixs_policy;     /* per-key policy (policy.c) */
typedef struct ixs_rstore ixs_rstore;     /* stored responses (rstore.c) */

struct ix_server {
    ix_engine *engine;
    const ix_model *model;
    const ix_tokenizer *tok;
    ix_server_params p;
    char **api_keys;         /* (n_api_keys) accepted bearer tokens; none: no authentication */
    uint64_t *key_ns;        /* (n_api_keys) each key's prefix-cache namespace */
    size_t n_api_keys;
    char *model_name;
    char *cors;              /* cors_allow_origin (copied); NULL: none */
    int32_t n_ctx, n_vocab;
    ixs_chat chat;           /* the chat template (ix__chat_init) */
    struct MHD_Daemon *daemon;
    int listen_fd;           /* ours, not MHD's (listen.c); -1: closed */
    int accept_wake[2];      /* a pipe: a byte stops the accept thread */
    pthread_t acceptor;
    bool acceptor_started;
    int conn_limit;          /* MHD's connection limit: the accept thread waits at it */
    uint16_t port;
    time_t created;
    atomic_uint_fast64_t next_id;
    atomic_int n_inflight;   /* generation jobs alive (not yet freed) */
    pthread_mutex_t jobs_mu; /* guards jobs and each listed job's orphan flag */
    ixs_job *jobs;           /* submitted jobs, for the watcher */
    pthread_t watcher;
    bool watcher_started;
    atomic_bool watch_stop;
    atomic_bool draining;    /* refuse new requests */
    atomic_bool aborting;    /* cancel requests in flight */
    atomic_bool ready;       /* the engine is attached: requests are served (else 503, loading) */
    atomic_bool hurry;       /* ix_server_hurry: the drain stops waiting */
    atomic_int load_permille; /* while loading: progress, 0..1000 */
    char *pending_template;  /* chat_template, kept for ix_server_attach */
    bool shut_down;
    ixs_metrics metrics;
    ixs_embedder *embed;
    ixs_tracer *tracer;      /* NULL: tracing off */
    ixs_policy *policy;      /* keys file, limits, budgets, timeouts (always set once created) */
    ixs_rstore *rstore;      /* stored responses (always set once created) */
    ixs_admit admit;         /* --max-waiting */
    pthread_mutex_t socks_mu; /* guards socks; held while the sweeper shuts one */
    ixs_sock *socks;         /* open connections */
    atomic_int n_socks;
    bool tls;                /* HTTPS: nothing is written to sockets beside MHD */
};

/* One HTTP request being answered (MHD's con_cls): what the replies, the
 * metrics and the access log need to know about it. */
typedef struct ixs_conn {
    ix_server *s;
    struct MHD_Connection *c;
    const char *ep;     /* the route's path (static), "other" when none matched */
    const char *method; /* MHD's strings, valid until the request completes */
    const char *url;
    uint64_t t0_ns;     /* its headers arrived */
    char remote[64];    /* the peer's address */
    int key;            /* index of the API key it presented; -1: none (or no keys) */
    ix_buf body;
    bool too_big;
    bool checked;       /* the checks at the end of the headers are done */
    bool started;
    int route;          /* index into the route table; -1: none */
    int retry_after_s;  /* the Retry-After of its answer (0: 1 s) */
    ixs_job *job; /* a non-streaming generation waiting for its finish (a reference) */
    bool ollama;  /* an /api/... route: errors are Ollama's {"error": "..."} */
    double policy_retry_s; /* a policy 429: > 0 its Retry-After, < 0 none; 0: not a policy 429 */
    bool close;   /* answer with Connection: close (bad framing, a refused connection) */
    bool http10;  /* an HTTP/1.0 request (no interim 1xx answers) */
} ixs_conn;

/* Replies: status + JSON body. Each counts in the metrics and writes the
 * request's access-log line, except for a generation job's answer, whose
 * line the job writes (it knows the tokens). */
enum MHD_Result ix__srv_reply_json(ixs_conn *cc, int status, json_t *body /* stolen */);
enum MHD_Result ix__srv_reply_err(ixs_conn *cc, const ixs_err *e);

/* Access log: the fields every line has (ts, method, path, status,
 * duration_ms, remote, key) as a new object; ix__srv_log_write adds nothing,
 * writes it as one line and frees it. Both do nothing without a log. */
json_t *ix__srv_log_line(ix_server *s, const char *method, const char *path, int status, uint64_t t0_ns,
                         const char *remote, int key);
void ix__srv_log_write(ix_server *s, json_t *line /* stolen */);

/* Replies with a body of any type: status, Content-Type, data (copied);
 * error names the failure in the access log (NULL when none). */
enum MHD_Result ix__srv_reply_raw(ixs_conn *cc, int status, const char *ctype, const char *data, size_t len,
                                  const char *error);

/* ---- sessions.c: session_id, /v1/sessions/{id} ------------------------ */
/* The engine's name of a tenant's session id. */
uint64_t ix__srv_session_key(uint64_t tenant, const char *id, size_t n);
/* session_id / session_ttl of a generation request into r (400 on bad values). */
int ix__srv_session_fields(ix_server *s, int key, json_t *req, ix_request_params *r, ixs_err *e);
/* GET /v1/sessions/{id}, DELETE /v1/sessions/{id}, POST /v1/sessions/{id}/save;
 * rest: the URL after "/v1/sessions/". */
enum MHD_Result ix__srv_sessions(ixs_conn *cc, const char *rest);
/* Deletes key's session id (IX_ERR_NOT_FOUND when none). */
ix_status ix__srv_session_drop(ix_server *s, int key, const char *id);

/* ---- rstore.c: stored responses ---------------------------------------- */
typedef struct ixs_rstore_stats {
    size_t n, bytes;
    uint64_t n_evicted, n_expired;
} ixs_rstore_stats;
ix_status ix__rstore_create(ix_server *s, const ix_server_params *p, ix_errbuf *err);
void ix__rstore_destroy(ix_server *s); /* saves first */
/* Copies in; IX_ERR_TOO_LONG when one entry exceeds the byte bound. */
ix_status ix__rstore_put(ix_server *s, const char *id, uint64_t tenant, const json_t *response,
                         const json_t *conversation);
/* Copies out (either pointer may be NULL); IX_ERR_NOT_FOUND for an id
 * unknown, expired or another tenant's. */
ix_status ix__rstore_get(ix_server *s, const char *id, uint64_t tenant, json_t **response, json_t **conversation);
ix_status ix__rstore_delete(ix_server *s, const char *id, uint64_t tenant);
/* Writes the state file when it changed (at most every 2 s unless always). */
void ix__rstore_save(ix_server *s, bool always);
void ix__rstore_stats(ix_server *s, ixs_rstore_stats *out);
/* GET / DELETE /v1/responses/{id}. */
enum MHD_Result ix__srv_stored_response(ixs_conn *cc, const char *id);
/* Temp file, fsync, rename over path, fsync the folder (policy.c). */
bool ix__srv_write_atomically(const char *path, const char *text);

/* ---- web.c ------------------------------------------------------------ */
/* Adds the CORS headers a response to cc needs (none unless the server
 * allows the request's Origin). Every response goes through it. */
void ix__srv_cors_headers(ixs_conn *cc, struct MHD_Response *r);
/* OPTIONS on a known path: 204 with Allow and, for an allowed origin, the
 * Access-Control-Allow-* headers the preflight asks about. */
enum MHD_Result ix__srv_preflight(ixs_conn *cc, const char *allow);
/* GET /: the chat page. */
enum MHD_Result ix__srv_web_page(ixs_conn *cc);

/* Generation endpoints. A non-streaming request suspends the connection
 * and leaves its job in cc->job; when MHD calls the handler again (resumed),
 * ix__srv_generate_again answers or suspends again. ix__srv_job_release
 * drops the MHD side's reference (cancelling what still runs). */
enum MHD_Result ix__srv_generate(ixs_conn *cc, bool chat, json_t *req);
enum MHD_Result ix__srv_generate_again(ixs_conn *cc);
void ix__srv_job_release(ixs_job *j);
/* What the job produced for the renderers: choice 0's text so far, how it
 * finished, and the job's usage and timings. */
typedef struct ixs_gen_result {
    const char *text;
    size_t len;
    ix_finish_reason reason;
    const char *error;  /* the engine's message when reason is IX_FINISH_ERROR */
    ix_usage usage;
    double cost_usd;    /* < 0: not reported */
    ix_timings timings; /* of the first prompt */
    bool invalid_request; /* the error is the request's own fault (its grammar) */
} ixs_gen_result;

/* Another API's answer over a generation job (/v1/responses, Ollama's
 * /api/chat and /api/generate): the request is translated into a chat or
 * completions request and runs as any job (same validation, engine requests,
 * cancellation, metrics); only the answer is rendered by these callbacks --
 * the whole object, or a stream (begin, one delta per text piece of choice
 * 0, end) appended to out. Such a job has one prompt and one choice. */
typedef struct ixs_render {
    void *ctx;                /* the renderer's state; the job owns it (free) from generate_as on */
    const char *id;           /* the job's id; points into ctx */
    const char *stream_ctype; /* Content-Type of a streamed answer */
    json_t *(*whole)(void *ctx, const ixs_gen_result *g); /* NULL when out of memory */
    bool (*begin)(void *ctx, ix_buf *out);                /* false when out of memory */
    bool (*delta)(void *ctx, ix_buf *out, const char *text, size_t len);
    bool (*end)(void *ctx, ix_buf *out, const ixs_gen_result *g);
    void (*map_param)(ixs_err *e); /* renames a chat field in an error to this API's; may be NULL */
    void (*free)(void *ctx);
} ixs_render;
enum MHD_Result ix__srv_generate_as(ixs_conn *cc, bool chat, json_t *req, const ixs_render *r);

/* Ollama's API (ollama.c); req is NULL for the GET routes. */
typedef enum ixs_ollama_ep {
    IXS_OLLAMA_VERSION, IXS_OLLAMA_TAGS, IXS_OLLAMA_PS, IXS_OLLAMA_SHOW, IXS_OLLAMA_CHAT, IXS_OLLAMA_GENERATE,
} ixs_ollama_ep;
/* The Ollama version /api/version reports: the API level implemented. */
#define IX_OLLAMA_VERSION "0.6.0"
enum MHD_Result ix__srv_ollama(ixs_conn *cc, ixs_ollama_ep ep, json_t *req);

/* POST /v1/responses (responses.c). */
typedef struct ixs_resp ixs_resp;
enum MHD_Result ix__srv_responses(ixs_conn *cc, json_t *req);
void ix__resp_free(ixs_resp *r);
const char *ix__resp_id(const ixs_resp *r); /* "resp_<hex>" */
/* The whole Response object (non-streaming). NULL when out of memory. */
json_t *ix__resp_whole(ixs_resp *r, const ixs_gen_result *g);
/* Streaming: the events before the first token, one per text delta, and
 * the closing ones (the last is response.completed / incomplete / failed),
 * appended to out as SSE. Return false when out of memory. */
bool ix__resp_stream_begin(ixs_resp *r, ix_buf *out);
bool ix__resp_stream_delta(ixs_resp *r, ix_buf *out, const char *text, size_t len);
bool ix__resp_stream_end(ixs_resp *r, ix_buf *out, const ixs_gen_result *g);
/* Chat's name for a field in an error -> the Responses API's. */
void ix__resp_map_param(ixs_err *e);

/* POST /v1/embeddings: answered at once (the pass runs on this thread). */
enum MHD_Result ix__srv_embeddings(ixs_conn *cc, json_t *req);
/* The embedder's state (its model context is made on the first request). */
ix_status ix__embed_create(ix_server *s);
void ix__embed_destroy(ix_server *s);
/* The watcher thread's body (arg: the server): cancels the jobs of suspended
 * connections whose peer closed, and every job while s->aborting; closes the
 * jobs whose client left once the engine has finished them. */
void *ix__srv_watch(void *arg);
/* Closes orphaned jobs (their client left while they ran) that have
 * finished, or with all every one (shutdown, after the HTTP threads have
 * stopped), dropping the reference the MHD side left them. */
void ix__srv_reap(ix_server *s, bool all);
/* Resumes every suspended connection (shutdown, before MHD_stop_daemon). */
int ix__srv_resume_all(ix_server *s);

/* FNV-1a over data, continuing from h (IXS_FNV_BASIS to start): the
 * prefix-cache namespaces of API keys and cache_salt. */
#define IXS_FNV_BASIS 0xcbf29ce484222325ull
uint64_t ix__srv_fnv1a(uint64_t h, const void *data, size_t n);

/* JSON helpers: a valid UTF-8 string node from arbitrary bytes (invalid
 * sequences become U+FFFD). Never NULL unless out of memory. */
json_t *ix__json_text(const char *s, size_t len);
/* What a non-blocking peek at a connected socket sees: bytes (or nothing
 * yet), the peer's FIN (it closed, or only shut its sending side), or an
 * error (a reset: the peer is gone). */
typedef enum ixs_peer { IXS_PEER_OPEN, IXS_PEER_EOF, IXS_PEER_GONE } ixs_peer;
ixs_peer ix__srv_peer(MHD_socket fd);
/* A fresh "<prefix><24 hex>" id into buf. */
void ix__srv_new_id(ix_server *s, const char *prefix, char *buf, size_t size);

#include "server/policy.h"

#endif
