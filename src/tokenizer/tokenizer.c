/*
 * Tokenizer construction from GGUF metadata (with llama.cpp's defaults for
 * what the keys leave out), the vocabulary hash map, special token
 * partitioning, and encode/decode dispatch to spm.c / bpe.c.
 *
 * Encoding first cuts the text at special-token occurrences (user-defined
 * tokens always, control/unknown tokens only with IX_TOK_PARSE_SPECIAL), then
 * hands each raw fragment to the model's algorithm. SPM adds its dummy-prefix
 * space at the start of the text and after every special token, and decoding
 * removes exactly those spaces again, so decode(encode(x)) == x — except
 * where a special token strips the whitespace next to it (Phi-3's), which no
 * decoder can restore.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

/* ---- small vectors ------------------------------------------------------ */

ix_status ix_token_vec_push(ix_token_vec *v, ix_token id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        ix_token *p = ix_realloc(v->ids, cap * sizeof *p);
        if (!p) return IX_ERR_NOMEM;
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return IX_OK;
}

void ix_token_vec_free(ix_token_vec *v) {
    ix_free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* ---- UTF-8 validation ------------------------------------------------------ */

bool ix_utf8_valid(const char *str, size_t len, size_t *bad_offset) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xc2 && c <= 0xdf) {
            n = 2, cp = c & 0x1f, min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 3, cp = c & 0x0f, min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4, cp = c & 0x07, min = 0x10000;
        } else {
            goto bad;
        }
        if (len - i < n) goto bad;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) goto bad;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) goto bad;
        i += n;
    }
    return true;
bad:
    if (bad_offset) *bad_offset = i;
    return false;
}

/* ---- vocabulary map --------------------------------------------------------- */

uint64_t ix__hash_bytes(const char *s, size_t len) {
    /* FNV-1a: pieces are short, and this runs once per merge candidate. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

ix_token ix__vocab_lookup(const ix_tokenizer *t, const char *s, size_t len) {
    uint32_t mask = t->map.cap - 1;
    for (uint32_t i = (uint32_t)ix__hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = t->map.slots[i];
        if (id < 0) return IX_TOKEN_NONE;
        if (t->piece_len[id] == len && memcmp(ix__piece(t, id), s, len) == 0) return id;
    }
}

static void vocab_insert(ix_tokenizer *t, ix_token id) {
    uint32_t mask = t->map.cap - 1;
    const char *s = ix__piece(t, id);
    size_t len = t->piece_len[id];
    for (uint32_t i = (uint32_t)ix__hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t cur = t->map.slots[i];
        if (cur < 0) {
            t->map.slots[i] = id;
            return;
        }
        /* A duplicate piece maps to its last id, as llama.cpp does. */
        if (t->piece_len[cur] == len && memcmp(ix__piece(t, cur), s, len) == 0) {
            t->map.slots[i] = id;
            return;
        }
    }
}

/* ---- construction ------------------------------------------------------------ */

static ix_status opt_token_id(const ix_gguf *g, const char *key, int32_t n_vocab, ix_token *out,
                              ix_errbuf *err) {
    uint32_t v;
    ix_status s = ix_gguf_get_u32(g, key, &v, err);
    if (s == IX_ERR_NOT_FOUND) return IX_OK;
    if (s != IX_OK) return s;
    if (v >= (uint32_t)n_vocab)
        return ix_errf(err, IX_ERR_RANGE, "%s = %u is outside the vocabulary of %d tokens", key, v,
                       n_vocab);
    *out = (ix_token)v;
    return IX_OK;
}

