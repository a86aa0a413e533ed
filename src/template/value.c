/* inferx template: values. The render's arena and its memory budget, the
 * string builder that keeps track of which bytes are the caller's data,
 * substrings, Python's str(), repr() and json.dumps() (as Hugging Face's
 * tojson calls it: ensure_ascii off, key order kept), equality and ordering
 * with Python's rules, JSON input, and the UTF-8 helpers. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_int.h"

/* ---- arena ---------------------------------------------------------------------- */

#define CHUNK_BYTES ((size_t)16384)

typedef struct tchunk {
    struct tchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} tchunk;

typedef struct tbig {
    struct tbig *next;
    void *p;
} tbig;

bool ix__arena_charge(tarena *a, size_t n_bytes) {
    if (a->fail != IX_OK) return false;
    if (n_bytes > a->limit_bytes - a->used_bytes) {
        a->fail = IX_ERR_RANGE;
        return false;
    }
    a->used_bytes += n_bytes;
    return true;
}

void ix__arena_uncharge(tarena *a, size_t n_bytes) { a->used_bytes -= n_bytes < a->used_bytes ? n_bytes : a->used_bytes; }

bool ix__arena_adopt(tarena *a, void *heap_block) {
    tbig *b = ix__arena_alloc(a, sizeof *b);
    if (!b) return false;
    b->p = heap_block;
    b->next = a->big;
    a->big = b;
    return true;
}

