/* inferx bench --throughput: serving throughput of the continuous-batching
 * engine, modelled on `vllm bench throughput`. Random-token prompts (seeded)
 * are submitted all at once with at most C in flight; then the same prompts run
 * one at a time on the same engine, and the ratio of the two is printed; and
 * the same prompts once more with one output token each (pure prefill), the
 * rate a batched step's tokens are measured against, with where the
 * concurrent run's engine time went. With several --kv-cache-dtype values it
 * instead runs the concurrent pass once per KV type in the same --kv-cache-mem
 * (the first type is the baseline): how many blocks and whole sequences the
 * pool holds, how many ran at once, preemptions and tokens/s. */
#include <stdatomic.h>
#include <time.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/engine.h"

static void usage(FILE *f, const ix_cli_opt *opts, size_t n_opts) {
    fprintf(f,
            "usage: inferx bench --throughput [-m MODEL.gguf] [--num-prompts N] [--max-concurrency C]\n"
            "                    [--input-len I] [--output-len O] [-t THREADS] [--seed S] [--json]\n"
            "                    [--kv-cache-dtype T[,T...] --kv-cache-mem BYTES]\n"
            "\n"
            "Serving throughput of the continuous-batching engine: N random-token prompts of I\n"
            "tokens, each generating exactly O tokens, all submitted at once with at most C in\n"
            "flight; then the same prompts one at a time, and the ratio of the two. Then the\n"
            "same prompts with one output token each (pure prefill, in steps of the cap): the\n"
            "concurrent run's total tokens/s against that rate, and where its engine time\n"
            "went (planning, the forward pass by stage, sampling and streaming).\n"
            "\n"
            "KV cache types: with a list (--kv-cache-dtype f16,q8_0 --kv-cache-mem 2M) each\n"
            "type runs the concurrent pass in turn in the same KV memory, the first as the\n"
            "baseline: blocks and whole sequences of I + O tokens the pool holds, the most\n"
            "sequences running at once, preemptions, output tokens/s.\n"
            "\n");
    ix_cli_print_opts(f, opts, n_opts);
    fprintf(f, "  -h, --help                   show this help\n");
}

typedef struct run_stats {
    double wall_s;
    double *ttft_ms, *tpot_ms; /* (n) */
    int n_done, n_failed;
    uint64_t out_tokens, in_tokens;
} run_stats;

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int remaining;
    run_stats *rs;
    int index;
} waiter;

typedef struct req_ctx {
    waiter *w;
    int index;
} req_ctx;

