/* server chat prompts (src/server/chat.c, chat_template.c) without HTTP:
 *   - conformance: every conversation of the model-template table
 *     (template_models_table.h: Llama 2 / 3 / 3.1, Mistral v1 / v3 / v7, ChatML,
 *     Qwen 2.5 / 3, Phi-3, Gemma 1-3, Zephyr, DeepSeek) that a chat request can
 *     express, sent as a client sends it (tool call arguments as JSON strings,
 *     content null on tool-call turns) through validation and the server's
 *     Jinja path, renders exactly the table's string -- what Hugging Face's
 *     jinja2 renders -- or fails as the template does (raise_exception);
 *   - which template a model gets: override names and files, the GGUF's, the
 *     fallback with its reason; the tool-call syntax read from the template;
 *   - the fixed renderers with tool calls, tool results and tool lists;
 *   - tokens: the template's markers become special tokens, message content
 *     never does, a marker built from data does; BOS once;
 *   - validation of tool_calls / tool messages, 400s naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inferx/gguf.h"
#include "inferx/model.h"
#include "server/server_int.h"
#include "template_test_util.h"

#include "template_models_table.h"

#define MODEL IX_SOURCE_DIR "/models/target-f16.gguf"
#define PHI3_VOCAB IX_SHARED_DIR "/vocab/ggml-vocab-phi-3.gguf"
#define JUL_26_2024 1721952000 /* 2024-07-26 00:00 UTC: Llama 3.1's default date, through strftime_now */

static ix_model *g_model;

static char *dup_or_null(json_t *s) {
    if (!json_is_string(s)) return NULL;
    char *d = ix_malloc(json_string_length(s) + 1);
    memcpy(d, json_string_value(s), json_string_length(s) + 1);
    return d;
}

/* The chat a server builds from template text, with the case's bos/eos (a
 * server takes them from its vocabulary) and clock (the case's now_unix_s,
 * else Llama 3.1's default date). */
static void chat_from(ixs_chat *c, const char *tmpl, json_t *ctx) {
    ix_errbuf err = {{0}};
    if (ix__chat_init(c, NULL, NULL, 0, tmpl, &err) != IX_OK) fail_msg("init: %s", err.msg);
    assert_non_null(c->tmpl);
    c->bos = dup_or_null(json_object_get(ctx, "bos_token"));
    c->eos = dup_or_null(json_object_get(ctx, "eos_token"));
    json_t *now = json_object_get(ctx, "now_unix_s");
    c->now_unix_s = json_is_integer(now) ? (int64_t)json_integer_value(now) : JUL_26_2024;
}

/* Whether a chat request can say what the case's context says: messages,
 * tools, bos/eos (the vocabulary's), the clock, the generation prompt on, and
 * other variables as chat_template_kwargs (returned, a new reference). */
static bool request_shaped(json_t *ctx, json_t **kwargs) {
    const char *key;
    json_t *v;
    *kwargs = json_object();
    json_object_foreach(ctx, key, v) {
        if (!strcmp(key, "add_generation_prompt")) {
            if (!json_is_true(v)) return false;
        } else if (strcmp(key, "messages") && strcmp(key, "tools") && strcmp(key, "bos_token") &&
                   strcmp(key, "eos_token") && strcmp(key, "now_unix_s")) {
            json_object_set(*kwargs, key, v);
        }
    }
    return true;
}

/* Tool call arguments as the API sends them: JSON text. */
static void args_as_strings(json_t *messages) {
    size_t i, k;
    json_t *m, *call;
    json_array_foreach(messages, i, m) {
        json_array_foreach(json_object_get(m, "tool_calls"), k, call) {
            json_t *fn = json_object_get(call, "function"), *args = json_object_get(fn, "arguments");
            if (!json_is_object(args)) continue;
            char *s = json_dumps(args, JSON_COMPACT);
            json_object_set_new(fn, "arguments", json_string(s));
            free(s);
        }
    }
}

