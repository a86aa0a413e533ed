/* server: the OpenAI-compatible HTTP API end to end, in process, on the
 * bundled model. A tiny HTTP/1.1 client (chunked bodies, SSE) talks to
 * servers bound to 127.0.0.1 on ephemeral ports:
 *   - every endpoint; greedy completions and chat equal ix_engine_generate
 *   - streaming (role first, deltas, finish, usage chunk, [DONE]); n > 1 and
 *     prompt arrays; stop strings; logprobs shapes; cached_tokens; cost
 *   - errors: malformed JSON, wrong types, invalid UTF-8, oversized body,
 *     too-long prompt, unknown model / route, wrong method, bad API key
 *   - a client that hangs up mid-stream frees its KV blocks
 *   - 64 concurrent streams on one client thread: every one completes, and
 *     the process's thread count does not grow (a fixed HTTP thread pool)
 *   - graceful shutdown with a request in flight (drained, and aborted) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "inferx/engine.h"
#include "inferx/server.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define KEY "sk-test-123"

static ix_model *g_model;
static ix_engine *g_engine;
static ix_server *g_srv, *g_auth_srv;
static uint16_t g_port, g_auth_port;

/* ---- a tiny HTTP/1.1 client ---------------------------------------------- */

typedef struct resp {
    int status;
    char *head; /* status line + headers */
    char *body; /* de-chunked, NUL-terminated */
    size_t body_len;
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int dial(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_request(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                        size_t body_len) {
    int fd = dial(port);
    if (fd < 0) return -1;
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
                     method, path, body ? body_len : 0, headers ? headers : "");
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n) goto bad;
    size_t off = 0;
    while (body && off < body_len) {
        ssize_t w = send(fd, body + off, body_len - off, MSG_NOSIGNAL);
        if (w <= 0) goto bad;
        off += (size_t)w;
    }
    return fd;
bad:
    close(fd);
    return -1;
}

static void dechunk(resp *r, char *raw, size_t len) {
    char *out = malloc(len + 1);
    size_t o = 0, i = 0;
    while (i < len) {
        size_t sz = strtoul(raw + i, NULL, 16);
        char *eol = strstr(raw + i, "\r\n");
        if (!eol) break;
        i = (size_t)(eol - raw) + 2;
        if (sz == 0 || i + sz > len) break;
        memcpy(out + o, raw + i, sz);
        o += sz;
        i += sz + 2;
    }
    out[o] = '\0';
    r->body = out;
    r->body_len = o;
}

static int read_response(int fd, resp *r) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = '\0';
    memset(r, 0, sizeof *r);
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    r->head = strndup(buf, (size_t)(sep - buf));
    char *body = sep + 4;
    size_t blen = len - (size_t)(body - buf);
    if (strcasestr(r->head, "transfer-encoding: chunked")) {
        dechunk(r, body, blen);
    } else {
        r->body = strndup(body, blen);
        r->body_len = blen;
    }
    free(buf);
    return 0;
}

static int http(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                resp *r) {
    int fd = send_request(port, method, path, headers, body, body ? strlen(body) : 0);
    if (fd < 0) return -1;
    return read_response(fd, r);
}

/* POSTs body; checks the status; returns the parsed JSON (caller decrefs). */
static json_t *post_json(const char *path, const char *body, int want_status) {
    resp r;
    assert_int_equal(http(g_port, "POST", path, NULL, body, &r), 0);
    if (r.status != want_status) fail_msg("%s %s: status %d, want %d: %s", path, body, r.status, want_status, r.body);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    if (!j) fail_msg("%s: not JSON (%s): %s", path, je.text, r.body);
    resp_free(&r);
    return j;
}

/* SSE: the JSON of every "data:" event, and whether [DONE] came last. */
static json_t *parse_sse(const char *body, bool *done_last) {
    json_t *arr = json_array();
    *done_last = false;
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        *done_last = !strncmp(p, "[DONE]", 6);
        if (!*done_last) {
            json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
            if (!j) fail_msg("bad SSE chunk: %.*s", (int)(end - p), p);
            json_array_append_new(arr, j);
        }
        p = end + 2;
    }
    return arr;
}

/* ---- reference outputs ------------------------------------------------------- */

