/* server: sessions and stored responses, end to end on the bundled model, in
 * process, with two API keys (two tenants) and a disk tier in a temporary
 * folder:
 *   - session_id pins a conversation: GET /v1/sessions/{id} reports its
 *     tokens in RAM; POST .../save puts every block on disk; DELETE removes
 *     it; another tenant's GET, save and DELETE get 404 like an unknown id;
 *     malformed and oversized ids and bad session fields are 400s
 *   - a session's TTL ends it (polled, bounded; no timing asserted)
 *   - /v1/responses store + previous_response_id: the chained turn's greedy
 *     output equals the same conversation sent whole; its prompt is served
 *     from the prefix cache (the previous turn's KV, pinned); GET and DELETE
 *     /v1/responses/{id}; another tenant cannot read, chain or delete it */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "inferx/engine.h"
#include "inferx/server.h"
#include "http_client.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define KEY_A "Authorization: Bearer key-a\r\n"
#define KEY_B "Authorization: Bearer key-b\r\n"

static ix_model *g_model;
static ix_engine *g_engine;
static ix_server *g_srv;
static uint16_t g_port;
static char g_dir[64];

static int setup(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    snprintf(g_dir, sizeof g_dir, "/tmp/ix_sessions_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    if (ix_model_load(&g_model, MODEL, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    ix_engine_params ep = ix_engine_default_params();
    ep.n_threads = 2;
    ep.kv_disk_dir = g_dir;
    if (ix_engine_create(&g_engine, g_model, &ep, &err) != IX_OK) return -1;
    ix_server_params sp = ix_server_default_params();
    static const char *const keys[] = {"key-b"};
    sp.port = 0;
    sp.api_key = "key-a";
    sp.api_keys = keys;
    sp.n_api_keys = 1;
    sp.state_dir = g_dir;
    if (ix_server_create(&g_srv, g_engine, &sp, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    g_port = ix_server_port(g_srv);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ix_server_destroy(g_srv);
    ix_engine_destroy(g_engine);
    ix_model_destroy(g_model);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static json_t *call(const char *key, const char *method, const char *path, const char *body, int want_status) {
    return http_json(g_port, key, method, path, body, want_status);
}

static void expect_status(const char *key, const char *method, const char *path, const char *body, int status) {
    json_decref(call(key, method, path, body, status));
}

static json_int_t num(json_t *j, const char *field) { return json_integer_value(json_object_get(j, field)); }

#define CHAT_BODY(extra)                                                                                            \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You are a helpful assistant who answers in one line.\"},"      \
    "{\"role\":\"user\",\"content\":\"Tell me about the sea and the ships on it.\"}],\"max_tokens\":24,"             \
    "\"temperature\":0" extra "}"

static void test_session_endpoints(void **state) {
    (void)state;
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":\"conv-1\""), 200);
    json_t *g = call(KEY_A, "GET", "/v1/sessions/conv-1", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(g, "object")), "session");
    assert_true(num(g, "tokens") >= 32);
    assert_int_equal(num(g, "blocks_ram"), num(g, "blocks"));
    assert_true(json_integer_value(json_object_get(g, "expires_at")) > (json_int_t)time(NULL));
    json_decref(g);
    /* another tenant: as if it did not exist */
    expect_status(KEY_B, "GET", "/v1/sessions/conv-1", NULL, 404);
    expect_status(KEY_B, "POST", "/v1/sessions/conv-1/save", NULL, 404);
    expect_status(KEY_B, "DELETE", "/v1/sessions/conv-1", NULL, 404);
    expect_status(NULL, "GET", "/v1/sessions/conv-1", NULL, 401);
    /* save: every block on disk */
    json_t *sv = call(KEY_A, "POST", "/v1/sessions/conv-1/save", NULL, 200);
    assert_true(json_is_true(json_object_get(sv, "saved")));
    assert_int_equal(num(sv, "blocks_disk"), num(sv, "blocks"));
    json_decref(sv);
    /* the same conversation continued: its prefix comes from the cache */
    json_t *c = call(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":\"conv-1\""), 200);
    assert_true(num(json_object_get(json_object_get(c, "usage"), "prompt_tokens_details"), "cached_tokens") > 0);
    json_decref(c);
    /* delete: gone for good, from RAM and disk */
    json_t *d = call(KEY_A, "DELETE", "/v1/sessions/conv-1", NULL, 200);
    assert_true(json_is_true(json_object_get(d, "deleted")));
    json_decref(d);
    expect_status(KEY_A, "GET", "/v1/sessions/conv-1", NULL, 404);
    expect_status(KEY_A, "DELETE", "/v1/sessions/conv-1", NULL, 404);
    /* Ollama's chat takes it too */
    expect_status(KEY_A, "POST", "/api/chat",
                  "{\"model\":\"inferx\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}],"
                  "\"stream\":false,\"options\":{\"num_predict\":4,\"temperature\":0},\"session_id\":\"olla\"}",
                  200);
    expect_status(KEY_A, "GET", "/v1/sessions/olla", NULL, 200);
    expect_status(KEY_A, "DELETE", "/v1/sessions/olla", NULL, 200);
    /* bad input */
    char path[400];
    snprintf(path, sizeof path, "/v1/sessions/%0200d", 7);
    expect_status(KEY_A, "GET", path, NULL, 400);                       /* oversized */
    expect_status(KEY_A, "GET", "/v1/sessions/bad!id", NULL, 400);       /* malformed */
    expect_status(KEY_A, "GET", "/v1/sessions/a/b", NULL, 400);          /* a slash */
    expect_status(KEY_A, "POST", "/v1/sessions/conv-1/load", NULL, 404); /* no such action */
    json_t *na = call(KEY_A, "PUT", "/v1/sessions/conv-1", NULL, 405);
    assert_non_null(strstr(json_string_value(json_object_get(json_object_get(na, "error"), "message")),
                           "use GET, DELETE, POST"));
    json_decref(na);
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":7"), 400);
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":\"\""), 400);
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":\"x y\""), 400);
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_ttl\":60"), 400);
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":\"s\", \"session_ttl\":-1"), 400);
    expect_status(KEY_A, "POST", "/v1/chat/completions", CHAT_BODY(", \"session_id\":\"s\", \"session_ttl\":\"1\""),
                  400);
}

