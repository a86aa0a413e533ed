/* tokenizer: the shared vocab test vectors (llama.cpp's expected ids) for every
 * vocabulary in ../shared/vocab, round trips and streamed decoding on a varied
 * corpus, the bundled model against golden.json, bad input and OOM paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/tokenizer.h"
#include "tokenizer/tok_int.h" /* to compare the SPM word-split path with whole-text merging */

#define BUNDLED IX_SOURCE_DIR "/models/target-f16.gguf"
#define VOCAB_DIR IX_SHARED_DIR "/vocab"

static const char *const k_vocabs[] = {
    "ggml-vocab-llama-spm", "ggml-vocab-phi-3", "ggml-vocab-gpt-2",
    "ggml-vocab-falcon", "ggml-vocab-starcoder",
};

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    buf[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static bool have_shared(void) {
    DIR *d = opendir(VOCAB_DIR);
    if (!d) return false;
    closedir(d);
    return true;
}

static ix_tokenizer *load(const char *path) {
    ix_tokenizer *t = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_tokenizer_load(&t, path, &err);
    if (s != IX_OK) fail_msg("%s: %s", path, err.msg);
    return t;
}

/* ---- the shared test vectors ------------------------------------------------- */

static void check_vocab_vectors(const char *name) {
    char path[1024], inp_path[1100], out_path[1100];
    snprintf(path, sizeof path, "%s/%s.gguf", VOCAB_DIR, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", path);
    snprintf(out_path, sizeof out_path, "%s.out", path);
    ix_tokenizer *t = load(path);
    char *inp = read_file(inp_path, NULL), *outp = read_file(out_path, NULL);
    assert_non_null(inp);
    assert_non_null(outp);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *cur = inp, *line = outp;
    int n_cases = 0, n_fail = 0;
    for (char *end; (end = strstr(cur, sep)) != NULL; cur = end + strlen(sep)) {
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        ix_token_vec ids = {0};
        ix_errbuf err = {{0}};
        assert_int_equal(ix_tokenizer_encode(t, cur, (size_t)(end - cur), 0, &ids, &err), IX_OK);
        /* expected: " id id id" */
        ix_token_vec want = {0};
        for (char *p = line; *p;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) break;
            ix_token_vec_push(&want, (ix_token)v);
            p = q;
        }
        bool same = ids.n == want.n && (ids.n == 0 || !memcmp(ids.ids, want.ids, ids.n * sizeof(ix_token)));
        if (!same) {
            n_fail++;
            fprintf(stderr, "%s case %d: input '%.*s'\n  want:%s\n  got: ", name, n_cases,
                    (int)(end - cur), cur, line);
            for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.ids[i]);
            fprintf(stderr, "\n");
        }
        ix_token_vec_free(&ids);
        ix_token_vec_free(&want);
        line = eol + 1;
        n_cases++;
    }
    fprintf(stderr, "%s: %d cases, %d failed\n", name, n_cases, n_fail);
    assert_true(n_cases > 0);
    assert_int_equal(n_fail, 0);
    free(inp);
    free(outp);
    ix_tokenizer_destroy(t);
}

static void test_vocab_vectors(void **state) {
    (void)state;
    if (!have_shared()) {
        fprintf(stderr, "skip: %s is absent\n", VOCAB_DIR);
        skip();
    }
    for (size_t i = 0; i < IX_ARRAY_LEN(k_vocabs); i++) check_vocab_vectors(k_vocabs[i]);
}

/* ---- round trip and streaming on a varied corpus ------------------------------- */

