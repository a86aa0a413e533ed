/* The paged KV cache manager alone, as another engine would use it: a
 * sequence computes a prompt and leaves; a second request with the same
 * prefix finds its full blocks in the prefix cache; a fork shares every block
 * and copies the partial last one on its first write. No model: "computing"
 * a position writes its token id into the K slice, so sharing is visible.
 *   ./kv */
#include <stdio.h>
#include <string.h>

#include <inferx/kv.h>

#define N_LAYER 2
#define N_KV_HEAD 2
#define HEAD_DIM 8
#define BLOCK 16

static ix_kv *kv;

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        ix_status st_ = (call);                                                                                        \
        if (st_ != IX_OK) return fprintf(stderr, "kv: %s: %s\n", #call, ix_kv_errmsg(kv)), 1;                      \
    } while (0)

/* Writes K of positions [from, to) of seq: element 0 of head 0, layer 0. */
static void compute(int32_t seq, int32_t from, int32_t to, const int32_t *tokens) {
    ix_kv_layout lo;
    ix_kv_get_layout(kv, &lo);
    int32_t n_blocks;
    const int32_t *table = ix_kv_seq_block_table(kv, seq, &n_blocks);
    for (int32_t p = from; p < to; p++) {
        float *k = ix_kv_block_k(kv, 0, table[p / BLOCK]);
        k[(size_t)(p % BLOCK) * lo.token_stride_bytes / sizeof(float)] = (float)tokens[p];
    }
}

int main(void) {
    ix_errbuf err = {0};
    ix_kv_params p = ix_kv_default_params();
    p.n_layer = N_LAYER, p.n_kv_head = N_KV_HEAD, p.head_dim = HEAD_DIM;
    p.dtype = IX_KV_F32, p.block_size = BLOCK, p.n_blocks = 16;
    if (ix_kv_create(&p, &kv, &err) != IX_OK) return fprintf(stderr, "kv: %s\n", err.msg), 1;

    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = 100 + i;

    /* request 1: computes the whole prompt, then finishes */
    int32_t a, n_cached;
    CHECK(ix_kv_seq_create(kv, 0, &a));
    CHECK(ix_kv_seq_append(kv, a, 40, prompt));
    compute(a, 0, 40, prompt);
    CHECK(ix_kv_seq_commit(kv, a, 40));
    CHECK(ix_kv_seq_free(kv, a));

    /* request 2: same prompt; two full blocks (32 tokens) come from the cache */
    int32_t b;
    CHECK(ix_kv_seq_create(kv, 0, &b));
    CHECK(ix_kv_seq_adopt_prefix(kv, b, prompt, 40, &n_cached));
    CHECK(ix_kv_seq_append(kv, b, 40 - n_cached, prompt + n_cached));
    compute(b, n_cached, 40, prompt);
    CHECK(ix_kv_seq_commit(kv, b, 40));
    printf("prefix hit: %d of 40 prompt tokens\n", n_cached);

    /* a parallel sample: fork shares all three blocks; its first token copies
     * the partial third block (copy-on-write) and leaves the parent's intact */
    int32_t c, next = 7;
    CHECK(ix_kv_seq_fork(kv, b, &c));
    CHECK(ix_kv_seq_append(kv, c, 1, &next));
    int32_t nb, nc;
    const int32_t *tb = ix_kv_seq_block_table(kv, b, &nb);
    int32_t b_third = tb[2], b_first = tb[0];
    const int32_t *tc = ix_kv_seq_block_table(kv, c, &nc);
    printf("fork: block 0 shared: %s, block 2 copied: %s\n", tc[0] == b_first ? "yes" : "no",
           tc[2] != b_third ? "yes" : "no");

    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    printf("blocks: %lld used, %lld cached, %lld free; %lld copy-on-write copies\n", (long long)st.n_blocks_used,
           (long long)st.n_blocks_cached, (long long)st.n_blocks_free, (long long)st.n_cow_copies);
    CHECK(ix_kv_check(kv));
    int ok = n_cached == 32 && tc[0] == b_first && tc[2] != b_third && st.n_cow_copies == 1;
    CHECK(ix_kv_seq_free(kv, c));
    CHECK(ix_kv_seq_free(kv, b));
    ix_kv_destroy(kv);
    return ok ? 0 : 1;
}
