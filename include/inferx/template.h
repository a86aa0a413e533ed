/*
 * inferx template: chat templates as the model files define them.
 *
 * A GGUF's `tokenizer.chat_template` is a Jinja program written for Hugging
 * Face's renderer: jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension ({% break %}, {% continue %}),
 * `raise_exception(msg)`, `strftime_now(fmt)` and a `tojson` that keeps key
 * order. This module interprets the subset of Jinja those templates use
 * (docs/template.md lists it) in a sandbox: no I/O, no clock unless the caller
 * gives one, and every loop, nesting level, byte of output and byte of working
 * memory bounded by ix_template_params. Bad templates and runtime errors come
 * back as a status and a message with the line and column; hostile input never
 * crashes or hangs it. It depends on inferx/core.h and jansson only (messages,
 * tools and extra variables arrive as JSON), and knows nothing of models or
 * HTTP.
 *
 * ---- Use -------------------------------------------------------------------
 *   ix_template *t;
 *   ix_template_create(&t, src, len, NULL, &err);        // parse once (model load)
 *   ix_template_vars v = {.messages = msgs, .tools = tools,
 *                         .add_generation_prompt = true,
 *                         .bos_token = "<s>", .eos_token = "</s>"};
 *   ix_template_result r;
 *   if (ix_template_render(t, &v, &r, &err) == IX_OK) { ... r.text, r.len ... }
 *   ix_template_result_free(&r);
 *   ix_template_destroy(t);
 * ix_template_apply() does the three steps in one call.
 *
 * ---- Which bytes came from the caller's data -------------------------------
 * The result lists the ranges of its text that were copied from the data
 * (messages, tools, extra variables) rather than written by the template or
 * given as bos/eos tokens. A tokenizer that looks for special tokens only
 * outside those ranges keeps a user who types "<|im_end|>" from closing a turn
 * (the fixed renderers of src/server/chat.c give the same guarantee).
 * Concatenation, slicing, strip/trim, split, join and tojson keep the ranges
 * exact; any other transformation of a string that holds data marks the whole
 * result as data.
 *
 * ---- Threads ---------------------------------------------------------------
 * A template is immutable once created: any number of threads may render the
 * same one at once, each with its own vars and result. Create and destroy are
 * not synchronised with renders (destroy only when no render is running).
 * The JSON values in ix_template_vars are only read, and must not change
 * during the render.
 */
#ifndef INFERX_TEMPLATE_H
#define INFERX_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferx/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct json_t; /* jansson's */

typedef struct ix_template ix_template;

/* Limits. A render that reaches one stops with the status in brackets and a
 * message naming the limit; 0 in a field means the default. */
typedef struct ix_template_params {
    size_t max_source_bytes;    /* template text [IX_ERR_TOO_LONG at create]; default 1 MiB */
    size_t max_output_bytes;    /* rendered text [IX_ERR_TOO_LONG]; default 16 MiB */
    size_t max_memory_bytes;    /* working memory of one render: values, captured
                                   output, copies of strings [IX_ERR_RANGE]; default 256 MiB */
    uint64_t max_loop_iterations; /* all loop iterations of one render [IX_ERR_RANGE]; default 1,000,000 */
    uint64_t max_steps;         /* expressions evaluated + statements run [IX_ERR_RANGE]; default 20,000,000 */
    uint32_t max_depth;         /* nesting of the template's expressions and statements
                                   [IX_ERR_FORMAT at create], and of macro calls, nested
                                   evaluation and nested values at run time [IX_ERR_RANGE];
                                   default 200 */
} ix_template_params;

ix_template_params ix_template_default_params(void);

