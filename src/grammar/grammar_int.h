/*
 * Private state of the grammar module, shared by the files of src/grammar:
 *   build.c    the rule builder (what the GBNF parser emits into), UTF-8
 *              character classes, the checks and the flat compiled form
 *   gbnf.c     the GBNF-like text parser
 *   schema.c   JSON Schema -> GBNF text
 *   vocab.c    the vocabulary as a byte trie
 *   matcher.c  parse stacks, grammar states, the lazy byte-level automaton,
 *              token masks and their cache
 *
 * A compiled grammar is a flat array of elements. Each rule is a list of
 * alternatives, each alternative a sequence of elements ended by GRAM_END:
 *   GRAM_SET  one byte from a 256-bit byte set (arg: set id)
 *   GRAM_REF  a whole match of another rule (arg: rule id)
 * A position is an index into that array. Literals are runs of one-byte sets;
 * a character class is one set when it is ASCII-only, else a rule whose
 * alternatives are UTF-8 byte-range sequences. Groups and repetitions are
 * rules of their own (x* is h ::= x h | ""), so the rule that the parse is in
 * plus the position inside it is all a parse stack holds.
 *
 * Invariants a compiled grammar keeps (the matcher relies on them):
 *   - every rule referenced is defined and every reachable rule can complete
 *     (no rule's matches all need themselves, no empty byte set);
 *   - no left recursion: following the first elements of alternatives (past
 *     rules that can match the empty string) never reaches the starting rule,
 *     so expanding rule references before a byte terminates;
 *   - byte_class partitions the 256 bytes so that no set tells two bytes of
 *     one class apart: transitions are computed once per class.
 */
#ifndef INFERX_GRAMMAR_INT_H
#define INFERX_GRAMMAR_INT_H

#include "inferx/grammar.h"

enum { GRAM_END = 0, GRAM_SET = 1, GRAM_REF = 2 };

typedef struct gram_elem {
    int32_t type; /* GRAM_END / GRAM_SET / GRAM_REF */
    int32_t arg;  /* set id or rule id */
} gram_elem;

typedef struct gram_set {
    uint32_t bits[8]; /* byte b is in the set iff bit b is set */
} gram_set;

static inline bool gram_set_has(const gram_set *s, unsigned b) {
    return (s->bits[b >> 5] >> (b & 31)) & 1u;
}

struct ix_grammar {
    gram_elem *elems;   /* (n_elems) rules' alternatives, each ended by GRAM_END */
    int32_t *alt_start; /* (n_alts) position of each alternative's first element */
    int32_t *rule_alt;  /* (n_rules + 1) rule r: alt_start[rule_alt[r] .. rule_alt[r+1]) */
    char *names;        /* rule names, NUL-separated */
    int32_t *name_off;  /* (n_rules) offset of each rule's name in names */
    gram_set *sets;     /* (n_sets) */
    int32_t n_elems, n_alts, n_rules, n_sets, root;
    int32_t n_classes;
    uint8_t byte_class[256]; /* byte -> class */
    uint8_t class_rep[256];  /* class -> one byte of it (printable ASCII when there is one) */
};

/* ---- builder (build.c) ------------------------------------------------------
 * Rules are built one element at a time; references may come before
 * definitions. Helper rules (groups, repetitions, classes) are named
 * "<rule>-<k>" and never looked up by name. Errors carry the text offset they
 * are about ("line L, column C: ..."). */
typedef struct gram_builder gram_builder;

ix_status ix__gram_builder_create(gram_builder **out, const char *text, size_t len,
                                  ix_errbuf *err);
