/*
 * inferx info: describes a GGUF file from its header alone (file facts,
 * architecture hyperparameters, tokenizer, a tensor table and KV-cache sizes)
 * through the public gguf API. Nothing here knows a model architecture:
 * hyperparameters are read as `<general.architecture>.<key>`, and whatever is
 * missing is shown as "-" (a vocab-only file has no tensors and often no
 * usable layer/head counts). With --load it also loads the model as inferx
 * serve does and reports the load time and the memory held.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/gguf.h"
#include "inferx/model.h"
#include "inferx/server.h"

static void usage(FILE *f) {
    fprintf(f, "usage: inferx info [MODEL.gguf] [--ctx N] [--batch B] [--load]\n"
               "\n"
               "Describes a GGUF file: format, metadata, the chat template a server of it\n"
               "uses, tensors and KV cache sizes.\n"
               "\n"
               "  MODEL.gguf  the file (default: $INFERX_MODEL, else the bundled model)\n"
               "  --ctx N     context length for the KV cache size (default: the model's)\n"
               "  --batch B   sequences for the KV cache size (default: 1)\n"
               "  --load      also load the model as inferx serve does (default KV pool) and\n"
               "              report the time and the memory: weights held and resident, KV\n"
               "              pool and resident, the process's resident set (/metrics:\n"
               "              inferx:model_weight_resident_bytes, ...)\n"
               "  --help      this text\n"
               "\n"
               "KV cache bytes = layers x KV heads x (a K row + a V row) x ctx x batch, a row\n"
               "of head-dim values in each --kv-cache-dtype (f32 4 bytes a value, f16 and bf16\n"
               "2, q8_0 and fp8_e4m3 34 bytes per 32 values, q4_0 18: the scales counted).\n"
               "Sizes are decimal: 1 MB = 1,000,000 bytes.\n");
}

/* ---- formatting -------------------------------------------------------- */

/* Room for any formatted number: a 26-character grouped u64 plus a human
 * form and punctuation. */
#define NUM_BUF 96

/* 15448448 -> "15,448,448". */
static const char *group(char *buf, size_t n, uint64_t v) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%" PRIu64, v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* Decimal units: 15448448 -> "15.4 MB". */
static const char *human_bytes(char *buf, size_t n, uint64_t v) {
    static const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
    if (v < 1000) {
        snprintf(buf, n, "%" PRIu64 " B", v);
        return buf;
    }
    double x = (double)v;
    int u = 0;
    while (x >= 1000 && u < 6) {
        x /= 1000;
        u++;
    }
    snprintf(buf, n, "%.*f %s", x < 10 ? 2 : x < 100 ? 1 : 0, x, units[u]);
    return buf;
}

/* "7,671,456 (7.67 M)". */
static const char *human_count(char *buf, size_t n, uint64_t v) {
    static const char *units[] = {"", "K", "M", "B", "T", "P", "E"};
    char g[32];
    group(g, sizeof g, v);
    if (v < 1000) {
        snprintf(buf, n, "%s", g);
        return buf;
    }
    double x = (double)v;
    int u = 0;
    while (x >= 1000 && u < 6) {
        x /= 1000;
        u++;
    }
    snprintf(buf, n, "%s (%.*f %s)", g, x < 10 ? 2 : x < 100 ? 1 : 0, x, units[u]);
    return buf;
}

/* "<count> (<human>)" for a byte size. */
static const char *bytes_str(char *buf, size_t n, uint64_t v) {
    char g[32], h[32];
    if (v < 1000) {
        snprintf(buf, n, "%" PRIu64 " B", v);
        return buf;
    }
    snprintf(buf, n, "%s (%s)", group(g, sizeof g, v), human_bytes(h, sizeof h, v));
    return buf;
}

void ix_cli_print_memory(FILE *f, const char *prefix, ix_engine *e) {
    const ix_model *m = ix_engine_model(e);
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);
    ix_engine_params ep = ix_engine_get_params(e);
    char w[32], wr[32], kv[32], kvr[32], p[32];
    fprintf(f,
            "%sweights %s (resident %s), KV pool %s of %s: %lld blocks of %d tokens (resident %s), "
            "process resident %s\n",
            prefix, human_bytes(w, sizeof w, ix_model_weight_bytes(m)),
            human_bytes(wr, sizeof wr, ix_model_weight_resident_bytes(m)),
            human_bytes(kv, sizeof kv, st.kv.pool_bytes), ix_kv_dtype_name(ep.kv_dtype),
            (long long)st.kv.n_blocks_total, (int)ep.kv_block_size,
            human_bytes(kvr, sizeof kvr, ix_engine_kv_pool_resident_bytes(e)),
            human_bytes(p, sizeof p, ix_process_resident_bytes()));
}

