/* inferx template: the lexer. Template text -> tokens, as jinja2's lexer does
 * with Hugging Face's settings (trim_blocks and lstrip_blocks on):
 *
 *   - text runs up to the next "{{", "{%" or "{#";
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}", "-}}",
 *     "-#}" all whitespace after it;
 *   - trim_blocks: the first newline after "%}" or "#}" goes ("+%}" keeps it);
 *   - lstrip_blocks: spaces and tabs between the start of a line and "{%" or
 *     "{#" go ("{%+" keeps them); "{{" is never stripped;
 *   - "{% raw %}...{% endraw %}" is text; comments vanish;
 *   - inside a tag, an end marker counts only outside brackets, so
 *     "{{ {'a': {'b': 1}} }}" is one dict;
 *   - strings decode Python's escapes (\n \t \\ \' \" \xNN \uNNNN \UNNNNNNNN,
 *     octal, backslash-newline), keeping unknown ones as written.
 * The text it receives is already UTF-8-checked and newline-normalized. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/template_int.h"

#define MAX_BRACKETS 1024

typedef struct lexer {
    const char *s;
    size_t n, pos;
    tarena *a;
    ttok *t;
    size_t nt, cap;
    bool line_starting; /* the last thing consumed ended a line (jinja's lstrip rule) */
    char stack[MAX_BRACKETS];
    size_t depth;
    ix_errbuf *err;
    ix_status st;
} lexer;

void ix__tpl_linecol(const char *src, size_t len, size_t pos, unsigned *line, unsigned *col) {
    unsigned l = 1, c = 1;
    if (pos > len) pos = len;
    for (size_t i = 0; i < pos; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

void ix__tpl_verr(ix_errbuf *err, const char *src, size_t len, size_t pos, const char *fmt, va_list ap) {
    if (!err) return;
    int k = 0;
    if (pos != SIZE_MAX) {
        unsigned line, col;
        ix__tpl_linecol(src, len, pos, &line, &col);
        k = snprintf(err->msg, sizeof err->msg, "line %u, column %u: ", line, col);
        if (k < 0 || (size_t)k >= sizeof err->msg) k = 0;
    }
    vsnprintf(err->msg + k, sizeof err->msg - (size_t)k, fmt, ap);
}

__attribute__((format(printf, 4, 5))) static bool fail(lexer *L, size_t pos, ix_status st, const char *fmt, ...) {
    if (L->st != IX_OK) return false;
    L->st = st;
    va_list ap;
    va_start(ap, fmt);
    ix__tpl_verr(L->err, L->s, L->n, pos, fmt, ap);
    va_end(ap);
    return false;
}

static ttok *push(lexer *L, ttok_kind kind, size_t pos) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        ttok *t = ix_realloc(L->t, cap * sizeof *t);
        if (!t) {
            fail(L, pos, IX_ERR_NOMEM, "out of memory");
            return NULL;
        }
        L->t = t;
        L->cap = cap;
    }
    ttok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->kind = (uint8_t)kind;
    t->pos = (uint32_t)pos;
    return t;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static bool is_name_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_name_char(char ch) { return is_name_start(ch) || is_digit(ch); }

static bool at(const lexer *L, size_t pos, const char *lit) {
    size_t k = strlen(lit);
    return pos + k <= L->n && memcmp(L->s + pos, lit, k) == 0;
}

/* Skips whitespace from pos; *ends_line: whether the last one skipped was a newline. */
static size_t skip_ws(const lexer *L, size_t pos, bool *ends_line) {
    bool nl = false;
    while (pos < L->n && is_ws(L->s[pos])) nl = L->s[pos++] == '\n';
    if (ends_line) *ends_line = nl;
    return pos;
}

/* The next "{{", "{%" or "{#" at or after pos (n: none). */
static size_t find_tag(const lexer *L, size_t pos) {
    while (pos + 1 < L->n) {
        const char *p = memchr(L->s + pos, '{', L->n - pos - 1);
        if (!p) return L->n;
        size_t i = (size_t)(p - L->s);
        char k = L->s[i + 1];
        if (k == '{' || k == '%' || k == '#') return i;
        pos = i + 1;
    }
    return L->n;
}

/* Text [from, to) before a tag that starts at `to` with kind ('{', '%', '#')
 * and sign ('-', '+' or 0), after the whitespace control that tag asks for. */
static void emit_text(lexer *L, size_t from, size_t to, char kind, char sign) {
    size_t end = to;
    if (sign == '-') {
        while (end > from && is_ws(L->s[end - 1])) end--;
    } else if (sign != '+' && kind != '{' && kind != 0) {
        /* lstrip_blocks: only spaces and tabs between the line start and the tag */
        size_t l = end;
        while (l > from && (L->s[l - 1] == ' ' || L->s[l - 1] == '\t')) l--;
        bool line_start = l > from ? L->s[l - 1] == '\n' : L->line_starting;
        if (line_start) end = l;
    }
    if (end > from) {
        ttok *t = push(L, TK_DATA, from);
        if (!t) return;
        t->p = L->s + from;
        t->n = end - from;
    }
}

/* Decodes the body of a string literal [from, to) (Python's escapes). */
static bool decode_string(lexer *L, size_t from, size_t to, ttok *t) {
    const char *s = L->s + from;
    size_t n = to - from;
    if (!memchr(s, '\\', n)) {
        t->p = s;
        t->n = n;
        return true;
    }
    char *o = ix__arena_alloc(L->a, n + 1); /* decoding never grows a string */
    if (!o) return fail(L, from, IX_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] != '\\' || i + 1 >= n) {
            o[k++] = s[i++];
            continue;
        }
        char e = s[i + 1];
        uint32_t cp;
        size_t digits = 0;
        switch (e) {
        case '\n': i += 2; continue; /* line continuation */
        case '\\': o[k++] = '\\'; i += 2; continue;
        case '\'': o[k++] = '\''; i += 2; continue;
        case '"': o[k++] = '"'; i += 2; continue;
        case 'a': o[k++] = '\a'; i += 2; continue;
        case 'b': o[k++] = '\b'; i += 2; continue;
        case 'f': o[k++] = '\f'; i += 2; continue;
        case 'n': o[k++] = '\n'; i += 2; continue;
        case 'r': o[k++] = '\r'; i += 2; continue;
        case 't': o[k++] = '\t'; i += 2; continue;
        case 'v': o[k++] = '\v'; i += 2; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return fail(L, from + i, IX_ERR_UNSUPPORTED, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                size_t j = i + 1;
                for (int d = 0; d < 3 && j < n && s[j] >= '0' && s[j] <= '7'; d++, j++) cp = cp * 8 + (uint32_t)(s[j] - '0');
                k += ix__utf8_put(cp, o + k);
                i = j;
                continue;
            }
            o[k++] = s[i++]; /* unknown escape: kept as written */
            continue;
        }
        cp = 0;
        size_t j = i + 2;
        for (size_t d = 0; d < digits; d++, j++) {
            char h = j < n ? s[j] : 0;
            int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (v < 0) return fail(L, from + i, IX_ERR_FORMAT, "truncated \\%c escape in a string", e);
            cp = cp * 16 + (uint32_t)v;
        }
        if (cp > 0x10FFFF) return fail(L, from + i, IX_ERR_FORMAT, "escape \\%c out of range", e);
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return fail(L, from + i, IX_ERR_UNSUPPORTED, "escape of a lone surrogate (U+%04X)", (unsigned)cp);
        k += ix__utf8_put(cp, o + k);
        i = j;
    }
    t->p = o;
    t->n = k;
    return true;
}

