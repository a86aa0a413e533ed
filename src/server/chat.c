/* inferx server: chat prompts. A GGUF's tokenizer.chat_template is a Jinja
 * program; rather than interpret Jinja we recognise the few formats nearly
 * every model uses by their marker tokens and render those in C:
 *
 *   ChatML   <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
 *   Llama-3  <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> ...
 *   Llama-2  [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
 *   Phi-3    <|role|>\ncontent<|end|>\n ... <|assistant|>\n
 *   Zephyr   <|role|>\ncontent</s>\n ... <|assistant|>\n
 *   plain    System: ...\nUser: ...\nAssistant: ...\nAssistant:   (no or unknown template)
 *
 * Template text is tokenized with special tokens recognised; message content
 * is tokenized separately without, so a user cannot inject control tokens.
 * BOS comes from the vocabulary's add_bos_token on the first piece. */
#include <stdio.h>
#include <string.h>

#include "server/server_int.h"

ixs_chat_format ix__chat_detect(const char *tmpl, size_t len) {
#define HAS(lit) (memmem(tmpl, len, lit, sizeof(lit) - 1) != NULL)
    if (!tmpl) return IXS_CHAT_PLAIN;
    if (HAS("<|im_start|>")) return IXS_CHAT_CHATML;
    if (HAS("<|start_header_id|>")) return IXS_CHAT_LLAMA3;
    if (HAS("<|user|>") && HAS("<|end|>")) return IXS_CHAT_PHI3;
    if (HAS("<|user|>")) return IXS_CHAT_ZEPHYR;
    if (HAS("[INST]")) return IXS_CHAT_LLAMA2;
    return IXS_CHAT_PLAIN;
#undef HAS
}

const char *ix__chat_format_name(ixs_chat_format f) {
    static const char *const k_names[] = {"plain", "chatml", "llama3", "llama2", "phi3", "zephyr"};
    return (unsigned)f < IX_ARRAY_LEN(k_names) ? k_names[f] : "plain";
}

static const char *const k_roles[] = {"system", "developer", "user", "assistant", "tool"};

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
        bool known = false;
        for (size_t k = 0; k < IX_ARRAY_LEN(k_roles); k++) known |= !strcmp(json_string_value(role), k_roles[k]);
        if (!known)
            return IXS_BAD(e, param, "%s.role '%.32s' is not one of system, developer, user, assistant, tool",
                           param, json_string_value(role));
        json_t *content = json_object_get(m, "content");
        if (json_is_string(content)) continue;
        if (!content || json_is_null(content)) {
            if (strcmp(json_string_value(role), "assistant"))
                return IXS_BAD(e, param, "%s.content is required", param);
            json_object_set_new(m, "content", json_string(""));
            continue;
        }
        if (!json_is_array(content))
            return IXS_BAD(e, param, "%s.content must be a string or an array of text parts", param);
        /* Array of parts: text parts joined by newlines. */
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
    }
    return 0;
}

typedef struct render {
    const ix_tokenizer *t;
    ix_token_vec *out;
    ix_errbuf *err;
    ix_buf tmpl; /* template text not yet tokenized */
    bool first;
    ix_status st;
} render;

static void encode(render *r, const char *s, size_t n, unsigned flags) {
    if (r->st != IX_OK || n == 0) return;
    if (r->first) flags |= IX_TOK_ADD_SPECIAL;
    r->first = false;
    r->st = ix_tokenizer_encode(r->t, s, n, flags, r->out, r->err);
}

static void flush_tmpl(render *r) {
    encode(r, r->tmpl.data, r->tmpl.len, IX_TOK_PARSE_SPECIAL);
    ix_buf_clear(&r->tmpl);
}

static void tmpl(render *r, const char *s) {
    if (r->st == IX_OK && ix_buf_append(&r->tmpl, s, strlen(s)) != IX_OK) r->st = IX_ERR_NOMEM;
}

