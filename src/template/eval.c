/* inferx template: the evaluator. Runs a parsed template against the
 * caller's variables: scopes, statements, expressions, calls, attribute and
 * item access and the operators, with jinja2's semantics where chat
 * templates can tell the difference:
 *
 *   - scopes: the template's top level writes below the caller's variables;
 *     a for loop's body is a new scope each iteration (a `set` inside does not
 *     leak out -- hence namespace()); a macro runs in a scope below the one it
 *     was defined in; `if` makes no scope;
 *   - undefined is chainable: `x.y.z` and `x['y']` of undefined are
 *     undefined (jinja2 would raise); printing it writes nothing, iterating it
 *     visits nothing, most filters treat it as "" or []; arithmetic on it,
 *     calling it and tojson of it fail, naming the variable;
 *   - `a.b` prefers a method of a (dict.items, str.strip, ...) then the item
 *     "b"; `a['b']` prefers the item, then the method;
 *   - and/or return an operand, as Python's do; `x if c` without else is
 *     undefined when c is false;
 *   - integers are 64-bit and fail on overflow (Python's are unbounded).
 *
 * Every evaluation and statement costs a step, every loop iteration counts,
 * and every recursion passes ix__tpl_enter, so limits stop any template. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "template/template_int.h"

struct tframe {
    tframe *parent;
    struct tvar {
        uint32_t sym;
        tv v;
    } *v; /* (n) in the order they were set */
    size_t n, cap;
};

enum { EX_ERR = -1, EX_OK = 0, EX_BREAK = 1, EX_CONTINUE = 2 };

static bool eval(rctx *c, const tnode *n, tframe *f, tv *out);
static int exec(rctx *c, const tnode *n, tframe *f);

/* ---- errors and limits ---------------------------------------------------------- */

bool ix__tpl_fail(rctx *c, const tnode *at, ix_status st, const char *fmt, ...) {
    if (c->st != IX_OK) return false;
    c->st = st;
    va_list ap;
    va_start(ap, fmt);
    ix__tpl_verr(c->err, c->t->src, c->t->len, at ? at->pos : SIZE_MAX, fmt, ap);
    va_end(ap);
    return false;
}

bool ix__tpl_fail_alloc(rctx *c, const tnode *at, ix_status why) {
    switch (why) {
    case IX_ERR_RANGE:
        return ix__tpl_fail(c, at, IX_ERR_RANGE, "the render needs more than max_memory_bytes (%zu bytes)",
                            c->p->max_memory_bytes);
    case IX_ERR_TOO_LONG:
        return ix__tpl_fail(c, at, IX_ERR_TOO_LONG, "the output is longer than max_output_bytes (%zu bytes)",
                            c->p->max_output_bytes);
    case IX_OK: return false; /* an error already recorded */
    default: return ix__tpl_fail(c, at, IX_ERR_NOMEM, "out of memory");
    }
}

bool ix__tpl_enter(rctx *c, const tnode *at) {
    if (c->st != IX_OK) return false;
    if (++c->depth > c->p->max_depth) {
        c->depth--;
        return ix__tpl_fail(c, at, IX_ERR_RANGE, "nested too deeply (max_depth %u): runaway recursion?",
                            (unsigned)c->p->max_depth);
    }
    return true;
}

bool ix__tpl_cost(rctx *c, const tnode *at, uint64_t units) {
    c->steps += units;
    if (c->steps > c->p->max_steps)
        return ix__tpl_fail(c, at, IX_ERR_RANGE, "the render took more than max_steps (%llu)",
                            (unsigned long long)c->p->max_steps);
    return c->st == IX_OK;
}

static bool step(rctx *c, const tnode *at) {
    if (++c->steps > c->p->max_steps)
        return ix__tpl_fail(c, at, IX_ERR_RANGE, "the render took more than max_steps (%llu)",
                            (unsigned long long)c->p->max_steps);
    return c->st == IX_OK;
}

void *ix__tpl_alloc(rctx *c, const tnode *at, size_t n_bytes) {
    void *p = ix__arena_alloc(&c->ar, n_bytes);
    if (!p) ix__tpl_fail_alloc(c, at, c->ar.fail);
    return p;
}

void *ix__tpl_alloc_n(rctx *c, const tnode *at, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) {
        ix__tpl_fail_alloc(c, at, IX_ERR_RANGE);
        return NULL;
    }
    return ix__tpl_alloc(c, at, total);
}

bool ix__tpl_grow(rctx *c, const tnode *at, void **items, size_t n, size_t *cap, size_t first, size_t size) {
    if (n < *cap) return true;
    size_t ncap = *cap ? *cap * 2 : first;
    void *v = ix__tpl_alloc_n(c, at, ncap, size);
    if (!v) return false;
    if (n) memcpy(v, *items, n * size);
    *items = v;
    *cap = ncap;
    return true;
}

/* The text an undefined value stands for, for messages. */
static void undef_name(const tv *v, char *buf, size_t size) {
    const tnode *o = v->kind == TV_UNDEF ? v->u.origin : NULL;
    if (o && (o->kind == N_NAME || o->kind == N_ATTR || o->kind == N_PARAM))
        snprintf(buf, size, "%.*s", (int)(o->slen > 60 ? 60 : o->slen), o->s);
    else if (o && o->kind == N_ITEM && o->b && o->b->kind == N_CONST && o->b->val.kind == TV_STR)
        snprintf(buf, size, "%.*s", (int)(o->b->val.n > 60 ? 60 : o->b->val.n), o->b->val.u.s);
    else
        snprintf(buf, size, "value");
}

static bool fail_undef(rctx *c, const tnode *at, const tv *v) {
    char name[64];
    undef_name(v, name, sizeof name);
    return ix__tpl_fail(c, at, IX_ERR_TYPE, "'%s' is undefined", name);
}

/* ---- frames --------------------------------------------------------------------- */

static tframe *frame_new(rctx *c, tframe *parent) {
    tframe *f = ix__tpl_alloc(c, NULL, sizeof *f);
    if (f) f->parent = parent;
    return f;
}

static const tv *frame_lookup(rctx *c, const tframe *f, uint32_t sym) {
    uint64_t scanned = 0;
    const tv *hit = NULL;
    for (; f && !hit; f = f->parent) {
        for (size_t k = f->n; k-- > 0;)
            if (f->v[k].sym == sym) {
                hit = &f->v[k].v;
                break;
            }
        scanned += f->n;
    }
    c->steps += scanned >> 4; /* a template with thousands of variables pays for its lookups */
    return hit;
}

static bool frame_set(rctx *c, const tnode *at, tframe *f, uint32_t sym, const tv *v) {
    c->steps += f->n >> 4;
    for (size_t k = 0; k < f->n; k++)
        if (f->v[k].sym == sym) {
            f->v[k].v = *v;
            return true;
        }
    if (!ix__tpl_grow(c, at, (void **)&f->v, f->n, &f->cap, 8, sizeof *f->v)) return false;
    f->v[f->n].sym = sym;
    f->v[f->n].v = *v;
    f->n++;
    return true;
}