static void test_conformance(void **state) {
    (void)state;
    static const char *const k_families[] = {"llama2 /", "llama3 /", "llama3.1 /", "mistral-v1 /", "mistral-v3 /",
                                             "chatml /", "qwen2.5 /", "phi3 /", "gemma /", "zephyr /"};
    int per_family[IX_ARRAY_LEN(k_families)] = {0}, n_tools = 0, n_refused = 0, n_run = 0, n_kwargs = 0;
    size_t live = ix_mem_live_count();
    for (size_t k = 0; k < IX_ARRAY_LEN(k_cases); k++) {
        const tpl_case *tc = &k_cases[k];
        json_t *ctx = json_loads(tc->context, 0, NULL);
        assert_non_null(ctx);
        json_t *msgs = json_deep_copy(json_object_get(ctx, "messages")), *kwargs = NULL;
        ixs_err e;
        if (!request_shaped(ctx, &kwargs) || ix__chat_validate(msgs, &e)) { /* e.g. image parts, no generation prompt */
            json_decref(kwargs);
            json_decref(msgs);
            json_decref(ctx);
            continue;
        }
        n_kwargs += json_object_size(kwargs) > 0;
        args_as_strings(msgs);
        ixs_chat c;
        chat_from(&c, tc->tmpl, ctx);
        ix_buf b = {0};
        ix_errbuf err = {{0}};
        json_t *tools = json_object_get(ctx, "tools");
        ix_status st = ix__chat_render_text(&c, msgs, tools, json_object_size(kwargs) ? kwargs : NULL, &b, &err);
        if (st != tc->want_status)
            fail_msg("%s: status %s (%s), want %s", tc->name, ix_status_name(st), err.msg,
                     ix_status_name(tc->want_status));
        if (st == IX_OK && json_array_size(tools) && !c.mentions_tools) {
            /* A template that never reads `tools` (DeepSeek R1's): the server
             * puts the list into the system message itself, on purpose. */
            if (!strstr(b.data, "You can call these tools")) fail_msg("%s: the tools are not in the prompt", tc->name);
        } else if (st == IX_OK && (b.len != strlen(tc->want) || memcmp(b.data, tc->want, b.len)))
            fail_msg("%s:\n  rendered \"%s\"\n  want     \"%s\"", tc->name, tpl_show(b.data, b.len),
                     tpl_show(tc->want, strlen(tc->want)));
        if (st != IX_OK && tc->want_msg && !strstr(err.msg, tc->want_msg))
            fail_msg("%s: message \"%s\" lacks \"%s\"", tc->name, err.msg, tc->want_msg);
        if (st != IX_OK) {
            assert_int_equal(ix__chat_error(&e, st, err.msg), -1);
            assert_int_equal(e.http, 400);
            assert_string_equal(e.param, "messages");
            n_refused++;
        }
        for (size_t f = 0; f < IX_ARRAY_LEN(k_families); f++)
            per_family[f] += !strncmp(tc->name, k_families[f], strlen(k_families[f]));
        n_tools += tools && strstr(tc->want ? tc->want : "", "Paris");
        n_run++;
        ix_buf_free(&b);
        ix__chat_free(&c);
        json_decref(kwargs);
        json_decref(msgs);
        json_decref(ctx);
    }
    for (size_t f = 0; f < IX_ARRAY_LEN(k_families); f++)
        if (!per_family[f]) fail_msg("no case of %s went through the server's path", k_families[f]);
    printf("%d of %zu table cases as chat requests (%d with tools, %d with chat_template_kwargs, %d refused by "
           "the template)\n",
           n_run, IX_ARRAY_LEN(k_cases), n_tools, n_kwargs, n_refused);
    assert_true(n_tools >= 5);
    assert_true(n_kwargs >= 2);
    assert_true(n_refused >= 3);
    assert_int_equal(ix_mem_live_count(), live);
}

/* ---- choosing the template --------------------------------------------------- */