static void on_finish(void *user, const ix_finish_info *info) {
    req_ctx *rc = user;
    waiter *w = rc->w;
    pthread_mutex_lock(&w->mu);
    run_stats *rs = w->rs;
    if (info->reason == IX_FINISH_LENGTH || info->reason == IX_FINISH_STOP) {
        rs->ttft_ms[rc->index] = info->timings.first_token_ms;
        int n = info->usage.completion_tokens;
        rs->tpot_ms[rc->index] =
            n > 1 ? (info->timings.total_ms - info->timings.first_token_ms) / (double)(n - 1) : 0.0;
        rs->out_tokens += (uint64_t)n;
        rs->in_tokens += (uint64_t)info->usage.prompt_tokens;
        rs->n_done++;
    } else {
        rs->n_failed++;
        fprintf(stderr, "inferx bench: request %d finished with %s %s\n", rc->index,
                ix_finish_reason_name(info->reason), info->message);
    }
    w->remaining--;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Submits prompts [first, first + count) and waits for them. */
static int run_batch(ix_engine *e, ix_request_params *reqs, req_ctx *ctxs, waiter *w, int first,
                     int count) {
    pthread_mutex_lock(&w->mu);
    w->remaining = count;
    pthread_mutex_unlock(&w->mu);
    for (int i = first; i < first + count; i++) {
        ix_errbuf err = {{0}};
        ctxs[i] = (req_ctx){w, i};
        reqs[i].cb = (ix_request_callbacks){NULL, on_finish, &ctxs[i], NULL};
        if (ix_engine_submit(e, &reqs[i], NULL, &err) != IX_OK) {
            fprintf(stderr, "inferx bench: submit: %s\n", err.msg);
            pthread_mutex_lock(&w->mu);
            w->remaining -= first + count - i;
            pthread_mutex_unlock(&w->mu);
            break;
        }
    }
    pthread_mutex_lock(&w->mu);
    while (w->remaining > 0) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct summary {
    double mean, p50, p99;
} summary;

static summary summarize(const double *v, int n) {
    summary s = {0, 0, 0};
    if (n <= 0) return s;
    double *c = malloc((size_t)n * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    for (int i = 0; i < n; i++) s.mean += c[i];
    s.mean /= n;
    s.p50 = c[(n - 1) / 2];
    int k = (int)ceil(0.99 * n) - 1;
    s.p99 = c[k < 0 ? 0 : k];
    free(c);
    return s;
}

static void print_run(const char *label, const run_stats *rs, int n) {
    summary t = summarize(rs->ttft_ms, n), p = summarize(rs->tpot_ms, n);
    printf("%-22s %8.2f %12.1f %12.1f   TTFT ms mean/p50/p99 %8.1f %8.1f %8.1f   TPOT ms %6.1f %6.1f %6.1f\n",
           label, rs->n_done / rs->wall_s, (double)rs->out_tokens / rs->wall_s,
           (double)(rs->out_tokens + rs->in_tokens) / rs->wall_s, t.mean, t.p50, t.p99, p.mean, p.p50,
           p.p99);
}

/* The engine's step time between two snapshots, by stage. */
typedef struct profile {
    double wall_s, plan_s, forward_s, sample_s, matmul_s, attention_s, rows_s, output_s;
    uint64_t steps, tokens;
} profile;

static profile profile_between(const ix_engine_stats *a, const ix_engine_stats *b, double wall_s) {
    const ix_model_profile *x = &a->forward, *y = &b->forward;
    return (profile){wall_s,
                     (double)(b->plan_ns - a->plan_ns) / 1e9,
                     (double)(b->forward_ns - a->forward_ns) / 1e9,
                     (double)(b->sample_ns - a->sample_ns) / 1e9,
                     (double)(y->matmul_ns - x->matmul_ns) / 1e9,
                     (double)(y->attention_ns - x->attention_ns) / 1e9,
                     (double)(y->rows_ns - x->rows_ns) / 1e9,
                     (double)(y->output_ns - x->output_ns) / 1e9,
                     b->n_steps - a->n_steps,
                     y->n_tokens - x->n_tokens};
}

static void print_profile(const profile *p) {
    double w = p->wall_s > 0 ? 100.0 / p->wall_s : 0;
    printf("concurrent run, %.2f s: %llu steps, %.1f tokens a step; of the wall time: plan %.1f%%, forward %.1f%% "
           "(matmuls %.1f%%, attention %.1f%%, row ops %.1f%%, output head %.1f%%), sample + stream %.1f%%, "
           "outside steps %.1f%%\n",
           p->wall_s, (unsigned long long)p->steps, p->steps ? (double)p->tokens / (double)p->steps : 0.0,
           p->plan_s * w, p->forward_s * w, p->matmul_s * w, p->attention_s * w, p->rows_s * w, p->output_s * w,
           p->sample_s * w, fmax(0.0, p->wall_s - p->plan_s - p->forward_s - p->sample_s) * w);
}

static void json_profile(const profile *p) {
    printf("\"profile\":{\"wall_s\":%.3f,\"steps\":%llu,\"tokens\":%llu,\"plan_s\":%.4f,\"forward_s\":%.4f,"
           "\"matmul_s\":%.4f,\"attention_s\":%.4f,\"rows_s\":%.4f,\"output_s\":%.4f,\"sample_s\":%.4f}",
           p->wall_s, (unsigned long long)p->steps, (unsigned long long)p->tokens, p->plan_s, p->forward_s,
           p->matmul_s, p->attention_s, p->rows_s, p->output_s, p->sample_s);
}

static void json_run(const char *name, const run_stats *rs, int n) {
    summary t = summarize(rs->ttft_ms, n), p = summarize(rs->tpot_ms, n);
    printf("\"%s\":{\"requests_per_s\":%.4f,\"output_tokens_per_s\":%.3f,\"total_tokens_per_s\":%.3f,"
           "\"ttft_ms\":{\"mean\":%.2f,\"p50\":%.2f,\"p99\":%.2f},"
           "\"tpot_ms\":{\"mean\":%.3f,\"p50\":%.3f,\"p99\":%.3f},\"wall_s\":%.3f,\"completed\":%d}",
           name, rs->n_done / rs->wall_s, (double)rs->out_tokens / rs->wall_s,
           (double)(rs->out_tokens + rs->in_tokens) / rs->wall_s, t.mean, t.p50, t.p99, p.mean, p.p50,
           p.p99, rs->wall_s, rs->n_done);
}

/* Sequences running in an engine, sampled every 200 us from another thread
 * while a pass runs: the most at once, and the mean over the samples (what
 * the KV pool really kept running: admission may take more than fit, and
 * preemption then sends some back). */
typedef struct monitor {
    ix_engine *e;
    atomic_bool stop;
    int32_t peak_running;
    uint64_t sum_running, n_samples;
    pthread_t th;
} monitor;

static void *monitor_main(void *arg) {
    monitor *mo = arg;
    const struct timespec nap = {0, 200000};
    while (!atomic_load(&mo->stop)) {
        ix_engine_stats st;
        ix_engine_get_stats(mo->e, &st);
        if (st.n_running > mo->peak_running) mo->peak_running = st.n_running;
        mo->sum_running += (uint64_t)st.n_running;
        mo->n_samples++;
        nanosleep(&nap, NULL);
    }
    return NULL;
}

/* "f16,q8_0" into out (at most max); false after printing what is wrong. */
static bool parse_kv_list(const char *s, ix_kv_dtype *out, int max, int *n) {
    *n = 0;
    while (s && *s) {
        const char *comma = strchr(s, ',');
        size_t len = comma ? (size_t)(comma - s) : strlen(s);
        char name[32];
        if (len >= sizeof name || *n == max) {
            fprintf(stderr, "inferx bench: --kv-cache-dtype takes at most %d types of %s\n", max,
                    ix_kv_dtype_names());
            return false;
        }
        memcpy(name, s, len);
        name[len] = '\0';
        const char *why = ix_cli_set_kv_dtype(&out[*n], name);
        if (why) {
            fprintf(stderr, "inferx bench: --kv-cache-dtype %s, got '%s'\n", why, name);
            return false;
        }
        (*n)++;
        s = comma ? comma + 1 : NULL;
    }
    if (*n == 0) fprintf(stderr, "inferx bench: --kv-cache-dtype needs a type\n");
    return *n > 0;
}

/* One line per KV type: the same prompts, the same KV memory, the concurrent
 * pass on a fresh engine each. */
typedef struct kv_row {
    ix_kv_dtype dtype;
    int64_t blocks, seqs_fit;
    int32_t peak_running;
    double mean_running;
    uint64_t preemptions;
    run_stats rs;
} kv_row;

static int kv_compare(ix_model *m, ix_engine_params ep, const ix_kv_dtype *types, int n_types,
                      ix_request_params *reqs, req_ctx *ctxs, int n, uint64_t seq_tokens, bool json) {
    kv_row rows[8];
    int rc = 0;
    for (int k = 0; k < n_types && !rc; k++) {
        kv_row *r = &rows[k];
        *r = (kv_row){.dtype = types[k]};
        r->rs.ttft_ms = calloc((size_t)n, sizeof(double));
        r->rs.tpot_ms = calloc((size_t)n, sizeof(double));
        ep.kv_dtype = types[k];
        ix_errbuf err = {{0}};
        ix_engine *e;
        if (!r->rs.ttft_ms || !r->rs.tpot_ms || ix_engine_create(&e, m, &ep, &err) != IX_OK) {
            fprintf(stderr, "inferx bench: engine with KV %s: %s\n", ix_kv_dtype_name(types[k]),
                    err.msg[0] ? err.msg : "out of memory");
            free(r->rs.ttft_ms), free(r->rs.tpot_ms);
            return 1;
        }
        ix_engine_stats st;
        ix_engine_get_stats(e, &st);
        r->blocks = st.kv.n_blocks_total;
        r->seqs_fit = r->blocks / (int64_t)((seq_tokens + (uint64_t)ep.kv_block_size - 1) / (uint64_t)ep.kv_block_size);
        waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL, 0};
        ix_request_params warm_req = reqs[0]; /* page in the weights, start the workers */
        warm_req.max_tokens = 2;
        double t1[1], t2[1];
        run_stats warm = {.ttft_ms = t1, .tpot_ms = t2};
        w.rs = &warm;
        run_batch(e, &warm_req, ctxs, &w, 0, 1);
        w.rs = &r->rs;
        monitor mo = {.e = e};
        atomic_init(&mo.stop, false);
        pthread_create(&mo.th, NULL, monitor_main, &mo);
        uint64_t t0 = ix_time_ns();
        run_batch(e, reqs, ctxs, &w, 0, n);
        r->rs.wall_s = (double)(ix_time_ns() - t0) / 1e9;
        atomic_store(&mo.stop, true);
        pthread_join(mo.th, NULL);
        r->peak_running = mo.peak_running;
        r->mean_running = mo.n_samples ? (double)mo.sum_running / (double)mo.n_samples : 0.0;
        ix_engine_get_stats(e, &st);
        r->preemptions = st.n_preempt_recompute + st.n_preempt_swap;
        rc = r->rs.n_failed ? 1 : 0;
        ix_engine_destroy(e);
    }
    for (int k = 0; k < n_types; k++) {
        const kv_row *r = &rows[k], *b = &rows[0];
        double tps = (double)r->rs.out_tokens / r->rs.wall_s, base = (double)b->rs.out_tokens / b->rs.wall_s;
        if (json)
            printf("%s{\"kv_cache_dtype\":\"%s\",\"blocks\":%lld,\"sequences_fit\":%lld,"
                   "\"peak_running\":%d,\"mean_running\":%.2f,\"preemptions\":%llu,"
                   "\"output_tokens_per_s\":%.3f,"
                   "\"sequences_vs_baseline\":%.3f,\"output_tokens_per_s_vs_baseline\":%.3f}%s",
                   k ? "," : "[", ix_kv_dtype_name(r->dtype), (long long)r->blocks, (long long)r->seqs_fit,
                   r->peak_running, r->mean_running, (unsigned long long)r->preemptions, tps,
                   b->seqs_fit ? (double)r->seqs_fit / (double)b->seqs_fit : 0.0, tps / base,
                   k == n_types - 1 ? "]\n" : "");
        else
            printf("%-9s %8lld %10lld %9d %9.2f %12llu %12.1f   sequences x%.2f, out tok/s x%.2f\n",
                   ix_kv_dtype_name(r->dtype), (long long)r->blocks, (long long)r->seqs_fit, r->peak_running,
                   r->mean_running, (unsigned long long)r->preemptions, tps,
                   b->seqs_fit ? (double)r->seqs_fit / (double)b->seqs_fit : 0.0, tps / base);
        free(r->rs.ttft_ms);
        free(r->rs.tpot_ms);
    }
    return rc;
}

int ix_cli_bench_throughput(int argc, char **argv) {
    const char *model = ix_cli_default_model();
    ix_cli_dist_opts dopts = {1, 1, 0};
    uint64_t n_prompts = 32, conc = 32, in_len = 128, out_len = 128, threads = 0, seed = 1, max_batched = 512;
    double target_step_ms = ix_sched_default_params().target_step_ms;
    bool json = false, no_sequential = false, throughput = true;
    const char *kv_list = "f16";
    size_t kv_mem = 0;
    const ix_cli_opt opts[] = {
        {"--throughput", NULL, "", "this benchmark (implied)", IX_CLI_OPT_FLAG, &throughput, 0, 0, false, NULL},
        {"--model", "-m", "FILE", "GGUF model", IX_CLI_OPT_STR, &model, 0, 0, true, NULL},
        {"--num-prompts", NULL, "N", "requests", IX_CLI_OPT_U64, &n_prompts, 1, 100000, true, NULL},
        {"--max-concurrency", NULL, "C", "sequences in flight", IX_CLI_OPT_U64, &conc, 1, 4096, true, NULL},
        {"--input-len", NULL, "I", "prompt tokens", IX_CLI_OPT_U64, &in_len, 1, 1000000, true, NULL},
        {"--output-len", NULL, "O", "generated tokens per request", IX_CLI_OPT_U64, &out_len, 1, 1000000, true, NULL},
        {"--max-num-batched-tokens", "--max-batched-tokens", "B", "token budget per engine step, a hard cap",
         IX_CLI_OPT_U64, &max_batched, 1, 65536, true, NULL},
        {"--target-step-ms", NULL, "MS", "target step time while sequences decode, 0 = off (see inferx serve --help)",
         IX_CLI_OPT_F64, &target_step_ms, 0, 3600e3, true, NULL},
        {"--threads", "-t", "N", "kernel threads (default: all cores)", IX_CLI_OPT_U64, &threads, 0, 1024, false, NULL},
        {"--seed", NULL, "S", "prompt RNG seed", IX_CLI_OPT_U64, &seed, 0, (double)UINT64_MAX, true, NULL},
        {"--no-sequential", NULL, "", "skip the one-at-a-time baseline", IX_CLI_OPT_FLAG, &no_sequential, 0, 0, false,
         NULL},
        {"--kv-cache-dtype", NULL, "T[,T...]",
         "KV cache type (f16, bf16, q8_0, fp8_e4m3, q4_0, f32);\n"
         "several: compare them in the same --kv-cache-mem",
         IX_CLI_OPT_STR, &kv_list, 0, 0, true, NULL},
        {"--kv-cache-mem", NULL, "BYTES",
         "KV pool size, suffix K/M/G allowed (default: room for\n"
         "C sequences of I + O tokens in the first type)",
         IX_CLI_OPT_SIZE, &kv_mem, 1, 1e18, false, NULL},
        {"--json", NULL, "", "print one JSON object instead of the table", IX_CLI_OPT_FLAG, &json, 0, 0, false, NULL},
        {"--tp", NULL, "N", "tensor parallelism over N processes (mpirun -np N inferx bench --throughput --tp N)",
         IX_CLI_OPT_I32, &dopts.tp, 1, 1024, true, NULL},
        {"--pp", NULL, "N", "pipeline parallelism over N stages (mpirun -np TP*PP ... --tp TP --pp PP)", IX_CLI_OPT_I32,
         &dopts.pp, 1, 1024, true, NULL},
        {"--micro-batches", NULL, "N", "a pipeline's split of each step (default: one per stage)", IX_CLI_OPT_I32,
         &dopts.micro_batches, 1, 65536, false, NULL},
    };
    int prc = ix_cli_parse_opts("bench", opts, IX_ARRAY_LEN(opts), argc, argv);
    if (prc == IX_CLI_HELP) usage(stdout, opts, IX_ARRAY_LEN(opts));
    if (prc != IX_CLI_OK) return prc == IX_CLI_HELP ? 0 : 2;
    ix_kv_dtype kv_types[8];
    int n_kv_types;
    if (!parse_kv_list(kv_list, kv_types, (int)IX_ARRAY_LEN(kv_types), &n_kv_types)) return 2;
    if (n_kv_types > 1 && !kv_mem) {
        fprintf(stderr, "inferx bench: several --kv-cache-dtype types are compared in the same KV memory: "
                        "give --kv-cache-mem\n");
        return 2;
    }
    bool sequential = !no_sequential;
    if ((dopts.tp > 1 || dopts.pp > 1) && n_kv_types > 1) {
        fprintf(stderr, "inferx bench: --tp and --pp compare one --kv-cache-dtype at a time\n");
        return 2;
    }
    ix_cli_tp tps;
    int jrc = ix_cli_tp_join("bench", &dopts, model, (int32_t)threads, &tps);
    if (jrc >= 0) return jrc; /* a usage error, or a rank other than 0 that has served */

    ix_errbuf err = {{0}};
    ix_model *m;
    char cache_buf[4096];
    ix_model_load_params lp;
    ix_cli_load_params(&lp, NULL, IX_CLI_PACK_CACHE_MAX_DEFAULT, cache_buf, sizeof cache_buf);
    if (ix_cli_tp_load(&tps, model, &lp, &m, &err) != IX_OK) {
        fprintf(stderr, "inferx bench: %s: %s\n", model, err.msg);
        ix_cli_tp_end(&tps);
        return 1;
    }
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    const ix_tokenizer *tok = ix_model_tokenizer(m);
    if (in_len + out_len > (uint64_t)hp->n_ctx_train) {
        fprintf(stderr, "inferx bench: input + output length %llu exceeds the model's context %d\n",
                (unsigned long long)(in_len + out_len), hp->n_ctx_train);
        ix_model_destroy(m);
        ix_cli_tp_end(&tps);
        return 2;
    }

    /* KV pool: every concurrent sequence at full length, nothing preempted. */
    ix_engine_params ep = ix_engine_default_params();
    ep.sched.max_num_seqs = (int32_t)conc;
    ep.sched.max_num_batched_tokens = (int32_t)(max_batched > conc ? max_batched : conc);
    ep.sched.target_step_ms = target_step_ms;
    ep.kv_block_size = 16;
    ep.kv_dtype = kv_types[0];
    if (kv_mem) ep.kv_mem_bytes = kv_mem; /* blocks as many as fit */
    else ep.kv_blocks = (int64_t)(conc * ((in_len + out_len + 15) / 16 + 1));
    ep.enable_prefix_cache = false; /* random prompts; and the sequential pass must not reuse them */
    ep.n_threads = (int32_t)threads;
    ix_engine *e = NULL;
    if (n_kv_types == 1 && ix_engine_create(&e, m, &ep, &err) != IX_OK) {
        fprintf(stderr, "inferx bench: engine: %s\n", err.msg);
        ix_model_destroy(m);
        ix_cli_tp_end(&tps);
        return 1;
    }

    /* Seeded random prompts over ordinary vocabulary tokens. */
    int n = (int)n_prompts;
    ix_token *ids = malloc((size_t)n * (size_t)in_len * sizeof *ids);
    ix_request_params *reqs = calloc((size_t)n, sizeof *reqs);
    req_ctx *ctxs = calloc((size_t)n, sizeof *ctxs);
    run_stats par = {0}, seq = {0};
    par.ttft_ms = calloc((size_t)n, sizeof(double));
    par.tpot_ms = calloc((size_t)n, sizeof(double));
    seq.ttft_ms = calloc((size_t)n, sizeof(double));
    seq.tpot_ms = calloc((size_t)n, sizeof(double));
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < (size_t)n * in_len; i++) {
        ix_token t;
        do {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            t = (ix_token)(x % (uint64_t)hp->n_vocab);
        } while (ix_tokenizer_token_type(tok, t) != IX_TOKEN_TYPE_NORMAL);
        ids[i] = t;
    }
    for (int i = 0; i < n; i++) {
        reqs[i] = ix_request_default_params();
        reqs[i].prompt = ids + (size_t)i * in_len;
        reqs[i].n_prompt = in_len;
        reqs[i].max_tokens = (int32_t)out_len;
        reqs[i].ignore_eos = true;
        reqs[i].sample.temperature = 0;
    }
    if (n_kv_types > 1) {
        if (!json)
            printf("model %s (%s), %d prompts x (%llu in + %llu out), max concurrency %llu, kernels %s, "
                   "KV memory %zu bytes for each type\n"
                   "%-9s %8s %10s %9s %9s %12s %12s\n",
                   model, hp->arch_name, n, (unsigned long long)in_len, (unsigned long long)out_len,
                   (unsigned long long)conc, ix_kernels()->name, kv_mem, "KV type", "blocks", "seqs fit",
                   "peak run", "mean run", "preemptions", "out tok/s");
        int rc = kv_compare(m, ep, kv_types, n_kv_types, reqs, ctxs, n, in_len + out_len, json);
        ix_model_destroy(m);
        free(ids), free(reqs), free(ctxs);
        free(par.ttft_ms), free(par.tpot_ms), free(seq.ttft_ms), free(seq.tpot_ms);
        return rc;
    }
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, &par, 0};

    /* Warm-up: one short request (page in the weights, start the workers). */
    {
        ix_request_params r = reqs[0];
        r.max_tokens = 2;
        run_stats warm = {0};
        double t1[1], t2[1];
        warm.ttft_ms = t1;
        warm.tpot_ms = t2;
        w.rs = &warm;
        run_batch(e, &r, ctxs, &w, 0, 1);
    }

    w.rs = &par;
    ix_engine_stats st0, st1;
    ix_engine_get_stats(e, &st0);
    uint64_t t0 = ix_time_ns();
    run_batch(e, reqs, ctxs, &w, 0, n);
    par.wall_s = (double)(ix_time_ns() - t0) / 1e9;
    ix_engine_get_stats(e, &st1);
    profile prof = profile_between(&st0, &st1, par.wall_s);
    /* Pure prefill: the same prompts, one token out each, so every step is
     * prompt tokens (up to the cap) -- the rate batching is measured against. */
    run_stats pre = {0};
    pre.ttft_ms = calloc((size_t)n, sizeof(double));
    pre.tpot_ms = calloc((size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) reqs[i].max_tokens = 1;
    w.rs = &pre;
    t0 = ix_time_ns();
    run_batch(e, reqs, ctxs, &w, 0, n);
    pre.wall_s = (double)(ix_time_ns() - t0) / 1e9;
    for (int i = 0; i < n; i++) reqs[i].max_tokens = (int32_t)out_len;
    double prefill_rate = pre.wall_s > 0 ? (double)pre.in_tokens / pre.wall_s : 0;
    double batched_rate = (double)(par.out_tokens + par.in_tokens) / par.wall_s;
    if (sequential) {
        w.rs = &seq;
        t0 = ix_time_ns();
        for (int i = 0; i < n; i++) run_batch(e, reqs, ctxs, &w, i, 1);
        seq.wall_s = (double)(ix_time_ns() - t0) / 1e9;
    }
    ix_engine_stats st;
    ix_engine_get_stats(e, &st);

    double ratio = sequential && seq.out_tokens ? ((double)par.out_tokens / par.wall_s) /
                                                       ((double)seq.out_tokens / seq.wall_s)
                                                 : 0.0;
    if (json) {
        printf("{\"model\":\"%s\",\"num_prompts\":%d,\"max_concurrency\":%llu,\"input_len\":%llu,"
               "\"output_len\":%llu,\"threads\":%llu,\"kv_cache_dtype\":\"%s\",",
               hp->arch_name, n, (unsigned long long)conc, (unsigned long long)in_len,
               (unsigned long long)out_len, (unsigned long long)threads, ix_kv_dtype_name(kv_types[0]));
        printf("\"output_tokens_per_s\":%.3f,\"requests_per_s\":%.4f,\"total_tokens_per_s\":%.3f,",
               (double)par.out_tokens / par.wall_s, par.n_done / par.wall_s,
               (double)(par.out_tokens + par.in_tokens) / par.wall_s);
        json_run("concurrent", &par, par.n_done);
        if (sequential) {
            printf(",");
            json_run("sequential", &seq, seq.n_done);
            printf(",\"speedup_output_tokens_per_s\":%.3f", ratio);
        }
        printf(",\"prefill_tokens_per_s\":%.3f,\"total_vs_prefill\":%.4f,", prefill_rate,
               prefill_rate > 0 ? batched_rate / prefill_rate : 0.0);
        json_profile(&prof);
        printf(",\"preemptions\":%llu,\"failed\":%d}\n",
               (unsigned long long)(st.n_preempt_recompute + st.n_preempt_swap),
               par.n_failed + seq.n_failed + pre.n_failed);
    } else {
        printf("model %s (%s), %d prompts x (%llu in + %llu out), max concurrency %llu, kernels %s, KV %s\n",
               model, hp->arch_name, n, (unsigned long long)in_len, (unsigned long long)out_len,
               (unsigned long long)conc, ix_kernels()->name, ix_kv_dtype_name(kv_types[0]));
        printf("%-22s %8s %12s %12s\n", "", "req/s", "out tok/s", "total tok/s");
        print_run("concurrent", &par, par.n_done);
        if (sequential) {
            print_run("one at a time", &seq, seq.n_done);
            printf("concurrent / one-at-a-time output tokens/s: %.2fx\n", ratio);
        }
        printf("pure prefill (same prompts, 1 token out): %.1f prompt tok/s; concurrent total tok/s = %.1f%% of it\n",
               prefill_rate, prefill_rate > 0 ? 100.0 * batched_rate / prefill_rate : 0.0);
        print_profile(&prof);
    }
    int rc = par.n_failed + seq.n_failed + pre.n_failed ? 1 : 0;
    ix_engine_destroy(e);
    if (!json) ix_cli_tp_report(stdout, "bench", &tps);
    ix_cli_tp_end(&tps);
    ix_model_destroy(m);
    free(ids);
    free(reqs);
    free(ctxs);
    free(par.ttft_ms);
    free(par.tpot_ms);
    free(seq.ttft_ms);
    free(seq.tpot_ms);
    free(pre.ttft_ms);
    free(pre.tpot_ms);
    return rc;
}
