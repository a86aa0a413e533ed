/* inferx command-line tool (internal): one function per subcommand, each a
 * client of the public API only. Each returns the process exit status: 0 ok,
 * 1 runtime error (message on stderr), 2 usage error. */
#ifndef IX_CLI_H
#define IX_CLI_H

#include <stdio.h>

#include "inferx/core.h"
#include "inferx/engine.h"
#include "inferx/model.h"
#include "inferx/tokenizer.h"

int ix_cli_info(int argc, char **argv);
int ix_cli_run(int argc, char **argv);
/* inferx bench --throughput (bench_throughput.c) */
int ix_cli_bench_throughput(int argc, char **argv);
/* inferx bench --spec (bench_spec.c) */
int ix_cli_bench_spec(int argc, char **argv);
/* inferx bench --serve URL (bench_serve.c) */
int ix_cli_bench_serve(int argc, char **argv);
int ix_cli_tokenize(int argc, char **argv);
int ix_cli_bench(int argc, char **argv);
int ix_cli_mkmodel(int argc, char **argv);
int ix_cli_serve(int argc, char **argv);
/* inferx perplexity (cmd_perplexity.c) */
int ix_cli_perplexity(int argc, char **argv);
/* inferx quantize (cmd_quantize.c) */
int ix_cli_quantize(int argc, char **argv);

/* inferx imatrix (cmd_imatrix.c) */
int ix_cli_imatrix(int argc, char **argv);

/* inferx kv-store (cmd_kvstore.c) */
int ix_cli_kvstore(int argc, char **argv);

/* inferx medusa-train (cmd_medusa_train.c) */
int ix_cli_medusa_train(int argc, char **argv);

/* The tokens of the text file at path, BOS first when the vocabulary adds it
 * (as llama.cpp's perplexity and imatrix tools tokenize: special-token text
 * not parsed, no EOS). Prints "inferx CMD: ..." on failure. */
bool ix_cli_tokenize_file(const char *cmd, const char *path, const ix_tokenizer *tok, ix_token_vec *ids);

/* The bundled model: $INFERX_MODEL if set, else models/target-f16.gguf of the
 * source tree this binary was built from. */
const char *ix_cli_default_model(void);

/* The packed-weight cache directory (see ix_model_load_params) of serve, run
 * and bench: arg (--pack-cache) when given, else $INFERX_PACK_CACHE, else
 * $XDG_CACHE_HOME/inferx, else $HOME/.cache/inferx; NULL for "off". buf may
 * hold the result. */
const char *ix_cli_pack_cache_dir(const char *arg, char *buf, size_t len);
#define IX_CLI_PACK_CACHE_MAX_DEFAULT ((uint64_t)64 << 30)
#define IX_CLI_PACK_CACHE_HELP                                                                   \
    "where the repacked weights of models of 64 MiB or more are kept, so the next\n"              \
    "start maps them instead of packing again; off: no cache (default\n"                        \
    "$INFERX_PACK_CACHE, else $XDG_CACHE_HOME/inferx, else ~/.cache/inferx)"
#define IX_CLI_PACK_CACHE_MAX_HELP "bound on the cache directory: least recently used files go first\n(default 64G)"
/* Default load params with the cache of ix_cli_pack_cache_dir(cache_arg). */
void ix_cli_load_params(ix_model_load_params *p, const char *cache_arg, uint64_t cache_max, char *buf, size_t len);

/* Parses a non-negative decimal integer option value; prints a usage error
 * naming opt and returns false if it is not one. */
bool ix_cli_parse_u64(const char *opt, const char *s, uint64_t *out);

/* --chat-template ARG of `cmd`: a built-in name (copied) or the text of the
 * file ARG; the caller frees it with ix_free. NULL, with the reason printed,
 * when it is neither. */
char *ix_cli_chat_template(const char *cmd, const char *arg);
/* ---- option tables (opts.c) ---------------------------------------------------
 * A command lists its options once, as rows: the parser, the validation of
 * each value and --help all read the same table. */
