/*
 * The KV element types (core.h): one row each, read by the KV manager for
 * block sizes and by the attention kernels and CLI for names.
 */
#include <string.h>

#include "inferx/core.h"

static const struct {
    const char *name;
    uint32_t block; /* values per block */
    uint32_t bytes; /* bytes per block */
    uint32_t tail;  /* bytes of a row's closing 16-value block (block types) */
} g_kv_dtypes[IX_KV_DTYPE_COUNT] = {
    [IX_KV_F32] = {"f32", 1, 4, 0},
    [IX_KV_F16] = {"f16", 1, 2, 0},
    [IX_KV_BF16] = {"bf16", 1, 2, 0},
    [IX_KV_Q8_0] = {"q8_0", 32, 34, 18},
    [IX_KV_FP8_E4M3] = {"fp8_e4m3", 32, 34, 18},
    [IX_KV_Q4_0] = {"q4_0", 32, 18, 10},
};

const char *ix_kv_dtype_name(ix_kv_dtype dtype) {
    return (unsigned)dtype < IX_KV_DTYPE_COUNT ? g_kv_dtypes[dtype].name : "?";
}

bool ix_kv_dtype_parse(const char *s, ix_kv_dtype *out) {
    for (unsigned i = 0; s && i < IX_KV_DTYPE_COUNT; i++)
        if (!strcmp(s, g_kv_dtypes[i].name)) {
            *out = (ix_kv_dtype)i;
            return true;
        }
    return false;
}

const char *ix_kv_dtype_names(void) {
    return "f16|bf16|q8_0|fp8_e4m3|q4_0|f32";
}

uint32_t ix_kv_dtype_block(ix_kv_dtype dtype) {
    return (unsigned)dtype < IX_KV_DTYPE_COUNT ? g_kv_dtypes[dtype].block : 0;
}

size_t ix_kv_dtype_row_bytes(ix_kv_dtype dtype, size_t n) {
    if ((unsigned)dtype >= IX_KV_DTYPE_COUNT) return 0;
    uint32_t blk = g_kv_dtypes[dtype].block;
    if (blk > 1 && n % (blk / 2)) return 0; /* whole blocks, then at most one half block */
    uint64_t r;
    if (ix_mul_overflow_u64(n / blk, g_kv_dtypes[dtype].bytes, &r) ||
        ix_add_overflow_u64(r, n % blk ? g_kv_dtypes[dtype].tail : 0, &r) || r > SIZE_MAX)
        return 0;
    return (size_t)r;
}
