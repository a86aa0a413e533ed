/*
 * The step planner of sched.h: queues kept in policy order (intrusive doubly
 * linked lists, sorted insertion), KV admission control through kv.h's
 * queries, preemption by recompute or swap, and deadline shedding.
 *
 * Invariant: a work entry is only planned when the KV cache can take it, so
 * the engine's appends for a plan never fail. Blocks are counted per sequence
 * (ix_kv_seq_blocks_needed), an upper bound when forks share a partial block.
 *
 * The step's token budget (step_budget) comes from the step-cost model
 * (ix_sched_cost, fitted on the steps the engine reports) when a target step
 * time is set and sequences decode; decodes take their tokens first, then
 * prefill is planned in two rounds over the same policy order (one block per
 * sequence within half the budget, then the rest), so that every prefilling
 * sequence -- a new arrival included -- moves in each step while the oldest
 * gets the most.
 */
#include <math.h>
#include <string.h>

#include "inferx/sched.h"

typedef struct queue {
    ix_sched_item *head, *tail;
    int32_t n;
} queue;

struct ix_sched {
    ix_sched_params p;
    ix_kv *kv;
    int32_t block_size;
    queue waiting, running, swapped;
    ix_sched_work *work;
    int32_t work_cap;
    ix_sched_item **lists; /* preempted | admitted | expired, each up to cap_items */
    int32_t list_cap;
    ix_sched_stats stats;
    ix_sched_cost cost; /* measured steps: budget and deadline estimates */
    int32_t last_budget;
    bool drafts_on; /* this plan lets draft tokens run (they fit the cache) */
};

/* ---- names ------------------------------------------------------------------ */

static const char *const k_policy[] = {"fcfs", "priority", "deadline"};
static const char *const k_preempt[] = {"recompute", "swap"};

ix_status ix_sched_policy_parse(const char *name, ix_sched_policy *out) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, k_policy[i])) return *out = (ix_sched_policy)i, IX_OK;
    return IX_ERR_INVALID;
}
const char *ix_sched_policy_name(ix_sched_policy p) { return (unsigned)p < 3 ? k_policy[p] : "?"; }
ix_status ix_preempt_mode_parse(const char *name, ix_preempt_mode *out) {
    for (int i = 0; i < 2; i++)
        if (!strcmp(name, k_preempt[i])) return *out = (ix_preempt_mode)i, IX_OK;
    return IX_ERR_INVALID;
}
const char *ix_preempt_mode_name(ix_preempt_mode m) { return (unsigned)m < 2 ? k_preempt[m] : "?"; }

ix_sched_params ix_sched_default_params(void) {
    return (ix_sched_params){IX_SCHED_FCFS, IX_PREEMPT_RECOMPUTE, 64, 512, IX_SCHED_TARGET_STEP_MS};
}

/* ---- queues ------------------------------------------------------------------ */

/* Whether a goes before b under the policy (admission order; victims are taken
 * from the other end). */
static bool before(const ix_sched *s, const ix_sched_item *a, const ix_sched_item *b) {
    switch (s->p.policy) {
    case IX_SCHED_PRIORITY:
        if (a->priority != b->priority) return a->priority > b->priority;
        break;
    case IX_SCHED_DEADLINE:
        if ((a->deadline_ns != 0) != (b->deadline_ns != 0)) return a->deadline_ns != 0;
        if (a->deadline_ns != b->deadline_ns) return a->deadline_ns < b->deadline_ns;
        break;
    case IX_SCHED_FCFS:
        break;
    }
    if (a->arrival_ns != b->arrival_ns) return a->arrival_ns < b->arrival_ns;
    return a->id < b->id;
}

static queue *queue_of(ix_sched *s, ix_sched_state st) {
    return st == IX_SCHED_WAITING ? &s->waiting : st == IX_SCHED_RUNNING ? &s->running
                                  : st == IX_SCHED_SWAPPED ? &s->swapped : NULL;
}

static void q_insert(ix_sched *s, queue *q, ix_sched_item *it) {
    ix_sched_item *at = q->tail;
    while (at && before(s, it, at)) at = at->prev;
    it->prev = at;
    it->next = at ? at->next : q->head;
    if (it->next) it->next->prev = it; else q->tail = it;
    if (at) at->next = it; else q->head = it;
    q->n++;
}