/* What a render sees besides the template's own variables. */
typedef struct ix_template_vars {
    /* `messages`: an array of objects as the OpenAI API sends them (role,
     * content -- a string, null or an array of parts --, tool_calls,
     * tool_call_id, name, ...), passed as is. Required. */
    const struct json_t *messages;
    /* `tools`: an array of {"type": "function", "function": {...}}; NULL
     * leaves `tools` undefined, as Hugging Face does without tools. */
    const struct json_t *tools;
    bool add_generation_prompt;
    /* `bos_token` / `eos_token`: the text of those special tokens (NULL: the
     * variable is undefined). Template text, not data, in the result's ranges. */
    const char *bos_token, *eos_token;
    /* Further variables: an object whose members become variables (e.g.
     * {"date_string": "26 Jul 2024", "enable_thinking": false}); NULL for none.
     * The fields above win over members of the same name. Their strings are data. */
    const struct json_t *extra;
    /* > 0: `strftime_now(fmt)` formats this instant (seconds since the epoch,
     * UTC) with strftime; 0: `strftime_now` is undefined (templates then use
     * their built-in date). The render never reads the clock itself. */
    int64_t now_unix_s;
} ix_template_vars;

/* A range of the rendered text: bytes [off, off + len). */
typedef struct ix_template_span {
    size_t off, len;
} ix_template_span;

typedef struct ix_template_result {
    char *text;               /* len bytes, then a NUL (data may hold NULs too) */
    size_t len;
    ix_template_span *data;   /* (n_data) the ranges copied from the caller's data:
                                 ascending, disjoint, never adjacent */
    size_t n_data;
} ix_template_result;

/* Parses `len` bytes of template text (UTF-8; "\r\n" and "\r" read as "\n";
 * one trailing newline dropped, as Jinja does). params NULL: defaults.
 * On success *out owns a copy of everything it needs (src may be freed).
 * Errors, with "line L, column C: ..." in err: IX_ERR_FORMAT (syntax, or
 * nesting deeper than max_depth), IX_ERR_UNSUPPORTED (Jinja outside the
 * subset: include, extends, import, call blocks, an unknown filter or test),
 * IX_ERR_UTF8, IX_ERR_TOO_LONG, IX_ERR_NOMEM, IX_ERR_INVALID (NULL out or src). */
ix_status ix_template_create(ix_template **out, const char *src, size_t len, const ix_template_params *params,
                             ix_errbuf *err);
void ix_template_destroy(ix_template *t); /* NULL: no-op */

/* Renders into *out (zeroed first; the caller frees it with
 * ix_template_result_free, also after an error). Errors, with
 * "line L, column C: ..." in err:
 *   IX_ERR_INVALID   the template called raise_exception(msg) (err holds msg):
 *                    it refuses these messages -- the caller's input, not the
 *                    template, is at fault; also NULL arguments or messages
 *                    that are not an array
 *   IX_ERR_TYPE      an operation on values of the wrong type (e.g. a string
 *                    plus none, calling an undefined function)
 *   IX_ERR_TOO_LONG  the output passed max_output_bytes
 *   IX_ERR_RANGE     a loop, step, depth or memory limit was reached, or an
 *                    integer overflowed
 *   IX_ERR_UTF8      a string in the JSON input is not valid UTF-8
 *   IX_ERR_NOMEM     an allocation failed
 * Reentrant: see "Threads" above. */
ix_status ix_template_render(const ix_template *t, const ix_template_vars *vars, ix_template_result *out,
                             ix_errbuf *err);

/* Parse + render + destroy: the function a server calls when it does not keep
 * the parsed template. Errors as create and render. */
ix_status ix_template_apply(const char *src, size_t len, const ix_template_vars *vars,
                            const ix_template_params *params, ix_template_result *out, ix_errbuf *err);

void ix_template_result_free(ix_template_result *r); /* frees and zeroes; NULL: no-op */

/* Whether bytes [off, off + len) of r's text lie inside one data range: a
 * special token found there was typed by a user, not written by the template
 * (O(log n_data); any thread). */
bool ix_template_is_data(const ix_template_result *r, size_t off, size_t len);

/* Whether the template's text names variable `name` anywhere (e.g. "tools":
 * a template that never mentions it cannot show the tool list, so a server
 * must put the tools into the prompt itself). */
bool ix_template_mentions(const ix_template *t, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_TEMPLATE_H */