/* ---- arguments --------------------------------------------------------------------- */

bool ix__tpl_bind(rctx *c, const tnode *at, const char *what, const targs *a, const char *const *names, size_t n,
                  tv *out) {
    for (size_t k = 0; k < n; k++) out[k] = ix__tv_missing();
    if (a->npos > n)
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "%s takes at most %zu argument%s (%zu given)", what, n, n == 1 ? "" : "s",
                            a->npos);
    for (size_t k = 0; k < a->npos; k++) out[k] = a->pos[k];
    for (size_t j = 0; j < a->nkw; j++) {
        size_t k = 0;
        while (k < n && (strlen(names[k]) != a->kw[j].len || memcmp(names[k], a->kw[j].name, a->kw[j].len))) k++;
        if (k == n)
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "%s got an unexpected keyword argument '%.*s'", what,
                                (int)a->kw[j].len, a->kw[j].name);
        if (out[k].kind != TV_MISSING)
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "%s got multiple values for argument '%s'", what, names[k]);
        out[k] = a->kw[j].v;
    }
    return true;
}

#define SMALL_ARGS 8

/* Evaluates call arguments kids[from..]; arrays of up to SMALL_ARGS live in
 * pos_buf / kw_buf, more in the arena. */
static bool eval_args(rctx *c, const tnode *n, uint32_t from, tframe *f, tv *pos_buf, tkw *kw_buf, targs *a) {
    uint32_t npos = 0, nkw = 0;
    for (uint32_t k = from; k < n->nkids; k++) *(n->kids[k]->kind == N_KWARG ? &nkw : &npos) += 1;
    tv *pos = npos <= SMALL_ARGS ? pos_buf : ix__tpl_alloc_n(c, n, npos, sizeof *pos);
    tkw *kw = nkw <= SMALL_ARGS ? kw_buf : ix__tpl_alloc_n(c, n, nkw, sizeof *kw);
    if (!pos || !kw) return false;
    npos = nkw = 0;
    for (uint32_t k = from; k < n->nkids; k++) {
        const tnode *x = n->kids[k];
        if (x->kind == N_KWARG) {
            kw[nkw].name = x->s;
            kw[nkw].len = x->slen;
            if (!eval(c, x->a, f, &kw[nkw++].v)) return false;
        } else if (!eval(c, x, f, &pos[npos++])) {
            return false;
        }
    }
    *a = (targs){pos, npos, kw, nkw};
    return true;
}

/* ---- attribute and item access -------------------------------------------------------- */

static bool bind_method(rctx *c, const tnode *at, int id, const tv *self, tv *out) {
    tfunc *fn = ix__tpl_alloc(c, at, sizeof *fn);
    if (!fn) return false;
    fn->kind = TF_METHOD;
    fn->id = id;
    fn->self = *self;
    *out = (tv){.kind = TV_FUNC};
    out->u.fn = fn;
    return true;
}

bool ix__tpl_getattr(rctx *c, const tnode *at, const tv *obj, const char *name, size_t len, tv *out) {
    switch ((tkind)obj->kind) {
    case TV_DICT:
    case TV_STR:
    case TV_LIST: {
        int id = ix__tpl_method_find((tkind)obj->kind, name, len);
        if (id >= 0) return bind_method(c, at, id, obj, out);
        if (obj->kind == TV_DICT) c->steps += obj->u.d->n >> 4;
        const tv *v = obj->kind == TV_DICT ? ix__dict_get_str(obj->u.d, name, len) : NULL;
        *out = v ? *v : ix__tv_undef(at);
        return true;
    }
    case TV_NS: {
        c->steps += obj->u.d->n >> 4;
        const tv *v = ix__dict_get_str(obj->u.d, name, len);
        *out = v ? *v : ix__tv_undef(at);
        return true;
    }
    case TV_LOOP: return ix__tpl_loop_attr(c, at, obj, name, len, out);
    default: *out = ix__tv_undef(at); return true;
    }
}

/* Python's index of a sequence of n: negative from the end; false if out of range. */
static bool seq_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

/* Byte offset of code point k of s (ASCII strings: k). */
static size_t cp_offset(const tv *s, size_t k) {
    size_t i = 0;
    while (k-- && i < s->n) ix__utf8_next(s->u.s, s->n, &i);
    return i;
}

bool ix__tpl_getitem(rctx *c, const tnode *at, const tv *obj, const tv *key, tv *out) {
    *out = ix__tv_undef(at);
    switch ((tkind)obj->kind) {
    case TV_DICT: {
        c->steps += obj->u.d->n >> 4;
        const tv *v = ix__dict_get(c, at, obj->u.d, key);
        if (v) {
            *out = *v;
            return true;
        }
        if (c->st != IX_OK) return false;
        break;
    }
    case TV_LIST:
        if (key->kind == TV_INT || key->kind == TV_BOOL) {
            size_t i;
            if (seq_index(key->kind == TV_INT ? key->u.i : key->u.b, obj->n, &i)) *out = obj->u.items[i];
            return true;
        }
        break;
    case TV_STR:
        if (key->kind == TV_INT || key->kind == TV_BOOL) {
            size_t i;
            c->steps += obj->n >> 8; /* counting code points */
            if (!seq_index(key->kind == TV_INT ? key->u.i : key->u.b, ix__utf8_count(obj->u.s, obj->n), &i)) return true;
            size_t off = cp_offset(obj, i), end = off;
            ix__utf8_next(obj->u.s, obj->n, &end);
            return ix__str_sub(c, at, obj, off, end - off, out);
        }
        break;
    default: break;
    }
    /* jinja2: a string key that is no item may still name an attribute */
    if (key->kind == TV_STR && obj->kind != TV_UNDEF) return ix__tpl_getattr(c, at, obj, key->u.s, key->n, out);
    return true;
}

bool ix__tpl_getpath(rctx *c, const tnode *at, const tv *obj, const tv *path, tv *out) {
    if (path->kind != TV_STR) return ix__tpl_getitem(c, at, obj, path, out);
    tv cur = *obj;
    size_t i = 0;
    for (;;) {
        const char *dot = memchr(path->u.s + i, '.', path->n - i);
        size_t end = dot ? (size_t)(dot - path->u.s) : path->n;
        tv part = ix__tv_str(path->u.s + i, end - i, TS_CLEAN), next;
        bool is_int = end > i;
        for (size_t k = i; k < end; k++) is_int = is_int && path->u.s[k] >= '0' && path->u.s[k] <= '9';
        if (is_int) {
            int64_t v = 0;
            for (size_t k = i; k < end && v < INT64_MAX / 10 - 10; k++) v = v * 10 + (path->u.s[k] - '0');
            part = ix__tv_int(v);
        }
        if (!ix__tpl_getitem(c, at, &cur, &part, &next)) return false;
        cur = next;
        if (!dot) break;
        i = end + 1;
    }
    *out = cur;
    return true;
}

