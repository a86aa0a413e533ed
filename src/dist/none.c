/*
 * The dist module in a build without MPI (INFERX_MPI=OFF): one process, and
 * a clear error for anything that needs more.
 */
#include "inferx/dist.h"

struct ix_dist {
    int32_t unused;
};

bool ix_dist_launched(void) { return false; }
ix_status ix_dist_create(ix_dist **out, int32_t tp, int32_t pp, ix_errbuf *err) {
    IX_UNUSED(tp);
    IX_UNUSED(pp);
    *out = NULL;
    return ix_errf(err, IX_ERR_UNSUPPORTED, "this inferx was built without MPI (cmake -DINFERX_MPI=ON needs "
                                            "libopenmpi-dev): tensor and pipeline parallelism are not available");
}
void ix_dist_destroy(ix_dist *d) { IX_UNUSED(d); }
int32_t ix_dist_rank(const ix_dist *d) { IX_UNUSED(d); return 0; }
int32_t ix_dist_size(const ix_dist *d) { IX_UNUSED(d); return 1; }
int32_t ix_dist_tp(const ix_dist *d) { IX_UNUSED(d); return 1; }
int32_t ix_dist_pp(const ix_dist *d) { IX_UNUSED(d); return 1; }
void ix_dist_set_micro_batches(ix_dist *d, int32_t n) {
    IX_UNUSED(d);
    IX_UNUSED(n);
}
const ix_model_comm *ix_dist_comm(ix_dist *d) { IX_UNUSED(d); return NULL; }
bool ix_dist_stopped(const ix_dist *d) { IX_UNUSED(d); return true; }
void ix_dist_abort(ix_dist *d, int code) {
    IX_UNUSED(d);
    IX_UNUSED(code);
}
ix_status ix_dist_serve(ix_dist *d, const ix_model *m, int32_t n_threads, const char *load_error,
                        ix_errbuf *err) {
    IX_UNUSED(d);
    IX_UNUSED(m);
    IX_UNUSED(n_threads);
    IX_UNUSED(load_error);
    return ix_errf(err, IX_ERR_UNSUPPORTED, "this inferx was built without MPI");
}
void ix_dist_get_stats(const ix_dist *d, ix_dist_stats *out) {
    IX_UNUSED(d);
    *out = (ix_dist_stats){0};
}
