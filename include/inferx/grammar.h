/*
 * inferx grammar: constrained decoding. A grammar (GBNF-like text, a JSON
 * Schema, or "any JSON object") becomes, at every generation step, a mask
 * over the vocabulary: which token ids may come next so that the output can
 * still complete the grammar. It depends on core and on the tokenizer (for
 * the bytes of each token) only: no model, no sampler, no HTTP.
 *
 * Three objects:
 *   ix_grammar          a compiled grammar. Immutable; any number of threads
 *                       may use one at once.
 *   ix_grammar_vocab    the vocabulary as byte strings in a trie, with its
 *                       end-of-generation ids. Immutable; shareable likewise.
 *   ix_grammar_matcher  the state of one generation: where in the grammar the
 *                       output is. Borrows a grammar and a vocab, which must
 *                       outlive it. Clones share a cache of grammar states and
 *                       token masks (so a clone is cheap and starts warm); a
 *                       matcher and all its clones are used by one thread at a
 *                       time (the engine thread).
 *
 * Use, per sequence and per step (docs/grammar.md has the details):
 *
 *   ix_grammar_from_json_schema(&g, schema, len, 0, &err);   // once per schema
 *   ix_grammar_vocab_create(&v, tokenizer, &err);              // once per model
 *   ix_grammar_matcher_create(&m, g, v, NULL, &err);           // per request
 *   loop:
 *     if (ix_grammar_matcher_must_end(m)) -> finish (the output is complete)
 *     ix_grammar_matcher_fill_mask(m, mask, n_words);   // bit id set: id allowed
 *     ix_sampler_set_mask(sampler, mask);               // sample.h
 *     ix_sampler_sample(sampler, logits, &r);
 *     ix_grammar_matcher_accept(m, r.id);               // EOG only when complete
 *
 * Masks are bitsets of uint32_t words: token id i is allowed iff bit (i & 31)
 * of word i >> 5 is set; ix_grammar_vocab_mask_words() words per mask. A token
 * is allowed iff all its bytes are accepted in sequence from the current
 * state; an end-of-generation token (ix_tokenizer_is_eog) iff the grammar is
 * complete there; a token with no bytes (control tokens) never.
 *
 * Everything is bytes: grammars are written in UTF-8, character classes are
 * sets of code points compiled to UTF-8 byte sequences, so a token may end in
 * the middle of a character and the output is always valid UTF-8.
 *
 * Every parser treats its input as hostile: the limits below bound the size of
 * what a grammar compiles to, and the matcher's caches are bounded by its
 * params, so no grammar can make memory or time grow without bound.
 */
#ifndef INFERX_GRAMMAR_H
#define INFERX_GRAMMAR_H

#include "inferx/core.h"
#include "inferx/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of a compiled grammar (IX_ERR_TOO_LONG with a position beyond). */
#define IX_GRAMMAR_MAX_TEXT_BYTES (1u << 20) /* GBNF text, and a schema's JSON */
#define IX_GRAMMAR_MAX_RULES 65536           /* after groups and repetitions expand */
#define IX_GRAMMAR_MAX_ELEMS (1u << 21)      /* grammar elements in all */
#define IX_GRAMMAR_MAX_NESTING 64            /* nested ( ) groups; schema depth */
#define IX_GRAMMAR_MAX_REPEAT 10000          /* m and n of x{m,n}; minItems, maxLength... */

typedef struct ix_grammar ix_grammar;

/* Compiles GBNF-like text (docs/grammar.md): rules `name ::= body`, start
 * rule `root`. On bad input: IX_ERR_FORMAT (syntax, undefined or left-
 * recursive rules, rules that can never complete), IX_ERR_UTF8 or
 * IX_ERR_TOO_LONG, with "line L, column C: ..." in err. *out is owned by the
 * caller (ix_grammar_destroy). Any thread. */
ix_status ix_grammar_parse(ix_grammar **out, const char *text, size_t len, ix_errbuf *err);

enum {
    /* No whitespace between JSON tokens (smallest output, fewest steps). By
     * default a bounded amount is allowed at every token boundary: nothing,
     * one space, or a newline and up to 20 spaces or tabs. */
    IX_GRAMMAR_SCHEMA_COMPACT = 1u << 0,
    /* OpenAI strict mode: every object must say additionalProperties: false
     * and list every property in required; IX_ERR_UNSUPPORTED otherwise. */
    IX_GRAMMAR_SCHEMA_STRICT = 1u << 1,
};