static ix_status opt_bool(const ix_gguf *g, const char *key, bool *out, ix_errbuf *err) {
    ix_status s = ix_gguf_get_bool(g, key, out, err);
    return s == IX_ERR_NOT_FOUND ? IX_OK : s;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const ix_tokenizer *t = ctx;
    ix_token x = *(const ix_token *)a, y = *(const ix_token *)b;
    unsigned char fx = (unsigned char)ix__piece(t, x)[0], fy = (unsigned char)ix__piece(t, y)[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (t->piece_len[x] != t->piece_len[y]) return t->piece_len[x] > t->piece_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static ix_status build_specials(ix_tokenizer *t) {
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->types[i];
        if ((ty == IX_TOKEN_TYPE_CONTROL || ty == IX_TOKEN_TYPE_USER_DEFINED ||
             ty == IX_TOKEN_TYPE_UNKNOWN) &&
            t->piece_len[i] > 0)
            n++;
    }
    t->special = ix_malloc((size_t)(n ? n : 1) * sizeof(ix_token));
    if (!t->special) return IX_ERR_NOMEM;
    t->n_special = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        uint8_t ty = t->types[i];
        if ((ty == IX_TOKEN_TYPE_CONTROL || ty == IX_TOKEN_TYPE_USER_DEFINED ||
             ty == IX_TOKEN_TYPE_UNKNOWN) &&
            t->piece_len[i] > 0)
            t->special[t->n_special++] = i;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof(ix_token), cmp_special, t);
    int32_t k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_special && (unsigned char)ix__piece(t, t->special[k])[0] < b) k++;
        t->special_first[b] = k;
    }
    return IX_OK;
}

static void mark_eog(ix_tokenizer *t) {
    static const char *const names[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<|eom_id|>", "<EOT>", "<|return|>", "<|call|>",
    };
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    for (size_t i = 0; i < IX_ARRAY_LEN(names); i++) {
        ix_token id = ix__vocab_lookup(t, names[i], strlen(names[i]));
        if (id >= 0 && t->types[id] == IX_TOKEN_TYPE_CONTROL) {
            t->eog[id] = 1;
            if (t->eot < 0 && i == 0) t->eot = id;
        }
    }
}

static ix_status load_vocab(ix_tokenizer *t, const ix_gguf *g, ix_errbuf *err) {
    ix_gguf_arr tokens, scores = {0}, types = {0};
    ix_status s = ix_gguf_get_arr(g, "tokenizer.ggml.tokens", IX_GGUF_STRING, &tokens, err);
    if (s != IX_OK) return s;
    if (tokens.n == 0 || tokens.n > (uint64_t)INT32_MAX)
        return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens is not a usable vocabulary",
                       (unsigned long long)tokens.n);
    int32_t n = (int32_t)tokens.n;
    t->n_vocab = n;

    bool has_scores = ix_gguf_find_key(g, "tokenizer.ggml.scores") >= 0;
    if (has_scores) {
        s = ix_gguf_get_arr(g, "tokenizer.ggml.scores", IX_GGUF_FLOAT32, &scores, err);
        if (s != IX_OK) return s;
        if (scores.n != tokens.n)
            return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.scores has %llu entries for %d tokens",
                           (unsigned long long)scores.n, n);
    }
    bool has_types = ix_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0;
    if (has_types) {
        s = ix_gguf_get_arr(g, "tokenizer.ggml.token_type", IX_GGUF_TYPE_COUNT, &types, err);
        if (s != IX_OK) return s;
        if (types.type != IX_GGUF_INT32 && types.type != IX_GGUF_UINT32 &&
            types.type != IX_GGUF_INT8 && types.type != IX_GGUF_UINT8)
            return ix_errf(err, IX_ERR_TYPE, "tokenizer.ggml.token_type: expected integer array, found %s",
                           ix_gguf_type_name(types.type));
        if (types.n != tokens.n)
            return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.token_type has %llu entries for %d tokens",
                           (unsigned long long)types.n, n);
    }

    uint64_t arena_bytes = 0;
    for (int32_t i = 0; i < n; i++) {
        ix_str p = ix_gguf_arr_str(&tokens, (uint64_t)i);
        if (p.len > 0xffffff)
            return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.tokens[%d] is %zu bytes long", i, p.len);
        arena_bytes += p.len + 1;
    }
    if (arena_bytes > UINT32_MAX)
        return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.tokens: %llu bytes of text is too much",
                       (unsigned long long)arena_bytes);
    uint32_t cap = 16;
    while (cap < (uint32_t)n * 2u) cap *= 2;

    t->arena = ix_malloc(arena_bytes);
    t->piece_off = ix_malloc((size_t)n * sizeof(uint32_t));
    t->piece_len = ix_malloc((size_t)n * sizeof(uint32_t));
    t->scores = ix_calloc((size_t)n, sizeof(float));
    t->types = ix_malloc((size_t)n);
    t->eog = ix_calloc((size_t)n, 1);
    t->strip = ix_calloc((size_t)n, 1);
    t->map.slots = ix_malloc((size_t)cap * sizeof(int32_t));
    if (!t->arena || !t->piece_off || !t->piece_len || !t->scores || !t->types || !t->eog ||
        !t->strip || !t->map.slots)
        return ix_errf(err, IX_ERR_NOMEM, "out of memory loading a vocabulary of %d tokens", n);
    t->map.cap = cap;
    memset(t->map.slots, 0xff, (size_t)cap * sizeof(int32_t));

    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        ix_str p = ix_gguf_arr_str(&tokens, (uint64_t)i);
        if (p.len) memcpy(t->arena + off, p.ptr, p.len);
        t->arena[off + p.len] = '\0';
        t->piece_off[i] = off;
        t->piece_len[i] = (uint32_t)p.len;
        off += (uint32_t)p.len + 1;
        if (has_scores) t->scores[i] = (float)ix_gguf_arr_f64(&scores, (uint64_t)i);
        int64_t ty = has_types ? ix_gguf_arr_i64(&types, (uint64_t)i) : IX_TOKEN_TYPE_NORMAL;
        if (ty < 0 || ty > IX_TOKEN_TYPE_BYTE)
            return ix_errf(err, IX_ERR_FORMAT, "tokenizer.ggml.token_type[%d] = %lld is not a token type",
                           i, (long long)ty);
        t->types[i] = (uint8_t)ty;
        if (p.len) vocab_insert(t, i);
    }
    return IX_OK;
}

