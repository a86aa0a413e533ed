/* inferx server: the libmicrohttpd daemon, routing, request bodies, bearer
 * authentication (any number of API keys, each its own prefix-cache tenant),
 * OpenAI-shaped errors, the JSON access log, the small endpoints (/health,
 * /ready, /metrics, /v1/models, /tokenize, /detokenize) and graceful
 * shutdown.
 *
 * libmicrohttpd runs a fixed pool of n_http_threads threads, each with its own
 * epoll loop; no handler ever blocks: generation requests suspend their
 * connection while they wait for the engine, whose callbacks resume it
 * (generate.c, which also owns the watcher thread that notices clients that
 * hang up while suspended). Bodies are read whole (up to
 * max_body_bytes; a larger one is read and discarded so that the client can
 * still read the 413) before anything is dispatched. */
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "server/server_int.h"

/* A request body at least this large is followed by malloc_trim. */
#define IXS_TRIM_BYTES (1u << 20)

ix_server_params ix_server_default_params(void) {
    ix_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8000;
    p.model_name = "inferx";
    p.max_body_bytes = 8u << 20;
    p.max_waiting = 256;
    p.session_ttl_s = 3600;
    p.max_stored_responses = 1000;
    p.max_stored_bytes = 64u << 20;
    p.stored_response_ttl_s = 30 * 86400.0;
    p.max_connections = 256;
    p.conn_timeout_s = 120;
    p.header_timeout_s = 10;
    p.body_timeout_s = 60;
    p.n_http_threads = 4;
    p.trace_sample_ratio = 1.0;
    return p;
}

int ix__srv_errf(ixs_err *e, int http, const char *type, const char *param, const char *fmt, ...) {
    e->http = http;
    e->type = type;
    e->code = NULL;
    e->retry_after_s = 0;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

json_t *ix__json_text(const char *s, size_t len) {
    size_t bad;
    if (!s) return json_string("");
    if (ix_utf8_valid(s, len, &bad)) return json_stringn(s, len);
    ix_buf b = {0};
    size_t off = 0;
    while (off < len) {
        if (ix_utf8_valid(s + off, len - off, &bad)) bad = len - off;
        if (ix_buf_append(&b, s + off, bad) != IX_OK) goto oom;
        off += bad;
        if (off < len) {
            if (ix_buf_append(&b, "\xEF\xBF\xBD", 3) != IX_OK) goto oom;
            off++;
        }
    }
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    ix_buf_free(&b);
    return j;
oom:
    ix_buf_free(&b);
    return NULL;
}

ixs_peer ix__srv_peer(MHD_socket fd) {
    if (fd == MHD_INVALID_SOCKET) return IXS_PEER_OPEN;
    char byte;
    ssize_t r = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) {
#ifdef TCP_INFO
        /* After the peer's FIN, a reset no longer shows as an error to
         * recv; the connection's state does: closed, not close-wait. */
        struct tcp_info ti;
        socklen_t len = sizeof ti;
        if (!getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) && ti.tcpi_state == TCP_CLOSE) return IXS_PEER_GONE;
#endif
        return IXS_PEER_EOF;
    }
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return IXS_PEER_GONE;
    return IXS_PEER_OPEN;
}

void ix__srv_new_id(ix_server *s, const char *prefix, char *buf, size_t size) {
    /* splitmix64 over a per-server counter seeded from the clock: unique
     * within the process, unpredictable enough for an id. */
    uint64_t x = atomic_fetch_add(&s->next_id, 0x9E3779B97F4A7C15ull);
    uint64_t h[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        h[i] = z ^ (z >> 31);
    }
    snprintf(buf, size, "%s%016llx%08llx", prefix, (unsigned long long)h[0],
             (unsigned long long)(h[1] >> 32));
}

/* ---- access log ----------------------------------------------------------- */

json_t *ix__srv_log_line(ix_server *s, const char *method, const char *path, int status, uint64_t t0_ns,
                         const char *remote, int key) {
    if (!s->p.access_log) return NULL;
    struct timespec now;
    struct tm tm;
    char ts[48], day[32];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts, sizeof ts, "%s.%03ldZ", day, now.tv_nsec / 1000000L);
    json_t *o = json_object();
    if (!o) return NULL;
    /* A path nobody routed is whatever the client sent: bounded, and made
     * valid UTF-8 like every string here. */
    size_t path_len = path ? strnlen(path, 256) : 0;
    json_object_set_new(o, "ts", json_string(ts));
    json_object_set_new(o, "method", ix__json_text(method, method ? strnlen(method, 16) : 0));
    json_object_set_new(o, "path", ix__json_text(path, path_len));
    json_object_set_new(o, "status", json_integer(status));
    json_object_set_new(o, "duration_ms", json_real(round((double)(ix_time_ns() - t0_ns) / 1e3) / 1e3));
    json_object_set_new(o, "remote", json_string(remote ? remote : ""));
    if (key >= 0) json_object_set_new(o, "key_id", json_integer(key + 1));
    if (ix__policy_key_name(s, key)) json_object_set_new(o, "key", json_string(ix__policy_key_name(s, key)));
    return o;
}

void ix__srv_log_write(ix_server *s, json_t *line) {
    if (!line || !s->p.access_log) {
        json_decref(line);
        return;
    }
    char stack[1024], *text = stack;
    size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(12);
    size_t n = json_dumpb(line, stack, sizeof stack - 1, flags);
    if (n > sizeof stack - 1) { /* did not fit: the size it needs */
        text = ix_malloc(n + 1);
        if (text) n = json_dumpb(line, text, n, flags);
    }
    json_decref(line);
    if (!text || n == 0) return;
    text[n] = '\n';
    s->p.access_log(s->p.access_log_user, text, n + 1);
    if (text != stack) ix_free(text);
}

/* ---- replies --------------------------------------------------------------- */

