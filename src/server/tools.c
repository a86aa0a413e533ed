/* inferx server: tool calling. What the chat endpoint needs beyond the
 * template (chat.c renders `tools` and past calls into the prompt):
 *   - the request's `tools`, `tool_choice` and `parallel_tool_calls`, checked
 *     (400 naming the field);
 *   - when tool_choice forces a call (`required`, or a named function), a
 *     GBNF grammar of the calls: each function's `parameters` schema compiled
 *     by the grammar module (compact: no whitespace inside the arguments;
 *     one optional space between the call object's tokens), its rules
 *     renamed apart, wrapped in the call
 *     object of the model's tool-call family (`arguments`, or Llama 3's
 *     `parameters`); one call, or a JSON array of calls when parallel calls
 *     are allowed (Mistral: always an array);
 *   - the answer's tool calls parsed back: the family's own syntax first
 *     (Hermes/Qwen `<tool_call>{...}</tool_call>`, Mistral `[TOOL_CALLS][...]`,
 *     Llama 3 `<|python_tag|>{...}` or a bare object), then the generic
 *     fallback (the whole answer is JSON call objects, or an array of them,
 *     possibly in a ``` fence). A call names one of the request's functions;
 *     anything else is content. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/grammar.h"
#include "server/server_int.h"

/* ---- the request ------------------------------------------------------------ */

