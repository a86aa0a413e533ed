/* kv + kvstore: the disk tier under the prefix cache.
 *   - blocks the pool evicts go to the store; a later prompt with the same
 *     prefix gets them back (K/V bytes identical, registered in the RAM
 *     cache again, counted), RAM hits first and disk hits after them
 *   - another tenant, or another model fingerprint, gets nothing from disk
 *   - a corrupted block on disk is refused and recomputed from there on
 *   - with a measured read cost above the compute cost, nothing is read
 *   - persist + a new cache over the same store: the prefix comes back
 *   - a session's pinned blocks, evicted when nothing anonymous is left, go
 *     to disk; saved, its index persisted and loaded by a new cache, the
 *     prompt comes back from disk byte for byte; expired sessions are not
 *     loaded; drop deletes its disk blocks; a corrupt index is refused */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inferx/engine.h"
#include "inferx/kv.h"
#include "inferx/model.h"
#include "inferx/kvstore.h"
#include "kv/kv_int.h" /* ix__kv_default_hash: to find a block's file */

enum { BS = 4, NL = 2, NH = 2, HD = 8, NB = 10, PROMPT = 6 * BS + 1 };

static char g_dir[512];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int cleanup(void **state) {
    (void)state;
    nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static ix_kv *make_kv(void) {
    ix_kv_params p = ix_kv_default_params();
    p.n_layer = NL;
    p.n_kv_head = NH;
    p.head_dim = HD;
    p.dtype = IX_KV_F32;
    p.block_size = BS;
    p.n_blocks = NB;
    ix_kv *kv = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_OK);
    return kv;
}

static ix_kvstore *make_store(void) {
    ix_kvstore_params p = ix_kvstore_default_params();
    p.dir = g_dir;
    ix_kvstore *s = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kvstore_open(&s, &p, &err), IX_OK);
    return s;
}

/* The K/V a position holds in these tests: a function of (tenant, token
 * prefix position, token), so equal prefixes hold equal bytes. */
static float kv_value(uint64_t ns, int32_t pos, int32_t tok, int layer, int h, int d) {
    return (float)(ns * 7 + (uint64_t)pos * 131 + (uint64_t)tok * 17 + (uint64_t)layer * 5 + (uint64_t)h * 3 +
                   (uint64_t)d) * 0.25f;
}

static void write_kv(ix_kv *kv, int32_t seq, uint64_t ns, const int32_t *toks, int32_t from, int32_t to) {
    int32_t nb;
    const int32_t *table = ix_kv_seq_block_table(kv, seq, &nb);
    for (int32_t p = from; p < to; p++)
        for (int l = 0; l < NL; l++) {
            float *k = ix_kv_block_k(kv, l, table[p / BS]), *v = ix_kv_block_v(kv, l, table[p / BS]);
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < HD; d++) {
                    /* layout within a block: [head][slot][dim] (docs/kv-cache.md) */
                    size_t at = ((size_t)h * BS + (size_t)(p % BS)) * HD + (size_t)d;
                    k[at] = kv_value(ns, p, toks[p], l, h, d);
                    v[at] = -kv_value(ns, p, toks[p], l, h, d);
                }
        }
}

static bool check_kv(ix_kv *kv, int32_t seq, uint64_t ns, const int32_t *toks, int32_t upto) {
    int32_t nb;
    const int32_t *table = ix_kv_seq_block_table(kv, seq, &nb);
    for (int32_t p = 0; p < upto; p++)
        for (int l = 0; l < NL; l++) {
            float *k = ix_kv_block_k(kv, l, table[p / BS]), *v = ix_kv_block_v(kv, l, table[p / BS]);
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < HD; d++) {
                    size_t at = ((size_t)h * BS + (size_t)(p % BS)) * HD + (size_t)d;
                    if (k[at] != kv_value(ns, p, toks[p], l, h, d) || v[at] != -kv_value(ns, p, toks[p], l, h, d))
                        return false;
                }
        }
    return true;
}

/* Runs a prompt through a sequence (adopt, append, write, commit) and
 * frees it; returns the tokens the cache supplied. */
