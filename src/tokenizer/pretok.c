/*
 * Byte-level BPE pre-tokenizers: the split rules of each tokenizer.ggml.pre
 * family, the name table that selects them, and the span vector they fill.
 *
 * A family's rules are llama.cpp's list of regexes for it (llm_tokenizer_bpe in
 * src/llama-vocab.cpp). Rule i splits every piece that rule i-1 produced: each
 * match becomes a piece and so does the text between two matches. We walk this
 * depth-first (split_level), so no intermediate piece list is ever stored, and
 * the recursion is as deep as the list is long (at most MAX_RULES).
 *
 * There is no regex engine here. Every pattern is one of a handful of shapes,
 * each with a matcher that only moves forward, so a split costs a small
 * constant number of code point reads per byte whatever the input.
 *
 * What llama.cpp does (src/unicode.cpp), which is what we must reproduce:
 *  - The GPT-2 and LLaMA-3 patterns run through hand-written splitters
 *    (gpt2_token, llama3_token follow them step by step). The LLaMA-3 one
 *    folds case in the contractions ('S, 'Re). Its `\s+(?!\S)` leaves the
 *    last whitespace of a run to start the next word (" Hello") unless the run
 *    ends the piece, where it keeps the whole run.
 *  - Every other pattern runs through std::regex (ECMAScript, leftmost match,
 *    ordered alternation). When it uses \p{..}, the text is first "collapsed":
 *    each non-ASCII code point becomes one byte per category (whitespace ->
 *    \v; \p{N}, \p{L}, \p{P}, \p{M}, \p{S} -> one byte each; anything else ->
 *    a filler). For the patterns below that is exactly a category test, with
 *    \s = White_Space (ASCII via isspace, non-ASCII via the \v stand-in).
 *  - A pattern without \p{..} runs through std::wregex on the code points, but
 *    every non-ASCII whitespace is replaced by U+000B first. So an explicit
 *    range never matches such a code point, even when it lies inside the
 *    range: [ࠀ-一] does not match U+3000, [　-。] only matches U+3001-3002.
 *  - `$` (not multiline) is the end of the piece; lookaheads also stop there.
 *  - qwen2's pattern is LLaMA-3's with \p{N} for \p{N}{1,3}; llama.cpp sends
 *    it to std::regex, which on these classes splits as the LLaMA-3 splitter
 *    does, so one function serves both.
 */
#include "tokenizer/pretok.h"

#include <string.h>

/* ---- names ----------------------------------------------------------------
 * Every tokenizer.ggml.pre value llama.cpp accepts whose regex list is exactly
 * one of our kinds (llama_vocab::impl::load). Names whose list differs, even by
 * one rule (jais-2, laguna, seed-coder, bailingmoe, ...), are not here.
 *
 * Each row also carries the defaults that load gives the name: every BPE
 * vocabulary starts with clean_spaces true, and the names that set it false
 * say so by leaving out CLEAN; only the LLaMA-3 names (tekken and chameleon,
 * which we do not support, too) add BOS and skip merges for whole-word hits.
 * The same load also sets add_sep for jina-v1-en, jina-v2-code and
 * roberta-bpe; its BPE encoder never reads that flag, so neither do we. */
typedef struct pretok_name {
    const char *name;
    ix__pretok_kind kind;
    unsigned defaults;
} pretok_name;

#define CLEAN IX__PRE_CLEAN_SPACES
#define LLAMA3 (IX__PRE_ADD_BOS | IX__PRE_IGNORE_MERGES | IX__PRE_CLEAN_SPACES)

