/*
 * inferx quantize: writes a copy of a GGUF model with its weights in another
 * type or in one of llama.cpp's standard mixes (quant_plan.c decides each
 * tensor's type), optionally weighting the rounding error by an importance
 * matrix (imatrix_file.h) or compensating it column by column (GPTQ, with the
 * X^T X statistics `inferx imatrix --xtx` saves; gptq.c).
 *
 * Every metadata key is copied (split keys dropped), general.file_type and
 * general.quantization_version set; the writer aligns each tensor to
 * general.alignment (32 when absent), as the GGUF spec says. Tensors are
 * converted one at a time, their rows split over -t threads, and each output
 * is kept in memory until the file is written (the writer borrows them).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/gptq.h"
#include "cli/imatrix_file.h"
#include "cli/quant_plan.h"
#include "inferx/kernels.h"

#define MAX_OVERRIDES 64

/* ---- options: one table drives parsing and --help ---------------------------------- */
typedef struct q_opts {
    const char *in, *out, *type, *imatrix, *method;
    const char *ovr[MAX_OVERRIDES];
    size_t n_ovr;
    uint64_t threads;
    bool pure, requant;
} q_opts;

/* --override, repeatable: each one appended. */
static const char *add_override(void *dst, const char *value) {
    q_opts *o = dst;
    if (o->n_ovr == MAX_OVERRIDES) return "may be given at most 64 times";
    o->ovr[o->n_ovr++] = value;
    return NULL;
}

static void usage(FILE *f, const ix_cli_opt *opts, size_t n_opts) {
    fprintf(f, "usage: inferx quantize IN.gguf OUT.gguf TYPE [options]\n"
               "\n"
               "Writes a copy of IN (all metadata, general.file_type set) with its weights\n"
               "quantized. TYPE is a type or one of llama.cpp's mixes, with its per-tensor\n"
               "choices (the output head in Q6_K, more bits for attn_v / ffn_down on some\n"
               "layers in the _M and _L mixes; a tensor whose rows are not a whole number of\n"
               "the type's blocks falls back as llama.cpp's does):\n ");
    size_t n, col = 1;
    const qmix *m = ix_cli_qmixes(&n);
    for (size_t i = 0; i < n; i++) {
        char item[48];
        if (m[i].alias_of) snprintf(item, sizeof item, " %s (= %s)", m[i].name, m[i].alias_of);
        else snprintf(item, sizeof item, " %s", m[i].name);
        if (col + strlen(item) > 78) fprintf(f, "\n "), col = 1;
        fputs(item, f);
        col += strlen(item);
    }
    fprintf(f, "\nNorms, 1-D tensors and a few small ones are copied as they are.\n\noptions:\n");
    ix_cli_print_opts(f, opts, n_opts);
    fprintf(f, "  -h, --help                   show this help\n");
    fprintf(f, "\nOverride types: ");
    ix_dtype types[64];
    size_t nt = ix_kernels_types(types, IX_ARRAY_LEN(types));
    for (size_t i = 0; i < nt && i < IX_ARRAY_LEN(types); i++) fprintf(f, "%s%s", i ? " " : "", ix_dtype_name(types[i]));
    fprintf(f, ".\nProgress goes to stderr: [i/n] name, shape, type in -> out, size.\n");
}