static int32_t run_prompt(ix_kv *kv, uint64_t ns, const int32_t *toks, int32_t n, bool check) {
    int32_t seq, cached = 0;
    assert_int_equal(ix_kv_seq_create(kv, ns, &seq), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, seq, toks, n, &cached), IX_OK);
    if (check) assert_true(check_kv(kv, seq, ns, toks, cached));
    assert_int_equal(ix_kv_seq_append(kv, seq, n - cached, toks + cached), IX_OK);
    write_kv(kv, seq, ns, toks, cached, n);
    assert_int_equal(ix_kv_seq_commit(kv, seq, n), IX_OK);
    assert_int_equal(ix_kv_check(kv), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, seq), IX_OK);
    return cached;
}

static void prompt_of(int32_t seed, int32_t *toks) {
    for (int i = 0; i < PROMPT; i++) toks[i] = seed * 1000 + i;
}

static void test_session_disk(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/kv_disk_s_%ld", IX_BINARY_DIR, (long)getpid());
    ix_kvstore *store = make_store();
    ix_kv *kv = make_kv();
    ix_kv_attach_disk(kv, store, 0xAB);
    int32_t a[PROMPT], b[PROMPT], seq, cached;
    prompt_of(1, a);
    prompt_of(2, b);
    assert_int_equal(ix_kv_seq_create(kv, 5, &seq), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, seq, a, PROMPT, &cached), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, seq, PROMPT, a), IX_OK);
    write_kv(kv, seq, 5, a, 0, PROMPT);
    assert_int_equal(ix_kv_seq_commit(kv, seq, PROMPT), IX_OK);
    assert_int_equal(ix_kv_session_pin(kv, 42, 9, seq, 0), IX_OK);
    assert_int_equal(ix_kv_session_pin(kv, 43, 9, seq, 5), IX_OK); /* expires at 5 */
    assert_int_equal(ix_kv_seq_free(kv, seq), IX_OK);
    /* B needs 7 blocks, 4 are free: 3 of the session's go, to disk */
    assert_int_equal(run_prompt(kv, 5, b, PROMPT, false), 0);
    ix_kvstore_flush(store);
    ix_kv_session_info si;
    assert_int_equal(ix_kv_session_get(kv, 42, 9, &si), IX_OK);
    assert_int_equal(si.n_blocks, 6);
    assert_int_equal(si.n_blocks_ram, 3);
    assert_int_equal(si.n_blocks_disk, 3);
    assert_int_equal(ix_kv_session_save(kv, 42, 9, NULL), IX_OK);
    assert_int_equal(ix_kv_session_get(kv, 42, 9, &si), IX_OK);
    assert_int_equal(si.n_blocks_disk, 6);
    assert_int_equal(ix_kv_sessions_persist(kv), IX_OK);
    ix_kv_destroy(kv);
    /* a new cache over the store: the session from the index, its prompt from disk */
    kv = make_kv();
    ix_kv_attach_disk(kv, store, 0xAB);
    assert_int_equal(ix_kv_sessions_load(kv, 10), IX_OK);
    assert_int_equal(ix_kv_session_get(kv, 43, 9, &si), IX_ERR_NOT_FOUND); /* expired by then */
    assert_int_equal(ix_kv_session_get(kv, 42, 9, &si), IX_OK);
    assert_int_equal(si.n_blocks_ram, 0);
    assert_int_equal(si.n_blocks_disk, 6);
    assert_int_equal(ix_kv_session_get(kv, 42, 8, &si), IX_ERR_NOT_FOUND); /* another tenant */
    assert_int_equal(run_prompt(kv, 5, a, PROMPT, true), 6 * BS);
    /* drop: its blocks leave the disk too */
    assert_int_equal(ix_kv_session_drop(kv, 42, 9), IX_OK);
    ix_kvstore_key k0 = {0xAB, 5, ix__kv_default_hash(0, 5, a, BS)};
    assert_false(ix_kvstore_contains(store, &k0));
    assert_int_equal(ix_kv_check(kv), IX_OK);
    /* a corrupt index: refused, no sessions */
    assert_int_equal(ix_kv_sessions_persist(kv), IX_OK);
    char name[64];
    snprintf(name, sizeof name, "sessions-%016" PRIx64, (uint64_t)0xAB);
    assert_int_equal(ix_kvstore_put_file(store, name, "IXSESS01 garbage that is not an index", 37), IX_OK);
    assert_int_equal(ix_kv_sessions_load(kv, 10), IX_ERR_FORMAT);
    ix_kv_session_stats ss;
    ix_kv_get_session_stats(kv, &ss);
    assert_int_equal(ss.n_sessions, 0);
    ix_kv_destroy(kv);
    ix_kvstore_close(store);
}

