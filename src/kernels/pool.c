/*
 * ix_pool: a persistent worker pool for the kernels.
 *
 * Decode runs a few hundred small ops per token, so the handoff must cost far
 * less than the op. The caller publishes (fn, ctx) and then one atomic word
 * `cmd` = generation << 16 | nth; workers spin on that word (PAUSE) and only
 * after spin_us of idleness sleep on a condition variable.
 *
 * Each run has one slot per ith, claimed by compare-and-swap from "open in
 * generation g" to "taken in generation g". Worker ith claims slot ith; the
 * caller runs slot 0 and then claims every slot still open and runs it
 * itself. So fn runs exactly once per ith, and a worker that the OS has
 * descheduled (cores shared with other processes) cannot hold the run back:
 * its share is done by the caller, and when it wakes its claim simply fails.
 * The caller then waits only for slots that workers really took.
 *
 * Sleeping is the slow path and uses the Dekker pattern with seq_cst atomics:
 * a worker announces itself in n_sleepers before re-checking cmd, and the
 * caller reads n_sleepers after publishing cmd, so one of the two always sees
 * the other and no wakeup is lost. The same holds for a caller that sleeps
 * (caller_sleeping) and the worker that finishes last.
 *
 * Fields that different threads write live on separate cache lines.
 */
#include "kernels/kernels_int.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 1024 /* nth must fit the 16 low bits of cmd */

typedef struct worker {
    ix_pool *pool;
    int ith;
} worker;

struct ix_pool {
    /* written by the caller, read by spinning workers */
    _Alignas(64) _Atomic uint64_t cmd;
    ix_pool_fn fn; /* valid for the generation in cmd */
    void *ctx;
    int cur_nth;
    _Atomic int stop;
    /* written by finishing workers, read by the waiting caller */
    _Alignas(64) _Atomic uint64_t pending; /* taken slots not yet finished */
    _Atomic uint64_t *slots;               /* (n_threads) 2 * gen (+1 once taken) */
    /* the in-run barrier */
    _Alignas(64) _Atomic int bar_count;
    _Atomic unsigned bar_gen;
    /* the slow path */
    _Alignas(64) pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    _Atomic int n_sleepers;
    _Atomic int caller_sleeping;
    /* fixed after create */
    uint64_t gen; /* caller-only copy of the generation */
    _Atomic uint64_t spin_ns;
    int n_threads, n_started;
    pthread_t *threads; /* (n_threads - 1) */
    worker *workers;    /* (n_threads - 1) */
};

/* Spins until ((*word & mask) == want) == equal, for up to spin_ns; returns
 * whether that happened (false: time to sleep). */
static bool spin_until(const ix_pool *p, _Atomic uint64_t *word, uint64_t mask, uint64_t want,
                       bool equal) {
    uint64_t limit = atomic_load_explicit(&p->spin_ns, memory_order_relaxed), t0 = 0;
    for (unsigned i = 1;; i++) {
        if (((atomic_load_explicit(word, memory_order_acquire) & mask) == want) == equal)
            return true;
        if (limit == 0) return false;
        ix__cpu_relax();
        if ((i & 63) == 0) { /* the clock costs ~20 ns; read it now and then */
            uint64_t now = ix_time_ns();
            if (!t0) t0 = now;
            else if (now - t0 >= limit) return false;
        }
    }
}

