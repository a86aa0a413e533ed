/*
 * inferx mkmodel: writes a GGUF model with the shape of a real one (TinyLlama
 * 1.1B by default) and seeded random weights, so that benchmarks and tests
 * can run a model of a known size that nobody has to download.
 *
 * The tokenizer is copied key by key from a vocab-only GGUF (--vocab), or
 * from the bundled model, or synthesized (--vocab-size N: a byte-fallback
 * SentencePiece vocabulary of N made-up pieces); the vocabulary size of the
 * model is the tokenizer's, as the loader requires.
 *
 * Memory stays bounded whatever the model size: the GGUF writer borrows all
 * tensor data until it writes, so the weights are generated row by row into
 * an unlinked spool file next to the output and handed to the writer as a
 * read-only mapping of it (page cache, not heap). The writer writes to a
 * temporary name and renames, so a failure leaves no partial output.
 *
 * Weights: every value is an Irwin-Hall sum of four uniforms (normal-ish,
 * |x| < 3.5 sigma) with sigma = 1/sqrt(fan_in), so each projection keeps its
 * input's scale and 22 layers stay finite; norm weights are 1 + 0.02 noise,
 * biases 0.02 noise. Each tensor has its own generator seeded from --seed and
 * its index, so a given seed gives the same real-valued model in every
 * --type (the quantized files are quantizations of the F32 one).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli/cli.h"
#include "inferx/gguf.h"
#include "inferx/kernels.h"
#include "inferx/model.h"

typedef struct shape {
    const char *name;
    int32_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_ctx;
    float rope_base, norm_eps;
} shape;

static const shape k_shapes[] = {
    /* TinyLlama-1.1B (Llama 2 architecture, GQA 32/4). */
    {"tinyllama", 22, 2048, 32, 4, 5632, 2048, 10000.0f, 1e-5f},
    /* Small enough for tests under sanitizers; every row a multiple of 32. */
    {"tiny", 2, 64, 4, 2, 128, 256, 10000.0f, 1e-5f},
};

typedef struct wtype {
    const char *name;
    ix_dtype type;
    uint32_t file_type; /* general.file_type (llama.cpp's LLAMA_FTYPE_*) */
} wtype;

static const wtype k_types[] = {
    {"f32", IX_DTYPE_F32, 0},
    {"f16", IX_DTYPE_F16, 1},
    {"bf16", IX_DTYPE_BF16, 32},
    {"q8_0", IX_DTYPE_Q8_0, 7},
    {"q4_0", IX_DTYPE_Q4_0, 2},
    {"q4_1", IX_DTYPE_Q4_1, 3},
    {"q5_0", IX_DTYPE_Q5_0, 8},
    {"q5_1", IX_DTYPE_Q5_1, 9},
    /* the K and IQ types everywhere: llama.cpp's "pure" file types */
    {"q2_k", IX_DTYPE_Q2_K, 10},
    {"q3_k", IX_DTYPE_Q3_K, 11},
    {"q4_k", IX_DTYPE_Q4_K, 14},
    {"q5_k", IX_DTYPE_Q5_K, 16},
    {"q6_k", IX_DTYPE_Q6_K, 18},
    {"iq4_nl", IX_DTYPE_IQ4_NL, 25},
    {"iq4_xs", IX_DTYPE_IQ4_XS, 30},
};