static const pretok_name k_names[] = {
    {"default", IX__PRETOK_DEFAULT, CLEAN},
    /* LLAMA_VOCAB_PRE_TYPE_GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING */
    {"gpt-2", IX__PRETOK_GPT2, CLEAN},
    {"gpt2", IX__PRETOK_GPT2, CLEAN}, /* not a llama.cpp name; an alias of gpt-2 */
    {"phi-2", IX__PRETOK_GPT2, CLEAN},
    {"jina-es", IX__PRETOK_GPT2, CLEAN},
    {"jina-de", IX__PRETOK_GPT2, CLEAN},
    {"gigachat", IX__PRETOK_GPT2, CLEAN},
    {"jina-v2-es", IX__PRETOK_GPT2, CLEAN},
    {"jina-v2-de", IX__PRETOK_GPT2, CLEAN},
    {"a.x-4.0", IX__PRETOK_GPT2, CLEAN},
    {"mellum", IX__PRETOK_GPT2, CLEAN},
    {"modern-bert", IX__PRETOK_GPT2, CLEAN},
    {"jina-v1-en", IX__PRETOK_GPT2, CLEAN},
    {"jina-v2-code", IX__PRETOK_GPT2, CLEAN},
    {"roberta-bpe", IX__PRETOK_GPT2, CLEAN},
    {"exaone4", IX__PRETOK_GPT2, CLEAN},
    {"mpt", IX__PRETOK_GPT2, CLEAN},
    {"olmo", IX__PRETOK_GPT2, CLEAN},
    {"jais", IX__PRETOK_GPT2, CLEAN},
    {"trillion", IX__PRETOK_GPT2, 0},
    {"granite-docling", IX__PRETOK_GPT2, 0},
    /* LLAMA_VOCAB_PRE_TYPE_LLAMA3, DBRX, SMAUG, CHATGLM4 */
    {"llama3", IX__PRETOK_LLAMA3, LLAMA3},
    {"llama-v3", IX__PRETOK_LLAMA3, LLAMA3},
    {"llama-bpe", IX__PRETOK_LLAMA3, LLAMA3},
    {"falcon3", IX__PRETOK_LLAMA3, LLAMA3},
    {"falcon-h1", IX__PRETOK_LLAMA3, LLAMA3},
    {"pixtral", IX__PRETOK_LLAMA3, LLAMA3},
    {"midm-2.0", IX__PRETOK_LLAMA3, LLAMA3},
    {"lfm2", IX__PRETOK_LLAMA3, LLAMA3},
    {"jina-v5-nano", IX__PRETOK_LLAMA3, LLAMA3},
    {"dbrx", IX__PRETOK_LLAMA3, CLEAN},
    {"smaug-bpe", IX__PRETOK_LLAMA3, CLEAN},
    {"glm4", IX__PRETOK_LLAMA3, CLEAN | IX__PRE_NO_BOS_ID},
    {"chatglm-bpe", IX__PRETOK_LLAMA3, CLEAN | IX__PRE_NO_BOS_ID},
    /* LLAMA_VOCAB_PRE_TYPE_QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2 */
    {"qwen2", IX__PRETOK_QWEN2, 0},
    {"deepseek-r1-qwen", IX__PRETOK_QWEN2, 0},
    {"kormo", IX__PRETOK_QWEN2, 0},
    {"f2llmv2", IX__PRETOK_QWEN2, 0},
    {"megrez", IX__PRETOK_QWEN2, CLEAN},
    {"stablelm2", IX__PRETOK_QWEN2, CLEAN},
    {"hunyuan", IX__PRETOK_QWEN2, 0},
    {"solar-open", IX__PRETOK_QWEN2, 0},
    {"grok-2", IX__PRETOK_QWEN2, 0},
    {"deepseek-llm", IX__PRETOK_DEEPSEEK_LLM, 0},
    {"deepseek-coder", IX__PRETOK_DEEPSEEK_CODER, 0},
    {"falcon", IX__PRETOK_FALCON, CLEAN},
    /* LLAMA_VOCAB_PRE_TYPE_STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL,
     * EXAONE, MINERVA, MELLUM2 */
    {"starcoder", IX__PRETOK_STARCODER, CLEAN},
    {"refact", IX__PRETOK_STARCODER, CLEAN},
    {"command-r", IX__PRETOK_STARCODER, 0},
    {"smollm", IX__PRETOK_STARCODER, 0},
    {"codeshell", IX__PRETOK_STARCODER, CLEAN},
    {"exaone", IX__PRETOK_STARCODER, CLEAN},
    {"minerva-7b", IX__PRETOK_STARCODER, CLEAN},
    {"mellum2", IX__PRETOK_STARCODER, CLEAN},
};

