/*
 * inferx kv: the paged KV cache manager.
 *
 * Owns one pool of fixed-size blocks holding K and V of every layer for
 * `block_size` consecutive token positions, the block table of every sequence,
 * reference counts (forks share blocks, copy-on-write on the first append into a
 * shared partial block), a prefix cache of full blocks keyed by chained hashes
 * and verified by their stored token ids, LRU eviction of cached blocks,
 * sliding-window release, an optional host swap tier and usage statistics.
 * It depends on inferx/core.h only, so it can be lifted into another engine.
 * docs/kv-cache.md describes the internals.
 *
 * ---- Layout of the pool (what attention kernels index) -------------------
 * One 64-byte aligned allocation, block-major:
 *
 *   pool: (n_blocks, n_layer, 2, slice)      the 2 is K then V
 *   slice = K or V of one layer in one block:
 *           (n_kv_head, block_size, head_dim) elements, padded to 64 bytes
 *
 *   address of K[layer][block][head][t][d] =
 *       data + block * block_stride_bytes + layer * layer_stride_bytes
 *            + head * head_stride_bytes + t * token_stride_bytes + d * elem_bytes
 *   V is the same address + v_offset_bytes.
 *
 * For one (layer, block, kv head) the block_size x head_dim keys are one
 * contiguous run, so the attention inner loops (over head_dim, then over the
 * tokens of a block) walk memory linearly; a whole block (all layers, K and V)
 * is one contiguous span, so copy-on-write, swap and persistence copy one span.
 * ix_kv_layout gives every stride; ix_kv_block_k/_v give slice pointers.
 * Quantized K/V (q8_0, fp8_e4m3, q4_0) keeps this shape: a token's head_dim
 * values are one row of head_dim / 32 blocks (f16 scale + codes, core.h), so
 * token_stride_bytes = ix_kv_dtype_row_bytes(dtype, head_dim) and the scales
 * travel with their codes; blocks stay opaque bytes to this module.
 *
 * ---- Life of a sequence (the engine's protocol) ---------------------------
 *   ix_kv_seq_create(kv, ns, &s);
 *   ix_kv_seq_adopt_prefix(kv, s, prompt, n, &n_cached);   // optional
 *   ix_kv_seq_append(kv, s, n - n_cached, prompt + n_cached); // slots for prefill
 *   ... forward pass writes K/V of positions [n_cached, n) via the block table ...
 *   ix_kv_seq_commit(kv, s, n);     // K/V written: full blocks enter the cache
 *   loop: append(kv, s, 1, &tok); forward; commit(kv, s, n_tokens);
 *   ix_kv_seq_free(kv, s);          // blocks return at once (cached ones to LRU)
 * A token id is given when its slot is appended (the block keeps it); the commit
 * says up to which position K/V is really written. Only then can a full block be
 * served to another request, so a block is never shared before it holds data.
 *
 * ---- Thread model ----------------------------------------------------------
 * An ix_kv is owned by one thread (the engine thread); no function here locks.
 * Between two mutating calls (anything not taking `const ix_kv *`), other
 * threads (kernel workers) may read and write K/V through pointers obtained
 * from this API, as long as the owner does not mutate meanwhile. Pointers to
 * block tables stay valid until the next mutating call on that sequence.
 * Distinct ix_kv handles are independent.
 */
#ifndef INFERX_KV_H
#define INFERX_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferx/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ix_kv ix_kv;

/* The element type of the stored K/V: ix_kv_dtype, in inferx/core.h (the
 * attention kernels read the same types). */

/* Block table entry of a block released by the sliding window. */
#define IX_KV_NO_BLOCK (-1)

/* Block hash used by the prefix cache: the key of a full block from its parent's
 * key, the namespace and its token ids. Only an index: every hit is verified
 * against the stored token ids, namespace and parent, so any function (even a
 * constant, as the tests do) gives correct results, just slower. */
