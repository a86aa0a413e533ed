/*
 * gguf reader: maps a file read-only (or borrows a buffer) and validates all
 * of it before handing out a handle, so that every accessor afterwards is a
 * plain in-bounds read that cannot fail.
 *
 * Validation reads the file front to back with one cursor. Before each field
 * is read, its size is checked against the bytes left; every count is checked
 * against what the remaining bytes could possibly hold before anything is
 * sized by it, and the arrays we keep (entries, element tables) grow only as
 * real entries are parsed, so memory stays proportional to what the file
 * really contains however hostile its counts. Keys and tensor names are
 * sorted once (heap sort: no worst case to provoke) for O(log n) lookups and
 * duplicate detection; tensor extents are sorted by offset to find overlaps.
 *
 * Errors name the key (index, and name once read), the tensor, the array
 * element and the file offset at fault. Nested array frames prefix their
 * context on the way out, so messages read outermost first.
 */
#include "gguf/gguf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Smallest possible serialized entries, for count plausibility checks: a key
 * (length + 1 byte) + type + a 1-byte value; a tensor info with a 1-byte name
 * and one dimension. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)
/* Entries are indexed with uint32_t in the sorted indexes. */
#define MAX_ENTRIES (UINT32_MAX - 1u)
#define NO_INDEX UINT64_MAX

typedef struct parser {
    ix_gguf *g;
    const uint8_t *base;
    uint64_t size, pos;
    uint64_t kv_cap, tensor_cap, table_cap;
    ix_errbuf *err;
} parser;

static bool have(const parser *p, uint64_t n) { return n <= p->size - p->pos; }
static uint64_t left(const parser *p) { return p->size - p->pos; }

/* ---- messages ------------------------------------------------------------ */

/* A key or tensor name from the file made safe to print: quotes, backslashes,
 * control and non-ASCII bytes escaped, long names cut. */
typedef struct shown {
    char s[104];
} shown;

static const char *show(shown *out, const void *ptr, uint64_t len) {
    const uint8_t *p = ptr;
    size_t o = 0;
    for (uint64_t i = 0; i < len; i++) {
        if (o >= 80) {
            memcpy(out->s + o, "...", 4);
            return out->s;
        }
        uint8_t c = p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out->s[o++] = (char)c;
        } else {
            static const char hex[] = "0123456789abcdef";
            out->s[o++] = '\\';
            out->s[o++] = 'x';
            out->s[o++] = hex[c >> 4];
            out->s[o++] = hex[c & 15];
        }
    }
    out->s[o] = '\0';
    return out->s;
}

