/* gguf under hostile input: truncation at many positions, extreme values in
 * every length/count/type/shape/offset field, quantized blocks that do not
 * fit (rows of partial blocks, data cut inside a block, a retyped tensor
 * whose blocks outgrow its data, unknown type codes), seeded random byte
 * flips, and
 * allocation-failure torture of the reader and the writer. Every outcome must
 * be a clean error (status + message, no handle, no leak) or a file whose
 * accessors all work; inputs are exact-size heap copies so ASan sees any read
 * past the end. The library's peak heap use is checked at the end, so a
 * "huge allocation" anywhere fails the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_test_util.h"
#include "inferx/gguf.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define VOCAB IX_SHARED_DIR "/vocab/ggml-vocab-llama-spm.gguf"

typedef struct input {
    uint8_t *data;
    size_t size;
    size_t required_end; /* shortest prefix that still opens */
    size_t header_end;   /* data offset, or size when there are no tensors */
} input;

static input g_model, g_vocab, g_small, g_quant;

/* Serialized bytes of each value type (0: variable). */
static const size_t k_size[IX_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static uint64_t g_opens, g_ok;

/* ---- checking one candidate ----------------------------------------------- */

/* Opens an exact-size copy of data[0, n) and checks the outcome is clean;
 * returns the status. */
static ix_status try_open(const uint8_t *data, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    assert_non_null(copy);
    memcpy(copy, data, n);
    size_t live = ix_mem_live_count();
    ix_gguf *g = (ix_gguf *)1;
    ix_errbuf err = {{0}};
    ix_status s = ix_gguf_open_memory(&g, copy, n, &err);
    g_opens++;
    if (s == IX_OK) {
        g_ok++;
        walk_gguf(g);
        ix_gguf_close(g);
    } else {
        assert_null(g);
        if (err.msg[0] == '\0') fail_msg("status %s without a message", ix_status_name(s));
        if (s != IX_ERR_FORMAT && s != IX_ERR_UNSUPPORTED)
            fail_msg("unexpected status %s: %s", ix_status_name(s), err.msg);
    }
    assert_int_equal(ix_mem_live_count(), live);
    free(copy);
    return s;
}

/* Same, in place: data is already an exact-size buffer we may not copy. */
static ix_status try_open_inplace(const uint8_t *data, size_t n) {
    size_t live = ix_mem_live_count();
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_gguf_open_memory(&g, data, n, &err);
    g_opens++;
    if (s == IX_OK) {
        g_ok++;
        walk_gguf(g);
        ix_gguf_close(g);
    } else {
        assert_null(g);
        if (err.msg[0] == '\0') fail_msg("status %s without a message", ix_status_name(s));
        if (s != IX_ERR_FORMAT && s != IX_ERR_UNSUPPORTED)
            fail_msg("unexpected status %s: %s", ix_status_name(s), err.msg);
    }
    assert_int_equal(ix_mem_live_count(), live);
    return s;
}

/* ---- inputs --------------------------------------------------------------- */

static void describe(input *in) {
    ix_gguf *g;
    ix_errbuf err;
    if (ix_gguf_open_memory(&g, in->data, in->size, &err) != IX_OK) fail_msg("input does not open: %s", err.msg);
    in->required_end = in->size;
    in->header_end = in->size;
    if (ix_gguf_n_tensors(g) > 0) {
        uint64_t end = 0;
        for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) {
            const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
            uint64_t e = ix_gguf_data_offset(g) + t->offset + t->n_bytes;
            if (e > end) end = e;
        }
        in->required_end = (size_t)end;
        in->header_end = (size_t)ix_gguf_data_offset(g);
    }
    ix_gguf_close(g);
}

/* A writer-made file with every value type, nested arrays (copied from a
 * handmade reader) and tensors whose last one is followed by padding. */