typedef struct mk_opts {
    const char *out, *vocab, *arch, *rope_scaling;
    shape sh;
    const wtype *wt;
    uint64_t seed;
    int32_t vocab_size; /* 0: the tokenizer's */
    int32_t sliding_window;
    float rope_factor, rope_low, rope_high;
    int32_t rope_orig_ctx;
    bool tied;
} mk_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: inferx mkmodel -o OUT.gguf [options]\n"
            "\n"
            "Writes a model with a real architecture's shape and seeded random weights\n"
            "(for benchmarks and tests).\n"
            "\n"
            "  -o, --output FILE      the GGUF file to write (required)\n"
            "  --shape NAME           tinyllama (TinyLlama-1.1B: 22 layers, dim 2048, 32 heads,\n"
            "                         4 KV heads, FFN 5632, ctx 2048; the default) or tiny\n"
            "                         (2 layers, dim 64, 4 heads, 2 KV heads, FFN 128, ctx 256)\n"
            "  --type T               weight type of the matmuls and the token embedding:\n"
            "                         f32, f16 (default), bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k,\n"
            "                         q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs (K and IQ4_XS rows are\n"
            "                         blocks of 256); norms and biases are f32\n"
            "  --vocab FILE           copy the tokenizer (every tokenizer.* key) from this GGUF,\n"
            "                         e.g. a vocab-only file; default: the bundled model's\n"
            "                         (%s)\n"
            "  --vocab-size N         without --vocab: synthesize a byte-fallback SentencePiece\n"
            "                         vocabulary of N >= 259 tokens instead of copying one\n"
            "  --seed S               weight seed (default 1); same seed, same weights\n"
            "  --arch A               an architecture of the table: llama (default), mistral, qwen2,\n"
            "                         qwen3, phi3, gemma, gemma2, gpt2, starcoder2, stablelm, falcon\n"
            "                         (its required tensors, plus output.weight unless --tied)\n"
            "  --layers N, --embd N, --heads N, --kv-heads N, --ff N, --ctx N\n"
            "                         override the shape's dimensions\n"
            "  --rope-base F          RoPE frequency base (default 10000)\n"
            "  --eps F                norm epsilon (default 1e-5)\n"
            "  --sliding-window N     attend to the last N positions only (0 = off)\n"
            "  --rope-scaling S       none (default), linear, llama3, yarn or longrope (phi3:\n"
            "                         writes rope_factors_long/short)\n"
            "  --rope-factor F        scaling factor (default 8 for llama3, else 1)\n"
            "  --rope-low-freq F      llama3 low_freq_factor (default 1)\n"
            "  --rope-high-freq F     llama3 high_freq_factor (default 4)\n"
            "  --rope-orig-ctx N      original context length of llama3, yarn, longrope (default 8192)\n"
            "  --tied                 no output.weight: the output head is the token embedding\n"
            "  -h, --help             show this help\n",
            ix_cli_default_model());
}