void *ix__arena_alloc(tarena *a, size_t n_bytes) {
    if (a->fail != IX_OK) return NULL;
    size_t n = (n_bytes + 15) & ~(size_t)15;
    if (n < n_bytes) {
        a->fail = IX_ERR_RANGE;
        return NULL;
    }
    if (n > CHUNK_BYTES / 4) {
        if (!ix__arena_charge(a, n)) return NULL;
        void *p = ix_calloc(1, n);
        if (!p) {
            a->fail = IX_ERR_NOMEM;
            return NULL;
        }
        if (!ix__arena_adopt(a, p)) {
            ix_free(p);
            return NULL;
        }
        return p;
    }
    tchunk *c = a->chunks;
    if (!c || c->size - c->used < n) {
        if (!ix__arena_charge(a, CHUNK_BYTES)) return NULL;
        c = ix_calloc(1, sizeof *c + CHUNK_BYTES);
        if (!c) {
            a->fail = IX_ERR_NOMEM;
            return NULL;
        }
        c->size = CHUNK_BYTES;
        c->next = a->chunks;
        a->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

void ix__arena_free(tarena *a) {
    for (tbig *b = a->big; b; b = b->next) ix_free(b->p); /* the nodes live in chunks */
    for (tchunk *c = a->chunks, *next; c; c = next) {
        next = c->next;
        ix_free(c);
    }
    a->chunks = NULL;
    a->big = NULL;
    a->used_bytes = 0;
}

/* ---- the string builder ------------------------------------------------------------ */

void ix__buf_init(tbuf *b, tarena *charge, size_t limit) {
    memset(b, 0, sizeof *b);
    b->charge = charge;
    b->limit = limit;
}

static bool buf_grow(tbuf *b, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : 64 / elem + 1;
    while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    if (ncap > SIZE_MAX / elem) {
        b->fail = IX_ERR_RANGE;
        return false;
    }
    if (b->charge && !ix__arena_charge(b->charge, (ncap - *cap) * elem)) {
        b->fail = b->charge->fail;
        return false;
    }
    void *q = ix_realloc(*p, ncap * elem);
    if (!q) {
        if (b->charge) ix__arena_uncharge(b->charge, (ncap - *cap) * elem);
        b->fail = IX_ERR_NOMEM;
        return false;
    }
    *p = q;
    *cap = ncap;
    return true;
}

static bool add_span(tbuf *b, size_t off, size_t n) {
    if (!n) return true;
    if (b->nsp && b->sp[b->nsp - 1].off + b->sp[b->nsp - 1].len == off) {
        b->sp[b->nsp - 1].len += n;
        return true;
    }
    if (!buf_grow(b, (void **)&b->sp, &b->capsp, b->nsp + 1, sizeof *b->sp)) return false;
    b->sp[b->nsp++] = (ix_template_span){off, n};
    return true;
}

bool ix__buf_put(tbuf *b, const char *p, size_t n, bool data) {
    if (b->fail != IX_OK) return false;
    if (n > b->limit - b->len) {
        b->fail = IX_ERR_TOO_LONG;
        return false;
    }
    if (!buf_grow(b, (void **)&b->p, &b->cap, b->len + n + 1, 1)) return false;
    if (n) memcpy(b->p + b->len, p, n);
    if (data && !add_span(b, b->len, n)) return false;
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool ix__buf_putc(tbuf *b, char ch) { return ix__buf_put(b, &ch, 1, false); }

bool ix__buf_put_str(tbuf *b, const tv *s) {
    size_t off = b->len;
    if (!ix__buf_put(b, s->u.s, s->n, s->flag == TS_DATA)) return false;
    if (s->flag == TS_MIXED)
        for (size_t k = 0; k < s->sp->n; k++)
            if (!add_span(b, off + s->sp->s[k].off, s->sp->s[k].len)) return false;
    return true;
}

void ix__buf_free(tbuf *b) {
    if (b->charge) ix__arena_uncharge(b->charge, b->cap + b->capsp * sizeof *b->sp);
    ix_free(b->p);
    ix_free(b->sp);
    b->p = NULL;
    b->sp = NULL;
    b->len = b->cap = b->nsp = b->capsp = 0;
}

bool ix__buf_take(rctx *c, tbuf *b, tv *out) {
    if (b->fail != IX_OK) return ix__tpl_fail_alloc(c, NULL, b->fail);
    if (!b->len) {
        ix__buf_free(b);
        *out = ix__tv_str("", 0, TS_CLEAN);
        return true;
    }
    uint8_t flag = TS_CLEAN;
    const tspans *sp = NULL;
    if (b->nsp == 1 && b->sp[0].off == 0 && b->sp[0].len == b->len) {
        flag = TS_DATA;
    } else if (b->nsp) {
        tspans *s = ix__tpl_alloc(c, NULL, sizeof *s + b->nsp * sizeof s->s[0]);
        if (!s) return false;
        s->n = b->nsp;
        memcpy(s->s, b->sp, b->nsp * sizeof s->s[0]);
        flag = TS_MIXED;
        sp = s;
    }
    if (!ix__arena_adopt(&c->ar, b->p)) return ix__tpl_fail_alloc(c, NULL, c->ar.fail);
    *out = ix__tv_str(b->p, b->len, flag);
    out->sp = sp;
    if (b->charge) ix__arena_uncharge(b->charge, b->capsp * sizeof *b->sp);
    ix_free(b->sp);
    b->p = NULL;
    b->sp = NULL;
    b->len = b->cap = b->nsp = b->capsp = 0;
    return true;
}

/* ---- strings ---------------------------------------------------------------------------- */

bool ix__str_sub(rctx *c, const tnode *at, const tv *s, size_t off, size_t n, tv *out) {
    tv r = ix__tv_str(s->u.s + off, n, s->flag == TS_MIXED ? TS_CLEAN : s->flag);
    if (s->flag == TS_MIXED && n) {
        size_t hits = 0, end = off + n;
        const ix_template_span *one = NULL;
        for (size_t k = 0; k < s->sp->n; k++) {
            const ix_template_span *p = &s->sp->s[k];
            if (p->off < end && p->off + p->len > off) {
                hits++;
                one = p;
            }
        }
        if (hits == 1 && one->off <= off && one->off + one->len >= end) {
            r.flag = TS_DATA;
        } else if (hits) {
            tspans *sp = ix__tpl_alloc(c, at, sizeof *sp + hits * sizeof sp->s[0]);
            if (!sp) return false;
            for (size_t k = 0; k < s->sp->n; k++) {
                const ix_template_span *p = &s->sp->s[k];
                if (p->off >= end || p->off + p->len <= off) continue;
                size_t a = p->off > off ? p->off : off, z = p->off + p->len < end ? p->off + p->len : end;
                sp->s[sp->n++] = (ix_template_span){a - off, z - a};
            }
            r.flag = TS_MIXED;
            r.sp = sp;
        }
    }
    *out = r;
    return true;
}

bool ix__str_copy(rctx *c, const tnode *at, const char *p, size_t n, uint8_t flag, tv *out) {
    char *q = ix__tpl_alloc(c, at, n + 1);
    if (!q) return false;
    if (n) memcpy(q, p, n);
    *out = ix__tv_str(q, n, flag);
    return true;
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

bool ix__utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint64_t w; /* ASCII, 8 bytes at a time */
        while (i + 8 <= n && (memcpy(&w, p + i, 8), (w & 0x8080808080808080ull) == 0)) i += 8;
        if (i >= n) break;
        unsigned char b = p[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if ((b & 0xE0) == 0xC0) {
            k = 1;
            cp = b & 0x1F;
            min = 0x80;
        } else if ((b & 0xF0) == 0xE0) {
            k = 2;
            cp = b & 0x0F;
            min = 0x800;
        } else if ((b & 0xF8) == 0xF0) {
            k = 3;
            cp = b & 0x07;
            min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= k) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k + 1;
    }
    return true;
}

uint32_t ix__utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned char b = p[*i];
    size_t k = b < 0x80 ? 0 : (b & 0xE0) == 0xC0 ? 1 : (b & 0xF0) == 0xE0 ? 2 : (b & 0xF8) == 0xF0 ? 3 : 0;
    if (*i + k >= n) k = 0;
    uint32_t cp = k == 0 ? b : k == 1 ? (b & 0x1Fu) : k == 2 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t j = 1; j <= k; j++) cp = cp << 6 | (p[*i + j] & 0x3Fu);
    *i += k + 1;
    return cp;
}

uint32_t ix__utf8_prev(const char *s, size_t *i) {
    size_t j = *i;
    if (j == 0) return 0;
    j--;
    size_t lim = *i >= 4 ? *i - 4 : 0;
    while (j > lim && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
    size_t k = j;
    uint32_t cp = ix__utf8_next(s, *i, &k);
    *i = j;
    return cp;
}

size_t ix__utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t ix__utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

bool ix__is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

uint32_t ix__cp_upper(uint32_t cp) {
    if (cp < 0x80) return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) || (cp >= 0x3B1 && cp <= 0x3CB && cp != 0x3C2) ||
        (cp >= 0x430 && cp <= 0x44F) || (cp >= 0xFF41 && cp <= 0xFF5A))
        return cp - 0x20;
    if (cp >= 0x450 && cp <= 0x45F) return cp - 0x50;
    if (cp == 0xFF) return 0x178;
    if (cp == 0xB5) return 0x39C;
    if (cp == 0x3C2) return 0x3A3;
    if (cp == 0x3AC) return 0x386;
    if (cp >= 0x3AD && cp <= 0x3AF) return cp - 0x25;
    if (cp == 0x3CC) return 0x38C;
    if (cp == 0x3CD || cp == 0x3CE) return cp - 0x3F;
    if (cp == 0x131) return 'I';
    if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return cp & ~1u;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return cp & 1 ? cp : cp - 1;
    return cp;
}