enum MHD_Result ix__srv_reply_raw(ixs_conn *cc, int status, const char *ctype, const char *data, size_t len,
                                 const char *error) {
    ix_server *s = cc->s;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    ix__srv_cors_headers(cc, r);
    if (atomic_load(&s->draining) || cc->close) MHD_add_response_header(r, "Connection", "close");
    /* A limited key's x-ratelimit-* headers, and its own 429's Retry-After. */
    bool retry_set = ix__policy_headers(cc, r, status);
    /* Other overload answers say when to come back: when the queue will
     * have room (admit.c), else in a second. */
    if ((status == 429 || status == 503) && !retry_set) {
        char retry[16];
        snprintf(retry, sizeof retry, "%d", cc->retry_after_s > 0 ? cc->retry_after_s : 1);
        MHD_add_response_header(r, "Retry-After", retry);
    }
    enum MHD_Result ret = MHD_queue_response(cc->c, (unsigned)status, r);
    MHD_destroy_response(r);
    ix__metrics_http(&s->metrics, cc->ep, status);
    if (!cc->job) { /* a job writes its own line */
        json_t *line = ix__srv_log_line(s, cc->method, cc->url, status, cc->t0_ns, cc->remote, cc->key);
        if (line && error) json_object_set_new(line, "error", json_string(error));
        ix__srv_log_write(s, line);
    }
    return ret;
}

static enum MHD_Result reply_json(ixs_conn *cc, int status, json_t *body, const char *error) {
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char k_oom[] =
            "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        return ix__srv_reply_raw(cc, 500, "application/json", k_oom, sizeof k_oom - 1, "server_error");
    }
    enum MHD_Result r = ix__srv_reply_raw(cc, status, "application/json", text, strlen(text), error);
    free(text);
    return r;
}

enum MHD_Result ix__srv_reply_json(ixs_conn *cc, int status, json_t *body) {
    return reply_json(cc, status, body, NULL);
}

enum MHD_Result ix__srv_reply_err(ixs_conn *cc, const ixs_err *e) {
    json_t *err = json_object();
    json_t *root = json_object();
    if (!err || !root) {
        json_decref(err);
        json_decref(root);
        return ix__srv_reply_json(cc, 500, NULL);
    }
    const char *type = e->type ? e->type : "server_error";
    cc->retry_after_s = e->retry_after_s;
    if (cc->ollama) { /* Ollama's shape: the message alone, the parameter named in it */
        json_decref(err);
        json_object_set_new(root, "error", ix__json_text(e->msg, strlen(e->msg)));
        return reply_json(cc, e->http, root, e->code ? e->code : type);
    }
    json_object_set_new(err, "message", ix__json_text(e->msg, strlen(e->msg)));
    json_object_set_new(err, "type", json_string(type));
    json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(err, "code", e->code ? json_string(e->code) : json_null());
    json_object_set_new(root, "error", err);
    return reply_json(cc, e->http, root, e->code ? e->code : type);
}

static enum MHD_Result reply_errf(ixs_conn *cc, int http, const char *type, const char *code, const char *param,
                                  const char *msg) {
    ixs_err e;
    ix__srv_errf(&e, http, type, param, "%s", msg);
    e.code = code;
    return ix__srv_reply_err(cc, &e);
}

/* ---- small endpoints -------------------------------------------------------- */

static json_t *model_json(ix_server *s) {
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "inferx", "max_model_len", (int)s->n_ctx);
}

static enum MHD_Result do_models(ixs_conn *cc) {
    ix_server *s = cc->s;
    json_t *m = model_json(s);
    json_t *root = m ? json_pack("{s:s, s:[o]}", "object", "list", "data", m) : NULL;
    if (root && !ix__policy_model_allowed(s, cc->key)) json_array_clear(json_object_get(root, "data"));
    return ix__srv_reply_json(cc, 200, root);
}

/* GET /v1/models/{id}: the served model's object, 404 for any other id. */
static enum MHD_Result do_model_one(ixs_conn *cc, const char *id) {
    ix_server *s = cc->s;
    if (strcmp(id, s->model_name) || !ix__policy_model_allowed(s, cc->key)) {
        char msg[200];
        snprintf(msg, sizeof msg, "The model `%.120s` does not exist or you do not have access to it.", id);
        return reply_errf(cc, 404, "invalid_request_error", "model_not_found", "model", msg);
    }
    return ix__srv_reply_json(cc, 200, model_json(s));
}

/* The "model" field: absent, or the served name (404 otherwise). */
static int check_model(ix_server *s, json_t *req, ixs_err *e) {
    json_t *m = json_object_get(req, "model");
    if (!m || json_is_null(m)) return 0;
    if (!json_is_string(m)) return IXS_BAD(e, "model", "'model' must be a string");
    if (strcmp(json_string_value(m), s->model_name)) {
        ix__srv_errf(e, 404, "invalid_request_error", "model", "The model `%s` does not exist.",
                     json_string_value(m));
        e->code = "model_not_found";
        return -1;
    }
    return 0;
}

static enum MHD_Result do_tokenize(ixs_conn *cc, json_t *req) {
    ix_server *s = cc->s;
    ixs_err e;
    ix_token_vec ids = {0};
    ix_errbuf err = {{0}};
    json_t *prompt = json_object_get(req, "prompt"), *msgs = json_object_get(req, "messages");
    json_t *add = json_object_get(req, "add_special_tokens");
    if (add && !json_is_boolean(add)) {
        IXS_BAD(&e, "add_special_tokens", "'add_special_tokens' must be a boolean");
        return ix__srv_reply_err(cc, &e);
    }
    if (prompt && json_is_string(prompt)) {
        unsigned flags = (!add || json_is_true(add)) ? IX_TOK_ADD_SPECIAL : 0;
        if (ix_tokenizer_encode(s->tok, json_string_value(prompt), json_string_length(prompt), flags, &ids,
                                &err) != IX_OK) {
            ix_token_vec_free(&ids);
            return reply_errf(cc, 400, "invalid_request_error", NULL, "prompt", err.msg);
        }
    } else if (!prompt && msgs) {
        if (ix__chat_validate(msgs, &e)) return ix__srv_reply_err(cc, &e);
        json_t *tools = json_object_get(req, "tools");
        if (tools && !json_is_null(tools) && !json_is_array(tools)) {
            IXS_BAD(&e, "tools", "'tools' must be an array");
            return ix__srv_reply_err(cc, &e);
        }
        json_t *kwargs;
        if (ix__chat_kwargs(req, &kwargs, &e)) return ix__srv_reply_err(cc, &e);
        ix_status st =
            ix__chat_render_kw(&s->chat, s->tok, msgs, json_is_array(tools) ? tools : NULL, kwargs, &ids, &err);
        if (st != IX_OK) {
            ix_token_vec_free(&ids);
            ix__chat_error(&e, st, err.msg);
            return ix__srv_reply_err(cc, &e);
        }
    } else {
        return reply_errf(cc, 400, "invalid_request_error", NULL, "prompt",
                          "expected a string 'prompt' or a 'messages' array");
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < ids.n; i++) json_array_append_new(arr, json_integer(ids.ids[i]));
    json_t *root = arr ? json_pack("{s:i, s:i, s:o}", "count", (int)ids.n, "max_model_len", (int)s->n_ctx,
                                   "tokens", arr)
                       : NULL;
    ix_token_vec_free(&ids);
    return ix__srv_reply_json(cc, 200, root);
}

