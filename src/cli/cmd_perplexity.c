/*
 * inferx perplexity: the perplexity of a model on a text, computed the way
 * llama.cpp's perplexity tool computes it, so that figures from either engine
 * can stand side by side.
 *
 * The text is tokenized once (BOS first when the vocabulary adds it) and cut
 * into n_tokens / n_ctx chunks of n_ctx tokens. Each chunk is evaluated on
 * its own from position 0, its first token replaced by BOS when the
 * vocabulary adds BOS, and only its second half is scored: the logits at
 * positions n_ctx/2 .. n_ctx-2 against the token that follows each. Negative
 * log-likelihoods add up in double; PPL = exp(mean NLL), and its uncertainty
 * is PPL x the standard error of the mean NLL.
 *
 * --kl-divergence-base FILE also stores, for every scored position, the
 * model's log-softmax as 16-bit steps between the top logit and 16 below it
 * (llama.cpp's file layout; docs/quantization.md). --kl-divergence then runs
 * another model on the tokens kept in that file and compares the two
 * position by position: KL divergence, whether the top token agrees, the
 * change in the probability of the right token, and the perplexity ratio
 * with an uncertainty that accounts for the two runs' correlation.
 *
 * Several chunks share a forward pass (max(1, -b / n_ctx) of them, as the
 * reference's n_seq), each in its own KV sequence, freed after the pass;
 * a chunk longer than -b goes through in -b-token steps. The log-softmax of
 * the scored rows runs on the model context's worker pool, one row per task,
 * and results are added up in row order, so figures do not depend on -t.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/model.h"

#define PPL_MIN_CTX 8        /* chunks of 8 tokens score 3 positions each */
#define PPL_DEFAULT_CTX 512  /* the reference's default */
#define PPL_LOGP_RANGE 16.0f /* stored log-probabilities reach this far below the top */
static const char k_magic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

/* ---- options: one table drives parsing and --help ---------------------------------- */

typedef struct ppl_opts {
    const char *model, *text, *kl_base;
    /* 0: not given (n_ctx: 512 or the base file's; threads: all cores; max_chunks: all) */
    uint64_t n_ctx, n_batch, threads, max_chunks;
    bool kl, json;
    ix_kv_dtype kv_dtype;
} ppl_opts;

/* Parses argv into o: 0, -1 after --help, else the exit status. One table
 * (cli.h's option rows) drives the parser, the checks and --help. */
static int parse_args(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){.n_batch = 2048, .kv_dtype = IX_KV_F16};
    const ix_cli_opt opts[] = {
        {"--model", "-m", "FILE", "GGUF model (default: the bundled model)", IX_CLI_OPT_STR, &o->model, 0, 0, false,
         NULL},
        {"--file", "-f", "FILE",
         "UTF-8 text to score (required, except with\n"
         "--kl-divergence, which takes the tokens from the base\n"
         "file; given there, it must tokenize to them)",
         IX_CLI_OPT_STR, &o->text, 0, 0, false, NULL},
        {"--ctx-size", "-c", "N",
         "tokens per chunk, from 8 to the model's context\n"
         "(default 512; with --kl-divergence the base file's)",
         IX_CLI_OPT_U64, &o->n_ctx, PPL_MIN_CTX, 1u << 20, false, NULL},
        {"--batch-size", "-b", "N",
         "tokens per forward pass: N / n_ctx chunks go through\n"
         "together (default 2048)",
         IX_CLI_OPT_U64, &o->n_batch, 1, 1u << 20, false, NULL},
        {"--threads", "-t", "N", "worker threads (default or 0: all cores)", IX_CLI_OPT_U64, &o->threads, 0, 1024,
         false, NULL},
        {"--chunks", NULL, "N", "score at most N chunks (default: all the text holds)", IX_CLI_OPT_U64,
         &o->max_chunks, 1, INT32_MAX, false, NULL},
        {"--kl-divergence-base", NULL, "FILE",
         "save the log-probabilities of the scored positions\n"
         "to FILE (with --kl-divergence: read them from it)",
         IX_CLI_OPT_STR, &o->kl_base, 0, 0, false, NULL},
        {"--kl-divergence", NULL, "",
         "compare this model with the one that wrote the\n"
         "--kl-divergence-base FILE, on the same tokens",
         IX_CLI_OPT_FLAG, &o->kl, 0, 0, false, NULL},
        {"--kv-cache-dtype", NULL, "TYPE", IX_CLI_KV_DTYPE_HELP, IX_CLI_OPT_FN, &o->kv_dtype, 0, 0, false,
         ix_cli_set_kv_dtype},
        {"--json", NULL, "", "print one JSON object instead of text", IX_CLI_OPT_FLAG, &o->json, 0, 0, false, NULL},
    };
    int prc = ix_cli_parse_opts("perplexity", opts, IX_ARRAY_LEN(opts), argc, argv);
    if (prc == IX_CLI_HELP) {
        fprintf(stdout,
                "usage: inferx perplexity [-m MODEL.gguf] -f TEXT [options]\n"
                "       inferx perplexity -m OTHER.gguf --kl-divergence-base BASE --kl-divergence\n"
                "\n"
                "Perplexity of the model on TEXT as llama.cpp's perplexity tool computes it: the\n"
                "text in chunks of n_ctx tokens, each evaluated from scratch, the second half of\n"
                "each scored. Prints the estimate after each chunk, then the final one.\n"
                "\n"
                "KL divergence: run the base model with --kl-divergence-base BASE, which saves its\n"
                "distributions, then another (e.g. quantized) model with the same BASE and\n"
                "--kl-divergence: KL divergence, top-token agreement, change of p, PPL ratio.\n"
                "\n");
        ix_cli_print_opts(stdout, opts, IX_ARRAY_LEN(opts));
        fprintf(stdout, "  -h, --help                   show this help\n\nThe bundled model is %s.\n",
                ix_cli_default_model());
        return -1;
    }
    if (prc != IX_CLI_OK) return 2;
    const char *bad = NULL;
    if (!o->kl && !o->text) bad = "-f TEXT is required (see --help)";
    else if (o->kl && !o->kl_base) bad = "--kl-divergence needs --kl-divergence-base FILE from a base model's run";
    if (bad) {
        fprintf(stderr, "inferx perplexity: %s\n", bad);
        return 2;
    }
    if (!o->model) o->model = ix_cli_default_model();
    return 0;
}

