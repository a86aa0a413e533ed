/*
 * spec_bench: speculative decoding against speculation off, in the same run.
 *
 * Two engines on one model -- one without speculation, one with the chosen
 * proposer -- generate the same B greedy requests (N tokens each, EOS
 * ignored) in alternation, -r times (the order flips every repetition: the
 * machine is shared and noisy). Printed: each mode's median output tokens/s,
 * the median of the per-repetition ratios, whether every output token was
 * identical, and the measured acceptance: alpha (accepted / verified draft
 * tokens), tokens per speculating decode, and the ideal speedup
 * (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)) at the proposer's cost ratio
 * c (0 for ngram: a lookup costs microseconds next to a forward pass).
 *
 *   spec_bench [-m MODEL] [--prompts repeat|prose] [-b B] [-n N] [-k K]
 *              [--adaptive] [-r REPS] [-t THREADS]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/engine.h"

/* Prompts whose continuation appears in the prompt (where prompt lookup
 * pays): code to extend in the pattern it shows, a list to continue, text
 * to repeat. */
static const char *const k_repeat[] = {
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
    "Rewrite with type hints:\n\ndef add(a: int, b: int) -> int:\n    return a + b\n\ndef sub(",
    "one two three four five six seven eight nine ten one two three four five six seven eight nine ten one two",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. Again: It is a truth universally acknowledged, that a single man in possession of a good",
    "<li>apple</li>\n<li>banana</li>\n<li>cherry</li>\n<li>apple</li>\n<li>banana</li>\n<li>cherry</li>\n<li>",
};
static const char *const k_prose[] = {
    "It was on this point that she had",
    "Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition,",
    "To Anne herself it was most distressing to",
    "They found Mrs Musgrove and her daughter within",
};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(FILE *f) {
    fprintf(f, "usage: spec_bench [-m MODEL] [--prompts repeat|prose] [-b BATCH] [-n N_NEW] [-k K]\n"
               "                  [--adaptive] [-r REPS] [-t THREADS]\n"
               "Greedy output tokens/s with ngram speculation against speculation off, alternated\n"
               "in one run (defaults: the bundled model, repeat prompts, -b 1 -n 128 -k 4 -r 5;\n"
               "k fixed unless --adaptive).\n");
}

