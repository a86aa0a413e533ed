/*
 * The rule builder the GBNF parser emits into, UTF-8 character classes, and
 * the compiled form: rules flattened into one element array, checked (root,
 * undefined rules, rules that can never complete, left recursion) and given
 * byte classes. Every check is linear in the grammar's size (worklists, no
 * fixpoint loops over all rules), so a grammar at the size limits compiles in
 * milliseconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

typedef struct brule {
    gram_elem *e; /* alternatives, each ended by GRAM_END */
    int32_t n, cap;
    char *name;
    size_t off;       /* definition, or first reference while undefined */
    bool defined;
    int32_t n_helpers; /* helpers named after this rule so far */
} brule;

struct gram_builder {
    const char *text;
    size_t len;
    ix_errbuf *err;
    brule *rules;
    int32_t n_rules, cap_rules;
    int32_t *name_ht; /* (ht_cap) named rule id + 1, 0 = empty */
    uint32_t ht_cap;
    gram_set *sets;
    int32_t n_sets, cap_sets;
    int32_t *set_ht; /* (set_ht_cap) set id + 1 */
    uint32_t set_ht_cap;
    size_t n_elems;
};

static uint32_t fnv1a(const void *p, size_t n) {
    const uint8_t *s = p;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

ix_status ix__gram_builder_create(gram_builder **out, const char *text, size_t len,
                                  ix_errbuf *err) {
    gram_builder *b = ix_calloc(1, sizeof *b);
    if (!b) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    b->text = text;
    b->len = len;
    b->err = err;
    b->ht_cap = 64;
    b->set_ht_cap = 64;
    b->name_ht = ix_calloc(b->ht_cap, sizeof *b->name_ht);
    b->set_ht = ix_calloc(b->set_ht_cap, sizeof *b->set_ht);
    if (!b->name_ht || !b->set_ht) {
        ix__gram_builder_destroy(b);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    *out = b;
    return IX_OK;
}

void ix__gram_builder_destroy(gram_builder *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n_rules; i++) {
        ix_free(b->rules[i].e);
        ix_free(b->rules[i].name);
    }
    ix_free(b->rules);
    ix_free(b->name_ht);
    ix_free(b->sets);
    ix_free(b->set_ht);
    ix_free(b);
}

static void line_col(const char *text, size_t len, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
            ++*col;
        }
    }
}

