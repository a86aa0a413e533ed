/*
 * stream_bench: what holds a core that streams weights while it computes
 * (docs/kernels.md, "Scales inside the stream").
 *
 * Every thread reads its share of a buffer far larger than the last-level
 * cache in one of several orders, with or without Q4_0's decode arithmetic
 * on each 64-byte line (two masks and two vpdpbusd, a per-block epilogue
 * with the fp16 scale), and each order is timed in every round beside a
 * plain read, the rounds alternating the orders. Printed per order: the
 * median GB/s and the median of its per-round ratio to the plain read.
 *
 * The data is laid out as packed Q4_0 groups (16 rows, K = 2048: 64 blocks
 * of 256 code bytes and 32 bytes of scales each); the orders are those the
 * packed decode tile has had:
 *   plain           four long streams a thread, loads only (the baseline)
 *   plain/32B       the same four streams, 128 bytes of each a step in
 *                   32-byte loads: what `inferx bench` timed for its decode
 *                   bound until this bench found it 4-5% slower than plain
 *   long+arith      the same four streams, the arithmetic on every line
 *   tiles/apart     each group's codes, then its scales (2 KiB); four
 *                   adjacent groups side by side, then the next four; each
 *                   stream prefetching 2 KiB ahead and on into the next
 *                   tile (the layout and walk before 1b66235)
 *   tiles/inline    the same walk, each block's scales after its codes
 *   runs/apart      scales apart, each of the four streams a run of
 *                   adjacent groups (a quarter of the share), prefetching
 *   runs/inline     scales inline, runs of groups: the current layout and
 *                   walk; with and without the 2 KiB prefetch
 *   plain+pf t0/t1  the plain read with the tile's software prefetch (each
 *                   line, 2 KiB ahead, into L1 / into L2) and no
 *                   arithmetic: what the prefetch instructions alone cost
 *   pf+Q4 arith     plain+pf t0 with Q4_0's arithmetic on each line
 *   pf+4 ops        plain+pf t0 with four more vector operations a line
 *                   (adds and xors) that do not touch the loaded data: what
 *                   executing more instructions per line costs the stream
 *   pf+Q4 split     pf+Q4 arith on lines read 32 bytes off, every load
 *                   across two lines
 *   pf+Q8 / F16     plain+pf t0 with Q8_0's arithmetic on each line (the
 *                   sign flip, one vpdpbusd), or F16's at one X row (two
 *                   vcvtph2ps of 16 halves, two FMAs)
 *   Q8 tile loop    Q8_0's lockstep decode tile on 544-byte units, each
 *                   block's lines prefetched by a loop (before 2026-12-05)
 *   Q8 tile pairs   the same, two units' 17 lines prefetched straight-line
 *                   at every even block (the tile now)
 *   Q8 pairs -epi   pairs without the per-block epilogue
 *   Q8 pairs 512B   pairs on 512-byte units: the same instructions over 6%
 *                   fewer bytes
 *
 * Each order is timed between two plain reads and divided by their mean,
 * the orders rotating from round to round (the bandwidth drifts within a
 * round; a fixed order put the last orders a few percent lower).
 *
 * x86-64 with AVX-512 VNNI only; elsewhere it says so and exits 0.
 *
 * usage: stream_bench [-t threads] [-r rounds] [-s MiB] [-o NAME,NAME...]
 *   defaults: every core, 7 rounds, 1024 MiB, every order; -o times only
 *   the orders named (and the plain read)
 */
#include "inferx/kernels.h"
#include "kernels/kernels_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define S 4          /* streams a thread */
#define NB 64        /* blocks of 32 a group (K = 2048) */
#define CB 256       /* Q4_0 code bytes a block and group */
#define SB 32        /* scale bytes a block and group */
#define UB (CB + SB) /* a block's unit, scales inline */
#define GB (NB * UB) /* a group's bytes either way */
#define PF 2048

typedef enum { O_PLAIN, O_BOUND, O_LONG, O_TILES, O_RUNS, O_PLAINPF, O_PLAINPF1, O_PF_Q4, O_PF_ADDS, O_PF_SPLIT, O_PF_Q8, O_PF_F16, O_Q8_TILE } order;

