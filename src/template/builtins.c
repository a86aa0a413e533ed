/* inferx template: the built-in filters, tests, methods and global functions,
 * one table each (name -> function). Semantics are jinja2 3.1's (filters,
 * tests), Python's (str and dict methods) and Hugging Face's (tojson keeps key
 * order and does not escape HTML; raise_exception; strftime_now). Case
 * mapping is ASCII-only. Adding one = a function and a row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "template/template_int.h"

/* ---- helpers ------------------------------------------------------------------ */

static bool given(const tv *v) { return v->kind != TV_MISSING; }

static bool type_error(rctx *c, const tnode *at, const char *what, const char *want, const tv *got) {
    return ix__tpl_fail(c, at, IX_ERR_TYPE, "%s: expected %s, got %s", what, want, ix__tv_type(got));
}

static bool bind(rctx *c, const tnode *at, const char *what, const targs *a, const char *const *names, size_t n,
                 tv *out) {
    return ix__tpl_bind(c, at, what, a, names, n, out);
}
#define BIND(what, names, out) bind(c, at, what, a, names, IX_ARRAY_LEN(names), out)

static bool no_args(rctx *c, const tnode *at, const char *what, const targs *a) {
    return bind(c, at, what, a, NULL, 0, NULL);
}

/* str(v) as a value. */
static bool str_of(rctx *c, const tnode *at, const tv *v, tv *out) { return ix__tv_to_str(c, at, v, out); }

static bool need_str(rctx *c, const tnode *at, const char *what, const tv *v) {
    return v->kind == TV_STR || type_error(c, at, what, "a string", v);
}

static bool ascii_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

typedef enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_PY, CASE_TITLE_JINJA } case_op;

static bool cased(uint32_t cp) { return ix__cp_upper(cp) != cp || ix__cp_lower(cp) != cp; }

/* A case-mapped copy of s (the mappings of ix__cp_upper / ix__cp_lower). */
static bool map_case(rctx *c, const tnode *at, const tv *s, case_op op, tv *out) {
    char *o = ix__tpl_alloc(c, at, 2 * s->n + 1); /* no mapping here grows a character by more */
    if (!o) return false;
    size_t k = 0;
    bool prev_cased = false, word_start = true, first = true;
    for (size_t i = 0; i < s->n;) {
        uint32_t cp = ix__utf8_next(s->u.s, s->n, &i), m = cp;
        switch (op) {
        case CASE_UPPER: m = ix__cp_upper(cp); break;
        case CASE_LOWER: m = ix__cp_lower(cp); break;
        case CASE_CAPITALIZE: m = first ? ix__cp_upper(cp) : ix__cp_lower(cp); break;
        case CASE_TITLE_PY: /* str.title(): a cased letter after an uncased one is upper */
            m = prev_cased ? ix__cp_lower(cp) : ix__cp_upper(cp);
            prev_cased = cased(cp);
            break;
        case CASE_TITLE_JINJA: /* the title filter: words start after whitespace, '-', and opening brackets */
            m = word_start ? ix__cp_upper(cp) : ix__cp_lower(cp);
            word_start = ix__is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
            break;
        }
        first = false;
        k += ix__utf8_put(m, o + k);
    }
    *out = ix__tv_str(o, k, ix__str_derived(s));
    return true;
}

/* Python's strip family: which code points go (chars: a string of them, or
 * missing/None for whitespace). */
static bool strip_set(const tv *chars, uint32_t cp) {
    if (!given(chars) || chars->kind == TV_NONE) return ix__is_space(cp);
    for (size_t i = 0; i < chars->n;)
        if (ix__utf8_next(chars->u.s, chars->n, &i) == cp) return true;
    return false;
}

static bool strip(rctx *c, const tnode *at, const tv *s, const tv *chars, bool left, bool right, tv *out) {
    if (given(chars) && chars->kind != TV_NONE && chars->kind != TV_STR)
        return type_error(c, at, "strip", "a string or None", chars);
    size_t a = 0, z = s->n;
    while (left && a < z) {
        size_t i = a;
        if (!strip_set(chars, ix__utf8_next(s->u.s, z, &i))) break;
        a = i;
    }
    while (right && z > a) {
        size_t i = z;
        if (!strip_set(chars, ix__utf8_prev(s->u.s, &i))) break;
        z = i;
    }
    return ix__str_sub(c, at, s, a, z - a, out);
}

/* A list of n values in the arena. */
static tv *new_items(rctx *c, const tnode *at, size_t n) { return ix__tpl_alloc_n(c, at, n ? n : 1, sizeof(tv)); }

static bool iterate(rctx *c, const tnode *at, const tv *v, const tv **items, size_t *n) {
    return ix__tpl_iterate(c, at, v, items, n);
}

/* A stable merge sort of n values by cmp_key (with the key paths and
 * case folding of the sort filters); fails as ix__tv_cmp does. */
typedef struct sort_ctx {
    rctx *c;
    const tnode *at;
    const tv *attr; /* key path, or missing */
    bool fold;
    int by_value; /* dictsort: compare pairs by item 1 */
} sort_ctx;

static bool sort_key(sort_ctx *s, const tv *v, tv *key) {
    if (s->by_value >= 0 && v->kind == TV_LIST && v->n == 2) {
        *key = v->u.items[s->by_value];
        return true;
    }
    if (given(s->attr) && s->attr->kind != TV_NONE) return ix__tpl_getpath(s->c, s->at, v, s->attr, key);
    *key = *v;
    return true;
}

static bool sort_cmp(sort_ctx *s, const tv *a, const tv *b, int *r) {
    tv ka, kb;
    return sort_key(s, a, &ka) && sort_key(s, b, &kb) && ix__tv_cmp(s->c, s->at, &ka, &kb, s->fold, r);
}

static bool merge_sort(sort_ctx *s, tv *v, tv *tmp, size_t n, bool reverse) {
    if (n < 2) return true;
    size_t h = n / 2;
    if (!merge_sort(s, v, tmp, h, reverse) || !merge_sort(s, v + h, tmp, n - h, reverse)) return false;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r;
        if (!sort_cmp(s, &v[i], &v[j], &r)) return false;
        if (reverse) r = -r;
        tmp[k++] = r <= 0 ? v[i++] : v[j++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
    return true;
}

static bool sorted(rctx *c, const tnode *at, const tv *items, size_t n, const tv *attr, bool fold, int by_value,
                   bool reverse, tv *out) {
    tv *v = new_items(c, at, n), *tmp = new_items(c, at, n);
    if (!v || !tmp) return false;
    if (n) memcpy(v, items, n * sizeof *v);
    sort_ctx s = {c, at, attr, fold, by_value};
    if (!merge_sort(&s, v, tmp, n, reverse)) return false;
    *out = ix__tv_list(v, n, 0);
    return true;
}

/* ---- filters -------------------------------------------------------------------- */

static bool f_abs(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    if (!no_args(c, at, "abs", a)) return false;
    if (x->kind == TV_FLOAT) {
        *out = ix__tv_float(fabs(x->u.f));
        return true;
    }
    if (!ix__tv_is_int(x)) return type_error(c, at, "abs", "a number", x);
    if (ix__tv_int_of(x) == INT64_MIN) return ix__tpl_fail(c, at, IX_ERR_RANGE, "integer overflow");
    *out = ix__tv_int(llabs(ix__tv_int_of(x)));
    return true;
}

static bool f_attr(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"name"};
    tv v[1];
    if (!BIND("attr", k_names, v)) return false;
    if (v[0].kind != TV_STR) return type_error(c, at, "attr", "a string", &v[0]);
    return ix__tpl_getattr(c, at, x, v[0].u.s, v[0].n, out);
}

static bool f_case(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out, const char *what, case_op op) {
    tv s;
    return no_args(c, at, what, a) && str_of(c, at, x, &s) && map_case(c, at, &s, op, out);
}
static bool f_capitalize(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return f_case(c, at, x, a, out, "capitalize", CASE_CAPITALIZE);
}
static bool f_upper(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return f_case(c, at, x, a, out, "upper", CASE_UPPER);
}
static bool f_lower(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return f_case(c, at, x, a, out, "lower", CASE_LOWER);
}
static bool f_title(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return f_case(c, at, x, a, out, "title", CASE_TITLE_JINJA);
}