static void test_evict_and_reload(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/kv_disk_a_%ld", IX_BINARY_DIR, (long)getpid());
    ix_kvstore *store = make_store();
    ix_kv *kv = make_kv();
    assert_int_equal(ix_kv_attach_disk(kv, store, 0xF00D), IX_OK);
    int32_t a[PROMPT], b[PROMPT];
    prompt_of(1, a);
    prompt_of(2, b);
    assert_int_equal(run_prompt(kv, 5, a, PROMPT, false), 0);
    assert_int_equal(run_prompt(kv, 5, a, PROMPT, true), 6 * BS); /* RAM hit */
    assert_int_equal(run_prompt(kv, 5, b, PROMPT, false), 0);      /* evicts A's blocks: to disk */
    ix_kvstore_flush(store);
    ix_kv_disk_stats ds;
    ix_kv_get_disk_stats(kv, &ds);
    assert_true(ds.blocks_out >= 3);
    /* A again: whatever stayed in RAM, then the rest from disk, bytes intact */
    assert_int_equal(run_prompt(kv, 5, a, PROMPT, true), 6 * BS);
    ix_kv_get_disk_stats(kv, &ds);
    assert_true(ds.blocks_in >= 3);
    assert_int_equal(ds.tokens_in, ds.blocks_in * BS);
    assert_true(ds.read_ns_per_block > 0);
    /* another tenant, another model: nothing */
    assert_int_equal(run_prompt(kv, 6, a, PROMPT, false), 0);
    ix_kv_destroy(kv);
    kv = make_kv();
    ix_kv_attach_disk(kv, store, 0xBEEF);
    assert_int_equal(run_prompt(kv, 5, a, PROMPT, false), 0);
    ix_kv_destroy(kv);
    ix_kvstore_close(store);
}

static void test_corrupt_and_cost(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/kv_disk_b_%ld", IX_BINARY_DIR, (long)getpid());
    ix_kvstore *store = make_store();
    ix_kv *kv = make_kv();
    ix_kv_attach_disk(kv, store, 1);
    int32_t a[PROMPT], b[PROMPT], c[PROMPT];
    prompt_of(1, a);
    prompt_of(2, b);
    prompt_of(3, c);
    run_prompt(kv, 0, a, PROMPT, false);
    assert_int_equal(ix_kv_persist_cached(kv), IX_OK); /* every cached block of A on disk now */
    run_prompt(kv, 0, b, PROMPT, false);
    run_prompt(kv, 0, c, PROMPT, false); /* A is out of RAM */
    ix_kv_destroy(kv);
    ix_kvstore_flush(store);
    /* corrupt A's third block on disk: blocks 1-2 come back, the rest is computed */
    kv = make_kv();
    ix_kv_attach_disk(kv, store, 1);
    /* find the third block's file: its key is the chained hash of the first three */
    uint64_t key = 0;
    for (int i = 0; i < 3; i++) {
        key = ix__kv_default_hash(key, 0, a + i * BS, BS);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%016" PRIx64 "/%016" PRIx64 "/%02x/%016" PRIx64 ".kvb", g_dir, (uint64_t)1,
             (uint64_t)0, (unsigned)(key >> 56), key);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 100, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    assert_int_equal(run_prompt(kv, 0, a, PROMPT, true), 2 * BS);
    ix_kv_disk_stats ds;
    ix_kv_get_disk_stats(kv, &ds);
    assert_int_equal(ds.reload_failed, 1);
    ix_kv_destroy(kv);
    /* reading measured dearer than computing: nothing read */
    kv = make_kv();
    ix_kv_attach_disk(kv, store, 1);
    run_prompt(kv, 0, b, PROMPT, false); /* b's blocks were persisted? no: evicted ones were */
    ix_kv_set_compute_cost(kv, 1e-6);    /* "computing a token costs a femtosecond" */
    ix_kv_get_disk_stats(kv, &ds);
    int64_t in0 = ds.blocks_in;
    run_prompt(kv, 0, c, PROMPT, false);
    ix_kv_get_disk_stats(kv, &ds);
    assert_true(ds.blocks_in - in0 <= 1); /* the first read measures the cost; then none */
    ix_kv_destroy(kv);
    ix_kvstore_close(store);
}

