/* inferx server: /metrics. The server's own numbers (requests by endpoint and
 * status, latency histograms, finish reasons, cancellations, cost) live here
 * under one mutex; engine and KV numbers are read from ix_engine_get_stats at
 * scrape time. Rendered in the Prometheus text exposition format 0.0.4.
 *
 * Names follow vLLM's (vllm:num_requests_running -> inferx:num_requests_running,
 * ...) so that dashboards built for it translate by swapping the prefix;
 * every sample carries model_name. Numbers vLLM has no name for keep the
 * same prefix and label (docs/server.md lists them all). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "inferx/kvstore.h"
#include "server/server_int.h"

static const double k_latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,      2.5,   5,    10,    30,   60,  120};
static const double k_itl_bounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06,
                                      0.08,   0.1,   0.15,  0.2,   0.3,  0.5,  1,    2.5};

/* vLLM's buckets of request_prefill_time_seconds / request_decode_time_seconds. */
static const double k_request_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

static void hist_init(ixs_hist *h, const double *bounds, int n) {
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->n = n;
}

static void hist_observe(ixs_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void ix__metrics_init(ixs_metrics *m, int32_t n_ctx) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    ix__metrics_set_ctx(m, n_ctx);
    hist_init(&m->req_prefill, k_request_bounds, (int)IX_ARRAY_LEN(k_request_bounds));
    hist_init(&m->req_decode, k_request_bounds, (int)IX_ARRAY_LEN(k_request_bounds));
    hist_init(&m->ttft, k_latency_bounds, (int)IX_ARRAY_LEN(k_latency_bounds));
    hist_init(&m->e2e, k_latency_bounds, (int)IX_ARRAY_LEN(k_latency_bounds));
    hist_init(&m->queue, k_latency_bounds, (int)IX_ARRAY_LEN(k_latency_bounds));
    hist_init(&m->itl, k_itl_bounds, (int)IX_ARRAY_LEN(k_itl_bounds));
}

void ix__metrics_set_ctx(ixs_metrics *m, int32_t n_ctx) {
    pthread_mutex_lock(&m->mu);
    /* 1, 2, 5, 10, 20, 50, ... up to the context (vLLM's build_1_2_5_buckets) */
    int nt = 0;
    for (double dec = 1; nt < IXS_HIST_BUCKETS; dec *= 10) {
        const double steps[3] = {1, 2, 5};
        int k = 0;
        for (; k < 3 && nt < IXS_HIST_BUCKETS && steps[k] * dec <= (n_ctx > 0 ? n_ctx : 1); k++)
            m->tok_bounds[nt++] = steps[k] * dec;
        if (k < 3) break;
    }
    hist_init(&m->req_prompt, m->tok_bounds, nt);
    hist_init(&m->req_gen, m->tok_bounds, nt);
    hist_init(&m->req_max_tokens, m->tok_bounds, nt);
    pthread_mutex_unlock(&m->mu);
}

void ix__metrics_free(ixs_metrics *m) { pthread_mutex_destroy(&m->mu); }

void ix__metrics_http(ixs_metrics *m, const char *endpoint, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_rows && (m->rows[i].status != status || strcmp(m->rows[i].endpoint, endpoint))) i++;
    if (i == m->n_rows && m->n_rows < IXS_MAX_STATUS_ROWS) {
        m->rows[i].endpoint = endpoint;
        m->rows[i].status = status;
        m->rows[i].count = 0;
        m->n_rows++;
    }
    if (i < m->n_rows) m->rows[i].count++;
    pthread_mutex_unlock(&m->mu);
}

void ix__metrics_itl(ixs_metrics *m, double seconds) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