static bool f_center(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"width"};
    tv v[1], s;
    if (!BIND("center", k_names, v) || !str_of(c, at, x, &s)) return false;
    int64_t width = given(&v[0]) ? ix__tv_int_of(&v[0]) : 80;
    size_t len = ix__utf8_count(s.u.s, s.n);
    if (width <= 0 || (uint64_t)width <= len) {
        *out = s;
        return true;
    }
    if ((uint64_t)width > c->p->max_output_bytes) return ix__tpl_fail_alloc(c, at, IX_ERR_TOO_LONG);
    size_t pad = (size_t)width - len, left = pad / 2 + (pad & (size_t)width & 1);
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    for (size_t k = 0; k < left; k++) ix__buf_putc(&b, ' ');
    ix__buf_put_str(&b, &s);
    for (size_t k = left; k < pad; k++) ix__buf_putc(&b, ' ');
    return ix__buf_take(c, &b, out);
}

static bool length_of(rctx *c, const tnode *at, const tv *x, int64_t *n) {
    switch ((tkind)x->kind) {
    case TV_STR: *n = (int64_t)ix__utf8_count(x->u.s, x->n); return ix__tpl_cost(c, at, x->n >> 8);
    case TV_LIST: *n = (int64_t)x->n; return true;
    case TV_DICT:
    case TV_NS: *n = (int64_t)x->u.d->n; return true;
    case TV_UNDEF: *n = 0; return true;
    default: return ix__tpl_fail(c, at, IX_ERR_TYPE, "object of type '%s' has no len()", ix__tv_type(x));
    }
}

static bool f_length(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    int64_t n = 0;
    if (!no_args(c, at, "length", a) || !length_of(c, at, x, &n)) return false;
    *out = ix__tv_int(n);
    return true;
}

static bool f_default(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"default_value", "boolean"};
    tv v[2];
    if (!BIND("default", k_names, v)) return false;
    bool use = x->kind == TV_UNDEF || (given(&v[1]) && ix__tv_truthy(&v[1]) && !ix__tv_truthy(x));
    *out = !use ? *x : given(&v[0]) ? v[0] : ix__tv_str("", 0, TS_CLEAN);
    return true;
}

static bool items_of(rctx *c, const tnode *at, const tv *x, tv *out) {
    if (x->kind == TV_UNDEF) {
        *out = ix__tv_list(NULL, 0, 0);
        return true;
    }
    if (x->kind != TV_DICT) return ix__tpl_fail(c, at, IX_ERR_TYPE, "can only get item pairs from a mapping, not %s", ix__tv_type(x));
    const tdict *d = x->u.d;
    tv *pairs = new_items(c, at, d->n), *kv = ix__tpl_alloc_n(c, at, d->n ? 2 * d->n : 1, sizeof *kv);
    if (!pairs || !kv) return false;
    for (size_t k = 0; k < d->n; k++) {
        kv[2 * k] = d->e[k].k;
        kv[2 * k + 1] = d->e[k].v;
        pairs[k] = ix__tv_list(&kv[2 * k], 2, TL_TUPLE);
    }
    *out = ix__tv_list(pairs, d->n, 0);
    return true;
}

static bool f_items(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return no_args(c, at, "items", a) && items_of(c, at, x, out);
}

static bool f_dictsort(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"case_sensitive", "by", "reverse"};
    tv v[3], pairs;
    if (!BIND("dictsort", k_names, v) || !items_of(c, at, x, &pairs)) return false;
    int by = 0;
    if (given(&v[1])) {
        if (ix__str_is(&v[1], "value")) by = 1;
        else if (!ix__str_is(&v[1], "key")) return ix__tpl_fail(c, at, IX_ERR_TYPE, "dictsort: 'by' must be 'key' or 'value'");
    }
    tv none = ix__tv_missing();
    return sorted(c, at, pairs.u.items, pairs.n, &none, !(given(&v[0]) && ix__tv_truthy(&v[0])), by,
                  given(&v[2]) && ix__tv_truthy(&v[2]), out);
}

static bool f_escape(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    tv s;
    if (!no_args(c, at, "escape", a) || !str_of(c, at, x, &s)) return false;
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    bool data = s.flag != TS_CLEAN;
    for (size_t i = 0; i < s.n; i++) {
        const char *r = NULL;
        switch (s.u.s[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        default: break;
        }
        if (r) ix__buf_put(&b, r, strlen(r), data);
        else ix__buf_put(&b, s.u.s + i, 1, data);
    }
    return ix__buf_take(c, &b, out);
}

static bool f_first(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    const tv *items;
    size_t n;
    if (!no_args(c, at, "first", a)) return false;
    if (x->kind == TV_STR) {
        size_t i = 0;
        if (!x->n) {
            *out = ix__tv_undef(at);
            return true;
        }
        ix__utf8_next(x->u.s, x->n, &i);
        return ix__str_sub(c, at, x, 0, i, out);
    }
    if (!iterate(c, at, x, &items, &n)) return false;
    *out = n ? items[0] : ix__tv_undef(at);
    return true;
}

static bool f_last(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    const tv *items;
    size_t n;
    if (!no_args(c, at, "last", a)) return false;
    if (x->kind == TV_STR) {
        size_t i = x->n;
        if (!x->n) {
            *out = ix__tv_undef(at);
            return true;
        }
        ix__utf8_prev(x->u.s, &i);
        return ix__str_sub(c, at, x, i, x->n - i, out);
    }
    if (!iterate(c, at, x, &items, &n)) return false;
    *out = n ? items[n - 1] : ix__tv_undef(at);
    return true;
}

/* Python's int() / float() of a string, as the int and float filters try them. */
static bool parse_number(const tv *s, bool want_int, int64_t base, tv *out) {
    char buf[128];
    size_t k = 0;
    for (size_t i = 0; i < s->n && k + 1 < sizeof buf; i++)
        if (s->u.s[i] != '_') buf[k++] = s->u.s[i];
    if (k + 1 >= sizeof buf) return false;
    buf[k] = 0;
    char *p = buf;
    while (*p == ' ' || (*p >= '\t' && *p <= '\r')) p++;
    char *end;
    if (want_int) {
        long long v = strtoll(p, &end, (int)base);
        if (end == p) return false;
        while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
        if (*end) return false;
        *out = ix__tv_int(v);
        return true;
    }
    double d = strtod(p, &end);
    if (end == p) return false;
    while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
    if (*end) return false;
    *out = ix__tv_float(d);
    return true;
}

static bool f_int(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"default", "base"};
    tv v[2];
    if (!BIND("int", k_names, v)) return false;
    int64_t base = given(&v[1]) ? ix__tv_int_of(&v[1]) : 10;
    if (base < 2 || base > 36) base = 10;
    *out = given(&v[0]) ? v[0] : ix__tv_int(0);
    if (ix__tv_is_int(x)) {
        *out = ix__tv_int(ix__tv_int_of(x));
    } else if (x->kind == TV_FLOAT) {
        if (isfinite(x->u.f) && fabs(x->u.f) < 9.2e18) *out = ix__tv_int((int64_t)x->u.f);
    } else if (x->kind == TV_STR) {
        tv f;
        if (!parse_number(x, true, base, out) && parse_number(x, false, 10, &f) && isfinite(f.u.f) && fabs(f.u.f) < 9.2e18)
            *out = ix__tv_int((int64_t)f.u.f);
    }
    return true;
}

static bool f_float(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"default"};
    tv v[1];
    if (!BIND("float", k_names, v)) return false;
    *out = given(&v[0]) ? v[0] : ix__tv_float(0.0);
    if (ix__tv_is_num(x)) *out = ix__tv_float(x->kind == TV_FLOAT ? x->u.f : (double)ix__tv_int_of(x));
    else if (x->kind == TV_STR) parse_number(x, false, 10, out);
    return true;
}

static bool f_format(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    tv s;
    if (a->nkw) return ix__tpl_fail(c, at, IX_ERR_UNSUPPORTED, "format: keyword arguments are not supported");
    if (!str_of(c, at, x, &s)) return false;
    tv args = ix__tv_list(a->pos, a->npos, TL_TUPLE);
    return ix__tpl_percent(c, at, &s, &args, out);
}

static bool f_indent(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"width", "first", "blank"};
    tv v[3], s, ind;
    if (!BIND("indent", k_names, v) || !str_of(c, at, x, &s)) return false;
    char spaces[64];
    if (given(&v[0]) && v[0].kind == TV_STR) {
        ind = v[0];
    } else {
        int64_t w = given(&v[0]) ? ix__tv_int_of(&v[0]) : 4;
        if (w < 0) w = 0;
        if (w > (int64_t)sizeof spaces) return ix__tpl_fail(c, at, IX_ERR_RANGE, "indent: width %lld too large", (long long)w);
        memset(spaces, ' ', (size_t)w);
        ind = ix__tv_str(spaces, (size_t)w, TS_CLEAN);
    }
    bool first = given(&v[1]) && ix__tv_truthy(&v[1]), blank = given(&v[2]) && ix__tv_truthy(&v[2]);
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    if (first) ix__buf_put_str(&b, &ind);
    for (size_t i = 0, line = 0; i < s.n; line++) {
        const char *nl = memchr(s.u.s + i, '\n', s.n - i);
        size_t end = nl ? (size_t)(nl - s.u.s) : s.n;
        if (line > 0) {
            ix__buf_putc(&b, '\n');
            if (blank || end > i) ix__buf_put_str(&b, &ind);
        }
        tv part;
        if (!ix__str_sub(c, at, &s, i, end - i, &part)) {
            ix__buf_free(&b);
            return false;
        }
        ix__buf_put_str(&b, &part);
        i = nl ? end + 1 : s.n;
    }
    return ix__buf_take(c, &b, out);
}

