/*
 * hidden_bench: what keeping the final-norm hidden state beside the logits
 * (ix_model_forward_out with a hidden buffer, what the Medusa proposer asks
 * for) costs a decode pass, against the same pass without it (hidden NULL:
 * the path of every engine without a proposer that wants it), alternated in
 * one run. A decode pass of B sequences at one position each, repeated at
 * the same positions (the K/V slots are rewritten with the same values).
 *
 *   hidden_bench [MODEL.gguf] [-b B] [-r REPS] [-n PASSES] [-t THREADS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/model.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *path = IX_SOURCE_DIR "/models/target-f16.gguf";
    int B = 1, reps = 9, passes = 20, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-b") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) passes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (argv[i][0] != '-') path = argv[i];
        else {
            fprintf(stderr, "usage: hidden_bench [MODEL.gguf] [-b B] [-r REPS] [-n PASSES] [-t THREADS]\n");
            return 2;
        }
    }
    if (B < 1 || B > 256 || reps < 1 || reps > 99 || passes < 1) {
        fprintf(stderr, "hidden_bench: -b 1..256, -r 1..99, -n >= 1\n");
        return 2;
    }
    ix_errbuf err = {{0}};
    ix_model *m;
    if (ix_model_load(&m, path, &err) != IX_OK) {
        fprintf(stderr, "hidden_bench: %s: %s\n", path, err.msg);
        return 1;
    }
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    enum { POS = 32 };
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.n_blocks = B * ((POS + kp.block_size) / kp.block_size + 1);
    kp.enable_prefix_cache = false;
    ix_kv *kv = NULL;
    ix_model_ctx *ctx = NULL;
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = B * (POS + 1);
    cp.n_threads = threads;
    size_t T = (size_t)B * (POS + 1);
    ix_token *tok = calloc(T, sizeof *tok);
    int32_t *pos = calloc(T, sizeof *pos), *seq = calloc(T, sizeof *seq);
    uint8_t *out = calloc(T, 1);
    float *logits = malloc((size_t)B * (size_t)hp->n_vocab * sizeof *logits);
    float *hidden = malloc((size_t)B * (size_t)hp->n_embd * sizeof *hidden);
    double *t[2] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double))};
    int rc = 1;
    if (!tok || !pos || !seq || !out || !logits || !hidden || !t[0] || !t[1] ||
        ix_kv_create(&kp, &kv, &err) != IX_OK || ix_model_ctx_create(&ctx, m, kv, &cp, &err) != IX_OK) {
        fprintf(stderr, "hidden_bench: %s\n", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    /* B sequences of POS prompt tokens + the one position every pass decodes */
    for (int b = 0; b < B; b++) {
        int32_t s;
        if (ix_kv_seq_create(kv, 0, &s) != IX_OK || ix_kv_seq_append(kv, s, POS + 1, NULL) != IX_OK) goto out;
        for (int j = 0; j <= POS; j++) {
            size_t k = (size_t)b * (POS + 1) + (size_t)j;
            tok[k] = 10 + (ix_token)((b * 7 + j * 13) % 200);
            pos[k] = j;
            seq[k] = s;
            out[k] = j == POS;
        }
    }
    ix_batch all = {(int32_t)(B * POS + B), tok, pos, seq, out};
    if (ix_model_forward(ctx, &all, logits) != IX_OK) goto out;
    /* the decode pass: each sequence's last position */
    for (int b = 0; b < B; b++) {
        size_t k = (size_t)b * (POS + 1) + POS;
        tok[b] = tok[k], pos[b] = POS, seq[b] = seq[k], out[b] = 1;
    }
    ix_batch dec = {B, tok, pos, seq, out};
    for (int r = -1; r < reps; r++)
        for (int j = 0; j < 2; j++) {
            int mode = (r & 1) ? 1 - j : j; /* the order flips every repetition */
            uint64_t t0 = ix_time_ns();
            for (int p = 0; p < passes; p++)
                if (ix_model_forward_out(ctx, &dec, logits, mode ? hidden : NULL) != IX_OK) goto out;
            if (r >= 0) t[mode][r] = (double)(ix_time_ns() - t0) / 1e6 / passes;
        }
    double ratio[99];
    for (int r = 0; r < reps; r++) ratio[r] = t[1][r] / t[0][r];
    qsort(t[0], (size_t)reps, sizeof(double), cmp_double);
    qsort(t[1], (size_t)reps, sizeof(double), cmp_double);
    qsort(ratio, (size_t)reps, sizeof(double), cmp_double);
    printf("hidden_bench: %s, decode pass of %d sequence(s), %d reps x %d passes, %d threads\n", path, B, reps, passes,
           threads);
    printf("  logits only (baseline):   %.3f ms per pass (median)\n", t[0][reps / 2]);
    printf("  logits + hidden states:   %.3f ms per pass (median)\n", t[1][reps / 2]);
    printf("  ratio: %.3f (median of per-repetition ratios; min %.3f, max %.3f)\n", ratio[reps / 2], ratio[0],
           ratio[reps - 1]);
    rc = 0;
out:
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    ix_model_destroy(m);
    free(tok), free(pos), free(seq), free(out), free(logits), free(hidden), free(t[0]), free(t[1]);
    return rc;
}
