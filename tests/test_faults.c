/* Allocation-failure injection on the model, engine and server paths (the
 * GGUF reader, tokenizer, grammar and template have their own): for every
 * n, the (n+1)-th counted allocation from the start of the operation fails,
 * and so does every one after it, until the operation is over. Promised:
 *   - model load: IX_ERR_NOMEM with a message and no handle, or success;
 *   - engine: creation fails cleanly, or a request's submit fails (no
 *     callback), or it finishes exactly once (length, stop or an error
 *     naming the failure), n > 1 choices and a grammar included;
 *   - server: creation fails cleanly, or a request is answered (200, or an
 *     error status with an OpenAI-shaped body) or its connection closed;
 *     never a crash or a hang;
 * and after each round, nothing leaked (the counted allocator's live count
 * is back where it was). Large operations are stepped through with a
 * growing stride past the first few hundred allocations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_client.h"
#include "inferx/core.h"
#include "inferx/engine.h"
#include "inferx/model.h"
#include "inferx/server.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"

static long next_n(long n) { return n < 300 ? n + 1 : n + n / 50; }

static void quiet(void) { ix_log_set_level(IX_LOG_NONE); }

static void test_model_load(void **state) {
    (void)state;
    quiet();
    size_t live = ix_mem_live_count();
    int rounds = 0, failed = 0;
    for (long n = 0;; n = next_n(n), rounds++) {
        ix_model *m = NULL;
        ix_errbuf err = {{0}};
        ix_mem_fail_after(n);
        ix_status s = ix_model_load(&m, MODEL, &err);
        long nf = ix_mem_failed_count();
        ix_mem_fail_reset();
        if (s == IX_OK) {
            ix_model_destroy(m);
            assert_int_equal(ix_mem_live_count(), live);
            if (nf == 0) break; /* it got through without a failure: done */
            continue;           /* a failure was absorbed (an optional buffer) */
        }
        failed++;
        assert_int_equal(s, IX_ERR_NOMEM);
        assert_null(m);
        assert_true(err.msg[0] != '\0');
        assert_int_equal(ix_mem_live_count(), live);
    }
    print_message("model load: %d rounds, %d failed cleanly\n", rounds, failed);
    assert_true(failed > 0);
}

typedef struct finish_rec {
    int n_finish;
    ix_finish_reason reason;
    char message[256];
    int n_tokens;
} finish_rec;

static void rec_token(void *user, const ix_token_event *ev) {
    (void)ev;
    ((finish_rec *)user)->n_tokens++;
}

static void rec_finish(void *user, const ix_finish_info *info) {
    finish_rec *r = user;
    r->n_finish++;
    r->reason = info->reason;
    snprintf(r->message, sizeof r->message, "%s", info->message);
}

static void test_engine(void **state) {
    (void)state;
    quiet();
    ix_model *m = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_load(&m, MODEL, &err), IX_OK);
    size_t live = ix_mem_live_count();
    static const char grammar[] = "root ::= [a-z ]+ \".\"";
    int rounds = 0, create_failed = 0, submit_failed = 0, errored = 0;
    for (long n = 0;; n = next_n(n), rounds++) {
        ix_engine_params ep = ix_engine_default_params();
        ep.start_thread = false;
        ep.n_ctx = 128;
        ep.n_threads = 1;
        ep.kv_mem_bytes = 4u << 20;
        ix_engine *e = NULL;
        ix_mem_fail_after(n);
        ix_status s = ix_engine_create(&e, m, &ep, &err);
        if (s != IX_OK) {
            ix_mem_fail_reset();
            assert_int_equal(s, IX_ERR_NOMEM);
            assert_null(e);
            assert_int_equal(ix_mem_live_count(), live);
            create_failed++;
            continue;
        }
        finish_rec rec[2];
        memset(rec, 0, sizeof rec);
        bool submitted[2] = {false, false};
        static const ix_token prompt[] = {1, 45, 96, 173, 170};
        for (int k = 0; k < 2; k++) {
            ix_request_params rp = ix_request_default_params();
            rp.prompt = prompt;
            rp.n_prompt = sizeof prompt / sizeof *prompt;
            rp.max_tokens = 6;
            rp.n = k == 0 ? 2 : 1; /* forked choices (copy-on-write) */
            rp.sample.temperature = 0.7f;
            rp.sample.seed = 5;
            static const char *const stops[] = {"zz"};
            rp.stop = stops;
            rp.n_stop = 1;
            if (k == 1) rp.constraint = (ix_constraint){IX_CONSTRAINT_GRAMMAR, grammar, sizeof grammar - 1, 0};
            rp.cb = (ix_request_callbacks){rec_token, rec_finish, &rec[k], NULL};
            s = ix_engine_submit(e, &rp, NULL, &err);
            submitted[k] = s == IX_OK;
            if (!submitted[k]) {
                if (getenv("IX_FAULTS_DEBUG")) fprintf(stderr, "n=%ld submit %d: %s (%s)\n", n, k, err.msg, ix_status_name(s));
                assert_true(s == IX_ERR_NOMEM || s == IX_ERR_INVALID); /* a grammar that did not compile: NOMEM inside */
                submit_failed++;
            }
        }
        for (int step = 0; step < 200; step++) {
            bool did = false;
            s = ix_engine_step(e, &did);
            if (s != IX_OK) break; /* a step that cannot even plan: the engine says so */
            if (!did && (!submitted[0] || rec[0].n_finish) && (!submitted[1] || rec[1].n_finish)) break;
        }
        long nf = ix_mem_failed_count();
        ix_mem_fail_reset();
        /* Whatever is unfinished ends now, exactly once, as the engine goes. */
        ix_engine_destroy(e);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(rec[k].n_finish, submitted[k] ? 1 : 0);
            if (submitted[k] && rec[k].reason == IX_FINISH_ERROR) {
                assert_true(rec[k].message[0] != '\0');
                errored++;
            }
        }
        assert_int_equal(ix_mem_live_count(), live);
        if (nf == 0) break;
    }
    ix_model_destroy(m);
    print_message("engine: %d rounds; %d creations, %d submits failed cleanly, %d requests ended in an error\n", rounds,
                  create_failed, submit_failed, errored);
    assert_true(create_failed > 0 && errored > 0);
}