ix_status ix__gram_errf(gram_builder *b, ix_status s, size_t off, const char *fmt, ...) {
    if (!b->err) return s;
    int line, col;
    line_col(b->text, b->len, off, &line, &col);
    char msg[IX_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ix_errf(b->err, s, "line %d, column %d: %s", line, col, msg);
}

static ix_status nomem(gram_builder *b) { return ix_errf(b->err, IX_ERR_NOMEM, "out of memory"); }

/* ---- rules ------------------------------------------------------------------ */

static ix_status new_rule(gram_builder *b, char *name, size_t off, int32_t *id) {
    if (!name) return nomem(b);
    if (b->n_rules >= IX_GRAMMAR_MAX_RULES) {
        ix_free(name);
        return ix__gram_errf(b, IX_ERR_TOO_LONG, off, "more than %d rules (groups and repetitions count)",
                             IX_GRAMMAR_MAX_RULES);
    }
    if (b->n_rules == b->cap_rules) {
        int32_t cap = b->cap_rules ? b->cap_rules * 2 : 64;
        brule *r = ix_realloc(b->rules, (size_t)cap * sizeof *r);
        if (!r) {
            ix_free(name);
            return nomem(b);
        }
        b->rules = r;
        b->cap_rules = cap;
    }
    brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->off = off;
    *id = b->n_rules++;
    return IX_OK;
}

static ix_status name_ht_grow(gram_builder *b) {
    uint32_t cap = b->ht_cap * 2;
    int32_t *ht = ix_calloc(cap, sizeof *ht);
    if (!ht) return nomem(b);
    for (uint32_t i = 0; i < b->ht_cap; i++) {
        int32_t v = b->name_ht[i];
        if (!v) continue;
        const char *nm = b->rules[v - 1].name;
        uint32_t h = fnv1a(nm, strlen(nm)) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = v;
    }
    ix_free(b->name_ht);
    b->name_ht = ht;
    b->ht_cap = cap;
    return IX_OK;
}

ix_status ix__gram_rule_named(gram_builder *b, const char *name, size_t len, size_t off,
                              int32_t *id) {
    uint32_t h = fnv1a(name, len) & (b->ht_cap - 1);
    for (;;) {
        int32_t v = b->name_ht[h];
        if (!v) break;
        const char *nm = b->rules[v - 1].name;
        if (strlen(nm) == len && memcmp(nm, name, len) == 0) {
            *id = v - 1;
            return IX_OK;
        }
        h = (h + 1) & (b->ht_cap - 1);
    }
    ix_status s = new_rule(b, ix_strndup(name, len), off, id);
    if (s != IX_OK) return s;
    b->name_ht[h] = *id + 1;
    /* Named rules are at most half the table. */
    if ((uint32_t)b->n_rules * 2 >= b->ht_cap) return name_ht_grow(b);
    return IX_OK;
}

ix_status ix__gram_rule_define(gram_builder *b, int32_t id, size_t off) {
    brule *r = &b->rules[id];
    if (r->defined) {
        int line, col;
        line_col(b->text, b->len, r->off, &line, &col);
        return ix__gram_errf(b, IX_ERR_FORMAT, off, "rule '%s' is defined twice (first at line %d)",
                             r->name, line);
    }
    r->defined = true;
    r->off = off;
    return IX_OK;
}

ix_status ix__gram_rule_helper(gram_builder *b, int32_t parent, size_t off, int32_t *id) {
    brule *p = &b->rules[parent];
    size_t n = strlen(p->name) + 16;
    char *name = ix_malloc(n);
    if (name) snprintf(name, n, "%s-%d", p->name, ++p->n_helpers);
    ix_status s = new_rule(b, name, off, id);
    if (s == IX_OK) b->rules[*id].defined = true;
    return s;
}

ix_status ix__gram_push(gram_builder *b, int32_t rule, int32_t type, int32_t arg, size_t off) {
    if (b->n_elems >= IX_GRAMMAR_MAX_ELEMS)
        return ix__gram_errf(b, IX_ERR_TOO_LONG, off, "the grammar expands to more than %u elements",
                             IX_GRAMMAR_MAX_ELEMS);
    brule *r = &b->rules[rule];
    if (r->n == r->cap) {
        int32_t cap = r->cap ? r->cap * 2 : 8;
        gram_elem *e = ix_realloc(r->e, (size_t)cap * sizeof *e);
        if (!e) return nomem(b);
        r->e = e;
        r->cap = cap;
    }
    r->e[r->n++] = (gram_elem){type, arg};
    b->n_elems++;
    return IX_OK;
}

int32_t ix__gram_rule_len(const gram_builder *b, int32_t rule) { return b->rules[rule].n; }

static void truncate_rule(gram_builder *b, int32_t rule, int32_t n) {
    b->n_elems -= (size_t)(b->rules[rule].n - n);
    b->rules[rule].n = n;
}

ix_status ix__gram_wrap_tail(gram_builder *b, int32_t rule, int32_t from, size_t off) {
    int32_t h;
    ix_status s = ix__gram_rule_helper(b, rule, off, &h);
    if (s != IX_OK) return s;
    /* b->rules may have moved; index it afresh after every push. */
    for (int32_t i = from; i < b->rules[rule].n && s == IX_OK; i++) {
        gram_elem e = b->rules[rule].e[i];
        s = ix__gram_push(b, h, e.type, e.arg, off);
    }
    if (s == IX_OK) s = ix__gram_push(b, h, GRAM_END, 0, off);
    if (s != IX_OK) return s;
    truncate_rule(b, rule, from);
    return ix__gram_push(b, rule, GRAM_REF, h, off);
}

ix_status ix__gram_repeat(gram_builder *b, int32_t rule, int32_t from, int32_t min, int32_t max,
                          size_t off) {
    ix_status s = IX_OK;
    int32_t len = b->rules[rule].n - from;
    if (len == 0) return IX_OK; /* ""{m,n} is "" */
    if (len > 1 && (s = ix__gram_wrap_tail(b, rule, from, off)) != IX_OK) return s;
    gram_elem x = b->rules[rule].e[from];
    truncate_rule(b, rule, from);
    for (int32_t i = 0; i < min && s == IX_OK; i++) s = ix__gram_push(b, rule, x.type, x.arg, off);
    if (s != IX_OK) return s;
    if (max < 0) { /* h ::= x h | "" */
        int32_t h;
        if ((s = ix__gram_rule_helper(b, rule, off, &h)) != IX_OK) return s;
        if ((s = ix__gram_push(b, h, x.type, x.arg, off)) != IX_OK ||
            (s = ix__gram_push(b, h, GRAM_REF, h, off)) != IX_OK ||
            (s = ix__gram_push(b, h, GRAM_END, 0, off)) != IX_OK ||
            (s = ix__gram_push(b, h, GRAM_END, 0, off)) != IX_OK)
            return s;
        return ix__gram_push(b, rule, GRAM_REF, h, off);
    }
    /* x{0,k} as h_k ::= x h_(k-1) | "", h_1 ::= x | "": nested optionals, each
     * a tail reference, so the parse stack does not grow with k. */
    int32_t prev = -1;
    for (int32_t j = min; j < max; j++) {
        int32_t h;
        if ((s = ix__gram_rule_helper(b, rule, off, &h)) != IX_OK) return s;
        if ((s = ix__gram_push(b, h, x.type, x.arg, off)) != IX_OK) return s;
        if (prev >= 0 && (s = ix__gram_push(b, h, GRAM_REF, prev, off)) != IX_OK) return s;
        if ((s = ix__gram_push(b, h, GRAM_END, 0, off)) != IX_OK ||
            (s = ix__gram_push(b, h, GRAM_END, 0, off)) != IX_OK)
            return s;
        prev = h;
    }
    return prev >= 0 ? ix__gram_push(b, rule, GRAM_REF, prev, off) : IX_OK;
}

/* ---- byte sets ------------------------------------------------------------------ */

static ix_status set_intern(gram_builder *b, const gram_set *set, int32_t *id) {
    uint32_t h = fnv1a(set->bits, sizeof set->bits) & (b->set_ht_cap - 1);
    for (;;) {
        int32_t v = b->set_ht[h];
        if (!v) break;
        if (memcmp(b->sets[v - 1].bits, set->bits, sizeof set->bits) == 0) {
            *id = v - 1;
            return IX_OK;
        }
        h = (h + 1) & (b->set_ht_cap - 1);
    }
    if (b->n_sets == b->cap_sets) {
        int32_t cap = b->cap_sets ? b->cap_sets * 2 : 64;
        gram_set *s = ix_realloc(b->sets, (size_t)cap * sizeof *s);
        if (!s) return nomem(b);
        b->sets = s;
        b->cap_sets = cap;
    }
    b->sets[b->n_sets] = *set;
    *id = b->n_sets++;
    b->set_ht[h] = *id + 1;
    if ((uint32_t)b->n_sets * 2 >= b->set_ht_cap) {
        uint32_t cap = b->set_ht_cap * 2;
        int32_t *ht = ix_calloc(cap, sizeof *ht);
        if (!ht) return nomem(b);
        for (int32_t i = 0; i < b->n_sets; i++) {
            uint32_t k = fnv1a(b->sets[i].bits, sizeof b->sets[i].bits) & (cap - 1);
            while (ht[k]) k = (k + 1) & (cap - 1);
            ht[k] = i + 1;
        }
        ix_free(b->set_ht);
        b->set_ht = ht;
        b->set_ht_cap = cap;
    }
    return IX_OK;
}

static void set_add_range(gram_set *s, unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi; c++) s->bits[c >> 5] |= 1u << (c & 31);
}

