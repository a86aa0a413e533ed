/* inferx server: POST /v1/completions and /v1/chat/completions.
 *
 * One HTTP request is a job of one or more engine requests ("subs": one per
 * prompt of a completions prompt array), each with n choices; choice indices
 * run across them (sub * n + choice). The engine thread's callbacks only
 * append token events to the job's queue under its mutex and, when the
 * connection is suspended waiting for them, resume it (MHD_resume_connection
 * may be called from any thread). The HTTP threads (a fixed pool) never
 * block: a non-streaming handler suspends its connection until every sub has
 * finished and then answers with one buffer; a stream's content reader hands
 * out the SSE bytes it has and otherwise suspends the connection and returns
 * 0 until the engine resumes it.
 *
 * Lifetime: a job is shared by the MHD side (the handler's connection state,
 * or the stream's response) and the engine (one reference per submitted
 * sub, dropped after that sub's on_finish); the last reference frees it.
 * The engine touches the connection only to resume it, and only when it took
 * the `suspended` flag under the mutex: MHD never closes a suspended
 * connection, so the pointer is valid until that resume.
 *
 * A suspended connection is not polled by MHD, so a client that hangs up
 * would go unnoticed; the server's watcher thread (ix__srv_watch) peeks at the
 * sockets of suspended jobs every IXS_WATCH_MS and cancels the engine
 * requests of those whose peer has closed, and cancels every job when the
 * server aborts requests at shutdown. Cancelled requests finish within a
 * step; their on_finish resumes the connection, which then ends.
 *
 * Closing a job -- its usage, its cost, its access-log line -- needs the
 * engine's counters, which the engine thread must not ask for from a
 * callback; so a job is closed on an HTTP thread when it is answered, and a
 * job whose client left while it ran ("orphan") keeps the MHD side's
 * reference until the watcher has seen it finish and closed it. Its machine
 * time is charged like any other's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server_int.h"

#define IXS_MAX_PROMPTS 16
#define IXS_MAX_STOP 16
#define IXS_WATCH_MS 50

typedef struct ixs_event {
    int32_t sub, choice;
    ix_token token; /* IX_TOKEN_NONE: held-back text released at the end */
    size_t off, len; /* text in the queue's text buffer */
    bool has_sample;
    ix_sample_result sample;
} ixs_event;

typedef struct ixs_queue {
    ixs_event *ev;
    size_t n, cap;
    ix_buf text;
} ixs_queue;

typedef struct ixs_sub {
    ixs_job *job;
    int32_t index;
} ixs_sub;

/* A traced job's spans in the making: its context, when each engine request
 * was submitted, each one's prefill steps (the last entry absorbs steps past
 * IXS_TRACE_CHUNKS), and the request's settings the spans report. */
#define IXS_TRACE_CHUNKS 32
typedef struct ixs_tchunk {
    uint64_t start_ns, end_ns;
    int32_t seq, pos, n, total, step_tokens, steps;
} ixs_tchunk;

typedef struct ixs_jtrace {
    ixs_trace_ctx ctx;
    uint64_t t_submit[IXS_MAX_PROMPTS];
    ixs_tchunk chunks[IXS_MAX_PROMPTS][IXS_TRACE_CHUNKS]; /* under the job's mu */
    int32_t n_chunks[IXS_MAX_PROMPTS];
    char model[128]; /* as the request named it */
    double temperature, top_p;
    int64_t max_tokens, seed;
    bool has_seed;
} ixs_jtrace;

struct ixs_job {
    ix_server *s;
    struct MHD_Connection *conn;
    MHD_socket fd;           /* conn's socket, peeked only while suspended */
    const char *ep;          /* the endpoint (a static string) */
    uint64_t t_req_ns;       /* the HTTP request arrived */
    char remote[64];         /* the peer, for the access log */
    int key;                 /* the API key's index, -1: none */
    atomic_int refs;         /* the MHD side + one per submitted sub not yet finished */
    ixs_job *prev, *next;    /* s->jobs, under s->jobs_mu */
    bool listed;             /* on s->jobs (under s->jobs_mu) */
    bool accepted;           /* every sub was submitted */
    bool orphan;             /* under s->jobs_mu: the MHD side left it to the watcher */
    bool failed;             /* refused (an error answer): no usage, cost or job log line */
    ixs_job *reap_next;      /* ix__srv_reap's list */
    pthread_mutex_t mu;
    /* What was asked. */
    bool chat, stream, include_usage, want_logprobs;
    ixs_render rnd;          /* another API's answer (rnd.ctx set: /v1/responses, Ollama), else zero */
    /* Tool calling: answers are parsed for calls (streams hold each choice's
     * text until it ends, then send content or tool_calls deltas). */
    bool tools_on, parallel_calls;
    ixs_tool_syntax tool_syntax;
    json_t *tools;           /* a private deep copy of the request's tools */
    int32_t n, n_sub, n_logprobs;
    char id[64];
    int64_t created;
    ixs_sub subs[IXS_MAX_PROMPTS];
    uint64_t ids[IXS_MAX_PROMPTS];
    bool submitted[IXS_MAX_PROMPTS];
    /* Filled by the engine thread under mu. */
    ixs_queue q;
    bool done[IXS_MAX_PROMPTS];
    ix_finish_info fin[IXS_MAX_PROMPTS];
    int32_t n_done;
    bool oom;
    uint64_t last_token_ns[IXS_MAX_PROMPTS][IX_SCHED_MAX_SEQS];
    bool suspended;          /* under mu: MHD suspended conn and nobody has resumed it yet */
    atomic_bool cancelled, disconnected;
    atomic_bool queued[IXS_MAX_PROMPTS]; /* the sub holds n admission places (admit.c) */
    /* Half-close (the watcher, under mu): the client's end of stream was
     * seen while suspended (and a 102 Processing written where it can be,
     * peer_left); http10: no interim answers for this client. */
    bool peer_eof, http10;
    /* The MHD side (one HTTP thread at a time). */
    ixs_queue taken;
    bool seen_done[IXS_MAX_PROMPTS]; /* finish already turned into output */
    bool finalized, logged;
    ix_usage usage;
    double cost_usd;
    int32_t n_choices;       /* n_sub * n */
    ix_buf *text;            /* (n_choices) non-streaming: accumulated text */
    size_t *text_off;        /* (n_choices) bytes of text so far (completions text_offset) */
    json_t **lp;             /* (n_choices) non-streaming logprobs being built */
    ix_buf out;              /* streaming: SSE bytes not yet handed to MHD */
    size_t out_off;
    int phase;               /* streaming: 0 start, 1 tokens, 2 [DONE] queued */
    ix_buf scratch;
    ixs_jtrace *tr;          /* NULL: not traced */
    ixs_job_pol pol;         /* per-key admission and timeout (policy.c) */
};

static void job_unref(ixs_job *j);

/* Under j->mu: takes the suspension, if any; the caller then resumes conn
 * (outside the mutex) and is the only one to do so. */
static bool take_suspension(ixs_job *j) {
    bool was = j->suspended;
    j->suspended = false;
    return was;
}

/* ---- engine callbacks (engine thread: append and wake, nothing else) ----- */

/* A sub's sequences started (or finished first): their waiting places free. */
static void sub_started(ixs_sub *sub) {
    ixs_job *j = sub->job;
    if (atomic_exchange(&j->queued[sub->index], false)) ix__admit_started(&j->s->admit, j->n);
}

static void on_token(void *user, const ix_token_event *ev) {
    ixs_sub *sub = user;
    ixs_job *j = sub->job;
    sub_started(sub);
    uint64_t now = ix_time_ns();
    double itl = -1;
    bool wake = false;
    pthread_mutex_lock(&j->mu);
    ixs_queue *q = &j->q;
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 64;
        ixs_event *p = ix_realloc(q->ev, cap * sizeof *p);
        if (!p) {
            j->oom = true;
            pthread_mutex_unlock(&j->mu);
            return;
        }
        q->ev = p;
        q->cap = cap;
    }
    ixs_event *e = &q->ev[q->n];
    e->sub = sub->index;
    e->choice = ev->choice;
    e->token = ev->token;
    e->off = q->text.len;
    e->len = ev->text_len;
    e->has_sample = j->want_logprobs && ev->sample && ev->token != IX_TOKEN_NONE;
    if (e->has_sample) e->sample = *ev->sample;
    if (ev->text_len && ix_buf_append(&q->text, ev->text, ev->text_len) != IX_OK) {
        j->oom = true;
    } else {
        q->n++;
    }
    if (ev->token != IX_TOKEN_NONE && ev->choice >= 0 && ev->choice < IX_SCHED_MAX_SEQS) {
        uint64_t *last = &j->last_token_ns[sub->index][ev->choice];
        if (*last) itl = (double)(now - *last) / 1e9;
        *last = now;
    }
    if (j->stream) wake = take_suspension(j); /* a whole answer waits for the finish */
    pthread_mutex_unlock(&j->mu);
    if (wake) MHD_resume_connection(j->conn);
    if (itl >= 0) ix__metrics_itl(&j->s->metrics, itl);
}

