/* server: the endpoints beyond completions and chat, end to end on the
 * bundled model, in process:
 *   - GET /v1/models/{id}: the served model, 404 model_not_found otherwise
 *   - POST /v1/embeddings: the vector is the normalized mean of the final
 *     norm's hidden states (checked against ix_model_forward_hidden over the
 *     whole input in one pass, so the server's chunking is checked too);
 *     same input same vector, a batch equals its singles, texts differ, token
 *     input equals text input, base64 is the float32 bytes, usage; bad inputs
 *     are 400s naming the field; two requests at once beside a generation
 *   - POST /v1/responses: greedy output equals chat's for the same messages
 *     (instructions as the system message); the Response object; the
 *     streaming events in the documented order, deltas adding up to the text;
 *     text.format json_schema / json_object output parses and validates;
 *     forced tool calls as function_call items (whole, streamed, round trip);
 *     errors name the Responses API's fields */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/engine.h"
#include "inferx/server.h"
#include "http_client.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"

static ix_model *g_model;
static ix_engine *g_engine;
static ix_server *g_srv;
static uint16_t g_port;

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
    sp.model_name = "org/tiny"; /* an id with a slash, as hub names have */
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
    return 0;
}

/* Sends body; checks the status; returns the parsed JSON (caller decrefs). */
static json_t *call(const char *method, const char *path, const char *body, int want_status) {
    return http_json(g_port, NULL, method, path, body, want_status);
}

/* A 400 whose error names param. */
static void expect_400(const char *path, const char *body, const char *param) {
    json_t *j = call("POST", path, body, 400);
    json_t *err = json_object_get(j, "error");
    const char *got = json_string_value(json_object_get(err, "param"));
    if (!got || strcmp(got, param))
        fail_msg("%s %s: param %s, want %s (%s)", path, body, got ? got : "null", param,
                 json_string_value(json_object_get(err, "message")));
    assert_string_equal(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    json_decref(j);
}

/* ---- /v1/models/{id} ------------------------------------------------------ */

static void test_model_by_id(void **state) {
    (void)state;
    json_t *j = call("GET", "/v1/models/org/tiny", NULL, 200);
    assert_string_equal(json_string_value(json_object_get(j, "id")), "org/tiny");
    assert_string_equal(json_string_value(json_object_get(j, "object")), "model");
    assert_true(json_is_integer(json_object_get(j, "created")));
    assert_string_equal(json_string_value(json_object_get(j, "owned_by")), "inferx");
    json_decref(j);
    j = call("GET", "/v1/models/gpt-4o", NULL, 404);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "model_not_found");
    json_decref(j);
    j = call("GET", "/v1/models/org", NULL, 404);
    json_decref(j);
    j = call("POST", "/v1/models/org/tiny", "{}", 405);
    json_decref(j);
}

/* ---- /v1/embeddings --------------------------------------------------------- */

static int32_t n_embd(void) { return ix_model_get_hparams(g_model)->n_embd; }

/* data[i].embedding as floats (float format). */
static float *vec_of(json_t *j, size_t i) {
    json_t *item = json_array_get(json_object_get(j, "data"), i);
    assert_int_equal(json_integer_value(json_object_get(item, "index")), (json_int_t)i);
    assert_string_equal(json_string_value(json_object_get(item, "object")), "embedding");
    json_t *e = json_object_get(item, "embedding");
    assert_int_equal(json_array_size(e), (size_t)n_embd());
    float *v = malloc((size_t)n_embd() * sizeof *v);
    for (int32_t k = 0; k < n_embd(); k++) v[k] = (float)json_number_value(json_array_get(e, (size_t)k));
    return v;
}

static double max_diff(const float *a, const float *b) {
    double d = 0;
    for (int32_t k = 0; k < n_embd(); k++) d = fmax(d, fabs((double)a[k] - b[k]));
    return d;
}

/* The reference: every token's final-norm hidden state from one forward
 * pass over the whole input, averaged, normalized. */
