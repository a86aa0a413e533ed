/* Incremental detokenizer: turns a token stream into text that never splits a
 * UTF-8 character. Token bytes are appended to a small pending buffer; every
 * complete prefix is released at once, and only a trailing sequence that is
 * still a valid-so-far prefix of a character (at most 3 bytes) is held back.
 * Bytes that can never become valid UTF-8 are released as they are, so the
 * concatenated output always equals a whole-sequence decode. */
#include <string.h>

#include "tokenizer/tok_int.h"

struct ix_detok {
    const ix_tokenizer *t;
    unsigned flags;
    bool boundary; /* at the start or just after a special token */
    ix_buf piece;  /* scratch for one token's bytes */
    char pending[4];
    size_t n_pending;
};

ix_status ix_detok_create(ix_detok **out, const ix_tokenizer *t, unsigned flags) {
    *out = NULL;
    /* Cleaning spaces looks ahead up to two bytes past a space: not a stream. */
    if (flags & IX_DETOK_CLEAN_SPACES) return IX_ERR_INVALID;
    ix_detok *d = ix_calloc(1, sizeof *d);
    *out = d;
    if (!d) return IX_ERR_NOMEM;
    d->t = t;
    d->flags = flags;
    d->boundary = true;
    return IX_OK;
}

void ix_detok_destroy(ix_detok *d) {
    if (!d) return;
    ix_buf_free(&d->piece);
    ix_free(d);
}

size_t ix_detok_pending(const ix_detok *d) { return d->n_pending; }

/* How many bytes at the end of s[0..n) form an incomplete but so far valid
 * UTF-8 sequence (0 if the text ends on a character boundary). */
static size_t incomplete_tail(const unsigned char *s, size_t n) {
    size_t back = 0;
    while (back < n && back < 3 && (s[n - 1 - back] & 0xc0) == 0x80) back++;
    if (back == n) return 0; /* only continuation bytes: not a prefix of anything */
    unsigned lead = s[n - 1 - back];
    size_t need = lead >= 0xf0 && lead <= 0xf4 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc2 && lead < 0xe0 ? 2 : 1;
    if (lead >= 0xf5) need = 1;
    if (need == 1 || back + 1 >= need) return 0;
    /* The second byte of E0/ED/F0/F4 sequences has a narrower range. */
    if (back >= 1) {
        unsigned c1 = s[n - back];
        if ((lead == 0xe0 && c1 < 0xa0) || (lead == 0xed && c1 > 0x9f) ||
            (lead == 0xf0 && c1 < 0x90) || (lead == 0xf4 && c1 > 0x8f))
            return 0;
    }
    return back + 1;
}

ix_status ix_detok_push(ix_detok *d, ix_token id, ix_buf *out) {
    ix_buf_clear(&d->piece);
    ix_status s = ix_buf_append(&d->piece, d->pending, d->n_pending);
    if (s == IX_OK) s = ix_tokenizer_token_bytes(d->t, id, d->flags, d->boundary, &d->piece);
    if (s != IX_OK) return s;
    size_t tail = incomplete_tail((const unsigned char *)d->piece.data, d->piece.len);
    size_t emit = d->piece.len - tail;
    if ((s = ix_buf_append(out, d->piece.data, emit)) != IX_OK) return s;
    memcpy(d->pending, d->piece.data + emit, tail);
    d->n_pending = tail;
    d->boundary = ix__detok_is_boundary(d->t, id);
    return IX_OK;
}

ix_status ix_detok_flush(ix_detok *d, ix_buf *out) {
    ix_status s = ix_buf_append(out, d->pending, d->n_pending);
    if (s != IX_OK) return s;
    d->n_pending = 0;
    d->boundary = true;
    return IX_OK;
}