enum { Q8T_LOOP, Q8T_PAIRS, Q8T_NOEPI, Q8T_512 }; /* the Q8 tile's modes (q8_tile) */

typedef struct variant {
    const char *name;
    order o;
    bool inl, pf;
    int mode; /* O_Q8_TILE: Q8T_* */
} variant;

static const variant k_variants[] = {
    {"plain", O_PLAIN, false, false, 0},          {"plain/32B", O_BOUND, false, false, 0},
    {"long+arith", O_LONG, false, false, 0},
    {"tiles/apart", O_TILES, false, true, 0},     {"tiles/inline", O_TILES, true, true, 0},
    {"runs/apart", O_RUNS, false, true, 0},       {"runs/inline", O_RUNS, true, false, 0},
    {"runs/inline+pf", O_RUNS, true, true, 0},
    {"plain+pf t0", O_PLAINPF, false, true, 0},
    {"plain+pf t1", O_PLAINPF1, false, true, 0},
    {"pf+Q4 arith", O_PF_Q4, false, true, 0},
    {"pf+4 ops", O_PF_ADDS, false, true, 0},
    {"pf+Q4 split", O_PF_SPLIT, false, true, 0},
    {"pf+Q8 arith", O_PF_Q8, false, true, 0},
    {"pf+F16 arith", O_PF_F16, false, true, 0},
    {"Q8 tile loop", O_Q8_TILE, false, true, Q8T_LOOP},
    {"Q8 tile pairs", O_Q8_TILE, false, true, Q8T_PAIRS},
    {"Q8 pairs -epi", O_Q8_TILE, false, true, Q8T_NOEPI},
    {"Q8 pairs 512B", O_Q8_TILE, false, true, Q8T_512},
};
#define N_VARIANTS (sizeof k_variants / sizeof k_variants[0])

typedef struct job {
    const uint8_t *buf;
    size_t bytes;
    const variant *v;
    float sink[64 * 16];
} job;

#define TGT __attribute__((target("avx512f,avx512bw,avx512vnni"))) static

/* Four streams of 64-byte loads; hint 3 or 2: each stream's lines also
 * prefetched PF ahead as the tile does (into L1 / into L2), else none. And
 * work on each line: W_Q4 Q4_0's arithmetic on it (two masks, two
 * vpdpbusd), W_ADDS four operations that do not depend on it, W_SPLIT Q4_0's
 * arithmetic on lines read 32 bytes off (every load across two lines), W_Q8
 * Q8_0's (the sign flip, one vpdpbusd), W_F16 F16's at one X row. */
