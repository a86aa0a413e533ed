/* tokenizer: the shared vocab test vectors (llama.cpp's expected ids) for every
 * vocabulary in ../shared/vocab, the prompt ids of the nine models in
 * ../shared/arch/reference.json, the defaults llama.cpp gives a vocabulary
 * (by model, pre-tokenizer name and model name) against explicit keys, round
 * trips and streamed decoding on a varied corpus, the bundled model against
 * golden.json, bad input and OOM paths. */
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

/* Skips the calling test (exit code 77 for ctest) without ../shared/vocab. */
static void require_shared(void) {
    if (have_shared()) return;
    fprintf(stderr, "skip: %s is absent\n", VOCAB_DIR);
    skip();
}

/* A JSON file of ../shared, or the calling test is skipped. */
static json_t *load_json_or_skip(const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        fprintf(stderr, "skip: %s: %s\n", path, jerr.text);
        skip();
    }
    return root;
}

/* A JSON array of integers as token ids. */
static ix_token_vec json_ids(json_t *arr) {
    ix_token_vec v = {0};
    for (size_t k = 0; k < json_array_size(arr); k++)
        assert_int_equal(
            ix_token_vec_push(&v, (ix_token)json_integer_value(json_array_get(arr, k))), IX_OK);
    return v;
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
    require_shared();
    for (size_t i = 0; i < IX_ARRAY_LEN(k_vocabs); i++) check_vocab_vectors(k_vocabs[i]);
}

/* ---- tokenizers from edited GGUF metadata ------------------------------------ */

/* One key to set (replacing a key of that name): 's' string, 'b' bool, 'u' u32. */
typedef struct kv_set {
    const char *key;
    char type;
    const char *str;
    uint32_t u;
} kv_set;

/* The tokenizer of the writer's keys with `sets` applied, through an
 * in-memory GGUF file. Consumes w. */
static ix_tokenizer *tok_from_writer(ix_gguf_writer *w, const kv_set *sets, size_t n_sets) {
    for (size_t i = 0; i < n_sets; i++) {
        const kv_set *k = &sets[i];
        ix_status s = k->type == 's'   ? ix_gguf_writer_set_str(w, k->key, k->str)
                      : k->type == 'b' ? ix_gguf_writer_set_bool(w, k->key, k->u != 0)
                                       : ix_gguf_writer_set_u32(w, k->key, k->u);
        assert_int_equal(s, IX_OK);
    }
    void *buf = NULL;
    size_t size = 0;
    assert_int_equal(ix_gguf_writer_write_memory(w, &buf, &size), IX_OK);
    ix_gguf_writer_destroy(w);
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    if (ix_gguf_open_memory(&g, buf, size, &err) != IX_OK) fail_msg("%s", err.msg);
    ix_tokenizer *t = NULL;
    if (ix_tokenizer_create(&t, g, &err) != IX_OK) fail_msg("%s", err.msg);
    ix_gguf_close(g);
    ix_free(buf);
    return t;
}

/* The tokenizer of a GGUF file with some keys replaced (as mkarch.py --pre does). */
static ix_tokenizer *load_with(const char *path, const kv_set *sets, size_t n_sets) {
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    if (ix_gguf_open(&g, path, &err) != IX_OK) fail_msg("%s: %s", path, err.msg);
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_non_null(w);
    for (uint64_t i = 0; i < ix_gguf_n_kv(g); i++)
        assert_int_equal(ix_gguf_writer_copy_kv(w, g, i), IX_OK);
    ix_gguf_close(g);
    return tok_from_writer(w, sets, n_sets);
}

