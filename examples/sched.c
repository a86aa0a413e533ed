/* The scheduler alone, driving a "model" of your own: requests of different
 * prompt lengths arrive; each step the scheduler plans which sequences
 * prefill a chunk and which decode one token within the token budget, over a
 * paged KV cache it keeps in bounds (preempting when blocks run out); the
 * callback below stands in for the forward pass (it only records tokens).
 *   ./sched */
#include <stdio.h>
#include <string.h>

#include <inferx/sched.h>

#define N_REQ 4
static ix_kv *kv;

/* The engine's side of admission: a KV sequence per request, prefix reuse. */
static ix_status admit(void *ctx, ix_sched_item *it) {
    (void)ctx;
    int32_t seq, cached = 0;
    ix_status st = ix_kv_seq_create(kv, it->ns, &seq);
    if (st != IX_OK) return st;
    if ((st = ix_kv_seq_adopt_prefix(kv, seq, it->prompt, it->n_prompt, &cached)) != IX_OK) {
        ix_kv_seq_free(kv, seq);
        return st;
    }
    it->seqs[0] = seq;
    it->n_computed[0] = cached;
    return IX_OK;
}

/* "Model": runs one planned piece of work -- the positions' K/V "written",
 * then, when the sequence has computed every token it knows, a token
 * "sampled" (the scheduler counts prompt + generated tokens as known).
 * Returns 1 when the request has its max_new tokens, -1 on a KV error. */
static int run_work(const ix_sched_work *w) {
    ix_sched_item *it = w->item;
    int i = w->seq_index, seq = it->seqs[i];
    int32_t toks[512];
    for (int32_t k = 0; k < w->n_tokens; k++) {
        int32_t pos = it->n_computed[i] + k;
        toks[k] = pos < it->n_prompt ? it->prompt[pos] : 1000 + pos;
    }
    if (ix_kv_seq_append(kv, seq, w->n_tokens, toks) != IX_OK) return -1;
    it->n_computed[i] += w->n_tokens;
    ix_kv_seq_commit(kv, seq, it->n_computed[i]);
    if (it->n_computed[i] == it->n_prompt + it->n_generated[i]) it->n_generated[i]++;
    return it->n_generated[i] >= it->max_new;
}

int main(void) {
    ix_errbuf err = {0};
    ix_kv_params kp = ix_kv_default_params();
    kp.n_layer = 1, kp.n_kv_head = 1, kp.head_dim = 4, kp.block_size = 16, kp.n_blocks = 64;
    if (ix_kv_create(&kp, &kv, &err) != IX_OK) return fprintf(stderr, "sched: %s\n", err.msg), 1;
    ix_sched_params sp = ix_sched_default_params();
    sp.max_num_batched_tokens = 64;
    ix_sched *s = NULL;
    if (ix_sched_create(&s, &sp, kv, &err) != IX_OK) return fprintf(stderr, "sched: %s\n", err.msg), 1;

    static ix_token prompts[N_REQ][300];
    static ix_sched_item items[N_REQ];
    const int32_t lens[N_REQ] = {300, 20, 120, 8};
    for (int r = 0; r < N_REQ; r++) {
        for (int t = 0; t < lens[r]; t++) prompts[r][t] = r * 1000 + t;
        ix_sched_item *it = &items[r];
        memset(it, 0, sizeof *it);
        it->id = (uint64_t)r + 1;
        it->arrival_ns = (uint64_t)r;
        it->n_seqs = 1, it->n_choices = 1;
        for (int k = 0; k < IX_SCHED_MAX_SEQS; k++) it->seqs[k] = -1;
        it->prompt = prompts[r], it->n_prompt = lens[r];
        it->max_new = 6;
        ix_sched_add(s, it);
    }
    int done = 0, step = 0, rc = 0;
    while (done < N_REQ && step < 1000) {
        ix_sched_plan plan;
        if (ix_sched_plan_step(s, (uint64_t)step, admit, NULL, &plan) != IX_OK) return fprintf(stderr, "plan\n"), 1;
        printf("step %2d: %3d tokens:", step, plan.n_tokens);
        for (int w = 0; w < plan.n_work; w++) {
            const ix_sched_work *wk = &plan.work[w];
            printf(" r%d:%s%d", (int)wk->item->id, wk->decode ? "decode" : "prefill+", wk->n_tokens);
            int fin = run_work(wk);
            if (fin < 0) rc = 1;
            if (fin > 0) {
                wk->item->finished[wk->seq_index] = true;
                ix_sched_remove(s, wk->item);
                ix_kv_seq_free(kv, wk->item->seqs[0]);
                done++;
            }
        }
        printf("\n");
        if (plan.n_tokens > sp.max_num_batched_tokens) rc = 1; /* the budget holds */
        ix_sched_observe_step(s, plan.n_tokens, 1000000);
        step++;
    }
    printf("%d requests finished in %d steps\n", done, step);
    if (ix_kv_check(kv) != IX_OK) rc = 1;
    ix_sched_destroy(s);
    ix_kv_destroy(kv);
    return rc || done != N_REQ;
}
