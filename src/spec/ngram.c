/*
 * The ngram proposer (prompt lookup decoding): the sequence's last n tokens
 * are looked up earlier in the same sequence -- prompt and output so far --
 * and the tokens that followed the latest occurrence are the guess (read on
 * through the guess itself when they reach the end). It pays
 * where the output repeats its input: edits, summaries that quote, code
 * completion, retrieval answers. No state, no model: a proposal costs a scan
 * of the sequence (microseconds next to a forward pass).
 */
#include <string.h>

#include "spec/spec_int.h"

typedef struct ngram {
    int32_t min_n, max_n;
} ngram;

int32_t ix_spec_ngram_lookup(const ix_token *toks, int32_t n, int32_t min_n, int32_t max_n, int32_t k,
                             ix_token *out) {
    if (k <= 0 || min_n < 1) return 0;
    for (int32_t len = max_n; len >= min_n; len--) {
        if (len >= n) continue;
        const ix_token *suffix = toks + n - len;
        /* latest earlier occurrence first: recent text predicts best */
        for (int32_t start = n - len - 1; start >= 0; start--) {
            if (memcmp(toks + start, suffix, (size_t)len * sizeof *toks) != 0) continue;
            /* what followed, read on through the guess itself: a
             * continuation that reaches the end repeats with the period
             * n - from (an output in a loop gets whole guesses) */
            int32_t from = start + len;
            for (int32_t j = 0; j < k; j++) out[j] = from + j < n ? toks[from + j] : out[from + j - n];
            return k;
        }
    }
    return 0;
}

static ix_status ngram_create(void **self, const ix_spec_params *p, const ix_spec_env *env, ix_errbuf *err) {
    (void)env;
    ngram *g = ix_calloc(1, sizeof *g);
    if (!g) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    g->min_n = p->ngram_min;
    g->max_n = p->ngram_max;
    *self = g;
    return IX_OK;
}

static void ngram_destroy(void *self) { ix_free(self); }

static ix_status ngram_propose(void *self, ix_spec_seq *seqs, int32_t n) {
    const ngram *g = self;
    for (int32_t i = 0; i < n; i++)
        seqs[i].n_out =
            ix_spec_ngram_lookup(seqs[i].tokens, seqs[i].n_tokens, g->min_n, g->max_n, seqs[i].k, seqs[i].out);
    return IX_OK;
}

const ix_proposer_ops ix__proposer_ngram = {
    .name = "ngram",
    .kind = IX_SPEC_NGRAM,
    .wants_hidden = false,
    .create = ngram_create,
    .destroy = ngram_destroy,
    .propose = ngram_propose,
    .release = NULL,
    .get_stats = NULL,
};
