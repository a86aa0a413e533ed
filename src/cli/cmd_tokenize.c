/* inferx tokenize: text from stdin -> token ids on stdout. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: inferx tokenize [-m MODEL.gguf] [--no-bos] [--special] [--pieces]\n"
            "\n"
            "Reads UTF-8 text from stdin (all of it, newlines included) and prints its token ids\n"
            "space-separated on one line. Works on vocab-only GGUF files.\n"
            "\n"
            "  -m, --model FILE  GGUF file whose tokenizer to use (default: the bundled model,\n"
            "                    %s)\n"
            "  --no-bos          never add the BOS token (by default it is added when the\n"
            "                    vocabulary's tokenizer.ggml.add_bos_token says so, or, without\n"
            "                    that key, when llama.cpp would: SentencePiece vocabularies and\n"
            "                    Llama-3-style BPE ones)\n"
            "  --special         recognise special-token text such as <s> or <|endoftext|> in the\n"
            "                    input; without it such text is tokenized as plain characters\n"
            "  --pieces          print one 'id<TAB>piece' line per token instead\n"
            "  -h, --help        show this help\n",
            ix_cli_default_model());
}

int ix_cli_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool no_bos = false, special = false, pieces = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) {
                fprintf(stderr, "inferx tokenize: %s needs a file name\n", a);
                return 2;
            }
            model = argv[i];
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else if (!strcmp(a, "--pieces")) {
            pieces = true;
        } else {
            fprintf(stderr, "inferx tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!model) model = ix_cli_default_model();

    ix_errbuf err = {{0}};
    ix_tokenizer *tok;
    if (ix_tokenizer_load(&tok, model, &err) != IX_OK) {
        fprintf(stderr, "inferx tokenize: %s: %s\n", model, err.msg);
        return 1;
    }

    ix_buf text = {0};
    char chunk[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0) {
        if (ix_buf_append(&text, chunk, n) != IX_OK) {
            fprintf(stderr, "inferx tokenize: out of memory reading stdin\n");
            rc = 1;
            goto done;
        }
    }
    if (ferror(stdin)) {
        fprintf(stderr, "inferx tokenize: error reading stdin\n");
        rc = 1;
        goto done;
    }

    ix_token_vec ids = {0};
    ix_status s = IX_OK;
    if (!no_bos && ix_tokenizer_add_bos(tok)) s = ix_token_vec_push(&ids, ix_tokenizer_bos(tok));
    if (s == IX_OK)
        s = ix_tokenizer_encode(tok, text.data ? text.data : "", text.len,
                                special ? IX_TOK_PARSE_SPECIAL : 0, &ids, &err);
    else
        snprintf(err.msg, sizeof err.msg, "out of memory");
    if (s == IX_OK && ix_tokenizer_add_eos(tok)) s = ix_token_vec_push(&ids, ix_tokenizer_eos(tok));
    if (s != IX_OK) {
        fprintf(stderr, "inferx tokenize: %s\n", err.msg[0] ? err.msg : ix_status_str(s));
        rc = 1;
    } else if (pieces) {
        for (size_t i = 0; i < ids.n; i++) {
            ix_str p = ix_tokenizer_piece(tok, ids.ids[i]);
            printf("%d\t%.*s\n", ids.ids[i], (int)p.len, p.ptr);
        }
    } else {
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
        printf("\n");
    }
    ix_token_vec_free(&ids);
done:
    ix_buf_free(&text);
    ix_tokenizer_destroy(tok);
    return rc;
}
