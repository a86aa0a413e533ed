/* template: conformance with the chat templates of the model families inferx
 * serves. Each template is the model's published tokenizer_config.json
 * chat_template, character for character (Llama 2 / 3 / 3.1, Mistral
 * v1 / v3 / v7 (Small 3.1), ChatML, Qwen 2.5 and 3, Phi-3, Gemma 1/2 and 3,
 * Zephyr, DeepSeek LLM and R1, GPT-2's legacy default), rendered with
 * conversations that cover what the server sends: system, user, assistant
 * and tool turns, tool lists, tool calls (arguments as objects, and as JSON
 * strings for DeepSeek), content as a list of parts, a thinking history, the
 * generation prompt on and off, and conversations the template refuses with
 * raise_exception. The expected strings are what Hugging Face renders:
 * `IX_TEMPLATE_DUMP=DIR test_template_models` then
 * `tests/template_ref.py --check DIR/models.json` compares them with jinja2.
 * The GGUF vocabulary of ../shared carries Phi-3's template; it is rendered
 * from the file too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "inferx/gguf.h"
#include "template_test_util.h"

#include "template_models_table.h"

static void test_models(void **state) {
    (void)state;
    for (size_t k = 0; k < IX_ARRAY_LEN(k_cases); k++) tpl_check(&k_cases[k], NULL);
}

/* The template as the GGUF file carries it renders as the table's copy does. */
static void test_gguf_phi3(void **state) {
    (void)state;
    const char *path = IX_SHARED_DIR "/vocab/ggml-vocab-phi-3.gguf";
    ix_gguf *g = NULL;
    if (ix_gguf_open(&g, path, NULL) != IX_OK) {
        printf("skip: %s not found\n", path);
        skip();
    }
    ix_str tmpl;
    assert_int_equal(ix_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL), IX_OK);
    assert_int_equal(tmpl.len, strlen(k_phi3));
    assert_memory_equal(tmpl.ptr, k_phi3, tmpl.len);
    ix_template *t = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_template_create(&t, tmpl.ptr, tmpl.len, NULL, &err), IX_OK);
    json_t *m = json_loads(CONVO, 0, NULL);
    ix_template_vars v = {.messages = m, .bos_token = "<s>", .eos_token = "<|endoftext|>"};
    ix_template_result r;
    assert_int_equal(ix_template_render(t, &v, &r, &err), IX_OK);
    const tpl_case *want = NULL;
    for (size_t k = 0; k < IX_ARRAY_LEN(k_cases); k++)
        if (!strcmp(k_cases[k].name, "phi3 / convo")) want = &k_cases[k];
    assert_non_null(want);
    assert_string_equal(r.text, want->want);
    ix_template_result_free(&r);
    json_decref(m);
    ix_template_destroy(t);
    ix_gguf_close(g);
}

int main(void) {
    if (tpl_dump("models", k_cases, IX_ARRAY_LEN(k_cases), NULL)) return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_gguf_phi3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