static bool lex_number(lexer *L) {
    size_t start = L->pos, i = L->pos;
    bool after_dot = L->nt && L->t[L->nt - 1].kind == TK_OP && L->t[L->nt - 1].op == OP_DOT;
    bool is_float = false;
#define DIGITS()                                                                                                       \
    do {                                                                                                               \
        while (i < L->n && is_digit(L->s[i])) {                                                                        \
            i++;                                                                                                       \
            if (i + 1 < L->n && L->s[i] == '_' && is_digit(L->s[i + 1])) i++;                                          \
        }                                                                                                              \
    } while (0)
    DIGITS();
    if (!after_dot) {
        if (i + 1 < L->n && L->s[i] == '.' && is_digit(L->s[i + 1])) {
            i++;
            DIGITS();
            is_float = true;
        }
        if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
            size_t j = i + 1;
            if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
            if (j < L->n && is_digit(L->s[j])) {
                i = j;
                DIGITS();
                is_float = true;
            }
        }
    }
#undef DIGITS
    char buf[128];
    size_t k = 0;
    for (size_t j = start; j < i; j++)
        if (L->s[j] != '_') {
            if (k + 1 >= sizeof buf) return fail(L, start, IX_ERR_FORMAT, "number literal too long");
            buf[k++] = L->s[j];
        }
    buf[k] = 0;
    ttok *t = push(L, is_float ? TK_FLOAT : TK_INT, start);
    if (!t) return false;
    errno = 0;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        t->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) return fail(L, start, IX_ERR_RANGE, "integer literal too large");
    }
    L->pos = i;
    return true;
}