/* ---- one row of logits ---------------------------------------------------------------- */

/* What the reference derives from a row first: its top logit (the first, on
 * ties) and log(sum(exp(l - max))), with float differences summed in double. */
typedef struct row_norm {
    float max;
    int32_t imax;
    double lse;
} row_norm;

static row_norm row_normalize(const float *l, int32_t n) {
    row_norm r = {l[0], 0, 0};
    for (int32_t i = 1; i < n; i++)
        if (l[i] > r.max) {
            r.max = l[i];
            r.imax = i;
        }
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += expf(l[i] - r.max);
    r.lse = log(sum);
    return r;
}

/* One scored position in the base file: two floats (scale, min_logp), then
 * n_vocab 16-bit steps padded to an even count; log p(i) = scale * q[i] +
 * min_logp, where min_logp is the log-probability PPL_LOGP_RANGE below the
 * top (or of the lowest logit, if higher). Length in uint16 units: */
static size_t rec_len(int32_t n_vocab) {
    return 4 + 2 * (((size_t)n_vocab + 1) / 2);
}

static void rec_encode(const float *l, int32_t n, row_norm r, uint16_t *rec) {
    float lo = l[0];
    for (int32_t i = 1; i < n; i++)
        if (l[i] < lo) lo = l[i];
    if (lo < r.max - PPL_LOGP_RANGE) lo = r.max - PPL_LOGP_RANGE;
    float hdr[2] = {(r.max - lo) / 65535.0f, lo - r.max - (float)r.lse};
    memcpy(rec, hdr, sizeof hdr);
    uint16_t *q = rec + 4;
    memset(q, 0, (rec_len(n) - 4) * sizeof *q);
    if (hdr[0] == 0) return;
    float inv = 1.0f / hdr[0];
    for (int32_t i = 0; i < n; i++) {
        if (!(l[i] > lo)) continue;
        float v = rintf(inv * (l[i] - lo));
        q[i] = v >= 65535.0f ? 65535 : (uint16_t)v;
    }
}

/* This model's row against the base's record at the same position. */
typedef struct kl_row {
    double nll, nll_base, kld, p_diff;
    bool same_top;
} kl_row;

static kl_row row_compare(const float *l, int32_t n, ix_token next, const uint16_t *rec) {
    row_norm r = row_normalize(l, n);
    float hdr[2];
    memcpy(hdr, rec, sizeof hdr);
    const uint16_t *q = rec + 4;
    float top = r.max + (float)r.lse; /* log p(i) = l[i] - top */
    kl_row k = {.nll = top - l[next], .nll_base = -(hdr[0] * q[next] + hdr[1])};
    double sum = 0;
    int32_t ibase = 0;
    float best = 0;
    for (int32_t i = 0; i < n; i++) {
        float lp_base = hdr[0] * q[i] + hdr[1];
        if (i == 0 || lp_base > best) {
            best = lp_base;
            ibase = i;
        }
        if (lp_base > -PPL_LOGP_RANGE) sum += expf(lp_base) * (lp_base - l[i] + top);
    }
    k.kld = sum;
    k.same_top = r.imax == ibase;
    k.p_diff = expf(-(float)k.nll) - expf(-(float)k.nll_base);
    return k;
}

/* ---- evaluation: chunks through the model ---------------------------------------- */

typedef struct evaluator {
    ix_kv *kv;
    ix_model_ctx *ctx;
    int32_t n_ctx, first, n_scored; /* first = n_ctx/2 is the first scored position */
    int32_t n_seq;                  /* chunks per pass */
    int32_t n_step;                 /* tokens of each chunk per forward pass */
    int32_t n_vocab;
    ix_token bos;          /* replaces each chunk's first token; IX_TOKEN_NONE: kept */
    ix_token *tok;         /* (n_seq * n_step) one forward batch */
    int32_t *pos, *seq;    /* (n_seq * n_step) */
    uint8_t *out;          /* (n_seq * n_step) */
    int32_t *seqs;         /* (n_seq) KV sequence of each chunk of the pass */
    float *logits;         /* (n_seq * n_scored, n_vocab) the scored rows of one pass */
} evaluator;

