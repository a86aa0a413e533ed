/* inferx imatrix / quantize (internal): importance-matrix files.
 *
 * The format is llama.cpp's imatrix.dat (examples/imatrix), little-endian:
 *   i32 n_entries
 *   n_entries x { i32 name_len, name bytes, i32 ncall, i32 nval, f32 value[nval] }
 *   i32 last_call, i32 dataset_len, dataset bytes      (optional trailer)
 * value[j] = ncall x mean over the observed tokens of x_j^2 (x the input of
 * the matmul with that weight, j its input column); a reader divides by ncall
 * to get the mean. */
#ifndef IX_CLI_IMATRIX_FILE_H
#define IX_CLI_IMATRIX_FILE_H

#include "inferx/core.h"

typedef struct imat_entry {
    char *name;
    int32_t ncall;
    int32_t nval;
    float *mean; /* nval mean squared activations (the file's value / ncall) */
} imat_entry;

typedef struct imat {
    imat_entry *e;
    size_t n;
    int32_t last_call;
    char *dataset; /* NUL-terminated; "" when the file has no trailer */
} imat;

/* Reads FILE; every length and count checked against the file's size, every
 * value finite and >= 0. On error returns false with err set. */
bool ix_cli_imat_read(imat *m, const char *path, ix_errbuf *err);
/* Writes m (values = mean x ncall) to path. */
bool ix_cli_imat_write(const imat *m, const char *path, ix_errbuf *err);
const imat_entry *ix_cli_imat_find(const imat *m, const char *name);
void ix_cli_imat_free(imat *m);

#endif
