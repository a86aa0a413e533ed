/* kv: unit tests of every operation of the paged KV cache manager — layout,
 * append, free, fork with copy-on-write, truncate, prefix cache (hits, chaining,
 * namespaces, collisions, duplicates), eviction order, sliding window, swap,
 * accounting, bad input, and out-of-memory paths under fault injection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "inferx/kv.h"

/* f32 parameters of a small shape, for a test to adjust. */
static ix_kv_params shape(int32_t n_layer, int32_t n_kv_head, int32_t head_dim) {
    ix_kv_params p = ix_kv_default_params();
    p.dtype = IX_KV_F32;
    p.n_layer = n_layer;
    p.n_kv_head = n_kv_head;
    p.head_dim = head_dim;
    return p;
}

/* Small shape so blocks are easy to count: 2 layers, 2 KV heads, head_dim 4. */
static ix_kv *make_kv(int32_t n_blocks, int32_t block_size, ix_kv_params *tweak) {
    ix_kv_params p = tweak ? *tweak : shape(2, 2, 4);
    p.n_blocks = n_blocks;
    p.block_size = block_size;
    ix_kv *kv = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_OK);
    assert_non_null(kv);
    return kv;
}

static void check(ix_kv *kv) {
    ix_status st = ix_kv_check(kv);
    if (st != IX_OK) fail_msg("ix_kv_check: %s", ix_kv_errmsg(kv));
}

/* The value stored at element (layer, head, d) of position pos, K (kv_sel 0) or V. */
static float pattern(int32_t val, int32_t layer, int32_t head, int32_t d, int kv_sel) {
    float x = (float)val * 1000.0f + (float)(layer * 100 + head * 10 + d);
    return kv_sel ? -x : x;
}

static float *elem(ix_kv *kv, int32_t layer, int32_t block, int32_t head, int32_t t, int32_t d,
                   int kv_sel) {
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    unsigned char *base =
        kv_sel ? ix_kv_block_v(kv, layer, block) : ix_kv_block_k(kv, layer, block);
    return (float *)(base + (size_t)head * lay.head_stride_bytes +
                     (size_t)t * lay.token_stride_bytes + (size_t)d * lay.elem_bytes);
}

/* Simulates the forward pass writing K/V of position pos of seq with val. */
static void write_pos(ix_kv *kv, int32_t seq, int32_t pos, int32_t val) {
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    int32_t nb;
    const int32_t *tab = ix_kv_seq_block_table(kv, seq, &nb);
    assert_true(pos / lay.block_size < nb);
    int32_t b = tab[pos / lay.block_size], t = pos % lay.block_size;
    ix_kv_block_info bi;
    assert_int_equal(ix_kv_get_block_info(kv, b, &bi), IX_OK);
    assert_int_equal(bi.ref, 1); /* never write into a shared or cached block */
    assert_false(bi.cached);
    for (int32_t l = 0; l < lay.n_layer; l++)
        for (int32_t h = 0; h < lay.n_kv_head; h++)
            for (int32_t d = 0; d < lay.head_dim; d++)
                for (int s = 0; s < 2; s++)
                    *elem(kv, l, b, h, t, d, s) = pattern(val, l, h, d, s);
}

static void expect_pos(ix_kv *kv, int32_t seq, int32_t pos, int32_t val) {
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    int32_t nb;
    const int32_t *tab = ix_kv_seq_block_table(kv, seq, &nb);
    int32_t b = tab[pos / lay.block_size], t = pos % lay.block_size;
    for (int32_t l = 0; l < lay.n_layer; l++)
        for (int32_t h = 0; h < lay.n_kv_head; h++)
            for (int32_t d = 0; d < lay.head_dim; d++)
                for (int s = 0; s < 2; s++)
                    assert_true(*elem(kv, l, b, h, t, d, s) == pattern(val, l, h, d, s));
}

/* Appends tokens (K/V value = token id), writes them and commits. */
static void feed(ix_kv *kv, int32_t seq, const int32_t *tokens, int32_t n) {
    int32_t start = ix_kv_seq_n_tokens(kv, seq);
    assert_int_equal(ix_kv_seq_append(kv, seq, n, tokens), IX_OK);
    for (int32_t i = 0; i < n; i++)
        write_pos(kv, seq, start + i, tokens[i]);
    assert_int_equal(ix_kv_seq_commit(kv, seq, start + n), IX_OK);
}

static void iota(int32_t *t, int32_t n, int32_t from) {
    for (int32_t i = 0; i < n; i++)
        t[i] = from + i;
}

