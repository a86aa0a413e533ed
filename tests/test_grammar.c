/* grammar: the GBNF-like parser (valid grammars, errors with positions,
 * hostile inputs against the limits), the matcher over bytes (acceptance,
 * UTF-8 classes, completion, end of generation), token masks against a
 * brute-force check on a synthetic vocabulary, clones and copies, cache
 * flushes, the depth and ambiguity bounds, and out-of-memory paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_test_util.h"
#include "inferx/grammar.h"

static ix_grammar *gp(const char *text) {
    ix_grammar *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_grammar_parse(&g, text, strlen(text), &err);
    if (s != IX_OK) fail_msg("grammar does not parse: %s\n%s", err.msg, text);
    return g;
}

static ix_grammar_matcher *mk(const ix_grammar *g, const ix_grammar_vocab *v) {
    ix_grammar_matcher *m;
    ix_errbuf err = {{0}};
    if (ix_grammar_matcher_create(&m, g, v, NULL, &err) != IX_OK) fail_msg("matcher: %s", err.msg);
    return m;
}

/* Whether the whole of s is a sentence of g. */
static bool matches(const ix_grammar *g, const ix_grammar_vocab *v, const char *s, size_t n) {
    ix_grammar_matcher *m = mk(g, v);
    bool ok = ix_grammar_matcher_accept_bytes(m, s, n) == IX_OK && ix_grammar_matcher_can_end(m);
    ix_grammar_matcher_destroy(m);
    return ok;
}

typedef struct gcase {
    const char *grammar;
    const char *accept[8];
    const char *reject[8];
} gcase;