typedef struct slice_ix {
    int64_t start, step;
    size_t count;
} slice_ix;

static bool slice_arg(rctx *c, const tnode *at, const tv *v, bool *given, int64_t *out) {
    *given = false;
    if (v->kind == TV_NONE || v->kind == TV_MISSING || v->kind == TV_UNDEF) return true;
    if (v->kind != TV_INT && v->kind != TV_BOOL)
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "slice indices must be integers or None, not %s", ix__tv_type(v));
    *given = true;
    *out = v->kind == TV_INT ? v->u.i : v->u.b;
    return true;
}

/* Python's slice.indices(). */
static bool slice_indices(rctx *c, const tnode *at, size_t len, const tv *b, const tv *e, const tv *s, slice_ix *out) {
    int64_t start = 0, stop = 0, stp = 1, n = (int64_t)len;
    bool has_start, has_stop, has_step;
    if (!slice_arg(c, at, b, &has_start, &start) || !slice_arg(c, at, e, &has_stop, &stop) ||
        !slice_arg(c, at, s, &has_step, &stp))
        return false;
    if (!has_step) stp = 1;
    if (stp == 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "slice step cannot be zero");
    if (stp == INT64_MIN) stp = -INT64_MAX;
    if (!has_start) start = stp < 0 ? n - 1 : 0;
    else if (start < 0) start = start + n < 0 ? (stp < 0 ? -1 : 0) : start + n;
    else if (start >= n) start = stp < 0 ? n - 1 : n;
    if (!has_stop) stop = stp < 0 ? -1 : n;
    else if (stop < 0) stop = stop + n < 0 ? (stp < 0 ? -1 : 0) : stop + n;
    else if (stop >= n) stop = stp < 0 ? n - 1 : n;
    int64_t count = 0;
    if (stp < 0 ? stop < start : start < stop)
        count = stp < 0 ? (start - stop - 1) / -stp + 1 : (stop - start - 1) / stp + 1;
    *out = (slice_ix){start, stp, (size_t)count};
    return true;
}

static bool do_slice(rctx *c, const tnode *at, const tv *obj, const tv *b, const tv *e, const tv *s, tv *out) {
    slice_ix x;
    *out = ix__tv_undef(at);
    if (obj->kind == TV_LIST) {
        if (!slice_indices(c, at, obj->n, b, e, s, &x)) return false;
        if (x.step == 1) {
            *out = ix__tv_list(obj->u.items + x.start, x.count, obj->flag);
            return true;
        }
        tv *items = ix__tpl_alloc_n(c, at, x.count ? x.count : 1, sizeof *items);
        if (!items) return false;
        for (size_t k = 0; k < x.count; k++) items[k] = obj->u.items[x.start + (int64_t)k * x.step];
        *out = ix__tv_list(items, x.count, obj->flag);
        return true;
    }
    if (obj->kind != TV_STR) return true;
    c->steps += obj->n >> 8;
    size_t ncp = ix__utf8_count(obj->u.s, obj->n);
    if (!slice_indices(c, at, ncp, b, e, s, &x)) return false;
    if (x.step == 1) {
        size_t off = ncp == obj->n ? (size_t)x.start : cp_offset(obj, (size_t)x.start);
        size_t end = ncp == obj->n ? off + x.count : cp_offset(obj, (size_t)x.start + x.count);
        return ix__str_sub(c, at, obj, off, end - off, out);
    }
    size_t *offs = ix__tpl_alloc_n(c, at, ncp + 1, sizeof *offs); /* code point k starts at offs[k] */
    char *o = ix__tpl_alloc(c, at, obj->n + 1);
    if (!offs || !o) return false;
    for (size_t i = 0, k = 0; k <= ncp; k++) {
        offs[k] = i;
        if (i < obj->n) ix__utf8_next(obj->u.s, obj->n, &i);
    }
    size_t len = 0;
    for (size_t k = 0; k < x.count; k++) {
        size_t cp = (size_t)(x.start + (int64_t)k * x.step);
        memcpy(o + len, obj->u.s + offs[cp], offs[cp + 1] - offs[cp]);
        len += offs[cp + 1] - offs[cp];
    }
    *out = ix__tv_str(o, len, ix__str_derived(obj));
    return true;
}

/* ---- iteration ------------------------------------------------------------------------- */

bool ix__tpl_iterate(rctx *c, const tnode *at, const tv *v, const tv **items, size_t *n) {
    switch ((tkind)v->kind) {
    case TV_LIST:
        *items = v->u.items;
        *n = v->n;
        return true;
    case TV_UNDEF:
        *items = NULL;
        *n = 0;
        return true;
    case TV_DICT: {
        tv *keys = ix__tpl_alloc_n(c, at, v->u.d->n ? v->u.d->n : 1, sizeof *keys);
        if (!keys) return false;
        for (size_t k = 0; k < v->u.d->n; k++) keys[k] = v->u.d->e[k].k;
        *items = keys;
        *n = v->u.d->n;
        return true;
    }
    case TV_STR: {
        size_t ncp = ix__utf8_count(v->u.s, v->n);
        tv *chars = ix__tpl_alloc_n(c, at, ncp ? ncp : 1, sizeof *chars);
        if (!chars) return false;
        for (size_t i = 0, k = 0; i < v->n; k++) {
            size_t start = i;
            ix__utf8_next(v->u.s, v->n, &i);
            if (!ix__str_sub(c, at, v, start, i - start, &chars[k])) return false;
        }
        *items = chars;
        *n = ncp;
        return true;
    }
    default: return ix__tpl_fail(c, at, IX_ERR_TYPE, "'%s' object is not iterable", ix__tv_type(v));
    }
}

/* ---- operators ---------------------------------------------------------------------------- */


static const char *op_name(int op) {
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "**";
    default: return "?";
    }
}

static bool fail_operands(rctx *c, const tnode *at, int op, const tv *x, const tv *y) {
    if (x->kind == TV_UNDEF) return fail_undef(c, at, x);
    if (y->kind == TV_UNDEF) return fail_undef(c, at, y);
    if (op == OP_ADD && x->kind == TV_STR)
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "can only concatenate str (not \"%s\") to str", ix__tv_type(y));
    return ix__tpl_fail(c, at, IX_ERR_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op),
                        ix__tv_type(x), ix__tv_type(y));
}

static bool overflow(rctx *c, const tnode *at) { return ix__tpl_fail(c, at, IX_ERR_RANGE, "integer overflow"); }

