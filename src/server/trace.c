/* inferx server: OpenTelemetry tracing over OTLP/HTTP (see trace.h).
 *
 * Spans are encoded straight into OTLP protobuf (opentelemetry/proto:
 * collector/trace/v1 ExportTraceServiceRequest → ResourceSpans →
 * ScopeSpans → Span), each one as the `spans` field of ScopeSpans, so a
 * batch is the queue's bytes behind a fixed prefix (resource and scope,
 * encoded once). The wire format needs only varints, fixed64 and
 * length-delimited fields; nested messages are built inside out. */
#include "server/trace.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define IXS_TRACE_BATCH_BYTES (256u << 10) /* send at once past this much */
#define IXS_TRACE_WARN_EVERY_NS (60ull * 1000000000ull)

struct ixs_tracer {
    char *url;
    uint64_t sample_bound; /* a started trace is kept when its low 64 bits are below; UINT64_MAX: all */
    bool sample_all;
    int32_t flush_ms, timeout_ms;
    size_t max_queue;
    ix_buf prefix_resource; /* ResourceSpans field 1 (Resource), encoded */
    ix_buf prefix_scope;    /* ScopeSpans field 1 (InstrumentationScope), encoded */
    uint64_t mono0, real0;  /* ix_time_ns() and CLOCK_REALTIME at creation */
    atomic_uint_fast64_t rng;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    ix_buf q;              /* queued spans, each as ScopeSpans field 2 */
    uint64_t q_spans;
    uint64_t q_first_ns;   /* when the oldest queued span was queued */
    bool stop;
    pthread_t thread;
    bool started;

    atomic_uint_fast64_t n_exported, n_dropped, n_failed;
    uint64_t last_warn_ns; /* exporter thread only */
};

/* ---- protobuf wire format ------------------------------------------------ */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2 };

static ix_status pb_varint(ix_buf *b, uint64_t v) {
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    return ix_buf_append(b, tmp, n);
}

static ix_status pb_tag(ix_buf *b, uint32_t field, unsigned wt) { return pb_varint(b, (uint64_t)field << 3 | wt); }

static ix_status pb_len(ix_buf *b, uint32_t field, const void *p, size_t n) {
    if (pb_tag(b, field, WT_LEN) || pb_varint(b, n)) return IX_ERR_NOMEM;
    return n ? ix_buf_append(b, p, n) : IX_OK;
}

static ix_status pb_str(ix_buf *b, uint32_t field, const char *s) { return pb_len(b, field, s, strlen(s)); }

static ix_status pb_fixed64(ix_buf *b, uint32_t field, uint64_t v) {
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(v >> (8 * i));
    if (pb_tag(b, field, WT_I64)) return IX_ERR_NOMEM;
    return ix_buf_append(b, le, 8);
}

static ix_status pb_uint(ix_buf *b, uint32_t field, uint64_t v) {
    if (pb_tag(b, field, WT_VARINT)) return IX_ERR_NOMEM;
    return pb_varint(b, v);
}

/* common/v1 KeyValue {1 key, 2 AnyValue value} with the value's encoded
 * AnyValue fields in v, as field `field` of the enclosing message. */
static ix_status pb_keyvalue(ix_buf *b, uint32_t field, const char *key, const ix_buf *v) {
    ix_buf kv = {0};
    ix_status s = pb_str(&kv, 1, key);
    if (!s) s = pb_len(&kv, 2, v->data, v->len);
    if (!s) s = pb_len(b, field, kv.data, kv.len);
    ix_buf_free(&kv);
    return s;
}

/* AnyValue {1 string, 2 bool, 3 int64, 4 double, 5 ArrayValue {1 repeated AnyValue}} */
static ix_status av_str(ix_buf *v, const char *s) { return pb_str(v, 1, s); }

static void attr_put(ixs_attrs *a, const char *key, ix_buf *v, ix_status s) {
    if (!s && !a->oom) s = pb_keyvalue(&a->b, 9, key, v); /* Span.attributes = 9 */
    if (s) a->oom = true;
    ix_buf_free(v);
}

void ix__attr_str(ixs_attrs *a, const char *key, const char *val) {
    ix_buf v = {0};
    attr_put(a, key, &v, av_str(&v, val ? val : ""));
}

void ix__attr_int(ixs_attrs *a, const char *key, int64_t val) {
    ix_buf v = {0};
    attr_put(a, key, &v, pb_uint(&v, 3, (uint64_t)val));
}

void ix__attr_dbl(ixs_attrs *a, const char *key, double val) {
    ix_buf v = {0};
    uint64_t bits;
    memcpy(&bits, &val, sizeof bits);
    attr_put(a, key, &v, pb_fixed64(&v, 4, bits));
}

