/* medusa: heads without a model.
 *   - new heads predict what the output head does (W = 0)
 *   - training learns a synthetic mapping (each head its own rule) to full
 *     accuracy, with the loss falling, own and shared output heads
 *   - save / load round trip: the same guesses; a shared-output file needs
 *     the output head again
 *   - bad files and arguments are refused with a message */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/gguf.h"
#include "inferx/medusa.h"

enum { N = 16, V = 12, H = 2, ROWS = 48 };

static float frand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (float)((*s >> 11) & 0xFFFFFF) / (float)0xFFFFFF * 2.0f - 1.0f;
}

static void setup_data(float *u, float *hid, ix_token *lab) {
    uint64_t s = 42;
    for (int i = 0; i < V * N; i++) u[i] = frand(&s) * 0.5f;
    for (int r = 0; r < ROWS; r++) {
        for (int k = 0; k < N; k++) hid[r * N + k] = frand(&s);
        /* head 0: the largest of the first V features; head 1: the smallest */
        int hi = 0, lo = 0;
        for (int k = 1; k < V; k++) {
            if (hid[r * N + k] > hid[r * N + hi]) hi = k;
            if (hid[r * N + k] < hid[r * N + lo]) lo = k;
        }
        lab[r * H] = hi;
        lab[r * H + 1] = r % 5 == 0 ? -1 : lo; /* some rows unlabelled for head 1 */
    }
}

static int accuracy(const ix_medusa *m, const float *hid, const ix_token *lab, int head) {
    float scratch[V + N];
    int ok = 0;
    for (int r = 0; r < ROWS; r++) {
        ix_token g[H];
        ix_medusa_propose(m, hid + r * N, H, g, scratch);
        ok += lab[r * H + head] < 0 || g[head] == lab[r * H + head];
    }
    return ok;
}

static void train(bool shared) {
    float u[V * N], hid[ROWS * N];
    ix_token lab[ROWS * H];
    setup_data(u, hid, lab);
    ix_medusa *m = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_medusa_create(&m, H, N, V, u, shared, &err), IX_OK);
    /* untrained: every head is the output head */
    float scratch[V + N], logits[V + N];
    for (int r = 0; r < 4; r++) {
        ix_medusa_logits(m, 1, hid + r * N, logits);
        for (int v = 0; v < V; v++) {
            float d = 0;
            for (int k = 0; k < N; k++) d += u[v * N + k] * (hid[r * N + k] + 0.0f);
            /* a = h + SiLU(0) = h */
            assert_float_equal(logits[v], d, 1e-4);
        }
    }
    float first[H], loss[H];
    for (int step = 0; step < 600; step++) {
        assert_int_equal(ix_medusa_train_step(m, hid, lab, ROWS, 0.02f, loss), IX_OK);
        if (step == 0) memcpy(first, loss, sizeof first);
    }
    for (int i = 0; i < H; i++) assert_true(loss[i] < first[i] * 0.25f);
    /* Own output heads can fit the rules exactly; through a frozen random
     * output head only as far as its rows allow. */
    int need = shared ? ROWS * 9 / 10 : ROWS;
    assert_true(accuracy(m, hid, lab, 0) >= need);
    assert_true(accuracy(m, hid, lab, 1) >= need);

    /* round trip */
    char path[256];
    snprintf(path, sizeof path, "%s/medusa_%d.gguf", IX_BINARY_DIR, shared);
    assert_int_equal(ix_medusa_save(m, path, "test", &err), IX_OK);
    ix_medusa *m2 = NULL;
    assert_int_equal(ix_medusa_load(&m2, path, &err), IX_OK);
    assert_int_equal(ix_medusa_n_heads(m2), H);
    assert_int_equal(ix_medusa_shared_output(m2), shared);
    if (shared) ix_medusa_set_shared_output(m2, u);
    for (int r = 0; r < ROWS; r++) {
        ix_token a[H], b[H];
        ix_medusa_propose(m, hid + r * N, H, a, scratch);
        ix_medusa_propose(m2, hid + r * N, H, b, scratch);
        assert_memory_equal(a, b, sizeof a);
    }
    ix_medusa_destroy(m2);
    ix_medusa_destroy(m);
    remove(path);
}

static void test_train_own(void **state) {
    (void)state;
    train(false);
}

static void test_train_shared(void **state) {
    (void)state;
    train(true);
}

static void test_bad(void **state) {
    (void)state;
    float u[V * N] = {0};
    ix_medusa *m = NULL;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_medusa_create(&m, 0, N, V, u, false, &err), IX_ERR_INVALID);
    assert_int_equal(ix_medusa_create(&m, IX_MEDUSA_MAX_HEADS + 1, N, V, u, false, &err), IX_ERR_INVALID);
    assert_int_equal(ix_medusa_create(&m, 2, N, V, NULL, false, &err), IX_ERR_INVALID);
    assert_null(m);
    /* a file that is not a heads file */
    char path[256];
    snprintf(path, sizeof path, "%s/medusa_bad.gguf", IX_BINARY_DIR);
    ix_gguf_writer *w = ix_gguf_writer_create();
    ix_gguf_writer_set_str(w, "general.architecture", "llama");
    assert_int_equal(ix_gguf_writer_write(w, path), IX_OK);
    ix_gguf_writer_destroy(w);
    assert_int_equal(ix_medusa_load(&m, path, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "medusa"));
    /* a tensor of the wrong shape */
    w = ix_gguf_writer_create();
    ix_gguf_writer_set_str(w, "general.architecture", "medusa");
    ix_gguf_writer_set_u32(w, "medusa.n_heads", 1);
    ix_gguf_writer_set_u32(w, "medusa.n_embd", N);
    ix_gguf_writer_set_u32(w, "medusa.n_vocab", V);
    ix_gguf_writer_set_bool(w, "medusa.shared_output", true);
    int64_t ne[2] = {N, N - 1}, nb[1] = {N};
    static float zeros[N * N];
    ix_gguf_writer_add_tensor(w, "medusa.0.res.weight", IX_DTYPE_F32, 2, ne, zeros);
    ix_gguf_writer_add_tensor(w, "medusa.0.res.bias", IX_DTYPE_F32, 1, nb, zeros);
    assert_int_equal(ix_gguf_writer_write(w, path), IX_OK);
    ix_gguf_writer_destroy(w);
    assert_int_equal(ix_medusa_load(&m, path, &err), IX_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "medusa.0.res.weight"));
    assert_null(m);
    /* a missing key */
    w = ix_gguf_writer_create();
    ix_gguf_writer_set_str(w, "general.architecture", "medusa");
    ix_gguf_writer_set_u32(w, "medusa.n_heads", 1);
    assert_int_equal(ix_gguf_writer_write(w, path), IX_OK);
    ix_gguf_writer_destroy(w);
    assert_int_equal(ix_medusa_load(&m, path, &err), IX_ERR_FORMAT);
    assert_true(err.msg[0] != '\0');
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_own),
        cmocka_unit_test(test_train_shared),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