uint32_t ix__cp_lower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) || (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) ||
        (cp >= 0x410 && cp <= 0x42F) || (cp >= 0xFF21 && cp <= 0xFF3A))
        return cp + 0x20;
    if (cp >= 0x400 && cp <= 0x40F) return cp + 0x50;
    if (cp == 0x178) return 0xFF;
    if (cp == 0x386) return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A) return cp + 0x25;
    if (cp == 0x38C) return 0x3CC;
    if (cp == 0x38E || cp == 0x38F) return cp + 0x3F;
    if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14A && cp <= 0x177)) return cp | 1;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) return cp & 1 ? cp + 1 : cp;
    return cp;
}

/* ---- basic properties ------------------------------------------------------------------------- */

bool ix__tv_truthy(const tv *v) {
    switch ((tkind)v->kind) {
    case TV_BOOL: return v->u.b;
    case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0.0;
    case TV_STR:
    case TV_LIST: return v->n != 0;
    case TV_DICT: return v->u.d->n != 0;
    case TV_NS:
    case TV_FUNC:
    case TV_LOOP: return true;
    case TV_UNDEF:
    case TV_NONE:
    case TV_MISSING: return false;
    }
    return false;
}

const char *ix__tv_type(const tv *v) {
    switch ((tkind)v->kind) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v->flag & TL_TUPLE ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_FUNC: return v->u.fn->kind == TF_MACRO ? "Macro" : "function";
    case TV_LOOP: return "LoopContext";
    case TV_MISSING: return "missing";
    }
    return "?";
}


