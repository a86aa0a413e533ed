/* Byte-level BPE (tokenizer.ggml.model = "gpt2").
 *
 * The pre-tokenizer of the vocabulary's family cuts the text into words; each
 * word's bytes are mapped to printable code points (the GPT-2 byte mapping),
 * and adjacent symbols are merged by rank (lowest first, ties leftmost) from
 * tokenizer.ggml.merges. Merges are keyed by token ids resolved once at load,
 * so the merge loop never hashes strings; a heap with lazy deletion keeps each
 * word O(n log n). */
#include <string.h>

#include "tokenizer/tok_int.h"

/* ---- the GPT-2 byte <-> code point mapping ------------------------------------ */

static void build_byte_map(ix_tokenizer *t) {
    for (int i = 0; i < 512; i++) t->cp_to_byte[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        uint16_t cp = printable ? (uint16_t)b : (uint16_t)(256 + extra++);
        t->byte_to_cp[b] = cp;
        t->cp_to_byte[cp] = (int16_t)b;
    }
}

/* ---- the merge table ------------------------------------------------------------ */

static uint64_t merge_key(ix_token l, ix_token r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }

static uint32_t merge_slot(uint64_t key, uint32_t mask) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key & mask;
}

bool ix__merge_find(const ix_tokenizer *t, ix_token left, ix_token right, int32_t *rank,
                    ix_token *merged) {
    if (!t->merge_cap || left < 0 || right < 0) return false;
    uint64_t key = merge_key(left, right);
    uint32_t mask = t->merge_cap - 1;
    for (uint32_t i = merge_slot(key, mask);; i = (i + 1) & mask) {
        const ix__merge_entry *e = &t->merges[i];
        if (e->key == UINT64_MAX) return false;
        if (e->key == key) {
            *rank = e->rank;
            *merged = e->merged;
            return true;
        }
    }
}

ix_status ix__bpe_init(ix_tokenizer *t, const ix_gguf *g, ix_errbuf *err) {
    build_byte_map(t);
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t n = ix__utf8_encode(t->byte_to_cp[b], u);
        t->bpe_byte_token[b] = ix__vocab_lookup(t, u, n);
    }

    ix_gguf_arr merges;
    ix_status s = ix_gguf_get_arr(g, "tokenizer.ggml.merges", IX_GGUF_STRING, &merges, err);
    if (s == IX_ERR_NOT_FOUND)
        return ix_errf(err, IX_ERR_FORMAT, "BPE tokenizer without tokenizer.ggml.merges");
    if (s != IX_OK) return s;
    if (merges.n > (uint64_t)INT32_MAX / 4)
        return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.merges: %llu merges is too many",
                       (unsigned long long)merges.n);
    uint32_t cap = 16;
    while (cap < merges.n * 2) cap *= 2;
    t->merges = ix_malloc((size_t)cap * sizeof *t->merges);
    if (!t->merges) return ix_errf(err, IX_ERR_NOMEM, "out of memory for %llu merges",
                                   (unsigned long long)merges.n);
    t->merge_cap = cap;
    for (uint32_t i = 0; i < cap; i++) t->merges[i].key = UINT64_MAX;

    char *tmp = NULL;
    size_t tmp_cap = 0;
    for (uint64_t r = 0; r < merges.n; r++) {
        ix_str m = ix_gguf_arr_str(&merges, r);
        /* "A B": split at the first space after the first byte (a piece may
         * itself start with a space in non-byte-level vocabularies). */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            ix_free(tmp);
            return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.merges[%llu] '%.*s' is not 'A B'",
                           (unsigned long long)r, (int)(m.len > 64 ? 64 : m.len), m.ptr);
        }
        size_t la = (size_t)(sp - m.ptr), lb = m.len - la - 1;
        ix_token a = ix__vocab_lookup(t, m.ptr, la), b = ix__vocab_lookup(t, sp + 1, lb);
        if (la + lb > tmp_cap) {
            char *p = ix_realloc(tmp, la + lb);
            if (!p) {
                ix_free(tmp);
                return ix_errf(err, IX_ERR_NOMEM, "out of memory");
            }
            tmp = p;
            tmp_cap = la + lb;
        }
        memcpy(tmp, m.ptr, la);
        memcpy(tmp + la, sp + 1, lb);
        ix_token ab = ix__vocab_lookup(t, tmp, la + lb);
        if (a < 0 || b < 0 || ab < 0) continue; /* can never apply to vocabulary symbols */
        uint64_t key = merge_key(a, b);
        uint32_t mask = cap - 1;
        for (uint32_t i = merge_slot(key, mask);; i = (i + 1) & mask) {
            ix__merge_entry *e = &t->merges[i];
            if (e->key == key) break; /* duplicate merge: the first (lowest rank) wins */
            if (e->key == UINT64_MAX) {
                *e = (ix__merge_entry){key, (int32_t)r, ab};
                t->n_merges++;
                break;
            }
        }
    }
    ix_free(tmp);
    return IX_OK;
}