static ix_status push_range(gram_builder *b, int32_t rule, unsigned lo, unsigned hi, size_t off) {
    gram_set set = {{0}};
    set_add_range(&set, lo, hi);
    int32_t id;
    ix_status s = set_intern(b, &set, &id);
    return s != IX_OK ? s : ix__gram_push(b, rule, GRAM_SET, id, off);
}

ix_status ix__gram_push_bytes(gram_builder *b, int32_t rule, const uint8_t *str, size_t n,
                              size_t off) {
    ix_status s = IX_OK;
    for (size_t i = 0; i < n && s == IX_OK; i++) s = push_range(b, rule, str[i], str[i], off);
    return s;
}

/* ---- UTF-8 classes --------------------------------------------------------------- */

size_t ix__gram_utf8_encode(uint32_t c, uint8_t out[4]) {
    if (c < 0x80) {
        out[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (uint8_t)(0xc0 | (c >> 6));
        out[1] = (uint8_t)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xe0 | (c >> 12));
        out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | (c >> 18));
    out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (uint8_t)(0x80 | (c & 0x3f));
    return 4;
}

uint32_t ix__gram_utf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    size_t k = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (k > n) k = 1; /* cannot happen on valid UTF-8; never read past the end */
    uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f : c & 0x07;
    for (size_t i = 1; i < k; i++) cp = (cp << 6) | (p[i] & 0x3f);
    *len = k;
    return cp;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

