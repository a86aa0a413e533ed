/* server tools.c: tool calling without a model.
 *   - the answer parsers of every family (Hermes/Qwen <tool_call>, Mistral
 *     [TOOL_CALLS], Llama 3 python_tag / bare JSON with "parameters") and the
 *     generic fallback (objects, arrays, ``` fences); unknown functions and
 *     broken JSON stay content
 *   - the forced-call grammar: compiles for every family, accepts the calls
 *     of the named / listed functions with arguments valid under their
 *     schemas and refuses others; what it accepts parses back into calls
 *   - the request fields' errors name the field */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/grammar.h"
#include "server/server_int.h"

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather in a city\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
    "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"strict\":true,\"parameters\":{\"type\":\"object\","
    "\"properties\":{},\"additionalProperties\":false,\"required\":[]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

static json_t *tools(void) {
    json_t *t = json_loads(k_tools, 0, NULL);
    assert_non_null(t);
    return t;
}

/* Parses text in syntax ts; expects n calls (name_i, args_i) and content. */
static void expect_calls(ixs_tool_syntax ts, const char *text, const char *content, int n, ...) {
    json_t *tl = tools();
    json_t *calls = NULL;
    ix_buf c = {0};
    assert_int_equal(ix__tools_parse_output(text, strlen(text), ts, tl, &calls, &c), IX_OK);
    if (n == 0) {
        assert_null(calls);
    } else {
        if (!calls) fail_msg("no calls parsed from '%s'", text);
        assert_int_equal(json_array_size(calls), (size_t)n);
    }
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *name = va_arg(ap, const char *), *args = va_arg(ap, const char *);
        json_t *call = json_array_get(calls, (size_t)i);
        assert_string_equal(json_string_value(json_object_get(call, "name")), name);
        assert_string_equal(json_string_value(json_object_get(call, "arguments")), args);
    }
    va_end(ap);
    assert_int_equal(c.len, strlen(content));
    if (c.len) assert_memory_equal(c.data, content, c.len);
    json_decref(calls);
    json_decref(tl);
    ix_buf_free(&c);
}

static void test_parse_families(void **state) {
    (void)state;
    /* Hermes / Qwen: content around blocks, several calls. */
    expect_calls(IXS_TOOLS_HERMES,
                 "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                 "</tool_call>\n<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>",
                 "Let me check.\n\n", 2, "get_weather", "{\"city\":\"Paris\"}", "now", "{}");
    /* an unterminated last block (cut by a stop) still counts */
    expect_calls(IXS_TOOLS_HERMES, "<tool_call>{\"name\":\"ping\",\"arguments\":{}}", "", 1, "ping", "{}");
    /* broken JSON inside: all content */
    expect_calls(IXS_TOOLS_HERMES, "<tool_call>{\"name\":\"ping\",</tool_call>", "<tool_call>{\"name\":\"ping\",</tool_call>",
                 0);
    /* Mistral */
    expect_calls(IXS_TOOLS_MISTRAL,
                 "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}, "
                 "{\"name\": \"ping\", \"arguments\": {}}]",
                 "", 2, "get_weather", "{\"city\":\"Oslo\",\"unit\":\"c\"}", "ping", "{}");
    /* Llama 3.x: "parameters", python_tag, or a bare object */
    expect_calls(IXS_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", "", 1,
                 "get_weather", "{\"city\":\"Rome\"}");
    expect_calls(IXS_TOOLS_LLAMA3, " {\"name\": \"now\", \"parameters\": {}}; {\"name\": \"ping\", \"parameters\": {}}", "",
                 2, "now", "{}", "ping", "{}");
    /* generic fallback, from any family: objects, arrays, fences, arguments as a string */
    expect_calls(IXS_TOOLS_GENERIC, "{\"name\":\"ping\",\"arguments\":\"{\\\"x\\\": 1}\"}", "", 1, "ping", "{\"x\": 1}");
    expect_calls(IXS_TOOLS_HERMES, "```json\n[{\"name\":\"now\"}, {\"name\":\"ping\",\"arguments\":{}}]\n```\n", "", 2,
                 "now", "{}", "ping", "{}");
    expect_calls(IXS_TOOLS_MISTRAL, "{\"function\":{\"name\":\"ping\",\"arguments\":{}}}", "", 1, "ping", "{}");
    /* not calls: prose, an unknown function, JSON that is not a call, trailing prose */
    expect_calls(IXS_TOOLS_GENERIC, "It is sunny.", "It is sunny.", 0);
    expect_calls(IXS_TOOLS_LLAMA3, "{\"name\":\"rm_rf\",\"parameters\":{}}", "{\"name\":\"rm_rf\",\"parameters\":{}}", 0);
    expect_calls(IXS_TOOLS_GENERIC, "{\"city\":\"Paris\"}", "{\"city\":\"Paris\"}", 0);
    expect_calls(IXS_TOOLS_GENERIC, "{\"name\":\"ping\"} and more", "{\"name\":\"ping\"} and more", 0);
    expect_calls(IXS_TOOLS_GENERIC, "[]", "[]", 0);
    expect_calls(IXS_TOOLS_HERMES, "", "", 0);
}

