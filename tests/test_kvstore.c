/* kvstore: KV blocks on disk.
 *   - round trip, misses, stats; an existing block replaced
 *   - rejected and deleted: other tokens, a flipped byte, a truncated file,
 *     a block moved under another model's or another tenant's name
 *   - LRU eviction past max_bytes (a read refreshes a block); reopening
 *     indexes what is there, oldest evicted first; pinned blocks kept
 *   - put_async + flush; a full queue refuses (IX_FULL, counted)
 *   - a writer killed with SIGKILL mid-write leaves a store whose every
 *     block checks out (and no temporary once reopened)
 *   - one process per store (the lock); drop_tenant; offline verify and clear
 *   - remove one block; read-ahead stops at the first missing block; named
 *     files (the session index) round trip, survive a reopen, bad names refused */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "inferx/kvstore.h"

#define BLK 1024
#define NT 16

static char g_dir[512];

static void fresh_dir(const char *name) {
    snprintf(g_dir, sizeof g_dir, "%s/kvstore_%s_%ld", IX_BINARY_DIR, name, (long)getpid());
    uint64_t n;
    ix_errbuf err;
    struct stat sb;
    if (stat(g_dir, &sb) == 0) ix_kvstore_clear(g_dir, &n, &err);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int cleanup(void **state) { /* each test's folder goes */
    (void)state;
    if (g_dir[0]) nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static void fill(uint64_t seed, int32_t *toks, uint8_t *data) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < NT; i++) toks[i] = (int32_t)((x = x * 6364136223846793005ull + 1) >> 40) % 32000;
    for (int i = 0; i < BLK; i++) data[i] = (uint8_t)((x = x * 6364136223846793005ull + 1) >> 56);
}

static ix_kvstore *open_store(uint64_t max_bytes) {
    ix_kvstore_params p = ix_kvstore_default_params();
    p.dir = g_dir;
    p.max_bytes = max_bytes;
    ix_kvstore *s = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kvstore_open(&s, &p, &err), IX_OK);
    return s;
}

static void wait_indexed(ix_kvstore *s) {
    ix_kvstore_stats st;
    for (int i = 0; i < 1000; i++) {
        ix_kvstore_get_stats(s, &st);
        if (st.indexed) return;
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    fail_msg("the index scan did not finish");
}

static void block_file(const ix_kvstore_key *k, char *out, size_t n) {
    snprintf(out, n, "%s/%016" PRIx64 "/%016" PRIx64 "/%02x/%016" PRIx64 ".kvb", g_dir, k->model_fp, k->tenant,
             (unsigned)(k->prefix_hash >> 56), k->prefix_hash);
}

static void test_round_trip(void **state) {
    (void)state;
    fresh_dir("rt");
    ix_kvstore *s = open_store(0);
    int32_t toks[NT];
    uint8_t data[BLK], back[BLK];
    ix_errbuf err = {{0}};
    for (uint64_t i = 0; i < 20; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {7, 1, 0x1000 + i * 0x0101010101010101ull};
        assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    }
    for (uint64_t i = 0; i < 20; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {7, 1, 0x1000 + i * 0x0101010101010101ull};
        assert_true(ix_kvstore_contains(s, &k));
        assert_int_equal(ix_kvstore_get(s, &k, toks, NT, back, BLK, &err), IX_OK);
        assert_memory_equal(back, data, BLK);
    }
    ix_kvstore_key none = {7, 1, 42};
    assert_false(ix_kvstore_contains(s, &none));
    assert_int_equal(ix_kvstore_get(s, &none, toks, NT, back, BLK, &err), IX_ERR_NOT_FOUND);
    /* replaced */
    fill(99, toks, data);
    ix_kvstore_key k0 = {7, 1, 0x1000};
    assert_int_equal(ix_kvstore_put(s, &k0, toks, NT, data, BLK), IX_OK);
    assert_int_equal(ix_kvstore_get(s, &k0, toks, NT, back, BLK, &err), IX_OK);
    assert_memory_equal(back, data, BLK);
    wait_indexed(s);
    ix_kvstore_stats st;
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.n_blocks, 20);
    assert_int_equal(st.hits, 21);
    assert_int_equal(st.misses, 1);
    assert_int_equal(st.bytes, 20 * (64 + NT * 4 + BLK));
    ix_kvstore_close(s);
}