static void init_spm(ix_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_token[b] = ix__vocab_lookup(t, name, 6);
    }
    /* Word-by-word merging is exact only if no piece has a "▁" that follows
     * another character than "▁" (true of SentencePiece's default
     * split_by_whitespace vocabularies). */
    t->spm_word_split = true;
    for (int32_t id = 0; id < t->n_vocab && t->spm_word_split; id++) {
        const char *p = ix__piece(t, id);
        uint32_t n = t->piece_len[id];
        for (uint32_t i = 1; i + 3 <= n; i++) {
            if (memcmp(p + i, "\xe2\x96\x81", 3) != 0) continue;
            bool after_mark = i >= 3 && memcmp(p + i - 3, "\xe2\x96\x81", 3) == 0;
            if (!after_mark) {
                t->spm_word_split = false;
                break;
            }
        }
    }
}

/* What llama.cpp's llama_vocab::impl::load starts a vocabulary with, by
 * tokenizer.ggml.model, before the pre-tokenizer name (BPE) and the GGUF keys
 * have their say. A default id outside the vocabulary is dropped, as there. */
typedef struct model_defaults {
    const char *name;
    ix_tokenizer_kind kind;
    ix_token bos, eos, unk;
    bool add_bos, add_space_prefix;
} model_defaults;

static const model_defaults k_models[] = {
    {"llama", IX_TOKENIZER_SPM, 1, 2, 0, true, true},
    /* 11 is Falcon's <|endoftext|>: llama.cpp's BPE code began with Falcon */
    {"gpt2", IX_TOKENIZER_BPE, 11, 11, IX_TOKEN_NONE, false, false},
};

static ix_token id_in_vocab(const ix_tokenizer *t, ix_token id) {
    return id >= 0 && id < t->n_vocab ? id : IX_TOKEN_NONE;
}