static char *generate_ref(const char *text, int max_tokens) {
    ix_token_vec ids = {0};
    assert_int_equal(ix_tokenizer_encode(ix_model_tokenizer(g_model), text, strlen(text), IX_TOK_ADD_SPECIAL, &ids,
                                         NULL),
                     IX_OK);
    ix_request_params r = ix_request_default_params();
    r.prompt = ids.ids;
    r.n_prompt = ids.n;
    r.sample.temperature = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    ix_generation g;
    assert_int_equal(ix_engine_generate(g_engine, &r, 1, &g, NULL), IX_OK);
    char *out = strdup(g.text[0].data ? g.text[0].data : "");
    ix_generation_free(&g);
    ix_token_vec_free(&ids);
    return out;
}

static void wait_idle(void) {
    ix_engine_stats st;
    for (int i = 0; i < 1000; i++) {
        ix_engine_get_stats(g_engine, &st);
        if (st.n_running + st.n_waiting + st.n_swapped == 0 && st.kv.n_blocks_used == 0) return;
        usleep(10000);
    }
    fail_msg("the engine did not become idle: running %d, waiting %d, blocks used %lld", st.n_running,
             st.n_waiting, (long long)st.kv.n_blocks_used);
}

/* ---- setup ---------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    if (ix_model_load(&g_model, MODEL, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    ix_engine_params ep = ix_engine_default_params();
    ep.n_threads = 2;
    if (ix_engine_create(&g_engine, g_model, &ep, &err) != IX_OK) return -1;
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.model_name = "tiny";
    sp.max_body_bytes = 64 * 1024;
    sp.cost_per_hour_usd = 3.6;
    if (ix_server_create(&g_srv, g_engine, &sp, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g_port = ix_server_port(g_srv);
    sp.api_key = KEY;
    if (ix_server_create(&g_auth_srv, g_engine, &sp, &err) != IX_OK) return -1;
    g_auth_port = ix_server_port(g_auth_srv);
    return g_port && g_auth_port && g_port != g_auth_port ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    ix_server_destroy(g_srv);
    ix_server_destroy(g_auth_srv);
    ix_engine_destroy(g_engine);
    ix_model_destroy(g_model);
    return 0;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_health_ready_models(void **state) {
    (void)state;
    resp r;
    assert_int_equal(http(g_port, "GET", "/health", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http(g_port, "GET", "/ready", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http(g_port, "GET", "/v1/models", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    json_t *m = json_array_get(json_object_get(j, "data"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "id")), "tiny");
    assert_string_equal(json_string_value(json_object_get(m, "object")), "model");
    json_decref(j);
    resp_free(&r);
}

static void test_completion_equals_generate(void **state) {
    (void)state;
    const char *prompt = "It was on this point that she had";
    char *ref = generate_ref(prompt, 20);
    json_t *j = post_json("/v1/completions",
                          "{\"model\":\"tiny\",\"prompt\":\"It was on this point that she had\",\"max_tokens\":20,"
                          "\"temperature\":0,\"ignore_eos\":true,\"user\":\"u1\",\"unknown_field\":[1,2]}",
                          200);
    assert_true(!strncmp(json_string_value(json_object_get(j, "id")), "cmpl-", 5));
    assert_string_equal(json_string_value(json_object_get(j, "object")), "text_completion");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "tiny");
    assert_true(json_is_integer(json_object_get(j, "created")));
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_int_equal(json_integer_value(json_object_get(c0, "index")), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "text")), ref);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "length");
    assert_true(json_is_null(json_object_get(c0, "logprobs")));
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 20);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")),
                     json_integer_value(json_object_get(u, "prompt_tokens")) + 20);
    assert_true(json_is_integer(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")));
    assert_true(json_real_value(json_object_get(u, "cost_usd")) > 0);
    json_decref(j);
    free(ref);
}

static void test_chat_equals_generate(void **state) {
    (void)state;
    /* The bundled model has no chat template: the plain fallback. */
    char *ref = generate_ref("System: Be brief.\nUser: Hello there\nAssistant:", 12);
    json_t *j = post_json("/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                          "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello there\"}]}],"
                          "\"max_completion_tokens\":12,\"temperature\":0,\"ignore_eos\":true}",
                          200);
    assert_true(!strncmp(json_string_value(json_object_get(j, "id")), "chatcmpl-", 9));
    assert_string_equal(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(c0, "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), ref);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "length");
    json_decref(j);
    free(ref);
}

static char *stream_text(const char *path, const char *body, bool chat, json_t **usage_out) {
    resp r;
    assert_int_equal(http(g_port, "POST", path, NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "content-type: text/event-stream"));
    bool done_last;
    json_t *chunks = parse_sse(r.body, &done_last);
    assert_true(done_last);
    assert_true(json_array_size(chunks) >= 2);
    size_t i;
    json_t *ch;
    char text[8192] = "";
    const char *finish = NULL;
    json_array_foreach(chunks, i, ch) {
        assert_string_equal(json_string_value(json_object_get(ch, "object")),
                            chat ? "chat.completion.chunk" : "text_completion");
        json_t *choices = json_object_get(ch, "choices");
        if (json_array_size(choices) == 0) {
            assert_int_equal(i, json_array_size(chunks) - 1); /* the usage chunk is last */
            *usage_out = json_incref(json_object_get(ch, "usage"));
            continue;
        }
        json_t *c0 = json_array_get(choices, 0);
        if (chat && i == 0)
            assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "delta"), "role")), "assistant");
        const char *t = chat ? json_string_value(json_object_get(json_object_get(c0, "delta"), "content"))
                             : json_string_value(json_object_get(c0, "text"));
        if (t) strncat(text, t, sizeof text - strlen(text) - 1);
        if (json_is_string(json_object_get(c0, "finish_reason")))
            finish = json_string_value(json_object_get(c0, "finish_reason"));
    }
    assert_non_null(finish);
    assert_string_equal(finish, "length");
    json_decref(chunks);
    resp_free(&r);
    return strdup(text);
}

