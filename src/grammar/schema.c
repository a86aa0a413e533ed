/*
 * JSON Schema -> GBNF text (docs/grammar.md lists the subset). One walk over
 * the schema: every object, array and constrained string becomes a rule named
 * after its place ("root-address-street"), shared JSON pieces (string, number,
 * any value, whitespace...) are emitted once at the end if used, and each
 * $ref target becomes one rule, named before its body is generated so that
 * recursive references simply name it.
 *
 * Keywords outside the subset are refused by name; so is a keyword that
 * applies to none of the schema's types. Whitespace is bounded at every
 * token boundary (or absent with IX_GRAMMAR_SCHEMA_COMPACT), and numbers have
 * bounded digit counts, so no position of the output can grow forever except
 * string contents, arrays without maxItems and recursion the schema asks for.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

/* ---- shared pieces ------------------------------------------------------------- */

/* One row per shared rule: emitted (with what it uses) when referenced. */
#define PRIM_TABLE(X)                                                                            \
    X(P_WS, "ws", 0, "| \" \" | \"\\n\" [ \\t]{0,20}")                                            \
    X(P_HEX, "hex", 0, "[0-9a-fA-F]")                                                             \
    X(P_UESC, "uesc", P(P_HEX),                                                                   \
      "[0-9a-cA-Ce-fE-F] hex hex hex | [dD] [0-7] hex hex | "                                     \
      "[dD] [89abAB] hex hex \"\\\\u\" [dD] [c-fC-F] hex hex")                                    \
    X(P_CHAR, "char", P(P_UESC), "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" uesc)") \
    X(P_STRING, "string", P(P_CHAR) | P(P_WS), "\"\\\"\" char* \"\\\"\" ws")                      \
    X(P_INTPART, "int-part", 0, "\"0\" | [1-9] [0-9]{0,15}")                                      \
    X(P_NUMBER, "number", P(P_INTPART) | P(P_WS),                                                 \
      "\"-\"? int-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws")                         \
    X(P_NUMBER_NN, "number-nonneg", P(P_INTPART) | P(P_WS),                                       \
      "int-part (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws")                                \
    X(P_INTEGER, "integer", P(P_INTPART) | P(P_WS), "\"-\"? int-part ws")                         \
    X(P_INTEGER_NN, "integer-nonneg", P(P_INTPART) | P(P_WS), "int-part ws")                      \
    X(P_BOOLEAN, "boolean", P(P_WS), "(\"true\" | \"false\") ws")                                 \
    X(P_NULL, "null", P(P_WS), "\"null\" ws")                                                     \
    X(P_VALUE, "value", P(P_OBJECT) | P(P_ARRAY) | P(P_STRING) | P(P_NUMBER) | P(P_BOOLEAN) |     \
                            P(P_NULL),                                                            \
      "object | array | string | number | boolean | null")                                        \
    X(P_MEMBER, "member", P(P_STRING) | P(P_VALUE), "string \":\" ws value")                      \
    X(P_OBJECT, "object", P(P_MEMBER) | P(P_WS),                                                  \
      "\"{\" ws (member (\",\" ws member)*)? \"}\" ws")                                           \
    X(P_ARRAY, "array", P(P_VALUE) | P(P_WS), "\"[\" ws (value (\",\" ws value)*)? \"]\" ws")     \
    X(P_DATE, "date", 0,                                                                          \
      "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])") \
    X(P_TIME, "time", 0,                                                                          \
      "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "       \
      "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])")                              \
    X(P_DATETIME, "date-time", P(P_DATE) | P(P_TIME), "date \"T\" time")                          \
    X(P_UUID, "uuid", P(P_HEX), "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}")    \
    X(P_EMAIL, "email", 0,                                                                        \
      "[a-zA-Z0-9_%+-] ([a-zA-Z0-9._%+-]{0,62} [a-zA-Z0-9_%+-])? \"@\" "                          \
      "([a-zA-Z0-9] ([a-zA-Z0-9-]{0,61} [a-zA-Z0-9])? \".\"){1,8} [a-zA-Z]{2,24}")                \
    X(P_IPV4, "ipv4", P(P_OCTET), "octet \".\" octet \".\" octet \".\" octet")                    \
    X(P_OCTET, "octet", 0, "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]")

#define P(x) (1ull << (x))
enum {
#define PRIM_ENUM(id, name, deps, body) id,
    PRIM_TABLE(PRIM_ENUM)
#undef PRIM_ENUM
        P_COUNT
};
static const struct prim {
    const char *name;
    uint64_t deps;
    const char *body;
} k_prims[] = {
#define PRIM_ROW(id, name, deps, body) {name, deps, body},
    PRIM_TABLE(PRIM_ROW)
#undef PRIM_ROW
};