void ix__metrics_finish(ixs_metrics *m, const ix_finish_info *fi) {
    pthread_mutex_lock(&m->mu);
    if (fi->usage.completion_tokens > 0 && fi->timings.first_token_ms > 0)
        hist_observe(&m->ttft, fi->timings.first_token_ms / 1e3);
    hist_observe(&m->e2e, fi->timings.total_ms / 1e3);
    hist_observe(&m->queue, fi->timings.queue_ms / 1e3);
    if (fi->reason != IX_FINISH_DEADLINE && fi->reason != IX_FINISH_ERROR) {
        hist_observe(&m->req_prompt, fi->usage.prompt_tokens);
        hist_observe(&m->req_gen, fi->usage.completion_tokens);
        hist_observe(&m->req_prefill, fi->timings.prefill_ms / 1e3);
        if (fi->timings.first_token_ms > 0)
            hist_observe(&m->req_decode, (fi->timings.total_ms - fi->timings.first_token_ms) / 1e3);
    }
    if ((unsigned)fi->reason < IX_ARRAY_LEN(m->finished)) m->finished[fi->reason]++;
    pthread_mutex_unlock(&m->mu);
}

void ix__metrics_params(ixs_metrics *m, int64_t max_tokens) {
    pthread_mutex_lock(&m->mu);
    hist_observe(&m->req_max_tokens, (double)max_tokens);
    pthread_mutex_unlock(&m->mu);
}

void ix__metrics_cost(ixs_metrics *m, double usd) {
    if (!(usd > 0)) return;
    pthread_mutex_lock(&m->mu);
    m->cost_usd += usd;
    pthread_mutex_unlock(&m->mu);
}

/* ---- exposition ----------------------------------------------------------- */

typedef struct prom {
    ix_buf *b;
    const char *model; /* model_name="...", escaped */
    size_t model_len;
    bool bad;          /* an append ran out of memory */
} prom;

static void out(prom *p, const void *data, size_t n) {
    if (ix_buf_append(p->b, data, n) != IX_OK) p->bad = true;
}

static void outs(prom *p, const char *s) { out(p, s, strlen(s)); }

/* A label value: backslash, double quote and newline escaped. */
static void out_label_value(prom *p, const char *v) {
    for (const char *q = v; *q; q++) {
        if (*q == '\\')
            out(p, "\\\\", 2);
        else if (*q == '"')
            out(p, "\\\"", 2);
        else if (*q == '\n')
            out(p, "\\n", 2);
        else
            out(p, q, 1);
    }
}