/* ---- through the engine, on the bundled model ------------------------------------- */

static ix_engine *make_engine(const ix_model *m) {
    ix_engine_params ep = ix_engine_default_params();
    ep.kv_blocks = 40; /* 640 tokens: a few prompts push the first out */
    ep.n_threads = 2;
    ep.n_ctx = 512;
    ep.kv_disk_dir = g_dir;
    ix_engine *e = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_engine_create(&e, m, &ep, &err), IX_OK);
    return e;
}

static void gen(ix_engine *e, const ix_token *prompt, size_t n, ix_token *out16, int32_t *cached) {
    ix_request_params rp = ix_request_default_params();
    rp.prompt = prompt;
    rp.n_prompt = n;
    rp.max_tokens = 16;
    rp.sample.temperature = 0;
    rp.ignore_eos = true;
    ix_generation g;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_engine_generate(e, &rp, 1, &g, &err), IX_OK);
    assert_int_equal(g.tokens[0].n, 16);
    if (out16) memcpy(out16, g.tokens[0].ids, 16 * sizeof *out16);
    if (cached) *cached = g.info.usage.cached_prompt_tokens;
    ix_generation_free(&g);
}

static void test_engine_restart(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s/kv_disk_e_%ld", IX_BINARY_DIR, (long)getpid());
    ix_model *m = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_model_load(&m, IX_SOURCE_DIR "/models/target-f16.gguf", &err), IX_OK);
    enum { P = 200 };
    ix_token p[P], q[P], first[16], again[16];
    for (int i = 0; i < P; i++) p[i] = 1 + (i * 37) % 3000, q[i] = 1 + (i * 53 + 11) % 3000;
    ix_engine *e = make_engine(m);
    int32_t cached;
    gen(e, p, P, first, &cached);
    assert_int_equal(cached, 0);
    for (int r = 0; r < 3; r++) { /* other prompts evict p's blocks to disk */
        q[0] = (ix_token)(100 + r);
        gen(e, q, P, NULL, NULL);
    }
    gen(e, p, P, again, &cached);
    assert_memory_equal(first, again, sizeof first);
    ix_kv_disk_stats ds;
    ix_kvstore_stats ss;
    assert_true(ix_engine_get_disk_stats(e, &ds, &ss));
    assert_true(ds.blocks_out > 0);
    assert_true(ds.blocks_in > 0);
    assert_int_equal(cached, (P - 1) / 16 * 16);
    ix_engine_destroy(e); /* persists the cached blocks */

    e = make_engine(m); /* a restart: the store reopened */
    gen(e, p, P, again, &cached);
    assert_memory_equal(first, again, sizeof first);
    assert_int_equal(cached, (P - 1) / 16 * 16);
    assert_true(ix_engine_get_disk_stats(e, &ds, &ss));
    assert_int_equal(ds.tokens_in, cached);
    ix_engine_destroy(e);
    ix_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_evict_and_reload, cleanup),
        cmocka_unit_test_teardown(test_session_disk, cleanup),
        cmocka_unit_test_teardown(test_corrupt_and_cost, cleanup),
        cmocka_unit_test_teardown(test_engine_restart, cleanup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
