/* server: per-key policy end to end, in process, on the bundled model
 * (src/server/policy.c, docs/server.md "Per-key policy"):
 *   - the keys file is checked strictly: each kind of mistake fails
 *     ix_server_create with a message naming the field; a corrupt usage
 *     state too
 *   - requests/min and tokens/min: 429 rate_limit_exceeded naming the limit,
 *     Retry-After and the x-ratelimit-* headers, freed when the (injected)
 *     clock moves on
 *   - concurrent requests, the max_tokens cap (400 above it, the cap when
 *     none is asked), allowed models (404), token and USD budgets (429
 *     insufficient_quota) and their persistence across a restart
 *   - /v1/usage for the calling key; /metrics per key (key="<name>") and
 *     only for keys allowed to read it; no secret in /metrics or the log
 *   - request timeouts, non-streaming (408) and streaming (an error in the
 *     last chunk, then [DONE]), the request cancelled in the engine
 *   - SIGHUP's reload (ix_server_reload_keys); a key's priority and its
 *     max_tokens as the default, seen on the engine request
 * The engine has no thread of its own: the test steps it (a stepper thread
 * that runs while g_run is set), so that "a request in flight" or "a
 * request past its deadline" is decided by the test, never by speed; rate
 * limits and deadlines read a clock the test sets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inferx/engine.h"
#include "inferx/server.h"
#include "server/server_int.h"
#include "http_client.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"

static ix_model *g_model;
static ix_engine *g_engine;
static pthread_t g_stepper;
static atomic_bool g_run, g_quit;
static atomic_uint_fast64_t g_now = 1000000000000ull; /* the policy clock (ns) */
static char g_dir[64];

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[1 << 16];
static size_t g_log_len;

static void capture_log(void *user, const char *line, size_t len) {
    (void)user;
    pthread_mutex_lock(&g_log_mu);
    if (g_log_len + len < sizeof g_log) {
        memcpy(g_log + g_log_len, line, len);
        g_log_len += len;
        g_log[g_log_len] = '\0';
    }
    pthread_mutex_unlock(&g_log_mu);
}

static uint64_t fake_now(void *user) {
    (void)user;
    return atomic_load(&g_now);
}

static void advance_s(double s) { atomic_fetch_add(&g_now, (uint64_t)(s * 1e9)); }

static void *stepper(void *arg) {
    (void)arg;
    while (!atomic_load(&g_quit)) {
        bool did = false;
        if (atomic_load(&g_run)) ix_engine_step(g_engine, &did);
        if (!did) usleep(1000);
    }
    return NULL;
}

