/*
 * JSON Schema "pattern" (ECMA-262 regular expressions, a subset) -> a GBNF
 * expression for the *encoded* contents of a JSON string that match it.
 *
 * The pattern is matched as a whole (a leading ^ and a trailing $ are
 * accepted and implied): a full match also matches unanchored, so the output
 * validates either way. Each character becomes its JSON encoding: most stand
 * for themselves, '"' and '\' and control characters become their escapes.
 * Supported: literals, escapes (\d \w \s and their negations, \n \t ...,
 * \xHH, \uHHHH, escaped punctuation), classes with ranges and negation, '.',
 * groups ( ) and (?: ), '|', and ? * + {m} {m,} {m,n} (a lazy '?' after them
 * changes nothing here). Back-references, lookarounds, word boundaries and
 * anchors elsewhere are refused.
 */
#include <string.h>

#include "grammar/grammar_int.h"

typedef struct rx {
    const char *s;
    size_t n, i;
    ix_buf *out;
    ix_errbuf *err;
    int depth;
    uint32_t *r; /* code-point ranges (pairs) of the class being read */
    size_t nr, cap;
} rx;

static ix_status rx_err(rx *x, const char *what) {
    return ix_errf(x->err, IX_ERR_UNSUPPORTED, "%s at offset %zu", what, x->i);
}

static ix_status add(rx *x, uint32_t lo, uint32_t hi) {
    if (2 * (x->nr + 3) > x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 64;
        uint32_t *r = ix_realloc(x->r, cap * sizeof *r);
        if (!r) return ix_errf(x->err, IX_ERR_NOMEM, "out of memory");
        x->r = r;
        x->cap = cap;
    }
    x->r[2 * x->nr] = lo;
    x->r[2 * x->nr + 1] = hi;
    x->nr++;
    return IX_OK;
}

/* Adds the complement of ranges r0 (sorted pairs, n0) to x. */
static ix_status add_negated(rx *x, const uint32_t *r0, size_t n0) {
    uint32_t next = 0;
    ix_status s = IX_OK;
    for (size_t i = 0; i < n0 && s == IX_OK; i++) {
        if (r0[2 * i] > next) s = add(x, next, r0[2 * i] - 1);
        next = r0[2 * i + 1] + 1;
    }
    return s != IX_OK || next > 0x10ffff ? s : add(x, next, 0x10ffff);
}

