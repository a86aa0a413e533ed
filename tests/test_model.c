/* model: the forward pass against the PyTorch reference (golden.json): greedy
 * tokens for target-f32 / target-f16 and the top-5 logits for f32, batch
 * invariance (each prompt alone and inside a ragged batch of 8 sequences of
 * different lengths, prefill and decode mixed), on every ISA path this CPU
 * runs; load errors for bad files; and the packed-weight cache (a hit maps
 * the same bits; a stale, corrupt or truncated file is packed again). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "inferx/model.h"
#include "model_runner.h"


typedef struct golden {
    size_t n;
    ix_token_vec prompt[16];
    ix_token greedy[16][N_GEN];
    ix_token top5[16][5];
    float top5_logits[16][5];
} golden;

static golden g_gold;
static bool g_have_gold;

static int setup(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(IX_SHARED_DIR "/models/golden.json", 0, &jerr);
    if (!root) return 0;
    json_t *ps = json_object_get(root, "prompts");
    g_gold.n = json_array_size(ps) < 16 ? json_array_size(ps) : 16;
    for (size_t i = 0; i < g_gold.n; i++) {
        json_t *p = json_array_get(ps, i);
        json_t *ids = json_object_get(p, "prompt_ids"), *gr = json_object_get(p, "greedy_ids");
        for (size_t k = 0; k < json_array_size(ids); k++)
            ix_token_vec_push(&g_gold.prompt[i], (ix_token)json_integer_value(json_array_get(ids, k)));
        for (size_t k = 0; k < N_GEN; k++)
            g_gold.greedy[i][k] = (ix_token)json_integer_value(json_array_get(gr, k));
        for (size_t k = 0; k < 5; k++) {
            g_gold.top5[i][k] = (ix_token)json_integer_value(json_array_get(json_object_get(p, "top5_ids"), k));
            g_gold.top5_logits[i][k] =
                (float)json_real_value(json_array_get(json_object_get(p, "top5_logits"), k));
        }
    }
    json_decref(root);
    g_have_gold = true;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (size_t i = 0; i < g_gold.n; i++) ix_token_vec_free(&g_gold.prompt[i]);
    return 0;
}

static void check_golden(const char *path, ix_kv_dtype kv_type, bool check_logits) {
    runner r;
    runner_open(&r, path, kv_type, 256, 2);
    for (size_t i = 0; i < g_gold.n; i++) {
        ix_token got[1][N_GEN];
        float *first = malloc((size_t)r.n_vocab * sizeof(float));
        run_greedy(&r, &g_gold.prompt[i], 1, 512, 0, got, first);
        for (int k = 0; k < N_GEN; k++)
            if (got[0][k] != g_gold.greedy[i][k])
                fail_msg("%s prompt %zu: greedy token %d is %d, reference %d", path, i, k, got[0][k],
                         g_gold.greedy[i][k]);
        if (check_logits) {
            for (int k = 0; k < 5; k++) {
                float want = g_gold.top5_logits[i][k], have = first[g_gold.top5[i][k]];
                if (fabsf(have - want) > 1e-3f * fmaxf(1.0f, fabsf(want)))
                    fail_msg("%s prompt %zu: logit of token %d is %.6f, reference %.6f", path, i,
                             g_gold.top5[i][k], (double)have, (double)want);
            }
        }
        free(first);
    }
    runner_close(&r);
}

/* Each golden prompt alone, then all of them in one ragged batch with three
 * more sequences, chunked prefill mixed with decode: same tokens. */