#undef CLEAN
#undef LLAMA3

ix_status ix__pretok_from_name(const char *name, size_t len, ix__pretok_kind *out,
                               unsigned *defaults) {
    if (!out || (!name && len)) return IX_ERR_INVALID;
    if (len == 0) name = "default", len = 7;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_names); i++) {
        if (strlen(k_names[i].name) == len && memcmp(k_names[i].name, name, len) == 0) {
            *out = k_names[i].kind;
            if (defaults) *defaults = k_names[i].defaults;
            return IX_OK;
        }
    }
    return IX_ERR_UNSUPPORTED;
}

/* ---- rules ------------------------------------------------------------- */

/* The shapes of pattern that occur. C is a character class (char_class). */
enum rule_op {
    OP_GPT2,     /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    OP_LLAMA3,   /* (?:'[sS]|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|
                    \s*[\r\n]+|\s+(?!\S)|\s+ */
    OP_ONE,      /* C */
    OP_RUN,      /* C+ */
    OP_WS_RUN,   /* \s?C+ */
    OP_TRAIL_WS, /* \s+$ */
    OP_DIGITS3,  /* [0-9][0-9][0-9] */
};

enum char_class {
    CC_NONE,
    CC_CRLF,          /* [\r\n] */
    CC_LETTER,        /* \p{L} */
    CC_NUMBER,        /* \p{N} */
    CC_PUNCT,         /* \p{P} */
    CC_PUNCT_FALCON,  /* [\p{P}\$\+<=>\^~\|`] */
    CC_PUNCT_DEFAULT, /* [\p{P}\$\+<=>\^~\|] */
    CC_DS_LETTER,     /* deepseek-llm's explicit letter ranges */
    CC_DS_PUNCT,      /* [!-/:-~！-／：-～‘-‟　-。] */
    CC_CJK,           /* [一-龥ࠀ-一가-퟿] */
};

typedef struct rule {
    unsigned char op, cls, max_digits;
} rule;

#define MAX_RULES 6

typedef struct kind_def {
    const char *name;
    unsigned n_rules;
    rule rules[MAX_RULES];
} kind_def;

static const kind_def k_kinds[IX__PRETOK_COUNT] = {
    [IX__PRETOK_GPT2] = {"gpt2", 1, {{OP_GPT2, CC_NONE, 0}}},
    [IX__PRETOK_LLAMA3] = {"llama3", 1, {{OP_LLAMA3, CC_NONE, 3}}},
    [IX__PRETOK_QWEN2] = {"qwen2", 1, {{OP_LLAMA3, CC_NONE, 1}}},
    [IX__PRETOK_DEEPSEEK_LLM] = {"deepseek-llm",
                                 6,
                                 {{OP_ONE, CC_CRLF, 0},
                                  {OP_WS_RUN, CC_DS_LETTER, 0},
                                  {OP_WS_RUN, CC_DS_PUNCT, 0},
                                  {OP_TRAIL_WS, CC_NONE, 0},
                                  {OP_RUN, CC_CJK, 0},
                                  {OP_RUN, CC_NUMBER, 0}}},
    [IX__PRETOK_DEEPSEEK_CODER] = {"deepseek-coder",
                                   5,
                                   {{OP_ONE, CC_CRLF, 0},
                                    {OP_WS_RUN, CC_LETTER, 0},
                                    {OP_WS_RUN, CC_PUNCT, 0},
                                    {OP_RUN, CC_CJK, 0},
                                    {OP_ONE, CC_NUMBER, 0}}},
    [IX__PRETOK_FALCON] = {"falcon",
                           3,
                           {{OP_RUN, CC_PUNCT_FALCON, 0},
                            {OP_GPT2, CC_NONE, 0},
                            {OP_DIGITS3, CC_NONE, 0}}},
    [IX__PRETOK_STARCODER] = {"starcoder", 2, {{OP_ONE, CC_NUMBER, 0}, {OP_GPT2, CC_NONE, 0}}},
    [IX__PRETOK_DEFAULT] = {"default",
                            4,
                            {{OP_RUN, CC_PUNCT_DEFAULT, 0},
                             {OP_GPT2, CC_NONE, 0},
                             {OP_RUN, CC_NUMBER, 0},
                             {OP_DIGITS3, CC_NONE, 0}}},
};