/* Encodes text and compares with want[0..n_want). */
static void check_ids(const ix_tokenizer *t, const char *label, const char *text, unsigned flags,
                      const ix_token *want, size_t n_want) {
    ix_token_vec ids = {0};
    assert_int_equal(ix_tokenizer_encode(t, text, strlen(text), flags, &ids, NULL), IX_OK);
    bool same = ids.n == n_want && (n_want == 0 || !memcmp(ids.ids, want, n_want * sizeof *want));
    if (!same) {
        fprintf(stderr, "%s: '%s'\n  want:", label, text);
        for (size_t i = 0; i < n_want; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n  got: ");
        for (size_t i = 0; i < ids.n; i++)
            fprintf(stderr, " %d", ids.ids[i]);
        fprintf(stderr, "\n");
    }
    ix_token_vec_free(&ids);
    assert_true(same);
}

#define CHECK_IDS(t, label, text, flags, ...)                                                      \
    do {                                                                                           \
        static const ix_token want_[] = {__VA_ARGS__};                                             \
        check_ids(t, label, text, flags, want_, IX_ARRAY_LEN(want_));                              \
    } while (0)

/* ---- the nine models of ../shared/arch/reference.json ---------------------------- */

/* Each model's "make" command names its vocabulary (../shared/vocab/X.gguf)
 * and maybe "--pre NAME", which replaces tokenizer.ggml.pre; prompt_tokens
 * are the reference's ids for the prompt, BOS included where it adds one. */
static void check_arch_model(json_t *model) {
    const char *file = json_string_value(json_object_get(model, "file"));
    const char *make = json_string_value(json_object_get(model, "make"));
    assert_non_null(file);
    assert_non_null(make);
    char words[16][256];
    size_t n_words = 0;
    for (const char *p = make; *p && n_words < IX_ARRAY_LEN(words);) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n == 0) break;
        assert_true(n < sizeof words[0]);
        memcpy(words[n_words], p, n);
        words[n_words++][n] = '\0';
        p += n;
    }
    const char *vocab = NULL, *pre = NULL;
    for (size_t i = 0; i < n_words; i++) {
        const char *v = strstr(words[i], "/vocab/");
        if (v) vocab = v + strlen("/vocab/");
        if (!strcmp(words[i], "--pre") && i + 1 < n_words) pre = words[i + 1];
    }
    if (!vocab) fail_msg("%s: no vocabulary in '%s'", file, make);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", VOCAB_DIR, vocab);
    kv_set set = {"tokenizer.ggml.pre", 's', pre, 0};
    ix_tokenizer *t = load_with(path, &set, pre ? 1 : 0);

    json_t *cases = json_object_get(model, "cases");
    assert_true(json_array_size(cases) > 0);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        const char *prompt = json_string_value(json_object_get(cs, "prompt"));
        json_t *want = json_object_get(cs, "prompt_tokens");
        assert_non_null(prompt);
        assert_true(json_array_size(want) > 0);
        ix_token_vec w = json_ids(want);
        char label[512];
        snprintf(label, sizeof label, "%s (%s%s%s)", file, vocab, pre ? ", pre " : "",
                 pre ? pre : "");
        /* as llama-server tokenizes a prompt: special tokens added and parsed */
        check_ids(t, label, prompt, IX_TOK_ADD_SPECIAL | IX_TOK_PARSE_SPECIAL, w.ids, w.n);
        ix_token_vec_free(&w);
    }
    ix_tokenizer_destroy(t);
}

static void test_arch_reference_prompts(void **state) {
    (void)state;
    require_shared();
    json_t *root = load_json_or_skip(IX_SHARED_DIR "/arch/reference.json");
    json_t *models = json_object_get(root, "models");
    assert_int_equal(json_array_size(models), 9);
    for (size_t i = 0; i < json_array_size(models); i++)
        check_arch_model(json_array_get(models, i));
    json_decref(root);
}

/* ---- defaults by model and pre-tokenizer name; explicit keys win ------------------ */

/* A handmade vocabulary: n pieces with their types and scores (either may be
 * NULL: absent) and, for BPE, merges ("A B"). */
typedef struct tiny_vocab {
    const char *model;
    const char *const *pieces;
    const int32_t *types;
    const float *scores;
    size_t n;
    const char *const *merges;
    size_t n_merges;
} tiny_vocab;

static ix_str *strs(const char *const *v, size_t n) {
    ix_str *s = calloc(n ? n : 1, sizeof *s);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        s[i] = (ix_str){v[i], strlen(v[i])};
    return s;
}

