/* sample: greedy, seeded draws and their distribution, top-k / top-p / min-p,
 * penalties, logit bias, logprobs, parameter checks, stop strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "inferx/sample.h"

static ix_sampler *mk(ix_sample_params p, int32_t n_vocab) {
    ix_sampler *s;
    ix_errbuf err = {{0}};
    if (ix_sampler_create(&s, &p, n_vocab, &err) != IX_OK) fail_msg("%s", err.msg);
    return s;
}

static ix_token sample1(ix_sampler *s, const float *logits) {
    ix_sample_result r;
    assert_int_equal(ix_sampler_sample(s, logits, &r), IX_OK);
    return r.id;
}

static void test_greedy(void **state) {
    (void)state;
    ix_sample_params p = ix_sample_default_params();
    p.temperature = 0;
    ix_sampler *s = mk(p, 6);
    float l[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, -INFINITY};
    assert_int_equal(sample1(s, l), 1); /* tie: lowest id */
    ix_sampler_destroy(s);

    /* Past the vector lanes: the first index of the maximum as the one-pass
     * loop "best = i if l[i] > l[best]" picks it, over vocabularies of every
     * length around the lane width, with ties, signed zeros, -inf and NaNs
     * (a NaN never wins; a NaN at 0 is what that loop returns) */
    enum { NV = 83 };
    float w[NV];
    uint32_t rng = 12345;
    for (int t = 0; t < 4000; t++) {
        int32_t n = 1 + t % NV;
        for (int32_t i = 0; i < n; i++) {
            rng = rng * 1664525u + 1013904223u;
            int r = (int)(rng >> 24) % 12;
            w[i] = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : r == 3 ? -INFINITY : (float)(r % 5) - 2.0f;
        }
        if (t % 97 == 0) w[0] = NAN;
        ix_token want = 0;
        for (int32_t i = 1; i < n; i++)
            if (w[i] > w[want]) want = i;
        ix_sampler *g = mk(p, n);
        assert_int_equal(sample1(g, w), want);
        ix_sampler_destroy(g);
    }
}

/* probabilities 0.5, 0.3, 0.15, 0.05 */
static void probs_logits(float *l) {
    l[0] = logf(0.5f);
    l[1] = logf(0.3f);
    l[2] = logf(0.15f);
    l[3] = logf(0.05f);
}

static void histogram(ix_sample_params p, int n, int *hist) {
    float l[4];
    probs_logits(l);
    ix_sampler *s = mk(p, 4);
    memset(hist, 0, 4 * sizeof *hist);
    for (int i = 0; i < n; i++) hist[sample1(s, l)]++;
    ix_sampler_destroy(s);
}

static void test_distribution_and_seed(void **state) {
    (void)state;
    ix_sample_params p = ix_sample_default_params();
    p.seed = 42;
    int h[4], h2[4];
    histogram(p, 40000, h);
    const double want[4] = {0.5, 0.3, 0.15, 0.05};
    for (int i = 0; i < 4; i++) assert_true(fabs(h[i] / 40000.0 - want[i]) < 0.01);
    /* Same seed: same draws; another seed: another sequence. */
    float l[4];
    probs_logits(l);
    ix_sampler *a = mk(p, 4), *b = mk(p, 4);
    p.seed = 43;
    ix_sampler *c = mk(p, 4);
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        ix_token x = sample1(a, l), y = sample1(b, l), z = sample1(c, l);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 0);
    /* reset restarts the stream */
    ix_sampler_reset(a);
    ix_sampler_reset(b);
    for (int i = 0; i < 50; i++) assert_int_equal(sample1(a, l), sample1(b, l));
    ix_sampler_destroy(a);
    ix_sampler_destroy(b);
    ix_sampler_destroy(c);
    histogram(ix_sample_default_params(), 10, h2); /* default params work */
}