static enum MHD_Result do_detokenize(ixs_conn *cc, json_t *req) {
    ix_server *s = cc->s;
    json_t *toks = json_object_get(req, "tokens");
    if (!json_is_array(toks))
        return reply_errf(cc, 400, "invalid_request_error", NULL, "tokens",
                          "'tokens' must be an array of token ids");
    size_t n = json_array_size(toks);
    ix_token *ids = ix_malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return ix__srv_reply_json(cc, 500, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(toks, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->n_vocab) {
            ix_free(ids);
            char msg[128];
            snprintf(msg, sizeof msg, "token %zu is not an id in [0, %d)", i, (int)s->n_vocab);
            return reply_errf(cc, 400, "invalid_request_error", NULL, "tokens", msg);
        }
        ids[i] = (ix_token)json_integer_value(v);
    }
    ix_buf text = {0};
    ix_errbuf err = {{0}};
    ix_status st = ix_tokenizer_decode(s->tok, ids, n, 0, &text, &err);
    ix_free(ids);
    if (st != IX_OK) {
        ix_buf_free(&text);
        return reply_errf(cc, 400, "invalid_request_error", NULL, "tokens", err.msg);
    }
    json_t *root = json_object();
    if (root) json_object_set_new(root, "prompt", ix__json_text(text.data, text.len));
    ix_buf_free(&text);
    return ix__srv_reply_json(cc, 200, root);
}

static enum MHD_Result do_metrics(ixs_conn *cc) {
    ix_buf b = {0};
    if (ix__metrics_render(cc->s, &b) != IX_OK) {
        ix_buf_free(&b);
        return ix__srv_reply_json(cc, 500, NULL);
    }
    enum MHD_Result r =
        ix__srv_reply_raw(cc, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "", b.len, NULL);
    ix_buf_free(&b);
    return r;
}

/* ---- routing ---------------------------------------------------------------- */

typedef enum route_id {
    R_HEALTH, R_READY, R_METRICS, R_MODELS, R_MODEL_ONE, R_TOKENIZE, R_DETOKENIZE, R_COMPLETIONS, R_CHAT,
    R_EMBEDDINGS, R_RESPONSES, R_WEB, R_OLLAMA, R_USAGE, R_SESSION, R_STORED_RESPONSE,
} route_id;

static const struct route {
    const char *path;
    const char *method;
    route_id id;
    bool auth; /* needs the API key when one is set */
    bool json; /* takes a JSON body */
    int sub;   /* R_OLLAMA: which (ixs_ollama_ep) */
} k_routes[] = {
    {"/health", "GET", R_HEALTH, false, false, 0},
    {"/ready", "GET", R_READY, false, false, 0},
    {"/metrics", "GET", R_METRICS, false, false, 0},
    {"/v1/models", "GET", R_MODELS, true, false, 0},
    {"/tokenize", "POST", R_TOKENIZE, true, true, 0},
    {"/detokenize", "POST", R_DETOKENIZE, true, true, 0},
    {"/v1/completions", "POST", R_COMPLETIONS, true, true, 0},
    {"/v1/chat/completions", "POST", R_CHAT, true, true, 0},
    {"/v1/models/", "GET", R_MODEL_ONE, true, false, 0},
    {"/v1/embeddings", "POST", R_EMBEDDINGS, true, true, 0},
    {"/v1/responses", "POST", R_RESPONSES, true, true, 0},
    {"/v1/responses/", "GET", R_STORED_RESPONSE, true, false, 0},
    {"/v1/responses/", "DELETE", R_STORED_RESPONSE, true, false, 0},
    {"/v1/sessions/", "GET", R_SESSION, true, false, 0},
    {"/v1/sessions/", "DELETE", R_SESSION, true, false, 0},
    {"/v1/sessions/", "POST", R_SESSION, true, false, 0},
    {"/v1/usage", "GET", R_USAGE, true, false, 0},
    {"/", "GET", R_WEB, false, false, 0},
    {"/api/version", "GET", R_OLLAMA, true, false, IXS_OLLAMA_VERSION},
    {"/api/tags", "GET", R_OLLAMA, true, false, IXS_OLLAMA_TAGS},
    {"/api/ps", "GET", R_OLLAMA, true, false, IXS_OLLAMA_PS},
    {"/api/show", "POST", R_OLLAMA, true, true, IXS_OLLAMA_SHOW},
    {"/api/chat", "POST", R_OLLAMA, true, true, IXS_OLLAMA_CHAT},
    {"/api/generate", "POST", R_OLLAMA, true, true, IXS_OLLAMA_GENERATE},
};

/* Whether url names route rt: equal to its path, or for a path ending in
 * '/' that path followed by a non-empty argument (a model id may hold
 * slashes). */
static bool route_matches(const struct route *rt, const char *url) {
    size_t n = strlen(rt->path);
    if (n == 1 || rt->path[n - 1] != '/') return !strcmp(url, rt->path); /* "/" is the page alone */
    return !strncmp(url, rt->path, n) && url[n];
}

/* The index of the API key the request presents, -1 when it presents none
 * of them. Every key is compared in full whatever matched before, each in
 * time that depends only on its length. */
