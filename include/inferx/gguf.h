/*
 * inferx gguf: a bounds-checked reader for GGUF v2/v3 files (mmap, zero copy)
 * and a writer.
 *
 * The reader validates the whole header when the file is opened: every count,
 * string length, array extent, tensor shape and tensor extent is checked with
 * overflow-safe arithmetic against what is really in the file. After a
 * successful open every accessor is a plain, in-bounds memory read. A file that
 * fails validation yields IX_ERR_FORMAT (or IX_ERR_UNSUPPORTED for a valid
 * file using something we do not know) and a message naming the key, tensor
 * or offset at fault.
 *
 * Ownership: strings (ix_str) and tensor data point into the mapping and stay
 * valid until ix_gguf_close(). A reader is immutable after open, so any number
 * of threads may read from it concurrently.
 */
#ifndef INFERX_GGUF_H
#define INFERX_GGUF_H

#include "inferx/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tensor element types (ggml numbering, as stored in GGUF) ---------- */
#define IX_DTYPE_TABLE(X)                                                      \
    X(F32, 0, "F32", 1, 4)                                                     \
    X(F16, 1, "F16", 1, 2)                                                     \
    X(Q4_0, 2, "Q4_0", 32, 18)                                                 \
    X(Q4_1, 3, "Q4_1", 32, 20)                                                 \
    X(Q5_0, 6, "Q5_0", 32, 22)                                                 \
    X(Q5_1, 7, "Q5_1", 32, 24)                                                 \
    X(Q8_0, 8, "Q8_0", 32, 34)                                                 \
    X(Q8_1, 9, "Q8_1", 32, 36)                                                 \
    X(Q2_K, 10, "Q2_K", 256, 84)                                               \
    X(Q3_K, 11, "Q3_K", 256, 110)                                              \
    X(Q4_K, 12, "Q4_K", 256, 144)                                              \
    X(Q5_K, 13, "Q5_K", 256, 176)                                              \
    X(Q6_K, 14, "Q6_K", 256, 210)                                              \
    X(Q8_K, 15, "Q8_K", 256, 292)                                              \
    X(IQ2_XXS, 16, "IQ2_XXS", 256, 66)                                         \
    X(IQ2_XS, 17, "IQ2_XS", 256, 74)                                           \
    X(IQ3_XXS, 18, "IQ3_XXS", 256, 98)                                         \
    X(IQ1_S, 19, "IQ1_S", 256, 50)                                             \
    X(IQ4_NL, 20, "IQ4_NL", 32, 18)                                            \
    X(IQ3_S, 21, "IQ3_S", 256, 110)                                            \
    X(IQ2_S, 22, "IQ2_S", 256, 82)                                             \
    X(IQ4_XS, 23, "IQ4_XS", 256, 136)                                          \
    X(I8, 24, "I8", 1, 1)                                                      \
    X(I16, 25, "I16", 1, 2)                                                    \
    X(I32, 26, "I32", 1, 4)                                                    \
    X(I64, 27, "I64", 1, 8)                                                    \
    X(F64, 28, "F64", 1, 8)                                                    \
    X(IQ1_M, 29, "IQ1_M", 256, 56)                                             \
    X(BF16, 30, "BF16", 1, 2)                                                  \
    X(TQ1_0, 34, "TQ1_0", 256, 54)                                             \
    X(TQ2_0, 35, "TQ2_0", 256, 66)                                             \
    X(MXFP4, 39, "MXFP4", 32, 17)

typedef enum ix_dtype {
#define IX__DTYPE_ENUM(name, code, str, blck, size) IX_DTYPE_##name = code,
    IX_DTYPE_TABLE(IX__DTYPE_ENUM)
#undef IX__DTYPE_ENUM
} ix_dtype;

/* Name ("Q4_0"), or NULL for a code we do not know. */
const char *ix_dtype_name(ix_dtype t);
/* Elements per block and bytes per block; 0 for an unknown code. */
uint32_t ix_dtype_block_size(ix_dtype t);
uint32_t ix_dtype_type_size(ix_dtype t);
bool ix_dtype_known(ix_dtype t);
/* Bytes of a row of n elements; false if n is not a whole number of blocks,
 * the type is unknown or the size overflows. */
bool ix_dtype_row_bytes(ix_dtype t, uint64_t n, uint64_t *out_bytes);

/* ---- metadata value types ----------------------------------------------- */
typedef enum ix_gguf_type {
    IX_GGUF_UINT8 = 0,
    IX_GGUF_INT8 = 1,
    IX_GGUF_UINT16 = 2,
    IX_GGUF_INT16 = 3,
    IX_GGUF_UINT32 = 4,
    IX_GGUF_INT32 = 5,
    IX_GGUF_FLOAT32 = 6,
    IX_GGUF_BOOL = 7,
    IX_GGUF_STRING = 8,
    IX_GGUF_ARRAY = 9,
    IX_GGUF_UINT64 = 10,
    IX_GGUF_INT64 = 11,
    IX_GGUF_FLOAT64 = 12,
    IX_GGUF_TYPE_COUNT
} ix_gguf_type;

