/* Test helpers shared by the model tests: a model + KV cache + context
 * ("runner"), greedy generation of several sequences in ragged batches, a
 * loop over every ISA path this CPU runs, and the making of the reference's
 * random models by its generator (../shared/arch/mkarch.py). Include after
 * cmocka.h. */
#ifndef IX_TEST_MODEL_RUNNER_H
#define IX_TEST_MODEL_RUNNER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "inferx/model.h"

#define N_GEN 32
#define MAX_SEQ 8

static ix_token argmax(const float *l, int32_t n) {
    ix_token b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

typedef struct runner {
    ix_model *m;
    ix_kv *kv;
    ix_model_ctx *ctx;
    int32_t n_vocab;
} runner;

/* lp: how the model loads (NULL: ix_model_load's defaults). */
static void runner_open_with(runner *r, const char *path, const ix_model_load_params *lp, ix_kv_dtype kv_type,
                             int32_t max_batch, int n_threads) {
    ix_errbuf err = {{0}};
    ix_model_load_params dp = ix_model_load_default_params();
    if (ix_model_load_ex(&r->m, path, lp ? lp : &dp, &err) != IX_OK) fail_msg("%s: %s", path, err.msg);
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(r->m, &kp);
    kp.dtype = kv_type;
    kp.block_size = 16;
    kp.n_blocks = 512;
    if (ix_kv_create(&kp, &r->kv, &err) != IX_OK) fail_msg("kv: %s", err.msg);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = max_batch;
    cp.n_threads = n_threads;
    if (ix_model_ctx_create(&r->ctx, r->m, r->kv, &cp, &err) != IX_OK) fail_msg("ctx: %s", err.msg);
    r->n_vocab = ix_model_get_hparams(r->m)->n_vocab;
}

static void runner_open(runner *r, const char *path, ix_kv_dtype kv_type, int32_t max_batch, int n_threads) {
    runner_open_with(r, path, NULL, kv_type, max_batch, n_threads);
}

static void runner_close(runner *r) {
    ix_model_ctx_destroy(r->ctx);
    ix_kv_destroy(r->kv);
    ix_model_destroy(r->m);
}

/* Greedy generation for n sequences at once. Each step's batch holds every
 * sequence's next tokens: a prefill chunk of at most `chunk` prompt tokens,
 * or one decode token; sequences start `stagger` steps apart so prefill and
 * decode mix. Writes N_GEN ids per sequence and the logits of the last prompt
 * position to first_logits (n, n_vocab) if not NULL. */
static void run_greedy(runner *r, const ix_token_vec *prompts, int n, int chunk, int stagger,
                       ix_token out[][N_GEN], float *first_logits) {
    int32_t seq[MAX_SEQ], done_prompt[MAX_SEQ] = {0}, n_gen[MAX_SEQ] = {0};
    ix_token last[MAX_SEQ];
    for (int i = 0; i < n; i++) assert_int_equal(ix_kv_seq_create(r->kv, 0, &seq[i]), IX_OK);
    static ix_token toks[512];
    static int32_t pos[512], sq[512];
    static uint8_t outf[512];
    int owner[512];
    float *logits = malloc((size_t)MAX_SEQ * (size_t)r->n_vocab * sizeof(float));
    for (int step = 0;; step++) {
        int32_t T = 0;
        bool any = false;
        for (int i = 0; i < n; i++) {
            if (n_gen[i] >= N_GEN) continue;
            any = true;
            if (step < i * stagger) continue;
            int32_t p0 = ix_kv_seq_n_tokens(r->kv, seq[i]);
            int32_t len = (int32_t)prompts[i].n;
            int32_t k = done_prompt[i] < len ? (len - done_prompt[i] < chunk ? len - done_prompt[i] : chunk) : 1;
            const ix_token *src = done_prompt[i] < len ? prompts[i].ids + done_prompt[i] : &last[i];
            assert_int_equal(ix_kv_seq_append(r->kv, seq[i], k, src), IX_OK);
            for (int32_t j = 0; j < k; j++) {
                toks[T] = src[j];
                pos[T] = p0 + j;
                sq[T] = seq[i];
                outf[T] = 0;
                owner[T] = i;
                T++;
            }
            if (done_prompt[i] < len) done_prompt[i] += k;
            if (done_prompt[i] >= len) outf[T - 1] = 1;
        }
        if (!any) break;
        if (T == 0) continue;
        ix_batch b = {T, toks, pos, sq, outf};
        ix_status s = ix_model_forward(r->ctx, &b, logits);
        if (s != IX_OK) fail_msg("forward: %s", ix_model_ctx_errmsg(r->ctx));
        int row = 0;
        for (int32_t t = 0; t < T; t++) {
            if (!outf[t]) continue;
            int i = owner[t];
            const float *l = logits + (size_t)row++ * (size_t)r->n_vocab;
            if (n_gen[i] == 0 && first_logits)
                memcpy(first_logits + (size_t)i * (size_t)r->n_vocab, l, (size_t)r->n_vocab * sizeof(float));
            last[i] = argmax(l, r->n_vocab);
            out[i][n_gen[i]++] = last[i];
        }
        for (int i = 0; i < n; i++)
            ix_kv_seq_commit(r->kv, seq[i], ix_kv_seq_n_tokens(r->kv, seq[i]));
    }
    for (int i = 0; i < n; i++) assert_int_equal(ix_kv_seq_free(r->kv, seq[i]), IX_OK);
    free(logits);
}

/* Skips the running test, saying why, when why is set (the data is absent). */
static inline void skip_if(const char *why) {
    if (!why) return;
    fprintf(stderr, "skip: %s\n", why);
    skip();
}

static void for_each_isa(void (*fn)(void)) {
    for (int isa = IX_ISA_GENERIC; isa < IX_ISA_COUNT; isa++) {
        if (!ix_cpu_supports((ix_isa)isa)) continue;
        assert_int_equal(ix_cpu_force_isa((ix_isa)isa), IX_OK);
        assert_int_equal(ix_kernels_init(), IX_OK);
        fprintf(stderr, "  isa %s\n", ix_isa_name((ix_isa)isa));
        fn();
    }
}

/* ---- the reference's generated models ------------------------------------------ */
static inline bool run_cmd(const char *cmd, char *out, size_t out_len) {
    FILE *f = popen(cmd, "r");
    if (!f) return false;
    size_t n = out ? fread(out, 1, out_len - 1, f) : 0;
    if (out) out[n] = 0;
    return pclose(f) == 0;
}

/* python3 with numpy, which the generator needs. */
static inline bool have_numpy(void) {
    return run_cmd("(test -x /usr/bin/python3 && /usr/bin/python3 -c 'import numpy' || python3 -c 'import numpy') "
                   "2>/dev/null",
                   NULL, 0);
}

static inline bool sha_matches(const char *path, const char *want) {
    char cmd[1024], out[256];
    snprintf(cmd, sizeof cmd, "sha256sum '%s' 2>/dev/null", path);
    return run_cmd(cmd, out, sizeof out) && strncmp(out, want, 64) == 0;
}

/* Runs the reference's make command (from its reference.json) with OUT_DIR
 * as out_dir and ../shared resolved, from the source root, unless path
 * already has the sha256 the reference lists; fails the test when the made
 * file has another. */
static inline bool make_model(const char *make, const char *out_dir, const char *path, const char *sha) {
    if (sha_matches(path, sha)) return true;
    char cmd[2048] = "cd '" IX_SOURCE_DIR "' && ";
    size_t at = strlen(cmd);
    for (const char *p = make; *p && at < sizeof cmd - 600;) {
        if (!strncmp(p, "OUT_DIR", 7)) {
            at += (size_t)snprintf(cmd + at, sizeof cmd - at, "%s", out_dir);
            p += 7;
        } else if (!strncmp(p, "../shared", 9)) {
            at += (size_t)snprintf(cmd + at, sizeof cmd - at, "%s", IX_SHARED_DIR);
            p += 9;
        } else if (p == make && !strncmp(p, "python3 ", 8)) {
            /* Debian's python3, where scripts/setup installs numpy */
            at += (size_t)snprintf(cmd + at, sizeof cmd - at, "%s ", access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3");
            p += 8;
        } else {
            cmd[at++] = *p++;
        }
    }
    cmd[at] = 0;
    if (!run_cmd(cmd, NULL, 0)) return false;
    if (!sha_matches(path, sha)) fail_msg("%s: sha256 differs from reference.json's", path);
    return true;
}

#endif
