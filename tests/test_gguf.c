/* gguf: reading the bundled model and the shared vocab files, typed lookups and
 * their errors, handmade v2 files and nested arrays, specific format errors
 * and their messages, and writer round trips (memory and file). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf_test_util.h"
#include "inferx/gguf.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"

static const size_t k_type_size[IX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static ix_gguf *open_ok(const char *path) {
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_gguf_open(&g, path, &err);
    if (s != IX_OK) fail_msg("opening %s: %s: %s", path, ix_status_name(s), err.msg);
    return g;
}

static ix_gguf *open_mem_ok(const void *data, size_t size) {
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_gguf_open_memory(&g, data, size, &err);
    if (s != IX_OK) fail_msg("open_memory: %s: %s", ix_status_name(s), err.msg);
    return g;
}

/* Opens b and expects status `want` with every given substring in the
 * message. */
static void expect_error(const ix_buf *b, ix_status want, const char *sub1, const char *sub2) {
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_gguf_open_memory(&g, b->data, b->len, &err);
    if (s != want || (sub1 && !strstr(err.msg, sub1)) || (sub2 && !strstr(err.msg, sub2)))
        fail_msg("want %s with '%s' '%s', got %s: '%s'", ix_status_name(want), sub1 ? sub1 : "",
                 sub2 ? sub2 : "", ix_status_name(s), err.msg);
    assert_null(g);
}

static bool str_is(ix_str s, const char *c) { return ix_str_eq(s, c); }

/* ---- types ---------------------------------------------------------------- */

static void test_dtype(void **state) {
    (void)state;
    assert_string_equal(ix_dtype_name(IX_DTYPE_Q4_K), "Q4_K");
    assert_int_equal(ix_dtype_block_size(IX_DTYPE_Q8_0), 32);
    assert_int_equal(ix_dtype_type_size(IX_DTYPE_Q8_0), 34);
    assert_int_equal(ix_dtype_type_size(IX_DTYPE_BF16), 2);
    assert_int_equal(ix_dtype_block_size(IX_DTYPE_MXFP4), 32);
    assert_true(ix_dtype_known(IX_DTYPE_F32));
    assert_false(ix_dtype_known((ix_dtype)4)); /* retired Q4_2 */
    assert_false(ix_dtype_known((ix_dtype)31));
    assert_false(ix_dtype_known((ix_dtype)1000));
    assert_false(ix_dtype_known((ix_dtype)-1));
    assert_null(ix_dtype_name((ix_dtype)5));
    assert_int_equal(ix_dtype_block_size((ix_dtype)99), 0);
    uint64_t n;
    assert_true(ix_dtype_row_bytes(IX_DTYPE_Q4_0, 64, &n));
    assert_int_equal(n, 36);
    assert_false(ix_dtype_row_bytes(IX_DTYPE_Q4_0, 33, &n));
    assert_false(ix_dtype_row_bytes((ix_dtype)77, 32, &n));
    assert_false(ix_dtype_row_bytes(IX_DTYPE_F64, UINT64_MAX / 4, &n)); /* overflow */
    assert_true(ix_dtype_row_bytes(IX_DTYPE_F16, 288, &n));
    assert_int_equal(n, 576);
    assert_string_equal(ix_gguf_type_name(IX_GGUF_UINT32), "u32");
    assert_string_equal(ix_gguf_type_name(IX_GGUF_STRING), "string");
    assert_string_equal(ix_gguf_type_name((ix_gguf_type)13), "unknown");
}

/* ---- the bundled model ---------------------------------------------------- */

typedef struct expect_tensor {
    const char *name;
    uint32_t n_dims;
    int64_t ne0, ne1;
    ix_dtype type;
} expect_tensor;

static void check_tensor(const ix_gguf *g, const char *name, uint32_t n_dims, int64_t ne0, int64_t ne1,
                         ix_dtype type) {
    const ix_gguf_tensor *t = ix_gguf_find_tensor(g, name);
    if (!t) fail_msg("tensor %s missing", name);
    assert_true(str_is(t->name, name));
    assert_int_equal(t->n_dims, n_dims);
    assert_int_equal(t->ne[0], ne0);
    assert_int_equal(t->ne[1], ne1);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->type, type);
    assert_int_equal(t->n_elements, (uint64_t)(ne0 * ne1));
    assert_int_equal(t->n_bytes, t->n_elements * (type == IX_DTYPE_F32 ? 4 : 2));
}