/* A step computed part of a traced request's prompt. */
static void on_prefill(void *user, const ix_prefill_event *ev) {
    ixs_sub *sub = user;
    ixs_job *j = sub->job;
    ixs_jtrace *tr = j->tr;
    pthread_mutex_lock(&j->mu);
    int32_t *n = &tr->n_chunks[sub->index];
    ixs_tchunk *c = &tr->chunks[sub->index][*n < IXS_TRACE_CHUNKS ? *n : IXS_TRACE_CHUNKS - 1];
    if (*n < IXS_TRACE_CHUNKS) {
        *c = (ixs_tchunk){ev->start_ns, ev->end_ns, ev->seq, ev->pos, ev->n_tokens, ev->n_total, ev->step_tokens, 1};
        ++*n;
    } else {
        c->end_ns = ev->end_ns;
        c->n += ev->n_tokens;
        c->total = ev->n_total;
        c->steps++;
        if (ev->step_tokens > c->step_tokens) c->step_tokens = ev->step_tokens;
    }
    pthread_mutex_unlock(&j->mu);
}

static void on_finish(void *user, const ix_finish_info *info) {
    ixs_sub *sub = user;
    ixs_job *j = sub->job;
    sub_started(sub);
    ix__metrics_finish(&j->s->metrics, info);
    pthread_mutex_lock(&j->mu);
    j->fin[sub->index] = *info;
    j->done[sub->index] = true;
    ++j->n_done;
    bool wake = take_suspension(j);
    pthread_mutex_unlock(&j->mu);
    if (wake) MHD_resume_connection(j->conn);
    job_unref(j); /* this sub's reference: nothing from the engine touches j after this */
}

/* ---- job life cycle ------------------------------------------------------- */

static ixs_job *job_new(ixs_conn *cc) {
    ix_server *s = cc->s;
    struct MHD_Connection *c = cc->c;
    ixs_job *j = ix_calloc(1, sizeof *j);
    if (!j) return NULL;
    j->s = s;
    j->conn = c;
    j->ep = cc->ep;
    j->t_req_ns = cc->t0_ns;
    j->key = cc->key;
    memcpy(j->remote, cc->remote, sizeof j->remote);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : MHD_INVALID_SOCKET;
    pthread_mutex_init(&j->mu, NULL);
    atomic_init(&j->refs, 1); /* the MHD side */
    atomic_init(&j->cancelled, false);
    atomic_init(&j->disconnected, false);
    for (int i = 0; i < IXS_MAX_PROMPTS; i++) j->subs[i] = (ixs_sub){j, i};
    if (s->tracer && (j->tr = ix_calloc(1, sizeof *j->tr)) &&
        !ix__trace_begin(s->tracer, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "traceparent"),
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, "tracestate"), &j->tr->ctx)) {
        ix_free(j->tr); /* not sampled */
        j->tr = NULL;
    }
    for (int i = 0; i < IXS_MAX_PROMPTS; i++) {
        j->subs[i] = (ixs_sub){j, i};
        atomic_init(&j->queued[i], false);
    }
    j->http10 = cc->http10;
    atomic_fetch_add(&s->n_inflight, 1);
    return j;
}

typedef enum cancel_cause { CANCEL_DISCONNECT, CANCEL_SHUTDOWN, CANCEL_REFUSED, CANCEL_TIMEOUT } cancel_cause;

/* Claims the job's cancellation (once) and counts why; fills ids with the
 * engine requests to cancel and returns how many. Any thread; the caller
 * calls ix_engine_cancel outside its locks (ids of finished requests are
 * ignored by the engine). */
static int claim_cancel(ixs_job *j, cancel_cause why, uint64_t ids[IXS_MAX_PROMPTS]) {
    if (atomic_exchange(&j->cancelled, true)) return 0;
    int n = 0;
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < j->n_sub; i++)
        if (j->submitted[i] && !j->done[i]) ids[n++] = j->ids[i];
    pthread_mutex_unlock(&j->mu);
    if (!n || why == CANCEL_REFUSED || why == CANCEL_TIMEOUT) return n;
    pthread_mutex_lock(&j->s->metrics.mu);
    if (why == CANCEL_SHUTDOWN)
        j->s->metrics.cancelled_shutdown++;
    else
        j->s->metrics.cancelled_disconnect++;
    pthread_mutex_unlock(&j->s->metrics.mu);
    return n;
}

static void cancel_all(ixs_job *j, cancel_cause why) {
    uint64_t ids[IXS_MAX_PROMPTS];
    int n = claim_cancel(j, why, ids);
    for (int i = 0; i < n; i++) ix_engine_cancel(j->s->engine, ids[i]);
}

static void job_finalize(ixs_job *j);
static void job_log(ixs_job *j, int status);

/* Closes a job whose client left before the end of its answer: usage, cost,
 * the 499 of a whole answer never sent (nginx's
 * "client closed request"; a stream's 200 went out with its headers), and
 * its access-log line. */
static void job_close_abandoned(ixs_job *j) {
    atomic_store(&j->disconnected, true);
    job_finalize(j);
    if (!j->stream) ix__metrics_http(&j->s->metrics, j->ep, 499);
    job_log(j, j->stream ? 200 : 499);
}

static void job_free(ixs_job *j) {
    ix_server *s = j->s;
    if (j->listed) {
        pthread_mutex_lock(&s->jobs_mu);
        if (j->prev) j->prev->next = j->next;
        else s->jobs = j->next;
        if (j->next) j->next->prev = j->prev;
        pthread_mutex_unlock(&s->jobs_mu);
    }
    /* Not closed yet: only a job whose client left and that the engine
     * finished after the server had stopped. */
    if (j->accepted && !j->finalized) job_close_abandoned(j);
    ix__policy_job_end(s, &j->pol, &j->usage, j->cost_usd); /* a refused job's slot */
    ix_free(j->q.ev);
    ix_buf_free(&j->q.text);
    ix_free(j->taken.ev);
    ix_buf_free(&j->taken.text);
    for (int i = 0; i < j->n_choices; i++) {
        if (j->text) ix_buf_free(&j->text[i]);
        if (j->lp) json_decref(j->lp[i]);
    }
    ix_free(j->text);
    ix_free(j->text_off);
    ix_free(j->lp);
    json_decref(j->tools);
    ix_buf_free(&j->out);
    ix_buf_free(&j->scratch);
    if (j->rnd.ctx) j->rnd.free(j->rnd.ctx);
    ix_free(j->tr);
    pthread_mutex_destroy(&j->mu);
    ix_free(j);
    atomic_fetch_sub(&s->n_inflight, 1); /* last: shutdown may free s once this reaches 0 */
}

static void job_unref(ixs_job *j) {
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1) job_free(j);
}

/* The MHD side is done with the job (answered, or the connection closed;
 * an HTTP thread). A job still running is cancelled (the client went away,
 * or the server is aborting) and left to the watcher, which closes it once
 * it has finished; one that has finished but was not answered is closed
 * here. Then the MHD reference goes. */
void ix__srv_job_release(ixs_job *j) {
    if (!j) return;
    ix_server *s = j->s;
    pthread_mutex_lock(&j->mu);
    bool live = j->n_done < j->n_sub;
    pthread_mutex_unlock(&j->mu);
    if (live) {
        atomic_store(&j->disconnected, true);
        cancel_all(j, j->failed ? CANCEL_REFUSED : atomic_load(&s->aborting) ? CANCEL_SHUTDOWN : CANCEL_DISCONNECT);
        if (j->accepted) {
            pthread_mutex_lock(&s->jobs_mu);
            bool listed = j->listed;
            j->orphan = listed;
            pthread_mutex_unlock(&s->jobs_mu);
            if (listed) return; /* the watcher drops the reference */
        }
    } else if (j->accepted && !j->finalized) {
        job_close_abandoned(j); /* finished, but its client left before the answer */
    }
    job_unref(j);
}

/* Takes the queued events (and finish flags) into j->taken. Returns whether
 * every sub is done and everything was taken. */
static bool job_take(ixs_job *j, bool newly_done[IXS_MAX_PROMPTS]) {
    pthread_mutex_lock(&j->mu);
    ixs_queue t = j->taken;
    j->taken = j->q;
    j->q = t;
    j->q.n = 0;
    ix_buf_clear(&j->q.text);
    for (int i = 0; i < j->n_sub; i++) {
        newly_done[i] = j->done[i] && !j->seen_done[i];
        j->seen_done[i] |= j->done[i];
    }
    bool all = j->n_done == j->n_sub;
    pthread_mutex_unlock(&j->mu);
    return all;
}

/* Suspends the connection unless there is something to do: every sub
 * finished, or (streaming) events are queued. Returns whether it did. */
static bool job_suspend(ixs_job *j) {
    pthread_mutex_lock(&j->mu);
    bool wait = j->n_done < j->n_sub && (!j->stream || j->q.n == 0);
    if (wait) {
        j->suspended = true;
        MHD_suspend_connection(j->conn); /* under mu: no resume can come before it */
    }
    pthread_mutex_unlock(&j->mu);
    return wait;
}