const char *ix_gguf_type_name(ix_gguf_type t); /* "u32", "string", "array", ... */

#define IX_GGUF_MAX_DIMS 4
#define IX_GGUF_DEFAULT_ALIGNMENT 32
/* Nesting limit for arrays of arrays (a hostile file cannot recurse deeply). */
#define IX_GGUF_MAX_ARRAY_DEPTH 8

typedef struct ix_gguf ix_gguf;

/* An array value. Elements of fixed-size types lie at `data` little-endian and
 * possibly unaligned: read them with the ix_gguf_arr_* accessors. */
typedef struct ix_gguf_arr {
    ix_gguf_type type; /* element type */
    uint64_t n;        /* element count */
    const void *data;  /* first element in the mapping */
    /* private: element offsets of string arrays and arrays of arrays (at any
     * depth; NULL for fixed-size elements or n == 0), and the reader */
    const uint64_t *priv_offsets;
    const ix_gguf *priv_owner;
} ix_gguf_arr;

/* A metadata value (scalars widened; strings and arrays point into the map). */
typedef struct ix_gguf_value {
    ix_gguf_type type;
    union {
        uint64_t u64; /* UINT8/16/32/64 */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        bool b;       /* BOOL */
        ix_str str;   /* STRING */
        ix_gguf_arr arr;
    } v;
} ix_gguf_value;

/* A validated tensor: 1 <= n_dims <= 4, every ne >= 1 (empty tensors are
 * refused), n_elements <= INT64_MAX, ne[0] a whole number of blocks of a type
 * we know, and data inside the data section without overlapping another
 * tensor. */
typedef struct ix_gguf_tensor {
    ix_str name;
    uint32_t n_dims;
    int64_t ne[IX_GGUF_MAX_DIMS]; /* fastest-varying first; unused dims are 1 */
    ix_dtype type;
    uint64_t n_elements;
    uint64_t offset;  /* from the start of the data section */
    uint64_t n_bytes;
    /* In the mapping, at a multiple of the file's alignment from the start of
     * the file: aligned in memory too for ix_gguf_open (page-aligned map) when
     * the alignment is at most the page size; for ix_gguf_open_memory only as
     * far as the buffer itself is aligned. */
    const void *data;
} ix_gguf_tensor;

/* ---- reader ---------------------------------------------------------- */
/* Maps and validates a file. On failure *out is NULL and err says why:
 * IX_ERR_IO (cannot open/map; the message names the path), IX_ERR_FORMAT
 * (malformed, truncated), IX_ERR_UNSUPPORTED (v1, big-endian, unknown tensor
 * type), IX_ERR_NOMEM. Format messages name the key (#index and name), tensor,
 * array element and file offset at fault, not the path. The file must not be
 * truncated while mapped (that would be SIGBUS, as for any mmap reader). */
ix_status ix_gguf_open(ix_gguf **out, const char *path, ix_errbuf *err);
/* Validates a file already in memory (tests, fuzzing). The buffer is borrowed:
 * it must outlive the reader and is not copied. */
ix_status ix_gguf_open_memory(ix_gguf **out, const void *data, size_t size, ix_errbuf *err);
void ix_gguf_close(ix_gguf *g); /* NULL is a no-op */

uint32_t ix_gguf_version(const ix_gguf *g);
uint64_t ix_gguf_alignment(const ix_gguf *g);
uint64_t ix_gguf_file_size(const ix_gguf *g);
/* Bytes of the file's mapping resident in this process (ix_resident_bytes):
 * the pages read and not dropped; 0 for a buffer opened with
 * ix_gguf_open_memory (the caller owns that memory). Any thread. */
uint64_t ix_gguf_resident_bytes(const ix_gguf *g);
/* Start of the tensor data section: the end of the tensor infos rounded up to
 * the alignment. May exceed the file size when there are no tensors (a
 * vocab-only file may end right after its header). */
uint64_t ix_gguf_data_offset(const ix_gguf *g);

/* Metadata: by index (file order; i < n_kv is the caller's duty, IX_ASSERT) or
 * by key. Keys are unique (duplicates are a format error), 1..65535 bytes,
 * any bytes (a key holding a NUL cannot be found by ix_gguf_find_key). Lookups
 * by key or tensor name are binary searches over an index built at open. */
uint64_t ix_gguf_n_kv(const ix_gguf *g);
ix_str ix_gguf_kv_key(const ix_gguf *g, uint64_t i);
ix_gguf_value ix_gguf_kv_value(const ix_gguf *g, uint64_t i);
/* Index of key, or -1. */
int64_t ix_gguf_find_key(const ix_gguf *g, const char *key);

/* Typed lookups. IX_ERR_NOT_FOUND if absent, IX_ERR_TYPE if the stored type
 * cannot represent the request (any integer type converts when the value fits,
 * else IX_ERR_RANGE; floats accept float32/64; bools only bool). On error,
 * err (may be NULL) names the key and the stored type. */