/* String formats: the rule of the text between the quotes. */
static const struct {
    const char *format;
    int prim;
} k_formats[] = {
    {"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATETIME},
    {"uuid", P_UUID}, {"email", P_EMAIL}, {"ipv4", P_IPV4},
};

/* ---- keywords ------------------------------------------------------------------ */

enum { K_ANNOT, K_CORE, K_OBJ, K_ARR, K_STR, K_NUM };
static const struct {
    const char *name;
    int kind;
} k_keywords[] = {
    {"title", K_ANNOT},       {"description", K_ANNOT},
    {"default", K_ANNOT},     {"examples", K_ANNOT},
    {"$schema", K_ANNOT},     {"$id", K_ANNOT},
    {"$comment", K_ANNOT},    {"deprecated", K_ANNOT},
    {"readOnly", K_ANNOT},    {"writeOnly", K_ANNOT},
    {"$defs", K_ANNOT},       {"definitions", K_ANNOT}, /* reached through $ref only */
    {"type", K_CORE},         {"enum", K_CORE},
    {"const", K_CORE},        {"$ref", K_CORE},
    {"anyOf", K_CORE},        {"oneOf", K_CORE},
    {"allOf", K_CORE},        {"properties", K_OBJ},
    {"required", K_OBJ},      {"additionalProperties", K_OBJ},
    {"items", K_ARR},         {"minItems", K_ARR},
    {"maxItems", K_ARR},      {"minLength", K_STR},
    {"maxLength", K_STR},     {"pattern", K_STR},
    {"format", K_STR},        {"minimum", K_NUM},
    {"maximum", K_NUM},       {"exclusiveMinimum", K_NUM},
    {"exclusiveMaximum", K_NUM},
};

static int keyword_kind(const char *k) {
    for (size_t i = 0; i < IX_ARRAY_LEN(k_keywords); i++)
        if (!strcmp(k_keywords[i].name, k)) return k_keywords[i].kind;
    return -1;
}

static const char *const k_types[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
static const int k_type_kind[] = {K_OBJ, K_ARR, K_STR, K_NUM, K_NUM, -1, -1};

/* ---- a string set (rule names, $ref targets) ------------------------------------- */

typedef struct strmap {
    char **keys;  /* (cap) NULL = empty */
    char **vals;  /* (cap) */
    size_t n, cap;
} strmap;

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static void strmap_free(strmap *m) {
    for (size_t i = 0; i < m->cap; i++) {
        ix_free(m->keys[i]);
        ix_free(m->vals[i]);
    }
    ix_free(m->keys);
    ix_free(m->vals);
}

static const char *strmap_get(const strmap *m, const char *k) {
    if (!m->cap) return NULL;
    for (uint32_t h = str_hash(k) & (m->cap - 1);; h = (h + 1) & (m->cap - 1)) {
        if (!m->keys[h]) return NULL;
        if (!strcmp(m->keys[h], k)) return m->vals[h] ? m->vals[h] : m->keys[h];
    }
}

/* Inserts k (absent) with value v (NULL: the key itself). */
static ix_status strmap_put(strmap *m, const char *k, const char *v) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        char **keys = ix_calloc(cap, sizeof *keys), **vals = ix_calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            ix_free(keys);
            ix_free(vals);
            return IX_ERR_NOMEM;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            uint32_t h = str_hash(m->keys[i]) & (cap - 1);
            while (keys[h]) h = (h + 1) & (cap - 1);
            keys[h] = m->keys[i];
            vals[h] = m->vals[i];
        }
        ix_free(m->keys);
        ix_free(m->vals);
        m->keys = keys;
        m->vals = vals;
        m->cap = cap;
    }
    uint32_t h = str_hash(k) & (m->cap - 1);
    while (m->keys[h]) h = (h + 1) & (m->cap - 1);
    m->keys[h] = ix_strdup(k);
    m->vals[h] = v ? ix_strdup(v) : NULL;
    if (!m->keys[h] || (v && !m->vals[h])) {
        ix_free(m->keys[h]);
        ix_free(m->vals[h]);
        m->keys[h] = m->vals[h] = NULL;
        return IX_ERR_NOMEM;
    }
    m->n++;
    return IX_OK;
}

/* Sets k's value, inserting k if absent. */
static ix_status strmap_set(strmap *m, const char *k, const char *v) {
    for (uint32_t h = m->cap ? str_hash(k) & (m->cap - 1) : 0; m->cap && m->keys[h]; h = (h + 1) & (m->cap - 1))
        if (!strcmp(m->keys[h], k)) {
            char *nv = ix_strdup(v);
            if (!nv) return IX_ERR_NOMEM;
            ix_free(m->vals[h]);
            m->vals[h] = nv;
            return IX_OK;
        }
    return strmap_put(m, k, v);
}

/* ---- the walk ----------------------------------------------------------------- */

#define NAME_MAX_LEN 48

typedef struct sctx {
    json_t *root;
    unsigned flags;
    ix_buf rules;  /* rules emitted so far */
    strmap names;  /* rule names in use */
    strmap refs;   /* "$ref" string -> rule name */
    strmap defined; /* rule names emitted */
    strmap suffix;  /* name base -> last numeric suffix given to it */
    uint64_t prims;
    int depth;
    char path[256]; /* JSON pointer of the schema being converted (for messages) */
    size_t path_len;
    ix_errbuf *err;
} sctx;