static void make_small(input *in) {
    ix_buf b = {0};
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "nested", IX_GGUF_ARRAY);
    hb_u32(&b, IX_GGUF_ARRAY);
    hb_u64(&b, 2);
    hb_u32(&b, IX_GGUF_STRING);
    hb_u64(&b, 2);
    hb_str(&b, "ab");
    hb_str(&b, "");
    hb_u32(&b, IX_GGUF_ARRAY);
    hb_u64(&b, 1);
    hb_u32(&b, IX_GGUF_INT16);
    hb_u64(&b, 2);
    hb_u32(&b, 0xffff0001u);
    ix_gguf *nested;
    assert_int_equal(ix_gguf_open_memory(&nested, b.data, b.len, NULL), IX_OK);

    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_int_equal(ix_gguf_writer_copy_kv(w, nested, 0), IX_OK);
    for (int t = 0; t < IX_GGUF_TYPE_COUNT; t++) {
        if (t == IX_GGUF_STRING || t == IX_GGUF_ARRAY) continue;
        char key[32];
        uint64_t v = 1;
        snprintf(key, sizeof key, "scalar.%s", ix_gguf_type_name((ix_gguf_type)t));
        assert_int_equal(ix_gguf_writer_set_scalar(w, key, (ix_gguf_type)t, &v), IX_OK);
        uint8_t arr[16] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
        snprintf(key, sizeof key, "array.%s", ix_gguf_type_name((ix_gguf_type)t));
        assert_int_equal(ix_gguf_writer_set_arr(w, key, (ix_gguf_type)t, arr, 16 / k_size[t]), IX_OK);
    }
    ix_str toks[4] = {{"<s>", 3}, {"a", 1}, {"", 0}, {"bc", 2}};
    assert_int_equal(ix_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4), IX_OK);
    assert_int_equal(ix_gguf_writer_set_str(w, "general.name", "small"), IX_OK);
    static uint8_t data[512];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7);
    int64_t ne1[2] = {4, 2}, ne2[1] = {32}, ne3[3] = {3, 1, 1};
    assert_int_equal(ix_gguf_writer_add_tensor(w, "f32", IX_DTYPE_F32, 2, ne1, data), IX_OK);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "q8", IX_DTYPE_Q8_0, 1, ne2, data), IX_OK);
    assert_int_equal(ix_gguf_writer_add_tensor(w, "f16", IX_DTYPE_F16, 3, ne3, data), IX_OK);
    void *out;
    size_t n;
    assert_int_equal(ix_gguf_writer_write_memory(w, &out, &n), IX_OK);
    in->data = malloc(n);
    assert_non_null(in->data);
    memcpy(in->data, out, n);
    in->size = n;
    ix_free(out);
    ix_gguf_writer_destroy(w);
    ix_gguf_close(nested);
    ix_buf_free(&b);
    describe(in);
    assert_true(in->required_end < in->size); /* the last tensor is padded */
}

/* The quantized block types the kernels read: one tensor each of 3 rows of
 * 2 blocks, random bytes with finite scales; a handmade file, so each
 * tensor's fields are at known places (quant_file). */
static const ix_dtype k_qtypes[] = {IX_DTYPE_Q4_0, IX_DTYPE_Q4_1, IX_DTYPE_Q5_0, IX_DTYPE_Q5_1,
                                    IX_DTYPE_Q8_0, IX_DTYPE_Q2_K, IX_DTYPE_Q3_K, IX_DTYPE_Q4_K,
                                    IX_DTYPE_Q5_K, IX_DTYPE_Q6_K, IX_DTYPE_IQ4_NL, IX_DTYPE_IQ4_XS};
#define Q_ROWS 3

/* The file with tensor `which` given type code `type` and ne[0] `ne0`
 * instead (which < 0: none changed); the data laid out for the original
 * types. Tensor i is named after its type. */
