/*
 * inferx bench --spec: speculative decoding against speculation off, in the
 * same run.
 *
 * Two engines on one model -- one without speculation, one with the chosen
 * proposer (ngram, draft with --draft-model, medusa with --medusa) -- generate the same B
 * greedy requests (N tokens each, EOS ignored) in alternation, -r times, the
 * order flipping every repetition (the machine is shared and noisy).
 * Printed: each mode's median output tokens/s, the median of the
 * per-repetition ratios, at batch 1 the same for decode alone (each request's
 * first token to its last), whether every output token was identical, and the
 * measured acceptance: alpha (accepted / verified guesses), tokens per
 * speculating decode, acceptance by position, the proposer's cost ratio c
 * (a draft forward pass, or the Medusa heads' work per guess, against a
 * target step without speculation) and the
 * ideal speedup (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)) they imply.
 *
 * Prompt sets: repeat (continuations that appear in the prompt: code to
 * extend, a list, text to repeat), prose (openings of paragraphs), echo
 * (each prose prompt, the model's own greedy continuation of it, and the
 * prompt again: what prompt lookup meets when a model is asked to repeat
 * or edit its earlier answer, on any model).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/engine.h"

#define N_PROMPTS 4

static const char *const k_repeat[N_PROMPTS] = {
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\n"
    "Rewrite with type hints:\n\ndef add(a: int, b: int) -> int:\n    return a + b\n\ndef sub(",
    "one two three four five six seven eight nine ten one two three four five six seven eight nine ten one two",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
    "of a wife. Again: It is a truth universally acknowledged, that a single man in possession of a good",
    "<li>apple</li>\n<li>banana</li>\n<li>cherry</li>\n<li>apple</li>\n<li>banana</li>\n<li>cherry</li>\n<li>",
};
static const char *const k_prose[N_PROMPTS] = {
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

static void usage(FILE *f, const ix_cli_opt *opts, size_t n_opts) {
    fprintf(f, "usage: inferx bench --spec [ngram|draft|medusa] [-m MODEL.gguf] [--draft-model FILE]\n"
               "                    [--medusa HEADS.gguf] [--prompts repeat|prose|echo] [--batch B]\n"
               "                    [-n N] [--spec-k K]\n"
               "                    [--spec-adaptive on|off] [-r REPS] [-t THREADS]\n"
               "\n"
               "Greedy output tokens/s with speculation against speculation off, alternated in\n"
               "one run (the median of -r repetitions after a warm-up), the outputs compared\n"
               "token for token, and the measured acceptance, cost ratio and ideal speedup.\n"
               "At batch 1 the prompts run one after another, and decode alone (each\n"
               "request's first token to its last) is reported too; above, all B requests\n"
               "at once.\n"
               "--spec alone means ngram, or draft when --draft-model is given, or medusa\n"
               "when --medusa is given (k then at most its heads); k is fixed\n"
               "(--spec-adaptive off) unless --spec-adaptive on.\n"
               "\n");
    ix_cli_print_opts(f, opts, n_opts);
    fprintf(f, "  -h, --help                   show this help\n");
}

/* The echo prompts: text + its greedy continuation of n_new tokens + text. */
static bool make_echo(ix_engine *e, ix_token_vec *prompts, int32_t n_new, ix_errbuf *err) {
    for (int i = 0; i < N_PROMPTS; i++) {
        ix_request_params r = ix_request_default_params();
        r.prompt = prompts[i].ids;
        r.n_prompt = prompts[i].n;
        r.sample.temperature = 0;
        r.max_tokens = n_new;
        r.ignore_eos = true;
        ix_generation g;
        if (ix_engine_generate(e, &r, 1, &g, err) != IX_OK) return false;
        size_t n0 = prompts[i].n;
        bool ok = true;
        for (size_t j = 0; j < g.tokens[0].n && ok; j++) ok = ix_token_vec_push(&prompts[i], g.tokens[0].ids[j]) == IX_OK;
        for (size_t j = 1; j < n0 && ok; j++) /* the prompt again, without its BOS */
            ok = ix_token_vec_push(&prompts[i], prompts[i].ids[j]) == IX_OK;
        ix_generation_free(&g);
        if (!ok) return false;
    }
    return true;
}

typedef struct spec_run {
    double *tps[2], *ratio; /* (reps) */
    /* batch 1: decode alone, each request's first token to its last (the
     * prefill out; a draft's own prefill, after that first token, in) */
    double *dtps[2], *dratio; /* (reps) */
    bool identical;
    ix_engine_stats st0[2], st1[2]; /* after the warm-up, at the end */
} spec_run;

/* Alternates the two engines over the requests reps + 1 times (the first a
 * warm-up). */