static const gcase k_cases[] = {
    {"root ::= \"abc\"", {"abc"}, {"", "ab", "abcd", "abd"}},
    {"root ::= \"a\" | \"b\" | \"\"", {"a", "b", ""}, {"ab", "c"}},
    {"root ::= (\"ab\" | \"c\")* \"!\"", {"!", "ab!", "cab!", "ccc!"}, {"a!", "abc", ""}},
    {"root ::= [a-c]+", {"a", "abcabc"}, {"", "abd"}},
    {"root ::= [^a-c]", {"d", "\xC3\xA9", "\xF0\x9F\x98\x80", "\n"}, {"a", "c", "", "dd"}},
    {"root ::= x{2,3}\nx ::= \"ab\" | \"\xC3\xA9\"", {"abab", "\xC3\xA9" "ab\xC3\xA9", "ababab"}, {"ab", "abababab"}},
    {"root ::= \"a\"{3}", {"aaa"}, {"aa", "aaaa"}},
    {"root ::= \"a\"{2,}", {"aa", "aaaaaaa"}, {"a"}},
    {"root ::= \"a\"{,2} \"b\"", {"b", "ab", "aab"}, {"aaab"}},
    {"root ::= \"a\"? \"b\"?", {"", "a", "b", "ab"}, {"ba"}},
    {"# comment\nroot ::= item+ # trailing\n# another\nitem ::= [0-9]\n  | \"x\"", {"1", "x9x"}, {"", "a"}},
    {"root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"", {"\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80"}, {"x"}},
    {"root ::= [\\]\\-\\^a]", {"]", "-", "^", "a"}, {"b", "\\"}},
    {"root ::= [a-]", {"a", "-"}, {"b"}},
    {"root ::= .", {"a", "\xE2\x82\xAC", "\xF4\x8F\xBF\xBF"}, {"", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ab"}},
    {"root ::= \"(\" root \")\" | \"x\"", {"x", "(x)", "((x))"}, {"(x", "()", "((x)"}},
    {"root ::= a\na ::= b \"!\"\nb ::= \"\" | \"b\" b", {"!", "b!", "bbb!"}, {"bb"}},
    {"root ::= ( ( \"a\" ) ( \"b\" | ( \"c\" ) ) )", {"ab", "ac"}, {"a", "abc"}},
    {"root::=\"x\"y\ny::=\"z\"", {"xz"}, {"x"}},
    {"root ::= [\\U0001F600\\U0001F602\\U0001F680\\u00e9\\u00eb]+",
     {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x82\xF0\x9F\x9A\x80", "\xC3\xA9\xC3\xAB"},
     {"\xF0\x9F\x98\x81", "\xC3\xAA", "\xF0\x9F\x98"}},
    {"root ::= [\xC3\xA0-\xC3\xBF\xE4\xB8\x80-\xE9\xBF\xBF]*", {"\xC3\xA9\xE4\xB8\xAD", ""}, {"a", "\xC3\x9F"}},
};

static void test_parse_and_match(void **state) {
    (void)state;
    ix_grammar_vocab *v = gtest_byte_vocab();
    for (size_t i = 0; i < IX_ARRAY_LEN(k_cases); i++) {
        const gcase *c = &k_cases[i];
        ix_grammar *g = gp(c->grammar);
        for (size_t k = 0; k < 8 && c->accept[k]; k++)
            if (!matches(g, v, c->accept[k], strlen(c->accept[k])))
                fail_msg("case %zu: '%s' should match\n%s", i, c->accept[k], c->grammar);
        for (size_t k = 0; k < 8 && c->reject[k]; k++)
            if (matches(g, v, c->reject[k], strlen(c->reject[k])))
                fail_msg("case %zu: '%s' should not match\n%s", i, c->reject[k], c->grammar);
        ix_buf p = {0};
        assert_int_equal(ix_grammar_print(g, &p), IX_OK);
        assert_non_null(strstr(p.data, "root ::="));
        ix_buf_free(&p);
        ix_grammar_destroy(g);
    }
    ix_grammar_vocab_destroy(v);
}

typedef struct ecase {
    const char *grammar;
    ix_status status;
    const char *msg; /* substring of the message */
} ecase;

static const ecase k_errors[] = {
    {"", IX_ERR_FORMAT, "no rule named 'root'"},
    {"foo ::= \"x\"", IX_ERR_FORMAT, "no rule named 'root'"},
    {"root ::= foo", IX_ERR_FORMAT, "line 1, column 10: undefined rule 'foo'"},
    {"root ::= \"x\"\n  bar", IX_ERR_FORMAT, "line 2, column 3: undefined rule 'bar'"},
    {"root ::= \"x", IX_ERR_FORMAT, "line 1, column 10: unterminated string"},
    {"root ::= \"x\nroot2 ::= \"y\"", IX_ERR_FORMAT, "newline inside"},
    {"root ::= [a-", IX_ERR_FORMAT, "unterminated character class"},
    {"root ::= []", IX_ERR_FORMAT, "empty character class"},
    {"root ::= [^\\x00-\\U0010FFFF]", IX_ERR_FORMAT, "matches no character"},
    {"root ::= [z-a]", IX_ERR_FORMAT, "backwards"},
    {"root ::= (\"a\"", IX_ERR_FORMAT, "expected ')'"},
    {"root ::= \"a\")", IX_ERR_FORMAT, "')' without"},
    {"root ::= \"a\"\nroot ::= \"b\"", IX_ERR_FORMAT, "line 2, column 1: rule 'root' is defined twice"},
    {"root := \"a\"", IX_ERR_FORMAT, "expected '::='"},
    {"::= \"a\"", IX_ERR_FORMAT, "line 1, column 1: expected a rule name"},
    {"root ::= \"\\q\"", IX_ERR_FORMAT, "unknown escape"},
    {"root ::= \"\\x4\"", IX_ERR_FORMAT, "hexadecimal digits"},
    {"root ::= \"\\uD800\"", IX_ERR_FORMAT, "not a character"},
    {"root ::= \"\\U00110000\"", IX_ERR_FORMAT, "not a character"},
    {"root ::= \"a\"{3,2}", IX_ERR_FORMAT, "below the minimum"},
    {"root ::= \"a\"{}", IX_ERR_FORMAT, "needs a count"},
    {"root ::= \"a\"{1", IX_ERR_FORMAT, "expected '}'"},
    {"root ::= \"a\"{10001}", IX_ERR_TOO_LONG, "above 10000"},
    {"root ::= @", IX_ERR_FORMAT, "found '@'"},
    {"root ::= root \"a\" | \"b\"", IX_ERR_FORMAT, "left recursion: root -> root"},
    {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", IX_ERR_FORMAT, "left recursion"},
    {"root ::= (\"a\"?)*", IX_ERR_FORMAT, "left recursion"},
    {"root ::= \"a\" root", IX_ERR_FORMAT, "rule 'root' can never complete"},
    {"root ::= \"a\" | b\nb ::= \"(\" b \")\"", IX_ERR_FORMAT, "rule 'b' can never complete"},
    {"root ::= c\nc ::= d \"x\"\nd ::= \"y\" c", IX_ERR_FORMAT, "rules 'root', 'c', 'd' can never complete"},
    {"root ::= \"\xC3\"", IX_ERR_UTF8, "not valid UTF-8 at byte 10"},
};

static void test_parse_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_errors); i++) {
        const ecase *c = &k_errors[i];
        ix_grammar *g = (ix_grammar *)1;
        ix_errbuf err = {{0}};
        ix_status s = ix_grammar_parse(&g, c->grammar, strlen(c->grammar), &err);
        if (s != c->status || !strstr(err.msg, c->msg))
            fail_msg("case %zu (%s): got %s '%s', want %s '%s'", i, c->grammar, ix_status_name(s), err.msg,
                     ix_status_name(c->status), c->msg);
        assert_null(g);
    }
}

/* Inputs built to exhaust memory or time must stop at a limit, quickly. */
static void expect_limit(const char *text, size_t len, ix_status want, const char *msg) {
    ix_grammar *g = NULL;
    ix_errbuf err = {{0}};
    uint64_t t0 = ix_time_ns();
    ix_status s = ix_grammar_parse(&g, text, len, &err);
    double ms = (double)(ix_time_ns() - t0) / 1e6;
    if (s != want || !strstr(err.msg, msg))
        fail_msg("got %s '%s', want %s '%s'", ix_status_name(s), err.msg, ix_status_name(want), msg);
    ix_grammar_destroy(g);
    if (ms > 5000) fail_msg("a hostile grammar took %.0f ms", ms);
}

static void test_hostile(void **state) {
    (void)state;
    ix_buf b = {0};
    /* nesting */
    ix_buf_printf(&b, "root ::= ");
    for (int i = 0; i < 70; i++) ix_buf_printf(&b, "(");
    ix_buf_printf(&b, "\"a\"");
    for (int i = 0; i < 70; i++) ix_buf_printf(&b, ")");
    expect_limit(b.data, b.len, IX_ERR_TOO_LONG, "nested deeper than 64");
    /* 1e5 unclosed groups stop at the depth limit too */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::= ");
    for (int i = 0; i < 100000; i++) ix_buf_append(&b, "(", 1);
    expect_limit(b.data, b.len, IX_ERR_TOO_LONG, "nested deeper");
    /* expansion: 300 x{0,10000} is 3M elements */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::=");
    for (int i = 0; i < 300; i++) ix_buf_printf(&b, " \"ab\"{0,10000}");
    expect_limit(b.data, b.len, IX_ERR_TOO_LONG, "more than");
    /* nested repetitions refer to their body instead of copying it: the
     * grammar stays small however large the counts multiply */
    ix_grammar *nested = gp("root ::= ((\"x\"{10000}){10000}){10000}");
    assert_true(ix_grammar_n_rules(nested) < 40000);
    ix_grammar_destroy(nested);
    /* too many rules */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::= r0\n");
    for (int i = 0; i < 70000; i++) ix_buf_printf(&b, "r%d ::= \"a\"\n", i);
    expect_limit(b.data, b.len, IX_ERR_TOO_LONG, "more than 65536 rules");
    /* too long */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::= \"");
    while (b.len < IX_GRAMMAR_MAX_TEXT_BYTES + 10) ix_buf_append(&b, "aaaaaaaaaaaaaaaa", 16);
    ix_buf_append(&b, "\"", 1);
    expect_limit(b.data, b.len, IX_ERR_TOO_LONG, "the limit is");
    /* a long chain of rules, each referring to the next (deep, but not
     * recursive: checks must not recurse on the C stack) */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::= r1\n");
    for (int i = 1; i < 45000; i++) ix_buf_printf(&b, "r%d ::= r%d\n", i, i + 1);
    ix_buf_printf(&b, "r45000 ::= \"z\"\n");
    ix_grammar *g = gp(b.data);
    ix_grammar_vocab *v = gtest_byte_vocab();
    assert_true(matches(g, v, "z", 1));
    ix_grammar_destroy(g);
    /* and a left-recursive cycle 45000 long is found */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::= r1\n");
    for (int i = 1; i < 45000; i++) ix_buf_printf(&b, "r%d ::= r%d\n", i, i + 1);
    ix_buf_printf(&b, "r45000 ::= r1 \"z\" | \"y\"\n");
    expect_limit(b.data, b.len, IX_ERR_FORMAT, "left recursion: r1 -> r2 -> ");
    /* class of every other code point: big but bounded */
    ix_buf_clear(&b);
    ix_buf_printf(&b, "root ::= [");
    for (uint32_t c = 0x100; c < 0x4000; c += 2) ix_buf_printf(&b, "\\u%04X", c);
    ix_buf_printf(&b, "]");
    g = gp(b.data);
    assert_true(matches(g, v, "\xC4\x80", 2));  /* U+0100 */
    assert_false(matches(g, v, "\xC4\x81", 2)); /* U+0101 */
    ix_grammar_destroy(g);
    ix_grammar_vocab_destroy(v);
    ix_buf_free(&b);
}

/* Code points in and out of a class, through the UTF-8 byte automaton. */
static void test_utf8_classes(void **state) {
    (void)state;
    ix_grammar_vocab *v = gtest_byte_vocab();
    ix_grammar *g = gp("root ::= [^a-z\\u00e9\\u0800-\\u0FFF\\U00010000-\\U0001FFFF]");
    ix_grammar *any = gp("root ::= .");
    for (uint32_t c = 0; c <= 0x10ffff; c += (c < 0x3000 ? 7 : 4099)) {
        for (uint32_t d = 0; d < 2; d++) {
            uint32_t cp = c + d * 0x800 * (c < 0x10000);
            if (cp > 0x10ffff) continue;
            char u[4];
            size_t n;
            if (cp < 0x80) u[0] = (char)cp, n = 1;
            else if (cp < 0x800) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
            else if (cp < 0x10000)
                u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
            else
                u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)),
                u[2] = (char)(0x80 | (cp >> 6 & 63)), u[3] = (char)(0x80 | (cp & 63)), n = 4;
            bool surrogate = cp >= 0xd800 && cp <= 0xdfff;
            bool in = !surrogate && !(cp >= 'a' && cp <= 'z') && cp != 0xe9 && !(cp >= 0x800 && cp <= 0xfff) &&
                      !(cp >= 0x10000 && cp <= 0x1ffff);
            if (matches(g, v, u, n) != in) fail_msg("U+%04X: class membership %d expected", cp, in);
            if (matches(any, v, u, n) == surrogate) fail_msg("U+%04X: '.'", cp);
        }
    }
    /* overlong and out-of-range encodings are no characters */
    const char *bad[] = {"\xC0\xAF", "\xE0\x80\xAF", "\xF0\x80\x80\xAF", "\xF8\x88\x80\x80\x80", "\x80", "\xFF"};
    for (size_t i = 0; i < IX_ARRAY_LEN(bad); i++) assert_false(matches(any, v, bad[i], strlen(bad[i])));
    ix_grammar_destroy(g);
    ix_grammar_destroy(any);
    ix_grammar_vocab_destroy(v);
}