static void check_model(const ix_gguf *g) {
    assert_int_equal(ix_gguf_version(g), 3);
    assert_int_equal(ix_gguf_alignment(g), 32);
    assert_int_equal(ix_gguf_file_size(g), 15448448);
    assert_int_equal(ix_gguf_data_offset(g), 98048);
    assert_int_equal(ix_gguf_n_kv(g), 24);
    assert_int_equal(ix_gguf_n_tensors(g), 57);

    ix_errbuf err = {{0}};
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    ix_str s;
    ix_gguf_arr arr;
    assert_int_equal(ix_gguf_get_u32(g, "llama.block_count", &u32, &err), IX_OK);
    assert_int_equal(u32, 6);
    assert_int_equal(ix_gguf_get_u64(g, "llama.embedding_length", &u64, &err), IX_OK);
    assert_int_equal(u64, 288);
    assert_int_equal(ix_gguf_get_i64(g, "llama.feed_forward_length", &i64, &err), IX_OK);
    assert_int_equal(i64, 768);
    assert_int_equal(ix_gguf_get_u32(g, "llama.attention.head_count_kv", &u32, &err), IX_OK);
    assert_int_equal(u32, 2);
    assert_int_equal(ix_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f, &err), IX_OK);
    assert_true(fabsf(f - 1e-5f) < 1e-9f);
    assert_int_equal(ix_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), IX_OK);
    assert_true(f == 10000.0f);
    assert_int_equal(ix_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, &err), IX_OK);
    assert_true(b);
    assert_int_equal(ix_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b, &err), IX_OK);
    assert_false(b);
    assert_int_equal(ix_gguf_get_str(g, "general.architecture", &s, &err), IX_OK);
    assert_true(str_is(s, "llama"));
    assert_int_equal(ix_gguf_get_str(g, "tokenizer.ggml.model", &s, &err), IX_OK);
    assert_true(str_is(s, "llama"));

    assert_int_equal(ix_gguf_get_arr(g, "tokenizer.ggml.tokens", IX_GGUF_STRING, &arr, &err), IX_OK);
    assert_int_equal(arr.n, 4096);
    assert_true(str_is(ix_gguf_arr_str(&arr, 0), "<unk>"));
    assert_true(str_is(ix_gguf_arr_str(&arr, 1), "<s>"));
    assert_true(str_is(ix_gguf_arr_str(&arr, 2), "</s>"));
    assert_true(str_is(ix_gguf_arr_str(&arr, 3), "<0x00>"));
    assert_true(str_is(ix_gguf_arr_str(&arr, 258), "<0xFF>"));
    assert_true(ix_gguf_arr_str(&arr, 4095).len > 0);
    assert_int_equal(ix_gguf_get_arr(g, "tokenizer.ggml.scores", IX_GGUF_FLOAT32, &arr, &err), IX_OK);
    assert_int_equal(arr.n, 4096);
    assert_true(ix_gguf_arr_f64(&arr, 0) == 0.0);
    assert_true(ix_gguf_arr_f64(&arr, 4095) < 0.0); /* BPE: minus the merge rank */
    assert_int_equal(ix_gguf_get_arr(g, "tokenizer.ggml.token_type", IX_GGUF_TYPE_COUNT, &arr, &err), IX_OK);
    assert_int_equal(arr.type, IX_GGUF_INT32);
    assert_int_equal(ix_gguf_arr_i64(&arr, 0), 2); /* unknown */
    assert_int_equal(ix_gguf_arr_i64(&arr, 1), 3); /* control */
    assert_int_equal(ix_gguf_arr_i64(&arr, 3), 6); /* byte */
    assert_int_equal(ix_gguf_arr_u64(&arr, 300), 1);
    assert_true(ix_gguf_arr_f64(&arr, 300) == 1.0);

    /* type mismatches name the key and the stored type */
    err.msg[0] = '\0';
    assert_int_equal(ix_gguf_get_u32(g, "general.name", &u32, &err), IX_ERR_TYPE);
    assert_non_null(strstr(err.msg, "general.name"));
    assert_non_null(strstr(err.msg, "string"));
    assert_int_equal(ix_gguf_get_str(g, "llama.block_count", &s, &err), IX_ERR_TYPE);
    assert_non_null(strstr(err.msg, "u32"));
    assert_int_equal(ix_gguf_get_bool(g, "llama.block_count", &b, &err), IX_ERR_TYPE);
    assert_int_equal(ix_gguf_get_f32(g, "llama.block_count", &f, &err), IX_ERR_TYPE);
    assert_int_equal(ix_gguf_get_u32(g, "llama.rope.freq_base", &u32, &err), IX_ERR_TYPE);
    assert_int_equal(ix_gguf_get_u32(g, "tokenizer.ggml.add_bos_token", &u32, &err), IX_ERR_TYPE);
    assert_int_equal(ix_gguf_get_u64(g, "tokenizer.ggml.tokens", &u64, &err), IX_ERR_TYPE);
    assert_non_null(strstr(err.msg, "array of string"));
    assert_int_equal(ix_gguf_get_arr(g, "tokenizer.ggml.tokens", IX_GGUF_FLOAT32, &arr, &err), IX_ERR_TYPE);
    assert_non_null(strstr(err.msg, "expected array of f32"));
    assert_int_equal(ix_gguf_get_arr(g, "general.name", IX_GGUF_TYPE_COUNT, &arr, &err), IX_ERR_TYPE);
    assert_int_equal(ix_gguf_get_u32(g, "no.such.key", &u32, &err), IX_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no.such.key"));
    assert_int_equal(ix_gguf_get_u32(g, "llama.block_coun", &u32, NULL), IX_ERR_NOT_FOUND);
    assert_int_equal(ix_gguf_find_key(g, "general.architecture"), 0);
    assert_int_equal(ix_gguf_find_key(g, "tokenizer.ggml.add_space_prefix"), 23);
    assert_int_equal(ix_gguf_find_key(g, ""), -1);
    assert_int_equal(ix_gguf_find_key(g, NULL), -1);
    for (uint64_t i = 0; i < ix_gguf_n_kv(g); i++) {
        char key[128];
        ix_str k = ix_gguf_kv_key(g, i);
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        assert_int_equal(ix_gguf_find_key(g, key), (int64_t)i);
    }
    ix_gguf_value v = ix_gguf_kv_value(g, 2); /* general.file_type */
    assert_int_equal(v.type, IX_GGUF_UINT32);
    assert_int_equal(v.v.u64, 1);

    /* tensors, as in ../shared/models/README.md */
    check_tensor(g, "token_embd.weight", 2, 288, 4096, IX_DTYPE_F16);
    check_tensor(g, "output_norm.weight", 1, 288, 1, IX_DTYPE_F32);
    check_tensor(g, "output.weight", 2, 288, 4096, IX_DTYPE_F16);
    for (int l = 0; l < 6; l++) {
        char n[64];
#define BLK(suffix, nd, a, b_, ty)                                              \
        snprintf(n, sizeof n, "blk.%d." suffix, l);                            \
        check_tensor(g, n, nd, a, b_, ty)
        BLK("attn_norm.weight", 1, 288, 1, IX_DTYPE_F32);
        BLK("attn_q.weight", 2, 288, 288, IX_DTYPE_F16);
        BLK("attn_k.weight", 2, 288, 96, IX_DTYPE_F16);
        BLK("attn_v.weight", 2, 288, 96, IX_DTYPE_F16);
        BLK("attn_output.weight", 2, 288, 288, IX_DTYPE_F16);
        BLK("ffn_norm.weight", 1, 288, 1, IX_DTYPE_F32);
        BLK("ffn_gate.weight", 2, 288, 768, IX_DTYPE_F16);
        BLK("ffn_up.weight", 2, 288, 768, IX_DTYPE_F16);
        BLK("ffn_down.weight", 2, 768, 288, IX_DTYPE_F16);
#undef BLK
    }
    assert_null(ix_gguf_find_tensor(g, "blk.6.attn_q.weight"));
    assert_null(ix_gguf_find_tensor(g, NULL));
    assert_null(ix_gguf_tensor_at(g, 57));
    uint64_t params = 0;
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
        params += t->n_elements;
        assert_int_equal(t->offset % 32, 0);
    }
    assert_int_equal(params, 7671456);
    const ix_gguf_tensor *t0 = ix_gguf_tensor_at(g, 0);
    assert_true(str_is(t0->name, "token_embd.weight"));
    assert_int_equal(t0->offset, 0);
    const ix_gguf_tensor *last = ix_gguf_tensor_at(g, 56);
    assert_int_equal(ix_gguf_data_offset(g) + last->offset + last->n_bytes, ix_gguf_file_size(g));
}