static int auth_key(ix_server *s, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return -1;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h);
    int found = -1;
    for (size_t k = 0; k < s->n_api_keys; k++) {
        const char *key = s->api_keys[k];
        size_t len = strlen(key);
        unsigned diff = (unsigned)(n != len);
        for (size_t i = 0; i < len; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < n ? h[i] : 0);
        if (diff == 0 && found < 0) found = (int)k;
    }
    return found >= 0 ? found : ix__policy_auth(s, h);
}

/* The route of method (HEAD as GET) on url, NULL when none; *path_known
 * tells whether some route has that path. */
static const struct route *route_find(const char *url, const char *method, bool *path_known) {
    *path_known = false;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_routes); i++) {
        if (!route_matches(&k_routes[i], url)) continue;
        *path_known = true;
        if (!strcmp(method, k_routes[i].method) || (!strcmp(k_routes[i].method, "GET") && !strcmp(method, "HEAD")))
            return &k_routes[i];
    }
    return NULL;
}

/* An upper bound on the number of values in a JSON text (one more than its
 * commas, colons and opening brackets outside strings), in one pass and
 * without allocating: a body is refused before jansson builds a tree of
 * millions of nodes (a token array is ~50 bytes of memory per 2 bytes of
 * text). */
static size_t json_values_bound(const char *p, size_t n) {
    size_t count = 1;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (in_str) {
            if (ch == '\\') i++;
            else if (ch == '"') in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == ',' || ch == ':' || ch == '[' || ch == '{') {
            count++;
        }
    }
    return count;
}

/* The most JSON values a body may hold: the largest legitimate request,
 * IXS_MAX_PROMPTS token-id prompts of the whole context each, plus room for
 * the other fields. */
static size_t max_json_values(const ix_server *s) { return 16u * (size_t)(s->n_ctx > 0 ? s->n_ctx : 1) + 65536u; }

/* The methods of every route of cc's path ("GET, DELETE"), for Allow and
 * a 405's message; sets cc->ep to that path. */
static void allowed_methods(ixs_conn *cc, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < IX_ARRAY_LEN(k_routes); i++) {
        if (!route_matches(&k_routes[i], cc->url)) continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", k_routes[i].method);
        if (w > 0 && (size_t)w < n - len) len += (size_t)w;
        cc->ep = k_routes[i].path;
    }
}

static enum MHD_Result dispatch(ixs_conn *cc) {
    ix_server *s = cc->s;
    const char *url = cc->url, *method = cc->method;
    bool path_known;
    const struct route *rt = route_find(url, method, &path_known);
    char allowed[64];
    if (!rt && path_known) allowed_methods(cc, allowed, sizeof allowed);
    if (!rt && path_known && !strcmp(method, "OPTIONS")) /* a CORS preflight */
        return ix__srv_preflight(cc, allowed);
    if (!rt) {
        if (path_known) {
            char msg[160];
            snprintf(msg, sizeof msg, "method %.16s is not allowed on %.64s (use %s)", method, url, allowed);
            return reply_errf(cc, 405, "invalid_request_error", "method_not_allowed", NULL, msg);
        }
        char msg[160];
        snprintf(msg, sizeof msg, "no route %.16s %.100s", method, url);
        return reply_errf(cc, 404, "invalid_request_error", "not_found", NULL, msg);
    }
    cc->ep = rt->path;
    cc->ollama = rt->id == R_OLLAMA;
    if ((rt->auth || rt->id == R_METRICS) && ix__policy_has_keys(s)) cc->key = auth_key(s, cc->c);
    if (rt->auth && ix__policy_has_keys(s) && cc->key < 0)
        return reply_errf(cc, 401, "invalid_request_error", "invalid_api_key", NULL,
                          "Incorrect or missing API key: send 'Authorization: Bearer <key>'.");
    if (!atomic_load_explicit(&s->ready, memory_order_acquire) && rt->id != R_HEALTH && rt->id != R_WEB) {
        /* the model is still loading: the port is open so that probes see it */
        double pct = atomic_load_explicit(&s->load_permille, memory_order_relaxed) / 10.0;
        if (rt->id == R_READY)
            return ix__srv_reply_json(cc, 503, json_pack("{s:s, s:i}", "status", "loading", "progress_percent", (int)pct));
        char msg[96];
        snprintf(msg, sizeof msg, "the model is loading (%.0f%%); retry when /ready answers 200", pct);
        return reply_errf(cc, 503, "server_error", "loading", NULL, msg);
    }
    switch (rt->id) {
    case R_HEALTH:
        return ix__srv_reply_json(cc, 200, json_pack("{s:s}", "status", "ok"));
    case R_READY:
        if (atomic_load(&s->draining))
            return reply_errf(cc, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
        return ix__srv_reply_json(cc, 200, json_pack("{s:s, s:s}", "status", "ready", "model", s->model_name));
    case R_METRICS: {
        ixs_err me;
        if (ix__policy_metrics_access(cc, &me)) return ix__srv_reply_err(cc, &me);
        return do_metrics(cc);
    }
    case R_USAGE:
        return ix__policy_usage(cc);
    case R_WEB:
        return ix__srv_web_page(cc);
    case R_OLLAMA:
        if (!rt->json) return ix__srv_ollama(cc, (ixs_ollama_ep)rt->sub, NULL);
        break;
    case R_MODELS:
        return do_models(cc);
    case R_MODEL_ONE:
        return do_model_one(cc, url + strlen(rt->path));
    case R_SESSION:
        return ix__srv_sessions(cc, url + strlen(rt->path));
    case R_STORED_RESPONSE:
        return ix__srv_stored_response(cc, url + strlen(rt->path));
    default:
        break;
    }
    if (atomic_load(&s->draining))
        return reply_errf(cc, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    if (json_values_bound(cc->body.data, cc->body.len) > max_json_values(s)) {
        char msg[160];
        snprintf(msg, sizeof msg, "the request body holds more than %zu JSON values (16 times the context length, "
                 "plus 65536)", max_json_values(s));
        return reply_errf(cc, 413, "invalid_request_error", "request_too_large", NULL, msg);
    }
    json_error_t jerr;
    json_t *req = json_loadb(cc->body.data ? cc->body.data : "", cc->body.len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s at line %d, column %d: %s",
                 json_error_code(&jerr) == json_error_invalid_utf8 ? "invalid UTF-8 in the JSON body"
                                                                   : "malformed JSON",
                 jerr.line, jerr.column, jerr.text);
        return reply_errf(cc, 400, "invalid_request_error", "invalid_json", NULL, msg);
    }
    if (!json_is_object(req)) {
        json_decref(req);
        return reply_errf(cc, 400, "invalid_request_error", "invalid_json", NULL,
                          "the request body must be a JSON object");
    }
    ixs_err e;
    enum MHD_Result r;
    if (rt->id == R_OLLAMA) /* names the model its own way */
        r = ix__srv_ollama(cc, (ixs_ollama_ep)rt->sub, req);
    else if (check_model(s, req, &e))
        r = ix__srv_reply_err(cc, &e);
    else if (rt->id == R_TOKENIZE)
        r = do_tokenize(cc, req);
    else if (rt->id == R_DETOKENIZE)
        r = do_detokenize(cc, req);
    else if (rt->id == R_EMBEDDINGS)
        r = ix__srv_embeddings(cc, req);
    else if (rt->id == R_RESPONSES)
        r = ix__srv_responses(cc, req);
    else
        r = ix__srv_generate(cc, rt->id == R_CHAT, req);
    json_decref(req);
    return r;
}

static void peer_address(struct MHD_Connection *c, char *buf, size_t size) {
    buf[0] = '\0';
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (!sa) return;
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, buf, (socklen_t)size);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, buf, (socklen_t)size);
}

