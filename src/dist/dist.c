/*
 * The MPI transport of tensor parallelism: the model's all-gathers, and the
 * protocol between rank 0 (the engine) and the other ranks (model shards).
 *
 * Every message from rank 0 starts with a broadcast header (kind + sizes):
 *   START  pool shape and context size; each rank answers with a status and
 *          a message (MPI_Gather), so a rank that cannot load its shard or
 *          make its pool is named in rank 0's error;
 *   STEP   the plan: tokens, positions, sequence ids, output flags, each
 *          token's table length and offset into a pool of block tables (one
 *          table per run of tokens of a sequence), then the block copies;
 *   STOP   the job ends.
 * The other ranks wait for a header by polling a non-blocking broadcast:
 * spinning while steps come back to back, sleeping once idle (a served
 * model may wait for minutes, and a spinning rank would take a core from
 * the others).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "inferx/dist.h"
#include "inferx/kv.h"

enum { MSG_START = 1, MSG_STEP = 2, MSG_STOP = 3 };
enum { HDR_KIND, HDR_A, HDR_B, HDR_C, HDR_D, HDR_E, HDR_LEN };
#define DIST_MSG_LEN 256
/* An idle rank polls for rank 0's next message spinning this long, then
 * sleeping DIST_IDLE_SLEEP_NS between polls. */
#define DIST_SPIN_NS 20000000ull
#define DIST_IDLE_SLEEP_NS 200000L
/* An exchange polls this long (INFERX_TP_SPIN_US overrides it), then sleeps
 * this long between polls (with a 1 us timer slack, set at create, the sleep
 * is about what it says). */
#define EXCHANGE_SPIN_NS 20000ull
#define EXCHANGE_SLEEP_NS 2000L

typedef struct dist_reply {
    int32_t status;
    char msg[DIST_MSG_LEN];
} dist_reply;

struct ix_dist {
    int32_t rank, size;   /* in the job (MPI_COMM_WORLD) */
    int32_t tp, pp;       /* tensor-parallel group size, pipeline stages: size = tp * pp */
    int32_t grank, pstage; /* rank in the stage's group, stage: rank = pstage * tp + grank */
    MPI_Comm group;       /* this stage's tensor-parallel group (the all-gathers) */
    ix_model_comm comm;
    int *counts, *displs; /* (tp) of the current collective */
    MPI_Request *sends;   /* pipeline sends in flight until flush */
    size_t n_sends, sends_cap;
    float *stage;         /* rows x all columns, rank-major, for multi-row exchanges */
    size_t stage_cap;     /* floats */
    int32_t *msg;         /* a plan's words (rank 0 builds it, others receive it) */
    size_t msg_cap;       /* words */
    ix_dist_stats st;
    bool stopped; /* a rank other than 0 got STOP */
    uint64_t spin_ns; /* an exchange polls this long before it sleeps between polls */
};

static int32_t g_initialised; /* MPI_Init once per process */

bool ix_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static ix_status mpi_fail(int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) n = 0;
    s[n < (int)sizeof s ? n : (int)sizeof s - 1] = 0;
    IX_LOGE("dist: %s failed: %s", what, s);
    return IX_ERR_IO;
}

static bool grow(void **buf, size_t *cap, size_t n, size_t elem) {
    if (n <= *cap) return true;
    size_t c = *cap ? *cap : 1024;
    while (c < n) c *= 2;
    void *p = ix_realloc(*buf, c * elem);
    if (!p) return false;
    *buf = p;
    *cap = c;
    return true;
}

/* counts/displs of a (rows, cols[r]) block per rank; returns the total columns. */
static size_t layout(ix_dist *d, size_t rows, const int32_t *cols) {
    size_t total = 0, at = 0;
    for (int32_t r = 0; r < d->tp; r++) {
        d->counts[r] = (int)(rows * (size_t)cols[r]);
        d->displs[r] = (int)at;
        at += (size_t)d->counts[r];
        total += (size_t)cols[r];
    }
    return total;
}

/* Rank-major blocks in stage into out (rows, total): row i of rank r's block
 * goes to columns [sum of cols before r, + cols[r]) of out's row i. */