static float *ref_embedding(const ix_token_vec *ids) {
    const ix_model_hparams *hp = ix_model_get_hparams(g_model);
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(g_model, &kp);
    kp.n_blocks = (int64_t)(ids->n / (size_t)kp.block_size + 2);
    kp.enable_prefix_cache = false;
    ix_kv *kv;
    assert_int_equal(ix_kv_create(&kp, &kv, NULL), IX_OK);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = (int32_t)ids->n;
    cp.n_threads = 1;
    ix_model_ctx *c;
    assert_int_equal(ix_model_ctx_create(&c, g_model, kv, &cp, NULL), IX_OK);
    int32_t seq, n = (int32_t)ids->n;
    assert_int_equal(ix_kv_seq_create(kv, 0, &seq), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, seq, n, NULL), IX_OK);
    int32_t *pos = malloc((size_t)n * sizeof *pos), *sq = malloc((size_t)n * sizeof *sq);
    uint8_t *out = malloc((size_t)n);
    for (int32_t t = 0; t < n; t++) pos[t] = t, sq[t] = seq, out[t] = 1;
    float *h = malloc((size_t)n * (size_t)hp->n_embd * sizeof *h); /* (n, n_embd) */
    ix_batch b = {n, ids->ids, pos, sq, out};
    assert_int_equal(ix_model_forward_hidden(c, &b, h), IX_OK);
    float *v = calloc((size_t)hp->n_embd, sizeof *v);
    double norm = 0;
    for (int32_t k = 0; k < hp->n_embd; k++) {
        double s = 0;
        for (int32_t t = 0; t < n; t++) s += h[(size_t)t * (size_t)hp->n_embd + (size_t)k];
        v[k] = (float)s;
        norm += s * s;
    }
    for (int32_t k = 0; k < hp->n_embd; k++) v[k] = (float)(v[k] / sqrt(norm));
    free(pos);
    free(sq);
    free(out);
    free(h);
    ix_model_ctx_destroy(c);
    ix_kv_destroy(kv);
    return v;
}

static ix_token_vec tokenize(const char *text) {
    ix_token_vec ids = {0};
    assert_int_equal(
        ix_tokenizer_encode(ix_model_tokenizer(g_model), text, strlen(text), IX_TOK_ADD_SPECIAL, &ids, NULL), IX_OK);
    return ids;
}

static void test_embeddings_values(void **state) {
    (void)state;
    /* Long enough for two of the server's passes (256 tokens each). */
    char text[4096] = "";
    while (strlen(text) < 1400) strcat(text, "It is a truth universally acknowledged, that a single man ");
    ix_token_vec ids = tokenize(text);
    assert_true(ids.n > 256 && ids.n < 512);
    char *body = malloc(strlen(text) + 64);
    sprintf(body, "{\"input\":\"%s\",\"model\":\"org/tiny\"}", text);
    json_t *j = call("POST", "/v1/embeddings", body, 200);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "list");
    assert_string_equal(json_string_value(json_object_get(j, "model")), "org/tiny");
    json_t *u = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), (json_int_t)ids.n);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), (json_int_t)ids.n);
    float *got = vec_of(j, 0), *ref = ref_embedding(&ids);
    double norm = 0;
    for (int32_t k = 0; k < n_embd(); k++) norm += (double)got[k] * got[k];
    assert_true(fabs(norm - 1.0) < 1e-5);
    if (max_diff(got, ref) > 1e-4) fail_msg("embedding differs from the one-pass reference by %g", max_diff(got, ref));
    /* the same input again: the same vector */
    json_t *j2 = call("POST", "/v1/embeddings", body, 200);
    float *again = vec_of(j2, 0);
    assert_true(max_diff(got, again) == 0);
    free(again);
    json_decref(j2);
    free(got);
    free(ref);
    free(body);
    json_decref(j);
    ix_token_vec_free(&ids);
}