static ix_status serr(sctx *c, ix_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ix_status serr(sctx *c, ix_status s, const char *fmt, ...) {
    char msg[IX_ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ix_errf(c->err, s, "schema %s: %s", c->path_len ? c->path : "(root)", msg);
}

static ix_status nomem(sctx *c) { return ix_errf(c->err, IX_ERR_NOMEM, "out of memory"); }

/* Appends "/token" to the path (JSON pointer escaping); returns the old length. */
static size_t path_push(sctx *c, const char *tok) {
    size_t old = c->path_len, n = old;
    if (n + 1 < sizeof c->path) c->path[n++] = '/';
    for (; *tok && n + 3 < sizeof c->path; tok++) {
        if (*tok == '~' || *tok == '/') {
            c->path[n++] = '~';
            c->path[n++] = *tok == '~' ? '0' : '1';
        } else {
            c->path[n++] = *tok;
        }
    }
    c->path[n] = '\0';
    c->path_len = n;
    return old;
}

static void path_pop(sctx *c, size_t old) {
    c->path_len = old;
    c->path[old] = '\0';
}

static ix_status use_prim(sctx *c, int p, ix_buf *expr) {
    c->prims |= P(p);
    return ix_buf_printf(expr, "%s", k_prims[p].name);
}

/* A fresh rule name from hint ("root-first-name" style, unique). */
static ix_status reserve_name(sctx *c, const char *hint, char out[NAME_MAX_LEN + 16]) {
    char base[NAME_MAX_LEN + 1];
    size_t n = 0;
    for (const char *s = hint; *s && n < NAME_MAX_LEN; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!ok) ch = '-';
        if (ch == '-' && (n == 0 || base[n - 1] == '-')) continue;
        base[n++] = ch;
    }
    while (n && base[n - 1] == '-') n--;
    if (!n) base[n++] = 'x';
    base[n] = '\0';
    snprintf(out, NAME_MAX_LEN + 16, "%s", base);
    if (strmap_get(&c->names, out)) { /* taken: the next free suffix, from the last one used */
        const char *last = strmap_get(&c->suffix, base);
        unsigned long k = last ? strtoul(last, NULL, 10) : 1;
        do snprintf(out, NAME_MAX_LEN + 16, "%s-%lu", base, ++k);
        while (strmap_get(&c->names, out));
        char num[24];
        snprintf(num, sizeof num, "%lu", k);
        if (strmap_set(&c->suffix, base, num) != IX_OK) return nomem(c);
    }
    return strmap_put(&c->names, out, NULL) == IX_OK ? IX_OK : nomem(c);
}

static ix_status emit_rule(sctx *c, const char *name, const ix_buf *body) {
    ix_status s = ix_buf_printf(&c->rules, "%s ::= %s\n", name, body->data ? body->data : "\"\"");
    if (s == IX_OK) s = strmap_put(&c->defined, name, NULL);
    if (s != IX_OK) return nomem(c);
    if (c->rules.len > IX_GRAMMAR_MAX_TEXT_BYTES)
        return serr(c, IX_ERR_TOO_LONG, "the schema's grammar exceeds %u bytes", IX_GRAMMAR_MAX_TEXT_BYTES);
    return IX_OK;
}

/* Ends body with `close` and whitespace, defines rule name with it, and
 * refers to it from expr. */
static ix_status finish_rule(sctx *c, const char *name, ix_buf *body, const char *close, ix_buf *expr) {
    ix_status s = ix_buf_printf(body, " %s ", close);
    if (s == IX_OK) s = use_prim(c, P_WS, body);
    if (s == IX_OK) s = emit_rule(c, name, body);
    if (s == IX_OK) s = ix_buf_printf(expr, "%s", name);
    return s;
}

/* A GBNF string literal of s[0..n) (UTF-8). */
static ix_status put_literal(ix_buf *b, const char *s, size_t n) {
    ix_status st = ix_buf_append(b, "\"", 1);
    for (size_t i = 0; i < n && st == IX_OK; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            st = ix_buf_append(b, e, 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            st = ix_buf_printf(b, "\\x%02X", ch);
        } else {
            st = ix_buf_append(b, &s[i], 1);
        }
    }
    return st != IX_OK ? st : ix_buf_append(b, "\"", 1);
}

/* Compact JSON text of v, reals in the shortest of 15 or 17 digits that
 * reads back as the same value. */
static char *dump_value(const json_t *v) {
    size_t flags = JSON_COMPACT | JSON_ENCODE_ANY;
    char *s = json_dumps(v, flags | JSON_REAL_PRECISION(15));
    if (s) {
        json_t *back = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        bool same = back && json_equal(back, v);
        json_decref(back);
        if (same) return s;
        free(s);
    }
    return json_dumps(v, flags | JSON_REAL_PRECISION(17));
}

static bool value_has_type(const json_t *v, const char *type) {
    if (!strcmp(type, "object")) return json_is_object(v);
    if (!strcmp(type, "array")) return json_is_array(v);
    if (!strcmp(type, "string")) return json_is_string(v);
    if (!strcmp(type, "number")) return json_is_number(v);
    if (!strcmp(type, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(type, "boolean")) return json_is_boolean(v);
    if (!strcmp(type, "null")) return json_is_null(v);
    return false;
}

static int type_index(const char *t) {
    for (size_t i = 0; i < IX_ARRAY_LEN(k_types); i++)
        if (!strcmp(k_types[i], t)) return (int)i;
    return -1;
}

static ix_status gen_expr(sctx *c, json_t *s, const char *hint, bool exact, ix_buf *expr);

/* A child schema under key (and index, if >= 0) of the current one. */
static ix_status gen_child(sctx *c, json_t *s, const char *key, const char *sub, const char *hint,
                           ix_buf *expr) {
    size_t old = path_push(c, key);
    if (sub) path_push(c, sub);
    ix_status st = gen_expr(c, s, hint, false, expr);
    path_pop(c, old);
    return st;
}

static ix_status child_hint(char *out, size_t n, const char *hint, const char *what) {
    snprintf(out, n, "%s-%s", hint, what);
    return IX_OK;
}

/* enum / const: the literal values, those of the listed types only. */
static ix_status gen_enum(sctx *c, json_t *s, const json_t *types, ix_buf *expr) {
    json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum");
    if (cv && ev) return serr(c, IX_ERR_UNSUPPORTED, "both 'enum' and 'const'");
    if (ev && (!json_is_array(ev) || json_array_size(ev) == 0))
        return serr(c, IX_ERR_FORMAT, "'enum' must be a non-empty array");
    size_t n = cv ? 1 : json_array_size(ev), kept = 0;
    ix_status st = ix_buf_append(expr, "(", 1);
    for (size_t i = 0; i < n && st == IX_OK; i++) {
        json_t *v = cv ? cv : json_array_get(ev, i);
        bool ok = !types;
        for (size_t k = 0; types && k < json_array_size(types); k++)
            ok = ok || value_has_type(v, json_string_value(json_array_get(types, k)));
        if (!ok) continue;
        char *text = dump_value(v);
        if (!text) return nomem(c);
        if (kept++) st = ix_buf_append(expr, " | ", 3);
        if (st == IX_OK) st = put_literal(expr, text, strlen(text));
        free(text);
    }
    if (st == IX_OK && kept == 0)
        return serr(c, IX_ERR_UNSUPPORTED, "no value of '%s' has the schema's type", cv ? "const" : "enum");
    if (st == IX_OK) st = ix_buf_append(expr, ") ", 2);
    if (st == IX_OK) st = use_prim(c, P_WS, expr);
    return st == IX_OK ? st : nomem(c);
}

static ix_status get_count(sctx *c, json_t *s, const char *key, int64_t dflt, int64_t *out) {
    json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v) return IX_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return serr(c, IX_ERR_FORMAT, "'%s' must be a non-negative integer", key);
    if (json_integer_value(v) > IX_GRAMMAR_MAX_REPEAT)
        return serr(c, IX_ERR_TOO_LONG, "'%s' of %lld is above the limit of %d", key,
                    (long long)json_integer_value(v), IX_GRAMMAR_MAX_REPEAT);
    *out = json_integer_value(v);
    return IX_OK;
}

static ix_status put_repeat(ix_buf *b, int64_t min, int64_t max) {
    if (max < 0) return min == 0 ? ix_buf_append(b, "*", 1) : ix_buf_printf(b, "{%lld,}", (long long)min);
    return ix_buf_printf(b, "{%lld,%lld}", (long long)min, (long long)max);
}

ix_status ix__gram_pattern_to_gbnf(const char *re, size_t len, ix_buf *out, ix_errbuf *err);

static ix_status gen_string(sctx *c, json_t *s, const char *hint, bool exact, ix_buf *expr) {
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    int64_t min, max;
    ix_status st;
    if ((st = get_count(c, s, "minLength", 0, &min)) != IX_OK ||
        (st = get_count(c, s, "maxLength", -1, &max)) != IX_OK)
        return st;
    bool lengths = min > 0 || max >= 0;
    if (max >= 0 && max < min) return serr(c, IX_ERR_FORMAT, "maxLength is below minLength");
    if ((fmt || pat) && lengths)
        return serr(c, IX_ERR_UNSUPPORTED, "minLength / maxLength together with %s",
                    fmt ? "'format'" : "'pattern'");
    if (fmt && pat) return serr(c, IX_ERR_UNSUPPORTED, "'format' together with 'pattern'");
    if (!fmt && !pat && !lengths) return use_prim(c, P_STRING, expr);
    ix_buf body = {0};
    st = ix_buf_append(&body, "\"\\\"\" ", 5);
    if (fmt) {
        if (!json_is_string(fmt)) st = serr(c, IX_ERR_FORMAT, "'format' must be a string");
        int p = -1;
        for (size_t i = 0; st == IX_OK && i < IX_ARRAY_LEN(k_formats); i++)
            if (!strcmp(k_formats[i].format, json_string_value(fmt))) p = k_formats[i].prim;
        if (st == IX_OK && p < 0)
            st = serr(c, IX_ERR_UNSUPPORTED,
                      "format '%s' is not supported (date, time, date-time, uuid, email, ipv4 are)",
                      json_string_value(fmt));
        if (st == IX_OK) st = use_prim(c, p, &body);
    } else if (pat) {
        if (!json_is_string(pat)) st = serr(c, IX_ERR_FORMAT, "'pattern' must be a string");
        ix_errbuf perr = {{0}};
        if (st == IX_OK) {
            st = ix__gram_pattern_to_gbnf(json_string_value(pat), json_string_length(pat), &body, &perr);
            if (st != IX_OK) st = serr(c, st, "pattern: %s", perr.msg);
        }
    } else {
        st = use_prim(c, P_CHAR, &body);
        if (st == IX_OK) st = put_repeat(&body, min, max);
    }
    char name[NAME_MAX_LEN + 16];
    if (st == IX_OK && !exact) st = reserve_name(c, hint, name);
    if (st == IX_OK) st = finish_rule(c, exact ? hint : name, &body, "\"\\\"\"", expr);
    ix_buf_free(&body);
    return st;
}

/* ---- integer ranges ----------------------------------------------------------------
 * minimum / maximum of an integer become an exact grammar: digit strings of
 * each length between the bounds, split on the first digit that differs
 * (the classic numeric-range construction; O(digits^2) alternatives). */

#define INT_MAX_ABS 9999999999999999LL /* 16 digits, what the integer rule allows */

/* n-digit strings (leading zeros allowed) from l to h, l <= h. */
static ix_status put_fixed(ix_buf *b, const char *l, const char *h, size_t n) {
    if (n == 0) return IX_OK;
    if (n == 1) return ix_buf_printf(b, "[%c-%c]", l[0], h[0]);
    if (l[0] == h[0]) {
        ix_status s = ix_buf_printf(b, "\"%c\" ", l[0]);
        return s != IX_OK ? s : put_fixed(b, l + 1, h + 1, n - 1);
    }
    char zeros[24], nines[24];
    memset(zeros, '0', n - 1);
    memset(nines, '9', n - 1);
    bool lo_full = memcmp(l + 1, zeros, n - 1) == 0, hi_full = memcmp(h + 1, nines, n - 1) == 0;
    char first = lo_full ? l[0] : (char)(l[0] + 1), last = hi_full ? h[0] : (char)(h[0] - 1);
    ix_status s = ix_buf_append(b, "(", 1);
    bool alt = false;
    if (s == IX_OK && !lo_full) {
        s = ix_buf_printf(b, "\"%c\" ", l[0]);
        if (s == IX_OK) s = put_fixed(b, l + 1, nines, n - 1);
        alt = true;
    }
    if (s == IX_OK && first <= last) {
        s = ix_buf_printf(b, n > 2 ? "%s[%c-%c] [0-9]{%zu}" : "%s[%c-%c] [0-9]", alt ? " | " : "", first, last, n - 1);
        alt = true;
    }
    if (s == IX_OK && !hi_full) {
        s = ix_buf_printf(b, "%s\"%c\" ", alt ? " | " : "", h[0]);
        if (s == IX_OK) s = put_fixed(b, zeros, h + 1, n - 1);
    }
    return s != IX_OK ? s : ix_buf_append(b, ")", 1);
}

static ix_status put_alt(ix_buf *b) { return b->data[b->len - 1] == '(' ? IX_OK : ix_buf_append(b, " | ", 3); }

/* 0 <= a <= b: the decimal numerals (no leading zeros) between them: one
 * alternative per length, lengths fully inside the range merged into one
 * ([1-9] [0-9]{m,n}). */
static ix_status put_nonneg_range(ix_buf *b, int64_t a, int64_t bmax) {
    ix_status s = ix_buf_append(b, "(", 1);
    size_t run = 0; /* first length of a run of full lengths, 0: none */
    int64_t pow = 1; /* 10^(d-1) */
    for (size_t d = 1; d <= 17 && s == IX_OK; d++, pow *= 10) {
        int64_t first = d == 1 ? 0 : pow, lo = a > first ? a : first;
        int64_t hi = d > 16 ? -1 : bmax < pow * 10 - 1 ? bmax : pow * 10 - 1;
        bool full = d > 1 && lo == first && hi == pow * 10 - 1;
        if (run && !full) { /* close the run: lengths run .. d-1 */
            s = put_alt(b);
            if (s == IX_OK) s = ix_buf_printf(b, "[1-9] [0-9]{%zu,%zu}", run - 1, d - 2);
            run = 0;
        }
        if (full && !run) run = d;
        if (full || lo > hi || s != IX_OK) continue;
        char l[24], h[24];
        snprintf(l, sizeof l, "%0*lld", (int)d, (long long)lo);
        snprintf(h, sizeof h, "%0*lld", (int)d, (long long)hi);
        s = put_alt(b);
        if (s == IX_OK) s = put_fixed(b, l, h, d);
    }
    return s != IX_OK ? s : ix_buf_append(b, ")", 1);
}

/* The bounds of an integer schema, clamped to what the integer rule allows. */
static ix_status int_bounds(sctx *c, json_t *s, int64_t *lo, int64_t *hi) {
    static const struct {
        const char *key;
        bool lower, exclusive;
    } k[] = {{"minimum", true, false}, {"exclusiveMinimum", true, true},
             {"maximum", false, false}, {"exclusiveMaximum", false, true}};
    *lo = -INT_MAX_ABS;
    *hi = INT_MAX_ABS;
    for (size_t i = 0; i < IX_ARRAY_LEN(k); i++) {
        json_t *v = json_object_get(s, k[i].key);
        if (!v) continue;
        if (!json_is_number(v)) return serr(c, IX_ERR_FORMAT, "'%s' must be a number", k[i].key);
        double x = json_number_value(v);
        double bound = k[i].lower ? (k[i].exclusive ? floor(x) + 1 : ceil(x)) : (k[i].exclusive ? ceil(x) - 1 : floor(x));
        if ((k[i].lower && bound > (double)INT_MAX_ABS) || (!k[i].lower && bound < (double)-INT_MAX_ABS))
            return serr(c, IX_ERR_UNSUPPORTED, "'%s' leaves no integer of at most 16 digits", k[i].key);
        /* in the integers: 1e16 - 1 is no double */
        int64_t ib = bound <= -1e16 ? -INT_MAX_ABS : bound >= 1e16 ? INT_MAX_ABS : (int64_t)bound;
        ib = ib < -INT_MAX_ABS ? -INT_MAX_ABS : ib > INT_MAX_ABS ? INT_MAX_ABS : ib;
        if (k[i].lower && ib > *lo) *lo = ib;
        if (!k[i].lower && ib < *hi) *hi = ib;
    }
    if (*lo > *hi) return serr(c, IX_ERR_UNSUPPORTED, "no integer lies between the schema's bounds");
    return IX_OK;
}

static ix_status gen_number(sctx *c, json_t *s, bool integer, ix_buf *expr) {
    if (integer) {
        int64_t lo, hi;
        ix_status st = int_bounds(c, s, &lo, &hi);
        if (st != IX_OK) return st;
        if (lo == -INT_MAX_ABS && hi == INT_MAX_ABS) return use_prim(c, P_INTEGER, expr);
        if (lo == 0 && hi == INT_MAX_ABS) return use_prim(c, P_INTEGER_NN, expr);
        st = ix_buf_append(expr, "(", 1);
        if (st == IX_OK && lo < 0) { /* "-" and the magnitudes: never "-0" */
            st = ix_buf_append(expr, "\"-\" ", 4);
            if (st == IX_OK) st = put_nonneg_range(expr, hi < 0 ? -hi : 1, -lo);
        }
        if (st == IX_OK && hi >= 0) {
            if (lo < 0) st = ix_buf_append(expr, " | ", 3);
            if (st == IX_OK) st = put_nonneg_range(expr, lo > 0 ? lo : 0, hi);
        }
        if (st == IX_OK) st = ix_buf_append(expr, ") ", 2);
        return st == IX_OK ? use_prim(c, P_WS, expr) : st;
    }
    /* A number's bounds are not enforced (docs/grammar.md), except that a
     * lower bound >= 0 drops the minus sign. */
    bool nonneg = false;
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (size_t i = 0; i < IX_ARRAY_LEN(keys); i++) {
        json_t *v = json_object_get(s, keys[i]);
        if (v && !json_is_number(v)) return serr(c, IX_ERR_FORMAT, "'%s' must be a number", keys[i]);
        if (v && i < 2 && json_number_value(v) >= 0) nonneg = true;
    }
    return use_prim(c, nonneg ? P_NUMBER_NN : P_NUMBER, expr);
}

static ix_status gen_array(sctx *c, json_t *s, const char *hint, bool exact, ix_buf *expr) {
    int64_t min, max;
    ix_status st;
    if ((st = get_count(c, s, "minItems", 0, &min)) != IX_OK ||
        (st = get_count(c, s, "maxItems", -1, &max)) != IX_OK)
        return st;
    if (max >= 0 && max < min) return serr(c, IX_ERR_FORMAT, "maxItems is below minItems");
    char name[NAME_MAX_LEN + 16], sub[NAME_MAX_LEN + 32];
    if (!exact && (st = reserve_name(c, hint, name)) != IX_OK) return st;
    const char *me = exact ? hint : name;
    ix_buf item = {0}, body = {0};
    json_t *items = json_object_get(s, "items");
    child_hint(sub, sizeof sub, me, "item");
    if (items)
        st = gen_child(c, items, "items", NULL, sub, &item);
    else
        st = use_prim(c, P_VALUE, &item);
    if (st == IX_OK) st = ix_buf_append(&body, "\"[\" ws ", 7);
    if (st == IX_OK && max != 0) {
        if (min == 0) st = ix_buf_append(&body, "(", 1);
        if (st == IX_OK) st = ix_buf_printf(&body, "%s (\",\" ws %s)", item.data, item.data);
        if (st == IX_OK) st = put_repeat(&body, min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
        if (st == IX_OK && min == 0) st = ix_buf_append(&body, ")?", 2);
    }
    if (st == IX_OK) st = finish_rule(c, me, &body, "\"]\"", expr);
    ix_buf_free(&item);
    ix_buf_free(&body);
    return st;
}

/* kv ::= "\"key\"" ws ":" ws VALUE */
static ix_status put_member(sctx *c, ix_buf *b, const char *key, const char *value) {
    json_t *k = json_string(key);
    char *text = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (!text) return nomem(c);
    ix_status st = put_literal(b, text, strlen(text));
    free(text);
    if (st == IX_OK) st = ix_buf_printf(b, " ws \":\" ws %s", value);
    return st;
}

/* An object's members: one expression per declared property, in the
 * schema's order, and the expression of one extra member when
 * additionalProperties allows them. */
typedef struct members {
    size_t n, n_opt;
    ix_buf *kv;     /* (n) "\"key\"" ws ":" ws VALUE */
    bool *required; /* (n) */
    ix_buf extra;   /* empty when no extra member is allowed */
} members;

static void members_free(members *mb) {
    for (size_t k = 0; mb->kv && k < mb->n; k++) ix_buf_free(&mb->kv[k]);
    ix_free(mb->kv);
    ix_free(mb->required);
    ix_buf_free(&mb->extra);
}

static ix_status check_object(sctx *c, json_t *props, json_t *req, json_t *addl) {
    if (props && !json_is_object(props)) return serr(c, IX_ERR_FORMAT, "'properties' must be an object");
    if (req && !json_is_array(req)) return serr(c, IX_ERR_FORMAT, "'required' must be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return serr(c, IX_ERR_FORMAT, "'additionalProperties' must be a boolean or a schema");
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return serr(c, IX_ERR_FORMAT, "'required' must list strings");
        if (!props || !json_object_get(props, json_string_value(r)))
            return serr(c, IX_ERR_UNSUPPORTED, "required property '%s' is not in 'properties'",
                        json_string_value(r));
    }
    if ((c->flags & IX_GRAMMAR_SCHEMA_STRICT) && !json_is_false(addl))
        return serr(c, IX_ERR_UNSUPPORTED, "strict mode needs \"additionalProperties\": false");
    return IX_OK;
}

static ix_status collect_members(sctx *c, json_t *props, json_t *req, json_t *addl, const char *me,
                                 members *mb) {
    char sub[NAME_MAX_LEN + 32];
    mb->n = props ? json_object_size(props) : 0;
    mb->kv = ix_calloc(mb->n + 1, sizeof *mb->kv);
    mb->required = ix_calloc(mb->n + 1, sizeof *mb->required);
    if (!mb->kv || !mb->required) return nomem(c);
    ix_status st = IX_OK;
    size_t i = 0;
    const char *key;
    json_t *ps;
    json_object_foreach(props, key, ps) {
        for (size_t k = 0; req && k < json_array_size(req); k++)
            mb->required[i] = mb->required[i] || !strcmp(json_string_value(json_array_get(req, k)), key);
        if (!mb->required[i]) mb->n_opt++;
        if (!mb->required[i] && (c->flags & IX_GRAMMAR_SCHEMA_STRICT))
            return serr(c, IX_ERR_UNSUPPORTED, "strict mode needs every property in 'required' ('%s' is not)",
                        key);
        ix_buf val = {0};
        child_hint(sub, sizeof sub, me, key);
        st = gen_child(c, ps, "properties", key, sub, &val);
        if (st == IX_OK) st = put_member(c, &mb->kv[i], key, val.data);
        ix_buf_free(&val);
        if (st != IX_OK) return st;
        i++;
    }
    if (!addl || json_is_false(addl)) return IX_OK;
    ix_buf val = {0}; /* extra members: any key */
    child_hint(sub, sizeof sub, me, "extra");
    st = json_is_true(addl) ? use_prim(c, P_VALUE, &val)
                            : gen_child(c, addl, "additionalProperties", NULL, sub, &val);
    if (st == IX_OK) st = use_prim(c, P_STRING, &mb->extra);
    if (st == IX_OK) st = ix_buf_printf(&mb->extra, " \":\" ws %s", val.data);
    ix_buf_free(&val);
    return st;
}

/* Optional properties, in order, commas only between: two chains of rules,
 * ME-a-k ("after k: something came before, so each next member starts with
 * a comma") and ME-f-k ("first from k: nothing came yet"). Both are tail
 * references, so they cost rules, not stack. Appends ME-f-0 to body. */
static ix_status put_member_chains(sctx *c, const members *mb, const char *me, ix_buf *body) {
    typedef char rname[NAME_MAX_LEN + 16];
    size_t n = mb->n;
    const char *extra = mb->extra.data;
    rname *an = ix_malloc((n + 1) * sizeof *an), *fn = ix_malloc((n + 1) * sizeof *fn);
    ix_buf rule = {0};
    ix_status st = an && fn ? IX_OK : nomem(c);
    for (size_t k = 0; k <= n && st == IX_OK; k++) {
        char h[NAME_MAX_LEN + 40];
        snprintf(h, sizeof h, "%s-a-%zu", me, k);
        st = reserve_name(c, h, an[k]);
        snprintf(h, sizeof h, "%s-f-%zu", me, k);
        if (st == IX_OK) st = reserve_name(c, h, fn[k]);
    }
    /* a-0 is never used; f-(k+1) only after an optional property k */
    for (size_t k = 1; k <= n && st == IX_OK; k++) {
        ix_buf_clear(&rule);
        if (k == n)
            st = extra ? ix_buf_printf(&rule, "(\",\" ws %s)*", extra) : ix_buf_append(&rule, "\"\"", 2);
        else
            st = ix_buf_printf(&rule, mb->required[k] ? "\",\" ws %s %s" : "(\",\" ws %s)? %s",
                               mb->kv[k].data, an[k + 1]);
        if (st == IX_OK) st = emit_rule(c, an[k], &rule);
    }
    for (size_t k = 0; k <= n && st == IX_OK && !(k > 0 && mb->required[k - 1]); k++) {
        ix_buf_clear(&rule);
        if (k == n)
            st = extra ? ix_buf_printf(&rule, "(%s (\",\" ws %s)*)?", extra, extra) : ix_buf_append(&rule, "\"\"", 2);
        else if (mb->required[k])
            st = ix_buf_printf(&rule, "%s %s", mb->kv[k].data, an[k + 1]);
        else
            st = ix_buf_printf(&rule, "%s %s | %s", mb->kv[k].data, an[k + 1], fn[k + 1]);
        if (st == IX_OK) st = emit_rule(c, fn[k], &rule);
    }
    if (st == IX_OK) st = ix_buf_printf(body, " %s", fn[0]);
    ix_buf_free(&rule);
    ix_free(an);
    ix_free(fn);
    return st;
}

static ix_status gen_object(sctx *c, json_t *s, const char *hint, bool exact, ix_buf *expr) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    ix_status st = check_object(c, props, req, addl);
    char name[NAME_MAX_LEN + 16];
    if (st == IX_OK && !exact) st = reserve_name(c, hint, name);
    if (st != IX_OK) return st;
    const char *me = exact ? hint : name;
    members mb;
    memset(&mb, 0, sizeof mb);
    ix_buf body = {0};
    st = collect_members(c, props, req, addl, me, &mb);
    if (st == IX_OK) st = ix_buf_append(&body, "\"{\" ws", 6);
    if (st == IX_OK && mb.n_opt == 0) { /* all required: one sequence */
        for (size_t k = 0; k < mb.n && st == IX_OK; k++)
            st = ix_buf_printf(&body, "%s %s", k ? " \",\" ws" : "", mb.kv[k].data);
        if (st == IX_OK && mb.extra.data)
            st = mb.n ? ix_buf_printf(&body, " (\",\" ws %s)*", mb.extra.data)
                      : ix_buf_printf(&body, " (%s (\",\" ws %s)*)?", mb.extra.data, mb.extra.data);
    } else if (st == IX_OK) {
        st = put_member_chains(c, &mb, me, &body);
    }
    if (st == IX_OK) st = finish_rule(c, me, &body, "\"}\"", expr);
    members_free(&mb);
    ix_buf_free(&body);
    return st;
}

/* The schema a "#..." reference points at (JSON pointer, ~0 ~1 escapes). */
static json_t *resolve_ref(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *cur = root;
    const char *p = ref + 1;
    while (*p && cur) {
        if (*p != '/') return NULL;
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~') {
                if (p[1] != '0' && p[1] != '1') return NULL;
                ch = p[1] == '0' ? '~' : '/';
                p++;
            }
            if (n + 1 >= sizeof tok) return NULL;
            tok[n++] = ch;
        }
        tok[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long idx = strtoul(tok, &end, 10);
            cur = (*tok && !*end) ? json_array_get(cur, idx) : NULL;
        } else {
            cur = NULL;
        }
    }
    return cur;
}

