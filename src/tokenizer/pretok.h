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
 * The rules and their quirks are llama.cpp's (src/llama-vocab.cpp,
 * src/unicode.cpp), since its tokenizer outputs are our test vectors; see
 * pretok.c for where they differ from a textbook regex engine.
 *
 * All splitters run in time linear in the input length and allocate nothing
 * but the output vector.
 */
#ifndef IX_TOKENIZER_PRETOK_H
#define IX_TOKENIZER_PRETOK_H

#include "inferx/core.h"

typedef enum ix__pretok_kind {
    IX__PRETOK_GPT2 = 0,       /* "gpt-2", "mpt", "olmo", ... */
    IX__PRETOK_LLAMA3,         /* "llama-bpe", "llama3", "smaug-bpe", ... */
    IX__PRETOK_QWEN2,          /* "qwen2" */
    IX__PRETOK_DEEPSEEK_LLM,   /* "deepseek-llm" */
    IX__PRETOK_DEEPSEEK_CODER, /* "deepseek-coder" */
    IX__PRETOK_FALCON,         /* "falcon" */
    IX__PRETOK_STARCODER,      /* "starcoder", "refact", "smollm", ... */
    IX__PRETOK_DEFAULT,        /* "default" (or no name): llama.cpp's fallback */
    IX__PRETOK_COUNT
} ix__pretok_kind;

/* What else a name sets in llama.cpp (llama_vocab::impl::load) besides the
 * split rules: the defaults a BPE vocabulary gets when its GGUF file has no key
 * saying otherwise. Without IX__PRE_CLEAN_SPACES clean_spaces is false. */
enum {
    IX__PRE_ADD_BOS = 1u << 0,       /* add_bos_token defaults to true */
    IX__PRE_IGNORE_MERGES = 1u << 1, /* a word that is a vocabulary piece is one token */
    IX__PRE_CLEAN_SPACES = 1u << 2,  /* clean_up_tokenization_spaces when decoding */
    IX__PRE_NO_BOS_ID = 1u << 3,     /* no default BOS id (the BPE default is 11) */
};

/* Maps a tokenizer.ggml.pre name (name[0..len), case-sensitive) to its rules
 * and, when defaults is not NULL, its IX__PRE_* defaults. IX_ERR_UNSUPPORTED
 * for a name we do not know (the caller reports it). An empty name gives
 * IX__PRETOK_DEFAULT and the defaults of "default", as a missing key does in
 * llama.cpp. */
ix_status ix__pretok_from_name(const char *name, size_t len, ix__pretok_kind *out,
                               unsigned *defaults);
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
 * appending them to out (offsets are relative to text; zero-initialise out or
 * reuse one). Every word is non-empty; len == 0 appends nothing. Returns
 * IX_ERR_NOMEM on allocation failure (out->n is then as it was on entry) and
 * IX_ERR_INVALID for a bad kind or NULL pointers. */
ix_status ix__pretok_split(ix__pretok_kind k, const char *text, size_t len, ix__span_vec *out);
/* The same, also storing in *n_steps (if not NULL) how many code point reads
 * the split took: tests check that it grows linearly with len. */
ix_status ix__pretok_split_ex(ix__pretok_kind k, const char *text, size_t len, ix__span_vec *out,
                              uint64_t *n_steps);

/* ---- Unicode helpers (unicode.c) ------------------------------------------ */
/* Decodes one code point at s[0..len), len >= 1; *n_bytes gets its length.
 * A malformed sequence (or overlong, surrogate, > U+10FFFF) decodes as
 * U+FFFD with *n_bytes = 1. */
uint32_t ix__utf8_decode(const char *s, size_t len, size_t *n_bytes);
/* Encodes cp into out (4 bytes room); returns the byte count. A surrogate or
 * a value past U+10FFFF is written as U+FFFD. */
size_t ix__utf8_encode(uint32_t cp, char *out);
/* Length of the UTF-8 sequence that starts with byte c (1..4), 1 for a stray
 * continuation or invalid lead byte. */
size_t ix__utf8_len(unsigned char c);

/* Category flags of a code point (general category from utf8proc; Z has no
 * flag of its own, all of Z being whitespace; Cn/Co/Cs/Cf/Cc are CONTROL). */
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
/* ix__cp_flags of the ASCII code points, for loops that test them inline. */
extern const unsigned char ix__cp_ascii_flags[128];

#endif /* IX_TOKENIZER_PRETOK_H */