typedef uint64_t (*ix_kv_hash_fn)(uint64_t parent_key, uint64_t ns, const int32_t *tokens,
                                  int32_t n_tokens);

typedef struct ix_kv_params {
    /* Model shape: required, no defaults. */
    int32_t n_layer;
    int32_t n_kv_head;
    int32_t head_dim;
    ix_kv_dtype dtype;  /* default IX_KV_F16 */
    int32_t block_size; /* tokens per block, 1..4096; default 16 */
    /* Pool size: n_blocks when > 0, else as many blocks as fit in mem_bytes
     * (K/V data only; metadata is about 64 + 4*block_size bytes per block). */
    int64_t n_blocks;
    size_t mem_bytes;
    /* Host swap tier: blocks of the same size in a second allocation; 0 = none. */
    int64_t n_swap_blocks;
    /* Tokens a position attends back to (a token at p reads p-W+1..p); blocks
     * wholly before the window of the first unwritten token are released.
     * 0 = full attention. */
    int32_t sliding_window;
    /* Longest sequence accepted by append (IX_ERR_TOO_LONG beyond); 0 = no limit
     * below the int32 range. */
    int32_t max_seq_len;
    bool enable_prefix_cache; /* default true */
    ix_kv_hash_fn hash_fn;    /* NULL = XXH3-64 chaining (the default) */
} ix_kv_params;

/* Defaults as documented above; the model shape is left zero and must be set. */
ix_kv_params ix_kv_default_params(void);

/* ---- disk tier -------------------------------------------------------------
 * With a block store attached (kvstore.h), a cached block the pool evicts is
 * handed to the store (copied and written by the store's thread) instead of
 * being lost, and ix_kv_seq_adopt_prefix goes on past the RAM hits into the
 * blocks the store holds: each is read into a new block (the store checks
 * key, tokens and checksum), registered in the RAM cache and adopted, while
 * reading a block costs less than computing its tokens (the measured read
 * time against ix_kv_set_compute_cost; no cost given: always read). A block
 * that fails its checks is recomputed. model_fp names what computes the K/V
 * (weights, layout, dtype): other fingerprints never match. The store is
 * borrowed: it must outlive the cache. Owner thread, as everything here. */
struct ix_kvstore;
ix_status ix_kv_attach_disk(ix_kv *kv, struct ix_kvstore *store, uint64_t model_fp);
/* The engine's measured prefill cost per token, for the reload decision. */
void ix_kv_set_compute_cost(ix_kv *kv, double ns_per_token);
/* Hands every cached block to the store and waits until they are written
 * (at shutdown: a restart finds them). IX_ERR_STATE without a store. */
ix_status ix_kv_persist_cached(ix_kv *kv);

typedef struct ix_kv_disk_stats {
    int64_t blocks_out;        /* evicted (or persisted) blocks handed to the store */
    int64_t blocks_out_dropped; /* the store's queue was full: lost */
    int64_t blocks_in;         /* read back into the pool */
    int64_t tokens_in;         /* their tokens: prefill not recomputed */
    int64_t reload_failed;     /* found but refused by the store's checks: recomputed */
    int64_t reload_skipped;    /* on disk, but computing was measured cheaper */
    int64_t read_ahead;        /* blocks asked of the store ahead of their read */
    double read_ns_per_block;  /* running mean of a block read (0: none yet) */
    double compute_ns_per_token; /* as last set */
} ix_kv_disk_stats;
void ix_kv_get_disk_stats(const ix_kv *kv, ix_kv_disk_stats *out);

/* ---- sessions --------------------------------------------------------------
 * A session pins the cached blocks of a conversation so that they outlive
 * anonymous prefixes: pinned blocks that no sequence uses sit on their own
 * LRU list, evicted only when the anonymous one is empty (and then handed
 * to the disk tier like any evicted block, written at once if the store's
 * queue is full). A session is named by (id, tenant): the caller's 64-bit
 * id and the tenant it belongs to; another tenant's id is never found.
 * expires_ms is wall-clock milliseconds (Unix epoch; 0: never); expiry is
 * driven by the caller's clock (ix_kv_session_expire). Owner thread. */