static ix_status gen_ref(sctx *c, json_t *s, ix_buf *expr) {
    json_t *r = json_object_get(s, "$ref");
    if (!json_is_string(r)) return serr(c, IX_ERR_FORMAT, "'$ref' must be a string");
    const char *ref = json_string_value(r);
    const char *known = strmap_get(&c->refs, ref);
    if (known) return ix_buf_printf(expr, "%s", known);
    json_t *target = resolve_ref(c->root, ref);
    if (!target)
        return serr(c, IX_ERR_UNSUPPORTED, "$ref '%s' does not resolve in this document "
                                            "(only local \"#/...\" references are supported)", ref);
    const char *last = strrchr(ref, '/');
    char name[NAME_MAX_LEN + 16];
    ix_status st = reserve_name(c, last && last[1] ? last + 1 : "root-ref", name);
    if (st == IX_OK && strmap_put(&c->refs, ref, name) != IX_OK) st = nomem(c);
    if (st != IX_OK) return st;
    /* The target's own place, for messages. */
    char saved[sizeof c->path];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    c->path_len = strlen(c->path);
    ix_buf body = {0};
    st = gen_expr(c, target, name, true, &body);
    memcpy(c->path, saved, sizeof saved);
    c->path_len = saved_len;
    /* gen_expr defined the rule itself when it made one named `name` (a
     * reference straight back to it stays, and fails as left recursion). */
    if (st == IX_OK && !strmap_get(&c->defined, name)) st = emit_rule(c, name, &body);
    if (st == IX_OK) st = ix_buf_printf(expr, "%s", name);
    ix_buf_free(&body);
    return st;
}

