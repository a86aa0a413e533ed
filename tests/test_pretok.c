/* pretok: the tokenizer.ggml.pre name table, each family's split rules on
 * hand-checked cases (llama.cpp's quirks included), the coverage invariants on
 * the shared vocab test inputs, linear work on pathological inputs, allocation
 * failure, and the UTF-8 / category helpers of unicode.c.
 *
 * The expected splits were worked out by hand from llama.cpp's rules and
 * cross-checked against an emulation of llama.cpp's unicode_regex_split (and,
 * for gpt-2, falcon and starcoder, against the token ids in the shared .out
 * files after BPE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/pretok.h"

/* ---- helpers ----------------------------------------------------------- */

/* Spans from v->v[first] on cover text[0..len) in order, each non-empty;
 * with `utf8`, each also starts on a code point boundary. */
static void assert_covers_(const char *text, size_t len, const ix__span_vec *v, size_t first,
                           bool utf8) {
    size_t off = 0;
    for (size_t i = first; i < v->n; i++) {
        assert_int_equal(v->v[i].off, off);
        assert_true(v->v[i].len > 0);
        assert_true(v->v[i].off + v->v[i].len <= len);
        if (utf8) assert_true(((unsigned char)text[off] & 0xC0) != 0x80);
        off += v->v[i].len;
    }
    assert_int_equal(off, len);
}

static void assert_covers(const char *text, size_t len, const ix__span_vec *v, size_t first) {
    assert_covers_(text, len, v, first, true);
}

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
            print_error("%c", c);
        } else {
            print_error("\\x%02X", c);
        }
    }
}

typedef struct split_case {
    ix__pretok_kind kind;
    const char *text;
    const char *want[8]; /* NULL-terminated */
} split_case;

/* Splits c->text and compares the words with c->want; prints both on a
 * mismatch so that a failure says what went wrong. */
static void check_case(const split_case *c) {
    size_t len = strlen(c->text);
    ix__span_vec v = {0};
    assert_int_equal(ix__pretok_split(c->kind, c->text, len, &v), IX_OK);
    assert_covers(c->text, len, &v, 0);
    size_t n_want = 0;
    while (c->want[n_want])
        n_want++;
    bool same = v.n == n_want;
    for (size_t i = 0; same && i < n_want; i++)
        same = v.v[i].len == strlen(c->want[i]) &&
               memcmp(c->text + v.v[i].off, c->want[i], v.v[i].len) == 0;
    if (!same) {
        print_error("%s: \"", ix__pretok_kind_name(c->kind));
        print_escaped(c->text, len);
        print_error("\"\n  want:");
        for (size_t i = 0; i < n_want; i++) {
            print_error(" \"");
            print_escaped(c->want[i], strlen(c->want[i]));
            print_error("\"");
        }
        print_error("\n  got: ");
        for (size_t i = 0; i < v.n; i++) {
            print_error(" \"");
            print_escaped(c->text + v.v[i].off, v.v[i].len);
            print_error("\"");
        }
        print_error("\n");
    }
    ix__span_vec_free(&v);
    assert_true(same);
}

/* ---- names ------------------------------------------------------------- */