static ix_status fail(parser *p, ix_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ix_status fail(parser *p, ix_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ix_verrf(p->err, s, fmt, ap);
    va_end(ap);
    return s;
}

/* "<what> runs past end of file (offset X, file size Y)". */
static ix_status past_end(parser *p, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ix_status past_end(parser *p, uint64_t at, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fail(p, IX_ERR_FORMAT, "%s runs past end of file (offset %" PRIu64 ", file size %" PRIu64 ")",
                what, at, p->size);
}

/* Prefixes the message already in p->err with "<context>: ". */
static ix_status wrap(parser *p, ix_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ix_status wrap(parser *p, ix_status s, const char *fmt, ...) {
    char head[256], inner[IX_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(inner, p->err->msg, sizeof inner);
    return ix_errf(p->err, s, "%s: %s", head, inner);
}

/* "string" for a top-level value, "string 17" for element 17 of an array. */
static const char *label(char *buf, size_t n, uint32_t type, uint64_t index) {
    if (index == NO_INDEX)
        snprintf(buf, n, "%s", ix_gguf_type_name((ix_gguf_type)type));
    else
        snprintf(buf, n, "%s %" PRIu64, ix_gguf_type_name((ix_gguf_type)type), index);
    return buf;
}

static const char *plural(uint64_t n) { return n == 1 ? "" : "s"; }

/* ---- growth of the arrays we keep ---------------------------------------- */

/* Makes room for `need` elements of `elem` bytes in *arr, doubling from a
 * small start so that memory follows what was really parsed. */
static ix_status grow(parser *p, void **arr, uint64_t *cap, uint64_t need, size_t elem) {
    if (need <= *cap) return IX_OK;
    uint64_t c = *cap ? *cap : 16;
    while (c < need) c = c > UINT64_MAX / 2 ? need : c * 2;
    uint64_t bytes;
    if (ix_mul_overflow_u64(c, elem, &bytes) || bytes > SIZE_MAX)
        return fail(p, IX_ERR_NOMEM, "out of memory (%" PRIu64 " entries)", need);
    void *q = ix_realloc(*arr, (size_t)bytes);
    if (!q) return fail(p, IX_ERR_NOMEM, "out of memory (%" PRIu64 " entries)", need);
    *arr = q;
    *cap = c;
    return IX_OK;
}

static ix_status table_reserve(parser *p, uint64_t n, uint64_t *idx) {
    ix_gguf *g = p->g;
    uint64_t need;
    if (ix_add_overflow_u64(g->n_tables, n, &need))
        return fail(p, IX_ERR_NOMEM, "out of memory (array element tables)");
    void *t = g->tables;
    ix_status s = grow(p, &t, &p->table_cap, need, sizeof *g->tables);
    g->tables = t;
    if (s) return s;
    *idx = g->n_tables;
    g->n_tables = need;
    return IX_OK;
}

/* ---- metadata values ------------------------------------------------------ */

static ix_status parse_array(parser *p, unsigned depth, uint64_t index, uint64_t *table);

/* Checks the value of `type` at the cursor and moves past it. index is the
 * element number inside an array (for messages) or NO_INDEX; depth is the
 * array nesting depth of the value's container (0 at top level). *table gets
 * the element table of an array value. */
static ix_status parse_value(parser *p, uint32_t type, unsigned depth, uint64_t index,
                             uint64_t *table) {
    char lab[48];
    uint64_t at = p->pos;
    *table = IX__GGUF_NO_TABLE;
    if (type == IX_GGUF_ARRAY) return parse_array(p, depth + 1, index, table);
    if (type == IX_GGUF_STRING) {
        if (!have(p, 8)) return past_end(p, at, "%s length field", label(lab, sizeof lab, type, index));
        uint64_t len = ix__rd_u64(p->base + at);
        if (len > left(p) - 8)
            return past_end(p, at, "%s length %" PRIu64, label(lab, sizeof lab, type, index), len);
        p->pos += 8 + len;
        return IX_OK;
    }
    size_t sz = ix__gguf_type_size(type);
    IX_ASSERT(sz != 0); /* callers pass known types only */
    if (!have(p, sz))
        return past_end(p, at, "%s value (%zu bytes)", label(lab, sizeof lab, type, index), sz);
    if (type == IX_GGUF_BOOL && p->base[at] > 1)
        return fail(p, IX_ERR_FORMAT, "bool value %u is neither 0 nor 1 (offset %" PRIu64 ")",
                    p->base[at], at);
    p->pos += sz;
    return IX_OK;
}

static ix_status parse_array(parser *p, unsigned depth, uint64_t index, uint64_t *table) {
    char lab[48];
    const char *name = index == NO_INDEX ? "array" : label(lab, sizeof lab, IX_GGUF_ARRAY, index);
    uint64_t at = p->pos;
    if (depth > IX_GGUF_MAX_ARRAY_DEPTH)
        return fail(p, IX_ERR_FORMAT, "%s: arrays nested more than %d deep (offset %" PRIu64 ")",
                    name, IX_GGUF_MAX_ARRAY_DEPTH, at);
    if (!have(p, 12)) return past_end(p, at, "%s header (element type and count)", name);
    uint32_t et = ix__rd_u32(p->base + at);
    uint64_t n = ix__rd_u64(p->base + at + 4);
    if (et >= IX_GGUF_TYPE_COUNT)
        return fail(p, IX_ERR_FORMAT, "%s: unknown element type %" PRIu32 " (offset %" PRIu64 ")",
                    name, et, at);
    p->pos += 12;
    const char *tn = ix_gguf_type_name((ix_gguf_type)et);
    size_t sz = ix__gguf_type_size(et);

    if (sz != 0) { /* fixed-size elements: one extent check for all */
        if (n > left(p) / sz)
            return past_end(p, at, "%s of %" PRIu64 " %s%s (%zu bytes each)", name, n, tn, plural(n), sz);
        if (et == IX_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (p->base[p->pos + i] > 1)
                    return fail(p, IX_ERR_FORMAT,
                                "%s of %" PRIu64 " bools: bool %" PRIu64
                                " is %u, neither 0 nor 1 (offset %" PRIu64 ")",
                                name, n, i, p->base[p->pos + i], p->pos + i);
        p->pos += n * sz;
        return IX_OK;
    }

    /* Strings take at least their 8-byte length, arrays their 12-byte header. */
    uint64_t min_elem = et == IX_GGUF_STRING ? 8 : 12;
    if (n > left(p) / min_elem)
        return past_end(p, at, "%s of %" PRIu64 " %s%s (at least %" PRIu64 " bytes each)", name, n, tn,
                        plural(n), min_elem);
    if (n == 0) return IX_OK;
    uint64_t per = et == IX_GGUF_STRING ? 1 : 2, idx = 0;
    ix_status s = table_reserve(p, n * per, &idx);
    if (s) return wrap(p, s, "%s of %" PRIu64 " %s%s", name, n, tn, plural(n));
    uint64_t data_pos = p->pos;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t el_at = p->pos, sub;
        s = parse_value(p, et, depth, i, &sub);
        if (s) return wrap(p, s, "%s of %" PRIu64 " %s%s", name, n, tn, plural(n));
        /* p->g->tables may have moved during the recursive call. */
        p->g->tables[idx + i * per] = el_at - data_pos;
        if (per == 2) p->g->tables[idx + i * per + 1] = sub;
    }
    *table = idx;
    return IX_OK;
}

/* The length-prefixed name that starts a key ("key", "key") or a tensor
 * info ("tensor", "name"): checked, skipped, its offset and length out. */
static ix_status parse_name(parser *p, const char *what, const char *noun, uint64_t i, uint64_t *off,
                            uint64_t *len_out) {
    uint64_t at = p->pos;
    if (!have(p, 8)) return past_end(p, at, "%s #%" PRIu64 ": %s length field", what, i, noun);
    uint64_t len = ix__rd_u64(p->base + at);
    if (len == 0)
        return fail(p, IX_ERR_FORMAT, "%s #%" PRIu64 ": empty %s (offset %" PRIu64 ")", what, i, noun, at);
    if (len > left(p) - 8) return past_end(p, at, "%s #%" PRIu64 ": %s length %" PRIu64, what, i, noun, len);
    if (len > IX__GGUF_MAX_NAME_LEN)
        return fail(p, IX_ERR_FORMAT,
                    "%s #%" PRIu64 ": %s length %" PRIu64 " exceeds the limit of %u (offset %" PRIu64 ")", what,
                    i, noun, len, IX__GGUF_MAX_NAME_LEN, at);
    *off = at + 8;
    *len_out = len;
    p->pos = at + 8 + len;
    return IX_OK;
}

static ix_status parse_kv(parser *p, uint64_t i) {
    ix_gguf *g = p->g;
    uint64_t key_off, len;
    ix_status s = parse_name(p, "key", "key", i, &key_off, &len);
    if (s) return s;
    shown key;
    show(&key, p->base + key_off, len);

    if (!have(p, 4)) return past_end(p, p->pos, "key #%" PRIu64 " '%s': value type", i, key.s);
    uint32_t type = ix__rd_u32(p->base + p->pos);
    if (type >= IX_GGUF_TYPE_COUNT)
        return fail(p, IX_ERR_FORMAT, "key #%" PRIu64 " '%s': unknown value type %" PRIu32 " (offset %" PRIu64 ")",
                    i, key.s, type, p->pos);
    p->pos += 4;
    uint64_t val_off = p->pos, table;
    s = parse_value(p, type, 0, NO_INDEX, &table);
    if (s) return wrap(p, s, "key #%" PRIu64 " '%s'", i, key.s);

    void *kv = g->kv;
    s = grow(p, &kv, &p->kv_cap, i + 1, sizeof *g->kv);
    g->kv = kv;
    if (s) return wrap(p, s, "key #%" PRIu64 " '%s'", i, key.s);
    g->kv[i] = (ix__gguf_kv){.key_off = key_off, .val_off = val_off, .val_end = p->pos,
                             .table = table, .key_len = (uint32_t)len, .type = type};
    g->n_kv = i + 1;

    static const char k_align[] = "general.alignment";
    if (len == sizeof k_align - 1 && !memcmp(p->base + key_off, k_align, len)) {
        if (type != IX_GGUF_UINT32)
            return fail(p, IX_ERR_FORMAT, "key #%" PRIu64 " '%s': type %s, must be u32", i, key.s,
                        ix_gguf_type_name((ix_gguf_type)type));
        uint32_t a = ix__rd_u32(p->base + val_off);
        if (a == 0 || (a & (a - 1)) != 0)
            return fail(p, IX_ERR_FORMAT,
                        "key #%" PRIu64 " '%s': %" PRIu32 " is not a non-zero power of two (offset %" PRIu64 ")",
                        i, key.s, a, val_off);
        g->alignment = a;
    }
    return IX_OK;
}

/* ---- tensor infos ------------------------------------------------------- */

static ix_status parse_tensor(parser *p, uint64_t i) {
    ix_gguf *g = p->g;
    uint64_t name_off, len;
    ix_status s = parse_name(p, "tensor", "name", i, &name_off, &len);
    if (s) return s;
    ix_gguf_tensor t = {.name = {(const char *)p->base + name_off, (size_t)len}};
    shown nm;
    show(&nm, t.name.ptr, len);

    if (!have(p, 4)) return past_end(p, p->pos, "tensor #%" PRIu64 " '%s': n_dims", i, nm.s);
    uint32_t nd = ix__rd_u32(p->base + p->pos);
    if (nd < 1 || nd > IX_GGUF_MAX_DIMS)
        return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': n_dims %" PRIu32 " is not in 1..%d (offset %" PRIu64 ")",
                    i, nm.s, nd, IX_GGUF_MAX_DIMS, p->pos);
    p->pos += 4;
    if (!have(p, 8 * (uint64_t)nd))
        return past_end(p, p->pos, "tensor #%" PRIu64 " '%s': %" PRIu32 " dimensions", i, nm.s, nd);
    uint64_t n_el = 1;
    for (uint32_t j = 0; j < IX_GGUF_MAX_DIMS; j++) t.ne[j] = 1;
    for (uint32_t j = 0; j < nd; j++) {
        uint64_t ne = ix__rd_u64(p->base + p->pos + 8 * (uint64_t)j);
        /* Empty tensors hold no data and no model needs them; refusing them
         * keeps every tensor's data pointer inside the file. */
        if (ne == 0 || ne > INT64_MAX)
            return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': ne[%" PRIu32 "] = %" PRIu64
                        " is not in 1..INT64_MAX (offset %" PRIu64 ")",
                        i, nm.s, j, ne, p->pos + 8 * (uint64_t)j);
        if (ix_mul_overflow_u64(n_el, ne, &n_el) || n_el > INT64_MAX)
            return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': element count overflows at ne[%" PRIu32 "] = %" PRIu64,
                        i, nm.s, j, ne);
        t.ne[j] = (int64_t)ne;
    }
    p->pos += 8 * (uint64_t)nd;

    if (!have(p, 4)) return past_end(p, p->pos, "tensor #%" PRIu64 " '%s': type", i, nm.s);
    uint32_t type = ix__rd_u32(p->base + p->pos);
    /* Strict: a type we cannot size makes every later offset unverifiable. */
    if (!ix_dtype_known((ix_dtype)type))
        return fail(p, IX_ERR_UNSUPPORTED, "tensor #%" PRIu64 " '%s': unknown tensor type %" PRIu32 " (offset %" PRIu64 ")",
                    i, nm.s, type, p->pos);
    p->pos += 4;
    uint64_t row_bytes, n_bytes;
    if (!ix_dtype_row_bytes((ix_dtype)type, (uint64_t)t.ne[0], &row_bytes)) {
        if ((uint64_t)t.ne[0] % ix_dtype_block_size((ix_dtype)type) != 0)
            return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32,
                        i, nm.s, t.ne[0], ix_dtype_name((ix_dtype)type), ix_dtype_block_size((ix_dtype)type));
        return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': size in bytes overflows", i, nm.s);
    }
    if (ix_mul_overflow_u64(row_bytes, n_el / (uint64_t)t.ne[0], &n_bytes))
        return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': size in bytes overflows", i, nm.s);

    if (!have(p, 8)) return past_end(p, p->pos, "tensor #%" PRIu64 " '%s': data offset", i, nm.s);
    uint64_t off = ix__rd_u64(p->base + p->pos);
    if (off % g->alignment != 0)
        return fail(p, IX_ERR_FORMAT, "tensor #%" PRIu64 " '%s': data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64 " (offset %" PRIu64 ")",
                    i, nm.s, off, g->alignment, p->pos);
    p->pos += 8;

    t.n_dims = nd;
    t.type = (ix_dtype)type;
    t.n_elements = n_el;
    t.offset = off;
    t.n_bytes = n_bytes;
    void *arr = g->tensors;
    s = grow(p, &arr, &p->tensor_cap, i + 1, sizeof *g->tensors);
    g->tensors = arr;
    if (s) return wrap(p, s, "tensor #%" PRIu64 " '%s'", i, nm.s);
    g->tensors[i] = t;
    g->n_tensors = i + 1;
    return IX_OK;
}

