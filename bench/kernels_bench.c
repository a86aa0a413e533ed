/*
 * kernels_bench: matmul throughput per weight type and ISA path at the
 * TinyLlama-1.1B shapes (K = 2048; N = 2048, 256, 5632, 32000; the FFN down
 * projection K = 5632), for decode (M = 1: reported as achieved GB/s against
 * the read bandwidth measured in the same run) and prefill (M = 128 / 512:
 * GFLOP/s), plus a matmul-only tokens/s figure for the whole model.
 *
 * Decode reads its weights from a set of copies larger than the last-level
 * cache, as a real forward pass over 22 layers would; prefill reuses one copy
 * (it is compute-bound). Each figure is the median of several timed runs.
 *
 * -l packed: F16 / Q8_0 / Q4_0 weights in the packed 16-row layout the model
 * loader gives them (decode then runs the four-group lockstep tiles); rows
 * (the default): the GGUF row layout.
 *
 * -d M: decode with M X rows (default 1): speculative verification's k + 1
 * rows, which read the weights once as decode does; reported the same way.
 *
 * -w: weight types by name (f32,q4_k,...); by default every type that has
 * a kernel of its own on the path (a type on its generic fallback is timed
 * only when named).
 *
 * usage: kernels_bench [-t threads] [-i generic|avx2|avx2-novnni|avx512|avx512-bw|all]
 *                      [-w f32,f16,bf16,q8_0,q4_0,...] [-m decode|prefill|all]
 *                      [-r runs] [-s working-set MiB] [-l rows|packed] [-d decode rows]
 */
#include "inferx/kernels.h"
#include "kernels/kernels_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    const char *name;
    size_t N, K, per_layer; /* how many such matmuls one layer runs */
} shape;

/* TinyLlama-1.1B: hidden 2048, 32 q heads / 4 kv heads of 64, FFN 5632, vocab 32000. */
static const shape k_shapes[] = {
    {"attn_q/o", 2048, 2048, 2}, {"attn_k/v", 256, 2048, 2}, {"ffn_gate/up", 5632, 2048, 2},
    {"ffn_down", 2048, 5632, 1}, {"output", 32000, 2048, 0},
};
#define N_LAYERS 22

typedef struct opts {
    int threads, runs;
    size_t set_mib, decode_m;
    bool decode, prefill, packed;
    /* + the variants without VNNI where the CPU has it: AVX-512BW, AVX2 */
    bool isa[IX_ISA_COUNT + 2];
    bool w_given;
    bool wtype[32]; /* by index in k_types */
} opts;

/* The weight types the kernels read, and their names in lower case. */
static ix_dtype k_types[32];
static char k_type_names[32][16];
static size_t n_types;

static void list_types(void) {
    n_types = ix_kernels_types(k_types, 32);
    for (size_t i = 0; i < n_types; i++) {
        const char *n = ix_dtype_name(k_types[i]);
        size_t j = 0;
        for (; n[j] && j < sizeof k_type_names[i] - 1; j++)
            k_type_names[i][j] = (char)(n[j] >= 'A' && n[j] <= 'Z' ? n[j] - 'A' + 'a' : n[j]);
        k_type_names[i][j] = 0;
    }
}

