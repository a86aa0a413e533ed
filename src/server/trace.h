/* inferx server: OpenTelemetry tracing (trace.c).
 *
 * A request's spans are encoded as OTLP protobuf the moment they end and
 * queued in memory; one exporter thread sends the queue in batches to an
 * OTLP/HTTP collector (POST application/x-protobuf). Emitting never waits
 * for the network: a full queue drops the span (counted), a collector that
 * is down costs the exporter thread a timeout and the batch (counted), never
 * a request. Context comes from the W3C `traceparent` / `tracestate` headers
 * when a request carries valid ones (its sampled flag decides, as a
 * parent-based sampler does); otherwise a new trace is started and sampled
 * by its id against the configured ratio. */
#ifndef INFERX_SERVER_TRACE_H
#define INFERX_SERVER_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferx/core.h"

typedef struct ixs_tracer ixs_tracer;

typedef struct ixs_trace_params {
    const char *url;             /* the full OTLP/HTTP traces URL (…/v1/traces) */
    const char *service_name;    /* resource attribute service.name; NULL: "inferx" */
    const char *service_version; /* service.version; NULL: none */
    double sample_ratio;         /* traces we start: the fraction recorded, 0..1 */
    int32_t flush_ms;            /* longest a span waits in the queue; <= 0: 1000 */
    size_t max_queue_bytes;      /* encoded spans waiting; beyond: dropped; 0: 4 MiB */
    int32_t timeout_ms;          /* one export's HTTP timeout; <= 0: 5000 */
} ixs_trace_params;

ix_status ix__trace_create(ixs_tracer **out, const ixs_trace_params *p, ix_errbuf *err);
/* Exports what is queued (one last batch, bounded by timeout_ms), stops
 * the exporter and frees. NULL is a no-op. */
void ix__trace_destroy(ixs_tracer *t);

typedef struct ixs_trace_stats {
    uint64_t spans_exported; /* accepted by the collector (2xx) */
    uint64_t spans_dropped;  /* queue full, or their batch failed */
    uint64_t exports_failed; /* batches not accepted (network, timeout, non-2xx) */
} ixs_trace_stats;
void ix__trace_get_stats(ixs_tracer *t, ixs_trace_stats *st);

/* One request's trace context. */
typedef struct ixs_trace_ctx {
    uint8_t trace_id[16];
    uint8_t parent_id[8]; /* the caller's span, when has_parent */
    uint8_t span_id[8];   /* the request's server span */
    bool has_parent;
    bool sampled;
    char tracestate[512]; /* passed through (empty when absent or too long) */
} ixs_trace_ctx;

/* Fills ctx from the request's headers (either may be NULL; an invalid
 * traceparent is ignored and a new trace started, as W3C Trace Context
 * says) with a new span id for the server span. Returns ctx->sampled. */
bool ix__trace_begin(ixs_tracer *t, const char *traceparent, const char *tracestate, ixs_trace_ctx *ctx);
void ix__trace_new_span_id(ixs_tracer *t, uint8_t id[8]);
/* traceparent: "VV-<32 hex>-<16 hex>-<2 hex>[-…]" (lower-case hex, version
 * not ff, ids not all zero; version 00 has nothing after the flags).
 * Returns 0 when valid. */
int ix__trace_parse_traceparent(const char *s, uint8_t trace_id[16], uint8_t parent_id[8], uint8_t *flags);
/* n bytes as 2n lower-case hex digits and a NUL. */
void ix__trace_hex(const uint8_t *id, size_t n, char *out);

/* A span's attributes, encoded as they are added (OTLP KeyValue). An
 * allocation failure drops the rest silently (oom set). */
typedef struct ixs_attrs {
    ix_buf b;
    bool oom;
} ixs_attrs;
void ix__attr_str(ixs_attrs *a, const char *key, const char *v);
void ix__attr_int(ixs_attrs *a, const char *key, int64_t v);
void ix__attr_dbl(ixs_attrs *a, const char *key, double v);
void ix__attr_bool(ixs_attrs *a, const char *key, bool v);
void ix__attr_strs(ixs_attrs *a, const char *key, const char *const *v, size_t n);
void ix__attrs_free(ixs_attrs *a);

typedef enum ixs_span_kind { IXS_SPAN_INTERNAL = 1, IXS_SPAN_SERVER = 2 } ixs_span_kind;

typedef struct ixs_span {
    const ixs_trace_ctx *ctx;
    const uint8_t *span_id;   /* 8 bytes */
    const uint8_t *parent_id; /* 8 bytes, or NULL for a root span */
    const char *name;
    ixs_span_kind kind;
    uint64_t start_ns, end_ns; /* ix_time_ns() clock */
    bool error;                /* status ERROR (else UNSET) */
    const char *status_msg;    /* with error; may be NULL */
    const ixs_attrs *attrs;    /* may be NULL */
} ixs_span;

/* Queues one ended span for export (any thread; never blocks on I/O). */
void ix__trace_emit(ixs_tracer *t, const ixs_span *sp);

#endif
