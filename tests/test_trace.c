/* server trace.c without a network peer:
 *   - W3C traceparent parsing: valid headers, each way one is invalid, later
 *     versions with appended fields
 *   - ix__trace_begin: a caller's context and its sampled flag are kept, an
 *     invalid header starts a new trace; the ratio sampler at 0 and 1
 *   - a tracer whose collector refuses connections: spans are queued,
 *     counted as dropped when their batch fails, and destroy returns
 *   - bad endpoint URLs and ratios are refused with a message
 * The span tree and the OTLP encoding are checked against a real decoder in
 * tests/js/otlp_test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <time.h>

#include "server/trace.h"

static int parse(const char *s) {
    uint8_t t[16], p[8], f;
    return ix__trace_parse_traceparent(s, t, p, &f);
}

static void test_parse(void **state) {
    (void)state;
    uint8_t t[16], p[8], f = 0;
    assert_int_equal(ix__trace_parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t, p, &f), 0);
    char hex[33];
    ix__trace_hex(t, 16, hex);
    assert_string_equal(hex, "4bf92f3577b34da6a3ce929d0e0e4736");
    ix__trace_hex(p, 8, hex);
    assert_string_equal(hex, "00f067aa0ba902b7");
    assert_int_equal(f, 1);
    assert_int_equal(parse(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 "), 0); /* OWS */
    /* a later version may append fields; version 00 may not */
    assert_int_equal(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever"), 0);
    assert_int_not_equal(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"), 0);
    assert_int_not_equal(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"), 0);
    assert_int_not_equal(parse("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 0);  /* version ff */
    assert_int_not_equal(parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), 0);  /* zero trace */
    assert_int_not_equal(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"), 0);  /* zero parent */
    assert_int_not_equal(parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), 0);  /* upper case */
    assert_int_not_equal(parse("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"), 0);   /* short */
    assert_int_not_equal(parse("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), 0);
    assert_int_not_equal(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"), 0);
    assert_int_not_equal(parse(""), 0);
    assert_int_not_equal(parse(NULL), 0);
}

static ixs_tracer *make(const char *url, double ratio) {
    ixs_trace_params p = {url, "t", "0", ratio, 50, 0, 500};
    ixs_tracer *t = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix__trace_create(&t, &p, &err), IX_OK);
    return t;
}

static void test_begin(void **state) {
    (void)state;
    ixs_tracer *t = make("http://127.0.0.1:1/v1/traces", 0.0);
    ixs_trace_ctx c;
    assert_true(ix__trace_begin(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b", &c));
    assert_true(c.has_parent);
    assert_string_equal(c.tracestate, "a=b");
    assert_false(ix__trace_begin(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", NULL, &c));
    /* no usable header: a new trace, sampled at ratio 0: never */
    for (int i = 0; i < 100; i++) {
        assert_false(ix__trace_begin(t, i % 2 ? NULL : "garbage", NULL, &c));
        assert_false(c.has_parent);
    }
    ix__trace_destroy(t);
    t = make("http://127.0.0.1:1/v1/traces", 1.0);
    uint8_t seen[16];
    for (int i = 0; i < 100; i++) {
        assert_true(ix__trace_begin(t, NULL, NULL, &c));
        assert_true(i == 0 || memcmp(seen, c.trace_id, 16) != 0);
        memcpy(seen, c.trace_id, 16);
    }
    ix__trace_destroy(t);
    t = make("http://127.0.0.1:1/v1/traces", 0.5);
    int n = 0;
    for (int i = 0; i < 2000; i++) n += ix__trace_begin(t, NULL, NULL, &c);
    assert_true(n > 800 && n < 1200); /* a fixed fraction of trace ids, not a coin per call */
    ix__trace_destroy(t);
}

static void test_refused_collector(void **state) {
    (void)state;
    ixs_tracer *t = make("http://127.0.0.1:1/v1/traces", 1.0); /* port 1: connection refused */
    ixs_trace_ctx c;
    assert_true(ix__trace_begin(t, NULL, NULL, &c));
    ixs_attrs a = {0};
    ix__attr_str(&a, "k", "v");
    ix__attr_int(&a, "n", -5);
    ix__attr_dbl(&a, "d", 0.5);
    ix__attr_bool(&a, "b", true);
    const char *arr[] = {"x", "y"};
    ix__attr_strs(&a, "arr", arr, 2);
    assert_false(a.oom);
    uint64_t now = ix_time_ns();
    for (int i = 0; i < 5; i++) {
        ixs_span sp = {&c, c.span_id, NULL, "s", IXS_SPAN_SERVER, now, now + 1000, i == 0, "boom", &a};
        ix__trace_emit(t, &sp);
    }
    ix__attrs_free(&a);
    ixs_trace_stats st = {0};
    for (int i = 0; i < 500 && st.spans_dropped < 5; i++) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
        ix__trace_get_stats(t, &st);
    }
    assert_int_equal(st.spans_dropped, 5);
    assert_int_equal(st.spans_exported, 0);
    assert_true(st.exports_failed >= 1);
    ix__trace_destroy(t);
}

static void test_bad_params(void **state) {
    (void)state;
    ixs_tracer *t = NULL;
    ix_errbuf err = {{0}};
    ixs_trace_params p = {"ftp://x/v1/traces", NULL, NULL, 1, 0, 0, 0};
    assert_int_equal(ix__trace_create(&t, &p, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "http"));
    assert_null(t);
    p.url = "http://127.0.0.1:4318/v1/traces";
    p.sample_ratio = 1.5;
    assert_int_equal(ix__trace_create(&t, &p, &err), IX_ERR_INVALID);
    assert_null(t);
    ix__trace_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_begin),
        cmocka_unit_test(test_refused_collector),
        cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