static bool concat_lists(rctx *c, const tnode *at, const tv *x, const tv *y, tv *out) {
    size_t n = x->n + y->n;
    tv *items = ix__tpl_alloc_n(c, at, n ? n : 1, sizeof *items);
    if (!items) return false;
    if (x->n) memcpy(items, x->u.items, x->n * sizeof *items);
    if (y->n) memcpy(items + x->n, y->u.items, y->n * sizeof *items);
    *out = ix__tv_list(items, n, x->flag);
    return true;
}

bool ix__tpl_add(rctx *c, const tnode *at, const tv *x, const tv *y, tv *out) {
    if (ix__tv_is_num(x) && ix__tv_is_num(y)) {
        if (x->kind == TV_FLOAT || y->kind == TV_FLOAT) {
            *out = ix__tv_float(ix__tv_float_of(x) + ix__tv_float_of(y));
            return true;
        }
        int64_t r;
        if (__builtin_add_overflow(ix__tv_int_of(x), ix__tv_int_of(y), &r)) return overflow(c, at);
        *out = ix__tv_int(r);
        return true;
    }
    if (x->kind == TV_STR && y->kind == TV_STR) {
        if (!y->n) {
            *out = *x;
            return true;
        }
        if (!x->n) {
            *out = *y;
            return true;
        }
        tbuf b;
        ix__buf_init(&b, &c->ar, SIZE_MAX);
        if (!ix__buf_put_str(&b, x) || !ix__buf_put_str(&b, y)) {
            ix__buf_free(&b);
            return ix__tpl_fail_alloc(c, at, b.fail);
        }
        return ix__buf_take(c, &b, out);
    }
    if (x->kind == TV_LIST && y->kind == TV_LIST && (x->flag & TL_TUPLE) == (y->flag & TL_TUPLE))
        return concat_lists(c, at, x, y, out);
    return fail_operands(c, at, OP_ADD, x, y);
}

/* s * k (strings and lists). */
static bool repeat(rctx *c, const tnode *at, const tv *s, int64_t k, tv *out) {
    if (k <= 0 || !s->n) {
        *out = s->kind == TV_STR ? ix__tv_str("", 0, TS_CLEAN) : ix__tv_list(NULL, 0, s->flag);
        return true;
    }
    size_t elem = s->kind == TV_STR ? 1 : sizeof(tv), total;
    if ((uint64_t)k > SIZE_MAX || __builtin_mul_overflow(s->n, (size_t)k, &total) ||
        __builtin_mul_overflow(total, elem, &total))
        return ix__tpl_fail_alloc(c, at, IX_ERR_RANGE);
    char *p = ix__tpl_alloc(c, at, total + 1);
    if (!p) return false;
    size_t chunk = s->n * elem;
    for (int64_t i = 0; i < k; i++) memcpy(p + (size_t)i * chunk, s->kind == TV_STR ? (const void *)s->u.s : (const void *)s->u.items, chunk);
    *out = s->kind == TV_STR ? ix__tv_str(p, total, ix__str_derived(s)) : ix__tv_list((const tv *)p, (size_t)k * s->n, s->flag);
    return true;
}

/* "%s" % args: the conversions s, r, d, i and %% (what templates use). */
bool ix__tpl_percent(rctx *c, const tnode *at, const tv *fmt, const tv *args, tv *out) {
    const tv *items = args;
    size_t n = 1, used = 0;
    /* Python: a tuple is the arguments; a list or dict is one argument that
     * also counts as a mapping, so leftovers are no error */
    bool mapping = args->kind == TV_DICT || args->kind == TV_UNDEF || (args->kind == TV_LIST && !(args->flag & TL_TUPLE));
    if (args->kind == TV_LIST && (args->flag & TL_TUPLE)) {
        items = args->u.items;
        n = args->n;
    }
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    bool data = fmt->flag != TS_CLEAN;
    for (size_t i = 0; i < fmt->n; i++) {
        char ch = fmt->u.s[i];
        if (ch != '%' || i + 1 >= fmt->n) {
            if (!ix__buf_put(&b, &ch, 1, data)) break;
            continue;
        }
        char conv = fmt->u.s[++i];
        if (conv == '%') {
            if (!ix__buf_putc(&b, '%')) break;
            continue;
        }
        if (conv != 's' && conv != 'r' && conv != 'd' && conv != 'i') {
            ix__buf_free(&b);
            return ix__tpl_fail(c, at, IX_ERR_UNSUPPORTED, "format conversion '%%%c' is not supported", conv);
        }
        if (used >= n) {
            ix__buf_free(&b);
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "not enough arguments for format string");
        }
        const tv *v = &items[used++];
        bool ok;
        if (conv == 'r') {
            ok = ix__tv_put_repr(c, at, &b, v);
        } else if (conv == 's') {
            ok = ix__tv_put_str(c, at, &b, v);
        } else {
            if (!ix__tv_is_num(v)) {
                ix__buf_free(&b);
                return ix__tpl_fail(c, at, IX_ERR_TYPE, "%%%c format: a real number is required, not %s", conv,
                                    ix__tv_type(v));
            }
            tv iv = ix__tv_int(v->kind == TV_FLOAT ? (int64_t)v->u.f : ix__tv_int_of(v));
            ok = ix__tv_put_str(c, at, &b, &iv);
        }
        if (!ok) {
            ix__buf_free(&b);
            return false;
        }
    }
    if (b.fail == IX_OK && used < n && !mapping) {
        ix__buf_free(&b);
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "not all arguments converted during string formatting");
    }
    if (b.fail != IX_OK) {
        ix_status why = b.fail;
        ix__buf_free(&b);
        return ix__tpl_fail_alloc(c, at, why);
    }
    return ix__buf_take(c, &b, out);
}

