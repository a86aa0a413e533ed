/* libFuzzer target for the tokenizers: the bundled model's SentencePiece
 * vocabulary and, when ../shared is there, real byte-level BPE and SPM
 * vocabularies (GPT-2, Llama SPM, Phi-3, Falcon, StarCoder).
 *
 * Input: one selector byte, then the text (or, with bit 4 of the selector,
 * token ids as little-endian int32, any value). Promises checked:
 *   - encoding valid UTF-8 succeeds with ids inside the vocabulary; invalid
 *     UTF-8 is refused with IX_ERR_UTF8 and a message, nothing appended;
 *   - decode(encode(text)) == text when special text is not parsed, for
 *     every vocabulary that can spell every byte (spells_every_byte);
 *   - the incremental detokenizer's pushes plus flush equal one decode of the
 *     same ids, byte for byte (the streams' text is the answers' text);
 *   - out-of-range ids are IX_ERR_RANGE, never a read outside the vocabulary;
 *   - no leak (the counted allocator's live count is back where it was).
 * Also linked into test_tokenizer_corpus, which replays tests/corpus/tokenizer/. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/core.h"
#include "inferx/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TOKS 6
static ix_tokenizer *g_tok[MAX_TOKS];
static bool g_lossless[MAX_TOKS];
static int g_n;

static size_t put_utf8(char *p, uint32_t cp) {
    if (cp < 0x80) return (size_t)(p[0] = (char)cp, 1);
    if (cp < 0x800) return p[0] = (char)(0xC0 | cp >> 6), p[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return p[0] = (char)(0xE0 | cp >> 12), p[1] = (char)(0x80 | (cp >> 6 & 63)), p[2] = (char)(0x80 | (cp & 63)), 3;
    p[0] = (char)(0xF0 | cp >> 18);
    p[1] = (char)(0x80 | (cp >> 12 & 63));
    p[2] = (char)(0x80 | (cp >> 6 & 63));
    p[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Whether the vocabulary can spell every byte: a text holding every ASCII
 * byte (NUL too), every two-byte character and a character of each three-
 * and four-byte lead byte round-trips. Falcon's vocabulary, for one, has
 * no pieces for some control characters: they are dropped, as llama.cpp
 * drops them, and decode(encode(text)) == text cannot hold. */
static bool spells_every_byte(const ix_tokenizer *t) {
    static char probe[8192];
    size_t n = 0;
    for (uint32_t c = 0; c < 0x800; c++) n += put_utf8(probe + n, c);
    for (uint32_t c = 0x800; c < 0x10000; c += 0x1000) n += put_utf8(probe + n, c == 0xD800 ? 0xD7FF : c);
    for (uint32_t c = 0x10000; c <= 0x100000; c += 0x40000) n += put_utf8(probe + n, c);
    ix_token_vec v = {0};
    ix_buf out = {0};
    ix_errbuf err = {{0}};
    bool ok = ix_tokenizer_encode(t, probe, n, 0, &v, &err) == IX_OK &&
              ix_tokenizer_decode(t, v.ids, v.n, 0, &out, &err) == IX_OK && out.len == n && !memcmp(out.data, probe, n);
    ix_token_vec_free(&v);
    ix_buf_free(&out);
    return ok;
}

static void unload(void) {
    for (int i = 0; i < g_n; i++) ix_tokenizer_destroy(g_tok[i]);
    g_n = 0;
}

static void load(void) {
    static const char *const shared[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf",
                                         "ggml-vocab-phi-3.gguf", "ggml-vocab-falcon.gguf",
                                         "ggml-vocab-starcoder.gguf"};
    ix_errbuf err = {{0}};
    if (ix_tokenizer_load(&g_tok[g_n], IX_SOURCE_DIR "/models/target-f16.gguf", &err) != IX_OK) {
        fprintf(stderr, "fuzz_tokenizer: the bundled model's tokenizer: %s\n", err.msg);
        abort();
    }
    g_n++;
    for (size_t i = 0; i < sizeof shared / sizeof *shared && g_n < MAX_TOKS; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/vocab/%s", IX_SHARED_DIR, shared[i]);
        if (ix_tokenizer_load(&g_tok[g_n], path, &err) == IX_OK) g_n++; /* absent without ../shared */
    }
    for (int i = 0; i < g_n; i++) g_lossless[i] = spells_every_byte(g_tok[i]);
    atexit(unload);
}

