/*
 * inferx bench: prefill and decode throughput of one model, in llama-bench's
 * terms (a pp<P> row: one P-token prompt of random ids through the forward
 * pass in batches of up to 512; a tg<N> row: N tokens decoded one at a time,
 * greedy, each fed back), the median of -r repetitions after a warm-up. Both
 * are requests to the engine (the generation loop every client uses),
 * stepped on this thread.
 *
 * Beside it, measured in the same run on the same threads, the machine's
 * memory read bandwidth, and the decode bound it implies: a decode step must
 * read every matmul weight once, so no engine decodes faster than
 * bandwidth / ix_model_decode_bytes() tokens per second on this machine.
 * The fraction of that bound reached says how much decode has left to gain.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define BENCH_X86 1
#endif

#include "cli/cli.h"
#include "inferx/engine.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: inferx bench [-m MODEL.gguf] [options]\n"
            "\n"
            "Measures prefill (pp) and decode (tg) throughput like llama-bench, and the\n"
            "decode bound this machine's memory bandwidth sets for the model.\n"
            "\n"
            "  -m, --model FILE   GGUF model (default: the bundled model, %s)\n"
            "  -p, --n-prompt N   prompt tokens of the prefill test, 0 = skip (default 512)\n"
            "  -n, --n-gen N      tokens of the decode test, 0 = skip (default 128)\n"
            "                     (each less than the model's context: a request holds its\n"
            "                     prompt and a generated token; the defaults shrink to fit)\n"
            "  -t, --threads N    worker threads (default: all cores)\n"
            "  -r, --reps N       repetitions; the median is reported (default 3)\n"
            "  --seed S           seed of the random prompt (default 1)\n"
            "  --bw-mib N         buffer of the bandwidth test in MiB (default 1024)\n"
            "  --kv-cache-dtype T KV cache element type: f16 (default), bf16, q8_0, fp8_e4m3,\n"
            "                     q4_0 or f32\n"
            "  --kv-f32           the same as --kv-cache-dtype f32\n"
            "  --pack-cache DIR|off  the packed-weight cache (as inferx serve's)\n"
            "  --json             print one JSON object instead of the table\n"
            "  -h, --help         show this help\n"
            "\n"
            "inferx bench --throughput [...] measures serving throughput of the continuous-\n"
            "batching engine instead (see inferx bench --throughput --help), and\n"
            "inferx bench --serve URL [...] benchmarks a running OpenAI-compatible server with\n"
            "concurrent streaming clients (see inferx bench --serve --help), and\n"
            "inferx bench --spec [ngram|draft] [...] measures speculative decoding against\n"
            "speculation off in the same run (see inferx bench --spec --help).\n",
            ix_cli_default_model());
}

typedef struct bench_opts {
    const char *model, *pack_cache;
    uint64_t n_prompt, n_gen, threads, reps, seed, bw_mib;
    bool json;
    ix_kv_dtype kv_dtype;
    bool prompt_set, gen_set; /* -p / -n given (else the defaults, which fit the context) */
} bench_opts;