static void test_streaming(void **state) {
    (void)state;
    char *ref = generate_ref("Emma Woodhouse, handsome, clever, and rich", 16);
    json_t *usage = NULL;
    char *t = stream_text("/v1/completions",
                          "{\"prompt\":\"Emma Woodhouse, handsome, clever, and rich\",\"max_tokens\":16,"
                          "\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                          "\"stream_options\":{\"include_usage\":true}}",
                          false, &usage);
    assert_string_equal(t, ref);
    assert_non_null(usage);
    assert_int_equal(json_integer_value(json_object_get(usage, "completion_tokens")), 16);
    json_decref(usage);
    free(t);
    free(ref);
    ref = generate_ref("User: Tell me a story\nAssistant:", 10);
    usage = NULL;
    t = stream_text("/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":10,"
                    "\"temperature\":0,\"ignore_eos\":true,\"stream\":true}",
                    true, &usage);
    assert_string_equal(t, ref);
    assert_null(usage); /* not asked for */
    free(t);
    free(ref);
}

static void test_n_and_prompt_arrays(void **state) {
    (void)state;
    json_t *j = post_json("/v1/completions",
                          "{\"prompt\":\"She then found that\",\"max_tokens\":8,\"n\":3,\"temperature\":0.9,"
                          "\"seed\":7,\"ignore_eos\":true}",
                          200);
    json_t *choices = json_object_get(j, "choices");
    assert_int_equal(json_array_size(choices), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(choices, (size_t)i), "index")), i);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 24);
    json_decref(j);
    /* Two prompts x n=2: four choices; prompt i's choices are 2i, 2i+1. */
    char *ref0 = generate_ref("Mr. Darcy", 6), *ref1 = generate_ref("Charles and Mary", 6);
    j = post_json("/v1/completions",
                  "{\"prompt\":[\"Mr. Darcy\",\"Charles and Mary\"],\"max_tokens\":6,\"n\":2,\"temperature\":0,"
                  "\"ignore_eos\":true}",
                  200);
    choices = json_object_get(j, "choices");
    assert_int_equal(json_array_size(choices), 4);
    for (int i = 0; i < 4; i++) {
        json_t *c = json_array_get(choices, (size_t)i);
        assert_int_equal(json_integer_value(json_object_get(c, "index")), i);
        assert_string_equal(json_string_value(json_object_get(c, "text")), i < 2 ? ref0 : ref1);
    }
    json_decref(j);
    free(ref0);
    free(ref1);
    /* Token-id prompt. */
    j = post_json("/v1/completions", "{\"prompt\":[1,200,300],\"max_tokens\":3,\"temperature\":0,\"ignore_eos\":true}",
                  200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 3);
    json_decref(j);
}