/* -w's comma-separated names into o->wtype. */
static bool parse_types(const char *v, opts *o) {
    while (*v) {
        size_t len = strcspn(v, ","), i = 0;
        for (; i < n_types; i++)
            if (strlen(k_type_names[i]) == len && !strncmp(v, k_type_names[i], len)) break;
        if (i == n_types) return false;
        o->wtype[i] = true;
        v += len + (v[len] == ',');
    }
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- bandwidth baseline ---------------------------------------------------------- */
typedef struct bw_ctx {
    const uint64_t *buf;
    size_t n; /* uint64 words */
    uint64_t sink[64];
} bw_ctx;

/* Each thread reads its share as READ_STREAMS parts side by side, as
 * `inferx bench` does: one forward stream per core under-reports the memory
 * system (docs/performance.md). The few words past the last whole step of
 * each part are read after it. */
#define READ_STREAMS 4

static void read_fn(void *ctx, int ith, int nth) {
    bw_ctx *c = ctx;
    size_t per = c->n / (size_t)nth, lo = per * (size_t)ith, hi = ith == nth - 1 ? c->n : lo + per;
    size_t part = (hi - lo) / READ_STREAMS / 8 * 8;
    /* eight independent chains so the loop is bound by loads, not adds */
    uint64_t a[8] = {0};
    for (size_t i = 0; i < part; i += 8)
        for (size_t s = 0; s < READ_STREAMS; s++)
            for (int j = 0; j < 8; j++) a[j] += c->buf[lo + s * part + i + (size_t)j];
    for (size_t i = lo + READ_STREAMS * part; i < hi; i++) a[i % 8] += c->buf[i];
    c->sink[ith] = a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}

typedef struct cp_ctx {
    uint8_t *dst;
    const uint8_t *src;
    size_t n;
} cp_ctx;

static void copy_fn(void *ctx, int ith, int nth) {
    cp_ctx *c = ctx;
    size_t per = c->n / (size_t)nth, lo = per * (size_t)ith, hi = ith == nth - 1 ? c->n : lo + per;
    memcpy(c->dst + lo, c->src + lo, hi - lo);
}

static void measure_bandwidth(ix_pool *pool, int runs, double *read_gbs, double *copy_gbs) {
    size_t bytes = (size_t)512 << 20;
    uint64_t *buf = ix_aligned_alloc(64, bytes), *dst = ix_aligned_alloc(64, bytes);
    if (!buf || !dst) {
        fprintf(stderr, "kernels_bench: no memory for the bandwidth buffers\n");
        exit(1);
    }
    for (size_t i = 0; i < bytes / 8; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    memset(dst, 1, bytes);
    double t[32];
    bw_ctx rc = {.buf = buf, .n = bytes / 8};
    for (int r = 0; r < runs; r++) {
        uint64_t t0 = ix_time_ns();
        ix_pool_run(pool, read_fn, &rc);
        t[r] = (double)(ix_time_ns() - t0) * 1e-9;
    }
    *read_gbs = (double)bytes / median(t, runs) * 1e-9;
    cp_ctx cc = {.dst = (uint8_t *)dst, .src = (const uint8_t *)buf, .n = bytes};
    for (int r = 0; r < runs; r++) {
        uint64_t t0 = ix_time_ns();
        ix_pool_run(pool, copy_fn, &cc);
        t[r] = (double)(ix_time_ns() - t0) * 1e-9;
    }
    *copy_gbs = 2.0 * (double)bytes / median(t, runs) * 1e-9; /* read + write */
    ix_aligned_free(buf);
    ix_aligned_free(dst);
}

/* ---- pool handoff ------------------------------------------------------------------ */
typedef struct busy_ctx {
    uint64_t work_ns;
    _Atomic int by_worker; /* slots with ith > 0 that a worker (not the caller) ran */
    pthread_t caller;
} busy_ctx;

static void busy_fn(void *ctx, int ith, int nth) {
    busy_ctx *c = ctx;
    (void)nth;
    uint64_t t0 = ix_time_ns();
    while (ix_time_ns() - t0 < c->work_ns) {
    }
    if (ith > 0 && !pthread_equal(pthread_self(), c->caller)) atomic_fetch_add(&c->by_worker, 1);
}

/* Microseconds of overhead per ix_pool_run whose participants each do
 * work_us of work, and the share of worker slots that workers really ran
 * (the rest the caller ran itself, see pool.c). */
static double measure_handoff(ix_pool *pool, int runs, double work_us, double *worker_share) {
    double t[32];
    busy_ctx c = {.work_ns = (uint64_t)(work_us * 1e3), .caller = pthread_self()};
    atomic_init(&c.by_worker, 0);
    const int n = 2000;
    for (int r = 0; r < runs; r++) {
        uint64_t t0 = ix_time_ns();
        for (int i = 0; i < n; i++) ix_pool_run(pool, busy_fn, &c);
        t[r] = (double)(ix_time_ns() - t0) * 1e-3 / n - work_us;
    }
    int slots = runs * n * (ix_pool_n_threads(pool) - 1);
    *worker_share = slots ? (double)atomic_load(&c.by_worker) / slots : 1.0;
    return median(t, runs);
}

/* ---- matmul ----------------------------------------------------------------------- */
static uint64_t g_rng = 88172645463325252ull;
static float rndf(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

/* One weight of (N, K) copied until the set reaches min_bytes. */
typedef struct wset {
    uint8_t *data;
    size_t row_bytes, bytes, copies;
    bool packed; /* the copies are in ix_kernels_pack's layout */
} wset;

static wset make_wset(ix_dtype t, size_t N, size_t K, size_t min_bytes, bool packed) {
    wset s;
    s.row_bytes = ix__w_row_bytes(t, K);
    s.packed = packed && ix_kernels_packable(t, N, K);
    s.bytes = s.packed ? ix_kernels_packed_bytes(t, N, K) : s.row_bytes * N;
    s.copies = (min_bytes + s.bytes - 1) / s.bytes;
    if (s.copies == 0) s.copies = 1;
    s.data = ix_aligned_alloc(64, s.bytes * s.copies);
    if (!s.data) {
        fprintf(stderr, "kernels_bench: no memory for %zu bytes of weights\n", s.bytes * s.copies);
        exit(1);
    }
    float *row = malloc(K * sizeof *row);
    uint8_t *rows = s.packed ? malloc(s.row_bytes * N) : s.data;
    if (!row || !rows) {
        fprintf(stderr, "kernels_bench: out of memory\n");
        exit(1);
    }
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++) row[k] = rndf();
        ix_kernels_quantize_row(t, row, rows + n * s.row_bytes, K);
    }
    if (s.packed) {
        if (ix_kernels_pack(t, rows, 0, N, K, 0, N, s.data) != IX_OK) {
            fprintf(stderr, "kernels_bench: packing failed\n");
            exit(1);
        }
        free(rows);
    }
    free(row);
    for (size_t c = 1; c < s.copies; c++) memcpy(s.data + c * s.bytes, s.data, s.bytes);
    return s;
}

/* Seconds per matmul, median of runs; each run sweeps the copies. For decode
 * each run is preceded by a plain read of the same bytes on the same threads,
 * so the bandwidth ratio compares like with like even while other work on
 * the machine comes and goes. *read_s: seconds per copy read (0 if none). */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* *cpu_s: median CPU seconds of the calling thread per matmul, meaningful
 * with one thread only (it excludes time the OS gave to other processes). */
static double time_matmul(const ix_kernel_table *kt, ix_pool *pool, ix_dtype t, const wset *ws,
                          size_t M, size_t N, size_t K, const float *x, float *y, void *scratch,
                          int runs, double *read_s, double *cpu_s) {
    ix_matmul mm = {.w_type = t, .x = x, .y = y, .M = M, .N = N, .K = K, .scratch = scratch,
                    .w_packed = ws->packed};
    mm.w = ws->data;
    uint64_t t0 = ix_time_ns();
    ix__kernels_matmul_with(kt, &mm, pool); /* warm-up and probe */
    double one = (double)(ix_time_ns() - t0) * 1e-9;
    /* at least one sweep of the copies and ~30 ms per run */
    size_t calls = (size_t)(0.03 / (one > 1e-7 ? one : 1e-7)) + 1;
    if (calls < ws->copies) calls = ws->copies;
    if (calls > 20000) calls = 20000;
    double tr[64], tb[64], tc[64];
    bw_ctx rc = {.buf = (const uint64_t *)(const void *)ws->data, .n = ws->bytes * ws->copies / 8};
    for (int r = 0; r < runs; r++) {
        if (read_s) {
            t0 = ix_time_ns();
            ix_pool_run(pool, read_fn, &rc);
            tb[r] = (double)(ix_time_ns() - t0) * 1e-9 / (double)ws->copies;
        }
        double c0 = thread_cpu_s();
        t0 = ix_time_ns();
        for (size_t c = 0; c < calls; c++) {
            mm.w = ws->data + (c % ws->copies) * ws->bytes;
            ix__kernels_matmul_with(kt, &mm, pool);
        }
        tr[r] = (double)(ix_time_ns() - t0) * 1e-9 / (double)calls;
        tc[r] = (thread_cpu_s() - c0) / (double)calls;
    }
    if (read_s) *read_s = median(tb, runs);
    *cpu_s = median(tc, runs);
    return median(tr, runs);
}

static bool parse_opts(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->runs = 5;
    o->set_mib = 384;
    o->decode_m = 1;
    o->decode = o->prefill = true;
    bool isa_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return false;
        i++;
        if (!strcmp(a, "-t")) o->threads = atoi(v);
        else if (!strcmp(a, "-r")) o->runs = atoi(v);
        else if (!strcmp(a, "-s")) o->set_mib = (size_t)atol(v);
        else if (!strcmp(a, "-d")) {
            long d = atol(v);
            if (d < 1 || d > 64) return false;
            o->decode_m = (size_t)d;
        }
        else if (!strcmp(a, "-l")) {
            if (strcmp(v, "rows") && strcmp(v, "packed")) return false;
            o->packed = !strcmp(v, "packed");
        }
        else if (!strcmp(a, "-m")) {
            o->decode = !strcmp(v, "decode") || !strcmp(v, "all");
            o->prefill = !strcmp(v, "prefill") || !strcmp(v, "all");
        } else if (!strcmp(a, "-i")) {
            isa_given = true;
            if (!strcmp(v, "all")) {
                for (int k = 1; k <= IX_ISA_COUNT + 1; k++) o->isa[k] = true;
            } else if (!strcmp(v, "avx512-bw")) {
                o->isa[IX_ISA_COUNT] = true;
            } else if (!strcmp(v, "avx2-novnni")) {
                o->isa[IX_ISA_COUNT + 1] = true;
            } else {
                ix_isa isa;
                if (ix_isa_parse(v, &isa) != IX_OK) return false;
                o->isa[isa] = true;
            }
        } else if (!strcmp(a, "-w")) {
            o->w_given = true;
            if (!parse_types(v, o)) return false;
        } else return false;
    }
    if (o->runs < 1) o->runs = 1;
    if (o->runs > 31) o->runs = 31;
    if (!isa_given) /* every vector path; generic only on request (it is slow) */
        for (int k = 1; k <= IX_ISA_COUNT + 1; k++) o->isa[k] = true;
    return true;
}

