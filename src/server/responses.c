/* inferx server: POST /v1/responses (OpenAI's Responses API).
 *
 * A Responses request is translated into the chat-completions request it
 * means -- `instructions` and the input items become messages,
 * `max_output_tokens` becomes max_completion_tokens -- and runs as a chat job
 * of generate.c (same validation, engine requests, cancellation, metrics);
 * only the answer differs: this file renders the Response object and, when
 * streaming, its events in the documented order:
 *
 *   response.created, response.in_progress, response.output_item.added,
 *   response.content_part.added, response.output_text.delta ...,
 *   response.output_text.done, response.content_part.done,
 *   response.output_item.done, response.completed (or .incomplete / .failed)
 *
 * each as `event: <type>` + `data: <json>` with a sequence_number, and no
 * `[DONE]` (the API has none).
 *
 * Stored responses (rstore.c): with `store` (true unless the request says
 * false, as OpenAI's default) the finished Response and its conversation
 * (input items, then output items) are kept for the tenant; a request with
 * `previous_response_id` starts from that conversation (the previous
 * request's `instructions` are not carried over). A stored response's KV
 * is pinned as a session named by its id, so the next turn's prompt, which
 * starts with it, is a prefix-cache hit. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "server/server_int.h"

struct ixs_resp {
    ix_server *s;
    char id[64];     /* resp_... */
    char msg_id[64]; /* msg_... the output message */
    json_t *base;    /* the Response object's fields that echo the request */
    int64_t created;
    int seq;         /* streaming: next sequence_number */
    /* Tools: the answer may hold calls, known only once it is whole, so the
     * output items are made at the end (and streamed then). */
    json_t *tools;   /* chat-shaped function tools when calls are parsed, else NULL */
    bool parallel;   /* parallel_tool_calls: else at most one call is kept */
    int64_t max_calls; /* max_tool_calls: calls kept (0: all) */
    json_t *items;   /* the output items once made (ids fixed for every event) */
    bool store;      /* keep it (rstore.c) when it finishes */
    uint64_t tenant; /* whose it is */
    json_t *conversation; /* the input items, the previous conversation first */
};

const char *ix__resp_id(const ixs_resp *r) { return r->id; }

void ix__resp_free(ixs_resp *r) {
    if (!r) return;
    json_decref(r->base);
    json_decref(r->tools);
    json_decref(r->items);
    json_decref(r->conversation);
    ix_free(r);
}

void ix__resp_map_param(ixs_err *e) {
    /* Longest prefixes first: a chat field, or its sub-fields. */
    static const char *const map[][2] = {
        {"response_format.json_schema", "text.format"},
        {"response_format", "text.format"},
        {"messages", "input"},
        {"max_completion_tokens", "max_output_tokens"},
        {"max_tokens", "max_output_tokens"},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(map); i++) {
        size_t n = strlen(map[i][0]);
        if (strncmp(e->param, map[i][0], n) || (e->param[n] && e->param[n] != '.')) continue;
        char rest[64];
        snprintf(rest, sizeof rest, "%s", e->param + n);
        snprintf(e->param, sizeof e->param, "%s%s", map[i][1], rest);
        return;
    }
}

/* ---- request: Responses -> chat ------------------------------------------ */

/* Fields this endpoint understands; anything else is a 400 naming it. */
static const char *const k_known[] = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "text",
    "tools", "tool_choice", "parallel_tool_calls", "store", "metadata", "user", "seed", "truncation",
    "include", "previous_response_id", "reasoning", "service_tier", "stream_options", "safety_identifier",
    "prompt_cache_key", "background", "top_logprobs", "max_tool_calls", "session_id", "session_ttl",
};

/* Copies a text content (a string, or an array of input_text / output_text
 * parts) into a plain string node. */