/* ---- masks on a synthetic vocabulary ------------------------------------------------ */

typedef struct tvocab {
    int32_t n;
    ix_str *bytes;
    uint8_t *eog;
    char *blob;
    ix_grammar_vocab *v;
} tvocab;

/* The 256 bytes, JSON-ish pieces, UTF-8 fragments, random strings over a
 * small alphabet, an empty non-EOG token, duplicates, and two EOG ids. */
static tvocab make_tvocab(void) {
    static const char *const pieces[] = {
        "{\"", "\":", "\",", "\"}", "\" ", " \"", "  ", "\n  ", "\n", "true", "false", "null", "12", "3.",
        ".5", "e+", "-1", "é", "\xC3", "\xA9\"", "\xE2\x82", "\xAC", "ab", "abc", "\\n", "\\u00", "\\\"",
        "a\"", "[\"", "\"]", "],", "}}", "]]", "[[", "{}", "[]", "\"a\"", "\"b\":", ":", ",", "{", "}",
        "tru", "ue", "nul", "ll", "0", "00", "01", "10", "1e5", "E-", "x", "xyz", "ab", /* duplicate */
    };
    tvocab t;
    int32_t n_rand = 400;
    t.n = 256 + (int32_t)IX_ARRAY_LEN(pieces) + n_rand + 3;
    t.bytes = calloc((size_t)t.n, sizeof *t.bytes);
    t.eog = calloc((size_t)t.n, 1);
    t.blob = calloc((size_t)t.n, 8);
    int32_t id = 0;
    for (; id < 256; id++) {
        t.blob[id * 8] = (char)id;
        t.bytes[id] = (ix_str){t.blob + id * 8, 1};
    }
    for (size_t i = 0; i < IX_ARRAY_LEN(pieces); i++, id++) t.bytes[id] = (ix_str){pieces[i], strlen(pieces[i])};
    static const char alpha[] = "{}[]\",: ab1.-e\\\n";
    uint64_t rng = 7;
    for (int32_t k = 0; k < n_rand; k++, id++) {
        size_t len = 2 + gwalk_rand(&rng) % 5;
        for (size_t j = 0; j < len; j++) t.blob[id * 8 + j] = alpha[gwalk_rand(&rng) % (sizeof alpha - 1)];
        t.bytes[id] = (ix_str){t.blob + id * 8, len};
    }
    t.bytes[id++] = (ix_str){NULL, 0}; /* never allowed */
    t.eog[id] = 1;
    t.bytes[id++] = (ix_str){NULL, 0};
    t.eog[id] = 1;
    t.bytes[id++] = (ix_str){"zz", 2}; /* an EOG id with text: still only an end */
    ix_token eogs[2] = {id - 2, id - 1};
    ix_errbuf err = {{0}};
    if (ix_grammar_vocab_create_from_bytes(&t.v, t.bytes, t.n, eogs, 2, &err) != IX_OK) fail_msg("%s", err.msg);
    return t;
}