static void test_params(void **state) {
    (void)state;
    ix_kv_params p = ix_kv_default_params();
    assert_int_equal(p.block_size, 16);
    assert_int_equal(p.dtype, IX_KV_F16);
    assert_true(p.enable_prefix_cache);
    ix_kv *kv = (ix_kv *)0x1;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_INVALID); /* shape unset */
    assert_null(kv);
    assert_non_null(strstr(err.msg, "shape"));
    p.n_layer = 4;
    p.n_kv_head = 8;
    p.head_dim = 128;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_INVALID); /* no size */
    p.mem_bytes = 1000;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_RANGE); /* smaller than a block */
    p.dtype = IX_KV_Q8_0; /* blocks of 32 do not divide head_dim 40 */
    p.mem_bytes = 1 << 24;
    p.head_dim = 40;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "q8_0"));
    assert_non_null(strstr(err.msg, "head_dim a multiple of 16"));
    assert_non_null(strstr(err.msg, "not 40"));
    p.head_dim = 128;
    p.dtype = (ix_kv_dtype)77;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_INVALID);
    p.dtype = IX_KV_F16;
    p.block_size = 0;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_RANGE);
    p.block_size = 16;
    p.n_blocks = (int64_t)1 << 40;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_RANGE);
    p.n_blocks = 0;
    p.head_dim = INT32_MAX;
    p.n_kv_head = INT32_MAX;
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_ERR_RANGE); /* overflow */
    p.head_dim = 128;
    p.n_kv_head = 8;
    assert_int_equal(ix_kv_create(NULL, &kv, &err), IX_ERR_INVALID);
    assert_int_equal(ix_kv_create(&p, NULL, NULL), IX_ERR_INVALID);

    /* Sized from bytes: one f16 block = 4 layers * 2 * 8 heads * 16 tok * 128 * 2 B = 256 KiB. */
    assert_int_equal(ix_kv_create(&p, &kv, &err), IX_OK);
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    assert_int_equal(lay.block_stride_bytes, 256 * 1024);
    assert_int_equal(lay.n_blocks, 64); /* 16 MiB / 256 KiB */
    assert_int_equal(lay.elem_bytes, 2);
    assert_int_equal(lay.token_stride_bytes, 256);
    assert_int_equal(lay.head_stride_bytes, 16 * 256);
    assert_int_equal(lay.v_offset_bytes, 8 * 16 * 256);
    assert_int_equal(lay.layer_stride_bytes, 2 * 8 * 16 * 256);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_total, 64);
    assert_int_equal(st.n_blocks_free, 64);
    assert_int_equal(st.pool_bytes, 16 << 20);
    assert_string_equal(ix_kv_errmsg(kv), "");
    ix_kv_destroy(kv);
    ix_kv_destroy(NULL);
    assert_string_equal(ix_kv_errmsg(NULL), "");
    assert_int_equal(ix_kv_dtype_size(IX_KV_F32), 4);
    assert_int_equal(ix_kv_dtype_size(IX_KV_Q8_0), 0);
    assert_string_equal(ix_kv_dtype_name(IX_KV_F16), "f16");
    assert_string_equal(ix_kv_dtype_name((ix_kv_dtype)-3), "?");
    ix_kv_dtype dt;
    assert_true(ix_kv_dtype_parse("fp8_e4m3", &dt) && dt == IX_KV_FP8_E4M3);
    assert_false(ix_kv_dtype_parse("q8", &dt));
    assert_int_equal(ix_kv_dtype_row_bytes(IX_KV_Q8_0, 128), 4 * 34);
    assert_int_equal(ix_kv_dtype_row_bytes(IX_KV_Q4_0, 128), 4 * 18);
    assert_int_equal(ix_kv_dtype_row_bytes(IX_KV_Q4_0, 100), 0);
    assert_int_equal(ix_kv_dtype_row_bytes(IX_KV_BF16, 7), 14);

    /* Quantized blocks: the same bytes hold about twice (q8_0) and 3.6x (q4_0)
     * the f16 blocks; a row is head_dim / 32 blocks with their scales. */
    p.mem_bytes = 1 << 24;
    const struct {
        ix_kv_dtype t;
        int32_t blocks;
        size_t row;
    } qt[] = {{IX_KV_F16, 64, 256}, {IX_KV_Q8_0, 120, 136}, {IX_KV_FP8_E4M3, 120, 136},
              {IX_KV_Q4_0, 227, 72}, {IX_KV_BF16, 64, 256}};
    for (size_t i = 0; i < IX_ARRAY_LEN(qt); i++) {
        p.dtype = qt[i].t;
        assert_int_equal(ix_kv_create(&p, &kv, &err), IX_OK);
        ix_kv_get_layout(kv, &lay);
        assert_int_equal(lay.token_stride_bytes, qt[i].row);
        assert_int_equal(lay.n_blocks, qt[i].blocks);
        ix_kv_destroy(kv);
    }
    p.dtype = IX_KV_F16;
}

static void test_layout_pointers(void **state) {
    (void)state;
    ix_kv_params p = shape(3, 2, 5); /* slice = 2*4*5*4 = 160 B, padded to 192 */ /* slice = 2*4*5*4 = 160 B, padded to 192 */
    ix_kv *kv = make_kv(6, 4, &p);
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    assert_int_equal(lay.v_offset_bytes, 192);
    assert_int_equal(lay.block_stride_bytes, 3 * 2 * 192);
    unsigned char *base = ix_kv_data(kv);
    assert_int_equal((uintptr_t)base % 64, 0);
    for (int32_t b = 0; b < 6; b++)
        for (int32_t l = 0; l < 3; l++) {
            unsigned char *k = ix_kv_block_k(kv, l, b), *v = ix_kv_block_v(kv, l, b);
            assert_ptr_equal(k, base + b * lay.block_stride_bytes + l * lay.layer_stride_bytes);
            assert_ptr_equal(v, k + lay.v_offset_bytes);
            assert_int_equal((uintptr_t)k % 64, 0);
            assert_int_equal((uintptr_t)v % 64, 0);
        }
    assert_null(ix_kv_block_k(kv, 3, 0));
    assert_null(ix_kv_block_k(kv, 0, 6));
    assert_null(ix_kv_block_v(kv, -1, 0));
    assert_null(ix_kv_block_v(NULL, 0, 0));
    /* Every element of every slice is distinct memory: write all, read all back. */
    int32_t s;
    assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
    int32_t toks[24];
    iota(toks, 24, 100);
    feed(kv, s, toks, 24);
    for (int32_t i = 0; i < 24; i++)
        expect_pos(kv, s, i, 100 + i);
    ix_kv_destroy(kv);
}