static void q_unlink(queue *q, ix_sched_item *it) {
    if (it->prev) it->prev->next = it->next; else q->head = it->next;
    if (it->next) it->next->prev = it->prev; else q->tail = it->prev;
    it->prev = it->next = NULL;
    q->n--;
}

static void move_to(ix_sched *s, ix_sched_item *it, ix_sched_state st) {
    queue *from = queue_of(s, it->state);
    if (from) q_unlink(from, it);
    it->state = st;
    queue *to = queue_of(s, st);
    if (to) q_insert(s, to, it);
}

/* ---- lifecycle ------------------------------------------------------------------ */

ix_status ix_sched_create(ix_sched **out, const ix_sched_params *p, ix_kv *kv, ix_errbuf *err) {
    *out = NULL;
    if ((unsigned)p->policy > IX_SCHED_DEADLINE || (unsigned)p->preempt > IX_PREEMPT_SWAP)
        return ix_errf(err, IX_ERR_INVALID, "unknown scheduling policy or preemption mode");
    if (p->max_num_seqs < 1 || p->max_num_seqs > 4096 || p->max_num_batched_tokens < 1 ||
        p->max_num_batched_tokens > 65536)
        return ix_errf(err, IX_ERR_INVALID, "max_num_seqs must be in [1, 4096] and "
                                            "max_num_batched_tokens in [1, 65536]");
    if (!(p->target_step_ms >= 0 && p->target_step_ms <= 3600e3))
        return ix_errf(err, IX_ERR_INVALID, "target_step_ms must be in [0, 3600000] (0 = off)");
    ix_sched *s = ix_calloc(1, sizeof *s);
    if (!s) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->kv = kv;
    ix_kv_layout lay;
    ix_kv_get_layout(kv, &lay);
    s->block_size = lay.block_size;
    s->work_cap = p->max_num_seqs * IX_SCHED_MAX_SEQS + p->max_num_batched_tokens;
    s->work = ix_malloc((size_t)s->work_cap * sizeof *s->work);
    s->list_cap = 0;
    if (!s->work) {
        ix_sched_destroy(s);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    *out = s;
    return IX_OK;
}

void ix_sched_destroy(ix_sched *s) {
    if (!s) return;
    ix_free(s->work);
    ix_free(s->lists);
    ix_free(s);
}

void ix_sched_add(ix_sched *s, ix_sched_item *it) {
    it->state = IX_SCHED_DONE;
    it->prev = it->next = NULL;
    move_to(s, it, IX_SCHED_WAITING);
}

void ix_sched_remove(ix_sched *s, ix_sched_item *it) {
    queue *q = queue_of(s, it->state);
    if (q) q_unlink(q, it);
    it->state = IX_SCHED_DONE;
}

void ix_sched_get_stats(const ix_sched *s, ix_sched_stats *out) {
    *out = s->stats;
    out->n_waiting = s->waiting.n;
    out->n_running = s->running.n;
    out->n_swapped = s->swapped.n;
    out->step_budget = s->last_budget;
    ix_sched_cost_fit(&s->cost, &out->cost_a_ms, &out->cost_b_ms);
}

void ix_sched_observe_step(ix_sched *s, int32_t n_tokens, uint64_t elapsed_ns) {
    ix_sched_cost_observe(&s->cost, n_tokens, (double)elapsed_ns / 1e6);
}

/* ---- the step-cost model ---------------------------------------------------------- */

void ix_sched_cost_observe(ix_sched_cost *c, int32_t n_tokens, double ms) {
    if (n_tokens <= 0 || !(ms >= 0) || isinf(ms)) return;
    const double keep = 1.0 - 1.0 / IX_SCHED_COST_WINDOW;
    double x = n_tokens;
    c->w = c->w * keep + 1;
    c->sx = c->sx * keep + x;
    c->sy = c->sy * keep + ms;
    c->sxx = c->sxx * keep + x * x;
    c->sxy = c->sxy * keep + x * ms;
    c->n_obs++;
}

bool ix_sched_cost_fit(const ix_sched_cost *c, double *a_ms, double *b_ms) {
    *a_ms = *b_ms = 0;
    if (!c->n_obs || !(c->w > 0)) return false;
    double mx = c->sx / c->w, my = c->sy / c->w;
    double vx = c->sxx / c->w - mx * mx, cxy = c->sxy / c->w - mx * my;
    /* Token counts spread by at least a token and 10% of their mean: enough
     * to tell the fixed cost from the per-token one. */
    if (vx >= 1.0 && vx >= 0.01 * mx * mx) {
        double b = cxy / vx, a = my - b * mx;
        if (b > 0 && a >= 0) {
            *a_ms = a;
            *b_ms = b;
            return true;
        }
    }
    *b_ms = my > 0 ? my / mx : 0; /* mx >= 1: every observation has a token */
    return true;
}

double ix_sched_cost_predict_ms(const ix_sched_cost *c, int32_t n_tokens) {
    double a, b;
    return ix_sched_cost_fit(c, &a, &b) ? a + b * n_tokens : 0.0;
}

int32_t ix_sched_cost_tokens_within(const ix_sched_cost *c, double ms) {
    double a, b;
    if (!ix_sched_cost_fit(c, &a, &b) || !(b > 0)) return INT32_MAX;
    double n = floor((ms - a) / b);
    return n <= 0 ? 0 : n >= (double)INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* ---- per-item arithmetic ------------------------------------------------------------ */

static int32_t seq_total(const ix_sched_item *it, int i) { return it->n_prompt + it->n_generated[i]; }
static int32_t seq_pending(const ix_sched_item *it, int i) {
    return it->finished[i] ? 0 : seq_total(it, i) - it->n_computed[i];
}
static bool seq_decoding(const ix_sched_item *it, int i) {
    return !it->finished[i] && it->n_generated[i] > 0 && seq_pending(it, i) == 1;
}
static int32_t live_seqs(const ix_sched_item *it) {
    int32_t n = 0;
    for (int i = 0; i < it->n_seqs; i++) n += !it->finished[i];
    return n;
}
/* Sequences the item will occupy once running (its choices). */
static int32_t seat_count(const ix_sched_item *it) {
    int32_t n = it->n_seqs > 1 ? live_seqs(it) : it->n_choices;
    return n > 0 ? n : 1;
}

static int32_t running_seats(const ix_sched *s) {
    int32_t n = 0;
    for (ix_sched_item *it = s->running.head; it; it = it->next) n += seat_count(it);
    return n;
}

/* ---- preemption ------------------------------------------------------------------- */

static void preempt_recompute(ix_sched *s, ix_sched_item *it) {
    for (int i = 0; i < it->n_seqs; i++) {
        if (it->seqs[i] >= 0) ix_kv_seq_free(s->kv, it->seqs[i]);
        it->seqs[i] = -1;
        it->n_computed[i] = 0;
    }
    it->n_preemptions++;
    s->stats.n_preempt_recompute++;
    move_to(s, it, IX_SCHED_WAITING);
}

/* Preempts it and drops the work already planned for it; returns the tokens
 * that work held (they go back to the step's budget). */
static int32_t preempt(ix_sched *s, ix_sched_item *it, ix_sched_plan *plan) {
    bool swapped = false;
    if (s->p.preempt == IX_PREEMPT_SWAP) {
        int i;
        swapped = true;
        for (i = 0; i < it->n_seqs; i++) {
            if (it->seqs[i] < 0) continue;
            if (ix_kv_seq_swap_out(s->kv, it->seqs[i]) != IX_OK) {
                swapped = false;
                break;
            }
        }
        if (!swapped) /* swap tier full: undo, then recompute */
            for (int k = 0; k < i; k++)
                if (it->seqs[k] >= 0) ix_kv_seq_swap_in(s->kv, it->seqs[k]);
    }
    if (swapped) {
        it->n_preemptions++;
        s->stats.n_preempt_swap++;
        move_to(s, it, IX_SCHED_SWAPPED);
    } else {
        preempt_recompute(s, it);
    }
    int32_t k = 0, freed = 0;
    for (int32_t w = 0; w < plan->n_work; w++) {
        if (plan->work[w].item == it) {
            freed += plan->work[w].n_tokens;
            continue;
        }
        plan->work[k++] = plan->work[w];
    }
    plan->n_work = k;
    plan->n_tokens -= freed;
    plan->preempted[plan->n_preempted++] = it;
    return freed;
}

static bool preempted_now(const ix_sched_plan *plan, const ix_sched_item *it) {
    for (int32_t i = 0; i < plan->n_preempted; i++)
        if (plan->preempted[i] == it) return true;
    return false;
}

/* ---- planning ------------------------------------------------------------------------- */

static ix_status ensure_lists(ix_sched *s) {
    int32_t need = s->waiting.n + s->running.n + s->swapped.n + 1;
    if (need <= s->list_cap) return IX_OK;
    int32_t cap = s->list_cap ? s->list_cap : 64;
    while (cap < need) cap *= 2;
    ix_sched_item **l = ix_realloc(s->lists, (size_t)cap * 3 * sizeof *l);
    if (!l) return IX_ERR_NOMEM;
    s->lists = l;
    s->list_cap = cap;
    return IX_OK;
}

static void add_work(ix_sched_plan *plan, ix_sched_item *it, int i, int32_t n, bool decode) {
    plan->work[plan->n_work++] = (ix_sched_work){it, i, n, decode};
    plan->n_tokens += n;
}

static ix_sched_work *find_work(ix_sched_plan *plan, const ix_sched_item *it, int i) {
    for (int32_t w = plan->n_work - 1; w >= 0; w--)
        if (plan->work[w].item == it && plan->work[w].seq_index == i) return &plan->work[w];
    return NULL;
}

/* Largest n in [0, want] such that seq can append n tokens within avail blocks. */
static int32_t fit_chunk(const ix_sched *s, int32_t seq, int32_t want, int64_t avail) {
    if (want <= 0) return 0;
    if (ix_kv_seq_blocks_needed(s->kv, seq, want) <= avail) return want;
    int32_t lo = 0, hi = want; /* blocks_needed is monotone in n */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (ix_kv_seq_blocks_needed(s->kv, seq, mid) <= avail) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Draft tokens sequence i of it may verify in this plan: what the engine
 * asked for, while the plan lets drafts run at all. */
static int32_t seq_drafts(const ix_sched *s, const ix_sched_item *it, int i) {
    int32_t d = it->n_draft[i];
    return s->drafts_on && d > 0 ? d : 0;
}

/* Blocks the running items' next decode tokens need (with their drafts while
 * the plan lets drafts run). */
static int64_t decode_need(const ix_sched *s) {
    int64_t need = 0;
    for (ix_sched_item *it = s->running.head; it; it = it->next)
        for (int i = 0; i < it->n_seqs; i++)
            if (seq_decoding(it, i)) need += ix_kv_seq_blocks_needed(s->kv, it->seqs[i], 1 + seq_drafts(s, it, i));
    return need;
}

/* What the prefill of one plan has left: the token budget, round one's
 * share of it, and the KV blocks (available minus what the decodes and the
 * chunks planned so far need). */
typedef struct room {
    int32_t budget, share;
    int64_t avail, planned;
} room;

/* Recounts r->avail from the cache (after admissions, swap-ins and
 * preemptions changed what it holds). */
static void room_recount(const ix_sched *s, room *r) {
    r->avail = ix_kv_n_available(s->kv) - decode_need(s) - r->planned;
}

/* Plans up to want more prefill tokens for sequence i of it -- a new work
 * entry, or the entry it already has in this plan made longer -- within the
 * budget and the free blocks. Returns the tokens added. */
static int32_t plan_prefill(ix_sched *s, ix_sched_plan *plan, ix_sched_item *it, int i, int32_t want,
                            room *r) {
    if (seq_decoding(it, i)) return 0;
    ix_sched_work *w = find_work(plan, it, i);
    int32_t have = w ? w->n_tokens : 0;
    int32_t left = seq_pending(it, i) - have;
    if (want > left) want = left;
    if (want > r->budget) want = r->budget;
    if (want <= 0) return 0;
    int32_t seq = it->seqs[i];
    int64_t held = have ? ix_kv_seq_blocks_needed(s->kv, seq, have) : 0;
    int32_t n = fit_chunk(s, seq, have + want, r->avail + held) - have;
    if (n <= 0) return 0;
    int64_t nb = ix_kv_seq_blocks_needed(s->kv, seq, have + n) - held;
    if (w) {
        w->n_tokens += n;
        plan->n_tokens += n;
    } else {
        add_work(plan, it, i, n, false);
    }
    r->budget -= n;
    r->avail -= nb;
    r->planned += nb;
    return n;
}

/* Round one of prefill for an item: one chunk of at most a block per
 * sequence, so that everything prefilling moves in this step -- while round
 * one's share of the budget lasts. */
static void prefill_round_one(ix_sched *s, ix_sched_plan *plan, ix_sched_item *it, room *r) {
    for (int i = 0; i < it->n_seqs && r->budget > 0 && r->share > 0; i++)
        r->share -= plan_prefill(s, plan, it, i, r->share < s->block_size ? r->share : s->block_size, r);
}

/* The work of an item that has just entered RUNNING (swapped in or
 * admitted): its decodes and its first prefill chunks -- a plan must move
 * what it brings in. */
static void start_item(ix_sched *s, ix_sched_plan *plan, ix_sched_item *it, room *r) {
    for (int i = 0; i < it->n_seqs && r->budget > 0; i++)
        if (seq_decoding(it, i)) {
            add_work(plan, it, i, 1, true);
            r->budget--;
        }
    prefill_round_one(s, plan, it, r);
}

/* Earliest time the item could finish if started now: its prefill in one
 * step plus one decode step, at the fitted cost. Used only to shed what is
 * certainly late. */
static bool certainly_late(const ix_sched *s, const ix_sched_item *it, uint64_t now) {
    if (!it->deadline_ns) return false;
    if (now >= it->deadline_ns) return true;
    if (!s->cost.n_obs) return false;
    double est_ms = ix_sched_cost_predict_ms(&s->cost, it->n_prompt - it->n_computed[0]) +
                    ix_sched_cost_predict_ms(&s->cost, 1);
    return (double)now + est_ms * 1e6 > (double)it->deadline_ns;
}


/* The step's token budget for n_decode decoding sequences: the cap, or --
 * with a target step time and someone decoding -- the tokens the cost model
 * says fit in the target, but never less than the decodes plus as many
 * prefill tokens (at least a block): below that, when the target cannot be
 * met, prefill could fall behind streams that each bring about as many
 * prompt tokens as they generate, and the queue would grow without bound. */
static int32_t step_budget(const ix_sched *s, int32_t n_decode) {
    int32_t cap = s->p.max_num_batched_tokens;
    if (!(s->p.target_step_ms > 0) || n_decode == 0) return cap;
    int32_t n = ix_sched_cost_tokens_within(&s->cost, s->p.target_step_ms);
    int32_t least = n_decode + (n_decode > s->block_size ? n_decode : s->block_size);
    if (n < least) n = least;
    return n < cap ? n : cap;
}

ix_status ix_sched_plan_step(ix_sched *s, uint64_t now, ix_sched_admit_fn admit_fn, void *ctx,
                             ix_sched_plan *plan) {
    memset(plan, 0, sizeof *plan);
    if (ensure_lists(s) != IX_OK) return IX_ERR_NOMEM;
    plan->work = s->work;
    plan->preempted = s->lists;
    plan->admitted = s->lists + s->list_cap;
    plan->expired = s->lists + 2 * s->list_cap;
    room r = {0, 0, 0, 0};

    /* 1. Decodes of running items, which always go first; preempt from the
     * back until they fit -- after dropping every draft: speculation never
     * costs a preemption. Their count sets the budget. */
    s->drafts_on = true;
    while (s->running.n > 0 && decode_need(s) > ix_kv_n_available(s->kv)) {
        if (s->drafts_on) {
            s->drafts_on = false;
            continue;
        }
        if (s->running.n == 1) break; /* alone and still too big: the engine sees IX_FULL */
        preempt(s, s->running.tail, plan);
    }
    int32_t n_decode = 0;
    for (ix_sched_item *it = s->running.head; it; it = it->next)
        for (int i = 0; i < it->n_seqs; i++)
            if (seq_decoding(it, i)) n_decode += 1 + seq_drafts(s, it, i);
    r.budget = s->last_budget = step_budget(s, n_decode);
    for (ix_sched_item *it = s->running.head; it; it = it->next)
        for (int i = 0; i < it->n_seqs; i++)
            if (seq_decoding(it, i) && r.budget > 0) {
                /* a sequence's drafts are cut (never its own token) when the
                 * budget runs out */
                int32_t n = 1 + seq_drafts(s, it, i);
                if (n > r.budget) n = r.budget;
                add_work(plan, it, i, n, true);
                r.budget -= n;
            }
    /* Round one may use half of what prefill has (two blocks at least): in a
     * burst of arrivals the oldest still finish first. */
    r.share = r.budget / 2 > 2 * s->block_size ? r.budget / 2 : 2 * s->block_size;

    /* 2. Round one of prefill for running items (chunked prefill, resumed
     * recomputes). If running items exist but none can move (their next
     * chunks do not fit), preempt from the back until one can: progress is
     * never blocked. */
    for (;;) {
        r.planned = 0;
        room_recount(s, &r);
        for (ix_sched_item *it = s->running.head; it && r.budget > 0; it = it->next)
            prefill_round_one(s, plan, it, &r);
        if (plan->n_work > 0 || s->running.n <= 1) break;
        r.budget += preempt(s, s->running.tail, plan);
    }
    int32_t seats = running_seats(s);
    /* 3. Swapped items come back first (they hold generated state). */
    for (ix_sched_item *it = s->swapped.head, *next; it; it = next) {
        next = it->next;
        int64_t need = 0;
        for (int i = 0; i < it->n_seqs; i++) {
            ix_kv_seq_info info;
            if (it->seqs[i] >= 0 && ix_kv_seq_get_info(s->kv, it->seqs[i], &info) == IX_OK)
                need += info.n_blocks_held + 1; /* + room for the next token */
        }
        if (seats + seat_count(it) > s->p.max_num_seqs || need > r.avail) break;
        bool ok = true;
        for (int i = 0; i < it->n_seqs && ok; i++)
            if (it->seqs[i] >= 0) ok = ix_kv_seq_swap_in(s->kv, it->seqs[i]) == IX_OK;
        if (!ok) { /* cannot happen after the check above; recompute rather than stall */
            preempt_recompute(s, it);
            break;
        }
        move_to(s, it, IX_SCHED_RUNNING);
        seats += seat_count(it);
        room_recount(s, &r);
        start_item(s, plan, it, &r);
    }

    /* 4. Admit waiting items in policy order, each with its first chunk. */
    for (ix_sched_item *it = s->waiting.head, *next; it; it = next) {
        next = it->next;
        if (preempted_now(plan, it)) continue; /* no thrashing within one step */
        if (s->p.policy == IX_SCHED_DEADLINE && certainly_late(s, it, now)) {
            ix_sched_remove(s, it);
            s->stats.n_expired++;
            plan->expired[plan->n_expired++] = it;
            continue;
        }
        if (r.budget <= 0 || r.share <= 0 || seats + seat_count(it) > s->p.max_num_seqs) break;
        /* Room for the whole prompt (minus cached blocks) plus one decode
         * block per choice, so an admitted item does not stall mid-prefill. */
        int64_t need = 0;
        int32_t n_cached = 0;
        for (int i = 0; i < (it->n_seqs > 1 ? it->n_seqs : 1); i++) {
            if (it->finished[i]) continue;
            int64_t nb = 0;
            int32_t total = seq_total(it, i);
            /* prefix matching knows the prompt only; generated tokens of a
             * recomputed choice need fresh blocks */
            ix_kv_prefix_match(s->kv, it->ns, it->prompt, it->n_prompt, &n_cached, &nb);
            need += nb + (total - it->n_prompt + s->block_size - 1) / s->block_size + 1;
        }
        need += it->n_seqs > 1 ? 0 : it->n_choices - 1;
        if (need > r.avail && s->p.policy == IX_SCHED_PRIORITY) {
            /* A higher-priority item preempts lower-priority running ones. */
            while (need > r.avail && s->running.tail && s->running.tail->priority < it->priority) {
                ix_sched_item *victim = s->running.tail;
                r.budget += preempt(s, victim, plan);
                seats -= seat_count(victim);
                room_recount(s, &r);
            }
        }
        if (need > r.avail) break;
        if (admit_fn(ctx, it) != IX_OK) break;
        move_to(s, it, IX_SCHED_RUNNING);
        plan->admitted[plan->n_admitted++] = it;
        seats += seat_count(it);
        room_recount(s, &r); /* adopting its cached prefix took blocks counted as free */
        start_item(s, plan, it, &r);
    }

    /* 5. Round two: what is left of the budget lengthens the chunks, in
     * policy order (the oldest prefill first under fcfs). */
    for (ix_sched_item *it = s->running.head; it && r.budget > 0; it = it->next)
        for (int i = 0; i < it->n_seqs && r.budget > 0; i++) plan_prefill(s, plan, it, i, r.budget, &r);
    return IX_OK;
}