/* Usage and cost once every sub has finished. Cost: the machine's price
 * times the request's share of every engine step it took part in, by the
 * tokens it put in (ix_timings.compute_ms; docs/server.md). Whoever holds
 * the MHD side's reference calls it, once. */
static void job_finalize(ixs_job *j) {
    if (j->finalized) return;
    j->finalized = true;
    double compute_s = 0;
    for (int i = 0; i < j->n_sub; i++) {
        const ix_usage *u = &j->fin[i].usage;
        j->usage.prompt_tokens += u->prompt_tokens;
        j->usage.cached_prompt_tokens += u->cached_prompt_tokens;
        j->usage.completion_tokens += u->completion_tokens;
        compute_s += j->fin[i].timings.compute_ms / 1000.0;
    }
    if (j->s->p.cost_per_hour_usd > 0) {
        j->cost_usd = j->s->p.cost_per_hour_usd / 3600.0 * compute_s;
        ix__metrics_cost(&j->s->metrics, j->cost_usd);
    }
    ix__policy_job_end(j->s, &j->pol, &j->usage, j->cost_usd);
}

/* ---- tracing ------------------------------------------------------------- */

static void span_emit(ixs_job *j, const uint8_t *id, const uint8_t *parent, const char *name, ixs_span_kind kind,
                      uint64_t start, uint64_t end, const ixs_attrs *a, const char *error) {
    ixs_span sp = {&j->tr->ctx, id, parent, name, kind, start, end, error != NULL, error, a};
    ix__trace_emit(j->s->tracer, &sp);
}

/* The request's server span (status, GenAI attributes) and, for each engine
 * request, its queue, prefill and decode spans under it. error: a refused
 * request's message (its engine requests, if any, are not reported). */
static void job_trace(ixs_job *j, int status, const char *error) {
    ixs_jtrace *tr = j->tr;
    if (!tr) return;
    ix_server *s = j->s;
    uint64_t now = ix_time_ns();
    char name[96];
    snprintf(name, sizeof name, "POST %s", j->ep);
    ixs_attrs a = {0};
    ix__attr_str(&a, "http.request.method", "POST");
    ix__attr_str(&a, "http.route", j->ep);
    ix__attr_str(&a, "url.path", j->ep);
    ix__attr_int(&a, "http.response.status_code", status);
    ix__attr_str(&a, "client.address", j->remote);
    ix__attr_int(&a, "server.port", s->port);
    ix__attr_str(&a, "gen_ai.operation.name", j->chat ? "chat" : "text_completion");
    ix__attr_str(&a, "gen_ai.provider.name", "inferx");
    ix__attr_str(&a, "gen_ai.request.model", tr->model[0] ? tr->model : s->model_name);
    if (!error) {
        ix__attr_str(&a, "gen_ai.response.model", s->model_name);
        ix__attr_str(&a, "gen_ai.response.id", j->id);
        if (tr->max_tokens > 0) ix__attr_int(&a, "gen_ai.request.max_tokens", tr->max_tokens);
        ix__attr_dbl(&a, "gen_ai.request.temperature", tr->temperature);
        ix__attr_dbl(&a, "gen_ai.request.top_p", tr->top_p);
        if (tr->has_seed) ix__attr_int(&a, "gen_ai.request.seed", tr->seed);
        if (j->n_choices > 1) ix__attr_int(&a, "gen_ai.request.choice.count", j->n_choices);
        ix__attr_int(&a, "gen_ai.usage.input_tokens", j->usage.prompt_tokens);
        ix__attr_int(&a, "gen_ai.usage.output_tokens", j->usage.completion_tokens);
        const char *reasons[IXS_MAX_PROMPTS * IX_SCHED_MAX_SEQS];
        size_t nr = 0;
        for (int i = 0; i < j->n_sub; i++)
            for (int c = 0; c < j->fin[i].n_choices && c < IX_SCHED_MAX_SEQS; c++)
                reasons[nr++] = ix_finish_reason_name(j->fin[i].reasons[c]);
        ix__attr_strs(&a, "gen_ai.response.finish_reasons", reasons, nr);
        ix__attr_int(&a, "inferx.usage.cached_tokens", j->usage.cached_prompt_tokens);
        ix__attr_bool(&a, "inferx.stream", j->stream);
        ix__attr_bool(&a, "inferx.client_closed", atomic_load(&j->disconnected));
        if (s->p.cost_per_hour_usd > 0) ix__attr_dbl(&a, "inferx.cost_usd", j->cost_usd);
    } else {
        ix__attr_str(&a, "error.type", status >= 500 ? "server_error" : "invalid_request");
    }
    /* HTTP semantic conventions: a server span is an error for 5xx only. */
    const char *err = status >= 500 ? (error ? error : "server error") : NULL;
    span_emit(j, tr->ctx.span_id, tr->ctx.has_parent ? tr->ctx.parent_id : NULL, name, IXS_SPAN_SERVER, j->t_req_ns,
              now, &a, err);
    ix__attrs_free(&a);
    if (error) return;
    for (int i = 0; i < j->n_sub; i++) {
        const ix_finish_info *f = &j->fin[i];
        uint64_t t0 = tr->t_submit[i];
        uint8_t id[8];
        ix__attr_int(&a, "inferx.prompt_index", i);
        ix__attr_int(&a, "gen_ai.usage.input_tokens", f->usage.prompt_tokens);
        ix__attr_int(&a, "inferx.usage.cached_tokens", f->usage.cached_prompt_tokens);
        ix__trace_new_span_id(s->tracer, id);
        span_emit(j, id, tr->ctx.span_id, "queue", IXS_SPAN_INTERNAL, t0, t0 + (uint64_t)(f->timings.queue_ms * 1e6), &a,
                  NULL);
        ix__attrs_free(&a);
        pthread_mutex_lock(&j->mu); /* the engine is done with it; for the analysers */
        int32_t nc = tr->n_chunks[i];
        pthread_mutex_unlock(&j->mu);
        for (int k = 0; k < nc; k++) {
            const ixs_tchunk *c = &tr->chunks[i][k];
            ix__attr_int(&a, "inferx.prompt_index", i);
            ix__attr_int(&a, "inferx.sequence", c->seq);
            ix__attr_int(&a, "inferx.prefill.position", c->pos);
            ix__attr_int(&a, "inferx.prefill.tokens", c->n);
            ix__attr_int(&a, "inferx.prefill.total", c->total);
            ix__attr_int(&a, "inferx.step.tokens", c->step_tokens);
            if (c->steps > 1) ix__attr_int(&a, "inferx.prefill.steps", c->steps);
            ix__trace_new_span_id(s->tracer, id);
            span_emit(j, id, tr->ctx.span_id, "prefill", IXS_SPAN_INTERNAL, c->start_ns, c->end_ns, &a, NULL);
            ix__attrs_free(&a);
        }
        if (f->usage.completion_tokens > 0 && f->timings.first_token_ms > 0) {
            ix__attr_int(&a, "inferx.prompt_index", i);
            ix__attr_int(&a, "gen_ai.usage.output_tokens", f->usage.completion_tokens);
            ix__attr_str(&a, "inferx.finish_reason", ix_finish_reason_name(f->reason));
            if (f->n_preemptions) ix__attr_int(&a, "inferx.preemptions", f->n_preemptions);
            ix__trace_new_span_id(s->tracer, id);
            span_emit(j, id, tr->ctx.span_id, "decode", IXS_SPAN_INTERNAL,
                      t0 + (uint64_t)(f->timings.first_token_ms * 1e6), t0 + (uint64_t)(f->timings.total_ms * 1e6), &a,
                      f->reason == IX_FINISH_ERROR ? f->message : NULL);
            ix__attrs_free(&a);
        }
    }
}

/* The job's access-log line (once, after job_finalize): what it asked,
 * what it got and what it cost; never prompt or output text. */
static void job_log(ixs_job *j, int status) {
    if (j->logged) return;
    j->logged = true;
    job_trace(j, status, NULL);
    ix_server *s = j->s;
    json_t *o = ix__srv_log_line(s, "POST", j->ep, status, j->t_req_ns, j->remote, j->key);
    if (!o) return;
    double ttft = -1, queue = -1;
    for (int i = 0; i < j->n_sub; i++) {
        const ix_timings *t = &j->fin[i].timings;
        if (j->fin[i].usage.completion_tokens > 0 && t->first_token_ms > 0 && (ttft < 0 || t->first_token_ms < ttft))
            ttft = t->first_token_ms;
        if (queue < 0 || t->queue_ms < queue) queue = t->queue_ms;
    }
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "model", json_string(s->model_name));
    json_object_set_new(o, "stream", json_boolean(j->stream));
    json_object_set_new(o, "n", json_integer(j->n_choices));
    json_object_set_new(o, "prompt_tokens", json_integer(j->usage.prompt_tokens));
    json_object_set_new(o, "cached_tokens", json_integer(j->usage.cached_prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(j->usage.completion_tokens));
    json_object_set_new(o, "finish_reason", json_string(ix_finish_reason_name(j->fin[0].reason)));
    json_object_set_new(o, "ttft_ms", ttft >= 0 ? json_real(round(ttft * 1e3) / 1e3) : json_null());
    json_object_set_new(o, "queue_ms", json_real(round((queue > 0 ? queue : 0) * 1e3) / 1e3));
    if (s->p.cost_per_hour_usd > 0) json_object_set_new(o, "cost_usd", json_real(j->cost_usd));
    json_object_set_new(o, "client_closed", json_boolean(atomic_load(&j->disconnected)));
    if (j->tr) {
        char hex[33];
        ix__trace_hex(j->tr->ctx.trace_id, 16, hex);
        json_object_set_new(o, "trace_id", json_string(hex));
    }
    ix__srv_log_write(s, o);
}

