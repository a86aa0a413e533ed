/*
 * Sequences: block tables and everything that changes them (create, append,
 * commit, fork, truncate, free, sliding-window release, swap out and in).
 *
 * Each operation checks everything that can fail (ids, ranges, free blocks,
 * table growth) before it changes anything, so a failed call leaves the cache
 * as it was and the scheduler can simply try something else.
 */
#include "kv_int.h"

#include <string.h>

kv_seq *ix__kv_seq_get(const ix_kv *kv, int32_t seq) {
    if (!kv || seq < 0 || seq >= kv->seq_cap) return NULL;
    kv_seq *s = &kv->seqs[seq];
    return s->state == KV_SEQ_UNUSED ? NULL : s;
}

/* A live sequence, or NULL with the reason in kv->err (if kv exists) and *st. */
static kv_seq *live_seq(ix_kv *kv, int32_t seq, const char *op, ix_status *st) {
    kv_seq *s = ix__kv_seq_get(kv, seq);
    if (!s)
        *st = kv ? ix_errf(&kv->err, IX_ERR_INVALID, "%s: no sequence %d", op, (int)seq)
                 : IX_ERR_INVALID;
    return s;
}

/* A live sequence whose blocks are in the pool. */
static kv_seq *active_seq(ix_kv *kv, int32_t seq, const char *op, ix_status *st) {
    kv_seq *s = live_seq(kv, seq, op, st);
    if (s && s->state != KV_SEQ_ACTIVE) {
        *st = ix_errf(&kv->err, IX_ERR_STATE, "%s: sequence %d is swapped out", op, (int)seq);
        return NULL;
    }
    return s;
}

/* Data and token ids of swap block h. */
static unsigned char *swap_data(ix_kv *kv, int32_t h) {
    return kv->swap_data + (size_t)h * kv->lay.block_stride_bytes;
}
static int32_t *swap_tokens(ix_kv *kv, int32_t h) {
    return kv->swap_tokens + (size_t)h * (size_t)kv->p.block_size;
}

static int32_t n_table(const ix_kv *kv, const kv_seq *s) {
    return kv__blocks_for(kv, s->n_tokens);
}

ix_status ix__kv_seq_reserve(kv_seq *s, int32_t n_entries) {
    if (n_entries <= s->cap) return IX_OK;
    int64_t cap = s->cap > 0 ? s->cap : 8;
    while (cap < n_entries)
        cap *= 2;
    if (cap > INT32_MAX) cap = INT32_MAX;
    /* One allocation: chain (8-byte aligned) first, then the int32 table. */
    kv_link *chain = ix_malloc((size_t)cap * (sizeof(kv_link) + sizeof(int32_t)));
    if (!chain) return IX_ERR_NOMEM;
    int32_t *table = (int32_t *)(chain + cap);
    if (s->cap > 0) {
        memcpy(chain, s->chain, (size_t)s->cap * sizeof(kv_link));
        memcpy(table, s->table, (size_t)s->cap * sizeof(int32_t));
    }
    ix_free(s->chain);
    s->chain = chain;
    s->table = table;
    s->cap = (int32_t)cap;
    return IX_OK;
}

static ix_status new_seq(ix_kv *kv, uint64_t ns, int32_t *out) {
    if (kv->seq_unused == KV_NIL) {
        int64_t cap = kv->seq_cap > 0 ? 2 * (int64_t)kv->seq_cap : 16;
        if (cap > INT32_MAX) return IX_ERR_RANGE;
        kv_seq *seqs = ix_realloc(kv->seqs, (size_t)cap * sizeof(kv_seq));
        if (!seqs) return IX_ERR_NOMEM;
        memset(seqs + kv->seq_cap, 0, (size_t)(cap - kv->seq_cap) * sizeof(kv_seq));
        /* Thread the new ids onto the free list, lowest id first. */
        for (int64_t i = cap - 1; i >= kv->seq_cap; i--) {
            seqs[i].next_unused = kv->seq_unused;
            kv->seq_unused = (int32_t)i;
        }
        kv->seqs = seqs;
        kv->seq_cap = (int32_t)cap;
    }
    int32_t id = kv->seq_unused;
    kv_seq *s = &kv->seqs[id];
    kv->seq_unused = s->next_unused;
    memset(s, 0, sizeof *s);
    s->state = KV_SEQ_ACTIVE;
    s->hashable = true;
    s->ns = ns;
    s->next_unused = KV_NIL;
    kv->n_seqs++;
    *out = id;
    return IX_OK;
}