/* Returns 0 on success, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, q_opts *o) {
    *o = (q_opts){0};
    const ix_cli_opt opts[] = {
        {"--pure", NULL, "",
         "every quantized tensor in TYPE's base type (no per-tensor\n"
         "choices; rows that do not fit still fall back)",
         IX_CLI_OPT_FLAG, &o->pure, 0, 0, false, NULL},
        {"--override", NULL, "PAT=TYPE",
         "tensors whose name matches PAT get TYPE (repeatable; the\n"
         "first match wins). PAT is a glob (fnmatch: * ? [..]) of the\n"
         "whole name, or re:REGEX, a POSIX extended regular\n"
         "expression found anywhere in it. E.g. 'blk.[0-2].*=Q8_0',\n"
         "'re:ffn_down=Q6_K', 'output.weight=F16'",
         IX_CLI_OPT_FN, o, 0, 0, false, add_override},
        {"--imatrix", NULL, "FILE",
         "importance matrix (llama.cpp's imatrix.dat format, e.g.\n"
         "from `inferx imatrix`): weighs each column's rounding\n"
         "error by its mean squared activation in the scale searches",
         IX_CLI_OPT_STR, &o->imatrix, 0, 0, false, NULL},
        {"--method", NULL, "M",
         "rtn (default: round to nearest after the scale search) or\n"
         "gptq (column-by-column error compensation with the\n"
         "X^T X that `inferx imatrix --xtx` saved beside FILE;\n"
         "needs --imatrix FILE)",
         IX_CLI_OPT_STR, &o->method, 0, 0, false, NULL},
        {"--allow-requantize", NULL, "",
         "accept quantized input tensors (dequantized first; the\n"
         "errors add up)",
         IX_CLI_OPT_FLAG, &o->requant, 0, 0, false, NULL},
        {"--threads", "-t", "N", "worker threads (default or 0: all cores)", IX_CLI_OPT_U64, &o->threads, 0, 1024,
         false, NULL},
    };
    const char *pos[3];
    int n_pos = 0;
    int prc = ix_cli_parse_opts_pos("quantize", opts, IX_ARRAY_LEN(opts), argc, argv, pos, 3, &n_pos);
    if (prc == IX_CLI_HELP) {
        usage(stdout, opts, IX_ARRAY_LEN(opts));
        return -1;
    }
    if (prc != IX_CLI_OK) return 2;
    if (n_pos != 3) {
        fprintf(stderr, "inferx quantize: expected IN.gguf OUT.gguf TYPE (see --help)\n");
        return 2;
    }
    o->in = pos[0], o->out = pos[1], o->type = pos[2];
    if (!o->method) o->method = "rtn";
    if (strcmp(o->method, "rtn") && strcmp(o->method, "gptq")) {
        fprintf(stderr, "inferx quantize: --method must be rtn or gptq, got '%s'\n", o->method);
        return 2;
    }
    if (!strcmp(o->method, "gptq") && !o->imatrix) {
        fprintf(stderr, "inferx quantize: --method gptq needs --imatrix FILE (with its X^T X, "
                        "from `inferx imatrix --xtx`)\n");
        return 2;
    }
    return 0;
}

/* ---- converting one tensor ----------------------------------------------------------- */
typedef struct conv_job {
    const ix_gguf_tensor *t;
    ix_dtype to;
    const float *imp;   /* NULL or ne[0] importance weights */
    const float *xtx;   /* GPTQ: NULL or the ne[0] x ne[0] X^T X */
    uint8_t *dst;
    size_t in_row_bytes, out_row_bytes, n_rows;
    float *bufs;        /* per thread: 2 rows of ne[0] floats, and GPTQ's work */
    size_t buf_floats;  /* per thread */
    void *gptq;         /* the factored Hessian (gptq.h), or NULL */
    ix_status *status;  /* per thread */
} conv_job;