static int setup(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    if (ix_model_load(&g_model, MODEL, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    ix_engine_params ep = ix_engine_default_params();
    ep.n_threads = 2;
    ep.start_thread = false;
    if (ix_engine_create(&g_engine, g_model, &ep, &err) != IX_OK) return -1;
    atomic_store(&g_run, true);
    if (pthread_create(&g_stepper, NULL, stepper, NULL)) return -1;
    snprintf(g_dir, sizeof g_dir, "/tmp/ix_policy_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    atomic_store(&g_quit, true);
    pthread_join(g_stepper, NULL);
    ix_engine_destroy(g_engine);
    ix_model_destroy(g_model);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers ------------------------------------------------------------------ */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *path_of(const char *name) {
    static char buf[4][256];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 256, "%s/%s", g_dir, name);
    return p;
}

/* A server over the shared engine with keys (the JSON text of a keys file,
 * written to `file`), the fake clock, and the options given. */
static ix_server *server_with(const char *file, const char *keys, double cost_per_hour, double timeout_s,
                              const char *plain_key) {
    write_file(path_of(file), keys);
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.model_name = "tiny";
    sp.keys_file = path_of(file);
    sp.cost_per_hour_usd = cost_per_hour;
    sp.request_timeout_s = timeout_s;
    sp.access_log = capture_log;
    sp.api_key = plain_key;
    ix_server *s = NULL;
    ix_errbuf err = {{0}};
    if (ix_server_create(&s, g_engine, &sp, &err) != IX_OK) fail_msg("server: %s", err.msg);
    ix__policy_set_clock(s, fake_now, NULL);
    return s;
}

/* The error message ix_server_create gives for these keys (it must fail). */
static void create_fails(const char *keys, double cost_per_hour, ix_status want, const char *want_msg) {
    write_file(path_of("bad.json"), keys);
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.keys_file = path_of("bad.json");
    sp.cost_per_hour_usd = cost_per_hour;
    sp.api_key = "sk-plain";
    ix_server *s = NULL;
    ix_errbuf err = {{0}};
    ix_status st = ix_server_create(&s, g_engine, &sp, &err);
    if (st == IX_OK) {
        ix_server_destroy(s);
        fail_msg("accepted: %s", keys);
    }
    assert_null(s);
    assert_int_equal(st, want);
    if (!strstr(err.msg, want_msg)) fail_msg("message '%s' does not say '%s'", err.msg, want_msg);
}

static int req(ix_server *s, const char *key, const char *method, const char *path, const char *body, resp *r) {
    char hdr[256] = "";
    if (key) snprintf(hdr, sizeof hdr, "Authorization: Bearer %s\r\n", key);
    assert_int_equal(http(ix_server_port(s), method, path, hdr, body, r), 0);
    return r->status;
}

/* Sends a request and returns the socket without reading the answer. */
static int req_start(ix_server *s, const char *key, const char *path, const char *body) {
    char hdr[256];
    snprintf(hdr, sizeof hdr, "Authorization: Bearer %s\r\n", key);
    int fd = send_request(ix_server_port(s), "POST", path, hdr, body, strlen(body));
    assert_true(fd >= 0);
    return fd;
}

/* A header's value in r (case-insensitive name), or "" when absent. */
static const char *header(const resp *r, const char *name) {
    static char v[128];
    v[0] = '\0';
    char pat[80];
    snprintf(pat, sizeof pat, "\r\n%s: ", name);
    const char *p = strcasestr(r->head, pat);
    if (!p) return v;
    p += strlen(pat);
    size_t n = strcspn(p, "\r\n");
    snprintf(v, sizeof v, "%.*s", (int)(n < sizeof v ? n : sizeof v - 1), p);
    return v;
}

static json_t *body_json(const resp *r) {
    json_t *j = json_loads(r->body, 0, NULL);
    if (!j) fail_msg("not JSON: %s", r->body);
    return j;
}

static void expect_error(const resp *r, int status, const char *type, const char *code, const char *msg_part) {
    if (r->status != status) fail_msg("status %d, want %d: %s", r->status, status, r->body);
    json_t *j = body_json(r);
    json_t *e = json_object_get(j, "error");
    assert_string_equal(json_string_value(json_object_get(e, "type")), type);
    if (code)
        assert_string_equal(json_string_value(json_object_get(e, "code")), code);
    else
        assert_true(json_is_null(json_object_get(e, "code")));
    const char *m = json_string_value(json_object_get(e, "message"));
    if (!m || !strstr(m, msg_part)) fail_msg("message '%s' does not say '%s'", m ? m : "", msg_part);
    json_decref(j);
}

/* /v1/usage's number at a dotted path. */
static json_int_t usage_int(ix_server *s, const char *key, const char *a, const char *b) {
    resp r;
    assert_int_equal(req(s, key, "GET", "/v1/usage", NULL, &r), 200);
    json_t *j = body_json(&r);
    json_t *v = json_object_get(json_object_get(j, a), b);
    json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
    json_decref(j);
    resp_free(&r);
    return x;
}

/* Waits (bounded) until /v1/usage's a.b is n. */
static void wait_usage(ix_server *s, const char *key, const char *a, const char *b, int n) {
    for (int i = 0; i < 5000; i++) {
        if (usage_int(s, key, a, b) == n) return;
        usleep(2000);
    }
    fail_msg("/v1/usage %s.%s never became %d", a, b, n);
}

/* ... until the key has n requests admitted and unfinished. */
static void wait_active(ix_server *s, const char *key, int n) { wait_usage(s, key, "concurrent", "active", n); }

/* A completions request of exactly 10 prompt tokens and `max` generated. */
static char *exact_body(int max, const char *extra) {
    static char b[512];
    snprintf(b, sizeof b,
             "{\"prompt\":[1,300,301,302,303,304,305,306,307,308],\"max_tokens\":%d,\"ignore_eos\":true%s%s}", max,
             extra ? "," : "", extra ? extra : "");
    return b;
}

/* ---- tests -------------------------------------------------------------------- */

static void test_keys_file_errors(void **state) {
    (void)state;
    create_fails("{\"keys\": [", 0, IX_ERR_INVALID, "line 1");
    create_fails("[]", 0, IX_ERR_INVALID, "{\"keys\": [...]}");
    create_fails("{\"keys\": []}", 0, IX_ERR_INVALID, "at least one key");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\"}], \"extra\": 1}", 0, IX_ERR_INVALID, "no other member");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"rpm\":3}]}", 0, IX_ERR_INVALID, "keys[0].rpm: unknown field");
    create_fails("{\"keys\": [{\"key\":\"sk-a\"}]}", 0, IX_ERR_INVALID, "keys[0].name: required");
    create_fails("{\"keys\": [{\"name\":\"a b\",\"key\":\"sk-a\"}]}", 0, IX_ERR_INVALID, "keys[0].name");
    create_fails("{\"keys\": [{\"name\":\"a\"}]}", 0, IX_ERR_INVALID, "exactly one of key and key_sha256");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk a\"}]}", 0, IX_ERR_INVALID, "keys[0].key:");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key_sha256\":\"abc\"}]}", 0, IX_ERR_INVALID, "keys[0].key_sha256: must be 64 hex");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"requests_per_minute\":\"5\"}]}", 0, IX_ERR_INVALID,
                 "keys[0].requests_per_minute: must be a positive integer");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"tokens_per_minute\":0}]}", 0, IX_ERR_INVALID,
                 "keys[0].tokens_per_minute");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"metrics\":1}]}", 0, IX_ERR_INVALID, "keys[0].metrics");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"models\":[]}]}", 0, IX_ERR_INVALID, "keys[0].models");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"priority\":1.5}]}", 0, IX_ERR_INVALID, "keys[0].priority");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\",\"budget_usd\":1}]}", 0, IX_ERR_INVALID, "needs --cost-per-hour");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\"},{\"name\":\"a\",\"key\":\"sk-b\"}]}", 0, IX_ERR_INVALID,
                 "keys[1].name: 'a' is also keys[0]'s");
    /* the same secret, once in the clear and once as its SHA-256 */
    char keys[512], hex[65];
    uint8_t h[32];
    ix__sha256("sk-a", 4, h);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", h[i]);
    snprintf(keys, sizeof keys, "{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\"},{\"name\":\"b\",\"key_sha256\":\"%s\"}]}", hex);
    create_fails(keys, 0, IX_ERR_INVALID, "the same secret as keys[0]");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-plain\"}]}", 0, IX_ERR_INVALID, "an --api-key key");
    create_fails("{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\"}], \"keys\": []}", 0, IX_ERR_INVALID, "duplicate");
    /* a file that cannot be read */
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.keys_file = path_of("missing.json");
    ix_server *s = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_server_create(&s, g_engine, &sp, &err), IX_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.json"));
    /* a corrupt usage state: refused, not silently reset */
    write_file(path_of("ok.json.usage.json"), "{\"version\": 1, \"keys\": {\"a\": {\"spent_tokens\": -4, \"spent_usd\": 0}}}");
    write_file(path_of("ok.json"), "{\"keys\": [{\"name\":\"a\",\"key\":\"sk-a\"}]}");
    sp.keys_file = path_of("ok.json");
    assert_int_equal(ix_server_create(&s, g_engine, &sp, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "keys.a"));
    write_file(path_of("ok.json.usage.json"), "garbage");
    assert_int_equal(ix_server_create(&s, g_engine, &sp, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "delete it"));
    assert_null(s);
}