/* Waits for a generation other than seen_gen; returns the new cmd. */
static uint64_t wait_cmd(ix_pool *p, uint64_t seen_gen) {
    const uint64_t gen_mask = ~(uint64_t)0xffff;
    if (spin_until(p, &p->cmd, gen_mask, seen_gen << 16, false)) return atomic_load(&p->cmd);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleepers, 1);
    uint64_t c;
    while (((c = atomic_load(&p->cmd)) >> 16) == seen_gen) pthread_cond_wait(&p->work_cv, &p->mu);
    atomic_fetch_sub(&p->n_sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return c;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    ix_pool *p = w->pool;
    uint64_t seen_gen = 0;
    for (;;) {
        uint64_t c = wait_cmd(p, seen_gen);
        seen_gen = c >> 16;
        if (atomic_load(&p->stop)) break;
        int nth = (int)(c & 0xffff);
        if (w->ith >= nth) continue; /* not part of this run: touch nothing */
        uint64_t open = seen_gen * 2;
        /* fails when the caller already ran this slot, or cmd moved on */
        if (!atomic_compare_exchange_strong(&p->slots[w->ith], &open, open + 1)) continue;
        p->fn(p->ctx, w->ith, nth);
        /* pending may dip below 0 (as uint64: wrap) until the caller has
         * counted this slot as taken; only the final 1 -> 0 step wakes it */
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static void publish(ix_pool *p, int nth) {
    p->gen++;
    atomic_store(&p->cmd, p->gen << 16 | (uint64_t)nth);
    if (atomic_load(&p->n_sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->work_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static int default_threads(void) {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void stop_workers(ix_pool *p) {
    atomic_store(&p->stop, 1);
    publish(p, p->n_threads);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

void ix_pool_destroy(ix_pool *pool) {
    if (!pool) return;
    stop_workers(pool);
    pthread_cond_destroy(&pool->done_cv);
    pthread_cond_destroy(&pool->work_cv);
    pthread_mutex_destroy(&pool->mu);
    ix_free(pool->threads);
    ix_free(pool->workers);
    ix_free((void *)pool->slots);
    ix_aligned_free(pool);
}

ix_status ix_pool_create(ix_pool **out, int n_threads) {
    if (!out) return IX_ERR_INVALID;
    *out = NULL;
    if (n_threads <= 0) n_threads = default_threads();
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    ix_pool *p = ix_aligned_alloc(64, sizeof *p);
    if (!p) return IX_ERR_NOMEM;
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    p->cur_nth = 1;
    atomic_init(&p->spin_ns, 200000);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    size_t nw = (size_t)n_threads - 1;
    p->slots = ix_calloc((size_t)n_threads, sizeof *p->slots);
    if (!p->slots) {
        ix_pool_destroy(p);
        return IX_ERR_NOMEM;
    }
    if (nw) {
        p->threads = ix_malloc(nw * sizeof *p->threads);
        p->workers = ix_malloc(nw * sizeof *p->workers);
        if (!p->threads || !p->workers) {
            ix_pool_destroy(p);
            return IX_ERR_NOMEM;
        }
    }
    /* Workers inherit a full signal mask so signals reach the caller's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ix_status st = IX_OK;
    for (size_t i = 0; i < nw; i++) {
        p->workers[i] = (worker){.pool = p, .ith = (int)i + 1};
        if (pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]) != 0) {
            st = IX_ERR_NOMEM;
            break;
        }
        p->n_started++;
#if defined(__linux__)
        char name[16]; /* the kernel's limit, NUL included */
        snprintf(name, sizeof name, "ix-worker-%u", (unsigned)(i + 1) % 10000u);
        pthread_setname_np(p->threads[i], name);
#endif
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st != IX_OK) {
        ix_pool_destroy(p);
        return st;
    }
    *out = p;
    return IX_OK;
}

int ix_pool_n_threads(const ix_pool *pool) { return pool ? pool->n_threads : 1; }

void ix_pool_set_spin_us(ix_pool *pool, uint32_t spin_us) {
    if (pool) atomic_store(&pool->spin_ns, (uint64_t)spin_us * 1000);
}

void ix_pool_run(ix_pool *pool, ix_pool_fn fn, void *ctx) {
    ix_pool_run_n(pool, pool ? pool->n_threads : 1, fn, ctx);
}

void ix_pool_run_n(ix_pool *pool, int nth, ix_pool_fn fn, void *ctx) {
    if (!pool) {
        fn(ctx, 0, 1);
        return;
    }
    if (nth < 1) nth = 1;
    if (nth > pool->n_threads) nth = pool->n_threads;
    pool->cur_nth = nth;
    if (nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    uint64_t open = (pool->gen + 1) * 2; /* the generation publish() is about to use */
    for (int i = 1; i < nth; i++) atomic_store(&pool->slots[i], open);
    atomic_store(&pool->pending, 0);
    publish(pool, nth);
    fn(ctx, 0, nth);
    for (int i = 1; i < nth; i++) {
        uint64_t o = open;
        if (atomic_compare_exchange_strong(&pool->slots[i], &o, open + 1)) fn(ctx, i, nth);
        else atomic_fetch_add(&pool->pending, 1); /* a worker took it */
    }
    /* pending counts up for taken slots here and down as workers finish, in
     * either order; it is back at 0 when every taken slot is done. The
     * counting above is complete before the wait begins. */
    if (spin_until(pool, &pool->pending, ~(uint64_t)0, 0, true)) return;
    if (atomic_load(&pool->pending) != 0) {
        pthread_mutex_lock(&pool->mu);
        atomic_store(&pool->caller_sleeping, 1);
        while (atomic_load(&pool->pending) != 0) pthread_cond_wait(&pool->done_cv, &pool->mu);
        atomic_store(&pool->caller_sleeping, 0);
        pthread_mutex_unlock(&pool->mu);
    }
}

void ix_pool_barrier(ix_pool *pool) {
    if (!pool || pool->cur_nth <= 1) return;
    int nth = pool->cur_nth;
    unsigned gen = atomic_load(&pool->bar_gen);
    if (atomic_fetch_add(&pool->bar_count, 1) == nth - 1) {
        atomic_store(&pool->bar_count, 0);
        atomic_fetch_add(&pool->bar_gen, 1);
        return;
    }
    /* Everyone is running, so the wait is short; yield now and then in case
     * a participant was descheduled (cores shared with other processes). */
    for (unsigned i = 1; atomic_load(&pool->bar_gen) == gen; i++) {
        ix__cpu_relax();
        if ((i & 1023) == 0) sched_yield();
    }
}