static bool arith(rctx *c, const tnode *at, int op, const tv *x, const tv *y, tv *out) {
    if (op == OP_ADD) return ix__tpl_add(c, at, x, y, out);
    if (op == OP_MUL) {
        if ((x->kind == TV_STR || x->kind == TV_LIST) && (y->kind == TV_INT || y->kind == TV_BOOL))
            return repeat(c, at, x, ix__tv_int_of(y), out);
        if ((y->kind == TV_STR || y->kind == TV_LIST) && (x->kind == TV_INT || x->kind == TV_BOOL))
            return repeat(c, at, y, ix__tv_int_of(x), out);
    }
    if (op == OP_MOD && x->kind == TV_STR) return ix__tpl_percent(c, at, x, y, out);
    if (!ix__tv_is_num(x) || !ix__tv_is_num(y)) return fail_operands(c, at, op, x, y);
    bool ints = x->kind != TV_FLOAT && y->kind != TV_FLOAT;
    int64_t a = ints ? ix__tv_int_of(x) : 0, b = ints ? ix__tv_int_of(y) : 0, r;
    double fa = ix__tv_float_of(x), fb = ix__tv_float_of(y);
    switch (op) {
    case OP_SUB:
        if (!ints) break;
        if (__builtin_sub_overflow(a, b, &r)) return overflow(c, at);
        *out = ix__tv_int(r);
        return true;
    case OP_MUL:
        if (!ints) break;
        if (__builtin_mul_overflow(a, b, &r)) return overflow(c, at);
        *out = ix__tv_int(r);
        return true;
    case OP_DIV:
        if (fb == 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "division by zero");
        *out = ix__tv_float(fa / fb);
        return true;
    case OP_FLOORDIV:
    case OP_MOD:
        if (ints ? b == 0 : fb == 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "integer division or modulo by zero");
        if (ints) {
            if (a == INT64_MIN && b == -1) {
                if (op == OP_FLOORDIV) return overflow(c, at);
                *out = ix__tv_int(0);
                return true;
            }
            int64_t q = a / b, m = a % b;
            if (m != 0 && ((m < 0) != (b < 0))) {
                q--;
                m += b;
            }
            *out = ix__tv_int(op == OP_FLOORDIV ? q : m);
            return true;
        } else {
            double m = fmod(fa, fb);
            if (m != 0 && ((m < 0) != (fb < 0))) m += fb;
            *out = ix__tv_float(op == OP_FLOORDIV ? floor(fa / fb) : m);
            return true;
        }
    case OP_POW:
        if (ints && b >= 0) { /* by squaring; a square that overflows is needed by what remains */
            int64_t acc = 1, base = a;
            for (int64_t e = b; e > 0;) {
                if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return overflow(c, at);
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return overflow(c, at);
            }
            *out = ix__tv_int(acc);
            return true;
        }
        if (fa == 0 && fb < 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "0.0 cannot be raised to a negative power");
        *out = ix__tv_float(pow(fa, fb));
        return true;
    default: break;
    }
    if (op == OP_SUB) *out = ix__tv_float(fa - fb);
    else *out = ix__tv_float(fa * fb);
    return true;
}

static bool contains(rctx *c, const tnode *at, const tv *container, const tv *item, bool *res) {
    *res = false;
    switch ((tkind)container->kind) {
    case TV_STR:
        if (item->kind != TV_STR)
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "'in <string>' requires string as left operand, not %s",
                                ix__tv_type(item));
        *res = !item->n || (item->n <= container->n && memmem(container->u.s, container->n, item->u.s, item->n));
        return ix__tpl_cost(c, at, container->n >> 8);
    case TV_LIST:
        c->steps += container->n;
        for (size_t k = 0; k < container->n; k++) {
            int eq = ix__tv_eq(c, at, &container->u.items[k], item);
            if (eq < 0) return false;
            if (eq) {
                *res = true;
                break;
            }
        }
        return true;
    case TV_DICT:
        *res = ix__dict_get(c, at, container->u.d, item) != NULL;
        return c->st == IX_OK && ix__tpl_cost(c, at, container->u.d->n >> 4);
    case TV_UNDEF: return true;
    default: return ix__tpl_fail(c, at, IX_ERR_TYPE, "argument of type '%s' is not iterable", ix__tv_type(container));
    }
}

static bool compare(rctx *c, const tnode *at, int op, const tv *x, const tv *y, bool *res) {
    int r;
    switch (op) {
    case OP_EQ:
    case OP_NE:
        if ((r = ix__tv_eq(c, at, x, y)) < 0) return false;
        *res = op == OP_EQ ? r : !r;
        return true;
    case OP_IN:
    case OP_NOTIN:
        if (!contains(c, at, y, x, res)) return false;
        if (op == OP_NOTIN) *res = !*res;
        return true;
    default:
        if (x->kind == TV_UNDEF) return fail_undef(c, at, x);
        if (y->kind == TV_UNDEF) return fail_undef(c, at, y);
        if (!ix__tv_cmp(c, at, x, y, false, &r)) return false;
        *res = op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
        return true;
    }
}

/* a + b + c + ... : a run of string operands is copied once, not once per '+'. */
static bool eval_add_chain(rctx *c, const tnode *n, tframe *f, tv *out) {
    const tnode *spine[64]; /* spine[k - 1] is the innermost '+' */
    size_t k = 0;
    const tnode *x = n;
    while (x->kind == N_BIN && x->op == OP_ADD && k < IX_ARRAY_LEN(spine)) {
        spine[k++] = x;
        x = x->a;
    }
    tv acc;
    if (!eval(c, x, f, &acc)) return false; /* the leftmost operand */
    tbuf b;
    bool building = false; /* acc's text is in b */
    while (k--) {
        const tnode *op = spine[k];
        tv y;
        if (!eval(c, op->b, f, &y)) goto fail;
        if (y.kind == TV_STR && (building || acc.kind == TV_STR)) {
            if (!building) {
                ix__buf_init(&b, &c->ar, SIZE_MAX);
                ix__buf_put_str(&b, &acc);
                building = true;
            }
            ix__buf_put_str(&b, &y);
            continue;
        }
        if (building) {
            building = false;
            if (!ix__buf_take(c, &b, &acc)) return false;
        }
        if (!ix__tpl_add(c, op, &acc, &y, &acc)) return false;
    }
    if (building && !ix__buf_take(c, &b, &acc)) return false;
    *out = acc;
    return true;
fail:
    if (building) ix__buf_free(&b);
    return false;
}

/* ---- calls ---------------------------------------------------------------------------------- */

static bool call_macro(rctx *c, const tnode *at, const tfunc *fn, const targs *a, tv *out) {
    const tnode *m = fn->macro;
    if (a->npos > m->nkids)
        return ix__tpl_fail(c, at, IX_ERR_TYPE, "macro '%.*s' takes %u argument%s (%zu given)", (int)m->slen, m->s,
                            (unsigned)m->nkids, m->nkids == 1 ? "" : "s", a->npos);
    if (!ix__tpl_enter(c, at)) return false;
    tframe *f = frame_new(c, fn->closure);
    if (!f) return false;
    bool *set = ix__tpl_alloc_n(c, at, m->nkids ? m->nkids : 1, sizeof *set);
    if (!set) return false;
    for (size_t k = 0; k < a->npos; k++) {
        if (!frame_set(c, at, f, m->kids[k]->sym, &a->pos[k])) return false;
        set[k] = true;
    }
    for (size_t j = 0; j < a->nkw; j++) {
        uint32_t k = 0;
        while (k < m->nkids && (m->kids[k]->slen != a->kw[j].len || memcmp(m->kids[k]->s, a->kw[j].name, a->kw[j].len)))
            k++;
        if (k == m->nkids)
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "macro '%.*s' has no parameter '%.*s'", (int)m->slen, m->s,
                                (int)a->kw[j].len, a->kw[j].name);
        if (set[k])
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "macro '%.*s' got multiple values for '%.*s'", (int)m->slen, m->s,
                                (int)a->kw[j].len, a->kw[j].name);
        if (!frame_set(c, at, f, m->kids[k]->sym, &a->kw[j].v)) return false;
        set[k] = true;
    }
    for (uint32_t k = 0; k < m->nkids; k++) {
        if (set[k]) continue;
        tv v = ix__tv_undef(m->kids[k]);
        if (m->kids[k]->a && !eval(c, m->kids[k]->a, f, &v)) return false;
        if (!frame_set(c, at, f, m->kids[k]->sym, &v)) return false;
    }
    tbuf body, *saved = c->out;
    ix__buf_init(&body, &c->ar, SIZE_MAX);
    c->out = &body;
    int r = exec(c, m->b, f);
    c->out = saved;
    ix__tpl_leave(c);
    if (r == EX_ERR) {
        ix__buf_free(&body);
        return false;
    }
    return ix__buf_take(c, &body, out);
}