enum { W_NONE, W_Q4, W_ADDS, W_SPLIT, W_Q8, W_F16 };
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vnni"))) float
plain_read(const uint8_t *p, size_t part, int hint, int work) {
    const __m512i lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8((char)0xf0);
    const __m512i xl = _mm512_set1_epi32(0x01020304), xh = _mm512_set1_epi32(0x05060708);
    const size_t off = work == W_SPLIT ? 32 : 0;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    const __m512 x0 = _mm512_set1_ps(0.5f), x1 = _mm512_set1_ps(0.25f);
    __m512i a[S], d[S], k = _mm512_set1_epi32(0x11223344);
    __m512 f[S];
    for (int s = 0; s < S; s++) {
        a[s] = d[s] = _mm512_setzero_si512();
        f[s] = _mm512_setzero_ps();
    }
    for (size_t i = 0; i + 256 + off <= part; i += 256) {
        for (int j = 0; j < 4 && hint; j++)
            for (int s = 0; s < S; s++) {
                const uint8_t *q = p + (size_t)s * part + i + 64 * (size_t)j + PF;
                if (hint == 3) __builtin_prefetch(q, 0, 3);
                else __builtin_prefetch(q, 0, 2);
            }
        IX__UNROLL(4)
        for (int j = 0; j < 4; j++)
            IX__UNROLL(4)
            for (int s = 0; s < S; s++) {
                const uint8_t *q = p + (size_t)s * part + i + off + 64 * (size_t)j;
                if (work == W_F16) { /* the line as 32 halves, two k of 16 rows: F16's M = 1 work */
                    f[s] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)q)), x0, f[s]);
                    f[s] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)(q + 32))), x1, f[s]);
                    continue;
                }
                const __m512i v = _mm512_loadu_si512((const void *)q);
                if (work == W_Q8) { /* Q8_0's: the sign flip, one vpdpbusd */
                    a[s] = _mm512_dpbusd_epi32(a[s], _mm512_xor_si512(v, flip), xl);
                    continue;
                }
                if (work == W_Q4 || work == W_SPLIT) {
                    a[s] = _mm512_dpbusd_epi32(a[s], _mm512_and_si512(v, lo), xl);
                    d[s] = _mm512_dpbusd_epi32(d[s], _mm512_and_si512(v, hi), xh);
                    continue;
                }
                a[s] = _mm512_add_epi32(a[s], v);
                if (work == W_ADDS) /* four operations the compiler cannot fold */
                    d[s] = _mm512_add_epi32(_mm512_xor_si512(_mm512_add_epi32(_mm512_xor_si512(d[s], k), lo), xl), xh);
            }
        k = _mm512_add_epi32(k, d[0]);
    }
    float t = 0;
    for (int s = 0; s < S; s++) t += (float)_mm512_reduce_add_epi32(_mm512_add_epi32(a[s], d[s])) + _mm512_reduce_add_ps(f[s]);
    return t;
}
TGT float plain(const uint8_t *p, size_t part) { return plain_read(p, part, 0, W_NONE); }
TGT float plain_pf(const uint8_t *p, size_t part, bool t1) {
    return t1 ? plain_read(p, part, 2, W_NONE) : plain_read(p, part, 3, W_NONE);
}
TGT float pf_work(const uint8_t *p, size_t part, int work) {
    switch (work) {
    case W_Q4: return plain_read(p, part, 3, W_Q4);
    case W_ADDS: return plain_read(p, part, 3, W_ADDS);
    case W_SPLIT: return plain_read(p, part, 3, W_SPLIT);
    case W_Q8: return plain_read(p, part, 3, W_Q8);
    default: return plain_read(p, part, 3, W_F16);
    }
}

/* As cmd_bench.c's read_avx2 (its read without AVX-512). */
TGT float bound_read(const uint8_t *p, size_t part) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= part; i += 128)
        for (size_t s = 0; s < S; s++) {
            const uint8_t *q = p + s * part + i;
            a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)q));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(q + 32)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(q + 64)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(q + 96)));
        }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return (float)(_mm256_extract_epi64(a0, 0) ^ _mm256_extract_epi64(a0, 3));
}

/* Q4_0's arithmetic on the four blocks at c + s * gs (codes) and
 * sc + s * gs (scales), as the lockstep tile does it. */
TGT void q4_blocks(const uint8_t *c, const uint8_t *sc, size_t gs, __m512 acc[S]) {
    const __m512i lo = _mm512_set1_epi8(0x0f), hi = _mm512_set1_epi8((char)0xf0);
    const __m512i xl = _mm512_set1_epi32(0x01020304), xh = _mm512_set1_epi32(0x05060708);
    __m512i dl[S], dh[S];
    for (int s = 0; s < S; s++) dl[s] = dh[s] = _mm512_setzero_si512();
    IX__UNROLL(4)
    for (int j = 0; j < 4; j++)
        IX__UNROLL(4)
        for (int s = 0; s < S; s++) {
            const __m512i v = _mm512_loadu_si512((const void *)(c + (size_t)s * gs + 64 * (size_t)j));
            dl[s] = _mm512_dpbusd_epi32(dl[s], _mm512_and_si512(v, lo), xl);
            dh[s] = _mm512_dpbusd_epi32(dh[s], _mm512_and_si512(v, hi), xh);
        }
    IX__UNROLL(4)
    for (int s = 0; s < S; s++) {
        const __m512i dot = _mm512_add_epi32(dl[s], _mm512_srai_epi32(dh[s], 4));
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(sc + (size_t)s * gs)));
        acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, acc[s]);
    }
}

