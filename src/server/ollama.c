/* inferx server: Ollama's API, for the tools that speak it (Open WebUI,
 * editors' Ollama mode, the `ollama` client libraries).
 *
 *   GET  /api/version, /api/tags, /api/ps     about the one served model
 *   POST /api/show                            its details, template, model_info
 *   POST /api/chat, /api/generate             generation, NDJSON streaming (the default) or not
 *
 * /api/chat and /api/generate are translated into the chat-completions (or,
 * with "raw": true, completions) request they mean -- `options` into our
 * sampling fields, `format` into response_format, `tools` as they are -- and
 * run as any generation job (generate.c), answered through an ixs_render:
 * one JSON object per line, `done: false` while text streams, and a last
 * line with `done: true`, `done_reason` and Ollama's counters and durations
 * (nanoseconds). Errors are Ollama's `{"error": "..."}` with the HTTP status.
 * Anything the server cannot honour (images, `suffix`, `template`, `context`,
 * `think`, mirostat / tfs / typical sampling) is a 400 that names it. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "inferx/gguf.h"
#include "server/server_int.h"

/* ---- about the model ----------------------------------------------------------- */

static void rfc3339(time_t t, char *buf, size_t size) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* "7.7M", "1.1B": Ollama's parameter_size. */
static void param_size(uint64_t n, char *buf, size_t size) {
    if (n >= 1000000000ull)
        snprintf(buf, size, "%.1fB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(buf, size, "%.1fM", (double)n / 1e6);
    else
        snprintf(buf, size, "%lluK", (unsigned long long)(n / 1000));
}

static json_t *details_json(ix_server *s) {
    const ix_model_hparams *hp = ix_model_get_hparams(s->model);
    char ps[32];
    param_size(ix_model_n_params(s->model), ps, sizeof ps);
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf", "family",
                     hp->arch_name, "families", hp->arch_name, "parameter_size", ps, "quantization_level",
                     ix_dtype_name(hp->weight_type));
}

/* An identifier of the served model: FNV-1a of its name, architecture and
 * size, as 64 hex digits (Ollama's digests are the file's sha256; clients
 * only compare them). */
static void digest(ix_server *s, char *buf, size_t size) {
    const ix_model_hparams *hp = ix_model_get_hparams(s->model);
    uint64_t n = ix_model_n_params(s->model);
    uint64_t h = ix__srv_fnv1a(IXS_FNV_BASIS, s->model_name, strlen(s->model_name));
    h = ix__srv_fnv1a(h, hp->arch_name, strlen(hp->arch_name));
    h = ix__srv_fnv1a(h, &n, sizeof n);
    snprintf(buf, size, "%016llx%016llx%016llx%016llx", (unsigned long long)h, (unsigned long long)~h,
             (unsigned long long)(h * 0x9E3779B97F4A7C15ull), (unsigned long long)(h ^ 0x5555555555555555ull));
}

/* One model's entry as /api/tags and /api/ps list it. */
static json_t *model_entry(ix_server *s, bool running) {
    char when[32], dg[80], name[300];
    rfc3339(s->created, when, sizeof when);
    digest(s, dg, sizeof dg);
    snprintf(name, sizeof name, "%s:latest", s->model_name);
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:o}", "name", name, "model", name, "size",
                          (json_int_t)ix_model_weight_bytes(s->model), "digest", dg, "details", details_json(s));
    if (!m) return NULL;
    if (running) {
        json_object_set_new(m, "expires_at", json_string("2318-01-01T00:00:00Z")); /* loaded for good */
        json_object_set_new(m, "size_vram", json_integer(0));
        json_object_set_new(m, "context_length", json_integer(s->n_ctx));
    } else {
        json_object_set_new(m, "modified_at", json_string(when));
    }
    return m;
}

/* The request's "model": the served name, with or without ":latest". */
static bool model_ok(ix_server *s, json_t *req, ixs_err *e) {
    json_t *m = json_object_get(req, "model");
    if (!json_is_string(m)) {
        IXS_BAD(e, "model", "'model' is required (one of /api/tags' names)");
        return false;
    }
    const char *v = json_string_value(m);
    size_t n = strlen(s->model_name);
    if (!strncmp(v, s->model_name, n) && (!v[n] || !strcmp(v + n, ":latest"))) return true;
    ix__srv_errf(e, 404, "invalid_request_error", "model", "model '%.200s' not found", v);
    return false;
}

