/*
 * The GBNF-like text parser (docs/grammar.md has the syntax): a recursive
 * descent over the text that emits straight into the rule builder. Groups
 * recurse at most IX_GRAMMAR_MAX_NESTING deep; everything else is a loop, so
 * no input can exhaust the C stack. Every error names its line and column.
 */
#include <stdio.h>
#include <string.h>

#include "grammar/grammar_int.h"

typedef struct gparser {
    const char *s;
    size_t n, i;
    gram_builder *b;
    int depth;
    uint32_t *ranges; /* class scratch: pairs */
    size_t cap_ranges;
} gparser;

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

static void skip_space(gparser *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else {
            break;
        }
    }
}

static size_t word_end(const gparser *p, size_t i) {
    while (i < p->n && is_word(p->s[i])) i++;
    return i;
}

/* Whether a rule definition `name ::=` starts at p->i. */
static bool at_rule_start(gparser *p) {
    size_t save = p->i;
    p->i = word_end(p, p->i);
    skip_space(p);
    bool yes = p->n - p->i >= 3 && memcmp(p->s + p->i, "::=", 3) == 0;
    p->i = save;
    return yes;
}

static ix_status errf_here(gparser *p, ix_status s, const char *what) {
    if (p->i >= p->n) return ix__gram_errf(p->b, s, p->i, "%s, found the end of the text", what);
    unsigned char c = (unsigned char)p->s[p->i];
    if (c >= 0x20 && c < 0x7f) return ix__gram_errf(p->b, s, p->i, "%s, found '%c'", what, c);
    return ix__gram_errf(p->b, s, p->i, "%s, found byte 0x%02X", what, c);
}

/* One character of a literal or a class, escaped or not. */
static ix_status parse_char(gparser *p, uint32_t *cp) {
    if (p->s[p->i] != '\\') {
        if (p->s[p->i] == '\n')
            return ix__gram_errf(p->b, IX_ERR_FORMAT, p->i, "newline inside a string or class (write \\n)");
        size_t n; /* the text is valid UTF-8, checked up front */
        *cp = ix__gram_utf8_decode(p->s + p->i, p->n - p->i, &n);
        p->i += n;
        return IX_OK;
    }
    size_t at = p->i++;
    if (p->i >= p->n) return ix__gram_errf(p->b, IX_ERR_FORMAT, at, "'\\' at the end of the text");
    switch (ix__gram_escape(p->s, p->n, &p->i, false, cp)) {
    case GRAM_ESC_OK: return IX_OK;
    case GRAM_ESC_HEX:
        return ix__gram_errf(p->b, IX_ERR_FORMAT, at, "\\%c needs %d hexadecimal digits", p->s[at + 1],
                             p->s[at + 1] == 'x' ? 2 : p->s[at + 1] == 'u' ? 4 : 8);
    case GRAM_ESC_NOT_CHAR: return ix__gram_errf(p->b, IX_ERR_FORMAT, at, "U+%04X is not a character", *cp);
    default:
        return ix__gram_errf(p->b, IX_ERR_FORMAT, at,
                             "unknown escape (use \\n \\r \\t \\f \\v \\xHH \\uHHHH \\UHHHHHHHH or "
                             "\\ before punctuation)");
    }
}

static ix_status parse_literal(gparser *p, int32_t rule) {
    size_t open = p->i++;
    for (;;) {
        if (p->i >= p->n)
            return ix__gram_errf(p->b, IX_ERR_FORMAT, open, "unterminated string literal");
        if (p->s[p->i] == '"') {
            p->i++;
            return IX_OK;
        }
        size_t at = p->i;
        uint32_t cp;
        uint8_t u[4];
        ix_status s = parse_char(p, &cp);
        if (s == IX_OK) s = ix__gram_push_bytes(p->b, rule, u, ix__gram_utf8_encode(cp, u), at);
        if (s != IX_OK) return s;
    }
}