static int content_text(json_t *content, const char *where, json_t **out, ixs_err *e) {
    if (json_is_string(content)) {
        *out = json_incref(content);
        return 0;
    }
    if (!json_is_array(content)) return IXS_BAD(e, "input", "%s: 'content' must be a string or an array of parts", where);
    ix_buf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text"))) {
            ix_buf_free(&b);
            return IXS_BAD(e, "input", "%s: content part %zu: type '%.40s' is not supported (input_text and "
                                       "output_text are)", where, i, type ? type : "(none)");
        }
        if (!json_is_string(text)) {
            ix_buf_free(&b);
            return IXS_BAD(e, "input", "%s: content part %zu: 'text' must be a string", where, i);
        }
        if ((i && ix_buf_append(&b, "\n", 1) != IX_OK) ||
            ix_buf_append(&b, json_string_value(text), json_string_length(text)) != IX_OK) {
            ix_buf_free(&b);
            return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
        }
    }
    *out = json_stringn(b.data ? b.data : "", b.len);
    ix_buf_free(&b);
    return *out ? 0 : ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
}

/* One input item appended to the chat messages. function_call items join
 * the assistant message before them when it holds tool calls already. */
static int add_item(json_t *msgs, json_t *item, size_t i, ixs_err *e) {
    char where[48];
    snprintf(where, sizeof where, "input[%zu]", i);
    if (!json_is_object(item)) return IXS_BAD(e, "input", "%s must be an object", where);
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type || !strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(item, "role"));
        if (!role || (strcmp(role, "user") && strcmp(role, "system") && strcmp(role, "developer") &&
                      strcmp(role, "assistant")))
            return IXS_BAD(e, "input", "%s: 'role' must be user, system, developer or assistant", where);
        json_t *text;
        if (content_text(json_object_get(item, "content"), where, &text, e)) return -1;
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", text));
        return 0;
    }
    if (!strcmp(type, "function_call")) {
        json_t *call_id = json_object_get(item, "call_id"), *name = json_object_get(item, "name"),
               *args = json_object_get(item, "arguments");
        if (!json_is_string(call_id) || !json_is_string(name) || !json_is_string(args))
            return IXS_BAD(e, "input", "%s: a function_call needs string 'call_id', 'name' and 'arguments'", where);
        json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", call_id, "type", "function", "function", "name",
                                 name, "arguments", args);
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        json_t *calls = json_object_get(last, "tool_calls");
        if (json_is_array(calls) && !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) {
            json_array_append_new(calls, call);
            return 0;
        }
        json_array_append_new(msgs, json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls", call));
        return 0;
    }
    if (!strcmp(type, "function_call_output")) {
        json_t *call_id = json_object_get(item, "call_id"), *out = json_object_get(item, "output");
        if (!json_is_string(call_id)) return IXS_BAD(e, "input", "%s: 'call_id' must be a string", where);
        json_t *text;
        if (content_text(out, where, &text, e)) return -1;
        json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id", call_id, "content",
                                              text));
        return 0;
    }
    return IXS_BAD(e, "input", "%s: item type '%.40s' is not supported (message, function_call and "
                               "function_call_output are)", where, type);
}

/* text.format -> chat's response_format (NULL for plain text). */
static int text_format(json_t *text, json_t **rf, ixs_err *e) {
    *rf = NULL;
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return IXS_BAD(e, "text", "'text' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(text, key, v) {
        if (strcmp(key, "format") && strcmp(key, "verbosity"))
            return IXS_BAD(e, "text", "unknown field 'text.%.40s'", key);
    }
    json_t *verb = json_object_get(text, "verbosity");
    if (verb && !json_is_null(verb) && (!json_is_string(verb) || strcmp(json_string_value(verb), "medium")))
        return IXS_BAD(e, "text.verbosity", "'text.verbosity' other than \"medium\" is not supported");
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type) return IXS_BAD(e, "text.format", "'text.format.type' must be a string");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        *rf = json_pack("{s:s}", "type", "json_object");
        return 0;
    }
    if (!strcmp(type, "json_schema")) {
        json_t *schema = json_object_get(f, "schema"), *name = json_object_get(f, "name");
        if (!json_is_object(schema)) return IXS_BAD(e, "text.format.schema", "'text.format.schema' must be an object");
        if (!json_is_string(name)) return IXS_BAD(e, "text.format.name", "'text.format.name' must be a string");
        json_t *js = json_pack("{s:O, s:O}", "name", name, "schema", schema);
        json_t *strict = json_object_get(f, "strict"), *desc = json_object_get(f, "description");
        if (strict && !json_is_null(strict)) json_object_set(js, "strict", strict);
        if (json_is_string(desc)) json_object_set(js, "description", desc);
        *rf = json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js);
        return 0;
    }
    return IXS_BAD(e, "text.format", "'text.format.type' must be text, json_object or json_schema");
}

