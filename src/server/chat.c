/* inferx server: chat messages and the fixed chat renderers. Chat prompts
 * come from the model's own Jinja template (chat_template.c); the formats
 * here serve when a model has none, or one that does not parse, and when
 * --chat-template names one. They are recognised by their markers:
 *
 *   ChatML   <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
 *   Llama-3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> ...
 *   Llama-2  [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
 *   Mistral  v1: [INST] sys\n\nuser [/INST]answer</s>[INST] ...
 *            v3: [INST] sys\n\nuser[/INST] answer</s>[INST] ...
 *   Gemma    <start_of_turn>user\nsys\n\nuser<end_of_turn>\n
 *            <start_of_turn>model\nanswer<end_of_turn>\n ... <start_of_turn>model\n
 *   Phi-3    <|role|>\ncontent<|end|>\n ... <|assistant|>\n
 *   Zephyr   <|role|>\ncontent</s>\n ... <|assistant|>\n
 *   plain    System: ...\nUser: ...\nAssistant: ...\nAssistant:   (no or unknown template)
 *
 * Content is trimmed where the family's template trims it (Llama-3, Llama-2,
 * Gemma). Llama-2, Mistral and Gemma have no system turn: the system
 * messages before a user message are put in front of it (Mistral's own v3
 * templates put them before the last user message instead; the first keeps
 * a conversation's prefix the same from turn to turn, so the prefix cache
 * serves it), and system messages that no user message follows become a
 * user turn of their own.
 *
 * Past tool calls follow an assistant turn's content in the family's syntax,
 * tool results go where the family's own templates put them, and a tool list
 * joins the first system message (ix__chat_with_tools).
 *
 * The prompt is rendered as text pieces, each either plain text (template
 * text or message content) or one of the format's markers; everything but
 * the markers is handed on as data, so that tokenizing (chat_template.c)
 * lets only markers become special tokens (when the vocabulary has them as
 * such; "[INST]" is plain text in Llama-2's): a user who types "<|im_end|>"
 * gets those characters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_int.h"

ixs_chat_format ix__chat_detect(const char *tmpl, size_t len) {
#define HAS(lit) (memmem(tmpl, len, lit, sizeof(lit) - 1) != NULL)
    if (!tmpl) return IXS_CHAT_PLAIN;
    if (HAS("<|im_start|>")) return IXS_CHAT_CHATML;
    if (HAS("<|start_header_id|>")) return IXS_CHAT_LLAMA3;
    if (HAS("<start_of_turn>")) return IXS_CHAT_GEMMA;
    if (HAS("<|user|>") && HAS("<|end|>")) return IXS_CHAT_PHI3;
    if (HAS("<|user|>")) return IXS_CHAT_ZEPHYR;
    if (HAS("[INST]")) {
        if (HAS("<<SYS>>")) return IXS_CHAT_LLAMA2;
        /* v1 templates write ' [/INST]', v3 ones '[/INST]' right after the content. */
        return HAS(" [/INST]") ? IXS_CHAT_MISTRAL_V1 : IXS_CHAT_MISTRAL_V3;
    }
    return IXS_CHAT_PLAIN;
#undef HAS
}

/* By ixs_chat_format, then the alias "mistral" (v3), then NULL. */
static const char *const k_format_names[IXS_CHAT_N_FORMATS + 2] = {
    "plain", "chatml", "llama3", "llama2", "phi3", "zephyr", "mistral-v1", "mistral-v3", "gemma", "mistral", NULL};

const char *ix__chat_format_name(ixs_chat_format f) {
    return (unsigned)f < IXS_CHAT_N_FORMATS ? k_format_names[f] : "plain";
}

const char *const *ix_server_chat_builtins(void) { return k_format_names; }

static const char *const k_roles[] = {"system", "developer", "user", "assistant", "tool"};