ix_status ix_kv_seq_create(ix_kv *kv, uint64_t ns, int32_t *seq_out) {
    if (seq_out) *seq_out = -1;
    if (!kv || !seq_out) return IX_ERR_INVALID;
    ix_status st = new_seq(kv, ns, seq_out);
    if (st != IX_OK) return ix_errf(&kv->err, st, "seq_create: cannot grow the sequence table");
    return IX_OK;
}

ix_status ix_kv_seq_free(ix_kv *kv, int32_t seq) {
    ix_status st;
    kv_seq *s = live_seq(kv, seq, "seq_free", &st);
    if (!s) return st;
    int32_t nb = n_table(kv, s);
    if (s->state == KV_SEQ_ACTIVE) {
        /* Tail first: the LRU list then evicts this request's tail before its
         * head, and the head is what other requests share. */
        for (int32_t j = nb - 1; j >= s->n_released; j--)
            ix__kv_block_decref(kv, s->table[j]);
    } else {
        for (int32_t j = nb - 1; j >= s->n_released; j--)
            kv->swap_free[kv->n_swap_free++] = s->table[j];
        kv->n_seqs_swapped--;
    }
    ix_free(s->chain);
    memset(s, 0, sizeof *s);
    s->state = KV_SEQ_UNUSED;
    s->next_unused = kv->seq_unused;
    kv->seq_unused = seq;
    kv->n_seqs--;
    return IX_OK;
}

ix_status ix_kv_seq_fork(ix_kv *kv, int32_t parent, int32_t *child_out) {
    if (child_out) *child_out = -1;
    if (!kv || !child_out) return IX_ERR_INVALID;
    ix_status st;
    if (!active_seq(kv, parent, "seq_fork", &st)) return st;
    int32_t id;
    st = new_seq(kv, 0, &id);
    if (st != IX_OK) return ix_errf(&kv->err, st, "seq_fork: cannot grow the sequence table");
    /* new_seq may have moved kv->seqs. */
    kv_seq *p = &kv->seqs[parent], *c = &kv->seqs[id];
    int32_t nb = n_table(kv, p);
    if (nb > 0 && ix__kv_seq_reserve(c, nb) != IX_OK) {
        ix_kv_seq_free(kv, id);
        return ix_errf(&kv->err, IX_ERR_NOMEM, "seq_fork: out of memory");
    }
    if (nb > 0) {
        memcpy(c->table, p->table, (size_t)nb * sizeof(int32_t));
        memcpy(c->chain, p->chain, (size_t)p->n_hashed * sizeof(kv_link));
    }
    for (int32_t j = p->n_released; j < nb; j++)
        ix__kv_block_incref(kv, c->table[j]);
    c->ns = p->ns;
    c->hashable = p->hashable;
    c->n_tokens = p->n_tokens;
    c->n_written = p->n_written;
    c->n_hashed = p->n_hashed;
    c->n_released = p->n_released;
    kv->n_forks++;
    *child_out = id;
    return IX_OK;
}

/* Blocks an append of n tokens takes: new blocks past the last one, plus one
 * copy when the last block is partial and shared or cached. */
static int64_t blocks_needed(const ix_kv *kv, const kv_seq *s, int32_t n) {
    if (n <= 0) return 0;
    int32_t cur = n_table(kv, s);
    int64_t need = kv__blocks_for(kv, (int64_t)s->n_tokens + n) - (int64_t)cur;
    if (s->n_tokens % kv->p.block_size != 0 && !kv__block_writable(kv, s->table[cur - 1])) need++;
    return need;
}