/* tools: function tools -> chat's {type, function: {...}}. */
static int tools_of(json_t *tools, json_t **out, ixs_err *e) {
    *out = NULL;
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return IXS_BAD(e, "tools", "'tools' must be an array");
    json_t *arr = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function")) {
            json_decref(arr);
            return IXS_BAD(e, "tools", "tools[%zu]: type '%.40s' is not supported (function is)", i,
                           type ? type : "(none)");
        }
        json_t *fn = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(t, key, v) {
            if (strcmp(key, "type")) json_object_set(fn, key, v);
        }
        json_array_append_new(arr, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    *out = arr;
    return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type":"function","name"}. */
static int tool_choice_of(json_t *tc, json_t **out, ixs_err *e) {
    *out = NULL;
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        *out = json_incref(tc);
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name");
    if (!type || strcmp(type, "function") || !json_is_string(name))
        return IXS_BAD(e, "tool_choice", "'tool_choice' must be auto, none, required or {\"type\":\"function\", "
                                         "\"name\": ...}");
    *out = json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name);
    return 0;
}

/* Fields accepted only with the value that means "nothing to do". */
static int refuse_unsupported(json_t *req, ixs_err *e) {
    json_t *v;
    if ((v = json_object_get(req, "previous_response_id")) && !json_is_null(v) && !json_is_string(v))
        return IXS_BAD(e, "previous_response_id", "'previous_response_id' must be a string");
    if ((v = json_object_get(req, "background")) && json_is_true(v))
        return IXS_BAD(e, "background", "'background' responses are not supported");
    if ((v = json_object_get(req, "truncation")) && !json_is_null(v) && (!json_is_string(v) || strcmp(json_string_value(v), "disabled")))
        return IXS_BAD(e, "truncation", "'truncation' must be \"disabled\" (inputs are never truncated)");
    if ((v = json_object_get(req, "include")) && !json_is_null(v) && (!json_is_array(v) || json_array_size(v)))
        return IXS_BAD(e, "include", "'include' must be empty: no extra output is available");
    if ((v = json_object_get(req, "reasoning")) && !json_is_null(v)) {
        json_t *effort = json_object_get(v, "effort");
        if (!json_is_object(v) || (effort && !json_is_null(effort)))
            return IXS_BAD(e, "reasoning", "'reasoning' is not supported by this model");
    }
    if ((v = json_object_get(req, "top_logprobs")) && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 0))
        return IXS_BAD(e, "top_logprobs", "'top_logprobs' is not supported on /v1/responses");
    static const char *const strings[] = {"user", "safety_identifier", "prompt_cache_key", "instructions",
                                          "service_tier"};
    for (size_t i = 0; i < IX_ARRAY_LEN(strings); i++)
        if ((v = json_object_get(req, strings[i])) && !json_is_null(v) && !json_is_string(v))
            return IXS_BAD(e, strings[i], "'%s' must be a string", strings[i]);
    if ((v = json_object_get(req, "store")) && !json_is_null(v) && !json_is_boolean(v))
        return IXS_BAD(e, "store", "'store' must be a boolean");
    if ((v = json_object_get(req, "metadata")) && !json_is_null(v) && !json_is_object(v))
        return IXS_BAD(e, "metadata", "'metadata' must be an object");
    return 0;
}

/* r->conversation: the stored conversation previous_response_id names (the
 * tenant's own only), then this request's input as items. */