static void test_model_file(void **state) {
    (void)state;
    size_t live = ix_mem_live_count();
    ix_gguf *g = open_ok(MODEL);
    check_model(g);
    /* mmap'ed: the map is page-aligned, so data is aligned in memory too */
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++)
        assert_int_equal((uintptr_t)ix_gguf_tensor_at(g, i)->data % 32, 0);
    walk_gguf(g);
    ix_gguf_close(g);
    ix_gguf_close(NULL);
    assert_int_equal(ix_mem_live_count(), live);
}

static void test_model_memory(void **state) {
    (void)state;
    size_t size = 0;
    uint8_t *data = read_whole_file(MODEL, &size);
    assert_non_null(data);
    ix_gguf *g = open_mem_ok(data, size);
    check_model(g);
    const ix_gguf_tensor *t = ix_gguf_find_tensor(g, "output_norm.weight");
    assert_ptr_equal(t->data, data + ix_gguf_data_offset(g) + t->offset);
    ix_gguf_close(g);
    free(data);
}

static void test_vocab_files(void **state) {
    (void)state;
    DIR *d = opendir(IX_SHARED_DIR "/vocab");
    if (!d) {
        print_message("skipping: %s/vocab is absent\n", IX_SHARED_DIR);
        skip();
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/vocab/%s", IX_SHARED_DIR, e->d_name);
        ix_gguf *g = open_ok(path);
        assert_int_equal(ix_gguf_n_tensors(g), 0);
        ix_gguf_arr tokens;
        ix_errbuf err;
        assert_int_equal(ix_gguf_get_arr(g, "tokenizer.ggml.tokens", IX_GGUF_STRING, &tokens, &err), IX_OK);
        assert_true(tokens.n > 1000);
        ix_str model;
        assert_int_equal(ix_gguf_get_str(g, "tokenizer.ggml.model", &model, &err), IX_OK);
        walk_gguf(g);
        ix_gguf_close(g);
        n++;
    }
    closedir(d);
    assert_true(n >= 1);
}

/* ---- comparing two readers through the public API -------------------------- */

static void assert_arr_equal(const ix_gguf_arr *a, const ix_gguf_arr *b) {
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->n, b->n);
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == IX_GGUF_STRING) {
            ix_str x = ix_gguf_arr_str(a, i), y = ix_gguf_arr_str(b, i);
            assert_int_equal(x.len, y.len);
            assert_memory_equal(x.ptr, y.ptr, x.len);
        } else if (a->type == IX_GGUF_ARRAY) {
            ix_gguf_arr x = ix_gguf_arr_arr(a, i), y = ix_gguf_arr_arr(b, i);
            assert_arr_equal(&x, &y);
        }
    }
    size_t sz = k_type_size[a->type];
    if (sz && a->n) assert_memory_equal(a->data, b->data, a->n * sz);
}

static void assert_gguf_equal(const ix_gguf *a, const ix_gguf *b) {
    assert_int_equal(ix_gguf_n_kv(a), ix_gguf_n_kv(b));
    for (uint64_t i = 0; i < ix_gguf_n_kv(a); i++) {
        ix_str ka = ix_gguf_kv_key(a, i), kb = ix_gguf_kv_key(b, i);
        assert_int_equal(ka.len, kb.len);
        assert_memory_equal(ka.ptr, kb.ptr, ka.len);
        ix_gguf_value va = ix_gguf_kv_value(a, i), vb = ix_gguf_kv_value(b, i);
        assert_int_equal(va.type, vb.type);
        if (va.type == IX_GGUF_STRING) {
            assert_int_equal(va.v.str.len, vb.v.str.len);
            assert_memory_equal(va.v.str.ptr, vb.v.str.ptr, va.v.str.len);
        } else if (va.type == IX_GGUF_ARRAY) {
            assert_arr_equal(&va.v.arr, &vb.v.arr);
        } else if (va.type == IX_GGUF_BOOL) {
            assert_int_equal(va.v.b, vb.v.b);
        } else {
            assert_memory_equal(&va.v.u64, &vb.v.u64, sizeof va.v.u64);
        }
    }
    assert_int_equal(ix_gguf_n_tensors(a), ix_gguf_n_tensors(b));
    for (uint64_t i = 0; i < ix_gguf_n_tensors(a); i++) {
        const ix_gguf_tensor *x = ix_gguf_tensor_at(a, i), *y = ix_gguf_tensor_at(b, i);
        assert_int_equal(x->name.len, y->name.len);
        assert_memory_equal(x->name.ptr, y->name.ptr, x->name.len);
        assert_int_equal(x->n_dims, y->n_dims);
        assert_memory_equal(x->ne, y->ne, sizeof x->ne);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->n_elements, y->n_elements);
        assert_int_equal(x->n_bytes, y->n_bytes);
        assert_memory_equal(x->data, y->data, x->n_bytes);
    }
}

/* Copies every key and tensor of g into a new writer. */
static ix_gguf_writer *copy_all(const ix_gguf *g) {
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_non_null(w);
    for (uint64_t i = 0; i < ix_gguf_n_kv(g); i++)
        if (ix_gguf_writer_copy_kv(w, g, i) != IX_OK) fail_msg("copy_kv %d: %s", (int)i, ix_gguf_writer_errmsg(w));
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (ix_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data) != IX_OK)
            fail_msg("add_tensor %s: %s", name, ix_gguf_writer_errmsg(w));
    }
    return w;
}

static void test_roundtrip_model(void **state) {
    (void)state;
    size_t live = ix_mem_live_count();
    size_t size = 0;
    uint8_t *orig = read_whole_file(MODEL, &size);
    assert_non_null(orig);
    ix_gguf *g = open_ok(MODEL);
    ix_gguf_writer *w = copy_all(g);
    void *out;
    size_t out_size;
    assert_int_equal(ix_gguf_writer_write_memory(w, &out, &out_size), IX_OK);
    ix_gguf *g2 = open_mem_ok(out, out_size);
    assert_int_equal(ix_gguf_version(g2), 3);
    assert_int_equal(ix_gguf_data_offset(g2), ix_gguf_data_offset(g));
    assert_gguf_equal(g, g2);
    /* Same order, alignment and packing as the converter that made it: the
     * copy is the original file, byte for byte. */
    assert_int_equal(out_size, size);
    assert_memory_equal(out, orig, size);
    ix_gguf_close(g2);
    ix_free(out);
    ix_gguf_writer_destroy(w);
    ix_gguf_close(g);
    free(orig);
    assert_int_equal(ix_mem_live_count(), live);
}

/* ---- handmade files --------------------------------------------------------- */