/* ---- sorted indexes ------------------------------------------------------ */

typedef int (*idx_cmp)(const ix_gguf *g, uint32_t a, uint32_t b);

static int cmp_bytes(const char *a, size_t na, const char *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    if (c) return c;
    return na < nb ? -1 : na > nb;
}

static int cmp_key(const ix_gguf *g, uint32_t a, uint32_t b) {
    const ix__gguf_kv *x = &g->kv[a], *y = &g->kv[b];
    return cmp_bytes((const char *)g->base + x->key_off, x->key_len, (const char *)g->base + y->key_off,
                     y->key_len);
}

static int cmp_name(const ix_gguf *g, uint32_t a, uint32_t b) {
    const ix_gguf_tensor *x = &g->tensors[a], *y = &g->tensors[b];
    return cmp_bytes(x->name.ptr, x->name.len, y->name.ptr, y->name.len);
}

static int cmp_offset(const ix_gguf *g, uint32_t a, uint32_t b) {
    uint64_t x = g->tensors[a].offset, y = g->tensors[b].offset;
    if (x != y) return x < y ? -1 : 1;
    return a < b ? -1 : a > b;
}

static void sift_down(uint32_t *v, uint64_t root, uint64_t n, idx_cmp cmp, const ix_gguf *g) {
    for (;;) {
        uint64_t child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && cmp(g, v[child], v[child + 1]) < 0) child++;
        if (cmp(g, v[root], v[child]) >= 0) return;
        uint32_t t = v[root];
        v[root] = v[child];
        v[child] = t;
        root = child;
    }
}