static void test_init(void **state) {
    (void)state;
    ixs_chat c;
    ix_errbuf err = {{0}};
    /* A built-in name: the fixed renderer, whatever the file has. */
    assert_int_equal(ix__chat_init(&c, NULL, k_chatml, strlen(k_chatml), "gemma", &err), IX_OK);
    assert_null(c.tmpl);
    assert_int_equal(c.format, IXS_CHAT_GEMMA);
    assert_non_null(strstr(c.desc, "built-in gemma (--chat-template)"));
    ix__chat_free(&c);
    assert_int_equal(ix__chat_init(&c, NULL, NULL, 0, "mistral", &err), IX_OK);
    assert_int_equal(c.format, IXS_CHAT_MISTRAL_V3);
    assert_int_equal(c.tool_syntax, IXS_TOOLS_MISTRAL);
    ix__chat_free(&c);
    /* An override that does not parse is an error, not a silent fallback. */
    assert_int_equal(ix__chat_init(&c, NULL, k_chatml, strlen(k_chatml), "{% for x in %}", &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "--chat-template: line 1"));
    assert_int_equal(ix__chat_init(&c, NULL, NULL, 0, "{% include 'x' %}", &err), IX_ERR_UNSUPPORTED);
    /* The GGUF's template, when it parses. */
    assert_int_equal(ix__chat_init(&c, NULL, k_qwen2_5, strlen(k_qwen2_5), NULL, &err), IX_OK);
    assert_non_null(c.tmpl);
    assert_int_equal(c.format, IXS_CHAT_CHATML);
    assert_int_equal(c.tool_syntax, IXS_TOOLS_HERMES);
    assert_true(c.mentions_tools);
    assert_true(c.args_as_object);
    assert_non_null(strstr(c.desc, "jinja from the GGUF"));
    ix__chat_free(&c);
    /* One that does not: the renderer its markers name, and why. */
    static const char k_broken[] = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfro %}";
    assert_int_equal(ix__chat_init(&c, NULL, k_broken, strlen(k_broken), NULL, &err), IX_OK);
    assert_null(c.tmpl);
    assert_int_equal(c.format, IXS_CHAT_CHATML);
    assert_non_null(strstr(c.desc, "built-in chatml, the fallback: the GGUF's template"));
    assert_non_null(strstr(c.desc, "endfro"));
    ix__chat_free(&c);
    /* None: plain. */
    assert_int_equal(ix__chat_init(&c, NULL, NULL, 0, NULL, &err), IX_OK);
    assert_int_equal(c.format, IXS_CHAT_PLAIN);
    ix__chat_free(&c);
    /* Arguments as strings for templates that concatenate them (DeepSeek). */
    assert_int_equal(ix__chat_init(&c, NULL, k_deepseek_r1, strlen(k_deepseek_r1), NULL, &err), IX_OK);
    assert_false(c.args_as_object);
    ix__chat_free(&c);
    assert_int_equal(ix__chat_format_from_name("nope"), IXS_CHAT_N_FORMATS);
    for (const char *const *b = ix_server_chat_builtins(); *b; b++)
        assert_int_not_equal(ix__chat_format_from_name(*b), IXS_CHAT_N_FORMATS);
}

static void test_tool_syntax(void **state) {
    (void)state;
    static const struct {
        const char *tmpl;
        ixs_tool_syntax want;
    } k[] = {
        {k_llama3_1, IXS_TOOLS_LLAMA3},   {k_qwen2_5, IXS_TOOLS_HERMES}, {k_qwen3, IXS_TOOLS_HERMES},
        {k_mistral_v3, IXS_TOOLS_MISTRAL}, {k_mistral_v7, IXS_TOOLS_MISTRAL}, {k_llama3, IXS_TOOLS_GENERIC},
        {k_chatml, IXS_TOOLS_GENERIC},     {k_phi3, IXS_TOOLS_GENERIC},  {k_gemma, IXS_TOOLS_GENERIC},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(k); i++) {
        ixs_tool_syntax got = ix__chat_detect_tools(k[i].tmpl, strlen(k[i].tmpl));
        if (got != k[i].want)
            fail_msg("template %zu: %s, want %s", i, ix__tool_syntax_name(got), ix__tool_syntax_name(k[i].want));
    }
}