/* A v2 file: same layout as v3 for little-endian files. */
static void test_v2_file(void **state) {
    (void)state;
    ix_buf b = {0};
    hb_header(&b, 2, 2, 2);
    hb_key(&b, "general.name", IX_GGUF_STRING);
    hb_str(&b, "v2 test");
    hb_kv_u32(&b, "answer", 42);
    uint64_t ne[2] = {4, 2};
    hb_tensor(&b, "a", 2, ne, IX_DTYPE_F32, 0);
    hb_tensor(&b, "b", 1, ne, IX_DTYPE_F16, 32);
    hb_pad(&b, 32);
    for (int i = 0; i < 8; i++) {
        float f = (float)i;
        hb_bytes(&b, &f, 4);
    }
    hb_zeros(&b, 8);
    ix_gguf *g = open_mem_ok(b.data, b.len);
    assert_int_equal(ix_gguf_version(g), 2);
    uint32_t v;
    assert_int_equal(ix_gguf_get_u32(g, "answer", &v, NULL), IX_OK);
    assert_int_equal(v, 42);
    const ix_gguf_tensor *t = ix_gguf_find_tensor(g, "a");
    assert_non_null(t);
    assert_int_equal(t->n_bytes, 32);
    assert_true(((const float *)t->data)[7] == 7.0f);
    assert_int_equal(ix_gguf_find_tensor(g, "b")->n_bytes, 8);
    walk_gguf(g);
    ix_gguf_close(g);
    ix_buf_free(&b);
}

/* nested = [[1, 2, 3] (u32), [] (string), [["a", "bc"], [""]]]; after = 7 */
static void build_nested(ix_buf *b) {
    hb_header(b, 3, 0, 2);
    hb_key(b, "nested", IX_GGUF_ARRAY);
    hb_u32(b, IX_GGUF_ARRAY);
    hb_u64(b, 3);
    hb_u32(b, IX_GGUF_UINT32);
    hb_u64(b, 3);
    hb_u32(b, 1);
    hb_u32(b, 2);
    hb_u32(b, 3);
    hb_u32(b, IX_GGUF_STRING);
    hb_u64(b, 0);
    hb_u32(b, IX_GGUF_ARRAY);
    hb_u64(b, 2);
    hb_u32(b, IX_GGUF_STRING);
    hb_u64(b, 2);
    hb_str(b, "a");
    hb_str(b, "bc");
    hb_u32(b, IX_GGUF_STRING);
    hb_u64(b, 1);
    hb_str(b, "");
    hb_kv_u32(b, "after", 7);
}

static void check_nested(const ix_gguf *g) {
    ix_gguf_arr top, e;
    assert_int_equal(ix_gguf_get_arr(g, "nested", IX_GGUF_ARRAY, &top, NULL), IX_OK);
    assert_int_equal(top.n, 3);
    e = ix_gguf_arr_arr(&top, 0);
    assert_int_equal(e.type, IX_GGUF_UINT32);
    assert_int_equal(e.n, 3);
    assert_int_equal(ix_gguf_arr_u64(&e, 2), 3);
    e = ix_gguf_arr_arr(&top, 1);
    assert_int_equal(e.type, IX_GGUF_STRING);
    assert_int_equal(e.n, 0);
    e = ix_gguf_arr_arr(&top, 2);
    assert_int_equal(e.type, IX_GGUF_ARRAY);
    assert_int_equal(e.n, 2);
    ix_gguf_arr s0 = ix_gguf_arr_arr(&e, 0), s1 = ix_gguf_arr_arr(&e, 1);
    assert_int_equal(s0.n, 2);
    assert_true(str_is(ix_gguf_arr_str(&s0, 0), "a"));
    assert_true(str_is(ix_gguf_arr_str(&s0, 1), "bc"));
    assert_int_equal(s1.n, 1);
    assert_true(str_is(ix_gguf_arr_str(&s1, 0), ""));
    uint32_t v;
    assert_int_equal(ix_gguf_get_u32(g, "after", &v, NULL), IX_OK);
    assert_int_equal(v, 7);
}

static void test_nested_arrays(void **state) {
    (void)state;
    ix_buf b = {0};
    build_nested(&b);
    ix_gguf *g = open_mem_ok(b.data, b.len);
    check_nested(g);
    /* copy through the writer and back */
    ix_gguf_writer *w = copy_all(g);
    void *out;
    size_t n;
    assert_int_equal(ix_gguf_writer_write_memory(w, &out, &n), IX_OK);
    ix_gguf *g2 = open_mem_ok(out, n);
    check_nested(g2);
    assert_gguf_equal(g, g2);
    assert_int_equal(n, b.len); /* no tensors: ends at the header, as the input */
    assert_memory_equal(out, b.data, n);
    ix_gguf_close(g2);
    ix_free(out);
    ix_gguf_writer_destroy(w);
    ix_gguf_close(g);
    ix_buf_free(&b);
}

static void build_deep(ix_buf *b, int depth) {
    hb_header(b, 3, 0, 1);
    hb_key(b, "deep", IX_GGUF_ARRAY);
    for (int i = 1; i < depth; i++) {
        hb_u32(b, IX_GGUF_ARRAY);
        hb_u64(b, 1);
    }
    hb_u32(b, IX_GGUF_UINT8);
    hb_u64(b, 1);
    hb_u8(b, 42);
}

static void test_array_depth(void **state) {
    (void)state;
    ix_buf b = {0};
    build_deep(&b, IX_GGUF_MAX_ARRAY_DEPTH);
    ix_gguf *g = open_mem_ok(b.data, b.len);
    ix_gguf_arr a;
    assert_int_equal(ix_gguf_get_arr(g, "deep", IX_GGUF_ARRAY, &a, NULL), IX_OK);
    for (int i = 1; i < IX_GGUF_MAX_ARRAY_DEPTH; i++) a = ix_gguf_arr_arr(&a, 0);
    assert_int_equal(a.type, IX_GGUF_UINT8);
    assert_int_equal(ix_gguf_arr_u64(&a, 0), 42);
    ix_gguf_close(g);
    ix_buf_clear(&b);
    build_deep(&b, IX_GGUF_MAX_ARRAY_DEPTH + 1);
    expect_error(&b, IX_ERR_FORMAT, "key #0 'deep'", "nested more than 8 deep");
    ix_buf_free(&b);
}

/* ---- specific errors and their messages -------------------------------------- */

/* A file with one F32 tensor "t" of ne {8} at offset off and data_bytes of data. */
static void build_one_tensor(ix_buf *b, uint32_t type, uint32_t n_dims, const uint64_t *ne, uint64_t off,
                             size_t data_bytes) {
    hb_header(b, 3, 1, 0);
    hb_tensor(b, "t", n_dims, ne, type, off);
    hb_pad(b, 32);
    hb_zeros(b, data_bytes);
}

