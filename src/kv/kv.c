/*
 * The ix_kv handle: parameter checks, the pool layout (strides that kernels
 * index with), data pointers, the statistics snapshot and ix_kv_check, the
 * self-check that tests run after every operation.
 */
#include "kv_int.h"

#include <string.h>

size_t ix_kv_dtype_size(ix_kv_dtype dtype) {
    return ix_kv_dtype_block(dtype) == 1 ? ix_kv_dtype_row_bytes(dtype, 1) : 0;
}

ix_kv_params ix_kv_default_params(void) {
    ix_kv_params p;
    memset(&p, 0, sizeof p);
    p.dtype = IX_KV_F16;
    p.block_size = 16;
    p.enable_prefix_cache = true;
    return p;
}

/* Largest pool: ids are int32 and the bucket count a power of two above it. */
#define KV_MAX_BLOCKS (INT32_C(1) << 30)

static size_t round_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

/* Fills kv->lay from the parameters, checking every product for overflow. */
static ix_status plan_layout(const ix_kv_params *p, ix_kv_layout *lay, ix_errbuf *err) {
    memset(lay, 0, sizeof *lay);
    uint64_t slice, block;
    lay->elem_bytes = ix_kv_dtype_size(p->dtype);
    slice = ix_kv_dtype_row_bytes(p->dtype, (size_t)p->head_dim);
    if (slice == 0 || ix_mul_overflow_u64(slice, (uint64_t)p->block_size, &slice) ||
        ix_mul_overflow_u64(slice, (uint64_t)p->n_kv_head, &slice) || slice > SIZE_MAX / 4)
        return ix_errf(err, IX_ERR_RANGE, "kv: one block slice overflows");
    slice = round_up((size_t)slice, 64); /* every slice starts on a cache line */
    if (ix_mul_overflow_u64(slice, 2 * (uint64_t)p->n_layer, &block) || block > SIZE_MAX / 2)
        return ix_errf(err, IX_ERR_RANGE, "kv: one block overflows");
    lay->dtype = p->dtype;
    lay->n_layer = p->n_layer;
    lay->n_kv_head = p->n_kv_head;
    lay->head_dim = p->head_dim;
    lay->block_size = p->block_size;
    lay->token_stride_bytes = ix_kv_dtype_row_bytes(p->dtype, (size_t)p->head_dim);
    lay->head_stride_bytes = lay->token_stride_bytes * (size_t)p->block_size;
    lay->v_offset_bytes = (size_t)slice;
    lay->layer_stride_bytes = 2 * (size_t)slice;
    lay->block_stride_bytes = (size_t)block;
    lay->scale_offset_bytes = 0;
    return IX_OK;
}

static ix_status check_params(const ix_kv_params *p, ix_errbuf *err) {
    if (p->n_layer <= 0 || p->n_kv_head <= 0 || p->head_dim <= 0)
        return ix_errf(err, IX_ERR_INVALID,
                       "kv: model shape not set (n_layer=%d n_kv_head=%d head_dim=%d)",
                       (int)p->n_layer, (int)p->n_kv_head, (int)p->head_dim);
    if ((unsigned)p->dtype >= IX_KV_DTYPE_COUNT)
        return ix_errf(err, IX_ERR_INVALID, "kv: unknown dtype %d", (int)p->dtype);
    if (p->head_dim > 0 && ix_kv_dtype_block(p->dtype) > 1 && p->head_dim % 16)
        return ix_errf(err, IX_ERR_UNSUPPORTED,
                       "kv: dtype %s needs head_dim a multiple of 16 (blocks of 32 values and a "
                       "closing one of 16), not %d",
                       ix_kv_dtype_name(p->dtype), (int)p->head_dim);
    if (p->block_size < 1 || p->block_size > 4096)
        return ix_errf(err, IX_ERR_RANGE, "kv: block_size %d outside 1..4096", (int)p->block_size);
    if (p->n_blocks < 0 || p->n_swap_blocks < 0 || p->sliding_window < 0 || p->max_seq_len < 0)
        return ix_errf(err, IX_ERR_INVALID,
                       "kv: negative n_blocks, n_swap_blocks, "
                       "sliding_window or max_seq_len");
    if (p->n_blocks == 0 && p->mem_bytes == 0)
        return ix_errf(err, IX_ERR_INVALID, "kv: set n_blocks or mem_bytes");
    return IX_OK;
}