int ix__gram_escape(const char *s, size_t n, size_t *i, bool regex, uint32_t *cp) {
    static const char simple[][2] = {{'n', '\n'}, {'r', '\r'}, {'t', '\t'}, {'f', '\f'}, {'v', '\v'}};
    char e = s[(*i)++];
    for (size_t k = 0; k < IX_ARRAY_LEN(simple); k++)
        if (e == simple[k][0]) {
            *cp = (unsigned char)simple[k][1];
            return GRAM_ESC_OK;
        }
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' && !regex ? 8 : 0;
    if (!digits) {
        bool alnum = (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9');
        if (regex && e == '0') {
            *cp = 0;
            return GRAM_ESC_OK;
        }
        if (e < 0x20 || e >= 0x7f || alnum) return GRAM_ESC_UNKNOWN;
        *cp = (unsigned char)e;
        return GRAM_ESC_OK;
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++, (*i)++) {
        int h = *i < n ? hexval(s[*i]) : -1;
        if (h < 0) return GRAM_ESC_HEX;
        v = v * 16 + (uint32_t)h;
    }
    *cp = v;
    return v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff) ? GRAM_ESC_NOT_CHAR : GRAM_ESC_OK;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

size_t ix__gram_ranges_normalize(uint32_t *r, size_t n, bool negate) {
    if (n > 1) qsort(r, n, 2 * sizeof *r, cmp_range); /* r may be NULL when n is 0 */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && r[2 * i] <= r[2 * k - 1] + 1) {
            if (r[2 * i + 1] > r[2 * k - 1]) r[2 * k - 1] = r[2 * i + 1];
        } else {
            r[2 * k] = r[2 * i];
            r[2 * k + 1] = r[2 * i + 1];
            k++;
        }
    }
    if (negate) { /* complement over [0, 0x10FFFF], walking from the end */
        uint32_t next = 0x110000; /* one past what is free above */
        size_t m = k + 1;
        for (size_t i = k; i-- > 0;) {
            uint32_t lo = r[2 * i + 1] + 1, hi = next - 1;
            next = r[2 * i];
            if (lo <= hi && lo <= 0x10ffff) {
                r[2 * (--m)] = lo;
                r[2 * m + 1] = hi;
            }
        }
        if (next > 0) {
            r[2 * (--m)] = 0;
            r[2 * m + 1] = next - 1;
        }
        memmove(r, r + 2 * m, (k + 1 - m) * 2 * sizeof *r);
        k = k + 1 - m;
    }
    /* Surrogates are no characters: cut D800-DFFF out of the (one) range holding them. */
    for (size_t i = 0; i < k; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        if (hi < 0xd800 || lo > 0xdfff) continue;
        bool below = lo < 0xd800, above = hi > 0xdfff;
        if (below && above) {
            memmove(r + 2 * i + 2, r + 2 * i, (k - i) * 2 * sizeof *r);
            r[2 * i + 1] = 0xd7ff;
            r[2 * i + 2] = 0xe000;
            k++;
        } else if (below) {
            r[2 * i + 1] = 0xd7ff;
        } else if (above) {
            r[2 * i] = 0xe000;
        } else {
            memmove(r + 2 * i, r + 2 * i + 2, (k - i - 1) * 2 * sizeof *r);
            k--;
            i--;
        }
    }
    return k;
}

/* A character class compiles to UTF-8 byte-range sequences (the split of
 * Rust's regex-syntax Utf8Sequences: each sequence is a product of byte
 * ranges), merged into a trie on their leading ranges so that a class of
 * thousands of scattered code points costs a few dozen alternatives per
 * byte, not one parse per code point. */
typedef struct useq {
    uint8_t n, lo[4], hi[4];
} useq;

typedef struct useqs {
    useq *s;
    size_t n, cap;
} useqs;

static ix_status seq_add(gram_builder *b, useqs *q, uint32_t lo, uint32_t hi) {
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 32;
        useq *s = ix_realloc(q->s, cap * sizeof *s);
        if (!s) return nomem(b);
        q->s = s;
        q->cap = cap;
    }
    useq *e = &q->s[q->n++];
    uint8_t a[4], z[4];
    e->n = (uint8_t)ix__gram_utf8_encode(lo, a);
    ix__gram_utf8_encode(hi, z);
    memcpy(e->lo, a, 4);
    memcpy(e->hi, z, 4);
    return IX_OK;
}

/* [lo, hi]: one encoded length, no surrogates inside. */
static ix_status split_utf8(gram_builder *b, useqs *q, uint32_t lo, uint32_t hi) {
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                ix_status s = split_utf8(b, q, lo, lo | m);
                return s != IX_OK ? s : split_utf8(b, q, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                ix_status s = split_utf8(b, q, lo, (hi & ~m) - 1);
                return s != IX_OK ? s : split_utf8(b, q, hi & ~m, hi);
            }
        }
    }
    return seq_add(b, q, lo, hi);
}

static int cmp_useq(const void *pa, const void *pb) {
    const useq *x = pa, *y = pb;
    for (int k = 0; k < 4; k++) {
        int lx = k < x->n ? x->lo[k] * 256 + x->hi[k] : -1, ly = k < y->n ? y->lo[k] * 256 + y->hi[k] : -1;
        if (lx != ly) return lx < ly ? -1 : 1;
    }
    return 0;
}

/* Alternatives of rule h for the sequences q[a, z), which agree on their
 * first k ranges: the ones ending at k+1 share one set, the others are
 * grouped on range k and continue in a helper (or inline when alone). */