static void interleave(const ix_dist *d, float *out, size_t rows, const int32_t *cols, size_t total) {
    size_t col0 = 0;
    for (int32_t r = 0; r < d->tp; r++) {
        const float *blk = d->stage + d->displs[r];
        for (size_t i = 0; i < rows; i++)
            memcpy(out + i * total + col0, blk + i * (size_t)cols[r], (size_t)cols[r] * sizeof(float));
        col0 += (size_t)cols[r];
    }
}

/* Waits for req: polling for spin_ns, then sleeping sleep_ns between polls.
 * A sleeping rank leaves the core to its peer on a loaded node and comes back
 * as a woken thread, which the scheduler runs soon; a spinning one would hold
 * the core for its whole time slice. */
static int poll_wait(MPI_Request *req, uint64_t spin_ns, long sleep_ns) {
    uint64_t t0 = ix_time_ns();
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || done) return rc;
        if (ix_time_ns() - t0 > spin_ns) {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
        }
    }
}

static ix_status exchange(void *user, const float *mine, float *out, size_t rows, const int32_t *cols, bool root) {
    ix_dist *d = user;
    size_t total = layout(d, rows, cols);
    bool direct = rows == 1; /* one row: the blocks are already side by side */
    if (!direct && (!root || d->grank == 0) && !grow((void **)&d->stage, &d->stage_cap, rows * total, sizeof(float)))
        return IX_ERR_NOMEM;
    float *dst = direct ? out : d->stage;
    uint64_t t0 = ix_time_ns();
    MPI_Request req;
    int rc = root ? MPI_Igatherv(mine, d->counts[d->grank], MPI_FLOAT, dst, d->counts, d->displs, MPI_FLOAT, 0,
                                 d->group, &req)
                  : MPI_Iallgatherv(mine, d->counts[d->grank], MPI_FLOAT, dst, d->counts, d->displs, MPI_FLOAT,
                                    d->group, &req);
    if (rc == MPI_SUCCESS) rc = poll_wait(&req, d->spin_ns, EXCHANGE_SLEEP_NS);
    d->st.exchange_ns += ix_time_ns() - t0;
    d->st.n_exchanges++;
    if (rc != MPI_SUCCESS) return mpi_fail(rc, root ? "gather" : "all-gather");
    if (!root || d->grank == 0) {
        d->st.bytes += rows * total * sizeof(float);
        if (!direct) interleave(d, out, rows, cols, total);
    }
    return IX_OK;
}

static ix_status comm_allgather(void *user, const float *mine, float *out, size_t rows, const int32_t *cols) {
    return exchange(user, mine, out, rows, cols, false);
}

static ix_status comm_gather(void *user, const float *mine, float *out, size_t rows, const int32_t *cols) {
    return exchange(user, mine, out, rows, cols, true);
}

/* Rank 0's header: non-blocking as the other ranks' wait_header posts it (a
 * blocking and a non-blocking collective do not match). */
static ix_status bcast_header(int32_t *hdr) {
    MPI_Request req;
    int rc = MPI_Ibcast(hdr, HDR_LEN, MPI_INT32_T, 0, MPI_COMM_WORLD, &req);
    if (rc == MPI_SUCCESS) rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? IX_OK : mpi_fail(rc, "broadcast");
}

/* Rank 0: START, then every rank's answer; the first failure names its rank. */
static ix_status comm_start(void *user, const ix_kv_params *kv, int32_t max_tokens, ix_errbuf *err) {
    ix_dist *d = user;
    int32_t hdr[HDR_LEN] = {MSG_START, (int32_t)kv->dtype, kv->block_size, (int32_t)kv->n_blocks, max_tokens, 0};
    if (bcast_header(hdr) != IX_OK) return ix_errf(err, IX_ERR_IO, "tensor parallelism: broadcast failed");
    dist_reply mine = {0}, *all = ix_calloc((size_t)d->size, sizeof *all);
    if (!all) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    int rc = MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
    ix_status s = IX_OK;
    if (rc != MPI_SUCCESS) s = ix_errf(err, mpi_fail(rc, "gather"), "tensor parallelism: no answer from the ranks");
    for (int32_t r = 1; r < d->size && s == IX_OK; r++)
        if (all[r].status != IX_OK) {
            all[r].msg[DIST_MSG_LEN - 1] = 0;
            s = ix_errf(err, (ix_status)all[r].status, "rank %d: %s", (int)r, all[r].msg);
        }
    ix_free(all);
    return s;
}

