/*
 * inferx imatrix: activation statistics of a model on a calibration text,
 * for `inferx quantize --imatrix`.
 *
 * The text is tokenized as `inferx perplexity` tokenizes it and cut into
 * chunks of -c tokens, each evaluated from position 0 with BOS first (when
 * the vocabulary adds it) and logits for every position, so the output head
 * sees every token. A matmul observer on the model context (one pointer test
 * per matmul when unset) adds up, per weight and input column j, the sum of
 * x_j^2 over every token's input x; the file (llama.cpp's imatrix.dat layout,
 * imatrix_file.h) holds their means. --xtx also adds up the whole x x^T per
 * weight (K x K, in double, split over the context's threads) and writes
 * their means to FILE.xtx, a GGUF of F32 [K, K] tensors named as the
 * weights: the Hessian `quantize --method gptq` compensates with.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/imatrix_file.h"
#include "inferx/kernels.h"
#include "inferx/kv.h"
#include "inferx/model.h"

#define IMAT_MIN_CTX 8

typedef struct im_opts {
    const char *model, *text, *out;
    uint64_t n_ctx, threads, max_chunks;
    bool xtx;
} im_opts;

/* Parses argv into o: 0, -1 after --help, else the exit status. One table
 * (cli.h's option rows) drives the parser, the checks and --help. */
static int parse_args(int argc, char **argv, im_opts *o) {
    *o = (im_opts){.out = "imatrix.dat"};
    const ix_cli_opt opts[] = {
        {"--model", "-m", "FILE", "GGUF model (default: the bundled model)", IX_CLI_OPT_STR, &o->model, 0, 0, false,
         NULL},
        {"--file", "-f", "FILE", "UTF-8 calibration text (required)", IX_CLI_OPT_STR, &o->text, 0, 0, false, NULL},
        {"--output", "-o", "FILE", "the imatrix file to write (default imatrix.dat)", IX_CLI_OPT_STR, &o->out, 0, 0,
         false, NULL},
        {"--ctx-size", "-c", "N", "tokens per chunk, up to the model's context (default 512)", IX_CLI_OPT_U64,
         &o->n_ctx, IMAT_MIN_CTX, 1u << 20, false, NULL},
        {"--chunks", NULL, "N", "use at most N chunks (default: all the text holds)", IX_CLI_OPT_U64, &o->max_chunks,
         1, INT32_MAX, false, NULL},
        {"--threads", "-t", "N", "worker threads (default or 0: all cores)", IX_CLI_OPT_U64, &o->threads, 0, 1024,
         false, NULL},
        {"--xtx", NULL, "",
         "also write FILE.xtx: the mean x x^T of every weight's input\n"
         "(K x K floats each), which --method gptq needs",
         IX_CLI_OPT_FLAG, &o->xtx, 0, 0, false, NULL},
    };
    int prc = ix_cli_parse_opts("imatrix", opts, IX_ARRAY_LEN(opts), argc, argv);
    if (prc == IX_CLI_HELP) {
        fprintf(stdout, "usage: inferx imatrix [-m MODEL.gguf] -f TEXT [-o FILE] [options]\n"
                        "\n"
                        "Runs the model over TEXT in chunks of n_ctx tokens and writes, for every matmul\n"
                        "weight, the mean of the squared input activation of each input column, in\n"
                        "llama.cpp's imatrix.dat format (usable by its llama-quantize too).\n"
                        "`inferx quantize --imatrix FILE` weighs the rounding error by them.\n\n");
        ix_cli_print_opts(stdout, opts, IX_ARRAY_LEN(opts));
        fprintf(stdout, "  -h, --help                   show this help\n"
                        "\nProgress goes to stderr. The bundled model is %s.\n",
                ix_cli_default_model());
        return -1;
    }
    if (prc != IX_CLI_OK) return 2;
    if (!o->text) {
        fprintf(stderr, "inferx imatrix: -f TEXT is required (see --help)\n");
        return 2;
    }
    if (!o->model) o->model = ix_cli_default_model();
    if (!o->n_ctx) o->n_ctx = 512;
    return 0;
}

/* ---- the statistics ---------------------------------------------------------------- */
typedef struct wstat {
    char *name;
    size_t K;
    double *sum2;  /* (K) sum of x_j^2 */
    double *xtx;   /* (K, K) sum of x x^T (upper triangle), or NULL */
    uint64_t n;    /* rows observed */
    int32_t ncall; /* chunks that reached it */
    int32_t last_chunk;
} wstat;

typedef struct collector {
    wstat *w;
    size_t n, cap;
    bool xtx, failed;
    int32_t chunk;
    ix_pool *pool;
    /* the current xtx job */
    wstat *cur;
    const float *x;
    size_t M;
} collector;