static bool lex_string(lexer *L) {
    size_t start = L->pos;
    char q = L->s[start];
    size_t i = start + 1;
    while (i < L->n && L->s[i] != q) i += L->s[i] == '\\' ? 2 : 1;
    if (i >= L->n) return fail(L, start, IX_ERR_FORMAT, "unterminated string");
    ttok *t = push(L, TK_STRING, start);
    if (!t || !decode_string(L, start + 1, i, t)) return false;
    L->pos = i + 1;
    return true;
}

static bool lex_op(lexer *L) {
    static const struct {
        const char *s;
        top op;
    } k_ops[] = {
        {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE},      {"<=", OP_LE},     {">=", OP_GE},
        {"+", OP_ADD},       {"-", OP_SUB},  {"*", OP_MUL}, {"/", OP_DIV},      {"%", OP_MOD},     {"~", OP_TILDE},
        {"(", OP_LPAREN},    {")", OP_RPAREN}, {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"{", OP_LBRACE}, {"}", OP_RBRACE},
        {"<", OP_LT},        {">", OP_GT},   {"=", OP_ASSIGN}, {".", OP_DOT},   {":", OP_COLON},   {"|", OP_PIPE},
        {",", OP_COMMA},     {";", OP_SEMICOLON},
    };
    size_t start = L->pos;
    for (size_t k = 0; k < IX_ARRAY_LEN(k_ops); k++) {
        if (!at(L, start, k_ops[k].s)) continue;
        top op = k_ops[k].op;
        char ch = k_ops[k].s[0];
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (L->depth == MAX_BRACKETS) return fail(L, start, IX_ERR_FORMAT, "brackets nested too deeply");
            L->stack[L->depth++] = ch;
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            char want = op == OP_RPAREN ? '(' : op == OP_RBRACKET ? '[' : '{';
            if (!L->depth) return fail(L, start, IX_ERR_FORMAT, "unexpected '%c'", ch);
            if (L->stack[L->depth - 1] != want)
                return fail(L, start, IX_ERR_FORMAT, "unexpected '%c', expected the match of '%c'", ch,
                            L->stack[L->depth - 1]);
            L->depth--;
        }
        ttok *t = push(L, TK_OP, start);
        if (!t) return false;
        t->op = (uint8_t)op;
        L->pos += strlen(k_ops[k].s);
        return true;
    }
    unsigned char b = (unsigned char)L->s[start];
    if (b >= 0x20 && b < 0x7F) return fail(L, start, IX_ERR_FORMAT, "unexpected character '%c'", b);
    return fail(L, start, IX_ERR_FORMAT, "unexpected character (byte 0x%02x)", b);
}

/* The inside of a {{ }} or {% %} tag whose opening ends before L->pos. */
static bool lex_tag(lexer *L, bool block, size_t tag_pos) {
    L->depth = 0;
    for (;;) {
        L->pos = skip_ws(L, L->pos, NULL);
        if (L->pos >= L->n)
            return fail(L, tag_pos, IX_ERR_FORMAT, "unexpected end of template: this tag has no '%s'", block ? "%}" : "}}");
        if (L->depth == 0) {
            const char *end = block ? "%}" : "}}";
            size_t p = L->pos;
            bool strip = L->s[p] == '-' && at(L, p + 1, end);
            bool keep = block && L->s[p] == '+' && at(L, p + 1, end);
            if (strip || keep || at(L, p, end)) {
                ttok *t = push(L, block ? TK_BLOCK_END : TK_VAR_END, p);
                if (!t) return false;
                p += (strip || keep) ? 3 : 2;
                if (strip) {
                    p = skip_ws(L, p, &L->line_starting);
                } else if (block && !keep && p < L->n && L->s[p] == '\n') {
                    p++; /* trim_blocks */
                    L->line_starting = true;
                } else {
                    L->line_starting = false;
                }
                L->pos = p;
                return true;
            }
        }
        char ch = L->s[L->pos];
        bool ok;
        if (is_name_start(ch)) {
            size_t i = L->pos;
            while (i < L->n && is_name_char(L->s[i])) i++;
            ttok *t = push(L, TK_NAME, L->pos);
            if (!t) return false;
            t->p = L->s + L->pos;
            t->n = i - L->pos;
            L->pos = i;
            ok = true;
        } else if (is_digit(ch)) {
            ok = lex_number(L);
        } else if (ch == '\'' || ch == '"') {
            ok = lex_string(L);
        } else {
            ok = lex_op(L);
        }
        if (!ok) return false;
    }
}