int main(int argc, char **argv) {
    opts o;
    list_types();
    if (!parse_opts(argc, argv, &o)) {
        fprintf(stderr, "usage: kernels_bench [-t threads] [-i generic|avx2|avx2-novnni|avx512|avx512-bw|all] "
                        "[-w f32,f16,bf16,q8_0,q4_0,...] [-m decode|prefill|all] [-r runs] [-s MiB] "
                        "[-l rows|packed] [-d decode rows 1..64]\n");
        return 2;
    }
    ix_pool *pool;
    if (ix_pool_create(&pool, o.threads) != IX_OK) return 1;
    int nth = ix_pool_n_threads(pool);
    char feat[256];
    printf("kernels_bench: %d thread(s), cpu: %s\n", nth, ix_cpu_features_str(feat, sizeof feat));

    double read_gbs, copy_gbs;
    measure_bandwidth(pool, o.runs, &read_gbs, &copy_gbs);
    printf("baseline (512 MiB, %d threads): read %.1f GB/s, memcpy %.1f GB/s (read+write)\n", nth,
           read_gbs, copy_gbs);
    double share, ho = measure_handoff(pool, o.runs, 2.0, &share);
    printf("pool handoff (%d threads, 2 us of work each): %.2f us overhead per run, %.0f%% of worker "
           "slots run by workers\n",
           nth, ho, 100.0 * share);
    printf("weights in the %s layout; decode lines: %% of read = a plain read of the same weight bytes, "
           "timed next to each run\n\n",
           o.packed ? "packed" : "row");

    size_t maxM = o.prefill ? 512 : o.decode_m, maxK = 5632, maxN = 32000;
    float *x = ix_aligned_alloc(64, maxM * maxK * sizeof *x);
    float *y = ix_aligned_alloc(64, maxM * maxN * sizeof *y);
    void *scratch = ix_aligned_alloc(64, ix_kernels_matmul_scratch_bytes(IX_DTYPE_Q8_0, maxM, maxK));
    if (!x || !y || !scratch) return 1;
    for (size_t i = 0; i < maxM * maxK; i++) x[i] = rndf();

    for (int isa_i = 0; isa_i <= IX_ISA_COUNT + 1; isa_i++) {
        if (!o.isa[isa_i]) continue;
        /* the tables without VNNI on a CPU that has it (else the same as the plain ISA) */
        bool bw_variant = isa_i == IX_ISA_COUNT, avx2_plain = isa_i == IX_ISA_COUNT + 1;
        ix_isa isa = bw_variant ? IX_ISA_AVX512 : avx2_plain ? IX_ISA_AVX2 : (ix_isa)isa_i;
        if (!ix_kernels_table(isa) || ix_cpu_force_isa(isa) != IX_OK) continue;
        if (bw_variant && !ix_cpu_features_get()->avx512vnni) continue;
        if (avx2_plain && !ix_cpu_features_get()->avx_vnni) continue;
        ix_kernels_init();
        const ix_kernel_table *kt = ix_kernels();
#if defined(IX_KERNELS_HAVE_X86)
        if (bw_variant) kt = ix__kernels_avx512(false);
        if (avx2_plain) kt = ix__kernels_avx2(false);
#endif
        for (size_t ti = 0; ti < n_types; ti++) {
            ix_dtype t = k_types[ti];
            bool own = kt->path == IX__PATH_GENERIC || ix__wtype_of(t)->mm[kt->path];
            if (o.w_given ? !o.wtype[ti] : !own) continue;
            if ((bw_variant || avx2_plain) && !ix__w_quantized(t)) continue; /* float paths are shared */
            double tok_time[2] = {0, 0};        /* decode, prefill-512: s per token */
            for (size_t si = 0; si < IX_ARRAY_LEN(k_shapes); si++) {
                const shape *sh = &k_shapes[si];
                const size_t Ms[3] = {o.decode_m, 128, 512};
                for (int mi = 0; mi < 3; mi++) {
                    size_t M = Ms[mi];
                    bool dec = mi == 0; /* reads its weights from the large set */
                    if ((dec && !o.decode) || (!dec && !o.prefill)) continue;
                    if (!dec && sh->per_layer == 0) continue; /* output head: decode only */
                    if (isa == IX_ISA_GENERIC && !dec) continue;
                    wset ws = make_wset(t, sh->N, sh->K, dec ? o.set_mib << 20 : 0, o.packed);
                    double rd = 0, cpu = 0;
                    double sec = time_matmul(kt, pool, t, &ws, M, sh->N, sh->K, x, y, scratch, o.runs,
                                             dec ? &rd : NULL, &cpu);
                    double flops = 2.0 * (double)M * (double)sh->N * (double)sh->K;
                    double gbs = (double)ws.bytes / sec * 1e-9;
                    if (dec)
                        printf("%-12s %-5s %-12s M=%-4zu N=%-6zu K=%-5zu %9.1f us %7.1f GFLOP/s %6.1f GB/s "
                               "= %3.0f%% of read (%5.1f GB/s)\n",
                               kt->name, k_type_names[ti], sh->name, M, sh->N, sh->K, sec * 1e6,
                               flops / sec * 1e-9, gbs, 100.0 * rd / sec, (double)ws.bytes / rd * 1e-9);
                    else if (nth == 1)
                        printf("%-12s %-5s %-12s M=%-4zu N=%-6zu K=%-5zu %9.1f us %7.1f GFLOP/s "
                               "(%.1f per CPU second)\n",
                               kt->name, k_type_names[ti], sh->name, M, sh->N, sh->K, sec * 1e6,
                               flops / sec * 1e-9, flops / cpu * 1e-9);
                    else
                        printf("%-12s %-5s %-12s M=%-4zu N=%-6zu K=%-5zu %9.1f us %7.1f GFLOP/s\n", kt->name,
                               k_type_names[ti], sh->name, M, sh->N, sh->K, sec * 1e6,
                               flops / sec * 1e-9);
                    fflush(stdout);
                    double reps = sh->per_layer ? (double)(sh->per_layer * N_LAYERS) : 1.0;
                    if (dec) tok_time[0] += sec * reps; /* a step of decode_m rows */
                    if (M == 512) tok_time[1] += sec * reps / 512.0;
                    ix_aligned_free(ws.data);
                }
            }
            if (o.decode && o.prefill && isa != IX_ISA_GENERIC)
                printf("%-12s %-5s TinyLlama-1.1B matmuls only: decode %.1f tok/s, prefill(512) %.0f "
                       "tok/s\n\n",
                       kt->name, k_type_names[ti], 1.0 / tok_time[0], 1.0 / tok_time[1]);
            else
                printf("\n");
        }
    }
    ix_aligned_free(x);
    ix_aligned_free(y);
    ix_aligned_free(scratch);
    ix_pool_destroy(pool);
    return 0;
}
