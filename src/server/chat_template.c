/* inferx server: which chat template a model gets, rendering it, and turning
 * the rendered prompt into tokens.
 *
 * The template is, in order: --chat-template (a built-in name picks a fixed
 * renderer of chat.c; anything else is Jinja source and must parse), the
 * GGUF's tokenizer.chat_template run by the template module (src/template),
 * or -- when the file has none, or one that does not parse -- the fixed
 * renderer its markers name (chat.c's ix__chat_detect), the reason logged.
 * A template that parsed and then fails on a request is the request's error
 * (400 with the template's message): a fixed renderer would give a prompt the
 * model was not trained on.
 *
 * Both paths give a text and the ranges of it that came from the client
 * (message content, tools, names...). Tokenizing splits the text at special
 * tokens, as Hugging Face and llama.cpp do with a rendered template, except
 * that a special token lying entirely inside one client range stays text: a
 * user who types "<|im_end|>" cannot close a turn, while a marker the
 * template builds from data (Phi's '<|' + role + '|>') is still one token. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "inferx/gguf.h"
#include "server/server_int.h"

/* ---- names and detection ------------------------------------------------------ */

ixs_chat_format ix__chat_format_from_name(const char *name) {
    if (!name) return IXS_CHAT_N_FORMATS;
    if (!strcmp(name, "mistral")) return IXS_CHAT_MISTRAL_V3; /* the alias ix_server_chat_builtins ends with */
    for (int f = 0; f < IXS_CHAT_N_FORMATS; f++)
        if (!strcmp(name, ix__chat_format_name((ixs_chat_format)f))) return (ixs_chat_format)f;
    return IXS_CHAT_N_FORMATS;
}

/* The tool-call syntax a fixed renderer writes and asks for. */
static ixs_tool_syntax fixed_tool_syntax(ixs_chat_format f) {
    switch (f) {
    case IXS_CHAT_CHATML: return IXS_TOOLS_HERMES;
    case IXS_CHAT_LLAMA3: return IXS_TOOLS_LLAMA3;
    case IXS_CHAT_MISTRAL_V3: return IXS_TOOLS_MISTRAL;
    default: return IXS_TOOLS_GENERIC;
    }
}

ixs_tool_syntax ix__chat_detect_tools(const char *tmpl, size_t len) {
#define HAS(lit) (memmem(tmpl, len, lit, sizeof(lit) - 1) != NULL)
    if (!tmpl) return IXS_TOOLS_GENERIC;
    if (HAS("<tool_call>")) return IXS_TOOLS_HERMES;
    if (HAS("[TOOL_CALLS]")) return IXS_TOOLS_MISTRAL;
    /* Llama 3.1+: the python tag, or tool output under the ipython role. */
    if (HAS("<|start_header_id|>") && (HAS("<|python_tag|>") || HAS("ipython"))) return IXS_TOOLS_LLAMA3;
    return IXS_TOOLS_GENERIC;
#undef HAS
}

/* ---- set-up --------------------------------------------------------------------- */

static char *piece_dup(const ix_tokenizer *t, ix_token id) {
    if (id == IX_TOKEN_NONE) return NULL;
    ix_str p = ix_tokenizer_piece(t, id);
    char *s = ix_malloc(p.len + 1);
    if (s) {
        memcpy(s, p.ptr, p.len);
        s[p.len] = '\0';
    }
    return s;
}

/* Whether the template wants tool call arguments as objects: render a call
 * with object arguments; a template that prints them as they come (DeepSeek's
 * `+ tool['function']['arguments']`) fails on an object or shows Python's
 * repr of it, and then gets the JSON string the API sends. */
static bool probe_args_as_object(const ix_template *t) {
    static const char k_probe[] =
        "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
        "[{\"id\": \"call00001\", \"type\": \"function\", \"function\": {\"name\": \"probe_fn\", \"arguments\": "
        "%s}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call00001\", \"content\": \"r\"}]";
    char src[512];
    snprintf(src, sizeof src, k_probe, "{\"probe_key\": \"probe_value\"}");
    json_t *m = json_loads(src, 0, NULL);
    ix_template_vars v = {.messages = m, .bos_token = "", .eos_token = ""};
    ix_template_result r;
    ix_status st = m ? ix_template_render(t, &v, &r, NULL) : IX_ERR_NOMEM;
    bool obj = true;
    if (st == IX_OK) {
        obj = !memmem(r.text, r.len, "{'probe_key'", 11);
    } else {
        /* Fails with an object: does it take the string? */
        json_decref(m);
        snprintf(src, sizeof src, k_probe, "\"{\\\"probe_key\\\": \\\"probe_value\\\"}\"");
        m = json_loads(src, 0, NULL);
        v.messages = m;
        ix_template_result_free(&r);
        if (m && ix_template_render(t, &v, &r, NULL) == IX_OK) obj = false;
    }
    ix_template_result_free(&r);
    json_decref(m);
    return obj;
}

