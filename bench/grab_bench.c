/*
 * grab_bench: what a decode matmul's grabs cost, and how the two plans for
 * splitting a run among threads compare (docs/kernels.md, "Threading").
 *
 * 1. Cold start per grab. One thread, M = 1, a packed W several times the
 *    last-level cache (N = 262144, K = 2048): the whole matmul in one call
 *    against the same rows in grabs of 64, 256 and 1024 rows (X quantized
 *    once, x_ready), best of -r runs. Each grab starts its lockstep streams
 *    with nothing in flight; the extra time per grab is printed.
 * 2. The plans, on the pool's threads: -l layers of TinyLlama's decode
 *    matmuls (Q, K, V in one run; O; gate and up in one run; down), one
 *    token = one pass over every layer, the weights far larger than the
 *    cache. Tokens alternate between the plan in use (steps that idle
 *    threads steal, one grab per thread) and the guided grabs without
 *    stealing (ix__kernels_matmul_guided), so the machine's bandwidth, which
 *    on a shared VM moves from minute to minute, falls on both alike.
 *    Printed: mean milliseconds per token each, and their ratio.
 * 3. Where a token's matmul time goes against the bound's read: the same
 *    layers' weights, tokens alternating between the decode matmuls (the
 *    plan in use), plain reads of the same bytes with the matmuls' run
 *    boundaries (one pool run per matmul run, each thread reading its
 *    share as four streams of 64-byte loads, the read `inferx bench` times
 *    for its bound), and one plain read of everything in a single run.
 *    Printed: GB/s of each, the run-by-run reads over the one read (what
 *    the joins between runs cost) and the matmuls over both (what the
 *    arithmetic while streaming costs).
 * 4. A core's arithmetic against its share of the bus: one M = 1 matmul
 *    over at least 256 MB (no joins, no short matrices), alternated with a
 *    plain read of the same bytes, each as GB/s a core; beside them the
 *    rate one thread's matmuls reach on 256 rows that stay in its L2, what
 *    the tile's arithmetic alone allows a core. The matmul keeps pace with
 *    the read only where that headroom covers the read and the core
 *    overlaps its arithmetic with the loads in flight.
 *
 * The weights sit on huge pages, as the model loader's packed copy does.
 *
 * usage: grab_bench [-w q4_0,q2_k,...] [-p parts] [-t threads] [-l layers] [-n tokens] [-r runs]
 *   defaults: q4_0,q2_k,q8_0; parts 1234; every core; 8 layers; 48 tokens a plan; 5 runs
 */
#include "inferx/kernels.h"
#include "kernels/kernels_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define E 2048   /* TinyLlama's width */
#define FF 5632  /* its FFN */
#define KVW 256  /* its K and V rows (4 heads of 64) */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float rndf(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)(g_rng >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

static void *xalloc(size_t n) {
    void *p = ix_aligned_alloc(64, n ? n : 1);
    if (!p) {
        fprintf(stderr, "grab_bench: no memory for %zu bytes\n", n);
        exit(1);
    }
    return p;
}

/* N x K of random weights of type t, packed, copies times over. */
static uint8_t *make_w(ix_dtype t, size_t N, size_t K, size_t copies, size_t *bytes) {
    const size_t rb = ix__w_row_bytes(t, K);
    *bytes = ix_kernels_packed_bytes(t, N, K);
    uint8_t *rows = xalloc(rb * N);
    /* on huge pages, as the model loader's packed weights (ix_aligned_calloc) */
    uint8_t *w = ix_aligned_calloc(64, *bytes * copies);
    if (!w) {
        fprintf(stderr, "grab_bench: no memory for %zu bytes\n", *bytes * copies);
        exit(1);
    }
    float *row = xalloc(K * sizeof *row);
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++) row[k] = rndf();
        ix_kernels_quantize_row(t, row, rows + n * rb, K);
    }
    if (ix_kernels_pack(t, rows, 0, N, K, 0, N, w) != IX_OK) {
        fprintf(stderr, "grab_bench: packing %s failed\n", ix_dtype_name(t));
        exit(1);
    }
    for (size_t c = 1; c < copies; c++) memcpy(w + c * *bytes, w, *bytes);
    ix_aligned_free(rows);
    ix_aligned_free(row);
    return w;
}

/* One M = 1 matmul on the packed N x K W at w: a random X, Y and scratch. */
typedef struct one_mm {
    ix_matmul mm;
    float *x;
} one_mm;