bool ix__tpl_call(rctx *c, const tnode *at, const tv *fn, const targs *a, tv *out) {
    if (fn->kind == TV_UNDEF) return fail_undef(c, at, fn);
    if (fn->kind != TV_FUNC) return ix__tpl_fail(c, at, IX_ERR_TYPE, "'%s' object is not callable", ix__tv_type(fn));
    const tfunc *f = fn->u.fn;
    switch ((tfn_kind)f->kind) {
    case TF_GLOBAL: return ix__tpl_call_global(c, at, f->id, a, out);
    case TF_METHOD: return ix__tpl_call_method(c, at, f->id, &f->self, a, out);
    case TF_MACRO: return call_macro(c, at, f, a, out);
    case TF_CYCLE:
        if (!a->npos) return ix__tpl_fail(c, at, IX_ERR_TYPE, "loop.cycle needs at least one argument");
        *out = a->pos[f->self.u.loop->i % a->npos];
        return true;
    }
    return ix__tpl_fail(c, at, IX_ERR_INTERNAL, "bad function");
}

static bool eval_call(rctx *c, const tnode *n, tframe *f, tv *out) {
    tv fn, pos_buf[SMALL_ARGS];
    tkw kw_buf[SMALL_ARGS];
    targs a;
    const tnode *callee = n->a;
    if (callee->kind == N_ATTR) { /* obj.method(...): no bound method made */
        tv obj;
        if (!eval(c, callee->a, f, &obj)) return false;
        int id = obj.kind == TV_STR || obj.kind == TV_LIST || obj.kind == TV_DICT
                     ? ix__tpl_method_find((tkind)obj.kind, callee->s, callee->slen)
                     : -1;
        if (id >= 0) return eval_args(c, n, 0, f, pos_buf, kw_buf, &a) && ix__tpl_call_method(c, n, id, &obj, &a, out);
        if (!ix__tpl_getattr(c, callee, &obj, callee->s, callee->slen, &fn)) return false;
    } else if (!eval(c, callee, f, &fn)) {
        return false;
    }
    return eval_args(c, n, 0, f, pos_buf, kw_buf, &a) && ix__tpl_call(c, n, &fn, &a, out);
}

static bool eval_filter(rctx *c, const tnode *n, const tv *x, tframe *f, tv *out) {
    tv pos_buf[SMALL_ARGS];
    tkw kw_buf[SMALL_ARGS];
    targs a;
    return eval_args(c, n, 0, f, pos_buf, kw_buf, &a) && ix__tpl_apply_filter(c, n, n->fn, x, &a, out);
}

/* ---- expressions ----------------------------------------------------------------------------- */

static bool eval_list(rctx *c, const tnode *n, tframe *f, tv *out) {
    tv *items = ix__tpl_alloc_n(c, n, n->nkids ? n->nkids : 1, sizeof *items);
    if (!items) return false;
    for (uint32_t k = 0; k < n->nkids; k++)
        if (!eval(c, n->kids[k], f, &items[k])) return false;
    *out = ix__tv_list(items, n->nkids, n->kind == N_TUPLE ? TL_TUPLE : 0);
    return true;
}

static bool eval_dict(rctx *c, const tnode *n, tframe *f, tv *out) {
    tdict *d = ix__tpl_alloc(c, n, sizeof *d);
    if (!d) return false;
    for (uint32_t k = 0; k < n->nkids; k++) {
        tv key, val;
        if (!eval(c, n->kids[k]->a, f, &key) || !eval(c, n->kids[k]->b, f, &val)) return false;
        if (key.kind == TV_LIST && !(key.flag & TL_TUPLE))
            return ix__tpl_fail(c, n->kids[k], IX_ERR_TYPE, "unhashable type: 'list'");
        if (key.kind == TV_DICT) return ix__tpl_fail(c, n->kids[k], IX_ERR_TYPE, "unhashable type: 'dict'");
        if (!ix__dict_set(c, n, d, &key, &val)) return false;
    }
    *out = ix__tv_dict(d);
    return true;
}

static bool eval_concat(rctx *c, const tnode *n, tframe *f, tv *out) {
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    for (uint32_t k = 0; k < n->nkids; k++) {
        tv v;
        if (!eval(c, n->kids[k], f, &v) || !ix__tv_put_str(c, n, &b, &v)) {
            ix__buf_free(&b);
            return false;
        }
    }
    return ix__buf_take(c, &b, out);
}

static bool eval_cmp(rctx *c, const tnode *n, tframe *f, tv *out) {
    tv left;
    if (!eval(c, n->a, f, &left)) return false;
    for (uint32_t k = 0; k < n->nkids; k++) {
        tv right;
        bool res = false;
        if (!eval(c, n->kids[k]->a, f, &right) || !compare(c, n->kids[k], n->kids[k]->op, &left, &right, &res))
            return false;
        if (!res) {
            *out = ix__tv_bool(false);
            return true;
        }
        left = right;
    }
    *out = ix__tv_bool(true);
    return true;
}