typedef struct ix_kv_session_info {
    int32_t n_tokens;      /* tokens of the session's full blocks */
    int32_t n_blocks;      /* its blocks */
    int32_t n_blocks_ram;  /* of which pinned in the pool */
    int32_t n_blocks_disk; /* of which in the disk tier's store */
    int64_t expires_ms;
} ix_kv_session_info;
typedef struct ix_kv_session_stats {
    int64_t n_sessions;      /* live */
    int64_t n_pinned_blocks; /* cached blocks pinned by at least one session */
    int64_t n_expired;       /* since creation */
    int64_t n_dropped;       /* deleted (ix_kv_session_drop) */
} ix_kv_session_stats;
#define IX_KV_MAX_SESSIONS 65536
/* Pins sequence seq's committed full blocks (its cached prefix) under the
 * session, replacing what the session pinned before (a conversation that
 * grew). IX_FULL when IX_KV_MAX_SESSIONS are live and this one is new;
 * IX_ERR_NOMEM. */
ix_status ix_kv_session_pin(ix_kv *kv, uint64_t id, uint64_t tenant, int32_t seq, int64_t expires_ms);
/* IX_ERR_NOT_FOUND when no live session (id, tenant). */
ix_status ix_kv_session_get(ix_kv *kv, uint64_t id, uint64_t tenant, ix_kv_session_info *out);
/* Writes the session's blocks still in the pool to the disk tier now (and
 * waits for them). IX_ERR_STATE without a store. *n_written may be NULL. */
ix_status ix_kv_session_save(ix_kv *kv, uint64_t id, uint64_t tenant, int32_t *n_written);
/* Unpins and forgets the session; its blocks that no other session pins
 * leave the pool (unless a sequence uses them) and the disk tier. */
ix_status ix_kv_session_drop(ix_kv *kv, uint64_t id, uint64_t tenant);
/* Ends every session whose expiry is <= now_ms: unpinned, their blocks
 * ordinary LRU victims (in RAM and on disk). Returns how many. */
int32_t ix_kv_session_expire(ix_kv *kv, int64_t now_ms);
void ix_kv_get_session_stats(const ix_kv *kv, ix_kv_session_stats *out);
/* The session index in the disk tier's store (a named file per model
 * fingerprint, written atomically): persist writes it; load reads it at
 * start (sessions whose blocks are then on disk only) and drops those
 * already expired at now_ms. IX_ERR_STATE without a store; load:
 * IX_ERR_FORMAT for a file that does not check out (ignored, no sessions). */
ix_status ix_kv_sessions_persist(ix_kv *kv);
ix_status ix_kv_sessions_load(ix_kv *kv, int64_t now_ms);

/* Creates a cache. On failure *out is NULL, nothing is leaked and err (may be
 * NULL) holds the reason: IX_ERR_INVALID / IX_ERR_RANGE for bad parameters,
 * IX_ERR_UNSUPPORTED for a block dtype whose block (32) does not divide
 * head_dim, IX_ERR_NOMEM. The caller owns *out.
 * Any thread (the new handle then belongs to the calling thread). */
ix_status ix_kv_create(const ix_kv_params *params, ix_kv **out, ix_errbuf *err);
/* Frees the pool, all sequences and metadata. NULL is a no-op. Owner thread. */
void ix_kv_destroy(ix_kv *kv);
/* The last error or soft-outcome message of kv; owned by kv, valid until the
 * next call on kv. Never NULL ("" when there is none; kv NULL gives ""). */
const char *ix_kv_errmsg(const ix_kv *kv);

/* Bytes of one element of a float type (f32: 4, f16 / bf16: 2); 0 for the
 * block types (see ix_kv_dtype_row_bytes in core.h) and unknown values. */
