/*
 * gguf writer: collects metadata and tensor descriptions, then lays out and
 * writes a GGUF v3 file.
 *
 * Each metadata value is serialized the moment it is set, into its own byte
 * buffer holding exactly the bytes that follow the value type in the file.
 * That makes copying from a reader a plain byte copy of the validated value
 * (nested arrays included), and lets the writer refuse a bad value when it is
 * set rather than at write time. Tensor data is borrowed until the write.
 */
#include "gguf/gguf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct wkv {
    char *key; /* key_len bytes + NUL (a copied key may hold NULs) */
    size_t key_len;
    uint32_t type;
    ix_buf val; /* serialized value */
} wkv;

typedef struct wtensor {
    char *name;
    size_t name_len;
    ix_dtype type;
    uint32_t n_dims;
    int64_t ne[IX_GGUF_MAX_DIMS];
    const void *data; /* borrowed */
    uint64_t n_bytes;
    uint64_t offset; /* set by layout() */
} wtensor;

struct ix_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    ix_errbuf err;
};

static const char k_align_key[] = "general.alignment";

ix_gguf_writer *ix_gguf_writer_create(void) { return ix_calloc(1, sizeof(ix_gguf_writer)); }

void ix_gguf_writer_destroy(ix_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        ix_free(w->kv[i].key);
        ix_buf_free(&w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) ix_free(w->t[i].name);
    ix_free(w->kv);
    ix_free(w->t);
    ix_free(w);
}

const char *ix_gguf_writer_errmsg(const ix_gguf_writer *w) { return w ? w->err.msg : "writer is NULL"; }

static ix_status put_u32(ix_buf *b, uint32_t v) {
    uint8_t x[4];
    ix__wr_u32(x, v);
    return ix_buf_append(b, x, 4);
}

static ix_status put_u64(ix_buf *b, uint64_t v) {
    uint8_t x[8];
    ix__wr_u64(x, v);
    return ix_buf_append(b, x, 8);
}

static ix_status put_str(ix_buf *b, const char *s, size_t n) {
    ix_status st = put_u64(b, n);
    if (!st && n) st = ix_buf_append(b, s, n);
    return st;
}

/* Doubles *cap until n + 1 elements fit. */
static ix_status reserve_one(void **arr, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return IX_OK;
    size_t c = *cap ? *cap * 2 : 8;
    if (c < *cap || c > SIZE_MAX / elem) return IX_ERR_NOMEM;
    void *p = ix_realloc(*arr, c * elem);
    if (!p) return IX_ERR_NOMEM;
    *arr = p;
    *cap = c;
    return IX_OK;
}

static ix_status check_name(ix_gguf_writer *w, const char *what, const char *s, size_t n) {
    if (!s) return ix_errf(&w->err, IX_ERR_INVALID, "%s is NULL", what);
    if (n == 0) return ix_errf(&w->err, IX_ERR_INVALID, "empty %s", what);
    if (n > IX__GGUF_MAX_NAME_LEN)
        return ix_errf(&w->err, IX_ERR_INVALID, "%s of %zu bytes exceeds the limit of %u", what, n,
                       IX__GGUF_MAX_NAME_LEN);
    return IX_OK;
}

/* Stores (or replaces) key with the serialized value *val, taking ownership of
 * val on success; on failure the caller still owns it and w is unchanged. */
static ix_status set_kv(ix_gguf_writer *w, const char *key, size_t key_len, uint32_t type, ix_buf *val) {
    ix_status s = check_name(w, "key", key, key_len);
    if (s) return s;
    if (key_len == sizeof k_align_key - 1 && !memcmp(key, k_align_key, key_len)) {
        uint32_t a = type == IX_GGUF_UINT32 ? ix__rd_u32((const uint8_t *)val->data) : 0;
        if (a == 0 || (a & (a - 1)) != 0)
            return ix_errf(&w->err, IX_ERR_INVALID, "%s must be a u32 power of two", k_align_key);
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        wkv *e = &w->kv[i];
        if (e->key_len == key_len && !memcmp(e->key, key, key_len)) {
            ix_buf_free(&e->val);
            e->val = *val;
            e->type = type;
            return IX_OK;
        }
    }
    void *arr = w->kv;
    s = reserve_one(&arr, &w->cap_kv, w->n_kv, sizeof *w->kv);
    w->kv = arr;
    if (s) return ix_errf(&w->err, s, "out of memory");
    char *k = ix_strndup(key, key_len);
    if (!k) return ix_errf(&w->err, IX_ERR_NOMEM, "out of memory");
    w->kv[w->n_kv++] = (wkv){.key = k, .key_len = key_len, .type = type, .val = *val};
    return IX_OK;
}