static const uint32_t k_digit[] = {'0', '9'};
static const uint32_t k_word[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
static const uint32_t k_space[] = {'\t', '\r', ' ', ' '};

/* \d \w \s \D \W \S into the class; returns 1 if e was one of them. */
static int class_escape(rx *x, char e, ix_status *s) {
    const uint32_t *r;
    size_t n;
    switch (e | 0x20) {
    case 'd': r = k_digit, n = 1; break;
    case 'w': r = k_word, n = 4; break;
    case 's': r = k_space, n = 2; break;
    default: return 0;
    }
    *s = IX_OK;
    if (e >= 'a')
        for (size_t i = 0; i < n && *s == IX_OK; i++) *s = add(x, r[2 * i], r[2 * i + 1]);
    else
        *s = add_negated(x, r, n);
    return 1;
}

/* One character (x->i at it), escapes decoded; *is_class set when it was a
 * class escape (then its ranges were added instead). */
static ix_status read_char(rx *x, uint32_t *cp, bool *is_class) {
    *is_class = false;
    if (x->s[x->i] != '\\') { /* jansson gave valid UTF-8 */
        size_t n;
        *cp = ix__gram_utf8_decode(x->s + x->i, x->n - x->i, &n);
        x->i += n;
        return IX_OK;
    }
    if (++x->i >= x->n) return rx_err(x, "'\\' at the end");
    char e = x->s[x->i++];
    ix_status s;
    if (class_escape(x, e, &s)) {
        *is_class = true;
        return s;
    }
    x->i--; /* back to the escape's letter */
    switch (ix__gram_escape(x->s, x->n, &x->i, true, cp)) {
    case GRAM_ESC_OK: return IX_OK;
    case GRAM_ESC_HEX: return rx_err(x, "bad hexadecimal escape");
    case GRAM_ESC_NOT_CHAR: return rx_err(x, "escape of a non-character (a surrogate?)");
    default:
        x->i--;
        return rx_err(x, "unsupported escape (back-references, \\b and \\p are not supported)");
    }
}

/* ---- output: a code-point set as JSON string contents ----------------------------- */

static ix_status put_cp(ix_buf *b, uint32_t c) {
    if (c > 0x20 && c < 0x7f && !strchr("]\\-^\"", (int)c)) return ix_buf_printf(b, "%c", (char)c);
    return c <= 0xffff ? ix_buf_printf(b, "\\u%04X", c) : ix_buf_printf(b, "\\U%08X", c);
}

static bool has(const uint32_t *r, size_t n, uint32_t c) {
    for (size_t i = 0; i < n; i++)
        if (c >= r[2 * i] && c <= r[2 * i + 1]) return true;
    return false;
}

/* ( [safe characters] | "\\\"" | "\\\\" | "\\n" | "\\u0001" ... ) */
static ix_status emit_set(rx *x, const uint32_t *r, size_t n) {
    /* What a JSON string holds unescaped: all but controls, '"' and '\'. */
    static const uint32_t safe[][2] = {{0x20, 0x21}, {0x23, 0x5b}, {0x5d, 0x10ffff}};
    ix_buf *b = x->out;
    ix_status s = ix_buf_append(b, "(", 1);
    bool first = true;
    for (size_t i = 0; i < n && s == IX_OK; i++)
        for (size_t k = 0; k < IX_ARRAY_LEN(safe) && s == IX_OK; k++) {
            uint32_t lo = r[2 * i] > safe[k][0] ? r[2 * i] : safe[k][0];
            uint32_t hi = r[2 * i + 1] < safe[k][1] ? r[2 * i + 1] : safe[k][1];
            if (lo > hi) continue;
            if (first) s = ix_buf_append(b, "[", 1);
            first = false;
            if (s == IX_OK) s = put_cp(b, lo);
            if (s == IX_OK && hi > lo) {
                s = ix_buf_append(b, "-", 1);
                if (s == IX_OK) s = put_cp(b, hi);
            }
        }
    if (!first && s == IX_OK) s = ix_buf_append(b, "]", 1);
    static const char short_esc[][2] = {{'\b', 'b'}, {'\t', 't'}, {'\n', 'n'}, {'\f', 'f'}, {'\r', 'r'}};
    for (uint32_t c = 0; c < 0x20 && s == IX_OK; c++) {
        if (!has(r, n, c)) continue;
        char e = 0;
        for (size_t k = 0; k < IX_ARRAY_LEN(short_esc); k++)
            if ((uint32_t)short_esc[k][0] == c) e = short_esc[k][1];
        s = ix_buf_printf(b, "%s\"\\\\", first ? "" : " | ");
        if (s == IX_OK) s = e ? ix_buf_printf(b, "%c\"", e) : ix_buf_printf(b, "u%04X\"", c);
        first = false;
    }
    if (s == IX_OK && has(r, n, '"')) {
        s = ix_buf_printf(b, "%s\"\\\\\\\"\"", first ? "" : " | ");
        first = false;
    }
    if (s == IX_OK && has(r, n, '\\')) s = ix_buf_printf(b, "%s\"\\\\\\\\\"", first ? "" : " | ");
    return s != IX_OK ? s : ix_buf_append(b, ")", 1);
}

/* ---- parse and emit ------------------------------------------------------------ */

static ix_status parse_alt(rx *x);

static ix_status parse_class(rx *x) {
    x->i++; /* '[' */
    x->nr = 0;
    bool negate = x->i < x->n && x->s[x->i] == '^';
    if (negate) x->i++;
    ix_status s = IX_OK;
    while (s == IX_OK) {
        if (x->i >= x->n) return rx_err(x, "unterminated class");
        if (x->s[x->i] == ']') break;
        uint32_t lo, hi;
        bool cls;
        if ((s = read_char(x, &lo, &cls)) != IX_OK) return s;
        if (cls) continue;
        hi = lo;
        if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
            x->i++;
            if ((s = read_char(x, &hi, &cls)) != IX_OK) return s;
            if (cls || hi < lo) return rx_err(x, "bad class range");
        }
        s = add(x, lo, hi);
    }
    x->i++; /* ']' */
    if (s != IX_OK) return s;
    size_t n = ix__gram_ranges_normalize(x->r, x->nr, negate);
    if (n == 0) return rx_err(x, "class matches nothing");
    return emit_set(x, x->r, n);
}