static void test_append_and_free(void **state) {
    (void)state;
    ix_kv *kv = make_kv(8, 4, NULL);
    int32_t s, nb, toks[32];
    iota(toks, 32, 1);
    assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
    assert_null(ix_kv_seq_block_table(kv, s, &nb));
    assert_int_equal(nb, 0);
    assert_int_equal(ix_kv_seq_append(kv, s, 3, toks), IX_OK);
    assert_int_equal(ix_kv_n_available(kv), 7);
    assert_int_equal(ix_kv_seq_append(kv, s, 1, toks + 3), IX_OK); /* fills block 0 */
    assert_int_equal(ix_kv_n_available(kv), 7);
    assert_int_equal(ix_kv_seq_blocks_needed(kv, s, 1), 1);
    assert_int_equal(ix_kv_seq_append(kv, s, 1, toks + 4), IX_OK); /* a new block */
    assert_int_equal(ix_kv_n_available(kv), 6);
    assert_int_equal(ix_kv_seq_blocks_needed(kv, s, 3), 0);
    assert_int_equal(ix_kv_seq_blocks_needed(kv, s, 4), 1);
    const int32_t *tab = ix_kv_seq_block_table(kv, s, &nb);
    assert_int_equal(nb, 2);
    ix_kv_block_info bi;
    assert_int_equal(ix_kv_get_block_info(kv, tab[1], &bi), IX_OK);
    assert_int_equal(bi.ref, 1);
    assert_int_equal(bi.tokens[0], 5);
    assert_int_equal(ix_kv_get_block_info(kv, tab[0], &bi), IX_OK);
    assert_memory_equal(bi.tokens, toks, 4 * sizeof(int32_t));
    assert_int_equal(ix_kv_seq_n_tokens(kv, s), 5);
    /* All or nothing: 7 blocks needed (5 + 28 = 33 tokens = 9 blocks, 2 held), 6 available. */
    assert_int_equal(ix_kv_seq_append(kv, s, 28, toks), IX_FULL);
    assert_non_null(strstr(ix_kv_errmsg(kv), "available"));
    assert_int_equal(ix_kv_seq_n_tokens(kv, s), 5);
    assert_int_equal(ix_kv_n_available(kv), 6);
    assert_int_equal(ix_kv_seq_append(kv, s, 27, toks), IX_OK); /* exactly fits */
    assert_int_equal(ix_kv_n_available(kv), 0);
    check(kv);
    int32_t s2;
    assert_int_equal(ix_kv_seq_create(kv, 0, &s2), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, s2, 1, toks), IX_FULL);
    int32_t seqs[2] = {s, s2}, ns[2] = {0, 0};
    assert_true(ix_kv_can_append(kv, seqs, ns, 2));
    ns[1] = 1;
    assert_false(ix_kv_can_append(kv, seqs, ns, 2));
    assert_int_equal(ix_kv_seq_free(kv, s), IX_OK); /* returns at once */
    assert_int_equal(ix_kv_n_available(kv), 8);
    assert_true(ix_kv_can_append(kv, seqs + 1, ns + 1, 1));
    assert_false(ix_kv_can_append(kv, seqs, ns, 2)); /* s is gone */
    assert_int_equal(ix_kv_seq_free(kv, s), IX_ERR_INVALID);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_used, 0);
    assert_int_equal(st.n_seqs, 1);
    /* No tokens (prefix cache unused) is allowed. */
    assert_int_equal(ix_kv_seq_append(kv, s2, 6, NULL), IX_OK);
    assert_int_equal(ix_kv_seq_commit(kv, s2, 6), IX_OK);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_cached, 0);
    check(kv);
    ix_kv_destroy(kv);
}

static void test_fork_cow(void **state) {
    (void)state;
    ix_kv *kv = make_kv(16, 4, NULL);
    int32_t a, b, toks[16];
    iota(toks, 16, 10);
    assert_int_equal(ix_kv_seq_create(kv, 7, &a), IX_OK);
    feed(kv, a, toks, 6); /* one full block + 2 tokens */
    assert_int_equal(ix_kv_seq_fork(kv, a, &b), IX_OK);
    int32_t na, nb;
    const int32_t *ta = ix_kv_seq_block_table(kv, a, &na), *tb = ix_kv_seq_block_table(kv, b, &nb);
    assert_int_equal(na, 2);
    assert_int_equal(nb, 2);
    assert_int_equal(ta[0], tb[0]);
    assert_int_equal(ta[1], tb[1]);
    ix_kv_block_info bi;
    ix_kv_get_block_info(kv, ta[1], &bi);
    assert_int_equal(bi.ref, 2);
    int32_t shared_last = ta[1];
    ix_kv_seq_info info;
    assert_int_equal(ix_kv_seq_get_info(kv, b, &info), IX_OK);
    assert_int_equal(info.ns, 7);
    assert_int_equal(info.n_tokens, 6);
    assert_int_equal(info.n_written, 6);
    /* First write by the child copies the shared partial block. */
    assert_int_equal(ix_kv_seq_blocks_needed(kv, b, 1), 1);
    int32_t t = 99;
    assert_int_equal(ix_kv_seq_append(kv, b, 1, &t), IX_OK);
    write_pos(kv, b, 6, 99);
    tb = ix_kv_seq_block_table(kv, b, &nb);
    ta = ix_kv_seq_block_table(kv, a, &na);
    assert_int_not_equal(tb[1], shared_last);
    assert_int_equal(ta[1], shared_last);
    for (int32_t i = 0; i < 6; i++) {
        expect_pos(kv, a, i, 10 + i);
        expect_pos(kv, b, i, 10 + i); /* the copy holds the shared tokens */
    }
    expect_pos(kv, b, 6, 99);
    ix_kv_get_block_info(kv, shared_last, &bi);
    assert_int_equal(bi.ref, 1);
    /* The parent now owns its block alone and writes in place. */
    assert_int_equal(ix_kv_seq_blocks_needed(kv, a, 1), 0);
    feed(kv, a, toks + 6, 1);
    ta = ix_kv_seq_block_table(kv, a, &na);
    assert_int_equal(ta[1], shared_last);
    expect_pos(kv, a, 6, 16);
    expect_pos(kv, b, 6, 99);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_forks, 1);
    assert_int_equal(st.n_cow_copies, 1);
    check(kv);
    /* Forks of a fork, then free in any order. */
    int32_t c, d;
    assert_int_equal(ix_kv_seq_fork(kv, b, &c), IX_OK);
    assert_int_equal(ix_kv_seq_fork(kv, c, &d), IX_OK);
    ix_kv_get_block_info(kv, ta[0], &bi);
    assert_int_equal(bi.ref, 4);
    assert_int_equal(ix_kv_seq_free(kv, b), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK);
    check(kv);
    expect_pos(kv, d, 6, 99);
    assert_int_equal(ix_kv_seq_free(kv, c), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, d), IX_OK);
    assert_int_equal(ix_kv_seq_fork(kv, d, &c), IX_ERR_INVALID);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_used, 0);
    assert_int_equal(st.n_blocks_free + st.n_blocks_evictable, 16);
    check(kv);
    ix_kv_destroy(kv);
}