static enum MHD_Result do_show(ixs_conn *cc, json_t *req) {
    ix_server *s = cc->s;
    ixs_err e;
    if (!model_ok(s, req, &e)) return ix__srv_reply_err(cc, &e);
    const ix_model_hparams *hp = ix_model_get_hparams(s->model);
    ix_str tmpl = {0};
    ix_gguf_get_str(ix_model_gguf(s->model), "tokenizer.chat_template", &tmpl, NULL);
    json_t *info = json_object();
    char key[96], when[32], mf[1024];
#define INFO(suffix, value)                                                                                            \
    (snprintf(key, sizeof key, "%s." suffix, hp->arch_name), json_object_set_new(info, key, json_integer(value)))
    json_object_set_new(info, "general.architecture", json_string(hp->arch_name));
    json_object_set_new(info, "general.parameter_count", json_integer((json_int_t)ix_model_n_params(s->model)));
    INFO("context_length", s->n_ctx);
    INFO("embedding_length", hp->n_embd);
    INFO("block_count", hp->n_layer);
    INFO("attention.head_count", hp->n_head);
    INFO("attention.head_count_kv", hp->n_head_kv);
    INFO("vocab_size", hp->n_vocab);
#undef INFO
    rfc3339(s->created, when, sizeof when);
    snprintf(mf, sizeof mf, "# served by inferx: %.500s\nFROM %.400s\n", s->chat.desc, s->model_name);
    json_t *caps = json_pack("[s]", "completion");
    if (caps && s->chat.tool_syntax != IXS_TOOLS_GENERIC) json_array_append_new(caps, json_string("tools"));
    json_t *root = json_pack("{s:s, s:s, s:o, s:o, s:o, s:s}", "modelfile", mf, "parameters", "", "details",
                             details_json(s), "model_info", info, "capabilities", caps, "modified_at", when);
    if (root) json_object_set_new(root, "template", ix__json_text(tmpl.ptr ? tmpl.ptr : "", tmpl.len));
    return ix__srv_reply_json(cc, root ? 200 : 500, root);
}

/* ---- requests -> chat / completions -------------------------------------------- */

/* options -> our fields: what maps, what changes nothing here (resources the
 * engine manages itself), and what is refused unless at its neutral value. */
static int map_options(ix_server *s, json_t *opts, json_t *out, ixs_err *e) {
    if (!opts || json_is_null(opts)) return 0;
    if (!json_is_object(opts)) return IXS_BAD(e, "options", "'options' must be an object");
    static const char *const direct[][2] = {
        {"temperature", "temperature"}, {"top_k", "top_k"}, {"top_p", "top_p"}, {"min_p", "min_p"},
        {"seed", "seed"}, {"stop", "stop"}, {"repeat_penalty", "repetition_penalty"},
        {"presence_penalty", "presence_penalty"}, {"frequency_penalty", "frequency_penalty"},
    };
    static const char *const resources[] = {"num_gpu", "main_gpu", "num_thread", "num_batch", "use_mmap",
                                            "use_mlock", "numa", "low_vram", "f16_kv", "vocab_only", "num_keep"};
    /* refused unless neutral: {name, neutral value} */
    static const struct {
        const char *name;
        double neutral;
    } neutral[] = {{"mirostat", 0}, {"tfs_z", 1}, {"typical_p", 1}, {"repeat_last_n", -1}};
    const char *k;
    json_t *v;
    json_object_foreach(opts, k, v) {
        char param[64];
        snprintf(param, sizeof param, "options.%.50s", k);
        bool done = false;
        for (size_t i = 0; i < IX_ARRAY_LEN(direct) && !done; i++)
            if (!strcmp(k, direct[i][0])) json_object_set(out, direct[i][1], v), done = true;
        for (size_t i = 0; i < IX_ARRAY_LEN(resources) && !done; i++) done = !strcmp(k, resources[i]);
        if (done) continue;
        if (!strcmp(k, "num_predict")) { /* -1: no limit, -2: until the context is full */
            if (!json_is_integer(v) || json_integer_value(v) < -2 || json_integer_value(v) == 0)
                return IXS_BAD(e, param, "'%s' must be a positive integer, -1 or -2", param);
            if (json_integer_value(v) > 0) json_object_set(out, "max_tokens", v);
            continue;
        }
        if (!strcmp(k, "num_ctx")) {
            if (!json_is_integer(v) || json_integer_value(v) <= 0)
                return IXS_BAD(e, param, "'%s' must be a positive integer", param);
            if (json_integer_value(v) > s->n_ctx)
                return IXS_BAD(e, param, "'%s' is %lld, above this server's context of %d tokens", param,
                               (long long)json_integer_value(v), (int)s->n_ctx);
            continue;
        }
        for (size_t i = 0; i < IX_ARRAY_LEN(neutral) && !done; i++) {
            if (strcmp(k, neutral[i].name)) continue;
            if (!json_is_number(v)) return IXS_BAD(e, param, "'%s' must be a number", param);
            if (json_number_value(v) != neutral[i].neutral && !(neutral[i].neutral == -1 && json_number_value(v) == 0))
                return IXS_BAD(e, param, "'%s' is not supported (only %g, its neutral value)", param,
                               neutral[i].neutral);
            done = true;
        }
        if (!done) return IXS_BAD(e, param, "unknown option '%s'", k);
    }
    return 0;
}