static void test_requests_per_minute(void **state) {
    (void)state;
    ix_server *s = server_with("rpm.json", "{\"keys\": [{\"name\":\"r\",\"key\":\"sk-r\",\"requests_per_minute\":2}]}", 0, 0,
                               NULL);
    resp r;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(req(s, "sk-r", "POST", "/v1/completions", exact_body(2, NULL), &r), 200);
        assert_string_equal(header(&r, "x-ratelimit-limit-requests"), "2");
        assert_string_equal(header(&r, "x-ratelimit-remaining-requests"), i == 0 ? "1" : "0");
        assert_string_equal(header(&r, "x-ratelimit-reset-requests"), i == 0 ? "30s" : "1m0s");
        assert_string_equal(header(&r, "x-ratelimit-limit-tokens"), ""); /* no token limit */
        resp_free(&r);
    }
    req(s, "sk-r", "POST", "/v1/completions", exact_body(2, NULL), &r);
    expect_error(&r, 429, "rate_limit_exceeded", "rate_limit_exceeded", "requests per minute: limit 2");
    assert_string_equal(header(&r, "Retry-After"), "30"); /* one request comes back every 30 s */
    assert_string_equal(header(&r, "x-ratelimit-remaining-requests"), "0");
    resp_free(&r);
    /* chat too, and other keys are not affected: the limit is the key's */
    req(s, "sk-r", "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":1}",
        &r);
    assert_int_equal(r.status, 429);
    resp_free(&r);
    advance_s(29);
    req(s, "sk-r", "POST", "/v1/completions", exact_body(2, NULL), &r);
    assert_int_equal(r.status, 429);
    assert_string_equal(header(&r, "Retry-After"), "1");
    resp_free(&r);
    advance_s(1);
    assert_int_equal(req(s, "sk-r", "POST", "/v1/completions", exact_body(2, NULL), &r), 200);
    resp_free(&r);
    /* /metrics counts the refusals by reason; /v1/usage shows the window */
    assert_int_equal(usage_int(s, "sk-r", "requests", "limit"), 2);
    assert_int_equal(usage_int(s, "sk-r", "requests", "remaining"), 0);
    assert_int_equal(usage_int(s, "sk-r", "totals", "requests"), 3);
    ix_server_destroy(s);
}