static bool f_join(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"d", "attribute"};
    tv v[2];
    const tv *items;
    size_t n;
    if (!BIND("join", k_names, v) || !iterate(c, at, x, &items, &n)) return false;
    tv sep = ix__tv_str("", 0, TS_CLEAN);
    if (given(&v[0]) && !str_of(c, at, &v[0], &sep)) return false;
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    for (size_t k = 0; k < n; k++) {
        tv item = items[k];
        if ((k && !ix__buf_put_str(&b, &sep)) ||
            (given(&v[1]) && !ix__tpl_getpath(c, at, &items[k], &v[1], &item)) || !ix__tv_put_str(c, at, &b, &item)) {
            ix_status why = b.fail;
            ix__buf_free(&b);
            return c->st != IX_OK ? false : ix__tpl_fail_alloc(c, at, why);
        }
    }
    return ix__buf_take(c, &b, out);
}

static bool f_list(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    const tv *items;
    size_t n;
    if (!no_args(c, at, "list", a) || !iterate(c, at, x, &items, &n)) return false;
    *out = ix__tv_list(items, n, 0);
    return true;
}

/* select / reject / selectattr / rejectattr: keep items whose value (or
 * attribute) passes the test named by the first argument (truthiness when
 * none is named). */
static bool select_common(rctx *c, const tnode *at, const tv *x, const targs *a, bool by_attr, bool keep, tv *out) {
    const tv *items;
    size_t n;
    if (a->nkw) return ix__tpl_fail(c, at, IX_ERR_TYPE, "select filters take no keyword arguments");
    size_t first_arg = by_attr ? 1 : 0;
    if (by_attr && a->npos < 1) return ix__tpl_fail(c, at, IX_ERR_TYPE, "selectattr/rejectattr need an attribute name");
    int test = -1;
    if (a->npos > first_arg) {
        const tv *name = &a->pos[first_arg];
        if (name->kind != TV_STR) return type_error(c, at, "select", "a test name", name);
        if ((test = ix__tpl_test_find(name->u.s, name->n)) < 0)
            return ix__tpl_fail(c, at, IX_ERR_UNSUPPORTED, "unknown test '%.*s'", (int)(name->n > 40 ? 40 : name->n),
                                name->u.s);
    }
    targs rest = {a->pos + first_arg + 1, a->npos > first_arg + 1 ? a->npos - first_arg - 1 : 0, NULL, 0};
    if (!iterate(c, at, x, &items, &n)) return false;
    tv *kept = new_items(c, at, n);
    if (!kept) return false;
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        tv val = items[k];
        bool ok;
        if (by_attr && !ix__tpl_getpath(c, at, &items[k], &a->pos[0], &val)) return false;
        if (test >= 0) {
            if (!ix__tpl_apply_test(c, at, test, &val, &rest, &ok)) return false;
        } else {
            ok = ix__tv_truthy(&val);
        }
        if (ok == keep) kept[m++] = items[k];
    }
    *out = ix__tv_list(kept, m, 0);
    return true;
}
static bool f_select(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return select_common(c, at, x, a, false, true, out);
}
static bool f_reject(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return select_common(c, at, x, a, false, false, out);
}
static bool f_selectattr(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return select_common(c, at, x, a, true, true, out);
}
static bool f_rejectattr(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return select_common(c, at, x, a, true, false, out);
}

static bool f_map(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    const tv *items;
    size_t n;
    const tv *attr = NULL, *dflt = NULL;
    for (size_t k = 0; k < a->nkw; k++) {
        if (a->kw[k].len == 9 && !memcmp(a->kw[k].name, "attribute", 9)) attr = &a->kw[k].v;
        else if (a->kw[k].len == 7 && !memcmp(a->kw[k].name, "default", 7)) dflt = &a->kw[k].v;
        else if (!attr && a->npos == 0)
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "map got an unexpected keyword argument '%.*s'", (int)a->kw[k].len,
                                a->kw[k].name);
    }
    int filter = -1;
    if (!attr) {
        if (!a->npos || a->pos[0].kind != TV_STR) return ix__tpl_fail(c, at, IX_ERR_TYPE, "map needs a filter name or attribute=");
        if ((filter = ix__tpl_filter_find(a->pos[0].u.s, a->pos[0].n)) < 0)
            return ix__tpl_fail(c, at, IX_ERR_UNSUPPORTED, "unknown filter '%.*s'", (int)(a->pos[0].n > 40 ? 40 : a->pos[0].n),
                                a->pos[0].u.s);
    }
    targs rest = {a->npos ? a->pos + 1 : NULL, a->npos ? a->npos - 1 : 0, attr ? NULL : a->kw, attr ? 0 : a->nkw};
    if (!iterate(c, at, x, &items, &n)) return false;
    tv *res = new_items(c, at, n);
    if (!res) return false;
    for (size_t k = 0; k < n; k++) {
        if (attr) {
            if (!ix__tpl_getpath(c, at, &items[k], attr, &res[k])) return false;
            if (dflt && res[k].kind == TV_UNDEF) res[k] = *dflt;
        } else if (!ix__tpl_apply_filter(c, at, filter, &items[k], &rest, &res[k])) {
            return false;
        }
    }
    *out = ix__tv_list(res, n, 0);
    return true;
}

static bool minmax(rctx *c, const tnode *at, const tv *x, const targs *a, bool want_max, tv *out) {
    static const char *const k_names[] = {"case_sensitive", "attribute"};
    tv v[2];
    const tv *items;
    size_t n;
    if (!BIND(want_max ? "max" : "min", k_names, v) || !iterate(c, at, x, &items, &n)) return false;
    sort_ctx s = {c, at, &v[1], !(given(&v[0]) && ix__tv_truthy(&v[0])), -1};
    if (!n) {
        *out = ix__tv_undef(at);
        return true;
    }
    const tv *best = &items[0];
    for (size_t k = 1; k < n; k++) {
        int r;
        if (!sort_cmp(&s, &items[k], best, &r)) return false;
        if (want_max ? r > 0 : r < 0) best = &items[k];
    }
    *out = *best;
    return true;
}
static bool f_max(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) { return minmax(c, at, x, a, true, out); }
static bool f_min(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) { return minmax(c, at, x, a, false, out); }

/* Python's str.replace (count < 0: all). */
static bool replace(rctx *c, const tnode *at, const tv *s, const tv *old, const tv *new, int64_t count, tv *out) {
    if (old->kind != TV_STR || new->kind != TV_STR) return type_error(c, at, "replace", "strings", old->kind != TV_STR ? old : new);
    if (count == 0 || (old->n && !memmem(s->u.s, s->n, old->u.s, old->n))) {
        *out = *s;
        return true;
    }
    if (!ix__tpl_cost(c, at, s->n >> 8)) return false;
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    bool data = s->flag != TS_CLEAN || new->flag != TS_CLEAN;
    size_t i = 0;
    int64_t done = 0;
    if (!old->n) { /* between every character, and at both ends */
        while (count < 0 || done < count) {
            ix__buf_put(&b, new->u.s, new->n, data);
            done++;
            if (i >= s->n) break;
            size_t j = i;
            ix__utf8_next(s->u.s, s->n, &j);
            ix__buf_put(&b, s->u.s + i, j - i, data);
            i = j;
        }
    } else {
        while (i < s->n && (count < 0 || done < count)) {
            const char *p = memmem(s->u.s + i, s->n - i, old->u.s, old->n);
            if (!p) break;
            size_t j = (size_t)(p - s->u.s);
            ix__buf_put(&b, s->u.s + i, j - i, data);
            ix__buf_put(&b, new->u.s, new->n, data);
            i = j + old->n;
            done++;
        }
    }
    ix__buf_put(&b, s->u.s + i, s->n - i, data);
    return ix__buf_take(c, &b, out);
}