/* ---- the watcher ----------------------------------------------------------- */

void ix__srv_reap(ix_server *s, bool all) {
    ixs_job *list = NULL;
    pthread_mutex_lock(&s->jobs_mu);
    for (ixs_job *j = s->jobs, *next; j; j = next) {
        next = j->next;
        if (!j->orphan) continue;
        pthread_mutex_lock(&j->mu);
        bool done = j->n_done == j->n_sub;
        pthread_mutex_unlock(&j->mu);
        if (!done && !all) continue;
        if (j->prev) j->prev->next = j->next;
        else s->jobs = j->next;
        if (j->next) j->next->prev = j->prev;
        j->listed = false;
        j->orphan = done; /* reused below: whether it can be closed now */
        j->reap_next = list;
        list = j;
    }
    pthread_mutex_unlock(&s->jobs_mu);
    for (ixs_job *j = list, *next; j; j = next) {
        next = j->reap_next;
        if (j->orphan) job_close_abandoned(j);
        job_unref(j);
    }
}

/* Whether the client of a suspended job has left (under j->mu). Its end of
 * stream alone does not say: HTTP lets a client shut its sending side once
 * the request is sent and still read the answer (`nc -N`). A client that
 * closed its socket answers any byte with a reset, so a whole-answer job in
 * clear text gets an interim "102 Processing" (RFC 9110 15.2: clients skip
 * 1xx answers) and counts as gone when the reset comes. A stream learns it
 * from its next write (MHD closes the connection, which cancels the job);
 * TLS and HTTP/1.0 cannot carry the probe, and run on to their answer. */
static bool peer_left(ixs_job *j) {
    static const char k_processing[] = "HTTP/1.1 102 Processing\r\n\r\n";
    ixs_peer st = ix__srv_peer(j->fd);
    if (st == IXS_PEER_OPEN) return false;
    if (st == IXS_PEER_GONE) return true;
    if (j->peer_eof) return false; /* seen before: probed, or nothing to probe with */
    j->peer_eof = true;
    if (j->stream || j->s->tls || j->http10) return false;
    return send(j->fd, k_processing, sizeof k_processing - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0;
}

/* Hang-ups of suspended connections, aborting at shutdown, and closing the
 * jobs whose client left. */
void *ix__srv_watch(void *arg) {
    ix_server *s = arg;
    uint64_t *ids = NULL;
    size_t cap = 0;
    while (!atomic_load(&s->watch_stop)) {
        struct timespec ts = {0, IXS_WATCH_MS * 1000000L};
        nanosleep(&ts, NULL);
        ix__srv_reap(s, false);
        ix__conn_sweep(s);
        ix__rstore_save(s, false);
        bool aborting = atomic_load(&s->aborting);
        size_t n = 0;
        pthread_mutex_lock(&s->jobs_mu);
        for (ixs_job *j = s->jobs; j; j = j->next) {
            if (atomic_load(&j->cancelled)) continue;
            bool gone = false, late = !aborting && ix__policy_expired(s, &j->pol);
            if (!aborting && !late) {
                /* Only while suspended is the socket certainly open: MHD
                 * closes a connection only after it has been resumed. */
                pthread_mutex_lock(&j->mu);
                gone = j->suspended && peer_left(j);
                pthread_mutex_unlock(&j->mu);
                if (!gone) continue;
                atomic_store(&j->disconnected, true);
            }
            if (cap - n < IXS_MAX_PROMPTS) {
                size_t nc = cap ? cap * 2 : 64;
                uint64_t *p = ix_realloc(ids, nc * sizeof *p);
                if (!p) break; /* next round */
                ids = p;
                cap = nc;
            }
            n += (size_t)claim_cancel(j, aborting ? CANCEL_SHUTDOWN : late ? CANCEL_TIMEOUT : CANCEL_DISCONNECT, ids + n);
        }
        pthread_mutex_unlock(&s->jobs_mu);
        for (size_t i = 0; i < n; i++) ix_engine_cancel(s->engine, ids[i]);
    }
    ix_free(ids);
    return NULL;
}

/* Resumes every suspended connection (their jobs then end with an error) so
 * that MHD_stop_daemon finds none. Only when jobs outlived the shutdown's
 * bounded waits. Returns how many. */
int ix__srv_resume_all(ix_server *s) {
    int n = 0;
    pthread_mutex_lock(&s->jobs_mu);
    for (ixs_job *j = s->jobs; j; j = j->next) {
        atomic_store(&j->disconnected, true);
        pthread_mutex_lock(&j->mu);
        bool wake = take_suspension(j);
        pthread_mutex_unlock(&j->mu);
        if (wake) {
            MHD_resume_connection(j->conn);
            n++;
        }
    }
    pthread_mutex_unlock(&s->jobs_mu);
    return n;
}

/* ---- JSON pieces ---------------------------------------------------------- */

static json_t *token_json(ixs_job *j, ix_token id, bool with_bytes) {
    ix_buf *b = &j->scratch;
    ix_buf_clear(b);
    ix_tokenizer_token_bytes(j->s->tok, id, 0, false, b);
    if (!with_bytes) return ix__json_text(b->data, b->len);
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < b->len; i++) json_array_append_new(bytes, json_integer((unsigned char)b->data[i]));
    return bytes;
}

static json_t *lp_value(float lp) { return json_real(isfinite(lp) ? lp : -9999.0); }

/* Chat: {token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]}. */
static json_t *lp_chat_entry(ixs_job *j, const ix_sample_result *r) {
    json_t *top = json_array();
    for (int k = 0; top && k < r->n_top && k < j->n_logprobs; k++)
        json_array_append_new(top, json_pack("{s:o, s:o, s:o}", "token", token_json(j, r->top_ids[k], false),
                                             "logprob", lp_value(r->top_logprobs[k]), "bytes",
                                             token_json(j, r->top_ids[k], true)));
    return json_pack("{s:o, s:o, s:o, s:o}", "token", token_json(j, r->id, false), "logprob", lp_value(r->logprob),
                     "bytes", token_json(j, r->id, true), "top_logprobs", top ? top : json_array());
}

/* Completions: appends to {tokens, token_logprobs, top_logprobs, text_offset}. */
static void lp_cmpl_append(ixs_job *j, json_t *obj, const ix_sample_result *r, size_t offset) {
    json_array_append_new(json_object_get(obj, "tokens"), token_json(j, r->id, false));
    json_array_append_new(json_object_get(obj, "token_logprobs"), lp_value(r->logprob));
    json_t *top = json_object();
    for (int k = 0; top && k < r->n_top && k < j->n_logprobs; k++) {
        json_t *t = token_json(j, r->top_ids[k], false);
        if (t) json_object_set_new(top, json_string_value(t), lp_value(r->top_logprobs[k]));
        json_decref(t);
    }
    json_array_append_new(json_object_get(obj, "top_logprobs"), top ? top : json_null());
    json_array_append_new(json_object_get(obj, "text_offset"), json_integer((json_int_t)offset));
}

static json_t *lp_new(bool chat) {
    if (chat) return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

static json_t *usage_json(ixs_job *j) {
    json_t *u = json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", j->usage.prompt_tokens, "completion_tokens",
                          j->usage.completion_tokens, "total_tokens",
                          j->usage.prompt_tokens + j->usage.completion_tokens, "prompt_tokens_details",
                          "cached_tokens", j->usage.cached_prompt_tokens);
    if (u && j->s->p.cost_per_hour_usd > 0) json_object_set_new(u, "cost_usd", json_real(j->cost_usd));
    return u;
}

static json_t *envelope(ixs_job *j, bool chunk) {
    const char *object = j->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s, s:[]}", "id", j->id, "object", object, "created",
                     (json_int_t)j->created, "model", j->s->model_name, "choices");
}

static const char *reason_name(ix_finish_reason r) { return ix_finish_reason_name(r); }

/* ---- tool calls ---------------------------------------------------------- */

/* Choice gi's content (a string, or null when the answer is only calls);
 * *calls gets its tool_calls array in OpenAI's shape (id, type, function
 * {name, arguments}) or NULL, and *why becomes "tool_calls" when calls end
 * an answer that stopped by itself. */