static enum MHD_Result reply_too_big(ixs_conn *cc) {
    char msg[128];
    snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", cc->s->p.max_body_bytes);
    cc->close = true;
    return reply_errf(cc, 413, "invalid_request_error", "request_too_large", NULL, msg);
}

/* A body (chunked: no length to refuse it by) has passed the limit. MHD
 * 0.9.75 queues no answer in the middle of a body, so the 413 is written to
 * the socket here, the sending side shut, and the rest of the body read and
 * dropped for a moment (IXS_SOCK_LINGER) before the sweeper closes the
 * connection, so that the close does not reset the answer away. Over TLS
 * only MHD may write: the connection is closed without an answer. */
static enum MHD_Result refuse_body(ixs_conn *cc) {
    ix_server *s = cc->s;
    ixs_sock *k = ix__conn_sock(cc->c);
    char msg[96];
    snprintf(msg, sizeof msg, "the request body exceeds the limit of %zu bytes", s->p.max_body_bytes);
    bool sent = !s->tls && k && ix__conn_send_raw(k->fd, 413, "Content Too Large", "request_too_large", msg);
    ix__metrics_http(&s->metrics, cc->ep, 413);
    json_t *line = ix__srv_log_line(s, cc->method, cc->url, 413, cc->t0_ns, cc->remote, cc->key);
    if (line) json_object_set_new(line, "error", json_string("request_too_large"));
    ix__srv_log_write(s, line);
    if (!sent) return MHD_NO;
    shutdown(k->fd, SHUT_WR);
    ix__conn_phase(s, k, IXS_SOCK_LINGER);
    return MHD_YES;
}

typedef struct framing {
    int n_length;  /* Content-Length fields */
    bool encoding; /* a Transfer-Encoding field */
    const char *length;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        f->n_length++;
        f->length = value;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        f->encoding = true;
    }
    return MHD_YES;
}

/* What can be decided from the headers alone, before a byte of the body is
 * read: ambiguous framing (RFC 9112 6.3: several Content-Length fields, or
 * one beside Transfer-Encoding) is a 400; a connection over max_connections
 * gets 503 (probes excepted); a missing key 401; a declared length over the
 * limit 413. An answer queued here is "early": MHD reads no body and closes
 * the connection after it (Connection: close says so). MHD_YES otherwise. */
static enum MHD_Result head_checks(ixs_conn *cc) {
    ix_server *s = cc->s;
    framing f = {0, false, NULL};
    MHD_get_connection_values(cc->c, MHD_HEADER_KIND, count_framing, &f);
    bool path_known;
    const struct route *rt = route_find(cc->url, cc->method, &path_known);
    if (rt) cc->ep = rt->path;
    ixs_sock *k = ix__conn_sock(cc->c);
    cc->close = true;
    cc->started = true;
    if (f.n_length > 1)
        return reply_errf(cc, 400, "invalid_request_error", "bad_framing", NULL,
                          "more than one Content-Length field");
    if (f.n_length && f.encoding)
        return reply_errf(cc, 400, "invalid_request_error", "bad_framing", NULL,
                          "both Content-Length and Transfer-Encoding");
    if (k && k->excess && !(rt && (rt->id == R_HEALTH || rt->id == R_READY))) {
        char msg[128];
        snprintf(msg, sizeof msg, "too many connections (the limit is %d); retry later", (int)s->p.max_connections);
        return reply_errf(cc, 503, "server_error", "too_many_connections", NULL, msg);
    }
    if (rt && rt->auth && s->n_api_keys && (cc->key = auth_key(s, cc->c)) < 0)
        return reply_errf(cc, 401, "invalid_request_error", "invalid_api_key", NULL,
                          "Incorrect or missing API key: send 'Authorization: Bearer <key>'.");
    if (f.length && strtoull(f.length, NULL, 10) > s->p.max_body_bytes) return reply_too_big(cc);
    cc->close = false;
    cc->started = false;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    ix_server *s = cls;
    ixs_conn *cc = *con_cls;
    if (!cc) {
        const ixs_sock *k = ix__conn_sock(c);
        if (k && k->refused) return MHD_NO; /* answered 414 at its request line (conn.c) */
        cc = ix_calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        cc->s = s;
        cc->c = c;
        cc->ep = "other"; /* metrics keep the pointer: static strings only */
        cc->method = method;
        cc->url = url;
        cc->t0_ns = ix_time_ns();
        cc->key = -1;
        cc->http10 = version && !strcmp(version, MHD_HTTP_VERSION_1_0);
        peer_address(c, cc->remote, sizeof cc->remote);
        *con_cls = cc;
        ix__conn_phase(s, ix__conn_sock(c), IXS_SOCK_BODY);
        return head_checks(cc);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cc->started) return MHD_YES; /* answered already */
        if (cc->body.len + n > s->p.max_body_bytes) { /* a chunked body: stop now */
            ix_buf_free(&cc->body);
            cc->started = true;
            return refuse_body(cc);
        }
        if (ix_buf_append(&cc->body, upload_data, n) != IX_OK) return MHD_NO;
        return MHD_YES;
    }
    if (cc->job) return ix__srv_generate_again(cc); /* resumed */
    if (cc->started) return MHD_YES; /* a response is queued already */
    cc->started = true;
    ix__conn_phase(s, ix__conn_sock(c), IXS_SOCK_BUSY);
    return dispatch(cc);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode tc) {
    (void)tc;
    ixs_conn *cc = *con_cls;
    if (!cc) return;
    ix__srv_job_release(cc->job); /* closed before the answer: cancels the job */
    bool large = cc->body.cap >= IXS_TRIM_BYTES;
    ix_buf_free(&cc->body);
    ix_free(cc);
    *con_cls = NULL;
    ixs_sock *k = ix__conn_sock(c);
    if (k) {
        ix__conn_phase(cls, k, IXS_SOCK_IDLE);
        /* The client has shut its side: no next request can come, so end the
         * connection now (the answer is in the socket already; shutdown(2)
         * sends it before the FIN), not at the sweeper's next round. */
        if (ix__srv_peer(k->fd) != IXS_PEER_OPEN) {
            atomic_store(&k->deadline_ns, 0);
            shutdown(k->fd, SHUT_RDWR);
        }
    }
#ifdef __GLIBC__
    /* A large body's pages (and the tree parsed from it) go back to the
     * system now rather than staying in the heap's free lists. */
    if (large) malloc_trim(0);
#else
    (void)large;
#endif
}