static ix_status parse_class(gparser *p, int32_t rule) {
    size_t open = p->i++, n = 0;
    bool negate = p->i < p->n && p->s[p->i] == '^';
    if (negate) p->i++;
    for (;;) {
        if (p->i >= p->n)
            return ix__gram_errf(p->b, IX_ERR_FORMAT, open, "unterminated character class");
        if (p->s[p->i] == ']') break;
        size_t at = p->i;
        uint32_t lo, hi;
        ix_status s = parse_char(p, &lo);
        if (s != IX_OK) return s;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if ((s = parse_char(p, &hi)) != IX_OK) return s;
            if (hi < lo)
                return ix__gram_errf(p->b, IX_ERR_FORMAT, at, "range U+%04X-U+%04X is backwards", lo, hi);
        }
        if (2 * (n + 3) > p->cap_ranges) {
            size_t cap = p->cap_ranges ? p->cap_ranges * 2 : 64;
            uint32_t *r = ix_realloc(p->ranges, cap * sizeof *r);
            if (!r) return ix__gram_errf(p->b, IX_ERR_NOMEM, at, "out of memory");
            p->ranges = r;
            p->cap_ranges = cap;
        }
        p->ranges[2 * n] = lo;
        p->ranges[2 * n + 1] = hi;
        n++;
    }
    p->i++;
    if (n == 0) return ix__gram_errf(p->b, IX_ERR_FORMAT, open, "empty character class");
    n = ix__gram_ranges_normalize(p->ranges, n, negate);
    if (n == 0)
        return ix__gram_errf(p->b, IX_ERR_FORMAT, open, "character class matches no character");
    return ix__gram_push_class(p->b, rule, p->ranges, n, open);
}

static ix_status parse_alts(gparser *p, int32_t rule);

/* {m}, {m,}, {m,n}, {,n} after p->i at '{'. */
static ix_status parse_braces(gparser *p, int32_t *min, int32_t *max) {
    size_t open = p->i++;
    int32_t v[2] = {0, -1};
    bool have[2] = {false, false}, comma = false;
    for (int k = 0; k < 2; k++) {
        skip_space(p);
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            v[k] = (have[k] ? v[k] : 0) * 10 + (p->s[p->i++] - '0');
            have[k] = true;
            if (v[k] > IX_GRAMMAR_MAX_REPEAT)
                return ix__gram_errf(p->b, IX_ERR_TOO_LONG, open, "repetition count above %d",
                                     IX_GRAMMAR_MAX_REPEAT);
        }
        skip_space(p);
        if (k == 0 && p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            comma = true;
            continue;
        }
        break;
    }
    if (p->i >= p->n || p->s[p->i] != '}') return errf_here(p, IX_ERR_FORMAT, "expected '}' of a repetition");
    p->i++;
    if (!have[0] && !(comma && have[1]))
        return ix__gram_errf(p->b, IX_ERR_FORMAT, open, "a repetition needs a count: {m}, {m,}, {m,n} or {,n}");
    *min = have[0] ? v[0] : 0;
    *max = comma ? (have[1] ? v[1] : -1) : *min;
    if (*max >= 0 && *max < *min)
        return ix__gram_errf(p->b, IX_ERR_FORMAT, open, "repetition {%d,%d}: the maximum is below the minimum",
                             *min, *max);
    return IX_OK;
}

static ix_status parse_primary(gparser *p, int32_t rule) {
    char c = p->s[p->i];
    size_t at = p->i;
    if (c == '"') return parse_literal(p, rule);
    if (c == '[') return parse_class(p, rule);
    if (c == '.') {
        p->i++;
        uint32_t any[6] = {0, 0x10ffff};
        size_t n = ix__gram_ranges_normalize(any, 1, false);
        return ix__gram_push_class(p->b, rule, any, n, at);
    }
    if (c == '(') {
        if (p->depth >= IX_GRAMMAR_MAX_NESTING)
            return ix__gram_errf(p->b, IX_ERR_TOO_LONG, at, "groups nested deeper than %d",
                                 IX_GRAMMAR_MAX_NESTING);
        int32_t h;
        ix_status s = ix__gram_rule_helper(p->b, rule, at, &h);
        if (s != IX_OK) return s;
        p->i++;
        p->depth++;
        s = parse_alts(p, h);
        p->depth--;
        if (s != IX_OK) return s;
        skip_space(p);
        if (p->i >= p->n || p->s[p->i] != ')') {
            int line = 1;
            for (size_t k = 0; k < at; k++) line += p->s[k] == '\n';
            char what[64];
            snprintf(what, sizeof what, "expected ')' closing the group of line %d", line);
            return errf_here(p, IX_ERR_FORMAT, what);
        }
        p->i++;
        return ix__gram_push(p->b, rule, GRAM_REF, h, at);
    }
    if (is_word(c)) {
        size_t e = word_end(p, p->i);
        int32_t id;
        ix_status s = ix__gram_rule_named(p->b, p->s + p->i, e - p->i, at, &id);
        if (s != IX_OK) return s;
        p->i = e;
        return ix__gram_push(p->b, rule, GRAM_REF, id, at);
    }
    return errf_here(p, IX_ERR_FORMAT, "expected a string, a character class, '.', '(' or a rule name");
}