static void check_batch_invariance(const char *path) {
    runner r;
    runner_open(&r, path, IX_KV_F16, 256, 2);
    int n = (int)g_gold.n;
    ix_token_vec prompts[MAX_SEQ] = {{0}};
    for (int i = 0; i < n && i < MAX_SEQ; i++) prompts[i] = g_gold.prompt[i];
    /* Fill up to 8 sequences with prompts of other lengths. */
    static ix_token extra[3][200];
    for (int e = 0; n < MAX_SEQ; e++, n++) {
        int len = 3 + 67 * e;
        for (int k = 0; k < len; k++) extra[e][k] = (ix_token)(1 + (k * 37 + e * 11) % 4000);
        prompts[n] = (ix_token_vec){extra[e], (size_t)len, (size_t)len};
    }
    ix_token alone[MAX_SEQ][N_GEN], batched[MAX_SEQ][N_GEN];
    for (int i = 0; i < n; i++) run_greedy(&r, &prompts[i], 1, 512, 0, &alone[i], NULL);
    run_greedy(&r, prompts, n, 7, 2, batched, NULL);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < N_GEN; k++)
            if (alone[i][k] != batched[i][k])
                fail_msg("%s sequence %d token %d: alone %d, batched %d", path, i, k, alone[i][k],
                         batched[i][k]);
    ix_kv_stats st;
    ix_kv_get_stats(r.kv, &st);
    assert_int_equal(st.n_blocks_used, 0);
    runner_close(&r);
}

static void golden_all(void) {
    check_golden(IX_SHARED_DIR "/models/target-f32.gguf", IX_KV_F32, true);
    check_golden(IX_SOURCE_DIR "/models/target-f16.gguf", IX_KV_F16, false);
}

static void test_golden(void **state) {
    (void)state;
    if (!g_have_gold) {
        fprintf(stderr, "skip: golden.json is absent\n");
        skip();
    }
    for_each_isa(golden_all);
}

static void invariance_all(void) { check_batch_invariance(IX_SOURCE_DIR "/models/target-f16.gguf"); }

static void test_batch_invariance(void **state) {
    (void)state;
    if (!g_have_gold) {
        fprintf(stderr, "skip: golden.json is absent\n");
        skip();
    }
    for_each_isa(invariance_all);
}

/* Bit-exact invariance of the logits: the first logits of every sequence
 * (its last prompt position) are the same bits whether it runs alone with
 * its prompt in one batch on 1 or 3 threads, or chunked 7 tokens at a time
 * in a ragged batch of 8 sequences on 2 threads. Covers the threaded row ops
 * (split by token ranges, inline for small batches) and the grouped
 * attention (dynamic item grabs, query-head slices when items are few). */
static void check_logit_invariance(const char *path, ix_kv_dtype kv_type) {
    int n = 0;
    ix_token_vec prompts[MAX_SEQ] = {{0}};
    static ix_token extra[MAX_SEQ][160];
    for (; n < MAX_SEQ; n++) {
        int len = 1 + 23 * n; /* 1 .. 162 tokens: within, at and across 16-token blocks */
        if (len > 160) len = 160;
        for (int k = 0; k < len; k++) extra[n][k] = (ix_token)(1 + (k * 31 + n * 7) % 4000);
        prompts[n] = (ix_token_vec){extra[n], (size_t)len, (size_t)len};
    }
    runner r1, r2, r3;
    runner_open(&r1, path, kv_type, 256, 1);
    runner_open(&r2, path, kv_type, 256, 2);
    runner_open(&r3, path, kv_type, 256, 3);
    size_t nv = (size_t)r1.n_vocab;
    float *alone1 = malloc(MAX_SEQ * nv * sizeof(float));
    float *alone3 = malloc(MAX_SEQ * nv * sizeof(float));
    float *batched = malloc(MAX_SEQ * nv * sizeof(float));
    ix_token toks1[MAX_SEQ][N_GEN], toks3[MAX_SEQ][N_GEN], toksb[MAX_SEQ][N_GEN];
    for (int i = 0; i < n; i++) {
        run_greedy(&r1, &prompts[i], 1, 512, 0, &toks1[i], alone1 + (size_t)i * nv);
        run_greedy(&r3, &prompts[i], 1, 512, 0, &toks3[i], alone3 + (size_t)i * nv);
    }
    run_greedy(&r2, prompts, n, 7, 2, toksb, batched);
    for (int i = 0; i < n; i++) {
        if (memcmp(alone1 + (size_t)i * nv, alone3 + (size_t)i * nv, nv * sizeof(float)))
            fail_msg("%s sequence %d: logits differ between 1 and 3 threads", path, i);
        if (memcmp(alone1 + (size_t)i * nv, batched + (size_t)i * nv, nv * sizeof(float)))
            fail_msg("%s sequence %d: logits differ alone and chunked in a batch", path, i);
        if (memcmp(toks1[i], toks3[i], sizeof toks1[i]) ||
            memcmp(toks1[i], toksb[i], sizeof toks1[i]))
            fail_msg("%s sequence %d: greedy tokens differ", path, i);
    }
    free(alone1);
    free(alone3);
    free(batched);
    runner_close(&r1);
    runner_close(&r2);
    runner_close(&r3);
}