static void test_session_ttl(void **state) {
    (void)state;
    expect_status(KEY_A, "POST", "/v1/chat/completions",
                  CHAT_BODY(", \"session_id\":\"short\", \"session_ttl\":0.001"), 200);
    /* The engine checks expiry once a second; poll (bounded) until it is gone. */
    int status = 200;
    for (int i = 0; i < 600 && status == 200; i++) {
        resp r;
        assert_int_equal(http(g_port, "GET", "/v1/sessions/short", KEY_A, NULL, &r), 0);
        status = r.status;
        resp_free(&r);
        if (status == 200) usleep(50 * 1000);
    }
    assert_int_equal(status, 404);
    resp r;
    assert_int_equal(http(g_port, "GET", "/metrics", KEY_A, NULL, &r), 0);
    assert_non_null(strstr(r.body, "inferx:session_expired_total"));
    resp_free(&r);
}

static const char *out_text(json_t *r) {
    json_t *item = json_array_get(json_object_get(r, "output"), 0);
    return json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text"));
}

/* A response (not stored) to the whole conversation: the user's first
 * input, the previous response's output items, the next input. */
static json_t *send_whole(const char *first, json_t *prev, const char *next, int max_tokens) {
    json_t *in = json_pack("[{s:s, s:s, s:s}]", "type", "message", "role", "user", "content", first);
    json_array_extend(in, json_object_get(prev, "output"));
    json_array_append_new(in, json_pack("{s:s, s:s}", "role", "user", "content", next));
    json_t *whole = json_pack("{s:o, s:i, s:i, s:b}", "input", in, "max_output_tokens", max_tokens, "temperature", 0,
                              "store", 0);
    char *wb = json_dumps(whole, JSON_COMPACT);
    json_t *r = call(KEY_A, "POST", "/v1/responses", wb, 200);
    free(wb);
    json_decref(whole);
    return r;
}

#define SEA "Name a colour of the sea, and say in a few words why the sea has that colour on a sunny day."