/* set_kv for a value built in val; frees val unless stored. */
static ix_status commit(ix_gguf_writer *w, const char *key, uint32_t type, ix_buf *val, ix_status built) {
    if (built) {
        ix_buf_free(val);
        return ix_errf(&w->err, built, "out of memory");
    }
    ix_status s = set_kv(w, key, key ? strlen(key) : 0, type, val);
    if (s) ix_buf_free(val);
    return s;
}

/* Stores a scalar given as the little-endian value of its bits. */
static ix_status set_bits(ix_gguf_writer *w, const char *key, ix_gguf_type type, uint64_t bits) {
    uint8_t b[8];
    size_t sz = ix__gguf_type_size(type);
    ix__wr_u64(b, bits);
    ix_buf val = {0};
    return commit(w, key, type, &val, ix_buf_append(&val, b, sz));
}

ix_status ix_gguf_writer_set_scalar(ix_gguf_writer *w, const char *key, ix_gguf_type type,
                                    const void *value) {
    if (!w) return IX_ERR_INVALID;
    size_t sz = ix__gguf_type_size(type);
    if (sz == 0) return ix_errf(&w->err, IX_ERR_INVALID, "set_scalar: type %d is not a scalar type", (int)type);
    if (!value) return ix_errf(&w->err, IX_ERR_INVALID, "set_scalar: value is NULL");
    /* Same-sized unsigned integers carry every type's object representation
     * (floats included), so one path per size yields the bits. */
    uint64_t bits;
    if (type == IX_GGUF_BOOL) {
        bits = *(const bool *)value ? 1 : 0;
    } else if (sz == 1) {
        bits = *(const uint8_t *)value;
    } else if (sz == 2) {
        uint16_t x;
        memcpy(&x, value, sizeof x);
        bits = x;
    } else if (sz == 4) {
        uint32_t x;
        memcpy(&x, value, sizeof x);
        bits = x;
    } else {
        memcpy(&bits, value, sizeof bits);
    }
    return set_bits(w, key, type, bits);
}

ix_status ix_gguf_writer_set_u32(ix_gguf_writer *w, const char *key, uint32_t v) {
    return w ? set_bits(w, key, IX_GGUF_UINT32, v) : IX_ERR_INVALID;
}
ix_status ix_gguf_writer_set_i32(ix_gguf_writer *w, const char *key, int32_t v) {
    return w ? set_bits(w, key, IX_GGUF_INT32, (uint32_t)v) : IX_ERR_INVALID;
}
ix_status ix_gguf_writer_set_u64(ix_gguf_writer *w, const char *key, uint64_t v) {
    return w ? set_bits(w, key, IX_GGUF_UINT64, v) : IX_ERR_INVALID;
}
ix_status ix_gguf_writer_set_f32(ix_gguf_writer *w, const char *key, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return w ? set_bits(w, key, IX_GGUF_FLOAT32, bits) : IX_ERR_INVALID;
}
ix_status ix_gguf_writer_set_bool(ix_gguf_writer *w, const char *key, bool v) {
    return w ? set_bits(w, key, IX_GGUF_BOOL, v ? 1 : 0) : IX_ERR_INVALID;
}

ix_status ix_gguf_writer_set_str(ix_gguf_writer *w, const char *key, const char *v) {
    if (!w) return IX_ERR_INVALID;
    if (!v) return ix_errf(&w->err, IX_ERR_INVALID, "set_str: value is NULL");
    ix_buf val = {0};
    return commit(w, key, IX_GGUF_STRING, &val, put_str(&val, v, strlen(v)));
}