static bool ev_open(evaluator *ev, const ix_model *m, int32_t n_ctx, int32_t n_chunk, uint64_t n_batch,
                    uint64_t threads, ix_kv_dtype kv_dtype) {
    const ix_tokenizer *tok = ix_model_tokenizer(m);
    *ev = (evaluator){.n_ctx = n_ctx, .first = n_ctx / 2, .n_scored = n_ctx - 1 - n_ctx / 2,
                      .n_vocab = ix_model_get_hparams(m)->n_vocab, .bos = IX_TOKEN_NONE};
    if (ix_tokenizer_add_bos(tok)) ev->bos = ix_tokenizer_bos(tok);
    ev->n_seq = n_batch >= (uint64_t)n_ctx ? (int32_t)(n_batch / (uint64_t)n_ctx) : 1;
    if (ev->n_seq > n_chunk) ev->n_seq = n_chunk;
    ev->n_step = n_batch >= (uint64_t)n_ctx ? n_ctx : (int32_t)n_batch;

    ix_errbuf err = {{0}};
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.dtype = kv_dtype; /* f16 by default, as the reference's cache */
    kp.max_seq_len = n_ctx;
    kp.n_blocks = (int64_t)ev->n_seq * ((n_ctx + kp.block_size - 1) / kp.block_size);
    kp.enable_prefix_cache = false;
    if (ix_kv_create(&kp, &ev->kv, &err) != IX_OK) {
        fprintf(stderr, "inferx perplexity: KV cache: %s\n", err.msg);
        return false;
    }
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = ev->n_seq * ev->n_step;
    cp.n_threads = (int32_t)threads;
    if (ix_model_ctx_create(&ev->ctx, m, ev->kv, &cp, &err) != IX_OK) {
        fprintf(stderr, "inferx perplexity: %s\n", err.msg);
        return false;
    }
    size_t nb = (size_t)cp.max_batch_tokens;
    ev->tok = malloc(nb * sizeof *ev->tok);
    ev->pos = malloc(nb * sizeof *ev->pos);
    ev->seq = malloc(nb * sizeof *ev->seq);
    ev->out = malloc(nb);
    ev->seqs = malloc((size_t)ev->n_seq * sizeof *ev->seqs);
    ev->logits = malloc((size_t)ev->n_seq * (size_t)ev->n_scored * (size_t)ev->n_vocab * sizeof(float));
    if (!ev->tok || !ev->pos || !ev->seq || !ev->out || !ev->seqs || !ev->logits) {
        fprintf(stderr, "inferx perplexity: out of memory\n");
        return false;
    }
    return true;
}

static void ev_close(evaluator *ev) {
    free(ev->tok);
    free(ev->pos);
    free(ev->seq);
    free(ev->out);
    free(ev->seqs);
    free(ev->logits);
    ix_model_ctx_destroy(ev->ctx);
    ix_kv_destroy(ev->kv);
}

/* Runs n chunks (n_ctx tokens each, back to back) from position 0 and leaves
 * their scored rows in ev->logits, chunk after chunk. */
static bool ev_pass(evaluator *ev, const ix_token *chunks, int32_t n) {
    int32_t made = 0;
    while (made < n && ix_kv_seq_create(ev->kv, 0, &ev->seqs[made]) == IX_OK) made++;
    bool ok = made == n;
    if (!ok) fprintf(stderr, "inferx perplexity: KV cache: %s\n", ix_kv_errmsg(ev->kv));
    size_t rows = 0;
    for (int32_t p0 = 0; ok && p0 < ev->n_ctx; p0 += ev->n_step) {
        int32_t k = ev->n_ctx - p0 < ev->n_step ? ev->n_ctx - p0 : ev->n_step, nt = 0;
        for (int32_t s = 0; ok && s < n; s++) {
            const ix_token *src = chunks + (size_t)s * (size_t)ev->n_ctx + (size_t)p0;
            for (int32_t i = 0; i < k; i++, nt++) {
                int32_t p = p0 + i;
                ev->tok[nt] = p == 0 && ev->bos != IX_TOKEN_NONE ? ev->bos : src[i];
                ev->pos[nt] = p;
                ev->seq[nt] = ev->seqs[s];
                ev->out[nt] = p >= ev->first && p < ev->n_ctx - 1;
            }
            if (ix_kv_seq_append(ev->kv, ev->seqs[s], k, ev->tok + nt - k) != IX_OK) {
                fprintf(stderr, "inferx perplexity: KV cache: %s\n", ix_kv_errmsg(ev->kv));
                ok = false;
            }
        }
        if (!ok) break;
        ix_batch b = {nt, ev->tok, ev->pos, ev->seq, ev->out};
        if (ix_model_forward(ev->ctx, &b, ev->logits + rows * (size_t)ev->n_vocab) != IX_OK) {
            fprintf(stderr, "inferx perplexity: %s\n", ix_model_ctx_errmsg(ev->ctx));
            ok = false;
            break;
        }
        for (int32_t s = 0; s < n; s++) ix_kv_seq_commit(ev->kv, ev->seqs[s], p0 + k);
        for (int32_t i = 0; i < nt; i++) rows += ev->out[i];
    }
    for (int32_t s = 0; s < made; s++) ix_kv_seq_free(ev->kv, ev->seqs[s]);
    return ok;
}

/* The scored rows of one pass, on the context's workers: NLL (and the base
 * record when writing one), or the comparison with the base's records. */