static bool parse_pos_f32(const char *opt, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = s ? strtof(s, &end) : 0.0f;
    if (!s || end == s || *end || errno || !isfinite(v) || !(v > 0)) {
        fprintf(stderr, "inferx mkmodel: %s expects a positive number, got '%s'\n", opt, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

/* An integer in [min, max] (0 <= min <= max <= INT32_MAX). */
static bool parse_dim(const char *opt, const char *s, int32_t min, int32_t max, int32_t *out) {
    uint64_t v;
    if (!ix_cli_parse_u64(opt, s, &v)) return false;
    if (v < (uint64_t)min || v > (uint64_t)max) {
        fprintf(stderr, "inferx mkmodel: %s must be in [%d, %d], got %s\n", opt, min, max, s);
        return false;
    }
    *out = (int32_t)v;
    return true;
}

/* Returns 0 on success, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, mk_opts *o) {
    const char *shape_name = "tinyllama", *type_name = "f16";
    int32_t over[6] = {-1, -1, -1, -1, -1, -1}; /* layers embd heads kv-heads ff ctx */
    static const char *const over_opts[6] = {"--layers", "--embd", "--heads", "--kv-heads", "--ff", "--ctx"};
    float rope_base = 0, eps = 0;
    bool have_factor = false;
    o->seed = 1;
    o->arch = "llama";
    o->rope_scaling = "none";
    o->rope_low = 1.0f;
    o->rope_high = 4.0f;
    o->rope_orig_ctx = 8192;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--tied")) {
            o->tied = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "inferx mkmodel: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        bool ok = true;
        int dim = -1;
        for (int k = 0; k < 6; k++)
            if (!strcmp(a, over_opts[k])) dim = k;
        if (dim >= 0) {
            ok = parse_dim(a, v, 1, dim == 5 ? (1 << 24) : (1 << 20), &over[dim]);
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            o->out = v;
        } else if (!strcmp(a, "--shape")) {
            shape_name = v;
        } else if (!strcmp(a, "--type")) {
            type_name = v;
        } else if (!strcmp(a, "--vocab")) {
            o->vocab = v;
        } else if (!strcmp(a, "--vocab-size")) {
            ok = parse_dim(a, v, 259, 1 << 24, &o->vocab_size);
        } else if (!strcmp(a, "--seed")) {
            ok = ix_cli_parse_u64(a, v, &o->seed);
        } else if (!strcmp(a, "--arch")) {
            o->arch = v;
            ix_model_hparams probe = {0};
            ix_errbuf e = {{0}};
            if (ix_model_arch_init(&probe, v, &e) != IX_OK) {
                fprintf(stderr, "inferx mkmodel: --arch: %s\n", e.msg);
                ok = false;
            }
        } else if (!strcmp(a, "--rope-base")) {
            ok = parse_pos_f32(a, v, &rope_base);
        } else if (!strcmp(a, "--eps")) {
            ok = parse_pos_f32(a, v, &eps);
        } else if (!strcmp(a, "--sliding-window")) {
            ok = parse_dim(a, v, 0, 1 << 24, &o->sliding_window);
        } else if (!strcmp(a, "--rope-scaling")) {
            o->rope_scaling = v;
            if (strcmp(v, "none") && strcmp(v, "linear") && strcmp(v, "llama3") && strcmp(v, "yarn") &&
                strcmp(v, "longrope")) {
                fprintf(stderr,
                        "inferx mkmodel: --rope-scaling must be none, linear, llama3, yarn or longrope, got '%s'\n", v);
                ok = false;
            }
        } else if (!strcmp(a, "--rope-factor")) {
            ok = parse_pos_f32(a, v, &o->rope_factor);
            have_factor = true;
        } else if (!strcmp(a, "--rope-low-freq")) {
            ok = parse_pos_f32(a, v, &o->rope_low);
        } else if (!strcmp(a, "--rope-high-freq")) {
            ok = parse_pos_f32(a, v, &o->rope_high);
        } else if (!strcmp(a, "--rope-orig-ctx")) {
            ok = parse_dim(a, v, 1, 1 << 24, &o->rope_orig_ctx);
        } else {
            fprintf(stderr, "inferx mkmodel: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!o->out || !*o->out) {
        fprintf(stderr, "inferx mkmodel: -o OUT.gguf is required (see --help)\n");
        return 2;
    }
    const shape *sh = NULL;
    for (size_t k = 0; k < IX_ARRAY_LEN(k_shapes); k++)
        if (!strcmp(shape_name, k_shapes[k].name)) sh = &k_shapes[k];
    if (!sh) {
        fprintf(stderr, "inferx mkmodel: --shape must be tinyllama or tiny, got '%s'\n", shape_name);
        return 2;
    }
    for (size_t k = 0; k < IX_ARRAY_LEN(k_types); k++)
        if (!strcmp(type_name, k_types[k].name)) o->wt = &k_types[k];
    if (!o->wt) {
        fprintf(stderr, "inferx mkmodel: --type must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, "
                        "q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs; got '%s'\n", type_name);
        return 2;
    }
    o->sh = *sh;
    int32_t *dims[6] = {&o->sh.n_layer, &o->sh.n_embd, &o->sh.n_head, &o->sh.n_head_kv, &o->sh.n_ff,
                        &o->sh.n_ctx};
    for (int k = 0; k < 6; k++)
        if (over[k] > 0) *dims[k] = over[k];
    /* Overriding the heads alone keeps GQA valid where it can. */
    if (over[2] > 0 && over[3] < 0 && o->sh.n_head % o->sh.n_head_kv) o->sh.n_head_kv = o->sh.n_head;
    if (rope_base > 0) o->sh.rope_base = rope_base;
    if (eps > 0) o->sh.norm_eps = eps;

    const shape *s = &o->sh;
    if (s->n_embd % s->n_head || (s->n_embd / s->n_head) % 2 || s->n_embd / s->n_head > 1024) {
        fprintf(stderr, "inferx mkmodel: --embd %d / --heads %d must be an even head dimension of at most 1024\n",
                s->n_embd, s->n_head);
        return 2;
    }
    if (s->n_head % s->n_head_kv) {
        fprintf(stderr, "inferx mkmodel: --heads %d must be a multiple of --kv-heads %d\n", s->n_head,
                s->n_head_kv);
        return 2;
    }
    int64_t blk = (int64_t)ix_dtype_block_size(o->wt->type);
    if (blk > 1 && (s->n_embd % blk || s->n_ff % blk)) {
        fprintf(stderr,
                "inferx mkmodel: %s rows are blocks of %lld: --embd %d and --ff %d must be multiples of %lld\n",
                o->wt->name, (long long)blk, s->n_embd, s->n_ff, (long long)blk);
        return 2;
    }
    if (!strcmp(o->rope_scaling, "none") && have_factor) {
        fprintf(stderr, "inferx mkmodel: --rope-factor needs a --rope-scaling other than none\n");
        return 2;
    }
    if (!have_factor) o->rope_factor = !strcmp(o->rope_scaling, "llama3") ? 8.0f : 1.0f;
    if (!strcmp(o->rope_scaling, "llama3") && !(o->rope_high > o->rope_low)) {
        fprintf(stderr, "inferx mkmodel: --rope-high-freq must exceed --rope-low-freq\n");
        return 2;
    }
    if (o->vocab && o->vocab_size) {
        fprintf(stderr, "inferx mkmodel: --vocab and --vocab-size exclude each other (the vocabulary size "
                        "is the tokenizer's)\n");
        return 2;
    }
    return 0;
}

/* ---- tokenizer ------------------------------------------------------------- */

/* Copies every tokenizer.* key of src; *n_vocab = its token count. */
static bool copy_tokenizer(ix_gguf_writer *w, const ix_gguf *src, const char *path, int32_t *n_vocab) {
    ix_errbuf err = {{0}};
    ix_gguf_arr tokens;
    if (ix_gguf_get_arr(src, "tokenizer.ggml.tokens", IX_GGUF_STRING, &tokens, &err) != IX_OK) {
        fprintf(stderr, "inferx mkmodel: %s has no usable tokenizer: %s\n", path, err.msg);
        return false;
    }
    if (tokens.n == 0 || tokens.n > (1u << 24)) {
        fprintf(stderr, "inferx mkmodel: %s: %llu tokens is not a usable vocabulary\n", path,
                (unsigned long long)tokens.n);
        return false;
    }
    *n_vocab = (int32_t)tokens.n;
    static const char prefix[] = "tokenizer.";
    for (uint64_t i = 0; i < ix_gguf_n_kv(src); i++) {
        ix_str k = ix_gguf_kv_key(src, i);
        if (k.len < sizeof prefix - 1 || memcmp(k.ptr, prefix, sizeof prefix - 1)) continue;
        if (ix_gguf_writer_copy_kv(w, src, i) != IX_OK) {
            fprintf(stderr, "inferx mkmodel: copying '%.*s' from %s: %s\n", (int)k.len, k.ptr, path,
                    ix_gguf_writer_errmsg(w));
            return false;
        }
    }
    return true;
}

/* A SentencePiece ("llama") vocabulary: <unk> <s> </s>, the 256 byte-fallback
 * tokens, then made-up word pieces "▁a", "▁b", ... "▁aa", ... with falling
 * scores, so any text encodes (unknown letters fall back to bytes). */
static bool synth_tokenizer(ix_gguf_writer *w, int32_t n) {
    ix_str *pieces = calloc((size_t)n, sizeof *pieces);
    float *scores = malloc((size_t)n * sizeof *scores);
    int32_t *types = malloc((size_t)n * sizeof *types);
    char *text = malloc((size_t)n * 16);
    bool ok = pieces && scores && types && text;
    for (int32_t i = 0; ok && i < n; i++) {
        char *p = text + (size_t)i * 16;
        if (i < 3) {
            strcpy(p, i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            types[i] = i == 0 ? 2 : 3; /* unknown, control */
        } else if (i < 3 + 256) {
            snprintf(p, 16, "<0x%02X>", i - 3);
            types[i] = 6; /* byte */
        } else {
            /* bijective base 26: 0 -> a, 25 -> z, 26 -> aa */
            char word[8];
            int len = 0;
            for (int32_t k = i - 259 + 1; k > 0 && len < 7; k = (k - 1) / 26) word[len++] = (char)('a' + (k - 1) % 26);
            memcpy(p, "\xe2\x96\x81", 3);
            for (int j = 0; j < len; j++) p[3 + j] = word[len - 1 - j];
            p[3 + len] = '\0';
            types[i] = 1; /* normal */
        }
        pieces[i] = (ix_str){p, strlen(p)};
        scores[i] = i < 259 ? 0.0f : -(float)(i - 259);
    }
    ok = ok && ix_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") == IX_OK &&
         ix_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", pieces, (uint64_t)n) == IX_OK &&
         ix_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IX_GGUF_FLOAT32, scores, (uint64_t)n) == IX_OK &&
         ix_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IX_GGUF_INT32, types, (uint64_t)n) == IX_OK &&
         ix_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0) == IX_OK &&
         ix_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1) == IX_OK &&
         ix_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2) == IX_OK &&
         ix_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true) == IX_OK;
    if (!ok) fprintf(stderr, "inferx mkmodel: cannot build a vocabulary of %d tokens: %s\n", n,
                     ix_gguf_writer_errmsg(w));
    free(pieces);
    free(scores);
    free(types);
    free(text);
    return ok;
}