static void free_tvocab(tvocab *t) {
    ix_grammar_vocab_destroy(t->v);
    free(t->bytes);
    free(t->eog);
    free(t->blob);
}

/* The mask against accepting each token in a clone. */
static void check_mask_brute(ix_grammar_matcher *m, const tvocab *t, const uint32_t *mask) {
    for (int32_t id = 0; id < t->n; id++) {
        ix_grammar_matcher *c;
        assert_int_equal(ix_grammar_matcher_clone(&c, m), IX_OK);
        bool ok = ix_grammar_matcher_accept(c, id) == IX_OK;
        bool bit = mask[id >> 5] >> (id & 31) & 1;
        if (ok != bit) fail_msg("token %d ('%.*s'): mask %d, accept %d", id, (int)t->bytes[id].len,
                                t->bytes[id].ptr ? t->bytes[id].ptr : "", bit, ok);
        ix_grammar_matcher_destroy(c);
    }
}

static const char k_json_gbnf[] =
    "root ::= ws value\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_masks_brute_force(void **state) {
    (void)state;
    tvocab t = make_tvocab();
    const char *grammars[] = {k_json_gbnf, "root ::= (\"ab\" | \"é\" | [0-9]+ \".\")* \"!\"",
                              "root ::= \"x\"? | \"xyz\" \"abc\"*"};
    size_t nw = ix_grammar_vocab_mask_words(t.v);
    uint32_t *mask = calloc(nw + 1, sizeof *mask);
    for (size_t gi = 0; gi < IX_ARRAY_LEN(grammars); gi++) {
        ix_grammar *g = gp(grammars[gi]);
        ix_grammar_matcher *m = mk(g, t.v);
        uint64_t rng = 1234 + gi;
        for (int doc = 0; doc < 6; doc++) {
            ix_grammar_matcher_reset(m);
            for (int step = 0; step < 60 && !ix_grammar_matcher_is_finished(m); step++) {
                assert_int_equal(ix_grammar_matcher_fill_mask(m, mask, nw), IX_OK);
                check_mask_brute(m, &t, mask);
                /* no empty token, ever; EOG ids only where the grammar may end */
                assert_false(mask[(t.n - 3) >> 5] >> ((t.n - 3) & 31) & 1);
                bool eog_bit = mask[(t.n - 1) >> 5] >> ((t.n - 1) & 31) & 1;
                assert_int_equal(eog_bit, ix_grammar_matcher_can_end(m));
                ix_token id = gwalk_pick(m, t.v, mask, step >= 30, &rng);
                if (id == IX_TOKEN_NONE) break;
                assert_int_equal(ix_grammar_matcher_accept(m, id), IX_OK);
            }
        }
        ix_grammar_matcher_destroy(m);
        ix_grammar_destroy(g);
    }
    free(mask);
    free_tvocab(&t);
}

