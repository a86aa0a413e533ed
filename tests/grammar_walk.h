/* Generating a document token by token through a grammar matcher, for the
 * grammar tests and bench/grammar_bench.c: the first `free_steps` tokens are
 * drawn uniformly among those the mask allows (end-of-generation included),
 * then the walk heads for the end: each step takes the longest allowed token
 * that is a prefix of the shortest completion (ix_grammar_matcher_complete_
 * bytes), so every walk ends. Public API only. */
#ifndef INFERX_TESTS_GRAMMAR_WALK_H
#define INFERX_TESTS_GRAMMAR_WALK_H

#include <stdint.h>
#include <string.h>

#include "inferx/grammar.h"

typedef struct gwalk_vocab {
    int32_t n_vocab;
    const ix_str *bytes; /* (n_vocab) each token's bytes, as the grammar vocab has them */
    const uint8_t *eog;  /* (n_vocab) 1 for end-of-generation ids */
} gwalk_vocab;

static inline uint64_t gwalk_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The token to take next; IX_TOKEN_NONE when the mask is empty. */
static inline ix_token gwalk_pick(ix_grammar_matcher *m, const gwalk_vocab *v, const uint32_t *mask,
                                  bool head_home, uint64_t *rng) {
    size_t nw = ((size_t)v->n_vocab + 31) / 32;
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
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (!(mask[id >> 5] >> (id & 31) & 1)) continue;
        if (v->eog[id]) {
            if (home.len == 0 && best == IX_TOKEN_NONE) best = id;
            continue;
        }
        size_t n = v->bytes[id].len;
        if (n > best_len && n <= home.len && memcmp(v->bytes[id].ptr, home.data, n) == 0) {
            best = id;
            best_len = n;
        }
    }
    ix_buf_free(&home);
    return best;
}

/* Runs one walk from m's current state; appends the text to out. Returns
 * the number of tokens taken, or -1 when a step failed (mask empty before
 * the end, a token the mask allowed refused, a matcher error). */
static inline int64_t gwalk_run(ix_grammar_matcher *m, const gwalk_vocab *v, uint32_t *mask,
                                int64_t free_steps, int64_t max_steps, uint64_t *rng, ix_buf *out) {
    size_t nw = ((size_t)v->n_vocab + 31) / 32;
    int64_t steps = 0;
    while (!ix_grammar_matcher_is_finished(m) && steps < max_steps) {
        if (ix_grammar_matcher_fill_mask(m, mask, nw) != IX_OK) return -1;
        ix_token id = gwalk_pick(m, v, mask, steps >= free_steps, rng);
        if (id == IX_TOKEN_NONE) return ix_grammar_matcher_must_end(m) ? steps : -1;
        if (ix_grammar_matcher_accept(m, id) != IX_OK) return -1;
        if (!v->eog[id] && ix_buf_append(out, v->bytes[id].ptr, v->bytes[id].len) != IX_OK) return -1;
        steps++;
    }
    return steps;
}

#endif /* INFERX_TESTS_GRAMMAR_WALK_H */