static json_t *choice_content(ixs_job *j, int gi, ix_finish_reason r, json_t **calls, const char **why) {
    *calls = NULL;
    if (!j->chat || !j->tools_on) return ix__json_text(j->text[gi].data, j->text[gi].len);
    json_t *parsed = NULL;
    ix_buf_clear(&j->scratch);
    if (ix__tools_parse_output(j->text[gi].data ? j->text[gi].data : "", j->text[gi].len, j->tool_syntax, j->tools,
                               &parsed, &j->scratch) != IX_OK) {
        j->oom = true;
        return json_null();
    }
    if (!parsed) return ix__json_text(j->scratch.data, j->scratch.len);
    json_t *out = json_array();
    size_t k;
    json_t *c;
    json_array_foreach(parsed, k, c) {
        if (!j->parallel_calls && k > 0) break; /* at most one call when parallel calls are off */
        char id[40];
        ix__srv_new_id(j->s, "call_", id, sizeof id);
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function",
                                             "name", json_object_get(c, "name"), "arguments",
                                             json_object_get(c, "arguments")));
    }
    json_decref(parsed);
    *calls = out;
    if (r == IX_FINISH_STOP) *why = "tool_calls";
    return j->scratch.len ? ix__json_text(j->scratch.data, j->scratch.len) : json_null();
}

/* ---- non-streaming ------------------------------------------------------- */

/* Choice 0 of sub 0 as responses.c sees it (a responses job has one). */
static ixs_gen_result gen_result(ixs_job *j) {
    const ix_finish_info *fi = &j->fin[0];
    ixs_gen_result g = {j->text[0].data ? j->text[0].data : "", j->text[0].len, fi->reason,
                        fi->reason == IX_FINISH_ERROR ? fi->message : NULL, j->usage,
                        j->s->p.cost_per_hour_usd > 0 ? j->cost_usd : -1.0, fi->timings,
                        fi->reason == IX_FINISH_ERROR && fi->invalid_request};
    return g;
}

static void absorb(ixs_job *j) {
    ixs_queue *t = &j->taken;
    for (size_t i = 0; i < t->n; i++) {
        const ixs_event *e = &t->ev[i];
        if (e->choice < 0 || e->choice >= j->n) continue;
        int gi = e->sub * j->n + e->choice;
        if (e->has_sample) {
            if (j->chat)
                json_array_append_new(json_object_get(j->lp[gi], "content"), lp_chat_entry(j, &e->sample));
            else
                lp_cmpl_append(j, j->lp[gi], &e->sample, j->text_off[gi]);
        }
        if (e->len && ix_buf_append(&j->text[gi], t->text.data + e->off, e->len) != IX_OK) j->oom = true;
        j->text_off[gi] += e->len;
    }
    t->n = 0;
    ix_buf_clear(&t->text);
}

/* Every sub has finished: the whole response (cc->job is j). */
static enum MHD_Result answer_whole(ixs_job *j, ixs_conn *cc) {
    bool newly[IXS_MAX_PROMPTS];
    job_take(j, newly); /* every sub has finished */
    absorb(j);
    if (atomic_load(&j->disconnected)) {
        job_close_abandoned(j);
        return MHD_NO;
    }
    job_finalize(j);
    ixs_err e;
    if (ix__policy_timeout_error(&j->pol, &e)) {
        job_log(j, e.http);
        return ix__srv_reply_err(cc, &e);
    }
    for (int i = 0; i < j->n_sub; i++) {
        if (j->fin[i].reason == IX_FINISH_ERROR) {
            /* a grammar too ambiguous to follow is the client's to fix */
            int http = j->fin[i].invalid_request ? 400 : 500;
            ix__srv_errf(&e, http, http == 400 ? "invalid_request_error" : "server_error", NULL,
                         "generation failed: %s", j->fin[i].message);
            job_log(j, http);
            return ix__srv_reply_err(cc, &e);
        }
        if (j->fin[i].reason == IX_FINISH_DEADLINE) {
            ix__srv_errf(&e, 503, "server_error", "deadline_ms",
                         "the request was shed: it could not finish within its deadline_ms");
            e.code = "deadline_exceeded";
            job_log(j, 503);
            return ix__srv_reply_err(cc, &e);
        }
    }
    if (j->oom) {
        job_log(j, 500);
        return ix__srv_reply_json(cc, 500, NULL);
    }
    if (j->rnd.ctx) {
        ixs_gen_result g = gen_result(j);
        json_t *obj = j->rnd.whole(j->rnd.ctx, &g);
        job_log(j, obj ? 200 : 500);
        return ix__srv_reply_json(cc, obj ? 200 : 500, obj);
    }
    json_t *root = envelope(j, false);
    json_t *choices = json_object_get(root, "choices");
    for (int gi = 0; root && gi < j->n_choices; gi++) {
        const ix_finish_info *fi = &j->fin[gi / j->n];
        int c_in = gi % j->n;
        ix_finish_reason r = c_in < fi->n_choices ? fi->reasons[c_in] : fi->reason;
        json_t *calls = NULL;
        const char *why = reason_name(r);
        json_t *text = choice_content(j, gi, r, &calls, &why);
        json_t *lp = j->want_logprobs ? json_incref(j->lp[gi]) : json_null();
        json_t *ch = j->chat ? json_pack("{s:i, s:{s:s, s:o}, s:o, s:s}", "index", gi, "message", "role", "assistant",
                                         "content", text, "logprobs", lp, "finish_reason", why)
                             : json_pack("{s:i, s:o, s:o, s:s}", "index", gi, "text", text, "logprobs", lp,
                                         "finish_reason", reason_name(r));
        if (ch && calls) json_object_set_new(json_object_get(ch, "message"), "tool_calls", calls);
        else json_decref(calls);
        json_array_append_new(choices, ch);
    }
    if (root) json_object_set_new(root, "usage", usage_json(j));
    job_log(j, root ? 200 : 500);
    return ix__srv_reply_json(cc, 200, root);
}

/* ---- streaming ----------------------------------------------------------- */

static void sse(ixs_job *j, json_t *chunk) {
    char *text = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
    json_decref(chunk);
    if (!text) {
        j->oom = true;
        return;
    }
    if (ix_buf_printf(&j->out, "data: %s\n\n", text) != IX_OK) j->oom = true;
    free(text);
}

static json_t *chunk_choice(ixs_job *j, json_t **choice_out, int gi) {
    json_t *root = envelope(j, true);
    json_t *ch = j->chat ? json_pack("{s:i, s:{}, s:n, s:n}", "index", gi, "delta", "logprobs", "finish_reason")
                         : json_pack("{s:i, s:s, s:n, s:n}", "index", gi, "text", "", "logprobs", "finish_reason");
    if (root && ch) json_array_append(json_object_get(root, "choices"), ch);
    json_decref(ch);
    *choice_out = ch;
    return root;
}

/* A chunk of choice gi whose delta carries one tool_calls entry. */
static void sse_call_delta(ixs_job *j, int gi, json_t *entry /* stolen */) {
    json_t *ch, *root = chunk_choice(j, &ch, gi);
    if (root && entry) json_object_set_new(json_object_get(ch, "delta"), "tool_calls", json_pack("[o]", entry));
    else json_decref(entry);
    sse(j, root);
}

/* A held choice (tools on) has ended: its content as one delta, then each
 * call as OpenAI streams them -- a first delta with index, id, type and
 * function.name (arguments ""), then the arguments in fragments -- then the
 * finish. */
static void stream_held(ixs_job *j, int gi, ix_finish_reason r) {
    json_t *calls = NULL;
    const char *why = reason_name(r);
    json_t *content = choice_content(j, gi, r, &calls, &why);
    if (json_is_string(content) && json_string_length(content)) {
        json_t *ch, *root = chunk_choice(j, &ch, gi);
        if (root) json_object_set_new(json_object_get(ch, "delta"), "content", json_incref(content));
        if (root && j->want_logprobs) json_object_set(ch, "logprobs", j->lp[gi]);
        sse(j, root);
    }
    json_decref(content);
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        json_t *fn = json_object_get(c, "function");
        sse_call_delta(j, gi, json_pack("{s:I, s:O, s:s, s:{s:O, s:s}}", "index", (json_int_t)k, "id",
                                        json_object_get(c, "id"), "type", "function", "function", "name",
                                        json_object_get(fn, "name"), "arguments", ""));
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        size_t n = args ? strlen(args) : 0;
        for (size_t off = 0; off < n;) {
            size_t len = n - off < 24 ? n - off : 24;
            while (off + len < n && ((unsigned char)args[off + len] & 0xC0) == 0x80) len++; /* whole characters */
            sse_call_delta(j, gi, json_pack("{s:I, s:{s:s%}}", "index", (json_int_t)k, "function", "arguments",
                                            args + off, len));
            off += len;
        }
    }
    json_decref(calls);
    json_t *ch, *root = chunk_choice(j, &ch, gi);
    if (root) json_object_set_new(ch, "finish_reason", json_string(why));
    sse(j, root);
}

