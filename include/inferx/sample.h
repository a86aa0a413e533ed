/*
 * inferx sample: turns a row of logits into the next token.
 *
 * A sampler is per request (per sequence): it owns its RNG (seeded, so the
 * same seed and input give the same output), its penalty history and its
 * scratch. The chain, in order:
 *   1. logit bias (OpenAI logit_bias: added to the raw logits)
 *   2. repetition penalty (over prompt + generated tokens; positive logits are
 *      divided by it, negative ones multiplied), presence and frequency
 *      penalties (OpenAI semantics, over generated tokens only)
 *   3. temperature 0 -> greedy argmax (ties: lowest id)
 *   4. temperature scaling, then top-k, top-p (nucleus) and min-p filtering
 *   5. a draw from the remaining distribution
 * A token mask (constrained decoding, ix_sampler_set_mask) applies after
 * steps 1-2: the tokens it excludes get logit -inf.
 * Log-probabilities reported (of the chosen token and the top-n alternatives)
 * are those of the model's distribution after steps 1-2 (and the mask),
 * before temperature and filtering, which is what OpenAI-compatible servers
 * report; tokens a mask excludes are never among the alternatives.
 *
 * Stop strings live here too: ix_stopper holds back text that might be the
 * start of a stop string, so a stop string is never emitted even when it
 * spans tokens.
 *
 * Thread safety: a sampler or stopper is used by one thread at a time.
 */
#ifndef INFERX_SAMPLE_H
#define INFERX_SAMPLE_H

#include "inferx/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IX_SAMPLE_MAX_LOGPROBS 20

typedef struct ix_logit_bias {
    ix_token id;
    float bias;
} ix_logit_bias;

typedef struct ix_sample_params {
    float temperature;        /* 0: greedy; default 1 */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off */
    float presence_penalty;   /* 0: off (OpenAI range -2..2) */
    float frequency_penalty;  /* 0: off (OpenAI range -2..2) */
    uint64_t seed;
    const ix_logit_bias *logit_bias; /* copied by ix_sampler_create */
    size_t n_logit_bias;
    /* Compute log-probabilities (a pass over the vocabulary per token, so off
     * by default): of the chosen token, plus n_logprobs alternatives
     * (0..IX_SAMPLE_MAX_LOGPROBS; n_logprobs > 0 implies logprobs). */
    bool logprobs;
    int32_t n_logprobs;
} ix_sample_params;

ix_sample_params ix_sample_default_params(void);
/* IX_ERR_INVALID with a message naming the field when a value is out of range
 * (negative temperature, top_p outside (0,1], a bias id outside the vocab...). */
ix_status ix_sample_params_check(const ix_sample_params *p, int32_t n_vocab, ix_errbuf *err);

typedef struct ix_sample_result {
    ix_token id;
    float logprob; /* of id; 0 unless logprobs were asked for */
    int32_t n_top;
    ix_token top_ids[IX_SAMPLE_MAX_LOGPROBS];    /* best first */
    float top_logprobs[IX_SAMPLE_MAX_LOGPROBS];
} ix_sample_result;

typedef struct ix_sampler ix_sampler;

ix_status ix_sampler_create(ix_sampler **out, const ix_sample_params *p, int32_t n_vocab,
                            ix_errbuf *err);
void ix_sampler_destroy(ix_sampler *s); /* NULL is a no-op */
/* Prompt tokens count for the repetition penalty only. */
ix_status ix_sampler_add_prompt(ix_sampler *s, const ix_token *ids, size_t n);
/* Records a generated token (the caller's choice, usually the sampled one). */
void ix_sampler_accept(ix_sampler *s, ix_token id);
/* Forget generated tokens and restart the RNG from the seed (for a request
 * that is recomputed from scratch). Prompt history stays. */
void ix_sampler_reset(ix_sampler *s);
/* Samples from logits (n_vocab floats; not modified). Does not accept the
 * token: call ix_sampler_accept. With a mask that allows no token:
 * IX_ERR_STATE and out->id = IX_TOKEN_NONE. */
ix_status ix_sampler_sample(ix_sampler *s, const float *logits, ix_sample_result *out);
/* Restricts the next ix_sampler_sample (that call only) to the tokens a mask
 * allows: n_vocab bits in uint32_t words, token i allowed iff bit (i & 31) of
 * word i >> 5 is set; bits past n_vocab are ignored. The mask is copied; NULL
 * removes one set before. This is the hook for constrained decoding: the
 * caller (the engine) fills the mask from a grammar matcher each step
 * (ix_grammar_matcher_fill_mask in grammar.h writes this very layout), then
 * samples, then advances the matcher with the chosen token; the sampler
 * itself knows nothing of grammars. */
void ix_sampler_set_mask(ix_sampler *s, const uint32_t *mask);

/* ---- stop strings --------------------------------------------------------- */
typedef struct ix_stopper ix_stopper;

/* strings: n stop strings (copied); empty strings are ignored. */
ix_status ix_stopper_create(ix_stopper **out, const char *const *strings, size_t n);
void ix_stopper_destroy(ix_stopper *st);
/* Feeds newly generated text. Appends to emit whatever can no longer be part
 * of a stop string. When a stop string completes, *stopped becomes true, emit
 * gets the text before it, and the rest is discarded. */
ix_status ix_stopper_feed(ix_stopper *st, const char *text, size_t len, ix_buf *emit,
                          bool *stopped);
/* End of generation without a stop: releases the held-back text. */
ix_status ix_stopper_flush(ix_stopper *st, ix_buf *emit);
/* Longest stop string, in bytes (how much text may be held back). */
size_t ix_stopper_max_len(const ix_stopper *st);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_SAMPLE_H */