static const char *const k_corpus[] = {
    "Hello world",
    " leading space, and  double  spaces   and trailing   ",
    "\n\n\nnewlines\r\nand\ttabs\t\t\f", /* no \v: Falcon's vocab cannot spell it */
    "It was on this point that she had been able to give up the whole party.",
    "Ünïcödé: naïve café, straße, ÆØÅ, İstanbul, ΑΒΓ αβγ, Кириллица, עברית, العربية",
    "中文测试，日本語のテキスト、한국어 텍스트。",
    "हिन्दी देवनागरी, ไทย, ქართული, Ελληνικά, ᚠᚢᚦ",
    "emoji 😀🎉 and joiners 👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 flags 🇫🇷🇯🇵 keycap 1️⃣",
    "combining: e\xcc\x81 a\xcc\x8a n\xcc\x83, zalgo Z\xcd\x91\xcd\x97\xcd\x8a",
    "code: int main(void) {\n    return printf(\"%d\\n\", a[i] >> 2) || x != y; // ok\n}\n",
    "def f(x):\n\treturn [i**2 for i in range(10) if i % 3 == 0]  # comment\n",
    "numbers 0 1 12 123 1234 12345 3.14159 -42 1e10 0xDEADBEEF 1,000,000",
    "punctuation!!! ??? ... --- ''' \"\"\" ``` ~~~ @#$%^&*()_+={}[]|\\:;<>,./",
    "contractions: I'm you're he's we've they'll she'd DON'T I'M",
    "<s> </s> <unk> <|endoftext|> <fim_prefix> >>TITLE<< look special but are text",
    "\xc2\xa0non-breaking\xe2\x80\x80spaces\xe3\x80\x80ideographic\xe2\x80\xa8line sep",
    "a",
    " ",
    "\n",
    "                                                        many spaces",
    "mixed 123abc456 def789 xyz",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝟘𝟙𝟚 and \xf4\x8f\xbf\xbf max code point",
};

static void check_round_trip(ix_tokenizer *t, const char *label) {
    for (size_t i = 0; i < IX_ARRAY_LEN(k_corpus); i++) {
        const char *text = k_corpus[i];
        size_t len = strlen(text);
        ix_token_vec ids = {0};
        ix_errbuf err = {{0}};
        assert_int_equal(ix_tokenizer_encode(t, text, len, IX_TOK_ADD_SPECIAL, &ids, &err), IX_OK);
        ix_buf whole = {0};
        assert_int_equal(ix_tokenizer_decode(t, ids.ids, ids.n, 0, &whole, &err), IX_OK);
        if (whole.len != len || memcmp(whole.data, text, len) != 0)
            fail_msg("%s: round trip of corpus[%zu] '%s' gave '%s'", label, i, text,
                     whole.data ? whole.data : "");

        /* Streamed, one token at a time, equals the whole decode; no emitted
         * chunk ends inside a UTF-8 character. */
        for (unsigned flags = 0; flags <= IX_DETOK_RENDER_SPECIAL; flags++) {
            ix_buf ref = {0}, streamed = {0};
            assert_int_equal(ix_tokenizer_decode(t, ids.ids, ids.n, flags, &ref, &err), IX_OK);
            ix_detok *d;
            assert_int_equal(ix_detok_create(&d, t, flags), IX_OK);
            for (size_t k = 0; k < ids.n; k++) {
                ix_buf chunk = {0};
                assert_int_equal(ix_detok_push(d, ids.ids[k], &chunk), IX_OK);
                assert_true(ix_utf8_valid(chunk.data ? chunk.data : "", chunk.len, NULL));
                ix_buf_append(&streamed, chunk.data ? chunk.data : "", chunk.len);
                ix_buf_free(&chunk);
            }
            assert_int_equal(ix_detok_flush(d, &streamed), IX_OK);
            assert_int_equal(ix_detok_pending(d), 0);
            ix_detok_destroy(d);
            assert_int_equal(streamed.len, ref.len);
            assert_memory_equal(streamed.data ? streamed.data : "", ref.data ? ref.data : "", ref.len);
            ix_buf_free(&ref);
            ix_buf_free(&streamed);
        }
        ix_buf_free(&whole);
        ix_token_vec_free(&ids);
    }
}

