/*
 * The sampler chain of sample.h: bias and penalties on a working copy of the
 * logits, log-probabilities of the model distribution, then greedy or
 * temperature + top-k / top-p / min-p and a seeded draw.
 *
 * Cost per token is O(n_vocab) for the copy, the max and the log-sum-exp, plus
 * O(k log k) for whatever candidates survive the filters; top-p without top-k
 * first tries the best 1024 candidates and sorts everything only if they do
 * not reach the nucleus mass.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/sample.h"

typedef struct cand {
    float logit;
    ix_token id;
} cand;

struct ix_sampler {
    ix_sample_params p;
    ix_logit_bias *bias; /* (p.n_logit_bias) owned copy */
    int32_t n_vocab;
    uint64_t rng[4];     /* xoshiro256** state */
    float *work;         /* (n_vocab) logits after bias and penalties */
    cand *cands;         /* (n_vocab) scratch */
    uint32_t *out_count; /* (n_vocab) occurrences among generated tokens */
    uint8_t *in_prompt;  /* (n_vocab) 1 if the token occurs in the prompt */
    ix_token *seen;      /* (n_vocab) distinct tokens with a count or in the prompt */
    int32_t n_seen;
    uint32_t *mask;      /* ((n_vocab + 31) / 32) allowed tokens of the next sample */
    bool mask_on;
    bool plain_greedy;   /* temperature 0 and nothing that changes or reports logits */
};

ix_sample_params ix_sample_default_params(void) {
    ix_sample_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.seed = 0x1234abcdull;
    return p;
}

