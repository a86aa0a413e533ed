/*
 * grammar_bench: what constrained decoding costs per step.
 *
 *   1. Mask time per step (ix_grammar_matcher_fill_mask) while documents valid
 *      under a JSON schema are generated token by token: fixed target
 *      documents (pretty and compact, tokenized by the vocabulary's own
 *      tokenizer: the tokens a model would pick) with a cold cache and then
 *      warm, and random walks over the allowed tokens (the adversarial case:
 *      odd tokens, odd states).
 *   2. The sampler with and without the mask on a row of random logits (the
 *      free step's own sampling cost is the baseline).
 *   3. With -m MODEL: decode tokens/s free and constrained in the same run
 *      (the model's logits, the mask, masked sampling, the matcher advanced),
 *      alternated, and the difference per step.
 *
 * usage: grammar_bench [-v VOCAB.gguf] [-m MODEL.gguf] [-t THREADS] [-n STEPS]
 *                      [-s SCHEMA.json]
 * Default vocabulary: ../shared/vocab/ggml-vocab-gpt-2.gguf (50257 tokens).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_test_util.h"
#include "inferx/grammar.h"
#include "inferx/kv.h"
#include "inferx/model.h"
#include "inferx/sample.h"
#include "inferx/tokenizer.h"

static const char k_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"active\":{\"type\":\"boolean\"},"
    "\"role\":{\"type\":\"string\",\"enum\":[\"admin\",\"user\",\"guest\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"street\",\"city\",\"zip\"],\"additionalProperties\":false},"
    "\"scores\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}},"
    "\"manager\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"string\"}]}},"
    "\"required\":[\"name\",\"age\",\"email\",\"active\",\"role\",\"tags\",\"address\",\"scores\","
    "\"manager\"],\"additionalProperties\":false}";

/* Documents valid under k_schema, as a model might write them. */
static const char *const k_docs[] = {
    "{\n  \"name\": \"Ada Lovelace\",\n  \"age\": 36,\n  \"email\": \"ada@example.com\",\n"
    "  \"active\": true,\n  \"role\": \"admin\",\n  \"tags\": [\"math\", \"engines\"],\n"
    "  \"address\": {\n    \"street\": \"12 St James's Square\",\n    \"city\": \"London\",\n"
    "    \"zip\": \"10001\"\n  },\n  \"scores\": [9.5, 8.25, 10],\n  \"manager\": null\n}",
    "{\"name\": \"Grace Hopper\", \"age\": 85, \"email\": \"grace.hopper@navy.mil\", \"active\": false, "
    "\"role\": \"user\", \"tags\": [\"cobol\", \"compilers\", \"navy\"], \"address\": {\"street\": "
    "\"1 Main Street\", \"city\": \"Arlington\", \"zip\": \"22201\"}, \"scores\": [], \"manager\": "
    "\"Howard Aiken\"}",
    "{\"name\":\"Alan Turing\",\"age\":41,\"email\":\"alan@bletchley.uk\",\"active\":true,"
    "\"role\":\"guest\",\"tags\":[],\"address\":{\"street\":\"Hollymeade\",\"city\":\"Wilmslow\","
    "\"zip\":\"09001\"},\"scores\":[1e3,-0.5],\"manager\":null}",
    "{\n  \"name\": \"Edsger W. Dijkstra\",\n  \"age\": 72,\n  \"email\": \"ewd@utexas.edu\",\n"
    "  \"active\": true,\n  \"role\": \"user\",\n  \"tags\": [\"goto\", \"semaphores\", \"shortest "
    "paths\", \"THE\"],\n  \"address\": {\n    \"street\": \"Plataanstraat 5\",\n    \"city\": "
    "\"Nuenen\",\n    \"zip\": \"56712\"\n  },\n  \"scores\": [3.14159, 2.71828],\n  \"manager\": "
    "\"nobody\"\n}",
};

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct series {
    uint64_t *ns;
    size_t n, cap;
} series;

static void series_add(series *s, uint64_t ns) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->ns = realloc(s->ns, s->cap * sizeof *s->ns);
        if (!s->ns) abort();
    }
    s->ns[s->n++] = ns;
}