ix_status ix_gguf_writer_set_arr(ix_gguf_writer *w, const char *key, ix_gguf_type elem_type,
                                 const void *data, uint64_t n) {
    if (!w) return IX_ERR_INVALID;
    size_t sz = ix__gguf_type_size(elem_type);
    if (sz == 0)
        return ix_errf(&w->err, IX_ERR_INVALID,
                       "set_arr: element type %d is not fixed-size (use set_arr_str or copy_kv)", (int)elem_type);
    uint64_t bytes;
    if (ix_mul_overflow_u64(n, sz, &bytes) || bytes > SIZE_MAX / 2)
        return ix_errf(&w->err, IX_ERR_INVALID, "set_arr: %" PRIu64 " elements is too many", n);
    if (!data && n) return ix_errf(&w->err, IX_ERR_INVALID, "set_arr: data is NULL");
    if (elem_type == IX_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1)
                return ix_errf(&w->err, IX_ERR_INVALID, "set_arr: bool %" PRIu64 " is neither 0 nor 1", i);
    ix_buf val = {0};
    ix_status s = ix_buf_reserve(&val, 12 + (size_t)bytes);
    if (!s) s = put_u32(&val, elem_type);
    if (!s) s = put_u64(&val, n);
    if (!s && bytes) s = ix_buf_append(&val, data, (size_t)bytes);
    return commit(w, key, IX_GGUF_ARRAY, &val, s);
}

ix_status ix_gguf_writer_set_arr_str(ix_gguf_writer *w, const char *key, const ix_str *v, uint64_t n) {
    if (!w) return IX_ERR_INVALID;
    if (!v && n) return ix_errf(&w->err, IX_ERR_INVALID, "set_arr_str: strings are NULL");
    uint64_t bytes = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i].ptr && v[i].len)
            return ix_errf(&w->err, IX_ERR_INVALID, "set_arr_str: string %" PRIu64 " is NULL", i);
        if (ix_add_overflow_u64(bytes, 8, &bytes) || ix_add_overflow_u64(bytes, v[i].len, &bytes) ||
            bytes > SIZE_MAX / 2)
            return ix_errf(&w->err, IX_ERR_INVALID, "set_arr_str: strings too large");
    }
    ix_buf val = {0};
    ix_status s = ix_buf_reserve(&val, (size_t)bytes);
    if (!s) s = put_u32(&val, IX_GGUF_STRING);
    if (!s) s = put_u64(&val, n);
    for (uint64_t i = 0; i < n && !s; i++) s = put_str(&val, v[i].ptr, v[i].len);
    return commit(w, key, IX_GGUF_ARRAY, &val, s);
}

ix_status ix_gguf_writer_copy_kv(ix_gguf_writer *w, const ix_gguf *src, uint64_t i) {
    if (!w) return IX_ERR_INVALID;
    if (!src || i >= src->n_kv)
        return ix_errf(&w->err, IX_ERR_INVALID, "copy_kv: no key #%" PRIu64 " in the source", i);
    const ix__gguf_kv *kv = &src->kv[i];
    ix_buf val = {0};
    /* The reader validated [val_off, val_end) as one serialized value. */
    ix_status s = ix_buf_append(&val, src->base + kv->val_off, (size_t)(kv->val_end - kv->val_off));
    if (s) return ix_errf(&w->err, s, "out of memory");
    s = set_kv(w, (const char *)src->base + kv->key_off, kv->key_len, kv->type, &val);
    if (s) ix_buf_free(&val);
    return s;
}