static void test_tokens_per_minute(void **state) {
    (void)state;
    ix_server *s = server_with("tpm.json", "{\"keys\": [{\"name\":\"t\",\"key\":\"sk-t\",\"tokens_per_minute\":70}]}", 0, 0,
                               NULL);
    resp r;
    /* 10 prompt + 20 completion tokens each: 70 -> 40 -> 10 */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(req(s, "sk-t", "POST", "/v1/completions", exact_body(20, NULL), &r), 200);
        assert_string_equal(header(&r, "x-ratelimit-remaining-tokens"), i == 0 ? "40" : "10");
        assert_string_equal(header(&r, "x-ratelimit-limit-tokens"), "70");
        resp_free(&r);
    }
    assert_int_equal(usage_int(s, "sk-t", "tokens", "remaining"), 10);
    req(s, "sk-t", "POST", "/v1/completions", exact_body(20, NULL), &r);
    expect_error(&r, 429, "rate_limit_exceeded", "rate_limit_exceeded", "tokens per minute: limit 70, available 10");
    assert_string_equal(header(&r, "Retry-After"), "18"); /* 20 tokens at 70/60 per second: 17.1 s */
    resp_free(&r);
    /* larger than the whole minute: no retry helps */
    req(s, "sk-t", "POST", "/v1/completions", exact_body(61, NULL), &r);
    expect_error(&r, 429, "rate_limit_exceeded", "rate_limit_exceeded", "Request too large");
    assert_string_equal(header(&r, "Retry-After"), "");
    resp_free(&r);
    /* the reservation is max_tokens, the charge what was used: a request
     * that stops early gives the rest back */
    advance_s(60);
    assert_int_equal(req(s, "sk-t", "POST", "/v1/completions",
                         "{\"prompt\":[1,300,301,302,303,304,305,306,307,308],\"max_tokens\":40,\"stop_token_ids\":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100],\"n\":1}",
                         &r),
                     200);
    json_t *j = body_json(&r);
    json_int_t used = json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens"));
    json_decref(j);
    char want[32];
    snprintf(want, sizeof want, "%d", (int)(70 - used));
    assert_string_equal(header(&r, "x-ratelimit-remaining-tokens"), want);
    resp_free(&r);
    ix_server_destroy(s);
}