static void check_stream(const ix_tokenizer *t, const ix_token *ids, size_t n, unsigned flags) {
    ix_buf whole = {0}, inc = {0};
    ix_errbuf err = {{0}};
    ix_status s = ix_tokenizer_decode(t, ids, n, flags, &whole, &err);
    ix_detok *d = NULL;
    if (ix_detok_create(&d, t, flags) != IX_OK) abort();
    ix_status si = IX_OK;
    for (size_t i = 0; i < n && si == IX_OK; i++) si = ix_detok_push(d, ids[i], &inc);
    if (si == IX_OK) si = ix_detok_flush(d, &inc);
    ix_detok_destroy(d);
    if ((s == IX_OK) != (si == IX_OK)) abort(); /* both refuse an out-of-range id, or neither */
    if (s == IX_OK && (whole.len != inc.len || (whole.len && memcmp(whole.data, inc.data, whole.len)))) abort();
    if (s != IX_OK && s != IX_ERR_RANGE) abort();
    ix_buf_free(&whole);
    ix_buf_free(&inc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_n) load();
    if (size < 1 || size > 4096) return 0;
    size_t live = ix_mem_live_count();
    uint8_t sel = data[0];
    int which = (sel & 7) % g_n;
    const ix_tokenizer *t = g_tok[which];
    data++;
    size--;
    unsigned dflags = (sel & 0x20 ? IX_DETOK_RENDER_SPECIAL : 0) | (sel & 0x40 ? IX_DETOK_KEEP_LEADING_SPACE : 0);
    if (sel & 0x10) { /* ids */
        size_t n = size / 4;
        ix_token *ids = malloc((n ? n : 1) * sizeof *ids);
        if (!ids) abort();
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 | (uint32_t)data[4 * i + 2] << 16 |
                         (uint32_t)data[4 * i + 3] << 24;
            /* mostly inside the vocabulary, sometimes anything */
            ids[i] = (sel & 0x80) ? (ix_token)v : (ix_token)(v % (uint32_t)ix_tokenizer_n_vocab(t));
        }
        check_stream(t, ids, n, dflags);
        free(ids);
    } else {
        const char *text = (const char *)data;
        unsigned eflags = (sel & 0x08 ? IX_TOK_PARSE_SPECIAL : 0) | (sel & 0x80 ? IX_TOK_ADD_SPECIAL : 0);
        ix_token_vec v = {0};
        ix_errbuf err = {{0}};
        size_t bad;
        bool valid = ix_utf8_valid(text, size, &bad);
        ix_status s = ix_tokenizer_encode(t, text, size, eflags, &v, &err);
        if (!valid) {
            if (s != IX_ERR_UTF8 || v.n != 0 || !err.msg[0]) abort();
        } else if (s != IX_OK) {
            if (s != IX_ERR_NOMEM) abort();
        } else {
            int32_t nv = ix_tokenizer_n_vocab(t);
            for (size_t i = 0; i < v.n; i++)
                if (v.ids[i] < 0 || v.ids[i] >= nv) abort();
            /* SentencePiece writes spaces as U+2581: a U+2581 in the text
             * comes back as a space, in every SPM implementation. */
            bool spm_mark = ix_tokenizer_get_kind(t) == IX_TOKENIZER_SPM && memmem(text, size, "\xe2\x96\x81", 3);
            /* User-defined tokens match even without PARSE_SPECIAL (as in
             * llama.cpp), and SPM starts the text after one with a dummy
             * space: not a round trip by design. */
            bool user_defined = false;
            for (size_t i = 0; i < v.n; i++) {
                ix_token_type tt = ix_tokenizer_token_type(t, v.ids[i]);
                user_defined |= tt == IX_TOKEN_TYPE_USER_DEFINED || tt == IX_TOKEN_TYPE_CONTROL;
            }
            if (!(eflags & IX_TOK_PARSE_SPECIAL) && g_lossless[which] && !spm_mark && !user_defined) {
                /* BOS/EOS added by ADD_SPECIAL render as nothing by default */
                ix_buf out = {0};
                if (ix_tokenizer_decode(t, v.ids, v.n, 0, &out, &err) != IX_OK) abort();
                if (out.len != size || (size && memcmp(out.data, text, size))) {
                    fprintf(stderr, "fuzz_tokenizer: %s (%s): decode(encode(text)) != text (%zu vs %zu bytes)\n",
                            ix_tokenizer_model_name(t), ix_tokenizer_pre_name(t), out.len, size);
                    abort();
                }
                ix_buf_free(&out);
            }
            check_stream(t, v.ids, v.n, dflags);
        }
        ix_token_vec_free(&v);
    }
    if (ix_mem_live_count() != live) abort(); /* leak */
    return 0;
}