/* ---- metadata -------------------------------------------------------------- */

/* The model's hyperparameters as the architecture table reads them. */
static ix_model_hparams model_hparams(const mk_opts *o, int32_t n_vocab) {
    const shape *s = &o->sh;
    ix_model_hparams hp = {0};
    ix_model_arch_init(&hp, o->arch, NULL); /* checked by parse_args */
    hp.n_vocab = n_vocab;
    hp.n_ctx_train = s->n_ctx;
    hp.n_embd = s->n_embd;
    hp.n_layer = s->n_layer;
    hp.n_ff = s->n_ff;
    hp.n_head = s->n_head;
    hp.n_head_kv = s->n_head_kv;
    hp.head_dim = s->n_embd / s->n_head;
    hp.norm_eps = s->norm_eps;
    hp.sliding_window = o->sliding_window;
    if (hp.pos == IX_POS_ROPE) {
        hp.n_rot = hp.head_dim;
        hp.rope_freq_base = s->rope_base;
        static const char *const scalings[] = {"none", "linear", "yarn", "llama3", "longrope"};
        for (size_t i = 0; i < IX_ARRAY_LEN(scalings); i++)
            if (!strcmp(o->rope_scaling, scalings[i])) hp.rope_scaling = (ix_rope_scaling)i;
        hp.rope_factor = o->rope_factor;
        hp.rope_low_freq_factor = o->rope_low;
        hp.rope_high_freq_factor = o->rope_high;
        hp.rope_orig_ctx = o->rope_orig_ctx;
    }
    return hp;
}

