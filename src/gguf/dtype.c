/*
 * gguf type tables: tensor element types (generated from IX_DTYPE_TABLE) and
 * metadata value types (names, serialized sizes, scalar decoding). Both the
 * reader and the writer size things through these, so a type's layout is
 * written down exactly once.
 */
#include "gguf/gguf_int.h"

#include <string.h>

typedef struct dtype_info {
    const char *name; /* NULL: a code ggml never used or has retired */
    uint32_t block_size, type_size;
} dtype_info;

/* Indexed by type code. The codes are sparse (retired ones leave gaps), so the
 * table is sized past the largest code and gaps stay zero (a new row with a
 * code >= 64 fails to compile here rather than misbehave). */
static const dtype_info k_dtypes[64] = {
#define IX__DTYPE_ROW(name, code, str, blck, size) [code] = {str, blck, size},
    IX_DTYPE_TABLE(IX__DTYPE_ROW)
#undef IX__DTYPE_ROW
};

static const dtype_info *dtype(ix_dtype t) {
    /* The enum may arrive holding any code read from a file. */
    unsigned code = (unsigned)t;
    if (code >= IX_ARRAY_LEN(k_dtypes) || !k_dtypes[code].name) return NULL;
    return &k_dtypes[code];
}

const char *ix_dtype_name(ix_dtype t) {
    const dtype_info *d = dtype(t);
    return d ? d->name : NULL;
}

uint32_t ix_dtype_block_size(ix_dtype t) {
    const dtype_info *d = dtype(t);
    return d ? d->block_size : 0;
}

uint32_t ix_dtype_type_size(ix_dtype t) {
    const dtype_info *d = dtype(t);
    return d ? d->type_size : 0;
}

bool ix_dtype_known(ix_dtype t) { return dtype(t) != NULL; }

bool ix_dtype_row_bytes(ix_dtype t, uint64_t n, uint64_t *out_bytes) {
    const dtype_info *d = dtype(t);
    if (!d || n % d->block_size != 0) return false;
    return !ix_mul_overflow_u64(n / d->block_size, d->type_size, out_bytes);
}

/* ---- metadata value types ---------------------------------------------- */

static const struct {
    const char *name;
    uint8_t size; /* serialized bytes; 0 for variable-size types */
} k_types[IX_GGUF_TYPE_COUNT] = {
    [IX_GGUF_UINT8] = {"u8", 1},     [IX_GGUF_INT8] = {"i8", 1},
    [IX_GGUF_UINT16] = {"u16", 2},   [IX_GGUF_INT16] = {"i16", 2},
    [IX_GGUF_UINT32] = {"u32", 4},   [IX_GGUF_INT32] = {"i32", 4},
    [IX_GGUF_FLOAT32] = {"f32", 4},  [IX_GGUF_BOOL] = {"bool", 1},
    [IX_GGUF_STRING] = {"string", 0}, [IX_GGUF_ARRAY] = {"array", 0},
    [IX_GGUF_UINT64] = {"u64", 8},   [IX_GGUF_INT64] = {"i64", 8},
    [IX_GGUF_FLOAT64] = {"f64", 8},
};

const char *ix_gguf_type_name(ix_gguf_type t) {
    unsigned code = (unsigned)t;
    return code < IX_GGUF_TYPE_COUNT ? k_types[code].name : "unknown";
}

size_t ix__gguf_type_size(uint32_t t) { return t < IX_GGUF_TYPE_COUNT ? k_types[t].size : 0; }

void ix__gguf_decode_scalar(uint32_t t, const uint8_t *p, ix_gguf_value *v) {
    v->type = (ix_gguf_type)t;
    switch (t) {
    case IX_GGUF_UINT8: v->v.u64 = p[0]; break;
    case IX_GGUF_INT8: v->v.i64 = (int8_t)p[0]; break;
    case IX_GGUF_UINT16: v->v.u64 = (uint16_t)(p[0] | p[1] << 8); break;
    case IX_GGUF_INT16: v->v.i64 = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case IX_GGUF_UINT32: v->v.u64 = ix__rd_u32(p); break;
    case IX_GGUF_INT32: v->v.i64 = (int32_t)ix__rd_u32(p); break;
    case IX_GGUF_UINT64: v->v.u64 = ix__rd_u64(p); break;
    case IX_GGUF_INT64: v->v.i64 = (int64_t)ix__rd_u64(p); break;
    case IX_GGUF_BOOL: v->v.b = p[0] != 0; break;
    case IX_GGUF_FLOAT32: {
        uint32_t bits = ix__rd_u32(p);
        float f;
        memcpy(&f, &bits, sizeof f);
        v->v.f64 = f;
        break;
    }
    case IX_GGUF_FLOAT64: {
        uint64_t bits = ix__rd_u64(p);
        memcpy(&v->v.f64, &bits, sizeof bits);
        break;
    }
    default: IX_ASSERT(!"not a scalar type");
    }
}