/* Compiles the forced-call grammar and checks which texts it accepts. */
static void check_grammar_or(ixs_tools_req *t, ixs_tool_syntax ts, const ix_constraint *doc, const char *const *good,
                             const char *const *bad) {
    ix_buf g = {0};
    ix_errbuf err = {{0}};
    ix_status st = doc ? ix__tools_grammar_or(t, ts, doc, &g, &err) : ix__tools_grammar(t, ts, &g, &err);
    if (st != IX_OK) fail_msg("tools grammar: %s", err.msg);
    ix_grammar *gr = NULL;
    if (ix_grammar_parse(&gr, g.data, g.len, &err) != IX_OK) fail_msg("%s\n%.*s", err.msg, (int)g.len, g.data);
    /* a byte vocabulary: token i is byte i */
    ix_str bytes[256];
    char raw[256];
    for (int i = 0; i < 256; i++) {
        raw[i] = (char)i;
        bytes[i] = (ix_str){&raw[i], 1};
    }
    ix_grammar_vocab *v = NULL;
    assert_int_equal(ix_grammar_vocab_create_from_bytes(&v, bytes, 256, NULL, 0, &err), IX_OK);
    ix_grammar_matcher *m = NULL;
    assert_int_equal(ix_grammar_matcher_create(&m, gr, v, NULL, &err), IX_OK);
    for (int i = 0; good[i]; i++) {
        ix_grammar_matcher_reset(m);
        if (ix_grammar_matcher_accept_bytes(m, good[i], strlen(good[i])) != IX_OK || !ix_grammar_matcher_can_end(m))
            { fprintf(stderr, "%.*s\n", (int)g.len, g.data); fail_msg("refused: %s", good[i]); }
        /* what the grammar accepts parses back into calls (or, with a doc, is the doc) */
        if (doc && good[i][0] != '{') continue;
        json_t *calls = NULL;
        ix_buf content = {0};
        assert_int_equal(ix__tools_parse_output(good[i], strlen(good[i]), ts, t->tools, &calls, &content), IX_OK);
        if (doc && !calls && strstr(good[i], "\"name\"") == NULL) {
            ix_buf_free(&content);
            continue; /* the document: content */
        }
        if (!calls) fail_msg("accepted but not parsed: %s", good[i]);
        assert_int_equal(content.len, 0);
        json_decref(calls);
        ix_buf_free(&content);
    }
    for (int i = 0; bad[i]; i++) {
        ix_grammar_matcher_reset(m);
        if (ix_grammar_matcher_accept_bytes(m, bad[i], strlen(bad[i])) == IX_OK && ix_grammar_matcher_can_end(m))
            fail_msg("accepted: %s", bad[i]);
    }
    ix_grammar_matcher_destroy(m);
    ix_grammar_vocab_destroy(v);
    ix_grammar_destroy(gr);
    ix_buf_free(&g);
}