size_t ix_kv_dtype_size(ix_kv_dtype dtype);

/* ---- layout: how kernels address K/V -------------------------------------- */
typedef struct ix_kv_layout {
    ix_kv_dtype dtype;
    int32_t n_layer, n_kv_head, head_dim, block_size;
    int32_t n_blocks;
    size_t elem_bytes;         /* float types; 0 for block types */
    size_t token_stride_bytes; /* one row: ix_kv_dtype_row_bytes(dtype, head_dim) */
    size_t head_stride_bytes;  /* block_size * token_stride_bytes */
    size_t v_offset_bytes;     /* V slice = K slice + this (slice size, 64-aligned) */
    size_t layer_stride_bytes; /* 2 * v_offset_bytes */
    size_t block_stride_bytes; /* n_layer * layer_stride_bytes: one block, all layers */
    size_t scale_offset_bytes; /* 0: block types keep each scale beside its codes */
} ix_kv_layout;

/* Fills *out. Any thread once created (the layout never changes). */
void ix_kv_get_layout(const ix_kv *kv, ix_kv_layout *out);
/* Called after every copy of one block's data into another inside the pool
 * (copy-on-write of a shared or cached partial block): fn(user, dst, src) on
 * the owner thread. A tensor-parallel model shard replays the copies on the
 * other ranks' pools (docs/distributed.md). NULL fn removes it. The swap and
 * disk tiers move data without calling it. */
typedef void (*ix_kv_copy_fn)(void *user, int32_t dst, int32_t src);
void ix_kv_set_copy_hook(ix_kv *kv, ix_kv_copy_fn fn, void *user);
/* Base of the pool, (n_blocks, n_layer, 2, slice); owned by kv. */
void *ix_kv_data(ix_kv *kv);
/* K or V slice of (layer, block): (n_kv_head, block_size, head_dim) elements with
 * the strides of ix_kv_layout; owned by kv. NULL when layer or block is out of
 * range. Owner thread, or a worker between mutating calls (see thread model). */
void *ix_kv_block_k(ix_kv *kv, int32_t layer, int32_t block);
void *ix_kv_block_v(ix_kv *kv, int32_t layer, int32_t block);

/* ---- sequences --------------------------------------------------------------
 * A sequence is a small integer id, reused after ix_kv_seq_free. All of these
 * are owner-thread only and return IX_ERR_INVALID for an unknown id. */

/* New empty sequence in namespace ns (a tenant / cache_salt; blocks are shared
 * only between sequences with the same ns). IX_ERR_NOMEM leaves kv unchanged. */
ix_status ix_kv_seq_create(ix_kv *kv, uint64_t ns, int32_t *seq_out);
/* Releases the sequence; its blocks return to the pool at once, cached full
 * blocks onto the LRU list (the tail of the sequence becomes evictable before
 * its head). Works for swapped-out sequences too. */
ix_status ix_kv_seq_free(ix_kv *kv, int32_t seq);
/* New sequence sharing every block of parent (copy-on-write): same tokens,
 * namespace and written position. */
ix_status ix_kv_seq_fork(ix_kv *kv, int32_t parent, int32_t *child_out);
/* Reserves slots for n more tokens with the given ids (tokens may be NULL when
 * the prefix cache is not wanted: the sequence's blocks are then never cached).
 * A block is taken only when the last one is full; a shared or cached partial
 * last block is first copied (copy-on-write). All or nothing: IX_FULL (soft)
 * when free plus evictable blocks do not suffice, IX_ERR_TOO_LONG past
 * max_seq_len, IX_ERR_NOMEM; kv is unchanged on any of these. */
ix_status ix_kv_seq_append(ix_kv *kv, int32_t seq, int32_t n, const int32_t *tokens);
/* Says that K/V of positions [0, n_written) is in the pool. Newly full written
 * blocks enter the prefix cache (or are recognised as duplicates of a cached
 * block) and sliding-window blocks wholly out of reach are released. Values
 * not above the current written position are a no-op; above n_tokens:
 * IX_ERR_RANGE. Never allocates. */