/* Array-of-parts content: text parts joined by newlines, in place. */
static int flatten_parts(json_t *m, json_t *content, const char *param, ixs_err *e) {
    ix_buf b = {0};
    size_t k;
    json_t *part;
    json_array_foreach(content, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text)) {
            ix_buf_free(&b);
            return IXS_BAD(e, param, "%s.content[%zu] must be {\"type\":\"text\",\"text\":...} (only text is supported)",
                           param, k);
        }
        if ((k && ix_buf_append(&b, "\n", 1) != IX_OK) ||
            ix_buf_append(&b, json_string_value(text), json_string_length(text)) != IX_OK) {
            ix_buf_free(&b);
            return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
        }
    }
    json_object_set_new(m, "content", json_stringn(b.data ? b.data : "", b.len));
    ix_buf_free(&b);
    return 0;
}

/* An assistant message's tool_calls: [{id, type: "function", function:
 * {name, arguments}}], arguments a string (the API's form: JSON text) or an
 * object. */
static int check_tool_calls(json_t *calls, const char *param, ixs_err *e) {
    char p[160];
    snprintf(p, sizeof p, "%s.tool_calls", param);
    if (!json_is_array(calls)) return IXS_BAD(e, p, "%s must be an array", p);
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        snprintf(p, sizeof p, "%s.tool_calls[%zu]", param, k);
        if (!json_is_object(c)) return IXS_BAD(e, p, "%s must be an object", p);
        json_t *id = json_object_get(c, "id"), *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
        if (id && !json_is_string(id)) return IXS_BAD(e, p, "%s.id must be a string", p);
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
            return IXS_BAD(e, p, "%s.type must be \"function\"", p);
        if (!json_is_object(fn)) return IXS_BAD(e, p, "%s.function must be an object", p);
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_string(name) || !json_string_length(name))
            return IXS_BAD(e, p, "%s.function.name must be a non-empty string", p);
        if (!json_is_string(args) && !json_is_object(args))
            return IXS_BAD(e, p, "%s.function.arguments must be a string of JSON (or an object)", p);
    }
    return 0;
}

int ix__chat_validate(json_t *messages, ixs_err *e) {
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return IXS_BAD(e, "messages", "'messages' must be a non-empty array");
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        char param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return IXS_BAD(e, param, "%s must be an object", param);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) return IXS_BAD(e, param, "%s.role must be a string", param);
        const char *r = json_string_value(role);
        bool known = false;
        for (size_t k = 0; k < IX_ARRAY_LEN(k_roles); k++) known |= !strcmp(r, k_roles[k]);
        if (!known)
            return IXS_BAD(e, param, "%s.role '%.32s' is not one of system, developer, user, assistant, tool",
                           param, r);
        json_t *name = json_object_get(m, "name");
        if (name && !json_is_string(name)) return IXS_BAD(e, param, "%s.name must be a string", param);
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            if (strcmp(r, "assistant")) return IXS_BAD(e, param, "%s.tool_calls is only allowed on assistant messages", param);
            if (check_tool_calls(calls, param, e)) return -1;
        } else {
            calls = NULL;
        }
        if (!strcmp(r, "tool") && !json_is_string(json_object_get(m, "tool_call_id")))
            return IXS_BAD(e, param, "%s.tool_call_id must be a string (the id of the call it answers)", param);
        json_t *content = json_object_get(m, "content");
        if (json_is_string(content)) continue;
        if (!content || json_is_null(content)) {
            if (strcmp(r, "assistant")) return IXS_BAD(e, param, "%s.content is required", param);
            /* A tool-call turn keeps its null content (templates test it);
             * an empty answer is an empty string. */
            if (!calls || !json_array_size(calls)) json_object_set_new(m, "content", json_string(""));
            else if (!content) json_object_set_new(m, "content", json_null());
            continue;
        }
        if (!json_is_array(content))
            return IXS_BAD(e, param, "%s.content must be a string or an array of text parts", param);
        if (flatten_parts(m, content, param, e)) return -1;
    }
    return 0;
}