static bool f_replace(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"old", "new", "count"};
    tv v[3], s;
    if (!BIND("replace", k_names, v) || !str_of(c, at, x, &s)) return false;
    if (!given(&v[0]) || !given(&v[1])) return ix__tpl_fail(c, at, IX_ERR_TYPE, "replace needs old and new");
    tv o, nw;
    return str_of(c, at, &v[0], &o) && str_of(c, at, &v[1], &nw) &&
           replace(c, at, &s, &o, &nw, given(&v[2]) && v[2].kind != TV_NONE ? ix__tv_int_of(&v[2]) : -1, out);
}

static bool reverse_str(rctx *c, const tnode *at, const tv *s, tv *out) {
    char *o = ix__tpl_alloc(c, at, s->n + 1);
    if (!o) return false;
    size_t k = 0;
    for (size_t i = s->n; i > 0;) {
        size_t end = i;
        ix__utf8_prev(s->u.s, &i);
        memcpy(o + k, s->u.s + i, end - i);
        k += end - i;
    }
    *out = ix__tv_str(o, s->n, ix__str_derived(s));
    return true;
}

static bool f_reverse(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    const tv *items;
    size_t n;
    if (!no_args(c, at, "reverse", a)) return false;
    if (x->kind == TV_STR) return reverse_str(c, at, x, out);
    if (!iterate(c, at, x, &items, &n)) return false;
    tv *r = new_items(c, at, n);
    if (!r) return false;
    for (size_t k = 0; k < n; k++) r[k] = items[n - 1 - k];
    *out = ix__tv_list(r, n, 0);
    return true;
}

static bool f_round(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"precision", "method"};
    tv v[2];
    if (!BIND("round", k_names, v)) return false;
    if (!ix__tv_is_num(x)) return type_error(c, at, "round", "a number", x);
    int64_t prec = given(&v[0]) ? ix__tv_int_of(&v[0]) : 0;
    if (prec < -15 || prec > 15) prec = prec < 0 ? -15 : 15;
    bool common = !given(&v[1]) || ix__str_is(&v[1], "common");
    if (common && x->kind != TV_FLOAT && prec >= 0) { /* Python's round(int, n) is that int */
        *out = ix__tv_int(ix__tv_int_of(x));
        return true;
    }
    double f = x->kind == TV_FLOAT ? x->u.f : (double)ix__tv_int_of(x), scale = pow(10.0, (double)prec), r;
    if (common) r = nearbyint(f * scale) / scale; /* Python rounds half to even */
    else if (ix__str_is(&v[1], "ceil")) r = ceil(f * scale) / scale;
    else if (ix__str_is(&v[1], "floor")) r = floor(f * scale) / scale;
    else return ix__tpl_fail(c, at, IX_ERR_TYPE, "round: method must be 'common', 'ceil' or 'floor'");
    *out = ix__tv_float(r);
    return true;
}

static bool f_safe(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return no_args(c, at, "safe", a) && str_of(c, at, x, out); /* Markup(x): a string */
}

static bool f_sort(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"reverse", "case_sensitive", "attribute"};
    tv v[3];
    const tv *items;
    size_t n;
    if (!BIND("sort", k_names, v) || !iterate(c, at, x, &items, &n)) return false;
    return sorted(c, at, items, n, &v[2], !(given(&v[1]) && ix__tv_truthy(&v[1])), -1,
                  given(&v[0]) && ix__tv_truthy(&v[0]), out);
}

static bool f_string(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    return no_args(c, at, "string", a) && str_of(c, at, x, out);
}

static bool f_sum(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"attribute", "start"};
    tv v[2];
    const tv *items;
    size_t n;
    if (!BIND("sum", k_names, v) || !iterate(c, at, x, &items, &n)) return false;
    tv acc = given(&v[1]) ? v[1] : ix__tv_int(0);
    for (size_t k = 0; k < n; k++) {
        tv item = items[k];
        if (given(&v[0]) && !ix__tpl_getpath(c, at, &items[k], &v[0], &item)) return false;
        if (!ix__tpl_add(c, at, &acc, &item, &acc)) return false;
    }
    *out = acc;
    return true;
}

static bool f_tojson(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    /* Hugging Face's signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    static const char *const k_names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    tv v[4];
    if (!BIND("tojson", k_names, v)) return false;
    tjson_opts o = {0};
    o.ensure_ascii = given(&v[0]) && ix__tv_truthy(&v[0]);
    o.sort_keys = given(&v[3]) && ix__tv_truthy(&v[3]);
    char spaces[64];
    if (given(&v[1]) && v[1].kind != TV_NONE) {
        if (v[1].kind == TV_STR) {
            o.indent = v[1].u.s;
            o.indent_len = v[1].n;
        } else if (ix__tv_is_int(&v[1])) {
            int64_t w = ix__tv_int_of(&v[1]);
            if (w > (int64_t)sizeof spaces) return ix__tpl_fail(c, at, IX_ERR_RANGE, "tojson: indent %lld too large", (long long)w);
            if (w < 0) w = 0;
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else {
            return type_error(c, at, "tojson indent", "an int or a string", &v[1]);
        }
    }
    if (given(&v[2]) && v[2].kind != TV_NONE) {
        const tv *s = &v[2];
        if (s->kind != TV_LIST || s->n != 2 || s->u.items[0].kind != TV_STR || s->u.items[1].kind != TV_STR)
            return type_error(c, at, "tojson separators", "a pair of strings", s);
        o.item_sep = s->u.items[0].u.s;
        o.item_sep_len = s->u.items[0].n;
        o.key_sep = s->u.items[1].u.s;
        o.key_sep_len = s->u.items[1].n;
    }
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    if (!ix__tv_put_json(c, at, &b, x, &o)) {
        ix__buf_free(&b);
        return false;
    }
    return ix__buf_take(c, &b, out);
}

static bool f_trim(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"chars"};
    tv v[1], s;
    return BIND("trim", k_names, v) && str_of(c, at, x, &s) && strip(c, at, &s, &v[0], true, true, out);
}

static bool f_unique(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    static const char *const k_names[] = {"case_sensitive", "attribute"};
    tv v[2];
    const tv *items;
    size_t n;
    if (!BIND("unique", k_names, v) || !iterate(c, at, x, &items, &n)) return false;
    sort_ctx s = {c, at, &v[1], !(given(&v[0]) && ix__tv_truthy(&v[0])), -1};
    tv *kept = new_items(c, at, n), *keys = new_items(c, at, n);
    if (!kept || !keys) return false;
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        tv key;
        if (!sort_key(&s, &items[k], &key)) return false;
        if (s.fold && key.kind == TV_STR && !map_case(c, at, &key, CASE_LOWER, &key)) return false;
        bool seen = false;
        if (!ix__tpl_cost(c, at, m)) return false; /* quadratic: every earlier key */
        for (size_t j = 0; j < m && !seen; j++) {
            int eq = ix__tv_eq(c, at, &keys[j], &key);
            if (eq < 0) return false;
            seen = eq;
        }
        if (!seen) {
            keys[m] = key;
            kept[m++] = items[k];
        }
    }
    *out = ix__tv_list(kept, m, 0);
    return true;
}

static bool f_wordcount(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out) {
    tv s;
    if (!no_args(c, at, "wordcount", a) || !str_of(c, at, x, &s)) return false;
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.u.s[i];
        bool w = ch >= 0x80 || ch == '_' || (ch >= '0' && ch <= '9') || ascii_alpha((char)ch);
        if (w && !in) words++;
        in = w;
    }
    *out = ix__tv_int(words);
    return true;
}

typedef struct filter_def {
    const char *name;
    tfilter_fn fn;
} filter_def;

static const filter_def k_filters[] = {
    {"abs", f_abs},           {"attr", f_attr},       {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length},      {"d", f_default},       {"default", f_default},       {"dictsort", f_dictsort},
    {"e", f_escape},          {"escape", f_escape},   {"first", f_first},           {"float", f_float},
    {"format", f_format},     {"indent", f_indent},   {"int", f_int},               {"items", f_items},
    {"join", f_join},         {"last", f_last},       {"length", f_length},         {"list", f_list},
    {"lower", f_lower},       {"map", f_map},         {"max", f_max},               {"min", f_min},
    {"reject", f_reject},     {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round},       {"safe", f_safe},       {"select", f_select},         {"selectattr", f_selectattr},
    {"sort", f_sort},         {"string", f_string},   {"sum", f_sum},               {"title", f_title},
    {"tojson", f_tojson},     {"trim", f_trim},       {"unique", f_unique},         {"upper", f_upper},
    {"wordcount", f_wordcount},
};

int ix__tpl_filter_find(const char *name, size_t len) {
    for (size_t k = 0; k < IX_ARRAY_LEN(k_filters); k++)
        if (strlen(k_filters[k].name) == len && !memcmp(k_filters[k].name, name, len)) return (int)k;
    return -1;
}