static one_mm one_open(ix_dtype t, const uint8_t *w, size_t N, size_t K) {
    one_mm o = {.x = xalloc(K * sizeof(float))};
    for (size_t k = 0; k < K; k++) o.x[k] = rndf();
    o.mm = (ix_matmul){.w_type = t, .w = w, .x = o.x, .y = xalloc(N * sizeof(float)), .M = 1, .N = N, .K = K,
                       .scratch = xalloc(ix_kernels_matmul_scratch_bytes(t, 1, K)), .w_packed = true};
    return o;
}

/* Runs it once on this thread; for a quantized W the later calls then take
 * X as quantized there (x_ready), so they time the tile alone. */
static void one_x_ready(one_mm *o) {
    if (ix_kernels_matmul(&o->mm, NULL) != IX_OK) {
        fprintf(stderr, "grab_bench: a matmul failed\n");
        exit(1);
    }
    if (ix__w_quantized(o->mm.w_type)) {
        o->mm.x = NULL;
        o->mm.x_ready = true;
    }
}

static void one_close(one_mm *o) {
    ix_aligned_free(o->x);
    ix_aligned_free(o->mm.y);
    ix_aligned_free(o->mm.scratch);
}

static void cold_starts(ix_dtype t, int runs) {
    const size_t N0 = 8192, copies = 32, N = N0 * copies, K = E, grabs[] = {64, 256, 1024};
    size_t bytes0;
    uint8_t *w = make_w(t, N0, K, copies, &bytes0); /* N0 rows quantized once, copied */
    const size_t bytes = bytes0 * copies;
    one_mm o = one_open(t, w, N, K);
    one_x_ready(&o);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < runs; r++)
        for (int v = 0; v < 4; v++) { /* 0: one call; then each grab size, alternated */
            const size_t g = v ? grabs[v - 1] : N;
            uint64_t t0 = ix_time_ns();
            for (size_t n0 = 0; n0 < N; n0 += g) {
                ix_matmul s = o.mm;
                s.w = w + n0 / IX__PK * (bytes / (N / IX__PK));
                s.y = o.mm.y + n0;
                s.N = g;
                ix_kernels_matmul(&s, NULL);
            }
            double dt = (double)(ix_time_ns() - t0) * 1e-9;
            if (dt < best[v]) best[v] = dt;
        }
    printf("%-7s one call: %6.2f ms (%.1f GB/s, %zu MB)", ix_dtype_name(t), best[0] * 1e3,
           (double)bytes / best[0] * 1e-9, bytes >> 20);
    for (int v = 1; v < 4; v++)
        printf(" | grabs of %4zu rows: +%.2f us a grab", grabs[v - 1],
               (best[v] - best[0]) / (double)(N / grabs[v - 1]) * 1e6);
    printf("\n");
    ix_aligned_free(w);
    one_close(&o);
}

/* One layer's weights: q, k, v, o, gate, up, down. */
enum { WQ, WK, WV, WO, WG, WU, WD, NW };
static const size_t k_shape[NW][2] = {{E, E}, {KVW, E}, {KVW, E}, {E, E}, {FF, E}, {FF, E}, {E, FF}};

/* `layers` layers of one type's decode matmuls: each weight's copies one
 * after another (w[i] + l * bytes[i]), the inputs and outputs they share. */
typedef struct layer_set {
    ix_dtype t;
    int layers;
    uint8_t *w[NW];
    size_t bytes[NW], total;
    float *xe, *xf, *y[NW];
    void *se, *sf;
} layer_set;

static void set_open(layer_set *s, ix_dtype t, int layers) {
    *s = (layer_set){.t = t, .layers = layers};
    for (int i = 0; i < NW; i++) {
        s->w[i] = make_w(t, k_shape[i][0], k_shape[i][1], (size_t)layers, &s->bytes[i]);
        s->total += s->bytes[i] * (size_t)layers;
        s->y[i] = xalloc(k_shape[i][0] * sizeof(float));
    }
    s->xe = xalloc(E * sizeof(float));
    s->xf = xalloc(FF * sizeof(float));
    for (size_t k = 0; k < E; k++) s->xe[k] = rndf();
    for (size_t k = 0; k < FF; k++) s->xf[k] = rndf();
    s->se = xalloc(ix_kernels_matmul_scratch_bytes(t, 1, E));
    s->sf = xalloc(ix_kernels_matmul_scratch_bytes(t, 1, FF));
}

static void set_close(layer_set *s) {
    for (int i = 0; i < NW; i++) {
        ix_aligned_free(s->w[i]);
        ix_aligned_free(s->y[i]);
    }
    ix_aligned_free(s->xe);
    ix_aligned_free(s->xf);
    ix_aligned_free(s->se);
    ix_aligned_free(s->sf);
}

