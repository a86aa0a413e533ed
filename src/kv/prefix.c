/*
 * The prefix cache: which full blocks can be served to a new request.
 *
 * A full block's key is hash(parent key, namespace, its token ids); the first
 * block of a sequence chains from key 0. Chaining makes a block reachable only
 * through its whole prefix. The key is merely an index into a chained hash
 * table sized to the pool: a candidate is accepted only when its namespace,
 * its stored token ids and its parent's identity all match exactly. The
 * parent's identity is the parent's cid, a number unique to each registration
 * and never reused, so a stale child whose parent was evicted (and whose block
 * may since hold other data) can never be matched. By induction from the first
 * block, a hit therefore holds K/V of exactly the requested tokens in the
 * requested namespace, whatever the hash function does.
 */
#include "kv_int.h"

#include <string.h>
#include <xxhash.h>

#include "inferx/kvstore.h"

uint64_t ix__kv_default_hash(uint64_t parent_key, uint64_t ns, const int32_t *tokens,
                             int32_t n_tokens) {
    /* Two seeded passes chain (parent, ns) and then the tokens without building
     * a temporary buffer of block_size + 4 words. */
    uint64_t seed = XXH3_64bits_withSeed(&ns, sizeof ns, parent_key);
    return XXH3_64bits_withSeed(tokens, (size_t)n_tokens * sizeof(int32_t), seed);
}

uint64_t ix_kv_namespace_from_bytes(const void *data, size_t len) {
    if (!data) len = 0;
    return XXH3_64bits(data ? data : "", len);
}

static int32_t *bucket_of(const ix_kv *kv, uint64_t key) {
    return &kv->buckets[(uint32_t)key & kv->bucket_mask];
}

int32_t ix__kv_cache_find(const ix_kv *kv, uint64_t key, uint64_t ns, uint64_t parent_cid,
                          const int32_t *tokens) {
    size_t bytes = (size_t)kv->p.block_size * sizeof(int32_t);
    for (int32_t b = *bucket_of(kv, key); b != KV_NIL; b = kv->blocks[b].hnext) {
        const kv_block *blk = &kv->blocks[b];
        if (blk->key == key && blk->ns == ns && blk->parent_cid == parent_cid &&
            memcmp(kv__block_tokens(kv, b), tokens, bytes) == 0)
            return b;
    }
    return KV_NIL;
}

void ix__kv_cache_insert(ix_kv *kv, int32_t b, uint64_t key, uint64_t ns, uint64_t parent_cid) {
    kv_block *blk = &kv->blocks[b];
    IX_ASSERT(blk->cid == 0);
    blk->key = key;
    blk->ns = ns;
    blk->parent_cid = parent_cid;
    blk->cid = kv->next_cid++;
    int32_t *head = bucket_of(kv, key);
    blk->hnext = *head;
    *head = b;
    kv->n_cached++;
}

void ix__kv_cache_remove(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    IX_ASSERT(blk->cid != 0);
    int32_t *link = bucket_of(kv, blk->key);
    while (*link != b) {
        IX_ASSERT(*link != KV_NIL);
        link = &kv->blocks[*link].hnext;
    }
    *link = blk->hnext;
    blk->hnext = KV_NIL;
    blk->cid = 0;
    kv->n_cached--;
}

int32_t ix__kv_prefix_walk(const ix_kv *kv, uint64_t ns, const int32_t *tokens, int32_t max_blocks,
                           int32_t *out_blocks, kv_link *out_links, int64_t *n_unreferenced) {
    int32_t bs = kv->p.block_size;
    uint64_t key = 0, cid = 0;
    int32_t i = 0;
    if (n_unreferenced) *n_unreferenced = 0;
    for (; i < max_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        key = kv->hash(key, ns, t, bs);
        int32_t b = ix__kv_cache_find(kv, key, ns, cid, t);
        if (b == KV_NIL) break;
        cid = kv->blocks[b].cid;
        if (out_blocks) out_blocks[i] = b;
        if (out_links) out_links[i] = (kv_link){key, cid};
        if (n_unreferenced && kv->blocks[b].ref == 0) (*n_unreferenced)++;
    }
    return i;
}

/* Full blocks a prompt of n tokens may take from the cache: the last prompt
 * token must be computed so the model yields logits for the next one. */
static int32_t max_hit_blocks(const ix_kv *kv, int32_t n) {
    return n > 0 ? (n - 1) / kv->p.block_size : 0;
}