static void quant_file(ix_buf *b, int which, uint32_t type, uint64_t ne0) {
    hb_header(b, 3, IX_ARRAY_LEN(k_qtypes), 0);
    uint64_t off = 0;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_qtypes); i++) {
        ix_dtype t = k_qtypes[i];
        uint64_t ne[2] = {2 * ix_dtype_block_size(t), Q_ROWS};
        if ((int)i == which) ne[0] = ne0;
        hb_tensor(b, ix_dtype_name(t), 2, ne, (int)i == which ? type : (uint32_t)t, off);
        off += (2 * ix_dtype_type_size(t) * Q_ROWS + 31) / 32 * 32;
    }
    hb_pad(b, 32);
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_qtypes); i++) {
        size_t n = 2 * ix_dtype_type_size(k_qtypes[i]) * Q_ROWS;
        for (size_t k = 0; k < n; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            hb_u8(b, (uint8_t)(k % 2 ? (x & 0x3b) : x)); /* odd bytes: fp16 scales stay finite */
        }
        hb_pad(b, 32);
    }
}

static void make_quant(input *in) {
    ix_buf b = {0};
    quant_file(&b, -1, 0, 0);
    in->data = malloc(b.len);
    assert_non_null(in->data);
    memcpy(in->data, b.data, b.len);
    in->size = b.len;
    ix_buf_free(&b);
    describe(in);
}

static int setup(void **state) {
    (void)state;
    g_model.data = read_whole_file(MODEL, &g_model.size);
    if (!g_model.data) return -1;
    describe(&g_model);
    g_vocab.data = read_whole_file(VOCAB, &g_vocab.size);
    if (g_vocab.data)
        describe(&g_vocab);
    else
        fprintf(stderr, "note: %s is absent: vocab cases are skipped\n", VOCAB);
    make_small(&g_small);
    make_quant(&g_quant);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(g_model.data);
    free(g_vocab.data);
    free(g_small.data);
    free(g_quant.data);
    return 0;
}

/* ---- (1) truncation --------------------------------------------------------- */

static void check_cut(const input *in, size_t cut) {
    /* Validation reads nothing past the header, so a cut inside the tensor
     * data needs no exact-size copy (a 15 MB copy per cut is what would make
     * this test slow under ASan). */
    ix_status s = cut > in->header_end ? try_open_inplace(in->data, cut) : try_open(in->data, cut);
    bool want_ok = cut >= in->required_end;
    if (want_ok != (s == IX_OK))
        fail_msg("cut at %zu of %zu (required end %zu): got %s", cut, in->size, in->required_end,
                 ix_status_name(s));
    if (!want_ok) assert_int_equal(s, IX_ERR_FORMAT);
}

/* Every byte up to every_until, then a stride, then every byte of the last
 * tail_every bytes and of a window around each boundary. */
static void truncate_sweep(const input *in, size_t every_until, size_t stride, size_t tail_every) {
    if (every_until > in->size) every_until = in->size;
    for (size_t c = 0; c < every_until; c++) check_cut(in, c);
    for (size_t c = every_until; c < in->size; c += stride) check_cut(in, c);
    size_t tail = in->size > tail_every ? in->size - tail_every : 0;
    for (size_t c = tail; c <= in->size; c++) check_cut(in, c);
    size_t marks[3] = {in->header_end, in->required_end, in->size / 2};
    for (int m = 0; m < 3; m++)
        for (size_t c = marks[m] > 40 ? marks[m] - 40 : 0; c < marks[m] + 40 && c <= in->size; c++)
            check_cut(in, c);
}

static void test_truncate_model(void **state) {
    (void)state;
    /* the whole header region byte by byte, the tensor data by stride */
    truncate_sweep(&g_model, g_model.header_end, 1000003, 64);
    /* around each tensor's end */
    ix_gguf *g;
    assert_int_equal(ix_gguf_open_memory(&g, g_model.data, g_model.size, NULL), IX_OK);
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
        size_t end = (size_t)(ix_gguf_data_offset(g) + t->offset + t->n_bytes);
        check_cut(&g_model, end - 1);
        check_cut(&g_model, end);
    }
    ix_gguf_close(g);
}