static void heap_sort(uint32_t *v, uint64_t n, idx_cmp cmp, const ix_gguf *g) {
    if (n < 2) return;
    for (uint64_t i = n / 2; i-- > 0;) sift_down(v, i, n, cmp, g);
    for (uint64_t end = n - 1; end > 0; end--) {
        uint32_t t = v[0];
        v[0] = v[end];
        v[end] = t;
        sift_down(v, 0, end, cmp, g);
    }
}

static ix_status make_index(parser *p, uint32_t **out, uint64_t n, idx_cmp cmp) {
    if (n == 0) return IX_OK;
    uint32_t *v = ix_malloc((size_t)n * sizeof *v); /* n <= MAX_ENTRIES */
    if (!v) return fail(p, IX_ERR_NOMEM, "out of memory (index of %" PRIu64 " entries)", n);
    for (uint64_t i = 0; i < n; i++) v[i] = (uint32_t)i;
    heap_sort(v, n, cmp, p->g);
    *out = v;
    return IX_OK;
}

/* ---- whole-file validation ---------------------------------------------- */

static ix_status parse_header(parser *p) {
    ix_gguf *g = p->g;
    const uint8_t *b = p->base;
    if (p->size < 4)
        return fail(p, IX_ERR_FORMAT, "file of %" PRIu64 " bytes is too small for the GGUF magic", p->size);
    if (memcmp(b, "GGUF", 4) != 0) {
        shown m;
        show(&m, b, 4);
        if (!memcmp(b, "FUGG", 4))
            return fail(p, IX_ERR_UNSUPPORTED, "big-endian GGUF file (magic 'FUGG'): only little-endian files are supported");
        if (!memcmp(b, "lmgg", 4) || !memcmp(b, "fmgg", 4) || !memcmp(b, "tjgg", 4))
            return fail(p, IX_ERR_UNSUPPORTED, "legacy GGML/GGMF/GGJT file (magic '%s'): convert it to GGUF", m.s);
        return fail(p, IX_ERR_FORMAT, "not a GGUF file: magic is '%s', expected 'GGUF'", m.s);
    }
    if (p->size < 8) return past_end(p, 4, "version field");
    uint32_t v = ix__rd_u32(b + 4);
    uint32_t swapped = __builtin_bswap32(v);
    if (v == 1)
        return fail(p, IX_ERR_UNSUPPORTED, "GGUF v1 is not supported (only v2 and v3): re-convert the model");
    if (v != 2 && v != 3) {
        if (swapped >= 1 && swapped <= 3)
            return fail(p, IX_ERR_UNSUPPORTED,
                        "big-endian GGUF file (version field 0x%08" PRIx32 " is %" PRIu32 " byte-swapped): only little-endian files are supported",
                        v, swapped);
        return fail(p, IX_ERR_UNSUPPORTED, "unsupported GGUF version %" PRIu32 " (supported: 2, 3)", v);
    }
    g->version = v;
    if (p->size < IX__GGUF_HEADER_BYTES) return past_end(p, 8, "header (tensor and key counts)");
    uint64_t n_tensors = ix__rd_u64(b + 8), n_kv = ix__rd_u64(b + 16);
    p->pos = IX__GGUF_HEADER_BYTES;

    /* Refuse counts the rest of the file cannot hold before anything is sized
     * by them. */
    uint64_t rest = left(p), need_kv = 0, need_t = 0, need;
    if (n_kv > rest / MIN_KV_BYTES || n_kv > MAX_ENTRIES)
        return fail(p, IX_ERR_FORMAT,
                    "n_kv %" PRIu64 " is implausible: the %" PRIu64 " bytes after the header hold at most %" PRIu64 " key/value pairs (truncated or corrupt file?)",
                    n_kv, rest, rest / MIN_KV_BYTES);
    if (n_tensors > rest / MIN_TENSOR_BYTES || n_tensors > MAX_ENTRIES)
        return fail(p, IX_ERR_FORMAT,
                    "n_tensors %" PRIu64 " is implausible: the %" PRIu64 " bytes after the header hold at most %" PRIu64 " tensor infos (truncated or corrupt file?)",
                    n_tensors, rest, rest / MIN_TENSOR_BYTES);
    need_kv = n_kv * MIN_KV_BYTES;
    need_t = n_tensors * MIN_TENSOR_BYTES;
    if (ix_add_overflow_u64(need_kv, need_t, &need) || need > rest)
        return fail(p, IX_ERR_FORMAT,
                    "n_kv %" PRIu64 " and n_tensors %" PRIu64 " are implausible: they need at least %" PRIu64 " bytes, the file has %" PRIu64 " after the header (truncated or corrupt file?)",
                    n_kv, n_tensors, need_kv + need_t, rest);
    g->alignment = IX_GGUF_DEFAULT_ALIGNMENT;

    for (uint64_t i = 0; i < n_kv; i++) {
        ix_status s = parse_kv(p, i);
        if (s) return s;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        ix_status s = parse_tensor(p, i);
        if (s) return s;
    }
    g->header_end = p->pos;
    /* header_end <= size and alignment <= 2^31: no overflow. */
    g->data_offset = (g->header_end + g->alignment - 1) & ~(g->alignment - 1);
    return IX_OK;
}

