/* The tokenizer alone: load the vocabulary of any GGUF file (a model or a
 * vocab-only file), encode a text, print each token, decode it back.
 *   ./tokenizer MODEL.gguf "Hello, world" */
#include <stdio.h>
#include <string.h>

#include <inferx/tokenizer.h>

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: %s MODEL.gguf TEXT\n", argv[0]), 2;
    ix_errbuf err = {0};
    ix_tokenizer *tok = NULL;
    ix_token_vec ids = {0};
    ix_buf text = {0};
    int rc = 1;
    if (ix_tokenizer_load(&tok, argv[1], &err) != IX_OK ||
        ix_tokenizer_encode(tok, argv[2], strlen(argv[2]), IX_TOK_ADD_SPECIAL, &ids, &err) != IX_OK)
        goto out;
    const char *pre = ix_tokenizer_pre_name(tok);
    printf("%s tokenizer (%s pre-tokenizer), %d tokens in the vocabulary\n", ix_tokenizer_model_name(tok),
           pre && *pre ? pre : "default", (int)ix_tokenizer_n_vocab(tok));
    for (size_t i = 0; i < ids.n; i++) {
        ix_str piece = ix_tokenizer_piece(tok, ids.ids[i]);
        printf("%6d  '%.*s'\n", (int)ids.ids[i], (int)piece.len, piece.ptr);
    }
    if (ix_tokenizer_decode(tok, ids.ids, ids.n, 0, &text, &err) != IX_OK) goto out;
    printf("decoded: %s\n", text.data ? text.data : "");
    rc = strcmp(text.data ? text.data : "", argv[2]) != 0; /* the round trip is exact */
    if (rc) snprintf(err.msg, sizeof err.msg, "round trip differs");
out:
    if (rc) fprintf(stderr, "tokenizer: %s\n", err.msg);
    ix_buf_free(&text);
    ix_token_vec_free(&ids);
    ix_tokenizer_destroy(tok);
    return rc;
}