static void test_previous_response(void **state) {
    (void)state;
    json_t *r1 = call(KEY_A, "POST", "/v1/responses",
                      "{\"input\":\"" SEA "\",\"max_output_tokens\":12,\"temperature\":0}",
                      200);
    assert_true(json_is_true(json_object_get(r1, "store")));
    const char *id1 = json_string_value(json_object_get(r1, "id"));
    char path[128], body[1024];
    snprintf(path, sizeof path, "/v1/responses/%s", id1);
    json_t *got = call(KEY_A, "GET", path, NULL, 200);
    assert_string_equal(json_string_value(json_object_get(got, "id")), id1);
    assert_string_equal(out_text(got), out_text(r1));
    json_decref(got);
    expect_status(KEY_B, "GET", path, NULL, 404); /* another tenant's */
    /* the next turn, chained */
    snprintf(body, sizeof body,
             "{\"previous_response_id\":\"%s\",\"input\":\"And of the sky?\",\"max_output_tokens\":12,"
             "\"temperature\":0}",
             id1);
    json_t *r2 = call(KEY_A, "POST", "/v1/responses", body, 200);
    assert_string_equal(json_string_value(json_object_get(r2, "previous_response_id")), id1);
    json_int_t cached = num(json_object_get(json_object_get(r2, "usage"), "input_tokens_details"), "cached_tokens");
    assert_true(cached > 0); /* the previous turn's KV */
    /* the same conversation sent whole (nothing stored) gives the same tokens */
    json_t *r3 = send_whole(SEA, r1, "And of the sky?", 12);
    assert_string_equal(out_text(r2), out_text(r3));
    assert_true(json_is_false(json_object_get(r3, "store")));
    /* another tenant cannot chain from it or delete it */
    json_t *rb = call(KEY_B, "POST", "/v1/responses", body, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(rb, "error"), "param")),
                        "previous_response_id");
    json_decref(rb);
    expect_status(KEY_B, "DELETE", path, NULL, 404);
    /* delete: gone, and chaining from it is refused */
    json_t *d = call(KEY_A, "DELETE", path, NULL, 200);
    assert_true(json_is_true(json_object_get(d, "deleted")));
    json_decref(d);
    expect_status(KEY_A, "GET", path, NULL, 404);
    expect_status(KEY_A, "POST", "/v1/responses", body, 400);
    expect_status(KEY_A, "GET", "/v1/responses/bad!id", NULL, 400);
    char big[160];
    snprintf(big, sizeof big, "/v1/responses/resp_%0100d", 1);
    expect_status(KEY_A, "GET", big, NULL, 400); /* oversized */
    expect_status(KEY_A, "GET", "/v1/responses/resp_nothing", NULL, 404);
    expect_status(KEY_A, "POST", "/v1/responses", "{\"input\":\"x\",\"previous_response_id\":3}", 400);
    expect_status(KEY_A, "POST", "/v1/responses", "{\"input\":\"x\",\"store\":\"yes\"}", 400);
    json_decref(r1);
    json_decref(r2);
    json_decref(r3);
}

/* The previous response's instructions are not carried over: the chained
 * turn equals the conversation sent whole without them. */
static void test_instructions_not_carried(void **state) {
    (void)state;
    json_t *r0 = call(KEY_A, "POST", "/v1/responses",
                      "{\"instructions\":\"Always answer in capital letters.\",\"input\":\"Hello\","
                      "\"max_output_tokens\":6,\"temperature\":0}",
                      200);
    char body[512];
    snprintf(body, sizeof body,
             "{\"previous_response_id\":\"%s\",\"input\":\"Again\",\"max_output_tokens\":6,\"temperature\":0}",
             json_string_value(json_object_get(r0, "id")));
    json_t *r1 = call(KEY_A, "POST", "/v1/responses", body, 200);
    assert_true(json_is_null(json_object_get(r1, "instructions")));
    json_t *r2 = send_whole("Hello", r0, "Again", 6);
    assert_string_equal(out_text(r1), out_text(r2));
    json_decref(r0);
    json_decref(r1);
    json_decref(r2);
}

/* A streamed response is stored too: its last event's object is what GET returns. */
static void test_stored_stream(void **state) {
    (void)state;
    resp r;
    assert_int_equal(http(g_port, "POST", "/v1/responses", KEY_A,
                          "{\"input\":\"Hi\",\"max_output_tokens\":6,\"temperature\":0,\"stream\":true}", &r),
                     0);
    assert_int_equal(r.status, 200);
    bool done_last;
    json_t *ev = parse_sse(r.body, &done_last);
    resp_free(&r);
    json_t *last = json_object_get(json_array_get(ev, json_array_size(ev) - 1), "response");
    const char *id = json_string_value(json_object_get(last, "id"));
    assert_non_null(id);
    char path[128];
    snprintf(path, sizeof path, "/v1/responses/%s", id);
    json_t *got = call(KEY_A, "GET", path, NULL, 200);
    assert_string_equal(out_text(got), out_text(last));
    json_decref(got);
    json_decref(ev);
}

int main(void) {
    if (access(MODEL, R_OK) != 0) {
        printf("skip: %s not found\n", MODEL);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_endpoints),
        cmocka_unit_test(test_session_ttl),
        cmocka_unit_test(test_previous_response),
        cmocka_unit_test(test_instructions_not_carried),
        cmocka_unit_test(test_stored_stream),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