static void test_format_errors(void **state) {
    (void)state;
    ix_buf b = {0};
#define RESET() ix_buf_clear(&b)

    /* magic, version, endianness */
    RESET();
    hb_bytes(&b, "GGU", 3);
    expect_error(&b, IX_ERR_FORMAT, "too small", NULL);
    RESET();
    hb_bytes(&b, "PK\x03\x04 and more bytes here.....", 28);
    expect_error(&b, IX_ERR_FORMAT, "not a GGUF file", "'PK\\x03\\x04'");
    RESET();
    hb_header(&b, 1, 0, 0);
    expect_error(&b, IX_ERR_UNSUPPORTED, "v1", NULL);
    RESET();
    hb_header(&b, 4, 0, 0);
    expect_error(&b, IX_ERR_UNSUPPORTED, "version 4", NULL);
    RESET();
    hb_bytes(&b, "GGUF\0\0\0\3", 8);
    hb_zeros(&b, 16);
    expect_error(&b, IX_ERR_UNSUPPORTED, "big-endian", NULL);
    RESET();
    hb_bytes(&b, "FUGG\0\0\0\3", 8);
    hb_zeros(&b, 16);
    expect_error(&b, IX_ERR_UNSUPPORTED, "big-endian", NULL);
    RESET();
    hb_bytes(&b, "tjgg", 4);
    hb_zeros(&b, 20);
    expect_error(&b, IX_ERR_UNSUPPORTED, "legacy", NULL);
    RESET();
    hb_bytes(&b, "GGUF\3\0\0\0", 8);
    expect_error(&b, IX_ERR_FORMAT, "header", "runs past end of file");

    /* counts */
    RESET();
    hb_header(&b, 3, 0, 1000);
    hb_kv_u32(&b, "a", 1);
    expect_error(&b, IX_ERR_FORMAT, "n_kv 1000 is implausible", NULL);
    RESET();
    hb_header(&b, 3, UINT64_MAX, 0);
    expect_error(&b, IX_ERR_FORMAT, "n_tensors", "implausible");

    /* keys and values */
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "", IX_GGUF_UINT8);
    hb_u8(&b, 0);
    hb_zeros(&b, 8);
    expect_error(&b, IX_ERR_FORMAT, "key #0: empty key", NULL);
    RESET();
    hb_header(&b, 3, 0, 2);
    hb_kv_u32(&b, "a", 1);
    hb_key(&b, "b", (ix_gguf_type)13);
    hb_u32(&b, 0);
    expect_error(&b, IX_ERR_FORMAT, "key #1 'b': unknown value type 13", NULL);
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "flag", IX_GGUF_BOOL);
    hb_u8(&b, 2);
    expect_error(&b, IX_ERR_FORMAT, "key #0 'flag'", "neither 0 nor 1");
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "flags", IX_GGUF_ARRAY);
    hb_u32(&b, IX_GGUF_BOOL);
    hb_u64(&b, 3);
    hb_bytes(&b, "\1\0\7", 3);
    expect_error(&b, IX_ERR_FORMAT, "array of 3 bools: bool 2 is 7", NULL);
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "tokenizer.ggml.tokens", IX_GGUF_ARRAY);
    hb_u32(&b, IX_GGUF_STRING);
    hb_u64(&b, 2);
    hb_str(&b, "ab");
    hb_u64(&b, 4294967296ull);
    hb_bytes(&b, "xyz", 3);
    expect_error(&b, IX_ERR_FORMAT,
                 "key #0 'tokenizer.ggml.tokens': array of 2 strings: string 1 length 4294967296 runs past end "
                 "of file (offset 79, file size 90)",
                 NULL);
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "x", IX_GGUF_ARRAY);
    hb_u32(&b, IX_GGUF_ARRAY);
    hb_u64(&b, 2);
    hb_u32(&b, IX_GGUF_UINT8);
    hb_u64(&b, 0);
    hb_u32(&b, IX_GGUF_STRING);
    hb_u64(&b, 2);
    hb_str(&b, "");
    hb_u64(&b, 4294967296ull);
    hb_bytes(&b, "abc", 3);
    expect_error(&b, IX_ERR_FORMAT,
                 "key #0 'x': array of 2 arrays: array 1 of 2 strings: string 1 length 4294967296 runs past end "
                 "of file (offset 81, file size 92)",
                 NULL);
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "x", IX_GGUF_ARRAY);
    hb_u32(&b, IX_GGUF_UINT32);
    hb_u64(&b, 0x4000000000000001ull); /* x4 wraps to 4 */
    hb_u32(&b, 1);
    expect_error(&b, IX_ERR_FORMAT, "array of 4611686018427387905 u32s", "runs past end of file");
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "x", IX_GGUF_ARRAY);
    hb_u32(&b, 99);
    hb_u64(&b, 0);
    expect_error(&b, IX_ERR_FORMAT, "unknown element type 99", NULL);
    RESET();
    hb_header(&b, 3, 0, 2);
    hb_kv_u32(&b, "dup", 1);
    hb_kv_u32(&b, "dup", 2);
    expect_error(&b, IX_ERR_FORMAT, "duplicate key 'dup' (keys #0 and #1)", NULL);
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_str(&b, "k\x01'");
    hb_u32(&b, 77);
    expect_error(&b, IX_ERR_FORMAT, "key #0 'k\\x01\\x27': unknown value type 77", NULL);

    /* alignment */
    uint32_t bad_align[] = {0, 3, 48};
    for (size_t i = 0; i < IX_ARRAY_LEN(bad_align); i++) {
        RESET();
        hb_header(&b, 3, 0, 1);
        hb_kv_u32(&b, "general.alignment", bad_align[i]);
        expect_error(&b, IX_ERR_FORMAT, "'general.alignment'", "not a non-zero power of two");
    }
    RESET();
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "general.alignment", IX_GGUF_UINT64);
    hb_u64(&b, 32);
    expect_error(&b, IX_ERR_FORMAT, "'general.alignment': type u64, must be u32", NULL);

    /* tensors */
    uint64_t ne8[1] = {8};
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 1, ne8, 0, 32);
    ix_gguf *g = open_mem_ok(b.data, b.len); /* the good one */
    ix_gguf_close(g);
    RESET();
    build_one_tensor(&b, 99, 1, ne8, 0, 32);
    expect_error(&b, IX_ERR_UNSUPPORTED, "tensor #0 't': unknown tensor type 99", NULL);
    RESET();
    build_one_tensor(&b, 4, 1, ne8, 0, 32);
    expect_error(&b, IX_ERR_UNSUPPORTED, "unknown tensor type 4", NULL);
    RESET();
    build_one_tensor(&b, IX_DTYPE_Q4_0, 1, ne8, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "ne[0] = 8 is not a multiple of the Q4_0 block size 32", NULL);
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 0, ne8, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "n_dims 0 is not in 1..4", NULL);
    uint64_t ne5[5] = {1, 1, 1, 1, 1};
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 5, ne5, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "n_dims 5", NULL);
    uint64_t ne0[2] = {8, 0};
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 2, ne0, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "ne[1] = 0 is not in 1..INT64_MAX", NULL);
    uint64_t neneg[1] = {UINT64_MAX};
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 1, neneg, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "ne[0]", "INT64_MAX");
    uint64_t nebig[4] = {1u << 20, 1u << 20, 1u << 20, 1u << 20};
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 4, nebig, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "element count overflows", NULL);
    uint64_t nebytes[1] = {(uint64_t)1 << 62};
    RESET();
    build_one_tensor(&b, IX_DTYPE_F64, 1, nebytes, 0, 32);
    expect_error(&b, IX_ERR_FORMAT, "size in bytes overflows", NULL);
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 1, ne8, 16, 64);
    expect_error(&b, IX_ERR_FORMAT, "data offset 16 is not a multiple of the alignment 32", NULL);
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 1, ne8, 0, 31);
    expect_error(&b, IX_ERR_FORMAT,
                 "tensor #0 't': data [offset 0, 0+32) outside data section of 31 bytes (data section at file offset "
                 "64, file size 95)",
                 NULL);
    RESET();
    build_one_tensor(&b, IX_DTYPE_F32, 1, ne8, UINT64_MAX - 31, 32);
    expect_error(&b, IX_ERR_FORMAT, "outside data section", NULL);
    RESET();
    hb_header(&b, 3, 1, 0);
    hb_tensor(&b, "t", 1, ne8, IX_DTYPE_F32, 0); /* ends unpadded: no data at all */
    expect_error(&b, IX_ERR_FORMAT, "past the end of the file", "truncated");

    RESET();
    hb_header(&b, 3, 2, 0);
    hb_tensor(&b, "t", 1, ne8, IX_DTYPE_F32, 0);
    hb_tensor(&b, "t", 1, ne8, IX_DTYPE_F32, 32);
    hb_pad(&b, 32);
    hb_zeros(&b, 64);
    expect_error(&b, IX_ERR_FORMAT, "duplicate tensor name 't' (tensors #0 and #1)", NULL);
    uint64_t ne16[1] = {16};
    RESET();
    hb_header(&b, 3, 3, 0);
    hb_tensor(&b, "a", 1, ne8, IX_DTYPE_F32, 96);
    hb_tensor(&b, "b", 1, ne16, IX_DTYPE_F32, 0); /* [0, 64) */
    hb_tensor(&b, "c", 1, ne8, IX_DTYPE_F32, 32); /* [32, 64): inside b */
    hb_pad(&b, 32);
    hb_zeros(&b, 128);
    expect_error(&b, IX_ERR_FORMAT, "tensors #1 'b' [0, 64) and #2 'c' [32, 64) overlap", NULL);
    RESET();
    hb_header(&b, 3, 1, 0);
    hb_u64(&b, 0);
    hb_zeros(&b, 40);
    expect_error(&b, IX_ERR_FORMAT, "tensor #0: empty name", NULL);
    ix_buf_free(&b);
