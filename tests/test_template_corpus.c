/* Replays every file under tests/corpus/template/ through the template fuzz
 * target's body, so the corpus (seeds plus any crash reproducers added later)
 * runs in every ordinary build, sanitizers included. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CORPUS IX_SOURCE_DIR "/tests/corpus/template"

int main(void) {
    DIR *d = opendir(CORPUS);
    if (!d) {
        fprintf(stderr, "test_template_corpus: cannot open %s\n", CORPUS);
        return 1;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", CORPUS, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "test_template_corpus: cannot read %s\n", path);
            closedir(d);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        /* an exact-size copy, so a read one past the end is caught under ASan */
        uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
        if (!data || (size > 0 && fread(data, 1, (size_t)size, f) != (size_t)size)) abort();
        fclose(f);
        LLVMFuzzerTestOneInput(data, (size_t)(size > 0 ? size : 0));
        free(data);
        n++;
    }
    closedir(d);
    printf("test_template_corpus: %d files replayed\n", n);
    return n > 0 ? 0 : 1;
}