static void logit_invariance_all(void) {
    check_logit_invariance(IX_SOURCE_DIR "/models/target-f16.gguf", IX_KV_F16);
    check_logit_invariance(IX_SOURCE_DIR "/models/target-f16.gguf", IX_KV_F32);
}

static void test_logit_invariance(void **state) {
    (void)state;
    for_each_isa(logit_invariance_all);
}

static void test_bad_batches(void **state) {
    (void)state;
    runner r;
    runner_open(&r, IX_SOURCE_DIR "/models/target-f16.gguf", IX_KV_F16, 4, 2);
    int32_t s;
    assert_int_equal(ix_kv_seq_create(r.kv, 0, &s), IX_OK);
    ix_token t[5] = {1, 2, 3, 4, 5};
    int32_t pos[5] = {0, 1, 2, 3, 4}, sq[5] = {s, s, s, s, s};
    uint8_t o[5] = {0, 0, 0, 0, 1};
    float *logits = malloc((size_t)r.n_vocab * sizeof(float));
    ix_batch b = {5, t, pos, sq, o};
    assert_int_equal(ix_model_forward(r.ctx, &b, logits), IX_ERR_INVALID); /* > max batch */
    b.n_tokens = 2;
    assert_int_equal(ix_model_forward(r.ctx, &b, logits), IX_ERR_RANGE); /* no KV slots */
    assert_int_equal(ix_kv_seq_append(r.kv, s, 2, t), IX_OK);
    t[1] = 99999;
    assert_int_equal(ix_model_forward(r.ctx, &b, logits), IX_ERR_RANGE);
    assert_non_null(strstr(ix_model_ctx_errmsg(r.ctx), "vocabulary"));
    t[1] = 2;
    sq[1] = 77;
    assert_int_equal(ix_model_forward(r.ctx, &b, logits), IX_ERR_INVALID);
    free(logits);
    runner_close(&r);

    ix_model *m = NULL;
    ix_errbuf err = {{0}};
    if (ix_model_load(&m, IX_SHARED_DIR "/vocab/ggml-vocab-gpt-2.gguf", &err) != IX_ERR_NOT_FOUND) {
        assert_null(m);
        assert_true(strlen(err.msg) > 0);
        fprintf(stderr, "  vocab-only file refused: %s\n", err.msg);
    }
}

/* ---- the packed-weight cache ---- */

static char g_pc_dir[64], g_pc_model[128];

/* Greedy tokens and the first logits of two prompts, the model loaded with
 * lp; *cached: whether its packed weights came from (or went to) the cache. */
static void pc_run(const ix_model_load_params *lp, ix_token out[2][N_GEN], float *logits, bool *cached) {
    runner r;
    runner_open_with(&r, g_pc_model, lp, IX_KV_F16, 64, 2);
    *cached = ix_model_pack_cached(r.m);
    ix_token a[] = {1, 450, 3996, 1354, 1701, 432}, b[] = {1, 938, 2501, 263, 931};
    ix_token_vec prompts[2] = {{a, IX_ARRAY_LEN(a), IX_ARRAY_LEN(a)}, {b, IX_ARRAY_LEN(b), IX_ARRAY_LEN(b)}};
    run_greedy(&r, prompts, 2, 4, 1, out, logits);
    runner_close(&r); /* waits for a new cache file to be in place */
}