typedef enum ix_cli_opt_type {
    IX_CLI_OPT_FLAG, /* bool: set to true; the one type that takes no value */
    IX_CLI_OPT_STR,  /* const char *: the argument itself */
    IX_CLI_OPT_I32,  /* int32_t: a decimal integer in [min, max] */
    IX_CLI_OPT_U16,  /* uint16_t: likewise */
    IX_CLI_OPT_U64,  /* uint64_t: likewise */
    IX_CLI_OPT_SIZE, /* size_t: bytes, a decimal integer with an optional K/M/G suffix, in [min, max] */
    IX_CLI_OPT_F64,  /* double: a finite number in [min, max] */
    IX_CLI_OPT_FN,   /* fn(dst, value) stores it: NULL, or what the option expects ("expects ...") */
} ix_cli_opt_type;

typedef struct ix_cli_opt {
    const char *name;    /* "--port" */
    const char *alias;   /* "-p", or NULL */
    const char *metavar; /* "N" ("" for a flag) */
    const char *help;    /* '\n' starts an indented continuation line */
    ix_cli_opt_type type;
    void *dst;
    double min, max;   /* numeric types */
    bool show_default; /* --help appends "(default <the value *dst holds>)" */
    const char *(*fn)(void *dst, const char *value);
} ix_cli_opt;

enum { IX_CLI_OK = 0, IX_CLI_HELP = 1, IX_CLI_USAGE = 2 };
/* Parses argv[1..argc) against the table: IX_CLI_OK; IX_CLI_HELP at -h or
 * --help; IX_CLI_USAGE after printing, prefixed "inferx <cmd>: ", what is
 * wrong (an unknown option, a missing value, a value of the wrong type or
 * out of range, with the range). */
/* One line on f: the model's weights (held, resident), the KV pool (size,
 * resident) and the process's resident set, as /metrics reports them
 * (cmd_info.c; inferx serve prints it once loaded, inferx info --load too). */
void ix_cli_print_memory(FILE *f, const char *prefix, ix_engine *e);

int ix_cli_parse_opts(const char *cmd, const ix_cli_opt *opts, size_t n_opts, int argc, char **argv);
/* The same for a command with operands: arguments that do not start with
 * '-' (and "-" alone) go to pos, at most max_pos of them (one more is a
 * usage error); *n_pos says how many came. */
int ix_cli_parse_opts_pos(const char *cmd, const ix_cli_opt *opts, size_t n_opts, int argc, char **argv,
                          const char **pos, int max_pos, int *n_pos);
/* IX_CLI_OPT_FN setter of --kv-cache-dtype: dst is an ix_kv_dtype. Every
 * command that takes the option uses it and IX_CLI_KV_DTYPE_HELP. */
const char *ix_cli_set_kv_dtype(void *dst, const char *value);
#define IX_CLI_KV_DTYPE_HELP                                                                       \
    "KV cache element type: f16 (default), bf16, q8_0,\n"                                         \
    "fp8_e4m3, q4_0 (block types: 32 values + an f16 scale)\n"                                    \
    "or f32; q8_0 holds about twice the tokens of f16"

/* The table's --help lines: "  -a, --name METAVAR   help", aligned. */
void ix_cli_print_opts(FILE *f, const ix_cli_opt *opts, size_t n_opts);
/* For a command with a parser of its own: sets the option of the table that
 * a names from v (NULL: none given). 1: a is not in the table; IX_CLI_OK;
 * IX_CLI_USAGE after printing what is wrong. *used_value says whether v was
 * taken (every type but a flag takes one). */
int ix_cli_parse_one(const char *cmd, const ix_cli_opt *opts, size_t n_opts, const char *a, const char *v,
                     bool *used_value);

/* The speculative-decoding options of run, serve and bench, as table rows
 * over an ix_spec_params; after parsing, ix_cli_spec_resolve makes
 * --draft-model alone mean --spec draft and --medusa alone --spec medusa. */