#undef RESET
}

static void test_open_errors(void **state) {
    (void)state;
    ix_gguf *g = (ix_gguf *)1;
    ix_errbuf err;
    assert_int_equal(ix_gguf_open(&g, "/nonexistent/dir/x.gguf", &err), IX_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/x.gguf"));
    assert_int_equal(ix_gguf_open(&g, IX_SOURCE_DIR, &err), IX_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    const char *empty = IX_BINARY_DIR "/test_gguf_empty.gguf";
    FILE *f = fopen(empty, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(ix_gguf_open(&g, empty, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "0 bytes"));
    unlink(empty);
    assert_int_equal(ix_gguf_open_memory(&g, NULL, 0, &err), IX_ERR_FORMAT);
    assert_int_equal(ix_gguf_open_memory(&g, NULL, 5, &err), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_open_memory(NULL, "GGUF", 4, NULL), IX_ERR_INVALID);
}

/* ---- writer ----------------------------------------------------------------- */

static void test_writer_scalars(void **state) {
    (void)state;
    size_t live = ix_mem_live_count();
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_non_null(w);
    uint8_t u8 = 200;
    int8_t i8 = -100;
    uint16_t u16 = 60000;
    int16_t i16 = -30000;
    uint32_t u32 = 4000000000u;
    int32_t i32 = -2000000000;
    float f32 = 1.5f;
    bool bo = true;
    uint64_t u64 = UINT64_MAX;
    int64_t i64 = INT64_MIN;
    double f64 = 1e300;
    assert_int_equal(ix_gguf_writer_set_scalar(w, "u8", IX_GGUF_UINT8, &u8), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "i8", IX_GGUF_INT8, &i8), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "u16", IX_GGUF_UINT16, &u16), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "i16", IX_GGUF_INT16, &i16), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "u32", IX_GGUF_UINT32, &u32), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "i32", IX_GGUF_INT32, &i32), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "f32", IX_GGUF_FLOAT32, &f32), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "bool", IX_GGUF_BOOL, &bo), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "u64", IX_GGUF_UINT64, &u64), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "i64", IX_GGUF_INT64, &i64), IX_OK);
    assert_int_equal(ix_gguf_writer_set_scalar(w, "f64", IX_GGUF_FLOAT64, &f64), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, "small", 5), IX_OK);
    assert_int_equal(ix_gguf_writer_set_i32(w, "neg", -5), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u64(w, "big", 1ull << 40), IX_OK);
    assert_int_equal(ix_gguf_writer_set_f32(w, "pi", 3.25f), IX_OK);
    assert_int_equal(ix_gguf_writer_set_bool(w, "no", false), IX_OK);
    assert_int_equal(ix_gguf_writer_set_str(w, "s", "hello"), IX_OK);
    assert_int_equal(ix_gguf_writer_set_str(w, "empty", ""), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, "small", 6), IX_OK); /* replaces */
    int16_t ai16[3] = {-1, 0, 1};
    double af64[2] = {0.25, -2};
    bool abool[2] = {true, false};
    assert_int_equal(ix_gguf_writer_set_arr(w, "ai16", IX_GGUF_INT16, ai16, 3), IX_OK);
    assert_int_equal(ix_gguf_writer_set_arr(w, "af64", IX_GGUF_FLOAT64, af64, 2), IX_OK);
    assert_int_equal(ix_gguf_writer_set_arr(w, "abool", IX_GGUF_BOOL, abool, 2), IX_OK);
    assert_int_equal(ix_gguf_writer_set_arr(w, "aempty", IX_GGUF_UINT64, NULL, 0), IX_OK);
    ix_str strs[3] = {{"x", 1}, {"", 0}, {"a\0b", 3}};
    assert_int_equal(ix_gguf_writer_set_arr_str(w, "astr", strs, 3), IX_OK);
    assert_int_equal(ix_gguf_writer_set_arr_str(w, "astr0", NULL, 0), IX_OK);

    void *out;
    size_t n;
    assert_int_equal(ix_gguf_writer_write_memory(w, &out, &n), IX_OK);
    ix_gguf *g = open_mem_ok(out, n);
    assert_int_equal(ix_gguf_n_kv(g), 24);
    assert_int_equal(ix_gguf_find_key(g, "small"), 11);

    ix_errbuf err;
    uint32_t r32;
    uint64_t r64;
    int64_t ri;
    float rf;
    bool rb;
    ix_str rs;
    ix_gguf_arr ra;
    assert_int_equal(ix_gguf_kv_value(g, 0).type, IX_GGUF_UINT8);
    assert_int_equal(ix_gguf_get_u32(g, "u8", &r32, &err), IX_OK);
    assert_int_equal(r32, 200);
    assert_int_equal(ix_gguf_get_i64(g, "i8", &ri, &err), IX_OK);
    assert_int_equal(ri, -100);
    assert_int_equal(ix_gguf_get_u32(g, "i8", &r32, &err), IX_ERR_RANGE);
    assert_non_null(strstr(err.msg, "-100"));
    assert_int_equal(ix_gguf_get_u64(g, "i8", &r64, &err), IX_ERR_RANGE);
    assert_int_equal(ix_gguf_get_u32(g, "u16", &r32, &err), IX_OK);
    assert_int_equal(r32, 60000);
    assert_int_equal(ix_gguf_get_i64(g, "i16", &ri, &err), IX_OK);
    assert_int_equal(ri, -30000);
    assert_int_equal(ix_gguf_get_u32(g, "u32", &r32, &err), IX_OK);
    assert_int_equal(r32, 4000000000u);
    assert_int_equal(ix_gguf_get_i64(g, "i32", &ri, &err), IX_OK);
    assert_int_equal(ri, -2000000000);
    assert_int_equal(ix_gguf_get_f32(g, "f32", &rf, &err), IX_OK);
    assert_true(rf == 1.5f);
    assert_int_equal(ix_gguf_get_bool(g, "bool", &rb, &err), IX_OK);
    assert_true(rb);
    assert_int_equal(ix_gguf_get_u64(g, "u64", &r64, &err), IX_OK);
    assert_true(r64 == UINT64_MAX);
    assert_int_equal(ix_gguf_get_i64(g, "u64", &ri, &err), IX_ERR_RANGE);
    assert_int_equal(ix_gguf_get_u32(g, "u64", &r32, &err), IX_ERR_RANGE);
    assert_non_null(strstr(err.msg, "18446744073709551615 (u64) is out of range for u32"));
    assert_int_equal(ix_gguf_get_i64(g, "i64", &ri, &err), IX_OK);
    assert_true(ri == INT64_MIN);
    assert_int_equal(ix_gguf_get_f32(g, "f64", &rf, &err), IX_ERR_RANGE);
    assert_true(ix_gguf_kv_value(g, (uint64_t)ix_gguf_find_key(g, "f64")).v.f64 == 1e300);
    assert_int_equal(ix_gguf_get_u32(g, "small", &r32, &err), IX_OK);
    assert_int_equal(r32, 6);
    assert_int_equal(ix_gguf_get_i64(g, "neg", &ri, &err), IX_OK);
    assert_int_equal(ri, -5);
    assert_int_equal(ix_gguf_get_u64(g, "big", &r64, &err), IX_OK);
    assert_int_equal(r64, 1ull << 40);
    assert_int_equal(ix_gguf_get_f32(g, "pi", &rf, &err), IX_OK);
    assert_true(rf == 3.25f);
    assert_int_equal(ix_gguf_get_bool(g, "no", &rb, &err), IX_OK);
    assert_false(rb);
    assert_int_equal(ix_gguf_get_str(g, "s", &rs, &err), IX_OK);
    assert_true(str_is(rs, "hello"));
    assert_int_equal(ix_gguf_get_str(g, "empty", &rs, &err), IX_OK);
    assert_int_equal(rs.len, 0);
    assert_int_equal(ix_gguf_get_arr(g, "ai16", IX_GGUF_INT16, &ra, &err), IX_OK);
    assert_int_equal(ra.n, 3);
    assert_int_equal(ix_gguf_arr_i64(&ra, 0), -1);
    assert_true(ix_gguf_arr_u64(&ra, 0) == UINT64_MAX); /* documented C conversion */
    assert_true(ix_gguf_arr_f64(&ra, 2) == 1.0);
    assert_int_equal(ix_gguf_get_arr(g, "af64", IX_GGUF_FLOAT64, &ra, &err), IX_OK);
    assert_true(ix_gguf_arr_f64(&ra, 1) == -2.0);
    assert_int_equal(ix_gguf_get_arr(g, "abool", IX_GGUF_BOOL, &ra, &err), IX_OK);
    assert_int_equal(ix_gguf_arr_u64(&ra, 0), 1);
    assert_int_equal(ix_gguf_arr_i64(&ra, 1), 0);
    assert_int_equal(ix_gguf_get_arr(g, "aempty", IX_GGUF_UINT64, &ra, &err), IX_OK);
    assert_int_equal(ra.n, 0);
    assert_int_equal(ix_gguf_get_arr(g, "astr", IX_GGUF_STRING, &ra, &err), IX_OK);
    assert_int_equal(ra.n, 3);
    assert_int_equal(ix_gguf_arr_str(&ra, 1).len, 0);
    assert_int_equal(ix_gguf_arr_str(&ra, 2).len, 3);
    assert_memory_equal(ix_gguf_arr_str(&ra, 2).ptr, "a\0b", 3);
    assert_int_equal(ix_gguf_get_arr(g, "astr0", IX_GGUF_STRING, &ra, &err), IX_OK);
    assert_int_equal(ra.n, 0);
    walk_gguf(g);

    /* a copy of every kind of value survives a second trip */
    ix_gguf_writer *w2 = copy_all(g);
    void *out2;
    size_t n2;
    assert_int_equal(ix_gguf_writer_write_memory(w2, &out2, &n2), IX_OK);
    assert_int_equal(n2, n);
    assert_memory_equal(out2, out, n);
    ix_free(out2);
    ix_gguf_writer_destroy(w2);

    ix_gguf_close(g);
    ix_free(out);
    ix_gguf_writer_destroy(w);
    assert_int_equal(ix_mem_live_count(), live);
}