/* The tokenizer of a handmade vocabulary with `sets` applied. */
static ix_tokenizer *tiny_tok(const tiny_vocab *v, const kv_set *sets, size_t n_sets) {
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_non_null(w);
    ix_str *p = strs(v->pieces, v->n), *m = strs(v->merges, v->n_merges);
    assert_int_equal(ix_gguf_writer_set_str(w, "tokenizer.ggml.model", v->model), IX_OK);
    assert_int_equal(ix_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", p, v->n), IX_OK);
    if (v->types)
        assert_int_equal(
            ix_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IX_GGUF_INT32, v->types, v->n),
            IX_OK);
    if (v->scores)
        assert_int_equal(
            ix_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IX_GGUF_FLOAT32, v->scores, v->n),
            IX_OK);
    if (v->n_merges)
        assert_int_equal(ix_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, v->n_merges),
                         IX_OK);
    free(p);
    free(m);
    return tok_from_writer(w, sets, n_sets);
}

/* A byte-level BPE vocabulary of 14 pieces: "abc" is a piece that its merges
 * cannot build (a b -> ab is the only merge), so it is one token exactly
 * when whole-word hits skip the merges. Id 11 is where llama.cpp's BPE
 * default BOS/EOS lies. No piece spells a tab. */
static ix_tokenizer *tiny_bpe(const kv_set *sets, size_t n_sets) {
    static const char *const pieces[] = {
        "a",  "b",   "c",       "ab",     "abc",   "\xc4\xa0" /* Ġ, a space */, ".", "'", "s",
        "x9", "x10", "<|end|>", "<mask>", "[MASK]"};
    static const int32_t types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 4, 4};
    static const char *const merges[] = {"a b"};
    static const tiny_vocab v = {"gpt2", pieces, types, NULL, IX_ARRAY_LEN(pieces), merges, 1};
    return tiny_tok(&v, sets, n_sets);
}

static void test_bpe_defaults(void **state) {
    (void)state;
    const unsigned AS = IX_TOK_ADD_SPECIAL;
    /* llama-bpe: BOS (the default id 11) and whole-word hits */
    kv_set llama[] = {{"tokenizer.ggml.pre", 's', "llama-bpe", 0}};
    ix_tokenizer *t = tiny_bpe(llama, 1);
    assert_true(ix_tokenizer_add_bos(t));
    assert_false(ix_tokenizer_add_eos(t));
    assert_int_equal(ix_tokenizer_bos(t), 11);
    assert_int_equal(ix_tokenizer_eos(t), 11);
    CHECK_IDS(t, "llama-bpe", "abc", AS, 11, 4);
    ix_tokenizer_destroy(t);
    /* the same split rules under another name: merges only, no BOS */
    kv_set smaug[] = {{"tokenizer.ggml.pre", 's', "smaug-bpe", 0}};
    t = tiny_bpe(smaug, 1);
    assert_false(ix_tokenizer_add_bos(t));
    CHECK_IDS(t, "smaug-bpe", "abc", AS, 3, 2);
    ix_tokenizer_destroy(t);
    /* no pre key at all: "default" */
    t = tiny_bpe(NULL, 0);
    assert_string_equal(ix_tokenizer_pre_name(t), "default");
    CHECK_IDS(t, "no pre", "abc", AS, 3, 2);
    ix_tokenizer_destroy(t);
    /* explicit keys win both ways */
    kv_set no_bos[] = {{"tokenizer.ggml.pre", 's', "llama3", 0},
                       {"tokenizer.ggml.add_bos_token", 'b', NULL, 0}};
    t = tiny_bpe(no_bos, 2);
    CHECK_IDS(t, "llama3, add_bos_token false", "abc", AS, 4);
    ix_tokenizer_destroy(t);
    kv_set bos5[] = {{"tokenizer.ggml.pre", 's', "llama3", 0},
                     {"tokenizer.ggml.bos_token_id", 'u', NULL, 5},
                     {"tokenizer.ggml.add_eos_token", 'b', NULL, 1}};
    t = tiny_bpe(bos5, 3);
    CHECK_IDS(t, "llama3, bos 5, add_eos", "abc", AS, 5, 4, 11);
    ix_tokenizer_destroy(t);
    kv_set gpt2_bos[] = {{"tokenizer.ggml.pre", 's', "gpt-2", 0},
                         {"tokenizer.ggml.add_bos_token", 'b', NULL, 1}};
    t = tiny_bpe(gpt2_bos, 2);
    CHECK_IDS(t, "gpt-2, add_bos_token true", "abc", AS, 11, 3, 2);
    ix_tokenizer_destroy(t);
    /* ChatGLM has no default BOS: asking for one adds nothing (llama.cpp
     * refuses such a file) until an id is given */
    kv_set glm[] = {{"tokenizer.ggml.pre", 's', "glm4", 0},
                    {"tokenizer.ggml.add_bos_token", 'b', NULL, 1}};
    t = tiny_bpe(glm, 2);
    assert_int_equal(ix_tokenizer_bos(t), IX_TOKEN_NONE);
    assert_int_equal(ix_tokenizer_eos(t), 11);
    CHECK_IDS(t, "glm4", "abc", AS, 3, 2);
    ix_tokenizer_destroy(t);
}

