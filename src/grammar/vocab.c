/*
 * The vocabulary as the matcher walks it: every token's bytes, and a trie of
 * them in preorder so that a mask computation explores each shared prefix
 * once and skips a whole subtree when its first byte is refused. Built once
 * per model by sorting the byte strings: consecutive strings share their
 * longest common prefix, which is exactly the path that stays open.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

typedef struct tok_ref {
    const uint8_t *p;
    uint32_t len;
    ix_token id;
} tok_ref;

static int cmp_tok(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

void ix_grammar_vocab_destroy(ix_grammar_vocab *v) {
    if (!v) return;
    ix_free(v->node_byte);
    ix_free(v->node_depth);
    ix_free(v->node_end);
    ix_free(v->tok_begin);
    ix_free(v->toks);
    ix_free(v->eog);
    ix_free(v->is_eog);
    ix_free(v->bytes_off);
    ix_free(v->blob);
    ix_free(v);
}

static ix_status build_trie(ix_grammar_vocab *v, ix_errbuf *err) {
    size_t n_tok = 0, total = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        uint32_t len = v->bytes_off[i + 1] - v->bytes_off[i];
        if (len == 0 || len > GRAM_MAX_TOKEN_BYTES || v->is_eog[i]) continue;
        n_tok++;
        total += len;
    }
    tok_ref *refs = ix_malloc((n_tok + 1) * sizeof *refs);
    v->node_byte = ix_malloc(total + 1);
    v->node_depth = ix_malloc((total + 1) * sizeof *v->node_depth);
    v->node_end = ix_malloc((total + 1) * sizeof *v->node_end);
    v->tok_begin = ix_malloc((total + 2) * sizeof *v->tok_begin);
    v->toks = ix_malloc((n_tok + 1) * sizeof *v->toks);
    if (!refs || !v->node_byte || !v->node_depth || !v->node_end || !v->tok_begin || !v->toks) {
        ix_free(refs);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory for the token trie");
    }
    size_t k = 0;
    for (int32_t i = 0; i < v->n_vocab; i++) {
        uint32_t len = v->bytes_off[i + 1] - v->bytes_off[i];
        if (len == 0 || len > GRAM_MAX_TOKEN_BYTES || v->is_eog[i]) continue;
        refs[k++] = (tok_ref){(const uint8_t *)v->blob + v->bytes_off[i], len, i};
    }
    qsort(refs, n_tok, sizeof *refs, cmp_tok);
    int32_t path[GRAM_MAX_TOKEN_BYTES + 1]; /* node at each depth of the open path */
    uint32_t open = 0;                      /* depth of the open path */
    int32_t n = 0;
    const tok_ref *prev = NULL;
    for (size_t t = 0; t < n_tok; t++) {
        const tok_ref *r = &refs[t];
        uint32_t l = 0;
        if (prev)
            while (l < prev->len && l < r->len && prev->p[l] == r->p[l]) l++;
        for (; open > l; open--) v->node_end[path[open]] = n; /* close what diverges */
        for (uint32_t d = l + 1; d <= r->len; d++) {
            v->node_byte[n] = r->p[d - 1];
            v->node_depth[n] = (uint16_t)d;
            v->tok_begin[n] = (int32_t)t;
            path[d] = n++;
        }
        open = r->len;
        v->toks[t] = r->id;
        if ((int32_t)r->len > v->max_depth) v->max_depth = (int32_t)r->len;
        prev = r;
    }
    for (; open > 0; open--) v->node_end[path[open]] = n;
    v->tok_begin[n] = (int32_t)n_tok;
    v->n_nodes = n;
    ix_free(refs);
    return IX_OK;
}

