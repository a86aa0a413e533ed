/* libFuzzer target for the grammar parsers and the matcher. The first byte
 * chooses: even, the rest is GBNF text; odd, a JSON Schema (bits 1-2 are the
 * flags). A failure must leave no grammar and say why, with a status of the
 * parsers' own. A grammar that compiles is then driven through a matcher on a
 * small fixed vocabulary: masks, tokens chosen by the input's bytes among
 * those allowed (each must be accepted), completion. No leak either way.
 * Also linked into test_grammar_corpus, which replays tests/corpus/grammar/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The 256 bytes, some pieces, and an end-of-generation id; built once. */
static ix_grammar_vocab *fuzz_vocab(int32_t *n_vocab) {
    static ix_grammar_vocab *v;
    static const char *const pieces[] = {"{\"", "\":", "\",", "\"}", "  ", "\n  ", "true", "null", "12", "é", "ab", "\\n"};
    enum { N = 256 + 12 + 1 };
    *n_vocab = N;
    if (v) return v;
    static char ch[256];
    ix_str bytes[N];
    for (int i = 0; i < 256; i++) {
        ch[i] = (char)i;
        bytes[i] = (ix_str){&ch[i], 1};
    }
    for (int i = 0; i < 12; i++) bytes[256 + i] = (ix_str){pieces[i], strlen(pieces[i])};
    bytes[N - 1] = (ix_str){NULL, 0};
    ix_token eog = N - 1;
    if (ix_grammar_vocab_create_from_bytes(&v, bytes, N, &eog, 1, NULL) != IX_OK) abort();
    return v;
}

static void drive(const ix_grammar *g, const uint8_t *data, size_t size) {
    int32_t n_vocab;
    ix_grammar_vocab *v = fuzz_vocab(&n_vocab);
    ix_grammar_matcher_params p = ix_grammar_matcher_default_params();
    p.state_cache_bytes = 4 << 20; /* small: flushes get exercised */
    p.mask_cache_bytes = 1 << 12;
    ix_grammar_matcher *m, *c = NULL;
    ix_status s = ix_grammar_matcher_create(&m, g, v, &p, NULL);
    if (s == IX_ERR_UNSUPPORTED || s == IX_ERR_NOMEM) return; /* too ambiguous */
    if (s != IX_OK) abort();
    uint32_t mask[(256 + 12 + 1 + 31) / 32];
    for (size_t step = 0; step < 32 && !ix_grammar_matcher_is_finished(m); step++) {
        s = ix_grammar_matcher_fill_mask(m, mask, IX_ARRAY_LEN(mask));
        if (s != IX_OK) {
            if (s != IX_ERR_UNSUPPORTED && s != IX_ERR_NOMEM) abort();
            break;
        }
        int32_t n_allowed = 0;
        for (int32_t id = 0; id < n_vocab; id++) n_allowed += mask[id >> 5] >> (id & 31) & 1;
        if (n_allowed == 0) break; /* only past the stack depth limit */
        int32_t k = (int32_t)(size ? data[step % size] : 0) % n_allowed;
        ix_token pick = 0;
        for (int32_t id = 0; id < n_vocab; id++)
            if ((mask[id >> 5] >> (id & 31) & 1) && k-- == 0) pick = id;
        if (step == 3 && ix_grammar_matcher_clone(&c, m) != IX_OK) abort();
        s = ix_grammar_matcher_accept(m, pick);
        if (s != IX_OK && s != IX_ERR_UNSUPPORTED && s != IX_ERR_NOMEM) abort(); /* allowed, so accepted */
    }
    ix_buf out = {0};
    if (c) {
        s = ix_grammar_matcher_complete_bytes(c, 256, &out);
        if (s == IX_OK && ix_grammar_matcher_accept_bytes(c, out.data, out.len) == IX_OK &&
            !ix_grammar_matcher_can_end(c))
            abort(); /* a completion completes */
    }
    ix_buf_free(&out);
    ix_grammar_matcher_destroy(c);
    ix_grammar_matcher_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int32_t n_vocab;
    fuzz_vocab(&n_vocab);
    if (size == 0) return 0;
    size_t live = ix_mem_live_count();
    ix_grammar *g = NULL;
    ix_errbuf err = {{0}};
    const char *text = (const char *)data + 1;
    ix_status s = data[0] & 1 ? ix_grammar_from_json_schema(&g, text, size - 1, (data[0] >> 1) & 3, &err)
                              : ix_grammar_parse(&g, text, size - 1, &err);
    if (s == IX_OK) {
        drive(g, data, size);
        ix_grammar_destroy(g);
    } else if (g || err.msg[0] == '\0' ||
               (s != IX_ERR_FORMAT && s != IX_ERR_UNSUPPORTED && s != IX_ERR_TOO_LONG && s != IX_ERR_UTF8 &&
                s != IX_ERR_NOMEM)) {
        abort(); /* a failure must leave no grammar and say why */
    }
    if (ix_mem_live_count() != live) abort(); /* leak */
    return 0;
}