static ix_status gen_any_of(sctx *c, json_t *s, const char *key, const char *hint, ix_buf *expr) {
    json_t *list = json_object_get(s, key);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return serr(c, IX_ERR_FORMAT, "'%s' must be a non-empty array", key);
    if (!strcmp(key, "allOf")) {
        if (json_array_size(list) != 1)
            return serr(c, IX_ERR_UNSUPPORTED, "'allOf' with more than one schema");
        return gen_child(c, json_array_get(list, 0), key, "0", hint, expr);
    }
    ix_status st = ix_buf_append(expr, "(", 1);
    for (size_t i = 0; i < json_array_size(list) && st == IX_OK; i++) {
        char idx[24], sub[NAME_MAX_LEN + 32];
        snprintf(idx, sizeof idx, "%zu", i);
        child_hint(sub, sizeof sub, hint, idx);
        if (i) st = ix_buf_append(expr, " | ", 3);
        if (st == IX_OK) st = gen_child(c, json_array_get(list, i), key, idx, sub, expr);
    }
    return st != IX_OK ? st : ix_buf_append(expr, ")", 1);
}

/* The types a schema lists (NULL when it lists none), checked. */
static ix_status get_types(sctx *c, json_t *s, json_t **out) {
    json_t *t = json_object_get(s, "type");
    *out = NULL;
    if (!t) return IX_OK;
    json_t *list = json_is_string(t) ? json_pack("[O]", t) : json_incref(t);
    if (!list) return nomem(c);
    if (!json_is_array(list) || json_array_size(list) == 0) {
        json_decref(list);
        return serr(c, IX_ERR_FORMAT, "'type' must be a type name or a non-empty array of them");
    }
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *e = json_array_get(list, i);
        if (!json_is_string(e) || type_index(json_string_value(e)) < 0) {
            json_decref(list);
            return serr(c, IX_ERR_UNSUPPORTED, "unknown type %s%s%s", json_is_string(e) ? "'" : "",
                        json_is_string(e) ? json_string_value(e) : "(not a string)",
                        json_is_string(e) ? "'" : "");
        }
    }
    *out = list;
    return IX_OK;
}

