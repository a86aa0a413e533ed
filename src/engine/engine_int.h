/*
 * Engine internals shared by its files (and its tests).
 *
 * File map: engine.c owns requests, the step loop, the thread and the offline
 * batch API; stream.c owns a choice's text stream (below), the one place where
 * generated tokens become the text a client sees.
 */
#ifndef IX_ENGINE_INT_H
#define IX_ENGINE_INT_H

#include "inferx/core.h"
#include "inferx/sample.h"
#include "inferx/tokenizer.h"

/* One choice's text: each generated token goes through the incremental
 * detokenizer (which never releases half a UTF-8 character) and then the
 * stop-string filter (which never releases a stop string, nor the start of
 * one, even across tokens). Every client of the engine -- the server's
 * streams, the offline batch API, `inferx run` -- sees this text and no
 * other. The SPM leading space of the first token is kept: a completion
 * continues its prompt. Used by one thread at a time (the engine's). */
typedef struct ix__text_stream ix__text_stream;

/* stops: n_stops stop strings (copied; empty ones are ignored). */
ix_status ix__text_stream_create(ix__text_stream **out, const ix_tokenizer *t, const char *const *stops,
                                 size_t n_stops);
void ix__text_stream_destroy(ix__text_stream *ts); /* NULL is a no-op */

/* Appends to out the text that token id makes safe to show (possibly none).
 * *stopped becomes true when a stop string completes: out gets the text
 * before it, the rest is dropped, and the stream takes nothing more (later
 * pushes and the finish append nothing). */
ix_status ix__text_stream_push(ix__text_stream *ts, ix_token id, ix_buf *out, bool *stopped);

/* The choice ended without a stop string (EOS, stop token, length, ...):
 * appends what was held back -- an unfinished UTF-8 sequence as its raw
 * bytes, the start of a stop string that never completed -- unless the
 * held-back text itself completes a stop string, in which case only the text
 * before it. Appends nothing after a stop. */
ix_status ix__text_stream_finish(ix__text_stream *ts, ix_buf *out);

#endif /* IX_ENGINE_INT_H */