static bool eval_inner(rctx *c, const tnode *n, tframe *f, tv *out) {
    tv x, y;
    switch ((tnode_kind)n->kind) {
    case N_CONST: *out = n->val; return true;
    case N_NAME: {
        const tv *v = frame_lookup(c, f, n->sym);
        *out = v ? *v : ix__tv_undef(n);
        return true;
    }
    case N_ATTR: return eval(c, n->a, f, &x) && ix__tpl_getattr(c, n, &x, n->s, n->slen, out);
    case N_ITEM: return eval(c, n->a, f, &x) && eval(c, n->b, f, &y) && ix__tpl_getitem(c, n, &x, &y, out);
    case N_SLICE: {
        tv b = ix__tv_none(), e = ix__tv_none(), s = ix__tv_none();
        if (!eval(c, n->a, f, &x) || (n->b && !eval(c, n->b, f, &b)) || (n->c && !eval(c, n->c, f, &e)) ||
            (n->d && !eval(c, n->d, f, &s)))
            return false;
        return do_slice(c, n, &x, &b, &e, &s, out);
    }
    case N_CALL: return eval_call(c, n, f, out);
    case N_FILTER: return eval(c, n->a, f, &x) && eval_filter(c, n, &x, f, out);
    case N_TEST: {
        tv pos_buf[SMALL_ARGS];
        tkw kw_buf[SMALL_ARGS];
        targs a;
        bool res;
        if (!eval(c, n->a, f, &x) || !eval_args(c, n, 0, f, pos_buf, kw_buf, &a) ||
            !ix__tpl_apply_test(c, n, n->fn, &x, &a, &res))
            return false;
        *out = ix__tv_bool(n->op ? !res : res);
        return true;
    }
    case N_BIN:
        if (n->op == OP_ADD) return eval_add_chain(c, n, f, out);
        return eval(c, n->a, f, &x) && eval(c, n->b, f, &y) && arith(c, n, n->op, &x, &y, out);
    case N_NEG:
    case N_POS:
        if (!eval(c, n->a, f, &x)) return false;
        if (!ix__tv_is_num(&x)) {
            if (x.kind == TV_UNDEF) return fail_undef(c, n, &x);
            return ix__tpl_fail(c, n, IX_ERR_TYPE, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                                ix__tv_type(&x));
        }
        if (x.kind == TV_FLOAT) {
            *out = ix__tv_float(n->kind == N_NEG ? -x.u.f : x.u.f);
        } else {
            int64_t i = ix__tv_int_of(&x);
            if (n->kind == N_NEG && i == INT64_MIN) return overflow(c, n);
            *out = ix__tv_int(n->kind == N_NEG ? -i : i);
        }
        return true;
    case N_NOT:
        if (!eval(c, n->a, f, &x)) return false;
        *out = ix__tv_bool(!ix__tv_truthy(&x));
        return true;
    case N_AND:
    case N_OR:
        if (!eval(c, n->a, f, &x)) return false;
        if (ix__tv_truthy(&x) == (n->kind == N_OR)) {
            *out = x;
            return true;
        }
        return eval(c, n->b, f, out);
    case N_CMP: return eval_cmp(c, n, f, out);
    case N_CONCAT: return eval_concat(c, n, f, out);
    case N_COND:
        if (!eval(c, n->a, f, &x)) return false;
        if (ix__tv_truthy(&x)) return eval(c, n->b, f, out);
        if (n->c) return eval(c, n->c, f, out);
        *out = ix__tv_undef(n);
        return true;
    case N_LIST:
    case N_TUPLE: return eval_list(c, n, f, out);
    case N_DICT: return eval_dict(c, n, f, out);
    default: return ix__tpl_fail(c, n, IX_ERR_INTERNAL, "not an expression (node %d)", n->kind);
    }
}

static bool eval(rctx *c, const tnode *n, tframe *f, tv *out) {
    if (!step(c, n) || !ix__tpl_enter(c, n)) return false;
    bool ok = eval_inner(c, n, f, out);
    ix__tpl_leave(c);
    return ok;
}

/* ---- statements ------------------------------------------------------------------------------ */

static bool emit(rctx *c, const tnode *at, const tv *v) {
    return ix__tv_put_str(c, at, c->out, v) || ix__tpl_fail_alloc(c, at, c->out->fail);
}

/* Runs body into a string (macro bodies, block sets, filter blocks). */
static bool capture(rctx *c, const tnode *body, tframe *f, tv *out) {
    tbuf b, *saved = c->out;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    c->out = &b;
    int r = exec(c, body, f);
    c->out = saved;
    if (r == EX_ERR) {
        ix__buf_free(&b);
        return false;
    }
    return ix__buf_take(c, &b, out);
}

static bool apply_chain(rctx *c, const tnode *chain, tframe *f, tv *v) {
    for (uint32_t k = 0; k < chain->nkids; k++)
        if (!eval_filter(c, chain->kids[k], v, f, v)) return false;
    return true;
}

static bool assign(rctx *c, const tnode *target, tframe *f, const tv *v) {
    if (target->kind == N_NAME) return frame_set(c, target, f, target->sym, v);
    if (target->kind == N_ATTR) {
        const tv *ns = frame_lookup(c, f, target->a->sym);
        if (!ns || ns->kind != TV_NS)
            return ix__tpl_fail(c, target, IX_ERR_TYPE, "cannot assign attribute '%.*s' on a non-namespace object",
                                (int)target->slen, target->s);
        tv key = ix__tv_str(target->s, target->slen, TS_CLEAN);
        return ix__dict_set(c, target, ns->u.d, &key, v);
    }
    /* a tuple of names */
    const tv *items;
    size_t n;
    if (v->kind != TV_LIST && v->kind != TV_STR && v->kind != TV_DICT)
        return ix__tpl_fail(c, target, IX_ERR_TYPE, "cannot unpack non-iterable %s object", ix__tv_type(v));
    if (!ix__tpl_iterate(c, target, v, &items, &n)) return false;
    if (n != target->nkids)
        return ix__tpl_fail(c, target, IX_ERR_TYPE, n > target->nkids ? "too many values to unpack (expected %u)"
                                                                     : "not enough values to unpack (expected %u)",
                            (unsigned)target->nkids);
    for (uint32_t k = 0; k < target->nkids; k++)
        if (!frame_set(c, target->kids[k], f, target->kids[k]->sym, &items[k])) return false;
    return true;
}

static int exec_for(rctx *c, const tnode *n, tframe *f) {
    tv iter;
    const tv *items;
    size_t count;
    if (!eval(c, n->b, f, &iter) || !ix__tpl_iterate(c, n->b, &iter, &items, &count)) return EX_ERR;
    tframe *lf = frame_new(c, f);
    if (!lf) return EX_ERR;
    if (n->e) { /* the loop's filter comes first: loop.length counts what it keeps */
        tv *kept = ix__tpl_alloc_n(c, n, count ? count : 1, sizeof *kept);
        if (!kept) return EX_ERR;
        size_t m = 0;
        for (size_t k = 0; k < count; k++) {
            tv ok;
            lf->n = 0;
            if (++c->iters > c->p->max_loop_iterations) goto too_many;
            if (!assign(c, n->a, lf, &items[k]) || !eval(c, n->e, lf, &ok)) return EX_ERR;
            if (ix__tv_truthy(&ok)) kept[m++] = items[k];
        }
        items = kept;
        count = m;
    }
    if (!count) return n->d ? exec(c, n->d, f) : EX_OK;
    tloop *state = ix__tpl_alloc(c, n, sizeof *state);
    if (!state) return EX_ERR;
    *state = (tloop){items, count, 0};
    tv loopv = {.kind = TV_LOOP};
    loopv.u.loop = state;
    uint32_t sym_loop = c->t->sym_loop;
    for (size_t k = 0; k < count; k++) {
        if (++c->iters > c->p->max_loop_iterations) goto too_many;
        state->i = k;
        lf->n = 0; /* a new scope each iteration */
        if ((sym_loop != UINT32_MAX && !frame_set(c, n, lf, sym_loop, &loopv)) || !assign(c, n->a, lf, &items[k]))
            return EX_ERR;
        int r = exec(c, n->c, lf);
        if (r == EX_ERR) return EX_ERR;
        if (r == EX_BREAK) break;
    }
    return EX_OK;
too_many:
    ix__tpl_fail(c, n, IX_ERR_RANGE, "loops ran more than max_loop_iterations (%llu) times",
                 (unsigned long long)c->p->max_loop_iterations);
    return EX_ERR;
}