/* The last token of the run from t that reads t's block table (a sequence's
 * tokens are adjacent in a batch); *need: the entries its longest need. */
static int32_t run_end(const ix_model_plan *pl, int32_t t, int32_t *need) {
    int32_t last = t;
    *need = pl->n_blocks[t];
    while (last + 1 < pl->batch.n_tokens && pl->tables[last + 1] == pl->tables[t]) {
        last++;
        if (pl->n_blocks[last] > *need) *need = pl->n_blocks[last];
    }
    return last;
}

/* Rank 0: the plan as words (see the file's top), then STEP and the words. */
static ix_status comm_step(void *user, const ix_model_plan *pl) {
    ix_dist *d = user;
    uint64_t t0 = ix_time_ns();
    const ix_batch *b = &pl->batch;
    int32_t T = b->n_tokens;
    /* the table pool: one table per run of tokens reading the same table,
     * as long as the run's longest need */
    size_t n_pool = 0;
    for (int32_t t = 0, need; t < T; n_pool += (size_t)need) t = run_end(pl, t, &need) + 1;
    size_t n_words = 6 * (size_t)T + n_pool + 2 * (size_t)pl->n_copies;
    if (!grow((void **)&d->msg, &d->msg_cap, n_words, sizeof(int32_t))) return IX_ERR_NOMEM;
    int32_t *tok = d->msg, *pos = tok + T, *seq = pos + T, *outf = seq + T, *len = outf + T, *off = len + T,
            *pool = off + T, *cp = pool + n_pool;
    size_t at = 0;
    for (int32_t t = 0, need, last; t < T; t = last + 1) {
        last = run_end(pl, t, &need);
        memcpy(pool + at, pl->tables[t], (size_t)need * sizeof(int32_t));
        for (int32_t u = t; u <= last; u++) {
            tok[u] = b->tokens[u];
            pos[u] = b->pos[u];
            seq[u] = b->seq[u];
            outf[u] = b->output[u];
            len[u] = pl->n_blocks[u];
            off[u] = (int32_t)at;
        }
        at += (size_t)need;
    }
    if (pl->n_copies) memcpy(cp, pl->copies, 2 * (size_t)pl->n_copies * sizeof(int32_t));
    int32_t hdr[HDR_LEN] = {MSG_STEP, T, (int32_t)n_pool, pl->n_copies, pl->hidden, pl->n_micro};
    ix_status s = bcast_header(hdr);
    int rc = s == IX_OK ? MPI_Bcast(d->msg, (int)n_words, MPI_INT32_T, 0, MPI_COMM_WORLD) : MPI_SUCCESS;
    if (s == IX_OK && rc != MPI_SUCCESS) s = mpi_fail(rc, "broadcast");
    d->st.plan_ns += ix_time_ns() - t0;
    d->st.n_steps++;
    return s;
}

/* ---- pipeline: point to point between the same group rank of two stages ------- */

static ix_status comm_send(void *user, const float *buf, size_t n, int32_t stage, int32_t tag) {
    ix_dist *d = user;
    if (stage < 0 || stage >= d->pp || n > INT32_MAX) return IX_ERR_INVALID;
    if (!grow((void **)&d->sends, &d->sends_cap, d->n_sends + 1, sizeof *d->sends)) return IX_ERR_NOMEM;
    int rc = MPI_Isend(buf, (int)n, MPI_FLOAT, stage * d->tp + d->grank, tag, MPI_COMM_WORLD, &d->sends[d->n_sends]);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "send");
    d->n_sends++;
    d->st.n_p2p++;
    d->st.p2p_bytes += n * sizeof(float);
    return IX_OK;
}

/* Waits polling (then sleeping between polls) as the exchanges do: the wait
 * is the pipeline's bubble on this rank, counted in p2p_wait_ns. */