static void test_end_of_generation(void **state) {
    (void)state;
    tvocab t = make_tvocab();
    ix_token eog = t.n - 1, eog2 = t.n - 2;
    ix_grammar *g = gp("root ::= \"ab\" \"c\"?");
    ix_grammar_matcher *m = mk(g, t.v);
    size_t nw = ix_grammar_vocab_mask_words(t.v);
    uint32_t *mask = calloc(nw, sizeof *mask);
    assert_false(ix_grammar_matcher_can_end(m));
    assert_int_equal(ix_grammar_matcher_accept(m, eog), IX_ERR_INVALID);
    assert_non_null(strstr(ix_grammar_matcher_errmsg(m), "before the grammar is complete"));
    assert_int_equal(ix_grammar_matcher_accept(m, 'a'), IX_OK);
    assert_int_equal(ix_grammar_matcher_accept(m, 'x'), IX_ERR_INVALID); /* state unchanged */
    assert_int_equal(ix_grammar_matcher_accept(m, 'b'), IX_OK);
    assert_true(ix_grammar_matcher_can_end(m));
    assert_false(ix_grammar_matcher_must_end(m)); /* "c" may follow */
    ix_grammar_matcher_fill_mask(m, mask, nw);
    assert_true(mask[eog >> 5] >> (eog & 31) & 1);
    assert_true(mask[eog2 >> 5] >> (eog2 & 31) & 1);
    assert_true(mask['c' >> 5] >> ('c' & 31) & 1);
    assert_int_equal(ix_grammar_matcher_accept(m, 'c'), IX_OK);
    assert_true(ix_grammar_matcher_must_end(m));
    ix_grammar_matcher_fill_mask(m, mask, nw);
    for (int32_t id = 0; id < t.n; id++)
        assert_int_equal(mask[id >> 5] >> (id & 31) & 1, t.eog[id]);
    assert_int_equal(ix_grammar_matcher_accept(m, eog), IX_OK);
    assert_true(ix_grammar_matcher_is_finished(m));
    assert_true(ix_grammar_matcher_must_end(m));
    assert_false(ix_grammar_matcher_can_end(m));
    ix_grammar_matcher_fill_mask(m, mask, nw);
    for (size_t w = 0; w < nw; w++) assert_int_equal(mask[w], 0);
    assert_int_equal(ix_grammar_matcher_accept(m, 'c'), IX_ERR_INVALID);
    assert_int_equal(ix_grammar_matcher_accept(m, eog), IX_ERR_INVALID);
    assert_int_equal(ix_grammar_matcher_accept(m, t.n), IX_ERR_RANGE);
    assert_int_equal(ix_grammar_matcher_accept(m, -1), IX_ERR_RANGE);
    ix_grammar_matcher_reset(m);
    assert_false(ix_grammar_matcher_is_finished(m));
    assert_int_equal(ix_grammar_matcher_accept(m, t.n - 3), IX_ERR_INVALID); /* empty token */
    /* a too-small mask buffer */
    assert_int_equal(ix_grammar_matcher_fill_mask(m, mask, nw - 1), IX_ERR_INVALID);
    ix_grammar_matcher_destroy(m);
    ix_grammar_destroy(g);
    free(mask);
    free_tvocab(&t);
}