ix_status ix_gguf_writer_add_tensor(ix_gguf_writer *w, const char *name, ix_dtype type, uint32_t n_dims,
                                    const int64_t *ne, const void *data) {
    if (!w) return IX_ERR_INVALID;
    size_t name_len = name ? strlen(name) : 0;
    ix_status s = check_name(w, "tensor name", name, name_len);
    if (s) return s;
    if (n_dims < 1 || n_dims > IX_GGUF_MAX_DIMS || !ne)
        return ix_errf(&w->err, IX_ERR_INVALID, "tensor '%.200s': n_dims %" PRIu32 " is not in 1..%d", name,
                       n_dims, IX_GGUF_MAX_DIMS);
    if (!ix_dtype_known(type))
        return ix_errf(&w->err, IX_ERR_INVALID, "tensor '%.200s': unknown type %d", name, (int)type);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data, .name_len = name_len};
    uint64_t n_el = 1;
    for (uint32_t j = 0; j < IX_GGUF_MAX_DIMS; j++) t.ne[j] = 1;
    for (uint32_t j = 0; j < n_dims; j++) {
        if (ne[j] < 1 || ix_mul_overflow_u64(n_el, (uint64_t)ne[j], &n_el) || n_el > INT64_MAX)
            return ix_errf(&w->err, IX_ERR_INVALID, "tensor '%.200s': bad shape (ne[%" PRIu32 "] = %" PRId64 ")",
                           name, j, ne[j]);
        t.ne[j] = ne[j];
    }
    uint64_t row;
    if (!ix_dtype_row_bytes(type, (uint64_t)ne[0], &row) ||
        ix_mul_overflow_u64(row, n_el / (uint64_t)ne[0], &t.n_bytes))
        return ix_errf(&w->err, IX_ERR_INVALID,
                       "tensor '%.200s': ne[0] = %" PRId64 " is not a whole number of %s blocks of %" PRIu32
                       ", or the size overflows",
                       name, ne[0], ix_dtype_name(type), ix_dtype_block_size(type));
    if (!data) return ix_errf(&w->err, IX_ERR_INVALID, "tensor '%.200s': data is NULL", name);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == name_len && !memcmp(w->t[i].name, name, name_len))
            return ix_errf(&w->err, IX_ERR_INVALID, "duplicate tensor name '%.200s'", name);
    void *arr = w->t;
    s = reserve_one(&arr, &w->cap_t, w->n_t, sizeof *w->t);
    w->t = arr;
    if (s) return ix_errf(&w->err, s, "out of memory");
    t.name = ix_strndup(name, name_len);
    if (!t.name) return ix_errf(&w->err, IX_ERR_NOMEM, "out of memory");
    w->t[w->n_t++] = t;
    return IX_OK;
}

/* ---- layout and output ---------------------------------------------------- */

typedef struct layout {
    ix_buf hdr; /* magic .. tensor infos */
    uint64_t alignment, data_offset, total;
} layout;

static bool align_up(uint64_t x, uint64_t a, uint64_t *out) {
    uint64_t y;
    if (ix_add_overflow_u64(x, a - 1, &y)) return false;
    *out = y & ~(a - 1);
    return true;
}

/* Assigns tensor offsets and serializes the header. On failure lo->hdr is
 * freed. */
static ix_status make_layout(ix_gguf_writer *w, layout *lo) {
    memset(lo, 0, sizeof *lo);
    lo->alignment = IX_GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == sizeof k_align_key - 1 && !memcmp(w->kv[i].key, k_align_key, sizeof k_align_key - 1))
            lo->alignment = ix__rd_u32((const uint8_t *)w->kv[i].val.data); /* checked by set_kv */

    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        if (ix_add_overflow_u64(off, w->t[i].n_bytes, &off) || !align_up(off, lo->alignment, &off))
            return ix_errf(&w->err, IX_ERR_INVALID, "tensor data too large");
    }

    ix_buf *b = &lo->hdr;
    ix_status s = ix_buf_append(b, "GGUF", 4);
    if (!s) s = put_u32(b, 3);
    if (!s) s = put_u64(b, w->n_t);
    if (!s) s = put_u64(b, w->n_kv);
    for (size_t i = 0; i < w->n_kv && !s; i++) {
        s = put_str(b, w->kv[i].key, w->kv[i].key_len);
        if (!s) s = put_u32(b, w->kv[i].type);
        if (!s) s = ix_buf_append(b, w->kv[i].val.data, w->kv[i].val.len);
    }
    for (size_t i = 0; i < w->n_t && !s; i++) {
        const wtensor *t = &w->t[i];
        s = put_str(b, t->name, t->name_len);
        if (!s) s = put_u32(b, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims && !s; j++) s = put_u64(b, (uint64_t)t->ne[j]);
        if (!s) s = put_u32(b, (uint32_t)t->type);
        if (!s) s = put_u64(b, t->offset);
    }
    if (s) {
        ix_buf_free(b);
        return ix_errf(&w->err, s, "out of memory");
    }
    if (!align_up(b->len, lo->alignment, &lo->data_offset) ||
        ix_add_overflow_u64(lo->data_offset, off, &lo->total)) {
        ix_buf_free(b);
        return ix_errf(&w->err, IX_ERR_INVALID, "file too large");
    }
    if (w->n_t == 0) lo->total = b->len; /* like vocab files: end at the header */
    return IX_OK;
}

