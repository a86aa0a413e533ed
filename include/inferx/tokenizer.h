/*
 * inferx tokenizer: SentencePiece-style (score-merged, byte fallback) and
 * byte-level BPE (ranked merges, GPT-2 byte mapping, per-family pre-tokenizer
 * split rules) built from GGUF tokenizer metadata, plus an incremental
 * detokenizer for streaming.
 *
 * Thread safety: a tokenizer is immutable after creation; any number of
 * threads may encode and decode with it at once. A detokenizer (ix_detok) is a
 * small per-stream state owned by one thread at a time.
 * Complexity: encoding is O(n log n) in the input length (no quadratic merge
 * loops); decoding is linear.
 */
#ifndef INFERX_TOKENIZER_H
#define INFERX_TOKENIZER_H

#include "inferx/core.h"
#include "inferx/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ix_tokenizer_kind {
    IX_TOKENIZER_SPM = 0, /* tokenizer.ggml.model = "llama" */
    IX_TOKENIZER_BPE = 1, /* tokenizer.ggml.model = "gpt2" */
} ix_tokenizer_kind;

/* GGUF token types (tokenizer.ggml.token_type). */
typedef enum ix_token_type {
    IX_TOKEN_TYPE_UNDEFINED = 0,
    IX_TOKEN_TYPE_NORMAL = 1,
    IX_TOKEN_TYPE_UNKNOWN = 2,
    IX_TOKEN_TYPE_CONTROL = 3,
    IX_TOKEN_TYPE_USER_DEFINED = 4,
    IX_TOKEN_TYPE_UNUSED = 5,
    IX_TOKEN_TYPE_BYTE = 6,
} ix_token_type;

/* A growable array of token ids; zero-initialise, then ix_token_vec_free. */
typedef struct ix_token_vec {
    ix_token *ids;
    size_t n, cap;
} ix_token_vec;
ix_status ix_token_vec_push(ix_token_vec *v, ix_token id);
void ix_token_vec_free(ix_token_vec *v);

typedef struct ix_tokenizer ix_tokenizer;

/* Builds a tokenizer from a reader's tokenizer.* keys (works on vocab-only
 * files). Everything needed is copied: the reader may be closed afterwards. */
ix_status ix_tokenizer_create(ix_tokenizer **out, const ix_gguf *g, ix_errbuf *err);
/* Opens path, builds the tokenizer, closes the file. */
ix_status ix_tokenizer_load(ix_tokenizer **out, const char *path, ix_errbuf *err);
void ix_tokenizer_destroy(ix_tokenizer *t); /* NULL is a no-op */

ix_tokenizer_kind ix_tokenizer_get_kind(const ix_tokenizer *t);
/* "llama" / "gpt2" and the pre-tokenizer name ("default", "llama-bpe", ...). */
const char *ix_tokenizer_model_name(const ix_tokenizer *t);
const char *ix_tokenizer_pre_name(const ix_tokenizer *t);
int32_t ix_tokenizer_n_vocab(const ix_tokenizer *t);
/* Special ids, IX_TOKEN_NONE when the vocabulary has none. */
ix_token ix_tokenizer_bos(const ix_tokenizer *t);
ix_token ix_tokenizer_eos(const ix_tokenizer *t);
ix_token ix_tokenizer_eot(const ix_tokenizer *t);
ix_token ix_tokenizer_unk(const ix_tokenizer *t);
ix_token ix_tokenizer_pad(const ix_tokenizer *t);
/* Whether IX_TOK_ADD_SPECIAL adds BOS / EOS (see there). */
bool ix_tokenizer_add_bos(const ix_tokenizer *t);
bool ix_tokenizer_add_eos(const ix_tokenizer *t);
/* End of generation: EOS, EOT, or another token the vocabulary marks so. */
bool ix_tokenizer_is_eog(const ix_tokenizer *t, ix_token id);
/* The vocabulary entry as stored (SPM "▁the", BPE "Ġthe"); empty if out of range. */
ix_str ix_tokenizer_piece(const ix_tokenizer *t, ix_token id);
ix_token_type ix_tokenizer_token_type(const ix_tokenizer *t, ix_token id);
/* Exact lookup of a vocabulary entry; IX_TOKEN_NONE if absent. */
ix_token ix_tokenizer_find(const ix_tokenizer *t, const char *piece, size_t len);

/* The longest special token (control, user-defined or unknown, as
 * IX_TOK_PARSE_SPECIAL recognises them) whose text starts at text[i] of
 * text[0..len); IX_TOKEN_NONE if none does (or i >= len). For callers that
 * decide themselves which occurrences count (the server accepts none inside
 * message content). */