static int conversation_of(ixs_resp *r, json_t *req, ixs_err *e) {
    json_t *prev = json_object_get(req, "previous_response_id"), *in = json_object_get(req, "input");
    if (json_is_string(prev)) {
        ix_status st = ix__rstore_get(r->s, json_string_value(prev), r->tenant, NULL, &r->conversation);
        if (st == IX_ERR_NOT_FOUND)
            return IXS_BAD(e, "previous_response_id", "Previous response with id '%.64s' not found.",
                           json_string_value(prev)); /* OpenAI's status and words */
        if (st != IX_OK) return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
    } else if (!(r->conversation = json_array())) {
        return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
    }
    if (json_is_string(in))
        return json_array_append_new(r->conversation, json_pack("{s:s, s:s, s:O}", "type", "message", "role", "user",
                                                                "content", in))
                   ? ix__srv_errf(e, 500, "server_error", NULL, "out of memory")
                   : 0;
    if (!json_is_array(in)) return IXS_BAD(e, "input", "'input' must be a string or an array of input items");
    return json_array_extend(r->conversation, in) ? ix__srv_errf(e, 500, "server_error", NULL, "out of memory") : 0;
}

/* Builds the chat request; fills r->base with the echoed fields. */
static int to_chat(json_t *req, json_t *chat, ixs_resp *r, ixs_err *e) {
    const char *key;
    json_t *v;
    json_object_foreach(req, key, v) {
        bool ok = false;
        for (size_t i = 0; i < IX_ARRAY_LEN(k_known) && !ok; i++) ok = !strcmp(key, k_known[i]);
        if (!ok) return IXS_BAD(e, key, "unknown field '%.48s' (not supported by /v1/responses)", key);
    }
    if (refuse_unsupported(req, e)) return -1;
    json_t *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    json_t *ins = json_object_get(req, "instructions");
    if (json_is_string(ins)) json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    if (conversation_of(r, req, e)) return -1;
    size_t k;
    json_t *item;
    json_array_foreach(r->conversation, k, item) if (add_item(msgs, item, k, e)) return -1;
    if (json_array_size(msgs) == 0) return IXS_BAD(e, "input", "'input' is empty");
    /* Sampling and lengths: chat's parser checks the values. */
    static const char *const copied[][2] = {
        {"max_output_tokens", "max_completion_tokens"}, {"temperature", "temperature"}, {"top_p", "top_p"},
        {"stream", "stream"}, {"seed", "seed"}, {"parallel_tool_calls", "parallel_tool_calls"},
        {"user", "user"}, {"prompt_cache_key", "cache_salt"}, {"session_id", "session_id"},
        {"session_ttl", "session_ttl"},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(copied); i++)
        if ((v = json_object_get(req, copied[i][0])) && !json_is_null(v)) json_object_set(chat, copied[i][1], v);
    json_t *rf, *tools, *tc;
    if (text_format(json_object_get(req, "text"), &rf, e)) return -1;
    if (rf) json_object_set_new(chat, "response_format", rf);
    if (tools_of(json_object_get(req, "tools"), &tools, e)) return -1;
    if (tools) json_object_set_new(chat, "tools", tools);
    if (tool_choice_of(json_object_get(req, "tool_choice"), &tc, e)) return -1;
    if (tc) json_object_set_new(chat, "tool_choice", tc);
    ixs_tools_req tr;
    if (ix__tools_parse_request(chat, &tr, e)) {
        if (!strncmp(e->param, "tools[", 6)) snprintf(e->param, sizeof e->param, "tools");
        return -1;
    }
    if (tr.tools && tr.choice != IXS_TOOL_CHOICE_NONE) r->tools = json_incref(tr.tools);
    r->parallel = tr.parallel;
    json_t *mtc = json_object_get(req, "max_tool_calls");
    if (mtc && !json_is_null(mtc)) {
        if (!json_is_integer(mtc) || json_integer_value(mtc) < 1)
            return IXS_BAD(e, "max_tool_calls", "'max_tool_calls' must be an integer >= 1");
        r->max_calls = json_integer_value(mtc);
    }

    /* The Response object's echo of the request (OpenAI's defaults). */
    json_t *b = r->base;
    json_t *get;
#define ECHO(name, dflt) json_object_set_new(b, name, (get = json_object_get(req, name)) && !json_is_null(get) ? json_incref(get) : (dflt))
    ECHO("instructions", json_null());
    ECHO("max_output_tokens", json_null());
    ECHO("temperature", json_real(1.0));
    ECHO("top_p", json_real(1.0));
    ECHO("parallel_tool_calls", json_true());
    ECHO("tool_choice", json_string("auto"));
    ECHO("tools", json_array());
    ECHO("text", json_pack("{s:{s:s}}", "format", "type", "text"));
    ECHO("metadata", json_object());
    ECHO("user", json_null());
#undef ECHO
    json_object_set_new(b, "previous_response_id", (get = json_object_get(req, "previous_response_id")) &&
                                                           json_is_string(get) ? json_incref(get) : json_null());
    json_object_set_new(b, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
    json_object_set_new(b, "store", json_boolean(r->store));
    json_object_set_new(b, "truncation", json_string("disabled"));
    json_object_set_new(b, "background", json_false());
    json_object_set_new(b, "service_tier", json_string("default"));
    return 0;
}

/* The renderer's callbacks (ixs_render) over the functions below. */
static json_t *resp_whole(void *r, const ixs_gen_result *g) { return ix__resp_whole(r, g); }
static bool resp_begin(void *r, ix_buf *out) { return ix__resp_stream_begin(r, out); }
static bool resp_delta(void *r, ix_buf *out, const char *t, size_t n) { return ix__resp_stream_delta(r, out, t, n); }
static bool resp_end(void *r, ix_buf *out, const ixs_gen_result *g) { return ix__resp_stream_end(r, out, g); }
static void resp_free(void *r) { ix__resp_free(r); }

enum MHD_Result ix__srv_responses(ixs_conn *cc, json_t *req) {
    ix_server *s = cc->s;
    ixs_err e;
    ixs_resp *r = ix_calloc(1, sizeof *r);
    json_t *chat = json_object();
    if (!r || !chat || !(r->base = json_object())) {
        ix__resp_free(r);
        json_decref(chat);
        return ix__srv_reply_json(cc, 500, NULL);
    }
    r->s = s;
    ix__srv_new_id(s, "resp_", r->id, sizeof r->id);
    ix__srv_new_id(s, "msg_", r->msg_id, sizeof r->msg_id);
    r->created = (int64_t)time(NULL);
    r->tenant = ix__policy_key_ns(s, cc->key);
    json_t *store = json_object_get(req, "store");
    r->store = !json_is_false(store);
    json_object_set_new(r->base, "model", json_string(s->model_name));
    if (to_chat(req, chat, r, &e)) {
        ix__resp_free(r);
        json_decref(chat);
        return ix__srv_reply_err(cc, &e);
    }
    /* A stored response pins its KV as the session of its id (unless the
     * request names a session itself): its next turn starts with it. */
    if (r->store && !json_object_get(chat, "session_id")) json_object_set_new(chat, "session_id", json_string(r->id));
    const ixs_render rnd = {r, r->id, "text/event-stream", resp_whole, resp_begin, resp_delta, resp_end,
                            ix__resp_map_param, resp_free};
    enum MHD_Result ret = ix__srv_generate_as(cc, true, chat, &rnd);
    json_decref(chat);
    return ret;
}

/* ---- the answer ------------------------------------------------------------ */

static json_t *usage_json(const ixs_gen_result *g) {
    json_t *u = json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", g->usage.prompt_tokens,
                          "input_tokens_details", "cached_tokens", g->usage.cached_prompt_tokens, "output_tokens",
                          g->usage.completion_tokens, "output_tokens_details", "reasoning_tokens", 0, "total_tokens",
                          g->usage.prompt_tokens + g->usage.completion_tokens);
    if (u && g->cost_usd >= 0) json_object_set_new(u, "cost_usd", json_real(g->cost_usd));
    return u;
}

