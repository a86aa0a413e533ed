/*
 * Tokenizer internals shared by tokenizer.c (vocabulary, special tokens,
 * dispatch), spm.c, bpe.c and detok.c.
 */
#ifndef IX_TOKENIZER_TOK_INT_H
#define IX_TOKENIZER_TOK_INT_H

#include "inferx/tokenizer.h"
#include "tokenizer/pretok.h"

/* Open-addressing string -> id table over the vocabulary arena. */
typedef struct ix__vocab_map {
    int32_t *slots; /* (cap) token id or -1 */
    uint32_t cap;   /* power of two */
} ix__vocab_map;

/* BPE merge table: (left id, right id) -> (rank, merged id). */
typedef struct ix__merge_entry {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
    int32_t rank;
    int32_t merged;
} ix__merge_entry;

struct ix_tokenizer {
    ix_tokenizer_kind kind;
    char model_name[32];
    char pre_name[64];
    ix__pretok_kind pre;
    bool ignore_merges; /* BPE: a word already in the vocabulary is one token */

    int32_t n_vocab;
    char *arena;          /* every piece, NUL-terminated, back to back */
    uint32_t *piece_off;  /* (n_vocab) offset of piece i in arena */
    uint32_t *piece_len;  /* (n_vocab) */
    float *scores;        /* (n_vocab) SPM merge scores; 0 when absent */
    uint8_t *types;       /* (n_vocab) ix_token_type */
    ix__vocab_map map;

    ix__merge_entry *merges; /* (merge_cap) BPE only */
    uint32_t merge_cap;
    int32_t n_merges;

    /* SPM: no piece contains "x▁" with x not ▁, so the text may be merged
     * word by word (see spm.c). */
    bool spm_word_split;
    /* SPM: byte fallback tokens <0xXX>, -1 when absent. */
    ix_token byte_token[256];
    /* BPE: the GPT-2 byte <-> printable code point mapping. */
    uint16_t byte_to_cp[256];
    int16_t cp_to_byte[512]; /* -1 when the code point is not a byte's image */
    ix_token bpe_byte_token[256]; /* token of the single mapped char of byte b */

    /* Special tokens recognised in text: CONTROL/UNKNOWN only with
     * IX_TOK_PARSE_SPECIAL, USER_DEFINED always. Sorted by first byte then by
     * length descending; first_special[b] indexes the first with first byte b. */
    ix_token *special;
    int32_t n_special;
    int32_t special_first[257];

    ix_token bos, eos, eot, unk, pad, eom;
    bool add_bos, add_eos, add_space_prefix;
    bool clean_spaces; /* IX_DETOK_CLEAN_SPACES applies (llama.cpp's clean_spaces) */
    uint8_t *eog;      /* (n_vocab) 1 for end-of-generation tokens */
    uint8_t *strip;    /* (n_vocab) IX__STRIP_* of special tokens, by model name */
};

/* Whitespace a special token swallows when it is cut out of the text
 * (llama.cpp's LSTRIP / RSTRIP token attributes). */
enum {
    IX__STRIP_LEFT = 1u << 0,  /* the whitespace just before it */
    IX__STRIP_RIGHT = 1u << 1, /* the whitespace just after it */
};

static inline const char *ix__piece(const ix_tokenizer *t, ix_token id) {
    return t->arena + t->piece_off[id];
}

/* Vocabulary lookup of an arbitrary byte string; -1 if absent. */
ix_token ix__vocab_lookup(const ix_tokenizer *t, const char *s, size_t len);
uint64_t ix__hash_bytes(const char *s, size_t len);

/* Whether the decoder is at a boundary after token id: id is a special token
 * after which the SPM encoder put a dummy-prefix space, which decoding drops
 * again. Not one with IX__STRIP_RIGHT: the "▁" after it stands for the
 * whitespace the encoder stripped and decodes as a space, as in llama.cpp. */
bool ix__detok_is_boundary(const ix_tokenizer *t, ix_token id);

/* Encode one raw-text fragment (no special tokens inside), appending ids. */
ix_status ix__spm_encode(const ix_tokenizer *t, const char *text, size_t len, bool add_prefix,
                         ix_token_vec *out);
ix_status ix__bpe_encode(const ix_tokenizer *t, const char *text, size_t len, ix_token_vec *out);

/* Merge table lookup; false if the pair does not merge. */
bool ix__merge_find(const ix_tokenizer *t, ix_token left, ix_token right, int32_t *rank,
                    ix_token *merged);

/* Build the BPE byte maps and the merge table from tokenizer.ggml.merges. */
ix_status ix__bpe_init(ix_tokenizer *t, const ix_gguf *g, ix_errbuf *err);

/* Min-heap of merge candidates shared by SPM and BPE: ordered by `prio`
 * (SPM: -score, BPE: rank) then by left symbol index, both ascending. */
typedef struct ix__bigram {
    float prio;
    int32_t left;
    int32_t right;
    uint32_t size; /* total bytes of the pair when pushed, to detect staleness */
} ix__bigram;

typedef struct ix__heap {
    ix__bigram *v;
    size_t n, cap;
} ix__heap;

ix_status ix__heap_push(ix__heap *h, ix__bigram b);
bool ix__heap_pop(ix__heap *h, ix__bigram *out);
void ix__heap_free(ix__heap *h);

/* Symbols of the merge loops: a doubly linked list over a text. */
typedef struct ix__sym {
    int32_t prev, next;
    uint32_t off, len;
    ix_token id; /* BPE: current token id (-1: not in vocabulary) */
} ix__sym;

#endif /* IX_TOKENIZER_TOK_INT_H */