static bool key_eq(const tv *a, const tv *b) {
    return a->kind == TV_STR && b->kind == TV_STR && a->n == b->n && memcmp(a->u.s, b->u.s, a->n) == 0;
}

int ix__tv_eq(rctx *c, const tnode *at, const tv *a, const tv *b) {
    if (ix__tv_is_num(a) && ix__tv_is_num(b)) {
        if (a->kind != TV_FLOAT && b->kind != TV_FLOAT) return ix__tv_int_of(a) == ix__tv_int_of(b);
        return ix__tv_float_of(a) == ix__tv_float_of(b);
    }
    if (a->kind != b->kind) return 0;
    switch ((tkind)a->kind) {
    case TV_STR:
        c->steps += a->n >> 8;
        return a->n == b->n && memcmp(a->u.s, b->u.s, a->n) == 0;
    case TV_UNDEF:
    case TV_NONE:
    case TV_MISSING: return 1;
    case TV_LIST: {
        if (a->n != b->n || (a->flag & TL_TUPLE) != (b->flag & TL_TUPLE)) return 0;
        if (a->u.items == b->u.items) return 1;
        if (!ix__tpl_enter(c, at)) return -1;
        c->steps += a->n;
        int r = 1;
        for (size_t k = 0; k < a->n && r == 1; k++) r = ix__tv_eq(c, at, &a->u.items[k], &b->u.items[k]);
        ix__tpl_leave(c);
        return r;
    }
    case TV_DICT: {
        const tdict *x = a->u.d, *y = b->u.d;
        if (x == y) return 1;
        if (x->n != y->n) return 0;
        if (!ix__tpl_enter(c, at)) return -1;
        c->steps += x->n; /* one lookup per key */
        int r = 1;
        for (size_t k = 0; k < x->n && r == 1; k++) {
            const tv *w = ix__dict_get(c, at, y, &x->e[k].k);
            r = w ? ix__tv_eq(c, at, &x->e[k].v, w) : c->st != IX_OK ? -1 : 0;
        }
        ix__tpl_leave(c);
        return r;
    }
    case TV_NS: return a->u.d == b->u.d;
    case TV_FUNC: return a->u.fn == b->u.fn;
    case TV_LOOP: return a->u.loop == b->u.loop;
    default: return 0;
    }
}

static int fold_cmp(const tv *a, const tv *b) {
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t k = 0; k < n; k++) {
        unsigned char x = (unsigned char)a->u.s[k], y = (unsigned char)b->u.s[k];
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x + 32);
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y + 32);
        if (x != y) return x < y ? -1 : 1;
    }
    return a->n < b->n ? -1 : a->n > b->n;
}

bool ix__tv_cmp(rctx *c, const tnode *at, const tv *a, const tv *b, bool fold, int *res) {
    if (ix__tv_is_num(a) && ix__tv_is_num(b)) {
        if (a->kind != TV_FLOAT && b->kind != TV_FLOAT) {
            int64_t x = ix__tv_int_of(a), y = ix__tv_int_of(b);
            *res = x < y ? -1 : x > y;
        } else {
            double x = ix__tv_float_of(a), y = ix__tv_float_of(b);
            *res = x < y ? -1 : x > y;
        }
        return true;
    }
    if (a->kind == TV_STR && b->kind == TV_STR) {
        c->steps += (a->n < b->n ? a->n : b->n) >> 8;
        if (fold) {
            *res = fold_cmp(a, b);
            return true;
        }
        size_t n = a->n < b->n ? a->n : b->n;
        int r = n ? memcmp(a->u.s, b->u.s, n) : 0;
        *res = r ? (r < 0 ? -1 : 1) : a->n < b->n ? -1 : a->n > b->n;
        return true;
    }
    if (a->kind == TV_LIST && b->kind == TV_LIST && (a->flag & TL_TUPLE) == (b->flag & TL_TUPLE)) {
        if (!ix__tpl_enter(c, at)) return false;
        size_t n = a->n < b->n ? a->n : b->n;
        for (size_t k = 0; k < n; k++) {
            int eq = ix__tv_eq(c, at, &a->u.items[k], &b->u.items[k]);
            if (eq < 0) return false;
            if (!eq) {
                bool ok = ix__tv_cmp(c, at, &a->u.items[k], &b->u.items[k], fold, res);
                ix__tpl_leave(c);
                return ok;
            }
        }
        ix__tpl_leave(c);
        *res = a->n < b->n ? -1 : a->n > b->n;
        return true;
    }
    return ix__tpl_fail(c, at, IX_ERR_TYPE, "'<' not supported between instances of '%s' and '%s'", ix__tv_type(a),
                        ix__tv_type(b));
}