static json_t *text_part(const char *text, size_t len) {
    return json_pack("{s:s, s:o, s:[], s:[]}", "type", "output_text", "text", ix__json_text(text, len),
                     "annotations", "logprobs");
}

static json_t *message_item(ixs_resp *r, const char *status, json_t *content /* stolen */) {
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", r->msg_id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

/* The output items of a finished answer (made once): the message, when it
 * has text (always without tools), then a function_call per parsed call. */
static json_t *output_items(ixs_resp *r, const ixs_gen_result *g, const char *item_status) {
    if (r->items) return r->items;
    json_t *calls = NULL;
    ix_buf content = {0};
    const char *text = g->text;
    size_t len = g->len;
    if (r->tools && g->reason != IX_FINISH_LENGTH) {
        if (ix__tools_parse_output(g->text, g->len, r->s->chat.tool_syntax, r->tools, &calls, &content) != IX_OK)
            return NULL;
        if (calls) text = content.data ? content.data : "", len = content.len;
    }
    json_t *items = json_array();
    if (items && (!calls || len))
        json_array_append_new(items, message_item(r, item_status, json_pack("[o]", text_part(text, len))));
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if ((i > 0 && !r->parallel) || (r->max_calls > 0 && (int64_t)i >= r->max_calls)) break;
        char fc[64], call[64];
        ix__srv_new_id(r->s, "fc_", fc, sizeof fc);
        ix__srv_new_id(r->s, "call_", call, sizeof call);
        json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:O, s:O, s:s}", "id", fc, "type", "function_call",
                                               "call_id", call, "name", json_object_get(c, "name"), "arguments",
                                               json_object_get(c, "arguments"), "status", "completed"));
    }
    json_decref(calls);
    ix_buf_free(&content);
    r->items = items;
    return items;
}