/* The one cache file in g_pc_dir (fails on none or a temporary left over). */
static void pc_file(char *path, size_t len, struct stat *st) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "ls %s", g_pc_dir);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char name[128];
    int n = 0;
    while (fgets(name, sizeof name, f)) {
        name[strcspn(name, "\n")] = 0;
        if (strstr(name, ".tmp.")) fail_msg("a temporary cache file was left: %s", name);
        if (n++ == 0) snprintf(path, len, "%s/%s", g_pc_dir, name);
    }
    pclose(f);
    if (n != 1) fail_msg("%d files in the cache directory, expected 1", n);
    assert_int_equal(stat(path, st), 0);
}

static void pc_header_bytes(const char *path, unsigned char out[64]) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(out, 1, 64, f), 64);
    fclose(f);
}

static void pc_same(ix_token a[2][N_GEN], const float *la, ix_token b[2][N_GEN], const float *lb, size_t nv,
                    const char *what) {
    if (memcmp(a, b, sizeof(ix_token) * 2 * N_GEN) || memcmp(la, lb, 2 * nv * sizeof(float)))
        fail_msg("%s: tokens or logits differ from packing in memory", what);
}

static void test_pack_cache(void **state) {
    (void)state;
    snprintf(g_pc_dir, sizeof g_pc_dir, "/tmp/ix-pack-cache-XXXXXX");
    assert_non_null(mkdtemp(g_pc_dir));
    snprintf(g_pc_model, sizeof g_pc_model, "%s.model.gguf", g_pc_dir);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp %s/models/target-f16.gguf %s", IX_SOURCE_DIR, g_pc_model);
    assert_int_equal(system(cmd), 0);
    size_t nv = 0;
    {
        runner r;
        runner_open(&r, g_pc_model, IX_KV_F16, 4, 1);
        nv = (size_t)r.n_vocab;
        runner_close(&r);
    }
    float *l0 = malloc(2 * nv * sizeof(float)), *l1 = malloc(2 * nv * sizeof(float));
    ix_token t0[2][N_GEN], t1[2][N_GEN];
    bool cached;
    pc_run(NULL, t0, l0, &cached); /* in memory: the reference */
    assert_false(cached);

    ix_model_load_params lp = ix_model_load_default_params();
    lp.pack_cache_dir = g_pc_dir;
    lp.pack_cache_min_bytes = 0;
    pc_run(&lp, t1, l1, &cached); /* a miss: packed into a new file */
    assert_true(cached);
    pc_same(t0, l0, t1, l1, nv, "packed into the cache");
    char file[192];
    struct stat st0, st1;
    pc_file(file, sizeof file, &st0);

    pc_run(&lp, t1, l1, &cached); /* a hit: the same file mapped */
    assert_true(cached);
    pc_same(t0, l0, t1, l1, nv, "mapped from the cache");
    pc_file(file, sizeof file, &st1);
    assert_int_equal(st0.st_ino, st1.st_ino);

    /* a flipped byte in the header's key, then a truncated file: packed
     * again, the same header back */
    unsigned char h0[64], h1[64];
    pc_header_bytes(file, h0);
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    fseek(f, 16, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 16, SEEK_SET);
    fputc(0x5a ^ c, f);
    fclose(f);
    pc_header_bytes(file, h1);
    assert_memory_not_equal(h0, h1, sizeof h0);
    pc_run(&lp, t1, l1, &cached);
    pc_same(t0, l0, t1, l1, nv, "after a corrupt header");
    pc_file(file, sizeof file, &st1);
    pc_header_bytes(file, h1);
    assert_memory_equal(h0, h1, sizeof h0);
    assert_int_equal(truncate(file, st1.st_size / 2), 0);
    pc_run(&lp, t1, l1, &cached);
    pc_same(t0, l0, t1, l1, nv, "after truncation");
    pc_file(file, sizeof file, &st0);
    assert_int_equal(st0.st_size, st1.st_size);

    /* the model file changed (its time): a new key, a new file; the cap
     * then removes the least recently used one */
    struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
    assert_int_equal(utimes(g_pc_model, tv), 0);
    lp.pack_cache_max_bytes = (uint64_t)st0.st_size + 4096; /* room for one */
    pc_run(&lp, t1, l1, &cached);
    assert_true(cached);
    pc_same(t0, l0, t1, l1, nv, "after the model changed");
    char file2[192];
    pc_file(file2, sizeof file2, &st1);
    assert_string_not_equal(file, file2);
    snprintf(file, sizeof file, "%s", file2);

    /* a cap below the file, and a directory that cannot be made: in memory */
    assert_int_equal(unlink(file), 0);
    lp.pack_cache_max_bytes = 4096;
    pc_run(&lp, t1, l1, &cached);
    assert_false(cached);
    pc_same(t0, l0, t1, l1, nv, "over the cap");
    lp.pack_cache_max_bytes = 0;
    char bad[160];
    snprintf(bad, sizeof bad, "%s/sub", g_pc_model); /* under a regular file */
    lp.pack_cache_dir = bad;
    pc_run(&lp, t1, l1, &cached);
    assert_false(cached);
    pc_same(t0, l0, t1, l1, nv, "with an unusable directory");

    free(l0);
    free(l1);
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", g_pc_dir, g_pc_model);
    assert_int_equal(system(cmd), 0);
}