typedef struct score_job {
    const evaluator *ev;
    const ix_token *chunks; /* the pass's chunks: the targets */
    size_t n_rows;
    uint16_t *rec_out;      /* (n_rows, rec_len) to write, or NULL */
    const uint16_t *rec_in; /* (n_rows, rec_len) to compare with, or NULL */
    kl_row *rows;           /* (n_rows) results */
} score_job;

static void score_rows(void *ctx, int ith, int nth) {
    const score_job *j = ctx;
    const evaluator *ev = j->ev;
    size_t len = rec_len(ev->n_vocab), V = (size_t)ev->n_vocab;
    for (size_t r = (size_t)ith; r < j->n_rows; r += (size_t)nth) {
        size_t s = r / (size_t)ev->n_scored, at = r % (size_t)ev->n_scored;
        ix_token next = j->chunks[s * (size_t)ev->n_ctx + (size_t)ev->first + at + 1];
        const float *l = ev->logits + r * V;
        if (j->rec_in) {
            j->rows[r] = row_compare(l, ev->n_vocab, next, j->rec_in + r * len);
            continue;
        }
        row_norm n = row_normalize(l, ev->n_vocab);
        j->rows[r] = (kl_row){.nll = (double)n.max + n.lse - (double)l[next]};
        if (j->rec_out) rec_encode(l, ev->n_vocab, n, j->rec_out + r * len);
    }
}

/* ---- statistics, as the reference states them ------------------------------------ */

typedef struct sums {
    double nll, nll2, base, base2, nll_base, kld, kld2, pd, pd2, pd4, pd_max;
    size_t same_top, count;
} sums;

static void sums_add(sums *a, const kl_row *k) {
    a->nll += k->nll;
    a->nll2 += k->nll * k->nll;
    a->base += k->nll_base;
    a->base2 += k->nll_base * k->nll_base;
    a->nll_base += k->nll * k->nll_base;
    a->kld += k->kld;
    a->kld2 += k->kld * k->kld;
    a->pd += k->p_diff;
    a->pd2 += k->p_diff * k->p_diff;
    a->pd4 += k->p_diff * k->p_diff * k->p_diff * k->p_diff;
    if (fabs(k->p_diff) > a->pd_max) a->pd_max = fabs(k->p_diff);
    a->same_top += k->same_top;
    a->count++;
}

typedef struct estimate {
    double val, unc;
} estimate;

/* Mean of count values and its standard error; the error is 0 for fewer than
 * min_count values (the reference's perplexity wants 2, its KL statistics 11). */
static estimate mean_unc(double sum, double sum2, size_t count, size_t min_count) {
    if (count < 1) return (estimate){0, 0};
    double f = sum / (double)count, df = sum2 / (double)count - f * f;
    return (estimate){f, df > 0 && count >= min_count && count > 1 ? sqrt(df / (double)(count - 1)) : 0};
}

/* exp of an estimate, the uncertainty carried through the derivative */
static estimate exp_est(estimate e) {
    double v = exp(e.val);
    return (estimate){v, v * e.unc};
}

/* The comparison figures of a KL run (to one point, or to the end). */
typedef struct kl_summary {
    estimate ln_ppl, ln_ppl_base, ppl, ppl_base, ln_ratio, ratio, diff, kld, p_diff, rms_p_diff, same_top;
    double cor;
} kl_summary;

static kl_summary kl_summarize(const sums *a) {
    kl_summary k;
    size_t n = a->count;
    k.ln_ppl = mean_unc(a->nll, a->nll2, n, 11);
    k.ln_ppl_base = mean_unc(a->base, a->base2, n, 11);
    k.ppl = exp_est(k.ln_ppl);
    k.ppl_base = exp_est(k.ln_ppl_base);
    double cov = n < 10 ? 0 : (a->nll_base / (double)n - (a->nll / (double)n) * (a->base / (double)n)) / (double)(n - 1);
    k.cor = cov / (k.ln_ppl.unc * k.ln_ppl_base.unc);
    double u2 = k.ln_ppl.unc * k.ln_ppl.unc + k.ln_ppl_base.unc * k.ln_ppl_base.unc;
    k.ln_ratio = (estimate){k.ln_ppl.val - k.ln_ppl_base.val, sqrt(fmax(0, u2 - 2 * cov))};
    k.ratio = exp_est(k.ln_ratio);
    double pcov = k.ppl.val * k.ppl_base.val * cov;
    k.diff = (estimate){k.ppl.val - k.ppl_base.val,
                        sqrt(fmax(0, k.ppl.unc * k.ppl.unc + k.ppl_base.unc * k.ppl_base.unc - 2 * pcov))};
    k.kld = mean_unc(a->kld, a->kld2, n, 11);
    k.p_diff = mean_unc(a->pd, a->pd2, n, 11);
    estimate mse = mean_unc(a->pd2, a->pd4, n, 11);
    double rms = sqrt(mse.val);
    k.rms_p_diff = (estimate){rms, rms > 0 ? 0.5 / rms * mse.unc : 0};
    double top = n ? (double)a->same_top / (double)n : 0;
    k.same_top = (estimate){top, n > 1 ? sqrt(top * (1 - top) / (double)(n - 1)) : 0};
    return k;
}

/* The percentiles the reference prints; kld: also in the KL divergence list
 * (the 75% and 25% rows are the Δp list's only). */