static void test_stop_strings(void **state) {
    (void)state;
    char *ref = generate_ref("It is a truth universally acknowledged", 24);
    size_t len = strlen(ref);
    assert_true(len > 12);
    /* Stop at a piece from the middle of the greedy text. */
    char stop[5];
    memcpy(stop, ref + len / 2, 4);
    stop[4] = '\0';
    char body[512];
    snprintf(body, sizeof body,
             "{\"prompt\":\"It is a truth universally acknowledged\",\"max_tokens\":24,\"temperature\":0,"
             "\"ignore_eos\":true,\"stop\":[\"@@never@@\",\"%s\"]}",
             stop);
    json_t *j = post_json("/v1/completions", body, 200);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    const char *text = json_string_value(json_object_get(c0, "text"));
    size_t want = (size_t)(strstr(ref, stop) - ref);
    assert_int_equal(strlen(text), want);
    assert_memory_equal(text, ref, want);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_decref(j);
    free(ref);
}

static void test_logprobs(void **state) {
    (void)state;
    json_t *j = post_json("/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5,\"temperature\":0,"
                          "\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":3}",
                          200);
    json_t *content = json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs"),
                                      "content");
    assert_int_equal(json_array_size(content), 5);
    size_t i;
    json_t *e;
    json_array_foreach(content, i, e) {
        assert_true(json_is_string(json_object_get(e, "token")));
        assert_true(json_real_value(json_object_get(e, "logprob")) <= 0);
        assert_true(json_is_array(json_object_get(e, "bytes")));
        json_t *top = json_object_get(e, "top_logprobs");
        assert_int_equal(json_array_size(top), 3);
        /* Greedy: the chosen token is the most likely one. */
        assert_string_equal(json_string_value(json_object_get(json_array_get(top, 0), "token")),
                            json_string_value(json_object_get(e, "token")));
    }
    json_decref(j);
    j = post_json("/v1/completions",
                  "{\"prompt\":\"Mr. Darcy\",\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":2}",
                  200);
    json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
    assert_int_equal(json_array_size(json_object_get(lp, "tokens")), 4);
    assert_int_equal(json_array_size(json_object_get(lp, "token_logprobs")), 4);
    assert_int_equal(json_array_size(json_object_get(lp, "top_logprobs")), 4);
    assert_int_equal(json_array_size(json_object_get(lp, "text_offset")), 4);
    assert_true(json_object_size(json_array_get(json_object_get(lp, "top_logprobs"), 0)) >= 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 0)), 0);
    json_decref(j);
}

static void test_cached_tokens(void **state) {
    (void)state;
    const char *body = "{\"prompt\":\"It is a truth universally acknowledged, that a single man in possession of a "
                       "good fortune, must be in want of a wife. However little known the feelings or views of such "
                       "a man may be on his first entering a neighbourhood\",\"max_tokens\":2,\"temperature\":0}";
    json_t *a = post_json("/v1/completions", body, 200);
    json_t *b = post_json("/v1/completions", body, 200);
    json_t *ua = json_object_get(a, "usage"), *ub = json_object_get(b, "usage");
    int64_t np = json_integer_value(json_object_get(ub, "prompt_tokens"));
    assert_true(np >= 32);
    int64_t cached = json_integer_value(json_object_get(json_object_get(ub, "prompt_tokens_details"), "cached_tokens"));
    assert_true(cached >= 16 && cached < np);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(ua, "prompt_tokens_details"), "cached_tokens")),
                     0);
    json_decref(a);
    json_decref(b);
}

static void expect_error(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                         size_t body_len, int status, const char *param, const char *msg_part) {
    int fd = send_request(port, method, path, headers, body, body_len);
    assert_true(fd >= 0);
    resp r;
    assert_int_equal(read_response(fd, &r), 0);
    if (r.status != status) fail_msg("%s %s: status %d, want %d: %s", method, path, r.status, status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) fail_msg("error body is not JSON: %s", r.body);
    json_t *err = json_object_get(j, "error");
    assert_true(json_is_string(json_object_get(err, "message")));
    assert_true(json_is_string(json_object_get(err, "type")));
    assert_non_null(json_object_get(err, "code"));
    const char *got_param = json_string_value(json_object_get(err, "param"));
    if (param && (!got_param || strcmp(got_param, param)))
        fail_msg("%s %s: param %s, want %s: %s", method, path, got_param ? got_param : "null", param, r.body);
    if (param)
        assert_string_equal(got_param, param);
    else
        assert_true(json_is_null(json_object_get(err, "param")));
    if (msg_part && !strstr(json_string_value(json_object_get(err, "message")), msg_part))
        fail_msg("message '%s' lacks '%s'", json_string_value(json_object_get(err, "message")), msg_part);
    json_decref(j);
    resp_free(&r);
}