static bool alternate(ix_engine **e, const ix_request_params *reqs, int n_reqs, int batch, int32_t n_new, int reps,
                      spec_run *sr, ix_errbuf *err) {
    ix_generation *g[2] = {calloc((size_t)n_reqs, sizeof(ix_generation)), calloc((size_t)n_reqs, sizeof(ix_generation))};
    bool ok = g[0] && g[1];
    sr->identical = true;
    for (int r = -1; r < reps && ok; r++) {
        for (int j = 0; j < 2 && ok; j++) {
            int mode = (r & 1) ? 1 - j : j;
            uint64_t t0 = ix_time_ns();
            for (int i = 0; i < (batch == 1 ? n_reqs : 1) && ok; i++)
                ok = ix_engine_generate(e[mode], reqs + i, batch == 1 ? 1 : (size_t)n_reqs, g[mode] + i, err) == IX_OK;
            double s = (double)(ix_time_ns() - t0) / 1e9;
            if (r >= 0) sr->tps[mode][r] = (double)n_reqs * n_new / s;
            double ds = 0;
            for (int i = 0; i < n_reqs && ok && batch == 1; i++)
                ds += (g[mode][i].info.timings.total_ms - g[mode][i].info.timings.first_token_ms) / 1e3;
            if (r >= 0) sr->dtps[mode][r] = ds > 0 ? (double)n_reqs * (n_new - 1) / ds : 0;
        }
        for (int i = 0; i < n_reqs; i++) {
            sr->identical &= g[0][i].tokens[0].n == g[1][i].tokens[0].n &&
                             !memcmp(g[0][i].tokens[0].ids, g[1][i].tokens[0].ids,
                                     g[0][i].tokens[0].n * sizeof(ix_token));
            ix_generation_free(&g[0][i]);
            ix_generation_free(&g[1][i]);
        }
        if (r >= 0) sr->ratio[r] = sr->tps[1][r] / sr->tps[0][r];
        if (r >= 0) sr->dratio[r] = sr->dtps[0][r] > 0 ? sr->dtps[1][r] / sr->dtps[0][r] : 0;
        if (r == -1)
            for (int m = 0; m < 2; m++) ix_engine_get_stats(e[m], &sr->st0[m]);
    }
    for (int m = 0; m < 2; m++) ix_engine_get_stats(e[m], &sr->st1[m]);
    free(g[0]);
    free(g[1]);
    return ok;
}

/* Where a step's time went in one mode (between the warm-up and the end):
 * per step, planning (with the proposer's passes), the forward pass by
 * stage, sampling and verification. */
static void print_profile(const char *what, const ix_engine_stats *a, const ix_engine_stats *b) {
    double n = (double)(b->n_steps - a->n_steps);
    if (n <= 0) return;
#define PER_STEP(f) ((double)(b->f - a->f) / n / 1e6)
    printf("  %-9s per step (ms): plan %.3f (draft passes %.3f), forward %.3f (matmuls %.3f, attention %.3f, "
           "rows %.3f, output head %.3f), sample %.3f; %.2f tokens per step\n",
           what, PER_STEP(plan_ns), PER_STEP(spec_draft_forward_ns), PER_STEP(forward_ns), PER_STEP(forward.matmul_ns),
           PER_STEP(forward.attention_ns), PER_STEP(forward.rows_ns), PER_STEP(forward.output_ns), PER_STEP(sample_ns),
           (double)(b->forward.n_tokens - a->forward.n_tokens) / n);
#undef PER_STEP
}

