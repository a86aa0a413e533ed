/* server: the OpenAI-compatible HTTP API end to end, in process, on the
 * bundled model. A tiny HTTP/1.1 client (chunked bodies, SSE) talks to
 * servers bound to 127.0.0.1 on ephemeral ports:
 *   - every endpoint; greedy completions and chat equal ix_engine_generate
 *   - streaming (role first, deltas, finish, usage chunk, [DONE]); n > 1 and
 *     prompt arrays; stop strings; logprobs shapes; cached_tokens; cost
 *   - errors: malformed JSON, wrong types, invalid UTF-8, oversized body,
 *     too-long prompt, unknown model / route, wrong method, bad API key
 *   - a client that hangs up mid-stream frees its KV blocks, and its machine
 *     time is still charged (cost_usd_total, access log)
 *   - /metrics is valid Prometheus text (vLLM's names under inferx:, every
 *     sample labelled model_name, escaped)
 *   - the JSON access log: one line per request, its fields, never the text
 *   - API keys as tenants of the prefix cache
 *   - chat templates: each family's exact text from real template strings;
 *     markers become control tokens, content never does (phi-3 vocabulary);
 *     a model whose GGUF carries a template: tool list and tool history
 *     rendered, the template's raise_exception a 400, --chat-template
 *   - `inferx serve` itself: a key file with several keys, --access-log
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
#include <math.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "inferx/engine.h"
#include "inferx/gguf.h"
#include "inferx/server.h"
#include "server/server_int.h"
#include "gguf_copy_util.h"
#include "http_client.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define KEY "sk-test-123"
#define KEY2 "sk-test-456"

static ix_model *g_model;
static ix_engine *g_engine;
static ix_server *g_srv, *g_auth_srv;
static uint16_t g_port, g_auth_port;

/* ---- the access log, captured -------------------------------------------- */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *g_log;
static size_t g_log_len;

static void capture_log(void *user, const char *line, size_t len) {
    (void)user;
    pthread_mutex_lock(&g_log_mu);
    g_log = realloc(g_log, g_log_len + len + 1);
    memcpy(g_log + g_log_len, line, len);
    g_log_len += len;
    g_log[g_log_len] = '\0';
    pthread_mutex_unlock(&g_log_mu);
}

static size_t log_mark(void) {
    pthread_mutex_lock(&g_log_mu);
    size_t n = g_log_len;
    pthread_mutex_unlock(&g_log_mu);
    return n;
}

/* The lines written since mark, each parsed (a line that is not one JSON
 * object fails the test). */
static json_t *log_since(size_t mark) {
    json_t *arr = json_array();
    pthread_mutex_lock(&g_log_mu);
    const char *p = g_log ? g_log + mark : "";
    const char *end = g_log ? g_log + g_log_len : p;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        assert_non_null(nl); /* every line ends in a newline */
        json_error_t je;
        json_t *o = json_loadb(p, (size_t)(nl - p), 0, &je);
        if (!json_is_object(o)) fail_msg("access log line is not a JSON object (%s): %.*s", je.text, (int)(nl - p), p);
        json_array_append_new(arr, o);
        p = nl + 1;
    }
    pthread_mutex_unlock(&g_log_mu);
    return arr;
}

/* The first line since mark whose field equals value (a string, or for
 * "status" a number), waiting for it up to 5 s (a job whose client left
 * is logged by the watcher). NULL if none. */
static json_t *log_find(size_t mark, const char *field, const char *value) {
    json_t *want = strcmp(field, "status") ? json_string(value) : json_integer(atoi(value));
    for (int i = 0; i < 500; i++) {
        json_t *lines = log_since(mark), *o;
        size_t k;
        json_array_foreach(lines, k, o) {
            if (json_equal(json_object_get(o, field), want)) {
                json_incref(o);
                json_decref(lines);
                json_decref(want);
                return o;
            }
        }
        json_decref(lines);
        usleep(10000);
    }
    json_decref(want);
    return NULL;
}

/* ---- a tiny HTTP/1.1 client (http_client.h) ------------------------------ */

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
    sp.access_log = capture_log;
    if (ix_server_create(&g_srv, g_engine, &sp, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g_port = ix_server_port(g_srv);
    static const char *const more_keys[] = {KEY2};
    sp.api_key = KEY;
    sp.api_keys = more_keys;
    sp.n_api_keys = 1;
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
    free(g_log);
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
                          "\"temperature\":0,\"ignore_eos\":true,\"user\":\"u1\",\"best_of\":1,\"echo\":false,\"suffix\":null}",
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

/* The value of the sample whose series (name and labels, as printed) is
 * series. */
static bool metric_value(const char *text, const char *series, double *out) {
    const char *p = text;
    size_t n = strlen(series);
    while ((p = strstr(p, series))) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ') {
            *out = strtod(p + n + 1, NULL);
            return true;
        }
        p += n;
    }
    return false;
}

/* name{model_name="tiny"[,extra]} */
static bool metric(const char *text, const char *name, const char *extra, double *out) {
    char series[256];
    snprintf(series, sizeof series, "%s{model_name=\"tiny\"%s%s}", name, extra ? "," : "", extra ? extra : "");
    return metric_value(text, series, out);
}

/* Reads a Prometheus label value (after the opening quote) into out,
 * unescaped; returns the byte after the closing quote, or NULL. */