void ix__chat_init_format(ixs_chat *c, ixs_chat_format f) {
    memset(c, 0, sizeof *c);
    c->format = (unsigned)f < IXS_CHAT_N_FORMATS ? f : IXS_CHAT_PLAIN;
    c->tool_syntax = fixed_tool_syntax(c->format);
    c->args_as_object = true;
    snprintf(c->desc, sizeof c->desc, "built-in %s", ix__chat_format_name(c->format));
}

/* The first line of a template, for the description (cut at a character). */
static void first_line(const char *src, size_t len, char *out, size_t size) {
    size_t n = 0;
    while (n < len && src[n] != '\n' && n + 4 < size) n++;
    while (n < len && n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
    snprintf(out, size, "%.*s%s", (int)n, src, n < len ? "..." : "");
}

static ix_status use_jinja(ixs_chat *c, const ix_tokenizer *t, const char *src, size_t len, const char *from,
                           ix_errbuf *err) {
    ix_status st = ix_template_create(&c->tmpl, src, len, NULL, err);
    if (st != IX_OK) return st;
    c->format = ix__chat_detect(src, len);
    c->tool_syntax = ix__chat_detect_tools(src, len);
    c->mentions_tools = ix_template_mentions(c->tmpl, "tools");
    c->args_as_object = probe_args_as_object(c->tmpl);
    c->bos = t ? piece_dup(t, ix_tokenizer_bos(t)) : NULL;
    c->eos = t ? piece_dup(t, ix_tokenizer_eos(t)) : NULL;
    char line[80];
    first_line(src, len, line, sizeof line);
    snprintf(c->desc, sizeof c->desc, "jinja from %s (%zu bytes, like %s, tool calls %s%s): %s", from, len,
             ix__chat_format_name(c->format), ix__tool_syntax_name(c->tool_syntax),
             c->mentions_tools ? "" : ", tools put in the system message", line);
    return IX_OK;
}

ix_status ix__chat_init(ixs_chat *c, const ix_tokenizer *t, const char *gguf_tmpl, size_t gguf_len,
                        const char *override, ix_errbuf *err) {
    ix__chat_init_format(c, IXS_CHAT_PLAIN);
    if (override) {
        ixs_chat_format f = ix__chat_format_from_name(override);
        if (f != IXS_CHAT_N_FORMATS) {
            ix__chat_init_format(c, f);
            snprintf(c->desc, sizeof c->desc, "built-in %s (--chat-template)", ix__chat_format_name(f));
            return IX_OK;
        }
        ix_errbuf e = {{0}};
        ix_status st = use_jinja(c, t, override, strlen(override), "--chat-template", &e);
        if (st != IX_OK) {
            ix__chat_free(c);
            return ix_errf(err, st, "--chat-template: %.400s", e.msg);
        }
        return IX_OK;
    }
    if (!gguf_tmpl) {
        snprintf(c->desc, sizeof c->desc, "built-in plain (the model has no tokenizer.chat_template)");
        return IX_OK;
    }
    ix_errbuf e = {{0}};
    ix_status st = use_jinja(c, t, gguf_tmpl, gguf_len, "the GGUF", &e);
    if (st == IX_OK) return IX_OK;
    if (st == IX_ERR_NOMEM) return ix_errf(err, st, "out of memory");
    ix__chat_free(c);
    ix__chat_init_format(c, ix__chat_detect(gguf_tmpl, gguf_len));
    snprintf(c->desc, sizeof c->desc, "built-in %s, the fallback: the GGUF's template (%zu bytes) cannot be used: %.300s",
             ix__chat_format_name(c->format), gguf_len, e.msg);
    return IX_OK;
}

void ix__chat_free(ixs_chat *c) {
    if (!c) return;
    ix_template_destroy(c->tmpl);
    ix_free(c->bos);
    ix_free(c->eos);
    c->tmpl = NULL;
    c->bos = c->eos = NULL;
}

/* ---- rendering ------------------------------------------------------------------ */

/* messages as the template wants them, into *out (a new reference): tool
 * call arguments sent as JSON text become objects when it reads them as
 * objects (in a copy: the request is left as it came). */
static ix_status template_messages(const ixs_chat *c, json_t *messages, json_t **out, ix_errbuf *err) {
    json_t *copy = NULL;
    for (size_t i = 0; c->args_as_object && i < json_array_size(messages); i++) {
        json_t *calls = json_object_get(json_array_get(messages, i), "tool_calls");
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_t *args = json_object_get(json_object_get(json_array_get(calls, k), "function"), "arguments");
            if (!json_is_string(args)) continue;
            if (!copy && !(copy = json_deep_copy(messages))) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
            json_t *obj = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY, NULL);
            if (!json_is_object(obj)) {
                json_decref(obj);
                json_decref(copy);
                return ix_errf(err, IX_ERR_INVALID,
                               "messages[%zu].tool_calls[%zu].function.arguments is not a JSON object", i, k);
            }
            json_t *calls_copy = json_object_get(json_array_get(copy, i), "tool_calls");
            json_object_set_new(json_object_get(json_array_get(calls_copy, k), "function"), "arguments", obj);
        }
    }
    *out = copy ? copy : json_incref(messages);
    return IX_OK;
}

