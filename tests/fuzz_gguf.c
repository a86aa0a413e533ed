/* libFuzzer target for the gguf reader: any input must either fail to open
 * with a status and a message, or open into a file whose every accessor is
 * safe (walk_gguf checks the promises and aborts on a broken one). Also
 * linked into test_gguf_corpus, which replays tests/corpus/gguf/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_test_util.h"
#include "inferx/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t live = ix_mem_live_count();
    ix_gguf *g = NULL;
    ix_errbuf err = {{0}};
    ix_status s = ix_gguf_open_memory(&g, data, size, &err);
    if (s == IX_OK) {
        walk_gguf(g);
        ix_gguf_close(g);
    } else if (g || err.msg[0] == '\0' ||
               (s != IX_ERR_FORMAT && s != IX_ERR_UNSUPPORTED && s != IX_ERR_NOMEM)) {
        abort(); /* a failure must leave no handle and say why */
    }
    if (ix_mem_live_count() != live) abort(); /* leak */
    return 0;
}