static ix_status emit_seqs(gram_builder *b, int32_t h, const useq *q, size_t a, size_t z, int k,
                           size_t off) {
    gram_set finals = {{0}};
    bool any_final = false;
    ix_status s = IX_OK;
    if (k >= 3) return IX_ERR_INTERNAL; /* sequences are at most 4 long: k + 1 < 4 */
    for (size_t i = a; i < z && s == IX_OK;) {
        size_t j = i + 1;
        while (j < z && q[j].lo[k] == q[i].lo[k] && q[j].hi[k] == q[i].hi[k]) j++;
        if (q[i].n == k + 1) { /* same lead byte, same length: all end here */
            set_add_range(&finals, q[i].lo[k], q[i].hi[k]);
            any_final = true;
        } else if (j == i + 1) {
            for (int t = k; t < q[i].n && s == IX_OK; t++) s = push_range(b, h, q[i].lo[t], q[i].hi[t], off);
            if (s == IX_OK) s = ix__gram_push(b, h, GRAM_END, 0, off);
        } else if (q[i].n == k + 2) { /* one lead, then one byte of a set: inline */
            gram_set tail = {{0}};
            for (size_t t = i; t < j; t++) set_add_range(&tail, q[t].lo[k + 1], q[t].hi[k + 1]);
            int32_t id;
            if ((s = push_range(b, h, q[i].lo[k], q[i].hi[k], off)) != IX_OK ||
                (s = set_intern(b, &tail, &id)) != IX_OK || (s = ix__gram_push(b, h, GRAM_SET, id, off)) != IX_OK)
                return s;
            s = ix__gram_push(b, h, GRAM_END, 0, off);
        } else {
            int32_t sub;
            if ((s = push_range(b, h, q[i].lo[k], q[i].hi[k], off)) != IX_OK ||
                (s = ix__gram_rule_helper(b, h, off, &sub)) != IX_OK ||
                (s = ix__gram_push(b, h, GRAM_REF, sub, off)) != IX_OK ||
                (s = ix__gram_push(b, h, GRAM_END, 0, off)) != IX_OK)
                return s;
            s = emit_seqs(b, sub, q, i, j, k + 1, off);
        }
        i = j;
    }
    if (s == IX_OK && any_final) {
        int32_t id;
        if ((s = set_intern(b, &finals, &id)) != IX_OK) return s;
        if ((s = ix__gram_push(b, h, GRAM_SET, id, off)) != IX_OK) return s;
        s = ix__gram_push(b, h, GRAM_END, 0, off);
    }
    return s;
}

ix_status ix__gram_push_class(gram_builder *b, int32_t rule, const uint32_t *r, size_t n,
                              size_t off) {
    static const uint32_t len_max[] = {0x7f, 0x7ff, 0xffff, 0x10ffff};
    useqs q = {0};
    ix_status s = IX_OK;
    for (size_t i = 0; i < n && s == IX_OK; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        for (size_t k = 0; k < IX_ARRAY_LEN(len_max) && lo <= hi && s == IX_OK; k++) {
            if (lo > len_max[k]) continue;
            uint32_t top = hi < len_max[k] ? hi : len_max[k];
            s = split_utf8(b, &q, lo, top);
            lo = top + 1;
        }
    }
    if (s == IX_OK) qsort(q.s, q.n, sizeof *q.s, cmp_useq);
    bool ascii = true;
    for (size_t i = 0; i < q.n; i++) ascii = ascii && q.s[i].n == 1;
    if (s == IX_OK && ascii) { /* one set, no rule */
        gram_set set = {{0}};
        for (size_t i = 0; i < q.n; i++) set_add_range(&set, q.s[i].lo[0], q.s[i].hi[0]);
        int32_t id;
        if ((s = set_intern(b, &set, &id)) == IX_OK) s = ix__gram_push(b, rule, GRAM_SET, id, off);
    } else if (s == IX_OK) {
        int32_t h;
        if ((s = ix__gram_rule_helper(b, rule, off, &h)) == IX_OK) s = emit_seqs(b, h, q.s, 0, q.n, 0, off);
        if (s == IX_OK) s = ix__gram_push(b, rule, GRAM_REF, h, off);
    }
    ix_free(q.s);
    return s;
}

/* ---- compile ---------------------------------------------------------------------- */

/* Flat form: rule_alt, alt_start and elems, rule by rule. */
static ix_status flatten(gram_builder *b, ix_grammar *g) {
    int32_t n_alts = 0;
    for (int32_t r = 0; r < b->n_rules; r++)
        for (int32_t i = 0; i < b->rules[r].n; i++) n_alts += b->rules[r].e[i].type == GRAM_END;
    size_t names_len = 0;
    for (int32_t r = 0; r < b->n_rules; r++) names_len += strlen(b->rules[r].name) + 1;
    g->n_rules = b->n_rules;
    g->n_alts = n_alts;
    g->n_elems = (int32_t)b->n_elems;
    g->n_sets = b->n_sets;
    g->elems = ix_malloc((b->n_elems ? b->n_elems : 1) * sizeof *g->elems);
    g->alt_start = ix_malloc(((size_t)n_alts + 1) * sizeof *g->alt_start);
    g->rule_alt = ix_malloc(((size_t)b->n_rules + 1) * sizeof *g->rule_alt);
    g->names = ix_malloc(names_len);
    g->name_off = ix_malloc(((size_t)b->n_rules + 1) * sizeof *g->name_off);
    g->sets = ix_malloc(((size_t)b->n_sets + 1) * sizeof *g->sets);
    if (!g->elems || !g->alt_start || !g->rule_alt || !g->names || !g->name_off || !g->sets)
        return nomem(b);
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    int32_t pos = 0, alt = 0;
    size_t noff = 0;
    for (int32_t r = 0; r < b->n_rules; r++) {
        const brule *br = &b->rules[r];
        g->rule_alt[r] = alt;
        g->name_off[r] = (int32_t)noff;
        size_t nl = strlen(br->name) + 1;
        memcpy(g->names + noff, br->name, nl);
        noff += nl;
        bool start = true;
        for (int32_t i = 0; i < br->n; i++) {
            if (start) g->alt_start[alt++] = pos;
            g->elems[pos++] = br->e[i];
            start = br->e[i].type == GRAM_END;
        }
    }
    g->rule_alt[b->n_rules] = alt;
    return IX_OK;
}