/* A vocabulary of fewer than 12 pieces has no default BPE BOS/EOS. */
static void test_bpe_default_ids_out_of_range(void **state) {
    (void)state;
    static const char *const pieces[] = {"a", "b"}, *const merges[] = {"a b"};
    static const tiny_vocab v = {"gpt2", pieces, NULL, NULL, 2, merges, 1};
    kv_set pre = {"tokenizer.ggml.pre", 's', "llama-bpe", 0};
    ix_tokenizer *t = tiny_tok(&v, &pre, 1);
    assert_int_equal(ix_tokenizer_bos(t), IX_TOKEN_NONE);
    assert_int_equal(ix_tokenizer_eos(t), IX_TOKEN_NONE);
    assert_false(ix_tokenizer_add_bos(t));
    CHECK_IDS(t, "two pieces", "ba", IX_TOK_ADD_SPECIAL, 1, 0);
    ix_tokenizer_destroy(t);
}

/* SPM: BOS 1 added and a dummy-prefix space, unless the keys say otherwise. */
static void test_spm_defaults(void **state) {
    (void)state;
    static const char *const pieces[] = {"<unk>", "<s>", "</s>", "\342\226\201a" /* ▁a */, "a"};
    static const int32_t types[] = {2, 3, 3, 1, 1};
    static const float scores[] = {0, 0, 0, -1, -2};
    static const tiny_vocab v = {"llama", pieces, types, scores, IX_ARRAY_LEN(pieces), NULL, 0};
    static const kv_set none[] = {{"tokenizer.ggml.pre", 's', "llama-bpe", 0}}; /* ignored by SPM */
    static const kv_set no_prefix[] = {{"tokenizer.ggml.add_space_prefix", 'b', NULL, 0}};
    static const kv_set no_bos[] = {{"tokenizer.ggml.add_bos_token", 'b', NULL, 0}};
    static const struct {
        const kv_set *sets;
        ix_token want[2];
        size_t n_want;
    } cases[] = {{none, {1, 3}, 2}, {no_prefix, {1, 4}, 2}, {no_bos, {3, 0}, 1}};
    for (size_t c = 0; c < IX_ARRAY_LEN(cases); c++) {
        ix_tokenizer *t = tiny_tok(&v, cases[c].sets, 1);
        assert_int_equal(ix_tokenizer_bos(t), 1);
        assert_int_equal(ix_tokenizer_eos(t), 2);
        assert_int_equal(ix_tokenizer_unk(t), 0);
        assert_false(ix_tokenizer_add_eos(t));
        check_ids(t, "spm defaults", "a", IX_TOK_ADD_SPECIAL, cases[c].want, cases[c].n_want);
        ix_tokenizer_destroy(t);
    }
}