ix_status ix_kv_create(const ix_kv_params *params, ix_kv **out, ix_errbuf *err) {
    if (out) *out = NULL;
    if (!params || !out) return ix_errf(err, IX_ERR_INVALID, "kv: NULL argument");
    ix_status st = check_params(params, err);
    if (st != IX_OK) return st;
    ix_kv_layout lay;
    st = plan_layout(params, &lay, err);
    if (st != IX_OK) return st;
    int64_t n = params->n_blocks > 0 ? params->n_blocks
                                     : (int64_t)(params->mem_bytes / lay.block_stride_bytes);
    if (n < 1)
        return ix_errf(err, IX_ERR_RANGE, "kv: %zu bytes hold no block of %zu bytes",
                       params->mem_bytes, lay.block_stride_bytes);
    if (n > KV_MAX_BLOCKS || params->n_swap_blocks > KV_MAX_BLOCKS ||
        (uint64_t)n > SIZE_MAX / lay.block_stride_bytes ||
        (uint64_t)params->n_swap_blocks > SIZE_MAX / lay.block_stride_bytes)
        return ix_errf(err, IX_ERR_RANGE, "kv: %lld blocks of %zu bytes are too many", (long long)n,
                       lay.block_stride_bytes);

    ix_kv *kv = ix_calloc(1, sizeof *kv);
    if (!kv) return ix_errf(err, IX_ERR_NOMEM, "kv: out of memory");
    kv->p = *params;
    kv->lay = lay;
    kv->n_blocks = (int32_t)n;
    kv->lay.n_blocks = kv->n_blocks;
    kv->n_swap = (int32_t)params->n_swap_blocks;
    kv->hash = params->hash_fn ? params->hash_fn : ix__kv_default_hash;
    kv->next_cid = 1;
    kv->seq_unused = KV_NIL;
    uint32_t nb = 16;
    while (nb < (uint32_t)n)
        nb *= 2;
    kv->bucket_mask = nb - 1;
    kv->buckets = ix_malloc((size_t)nb * sizeof(int32_t));
    if (!kv->buckets || ix__kv_pool_init(kv) != IX_OK) {
        ix_kv_destroy(kv);
        return ix_errf(err, IX_ERR_NOMEM, "kv: out of memory for %lld blocks of %zu bytes",
                       (long long)n, lay.block_stride_bytes);
    }
    memset(kv->buckets, 0xff, (size_t)nb * sizeof(int32_t)); /* all KV_NIL */
    *out = kv;
    return IX_OK;
}

void ix_kv_destroy(ix_kv *kv) {
    if (!kv) return;
    ix__kv_seqs_free(kv);
    ix__kv_sessions_free(kv);
    ix__kv_pool_free(kv);
    ix_free(kv->buckets);
    ix_free(kv);
}

const char *ix_kv_errmsg(const ix_kv *kv) {
    return kv ? kv->err.msg : "";
}

void ix_kv_get_layout(const ix_kv *kv, ix_kv_layout *out) {
    if (!out) return;
    if (!kv) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = kv->lay;
}

void ix_kv_set_copy_hook(ix_kv *kv, ix_kv_copy_fn fn, void *user) {
    kv->copy_hook = fn;
    kv->copy_user = user;
}

void *ix_kv_data(ix_kv *kv) {
    return kv ? kv->data : NULL;
}

static void *slice(ix_kv *kv, int32_t layer, int32_t block, size_t extra) {
    if (!kv || layer < 0 || layer >= kv->lay.n_layer || block < 0 || block >= kv->n_blocks)
        return NULL;
    return kv__block_data(kv, block) + (size_t)layer * kv->lay.layer_stride_bytes + extra;
}

void *ix_kv_block_k(ix_kv *kv, int32_t layer, int32_t block) {
    return slice(kv, layer, block, 0);
}

void *ix_kv_block_v(ix_kv *kv, int32_t layer, int32_t block) {
    return slice(kv, layer, block, kv ? kv->lay.v_offset_bytes : 0);
}

/* Token slots of used blocks that hold a token. Only the last block of a
 * sequence can be partial; a block is full if any holder has it before its
 * last block (ref above the number of holders ending in it), else it holds
 * as many tokens as the fullest holder ending in it. scratch_a counts holders
 * ending in a block, scratch_b keeps their largest fill; both are zeroed again. */
static int64_t slots_used(ix_kv *kv) {
    int32_t bs = kv->p.block_size;
    int64_t missing = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (int32_t i = 0; i < kv->seq_cap; i++) {
            const kv_seq *s = &kv->seqs[i];
            if (s->state != KV_SEQ_ACTIVE || s->n_tokens % bs == 0) continue;
            int32_t b = s->table[s->n_tokens / bs], fill = s->n_tokens % bs;
            if (pass == 0) {
                kv->scratch_a[b]++;
                if (fill > kv->scratch_b[b]) kv->scratch_b[b] = fill;
            } else if (pass == 1) {
                if (kv->scratch_a[b] > 0 && kv->scratch_a[b] == kv->blocks[b].ref)
                    missing += bs - kv->scratch_b[b];
                kv->scratch_a[b] = 0; /* count each block once */
            } else {
                kv->scratch_b[b] = 0;
            }
        }
    }
    return (int64_t)kv->n_used * bs - missing;
}