static void report(const spec_run *sr, const char *model, const char *prompts, int batch, int32_t n_new,
                   const ix_spec_params *sp, int reps) {
    const ix_engine_stats *a = &sr->st0[1], *b = &sr->st1[1];
    double drafts = (double)(b->spec_n_drafts - a->spec_n_drafts);
    double dtok = (double)(b->spec_n_draft_tokens - a->spec_n_draft_tokens);
    double acc = (double)(b->spec_n_accepted_tokens - a->spec_n_accepted_tokens);
    double alpha = dtok > 0 ? acc / dtok : 0, kbar = drafts > 0 ? dtok / drafts : 0;
    /* c: a draft pass (about kbar per speculating decode) against a target
     * step of the engine without speculation */
    double off_steps = (double)(sr->st1[0].n_steps - sr->st0[0].n_steps);
    double off_step_ns = off_steps > 0 ? (double)(sr->st1[0].forward_ns - sr->st0[0].forward_ns) / off_steps : 0;
    double draft_ns = (double)(b->spec_draft_forward_ns - a->spec_draft_forward_ns);
    double c = drafts > 0 && off_step_ns > 0 ? draft_ns / (drafts * kbar) / off_step_ns : 0;
    double gain = alpha < 1 ? (1 - pow(alpha, kbar + 1)) / (1 - alpha) : kbar + 1;
    double ideal = gain / (1 + kbar * c);
    double ratio[100]; /* reps <= 100 */
    memcpy(ratio, sr->ratio, (size_t)reps * sizeof *ratio);
    double t0[100], t1[100];
    memcpy(t0, sr->tps[0], (size_t)reps * sizeof *t0);
    memcpy(t1, sr->tps[1], (size_t)reps * sizeof *t1);
    double m_ratio = median(ratio, reps), d_ratio = 0;
    printf("inferx bench --spec: %s, %s prompts, batch %d, %d new tokens, %s k %d%s, %d reps (+1 warm-up)\n", model,
           prompts, batch, n_new, ix_spec_kind_name(sp->kind), sp->k, sp->adaptive ? " (adaptive)" : " (fixed)", reps);
    printf("  speculation off (baseline): %8.2f tok/s (median)\n", median(t0, reps));
    printf("  %-6s speculation:          %8.2f tok/s (median)\n", ix_spec_kind_name(sp->kind), median(t1, reps));
    printf("  speedup: %.2fx (median of per-repetition ratios; min %.2f, max %.2f)\n", m_ratio, ratio[0],
           ratio[reps - 1]);
    if (batch == 1 && n_new > 1) {
        double d0[100], d1[100], dr[100];
        memcpy(d0, sr->dtps[0], (size_t)reps * sizeof *d0);
        memcpy(d1, sr->dtps[1], (size_t)reps * sizeof *d1);
        memcpy(dr, sr->dratio, (size_t)reps * sizeof *dr);
        double m_dr = median(dr, reps);
        printf("  decode alone (each request's first token to its last): off %.2f, %s %.2f tok/s (medians),\n"
               "  speedup %.2fx (min %.2f, max %.2f)\n",
               median(d0, reps), ix_spec_kind_name(sp->kind), median(d1, reps), m_dr, dr[0], dr[reps - 1]);
        d_ratio = m_dr;
    }
    printf("  outputs identical: %s\n", sr->identical ? "yes" : "NO");
    printf("  acceptance: alpha %.3f (%.0f of %.0f guesses), mean k %.2f over %.0f speculating decodes,\n"
           "  %.2f tokens per speculating decode\n",
           alpha, acc, dtok, kbar, drafts, drafts > 0 ? (acc + drafts) / drafts : 0);
    printf("  cost ratio c = %.3f (a proposer pass per guess %.2f ms, a target step without speculation %.2f ms)\n", c,
           drafts > 0 && kbar > 0 ? draft_ns / (drafts * kbar) / 1e6 : 0.0, off_step_ns / 1e6);
    printf("  ideal (1-a^(k+1))/((1-a)(1+k c)) = %.2fx; measured / ideal = %.0f%%", ideal,
           ideal > 0 ? 100.0 * m_ratio / ideal : 0.0);
    if (d_ratio > 0) printf(" (decode alone: %.0f%%)", ideal > 0 ? 100.0 * d_ratio / ideal : 0.0);
    printf("\n");
    print_profile("off:", &sr->st0[0], &sr->st1[0]);
    print_profile("spec:", &sr->st0[1], &sr->st1[1]);
    printf("  accepted by position:");
    for (int j = 0; j < sp->k; j++)
        printf(" %.3f", drafts > 0 ? (double)(b->spec_accepted_per_pos[j] - a->spec_accepted_per_pos[j]) / drafts : 0);
    printf("\n");
}

/* `--spec` with no kind after it (the mode flag) is dropped from argv. */
static int drop_bare_spec(int argc, char **argv, char **out) {
    int n = 0;
    for (int i = 0; i < argc; i++) {
        bool bare = !strcmp(argv[i], "--spec") && (i + 1 == argc || argv[i + 1][0] == '-');
        if (!bare) out[n++] = argv[i];
    }
    return n;
}