static void test_truncate_vocab(void **state) {
    (void)state;
    if (!g_vocab.data) {
        print_message("skipping: %s is absent\n", VOCAB);
        skip();
    }
    truncate_sweep(&g_vocab, 32768, 997, 256);
}

static void test_truncate_small(void **state) {
    (void)state;
    truncate_sweep(&g_small, g_small.size, 1, 1);
}

static void test_truncate_quant(void **state) {
    (void)state;
    truncate_sweep(&g_quant, g_quant.size, 1, 1);
}

/* Quantized blocks: rows that are not whole blocks, data cut inside a block,
 * a type whose blocks are larger than the data, unknown codes: each a clean
 * error naming the tensor (or the type code). */
static void expect_quant_error(int which, uint32_t type, uint64_t ne0, size_t cut, ix_status want,
                               const char *sub1, const char *sub2) {
    ix_buf b = {0};
    quant_file(&b, which, type, ne0);
    if (cut) b.len -= cut;
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = try_open((const uint8_t *)b.data, b.len);
    if (s == IX_OK || ix_gguf_open_memory(&g, b.data, b.len, &err) != want || !strstr(err.msg, sub1) ||
        (sub2 && !strstr(err.msg, sub2)))
        fail_msg("want %s with '%s' '%s', got '%s'", ix_status_name(want), sub1, sub2 ? sub2 : "", err.msg);
    assert_null(g);
    ix_buf_free(&b);
}

static void test_quant_blocks(void **state) {
    (void)state;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_qtypes); i++) {
        ix_dtype t = k_qtypes[i];
        const char *name = ix_dtype_name(t);
        char want[96];
        uint32_t blck = ix_dtype_block_size(t);
        /* a row of 1.5 blocks */
        snprintf(want, sizeof want, "is not a multiple of the %s block size %u", name, blck);
        expect_quant_error((int)i, t, blck + blck / 2, 0, IX_ERR_FORMAT, name, want);
        expect_quant_error((int)i, t, blck - 1, 0, IX_ERR_FORMAT, name, want);
        /* three whole blocks per row: the data runs into the next tensor (or
         * past the data section for the last one) */
        expect_quant_error((int)i, t, 3 * blck, 0, IX_ERR_FORMAT, name,
                           i + 1 < IX_ARRAY_LEN(k_qtypes) ? "overlap" : "outside data section");
        /* retyped to a type with more bytes per element (Q8_0, 8.5 bits): the
         * same element count needs more blocks' bytes than the data holds */
        if (t != IX_DTYPE_Q8_0)
            expect_quant_error((int)i, IX_DTYPE_Q8_0, 2 * blck, 0, IX_ERR_FORMAT, name, NULL);
        /* unknown codes: a retired one, a gap, one past the table */
        expect_quant_error((int)i, 4, 2 * blck, 0, IX_ERR_UNSUPPORTED, name, "unknown tensor type 4");
        expect_quant_error((int)i, 31, 2 * blck, 0, IX_ERR_UNSUPPORTED, name, "unknown tensor type 31");
        expect_quant_error((int)i, 1000, 2 * blck, 0, IX_ERR_UNSUPPORTED, name, "unknown tensor type 1000");
    }
    /* the last tensor's data cut inside its last block */
    const char *last = ix_dtype_name(k_qtypes[IX_ARRAY_LEN(k_qtypes) - 1]);
    size_t pad = g_quant.size - g_quant.required_end;
    expect_quant_error(-1, 0, 0, pad + 1, IX_ERR_FORMAT, last, "outside data section");
    expect_quant_error(-1, 0, 0, pad + 100, IX_ERR_FORMAT, last, "outside data section");
}

/* ---- (2) extreme values in every structural field --------------------------- */

enum { K_VERSION, K_COUNT, K_LEN, K_VTYPE, K_ETYPE, K_NDIMS, K_NE, K_DTYPE, K_OFFSET, K_SCALAR };

typedef struct field {
    size_t off;
    uint8_t width, kind;
} field;

typedef struct fields {
    field *v;
    size_t n, cap;
} fields;