uint64_t ix_kv_pool_resident_bytes(const ix_kv *kv) {
    return ix_resident_bytes(kv->data, (size_t)kv->n_blocks * kv->lay.block_stride_bytes);
}

void ix_kv_get_stats(ix_kv *kv, ix_kv_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!kv) return;
    out->n_blocks_total = kv->n_blocks;
    out->n_blocks_used = kv->n_used;
    out->n_blocks_cached = kv->n_cached;
    out->n_blocks_evictable = kv->n_evictable;
    out->n_blocks_free = kv->n_free;
    out->n_slots_allocated = (int64_t)kv->n_used * kv->p.block_size;
    out->n_slots_used = slots_used(kv);
    out->utilization = out->n_slots_allocated > 0
                           ? (double)out->n_slots_used / (double)out->n_slots_allocated
                           : 1.0;
    out->n_seqs = kv->n_seqs;
    out->n_seqs_swapped = kv->n_seqs_swapped;
    out->prefix_queried_tokens = kv->prefix_queried;
    out->prefix_hit_tokens = kv->prefix_hit;
    out->n_forks = kv->n_forks;
    out->n_cow_copies = kv->n_cow;
    out->n_evictions = kv->n_evictions;
    out->n_swap_blocks_total = kv->n_swap;
    out->n_swap_blocks_used = kv->n_swap - kv->n_swap_free;
    out->n_blocks_swapped_out = kv->n_swapped_out;
    out->n_blocks_swapped_in = kv->n_swapped_in;
    out->pool_bytes = (size_t)kv->n_blocks * kv->lay.block_stride_bytes;
    out->swap_bytes = (size_t)kv->n_swap * kv->lay.block_stride_bytes;
}

ix_status ix_kv_get_block_info(const ix_kv *kv, int32_t block, ix_kv_block_info *out) {
    if (!kv || !out || block < 0 || block >= kv->n_blocks) return IX_ERR_INVALID;
    const kv_block *blk = &kv->blocks[block];
    out->ref = blk->ref;
    out->cached = blk->cid != 0;
    out->free = blk->ref == 0 && blk->cid == 0;
    out->evictable = blk->ref == 0 && blk->cid != 0;
    out->ns = blk->cid != 0 ? blk->ns : 0;
    out->cache_id = blk->cid;
    out->tokens = kv__block_tokens(kv, block);
    return IX_OK;
}

/* ---- self-check ------------------------------------------------------------ */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            st = ix_errf(&kv->err, IX_ERR_INTERNAL, __VA_ARGS__);                                  \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