TGT float long_arith(const uint8_t *p, size_t part) {
    __m512 acc[S];
    for (int s = 0; s < S; s++) acc[s] = _mm512_setzero_ps();
    for (size_t i = 0; i + UB <= part; i += UB) q4_blocks(p + i, p + i + CB, part, acc);
    float t = 0;
    for (int s = 0; s < S; s++) t += _mm512_reduce_add_ps(acc[s]);
    return t;
}

/* Block b of a group at g: its codes and its scales. */
static inline size_t code_at(bool inl, size_t b) { return inl ? b * UB : b * CB; }
static inline size_t scale_at(bool inl, size_t b) { return inl ? b * UB + CB : NB * CB + b * SB; }

/* Byte off of a stream whose group at p is len bytes long, the group it
 * reads next `next` bytes on: past the group's end, into that one. */
static inline const uint8_t *pf_at(const uint8_t *p, size_t off, size_t len, size_t next) {
    return off < len ? p + off : p + next + (off - len);
}

/* Groups [0, ng) of the share at p: tiles of four adjacent groups, or four
 * runs of ng / 4 adjacent groups. */
TGT float groups(const uint8_t *p, size_t ng, order o, bool inl, bool pf) {
    __m512 acc[S];
    for (int s = 0; s < S; s++) acc[s] = _mm512_setzero_ps();
    const size_t run = ng / S, steps = o == O_TILES ? ng / S : run;
    const size_t gs = o == O_TILES ? GB : run * GB;         /* stream to stream */
    const size_t next = o == O_TILES ? (size_t)S * GB : GB; /* a stream's next group */
    for (size_t k = 0; k < steps; k++) {
        const uint8_t *w = p + (o == O_TILES ? k * S * GB : k * GB);
        for (size_t b = 0; b < NB; b++) {
            if (pf) {
                /* codes (and inline scales) 2 KiB ahead, on into the stream's next group */
                const size_t len = inl ? GB : NB * CB, step = inl ? UB : CB;
                for (size_t l = (code_at(inl, b) + PF + 63) & ~(size_t)63; l < code_at(inl, b) + step + PF; l += 64)
                    for (int s = 0; s < S; s++)
                        __builtin_prefetch(pf_at(w + (size_t)s * gs, l, len, next), 0, 3);
            }
            q4_blocks(w + code_at(inl, b), w + scale_at(inl, b), gs, acc);
        }
    }
    float t = 0;
    for (int s = 0; s < S; s++) t += _mm512_reduce_add_ps(acc[s]);
    return t;
}

/* Q8_0's decode tile as avx512.c's pk_lock_run has it (one X row, four
 * groups side by side, each stream a run of adjacent groups of 64 units of
 * 512 code bytes and 16 fp16 scales), over the share's four quarters, its
 * lines asked for 2 KiB ahead: Q8T_LOOP a block's 8 or 9 lines by a loop
 * over [at(b) + PF, at(b + 1) + PF) (the tile before 2026-12-05), Q8T_PAIRS
 * the 17 lines of two units in straight-line code at every even block (the
 * tile now); Q8T_NOEPI pairs without the per-block epilogue (the scale
 * load, conversions, FMA); Q8T_512 pairs with units of 512 bytes (no
 * scales), the same instructions spread over 6% fewer bytes. */