static bool valid_fn_name(const char *n, size_t len) {
    if (len == 0 || len > 64) return false;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int check_tool(json_t *tool, size_t i, ixs_err *e) {
    char p[64];
    snprintf(p, sizeof p, "tools[%zu]", i);
    if (!json_is_object(tool)) return IXS_BAD(e, p, "'%s' must be an object", p);
    json_t *type = json_object_get(tool, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return IXS_BAD(e, p, "'%s.type' must be 'function' (the only tool type this server runs)", p);
    const char *key;
    json_t *v;
    json_object_foreach(tool, key, v) {
        if (strcmp(key, "type") && strcmp(key, "function"))
            return IXS_BAD(e, p, "'%s.%.64s' is not a field of a function tool", p, key);
    }
    json_t *fn = json_object_get(tool, "function");
    snprintf(p, sizeof p, "tools[%zu].function", i);
    if (!json_is_object(fn)) return IXS_BAD(e, p, "'%s' must be an object", p);
    json_object_foreach(fn, key, v) {
        if (!strcmp(key, "name")) {
            if (!json_is_string(v) || !valid_fn_name(json_string_value(v), json_string_length(v)))
                return IXS_BAD(e, p, "'%s.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -", p);
        } else if (!strcmp(key, "description")) {
            if (!json_is_string(v) && !json_is_null(v)) return IXS_BAD(e, p, "'%s.description' must be a string", p);
        } else if (!strcmp(key, "parameters")) {
            if (!json_is_object(v) && !json_is_null(v))
                return IXS_BAD(e, p, "'%s.parameters' must be a JSON Schema object", p);
        } else if (!strcmp(key, "strict")) {
            if (!json_is_boolean(v) && !json_is_null(v)) return IXS_BAD(e, p, "'%s.strict' must be a boolean", p);
        } else {
            return IXS_BAD(e, p, "'%s.%.64s' is not a field of a function", p, key);
        }
    }
    if (!json_object_get(fn, "name")) return IXS_BAD(e, p, "'%s.name' is required", p);
    return 0;
}

static const char *fn_name(json_t *tool) {
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

int ix__tools_parse_request(json_t *req, ixs_tools_req *out, ixs_err *e) {
    memset(out, 0, sizeof *out);
    out->parallel = true;
    json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return IXS_BAD(e, "tools", "'tools' must be an array of function tools");
        if (json_array_size(tools) > IXS_MAX_TOOLS) return IXS_BAD(e, "tools", "at most %d tools", IXS_MAX_TOOLS);
        size_t i, k;
        json_t *t;
        json_array_foreach(tools, i, t) {
            if (check_tool(t, i, e)) return -1;
            for (k = 0; k < i; k++)
                if (!strcmp(fn_name(json_array_get(tools, k)), fn_name(t)))
                    return IXS_BAD(e, "tools", "function '%s' is defined twice", fn_name(t));
        }
        if (json_array_size(tools)) out->tools = tools;
    }
    json_t *pt = json_object_get(req, "parallel_tool_calls");
    if (pt && !json_is_null(pt)) {
        if (!json_is_boolean(pt)) return IXS_BAD(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        out->parallel = json_is_true(pt);
    }
    json_t *tc = json_object_get(req, "tool_choice");
    out->choice = out->tools ? IXS_TOOL_CHOICE_AUTO : IXS_TOOL_CHOICE_NONE;
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *c = json_string_value(tc);
        if (!strcmp(c, "none")) out->choice = IXS_TOOL_CHOICE_NONE;
        else if (!strcmp(c, "auto")) out->choice = IXS_TOOL_CHOICE_AUTO;
        else if (!strcmp(c, "required")) out->choice = IXS_TOOL_CHOICE_REQUIRED;
        else return IXS_BAD(e, "tool_choice", "'tool_choice' is '%.64s'; it must be none, auto, required or "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}", c);
    } else if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type");
        const char *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") || !name)
            return IXS_BAD(e, "tool_choice", "'tool_choice' as an object must be "
                           "{\"type\": \"function\", \"function\": {\"name\": ...}}");
        out->choice = IXS_TOOL_CHOICE_NAMED;
        out->named = name;
    } else {
        return IXS_BAD(e, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (out->choice != IXS_TOOL_CHOICE_NONE && !out->tools)
        return IXS_BAD(e, "tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
    if (out->named) {
        size_t i;
        json_t *t;
        bool found = false;
        json_array_foreach(out->tools, i, t) found = found || !strcmp(fn_name(t), out->named);
        if (!found) return IXS_BAD(e, "tool_choice", "'tool_choice' names function '%.64s', which is not in 'tools'", out->named);
    }
    return 0;
}

/* ---- the forced-call grammar -------------------------------------------------- */

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Appends GBNF text with every rule name prefixed (names outside literals,
 * classes, repetition braces and comments). */
static ix_status append_renamed(ix_buf *out, const char *g, size_t n, const char *prefix) {
    ix_status s = IX_OK;
    for (size_t i = 0; i < n && s == IX_OK;) {
        char c = g[i];
        size_t j = i + 1;
        if (c == '"' || c == '[') { /* literal or class, escapes inside */
            char end = c == '"' ? '"' : ']';
            while (j < n && g[j] != end) j += g[j] == '\\' && j + 1 < n ? 2 : 1;
            if (j < n) j++;
        } else if (c == '{') {
            while (j < n && g[j] != '}') j++;
            if (j < n) j++;
        } else if (c == '#') {
            while (j < n && g[j] != '\n') j++;
        } else if (name_char(c)) {
            while (j < n && name_char(g[j])) j++;
            s = ix_buf_append(out, prefix, strlen(prefix));
        }
        if (s == IX_OK) s = ix_buf_append(out, g + i, j - i);
        i = j;
    }
    return s;
}

ix_status ix__tools_grammar(const ixs_tools_req *t, ixs_tool_syntax ts, ix_buf *out, ix_errbuf *err) {
    ix_buf schema = {0}, rules = {0};
    const char *key = ts == IXS_TOOLS_LLAMA3 ? "parameters" : "arguments";
    ix_status s = ix_buf_printf(out, "ws ::= | \" \"\ncall ::= ");
    size_t i;
    json_t *tool;
    int n_calls = 0;
    json_array_foreach(t->tools, i, tool) {
        const char *name = fn_name(tool);
        if (s != IX_OK) break;
        if (t->named && strcmp(name, t->named)) continue;
        json_t *fn = json_object_get(tool, "function");
        json_t *params = json_object_get(fn, "parameters");
        /* Arguments compact (as OpenAI sends them): no room for a model to
         * drift into whitespace; the call object itself allows one space. */
        unsigned flags = IX_GRAMMAR_SCHEMA_COMPACT |
                         (json_is_true(json_object_get(fn, "strict")) ? IX_GRAMMAR_SCHEMA_STRICT : 0);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        s = ix_buf_printf(out, "%scall-%zu", n_calls++ ? " | " : "", i);
        /* call-i ::= {"name": "NAME", "KEY": <parameters>} ; names are [A-Za-z0-9_-] */
        if (s == IX_OK)
            s = ix_buf_printf(&rules, "call-%zu ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"%s\\\"\" ws \",\" ws "
                                      "\"\\\"%s\\\"\" ws \":\" ws ",
                              i, name, key);
        if (s != IX_OK) break;
        if (!params || json_is_null(params)) { /* no parameters: an empty object */
            s = ix_buf_printf(&rules, "\"{\" ws \"}\" ws \"}\"\n");
            continue;
        }
        char *text = json_dumps(params, JSON_COMPACT);
        if (!text) {
            s = IX_ERR_NOMEM;
            break;
        }
        ix_buf_clear(&schema);
        s = ix_json_schema_to_gbnf(text, strlen(text), flags, &schema, err);
        free(text);
        if (s != IX_OK) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            s = ix_errf(err, s, "function '%s' parameters: %s", name, msg);
            break;
        }
        s = ix_buf_printf(&rules, "%sroot ws \"}\"\n", prefix);
        if (s == IX_OK) s = append_renamed(&rules, schema.data, schema.len, prefix);
        if (s == IX_OK) s = ix_buf_printf(&rules, "\n");
    }
    bool many = t->parallel && !t->named;
    if (s == IX_OK) s = ix_buf_printf(out, "\n");
    if (s == IX_OK && rules.len) s = ix_buf_append(out, rules.data, rules.len);
    if (s == IX_OK) {
        if (ts == IXS_TOOLS_MISTRAL || many)
            s = ix_buf_printf(out, "root ::= ws \"[\" ws call %s ws \"]\"\n", many ? "(ws \",\" ws call)*" : "");
        else
            s = ix_buf_printf(out, "root ::= ws call\n");
    }
    if (s == IX_ERR_NOMEM) ix_errf(err, s, "out of memory");
    ix_buf_free(&schema);
    ix_buf_free(&rules);
    return s;
}

ix_status ix__tools_grammar_or(const ixs_tools_req *t, ixs_tool_syntax ts, const ix_constraint *doc, ix_buf *out,
                               ix_errbuf *err) {
    ix_buf calls = {0}, text = {0};
    ix_status s = ix__tools_grammar(t, ts, &calls, err);
    if (s == IX_OK) {
        if (doc->kind == IX_CONSTRAINT_GRAMMAR) {
            s = ix_buf_append(&text, doc->text, doc->len);
        } else {
            static const char any_object[] = "{\"type\":\"object\",\"additionalProperties\":true}";
            const char *schema = doc->kind == IX_CONSTRAINT_JSON_SCHEMA ? doc->text : any_object;
            size_t len = doc->kind == IX_CONSTRAINT_JSON_SCHEMA ? doc->len : sizeof any_object - 1;
            s = ix_json_schema_to_gbnf(schema, len, doc->flags, &text, err);
        }
    }
    if (s == IX_OK) s = ix_buf_printf(out, "root ::= c-root | d-root\n");
    if (s == IX_OK) s = append_renamed(out, calls.data, calls.len, "c-");
    if (s == IX_OK) s = ix_buf_printf(out, "\n");
    if (s == IX_OK) s = append_renamed(out, text.data ? text.data : "", text.len, "d-");
    if (s == IX_ERR_NOMEM) ix_errf(err, s, "out of memory");
    ix_buf_free(&calls);
    ix_buf_free(&text);
    return s;
}

/* ---- parsing the answer ---------------------------------------------------------- */

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *t, size_t n, size_t i) {
    while (i < n && is_ws(t[i])) i++;
    return i;
}

static bool starts(const char *t, size_t n, size_t i, const char *lit) {
    size_t l = strlen(lit);
    return n - i >= l && !memcmp(t + i, lit, l);
}

static bool known_fn(json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) if (!strcmp(fn_name(t), name)) return true;
    return false;
}

/* One call object {"name", "arguments" | "parameters"} of a known function
 * appended to calls as {"name", "arguments": JSON text}. */
static bool add_call(json_t *o, json_t *tools, json_t *calls) {
    if (!json_is_object(o)) return false;
    json_t *fn = json_object_get(o, "function"); /* {"function": {"name", "arguments"}} also seen */
    if (json_is_object(fn) && !json_object_get(o, "name")) o = fn;
    const char *name = json_string_value(json_object_get(o, "name"));
    if (!name || !known_fn(tools, name)) return false;
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    char *text;
    if (!args || json_is_null(args)) text = strdup("{}");
    else if (json_is_string(args)) text = strdup(json_string_value(args)); /* already a JSON text */
    else if (json_is_object(args)) text = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    else return false;
    if (!text) return false;
    json_t *c = json_pack("{s:s, s:s}", "name", name, "arguments", text);
    free(text);
    return c && json_array_append_new(calls, c) == 0;
}

/* One JSON value at t[*i]: a call object or an array of them. */
static bool take_value(const char *t, size_t n, size_t *i, json_t *tools, json_t *calls) {
    json_error_t je;
    json_t *v = json_loadb(t + *i, n - *i, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (!v) return false;
    *i += (size_t)je.position;
    bool ok = true;
    if (json_is_array(v)) {
        size_t k;
        json_t *o;
        ok = json_array_size(v) > 0;
        json_array_foreach(v, k, o) ok = ok && add_call(o, tools, calls);
    } else {
        ok = add_call(v, tools, calls);
    }
    json_decref(v);
    return ok;
}

/* The whole text is calls: JSON objects or arrays separated by whitespace,
 * ',' or ';', maybe in a ``` fence. */
static bool parse_bare(const char *t, size_t n, json_t *tools, json_t *calls) {
    size_t i = skip_ws(t, n, 0);
    bool fence = starts(t, n, i, "```");
    if (fence) {
        i += 3;
        while (i < n && t[i] != '\n' && !is_ws(t[i]) && t[i] != '{' && t[i] != '[') i++; /* ```json */
    }
    size_t before = json_array_size(calls);
    for (;;) {
        i = skip_ws(t, n, i);
        if (i == n || (fence && starts(t, n, i, "```"))) break;
        if (json_array_size(calls) > before && (t[i] == ',' || t[i] == ';')) i = skip_ws(t, n, i + 1);
        if (!take_value(t, n, &i, tools, calls)) return false;
    }
    if (fence) {
        if (!starts(t, n, i, "```")) return false;
        i = skip_ws(t, n, i + 3);
    }
    return i == n && json_array_size(calls) > before;
}

/* Hermes / Qwen: content with <tool_call>{...}</tool_call> blocks. */
static bool parse_hermes(const char *t, size_t n, json_t *tools, json_t *calls, ix_buf *content) {
    static const char open[] = "<tool_call>", close[] = "</tool_call>";
    size_t i = 0;
    bool any = false;
    while (i < n) {
        const char *p = memmem(t + i, n - i, open, sizeof open - 1);
        size_t at = p ? (size_t)(p - t) : n;
        if (ix_buf_append(content, t + i, at - i) != IX_OK) return false;
        if (!p) break;
        i = skip_ws(t, n, at + sizeof open - 1);
        if (!take_value(t, n, &i, tools, calls)) return false;
        i = skip_ws(t, n, i);
        if (starts(t, n, i, close)) i += sizeof close - 1;
        else if (i != n) return false;
        any = true;
    }
    return any;
}

/* Mistral: content, then [TOOL_CALLS] and a JSON array (or object). */
static bool parse_mistral(const char *t, size_t n, json_t *tools, json_t *calls, ix_buf *content) {
    static const char mark[] = "[TOOL_CALLS]";
    const char *p = memmem(t, n, mark, sizeof mark - 1);
    if (!p) return false;
    size_t at = (size_t)(p - t);
    if (ix_buf_append(content, t, at) != IX_OK) return false;
    return parse_bare(t + at + sizeof mark - 1, n - at - (sizeof mark - 1), tools, calls);
}

/* Llama 3.x: the whole answer is the call ({"name", "parameters"}), maybe
 * after <|python_tag|>; several separated by ';'. */
static bool parse_llama3(const char *t, size_t n, json_t *tools, json_t *calls) {
    static const char tag[] = "<|python_tag|>";
    size_t i = skip_ws(t, n, 0);
    if (starts(t, n, i, tag)) i += sizeof tag - 1;
    return parse_bare(t + i, n - i, tools, calls);
}

ix_status ix__tools_parse_output(const char *text, size_t len, ixs_tool_syntax ts, json_t *tools, json_t **calls_out,
                                 ix_buf *content) {
    *calls_out = NULL;
    json_t *calls = json_array();
    if (!calls) return IX_ERR_NOMEM;
    ix_buf_clear(content);
    bool ok = false;
    if (tools && len) {
        switch (ts) {
        case IXS_TOOLS_HERMES: ok = parse_hermes(text, len, tools, calls, content); break;
        case IXS_TOOLS_MISTRAL: ok = parse_mistral(text, len, tools, calls, content); break;
        case IXS_TOOLS_LLAMA3: ok = parse_llama3(text, len, tools, calls); break;
        case IXS_TOOLS_GENERIC:
        case IXS_TOOLS_N_SYNTAXES: break;
        }
        if (!ok) { /* the generic fallback: the whole answer is calls */
            json_array_clear(calls);
            ix_buf_clear(content);
            ok = parse_bare(text, len, tools, calls);
        }
    }
    if (!ok) {
        json_decref(calls);
        ix_buf_clear(content);
        return ix_buf_append(content, text, len);
    }
    /* Content that is only whitespace is no content. */
    if (skip_ws(content->data ? content->data : "", content->len, 0) == content->len) ix_buf_clear(content);
    *calls_out = calls;
    return IX_OK;
}