ix_status ix_kv_check(ix_kv *kv) {
    if (!kv) return IX_ERR_INVALID;
    ix_status st = IX_OK;
    int32_t n = kv->n_blocks, bs = kv->p.block_size;
    int32_t *refs = kv->scratch_a, *seen = kv->scratch_b;
    int64_t n_live = 0, n_swapped = 0, swap_held = 0;

    /* Recount references from the block tables. */
    for (int32_t i = 0; i < kv->seq_cap; i++) {
        const kv_seq *s = &kv->seqs[i];
        if (s->state == KV_SEQ_UNUSED) continue;
        n_live++;
        int32_t nb = kv__blocks_for(kv, s->n_tokens);
        CHECK(s->n_tokens >= 0 && nb <= s->cap && s->n_written >= 0 &&
                  s->n_written <= s->n_tokens && s->n_hashed >= 0 &&
                  s->n_hashed <= s->n_written / bs && s->n_released >= 0 && s->n_released <= nb,
              "seq %d: bad counters (tokens %d written %d hashed %d released %d cap %d)", (int)i,
              (int)s->n_tokens, (int)s->n_written, (int)s->n_hashed, (int)s->n_released,
              (int)s->cap);
        if (kv->p.sliding_window > 0 && s->n_released > 0)
            CHECK((int64_t)s->n_released * bs <= (int64_t)s->n_written - kv->p.sliding_window + 1,
                  "seq %d: released blocks inside the window", (int)i);
        for (int32_t j = 0; j < s->n_released; j++)
            CHECK(s->table[j] == IX_KV_NO_BLOCK, "seq %d: released entry %d holds a block", (int)i,
                  (int)j);
        if (s->state == KV_SEQ_SWAPPED) {
            n_swapped++;
            swap_held += nb - s->n_released;
            continue;
        }
        for (int32_t j = s->n_released; j < nb; j++) {
            int32_t b = s->table[j];
            CHECK(b >= 0 && b < n, "seq %d: entry %d = %d out of range", (int)i, (int)j, (int)b);
            refs[b]++;
        }
    }
    CHECK(n_live == kv->n_seqs && n_swapped == kv->n_seqs_swapped, "sequence counts drifted");
    CHECK(swap_held + kv->n_swap_free == kv->n_swap, "swap blocks not conserved");

    int64_t n_used = 0, n_cached = 0;
    for (int32_t b = 0; b < n; b++) {
        CHECK(refs[b] == kv->blocks[b].ref, "block %d: ref %d but %d table references", (int)b,
              (int)kv->blocks[b].ref, (int)refs[b]);
        n_used += kv->blocks[b].ref > 0;
        n_cached += kv->blocks[b].cid != 0;
    }
    CHECK(n_used == kv->n_used && n_cached == kv->n_cached, "used/cached counts drifted");

    /* Free stack: unreferenced, uncached, each once. seen: 1 free, 2 LRU. */
    for (int32_t k = 0; k < kv->n_free; k++) {
        int32_t b = kv->free_stack[k];
        CHECK(b >= 0 && b < n && seen[b] == 0, "free stack entry %d bad or repeated", (int)b);
        CHECK(kv->blocks[b].ref == 0 && kv->blocks[b].cid == 0,
              "free block %d is referenced or cached", (int)b);
        seen[b] = 1;
    }
    int32_t count = 0, n_pinned = 0;
    for (int list = 0; list < 2; list++) { /* anonymous, then pinned */
        int32_t prev = KV_NIL;
        for (int32_t b = list ? kv->plru_head : kv->lru_head; b != KV_NIL; b = kv->blocks[b].next) {
            CHECK(b >= 0 && b < n && seen[b] == 0 && count < n, "LRU entry %d bad or repeated", (int)b);
            CHECK(kv->blocks[b].ref == 0 && kv->blocks[b].cid != 0,
                  "LRU block %d is referenced or not cached", (int)b);
            CHECK((kv->blocks[b].pin > 0) == (list == 1), "block %d on the wrong LRU list", (int)b);
            CHECK(kv->blocks[b].prev == prev, "LRU block %d has a wrong back link", (int)b);
            seen[b] = 2;
            prev = b;
            count++;
        }
        CHECK(prev == (list ? kv->plru_tail : kv->lru_tail), "LRU list tail drifted");
    }
    CHECK(count == kv->n_evictable, "LRU list lengths drifted");
    for (int32_t b = 0; b < n; b++) {
        CHECK(kv->blocks[b].pin >= 0 && (kv->blocks[b].pin == 0 || kv->blocks[b].cid != 0),
              "block %d pinned but not cached", (int)b);
        n_pinned += kv->blocks[b].pin > 0;
    }
    CHECK(n_pinned == kv->n_pinned, "pinned count drifted");
    for (int32_t b = 0; b < n; b++)
        CHECK((kv->blocks[b].ref == 0) == (seen[b] != 0), "block %d: ref %d yet %s a free list",
              (int)b, (int)kv->blocks[b].ref, seen[b] ? "on" : "not on");
    CHECK(kv->n_free + kv->n_evictable + kv->n_used == n, "blocks not conserved");

    /* Hash chains hold exactly the cached blocks, each in its own bucket. */
    count = 0;
    for (uint32_t h = 0; h <= kv->bucket_mask; h++) {
        for (int32_t b = kv->buckets[h]; b != KV_NIL; b = kv->blocks[b].hnext) {
            CHECK(b >= 0 && b < n && count < n, "hash bucket %u: bad entry", (unsigned)h);
            CHECK(kv->blocks[b].cid != 0 && ((uint32_t)kv->blocks[b].key & kv->bucket_mask) == h,
                  "block %d: in bucket %u but uncached or misplaced", (int)b, (unsigned)h);
            CHECK(kv->blocks[b].cid < kv->next_cid && kv->blocks[b].parent_cid < kv->blocks[b].cid,
                  "block %d: cid not after its parent's", (int)b);
            count++;
        }
    }
    CHECK(count == kv->n_cached, "hash table holds %d blocks, %d cached", (int)count,
          (int)kv->n_cached);
done:
    memset(refs, 0, (size_t)n * sizeof(int32_t));
    memset(seen, 0, (size_t)n * sizeof(int32_t));
    return st;
}