static void test_rejects(void **state) {
    (void)state;
    fresh_dir("rej");
    ix_kvstore *s = open_store(0);
    int32_t toks[NT];
    uint8_t data[BLK], back[BLK];
    ix_errbuf err = {{0}};
    char path[1024], other[1024];
    /* other tokens under the same hash (a collision) */
    ix_kvstore_key k = {7, 1, 0xAA00000000000001ull};
    fill(1, toks, data);
    assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    toks[3] ^= 1;
    assert_int_equal(ix_kvstore_get(s, &k, toks, NT, back, BLK, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tokens"));
    assert_false(ix_kvstore_contains(s, &k)); /* deleted */
    /* a flipped byte */
    fill(1, toks, data);
    assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    block_file(&k, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 64 + NT * 4 + 500, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 64 + NT * 4 + 500, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    assert_int_equal(ix_kvstore_get(s, &k, toks, NT, back, BLK, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "checksum"));
    /* truncated */
    assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    assert_int_equal(truncate(path, 64 + NT * 4 + 100), 0);
    assert_int_equal(ix_kvstore_get(s, &k, toks, NT, back, BLK, &err), IX_ERR_FORMAT);
    /* another size expected */
    assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    assert_int_equal(ix_kvstore_get(s, &k, toks, NT, back, BLK - 1, &err), IX_ERR_FORMAT);
    /* moved under another model's name, and another tenant's */
    ix_kvstore_key km = {8, 1, k.prefix_hash}, kt = {7, 2, k.prefix_hash};
    const ix_kvstore_key *targets[2] = {&km, &kt};
    for (int t = 0; t < 2; t++) {
        assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
        assert_int_equal(ix_kvstore_put(s, targets[t], toks, NT, data, BLK), IX_OK); /* makes the directories */
        block_file(targets[t], other, sizeof other);
        assert_int_equal(rename(path, other), 0);
        assert_int_equal(ix_kvstore_get(s, targets[t], toks, NT, back, BLK, &err), IX_ERR_FORMAT);
        assert_non_null(strstr(err.msg, t == 0 ? "model" : "tenant"));
    }
    ix_kvstore_stats st;
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.rejected, 6);
    ix_kvstore_close(s);
}

static void test_lru_and_reopen(void **state) {
    (void)state;
    fresh_dir("lru");
    const uint64_t per = 64 + NT * 4 + BLK;
    ix_kvstore *s = open_store(5 * per);
    wait_indexed(s);
    int32_t toks[NT];
    uint8_t data[BLK], back[BLK];
    ix_errbuf err = {{0}};
    for (uint64_t i = 0; i < 8; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {1, 1, i + 1};
        assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
        if (i == 3) { /* block 1 read: it becomes the most recent */
            fill(0, toks, data);
            ix_kvstore_key k1 = {1, 1, 1};
            assert_int_equal(ix_kvstore_get(s, &k1, toks, NT, back, BLK, &err), IX_OK);
        }
    }
    ix_kvstore_stats st;
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.n_blocks, 5);
    assert_int_equal(st.evicted, 3);
    bool present[9];
    for (uint64_t i = 1; i <= 8; i++) {
        ix_kvstore_key k = {1, 1, i};
        present[i] = ix_kvstore_contains(s, &k);
    }
    /* kept: 1 (read), 5, 6, 7, 8; gone: 2, 3, 4 */
    assert_true(present[1] && !present[2] && !present[3] && !present[4] && present[5] && present[8]);
    ix_kvstore_close(s);

    /* Reopened with a smaller budget: the scan evicts the oldest files. */
    struct timespec ts = {0, 20000000L};
    nanosleep(&ts, NULL);
    s = open_store(3 * per);
    wait_indexed(s);
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.n_blocks, 3);
    ix_kvstore_key k8 = {1, 1, 8};
    assert_true(ix_kvstore_contains(s, &k8));
    ix_kvstore_close(s);
}

/* Pinned blocks (a live session's) outlive the size bound; the least recent
 * unpinned ones go instead, and once unpinned they are victims again. */
