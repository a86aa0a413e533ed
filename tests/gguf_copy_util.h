/* A copy of a GGUF file differing in one metadata key, for tests that need a
 * model like another but for that key (a chat template, a vocabulary). */
#ifndef IX_GGUF_COPY_UTIL_H
#define IX_GGUF_COPY_UTIL_H

#include <stdio.h>
#include <string.h>

#include "inferx/gguf.h"

/* Writes the new value of key (set's arg is the caller's). */
typedef ix_status (*ix_test_set_kv_fn)(ix_gguf_writer *w, const char *key, const void *arg);

/* Copies src_path to dst_path with every key but `key` and every tensor as
 * they are, then key as set writes it (replaced, or added when src has none).
 * IX_OK or the first failure. */
static inline ix_status ix_test_gguf_copy_with(const char *src_path, const char *dst_path, const char *key,
                                               ix_test_set_kv_fn set, const void *arg) {
    ix_gguf *src = NULL;
    ix_status s = ix_gguf_open(&src, src_path, NULL);
    if (s != IX_OK) return s;
    ix_gguf_writer *w = ix_gguf_writer_create();
    if (!w) {
        ix_gguf_close(src);
        return IX_ERR_NOMEM;
    }
    size_t klen = strlen(key);
    for (uint64_t i = 0; i < ix_gguf_n_kv(src) && s == IX_OK; i++) {
        ix_str k = ix_gguf_kv_key(src, i);
        if (k.len != klen || memcmp(k.ptr, key, klen) != 0) s = ix_gguf_writer_copy_kv(w, src, i);
    }
    if (s == IX_OK) s = set(w, key, arg);
    for (uint64_t i = 0; i < ix_gguf_n_tensors(src) && s == IX_OK; i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(src, i);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        s = ix_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
    }
    if (s == IX_OK) s = ix_gguf_writer_write(w, dst_path);
    ix_gguf_writer_destroy(w);
    ix_gguf_close(src);
    return s;
}

#endif