/* clean_up_tokenization_spaces: on request, where the pre-tokenizer name has it. */
static void test_clean_spaces(void **state) {
    (void)state;
    /* pieces 5, 6, 7, 8: "Ġ", ".", "'", "s" */
    static const ix_token ids[] = {0, 5, 6, 5, 7, 8, 5, 7, 5, 1};
    static const struct {
        const char *pre;
        const char *want;
    } cases[] = {{"gpt-2", "a.'s'b"}, {"qwen2", "a . 's ' b"}};
    for (size_t c = 0; c < IX_ARRAY_LEN(cases); c++) {
        kv_set pre = {"tokenizer.ggml.pre", 's', cases[c].pre, 0};
        ix_tokenizer *t = tiny_bpe(&pre, 1);
        ix_buf out = {0};
        assert_int_equal(ix_tokenizer_decode(t, ids, IX_ARRAY_LEN(ids), 0, &out, NULL), IX_OK);
        assert_string_equal(out.data, "a . 's ' b");
        ix_buf_clear(&out);
        assert_int_equal(
            ix_tokenizer_decode(t, ids, IX_ARRAY_LEN(ids), IX_DETOK_CLEAN_SPACES, &out, NULL),
            IX_OK);
        assert_string_equal(out.data, cases[c].want);
        ix_buf_free(&out);
        ix_detok *d = NULL, *d2;
        assert_int_equal(ix_detok_create(&d, t, 0), IX_OK);
        d2 = d;
        assert_int_equal(ix_detok_create(&d2, t, IX_DETOK_CLEAN_SPACES), IX_ERR_INVALID);
        assert_null(d2);
        ix_detok_destroy(d);
        ix_tokenizer_destroy(t);
    }
    if (!have_shared()) return;
    /* llama_detokenize's three passes, quirks included: " ' " loses both
     * spaces, " 'd" keeps its space */
    ix_tokenizer *t = load(VOCAB_DIR "/ggml-vocab-gpt-2.gguf");
    const char *text = "Hello , world . It 's fine ' ok ' I 'd ' ' go !";
    ix_token_vec v = {0};
    assert_int_equal(ix_tokenizer_encode(t, text, strlen(text), 0, &v, NULL), IX_OK);
    ix_buf out = {0};
    assert_int_equal(ix_tokenizer_decode(t, v.ids, v.n, IX_DETOK_CLEAN_SPACES, &out, NULL), IX_OK);
    assert_string_equal(out.data, "Hello, world. It's fine'ok'I 'd'' go!");
    ix_buf_free(&out);
    ix_token_vec_free(&v);
    ix_tokenizer_destroy(t);
}

/* Mask tokens that swallow the whitespace before them: <mask> under the
 * jina-v2 pre-tokenizer names, [MASK] when general.name says modern-bert. */
static void test_mask_lstrip(void **state) {
    (void)state;
    /* without the rule: "a", " \t" (the tab has no piece: dropped), <mask>, " a" */
    kv_set gpt2[] = {{"tokenizer.ggml.pre", 's', "gpt-2", 0}};
    ix_tokenizer *t = tiny_bpe(gpt2, 1);
    CHECK_IDS(t, "gpt-2", "a \t<mask> a", 0, 0, 5, 12, 5, 0);
    CHECK_IDS(t, "gpt-2", "a [MASK]", 0, 0, 5, 13);
    ix_tokenizer_destroy(t);
    kv_set jina[] = {{"tokenizer.ggml.pre", 's', "jina-v2-es", 0}};
    t = tiny_bpe(jina, 1);
    assert_true(ix_str_eq(ix_tokenizer_trim_between(t, IX_TOKEN_NONE, " a \t", 4, 12), " a"));
    assert_true(ix_str_eq(ix_tokenizer_trim_between(t, 12, " a \t", 4, 13), " a \t"));
    CHECK_IDS(t, "jina-v2-es", "a \t<mask> a", 0, 0, 12, 5, 0);
    CHECK_IDS(t, "jina-v2-es", "a [MASK]", 0, 0, 5, 13);
    ix_tokenizer_destroy(t);
    kv_set modern[] = {{"tokenizer.ggml.pre", 's', "modern-bert", 0},
                       {"general.name", 's', "Modern-BERT base", 0}};
    t = tiny_bpe(modern, 2);
    CHECK_IDS(t, "modern-bert", "a [MASK]", 0, 0, 13);
    CHECK_IDS(t, "modern-bert", "a <mask>", 0, 0, 5, 12);
    ix_tokenizer_destroy(t);
}

/* Phi-3 (general.name "Phi3"): a special token followed by whitespace. The
 * .inp/.out vectors have no such case, so the ids follow from llama.cpp's
 * tokenize (src/llama-vocab.cpp): its load sets RSTRIP on every special
 * token of a vocabulary whose general.name contains "phi3" or "phi-3", then
 * clears it on <unk>, <s> and <|endoftext|>; cutting out a special token with
 * RSTRIP drops the isspace() bytes after it; and each raw fragment that
 * follows the start or a special token gets the " " prefix. So
 * "Hello</s> world" is "Hello", </s>, "world" -> ▁Hello (15043), 2, ▁world
 * (3186); without the strip the fragment was "  world" -> ▁ (29871) ▁world,
 * one token too many. The plain-text ids are those of the .out vectors
 * ("Hello world" 15043 3186, " Hello" 29871 15043). */