/* Every keyword known, and applying to at least one listed type. Returns
 * which kinds of keywords are present (bit per K_*). */
static ix_status check_keywords(sctx *c, json_t *s, const json_t *types, unsigned *kinds) {
    const char *key;
    json_t *v;
    *kinds = 0;
    json_object_foreach(s, key, v) {
        int kind = keyword_kind(key);
        if (kind < 0) return serr(c, IX_ERR_UNSUPPORTED, "keyword '%s' is not supported", key);
        *kinds |= 1u << kind;
        if (kind <= K_CORE || !types) continue;
        bool applies = false;
        for (size_t i = 0; i < json_array_size(types); i++)
            applies = applies || k_type_kind[type_index(json_string_value(json_array_get(types, i)))] == kind;
        if (!applies) return serr(c, IX_ERR_UNSUPPORTED, "keyword '%s' does not apply to the schema's type", key);
    }
    return IX_OK;
}

static ix_status gen_typed(sctx *c, json_t *s, const char *type, const char *hint, bool exact,
                           ix_buf *expr) {
    if (!strcmp(type, "object")) return gen_object(c, s, hint, exact, expr);
    if (!strcmp(type, "array")) return gen_array(c, s, hint, exact, expr);
    if (!strcmp(type, "string")) return gen_string(c, s, hint, exact, expr);
    if (!strcmp(type, "number")) return gen_number(c, s, false, expr);
    if (!strcmp(type, "integer")) return gen_number(c, s, true, expr);
    if (!strcmp(type, "boolean")) return use_prim(c, P_BOOLEAN, expr);
    return use_prim(c, P_NULL, expr);
}