void ix__attr_bool(ixs_attrs *a, const char *key, bool val) {
    ix_buf v = {0};
    attr_put(a, key, &v, pb_uint(&v, 2, val ? 1 : 0));
}

void ix__attr_strs(ixs_attrs *a, const char *key, const char *const *vals, size_t n) {
    ix_buf arr = {0}, one = {0}, v = {0};
    ix_status s = IX_OK;
    for (size_t i = 0; i < n && !s; i++) {
        ix_buf_clear(&one);
        s = av_str(&one, vals[i] ? vals[i] : "");
        if (!s) s = pb_len(&arr, 1, one.data, one.len);
    }
    if (!s) s = pb_len(&v, 5, arr.data, arr.len);
    ix_buf_free(&arr);
    ix_buf_free(&one);
    attr_put(a, key, &v, s);
}

void ix__attrs_free(ixs_attrs *a) {
    ix_buf_free(&a->b);
    a->oom = false;
}

/* ---- ids and context ------------------------------------------------------- */

static uint64_t next_rand(ixs_tracer *t) {
    uint64_t z = atomic_fetch_add(&t->rng, 0x9E3779B97F4A7C15ull) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void put_be64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static bool all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

void ix__trace_new_span_id(ixs_tracer *t, uint8_t id[8]) {
    do put_be64(id, next_rand(t));
    while (all_zero(id, 8));
}

void ix__trace_hex(const uint8_t *id, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1; /* upper case is invalid in traceparent */
}

static int parse_hex(const char *s, uint8_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int ix__trace_parse_traceparent(const char *s, uint8_t trace_id[16], uint8_t parent_id[8], uint8_t *flags) {
    /* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 = 55 */
    if (!s) return -1;
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-') return -1;
    uint8_t ver, fl;
    if (parse_hex(s, &ver, 1) || ver == 0xff) return -1;
    if (ver == 0 && n != 55) return -1;
    if (ver != 0 && n > 55 && s[55] != '-') return -1; /* a later version may append fields */
    if (parse_hex(s + 3, trace_id, 16) || parse_hex(s + 36, parent_id, 8) || parse_hex(s + 53, &fl, 1)) return -1;
    if (all_zero(trace_id, 16) || all_zero(parent_id, 8)) return -1;
    *flags = fl;
    return 0;
}

bool ix__trace_begin(ixs_tracer *t, const char *traceparent, const char *tracestate, ixs_trace_ctx *ctx) {
    memset(ctx, 0, sizeof *ctx);
    uint8_t flags = 0;
    if (ix__trace_parse_traceparent(traceparent, ctx->trace_id, ctx->parent_id, &flags) == 0) {
        ctx->has_parent = true;
        ctx->sampled = flags & 1; /* parent-based: the caller decided */
        if (tracestate && strlen(tracestate) < sizeof ctx->tracestate)
            snprintf(ctx->tracestate, sizeof ctx->tracestate, "%s", tracestate);
    } else {
        do {
            put_be64(ctx->trace_id, next_rand(t));
            put_be64(ctx->trace_id + 8, next_rand(t));
        } while (all_zero(ctx->trace_id, 16));
        ctx->sampled = t->sample_all || get_be64(ctx->trace_id + 8) < t->sample_bound;
    }
    ix__trace_new_span_id(t, ctx->span_id);
    return ctx->sampled;
}

/* ---- emitting ----------------------------------------------------------------- */

void ix__trace_emit(ixs_tracer *t, const ixs_span *sp) {
    if (!t || !sp->ctx->sampled) return;
    ix_buf span = {0}, wrapped = {0};
    const ixs_trace_ctx *c = sp->ctx;
    uint64_t start = t->real0 + (sp->start_ns - t->mono0);
    uint64_t end = t->real0 + (sp->end_ns - t->mono0);
    if (sp->end_ns < sp->start_ns) end = start;
    ix_status s = pb_len(&span, 1, c->trace_id, 16);
    if (!s) s = pb_len(&span, 2, sp->span_id, 8);
    if (!s && c->tracestate[0]) s = pb_str(&span, 3, c->tracestate);
    if (!s && sp->parent_id) s = pb_len(&span, 4, sp->parent_id, 8);
    if (!s) s = pb_str(&span, 5, sp->name);
    if (!s) s = pb_uint(&span, 6, (uint64_t)sp->kind);
    if (!s) s = pb_fixed64(&span, 7, start);
    if (!s) s = pb_fixed64(&span, 8, end);
    if (!s && sp->attrs && sp->attrs->b.len) s = ix_buf_append(&span, sp->attrs->b.data, sp->attrs->b.len);
    if (!s && sp->error) { /* Status {2 message, 3 code}; code 2: ERROR */
        ix_buf st = {0};
        if (sp->status_msg && sp->status_msg[0]) s = pb_str(&st, 2, sp->status_msg);
        if (!s) s = pb_uint(&st, 3, 2);
        if (!s) s = pb_len(&span, 15, st.data, st.len);
        ix_buf_free(&st);
    }
    if (!s) s = pb_len(&wrapped, 2, span.data, span.len); /* ScopeSpans.spans = 2 */
    ix_buf_free(&span);
    bool queued = false, wake = false;
    if (!s) {
        pthread_mutex_lock(&t->mu);
        if (!t->stop && t->q.len + wrapped.len <= t->max_queue && ix_buf_append(&t->q, wrapped.data, wrapped.len) == IX_OK) {
            if (t->q_spans++ == 0) t->q_first_ns = ix_time_ns();
            queued = true;
            wake = t->q_spans == 1 || t->q.len >= IXS_TRACE_BATCH_BYTES;
        }
        pthread_mutex_unlock(&t->mu);
    }
    ix_buf_free(&wrapped);
    if (wake) pthread_cond_signal(&t->cv);
    if (!queued) atomic_fetch_add(&t->n_dropped, 1);
}

/* ---- exporting ------------------------------------------------------------------ */

static size_t discard_body(char *p, size_t size, size_t n, void *user) {
    IX_UNUSED(p);
    IX_UNUSED(user);
    return size * n;
}

/* Sends one ExportTraceServiceRequest holding the spans in `spans` (ScopeSpans
 * field-2 entries). Returns 0 when the collector accepted it. */
static int export_batch(ixs_tracer *t, CURL *curl, const ix_buf *spans, char *why, size_t why_size) {
    ix_buf scope = {0}, rs = {0}, req = {0};
    int rc = -1;
    ix_status s = ix_buf_append(&scope, t->prefix_scope.data, t->prefix_scope.len);
    if (!s) s = ix_buf_append(&scope, spans->data, spans->len);
    if (!s) s = ix_buf_append(&rs, t->prefix_resource.data, t->prefix_resource.len);
    if (!s) s = pb_len(&rs, 2, scope.data, scope.len); /* ResourceSpans.scope_spans = 2 */
    if (!s) s = pb_len(&req, 1, rs.data, rs.len);      /* ExportTraceServiceRequest.resource_spans = 1 */
    ix_buf_free(&scope);
    ix_buf_free(&rs);
    if (s) {
        snprintf(why, why_size, "out of memory encoding the batch");
        goto out;
    }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/x-protobuf");
    if (!hdr) {
        snprintf(why, why_size, "out of memory");
        goto out;
    }
    curl_easy_setopt(curl, CURLOPT_URL, t->url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req.data);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req.len);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)t->timeout_ms);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)(t->timeout_ms < 1000 ? t->timeout_ms : 1000));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "inferx-otlp");
    CURLcode cc = curl_easy_perform(curl);
    long status = 0;
    if (cc == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdr);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, NULL);
    if (cc != CURLE_OK)
        snprintf(why, why_size, "%s", curl_easy_strerror(cc));
    else if (status < 200 || status > 299)
        snprintf(why, why_size, "the collector answered HTTP %ld", status);
    else
        rc = 0;
