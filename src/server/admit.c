/* inferx server: server-wide admission (--max-waiting).
 *
 * The limit counts sequences (each prompt of a prompt array times n), not
 * requests, and is taken atomically at submission: a compare-and-swap
 * reserves all of a request's sequences or none, so no burst can push the
 * count past the limit. A sequence stops counting when it starts running
 * (its first token) or finishes, whichever comes first; the engine's own
 * waiting gauge therefore never exceeds the limit either.
 *
 * The time between starts is measured (an exponential average over the
 * last few) so that an overload answer can say when to come back:
 *   Retry-After = clamp(ceil(need * gap_s), 1, 60)
 * where need = waiting + asked - limit (the sequences that must start
 * before this request fits) and gap_s = max(average gap between starts,
 * time since the last start or since the queue began to fill) -- a queue
 * that stopped moving reads as slow. Before two starts have been seen
 * gap_s is 1 s.
 *
 * Per-key limits (keys file) sit beside this: each is its own check before
 * or after ix__admit_take, with its own answer (429). */
#include <math.h>
#include <string.h>

#include "server/server_int.h"

#define IXS_ADMIT_EWMA 0.25 /* weight of the newest gap */

void ix__admit_init(ixs_admit *a, int32_t max_waiting) {
    memset(a, 0, sizeof *a);
    a->max_waiting = max_waiting;
    atomic_init(&a->n_waiting, 0);
    pthread_mutex_init(&a->mu, NULL);
}

void ix__admit_free(ixs_admit *a) { pthread_mutex_destroy(&a->mu); }

int ix__admit_retry_after_s(int32_t need, double gap_s) {
    if (need < 1) need = 1;
    if (!(gap_s > 0)) gap_s = 1.0;
    double t = ceil((double)need * gap_s);
    return t < 1 ? 1 : t > 60 ? 60 : (int)t;
}

static double gap_estimate(ixs_admit *a) {
    pthread_mutex_lock(&a->mu);
    double gap = a->gap_s, since = a->last_start_ns ? (double)(ix_time_ns() - a->last_start_ns) / 1e9 : 0;
    pthread_mutex_unlock(&a->mu);
    if (!(gap > 0)) return 1.0;
    return since > gap ? since : gap;
}

int ix__admit_take(ixs_admit *a, int32_t n_seqs, ixs_err *e) {
    if (a->max_waiting <= 0) return 0;
    if (n_seqs > a->max_waiting) {
        IXS_BAD(e, NULL, "this request asks for %d sequences (prompts times n); the server queues at most %d",
                (int)n_seqs, (int)a->max_waiting);
        e->code = "too_many_sequences";
        return -1;
    }
    int cur = atomic_load(&a->n_waiting);
    do {
        if (cur + n_seqs > a->max_waiting) {
            int retry = ix__admit_retry_after_s(cur + n_seqs - a->max_waiting, gap_estimate(a));
            ix__srv_errf(e, 503, "server_error", NULL,
                         "the server is overloaded (%d sequences waiting, limit %d); retry in %d s", cur,
                         (int)a->max_waiting, retry);
            e->code = "overloaded";
            e->retry_after_s = retry;
            return -1;
        }
    } while (!atomic_compare_exchange_weak(&a->n_waiting, &cur, cur + n_seqs));
    if (cur == 0) { /* the queue starts filling: its wait is measured from now */
        pthread_mutex_lock(&a->mu);
        a->last_start_ns = ix_time_ns();
        pthread_mutex_unlock(&a->mu);
    }
    return 0;
}

void ix__admit_give_back(ixs_admit *a, int32_t n_seqs) {
    if (a->max_waiting <= 0 || n_seqs <= 0) return;
    atomic_fetch_sub(&a->n_waiting, n_seqs);
}

void ix__admit_started(ixs_admit *a, int32_t n_seqs) {
    if (a->max_waiting <= 0 || n_seqs <= 0) return;
    atomic_fetch_sub(&a->n_waiting, n_seqs);
    uint64_t now = ix_time_ns();
    pthread_mutex_lock(&a->mu);
    if (a->last_start_ns) {
        double gap = (double)(now - a->last_start_ns) / 1e9 / n_seqs;
        a->gap_s = a->gap_s > 0 ? (1 - IXS_ADMIT_EWMA) * a->gap_s + IXS_ADMIT_EWMA * gap : gap;
    }
    a->last_start_ns = now;
    pthread_mutex_unlock(&a->mu);
}