static const struct {
    const char *label, *key;
    double frac;
    bool kld;
} k_pcts[] = {
    {"Maximum", "max", 1, true},      {"99.9%  ", "p99_9", 0.999, true}, {"99.0%  ", "p99", 0.99, true},
    {"95.0%  ", "p95", 0.95, true},   {"90.0%  ", "p90", 0.90, true},    {"75.0%  ", "p75", 0.75, false},
    {"Median ", "median", 0.5, true}, {"25.0%  ", "p25", 0.25, false},   {"10.0%  ", "p10", 0.10, true},
    {" 5.0%  ", "p5", 0.05, true},    {" 1.0%  ", "p1", 0.01, true},     {" 0.1%  ", "p0_1", 0.001, true},
    {"Minimum", "min", 0, true},
};

/* v sorted ascending, n > 0: linear interpolation between neighbours. */
static double percentile(const double *v, size_t n, double frac) {
    if (frac <= 0) return v[0];
    if (frac >= 1) return v[n - 1];
    double p = frac * (double)(n - 1);
    size_t ip = (size_t)p;
    p -= (double)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- the base file: "_logits_", n_ctx (u32), n_vocab, n_chunk (i32), the
 * chunks' tokens (n_chunk * n_ctx i32), then n_chunk * n_scored records of
 * rec_len uint16, all little-endian: llama.cpp's --kl-divergence-base layout. */

#define BASE_HDR_BYTES 20

static uint64_t base_file_bytes(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk) {
    uint64_t scored = (uint64_t)(n_ctx - 1 - n_ctx / 2);
    return BASE_HDR_BYTES + (uint64_t)n_chunk * (uint64_t)n_ctx * 4 +
           (uint64_t)n_chunk * scored * rec_len(n_vocab) * 2;
}

static bool base_write_head(FILE *f, int32_t n_ctx, int32_t n_vocab, int32_t n_chunk, const ix_token *tokens) {
    uint32_t ctx32 = (uint32_t)n_ctx;
    return fwrite(k_magic, 1, sizeof k_magic, f) == sizeof k_magic && fwrite(&ctx32, 4, 1, f) == 1 &&
           fwrite(&n_vocab, 4, 1, f) == 1 && fwrite(&n_chunk, 4, 1, f) == 1 &&
           fwrite(tokens, sizeof *tokens, (size_t)n_chunk * (size_t)n_ctx, f) == (size_t)n_chunk * (size_t)n_ctx;
}

/* Reads and checks the head of a base file against the model; *tokens gets
 * the chunks (malloc'd). Prints why and returns false when it does not fit. */
static bool base_read_head(FILE *f, const char *path, const ix_model_hparams *hp, int32_t *n_ctx,
                           int32_t *n_chunk, ix_token **tokens) {
    char magic[8];
    uint32_t ctx32;
    int32_t n_vocab;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, k_magic, 8) || fread(&ctx32, 4, 1, f) != 1 ||
        fread(&n_vocab, 4, 1, f) != 1 || fread(n_chunk, 4, 1, f) != 1) {
        fprintf(stderr, "inferx perplexity: %s is not a --kl-divergence-base file\n", path);
        return false;
    }
    if (ctx32 < PPL_MIN_CTX || ctx32 > (uint32_t)hp->n_ctx_train || *n_chunk < 1) {
        fprintf(stderr, "inferx perplexity: %s: %u-token chunks (this model takes %d..%d), %d chunks\n", path,
                ctx32, PPL_MIN_CTX, hp->n_ctx_train, *n_chunk);
        return false;
    }
    *n_ctx = (int32_t)ctx32;
    if (n_vocab != hp->n_vocab) {
        fprintf(stderr, "inferx perplexity: %s was written by a model of %d tokens; this one has %d\n", path,
                n_vocab, hp->n_vocab);
        return false;
    }
    uint64_t want = base_file_bytes(*n_ctx, n_vocab, *n_chunk);
    if (fseek(f, 0, SEEK_END) || (uint64_t)ftell(f) != want || fseek(f, BASE_HDR_BYTES, SEEK_SET)) {
        fprintf(stderr, "inferx perplexity: %s should be %llu bytes for %d chunks of %d tokens; it is not\n",
                path, (unsigned long long)want, *n_chunk, *n_ctx);
        return false;
    }
    size_t n = (size_t)*n_chunk * (size_t)*n_ctx;
    if (!(*tokens = malloc(n * sizeof **tokens)) || fread(*tokens, sizeof **tokens, n, f) != n) {
        fprintf(stderr, "inferx perplexity: %s: cannot read its tokens\n", path);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if ((*tokens)[i] < 0 || (*tokens)[i] >= n_vocab) {
            fprintf(stderr, "inferx perplexity: %s: token %zu is %d, outside the vocabulary\n", path, i,
                    (*tokens)[i]);
            return false;
        }
    return true;
}

/* ---- the text ----------------------------------------------------------------------- */