out:
    ix_buf_free(&req);
    return rc;
}

static void *exporter(void *arg) {
    ixs_tracer *t = arg;
    CURL *curl = curl_easy_init();
    ix_buf batch = {0};
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && t->q.len == 0) pthread_cond_wait(&t->cv, &t->mu);
        while (!t->stop && t->q.len > 0 && t->q.len < IXS_TRACE_BATCH_BYTES) {
            uint64_t due = t->q_first_ns + (uint64_t)t->flush_ms * 1000000ull, now = ix_time_ns();
            if (now >= due) break;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (due - now);
            ts.tv_sec = (time_t)(at / 1000000000ull);
            ts.tv_nsec = (long)(at % 1000000000ull);
            pthread_cond_timedwait(&t->cv, &t->mu, &ts);
        }
        if (t->q.len == 0) {
            if (t->stop) break;
            continue;
        }
        ix_buf tmp = batch;
        batch = t->q;
        t->q = tmp;
        ix_buf_clear(&t->q);
        uint64_t n = t->q_spans;
        t->q_spans = 0;
        pthread_mutex_unlock(&t->mu);

        char why[256] = "cannot start libcurl";
        if (curl && export_batch(t, curl, &batch, why, sizeof why) == 0) {
            atomic_fetch_add(&t->n_exported, n);
        } else {
            atomic_fetch_add(&t->n_failed, 1);
            atomic_fetch_add(&t->n_dropped, n);
            uint64_t now = ix_time_ns();
            if (!t->last_warn_ns || now - t->last_warn_ns >= IXS_TRACE_WARN_EVERY_NS) {
                t->last_warn_ns = now;
                IX_LOGW("tracing: %llu spans not exported to %s: %s (next warning in a minute at most)",
                        (unsigned long long)n, t->url, why);
            }
        }
        ix_buf_clear(&batch);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    ix_buf_free(&batch);
    if (curl) curl_easy_cleanup(curl);
    return NULL;
}