/* format: "json" or a JSON Schema -> response_format. */
static int map_format(json_t *fmt, json_t *out, ixs_err *e) {
    if (!fmt || json_is_null(fmt) || (json_is_string(fmt) && !*json_string_value(fmt))) return 0;
    if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "json")) {
        json_object_set_new(out, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (json_is_object(fmt)) {
        json_object_set_new(out, "response_format", json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema",
                                                              "json_schema", "name", "format", "schema", fmt));
        return 0;
    }
    return IXS_BAD(e, "format", "'format' must be \"json\" or a JSON Schema object");
}

/* Fields both generation endpoints share. */
static int common_fields(ix_server *s, json_t *req, json_t *out, bool *stream, ixs_err *e) {
    json_t *st = json_object_get(req, "stream");
    if (st && !json_is_boolean(st)) return IXS_BAD(e, "stream", "'stream' must be a boolean");
    *stream = !st || json_is_true(st); /* Ollama streams unless told not to */
    json_object_set_new(out, "stream", json_boolean(*stream));
    if (*stream) json_object_set_new(out, "stream_options", json_pack("{s:b}", "include_usage", 1));
    json_t *think = json_object_get(req, "think");
    if (think && !json_is_false(think) && !json_is_null(think))
        return IXS_BAD(e, "think", "'think' is not supported (this model has no thinking mode)");
    json_t *ka = json_object_get(req, "keep_alive"); /* the model stays loaded for the server's life */
    if (ka && !json_is_string(ka) && !json_is_number(ka) && !json_is_null(ka))
        return IXS_BAD(e, "keep_alive", "'keep_alive' must be a duration string or a number");
    if (map_options(s, json_object_get(req, "options"), out, e)) return -1;
    static const char *const session[] = {"session_id", "session_ttl"}; /* checked by the chat parser */
    for (size_t i = 0; i < IX_ARRAY_LEN(session); i++) {
        json_t *v = json_object_get(req, session[i]);
        if (v) json_object_set(out, session[i], v);
    }
    return map_format(json_object_get(req, "format"), out, e);
}

static int refuse(json_t *req, const char *const *fields, size_t n, ixs_err *e) {
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(req, fields[i]);
        if (!v || json_is_null(v) || (json_is_array(v) && !json_array_size(v)) ||
            (json_is_string(v) && !*json_string_value(v)))
            continue;
        return IXS_BAD(e, fields[i], "'%s' is not supported by this server", fields[i]);
    }
    return 0;
}

static int unknown_fields(json_t *req, const char *const *known, size_t n, ixs_err *e) {
    const char *k;
    json_t *v;
    json_object_foreach(req, k, v) {
        size_t i = 0;
        while (i < n && strcmp(k, known[i])) i++;
        if (i == n) return IXS_BAD(e, k, "unknown field '%s'", k);
    }
    return 0;
}

/* Ollama's messages -> chat messages: images refused; assistant tool_calls
 * ({function: {name, arguments: object}}) get ids and JSON-text arguments;
 * a tool message answers the oldest call not answered yet. */
