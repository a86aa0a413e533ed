/*
 * inferx kvstore: KV cache blocks on disk -- the store under the RAM pool's
 * prefix cache (the disk tier), and what keeps prefixes across restarts.
 *
 * A block is stored under its key: the model's fingerprint (weights, KV
 * layout and dtype: whoever computes K/V differently gets other keys), the
 * tenant (the prefix-cache namespace: tenants never see each other's
 * blocks, on disk as in RAM) and its chained prefix hash (the block's
 * tokens and every token before them). A file holds a header with the key,
 * the block's token ids and an XXH3 checksum of everything, then the K/V
 * bytes as the pool holds them (a quantized dtype stays quantized). A read
 * checks all of it against what the caller expects: a block whose key,
 * tokens, size or checksum disagree is never returned; it is deleted and
 * counted. Writes are atomic (a temporary file, fsync, rename): a crash
 * mid-write leaves no file under a block's name, only a temporary that the
 * next open removes.
 *
 * Layout: DIR/<model fp>/<tenant>/<2 hex of the hash>/<prefix hash>.kvb,
 * ids in hex; DIR/tmp/ holds writes in flight.
 *
 * Size: with max_bytes, the least recently used blocks are deleted past
 * it. The index of what is on disk (sizes and recency) is built by a
 * background thread at open, so opening a large store costs nothing before
 * the first request; until it is done, reads and writes work and eviction
 * waits for it.
 *
 * Threads: every function may be called from any thread (one mutex guards
 * the index; file I/O runs outside it). ix_kvstore_put_async hands the
 * write to the store's writer thread and returns at once.
 */
#ifndef INFERX_KVSTORE_H
#define INFERX_KVSTORE_H

#include "inferx/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ix_kvstore ix_kvstore;

typedef struct ix_kvstore_params {
    const char *dir;          /* created if missing */
    uint64_t max_bytes;       /* 0: unbounded; else LRU eviction past it */
    size_t max_queue_bytes;   /* put_async's queue; 0: 64 MiB (IX_FULL past it) */
} ix_kvstore_params;

ix_kvstore_params ix_kvstore_default_params(void);

typedef struct ix_kvstore_key {
    uint64_t model_fp;    /* weights + KV layout + dtype (the caller's hash) */
    uint64_t tenant;      /* prefix-cache namespace */
    uint64_t prefix_hash; /* chained hash of this block's tokens and all before */
} ix_kvstore_key;

/* Opens (creating DIR if needed) and starts the index thread and the writer
 * thread. IX_ERR_IO naming the path when DIR cannot be made or written. */
ix_status ix_kvstore_open(ix_kvstore **out, const ix_kvstore_params *p, ix_errbuf *err);
/* Finishes the queued writes, stops the threads, frees. NULL is a no-op. */
void ix_kvstore_close(ix_kvstore *s);

/* Stores a block now (atomically; an existing block of the key is
 * replaced). tokens: the block's n_tokens token ids. */
ix_status ix_kvstore_put(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens,
                         const void *data, size_t n_bytes);
/* The same from the writer thread: the data is copied and queued. IX_FULL
 * (nothing queued, counted as dropped) when the queue is over its bytes. */
ix_status ix_kvstore_put_async(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens,
                               const void *data, size_t n_bytes);
/* Waits until every queued write is on disk (tests, shutdown). */
void ix_kvstore_flush(ix_kvstore *s);

/* Reads the block of key k into data (n_bytes, which must be its size),
 * checking the key, the tokens (n_tokens ids) and the checksum. IX_OK;
 * IX_ERR_NOT_FOUND (no such block); IX_ERR_FORMAT (it was there but did not
 * check out: deleted, counted; err says which check failed). */
ix_status ix_kvstore_get(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens, void *data,
                         size_t n_bytes, ix_errbuf *err);
/* Whether a block of key k is on disk or queued for it (a stat; no checks).
 * A queued block is read from the queue by ix_kvstore_get. */
bool ix_kvstore_contains(ix_kvstore *s, const ix_kvstore_key *k);
/* Deletes the blocks of one tenant (every model), e.g. a session dropped. */
ix_status ix_kvstore_drop_tenant(ix_kvstore *s, uint64_t tenant);

/* Deletes one block (IX_ERR_NOT_FOUND when it was not there). */
ix_status ix_kvstore_remove(ix_kvstore *s, const ix_kvstore_key *k);
/* Pins (pin true) or unpins a block: the size bound never evicts a pinned
 * block (a live session's), evicting the least recent unpinned ones instead
 * (when only pinned blocks are left the store stays over its bound). Pins
 * count (two sessions sharing a block pin it twice) and may name a block not
 * written yet. IX_ERR_NOMEM when the pin could not be recorded. */
ix_status ix_kvstore_pin(ix_kvstore *s, const ix_kvstore_key *k, bool pin);
/* Read-ahead: asks the kernel to start reading the blocks of keys[0..n)
 * (posix_fadvise WILLNEED) and returns at once; stops at the first key not
 * on disk. Returns how many were asked for. */
int32_t ix_kvstore_prefetch(ix_kvstore *s, const ix_kvstore_key *keys, int32_t n);
/* Named files beside the blocks, DIR/meta/<name> (name: 1-64 of
 * [A-Za-z0-9._-], not starting with '.'; at most 256 MiB), written
 * atomically like blocks: the session index and the stored responses.
 * get_file: *data (NUL-terminated, the caller frees with ix_free) and *n;
 * IX_ERR_NOT_FOUND when there is none. */
ix_status ix_kvstore_put_file(ix_kvstore *s, const char *name, const void *data, size_t n);
ix_status ix_kvstore_get_file(ix_kvstore *s, const char *name, void **data, size_t *n);

typedef struct ix_kvstore_stats {
    uint64_t n_blocks, bytes;       /* on disk (once indexed) */
    bool indexed;                   /* the open's scan has finished */
    uint64_t hits, misses;          /* ix_kvstore_get */
    uint64_t bytes_read, bytes_written;
    uint64_t rejected;              /* failed a check: deleted */
    uint64_t evicted;               /* deleted by the size budget */
    uint64_t write_errors;          /* I/O errors writing (disk full...) */
    uint64_t dropped;               /* put_async refused: the queue was full */
    uint64_t queued_bytes;
    uint64_t prefetched;            /* blocks asked for ahead (ix_kvstore_prefetch) */
} ix_kvstore_stats;
void ix_kvstore_get_stats(ix_kvstore *s, ix_kvstore_stats *st);

/* Offline tools (inferx kv-store), on a store no process has open
 * (IX_ERR_STATE otherwise): count the block files of DIR, or also check
 * each (header, size, checksum), or also delete those that fail; and
 * delete every block. */
typedef enum ix_kvstore_check {
    IX_KVSTORE_COUNT = 0,  /* names and sizes only */
    IX_KVSTORE_VERIFY = 1, /* read and check every block */
    IX_KVSTORE_REPAIR = 2, /* and delete the bad ones */
} ix_kvstore_check;
typedef struct ix_kvstore_verify_report {
    uint64_t n_files, n_ok, n_bad, bytes, n_tmp;
    uint64_t n_models, n_tenants;
} ix_kvstore_verify_report;
ix_status ix_kvstore_verify(const char *dir, ix_kvstore_check mode, ix_kvstore_verify_report *r, ix_errbuf *err);
ix_status ix_kvstore_clear(const char *dir, uint64_t *n_deleted, ix_errbuf *err);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_KVSTORE_H */