static void test_concurrency_and_caps(void **state) {
    (void)state;
    ix_server *s = server_with("conc.json",
                               "{\"keys\": [{\"name\":\"c\",\"key\":\"sk-c\",\"max_concurrent\":1,\"max_tokens\":8},"
                               "{\"name\":\"m\",\"key\":\"sk-m\",\"models\":[\"other\"]},"
                               "{\"name\":\"ok\",\"key\":\"sk-ok\",\"models\":[\"other\",\"tiny\"],\"priority\":2}]}",
                               0, 0, NULL);
    resp r;
    /* one in flight (the engine held), the second refused */
    atomic_store(&g_run, false);
    int fd = req_start(s, "sk-c", "/v1/completions", exact_body(4, NULL));
    wait_active(s, "sk-c", 1);
    req(s, "sk-c", "POST", "/v1/completions", exact_body(4, NULL), &r);
    expect_error(&r, 429, "rate_limit_exceeded", "rate_limit_exceeded", "concurrent requests: limit 1");
    resp_free(&r);
    atomic_store(&g_run, true);
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(usage_int(s, "sk-c", "concurrent", "active"), 0);
    assert_int_equal(req(s, "sk-c", "POST", "/v1/completions", exact_body(4, NULL), &r), 200);
    resp_free(&r);
    /* max_tokens: above the cap a 400 naming it; none asked: the cap */
    req(s, "sk-c", "POST", "/v1/completions", exact_body(9, NULL), &r);
    expect_error(&r, 400, "invalid_request_error", "max_tokens_exceeded", "at most 8 tokens per completion");
    resp_free(&r);
    req(s, "sk-c", "POST", "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":100}", &r);
    expect_error(&r, 400, "invalid_request_error", "max_tokens_exceeded", "'max_completion_tokens' is 100");
    resp_free(&r);
    assert_int_equal(req(s, "sk-c", "POST", "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"ignore_eos\":true}", &r),
                     200);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 8);
    json_decref(j);
    resp_free(&r);
    /* models: a key not allowed the served model does not see it */
    req(s, "sk-m", "POST", "/v1/completions", exact_body(1, NULL), &r);
    expect_error(&r, 404, "invalid_request_error", "model_not_found", "does not exist or you do not have access");
    resp_free(&r);
    assert_int_equal(req(s, "sk-m", "GET", "/v1/models", NULL, &r), 200);
    json_t *list = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(list, "data")), 0);
    json_decref(list);
    resp_free(&r);
    req(s, "sk-m", "GET", "/v1/models/tiny", NULL, &r);
    expect_error(&r, 404, "invalid_request_error", "model_not_found", "do not have access");
    resp_free(&r);
    assert_int_equal(req(s, "sk-ok", "GET", "/v1/models", NULL, &r), 200);
    list = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(list, "data")), 1);
    json_decref(list);
    resp_free(&r);
    assert_int_equal(req(s, "sk-ok", "POST", "/v1/completions", exact_body(1, NULL), &r), 200);
    assert_string_equal(header(&r, "x-ratelimit-limit-requests"), ""); /* unlimited rates: no headers */
    resp_free(&r);
    ix_server_destroy(s);
}