int ix_cli_bench_spec(int argc, char **argv) {
    const char *model = ix_cli_default_model(), *prompt_set = "repeat";
    uint64_t batch = 1, n_new = 64, reps = 5, threads = 0;
    ix_spec_params sp = ix_spec_default_params();
    sp.adaptive = false;
    const ix_cli_opt opts[] = {
        {"--model", "-m", "FILE", "GGUF model (the target)", IX_CLI_OPT_STR, &model, 0, 0, true, NULL},
        {"--prompts", NULL, "SET", "repeat, prose or echo (see above; default repeat)", IX_CLI_OPT_STR, &prompt_set, 0,
         0, true, NULL},
        {"--batch", "-b", "B", "requests at once (1: the 4 prompts one after another)", IX_CLI_OPT_U64, &batch, 1, 256,
         true, NULL},
        {"--n-gen", "-n", "N", "tokens generated per request (default 64)", IX_CLI_OPT_U64, &n_new, 2, 100000, true,
         NULL},
        {"--reps", "-r", "N", "repetitions; medians are reported (default 5)", IX_CLI_OPT_U64, &reps, 1, 100, true,
         NULL},
        {"--threads", "-t", "N", "kernel threads (default: all cores)", IX_CLI_OPT_U64, &threads, 0, 1024, false, NULL},
        IX_CLI_SPEC_OPTS(&sp),
    };
    char **args = malloc((size_t)(argc + 1) * sizeof *args);
    if (!args) return 1;
    int n_args = drop_bare_spec(argc, argv, args);
    int prc = ix_cli_parse_opts("bench", opts, IX_ARRAY_LEN(opts), n_args, args);
    free(args);
    if (prc == IX_CLI_HELP) usage(stdout, opts, IX_ARRAY_LEN(opts));
    if (prc != IX_CLI_OK) return prc == IX_CLI_HELP ? 0 : 2;
    ix_cli_spec_resolve(&sp);
    if (sp.kind == IX_SPEC_NONE) sp.kind = IX_SPEC_NGRAM;
    bool echo = !strcmp(prompt_set, "echo"), repeat = !strcmp(prompt_set, "repeat");
    if (!echo && !repeat && strcmp(prompt_set, "prose")) {
        fprintf(stderr, "inferx bench: --prompts expects repeat, prose or echo\n");
        return 2;
    }
    ix_errbuf err = {{0}};
    ix_model *m;
    if (ix_model_load(&m, model, &err) != IX_OK) {
        fprintf(stderr, "inferx bench: %s: %s\n", model, err.msg);
        return 1;
    }
    const char *const *texts = repeat ? k_repeat : k_prose;
    ix_token_vec prompts[N_PROMPTS] = {{0}};
    int n_reqs = batch == 1 ? N_PROMPTS : (int)batch, rc = 1;
    ix_request_params *reqs = calloc((size_t)n_reqs, sizeof *reqs);
    spec_run sr = {{calloc(reps, sizeof(double)), calloc(reps, sizeof(double))},
                   calloc(reps, sizeof(double)),
                   {calloc(reps, sizeof(double)), calloc(reps, sizeof(double))},
                   calloc(reps, sizeof(double)),
                   true,
                   {{0}},
                   {{0}}};
    ix_engine *e[2] = {NULL, NULL};
    if (!reqs || !sr.tps[0] || !sr.tps[1] || !sr.ratio || !sr.dtps[0] || !sr.dtps[1] || !sr.dratio) goto out;
    for (int i = 0; i < N_PROMPTS; i++)
        ix_tokenizer_encode(ix_model_tokenizer(m), texts[i], strlen(texts[i]), IX_TOK_ADD_SPECIAL, &prompts[i], NULL);
    for (int mode = 0; mode < 2; mode++) {
        ix_engine_params p = ix_engine_default_params();
        p.n_threads = (int32_t)threads;
        p.sched.max_num_seqs = batch > 64 ? (int32_t)batch : 64;
        p.enable_prefix_cache = false; /* each repetition computes its prompts, in both modes */
        p.start_thread = false;        /* stepped on this thread: no hand-off between threads in the figure */
        if (mode) p.spec = sp;
        if (ix_engine_create(&e[mode], m, &p, &err) != IX_OK) {
            fprintf(stderr, "inferx bench: engine: %s\n", err.msg);
            goto out;
        }
    }
    if (echo && !make_echo(e[0], prompts, (int32_t)n_new, &err)) {
        fprintf(stderr, "inferx bench: echo prompts: %s\n", err.msg);
        goto out;
    }
    for (int i = 0; i < n_reqs; i++) {
        reqs[i] = ix_request_default_params();
        reqs[i].prompt = prompts[i % N_PROMPTS].ids;
        reqs[i].n_prompt = prompts[i % N_PROMPTS].n;
        reqs[i].sample.temperature = 0;
        reqs[i].max_tokens = (int32_t)n_new;
        reqs[i].ignore_eos = true;
    }
    if (!alternate(e, reqs, n_reqs, (int)batch, (int32_t)n_new, (int)reps, &sr, &err)) {
        fprintf(stderr, "inferx bench: %s\n", err.msg);
        goto out;
    }
    sp.k = ix_engine_get_params(e[1]).spec.k; /* as the engine capped it (medusa: its heads) */
    report(&sr, model, prompt_set, (int)batch, (int32_t)n_new, &sp, (int)reps);
    rc = sr.identical ? 0 : 1;
out:
    ix_engine_destroy(e[0]);
    ix_engine_destroy(e[1]);
    for (int i = 0; i < N_PROMPTS; i++) ix_token_vec_free(&prompts[i]);
    free(reqs);
    free(sr.tps[0]);
    free(sr.tps[1]);
    free(sr.ratio);
    free(sr.dtps[0]);
    free(sr.dtps[1]);
    free(sr.dratio);
    ix_model_destroy(m);
    return rc;
}