/* ---- dicts ------------------------------------------------------------------------------------- */

const tv *ix__dict_get_str(const tdict *d, const char *name, size_t len) {
    for (size_t k = 0; k < d->n; k++) {
        const tv *key = &d->e[k].k;
        if (key->kind == TV_STR && key->n == len && memcmp(key->u.s, name, len) == 0) return &d->e[k].v;
    }
    return NULL;
}

const tv *ix__dict_get(rctx *c, const tnode *at, const tdict *d, const tv *k) {
    if (k->kind == TV_STR) return ix__dict_get_str(d, k->u.s, k->n);
    for (size_t i = 0; i < d->n; i++) {
        int eq = key_eq(&d->e[i].k, k) ? 1 : ix__tv_eq(c, at, &d->e[i].k, k);
        if (eq < 0) return NULL;
        if (eq) return &d->e[i].v;
    }
    return NULL;
}

bool ix__dict_set(rctx *c, const tnode *at, tdict *d, const tv *k, const tv *v) {
    for (size_t i = 0; i < d->n; i++) {
        int eq = ix__tv_eq(c, at, &d->e[i].k, k);
        if (eq < 0) return false;
        if (eq) {
            d->e[i].v = *v;
            return true;
        }
    }
    if (!ix__tpl_grow(c, at, (void **)&d->e, d->n, &d->cap, 4, sizeof *d->e)) return false;
    d->e[d->n++] = (tpair){*k, *v};
    return true;
}

/* ---- str() and repr() ----------------------------------------------------------------------------- */

size_t ix__fmt_float(double x, char *buf) {
    if (isnan(x)) return (size_t)snprintf(buf, 32, "nan");
    if (isinf(x)) return (size_t)snprintf(buf, 32, x < 0 ? "-inf" : "inf");
    if (x == 0) return (size_t)snprintf(buf, 32, signbit(x) ? "-0.0" : "0.0");
    char e[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    const char *p = e;
    size_t o = 0;
    if (*p == '-') {
        buf[o++] = '-';
        p++;
    }
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && nd < 20) digits[nd++] = *p;
    int exp = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) buf[o++] = i < nd ? digits[i] : '0';
            buf[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) buf[o++] = digits[i];
            else
                buf[o++] = '0';
        } else {
            buf[o++] = '0';
            buf[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) buf[o++] = '0';
            for (int i = 0; i < nd; i++) buf[o++] = digits[i];
        }
    } else {
        buf[o++] = digits[0];
        if (nd > 1) {
            buf[o++] = '.';
            for (int i = 1; i < nd; i++) buf[o++] = digits[i];
        }
        o += (size_t)snprintf(buf + o, 12, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    buf[o] = 0;
    return o;
}

static bool put_lit(tbuf *b, const char *s) { return ix__buf_put(b, s, strlen(s), false); }

static bool put_scalar(tbuf *b, const tv *v) {
    char tmp[48];
    size_t n;
    switch ((tkind)v->kind) {
    case TV_INT: n = (size_t)snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i); break;
    case TV_FLOAT: n = ix__fmt_float(v->u.f, tmp); break;
    case TV_BOOL: return put_lit(b, v->u.b ? "True" : "False");
    case TV_NONE: return put_lit(b, "None");
    default: return true;
    }
    return ix__buf_put(b, tmp, n, false);
}

/* Python doesn't print these as they are in repr(). */
static bool repr_escaped(uint32_t cp) {
    return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) ||
           (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 ||
           (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB);
}

