/* constrain_bench: constrained (json_schema) against free decoding through
 * the engine -- the path a server request takes -- in the same run.
 *
 * Each round runs the same requests twice, free and under a JSON Schema,
 * alternating which goes first; both generate exactly max_tokens tokens (the
 * schema asks for at least 40 array items, more than max_tokens can hold, and
 * the free requests ignore EOS). Decode speed is (tokens - 1) / (finish - first
 * token) per request, so prefill is not counted. Two loads: one request alone,
 * and 8 at once (each with its own matcher: 8 masks per step); greedy (the
 * grammar's own cost) and sampled (temperature 0.8, top-p 0.95: there the
 * mask also shrinks the sampler's sort, which can make constrained steps the
 * cheaper ones on a small model). The first
 * constrained round starts with an empty mask cache (cold: the engine had
 * never seen the schema); the medians are over the rounds after it.
 *
 * usage: constrain_bench [-m MODEL.gguf] [-t THREADS] [-n TOKENS] [-r ROUNDS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/engine.h"

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"title\":{\"type\":\"string\",\"maxLength\":40},"
    "\"items\":{\"type\":\"array\",\"minItems\":40,\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":16},\"qty\":{\"type\":\"integer\",\"minimum\":0},"
    "\"unit\":{\"enum\":[\"kg\",\"g\",\"l\",\"piece\"]},\"fresh\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"qty\",\"unit\",\"fresh\"],\"additionalProperties\":false}}},"
    "\"required\":[\"title\",\"items\"],\"additionalProperties\":false}";

static void die(const char *what, const char *msg) {
    fprintf(stderr, "constrain_bench: %s: %s\n", what, msg);
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs n_req requests at once; returns the mean decode tokens/s per request. */
static double run(ix_engine *e, const ix_token_vec *prompt, int n_req, int32_t n_tokens, bool constrained,
                  float temperature, uint64_t seed) {
    ix_request_params reqs[8] = {{0}};
    ix_generation gen[8];
    for (int i = 0; i < n_req; i++) {
        ix_request_params r = ix_request_default_params();
        r.prompt = prompt->ids;
        r.n_prompt = prompt->n;
        r.max_tokens = n_tokens;
        r.ignore_eos = true;
        r.sample.temperature = temperature;
        r.sample.top_p = temperature > 0 ? 0.95f : 1.0f;
        r.sample.seed = seed + (uint64_t)i;
        if (constrained) r.constraint = (ix_constraint){IX_CONSTRAINT_JSON_SCHEMA, k_schema, sizeof k_schema - 1, 0};
        reqs[i] = r;
    }
    ix_errbuf err = {{0}};
    if (ix_engine_generate(e, reqs, (size_t)n_req, gen, &err) != IX_OK) die("generate", err.msg);
    double tps = 0;
    for (int i = 0; i < n_req; i++) {
        const ix_finish_info *fi = &gen[i].info;
        if (fi->reason != IX_FINISH_LENGTH || fi->usage.completion_tokens != n_tokens)
            die("generate", constrained ? "a constrained request ended before max_tokens" : "a request ended early");
        tps += (n_tokens - 1) / ((fi->timings.total_ms - fi->timings.first_token_ms) / 1e3);
        ix_generation_free(&gen[i]);
    }
    return tps / n_req;
}

int main(int argc, char **argv) {
    const char *path = "models/target-f16.gguf";
    int threads = 2, rounds = 5;
    int32_t n_tokens = 64;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "-m")) path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "-t")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-n")) n_tokens = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-r")) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: constrain_bench [-m MODEL.gguf] [-t THREADS] [-n TOKENS (2..200)] [-r ROUNDS (2..50)]\n");
            return 2;
        }
    }
    if (n_tokens < 2 || n_tokens > 200 || rounds < 2 || rounds > 50 || threads < 1) die("arguments", "out of range");
    ix_errbuf err = {{0}};
    ix_model *m;
    if (ix_model_load(&m, path, &err) != IX_OK) die(path, err.msg);
    ix_engine_params ep = ix_engine_default_params();
    ep.n_threads = threads;
    ep.start_thread = false;
    ix_engine *e;
    if (ix_engine_create(&e, m, &ep, &err) != IX_OK) die("engine", err.msg);
    const char *text = "Write the shopping list as JSON:";
    ix_token_vec prompt = {0};
    if (ix_tokenizer_encode(ix_model_tokenizer(m), text, strlen(text), IX_TOK_ADD_SPECIAL, &prompt, &err) != IX_OK)
        die("tokenize", err.msg);
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    printf("constrain_bench: %s (%d layers, vocab %d), %d threads, %d tokens per request, %d rounds "
           "(free and constrained alternated, the order swapped every round)\n",
           path, hp->n_layer, hp->n_vocab, threads, n_tokens, rounds);
    run(e, &prompt, 1, 8, false, 0, 1); /* warm-up: pages, caches */
    static const int loads[] = {1, 8, 1, 8};
    static const float temps[] = {0, 0, 0.8f, 0.8f};
    for (size_t l = 0; l < sizeof loads / sizeof *loads; l++) {
        int n_req = loads[l];
        float temp = temps[l];
        double fr[50], cr[50], cold = 0;
        for (int r = 0; r < rounds; r++) {
            bool constrained_first = r & 1;
            uint64_t seed = 100 + (uint64_t)r;
            if (constrained_first) cr[r] = run(e, &prompt, n_req, n_tokens, true, temp, seed);
            fr[r] = run(e, &prompt, n_req, n_tokens, false, temp, seed);
            if (!constrained_first) cr[r] = run(e, &prompt, n_req, n_tokens, true, temp, seed);
            if (l == 0 && r == 0) cold = cr[0];
        }
        /* round 0 of the first load ran with a cold mask cache: left out */
        int from = l == 0 ? 1 : 0, n = rounds - from;
        qsort(fr + from, (size_t)n, sizeof *fr, cmp_double);
        qsort(cr + from, (size_t)n, sizeof *cr, cmp_double);
        double f = fr[from + n / 2], c = cr[from + n / 2];
        printf("  %s, %d request%s at once: free %7.1f tokens/s per request, json_schema %7.1f (%+.1f%%)",
               temp > 0 ? "sampled" : "greedy ", n_req, n_req > 1 ? "s" : " ", f, c, (f / c - 1) * 100);
        if (l == 0) printf("; first constrained round, cold mask cache: %.1f (%+.1f%%)", cold, (f / cold - 1) * 100);
        printf("\n");
    }
    printf("  (%% = extra time per token of constrained decoding: free / constrained - 1, medians)\n");
    ix_token_vec_free(&prompt);
    ix_engine_destroy(e);
    ix_model_destroy(m);
    return 0;
}