/* Prometheus' float syntax; integers (counts) print without an exponent. */
static void out_value(prom *p, double v) {
    char num[40];
    if (isnan(v))
        snprintf(num, sizeof num, "NaN");
    else if (isinf(v))
        snprintf(num, sizeof num, "%s", v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        snprintf(num, sizeof num, "%.0f", v);
    else
        snprintf(num, sizeof num, "%.17g", v);
    outs(p, num);
}

static void family(prom *p, const char *name, const char *type, const char *help) {
    outs(p, "# HELP ");
    outs(p, name);
    outs(p, " ");
    outs(p, help);
    outs(p, "\n# TYPE ");
    outs(p, name);
    outs(p, " ");
    outs(p, type);
    outs(p, "\n");
}

static void out_label(prom *p, const char *k, const char *v) {
    outs(p, ",");
    outs(p, k);
    outs(p, "=\"");
    out_label_value(p, v);
    outs(p, "\"");
}

/* name{model_name="..."[,k1="v1"[,k2="v2"]]} value; k1, k2 may be NULL. */
static void sample2(prom *p, const char *name, const char *k1, const char *v1, const char *k2, const char *v2,
                    double v) {
    outs(p, name);
    outs(p, "{");
    out(p, p->model, p->model_len);
    if (k1) out_label(p, k1, v1);
    if (k2) out_label(p, k2, v2);
    outs(p, "} ");
    out_value(p, v);
    outs(p, "\n");
}

static void sample(prom *p, const char *name, const char *k, const char *v, double value) {
    sample2(p, name, k, v, NULL, NULL, value);
}

static void one(prom *p, const char *name, const char *type, const char *help, double v) {
    family(p, name, type, help);
    sample(p, name, NULL, NULL, v);
}

static void hist(prom *p, const char *name, const char *help, const ixs_hist *h) {
    char series[128], le[32];
    family(p, name, "histogram", help);
    snprintf(series, sizeof series, "%s_bucket", name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        snprintf(le, sizeof le, "%g", h->bounds[i]);
        sample(p, series, "le", le, (double)cum);
    }
    cum += h->counts[h->n];
    sample(p, series, "le", "+Inf", (double)cum);
    snprintf(series, sizeof series, "%s_sum", name);
    sample(p, series, NULL, NULL, h->sum);
    snprintf(series, sizeof series, "%s_count", name);
    sample(p, series, NULL, NULL, (double)h->count);
}

/* The standard process_* metrics (Prometheus client libraries' names),
 * unlabelled like theirs. */
static void process_plain(prom *p, const char *name, const char *type, const char *help, double v) {
    family(p, name, type, help);
    outs(p, name);
    outs(p, " ");
    out_value(p, v);
    outs(p, "\n");
}

static void process_metrics(prom *p) {
    process_plain(p, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                  (double)ix_process_resident_bytes());
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        process_plain(p, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                      (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                          ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6);
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) {
        /* fields after the command's closing parenthesis: 22 starttime (ticks), 23 vsize */
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *q = strrchr(buf, ')');
        unsigned long long start = 0, vsize = 0;
        int field = 2;
        for (; q && *q && field < 23; q++) {
            if (*q != ' ') continue;
            field++;
            if (field == 22) start = strtoull(q + 1, NULL, 10);
            if (field == 23) vsize = strtoull(q + 1, NULL, 10);
        }
        FILE *u = fopen("/proc/stat", "r");
        unsigned long long btime = 0;
        char line[256];
        while (u && fgets(line, sizeof line, u))
            if (!strncmp(line, "btime ", 6)) btime = strtoull(line + 6, NULL, 10);
        if (u) fclose(u);
        long hz = sysconf(_SC_CLK_TCK);
        if (btime && hz > 0)
            process_plain(p, "process_start_time_seconds", "gauge",
                          "Start time of the process since unix epoch in seconds.", (double)btime + (double)start / (double)hz);
        if (vsize) process_plain(p, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", (double)vsize);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int nfd = -1; /* the directory's own descriptor */
        for (struct dirent *e; (e = readdir(d));) nfd += e->d_name[0] != '.';
        closedir(d);
        process_plain(p, "process_open_fds", "gauge", "Number of open file descriptors.", nfd);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        process_plain(p, "process_max_fds", "gauge", "Maximum number of open file descriptors.", (double)rl.rlim_cur);
}

ix_status ix__metrics_render(ix_server *s, ix_buf *b) {
    ix_engine_stats st;
    ix_engine_get_stats(s->engine, &st);
    ixs_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    ixs_metrics c = *m; /* copy, so formatting runs unlocked */
    pthread_mutex_unlock(&m->mu);
    ix_buf label = {0};
    prom p = {&label, "", 0, false};
    outs(&p, "model_name=\"");
    out_label_value(&p, s->model_name);
    outs(&p, "\"");
    p.b = b;
    p.model = label.data ? label.data : "";
    p.model_len = label.len;
    const ix_kv_stats *kv = &st.kv;

    /* vLLM's names. */
    one(&p, "inferx:num_requests_running", "gauge", "Number of requests in the running batch.", st.n_running);
    one(&p, "inferx:num_requests_waiting", "gauge", "Number of requests waiting for admission.", st.n_waiting);
    one(&p, "inferx:num_requests_swapped", "gauge", "Number of requests swapped out to the host tier.",
        st.n_swapped);
    one(&p, "inferx:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0-1).",
        kv->n_blocks_total ? (double)kv->n_blocks_used / (double)kv->n_blocks_total : 0.0);
    one(&p, "inferx:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
        (double)kv->prefix_queried_tokens);
    one(&p, "inferx:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
        (double)kv->prefix_hit_tokens);
    family(&p, "inferx:num_preemptions_total", "counter", "Preemptions, by mode.");
    sample(&p, "inferx:num_preemptions_total", "mode", "recompute", (double)st.n_preempt_recompute);
    sample(&p, "inferx:num_preemptions_total", "mode", "swap", (double)st.n_preempt_swap);
    one(&p, "inferx:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
        (double)st.n_prompt_tokens);
    one(&p, "inferx:generation_tokens_total", "counter", "Generated tokens.", (double)st.n_generated_tokens);
    family(&p, "inferx:request_success_total", "counter", "Finished engine requests, by finish reason.");
    for (int r = 1; r < (int)IX_ARRAY_LEN(c.finished); r++)
        sample(&p, "inferx:request_success_total", "finished_reason", ix_finish_reason_name((ix_finish_reason)r),
               (double)c.finished[r]);
    hist(&p, "inferx:time_to_first_token_seconds", "Submit to first generated token.", &c.ttft);
    hist(&p, "inferx:inter_token_latency_seconds", "Time between consecutive tokens of one choice.", &c.itl);
    hist(&p, "inferx:e2e_request_latency_seconds", "Submit to finish.", &c.e2e);
    hist(&p, "inferx:request_queue_time_seconds", "Submit to first scheduled.", &c.queue);
    hist(&p, "inferx:request_prompt_tokens", "Prompt tokens of each finished request.", &c.req_prompt);
    hist(&p, "inferx:request_generation_tokens", "Generated tokens of each finished request (all its choices).",
         &c.req_gen);
    hist(&p, "inferx:request_params_max_tokens", "max_tokens of each accepted request (the context left when it "
         "set none).", &c.req_max_tokens);
    hist(&p, "inferx:request_prefill_time_seconds", "First scheduled to prompt computed.", &c.req_prefill);
    hist(&p, "inferx:request_decode_time_seconds", "First token to finish.", &c.req_decode);
    {
        /* tokens per engine step; vLLM's buckets up to the step's cap */
        static const double bounds[IX_ENGINE_STEP_TOKEN_BUCKETS] = IX_ENGINE_STEP_TOKEN_BOUNDS;
        ix_engine_params ep = ix_engine_get_params(s->engine);
        ixs_hist it;
        int nb = 0;
        while (nb < IX_ENGINE_STEP_TOKEN_BUCKETS && bounds[nb] <= ep.sched.max_num_batched_tokens) nb++;
        hist_init(&it, bounds, nb);
        for (int i = 0; i <= IX_ENGINE_STEP_TOKEN_BUCKETS; i++) {
            it.counts[i < nb ? i : nb] += st.step_tokens[i];
            it.count += st.step_tokens[i];
        }
        it.sum = (double)st.step_tokens_sum;
        hist(&p, "inferx:iteration_tokens_total", "Tokens per engine step.", &it);
    }
    {
        ix_engine_params ep = ix_engine_get_params(s->engine);
        char bs[16], nb[32], ns[32], gib[32];
        snprintf(bs, sizeof bs, "%d", (int)ep.kv_block_size);
        snprintf(nb, sizeof nb, "%lld", (long long)kv->n_blocks_total);
        snprintf(ns, sizeof ns, "%lld", (long long)kv->n_swap_blocks_total);
        snprintf(gib, sizeof gib, "%.6g", (double)kv->swap_bytes / (1024.0 * 1024.0 * 1024.0));
        family(&p, "inferx:cache_config_info", "gauge", "The KV cache's configuration, in labels (value 1).");
        outs(&p, "inferx:cache_config_info{");
        out(&p, p.model, p.model_len);
        out_label(&p, "block_size", bs);
        out_label(&p, "cache_dtype", ix_kv_dtype_name(ep.kv_dtype));
        out_label(&p, "enable_prefix_caching", ep.enable_prefix_cache ? "True" : "False");
        out_label(&p, "num_gpu_blocks", nb); /* vLLM's name for the pool's blocks */
        out_label(&p, "num_cpu_blocks", ns);
        out_label(&p, "swap_space", gib);
        outs(&p, "} 1\n");
    }
    /* speculative decoding, as vLLM v1 counts it (zero with --spec none) */
    one(&p, "inferx:spec_decode_num_drafts_total", "counter", "Decodes that verified guessed tokens.",
        (double)st.spec_n_drafts);
    one(&p, "inferx:spec_decode_num_draft_tokens_total", "counter", "Guessed tokens verified.",
        (double)st.spec_n_draft_tokens);
    one(&p, "inferx:spec_decode_num_accepted_tokens_total", "counter", "Guessed tokens accepted.",
        (double)st.spec_n_accepted_tokens);
    family(&p, "inferx:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Guessed tokens accepted, by position in the guess (0 = the first).");
    for (int j = 0; j < IX_SPEC_MAX_K; j++) {
        char pos[8];
        snprintf(pos, sizeof pos, "%d", j);
        sample(&p, "inferx:spec_decode_num_accepted_tokens_per_pos_total", "position", pos,
               (double)st.spec_accepted_per_pos[j]);
    }
    /* a draft model's own pool (zeros without one), "Every pool is visible" */
    one(&p, "inferx:spec_draft_kv_blocks_used", "gauge", "Blocks of the draft model's KV pool in use.",
        (double)st.spec_draft_blocks_used);
    one(&p, "inferx:spec_draft_kv_blocks_total", "gauge", "Blocks of the draft model's KV pool.",
        (double)st.spec_draft_blocks_total);
    one(&p, "inferx:spec_draft_forward_seconds_total", "counter", "Time of the draft model's forward passes.",
        (double)st.spec_draft_forward_ns / 1e9);

    /* inferx's own. */
    family(&p, "inferx:http_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (int i = 0; i < c.n_rows; i++) {
        char code[16];
        snprintf(code, sizeof code, "%d", c.rows[i].status);
        sample2(&p, "inferx:http_requests_total", "endpoint", c.rows[i].endpoint, "status", code,
                (double)c.rows[i].count);
    }
    family(&p, "inferx:requests_cancelled_total", "counter", "Requests cancelled in the engine, by cause.");
    sample(&p, "inferx:requests_cancelled_total", "cause", "disconnect", (double)c.cancelled_disconnect);
    sample(&p, "inferx:requests_cancelled_total", "cause", "shutdown", (double)c.cancelled_shutdown);
    one(&p, "inferx:prompt_tokens_cached_total", "counter", "Prompt tokens of admitted requests served from the "
        "prefix cache.", (double)st.n_cached_prompt_tokens);
    {
        ix_kv_disk_stats kd;
        ix_kvstore_stats ks;
        if (ix_engine_get_disk_stats(s->engine, &kd, &ks)) {
            one(&p, "inferx:kv_disk_blocks_out_total", "counter", "KV blocks the cache evicted (or kept at exit) "
                "handed to the disk tier.", (double)kd.blocks_out);
            one(&p, "inferx:kv_disk_blocks_dropped_total", "counter", "Evicted KV blocks lost: the disk tier's "
                "write queue was full.", (double)kd.blocks_out_dropped);
            one(&p, "inferx:kv_disk_blocks_in_total", "counter", "KV blocks read back from disk for a prompt.",
                (double)kd.blocks_in);
            one(&p, "inferx:kv_disk_hit_tokens_total", "counter", "Prompt tokens served from the disk tier.",
                (double)kd.tokens_in);
            family(&p, "inferx:kv_disk_reload_decisions_total", "counter",
                   "Blocks found on disk, by what was done: read, recomputed because reading was measured dearer, "
                   "or recomputed because the block failed its checks.");
            sample(&p, "inferx:kv_disk_reload_decisions_total", "decision", "reload", (double)kd.blocks_in);
            sample(&p, "inferx:kv_disk_reload_decisions_total", "decision", "recompute_cost",
                   (double)kd.reload_skipped);
            sample(&p, "inferx:kv_disk_reload_decisions_total", "decision", "recompute_rejected",
                   (double)kd.reload_failed);
            one(&p, "inferx:kv_disk_read_seconds_per_block", "gauge", "Running mean of one block's read.",
                kd.read_ns_per_block / 1e9);
            one(&p, "inferx:kv_disk_compute_seconds_per_token", "gauge", "Measured prefill cost per token, the "
                "other side of the reload decision.", kd.compute_ns_per_token / 1e9);
            one(&p, "inferx:kv_disk_blocks", "gauge", "KV blocks on disk (once the store is indexed).",
                (double)ks.n_blocks);
            one(&p, "inferx:kv_disk_bytes", "gauge", "Bytes of KV blocks on disk.", (double)ks.bytes);
            one(&p, "inferx:kv_disk_evictions_total", "counter", "Blocks deleted from disk by its size limit.",
                (double)ks.evicted);
            one(&p, "inferx:kv_disk_errors_total", "counter", "Disk tier write errors (disk full, I/O).",
                (double)ks.write_errors);
            one(&p, "inferx:kv_disk_read_bytes_total", "counter", "Bytes read from the disk tier.",
                (double)ks.bytes_read);
            one(&p, "inferx:kv_disk_written_bytes_total", "counter", "Bytes written to the disk tier.",
                (double)ks.bytes_written);
            one(&p, "inferx:kv_disk_read_ahead_blocks_total", "counter", "Blocks asked of the disk ahead of their "
                "read (a prompt's chain continuing on disk).", (double)kd.read_ahead);
        }
    }
    {
        ix_kv_session_stats ss;
        ixs_rstore_stats rs;
        ix_engine_get_session_stats(s->engine, &ss);
        ix__rstore_stats(s, &rs);
        one(&p, "inferx:sessions", "gauge", "Live sessions (session_id, stored responses).", (double)ss.n_sessions);
        one(&p, "inferx:session_pinned_blocks", "gauge", "KV blocks in RAM pinned by a session.",
            (double)ss.n_pinned_blocks);
        one(&p, "inferx:session_expired_total", "counter", "Sessions ended by their TTL.", (double)ss.n_expired);
        one(&p, "inferx:session_deleted_total", "counter", "Sessions deleted by a request.", (double)ss.n_dropped);
        one(&p, "inferx:stored_responses", "gauge", "Responses stored (store: true).", (double)rs.n);
        one(&p, "inferx:stored_responses_bytes", "gauge", "JSON bytes of the stored responses.", (double)rs.bytes);
        one(&p, "inferx:stored_responses_evicted_total", "counter", "Stored responses dropped by the count or byte "
            "bound (least recently used first).", (double)rs.n_evicted);
        one(&p, "inferx:stored_responses_expired_total", "counter", "Stored responses dropped by their TTL.",
            (double)rs.n_expired);
    }
    if (s->tracer) {
        ixs_trace_stats ts;
        ix__trace_get_stats(s->tracer, &ts);
        one(&p, "inferx:trace_spans_exported_total", "counter", "Spans the OTLP collector accepted.",
            (double)ts.spans_exported);
        one(&p, "inferx:trace_spans_dropped_total", "counter", "Spans lost: the export queue was full or their "
            "batch failed.", (double)ts.spans_dropped);
        one(&p, "inferx:trace_exports_failed_total", "counter", "OTLP export batches the collector did not accept.",
            (double)ts.exports_failed);
    }
    one(&p, "inferx:engine_steps_total", "counter", "Engine steps run.", (double)st.n_steps);
    one(&p, "inferx:step_token_budget", "gauge",
        "Token budget of the last engine step: the cap, or what fits in the target step time while sequences "
        "decode.", (double)st.step_budget);
    one(&p, "inferx:step_cost_fixed_seconds", "gauge",
        "Fitted fixed cost of an engine step (step time = fixed + tokens x per_token).", st.step_cost_fixed_ms / 1e3);
    one(&p, "inferx:step_cost_per_token_seconds", "gauge", "Fitted cost of one more token in an engine step.",
        st.step_cost_per_token_ms / 1e3);
    one(&p, "inferx:kv_cache_num_blocks", "gauge", "KV cache blocks in the pool.", (double)kv->n_blocks_total);
    one(&p, "inferx:kv_cache_blocks_used", "gauge", "KV cache blocks referenced by a sequence.",
        (double)kv->n_blocks_used);
    one(&p, "inferx:kv_cache_blocks_cached", "gauge", "KV cache blocks held by the prefix cache (used or not).",
        (double)kv->n_blocks_cached);
    one(&p, "inferx:kv_cache_blocks_free", "gauge", "KV cache blocks neither used nor cached.",
        (double)kv->n_blocks_free);
    one(&p, "inferx:kv_cache_slot_utilization_perc", "gauge",
        "Token slots holding a token / slots of used blocks (0-1).", kv->utilization);
    one(&p, "inferx:kv_cache_pool_bytes", "gauge", "Bytes of K/V data in the pool.", (double)kv->pool_bytes);
    one(&p, "inferx:kv_swap_num_blocks", "gauge", "Blocks of the host swap tier.", (double)kv->n_swap_blocks_total);
    one(&p, "inferx:kv_swap_blocks_used", "gauge", "Swap tier blocks holding a swapped-out block.",
        (double)kv->n_swap_blocks_used);
    one(&p, "inferx:kv_swap_pool_bytes", "gauge", "Bytes of the host swap tier.", (double)kv->swap_bytes);
    one(&p, "inferx:kv_swapped_out_blocks_total", "counter", "Blocks copied out to the swap tier.",
        (double)kv->n_blocks_swapped_out);
    one(&p, "inferx:kv_swapped_in_blocks_total", "counter", "Blocks copied back from the swap tier.",
        (double)kv->n_blocks_swapped_in);
    one(&p, "inferx:deadline_shed_total", "counter",
        "Waiting requests shed because they could not meet their deadline.", (double)st.n_deadline_shed);
    one(&p, "inferx:deadline_missed_total", "counter", "Requests that finished after their deadline.",
        (double)st.n_deadline_missed);
    one(&p, "inferx:cost_per_hour_usd", "gauge", "Configured price of the machine (--cost-per-hour).",
        s->p.cost_per_hour_usd);
    one(&p, "inferx:cost_usd_total", "counter",
        "Sum of the cost attributed to requests, those cut short by their client included.", c.cost_usd);
    one(&p, "inferx:memory_live_bytes", "gauge", "Bytes allocated by the library.", (double)ix_mem_live_bytes());
    one(&p, "inferx:model_weight_bytes", "gauge",
        "Bytes of model weights held in memory (packed copies and tensors read from the file).",
        (double)ix_model_weight_bytes(s->model));
    one(&p, "inferx:model_weight_resident_bytes", "gauge",
        "Of the model's memory (packed weights and the file's mapping), the bytes resident in this process.",
        (double)ix_model_weight_resident_bytes(s->model));
    one(&p, "inferx:kv_cache_pool_resident_bytes", "gauge",
        "Bytes of the KV cache pool resident in this process (blocks touched so far).",
        (double)ix_engine_kv_pool_resident_bytes(s->engine));
    if (ix__policy_metrics_render(s, b, p.model, p.model_len) != IX_OK) p.bad = true;
    process_metrics(&p);
    ix_buf_free(&label);
    return p.bad ? IX_ERR_NOMEM : IX_OK;
}