static bool put_repr_str(tbuf *b, const tv *s) {
    bool sq = memchr(s->u.s, '\'', s->n) != NULL, dq = memchr(s->u.s, '"', s->n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    bool data = s->flag != TS_CLEAN;
    if (!ix__buf_putc(b, q)) return false;
    for (size_t i = 0; i < s->n;) {
        size_t start = i;
        uint32_t cp = ix__utf8_next(s->u.s, s->n, &i);
        char tmp[12];
        size_t n = 0;
        if (cp == (uint32_t)q || cp == '\\') {
            tmp[n++] = '\\';
            tmp[n++] = (char)cp;
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            tmp[n++] = '\\';
            tmp[n++] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
        } else if (repr_escaped(cp)) {
            n = (size_t)snprintf(tmp, sizeof tmp, cp < 0x100 ? "\\x%02x" : "\\u%04x", (unsigned)cp);
        } else {
            if (!ix__buf_put(b, s->u.s + start, i - start, data)) return false;
            continue;
        }
        if (!ix__buf_put(b, tmp, n, data)) return false;
    }
    return ix__buf_putc(b, q);
}

bool ix__tv_put_repr(rctx *c, const tnode *at, tbuf *b, const tv *v) {
    switch ((tkind)v->kind) {
    case TV_STR: return put_repr_str(b, v) || ix__tpl_fail_alloc(c, at, b->fail);
    case TV_UNDEF: return put_lit(b, "Undefined") || ix__tpl_fail_alloc(c, at, b->fail);
    case TV_LIST: {
        bool tuple = v->flag & TL_TUPLE;
        if (!ix__tpl_enter(c, at)) return false;
        bool ok = ix__buf_putc(b, tuple ? '(' : '[');
        for (size_t k = 0; ok && k < v->n; k++)
            ok = (!k || put_lit(b, ", ")) && ix__tv_put_repr(c, at, b, &v->u.items[k]);
        if (ok && tuple && v->n == 1) ok = ix__buf_putc(b, ',');
        ok = ok && ix__buf_putc(b, tuple ? ')' : ']');
        ix__tpl_leave(c);
        return ok || ix__tpl_fail_alloc(c, at, b->fail);
    }
    case TV_DICT:
    case TV_NS: {
        const tdict *d = v->u.d;
        if (!ix__tpl_enter(c, at)) return false;
        bool ok = v->kind == TV_DICT || put_lit(b, "<Namespace ");
        ok = ok && ix__buf_putc(b, '{');
        for (size_t k = 0; ok && k < d->n; k++)
            ok = (!k || put_lit(b, ", ")) && ix__tv_put_repr(c, at, b, &d->e[k].k) && put_lit(b, ": ") &&
                 ix__tv_put_repr(c, at, b, &d->e[k].v);
        ok = ok && ix__buf_putc(b, '}') && (v->kind == TV_DICT || ix__buf_putc(b, '>'));
        ix__tpl_leave(c);
        return ok || ix__tpl_fail_alloc(c, at, b->fail);
    }
    default: return ix__tv_put_str(c, at, b, v);
    }
}

bool ix__tv_put_str(rctx *c, const tnode *at, tbuf *b, const tv *v) {
    bool ok;
    switch ((tkind)v->kind) {
    case TV_STR: ok = ix__buf_put_str(b, v); break;
    case TV_UNDEF:
    case TV_MISSING: return true;
    case TV_LIST:
    case TV_DICT:
    case TV_NS: return ix__tv_put_repr(c, at, b, v);
    case TV_FUNC:
        if (v->u.fn->kind == TF_MACRO) {
            ok = put_lit(b, "<Macro '") && ix__buf_put(b, v->u.fn->macro->s, v->u.fn->macro->slen, false) && put_lit(b, "'>");
        } else {
            ok = put_lit(b, "<built-in function>");
        }
        break;
    case TV_LOOP: {
        char tmp[64];
        int n = snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v->u.loop->i + 1, v->u.loop->n);
        ok = ix__buf_put(b, tmp, (size_t)n, false);
        break;
    }
    default: ok = put_scalar(b, v); break;
    }
    return ok || ix__tpl_fail_alloc(c, at, b->fail);
}

bool ix__tv_to_str(rctx *c, const tnode *at, const tv *v, tv *out) {
    if (v->kind == TV_STR) {
        *out = *v;
        return true;
    }
    if (v->kind == TV_UNDEF || v->kind == TV_MISSING) {
        *out = ix__tv_str("", 0, TS_CLEAN);
        return true;
    }
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    if (!ix__tv_put_str(c, at, &b, v)) {
        ix__buf_free(&b);
        return false;
    }
    return ix__buf_take(c, &b, out);
}

/* ---- tojson ---------------------------------------------------------------------------------------- */