ix_status ix_gguf_get_u32(const ix_gguf *g, const char *key, uint32_t *out, ix_errbuf *err);
ix_status ix_gguf_get_u64(const ix_gguf *g, const char *key, uint64_t *out, ix_errbuf *err);
ix_status ix_gguf_get_i64(const ix_gguf *g, const char *key, int64_t *out, ix_errbuf *err);
ix_status ix_gguf_get_f32(const ix_gguf *g, const char *key, float *out, ix_errbuf *err);
ix_status ix_gguf_get_bool(const ix_gguf *g, const char *key, bool *out, ix_errbuf *err);
ix_status ix_gguf_get_str(const ix_gguf *g, const char *key, ix_str *out, ix_errbuf *err);
/* elem_type: required element type, or IX_GGUF_TYPE_COUNT for any. */
ix_status ix_gguf_get_arr(const ix_gguf *g, const char *key, ix_gguf_type elem_type,
                          ix_gguf_arr *out, ix_errbuf *err);

/* Array element accessors; i < arr->n and a fitting element type are the
 * caller's duty (IX_ASSERT). O(1) for every element type. */
ix_str ix_gguf_arr_str(const ix_gguf_arr *arr, uint64_t i);
/* Integer and bool elements widened (i64/u64: as C converts, so a u64 above
 * INT64_MAX or a negative value read as u64 wraps; use typed lookups where
 * range matters); f64 also takes float elements. */
int64_t ix_gguf_arr_i64(const ix_gguf_arr *arr, uint64_t i);
uint64_t ix_gguf_arr_u64(const ix_gguf_arr *arr, uint64_t i);
double ix_gguf_arr_f64(const ix_gguf_arr *arr, uint64_t i);
/* Element i of an array of arrays. */
ix_gguf_arr ix_gguf_arr_arr(const ix_gguf_arr *arr, uint64_t i);

/* Tensors, in file order; tensor_at returns NULL when i >= n_tensors. */
uint64_t ix_gguf_n_tensors(const ix_gguf *g);
const ix_gguf_tensor *ix_gguf_tensor_at(const ix_gguf *g, uint64_t i);
const ix_gguf_tensor *ix_gguf_find_tensor(const ix_gguf *g, const char *name);

/* ---- writer -------------------------------------------------------------
 * Collects metadata and tensors in memory (tensor data is borrowed until
 * ix_gguf_writer_write returns) and writes a GGUF v3 file. Keys are unique:
 * setting an existing key replaces its value. Not thread-safe. */
typedef struct ix_gguf_writer ix_gguf_writer;

ix_gguf_writer *ix_gguf_writer_create(void); /* NULL on out of memory */
void ix_gguf_writer_destroy(ix_gguf_writer *w);
const char *ix_gguf_writer_errmsg(const ix_gguf_writer *w);

ix_status ix_gguf_writer_set_u32(ix_gguf_writer *w, const char *key, uint32_t v);
ix_status ix_gguf_writer_set_i32(ix_gguf_writer *w, const char *key, int32_t v);
ix_status ix_gguf_writer_set_u64(ix_gguf_writer *w, const char *key, uint64_t v);
ix_status ix_gguf_writer_set_f32(ix_gguf_writer *w, const char *key, float v);
ix_status ix_gguf_writer_set_bool(ix_gguf_writer *w, const char *key, bool v);
ix_status ix_gguf_writer_set_str(ix_gguf_writer *w, const char *key, const char *v);
/* Any scalar type: value points at one host value of the matching C type
 * (uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
 * uint64_t, int64_t, double). IX_ERR_INVALID for string/array types. */
ix_status ix_gguf_writer_set_scalar(ix_gguf_writer *w, const char *key, ix_gguf_type type,
                                    const void *value);
/* Array of fixed-size elements (n * element size bytes, little-endian; bools
 * must be 0 or 1). */
ix_status ix_gguf_writer_set_arr(ix_gguf_writer *w, const char *key, ix_gguf_type elem_type,
                                 const void *data, uint64_t n);
ix_status ix_gguf_writer_set_arr_str(ix_gguf_writer *w, const char *key, const ix_str *v,
                                     uint64_t n);
/* Copies key i of a reader, whatever its type (nested arrays included). */
ix_status ix_gguf_writer_copy_kv(ix_gguf_writer *w, const ix_gguf *src, uint64_t i);
/* Adds a tensor; data (n_bytes as implied by type and shape) is borrowed. */
ix_status ix_gguf_writer_add_tensor(ix_gguf_writer *w, const char *name, ix_dtype type,
                                    uint32_t n_dims, const int64_t *ne, const void *data);
/* Writes the file (to path.tmp, then renamed, so a failure leaves no partial
 * file under the final name). Alignment: general.alignment if set (it must be
 * a u32 power of two, checked when set), else 32. Each tensor's data is padded
 * with zeros to the alignment; a file without tensors ends at its header.
 * Every function returns IX_ERR_INVALID for bad arguments (empty or over-long
 * key or name, duplicate tensor name, bad shape or type) with the detail in
 * ix_gguf_writer_errmsg. */
ix_status ix_gguf_writer_write(ix_gguf_writer *w, const char *path);
/* Writes to a memory buffer owned by the caller afterwards (ix_free). */
ix_status ix_gguf_writer_write_memory(ix_gguf_writer *w, void **out, size_t *out_size);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_GGUF_H */
