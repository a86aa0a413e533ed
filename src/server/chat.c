/* inferx server: chat prompts. A GGUF's tokenizer.chat_template is a Jinja
 * program; rather than interpret Jinja we recognise the few formats nearly
 * every model uses by their markers and render those in C:
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
 * The prompt is rendered as text pieces, each either plain text (template
 * text or message content) or one of the template's markers. Tokenization
 * does what Hugging Face and llama.cpp do with a rendered template -- split
 * at the special tokens (which may swallow the whitespace beside them, as
 * Phi-3's do), encode each stretch of text between them in one piece --
 * except that only the markers can become special tokens (when
 * the vocabulary has them as control or user-defined tokens; "[INST]" is
 * plain text in Llama-2's): message content is never searched for control
 * tokens, so a user who types "<|im_end|>" gets those characters. */
#include <stdio.h>
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

const char *ix__chat_format_name(ixs_chat_format f) {
    static const char *const k_names[IXS_CHAT_N_FORMATS] = {
        "plain", "chatml", "llama3", "llama2", "phi3", "zephyr", "mistral-v1", "mistral-v3", "gemma"};
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

static void answer_turn(ixs_chat_format f, prompt *o, json_t *m) {
    switch (f) {
    case IXS_CHAT_LLAMA2:
        text(o, " ");
        content(o, m, true);
        text(o, " ");
        mark(o, "</s>");
        mark(o, "<s>");
        break;
    case IXS_CHAT_MISTRAL_V1:
    case IXS_CHAT_MISTRAL_V3:
        if (f == IXS_CHAT_MISTRAL_V3) text(o, " ");
        content(o, m, false);
        mark(o, "</s>");
        break;
    case IXS_CHAT_GEMMA:
        mark(o, "<start_of_turn>");
        text(o, "model\n");
        content(o, m, true);
        mark(o, "<end_of_turn>");
        text(o, "\n");
        break;
    default:
        break;
    }
}

static void render_folded(ixs_chat_format f, json_t *messages, prompt *o) {
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
            answer_turn(f, o, m);
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

static void render(ixs_chat_format f, json_t *messages, prompt *o) {
    size_t i;
    json_t *m;
    switch (f) {
    case IXS_CHAT_LLAMA2:
    case IXS_CHAT_MISTRAL_V1:
    case IXS_CHAT_MISTRAL_V3:
    case IXS_CHAT_GEMMA:
        render_folded(f, messages, o);
        return;
    case IXS_CHAT_CHATML:
    case IXS_CHAT_LLAMA3:
    case IXS_CHAT_PHI3:
    case IXS_CHAT_ZEPHYR:
        break;
    default: /* plain: nothing in it is a marker */
        json_array_foreach(messages, i, m) {
            text(o, plain_role(role_of(m)));
            text(o, ": ");
            content(o, m, false);
            text(o, "\n");
        }
        text(o, "Assistant:");
        return;
    }
    json_array_foreach(messages, i, m) {
        const char *role = role_of(m);
        if (f == IXS_CHAT_CHATML) {
            mark(o, "<|im_start|>");
            text(o, role);
            text(o, "\n");
            content(o, m, false);
            mark(o, "<|im_end|>");
            text(o, "\n");
        } else if (f == IXS_CHAT_LLAMA3) {
            mark(o, "<|start_header_id|>");
            text(o, role);
            mark(o, "<|end_header_id|>");
            text(o, "\n\n");
            content(o, m, true);
            mark(o, "<|eot_id|>");
        } else { /* Phi-3, Zephyr */
            char tag[32];
            snprintf(tag, sizeof tag, "<|%s|>", role);
            mark(o, tag);
            text(o, "\n");
            content(o, m, false);
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

static void prompt_free(prompt *o) {
    ix_buf_free(&o->text);
    ix_free(o->p);
}

ix_status ix__chat_render_text(ixs_chat_format f, json_t *messages, ix_buf *out) {
    prompt o;
    memset(&o, 0, sizeof o);
    render(f, messages, &o);
    ix_status st = o.oom ? IX_ERR_NOMEM : IX_OK;
    if (st == IX_OK && o.text.len) st = ix_buf_append(out, o.text.data, o.text.len);
    prompt_free(&o);
    return st;
}

/* The id of a marker that is a special token of the vocabulary. */
static ix_token special_id(const ix_tokenizer *t, const char *s, size_t n) {
    ix_token id = ix_tokenizer_find(t, s, n);
    ix_token_type ty = ix_tokenizer_token_type(t, id);
    return ty == IX_TOKEN_TYPE_CONTROL || ty == IX_TOKEN_TYPE_USER_DEFINED ? id : IX_TOKEN_NONE;
}

ix_status ix__chat_render(ixs_chat_format f, const ix_tokenizer *t, json_t *messages, ix_token_vec *out,
                          ix_errbuf *err) {
    prompt o;
    memset(&o, 0, sizeof o);
    render(f, messages, &o);
    size_t n0 = out->n;
    ix_status st = o.oom ? IX_ERR_NOMEM : IX_OK;
    if (st == IX_OK && ix_tokenizer_add_bos(t) && ix_tokenizer_bos(t) != IX_TOKEN_NONE)
        st = ix_token_vec_push(out, ix_tokenizer_bos(t));
    size_t start = 0;              /* of the text not yet encoded */
    ix_token prev = IX_TOKEN_NONE; /* the special token before it */
    for (size_t i = 0; st == IX_OK && i <= o.n; i++) {
        const piece *p = i < o.n ? &o.p[i] : NULL; /* NULL: the end */
        ix_token id = p && p->marker ? special_id(t, o.text.data + p->off, p->len) : IX_TOKEN_NONE;
        if (p && id == IX_TOKEN_NONE) continue;
        /* A marker may swallow the whitespace beside it, as in
         * ix_tokenizer_encode (Phi-3's eat the newline after them). */
        size_t end = p ? p->off : o.text.len;
        ix_str text = {"", 0};
        if (end > start)
            text = ix_tokenizer_trim_between(t, prev, o.text.data + start, end - start, id);
        if (text.len) st = ix_tokenizer_encode(t, text.ptr, text.len, 0, out, err);
        if (st == IX_OK && p) st = ix_token_vec_push(out, id);
        if (p) start = p->off + p->len;
        prev = id;
    }
    prompt_free(&o);
    if (st == IX_OK) return IX_OK;
    out->n = n0;
    return st == IX_ERR_NOMEM ? ix_errf(err, IX_ERR_NOMEM, "out of memory") : st;
}