/* Per rule: can it match the empty string (nullable), can it match at all
 * (productive). Worklists over "alternative a waits for k more rules". */
typedef struct analysis {
    int32_t *alt_rule;  /* (n_alts) the rule of each alternative */
    int32_t *occ_off;   /* (n_rules + 1) occurrences of rule r as a reference: */
    int32_t *occ_alt;   /*   occ_alt[occ_off[r] .. occ_off[r+1]) (alternatives, with repeats) */
    int32_t *wait;      /* (n_alts) scratch */
    int32_t *queue;     /* (n_rules) scratch */
    uint8_t *nullable;  /* (n_rules) */
    uint8_t *productive;/* (n_rules) */
    uint8_t *reach;     /* (n_rules) */
} analysis;

static void analysis_free(analysis *a) {
    ix_free(a->alt_rule);
    ix_free(a->occ_off);
    ix_free(a->occ_alt);
    ix_free(a->wait);
    ix_free(a->queue);
    ix_free(a->nullable);
    ix_free(a->productive);
    ix_free(a->reach);
}

/* Marks in flag[] every rule with an alternative whose elements all count:
 * a reference counts once its rule is flagged; a set counts iff sets_count. */
static void close_over(const ix_grammar *g, analysis *a, uint8_t *flag, bool sets_count) {
    int32_t nq = 0;
    for (int32_t k = 0; k < g->n_alts; k++) {
        int32_t w = 0; /* references to wait for; -1: never (a set that does not count) */
        for (int32_t p = g->alt_start[k]; g->elems[p].type != GRAM_END && w >= 0; p++)
            w = g->elems[p].type == GRAM_REF ? w + 1 : sets_count ? w : -1;
        a->wait[k] = w;
        int32_t r = a->alt_rule[k];
        if (w == 0 && !flag[r]) {
            flag[r] = 1;
            a->queue[nq++] = r;
        }
    }
    for (int32_t qi = 0; qi < nq; qi++) {
        int32_t r = a->queue[qi];
        for (int32_t o = a->occ_off[r]; o < a->occ_off[r + 1]; o++) {
            int32_t k = a->occ_alt[o];
            int32_t rr = a->alt_rule[k];
            if (--a->wait[k] == 0 && !flag[rr]) {
                flag[rr] = 1;
                a->queue[nq++] = rr;
            }
        }
    }
}

static ix_status analyze(gram_builder *b, const ix_grammar *g, analysis *a) {
    size_t nr = (size_t)g->n_rules, na = (size_t)g->n_alts;
    a->alt_rule = ix_malloc((na + 1) * sizeof *a->alt_rule);
    a->occ_off = ix_calloc(nr + 1, sizeof *a->occ_off);
    a->wait = ix_malloc((na + 1) * sizeof *a->wait);
    a->queue = ix_malloc((nr + 1) * sizeof *a->queue);
    a->nullable = ix_calloc(nr, 1);
    a->productive = ix_calloc(nr, 1);
    a->reach = ix_calloc(nr, 1);
    if (!a->alt_rule || !a->occ_off || !a->wait || !a->queue || !a->nullable || !a->productive ||
        !a->reach)
        return nomem(b);
    size_t n_occ = 0;
    for (int32_t r = 0; r < g->n_rules; r++)
        for (int32_t k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++) {
            a->alt_rule[k] = r;
            for (int32_t p = g->alt_start[k]; g->elems[p].type != GRAM_END; p++)
                if (g->elems[p].type == GRAM_REF) {
                    a->occ_off[g->elems[p].arg + 1]++;
                    n_occ++;
                }
        }
    for (size_t r = 0; r < nr; r++) a->occ_off[r + 1] += a->occ_off[r];
    a->occ_alt = ix_malloc((n_occ + 1) * sizeof *a->occ_alt);
    if (!a->occ_alt) return nomem(b);
    /* queue doubles as the fill cursor here */
    for (size_t r = 0; r < nr; r++) a->queue[r] = a->occ_off[r];
    for (int32_t k = 0; k < g->n_alts; k++)
        for (int32_t p = g->alt_start[k]; g->elems[p].type != GRAM_END; p++)
            if (g->elems[p].type == GRAM_REF) a->occ_alt[a->queue[g->elems[p].arg]++] = k;
    close_over(g, a, a->nullable, false);
    close_over(g, a, a->productive, true);
    /* reachability from root (queue as BFS queue) */
    int32_t nq = 0;
    a->reach[g->root] = 1;
    a->queue[nq++] = g->root;
    for (int32_t qi = 0; qi < nq; qi++) {
        int32_t r = a->queue[qi];
        for (int32_t k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++)
            for (int32_t p = g->alt_start[k]; g->elems[p].type != GRAM_END; p++)
                if (g->elems[p].type == GRAM_REF && !a->reach[g->elems[p].arg]) {
                    a->reach[g->elems[p].arg] = 1;
                    a->queue[nq++] = g->elems[p].arg;
                }
    }
    return IX_OK;
}