static ix_status check_tensor_data(parser *p) {
    ix_gguf *g = p->g;
    if (g->n_tensors == 0) return IX_OK; /* a vocab-only file may end at its header */
    if (g->data_offset > p->size)
        return fail(p, IX_ERR_FORMAT,
                    "tensor data section starts at offset %" PRIu64 ", past the end of the file (size %" PRIu64 "): file truncated",
                    g->data_offset, p->size);
    uint64_t data_size = p->size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        ix_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_size || t->n_bytes > data_size - t->offset) {
            shown nm;
            return fail(p, IX_ERR_FORMAT,
                        "tensor #%" PRIu64 " '%s': data [offset %" PRIu64 ", %" PRIu64 "+%" PRIu64 ") outside data section of %" PRIu64 " bytes (data section at file offset %" PRIu64 ", file size %" PRIu64 ")",
                        i, show(&nm, t->name.ptr, t->name.len), t->offset, t->offset, t->n_bytes, data_size,
                        g->data_offset, p->size);
        }
        t->data = p->base + g->data_offset + t->offset;
    }
    return IX_OK;
}

static ix_status check_unique(parser *p) {
    ix_gguf *g = p->g;
    ix_status s = make_index(p, &g->kv_sorted, g->n_kv, cmp_key);
    if (s) return s;
    for (uint64_t i = 1; i < g->n_kv; i++) {
        uint32_t a = g->kv_sorted[i - 1], b = g->kv_sorted[i];
        if (cmp_key(g, a, b) == 0) {
            shown k;
            show(&k, g->base + g->kv[a].key_off, g->kv[a].key_len);
            return fail(p, IX_ERR_FORMAT, "duplicate key '%s' (keys #%" PRIu32 " and #%" PRIu32 ")", k.s,
                        a < b ? a : b, a < b ? b : a);
        }
    }

    /* Overlaps: sort by offset, then each extent must end before the next
     * begins (every tensor has at least one byte). The index is then re-sorted
     * by name and kept for lookups. */
    s = make_index(p, &g->tensor_sorted, g->n_tensors, cmp_offset);
    if (s) return s;
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const ix_gguf_tensor *a = &g->tensors[g->tensor_sorted[i - 1]];
        const ix_gguf_tensor *b = &g->tensors[g->tensor_sorted[i]];
        if (a->offset + a->n_bytes > b->offset) {
            shown na, nb;
            return fail(p, IX_ERR_FORMAT,
                        "tensors #%" PRIu32 " '%s' [%" PRIu64 ", %" PRIu64 ") and #%" PRIu32 " '%s' [%" PRIu64 ", %" PRIu64 ") overlap in the data section",
                        g->tensor_sorted[i - 1], show(&na, a->name.ptr, a->name.len), a->offset,
                        a->offset + a->n_bytes, g->tensor_sorted[i], show(&nb, b->name.ptr, b->name.len),
                        b->offset, b->offset + b->n_bytes);
        }
    }
    heap_sort(g->tensor_sorted, g->n_tensors, cmp_name, g);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        uint32_t a = g->tensor_sorted[i - 1], b = g->tensor_sorted[i];
        if (cmp_name(g, a, b) == 0) {
            shown nm;
            show(&nm, g->tensors[a].name.ptr, g->tensors[a].name.len);
            return fail(p, IX_ERR_FORMAT, "duplicate tensor name '%s' (tensors #%" PRIu32 " and #%" PRIu32 ")",
                        nm.s, a < b ? a : b, a < b ? b : a);
        }
    }
    return IX_OK;
}