static void test_embeddings_batch(void **state) {
    (void)state;
    static const char *const texts[] = {"Mr. Darcy", "Elizabeth Bennet walked to Netherfield", "Pemberley"};
    json_t *batch = call("POST", "/v1/embeddings",
                         "{\"input\":[\"Mr. Darcy\",\"Elizabeth Bennet walked to Netherfield\",\"Pemberley\"]}", 200);
    assert_int_equal(json_array_size(json_object_get(batch, "data")), 3);
    json_int_t total = 0;
    float *v[3];
    for (size_t i = 0; i < 3; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"input\":\"%s\",\"encoding_format\":\"float\"}", texts[i]);
        json_t *one = call("POST", "/v1/embeddings", body, 200);
        float *a = vec_of(one, 0);
        v[i] = vec_of(batch, i);
        if (max_diff(a, v[i]) > 1e-6) fail_msg("input %zu: batch and single differ by %g", i, max_diff(a, v[i]));
        total += json_integer_value(json_object_get(json_object_get(one, "usage"), "prompt_tokens"));
        free(a);
        json_decref(one);
    }
    assert_int_equal(json_integer_value(json_object_get(json_object_get(batch, "usage"), "prompt_tokens")), total);
    /* different texts: different directions */
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++) {
            double dot = 0;
            for (int32_t k = 0; k < n_embd(); k++) dot += (double)v[a][k] * v[b][k];
            if (dot > 0.9999) fail_msg("inputs %d and %d embed alike (cosine %g)", a, b, dot);
        }
    /* token ids: the same as the text they encode */
    ix_token_vec ids = tokenize(texts[1]);
    char body[1024];
    int o = snprintf(body, sizeof body, "{\"input\":[[");
    for (size_t i = 0; i < ids.n; i++) o += snprintf(body + o, sizeof body - (size_t)o, "%s%d", i ? "," : "", ids.ids[i]);
    snprintf(body + o, sizeof body - (size_t)o, "]]}");
    json_t *tj = call("POST", "/v1/embeddings", body, 200);
    float *tv = vec_of(tj, 0);
    assert_true(max_diff(tv, v[1]) < 1e-6);
    free(tv);
    json_decref(tj);
    /* base64: little-endian float32 of the same vector */
    snprintf(body, sizeof body, "{\"input\":\"%s\",\"encoding_format\":\"base64\",\"dimensions\":%d}", texts[2],
             (int)n_embd());
    json_t *bj = call("POST", "/v1/embeddings", body, 200);
    const char *b64 = json_string_value(json_object_get(json_array_get(json_object_get(bj, "data"), 0), "embedding"));
    assert_non_null(b64);
    assert_int_equal(strlen(b64), ((size_t)n_embd() * 4 + 2) / 3 * 4);
    static const char k_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char *raw = calloc((size_t)n_embd() * 4 + 3, 1);
    size_t nb = 0;
    for (size_t i = 0; b64[i]; i += 4) {
        uint32_t x = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = b64[i + (size_t)k] == '=' ? NULL : strchr(k_alpha, b64[i + (size_t)k]);
            if (!p) pad++;
            x = x << 6 | (uint32_t)(p ? p - k_alpha : 0);
        }
        raw[nb++] = (unsigned char)(x >> 16);
        if (pad < 2) raw[nb++] = (unsigned char)(x >> 8);
        if (pad < 1) raw[nb++] = (unsigned char)x;
    }
    assert_int_equal(nb, (size_t)n_embd() * 4);
    for (int32_t k = 0; k < n_embd(); k++) {
        uint32_t u = (uint32_t)raw[4 * k] | (uint32_t)raw[4 * k + 1] << 8 | (uint32_t)raw[4 * k + 2] << 16 |
                     (uint32_t)raw[4 * k + 3] << 24;
        float f;
        memcpy(&f, &u, 4);
        assert_true(fabsf(f - v[2][k]) < 1e-6f);
    }
    free(raw);
    json_decref(bj);
    for (int i = 0; i < 3; i++) free(v[i]);
    json_decref(batch);
    ix_token_vec_free(&ids);
}