/* JSON Schema (the subset of docs/grammar.md, which is what OpenAI's strict
 * mode accepts, plus a few cheap extras) to GBNF text, appended to out. A
 * keyword outside the subset is IX_ERR_UNSUPPORTED naming it and its place
 * ("/properties/age: keyword 'multipleOf' is not supported"); malformed JSON
 * is IX_ERR_FORMAT with its line and column. Any thread. */
ix_status ix_json_schema_to_gbnf(const char *schema, size_t len, unsigned flags, ix_buf *out,
                                 ix_errbuf *err);
/* ix_json_schema_to_gbnf then ix_grammar_parse. */
ix_status ix_grammar_from_json_schema(ix_grammar **out, const char *schema, size_t len,
                                      unsigned flags, ix_errbuf *err);
/* Any JSON object (response_format {"type": "json_object"}); flags as above
 * (IX_GRAMMAR_SCHEMA_STRICT has nothing to act on and is ignored). */
ix_status ix_grammar_json_object(ix_grammar **out, unsigned flags, ix_errbuf *err);

void ix_grammar_destroy(ix_grammar *g); /* NULL is a no-op */
/* Rules after expansion (groups and repetitions become rules of their own). */
int32_t ix_grammar_n_rules(const ix_grammar *g);
/* Appends the compiled rules as GBNF text (every group and repetition
 * expanded, character classes as UTF-8 byte ranges), for debugging. */
ix_status ix_grammar_print(const ix_grammar *g, ix_buf *out);

/* ---- vocabulary ------------------------------------------------------------ */
typedef struct ix_grammar_vocab ix_grammar_vocab;

/* From a tokenizer: each token's bytes are ix_tokenizer_token_bytes(id, 0,
 * first = false), i.e. as the token reads in the middle of a text (an SPM "▁"
 * is a space); the end-of-generation ids are those ix_tokenizer_is_eog says.
 * The tokenizer may be destroyed afterwards. Any thread. */
ix_status ix_grammar_vocab_create(ix_grammar_vocab **out, const ix_tokenizer *t, ix_errbuf *err);
/* From explicit byte strings: bytes[i] is token i's (empty: never allowed);
 * eog lists the end-of-generation ids. Everything is copied. Tokens longer
 * than 1024 bytes are never allowed. */
ix_status ix_grammar_vocab_create_from_bytes(ix_grammar_vocab **out, const ix_str *bytes,
                                             int32_t n_vocab, const ix_token *eog, size_t n_eog,
                                             ix_errbuf *err);
void ix_grammar_vocab_destroy(ix_grammar_vocab *v); /* NULL is a no-op */
int32_t ix_grammar_vocab_n_vocab(const ix_grammar_vocab *v);
/* uint32_t words of one mask: (n_vocab + 31) / 32. */
size_t ix_grammar_vocab_mask_words(const ix_grammar_vocab *v);
/* The bytes the grammar matches token id against (empty: never allowed
 * as text; pointing into v). Out of range: empty. */
ix_str ix_grammar_vocab_token(const ix_grammar_vocab *v, ix_token id);
/* Whether id is one of the vocabulary's end-of-generation tokens. */
bool ix_grammar_vocab_is_eog(const ix_grammar_vocab *v, ix_token id);

/* ---- matcher ----------------------------------------------------------------- */
typedef struct ix_grammar_matcher ix_grammar_matcher;

typedef struct ix_grammar_matcher_params {
    /* Grammar states, parse stacks and transitions cached by a matcher and its
     * clones. Past this the cache is emptied and rebuilt from the live
     * matchers' states (one mask computation may overshoot it). */
    size_t state_cache_bytes; /* default 64 MiB */
    /* Token masks kept per grammar state (least recently used dropped). */
    size_t mask_cache_bytes; /* default 16 MiB */
    /* Parse stack depth (grammar nesting, e.g. JSON nesting times ~3); a
     * token that would go deeper is not allowed. */
    int32_t max_stack_depth; /* default 1024 */
} ix_grammar_matcher_params;

ix_grammar_matcher_params ix_grammar_matcher_default_params(void);