static bool set_hparams(ix_gguf_writer *w, const mk_opts *o, const ix_model_hparams *hp) {
    char key[96], name[96];
    ix_status st = IX_OK;
    snprintf(name, sizeof name, "random-%s-%s-seed%llu", o->sh.name, o->wt->name, (unsigned long long)o->seed);
    if (!st) st = ix_model_arch_write_hparams(w, hp);
    if (!st) st = ix_gguf_writer_set_str(w, "general.name", name);
    if (!st) st = ix_gguf_writer_set_str(w, "general.description",
                                         "random weights written by inferx mkmodel (not a trained model)");
    if (!st) st = ix_gguf_writer_set_u32(w, "general.file_type", o->wt->file_type);
    snprintf(key, sizeof key, "%s.vocab_size", o->arch);
    if (!st) st = ix_gguf_writer_set_u32(w, key, (uint32_t)hp->n_vocab);
    if (st) fprintf(stderr, "inferx mkmodel: metadata: %s\n", ix_gguf_writer_errmsg(w));
    return !st;
}

/* ---- tensors --------------------------------------------------------------- */

typedef enum tkind { T_MATRIX, T_NORM, T_BIAS } tkind;

typedef struct tspec {
    char name[64];
    tkind kind;
    ix_dtype type;
    int64_t ne0, ne1; /* ne1 rows of ne0 elements; ne1 = 1 for vectors */
    uint64_t row_bytes, n_bytes;
    uint64_t offset; /* in the spool file */
} tspec;

typedef struct plan {
    const mk_opts *o;
    tspec *t;
    size_t n, cap;
    bool ok;
} plan;

/* One tensor of the table: required ones, the output head unless --tied,
 * longrope's factor tensors when that scaling is asked for. */
