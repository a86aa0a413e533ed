/* Helpers shared by the gguf tests: a byte builder for handmade (and
 * deliberately broken) GGUF files, a whole-file reader, and a walker that
 * touches every accessor of an opened file (also the fuzz target's body). */
#ifndef IX_GGUF_TEST_UTIL_H
#define IX_GGUF_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/gguf.h"

/* ---- handmade files ------------------------------------------------------ */

/* The builder aborts on out of memory: tests that inject allocation failures
 * build their inputs before arming the injection. */
static inline void hb_bytes(ix_buf *b, const void *p, size_t n) {
    if (ix_buf_append(b, p, n) != IX_OK) abort();
}
static inline void hb_u8(ix_buf *b, uint8_t v) { hb_bytes(b, &v, 1); }
static inline void hb_u32(ix_buf *b, uint32_t v) {
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    hb_bytes(b, x, 4);
}
static inline void hb_u64(ix_buf *b, uint64_t v) {
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    hb_bytes(b, x, 8);
}
static inline void hb_str(ix_buf *b, const char *s) {
    hb_u64(b, strlen(s));
    hb_bytes(b, s, strlen(s));
}
static inline void hb_header(ix_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    hb_bytes(b, "GGUF", 4);
    hb_u32(b, version);
    hb_u64(b, n_tensors);
    hb_u64(b, n_kv);
}
/* Key and value type; the caller appends the value. */
static inline void hb_key(ix_buf *b, const char *key, ix_gguf_type type) {
    hb_str(b, key);
    hb_u32(b, (uint32_t)type);
}
static inline void hb_kv_u32(ix_buf *b, const char *key, uint32_t v) {
    hb_key(b, key, IX_GGUF_UINT32);
    hb_u32(b, v);
}
static inline void hb_tensor(ix_buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                             uint64_t offset) {
    hb_str(b, name);
    hb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) hb_u64(b, ne[i]);
    hb_u32(b, type);
    hb_u64(b, offset);
}
/* Zero bytes up to a multiple of align. */
static inline void hb_pad(ix_buf *b, size_t align) {
    while (b->len % align) hb_u8(b, 0);
}
static inline void hb_zeros(ix_buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) hb_u8(b, 0);
}

/* ---- files --------------------------------------------------------------- */

/* Whole file into a malloc'ed buffer (not counted by ix_mem_*), or NULL. */
static inline uint8_t *read_whole_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *data = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            uint8_t *d = realloc(data, cap);
            if (!d) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = d;
        }
        size_t k = fread(data + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    *size = n;
    return data;
}

/* ---- walking every accessor ---------------------------------------------- */

/* Folds bytes into a checksum so the compiler cannot drop the reads. */
static inline uint64_t walk_mix(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static inline uint64_t walk_arr(const ix_gguf_arr *a, uint64_t h, uint64_t *budget) {
    for (uint64_t i = 0; i < a->n && *budget > 0; i++, (*budget)--) {
        switch (a->type) {
        case IX_GGUF_STRING: {
            ix_str s = ix_gguf_arr_str(a, i);
            h = walk_mix(h, s.ptr, s.len);
            break;
        }
        case IX_GGUF_ARRAY: {
            ix_gguf_arr sub = ix_gguf_arr_arr(a, i);
            h = walk_arr(&sub, h, budget);
            break;
        }
        case IX_GGUF_FLOAT32:
        case IX_GGUF_FLOAT64: {
            double d = ix_gguf_arr_f64(a, i);
            h = walk_mix(h, &d, sizeof d);
            break;
        }
        default: {
            uint64_t u = ix_gguf_arr_u64(a, i) ^ (uint64_t)ix_gguf_arr_i64(a, i);
            double d = ix_gguf_arr_f64(a, i);
            h = walk_mix(h, &u, sizeof u);
            h = walk_mix(h, &d, sizeof d);
        }
        }
    }
    return h;
}

/* Touches every key, value, array element (up to a budget) and tensor, and
 * checks the invariants a validated file promises; returns a checksum. Any
 * broken promise aborts (the fuzzer reports it as a crash). */
static inline uint64_t walk_gguf(const ix_gguf *g) {
#define WALK_CHECK(c)                                                          \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "walk_gguf: %s failed (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                           \
        }                                                                      \
    } while (0)
    uint64_t h = 0xcbf29ce484222325ull, budget = 1u << 20;
    uint64_t size = ix_gguf_file_size(g);
    WALK_CHECK(ix_gguf_version(g) == 2 || ix_gguf_version(g) == 3);
    uint64_t a = ix_gguf_alignment(g);
    WALK_CHECK(a != 0 && (a & (a - 1)) == 0);
    for (uint64_t i = 0; i < ix_gguf_n_kv(g); i++) {
        ix_str k = ix_gguf_kv_key(g, i);
        WALK_CHECK(k.len > 0);
        h = walk_mix(h, k.ptr, k.len);
        char key[256];
        if (k.len < sizeof key && !memchr(k.ptr, 0, k.len)) {
            memcpy(key, k.ptr, k.len);
            key[k.len] = '\0';
            WALK_CHECK(ix_gguf_find_key(g, key) == (int64_t)i);
            uint32_t u32;
            uint64_t u64;
            int64_t i64;
            float f;
            bool b;
            ix_str s;
            ix_gguf_arr arr;
            ix_errbuf err;
            ix_status st[7] = {
                ix_gguf_get_u32(g, key, &u32, &err),  ix_gguf_get_u64(g, key, &u64, &err),
                ix_gguf_get_i64(g, key, &i64, &err),  ix_gguf_get_f32(g, key, &f, &err),
                ix_gguf_get_bool(g, key, &b, &err),   ix_gguf_get_str(g, key, &s, &err),
                ix_gguf_get_arr(g, key, IX_GGUF_TYPE_COUNT, &arr, &err),
            };
            for (int j = 0; j < 7; j++)
                WALK_CHECK(st[j] == IX_OK || st[j] == IX_ERR_TYPE || st[j] == IX_ERR_RANGE);
        }
        ix_gguf_value v = ix_gguf_kv_value(g, i);
        switch (v.type) {
        case IX_GGUF_STRING: h = walk_mix(h, v.v.str.ptr, v.v.str.len); break;
        case IX_GGUF_ARRAY: h = walk_arr(&v.v.arr, h, &budget); break;
        default: h = walk_mix(h, &v.v, sizeof v.v.u64);
        }
    }
    WALK_CHECK(ix_gguf_find_key(g, "no such key \x01") == -1);
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
        WALK_CHECK(t != NULL);
        WALK_CHECK(t->n_dims >= 1 && t->n_dims <= IX_GGUF_MAX_DIMS);
        WALK_CHECK(ix_dtype_known(t->type));
        uint64_t n = 1;
        for (int d = 0; d < IX_GGUF_MAX_DIMS; d++) n *= (uint64_t)t->ne[d];
        WALK_CHECK(n == t->n_elements);
        WALK_CHECK(t->n_bytes > 0 && t->offset % a == 0);
        WALK_CHECK(ix_gguf_data_offset(g) + t->offset + t->n_bytes <= size);
        const uint8_t *d = t->data;
        h = walk_mix(h, d, 1);
        h = walk_mix(h, d + t->n_bytes - 1, 1);
        char name[256];
        if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = '\0';
            WALK_CHECK(ix_gguf_find_tensor(g, name) == t);
        }
    }
    WALK_CHECK(ix_gguf_tensor_at(g, ix_gguf_n_tensors(g)) == NULL);
    return h;
#undef WALK_CHECK
}

#endif