bool ix__tpl_apply_filter(rctx *c, const tnode *at, int id, const tv *x, const targs *a, tv *out) {
    return k_filters[id].fn(c, at, x, a, out);
}

/* ---- tests ------------------------------------------------------------------------ */

static bool one_arg(rctx *c, const tnode *at, const char *what, const targs *a, tv *v) {
    static const char *const k_names[] = {"other"};
    if (!bind(c, at, what, a, k_names, 1, v)) return false;
    if (!given(v)) return ix__tpl_fail(c, at, IX_ERR_TYPE, "test '%s' needs an argument", what);
    return true;
}

#define SIMPLE_TEST(fname, what, expr)                                                                                 \
    static bool fname(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) {                              \
        (void)x;                                                                                                       \
        if (!no_args(c, at, what, a)) return false;                                                                    \
        *out = (expr);                                                                                                 \
        return true;                                                                                                   \
    }

SIMPLE_TEST(t_boolean, "boolean", x->kind == TV_BOOL)
SIMPLE_TEST(t_callable, "callable", x->kind == TV_FUNC)
SIMPLE_TEST(t_defined, "defined", x->kind != TV_UNDEF)
SIMPLE_TEST(t_undefined, "undefined", x->kind == TV_UNDEF)
SIMPLE_TEST(t_escaped, "escaped", false)
SIMPLE_TEST(t_false, "false", x->kind == TV_BOOL && !x->u.b)
SIMPLE_TEST(t_true, "true", x->kind == TV_BOOL && x->u.b)
SIMPLE_TEST(t_float, "float", x->kind == TV_FLOAT)
SIMPLE_TEST(t_integer, "integer", x->kind == TV_INT)
SIMPLE_TEST(t_number, "number", ix__tv_is_num(x))
SIMPLE_TEST(t_none, "none", x->kind == TV_NONE)
SIMPLE_TEST(t_string, "string", x->kind == TV_STR)
SIMPLE_TEST(t_mapping, "mapping", x->kind == TV_DICT)
/* jinja2's Undefined iterates (as nothing) and has a length, so it is iterable and a sequence */
SIMPLE_TEST(t_iterable, "iterable", x->kind == TV_STR || x->kind == TV_LIST || x->kind == TV_DICT || x->kind == TV_UNDEF)
SIMPLE_TEST(t_sequence, "sequence", x->kind == TV_STR || x->kind == TV_LIST || x->kind == TV_DICT || x->kind == TV_UNDEF)

static bool t_case(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out, bool want_lower) {
    tv s;
    if (!no_args(c, at, want_lower ? "lower" : "upper", a) || !str_of(c, at, x, &s)) return false;
    bool any = false, ok = true;
    for (size_t i = 0; i < s.n && ok;) {
        uint32_t cp = ix__utf8_next(s.u.s, s.n, &i);
        if (!cased(cp)) continue;
        any = true;
        ok = want_lower ? ix__cp_lower(cp) == cp : ix__cp_upper(cp) == cp;
    }
    *out = any && ok;
    return true;
}
static bool t_lower(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_case(c, at, x, a, out, true); }
static bool t_upper(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_case(c, at, x, a, out, false); }

/* x % m == r, with Python's modulo (floats too). */
static bool py_mod_is(rctx *c, const tnode *at, const char *what, const tv *x, const tv *m, int64_t r, bool *out) {
    if (!ix__tv_is_num(x) || !ix__tv_is_num(m)) return type_error(c, at, what, "numbers", ix__tv_is_num(x) ? m : x);
    if (x->kind != TV_FLOAT && m->kind != TV_FLOAT) {
        int64_t a = ix__tv_int_of(x), b = ix__tv_int_of(m);
        if (b == 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "integer division or modulo by zero");
        int64_t q = b == -1 ? 0 : a % b;
        if (q != 0 && ((q < 0) != (b < 0))) q += b;
        *out = q == r;
        return true;
    }
    double a = ix__tv_float_of(x), b = ix__tv_float_of(m);
    if (b == 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "float modulo");
    double q = fmod(a, b);
    if (q != 0 && ((q < 0) != (b < 0))) q += b;
    *out = q == (double)r;
    return true;
}

static bool t_parity(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out, bool odd) {
    tv two = ix__tv_int(2);
    return no_args(c, at, odd ? "odd" : "even", a) && py_mod_is(c, at, odd ? "odd" : "even", x, &two, odd, out);
}
static bool t_even(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_parity(c, at, x, a, out, false); }
static bool t_odd(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_parity(c, at, x, a, out, true); }

static bool t_divisibleby(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) {
    tv d;
    return one_arg(c, at, "divisibleby", a, &d) && py_mod_is(c, at, "divisibleby", x, &d, 0, out);
}

static bool t_cmp(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out, const char *what, int want) {
    tv y;
    if (!one_arg(c, at, what, a, &y)) return false;
    if (want == 0 || want == 9) {
        int eq = ix__tv_eq(c, at, x, &y);
        if (eq < 0) return false;
        *out = want == 0 ? eq : !eq;
        return true;
    }
    int r;
    if (!ix__tv_cmp(c, at, x, &y, false, &r)) return false;
    *out = want == 1 ? r < 0 : want == 2 ? r <= 0 : want == 3 ? r > 0 : r >= 0;
    return true;
}
static bool t_eq(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_cmp(c, at, x, a, out, "eq", 0); }
static bool t_ne(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_cmp(c, at, x, a, out, "ne", 9); }
static bool t_lt(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_cmp(c, at, x, a, out, "lt", 1); }
static bool t_le(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_cmp(c, at, x, a, out, "le", 2); }
static bool t_gt(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_cmp(c, at, x, a, out, "gt", 3); }
static bool t_ge(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) { return t_cmp(c, at, x, a, out, "ge", 4); }

static bool t_sameas(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) {
    tv y;
    if (!one_arg(c, at, "sameas", a, &y)) return false;
    if (x->kind != y.kind) {
        *out = false;
    } else if (x->kind == TV_NONE || x->kind == TV_UNDEF) {
        *out = true;
    } else if (x->kind == TV_BOOL) {
        *out = x->u.b == y.u.b;
    } else if (x->kind == TV_INT) { /* CPython caches small ints */
        *out = x->u.i == y.u.i && x->u.i >= -5 && x->u.i <= 256;
    } else {
        *out = x->u.s == y.u.s && x->n == y.n; /* the same object (pointers of the union) */
    }
    return true;
}

static bool t_in(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) {
    tv seq;
    if (!one_arg(c, at, "in", a, &seq)) return false;
    if (seq.kind == TV_STR) {
        if (x->kind != TV_STR) return type_error(c, at, "in", "a string", x);
        *out = !x->n || (x->n <= seq.n && memmem(seq.u.s, seq.n, x->u.s, x->n));
        return true;
    }
    if (seq.kind == TV_DICT) {
        *out = ix__dict_get(c, at, seq.u.d, x) != NULL;
        return c->st == IX_OK;
    }
    const tv *items;
    size_t n;
    if (!iterate(c, at, &seq, &items, &n)) return false;
    *out = false;
    if (!ix__tpl_cost(c, at, n)) return false;
    for (size_t k = 0; k < n && !*out; k++) {
        int eq = ix__tv_eq(c, at, &items[k], x);
        if (eq < 0) return false;
        *out = eq;
    }
    return true;
}

static bool t_filter(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) {
    *out = x->kind == TV_STR && ix__tpl_filter_find(x->u.s, x->n) >= 0;
    return no_args(c, at, "filter", a);
}
static bool t_test(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out) {
    *out = x->kind == TV_STR && ix__tpl_test_find(x->u.s, x->n) >= 0;
    return no_args(c, at, "test", a);
}

typedef struct test_def {
    const char *name;
    ttest_fn fn;
} test_def;

static const test_def k_tests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
    {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},             {"escaped", t_escaped},
    {"even", t_even},       {"false", t_false},       {"filter", t_filter},     {"float", t_float},
    {"ge", t_ge},           {">=", t_ge},             {"gt", t_gt},             {"greaterthan", t_gt},
    {">", t_gt},            {"in", t_in},             {"integer", t_integer},   {"iterable", t_iterable},
    {"le", t_le},           {"<=", t_le},             {"lower", t_lower},       {"lt", t_lt},
    {"lessthan", t_lt},     {"<", t_lt},              {"mapping", t_mapping},   {"ne", t_ne},
    {"!=", t_ne},           {"none", t_none},         {"number", t_number},     {"odd", t_odd},
    {"sameas", t_sameas},   {"sequence", t_sequence}, {"string", t_string},     {"test", t_test},
    {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
};