ix_status ix_gguf_writer_write_memory(ix_gguf_writer *w, void **out, size_t *out_size) {
    if (!w) return IX_ERR_INVALID;
    if (!out || !out_size) return ix_errf(&w->err, IX_ERR_INVALID, "write_memory: out is NULL");
    *out = NULL;
    *out_size = 0;
    layout lo;
    ix_status s = make_layout(w, &lo);
    if (s) return s;
    if (lo.total > SIZE_MAX) {
        ix_buf_free(&lo.hdr);
        return ix_errf(&w->err, IX_ERR_NOMEM, "file of %" PRIu64 " bytes does not fit in memory", lo.total);
    }
    uint8_t *m = ix_malloc((size_t)lo.total);
    if (!m) {
        ix_buf_free(&lo.hdr);
        return ix_errf(&w->err, IX_ERR_NOMEM, "out of memory (%" PRIu64 " bytes)", lo.total);
    }
    /* Zero everything first: the padding is whatever is not overwritten. */
    memset(m, 0, (size_t)lo.total);
    memcpy(m, lo.hdr.data, lo.hdr.len);
    for (size_t i = 0; i < w->n_t; i++)
        memcpy(m + lo.data_offset + w->t[i].offset, w->t[i].data, (size_t)w->t[i].n_bytes);
    ix_buf_free(&lo.hdr);
    *out = m;
    *out_size = (size_t)lo.total;
    return IX_OK;
}

static bool write_all(int fd, const void *data, uint64_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = write(fd, p, chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return false;
        }
        p += k;
        n -= (uint64_t)k;
    }
    return true;
}

static bool write_zeros(int fd, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n > 0) {
        uint64_t chunk = n < sizeof zeros ? n : sizeof zeros;
        if (!write_all(fd, zeros, chunk)) return false;
        n -= chunk;
    }
    return true;
}

ix_status ix_gguf_writer_write(ix_gguf_writer *w, const char *path) {
    if (!w) return IX_ERR_INVALID;
    if (!path || !*path) return ix_errf(&w->err, IX_ERR_INVALID, "write: path is empty");
    layout lo;
    ix_status s = make_layout(w, &lo);
    if (s) return s;
    size_t plen = strlen(path);
    char *tmp = ix_malloc(plen + 5);
    if (!tmp) {
        ix_buf_free(&lo.hdr);
        return ix_errf(&w->err, IX_ERR_NOMEM, "out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s = ix_errf(&w->err, IX_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        goto out;
    }
    bool ok = write_all(fd, lo.hdr.data, lo.hdr.len);
    uint64_t pos = lo.hdr.len;
    for (size_t i = 0; i < w->n_t && ok; i++) {
        uint64_t at = lo.data_offset + w->t[i].offset;
        ok = write_zeros(fd, at - pos) && write_all(fd, w->t[i].data, w->t[i].n_bytes);
        pos = at + w->t[i].n_bytes;
    }
    if (ok) ok = write_zeros(fd, lo.total - pos);
    /* The data must be on disk before the rename makes it the file. */
    if (ok) ok = fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        s = ix_errf(&w->err, IX_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        s = ix_errf(&w->err, IX_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
    }
out:
    ix_free(tmp);
    ix_buf_free(&lo.hdr);
    return s;
}