int64_t ix_kv_n_available(const ix_kv *kv) {
    return kv ? (int64_t)kv->n_free + kv->n_evictable : 0;
}

int64_t ix_kv_seq_blocks_needed(const ix_kv *kv, int32_t seq, int32_t n) {
    const kv_seq *s = ix__kv_seq_get(kv, seq);
    if (!s || s->state != KV_SEQ_ACTIVE) return -1;
    return blocks_needed(kv, s, n);
}

bool ix_kv_can_append(const ix_kv *kv, const int32_t *seqs, const int32_t *n_tokens,
                      int32_t n_seqs) {
    if (!kv || n_seqs < 0 || (n_seqs > 0 && (!seqs || !n_tokens))) return false;
    int64_t need = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        int64_t one = ix_kv_seq_blocks_needed(kv, seqs[i], n_tokens[i]);
        if (one < 0) return false;
        need += one;
    }
    return need <= ix_kv_n_available(kv);
}

ix_status ix_kv_seq_append(ix_kv *kv, int32_t seq, int32_t n, const int32_t *tokens) {
    if (!kv) return IX_ERR_INVALID;
    ix_status st;
    kv_seq *s = active_seq(kv, seq, "seq_append", &st);
    if (!s) return st;
    if (n < 0) return ix_errf(&kv->err, IX_ERR_INVALID, "seq_append: n = %d", (int)n);
    if (n == 0) return IX_OK;
    int32_t bs = kv->p.block_size;
    int64_t new_len = (int64_t)s->n_tokens + n;
    int64_t limit = kv->p.max_seq_len > 0 ? kv->p.max_seq_len : (int64_t)INT32_MAX - bs;
    if (new_len > limit)
        return ix_errf(&kv->err, IX_ERR_TOO_LONG, "seq_append: %lld tokens exceed the limit %lld",
                       (long long)new_len, (long long)limit);
    int64_t need = blocks_needed(kv, s, n), avail = ix_kv_n_available(kv);
    if (need > avail)
        return ix_errf(&kv->err, IX_FULL, "seq_append: need %lld blocks, %lld available",
                       (long long)need, (long long)avail);
    if (ix__kv_seq_reserve(s, kv__blocks_for(kv, new_len)) != IX_OK)
        return ix_errf(&kv->err, IX_ERR_NOMEM, "seq_append: out of memory");

    int32_t pos = s->n_tokens, off = pos % bs;
    if (off != 0 && !kv__block_writable(kv, s->table[pos / bs])) {
        /* Copy on write: the last block is shared with a fork or is a cached
         * block reached again by truncation; the others keep the original. */
        int32_t old = s->table[pos / bs], b = ix__kv_block_alloc(kv);
        ix__kv_block_copy(kv, b, old);
        ix__kv_block_decref(kv, old);
        s->table[pos / bs] = b;
        kv->n_cow++;
    }
    for (int32_t k = 0; k < n;) {
        int32_t bi = pos / bs;
        off = pos % bs;
        if (off == 0) s->table[bi] = ix__kv_block_alloc(kv);
        int32_t cnt = bs - off < n - k ? bs - off : n - k;
        int32_t *dst = kv__block_tokens(kv, s->table[bi]) + off;
        if (tokens)
            memcpy(dst, tokens + k, (size_t)cnt * sizeof(int32_t));
        else
            for (int32_t i = 0; i < cnt; i++)
                dst[i] = -1;
        pos += cnt;
        k += cnt;
    }
    if (!tokens) s->hashable = false;
    s->n_tokens = (int32_t)new_len;
    return IX_OK;
}

/* Enters the newly written full blocks into the prefix cache. A block whose
 * exact prefix is already cached elsewhere is not entered twice; the sequence
 * chains on from the cached twin, whose cid names the same content. */