ix_status ix_sample_params_check(const ix_sample_params *p, int32_t n_vocab, ix_errbuf *err) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return ix_errf(err, IX_ERR_INVALID, "temperature must be a finite number >= 0, got %g",
                       (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return ix_errf(err, IX_ERR_INVALID, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return ix_errf(err, IX_ERR_INVALID, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return ix_errf(err, IX_ERR_INVALID, "repetition_penalty must be > 0, got %g",
                       (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return ix_errf(err, IX_ERR_INVALID, "presence_penalty must be in [-2, 2], got %g",
                       (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return ix_errf(err, IX_ERR_INVALID, "frequency_penalty must be in [-2, 2], got %g",
                       (double)p->frequency_penalty);
    if (p->n_logprobs < 0 || p->n_logprobs > IX_SAMPLE_MAX_LOGPROBS)
        return ix_errf(err, IX_ERR_INVALID, "logprobs must be in [0, %d], got %d",
                       IX_SAMPLE_MAX_LOGPROBS, p->n_logprobs);
    if (p->n_logit_bias && !p->logit_bias) return ix_errf(err, IX_ERR_INVALID, "logit_bias is NULL");
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const ix_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return ix_errf(err, IX_ERR_INVALID, "logit_bias token %d is outside the vocabulary of %d",
                           b->id, n_vocab);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return ix_errf(err, IX_ERR_INVALID, "logit_bias for token %d must be in [-100, 100], got %g",
                           b->id, (double)b->bias);
    }
    return IX_OK;
}

/* ---- RNG: splitmix64 seeding, xoshiro256** stream --------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double next_unit(uint64_t s[4]) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

static void seed_rng(ix_sampler *s) {
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

/* ---- lifecycle --------------------------------------------------------------- */

ix_status ix_sampler_create(ix_sampler **out, const ix_sample_params *p, int32_t n_vocab,
                            ix_errbuf *err) {
    *out = NULL;
    if (n_vocab <= 0) return ix_errf(err, IX_ERR_INVALID, "vocabulary size %d", n_vocab);
    ix_status st = ix_sample_params_check(p, n_vocab, err);
    if (st != IX_OK) return st;
    ix_sampler *s = ix_calloc(1, sizeof *s);
    if (!s) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->work = ix_malloc(n * sizeof *s->work);
    s->cands = ix_malloc(n * sizeof *s->cands);
    s->out_count = ix_calloc(n, sizeof *s->out_count);
    s->in_prompt = ix_calloc(n, 1);
    s->seen = ix_malloc(n * sizeof *s->seen);
    s->bias = p->n_logit_bias ? ix_malloc(p->n_logit_bias * sizeof *s->bias) : NULL;
    s->mask = ix_malloc((n + 31) / 32 * sizeof *s->mask);
    if (!s->work || !s->cands || !s->out_count || !s->in_prompt || !s->seen || !s->mask ||
        (p->n_logit_bias && !s->bias)) {
        ix_sampler_destroy(s);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory for a sampler over %d tokens", n_vocab);
    }
    if (p->n_logit_bias) memcpy(s->bias, p->logit_bias, p->n_logit_bias * sizeof *s->bias);
    s->p.logit_bias = s->bias;
    s->plain_greedy = p->temperature == 0.0f && !p->logprobs && p->n_logprobs <= 0 && !p->n_logit_bias &&
                      p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f;
    seed_rng(s);
    *out = s;
    return IX_OK;
}

void ix_sampler_destroy(ix_sampler *s) {
    if (!s) return;
    ix_free(s->work);
    ix_free(s->cands);
    ix_free(s->out_count);
    ix_free(s->in_prompt);
    ix_free(s->seen);
    ix_free(s->bias);
    ix_free(s->mask);
    ix_free(s);
}

static void mark_seen(ix_sampler *s, ix_token id) {
    if (!s->in_prompt[id] && s->out_count[id] == 0) s->seen[s->n_seen++] = id;
}

ix_status ix_sampler_add_prompt(ix_sampler *s, const ix_token *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab) return IX_ERR_RANGE;
        mark_seen(s, ids[i]);
        s->in_prompt[ids[i]] = 1;
    }
    return IX_OK;
}

void ix_sampler_accept(ix_sampler *s, ix_token id) {
    if (id < 0 || id >= s->n_vocab) return;
    mark_seen(s, id);
    if (s->out_count[id] < UINT32_MAX) s->out_count[id]++;
}

void ix_sampler_reset(ix_sampler *s) {
    int32_t k = 0;
    for (int32_t i = 0; i < s->n_seen; i++) {
        ix_token id = s->seen[i];
        s->out_count[id] = 0;
        if (s->in_prompt[id]) s->seen[k++] = id;
    }
    s->n_seen = k;
    seed_rng(s);
}

/* ---- the chain ------------------------------------------------------------------- */

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k best of c[0..n) to the front (unordered), 0 < k < n; quickselect,
 * O(n) expected. Keys are distinct (ties broken by id), so this is exact. */
static void select_top(cand *c, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1, nth = k - 1;
    while (lo < hi) {
        swap_cand(&c[lo + (hi - lo) / 2], &c[hi]);
        size_t store = lo;
        for (size_t i = lo; i < hi; i++)
            if (cand_desc(&c[i], &c[hi]) < 0) swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[hi]);
        if (store == nth) return;
        if (store < nth)
            lo = store + 1;
        else
            hi = store - 1;
    }
}

static void apply_bias_and_penalties(ix_sampler *s, const float *logits) {
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof(float));
    for (size_t i = 0; i < s->p.n_logit_bias; i++) s->work[s->bias[i].id] += s->bias[i].bias;
    const ix_sample_params *p = &s->p;
    bool rep = p->repetition_penalty != 1.0f;
    bool pres = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if (!rep && !pres) return;
    for (int32_t i = 0; i < s->n_seen; i++) {
        ix_token id = s->seen[i];
        float *l = &s->work[id];
        if (rep) *l = *l > 0 ? *l / p->repetition_penalty : *l * p->repetition_penalty;
        uint32_t c = s->out_count[id];
        if (c) *l -= p->presence_penalty + p->frequency_penalty * (float)c;
    }
}

/* The largest value of w that is not NaN (-inf if none), as the loop
 * "m = w[i] > m ? w[i] : m" from -inf finds it, in ARGMAX_LANES independent
 * lanes: elementwise, so the compiler keeps them apart (no reordered
 * reduction) and the compares overlap. The one-chain loop is a dependent
 * compare per element. */
#define ARGMAX_LANES 16
static float max_of(const float *w, int32_t n) {
    float lane[ARGMAX_LANES], m = -INFINITY;
    for (int k = 0; k < ARGMAX_LANES; k++) lane[k] = -INFINITY;
    int32_t i = 0;
    for (; i + ARGMAX_LANES <= n; i += ARGMAX_LANES)
        for (int k = 0; k < ARGMAX_LANES; k++) lane[k] = w[i + k] > lane[k] ? w[i + k] : lane[k];
    for (; i < n; i++) m = w[i] > m ? w[i] : m;
    for (int k = 0; k < ARGMAX_LANES; k++) m = lane[k] > m ? lane[k] : m;
    return m;
}

/* The first index of the largest value, as the loop "best = i if w[i] >
 * w[best]" gives it (NaNs never win; w[0] NaN: 0): the maximum, then the
 * first run of lanes holding it. That loop reloads w[best] on every step:
 * ~146 us over 32k logits, this ~10 us. */
static ix_token argmax(const float *w, int32_t n) {
    if (isnan(w[0])) return 0;
    float m = max_of(w, n);
    int32_t i = 0;
    for (; i + ARGMAX_LANES <= n; i += ARGMAX_LANES) {
        int hit = 0;
        for (int k = 0; k < ARGMAX_LANES; k++) hit |= w[i + k] == m;
        if (hit) break;
    }
    for (; i < n; i++)
        if (w[i] == m) return i;
    return 0; /* not reached: m is one of the w (w[0] is not NaN) */
}

static void fill_logprobs(ix_sampler *s, ix_sample_result *r) {
    const float *w = s->work;
    int32_t n = s->n_vocab;
    float m = max_of(w, n);
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += exp((double)(w[i] - m));
    float lse = m + (float)log(z);
    r->logprob = w[r->id] - lse;
    r->n_top = 0;
    if (s->p.n_logprobs <= 0) return;
    /* Insertion into a small sorted list: n_logprobs <= 20. */
    int32_t k = s->p.n_logprobs < n ? s->p.n_logprobs : n;
    for (int32_t i = 0; i < n; i++) {
        if (w[i] == -INFINITY) continue; /* masked out */
        if (r->n_top == k && w[i] <= w[r->top_ids[k - 1]]) continue;
        int32_t j = r->n_top < k ? r->n_top++ : k - 1;
        while (j > 0 && w[r->top_ids[j - 1]] < w[i]) {
            r->top_ids[j] = r->top_ids[j - 1];
            j--;
        }
        r->top_ids[j] = i;
    }
    for (int32_t j = 0; j < r->n_top; j++) r->top_logprobs[j] = w[r->top_ids[j]] - lse;
}

static ix_token draw(ix_sampler *s) {
    const ix_sample_params *p = &s->p;
    float inv_t = 1.0f / p->temperature;
    cand *c = s->cands;
    float m = max_of(s->work, s->n_vocab);
    if (m == -INFINITY) return argmax(s->work, s->n_vocab); /* everything banned */
    m *= inv_t;

    /* min-p: keep p >= min_p * p_max, i.e. logit >= m + log(min_p). */
    float cutoff = p->min_p > 0.0f ? m + logf(p->min_p) : -INFINITY;
    size_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = s->work[i] * inv_t;
        if (l >= cutoff && l > -INFINITY) c[n++] = (cand){l, i};
    }
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        select_top(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
    }
    if (p->top_p < 1.0f) {
        double z = 0;
        for (size_t i = 0; i < n; i++) z += exp((double)(c[i].logit - m));
        size_t head = n;
        if (n > 1024) {
            select_top(c, n, 1024);
            head = 1024;
        }
        for (int attempt = 0; attempt < 2; attempt++) {
            qsort(c, head, sizeof *c, cand_desc);
            double acc = 0;
            size_t keep = 0;
            while (keep < head) {
                acc += exp((double)(c[keep].logit - m));
                keep++;
                if (acc >= p->top_p * z) break;
            }
            if (acc >= p->top_p * z || head == n) {
                n = keep;
                break;
            }
            head = n; /* the nucleus is wider than the first 1024: sort all */
        }
    }
    /* The candidate order is a pure function of the logits, so a seed
     * reproduces its draws without sorting. */
    double z = 0;
    for (size_t i = 0; i < n; i++) z += exp((double)(c[i].logit - m));
    double u = next_unit(s->rng) * z;
    for (size_t i = 0; i < n; i++) {
        u -= exp((double)(c[i].logit - m));
        if (u < 0) return c[i].id;
    }
    return c[n - 1].id;
}

void ix_sampler_set_mask(ix_sampler *s, const uint32_t *mask) {
    s->mask_on = mask != NULL;
    if (mask) memcpy(s->mask, mask, ((size_t)s->n_vocab + 31) / 32 * sizeof *mask);
}

/* Excluded tokens to -inf; returns the first allowed token, or
 * IX_TOKEN_NONE when none is. */
static ix_token apply_mask(ix_sampler *s) {
    ix_token first = IX_TOKEN_NONE;
    for (int32_t w = 0; w * 32 < s->n_vocab; w++) {
        uint32_t m = s->mask[w];
        int32_t end = s->n_vocab - w * 32 < 32 ? s->n_vocab - w * 32 : 32;
        if (end < 32) m &= (1u << end) - 1;
        if (m && first == IX_TOKEN_NONE) first = w * 32 + __builtin_ctz(m);
        if (m == UINT32_MAX) continue;
        for (int32_t b = 0; b < end; b++)
            if (!(m >> b & 1)) s->work[w * 32 + b] = -INFINITY;
    }
    return first;
}

ix_status ix_sampler_sample(ix_sampler *s, const float *logits, ix_sample_result *out) {
    out->logprob = 0.0f;
    out->n_top = 0;
    if (s->plain_greedy && !s->mask_on) {
        out->id = argmax(logits, s->n_vocab); /* the logits as they are, no copy */
        return IX_OK;
    }
    apply_bias_and_penalties(s, logits);
    ix_token allowed = IX_TOKEN_NONE;
    if (s->mask_on) {
        s->mask_on = false;
        if ((allowed = apply_mask(s)) == IX_TOKEN_NONE) {
            out->id = IX_TOKEN_NONE;
            return IX_ERR_STATE;
        }
    }
    out->id = s->p.temperature == 0.0f ? argmax(s->work, s->n_vocab) : draw(s);
    /* Every allowed logit -inf: the draw fell back to an arbitrary id. */
    if (allowed != IX_TOKEN_NONE && s->work[out->id] == -INFINITY) out->id = allowed;
    if (s->p.logprobs || s->p.n_logprobs > 0) fill_logprobs(s, out);
    return IX_OK;
}