static bool put_json_str(tbuf *b, const char *s, size_t n, bool data, bool ensure_ascii) {
    if (!ix__buf_putc(b, '"')) return false;
    size_t run = 0; /* start of the bytes not yet written */
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = ix__utf8_next(s, n, &i);
        char tmp[16];
        size_t k = 0;
        if (cp == '"' || cp == '\\') {
            tmp[k++] = '\\';
            tmp[k++] = (char)cp;
        } else if (cp == '\n' || cp == '\r' || cp == '\t' || cp == '\b' || cp == '\f') {
            tmp[k++] = '\\';
            tmp[k++] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : cp == '\t' ? 't' : cp == '\b' ? 'b' : 'f';
        } else if (cp < 0x20 || (ensure_ascii && cp >= 0x80)) {
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                k = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else {
                k = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            }
        } else {
            continue;
        }
        if (!ix__buf_put(b, s + run, start - run, data) || !ix__buf_put(b, tmp, k, data)) return false;
        run = i;
    }
    return ix__buf_put(b, s + run, n - run, data) && ix__buf_putc(b, '"');
}

static bool put_json_float(tbuf *b, double x) {
    if (isnan(x)) return put_lit(b, "NaN");
    if (isinf(x)) return put_lit(b, x < 0 ? "-Infinity" : "Infinity");
    char tmp[48];
    return ix__buf_put(b, tmp, ix__fmt_float(x, tmp), false);
}

static bool put_newline_indent(tbuf *b, const tjson_opts *o, uint32_t level) {
    if (!ix__buf_putc(b, '\n')) return false;
    for (uint32_t k = 0; k < level; k++)
        if (!ix__buf_put(b, o->indent, o->indent_len, false)) return false;
    return true;
}

static bool put_json_key(rctx *c, const tnode *at, tbuf *b, const tv *k, const tjson_opts *o) {
    char tmp[48];
    switch ((tkind)k->kind) {
    case TV_STR: return put_json_str(b, k->u.s, k->n, k->flag != TS_CLEAN, o->ensure_ascii);
    case TV_INT: return ix__buf_put(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "\"%lld\"", (long long)k->u.i), false);
    case TV_FLOAT: {
        tmp[0] = '"';
        size_t n = 1 + ix__fmt_float(k->u.f, tmp + 1);
        tmp[n++] = '"';
        return ix__buf_put(b, tmp, n, false);
    }
    case TV_BOOL: return put_lit(b, k->u.b ? "\"true\"" : "\"false\"");
    case TV_NONE: return put_lit(b, "\"null\"");
    default:
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "tojson: keys must be str, int, float, bool or None, not %s",
                            ix__tv_type(k));
    }
}

static bool json_rec(rctx *c, const tnode *at, tbuf *b, const tv *v, const tjson_opts *o, uint32_t level);