ix_status ix_kv_prefix_match(const ix_kv *kv, uint64_t ns, const int32_t *tokens, int32_t n,
                             int32_t *n_cached, int64_t *n_blocks_needed) {
    if (n_cached) *n_cached = 0;
    if (n_blocks_needed) *n_blocks_needed = 0;
    if (!kv || n < 0 || (n > 0 && !tokens)) return IX_ERR_INVALID;
    int64_t evictable_hits = 0;
    int32_t max = kv->p.enable_prefix_cache ? max_hit_blocks(kv, n) : 0;
    int32_t hits = ix__kv_prefix_walk(kv, ns, tokens, max, NULL, NULL, &evictable_hits);
    if (n_cached) *n_cached = hits * kv->p.block_size;
    if (n_blocks_needed) *n_blocks_needed = kv__blocks_for(kv, n) - hits + evictable_hits;
    return IX_OK;
}

/* ---- the disk tier ---------------------------------------------------------- */

ix_status ix_kv_attach_disk(ix_kv *kv, struct ix_kvstore *store, uint64_t model_fp) {
    if (!kv) return IX_ERR_INVALID;
    kv->disk = store;
    kv->disk_fp = model_fp;
    return IX_OK;
}

void ix_kv_set_compute_cost(ix_kv *kv, double ns_per_token) {
    if (kv && ns_per_token > 0) kv->dstats.compute_ns_per_token = ns_per_token;
}

void ix_kv_get_disk_stats(const ix_kv *kv, ix_kv_disk_stats *out) { *out = kv->dstats; }

void ix__kv_disk_out(ix_kv *kv, int32_t b) {
    if (!kv->disk) return;
    const kv_block *blk = &kv->blocks[b];
    ix_kvstore_key k = {kv->disk_fp, blk->ns, blk->key};
    if (ix_kvstore_contains(kv->disk, &k)) return; /* there already (read back, or persisted): same bytes */
    ix_status st = ix_kvstore_put_async(kv->disk, &k, kv__block_tokens(kv, b), kv->p.block_size,
                                        kv__block_data(kv, b), kv->lay.block_stride_bytes);
    if (st == IX_FULL && blk->pin) /* a session's block is never just dropped */
        st = ix_kvstore_put(kv->disk, &k, kv__block_tokens(kv, b), kv->p.block_size, kv__block_data(kv, b),
                            kv->lay.block_stride_bytes);
    if (st == IX_OK)
        kv->dstats.blocks_out++;
    else
        kv->dstats.blocks_out_dropped++;
}

ix_status ix_kv_persist_cached(ix_kv *kv) {
    if (!kv || !kv->disk) return IX_ERR_STATE;
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        const kv_block *blk = &kv->blocks[b];
        if (blk->cid == 0) continue;
        ix_kvstore_key k = {kv->disk_fp, blk->ns, blk->key};
        if (ix_kvstore_contains(kv->disk, &k)) continue; /* written before (the same bytes) */
        ix_status st = ix_kvstore_put_async(kv->disk, &k, kv__block_tokens(kv, b), kv->p.block_size,
                                            kv__block_data(kv, b), kv->lay.block_stride_bytes);
        if (st == IX_FULL) /* the queue is full: write this one here */
            st = ix_kvstore_put(kv->disk, &k, kv__block_tokens(kv, b), kv->p.block_size, kv__block_data(kv, b),
                                kv->lay.block_stride_bytes);
        if (st == IX_OK) kv->dstats.blocks_out++;
    }
    ix_kvstore_flush(kv->disk);
    return IX_OK;
}

/* Read-ahead: the blocks after block i (whose key is key_i) in the prompt's
 * chain, up to KV_READ_AHEAD past i and below max, not yet asked for
 * (index >= from), asked of the store at once so that the kernel reads
 * them while block i loads. Returns the index past the last one. */
enum { KV_READ_AHEAD = 16 };
static int32_t read_ahead(ix_kv *kv, uint64_t ns, const int32_t *tokens, int32_t i, uint64_t key_i, int32_t from,
                          int32_t max) {
    ix_kvstore_key keys[KV_READ_AHEAD];
    int32_t n = 0, bs = kv->p.block_size, end = i + 1 + KV_READ_AHEAD < max ? i + 1 + KV_READ_AHEAD : max;
    uint64_t key = key_i;
    for (int32_t j = i + 1; j < end; j++) {
        key = kv->hash(key, ns, tokens + (size_t)j * (size_t)bs, bs);
        if (j >= from) keys[n++] = (ix_kvstore_key){kv->disk_fp, ns, key};
    }
    if (n > 0) kv->dstats.read_ahead += ix_kvstore_prefetch(kv->disk, keys, n);
    return end > from ? end : from;
}

/* After `hits` blocks found in RAM, the blocks of tokens the store holds,
 * up to max: each read into a new block, registered and adopted. Returns
 * the new number of hits. */
