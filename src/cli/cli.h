/* inferx command-line tool (internal): one function per subcommand, each a
 * client of the public API only. Each returns the process exit status: 0 ok,
 * 1 runtime error (message on stderr), 2 usage error. */
#ifndef IX_CLI_H
#define IX_CLI_H

#include "inferx/core.h"
#include "inferx/tokenizer.h"

int ix_cli_info(int argc, char **argv);
int ix_cli_run(int argc, char **argv);
/* inferx bench --throughput (bench_throughput.c) */
int ix_cli_bench_throughput(int argc, char **argv);
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

/* The tokens of the text file at path, BOS first when the vocabulary adds it
 * (as llama.cpp's perplexity and imatrix tools tokenize: special-token text
 * not parsed, no EOS). Prints "inferx CMD: ..." on failure. */
bool ix_cli_tokenize_file(const char *cmd, const char *path, const ix_tokenizer *tok, ix_token_vec *ids);

/* The bundled model: $INFERX_MODEL if set, else models/target-f16.gguf of the
 * source tree this binary was built from. */
const char *ix_cli_default_model(void);

/* Parses a non-negative decimal integer option value; prints a usage error
 * naming opt and returns false if it is not one. */
bool ix_cli_parse_u64(const char *opt, const char *s, uint64_t *out);

#endif