static void test_filters(void **state) {
    (void)state;
    int h[4];
    ix_sample_params p = ix_sample_default_params();
    p.top_k = 2;
    histogram(p, 5000, h);
    assert_int_equal(h[2] + h[3], 0);
    assert_true(fabs(h[0] / 5000.0 - 0.625) < 0.03); /* renormalised 0.5/0.8 */

    p = ix_sample_default_params();
    p.top_p = 0.75f;
    histogram(p, 5000, h);
    assert_int_equal(h[2] + h[3], 0);
    assert_true(h[1] > 0);
    p.top_p = 0.9f;
    histogram(p, 5000, h);
    assert_int_equal(h[3], 0);
    assert_true(h[2] > 0);

    p = ix_sample_default_params();
    p.min_p = 0.5f; /* keep p >= 0.25 */
    histogram(p, 5000, h);
    assert_int_equal(h[2] + h[3], 0);

    p = ix_sample_default_params();
    p.temperature = 0.05f; /* nearly greedy */
    histogram(p, 2000, h);
    assert_int_equal(h[0], 2000);
}

/* top-p over a flat 5000-token vocabulary: the nucleus is wider than the
 * 1024-candidate fast path, and exactly ceil(0.5 * 5000) tokens survive. */
static void test_top_p_wide(void **state) {
    (void)state;
    enum { V = 5000 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = (i % 2) ? 0.0f : 1e-7f * (float)i;
    ix_sample_params p = ix_sample_default_params();
    p.top_p = 0.5f;
    ix_sampler *s = mk(p, V);
    int max_id = 0;
    for (int i = 0; i < 3000; i++) {
        ix_token t = sample1(s, l);
        assert_true(t % 2 == 0); /* the slightly larger even ids make up the nucleus */
        if (t > max_id) max_id = t;
    }
    assert_true(max_id > 2048); /* not only the first 1024 candidates */
    ix_sampler_destroy(s);
}

static void test_penalties_and_bias(void **state) {
    (void)state;
    float l[4] = {2.0f, 1.9f, 0.0f, -1.0f};
    ix_sample_params p = ix_sample_default_params();
    p.temperature = 0;
    p.repetition_penalty = 1.5f; /* 2.0 -> 1.33 */
    ix_sampler *s = mk(p, 4);
    ix_token prompt[] = {0};
    assert_int_equal(ix_sampler_add_prompt(s, prompt, 1), IX_OK);
    assert_int_equal(sample1(s, l), 1);
    ix_token bad[] = {7};
    assert_int_equal(ix_sampler_add_prompt(s, bad, 1), IX_ERR_RANGE);
    ix_sampler_destroy(s);

    p = ix_sample_default_params();
    p.temperature = 0;
    p.frequency_penalty = 0.1f; /* generated only: 2.0 - 0.1*count */
    s = mk(p, 4);
    assert_int_equal(sample1(s, l), 0);
    ix_sampler_accept(s, 0);
    assert_int_equal(sample1(s, l), 0); /* 1.9 vs 1.9: tie -> 0 */
    ix_sampler_accept(s, 0);
    assert_int_equal(sample1(s, l), 1); /* 1.8 < 1.9 */
    ix_sampler_destroy(s);

    p = ix_sample_default_params();
    p.temperature = 0;
    p.presence_penalty = 0.5f;
    s = mk(p, 4);
    ix_sampler_add_prompt(s, prompt, 1); /* the prompt does not count */
    assert_int_equal(sample1(s, l), 0);
    ix_sampler_accept(s, 0);
    assert_int_equal(sample1(s, l), 1);
    ix_sampler_destroy(s);

    ix_logit_bias b[] = {{3, 100.0f}, {0, -100.0f}};
    p = ix_sample_default_params();
    p.logit_bias = b;
    p.n_logit_bias = 2;
    s = mk(p, 4);
    b[0].bias = 0; /* the sampler made its own copy */
    for (int i = 0; i < 100; i++) assert_int_equal(sample1(s, l), 3);
    ix_sampler_destroy(s);
}

static void test_logprobs(void **state) {
    (void)state;
    float l[5] = {1.0f, 3.0f, 2.0f, -5.0f, 0.5f};
    ix_sample_params p = ix_sample_default_params();
    p.temperature = 0;
    p.logprobs = true;
    p.n_logprobs = 3;
    ix_sampler *s = mk(p, 5);
    ix_sample_result r;
    assert_int_equal(ix_sampler_sample(s, l, &r), IX_OK);
    double z = 0;
    for (int i = 0; i < 5; i++) z += exp(l[i]);
    assert_int_equal(r.id, 1);
    assert_true(fabs(r.logprob - (3.0 - log(z))) < 1e-5);
    assert_int_equal(r.n_top, 3);
    assert_int_equal(r.top_ids[0], 1);
    assert_int_equal(r.top_ids[1], 2);
    assert_int_equal(r.top_ids[2], 0);
    assert_true(fabs(r.top_logprobs[1] - (2.0 - log(z))) < 1e-5);
    ix_sampler_destroy(s);
}

static void test_param_checks(void **state) {
    (void)state;
    ix_errbuf err;
    ix_sample_params p = ix_sample_default_params();
    p.temperature = -1;
    assert_int_equal(ix_sample_params_check(&p, 10, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "temperature"));
    p = ix_sample_default_params();
    p.top_p = 0;
    assert_int_equal(ix_sample_params_check(&p, 10, &err), IX_ERR_INVALID);
    p = ix_sample_default_params();
    p.temperature = NAN;
    assert_int_equal(ix_sample_params_check(&p, 10, &err), IX_ERR_INVALID);
    p = ix_sample_default_params();
    ix_logit_bias b = {10, 1.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    assert_int_equal(ix_sample_params_check(&p, 10, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "logit_bias"));
    p.n_logit_bias = 0;
    p.n_logprobs = 21;
    assert_int_equal(ix_sample_params_check(&p, 10, &err), IX_ERR_INVALID);
    ix_sampler *s = NULL;
    assert_int_equal(ix_sampler_create(&s, &p, 10, &err), IX_ERR_INVALID);
    assert_null(s);
    /* OOM: every failure point reported, nothing leaked */
    p = ix_sample_default_params();
    size_t live = ix_mem_live_count();
    for (long k = 0; k < 10; k++) {
        ix_mem_fail_after(k);
        ix_status st = ix_sampler_create(&s, &p, 100, &err);
        ix_mem_fail_reset();
        if (st == IX_OK) {
            ix_sampler_destroy(s);
            break;
        }
        assert_int_equal(st, IX_ERR_NOMEM);
        assert_int_equal(ix_mem_live_count(), live);
    }
    assert_int_equal(ix_mem_live_count(), live);
}

static void feed(ix_stopper *st, const char *t, ix_buf *out, bool *stopped) {
    assert_int_equal(ix_stopper_feed(st, t, strlen(t), out, stopped), IX_OK);
}

static void test_stop_strings(void **state) {
    (void)state;
    const char *stops[] = {"STOP", "", "\n\n"};
    ix_stopper *st;
    assert_int_equal(ix_stopper_create(&st, stops, 3), IX_OK);
    assert_int_equal(ix_stopper_max_len(st), 4);
    ix_buf out = {0};
    bool stopped;
    feed(st, "Hello wor", &out, &stopped);
    assert_false(stopped);
    assert_string_equal(out.data, "Hello wor");
    feed(st, "ld S", &out, &stopped); /* "S" may start STOP: held */
    assert_string_equal(out.data, "Hello world ");
    feed(st, "TAR", &out, &stopped); /* "STAR" is not: released */
    assert_string_equal(out.data, "Hello world STAR");
    feed(st, "s ST", &out, &stopped);
    assert_string_equal(out.data, "Hello world STARs ");
    feed(st, "OP and more", &out, &stopped); /* spans two feeds */
    assert_true(stopped);
    assert_string_equal(out.data, "Hello world STARs ");
    ix_buf_free(&out);
    ix_stopper_destroy(st);

    assert_int_equal(ix_stopper_create(&st, stops, 3), IX_OK);
    feed(st, "a\n", &out, &stopped);
    assert_string_equal(out.data, "a");
    assert_int_equal(ix_stopper_flush(st, &out), IX_OK);
    assert_string_equal(out.data, "a\n");
    ix_buf_clear(&out);
    feed(st, "xSTOPy", &out, &stopped); /* within one feed */
    assert_true(stopped);
    assert_string_equal(out.data, "x");
    ix_buf_free(&out);
    ix_stopper_destroy(st);

    assert_int_equal(ix_stopper_create(&st, NULL, 0), IX_OK); /* no stops: passthrough */
    feed(st, "abc", &out, &stopped);
    assert_string_equal(out.data, "abc");
    ix_buf_free(&out);
    ix_stopper_destroy(st);
}

/* A token mask (constrained decoding): one sample only, never an excluded
 * token, excluded tokens out of the logprob alternatives, bits past n_vocab
 * ignored, no allowed token an error. */
static void test_mask(void **state) {
    (void)state;
    enum { N = 37 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)i * 0.1f; /* best: 36 */
    uint32_t mask[2] = {0, 0};
    mask[0] = (1u << 3) | (1u << 7);
    mask[1] = 0xFFFFFFE0u; /* ids 37..63 do not exist: ignored */
    ix_sample_params p = ix_sample_default_params();
    p.temperature = 0;
    p.logprobs = true;
    p.n_logprobs = 5;
    ix_sampler *s = mk(p, N);
    ix_sample_result r;
    ix_sampler_set_mask(s, mask);
    assert_int_equal(ix_sampler_sample(s, l, &r), IX_OK);
    assert_int_equal(r.id, 7);
    assert_int_equal(r.n_top, 2); /* only the allowed ones */
    assert_int_equal(r.top_ids[0], 7);
    assert_int_equal(r.top_ids[1], 3);
    assert_true(r.logprob < 0 && r.logprob > -1.0f);
    assert_int_equal(sample1(s, l), 36); /* the mask held for one sample */
    ix_sampler_set_mask(s, mask);
    ix_sampler_set_mask(s, NULL); /* cleared */
    assert_int_equal(sample1(s, l), 36);
    uint32_t none[2] = {0, 0xFFFFFFE0u};
    ix_sampler_set_mask(s, none);
    assert_int_equal(ix_sampler_sample(s, l, &r), IX_ERR_STATE);
    assert_int_equal(r.id, IX_TOKEN_NONE);
    /* an allowed token whose logit is -inf is still the one chosen */
    float inf[N];
    for (int i = 0; i < N; i++) inf[i] = i == 9 ? -INFINITY : 1.0f;
    uint32_t only9[2] = {1u << 9, 0};
    ix_sampler_set_mask(s, only9);
    assert_int_equal(ix_sampler_sample(s, inf, &r), IX_OK);
    assert_int_equal(r.id, 9);
    ix_sampler_destroy(s);
    /* draws: never outside the mask */
    p = ix_sample_default_params();
    p.seed = 5;
    s = mk(p, N);
    int hist[N] = {0};
    for (int i = 0; i < 2000; i++) {
        ix_sampler_set_mask(s, mask);
        hist[sample1(s, l)]++;
    }
    for (int i = 0; i < N; i++) assert_true(i == 3 || i == 7 || hist[i] == 0);
    assert_true(hist[3] > 700 && hist[7] > 700);
    ix_sampler_destroy(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),       cmocka_unit_test(test_distribution_and_seed),
        cmocka_unit_test(test_filters),      cmocka_unit_test(test_top_p_wide),
        cmocka_unit_test(test_penalties_and_bias), cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_param_checks), cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