/* The Response object in state status; g NULL while in progress. */
static json_t *response_obj(ixs_resp *r, const char *status, const ixs_gen_result *g) {
    json_t *o = json_deep_copy(r->base);
    if (!o) return NULL;
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(r->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details", json_null());
    json_object_set_new(o, "output", json_array());
    json_object_set_new(o, "usage", json_null());
    if (!g) return o;
    if (g->reason == IX_FINISH_ERROR || g->reason == IX_FINISH_DEADLINE) {
        json_object_set_new(o, "error",
                            json_pack("{s:s, s:s}", "code",
                                      g->reason == IX_FINISH_DEADLINE ? "deadline_exceeded"
                                      : g->invalid_request            ? "invalid_request_error"
                                                                      : "server_error",
                                      "message", g->error ? g->error : "the request was shed by its deadline"));
    } else {
        json_t *items = output_items(r, g, strcmp(status, "completed") ? "incomplete" : "completed");
        if (!items) {
            json_decref(o);
            return NULL;
        }
        json_object_set(o, "output", items);
        if (g->reason == IX_FINISH_LENGTH)
            json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
        else if (g->reason == IX_FINISH_ABORT)
            json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "interrupted"));
    }
    json_object_set_new(o, "usage", usage_json(g));
    return o;
}

static const char *final_status(const ixs_gen_result *g) {
    switch (g->reason) {
    case IX_FINISH_STOP: return "completed";
    case IX_FINISH_ERROR:
    case IX_FINISH_DEADLINE: return "failed";
    default: return "incomplete";
    }
}

/* Keeps a finished (not failed) response and its conversation. */
static void keep(ixs_resp *r, const json_t *resp, const char *status) {
    if (!r->store || !resp || !strcmp(status, "failed")) return;
    json_t *conv = json_deep_copy(r->conversation);
    if (conv && !json_array_extend(conv, json_object_get(resp, "output"))) {
        ix_status st = ix__rstore_put(r->s, r->id, r->tenant, resp, conv);
        if (st != IX_OK) IX_LOGW("server: response %s not stored: %s", r->id, ix_status_str(st));
    }
    json_decref(conv);
}

json_t *ix__resp_whole(ixs_resp *r, const ixs_gen_result *g) {
    const char *status = final_status(g);
    json_t *o = response_obj(r, status, g);
    keep(r, o, status);
    return o;
}

/* One SSE event: `event: type` and `data: {"type": type, "sequence_number": n, ...fields}`. */
static bool event(ixs_resp *r, ix_buf *out, const char *type, json_t *fields /* stolen */) {
    if (!fields) return false;
    json_t *o = json_pack("{s:s, s:i}", "type", type, "sequence_number", r->seq++);
    if (!o || json_object_update(o, fields)) {
        json_decref(o);
        json_decref(fields);
        return false;
    }
    json_decref(fields);
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text) return false;
    bool ok = ix_buf_printf(out, "event: %s\ndata: %s\n\n", type, text) == IX_OK;
    free(text);
    return ok;
}

