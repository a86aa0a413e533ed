/*
 * attn_bench: the paged-attention kernel on one thread, per ISA path, at
 * grouped-query shapes (TinyLlama-1.1B: head_dim 64, 8 query heads per KV
 * head; Llama-3-8B: 128, 4), walking a sequence's K/V in 16-token blocks as
 * the forward pass does. The baseline, timed in the same run, is each query
 * head of the group alone (nq = 1, one pass over K/V per head); the figure
 * is the whole group in one pass (ix_kernel_table.attn_add with nq = group).
 * Both are reported as ns per (query head, key) and the group's speedup.
 * Every K/V type runs (f16 first); each other type's group figure is also
 * given as a ratio to f16's group figure of the same shape and context, the
 * quantized cache's speed effect (q8_0 / q4_0 / fp8_e4m3 read their codes in
 * place). Each figure is the median of several runs, in CPU time of the thread.
 *
 * usage: attn_bench [-i generic|avx2|avx512|avx512-bw|all] [-r runs]
 */
#include "inferx/kernels.h"
#include "kernels/kernels_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 16
#define MAX_Q 8

static uint64_t g_rng = 88172645463325252ull;
static float rndf(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* CPU time of this thread: the machine is shared, and time the OS gives to
 * other processes is not the kernel's. */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct kv_set {
    size_t hd, n_ctx;
    ix_kv_dtype type;
    const uint8_t *k, *v; /* (n_ctx, hd) each */
} kv_set;

/* One (token, KV head) item: the nq queries over all blocks, as the forward
 * pass runs it. */
static void run_item(const ix_kernel_table *kt, const kv_set *s, const float *q, size_t nq,
                     float *o) {
    ix_attn_acc acc[MAX_Q];
    size_t rb = ix_kv_dtype_row_bytes(s->type, s->hd);
    for (size_t i = 0; i < nq; i++) ix_attn_init(&acc[i], o + i * s->hd, s->hd, 1.0f / 8.0f);
    for (size_t t0 = 0; t0 < s->n_ctx; t0 += BLOCK) {
        size_t n = s->n_ctx - t0 < BLOCK ? s->n_ctx - t0 : BLOCK;
        kt->attn_add(acc, q, nq, s->k + t0 * rb, s->hd, s->v + t0 * rb, s->hd, n, s->type);
    }
    for (size_t i = 0; i < nq; i++) ix_attn_finish(&acc[i], o + i * s->hd);
}

/* Seconds for one item of `group` query heads: alone (grouped = false, one
 * call chain per head) or as one group. */
static double time_item(const ix_kernel_table *kt, const kv_set *s, const float *q, size_t group,
                        bool grouped, float *o, int runs) {
    double t[16];
    size_t reps = 1;
    for (int r = 0; r < runs; r++) {
        for (;;) {
            double t0 = thread_cpu_s();
            for (size_t k = 0; k < reps; k++) {
                if (grouped) run_item(kt, s, q, group, o);
                else
                    for (size_t i = 0; i < group; i++)
                        run_item(kt, s, q + i * s->hd, 1, o + i * s->hd);
            }
            double sec = thread_cpu_s() - t0;
            if (sec < 0.02 && r == 0) { /* calibrate on the first run */
                reps *= 2;
                continue;
            }
            t[r] = sec / (double)reps;
            break;
        }
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);
    return t[runs / 2];
}

int main(int argc, char **argv) {
    int runs = 5;
    const char *isa_arg = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) isa_arg = argv[++i];
        else {
            fprintf(stderr, "usage: attn_bench [-i generic|avx2|avx512|avx512-bw|all] [-r runs]\n");
            return 2;
        }
    }
    if (runs < 1) runs = 1;
    if (runs > 16) runs = 16;
    const ix_kernel_table *tabs[IX_ISA_COUNT + 1];
    int nt = 0;
    for (int i = 0; i < IX_ISA_COUNT; i++) {
        const ix_kernel_table *kt = ix_kernels_table((ix_isa)i);
        if (kt && (!strcmp(isa_arg, "all") || !strcmp(isa_arg, kt->name) ||
                   (!strcmp(isa_arg, "avx512") && i == IX_ISA_AVX512)))
            tabs[nt++] = kt;
    }