static int map_messages(json_t *msgs, json_t *out, ixs_err *e) {
    if (!json_is_array(msgs)) return IXS_BAD(e, "messages", "'messages' must be an array");
    json_t *res = json_array();
    json_object_set_new(out, "messages", res);
    size_t i, n_calls = 0, n_answered = 0;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) return IXS_BAD(e, "messages", "messages[%zu] must be an object", i);
        json_t *img = json_object_get(m, "images");
        if (img && !json_is_null(img) && (!json_is_array(img) || json_array_size(img)))
            return IXS_BAD(e, "messages", "messages[%zu]: images are not supported (a text-only model)", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content"); /* absent: "" (a new node, owned by c) */
        json_t *c = json_pack("{s:O, s:o}", "role", json_object_get(m, "role"), "content",
                              content ? json_incref(content) : json_string(""));
        if (!c) return IXS_BAD(e, "messages", "messages[%zu] needs a 'role'", i);
        json_t *calls = json_object_get(m, "tool_calls");
        if (role && !strcmp(role, "assistant") && json_is_array(calls) && json_array_size(calls)) {
            json_t *oc = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(calls, k, call) {
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_object_get(fn, "arguments");
                char *text = args ? json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
                char id[32];
                snprintf(id, sizeof id, "call_%zu", n_calls++);
                json_array_append_new(oc, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function",
                                                    "function", "name", json_object_get(fn, "name"), "arguments",
                                                    text ? text : "{}"));
                free(text);
            }
            json_object_set_new(c, "tool_calls", oc);
        }
        if (role && !strcmp(role, "tool")) {
            char id[32];
            snprintf(id, sizeof id, "call_%zu", n_answered < n_calls ? n_answered++ : n_calls);
            json_object_set_new(c, "tool_call_id", json_string(id));
        }
        json_array_append_new(res, c);
    }
    return 0;
}

/* ---- the answer: NDJSON ------------------------------------------------------------ */

typedef struct oll {
    ix_server *s;
    char id[64];
    char name[300];
    bool chat;      /* /api/chat (message.content) or /api/generate (response) */
    json_t *tools;  /* chat-shaped tools when the answer is parsed for calls (held, not streamed) */
    char created[32];
} oll;

static json_t *line_base(oll *o) {
    char when[32];
    rfc3339(time(NULL), when, sizeof when);
    return json_pack("{s:s, s:s}", "model", o->name, "created_at", when);
}

static void set_text(oll *o, json_t *obj, const char *text, size_t len) {
    if (o->chat)
        json_object_set_new(obj, "message", json_pack("{s:s, s:o}", "role", "assistant", "content",
                                                      ix__json_text(text, len)));
    else
        json_object_set_new(obj, "response", ix__json_text(text, len));
}

static bool put_line(ix_buf *out, json_t *obj /* stolen */) {
    char *t = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    bool ok = t && ix_buf_append(out, t, strlen(t)) == IX_OK && ix_buf_append(out, "\n", 1) == IX_OK;
    free(t);
    return ok;
}

/* The counters and durations of the done line (ns). */
static void finish_fields(json_t *obj, const ixs_gen_result *g) {
    const ix_timings *t = &g->timings;
    double eval_ms = t->total_ms - t->first_token_ms;
    json_object_set_new(obj, "done", json_true());
    json_object_set_new(obj, "done_reason", json_string(g->reason == IX_FINISH_LENGTH ? "length" : "stop"));
    json_object_set_new(obj, "total_duration", json_integer((json_int_t)llround(t->total_ms * 1e6)));
    json_object_set_new(obj, "load_duration", json_integer(0));
    json_object_set_new(obj, "prompt_eval_count", json_integer(g->usage.prompt_tokens));
    json_object_set_new(obj, "prompt_eval_duration", json_integer((json_int_t)llround(t->prefill_ms * 1e6)));
    json_object_set_new(obj, "eval_count", json_integer(g->usage.completion_tokens));
    json_object_set_new(obj, "eval_duration", json_integer((json_int_t)llround(eval_ms > 0 ? eval_ms * 1e6 : 0)));
}

/* Tool calls parsed from the whole answer, in Ollama's shape (arguments as
 * objects); *content the rest. NULL when there are none. */
static json_t *tool_calls(oll *o, const ixs_gen_result *g, ix_buf *content) {
    json_t *calls = NULL;
    if (!o->tools || g->reason == IX_FINISH_LENGTH ||
        ix__tools_parse_output(g->text, g->len, o->s->chat.tool_syntax, o->tools, &calls, content) != IX_OK ||
        !calls)
        return NULL;
    json_t *res = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const char *args = json_string_value(json_object_get(c, "arguments"));
        json_t *a = args ? json_loads(args, JSON_DECODE_ANY, NULL) : NULL;
        json_array_append_new(res, json_pack("{s:{s:O, s:o}}", "function", "name", json_object_get(c, "name"),
                                             "arguments", a ? a : json_object()));
    }
    json_decref(calls);
    return res;
}