/* Embeddings run on HTTP threads beside the engine: two at once (they take
 * turns on the embedder) while a completion generates, all answer, and the
 * vectors do not depend on what ran beside them. */
static void test_embeddings_concurrent(void **state) {
    (void)state;
    const char *emb = "{\"input\":[\"Mr. Darcy\",\"Pemberley\",\"Longbourn\"]}";
    json_t *alone = call("POST", "/v1/embeddings", emb, 200);
    client_job c[3] = {
        {g_port, "/v1/completions", "{\"prompt\":\"Emma\",\"max_tokens\":200,\"ignore_eos\":true}", {0}, -1},
        {g_port, "/v1/embeddings", emb, {0}, -1},
        {g_port, "/v1/embeddings", emb, {0}, -1},
    };
    pthread_t th[3];
    for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, client_thread, &c[i]);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(c[i].rc, 0);
        if (c[i].r.status != 200) fail_msg("%s: %d %s", c[i].path, c[i].r.status, c[i].r.body);
        if (i > 0) {
            json_t *j = json_loads(c[i].r.body, 0, NULL);
            for (size_t k = 0; k < 3; k++) {
                float *a = vec_of(alone, k), *b = vec_of(j, k);
                assert_true(max_diff(a, b) == 0);
                free(a);
                free(b);
            }
            json_decref(j);
        }
        resp_free(&c[i].r);
    }
    json_decref(alone);
}

static void test_embeddings_errors(void **state) {
    (void)state;
    const char *p = "/v1/embeddings";
    expect_400(p, "{}", "input");
    expect_400(p, "{\"input\":\"\"}", "input");
    expect_400(p, "{\"input\":[]}", "input");
    expect_400(p, "{\"input\":[\"a\",\"\"]}", "input");
    expect_400(p, "{\"input\":[[]]}", "input");
    expect_400(p, "{\"input\":42}", "input");
    expect_400(p, "{\"input\":[\"a\",7]}", "input");
    expect_400(p, "{\"input\":[1,-2]}", "input");
    expect_400(p, "{\"input\":[[1,99999999]]}", "input");
    expect_400(p, "{\"input\":\"a\",\"encoding_format\":\"int8\"}", "encoding_format");
    expect_400(p, "{\"input\":\"a\",\"dimensions\":3}", "dimensions");
    expect_400(p, "{\"input\":\"a\",\"dimensions\":\"all\"}", "dimensions");
    expect_400(p, "{\"input\":\"a\",\"user\":5}", "user");
    expect_400(p, "{\"input\":\"a\",\"truncate\":true}", "truncate");
    /* more tokens than the context */
    size_t n = 600;
    char *body = malloc(n * 3 + 32);
    int o = sprintf(body, "{\"input\":[");
    for (size_t i = 0; i < n; i++) o += sprintf(body + o, "%s5", i ? "," : "");
    sprintf(body + o, "]}");
    json_t *j = call("POST", p, body, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
                        "context_length_exceeded");
    json_decref(j);
    /* more inputs than a request takes */
    o = sprintf(body, "{\"input\":[");
    for (size_t i = 0; i < 257; i++) o += sprintf(body + o, "%s\"a\"", i ? "," : "");
    sprintf(body + o, "]}");
    expect_400(p, body, "input");
    free(body);
    /* wrong model: 404 */
    json_decref(call("POST", p, "{\"input\":\"a\",\"model\":\"text-embedding-3-small\"}", 404));
}

/* ---- /v1/responses ------------------------------------------------------------ */

static const char *out_text(json_t *obj) {
    json_t *msg = json_array_get(json_object_get(obj, "output"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(msg, "role")), "assistant");
    json_t *part = json_array_get(json_object_get(msg, "content"), 0);
    assert_string_equal(json_string_value(json_object_get(part, "type")), "output_text");
    assert_true(json_is_array(json_object_get(part, "annotations")));
    return json_string_value(json_object_get(part, "text"));
}