/* Validates g->base/g->size into g. On failure the caller closes g. */
static ix_status validate(ix_gguf *g, ix_errbuf *err) {
    ix_errbuf e = {{0}};
    parser p = {.g = g, .base = g->base, .size = g->size, .err = &e};
    ix_status s = parse_header(&p);
    if (!s) s = check_tensor_data(&p);
    if (!s) s = check_unique(&p);
    if (s) ix_errf(err, s, "%s", e.msg);
    return s;
}

/* ---- open / close --------------------------------------------------------- */

ix_status ix_gguf_open_memory(ix_gguf **out, const void *data, size_t size, ix_errbuf *err) {
    if (!out) return ix_errf(err, IX_ERR_INVALID, "ix_gguf_open_memory: out is NULL");
    *out = NULL;
    if (!data && size) return ix_errf(err, IX_ERR_INVALID, "ix_gguf_open_memory: data is NULL");
    static const uint8_t k_empty[1];
    ix_gguf *g = ix_calloc(1, sizeof *g);
    if (!g) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    g->base = data ? data : k_empty;
    g->size = size;
    ix_status s = validate(g, err);
    if (s) {
        ix_gguf_close(g);
        return s;
    }
    *out = g;
    return IX_OK;
}

ix_status ix_gguf_open(ix_gguf **out, const char *path, ix_errbuf *err) {
    if (!out) return ix_errf(err, IX_ERR_INVALID, "ix_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return ix_errf(err, IX_ERR_INVALID, "ix_gguf_open: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ix_errf(err, IX_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ix_errf(err, IX_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ix_errf(err, IX_ERR_IO, "'%s' is not a regular file", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return ix_errf(err, IX_ERR_UNSUPPORTED, "'%s' (%" PRIu64 " bytes) is too large to map", path,
                       (uint64_t)st.st_size);
    }
    ix_gguf *g = ix_calloc(1, sizeof *g);
    if (!g) {
        close(fd);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    size_t size = (size_t)st.st_size;
    static const uint8_t k_empty[1];
    g->base = k_empty; /* mmap refuses length 0; an empty file fails validation */
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            ix_free(g);
            return ix_errf(err, IX_ERR_IO, "cannot map '%s' (%zu bytes): %s", path, size, strerror(e));
        }
        g->map = m;
        g->map_len = size;
        g->base = m;
    }
    close(fd); /* the mapping keeps the file */
    g->size = size;
    ix_status s = validate(g, err);
    if (s) {
        ix_gguf_close(g);
        return s;
    }
    *out = g;
    return IX_OK;
}

void ix_gguf_close(ix_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->map_len);
    ix_free(g->kv);
    ix_free(g->kv_sorted);
    ix_free(g->tensors);
    ix_free(g->tensor_sorted);
    ix_free(g->tables);
    ix_free(g);
}

/* ---- accessors ---------------------------------------------------------- */

uint32_t ix_gguf_version(const ix_gguf *g) { return g->version; }
uint64_t ix_gguf_alignment(const ix_gguf *g) { return g->alignment; }
uint64_t ix_gguf_file_size(const ix_gguf *g) { return g->size; }
uint64_t ix_gguf_resident_bytes(const ix_gguf *g) { return g->map ? ix_resident_bytes(g->map, g->map_len) : 0; }
uint64_t ix_gguf_data_offset(const ix_gguf *g) { return g->data_offset; }
uint64_t ix_gguf_n_kv(const ix_gguf *g) { return g->n_kv; }
uint64_t ix_gguf_n_tensors(const ix_gguf *g) { return g->n_tensors; }

ix_str ix_gguf_kv_key(const ix_gguf *g, uint64_t i) {
    IX_ASSERT(i < g->n_kv);
    return (ix_str){(const char *)g->base + g->kv[i].key_off, g->kv[i].key_len};
}

static ix_gguf_arr arr_at(const ix_gguf *g, const uint8_t *p, uint64_t table) {
    return (ix_gguf_arr){.type = (ix_gguf_type)ix__rd_u32(p),
                         .n = ix__rd_u64(p + 4),
                         .data = p + 12,
                         .priv_offsets = table == IX__GGUF_NO_TABLE ? NULL : g->tables + table,
                         .priv_owner = g};
}

ix_gguf_value ix_gguf_kv_value(const ix_gguf *g, uint64_t i) {
    IX_ASSERT(i < g->n_kv);
    const ix__gguf_kv *kv = &g->kv[i];
    const uint8_t *p = g->base + kv->val_off;
    ix_gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = (ix_gguf_type)kv->type;
    if (kv->type == IX_GGUF_STRING)
        v.v.str = (ix_str){(const char *)p + 8, (size_t)ix__rd_u64(p)};
    else if (kv->type == IX_GGUF_ARRAY)
        v.v.arr = arr_at(g, p, kv->table);
    else
        ix__gguf_decode_scalar(kv->type, p, &v);
    return v;
}

/* Binary search over the sorted index; returns the entry index or -1. */
static int64_t search(const ix_gguf *g, const uint32_t *sorted, uint64_t n, const char *name, bool keys) {
    if (!name || n == 0) return -1;
    size_t len = strlen(name);
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        uint32_t e = sorted[mid];
        int c = keys ? cmp_bytes((const char *)g->base + g->kv[e].key_off, g->kv[e].key_len, name, len)
                     : cmp_bytes(g->tensors[e].name.ptr, g->tensors[e].name.len, name, len);
        if (c == 0) return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int64_t ix_gguf_find_key(const ix_gguf *g, const char *key) {
    return search(g, g->kv_sorted, g->n_kv, key, true);
}

const ix_gguf_tensor *ix_gguf_tensor_at(const ix_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const ix_gguf_tensor *ix_gguf_find_tensor(const ix_gguf *g, const char *name) {
    int64_t i = search(g, g->tensor_sorted, g->n_tensors, name, false);
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- typed lookups --------------------------------------------------------- */

static bool is_unsigned(ix_gguf_type t) {
    return t == IX_GGUF_UINT8 || t == IX_GGUF_UINT16 || t == IX_GGUF_UINT32 || t == IX_GGUF_UINT64;
}
static bool is_signed(ix_gguf_type t) {
    return t == IX_GGUF_INT8 || t == IX_GGUF_INT16 || t == IX_GGUF_INT32 || t == IX_GGUF_INT64;
}

static ix_status lookup(const ix_gguf *g, const char *key, ix_gguf_value *v, ix_errbuf *err) {
    memset(v, 0, sizeof *v); /* defined even on failure (and gcc -O3 sees it) */
    int64_t i = ix_gguf_find_key(g, key);
    if (i < 0) return ix_errf(err, IX_ERR_NOT_FOUND, "key '%.200s' not found", key ? key : "(null)");
    *v = ix_gguf_kv_value(g, (uint64_t)i);
    return IX_OK;
}

static ix_status type_err(const char *key, const ix_gguf_value *v, const char *want, ix_errbuf *err) {
    if (v->type == IX_GGUF_ARRAY)
        return ix_errf(err, IX_ERR_TYPE, "key '%.200s' has type array of %s, expected %s", key,
                       ix_gguf_type_name(v->v.arr.type), want);
    return ix_errf(err, IX_ERR_TYPE, "key '%.200s' has type %s, expected %s", key, ix_gguf_type_name(v->type),
                   want);
}

/* Fetches an integer-typed value; *neg tells whether it is below zero so each
 * caller can range-check without mixing signed and unsigned compares. */
static ix_status get_integer(const ix_gguf *g, const char *key, ix_gguf_value *v, bool *neg, const char *want,
                             ix_errbuf *err) {
    ix_status s = lookup(g, key, v, err);
    if (s) return s;
    if (is_unsigned(v->type)) {
        *neg = false;
        return IX_OK;
    }
    if (is_signed(v->type)) {
        *neg = v->v.i64 < 0;
        return IX_OK;
    }
    return type_err(key, v, want, err);
}

static ix_status range_err(const char *key, const ix_gguf_value *v, const char *want, ix_errbuf *err) {
    if (is_signed(v->type))
        return ix_errf(err, IX_ERR_RANGE, "key '%.200s' = %" PRId64 " (%s) is out of range for %s", key, v->v.i64,
                       ix_gguf_type_name(v->type), want);
    return ix_errf(err, IX_ERR_RANGE, "key '%.200s' = %" PRIu64 " (%s) is out of range for %s", key, v->v.u64,
                   ix_gguf_type_name(v->type), want);
}

ix_status ix_gguf_get_u64(const ix_gguf *g, const char *key, uint64_t *out, ix_errbuf *err) {
    ix_gguf_value v;
    bool neg = false;
    ix_status s = get_integer(g, key, &v, &neg, "an integer (u64)", err);
    if (s) return s;
    if (neg) return range_err(key, &v, "u64", err);
    *out = is_signed(v.type) ? (uint64_t)v.v.i64 : v.v.u64;
    return IX_OK;
}

ix_status ix_gguf_get_u32(const ix_gguf *g, const char *key, uint32_t *out, ix_errbuf *err) {
    ix_gguf_value v;
    bool neg = false;
    ix_status s = get_integer(g, key, &v, &neg, "an integer (u32)", err);
    if (s) return s;
    uint64_t u = is_signed(v.type) ? (uint64_t)v.v.i64 : v.v.u64;
    if (neg || u > UINT32_MAX) return range_err(key, &v, "u32", err);
    *out = (uint32_t)u;
    return IX_OK;
}

ix_status ix_gguf_get_i64(const ix_gguf *g, const char *key, int64_t *out, ix_errbuf *err) {
    ix_gguf_value v;
    bool neg = false;
    ix_status s = get_integer(g, key, &v, &neg, "an integer (i64)", err);
    if (s) return s;
    if (is_signed(v.type)) {
        *out = v.v.i64;
        return IX_OK;
    }
    if (v.v.u64 > INT64_MAX) return range_err(key, &v, "i64", err);
    *out = (int64_t)v.v.u64;
    return IX_OK;
}

ix_status ix_gguf_get_f32(const ix_gguf *g, const char *key, float *out, ix_errbuf *err) {
    ix_gguf_value v;
    ix_status s = lookup(g, key, &v, err);
    if (s) return s;
    if (v.type != IX_GGUF_FLOAT32 && v.type != IX_GGUF_FLOAT64) return type_err(key, &v, "f32 or f64", err);
    /* Converting an out-of-range finite double to float is undefined. */
    if (isfinite(v.v.f64) && fabs(v.v.f64) > FLT_MAX)
        return ix_errf(err, IX_ERR_RANGE, "key '%.200s' = %g (f64) is out of range for f32", key, v.v.f64);
    *out = (float)v.v.f64;
    return IX_OK;
}

ix_status ix_gguf_get_bool(const ix_gguf *g, const char *key, bool *out, ix_errbuf *err) {
    ix_gguf_value v;
    ix_status s = lookup(g, key, &v, err);
    if (s) return s;
    if (v.type != IX_GGUF_BOOL) return type_err(key, &v, "bool", err);
    *out = v.v.b;
    return IX_OK;
}

ix_status ix_gguf_get_str(const ix_gguf *g, const char *key, ix_str *out, ix_errbuf *err) {
    ix_gguf_value v;
    ix_status s = lookup(g, key, &v, err);
    if (s) return s;
    if (v.type != IX_GGUF_STRING) return type_err(key, &v, "string", err);
    *out = v.v.str;
    return IX_OK;
}

ix_status ix_gguf_get_arr(const ix_gguf *g, const char *key, ix_gguf_type elem_type, ix_gguf_arr *out,
                          ix_errbuf *err) {
    ix_gguf_value v;
    ix_status s = lookup(g, key, &v, err);
    if (s) return s;
    char want[48];
    if (elem_type == IX_GGUF_TYPE_COUNT)
        snprintf(want, sizeof want, "an array");
    else
        snprintf(want, sizeof want, "array of %s", ix_gguf_type_name(elem_type));
    if (v.type != IX_GGUF_ARRAY) return type_err(key, &v, want, err);
    if (elem_type != IX_GGUF_TYPE_COUNT && v.v.arr.type != elem_type) return type_err(key, &v, want, err);
    *out = v.v.arr;
    return IX_OK;
}

/* ---- array elements ------------------------------------------------------ */

static ix_gguf_value elem(const ix_gguf_arr *arr, uint64_t i) {
    size_t sz = ix__gguf_type_size(arr->type);
    IX_ASSERT(sz != 0 && i < arr->n);
    ix_gguf_value v;
    ix__gguf_decode_scalar(arr->type, (const uint8_t *)arr->data + i * sz, &v);
    return v;
}

ix_str ix_gguf_arr_str(const ix_gguf_arr *arr, uint64_t i) {
    IX_ASSERT(arr->type == IX_GGUF_STRING && i < arr->n);
    const uint8_t *p = (const uint8_t *)arr->data + arr->priv_offsets[i];
    return (ix_str){(const char *)p + 8, (size_t)ix__rd_u64(p)};
}

int64_t ix_gguf_arr_i64(const ix_gguf_arr *arr, uint64_t i) {
    ix_gguf_value v = elem(arr, i);
    if (is_signed(v.type)) return v.v.i64;
    if (is_unsigned(v.type)) return (int64_t)v.v.u64;
    IX_ASSERT(v.type == IX_GGUF_BOOL);
    return v.v.b;
}

uint64_t ix_gguf_arr_u64(const ix_gguf_arr *arr, uint64_t i) {
    ix_gguf_value v = elem(arr, i);
    if (is_signed(v.type)) return (uint64_t)v.v.i64;
    if (is_unsigned(v.type)) return v.v.u64;
    IX_ASSERT(v.type == IX_GGUF_BOOL);
    return v.v.b;
}

double ix_gguf_arr_f64(const ix_gguf_arr *arr, uint64_t i) {
    ix_gguf_value v = elem(arr, i);
    if (is_signed(v.type)) return (double)v.v.i64;
    if (is_unsigned(v.type)) return (double)v.v.u64;
    if (v.type == IX_GGUF_BOOL) return v.v.b;
    return v.v.f64;
}

ix_gguf_arr ix_gguf_arr_arr(const ix_gguf_arr *arr, uint64_t i) {
    IX_ASSERT(arr->type == IX_GGUF_ARRAY && i < arr->n);
    const uint8_t *p = (const uint8_t *)arr->data + arr->priv_offsets[2 * i];
    return arr_at(arr->priv_owner, p, arr->priv_offsets[2 * i + 1]);
}