static void register_blocks(ix_kv *kv, kv_seq *s) {
    int32_t bs = kv->p.block_size, full = s->n_written / bs;
    for (; s->n_hashed < full; s->n_hashed++) {
        int32_t i = s->n_hashed, b = s->table[i];
        IX_ASSERT(b != KV_NIL); /* the window only releases hashed blocks */
        kv_link parent = i > 0 ? s->chain[i - 1] : (kv_link){0, 0};
        const int32_t *t = kv__block_tokens(kv, b);
        uint64_t key = kv->hash(parent.key, s->ns, t, bs);
        int32_t c = ix__kv_cache_find(kv, key, s->ns, parent.cid, t);
        if (c == KV_NIL) {
            if (kv->blocks[b].cid == 0) {
                ix__kv_cache_insert(kv, b, key, s->ns, parent.cid);
            }
            /* else: a fork sharing b entered it through a twin of our parent
             * that has since been evicted; b holds the same prefix either way. */
            c = b;
        }
        IX_ASSERT(kv->blocks[c].ns == s->ns);
        s->chain[i] = (kv_link){key, kv->blocks[c].cid};
    }
}

void ix__kv_seq_release_window(ix_kv *kv, kv_seq *s) {
    int32_t w = kv->p.sliding_window, bs = kv->p.block_size;
    if (w <= 0) return;
    /* The first token still to be computed is at n_written and reads back to
     * n_written - w + 1; whole blocks before that are never read again. */
    int64_t lowest_read = (int64_t)s->n_written - w + 1;
    while ((int64_t)(s->n_released + 1) * bs <= lowest_read) {
        int32_t j = s->n_released++;
        IX_ASSERT(s->table[j] != KV_NIL);
        ix__kv_block_decref(kv, s->table[j]);
        s->table[j] = IX_KV_NO_BLOCK;
    }
}

ix_status ix_kv_seq_commit(ix_kv *kv, int32_t seq, int32_t n_written) {
    if (!kv) return IX_ERR_INVALID;
    ix_status st;
    kv_seq *s = active_seq(kv, seq, "seq_commit", &st);
    if (!s) return st;
    if (n_written < 0 || n_written > s->n_tokens)
        return ix_errf(&kv->err, IX_ERR_RANGE, "seq_commit: %d written of %d tokens",
                       (int)n_written, (int)s->n_tokens);
    if (n_written <= s->n_written) return IX_OK;
    s->n_written = n_written;
    if (kv->p.enable_prefix_cache && s->hashable) register_blocks(kv, s);
    ix__kv_seq_release_window(kv, s);
    return IX_OK;
}

ix_status ix_kv_seq_truncate(ix_kv *kv, int32_t seq, int32_t n_tokens) {
    if (!kv) return IX_ERR_INVALID;
    ix_status st;
    kv_seq *s = active_seq(kv, seq, "seq_truncate", &st);
    if (!s) return st;
    if (n_tokens < 0 || n_tokens > s->n_tokens)
        return ix_errf(&kv->err, IX_ERR_RANGE, "seq_truncate: %d of %d tokens", (int)n_tokens,
                       (int)s->n_tokens);
    int32_t bs = kv->p.block_size;
    int32_t written = n_tokens < s->n_written ? n_tokens : s->n_written;
    if (s->n_released > 0 &&
        (int64_t)s->n_released * bs > (int64_t)written - kv->p.sliding_window + 1)
        return ix_errf(&kv->err, IX_ERR_RANGE,
                       "seq_truncate: position %d would read blocks the window released",
                       (int)written);
    int32_t nb = n_table(kv, s), keep = kv__blocks_for(kv, n_tokens);
    for (int32_t j = nb - 1; j >= keep; j--)
        ix__kv_block_decref(kv, s->table[j]);
    s->n_tokens = n_tokens;
    s->n_written = written;
    if (s->n_hashed > n_tokens / bs) s->n_hashed = n_tokens / bs;
    if (n_tokens == 0) s->hashable = true; /* nothing left without its ids */
    return IX_OK;
}