#if defined(IX_KERNELS_HAVE_X86)
    if (ix_cpu_supports(IX_ISA_AVX512) && ix_cpu_features_get()->avx512vnni &&
        (!strcmp(isa_arg, "all") || !strcmp(isa_arg, "avx512-bw")))
        tabs[nt++] = ix__kernels_avx512(false);
#endif
    if (nt == 0) {
        fprintf(stderr, "attn_bench: no such path here: %s\n", isa_arg);
        return 2;
    }
    const struct {
        const char *name;
        size_t hd, group;
    } shapes[] = {{"tinyllama", 64, 8}, {"llama3-8b", 128, 4}};
    const size_t ctxs[] = {16, 128, 512, 2048};
    const ix_kv_dtype types[] = {IX_KV_F16, IX_KV_F32, IX_KV_BF16, IX_KV_Q8_0, IX_KV_FP8_E4M3,
                                 IX_KV_Q4_0};
    double f16_grp[IX_ARRAY_LEN(ctxs)] = {0};
    const size_t max_ctx = 2048, max_hd = 128;
    uint8_t *k = ix_aligned_alloc(64, max_ctx * max_hd * 4);
    uint8_t *v = ix_aligned_alloc(64, max_ctx * max_hd * 4);
    float *q = ix_aligned_alloc(64, MAX_Q * max_hd * 4);
    float *o = ix_aligned_alloc(64, MAX_Q * max_hd * 4);
    if (!k || !v || !q || !o) return 1;
    for (size_t i = 0; i < MAX_Q * max_hd; i++) q[i] = rndf();
    printf("attn_bench: one thread, K/V in %d-token blocks; ns per (query head, key): each head "
           "alone (baseline) | the group in one pass\n",
           BLOCK);
    for (int ti = 0; ti < nt; ti++) {
        const ix_kernel_table *kt = tabs[ti];
        for (size_t si = 0; si < IX_ARRAY_LEN(shapes); si++)
            for (int ty = 0; ty < (int)IX_ARRAY_LEN(types); ty++) {
                size_t hd = shapes[si].hd, group = shapes[si].group;
                ix_kv_dtype type = types[ty];
                size_t rb = ix_kv_dtype_row_bytes(type, hd);
                float row[128 * 2];
                for (size_t t = 0; t < max_ctx; t++) {
                    for (size_t i = 0; i < 2 * hd; i++) row[i] = rndf();
                    ix_kernels_kv_store(type, row, k + t * rb, hd);
                    ix_kernels_kv_store(type, row + hd, v + t * rb, hd);
                }
                for (size_t ci = 0; ci < IX_ARRAY_LEN(ctxs); ci++) {
                    kv_set s = {hd, ctxs[ci], type, k, v};
                    double alone = time_item(kt, &s, q, group, false, o, runs);
                    double grp = time_item(kt, &s, q, group, true, o, runs);
                    double pairs = (double)group * (double)ctxs[ci];
                    if (type == IX_KV_F16) f16_grp[ci] = grp;
                    printf("%-12s %-10s hd=%-4zu group=%zu %-8s ctx=%-5zu %7.2f | %7.2f ns  x%.2f"
                           "  (group time / f16's: %.2f)\n",
                           kt->name, shapes[si].name, hd, group, ix_kv_dtype_name(type), ctxs[ci],
                           alone / pairs * 1e9, grp / pairs * 1e9, alone / grp, grp / f16_grp[ci]);
                    fflush(stdout);
                }
            }
    }
    ix_aligned_free(k);
    ix_aligned_free(v);
    ix_aligned_free(q);
    ix_aligned_free(o);
    return 0;
}
