/* ix_buf: the growable byte buffer every module appends text to. Grows by
 * doubling so n appends cost O(total bytes). */
#include "inferx/core.h"

#include <stdio.h>
#include <string.h>

ix_status ix_buf_reserve(ix_buf *b, size_t n) {
    size_t need;
    if (__builtin_add_overflow(b->len, n, &need) || need == SIZE_MAX) return IX_ERR_NOMEM;
    need += 1; /* NUL */
    if (need <= b->cap) return IX_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = ix_realloc(b->data, cap);
    if (!p) return IX_ERR_NOMEM;
    b->data = p;
    b->cap = cap;
    return IX_OK;
}

ix_status ix_buf_append(ix_buf *b, const void *data, size_t n) {
    ix_status s = ix_buf_reserve(b, n);
    if (s != IX_OK) return s;
    if (n) memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return IX_OK;
}

ix_status ix_buf_printf(ix_buf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    ix_status s = n < 0 ? IX_ERR_INVALID : ix_buf_reserve(b, (size_t)n);
    if (s == IX_OK) {
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
    return s;
}

void ix_buf_clear(ix_buf *b) {
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void ix_buf_free(ix_buf *b) {
    ix_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