const char *ix__pretok_kind_name(ix__pretok_kind k) {
    if ((unsigned)k >= IX__PRETOK_COUNT) return "unknown";
    return k_kinds[k].name;
}

/* ---- explicit ranges (the std::wregex patterns) ------------------------ */

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

/* deepseek-llm's second pattern, \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+, as code points
 * (a subset of the cased letters Lu/Ll/Lt). Copied from the pattern by code
 * point: several of its characters (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126,
 * U+212A) are changed by NFC normalization, so never retype them as text. */
static const cp_range k_ds_letter[] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00B5, 0x00B5},   {0x00C0, 0x00D6},
    {0x00D8, 0x00F6},   {0x00F8, 0x01BA},   {0x01BC, 0x01BF},   {0x01C4, 0x0293},
    {0x0295, 0x02AF},   {0x0370, 0x0373},   {0x0376, 0x0377},   {0x037B, 0x037D},
    {0x037F, 0x037F},   {0x0386, 0x0386},   {0x0388, 0x038A},   {0x038C, 0x038C},
    {0x038E, 0x03A1},   {0x03A3, 0x03F5},   {0x03F7, 0x0481},   {0x048A, 0x052F},
    {0x0531, 0x0556},   {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

/* [!-/:-~！-／：-～‘-‟　-。] */
static const cp_range k_ds_punct[] = {
    {0x0021, 0x002F}, {0x003A, 0x007E}, {0x2018, 0x201F},
    {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};

/* [一-龥ࠀ-一가-퟿]: U+4E00-9FA5 and U+0800-4E00 overlap, hence one range. */
static const cp_range k_cjk[] = {
    {0x0800, 0x9FA5},
    {0xAC00, 0xD7FF},
};

static bool in_ranges(const cp_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo) {
            hi = mid;
        } else if (cp > r[mid].hi) {
            lo = mid + 1;
        } else {
            return true;
        }
    }
    return false;
}

/* ---- matching ---------------------------------------------------------- */

/* Flag of a position at or past the end of the current piece; llama.cpp's
 * splitters see "no code point" there, and regex lookaheads see the end. */
#define FL_END (1u << 15)

#define FL_WS IX__CP_WHITESPACE
#define FL_L IX__CP_LETTER
#define FL_N IX__CP_NUMBER
#define FL_P IX__CP_PUNCT

typedef struct split_ctx {
    const char *text;
    const rule *rules;
    unsigned n_rules;
    ix__span_vec *out;
    uint64_t steps; /* code point reads, for the linear-time test */
} split_ctx;

/* The code point at text[pos] of a piece that ends at `end`: returns its flags
 * and sets *cp and *n (its byte length); FL_END, *cp = UINT32_MAX, *n = 0 when
 * pos is not inside the piece. */
static inline unsigned peek(split_ctx *c, size_t pos, size_t end, uint32_t *cp, size_t *n) {
    if (pos >= end) {
        *cp = UINT32_MAX;
        *n = 0;
        return FL_END;
    }
    c->steps++;
    unsigned char b = (unsigned char)c->text[pos];
    if (b < 0x80) {
        *cp = b;
        *n = 1;
        return ix__cp_ascii_flags[b];
    }
    *cp = ix__utf8_decode(c->text + pos, end - pos, n);
    return ix__cp_flags(*cp);
}