static ix_status comm_recv(void *user, float *buf, size_t n, int32_t stage, int32_t tag) {
    ix_dist *d = user;
    if (stage < 0 || stage >= d->pp || n > INT32_MAX) return IX_ERR_INVALID;
    uint64_t t0 = ix_time_ns();
    MPI_Request req;
    int rc = MPI_Irecv(buf, (int)n, MPI_FLOAT, stage * d->tp + d->grank, tag, MPI_COMM_WORLD, &req);
    if (rc == MPI_SUCCESS) rc = poll_wait(&req, d->spin_ns, EXCHANGE_SLEEP_NS);
    d->st.p2p_wait_ns += ix_time_ns() - t0;
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "receive");
    d->st.n_p2p++;
    d->st.p2p_bytes += n * sizeof(float);
    return IX_OK;
}

static ix_status comm_flush(void *user) {
    ix_dist *d = user;
    uint64_t t0 = ix_time_ns();
    int rc = MPI_SUCCESS;
    for (size_t i = 0; i < d->n_sends && rc == MPI_SUCCESS; i++)
        rc = poll_wait(&d->sends[i], d->spin_ns, EXCHANGE_SLEEP_NS);
    d->n_sends = 0;
    d->st.p2p_wait_ns += ix_time_ns() - t0;
    return rc == MPI_SUCCESS ? IX_OK : mpi_fail(rc, "send");
}