static void test_truncate(void **state) {
    (void)state;
    ix_kv *kv = make_kv(16, 4, NULL);
    int32_t s, toks[16];
    iota(toks, 16, 1);
    assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
    feed(kv, s, toks, 8);                                          /* two full blocks, cached */
    assert_int_equal(ix_kv_seq_append(kv, s, 5, toks + 8), IX_OK); /* speculative */
    assert_int_equal(ix_kv_n_available(kv), 12);
    assert_int_equal(ix_kv_seq_truncate(kv, s, 14), IX_ERR_RANGE);
    assert_int_equal(ix_kv_seq_truncate(kv, s, -1), IX_ERR_RANGE);
    assert_int_equal(ix_kv_seq_truncate(kv, s, 9), IX_OK); /* reject 4 */
    assert_int_equal(ix_kv_seq_n_tokens(kv, s), 9);
    assert_int_equal(ix_kv_n_available(kv), 13);
    /* Truncating into a cached full block: it must not be written in place. */
    assert_int_equal(ix_kv_seq_truncate(kv, s, 6), IX_OK);
    int32_t nb;
    const int32_t *tab = ix_kv_seq_block_table(kv, s, &nb);
    assert_int_equal(nb, 2);
    int32_t cached_block = tab[1];
    ix_kv_block_info bi;
    ix_kv_get_block_info(kv, cached_block, &bi);
    assert_true(bi.cached);
    assert_int_equal(ix_kv_seq_blocks_needed(kv, s, 1), 1); /* a copy */
    int32_t t = 77;
    feed(kv, s, &t, 1);
    tab = ix_kv_seq_block_table(kv, s, &nb);
    assert_int_not_equal(tab[1], cached_block);
    expect_pos(kv, s, 4, 5);
    expect_pos(kv, s, 5, 6);
    expect_pos(kv, s, 6, 77);
    /* The cached block kept its content and is still served. */
    int32_t s2, n_cached;
    assert_int_equal(ix_kv_seq_create(kv, 0, &s2), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, s2, toks, 9, &n_cached), IX_OK);
    assert_int_equal(n_cached, 8);
    for (int32_t i = 0; i < 8; i++)
        expect_pos(kv, s2, i, 1 + i);
    assert_int_equal(ix_kv_seq_truncate(kv, s, 0), IX_OK);
    assert_int_equal(ix_kv_seq_n_tokens(kv, s), 0);
    check(kv);
    ix_kv_destroy(kv);
}

static void test_prefix_cache(void **state) {
    (void)state;
    ix_kv *kv = make_kv(32, 4, NULL);
    int32_t a, b, n_cached, toks[16];
    int64_t need;
    iota(toks, 16, 500);
    assert_int_equal(ix_kv_seq_create(kv, 1, &a), IX_OK);
    /* Nothing is cached until K/V is committed. */
    assert_int_equal(ix_kv_seq_append(kv, a, 10, toks), IX_OK);
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 10, &n_cached, &need), IX_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(need, 3);
    for (int32_t i = 0; i < 10; i++)
        write_pos(kv, a, i, toks[i]);
    assert_int_equal(ix_kv_seq_commit(kv, a, 5), IX_OK); /* one full block written */
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 10, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(ix_kv_seq_commit(kv, a, 10), IX_OK);
    assert_int_equal(ix_kv_seq_commit(kv, a, 3), IX_OK); /* no-op */
    assert_int_equal(ix_kv_seq_commit(kv, a, 11), IX_ERR_RANGE);
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 10, &n_cached, &need), IX_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(need, 1); /* in-use hits cost nothing */
    /* At least the last prompt token stays uncached. */
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 8, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 9, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 0, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    /* Another namespace never sees it. */
    assert_int_equal(ix_kv_prefix_match(kv, 2, toks, 10, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    /* Chaining: a different first block hides an identical second block. */
    int32_t other[10];
    memcpy(other, toks, sizeof other);
    other[0] = 1;
    assert_int_equal(ix_kv_prefix_match(kv, 1, other, 10, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    memcpy(other, toks, sizeof other);
    other[6] = 1;
    assert_int_equal(ix_kv_prefix_match(kv, 1, other, 10, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);

    /* Adoption while the owner still runs: shared blocks, not copies. */
    assert_int_equal(ix_kv_seq_create(kv, 1, &b), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, b, toks, 12, &n_cached), IX_OK);
    assert_int_equal(n_cached, 8);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, b, toks, 12, &n_cached), IX_ERR_STATE);
    int32_t na, nb;
    const int32_t *ta = ix_kv_seq_block_table(kv, a, &na), *tb = ix_kv_seq_block_table(kv, b, &nb);
    assert_int_equal(nb, 2);
    assert_int_equal(ta[0], tb[0]);
    assert_int_equal(ta[1], tb[1]);
    ix_kv_seq_info info;
    ix_kv_seq_get_info(kv, b, &info);
    assert_int_equal(info.n_tokens, 8);
    assert_int_equal(info.n_written, 8);
    feed(kv, b, toks + 8, 4);
    for (int32_t i = 0; i < 12; i++)
        expect_pos(kv, b, i, toks[i]);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.prefix_queried_tokens, 12);
    assert_int_equal(st.prefix_hit_tokens, 8);
    assert_int_equal(st.n_blocks_cached, 3); /* b registered block 2 */

    /* After both end the blocks stay cached and evictable. */
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, b), IX_OK);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_used, 0);
    assert_int_equal(st.n_blocks_evictable, 3);
    assert_int_equal(st.n_blocks_free, 29);
    assert_int_equal(ix_kv_n_available(kv), 32);
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 16, &n_cached, &need), IX_OK);
    assert_int_equal(n_cached, 12);
    assert_int_equal(need, 4); /* 1 new + 3 evictable hits */
    int32_t c;
    assert_int_equal(ix_kv_seq_create(kv, 1, &c), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, c, toks, 16, &n_cached), IX_OK);
    assert_int_equal(n_cached, 12);
    for (int32_t i = 0; i < 12; i++)
        expect_pos(kv, c, i, toks[i]);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_evictable, 0);
    assert_int_equal(st.n_blocks_used, 3);
    check(kv);

    /* Reset forgets everything, in use or not. */
    ix_kv_prefix_reset(kv);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_cached, 0);
    assert_int_equal(ix_kv_prefix_match(kv, 1, toks, 16, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    check(kv);
    ix_kv_destroy(kv);

    /* Disabled cache: nothing is registered or found. */
    ix_kv_params p = shape(1, 1, 4);
    p.enable_prefix_cache = false;
    kv = make_kv(8, 4, &p);
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    feed(kv, a, toks, 9);
    assert_int_equal(ix_kv_seq_create(kv, 0, &b), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, b, toks, 9, &n_cached), IX_OK);
    assert_int_equal(n_cached, 0);
    ix_kv_destroy(kv);
    assert_int_not_equal(ix_kv_namespace_from_bytes("a", 1), ix_kv_namespace_from_bytes("b", 1));
    assert_int_equal(ix_kv_namespace_from_bytes(NULL, 5), ix_kv_namespace_from_bytes("", 0));
}