static void test_names(void **state) {
    (void)state;
    /* kind, and the defaults llama.cpp's load gives the name */
    enum { C = IX__PRE_CLEAN_SPACES, L3 = IX__PRE_ADD_BOS | IX__PRE_IGNORE_MERGES | C };
    static const struct {
        const char *name;
        ix__pretok_kind kind;
        unsigned defaults;
    } known[] = {
        {"default", IX__PRETOK_DEFAULT, C},
        {"gpt-2", IX__PRETOK_GPT2, C},
        {"gpt2", IX__PRETOK_GPT2, C},
        {"mpt", IX__PRETOK_GPT2, C},
        {"olmo", IX__PRETOK_GPT2, C},
        {"phi-2", IX__PRETOK_GPT2, C},
        {"jina-v2-es", IX__PRETOK_GPT2, C},
        {"jina-v1-en", IX__PRETOK_GPT2, C},
        {"roberta-bpe", IX__PRETOK_GPT2, C},
        {"trillion", IX__PRETOK_GPT2, 0},
        {"granite-docling", IX__PRETOK_GPT2, 0},
        {"llama3", IX__PRETOK_LLAMA3, L3},
        {"llama-bpe", IX__PRETOK_LLAMA3, L3},
        {"llama-v3", IX__PRETOK_LLAMA3, L3},
        {"falcon-h1", IX__PRETOK_LLAMA3, L3},
        {"jina-v5-nano", IX__PRETOK_LLAMA3, L3},
        {"smaug-bpe", IX__PRETOK_LLAMA3, C},
        {"dbrx", IX__PRETOK_LLAMA3, C},
        {"falcon3", IX__PRETOK_LLAMA3, L3},
        {"chatglm-bpe", IX__PRETOK_LLAMA3, C | IX__PRE_NO_BOS_ID},
        {"glm4", IX__PRETOK_LLAMA3, C | IX__PRE_NO_BOS_ID},
        {"qwen2", IX__PRETOK_QWEN2, 0},
        {"stablelm2", IX__PRETOK_QWEN2, C},
        {"deepseek-r1-qwen", IX__PRETOK_QWEN2, 0},
        {"megrez", IX__PRETOK_QWEN2, C},
        {"grok-2", IX__PRETOK_QWEN2, 0},
        {"deepseek-llm", IX__PRETOK_DEEPSEEK_LLM, 0},
        {"deepseek-coder", IX__PRETOK_DEEPSEEK_CODER, 0},
        {"falcon", IX__PRETOK_FALCON, C},
        {"starcoder", IX__PRETOK_STARCODER, C},
        {"refact", IX__PRETOK_STARCODER, C},
        {"smollm", IX__PRETOK_STARCODER, 0},
        {"codeshell", IX__PRETOK_STARCODER, C},
        {"command-r", IX__PRETOK_STARCODER, 0},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(known); i++) {
        ix__pretok_kind k = IX__PRETOK_COUNT;
        unsigned defaults = ~0u;
        assert_int_equal(ix__pretok_from_name(known[i].name, strlen(known[i].name), &k, &defaults),
                         IX_OK);
        assert_int_equal(k, known[i].kind);
        if (defaults != known[i].defaults)
            fail_msg("%s: defaults %#x, want %#x", known[i].name, defaults, known[i].defaults);
    }
    /* llama.cpp names whose rules are none of ours, near misses, other case */
    static const char *const unknown[] = {
        "GPT-2",       "gpt-",   "llama",   "llama3 ",  "jais-2",     "laguna", "seed-coder",
        "bailingmoe",  "gpt-4o", "tekken",  "viking",   "poro-chat",  "bloom",  "chameleon",
        "deepseek-v3", "qwen35", "kimi-k2", "ufakzeka", "whitespace", "gemma4",
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(unknown); i++) {
        ix__pretok_kind k = IX__PRETOK_COUNT;
        assert_int_equal(ix__pretok_from_name(unknown[i], strlen(unknown[i]), &k, NULL),
                         IX_ERR_UNSUPPORTED);
        assert_int_equal(k, IX__PRETOK_COUNT);
    }
    /* length-delimited, as GGUF strings are */
    ix__pretok_kind k;
    unsigned defaults = 0;
    assert_int_equal(ix__pretok_from_name("gpt-2xyz", 5, &k, NULL), IX_OK);
    assert_int_equal(k, IX__PRETOK_GPT2);
    assert_int_equal(ix__pretok_from_name("qwen2", 4, &k, NULL), IX_ERR_UNSUPPORTED);
    assert_int_equal(ix__pretok_from_name(NULL, 0, &k, &defaults), IX_OK);
    assert_int_equal(k, IX__PRETOK_DEFAULT);
    assert_int_equal(defaults, IX__PRE_CLEAN_SPACES);
    assert_int_equal(ix__pretok_from_name(NULL, 3, &k, NULL), IX_ERR_INVALID);
    assert_int_equal(ix__pretok_from_name("gpt-2", 5, NULL, NULL), IX_ERR_INVALID);

    for (int i = 0; i < IX__PRETOK_COUNT; i++) {
        const char *name = ix__pretok_kind_name((ix__pretok_kind)i);
        assert_non_null(name);
        assert_string_not_equal(name, "unknown");
        for (int j = 0; j < i; j++)
            assert_string_not_equal(name, ix__pretok_kind_name((ix__pretok_kind)j));
    }
    assert_string_equal(ix__pretok_kind_name(IX__PRETOK_COUNT), "unknown");
}

/* ---- split rules ------------------------------------------------------- */