/* After "{#" (and its sign) at L->pos: skips to the end of the comment. */
static bool lex_comment(lexer *L, size_t tag_pos) {
    const char *p = L->pos < L->n ? memmem(L->s + L->pos, L->n - L->pos, "#}", 2) : NULL;
    if (!p) return fail(L, tag_pos, IX_ERR_FORMAT, "unterminated comment");
    size_t e = (size_t)(p - L->s);
    bool strip = e > L->pos && L->s[e - 1] == '-';
    bool keep = e > L->pos && L->s[e - 1] == '+';
    size_t q = e + 2;
    if (strip) {
        q = skip_ws(L, q, &L->line_starting);
    } else if (!keep && q < L->n && L->s[q] == '\n') {
        q++;
        L->line_starting = true;
    } else {
        L->line_starting = false;
    }
    L->pos = q;
    return true;
}

/* "{%" [-+] ws* name ws* ("-%}" | "+%}" | "%}") at pos, for raw/endraw: the
 * end of the tag, its closing sign ('-', '+' or 0) in *close; 0 if not. */
static size_t simple_tag(const lexer *L, size_t pos, const char *name, char *open, char *close) {
    if (!at(L, pos, "{%")) return 0;
    size_t i = pos + 2;
    *open = 0;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) *open = L->s[i++];
    while (i < L->n && is_ws(L->s[i])) i++;
    if (!at(L, i, name)) return 0;
    i += strlen(name);
    if (i < L->n && is_name_char(L->s[i])) return 0;
    while (i < L->n && is_ws(L->s[i])) i++;
    *close = 0;
    if (i < L->n && (L->s[i] == '-' || L->s[i] == '+')) *close = L->s[i++];
    if (!at(L, i, "%}")) return 0;
    return i + 2;
}

/* "{% raw %}" ends at `body` (its closing sign `close`): the text up to
 * "{% endraw %}" is one text token. */
static bool lex_raw(lexer *L, size_t tag_pos, size_t body, char close) {
    size_t i = body;
    if (close == '-') i = skip_ws(L, i, NULL);
    size_t from = i;
    for (;;) {
        const char *p = i < L->n ? memmem(L->s + i, L->n - i, "{%", 2) : NULL;
        if (!p) return fail(L, tag_pos, IX_ERR_FORMAT, "unterminated raw block: no {%% endraw %%}");
        size_t e = (size_t)(p - L->s);
        char eo, ec;
        size_t end = simple_tag(L, e, "endraw", &eo, &ec);
        if (!end) {
            i = e + 2;
            continue;
        }
        size_t to = e;
        if (eo == '-')
            while (to > from && is_ws(L->s[to - 1])) to--;
        if (to > from) {
            ttok *t = push(L, TK_DATA, from);
            if (!t) return false;
            t->p = L->s + from;
            t->n = to - from;
        }
        if (ec == '-') {
            end = skip_ws(L, end, &L->line_starting);
        } else if (ec != '+' && end < L->n && L->s[end] == '\n') {
            end++;
            L->line_starting = true;
        } else {
            L->line_starting = false;
        }
        L->pos = end;
        return true;
    }
}

ix_status ix__tpl_lex(const char *src, size_t len, tarena *a, ttok **toks, size_t *n_toks, ix_errbuf *err) {
    lexer L = {.s = src, .n = len, .a = a, .line_starting = true, .err = err, .st = IX_OK};
    while (L.st == IX_OK && L.pos < L.n) {
        size_t q = find_tag(&L, L.pos);
        if (q >= L.n) {
            emit_text(&L, L.pos, L.n, 0, 0);
            L.pos = L.n;
            break;
        }
        char kind = L.s[q + 1];
        char sign = q + 2 < L.n && (L.s[q + 2] == '-' || L.s[q + 2] == '+') ? L.s[q + 2] : 0;
        char ro, rc;
        size_t raw_body = kind == '%' ? simple_tag(&L, q, "raw", &ro, &rc) : 0;
        emit_text(&L, L.pos, q, kind, sign);
        if (L.st != IX_OK) break;
        L.pos = q + 2 + (sign ? 1 : 0);
        if (raw_body) {
            lex_raw(&L, q, raw_body, rc);
        } else if (kind == '#') {
            lex_comment(&L, q);
        } else {
            bool block = kind == '%';
            if (push(&L, block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, q)) lex_tag(&L, block, q);
        }
    }
    if (L.st == IX_OK) push(&L, TK_EOF, L.n);
    if (L.st != IX_OK) {
        ix_free(L.t);
        *toks = NULL;
        *n_toks = 0;
        return L.st;
    }
    *toks = L.t;
    *n_toks = L.nt;
    return IX_OK;
}