static void add_field(fields *f, size_t off, uint8_t width, uint8_t kind) {
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 256;
        f->v = realloc(f->v, f->cap * sizeof *f->v);
        assert_non_null(f->v);
    }
    f->v[f->n++] = (field){off, width, kind};
}

static uint64_t rd(const uint8_t *p, int width) {
    uint64_t v = 0;
    for (int i = 0; i < width; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void wr(uint8_t *p, int width, uint64_t v) {
    for (int i = 0; i < width; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Records the fields of a valid value at *pos (trusted input). Long string
 * arrays contribute a sample of their length fields. */
static void walk_value(const uint8_t *d, size_t *pos, uint32_t type, fields *f, bool record) {
    if (type == IX_GGUF_STRING) {
        if (record) add_field(f, *pos, 8, K_LEN);
        *pos += 8 + rd(d + *pos, 8);
    } else if (type == IX_GGUF_ARRAY) {
        uint32_t et = (uint32_t)rd(d + *pos, 4);
        uint64_t n = rd(d + *pos + 4, 8);
        if (record) {
            add_field(f, *pos, 4, K_ETYPE);
            add_field(f, *pos + 4, 8, K_COUNT);
        }
        *pos += 12;
        if (k_size[et]) {
            if (record && n > 0) add_field(f, *pos, (uint8_t)k_size[et], K_SCALAR);
            *pos += n * k_size[et];
            return;
        }
        for (uint64_t i = 0; i < n; i++)
            walk_value(d, pos, et, f, record && (i < 8 || n - i <= 8 || i % (n / 32 + 1) == 0));
    } else {
        if (record) add_field(f, *pos, (uint8_t)k_size[type], K_SCALAR);
        *pos += k_size[type];
    }
}

static void collect_fields(const input *in, fields *f) {
    const uint8_t *d = in->data;
    add_field(f, 4, 4, K_VERSION);
    add_field(f, 8, 8, K_COUNT);
    add_field(f, 16, 8, K_COUNT);
    uint64_t n_t = rd(d + 8, 8), n_kv = rd(d + 16, 8);
    size_t pos = 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        add_field(f, pos, 8, K_LEN);
        pos += 8 + rd(d + pos, 8);
        uint32_t type = (uint32_t)rd(d + pos, 4);
        add_field(f, pos, 4, K_VTYPE);
        pos += 4;
        walk_value(d, &pos, type, f, true);
    }
    for (uint64_t i = 0; i < n_t; i++) {
        add_field(f, pos, 8, K_LEN);
        pos += 8 + rd(d + pos, 8);
        uint32_t nd = (uint32_t)rd(d + pos, 4);
        add_field(f, pos, 4, K_NDIMS);
        pos += 4;
        for (uint32_t j = 0; j < nd; j++, pos += 8) add_field(f, pos, 8, K_NE);
        add_field(f, pos, 4, K_DTYPE);
        add_field(f, pos + 4, 8, K_OFFSET);
        pos += 12;
    }
}

static void mutate_fields(const input *in) {
    fields f = {0};
    collect_fields(in, &f);
    uint8_t *buf = malloc(in->size);
    assert_non_null(buf);
    memcpy(buf, in->data, in->size);
    static const uint64_t v64[] = {0,
                                   1,
                                   2,
                                   7,
                                   8,
                                   31,
                                   32,
                                   0x7fffffffull,
                                   0xffffffffull,
                                   0x100000000ull,
                                   0x7fffffffffffffffull,
                                   0x8000000000000000ull,
                                   0xffffffffffffffffull,
                                   0xfffffffffffffff0ull,
                                   0x2000000000000001ull, /* x8 wraps */
                                   0x1000000000000001ull, /* x16 wraps */
                                   0x5555555555555556ull, /* x3 wraps */
                                   0x0800000000000000ull};
    static const uint64_t v32[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,         12,         13,
                                   14, 15, 16, 24, 28, 29, 30, 31, 34, 39, 40, 0x7fffffff, 0x80000000, 0xffffffff,
                                   0x03000000, 0x00010000};
    static const uint64_t v8[] = {0, 1, 2, 0x7f, 0x80, 0xff};
    for (size_t i = 0; i < f.n; i++) {
        field fl = f.v[i];
        uint8_t *p = buf + fl.off;
        uint64_t orig = rd(p, fl.width);
        const uint64_t *vals = fl.width == 8 ? v64 : fl.width == 4 ? v32 : v8;
        size_t n_vals = fl.width == 8 ? IX_ARRAY_LEN(v64) : fl.width == 4 ? IX_ARRAY_LEN(v32) : IX_ARRAY_LEN(v8);
        if (fl.width == 2) n_vals = IX_ARRAY_LEN(v8); /* i16/u16 scalars */
        for (size_t j = 0; j < n_vals + 3; j++) {
            uint64_t v = j < n_vals ? vals[j] : j == n_vals ? orig + 1 : j == n_vals + 1 ? orig - 1 : orig * 2;
            wr(p, fl.width, v);
            try_open_inplace(buf, in->size);
        }
        wr(p, fl.width, orig);
    }
    assert_memory_equal(buf, in->data, in->size);
    free(buf);
    free(f.v);
}

static void test_mutate_model(void **state) {
    (void)state;
    mutate_fields(&g_model);
}

static void test_mutate_vocab(void **state) {
    (void)state;
    if (!g_vocab.data) {
        print_message("skipping: %s is absent\n", VOCAB);
        skip();
    }
    mutate_fields(&g_vocab);
}

static void test_mutate_small(void **state) {
    (void)state;
    mutate_fields(&g_small);
}

static void test_mutate_quant(void **state) {
    (void)state;
    mutate_fields(&g_quant);
}

/* ---- (3) random byte flips ------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* Flips 1..8 bytes of [0, region) per iteration, restoring after. */
static void random_flips(const input *in, size_t region, int iterations) {
    uint8_t *buf = malloc(in->size);
    assert_non_null(buf);
    memcpy(buf, in->data, in->size);
    for (int it = 0; it < iterations; it++) {
        size_t pos[8];
        int n = 1 + (int)(rnd() % 8);
        for (int k = 0; k < n; k++) {
            pos[k] = (size_t)(rnd() % region);
            uint64_t r = rnd();
            buf[pos[k]] = (r & 1) ? (uint8_t)(buf[pos[k]] ^ (1u << ((r >> 1) % 8))) : (uint8_t)(r >> 8);
        }
        try_open_inplace(buf, in->size);
        for (int k = 0; k < n; k++) buf[pos[k]] = in->data[pos[k]];
    }
    free(buf);
}

static void test_random_flips(void **state) {
    (void)state;
    random_flips(&g_model, g_model.header_end, 4000);
    random_flips(&g_small, g_small.size, 30000);
    random_flips(&g_quant, g_quant.header_end, 10000);
    if (g_vocab.data) random_flips(&g_vocab, 4096, 2000);
}

/* ---- (4) allocation failures ------------------------------------------------------ */

static void torture_open(const input *in, const char *path) {
    size_t live = ix_mem_live_count();
    for (long k = 0;; k++) {
        assert_true(k < 100000);
        ix_mem_fail_after(k);
        ix_gguf *g = (ix_gguf *)1;
        ix_errbuf err = {{0}};
        ix_status s = path ? ix_gguf_open(&g, path, &err) : ix_gguf_open_memory(&g, in->data, in->size, &err);
        long failed = ix_mem_failed_count();
        ix_mem_fail_reset();
        if (s == IX_OK) {
            assert_int_equal(failed, 0);
            walk_gguf(g);
            ix_gguf_close(g);
            assert_int_equal(ix_mem_live_count(), live);
            return;
        }
        if (s != IX_ERR_NOMEM) fail_msg("k=%ld: %s: %s", k, ix_status_name(s), err.msg);
        assert_true(failed > 0);
        assert_null(g);
        assert_true(err.msg[0] != '\0');
        assert_int_equal(ix_mem_live_count(), live);
    }
}

static void test_oom_reader(void **state) {
    (void)state;
    torture_open(&g_model, MODEL);
    torture_open(&g_model, NULL);
    torture_open(&g_small, NULL);
    if (g_vocab.data) torture_open(&g_vocab, NULL);
}

/* Builds a copy of the model (every key, every tensor) and writes it to
 * memory; stops at the first failure and returns its status. */
static ix_status build_copy(const ix_gguf *src, void **out, size_t *n) {
    ix_gguf_writer *w = ix_gguf_writer_create();
    if (!w) return IX_ERR_NOMEM;
    ix_status s = IX_OK;
    for (uint64_t i = 0; i < ix_gguf_n_kv(src) && !s; i++) s = ix_gguf_writer_copy_kv(w, src, i);
    if (!s) s = ix_gguf_writer_set_str(w, "extra.str", "x");
    ix_str strs[2] = {{"a", 1}, {"b", 1}};
    if (!s) s = ix_gguf_writer_set_arr_str(w, "extra.strs", strs, 2);
    uint32_t arr[2] = {1, 2};
    if (!s) s = ix_gguf_writer_set_arr(w, "extra.arr", IX_GGUF_UINT32, arr, 2);
    for (uint64_t i = 0; i < ix_gguf_n_tensors(src) && !s; i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(src, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        s = ix_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
    }
    if (!s) s = ix_gguf_writer_write_memory(w, out, n);
    if (s && s != IX_ERR_NOMEM) fail_msg("writer: %s: %s", ix_status_name(s), ix_gguf_writer_errmsg(w));
    if (s) assert_true(ix_gguf_writer_errmsg(w)[0] != '\0');
    ix_gguf_writer_destroy(w);
    return s;
}

static void test_oom_writer(void **state) {
    (void)state;
    ix_gguf *src;
    assert_int_equal(ix_gguf_open_memory(&src, g_small.data, g_small.size, NULL), IX_OK);
    void *ref;
    size_t ref_n;
    assert_int_equal(build_copy(src, &ref, &ref_n), IX_OK);
    size_t live = ix_mem_live_count();
    for (long k = 0;; k++) {
        assert_true(k < 100000);
        void *out = NULL;
        size_t n = 0;
        ix_mem_fail_after(k);
        ix_status s = build_copy(src, &out, &n);
        ix_mem_fail_reset();
        if (s == IX_OK) {
            assert_int_equal(n, ref_n);
            assert_memory_equal(out, ref, n);
            ix_free(out);
            break;
        }
        assert_int_equal(s, IX_ERR_NOMEM);
        assert_int_equal(ix_mem_live_count(), live);
    }
    assert_int_equal(ix_mem_live_count(), live);
    ix_free(ref);
    ix_gguf_close(src);
}

/* ---- no huge allocation happened anywhere ------------------------------------------ */

static void test_peak_memory(void **state) {
    (void)state;
    /* Every input above is < 16 MB of which < 1 MB is metadata; what the
     * library keeps is proportional to the metadata actually present. */
    print_message("%llu opens, %llu succeeded; library peak heap %zu bytes\n", (unsigned long long)g_opens,
                  (unsigned long long)g_ok, ix_mem_peak_bytes());
    assert_true(ix_mem_peak_bytes() < 64u << 20);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate_model), cmocka_unit_test(test_truncate_vocab),
        cmocka_unit_test(test_truncate_small), cmocka_unit_test(test_mutate_model),
        cmocka_unit_test(test_mutate_vocab),   cmocka_unit_test(test_mutate_small),
        cmocka_unit_test(test_truncate_quant), cmocka_unit_test(test_quant_blocks),
        cmocka_unit_test(test_mutate_quant),   cmocka_unit_test(test_random_flips),
        cmocka_unit_test(test_oom_reader),
        cmocka_unit_test(test_oom_writer),     cmocka_unit_test(test_peak_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