/* clang-format off */
static const split_case k_cases[] = {
    /* gpt2: a space joins the next word; a whitespace run before a word leaves
     * it its last space, a run at the end stays whole; categories by utf8proc */
    {IX__PRETOK_GPT2, u8"Hello world", {u8"Hello", u8" world"}},
    {IX__PRETOK_GPT2, u8"   Hello", {u8"  ", u8" Hello"}},
    {IX__PRETOK_GPT2, u8"  \n\n  x", {u8"  \n\n ", u8" x"}},
    {IX__PRETOK_GPT2, u8"Hello  ", {u8"Hello", u8"  "}},
    {IX__PRETOK_GPT2, u8"a \t", {u8"a", u8" \t"}},
    {IX__PRETOK_GPT2, u8"I'm DON'T", {u8"I", u8"'m", u8" DON", u8"'", u8"T"}},
    {IX__PRETOK_GPT2, u8"we're they'll it's", {u8"we", u8"'re", u8" they", u8"'ll", u8" it", u8"'s"}},
    {IX__PRETOK_GPT2, u8"12345 678", {u8"12345", u8" 678"}},
    {IX__PRETOK_GPT2, u8"3.14", {u8"3", u8".", u8"14"}},
    {IX__PRETOK_GPT2, u8"Hello, world!", {u8"Hello", u8",", u8" world", u8"!"}},
    {IX__PRETOK_GPT2, u8"a  !!", {u8"a", u8" ", u8" !!"}},
    {IX__PRETOK_GPT2, u8"\t\tx", {u8"\t", u8"\t", u8"x"}},
    {IX__PRETOK_GPT2, u8"e\u0301 \u0301x", {u8"e", u8"\u0301", u8" \u0301", u8"x"}},
    {IX__PRETOK_GPT2, u8"\u00E9t\u00E9", {u8"\u00E9t\u00E9"}},
    {IX__PRETOK_GPT2, u8"\U0001F680 (normal)", {u8"\U0001F680", u8" (", u8"normal", u8")"}},
    {IX__PRETOK_GPT2, u8"\U0001F636\u200D\U0001F32B\uFE0F ok", {u8"\U0001F636\u200D\U0001F32B\uFE0F", u8" ok"}},
    {IX__PRETOK_GPT2, u8"a\u0378b \uE000\uE000x", {u8"a", u8"\u0378", u8"b", u8" \uE000\uE000", u8"x"}},
    {IX__PRETOK_GPT2, u8"a\u3000b", {u8"a", u8"\u3000", u8"b"}},
    {IX__PRETOK_GPT2, u8"a\u00A0\u00A0b", {u8"a", u8"\u00A0", u8"\u00A0", u8"b"}},
    {IX__PRETOK_GPT2, u8"a\x1C\x1C" u8"b", {u8"a", u8"\x1C\x1C", u8"b"}},
    {IX__PRETOK_GPT2, u8"a\xC2\x85" u8"b", {u8"a", u8"\xC2\x85", u8"b"}},
    {IX__PRETOK_GPT2, u8"'", {u8"'"}},
    {IX__PRETOK_GPT2, u8" ", {u8" "}},
    /* llama3: contractions in either case, digits by three, \s*[\r\n]+, any
     * one non-letter (not \r \n or a digit) leads a word */
    {IX__PRETOK_LLAMA3, u8"12345", {u8"123", u8"45"}},
    {IX__PRETOK_LLAMA3, u8"1234567", {u8"123", u8"456", u8"7"}},
    {IX__PRETOK_LLAMA3, u8"I'm DON'T", {u8"I", u8"'m", u8" DON", u8"'T"}},
    {IX__PRETOK_LLAMA3, u8"WE'RE YOU'LL", {u8"WE", u8"'RE", u8" YOU", u8"'LL"}},
    {IX__PRETOK_LLAMA3, u8"   Hello", {u8"  ", u8" Hello"}},
    {IX__PRETOK_LLAMA3, u8"  \n\n  x", {u8"  \n\n", u8" ", u8" x"}},
    {IX__PRETOK_LLAMA3, u8"hello\n\nworld", {u8"hello", u8"\n\n", u8"world"}},
    {IX__PRETOK_LLAMA3, u8"!!\n\nfoo", {u8"!!\n\n", u8"foo"}},
    {IX__PRETOK_LLAMA3, u8" ...\n", {u8" ...\n"}},
    {IX__PRETOK_LLAMA3, u8"$x \tHello", {u8"$x", u8" ", u8"\tHello"}},
    {IX__PRETOK_LLAMA3, u8"1a a1", {u8"1", u8"a", u8" a", u8"1"}},
    {IX__PRETOK_LLAMA3, u8"x  ", {u8"x", u8"  "}},
    {IX__PRETOK_LLAMA3, u8"x ", {u8"x", u8" "}},
    {IX__PRETOK_LLAMA3, u8"\u0663\u0664\u0665\u0666", {u8"\u0663\u0664\u0665", u8"\u0666"}},
    {IX__PRETOK_LLAMA3, u8"\u00B2\u00B3\u2074\u2075", {u8"\u00B2\u00B3\u2074", u8"\u2075"}},
    {IX__PRETOK_LLAMA3, u8"a\u3000b", {u8"a", u8"\u3000b"}},
    /* qwen2: llama3 with one digit at a time */
    {IX__PRETOK_QWEN2, u8"12345", {u8"1", u8"2", u8"3", u8"4", u8"5"}},
    {IX__PRETOK_QWEN2, u8"I'm DON'T", {u8"I", u8"'m", u8" DON", u8"'T"}},
    {IX__PRETOK_QWEN2, u8"a1b2 34", {u8"a", u8"1", u8"b", u8"2", u8" ", u8"3", u8"4"}},
    {IX__PRETOK_QWEN2, u8"  \n\n  x", {u8"  \n\n", u8" ", u8" x"}},
    /* deepseek-llm: [\r\n] | \s?[cased letters]+ | \s?[ASCII/fullwidth punct]+ |
     * \s+$ | [CJK ranges]+ | \p{N}+. [\u0800-\u4E00] also isolates Greek
     * Extended and letterlike symbols; non-ASCII whitespace is in no range */
    {IX__PRETOK_DEEPSEEK_LLM, u8"Hello world\n", {u8"Hello", u8" world", u8"\n"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"\u4F60\u597D\u4E16\u754C", {u8"\u4F60\u597D\u4E16\u754C"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"Hello \u4F60\u597D 123", {u8"Hello", u8" ", u8"\u4F60\u597D", u8" ", u8"123"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"a\u3000b", {u8"a", u8"\u3000b"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"\u4E00\u3000\u4E8C", {u8"\u4E00", u8"\u3000", u8"\u4E8C"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"\u4F60\u597D\u3001\u4E16\u754C\u3002", {u8"\u4F60\u597D", u8"\u3001", u8"\u4E16\u754C", u8"\u3002"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"ab  ", {u8"ab", u8"  "}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"a  b", {u8"a", u8" ", u8" b"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"\u2126\u212A \u1F7Dx", {u8"\u2126\u212A", u8" ", u8"\u1F7D", u8"x"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"\u041F\u0440\u0438\u0432\u0435\u0442 \u043C\u0438\u0440", {u8"\u041F\u0440\u0438\u0432\u0435\u0442", u8" \u043C\u0438\u0440"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"abc123def", {u8"abc", u8"123", u8"def"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"3.14", {u8"3", u8".", u8"14"}},
    {IX__PRETOK_DEEPSEEK_LLM, u8"\u00E9\u0561", {u8"\u00E9", u8"\u0561"}},
    /* deepseek-coder: [\r\n] | \s?\p{L}+ | \s?\p{P}+ | [CJK ranges]+ | \p{N};
     * + and = are \p{S}, so no rule takes them */
    {IX__PRETOK_DEEPSEEK_CODER, u8"12345", {u8"1", u8"2", u8"3", u8"4", u8"5"}},
    {IX__PRETOK_DEEPSEEK_CODER, u8"foo(bar)", {u8"foo", u8"(", u8"bar", u8")"}},
    {IX__PRETOK_DEEPSEEK_CODER, u8" \u4F60\u597D a", {u8" ", u8"\u4F60\u597D", u8" a"}},
    {IX__PRETOK_DEEPSEEK_CODER, u8"a\n\nb", {u8"a", u8"\n", u8"\n", u8"b"}},
    {IX__PRETOK_DEEPSEEK_CODER, u8"x += 1", {u8"x", u8" += ", u8"1"}},
    /* falcon: punctuation and $+<=>^~|` runs first (so no contractions), gpt2,
     * then ASCII digits by three */
    {IX__PRETOK_FALCON, u8"Hello, world!", {u8"Hello", u8",", u8" world", u8"!"}},
    {IX__PRETOK_FALCON, u8"I'm", {u8"I", u8"'", u8"m"}},
    {IX__PRETOK_FALCON, u8"1234567", {u8"123", u8"456", u8"7"}},
    {IX__PRETOK_FALCON, u8" 1234", {u8" ", u8"123", u8"4"}},
    {IX__PRETOK_FALCON, u8"a+b=c", {u8"a", u8"+", u8"b", u8"=", u8"c"}},
    {IX__PRETOK_FALCON, u8"a`.", {u8"a", u8"`."}},
    {IX__PRETOK_FALCON, u8"\u0663\u0664\u0665\u0666", {u8"\u0663\u0664\u0665\u0666"}},
    /* starcoder: single digits, then gpt2 */
    {IX__PRETOK_STARCODER, u8"12345", {u8"1", u8"2", u8"3", u8"4", u8"5"}},
    {IX__PRETOK_STARCODER, u8"a1b 42", {u8"a", u8"1", u8"b", u8" ", u8"4", u8"2"}},
    {IX__PRETOK_STARCODER, u8"I'm", {u8"I", u8"'m"}},
    /* default: as falcon without the backtick, and \p{N}+ before the triples */
    {IX__PRETOK_DEFAULT, u8"Hello, world!", {u8"Hello", u8",", u8" world", u8"!"}},
    {IX__PRETOK_DEFAULT, u8" 12345", {u8" ", u8"123", u8"45"}},
    {IX__PRETOK_DEFAULT, u8"a`.", {u8"a", u8"`", u8"."}},
};
/* clang-format on */

static void test_split_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_cases); i++)
        check_case(&k_cases[i]);
}

static void test_empty_and_args(void **state) {
    (void)state;
    for (int k = 0; k < IX__PRETOK_COUNT; k++) {
        ix__span_vec v = {0};
        uint64_t steps = 99;
        assert_int_equal(ix__pretok_split_ex((ix__pretok_kind)k, "", 0, &v, &steps), IX_OK);
        assert_int_equal(v.n, 0);
        assert_int_equal(steps, 0);
        assert_int_equal(ix__pretok_split((ix__pretok_kind)k, NULL, 0, &v), IX_OK);
        assert_int_equal(v.n, 0);
        ix__span_vec_free(&v);
    }
    ix__span_vec v = {0};
    assert_int_equal(ix__pretok_split(IX__PRETOK_COUNT, "a", 1, &v), IX_ERR_INVALID);
    assert_int_equal(ix__pretok_split((ix__pretok_kind)-1, "a", 1, &v), IX_ERR_INVALID);
    assert_int_equal(ix__pretok_split(IX__PRETOK_GPT2, NULL, 1, &v), IX_ERR_INVALID);
    assert_int_equal(ix__pretok_split(IX__PRETOK_GPT2, "a", 1, NULL), IX_ERR_INVALID);
    ix__span_vec_free(&v);
    ix__span_vec_free(&v); /* twice: it resets the vector */
    ix__span_vec_free(NULL);
}

/* Words are appended after what the vector holds, with offsets into the new
 * text. */
static void test_append(void **state) {
    (void)state;
    ix__span_vec v = {0};
    const char *a = "Hello world", *b = "  x";
    assert_int_equal(ix__pretok_split(IX__PRETOK_GPT2, a, strlen(a), &v), IX_OK);
    size_t n_a = v.n;
    assert_int_equal(ix__pretok_split(IX__PRETOK_GPT2, b, strlen(b), &v), IX_OK);
    assert_int_equal(n_a, 2);
    assert_covers(b, strlen(b), &v, n_a);
    assert_int_equal(v.n, n_a + 2);
    ix__span_vec_free(&v);
}

/* The caller promises valid UTF-8, but a bad byte must still cost one code
 * point (U+FFFD) and never a read past the end: random bytes, every kind. */
static void test_invalid_utf8(void **state) {
    (void)state;
    static const unsigned char bias[] = {' ',  '\n', '\'', 's',  '1',  'a',  '!',  0x80, 0xBF,
                                         0xC3, 0xE4, 0xED, 0xF0, 0xF4, 0xFF, 0xB8, 0xA0, 0x9F};
    uint32_t seed = 12345;
    ix__span_vec v = {0};
    for (int iter = 0; iter < 2000; iter++) {
        char text[64];
        size_t len = (size_t)(iter % 64);
        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            unsigned r = seed >> 16;
            text[i] = (char)(r & 1 ? bias[(r >> 1) % sizeof bias] : (unsigned char)(r >> 8));
        }
        /* an exact-size heap copy, so that ASan sees any read past the end */
        char *heap = malloc(len ? len : 1);
        assert_non_null(heap);
        memcpy(heap, text, len);
        for (int k = 0; k < IX__PRETOK_COUNT; k++) {
            v.n = 0;
            assert_int_equal(ix__pretok_split((ix__pretok_kind)k, heap, len, &v), IX_OK);
            assert_covers_(heap, len, &v, 0, false);
        }
        free(heap);
    }
    ix__span_vec_free(&v);
}

/* ---- shared vocab inputs ----------------------------------------------- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            char *p = realloc(buf, cap);
            assert_non_null(p);
            buf = p;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* Every kind on every test input of the shared vocab/ *.inp files (inputs are
 * separated by "\n__ggml_vocab_test__\n") and on each file as one text. The
 * token ids need the BPE merges, so this checks the invariants only. */
static void test_vocab_inputs(void **state) {
    (void)state;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char dir_path[1024];
    snprintf(dir_path, sizeof dir_path, "%s/vocab", IX_SHARED_DIR);
    DIR *dir = opendir(dir_path);
    if (!dir) skip();
    size_t n_files = 0, n_inputs = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 4 || strcmp(de->d_name + nl - 4, ".inp") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir_path, de->d_name);
        size_t len = 0;
        char *text = read_file(path, &len);
        assert_non_null(text);
        n_files++;
        for (int k = 0; k < IX__PRETOK_COUNT; k++) {
            ix__span_vec v = {0};
            assert_int_equal(ix__pretok_split((ix__pretok_kind)k, text, len, &v), IX_OK);
            assert_covers(text, len, &v, 0);
            size_t start = 0;
            while (start <= len) {
                const char *end = memmem(text + start, len - start, sep, sizeof sep - 1);
                size_t n = end ? (size_t)(end - (text + start)) : len - start;
                v.n = 0;
                assert_int_equal(ix__pretok_split((ix__pretok_kind)k, text + start, n, &v), IX_OK);
                assert_covers(text + start, n, &v, 0);
                if (k == 0) n_inputs++;
                if (!end) break;
                start += n + sizeof sep - 1;
            }
            ix__span_vec_free(&v);
        }
        free(text);
    }
    closedir(dir);
    if (n_files == 0) skip();
    assert_true(n_inputs > 40);
}

/* ---- linear work ------------------------------------------------------- */

static char *repeat(const char *unit, size_t n_bytes) {
    size_t u = strlen(unit);
    char *s = malloc(n_bytes);
    assert_non_null(s);
    for (size_t i = 0; i + u <= n_bytes; i += u)
        memcpy(s + i, unit, u);
    return s;
}

/* Code point reads of splitting text[0..n) with kind k, followed by an 'x'
 * when `x` (text has room for it; the byte is restored); v is reused so that
 * first-touching fresh memory does not dominate the run time. */
static uint64_t reads_of(ix__pretok_kind k, char *text, size_t n, bool x, ix__span_vec *v) {
    uint64_t steps = 0;
    char saved = text[n];
    if (x) text[n] = 'x';
    v->n = 0;
    assert_int_equal(ix__pretok_split_ex(k, text, n + x, v, &steps), IX_OK);
    assert_covers(text, n + x, v, 0);
    text[n] = saved;
    return steps;
}

/* At most a few reads per byte, and the same per byte at n_small and n_big. */
static void check_linear(ix__pretok_kind k, const char *what, uint64_t r_small, size_t n_small,
                         uint64_t r_big, size_t n_big) {
    if (r_big > 10 * (uint64_t)n_big || r_big * n_small > r_small * n_big * 11 / 10 ||
        r_big * n_small * 11 / 10 < r_small * n_big) {
        print_error("%s on %s: %llu reads for %zu bytes but %llu for %zu\n",
                    ix__pretok_kind_name(k), what, (unsigned long long)r_small, n_small,
                    (unsigned long long)r_big, n_big);
        fail();
    }
}

/* Long runs of one kind of character, and the alternations that make naive
 * regex engines backtrack (\s+(?!\S), \s+$, " ?x"), alone and followed by an
 * 'x', must cost the same per byte at 4 KB and 16 KB (so that a quadratic path
 * fails fast instead of running into the test timeout), then at 256 KB and
 * 1 MB. We count code point reads, not time. */
static void test_linear(void **state) {
    (void)state;
    static const char *const units[] = {
        "a",
        " ",
        "\n",
        "1",
        "!",
        "'",
        " a",
        "a ",
        "\t ",
        " \n",
        "'s",
        "1 ",
        " !",
        "\xE4\xB8\x80" /* 一 */,
        "\xE3\x80\x80" /* U+3000 */,
        "\xC2\xA0",
        "e\xCC\x81",
        "\xF0\x9F\x9A\x80" /* 🚀 */,
        "a1",
        " \xE4\xB8\x80",
    };
    static const size_t sizes[][2] = {{4 << 10, 16 << 10}, {256 << 10, 1 << 20}};
    ix__span_vec v = {0};
    uint64_t worst = 0;
    for (size_t u = 0; u < IX_ARRAY_LEN(units); u++) {
        size_t ul = strlen(units[u]);
        char *text = repeat(units[u], (1 << 20) + ul);
        for (size_t z = 0; z < IX_ARRAY_LEN(sizes); z++) {
            size_t n_small = sizes[z][0] / ul * ul, n_big = sizes[z][1] / ul * ul;
            for (int k = 0; k < IX__PRETOK_COUNT; k++) {
                ix__pretok_kind kind = (ix__pretok_kind)k;
                for (int x = 0; x < 2; x++) {
                    uint64_t r_small = reads_of(kind, text, n_small, x, &v);
                    uint64_t r_big = reads_of(kind, text, n_big, x, &v);
                    char what[64];
                    snprintf(what, sizeof what, "unit %zu%s", u, x ? " + x" : "");
                    check_linear(kind, what, r_small, n_small, r_big, n_big);
                    if (r_big * 100 / n_big > worst) worst = r_big * 100 / n_big;
                }
            }
        }
        free(text);
    }
    ix__span_vec_free(&v);
    print_message("worst case: %.2f code point reads per byte\n", worst / 100.0);
}

/* 8 MB of one long run of letters, spaces, digits or punctuation: the same
 * reads per byte as 1 MB of it. */
static void test_linear_8mb(void **state) {
    (void)state;
    static const char units[] = "a 1!"; /* each followed by an x */
    const size_t small = (size_t)1 << 20, big = (size_t)8 << 20;
    ix__span_vec v = {0};
    char *text = malloc(big);
    assert_non_null(text);
    for (size_t u = 0; u < sizeof units - 1; u++) {
        memset(text, units[u], big);
        for (int k = 0; k < IX__PRETOK_COUNT; k++) {
            ix__pretok_kind kind = (ix__pretok_kind)k;
            char what[32];
            snprintf(what, sizeof what, "'%c' x 8 MB", units[u]);
            /* fail fast, as test_linear does, before a quadratic path could hang */
            check_linear(kind, what, reads_of(kind, text, 4095, true, &v), 4096,
                         reads_of(kind, text, 16383, true, &v), 16384);
            uint64_t t0 = ix_time_ns();
            uint64_t r_small = reads_of(kind, text, small - 1, true, &v);
            uint64_t t1 = ix_time_ns();
            uint64_t r_big = reads_of(kind, text, big - 1, true, &v);
            uint64_t t2 = ix_time_ns();
            check_linear(kind, what, r_small, small, r_big, big);
            /* wall time is only reported: the reads above are the check */
            if (u == 0 && k == IX__PRETOK_DEEPSEEK_LLM)
                print_message("deepseek-llm, 1 MB: %.1f ms, 8 MB: %.1f ms\n", (t1 - t0) / 1e6,
                              (t2 - t1) / 1e6);
        }
    }
    free(text);
    ix__span_vec_free(&v);
}

/* ---- allocation failure ------------------------------------------------ */

/* Every allocation in turn fails: the split reports IX_ERR_NOMEM, leaves the
 * words it had before, and leaks nothing. */
static void test_nomem(void **state) {
    (void)state;
    char text[4096];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "ab 1,\n"[i % 6];
    size_t live0 = ix_mem_live_count();
    bool done = false;
    for (long n = 0; !done && n < 64; n++) {
        ix__span_vec v = {0};
        v.v = ix_malloc(sizeof *v.v);
        assert_non_null(v.v);
        v.v[0] = (ix__span){7, 7};
        v.n = v.cap = 1;
        ix_mem_fail_after(n);
        ix_status s = ix__pretok_split(IX__PRETOK_LLAMA3, text, sizeof text, &v);
        ix_mem_fail_reset();
        if (s == IX_OK) {
            done = true;
            assert_covers(text, sizeof text, &v, 1);
        } else {
            assert_int_equal(s, IX_ERR_NOMEM);
            assert_int_equal(v.n, 1);
            assert_int_equal(v.v[0].off, 7);
        }
        ix__span_vec_free(&v);
        assert_int_equal(ix_mem_live_count(), live0);
    }
    assert_true(done);
}

/* ---- unicode helpers --------------------------------------------------- */

static void test_utf8(void **state) {
    (void)state;
    char buf[4];
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        size_t n = ix__utf8_encode(cp, buf), m = 0;
        assert_int_equal(n, cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);
        assert_int_equal(ix__utf8_len((unsigned char)buf[0]), n);
        if (ix__utf8_decode(buf, n, &m) != cp) fail_msg("U+%04X does not round-trip", (unsigned)cp);
        assert_int_equal(m, n);
    }
    static const struct {
        const char *s;
        size_t len;
    } bad[] = {
        {"\x80", 1},
        {"\xBF", 1},
        {"\xC0\x80", 2},
        {"\xC1\xBF", 2},
        {"\xE0\x80\x80", 3},
        {"\xE0\x9F\xBF", 3},
        {"\xED\xA0\x80", 3},
        {"\xF0\x80\x80\x80", 4},
        {"\xF4\x90\x80\x80", 4},
        {"\xF5\x80\x80\x80", 4},
        {"\xFF", 1},
        {"\xE4\xB8", 2},
        {"\xC3", 1},
        {"\xC3(", 2},
        {"\xF0\x9F\x9A", 3},
        {"\xE4\xB8(", 3},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(bad); i++) {
        size_t m = 0;
        assert_int_equal(ix__utf8_decode(bad[i].s, bad[i].len, &m), 0xFFFD);
        assert_int_equal(m, 1);
    }
    assert_int_equal(ix__utf8_len(0x80), 1);
    assert_int_equal(ix__utf8_len(0xC1), 1);
    assert_int_equal(ix__utf8_len(0xF5), 1);
    assert_int_equal(ix__utf8_encode(0xD800, buf), 3);
    assert_memory_equal(buf, "\xEF\xBF\xBD", 3);
    assert_int_equal(ix__utf8_encode(0x110000, buf), 3);
    assert_memory_equal(buf, "\xEF\xBF\xBD", 3);
}

static bool is_white_space(uint32_t cp) {
    static const uint32_t ws[] = {0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,
                                  0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004,
                                  0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
                                  0x2029, 0x202F, 0x205F, 0x3000};
    for (size_t i = 0; i < IX_ARRAY_LEN(ws); i++)
        if (ws[i] == cp) return true;
    return false;
}

/* The flags agree with utf8proc's general category for every code point (this
 * also checks the ASCII table), and \s is exactly White_Space. */
static void test_cp_flags(void **state) {
    (void)state;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        unsigned want;
        switch (utf8proc_category((utf8proc_int32_t)cp)) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO: want = IX__CP_LETTER; break;
        case UTF8PROC_CATEGORY_MN:
        case UTF8PROC_CATEGORY_MC:
        case UTF8PROC_CATEGORY_ME: want = IX__CP_MARK; break;
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO: want = IX__CP_NUMBER; break;
        case UTF8PROC_CATEGORY_PC:
        case UTF8PROC_CATEGORY_PD:
        case UTF8PROC_CATEGORY_PS:
        case UTF8PROC_CATEGORY_PE:
        case UTF8PROC_CATEGORY_PI:
        case UTF8PROC_CATEGORY_PF:
        case UTF8PROC_CATEGORY_PO: want = IX__CP_PUNCT; break;
        case UTF8PROC_CATEGORY_SM:
        case UTF8PROC_CATEGORY_SC:
        case UTF8PROC_CATEGORY_SK:
        case UTF8PROC_CATEGORY_SO: want = IX__CP_SYMBOL; break;
        case UTF8PROC_CATEGORY_ZS:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP: want = 0; break;
        default: want = IX__CP_CONTROL; break;
        }
        if (is_white_space(cp)) want |= IX__CP_WHITESPACE;
        if (ix__cp_flags(cp) != want)
            fail_msg("U+%04X: flags %#x, want %#x", (unsigned)cp, ix__cp_flags(cp), want);
    }
    assert_int_equal(ix__cp_flags(0x1C),
                     IX__CP_CONTROL); /* str.isspace() says yes; White_Space no */
    assert_int_equal(ix__cp_flags(0x85), IX__CP_CONTROL | IX__CP_WHITESPACE);
    assert_int_equal(ix__cp_flags(0x3000), IX__CP_WHITESPACE);
    assert_int_equal(ix__cp_flags(0x200B), IX__CP_CONTROL); /* zero width space: Cf */
    assert_int_equal(ix__cp_flags(0x180E), IX__CP_CONTROL); /* no longer White_Space */
    assert_int_equal(ix__cp_flags(0x0378), IX__CP_CONTROL); /* unassigned */
    assert_int_equal(ix__cp_flags(0xE000), IX__CP_CONTROL); /* private use */
    assert_int_equal(ix__cp_flags(0x110000), IX__CP_CONTROL);
    assert_int_equal(ix__cp_flags(0xE9), IX__CP_LETTER);
    assert_int_equal(ix__cp_flags(0x2163), IX__CP_NUMBER); /* Ⅳ, Nl */
    assert_int_equal(ix__cp_flags(0xB2), IX__CP_NUMBER);   /* ², No */
    assert_int_equal(ix__cp_flags(0x3001), IX__CP_PUNCT);
    assert_int_equal(ix__cp_flags(0x20AC), IX__CP_SYMBOL);
    assert_int_equal(ix__cp_flags(0x0301), IX__CP_MARK);
    assert_int_equal(ix__cp_flags('$'), IX__CP_SYMBOL);
    assert_int_equal(ix__cp_flags('_'), IX__CP_PUNCT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),          cmocka_unit_test(test_split_cases),
        cmocka_unit_test(test_empty_and_args), cmocka_unit_test(test_append),
        cmocka_unit_test(test_invalid_utf8),   cmocka_unit_test(test_vocab_inputs),
        cmocka_unit_test(test_linear),         cmocka_unit_test(test_linear_8mb),
        cmocka_unit_test(test_nomem),          cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_cp_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
