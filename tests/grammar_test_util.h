/* Helpers shared by the grammar tests, the fuzz target's replay and
 * bench/grammar_bench.c (public API only):
 *   - a vocabulary of the 256 single bytes plus one end-of-generation id;
 *   - generating a document token by token through a matcher: the first
 *     `free_steps` tokens are drawn uniformly among those the mask allows
 *     (end of generation included), then the walk heads for the end, each
 *     step taking the longest allowed token that is a prefix of the shortest
 *     completion (ix_grammar_matcher_complete_bytes), so every walk ends. */
#ifndef INFERX_TESTS_GRAMMAR_TEST_UTIL_H
#define INFERX_TESTS_GRAMMAR_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/grammar.h"

/* Token i < 256 is byte i; token 256 is end-of-generation. Aborts on failure. */
static inline ix_grammar_vocab *gtest_byte_vocab(void) {
    static char ch[256];
    ix_str bytes[257];
    for (int i = 0; i < 256; i++) {
        ch[i] = (char)i;
        bytes[i] = (ix_str){&ch[i], 1};
    }
    bytes[256] = (ix_str){NULL, 0};
    ix_token eog = 256;
    ix_grammar_vocab *v;
    if (ix_grammar_vocab_create_from_bytes(&v, bytes, 257, &eog, 1, NULL) != IX_OK) abort();
    return v;
}

static inline uint64_t gwalk_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static inline bool gwalk_allowed(const uint32_t *mask, ix_token id) { return mask[id >> 5] >> (id & 31) & 1; }

/* The token to take next; IX_TOKEN_NONE when there is none. */
static inline ix_token gwalk_pick(ix_grammar_matcher *m, const ix_grammar_vocab *v, const uint32_t *mask,
                                  bool head_home, uint64_t *rng) {
    int32_t n_vocab = ix_grammar_vocab_n_vocab(v);
    size_t nw = ix_grammar_vocab_mask_words(v);
    if (!head_home) {
        int64_t n = 0;
        for (size_t w = 0; w < nw; w++) n += __builtin_popcount(mask[w]);
        if (n == 0) return IX_TOKEN_NONE;
        int64_t k = (int64_t)(gwalk_rand(rng) % (uint64_t)n);
        for (size_t w = 0; w < nw; w++) {
            int c = __builtin_popcount(mask[w]);
            if (k >= c) {
                k -= c;
                continue;
            }
            uint32_t bits = mask[w];
            for (; k > 0; k--) bits &= bits - 1;
            return (ix_token)(w * 32 + (size_t)__builtin_ctz(bits));
        }
        return IX_TOKEN_NONE;
    }
    ix_buf home = {0};
    if (ix_grammar_matcher_complete_bytes(m, 1 << 16, &home) != IX_OK) return IX_TOKEN_NONE;
    ix_token best = IX_TOKEN_NONE;
    size_t best_len = 0;
    for (ix_token id = 0; id < n_vocab; id++) {
        if (!gwalk_allowed(mask, id)) continue;
        if (ix_grammar_vocab_is_eog(v, id)) {
            if (home.len == 0 && best == IX_TOKEN_NONE) best = id;
            continue;
        }
        ix_str t = ix_grammar_vocab_token(v, id);
        if (t.len > best_len && t.len <= home.len && memcmp(t.ptr, home.data, t.len) == 0) {
            best = id;
            best_len = t.len;
        }
    }
    ix_buf_free(&home);
    return best;
}

/* Runs one walk from m's current state; appends the text to out. Returns
 * the number of tokens taken, or -1 when a step failed (mask empty before
 * the end, a token the mask allowed refused, a matcher error). */
static inline int64_t gwalk_run(ix_grammar_matcher *m, const ix_grammar_vocab *v, uint32_t *mask,
                                int64_t free_steps, int64_t max_steps, uint64_t *rng, ix_buf *out) {
    size_t nw = ix_grammar_vocab_mask_words(v);
    int64_t steps = 0;
    while (!ix_grammar_matcher_is_finished(m) && steps < max_steps) {
        if (ix_grammar_matcher_fill_mask(m, mask, nw) != IX_OK) return -1;
        ix_token id = gwalk_pick(m, v, mask, steps >= free_steps, rng);
        if (id == IX_TOKEN_NONE) return ix_grammar_matcher_must_end(m) ? steps : -1;
        if (ix_grammar_matcher_accept(m, id) != IX_OK) return -1;
        ix_str t = ix_grammar_vocab_token(v, id);
        if (t.len && ix_buf_append(out, t.ptr, t.len) != IX_OK) return -1;
        steps++;
    }
    return steps;
}

#endif /* INFERX_TESTS_GRAMMAR_TEST_UTIL_H */
