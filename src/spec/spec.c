/*
 * spec.h's front: proposer kinds and parameters, the table of proposers
 * (a new one is a file plus a row here), and the arithmetic of how far to
 * speculate. Verification itself is the engine's sampling loop (spec.h says
 * why sampling and comparing is exact for proposals like ours).
 */
#include <math.h>
#include <string.h>

#include "spec/spec_int.h"

static const char *const k_kind[] = {"none", "ngram", "draft", "medusa"};

ix_status ix_spec_kind_parse(const char *name, ix_spec_kind *out) {
    for (size_t i = 0; name && i < IX_ARRAY_LEN(k_kind); i++)
        if (strcmp(name, k_kind[i]) == 0) {
            *out = (ix_spec_kind)i;
            return IX_OK;
        }
    return IX_ERR_INVALID;
}

const char *ix_spec_kind_name(ix_spec_kind k) {
    return (unsigned)k < IX_ARRAY_LEN(k_kind) ? k_kind[k] : "?";
}

ix_spec_params ix_spec_default_params(void) {
    ix_spec_params p;
    memset(&p, 0, sizeof p);
    p.kind = IX_SPEC_NONE;
    p.k = 4;
    p.ngram_max = 3;
    p.ngram_min = 1;
    p.adaptive = true;
    return p;
}

static const ix_proposer_ops *const k_proposers[] = {&ix__proposer_ngram, &ix__proposer_draft,
                                                     &ix__proposer_medusa};

static const ix_proposer_ops *find_ops(ix_spec_kind k) {
    for (size_t i = 0; i < IX_ARRAY_LEN(k_proposers); i++)
        if (k_proposers[i]->kind == k) return k_proposers[i];
    return NULL;
}

ix_status ix_spec_params_check(const ix_spec_params *p, ix_errbuf *err) {
    if ((unsigned)p->kind >= IX_ARRAY_LEN(k_kind))
        return ix_errf(err, IX_ERR_INVALID, "speculation kind %d is not one of ix_spec_kind", (int)p->kind);
    if (p->kind == IX_SPEC_NONE) return IX_OK;
    if (!find_ops(p->kind))
        return ix_errf(err, IX_ERR_UNSUPPORTED, "speculation with '%s' has no proposer in this build",
                       ix_spec_kind_name(p->kind));
    if (p->k < 1 || p->k > IX_SPEC_MAX_K)
        return ix_errf(err, IX_ERR_INVALID, "spec k = %d: must be 1..%d", p->k, IX_SPEC_MAX_K);
    if (p->kind == IX_SPEC_NGRAM &&
        (p->ngram_max < 1 || p->ngram_max > 8 || p->ngram_min < 1 || p->ngram_min > p->ngram_max))
        return ix_errf(err, IX_ERR_INVALID, "ngram sizes %d..%d: need 1 <= min <= max <= 8", p->ngram_min,
                       p->ngram_max);
    if (p->kind == IX_SPEC_DRAFT && (!p->draft_model || !*p->draft_model))
        return ix_errf(err, IX_ERR_INVALID, "speculation with 'draft' needs a draft model (--draft-model FILE)");
    if (p->kind == IX_SPEC_MEDUSA && (!p->medusa_heads || !*p->medusa_heads))
        return ix_errf(err, IX_ERR_INVALID,
                       "speculation with 'medusa' needs a heads file (--medusa HEADS.gguf, from inferx medusa-train)");
    return IX_OK;
}

struct ix_proposer {
    const ix_proposer_ops *ops;
    void *self;
};

ix_status ix_proposer_create(ix_proposer **out, const ix_spec_params *p, const ix_spec_env *env,
                             ix_errbuf *err) {
    *out = NULL;
    ix_status s = ix_spec_params_check(p, err);
    if (s != IX_OK || p->kind == IX_SPEC_NONE) return s;
    ix_proposer *pr = ix_calloc(1, sizeof *pr);
    if (!pr) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    pr->ops = find_ops(p->kind);
    if ((s = pr->ops->create(&pr->self, p, env, err)) != IX_OK) {
        ix_free(pr);
        return s;
    }
    *out = pr;
    return IX_OK;
}