bool ix_cli_tokenize_file(const char *cmd, const char *path, const ix_tokenizer *tok, ix_token_vec *ids) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "inferx %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return false;
    }
    ix_buf text = {0};
    char chunk[65536];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(chunk, 1, sizeof chunk, f)) > 0) ok = ix_buf_append(&text, chunk, n) == IX_OK;
    if (!ok || ferror(f)) {
        fprintf(stderr, "inferx %s: %s: %s\n", cmd, path, ok ? strerror(errno) : "out of memory");
        ok = false;
    }
    fclose(f);
    ix_errbuf err = {{0}};
    if (ok && ix_tokenizer_add_bos(tok) && ix_tokenizer_bos(tok) != IX_TOKEN_NONE &&
        ix_token_vec_push(ids, ix_tokenizer_bos(tok)) != IX_OK) {
        fprintf(stderr, "inferx %s: out of memory\n", cmd);
        ok = false;
    }
    if (ok && ix_tokenizer_encode(tok, text.data ? text.data : "", text.len, 0, ids, &err) != IX_OK) {
        fprintf(stderr, "inferx %s: %s: %s\n", cmd, path, err.msg);
        ok = false;
    }
    ix_buf_free(&text);
    return ok;
}

/* ---- one run ----------------------------------------------------------------------- */

typedef struct run {
    const ppl_opts *o;
    ix_model *m;
    int32_t n_ctx, n_chunk;
    size_t n_text_tokens;  /* of the text (0 when the tokens came from the base file) */
    ix_token_vec ids;      /* the text's tokens */
    ix_token *file_tokens; /* or the base file's */
    const ix_token *tokens; /* (n_chunk, n_ctx) the chunks: ids or file_tokens */
    FILE *base;            /* written (perplexity) or read (--kl-divergence) */
    evaluator ev;
    uint16_t *recs;        /* (n_seq * n_scored, rec_len) one pass's base records */
    kl_row *rows;          /* (n_chunk * n_scored) every scored position */
    double *chunk_ppl;     /* (n_chunk) the running estimate after each chunk */
    double seconds;
} run;

/* The chunks: from the text, or (--kl-divergence) from the base file, then
 * checked against the text when one is given. */
static bool load_chunks(run *r) {
    const ppl_opts *o = r->o;
    const ix_model_hparams *hp = ix_model_get_hparams(r->m);
    if (o->kl) {
        if (!(r->base = fopen(o->kl_base, "rb"))) {
            fprintf(stderr, "inferx perplexity: cannot open %s: %s\n", o->kl_base, strerror(errno));
            return false;
        }
        if (!base_read_head(r->base, o->kl_base, hp, &r->n_ctx, &r->n_chunk, &r->file_tokens)) return false;
        if (o->n_ctx && o->n_ctx != (uint64_t)r->n_ctx) {
            fprintf(stderr, "inferx perplexity: %s holds %d-token chunks, not -c %llu\n", o->kl_base, r->n_ctx,
                    (unsigned long long)o->n_ctx);
            return false;
        }
        r->tokens = r->file_tokens;
    } else {
        r->n_ctx = o->n_ctx ? (int32_t)o->n_ctx : PPL_DEFAULT_CTX;
        if (r->n_ctx > hp->n_ctx_train) {
            fprintf(stderr, "inferx perplexity: -c %d is more than the model's context of %d tokens\n",
                    r->n_ctx, hp->n_ctx_train);
            return false;
        }
    }
    if (!o->text) return true;
    if (!ix_cli_tokenize_file("perplexity", o->text, ix_model_tokenizer(r->m), &r->ids)) return false;
    r->n_text_tokens = r->ids.n;
    size_t need = o->kl ? (size_t)r->n_chunk * (size_t)r->n_ctx : 2 * (size_t)r->n_ctx;
    if (r->ids.n < need) {
        fprintf(stderr, "inferx perplexity: %s is %zu tokens; %s %zu (%s)\n", o->text, r->ids.n,
                o->kl ? "the base file's chunks are" : "two chunks of -c tokens need", need,
                o->kl ? "not the text the base was computed on" : "use a longer text or a smaller -c");
        return false;
    }
    if (o->kl) {
        if (memcmp(r->ids.ids, r->tokens, need * sizeof *r->tokens)) {
            fprintf(stderr, "inferx perplexity: %s does not tokenize to the tokens in %s\n", o->text, o->kl_base);
            return false;
        }
        return true;
    }
    r->tokens = r->ids.ids;
    r->n_chunk = (int32_t)(r->ids.n / (size_t)r->n_ctx);
    return true;
}

/* The perplexity run's progress line: "[1]12.3456,[2]...". */
static void print_progress(const run *r, int32_t chunk, const sums *a) {
    if (r->o->json) return;
    if (!r->o->kl) {
        printf("[%d]%.4f,", chunk + 1, exp(a->nll / (double)a->count));
    } else {
        kl_summary k = kl_summarize(a);
        if (chunk == 0)
            printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
                   "Δp RMS            Same top p\n");
        printf("%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
               chunk + 1, k.ppl.val, k.ppl.unc, k.ln_ratio.val, k.ln_ratio.unc, k.kld.val, k.kld.unc,
               100 * k.rms_p_diff.val, 100 * k.rms_p_diff.unc, 100 * k.same_top.val, 100 * k.same_top.unc);
    }
    fflush(stdout);
}