/* Returns 0 on success, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.n_prompt = 512, .n_gen = 128, .reps = 3, .seed = 1, .bw_mib = 1024, .kv_dtype = IX_KV_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        } else if (!strcmp(a, "--kv-f32")) {
            o->kv_dtype = IX_KV_F32;
            continue;
        }
        if (!v) {
            fprintf(stderr, "inferx bench: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        bool ok;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
            ok = true;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            ok = ix_cli_parse_u64(a, v, &o->n_prompt);
            o->prompt_set = true;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            ok = ix_cli_parse_u64(a, v, &o->n_gen);
            o->gen_set = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            ok = ix_cli_parse_u64(a, v, &o->threads);
        } else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) {
            ok = ix_cli_parse_u64(a, v, &o->reps);
        } else if (!strcmp(a, "--seed")) {
            ok = ix_cli_parse_u64(a, v, &o->seed);
        } else if (!strcmp(a, "--bw-mib")) {
            ok = ix_cli_parse_u64(a, v, &o->bw_mib);
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            const char *why = ix_cli_set_kv_dtype(&o->kv_dtype, v);
            if (why) fprintf(stderr, "inferx bench: %s %s, got '%s'\n", a, why, v);
            ok = !why;
        } else if (!strcmp(a, "--pack-cache")) {
            o->pack_cache = v;
            ok = v != NULL;
        } else {
            fprintf(stderr, "inferx bench: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    const char *bad = NULL;
    if (o->n_prompt > (1u << 20) || o->n_gen > (1u << 20)) bad = "-p and -n must be at most 1048576";
    else if (o->n_prompt == 0 && o->n_gen == 0) bad = "-p and -n are both 0: nothing to measure";
    else if (o->threads > 1024) bad = "-t must be at most 1024";
    else if (o->reps < 1 || o->reps > 1000) bad = "-r must be in [1, 1000]";
    else if (o->bw_mib < 1 || o->bw_mib > (1u << 20)) bad = "--bw-mib must be in [1, 1048576]";
    if (bad) {
        fprintf(stderr, "inferx bench: %s\n", bad);
        return 2;
    }
    if (!o->model) o->model = ix_cli_default_model();
    return 0;
}

/* ---- memory read bandwidth ------------------------------------------------- */

typedef struct bw_job {
    const unsigned char *buf;
    size_t n_bytes;
    bool avx2, avx512;
    uint64_t sink[1024]; /* per thread, so the reads cannot be optimised away */
} bw_job;

/* Each thread reads its share as BW_STREAMS equal parts side by side, 128
 * bytes of each part per step. One forward stream per core under-reports
 * what the memory system delivers: on the test VM (Zen 5, 2 vCPUs) one
 * stream per thread read ~59 GB/s and two to eight streams 67-71 GB/s in
 * the same minutes, and the decode kernels, which read four weight groups
 * side by side, went past the one-stream figure. A bound must be one that no
 * reader beats, so the test reads the way that measured fastest. */
#define BW_STREAMS 4

#ifdef BENCH_X86
/* 128 bytes per stream and step into four independent accumulators: bound by
 * the loads, not by the adds. */
__attribute__((target("avx2"))) static uint64_t read_avx2(const unsigned char *p, size_t part) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= part; i += 128)
        for (size_t s = 0; s < BW_STREAMS; s++) {
            const unsigned char *q = p + s * part + i;
            a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)q));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(q + 32)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(q + 64)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(q + 96)));
        }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0) + (uint64_t)_mm256_extract_epi64(a0, 1) +
           (uint64_t)_mm256_extract_epi64(a0, 2) + (uint64_t)_mm256_extract_epi64(a0, 3);
}

/* With AVX-512, 64-byte loads, the streams interleaved a line at a time:
 * on the Zen 5 VM this reads 4-5% faster than the 32-byte loads above
 * (bench/stream_bench, "plain" against "bound's read"), and the bound must
 * be the fastest read. */
__attribute__((target("avx512f"))) static uint64_t read_avx512(const unsigned char *p, size_t part) {
    __m512i a[BW_STREAMS];
    for (size_t s = 0; s < BW_STREAMS; s++) a[s] = _mm512_setzero_si512();
    for (size_t i = 0; i + 256 <= part; i += 256)
        for (size_t j = 0; j < 4; j++)
            for (size_t s = 0; s < BW_STREAMS; s++)
                a[s] = _mm512_add_epi64(a[s], _mm512_load_si512((const void *)(p + s * part + i + 64 * j)));
    uint64_t t = 0;
    for (size_t s = 0; s < BW_STREAMS; s++) t += (uint64_t)_mm512_reduce_add_epi64(a[s]);
    return t;
}
#endif