static void test_round_trip_bundled(void **state) {
    (void)state;
    ix_tokenizer *t = load(BUNDLED);
    check_round_trip(t, "bundled");
    ix_tokenizer_destroy(t);
}

static void test_round_trip_vocabs(void **state) {
    (void)state;
    if (!have_shared()) {
        fprintf(stderr, "skip: %s is absent\n", VOCAB_DIR);
        skip();
    }
    for (size_t i = 0; i < IX_ARRAY_LEN(k_vocabs); i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.gguf", VOCAB_DIR, k_vocabs[i]);
        ix_tokenizer *t = load(path);
        check_round_trip(t, k_vocabs[i]);
        ix_tokenizer_destroy(t);
    }
}

/* A byte-fallback sequence split across tokens is held back until complete. */
static void test_detok_holds_partial_utf8(void **state) {
    (void)state;
    ix_tokenizer *t = load(BUNDLED);
    /* "😀" is not in the 4096-token vocabulary: four <0xXX> byte tokens. */
    ix_token_vec ids = {0};
    assert_int_equal(ix_tokenizer_encode(t, "😀", 4, 0, &ids, NULL), IX_OK);
    assert_int_equal(ids.n, 5); /* "▁" + 4 bytes */
    ix_detok *d;
    assert_int_equal(ix_detok_create(&d, t, 0), IX_OK);
    ix_buf out = {0};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ix_detok_push(d, ids.ids[i], &out), IX_OK);
        assert_int_equal(out.len, 0);
    }
    assert_int_equal(ix_detok_pending(d), 3);
    assert_int_equal(ix_detok_push(d, ids.ids[4], &out), IX_OK);
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "😀", 4);
    ix_buf_free(&out);
    ix_detok_destroy(d);
    ix_token_vec_free(&ids);
    ix_tokenizer_destroy(t);
}

/* ---- the bundled model against the reference tokenizer (golden.json) ------------ */

static void test_golden_prompt_ids(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *root = json_load_file(IX_SHARED_DIR "/models/golden.json", 0, &jerr);
    if (!root) {
        fprintf(stderr, "skip: golden.json: %s\n", jerr.text);
        skip();
    }
    ix_tokenizer *t = load(BUNDLED);
    assert_int_equal(ix_tokenizer_get_kind(t), IX_TOKENIZER_SPM);
    assert_int_equal(ix_tokenizer_n_vocab(t), 4096);
    assert_int_equal(ix_tokenizer_bos(t), 1);
    assert_int_equal(ix_tokenizer_eos(t), 2);
    assert_true(ix_tokenizer_is_eog(t, 2));
    json_t *prompts = json_object_get(root, "prompts");
    assert_true(json_array_size(prompts) >= 5);
    for (size_t i = 0; i < json_array_size(prompts); i++) {
        json_t *p = json_array_get(prompts, i);
        const char *text = json_string_value(json_object_get(p, "prompt"));
        json_t *want = json_object_get(p, "prompt_ids");
        ix_token_vec ids = {0};
        assert_int_equal(ix_tokenizer_encode(t, text, strlen(text), IX_TOK_ADD_SPECIAL, &ids, NULL),
                         IX_OK);
        assert_int_equal(ids.n, json_array_size(want));
        for (size_t k = 0; k < ids.n; k++)
            assert_int_equal(ids.ids[k], json_integer_value(json_array_get(want, k)));
        /* The greedy continuation decodes to the reference text. */
        json_t *greedy = json_object_get(p, "greedy_ids");
        ix_token_vec g = {0};
        for (size_t k = 0; k < json_array_size(greedy); k++)
            ix_token_vec_push(&g, (ix_token)json_integer_value(json_array_get(greedy, k)));
        ix_buf text_out = {0};
        /* The reference decoded the continuation on its own, which (like ours)
         * drops the dummy-prefix space of its first piece. */
        assert_int_equal(ix_tokenizer_decode(t, g.ids, g.n, 0, &text_out, NULL), IX_OK);
        const char *want_text = json_string_value(json_object_get(p, "greedy_text"));
        if (want_text) assert_string_equal(text_out.data, want_text);
        ix_buf_free(&text_out);
        ix_token_vec_free(&g);
        ix_token_vec_free(&ids);
    }
    ix_tokenizer_destroy(t);
    json_decref(root);
}