static void test_complete_bytes(void **state) {
    (void)state;
    ix_grammar_vocab *v = gtest_byte_vocab();
    ix_grammar *g = gp(k_json_gbnf);
    ix_grammar_matcher *m = mk(g, v);
    const char *prefix = "{\"a\": [1, {\"b\": \"x";
    assert_int_equal(ix_grammar_matcher_accept_bytes(m, prefix, strlen(prefix)), IX_OK);
    ix_buf out = {0};
    assert_int_equal(ix_grammar_matcher_complete_bytes(m, 100, &out), IX_OK);
    assert_string_equal(out.data, "\"}]}");
    assert_int_equal(ix_grammar_matcher_complete_bytes(m, 3, &out), IX_ERR_NOT_FOUND);
    assert_int_equal(ix_grammar_matcher_accept_bytes(m, out.data, out.len), IX_OK);
    assert_true(ix_grammar_matcher_can_end(m));
    ix_buf_clear(&out);
    assert_int_equal(ix_grammar_matcher_complete_bytes(m, 100, &out), IX_OK);
    assert_int_equal(out.len, 0);
    /* all or nothing */
    ix_grammar_matcher_reset(m);
    assert_int_equal(ix_grammar_matcher_accept_bytes(m, "[1, x", 5), IX_ERR_INVALID);
    assert_int_equal(ix_grammar_matcher_accept_bytes(m, "[1]", 3), IX_OK);
    assert_true(ix_grammar_matcher_can_end(m));
    ix_buf_free(&out);
    ix_grammar_matcher_destroy(m);
    ix_grammar_destroy(g);
    ix_grammar_vocab_destroy(v);
}

static void test_clone_and_copy(void **state) {
    (void)state;
    ix_grammar_vocab *v = gtest_byte_vocab();
    ix_grammar *g = gp("root ::= \"ab\" \"c\" | \"ad\"");
    ix_grammar_matcher *a = mk(g, v), *b, *other = mk(g, v);
    assert_int_equal(ix_grammar_matcher_accept(a, 'a'), IX_OK);
    assert_int_equal(ix_grammar_matcher_clone(&b, a), IX_OK);
    assert_int_equal(ix_grammar_matcher_accept(b, 'd'), IX_OK);
    assert_true(ix_grammar_matcher_can_end(b));
    assert_false(ix_grammar_matcher_can_end(a));
    assert_int_equal(ix_grammar_matcher_accept(a, 'b'), IX_OK);
    assert_int_equal(ix_grammar_matcher_accept(a, 'c'), IX_OK);
    /* copy_state within a family; refused across families */
    assert_int_equal(ix_grammar_matcher_accept(b, 256), IX_OK); /* EOG */
    assert_int_equal(ix_grammar_matcher_copy_state(b, a), IX_OK);
    assert_false(ix_grammar_matcher_is_finished(b));
    assert_true(ix_grammar_matcher_can_end(b));
    assert_int_equal(ix_grammar_matcher_copy_state(other, a), IX_ERR_INVALID);
    /* the clone outlives the original */
    ix_grammar_matcher_destroy(a);
    ix_grammar_matcher_reset(b);
    assert_int_equal(ix_grammar_matcher_accept_bytes(b, "ad", 2), IX_OK);
    ix_grammar_matcher_destroy(b);
    ix_grammar_matcher_destroy(other);
    ix_grammar_destroy(g);
    ix_grammar_vocab_destroy(v);
}

/* A state cache of one byte is emptied before every call; every mask must
 * still equal the one an unbounded cache gives, for clones too. */