static void check_grammar(ixs_tools_req *t, ixs_tool_syntax ts, const char *const *good, const char *const *bad) {
    check_grammar_or(t, ts, NULL, good, bad);
}

static void test_forced_grammar(void **state) {
    (void)state;
    json_t *tl = tools();
    /* required, one call (parallel off) */
    ixs_tools_req t = {tl, IXS_TOOL_CHOICE_REQUIRED, NULL, false};
    const char *good1[] = {"{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}",
                           "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\",\"unit\":\"f\"}}",
                           "{\"name\": \"now\", \"arguments\": {}}", "{\"name\": \"ping\", \"arguments\": {}}", NULL};
    const char *bad1[] = {"{\"name\": \"get_weather\", \"arguments\": {}}",                 /* city required */
                          "{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}",     /* a string */
                          "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"a\", \"unit\": \"k\"}}",
                          "{\"name\": \"rm\", \"arguments\": {}}", "[{\"name\": \"now\", \"arguments\": {}}]",
                          "{\"name\": \"now\", \"parameters\": {}}", "Sure!",
                          "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", /* compact */
                          "{\"name\":  \"now\", \"arguments\": {}}", NULL};
    check_grammar(&t, IXS_TOOLS_HERMES, good1, bad1);
    check_grammar(&t, IXS_TOOLS_GENERIC, good1, bad1);
    /* Llama 3 writes "parameters" */
    const char *good2[] = {"{\"name\": \"now\", \"parameters\": {}}", NULL};
    const char *bad2[] = {"{\"name\": \"now\", \"arguments\": {}}", NULL};
    check_grammar(&t, IXS_TOOLS_LLAMA3, good2, bad2);
    /* parallel: an array of one or more calls */
    t.parallel = true;
    const char *good3[] = {"[{\"name\": \"now\", \"arguments\": {}}]",
                           "[{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": "
                           "{\"city\":\"Oslo\"}}]",
                           NULL};
    const char *bad3[] = {"[]", "{\"name\": \"now\", \"arguments\": {}}", NULL};
    check_grammar(&t, IXS_TOOLS_HERMES, good3, bad3);
    check_grammar(&t, IXS_TOOLS_MISTRAL, good3, bad3);
    /* a named function only; Mistral: an array of exactly one */
    t = (ixs_tools_req){tl, IXS_TOOL_CHOICE_NAMED, "get_weather", true};
    const char *good4[] = {"{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Lima\"}}", NULL};
    const char *bad4[] = {"{\"name\": \"now\", \"arguments\": {}}", NULL};
    check_grammar(&t, IXS_TOOLS_HERMES, good4, bad4);
    const char *good5[] = {"[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Lima\"}}]", NULL};
    const char *bad5[] = {"[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}, "
                          "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}]", NULL};
    check_grammar(&t, IXS_TOOLS_MISTRAL, good5, bad5);
    /* auto with a constrained answer: a call, or a document of the schema */
    t = (ixs_tools_req){tl, IXS_TOOL_CHOICE_AUTO, NULL, false};
    static const char doc_schema[] = "{\"type\":\"object\",\"properties\":{\"root\":{\"type\":\"integer\"}},"
                                     "\"required\":[\"root\"],\"additionalProperties\":false}";
    ix_constraint doc = {IX_CONSTRAINT_JSON_SCHEMA, doc_schema, sizeof doc_schema - 1, 0};
    const char *good6[] = {"{\"name\": \"now\", \"arguments\": {}}", "{\"root\": 5}", " {\"root\":-12}", NULL};
    const char *bad6[] = {"{\"root\": \"x\"}", "{\"name\": \"rm\", \"arguments\": {}}", "{}", NULL};
    check_grammar_or(&t, IXS_TOOLS_HERMES, &doc, good6, bad6);
    static const char doc_gbnf[] = "root ::= \"yes\" | \"no\" # root, ws and call are renamed apart\nws ::= \"x\"";
    ix_constraint gdoc = {IX_CONSTRAINT_GRAMMAR, doc_gbnf, sizeof doc_gbnf - 1, 0};
    const char *good7[] = {"yes", "no", "[{\"name\": \"ping\", \"arguments\": {}}]", NULL};
    const char *bad7[] = {"x", "yesno", NULL};
    t.parallel = true;
    check_grammar_or(&t, IXS_TOOLS_GENERIC, &gdoc, good7, bad7);
    const char *good8[] = {"{}", "{\"a\": [1, 2]}", NULL};
    const char *bad8[] = {"[]", "3", NULL};
    ix_constraint odoc = {IX_CONSTRAINT_JSON_OBJECT, NULL, 0, 0};
    check_grammar_or(&t, IXS_TOOLS_MISTRAL, &odoc, good8, bad8);
    /* a schema the grammar module refuses names the function */
    json_t *badtl = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                               "{\"type\":\"object\",\"patternProperties\":{}}}}]", 0, NULL);
    t = (ixs_tools_req){badtl, IXS_TOOL_CHOICE_REQUIRED, NULL, false};
    ix_buf g = {0};
    ix_errbuf err = {{0}};
    assert_int_equal(ix__tools_grammar(&t, IXS_TOOLS_GENERIC, &g, &err), IX_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "function 'f'"));
    assert_non_null(strstr(err.msg, "patternProperties"));
    ix_buf_free(&g);
    json_decref(badtl);
    json_decref(tl);
}