/* Loads the model as inferx serve does (repacked weights, the default KV
 * pool, a thread-less engine) and says how long that took and what it holds. */
static int print_loaded(const char *path) {
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    ix_engine *e = NULL;
    uint64_t t0 = ix_time_ns();
    ix_engine_params ep = ix_engine_default_params();
    ep.start_thread = false;
    if (ix_model_load(&m, path, &err) != IX_OK || ix_engine_create(&e, m, &ep, &err) != IX_OK) {
        fprintf(stderr, "inferx info: %s: %s\n", path, err.msg);
        ix_model_destroy(m);
        return 1;
    }
    printf("\nloaded (--load, as inferx serve does) in %.2f s:\n", (double)(ix_time_ns() - t0) / 1e9);
    ix_cli_print_memory(stdout, "  ", e);
    ix_engine_destroy(e);
    ix_model_destroy(m);
    return 0;
}

/* Strings come from the file: escape anything that could drive a terminal. */
static void print_str(ix_str s) {
    size_t n = s.len > 200 ? 200 : s.len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    if (s.len > n) printf("...");
}

/* A string key's value (escaped), or "-" when absent or not a string. */
static void print_key_str(const ix_gguf *g, const char *key) {
    ix_str v;
    if (ix_gguf_get_str(g, key, &v, NULL) == IX_OK)
        print_str(v);
    else
        printf("-");
}

/* The chat template a server of this file uses (the server's own words). */
static void print_chat_template(const ix_gguf *g) {
    ix_tokenizer *t = NULL;
    ix_tokenizer_create(&t, g, NULL); /* NULL: no vocabulary, no bos/eos for the probe */
    ix_buf desc = {0};
    ix_errbuf err = {{0}};
    if (ix_server_chat_describe(g, t, NULL, &desc, &err) == IX_OK)
        printf("chat template: %s\n", desc.data);
    else
        printf("chat template: - (%s)\n", err.msg);
    ix_buf_free(&desc);
    ix_tokenizer_destroy(t);
}

/* ---- metadata ----------------------------------------------------------- */

typedef struct opt_u64 {
    bool ok;
    uint64_t v;
} opt_u64;

/* `<arch>.<suffix>` as an integer, if present and a non-negative integer. */
static opt_u64 arch_u64(const ix_gguf *g, ix_str arch, const char *suffix) {
    opt_u64 r = {false, 0};
    char key[256];
    if (arch.len == 0 || memchr(arch.ptr, 0, arch.len)) return r;
    int n = snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.ptr, suffix);
    if (n < 0 || (size_t)n >= sizeof key) return r;
    r.ok = ix_gguf_get_u64(g, key, &r.v, NULL) == IX_OK;
    return r;
}

static void print_opt(const char *label, opt_u64 v, const char *note) {
    char g[32];
    printf("%-14s %s%s\n", label, v.ok ? group(g, sizeof g, v.v) : "-", v.ok && note ? note : "");
}

static const char *file_type_name(uint64_t t) {
    /* llama.cpp's llama_ftype numbering. */
    static const char *names[] = {
        [0] = "ALL_F32",          [1] = "MOSTLY_F16",       [2] = "MOSTLY_Q4_0",
        [3] = "MOSTLY_Q4_1",      [7] = "MOSTLY_Q8_0",      [8] = "MOSTLY_Q5_0",
        [9] = "MOSTLY_Q5_1",      [10] = "MOSTLY_Q2_K",     [11] = "MOSTLY_Q3_K_S",
        [12] = "MOSTLY_Q3_K_M",   [13] = "MOSTLY_Q3_K_L",   [14] = "MOSTLY_Q4_K_S",
        [15] = "MOSTLY_Q4_K_M",   [16] = "MOSTLY_Q5_K_S",   [17] = "MOSTLY_Q5_K_M",
        [18] = "MOSTLY_Q6_K",     [19] = "MOSTLY_IQ2_XXS",  [20] = "MOSTLY_IQ2_XS",
        [21] = "MOSTLY_Q2_K_S",   [22] = "MOSTLY_IQ3_XS",   [23] = "MOSTLY_IQ3_XXS",
        [24] = "MOSTLY_IQ1_S",    [25] = "MOSTLY_IQ4_NL",   [26] = "MOSTLY_IQ3_S",
        [27] = "MOSTLY_IQ3_M",    [28] = "MOSTLY_IQ2_S",    [29] = "MOSTLY_IQ2_M",
        [30] = "MOSTLY_IQ4_XS",   [31] = "MOSTLY_IQ1_M",    [32] = "MOSTLY_BF16",
        [36] = "MOSTLY_TQ1_0",    [37] = "MOSTLY_TQ2_0",    [38] = "MOSTLY_MXFP4_MOE",
    };
    return t < IX_ARRAY_LEN(names) ? names[t] : NULL;
}