#define Q8_NB 64
static uint8_t g_x[Q8_NB * 32] __attribute__((aligned(64)));
static ix__q8a_blk g_xb[Q8_NB] __attribute__((aligned(64)));
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vnni"))) float
q8_tile(const uint8_t *p, size_t part, int mode) {
    const size_t ub = mode == Q8T_512 ? 512 : 544, gb = Q8_NB * ub, ng = part / gb;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    float t = 0;
    for (size_t k = 0; k < ng; k++) {
        const uint8_t *w = p + k * gb;
        __m512 acc[S];
        for (int s = 0; s < S; s++) acc[s] = _mm512_setzero_ps();
        for (size_t b = 0; b < Q8_NB; b++) {
            const uint8_t *c = w + b * ub, *x = g_x + b * 32;
            if (mode == Q8T_LOOP) ix__pk_pf_lines(w, part, S, b * ub + PF, (b + 1) * ub + PF, true);
            else if (b % 2 == 0) {
                IX__UNROLL(17)
                for (size_t l = 0; l < 2 * ub / 64; l++)
                    IX__UNROLL(4)
                    for (int s = 0; s < S; s++) ix__pk_pf(c + (size_t)s * part + PF + 64 * l, true);
            }
            __m512i dl[S];
            for (int s = 0; s < S; s++) dl[s] = _mm512_setzero_si512();
            IX__UNROLL(8)
            for (int j = 0; j < 8; j++) {
                const __m512i xj = _mm512_set1_epi32((int32_t)ix__load_u32(x + 4 * j));
                IX__UNROLL(4)
                for (int s = 0; s < S; s++)
                    dl[s] = _mm512_dpbusd_epi32(
                        dl[s], _mm512_xor_si512(_mm512_loadu_si512((const void *)(c + (size_t)s * part + 64 * j)), flip), xj);
            }
            if (mode == Q8T_NOEPI || mode == Q8T_512) {
                for (int s = 0; s < S; s++) acc[s] = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(acc[s]), dl[s]));
                continue;
            }
            const __m512i off = _mm512_set1_epi32(g_xb[b].neg128s);
            const __m512 xd = _mm512_set1_ps(g_xb[b].d);
            IX__UNROLL(4)
            for (int s = 0; s < S; s++) {
                const __m512i dot = _mm512_add_epi32(off, dl[s]);
                const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(c + (size_t)s * part + 512)));
                acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, xd), acc[s]);
            }
        }
        for (int s = 0; s < S; s++) t += _mm512_reduce_add_ps(acc[s]);
    }
    return t;
}
TGT float q8_tile_v(const uint8_t *p, size_t part, int mode) {
    switch (mode) {
    case Q8T_LOOP: return q8_tile(p, part, Q8T_LOOP);
    case Q8T_PAIRS: return q8_tile(p, part, Q8T_PAIRS);
    case Q8T_NOEPI: return q8_tile(p, part, Q8T_NOEPI);
    default: return q8_tile(p, part, Q8T_512);
    }
}