ix_status ix_kv_seq_commit(ix_kv *kv, int32_t seq, int32_t n_written);
/* Drops tokens so that n_tokens remain (rejected speculative tokens). Blocks
 * past the new end are released. IX_ERR_RANGE if n_tokens is above the length,
 * or would need positions the sliding window already released. */
ix_status ix_kv_seq_truncate(ix_kv *kv, int32_t seq, int32_t n_tokens);

typedef struct ix_kv_seq_info {
    uint64_t ns;
    int32_t n_tokens;      /* slots appended */
    int32_t n_written;     /* committed position */
    int32_t n_blocks;      /* block table length = ceil(n_tokens / block_size) */
    int32_t n_blocks_held; /* entries not released by the window */
    bool swapped;          /* blocks live in the swap tier */
} ix_kv_seq_info;
ix_status ix_kv_seq_get_info(const ix_kv *kv, int32_t seq, ix_kv_seq_info *out);
/* Length in tokens, or -1 for an unknown id. */
int32_t ix_kv_seq_n_tokens(const ix_kv *kv, int32_t seq);
/* Block table (n_blocks entries, int32 block ids, IX_KV_NO_BLOCK for released
 * window blocks): position p lives in block table[p / block_size] at slot
 * p % block_size. Owned by kv, valid until the next mutating call on seq.
 * NULL for an unknown or swapped-out sequence (n_blocks set to 0); a live empty
 * sequence may give NULL with 0 entries. */
const int32_t *ix_kv_seq_block_table(const ix_kv *kv, int32_t seq, int32_t *n_blocks);

/* ---- admission control (scheduler) ------------------------------------------ */
/* Blocks that are free or evictable: what appends may still take. */
int64_t ix_kv_n_available(const ix_kv *kv);
/* Blocks that appending n tokens to seq would take (including a copy-on-write
 * copy); -1 for an unknown or swapped-out sequence. */
int64_t ix_kv_seq_blocks_needed(const ix_kv *kv, int32_t seq, int32_t n);
/* Whether appending n_tokens[i] to seqs[i] for every i fits at once. Sums
 * ix_kv_seq_blocks_needed, so forks sharing one partial last block are counted
 * one copy too many: an upper bound, never an underestimate. */
bool ix_kv_can_append(const ix_kv *kv, const int32_t *seqs, const int32_t *n_tokens,
                      int32_t n_seqs);

/* ---- prefix cache ------------------------------------------------------------- */
/* 64-bit namespace of a byte string (an API cache_salt), XXH3-64. Distinct
 * strings collide with probability ~2^-64; a caller that must resist chosen
 * collisions derives ns with a keyed cryptographic hash instead. */
uint64_t ix_kv_namespace_from_bytes(const void *data, size_t len);
/* Read-only: how many leading tokens of the prompt tokens[0..n) are cached in
 * namespace ns (a multiple of block_size, always < n so the last prompt token
 * is computed), and how many blocks admitting the whole prompt would take from
 * ix_kv_n_available (new blocks plus cached hits that are now evictable). Either
 * output may be NULL. Changes no statistics. */
ix_status ix_kv_prefix_match(const ix_kv *kv, uint64_t ns, const int32_t *tokens, int32_t n,
                             int32_t *n_cached, int64_t *n_blocks_needed);
/* For an empty sequence: takes the cached blocks of the longest cached prefix of
 * the prompt (as ix_kv_prefix_match) into its table; afterwards n_tokens =
 * n_written = *n_cached and the caller appends tokens[*n_cached..n). Counts
 * queried (n) and hit tokens. IX_ERR_STATE if the sequence is not empty;
 * IX_ERR_NOMEM leaves kv unchanged. Never evicts. */