static wstat *find_stat(collector *c, ix_str name, size_t K) {
    for (size_t i = 0; i < c->n; i++)
        if (ix_str_eq(name, c->w[i].name)) return c->w[i].K == K ? &c->w[i] : NULL;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        wstat *nw = realloc(c->w, cap * sizeof *nw);
        if (!nw) return NULL;
        c->w = nw, c->cap = cap;
    }
    wstat *s = &c->w[c->n];
    *s = (wstat){.name = strndup(name.ptr, name.len), .K = K, .sum2 = calloc(K, sizeof(double)), .last_chunk = -1};
    if (c->xtx) s->xtx = calloc(K * K, sizeof(double));
    if (!s->name || !s->sum2 || (c->xtx && !s->xtx)) {
        free(s->name), free(s->sum2), free(s->xtx);
        return NULL;
    }
    c->n++;
    return s;
}

/* Rows i of the upper triangle, split over the threads by i (interleaved, as
 * the row lengths shrink). */
static void xtx_rows(void *ctx, int ith, int nth) {
    const collector *c = ctx;
    const size_t K = c->cur->K;
    double *h = c->cur->xtx;
    for (size_t m = 0; m < c->M; m++) {
        const float *x = c->x + m * K;
        for (size_t i = (size_t)ith; i < K; i += (size_t)nth) {
            const double xi = x[i];
            if (xi == 0.0) continue;
            double *row = h + i * K;
            for (size_t j = i; j < K; j++) row[j] += xi * (double)x[j];
        }
    }
}

static void observe(void *user, ix_str weight, const float *x, size_t M, size_t K) {
    collector *c = user;
    if (c->failed || !M) return;
    wstat *s = find_stat(c, weight, K);
    if (!s) {
        c->failed = true;
        return;
    }
    for (size_t m = 0; m < M; m++)
        for (size_t j = 0; j < K; j++) s->sum2[j] += (double)x[m * K + j] * x[m * K + j];
    s->n += M;
    if (s->last_chunk != c->chunk) s->ncall++, s->last_chunk = c->chunk;
    if (s->xtx) {
        c->cur = s, c->x = x, c->M = M;
        ix_pool_run(c->pool, xtx_rows, c);
    }
}

static void collector_free(collector *c) {
    for (size_t i = 0; i < c->n; i++) free(c->w[i].name), free(c->w[i].sum2), free(c->w[i].xtx);
    free(c->w);
}

/* ---- writing ----------------------------------------------------------------------- */
static bool write_imatrix(const collector *c, const im_opts *o, int32_t n_chunks) {
    imat m = {.n = c->n, .last_call = n_chunks, .dataset = (char *)o->text};
    m.e = calloc(c->n ? c->n : 1, sizeof *m.e);
    bool ok = m.e != NULL;
    for (size_t i = 0; i < c->n && ok; i++) {
        const wstat *s = &c->w[i];
        m.e[i] = (imat_entry){s->name, s->ncall, (int32_t)s->K, malloc(s->K * sizeof(float))};
        if (!(ok = m.e[i].mean != NULL)) break;
        for (size_t j = 0; j < s->K; j++) m.e[i].mean[j] = (float)(s->sum2[j] / (double)s->n);
    }
    ix_errbuf err = {{0}};
    if (!ok) fprintf(stderr, "inferx imatrix: out of memory\n");
    else if (!(ok = ix_cli_imat_write(&m, o->out, &err))) fprintf(stderr, "inferx imatrix: %s\n", err.msg);
    for (size_t i = 0; m.e && i < c->n; i++) free(m.e[i].mean);
    free(m.e);
    return ok;
}

static bool write_xtx(const collector *c, const im_opts *o, int32_t n_chunks) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s.xtx", o->out) >= sizeof path) {
        fprintf(stderr, "inferx imatrix: output path too long\n");
        return false;
    }
    ix_gguf_writer *w = ix_gguf_writer_create();
    float **data = calloc(c->n ? c->n : 1, sizeof *data);
    bool ok = w && data && ix_gguf_writer_set_str(w, "general.type", "inferx.xtx") == IX_OK &&
              ix_gguf_writer_set_u32(w, "xtx.chunks", (uint32_t)n_chunks) == IX_OK &&
              ix_gguf_writer_set_str(w, "xtx.dataset", o->text) == IX_OK;
    for (size_t i = 0; i < c->n && ok; i++) {
        const wstat *s = &c->w[i];
        const size_t K = s->K;
        if (!(ok = (data[i] = malloc(K * K * sizeof(float))) != NULL)) break;
        for (size_t r = 0; r < K; r++)
            for (size_t j = r; j < K; j++)
                data[i][r * K + j] = data[i][j * K + r] = (float)(s->xtx[r * K + j] / (double)s->n);
        int64_t ne[2] = {(int64_t)K, (int64_t)K};
        ok = ix_gguf_writer_add_tensor(w, s->name, IX_DTYPE_F32, 2, ne, data[i]) == IX_OK;
    }
    ok = ok && ix_gguf_writer_write(w, path) == IX_OK;
    if (!ok) fprintf(stderr, "inferx imatrix: %s: %s\n", path, w ? ix_gguf_writer_errmsg(w) : "out of memory");
    for (size_t i = 0; data && i < c->n; i++) free(data[i]);
    free(data);
    ix_gguf_writer_destroy(w);
    if (ok) fprintf(stderr, "wrote %s\n", path);
    return ok;
}