static void test_flush(void **state) {
    (void)state;
    tvocab t = make_tvocab();
    ix_grammar *g = gp(k_json_gbnf);
    ix_grammar_matcher_params p = ix_grammar_matcher_default_params();
    p.state_cache_bytes = 1;
    p.mask_cache_bytes = 0;
    ix_grammar_matcher *ref = mk(g, t.v), *m, *m2;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_grammar_matcher_create(&m, g, t.v, &p, &err), IX_OK);
    assert_int_equal(ix_grammar_matcher_clone(&m2, m), IX_OK);
    size_t nw = ix_grammar_vocab_mask_words(t.v);
    uint32_t *a = calloc(nw, sizeof *a), *b = calloc(nw, sizeof *b);
    uint64_t rng = 99;
    for (int step = 0; step < 80 && !ix_grammar_matcher_is_finished(ref); step++) {
        assert_int_equal(ix_grammar_matcher_fill_mask(ref, a, nw), IX_OK);
        assert_int_equal(ix_grammar_matcher_fill_mask(m, b, nw), IX_OK);
        assert_memory_equal(a, b, nw * sizeof *a);
        assert_int_equal(ix_grammar_matcher_fill_mask(m2, b, nw), IX_OK); /* m2 one step behind */
        ix_token id = gwalk_pick(ref, t.v, a, step >= 40, &rng);
        if (id == IX_TOKEN_NONE) break;
        assert_int_equal(ix_grammar_matcher_accept(ref, id), IX_OK);
        assert_int_equal(ix_grammar_matcher_accept(m, id), IX_OK);
        assert_int_equal(ix_grammar_matcher_copy_state(m2, m), IX_OK);
    }
    ix_grammar_matcher_stats st;
    ix_grammar_matcher_get_stats(m, &st);
    assert_true(st.flushes > 10);
    assert_int_equal(st.mask_hits, 0);
    ix_grammar_matcher_get_stats(ref, &st);
    assert_int_equal(st.flushes, 0);
    free(a);
    free(b);
    ix_grammar_matcher_destroy(m);
    ix_grammar_matcher_destroy(m2);
    ix_grammar_matcher_destroy(ref);
    ix_grammar_destroy(g);
    free_tvocab(&t);
}

static void test_mask_cache_eviction(void **state) {
    (void)state;
    tvocab t = make_tvocab();
    ix_grammar *g = gp("root ::= [a-z]{0,40}");
    size_t nw = ix_grammar_vocab_mask_words(t.v);
    ix_grammar_matcher_params p = ix_grammar_matcher_default_params();
    p.mask_cache_bytes = 3 * nw * sizeof(uint32_t); /* three masks */
    ix_grammar_matcher *m;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_grammar_matcher_create(&m, g, t.v, &p, &err), IX_OK);
    uint32_t *mask = calloc(nw, sizeof *mask);
    for (int round = 0; round < 3; round++) {
        ix_grammar_matcher_reset(m);
        for (int i = 0; i < 10; i++) {
            assert_int_equal(ix_grammar_matcher_fill_mask(m, mask, nw), IX_OK);
            check_mask_brute(m, &t, mask);
            assert_int_equal(ix_grammar_matcher_accept(m, 'a'), IX_OK);
        }
    }
    ix_grammar_matcher_stats st;
    ix_grammar_matcher_get_stats(m, &st);
    assert_int_equal(st.mask_hits + st.mask_misses, 30);
    assert_true(st.mask_misses >= 28); /* 11 states through 3 slots, LRU: almost all miss */
    free(mask);
    ix_grammar_matcher_destroy(m);
    ix_grammar_destroy(g);
    free_tvocab(&t);
}

static void test_depth_and_ambiguity_limits(void **state) {
    (void)state;
    ix_grammar_vocab *v = gtest_byte_vocab();
    ix_grammar *g = gp("root ::= \"(\" root \")\" | \"x\"");
    ix_grammar_matcher_params p = ix_grammar_matcher_default_params();
    p.max_stack_depth = 8;
    ix_grammar_matcher *m;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_grammar_matcher_create(&m, g, v, &p, &err), IX_OK);
    int depth = 0;
    while (ix_grammar_matcher_accept(m, '(') == IX_OK) depth++;
    assert_true(depth >= 4 && depth < 8);
    assert_int_equal(ix_grammar_matcher_accept(m, 'x'), IX_OK);
    for (int i = 0; i < depth; i++) assert_int_equal(ix_grammar_matcher_accept(m, ')'), IX_OK);
    assert_true(ix_grammar_matcher_must_end(m));
    ix_grammar_matcher_destroy(m);
    p.max_stack_depth = 0;
    assert_int_equal(ix_grammar_matcher_create(&m, g, v, &p, &err), IX_ERR_INVALID);
    ix_grammar *deep = gp("root ::= a\na ::= b \"x\"\nb ::= c \"y\"\nc ::= \"z\"");
    p.max_stack_depth = 2;
    assert_int_equal(ix_grammar_matcher_create(&m, deep, v, &p, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cannot start within max_stack_depth 2"));
    ix_grammar_destroy(deep);
    ix_grammar_destroy(g);
    /* 5000 rules that all start alike: more parses alive than the matcher keeps */
    ix_buf b = {0};
    ix_buf_printf(&b, "root ::= r0");
    for (int i = 1; i < 5000; i++) ix_buf_printf(&b, " | r%d", i);
    ix_buf_printf(&b, "\n");
    for (int i = 0; i < 5000; i++) ix_buf_printf(&b, "r%d ::= \"a\" \"%d\"\n", i, i);
    g = gp(b.data);
    assert_int_equal(ix_grammar_matcher_create(&m, g, v, NULL, &err), IX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "too ambiguous"));
    ix_grammar_destroy(g);
    ix_buf_free(&b);
    ix_grammar_vocab_destroy(v);
}

