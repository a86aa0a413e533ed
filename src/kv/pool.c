/*
 * The block pool: which blocks are free, used or evictable, and how a block is
 * taken. Free blocks (never cached, or forgotten) are a stack so that the most
 * recently released, still cache-warm memory is reused first. Cached blocks
 * that no sequence references sit on an LRU list; they are evicted, oldest
 * first, only when the free stack is empty, because each one may still save a
 * later request its prefill.
 */
#include "kv_int.h"

#include <string.h>

ix_status ix__kv_pool_init(ix_kv *kv) {
    int32_t n = kv->n_blocks;
    /* Zeroed K/V: a kernel that reads a slot before it is written sees zeros,
     * not stale data of another request. calloc's zeros cost nothing at
     * start: the pool's pages become resident as blocks are first written. */
    kv->data = ix_aligned_calloc(64, (size_t)n * kv->lay.block_stride_bytes);
    kv->tokens = ix_calloc((size_t)n * (size_t)kv->p.block_size, sizeof(int32_t));
    kv->blocks = ix_calloc((size_t)n, sizeof(kv_block));
    kv->free_stack = ix_malloc((size_t)n * sizeof(int32_t));
    kv->scratch_a = ix_calloc((size_t)n, sizeof(int32_t));
    kv->scratch_b = ix_calloc((size_t)n, sizeof(int32_t));
    if (!kv->data || !kv->tokens || !kv->blocks || !kv->free_stack || !kv->scratch_a ||
        !kv->scratch_b)
        return IX_ERR_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        kv->blocks[i].hnext = KV_NIL;
        kv->blocks[i].prev = kv->blocks[i].next = KV_NIL;
        kv->free_stack[i] = n - 1 - i; /* block 0 is taken first */
    }
    kv->n_free = n;
    kv->lru_head = kv->lru_tail = KV_NIL;
    kv->plru_head = kv->plru_tail = KV_NIL;

    if (kv->n_swap > 0) {
        int32_t m = kv->n_swap;
        kv->swap_data = ix_aligned_alloc(64, (size_t)m * kv->lay.block_stride_bytes);
        kv->swap_tokens = ix_calloc((size_t)m * (size_t)kv->p.block_size, sizeof(int32_t));
        kv->swap_free = ix_malloc((size_t)m * sizeof(int32_t));
        if (!kv->swap_data || !kv->swap_tokens || !kv->swap_free) return IX_ERR_NOMEM;
        for (int32_t i = 0; i < m; i++)
            kv->swap_free[i] = m - 1 - i;
        kv->n_swap_free = m;
    }
    return IX_OK;
}

void ix__kv_pool_free(ix_kv *kv) {
    ix_aligned_free(kv->data);
    ix_free(kv->tokens);
    ix_free(kv->blocks);
    ix_free(kv->free_stack);
    ix_free(kv->scratch_a);
    ix_free(kv->scratch_b);
    ix_aligned_free(kv->swap_data);
    ix_free(kv->swap_tokens);
    ix_free(kv->swap_free);
}

/* The LRU list a cached, unreferenced block with these pins sits on. */
static int32_t *list_head(ix_kv *kv, const kv_block *blk) { return blk->pin ? &kv->plru_head : &kv->lru_head; }
static int32_t *list_tail(ix_kv *kv, const kv_block *blk) { return blk->pin ? &kv->plru_tail : &kv->lru_tail; }

void ix__kv_lru_unlink(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    if (blk->prev != KV_NIL)
        kv->blocks[blk->prev].next = blk->next;
    else
        *list_head(kv, blk) = blk->next;
    if (blk->next != KV_NIL)
        kv->blocks[blk->next].prev = blk->prev;
    else
        *list_tail(kv, blk) = blk->prev;
    blk->prev = blk->next = KV_NIL;
    kv->n_evictable--;
}

static void lru_push_newest(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    int32_t *head = list_head(kv, blk), *tail = list_tail(kv, blk);
    blk->prev = *tail;
    blk->next = KV_NIL;
    if (*tail != KV_NIL)
        kv->blocks[*tail].next = b;
    else
        *head = b;
    *tail = b;
    kv->n_evictable++;
}

void ix__kv_block_pin(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    IX_ASSERT(blk->cid != 0);
    bool listed = blk->ref == 0;
    if (listed && blk->pin == 0) ix__kv_lru_unlink(kv, b);
    if (blk->pin++ == 0) {
        kv->n_pinned++;
        if (listed) lru_push_newest(kv, b);
    }
}

void ix__kv_block_unpin(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    IX_ASSERT(blk->cid != 0 && blk->pin > 0);
    bool listed = blk->ref == 0;
    if (listed && blk->pin == 1) ix__kv_lru_unlink(kv, b);
    if (--blk->pin == 0) {
        kv->n_pinned--;
        if (listed) lru_push_newest(kv, b); /* an ordinary victim from now on */
    }
}

void ix__kv_block_forget(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    IX_ASSERT(blk->ref == 0 && blk->cid != 0);
    ix__kv_lru_unlink(kv, b);
    if (blk->pin) kv->n_pinned--;
    blk->pin = 0;
    ix__kv_cache_remove(kv, b);
    kv->free_stack[kv->n_free++] = b;
}

int32_t ix__kv_block_alloc(ix_kv *kv) {
    int32_t b;
    if (kv->n_free > 0) {
        b = kv->free_stack[--kv->n_free];
    } else {
        /* Anonymous prefixes go first; a session's blocks only when none is left. */
        b = kv->lru_head != KV_NIL ? kv->lru_head : kv->plru_head;
        IX_ASSERT(b != KV_NIL); /* callers check ix_kv_n_available first */
        ix__kv_lru_unlink(kv, b);
        ix__kv_disk_out(kv, b); /* kept on disk, when there is one */
        if (kv->blocks[b].pin) kv->n_pinned--; /* its sessions see the cid change */
        kv->blocks[b].pin = 0;
        ix__kv_cache_remove(kv, b);
        kv->n_evictions++;
    }
    IX_ASSERT(kv->blocks[b].ref == 0 && kv->blocks[b].cid == 0);
    kv->blocks[b].ref = 1;
    kv->n_used++;
    return b;
}

void ix__kv_block_incref(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    if (blk->ref == 0) {
        /* Only cached blocks can be found while unreferenced (prefix hits). */
        IX_ASSERT(blk->cid != 0);
        ix__kv_lru_unlink(kv, b);
        kv->n_used++;
    }
    blk->ref++;
}

void ix__kv_block_decref(ix_kv *kv, int32_t b) {
    kv_block *blk = &kv->blocks[b];
    IX_ASSERT(blk->ref > 0);
    if (--blk->ref > 0) return;
    kv->n_used--;
    if (blk->cid != 0)
        lru_push_newest(kv, b);
    else
        kv->free_stack[kv->n_free++] = b;
}

void ix__kv_copy_span(const ix_kv *kv, void *dst_data, int32_t *dst_tokens, const void *src_data,
                      const int32_t *src_tokens) {
    /* Block-major layout: every layer's K and V of a block is one span. */
    memcpy(dst_data, src_data, kv->lay.block_stride_bytes);
    memcpy(dst_tokens, src_tokens, (size_t)kv->p.block_size * sizeof(int32_t));
}

void ix__kv_block_copy(ix_kv *kv, int32_t dst, int32_t src) {
    ix__kv_copy_span(kv, kv__block_data(kv, dst), kv__block_tokens(kv, dst),
                     kv__block_data(kv, src), kv__block_tokens(kv, src));
    if (kv->copy_hook) kv->copy_hook(kv->copy_user, dst, src);
}