/* a * b * ..., or false on overflow. */
static bool mul_all(const uint64_t *v, int n, uint64_t *out) {
    uint64_t r = 1;
    for (int i = 0; i < n; i++)
        if (ix_mul_overflow_u64(r, v[i], &r)) return false;
    *out = r;
    return true;
}

static void print_tensors(const ix_gguf *g) {
    uint64_t n = ix_gguf_n_tensors(g);
    if (n == 0) {
        printf("\ntensors:       none (vocab-only file)\n");
        return;
    }
    int w = 5; /* "total" */
    for (uint64_t i = 0; i < n; i++) {
        size_t len = ix_gguf_tensor_at(g, i)->name.len;
        if ((int)(len > 48 ? 48 : len) > w) w = (int)(len > 48 ? 48 : len);
    }
    printf("\ntensors:\n  %5s  %-*s  %-7s  %-22s  %s\n", "#", w, "name", "type", "shape", "bytes");
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, i);
        char shape[96], b[NUM_BUF];
        size_t o = (size_t)snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims && o < sizeof shape; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        if (o < sizeof shape) snprintf(shape + o, sizeof shape - o, "]");
        printf("  %5" PRIu64 "  ", i);
        /* Pad by hand: the name is escaped as it is printed. */
        ix_str name = t->name;
        if (name.len > 48) name.len = 48;
        print_str(name);
        printf("%*s  %-7s  %-22s  %s\n", (int)(w - (int)name.len), "", ix_dtype_name(t->type), shape,
               bytes_str(b, sizeof b, t->n_bytes));
        total += t->n_bytes; /* tensors do not overlap within the file: no overflow */
    }
    char b[NUM_BUF];
    printf("  %5s  %-*s  %-7s  %-22s  %s\n", "", w, "total", "", "", bytes_str(b, sizeof b, total));
    /* The loader's packed copies have the rows' bytes (plus padding to 64
     * bytes per 16 rows) and replace the file's pages of those tensors. */
    printf("  in memory while serving: about %s of weights (/metrics: inferx:model_weight_bytes),\n"
           "  plus the KV pool below and the activations\n",
           bytes_str(b, sizeof b, total));
}