static void test_pins(void **state) {
    (void)state;
    fresh_dir("pins");
    const uint64_t per = 64 + NT * 4 + BLK;
    ix_kvstore *s = open_store(4 * per);
    wait_indexed(s);
    int32_t toks[NT];
    uint8_t data[BLK];
    ix_kvstore_key k1 = {1, 1, 1}, k2 = {1, 1, 2};
    assert_int_equal(ix_kvstore_pin(s, &k1, true), IX_OK); /* before it is written */
    assert_int_equal(ix_kvstore_pin(s, &k2, true), IX_OK);
    assert_int_equal(ix_kvstore_pin(s, &k2, true), IX_OK); /* two sessions share it */
    for (uint64_t i = 0; i < 10; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {1, 1, i + 1};
        assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    }
    ix_kvstore_stats st;
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.n_blocks, 4);
    assert_true(ix_kvstore_contains(s, &k1) && ix_kvstore_contains(s, &k2));
    ix_kvstore_key k3 = {1, 1, 3}, k10 = {1, 1, 10};
    assert_false(ix_kvstore_contains(s, &k3));
    assert_true(ix_kvstore_contains(s, &k10));
    /* every block pinned and the bound passed: the store stays over it */
    ix_kvstore_key k9 = {1, 1, 9};
    assert_int_equal(ix_kvstore_pin(s, &k9, true), IX_OK);
    assert_int_equal(ix_kvstore_pin(s, &k10, true), IX_OK);
    fill(11, toks, data);
    ix_kvstore_key k11 = {1, 1, 11};
    assert_int_equal(ix_kvstore_pin(s, &k11, true), IX_OK);
    assert_int_equal(ix_kvstore_put(s, &k11, toks, NT, data, BLK), IX_OK);
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.n_blocks, 5);
    /* unpinned (k2 once of twice: still pinned), the next write evicts k1 */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ix_kvstore_pin(s, &k9, false), IX_OK);
        assert_int_equal(ix_kvstore_pin(s, &k10, false), IX_OK);
    }
    assert_int_equal(ix_kvstore_pin(s, &k1, false), IX_OK);
    assert_int_equal(ix_kvstore_pin(s, &k2, false), IX_OK);
    fill(12, toks, data);
    ix_kvstore_key k12 = {1, 1, 12};
    assert_int_equal(ix_kvstore_put(s, &k12, toks, NT, data, BLK), IX_OK);
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.n_blocks, 4);
    assert_false(ix_kvstore_contains(s, &k1));
    assert_true(ix_kvstore_contains(s, &k2) && ix_kvstore_contains(s, &k11) && ix_kvstore_contains(s, &k12));
    ix_kvstore_close(s); /* the pins left are freed */
}

static void test_async(void **state) {
    (void)state;
    fresh_dir("async");
    ix_kvstore_params p = ix_kvstore_default_params();
    p.dir = g_dir;
    p.max_queue_bytes = 8 * BLK;
    ix_kvstore *s = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kvstore_open(&s, &p, &err), IX_OK);
    int32_t toks[NT];
    uint8_t data[BLK], back[BLK];
    int ok = 0, full = 0;
    for (uint64_t i = 0; i < 64; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {3, 3, i + 1};
        ix_status st = ix_kvstore_put_async(s, &k, toks, NT, data, BLK);
        assert_true(st == IX_OK || st == IX_FULL);
        ok += st == IX_OK;
        full += st == IX_FULL;
    }
    ix_kvstore_flush(s);
    ix_kvstore_stats st;
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.dropped, (uint64_t)full);
    assert_int_equal(st.queued_bytes, 0);
    int found = 0;
    for (uint64_t i = 0; i < 64; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {3, 3, i + 1};
        if (ix_kvstore_get(s, &k, toks, NT, back, BLK, &err) == IX_OK) {
            assert_memory_equal(back, data, BLK);
            found++;
        }
    }
    assert_int_equal(found, ok);
    ix_kvstore_close(s);
}

static void test_kill_mid_write(void **state) {
    (void)state;
    fresh_dir("kill");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* the writer: big blocks, forever */
        ix_kvstore *s = NULL;
        ix_kvstore_params p = ix_kvstore_default_params();
        p.dir = g_dir;
        ix_errbuf err;
        if (ix_kvstore_open(&s, &p, &err) != IX_OK) _exit(3);
        static uint8_t big[1 << 20];
        int32_t toks[NT] = {0};
        for (uint64_t i = 0;; i++) {
            memset(big, (int)(i & 0xff), sizeof big);
            ix_kvstore_key k = {9, 9, i + 1};
            ix_kvstore_put(s, &k, toks, NT, big, sizeof big);
        }
    }
    struct timespec ts = {0, 300000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    ix_kvstore_verify_report r;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kvstore_verify(g_dir, IX_KVSTORE_VERIFY, &r, &err), IX_OK);
    assert_true(r.n_files > 0);
    assert_int_equal(r.n_bad, 0); /* every block under its name is whole */
    ix_kvstore *s = open_store(0);  /* the lock died with the writer; the temporary goes */
    ix_kvstore_close(s);
    assert_int_equal(ix_kvstore_verify(g_dir, IX_KVSTORE_VERIFY, &r, &err), IX_OK);
    assert_int_equal(r.n_tmp, 0);
    assert_int_equal(r.n_bad, 0);
}