ix_status ix_dist_create(ix_dist **out, int32_t tp, int32_t pp, ix_errbuf *err) {
    int32_t n_ranks = tp * pp;
    *out = NULL;
    if (g_initialised) return ix_errf(err, IX_ERR_STATE, "MPI is initialised once per process");
    /* Open MPI's ranks busy-poll while they wait in an exchange; with more
     * runnable threads than cores (a shared node) a spinning rank holds the
     * core its peer needs for a whole time slice. Yielding in the poll costs
     * little on an idle node and keeps a loaded one moving (an explicit
     * setting in the environment wins). */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* threads made later inherit it (the engine's) */
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return ix_errf(err, IX_ERR_IO, "MPI_Init_thread failed");
    g_initialised = 1;
    if (provided < MPI_THREAD_SERIALIZED) {
        MPI_Finalize();
        return ix_errf(err, IX_ERR_UNSUPPORTED, "this MPI library does not support calls from several threads");
    }
    ix_dist *d = ix_calloc(1, sizeof *d);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != n_ranks) {
        ix_free(d);
        MPI_Finalize();
        return ix_errf(err, IX_ERR_INVALID, "%d ranks were asked for, the MPI job has %d (mpirun -np %d)",
                       (int)n_ranks, size, (int)n_ranks);
    }
    if (d) {
        d->counts = ix_calloc((size_t)tp, sizeof *d->counts);
        d->displs = ix_calloc((size_t)tp, sizeof *d->displs);
    }
    if (!d || !d->counts || !d->displs) {
        if (d) {
            ix_free(d->counts);
            ix_free(d->displs);
        }
        ix_free(d);
        MPI_Finalize();
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    /* errors come back as codes: a rank reports what failed before it ends */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    d->rank = rank;
    d->size = size;
    d->tp = tp;
    d->pp = pp;
    d->pstage = rank / tp;
    d->grank = rank % tp;
    /* the stage's group: ranks stage * tp .. stage * tp + tp - 1, in order */
    if (MPI_Comm_split(MPI_COMM_WORLD, d->pstage, d->grank, &d->group) != MPI_SUCCESS) {
        ix_free(d->counts);
        ix_free(d->displs);
        ix_free(d);
        MPI_Finalize();
        return ix_errf(err, IX_ERR_IO, "MPI_Comm_split failed");
    }
    MPI_Comm_set_errhandler(d->group, MPI_ERRORS_RETURN);
    const char *spin = getenv("INFERX_TP_SPIN_US");
    d->spin_ns = spin && *spin ? strtoull(spin, NULL, 10) * 1000ull : EXCHANGE_SPIN_NS;
    d->comm = (ix_model_comm){.user = d, .rank = d->grank, .n_ranks = tp, .stage = d->pstage, .n_stages = pp,
                              .allgather = comm_allgather, .gather = comm_gather, .start = comm_start,
                              .step = comm_step, .send = comm_send, .recv = comm_recv, .flush = comm_flush};
    *out = d;
    return IX_OK;
}

void ix_dist_destroy(ix_dist *d) {
    if (!d) return;
    if (d->rank == 0 && d->size > 1) {
        int32_t hdr[HDR_LEN] = {MSG_STOP, 0, 0, 0, 0, 0};
        bcast_header(hdr);
    }
    MPI_Comm_free(&d->group);
    MPI_Finalize();
    ix_free(d->sends);
    ix_free(d->counts);
    ix_free(d->displs);
    ix_free(d->stage);
    ix_free(d->msg);
    ix_free(d);
}

int32_t ix_dist_rank(const ix_dist *d) { return d->rank; }
int32_t ix_dist_size(const ix_dist *d) { return d->size; }
int32_t ix_dist_tp(const ix_dist *d) { return d->tp; }
int32_t ix_dist_pp(const ix_dist *d) { return d->pp; }
void ix_dist_set_micro_batches(ix_dist *d, int32_t n) { d->comm.micro_batches = n; }
const ix_model_comm *ix_dist_comm(ix_dist *d) { return &d->comm; }
void ix_dist_get_stats(const ix_dist *d, ix_dist_stats *out) { *out = d->st; }
bool ix_dist_stopped(const ix_dist *d) { return d->stopped; }

void ix_dist_abort(ix_dist *d, int code) {
    IX_UNUSED(d);
    MPI_Abort(MPI_COMM_WORLD, code);
    abort(); /* MPI_Abort does not return; this keeps the compiler sure of it */
}

/* ---- the other ranks ---------------------------------------------------------- */

/* Waits for rank 0's next header: spins while steps come back to back,
 * sleeps between polls once idle. */
static ix_status wait_header(int32_t *hdr) {
    MPI_Request req;
    int rc = MPI_Ibcast(hdr, HDR_LEN, MPI_INT32_T, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "broadcast");
    rc = poll_wait(&req, DIST_SPIN_NS, DIST_IDLE_SLEEP_NS);
    return rc == MPI_SUCCESS ? IX_OK : mpi_fail(rc, "broadcast");
}

/* A STEP's words into a plan over d->msg; false when the sizes disagree. */
static bool unpack_plan(ix_dist *d, const int32_t *hdr, int32_t max_tokens, int32_t n_blocks, ix_model_plan *pl,
                        const int32_t **tables, uint8_t *outf) {
    int32_t T = hdr[HDR_A], n_pool = hdr[HDR_B], n_copies = hdr[HDR_C];
    if (T <= 0 || T > max_tokens || n_pool < 0 || n_copies < 0 || n_copies > 2 * n_blocks + 64) return false;
    const int32_t *tok = d->msg, *pos = tok + T, *seq = pos + T, *o = seq + T, *len = o + T, *off = len + T,
                  *pool = off + T;
    for (int32_t t = 0; t < T; t++) {
        if (off[t] < 0 || len[t] < 0 || (int64_t)off[t] + len[t] > n_pool) return false;
        tables[t] = pool + off[t];
        outf[t] = o[t] != 0;
    }
    *pl = (ix_model_plan){.batch = {.n_tokens = T, .tokens = tok, .pos = pos, .seq = seq, .output = outf},
                          .tables = tables, .n_blocks = len, .copies = pool + n_pool, .n_copies = n_copies,
                          .hidden = hdr[HDR_D] != 0, .n_micro = hdr[HDR_E]};
    return true;
}

/* START: a pool of rank 0's blocks and a context, or the reason there is none. */
static ix_status answer_start(const int32_t *hdr, const ix_model *m, int32_t n_threads,
                              const char *load_error, ix_kv **kv, ix_model_ctx **ctx, ix_errbuf *e) {
    ix_status s = IX_ERR_STATE;
    if (!m) ix_errf(e, s, "%s", load_error ? load_error : "no model");
    else if (*ctx) ix_errf(e, s, "started twice");
    else {
        ix_kv_params kp = ix_kv_default_params();
        ix_model_kv_params(m, &kp);
        kp.dtype = (ix_kv_dtype)hdr[HDR_A];
        kp.block_size = hdr[HDR_B];
        kp.n_blocks = hdr[HDR_C];
        kp.enable_prefix_cache = false;
        ix_model_ctx_params cp = ix_model_ctx_default_params();
        cp.max_batch_tokens = hdr[HDR_D];
        cp.n_threads = n_threads;
        if ((s = ix_kv_create(&kp, kv, e)) == IX_OK) s = ix_model_ctx_create(ctx, m, *kv, &cp, e);
    }
    dist_reply mine = {.status = s};
    /* the first DIST_MSG_LEN - 1 bytes of the reason (a longer one is cut) */
    if (s != IX_OK) {
        size_t n = strnlen(e->msg, sizeof mine.msg - 1);
        memcpy(mine.msg, e->msg, n);
    }
    int rc = MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, NULL, 0, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "gather");
    return s;
}