static void run_fn(void *ctx, int ith, int nth) {
    job *j = ctx;
    const size_t share = j->bytes / (size_t)nth / ((size_t)S * GB) * ((size_t)S * GB);
    const uint8_t *p = j->buf + (size_t)ith * share;
    float t;
    switch (j->v->o) {
    case O_PLAIN: t = plain(p, share / S); break;
    case O_BOUND: t = bound_read(p, share / S); break;
    case O_LONG: t = long_arith(p, share / S); break;
    case O_PLAINPF: t = plain_pf(p, share / S, false); break;
    case O_PLAINPF1: t = plain_pf(p, share / S, true); break;
    case O_PF_Q4: t = pf_work(p, share / S, W_Q4); break;
    case O_PF_ADDS: t = pf_work(p, share / S, W_ADDS); break;
    case O_PF_SPLIT: t = pf_work(p, share / S, W_SPLIT); break;
    case O_PF_Q8: t = pf_work(p, share / S, W_Q8); break;
    case O_PF_F16: t = pf_work(p, share / S, W_F16); break;
    case O_Q8_TILE: t = q8_tile_v(p, share / S, j->v->mode); break;
    default: t = groups(p, share / GB, j->v->o, j->v->inl, j->v->pf); break;
    }
    j->sink[(size_t)ith % 64 * 16] += t;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One pass of order v over the buffer on the pool's threads: GB/s. */
static double time_order(ix_pool *pool, job *j, const variant *v, size_t read) {
    j->v = v;
    const uint64_t t0 = ix_time_ns();
    ix_pool_run(pool, run_fn, j);
    const double s = (double)(ix_time_ns() - t0) * 1e-9;
    return (double)read / (s > 0 ? s : 1e-9) * 1e-9;
}

int main(int argc, char **argv) {
    int threads = 0, rounds = 7;
    size_t mib = 1024;
    const char *only = NULL; /* -o: the orders to time (plain always) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) mib = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: stream_bench [-t threads] [-r rounds] [-s MiB] [-o NAME,NAME...]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 64 || mib < 64) {
        fprintf(stderr, "stream_bench: rounds 1..64, at least 64 MiB\n");
        return 2;
    }
    bool on[N_VARIANTS];
    for (size_t v = 0; v < N_VARIANTS; v++) on[v] = !only || v == 0;
    for (const char *q = only; q; q = strchr(q, ','), q = q ? q + 1 : q) { /* each name in -o */
        const size_t n = strcspn(q, ",");
        size_t v = 0;
        while (v < N_VARIANTS && (strlen(k_variants[v].name) != n || strncmp(q, k_variants[v].name, n))) v++;
        if (v == N_VARIANTS) {
            fprintf(stderr, "stream_bench: no order named '%.*s'\n", (int)n, q);
            return 2;
        }
        on[v] = true;
    }
    if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) {
        printf("stream_bench: needs AVX-512 VNNI; skipped on this CPU\n");
        return 0;
    }
    ix_pool *pool = NULL;
    if (ix_pool_create(&pool, threads) != IX_OK) {
        fprintf(stderr, "stream_bench: no worker pool\n");
        return 1;
    }
    const size_t huge = (size_t)2 << 20, bytes = mib << 20;
    uint8_t *buf = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
    if (!buf) {
        fprintf(stderr, "stream_bench: no memory for %zu MiB\n", mib);
        ix_pool_destroy(pool);
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)(i * 131 + (i >> 12));
    /* the scales as small fp16 numbers wherever they sit */
    for (size_t i = 0; i + 1 < bytes; i += 2) buf[i + 1] &= 0x3b;
    for (size_t i = 0; i < sizeof g_x; i++) g_x[i] = (uint8_t)(i * 37 + 11);
    for (size_t b = 0; b < Q8_NB; b++) g_xb[b] = (ix__q8a_blk){.d = 0.01f * (float)(b + 1), .neg128s = -128 * (int32_t)b};
    const int nth = ix_pool_n_threads(pool);
    static job j;
    j.buf = buf;
    j.bytes = bytes;
    double gbs[N_VARIANTS][64], ratio[N_VARIANTS][64];
    const size_t read = bytes / (size_t)nth / ((size_t)S * GB) * ((size_t)S * GB) * (size_t)nth;
    /* Each order timed between two plain reads, its ratio against their
     * mean, and the orders rotated from round to round: the bandwidth drifts
     * within a round, and a fixed order put the last orders lower. */
    size_t list[N_VARIANTS], n_on = 0;
    for (size_t v = 1; v < N_VARIANTS; v++)
        if (on[v]) list[n_on++] = v;
    for (int r = 0; r < rounds; r++) {
        double before = time_order(pool, &j, &k_variants[0], read), sum = before;
        for (size_t i = 0; i < n_on; i++) {
            const size_t v = list[(i + (size_t)r) % n_on];
            gbs[v][r] = time_order(pool, &j, &k_variants[v], read);
            const double after = time_order(pool, &j, &k_variants[0], read);
            ratio[v][r] = gbs[v][r] / (0.5 * (before + after));
            before = after;
            sum += after;
        }
        gbs[0][r] = sum / (double)(n_on + 1);
        ratio[0][r] = 1;
    }
    printf("stream_bench: %d threads, %zu MiB, %d rounds (Q4_0 groups of 16 rows, K = 2048)\n", nth, mib, rounds);
    printf("%-16s %10s %12s\n", "order", "GB/s", "/ plain");
    for (size_t v = 0; v < N_VARIANTS; v++)
        if (on[v]) printf("%-16s %10.1f %12.2f\n", k_variants[v].name, median(gbs[v], rounds), median(ratio[v], rounds));
    free(buf);
    ix_pool_destroy(pool);
    return 0;
}
#else
int main(void) {
    printf("stream_bench: x86-64 only; skipped\n");
    return 0;
}
#endif