/* Layer l's four decode runs: Q, K, V in one; O; gate and up in one; down. */
static void layer_run(const layer_set *s, int l, ix_pool *pool) {
    ix_matmul m[NW];
    for (int i = 0; i < NW; i++)
        m[i] = (ix_matmul){.w_type = s->t, .w = s->w[i] + (size_t)l * s->bytes[i], .x = i == WD ? s->xf : s->xe,
                           .y = s->y[i], .M = 1, .N = k_shape[i][0], .K = k_shape[i][1],
                           .scratch = i == WD ? s->sf : s->se, .w_packed = true};
    if (ix_kernels_matmul_n(&m[WQ], 3, pool) != IX_OK || ix_kernels_matmul(&m[WO], pool) != IX_OK ||
        ix_kernels_matmul_n(&m[WG], 2, pool) != IX_OK || ix_kernels_matmul(&m[WD], pool) != IX_OK) {
        fprintf(stderr, "grab_bench: a matmul failed\n");
        exit(1);
    }
}

static void plans(ix_dtype t, ix_pool *pool, int layers, int tokens) {
    layer_set s;
    set_open(&s, t, layers);
    double ms[2] = {0, 0};
    for (int tok = -2; tok < 2 * tokens; tok++) { /* two warm-up tokens, one a plan */
        const int plan = (tok + 2) % 2;            /* 0: steps and stealing, 1: guided */
        ix__kernels_matmul_guided(plan == 1);
        uint64_t t0 = ix_time_ns();
        for (int l = 0; l < layers; l++) layer_run(&s, l, pool);
        if (tok >= 0) ms[plan] += (double)(ix_time_ns() - t0) * 1e-6;
    }
    ix__kernels_matmul_guided(false);
    printf("%-7s %d layers (%zu MB), %d tokens a plan: stealing %.3f ms/token, guided %.3f; ratio %.3f\n",
           ix_dtype_name(t), layers, s.total >> 20, tokens, ms[0] / tokens, ms[1] / tokens, ms[0] / ms[1]);
    set_close(&s);
}

/* ---- 3. a token's matmuls against plain reads of the same bytes ---------- */

/* Byte ranges read on the pool's threads: each thread reads its 1/nth of
 * every range (whole 256-byte steps; the few bytes past the last go
 * unread) as four streams side by side, 64 bytes of each a step: the read
 * `inferx bench` times for its bound. */