static void test_server(void **state) {
    (void)state;
    quiet();
    ix_model *m = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_load(&m, MODEL, &err), IX_OK);
    ix_engine_params ep = ix_engine_default_params();
    ep.n_ctx = 128;
    ep.n_threads = 1;
    ep.kv_mem_bytes = 4u << 20;
    ix_engine *e = NULL;
    assert_int_equal(ix_engine_create(&e, m, &ep, &err), IX_OK);
    static const char body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Who is Emma?\"}],\"max_tokens\":4,\"n\":2,"
                               "\"logprobs\":true,\"top_logprobs\":2}";
    /* One request first: the engine thread's buffers that live as long as
     * it does (the token text, the step's scratch) exist before counting. */
    {
        ix_server_params sp = ix_server_default_params();
        sp.port = 0;
        ix_server *srv = NULL;
        assert_int_equal(ix_server_create(&srv, e, &sp, &err), IX_OK);
        resp r = {0};
        assert_int_equal(http(ix_server_port(srv), "POST", "/v1/chat/completions", NULL, body, &r), 0);
        assert_int_equal(r.status, 200);
        resp_free(&r);
        ix_server_destroy(srv);
    }
    size_t live = ix_mem_live_count();
    int rounds = 0, create_failed = 0, errors = 0, ok = 0, closed = 0;
    for (long n = 0;; n = next_n(n), rounds++) {
        ix_server_params sp = ix_server_default_params();
        sp.port = 0;
        sp.n_http_threads = 1;
        ix_server *srv = NULL;
        ix_mem_fail_after(n);
        ix_status s = ix_server_create(&srv, e, &sp, &err);
        if (s != IX_OK) {
            ix_mem_fail_reset();
            assert_null(srv);
            create_failed++;
            assert_int_equal(ix_mem_live_count(), live);
            continue;
        }
        resp r = {0};
        int hr = http(ix_server_port(srv), "POST", "/v1/chat/completions", NULL, body, &r);
        long nf = ix_mem_failed_count();
        ix_mem_fail_reset();
        if (hr == 0 && r.status == 200) {
            ok++;
        } else if (hr != 0) {
            closed++;
            if (getenv("IX_FAULTS_DEBUG")) fprintf(stderr, "n=%ld: no answer\n", n);
        } else {
            assert_true(r.status >= 400);
            assert_non_null(strstr(r.body ? r.body : "", "\"error\""));
            errors++;
        }
        resp_free(&r);
        ix_server_destroy(srv);
        if (getenv("IX_FAULTS_DEBUG") && ix_mem_live_count() != live)
            fprintf(stderr, "n=%ld: %zd allocations left (hr %d)\n", n, (ssize_t)(ix_mem_live_count() - live), hr);
        /* The engine's requests from this round are gone: its counters may
         * keep what they allocated once (nothing here does). */
        assert_int_equal(ix_mem_live_count(), live);
        if (nf == 0) break;
    }
    ix_engine_destroy(e);
    ix_model_destroy(m);
    print_message("server: %d rounds; %d creations failed cleanly, %d error answers, %d closed unanswered, %d answered\n",
                  rounds, create_failed, errors, closed, ok);
    assert_true(create_failed > 0 && errors > 0);
}

int main(void) {
    (void)parse_sse; /* http_client.h's SSE splitter: not needed here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_load),
        cmocka_unit_test(test_engine),
        cmocka_unit_test(test_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
