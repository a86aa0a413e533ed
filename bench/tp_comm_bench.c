/* The all-gather a tensor-parallel step makes, alone: latency and bandwidth
 * of ix_dist's exchange for the message sizes of a step (per layer: the
 * attention output, twice the embedding width, the FFN width; the
 * vocabulary at the end), for 1 row (a decode) and 32 rows (a batch), over
 * the ranks of the job. Medians of REPS calls after a warm-up; a
 * zero-column exchange (the synchronisation alone) is the baseline. With
 * `pp`, the ranks are pipeline stages instead and stage 0 and stage 1 play
 * ping-pong with a pipeline step's messages (a token's residual row, a
 * token's logits, 16 of each): one hop is half the round trip.
 *   mpirun -np N tp_comm_bench N [REPS] [pp] */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/dist.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Stage 0 sends n floats to stage 1, which sends them back: reps round
 * trips after a warm-up; the median half round trip in ns (0 on failure). */
static uint64_t ping_pong(const ix_model_comm *c, float *buf, size_t n, uint64_t *ns, int reps) {
    for (int k = -reps / 10 - 1; k < reps; k++) {
        uint64_t t0 = ix_time_ns();
        int32_t peer = c->stage == 0 ? 1 : 0;
        if (c->stage == 0 && (c->send(c->user, buf, n, peer, 7) != IX_OK || c->flush(c->user) != IX_OK ||
                              c->recv(c->user, buf, n, peer, 7) != IX_OK))
            return 0;
        if (c->stage == 1 && (c->recv(c->user, buf, n, peer, 7) != IX_OK ||
                              c->send(c->user, buf, n, peer, 7) != IX_OK || c->flush(c->user) != IX_OK))
            return 0;
        if (k >= 0) ns[k] = ix_time_ns() - t0;
    }
    qsort(ns, (size_t)reps, sizeof *ns, cmp_u64);
    return ns[reps / 2] / 2;
}

static int run_pp(ix_dist *d, int reps) {
    const ix_model_comm *c = ix_dist_comm(d);
    /* a token's residual row and logits: the bundled model (288, 4096), TinyLlama (2048, 32000); x 16 */
    const size_t sizes[] = {288, 4096, 2048, 32000, 16 * 288, 16 * 4096, 16 * 2048, 16 * 32000};
    float *buf = calloc(16 * 32000, sizeof *buf);
    uint64_t *ns = calloc((size_t)reps, sizeof *ns);
    int rc = buf && ns ? 0 : 1;
    if (!rc && ix_dist_rank(d) == 0)
        printf("pipeline hop (stage 0 <-> 1 ping-pong / 2), median of %d (machine shared: compare within the run)\n"
               "%10s %12s %10s %10s\n", reps, "floats", "bytes", "us", "GB/s");
    for (size_t i = 0; !rc && i < sizeof sizes / sizeof sizes[0]; i++) {
        uint64_t t = c->stage < 2 ? ping_pong(c, buf, sizes[i], ns, reps) : 1;
        if (!t) rc = 1;
        double us = (double)t / 1e3, bytes = (double)sizes[i] * sizeof(float);
        if (!rc && ix_dist_rank(d) == 0)
            printf("%10zu %12.0f %10.1f %10.3f\n", sizes[i], bytes, us, us > 0 ? bytes / us / 1e3 : 0.0);
    }
    free(buf);
    free(ns);
    return rc;
}

int main(int argc, char **argv) {
    int32_t n = argc > 1 ? (int32_t)atoi(argv[1]) : 2;
    int reps = argc > 2 ? atoi(argv[2]) : 200;
    bool pp = argc > 3 && !strcmp(argv[3], "pp");
    if (n < 1 || reps < 1 || reps > 100000 || (pp && n < 2) || (argc > 3 && !pp)) {
        fprintf(stderr, "usage: mpirun -np N tp_comm_bench N [REPS 1..100000] [pp (N >= 2)]\n");
        return 2;
    }
    ix_errbuf err = {{0}};
    ix_dist *d;
    if (ix_dist_create(&d, pp ? 1 : n, pp ? n : 1, &err) != IX_OK) {
        fprintf(stderr, "tp_comm_bench: %s\n", err.msg);
        return 1;
    }
    if (pp) {
        int rc = run_pp(d, reps);
        if (ix_dist_rank(d) != 0 && ix_dist_serve(d, NULL, 1, "tp_comm_bench runs no model", &err) != IX_OK) rc = 1;
        ix_dist_destroy(d);
        return rc;
    }
    const ix_model_comm *c = ix_dist_comm(d);
    /* total columns: 0 (baseline), the bundled model's 288 / 768 / 4096, TinyLlama's 2048 / 5632 / 32000 */
    const int32_t widths[] = {0, 288, 768, 2048, 4096, 5632, 32000};
    const size_t rows[] = {1, 32};
    int32_t *cols = calloc((size_t)n, sizeof *cols);
    float *mine = calloc((size_t)32 * 32000, sizeof *mine), *all = calloc((size_t)32 * 32000, sizeof *all);
    uint64_t *ns = calloc((size_t)reps, sizeof *ns);
    int rc = 0;
    if (!cols || !mine || !all || !ns) rc = 1;
    if (!rc && c->rank == 0)
        printf("all-gather over %d ranks, median of %d calls (machine shared: compare within the run)\n"
               "%6s %8s %12s %10s %10s\n", (int)n, reps, "rows", "columns", "bytes", "us", "GB/s");
    for (size_t ri = 0; !rc && ri < sizeof rows / sizeof rows[0]; ri++)
        for (size_t wi = 0; !rc && wi < sizeof widths / sizeof widths[0]; wi++) {
            for (int32_t r = 0; r < n; r++)
                cols[r] = (int32_t)(((int64_t)widths[wi] * (r + 1)) / n - ((int64_t)widths[wi] * r) / n);
            for (int k = -reps / 10 - 1; k < reps && !rc; k++) {
                uint64_t t0 = ix_time_ns();
                if (c->allgather(c->user, mine, all, rows[ri], cols) != IX_OK) rc = 1;
                if (k >= 0) ns[k] = ix_time_ns() - t0;
            }
            qsort(ns, (size_t)reps, sizeof *ns, cmp_u64);
            double us = (double)ns[reps / 2] / 1e3, bytes = (double)rows[ri] * widths[wi] * sizeof(float);
            if (!rc && c->rank == 0)
                printf("%6zu %8d %12.0f %10.1f %10.3f\n", rows[ri], (int)widths[wi], bytes, us,
                       us > 0 ? bytes / us / 1e3 : 0.0);
        }
    free(cols);
    free(mine);
    free(all);
    free(ns);
    /* the other ranks wait for rank 0's stop, as model shards do */
    if (c->rank != 0 && ix_dist_serve(d, NULL, 1, "tp_comm_bench runs no model", &err) != IX_OK) rc = 1;
    ix_dist_destroy(d);
    return rc;
}