void ix__gram_builder_destroy(gram_builder *b);
/* Formats err with the line and column of text offset off. */
ix_status ix__gram_errf(gram_builder *b, ix_status s, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The rule called name[0..len): found, or created undefined (off: where it
 * is referenced). *id receives it. */
ix_status ix__gram_rule_named(gram_builder *b, const char *name, size_t len, size_t off,
                              int32_t *id);
/* Marks a named rule defined here (IX_ERR_FORMAT if it already was). */
ix_status ix__gram_rule_define(gram_builder *b, int32_t id, size_t off);
/* A new helper rule of parent's (defined). */
ix_status ix__gram_rule_helper(gram_builder *b, int32_t parent, size_t off, int32_t *id);
ix_status ix__gram_push(gram_builder *b, int32_t rule, int32_t type, int32_t arg, size_t off);
/* Elements of rule so far (the current alternative is the tail). */
int32_t ix__gram_rule_len(const gram_builder *b, int32_t rule);
/* Moves the elements rule[from..) into a new helper rule (one alternative)
 * and leaves one reference to it in their place. */
ix_status ix__gram_wrap_tail(gram_builder *b, int32_t rule, int32_t from, size_t off);
/* Appends x{min,max} (max < 0: unbounded) for the tail rule[from..), which
 * is one element or a sequence (wrapped into a helper first). */
ix_status ix__gram_repeat(gram_builder *b, int32_t rule, int32_t from, int32_t min, int32_t max,
                          size_t off);
/* Appends the byte string s[0..n) as one-byte sets. */
ix_status ix__gram_push_bytes(gram_builder *b, int32_t rule, const uint8_t *s, size_t n,
                              size_t off);
/* Appends one character of the code-point class ranges[2k]..ranges[2k+1]
 * (inclusive, sorted, disjoint, no surrogates, non-empty). */
ix_status ix__gram_push_class(gram_builder *b, int32_t rule, const uint32_t *ranges,
                              size_t n_ranges, size_t off);
/* Checks the grammar (root, undefined rules, completion, left recursion) and
 * compiles it. The builder stays the caller's. */
ix_status ix__gram_finish(gram_builder *b, ix_grammar **out);

/* Normalizes code-point ranges (pairs) in place: sorted, merged, surrogates
 * removed; negate complements them over U+0000..U+10FFFF. Returns the number
 * of ranges. ranges must have room for n + 2 pairs. */
size_t ix__gram_ranges_normalize(uint32_t *ranges, size_t n, bool negate);

/* Encodes code point c (valid, not a surrogate) as UTF-8; returns the length. */
size_t ix__gram_utf8_encode(uint32_t c, uint8_t out[4]);
/* Decodes the character at s[0..n) (n > 0), valid UTF-8 (checked by the
 * caller); *len receives its length. */
uint32_t ix__gram_utf8_decode(const char *s, size_t n, size_t *len);

/* The escape whose letter is at s[*i] (after the backslash; s[0..n)), as
 * GBNF literals and classes and JSON Schema patterns share them: \n \r \t
 * \f \v, \xHH, \uHHHH, \UHHHHHHHH (GBNF) or \0 (regex), and a backslash
 * before ASCII punctuation or a space for that character. *i moves past it. */
enum { GRAM_ESC_OK = 0, GRAM_ESC_UNKNOWN, GRAM_ESC_HEX, GRAM_ESC_NOT_CHAR };
int ix__gram_escape(const char *s, size_t n, size_t *i, bool regex, uint32_t *cp);

/* ---- vocabulary (vocab.c) -----------------------------------------------------
 * The token byte strings in a trie laid out in preorder (structure of arrays):
 * node i's subtree is nodes [i, end[i]), its depth is depth[i] (root children:
 * 1) and the bytes of the path to it spell the tokens toks[tok_begin[i] ..
 * tok_begin[i+1]). A walk keeps one grammar state per depth and skips a whole
 * subtree as soon as its first byte is rejected. */
#define GRAM_MAX_TOKEN_BYTES 1024

struct ix_grammar_vocab {
    int32_t n_vocab;
    size_t n_words;       /* (n_vocab + 31) / 32 */
    int32_t n_nodes;
    uint8_t *node_byte;   /* (n_nodes) */
    uint16_t *node_depth; /* (n_nodes) */
    int32_t *node_end;    /* (n_nodes) */
    int32_t *tok_begin;   /* (n_nodes + 1) */
    ix_token *toks;       /* tokens in trie order */
    int32_t max_depth;
    ix_token *eog;        /* (n_eog) end-of-generation ids */
    int32_t n_eog;
    uint8_t *is_eog;      /* (n_vocab) */
    uint32_t *bytes_off;  /* (n_vocab + 1) token i's bytes: blob[bytes_off[i] .. bytes_off[i+1]) */
    char *blob;
};

#endif /* INFERX_GRAMMAR_INT_H */