ix_status ix_grammar_vocab_create_from_bytes(ix_grammar_vocab **out, const ix_str *bytes,
                                             int32_t n_vocab, const ix_token *eog, size_t n_eog,
                                             ix_errbuf *err) {
    *out = NULL;
    if (n_vocab <= 0 || (n_vocab > 0 && !bytes))
        return ix_errf(err, IX_ERR_INVALID, "vocabulary of %d tokens", n_vocab);
    if (n_eog && !eog) return ix_errf(err, IX_ERR_INVALID, "end-of-generation ids are NULL");
    ix_grammar_vocab *v = ix_calloc(1, sizeof *v);
    if (!v) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    v->n_vocab = n_vocab;
    v->n_words = ((size_t)n_vocab + 31) / 32;
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (bytes[i].len && !bytes[i].ptr) {
            ix_grammar_vocab_destroy(v);
            return ix_errf(err, IX_ERR_INVALID, "token %d has no bytes pointer", i);
        }
        total += bytes[i].len;
        if (total > UINT32_MAX / 2) {
            ix_grammar_vocab_destroy(v);
            return ix_errf(err, IX_ERR_TOO_LONG, "vocabulary bytes exceed 2 GiB");
        }
    }
    v->bytes_off = ix_malloc(((size_t)n_vocab + 1) * sizeof *v->bytes_off);
    v->blob = ix_malloc(total + 1);
    v->is_eog = ix_calloc((size_t)n_vocab, 1);
    v->eog = ix_malloc((n_eog + 1) * sizeof *v->eog);
    if (!v->bytes_off || !v->blob || !v->is_eog || !v->eog) {
        ix_grammar_vocab_destroy(v);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    uint32_t off = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        v->bytes_off[i] = off;
        if (bytes[i].len) memcpy(v->blob + off, bytes[i].ptr, bytes[i].len);
        off += (uint32_t)bytes[i].len;
    }
    v->bytes_off[n_vocab] = off;
    for (size_t i = 0; i < n_eog; i++) {
        if (eog[i] < 0 || eog[i] >= n_vocab) {
            ix_grammar_vocab_destroy(v);
            return ix_errf(err, IX_ERR_INVALID, "end-of-generation id %d outside the vocabulary of %d",
                           eog[i], n_vocab);
        }
        if (!v->is_eog[eog[i]]) v->eog[v->n_eog++] = eog[i];
        v->is_eog[eog[i]] = 1;
    }
    ix_status s = build_trie(v, err);
    if (s != IX_OK) {
        ix_grammar_vocab_destroy(v);
        return s;
    }
    *out = v;
    return IX_OK;
}

ix_status ix_grammar_vocab_create(ix_grammar_vocab **out, const ix_tokenizer *t, ix_errbuf *err) {
    *out = NULL;
    int32_t n = ix_tokenizer_n_vocab(t);
    if (n <= 0) return ix_errf(err, IX_ERR_INVALID, "empty vocabulary");
    ix_buf blob = {0};
    size_t *off = ix_malloc(((size_t)n + 1) * sizeof *off);
    ix_str *bytes = ix_malloc((size_t)n * sizeof *bytes);
    ix_token *eog = ix_malloc((size_t)n * sizeof *eog);
    ix_status s = off && bytes && eog ? IX_OK : IX_ERR_NOMEM;
    size_t n_eog = 0;
    for (int32_t i = 0; i < n && s == IX_OK; i++) {
        off[i] = blob.len;
        if (ix_tokenizer_is_eog(t, i)) {
            eog[n_eog++] = i;
            continue;
        }
        ix_token_type ty = ix_tokenizer_token_type(t, i);
        /* Control, unknown and unused tokens never stand for text. */
        if (ty == IX_TOKEN_TYPE_CONTROL || ty == IX_TOKEN_TYPE_UNKNOWN || ty == IX_TOKEN_TYPE_UNUSED)
            continue;
        s = ix_tokenizer_token_bytes(t, i, 0, false, &blob);
    }
    if (s == IX_OK) {
        off[n] = blob.len;
        for (int32_t i = 0; i < n; i++)
            bytes[i] = (ix_str){blob.data ? blob.data + off[i] : NULL, off[i + 1] - off[i]};
        s = ix_grammar_vocab_create_from_bytes(out, bytes, n, eog, n_eog, err);
    } else {
        ix_errf(err, s, "reading token bytes: %s", ix_status_str(s));
    }
    ix_buf_free(&blob);
    ix_free(off);
    ix_free(bytes);
    ix_free(eog);
    return s;
}

int32_t ix_grammar_vocab_n_vocab(const ix_grammar_vocab *v) { return v->n_vocab; }

size_t ix_grammar_vocab_mask_words(const ix_grammar_vocab *v) { return v->n_words; }

ix_str ix_grammar_vocab_token(const ix_grammar_vocab *v, ix_token id) {
    if (id < 0 || id >= v->n_vocab) return (ix_str){NULL, 0};
    uint32_t len = v->bytes_off[id + 1] - v->bytes_off[id];
    if (len > GRAM_MAX_TOKEN_BYTES || v->is_eog[id]) len = 0; /* never matched as text */
    return (ix_str){len ? v->blob + v->bytes_off[id] : NULL, len};
}

bool ix_grammar_vocab_is_eog(const ix_grammar_vocab *v, ix_token id) {
    return id >= 0 && id < v->n_vocab && v->is_eog[id];
}