ix_status ix_kv_seq_adopt_prefix(ix_kv *kv, int32_t seq, const int32_t *tokens, int32_t n,
                                 int32_t *n_cached);
/* Forgets every cached block (e.g. after the weights changed). Blocks in use
 * stay with their sequences but are no longer shared with new requests. */
void ix_kv_prefix_reset(ix_kv *kv);

/* ---- swap tier ------------------------------------------------------------------ */
/* Copies the sequence's blocks into the host swap tier and releases them from
 * the pool (preemption without recompute). IX_FULL when the swap tier lacks
 * room; IX_ERR_STATE if already swapped or no swap tier. kv unchanged on error. */
ix_status ix_kv_seq_swap_out(ix_kv *kv, int32_t seq);
/* Brings a swapped-out sequence back into pool blocks (fresh, uncached ones).
 * IX_FULL when the pool lacks n_blocks_held blocks; kv unchanged on error. */
ix_status ix_kv_seq_swap_in(ix_kv *kv, int32_t seq);

/* ---- accounting -------------------------------------------------------------------- */
typedef struct ix_kv_stats {
    int64_t n_blocks_total;
    int64_t n_blocks_used;      /* referenced by at least one sequence */
    int64_t n_blocks_cached;    /* in the prefix cache (used or not) */
    int64_t n_blocks_evictable; /* cached and unreferenced: LRU list */
    int64_t n_blocks_free;      /* unreferenced and not cached */
    int64_t n_slots_used;       /* token slots of used blocks holding a token */
    int64_t n_slots_allocated;  /* n_blocks_used * block_size */
    double utilization;         /* n_slots_used / n_slots_allocated (1 when none) */
    int64_t n_seqs;             /* live sequences, swapped ones included */
    int64_t n_seqs_swapped;
    int64_t prefix_queried_tokens; /* prompt tokens passed to adopt_prefix */
    int64_t prefix_hit_tokens;     /* of which served from the cache */
    int64_t n_forks;
    int64_t n_cow_copies; /* blocks copied on write */
    int64_t n_evictions;  /* cached blocks reused for new data */
    int64_t n_swap_blocks_total;
    int64_t n_swap_blocks_used;
    int64_t n_blocks_swapped_out, n_blocks_swapped_in;
    size_t pool_bytes; /* K/V data of the pool */
    size_t swap_bytes;
} ix_kv_stats;

/* Snapshot. O(live sequences) for the slot counts, O(1) for the rest.
 * Non-const because it uses kv's scratch space; owner thread. */
void ix_kv_get_stats(ix_kv *kv, ix_kv_stats *out);
/* Bytes of the block pool's K/V data resident in this process (pages
 * touched since creation; ix_resident_bytes). Reads only the pool's fixed
 * address range: any thread while kv lives. */
uint64_t ix_kv_pool_resident_bytes(const ix_kv *kv);

/* ---- introspection (tests, debugging) ------------------------------------------------ */
typedef struct ix_kv_block_info {
    int32_t ref;           /* block-table references */
    bool cached;           /* registered in the prefix cache */
    bool free;             /* unreferenced and not cached */
    bool evictable;        /* unreferenced and cached (on the LRU list) */
    uint64_t ns;           /* namespace, when cached */
    uint64_t cache_id;     /* unique to each entry into the cache, never reused; 0 if not cached */
    const int32_t *tokens; /* (block_size) token ids last appended into it; owned by kv */
} ix_kv_block_info;
ix_status ix_kv_get_block_info(const ix_kv *kv, int32_t block, ix_kv_block_info *out);
/* Verifies every internal invariant (reference counts against block tables,
 * free/LRU lists disjoint and complete, hash chains, sequence bounds) in
 * O(n_blocks + table entries). IX_ERR_INTERNAL with the first violation in
 * ix_kv_errmsg. Owner thread. */
ix_status ix_kv_check(ix_kv *kv);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_KV_H */