#define RD_LAYERS 64 /* layers part 3 takes at most */
typedef struct rd_job {
    const uint8_t *p[NW]; /* every weight (the one read) or a run's */
    size_t n[NW], parts;
    uint64_t sink[64 * 8];
} rd_job;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t read4_avx512(const uint8_t *p, size_t part) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= part; i += 64) {
        a0 = _mm512_add_epi64(a0, _mm512_loadu_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_loadu_si512((const void *)(p + part + i)));
        a2 = _mm512_add_epi64(a2, _mm512_loadu_si512((const void *)(p + 2 * part + i)));
        a3 = _mm512_add_epi64(a3, _mm512_loadu_si512((const void *)(p + 3 * part + i)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}
#endif

static uint64_t read4(const uint8_t *p, size_t part) {
#if defined(__x86_64__)
    if (ix_cpu_supports(IX_ISA_AVX512)) return read4_avx512(p, part);
#endif
    uint64_t a = 0;
    for (size_t i = 0; i + 8 <= part; i += 8)
        for (size_t s = 0; s < 4; s++) {
            uint64_t v;
            memcpy(&v, p + s * part + i, 8);
            a += v;
        }
    return a;
}

static void rd_fn(void *ctx, int ith, int nth) {
    rd_job *j = ctx;
    uint64_t t = 0;
    for (size_t i = 0; i < j->parts; i++) {
        const size_t share = j->n[i] / (size_t)nth / 256 * 256;
        t += read4(j->p[i] + (size_t)ith * share, share / 4);
    }
    j->sink[(size_t)ith % 64 * 8] += t;
}

static void token_vs_reads(ix_dtype t, ix_pool *pool, int layers, int tokens) {
    /* the runs of a layer: [first, last) weights */
    static const int run_of[4][2] = {{WQ, WO}, {WO, WG}, {WG, WD}, {WD, NW}};
    if (layers > RD_LAYERS) layers = RD_LAYERS;
    layer_set s;
    set_open(&s, t, layers);
    static rd_job whole, runs[RD_LAYERS * 4];
    memset(&whole, 0, sizeof whole);
    memset(runs, 0, sizeof runs);
    for (int i = 0; i < NW; i++) { /* one pass over every weight */
        whole.p[whole.parts] = s.w[i];
        whole.n[whole.parts++] = s.bytes[i] * (size_t)layers;
    }
    for (int l = 0; l < layers; l++)
        for (int r = 0; r < 4; r++) {
            rd_job *j = &runs[l * 4 + r];
            for (int i = run_of[r][0]; i < run_of[r][1]; i++) {
                j->p[j->parts] = s.w[i] + (size_t)l * s.bytes[i];
                j->n[j->parts++] = s.bytes[i];
            }
        }
    double ms[3] = {0, 0, 0};
    for (int tok = -3; tok < 3 * tokens; tok++) { /* three warm-up tokens, one a way */
        const int way = (tok + 3) % 3; /* 0: the matmuls, 1: reads run by run, 2: one read */
        uint64_t t0 = ix_time_ns();
        if (way == 2) ix_pool_run(pool, rd_fn, &whole);
        for (int l = 0; l < layers && way < 2; l++) {
            if (way == 0) layer_run(&s, l, pool);
            else
                for (int r = 0; r < 4; r++) ix_pool_run(pool, rd_fn, &runs[l * 4 + r]);
        }
        if (tok >= 0) ms[way] += (double)(ix_time_ns() - t0) * 1e-6;
    }
    const double gb = (double)s.total * 1e-9 * tokens;
    printf("%-7s %d layers (%zu MB), %d tokens each: one read %.1f GB/s; reads run by run %.1f GB/s (%.3f); "
           "matmuls %.1f GB/s (%.3f of one read, %.3f of run by run)\n",
           ix_dtype_name(t), layers, s.total >> 20, tokens, gb / (ms[2] * 1e-3), gb / (ms[1] * 1e-3), ms[2] / ms[1],
           gb / (ms[0] * 1e-3), ms[2] / ms[0], ms[1] / ms[0]);
    set_close(&s);
}

/* ---- 4. a core's arithmetic against its share of the bus ---------------- */

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* GB/s of one thread's M = 1 matmuls on 256 x E weights (F16 / BF16: 128)
 * that stay in its L2 (a quarter to a half MiB): what the tile's arithmetic
 * alone allows a core, median of 21 batches of 400 calls. */
static double in_cache_rate(ix_dtype t) {
    size_t N = 256, bytes;
    while (N > 64 && ix_kernels_packed_bytes(t, N, E) > (600u << 10)) N -= 64; /* F16, BF16: 128 */
    uint8_t *w = make_w(t, N, E, 1, &bytes);
    one_mm o = one_open(t, w, N, E);
    one_x_ready(&o);
    double ns[21];
    for (int r = 0; r < 21; r++) {
        const uint64_t t0 = ix_time_ns();
        for (int i = 0; i < 400; i++) ix_kernels_matmul(&o.mm, NULL);
        ns[r] = (double)(ix_time_ns() - t0) / 400;
    }
    qsort(ns, 21, sizeof *ns, cmp_d);
    ix_aligned_free(w);
    one_close(&o);
    return (double)bytes / ns[10];
}

/* One M = 1 matmul over at least 256 MB of packed weights (the gate
 * matrix, copied) on the pool's threads, alternated with a plain read of
 * the same bytes (4 streams a thread), beside the in-cache rate: a core
 * that streams its share at the read's rate while it computes needs its
 * arithmetic to run that fast and overlap the loads. */
static void core_vs_bus(ix_dtype t, ix_pool *pool, int tokens) {
    const double cache = in_cache_rate(t);
    size_t bytes;
    const size_t copies = ((size_t)256 << 20) / ix_kernels_packed_bytes(t, FF, E) + 1, N = (size_t)FF * copies;
    uint8_t *w = make_w(t, FF, E, copies, &bytes);
    one_mm o = one_open(t, w, N, E); /* each matmul quantizes its X, as decode's do */
    static rd_job one;
    memset(&one, 0, sizeof one);
    one.p[0] = w;
    one.n[0] = bytes * copies;
    one.parts = 1;
    double ms[2] = {0, 0};
    for (int tok = -2; tok < 2 * tokens; tok++) { /* a warm-up each; 0: the matmul, 1: the read */
        const int way = (tok + 2) % 2;
        const uint64_t t0 = ix_time_ns();
        if (way == 0) {
            if (ix_kernels_matmul(&o.mm, pool) != IX_OK) {
                fprintf(stderr, "grab_bench: a matmul failed\n");
                exit(1);
            }
        } else ix_pool_run(pool, rd_fn, &one);
        if (tok >= 0) ms[way] += (double)(ix_time_ns() - t0) * 1e-6;
    }
    const int nth = ix_pool_n_threads(pool);
    const double gb = (double)one.n[0] * 1e-9 * tokens, rd = gb / (ms[1] * 1e-3) / nth, mm_gbs = gb / (ms[0] * 1e-3) / nth;
    printf("%-7s %zu MB, %d each; a core: read %.1f GB/s, matmul %.1f GB/s (%.3f of the read), "
           "in cache %.1f GB/s (%.2fx the read)\n",
           ix_dtype_name(t), one.n[0] >> 20, tokens, rd, mm_gbs, mm_gbs / rd, cache, cache / rd);
    ix_aligned_free(w);
    one_close(&o);
}

/* A weight type by its name, any case (q4_0, Q4_K). */
static bool type_named(const char *s, ix_dtype *out) {
    ix_dtype all[64];
    size_t n = ix_kernels_types(all, 64);
    for (size_t i = 0; i < n && i < 64; i++)
        if (!strcasecmp(s, ix_dtype_name(all[i]))) {
            *out = all[i];
            return true;
        }
    return false;
}

int main(int argc, char **argv) {
    const char *types = "q4_0,q2_k,q8_0", *parts = "1234";
    int threads = 0, layers = 8, tokens = 48, runs = 5;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: grab_bench [-w q4_0,q2_k,...] [-p parts] [-t threads] [-l layers] [-n tokens] [-r runs]\n"
                   "  -w  weight types (packable ones; default q4_0,q2_k,q8_0)\n"
                   "  -p  the parts to run, by number (default 1234)\n"
                   "  -t  pool threads for the plans (default: every core)\n"
                   "  -l  layers of TinyLlama's decode matmuls (default 8; part 3 takes at most 64)\n"
                   "  -n  tokens timed each way, alternated (default 48)\n"
                   "  -r  runs of the cold-start test, best taken (default 5)\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "grab_bench: %s needs a value (--help)\n", a);
            return 2;
        }
        if (!strcmp(a, "-w")) types = v;
        else if (!strcmp(a, "-p")) parts = v;
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-l")) layers = atoi(v);
        else if (!strcmp(a, "-n")) tokens = atoi(v);
        else if (!strcmp(a, "-r")) runs = atoi(v);
        else {
            fprintf(stderr, "grab_bench: unknown option %s (--help)\n", a);
            return 2;
        }
    }
    if (threads < 0 || layers < 1 || tokens < 1 || runs < 1) {
        fprintf(stderr, "grab_bench: -t, -l, -n and -r take positive counts\n");
        return 2;
    }
    if (strspn(parts, "1234") != strlen(parts) || !*parts) {
        fprintf(stderr, "grab_bench: -p takes part numbers 1 to 4 (e.g. -p 34)\n");
        return 2;
    }
    ix_pool *pool;
    if (ix_pool_create(&pool, threads) != IX_OK) {
        fprintf(stderr, "grab_bench: no thread pool\n");
        return 1;
    }
    printf("grab_bench: kernels %s, %d threads for the plans\n", ix_kernels()->name, ix_pool_n_threads(pool));
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    ix_dtype ts[32];
    int nt = 0;
    for (char *s = strtok(list, ","); s && nt < 32; s = strtok(NULL, ",")) {
        ix_dtype t;
        if (!type_named(s, &t) || !ix_kernels_packable(t, FF, E) || !ix_kernels_packable(t, E, FF)) {
            fprintf(stderr, "grab_bench: %s is not a packable weight type\n", s);
            return 2;
        }
        ts[nt++] = t;
    }
    if (strchr(parts, '1')) {
        printf("-- cold start per grab (one thread, M = 1, K = %d)\n", E);
        for (int i = 0; i < nt; i++) cold_starts(ts[i], runs);
    }
    if (strchr(parts, '2')) {
        printf("-- the plans (M = 1; ratio < 1: stealing faster)\n");
        for (int i = 0; i < nt; i++) plans(ts[i], pool, layers, tokens);
    }
    if (strchr(parts, '3')) {
        printf("-- a token's matmuls against plain reads of the same bytes (4 streams a thread, 64-byte loads)\n");
        for (int i = 0; i < nt; i++) token_vs_reads(ts[i], pool, layers, tokens);
    }
    if (strchr(parts, '4')) {
        printf("-- a core's arithmetic against its share of the bus (M = 1, one matmul of >= 256 MB; in cache: "
               "one thread, W in L2)\n");
        for (int i = 0; i < nt; i++) core_vs_bus(ts[i], pool, tokens);
    }
    ix_pool_destroy(pool);
    return 0;
}
