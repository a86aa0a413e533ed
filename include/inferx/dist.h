/*
 * inferx dist: tensor and pipeline parallelism across processes over MPI
 * (docs/distributed.md).
 *
 * The only module that includes mpi.h. It implements the model's
 * communication interface (ix_model_comm in model.h): the all-gathers of a
 * sharded forward pass within a stage's tensor-parallel group, the
 * point-to-point activations and outputs between pipeline stages, and the
 * step plans rank 0 ships to the other ranks.
 * Rank 0 runs the engine (scheduler, sampling, KV block tables, HTTP); every
 * other rank loads its shard and calls ix_dist_serve, which runs rank 0's
 * plans until rank 0 stops it.
 *
 * Threads: MPI is initialised for serialized use. Rank 0 may make its
 * forward passes on another thread than the one that called ix_dist_create
 * (the engine thread), as long as one thread at a time uses the handle.
 */
#ifndef INFERX_DIST_H
#define INFERX_DIST_H

#include "inferx/core.h"
#include "inferx/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ix_dist ix_dist;

/* True when this process was started by an MPI launcher (mpirun). Any thread. */
bool ix_dist_launched(void);
/* Initialises MPI (once per process) for a job of tp * pp processes: pp
 * pipeline stages of tp tensor-parallel ranks each, rank r being rank r % tp
 * of stage r / tp (rank 0 runs the engine). Every rank gets the same
 * IX_ERR_INVALID (MPI finalised again) when the job has another number of
 * ranks. IX_ERR_UNSUPPORTED in a build without MPI (INFERX_MPI=OFF). */
ix_status ix_dist_create(ix_dist **out, int32_t tp, int32_t pp, ix_errbuf *err);
/* Rank 0: tells the other ranks to stop (they return from ix_dist_serve);
 * then finalises MPI. NULL is a no-op. */
void ix_dist_destroy(ix_dist *d);
int32_t ix_dist_rank(const ix_dist *d);
int32_t ix_dist_size(const ix_dist *d);
int32_t ix_dist_tp(const ix_dist *d);
int32_t ix_dist_pp(const ix_dist *d);
/* Rank 0: micro-batches each step is split into under a pipeline (0: one
 * per stage, at most one per token). */
void ix_dist_set_micro_batches(ix_dist *d, int32_t n);
/* The model's communication interface over this job (owned by d). */
const ix_model_comm *ix_dist_comm(ix_dist *d);
/* Ends every rank of the job now with exit code code (a rank that cannot go
 * on). Does not return. */
void ix_dist_abort(ix_dist *d, int code);

/* A rank other than 0: answers rank 0's start with a KV pool and a context
 * for m (or with load_error when m is NULL: the shard could not load), then
 * runs each step's plan until rank 0 stops. IX_OK on a clean stop; an error
 * (message in err) when the context could not be made or a pass failed. */
ix_status ix_dist_serve(ix_dist *d, const ix_model *m, int32_t n_threads, const char *load_error,
                        ix_errbuf *err);

/* A rank other than 0, after ix_dist_serve: true when rank 0 stopped it
 * (the job ends in order), false when it left on an error of its own (then
 * it must end the job: ix_dist_abort). */
bool ix_dist_stopped(const ix_dist *d);

/* What the ranks exchanged, summed since create: steps shipped (rank 0) or
 * run (others), collective calls, their wall time and the bytes received. */
typedef struct ix_dist_stats {
    uint64_t n_steps;
    uint64_t n_exchanges;
    uint64_t exchange_ns;
    uint64_t plan_ns;      /* shipping (rank 0) or receiving (others) the plans, idle waits excluded */
    uint64_t bytes;
    /* pipeline: point-to-point messages (activations, outputs), their bytes,
     * the time spent waiting for them (receives and flushed sends: the
     * bubble, transfers included), and (other ranks) the passes' wall time */
    uint64_t n_p2p, p2p_bytes, p2p_wait_ns, pass_ns;
} ix_dist_stats;
void ix_dist_get_stats(const ix_dist *d, ix_dist_stats *out);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_DIST_H */