/* First position from pos whose code point has no flag in `mask`. */
static size_t skip_with(split_ctx *c, size_t pos, size_t end, unsigned mask) {
    uint32_t cp;
    size_t n;
    while (peek(c, pos, end, &cp, &n) & mask)
        pos += n;
    return pos;
}

/* First position from pos whose code point has a flag in `mask`, or the end. */
static size_t skip_without(split_ctx *c, size_t pos, size_t end, unsigned mask) {
    uint32_t cp;
    size_t n;
    while (!(peek(c, pos, end, &cp, &n) & (mask | FL_END)))
        pos += n;
    return pos;
}

static uint32_t ascii_lower(uint32_t cp) {
    return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
}

/* Bytes of a contraction tail (s t m d re ve ll) at pos, just after an
 * apostrophe, or 0. `fold`: either case, as LLaMA-3's (?i:...) / '[sS]. Only
 * ASCII folds: no other code point lowercases to one of these letters. */
static size_t contraction(split_ctx *c, size_t pos, size_t end, bool fold) {
    uint32_t a, b;
    size_t n;
    if (peek(c, pos, end, &a, &n) & FL_END) return 0;
    if (fold) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
    if (a != 'r' && a != 'v' && a != 'l') return 0;
    if (peek(c, pos + 1, end, &b, &n) & FL_END) return 0;
    if (fold) b = ascii_lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 2;
    return 0;
}

/* The whitespace alternatives at pos, as llama.cpp's splitters take them:
 * with `crlf`, \s*[\r\n]+ first (up to the last \r or \n of the run); then
 * \s+(?!\S): a run followed by a non-space keeps its last whitespace for the
 * next word; then \s+. No whitespace at pos: one code point on its own. */
static size_t ws_token(split_ctx *c, size_t pos, size_t end, bool crlf) {
    size_t p = pos, last = pos, crlf_end = pos, count = 0;
    bool have_crlf = false;
    for (;;) {
        uint32_t cp;
        size_t n;
        if (!(peek(c, p, end, &cp, &n) & FL_WS)) break;
        if (cp == '\r' || cp == '\n') {
            have_crlf = true;
            crlf_end = p + n;
        }
        last = p;
        p += n;
        count++;
    }
    if (crlf && have_crlf) return crlf_end;
    if (count > 1 && p < end) return last;
    if (count > 0) return p;
    uint32_t cp;
    size_t n;
    peek(c, pos, end, &cp, &n);
    return pos + n;
}

/* End of the word that starts at pos under the GPT-2 pattern (llama.cpp's
 * unicode_regex_split_custom_gpt2). */
static size_t gpt2_token(split_ctx *c, size_t pos, size_t end) {
    uint32_t cp, cp1;
    size_t n, n1;
    unsigned fl = peek(c, pos, end, &cp, &n);
    size_t next = pos + n;
    if (cp == '\'') {
        size_t k = contraction(c, next, end, false);
        if (k) return next + k;
    }
    /* " ?" : a space joins the run of the class of the code point after it */
    size_t from = pos;
    if (cp == ' ') {
        fl = peek(c, next, end, &cp1, &n1);
        from = next;
    }
    if (fl & FL_L) return skip_with(c, from, end, FL_L);
    if (fl & FL_N) return skip_with(c, from, end, FL_N);
    if (!(fl & (FL_WS | FL_L | FL_N | FL_END)))
        return skip_without(c, from, end, FL_WS | FL_L | FL_N);
    return ws_token(c, pos, end, false);
}

/* End of the word that starts at pos under the LLaMA-3 pattern (llama.cpp's
 * unicode_regex_split_custom_llama3), with \p{N}{1,max_digits}. */
