/* Writes the seed corpus of the gguf fuzz target: a handful of tiny valid
 * files covering every value type, nested arrays, tensors of a few types,
 * a vocab-only file and a v2 file. Run it by hand after a format change:
 *   cmake --build BUILD --target gen_gguf_corpus && BUILD/bin/gen_gguf_corpus tests/corpus/gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_test_util.h"

static const char *g_dir;

static void check(ix_status s, ix_gguf_writer *w, const char *what) {
    if (s == IX_OK) return;
    fprintf(stderr, "gen_gguf_corpus: %s: %s\n", what, w ? ix_gguf_writer_errmsg(w) : ix_status_str(s));
    exit(1);
}

static void write_writer(ix_gguf_writer *w, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    check(ix_gguf_writer_write(w, path), w, name);
    ix_gguf_writer_destroy(w);
}

/* Hand-built bytes (for what the writer cannot express), copied through a
 * reader and the writer when they are v3, so they are known to be valid. */
static void write_bytes(const ix_buf *b, const char *name) {
    ix_gguf *g;
    ix_errbuf err;
    if (ix_gguf_open_memory(&g, b->data, b->len, &err) != IX_OK) {
        fprintf(stderr, "gen_gguf_corpus: %s does not open: %s\n", name, err.msg);
        exit(1);
    }
    ix_gguf_close(g);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->data, 1, b->len, f) != b->len || fclose(f) != 0) {
        fprintf(stderr, "gen_gguf_corpus: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_gguf_corpus OUTDIR\n");
        return 2;
    }
    g_dir = argv[1];

    /* every scalar type, a string and fixed-size arrays */
    ix_gguf_writer *w = ix_gguf_writer_create();
    uint8_t u8 = 7;
    int8_t i8 = -7;
    uint16_t u16 = 700;
    int16_t i16 = -700;
    int32_t i32 = -70000;
    uint64_t u64 = 1ull << 40;
    int64_t i64 = -(1ll << 40);
    double f64 = 0.125;
    check(ix_gguf_writer_set_scalar(w, "u8", IX_GGUF_UINT8, &u8), w, "u8");
    check(ix_gguf_writer_set_scalar(w, "i8", IX_GGUF_INT8, &i8), w, "i8");
    check(ix_gguf_writer_set_scalar(w, "u16", IX_GGUF_UINT16, &u16), w, "u16");
    check(ix_gguf_writer_set_scalar(w, "i16", IX_GGUF_INT16, &i16), w, "i16");
    check(ix_gguf_writer_set_u32(w, "u32", 70000), w, "u32");
    check(ix_gguf_writer_set_scalar(w, "i32", IX_GGUF_INT32, &i32), w, "i32");
    check(ix_gguf_writer_set_f32(w, "f32", 0.5f), w, "f32");
    check(ix_gguf_writer_set_bool(w, "b", true), w, "b");
    check(ix_gguf_writer_set_scalar(w, "u64", IX_GGUF_UINT64, &u64), w, "u64");
    check(ix_gguf_writer_set_scalar(w, "i64", IX_GGUF_INT64, &i64), w, "i64");
    check(ix_gguf_writer_set_scalar(w, "f64", IX_GGUF_FLOAT64, &f64), w, "f64");
    check(ix_gguf_writer_set_str(w, "s", "text"), w, "s");
    uint32_t au32[3] = {1, 2, 3};
    bool ab[2] = {true, false};
    check(ix_gguf_writer_set_arr(w, "au32", IX_GGUF_UINT32, au32, 3), w, "au32");
    check(ix_gguf_writer_set_arr(w, "ab", IX_GGUF_BOOL, ab, 2), w, "ab");
    write_writer(w, "scalars.gguf");

    /* tensors of three types, alignment 64 */
    w = ix_gguf_writer_create();
    check(ix_gguf_writer_set_u32(w, "general.alignment", 64), w, "alignment");
    float a[3] = {1, 2, 3};
    uint16_t h[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
    uint8_t q[34] = {0};
    int64_t ne_a[1] = {3}, ne_h[2] = {2, 2}, ne_q[1] = {32};
    check(ix_gguf_writer_add_tensor(w, "a", IX_DTYPE_F32, 1, ne_a, a), w, "a");
    check(ix_gguf_writer_add_tensor(w, "h", IX_DTYPE_F16, 2, ne_h, h), w, "h");
    check(ix_gguf_writer_add_tensor(w, "q", IX_DTYPE_Q8_0, 1, ne_q, q), w, "q");
    write_writer(w, "tensors.gguf");

    /* vocab-only */
    w = ix_gguf_writer_create();
    ix_str toks[6] = {{"<unk>", 5}, {"<s>", 3}, {"</s>", 4}, {"a", 1}, {"b", 1}, {"ab", 2}};
    float scores[6] = {0, 0, 0, -1, -2, -3};
    int32_t types[6] = {2, 3, 3, 1, 1, 1};
    check(ix_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"), w, "model");
    check(ix_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 6), w, "tokens");
    check(ix_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IX_GGUF_FLOAT32, scores, 6), w, "scores");
    check(ix_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IX_GGUF_INT32, types, 6), w, "types");
    write_writer(w, "vocab.gguf");

    /* header only */
    w = ix_gguf_writer_create();
    write_writer(w, "empty.gguf");

    /* nested arrays: [[1, 2] (u8), [["x"], []]] */
    ix_buf b = {0};
    hb_header(&b, 3, 0, 1);
    hb_key(&b, "nested", IX_GGUF_ARRAY);
    hb_u32(&b, IX_GGUF_ARRAY);
    hb_u64(&b, 2);
    hb_u32(&b, IX_GGUF_UINT8);
    hb_u64(&b, 2);
    hb_u8(&b, 1);
    hb_u8(&b, 2);
    hb_u32(&b, IX_GGUF_ARRAY);
    hb_u64(&b, 2);
    hb_u32(&b, IX_GGUF_STRING);
    hb_u64(&b, 1);
    hb_str(&b, "x");
    hb_u32(&b, IX_GGUF_STRING);
    hb_u64(&b, 0);
    write_bytes(&b, "nested.gguf");

    /* v2 with one tensor */
    ix_buf_clear(&b);
    hb_header(&b, 2, 1, 1);
    hb_kv_u32(&b, "general.alignment", 32);
    uint64_t ne[2] = {2, 2};
    hb_tensor(&b, "w", 2, ne, IX_DTYPE_F32, 0);
    hb_pad(&b, 32);
    hb_zeros(&b, 16);
    write_bytes(&b, "v2.gguf");
    ix_buf_free(&b);
    return 0;
}