static void test_responses_whole(void **state) {
    (void)state;
    json_t *chat = call("POST", "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                        "{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_completion_tokens\":10,"
                        "\"temperature\":0}",
                        200);
    const char *want = json_string_value(
        json_object_get(json_object_get(json_array_get(json_object_get(chat, "choices"), 0), "message"), "content"));
    /* text input + instructions, and the same as an item list */
    const char *bodies[] = {
        "{\"model\":\"org/tiny\",\"instructions\":\"Be brief.\",\"input\":\"Hello there\",\"max_output_tokens\":10,"
        "\"temperature\":0,\"store\":false,\"metadata\":{\"k\":\"v\"}}",
        "{\"input\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"type\":\"message\",\"role\":\"user\","
        "\"content\":[{\"type\":\"input_text\",\"text\":\"Hello there\"}]}],\"max_output_tokens\":10,"
        "\"temperature\":0}",
    };
    for (size_t i = 0; i < 2; i++) {
        json_t *r = call("POST", "/v1/responses", bodies[i], 200);
        assert_true(!strncmp(json_string_value(json_object_get(r, "id")), "resp_", 5));
        assert_string_equal(json_string_value(json_object_get(r, "object")), "response");
        assert_string_equal(json_string_value(json_object_get(r, "model")), "org/tiny");
        assert_true(json_is_integer(json_object_get(r, "created_at")));
        assert_string_equal(out_text(r), want);
        const char *status = json_string_value(json_object_get(r, "status"));
        const char *reason = json_string_value(
            json_object_get(json_array_get(json_object_get(chat, "choices"), 0), "finish_reason"));
        if (!strcmp(reason, "length")) {
            assert_string_equal(status, "incomplete");
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(r, "incomplete_details"), "reason")),
                "max_output_tokens");
        } else {
            assert_string_equal(status, "completed");
        }
        json_t *u = json_object_get(r, "usage"), *cu = json_object_get(chat, "usage");
        assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")),
                         json_integer_value(json_object_get(cu, "prompt_tokens")));
        assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")),
                         json_integer_value(json_object_get(cu, "completion_tokens")));
        assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")),
                         json_integer_value(json_object_get(cu, "total_tokens")));
        assert_true(json_is_integer(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")));
        assert_int_equal(json_integer_value(json_object_get(r, "max_output_tokens")), 10);
        /* store: false as asked; true by default (OpenAI's), then it is kept */
        assert_true(i == 0 ? json_is_false(json_object_get(r, "store")) : json_is_true(json_object_get(r, "store")));
        if (i == 0) {
            assert_string_equal(json_string_value(json_object_get(r, "instructions")), "Be brief.");
            assert_string_equal(json_string_value(json_object_get(json_object_get(r, "metadata"), "k")), "v");
        }
        json_decref(r);
    }
    json_decref(chat);
}