static int exec_inner(rctx *c, const tnode *n, tframe *f) {
    tv v;
    switch ((tnode_kind)n->kind) {
    case N_BODY:
        for (uint32_t k = 0; k < n->nkids; k++) {
            int r = exec(c, n->kids[k], f);
            if (r != EX_OK) return r;
        }
        return EX_OK;
    case N_DATA: return ix__buf_put(c->out, n->s, n->slen, false) || ix__tpl_fail_alloc(c, n, c->out->fail) ? EX_OK : EX_ERR;
    case N_OUTPUT: return eval(c, n->a, f, &v) && emit(c, n, &v) ? EX_OK : EX_ERR;
    case N_IF:
        for (uint32_t k = 0; k < n->nkids; k++) {
            if (!eval(c, n->kids[k]->a, f, &v)) return EX_ERR;
            if (ix__tv_truthy(&v)) return exec(c, n->kids[k]->b, f);
        }
        return n->c ? exec(c, n->c, f) : EX_OK;
    case N_FOR: return exec_for(c, n, f);
    case N_SET: return eval(c, n->b, f, &v) && assign(c, n->a, f, &v) ? EX_OK : EX_ERR;
    case N_SET_BLOCK: return capture(c, n->b, f, &v) && apply_chain(c, n, f, &v) && assign(c, n->a, f, &v) ? EX_OK : EX_ERR;
    case N_FILTER_BLOCK: return capture(c, n->b, f, &v) && apply_chain(c, n, f, &v) && emit(c, n, &v) ? EX_OK : EX_ERR;
    case N_MACRO: {
        tfunc *fn = ix__tpl_alloc(c, n, sizeof *fn);
        if (!fn) return EX_ERR;
        fn->kind = TF_MACRO;
        fn->macro = n;
        fn->closure = f;
        v = (tv){.kind = TV_FUNC};
        v.u.fn = fn;
        return frame_set(c, n, f, n->sym, &v) ? EX_OK : EX_ERR;
    }
    case N_BREAK: return EX_BREAK;
    case N_CONTINUE: return EX_CONTINUE;
    default: ix__tpl_fail(c, n, IX_ERR_INTERNAL, "not a statement (node %d)", n->kind); return EX_ERR;
    }
}

static int exec(rctx *c, const tnode *n, tframe *f) {
    if (!step(c, n) || !ix__tpl_enter(c, n)) return EX_ERR;
    int r = exec_inner(c, n, f);
    ix__tpl_leave(c);
    return c->st == IX_OK ? r : EX_ERR;
}

/* ---- a render --------------------------------------------------------------------------------- */

static bool set_global(rctx *c, tframe *f, const char *name, const tv *v) {
    uint32_t sym = ix__tpl_sym_find(c->t, name, strlen(name));
    return sym == UINT32_MAX || frame_set(c, NULL, f, sym, v);
}

static bool set_token(rctx *c, tframe *f, const char *name, const char *text) {
    if (!text) return true;
    size_t n = strlen(text);
    if (!ix__utf8_valid(text, n)) return ix__tpl_fail(c, NULL, IX_ERR_UTF8, "%s is not valid UTF-8", name);
    tv v = ix__tv_str(text, n, TS_CLEAN);
    return set_global(c, f, name, &v);
}

/* The caller's variables and the global functions. */
static bool make_globals(rctx *c, const ix_template_vars *vars, tframe *g) {
    for (int id = 0; id < ix__tpl_global_count(); id++) {
        const char *name = ix__tpl_global_name(id);
        if (!strcmp(name, "strftime_now") && vars->now_unix_s <= 0) continue;
        if (ix__tpl_sym_find(c->t, name, strlen(name)) == UINT32_MAX) continue;
        tfunc *fn = ix__tpl_alloc(c, NULL, sizeof *fn);
        if (!fn) return false;
        fn->kind = TF_GLOBAL;
        fn->id = id;
        tv v = {.kind = TV_FUNC};
        v.u.fn = fn;
        if (!set_global(c, g, name, &v)) return false;
    }
    if (vars->extra) {
        if (!json_is_object(vars->extra))
            return ix__tpl_fail(c, NULL, IX_ERR_INVALID, "the extra variables must be a JSON object");
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)vars->extra, key, val) {
            if (ix__tpl_sym_find(c->t, key, strlen(key)) == UINT32_MAX) continue;
            tv v;
            if (!ix__tv_from_json(c, val, &v) || !set_global(c, g, key, &v)) return false;
        }
    }
    tv v;
    if (!ix__tv_from_json(c, vars->messages, &v) || !set_global(c, g, "messages", &v)) return false;
    if (vars->tools && (!ix__tv_from_json(c, vars->tools, &v) || !set_global(c, g, "tools", &v))) return false;
    v = ix__tv_bool(vars->add_generation_prompt);
    return set_global(c, g, "add_generation_prompt", &v) && set_token(c, g, "bos_token", vars->bos_token) &&
           set_token(c, g, "eos_token", vars->eos_token);
}

ix_status ix__tpl_run(const ix_template *t, const ix_template_vars *vars, ix_template_result *out, ix_errbuf *err) {
    rctx c = {.t = t, .p = &t->params, .err = err, .now_unix_s = vars->now_unix_s};
    c.ar.limit_bytes = t->params.max_memory_bytes;
    tbuf result;
    ix__buf_init(&result, NULL, t->params.max_output_bytes);
    c.out = &result;
    tframe *g = frame_new(&c, NULL);
    tframe *tl = g ? frame_new(&c, g) : NULL; /* the template's top level */
    if (tl && make_globals(&c, vars, g)) exec(&c, t->root, tl);
    if (c.st == IX_OK && !ix__buf_put(&result, "", 0, false)) ix__tpl_fail_alloc(&c, NULL, result.fail);
    ix__arena_free(&c.ar);
    if (c.st != IX_OK) {
        ix__buf_free(&result);
        return c.st;
    }
    out->text = result.p;
    out->len = result.len;
    out->data = result.sp;
    out->n_data = result.nsp;
    return IX_OK;
}