int ix__tpl_test_find(const char *name, size_t len) {
    for (size_t k = 0; k < IX_ARRAY_LEN(k_tests); k++)
        if (strlen(k_tests[k].name) == len && !memcmp(k_tests[k].name, name, len)) return (int)k;
    return -1;
}

bool ix__tpl_apply_test(rctx *c, const tnode *at, int id, const tv *x, const targs *a, bool *out) {
    return k_tests[id].fn(c, at, x, a, out);
}

/* ---- methods ------------------------------------------------------------------------- */

static bool m_strip_any(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out, bool l, bool r, const char *what) {
    static const char *const k_names[] = {"chars"};
    tv v[1];
    return bind(c, at, what, a, k_names, 1, v) && strip(c, at, s, &v[0], l, r, out);
}
static bool m_strip(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_strip_any(c, at, s, a, out, true, true, "strip"); }
static bool m_lstrip(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_strip_any(c, at, s, a, out, true, false, "lstrip"); }
static bool m_rstrip(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_strip_any(c, at, s, a, out, false, true, "rstrip"); }

static bool m_case(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out, case_op op, const char *what) {
    return no_args(c, at, what, a) && map_case(c, at, s, op, out);
}
static bool m_upper(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_case(c, at, s, a, out, CASE_UPPER, "upper"); }
static bool m_lower(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_case(c, at, s, a, out, CASE_LOWER, "lower"); }
static bool m_title(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_case(c, at, s, a, out, CASE_TITLE_PY, "title"); }
static bool m_capitalize(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) {
    return m_case(c, at, s, a, out, CASE_CAPITALIZE, "capitalize");
}

/* A growable list of string pieces (split results). */
typedef struct parts {
    tv *v;
    size_t n, cap;
} parts;

static bool parts_push(rctx *c, const tnode *at, parts *p, const tv *s, size_t off, size_t n) {
    return ix__tpl_grow(c, at, (void **)&p->v, p->n, &p->cap, 8, sizeof *p->v) &&
           ix__str_sub(c, at, s, off, n, &p->v[p->n++]);
}

/* str.split / str.rsplit. */
static bool split(rctx *c, const tnode *at, const tv *s, const targs *a, bool from_right, tv *out) {
    static const char *const k_names[] = {"sep", "maxsplit"};
    tv v[2];
    if (!bind(c, at, from_right ? "rsplit" : "split", a, k_names, 2, v)) return false;
    int64_t max = given(&v[1]) ? ix__tv_int_of(&v[1]) : -1;
    parts p = {0};
    if (!ix__tpl_cost(c, at, s->n >> 8)) return false;
    if (!given(&v[0]) || v[0].kind == TV_NONE) { /* runs of whitespace */
        size_t i = 0, n = s->n;
        if (!from_right) {
            for (;;) {
                while (i < n) {
                    size_t j = i;
                    if (!ix__is_space(ix__utf8_next(s->u.s, n, &j))) break;
                    i = j;
                }
                if (i >= n) break;
                if (max >= 0 && (int64_t)p.n == max) {
                    if (!parts_push(c, at, &p, s, i, n - i)) return false;
                    break;
                }
                size_t start = i;
                while (i < n) {
                    size_t j = i;
                    if (ix__is_space(ix__utf8_next(s->u.s, n, &j))) break;
                    i = j;
                }
                if (!parts_push(c, at, &p, s, start, i - start)) return false;
            }
        } else {
            size_t z = n;
            for (;;) {
                while (z > 0) {
                    size_t j = z;
                    if (!ix__is_space(ix__utf8_prev(s->u.s, &j))) break;
                    z = j;
                }
                if (z == 0) break;
                if (max >= 0 && (int64_t)p.n == max) {
                    if (!parts_push(c, at, &p, s, 0, z)) return false;
                    break;
                }
                size_t end = z;
                while (z > 0) {
                    size_t j = z;
                    if (ix__is_space(ix__utf8_prev(s->u.s, &j))) break;
                    z = j;
                }
                if (!parts_push(c, at, &p, s, z, end - z)) return false;
            }
            for (size_t k = 0; k < p.n / 2; k++) {
                tv t = p.v[k];
                p.v[k] = p.v[p.n - 1 - k];
                p.v[p.n - 1 - k] = t;
            }
        }
    } else {
        const tv *sep = &v[0];
        if (sep->kind != TV_STR) return type_error(c, at, "split", "a string separator", sep);
        if (!sep->n) return ix__tpl_fail(c, at, IX_ERR_TYPE, "empty separator");
        if (!from_right) {
            size_t i = 0;
            for (;;) {
                const char *hit = max >= 0 && (int64_t)p.n == max ? NULL : memmem(s->u.s + i, s->n - i, sep->u.s, sep->n);
                size_t end = hit ? (size_t)(hit - s->u.s) : s->n;
                if (!parts_push(c, at, &p, s, i, end - i)) return false;
                if (!hit) break;
                i = end + sep->n;
            }
        } else {
            size_t z = s->n; /* pieces collected from the right, then reversed */
            for (;;) {
                size_t hit = SIZE_MAX;
                if ((max < 0 || (int64_t)p.n < max) && z >= sep->n)
                    for (size_t j = z - sep->n + 1; j-- > 0;)
                        if (!memcmp(s->u.s + j, sep->u.s, sep->n)) {
                            hit = j;
                            break;
                        }
                size_t start = hit == SIZE_MAX ? 0 : hit + sep->n;
                if (!parts_push(c, at, &p, s, start, z - start)) return false;
                if (hit == SIZE_MAX) break;
                z = hit;
            }
            for (size_t k = 0; k < p.n / 2; k++) {
                tv t = p.v[k];
                p.v[k] = p.v[p.n - 1 - k];
                p.v[p.n - 1 - k] = t;
            }
        }
    }
    *out = ix__tv_list(p.v, p.n, 0);
    return true;
}
static bool m_split(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return split(c, at, s, a, false, out); }
static bool m_rsplit(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return split(c, at, s, a, true, out); }

static bool m_splitlines(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) {
    static const char *const k_names[] = {"keepends"};
    tv v[1];
    if (!bind(c, at, "splitlines", a, k_names, 1, v)) return false;
    bool keep = given(&v[0]) && ix__tv_truthy(&v[0]);
    parts p = {0};
    size_t i = 0;
    while (i < s->n) {
        size_t start = i, end;
        while (i < s->n && s->u.s[i] != '\n' && s->u.s[i] != '\r') i++;
        end = i;
        if (i < s->n) i += s->u.s[i] == '\r' && i + 1 < s->n && s->u.s[i + 1] == '\n' ? 2 : 1;
        if (!parts_push(c, at, &p, s, start, (keep ? i : end) - start)) return false;
    }
    *out = ix__tv_list(p.v, p.n, 0);
    return true;
}

static bool affix(rctx *c, const tnode *at, const tv *s, const targs *a, bool *out, bool prefix) {
    static const char *const k_names[] = {"prefix"};
    tv v[1];
    const char *what = prefix ? "startswith" : "endswith";
    if (!bind(c, at, what, a, k_names, 1, v)) return false;
    if (!given(&v[0])) return ix__tpl_fail(c, at, IX_ERR_TYPE, "%s needs an argument", what);
    const tv *cands = &v[0];
    size_t n = 1;
    if (v[0].kind == TV_LIST) {
        cands = v[0].u.items;
        n = v[0].n;
    }
    *out = false;
    for (size_t k = 0; k < n; k++) {
        const tv *x = &cands[k];
        if (x->kind != TV_STR) return type_error(c, at, what, "a string or a tuple of strings", x);
        if (x->n <= s->n && !memcmp(s->u.s + (prefix ? 0 : s->n - x->n), x->u.s, x->n)) *out = true;
    }
    return true;
}
static bool m_startswith(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) {
    bool r = false;
    if (!affix(c, at, s, a, &r, true)) return false;
    *out = ix__tv_bool(r);
    return true;
}
static bool m_endswith(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) {
    bool r = false;
    if (!affix(c, at, s, a, &r, false)) return false;
    *out = ix__tv_bool(r);
    return true;
}

static bool m_replace(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) {
    static const char *const k_names[] = {"old", "new", "count"};
    tv v[3];
    if (!bind(c, at, "replace", a, k_names, 3, v)) return false;
    if (!given(&v[0]) || !given(&v[1])) return ix__tpl_fail(c, at, IX_ERR_TYPE, "replace needs old and new");
    return replace(c, at, s, &v[0], &v[1], given(&v[2]) ? ix__tv_int_of(&v[2]) : -1, out);
}