static bool plan_add(void *ctx, const ix_model_tensor_spec *spec) {
    plan *p = ctx;
    bool want = spec->required || (spec->group == IX_TENSOR_OUTPUT && !p->o->tied) ||
                (spec->group == IX_TENSOR_ROPE && !strcmp(p->o->rope_scaling, "longrope"));
    if (spec->group == IX_TENSOR_OUTPUT && spec->required && p->o->tied) {
        fprintf(stderr, "inferx mkmodel: --tied: %s needs its own %s\n", p->o->arch, spec->name);
        return p->ok = false;
    }
    if (!want) return true;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        tspec *t = realloc(p->t, cap * sizeof *t);
        if (!t) return p->ok = false;
        p->t = t;
        p->cap = cap;
    }
    tspec *s = &p->t[p->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", spec->name);
    bool matrix = spec->group == IX_TENSOR_MATRIX || spec->group == IX_TENSOR_OUTPUT;
    s->kind = matrix ? T_MATRIX : spec->group == IX_TENSOR_BIAS ? T_BIAS : T_NORM;
    s->type = matrix ? p->o->wt->type : IX_DTYPE_F32;
    s->ne0 = spec->ne0;
    s->ne1 = spec->ne1;
    return p->ok = ix_dtype_row_bytes(s->type, (uint64_t)s->ne0, &s->row_bytes) &&
                   !ix_mul_overflow_u64(s->row_bytes, (uint64_t)s->ne1, &s->n_bytes);
}

/* The tensors of the model in file order; *n_out set. NULL on overflow or out of memory. */
static tspec *plan_tensors(const mk_opts *o, const ix_model_hparams *hp, size_t *n_out) {
    plan p = {.o = o, .ok = true};
    bool ok = ix_model_arch_tensors(hp, plan_add, &p) == IX_OK && p.ok;
    uint64_t off = 0;
    for (size_t i = 0; ok && i < p.n; i++) {
        p.t[i].offset = off;
        ok = !ix_add_overflow_u64(off, p.t[i].n_bytes, &off);
    }
    if (!ok) {
        if (p.ok) fprintf(stderr, "inferx mkmodel: the model is too large\n");
        free(p.t);
        return NULL;
    }
    *n_out = p.n;
    return p.t;
}

/* xorshift64* seeded through splitmix64, so nearby seeds give unrelated streams. */
typedef struct rng {
    uint64_t s;
} rng;

static rng rng_seed(uint64_t seed, uint64_t stream) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + stream + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (rng){z ? z : 1};
}

static uint64_t rng_next(rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1dull;
}

/* Mean 0, standard deviation 1: four 16-bit uniforms summed (variance of the
 * sum 4 * 65536^2 / 12). */
static float rng_normalish(rng *r) {
    uint64_t x = rng_next(r);
    int64_t sum = (int64_t)(x & 0xffff) + (int64_t)((x >> 16) & 0xffff) + (int64_t)((x >> 32) & 0xffff) +
                  (int64_t)(x >> 48);
    return (float)((double)sum - 131070.0) * (float)(1.0 / 37837.23);
}

/* Generates every tensor into the spool, row by row. */
static bool generate(FILE *spool, const tspec *t, size_t n, uint64_t seed) {
    int64_t max_ne0 = 0;
    uint64_t max_row = 0;
    for (size_t i = 0; i < n; i++) {
        max_ne0 = t[i].ne0 > max_ne0 ? t[i].ne0 : max_ne0;
        max_row = t[i].row_bytes > max_row ? t[i].row_bytes : max_row;
    }
    float *row = malloc((size_t)max_ne0 * sizeof *row);
    void *q = malloc((size_t)max_row);
    bool ok = row && q;
    for (size_t i = 0; ok && i < n; i++) {
        rng r = rng_seed(seed, i);
        float scale = t[i].kind == T_MATRIX ? 1.0f / sqrtf((float)t[i].ne0) : 0.02f;
        float base = t[i].kind == T_NORM ? 1.0f : 0.0f;
        for (int64_t j = 0; ok && j < t[i].ne1; j++) {
            for (int64_t k = 0; k < t[i].ne0; k++) row[k] = base + scale * rng_normalish(&r);
            ok = ix_kernels_quantize_row(t[i].type, row, q, (size_t)t[i].ne0) == IX_OK &&
                 fwrite(q, 1, (size_t)t[i].row_bytes, spool) == t[i].row_bytes;
        }
    }
    if (ok) ok = fflush(spool) == 0;
    if (!ok) fprintf(stderr, "inferx mkmodel: cannot write the weights: %s\n", row && q ? strerror(errno) : "out of memory");
    free(row);
    free(q);
    return ok;
}