static void conv_rows(void *ctx, int ith, int nth) {
    conv_job *j = ctx;
    const size_t K = (size_t)j->t->ne[0];
    float *row = j->bufs + (size_t)ith * j->buf_floats;
    ix_status st = IX_OK;
    for (size_t r = (size_t)ith; r < j->n_rows && st == IX_OK; r += (size_t)nth) {
        const uint8_t *src = (const uint8_t *)j->t->data + r * j->in_row_bytes;
        st = ix_kernels_dequant_row(j->t->type, src, row, K);
        if (st != IX_OK) break;
        uint8_t *dst = j->dst + r * j->out_row_bytes;
        if (j->gptq) st = ix_cli_gptq_row(j->gptq, j->to, row, dst, j->imp, row + K);
        else st = ix_kernels_quantize_row_imp(j->to, row, dst, K, j->imp);
    }
    j->status[ith] = st;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void shape_str(const ix_gguf_tensor *t, char *buf, size_t size) {
    size_t o = (size_t)snprintf(buf, size, "[");
    for (uint32_t d = 0; d < t->n_dims && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

typedef struct q_run {
    const q_opts *o;
    ix_gguf *g;
    const qmix *mix;
    qoverride *ovr[MAX_OVERRIDES];
    imat im;
    ix_gguf *xtx; /* GPTQ statistics */
    qchoice *choice;
    uint8_t **data; /* per tensor: the converted bytes (NULL: copied) */
    ix_pool *pool;
} q_run;

/* Checks the plan against the input: types the kernels can read, requantizing
 * allowed, imatrix shapes. Prints the first problem; false then. */
static bool check_plan(q_run *q) {
    const uint64_t n = ix_gguf_n_tensors(q->g);
    for (uint64_t i = 0; i < n; i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(q->g, i);
        if (!q->choice[i].quantize) continue;
        const char *from = ix_dtype_name(t->type);
        if (!ix_kernels_has_type(t->type)) {
            fprintf(stderr, "inferx quantize: tensor '%.*s' has type %s, which cannot be converted\n",
                    (int)t->name.len, t->name.ptr, from);
            return false;
        }
        if (t->type != IX_DTYPE_F32 && t->type != IX_DTYPE_F16 && t->type != IX_DTYPE_BF16 && !q->o->requant) {
            fprintf(stderr, "inferx quantize: tensor '%.*s' is already %s; requantizing adds the errors of both "
                            "(pass --allow-requantize to do it anyway)\n",
                    (int)t->name.len, t->name.ptr, from);
            return false;
        }
    }
    for (size_t k = 0; k < q->o->n_ovr; k++) {
        bool used = false;
        for (uint64_t i = 0; i < n && !used; i++) used = q->choice[i].override == (int)k;
        if (!used) fprintf(stderr, "inferx quantize: warning: --override '%s' matches no tensor\n", q->o->ovr[k]);
    }
    return true;
}

/* The importance weights of tensor t, NULL when the imatrix has none (noted). */
static const float *imp_of(q_run *q, const ix_gguf_tensor *t, const char *name, bool *bad) {
    *bad = false;
    if (!q->im.n) return NULL;
    const imat_entry *e = ix_cli_imat_find(&q->im, name);
    if (!e) return NULL;
    if ((uint64_t)e->nval != (uint64_t)t->ne[0]) {
        fprintf(stderr, "inferx quantize: imatrix entry '%s' has %d values, the tensor's rows %lld\n", name,
                e->nval, (long long)t->ne[0]);
        *bad = true;
        return NULL;
    }
    return e->mean;
}

static int convert_all(q_run *q, ix_gguf_writer *w) {
    const uint64_t n = ix_gguf_n_tensors(q->g);
    const int nth = ix_pool_n_threads(q->pool);
    uint64_t size_in = 0, size_out = 0;
    int n_fallback = 0, n_noimp = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t i = 0; i < n; i++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(q->g, i);
        const qchoice *c = &q->choice[i];
        char name[512], shape[96];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 400 ? t->name.len : 400), t->name.ptr);
        shape_str(t, shape, sizeof shape);
        const size_t n_rows = (size_t)(t->n_elements / (uint64_t)t->ne[0]);
        uint64_t out_row = 0;
        const void *data = t->data;
        uint64_t bytes = t->n_bytes;
        char note[96] = "";
        if (c->quantize) {
            ix_dtype_row_bytes(c->type, (uint64_t)t->ne[0], &out_row);
            bytes = out_row * n_rows;
            bool bad;
            const float *imp = imp_of(q, t, name, &bad);
            if (bad) return 1;
            if (q->im.n && !imp) n_noimp++, snprintf(note, sizeof note, " (no imatrix entry)");
            if (c->fell_from != c->type)
                n_fallback++, snprintf(note + strlen(note), sizeof note - strlen(note), " (fallback from %s)",
                                       ix_dtype_name(c->fell_from));
            if (c->override >= 0)
                snprintf(note + strlen(note), sizeof note - strlen(note), " (override %d)", c->override + 1);
            conv_job j = {t, c->type, imp, NULL, NULL, (size_t)(t->n_bytes / n_rows), (size_t)out_row, n_rows,
                          NULL, 2 * (size_t)t->ne[0], NULL, NULL};
            ix_errbuf err = {{0}};
            if (q->xtx && imp && ix_dtype_block_size(c->type) > 1) {
                if (!ix_cli_gptq_prepare(&j.gptq, q->xtx, name, (size_t)t->ne[0], c->type, &err)) {
                    fprintf(stderr, "inferx quantize: %s\n", err.msg);
                    return 1;
                }
                j.buf_floats += ix_cli_gptq_work_floats(j.gptq);
                if (j.gptq) snprintf(note + strlen(note), sizeof note - strlen(note), " (gptq)");
            }
            q->data[i] = malloc(bytes ? bytes : 1);
            j.bufs = malloc((size_t)nth * j.buf_floats * sizeof(float));
            j.status = calloc((size_t)nth, sizeof *j.status);
            if (!q->data[i] || !j.bufs || !j.status) {
                free(j.bufs), free(j.status), ix_cli_gptq_free(j.gptq);
                fprintf(stderr, "inferx quantize: out of memory for tensor '%s'\n", name);
                return 1;
            }
            j.dst = q->data[i];
            ix_pool_run(q->pool, conv_rows, &j);
            ix_status st = IX_OK;
            for (int k = 0; k < nth; k++)
                if (j.status[k] != IX_OK) st = j.status[k];
            free(j.bufs), free(j.status), ix_cli_gptq_free(j.gptq);
            if (st != IX_OK) {
                fprintf(stderr, "inferx quantize: tensor '%s': %s -> %s failed: %s\n", name,
                        ix_dtype_name(t->type), ix_dtype_name(c->type), ix_status_str(st));
                return 1;
            }
            data = q->data[i];
        }
        fprintf(stderr, "[%4llu/%4llu] %-28s %-14s %6s -> %-6s %8.3f MiB -> %8.3f MiB%s\n",
                (unsigned long long)i + 1, (unsigned long long)n, name, shape, ix_dtype_name(t->type),
                ix_dtype_name(c->type), mib(t->n_bytes), mib(bytes), note);
        if (ix_gguf_writer_add_tensor(w, name, c->type, t->n_dims, t->ne, data) != IX_OK) {
            fprintf(stderr, "inferx quantize: tensor '%s': %s\n", name, ix_gguf_writer_errmsg(w));
            return 1;
        }
        size_in += t->n_bytes;
        size_out += bytes;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "tensor data %.2f MiB -> %.2f MiB in %.2f s on %d thread%s", mib(size_in), mib(size_out), s, nth,
            nth == 1 ? "" : "s");
    if (n_fallback) fprintf(stderr, "; %d tensor%s fell back to another type", n_fallback, n_fallback == 1 ? "" : "s");
    if (n_noimp) fprintf(stderr, "; %d without imatrix data", n_noimp);
    fprintf(stderr, "\n");
    return 0;
}