static int32_t disk_in(ix_kv *kv, kv_seq *s, const int32_t *tokens, int32_t hits, int32_t max) {
    int32_t bs = kv->p.block_size;
    ix_kv_disk_stats *ds = &kv->dstats;
    int32_t ahead = hits + 1; /* blocks before this index were asked for (or are being read) */
    for (int32_t i = hits; i < max; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        uint64_t parent_key = i ? s->chain[i - 1].key : 0, parent_cid = i ? s->chain[i - 1].cid : 0;
        uint64_t key = kv->hash(parent_key, s->ns, t, bs);
        ix_kvstore_key k = {kv->disk_fp, s->ns, key};
        if (!ix_kvstore_contains(kv->disk, &k)) break;
        if (ds->compute_ns_per_token > 0 && ds->read_ns_per_block > ds->compute_ns_per_token * bs) {
            ds->reload_skipped++;
            break;
        }
        if (ix_kv_n_available(kv) < 1) break;
        if (i + KV_READ_AHEAD / 2 >= ahead) ahead = read_ahead(kv, s->ns, tokens, i, key, ahead, max);
        int32_t b = ix__kv_block_alloc(kv);
        uint64_t t0 = ix_time_ns();
        ix_status st = ix_kvstore_get(kv->disk, &k, t, bs, kv__block_data(kv, b), kv->lay.block_stride_bytes, NULL);
        double dt = (double)(ix_time_ns() - t0);
        if (st != IX_OK) {
            if (st == IX_ERR_FORMAT) ds->reload_failed++;
            ix__kv_block_decref(kv, b);
            break;
        }
        ds->read_ns_per_block = ds->read_ns_per_block > 0 ? 0.9 * ds->read_ns_per_block + 0.1 * dt : dt;
        memcpy(kv__block_tokens(kv, b), t, (size_t)bs * sizeof *t);
        ix__kv_cache_insert(kv, b, key, s->ns, parent_cid);
        s->table[i] = b;
        s->chain[i] = (kv_link){key, kv->blocks[b].cid};
        ds->blocks_in++;
        ds->tokens_in += bs;
        hits = i + 1;
    }
    return hits;
}

ix_status ix_kv_seq_adopt_prefix(ix_kv *kv, int32_t seq, const int32_t *tokens, int32_t n,
                                 int32_t *n_cached) {
    if (n_cached) *n_cached = 0;
    if (!kv) return IX_ERR_INVALID;
    kv_seq *s = ix__kv_seq_get(kv, seq);
    if (!s) return ix_errf(&kv->err, IX_ERR_INVALID, "adopt_prefix: no sequence %d", (int)seq);
    if (n < 0 || (n > 0 && !tokens))
        return ix_errf(&kv->err, IX_ERR_INVALID, "adopt_prefix: bad prompt (n=%d)", (int)n);
    if (s->state != KV_SEQ_ACTIVE || s->n_tokens != 0)
        return ix_errf(&kv->err, IX_ERR_STATE, "adopt_prefix: sequence %d is not empty", (int)seq);
    int32_t max = kv->p.enable_prefix_cache ? max_hit_blocks(kv, n) : 0;
    /* Room for every possible hit first, so the walk has no failure path. */
    if (ix__kv_seq_reserve(s, max) != IX_OK)
        return ix_errf(&kv->err, IX_ERR_NOMEM, "adopt_prefix: out of memory");
    int32_t hits = ix__kv_prefix_walk(kv, s->ns, tokens, max, s->table, s->chain, NULL);
    for (int32_t i = 0; i < hits; i++)
        ix__kv_block_incref(kv, s->table[i]);
    if (kv->disk) hits = disk_in(kv, s, tokens, hits, max);
    int32_t bs = kv->p.block_size;
    s->n_tokens = s->n_written = hits * bs;
    s->n_hashed = hits;
    kv->prefix_queried += n;
    kv->prefix_hit += (int64_t)hits * bs;
    if (n_cached) *n_cached = hits * bs;
    /* A window shorter than the hit lets its head go at once. */
    ix__kv_seq_release_window(kv, s);
    return IX_OK;
}

void ix_kv_prefix_reset(ix_kv *kv) {
    if (!kv) return;
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        kv_block *blk = &kv->blocks[b];
        if (blk->cid == 0) continue;
        if (blk->ref == 0) {
            ix__kv_block_forget(kv, b);
            continue;
        }
        if (blk->pin) kv->n_pinned--;
        blk->pin = 0; /* sessions see the cid change */
        ix__kv_cache_remove(kv, b);
    }
    /* Sequences keep chaining from their old links; those cids are gone for
     * good, so later registrations are simply unreachable, never wrong. */
}
