/*
 * GPTQ error compensation for inferx quantize (gptq.h): the Hessian's
 * factorization per weight (double precision, O(K^3) once per tensor) and the
 * per-row block-by-block quantization with column-by-column error updates.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/gptq.h"
#include "inferx/kernels.h"

typedef struct gptq {
    size_t K, blck, block_bytes;
    float *U; /* (K, K) row-major, upper triangle: H^-1 = U^T U */
} gptq;

bool ix_cli_gptq_open(ix_gguf **out, const char *imatrix_path, ix_errbuf *err) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s.xtx", imatrix_path) >= sizeof path)
        return !ix_errf(err, IX_ERR_INVALID, "imatrix path too long");
    ix_errbuf e2;
    if (ix_gguf_open(out, path, &e2) != IX_OK)
        return !ix_errf(err, IX_ERR_IO, "--method gptq needs the X^T X statistics in %s (run `inferx imatrix` "
                                        "with --xtx): %s", path, e2.msg);
    return true;
}

/* In-place lower Cholesky factor of the n x n symmetric a (row-major; the
 * upper triangle is zeroed). False if a is not positive definite. */
static bool cholesky(double *a, size_t n) {
    for (size_t j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (size_t k = 0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
        if (!(d > 0.0)) return false;
        d = sqrt(d);
        a[j * n + j] = d;
        for (size_t i = j + 1; i < n; i++) {
            double s = a[i * n + j];
            for (size_t k = 0; k < j; k++) s -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = s / d;
        }
        for (size_t k = j + 1; k < n; k++) a[j * n + k] = 0.0;
    }
    return true;
}

/* inv = (L L^T)^-1 for the lower factor l (n x n): L^-T L^-1. */
static void chol_inverse(const double *l, double *inv, double *li, size_t n) {
    memset(li, 0, n * n * sizeof *li);
    for (size_t j = 0; j < n; j++) { /* column j of L^-1, by forward substitution */
        li[j * n + j] = 1.0 / l[j * n + j];
        for (size_t i = j + 1; i < n; i++) {
            double s = 0.0;
            for (size_t k = j; k < i; k++) s -= l[i * n + k] * li[k * n + j];
            li[i * n + j] = s / l[i * n + i];
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            double s = 0.0; /* (L^-T L^-1)_ij = sum_k li[k][i] li[k][j], k >= max(i, j) = i */
            for (size_t k = i; k < n; k++) s += li[k * n + i] * li[k * n + j];
            inv[i * n + j] = inv[j * n + i] = s;
        }
}

bool ix_cli_gptq_prepare(void **out, const ix_gguf *xtx, const char *name, size_t K, ix_dtype type,
                         ix_errbuf *err) {
    *out = NULL;
    const ix_gguf_tensor *t = ix_gguf_find_tensor(xtx, name);
    if (!t) return true;
    if (t->type != IX_DTYPE_F32 || t->n_dims != 2 || (uint64_t)t->ne[0] != K || (uint64_t)t->ne[1] != K)
        return !ix_errf(err, IX_ERR_FORMAT, "X^T X of '%s' is not an F32 [%zu, %zu] tensor", name, K, K);
    const size_t bs = ix_dtype_block_size(type);
    if (!bs || K % bs) return !ix_errf(err, IX_ERR_INVALID, "'%s': rows of %zu do not fit %s blocks", name, K,
                                       ix_dtype_name(type));
    double *h = malloc(K * K * sizeof *h), *l = malloc(K * K * sizeof *l), *li = malloc(K * K * sizeof *li);
    gptq *g = calloc(1, sizeof *g);
    float *U = malloc(K * K * sizeof *U);
    bool ok = false;
    if (!h || !l || !li || !g || !U) {
        ix_errf(err, IX_ERR_NOMEM, "out of memory for the X^T X of '%s'", name);
        goto done;
    }
    for (size_t i = 0; i < K * K; i++) {
        float v;
        memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
        if (!isfinite(v)) {
            ix_errf(err, IX_ERR_FORMAT, "X^T X of '%s' holds %g", name, (double)v);
            goto done;
        }
        h[i] = v;
    }
    double mean_diag = 0.0;
    for (size_t i = 0; i < K; i++) {
        if (!(h[i * K + i] > 0.0)) { /* a column never active: its weights cannot matter */
            for (size_t k = 0; k < K; k++) h[i * K + k] = h[k * K + i] = 0.0;
            h[i * K + i] = 1.0;
        }
        mean_diag += h[i * K + i] / (double)K;
    }
    /* Damping keeps H invertible (the X^T X of fewer tokens than K is
     * singular); more of it is tried when 1% is not enough. */
    bool factored = false;
    for (double damp = 0.01; damp < 20.0 && !factored; damp *= 10.0) {
        memcpy(l, h, K * K * sizeof *l);
        for (size_t i = 0; i < K; i++) l[i * K + i] += damp * mean_diag;
        if (!cholesky(l, K)) continue;
        double *inv = h; /* H is not needed any more */
        chol_inverse(l, inv, li, K);
        if (!cholesky(inv, K)) {
            break; /* h was overwritten: no retry */
        }
        for (size_t j = 0; j < K; j++) /* U = L2^T */
            for (size_t k = 0; k < K; k++) U[j * K + k] = k >= j ? (float)inv[k * K + j] : 0.0f;
        factored = true;
    }
    if (!factored) {
        ix_errf(err, IX_ERR_INVALID, "X^T X of '%s' cannot be factored (not positive definite)", name);
        goto done;
    }
    uint64_t bb = 0;
    ix_dtype_row_bytes(type, bs, &bb);
    *g = (gptq){K, bs, (size_t)bb, U};
    *out = g;
    ok = true;
done:
    free(h), free(l), free(li);
    if (!ok) free(U), free(g);
    return ok;
}

size_t ix_cli_gptq_work_floats(const void *pg) {
    const gptq *g = pg;
    return g ? 2 * g->blck : 0;
}

ix_status ix_cli_gptq_row(const void *pg, ix_dtype type, float *w, uint8_t *dst, const float *imp, float *work) {
    const gptq *g = pg;
    const size_t K = g->K, B = g->blck;
    float *q = work, *t = work + B;
    for (size_t c0 = 0; c0 < K; c0 += B) {
        uint8_t *blk = dst + c0 / B * g->block_bytes;
        const float *ib = imp ? imp + c0 : NULL;
        /* the block as it stands; then its columns' errors compensated inside it */
        ix_status st = ix_kernels_quantize_row_imp(type, w + c0, blk, B, ib);
        if (st == IX_OK) st = ix_kernels_dequant_row(type, blk, q, B);
        if (st != IX_OK) return st;
        memcpy(t, w + c0, B * sizeof *t);
        for (size_t j = 0; j < B; j++) {
            const float *u = g->U + (c0 + j) * K + c0;
            float e = (t[j] - q[j]) / u[j];
            for (size_t k = j + 1; k < B; k++) t[k] -= e * u[k];
        }
        /* codes re-chosen from the compensated values; their errors go on */
        st = ix_kernels_quantize_row_imp(type, t, blk, B, ib);
        if (st == IX_OK) st = ix_kernels_dequant_row(type, blk, q, B);
        if (st != IX_OK) return st;
        for (size_t j = 0; j < B; j++) {
            const size_t c = c0 + j;
            const float *u = g->U + c * K;
            float e = (w[c] - q[j]) / u[c];
            for (size_t k = c + 1; k < K; k++) w[k] -= e * u[k];
        }
    }
    return IX_OK;
}

void ix_cli_gptq_free(void *pg) {
    gptq *g = pg;
    if (!g) return;
    free(g->U);
    free(g);
}