static bool json_dict(rctx *c, const tnode *at, tbuf *b, const tdict *d, const tjson_opts *o, uint32_t level) {
    if (!d->n) return put_lit(b, "{}");
    const tpair **order = ix__tpl_alloc_n(c, at, d->n, sizeof *order);
    if (!order) return false;
    for (size_t k = 0; k < d->n; k++) order[k] = &d->e[k];
    if (o->sort_keys) /* insertion sort: dicts here are small */
        for (size_t k = 1; k < d->n; k++)
            for (size_t j = k; j > 0; j--) {
                int r;
                if (!ix__tv_cmp(c, at, &order[j - 1]->k, &order[j]->k, false, &r)) return false;
                if (r <= 0) break;
                const tpair *t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
    if (!ix__buf_putc(b, '{')) return false;
    for (size_t k = 0; k < d->n; k++) {
        if (k && !ix__buf_put(b, o->item_sep, o->item_sep_len, false)) return false;
        if (o->indent && !put_newline_indent(b, o, level + 1)) return false;
        if (!put_json_key(c, at, b, &order[k]->k, o) || !ix__buf_put(b, o->key_sep, o->key_sep_len, false) ||
            !json_rec(c, at, b, &order[k]->v, o, level + 1))
            return false;
    }
    if (o->indent && !put_newline_indent(b, o, level)) return false;
    return ix__buf_putc(b, '}');
}

static bool json_rec(rctx *c, const tnode *at, tbuf *b, const tv *v, const tjson_opts *o, uint32_t level) {
    char tmp[48];
    bool ok;
    switch ((tkind)v->kind) {
    case TV_STR: ok = put_json_str(b, v->u.s, v->n, v->flag != TS_CLEAN, o->ensure_ascii); break;
    case TV_INT: ok = ix__buf_put(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%lld", (long long)v->u.i), false); break;
    case TV_FLOAT: ok = put_json_float(b, v->u.f); break;
    case TV_BOOL: ok = put_lit(b, v->u.b ? "true" : "false"); break;
    case TV_NONE: ok = put_lit(b, "null"); break;
    case TV_LIST:
        if (!v->n) {
            ok = put_lit(b, "[]");
            break;
        }
        if (!ix__tpl_enter(c, at)) return false;
        ok = ix__buf_putc(b, '[');
        for (size_t k = 0; ok && k < v->n; k++) {
            ok = (!k || ix__buf_put(b, o->item_sep, o->item_sep_len, false)) &&
                 (!o->indent || put_newline_indent(b, o, level + 1)) && json_rec(c, at, b, &v->u.items[k], o, level + 1);
        }
        ok = ok && (!o->indent || put_newline_indent(b, o, level)) && ix__buf_putc(b, ']');
        ix__tpl_leave(c);
        break;
    case TV_DICT:
        if (!ix__tpl_enter(c, at)) return false;
        ok = json_dict(c, at, b, v->u.d, o, level);
        ix__tpl_leave(c);
        break;
    default:
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "tojson: object of type '%s' is not JSON serializable",
                            ix__tv_type(v));
    }
    return ok || ix__tpl_fail_alloc(c, at, b->fail);
}

bool ix__tv_put_json(rctx *c, const tnode *at, tbuf *b, const tv *v, const tjson_opts *o) {
    tjson_opts x = *o;
    if (!x.item_sep) {
        x.item_sep = x.indent ? "," : ", ";
        x.item_sep_len = strlen(x.item_sep);
    }
    if (!x.key_sep) {
        x.key_sep = ": ";
        x.key_sep_len = 2;
    }
    return json_rec(c, at, b, v, &x, 0);
}

/* ---- JSON input ------------------------------------------------------------------------------------- */

static bool from_json(rctx *c, const json_t *j, tv *out) {
    switch (json_typeof(j)) {
    case JSON_STRING: {
        const char *s = json_string_value(j);
        size_t n = json_string_length(j);
        if (!ix__utf8_valid(s, n)) return ix__tpl_fail(c, NULL, IX_ERR_UTF8, "a string in the input is not valid UTF-8");
        *out = ix__tv_str(s, n, TS_DATA);
        return true;
    }
    case JSON_INTEGER: *out = ix__tv_int((int64_t)json_integer_value(j)); return true;
    case JSON_REAL: *out = ix__tv_float(json_real_value(j)); return true;
    case JSON_TRUE: *out = ix__tv_bool(true); return true;
    case JSON_FALSE: *out = ix__tv_bool(false); return true;
    case JSON_NULL: *out = ix__tv_none(); return true;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tv *items = ix__tpl_alloc_n(c, NULL, n ? n : 1, sizeof *items);
        if (!items || !ix__tpl_enter(c, NULL)) return false;
        for (size_t k = 0; k < n; k++)
            if (!from_json(c, json_array_get(j, k), &items[k])) return false;
        ix__tpl_leave(c);
        *out = ix__tv_list(items, n, 0);
        return true;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        tdict *d = ix__tpl_alloc(c, NULL, sizeof *d);
        tpair *e = ix__tpl_alloc_n(c, NULL, n ? n : 1, sizeof *e);
        if (!d || !e || !ix__tpl_enter(c, NULL)) return false;
        d->e = e;
        d->cap = n;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            size_t kl = strlen(key);
            if (!ix__utf8_valid(key, kl))
                return ix__tpl_fail(c, NULL, IX_ERR_UTF8, "a key in the input is not valid UTF-8");
            tpair *p = &e[d->n++];
            p->k = ix__tv_str(key, kl, TS_DATA);
            if (!from_json(c, val, &p->v)) return false;
        }
        ix__tpl_leave(c);
        *out = ix__tv_dict(d);
        return true;
    }
    }
    return ix__tpl_fail(c, NULL, IX_ERR_INVALID, "unknown JSON value");
}

bool ix__tv_from_json(rctx *c, const json_t *j, tv *out) { return from_json(c, j, out); }