/* ---- tools in the fixed renderers --------------------------------------------- */

const char *ix__tool_syntax_name(ixs_tool_syntax s) {
    static const char *const k_names[IXS_TOOLS_N_SYNTAXES] = {"generic-json", "llama3-json", "hermes", "mistral"};
    return (unsigned)s < IX_ARRAY_LEN(k_names) ? k_names[s] : "generic-json";
}

/* How a tool call is asked for, in the syntax the parser of answers expects. */
static const char *const k_call_howto[IXS_TOOLS_N_SYNTAXES] = {
    [IXS_TOOLS_GENERIC] = "To call a tool, answer only with a JSON object {\"name\": <tool name>, \"arguments\": "
                          "<object of arguments>}, one line per call.",
    [IXS_TOOLS_LLAMA3] = "To call a tool, answer only with a JSON object {\"name\": <tool name>, \"parameters\": "
                         "<object of arguments>}.",
    [IXS_TOOLS_HERMES] = "To call a tool, answer with <tool_call>\n{\"name\": <tool name>, \"arguments\": <object "
                         "of arguments>}\n</tool_call> for each call.",
    [IXS_TOOLS_MISTRAL] = "To call tools, answer with [TOOL_CALLS] and a JSON list of {\"name\": <tool name>, "
                          "\"arguments\": <object of arguments>}.",
};

json_t *ix__chat_with_tools(json_t *messages, json_t *tools, ixs_tool_syntax ts) {
    if (!json_array_size(tools)) return json_incref(messages);
    ix_buf b = {0};
    bool ok = ix_buf_printf(&b, "You can call these tools, each described by a JSON object:\n") == IX_OK;
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        char *j = json_dumps(tool, JSON_ENCODE_ANY);
        ok = ok && j && ix_buf_printf(&b, "%s\n", j) == IX_OK;
        free(j);
    }
    ok = ok && ix_buf_printf(&b, "%s", k_call_howto[(unsigned)ts < IXS_TOOLS_N_SYNTAXES ? ts : 0]) == IX_OK;
    json_t *out = ok ? json_array() : NULL, *first = json_array_get(messages, 0);
    const char *r0 = json_string_value(json_object_get(first, "role"));
    bool sys0 = r0 && (!strcmp(r0, "system") || !strcmp(r0, "developer"));
    if (out && sys0) { /* the first system message, with the tools after its text */
        json_t *m = json_copy(first);
        json_t *c = json_object_get(first, "content");
        ix_buf t = {0};
        ok = m && ix_buf_append(&t, json_string_value(c) ? json_string_value(c) : "", json_string_length(c)) == IX_OK &&
             ix_buf_append(&t, "\n\n", 2) == IX_OK && ix_buf_append(&t, b.data, b.len) == IX_OK;
        if (ok) json_object_set_new(m, "content", json_stringn(t.data, t.len));
        ok = ok && json_array_append_new(out, m) == 0;
        if (!ok) json_decref(m);
        ix_buf_free(&t);
    } else if (out) {
        ok = json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "system", "content", b.data, b.len)) == 0;
    }
    for (size_t k = sys0 ? 1 : 0; ok && k < json_array_size(messages); k++)
        ok = json_array_append(out, json_array_get(messages, k)) == 0;
    ix_buf_free(&b);
    if (!ok) json_decref(out);
    return ok ? out : NULL;
}

/* ---- rendering ------------------------------------------------------------ */

typedef struct piece {
    size_t off, len; /* in the prompt text */
    bool marker;     /* a template marker: a special token if the vocabulary has it */
} piece;

typedef struct prompt {
    ix_buf text; /* the whole prompt */
    piece *p;    /* (n) its pieces in order; adjacent plain ones merged */
    size_t n, cap;
    bool oom;
} prompt;