/* The embedding table is copied beside the packed weights and its file
 * pages dropped: looking up tokens all over the vocabulary (a row every 36
 * KiB of the bundled F16 table) leaves none of the file's pages of it
 * resident but the two it may share with its neighbours; read through the
 * mapping (INFERX_REPACK=0 keeps everything there), every lookup makes its
 * page resident. (test_golden and the pack cache's test check the outputs.) */
static void test_embd_copy(void **state) {
    (void)state;
    const char *path = IX_SOURCE_DIR "/models/target-f16.gguf";
    for (int mapped = 0; mapped < 2; mapped++) {
        if (mapped) assert_int_equal(setenv("INFERX_REPACK", "0", 1), 0);
        runner r;
        runner_open(&r, path, IX_KV_F16, 64, 1);
        const ix_gguf_tensor *te = ix_gguf_find_tensor(ix_model_gguf(r.m), "token_embd.weight");
        assert_non_null(te);
        int32_t seq;
        assert_int_equal(ix_kv_seq_create(r.kv, 0, &seq), IX_OK);
        ix_token toks[64];
        int32_t pos[64], sq[64];
        uint8_t outf[64] = {0};
        for (int i = 0; i < 64; i++) {
            toks[i] = (ix_token)((i * 64 + 7) % r.n_vocab);
            pos[i] = i;
            sq[i] = seq;
        }
        outf[63] = 1;
        assert_int_equal(ix_kv_seq_append(r.kv, seq, 64, toks), IX_OK);
        ix_batch b = {64, toks, pos, sq, outf};
        float *logits = malloc((size_t)r.n_vocab * sizeof(float));
        assert_int_equal(ix_model_forward(r.ctx, &b, logits), IX_OK);
        free(logits);
        uint64_t res = ix_resident_bytes(te->data, te->n_bytes), page = (uint64_t)sysconf(_SC_PAGESIZE);
        if (mapped) {
            assert_int_equal(unsetenv("INFERX_REPACK"), 0); /* first: the later tests pack */
            assert_true(res >= 32 * page); /* the lookups' pages (at least half of them) */
        } else if (res > 2 * page) {
            fail_msg("%llu bytes of the file's embedding table resident after 64 lookups", (unsigned long long)res);
        }
        runner_close(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_cache),
        cmocka_unit_test(test_embd_copy),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_logit_invariance),
        cmocka_unit_test(test_bad_batches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