static uint64_t read_scalar(const unsigned char *p, size_t part) {
    uint64_t a[8] = {0};
    for (size_t i = 0; i + 64 <= part; i += 64)
        for (size_t s = 0; s < BW_STREAMS; s++)
            for (int j = 0; j < 8; j++) {
                uint64_t w;
                memcpy(&w, p + s * part + i + 8 * (size_t)j, 8);
                a[j] += w;
            }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

/* Thread ith's 4 KiB-aligned share of the buffer. */
static void bw_share(const bw_job *j, int ith, int nth, size_t *lo, size_t *hi) {
    size_t pages = j->n_bytes / 4096, per = pages / (size_t)nth, extra = pages % (size_t)nth;
    size_t first = (size_t)ith * per + ((size_t)ith < extra ? (size_t)ith : extra);
    *lo = first * 4096;
    *hi = *lo + (per + ((size_t)ith < extra)) * 4096;
}

/* Bytes one pass reads on nth threads (bw_read's whole pages per stream). */
static size_t bw_bytes(const bw_job *j, int nth) {
    size_t total = 0, lo, hi;
    for (int ith = 0; ith < nth; ith++) {
        bw_share(j, ith, nth, &lo, &hi);
        total += (hi - lo) / 4096 / BW_STREAMS * 4096 * BW_STREAMS;
    }
    return total;
}

static void bw_fill(void *ctx, int ith, int nth) {
    bw_job *j = ctx;
    size_t lo, hi;
    bw_share(j, ith, nth, &lo, &hi);
    memset((unsigned char *)(uintptr_t)j->buf + lo, 0x5a + ith, hi - lo);
}

static void bw_read(void *ctx, int ith, int nth) {
    bw_job *j = ctx;
    size_t lo, hi;
    bw_share(j, ith, nth, &lo, &hi);
    /* whole 4 KiB pages per stream; hi - lo is a multiple of 4 KiB, so at most
     * 3 pages of the share go unread (and uncounted: see bw_bytes) */
    size_t part = (hi - lo) / 4096 / BW_STREAMS * 4096;
#ifdef BENCH_X86
    if (j->avx512) {
        j->sink[ith % 1024] += read_avx512(j->buf + lo, part);
        return;
    }
    if (j->avx2) {
        j->sink[ith % 1024] += read_avx2(j->buf + lo, part);
        return;
    }
#endif
    j->sink[ith % 1024] += read_scalar(j->buf + lo, part);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double stdev(const double *v, size_t n) {
    if (n < 2) return 0;
    double mean = 0, ss = 0;
    for (size_t i = 0; i < n; i++) mean += v[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    return sqrt(ss / (double)(n - 1));
}

/* Streaming reads of one buffer on the benchmark's threads. The bandwidth a
 * virtual machine gets changes from one minute to the next (neighbours on
 * the host share the memory controllers, unseen in this guest's load), so
 * samples are taken while the test they bound runs: before each repetition
 * and every DECODE_BW_EVERY decode steps (outside the timed part); the bound
 * uses the median of the samples taken during the decode test. */
typedef struct bw_meter {
    ix_pool *pool;
    bw_job *job;
    double *bps; /* (cap) bytes per second of each pass */
    size_t pass_bytes; /* what one pass reads (bw_bytes) */
    size_t n, cap;
} bw_meter;

/* Takes the buffer (mib MiB), faults it in on the threads that read it and
 * reads it once untimed. false if the memory cannot be had. */
static bool bw_open(bw_meter *bm, ix_pool *pool, uint64_t mib, size_t max_samples) {
    *bm = (bw_meter){.pool = pool, .cap = max_samples};
    bm->job = calloc(1, sizeof *bm->job);
    bm->bps = malloc(max_samples * sizeof *bm->bps);
    if (bm->job) {
        /* Huge pages where the kernel gives them: between the passes the
         * buffer sits idle, and a reclaim scanner (DAMON, kswapd) that clears
         * the accessed bits of its 4 KiB pages would make the next pass pay
         * a page-table assist per page and report a fraction of the real
         * bandwidth. */
        size_t huge = (size_t)2 << 20;
        bm->job->n_bytes = (size_t)mib << 20;
        bm->job->buf = aligned_alloc(huge, (bm->job->n_bytes + huge - 1) / huge * huge);
#ifdef MADV_HUGEPAGE
        if (bm->job->buf) madvise((void *)(uintptr_t)bm->job->buf, bm->job->n_bytes, MADV_HUGEPAGE);
#endif
    }
    if (!bm->job || !bm->bps || !bm->job->buf) return false;
#ifdef BENCH_X86
    bm->job->avx2 = ix_cpu_supports(IX_ISA_AVX2);
    bm->job->avx512 = ix_cpu_supports(IX_ISA_AVX512);
#endif
    bm->pass_bytes = bw_bytes(bm->job, ix_pool_n_threads(pool));
    ix_pool_run(pool, bw_fill, bm->job);
    ix_pool_run(pool, bw_read, bm->job);
    return true;
}

static void bw_sample(bw_meter *bm, int passes) {
    /* a buffer too small to give every stream a page measures nothing */
    if (!bm->job || !bm->job->buf || bm->pass_bytes == 0) return;
    for (int i = 0; i < passes && bm->n < bm->cap; i++) {
        uint64_t t0 = ix_time_ns();
        ix_pool_run(bm->pool, bw_read, bm->job);
        double s = (double)(ix_time_ns() - t0) * 1e-9;
        bm->bps[bm->n++] = (double)bm->pass_bytes / (s > 0 ? s : 1e-9);
    }
}

/* Median bytes per second of the samples from index `first` on; 0 if none. */
static double bw_median(bw_meter *bm, size_t first) {
    return bm->n > first ? median(bm->bps + first, bm->n - first) : 0;
}

static void bw_close(bw_meter *bm) {
    if (bm->job) free((void *)(uintptr_t)bm->job->buf);
    free(bm->job);
    free(bm->bps);
}

/* ---- the model tests ----------------------------------------------------- */

/* The tests run as requests on a thread-less engine that this thread steps,
 * so they time the generation loop every client uses, and the bandwidth
 * passes run between its steps on its own worker pool. */
typedef struct bench {
    ix_engine *e;
    ix_token *toks; /* (max(n_prompt, 1)) the random prompt */
    bool finished;  /* the request in flight has finished */
    ix_finish_info info;
} bench;

static void bench_on_finish(void *user, const ix_finish_info *info) {
    bench *b = user;
    b->info = *info;
    b->finished = true;
}

/* Seconds to run one greedy request of the n_prompt tokens at b->toks that
 * generates max_tokens, stepped here; with bm, a bandwidth pass (untimed)
 * after every bw_every steps. < 0 on error. The prompt takes one step per
 * chunk of the engine's batch, each later step decodes one token. */
static double run_request(bench *b, int32_t n_prompt, int32_t max_tokens, bw_meter *bm, int32_t bw_every) {
    ix_request_params rq = ix_request_default_params();
    rq.prompt = b->toks;
    rq.n_prompt = (size_t)n_prompt;
    rq.sample.temperature = 0;
    rq.max_tokens = max_tokens;
    rq.ignore_eos = true;
    rq.cb = (ix_request_callbacks){NULL, bench_on_finish, b, NULL};
    ix_errbuf err = {{0}};
    b->finished = false;
    uint64_t ns = 0, t0 = ix_time_ns();
    if (ix_engine_submit(b->e, &rq, NULL, &err) != IX_OK) {
        fprintf(stderr, "inferx bench: %s\n", err.msg);
        return -1;
    }
    for (;;) {
        ix_status s = ix_engine_run_until(b->e, &b->finished, bm ? bw_every : 0);
        if (s != IX_OK) {
            fprintf(stderr, "inferx bench: the engine stopped: %s\n", ix_status_str(s));
            return -1;
        }
        if (b->finished) break;
        ns += ix_time_ns() - t0;
        bw_sample(bm, 1);
        t0 = ix_time_ns();
    }
    ns += ix_time_ns() - t0;
    if (b->info.reason == IX_FINISH_ERROR) {
        fprintf(stderr, "inferx bench: %s\n", b->info.message);
        return -1;
    }
    return (double)ns * 1e-9;
}

/* Seconds to prefill n_prompt tokens (and take the greedy token of the last
 * logits: one pass over the vocabulary). */
static double run_prefill(bench *b, int32_t n_prompt) { return run_request(b, n_prompt, 1, NULL, 0); }

#define DECODE_BW_EVERY 16

/* Seconds to decode n_gen tokens one by one from an empty sequence, greedy,
 * each fed back: a one-token prompt (the first decode step) and n_gen - 1
 * more, n_gen forward passes of one token; a bandwidth pass (untimed) every
 * DECODE_BW_EVERY steps. */
static double run_decode(bench *b, bw_meter *bm, int32_t n_gen) {
    return run_request(b, 1, n_gen, bm, DECODE_BW_EVERY);
}

/* Runs one test reps times after a warm-up, each repetition preceded by two
 * bandwidth passes; tokens/s median and stdev. */
static bool measure(bench *b, bw_meter *bm, bool decode, int32_t n, uint64_t reps, double *tps, double *sd) {
    /* The warm-up faults the weights in and sizes nothing: it need not be long. */
    if ((decode ? run_decode(b, NULL, n < 8 ? n : 8) : run_prefill(b, n)) < 0) return false;
    double *v = malloc((size_t)reps * sizeof *v);
    if (!v) {
        fprintf(stderr, "inferx bench: out of memory\n");
        return false;
    }
    for (uint64_t r = 0; r < reps; r++) {
        bw_sample(bm, 2);
        double s = decode ? run_decode(b, bm, n) : run_prefill(b, n);
        if (s < 0) {
            free(v);
            return false;
        }
        v[r] = (double)n / (s > 0 ? s : 1e-9);
    }
    *sd = stdev(v, (size_t)reps);
    *tps = median(v, (size_t)reps);
    free(v);
    return true;
}

/* ---- output ---------------------------------------------------------------- */

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* A measured figure, or null when the test did not run. */
static void json_num(const char *key, bool have, double v, bool last) {
    printf("  \"%s\": ", key);
    if (have && isfinite(v)) printf("%.4f", v);
    else printf("null");
    printf(last ? "\n" : ",\n");
}

static const char *human_params(char *buf, size_t n, uint64_t v) {
    if (v >= 1000000000ull) snprintf(buf, n, "%.2f B", (double)v * 1e-9);
    else if (v >= 1000000ull) snprintf(buf, n, "%.2f M", (double)v * 1e-6);
    else snprintf(buf, n, "%.2f K", (double)v * 1e-3);
    return buf;
}

int ix_cli_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) /* the serving benchmarks are modes of their own */
        if (!strcmp(argv[i], "--serve")) return ix_cli_bench_serve(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--throughput")) return ix_cli_bench_throughput(argc, argv);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--spec") || !strcmp(argv[i], "--draft-model") || !strcmp(argv[i], "--medusa"))
            return ix_cli_bench_spec(argc, argv);
    bench_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;

    int rc = 1;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    bench b = {0};
    bw_meter bm = {0};
    char cache_buf[4096];
    ix_model_load_params lp;
    ix_cli_load_params(&lp, o.pack_cache, IX_CLI_PACK_CACHE_MAX_DEFAULT, cache_buf, sizeof cache_buf);
    if (ix_model_load_ex(&m, o.model, &lp, &err) != IX_OK) {
        fprintf(stderr, "inferx bench: %s: %s\n", o.model, err.msg);
        return 1;
    }
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    int32_t n_prompt = (int32_t)o.n_prompt, n_gen = (int32_t)o.n_gen;
    /* A request holds its prompt plus at least one generated token: the
     * defaults shrink to a small model's context, explicit sizes must fit. */
    if (!o.prompt_set && n_prompt >= hp->n_ctx_train) n_prompt = hp->n_ctx_train - 1;
    if (!o.gen_set && n_gen >= hp->n_ctx_train) n_gen = hp->n_ctx_train - 1;
    if (n_prompt >= hp->n_ctx_train || n_gen >= hp->n_ctx_train) {
        fprintf(stderr, "inferx bench: -p %d / -n %d must be less than the model's context of %d tokens\n",
                n_prompt, n_gen, hp->n_ctx_train);
        goto done;
    }
    /* One sequence at a time: a pool just large enough for the longest test
     * (prompt + its one token, or a 1-token prompt + n_gen), no prefix cache
     * (each repetition must compute its prompt), batches of up to 512. */
    int32_t longest = n_prompt > n_gen ? n_prompt + 1 : n_gen + 1;
    ix_engine_params ep = ix_engine_default_params();
    ep.start_thread = false;
    ep.n_threads = (int32_t)o.threads;
    ep.kv_dtype = o.kv_dtype;
    ep.kv_blocks = (longest + ep.kv_block_size - 1) / ep.kv_block_size + 1;
    ep.enable_prefix_cache = false;
    ep.sched.max_num_seqs = 1;
    ep.sched.max_num_batched_tokens = n_prompt < 1 ? 1 : n_prompt > 512 ? 512 : n_prompt;
    if (ix_engine_create(&b.e, m, &ep, &err) != IX_OK) {
        fprintf(stderr, "inferx bench: %s\n", err.msg);
        goto done;
    }
    int32_t n_vocab = hp->n_vocab;
    b.toks = malloc((size_t)(n_prompt > 1 ? n_prompt : 1) * sizeof *b.toks);
    if (!b.toks) {
        fprintf(stderr, "inferx bench: out of memory\n");
        goto done;
    }
    uint64_t r = o.seed * 0x9e3779b97f4a7c15ull + 1;
    for (int32_t i = 0; i < (n_prompt > 1 ? n_prompt : 1); i++) {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        b.toks[i] = (ix_token)(r % (uint64_t)n_vocab);
    }

    ix_pool *pool = ix_engine_pool(b.e);
    int threads = ix_pool_n_threads(pool);
    size_t max_samples = 4 + (size_t)o.reps * (4 + (size_t)n_gen / DECODE_BW_EVERY);
    if (!bw_open(&bm, pool, o.bw_mib, max_samples))
        fprintf(stderr, "inferx bench: no memory for the bandwidth test; bound not reported\n");
    bw_sample(&bm, 4);
    double pp = 0, pp_sd = 0, tg = 0, tg_sd = 0;
    if (n_prompt > 0 && !measure(&b, &bm, false, n_prompt, o.reps, &pp, &pp_sd)) goto done;
    size_t decode_from = n_gen > 0 ? bm.n : 0; /* the bound uses the decode test's samples */
    if (n_gen > 0 && !measure(&b, &bm, true, n_gen, o.reps, &tg, &tg_sd)) goto done;
    double bw = bw_median(&bm, decode_from);
    size_t bw_passes = bm.n - decode_from;

    uint64_t decode_bytes = ix_model_decode_bytes(m), size_bytes = 0;
    const ix_gguf *g = ix_model_gguf(m);
    for (uint64_t i = 0; i < ix_gguf_n_tensors(g); i++) size_bytes += ix_gguf_tensor_at(g, i)->n_bytes;
    double bound = bw > 0 && decode_bytes ? bw / (double)decode_bytes : 0;
    const char *type = ix_dtype_name(hp->weight_type);
    if (o.json) {
        printf("{\n  \"model\": ");
        json_str(o.model);
        printf(",\n  \"arch\": ");
        json_str(hp->arch_name);
        printf(",\n  \"type\": ");
        json_str(type ? type : "?");
        printf(",\n  \"kernels\": ");
        json_str(ix_kernels()->name);
        printf(",\n  \"kv_cache_dtype\": ");
        json_str(ix_kv_dtype_name(o.kv_dtype));
        printf(",\n  \"size_bytes\": %llu,\n  \"n_params\": %llu,\n  \"threads\": %d,\n"
               "  \"n_prompt\": %d,\n  \"n_gen\": %d,\n  \"reps\": %llu,\n  \"decode_bytes\": %llu,\n",
               (unsigned long long)size_bytes, (unsigned long long)ix_model_n_params(m), threads, n_prompt,
               n_gen, (unsigned long long)o.reps, (unsigned long long)decode_bytes);
        json_num("prefill_tokens_per_s", n_prompt > 0, pp, false);
        json_num("prefill_stdev", n_prompt > 0, pp_sd, false);
        json_num("decode_tokens_per_s", n_gen > 0, tg, false);
        json_num("decode_stdev", n_gen > 0, tg_sd, false);
        json_num("mem_bandwidth_gbs", bw > 0, bw * 1e-9, false);
        printf("  \"mem_bandwidth_passes\": %zu,\n", bw_passes);
        json_num("decode_bound_tokens_per_s", bound > 0, bound, false);
        json_num("decode_fraction_of_bound", bound > 0 && n_gen > 0, tg / bound, true);
        printf("}\n");
    } else {
        char params[32], model[128], test[32];
        human_params(params, sizeof params, ix_model_n_params(m));
        snprintf(model, sizeof model, "%s %s %s", hp->arch_name, params, type ? type : "?");
        printf("| %-28s | %10s | %9s | %5s | %7s | %7s | %18s |\n", "model", "size", "params", "type",
               "threads", "test", "t/s");
        printf("| ---------------------------- | ---------: | --------: | ----: | ------: | ------: | "
               "-----------------: |\n");
        char size[32], tps[48];
        if (size_bytes >= (1ull << 30)) snprintf(size, sizeof size, "%.2f GiB", (double)size_bytes / (1ull << 30));
        else snprintf(size, sizeof size, "%.2f MiB", (double)size_bytes / (1ull << 20));
        for (int k = 0; k < 2; k++) {
            int32_t n = k ? n_gen : n_prompt;
            if (n == 0) continue;
            snprintf(test, sizeof test, "%s%d", k ? "tg" : "pp", n);
            snprintf(tps, sizeof tps, "%.2f ± %.2f", k ? tg : pp, k ? tg_sd : pp_sd);
            printf("| %-28s | %10s | %9s | %5s | %7d | %7s | %19s |\n", model, size, params, type ? type : "?",
                   threads, test, tps);
        }
        printf("\nkernels %s, KV cache %s, median of %llu reps after a warm-up\n", ix_kernels()->name,
               ix_kv_dtype_name(o.kv_dtype), (unsigned long long)o.reps);
        if (bw > 0) {
            printf("memory read bandwidth: %.1f GB/s (%d threads, %llu MiB buffer, median of %zu passes %s)\n",
                   bw * 1e-9, threads, (unsigned long long)o.bw_mib, bw_passes,
                   n_gen > 0 ? "interleaved with the decode test" : "between the repetitions");
            printf("decode bound: %.1f GB/s / %.3f GB of weights per token = %.1f tokens/s", bw * 1e-9,
                   (double)decode_bytes * 1e-9, bound);
            if (n_gen > 0) printf("; tg%d reached %.1f%% of it", n_gen, 100.0 * tg / bound);
            printf("\n");
        }
    }
    rc = 0;
done:
    bw_close(&bm);
    free(b.toks);
    ix_engine_destroy(b.e);
    ix_model_destroy(m);
    return rc;
}