/* str.find / rfind / count: in code points, as Python counts. */
static bool search(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out, int mode) {
    static const char *const k_names[] = {"sub"};
    const char *what = mode == 0 ? "find" : mode == 1 ? "rfind" : "count";
    tv v[1];
    if (!bind(c, at, what, a, k_names, 1, v)) return false;
    if (!need_str(c, at, what, &v[0])) return false;
    const tv *sub = &v[0];
    if (!ix__tpl_cost(c, at, s->n >> 8)) return false;
    if (mode == 2) {
        int64_t k = 0;
        if (!sub->n) {
            k = (int64_t)ix__utf8_count(s->u.s, s->n) + 1;
        } else {
            for (size_t i = 0; i + sub->n <= s->n;) {
                const char *p = memmem(s->u.s + i, s->n - i, sub->u.s, sub->n);
                if (!p) break;
                k++;
                i = (size_t)(p - s->u.s) + sub->n;
            }
        }
        *out = ix__tv_int(k);
        return true;
    }
    size_t hit = SIZE_MAX;
    if (mode == 0) {
        const char *p = sub->n <= s->n ? memmem(s->u.s, s->n, sub->u.s, sub->n) : NULL;
        if (!sub->n) hit = 0;
        else if (p) hit = (size_t)(p - s->u.s);
    } else if (sub->n <= s->n) {
        for (size_t j = s->n - sub->n + 1; j-- > 0;)
            if (!memcmp(s->u.s + j, sub->u.s, sub->n)) {
                hit = j;
                break;
            }
    }
    *out = ix__tv_int(hit == SIZE_MAX ? -1 : (int64_t)ix__utf8_count(s->u.s, hit));
    return true;
}
static bool m_find(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return search(c, at, s, a, out, 0); }
static bool m_rfind(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return search(c, at, s, a, out, 1); }
static bool m_count(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return search(c, at, s, a, out, 2); }

static bool m_join(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) {
    static const char *const k_names[] = {"iterable"};
    tv v[1];
    const tv *items;
    size_t n;
    if (!bind(c, at, "join", a, k_names, 1, v) || !iterate(c, at, &v[0], &items, &n)) return false;
    tbuf b;
    ix__buf_init(&b, &c->ar, SIZE_MAX);
    for (size_t k = 0; k < n; k++) {
        if (items[k].kind != TV_STR) {
            ix__buf_free(&b);
            return ix__tpl_fail(c, at, IX_ERR_TYPE, "sequence item %zu: expected str instance, %s found", k,
                                ix__tv_type(&items[k]));
        }
        if (k) ix__buf_put_str(&b, s);
        ix__buf_put_str(&b, &items[k]);
    }
    return ix__buf_take(c, &b, out);
}

static bool m_affix_remove(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out, bool prefix) {
    static const char *const k_names[] = {"affix"};
    tv v[1];
    if (!bind(c, at, prefix ? "removeprefix" : "removesuffix", a, k_names, 1, v) ||
        !need_str(c, at, prefix ? "removeprefix" : "removesuffix", &v[0]))
        return false;
    const tv *x = &v[0];
    if (x->n <= s->n && !memcmp(s->u.s + (prefix ? 0 : s->n - x->n), x->u.s, x->n))
        return ix__str_sub(c, at, s, prefix ? x->n : 0, s->n - x->n, out);
    *out = *s;
    return true;
}
static bool m_removeprefix(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_affix_remove(c, at, s, a, out, true); }
static bool m_removesuffix(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return m_affix_remove(c, at, s, a, out, false); }

/* str.isdigit and friends (ASCII classes; other characters count as letters). */
static bool classify(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out, int cls) {
    static const char *const k_what[] = {"isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper"};
    if (!no_args(c, at, k_what[cls], a)) return false;
    bool ok = s->n > 0, any_cased = false;
    for (size_t i = 0; i < s->n && ok;) {
        uint32_t cp = ix__utf8_next(s->u.s, s->n, &i);
        bool digit = cp >= '0' && cp <= '9', alpha = (cp < 0x80 && ascii_alpha((char)cp)) || (cp >= 0xC0 && cp != 0xD7 && cp != 0xF7);
        switch (cls) {
        case 0: ok = digit; break;
        case 1: ok = alpha; break;
        case 2: ok = digit || alpha; break;
        case 3: ok = ix__is_space(cp); break;
        default:
            if (cased(cp)) {
                any_cased = true;
                ok = cls == 4 ? ix__cp_lower(cp) == cp : ix__cp_upper(cp) == cp;
            }
            break;
        }
    }
    *out = ix__tv_bool(ok && (cls < 4 || any_cased));
    return true;
}
static bool m_isdigit(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return classify(c, at, s, a, out, 0); }
static bool m_isalpha(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return classify(c, at, s, a, out, 1); }
static bool m_isalnum(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return classify(c, at, s, a, out, 2); }
static bool m_isspace(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return classify(c, at, s, a, out, 3); }
static bool m_islower(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return classify(c, at, s, a, out, 4); }
static bool m_isupper(rctx *c, const tnode *at, const tv *s, const targs *a, tv *out) { return classify(c, at, s, a, out, 5); }

static bool m_get(rctx *c, const tnode *at, const tv *d, const targs *a, tv *out) {
    static const char *const k_names[] = {"key", "default"};
    tv v[2];
    if (!bind(c, at, "get", a, k_names, 2, v)) return false;
    if (!given(&v[0])) return ix__tpl_fail(c, at, IX_ERR_TYPE, "get needs a key");
    const tv *hit = ix__dict_get(c, at, d->u.d, &v[0]);
    if (c->st != IX_OK) return false;
    *out = hit ? *hit : given(&v[1]) ? v[1] : ix__tv_none();
    return true;
}

static bool m_items(rctx *c, const tnode *at, const tv *d, const targs *a, tv *out) { return f_items(c, at, d, a, out); }

static bool dict_view(rctx *c, const tnode *at, const tv *d, const targs *a, tv *out, bool values) {
    if (!no_args(c, at, values ? "values" : "keys", a)) return false;
    tv *items = new_items(c, at, d->u.d->n);
    if (!items) return false;
    for (size_t k = 0; k < d->u.d->n; k++) items[k] = values ? d->u.d->e[k].v : d->u.d->e[k].k;
    *out = ix__tv_list(items, d->u.d->n, 0);
    return true;
}
static bool m_keys(rctx *c, const tnode *at, const tv *d, const targs *a, tv *out) { return dict_view(c, at, d, a, out, false); }
static bool m_values(rctx *c, const tnode *at, const tv *d, const targs *a, tv *out) { return dict_view(c, at, d, a, out, true); }

static bool m_list_index(rctx *c, const tnode *at, const tv *l, const targs *a, tv *out, bool count) {
    tv x;
    if (!one_arg(c, at, count ? "count" : "index", a, &x) || !ix__tpl_cost(c, at, l->n)) return false;
    int64_t hits = 0;
    for (size_t k = 0; k < l->n; k++) {
        int eq = ix__tv_eq(c, at, &l->u.items[k], &x);
        if (eq < 0) return false;
        if (eq && !count) {
            *out = ix__tv_int((int64_t)k);
            return true;
        }
        hits += eq;
    }
    if (!count) return ix__tpl_fail(c, at, IX_ERR_TYPE, "list.index(x): x not in list");
    *out = ix__tv_int(hits);
    return true;
}
static bool m_lindex(rctx *c, const tnode *at, const tv *l, const targs *a, tv *out) { return m_list_index(c, at, l, a, out, false); }
static bool m_lcount(rctx *c, const tnode *at, const tv *l, const targs *a, tv *out) { return m_list_index(c, at, l, a, out, true); }

typedef struct method_def {
    tkind kind;
    const char *name;
    size_t len; /* looked up at every call: no strlen there */
    tmethod_fn fn;
} method_def;
#define M(kind, name, fn) {kind, name, sizeof(name) - 1, fn}