static void test_phi3_special_then_space(void **state) {
    (void)state;
    require_shared();
    ix_tokenizer *t = load(VOCAB_DIR "/ggml-vocab-phi-3.gguf");
    const unsigned PS = IX_TOK_PARSE_SPECIAL, AS = IX_TOK_ADD_SPECIAL;
    /* What stays of " \n x \n" after (and before) a token: stripped after
     * <|user|> (32010), <|end|> (32007), </s> (2); not after <s> (1), <unk>
     * (0), <|endoftext|> (32000), a plain piece or an id out of range; never
     * before. */
    static const struct {
        ix_token id;
        const char *after;
    } trims[] = {{32010, "x \n"},     {32007, "x \n"},  {2, "x \n"},
                 {1, " \n x \n"},     {0, " \n x \n"},  {32000, " \n x \n"},
                 {15043, " \n x \n"}, {-1, " \n x \n"}, {1 << 30, " \n x \n"}};
    for (size_t i = 0; i < IX_ARRAY_LEN(trims); i++) {
        ix_str a = ix_tokenizer_trim_between(t, trims[i].id, " \n x \n", 6, IX_TOKEN_NONE);
        ix_str b = ix_tokenizer_trim_between(t, IX_TOKEN_NONE, " \n x \n", 6, trims[i].id);
        assert_true(ix_str_eq(a, trims[i].after));
        assert_int_equal(b.len, 6);
    }
    /* </s> is user-defined here: recognised even without PS */
    CHECK_IDS(t, "phi-3", "Hello</s> world", 0, 15043, 2, 3186);
    CHECK_IDS(t, "phi-3", "Hello</s>world", 0, 15043, 2, 3186);
    CHECK_IDS(t, "phi-3", "Hello</s> \t\n world", 0, 15043, 2, 3186);
    /* only after: the space before stays */
    CHECK_IDS(t, "phi-3", "Hello </s>", 0, 15043, 29871, 2);
    /* the chat markers eat their newline ("Hi there" is 6324 727) */
    CHECK_IDS(t, "phi-3", "<|user|>\nHi there<|end|>\n<|assistant|>", PS | AS, 1, 32010, 6324, 727,
              32007, 32001);
    /* <s> and <|endoftext|> keep the space: "  Hi" as " Hi" alone */
    CHECK_IDS(t, "phi-3", "<s> Hi", PS, 1, 29871, 6324);
    CHECK_IDS(t, "phi-3", "<|endoftext|> Hi", PS, 32000, 29871, 6324);
    CHECK_IDS(t, "phi-3", " Hi", 0, 29871, 6324);
    /* Decoding gives the "▁" after a stripping token back as a space, as
     * llama.cpp does. */
    static const ix_token ids[] = {15043, 2, 3186};
    ix_buf out = {0};
    assert_int_equal(ix_tokenizer_decode(t, ids, 3, 0, &out, NULL), IX_OK);
    assert_string_equal(out.data, "Hello</s> world");
    ix_buf_free(&out);
    ix_tokenizer_destroy(t);
    /* Another name: no strip, the extra "▁" is right. */
    kv_set other = {"general.name", 's', "not that model", 0};
    t = load_with(VOCAB_DIR "/ggml-vocab-phi-3.gguf", &other, 1);
    assert_int_equal(ix_tokenizer_trim_between(t, 2, " x", 2, IX_TOKEN_NONE).len, 2);
    CHECK_IDS(t, "phi-3 vocabulary, other name", "Hello</s> world", 0, 15043, 2, 29871, 3186);
    ix_tokenizer_destroy(t);
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
    require_shared();
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
    json_t *root = load_json_or_skip(IX_SHARED_DIR "/models/golden.json");
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
        ix_token_vec g = json_ids(json_object_get(p, "greedy_ids"));
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
        cmocka_unit_test(test_arch_reference_prompts),
        cmocka_unit_test(test_bpe_defaults),
        cmocka_unit_test(test_bpe_default_ids_out_of_range),
        cmocka_unit_test(test_spm_defaults),
        cmocka_unit_test(test_clean_spaces),
        cmocka_unit_test(test_mask_lstrip),
        cmocka_unit_test(test_phi3_special_then_space),
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