const char *ix_cli_set_spec_kind(void *dst, const char *value);
const char *ix_cli_set_on_off(void *dst, const char *value); /* a bool from "on" / "off" */
#define IX_CLI_SPEC_OPTS(spec)                                                                                  \
    {"--spec", NULL, "none|ngram|draft|medusa",                                                                \
     "speculative decoding: ngram guesses from the prompt and the\n"                                           \
     "output so far, draft from a second model (--draft-model),\n"                                            \
     "medusa from heads on the target's hidden state (--medusa);\n"                                           \
     "the output is the same token for token (default none)",                                                  \
     IX_CLI_OPT_FN, &(spec)->kind, 0, 0, false, ix_cli_set_spec_kind},                                          \
        {"--spec-k", NULL, "N",                                                                                 \
         "most guessed tokens per sequence and step (medusa: at most\n"                                        \
         "its number of heads); each sequence's k adapts below it to\n"                                         \
         "its acceptance and the step cost (default 4)",                                                        \
         IX_CLI_OPT_I32, &(spec)->k, 1, IX_SPEC_MAX_K, true, NULL},                                             \
        {"--spec-adaptive", NULL, "on|off",                                                                     \
         "off: every decode guesses --spec-k tokens, whatever the\n"                                           \
         "acceptance and the load (benchmarks, tests; default on)",                                            \
         IX_CLI_OPT_FN, &(spec)->adaptive, 0, 0, false, ix_cli_set_on_off},                                     \
        {"--draft-model", NULL, "FILE",                                                                         \
         "draft GGUF for --spec draft (implies it): a smaller model\n"                                         \
         "with the target's vocabulary, or the target quantized to\n"                                         \
         "8 bits (inferx quantize T.gguf T-q8.gguf Q8_0)",                                                     \
         IX_CLI_OPT_STR, &(spec)->draft_model, 0, 0, false, NULL},                                              \
        {"--medusa", NULL, "FILE",                                                                              \
         "Medusa heads for --spec medusa (implies it): a heads file\n"                                         \
         "trained for this model (inferx medusa-train -m MODEL)",                                              \
         IX_CLI_OPT_STR, &(spec)->medusa_heads, 0, 0, false, NULL},                                             \
    {                                                                                                          \
        "--draft-kv-mem", NULL, "BYTES",                                                                       \
            "the draft model's own KV pool, suffix K/M/G allowed\n"                                            \
            "(default: room for as many tokens as the target's pool)",                                         \
            IX_CLI_OPT_SIZE, &(spec)->draft_kv_mem_bytes, 1, 1e18, false, NULL                                 \
    }
void ix_cli_spec_resolve(ix_spec_params *sp);

/* ---- --tp N, --pp N (tp.c, docs/distributed.md) -------------------------------
 * ix_cli_tp_join: with tp * pp > 1 (under mpirun -np tp*pp) joins the MPI job. Returns
 * -1 when this process goes on as the command (tp <= 1, or rank 0); an exit
 * code otherwise: a usage error, or a rank other than 0 that has served rank
 * 0's steps and stopped. Rank 0 then loads its shard with ix_cli_tp_load,
 * and calls ix_cli_tp_end after its engine is gone (the other ranks stop). */
struct ix_dist;
typedef struct ix_cli_tp {
    struct ix_dist *dist; /* NULL: one process */
} ix_cli_tp;
/* --tp N, --pp N, --micro-batches N (0 or 1: off; micro_batches 0: one per stage) */
typedef struct ix_cli_dist_opts {
    int32_t tp, pp, micro_batches;
} ix_cli_dist_opts;
int ix_cli_tp_join(const char *cmd, const ix_cli_dist_opts *o, const char *model, int32_t n_threads, ix_cli_tp *t);
/* lp: how one process loads (a shard never uses the packed-weight cache). */
ix_status ix_cli_tp_load(ix_cli_tp *t, const char *path, const ix_model_load_params *lp, ix_model **m,
                         ix_errbuf *err);
void ix_cli_tp_report(FILE *f, const char *cmd, const ix_cli_tp *t);
void ix_cli_tp_end(ix_cli_tp *t);

#endif
