/* tokenize_bench: encoding throughput in MB/s on 1 MB and 8 MB of text for each
 * vocabulary, to show the encoder is linear: the two figures must be close
 * (a quadratic merge loop would make the 8 MB figure ~8x lower).
 *
 * usage: tokenize_bench [FILE.gguf ...]   (default: the bundled model and the
 * vocab files of ../shared/vocab when present). Text: ../shared/models/
 * heldout.txt plus a multilingual / code / emoji block, repeated to size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/tokenizer.h"

static const char k_mix[] =
    "Ünïcödé naïve café straße — 中文测试，日本語のテキスト、한국어 텍스트。 "
    "emoji 😀🎉 👨‍👩‍👧‍👦 flags 🇫🇷 numbers 12345 3.14159 0xDEADBEEF\n"
    "int main(void) {\n    return printf(\"%d\\n\", a[i] >> 2) || x != y;\n}\n"
    "    indented    with   runs  of   spaces\t\ttabs\n\n\n";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *make_text(const char *seed, size_t seed_len, size_t size) {
    char *buf = malloc(size + 1);
    size_t n = 0;
    while (n < size) {
        size_t k = seed_len < size - n ? seed_len : size - n;
        memcpy(buf + n, seed, k);
        n += k;
    }
    /* Do not end inside a UTF-8 character. */
    while (n > 0 && ((unsigned char)buf[n - 1] & 0xc0) == 0x80) n--;
    if (n > 0 && (unsigned char)buf[n - 1] >= 0xc0) n--;
    buf[n] = '\0';
    return buf;
}

static double mb_per_s(const ix_tokenizer *t, const char *text, size_t len, size_t *n_tokens) {
    double runs[3];
    for (int r = 0; r < 3; r++) {
        ix_token_vec ids = {0};
        uint64_t t0 = ix_time_ns();
        if (ix_tokenizer_encode(t, text, len, 0, &ids, NULL) != IX_OK) {
            fprintf(stderr, "encode failed\n");
            exit(1);
        }
        uint64_t t1 = ix_time_ns();
        *n_tokens = ids.n;
        ix_token_vec_free(&ids);
        runs[r] = (double)len / 1e6 / ((double)(t1 - t0) / 1e9);
    }
    qsort(runs, 3, sizeof runs[0], cmp_double);
    return runs[1];
}

int main(int argc, char **argv) {
    const char *shared = IX_SHARED_DIR;
    char seed_path[1024];
    snprintf(seed_path, sizeof seed_path, "%s/models/heldout.txt", shared);
    FILE *f = fopen(seed_path, "rb");
    char *seed;
    size_t seed_len;
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        seed = malloc((size_t)n + sizeof k_mix);
        seed_len = fread(seed, 1, (size_t)n, f);
        fclose(f);
    } else {
        seed = malloc(sizeof k_mix);
        seed_len = 0;
    }
    memcpy(seed + seed_len, k_mix, sizeof k_mix - 1);
    seed_len += sizeof k_mix - 1;

    const char *defaults[] = {
        IX_SOURCE_DIR "/models/target-f16.gguf",
        IX_SHARED_DIR "/vocab/ggml-vocab-llama-spm.gguf",
        IX_SHARED_DIR "/vocab/ggml-vocab-gpt-2.gguf",
        IX_SHARED_DIR "/vocab/ggml-vocab-falcon.gguf",
        IX_SHARED_DIR "/vocab/ggml-vocab-starcoder.gguf",
        IX_SHARED_DIR "/vocab/ggml-vocab-phi-3.gguf",
    };
    const char **files = argc > 1 ? (const char **)argv + 1 : defaults;
    int n_files = argc > 1 ? argc - 1 : (int)IX_ARRAY_LEN(defaults);

    char *small = make_text(seed, seed_len, 1u << 20), *large = make_text(seed, seed_len, 8u << 20);
    size_t small_len = strlen(small), large_len = strlen(large);
    printf("%-28s %6s %14s %14s %12s\n", "vocabulary", "kind", "1 MB (MB/s)", "8 MB (MB/s)",
           "8MB / 1MB");
    for (int i = 0; i < n_files; i++) {
        ix_tokenizer *t;
        ix_errbuf err = {{0}};
        if (ix_tokenizer_load(&t, files[i], &err) != IX_OK) {
            printf("%-28s skipped: %s\n", strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i],
                   err.msg);
            continue;
        }
        size_t n1, n8;
        double a = mb_per_s(t, small, small_len, &n1), b = mb_per_s(t, large, large_len, &n8);
        const char *name = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
        printf("%-28s %6s %14.2f %14.2f %12.2f   (%zu / %zu tokens)\n", name,
               ix_tokenizer_get_kind(t) == IX_TOKENIZER_SPM ? "spm" : "bpe", a, b, b / a, n1, n8);
        ix_tokenizer_destroy(t);
    }
    free(small);
    free(large);
    free(seed);
    return 0;
}