#define ERR(body, status, param, part)                                                                  \
    expect_error(g_port, "POST", "/v1/completions", NULL, body, strlen(body), status, param, part)

static void test_errors(void **state) {
    (void)state;
    ERR("{\"prompt\": \"x\",", 400, NULL, "line 1");
    ERR("[1,2]", 400, NULL, "object");
    ERR("{\"prompt\":\"x\",\"max_tokens\":\"a\"}", 400, "max_tokens", "integer");
    ERR("{\"prompt\":\"x\",\"temperature\":7}", 400, "temperature", "[0, 2]");
    ERR("{\"prompt\":\"x\",\"n\":99}", 400, "n", NULL);
    ERR("{\"prompt\":\"x\",\"stop\":7}", 400, "stop", NULL);
    ERR("{\"prompt\":\"x\",\"logit_bias\":{\"999999\":1}}", 400, "logit_bias", NULL);
    ERR("{\"prompt\":true}", 400, "prompt", NULL);
    ERR("{\"prompt\":[1,-5]}", 400, "prompt", NULL);
    ERR("{\"prompt\":\"x\",\"model\":\"gpt-9\"}", 404, "model", "does not exist");
    ERR("{\"prompt\":\"x\",\"max_tokens\":100000}", 400, "max_tokens", "maximum context length");
    ERR("{\"prompt\":\"x\",\"stream\":\"yes\"}", 400, "stream", NULL);
    const char bad_utf8[] = "{\"prompt\":\"\xff\xfe\"}";
    ERR(bad_utf8, 400, NULL, "UTF-8");
    expect_error(g_port, "POST", "/v1/chat/completions", NULL, "{\"messages\":[]}", 15, 400, "messages", NULL);
    const char *wiz = "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}";
    expect_error(g_port, "POST", "/v1/chat/completions", NULL, wiz, strlen(wiz), 400, "messages[0]", NULL);
    /* A prompt longer than the context. */
    char *big = malloc(8192);
    strcpy(big, "{\"prompt\":[1");
    for (int i = 0; i < 700; i++) strcat(big, ",5");
    strcat(big, "]}");
    ERR(big, 400, "prompt", "maximum context length");
    free(big);
    /* Oversized body (limit 64 KiB here). */
    size_t n = 100 * 1024;
    char *huge = malloc(n + 1);
    memset(huge, ' ', n);
    memcpy(huge, "{\"prompt\":\"x\"", 13);
    huge[n - 1] = '}';
    huge[n] = '\0';
    expect_error(g_port, "POST", "/v1/completions", NULL, huge, n, 413, NULL, "limit");
    free(huge);
    expect_error(g_port, "GET", "/v2/nothing", NULL, NULL, 0, 404, NULL, NULL);
    expect_error(g_port, "GET", "/v1/completions", NULL, NULL, 0, 405, NULL, "POST");
    expect_error(g_port, "POST", "/health", NULL, "{}", 2, 405, NULL, NULL);
    /* The server still works. */
    json_decref(post_json("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1}", 200));
}

