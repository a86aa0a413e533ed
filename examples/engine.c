/* The whole engine in a few lines: load a GGUF model, generate a greedy
 * continuation of a prompt, print it.
 *   ./engine MODEL.gguf "Once upon a time" */
#include <stdio.h>
#include <string.h>

#include <inferx/engine.h>

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: %s MODEL.gguf PROMPT\n", argv[0]), 2;
    ix_errbuf err = {0};
    ix_model *model = NULL;
    ix_engine *engine = NULL;
    ix_token_vec prompt = {0};
    ix_generation gen = {0};
    int rc = 1;
    ix_engine_params ep = ix_engine_default_params();
    ep.kv_mem_bytes = 64u << 20;
    if (ix_model_load(&model, argv[1], &err) != IX_OK || ix_engine_create(&engine, model, &ep, &err) != IX_OK ||
        ix_tokenizer_encode(ix_model_tokenizer(model), argv[2], strlen(argv[2]), IX_TOK_ADD_SPECIAL, &prompt, &err) !=
            IX_OK)
        goto out;
    ix_request_params rq = ix_request_default_params();
    rq.prompt = prompt.ids;
    rq.n_prompt = prompt.n;
    rq.max_tokens = 32;
    rq.sample.temperature = 0; /* greedy */
    if (ix_engine_generate(engine, &rq, 1, &gen, &err) != IX_OK) goto out;
    printf("%s%.*s\n[%s, %d prompt + %d generated tokens]\n", argv[2], (int)gen.text[0].len, gen.text[0].data,
           ix_finish_reason_name(gen.info.reason), gen.info.usage.prompt_tokens, gen.info.usage.completion_tokens);
    rc = 0;
out:
    if (rc) fprintf(stderr, "engine: %s\n", err.msg);
    ix_generation_free(&gen);
    ix_token_vec_free(&prompt);
    ix_engine_destroy(engine);
    ix_model_destroy(model);
    return rc;
}