/* Appends an expression matching schema s (plus trailing whitespace). With
 * exact, a rule it defines is named hint itself (already reserved). */
static ix_status gen_expr(sctx *c, json_t *s, const char *hint, bool exact, ix_buf *expr) {
    if (json_is_true(s)) return use_prim(c, P_VALUE, expr);
    if (json_is_false(s)) return serr(c, IX_ERR_UNSUPPORTED, "the schema false matches nothing");
    if (!json_is_object(s)) return serr(c, IX_ERR_FORMAT, "a schema must be an object or a boolean");
    if (c->depth >= IX_GRAMMAR_MAX_NESTING)
        return serr(c, IX_ERR_TOO_LONG, "schemas nested deeper than %d", IX_GRAMMAR_MAX_NESTING);
    json_t *types;
    unsigned kinds;
    ix_status st = get_types(c, s, &types);
    if (st != IX_OK) return st;
    if ((st = check_keywords(c, s, types, &kinds)) != IX_OK) {
        json_decref(types);
        return st;
    }
    c->depth++;
    static const char *const combinators[] = {"$ref", "anyOf", "oneOf", "allOf"};
    const char *comb = NULL;
    for (size_t i = 0; i < IX_ARRAY_LEN(combinators); i++) {
        if (!json_object_get(s, combinators[i])) continue;
        if (comb) {
            st = serr(c, IX_ERR_UNSUPPORTED, "'%s' together with '%s'", comb, combinators[i]);
            goto out;
        }
        comb = combinators[i];
    }
    if (comb && (kinds & ~(1u << K_ANNOT)) != (1u << K_CORE)) {
        st = serr(c, IX_ERR_UNSUPPORTED, "'%s' together with other keywords (only annotations may go "
                                         "beside it)", comb);
        goto out;
    }
    if (comb && (json_object_get(s, "type") || json_object_get(s, "enum") || json_object_get(s, "const"))) {
        st = serr(c, IX_ERR_UNSUPPORTED, "'%s' together with 'type', 'enum' or 'const'", comb);
        goto out;
    }
    if (comb && !strcmp(comb, "$ref")) {
        st = gen_ref(c, s, expr);
    } else if (comb) {
        st = gen_any_of(c, s, comb, hint, expr);
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        st = gen_enum(c, s, types, expr);
    } else if (types && json_array_size(types) == 1) {
        st = gen_typed(c, s, json_string_value(json_array_get(types, 0)), hint, exact, expr);
    } else if (types) { /* ["string", "null"]: one alternative per type */
        st = ix_buf_append(expr, "(", 1);
        for (size_t i = 0; i < json_array_size(types) && st == IX_OK; i++) {
            const char *t = json_string_value(json_array_get(types, i));
            char sub[NAME_MAX_LEN + 32];
            child_hint(sub, sizeof sub, hint, t);
            if (i) st = ix_buf_append(expr, " | ", 3);
            if (st == IX_OK) st = gen_typed(c, s, t, sub, false, expr);
        }
        if (st == IX_OK) st = ix_buf_append(expr, ")", 1);
    } else if (kinds & (1u << K_OBJ)) { /* no type: what the keywords describe */
        st = gen_object(c, s, hint, exact, expr);
    } else if (kinds & (1u << K_ARR)) {
        st = gen_array(c, s, hint, exact, expr);
    } else if (kinds & (1u << K_STR)) {
        st = gen_string(c, s, hint, exact, expr);
    } else if (kinds & (1u << K_NUM)) {
        st = gen_number(c, s, false, expr);
    } else {
        st = use_prim(c, P_VALUE, expr);
    }
out:
    c->depth--;
    json_decref(types);
    return st;
}