static void stream_events(ixs_job *j, const bool newly[IXS_MAX_PROMPTS]) {
    ixs_queue *t = &j->taken;
    if (j->tools_on && j->chat) absorb(j); /* held until each choice ends */
    for (size_t i = 0; i < t->n; i++) {
        const ixs_event *e = &t->ev[i];
        if (e->choice < 0 || e->choice >= j->n || (!e->len && !e->has_sample)) continue;
        int gi = e->sub * j->n + e->choice;
        if (j->rnd.ctx) {
            if (ix_buf_append(&j->text[gi], t->text.data + e->off, e->len) != IX_OK ||
                (e->len && !j->rnd.delta(j->rnd.ctx, &j->out, t->text.data + e->off, e->len)))
                j->oom = true;
            continue;
        }
        json_t *ch, *root = chunk_choice(j, &ch, gi);
        if (!root) {
            j->oom = true;
            continue;
        }
        json_t *text = ix__json_text(t->text.data + e->off, e->len);
        if (j->chat)
            json_object_set_new(json_object_get(ch, "delta"), "content", text);
        else
            json_object_set_new(ch, "text", text);
        if (e->has_sample) {
            json_t *lp = lp_new(j->chat);
            if (j->chat)
                json_array_append_new(json_object_get(lp, "content"), lp_chat_entry(j, &e->sample));
            else
                lp_cmpl_append(j, lp, &e->sample, j->text_off[gi]);
            json_object_set_new(ch, "logprobs", lp);
        }
        j->text_off[gi] += e->len;
        sse(j, root);
    }
    t->n = 0;
    ix_buf_clear(&t->text);
    for (int s = 0; s < j->n_sub && !j->rnd.ctx; s++) {
        if (!newly[s]) continue;
        const ix_finish_info *fi = &j->fin[s];
        for (int c = 0; c < j->n; c++) {
            ix_finish_reason r = c < fi->n_choices ? fi->reasons[c] : fi->reason;
            if (j->tools_on && j->chat && r != IX_FINISH_ERROR) {
                stream_held(j, s * j->n + c, r);
                continue;
            }
            json_t *ch, *root = chunk_choice(j, &ch, s * j->n + c);
            if (root) json_object_set_new(ch, "finish_reason", json_string(reason_name(r)));
            if (root && r == IX_FINISH_ERROR)
                json_object_set_new(root, "error",
                                    json_pack("{s:s, s:s}", "message", fi->message, "type",
                                              fi->invalid_request ? "invalid_request_error" : "server_error"));
            else if (r == IX_FINISH_ABORT) ix__policy_stream_error(&j->pol, root);
            sse(j, root);
        }
    }
}

/* MHD's content reader: the SSE bytes there are, or (nothing yet) suspend
 * and return 0; the engine's next event resumes the connection. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    ixs_job *j = cls;
    for (;;) {
        if (j->out_off < j->out.len) {
            size_t n = j->out.len - j->out_off;
            if (n > max) n = max;
            memcpy(buf, j->out.data + j->out_off, n);
            j->out_off += n;
            if (j->out_off == j->out.len) {
                ix_buf_clear(&j->out);
                j->out_off = 0;
            }
            return (ssize_t)n;
        }
        if (j->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        if (atomic_load(&j->disconnected)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (j->phase == 0) {
            j->phase = 1;
            if (j->rnd.ctx && !j->rnd.begin(j->rnd.ctx, &j->out)) return MHD_CONTENT_READER_END_WITH_ERROR;
            if (j->chat && !j->rnd.ctx)
                for (int gi = 0; gi < j->n_choices; gi++) {
                    json_t *ch, *root = chunk_choice(j, &ch, gi);
                    if (root) json_object_set_new(json_object_get(ch, "delta"), "role", json_string("assistant"));
                    if (root) json_object_set_new(json_object_get(ch, "delta"), "content", json_string(""));
                    sse(j, root);
                }
            continue;
        }
        bool newly[IXS_MAX_PROMPTS];
        bool all = job_take(j, newly);
        stream_events(j, newly);
        if (all) {
            job_finalize(j);
            job_log(j, 200);
            if (j->rnd.ctx) { /* the renderer's own end (the Responses API has no [DONE]) */
                ixs_gen_result g = gen_result(j);
                if (!j->rnd.end(j->rnd.ctx, &j->out, &g)) return MHD_CONTENT_READER_END_WITH_ERROR;
                j->phase = 2;
                continue;
            }
            if (j->include_usage) {
                json_t *root = envelope(j, true);
                if (root) json_object_set_new(root, "usage", usage_json(j));
                sse(j, root);
            }
            if (ix_buf_append(&j->out, "data: [DONE]\n\n", 14) != IX_OK) return MHD_CONTENT_READER_END_WITH_ERROR;
            j->phase = 2;
            continue;
        }
        if (j->out.len == 0 && job_suspend(j)) return 0;
    }
}

static void stream_free(void *cls) { ix__srv_job_release(cls); }

/* ---- request parsing ------------------------------------------------------ */

/* Each returns 1 when the field is present (and valid), 0 when absent or
 * null, -1 with e filled when it is invalid. */
static int get_num(json_t *req, const char *key, double lo, double hi, double *out, ixs_err *e) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return IXS_BAD(e, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return IXS_BAD(e, key, "'%s' is %g; it must be in [%g, %g]", key, x, lo, hi);
    *out = x;
    return 1;
}

static int get_int(json_t *req, const char *key, int64_t lo, int64_t hi, int64_t *out, ixs_err *e) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return IXS_BAD(e, key, "'%s' must be an integer", key);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return IXS_BAD(e, key, "'%s' is %lld; it must be in [%lld, %lld]", key, (long long)x, (long long)lo,
                       (long long)hi);
    *out = x;
    return 1;
}

static int get_bool(json_t *req, const char *key, bool *out, ixs_err *e) {
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return IXS_BAD(e, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 1;
}

typedef struct parsed {
    ix_request_params r;
    ix_token_vec prompts[IXS_MAX_PROMPTS];
    int32_t n_prompts;
    const char *stop[IXS_MAX_STOP];
    ix_logit_bias *bias;
    ix_token *stop_ids;
    bool max_tokens_given;
    ixs_constraint_req con;
    ixs_tools_req tools;
    ix_buf tool_gbnf; /* the forced-call grammar */
} parsed;

static void parsed_free(parsed *p) {
    for (int i = 0; i < IXS_MAX_PROMPTS; i++) ix_token_vec_free(&p->prompts[i]);
    ix_free(p->bias);
    ix_free(p->stop_ids);
    ix__srv_constraint_free(&p->con);
    ix_buf_free(&p->tool_gbnf);
}

static int parse_token_array(ix_server *s, json_t *arr, const char *param, ix_token_vec *out, ixs_err *e) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->n_vocab)
            return IXS_BAD(e, param, "'%s' token %zu is not an id in [0, %d)", param, i, (int)s->n_vocab);
        if (ix_token_vec_push(out, (ix_token)json_integer_value(v)) != IX_OK)
            return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
    }
    return 0;
}

static int parse_prompt(ix_server *s, json_t *req, parsed *p, ixs_err *e) {
    json_t *pr = json_object_get(req, "prompt");
    ix_errbuf err = {{0}};
    if (json_is_string(pr)) {
        p->n_prompts = 1;
        if (ix_tokenizer_encode(s->tok, json_string_value(pr), json_string_length(pr), IX_TOK_ADD_SPECIAL,
                                &p->prompts[0], &err) != IX_OK)
            return IXS_BAD(e, "prompt", "prompt: %s", err.msg);
        return 0;
    }
    if (!json_is_array(pr) || json_array_size(pr) == 0)
        return IXS_BAD(e, "prompt", "'prompt' must be a string, an array of strings, or token ids");
    json_t *first = json_array_get(pr, 0);
    if (json_is_integer(first)) {
        p->n_prompts = 1;
        return parse_token_array(s, pr, "prompt", &p->prompts[0], e);
    }
    if (json_array_size(pr) > IXS_MAX_PROMPTS)
        return IXS_BAD(e, "prompt", "at most %d prompts per request", IXS_MAX_PROMPTS);
    size_t i;
    json_t *v;
    json_array_foreach(pr, i, v) {
        if (json_is_string(v)) {
            if (ix_tokenizer_encode(s->tok, json_string_value(v), json_string_length(v), IX_TOK_ADD_SPECIAL,
                                    &p->prompts[i], &err) != IX_OK)
                return IXS_BAD(e, "prompt", "prompt[%zu]: %s", i, err.msg);
        } else if (json_is_array(v)) {
            if (parse_token_array(s, v, "prompt", &p->prompts[i], e)) return -1;
        } else {
            return IXS_BAD(e, "prompt", "'prompt' must be a string, an array of strings, or token ids");
        }
    }
    p->n_prompts = (int32_t)json_array_size(pr);
    return 0;
}