static void test_vocab_errors(void **state) {
    (void)state;
    ix_grammar_vocab *v = (ix_grammar_vocab *)1;
    ix_errbuf err = {{0}};
    ix_str b[2] = {{"a", 1}, {"b", 1}};
    ix_token bad = 2;
    assert_int_equal(ix_grammar_vocab_create_from_bytes(&v, b, 0, NULL, 0, &err), IX_ERR_INVALID);
    assert_int_equal(ix_grammar_vocab_create_from_bytes(&v, b, 2, &bad, 1, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(ix_grammar_vocab_create_from_bytes(&v, b, 2, NULL, 0, &err), IX_OK);
    assert_int_equal(ix_grammar_vocab_n_vocab(v), 2);
    assert_int_equal(ix_grammar_vocab_mask_words(v), 1);
    ix_grammar_vocab_destroy(v);
    ix_grammar_vocab_destroy(NULL);
    ix_grammar_destroy(NULL);
    ix_grammar_matcher_destroy(NULL);
}

/* Every allocation failing in turn: a status, never a crash or a leak. */
static void test_out_of_memory(void **state) {
    (void)state;
    tvocab t = make_tvocab();
    size_t nw = ix_grammar_vocab_mask_words(t.v);
    uint32_t *mask = calloc(nw, sizeof *mask);
    int ok_at = -1;
    for (long n = 0; n < 100000 && ok_at < 0; n++) {
        size_t live = ix_mem_live_count();
        ix_mem_fail_after(n);
        ix_grammar *g = NULL;
        ix_grammar_matcher *m = NULL, *c = NULL;
        ix_errbuf err = {{0}};
        ix_status s = ix_grammar_parse(&g, k_json_gbnf, strlen(k_json_gbnf), &err);
        if (s == IX_OK) s = ix_grammar_matcher_create(&m, g, t.v, NULL, &err);
        if (s == IX_OK) s = ix_grammar_matcher_clone(&c, m);
        if (s == IX_OK) s = ix_grammar_matcher_accept_bytes(m, "{\"a\": [tru", 10);
        if (s == IX_OK) s = ix_grammar_matcher_fill_mask(m, mask, nw);
        if (s == IX_OK) s = ix_grammar_matcher_fill_mask(c, mask, nw);
        bool failed = ix_mem_failed_count() > 0;
        ix_mem_fail_reset();
        if (s == IX_OK && !failed) ok_at = (int)n;
        else if (s != IX_OK && s != IX_ERR_NOMEM)
            fail_msg("allocation %ld failing: %s (%s)", n, ix_status_name(s), err.msg);
        ix_grammar_matcher_destroy(c);
        ix_grammar_matcher_destroy(m);
        ix_grammar_destroy(g);
        assert_int_equal(ix_mem_live_count(), live);
    }
    assert_true(ok_at > 10);
    /* vocabularies too */
    ok_at = -1;
    for (long n = 0; n < 1000 && ok_at < 0; n++) {
        size_t live = ix_mem_live_count();
        ix_mem_fail_after(n);
        ix_grammar_vocab *v = NULL;
        ix_status s = ix_grammar_vocab_create_from_bytes(&v, t.bytes, t.n, NULL, 0, NULL);
        bool failed = ix_mem_failed_count() > 0;
        ix_mem_fail_reset();
        if (s == IX_OK && !failed) ok_at = (int)n;
        else assert_true(s == IX_OK || s == IX_ERR_NOMEM);
        ix_grammar_vocab_destroy(v);
        assert_int_equal(ix_mem_live_count(), live);
    }
    assert_true(ok_at > 0);
    free(mask);
    free_tvocab(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_match),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_utf8_classes),
        cmocka_unit_test(test_masks_brute_force),
        cmocka_unit_test(test_end_of_generation),
        cmocka_unit_test(test_complete_bytes),
        cmocka_unit_test(test_clone_and_copy),
        cmocka_unit_test(test_flush),
        cmocka_unit_test(test_mask_cache_eviction),
        cmocka_unit_test(test_depth_and_ambiguity_limits),
        cmocka_unit_test(test_vocab_errors),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
