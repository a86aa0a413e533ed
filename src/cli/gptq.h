/* inferx quantize --method gptq (internal): GPTQ error compensation.
 *
 * `inferx imatrix --xtx` saves, beside the imatrix file FILE, FILE.xtx: a
 * GGUF with one F32 tensor [K, K] per matmul weight (named as the weight),
 * the mean of x x^T over the observed inputs x (K = the weight's row
 * length). From it, per weight: H = X^T X / n damped by 1% of its mean
 * diagonal (a column never active gets H_ii = 1), then U, the upper Cholesky
 * factor of H^-1. Each row of W is then quantized block by block, left to
 * right; inside a block each column's rounding error e_j = (w_j - q_j) / U_jj
 * is pushed onto every later column (w_k -= e_j U_jk), the block's codes are
 * re-chosen from the compensated values, and the final errors are pushed on
 * (docs/quantization.md). */
#ifndef IX_CLI_GPTQ_H
#define IX_CLI_GPTQ_H

#include "inferx/gguf.h"

/* Opens imatrix_path + ".xtx"; false with err set when absent or bad. */
bool ix_cli_gptq_open(ix_gguf **out, const char *imatrix_path, ix_errbuf *err);
/* Factors the statistics of weight `name` (K columns) for quantizing to
 * type. *out is NULL (and true returned) when the file has none for it;
 * false with err set on a bad tensor or a matrix that cannot be factored. */
bool ix_cli_gptq_prepare(void **out, const ix_gguf *xtx, const char *name, size_t K, ix_dtype type,
                         ix_errbuf *err);
/* Floats of per-thread work space ix_cli_gptq_row needs beyond the row (0 for NULL). */
size_t ix_cli_gptq_work_floats(const void *g);
/* Quantizes one row w[K] (overwritten: the compensated values) into dst,
 * imp the importance weights or NULL; work: ix_cli_gptq_work_floats floats. */
ix_status ix_cli_gptq_row(const void *g, ix_dtype type, float *w, uint8_t *dst, const float *imp, float *work);
void ix_cli_gptq_free(void *g);

#endif