/* SPM merges word by word when the vocabulary allows it; the result must equal
 * merging the whole text at once. */
static void check_word_split_exact(const char *path, const char *text, size_t len) {
    ix_tokenizer *t = load(path);
    assert_true(t->spm_word_split);
    ix_token_vec a = {0}, b = {0};
    assert_int_equal(ix_tokenizer_encode(t, text, len, 0, &a, NULL), IX_OK);
    t->spm_word_split = false;
    assert_int_equal(ix_tokenizer_encode(t, text, len, 0, &b, NULL), IX_OK);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, a.n * sizeof(ix_token));
    ix_token_vec_free(&a);
    ix_token_vec_free(&b);
    ix_tokenizer_destroy(t);
}

static void test_spm_word_split_exact(void **state) {
    (void)state;
    size_t len;
    char *text = read_file(IX_SHARED_DIR "/models/heldout.txt", &len);
    if (!text) {
        fprintf(stderr, "skip: heldout.txt is absent\n");
        skip();
    }
    if (len > 20000) len = 20000;
    while (len && ((unsigned char)text[len] & 0xc0) == 0x80) len--;
    check_word_split_exact(BUNDLED, text, len);
    for (size_t i = 0; i < IX_ARRAY_LEN(k_corpus); i++)
        check_word_split_exact(BUNDLED, k_corpus[i], strlen(k_corpus[i]));
    if (have_shared()) {
        check_word_split_exact(VOCAB_DIR "/ggml-vocab-llama-spm.gguf", text, len);
        for (size_t i = 0; i < IX_ARRAY_LEN(k_corpus); i++)
            check_word_split_exact(VOCAB_DIR "/ggml-vocab-llama-spm.gguf", k_corpus[i], strlen(k_corpus[i]));
    }
    free(text);
}

/* ---- special tokens ------------------------------------------------------------- */

static void test_special_parsing(void **state) {
    (void)state;
    ix_tokenizer *t = load(BUNDLED);
    ix_token_vec a = {0}, b = {0};
    assert_int_equal(ix_tokenizer_encode(t, "x</s>y", 6, 0, &a, NULL), IX_OK);
    assert_int_equal(ix_tokenizer_encode(t, "x</s>y", 6, IX_TOK_PARSE_SPECIAL, &b, NULL), IX_OK);
    bool plain_has_eos = false, parsed_has_eos = false;
    for (size_t i = 0; i < a.n; i++) plain_has_eos |= a.ids[i] == 2;
    for (size_t i = 0; i < b.n; i++) parsed_has_eos |= b.ids[i] == 2;
    assert_false(plain_has_eos);
    assert_true(parsed_has_eos);
    /* Rendering: special text only when asked; round trip with parse+render. */
    ix_buf out = {0};
    assert_int_equal(ix_tokenizer_decode(t, b.ids, b.n, IX_DETOK_RENDER_SPECIAL, &out, NULL), IX_OK);
    assert_string_equal(out.data, "x</s>y");
    ix_buf_clear(&out);
    assert_int_equal(ix_tokenizer_decode(t, b.ids, b.n, 0, &out, NULL), IX_OK);
    assert_string_equal(out.data, "xy");
    ix_buf_free(&out);
    ix_token_vec_free(&a);
    ix_token_vec_free(&b);
    ix_tokenizer_destroy(t);
}

/* ---- bad input -------------------------------------------------------------- */

