/* --tp N and --pp N for run, serve and bench --throughput: the process joins
 * an MPI job of tp * pp ranks (docs/distributed.md). Rank 0 goes on as the
 * command (engine, sampling, HTTP) with its shard of the model; every other
 * rank loads its shard, runs rank 0's steps until rank 0 stops, and exits --
 * or, when it fails on its own, ends the whole job at once so that rank 0
 * never waits for it. */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "cli/cli.h"
#include "inferx/dist.h"

int ix_cli_tp_join(const char *cmd, const ix_cli_dist_opts *o, const char *model, int32_t n_threads, ix_cli_tp *t) {
    *t = (ix_cli_tp){0};
    int32_t tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1, n = tp * pp;
    if (n <= 1) {
        if (o->micro_batches > 0) {
            fprintf(stderr, "inferx %s: --micro-batches needs --pp N (N > 1)\n", cmd);
            return 2;
        }
        return -1;
    }
    if (!ix_dist_launched()) {
        fprintf(stderr, "inferx %s: --tp %d --pp %d runs under MPI: mpirun -np %d inferx %s --tp %d --pp %d ...\n", cmd,
                (int)tp, (int)pp, (int)n, cmd, (int)tp, (int)pp);
        return 2;
    }
    ix_errbuf err = {{0}};
    if (ix_dist_create(&t->dist, tp, pp, &err) != IX_OK) {
        fprintf(stderr, "inferx %s: --tp %d --pp %d: %s\n", cmd, (int)tp, (int)pp, err.msg);
        return 2;
    }
    ix_dist_set_micro_batches(t->dist, o->micro_batches);
    int32_t rank = ix_dist_rank(t->dist);
    if (rank == 0) return -1;
    /* a worker: the command's signal mask does not apply (mpirun ends it) */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_UNBLOCK, &all, NULL);
    fprintf(stderr, "inferx %s: rank %d (pid %ld) of %d (stage %d of %d, group rank %d of %d): loading its shard of %s\n",
            cmd, (int)rank, (long)getpid(), (int)n, (int)(rank / tp), (int)pp, (int)(rank % tp), (int)tp, model);
    ix_model *m = NULL;
    ix_errbuf load_err = {{0}};
    if (ix_model_load_shard(&m, model, ix_dist_comm(t->dist), NULL, NULL, &load_err) != IX_OK)
        fprintf(stderr, "inferx %s: rank %d: %s: %s\n", cmd, (int)rank, model, load_err.msg);
    ix_status s = ix_dist_serve(t->dist, m, n_threads, m ? NULL : load_err.msg, &err);
    int rc = s == IX_OK ? 0 : 1;
    if (s != IX_OK) fprintf(stderr, "inferx %s: %s\n", cmd, err.msg);
    if (!ix_dist_stopped(t->dist)) {
        fprintf(stderr, "inferx %s: rank %d cannot go on: ending the job\n", cmd, (int)rank);
        ix_dist_abort(t->dist, 1);
    }
    if (pp > 1) ix_cli_tp_report(stderr, cmd, t);
    ix_model_destroy(m);
    ix_dist_destroy(t->dist);
    t->dist = NULL;
    return rc;
}

ix_status ix_cli_tp_load(ix_cli_tp *t, const char *path, const ix_model_load_params *lp, ix_model **m,
                         ix_errbuf *err) {
    if (!t->dist) return ix_model_load_ex(m, path, lp, err);
    return ix_model_load_shard(m, path, ix_dist_comm(t->dist), lp->progress, lp->progress_user, err);
}

void ix_cli_tp_report(FILE *f, const char *cmd, const ix_cli_tp *t) {
    if (!t->dist) return;
    ix_dist_stats st;
    ix_dist_get_stats(t->dist, &st);
    int32_t tp = ix_dist_tp(t->dist), pp = ix_dist_pp(t->dist), rank = ix_dist_rank(t->dist);
    if (tp > 1)
        fprintf(f,
                "inferx %s: rank %d: tensor parallel over %d ranks: %llu steps, %llu exchanges in %.1f ms (%.1f us a "
                "step), %.2f MB received, plans %s in %.1f ms\n",
                cmd, (int)rank, (int)tp, (unsigned long long)st.n_steps, (unsigned long long)st.n_exchanges,
                (double)st.exchange_ns / 1e6, st.n_steps ? (double)st.exchange_ns / 1e3 / (double)st.n_steps : 0.0,
                (double)st.bytes / 1e6, rank ? "received" : "sent", (double)st.plan_ns / 1e6);
    if (pp > 1) {
        fprintf(f,
                "inferx %s: rank %d: pipeline stage %d of %d: %llu steps, %llu messages, %.2f MB, waits %.1f ms (%.1f "
                "us a step)",
                cmd, (int)rank, (int)(rank / tp), (int)pp, (unsigned long long)st.n_steps,
                (unsigned long long)st.n_p2p, (double)st.p2p_bytes / 1e6, (double)st.p2p_wait_ns / 1e6,
                st.n_steps ? (double)st.p2p_wait_ns / 1e3 / (double)st.n_steps : 0.0);
        if (rank && st.pass_ns)
            fprintf(f, " of %.1f ms in steps (idle in steps: %.1f%%)", (double)st.pass_ns / 1e6,
                    100.0 * (double)st.p2p_wait_ns / (double)st.pass_ns);
        fprintf(f, "\n");
    }
}

void ix_cli_tp_end(ix_cli_tp *t) {
    ix_dist_destroy(t->dist);
    t->dist = NULL;
}