static size_t llama3_token(split_ctx *c, size_t pos, size_t end, unsigned max_digits) {
    uint32_t cp, cp1;
    size_t n, n1;
    unsigned fl = peek(c, pos, end, &cp, &n);
    size_t next = pos + n;
    if (cp == '\'') {
        size_t k = contraction(c, next, end, true);
        if (k) return next + k;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (cp != '\r' && cp != '\n' && !(fl & FL_N)) {
        if (fl & FL_L) return skip_with(c, next, end, FL_L);
        if (peek(c, next, end, &cp1, &n1) & FL_L) return skip_with(c, next + n1, end, FL_L);
    }
    /* \p{N}{1,max_digits} */
    if (fl & FL_N) {
        size_t p = next;
        for (unsigned k = 1; k < max_digits && (peek(c, p, end, &cp1, &n1) & FL_N); k++)
            p += n1;
        return p;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* ; a lone space at the end of the piece is a
     * word by this rule in llama.cpp, as it would be by \s+ */
    size_t from = pos;
    unsigned fl2 = fl;
    if (cp == ' ') {
        fl2 = peek(c, next, end, &cp1, &n1);
        from = next;
    }
    if (!(fl2 & (FL_WS | FL_L | FL_N))) {
        size_t p = skip_without(c, from, end, FL_WS | FL_L | FL_N);
        while (!(peek(c, p, end, &cp1, &n1) & FL_END) && (cp1 == '\r' || cp1 == '\n'))
            p += n1;
        return p;
    }
    return ws_token(c, pos, end, true);
}

static bool in_class(unsigned cls, uint32_t cp, unsigned fl) {
    if (fl & FL_END) return false;
    switch (cls) {
    case CC_CRLF: return cp == '\r' || cp == '\n';
    case CC_LETTER: return (fl & FL_L) != 0;
    case CC_NUMBER: return (fl & FL_N) != 0;
    case CC_PUNCT: return (fl & FL_P) != 0;
    case CC_PUNCT_FALCON:
        if (cp == '`') return true;
        /* fall through */
    case CC_PUNCT_DEFAULT:
        if (fl & FL_P) return true;
        return cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' ||
               cp == '~' || cp == '|';
    /* wregex patterns: a non-ASCII whitespace was replaced by U+000B before
     * matching (ASCII whitespace lies in none of these ranges either). ASCII
     * skips the search: the ranges hold A-Za-z, and !-/ :-~ respectively. */
    case CC_DS_LETTER:
        if (cp < 0x80) return (fl & FL_L) != 0;
        return !(fl & FL_WS) && in_ranges(k_ds_letter, IX_ARRAY_LEN(k_ds_letter), cp);
    case CC_DS_PUNCT:
        if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x7E);
        return !(fl & FL_WS) && in_ranges(k_ds_punct, IX_ARRAY_LEN(k_ds_punct), cp);
    case CC_CJK: return cp >= 0x80 && !(fl & FL_WS) && in_ranges(k_cjk, IX_ARRAY_LEN(k_cjk), cp);
    default: return false;
    }
}

/* Leftmost match of C, C+ or \s?C+ in [from, end). \s and C never share a
 * code point, so "\s? then C" is simply: C here, or whitespace here and C
 * next; the run is then as long as it goes. */
static bool class_match(split_ctx *c, const rule *r, size_t from, size_t end, size_t *ms,
                        size_t *me) {
    for (size_t p = from; p < end;) {
        uint32_t cp, cp1;
        size_t n, n1;
        unsigned fl = peek(c, p, end, &cp, &n);
        size_t run = p;
        if (!in_class(r->cls, cp, fl)) {
            bool ws_then_class = false;
            if (r->op == OP_WS_RUN && (fl & FL_WS)) {
                unsigned fl1 = peek(c, p + n, end, &cp1, &n1);
                ws_then_class = in_class(r->cls, cp1, fl1);
            }
            if (!ws_then_class) {
                p += n;
                continue;
            }
            run = p + n;
        }
        *ms = p;
        if (r->op == OP_ONE) {
            *me = p + n;
            return true;
        }
        size_t q = run;
        for (;;) {
            unsigned f = peek(c, q, end, &cp1, &n1);
            if (!in_class(r->cls, cp1, f)) break;
            q += n1;
        }
        *me = q;
        return true;
    }
    return false;
}

/* The leftmost match of rule r in [from, end), from < end. */
static bool next_match(split_ctx *c, const rule *r, size_t from, size_t end, size_t *ms,
                       size_t *me) {
    uint32_t cp;
    size_t n;
    switch (r->op) {
    case OP_GPT2:
        *ms = from;
        *me = gpt2_token(c, from, end);
        return true;
    case OP_LLAMA3:
        *ms = from;
        *me = llama3_token(c, from, end, r->max_digits);
        return true;
    case OP_TRAIL_WS: {
        /* \s+$ : the whitespace run that reaches the end of the piece */
        size_t run = SIZE_MAX;
        for (size_t p = from; p < end; p += n) {
            if (peek(c, p, end, &cp, &n) & FL_WS) {
                if (run == SIZE_MAX) run = p;
            } else {
                run = SIZE_MAX;
            }
        }
        if (run == SIZE_MAX) return false;
        *ms = run;
        *me = end;
        return true;
    }
    case OP_DIGITS3: {
        /* leftmost three ASCII digits: the first three of a digit run, then
         * the next three after them, and so on */
        size_t start = from, k = 0;
        for (size_t p = from; p < end; p += n) {
            peek(c, p, end, &cp, &n);
            if (cp >= '0' && cp <= '9') {
                if (k++ == 0) start = p;
                if (k == 3) {
                    *ms = start;
                    *me = p + n;
                    return true;
                }
            } else {
                k = 0;
            }
        }
        return false;
    }
    default: return class_match(c, r, from, end, ms, me);
    }
}

static ix_status push_span(ix__span_vec *v, size_t off, size_t len) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        if (cap < v->cap || cap > SIZE_MAX / sizeof *v->v) return IX_ERR_NOMEM;
        ix__span *p = ix_realloc(v->v, cap * sizeof *p);
        if (!p) return IX_ERR_NOMEM;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = (ix__span){off, len};
    return IX_OK;
}

