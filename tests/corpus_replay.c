/* Replays every file under tests/corpus/IX_CORPUS/ through a fuzz target's
 * body (LLVMFuzzerTestOneInput, linked beside this file), so the corpus
 * (seeds plus any crash reproducers added later) runs in every ordinary
 * build, sanitizers included. One test per fuzz target: test_gguf_corpus
 * (IX_CORPUS "gguf"), test_template_corpus (IX_CORPUS "template"). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_test_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CORPUS IX_SOURCE_DIR "/tests/corpus/" IX_CORPUS

int main(void) {
    DIR *d = opendir(CORPUS);
    if (!d) {
        fprintf(stderr, "corpus replay: cannot open %s\n", CORPUS);
        return 1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CORPUS, e->d_name);
        size_t size = 0;
        uint8_t *data = read_whole_file(path, &size);
        if (!data) {
            fprintf(stderr, "corpus replay: cannot read %s\n", path);
            closedir(d);
            return 1;
        }
        /* An exact-size copy, so a read one past the end is caught under ASan. */
        uint8_t *exact = malloc(size ? size : 1);
        if (!exact) abort();
        memcpy(exact, data, size);
        free(data);
        LLVMFuzzerTestOneInput(exact, size);
        free(exact);
        n++;
    }
    closedir(d);
    printf("corpus replay: %d files of %s replayed\n", n, CORPUS);
    return n > 0 ? 0 : 1;
}