static const char *rule_name(const ix_grammar *g, int32_t r) { return g->names + g->name_off[r]; }

/* Left recursion: an edge r -> s when s can be the first thing r's
 * alternative matches (after nullable rules). A cycle among reachable rules
 * is refused, naming it. Iterative DFS: rules may chain 65536 deep. */
static ix_status check_left_recursion(gram_builder *b, const ix_grammar *g, const analysis *a) {
    size_t nr = (size_t)g->n_rules;
    int32_t *e_off = ix_calloc(nr + 1, sizeof *e_off);
    uint8_t *color = ix_calloc(nr, 1);
    int32_t *stk = ix_malloc(nr * sizeof *stk), *stk_e = ix_malloc(nr * sizeof *stk_e);
    int32_t *e_to = NULL;
    ix_status s = IX_OK;
    if (!e_off || !color || !stk || !stk_e) {
        s = nomem(b);
        goto out;
    }
    size_t n_e = 0;
    for (int pass = 0; pass < 2; pass++) {
        n_e = 0;
        for (int32_t r = 0; r < g->n_rules; r++) {
            if (pass == 1) e_off[r] = (int32_t)n_e;
            for (int32_t k = g->rule_alt[r]; k < g->rule_alt[r + 1]; k++)
                for (int32_t p = g->alt_start[k]; g->elems[p].type == GRAM_REF; p++) {
                    if (pass == 1) e_to[n_e] = g->elems[p].arg;
                    n_e++;
                    if (!a->nullable[g->elems[p].arg]) break;
                }
        }
        if (pass == 0 && !(e_to = ix_malloc((n_e + 1) * sizeof *e_to))) {
            s = nomem(b);
            goto out;
        }
    }
    e_off[nr] = (int32_t)n_e;
    for (int32_t start = 0; start < g->n_rules && s == IX_OK; start++) {
        if (!a->reach[start] || color[start]) continue;
        int32_t sp = 0;
        stk[sp] = start;
        stk_e[sp++] = e_off[start];
        color[start] = 1;
        while (sp > 0) {
            int32_t r = stk[sp - 1];
            if (stk_e[sp - 1] == e_off[r + 1]) {
                color[r] = 2;
                sp--;
                continue;
            }
            int32_t t = e_to[stk_e[sp - 1]++];
            if (color[t] == 1) { /* cycle: t ... r -> t */
                int32_t i = sp - 1;
                while (stk[i] != t) i--;
                char path[256];
                size_t n = 0;
                for (int32_t j = i; j < sp && n < sizeof path - 64; j++)
                    n += (size_t)snprintf(path + n, sizeof path - n, "%s -> ", rule_name(g, stk[j]));
                snprintf(path + n, sizeof path - n, "%s", rule_name(g, t));
                s = ix__gram_errf(b, IX_ERR_FORMAT, b->rules[t].off,
                                  "left recursion: %s (a rule must match something before it "
                                  "refers to itself; a repetition of something that can be empty "
                                  "is one too)",
                                  path);
                break;
            }
            if (color[t] == 0) {
                color[t] = 1;
                stk[sp] = t;
                stk_e[sp++] = e_off[t];
            }
        }
    }
out:
    ix_free(e_off);
    ix_free(e_to);
    ix_free(color);
    ix_free(stk);
    ix_free(stk_e);
    return s;
}

/* Partition refinement: bytes stay in one class while every set agrees on them. */
static void byte_classes(ix_grammar *g) {
    uint8_t cls[256] = {0};
    int32_t n = 1;
    for (int32_t i = 0; i < g->n_sets && n < 256; i++) {
        int16_t map[256][2];
        memset(map, -1, sizeof map);
        int32_t m = 0;
        for (int c = 0; c < 256; c++) {
            int in = gram_set_has(&g->sets[i], (unsigned)c);
            if (map[cls[c]][in] < 0) map[cls[c]][in] = (int16_t)m++;
            cls[c] = (uint8_t)map[cls[c]][in];
        }
        n = m;
    }
    memcpy(g->byte_class, cls, sizeof cls);
    g->n_classes = n;
    /* Representative: prefer printable ASCII (what complete_bytes shows). */
    bool have[256] = {false};
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < 256; c++) {
            bool printable = c >= 0x20 && c < 0x7f;
            if (have[cls[c]] || (pass == 0 && !printable)) continue;
            have[cls[c]] = true;
            g->class_rep[cls[c]] = (uint8_t)c;
        }
}

