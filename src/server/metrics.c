/* inferx server: /metrics. The server's own numbers (requests by endpoint and
 * status, latency histograms, finish reasons, cancellations, cost) live here
 * under one mutex; engine and KV numbers are read from ix_engine_get_stats at
 * scrape time. Rendered in the Prometheus text exposition format 0.0.4. */
#include <stdio.h>
#include <string.h>

#include "server/server_int.h"

static const double k_latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,      2.5,   5,    10,    30,   60,  120};
static const double k_itl_bounds[] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06,
                                      0.08,   0.1,   0.15,  0.2,   0.3,  0.5,  1,    2.5};

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

void ix__metrics_init(ixs_metrics *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->ttft, k_latency_bounds, (int)IX_ARRAY_LEN(k_latency_bounds));
    hist_init(&m->e2e, k_latency_bounds, (int)IX_ARRAY_LEN(k_latency_bounds));
    hist_init(&m->queue, k_latency_bounds, (int)IX_ARRAY_LEN(k_latency_bounds));
    hist_init(&m->itl, k_itl_bounds, (int)IX_ARRAY_LEN(k_itl_bounds));
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

void ix__metrics_finish(ixs_metrics *m, const ix_finish_info *fi, double cost_usd) {
    pthread_mutex_lock(&m->mu);
    if (fi->usage.completion_tokens > 0 && fi->timings.first_token_ms > 0)
        hist_observe(&m->ttft, fi->timings.first_token_ms / 1e3);
    hist_observe(&m->e2e, fi->timings.total_ms / 1e3);
    hist_observe(&m->queue, fi->timings.queue_ms / 1e3);
    if ((unsigned)fi->reason < IX_ARRAY_LEN(m->finished)) m->finished[fi->reason]++;
    m->cost_usd += cost_usd;
    pthread_mutex_unlock(&m->mu);
}

static void head(ix_buf *b, const char *name, const char *type, const char *help) {
    ix_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(ix_buf *b, const char *name, const char *type, const char *help, double v) {
    head(b, name, type, help);
    ix_buf_printf(b, "%s %.17g\n", name, v);
}

static void hist(ix_buf *b, const char *name, const char *help, const ixs_hist *h) {
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        ix_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    ix_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name,
                  (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

ix_status ix__metrics_render(ix_server *s, ix_buf *b) {
    ix_engine_stats st;
    ix_engine_get_stats(s->engine, &st);
    ixs_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    ixs_metrics c = *m; /* copy, so formatting runs unlocked */
    pthread_mutex_unlock(&m->mu);

    head(b, "inferx_http_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (int i = 0; i < c.n_rows; i++)
        ix_buf_printf(b, "inferx_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", c.rows[i].endpoint,
                      c.rows[i].status, (unsigned long long)c.rows[i].count);
    head(b, "inferx_requests_finished_total", "counter", "Generation requests finished, by finish reason.");
    for (int r = 1; r < (int)IX_ARRAY_LEN(c.finished); r++)
        ix_buf_printf(b, "inferx_requests_finished_total{reason=\"%s\"} %llu\n",
                      ix_finish_reason_name((ix_finish_reason)r), (unsigned long long)c.finished[r]);
    head(b, "inferx_requests_cancelled_total", "counter", "Requests cancelled in the engine, by cause.");
    ix_buf_printf(b, "inferx_requests_cancelled_total{cause=\"disconnect\"} %llu\n",
                  (unsigned long long)c.cancelled_disconnect);
    ix_buf_printf(b, "inferx_requests_cancelled_total{cause=\"shutdown\"} %llu\n",
                  (unsigned long long)c.cancelled_shutdown);
    hist(b, "inferx_time_to_first_token_seconds", "Submit to first generated token.", &c.ttft);
    hist(b, "inferx_inter_token_latency_seconds", "Time between consecutive tokens of one choice.", &c.itl);
    hist(b, "inferx_e2e_request_latency_seconds", "Submit to finish.", &c.e2e);
    hist(b, "inferx_request_queue_time_seconds", "Submit to first scheduled.", &c.queue);

    one(b, "inferx_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)st.n_prompt_tokens);
    one(b, "inferx_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.",
        (double)st.n_cached_prompt_tokens);
    one(b, "inferx_generation_tokens_total", "counter", "Generated tokens.", (double)st.n_generated_tokens);
    one(b, "inferx_engine_steps_total", "counter", "Engine steps run.", (double)st.n_steps);
    one(b, "inferx_num_requests_running", "gauge", "Requests in the running batch.", st.n_running);
    one(b, "inferx_num_requests_waiting", "gauge", "Requests waiting for admission.", st.n_waiting);
    one(b, "inferx_num_requests_swapped", "gauge", "Requests swapped out to the host tier.", st.n_swapped);
    one(b, "inferx_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.", (double)st.kv.n_blocks_total);
    one(b, "inferx_kv_cache_blocks_used", "gauge", "KV cache blocks referenced by a sequence.",
        (double)st.kv.n_blocks_used);
    one(b, "inferx_kv_cache_blocks_cached", "gauge", "KV cache blocks held by the prefix cache.",
        (double)st.kv.n_blocks_cached);
    one(b, "inferx_kv_cache_usage_ratio", "gauge", "Used blocks / total blocks.",
        st.kv.n_blocks_total ? (double)st.kv.n_blocks_used / (double)st.kv.n_blocks_total : 0.0);
    one(b, "inferx_kv_cache_slot_utilization_ratio", "gauge", "Token slots holding a token / slots of used blocks.",
        st.kv.utilization);
    one(b, "inferx_prefix_cache_queried_tokens_total", "counter", "Prompt tokens looked up in the prefix cache.",
        (double)st.kv.prefix_queried_tokens);
    one(b, "inferx_prefix_cache_hit_tokens_total", "counter", "Prompt tokens found in the prefix cache.",
        (double)st.kv.prefix_hit_tokens);
    head(b, "inferx_preemptions_total", "counter", "Preemptions, by mode.");
    ix_buf_printf(b, "inferx_preemptions_total{mode=\"recompute\"} %llu\n", (unsigned long long)st.n_preempt_recompute);
    ix_buf_printf(b, "inferx_preemptions_total{mode=\"swap\"} %llu\n", (unsigned long long)st.n_preempt_swap);
    one(b, "inferx_deadline_shed_total", "counter", "Waiting requests shed because they could not meet their deadline.",
        (double)st.n_deadline_shed);
    one(b, "inferx_deadline_missed_total", "counter", "Requests that finished after their deadline.",
        (double)st.n_deadline_missed);
    one(b, "inferx_cost_per_hour_usd", "gauge", "Configured cost of the machine (--cost-per-hour).",
        s->p.cost_per_hour_usd);
    one(b, "inferx_cost_usd_total", "counter", "Sum of the cost attributed to finished requests.", c.cost_usd);
    one(b, "inferx_memory_live_bytes", "gauge", "Bytes allocated by the library.", (double)ix_mem_live_bytes());
    return b->data ? IX_OK : IX_ERR_NOMEM;
}