/* Defaults by model, then, for BPE, by pre-tokenizer name. */
static ix_status apply_defaults(ix_tokenizer *t, const model_defaults *m, ix_str pre,
                                ix_errbuf *err) {
    t->bos = id_in_vocab(t, m->bos);
    t->eos = id_in_vocab(t, m->eos);
    t->unk = id_in_vocab(t, m->unk);
    t->add_bos = m->add_bos;
    t->add_space_prefix = m->add_space_prefix;
    if (t->kind != IX_TOKENIZER_BPE) return IX_OK; /* SPM ignores tokenizer.ggml.pre */
    unsigned d;
    if (ix__pretok_from_name(pre.ptr, pre.len, &t->pre, &d) != IX_OK)
        return ix_errf(err, IX_ERR_UNSUPPORTED,
                       "tokenizer.ggml.pre '%s' is not a supported pre-tokenizer", t->pre_name);
    t->add_bos = (d & IX__PRE_ADD_BOS) != 0;
    t->ignore_merges = (d & IX__PRE_IGNORE_MERGES) != 0;
    t->clean_spaces = (d & IX__PRE_CLEAN_SPACES) != 0;
    if (d & IX__PRE_NO_BOS_ID) t->bos = IX_TOKEN_NONE;
    return IX_OK;
}

static bool str_contains(ix_str s, const char *what) {
    size_t n = strlen(what);
    for (size_t i = 0; n <= s.len && i <= s.len - n; i++)
        if (memcmp(s.ptr + i, what, n) == 0) return true;
    return false;
}

static void set_strip(ix_tokenizer *t, const char *piece, unsigned flag, bool on) {
    ix_token id = ix__vocab_lookup(t, piece, strlen(piece));
    if (id < 0) return;
    t->strip[id] = (uint8_t)(on ? t->strip[id] | flag : t->strip[id] & ~flag);
}

/* Special tokens that swallow the whitespace beside them. GGUF files do not
 * say; llama.cpp decides by general.name, tokenizer.ggml.pre and
 * general.architecture at the end of its load, and so do we. */
static void apply_strip_rules(ix_tokenizer *t, const ix_gguf *g) {
    ix_str pre = {"", 0}, arch = {"", 0}, raw_name = {"", 0};
    char name[256]; /* general.name in lower case; the rules look at its start */
    /* A key that is absent or not a string matches no rule. */
    ix_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL);
    ix_gguf_get_str(g, "general.architecture", &arch, NULL);
    ix_gguf_get_str(g, "general.name", &raw_name, NULL);
    size_t n = raw_name.len < sizeof name ? raw_name.len : sizeof name;
    for (size_t i = 0; i < n; i++) {
        char c = raw_name.ptr[i];
        name[i] = c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
    }
    ix_str lower = {name, n};

    if (str_contains(pre, "jina-v2-de") || str_contains(pre, "jina-v2-es") ||
        str_contains(pre, "jina-v2-code") || str_contains(arch, "nomic-bert-moe") ||
        str_contains(arch, "jina-bert-v3")) {
        set_strip(t, "<mask>", IX__STRIP_LEFT, true);
    } else if (str_contains(lower, "phi-3") || str_contains(lower, "phi3")) {
        /* Phi-3's chat markers eat the newline after them; BOS, <unk> and
         * <|endoftext|> do not. */
        for (int32_t k = 0; k < t->n_special; k++)
            t->strip[t->special[k]] |= IX__STRIP_RIGHT;
        set_strip(t, "</s>", IX__STRIP_RIGHT, true);
        set_strip(t, "<unk>", IX__STRIP_RIGHT, false);
        set_strip(t, "<s>", IX__STRIP_RIGHT, false);
        set_strip(t, "<|endoftext|>", IX__STRIP_RIGHT, false);
    } else if (str_contains(lower, "modern-bert")) {
        set_strip(t, "[MASK]", IX__STRIP_LEFT, true);
    }
}