/* ---- life cycle ------------------------------------------------------------- */

uint64_t ix__srv_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The API keys (api_key and api_keys), each with its prefix-cache
 * namespace: the hash of the key and its terminating NUL, so that salts
 * hashed after it (generate.c) cannot run into another key's. */
static ix_status copy_keys(ix_server *s, const ix_server_params *p) {
    size_t n = (p->api_key && *p->api_key ? 1 : 0) + (p->api_keys ? p->n_api_keys : 0);
    if (!n) return IX_OK;
    s->api_keys = ix_calloc(n, sizeof *s->api_keys);
    s->key_ns = ix_calloc(n, sizeof *s->key_ns);
    if (!s->api_keys || !s->key_ns) return IX_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *k = p->api_key && *p->api_key ? (i == 0 ? p->api_key : p->api_keys[i - 1]) : p->api_keys[i];
        if (!k || !*k) return IX_ERR_INVALID;
        if (!(s->api_keys[i] = ix_strdup(k))) return IX_ERR_NOMEM;
        s->n_api_keys = i + 1;
        uint64_t h = ix__srv_fnv1a(IXS_FNV_BASIS, k, strlen(k) + 1);
        s->key_ns[i] = h ? h : 1;
    }
    return IX_OK;
}

/* The bind address: a numeric IPv4 / IPv6 address, or a name resolved to
 * its first address (IPv4 preferred: "localhost" binds 127.0.0.1). */
static ix_status bind_address(const char *host, uint16_t port, struct sockaddr_storage *ss, ix_errbuf *err) {
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons(port);
        return IX_OK;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons(port);
        return IX_OK;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_ADDRCONFIG;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return ix_errf(err, IX_ERR_INVALID, "--host '%s': not an address, and the name does not resolve (%s)", host,
                       gai_strerror(rc));
    const struct addrinfo *pick = res;
    for (const struct addrinfo *r = res; r; r = r->ai_next)
        if (r->ai_family == AF_INET) {
            pick = r;
            break;
        }
    ix_status st = IX_OK;
    if (pick->ai_family == AF_INET && pick->ai_addrlen <= sizeof *ss) {
        memcpy(ss, pick->ai_addr, pick->ai_addrlen);
        a4->sin_port = htons(port);
    } else if (pick->ai_family == AF_INET6 && pick->ai_addrlen <= sizeof *ss) {
        memcpy(ss, pick->ai_addr, pick->ai_addrlen);
        a6->sin6_port = htons(port);
    } else {
        st = ix_errf(err, IX_ERR_INVALID, "--host '%s' resolves to no IPv4 or IPv6 address", host);
    }
    freeaddrinfo(res);
    return st;
}

/* What needs the engine: the model's numbers, the chat template, the
 * embedder, the token histograms; then requests are served (ready). */
static ix_status attach(ix_server *s, ix_engine *e, const char *chat_template, ix_errbuf *err) {
    s->engine = e;
    s->model = ix_engine_model(e);
    s->tok = ix_model_tokenizer(s->model);
    const ix_model_hparams *hp = ix_model_get_hparams(s->model);
    s->n_ctx = s->p.n_ctx > 0 && s->p.n_ctx < hp->n_ctx_train ? s->p.n_ctx : hp->n_ctx_train;
    s->n_vocab = hp->n_vocab;
    ix__metrics_set_ctx(&s->metrics, s->n_ctx);
    ix_status st = ix__embed_create(s);
    if (st != IX_OK) return ix_errf(err, st, "out of memory");
    ix_str tmpl = {NULL, 0};
    ix_gguf_get_str(ix_model_gguf(s->model), "tokenizer.chat_template", &tmpl, NULL);
    st = ix__chat_init(&s->chat, s->tok, tmpl.ptr, tmpl.len, chat_template, err);
    if (st != IX_OK) return st;
    if (s->chat.tmpl || !tmpl.ptr || chat_template) IX_LOGI("server: chat template: %s", s->chat.desc);
    else IX_LOGW("server: chat template: %s", s->chat.desc);
    atomic_store_explicit(&s->ready, true, memory_order_release);
    return IX_OK;
}