/* Every chunk through the model, scored; base records written or compared. */
static bool evaluate(run *r, sums *a) {
    evaluator *ev = &r->ev;
    size_t len = rec_len(ev->n_vocab), per = (size_t)ev->n_scored;
    uint64_t t0 = ix_time_ns();
    for (int32_t c = 0; c < r->n_chunk; c += ev->n_seq) {
        int32_t n = r->n_chunk - c < ev->n_seq ? r->n_chunk - c : ev->n_seq;
        const ix_token *chunks = r->tokens + (size_t)c * (size_t)r->n_ctx;
        size_t n_rows = (size_t)n * per;
        if (r->o->kl && fread(r->recs, 2 * len, n_rows, r->base) != n_rows) {
            fprintf(stderr, "inferx perplexity: %s: cannot read the records of chunk %d\n", r->o->kl_base, c + 1);
            return false;
        }
        if (!ev_pass(ev, chunks, n)) return false;
        score_job j = {ev, chunks, n_rows, r->base && !r->o->kl ? r->recs : NULL, r->o->kl ? r->recs : NULL,
                       r->rows + (size_t)c * per};
        ix_pool_run(ix_model_ctx_pool(ev->ctx), score_rows, &j);
        if (j.rec_out && fwrite(r->recs, 2 * len, n_rows, r->base) != n_rows) {
            fprintf(stderr, "inferx perplexity: %s: write error\n", r->o->kl_base);
            return false;
        }
        for (int32_t s = 0; s < n; s++) {
            for (size_t i = 0; i < per; i++) sums_add(a, &j.rows[(size_t)s * per + i]);
            r->chunk_ppl[c + s] = exp(a->nll / (double)a->count);
            print_progress(r, c + s, a);
        }
    }
    r->seconds = (double)(ix_time_ns() - t0) * 1e-9;
    return true;
}

/* ---- output ----------------------------------------------------------------------- */

/* A JSON number, or null when it is not finite (jansson refuses those). */
static json_t *jnum(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static void jset_est(json_t *o, const char *key, estimate e) {
    char pm[64];
    snprintf(pm, sizeof pm, "%s_pm", key);
    json_object_set_new(o, key, jnum(e.val));
    json_object_set_new(o, pm, jnum(e.unc));
}

/* The fields both modes print. */
static json_t *json_common(const run *r, const sums *a) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(r->o->model));
    if (r->o->text) json_object_set_new(o, "file", json_string(r->o->text));
    if (r->o->kl_base) json_object_set_new(o, "kl_divergence_base", json_string(r->o->kl_base));
    json_object_set_new(o, "n_ctx", json_integer(r->n_ctx));
    json_object_set_new(o, "kv_cache_dtype", json_string(ix_kv_dtype_name(r->o->kv_dtype)));
    json_object_set_new(o, "n_batch", json_integer(r->ev.n_seq * r->ev.n_step));
    json_object_set_new(o, "n_seq", json_integer(r->ev.n_seq));
    json_object_set_new(o, "chunks", json_integer(r->n_chunk));
    if (r->n_text_tokens) json_object_set_new(o, "tokens", json_integer((json_int_t)r->n_text_tokens));
    json_object_set_new(o, "tokens_scored", json_integer((json_int_t)a->count));
    json_object_set_new(o, "threads", json_integer(ix_pool_n_threads(ix_model_ctx_pool(r->ev.ctx))));
    json_object_set_new(o, "seconds", jnum(r->seconds));
    return o;
}

static void print_json(json_t *o) {
    json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
    printf("\n");
    json_decref(o);
}

static void report_ppl(const run *r, const sums *a) {
    estimate ln = mean_unc(a->nll, a->nll2, a->count, 2), ppl = exp_est(ln);
    if (!r->o->json) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl.val, ppl.unc);
        return;
    }
    json_t *o = json_common(r, a);
    jset_est(o, "ppl", ppl);
    jset_est(o, "ln_ppl", ln);
    json_t *per = json_array();
    for (int32_t i = 0; i < r->n_chunk; i++) json_array_append_new(per, jnum(r->chunk_ppl[i]));
    json_object_set_new(o, "chunk_ppl", per);
    print_json(o);
}

/* Sorted copies of the per-position KL divergences and Δp for percentiles. */
static bool sorted_fields(const run *r, size_t n, double **kld, double **pd) {
    *kld = malloc(n * sizeof **kld);
    *pd = malloc(n * sizeof **pd);
    if (!*kld || !*pd) return false;
    for (size_t i = 0; i < n; i++) {
        (*kld)[i] = r->rows[i].kld;
        (*pd)[i] = r->rows[i].p_diff;
    }
    qsort(*kld, n, sizeof **kld, cmp_double);
    qsort(*pd, n, sizeof **pd, cmp_double);
    return true;
}

static void report_kl_text(const kl_summary *k, const double *kld, const double *pd, size_t n) {
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", k->ppl.val, k->ppl.unc);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", k->ppl_base.val, k->ppl_base.unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * k->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", k->ln_ratio.val, k->ln_ratio.unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", k->ratio.val, k->ratio.unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", k->diff.val, k->diff.unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", k->kld.val, k->kld.unc);
    for (size_t i = 0; i < IX_ARRAY_LEN(k_pcts); i++)
        if (k_pcts[i].kld) printf("%s KLD: %10.6f\n", k_pcts[i].label, percentile(kld, n, k_pcts[i].frac));
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100 * k->p_diff.val, 100 * k->p_diff.unc);
    for (size_t i = 0; i < IX_ARRAY_LEN(k_pcts); i++)
        printf("%s Δp: %6.3f%%\n", k_pcts[i].label, 100 * percentile(pd, n, k_pcts[i].frac));
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100 * k->rms_p_diff.val, 100 * k->rms_p_diff.unc);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100 * k->same_top.val, 100 * k->same_top.unc);
}