static void put(prompt *o, const char *s, size_t n, bool marker) {
    if (o->oom || n == 0) return;
    bool extend = !marker && o->n && !o->p[o->n - 1].marker;
    if (!extend && o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 32;
        piece *p = ix_realloc(o->p, cap * sizeof *p);
        if (!p) {
            o->oom = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    size_t off = o->text.len;
    if (ix_buf_append(&o->text, s, n) != IX_OK) {
        o->oom = true;
        return;
    }
    if (extend)
        o->p[o->n - 1].len += n;
    else
        o->p[o->n++] = (piece){off, n, marker};
}

static void text(prompt *o, const char *s) { put(o, s, strlen(s), false); }
static void mark(prompt *o, const char *s) { put(o, s, strlen(s), true); }

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void content(prompt *o, json_t *m, bool trim) {
    json_t *c = json_object_get(m, "content");
    const char *s = json_string_value(c);
    size_t n = json_string_length(c);
    if (!s) return;
    if (trim) {
        while (n && is_space(*s)) s++, n--;
        while (n && is_space(s[n - 1])) n--;
    }
    put(o, s, n, false);
}

/* The JSON text of v (Python's json.dumps separators, key order kept). */
static void json_text(prompt *o, json_t *v) {
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    if (!s) o->oom = true;
    else text(o, s);
    free(s);
}

/* One call as {"name": ..., "<args_key>": {...}}; arguments given as a JSON
 * string are written as the object they spell (as text when they do not). */
static void call_json(prompt *o, json_t *call, const char *args_key) {
    json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
    json_t *parsed = json_is_string(args) ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL) : NULL;
    json_t *obj = json_pack("{s:O, s:O}", "name", json_object_get(fn, "name"), args_key, parsed ? parsed : args);
    if (!obj) o->oom = true;
    else json_text(o, obj);
    json_decref(obj);
    json_decref(parsed);
}

/* An assistant turn's content, then its tool calls in the model's syntax. */
static void answer_body(prompt *o, json_t *m, bool trim, ixs_tool_syntax ts) {
    content(o, m, trim);
    json_t *calls = json_object_get(m, "tool_calls");
    size_t n = json_array_size(calls);
    if (!n) return;
    const char *c = json_string_value(json_object_get(m, "content"));
    if (c && *c) text(o, "\n");
    if (ts == IXS_TOOLS_MISTRAL) {
        mark(o, "[TOOL_CALLS]");
        text(o, " [");
    }
    for (size_t k = 0; k < n; k++) {
        json_t *call = json_array_get(calls, k);
        switch (ts) {
        case IXS_TOOLS_HERMES:
            if (k) text(o, "\n");
            mark(o, "<tool_call>");
            text(o, "\n");
            call_json(o, call, "arguments");
            text(o, "\n");
            mark(o, "</tool_call>");
            break;
        case IXS_TOOLS_MISTRAL:
            if (k) text(o, ", ");
            call_json(o, call, "arguments");
            break;
        case IXS_TOOLS_LLAMA3:
        case IXS_TOOLS_GENERIC:
        default:
            if (k) text(o, "\n");
            call_json(o, call, ts == IXS_TOOLS_LLAMA3 ? "parameters" : "arguments");
            break;
        }
    }
    if (ts == IXS_TOOLS_MISTRAL) text(o, "]");
}

/* The role as the templates name it: developer is system. */
static const char *role_of(json_t *m) {
    const char *r = json_string_value(json_object_get(m, "role"));
    return strcmp(r, "developer") ? r : "system";
}

static const char *plain_role(const char *role) {
    if (!strcmp(role, "user")) return "User";
    if (!strcmp(role, "assistant")) return "Assistant";
    if (!strcmp(role, "tool")) return "Tool";
    return "System";
}

/* messages[from .. from + n), joined by blank lines. */
static void systems(prompt *o, json_t *messages, size_t from, size_t n) {
    for (size_t k = 0; k < n; k++) {
        if (k) text(o, "\n\n");
        content(o, json_array_get(messages, from + k), false);
    }
}

/* Families without a system turn: one user turn, with the system messages
 * messages[sys0 .. sys0 + n_sys) in front; user may be NULL (system only). */
static void user_turn(ixs_chat_format f, prompt *o, json_t *messages, size_t sys0, size_t n_sys, json_t *user) {
    switch (f) {
    case IXS_CHAT_LLAMA2:
        mark(o, "[INST]");
        text(o, " ");
        if (n_sys && user) {
            text(o, "<<SYS>>\n");
            systems(o, messages, sys0, n_sys);
            text(o, "\n<</SYS>>\n\n");
        } else {
            systems(o, messages, sys0, n_sys);
        }
        if (user) content(o, user, true);
        text(o, " ");
        mark(o, "[/INST]");
        break;
    case IXS_CHAT_MISTRAL_V1:
    case IXS_CHAT_MISTRAL_V3:
        mark(o, "[INST]");
        text(o, " ");
        systems(o, messages, sys0, n_sys);
        if (n_sys && user) text(o, "\n\n");
        if (user) content(o, user, false);
        if (f == IXS_CHAT_MISTRAL_V1) text(o, " ");
        mark(o, "[/INST]");
        break;
    case IXS_CHAT_GEMMA:
        mark(o, "<start_of_turn>");
        text(o, "user\n");
        systems(o, messages, sys0, n_sys);
        if (n_sys && user) text(o, "\n\n");
        if (user) content(o, user, true);
        mark(o, "<end_of_turn>");
        text(o, "\n");
        break;
    default:
        break;
    }
}

static void answer_turn(ixs_chat_format f, ixs_tool_syntax ts, prompt *o, json_t *m) {
    switch (f) {
    case IXS_CHAT_LLAMA2:
        text(o, " ");
        answer_body(o, m, true, ts);
        text(o, " ");
        mark(o, "</s>");
        mark(o, "<s>");
        break;
    case IXS_CHAT_MISTRAL_V1:
    case IXS_CHAT_MISTRAL_V3:
        if (f == IXS_CHAT_MISTRAL_V3 && !(ts == IXS_TOOLS_MISTRAL && json_array_size(json_object_get(m, "tool_calls"))))
            text(o, " ");
        answer_body(o, m, false, ts);
        mark(o, "</s>");
        break;
    case IXS_CHAT_GEMMA:
        mark(o, "<start_of_turn>");
        text(o, "model\n");
        answer_body(o, m, true, ts);
        mark(o, "<end_of_turn>");
        text(o, "\n");
        break;
    default:
        break;
    }
}

static void render_folded(ixs_chat_format f, ixs_tool_syntax ts, json_t *messages, prompt *o) {
    size_t i, sys0 = 0, n_sys = 0; /* pending system messages: always a contiguous run */
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = role_of(m);
        if (!strcmp(role, "system")) {
            if (!n_sys) sys0 = i;
            n_sys++;
        } else if (!strcmp(role, "assistant")) {
            if (n_sys) user_turn(f, o, messages, sys0, n_sys, NULL);
            n_sys = 0;
            answer_turn(f, ts, o, m);
        } else if (!strcmp(role, "tool") && ts == IXS_TOOLS_MISTRAL) {
            if (n_sys) user_turn(f, o, messages, sys0, n_sys, NULL);
            n_sys = 0;
            mark(o, "[TOOL_RESULTS]");
            text(o, " ");
            content(o, m, false);
            mark(o, "[/TOOL_RESULTS]");
        } else { /* user, tool */
            user_turn(f, o, messages, sys0, n_sys, m);
            n_sys = 0;
        }
    }
    if (n_sys) user_turn(f, o, messages, sys0, n_sys, NULL);
    if (f == IXS_CHAT_GEMMA) {
        mark(o, "<start_of_turn>");
        text(o, "model\n");
    }
}