ix_status ix_kv_seq_swap_out(ix_kv *kv, int32_t seq) {
    if (!kv) return IX_ERR_INVALID;
    ix_status st;
    kv_seq *s = active_seq(kv, seq, "seq_swap_out", &st);
    if (!s) return st;
    if (kv->n_swap == 0) return ix_errf(&kv->err, IX_ERR_STATE, "seq_swap_out: no swap tier");
    int32_t nb = n_table(kv, s), held = nb - s->n_released;
    if (held > kv->n_swap_free)
        return ix_errf(&kv->err, IX_FULL, "seq_swap_out: need %d swap blocks, %d free", (int)held,
                       (int)kv->n_swap_free);
    for (int32_t j = nb - 1; j >= s->n_released; j--) { /* tail first, as in free */
        int32_t b = s->table[j], h = kv->swap_free[--kv->n_swap_free];
        ix__kv_copy_span(kv, swap_data(kv, h), swap_tokens(kv, h), kv__block_data(kv, b),
                         kv__block_tokens(kv, b));
        ix__kv_block_decref(kv, b);
        s->table[j] = h;
    }
    s->state = KV_SEQ_SWAPPED;
    kv->n_seqs_swapped++;
    kv->n_swapped_out += held;
    return IX_OK;
}

ix_status ix_kv_seq_swap_in(ix_kv *kv, int32_t seq) {
    ix_status st;
    kv_seq *s = live_seq(kv, seq, "seq_swap_in", &st);
    if (!s) return st;
    if (s->state != KV_SEQ_SWAPPED)
        return ix_errf(&kv->err, IX_ERR_STATE, "seq_swap_in: sequence %d is not swapped out",
                       (int)seq);
    int32_t nb = n_table(kv, s), held = nb - s->n_released;
    if (held > ix_kv_n_available(kv))
        return ix_errf(&kv->err, IX_FULL, "seq_swap_in: need %d blocks, %lld available", (int)held,
                       (long long)ix_kv_n_available(kv));
    for (int32_t j = s->n_released; j < nb; j++) {
        int32_t h = s->table[j], b = ix__kv_block_alloc(kv);
        ix__kv_copy_span(kv, kv__block_data(kv, b), kv__block_tokens(kv, b), swap_data(kv, h),
                         swap_tokens(kv, h));
        kv->swap_free[kv->n_swap_free++] = h;
        s->table[j] = b;
    }
    s->state = KV_SEQ_ACTIVE;
    kv->n_seqs_swapped--;
    kv->n_swapped_in += held;
    return IX_OK;
}

ix_status ix_kv_seq_get_info(const ix_kv *kv, int32_t seq, ix_kv_seq_info *out) {
    const kv_seq *s = ix__kv_seq_get(kv, seq);
    if (!s || !out) return IX_ERR_INVALID;
    out->ns = s->ns;
    out->n_tokens = s->n_tokens;
    out->n_written = s->n_written;
    out->n_blocks = n_table(kv, s);
    out->n_blocks_held = out->n_blocks - s->n_released;
    out->swapped = s->state == KV_SEQ_SWAPPED;
    return IX_OK;
}

int32_t ix_kv_seq_n_tokens(const ix_kv *kv, int32_t seq) {
    const kv_seq *s = ix__kv_seq_get(kv, seq);
    return s ? s->n_tokens : -1;
}

const int32_t *ix_kv_seq_block_table(const ix_kv *kv, int32_t seq, int32_t *n_blocks) {
    const kv_seq *s = ix__kv_seq_get(kv, seq);
    if (!s || s->state != KV_SEQ_ACTIVE) {
        if (n_blocks) *n_blocks = 0;
        return NULL;
    }
    if (n_blocks) *n_blocks = n_table(kv, s);
    return s->table;
}

void ix__kv_seqs_free(ix_kv *kv) {
    for (int32_t i = 0; i < kv->seq_cap; i++)
        ix_free(kv->seqs[i].chain);
    ix_free(kv->seqs);
}