static json_t *json_pcts(estimate mean, const double *v, size_t n, bool kld_list) {
    json_t *o = json_object();
    jset_est(o, "mean", mean);
    for (size_t i = 0; i < IX_ARRAY_LEN(k_pcts); i++)
        if (k_pcts[i].kld || !kld_list) json_object_set_new(o, k_pcts[i].key, jnum(percentile(v, n, k_pcts[i].frac)));
    return o;
}

static bool report_kl(const run *r, const sums *a) {
    kl_summary k = kl_summarize(a);
    double *kld = NULL, *pd = NULL;
    bool ok = sorted_fields(r, a->count, &kld, &pd);
    if (!ok) {
        fprintf(stderr, "inferx perplexity: out of memory\n");
    } else if (!r->o->json) {
        /* the reference draws no statistics from fewer than 100 positions */
        if (a->count < 100) printf("\n%zu positions are too few for statistics\n", a->count);
        else report_kl_text(&k, kld, pd, a->count);
    } else {
        json_t *o = json_common(r, a);
        jset_est(o, "ppl", k.ppl);
        jset_est(o, "ln_ppl", k.ln_ppl);
        jset_est(o, "ppl_base", k.ppl_base);
        jset_est(o, "ln_ppl_base", k.ln_ppl_base);
        json_object_set_new(o, "cor_ln_ppl", jnum(k.cor));
        jset_est(o, "ln_ppl_ratio", k.ln_ratio);
        jset_est(o, "ppl_ratio", k.ratio);
        jset_est(o, "ppl_diff", k.diff);
        json_object_set_new(o, "kld", json_pcts(k.kld, kld, a->count, true));
        json_t *p = json_pcts(k.p_diff, pd, a->count, false);
        jset_est(p, "rms", k.rms_p_diff);
        json_object_set_new(o, "p_diff", p);
        jset_est(o, "same_top", k.same_top);
        print_json(o);
    }
    free(kld);
    free(pd);
    return ok;
}

/* ---- the command ----------------------------------------------------------------------- */

static bool prepare(run *r) {
    const ppl_opts *o = r->o;
    if (o->max_chunks && (uint64_t)r->n_chunk > o->max_chunks) r->n_chunk = (int32_t)o->max_chunks;
    if (!ev_open(&r->ev, r->m, r->n_ctx, r->n_chunk, o->n_batch, o->threads, o->kv_dtype)) return false;
    size_t per = (size_t)r->ev.n_scored, len = rec_len(r->ev.n_vocab);
    r->rows = malloc((size_t)r->n_chunk * per * sizeof *r->rows);
    r->chunk_ppl = malloc((size_t)r->n_chunk * sizeof *r->chunk_ppl);
    if (o->kl_base) r->recs = malloc((size_t)r->ev.n_seq * per * len * sizeof *r->recs);
    if (!r->rows || !r->chunk_ppl || (o->kl_base && !r->recs)) {
        fprintf(stderr, "inferx perplexity: out of memory\n");
        return false;
    }
    if (o->kl_base && !o->kl) {
        if (!(r->base = fopen(o->kl_base, "wb")) ||
            !base_write_head(r->base, r->n_ctx, r->ev.n_vocab, r->n_chunk, r->tokens)) {
            fprintf(stderr, "inferx perplexity: cannot write %s: %s\n", o->kl_base, strerror(errno));
            return false;
        }
    }
    fprintf(stderr,
            "inferx perplexity: %s: %d chunks of %d tokens, %d scored in each; %d chunks per pass, %d threads\n",
            o->model, r->n_chunk, r->n_ctx, r->ev.n_scored, r->ev.n_seq,
            ix_pool_n_threads(ix_model_ctx_pool(r->ev.ctx)));
    return true;
}

int ix_cli_perplexity(int argc, char **argv) {
    ppl_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;

    run r = {.o = &o};
    sums a = {0};
    bool ok = false;
    ix_errbuf err = {{0}};
    if (ix_model_load(&r.m, o.model, &err) != IX_OK) fprintf(stderr, "inferx perplexity: %s: %s\n", o.model, err.msg);
    else ok = load_chunks(&r) && prepare(&r) && evaluate(&r, &a);
    if (ok) {
        if (!o.json && !o.kl) printf("\n");
        fflush(stdout);
        fprintf(stderr, "inferx perplexity: %zu positions scored in %.2f s (%.0f tokens/s evaluated)\n", a.count,
                r.seconds, (double)r.n_chunk * r.n_ctx / (r.seconds > 0 ? r.seconds : 1e-9));
        if (o.kl) ok = report_kl(&r, &a);
        else report_ppl(&r, &a);
    }
    if (r.base && fclose(r.base) && ok && !o.kl) {
        fprintf(stderr, "inferx perplexity: %s: write error\n", o.kl_base);
        ok = false;
    }
    if (!ok && o.kl_base && !o.kl && r.base) remove(o.kl_base); /* no half-written base files */
    free(r.rows);
    free(r.chunk_ppl);
    free(r.recs);
    free(r.file_tokens);
    ix_token_vec_free(&r.ids);
    ev_close(&r.ev);
    ix_model_destroy(r.m);
    return ok ? 0 : 1;
}
