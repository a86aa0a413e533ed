/*
 * gguf internals shared by reader.c, writer.c and dtype.c: the reader's
 * in-memory layout, little-endian load/store helpers and the value-type size
 * table. Nothing outside src/gguf includes this.
 */
#ifndef IX_GGUF_INT_H
#define IX_GGUF_INT_H

#include "inferx/gguf.h"

#define IX__GGUF_HEADER_BYTES 24 /* magic, version, n_tensors, n_kv */
/* Keys and tensor names longer than this are a format error. GGUF caps keys
 * at 65535 bytes; we apply the same limit to tensor names. */
#define IX__GGUF_MAX_NAME_LEN 65535u
/* Marks "no element table" in an array's table slot. */
#define IX__GGUF_NO_TABLE UINT64_MAX

/* One metadata entry. Offsets are from the start of the file; the value is
 * decoded on demand from [val_off, val_end), which is also exactly the
 * serialized value the writer copies. */
typedef struct ix__gguf_kv {
    uint64_t key_off;
    uint64_t val_off, val_end;
    uint64_t table;   /* element table of a string array / array of arrays */
    uint32_t key_len; /* <= IX__GGUF_MAX_NAME_LEN */
    uint32_t type;    /* ix_gguf_type */
} ix__gguf_kv;

struct ix_gguf {
    const uint8_t *base; /* the file: mapping or borrowed buffer */
    uint64_t size;
    void *map; /* non-NULL when we own an mmap of map_len bytes */
    size_t map_len;

    uint32_t version;
    uint64_t alignment;
    uint64_t header_end;  /* first byte after the tensor infos */
    uint64_t data_offset; /* header_end rounded up to alignment */

    uint64_t n_kv;
    ix__gguf_kv *kv; /* n_kv, in file order */
    uint32_t *kv_sorted;

    uint64_t n_tensors;
    ix_gguf_tensor *tensors; /* n_tensors, in file order */
    uint32_t *tensor_sorted; /* by name */

    /* Element tables of every variable-size array, at any depth. A string
     * array of n has n entries: the offset of string i's length field from
     * arr.data. An array of arrays of n has 2n entries: element i's offset
     * from arr.data, then the index here of element i's own table (or
     * IX__GGUF_NO_TABLE). A string takes >= 8 file bytes and an array >= 12,
     * so the table holds at most 16 bytes per 12 bytes of metadata. */
    uint64_t *tables;
    uint64_t n_tables;
};

static inline uint32_t ix__rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t ix__rd_u64(const uint8_t *p) {
    return (uint64_t)ix__rd_u32(p) | (uint64_t)ix__rd_u32(p + 4) << 32;
}
static inline void ix__wr_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ix__wr_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Bytes of one serialized scalar of type t; 0 for string, array and codes we
 * do not know (their size is not fixed). */
size_t ix__gguf_type_size(uint32_t t);

/* Decodes the scalar of type t stored at p into v (widened). */
void ix__gguf_decode_scalar(uint32_t t, const uint8_t *p, ix_gguf_value *v);

#endif /* IX_GGUF_INT_H */
