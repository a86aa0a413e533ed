/* A choice's text stream: detokenizer, then stop-string filter (see
 * engine_int.h). The detokenizer's output for one token is at most a few
 * characters, so one scratch buffer per stream carries it to the filter. */
#include "engine/engine_int.h"

struct ix__text_stream {
    ix_detok *dt;
    ix_stopper *stopper;
    ix_buf piece; /* scratch: the detokenizer's output for one token */
    bool stopped; /* a stop string completed: nothing more is shown */
};

ix_status ix__text_stream_create(ix__text_stream **out, const ix_tokenizer *t, const char *const *stops,
                                 size_t n_stops) {
    ix__text_stream *ts = ix_calloc(1, sizeof *ts);
    *out = NULL;
    if (!ts) return IX_ERR_NOMEM;
    if (ix_detok_create(&ts->dt, t, IX_DETOK_KEEP_LEADING_SPACE) != IX_OK ||
        ix_stopper_create(&ts->stopper, stops, n_stops) != IX_OK) {
        ix__text_stream_destroy(ts);
        return IX_ERR_NOMEM;
    }
    *out = ts;
    return IX_OK;
}

void ix__text_stream_destroy(ix__text_stream *ts) {
    if (!ts) return;
    ix_detok_destroy(ts->dt);
    ix_stopper_destroy(ts->stopper);
    ix_buf_free(&ts->piece);
    ix_free(ts);
}

/* Passes the scratch piece through the stop filter. */
static ix_status filter(ix__text_stream *ts, ix_buf *out, bool *stopped) {
    ix_status s = ix_stopper_feed(ts->stopper, ts->piece.data ? ts->piece.data : "", ts->piece.len, out,
                                  &ts->stopped);
    *stopped = ts->stopped;
    return s;
}

ix_status ix__text_stream_push(ix__text_stream *ts, ix_token id, ix_buf *out, bool *stopped) {
    *stopped = ts->stopped;
    if (ts->stopped) return IX_OK;
    ix_buf_clear(&ts->piece);
    ix_status s = ix_detok_push(ts->dt, id, &ts->piece);
    return s == IX_OK ? filter(ts, out, stopped) : s;
}

ix_status ix__text_stream_finish(ix__text_stream *ts, ix_buf *out) {
    if (ts->stopped) return IX_OK;
    bool stopped;
    ix_buf_clear(&ts->piece);
    ix_status s = ix_detok_flush(ts->dt, &ts->piece);
    if (s == IX_OK) s = filter(ts, out, &stopped);
    if (s == IX_OK && !stopped) s = ix_stopper_flush(ts->stopper, out);
    return s;
}