static json_t *oll_whole(void *ctx, const ixs_gen_result *g) {
    oll *o = ctx;
    json_t *obj = line_base(o);
    if (!obj) return NULL;
    ix_buf content = {0};
    json_t *calls = tool_calls(o, g, &content);
    if (calls)
        set_text(o, obj, content.data ? content.data : "", content.len);
    else
        set_text(o, obj, g->text, g->len);
    if (calls) json_object_set_new(json_object_get(obj, "message"), "tool_calls", calls);
    ix_buf_free(&content);
    finish_fields(obj, g);
    return obj;
}

static bool oll_begin(void *ctx, ix_buf *out) {
    (void)ctx;
    (void)out;
    return true;
}

static bool oll_delta(void *ctx, ix_buf *out, const char *text, size_t len) {
    oll *o = ctx;
    if (o->tools) return true; /* held: calls are known only once the answer is whole */
    json_t *obj = line_base(o);
    if (!obj) return false;
    set_text(o, obj, text, len);
    json_object_set_new(obj, "done", json_false());
    return put_line(out, obj);
}

static bool oll_end(void *ctx, ix_buf *out, const ixs_gen_result *g) {
    oll *o = ctx;
    if (g->reason == IX_FINISH_ERROR)
        return put_line(out, json_pack("{s:s}", "error", g->error ? g->error : "generation failed"));
    if (o->tools) { /* the held answer: its text, then its calls, as lines of their own */
        ix_buf content = {0};
        json_t *calls = tool_calls(o, g, &content);
        const char *text = calls ? (content.data ? content.data : "") : g->text;
        size_t len = calls ? content.len : g->len;
        bool ok = true;
        if (len) {
            json_t *obj = line_base(o);
            set_text(o, obj, text, len);
            if (obj) json_object_set_new(obj, "done", json_false());
            ok = put_line(out, obj);
        }
        ix_buf_free(&content);
        if (calls) {
            json_t *obj = line_base(o);
            set_text(o, obj, "", 0);
            if (obj) json_object_set_new(json_object_get(obj, "message"), "tool_calls", calls);
            else json_decref(calls);
            if (obj) json_object_set_new(obj, "done", json_false());
            ok = put_line(out, obj) && ok;
        }
        if (!ok) return false;
    }
    json_t *obj = line_base(o);
    if (!obj) return false;
    set_text(o, obj, "", 0);
    finish_fields(obj, g);
    return put_line(out, obj);
}

static void oll_free(void *ctx) {
    oll *o = ctx;
    if (!o) return;
    json_decref(o->tools);
    ix_free(o);
}

/* Chat's field names in errors -> Ollama's. */
static void oll_map_param(ixs_err *e) {
    static const char *const map[][2] = {
        {"max_tokens", "options.num_predict"}, {"repetition_penalty", "options.repeat_penalty"},
        {"temperature", "options.temperature"}, {"top_p", "options.top_p"}, {"top_k", "options.top_k"},
        {"min_p", "options.min_p"}, {"seed", "options.seed"}, {"stop", "options.stop"},
        {"response_format", "format"},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(map); i++) {
        size_t n = strlen(map[i][0]);
        if (!strncmp(e->param, map[i][0], n) && (!e->param[n] || e->param[n] == '.')) {
            char rest[64];
            snprintf(rest, sizeof rest, "%s", e->param + n);
            snprintf(e->param, sizeof e->param, "%s%s", map[i][1], rest);
            return;
        }
    }
}

/* A request with nothing to generate loads the model (Ollama's way of
 * warming it up): it is loaded already. */
static enum MHD_Result load_answer(ixs_conn *cc, bool chat) {
    oll o = {.s = cc->s, .chat = chat};
    snprintf(o.name, sizeof o.name, "%s:latest", cc->s->model_name);
    json_t *obj = line_base(&o);
    if (obj) set_text(&o, obj, "", 0);
    if (obj) json_object_set_new(obj, "done", json_true());
    if (obj) json_object_set_new(obj, "done_reason", json_string("load"));
    return ix__srv_reply_json(cc, obj ? 200 : 500, obj);
}