/* ---- the run ------------------------------------------------------------------------- */
static int collect(const im_opts *o, ix_model *m, const ix_token_vec *ids) {
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    if (o->n_ctx > (uint64_t)hp->n_ctx_train) {
        fprintf(stderr, "inferx imatrix: -c %llu is beyond the model's context %d\n", (unsigned long long)o->n_ctx,
                (int)hp->n_ctx_train);
        return 2;
    }
    const int32_t n_ctx = (int32_t)o->n_ctx;
    int32_t n_chunks = (int32_t)(ids->n / (size_t)n_ctx);
    if (o->max_chunks && (uint64_t)n_chunks > o->max_chunks) n_chunks = (int32_t)o->max_chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "inferx imatrix: the text has %zu tokens, fewer than one chunk of %d\n", ids->n, n_ctx);
        return 1;
    }
    ix_errbuf err = {{0}};
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.max_seq_len = n_ctx;
    kp.n_blocks = (n_ctx + kp.block_size - 1) / kp.block_size;
    kp.enable_prefix_cache = false;
    ix_kv *kv = NULL;
    ix_model_ctx *ctx = NULL;
    collector c = {.xtx = o->xtx};
    ix_token *tok = malloc((size_t)n_ctx * sizeof *tok);
    int32_t *pos = malloc((size_t)n_ctx * sizeof *pos), *seq = calloc((size_t)n_ctx, sizeof *seq);
    uint8_t *out = malloc((size_t)n_ctx);
    float *logits = malloc((size_t)n_ctx * (size_t)hp->n_vocab * sizeof(float));
    int rc = 1;
    if (!tok || !pos || !seq || !out || !logits) {
        fprintf(stderr, "inferx imatrix: out of memory\n");
        goto done;
    }
    if (ix_kv_create(&kp, &kv, &err) != IX_OK) {
        fprintf(stderr, "inferx imatrix: KV cache: %s\n", err.msg);
        goto done;
    }
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = n_ctx;
    cp.n_threads = (int32_t)o->threads;
    if (ix_model_ctx_create(&ctx, m, kv, &cp, &err) != IX_OK) {
        fprintf(stderr, "inferx imatrix: %s\n", err.msg);
        goto done;
    }
    c.pool = ix_model_ctx_pool(ctx);
    ix_model_ctx_set_observer(ctx, observe, &c);
    const ix_tokenizer *tk = ix_model_tokenizer(m);
    const ix_token bos = ix_tokenizer_add_bos(tk) ? ix_tokenizer_bos(tk) : IX_TOKEN_NONE;
    fprintf(stderr, "imatrix: %d chunks of %d tokens from %s%s\n", n_chunks, n_ctx, o->text,
            o->xtx ? ", with X^T X" : "");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int32_t k = 0; k < n_chunks; k++) {
        c.chunk = k;
        const ix_token *src = ids->ids + (size_t)k * (size_t)n_ctx;
        for (int32_t i = 0; i < n_ctx; i++) {
            tok[i] = i == 0 && bos != IX_TOKEN_NONE ? bos : src[i];
            pos[i] = i;
            out[i] = 1;
        }
        int32_t s;
        if (ix_kv_seq_create(kv, 0, &s) != IX_OK || ix_kv_seq_append(kv, s, n_ctx, tok) != IX_OK) {
            fprintf(stderr, "inferx imatrix: KV cache: %s\n", ix_kv_errmsg(kv));
            goto done;
        }
        for (int32_t i = 0; i < n_ctx; i++) seq[i] = s;
        ix_batch b = {n_ctx, tok, pos, seq, out};
        ix_status st = ix_model_forward(ctx, &b, logits);
        ix_kv_seq_free(kv, s);
        if (st != IX_OK || c.failed) {
            fprintf(stderr, "inferx imatrix: %s\n", c.failed ? "out of memory" : ix_model_ctx_errmsg(ctx));
            goto done;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        fprintf(stderr, "\r[%d/%d] chunks, %zu weights observed, %.1f s", k + 1, n_chunks, c.n, sec);
    }
    fprintf(stderr, "\n");
    rc = write_imatrix(&c, o, n_chunks) && (!o->xtx || write_xtx(&c, o, n_chunks)) ? 0 : 1;
    if (!rc) fprintf(stderr, "wrote %s: %zu entries\n", o->out, c.n);
done:
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    collector_free(&c);
    free(tok), free(pos), free(seq), free(out), free(logits);
    return rc;
}

int ix_cli_imatrix(int argc, char **argv) {
    im_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    if (ix_model_load(&m, o.model, &err) != IX_OK) {
        fprintf(stderr, "inferx imatrix: %s: %s\n", o.model, err.msg);
        return 1;
    }
    ix_token_vec ids = {0};
    rc = ix_cli_tokenize_file("imatrix", o.text, ix_model_tokenizer(m), &ids) ? collect(&o, m, &ids) : 1;
    ix_token_vec_free(&ids);
    ix_model_destroy(m);
    return rc;
}
