/*
 * Byte-level BPE pre-tokenizers (library-internal).
 *
 * Before BPE merges run, text is split into "words" by the split rules of the
 * model family named in tokenizer.ggml.pre. Each family's rules are a sequence
 * of patterns applied in turn: every piece produced so far is split again by
 * the next pattern (text between two matches becomes a piece of its own). The
 * patterns use Unicode categories (\p{L} letters, \p{N} numbers, \p{P}
 * punctuation, \s whitespace), which come from utf8proc (unicode.c).
 *
 * All splitters run in time linear in the input length.
 */
#ifndef IX_TOKENIZER_PRETOK_H
#define IX_TOKENIZER_PRETOK_H

#include "inferx/core.h"

typedef enum ix__pretok_kind {
    IX__PRETOK_GPT2 = 0,       /* "default", "gpt-2", "mpt", "olmo", ... */
    IX__PRETOK_LLAMA3,         /* "llama-bpe", "llama3", "smaug-bpe", ... */
    IX__PRETOK_QWEN2,          /* "qwen2" */
    IX__PRETOK_DEEPSEEK_LLM,   /* "deepseek-llm" */
    IX__PRETOK_DEEPSEEK_CODER, /* "deepseek-coder" */
    IX__PRETOK_FALCON,         /* "falcon" */
    IX__PRETOK_STARCODER,      /* "starcoder", "refact", "smollm", ... */
    IX__PRETOK_COUNT
} ix__pretok_kind;

/* Maps a tokenizer.ggml.pre name to its rules. IX_ERR_UNSUPPORTED for a name
 * we do not know (the caller reports it). */
ix_status ix__pretok_from_name(const char *name, size_t len, ix__pretok_kind *out);
const char *ix__pretok_kind_name(ix__pretok_kind k);

/* Word boundaries: a list of (offset, length) pieces covering the text in
 * order, without gaps or overlaps. */
typedef struct ix__span {
    size_t off, len;
} ix__span;

typedef struct ix__span_vec {
    ix__span *v;
    size_t n, cap;
} ix__span_vec;
void ix__span_vec_free(ix__span_vec *s);

/* Splits text[0..len) (valid UTF-8; the caller has checked) into words,
 * appending them to out. Returns IX_ERR_NOMEM on allocation failure. */
ix_status ix__pretok_split(ix__pretok_kind k, const char *text, size_t len, ix__span_vec *out);

/* ---- Unicode helpers (unicode.c) ------------------------------------------ */
/* Decodes one code point at s[0..len) (valid UTF-8); *n_bytes gets its length. */
uint32_t ix__utf8_decode(const char *s, size_t len, size_t *n_bytes);
/* Encodes cp into out (4 bytes room); returns the byte count. */
size_t ix__utf8_encode(uint32_t cp, char *out);
/* Length of the UTF-8 sequence that starts with byte c (1..4), 1 for a stray
 * continuation or invalid lead byte. */
size_t ix__utf8_len(unsigned char c);

/* Category flags of a code point. */
enum {
    IX__CP_LETTER = 1u << 0,      /* \p{L} */
    IX__CP_NUMBER = 1u << 1,      /* \p{N} */
    IX__CP_PUNCT = 1u << 2,       /* \p{P} */
    IX__CP_WHITESPACE = 1u << 3,  /* \s (Unicode White_Space) */
    IX__CP_SYMBOL = 1u << 4,      /* \p{S} */
    IX__CP_MARK = 1u << 5,        /* \p{M} */
    IX__CP_CONTROL = 1u << 6,     /* \p{C} */
};
unsigned ix__cp_flags(uint32_t cp);

#endif /* IX_TOKENIZER_PRETOK_H */