static void test_responses_stream(void **state) {
    (void)state;
    const char *body = "{\"input\":\"Mr. Darcy\",\"max_output_tokens\":12,\"temperature\":0,\"stream\":true}";
    json_t *whole = call("POST", "/v1/responses",
                         "{\"input\":\"Mr. Darcy\",\"max_output_tokens\":12,\"temperature\":0}", 200);
    resp r;
    assert_int_equal(http(g_port, "POST", "/v1/responses", NULL, body, &r), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.head, "text/event-stream"));
    assert_null(strstr(r.body, "[DONE]"));
    bool done_last;
    json_t *ev = parse_sse(r.body, &done_last);
    size_t n = json_array_size(ev);
    assert_true(n >= 9);
    static const char *const head[] = {"response.created", "response.in_progress", "response.output_item.added",
                                       "response.content_part.added"};
    static const char *const tail[] = {"response.output_text.done", "response.content_part.done",
                                       "response.output_item.done"};
    char text[4096] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i);
        const char *type = json_string_value(json_object_get(e, "type"));
        assert_int_equal(json_integer_value(json_object_get(e, "sequence_number")), (json_int_t)i);
        /* the SSE event line names the same type */
        char line[128];
        snprintf(line, sizeof line, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%zu,", type, type, i);
        assert_non_null(strstr(r.body, line));
        if (i < 4) {
            assert_string_equal(type, head[i]);
        } else if (i < n - 4) {
            assert_string_equal(type, "response.output_text.delta");
            strncat(text, json_string_value(json_object_get(e, "delta")), sizeof text - strlen(text) - 1);
        } else if (i < n - 1) {
            assert_string_equal(type, tail[i - (n - 4)]);
        } else {
            json_t *ro = json_object_get(e, "response");
            const char *status = json_string_value(json_object_get(ro, "status"));
            assert_string_equal(type, !strcmp(status, "completed") ? "response.completed" : "response.incomplete");
            assert_string_equal(status, json_string_value(json_object_get(whole, "status")));
            assert_string_equal(out_text(ro), out_text(whole));
            assert_int_equal(
                json_integer_value(json_object_get(json_object_get(ro, "usage"), "output_tokens")),
                json_integer_value(json_object_get(json_object_get(whole, "usage"), "output_tokens")));
            assert_string_equal(json_string_value(json_object_get(ro, "id")),
                                json_string_value(json_object_get(json_object_get(json_array_get(ev, 0), "response"), "id")));
        }
    }
    assert_string_equal(text, out_text(whole));
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, n - 4), "text")), text);
    json_t *created = json_object_get(json_array_get(ev, 0), "response");
    assert_string_equal(json_string_value(json_object_get(created, "status")), "in_progress");
    assert_true(json_is_null(json_object_get(created, "usage")));
    json_decref(ev);
    json_decref(whole);
    resp_free(&r);
}

/* text.format json_schema: the output parses and validates, whole and
 * streamed (the bundled model writes nonsense; the grammar keeps its shape). */
static void test_responses_text_format(void **state) {
    (void)state;
    static const char k_schema[] =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
        "\"role\":{\"enum\":[\"captain\",\"sailor\"]}},"
        "\"required\":[\"name\",\"age\",\"role\"],\"additionalProperties\":false}";
    char body[2048];
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body,
                 "{\"input\":\"Who is on deck?\",\"temperature\":1.1,\"seed\":3,\"max_output_tokens\":120,"
                 "\"stream\":%s,\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"person\","
                 "\"strict\":true,\"schema\":%s}}}",
                 stream ? "true" : "false", k_schema);
        json_t *obj;
        if (stream) {
            resp r;
            assert_int_equal(http(g_port, "POST", "/v1/responses", NULL, body, &r), 0);
            assert_int_equal(r.status, 200);
            bool done_last;
            json_t *ev = parse_sse(r.body, &done_last);
            obj = json_incref(json_object_get(json_array_get(ev, json_array_size(ev) - 1), "response"));
            json_decref(ev);
            resp_free(&r);
        } else {
            obj = call("POST", "/v1/responses", body, 200);
        }
        assert_string_equal(json_string_value(json_object_get(obj, "status")), "completed");
        assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(obj, "text"), "format"),
                                                              "type")),
                            "json_schema");
        json_error_t je;
        json_t *doc = json_loads(out_text(obj), 0, &je);
        if (!doc) fail_msg("not JSON (%s): '%s'", je.text, out_text(obj));
        assert_int_equal(json_object_size(doc), 3);
        assert_non_null(json_string_value(json_object_get(doc, "name")));
        json_t *age = json_object_get(doc, "age");
        assert_true(json_is_integer(age) && json_integer_value(age) >= 0 && json_integer_value(age) <= 120);
        const char *role = json_string_value(json_object_get(doc, "role"));
        assert_true(role && (!strcmp(role, "captain") || !strcmp(role, "sailor")));
        json_decref(doc);
        json_decref(obj);
    }
    /* json_object: an object */
    json_t *obj = call("POST", "/v1/responses",
                       "{\"input\":\"JSON please\",\"max_output_tokens\":60,\"seed\":1,"
                       "\"text\":{\"format\":{\"type\":\"json_object\"}}}",
                       200);
    if (!strcmp(json_string_value(json_object_get(obj, "status")), "completed")) {
        json_t *doc = json_loads(out_text(obj), 0, NULL);
        assert_true(json_is_object(doc));
        json_decref(doc);
    } else {
        const char *t = out_text(obj);
        t += strspn(t, " \t\r\n");
        assert_int_equal(t[0], '{');
    }
    json_decref(obj);
    /* a schema the grammar module refuses: 400 naming text.format's field */
    expect_400("/v1/responses",
               "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\","
               "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/missing\"}}}}}}",
               "text.format.schema");
}