static uint64_t constant_hash(uint64_t parent_key, uint64_t ns, const int32_t *tokens, int32_t n) {
    (void)parent_key;
    (void)ns;
    (void)tokens;
    (void)n;
    return 42;
}

/* Every key collides: only the verification stands between a request and
 * somebody else's K/V. */
static void test_hash_collisions(void **state) {
    (void)state;
    ix_kv_params p = shape(1, 1, 2);
    p.hash_fn = constant_hash;
    ix_kv *kv = make_kv(32, 4, &p);
    int32_t x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[9] = {9, 9, 9, 9, 5, 6, 7, 8, 9};
    int32_t z[9] = {1, 2, 3, 4, 5, 6, 7, 0, 9};
    int32_t a, b, c, n_cached;
    assert_int_equal(ix_kv_seq_create(kv, 1, &a), IX_OK);
    feed(kv, a, x, 9);
    assert_int_equal(ix_kv_seq_create(kv, 1, &b), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, b, y, 9, &n_cached), IX_OK);
    assert_int_equal(n_cached, 0);
    feed(kv, b, y, 9); /* y's second block equals x's, but under another parent */
    assert_int_equal(ix_kv_prefix_match(kv, 1, z, 9, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(ix_kv_prefix_match(kv, 2, x, 9, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(ix_kv_seq_create(kv, 1, &c), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, c, y, 9, &n_cached), IX_OK);
    assert_int_equal(n_cached, 8);
    for (int32_t i = 0; i < 8; i++)
        expect_pos(kv, c, i, y[i]);
    int32_t nb, nc;
    const int32_t *tb = ix_kv_seq_block_table(kv, b, &nb), *tc = ix_kv_seq_block_table(kv, c, &nc);
    assert_int_equal(tb[1], tc[1]);
    check(kv);
    ix_kv_destroy(kv);
}

/* Two requests computing the same prompt at once: only one copy is cached,
 * and the second sequence keeps chaining through it. */
static void test_duplicate_blocks(void **state) {
    (void)state;
    ix_kv *kv = make_kv(32, 4, NULL);
    int32_t toks[13], a, b, c, n_cached;
    iota(toks, 13, 3);
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    assert_int_equal(ix_kv_seq_create(kv, 0, &b), IX_OK);
    feed(kv, a, toks, 5);
    feed(kv, b, toks, 9); /* block 0 is a duplicate, block 1 new */
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_cached, 2);
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK); /* the cached block 0 goes to LRU */
    assert_int_equal(ix_kv_seq_create(kv, 0, &c), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, c, toks, 13, &n_cached), IX_OK);
    assert_int_equal(n_cached, 8);
    for (int32_t i = 0; i < 8; i++)
        expect_pos(kv, c, i, toks[i]);
    check(kv);
    ix_kv_destroy(kv);
}