static void test_lock_drop_verify_clear(void **state) {
    (void)state;
    fresh_dir("misc");
    ix_kvstore *s = open_store(0);
    ix_kvstore *s2 = NULL;
    ix_kvstore_params p = ix_kvstore_default_params();
    p.dir = g_dir;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kvstore_open(&s2, &p, &err), IX_ERR_STATE);
    assert_non_null(strstr(err.msg, "in use"));
    ix_kvstore_verify_report r;
    assert_int_equal(ix_kvstore_verify(g_dir, IX_KVSTORE_COUNT, &r, &err), IX_ERR_STATE);
    int32_t toks[NT];
    uint8_t data[BLK];
    for (uint64_t i = 0; i < 6; i++) {
        fill(i, toks, data);
        ix_kvstore_key k = {5, 100 + i % 2, i + 1};
        assert_int_equal(ix_kvstore_put(s, &k, toks, NT, data, BLK), IX_OK);
    }
    assert_int_equal(ix_kvstore_drop_tenant(s, 100), IX_OK);
    for (uint64_t i = 0; i < 6; i++) {
        ix_kvstore_key k = {5, 100 + i % 2, i + 1};
        assert_int_equal(ix_kvstore_contains(s, &k), i % 2 == 1);
    }
    ix_kvstore_close(s);
    /* a corrupt file: verify finds it, repair deletes it */
    ix_kvstore_key k1 = {5, 101, 2};
    char path[1024];
    block_file(&k1, path, sizeof path);
    assert_int_equal(truncate(path, 10), 0);
    assert_int_equal(ix_kvstore_verify(g_dir, IX_KVSTORE_VERIFY, &r, &err), IX_OK);
    assert_int_equal(r.n_files, 3);
    assert_int_equal(r.n_bad, 1);
    assert_int_equal(r.n_models, 1);
    assert_int_equal(ix_kvstore_verify(g_dir, IX_KVSTORE_REPAIR, &r, &err), IX_OK);
    assert_int_equal(ix_kvstore_verify(g_dir, IX_KVSTORE_VERIFY, &r, &err), IX_OK);
    assert_int_equal(r.n_files, 2);
    assert_int_equal(r.n_bad, 0);
    uint64_t n;
    assert_int_equal(ix_kvstore_clear(g_dir, &n, &err), IX_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ix_kvstore_verify("/nonexistent/kv", IX_KVSTORE_COUNT, &r, &err), IX_ERR_IO);
}

static void test_remove_prefetch_files(void **state) {
    (void)state;
    fresh_dir("files");
    ix_kvstore *s = open_store(0);
    int32_t toks[NT];
    uint8_t data[BLK];
    ix_kvstore_key keys[4];
    for (uint64_t i = 0; i < 4; i++) {
        fill(i, toks, data);
        keys[i] = (ix_kvstore_key){7, 1, 0x2000 + i};
        if (i != 2) assert_int_equal(ix_kvstore_put(s, &keys[i], toks, NT, data, BLK), IX_OK);
    }
    assert_int_equal(ix_kvstore_prefetch(s, keys, 4), 2); /* stops at the hole */
    ix_kvstore_stats st;
    ix_kvstore_get_stats(s, &st);
    assert_int_equal(st.prefetched, 2);
    assert_int_equal(ix_kvstore_remove(s, &keys[1]), IX_OK);
    assert_false(ix_kvstore_contains(s, &keys[1]));
    assert_int_equal(ix_kvstore_remove(s, &keys[1]), IX_ERR_NOT_FOUND);
    assert_true(ix_kvstore_contains(s, &keys[0]));
    /* named files */
    const char text[] = "session index bytes";
    assert_int_equal(ix_kvstore_put_file(s, "sessions-1", text, sizeof text), IX_OK);
    assert_int_equal(ix_kvstore_put_file(s, "../escape", text, sizeof text), IX_ERR_INVALID);
    assert_int_equal(ix_kvstore_put_file(s, ".hidden", text, sizeof text), IX_ERR_INVALID);
    assert_int_equal(ix_kvstore_put_file(s, "", text, sizeof text), IX_ERR_INVALID);
    void *got;
    size_t n;
    assert_int_equal(ix_kvstore_get_file(s, "a/b", &got, &n), IX_ERR_INVALID);
    assert_int_equal(ix_kvstore_get_file(s, "nothing", &got, &n), IX_ERR_NOT_FOUND);
    assert_null(got);
    ix_kvstore_close(s);
    s = open_store(0); /* across a reopen */
    assert_int_equal(ix_kvstore_get_file(s, "sessions-1", &got, &n), IX_OK);
    assert_int_equal(n, sizeof text);
    assert_memory_equal(got, text, sizeof text);
    ix_free(got);
    assert_int_equal(ix_kvstore_put_file(s, "sessions-1", "x", 1), IX_OK); /* replaced whole */
    assert_int_equal(ix_kvstore_get_file(s, "sessions-1", &got, &n), IX_OK);
    assert_int_equal(n, 1);
    ix_free(got);
    ix_kvstore_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_round_trip, cleanup),
        cmocka_unit_test_teardown(test_rejects, cleanup),
        cmocka_unit_test_teardown(test_lru_and_reopen, cleanup),
        cmocka_unit_test_teardown(test_pins, cleanup),
        cmocka_unit_test_teardown(test_async, cleanup),
        cmocka_unit_test_teardown(test_kill_mid_write, cleanup),
        cmocka_unit_test_teardown(test_lock_drop_verify_clear, cleanup),
        cmocka_unit_test_teardown(test_remove_prefetch_files, cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