static bool copy_meta(q_run *q, ix_gguf_writer *w) {
    for (uint64_t i = 0; i < ix_gguf_n_kv(q->g); i++) {
        ix_str k = ix_gguf_kv_key(q->g, i);
        if (ix_str_eq(k, "split.no") || ix_str_eq(k, "split.count") || ix_str_eq(k, "split.tensors.count")) continue;
        if (ix_gguf_writer_copy_kv(w, q->g, i) != IX_OK) goto bad;
    }
    if (ix_gguf_writer_set_u32(w, "general.quantization_version", 2) != IX_OK ||
        ix_gguf_writer_set_u32(w, "general.file_type", q->mix->file_type) != IX_OK)
        goto bad;
    return true;
bad:
    fprintf(stderr, "inferx quantize: metadata: %s\n", ix_gguf_writer_errmsg(w));
    return false;
}

static int run(q_run *q) {
    const q_opts *o = q->o;
    ix_errbuf err = {{0}};
    if (!(q->mix = ix_cli_qmix_find(o->type))) {
        fprintf(stderr, "inferx quantize: unknown TYPE '%s' (see --help for the types and mixes)\n", o->type);
        return 2;
    }
    for (size_t k = 0; k < o->n_ovr; k++)
        if (!(q->ovr[k] = ix_cli_qoverride_parse(o->ovr[k], &err))) {
            fprintf(stderr, "inferx quantize: %s\n", err.msg);
            return 2;
        }
    if (ix_gguf_open(&q->g, o->in, &err) != IX_OK) {
        fprintf(stderr, "inferx quantize: %s: %s\n", o->in, err.msg);
        return 1;
    }
    if (o->imatrix) {
        if (!ix_cli_imat_read(&q->im, o->imatrix, &err)) {
            fprintf(stderr, "inferx quantize: %s\n", err.msg);
            return 1;
        }
        fprintf(stderr, "imatrix %s: %zu entries from %d chunks of '%s'\n", o->imatrix, q->im.n, q->im.last_call,
                q->im.dataset);
        if (!strcmp(o->method, "gptq") && !ix_cli_gptq_open(&q->xtx, o->imatrix, &err)) {
            fprintf(stderr, "inferx quantize: %s\n", err.msg);
            return 1;
        }
    }
    const uint64_t n = ix_gguf_n_tensors(q->g);
    q->choice = calloc(n ? n : 1, sizeof *q->choice);
    q->data = calloc(n ? n : 1, sizeof *q->data);
    if (!q->choice || !q->data) {
        fprintf(stderr, "inferx quantize: out of memory\n");
        return 1;
    }
    if (!ix_cli_qplan(q->g, q->mix, o->pure, q->im.n > 0, q->ovr, o->n_ovr, q->choice, &err)) {
        fprintf(stderr, "inferx quantize: %s\n", err.msg);
        return 1;
    }
    if (!check_plan(q)) return 1;
    if (ix_pool_create(&q->pool, (int)o->threads) != IX_OK) {
        fprintf(stderr, "inferx quantize: cannot start %llu threads\n", (unsigned long long)o->threads);
        return 1;
    }
    ix_gguf_writer *w = ix_gguf_writer_create();
    if (!w) {
        fprintf(stderr, "inferx quantize: out of memory\n");
        return 1;
    }
    fprintf(stderr, "quantizing %s to %s as %s%s%s\n", o->in, o->out, q->mix->name, o->pure ? " (pure)" : "",
            !strcmp(o->method, "gptq") ? " with GPTQ" : q->im.n ? " with the imatrix" : "");
    int rc = copy_meta(q, w) ? convert_all(q, w) : 1;
    if (!rc && ix_gguf_writer_write(w, o->out) != IX_OK) {
        fprintf(stderr, "inferx quantize: %s: %s\n", o->out, ix_gguf_writer_errmsg(w));
        rc = 1;
    }
    if (!rc) fprintf(stderr, "wrote %s\n", o->out);
    ix_gguf_writer_destroy(w);
    return rc;
}

int ix_cli_quantize(int argc, char **argv) {
    q_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    q_run q = {.o = &o};
    rc = run(&q);
    for (uint64_t i = 0; q.data && i < ix_gguf_n_tensors(q.g); i++) free(q.data[i]);
    free(q.data);
    free(q.choice);
    for (size_t k = 0; k < o.n_ovr; k++) ix_cli_qoverride_free(q.ovr[k]);
    ix_cli_imat_free(&q.im);
    ix_gguf_close(q.xtx);
    ix_pool_destroy(q.pool);
    ix_gguf_close(q.g);
    return rc;
}