/* tools: a forced call comes back as a well-formed function_call item,
 * whole and streamed; its output goes back as function_call_output. */
#define WEATHER_TOOL                                                                                                  \
    "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather in a city\","                 \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12}},"          \
    "\"required\":[\"city\"],\"additionalProperties\":false}}]"

static void assert_weather_call(json_t *item) {
    assert_string_equal(json_string_value(json_object_get(item, "type")), "function_call");
    assert_string_equal(json_string_value(json_object_get(item, "name")), "get_weather");
    assert_true(!strncmp(json_string_value(json_object_get(item, "id")), "fc_", 3));
    assert_true(!strncmp(json_string_value(json_object_get(item, "call_id")), "call_", 5));
    assert_string_equal(json_string_value(json_object_get(item, "status")), "completed");
    json_t *args = json_loads(json_string_value(json_object_get(item, "arguments")), 0, NULL);
    assert_true(json_is_object(args));
    assert_int_equal(json_object_size(args), 1);
    assert_non_null(json_string_value(json_object_get(args, "city")));
    json_decref(args);
}

static void test_responses_tools(void **state) {
    (void)state;
    json_t *r = call("POST", "/v1/responses",
                     "{\"input\":\"Weather in Bath?\",\"max_output_tokens\":80,\"parallel_tool_calls\":false,"
                     "\"tool_choice\":\"required\"," WEATHER_TOOL "}",
                     200);
    assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
    json_t *out = json_object_get(r, "output");
    assert_int_equal(json_array_size(out), 1);
    assert_weather_call(json_array_get(out, 0));
    assert_string_equal(json_string_value(json_object_get(r, "tool_choice")), "required");
    /* the call and its output back in the input: a new answer */
    char body[2048];
    json_t *c = json_array_get(out, 0);
    char *args = json_dumps(json_object_get(c, "arguments"), JSON_ENCODE_ANY);
    snprintf(body, sizeof body,
             "{\"input\":[{\"role\":\"user\",\"content\":\"Weather in Bath?\"},{\"type\":\"function_call\","
             "\"call_id\":\"%s\",\"name\":\"get_weather\",\"arguments\":%s},{\"type\":\"function_call_output\","
             "\"call_id\":\"%s\",\"output\":\"Sunny\"}],\"max_output_tokens\":6,\"tool_choice\":\"none\"," WEATHER_TOOL "}",
             json_string_value(json_object_get(c, "call_id")), args, json_string_value(json_object_get(c, "call_id")));
    free(args);
    json_t *r2 = call("POST", "/v1/responses", body, 200);
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(r2, "output"), 0), "type")),
                        "message");
    json_decref(r2);
    json_decref(r);
    /* streamed: the item opens, its arguments arrive, it closes */
    resp h;
    assert_int_equal(http(g_port, "POST", "/v1/responses", NULL,
                          "{\"input\":\"Weather in Bath?\",\"max_output_tokens\":80,\"stream\":true,"
                          "\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"}," WEATHER_TOOL "}",
                          &h),
                     0);
    assert_int_equal(h.status, 200);
    bool done_last;
    json_t *ev = parse_sse(h.body, &done_last);
    static const char *const want[] = {"response.created", "response.in_progress", "response.output_item.added",
                                       "response.function_call_arguments.delta",
                                       "response.function_call_arguments.done", "response.output_item.done",
                                       "response.completed"};
    assert_int_equal(json_array_size(ev), IX_ARRAY_LEN(want));
    for (size_t i = 0; i < IX_ARRAY_LEN(want); i++) {
        json_t *e = json_array_get(ev, i);
        assert_string_equal(json_string_value(json_object_get(e, "type")), want[i]);
        assert_int_equal(json_integer_value(json_object_get(e, "sequence_number")), (json_int_t)i);
    }
    json_t *item = json_object_get(json_array_get(ev, 5), "item");
    assert_weather_call(item);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 3), "delta")),
                        json_string_value(json_object_get(item, "arguments")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 2), "item")
                                              ? json_object_get(json_object_get(json_array_get(ev, 2), "item"), "id")
                                              : NULL),
                        json_string_value(json_object_get(item, "id")));
    json_t *fin = json_object_get(json_array_get(ev, 6), "response");
    assert_weather_call(json_array_get(json_object_get(fin, "output"), 0));
    json_decref(ev);
    resp_free(&h);
    /* bad tools name the field */
    expect_400("/v1/responses", "{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools");
    expect_400("/v1/responses",
               "{\"input\":\"x\",\"tool_choice\":{\"type\":\"function\",\"name\":\"nope\"}," WEATHER_TOOL "}",
               "tool_choice");
}