static void test_budgets_persist(void **state) {
    (void)state;
    const char *keys = "{\"keys\": [{\"name\":\"b\",\"key\":\"sk-b\",\"budget_tokens\":30},"
                       "{\"name\":\"u\",\"key\":\"sk-u\",\"budget_usd\":1e-12}]}";
    unlink(path_of("budget.json.usage.json"));
    ix_server *s = server_with("budget.json", keys, 3600, 0, NULL);
    resp r;
    assert_int_equal(req(s, "sk-b", "POST", "/v1/completions", exact_body(20, NULL), &r), 200); /* 30 tokens */
    resp_free(&r);
    /* the saver writes the change while the server runs (bounded wait, no timing asserted) */
    bool saved = false;
    for (int i = 0; i < 1000 && !saved; i++) {
        FILE *f = fopen(path_of("budget.json.usage.json"), "r");
        char text[1024] = "";
        if (f) {
            text[fread(text, 1, sizeof text - 1, f)] = '\0';
            fclose(f);
        }
        saved = strstr(text, "\"spent_tokens\": 30") != NULL;
        if (!saved) usleep(20000);
    }
    assert_true(saved);
    req(s, "sk-b", "POST", "/v1/completions", exact_body(1, NULL), &r);
    expect_error(&r, 429, "insufficient_quota", "insufficient_quota", "30 of 30 tokens spent");
    assert_string_equal(header(&r, "Retry-After"), ""); /* waiting does not help */
    resp_free(&r);
    assert_int_equal(req(s, "sk-u", "POST", "/v1/completions", exact_body(4, NULL), &r), 200);
    resp_free(&r);
    req(s, "sk-u", "POST", "/v1/completions", exact_body(1, NULL), &r);
    expect_error(&r, 429, "insufficient_quota", "insufficient_quota", "USD budget");
    resp_free(&r);
    ix_server_destroy(s); /* writes the state */
    struct stat st;
    assert_int_equal(stat(path_of("budget.json.usage.json"), &st), 0);
    assert_int_equal(stat(path_of("budget.json.usage.json.tmp"), &st), -1);
    /* a restart: the budget is still spent */
    s = server_with("budget.json", keys, 3600, 0, NULL);
    resp u;
    assert_int_equal(req(s, "sk-b", "GET", "/v1/usage", NULL, &u), 200);
    json_t *j = body_json(&u);
    json_t *bt = json_object_get(json_object_get(j, "budget"), "tokens");
    assert_int_equal(json_integer_value(json_object_get(bt, "spent")), 30);
    assert_int_equal(json_integer_value(json_object_get(bt, "remaining")), 0);
    json_decref(j);
    resp_free(&u);
    req(s, "sk-b", "POST", "/v1/completions", exact_body(1, NULL), &r);
    expect_error(&r, 429, "insufficient_quota", "insufficient_quota", "30 of 30 tokens spent");
    resp_free(&r);
    req(s, "sk-u", "POST", "/v1/completions", exact_body(1, NULL), &r);
    assert_int_equal(r.status, 429);
    resp_free(&r);
    ix_server_destroy(s);
}

static void test_usage_metrics_and_secrets(void **state) {
    (void)state;
    ix_server *s = server_with("metrics.json",
                               "{\"keys\": [{\"name\":\"ops\",\"key\":\"sk-secret-ops\",\"metrics\":true},"
                               "{\"name\":\"app\",\"key\":\"sk-secret-app\",\"requests_per_minute\":100}]}",
                               0, 0, "sk-secret-root");
    resp r;
    pthread_mutex_lock(&g_log_mu);
    size_t mark = g_log_len;
    pthread_mutex_unlock(&g_log_mu);
    assert_int_equal(req(s, "sk-secret-app", "POST", "/v1/completions", exact_body(3, NULL), &r), 200);
    resp_free(&r);
    req(s, NULL, "GET", "/metrics", NULL, &r);
    expect_error(&r, 401, "invalid_request_error", "invalid_api_key", "metrics");
    resp_free(&r);
    req(s, "sk-secret-app", "GET", "/metrics", NULL, &r);
    expect_error(&r, 403, "permission_error", "permission_denied", "may not read /metrics");
    resp_free(&r);
    assert_int_equal(req(s, "sk-secret-root", "GET", "/metrics", NULL, &r), 200); /* a plain key: unlimited */
    resp_free(&r);
    assert_int_equal(req(s, "sk-secret-ops", "GET", "/metrics", NULL, &r), 200);
    assert_non_null(strstr(r.body, "inferx:key_requests_total{model_name=\"tiny\",key=\"app\"} 1\n"));
    assert_non_null(strstr(r.body, "inferx:key_prompt_tokens_total{model_name=\"tiny\",key=\"app\"} 10\n"));
    assert_non_null(strstr(r.body, "inferx:key_generation_tokens_total{model_name=\"tiny\",key=\"app\"} 3\n"));
    assert_non_null(strstr(r.body, "inferx:key_rejected_total{model_name=\"tiny\",key=\"app\",reason=\"requests_per_minute\"} 0\n"));
    assert_null(strstr(r.body, "sk-secret"));
    resp_free(&r);
    /* /v1/usage: the caller's own numbers */
    assert_int_equal(req(s, "sk-secret-app", "GET", "/v1/usage", NULL, &r), 200);
    json_t *j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "key")), "app");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "limits"), "requests_per_minute")), 100);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "requests"), "remaining")), 99);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "totals"), "completion_tokens")), 3);
    assert_null(strstr(r.body, "sk-secret"));
    json_decref(j);
    resp_free(&r);
    req(s, NULL, "GET", "/v1/usage", NULL, &r);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    /* the access log names the key, never its secret */
    pthread_mutex_lock(&g_log_mu);
    const char *log = g_log + mark;
    assert_non_null(strstr(log, "\"key\":\"app\""));
    assert_null(strstr(log, "sk-secret"));
    pthread_mutex_unlock(&g_log_mu);
    ix_server_destroy(s);
}