static ix_status parse_atom(rx *x) {
    char c = x->s[x->i];
    ix_status s;
    if (c == '(') {
        if (x->depth >= IX_GRAMMAR_MAX_NESTING) return rx_err(x, "groups nested too deep");
        x->i++;
        if (x->i < x->n && x->s[x->i] == '?') {
            if (x->i + 1 < x->n && x->s[x->i + 1] == ':')
                x->i += 2;
            else
                return rx_err(x, "lookarounds and named groups are not supported");
        }
        x->depth++;
        s = parse_alt(x);
        x->depth--;
        if (s != IX_OK) return s;
        if (x->i >= x->n || x->s[x->i] != ')') return rx_err(x, "missing ')'");
        x->i++;
        return IX_OK;
    }
    if (c == '[') return parse_class(x);
    x->nr = 0;
    if (c == '.') { /* any character but line terminators */
        x->i++;
        static const uint32_t nl[] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};
        s = add_negated(x, nl, 3);
    } else if (c == '^' || c == '$') {
        return rx_err(x, "anchors are supported only at the start and the end");
    } else if (c == ')' || c == '|' || c == '*' || c == '+' || c == '?' || c == '{') {
        return rx_err(x, "unexpected character");
    } else {
        uint32_t cp;
        bool cls;
        s = read_char(x, &cp, &cls);
        if (s == IX_OK && !cls) s = add(x, cp, cp);
    }
    if (s != IX_OK) return s;
    size_t n = ix__gram_ranges_normalize(x->r, x->nr, false);
    return emit_set(x, x->r, n);
}

static ix_status parse_quant(rx *x) {
    if (x->i >= x->n) return IX_OK;
    char c = x->s[x->i];
    ix_status s = IX_OK;
    if (c == '?' || c == '*' || c == '+') {
        x->i++;
        s = ix_buf_printf(x->out, "%c", c);
    } else if (c == '{') {
        size_t at = ++x->i;
        long v[2] = {-1, -1};
        int k = 0;
        bool comma = false;
        for (; x->i < x->n && x->s[x->i] != '}'; x->i++) {
            char d = x->s[x->i];
            if (d == ',' && !comma) {
                comma = true;
                k = 1;
            } else if (d >= '0' && d <= '9') {
                v[k] = (v[k] < 0 ? 0 : v[k]) * 10 + (d - '0');
                if (v[k] > IX_GRAMMAR_MAX_REPEAT) return rx_err(x, "repetition count too large");
            } else {
                return rx_err(x, "bad repetition");
            }
        }
        if (x->i >= x->n || v[0] < 0 || (v[1] >= 0 && v[1] < v[0])) {
            x->i = at;
            return rx_err(x, "bad repetition");
        }
        x->i++;
        s = !comma ? ix_buf_printf(x->out, "{%ld}", v[0])
            : v[1] < 0 ? ix_buf_printf(x->out, "{%ld,}", v[0])
                       : ix_buf_printf(x->out, "{%ld,%ld}", v[0], v[1]);
    } else {
        return IX_OK;
    }
    if (s == IX_OK && x->i < x->n && x->s[x->i] == '?') x->i++; /* lazy: same language */
    if (s == IX_OK && x->i < x->n && strchr("?*+{", x->s[x->i])) return rx_err(x, "nested quantifier");
    return s;
}

static ix_status parse_seq(rx *x) {
    ix_status s = IX_OK;
    bool empty = true;
    while (s == IX_OK && x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
        if (!empty) s = ix_buf_append(x->out, " ", 1);
        if (s == IX_OK) s = parse_atom(x);
        if (s == IX_OK) s = parse_quant(x);
        empty = false;
    }
    return s == IX_OK && empty ? ix_buf_append(x->out, "\"\"", 2) : s;
}

static ix_status parse_alt(rx *x) {
    ix_status s = ix_buf_append(x->out, "(", 1);
    if (s == IX_OK) s = parse_seq(x);
    while (s == IX_OK && x->i < x->n && x->s[x->i] == '|') {
        x->i++;
        s = ix_buf_append(x->out, " | ", 3);
        if (s == IX_OK) s = parse_seq(x);
    }
    return s != IX_OK ? s : ix_buf_append(x->out, ")", 1);
}

ix_status ix__gram_pattern_to_gbnf(const char *re, size_t len, ix_buf *out, ix_errbuf *err);

ix_status ix__gram_pattern_to_gbnf(const char *re, size_t len, ix_buf *out, ix_errbuf *err) {
    rx x = {.s = re, .n = len, .out = out, .err = err};
    if (x.n && x.s[0] == '^') x.i++;
    /* a trailing unescaped '$' */
    if (x.n > x.i && x.s[x.n - 1] == '$') {
        size_t bs = 0;
        while (bs + 2 <= x.n && x.s[x.n - 2 - bs] == '\\') bs++;
        if (bs % 2 == 0) x.n--;
    }
    size_t len0 = out->len;
    ix_status s = parse_alt(&x);
    if (s == IX_OK && x.i < x.n) s = rx_err(&x, "unmatched ')'");
    if (s == IX_ERR_NOMEM) ix_errf(err, s, "out of memory");
    if (s != IX_OK && out->data) {
        out->len = len0;
        out->data[len0] = '\0';
    }
    ix_free(x.r);
    return s;
}