ix_status ix_tokenizer_create(ix_tokenizer **out, const ix_gguf *g, ix_errbuf *err) {
    *out = NULL;
    ix_str model;
    ix_status s = ix_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (s == IX_ERR_NOT_FOUND)
        return ix_errf(err, IX_ERR_FORMAT, "this file has no tokenizer (tokenizer.ggml.model is absent)");
    if (s != IX_OK) return s;

    ix_tokenizer *t = ix_calloc(1, sizeof *t);
    if (!t) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    t->bos = t->eos = t->eot = t->unk = t->pad = t->eom = IX_TOKEN_NONE;
    for (int b = 0; b < 256; b++) t->byte_token[b] = t->bpe_byte_token[b] = IX_TOKEN_NONE;
    snprintf(t->model_name, sizeof t->model_name, "%.*s", (int)(model.len < 31 ? model.len : 31),
             model.ptr);

    const model_defaults *m = NULL;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_models); i++)
        if (ix_str_eq(model, k_models[i].name)) m = &k_models[i];
    if (!m) {
        s = ix_errf(err, IX_ERR_UNSUPPORTED,
                    "tokenizer.ggml.model '%s' is not supported (supported: llama, gpt2)",
                    t->model_name);
        goto fail;
    }
    t->kind = m->kind;

    ix_str pre = {"default", 7};
    s = ix_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err);
    if (s == IX_ERR_NOT_FOUND) {
        pre = (ix_str){"default", 7};
    } else if (s != IX_OK) {
        goto fail;
    }
    snprintf(t->pre_name, sizeof t->pre_name, "%.*s", (int)(pre.len < 63 ? pre.len : 63), pre.ptr);

    if ((s = load_vocab(t, g, err)) != IX_OK) goto fail;
    if ((s = apply_defaults(t, m, pre, err)) != IX_OK) goto fail;
    if (t->kind == IX_TOKENIZER_SPM) {
        init_spm(t);
    } else if ((s = ix__bpe_init(t, g, err)) != IX_OK) {
        goto fail;
    }

    /* Explicit keys always win over the defaults. */
    static const struct {
        const char *key;
        size_t field;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(ix_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(ix_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(ix_tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(ix_tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(ix_tokenizer, unk)},
        {"tokenizer.ggml.padding_token_id", offsetof(ix_tokenizer, pad)},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(ids); i++) {
        s = opt_token_id(g, ids[i].key, t->n_vocab, (ix_token *)((char *)t + ids[i].field), err);
        if (s != IX_OK) goto fail;
    }
    if ((s = opt_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) != IX_OK) goto fail;
    if ((s = opt_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) != IX_OK) goto fail;
    if ((s = opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err)) != IX_OK)
        goto fail;
    /* llama.cpp refuses such a file; we add nothing instead. */
    if (t->add_bos && t->bos < 0) t->add_bos = false;
    if (t->add_eos && t->eos < 0) t->add_eos = false;

    if ((s = build_specials(t)) != IX_OK) {
        ix_errf(err, s, "out of memory");
        goto fail;
    }
    apply_strip_rules(t, g);
    mark_eog(t);
    *out = t;
    return IX_OK;
fail:
    ix_tokenizer_destroy(t);
    return s;
}

ix_status ix_tokenizer_load(ix_tokenizer **out, const char *path, ix_errbuf *err) {
    ix_gguf *g;
    *out = NULL;
    ix_status s = ix_gguf_open(&g, path, err);
    if (s != IX_OK) return s;
    s = ix_tokenizer_create(out, g, err);
    ix_gguf_close(g);
    return s;
}

void ix_tokenizer_destroy(ix_tokenizer *t) {
    if (!t) return;
    ix_free(t->arena);
    ix_free(t->piece_off);
    ix_free(t->piece_len);
    ix_free(t->scores);
    ix_free(t->types);
    ix_free(t->eog);
    ix_free(t->strip);
    ix_free(t->map.slots);
    ix_free(t->merges);
    ix_free(t->special);
    ix_free(t);
}

/* ---- accessors ------------------------------------------------------------ */

ix_tokenizer_kind ix_tokenizer_get_kind(const ix_tokenizer *t) { return t->kind; }
const char *ix_tokenizer_model_name(const ix_tokenizer *t) { return t->model_name; }
const char *ix_tokenizer_pre_name(const ix_tokenizer *t) {
    return t->kind == IX_TOKENIZER_BPE ? t->pre_name : "";
}
int32_t ix_tokenizer_n_vocab(const ix_tokenizer *t) { return t->n_vocab; }
ix_token ix_tokenizer_bos(const ix_tokenizer *t) { return t->bos; }
ix_token ix_tokenizer_eos(const ix_tokenizer *t) { return t->eos; }
ix_token ix_tokenizer_eot(const ix_tokenizer *t) { return t->eot; }
ix_token ix_tokenizer_unk(const ix_tokenizer *t) { return t->unk; }
ix_token ix_tokenizer_pad(const ix_tokenizer *t) { return t->pad; }
bool ix_tokenizer_add_bos(const ix_tokenizer *t) { return t->add_bos; }
bool ix_tokenizer_add_eos(const ix_tokenizer *t) { return t->add_eos; }

bool ix_tokenizer_is_eog(const ix_tokenizer *t, ix_token id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

ix_str ix_tokenizer_piece(const ix_tokenizer *t, ix_token id) {
    if (id < 0 || id >= t->n_vocab) return (ix_str){"", 0};
    return (ix_str){ix__piece(t, id), t->piece_len[id]};
}

ix_token_type ix_tokenizer_token_type(const ix_tokenizer *t, ix_token id) {
    if (id < 0 || id >= t->n_vocab) return IX_TOKEN_TYPE_UNDEFINED;
    return (ix_token_type)t->types[id];
}

ix_token ix_tokenizer_find(const ix_tokenizer *t, const char *piece, size_t len) {
    return len ? ix__vocab_lookup(t, piece, len) : IX_TOKEN_NONE;
}

/* The bytes llama.cpp's strip attributes remove: C isspace in the C locale. */
static bool is_ascii_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static unsigned strip_of(const ix_tokenizer *t, ix_token id) {
    return id >= 0 && id < t->n_vocab ? t->strip[id] : 0;
}

ix_str ix_tokenizer_trim_between(const ix_tokenizer *t, ix_token before, const char *text,
                                 size_t len, ix_token after) {
    size_t a = 0, b = len;
    if (strip_of(t, before) & IX__STRIP_RIGHT)
        while (a < b && is_ascii_space(text[a]))
            a++;
    if (strip_of(t, after) & IX__STRIP_LEFT)
        while (b > a && is_ascii_space(text[b - 1]))
            b--;
    return (ix_str){text + a, b - a};
}

/* ---- encoding ----------------------------------------------------------------- */

/* Longest special token starting at text[i] that may match here, or -1. */
static ix_token match_special(const ix_tokenizer *t, const char *text, size_t len, size_t i,
                              bool parse_special) {
    unsigned char b = (unsigned char)text[i];
    for (int32_t k = t->special_first[b]; k < t->special_first[b + 1]; k++) {
        ix_token id = t->special[k];
        if (!parse_special && t->types[id] != IX_TOKEN_TYPE_USER_DEFINED) continue;
        uint32_t n = t->piece_len[id];
        if (n <= len - i && memcmp(text + i, ix__piece(t, id), n) == 0) return id;
    }
    return IX_TOKEN_NONE;
}

ix_token ix_tokenizer_special_at(const ix_tokenizer *t, const char *text, size_t len, size_t i) {
    if (!t || !text || i >= len || !t->n_special) return IX_TOKEN_NONE;
    return match_special(t, text, len, i, true);
}

static ix_status encode_fragment(const ix_tokenizer *t, const char *text, size_t len,
                                 ix_token_vec *out) {
    if (len == 0) return IX_OK;
    /* Every raw fragment follows the start of the text or a special token, and
     * SPM puts its dummy-prefix space at each of those boundaries. */
    if (t->kind == IX_TOKENIZER_SPM) return ix__spm_encode(t, text, len, t->add_space_prefix, out);
    return ix__bpe_encode(t, text, len, out);
}

ix_status ix_tokenizer_encode(const ix_tokenizer *t, const char *text, size_t len, unsigned flags,
                              ix_token_vec *out, ix_errbuf *err) {
    size_t bad;
    if (len > (size_t)INT32_MAX / 4)
        return ix_errf(err, IX_ERR_TOO_LONG, "text of %zu bytes is too long to tokenize", len);
    if (!ix_utf8_valid(text, len, &bad))
        return ix_errf(err, IX_ERR_UTF8, "invalid UTF-8 at byte offset %zu", bad);
    size_t n0 = out->n;
    bool parse_special = (flags & IX_TOK_PARSE_SPECIAL) != 0;
    ix_status s = IX_OK;
    if ((flags & IX_TOK_ADD_SPECIAL) && t->add_bos) s = ix_token_vec_push(out, t->bos);

    size_t start = 0;
    for (size_t i = 0; s == IX_OK && i < len;) {
        ix_token sp = t->n_special ? match_special(t, text, len, i, parse_special) : IX_TOKEN_NONE;
        if (sp < 0) {
            i += ix__utf8_len((unsigned char)text[i]);
            continue;
        }
        ix_str frag = ix_tokenizer_trim_between(t, IX_TOKEN_NONE, text + start, i - start, sp);
        s = encode_fragment(t, frag.ptr, frag.len, out);
        if (s == IX_OK) s = ix_token_vec_push(out, sp);
        i += t->piece_len[sp];
        /* Strip before looking for the next special token: a whitespace
         * special token right after one that strips cannot match (llama.cpp,
         * which looks for the longest special tokens first, agrees whenever
         * the stripping token is the longer). */
        i = (size_t)(ix_tokenizer_trim_between(t, sp, text + i, len - i, IX_TOKEN_NONE).ptr - text);
        start = i;
    }
    if (s == IX_OK) s = encode_fragment(t, text + start, len - start, out);
    if (s == IX_OK && (flags & IX_TOK_ADD_SPECIAL) && t->add_eos) s = ix_token_vec_push(out, t->eos);
    if (s != IX_OK) {
        out->n = n0;
        return ix_errf(err, s, "out of memory while tokenizing %zu bytes", len);
    }
    return IX_OK;
}

/* ---- decoding --------------------------------------------------------------------- */

/* Boundary state: SPM strips one dummy-prefix space from the first text token
 * at the start and after every special token, mirroring the encoder. */
ix_status ix_tokenizer_token_bytes(const ix_tokenizer *t, ix_token id, unsigned flags, bool first,
                                   ix_buf *out) {
    if (id < 0 || id >= t->n_vocab) return IX_ERR_RANGE;
    const char *p = ix__piece(t, id);
    size_t n = t->piece_len[id];
    switch ((ix_token_type)t->types[id]) {
    case IX_TOKEN_TYPE_CONTROL:
        return (flags & IX_DETOK_RENDER_SPECIAL) ? ix_buf_append(out, p, n) : IX_OK;
    case IX_TOKEN_TYPE_UNKNOWN:
        if (flags & IX_DETOK_RENDER_SPECIAL) return ix_buf_append(out, p, n);
        return ix_buf_append(out, "\xe2\x96\x85", 3); /* U+2585, llama.cpp's unknown mark */
    case IX_TOKEN_TYPE_USER_DEFINED:
        return ix_buf_append(out, p, n);
    case IX_TOKEN_TYPE_BYTE:
        if (t->kind == IX_TOKENIZER_SPM && n == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x') {
            char byte = (char)strtol(p + 3, NULL, 16);
            return ix_buf_append(out, &byte, 1);
        }
        break;
    default:
        break;
    }
    if (t->kind == IX_TOKENIZER_SPM) {
        /* "▁" (E2 96 81) is a space. */
        size_t i = 0;
        ix_status s = ix_buf_reserve(out, n);
        if (s != IX_OK) return s;
        if (first && t->add_space_prefix && !(flags & IX_DETOK_KEEP_LEADING_SPACE) && n >= 3 &&
            memcmp(p, "\xe2\x96\x81", 3) == 0)
            i = 3;
        while (i < n) {
            if (i + 3 <= n && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
                out->data[out->len++] = ' ';
                i += 3;
            } else {
                out->data[out->len++] = p[i++];
            }
        }
        out->data[out->len] = '\0';
        return IX_OK;
    }
    /* Byte-level BPE: each code point is the image of one byte. */
    ix_status s = ix_buf_reserve(out, n);
    if (s != IX_OK) return s;
    for (size_t i = 0; i < n;) {
        size_t k;
        uint32_t cp = ix__utf8_decode(p + i, n - i, &k);
        if (cp < 512 && t->cp_to_byte[cp] >= 0) {
            out->data[out->len++] = (char)t->cp_to_byte[cp];
        } else {
            /* Not a byte image (malformed vocabulary entry): keep it as text. */
            if ((s = ix_buf_reserve(out, k + (n - i))) != IX_OK) return s;
            memcpy(out->data + out->len, p + i, k);
            out->len += k;
        }
        i += k;
    }
    out->data[out->len] = '\0';
    return IX_OK;
}

bool ix__detok_is_boundary(const ix_tokenizer *t, ix_token id) {
    uint8_t ty = t->types[id];
    return (ty == IX_TOKEN_TYPE_CONTROL || ty == IX_TOKEN_TYPE_USER_DEFINED ||
            ty == IX_TOKEN_TYPE_UNKNOWN) &&
           !(t->strip[id] & IX__STRIP_RIGHT);
}

/* llama.cpp's clean_up_tokenization_spaces (llama_detokenize) on s[0..n),
 * three passes that each keep the first byte and drop spaces: one before
 * ? ! . or , ; both around a lone ' ; one before 's 'm 're 've (not 't 'd
 * 'll). Returns the new length. Each pass compacts in place; its writes
 * never get ahead of its reads, so it sees the bytes as they were before it
 * (but for the NUL of the second pass). */
static size_t clean_spaces(char *s, size_t n) {
    if (n == 0) return 0;
    size_t w = 1;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (s[i - 1] == ' ' && (c == '?' || c == '!' || c == '.' || c == ',')) w--;
        s[w++] = c;
    }
    n = w;
    w = 1;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (c == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            w--;
            /* Skip the space after; as a NUL it is no "space before" for the
             * next byte either (" ' ' " loses only the first pair). */
            s[++i] = '\0';
        }
        s[w++] = c;
    }
    n = w;
    w = 1;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (c == '\'' && s[i - 1] == ' ' && i + 1 < n) {
            char c1 = s[i + 1], c2 = i + 2 < n ? s[i + 2] : '\0';
            if (c1 == 's' || c1 == 'm' || ((c1 == 'r' || c1 == 'v') && c2 == 'e')) w--;
        }
        s[w++] = c;
    }
    return w;
}

ix_status ix_tokenizer_decode(const ix_tokenizer *t, const ix_token *ids, size_t n, unsigned flags,
                              ix_buf *out, ix_errbuf *err) {
    bool boundary = true;
    size_t len0 = out->len;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            out->len = len0;
            if (out->data) out->data[len0] = '\0';
            return ix_errf(err, IX_ERR_RANGE, "token id %d at position %zu is outside the vocabulary of %d",
                           ids[i], i, t->n_vocab);
        }
        ix_status s = ix_tokenizer_token_bytes(t, ids[i], flags, boundary, out);
        if (s != IX_OK) {
            out->len = len0;
            if (out->data) out->data[len0] = '\0';
            return ix_errf(err, s, "out of memory while decoding");
        }
        boundary = ix__detok_is_boundary(t, ids[i]);
    }
    if ((flags & IX_DETOK_CLEAN_SPACES) && t->clean_spaces && out->len > len0) {
        out->len = len0 + clean_spaces(out->data + len0, out->len - len0);
        out->data[out->len] = '\0';
    }
    return IX_OK;
}