static int parse_request(ix_server *s, json_t *req, bool chat, parsed *p, ixs_job *j, ixs_err *e) {
    ix_request_params *r = &p->r;
    ix_sample_params *sp = &r->sample;
    double d;
    int64_t i64;
    bool b = false;
    int got;
    if (ix__srv_check_fields(req, chat, e)) return -1;
    /* prompt */
    if (chat) {
        json_t *msgs = json_object_get(req, "messages");
        if (ix__chat_validate(msgs, e)) return -1;
        ix_errbuf err = {{0}};
        if (ix__tools_parse_request(req, &p->tools, e)) return -1;
        /* tool_choice none: the model is not shown the tools */
        json_t *tools = p->tools.choice != IXS_TOOL_CHOICE_NONE ? p->tools.tools : NULL;
        json_t *kwargs;
        if (ix__chat_kwargs(req, &kwargs, e)) return -1;
        ix_status st = ix__chat_render_kw(&s->chat, s->tok, msgs, tools, kwargs, &p->prompts[0], &err);
        if (st != IX_OK) return ix__chat_error(e, st, err.msg);
        p->n_prompts = 1;
    } else if (parse_prompt(s, req, p, e)) {
        return -1;
    }
    /* sampling */
    if ((got = get_num(req, "temperature", 0, 2, &d, e)) < 0) return -1;
    sp->temperature = got ? (float)d : 1.0f;
    if ((got = get_num(req, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (got && d <= 0) return IXS_BAD(e, "top_p", "'top_p' must be in (0, 1]");
    if (got) sp->top_p = (float)d;
    if ((got = get_int(req, "top_k", -1, INT32_MAX, &i64, e)) < 0) return -1;
    if (got) sp->top_k = (int32_t)(i64 < 0 ? 0 : i64);
    if ((got = get_num(req, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (got) sp->min_p = (float)d;
    if ((got = get_num(req, "repetition_penalty", 0, 100, &d, e)) < 0) return -1;
    if (got && d <= 0) return IXS_BAD(e, "repetition_penalty", "'repetition_penalty' must be > 0");
    if (got) sp->repetition_penalty = (float)d;
    if ((got = get_num(req, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (got) sp->presence_penalty = (float)d;
    if ((got = get_num(req, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (got) sp->frequency_penalty = (float)d;
    if ((got = get_int(req, "seed", INT64_MIN, INT64_MAX, &i64, e)) < 0) return -1;
    if (got) {
        sp->seed = (uint64_t)i64;
    } else {
        char id[40];
        ix__srv_new_id(s, "", id, sizeof id);
        sp->seed = strtoull(id + 8, NULL, 16);
    }
    json_t *lb = json_object_get(req, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb)) return IXS_BAD(e, "logit_bias", "'logit_bias' must be an object of token id -> bias");
        size_t n = json_object_size(lb), k = 0;
        p->bias = ix_calloc(n ? n : 1, sizeof *p->bias);
        if (!p->bias) return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
        const char *key;
        json_t *v;
        json_object_foreach(lb, key, v) {
            char *end;
            long id = strtol(key, &end, 10);
            if (!*key || *end || id < 0 || id >= s->n_vocab)
                return IXS_BAD(e, "logit_bias", "logit_bias key '%.32s' is not a token id in [0, %d)", key,
                               (int)s->n_vocab);
            if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
                return IXS_BAD(e, "logit_bias", "logit_bias['%.32s'] must be a number in [-100, 100]", key);
            p->bias[k++] = (ix_logit_bias){(ix_token)id, (float)json_number_value(v)};
        }
        sp->logit_bias = p->bias;
        sp->n_logit_bias = k;
    }
    /* logprobs */
    if (chat) {
        bool lp = false;
        if (get_bool(req, "logprobs", &lp, e) < 0) return -1;
        if ((got = get_int(req, "top_logprobs", 0, IX_SAMPLE_MAX_LOGPROBS, &i64, e)) < 0) return -1;
        j->want_logprobs = lp;
        j->n_logprobs = lp && got ? (int32_t)i64 : 0;
    } else {
        if ((got = get_int(req, "logprobs", 0, IX_SAMPLE_MAX_LOGPROBS, &i64, e)) < 0) return -1;
        j->want_logprobs = got;
        j->n_logprobs = got ? (int32_t)i64 : 0;
    }
    sp->n_logprobs = j->n_logprobs;
    sp->logprobs = j->want_logprobs;
    /* lengths */
    int64_t max_tokens = 0;
    if ((got = get_int(req, chat ? "max_completion_tokens" : "max_tokens", 1, INT32_MAX, &max_tokens, e)) < 0)
        return -1;
    if (!got && chat && (got = get_int(req, "max_tokens", 1, INT32_MAX, &max_tokens, e)) < 0) return -1;
    p->max_tokens_given = got;
    r->max_tokens = got ? (int32_t)max_tokens : (chat ? 0 : 16);
    if ((got = get_int(req, "n", 1, IX_SCHED_MAX_SEQS, &i64, e)) < 0) return -1;
    r->n = got ? (int32_t)i64 : 1;
    /* stops */
    json_t *stop = json_object_get(req, "stop");
    if (json_is_string(stop)) {
        p->stop[0] = json_string_value(stop);
        r->n_stop = 1;
    } else if (json_is_array(stop)) {
        if (json_array_size(stop) > IXS_MAX_STOP) return IXS_BAD(e, "stop", "at most %d stop strings", IXS_MAX_STOP);
        size_t k;
        json_t *v;
        json_array_foreach(stop, k, v) {
            if (!json_is_string(v)) return IXS_BAD(e, "stop", "'stop' must be a string or an array of strings");
            p->stop[k] = json_string_value(v);
        }
        r->n_stop = json_array_size(stop);
    } else if (stop && !json_is_null(stop)) {
        return IXS_BAD(e, "stop", "'stop' must be a string or an array of strings");
    }
    r->stop = p->stop;
    json_t *sti = json_object_get(req, "stop_token_ids");
    if (sti && !json_is_null(sti)) {
        if (!json_is_array(sti)) return IXS_BAD(e, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
        ix_token_vec v = {0};
        if (parse_token_array(s, sti, "stop_token_ids", &v, e)) {
            ix_token_vec_free(&v);
            return -1;
        }
        p->stop_ids = v.ids; /* owned by parsed now */
        r->stop_token_ids = v.ids;
        r->n_stop_token_ids = v.n;
    }
    if (get_bool(req, "ignore_eos", &b, e) < 0) return -1;
    r->ignore_eos = b;
    bool spec = true; /* false: this request never speculates (same tokens either way) */
    if (get_bool(req, "speculative_decoding", &spec, e) < 0) return -1;
    r->no_spec = !spec;
    if ((got = get_int(req, "priority", INT32_MIN, INT32_MAX, &i64, e)) < 0) return -1;
    if (got) r->priority = (int32_t)i64;
    if ((got = get_int(req, "deadline_ms", 0, INT64_MAX / 1000000, &i64, e)) < 0) return -1;
    if (got) r->deadline_ms = i64;
    /* Prefix-cache namespace: the API key's (each key a tenant), further
     * split by cache_salt; without keys the salt's, or 0 (shared). */
    uint64_t ns = ix__policy_key_ns(s, j->key);
    json_t *salt = json_object_get(req, "cache_salt");
    if (salt && !json_is_null(salt)) {
        if (!json_is_string(salt)) return IXS_BAD(e, "cache_salt", "'cache_salt' must be a string");
        ns = ix__srv_fnv1a(ns ? ns : IXS_FNV_BASIS, json_string_value(salt), json_string_length(salt));
        if (!ns) ns = 1;
    }
    r->cache_ns = ns;
    if (ix__srv_session_fields(s, j->key, req, r, e)) return -1;
    json_t *user = json_object_get(req, "user");
    if (user && !json_is_null(user) && !json_is_string(user)) return IXS_BAD(e, "user", "'user' must be a string");
    /* streaming */
    j->stream = false;
    if (get_bool(req, "stream", &j->stream, e) < 0) return -1;
    json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return IXS_BAD(e, "stream_options", "'stream_options' must be an object");
        bool inc = false;
        if (get_bool(so, "include_usage", &inc, e) < 0) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            return -1;
        }
        j->include_usage = inc;
        /* include_obfuscation: streams are never padded here; accepted as a boolean */
        const char *k;
        json_t *v;
        json_object_foreach(so, k, v) {
            if (!strcmp(k, "include_usage")) continue;
            if (!strcmp(k, "include_obfuscation") && (json_is_boolean(v) || json_is_null(v))) continue;
            return IXS_BAD(e, "stream_options", "'stream_options.%.64s' is not supported (include_usage, "
                           "include_obfuscation)", k);
        }
    }
    /* constrained output */
    if (ix__srv_parse_constraint(s, req, &p->con, e)) return -1;
    r->constraint = p->con.c;
    if (chat && p->tools.choice != IXS_TOOL_CHOICE_NONE) {
        bool forced = p->tools.choice == IXS_TOOL_CHOICE_REQUIRED || p->tools.choice == IXS_TOOL_CHOICE_NAMED;
        if (p->con.c.kind != IX_CONSTRAINT_NONE && forced)
            return IXS_BAD(e, p->con.param[0] == 'g' ? "grammar" : "response_format",
                           "a JSON 'response_format' or a 'grammar' cannot apply when tool_choice forces a call");
        j->tools_on = true;
        j->parallel_calls = p->tools.parallel;
        j->tool_syntax = s->chat.tool_syntax;
        if (!(j->tools = json_deep_copy(p->tools.tools))) return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
        if (forced || p->con.c.kind != IX_CONSTRAINT_NONE) {
            /* forced: only calls; auto with a constrained answer: calls or the answer */
            ix_errbuf err = {{0}};
            ix_status st = forced ? ix__tools_grammar(&p->tools, j->tool_syntax, &p->tool_gbnf, &err)
                                  : ix__tools_grammar_or(&p->tools, j->tool_syntax, &p->con.c, &p->tool_gbnf, &err);
            if (st == IX_ERR_NOMEM) return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
            if (st != IX_OK) return IXS_BAD(e, "tools", "tools: %s", err.msg);
            r->constraint = (ix_constraint){IX_CONSTRAINT_GRAMMAR, p->tool_gbnf.data, p->tool_gbnf.len, 0};
            if (ix__srv_check_constraint(s, &r->constraint, "tools", e)) return -1;
        }
    }
    /* context */
    for (int i = 0; i < p->n_prompts; i++) {
        size_t np = p->prompts[i].n;
        const char *what = chat ? "messages" : "prompt";
        if (np >= (size_t)s->n_ctx) {
            ix__srv_errf(e, 400, "invalid_request_error", what,
                         "This model's maximum context length is %d tokens. However, your %s is %zu tokens "
                         "(plus at least 1 for the completion). Please reduce the length of the %s.",
                         (int)s->n_ctx, what, np, what);
            e->code = "context_length_exceeded";
            return -1;
        }
        if (p->max_tokens_given && np + (size_t)r->max_tokens > (size_t)s->n_ctx) {
            ix__srv_errf(e, 400, "invalid_request_error", chat ? "max_completion_tokens" : "max_tokens",
                         "This model's maximum context length is %d tokens. However, you requested %zu tokens "
                         "(%zu in the %s, %d for the completion). Please reduce the length of the %s or completion.",
                         (int)s->n_ctx, np + (size_t)r->max_tokens, np, what, (int)r->max_tokens, what);
            e->code = "context_length_exceeded";
            return -1;
        }
    }
    return 0;
}

/* ---- the endpoint --------------------------------------------------------- */

/* Answers a non-streaming job once every sub has finished, else suspends
 * the connection (MHD calls the handler again when on_finish resumes it).
 * cc->job is the connection state's reference, dropped once answered. */
enum MHD_Result ix__srv_generate_again(ixs_conn *cc) {
    ixs_job *j = cc->job;
    if (job_suspend(j)) return MHD_YES;
    enum MHD_Result ret = answer_whole(j, cc);
    cc->job = NULL;
    ix__srv_job_release(j);
    return ret;
}

static enum MHD_Result generate(ixs_conn *cc, bool chat, json_t *req, const ixs_render *rnd) {
    ix_server *s = cc->s;
    struct MHD_Connection *c = cc->c;
    const char *ep = cc->ep;
    ixs_err e;
    ixs_job *j = job_new(cc);
    if (!j) {
        if (rnd) rnd->free(rnd->ctx);
        return ix__srv_reply_json(cc, 500, NULL);
    }
    j->chat = chat;
    if (rnd) j->rnd = *rnd;
    j->created = (int64_t)time(NULL);
    if (rnd)
        snprintf(j->id, sizeof j->id, "%s", rnd->id);
    else
        ix__srv_new_id(s, chat ? "chatcmpl-" : "cmpl-", j->id, sizeof j->id);
    parsed p;
    memset(&p, 0, sizeof p);
    p.r = ix_request_default_params();
    if (parse_request(s, req, chat, &p, j, &e)) goto fail;
    size_t n_prompt[IXS_MAX_PROMPTS];
    for (int i = 0; i < p.n_prompts; i++) n_prompt[i] = p.prompts[i].n;
    /* The key's limits first: a request its key may not send holds no
     * place in the server's queue. */
    if (ix__policy_admit(cc, req, &p.r, n_prompt, p.n_prompts, p.max_tokens_given, &j->pol, &e)) goto fail;
    if (j->tr) {
        ixs_jtrace *tr = j->tr;
        const char *model = json_string_value(json_object_get(req, "model"));
        snprintf(tr->model, sizeof tr->model, "%s", model ? model : "");
        tr->temperature = p.r.sample.temperature;
        tr->top_p = p.r.sample.top_p;
        tr->max_tokens = p.r.max_tokens;
        tr->has_seed = json_is_integer(json_object_get(req, "seed"));
        tr->seed = (int64_t)p.r.sample.seed;
    }
    if (ix__admit_take(&s->admit, p.n_prompts * p.r.n, &e)) goto fail;
    for (int i = 0; i < p.n_prompts; i++) atomic_store(&j->queued[i], true);
    j->n = p.r.n;
    j->n_sub = p.n_prompts;
    j->n_choices = j->n * j->n_sub;
    j->text = ix_calloc((size_t)j->n_choices, sizeof *j->text);
    j->text_off = ix_calloc((size_t)j->n_choices, sizeof *j->text_off);
    j->lp = ix_calloc((size_t)j->n_choices, sizeof *j->lp);
    if (!j->text || !j->text_off || !j->lp) {
        ix__srv_errf(&e, 500, "server_error", NULL, "out of memory");
        goto fail;
    }
    for (int i = 0; i < j->n_choices && j->want_logprobs && (!j->stream || j->tools_on); i++)
        if (!(j->lp[i] = lp_new(chat))) {
            ix__srv_errf(&e, 500, "server_error", NULL, "out of memory");
            goto fail;
        }
    for (int i = 0; i < j->n_sub; i++) {
        ix_request_params r = p.r;
        r.prompt = p.prompts[i].ids;
        r.n_prompt = p.prompts[i].n;
        r.cb = (ix_request_callbacks){on_token, on_finish, &j->subs[i], j->tr ? on_prefill : NULL};
        if (j->tr) j->tr->t_submit[i] = ix_time_ns();
        ix_errbuf err = {{0}};
        /* The engine's reference, dropped by this sub's on_finish. The
         * watcher reads ids[] and submitted[] only once j is listed. */
        atomic_fetch_add(&j->refs, 1);
        ix_status st = ix_engine_submit(s->engine, &r, &j->ids[i], &err);
        j->submitted[i] = st == IX_OK;
        if (st != IX_OK) {
            atomic_fetch_sub(&j->refs, 1); /* no callback comes for a refused request */
            if (st == IX_ERR_NOMEM || st == IX_ERR_INTERNAL || st == IX_ERR_STATE)
                ix__srv_errf(&e, 500, "server_error", NULL, "%s", err.msg);
            else
                ix__srv_errf(&e, 400, "invalid_request_error", NULL, "%s", err.msg);
            if (st == IX_ERR_TOO_LONG) e.code = "context_length_exceeded";
            goto fail;
        }
    }
    ix__metrics_params(&s->metrics, p.r.max_tokens > 0 ? p.r.max_tokens : s->n_ctx - (int64_t)p.prompts[0].n);
    parsed_free(&p);
    /* Visible to the watcher from now on. */
    pthread_mutex_lock(&s->jobs_mu);
    j->next = s->jobs;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    j->listed = true;
    j->accepted = true;
    pthread_mutex_unlock(&s->jobs_mu);
    if (!j->stream) {
        cc->job = j;
        return ix__srv_generate_again(cc);
    }
    /* The response owns the MHD reference from here; stream_free drops it. */
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, j, stream_free);
    if (!resp) {
        ix__srv_job_release(j);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", rnd ? rnd->stream_ctype : "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    ix__srv_cors_headers(cc, resp);
    ix__policy_headers(cc, resp, 200);
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    ix__metrics_http(&s->metrics, ep, 200);
    return ret;
fail:
    /* Places taken for subs that were never submitted (submitted ones give
     * theirs back when they finish). */
    for (int i = 0; i < p.n_prompts; i++)
        if (!j->submitted[i] && atomic_exchange(&j->queued[i], false)) ix__admit_give_back(&s->admit, p.r.n);
    parsed_free(&p);
    job_trace(j, e.http, e.msg);
    j->failed = true;
    ix__srv_job_release(j); /* cancels what was submitted */
    if (rnd && rnd->map_param) rnd->map_param(&e);
    return ix__srv_reply_err(cc, &e);
}

enum MHD_Result ix__srv_generate(ixs_conn *cc, bool chat, json_t *req) { return generate(cc, chat, req, NULL); }

enum MHD_Result ix__srv_generate_as(ixs_conn *cc, bool chat, json_t *req, const ixs_render *r) {
    return generate(cc, chat, req, r);
}