/* ---- the fixed renderers with tools ------------------------------------------ */

/* TOOL_CONVO as a client sends it. */
#define API_TOOL_CONVO                                                                                               \
    "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Weather?\"}, "        \
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\", " \
    "\"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}}]}, "              \
    "{\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"22 C\"}]"
#define API_TOOLS "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}]"
#define TOOLS_TEXT                                                                                                  \
    "You can call these tools, each described by a JSON object:\n"                                                 \
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}\n"

static void check_fixed(ixs_chat_format f, const char *tools, const char *want) {
    json_t *m = json_loads(API_TOOL_CONVO, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL;
    ixs_err e;
    assert_int_equal(ix__chat_validate(m, &e), 0);
    ixs_chat c;
    ix__chat_init_format(&c, f);
    ix_buf b = {0};
    assert_int_equal(ix__chat_render_text(&c, m, t, NULL, &b, NULL), IX_OK);
    if (strcmp(b.data, want))
        fail_msg("%s:\n  rendered \"%s\"\n  want     \"%s\"", ix__chat_format_name(f), tpl_show(b.data, b.len),
                 tpl_show(want, strlen(want)));
    ix_buf_free(&b);
    json_decref(m);
    json_decref(t);
}

static void test_fixed_tools(void **state) {
    (void)state;
    /* Hermes syntax in ChatML: calls in <tool_call>, results in <tool_response>. */
    check_fixed(IXS_CHAT_CHATML, API_TOOLS,
                "<|im_start|>system\nBe brief.\n\n" TOOLS_TEXT
                "To call a tool, answer with <tool_call>\n{\"name\": <tool name>, \"arguments\": <object of "
                "arguments>}\n</tool_call> for each call.<|im_end|>\n"
                "<|im_start|>user\nWeather?<|im_end|>\n"
                "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                "\"Paris\"}}\n</tool_call><|im_end|>\n"
                "<|im_start|>tool\n<tool_response>\n22 C\n</tool_response><|im_end|>\n"
                "<|im_start|>assistant\n");
    /* Llama 3: the call as {"name", "parameters"}, the result under ipython. */
    check_fixed(IXS_CHAT_LLAMA3, NULL,
                "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nWeather?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
                "{\"city\": \"Paris\"}}<|eot_id|>"
                "<|start_header_id|>ipython<|end_header_id|>\n\n22 C<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* Mistral v3: [TOOL_CALLS] and [TOOL_RESULTS]; the system text before the first user message. */
    check_fixed(IXS_CHAT_MISTRAL_V3, NULL,
                "[INST] Be brief.\n\nWeather?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
                "{\"city\": \"Paris\"}}]</s>[TOOL_RESULTS] 22 C[/TOOL_RESULTS]");
    /* Plain: generic JSON. */
    check_fixed(IXS_CHAT_PLAIN, API_TOOLS,
                "System: Be brief.\n\n" TOOLS_TEXT
                "To call a tool, answer only with a JSON object {\"name\": <tool name>, \"arguments\": <object of "
                "arguments>}, one line per call.\n"
                "User: Weather?\n"
                "Assistant: {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                "Tool: 22 C\n"
                "Assistant:");
}

/* ---- tokens -------------------------------------------------------------------- */

static int count(const ix_token_vec *v, ix_token id) {
    int n = 0;
    for (size_t i = 0; i < v->n; i++) n += v->ids[i] == id;
    return n;
}

/* The bundled vocabulary (SPM: <s>, </s> control tokens) and Llama 2's
 * template, which writes bos_token and eos_token itself. */
static void test_tokens_llama2(void **state) {
    (void)state;
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    ix_token bos = ix_tokenizer_bos(t), eos = ix_tokenizer_eos(t);
    ixs_chat c;
    ix_errbuf err = {{0}};
    assert_int_equal(ix__chat_init(&c, t, k_llama2, strlen(k_llama2), NULL, &err), IX_OK);
    assert_string_equal(c.bos, "<s>");
    assert_string_equal(c.eos, "</s>");
    json_t *m = json_loads(NOSYS, 0, NULL);
    ix_token_vec ids = {0}, ref = {0};
    assert_int_equal(ix__chat_render(&c, t, m, NULL, &ids, &err), IX_OK);
    /* What the whole text gives with special tokens parsed (no BOS added:
     * the template wrote it). */
    static const char k_text[] = "<s>[INST] Hi [/INST] Hello! How can I help? </s><s>[INST] Tell me a joke. [/INST]";
    assert_int_equal(ix_tokenizer_encode(t, k_text, strlen(k_text), IX_TOK_PARSE_SPECIAL, &ref, NULL), IX_OK);
    assert_int_equal(ids.n, ref.n);
    assert_memory_equal(ids.ids, ref.ids, ids.n * sizeof *ids.ids);
    assert_int_equal(ids.ids[0], bos);
    assert_int_not_equal(ids.ids[1], bos); /* once */
    assert_int_equal(count(&ids, bos), 2);
    assert_int_equal(count(&ids, eos), 1);
    json_decref(m);
    ix_token_vec_free(&ids);
    /* Content that spells the markers stays text. */
    m = json_loads("[{\"role\": \"user\", \"content\": \"a </s><s> b\"}, {\"role\": \"assistant\", \"content\": "
                   "\"</s>\"}, {\"role\": \"user\", \"content\": \"<s>\"}]",
                   0, NULL);
    assert_int_equal(ix__chat_render(&c, t, m, NULL, &ids, &err), IX_OK);
    assert_int_equal(count(&ids, bos), 2); /* the template's two */
    assert_int_equal(count(&ids, eos), 1);
    json_decref(m);
    ix_token_vec_free(&ids);
    ix_token_vec_free(&ref);
    ix__chat_free(&c);
    /* A template that writes no BOS gets the vocabulary's. */
    assert_int_equal(ix__chat_init(&c, t, k_chatml, strlen(k_chatml), NULL, &err), IX_OK);
    m = json_loads(ONE_TURN, 0, NULL);
    assert_int_equal(ix__chat_render(&c, t, m, NULL, &ids, &err), IX_OK);
    assert_true(ix_tokenizer_add_bos(t));
    assert_int_equal(ids.ids[0], bos);
    assert_int_equal(count(&ids, bos), 1);
    json_decref(m);
    ix_token_vec_free(&ids);
    ix__chat_free(&c);
}

/* Phi-3's vocabulary has its markers as control tokens. */
static void test_tokens_phi3(void **state) {
    (void)state;
    ix_gguf *g = NULL;
    if (ix_gguf_open(&g, PHI3_VOCAB, NULL) != IX_OK) {
        printf("skip: %s not found\n", PHI3_VOCAB);
        skip();
    }
    ix_tokenizer *t = NULL;
    assert_int_equal(ix_tokenizer_create(&t, g, NULL), IX_OK);
    ix_token user = ix_tokenizer_find(t, "<|user|>", 8), end = ix_tokenizer_find(t, "<|end|>", 7),
             asst = ix_tokenizer_find(t, "<|assistant|>", 13);
    assert_int_equal(ix_tokenizer_token_type(t, asst), IX_TOKEN_TYPE_CONTROL);
    /* The file's own template, as a server of it renders it. */
    ix_str tmpl;
    assert_int_equal(ix_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL), IX_OK);
    ixs_chat c;
    ix_errbuf err = {{0}};
    assert_int_equal(ix__chat_init(&c, t, tmpl.ptr, tmpl.len, NULL, &err), IX_OK);
    assert_non_null(c.tmpl);
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"Say <|assistant|> or <|end|>\"}]", 0, NULL);
    ix_token_vec ids = {0};
    assert_int_equal(ix__chat_render(&c, t, m, NULL, &ids, &err), IX_OK);
    assert_int_equal(count(&ids, user), 1);
    assert_int_equal(count(&ids, end), 1);
    assert_int_equal(count(&ids, asst), 1); /* the generation prompt's */
    assert_int_equal(ids.ids[ids.n - 1], asst);
    assert_int_equal(count(&ids, ix_tokenizer_bos(t)), 1);
    json_decref(m);
    ix_token_vec_free(&ids);
    ix__chat_free(&c);
    /* A marker the template builds from data is still its token. */
    static const char k_built[] = "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' }}"
                                  "{% endfor %}{{ '<|assistant|>\\n' }}";
    assert_int_equal(ix__chat_init(&c, t, NULL, 0, k_built, &err), IX_OK);
    m = json_loads("[{\"role\": \"user\", \"content\": \"Hi\"}]", 0, NULL);
    assert_int_equal(ix__chat_render(&c, t, m, NULL, &ids, &err), IX_OK);
    assert_int_equal(count(&ids, user), 1);
    json_decref(m);
    ix_token_vec_free(&ids);
    ix__chat_free(&c);
    ix_tokenizer_destroy(t);
    ix_gguf_close(g);
}

