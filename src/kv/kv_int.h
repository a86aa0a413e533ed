/*
 * Private state of the KV cache manager, shared by the files of src/kv:
 *   kv.c     handle, parameters, layout, statistics, self-check
 *   pool.c   block allocation: free stack, LRU list of cached blocks, eviction, copy
 *   prefix.c chained block hashes, the hash table, lookup, registration
 *   seq.c    sequences: block tables, append / commit / fork / truncate, window, swap
 *
 * Every block is in exactly one of three states:
 *   used       ref > 0, in one or more block tables (cached or not)
 *   evictable  ref == 0 and cached: on the LRU list, still findable by lookups
 *   free       ref == 0 and not cached: on the free stack
 * A block may be written only when it is used by exactly one table and not cached
 * (kv__block_writable); anything else is copied first.
 */
#ifndef INFERX_KV_INT_H
#define INFERX_KV_INT_H

#include "inferx/kv.h"

#define KV_NIL (-1)

typedef struct kv_block {
    uint64_t key;        /* chained hash, while cached */
    uint64_t ns;         /* namespace, while cached */
    uint64_t cid;        /* cache id: unique per registration, 0 = not cached */
    uint64_t parent_cid; /* cid of the block before it in its prefix, 0 for the first */
    int32_t ref;         /* block-table references */
    int32_t pin;         /* sessions pinning it (while cached): its LRU list is the pinned one */
    int32_t hnext;       /* next block in the same hash bucket */
    int32_t prev, next;  /* LRU neighbours while evictable (prev = older) */
} kv_block;

/* Chain state of a committed full block of a sequence: what its successor's
 * hash and parent identity are computed from. */
typedef struct kv_link {
    uint64_t key;
    uint64_t cid; /* the cid of the cached block with this exact prefix, or 0 if none */
} kv_link;

enum { KV_SEQ_UNUSED = 0, KV_SEQ_ACTIVE = 1, KV_SEQ_SWAPPED = 2 };

typedef struct kv_seq {
    int state;
    bool hashable; /* false once a token was appended without its id */
    uint64_t ns;
    int32_t n_tokens;   /* appended slots */
    int32_t n_written;  /* committed position */
    int32_t n_hashed;   /* leading full blocks processed by the prefix cache */
    int32_t n_released; /* leading entries released by the sliding window */
    int32_t cap;        /* capacity of table and chain */
    int32_t *table; /* (cap) block ids (swap ids while swapped); in the same allocation as chain */
    kv_link *chain; /* (cap) chain state of the first n_hashed blocks */
    int32_t next_unused; /* free-id list link while UNUSED */
} kv_seq;

struct ix_kv {
    ix_kv_params p;
    ix_kv_layout lay;
    ix_errbuf err;
    ix_kv_hash_fn hash;
    ix_kv_copy_fn copy_hook; /* NULL: none (see ix_kv_set_copy_hook) */
    void *copy_user;

    /* pool */
    int32_t n_blocks;
    unsigned char *data; /* (n_blocks, block_stride_bytes), 64-byte aligned */
    int32_t *tokens;     /* (n_blocks, block_size) token id of each slot */
    kv_block *blocks;    /* (n_blocks) */
    int32_t *free_stack; /* (n_blocks) free block ids, top at n_free - 1 */
    int32_t n_free;
    int32_t lru_head, lru_tail;   /* oldest, newest evictable unpinned block */
    int32_t plru_head, plru_tail; /* the same for pinned blocks: evicted only when lru is empty */
    int32_t n_evictable;          /* on either list */
    int32_t n_pinned;             /* cached blocks with pin > 0 */
    int32_t n_used;
    int32_t n_cached;

    /* prefix cache: chained hash table, buckets (n_buckets) of block ids */
    int32_t *buckets;
    uint32_t bucket_mask;
    uint64_t next_cid;

    /* swap tier */
    int32_t n_swap;
    unsigned char *swap_data; /* (n_swap, block_stride_bytes) */
    int32_t *swap_tokens;     /* (n_swap, block_size) */
    int32_t *swap_free;       /* (n_swap) */
    int32_t n_swap_free;

    /* sequences */
    kv_seq *seqs; /* (seq_cap) */
    int32_t seq_cap;
    int32_t seq_unused; /* head of the free-id list */
    int32_t n_seqs, n_seqs_swapped;

    /* scratch for stats and check: (n_blocks) each, zero between uses */
    int32_t *scratch_a, *scratch_b;