static void test_eviction_order(void **state) {
    (void)state;
    ix_kv *kv = make_kv(6, 2, NULL);
    int32_t r1[6] = {1, 2, 3, 4, 5, 6}, r2[4] = {7, 8, 9, 10}, a, b, n_cached;
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    feed(kv, a, r1, 6); /* 3 cached blocks */
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK);
    assert_int_equal(ix_kv_seq_create(kv, 0, &b), IX_OK);
    feed(kv, b, r2, 4); /* 2 more, taken from never-cached blocks first */
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_evictions, 0);
    assert_int_equal(st.n_blocks_free, 1);
    assert_int_equal(ix_kv_seq_free(kv, b), IX_OK);
    /* LRU now (oldest first): r1 tail, r1 mid, r1 head, r2 tail, r2 head.
     * Taking 2 blocks beyond the free one evicts r1's tail, then its middle. */
    int32_t c;
    int32_t fresh[6] = {50, 51, 52, 53, 54, 55};
    assert_int_equal(ix_kv_seq_create(kv, 9, &c), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, c, 6, fresh), IX_OK);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_evictions, 2);
    assert_int_equal(ix_kv_prefix_match(kv, 0, r1, 6, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 2); /* head survives */
    assert_int_equal(ix_kv_prefix_match(kv, 0, r2, 5, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);
    /* A hit refreshes: r1's head, reused and freed again, is now newer than r2. */
    int32_t d;
    assert_int_equal(ix_kv_seq_create(kv, 0, &d), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, d, r1, 3, &n_cached), IX_OK);
    assert_int_equal(n_cached, 2);
    assert_int_equal(ix_kv_seq_free(kv, d), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, c), IX_OK); /* c's blocks were never committed: free */
    int32_t e, big[12];
    iota(big, 12, 900);
    assert_int_equal(ix_kv_seq_create(kv, 0, &e), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, e, 10, big), IX_OK); /* 3 free + 2 evicted */
    assert_int_equal(ix_kv_prefix_match(kv, 0, r2, 5, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(ix_kv_prefix_match(kv, 0, r1, 6, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 2);
    check(kv);
    ix_kv_destroy(kv);
}

/* Sessions: a pinned conversation outlives anonymous prefixes that are
 * newer on the LRU; it is evicted only when nothing anonymous is left;
 * expiry and drop unpin it; another tenant's id finds nothing. */
static void test_session_pinning(void **state) {
    (void)state;
    ix_kv *kv = make_kv(6, 2, NULL);
    int32_t conv[6] = {1, 2, 3, 4, 5, 6}, anon[4] = {7, 8, 9, 10}, a, b, n_cached;
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    feed(kv, a, conv, 6); /* 3 cached blocks */
    assert_int_equal(ix_kv_session_pin(kv, 42, 1, a, 5000), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK);
    assert_int_equal(ix_kv_seq_create(kv, 0, &b), IX_OK);
    feed(kv, b, anon, 4); /* 2 more: newer than the session's on any single LRU */
    assert_int_equal(ix_kv_seq_free(kv, b), IX_OK);
    check(kv);
    ix_kv_session_info si;
    assert_int_equal(ix_kv_session_get(kv, 42, 1, &si), IX_OK);
    assert_int_equal(si.n_tokens, 6);
    assert_int_equal(si.n_blocks_ram, 3);
    assert_int_equal(si.expires_ms, 5000);
    assert_int_equal(ix_kv_session_get(kv, 42, 2, &si), IX_ERR_NOT_FOUND); /* another tenant */
    assert_int_equal(ix_kv_session_drop(kv, 42, 2), IX_ERR_NOT_FOUND);
    ix_kv_session_stats ss;
    ix_kv_get_session_stats(kv, &ss);
    assert_int_equal(ss.n_sessions, 1);
    assert_int_equal(ss.n_pinned_blocks, 3);
    /* 3 blocks wanted: the free one, then both anonymous blocks, not the session's. */
    int32_t c, fresh[6] = {50, 51, 52, 53, 54, 55};
    assert_int_equal(ix_kv_seq_create(kv, 9, &c), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, c, 6, fresh), IX_OK);
    check(kv);
    assert_int_equal(ix_kv_prefix_match(kv, 0, conv, 7, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 6);
    assert_int_equal(ix_kv_prefix_match(kv, 0, anon, 5, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    assert_int_equal(ix_kv_seq_free(kv, c), IX_OK);
    /* Pinned blocks still serve hits, and leave only when nothing else can. */
    int32_t d, big[12];
    assert_int_equal(ix_kv_seq_create(kv, 0, &d), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, d, conv, 6, &n_cached), IX_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(ix_kv_seq_free(kv, d), IX_OK);
    iota(big, 12, 900);
    assert_int_equal(ix_kv_seq_create(kv, 3, &d), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, d, 8, big), IX_OK); /* 3 free + 1 pinned evicted */
    check(kv);
    assert_int_equal(ix_kv_session_get(kv, 42, 1, &si), IX_OK);
    assert_int_equal(si.n_blocks_ram, 2); /* the tail went first */
    assert_int_equal(ix_kv_prefix_match(kv, 0, conv, 7, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);
    assert_int_equal(ix_kv_seq_free(kv, d), IX_OK);
    /* Expiry: not before its time, then unpinned; the blocks stay cached as ordinary ones. */
    assert_int_equal(ix_kv_session_expire(kv, 4999), 0);
    assert_int_equal(ix_kv_session_expire(kv, 5000), 1);
    ix_kv_get_session_stats(kv, &ss);
    assert_int_equal(ss.n_sessions, 0);
    assert_int_equal(ss.n_pinned_blocks, 0);
    assert_int_equal(ss.n_expired, 1);
    assert_int_equal(ix_kv_session_get(kv, 42, 1, &si), IX_ERR_NOT_FOUND);
    check(kv);
    assert_int_equal(ix_kv_prefix_match(kv, 0, conv, 7, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 4);
    /* Drop: pinned again (a longer turn), then deleted: its blocks leave the cache. */
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, a, conv, 6, &n_cached), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, a, 2, conv + 4), IX_OK);
    assert_int_equal(ix_kv_seq_commit(kv, a, 6), IX_OK);
    assert_int_equal(ix_kv_session_pin(kv, 7, 1, a, 0), IX_OK);
    assert_int_equal(ix_kv_session_pin(kv, 7, 1, a, 0), IX_OK); /* again: the same set, pinned once */
    ix_kv_get_session_stats(kv, &ss);
    assert_int_equal(ss.n_pinned_blocks, 3);
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK);
    assert_int_equal(ix_kv_session_save(kv, 7, 1, NULL), IX_ERR_STATE); /* no disk tier */
    assert_int_equal(ix_kv_session_drop(kv, 7, 1), IX_OK);
    check(kv);
    assert_int_equal(ix_kv_prefix_match(kv, 0, conv, 7, &n_cached, NULL), IX_OK);
    assert_int_equal(n_cached, 0);
    ix_kv_get_session_stats(kv, &ss);
    assert_int_equal(ss.n_pinned_blocks, 0);
    assert_int_equal(ss.n_dropped, 1);
    /* A prefix reset while pinned leaves a consistent cache and a stale session. */
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    feed(kv, a, conv, 6);
    assert_int_equal(ix_kv_session_pin(kv, 8, 1, a, 0), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, a), IX_OK);
    ix_kv_prefix_reset(kv);
    check(kv);
    assert_int_equal(ix_kv_session_get(kv, 8, 1, &si), IX_OK);
    assert_int_equal(si.n_blocks_ram, 0);
    assert_int_equal(ix_kv_session_pin(kv, 8, 1, 99, 0), IX_ERR_INVALID);
    ix_kv_destroy(kv);
}

static void test_sliding_window(void **state) {
    (void)state;
    ix_kv_params p = shape(1, 1, 2);
    p.sliding_window = 6;
    ix_kv *kv = make_kv(8, 4, &p);
    int32_t s, toks[64], nb;
    iota(toks, 64, 0);
    assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
    feed(kv, s, toks, 9); /* next token at 9 reads 4..9: block 0 goes */
    const int32_t *tab = ix_kv_seq_block_table(kv, s, &nb);
    assert_int_equal(nb, 3);
    assert_int_equal(tab[0], IX_KV_NO_BLOCK);
    ix_kv_seq_info info;
    ix_kv_seq_get_info(kv, s, &info);
    assert_int_equal(info.n_blocks_held, 2);
    for (int32_t i = 9; i < 40; i++)
        feed(kv, s, toks + i, 1);
    tab = ix_kv_seq_block_table(kv, s, &nb);
    assert_int_equal(nb, 10);
    for (int32_t j = 0; j < 8; j++)
        assert_int_equal(tab[j], IX_KV_NO_BLOCK);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_blocks_used, 2); /* a 40-token sequence in 2 blocks */
    for (int32_t i = 34; i < 40; i++)
        expect_pos(kv, s, i, i);
    /* Truncation may not reach back past the released blocks. */
    assert_int_equal(ix_kv_seq_truncate(kv, s, 36), IX_ERR_RANGE);
    assert_int_equal(ix_kv_seq_truncate(kv, s, 37), IX_OK);
    /* Uncommitted appends do not release anything yet. */
    assert_int_equal(ix_kv_seq_append(kv, s, 8, toks), IX_OK);
    ix_kv_seq_get_info(kv, s, &info);
    assert_int_equal(info.n_blocks_held, 4);
    assert_int_equal(ix_kv_seq_commit(kv, s, 45), IX_OK); /* token 45 reads 40..45 */
    ix_kv_seq_get_info(kv, s, &info);
    assert_int_equal(info.n_blocks_held, 2);
    /* A fork shares only the held blocks. */
    int32_t f;
    assert_int_equal(ix_kv_seq_fork(kv, s, &f), IX_OK);
    check(kv);
    assert_int_equal(ix_kv_seq_free(kv, s), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, f), IX_OK);
    /* A prefix hit longer than the window keeps only what the window needs. */
    int32_t g, n_cached;
    assert_int_equal(ix_kv_seq_create(kv, 0, &g), IX_OK);
    feed(kv, g, toks, 17);
    assert_int_equal(ix_kv_seq_free(kv, g), IX_OK);
    assert_int_equal(ix_kv_seq_create(kv, 0, &g), IX_OK);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, g, toks, 17, &n_cached), IX_OK);
    assert_int_equal(n_cached, 16);
    ix_kv_seq_get_info(kv, g, &info);
    assert_int_equal(info.n_blocks_held, 2); /* token 16 reads 11..16 */
    check(kv);
    ix_kv_destroy(kv);
}