/* A whole file into a new NUL-terminated string. */
static ix_status read_file(const char *path, char **out, ix_errbuf *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ix_errf(err, IX_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    ix_buf b = {0};
    char chunk[4096];
    size_t n;
    ix_status st = IX_OK;
    while (st == IX_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0) st = ix_buf_append(&b, chunk, n);
    if (st == IX_OK && ferror(f)) st = ix_errf(err, IX_ERR_IO, "cannot read %s", path);
    else if (st == IX_OK) st = ix_buf_append(&b, "", 1);
    else ix_errf(err, st, "out of memory");
    fclose(f);
    if (st != IX_OK) {
        ix_buf_free(&b);
        return st;
    }
    *out = b.data;
    return IX_OK;
}

/* HTTPS through libmicrohttpd's GnuTLS: the certificate and key files read
 * into pem[0], pem[1] (freed by the caller once the daemon has started) and
 * their options appended. Nothing when neither file is given. */
static ix_status tls_options(ix_server *s, const ix_server_params *p, char *pem[2], struct MHD_OptionItem *opts,
                             size_t *n, ix_errbuf *err) {
    bool cert = p->tls_cert_file && *p->tls_cert_file, key = p->tls_key_file && *p->tls_key_file;
    if (!cert && !key) return IX_OK;
    if (!cert || !key) return ix_errf(err, IX_ERR_INVALID, "TLS needs both a certificate and its key");
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return ix_errf(err, IX_ERR_UNSUPPORTED, "this libmicrohttpd was built without TLS");
    ix_status st = read_file(p->tls_cert_file, &pem[0], err);
    if (st == IX_OK) st = read_file(p->tls_key_file, &pem[1], err);
    if (st != IX_OK) {
        ix_free(pem[0]);
        ix_free(pem[1]);
        pem[0] = pem[1] = NULL;
        return st;
    }
    s->tls = true;
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, pem[0]};
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, pem[1]};
    return IX_OK;
}