void ix_proposer_destroy(ix_proposer *pr) {
    if (!pr) return;
    pr->ops->destroy(pr->self);
    ix_free(pr);
}

const ix_proposer_ops *ix_proposer_get_ops(const ix_proposer *pr) { return pr->ops; }

ix_status ix_proposer_propose(ix_proposer *pr, ix_spec_seq *seqs, int32_t n) {
    for (int32_t i = 0; i < n; i++) seqs[i].n_out = 0;
    return n > 0 ? pr->ops->propose(pr->self, seqs, n) : IX_OK;
}

void ix_proposer_release(ix_proposer *pr, uint64_t key) {
    if (pr && pr->ops->release) pr->ops->release(pr->self, key);
}

int32_t ix_proposer_max_k(const ix_proposer *pr) {
    int32_t k = pr && pr->ops->max_k ? pr->ops->max_k(pr->self) : IX_SPEC_MAX_K;
    return k < IX_SPEC_MAX_K ? k : IX_SPEC_MAX_K;
}

void ix_proposer_get_stats(const ix_proposer *pr, ix_spec_stats *out) {
    memset(out, 0, sizeof *out);
    if (pr && pr->ops->get_stats) pr->ops->get_stats(pr->self, out);
}

double ix_spec_expected_tokens(double alpha, int32_t k) {
    if (alpha >= 1.0) return (double)k + 1.0;
    if (alpha <= 0.0) return 1.0;
    return (1.0 - pow(alpha, (double)k + 1.0)) / (1.0 - alpha);
}

int32_t ix_spec_choose_k(double alpha, int32_t k_max, double a_ms, double b_ms, int32_t n_decode) {
    return ix_spec_choose_k_cost(alpha, k_max, a_ms, b_ms, 0.0, n_decode);
}

int32_t ix_spec_choose_k_cost(double alpha, int32_t k_max, double a_ms, double b_ms, double guess_ms,
                              int32_t n_decode) {
    return ix_spec_choose_k_steps(alpha, k_max, NULL, 0, a_ms, b_ms, guess_ms, n_decode);
}

/* A step of n tokens (n0 of them the decoding sequences' own): its measured
 * time where the table has one, else the measured n0-token step plus the
 * line's slope for the rest, else the line. */
static double step_cost(const double *step_ms, int32_t n_steps, double a_ms, double b_ms, int32_t n0, int32_t n) {
    if (step_ms && n < n_steps && step_ms[n] > 0) return step_ms[n];
    if (step_ms && n0 < n_steps && step_ms[n0] > 0) return step_ms[n0] + b_ms * (n - n0);
    return a_ms + b_ms * n;
}

int32_t ix_spec_choose_k_steps(double alpha, int32_t k_max, const double *step_ms, int32_t n_steps, double a_ms,
                               double b_ms, double guess_ms, int32_t n_decode) {
    if (k_max <= 0) return 0;
    if (!(guess_ms > 0)) guess_ms = 0;
    if (n_decode < 1) n_decode = 1;
    if (a_ms < 0) a_ms = 0;
    if (!(b_ms > 0)) b_ms = 0;
    /* nothing to go by: no base step, or no slope for sizes the table lacks */
    const bool table_covers = step_ms && n_decode + k_max < n_steps;
    double base = step_cost(step_ms, n_steps, a_ms, b_ms, n_decode, n_decode);
    if (!(base > 0) || (b_ms == 0 && !table_covers)) return k_max;
    /* tokens per ms of the step with this sequence speculating k, the
     * others as they are */
    double best = (double)n_decode / base;
    int32_t best_k = 0;
    for (int32_t k = 1; k <= k_max; k++) {
        /* >= base > 0: measured sizes are positive, the others base + b k */
        double t = step_cost(step_ms, n_steps, a_ms, b_ms, n_decode, n_decode + k);
        double rate = ((double)n_decode - 1.0 + ix_spec_expected_tokens(alpha, k)) / (t + guess_ms * k);
        if (rate > best * (1.0 + 1e-9)) {
            best = rate;
            best_k = k;
        }
    }
    return best_k;
}