static void expect_req_error(const char *body, const char *param) {
    json_t *req = json_loads(body, 0, NULL);
    assert_non_null(req);
    ixs_tools_req t;
    ixs_err e;
    memset(&e, 0, sizeof e);
    if (ix__tools_parse_request(req, &t, &e) != -1) fail_msg("accepted: %s", body);
    assert_int_equal(e.http, 400);
    assert_string_equal(e.param, param);
    json_decref(req);
}

static void test_request_fields(void **state) {
    (void)state;
    char body[2048];
    snprintf(body, sizeof body, "{\"tools\":%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}},"
             "\"parallel_tool_calls\":false}", k_tools);
    json_t *req = json_loads(body, 0, NULL);
    ixs_tools_req t;
    ixs_err e;
    assert_int_equal(ix__tools_parse_request(req, &t, &e), 0);
    assert_int_equal(t.choice, IXS_TOOL_CHOICE_NAMED);
    assert_string_equal(t.named, "now");
    assert_false(t.parallel);
    json_decref(req);
    req = json_loads("{\"tools\":[]}", 0, NULL);
    assert_int_equal(ix__tools_parse_request(req, &t, &e), 0);
    assert_null(t.tools);
    assert_int_equal(t.choice, IXS_TOOL_CHOICE_NONE);
    json_decref(req);

    expect_req_error("{\"tools\":{}}", "tools");
    expect_req_error("{\"tools\":[{\"type\":\"code_interpreter\"}]}", "tools[0]");
    expect_req_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools[0].function");
    expect_req_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":3}}]}",
                     "tools[0].function");
    expect_req_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"x\":3}}]}", "tools[0].function");
    expect_req_error("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
                     "{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}", "tools");
    expect_req_error("{\"tool_choice\":\"required\"}", "tool_choice");
    snprintf(body, sizeof body, "{\"tools\":%s,\"tool_choice\":\"sometimes\"}", k_tools);
    expect_req_error(body, "tool_choice");
    snprintf(body, sizeof body, "{\"tools\":%s,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"x\"}}}",
             k_tools);
    expect_req_error(body, "tool_choice");
    snprintf(body, sizeof body, "{\"tools\":%s,\"parallel_tool_calls\":1}", k_tools);
    expect_req_error(body, "parallel_tool_calls");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_families),
        cmocka_unit_test(test_forced_grammar),
        cmocka_unit_test(test_request_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