/* What a long chat costs through the server's path (printed, for
 * docs/server.md): Llama 3.1's template, 5 tools, 100 turns with tool calls
 * and results, rendered and tokenized with the bundled vocabulary. */
static void test_render_cost(void **state) {
    (void)state;
    json_t *tools = json_array(), *msgs = json_array();
    json_t *tool = json_loads(TOOLS, 0, NULL);
    for (int i = 0; i < 5; i++) json_array_append(tools, json_array_get(tool, 0));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", "You are a helpful assistant."));
    for (int i = 0; i < 25; i++) {
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", "What's the weather in Paris?"));
        json_array_append_new(msgs, json_loads("{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
                                               "\"call12345\", \"type\": \"function\", \"function\": {\"name\": "
                                               "\"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\"}\"}}]}",
                                               0, NULL));
        json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", "call12345", "content",
                                              "{\"temperature\": 22}"));
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "assistant", "content", "It is 22 C in Paris."));
    }
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", "And tomorrow?"));
    ixs_err e;
    assert_int_equal(ix__chat_validate(msgs, &e), 0);
    const ix_tokenizer *t = ix_model_tokenizer(g_model);
    ixs_chat c;
    ix_errbuf err = {{0}};
    assert_int_equal(ix__chat_init(&c, t, k_llama3_1, strlen(k_llama3_1), NULL, &err), IX_OK);
    double best_ms = 1e9;
    size_t n_tokens = 0;
    for (int rep = 0; rep < 10; rep++) {
        ix_token_vec ids = {0};
        uint64_t t0 = ix_time_ns();
        if (ix__chat_render(&c, t, msgs, tools, &ids, &err) != IX_OK) fail_msg("render: %s", err.msg);
        double ms = (double)(ix_time_ns() - t0) / 1e6;
        if (ms < best_ms) best_ms = ms;
        n_tokens = ids.n;
        ix_token_vec_free(&ids);
    }
    /* The baseline, same run: tokenizing the rendered text alone. */
    ix_buf text = {0};
    assert_int_equal(ix__chat_render_text(&c, msgs, tools, NULL, &text, &err), IX_OK);
    double enc_ms = 1e9;
    for (int rep = 0; rep < 10; rep++) {
        ix_token_vec ids = {0};
        uint64_t t0 = ix_time_ns();
        assert_int_equal(ix_tokenizer_encode(t, text.data, text.len, IX_TOK_ADD_SPECIAL | IX_TOK_PARSE_SPECIAL, &ids,
                                             NULL),
                         IX_OK);
        double ms = (double)(ix_time_ns() - t0) / 1e6;
        if (ms < enc_ms) enc_ms = ms;
        ix_token_vec_free(&ids);
    }
    printf("Llama 3.1 template, %zu messages + 5 tools: %zu bytes, %zu prompt tokens; render + tokenize %.2f ms, "
           "tokenizing the text alone %.2f ms (best of 10)\n",
           json_array_size(msgs), text.len, n_tokens, best_ms, enc_ms);
    ix_buf_free(&text);
    assert_true(n_tokens > 1000);
    assert_true(best_ms < 2000); /* a bound far above any real cost, not a benchmark */
    ix__chat_free(&c);
    json_decref(tool);
    json_decref(tools);
    json_decref(msgs);
}