ix_status ix_dist_serve(ix_dist *d, const ix_model *m, int32_t n_threads, const char *load_error,
                        ix_errbuf *err) {
    if (d->rank == 0) return ix_errf(err, IX_ERR_STATE, "rank 0 runs the engine, not ix_dist_serve");
    ix_kv *kv = NULL;
    ix_model_ctx *ctx = NULL;
    const int32_t **tables = NULL;
    uint8_t *outf = NULL;
    int32_t max_tokens = 0, n_blocks = 0;
    ix_status s = IX_OK;
    for (;;) {
        int32_t hdr[HDR_LEN];
        if ((s = wait_header(hdr)) != IX_OK) {
            ix_errf(err, s, "rank %d: lost rank 0", (int)d->rank);
            break;
        }
        if (hdr[HDR_KIND] == MSG_STOP) {
            d->stopped = true;
            break;
        }
        if (hdr[HDR_KIND] == MSG_START) {
            if ((s = answer_start(hdr, m, n_threads, load_error, &kv, &ctx, err)) != IX_OK)
                continue; /* rank 0 reports it and stops the job */
            max_tokens = hdr[HDR_D];
            n_blocks = hdr[HDR_C];
            tables = ix_calloc((size_t)max_tokens, sizeof *tables);
            outf = ix_calloc((size_t)max_tokens, 1);
            if (!tables || !outf) {
                s = ix_errf(err, IX_ERR_NOMEM, "rank %d: out of memory", (int)d->rank);
                break;
            }
            continue;
        }
        if (hdr[HDR_KIND] != MSG_STEP || !ctx) {
            s = ix_errf(err, IX_ERR_STATE, "rank %d: unexpected message %d", (int)d->rank, hdr[HDR_KIND]);
            break;
        }
        uint64_t t0 = ix_time_ns();
        size_t n_words = 6 * (size_t)(hdr[HDR_A] > 0 ? hdr[HDR_A] : 0) + (size_t)(hdr[HDR_B] > 0 ? hdr[HDR_B] : 0) +
                         2 * (size_t)(hdr[HDR_C] > 0 ? hdr[HDR_C] : 0);
        if (!grow((void **)&d->msg, &d->msg_cap, n_words, sizeof(int32_t))) {
            s = ix_errf(err, IX_ERR_NOMEM, "rank %d: out of memory for a plan", (int)d->rank);
            break;
        }
        int rc = MPI_Bcast(d->msg, (int)n_words, MPI_INT32_T, 0, MPI_COMM_WORLD);
        d->st.plan_ns += ix_time_ns() - t0;
        if (rc != MPI_SUCCESS) {
            s = ix_errf(err, mpi_fail(rc, "broadcast"), "rank %d: lost rank 0", (int)d->rank);
            break;
        }
        ix_model_plan pl;
        if (!unpack_plan(d, hdr, max_tokens, n_blocks, &pl, tables, outf)) {
            s = ix_errf(err, IX_ERR_FORMAT, "rank %d: a malformed plan", (int)d->rank);
            break;
        }
        d->st.n_steps++;
        s = ix_model_forward_plan(ctx, &pl);
        d->st.pass_ns += ix_time_ns() - t0;
        if (s != IX_OK) {
            ix_errf(err, s, "rank %d: forward pass failed: %s", (int)d->rank, ix_model_ctx_errmsg(ctx));
            break;
        }
    }
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    ix_free(tables);
    ix_free(outf);
    return s;
}
