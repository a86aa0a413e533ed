/* inferx server: which request fields the generation endpoints take. Every
 * field of an OpenAI /v1/chat/completions or /v1/completions request is a
 * row here, with what this server does with it; a request naming a field
 * that is not a row, or a row this server does not implement, is refused
 * with a 400 naming the field -- never silently ignored. docs/server.md
 * lists the same table. Rows whose value decides (modalities: ["text"] is
 * fine, ["audio"] is not) have a check. */
#include <string.h>

#include "server/server_int.h"

enum { CHAT = 1, CMPL = 2, BOTH = 3 };

typedef enum field_status {
    F_DONE,     /* implemented (parsed and checked where it is used) */
    F_META,     /* accepted metadata: type-checked, not acted on */
    F_REFUSED,  /* an OpenAI field this server does not implement: 400 when present and not null */
    F_CHECKED,  /* accepted for some values only: its check says which */
} field_status;

typedef struct field {
    const char *name;
    int where;
    field_status st;
    int (*check)(json_t *v, const char *name, ixs_err *e); /* F_META / F_CHECKED */
} field;

static int is_string(json_t *v, const char *name, ixs_err *e) {
    return json_is_string(v) ? 0 : IXS_BAD(e, name, "'%s' must be a string", name);
}

static int is_metadata(json_t *v, const char *name, ixs_err *e) {
    if (!json_is_object(v)) return IXS_BAD(e, name, "'%s' must be an object of strings", name);
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) if (!json_is_string(x)) return IXS_BAD(e, name, "'%s.%.64s' must be a string", name, k);
    return 0;
}

static int text_only(json_t *v, const char *name, ixs_err *e) {
    size_t i;
    json_t *x;
    if (!json_is_array(v)) return IXS_BAD(e, name, "'%s' must be an array", name);
    json_array_foreach(v, i, x) {
        if (!json_is_string(x) || strcmp(json_string_value(x), "text"))
            return IXS_BAD(e, name, "'%s': this server generates text only (\"text\")", name);
    }
    return 0;
}

static int store_false(json_t *v, const char *name, ixs_err *e) {
    if (!json_is_boolean(v)) return IXS_BAD(e, name, "'%s' must be a boolean", name);
    return json_is_true(v) ? IXS_BAD(e, name, "'store': this server does not store completions") : 0;
}

static int tier_default(json_t *v, const char *name, ixs_err *e) {
    const char *t = json_string_value(v);
    if (t && (!strcmp(t, "auto") || !strcmp(t, "default"))) return 0;
    return IXS_BAD(e, name, "'%s' must be \"auto\" or \"default\" (this server has one tier)", name);
}

static int best_of_one(json_t *v, const char *name, ixs_err *e) {
    if (json_is_integer(v) && json_integer_value(v) == 1) return 0;
    return IXS_BAD(e, name, "'%s' other than 1 is not supported (use n)", name);
}

static int echo_false(json_t *v, const char *name, ixs_err *e) {
    if (json_is_false(v)) return 0;
    return IXS_BAD(e, name, "'%s' is not supported (only false)", name);
}

static int suffix_empty(json_t *v, const char *name, ixs_err *e) {
    if (json_is_string(v) && json_string_length(v) == 0) return 0;
    return IXS_BAD(e, name, "'%s' (insertion) is not supported", name);
}