/* ---- validation -------------------------------------------------------------- */

static void check_bad(const char *messages, const char *param, const char *msg) {
    json_t *m = json_loads(messages, 0, NULL);
    assert_non_null(m);
    ixs_err e;
    assert_int_equal(ix__chat_validate(m, &e), -1);
    assert_int_equal(e.http, 400);
    if (strcmp(e.param, param) || !strstr(e.msg, msg))
        fail_msg("%s: param '%s' message '%s', want '%s' / '%s'", messages, e.param, e.msg, param, msg);
    json_decref(m);
}

static void test_validate(void **state) {
    (void)state;
    check_bad("[{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]", "messages[0]",
              "only allowed on assistant");
    check_bad("[{\"role\": \"assistant\", \"tool_calls\": {}}]", "messages[0].tool_calls", "must be an array");
    check_bad("[{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"arguments\": "
              "\"{}\"}}]}]",
              "messages[0].tool_calls[0]", "function.name must be a non-empty string");
    check_bad("[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": 3}}]}]",
              "messages[0].tool_calls[0]", "function.arguments must be a string");
    check_bad("[{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"code\", \"function\": {\"name\": \"f\", "
              "\"arguments\": \"{}\"}}]}]",
              "messages[0].tool_calls[0]", "type must be \"function\"");
    check_bad("[{\"role\": \"tool\", \"content\": \"42\"}]", "messages[0]", "tool_call_id must be a string");
    check_bad("[{\"role\": \"tool\", \"tool_call_id\": \"c\"}]", "messages[0]", "content is required");
    check_bad("[{\"role\": \"user\", \"content\": \"x\", \"name\": 3}]", "messages[0]", "name must be a string");
    /* Accepted: null content on a tool-call turn stays null; without calls it is "". */
    json_t *m = json_loads("[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"a\", \"type\": "
                           "\"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}]}, "
                           "{\"role\": \"assistant\"}]",
                           0, NULL);
    ixs_err e;
    assert_int_equal(ix__chat_validate(m, &e), 0);
    assert_true(json_is_null(json_object_get(json_array_get(m, 0), "content")));
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "content")), "");
    json_decref(m);
    /* Arguments that are not a JSON object, for a template that reads objects. */
    m = json_loads("[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"tool_calls\": [{\"id\": "
                   "\"call12345\", \"function\": {\"name\": \"f\", \"arguments\": \"[1,\"}}]}]",
                   0, NULL);
    assert_int_equal(ix__chat_validate(m, &e), 0);
    ixs_chat c;
    ix_errbuf err = {{0}};
    assert_int_equal(ix__chat_init(&c, NULL, k_qwen2_5, strlen(k_qwen2_5), NULL, &err), IX_OK);
    ix_buf b = {0};
    assert_int_equal(ix__chat_render_text(&c, m, NULL, NULL, &b, &err), IX_ERR_INVALID);
    assert_non_null(strstr(err.msg, "messages[1].tool_calls[0].function.arguments is not a JSON object"));
    ix_buf_free(&b);
    ix__chat_free(&c);
    json_decref(m);
}

static int setup(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    if (ix_model_load(&g_model, MODEL, &err) != IX_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ix_model_destroy(g_model);
    return 0;
}

int main(void) {
    (void)tpl_vars; /* the shared harness's other helpers */
    (void)tpl_check;
    (void)tpl_dump;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance), cmocka_unit_test(test_init),          cmocka_unit_test(test_tool_syntax),
        cmocka_unit_test(test_fixed_tools), cmocka_unit_test(test_tokens_llama2), cmocka_unit_test(test_tokens_phi3),
        cmocka_unit_test(test_validate),    cmocka_unit_test(test_render_cost),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