static json_t *with_response(json_t *resp) { return resp ? json_pack("{s:o}", "response", resp) : NULL; }

/* The events that open the message item and its text part. */
static bool open_message(ixs_resp *r, ix_buf *out, int index) {
    return event(r, out, "response.output_item.added",
                 json_pack("{s:i, s:o}", "output_index", index, "item", message_item(r, "in_progress", json_array()))) &&
           event(r, out, "response.content_part.added",
                 json_pack("{s:s, s:i, s:i, s:o}", "item_id", r->msg_id, "output_index", index, "content_index", 0,
                           "part", text_part("", 0)));
}

static bool text_delta(ixs_resp *r, ix_buf *out, int index, const char *text, size_t len) {
    return event(r, out, "response.output_text.delta",
                 json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", r->msg_id, "output_index", index, "content_index",
                           0, "delta", ix__json_text(text, len), "logprobs"));
}

/* The events that close item `index` of the finished output. */
static bool close_item(ixs_resp *r, ix_buf *out, int index, json_t *item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!strcmp(type, "message")) {
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        json_t *text = json_object_get(part, "text");
        if (!event(r, out, "response.output_text.done",
                   json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", r->msg_id, "output_index", index,
                             "content_index", 0, "text", text, "logprobs")) ||
            !event(r, out, "response.content_part.done",
                   json_pack("{s:s, s:i, s:i, s:O}", "item_id", r->msg_id, "output_index", index, "content_index", 0,
                             "part", part)))
            return false;
    } else {
        json_t *id = json_object_get(item, "id"), *args = json_object_get(item, "arguments");
        if (!event(r, out, "response.function_call_arguments.delta",
                   json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", index, "delta", args)) ||
            !event(r, out, "response.function_call_arguments.done",
                   json_pack("{s:O, s:i, s:O, s:O}", "item_id", id, "output_index", index, "name",
                             json_object_get(item, "name"), "arguments", args)))
            return false;
    }
    return event(r, out, "response.output_item.done", json_pack("{s:i, s:O}", "output_index", index, "item", item));
}

bool ix__resp_stream_begin(ixs_resp *r, ix_buf *out) {
    bool ok = event(r, out, "response.created", with_response(response_obj(r, "in_progress", NULL))) &&
              event(r, out, "response.in_progress", with_response(response_obj(r, "in_progress", NULL)));
    return ok && (r->tools || open_message(r, out, 0)); /* with tools: items at the end */
}

bool ix__resp_stream_delta(ixs_resp *r, ix_buf *out, const char *text, size_t len) {
    return r->tools || text_delta(r, out, 0, text, len);
}

bool ix__resp_stream_end(ixs_resp *r, ix_buf *out, const ixs_gen_result *g) {
    const char *status = final_status(g);
    json_t *resp = response_obj(r, status, g);
    if (!resp) return false;
    keep(r, resp, status);
    if (!strcmp(status, "failed")) return event(r, out, "response.failed", with_response(resp));
    json_t *items = json_object_get(resp, "output");
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item) {
        bool msg = !strcmp(json_string_value(json_object_get(item, "type")), "message");
        if (r->tools) { /* nothing was streamed: open each item, its whole text as one delta */
            json_t *added = json_deep_copy(item);
            json_object_set_new(added, "status", json_string("in_progress"));
            if (msg) json_object_set_new(added, "content", json_array());
            else json_object_set_new(added, "arguments", json_string(""));
            bool ok = msg ? open_message(r, out, (int)i) &&
                                text_delta(r, out, (int)i,
                                           json_string_value(json_object_get(
                                               json_array_get(json_object_get(item, "content"), 0), "text")),
                                           json_string_length(json_object_get(
                                               json_array_get(json_object_get(item, "content"), 0), "text")))
                          : event(r, out, "response.output_item.added",
                                  json_pack("{s:i, s:O}", "output_index", (int)i, "item", added));
            json_decref(added);
            if (!ok) {
                json_decref(resp);
                return false;
            }
        }
        if (!close_item(r, out, (int)i, item)) {
            json_decref(resp);
            return false;
        }
    }
    return event(r, out, strcmp(status, "completed") ? "response.incomplete" : "response.completed",
                 with_response(resp));
}
