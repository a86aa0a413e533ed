/* The min-heap of merge candidates used by both SPM and BPE encoders. Entries
 * go stale when a neighbouring merge changes a symbol; the encoders detect that
 * on pop (lazy deletion), which keeps every operation O(log n). */
#include "tokenizer/tok_int.h"

static bool less(const ix__bigram *a, const ix__bigram *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

ix_status ix__heap_push(ix__heap *h, ix__bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        ix__bigram *v = ix_realloc(h->v, cap * sizeof *v);
        if (!v) return IX_ERR_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!less(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return IX_OK;
}

bool ix__heap_pop(ix__heap *h, ix__bigram *out) {
    if (h->n == 0) return false;
    *out = h->v[0];
    ix__bigram last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && less(&h->v[c + 1], &h->v[c])) c++;
        if (!less(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return true;
}

void ix__heap_free(ix__heap *h) {
    ix_free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