static void print_kv_cache(opt_u64 layers, opt_u64 kv_heads, opt_u64 k_dim, opt_u64 v_dim, uint64_t ctx,
                           bool ctx_ok, uint64_t batch) {
    printf("\nkv cache:\n");
    if (!layers.ok || !kv_heads.ok || !k_dim.ok || !ctx_ok) {
        printf("  not computed: missing%s%s%s%s\n", layers.ok ? "" : " layers", kv_heads.ok ? "" : " heads",
               k_dim.ok ? "" : " head-dim", ctx_ok ? "" : " context-length (give --ctx)");
        return;
    }
    /* per token: layers x kv_heads x (a K row + a V row) of each dtype, the
     * block types' scales included (ix_kv_dtype_row_bytes) */
    char g1[NUM_BUF], g2[NUM_BUF];
    if (k_dim.v == v_dim.v)
        printf("  2 x %" PRIu64 " layers x %" PRIu64 " KV heads x a row of %" PRIu64 " values", layers.v,
               kv_heads.v, k_dim.v);
    else
        printf("  %" PRIu64 " layers x %" PRIu64 " KV heads x (a K row of %" PRIu64 " + a V row of %" PRIu64
               " values)",
               layers.v, kv_heads.v, k_dim.v, v_dim.v);
    printf(", by --kv-cache-dtype (block types with their scales)\n");
    printf("  %-9s  %-22s  ctx %s x batch %s\n", "dtype", "per token", group(g1, sizeof g1, ctx),
           group(g2, sizeof g2, batch));
    for (int d = 0; d < IX_KV_DTYPE_COUNT; d++) {
        char f[NUM_BUF], t[NUM_BUF];
        size_t kr = ix_kv_dtype_row_bytes((ix_kv_dtype)d, (size_t)k_dim.v),
               vr = ix_kv_dtype_row_bytes((ix_kv_dtype)d, (size_t)v_dim.v);
        uint64_t per_token, total, row;
        uint64_t a[3], b[3] = {0, ctx, batch};
        if (!kr || !vr || ix_add_overflow_u64(kr, vr, &row)) { /* a block type and this head dim */
            printf("  %-9s  %s\n", ix_kv_dtype_name((ix_kv_dtype)d), "not available for this head dim");
            continue;
        }
        a[0] = layers.v, a[1] = kv_heads.v, a[2] = row;
        if (!mul_all(a, 3, &per_token)) {
            printf("  not computed: size overflows\n");
            return;
        }
        b[0] = per_token;
        if (!mul_all(b, 3, &total)) snprintf(t, sizeof t, "overflow");
        else bytes_str(t, sizeof t, total);
        printf("  %-9s  %-22s  %s\n", ix_kv_dtype_name((ix_kv_dtype)d), bytes_str(f, sizeof f, per_token), t);
    }
}

/* The architecture table's recipe, or why inferx cannot run the file. */
static void print_recipe(ix_str arch) {
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    ix_model_hparams hp = {0};
    if (!arch.len || ix_model_arch_init(&hp, name, NULL) != IX_OK) {
        printf(" (not an architecture inferx runs)");
        return;
    }
    static const char *const ffn[] = {"swiglu", "geglu", "gelu mlp"};
    printf(" (%s, %s, %s, %s%s%s)", hp.norm == IX_NORM_RMS ? "rmsnorm" : "layernorm",
           hp.pos == IX_POS_LEARNED ? "learned positions" : hp.rope_mode == IX_ROPE_NEOX ? "rope neox" : "rope",
           ffn[hp.ffn], hp.parallel_blocks ? "parallel" : "sequential", hp.post_norms ? ", post-norms" : "",
           hp.swa == IX_SWA_ALTERNATE ? ", alternating window" : "");
}

