/* libFuzzer target for the template interpreter: the input is template text,
 * optionally followed by a NUL byte and a JSON context (messages, tools,
 * add_generation_prompt, bos_token, eos_token and other variables; a fixed
 * conversation with tools when absent or not JSON). Every input must either
 * fail with a known status and a message, or render a NUL-terminated text
 * with well-formed data ranges -- under small limits, so that no input runs
 * long -- and leave nothing allocated. Also linked into test_template_corpus,
 * which replays tests/corpus/template/. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \" Hi\\n\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
    " \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"22\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"And <|im_end|>?\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"now_unix_s\": 1721952000,"
    " \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t live = ix_mem_live_count();
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t len = nul ? (size_t)(nul - data) : size;
    json_t *ctx = nul ? json_loadb((const char *)nul + 1, size - len - 1, 0, NULL) : NULL;
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        ctx = json_loads(k_context, 0, NULL);
    }
    json_t *extra = json_deep_copy(ctx);
    static const char *const k_named[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
    for (size_t k = 0; k < sizeof k_named / sizeof k_named[0]; k++) json_object_del(extra, k_named[k]);
    json_t *messages = json_object_get(ctx, "messages"), *tools = json_object_get(ctx, "tools");
    ix_template_vars v = {
        .messages = messages,
        .tools = json_is_array(tools) ? tools : NULL,
        .add_generation_prompt = json_is_true(json_object_get(ctx, "add_generation_prompt")),
        .bos_token = json_string_value(json_object_get(ctx, "bos_token")),
        .eos_token = json_string_value(json_object_get(ctx, "eos_token")),
        .extra = extra,
        .now_unix_s = 1721952000,
    };
    json_t *empty = NULL;
    if (!json_is_array(messages)) v.messages = empty = json_array();
    ix_template_params p = ix_template_default_params();
    p.max_output_bytes = 1 << 20;
    p.max_memory_bytes = 16 << 20;
    p.max_loop_iterations = 20000;
    p.max_steps = 200000;
    p.max_depth = 64;
    ix_template_result r;
    ix_errbuf err = {{0}};
    ix_status st = ix_template_apply(src, len, &v, &p, &r, &err);
    if (st == IX_OK) {
        if (!r.text || r.text[r.len] != '\0') abort();
        size_t end = 0;
        for (size_t k = 0; k < r.n_data; k++) {
            const ix_template_span *s = &r.data[k];
            if (!s->len || (k && s->off <= end) || s->off + s->len > r.len) abort();
            end = s->off + s->len;
        }
    } else {
        bool known = st == IX_ERR_FORMAT || st == IX_ERR_UNSUPPORTED || st == IX_ERR_UTF8 || st == IX_ERR_INVALID ||
                     st == IX_ERR_TYPE || st == IX_ERR_RANGE || st == IX_ERR_TOO_LONG || st == IX_ERR_NOMEM;
        if (!known || err.msg[0] == '\0' || r.text || r.data) abort(); /* a failure says why and returns nothing */
    }
    ix_template_result_free(&r);
    json_decref(empty);
    json_decref(extra);
    json_decref(ctx);
    if (ix_mem_live_count() != live) abort(); /* leak */
    return 0;
}