static void test_timeouts(void **state) {
    (void)state;
    ix_server *s = server_with("timeout.json", "{\"keys\": [{\"name\":\"k\",\"key\":\"sk-k\"}]}", 0, 100, NULL);
    resp r;
    /* non-streaming: held in the engine past its own 5 s */
    atomic_store(&g_run, false);
    int fd = req_start(s, "sk-k", "/v1/completions", exact_body(400, "\"timeout\":5"));
    wait_active(s, "sk-k", 1);
    advance_s(4.9);
    usleep(200000); /* not yet: the watcher leaves it (no assertion on time: the clock is the test's) */
    assert_int_equal(usage_int(s, "sk-k", "rejected", "timeout"), 0);
    advance_s(0.2);
    wait_usage(s, "sk-k", "rejected", "timeout", 1); /* the watcher cancelled it */
    atomic_store(&g_run, true);
    assert_int_equal(read_response(fd, &r), 0);
    expect_error(&r, 408, "timeout", "request_timeout", "timed out after 5 s");
    resp_free(&r);
    /* streaming: the server's 100 s; the last chunk carries the error */
    atomic_store(&g_run, false);
    fd = req_start(s, "sk-k", "/v1/chat/completions",
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":400,\"ignore_eos\":true,"
                   "\"stream\":true}");
    wait_active(s, "sk-k", 1);
    advance_s(101);
    wait_usage(s, "sk-k", "rejected", "timeout", 2);
    atomic_store(&g_run, true);
    assert_int_equal(read_response(fd, &r), 0);
    assert_int_equal(r.status, 200);
    bool done_last;
    json_t *chunks = parse_sse(r.body, &done_last);
    assert_true(done_last);
    json_t *last = json_array_get(chunks, json_array_size(chunks) - 1);
    json_t *err = json_object_get(last, "error");
    assert_string_equal(json_string_value(json_object_get(err, "code")), "request_timeout");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(last, "choices"), 0),
                                                          "finish_reason")),
                        "abort");
    json_decref(chunks);
    resp_free(&r);
    /* cancelled in the engine: nothing left running, the KV blocks freed */
    ix_engine_stats st;
    for (int i = 0; i < 1000; i++) {
        ix_engine_get_stats(g_engine, &st);
        if (st.n_running + st.n_waiting == 0 && st.kv.n_blocks_used == 0) break;
        usleep(10000);
    }
    assert_int_equal(st.n_running + st.n_waiting, 0);
    assert_int_equal(st.kv.n_blocks_used, 0);
    /* a bad timeout is a 400 naming it */
    req(s, "sk-k", "POST", "/v1/completions", exact_body(1, "\"timeout\":-1"), &r);
    expect_error(&r, 400, "invalid_request_error", NULL, "'timeout' must be");
    resp_free(&r);
    assert_int_equal(usage_int(s, "sk-k", "concurrent", "active"), 0);
    ix_server_destroy(s);
}

/* Admission's effect on the engine request, seen directly: the key's
 * priority (a request may lower it, not raise it) and the max_tokens cap
 * as the default. */