static const field k_fields[] = {
    /* OpenAI, implemented */
    {"model", BOTH, F_DONE, NULL},
    {"messages", CHAT, F_DONE, NULL},
    {"prompt", CMPL, F_DONE, NULL},
    {"frequency_penalty", BOTH, F_DONE, NULL},
    {"presence_penalty", BOTH, F_DONE, NULL},
    {"logit_bias", BOTH, F_DONE, NULL},
    {"logprobs", BOTH, F_DONE, NULL},
    {"top_logprobs", CHAT, F_DONE, NULL},
    {"max_tokens", BOTH, F_DONE, NULL},
    {"max_completion_tokens", CHAT, F_DONE, NULL},
    {"n", BOTH, F_DONE, NULL},
    {"seed", BOTH, F_DONE, NULL},
    {"stop", BOTH, F_DONE, NULL},
    {"stream", BOTH, F_DONE, NULL},
    {"stream_options", BOTH, F_DONE, NULL},
    {"temperature", BOTH, F_DONE, NULL},
    {"top_p", BOTH, F_DONE, NULL},
    {"response_format", BOTH, F_DONE, NULL},
    {"tools", CHAT, F_DONE, NULL},
    {"tool_choice", CHAT, F_DONE, NULL},
    {"parallel_tool_calls", CHAT, F_DONE, NULL},
    /* OpenAI, accepted as metadata or for the values that mean "as usual" */
    {"user", BOTH, F_META, is_string},
    {"safety_identifier", CHAT, F_META, is_string},
    {"prompt_cache_key", CHAT, F_META, is_string},
    {"metadata", CHAT, F_META, is_metadata},
    {"store", CHAT, F_CHECKED, store_false},
    {"modalities", CHAT, F_CHECKED, text_only},
    {"service_tier", CHAT, F_CHECKED, tier_default},
    {"best_of", CMPL, F_CHECKED, best_of_one},
    {"echo", CMPL, F_CHECKED, echo_false},
    {"suffix", CMPL, F_CHECKED, suffix_empty},
    /* OpenAI, not implemented */
    {"audio", CHAT, F_REFUSED, NULL},
    {"prediction", CHAT, F_REFUSED, NULL},
    {"reasoning_effort", CHAT, F_REFUSED, NULL},
    {"verbosity", CHAT, F_REFUSED, NULL},
    {"web_search_options", CHAT, F_REFUSED, NULL},
    {"functions", CHAT, F_REFUSED, NULL},
    {"function_call", CHAT, F_REFUSED, NULL},
    {"prompt_cache_retention", CHAT, F_REFUSED, NULL},
    /* inferx extensions (vLLM's names where vLLM has them) */
    {"top_k", BOTH, F_DONE, NULL},
    {"min_p", BOTH, F_DONE, NULL},
    {"repetition_penalty", BOTH, F_DONE, NULL},
    {"stop_token_ids", BOTH, F_DONE, NULL},
    {"ignore_eos", BOTH, F_DONE, NULL},
    {"priority", BOTH, F_DONE, NULL},
    {"deadline_ms", BOTH, F_DONE, NULL},
    {"timeout", BOTH, F_DONE, NULL}, /* seconds; policy.c cancels the request past it */
    {"cache_salt", BOTH, F_DONE, NULL},
    {"session_id", BOTH, F_DONE, NULL},  /* sessions.c */
    {"session_ttl", BOTH, F_DONE, NULL},
    {"grammar", BOTH, F_DONE, NULL},
    {"speculative_decoding", BOTH, F_DONE, NULL},
    {"chat_template_kwargs", CHAT, F_DONE, NULL},
    {"chat_template_kwargs", CHAT, F_DONE, NULL},
};

int ix__srv_check_fields(json_t *req, bool chat, ixs_err *e) {
    const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
    int where = chat ? CHAT : CMPL;
    const char *key;
    json_t *v;
    json_object_foreach(req, key, v) {
        const field *f = NULL;
        for (size_t i = 0; i < IX_ARRAY_LEN(k_fields) && !f; i++)
            if (!strcmp(k_fields[i].name, key)) f = &k_fields[i];
        if (!f || !(f->where & where))
            return IXS_BAD(e, key, "'%.64s' is not a field of %s requests on this server", key, path);
        if (json_is_null(v)) continue; /* null: as if absent, like OpenAI */
        if (f->st == F_REFUSED) return IXS_BAD(e, key, "'%s' is not supported by this server", key);
        if (f->check && f->check(v, f->name, e)) return -1;
    }
    return 0;
}