ix_status ix__gram_finish(gram_builder *b, ix_grammar **out) {
    *out = NULL;
    int32_t root = -1;
    for (int32_t r = 0; r < b->n_rules; r++)
        if (!strcmp(b->rules[r].name, "root") && b->rules[r].defined) root = r;
    /* Helpers are defined by construction, so any undefined rule is a named one. */
    for (int32_t r = 0; r < b->n_rules; r++)
        if (!b->rules[r].defined)
            return ix__gram_errf(b, IX_ERR_FORMAT, b->rules[r].off, "undefined rule '%s'",
                                 b->rules[r].name);
    if (root < 0) return ix_errf(b->err, IX_ERR_FORMAT, "the grammar has no rule named 'root'");
    ix_grammar *g = ix_calloc(1, sizeof *g);
    if (!g) return nomem(b);
    g->root = root;
    analysis a;
    memset(&a, 0, sizeof a);
    ix_status s = flatten(b, g);
    if (s == IX_OK) s = analyze(b, g, &a);
    int32_t first_bad = -1, n_bad = 0;
    char bad[256] = "";
    for (int32_t r = 0; r < g->n_rules && s == IX_OK; r++) {
        if (!a.reach[r] || a.productive[r]) continue;
        if (first_bad < 0) first_bad = r;
        size_t n = strlen(bad);
        if (n_bad++ < 4) snprintf(bad + n, sizeof bad - n, "%s'%s'", n ? ", " : "", rule_name(g, r));
    }
    if (s == IX_OK && n_bad)
        s = ix__gram_errf(b, IX_ERR_FORMAT, b->rules[first_bad].off,
                          "%s %s%s can never complete: every alternative needs %s again",
                          n_bad > 1 ? "rules" : "rule", bad, n_bad > 4 ? " (...)" : "",
                          n_bad > 1 ? "one of them" : "the rule itself");
    if (s == IX_OK) s = check_left_recursion(b, g, &a);
    analysis_free(&a);
    if (s != IX_OK) {
        ix_grammar_destroy(g);
        return s;
    }
    byte_classes(g);
    *out = g;
    return IX_OK;
}

/* ---- public helpers ------------------------------------------------------------------ */

void ix_grammar_destroy(ix_grammar *g) {
    if (!g) return;
    ix_free(g->elems);
    ix_free(g->alt_start);
    ix_free(g->rule_alt);
    ix_free(g->names);
    ix_free(g->name_off);
    ix_free(g->sets);
    ix_free(g);
}

int32_t ix_grammar_n_rules(const ix_grammar *g) { return g->n_rules; }

static ix_status print_byte(ix_buf *out, unsigned c) {
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != ']' && c != '-' && c != '^' && c != '"')
        return ix_buf_printf(out, "%c", (char)c);
    return ix_buf_printf(out, "\\x%02X", c);
}

static ix_status print_set(ix_buf *out, const gram_set *set) {
    ix_status s = ix_buf_append(out, "[", 1);
    for (unsigned c = 0; c < 256 && s == IX_OK;) {
        if (!gram_set_has(set, c)) {
            c++;
            continue;
        }
        unsigned e = c;
        while (e + 1 < 256 && gram_set_has(set, e + 1)) e++;
        s = print_byte(out, c);
        if (s == IX_OK && e > c) {
            if (e > c + 1) s = ix_buf_append(out, "-", 1);
            if (s == IX_OK) s = print_byte(out, e);
        }
        c = e + 1;
    }
    return s != IX_OK ? s : ix_buf_append(out, "]", 1);
}

ix_status ix_grammar_print(const ix_grammar *g, ix_buf *out) {
    ix_status s = IX_OK;
    for (int32_t r = 0; r < g->n_rules && s == IX_OK; r++) {
        s = ix_buf_printf(out, "%s ::=", rule_name(g, r));
        for (int32_t k = g->rule_alt[r]; k < g->rule_alt[r + 1] && s == IX_OK; k++) {
            if (k > g->rule_alt[r]) s = ix_buf_append(out, " |", 2);
            if (g->elems[g->alt_start[k]].type == GRAM_END) s = ix_buf_append(out, " \"\"", 3);
            for (int32_t p = g->alt_start[k]; s == IX_OK && g->elems[p].type != GRAM_END; p++) {
                s = ix_buf_append(out, " ", 1);
                if (s != IX_OK) break;
                if (g->elems[p].type == GRAM_SET)
                    s = print_set(out, &g->sets[g->elems[p].arg]);
                else
                    s = ix_buf_printf(out, "%s", rule_name(g, g->elems[p].arg));
            }
        }
        if (s == IX_OK) s = ix_buf_append(out, "\n", 1);
    }
    return s;
}