ix_token ix_tokenizer_special_at(const ix_tokenizer *t, const char *text, size_t len, size_t i);

/* For callers that put special tokens between pieces of text themselves:
 * the part of text[0..len) that encoding keeps between special tokens
 * `before` and `after` (IX_TOKEN_NONE: the start / end of the text). Some
 * special tokens swallow the whitespace (' ', \t, \n, \v, \f, \r) right
 * after or before them: llama.cpp's rstrip / lstrip token attributes, which
 * GGUF files do not carry; it sets them by model name (every Phi-3 chat
 * marker strips what follows it), and so do we. Out-of-range ids strip
 * nothing. The result points into text. */
ix_str ix_tokenizer_trim_between(const ix_tokenizer *t, ix_token before, const char *text,
                                 size_t len, ix_token after);

enum {
    /* Add BOS / EOS as the vocabulary's add_bos_token / add_eos_token keys
     * say; without a key, as llama.cpp defaults it (BOS for SPM and for the
     * LLaMA-3 pre-tokenizer names, never EOS). */
    IX_TOK_ADD_SPECIAL = 1u << 0,
    /* Recognise control / special token text ("<s>", "<|eot_id|>") in the
     * input; without it such text is tokenized as plain characters. */
    IX_TOK_PARSE_SPECIAL = 1u << 1,
};

/* Appends the tokens of text[0..len) to out. Text must be valid UTF-8
 * (IX_ERR_UTF8 with the byte offset in err otherwise). */
ix_status ix_tokenizer_encode(const ix_tokenizer *t, const char *text, size_t len, unsigned flags,
                              ix_token_vec *out, ix_errbuf *err);

enum {
    /* Render control tokens (BOS, EOS, <|im_end|>...) as their text; by
     * default they produce nothing. */
    IX_DETOK_RENDER_SPECIAL = 1u << 0,
    /* Keep the SPM dummy-prefix space of the first token (default: removed, so
     * decode(encode(text)) == text). */
    IX_DETOK_KEEP_LEADING_SPACE = 1u << 1,
    /* ix_tokenizer_decode only: when the vocabulary asks for it (most BPE
     * pre-tokenizers, as in llama.cpp), drop the spaces that
     * clean_up_tokenization_spaces drops (" ." -> ".", " 's" -> "'s", ...) as
     * llama.cpp's llama_detokenize does. Its generated text (token by token)
     * is not cleaned, hence off by default. ix_detok_create refuses it
     * (IX_ERR_INVALID): the rule needs text that has not arrived yet. */
    IX_DETOK_CLEAN_SPACES = 1u << 2,
};

/* Appends the text of ids to out. Out-of-range ids are IX_ERR_RANGE. */
ix_status ix_tokenizer_decode(const ix_tokenizer *t, const ix_token *ids, size_t n, unsigned flags,
                              ix_buf *out, ix_errbuf *err);

/* The bytes one token contributes (byte tokens give their byte, SPM "▁" gives
 * a space, BPE pieces are mapped back to bytes); `first` says whether it is
 * the first token of the text (SPM leading-space rule). */
ix_status ix_tokenizer_token_bytes(const ix_tokenizer *t, ix_token id, unsigned flags, bool first,
                                   ix_buf *out);

/* ---- incremental detokenizer -------------------------------------------
 * Fed one token at a time, emits only complete UTF-8 sequences; the bytes of a
 * character split across tokens are held back until it is complete. The
 * concatenation of every push plus the final flush is byte-identical to
 * ix_tokenizer_decode of the whole sequence with the same flags. */
typedef struct ix_detok ix_detok;
ix_status ix_detok_create(ix_detok **out, const ix_tokenizer *t, unsigned flags);
void ix_detok_destroy(ix_detok *d);
/* Appends to out the newly completed text (possibly nothing). */
ix_status ix_detok_push(ix_detok *d, ix_token id, ix_buf *out);
/* Appends whatever is held back (an incomplete sequence at the end of the
 * stream, emitted as its raw bytes) and resets the state for a new stream. */
ix_status ix_detok_flush(ix_detok *d, ix_buf *out);
/* Bytes currently held back. */
size_t ix_detok_pending(const ix_detok *d);

/* Checks UTF-8 validity (no overlongs, no surrogates, <= U+10FFFF). Returns
 * true if valid; otherwise false and the offset of the first bad byte. */
bool ix_utf8_valid(const char *s, size_t len, size_t *bad_offset);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_TOKENIZER_H */
