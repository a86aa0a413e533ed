/* inferx: the command-line entry point. Dispatches to one subcommand per file;
 * every subcommand takes --help. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/server.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command k_commands[] = {
    {"run", ix_cli_run, "generate a completion of a prompt, streamed to stdout"},
    {"serve", ix_cli_serve, "serve the model over an OpenAI-compatible HTTP API"},
    {"info", ix_cli_info, "describe a GGUF file: metadata, tensors, KV cache sizes"},
    {"tokenize", ix_cli_tokenize, "print the token ids of text read from stdin"},
    {"bench", ix_cli_bench, "prefill and decode throughput against the memory-bandwidth bound"},
    {"perplexity", ix_cli_perplexity, "perplexity on a text, and KL divergence from a base model"},
    {"quantize", ix_cli_quantize, "write a copy of a model with quantized weights (types and mixes)"},
    {"imatrix", ix_cli_imatrix, "activation statistics of a text, for calibrated quantization"},
    {"kv-store", ix_cli_kvstore, "check, count or clear a disk tier's KV block store"},
    {"medusa-train", ix_cli_medusa_train, "train Medusa heads (speculative decoding) on a model's own text"},
    {"mkmodel", ix_cli_mkmodel, "write a model of a real shape with random weights"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: inferx <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < IX_ARRAY_LEN(k_commands); i++)
        fprintf(f, "  %-13s %s\n", k_commands[i].name, k_commands[i].summary);
    fprintf(f, "\n'inferx <command> --help' describes a command's options.\n"
               "Environment: INFERX_MODEL (default model), INFERX_ISA=generic|avx2|avx512|neon,\n"
               "INFERX_LOG=debug|info|warn|error|none.\n");
}

const char *ix_cli_default_model(void) {
    const char *m = getenv("INFERX_MODEL");
    return m && *m ? m : INFERX_DEFAULT_MODEL;
}

const char *ix_cli_pack_cache_dir(const char *arg, char *buf, size_t len) {
    const char *v = arg ? arg : getenv("INFERX_PACK_CACHE");
    if (v && *v) return strcmp(v, "off") ? v : NULL;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = xdg && *xdg ? snprintf(buf, len, "%s/inferx", xdg)
            : home && *home ? snprintf(buf, len, "%s/.cache/inferx", home)
                            : -1;
    return n > 0 && (size_t)n < len ? buf : NULL;
}

void ix_cli_load_params(ix_model_load_params *p, const char *cache_arg, uint64_t cache_max, char *buf, size_t len) {
    *p = ix_model_load_default_params();
    p->pack_cache_dir = ix_cli_pack_cache_dir(cache_arg, buf, len);
    p->pack_cache_max_bytes = cache_max;
}

bool ix_cli_parse_u64(const char *opt, const char *s, uint64_t *out) {
    char *end;
    if (!s || !*s || *s == '-' || *s == '+') goto bad;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) goto bad;
    *out = v;
    return true;
bad:
    fprintf(stderr, "inferx: %s expects a non-negative integer, got '%s'\n", opt, s ? s : "");
    return false;
}

char *ix_cli_chat_template(const char *cmd, const char *arg) {
    for (const char *const *b = ix_server_chat_builtins(); *b; b++)
        if (!strcmp(arg, *b)) return ix_strdup(arg);
    FILE *f = fopen(arg, "rb");
    if (!f) {
        fprintf(stderr, "inferx %s: --chat-template: '%s' is neither a built-in (", cmd, arg);
        for (const char *const *b = ix_server_chat_builtins(); *b; b++)
            fprintf(stderr, "%s%s", b == ix_server_chat_builtins() ? "" : ", ", *b);
        fprintf(stderr, ") nor a readable file: %s\n", strerror(errno));
        return NULL;
    }
    ix_buf b = {0};
    char chunk[16384];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(chunk, 1, sizeof chunk, f)) > 0) ok = ix_buf_append(&b, chunk, n) == IX_OK;
    ok = ok && !ferror(f) && ix_buf_append(&b, "", 0) == IX_OK;
    fclose(f);
    if (!ok || strlen(b.data) != b.len) {
        fprintf(stderr, "inferx %s: --chat-template: cannot read %s%s\n", cmd, arg,
                ok ? " (it holds a NUL byte)" : "");
        ix_buf_free(&b);
        return NULL;
    }
    return b.data;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("inferx 0.1.0\n");
        return 0;
    }
    for (size_t i = 0; i < IX_ARRAY_LEN(k_commands); i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "inferx: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