/* Splits the piece [beg, end) (non-empty) by rule `level` and hands every
 * resulting piece, matches and the text between them alike, to the next rule;
 * past the last rule the piece is a word. */
static ix_status split_level(split_ctx *c, unsigned level, size_t beg, size_t end) {
    if (level == c->n_rules) return push_span(c->out, beg, end - beg);
    const rule *r = &c->rules[level];
    ix_status s = IX_OK;
    size_t pos = beg, ms, me;
    while (s == IX_OK && pos < end && next_match(c, r, pos, end, &ms, &me)) {
        IX_ASSERT(pos <= ms && ms < me && me <= end);
        if (ms > pos) s = split_level(c, level + 1, pos, ms);
        if (s == IX_OK) s = split_level(c, level + 1, ms, me);
        pos = me;
    }
    if (s == IX_OK && pos < end) s = split_level(c, level + 1, pos, end);
    return s;
}

ix_status ix__pretok_split_ex(ix__pretok_kind k, const char *text, size_t len, ix__span_vec *out,
                              uint64_t *n_steps) {
    if (n_steps) *n_steps = 0;
    if ((unsigned)k >= IX__PRETOK_COUNT || !out || (!text && len)) return IX_ERR_INVALID;
    split_ctx c = {text, k_kinds[k].rules, k_kinds[k].n_rules, out, 0};
    size_t n0 = out->n;
    ix_status s = len ? split_level(&c, 0, 0, len) : IX_OK;
    if (s != IX_OK) out->n = n0;
    if (n_steps) *n_steps = c.steps;
    return s;
}

ix_status ix__pretok_split(ix__pretok_kind k, const char *text, size_t len, ix__span_vec *out) {
    return ix__pretok_split_ex(k, text, len, out, NULL);
}

void ix__span_vec_free(ix__span_vec *s) {
    if (!s) return;
    ix_free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}