/* Families with a turn per message. */
static void render_turns(ixs_chat_format f, ixs_tool_syntax ts, json_t *messages, prompt *o) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = role_of(m);
        bool tool = !strcmp(role, "tool");
        if (f == IXS_CHAT_CHATML) {
            mark(o, "<|im_start|>");
            text(o, role);
            text(o, "\n");
            if (tool && ts == IXS_TOOLS_HERMES) {
                mark(o, "<tool_response>");
                text(o, "\n");
                content(o, m, false);
                text(o, "\n");
                mark(o, "</tool_response>");
            } else {
                answer_body(o, m, false, ts);
            }
            mark(o, "<|im_end|>");
            text(o, "\n");
        } else if (f == IXS_CHAT_LLAMA3) {
            mark(o, "<|start_header_id|>");
            text(o, tool ? "ipython" : role); /* Llama 3.1's role for tool output */
            mark(o, "<|end_header_id|>");
            text(o, "\n\n");
            answer_body(o, m, true, ts);
            mark(o, "<|eot_id|>");
        } else { /* Phi-3, Zephyr */
            char tag[32];
            snprintf(tag, sizeof tag, "<|%s|>", role);
            mark(o, tag);
            text(o, "\n");
            answer_body(o, m, false, ts);
            mark(o, f == IXS_CHAT_PHI3 ? "<|end|>" : "</s>");
            text(o, "\n");
        }
    }
    if (f == IXS_CHAT_CHATML) {
        mark(o, "<|im_start|>");
        text(o, "assistant\n");
    } else if (f == IXS_CHAT_LLAMA3) {
        mark(o, "<|start_header_id|>");
        text(o, "assistant");
        mark(o, "<|end_header_id|>");
        text(o, "\n\n");
    } else {
        mark(o, "<|assistant|>");
        text(o, "\n");
    }
}