static const char *label_value(const char *p, char *out, size_t size) {
    size_t o = 0;
    while (*p && *p != '"') {
        char c = *p++;
        if (c == '\n') return NULL;
        if (c == '\\') {
            c = *p++;
            if (c == 'n')
                c = '\n';
            else if (c != '\\' && c != '"')
                return NULL;
        }
        if (o + 1 < size) out[o++] = c;
    }
    out[o] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

static bool name_char(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

/* Checks text as a Prometheus scraper (format 0.0.4) would, more strictly:
 * HELP and TYPE once per family and before its samples, every family's
 * samples together, names and label syntax, escapes, values; every sample
 * labelled model_name=want_model; counters end in _total; histograms have
 * increasing le, cumulative buckets ending at +Inf, and _count equal to the
 * +Inf bucket. Returns the number of families. */
static int check_exposition(const char *text, const char *want_model) {
    char family[128] = "", type[128] = "", seen[200][128];
    int n_seen = 0;
    double last_le = -1, last_bucket = 0, inf_bucket = -1;
    const char *p = text;
    assert_true(*text);
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (!eol) fail_msg("the exposition does not end in a newline");
        char line[4096];
        size_t len = (size_t)(eol - p);
        assert_true(len < sizeof line);
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol + 1;
        char name[128], word[128];
        if (!strncmp(line, "# HELP ", 7)) {
            assert_int_equal(sscanf(line + 7, "%127s", name), 1);
            for (int i = 0; i < n_seen; i++)
                if (!strcmp(seen[i], name)) fail_msg("family %s described twice", name);
            assert_true(n_seen < 200);
            snprintf(seen[n_seen++], sizeof seen[0], "%s", name);
            snprintf(family, sizeof family, "%s", name);
            type[0] = '\0';
            continue;
        }
        if (!strncmp(line, "# TYPE ", 7)) {
            assert_int_equal(sscanf(line + 7, "%127s %127s", name, word), 2);
            assert_string_equal(name, family); /* right after its HELP */
            assert_true(!strcmp(word, "counter") || !strcmp(word, "gauge") || !strcmp(word, "histogram"));
            snprintf(type, sizeof type, "%s", word);
            if (!strcmp(type, "counter") && (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total")))
                fail_msg("counter %s does not end in _total", name);
            /* ours, or the standard process_* families of Prometheus clients */
            assert_true(!strncmp(name, "inferx:", 7) || !strncmp(name, "process_", 8));
            last_le = -1, last_bucket = 0, inf_bucket = -1;
            continue;
        }
        if (line[0] == '#') fail_msg("unexpected comment: %s", line);
        assert_true(type[0]); /* a sample before its TYPE */
        const char *q = line;
        size_t k = 0;
        while (name_char(*q, k == 0) && k + 1 < sizeof name) name[k++] = *q++;
        name[k] = '\0';
        assert_true(k > 0);
        const char *suffix = name + strlen(family);
        bool in_family = !strncmp(name, family, strlen(family));
        if (strcmp(type, "histogram"))
            in_family &= *suffix == '\0';
        else
            in_family &= !strcmp(suffix, "_bucket") || !strcmp(suffix, "_sum") || !strcmp(suffix, "_count");
        if (!in_family) fail_msg("sample %s outside its family %s", name, family);
        bool model_ok = false;
        char le[512] = "";
        if (*q == '{') {
            q++;
            while (*q != '}') {
                char key[64], val[512];
                k = 0;
                while (name_char(*q, k == 0) && k + 1 < sizeof key) key[k++] = *q++;
                key[k] = '\0';
                if (!k || q[0] != '=' || q[1] != '"') fail_msg("bad label in: %s", line);
                q = label_value(q + 2, val, sizeof val);
                if (!q) fail_msg("bad label value in: %s", line);
                if (!strcmp(key, "model_name")) model_ok = !strcmp(val, want_model);
                if (!strcmp(key, "le")) snprintf(le, sizeof le, "%s", val);
                if (*q == ',') q++;
                else if (*q != '}') fail_msg("bad label list in: %s", line);
            }
            q++;
        }
        /* the process_* families are unlabelled, as client libraries write them */
        if (!model_ok && strncmp(name, "process_", 8)) fail_msg("sample without model_name=\"%s\": %s", want_model, line);
        if (*q++ != ' ') fail_msg("no value in: %s", line);
        char *end;
        double v = strtod(q, &end);
        if (end == q || *end) fail_msg("bad value in: %s", line);
        if (!strcmp(suffix, "_bucket")) {
            assert_true(le[0]);
            double bound = strcmp(le, "+Inf") ? strtod(le, NULL) : INFINITY;
            assert_true(bound > last_le);
            assert_true(v >= last_bucket);
            last_le = bound;
            last_bucket = v;
            if (isinf(bound)) inf_bucket = v;
        } else if (!strcmp(suffix, "_count")) {
            assert_true(inf_bucket >= 0);
            assert_true(v == inf_bucket);
        }
    }
    return n_seen;
}

static void test_metrics(void **state) {
    (void)state;
    resp r;
    assert_int_equal(http(g_port, "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "content-type: text/plain; version=0.0.4"));
    assert_true(check_exposition(r.body, "tiny") >= 30);
    /* The names of vLLM's metrics, under inferx:. */
    const char *names[] = {"inferx:num_requests_running", "inferx:num_requests_waiting",
                           "inferx:kv_cache_usage_perc", "inferx:prefix_cache_queries_total",
                           "inferx:prefix_cache_hits_total", "inferx:prompt_tokens_total",
                           "inferx:generation_tokens_total", "inferx:time_to_first_token_seconds_count",
                           "inferx:inter_token_latency_seconds_count", "inferx:e2e_request_latency_seconds_count",
                           "inferx:request_queue_time_seconds_count", "inferx:request_prompt_tokens_count",
                           "inferx:request_generation_tokens_count", "inferx:request_params_max_tokens_count",
                           "inferx:request_prefill_time_seconds_count", "inferx:request_decode_time_seconds_count",
                           "inferx:iteration_tokens_total_count",
                           /* and inferx's own */
                           "inferx:num_requests_swapped", "inferx:prompt_tokens_cached_total",
                           "inferx:kv_cache_num_blocks", "inferx:kv_cache_blocks_used",
                           "inferx:kv_cache_blocks_cached", "inferx:kv_cache_blocks_free",
                           "inferx:kv_swap_num_blocks", "inferx:deadline_shed_total",
                           "inferx:deadline_missed_total", "inferx:cost_per_hour_usd", "inferx:cost_usd_total",
                           "inferx:memory_live_bytes", "inferx:engine_steps_total", "inferx:step_token_budget",
                           "inferx:step_cost_fixed_seconds", "inferx:step_cost_per_token_seconds"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double v = 0;
        if (!metric(r.body, names[i], NULL, &v)) fail_msg("metric %s missing", names[i]);
    }
    double v = 0, q = 0, h = 0;
    assert_true(metric(r.body, "inferx:generation_tokens_total", NULL, &v) && v > 0);
    /* the step-cost model has seen steps; the budget is within the cap */
    assert_true(metric(r.body, "inferx:step_cost_per_token_seconds", NULL, &v) && v > 0 && v < 1);
    assert_true(metric(r.body, "inferx:step_cost_fixed_seconds", NULL, &v) && v >= 0 && v < 1);
    assert_true(metric(r.body, "inferx:step_token_budget", NULL, &v) && v >= 1 && v <= 512);
    /* Memory: the weights' resident bytes are within what they hold plus
     * the file's metadata (the tiny model's file is its size bound), the KV
     * pool's within the pool, and both within the process's. */
    double w_held = 0, w_res = 0, kv_pool = 0, kv_res = 0, rss = 0;
    assert_true(metric(r.body, "inferx:model_weight_bytes", NULL, &w_held) && w_held > 0);
    assert_true(metric(r.body, "inferx:model_weight_resident_bytes", NULL, &w_res) && w_res > 0);
    assert_true(metric(r.body, "inferx:kv_cache_pool_bytes", NULL, &kv_pool) && kv_pool > 0);
    assert_true(metric(r.body, "inferx:kv_cache_pool_resident_bytes", NULL, &kv_res) && kv_res > 0);
    assert_true(metric_value(r.body, "process_resident_memory_bytes", &rss) && rss > 0);
    assert_true(kv_res <= kv_pool + 4096);
    assert_true(w_res + kv_res <= rss);
    /* queueing time (submit to first scheduled): one sample per finished
     * engine request */
    double n_queue = 0, n_e2e = 0, q_sum = 0;
    assert_true(metric(r.body, "inferx:request_queue_time_seconds_count", NULL, &n_queue));
    assert_true(metric(r.body, "inferx:e2e_request_latency_seconds_count", NULL, &n_e2e));
    assert_true(metric(r.body, "inferx:request_queue_time_seconds_sum", NULL, &q_sum));
    assert_true(n_queue > 0 && n_queue == n_e2e && q_sum >= 0);
    assert_true(metric(r.body, "inferx:cost_usd_total", NULL, &v) && v > 0);
    assert_true(metric(r.body, "inferx:cost_per_hour_usd", NULL, &v) && v == 3.6);
    assert_true(metric(r.body, "inferx:kv_cache_usage_perc", NULL, &v) && v >= 0 && v <= 1);
    assert_true(metric(r.body, "inferx:prefix_cache_queries_total", NULL, &q) && q > 0);
    assert_true(metric(r.body, "inferx:prefix_cache_hits_total", NULL, &h) && h > 0 && h <= q); /* test_cached_tokens */
    assert_true(metric(r.body, "inferx:request_success_total", "finished_reason=\"length\"", &v) && v > 0);
    assert_true(metric(r.body, "inferx:request_success_total", "finished_reason=\"stop\"", &v));
    assert_true(metric(r.body, "inferx:num_preemptions_total", "mode=\"recompute\"", &v));
    assert_true(metric(r.body, "inferx:num_preemptions_total", "mode=\"swap\"", &v));
    assert_true(metric(r.body, "inferx:request_generation_tokens_count", NULL, &v) && v > 0);
    assert_true(metric(r.body, "inferx:request_params_max_tokens_count", NULL, &v) && v > 0);
    double steps = 0;
    assert_true(metric(r.body, "inferx:iteration_tokens_total_count", NULL, &v) && v > 0);
    assert_true(metric(r.body, "inferx:engine_steps_total", NULL, &steps) && v <= steps);
    assert_true(metric(r.body, "inferx:iteration_tokens_total_sum", NULL, &q) && q >= v);
    assert_true(metric(r.body, "inferx:request_prompt_tokens_bucket", "le=\"1\"", &v));
    assert_true(metric(r.body, "inferx:request_prefill_time_seconds_bucket", "le=\"7680\"", &v));
    const char *cc = strstr(r.body, "\ninferx:cache_config_info{model_name=\"tiny\",block_size=\"16\",cache_dtype=");
    assert_non_null(cc);
    assert_non_null(strstr(cc, "enable_prefix_caching=\"True\""));
    assert_true(strstr(cc, "} 1\n") < strchr(cc + 1, '\n') + 1);
    for (const char *const *pn = (const char *const[]){"process_cpu_seconds_total", "process_start_time_seconds",
                                                       "process_open_fds", "process_max_fds",
                                                       "process_resident_memory_bytes",
                                                       "process_virtual_memory_bytes", NULL};
         *pn; pn++) {
        if (!metric_value(r.body, *pn, &v)) fail_msg("metric %s missing", *pn);
        assert_true(v > 0);
    }
    assert_true(metric(r.body, "inferx:http_requests_total", "endpoint=\"/v1/completions\",status=\"200\"", &v));
    assert_true(metric(r.body, "inferx:http_requests_total", "endpoint=\"/v1/completions\",status=\"400\"", &v));
    assert_true(metric(r.body, "inferx:time_to_first_token_seconds_bucket", "le=\"+Inf\"", &v) && v > 0);
    assert_non_null(strstr(r.body, "# TYPE inferx:time_to_first_token_seconds histogram\n"));
    assert_non_null(strstr(r.body, "# TYPE inferx:num_requests_running gauge\n"));
    assert_non_null(strstr(r.body, "# TYPE inferx:prompt_tokens_total counter\n"));
    assert_null(strstr(r.body, "inferx_")); /* the old names are gone */
    resp_free(&r);
}

/* A model name that needs escaping in a label value stays valid text. */
static void test_metrics_label_escaping(void **state) {
    (void)state;
    ix_server *s;
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.model_name = "we\"ird\\name\nv2";
    assert_int_equal(ix_server_create(&s, g_engine, &sp, NULL), IX_OK);
    resp r;
    assert_int_equal(http(ix_server_port(s), "GET", "/metrics", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "inferx:num_requests_running{model_name=\"we\\\"ird\\\\name\\nv2\"} "));
    check_exposition(r.body, sp.model_name);
    resp_free(&r);
    ix_server_destroy(s);
    /* A name that is not UTF-8 is refused. */
    sp.model_name = "bad\xff";
    ix_errbuf err = {{0}};
    assert_int_equal(ix_server_create(&s, g_engine, &sp, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "UTF-8"));
}

/* A server created before its engine: the port is open at once, /health
 * answers, /ready and the API say 503 with the load progress; attached, it
 * serves. --host takes a name. */
static void test_loading_then_attach(void **state) {
    (void)state;
    ix_server *s;
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.host = "localhost";
    sp.model_name = "tiny";
    ix_errbuf err = {{0}};
    assert_int_equal(ix_server_create(&s, NULL, &sp, &err), IX_OK);
    uint16_t port = ix_server_port(s);
    resp r;
    assert_int_equal(http(port, "GET", "/health", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    ix_server_set_load_progress(s, 0.25);
    assert_int_equal(http(port, "GET", "/ready", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "\"loading\""));
    assert_non_null(strstr(r.body, "\"progress_percent\":25"));
    resp_free(&r);
    assert_int_equal(http(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"a\"}", &r), 0);
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "loading (25%)"));
    resp_free(&r);
    assert_int_equal(http(port, "GET", "/api/tags", NULL, NULL, &r), 0); /* Ollama's error shape */
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "{\"error\":\"the model is loading"));
    resp_free(&r);
    assert_int_equal(ix_server_attach(s, g_engine, &err), IX_OK);
    assert_int_equal(http(port, "GET", "/ready", NULL, NULL, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http(port, "POST", "/v1/completions", NULL, "{\"prompt\":\"Emma\",\"max_tokens\":3}", &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"completion_tokens\":3"));
    resp_free(&r);
    assert_int_equal(ix_server_attach(s, g_engine, &err), IX_ERR_STATE);
    ix_server_destroy(s);
    sp.host = "no-such-host.invalid";
    assert_int_equal(ix_server_create(&s, g_engine, &sp, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "no-such-host.invalid"));
}

static double metrics_get(uint16_t port, const char *name, const char *extra) {
    resp r;
    assert_int_equal(http(port, "GET", "/metrics", NULL, NULL, &r), 0);
    double v = 0;
    if (!metric(r.body, name, extra, &v)) fail_msg("metric %s{%s} missing", name, extra ? extra : "");
    resp_free(&r);
    return v;
}

static void test_disconnect_cancels(void **state) {
    (void)state;
    wait_idle();
    double cancelled0 = metrics_get(g_port, "inferx:requests_cancelled_total", "cause=\"disconnect\"");
    double aborted0 = metrics_get(g_port, "inferx:request_success_total", "finished_reason=\"abort\"");
    double cost0 = metrics_get(g_port, "inferx:cost_usd_total", NULL);
    size_t mark = log_mark();
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
    char id[64] = "";
    const char *idp = strstr(buf, "\"id\":\"");
    assert_non_null(idp);
    sscanf(idp + 6, "%63[^\"]", id);
    ix_engine_stats st;
    ix_engine_get_stats(g_engine, &st);
    uint64_t gen_before = st.n_generated_tokens;
    close(fd);
    wait_idle(); /* every KV block freed */
    ix_engine_get_stats(g_engine, &st);
    assert_true(st.n_generated_tokens - gen_before < 470); /* it did not run to the end */
    assert_true(metrics_get(g_port, "inferx:requests_cancelled_total", "cause=\"disconnect\"") >= cancelled0 + 1);
    assert_true(metrics_get(g_port, "inferx:request_success_total", "finished_reason=\"abort\"") >= aborted0 + 1);
    assert_true(metrics_get(g_port, "inferx:kv_cache_blocks_used", NULL) == 0);
    /* The machine time it took is charged all the same: the watcher closes
     * the job once the engine has finished it. */
    json_t *line = log_find(mark, "id", id);
    if (!line) fail_msg("no access log line for the stream %s", id);
    assert_int_equal(json_integer_value(json_object_get(line, "status")), 200);
    assert_true(json_is_true(json_object_get(line, "stream")));
    assert_true(json_is_true(json_object_get(line, "client_closed")));
    assert_string_equal(json_string_value(json_object_get(line, "finish_reason")), "abort");
    assert_true(json_integer_value(json_object_get(line, "completion_tokens")) >= 1);
    double cost = json_number_value(json_object_get(line, "cost_usd"));
    assert_true(cost > 0);
    double cost1 = metrics_get(g_port, "inferx:cost_usd_total", NULL);
    assert_true(cost1 >= cost0 + cost * 0.999);
    json_decref(line);

    /* A non-streaming request whose client hangs up is cancelled too ...
     * (sixteen choices: ~0.9 s of decoding here, many times the two watcher
     * periods the hang-up takes to be seen; one choice ran its 480 tokens in
     * ~0.2 s, which a busy CI host's watcher once did not beat) */
    mark = log_mark();
    double cancelled1 = metrics_get(g_port, "inferx:requests_cancelled_total", "cause=\"disconnect\"");
    body = "{\"prompt\":\"Mr. Darcy\",\"max_tokens\":480,\"temperature\":0,\"ignore_eos\":true,\"n\":16}";
    fd = send_request(g_port, "POST", "/v1/completions", NULL, body, strlen(body));
    for (int i = 0; i < 500; i++) {
        ix_engine_get_stats(g_engine, &st);
        if (st.n_running) break;
        usleep(2000);
    }
    close(fd);
    wait_idle();
    /* ... by the watcher, since its connection is suspended meanwhile. */
    assert_true(metrics_get(g_port, "inferx:requests_cancelled_total", "cause=\"disconnect\"") >= cancelled1 + 1);
    line = log_find(mark, "status", "499");
    if (!line) fail_msg("no access log line with status 499");
    assert_true(json_is_false(json_object_get(line, "stream")));
    assert_true(json_is_true(json_object_get(line, "client_closed")));
    assert_string_equal(json_string_value(json_object_get(line, "finish_reason")), "abort");
    assert_true(json_number_value(json_object_get(line, "cost_usd")) > 0);
    assert_true(metrics_get(g_port, "inferx:cost_usd_total", NULL) > cost1);
    json_decref(line);
}

static const char *jstr(json_t *o, const char *key) {
    const char *v = json_string_value(json_object_get(o, key));
    if (!v) fail_msg("no string '%s'", key);
    return v;
}

static json_int_t jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) fail_msg("no integer '%s'", key);
    return json_integer_value(v);
}

static void test_access_log(void **state) {
    (void)state;
    wait_idle();
    size_t mark = log_mark();
    const char *secret = "Zanzibar quokka lemonade";
    json_t *j = post_json("/v1/completions",
                          "{\"prompt\":\"Zanzibar quokka lemonade\",\"max_tokens\":5,\"temperature\":0,"
                          "\"ignore_eos\":true}",
                          200);
    char id[64], out_text[256];
    snprintf(id, sizeof id, "%s", jstr(j, "id"));
    snprintf(out_text, sizeof out_text, "%s", jstr(json_array_get(json_object_get(j, "choices"), 0), "text"));
    json_t *u = json_object_get(j, "usage");
    json_t *line = log_find(mark, "id", id);
    if (!line) fail_msg("no access log line for %s", id);
    const char *ts = jstr(line, "ts");
    assert_int_equal(strlen(ts), 24); /* 2024-05-01T12:34:56.789Z */
    assert_int_equal(ts[23], 'Z');
    assert_string_equal(jstr(line, "method"), "POST");
    assert_string_equal(jstr(line, "path"), "/v1/completions");
    assert_int_equal(jint(line, "status"), 200);
    assert_string_equal(jstr(line, "model"), "tiny");
    assert_string_equal(jstr(line, "remote"), "127.0.0.1");
    assert_true(json_is_false(json_object_get(line, "stream")));
    assert_true(json_is_false(json_object_get(line, "client_closed")));
    assert_int_equal(jint(line, "n"), 1);
    assert_int_equal(jint(line, "prompt_tokens"), jint(u, "prompt_tokens"));
    assert_int_equal(jint(line, "cached_tokens"),
                     jint(json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    assert_int_equal(jint(line, "completion_tokens"), 5);
    assert_string_equal(jstr(line, "finish_reason"), "length");
    double ttft = json_number_value(json_object_get(line, "ttft_ms"));
    double dur = json_number_value(json_object_get(line, "duration_ms"));
    assert_true(json_is_number(json_object_get(line, "ttft_ms")) && ttft > 0);
    assert_true(json_is_number(json_object_get(line, "queue_ms")));
    assert_true(dur >= ttft);
    assert_true(fabs(json_number_value(json_object_get(line, "cost_usd")) -
                     json_number_value(json_object_get(u, "cost_usd"))) < 1e-12);
    assert_null(json_object_get(line, "key_id")); /* no keys on this server */
    json_decref(line);
    json_decref(j);

    /* A stream, an error, an unknown route, a probe. */
    resp r;
    assert_int_equal(http(g_port, "POST", "/v1/chat/completions", NULL,
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Zanzibar quokka lemonade\"}],"
                          "\"max_tokens\":3,\"stream\":true}",
                          &r),
                     0);
    assert_int_equal(r.status, 200);
    const char *idp = strstr(r.body, "\"id\":\"");
    assert_non_null(idp);
    sscanf(idp + 6, "%63[^\"]", id);
    resp_free(&r);
    line = log_find(mark, "id", id);
    if (!line) fail_msg("no access log line for the stream %s", id);
    assert_string_equal(jstr(line, "path"), "/v1/chat/completions");
    assert_true(json_is_true(json_object_get(line, "stream")));
    assert_true(json_is_false(json_object_get(line, "client_closed")));
    assert_int_equal(jint(line, "status"), 200);
    json_decref(line);
    ERR("{\"prompt\":\"Zanzibar quokka lemonade\",\"temperature\":7}", 400, "temperature", NULL);
    expect_error(g_port, "GET", "/v2/zanzibar", NULL, NULL, 0, 404, NULL, NULL);
    assert_int_equal(http(g_port, "GET", "/health", NULL, NULL, &r), 0);
    resp_free(&r);
    /* The auth server: who asked (the key's position, never the key). */
    const char *body = "{\"prompt\":\"x\",\"max_tokens\":1}";
    expect_error(g_auth_port, "POST", "/v1/completions", "Authorization: Bearer wrong\r\n", body, strlen(body), 401,
                 NULL, NULL);
    assert_int_equal(http(g_auth_port, "POST", "/v1/completions", "Authorization: Bearer " KEY2 "\r\n", body, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);

    json_t *lines = log_since(mark), *o;
    size_t i;
    bool saw_400 = false, saw_404 = false, saw_health = false, saw_401 = false, saw_key2 = false;
    json_array_foreach(lines, i, o) {
        assert_true(json_is_string(json_object_get(o, "ts")));
        assert_true(json_is_string(json_object_get(o, "method")));
        assert_true(json_is_string(json_object_get(o, "path")));
        assert_true(json_is_integer(json_object_get(o, "status")));
        assert_true(json_is_number(json_object_get(o, "duration_ms")));
        int status = (int)jint(o, "status");
        const char *path = jstr(o, "path");
        if (status == 400 && !strcmp(path, "/v1/completions")) {
            saw_400 = true;
            assert_string_equal(jstr(o, "error"), "invalid_request_error");
        }
        if (status == 404) {
            saw_404 = !strcmp(path, "/v2/zanzibar") && !strcmp(jstr(o, "error"), "not_found");
        }
        saw_health |= status == 200 && !strcmp(path, "/health") && !strcmp(jstr(o, "method"), "GET");
        if (status == 401) {
            saw_401 = !strcmp(jstr(o, "error"), "invalid_api_key") && !json_object_get(o, "key_id");
        }
        if (json_object_get(o, "key_id")) saw_key2 = jint(o, "key_id") == 2 && status == 200;
    }
    assert_true(saw_400 && saw_404 && saw_health && saw_401 && saw_key2);
    json_decref(lines);
    /* Never the text. */
    pthread_mutex_lock(&g_log_mu);
    assert_null(strstr(g_log + mark, secret));
    assert_null(strstr(g_log + mark, "Zanzibar"));
    assert_null(strstr(g_log + mark, "quokka"));
    if (strlen(out_text) >= 12) assert_null(strstr(g_log + mark, out_text));
    assert_null(strstr(g_log + mark, KEY2));
    pthread_mutex_unlock(&g_log_mu);
}

static json_t *post_key(const char *key, const char *body, int want) {
    char hdr[128];
    snprintf(hdr, sizeof hdr, "Authorization: Bearer %s\r\n", key);
    resp r;
    assert_int_equal(http(g_auth_port, "POST", "/v1/completions", hdr, body, &r), 0);
    if (r.status != want) fail_msg("status %d, want %d: %s", r.status, want, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    resp_free(&r);
    return j;
}

static int64_t cached_of(json_t *j) {
    return json_integer_value(
        json_object_get(json_object_get(json_object_get(j, "usage"), "prompt_tokens_details"), "cached_tokens"));
}

/* Each API key is a tenant of the prefix cache: the same prompt sent with
 * another key finds nothing cached, sent again with the same key it does. */
static void test_api_key_tenants(void **state) {
    (void)state;
    const char *body = "{\"prompt\":\"The tenants of Netherfield Park had been there a twelvemonth when the news "
                       "came that the house was let again, and that the new tenant was a gentleman of large "
                       "fortune from the north of England\",\"max_tokens\":1,\"temperature\":0}";
    json_t *a1 = post_key(KEY, body, 200);
    json_t *b1 = post_key(KEY2, body, 200);
    json_t *a2 = post_key(KEY, body, 200);
    json_t *b2 = post_key(KEY2, body, 200);
    assert_true(json_integer_value(json_object_get(json_object_get(a1, "usage"), "prompt_tokens")) >= 32);
    assert_int_equal(cached_of(a1), 0);
    assert_int_equal(cached_of(b1), 0); /* A's blocks are not B's */
    assert_true(cached_of(a2) >= 16);
    assert_true(cached_of(b2) >= 16);
    /* cache_salt splits a key's namespace further. */
    const char *salted = "{\"prompt\":\"The tenants of Netherfield Park had been there a twelvemonth when the news "
                         "came that the house was let again, and that the new tenant was a gentleman of large "
                         "fortune from the north of England\",\"max_tokens\":1,\"temperature\":0,"
                         "\"cache_salt\":\"s1\"}";
    json_t *a3 = post_key(KEY, salted, 200);
    json_t *a4 = post_key(KEY, salted, 200);
    json_t *b3 = post_key(KEY2, salted, 200);
    assert_int_equal(cached_of(a3), 0);
    assert_true(cached_of(a4) >= 16);
    assert_int_equal(cached_of(b3), 0);
    json_decref(a1);
    json_decref(b1);
    json_decref(a2);
    json_decref(b2);
    json_decref(a3);
    json_decref(a4);
    json_decref(b3);
}

/* ---- chat templates ---------------------------------------------------------- */

/* tokenizer.chat_template strings as the model files carry them. */
static const char k_tmpl_mistral_v1[] = /* Mistral-7B-Instruct-v0.1 / v0.2, Mixtral-8x7B-Instruct */
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";
static const char k_tmpl_mistral_v3[] = /* Mistral-7B-Instruct-v0.3 */
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate "
    "user/assistant/user/assistant/...') }}\n    {%- endif %}\n    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}\n"
    "        {%- else %}\n            {{- '[INST] ' + message['content'] + '[/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n        {{- raise_exception('Only user and assistant roles are supported, with the "
    "exception of an initial optional system message!') }}\n    {%- endif %}\n{%- endfor %}\n";
static const char k_tmpl_gemma[] = /* gemma-2b-it, gemma-2-9b-it */
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";
static const char k_tmpl_llama2[] = /* Llama-2-7b-chat */
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
    "alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
static const char k_tmpl_chatml[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
static const char k_tmpl_llama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
static const char k_tmpl_phi3[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\\n' + "
    "message['content'] + '<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}{% elif (message['role'] == 'assistant') %}"
    "{{message['content'] + '<|end|>' + '\\n'}}{% endif %}{% endfor %}";
static const char k_tmpl_zephyr[] =
    "{% for message in messages %}\\n{% if message['role'] == 'user' %}\\n{{ '<|user|>\\n' + message['content'] + "
    "eos_token }}\\n{% elif message['role'] == 'system' %}\\n{{ '<|system|>\\n' + message['content'] + eos_token }}"
    "\\n{% elif message['role'] == 'assistant' %}\\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\\n"
    "{% endif %}\\n{% if loop.last and add_generation_prompt %}\\n{{ '<|assistant|>' }}\\n{% endif %}\\n{% endfor %}";

#define CONVO                                                                                              \
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\" Hi\\n\"},"     \
    "{\"role\":\"assistant\",\"content\":\"Hello!\"},{\"role\":\"user\",\"content\":\"How are you?\"}]"

static void check_render(const char *tmpl, ixs_chat_format want_format, const char *messages, const char *want) {
    ixs_chat_format f = ix__chat_detect(tmpl, strlen(tmpl));
    if (f != want_format)
        fail_msg("detected %s, want %s", ix__chat_format_name(f), ix__chat_format_name(want_format));
    json_t *m = json_loads(messages, 0, NULL);
    assert_non_null(m);
    ixs_err e;
    assert_int_equal(ix__chat_validate(m, &e), 0);
    ixs_chat c;
    ix__chat_init_format(&c, f);
    ix_buf b = {0};
    assert_int_equal(ix__chat_render_text(&c, m, NULL, NULL, &b, NULL), IX_OK);
    assert_non_null(b.data);
    if (strcmp(b.data, want)) fail_msg("%s rendered\n[%s]\nwant\n[%s]", ix__chat_format_name(f), b.data, want);
    /* Tokens: as the text with special tokens parsed (this content spells
     * none), which in the bundled vocabulary makes "<s>" and "</s>" control
     * tokens and the rest text. */
    ix_token_vec ids = {0}, ref = {0};
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    assert_int_equal(ix__chat_render(&c, t, m, NULL, &ids, NULL), IX_OK);
    if (ix_tokenizer_add_bos(t)) ix_token_vec_push(&ref, ix_tokenizer_bos(t));
    assert_int_equal(ix_tokenizer_encode(t, b.data, b.len, IX_TOK_PARSE_SPECIAL, &ref, NULL), IX_OK);
    assert_int_equal(ids.n, ref.n);
    assert_memory_equal(ids.ids, ref.ids, ids.n * sizeof *ids.ids);
    ix_token_vec_free(&ids);
    ix_token_vec_free(&ref);
    ix_buf_free(&b);
    json_decref(m);
}

static void test_chat_templates(void **state) {
    (void)state;
    /* Mistral: no system turn, the system prompt goes in front of the first
     * user message; v1 and v3 differ in the spaces around [/INST]. */
    check_render(k_tmpl_mistral_v1, IXS_CHAT_MISTRAL_V1, CONVO,
                 "[INST] Be brief.\n\n Hi\n [/INST]Hello!</s>[INST] How are you? [/INST]");
    check_render(k_tmpl_mistral_v3, IXS_CHAT_MISTRAL_V3, CONVO,
                 "[INST] Be brief.\n\n Hi\n[/INST] Hello!</s>[INST] How are you?[/INST]");
    check_render(k_tmpl_mistral_v3, IXS_CHAT_MISTRAL_V3, "[{\"role\":\"user\",\"content\":\"Hi\"}]",
                 "[INST] Hi[/INST]");
    /* Gemma: "model" answers, content trimmed, system folded into the user turn. */
    check_render(k_tmpl_gemma, IXS_CHAT_GEMMA, CONVO,
                 "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                 "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n");
    check_render(k_tmpl_gemma, IXS_CHAT_GEMMA, "[{\"role\":\"user\",\"content\":\"Hi\"}]",
                 "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    /* A system message with no user message after it is a user turn. */
    check_render(k_tmpl_gemma, IXS_CHAT_GEMMA,
                 "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"developer\",\"content\":\"Rules.\"}]",
                 "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>user\nRules.<end_of_turn>\n"
                 "<start_of_turn>model\n");
    /* Llama-2 has <<SYS>>; the same [INST] markers otherwise. */
    check_render(k_tmpl_llama2, IXS_CHAT_LLAMA2, CONVO,
                 "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
    check_render(k_tmpl_chatml, IXS_CHAT_CHATML, CONVO,
                 "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi\n<|im_end|>\n"
                 "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
                 "<|im_start|>assistant\n");
    check_render(k_tmpl_llama3, IXS_CHAT_LLAMA3, CONVO,
                 "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n");
    check_render(k_tmpl_phi3, IXS_CHAT_PHI3, "[{\"role\":\"user\",\"content\":\"Hi\"}]",
                 "<|user|>\nHi<|end|>\n<|assistant|>\n");
    check_render(k_tmpl_zephyr, IXS_CHAT_ZEPHYR, "[{\"role\":\"user\",\"content\":\"Hi\"}]",
                 "<|user|>\nHi</s>\n<|assistant|>\n");
    check_render("", IXS_CHAT_PLAIN, CONVO,
                 "System: Be brief.\nUser:  Hi\n\nAssistant: Hello!\nUser: How are you?\nAssistant:");
    check_render("{{ messages }}", IXS_CHAT_PLAIN, "[{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]",
                 "Tool: 42\nAssistant:");
}

/* With a vocabulary that has the markers as control tokens (phi-3's), each
 * marker is that one token and the text between them is encoded as one
 * piece, as Hugging Face does; message content that spells a marker stays
 * text. */
static void test_chat_tokens_phi3(void **state) {
    (void)state;
    const char *path = IX_SHARED_DIR "/vocab/ggml-vocab-phi-3.gguf";
    ix_gguf *g = NULL;
    if (ix_gguf_open(&g, path, NULL) != IX_OK) {
        printf("skip: %s not found\n", path);
        skip();
    }
    ix_tokenizer *t = NULL;
    assert_int_equal(ix_tokenizer_create(&t, g, NULL), IX_OK);
    ix_str tmpl;
    assert_int_equal(ix_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL), IX_OK);
    assert_int_equal(ix__chat_detect(tmpl.ptr, tmpl.len), IXS_CHAT_PHI3);
    ixs_chat phi3;
    ix__chat_init_format(&phi3, IXS_CHAT_PHI3);
    ix_token user = ix_tokenizer_find(t, "<|user|>", 8), end = ix_tokenizer_find(t, "<|end|>", 7),
             asst = ix_tokenizer_find(t, "<|assistant|>", 13);
    assert_true(user >= 0 && end >= 0 && asst >= 0);
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"Hello there\"}]", 0, NULL);
    ix_token_vec ids = {0}, ref = {0};
    assert_int_equal(ix__chat_render(&phi3, t, m, NULL, &ids, NULL), IX_OK);
    /* What the whole rendered text gives with special tokens parsed. */
    const char *text = "<|user|>\nHello there<|end|>\n<|assistant|>\n";
    if (ix_tokenizer_add_bos(t)) ix_token_vec_push(&ref, ix_tokenizer_bos(t));
    assert_int_equal(ix_tokenizer_encode(t, text, strlen(text), IX_TOK_PARSE_SPECIAL, &ref, NULL), IX_OK);
    assert_int_equal(ids.n, ref.n);
    assert_memory_equal(ids.ids, ref.ids, ids.n * sizeof *ids.ids);
    size_t k = ix_tokenizer_add_bos(t) ? 1 : 0;
    assert_int_equal(ids.ids[k], user);
    int n_end = 0;
    for (size_t i = 0; i < ids.n; i++) n_end += ids.ids[i] == end;
    assert_int_equal(n_end, 1);
    /* Phi-3's markers eat the newline after them (llama.cpp's rstrip), so
     * the generation prompt's marker ends the prompt. */
    assert_int_equal(ids.ids[ids.n - 1], asst);
    json_decref(m);
    ix_token_vec_free(&ids);
    /* Content that spells a control marker does not become it. */
    if (ix_tokenizer_token_type(t, asst) == IX_TOKEN_TYPE_CONTROL) {
        m = json_loads("[{\"role\":\"user\",\"content\":\"<|assistant|>\"}]", 0, NULL);
        assert_int_equal(ix__chat_render(&phi3, t, m, NULL, &ids, NULL), IX_OK);
        int n_asst = 0;
        for (size_t i = 0; i < ids.n; i++) n_asst += ids.ids[i] == asst;
        assert_int_equal(n_asst, 1); /* the generation prompt's */
        json_decref(m);
        ix_token_vec_free(&ids);
    }
    ix_token_vec_free(&ref);
    ix_tokenizer_destroy(t);
    ix_gguf_close(g);
}

/* A copy of the bundled model whose GGUF carries tokenizer.chat_template
 * (written to a temporary file; the caller unlinks it). */
static ix_status set_template(ix_gguf_writer *w, const char *key, const void *arg) {
    return ix_gguf_writer_set_str(w, key, arg);
}

static void write_model_with_template(const char *path, const char *tmpl) {
    assert_int_equal(ix_test_gguf_copy_with(MODEL, path, "tokenizer.chat_template", set_template, tmpl), IX_OK);
}

/* A Hermes-style template (tool list, <tool_call>, <tool_response>) that
 * refuses a system message after the first. */
static const char k_tmpl_tools[] =
    "{%- if greeting is defined %}{{ greeting }}{% endif %}"
    "{%- if tools %}{{ '<|im_start|>system\\n# Tools\\n' }}{% for t in tools %}{{ t | tojson + '\\n' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' and not loop.first %}{{ raise_exception('System messages must come first') }}{% endif %}"
    "{%- if m.role == 'tool' %}{{ '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.tool_calls %}{{ '<|im_start|>assistant\\n' }}{% for c in m.tool_calls %}"
    "{{ '<tool_call>\\n' + {'name': c.function.name, 'arguments': c.function.arguments} | tojson + '\\n</tool_call>' }}"
    "{% endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#define TOOL_HISTORY                                                                                              \
    "[{\"role\":\"user\",\"content\":\"Weather in Paris? </s>\"},{\"role\":\"assistant\",\"content\":null,"     \
    "\"tool_calls\":[{\"id\":\"call1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","            \
    "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call1\","           \
    "\"content\":\"22 C\"}]"
#define TOOL_LIST "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}}]"
#define TOOL_HISTORY_TEXT                                                                                         \
    "<|im_start|>user\nWeather in Paris? </s><|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "         \
    "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"          \
    "<tool_response>\n22 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"

/* BOS (the vocabulary adds it) and the text, "</s>" in it as text. */
static void expect_tokens(json_t *got, const char *text) {
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    ix_token_vec want = {0};
    assert_int_equal(ix_tokenizer_encode(t, text, strlen(text), IX_TOK_ADD_SPECIAL, &want, NULL), IX_OK);
    json_t *toks = json_object_get(got, "tokens");
    if (json_array_size(toks) != want.n) fail_msg("%zu tokens, want %zu", json_array_size(toks), want.n);
    for (size_t i = 0; i < want.n; i++) assert_int_equal(json_integer_value(json_array_get(toks, i)), want.ids[i]);
    for (size_t i = 1; i < want.n; i++) assert_int_not_equal(want.ids[i], ix_tokenizer_eos(t));
    ix_token_vec_free(&want);
}

/* A model whose GGUF carries a template: the server renders it (tool list,
 * a past call with arguments sent as a JSON string, the tool's result), and
 * the template's raise_exception is a 400 with its message. */
static void test_gguf_chat_template(void **state) {
    (void)state;
    char path[] = "/tmp/ix_test_chat_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_model_with_template(path, k_tmpl_tools);
    ix_model *m = NULL;
    ix_engine *e = NULL;
    ix_server *srv = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_load(&m, path, &err), IX_OK);
    ix_engine_params ep = ix_engine_default_params();
    ep.n_threads = 2;
    assert_int_equal(ix_engine_create(&e, m, &ep, &err), IX_OK);
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    assert_int_equal(ix_server_create(&srv, e, &sp, &err), IX_OK);
    uint16_t saved = g_port;
    g_port = ix_server_port(srv);

    json_t *j = post_json("/tokenize", "{\"messages\":" TOOL_HISTORY ",\"tools\":" TOOL_LIST "}", 200);
    expect_tokens(j, "<|im_start|>system\n# Tools\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                     "\"parameters\": {\"type\": \"object\"}}}\n<|im_end|>\n" TOOL_HISTORY_TEXT);
    json_decref(j);
    j = post_json("/tokenize", "{\"messages\":" TOOL_HISTORY "}", 200);
    expect_tokens(j, TOOL_HISTORY_TEXT);
    json_int_t n_prompt = json_integer_value(json_object_get(j, "count"));
    json_decref(j);
    j = post_json("/v1/chat/completions",
                  "{\"messages\":" TOOL_HISTORY ",\"max_tokens\":3,\"temperature\":0}", 200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), n_prompt);
    json_decref(j);
    /* chat_template_kwargs: more template variables. */
    j = post_json("/tokenize", "{\"messages\":" TOOL_HISTORY ",\"chat_template_kwargs\":{\"greeting\":\"Hello. \"}}",
                  200);
    expect_tokens(j, "Hello. " TOOL_HISTORY_TEXT);
    json_int_t n_greeted = json_integer_value(json_object_get(j, "count"));
    json_decref(j);
    j = post_json("/v1/chat/completions",
                  "{\"messages\":" TOOL_HISTORY ",\"max_tokens\":1,\"chat_template_kwargs\":{\"greeting\":\"Hello. \"}}",
                  200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), n_greeted);
    json_decref(j);
    const char *bad_kw = "{\"messages\":" TOOL_HISTORY ",\"chat_template_kwargs\":[1]}";
    expect_error(g_port, "POST", "/v1/chat/completions", NULL, bad_kw, strlen(bad_kw), 400, "chat_template_kwargs",
                 "must be an object");
    const char *refused = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]}";
    expect_error(g_port, "POST", "/v1/chat/completions", NULL, refused, strlen(refused), 400, "messages",
                 "System messages must come first");
    const char *bad_tools = "{\"messages\":" TOOL_HISTORY ",\"tools\":{}}";
    expect_error(g_port, "POST", "/tokenize", NULL, bad_tools, strlen(bad_tools), 400, "tools",
                 "'tools' must be an array");

    g_port = saved;
    ix_server_destroy(srv);
    /* --chat-template NAME beats the file's template. */
    sp.chat_template = "llama3";
    assert_int_equal(ix_server_create(&srv, e, &sp, &err), IX_OK);
    g_port = ix_server_port(srv);
    j = post_json("/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", 200);
    expect_tokens(j, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
                     "<|end_header_id|>\n\n");
    json_decref(j);
    g_port = saved;
    ix_server_destroy(srv);
    /* Jinja source that does not parse is refused at start. */
    sp.chat_template = "{% if %}";
    assert_int_equal(ix_server_create(&srv, e, &sp, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "--chat-template"));
    ix_engine_destroy(e);
    ix_model_destroy(m);
    unlink(path);
}

/* ---- inferx serve ------------------------------------------------------------- */

/* Starts argv (NULL-terminated) with its stderr on a pipe; returns its pid
 * and the pipe's read end. */
static pid_t spawn_piped(char *const argv[], int *err_fd) {
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    posix_spawn_file_actions_addclose(&fa, pfd[0]);
    pid_t pid;
    extern char **environ;
    assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    *err_fd = pfd[0];
    return pid;
}

/* Starts `inferx serve` with args (NULL-terminated), stderr to a pipe; returns
 * its pid and the port it printed, or fails. */
static pid_t spawn_serve(char *const argv[], int *err_fd, uint16_t *port) {
    pid_t pid = spawn_piped(argv, err_fd);
    *port = 0;
    char buf[8192];
    size_t len = 0;
    struct pollfd pf = {*err_fd, POLLIN, 0};
    while (!*port && len < sizeof buf - 1 && poll(&pf, 1, 30000) > 0) {
        ssize_t k = read(*err_fd, buf + len, sizeof buf - 1 - len);
        if (k <= 0) break;
        len += (size_t)k;
        buf[len] = '\0';
        const char *p = strstr(buf, " on http://127.0.0.1:");
        if (p) *port = (uint16_t)atoi(p + 21);
    }
    if (!*port) {
        buf[len] = '\0';
        fail_msg("inferx serve did not start: %s", buf);
    }
    return pid;
}

/* Runs `inferx serve` with args to its exit; returns the status, its stderr in out. */
static int run_serve(char *const argv[], char *out, size_t size) {
    int fd;
    pid_t pid = spawn_piped(argv, &fd);
    size_t len = 0;
    ssize_t k;
    while (len < size - 1 && (k = read(fd, out + len, size - 1 - len)) > 0) len += (size_t)k;
    out[len] = '\0';
    close(fd);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#ifdef IX_INFERX_BIN
#define INFERX_BIN IX_INFERX_BIN
#else
#define INFERX_BIN "" /* not built */
#endif

/* Skips the test unless the inferx binary is built and present. */
static void need_inferx(void) {
    if (!*INFERX_BIN) {
        printf("skip: the inferx binary is not built\n");
        skip();
    }
    if (access(INFERX_BIN, X_OK)) {
        printf("skip: %s not found\n", INFERX_BIN);
        skip();
    }
}

/* SIGTERM to a server spawn_serve started: it must exit 0. */
static void stop_serve(pid_t pid, int err_fd) {
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    close(err_fd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_cli_key_file_and_access_log(void **state) {
    (void)state;
    need_inferx();
    char dir[] = "/tmp/ix_serve_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char keys[64], log_path[64], bad[64];
    snprintf(keys, sizeof keys, "%s/keys", dir);
    snprintf(log_path, sizeof log_path, "%s/access.log", dir);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    FILE *f = fopen(keys, "w");
    fputs("# the service's keys\nsk-alpha\n\n  sk-beta  \r\n", f);
    fclose(f);
    char *argv[] = {INFERX_BIN, "serve", "-m", MODEL, "--port", "0", "-t", "1", "--served-model-name", "cli",
                    "--api-key-file", keys, "--access-log", log_path, NULL};
    int err_fd;
    uint16_t port;
    pid_t pid = spawn_serve(argv, &err_fd, &port);
    const char *body = "{\"prompt\":\"Emma\",\"max_tokens\":2}";
    const char *hdrs[] = {"Authorization: Bearer sk-alpha\r\n", "Authorization: Bearer sk-beta\r\n",
                          "Authorization: Bearer sk-gamma\r\n", NULL};
    const int want[] = {200, 200, 401, 401};
    for (int i = 0; i < 4; i++) {
        resp r;
        assert_int_equal(http(port, "POST", "/v1/completions", hdrs[i], body, &r), 0);
        if (r.status != want[i]) fail_msg("request %d: status %d, want %d: %s", i, r.status, want[i], r.body);
        resp_free(&r);
    }
    stop_serve(pid, err_fd);
    /* One JSON line per request, in order. */
    f = fopen(log_path, "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (!o) fail_msg("not JSON: %s", line);
        assert_true(n < 4);
        assert_int_equal(json_integer_value(json_object_get(o, "status")), want[n]);
        if (n < 2) {
            assert_int_equal(json_integer_value(json_object_get(o, "key_id")), n + 1);
            assert_string_equal(json_string_value(json_object_get(o, "model")), "cli");
        }
        assert_null(strstr(line, "Emma"));
        assert_null(strstr(line, "sk-"));
        json_decref(o);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 4);
    /* Bad key files are refused with a reason. */
    char out[4096];
    char *argv_bad[] = {INFERX_BIN, "serve", "-m", MODEL, "--port", "0", "--api-key-file", bad, NULL};
    f = fopen(bad, "w");
    fputs("sk-ok\nsk with space\n", f);
    fclose(f);
    assert_int_equal(run_serve(argv_bad, out, sizeof out), 1);
    assert_non_null(strstr(out, ":2: an API key must be printable ASCII"));
    f = fopen(bad, "w");
    fputs("# nothing\n\n", f);
    fclose(f);
    assert_int_equal(run_serve(argv_bad, out, sizeof out), 1);
    assert_non_null(strstr(out, "no API key in"));
    unlink(keys);
    unlink(log_path);
    unlink(bad);
    rmdir(dir);
}

/* The scheduler's flags: bad values are refused with the range, good ones
 * reach the engine (the step budget stays within the cap). */
static void test_cli_sched_flags(void **state) {
    (void)state;
    need_inferx();
    static const struct {
        const char *flag, *value, *want;
    } bad[] = {
        {"--target-step-ms", "-1", "--target-step-ms expects a number in [0, 3600000], got '-1'"},
        {"--target-step-ms", "fast", "--target-step-ms expects a number in [0, 3600000], got 'fast'"},
        {"--target-step-ms", "nan", "--target-step-ms expects a number"},
        {"--max-num-batched-tokens", "0", "--max-num-batched-tokens expects an integer in [1, 65536], got '0'"},
        {"--max-num-batched-tokens", "100000", "expects an integer in [1, 65536]"},
        {"--max-num-seqs", "1.5", "--max-num-seqs expects an integer in [1, 4096]"},
        {"--policy", "lifo", "--policy expects fcfs, priority or deadline"},
        {"--spec", "eagle", "--spec expects none, ngram, draft or medusa"},
        {"--spec-k", "0", "--spec-k expects an integer in [1, 8], got '0'"},
        {"--spec-adaptive", "maybe", "--spec-adaptive expects on or off"},
    };
    char out[4096];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {INFERX_BIN, "serve", "-m", MODEL, "--port", "0", (char *)bad[i].flag,
                        (char *)bad[i].value, NULL};
        assert_int_equal(run_serve(argv, out, sizeof out), 2);
        if (!strstr(out, bad[i].want)) fail_msg("%s %s: %s", bad[i].flag, bad[i].value, out);
    }
    char *argv[] = {INFERX_BIN, "serve", "-m", MODEL, "--port", "0", "-t", "1", "--served-model-name", "tiny",
                    "--max-num-batched-tokens", "40", "--target-step-ms", "0.5", "--access-log", "off", NULL};
    int err_fd;
    uint16_t port;
    pid_t pid = spawn_serve(argv, &err_fd, &port);
    resp r;
    const char *body = "{\"prompt\":\"Emma Woodhouse, handsome, clever, and rich\",\"max_tokens\":4}";
    assert_int_equal(http(port, "POST", "/v1/completions", NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(http(port, "GET", "/metrics", NULL, NULL, &r), 0);
    double v = 0;
    assert_true(metric(r.body, "inferx:step_token_budget", NULL, &v) && v >= 1 && v <= 40);
    resp_free(&r);
    stop_serve(pid, err_fd);
}

/* inferx serve --spec ngram, and --draft-model with the bundled draft:
 * the same text as without speculation, a request may opt out, the
 * vLLM-named counters move, the draft's pool is empty between requests. */
static void test_cli_spec(void **state) {
    (void)state;
    need_inferx();
    const char *prompt = "one two three four five six seven eight nine ten one two three four five six seven";
    char *ref = generate_ref(prompt, 24);
    for (int draft = 0; draft < 2; draft++) {
        char *argv[] = {INFERX_BIN, "serve", "-m", MODEL, "--port", "0", "-t", "1", "--served-model-name", "tiny",
                        "--spec", "ngram", "--spec-k", "3", "--spec-adaptive", "off", "--access-log", "off", NULL, NULL};
        if (draft) {
            argv[10] = "--draft-model";
            argv[11] = IX_SOURCE_DIR "/models/draft-f32.gguf";
        }
        int err_fd;
        uint16_t port;
        pid_t pid = spawn_serve(argv, &err_fd, &port);
        char body[512];
        for (int opt_out = 0; opt_out < 2; opt_out++) {
            snprintf(body, sizeof body,
                     "{\"prompt\":\"%s\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true%s}", prompt,
                     opt_out ? ",\"speculative_decoding\":false" : "");
            resp r;
            assert_int_equal(http(port, "POST", "/v1/completions", NULL, body, &r), 0);
            assert_int_equal(r.status, 200);
            json_t *j = json_loads(r.body, 0, NULL);
            assert_non_null(j);
            json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
            assert_string_equal(json_string_value(json_object_get(c0, "text")), ref);
            json_decref(j);
            resp_free(&r);
        }
        resp r;
        assert_int_equal(http(port, "POST", "/v1/completions", NULL,
                              "{\"prompt\":\"x\",\"speculative_decoding\":\"yes\"}", &r), 0);
        assert_int_equal(r.status, 400);
        assert_non_null(strstr(r.body, "speculative_decoding"));
        resp_free(&r);
        assert_int_equal(http(port, "GET", "/metrics", NULL, NULL, &r), 0);
        double drafts = 0, tokens = 0, acc = 0, pos0 = 0;
        assert_true(metric(r.body, "inferx:spec_decode_num_drafts_total", NULL, &drafts));
        assert_true(metric(r.body, "inferx:spec_decode_num_draft_tokens_total", NULL, &tokens));
        assert_true(metric(r.body, "inferx:spec_decode_num_accepted_tokens_total", NULL, &acc));
        assert_true(metric(r.body, "inferx:spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\"", &pos0));
        double draft_blocks = -1, draft_total = -1;
        assert_true(metric(r.body, "inferx:spec_draft_kv_blocks_used", NULL, &draft_blocks));
        assert_true(metric(r.body, "inferx:spec_draft_kv_blocks_total", NULL, &draft_total));
        assert_true(draft_blocks == 0); /* ngram: no pool of its own; a draft's, empty between requests */
        assert_true(draft ? draft_total > 0 : draft_total == 0);
        assert_true(drafts >= 1 && tokens >= drafts && acc <= tokens && pos0 <= drafts);
        resp_free(&r);
        stop_serve(pid, err_fd);
    }
    free(ref);
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

static void shutdown_with_inflight(int64_t drain_ms, const char *want_reason) {
    wait_idle();
    ix_server *s;
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    assert_int_equal(ix_server_create(&s, g_engine, &sp, NULL), IX_OK);
    client_job c = {ix_server_port(s), NULL,
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
    /* One running, then one waiting: the limit is counted at submission,
     * so the second is sent only once the first runs. */
    enum { N = 2 };
    client_job c[N];
    pthread_t th[N];
    ix_engine_stats st;
    for (int i = 0; i < N; i++) {
        c[i] = (client_job){ix_server_port(s), NULL,
                            "{\"prompt\":\"Emma\",\"max_tokens\":400,\"ignore_eos\":true}", {0}, -1};
        pthread_create(&th[i], NULL, client_thread, &c[i]);
        for (int k = 0; k < 5000; k++) {
            ix_engine_get_stats(e, &st);
            if (st.n_running == 1 && st.n_waiting >= i) break;
            usleep(1000);
        }
    }
    assert_true(st.n_waiting >= 1);
    resp r;
    assert_int_equal(http(ix_server_port(s), "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"Emma\",\"max_tokens\":2}", &r), 0);
    assert_int_equal(r.status, 503);
    const char *retry = strstr(r.head, "Retry-After: ");
    assert_non_null(retry);
    assert_true(atoi(retry + 13) >= 1 && atoi(retry + 13) <= 60);
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

/* ---- constrained output: response_format and grammar -------------------------------- */

static const char k_person_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"role\":{\"enum\":[\"captain\",\"sailor\"]}},"
    "\"required\":[\"name\",\"age\",\"role\"],\"additionalProperties\":false}";

static void assert_person(const char *text) {
    json_error_t je;
    json_t *doc = json_loads(text, 0, &je);
    if (!doc) fail_msg("not JSON (%s): '%s'", je.text, text);
    assert_int_equal(json_object_size(doc), 3);
    const char *name = json_string_value(json_object_get(doc, "name"));
    assert_non_null(name);
    json_t *age = json_object_get(doc, "age");
    assert_true(json_is_integer(age) && json_integer_value(age) >= 0 && json_integer_value(age) <= 120);
    const char *role = json_string_value(json_object_get(doc, "role"));
    assert_true(role && (!strcmp(role, "captain") || !strcmp(role, "sailor")));
    json_decref(doc);
}

static void test_structured_outputs(void **state) {
    (void)state;
    char body[2048];
    /* json_schema, strict, n = 3 with temperature: every choice validates. */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Who is on deck?\"}],\"n\":3,\"temperature\":1.2,"
             "\"seed\":7,\"max_tokens\":120,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
             "{\"name\":\"person\",\"strict\":true,\"schema\":%s}}}",
             k_person_schema);
    json_t *j = post_json("/v1/chat/completions", body, 200);
    for (int c = 0; c < 3; c++) {
        json_t *ch = json_array_get(json_object_get(j, "choices"), (size_t)c);
        assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
        assert_person(json_string_value(json_object_get(json_object_get(ch, "message"), "content")));
    }
    json_decref(j);
    /* Greedy, whole and streamed: the same valid document. */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Who is on deck?\"}],\"temperature\":0,"
             "\"max_tokens\":120,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
             "{\"name\":\"person\",\"schema\":%s}}}",
             k_person_schema);
    j = post_json("/v1/chat/completions", body, 200);
    char *whole = strdup(json_string_value(
        json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content")));
    json_decref(j);
    assert_person(whole);
    memcpy(body + strlen(body) - 1, ",\"stream\":true}", 16);
    resp r;
    assert_int_equal(http(g_port, "POST", "/v1/chat/completions", NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    bool done_last;
    json_t *chunks = parse_sse(r.body, &done_last);
    assert_true(done_last);
    char text[4096] = "";
    const char *finish = NULL;
    size_t i;
    json_t *ck;
    json_array_foreach(chunks, i, ck) {
        json_t *c0 = json_array_get(json_object_get(ck, "choices"), 0);
        const char *t = json_string_value(json_object_get(json_object_get(c0, "delta"), "content"));
        if (t) strncat(text, t, sizeof text - strlen(text) - 1);
        if (json_is_string(json_object_get(c0, "finish_reason")))
            finish = json_string_value(json_object_get(c0, "finish_reason"));
    }
    assert_non_null(finish);
    if (strcmp(finish, "stop")) fail_msg("finish %s: '%s'", finish, text);
    assert_string_equal(text, whole);
    free(whole);
    json_decref(chunks);
    resp_free(&r);
    /* json_object: any object; complete ones parse. */
    for (int k = 0; k < 2; k++) {
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Answer in JSON\"}],\"seed\":%d,"
                 "\"max_tokens\":60,\"response_format\":{\"type\":\"json_object\"}}", k);
        j = post_json("/v1/chat/completions", body, 200);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        const char *content = json_string_value(json_object_get(json_object_get(ch, "message"), "content"));
        const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
        assert_non_null(content);
        size_t sp = strspn(content, " \t\n");
        assert_int_equal(content[sp], '{');
        if (!strcmp(fr, "stop")) {
            json_t *doc = json_loads(content, 0, NULL);
            assert_true(json_is_object(doc));
            json_decref(doc);
        } else {
            assert_string_equal(fr, "length");
        }
        json_decref(j);
    }
    /* type text: free decoding, same as without. */
    j = post_json("/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3,"
                  "\"response_format\":{\"type\":\"text\"}}", 200);
    json_decref(j);
    /* grammar (GBNF) on completions, greedy. */
    j = post_json("/v1/completions",
                  "{\"prompt\":\"Mr. Darcy\",\"temperature\":0,\"max_tokens\":10,"
                  "\"grammar\":\"root ::= \\\" \\\"? (\\\"yes\\\" | \\\"no\\\") \\\".\\\"\"}", 200);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const char *t = json_string_value(json_object_get(ch, "text"));
    assert_true(!strcmp(t, " yes.") || !strcmp(t, " no.") || !strcmp(t, "yes.") || !strcmp(t, "no."));
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    json_decref(j);

    /* Errors name the field. */
#define CHAT_ERR(b, param, part)                                                                                     \
    expect_error(g_port, "POST", "/v1/chat/completions", NULL, b, strlen(b), 400, param, part)
#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
    CHAT_ERR("{" MSGS ",\"response_format\":{\"type\":\"bogus\"}}", "response_format.type", "bogus");
    CHAT_ERR("{" MSGS ",\"response_format\":\"json\"}", "response_format", NULL);
    CHAT_ERR("{" MSGS ",\"response_format\":{\"type\":\"json_object\",\"x\":1}}", "response_format", "x");
    CHAT_ERR("{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}}",
             "response_format.json_schema.name", NULL);
    CHAT_ERR("{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\","
             "\"schema\":{\"type\":\"integer\",\"multipleOf\":3}}}}",
             "response_format.json_schema.schema", "multipleOf");
    CHAT_ERR("{" MSGS ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"strict\":true,"
             "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}}}}",
             "response_format.json_schema.schema", "additionalProperties");
    CHAT_ERR("{" MSGS ",\"grammar\":\"root ::= nothing\"}", "grammar", "nothing");
    CHAT_ERR("{" MSGS ",\"grammar\":7}", "grammar", NULL);
    CHAT_ERR("{" MSGS ",\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}", "grammar",
             NULL);
    ERR("{\"prompt\":\"x\",\"grammar\":\"root ::= (\"}", 400, "grammar", "line 1");
}

/* ---- tool calling ----------------------------------------------------------------- */

#define WEATHER_TOOLS                                                                                                  \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather now\","      \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":10},"            \
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}},"         \
    "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]"

static void assert_weather_call(json_t *call, const char *args_text) {
    json_t *args = json_loads(args_text, 0, NULL);
    if (!json_is_object(args)) fail_msg("arguments are not a JSON object: %s", args_text);
    const char *name = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
    assert_non_null(name);
    if (!strcmp(name, "get_weather")) {
        assert_true(json_is_string(json_object_get(args, "city")));
        const char *u = json_string_value(json_object_get(args, "unit"));
        assert_true(u && (!strcmp(u, "c") || !strcmp(u, "f")));
    } else {
        assert_string_equal(name, "now");
        assert_int_equal(json_object_size(args), 0);
    }
    json_decref(args);
}

static void test_tool_calls(void **state) {
    (void)state;
    /* A named function: exactly one call of it, content null. */
    json_t *j = post_json("/v1/chat/completions",
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":150,"
                          "\"temperature\":0," WEATHER_TOOLS
                          ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}",
                          200);
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
    json_t *msg = json_object_get(c0, "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    json_t *calls = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(calls), 1);
    json_t *call = json_array_get(calls, 0);
    assert_true(!strncmp(json_string_value(json_object_get(call, "id")), "call_", 5));
    assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
    assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "get_weather");
    char *whole_args = strdup(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")));
    assert_weather_call(call, whole_args);
    json_decref(j);

    /* The same, streamed: deltas as OpenAI sends them, arguments in fragments. */
    resp r;
    const char *body;
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"max_tokens\":150,"
                       "\"temperature\":0,\"stream\":true," WEATHER_TOOLS
                       ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}}";
    assert_int_equal(http(g_port, "POST", "/v1/chat/completions", NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    bool done_last;
    json_t *chunks = parse_sse(r.body, &done_last);
    assert_true(done_last);
    char args[2048] = "";
    const char *finish = NULL, *id = NULL;
    int n_first = 0;
    size_t i;
    json_t *ck;
    json_array_foreach(chunks, i, ck) {
        json_t *ch = json_array_get(json_object_get(ck, "choices"), 0);
        json_t *delta = json_object_get(ch, "delta");
        const char *content = json_string_value(json_object_get(delta, "content"));
        assert_true(!content || !*content); /* only the role chunk's "" */
        json_t *tc = json_object_get(delta, "tool_calls");
        if (tc) {
            assert_int_equal(json_array_size(tc), 1);
            json_t *d = json_array_get(tc, 0);
            assert_int_equal(json_integer_value(json_object_get(d, "index")), 0);
            if (json_object_get(d, "id")) {
                n_first++;
                id = json_string_value(json_object_get(d, "id"));
                assert_string_equal(json_string_value(json_object_get(d, "type")), "function");
                assert_string_equal(json_string_value(json_object_get(json_object_get(d, "function"), "name")),
                                    "get_weather");
            }
            const char *frag = json_string_value(json_object_get(json_object_get(d, "function"), "arguments"));
            assert_non_null(frag);
            strncat(args, frag, sizeof args - strlen(args) - 1);
        }
        if (json_is_string(json_object_get(ch, "finish_reason")))
            finish = json_string_value(json_object_get(ch, "finish_reason"));
    }
    assert_int_equal(n_first, 1);
    assert_true(id && !strncmp(id, "call_", 5));
    assert_non_null(finish);
    assert_string_equal(finish, "tool_calls");
    assert_string_equal(args, whole_args); /* greedy: the same call */
    free(whole_args);
    json_decref(chunks);
    resp_free(&r);

    /* required, parallel calls allowed, sampled, n = 2: every choice calls known functions. */
    j = post_json("/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":200,\"n\":2,"
                  "\"temperature\":0.8,\"seed\":4," WEATHER_TOOLS ",\"tool_choice\":\"required\"}",
                  200);
    for (int c = 0; c < 2; c++) {
        json_t *ch = json_array_get(json_object_get(j, "choices"), (size_t)c);
        assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
        calls = json_object_get(json_object_get(ch, "message"), "tool_calls");
        assert_true(json_array_size(calls) >= 1);
        json_array_foreach(calls, i, call)
            assert_weather_call(call, json_string_value(json_object_get(json_object_get(call, "function"), "arguments")));
    }
    json_decref(j);

    /* Streamed, n = 2, parallel calls off, logprobs on: each choice streams its one call. */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"max_tokens\":150,\"n\":2,"
           "\"temperature\":0.7,\"seed\":9,\"stream\":true,\"logprobs\":true,\"parallel_tool_calls\":false,"
           WEATHER_TOOLS ",\"tool_choice\":\"required\"}";
    assert_int_equal(http(g_port, "POST", "/v1/chat/completions", NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    chunks = parse_sse(r.body, &done_last);
    assert_true(done_last);
    char args2[2][2048] = {"", ""};
    const char *names[2] = {NULL, NULL}, *finishes[2] = {NULL, NULL};
    json_array_foreach(chunks, i, ck) {
        json_t *ch = json_array_get(json_object_get(ck, "choices"), 0);
        json_int_t idx = json_integer_value(json_object_get(ch, "index"));
        assert_true(idx == 0 || idx == 1);
        json_t *tc = json_object_get(json_object_get(ch, "delta"), "tool_calls");
        if (tc) {
            json_t *d = json_array_get(tc, 0);
            assert_int_equal(json_integer_value(json_object_get(d, "index")), 0); /* one call per choice */
            json_t *fn = json_object_get(d, "function");
            if (json_object_get(fn, "name")) {
                assert_null(names[idx]);
                names[idx] = json_string_value(json_object_get(fn, "name"));
            }
            strncat(args2[idx], json_string_value(json_object_get(fn, "arguments")), sizeof args2[idx] - strlen(args2[idx]) - 1);
        }
        if (json_is_string(json_object_get(ch, "finish_reason")))
            finishes[idx] = json_string_value(json_object_get(ch, "finish_reason"));
    }
    for (int c = 0; c < 2; c++) {
        assert_non_null(names[c]);
        assert_non_null(finishes[c]);
        assert_string_equal(finishes[c], "tool_calls");
        json_t *call2 = json_pack("{s:{s:s}}", "function", "name", names[c]);
        assert_weather_call(call2, args2[c]);
        json_decref(call2);
    }
    json_decref(chunks);
    resp_free(&r);

    /* auto: an answer either way; a history with calls and tool results renders. */
    j = post_json("/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"},"
                  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
                  "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\",\\\"unit\\\":\\\"c\\\"}\"}}]},"
                  "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"12 C\"}],"
                  "\"max_tokens\":8,\"temperature\":0," WEATHER_TOOLS ",\"tool_choice\":\"auto\"}",
                  200);
    c0 = json_array_get(json_object_get(j, "choices"), 0);
    msg = json_object_get(c0, "message");
    assert_true(json_is_string(json_object_get(msg, "content")) || json_is_array(json_object_get(msg, "tool_calls")));
    json_decref(j);

    /* auto with a JSON Schema answer: either calls, or content valid under the schema. */
    for (int k = 0; k < 3; k++) {
        char b[4096];
        snprintf(b, sizeof b,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Who is on deck?\"}],\"max_tokens\":150,"
                 "\"temperature\":0.9,\"seed\":%d," WEATHER_TOOLS ",\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"name\":\"p\",\"schema\":%s}}}",
                 k, k_person_schema);
        j = post_json("/v1/chat/completions", b, 200);
        c0 = json_array_get(json_object_get(j, "choices"), 0);
        msg = json_object_get(c0, "message");
        const char *fr = json_string_value(json_object_get(c0, "finish_reason"));
        if (json_is_array(json_object_get(msg, "tool_calls"))) {
            assert_string_equal(fr, "tool_calls");
            json_array_foreach(json_object_get(msg, "tool_calls"), i, call)
                assert_weather_call(call, json_string_value(json_object_get(json_object_get(call, "function"), "arguments")));
        } else if (!strcmp(fr, "stop")) {
            assert_person(json_string_value(json_object_get(msg, "content")));
        } else {
            assert_string_equal(fr, "length");
        }
        json_decref(j);
    }

    /* Errors name the field. */
    CHAT_ERR("{" MSGS "," WEATHER_TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"x\"}}}",
             "tool_choice", "not in 'tools'");
    CHAT_ERR("{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice", NULL);
    CHAT_ERR("{" MSGS "," WEATHER_TOOLS ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}",
             "response_format", "forces a call");
    CHAT_ERR("{" MSGS "," WEATHER_TOOLS ",\"tool_choice\":\"required\",\"grammar\":\"root ::= \\\"a\\\"\"}", "grammar",
             "forces a call");
    CHAT_ERR("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
             "{\"type\":\"object\",\"not\":{}}}}],\"tool_choice\":\"required\"}",
             "tools", "function 'f'");
}

/* Every field is implemented, accepted as metadata, or refused by name. */
static void test_honest_fields(void **state) {
    (void)state;
    /* accepted metadata and "as usual" values */
    json_decref(post_json("/v1/chat/completions",
                          "{" MSGS ",\"max_tokens\":1,\"user\":\"u\",\"metadata\":{\"a\":\"b\"},\"store\":false,"
                          "\"safety_identifier\":\"s\",\"prompt_cache_key\":\"k\",\"modalities\":[\"text\"],"
                          "\"service_tier\":\"auto\",\"audio\":null,\"functions\":null}",
                          200));
    /* unknown, not implemented, or an unsupported value: 400 naming it */
    CHAT_ERR("{" MSGS ",\"frobnicate\":1}", "frobnicate", "not a field");
    CHAT_ERR("{" MSGS ",\"prompt\":\"x\"}", "prompt", "not a field");
    CHAT_ERR("{" MSGS ",\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}}", "audio", "not supported");
    CHAT_ERR("{" MSGS ",\"modalities\":[\"text\",\"audio\"]}", "modalities", "text only");
    CHAT_ERR("{" MSGS ",\"prediction\":{\"type\":\"content\",\"content\":\"x\"}}", "prediction", NULL);
    CHAT_ERR("{" MSGS ",\"reasoning_effort\":\"low\"}", "reasoning_effort", NULL);
    CHAT_ERR("{" MSGS ",\"web_search_options\":{}}", "web_search_options", NULL);
    CHAT_ERR("{" MSGS ",\"functions\":[{\"name\":\"f\"}]}", "functions", NULL);
    CHAT_ERR("{" MSGS ",\"function_call\":\"auto\"}", "function_call", NULL);
    CHAT_ERR("{" MSGS ",\"store\":true}", "store", NULL);
    CHAT_ERR("{" MSGS ",\"service_tier\":\"flex\"}", "service_tier", NULL);
    CHAT_ERR("{" MSGS ",\"metadata\":{\"a\":1}}", "metadata", NULL);
    CHAT_ERR("{" MSGS ",\"user\":5}", "user", NULL);
    CHAT_ERR("{" MSGS ",\"stream_options\":{\"include_usage\":true,\"x\":1}}", "stream_options", "x");
    ERR("{\"prompt\":\"x\",\"echo\":true}", 400, "echo", NULL);
    ERR("{\"prompt\":\"x\",\"best_of\":3}", 400, "best_of", NULL);
    ERR("{\"prompt\":\"x\",\"suffix\":\"end\"}", 400, "suffix", NULL);
    ERR("{\"prompt\":\"x\",\"tools\":[]}", 400, "tools", "not a field");
    ERR("{\"prompt\":\"x\",\"messages\":[]}", 400, "messages", "not a field");
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
        cmocka_unit_test(test_metrics_label_escaping),
        cmocka_unit_test(test_loading_then_attach),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_access_log),
        cmocka_unit_test(test_api_key_tenants),
        cmocka_unit_test(test_chat_templates),
        cmocka_unit_test(test_chat_tokens_phi3),
        cmocka_unit_test(test_gguf_chat_template),
        cmocka_unit_test(test_cli_key_file_and_access_log),
        cmocka_unit_test(test_cli_sched_flags),
        cmocka_unit_test(test_cli_spec),
        cmocka_unit_test(test_many_streams_fixed_threads),
        cmocka_unit_test(test_overload_retry_after),
        cmocka_unit_test(test_shutdown_drains),
        cmocka_unit_test(test_shutdown_aborts),
        cmocka_unit_test(test_structured_outputs),
        cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_honest_fields),
    };
    if (getenv("IX_TEST_FILTER")) cmocka_set_test_filter(getenv("IX_TEST_FILTER")); /* e.g. "test_cli_spec" */
    return cmocka_run_group_tests(tests, setup, teardown);
}