/* A matcher at the start of g, over v (both borrowed: they must outlive the
 * matcher and its clones). p NULL: defaults. Owned by the caller. */
ix_status ix_grammar_matcher_create(ix_grammar_matcher **out, const ix_grammar *g,
                                    const ix_grammar_vocab *v,
                                    const ix_grammar_matcher_params *p, ix_errbuf *err);
/* A matcher in the same state as m, sharing its caches (O(1); for n > 1 and
 * for speculation). The clone is destroyed on its own; the shared cache lives
 * until the last of the family is. Same thread rule as m. */
ix_status ix_grammar_matcher_clone(ix_grammar_matcher **out, ix_grammar_matcher *m);
/* Puts dst in src's state; both must be of one family (clones of each other),
 * else IX_ERR_INVALID. */
ix_status ix_grammar_matcher_copy_state(ix_grammar_matcher *dst, const ix_grammar_matcher *src);
void ix_grammar_matcher_destroy(ix_grammar_matcher *m); /* NULL is a no-op */
/* Back to the start of the grammar. */
void ix_grammar_matcher_reset(ix_grammar_matcher *m);

/* Writes the mask of tokens allowed next into mask (n_words words, at least
 * ix_grammar_vocab_mask_words; words past the vocabulary are zeroed). Masks
 * are cached per grammar state, so a repeated state costs a copy.
 * IX_ERR_UNSUPPORTED when the grammar turns out too ambiguous to follow
 * (more live parses, or more work in one call, than the bounds in
 * docs/grammar.md: the grammar, not the text, is at fault), IX_ERR_NOMEM;
 * the message is in ix_grammar_matcher_errmsg. After the end-of-generation
 * token the mask is empty. */
ix_status ix_grammar_matcher_fill_mask(ix_grammar_matcher *m, uint32_t *mask, size_t n_words);
/* Advances over token id. IX_ERR_INVALID (state unchanged) when the mask
 * would not allow it, IX_ERR_RANGE outside the vocabulary; an end-of-
 * generation token is accepted only where the grammar may end, and ends the
 * matcher (is_finished). Other errors as for fill_mask. */
ix_status ix_grammar_matcher_accept(ix_grammar_matcher *m, ix_token id);
/* Advances over raw bytes (e.g. text forced into the output); all or nothing:
 * IX_ERR_INVALID with the state unchanged if some byte is not accepted. */
ix_status ix_grammar_matcher_accept_bytes(ix_grammar_matcher *m, const char *bytes, size_t len);
/* Whether the output so far is a complete sentence of the grammar (an
 * end-of-generation token is allowed now). */
bool ix_grammar_matcher_can_end(const ix_grammar_matcher *m);
/* Whether nothing but the end can follow: the engine should finish the
 * sequence (needed when the vocabulary has no end-of-generation token). */
bool ix_grammar_matcher_must_end(const ix_grammar_matcher *m);
/* Whether an end-of-generation token was accepted. */
bool ix_grammar_matcher_is_finished(const ix_grammar_matcher *m);
/* Appends to out a shortest byte string that completes the grammar from here
 * (e.g. to close a JSON document cut short by max_tokens). IX_ERR_NOT_FOUND
 * when none of at most max_len bytes exists. */
ix_status ix_grammar_matcher_complete_bytes(ix_grammar_matcher *m, size_t max_len, ix_buf *out);
/* Last error message of the family's cache ("" if none). */
const char *ix_grammar_matcher_errmsg(const ix_grammar_matcher *m);

typedef struct ix_grammar_matcher_stats {
    int64_t n_states;      /* grammar states cached now */
    int64_t n_stacks;      /* parse stack nodes cached now */
    size_t cache_bytes;    /* memory of states, stacks, transitions and masks */
    int64_t mask_hits;     /* fill_mask calls answered from the mask cache */
    int64_t mask_misses;   /* fill_mask calls that walked the token trie */
    int64_t trie_nodes;    /* trie nodes visited by those walks */
    int64_t flushes;       /* times the state cache was emptied */
    int64_t expansions;    /* parse stack expansions computing transitions */
} ix_grammar_matcher_stats;
/* Statistics of the family's shared cache. */
void ix_grammar_matcher_get_stats(const ix_grammar_matcher *m, ix_grammar_matcher_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_GRAMMAR_H */
