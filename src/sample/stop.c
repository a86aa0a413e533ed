/* Stop strings: text is released only once it can no longer be the start of
 * a stop string. The held-back tail is always shorter than the longest stop
 * string, so each feed costs O((held + new) * total stop bytes): stop lists are
 * short (OpenAI allows 4). */
#include <string.h>

#include "inferx/sample.h"

struct ix_stopper {
    char **s;     /* (n) owned copies */
    size_t *len;  /* (n) */
    size_t n, max_len;
    ix_buf held;  /* text that may be the start of a stop string */
};

ix_status ix_stopper_create(ix_stopper **out, const char *const *strings, size_t n) {
    ix_stopper *st = ix_calloc(1, sizeof *st);
    *out = NULL;
    if (!st) return IX_ERR_NOMEM;
    st->s = ix_calloc(n ? n : 1, sizeof *st->s);
    st->len = ix_calloc(n ? n : 1, sizeof *st->len);
    if (!st->s || !st->len) goto oom;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(strings[i]);
        if (l == 0) continue;
        if (!(st->s[st->n] = ix_strndup(strings[i], l))) goto oom;
        st->len[st->n++] = l;
        if (l > st->max_len) st->max_len = l;
    }
    *out = st;
    return IX_OK;
oom:
    ix_stopper_destroy(st);
    return IX_ERR_NOMEM;
}

void ix_stopper_destroy(ix_stopper *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) ix_free(st->s[i]);
    ix_free(st->s);
    ix_free(st->len);
    ix_buf_free(&st->held);
    ix_free(st);
}

size_t ix_stopper_max_len(const ix_stopper *st) { return st->max_len; }

ix_status ix_stopper_feed(ix_stopper *st, const char *text, size_t len, ix_buf *emit, bool *stopped) {
    *stopped = false;
    if (st->n == 0) return ix_buf_append(emit, text, len);
    ix_status s = ix_buf_append(&st->held, text, len);
    if (s != IX_OK) return s;
    const char *h = st->held.data;
    size_t n = st->held.len;

    /* Earliest complete occurrence of any stop string. */
    size_t first = SIZE_MAX;
    for (size_t k = 0; k < st->n; k++) {
        if (st->len[k] > n) continue;
        const char *p = memmem(h, n, st->s[k], st->len[k]);
        if (p && (size_t)(p - h) < first) first = (size_t)(p - h);
    }
    if (first != SIZE_MAX) {
        s = ix_buf_append(emit, h, first);
        ix_buf_clear(&st->held);
        *stopped = s == IX_OK;
        return s;
    }
    /* Hold back the longest suffix that is a proper prefix of a stop string. */
    size_t keep = 0;
    for (size_t k = 0; k < st->n; k++) {
        size_t lim = st->len[k] - 1 < n ? st->len[k] - 1 : n;
        for (size_t l = lim; l > keep; l--) {
            if (memcmp(h + n - l, st->s[k], l) == 0) {
                keep = l;
                break;
            }
        }
    }
    if ((s = ix_buf_append(emit, h, n - keep)) != IX_OK) return s;
    memmove(st->held.data, h + n - keep, keep);
    st->held.len = keep;
    st->held.data[keep] = '\0';
    return IX_OK;
}

ix_status ix_stopper_flush(ix_stopper *st, ix_buf *emit) {
    ix_status s = ix_buf_append(emit, st->held.data ? st->held.data : "", st->held.len);
    if (s == IX_OK) ix_buf_clear(&st->held);
    return s;
}