ix_status ix_server_create(ix_server **out, ix_engine *e, const ix_server_params *p, ix_errbuf *err) {
    *out = NULL;
    ix_server_params dp = ix_server_default_params();
    if (!p) p = &dp;
    ix_server *s = ix_calloc(1, sizeof *s);
    if (!s) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    s->p = *p;
    if (!s->p.host || !*s->p.host) s->p.host = "127.0.0.1";
    if (!s->p.max_body_bytes) s->p.max_body_bytes = dp.max_body_bytes;
    if (s->p.max_connections <= 0) s->p.max_connections = dp.max_connections;
    if (s->p.conn_timeout_s <= 0) s->p.conn_timeout_s = dp.conn_timeout_s;
    if (s->p.header_timeout_s <= 0) s->p.header_timeout_s = dp.header_timeout_s;
    if (s->p.body_timeout_s <= 0) s->p.body_timeout_s = dp.body_timeout_s;
    if (s->p.n_http_threads <= 0) s->p.n_http_threads = dp.n_http_threads;
    if (s->p.n_http_threads > s->p.max_connections) s->p.n_http_threads = s->p.max_connections;
    s->model_name = ix_strdup(p->model_name && *p->model_name ? p->model_name : "inferx");
    if (p->cors_allow_origin && *p->cors_allow_origin && !(s->cors = ix_strdup(p->cors_allow_origin))) {
        ix_free(s->model_name);
        ix_free(s);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    char *chat_template = p->chat_template ? ix_strdup(p->chat_template) : NULL;
    s->p.cors_allow_origin = NULL;
    s->p.host = NULL;
    s->p.api_key = NULL;
    s->p.api_keys = NULL;
    s->p.n_api_keys = 0;
    s->p.model_name = NULL;
    s->p.chat_template = NULL;
    s->p.otlp_traces_url = NULL;
    s->p.otlp_service_name = NULL;
    s->p.keys_file = NULL;
    s->p.usage_state = NULL;
    s->p.tls_cert_file = NULL;
    s->p.tls_key_file = NULL;
    s->p.state_dir = NULL;
    s->created = time(NULL);
    atomic_init(&s->next_id, (uint64_t)ix_time_ns() ^ ((uint64_t)s->created << 32));
    atomic_init(&s->n_inflight, 0);
    atomic_init(&s->draining, false);
    atomic_init(&s->aborting, false);
    atomic_init(&s->watch_stop, false);
    atomic_init(&s->ready, false);
    atomic_init(&s->hurry, false);
    atomic_init(&s->load_permille, 0);
    pthread_mutex_init(&s->jobs_mu, NULL);
    pthread_mutex_init(&s->socks_mu, NULL);
    atomic_init(&s->n_socks, 0);
    ix__admit_init(&s->admit, s->p.max_waiting);
    s->listen_fd = -1;
    s->accept_wake[0] = s->accept_wake[1] = -1;
    ix__metrics_init(&s->metrics, 0);
    s->pending_template = chat_template;
    if (!s->model_name || (p->chat_template && !chat_template)) {
        ix_server_destroy(s);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    size_t bad;
    if (!ix_utf8_valid(s->model_name, strlen(s->model_name), &bad)) {
        ix_server_destroy(s);
        return ix_errf(err, IX_ERR_INVALID, "the model name is not valid UTF-8 (byte %zu)", bad);
    }
    ix_status st = copy_keys(s, p);
    if (st != IX_OK) {
        ix_server_destroy(s);
        return ix_errf(err, st, st == IX_ERR_NOMEM ? "out of memory" : "an API key is empty");
    }
    if (p->otlp_traces_url && *p->otlp_traces_url) {
        ixs_trace_params tp = {p->otlp_traces_url, p->otlp_service_name, INFERX_VERSION_STRING, p->trace_sample_ratio,
                               0, 0, 0};
        if ((st = ix__trace_create(&s->tracer, &tp, err)) != IX_OK) {
            ix_server_destroy(s);
            return st;
        }
        IX_LOGI("server: OpenTelemetry spans go to %s (new traces sampled at %g)", p->otlp_traces_url,
                p->trace_sample_ratio);
    }
    if ((st = ix__policy_create(s, p, err)) != IX_OK || (st = ix__rstore_create(s, p, err)) != IX_OK) {
        ix_server_destroy(s);
        return st;
    }
    /* With the engine at hand, everything is set up before the port opens;
     * without (a model still loading), the port opens now and /ready says
     * 503 until ix_server_attach. */
    if (e && (st = attach(s, e, chat_template, err)) != IX_OK) {
        ix_server_destroy(s);
        return st;
    }

    const char *host = p->host && *p->host ? p->host : "127.0.0.1";
    struct sockaddr_storage ss;
    /* The socket is ours (listen.c); MHD gets each accepted connection. */
    unsigned flags =
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    if ((st = bind_address(host, p->port, &ss, err)) != IX_OK || (st = ix__listen_open(s, &ss, host, err)) != IX_OK) {
        ix_server_destroy(s);
        return st;
    }
    struct MHD_OptionItem opts[16];
    size_t n_opts = 0;
    ix__conn_options(s, opts, &n_opts);
    char *tls_pem[2] = {NULL, NULL};
    if ((st = tls_options(s, p, tls_pem, opts, &n_opts, err)) != IX_OK) {
        ix_server_destroy(s);
        return st;
    }
    if (tls_pem[0]) flags |= MHD_USE_TLS;
    opts[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_THREAD_POOL_SIZE,
                                 (unsigned)(s->p.n_http_threads > 1 ? s->p.n_http_threads : 0), MHD_OPTION_ARRAY,
                                 opts, MHD_OPTION_END);
    ix_free(tls_pem[0]); /* MHD keeps its own copies */
    if (tls_pem[1]) { /* the private key does not linger in freed memory */
        volatile char *v = tls_pem[1];
        for (size_t i = 0; v[i]; i++) v[i] = 0;
    }
    ix_free(tls_pem[1]);
    if (!s->daemon) {
        ix_server_destroy(s);
        return ix_errf(err, IX_ERR_IO, "cannot start libmicrohttpd's threads for %s:%u", host, (unsigned)s->port);
    }
    if (pthread_create(&s->watcher, NULL, ix__srv_watch, s)) {
        ix_server_destroy(s);
        return ix_errf(err, IX_ERR_NOMEM, "cannot start the watcher thread");
    }
    s->watcher_started = true;
    if ((st = ix__listen_start(s, err)) != IX_OK) {
        ix_server_destroy(s);
        return st;
    }
    *out = s;
    return IX_OK;
}

void ix_server_set_load_progress(ix_server *s, double fraction) {
    int v = fraction <= 0 ? 0 : fraction >= 1 ? 1000 : (int)(fraction * 1000.0);
    atomic_store_explicit(&s->load_permille, v, memory_order_relaxed);
}

ix_status ix_server_attach(ix_server *s, ix_engine *e, ix_errbuf *err) {
    if (atomic_load(&s->ready)) return ix_errf(err, IX_ERR_STATE, "the server has its engine already");
    return attach(s, e, s->pending_template, err);
}

uint16_t ix_server_port(const ix_server *s) { return s->port; }

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void ix_server_shutdown(ix_server *s, int64_t drain_ms) {
    if (!s || s->shut_down) return;
    s->shut_down = true;
    atomic_store(&s->draining, true);
    /* Stop listening now, not at exit: new connections are refused at once
     * instead of waiting in the kernel's backlog through the drain. */
    ix__listen_close(s);
    if (!s->daemon) return;
    uint64_t end = ix_time_ns() + (uint64_t)(drain_ms > 0 ? drain_ms : 0) * 1000000ull;
    while (atomic_load(&s->n_inflight) > 0 && ix_time_ns() < end && !atomic_load(&s->hurry)) sleep_ms(10);
    if (atomic_load(&s->n_inflight) > 0) {
        IX_LOGI("server: cancelling %d request(s) still in flight", atomic_load(&s->n_inflight));
        atomic_store(&s->aborting, true);
        /* Cancelled requests finish within a step; their handlers then write
         * the last bytes. Bounded in case a client stops reading. */
        end = ix_time_ns() + 10ull * 1000000000ull;
        while (atomic_load(&s->n_inflight) > 0 && ix_time_ns() < end) sleep_ms(10);
    }
    if (s->watcher_started) {
        atomic_store(&s->watch_stop, true);
        pthread_join(s->watcher, NULL);
        s->watcher_started = false;
    }
    /* MHD must not be stopped with suspended connections. Only jobs that
     * outlived the bounded waits above can still be suspended. */
    int n = ix__srv_resume_all(s);
    if (n) IX_LOGW("server: %d request(s) did not finish; closing their connections", n);
    /* MHD's shutdown is only safe with no request mid-parse (conn.c). */
    n = ix__conn_close_all(s, ix_time_ns() + 1000000000ull);
    if (n) IX_LOGI("server: %d connection(s) still answering at exit", n);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    /* Jobs whose client left after the watcher stopped: the MHD side's
     * references go now (the engine's last one frees each). */
    ix__srv_reap(s, true);
}

void ix_server_hurry(ix_server *s) { atomic_store(&s->hurry, true); }

void ix_server_destroy(ix_server *s) {
    if (!s) return;
    ix_server_shutdown(s, 0);
    /* A job the engine still holds would touch s: bounded wait. */
    for (int i = 0; i < 1000 && atomic_load(&s->n_inflight) > 0; i++) sleep_ms(10);
    pthread_mutex_destroy(&s->jobs_mu);
    ix__policy_destroy(s); /* after the jobs: their usage is in the saved state */
    ix__rstore_destroy(s); /* after the jobs: their responses are stored */
    pthread_mutex_destroy(&s->socks_mu);
    ix__admit_free(&s->admit);
    ix__metrics_free(&s->metrics);
    ix__embed_destroy(s);
    ix__trace_destroy(s->tracer); /* after the jobs: the last spans go out */
    for (size_t i = 0; i < s->n_api_keys; i++) ix_free(s->api_keys[i]);
    ix_free(s->api_keys);
    ix_free(s->key_ns);
    ix_free(s->model_name);
    ix_free(s->cors);
    ix_free(s->pending_template);
    ix__chat_free(&s->chat);
    ix_free(s);
}