static void test_swap(void **state) {
    (void)state;
    ix_kv_params p = shape(2, 2, 4);
    p.n_swap_blocks = 3;
    ix_kv *kv = make_kv(6, 4, &p);
    int32_t a, b, toks[12];
    iota(toks, 12, 40);
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    feed(kv, a, toks, 10);
    assert_int_equal(ix_kv_seq_fork(kv, a, &b), IX_OK);
    assert_int_equal(ix_kv_seq_swap_in(kv, a), IX_ERR_STATE);
    assert_int_equal(ix_kv_seq_swap_out(kv, a), IX_OK);
    assert_int_equal(ix_kv_seq_swap_out(kv, a), IX_ERR_STATE);
    assert_int_equal(ix_kv_seq_swap_out(kv, b), IX_FULL); /* 3 swap blocks, all taken */
    int32_t nb;
    assert_null(ix_kv_seq_block_table(kv, a, &nb));
    assert_int_equal(ix_kv_seq_append(kv, a, 1, toks), IX_ERR_STATE);
    assert_int_equal(ix_kv_seq_blocks_needed(kv, a, 1), -1);
    ix_kv_seq_info info;
    ix_kv_seq_get_info(kv, a, &info);
    assert_true(info.swapped);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_swap_blocks_used, 3);
    assert_int_equal(st.n_seqs_swapped, 1);
    check(kv);
    /* Fill the pool so swap-in has to wait. */
    int32_t c;
    assert_int_equal(ix_kv_seq_create(kv, 5, &c), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, c, 12, toks), IX_OK);
    assert_int_equal(ix_kv_seq_swap_in(kv, a), IX_FULL);
    assert_int_equal(ix_kv_seq_free(kv, c), IX_OK);
    assert_int_equal(ix_kv_seq_swap_in(kv, a), IX_OK);
    for (int32_t i = 0; i < 10; i++)
        expect_pos(kv, a, i, toks[i]);
    const int32_t *ta = ix_kv_seq_block_table(kv, a, &nb), *tb;
    int32_t nb2;
    tb = ix_kv_seq_block_table(kv, b, &nb2);
    for (int32_t j = 0; j < 3; j++)
        assert_int_not_equal(ta[j], tb[j]);
    /* The swapped-in tail is a's own: written in place, b unaffected. */
    assert_int_equal(ix_kv_seq_blocks_needed(kv, a, 2), 0);
    feed(kv, a, toks + 10, 2);
    expect_pos(kv, b, 9, toks[9]);
    assert_int_equal(ix_kv_seq_swap_out(kv, b), IX_OK);
    check(kv);
    assert_int_equal(ix_kv_seq_free(kv, b), IX_OK); /* straight from the swap tier */
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_swap_blocks_used, 0);
    assert_int_equal(st.n_blocks_swapped_out, 6);
    assert_int_equal(st.n_blocks_swapped_in, 3);
    assert_int_equal(st.n_seqs_swapped, 0);
    assert_int_equal(st.swap_bytes, 3 * 2 * 2 * 4 * 4 * 4 * 2);
    check(kv);
    ix_kv_destroy(kv);
    /* Without a swap tier the request is refused, nothing changes. */
    kv = make_kv(4, 4, NULL);
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    assert_int_equal(ix_kv_seq_swap_out(kv, a), IX_ERR_STATE);
    ix_kv_destroy(kv);
}

static void test_accounting(void **state) {
    (void)state;
    ix_kv *kv = make_kv(16, 4, NULL);
    int32_t a, b, c, toks[16];
    iota(toks, 16, 1);
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    assert_true(st.utilization == 1.0);
    assert_int_equal(ix_kv_seq_create(kv, 0, &a), IX_OK);
    feed(kv, a, toks, 6); /* 2 blocks, 6 of 8 slots */
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_slots_allocated, 8);
    assert_int_equal(st.n_slots_used, 6);
    assert_true(st.utilization == 0.75);
    assert_int_equal(ix_kv_seq_fork(kv, a, &b), IX_OK); /* sharing costs no slots */
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_slots_allocated, 8);
    assert_int_equal(st.n_slots_used, 6);
    assert_int_equal(ix_kv_seq_truncate(kv, b, 5), IX_OK); /* a still fills 6 of block 1 */
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_slots_used, 6);
    feed(kv, b, toks, 3); /* b copies block 1 and fills it; a's keeps 2 */
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_slots_allocated, 12);
    assert_int_equal(st.n_slots_used, 4 + 2 + 4);
    /* A block full in one holder counts as full even if another ends in it. */
    assert_int_equal(ix_kv_seq_create(kv, 0, &c), IX_OK);
    feed(kv, c, toks, 8);
    int32_t d;
    assert_int_equal(ix_kv_seq_fork(kv, c, &d), IX_OK);
    assert_int_equal(ix_kv_seq_truncate(kv, d, 5), IX_OK);
    ix_kv_get_stats(kv, &st);
    assert_int_equal(st.n_slots_allocated, 20);
    assert_int_equal(st.n_slots_used, 10 + 8);
    assert_int_equal(st.n_seqs, 4);
    assert_int_equal(st.n_forks, 2);
    assert_int_equal(st.n_cow_copies, 1);
    assert_int_equal(st.n_blocks_used + st.n_blocks_free + st.n_blocks_evictable, 16);
    check(kv);
    ix_kv_destroy(kv);
}