static void test_writer_errors(void **state) {
    (void)state;
    ix_gguf_writer *w = ix_gguf_writer_create();
    float data[64] = {0};
    int64_t ne[4] = {8, 2, 1, 1};
    assert_int_equal(ix_gguf_writer_set_u32(w, "", 1), IX_ERR_INVALID);
    assert_non_null(strstr(ix_gguf_writer_errmsg(w), "empty key"));
    assert_int_equal(ix_gguf_writer_set_u32(w, NULL, 1), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_set_u32(w, "general.alignment", 48), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_set_u64(w, "general.alignment", 64), IX_ERR_INVALID);
    assert_non_null(strstr(ix_gguf_writer_errmsg(w), "power of two"));
    assert_int_equal(ix_gguf_writer_set_scalar(w, "s", IX_GGUF_STRING, "x"), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_set_arr(w, "a", IX_GGUF_STRING, data, 1), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_set_arr(w, "a", IX_GGUF_UINT32, NULL, 1), IX_ERR_INVALID);
    uint8_t bad_bool[2] = {1, 2};
    assert_int_equal(ix_gguf_writer_set_arr(w, "a", IX_GGUF_BOOL, bad_bool, 2), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_set_arr(w, "a", IX_GGUF_UINT64, data, UINT64_MAX / 4), IX_ERR_INVALID);
    ix_str bad_str = {NULL, 3};
    assert_int_equal(ix_gguf_writer_set_arr_str(w, "a", &bad_str, 1), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_set_str(w, "a", NULL), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_F32, 0, ne, data), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_F32, 5, ne, data), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", (ix_dtype)4, 2, ne, data), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_Q4_0, 2, ne, data), IX_ERR_INVALID);
    assert_non_null(strstr(ix_gguf_writer_errmsg(w), "Q4_0"));
    int64_t ne_zero[2] = {8, 0};
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_F32, 2, ne_zero, data), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "", IX_DTYPE_F32, 2, ne, data), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_F32, 2, ne, NULL), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_F32, 2, ne, data), IX_OK);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "t", IX_DTYPE_F32, 2, ne, data), IX_ERR_INVALID);
    assert_non_null(strstr(ix_gguf_writer_errmsg(w), "duplicate"));
    ix_gguf *g = NULL;
    assert_int_equal(ix_gguf_writer_copy_kv(w, g, 0), IX_ERR_INVALID);
    assert_int_equal(ix_gguf_writer_write(w, "/nonexistent/dir/out.gguf"), IX_ERR_IO);
    assert_non_null(strstr(ix_gguf_writer_errmsg(w), "/nonexistent/dir/out.gguf.tmp"));
    assert_int_equal(ix_gguf_writer_write_memory(w, NULL, NULL), IX_ERR_INVALID);
    /* nothing invalid was stored: the file is one tensor, no keys */
    void *out;
    size_t n;
    assert_int_equal(ix_gguf_writer_write_memory(w, &out, &n), IX_OK);
    g = open_mem_ok(out, n);
    assert_int_equal(ix_gguf_n_kv(g), 0);
    assert_int_equal(ix_gguf_n_tensors(g), 1);
    ix_gguf_close(g);
    ix_free(out);
    ix_gguf_writer_destroy(w);
    ix_gguf_writer_destroy(NULL);
}