static void test_auth(void **state) {
    (void)state;
    const char *body = "{\"prompt\":\"x\",\"max_tokens\":1}";
    expect_error(g_auth_port, "POST", "/v1/completions", NULL, body, strlen(body), 401, NULL, NULL);
    expect_error(g_auth_port, "POST", "/v1/completions", "Authorization: Bearer nope\r\n", body, strlen(body), 401,
                 NULL, NULL);
    expect_error(g_auth_port, "GET", "/v1/models", "Authorization: Bearer " KEY "x\r\n", NULL, 0, 401, NULL, NULL);
    resp r;
    int fd = send_request(g_auth_port, "POST", "/v1/completions", "Authorization: Bearer " KEY "\r\n", body,
                          strlen(body));
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* Probes and metrics stay open. */
    assert_int_equal(http(g_auth_port, "GET", "/health", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http(g_auth_port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

static void test_tokenize_detokenize(void **state) {
    (void)state;
    const char *text = "Emma Woodhouse, handsome";
    ix_token_vec ids = {0};
    ix_tokenizer_encode(ix_model_tokenizer(g_model), text, strlen(text), IX_TOK_ADD_SPECIAL, &ids, NULL);
    json_t *j = post_json("/tokenize", "{\"prompt\":\"Emma Woodhouse, handsome\"}", 200);
    json_t *toks = json_object_get(j, "tokens");
    assert_int_equal(json_array_size(toks), ids.n);
    assert_int_equal(json_integer_value(json_object_get(j, "count")), (json_int_t)ids.n);
    for (size_t i = 0; i < ids.n; i++) assert_int_equal(json_integer_value(json_array_get(toks, i)), ids.ids[i]);
    json_t *req = json_pack("{s:O}", "tokens", toks);
    char *body = json_dumps(req, JSON_COMPACT);
    json_t *d = post_json("/detokenize", body, 200);
    assert_string_equal(json_string_value(json_object_get(d, "prompt")), text);
    free(body);
    json_decref(req);
    json_decref(d);
    json_decref(j);
    ix_token_vec_free(&ids);
    j = post_json("/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 200);
    assert_true(json_array_size(json_object_get(j, "tokens")) > 2);
    json_decref(j);
    json_decref(post_json("/detokenize", "{\"tokens\":[1,99999999]}", 400));
}

static bool metric_value(const char *text, const char *name, double *out) {
    const char *p = text;
    size_t n = strlen(name);
    while ((p = strstr(p, name))) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ') {
            *out = strtod(p + n + 1, NULL);
            return true;
        }
        p += n;
    }
    return false;
}

static void test_metrics(void **state) {
    (void)state;
    resp r;
    assert_int_equal(http(g_port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "content-type: text/plain"));
    const char *names[] = {"inferx_prompt_tokens_total", "inferx_generation_tokens_total",
                           "inferx_prompt_tokens_cached_total", "inferx_num_requests_running",
                           "inferx_num_requests_waiting", "inferx_num_requests_swapped",
                           "inferx_kv_cache_blocks_used", "inferx_kv_cache_blocks_total",
                           "inferx_kv_cache_usage_ratio", "inferx_prefix_cache_queried_tokens_total",
                           "inferx_prefix_cache_hit_tokens_total", "inferx_deadline_shed_total",
                           "inferx_deadline_missed_total", "inferx_cost_usd_total",
                           "inferx_time_to_first_token_seconds_count", "inferx_inter_token_latency_seconds_count",
                           "inferx_e2e_request_latency_seconds_count"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double v;
        if (!metric_value(r.body, names[i], &v)) fail_msg("metric %s missing", names[i]);
    }
    double v;
    assert_true(metric_value(r.body, "inferx_generation_tokens_total", &v) && v > 0);
    assert_true(metric_value(r.body, "inferx_cost_usd_total", &v) && v > 0);
    assert_non_null(strstr(r.body, "inferx_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"));
    assert_non_null(strstr(r.body, "inferx_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"}"));
    assert_non_null(strstr(r.body, "# TYPE inferx_time_to_first_token_seconds histogram"));
    assert_non_null(strstr(r.body, "inferx_preemptions_total{mode=\"recompute\"}"));
    resp_free(&r);
}

static void test_disconnect_cancels(void **state) {
    (void)state;
    wait_idle();
    const char *body = "{\"prompt\":\"Mr. Darcy\",\"max_tokens\":480,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}";
    int fd = send_request(g_port, "POST", "/v1/completions", NULL, body, strlen(body));
    assert_true(fd >= 0);
    /* Read until the first token chunk has arrived, then hang up. */
    char buf[4096];
    size_t got = 0;
    int chunks = 0;
    while (chunks < 2 && got < sizeof buf - 1) {
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
        buf[got] = '\0';
        chunks = 0;
        for (const char *p = buf; (p = strstr(p, "data: ")); p += 6) chunks++;
    }
    ix_engine_stats st;
    ix_engine_get_stats(g_engine, &st);
    uint64_t gen_before = st.n_generated_tokens;
    close(fd);
    wait_idle(); /* every KV block freed */
    ix_engine_get_stats(g_engine, &st);
    assert_true(st.n_generated_tokens - gen_before < 470); /* it did not run to the end */
    resp r;
    assert_int_equal(http(g_port, "GET", "/metrics", NULL, NULL, &r), 0);
    double v;
    double cancelled;
    assert_true(metric_value(r.body, "inferx_requests_cancelled_total{cause=\"disconnect\"}", &cancelled));
    assert_true(cancelled >= 1);
    assert_true(metric_value(r.body, "inferx_requests_finished_total{reason=\"abort\"}", &v));
    assert_true(v >= 1);
    assert_true(metric_value(r.body, "inferx_kv_cache_blocks_used", &v));
    assert_true(v == 0);
    resp_free(&r);
    /* A non-streaming request whose client hangs up is cancelled too. */
    body = "{\"prompt\":\"Mr. Darcy\",\"max_tokens\":480,\"temperature\":0,\"ignore_eos\":true}";
    fd = send_request(g_port, "POST", "/v1/completions", NULL, body, strlen(body));
    for (int i = 0; i < 500; i++) {
        ix_engine_get_stats(g_engine, &st);
        if (st.n_running) break;
        usleep(2000);
    }
    close(fd);
    wait_idle();
    /* ... by the watcher, since its connection is suspended meanwhile. */
    assert_int_equal(http(g_port, "GET", "/metrics", NULL, NULL, &r), 0);
    double v2;
    assert_true(metric_value(r.body, "inferx_requests_cancelled_total{cause=\"disconnect\"}", &v2));
    assert_true(v2 >= cancelled + 1);
    resp_free(&r);
}

static int thread_count(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
    fclose(f);
    return n;
}

#define N_STREAMS 64

static void test_many_streams_fixed_threads(void **state) {
    (void)state;
    wait_idle();
    char *ref = generate_ref("Emma Woodhouse, handsome, clever, and rich", 8);
    int before = thread_count();
    assert_true(before > 0);
    const char *body = "{\"prompt\":\"Emma Woodhouse, handsome, clever, and rich\",\"max_tokens\":8,"
                       "\"temperature\":0,\"ignore_eos\":true,\"stream\":true}";
    int fds[N_STREAMS];
    char *bufs[N_STREAMS];
    size_t lens[N_STREAMS], cap = 1 << 16;
    bool open_[N_STREAMS];
    /* Connect and send every request first, so that all streams are open at once. */
    for (int i = 0; i < N_STREAMS; i++) {
        fds[i] = send_request(g_port, "POST", "/v1/completions", NULL, body, strlen(body));
        assert_true(fds[i] >= 0);
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        bufs[i] = malloc(cap);
        lens[i] = 0;
        open_[i] = true;
    }
    int max_threads = thread_count(), n_open = N_STREAMS;
    uint64_t end = ix_time_ns() + 40ull * 1000000000ull;
    while (n_open > 0 && ix_time_ns() < end) {
        struct pollfd pf[N_STREAMS];
        int idx[N_STREAMS], n = 0;
        for (int i = 0; i < N_STREAMS; i++)
            if (open_[i]) pf[n] = (struct pollfd){fds[i], POLLIN, 0}, idx[n++] = i;
        if (poll(pf, (nfds_t)n, 100) < 0) break;
        for (int k = 0; k < n; k++) {
            if (!pf[k].revents) continue;
            int i = idx[k];
            ssize_t r = recv(fds[i], bufs[i] + lens[i], cap - 1 - lens[i], 0);
            if (r > 0) {
                lens[i] += (size_t)r;
                assert_true(lens[i] < cap - 1);
            } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                open_[i] = false;
                n_open--;
                close(fds[i]);
            }
        }
        int t = thread_count();
        if (t > max_threads) max_threads = t;
    }
    assert_int_equal(n_open, 0);
    if (max_threads != before) fail_msg("threads grew from %d to %d with %d streams", before, max_threads, N_STREAMS);
    for (int i = 0; i < N_STREAMS; i++) {
        bufs[i][lens[i]] = '\0';
        resp r;
        memset(&r, 0, sizeof r);
        char *sep = strstr(bufs[i], "\r\n\r\n");
        assert_non_null(sep);
        assert_int_equal(sscanf(bufs[i], "HTTP/1.%*d %d", &r.status), 1);
        assert_int_equal(r.status, 200);
        dechunk(&r, sep + 4, lens[i] - (size_t)(sep + 4 - bufs[i]));
        bool done_last;
        json_t *chunks = parse_sse(r.body, &done_last);
        assert_true(done_last);
        char text[1024] = "";
        size_t c;
        json_t *ch;
        json_array_foreach(chunks, c, ch) {
            const char *t = json_string_value(json_object_get(json_array_get(json_object_get(ch, "choices"), 0), "text"));
            if (t) strncat(text, t, sizeof text - strlen(text) - 1);
        }
        assert_string_equal(text, ref);
        json_decref(chunks);
        free(r.body);
        free(bufs[i]);
    }
    free(ref);
    wait_idle();
}

typedef struct client_job {
    uint16_t port;
    const char *body;
    resp r;
    int rc;
} client_job;

static void *client_thread(void *arg) {
    client_job *c = arg;
    c->rc = http(c->port, "POST", "/v1/completions", NULL, c->body, &c->r);
    return NULL;
}

static void shutdown_with_inflight(int64_t drain_ms, const char *want_reason) {
    wait_idle();
    ix_server *s;
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    assert_int_equal(ix_server_create(&s, g_engine, &sp, NULL), IX_OK);
    client_job c = {ix_server_port(s),
                    "{\"prompt\":\"Mr. Darcy\",\"max_tokens\":300,\"temperature\":0,\"ignore_eos\":true}", {0}, -1};
    pthread_t th;
    pthread_create(&th, NULL, client_thread, &c);
    ix_engine_stats st;
    for (int i = 0; i < 2000; i++) {
        ix_engine_get_stats(g_engine, &st);
        if (st.n_running) break;
        usleep(1000);
    }
    assert_int_equal(st.n_running, 1);
    uint64_t t0 = ix_time_ns();
    ix_server_shutdown(s, drain_ms);
    double secs = (double)(ix_time_ns() - t0) / 1e9;
    assert_true(secs < 15);
    pthread_join(th, NULL);
    assert_int_equal(c.rc, 0);
    assert_int_equal(c.r.status, 200);
    json_t *j = json_loads(c.r.body, 0, NULL);
    assert_non_null(j);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), want_reason);
    json_decref(j);
    resp_free(&c.r);
    /* No longer accepting. */
    resp r;
    assert_int_not_equal(http(c.port, "GET", "/health", NULL, NULL, &r), 0);
    ix_server_destroy(s);
    wait_idle();
}

/* A full waiting queue answers 503 with Retry-After, and nothing is lost:
 * the queued requests still complete (here: aborted by the shutdown). */
static void test_overload_retry_after(void **state) {
    (void)state;
    ix_engine_params ep = ix_engine_default_params();
    ep.sched.max_num_seqs = 1;
    ep.n_threads = 2;
    ix_engine *e;
    assert_int_equal(ix_engine_create(&e, g_model, &ep, NULL), IX_OK);
    ix_server *s;
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.max_waiting = 1;
    assert_int_equal(ix_server_create(&s, e, &sp, NULL), IX_OK);
    enum { N = 3 };
    client_job c[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        c[i] = (client_job){ix_server_port(s),
                            "{\"prompt\":\"Emma\",\"max_tokens\":400,\"ignore_eos\":true}", {0}, -1};
        pthread_create(&th[i], NULL, client_thread, &c[i]);
    }
    ix_engine_stats st;
    for (int i = 0; i < 5000; i++) {
        ix_engine_get_stats(e, &st);
        if (st.n_running == 1 && st.n_waiting >= 1) break;
        usleep(1000);
    }
    assert_true(st.n_waiting >= 1);
    resp r;
    assert_int_equal(http(ix_server_port(s), "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"Emma\",\"max_tokens\":2}", &r), 0);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.head, "Retry-After: 1"));
    assert_non_null(strstr(r.body, "overloaded"));
    resp_free(&r);
    ix_server_shutdown(s, 0);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        resp_free(&c[i].r);
    }
    ix_server_destroy(s);
    ix_engine_destroy(e);
}

static void test_shutdown_drains(void **state) {
    (void)state;
    shutdown_with_inflight(20000, "length");
}

static void test_shutdown_aborts(void **state) {
    (void)state;
    shutdown_with_inflight(0, "abort");
}

int main(void) {
    FILE *f = fopen(MODEL, "rb");
    if (!f) {
        printf("skip: %s not found\n", MODEL);
        return 77;
    }
    fclose(f);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_ready_models),
        cmocka_unit_test(test_completion_equals_generate),
        cmocka_unit_test(test_chat_equals_generate),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_n_and_prompt_arrays),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_cached_tokens),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_tokenize_detokenize),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_many_streams_fixed_threads),
        cmocka_unit_test(test_overload_retry_after),
        cmocka_unit_test(test_shutdown_drains),
        cmocka_unit_test(test_shutdown_aborts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
