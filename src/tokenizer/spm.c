/* SentencePiece-style BPE (tokenizer.ggml.model = "llama").
 *
 * Spaces become U+2581 "▁" (plus one dummy-prefix "▁" at each fragment start),
 * the text starts as one symbol per character, and the adjacent pair whose
 * concatenation is the highest-scoring vocabulary piece is merged repeatedly
 * (ties: leftmost first). Characters no piece covers fall back to <0xXX> byte
 * tokens. A heap of candidates with lazy deletion keeps this O(n log n). */
#include <string.h>

#include "tokenizer/tok_int.h"

typedef struct spm_state {
    const ix_tokenizer *t;
    const char *text;
    ix__sym *sym;
    ix__heap heap;
} spm_state;

static ix_status try_pair(spm_state *st, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return IX_OK;
    const ix__sym *a = &st->sym[l], *b = &st->sym[r];
    uint32_t size = a->len + b->len;
    ix_token id = ix__vocab_lookup(st->t, st->text + a->off, size);
    if (id < 0) return IX_OK;
    return ix__heap_push(&st->heap, (ix__bigram){-st->t->scores[id], l, r, size});
}

/* Merges one chunk esc[0..n) of escaped text and appends its tokens. */
static ix_status encode_chunk(spm_state *st, size_t *sym_cap, const char *esc, size_t n,
                              ix_token_vec *out) {
    const ix_tokenizer *t = st->t;
    if (n > *sym_cap) {
        size_t cap = *sym_cap ? *sym_cap : 64;
        while (cap < n) cap *= 2;
        ix__sym *p = ix_realloc(st->sym, cap * sizeof *p);
        if (!p) return IX_ERR_NOMEM;
        st->sym = p;
        *sym_cap = cap;
    }
    ix__sym *sym = st->sym;
    st->text = esc;
    st->heap.n = 0;
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        size_t k = ix__utf8_len((unsigned char)esc[off]);
        if (k > n - off) k = n - off;
        sym[n_sym] = (ix__sym){n_sym - 1, n_sym + 1, (uint32_t)off, (uint32_t)k, IX_TOKEN_NONE};
        n_sym++;
        off += k;
    }
    if (n_sym == 0) return IX_OK;
    sym[n_sym - 1].next = -1;

    ix_status s;
    for (int32_t i = 0; i + 1 < n_sym; i++)
        if ((s = try_pair(st, i, i + 1)) != IX_OK) return s;

    ix__bigram b;
    while (ix__heap_pop(&st->heap, &b)) {
        ix__sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue; /* stale */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0) sym[l->next].prev = b.left;
        if ((s = try_pair(st, l->prev, b.left)) != IX_OK) return s;
        if ((s = try_pair(st, b.left, l->next)) != IX_OK) return s;
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        ix_token id = ix__vocab_lookup(t, esc + sym[i].off, sym[i].len);
        if (id >= 0) {
            if ((s = ix_token_vec_push(out, id)) != IX_OK) return s;
            continue;
        }
        for (uint32_t k = 0; k < sym[i].len; k++) {
            ix_token bt = t->byte_token[(unsigned char)esc[sym[i].off + k]];
            if (bt < 0) bt = t->unk; /* no byte fallback: unknown, if the vocab has one */
            if (bt >= 0 && (s = ix_token_vec_push(out, bt)) != IX_OK) return s;
        }
    }
    return IX_OK;
}

static bool is_space_mark(const char *p) { return memcmp(p, "\xe2\x96\x81", 3) == 0; }

ix_status ix__spm_encode(const ix_tokenizer *t, const char *text, size_t len, bool add_prefix,
                         ix_token_vec *out) {
    static const char space[3] = {'\xe2', '\x96', '\x81'};
    /* (n_esc) escaped text: every byte grows to at most 3 */
    char *esc = ix_malloc(3 * len + 3);
    spm_state st = {t, esc, NULL, {0}};
    size_t sym_cap = 0;
    ix_status s = IX_ERR_NOMEM;
    if (!esc) goto done;

    size_t n_esc = 0;
    if (add_prefix) {
        memcpy(esc, space, 3);
        n_esc = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + n_esc, space, 3);
            n_esc += 3;
        } else {
            esc[n_esc++] = text[i];
        }
    }

    if (!t->spm_word_split) {
        s = encode_chunk(&st, &sym_cap, esc, n_esc, out);
        goto done;
    }
    /* No piece spans "x▁" (x not ▁), so merges never cross such a point and
     * each word can be merged on its own: small heaps that stay in cache, and
     * the same result as merging the whole text. */
    s = IX_OK;
    size_t start = 0;
    for (size_t i = 0; i < n_esc && s == IX_OK;) {
        size_t k = ix__utf8_len((unsigned char)esc[i]);
        if (k > n_esc - i) k = n_esc - i;
        if (i > start && k == 3 && is_space_mark(esc + i) &&
            !(i >= 3 && is_space_mark(esc + i - 3))) {
            s = encode_chunk(&st, &sym_cap, esc + start, i - start, out);
            start = i;
        }
        i += k;
    }
    if (s == IX_OK) s = encode_chunk(&st, &sym_cap, esc + start, n_esc - start, out);
done:
    ix__heap_free(&st.heap);
    ix_free(esc);
    ix_free(st.sym);
    return s;
}