static const method_def k_methods[] = {
    M(TV_STR, "strip", m_strip),           M(TV_STR, "lstrip", m_lstrip),         M(TV_STR, "rstrip", m_rstrip),
    M(TV_STR, "split", m_split),           M(TV_STR, "rsplit", m_rsplit),         M(TV_STR, "splitlines", m_splitlines),
    M(TV_STR, "startswith", m_startswith), M(TV_STR, "endswith", m_endswith),     M(TV_STR, "upper", m_upper),
    M(TV_STR, "lower", m_lower),           M(TV_STR, "title", m_title),           M(TV_STR, "capitalize", m_capitalize),
    M(TV_STR, "replace", m_replace),       M(TV_STR, "find", m_find),             M(TV_STR, "rfind", m_rfind),
    M(TV_STR, "count", m_count),           M(TV_STR, "join", m_join),             M(TV_STR, "removeprefix", m_removeprefix),
    M(TV_STR, "removesuffix", m_removesuffix), M(TV_STR, "isdigit", m_isdigit),   M(TV_STR, "isalpha", m_isalpha),
    M(TV_STR, "isalnum", m_isalnum),       M(TV_STR, "isspace", m_isspace),       M(TV_STR, "islower", m_islower),
    M(TV_STR, "isupper", m_isupper),       M(TV_DICT, "get", m_get),              M(TV_DICT, "items", m_items),
    M(TV_DICT, "keys", m_keys),            M(TV_DICT, "values", m_values),        M(TV_LIST, "index", m_lindex),
    M(TV_LIST, "count", m_lcount),
};

int ix__tpl_method_find(tkind kind, const char *name, size_t len) {
    for (size_t k = 0; k < IX_ARRAY_LEN(k_methods); k++)
        if (k_methods[k].kind == kind && k_methods[k].len == len && !memcmp(k_methods[k].name, name, len))
            return (int)k;
    return -1;
}

bool ix__tpl_call_method(rctx *c, const tnode *at, int id, const tv *self, const targs *a, tv *out) {
    return k_methods[id].fn(c, at, self, a, out);
}

/* ---- global functions ----------------------------------------------------------------- */

#define MAX_RANGE 100000 /* jinja2's sandbox refuses larger ranges too */

static bool g_range(rctx *c, const tnode *at, const targs *a, tv *out) {
    if (a->nkw || a->npos < 1 || a->npos > 3) return ix__tpl_fail(c, at, IX_ERR_TYPE, "range expects 1 to 3 integer arguments");
    for (size_t k = 0; k < a->npos; k++)
        if (!ix__tv_is_int(&a->pos[k])) return type_error(c, at, "range", "integers", &a->pos[k]);
    int64_t start = 0, stop, stp = 1;
    if (a->npos == 1) {
        stop = ix__tv_int_of(&a->pos[0]);
    } else {
        start = ix__tv_int_of(&a->pos[0]);
        stop = ix__tv_int_of(&a->pos[1]);
        if (a->npos == 3) stp = ix__tv_int_of(&a->pos[2]);
    }
    if (stp == 0) return ix__tpl_fail(c, at, IX_ERR_TYPE, "range() arg 3 must not be zero");
    double span = stp > 0 ? ((double)stop - (double)start) / (double)stp : ((double)start - (double)stop) / -(double)stp;
    if (span > MAX_RANGE) return ix__tpl_fail(c, at, IX_ERR_RANGE, "range too big (more than %d items)", MAX_RANGE);
    size_t n = 0;
    for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp) n++;
    tv *items = new_items(c, at, n);
    if (!items) return false;
    for (size_t k = 0; k < n; k++) items[k] = ix__tv_int(start + (int64_t)k * stp);
    *out = ix__tv_list(items, n, 0);
    return true;
}

/* namespace(...) and dict(...): an optional mapping (or list of pairs), then keywords. */
static bool g_mapping(rctx *c, const tnode *at, const targs *a, tv *out, bool ns) {
    const char *what = ns ? "namespace" : "dict";
    if (a->npos > 1) return ix__tpl_fail(c, at, IX_ERR_TYPE, "%s takes at most 1 positional argument", what);
    tdict *d = ix__tpl_alloc(c, at, sizeof *d);
    if (!d) return false;
    if (a->npos) {
        const tv *src = &a->pos[0];
        if (src->kind == TV_DICT || src->kind == TV_NS) {
            for (size_t k = 0; k < src->u.d->n; k++)
                if (!ix__dict_set(c, at, d, &src->u.d->e[k].k, &src->u.d->e[k].v)) return false;
        } else if (src->kind == TV_LIST) {
            for (size_t k = 0; k < src->n; k++) {
                const tv *p = &src->u.items[k];
                if (p->kind != TV_LIST || p->n != 2) return type_error(c, at, what, "pairs", p);
                if (!ix__dict_set(c, at, d, &p->u.items[0], &p->u.items[1])) return false;
            }
        } else if (src->kind != TV_UNDEF) {
            return type_error(c, at, what, "a mapping", src);
        }
    }
    for (size_t k = 0; k < a->nkw; k++) {
        tv key = ix__tv_str(a->kw[k].name, a->kw[k].len, TS_CLEAN);
        if (!ix__dict_set(c, at, d, &key, &a->kw[k].v)) return false;
    }
    *out = (tv){.kind = (uint8_t)(ns ? TV_NS : TV_DICT)};
    out->u.d = d;
    return true;
}
static bool g_namespace(rctx *c, const tnode *at, const targs *a, tv *out) { return g_mapping(c, at, a, out, true); }
static bool g_dict(rctx *c, const tnode *at, const targs *a, tv *out) { return g_mapping(c, at, a, out, false); }

static bool g_raise_exception(rctx *c, const tnode *at, const targs *a, tv *out) {
    static const char *const k_names[] = {"message"};
    tv v[1], s;
    IX_UNUSED(out);
    if (!BIND("raise_exception", k_names, v)) return false;
    if (!str_of(c, at, &v[0], &s)) return false;
    return ix__tpl_fail(c, at, IX_ERR_INVALID, "%.*s", (int)(s.n > 400 ? 400 : s.n), s.u.s);
}

static bool g_strftime_now(rctx *c, const tnode *at, const targs *a, tv *out) {
    static const char *const k_names[] = {"format"};
    tv v[1];
    if (!BIND("strftime_now", k_names, v) || !need_str(c, at, "strftime_now", &v[0])) return false;
    char fmt[128], buf[256];
    if (v[0].n >= sizeof fmt || memchr(v[0].u.s, 0, v[0].n))
        return ix__tpl_fail(c, at, IX_ERR_RANGE, "strftime_now: format too long");
    memcpy(fmt, v[0].u.s, v[0].n);
    fmt[v[0].n] = 0;
    time_t t = (time_t)c->now_unix_s;
    struct tm tm;
    if (!gmtime_r(&t, &tm)) return ix__tpl_fail(c, at, IX_ERR_RANGE, "strftime_now: bad time");
    /* the format is the template's: strftime only formats, it reads nothing */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    size_t n = v[0].n ? strftime(buf, sizeof buf, fmt, &tm) : 0;
#pragma GCC diagnostic pop
    return ix__str_copy(c, at, buf, n, TS_CLEAN, out);
}

typedef bool (*tglobal_fn)(rctx *c, const tnode *at, const targs *a, tv *out);
typedef struct global_def {
    const char *name;
    tglobal_fn fn;
} global_def;

static const global_def k_globals[] = {
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
};

int ix__tpl_global_count(void) { return (int)IX_ARRAY_LEN(k_globals); }
const char *ix__tpl_global_name(int id) { return k_globals[id].name; }
bool ix__tpl_call_global(rctx *c, const tnode *at, int id, const targs *a, tv *out) {
    return k_globals[id].fn(c, at, a, out);
}

/* ---- loop ------------------------------------------------------------------------------- */

bool ix__tpl_loop_attr(rctx *c, const tnode *at, const tv *loop, const char *name, size_t len, tv *out) {
    const tloop *l = loop->u.loop;
    int64_t i = (int64_t)l->i, n = (int64_t)l->n;
#define IS(lit) (len == sizeof(lit) - 1 && !memcmp(name, lit, len))
    if (IS("index")) *out = ix__tv_int(i + 1);
    else if (IS("index0")) *out = ix__tv_int(i);
    else if (IS("revindex")) *out = ix__tv_int(n - i);
    else if (IS("revindex0")) *out = ix__tv_int(n - i - 1);
    else if (IS("first")) *out = ix__tv_bool(i == 0);
    else if (IS("last")) *out = ix__tv_bool(i == n - 1);
    else if (IS("length")) *out = ix__tv_int(n);
    else if (IS("depth")) *out = ix__tv_int(1);
    else if (IS("depth0")) *out = ix__tv_int(0);
    else if (IS("previtem")) *out = i > 0 ? l->items[i - 1] : ix__tv_undef(at);
    else if (IS("nextitem")) *out = i + 1 < n ? l->items[i + 1] : ix__tv_undef(at);
    else if (IS("cycle")) {
        tfunc *fn = ix__tpl_alloc(c, at, sizeof *fn);
        if (!fn) return false;
        fn->kind = TF_CYCLE;
        fn->self = *loop;
        *out = (tv){.kind = TV_FUNC};
        out->u.fn = fn;
    } else *out = ix__tv_undef(at);
#undef IS
    return true;
}