static ix_status render_text(const ixs_chat *c, json_t *messages, json_t *tools, json_t *kwargs,
                             ix_template_result *r, ix_errbuf *err) {
    if (tools && !json_array_size(tools)) tools = NULL;
    memset(r, 0, sizeof *r);
    if (!c->tmpl) {
        ix_status st = ix__chat_render_fixed(c->format, c->tool_syntax, messages, tools, r);
        return st == IX_OK ? IX_OK : ix_errf(err, st, "out of memory");
    }
    json_t *msgs = NULL;
    ix_status st = template_messages(c, messages, &msgs, err);
    if (st != IX_OK) return st;
    if (tools && !c->mentions_tools) { /* the template cannot show them: say it in the system message */
        json_t *with = ix__chat_with_tools(msgs, tools, c->tool_syntax);
        json_decref(msgs);
        if (!(msgs = with)) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    ix_template_vars v = {
        .messages = msgs,
        .tools = c->mentions_tools ? tools : NULL,
        .add_generation_prompt = true,
        .bos_token = c->bos,
        .eos_token = c->eos,
        .extra = kwargs,
        .now_unix_s = c->now_unix_s > 0 ? c->now_unix_s : (int64_t)time(NULL),
    };
    st = ix_template_render(c->tmpl, &v, r, err);
    json_decref(msgs);
    return st;
}

ix_status ix__chat_render_text(const ixs_chat *c, json_t *messages, json_t *tools, json_t *kwargs, ix_buf *out,
                               ix_errbuf *err) {
    ix_template_result r;
    ix_status st = render_text(c, messages, tools, kwargs, &r, err);
    if (st == IX_OK && r.len && ix_buf_append(out, r.text, r.len) != IX_OK)
        st = ix_errf(err, IX_ERR_NOMEM, "out of memory");
    ix_template_result_free(&r);
    return st;
}

int ix__chat_kwargs(json_t *req, json_t **out, ixs_err *e) {
    json_t *kw = json_object_get(req, "chat_template_kwargs");
    *out = json_is_null(kw) ? NULL : kw;
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return IXS_BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object of template variables");
    return 0;
}

/* Tokens of a rendered prompt: special tokens wherever the vocabulary has
 * them, except inside one client range; the text between two of them
 * encoded in one piece (minus the whitespace a special token swallows). */
static ix_status tokenize(const ix_tokenizer *t, const ix_template_result *r, ix_token_vec *out, ix_errbuf *err) {
    ix_status st = IX_OK;
    ix_token bos = ix_tokenizer_bos(t);
    /* BOS as the vocabulary says, unless the template wrote it (llama.cpp's rule). */
    if (ix_tokenizer_add_bos(t) && bos != IX_TOKEN_NONE &&
        !(ix_tokenizer_special_at(t, r->text, r->len, 0) == bos &&
          !ix_template_is_data(r, 0, ix_tokenizer_piece(t, bos).len)))
        st = ix_token_vec_push(out, bos);
    size_t start = 0;              /* of the text not yet encoded */
    ix_token prev = IX_TOKEN_NONE; /* the special token before it */
    for (size_t i = 0; st == IX_OK && i <= r->len;) {
        ix_token id = i < r->len ? ix_tokenizer_special_at(t, r->text, r->len, i) : IX_TOKEN_NONE;
        size_t n = id != IX_TOKEN_NONE ? ix_tokenizer_piece(t, id).len : 0;
        if (i < r->len && (id == IX_TOKEN_NONE || ix_template_is_data(r, i, n))) {
            unsigned char b = (unsigned char)r->text[i]; /* on to the next character */
            i += b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
            if (i > r->len) i = r->len;
            continue;
        }
        if (i > start) {
            ix_str s = ix_tokenizer_trim_between(t, prev, r->text + start, i - start, id);
            if (s.len) st = ix_tokenizer_encode(t, s.ptr, s.len, 0, out, err);
        }
        if (i == r->len) break;
        if (st == IX_OK) st = ix_token_vec_push(out, id);
        i += n;
        start = i;
        prev = id;
    }
    return st;
}

ix_status ix__chat_render_kw(const ixs_chat *c, const ix_tokenizer *t, json_t *messages, json_t *tools,
                             json_t *kwargs, ix_token_vec *out, ix_errbuf *err) {
    ix_template_result r;
    size_t n0 = out->n;
    ix_status st = render_text(c, messages, tools, kwargs, &r, err);
    if (st == IX_OK) st = tokenize(t, &r, out, err);
    ix_template_result_free(&r);
    if (st != IX_OK) out->n = n0;
    if (st == IX_ERR_NOMEM) ix_errf(err, st, "out of memory");
    return st;
}

ix_status ix__chat_render(const ixs_chat *c, const ix_tokenizer *t, json_t *messages, json_t *tools,
                          ix_token_vec *out, ix_errbuf *err) {
    return ix__chat_render_kw(c, t, messages, tools, NULL, out, err);
}

int ix__chat_error(ixs_err *e, ix_status st, const char *msg) {
    if (st == IX_ERR_NOMEM) return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
    return IXS_BAD(e, "messages", "messages: %s", msg && *msg ? msg : ix_status_str(st));
}

/* ---- the public side: inferx run and info ------------------------------------- */

static ix_status chat_for_file(ixs_chat *c, const ix_gguf *g, const ix_tokenizer *t, const char *chat_template,
                               ix_errbuf *err) {
    ix_str tmpl = {NULL, 0};
    if (g) ix_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL);
    return ix__chat_init(c, t, tmpl.ptr, tmpl.len, chat_template, err);
}