static void series_print(const char *what, series *s) {
    if (!s->n) return;
    qsort(s->ns, s->n, sizeof *s->ns, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += (double)s->ns[i];
    printf("  %-34s %6zu steps  mean %8.1f us  p50 %7.1f  p99 %8.1f  max %8.1f\n", what, s->n,
           sum / (double)s->n / 1e3, (double)s->ns[s->n / 2] / 1e3,
           (double)s->ns[(size_t)((double)s->n * 0.99)] / 1e3, (double)s->ns[s->n - 1] / 1e3);
}

static double series_mean_us(const series *s) {
    double sum = 0;
    for (size_t i = 0; i < s->n; i++) sum += (double)s->ns[i];
    return s->n ? sum / (double)s->n / 1e3 : 0;
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "grammar_bench: %s: %s\n", what, msg);
    exit(1);
}

/* Each target document through a clone of tmpl: mask, check, accept. */
static void run_docs(ix_grammar_matcher *tmpl, const ix_tokenizer *tok, uint32_t *mask, size_t nw,
                     series *out) {
    for (size_t d = 0; d < IX_ARRAY_LEN(k_docs); d++) {
        ix_token_vec ids = {0};
        ix_errbuf err = {{0}};
        if (ix_tokenizer_encode(tok, k_docs[d], strlen(k_docs[d]), 0, &ids, &err) != IX_OK)
            die("encode", err.msg);
        ix_grammar_matcher *m;
        if (ix_grammar_matcher_clone(&m, tmpl) != IX_OK) die("clone", "out of memory");
        for (size_t i = 0; i < ids.n; i++) {
            uint64_t t0 = ix_time_ns();
            if (ix_grammar_matcher_fill_mask(m, mask, nw) != IX_OK) die("mask", ix_grammar_matcher_errmsg(m));
            series_add(out, ix_time_ns() - t0);
            if (!(mask[ids.ids[i] >> 5] >> (ids.ids[i] & 31) & 1)) {
                ix_str p = ix_tokenizer_piece(tok, ids.ids[i]);
                fprintf(stderr, "grammar_bench: document %zu token %zu ('%.*s') not allowed\n", d, i,
                        (int)p.len, p.ptr);
                exit(1);
            }
            if (ix_grammar_matcher_accept(m, ids.ids[i]) != IX_OK) die("accept", ix_grammar_matcher_errmsg(m));
        }
        if (!ix_grammar_matcher_can_end(m)) die("document", "incomplete at its end");
        ix_grammar_matcher_destroy(m);
        ix_token_vec_free(&ids);
    }
}

/* ---- decode with a model --------------------------------------------------------- */

typedef struct dec {
    ix_kv *kv;
    ix_model_ctx *ctx;
    int32_t n_vocab;
    float *logits;
} dec;

static void decode_one(dec *d, int32_t seq, ix_token t, int32_t pos) {
    int32_t out_flag_pos = pos;
    uint8_t out = 1;
    if (ix_kv_seq_append(d->kv, seq, 1, &t) != IX_OK) die("kv", ix_kv_errmsg(d->kv));
    ix_batch b = {1, &t, &out_flag_pos, &seq, &out};
    if (ix_model_forward(d->ctx, &b, d->logits) != IX_OK) die("forward", ix_model_ctx_errmsg(d->ctx));
    ix_kv_seq_commit(d->kv, seq, pos + 1);
}

/* n decode steps from an empty sequence; constrained: through a clone of
 * tmpl (restarted when a document completes). Returns ns per step and adds
 * the grammar's share (mask + accept) to *grammar_ns. */
static double decode_run(dec *d, ix_sampler *smp, ix_grammar_matcher *tmpl, uint32_t *mask,
                         size_t nw, int32_t n, uint64_t *grammar_ns) {
    int32_t seq;
    if (ix_kv_seq_create(d->kv, 0, &seq) != IX_OK) die("kv", ix_kv_errmsg(d->kv));
    ix_grammar_matcher *m = NULL;
    if (tmpl && ix_grammar_matcher_clone(&m, tmpl) != IX_OK) die("clone", "out of memory");
    ix_token next = 1;
    uint64_t t0 = ix_time_ns();
    for (int32_t i = 0; i < n; i++) {
        decode_one(d, seq, next, i);
        ix_sample_result r;
        uint64_t g0 = ix_time_ns();
        if (m) {
            if (ix_grammar_matcher_must_end(m)) ix_grammar_matcher_reset(m);
            if (ix_grammar_matcher_fill_mask(m, mask, nw) != IX_OK) die("mask", ix_grammar_matcher_errmsg(m));
            ix_sampler_set_mask(smp, mask);
        }
        uint64_t g1 = ix_time_ns();
        if (ix_sampler_sample(smp, d->logits, &r) != IX_OK) die("sample", "no token allowed");
        uint64_t g2 = ix_time_ns();
        if (m && ix_grammar_matcher_accept(m, r.id) != IX_OK) die("accept", ix_grammar_matcher_errmsg(m));
        if (m) *grammar_ns += (g1 - g0) + (ix_time_ns() - g2);
        ix_sampler_accept(smp, r.id);
        next = r.id;
    }
    double ns = (double)(ix_time_ns() - t0) / n;
    ix_grammar_matcher_destroy(m);
    ix_kv_seq_free(d->kv, seq);
    return ns;
}