int main(int argc, char **argv) {
    const char *model = IX_SOURCE_DIR "/models/target-f16.gguf", *kind = "repeat";
    int batch = 1, n_new = 128, k = 4, reps = 5, threads = 0;
    bool adaptive = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--adaptive")) {
            adaptive = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--prompts")) kind = v;
        else if (!strcmp(a, "-b")) batch = atoi(v);
        else if (!strcmp(a, "-n")) n_new = atoi(v);
        else if (!strcmp(a, "-k")) k = atoi(v);
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else {
            usage(stderr);
            return 2;
        }
    }
    bool repeat = !strcmp(kind, "repeat");
    if ((!repeat && strcmp(kind, "prose")) || batch < 1 || batch > 256 || n_new < 2 || k < 1 ||
        k > IX_SPEC_MAX_K || reps < 1 || reps > 100) {
        usage(stderr);
        return 2;
    }
    ix_errbuf err = {{0}};
    ix_model *m;
    if (ix_model_load(&m, model, &err) != IX_OK) {
        fprintf(stderr, "spec_bench: %s\n", err.msg);
        return 1;
    }
    const char *const *texts = repeat ? k_repeat : k_prose;
    ix_token_vec prompts[4] = {{0}};
    for (int i = 0; i < 4; i++)
        ix_tokenizer_encode(ix_model_tokenizer(m), texts[i], strlen(texts[i]), IX_TOK_ADD_SPECIAL, &prompts[i],
                            NULL);
    int n_reqs = batch == 1 ? 4 : batch; /* batch 1 runs the 4 prompts in turn */
    ix_request_params *reqs = calloc((size_t)n_reqs, sizeof *reqs);
    ix_generation *g[2] = {calloc((size_t)n_reqs, sizeof(ix_generation)), calloc((size_t)n_reqs, sizeof(ix_generation))};
    double *tps[2] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double))};
    double *ratio = calloc((size_t)reps, sizeof(double));
    ix_engine *e[2] = {NULL, NULL};
    int rc = 1;
    if (!reqs || !g[0] || !g[1] || !tps[0] || !tps[1] || !ratio) goto out;
    for (int i = 0; i < n_reqs; i++) {
        reqs[i] = ix_request_default_params();
        reqs[i].prompt = prompts[i % 4].ids;
        reqs[i].n_prompt = prompts[i % 4].n;
        reqs[i].sample.temperature = 0;
        reqs[i].max_tokens = n_new;
        reqs[i].ignore_eos = true;
    }
    for (int mode = 0; mode < 2; mode++) {
        ix_engine_params p = ix_engine_default_params();
        p.n_threads = threads;
        p.sched.max_num_seqs = batch > 64 ? batch : 64;
        if (mode) {
            p.spec.kind = IX_SPEC_NGRAM;
            p.spec.k = k;
            p.spec.adaptive = adaptive;
        }
        if (ix_engine_create(&e[mode], m, &p, &err) != IX_OK) {
            fprintf(stderr, "spec_bench: %s\n", err.msg);
            goto out;
        }
    }
    bool identical = true;
    ix_engine_stats st0, st1;
    ix_engine_get_stats(e[1], &st0);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up, not counted */
        for (int j = 0; j < 2; j++) {
            int mode = (r & 1) ? 1 - j : j;
            uint64_t t0 = ix_time_ns();
            /* batch 1: each prompt alone, one after another */
            for (int i = 0; i < (batch == 1 ? 4 : 1); i++)
                if (ix_engine_generate(e[mode], reqs + i, batch == 1 ? 1 : (size_t)batch, g[mode] + i, &err) !=
                    IX_OK) {
                    fprintf(stderr, "spec_bench: %s\n", err.msg);
                    goto out;
                }
            double s = (double)(ix_time_ns() - t0) / 1e9;
            if (r >= 0) tps[mode][r] = (double)n_reqs * n_new / s;
        }
        for (int i = 0; i < n_reqs; i++) {
            identical &= g[0][i].tokens[0].n == g[1][i].tokens[0].n &&
                         !memcmp(g[0][i].tokens[0].ids, g[1][i].tokens[0].ids,
                                 g[0][i].tokens[0].n * sizeof(ix_token));
            ix_generation_free(&g[0][i]);
            ix_generation_free(&g[1][i]);
        }
        if (r >= 0) ratio[r] = tps[1][r] / tps[0][r];
        if (r == -1) ix_engine_get_stats(e[1], &st0);
    }
    ix_engine_get_stats(e[1], &st1);
    double drafts = (double)(st1.spec_n_drafts - st0.spec_n_drafts);
    double dtok = (double)(st1.spec_n_draft_tokens - st0.spec_n_draft_tokens);
    double acc = (double)(st1.spec_n_accepted_tokens - st0.spec_n_accepted_tokens);
    double alpha = dtok > 0 ? acc / dtok : 0, kbar = drafts > 0 ? dtok / drafts : 0;
    double ideal = alpha < 1 ? (1 - pow(alpha, kbar + 1)) / (1 - alpha) : kbar + 1;
    double m_off = median(tps[0], reps), m_on = median(tps[1], reps), m_ratio = median(ratio, reps);
    printf("spec_bench: %s, %s prompts, batch %d, %d new tokens, ngram k %d%s, %d reps (+1 warm-up)\n", model, kind,
           batch, n_new, k, adaptive ? " (adaptive)" : "", reps);
    printf("  speculation off (baseline): %8.1f tok/s (median)\n", m_off);
    printf("  ngram speculation:          %8.1f tok/s (median)\n", m_on);
    printf("  speedup: %.2fx (median of per-repetition ratios; min %.2f, max %.2f)\n", m_ratio, ratio[0],
           ratio[reps - 1]);
    printf("  outputs identical: %s\n", identical ? "yes" : "NO");
    printf("  acceptance: alpha %.3f (%.0f of %.0f draft tokens), mean k %.2f over %.0f speculating decodes,\n"
           "  %.2f tokens per speculating decode; ideal (1-a^(k+1))/((1-a)(1+k c)) at c = 0: %.2fx\n",
           alpha, acc, dtok, kbar, drafts, drafts > 0 ? (acc + drafts) / drafts : 0, ideal);
    printf("  accepted by position:");
    for (int j = 0; j < k; j++)
        printf(" %.3f", drafts > 0 ? (double)(st1.spec_accepted_per_pos[j] - st0.spec_accepted_per_pos[j]) / drafts : 0);
    printf("\n");
    rc = identical ? 0 : 1;
out:
    ix_engine_destroy(e[0]);
    ix_engine_destroy(e[1]);
    for (int i = 0; i < 4; i++) ix_token_vec_free(&prompts[i]);
    free(reqs);
    free(g[0]);
    free(g[1]);
    free(tps[0]);
    free(tps[1]);
    free(ratio);
    ix_model_destroy(m);
    return rc;
}