static void test_responses_errors(void **state) {
    (void)state;
    const char *p = "/v1/responses";
    expect_400(p, "{}", "input");
    expect_400(p, "{\"input\":5}", "input");
    expect_400(p, "{\"input\":[]}", "input");
    expect_400(p, "{\"input\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "input");
    expect_400(p, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
               "input");
    expect_400(p, "{\"input\":[{\"type\":\"web_search_call\"}]}", "input");
    expect_400(p, "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "input");
    expect_400(p, "{\"input\":\"x\",\"frobnicate\":1}", "frobnicate");
    expect_400(p, "{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens");
    expect_400(p, "{\"input\":\"x\",\"temperature\":9}", "temperature");
    expect_400(p, "{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id");
    expect_400(p, "{\"input\":\"x\",\"truncation\":\"auto\"}", "truncation");
    expect_400(p, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"high\"}}", "reasoning");
    expect_400(p, "{\"input\":\"x\",\"include\":[\"message.output_text.logprobs\"]}", "include");
    expect_400(p, "{\"input\":\"x\",\"instructions\":3}", "instructions");
    expect_400(p, "{\"input\":\"x\",\"max_tool_calls\":0}", "max_tool_calls");
    expect_400(p, "{\"input\":\"x\",\"text\":{\"verbosity\":\"high\"}}", "text.verbosity");
    expect_400(p, "{\"input\":\"x\",\"top_logprobs\":3}", "top_logprobs");
    expect_400(p, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"bogus\"}}}", "text.format");
    expect_400(p, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\"}}}",
               "text.format.schema");
    expect_400(p, "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools");
    expect_400(p, "{\"input\":\"x\",\"tool_choice\":{\"type\":\"function\"}}", "tool_choice");
    /* the context: the input is too long */
    char *body = malloc(20000);
    strcpy(body, "{\"input\":\"");
    for (int i = 0; i < 900; i++) strcat(body, "word ");
    strcat(body, "\"}");
    json_t *j = call("POST", p, body, 400);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "input");
    json_decref(j);
    free(body);
}

int main(void) {
    FILE *f = fopen(MODEL, "rb");
    if (!f) {
        printf("skip: %s not found\n", MODEL);
        return 77;
    }
    fclose(f);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_by_id),
        cmocka_unit_test(test_embeddings_values),
        cmocka_unit_test(test_embeddings_batch),
        cmocka_unit_test(test_embeddings_concurrent),
        cmocka_unit_test(test_embeddings_errors),
        cmocka_unit_test(test_responses_whole),
        cmocka_unit_test(test_responses_stream),
        cmocka_unit_test(test_responses_text_format),
        cmocka_unit_test(test_responses_tools),
        cmocka_unit_test(test_responses_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