/* A sequence of items, ended by '|', ')', the end, or the next `name ::=`. */
static ix_status parse_seq(gparser *p, int32_t rule) {
    for (;;) {
        skip_space(p);
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        if (c == '|' || c == ')') break;
        if (is_word(c) && at_rule_start(p)) break;
        int32_t start = ix__gram_rule_len(p->b, rule);
        size_t at = p->i;
        ix_status s = parse_primary(p, rule);
        if (s != IX_OK) return s;
        for (;;) {
            skip_space(p);
            if (p->i >= p->n) break;
            int32_t min = 0, max = 0;
            c = p->s[p->i];
            if (c == '?' || c == '*' || c == '+') {
                p->i++;
                min = c == '+' ? 1 : 0;
                max = c == '?' ? 1 : -1;
            } else if (c == '{') {
                if ((s = parse_braces(p, &min, &max)) != IX_OK) return s;
            } else {
                break;
            }
            if ((s = ix__gram_repeat(p->b, rule, start, min, max, at)) != IX_OK) return s;
        }
    }
    return ix__gram_push(p->b, rule, GRAM_END, 0, p->i);
}

static ix_status parse_alts(gparser *p, int32_t rule) {
    ix_status s = parse_seq(p, rule);
    while (s == IX_OK) {
        skip_space(p);
        if (p->i >= p->n || p->s[p->i] != '|') break;
        p->i++;
        s = parse_seq(p, rule);
    }
    return s;
}

static ix_status parse_rules(gparser *p) {
    skip_space(p);
    while (p->i < p->n) {
        size_t at = p->i;
        if (!is_word(p->s[p->i])) return errf_here(p, IX_ERR_FORMAT, "expected a rule name");
        size_t e = word_end(p, p->i);
        int32_t id;
        ix_status s = ix__gram_rule_named(p->b, p->s + at, e - at, at, &id);
        if (s != IX_OK) return s;
        p->i = e;
        skip_space(p);
        if (p->n - p->i < 3 || memcmp(p->s + p->i, "::=", 3) != 0) {
            char what[128];
            snprintf(what, sizeof what, "expected '::=' after the rule name '%.*s'",
                     (int)(e - at > 64 ? 64 : e - at), p->s + at);
            return errf_here(p, IX_ERR_FORMAT, what);
        }
        p->i += 3;
        if ((s = ix__gram_rule_define(p->b, id, at)) != IX_OK) return s;
        if ((s = parse_alts(p, id)) != IX_OK) return s;
        skip_space(p);
        if (p->i < p->n && p->s[p->i] == ')')
            return ix__gram_errf(p->b, IX_ERR_FORMAT, p->i, "')' without a matching '('");
    }
    return IX_OK;
}

ix_status ix_grammar_parse(ix_grammar **out, const char *text, size_t len, ix_errbuf *err) {
    *out = NULL;
    if (!text && len) return ix_errf(err, IX_ERR_INVALID, "grammar text is NULL");
    if (len > IX_GRAMMAR_MAX_TEXT_BYTES)
        return ix_errf(err, IX_ERR_TOO_LONG, "grammar of %zu bytes (the limit is %u)", len,
                       IX_GRAMMAR_MAX_TEXT_BYTES);
    size_t bad;
    if (!ix_utf8_valid(text, len, &bad))
        return ix_errf(err, IX_ERR_UTF8, "grammar text is not valid UTF-8 at byte %zu", bad);
    gparser p = {.s = text, .n = len};
    ix_status s = ix__gram_builder_create(&p.b, text, len, err);
    if (s != IX_OK) return s;
    s = parse_rules(&p);
    if (s == IX_OK) s = ix__gram_finish(p.b, out);
    ix__gram_builder_destroy(p.b);
    ix_free(p.ranges);
    return s;
}