static void bench_model(const char *path, int threads, int32_t steps, const char *schema,
                        size_t schema_len) {
    ix_errbuf err = {{0}};
    ix_model *model;
    if (ix_model_load(&model, path, &err) != IX_OK) die(path, err.msg);
    const ix_model_hparams *hp = ix_model_get_hparams(model);
    dec d = {0};
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(model, &kp);
    kp.dtype = IX_KV_F16;
    kp.n_blocks = (steps + kp.block_size - 1) / kp.block_size + 2;
    kp.enable_prefix_cache = false;
    if (ix_kv_create(&kp, &d.kv, &err) != IX_OK) die("kv", err.msg);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = 1;
    cp.n_threads = threads;
    if (ix_model_ctx_create(&d.ctx, model, d.kv, &cp, &err) != IX_OK) die("model", err.msg);
    d.n_vocab = hp->n_vocab;
    d.logits = malloc((size_t)d.n_vocab * sizeof *d.logits);
    ix_grammar *g;
    ix_grammar_vocab *v;
    ix_grammar_matcher *tmpl;
    if (ix_grammar_from_json_schema(&g, schema, schema_len, 0, &err) != IX_OK) die("schema", err.msg);
    if (ix_grammar_vocab_create(&v, ix_model_tokenizer(model), &err) != IX_OK) die("vocab", err.msg);
    if (ix_grammar_matcher_create(&tmpl, g, v, NULL, &err) != IX_OK) die("matcher", err.msg);
    size_t nw = ix_grammar_vocab_mask_words(v);
    uint32_t *mask = malloc(nw * sizeof *mask);
    ix_sample_params sp = ix_sample_default_params();
    sp.temperature = 0.8f;
    sp.top_p = 0.95f;
    ix_sampler *smp;
    if (ix_sampler_create(&smp, &sp, d.n_vocab, &err) != IX_OK) die("sampler", err.msg);
    printf("\ndecode, %s (%d layers, vocab %d), %d threads, %d steps per run, median of 5 "
           "alternated runs after a warm-up:\n",
           path, hp->n_layer, hp->n_vocab, threads, steps);
    uint64_t gns = 0;
    decode_run(&d, smp, NULL, mask, nw, 8, &gns); /* warm-up */
    decode_run(&d, smp, tmpl, mask, nw, steps, &gns);
    double fr[5], cr[5], gr[5];
    for (int r = 0; r < 5; r++) {
        fr[r] = decode_run(&d, smp, NULL, mask, nw, steps, &gns);
        gns = 0;
        cr[r] = decode_run(&d, smp, tmpl, mask, nw, steps, &gns);
        gr[r] = (double)gns / steps;
    }
    qsort(fr, 5, sizeof *fr, cmp_double);
    qsort(cr, 5, sizeof *cr, cmp_double);
    qsort(gr, 5, sizeof *gr, cmp_double);
    printf("  free        %7.2f ms/step  %6.1f tokens/s\n", fr[2] / 1e6, 1e9 / fr[2]);
    printf("  constrained %7.2f ms/step  %6.1f tokens/s  (%+.1f%%; grammar mask + accept %.1f us/step = "
           "%.2f%% of a free step)\n",
           cr[2] / 1e6, 1e9 / cr[2], (cr[2] / fr[2] - 1) * 100, gr[2] / 1e3, gr[2] / fr[2] * 100);
    ix_sampler_destroy(smp);
    free(mask);
    ix_grammar_matcher_destroy(tmpl);
    ix_grammar_vocab_destroy(v);
    ix_grammar_destroy(g);
    free(d.logits);
    ix_model_ctx_destroy(d.ctx);
    ix_kv_destroy(d.kv);
    ix_model_destroy(model);
}