static void render(ixs_chat_format f, ixs_tool_syntax ts, json_t *messages, prompt *o) {
    size_t i;
    json_t *m;
    switch (f) {
    case IXS_CHAT_LLAMA2:
    case IXS_CHAT_MISTRAL_V1:
    case IXS_CHAT_MISTRAL_V3:
    case IXS_CHAT_GEMMA:
        render_folded(f, ts, messages, o);
        return;
    case IXS_CHAT_CHATML:
    case IXS_CHAT_LLAMA3:
    case IXS_CHAT_PHI3:
    case IXS_CHAT_ZEPHYR:
        render_turns(f, ts, messages, o);
        return;
    default: /* plain: nothing in it is a marker */
        json_array_foreach(messages, i, m) {
            text(o, plain_role(role_of(m)));
            text(o, ": ");
            answer_body(o, m, false, ts);
            text(o, "\n");
        }
        text(o, "Assistant:");
        return;
    }
}

ix_status ix__chat_render_fixed(ixs_chat_format f, ixs_tool_syntax ts, json_t *messages, json_t *tools,
                                ix_template_result *out) {
    memset(out, 0, sizeof *out);
    json_t *msgs = ix__chat_with_tools(messages, tools, ts);
    if (!msgs) return IX_ERR_NOMEM;
    prompt o;
    memset(&o, 0, sizeof o);
    render(f, ts, msgs, &o);
    json_decref(msgs);
    /* Everything but the markers is data: only a marker can be a special token. */
    size_t n_data = 0;
    for (size_t i = 0; i < o.n; i++) n_data += !o.p[i].marker;
    ix_template_span *data = o.oom ? NULL : ix_malloc((n_data ? n_data : 1) * sizeof *data);
    if (!data || ix_buf_append(&o.text, "", 0) != IX_OK) {
        ix_free(data);
        ix_buf_free(&o.text);
        ix_free(o.p);
        return IX_ERR_NOMEM;
    }
    for (size_t i = 0; i < o.n; i++)
        if (!o.p[i].marker) data[out->n_data++] = (ix_template_span){o.p[i].off, o.p[i].len};
    out->text = o.text.data;
    out->len = o.text.len;
    out->data = data;
    ix_free(o.p);
    return IX_OK;
}
