/*
 * Importance-matrix files in llama.cpp's imatrix.dat layout (imatrix_file.h):
 * a bounds-checked reader (the whole file read, then parsed with every length
 * checked against what is left) and a writer.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/imatrix_file.h"

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static bool take(cursor *c, void *out, size_t n) {
    if (c->left < n) return false;
    memcpy(out, c->p, n);
    c->p += n;
    c->left -= n;
    return true;
}

static bool take_i32(cursor *c, int32_t *v) {
    uint8_t b[4];
    if (!take(c, b, 4)) return false;
    *v = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    return true;
}

static bool slurp(const char *path, uint8_t **out, size_t *size, ix_errbuf *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return !ix_errf(err, IX_ERR_IO, "%s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return !ix_errf(err, IX_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return !ix_errf(err, IX_ERR_IO, "%s: read error", path);
    }
    *out = buf;
    *size = n;
    return true;
}

void ix_cli_imat_free(imat *m) {
    for (size_t i = 0; i < m->n; i++) {
        free(m->e[i].name);
        free(m->e[i].mean);
    }
    free(m->e);
    free(m->dataset);
    *m = (imat){0};
}

bool ix_cli_imat_read(imat *m, const char *path, ix_errbuf *err) {
    *m = (imat){0};
    uint8_t *buf = NULL;
    size_t size = 0;
    if (!slurp(path, &buf, &size, err)) return false;
    cursor c = {buf, size};
    int32_t n;
    bool ok = false;
    if (!take_i32(&c, &n) || n < 1 || (size_t)n > size / 12) {
        ix_errf(err, IX_ERR_FORMAT, "%s: not an imatrix file (entry count %s)", path,
                size < 4 ? "missing" : "out of range");
        goto done;
    }
    m->e = calloc((size_t)n, sizeof *m->e);
    if (!m->e) {
        ix_errf(err, IX_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        imat_entry *e = &m->e[m->n];
        int32_t len;
        if (!take_i32(&c, &len) || len < 1 || (size_t)len > c.left) {
            ix_errf(err, IX_ERR_FORMAT, "%s: entry %d: bad name length", path, i);
            goto done;
        }
        if (!(e->name = malloc((size_t)len + 1))) goto nomem;
        m->n++;
        take(&c, e->name, (size_t)len);
        e->name[len] = 0;
        if (strlen(e->name) != (size_t)len) {
            ix_errf(err, IX_ERR_FORMAT, "%s: entry %d: name holds a NUL byte", path, i);
            goto done;
        }
        if (!take_i32(&c, &e->ncall) || !take_i32(&c, &e->nval) || e->ncall < 0 || e->nval < 1 ||
            (size_t)e->nval > c.left / 4) {
            ix_errf(err, IX_ERR_FORMAT, "%s: entry '%s': bad call or value count (truncated file?)", path, e->name);
            goto done;
        }
        if (!(e->mean = malloc((size_t)e->nval * sizeof(float)))) goto nomem;
        take(&c, e->mean, (size_t)e->nval * 4);
        for (int32_t j = 0; j < e->nval; j++) {
            if (!isfinite(e->mean[j]) || e->mean[j] < 0.0f) {
                ix_errf(err, IX_ERR_FORMAT, "%s: entry '%s': value %d is %g (must be finite and >= 0)", path,
                        e->name, j, (double)e->mean[j]);
                goto done;
            }
            if (e->ncall > 0) e->mean[j] /= (float)e->ncall;
        }
        for (size_t k = 0; k + 1 < m->n; k++)
            if (!strcmp(m->e[k].name, e->name)) {
                ix_errf(err, IX_ERR_FORMAT, "%s: entry '%s' appears twice", path, e->name);
                goto done;
            }
    }
    int32_t dlen = 0;
    if (c.left > 0) {
        if (!take_i32(&c, &m->last_call) || !take_i32(&c, &dlen) || dlen < 0 || (size_t)dlen > c.left) {
            ix_errf(err, IX_ERR_FORMAT, "%s: bad trailer after the entries", path);
            goto done;
        }
    }
    if (!(m->dataset = malloc((size_t)dlen + 1))) goto nomem;
    take(&c, m->dataset, (size_t)dlen);
    m->dataset[dlen] = 0;
    if (c.left) {
        ix_errf(err, IX_ERR_FORMAT, "%s: %zu unexpected bytes after the trailer", path, c.left);
        goto done;
    }
    ok = true;
    goto done;
nomem:
    ix_errf(err, IX_ERR_NOMEM, "out of memory");
done:
    free(buf);
    if (!ok) ix_cli_imat_free(m);
    return ok;
}

static bool put_i32(FILE *f, int32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)((uint32_t)v >> 8), (uint8_t)((uint32_t)v >> 16), (uint8_t)((uint32_t)v >> 24)};
    return fwrite(b, 1, 4, f) == 4;
}

bool ix_cli_imat_write(const imat *m, const char *path, ix_errbuf *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return !ix_errf(err, IX_ERR_IO, "%s: %s", path, strerror(errno));
    bool ok = put_i32(f, (int32_t)m->n);
    for (size_t i = 0; i < m->n && ok; i++) {
        const imat_entry *e = &m->e[i];
        size_t len = strlen(e->name);
        ok = put_i32(f, (int32_t)len) && fwrite(e->name, 1, len, f) == len && put_i32(f, e->ncall) &&
             put_i32(f, e->nval);
        for (int32_t j = 0; j < e->nval && ok; j++) {
            float v = e->mean[j] * (float)e->ncall;
            ok = fwrite(&v, 4, 1, f) == 1;
        }
    }
    const char *ds = m->dataset ? m->dataset : "";
    size_t dlen = strlen(ds);
    ok = ok && put_i32(f, m->last_call) && put_i32(f, (int32_t)dlen) && fwrite(ds, 1, dlen, f) == dlen;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        remove(path);
        return !ix_errf(err, IX_ERR_IO, "%s: write error", path);
    }
    return true;
}

const imat_entry *ix_cli_imat_find(const imat *m, const char *name) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].name, name)) return &m->e[i];
    return NULL;
}