static void test_bad_input(void **state) {
    (void)state;
    ix_kv *kv = make_kv(4, 4, NULL);
    int32_t s, out, nb, tok = 1, n_cached;
    ix_kv_seq_info info;
    assert_int_equal(ix_kv_seq_create(kv, 0, NULL), IX_ERR_INVALID);
    assert_int_equal(ix_kv_seq_create(NULL, 0, &s), IX_ERR_INVALID);
    assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
    int32_t bad[] = {-1, s + 1, 1 << 20};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ix_kv_seq_append(kv, bad[i], 1, &tok), IX_ERR_INVALID);
        assert_non_null(strstr(ix_kv_errmsg(kv), "no sequence"));
        assert_int_equal(ix_kv_seq_commit(kv, bad[i], 0), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_truncate(kv, bad[i], 0), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_fork(kv, bad[i], &out), IX_ERR_INVALID);
        assert_int_equal(out, -1);
        assert_int_equal(ix_kv_seq_free(kv, bad[i]), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_swap_out(kv, bad[i]), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_swap_in(kv, bad[i]), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_adopt_prefix(kv, bad[i], &tok, 1, &n_cached), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_get_info(kv, bad[i], &info), IX_ERR_INVALID);
        assert_int_equal(ix_kv_seq_n_tokens(kv, bad[i]), -1);
        assert_int_equal(ix_kv_seq_blocks_needed(kv, bad[i], 1), -1);
        assert_null(ix_kv_seq_block_table(kv, bad[i], &nb));
    }
    assert_int_equal(ix_kv_seq_append(kv, s, -1, &tok), IX_ERR_INVALID);
    assert_int_equal(ix_kv_seq_append(kv, s, 0, NULL), IX_OK);
    assert_int_equal(ix_kv_seq_commit(kv, s, -1), IX_ERR_RANGE);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, s, NULL, 3, &n_cached), IX_ERR_INVALID);
    assert_int_equal(ix_kv_seq_adopt_prefix(kv, s, &tok, -3, &n_cached), IX_ERR_INVALID);
    assert_int_equal(ix_kv_prefix_match(kv, 0, NULL, 3, &n_cached, NULL), IX_ERR_INVALID);
    assert_int_equal(ix_kv_prefix_match(NULL, 0, &tok, 1, &n_cached, NULL), IX_ERR_INVALID);
    assert_int_equal(ix_kv_get_block_info(kv, 4, &(ix_kv_block_info){0}), IX_ERR_INVALID);
    assert_int_equal(ix_kv_get_block_info(kv, -1, &(ix_kv_block_info){0}), IX_ERR_INVALID);
    assert_false(ix_kv_can_append(kv, NULL, NULL, 1));
    assert_true(ix_kv_can_append(kv, NULL, NULL, 0));
    assert_int_equal(ix_kv_n_available(NULL), 0);
    ix_kv_prefix_reset(NULL);
    ix_kv_get_stats(NULL, &(ix_kv_stats){0});
    ix_kv_get_stats(kv, NULL);
    assert_int_equal(ix_kv_check(NULL), IX_ERR_INVALID);
    check(kv);
    ix_kv_destroy(kv);
    /* max_seq_len */
    ix_kv_params p = ix_kv_default_params();
    p.n_layer = p.n_kv_head = p.head_dim = 1;
    p.max_seq_len = 10;
    kv = make_kv(8, 4, &p);
    assert_int_equal(ix_kv_seq_create(kv, 0, &s), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, s, 10, NULL), IX_OK);
    assert_int_equal(ix_kv_seq_append(kv, s, 1, NULL), IX_ERR_TOO_LONG);
    assert_int_equal(ix_kv_seq_n_tokens(kv, s), 10);
    ix_kv_destroy(kv);
}

/* One scenario touching every allocating path: handle, sequence table growth,
 * block table growth, fork, adoption, swap. Returns the first failure. */
static ix_status oom_scenario(size_t *live_during) {
    ix_kv_params p = shape(2, 1, 4);
    p.n_blocks = 64;
    p.block_size = 2;
    p.n_swap_blocks = 32;
    ix_kv *kv = NULL;
    ix_status st = ix_kv_create(&p, &kv, NULL);
    if (st != IX_OK) {
        assert_null(kv);
        return st;
    }
    int32_t seqs[40], n = 0, toks[40], n_cached;
    iota(toks, 40, 0);
    for (; n < 20; n++) { /* grows the sequence table past its first 16 */
        st = ix_kv_seq_create(kv, 0, &seqs[n]);
        if (st != IX_OK) goto out;
    }
    st = ix_kv_seq_append(kv, seqs[0], 40, toks); /* grows the block table */
    if (st != IX_OK) goto out;
    st = ix_kv_seq_commit(kv, seqs[0], 40);
    if (st != IX_OK) goto out;
    st = ix_kv_seq_fork(kv, seqs[0], &seqs[n]);
    if (st != IX_OK) goto out;
    n++;
    st = ix_kv_seq_adopt_prefix(kv, seqs[1], toks, 40, &n_cached);
    if (st != IX_OK) goto out;
    assert_int_equal(n_cached, 38);
    st = ix_kv_seq_swap_out(kv, seqs[0]);
    if (st != IX_OK) goto out;
    st = ix_kv_seq_swap_in(kv, seqs[0]);
out:
    /* Whatever failed, the cache is consistent and usable. */
    check(kv);
    *live_during = ix_mem_live_count();
    ix_kv_destroy(kv);
    return st;
}

static void test_out_of_memory(void **state) {
    (void)state;
    size_t live0 = ix_mem_live_count(), bytes0 = ix_mem_live_bytes(), during;
    long n;
    for (n = 0; n < 1000; n++) {
        ix_mem_fail_after(n);
        ix_status st = oom_scenario(&during);
        long failed = ix_mem_failed_count();
        ix_mem_fail_reset();
        assert_int_equal(ix_mem_live_count(), live0);
        assert_int_equal(ix_mem_live_bytes(), bytes0);
        if (failed == 0) {
            assert_int_equal(st, IX_OK);
            break;
        }
        assert_int_equal(st, IX_ERR_NOMEM);
    }
    assert_true(n > 5); /* several distinct allocation sites were failed */
    assert_true(n < 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_layout_pointers),
        cmocka_unit_test(test_append_and_free),
        cmocka_unit_test(test_fork_cow),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_hash_collisions),
        cmocka_unit_test(test_duplicate_blocks),
        cmocka_unit_test(test_eviction_order),
        cmocka_unit_test(test_session_pinning),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_swap),
        cmocka_unit_test(test_accounting),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