static void test_bad_input(void **state) {
    (void)state;
    ix_tokenizer *t = load(BUNDLED);
    ix_token_vec ids = {0};
    ix_errbuf err = {{0}};
    static const char *const bad[] = {"ok\xff", "\xc0\xaf", "ab\xed\xa0\x80", "\xf4\x90\x80\x80",
                                      "\xe2\x96", "x\x80y"};
    for (size_t i = 0; i < IX_ARRAY_LEN(bad); i++) {
        assert_int_equal(ix_tokenizer_encode(t, bad[i], strlen(bad[i]), 0, &ids, &err), IX_ERR_UTF8);
        assert_non_null(strstr(err.msg, "offset"));
        assert_int_equal(ids.n, 0);
    }
    ix_token bogus[] = {5, 99999};
    ix_buf out = {0};
    assert_int_equal(ix_tokenizer_decode(t, bogus, 2, 0, &out, &err), IX_ERR_RANGE);
    assert_int_equal(out.len, 0);
    ix_buf_free(&out);
    ix_detok *d;
    assert_int_equal(ix_detok_create(&d, t, 0), IX_OK);
    assert_int_equal(ix_detok_push(d, -3, &out), IX_ERR_RANGE);
    ix_detok_destroy(d);
    ix_buf_free(&out);
    /* Empty text: nothing, or BOS alone. */
    assert_int_equal(ix_tokenizer_encode(t, "", 0, 0, &ids, NULL), IX_OK);
    assert_int_equal(ids.n, 0);
    assert_int_equal(ix_tokenizer_encode(t, "", 0, IX_TOK_ADD_SPECIAL, &ids, NULL), IX_OK);
    assert_int_equal(ids.n, 1);
    ix_token_vec_free(&ids);
    ix_tokenizer_destroy(t);

    ix_tokenizer *none = NULL;
    assert_int_not_equal(ix_tokenizer_load(&none, IX_SOURCE_DIR "/does/not/exist.gguf", &err), IX_OK);
    assert_null(none);
    assert_true(strlen(err.msg) > 0);
}

/* Every allocation failure during create and encode is reported, and nothing leaks. */
static void test_oom(void **state) {
    (void)state;
    ix_gguf *g;
    assert_int_equal(ix_gguf_open(&g, BUNDLED, NULL), IX_OK);
    size_t live0 = ix_mem_live_count();
    for (long k = 0;; k++) {
        ix_tokenizer *t = NULL;
        ix_mem_fail_after(k);
        ix_status s = ix_tokenizer_create(&t, g, NULL);
        long failed = ix_mem_failed_count();
        ix_mem_fail_reset();
        if (s == IX_OK) {
            assert_int_equal(failed, 0);
            const char *text = "It was on this point that she had 😀 been";
            for (long j = 0;; j++) {
                ix_token_vec ids = {0};
                ix_mem_fail_after(j);
                ix_status e = ix_tokenizer_encode(t, text, strlen(text), IX_TOK_ADD_SPECIAL, &ids, NULL);
                long f2 = ix_mem_failed_count();
                ix_mem_fail_reset();
                ix_token_vec_free(&ids);
                if (e == IX_OK) break;
                assert_int_equal(e, IX_ERR_NOMEM);
                assert_true(f2 > 0);
            }
            ix_tokenizer_destroy(t);
            break;
        }
        assert_int_equal(s, IX_ERR_NOMEM);
        assert_null(t);
        assert_int_equal(ix_mem_live_count(), live0);
    }
    assert_int_equal(ix_mem_live_count(), live0);
    ix_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_vectors),
        cmocka_unit_test(test_round_trip_bundled),
        cmocka_unit_test(test_round_trip_vocabs),
        cmocka_unit_test(test_detok_holds_partial_utf8),
        cmocka_unit_test(test_golden_prompt_ids),
        cmocka_unit_test(test_spm_word_split_exact),
        cmocka_unit_test(test_special_parsing),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