/* ---- life cycle ----------------------------------------------------------------- */

static ix_status resource_attr(ix_buf *b, const char *key, const char *val) {
    ix_buf v = {0};
    ix_status s = av_str(&v, val);
    if (!s) s = pb_keyvalue(b, 1, key, &v); /* Resource.attributes = 1 */
    ix_buf_free(&v);
    return s;
}

ix_status ix__trace_create(ixs_tracer **out, const ixs_trace_params *p, ix_errbuf *err) {
    *out = NULL;
    if (!p->url || (strncmp(p->url, "http://", 7) != 0 && strncmp(p->url, "https://", 8) != 0))
        return ix_errf(err, IX_ERR_INVALID, "the OTLP endpoint must be an http:// or https:// URL (got '%s')",
                             p->url ? p->url : "");
    if (!(p->sample_ratio >= 0 && p->sample_ratio <= 1))
        return ix_errf(err, IX_ERR_INVALID, "the trace sample ratio must be within 0..1");
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ix_errf(err, IX_ERR_INTERNAL, "libcurl failed to initialise");
    ixs_tracer *t = ix_calloc(1, sizeof *t);
    if (!t) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    t->url = ix_strdup(p->url);
    t->sample_all = p->sample_ratio >= 1;
    t->sample_bound = (uint64_t)(p->sample_ratio * 18446744073709551616.0 * (1 - 1e-16));
    t->flush_ms = p->flush_ms > 0 ? p->flush_ms : 1000;
    t->timeout_ms = p->timeout_ms > 0 ? p->timeout_ms : 5000;
    t->max_queue = p->max_queue_bytes ? p->max_queue_bytes : (4u << 20);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    t->mono0 = ix_time_ns();
    t->real0 = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    uint64_t seed = t->real0 ^ (uint64_t)(uintptr_t)t;
    uint64_t r;
    if (getrandom(&r, sizeof r, 0) == (ssize_t)sizeof r) seed ^= r;
    atomic_init(&t->rng, seed);
    atomic_init(&t->n_exported, 0);
    atomic_init(&t->n_dropped, 0);
    atomic_init(&t->n_failed, 0);

    ix_buf res = {0}, scope = {0};
    ix_status s = t->url ? IX_OK : IX_ERR_NOMEM;
    if (!s) s = resource_attr(&res, "service.name", p->service_name && p->service_name[0] ? p->service_name : "inferx");
    if (!s && p->service_version) s = resource_attr(&res, "service.version", p->service_version);
    if (!s) s = resource_attr(&res, "telemetry.sdk.name", "inferx");
    if (!s) s = resource_attr(&res, "telemetry.sdk.language", "c");
    if (!s) s = pb_len(&t->prefix_resource, 1, res.data, res.len); /* ResourceSpans.resource = 1 */
    if (!s) s = pb_str(&scope, 1, "inferx");                        /* InstrumentationScope.name */
    if (!s && p->service_version) s = pb_str(&scope, 2, p->service_version);
    if (!s) s = pb_len(&t->prefix_scope, 1, scope.data, scope.len); /* ScopeSpans.scope = 1 */
    ix_buf_free(&res);
    ix_buf_free(&scope);
    if (s) {
        ix__trace_destroy(t);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->mu, NULL);
    if (pthread_create(&t->thread, NULL, exporter, t) != 0) {
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
        ix_buf_free(&t->prefix_resource);
        ix_buf_free(&t->prefix_scope);
        ix_free(t->url);
        ix_free(t);
        return ix_errf(err, IX_ERR_INTERNAL, "cannot start the trace exporter thread");
    }
    t->started = true;
    *out = t;
    return IX_OK;
}

void ix__trace_destroy(ixs_tracer *t) {
    if (!t) return;
    if (t->started) {
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_mutex_unlock(&t->mu);
        pthread_cond_signal(&t->cv);
        pthread_join(t->thread, NULL);
        pthread_cond_destroy(&t->cv);
        pthread_mutex_destroy(&t->mu);
    }
    ix_buf_free(&t->q);
    ix_buf_free(&t->prefix_resource);
    ix_buf_free(&t->prefix_scope);
    ix_free(t->url);
    ix_free(t);
}

void ix__trace_get_stats(ixs_tracer *t, ixs_trace_stats *st) {
    memset(st, 0, sizeof *st);
    if (!t) return;
    st->spans_exported = atomic_load(&t->n_exported);
    st->spans_dropped = atomic_load(&t->n_dropped);
    st->exports_failed = atomic_load(&t->n_failed);
}