static void test_writer_file_alignment(void **state) {
    (void)state;
    const char *path = IX_BINARY_DIR "/test_gguf_writer.gguf";
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_int_equal(ix_gguf_writer_set_u32(w, "general.alignment", 64), IX_OK);
    assert_int_equal(ix_gguf_writer_set_str(w, "general.architecture", "test"), IX_OK);
    float a[3] = {1, 2, 3};
    uint16_t h[5] = {1, 2, 3, 4, 5};
    uint8_t q[2 * 34];
    for (size_t i = 0; i < sizeof q; i++) q[i] = (uint8_t)i;
    int64_t ne_a[1] = {3}, ne_h[2] = {5, 1}, ne_q[3] = {32, 1, 2};
    assert_int_equal(ix_gguf_writer_add_tensor(w, "a", IX_DTYPE_F32, 1, ne_a, a), IX_OK);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "h", IX_DTYPE_F16, 2, ne_h, h), IX_OK);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "q", IX_DTYPE_Q8_0, 3, ne_q, q), IX_OK);
    assert_int_equal(ix_gguf_writer_write(w, path), IX_OK);
    ix_gguf_writer_destroy(w);
    assert_int_equal(access(IX_BINARY_DIR "/test_gguf_writer.gguf.tmp", F_OK), -1);

    ix_gguf *g = open_ok(path);
    assert_int_equal(ix_gguf_alignment(g), 64);
    assert_int_equal(ix_gguf_data_offset(g) % 64, 0);
    const ix_gguf_tensor *t = ix_gguf_find_tensor(g, "a");
    assert_int_equal(t->offset, 0);
    assert_memory_equal(t->data, a, sizeof a);
    assert_int_equal((uintptr_t)t->data % 64, 0);
    t = ix_gguf_find_tensor(g, "h");
    assert_int_equal(t->offset, 64);
    assert_int_equal(t->n_bytes, 10);
    assert_memory_equal(t->data, h, sizeof h);
    t = ix_gguf_find_tensor(g, "q");
    assert_int_equal(t->offset, 128);
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->n_bytes, 68);
    assert_memory_equal(t->data, q, sizeof q);
    /* the last tensor is padded too: [128, 196) -> 256 */
    assert_int_equal(ix_gguf_file_size(g), ix_gguf_data_offset(g) + 256);
    ix_gguf_close(g);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype),
        cmocka_unit_test(test_model_file),
        cmocka_unit_test(test_model_memory),
        cmocka_unit_test(test_vocab_files),
        cmocka_unit_test(test_roundtrip_model),
        cmocka_unit_test(test_v2_file),
        cmocka_unit_test(test_nested_arrays),
        cmocka_unit_test(test_array_depth),
        cmocka_unit_test(test_format_errors),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_writer_scalars),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_file_alignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
