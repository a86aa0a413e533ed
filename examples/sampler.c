/* The sampler alone, on a logits array of your own: greedy, then
 * temperature + top-p with a seed (reproducible), log-probabilities of the
 * best alternatives, and a mask (the constrained-decoding hook) that allows
 * only even token ids.
 *   ./sampler */
#include <stdio.h>

#include <inferx/sample.h>

#define N_VOCAB 8

static int sample_n(const ix_sample_params *p, const float *logits, const uint32_t *mask, int n, ix_token *ids,
                    ix_sample_result *last) {
    ix_errbuf err = {0};
    ix_sampler *s = NULL;
    if (ix_sampler_create(&s, p, N_VOCAB, &err) != IX_OK) return fprintf(stderr, "sampler: %s\n", err.msg), -1;
    for (int i = 0; i < n; i++) {
        if (mask) ix_sampler_set_mask(s, mask);
        if (ix_sampler_sample(s, logits, last) != IX_OK) return ix_sampler_destroy(s), -1;
        ix_sampler_accept(s, last->id);
        ids[i] = last->id;
    }
    ix_sampler_destroy(s);
    return 0;
}

int main(void) {
    const float logits[N_VOCAB] = {1.0f, 3.5f, 0.2f, 3.0f, -1.0f, 2.0f, 0.0f, 2.5f};
    ix_token ids[16], again[16];
    ix_sample_result r;

    ix_sample_params greedy = ix_sample_default_params();
    greedy.temperature = 0;
    greedy.logprobs = true;
    greedy.n_logprobs = 3;
    if (sample_n(&greedy, logits, NULL, 1, ids, &r)) return 1;
    const int greedy_ok = r.id == 1; /* the largest logit */
    printf("greedy: %d (logprob %.3f); best three:", (int)r.id, r.logprob);
    for (int i = 0; i < r.n_top; i++) printf(" %d (%.3f)", (int)r.top_ids[i], r.top_logprobs[i]);
    printf("\n");

    ix_sample_params hot = ix_sample_default_params();
    hot.temperature = 0.8f;
    hot.top_p = 0.9f;
    hot.seed = 42;
    if (sample_n(&hot, logits, NULL, 16, ids, &r) || sample_n(&hot, logits, NULL, 16, again, &r)) return 1;
    int same = 1;
    printf("temperature 0.8, top-p 0.9, seed 42:");
    for (int i = 0; i < 16; i++) printf(" %d", (int)ids[i]), same &= ids[i] == again[i];
    printf("  (same again: %s)\n", same ? "yes" : "no");

    const uint32_t even = 0x55u; /* bits 0, 2, 4, 6 */
    if (sample_n(&hot, logits, &even, 16, ids, &r)) return 1;
    int all_even = 1;
    printf("masked to even ids:");
    for (int i = 0; i < 16; i++) printf(" %d", (int)ids[i]), all_even &= ids[i] % 2 == 0;
    printf("\n");
    return greedy_ok && same && all_even ? 0 : 1;
}