/* ---- main ------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    *len = fread(s, 1, (size_t)n, f);
    s[*len] = '\0';
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    const char *vocab_path = IX_SHARED_DIR "/vocab/ggml-vocab-gpt-2.gguf", *model_path = NULL;
    const char *schema_path = NULL;
    int threads = 2;
    int32_t steps = 64;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "-v")) vocab_path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "-m")) model_path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "-t")) threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-n")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-s")) schema_path = argv[++i];
        else {
            fprintf(stderr, "usage: grammar_bench [-v VOCAB.gguf] [-m MODEL.gguf] [-t THREADS] "
                            "[-n STEPS] [-s SCHEMA.json]\n");
            return 2;
        }
    }
    size_t schema_len = sizeof k_schema - 1;
    const char *schema = k_schema;
    char *schema_buf = NULL;
    if (schema_path && !(schema = schema_buf = read_file(schema_path, &schema_len))) die(schema_path, "cannot read");
    ix_errbuf err = {{0}};
    ix_tokenizer *tok = NULL;
    ix_model *model = NULL;
    if (model_path) {
        if (ix_model_load(&model, model_path, &err) != IX_OK) die(model_path, err.msg);
        vocab_path = model_path;
    } else if (ix_tokenizer_load(&tok, vocab_path, &err) != IX_OK) {
        die(vocab_path, err.msg);
    }
    const ix_tokenizer *t = model ? ix_model_tokenizer(model) : tok;
    int32_t n_vocab = ix_tokenizer_n_vocab(t);

    uint64_t t0 = ix_time_ns();
    ix_grammar_vocab *v;
    if (ix_grammar_vocab_create(&v, t, &err) != IX_OK) die("vocab", err.msg);
    uint64_t t1 = ix_time_ns();
    ix_grammar *g;
    if (ix_grammar_from_json_schema(&g, schema, schema_len, 0, &err) != IX_OK) die("schema", err.msg);
    uint64_t t2 = ix_time_ns();
    printf("grammar_bench: %s, %d tokens (%s); token trie built in %.1f ms; schema of %zu bytes "
           "compiled to %d rules in %.2f ms\n",
           vocab_path, n_vocab, ix_tokenizer_model_name(t), (double)(t1 - t0) / 1e6, schema_len,
           ix_grammar_n_rules(g), (double)(t2 - t1) / 1e6);
    size_t nw = ix_grammar_vocab_mask_words(v);
    uint32_t *mask = malloc(nw * sizeof *mask);

    /* 1. masks while generating */
    printf("\nmask per step (ix_grammar_matcher_fill_mask):\n");
    ix_grammar_matcher *tmpl;
    if (ix_grammar_matcher_create(&tmpl, g, v, NULL, &err) != IX_OK) die("matcher", err.msg);
    series cold = {0}, warm = {0}, walk = {0}, nocache = {0};
    if (!schema_path) {
        run_docs(tmpl, t, mask, nw, &cold);
        run_docs(tmpl, t, mask, nw, &warm);
        series_print("target documents, cold cache", &cold);
        series_print("target documents, warm cache", &warm);
        ix_grammar_matcher_params np = ix_grammar_matcher_default_params();
        np.mask_cache_bytes = 0;
        ix_grammar_matcher *nc;
        if (ix_grammar_matcher_create(&nc, g, v, &np, &err) != IX_OK) die("matcher", err.msg);
        run_docs(nc, t, mask, nw, &nocache);
        run_docs(nc, t, mask, nw, &nocache);
        series_print("target documents, no mask cache", &nocache);
        ix_grammar_matcher_destroy(nc);
    }
    {
        ix_grammar_matcher *wm;
        if (ix_grammar_matcher_create(&wm, g, v, NULL, &err) != IX_OK) die("matcher", err.msg);
        uint64_t rng = 0x9e3779b97f4a7c15ull;
        for (int doc = 0; doc < 8; doc++) {
            ix_grammar_matcher_reset(wm);
            size_t nw2 = nw;
            int64_t taken = 0;
            while (!ix_grammar_matcher_is_finished(wm) && taken < 4096) {
                uint64_t a = ix_time_ns();
                if (ix_grammar_matcher_fill_mask(wm, mask, nw2) != IX_OK) die("mask", ix_grammar_matcher_errmsg(wm));
                series_add(&walk, ix_time_ns() - a);
                ix_token id = gwalk_pick(wm, v, mask, taken >= 48, &rng);
                if (id == IX_TOKEN_NONE) break;
                if (ix_grammar_matcher_accept(wm, id) != IX_OK) die("accept", ix_grammar_matcher_errmsg(wm));
                taken++;
            }
        }
        series_print("random walks (48 free steps, 8 docs)", &walk);
        ix_grammar_matcher_stats st;
        ix_grammar_matcher_get_stats(wm, &st);
        printf("  walks' cache: %lld states, %lld stacks, %.1f MiB, %lld mask hits / %lld misses, "
               "%.0f trie nodes per miss, %lld parse expansions\n",
               (long long)st.n_states, (long long)st.n_stacks, (double)st.cache_bytes / (1 << 20),
               (long long)st.mask_hits, (long long)st.mask_misses,
               st.mask_misses ? (double)st.trie_nodes / (double)st.mask_misses : 0.0, (long long)st.expansions);
        ix_grammar_matcher_destroy(wm);
    }
    if (!schema_path) {
        ix_grammar_matcher_stats st;
        ix_grammar_matcher_get_stats(tmpl, &st);
        printf("  documents' cache: %lld states, %.1f MiB, %lld hits / %lld misses, %lld parse expansions\n",
               (long long)st.n_states, (double)st.cache_bytes / (1 << 20), (long long)st.mask_hits,
               (long long)st.mask_misses, (long long)st.expansions);
    }

    /* 2. the sampler, free and masked, on random logits */
    {
        /* roughly normal logits (sum of four uniforms), std ~2.3 */
        float *logits = malloc((size_t)n_vocab * sizeof *logits);
        uint64_t rng = 42;
        for (int32_t i = 0; i < n_vocab; i++) {
            float x = 0;
            for (int k = 0; k < 4; k++) x += (float)(gwalk_rand(&rng) % 10000) / 10000.0f - 0.5f;
            logits[i] = x * 8.0f;
        }
        ix_grammar_matcher *m;
        if (ix_grammar_matcher_clone(&m, tmpl) != IX_OK) die("clone", "oom");
        ix_grammar_matcher_accept_bytes(m, "{\"name\": \"A", 11); /* inside a string: most tokens allowed */
        ix_grammar_matcher_fill_mask(m, mask, nw);
        ix_sample_params sp = ix_sample_default_params();
        ix_sampler *smp;
        if (ix_sampler_create(&smp, &sp, n_vocab, &err) != IX_OK) die("sampler", err.msg);
        ix_sample_result r;
        series fs = {0}, ms = {0};
        for (int rep = 0; rep < 200; rep++) {
            uint64_t a = ix_time_ns();
            ix_sampler_sample(smp, logits, &r);
            uint64_t b = ix_time_ns();
            ix_sampler_set_mask(smp, mask);
            ix_sampler_sample(smp, logits, &r);
            uint64_t c = ix_time_ns();
            series_add(&fs, b - a);
            series_add(&ms, c - b);
        }
        printf("\nsampler (temperature 1, %d logits):\n", n_vocab);
        series_print("free", &fs);
        series_print("with a mask (inside a string)", &ms);
        double cold_us = series_mean_us(&cold), warm_us = series_mean_us(&warm);
        printf("  against a TinyLlama-1.1B Q4_0 decode step (~10600 us on the reference 2-vCPU machine, "
               "docs/performance.md; -m measures one here): mask %.1f us mean with a cold cache (%.2f%%), "
               "%.1f us warm (%.3f%%); masked minus free sampling %+.0f us (noise level)\n",
               cold_us, cold_us / 10600 * 100, warm_us, warm_us / 10600 * 100,
               series_mean_us(&ms) - series_mean_us(&fs));
        free(fs.ns);
        free(ms.ns);
        ix_sampler_destroy(smp);
        ix_grammar_matcher_destroy(m);
        free(logits);
    }
    free(cold.ns);
    free(warm.ns);
    free(walk.ns);
    free(nocache.ns);
    ix_grammar_matcher_destroy(tmpl);
    free(mask);
    ix_grammar_vocab_destroy(v);
    ix_grammar_destroy(g);
    ix_tokenizer_destroy(tok);
    if (model) {
        ix_model_destroy(model);
        bench_model(model_path, threads, steps, schema, schema_len);
    }
    free(schema_buf);
    return 0;
}