/* Appends the shared rules used (and what they use), table order. */
static ix_status emit_prims(sctx *c) {
    uint64_t need = c->prims;
    for (bool grew = true; grew;) {
        grew = false;
        for (int p = 0; p < P_COUNT; p++)
            if ((need & P(p)) && (need | k_prims[p].deps) != need) {
                need |= k_prims[p].deps;
                grew = true;
            }
    }
    ix_status st = IX_OK;
    for (int p = 0; p < P_COUNT && st == IX_OK; p++) {
        if (!(need & P(p))) continue;
        const char *body = k_prims[p].body;
        if (p == P_WS && (c->flags & IX_GRAMMAR_SCHEMA_COMPACT)) body = "\"\"";
        st = ix_buf_printf(&c->rules, "%s ::= %s\n", k_prims[p].name, body);
    }
    return st == IX_OK ? st : nomem(c);
}

static ix_status convert(sctx *c, json_t *schema, ix_buf *out) {
    ix_status st = IX_OK;
    for (int p = 0; p < P_COUNT && st == IX_OK; p++) st = strmap_put(&c->names, k_prims[p].name, NULL);
    if (st == IX_OK) st = strmap_put(&c->names, "root", NULL);
    if (st == IX_OK) st = strmap_put(&c->names, "json", NULL);
    if (st == IX_OK) st = strmap_put(&c->refs, "#", "json"); /* the whole document */
    if (st != IX_OK) return nomem(c);
    /* root ::= ws json: leading whitespace too, since SPM models like to
     * start with a "▁{" token. */
    ix_buf expr = {0}, start = {0};
    st = gen_expr(c, schema, "json", true, &expr);
    if (st == IX_OK && !strmap_get(&c->defined, "json")) st = emit_rule(c, "json", &expr);
    if (st == IX_OK) st = use_prim(c, P_WS, &start);
    if (st == IX_OK) st = ix_buf_append(&start, " json", 5);
    if (st == IX_OK) st = emit_rule(c, "root", &start);
    ix_buf_free(&expr);
    ix_buf_free(&start);
    if (st == IX_OK) st = emit_prims(c);
    /* root first, for the reader */
    if (st == IX_OK) {
        const char *r = strstr(c->rules.data, "root ::= ");
        while (r && r != c->rules.data && r[-1] != '\n') r = strstr(r + 1, "root ::= ");
        const char *e = r ? strchr(r, '\n') : NULL;
        if (!r || !e) return ix_errf(c->err, IX_ERR_INTERNAL, "no root rule generated");
        st = ix_buf_append(out, r, (size_t)(e + 1 - r));
        if (st == IX_OK) st = ix_buf_append(out, c->rules.data, (size_t)(r - c->rules.data));
        if (st == IX_OK) st = ix_buf_printf(out, "%s", e + 1);
        if (st != IX_OK) st = nomem(c);
    }
    return st;
}

ix_status ix_json_schema_to_gbnf(const char *schema, size_t len, unsigned flags, ix_buf *out,
                                 ix_errbuf *err) {
    if (!schema && len) return ix_errf(err, IX_ERR_INVALID, "schema is NULL");
    if (len > IX_GRAMMAR_MAX_TEXT_BYTES)
        return ix_errf(err, IX_ERR_TOO_LONG, "schema of %zu bytes (the limit is %u)", len,
                       IX_GRAMMAR_MAX_TEXT_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(schema ? schema : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root)
        return ix_errf(err, IX_ERR_FORMAT, "schema is not valid JSON: line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
    sctx c;
    memset(&c, 0, sizeof c);
    c.root = root;
    c.flags = flags;
    c.err = err;
    size_t len0 = out->len;
    ix_status st = convert(&c, root, out);
    if (st == IX_ERR_NOMEM) ix_errf(err, st, "out of memory");
    if (st != IX_OK && out->data) {
        out->len = len0;
        out->data[len0] = '\0';
    }
    ix_buf_free(&c.rules);
    strmap_free(&c.names);
    strmap_free(&c.refs);
    strmap_free(&c.defined);
    strmap_free(&c.suffix);
    json_decref(root);
    return st;
}

ix_status ix_grammar_from_json_schema(ix_grammar **out, const char *schema, size_t len,
                                      unsigned flags, ix_errbuf *err) {
    *out = NULL;
    ix_buf text = {0};
    ix_status st = ix_json_schema_to_gbnf(schema, len, flags, &text, err);
    if (st == IX_OK) {
        ix_errbuf gerr = {{0}};
        st = ix_grammar_parse(out, text.data, text.len, &gerr);
        if (st != IX_OK) ix_errf(err, st, "schema: the generated grammar: %s", gerr.msg);
    }
    ix_buf_free(&text);
    return st;
}

ix_status ix_grammar_json_object(ix_grammar **out, unsigned flags, ix_errbuf *err) {
    static const char k_any_object[] = "{\"type\": \"object\", \"additionalProperties\": true}";
    flags &= ~(unsigned)IX_GRAMMAR_SCHEMA_STRICT; /* any object: nothing to be strict about */
    return ix_grammar_from_json_schema(out, k_any_object, sizeof k_any_object - 1, flags, err);
}