    /* disk tier (ix_kv_attach_disk) */
    struct ix_kvstore *disk;
    uint64_t disk_fp;
    ix_kv_disk_stats dstats;

    /* sessions (session.c): (n_sessions) records, unordered */
    struct kv_session *sessions;
    int32_t n_sessions, cap_sessions;
    int64_t n_session_expired, n_session_dropped;

    /* counters */
    int64_t prefix_queried, prefix_hit;
    int64_t n_forks, n_cow, n_evictions, n_swapped_out, n_swapped_in;
};

static inline int32_t *kv__block_tokens(const ix_kv *kv, int32_t b) {
    return kv->tokens + (size_t)b * (size_t)kv->p.block_size;
}
static inline unsigned char *kv__block_data(const ix_kv *kv, int32_t b) {
    return kv->data + (size_t)b * kv->lay.block_stride_bytes;
}
static inline bool kv__block_writable(const ix_kv *kv, int32_t b) {
    return kv->blocks[b].ref == 1 && kv->blocks[b].cid == 0;
}
static inline int32_t kv__blocks_for(const ix_kv *kv, int64_t n_tokens) {
    return (int32_t)((n_tokens + kv->p.block_size - 1) / kv->p.block_size);
}

/* pool.c */
ix_status ix__kv_pool_init(ix_kv *kv);
void ix__kv_pool_free(ix_kv *kv);
/* A block with ref 1 taken from the free stack, else by evicting the oldest
 * cached block. The caller has checked ix_kv_n_available. */
int32_t ix__kv_block_alloc(ix_kv *kv);
void ix__kv_block_incref(ix_kv *kv, int32_t b);
void ix__kv_block_decref(ix_kv *kv, int32_t b);
/* Copies one block's K/V (all layers, block_stride_bytes) and token ids
 * (block_size); the pool and the swap tier share this layout. */
void ix__kv_copy_span(const ix_kv *kv, void *dst_data, int32_t *dst_tokens, const void *src_data,
                      const int32_t *src_tokens);
/* Pool block src into pool block dst. */
void ix__kv_block_copy(ix_kv *kv, int32_t dst, int32_t src);
void ix__kv_lru_unlink(ix_kv *kv, int32_t b);

/* Hands cached block b to the disk tier, if any (before its reuse); a
 * pinned block is written even when the store's queue is full. */
void ix__kv_disk_out(ix_kv *kv, int32_t b);
/* Session pins of block b (cached): moves it between the LRU lists. */
void ix__kv_block_pin(ix_kv *kv, int32_t b);
void ix__kv_block_unpin(ix_kv *kv, int32_t b);
/* Forgets cached, unreferenced block b at once (onto the free stack). */
void ix__kv_block_forget(ix_kv *kv, int32_t b);

/* session.c */
void ix__kv_sessions_free(ix_kv *kv);

/* prefix.c */
uint64_t ix__kv_default_hash(uint64_t parent_key, uint64_t ns, const int32_t *tokens,
                             int32_t n_tokens);
/* The cached block holding exactly (ns, parent_cid, tokens), or KV_NIL. */
int32_t ix__kv_cache_find(const ix_kv *kv, uint64_t key, uint64_t ns, uint64_t parent_cid,
                          const int32_t *tokens);
void ix__kv_cache_insert(ix_kv *kv, int32_t b, uint64_t key, uint64_t ns, uint64_t parent_cid);
void ix__kv_cache_remove(ix_kv *kv, int32_t b);
/* Longest chain of cached blocks for tokens (at most max_blocks): block ids and
 * chain links into out_blocks / out_links, and how many of them no sequence
 * references into n_unreferenced, each when not NULL. Returns the count. */
int32_t ix__kv_prefix_walk(const ix_kv *kv, uint64_t ns, const int32_t *tokens, int32_t max_blocks,
                           int32_t *out_blocks, kv_link *out_links, int64_t *n_unreferenced);

/* seq.c */
void ix__kv_seqs_free(ix_kv *kv);
/* The live (active or swapped) sequence with this id, or NULL. */
kv_seq *ix__kv_seq_get(const ix_kv *kv, int32_t seq);
/* Grows table and chain of s to at least n_entries (IX_ERR_NOMEM: unchanged). */
ix_status ix__kv_seq_reserve(kv_seq *s, int32_t n_entries);
/* Releases leading blocks wholly before the window of the first unwritten token. */
void ix__kv_seq_release_window(ix_kv *kv, kv_seq *s);

#endif /* INFERX_KV_INT_H */