static enum MHD_Result generation(ixs_conn *cc, json_t *req, bool chat) {
    ix_server *s = cc->s;
    ixs_err e;
    static const char *const k_chat[] = {"model", "messages", "tools", "format", "options", "stream",
                                         "keep_alive", "think", "session_id", "session_ttl"};
    static const char *const k_gen[] = {"model", "prompt", "suffix", "system", "template", "context", "raw",
                                        "format", "options", "stream", "images", "keep_alive", "think",
                                        "session_id", "session_ttl"};
    static const char *const no_gen[] = {"suffix", "template", "context", "images"};
    json_t *out = json_object();
    oll *o = ix_calloc(1, sizeof *o);
    bool stream = true, is_chat = true;
    if (!out || !o) goto oom;
    if (!model_ok(s, req, &e)) goto bad;
    if (chat ? unknown_fields(req, k_chat, IX_ARRAY_LEN(k_chat), &e)
             : unknown_fields(req, k_gen, IX_ARRAY_LEN(k_gen), &e) || refuse(req, no_gen, IX_ARRAY_LEN(no_gen), &e))
        goto bad;
    if (common_fields(s, req, out, &stream, &e)) goto bad;
    if (chat) {
        json_t *msgs = json_object_get(req, "messages");
        if (!msgs || (json_is_array(msgs) && !json_array_size(msgs))) {
            oll_free(o);
            json_decref(out);
            return load_answer(cc, true);
        }
        if (map_messages(msgs, out, &e)) goto bad;
        json_t *tools = json_object_get(req, "tools");
        if (tools && !json_is_null(tools) && json_array_size(tools)) {
            json_object_set(out, "tools", tools);
            o->tools = json_incref(tools);
        }
    } else {
        json_t *prompt = json_object_get(req, "prompt"), *sys = json_object_get(req, "system");
        json_t *raw = json_object_get(req, "raw");
        if (prompt && !json_is_string(prompt)) {
            IXS_BAD(&e, "prompt", "'prompt' must be a string");
            goto bad;
        }
        if (sys && !json_is_null(sys) && !json_is_string(sys)) {
            IXS_BAD(&e, "system", "'system' must be a string");
            goto bad;
        }
        if (raw && !json_is_boolean(raw)) {
            IXS_BAD(&e, "raw", "'raw' must be a boolean");
            goto bad;
        }
        if (!prompt || !*json_string_value(prompt)) {
            oll_free(o);
            json_decref(out);
            return load_answer(cc, false);
        }
        if (json_is_true(raw)) { /* the prompt as it is, no template */
            if (sys && json_is_string(sys) && *json_string_value(sys)) {
                IXS_BAD(&e, "system", "'system' has no place in a raw prompt");
                goto bad;
            }
            is_chat = false;
            json_object_set(out, "prompt", prompt);
        } else {
            json_t *msgs = json_array();
            if (sys && json_is_string(sys) && *json_string_value(sys))
                json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", sys));
            json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", prompt));
            json_object_set_new(out, "messages", msgs);
        }
    }
    o->s = s;
    o->chat = chat;
    snprintf(o->name, sizeof o->name, "%s:latest", s->model_name);
    ix__srv_new_id(s, "ollama-", o->id, sizeof o->id);
    const ixs_render rnd = {o, o->id, "application/x-ndjson", oll_whole, oll_begin, oll_delta, oll_end,
                            oll_map_param, oll_free};
    enum MHD_Result ret = ix__srv_generate_as(cc, is_chat, out, &rnd);
    json_decref(out);
    return ret;
bad:
    oll_free(o);
    json_decref(out);
    return ix__srv_reply_err(cc, &e);
oom:
    oll_free(o);
    json_decref(out);
    return ix__srv_reply_json(cc, 500, NULL);
}

enum MHD_Result ix__srv_ollama(ixs_conn *cc, ixs_ollama_ep ep, json_t *req) {
    ix_server *s = cc->s;
    switch (ep) {
    case IXS_OLLAMA_VERSION:
        return ix__srv_reply_json(cc, 200, json_pack("{s:s}", "version", IX_OLLAMA_VERSION));
    case IXS_OLLAMA_TAGS:
    case IXS_OLLAMA_PS: {
        json_t *m = model_entry(s, ep == IXS_OLLAMA_PS);
        json_t *root = m ? json_pack("{s:[o]}", "models", m) : NULL;
        return ix__srv_reply_json(cc, root ? 200 : 500, root);
    }
    case IXS_OLLAMA_SHOW:
        return do_show(cc, req);
    case IXS_OLLAMA_CHAT:
        return generation(cc, req, true);
    case IXS_OLLAMA_GENERATE:
        return generation(cc, req, false);
    }
    return ix__srv_reply_json(cc, 500, NULL);
}