/* ---- encoding ----------------------------------------------------------------- */

typedef struct bpe_work {
    ix__sym *sym;
    size_t sym_cap;
    char *enc; /* the word's bytes mapped to code points, UTF-8 */
    size_t enc_cap;
    ix__heap heap;
} bpe_work;

static ix_status try_pair(const ix_tokenizer *t, bpe_work *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return IX_OK;
    int32_t rank;
    ix_token merged;
    if (!ix__merge_find(t, w->sym[l].id, w->sym[r].id, &rank, &merged)) return IX_OK;
    return ix__heap_push(&w->heap, (ix__bigram){(float)rank, l, r, w->sym[l].len + w->sym[r].len});
}

static ix_status grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return IX_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = ix_realloc(*p, n * elem);
    if (!q) return IX_ERR_NOMEM;
    *p = q;
    *cap = n;
    return IX_OK;
}

static ix_status encode_word(const ix_tokenizer *t, bpe_work *w, const char *word, size_t len,
                             ix_token_vec *out) {
    ix_status s;
    if ((s = grow((void **)&w->enc, &w->enc_cap, 2 * len, 1)) != IX_OK) return s;
    if ((s = grow((void **)&w->sym, &w->sym_cap, len, sizeof *w->sym)) != IX_OK) return s;
    size_t n_enc = 0;
    int32_t n_sym = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)word[i];
        size_t k = ix__utf8_encode(t->byte_to_cp[b], w->enc + n_enc);
        w->sym[n_sym] = (ix__sym){n_sym - 1, n_sym + 1, (uint32_t)n_enc, (uint32_t)k,
                                  t->bpe_byte_token[b]};
        n_sym++;
        n_enc += k;
    }
    if (t->ignore_merges) {
        ix_token whole = ix__vocab_lookup(t, w->enc, n_enc);
        if (whole >= 0) return ix_token_vec_push(out, whole);
    }
    w->sym[n_sym - 1].next = -1;
    w->heap.n = 0;
    for (int32_t i = 0; i + 1 < n_sym; i++)
        if ((s = try_pair(t, w, i, i + 1)) != IX_OK) return s;

    ix__bigram bg;
    while (ix__heap_pop(&w->heap, &bg)) {
        ix__sym *l = &w->sym[bg.left], *r = &w->sym[bg.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != bg.size) continue; /* stale */
        int32_t rank;
        ix_token merged;
        if (!ix__merge_find(t, l->id, r->id, &rank, &merged)) continue; /* cannot happen */
        l->len += r->len;
        l->id = merged;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0) w->sym[l->next].prev = bg.left;
        if ((s = try_pair(t, w, l->prev, bg.left)) != IX_OK) return s;
        if ((s = try_pair(t, w, bg.left, l->next)) != IX_OK) return s;
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        ix_token id = w->sym[i].id;
        if (id < 0) id = t->unk; /* a byte the vocabulary cannot spell */
        if (id >= 0 && (s = ix_token_vec_push(out, id)) != IX_OK) return s;
    }
    return IX_OK;
}

ix_status ix__bpe_encode(const ix_tokenizer *t, const char *text, size_t len, ix_token_vec *out) {
    ix__span_vec words = {0};
    bpe_work w = {0};
    ix_status s = ix__pretok_split(t->pre, text, len, &words);
    for (size_t i = 0; s == IX_OK && i < words.n; i++)
        if (words.v[i].len) s = encode_word(t, &w, text + words.v[i].off, words.v[i].len, out);
    ix__span_vec_free(&words);
    ix__heap_free(&w.heap);
    ix_free(w.sym);
    ix_free(w.enc);
    return s;
}