static void test_priority_and_default_cap(void **state) {
    (void)state;
    ix_server *s = server_with("prio.json", "{\"keys\": [{\"name\":\"p\",\"key\":\"sk-p\",\"priority\":5,"
                                            "\"max_tokens\":7}]}",
                               0, 0, NULL);
    ixs_conn cc;
    memset(&cc, 0, sizeof cc);
    cc.s = s;
    cc.key = ix__policy_auth(s, "sk-p");
    assert_int_equal(cc.key, 0); /* no plain keys: the file's first */
    assert_int_equal(ix__policy_auth(s, "sk-other"), -1);
    static const struct {
        const char *req;
        int32_t asked, want;
    } cases[] = {
        {"{}", 0, 5},                /* none asked: the key's */
        {"{\"priority\": 9}", 9, 5}, /* not above the key's */
        {"{\"priority\": 2}", 2, 2}, /* lower is fine */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *req = json_loads(cases[i].req, 0, NULL);
        ix_request_params r = ix_request_default_params();
        r.priority = cases[i].asked;
        r.max_tokens = 0; /* chat without max_tokens: until the context is full */
        size_t np = 10;
        ixs_job_pol jp;
        memset(&jp, 0, sizeof jp);
        ixs_err e;
        assert_int_equal(ix__policy_admit(&cc, req, &r, &np, 1, false, &jp, &e), 0);
        assert_int_equal(r.priority, cases[i].want);
        assert_int_equal(r.max_tokens, 7);
        ix_usage u = {0};
        ix__policy_job_end(s, &jp, &u, 0);
        json_decref(req);
    }
    ix_server_destroy(s);
}

static void test_reload(void **state) {
    (void)state;
    ix_server *s = server_with("reload.json",
                               "{\"keys\": [{\"name\":\"stay\",\"key\":\"sk-stay\",\"requests_per_minute\":1},"
                               "{\"name\":\"gone\",\"key\":\"sk-gone\"}]}",
                               0, 0, NULL);
    resp r;
    assert_int_equal(req(s, "sk-stay", "POST", "/v1/completions", exact_body(2, NULL), &r), 200);
    resp_free(&r);
    /* a bad file: an error naming the field, and the keys stay as they were */
    write_file(path_of("reload.json"), "{\"keys\": [{\"name\":\"stay\",\"key\":\"sk-stay\",\"max_tokens\":-1}]}");
    ix_errbuf err = {{0}};
    assert_int_equal(ix_server_reload_keys(s, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "keys[0].max_tokens"));
    assert_int_equal(req(s, "sk-gone", "POST", "/v1/completions", exact_body(1, NULL), &r), 200);
    resp_free(&r);
    /* stay: a new limit and a new secret, its window kept; gone: revoked; new: added */
    write_file(path_of("reload.json"), "{\"keys\": [{\"name\":\"new\",\"key\":\"sk-new\",\"max_tokens\":3},"
                                       "{\"name\":\"stay\",\"key\":\"sk-stay2\",\"requests_per_minute\":1}]}");
    assert_int_equal(ix_server_reload_keys(s, &err), IX_OK);
    req(s, "sk-gone", "POST", "/v1/completions", exact_body(1, NULL), &r);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    req(s, "sk-stay", "POST", "/v1/completions", exact_body(1, NULL), &r);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    req(s, "sk-stay2", "POST", "/v1/completions", exact_body(1, NULL), &r);
    expect_error(&r, 429, "rate_limit_exceeded", "rate_limit_exceeded", "requests per minute: limit 1");
    resp_free(&r);
    req(s, "sk-new", "POST", "/v1/completions", exact_body(4, NULL), &r);
    expect_error(&r, 400, "invalid_request_error", "max_tokens_exceeded", "at most 3");
    resp_free(&r);
    assert_int_equal(usage_int(s, "sk-stay2", "totals", "requests"), 1);
    ix_server_destroy(s);
    /* a server without a keys file has nothing to reload */
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    assert_int_equal(ix_server_create(&s, g_engine, &sp, &err), IX_OK);
    assert_int_equal(ix_server_reload_keys(s, &err), IX_ERR_STATE);
    ix_server_destroy(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_file_errors),        cmocka_unit_test(test_requests_per_minute),
        cmocka_unit_test(test_tokens_per_minute),       cmocka_unit_test(test_concurrency_and_caps),
        cmocka_unit_test(test_budgets_persist),         cmocka_unit_test(test_usage_metrics_and_secrets),
        cmocka_unit_test(test_timeouts),                cmocka_unit_test(test_reload),
        cmocka_unit_test(test_priority_and_default_cap),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