static void print_info(const ix_gguf *g, const char *path, uint64_t ctx_opt, bool ctx_given, uint64_t batch) {
    char a[NUM_BUF], b[NUM_BUF];
    printf("file:          %s\n", path);
    char h[NUM_BUF];
    printf("format:        GGUF v%" PRIu32 ", %s bytes (%s), alignment %" PRIu64, ix_gguf_version(g),
           group(a, sizeof a, ix_gguf_file_size(g)), human_bytes(h, sizeof h, ix_gguf_file_size(g)),
           ix_gguf_alignment(g));
    if (ix_gguf_n_tensors(g) > 0) printf(", data at offset %s", group(b, sizeof b, ix_gguf_data_offset(g)));
    printf("\n");
    printf("contents:      %s metadata key%s, %s tensor%s\n", group(a, sizeof a, ix_gguf_n_kv(g)),
           ix_gguf_n_kv(g) == 1 ? "" : "s", group(b, sizeof b, ix_gguf_n_tensors(g)),
           ix_gguf_n_tensors(g) == 1 ? "" : "s");

    ix_str arch = {"", 0};
    ix_gguf_get_str(g, "general.architecture", &arch, NULL);
    printf("architecture:  ");
    print_key_str(g, "general.architecture");
    print_recipe(arch);
    printf("\nname:          ");
    print_key_str(g, "general.name");
    printf("\n");

    uint64_t params = 0;
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) params += ix_gguf_tensor_at(g, i)->n_elements;
    printf("parameters:    %s\n", ix_gguf_n_tensors(g) ? human_count(a, sizeof a, params) : "- (no tensors)");
    uint64_t ft;
    if (ix_gguf_get_u64(g, "general.file_type", &ft, NULL) == IX_OK) {
        const char *n = file_type_name(ft);
        if (n)
            printf("file type:     %s (%" PRIu64 ")\n", n, ft);
        else
            printf("file type:     %" PRIu64 "\n", ft);
    } else {
        printf("file type:     -\n");
    }

    opt_u64 ctx_len = arch_u64(g, arch, "context_length");
    opt_u64 layers = arch_u64(g, arch, "block_count");
    opt_u64 heads = arch_u64(g, arch, "attention.head_count");
    opt_u64 kv_heads = arch_u64(g, arch, "attention.head_count_kv");
    opt_u64 embd = arch_u64(g, arch, "embedding_length");
    opt_u64 ffn = arch_u64(g, arch, "feed_forward_length");
    opt_u64 k_dim = arch_u64(g, arch, "attention.key_length");
    opt_u64 v_dim = arch_u64(g, arch, "attention.value_length");
    opt_u64 vocab = arch_u64(g, arch, "vocab_size");
    bool kv_default = !kv_heads.ok && heads.ok;
    if (kv_default) kv_heads = heads;
    bool k_derived = !k_dim.ok && embd.ok && heads.ok && heads.v > 0;
    if (k_derived) k_dim = (opt_u64){true, embd.v / heads.v};
    if (!v_dim.ok) v_dim = k_dim;
    ix_gguf_arr tokens;
    bool vocab_from_tokens = false;
    if (!vocab.ok && ix_gguf_get_arr(g, "tokenizer.ggml.tokens", IX_GGUF_TYPE_COUNT, &tokens, NULL) == IX_OK) {
        vocab = (opt_u64){true, tokens.n};
        vocab_from_tokens = true;
    }

    print_opt("context:", ctx_len, NULL);
    print_opt("layers:", layers, NULL);
    print_opt("heads:", heads, NULL);
    print_opt("kv heads:", kv_heads, kv_default ? " (= heads)" : NULL);
    print_opt("head dim:", k_dim, k_derived ? " (embedding / heads)" : NULL);
    if (v_dim.ok && k_dim.ok && v_dim.v != k_dim.v) print_opt("v head dim:", v_dim, NULL);
    print_opt("embedding:", embd, NULL);
    print_opt("ffn:", ffn, NULL);
    print_opt("vocab size:", vocab, vocab_from_tokens ? " (tokens array)" : NULL);
    printf("tokenizer:     ");
    print_key_str(g, "tokenizer.ggml.model");
    printf(" (pre: ");
    print_key_str(g, "tokenizer.ggml.pre");
    printf(")\n");
    print_chat_template(g);

    print_tensors(g);
    uint64_t ctx = ctx_given ? ctx_opt : ctx_len.v;
    print_kv_cache(layers, kv_heads, k_dim, v_dim, ctx, ctx_given || ctx_len.ok, batch);
}

int ix_cli_info(int argc, char **argv) {
    const char *path = NULL;
    uint64_t ctx = 0, batch = 1;
    bool ctx_given = false, load = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(arg, "--load")) {
            load = true;
            continue;
        }
        if (!strcmp(arg, "--ctx") || !strcmp(arg, "--batch")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "inferx info: %s needs a value\n", arg);
                return 2;
            }
            uint64_t *dst = !strcmp(arg, "--ctx") ? &ctx : &batch;
            if (!ix_cli_parse_u64(arg, argv[++i], dst)) return 2;
            if (*dst == 0) {
                fprintf(stderr, "inferx info: %s must be at least 1\n", arg);
                return 2;
            }
            if (dst == &ctx) ctx_given = true;
            continue;
        }
        if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "inferx info: unknown option '%s'\n\n", arg);
            usage(stderr);
            return 2;
        }
        if (path) {
            fprintf(stderr, "inferx info: more than one file given ('%s', '%s')\n\n", path, arg);
            usage(stderr);
            return 2;
        }
        path = arg;
    }
    if (!path) path = ix_cli_default_model();

    ix_gguf *g;
    ix_errbuf err;
    ix_status s = ix_gguf_open(&g, path, &err);
    if (s != IX_OK) {
        /* I/O messages already name the path; format messages do not. */
        if (s == IX_ERR_IO)
            fprintf(stderr, "inferx info: %s\n", err.msg);
        else
            fprintf(stderr, "inferx info: %s: %s\n", path, err.msg);
        return 1;
    }
    print_info(g, path, ctx, ctx_given, batch);
    ix_gguf_close(g);
    if (load && print_loaded(path) != 0) return 1;
    if (fflush(stdout) != 0) {
        perror("inferx info: stdout");
        return 1;
    }
    return 0;
}