ix_status ix_server_chat_describe(const ix_gguf *g, const ix_tokenizer *t, const char *chat_template, ix_buf *out,
                                  ix_errbuf *err) {
    ixs_chat c;
    ix_status st = chat_for_file(&c, g, t, chat_template, err);
    if (st != IX_OK) return st;
    st = ix_buf_append(out, c.desc, strlen(c.desc));
    ix__chat_free(&c);
    return st == IX_OK ? IX_OK : ix_errf(err, st, "out of memory");
}

ix_status ix_server_chat_tokens(const ix_gguf *g, const ix_tokenizer *t, const char *chat_template,
                                const char *messages_json, ix_token_vec *out, ix_errbuf *err) {
    if (!t || !messages_json) return ix_errf(err, IX_ERR_INVALID, "no tokenizer or no messages");
    json_error_t je;
    json_t *msgs = json_loads(messages_json, 0, &je);
    if (!msgs) return ix_errf(err, IX_ERR_INVALID, "messages: %s", je.text);
    ixs_err e;
    if (ix__chat_validate(msgs, &e)) {
        json_decref(msgs);
        return ix_errf(err, e.http == 500 ? IX_ERR_NOMEM : IX_ERR_INVALID, "%s", e.msg);
    }
    ixs_chat c;
    ix_status st = chat_for_file(&c, g, t, chat_template, err);
    if (st == IX_OK) st = ix__chat_render(&c, t, msgs, NULL, out, err);
    ix__chat_free(&c);
    json_decref(msgs);
    return st;
}