static void content(render *r, json_t *m) {
    json_t *c = json_object_get(m, "content");
    flush_tmpl(r);
    encode(r, json_string_value(c), json_string_length(c), 0);
}

static const char *role_of(json_t *m) { return json_string_value(json_object_get(m, "role")); }

static const char *plain_role(const char *role) {
    if (!strcmp(role, "user")) return "User";
    if (!strcmp(role, "assistant")) return "Assistant";
    if (!strcmp(role, "tool")) return "Tool";
    return "System";
}

ix_status ix__chat_render(ixs_chat_format f, const ix_tokenizer *t, json_t *messages, ix_token_vec *out,
                          ix_errbuf *err) {
    render r = {t, out, err, {0}, true, IX_OK};
    size_t i;
    json_t *m;
    if (f == IXS_CHAT_PLAIN) {
        /* One plain string: nothing in it is special. */
        ix_buf b = {0};
        json_array_foreach(messages, i, m) {
            json_t *c = json_object_get(m, "content");
            if (ix_buf_printf(&b, "%s: ", plain_role(role_of(m))) != IX_OK ||
                ix_buf_append(&b, json_string_value(c), json_string_length(c)) != IX_OK ||
                ix_buf_append(&b, "\n", 1) != IX_OK)
                r.st = IX_ERR_NOMEM;
        }
        if (ix_buf_append(&b, "Assistant:", 10) != IX_OK) r.st = IX_ERR_NOMEM;
        if (r.st == IX_OK) encode(&r, b.data, b.len, 0);
        ix_buf_free(&b);
        return r.st == IX_ERR_NOMEM ? ix_errf(err, IX_ERR_NOMEM, "out of memory") : r.st;
    }
    json_t *sys = NULL; /* Llama-2: folded into the next user turn */
    json_array_foreach(messages, i, m) {
        const char *role = role_of(m);
        if (!strcmp(role, "developer")) role = "system";
        switch (f) {
        case IXS_CHAT_CHATML:
            tmpl(&r, "<|im_start|>");
            tmpl(&r, role);
            tmpl(&r, "\n");
            content(&r, m);
            tmpl(&r, "<|im_end|>\n");
            break;
        case IXS_CHAT_LLAMA3:
            tmpl(&r, "<|start_header_id|>");
            tmpl(&r, role);
            tmpl(&r, "<|end_header_id|>\n\n");
            content(&r, m);
            tmpl(&r, "<|eot_id|>");
            break;
        case IXS_CHAT_PHI3:
        case IXS_CHAT_ZEPHYR:
            tmpl(&r, "<|");
            tmpl(&r, role);
            tmpl(&r, "|>\n");
            content(&r, m);
            tmpl(&r, f == IXS_CHAT_PHI3 ? "<|end|>\n" : "</s>\n");
            break;
        case IXS_CHAT_LLAMA2:
            if (!strcmp(role, "system")) {
                sys = m;
            } else if (!strcmp(role, "assistant")) {
                tmpl(&r, " ");
                content(&r, m);
                tmpl(&r, " </s><s>");
            } else {
                tmpl(&r, "[INST] ");
                if (sys) {
                    tmpl(&r, "<<SYS>>\n");
                    content(&r, sys);
                    tmpl(&r, "\n<</SYS>>\n\n");
                    sys = NULL;
                }
                content(&r, m);
                tmpl(&r, " [/INST]");
            }
            break;
        default:
            break;
        }
    }
    switch (f) {
    case IXS_CHAT_CHATML: tmpl(&r, "<|im_start|>assistant\n"); break;
    case IXS_CHAT_LLAMA3: tmpl(&r, "<|start_header_id|>assistant<|end_header_id|>\n\n"); break;
    case IXS_CHAT_PHI3:
    case IXS_CHAT_ZEPHYR: tmpl(&r, "<|assistant|>\n"); break;
    default: break;
    }
    flush_tmpl(&r);
    ix_buf_free(&r.tmpl);
    if (r.st == IX_ERR_NOMEM) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    return r.st;
}