int ix_cli_mkmodel(int argc, char **argv) {
    mk_opts o = {0};
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;

    uint64_t t0 = ix_time_ns();
    int rc = 1;
    ix_errbuf err = {{0}};
    ix_gguf *vocab = NULL;
    ix_gguf_writer *w = ix_gguf_writer_create();
    tspec *t = NULL;
    size_t n_t = 0;
    FILE *spool = NULL;
    void *map = MAP_FAILED;
    uint64_t map_bytes = 0;
    char *tmpl = NULL;
    if (!w) {
        fprintf(stderr, "inferx mkmodel: out of memory\n");
        goto done;
    }

    int32_t n_vocab = o.vocab_size;
    if (n_vocab) {
        if (!synth_tokenizer(w, n_vocab)) goto done;
    } else {
        const char *vpath = o.vocab ? o.vocab : ix_cli_default_model();
        if (ix_gguf_open(&vocab, vpath, &err) != IX_OK) {
            fprintf(stderr, "inferx mkmodel: %s: %s\n", vpath, err.msg);
            goto done;
        }
        if (!copy_tokenizer(w, vocab, vpath, &n_vocab)) goto done;
    }
    ix_model_hparams hp = model_hparams(&o, n_vocab);
    if (!set_hparams(w, &o, &hp)) goto done;
    if (!(t = plan_tensors(&o, &hp, &n_t))) goto done;

    /* The spool lives next to the output (same file system, which needs the
     * room anyway) and is unlinked at once: nothing is left behind, even if
     * this process dies. Creating it also checks that the output's directory
     * is writable before any work is done. */
    size_t olen = strlen(o.out);
    tmpl = malloc(olen + 16);
    if (!tmpl) {
        fprintf(stderr, "inferx mkmodel: out of memory\n");
        goto done;
    }
    snprintf(tmpl, olen + 16, "%s.spool.XXXXXX", o.out);
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        fprintf(stderr, "inferx mkmodel: cannot create a file next to '%s': %s\n", o.out, strerror(errno));
        goto done;
    }
    unlink(tmpl);
    if (!(spool = fdopen(fd, "w+b"))) {
        fprintf(stderr, "inferx mkmodel: %s\n", strerror(errno));
        close(fd);
        goto done;
    }
    if (!generate(spool, t, n_t, o.seed)) goto done;
    map_bytes = t[n_t - 1].offset + t[n_t - 1].n_bytes;
    if (map_bytes > SIZE_MAX ||
        (map = mmap(NULL, (size_t)map_bytes, PROT_READ, MAP_SHARED, fileno(spool), 0)) == MAP_FAILED) {
        fprintf(stderr, "inferx mkmodel: cannot map the weights: %s\n", strerror(errno));
        goto done;
    }
    /* The writer reads it once, front to back. */
    madvise(map, (size_t)map_bytes, MADV_SEQUENTIAL);
    for (size_t i = 0; i < n_t; i++) {
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        if (ix_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].kind == T_MATRIX ? 2 : 1,
                                      ne, (const unsigned char *)map + t[i].offset) != IX_OK) {
            fprintf(stderr, "inferx mkmodel: tensor '%s': %s\n", t[i].name, ix_gguf_writer_errmsg(w));
            goto done;
        }
    }
    if (ix_gguf_writer_write(w, o.out) != IX_OK) {
        fprintf(stderr, "inferx mkmodel: %s\n", ix_gguf_writer_errmsg(w));
        goto done;
    }
    uint64_t n_params = 0;
    for (size_t i = 0; i < n_t; i++) n_params += (uint64_t)t[i].ne0 * (uint64_t)t[i].ne1;
    fprintf(stderr,
            "inferx mkmodel: wrote %s: %s, %d layers, dim %d, %d/%d heads, FFN %d, vocab %d, %.2f M "
            "parameters, %s, %.1f MB of weights in %.1f s\n",
            o.out, o.arch, o.sh.n_layer, o.sh.n_embd, o.sh.n_head, o.sh.n_head_kv, o.sh.n_ff, n_vocab,
            (double)n_params * 1e-6, o.wt->name, (double)map_bytes * 1e-6, (double)(ix_time_ns() - t0) * 1e-9);
    rc = 0;
done:
    if (map != MAP_FAILED) munmap(map, (size_t)map_bytes);
    if (spool) fclose(spool);
    free(tmpl);
    free(t);
    ix_gguf_writer_destroy(w);
    ix_gguf_close(vocab);
    return rc;
}
