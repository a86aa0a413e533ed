/*
 * The Medusa proposer: heads on the target's last hidden state (a heads
 * file of `inferx medusa-train`, inferx/medusa.h) guess the tokens after
 * the one the target just produced. The engine hands each speculating
 * sequence the final-norm hidden state h of the row whose logits gave its
 * last token -- position t, kept from the same forward pass (wants_hidden)
 * -- and head i's top-1 token is the guess for position t + 2 + i: the
 * top-1 chain of heads 0..k-1, verified like any other proposer's guesses
 * (one token per place, q one-hot: spec.h). A sequence without a hidden
 * state for its current last token (none kept yet) guesses nothing.
 *
 * One propose call runs the heads as matmuls over all of the step's
 * sequences at once, on the engine's worker pool: the residual matmuls of
 * every head in one pool run (they share their input X, the rows' hidden
 * states), then per head i, over the rows whose k > i,
 *     Z_i = X W_i^T,  A = X + SiLU(Z_i + b_i),  L = A U_i^T,  guess = argmax L
 * where U_i is the head's own output matrix (converted to F16 and packed at
 * load, as the loader packs a target's F16 weights: half the bytes of F32
 * and the packed kernel; a guess's logits move by F16 rounding, which can
 * change a guess, never the output) or, for a shared-output
 * file, the target's own output head in its own weight type
 * (ix_model_output_head: a quantized head goes through the quantized
 * matmul, as the target's logits do).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "inferx/medusa.h"
#include "spec/spec_int.h"

typedef struct medusa {
    ix_medusa *heads;
    const ix_model *target;
    ix_pool *pool;
    int32_t n_heads, n, V;
    bool shared;
    void *u16[IX_MEDUSA_MAX_HEADS]; /* own output heads, F16 packed; NULL: run as F32 */
    /* one call's rows: (cap, n) inputs and head states; (n_heads, cap, n)
     * pre-activations; (cap, V) logits; (cap) the query of each row and
     * the query of each row of a head's pass */
    float *x, *z, *a, *logits;
    int32_t *q, *qa;
    int32_t cap;
    ix_spec_stats st;
} medusa;

static void medusa_destroy(void *self) {
    medusa *m = self;
    if (!m) return;
    ix_medusa_destroy(m->heads);
    for (int i = 0; i < IX_MEDUSA_MAX_HEADS; i++) ix_aligned_free(m->u16[i]);
    ix_free(m->x);
    ix_free(m->z);
    ix_free(m->a);
    ix_free(m->logits);
    ix_free(m->q);
    ix_free(m->qa);
    ix_free(m);
}

/* Own output heads as packed F16 (when the kernels pack that shape). */
static ix_status pack_heads(medusa *m, ix_errbuf *err) {
    size_t V = (size_t)m->V, n = (size_t)m->n;
    if (!ix_kernels_packable(IX_DTYPE_F16, V, n)) return IX_OK;
    uint16_t *h16 = ix_malloc(V * n * sizeof *h16);
    if (!h16) return ix_errf(err, IX_ERR_NOMEM, "out of memory for the medusa output heads");
    ix_status s = IX_OK;
    for (int32_t i = 0; i < m->n_heads && s == IX_OK; i++) {
        const float *w, *b, *u;
        ix_medusa_head(m->heads, i, &w, &b, &u);
        ix_kernels_fp32_to_fp16(u, h16, V * n);
        if (!(m->u16[i] = ix_aligned_alloc(64, ix_kernels_packed_bytes(IX_DTYPE_F16, V, n))))
            s = ix_errf(err, IX_ERR_NOMEM, "out of memory for the medusa output heads");
        else if ((s = ix_kernels_pack(IX_DTYPE_F16, h16, 0, V, n, 0, V, m->u16[i])) != IX_OK)
            ix_errf(err, s, "packing medusa output head %d failed", i);
    }
    ix_free(h16);
    return s;
}

static ix_status medusa_create(void **self, const ix_spec_params *p, const ix_spec_env *env, ix_errbuf *err) {
    *self = NULL;
    if (!env || !env->target)
        return ix_errf(err, IX_ERR_INVALID, "the medusa proposer needs the target model (ix_spec_env.target)");
    if (ix_model_is_sharded(env->target))
        return ix_errf(err, IX_ERR_UNSUPPORTED,
                       "speculation with 'medusa' does not run tensor- or pipeline-parallel (--tp, --pp): use ngram "
                       "or draft there");
    medusa *m = ix_calloc(1, sizeof *m);
    if (!m) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    ix_status s = ix_medusa_load(&m->heads, p->medusa_heads, err);
    if (s != IX_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        medusa_destroy(m);
        return ix_errf(err, s, "medusa heads %s: %s", p->medusa_heads, msg);
    }
    const ix_model_hparams *hp = ix_model_get_hparams(env->target);
    m->n_heads = ix_medusa_n_heads(m->heads);
    m->n = ix_medusa_n_embd(m->heads);
    m->V = ix_medusa_n_vocab(m->heads);
    m->shared = ix_medusa_shared_output(m->heads);
    if (m->n != hp->n_embd || m->V != hp->n_vocab) {
        ix_errf(err, IX_ERR_INVALID,
                "medusa heads %s are for a model of n_embd %d and %d logits; the target has n_embd %d and %d "
                "logits: train heads for this model (inferx medusa-train -m MODEL)",
                p->medusa_heads, m->n, m->V, hp->n_embd, hp->n_vocab);
        medusa_destroy(m);
        return IX_ERR_INVALID;
    }
    m->target = env->target;
    m->pool = env->pool;
    if (!m->shared && (s = pack_heads(m, err)) != IX_OK) {
        medusa_destroy(m);
        return s;
    }
    IX_LOGI("spec: medusa heads %s (%d heads, %s output head)", p->medusa_heads, m->n_heads,
            m->shared ? "the target's" : "their own");
    *self = m;
    return IX_OK;
}

static int32_t medusa_max_k(const void *self) { return ((const medusa *)self)->n_heads; }

static bool reserve_rows(medusa *m, int32_t rows) {
    if (rows <= m->cap) return true;
    size_t n = (size_t)m->n, r = (size_t)rows;
    float *x = ix_realloc(m->x, r * n * sizeof *x);
    if (x) m->x = x;
    float *z = ix_realloc(m->z, (size_t)m->n_heads * r * n * sizeof *z);
    if (z) m->z = z;
    float *a = ix_realloc(m->a, r * n * sizeof *a);
    if (a) m->a = a;
    float *l = ix_realloc(m->logits, r * (size_t)m->V * sizeof *l);
    if (l) m->logits = l;
    int32_t *q = ix_realloc(m->q, r * sizeof *q);
    if (q) m->q = q;
    int32_t *qa = ix_realloc(m->qa, r * sizeof *qa);
    if (qa) m->qa = qa;
    if (!x || !z || !a || !l || !q || !qa) return false;
    m->cap = rows;
    return true;
}

static ix_matmul f32_matmul(const medusa *m, const float *w, const float *x, size_t M, size_t N, float *y) {
    return (ix_matmul){.w_type = IX_DTYPE_F32, .w = w, .x = x, .y = y, .M = M, .N = N, .K = (size_t)m->n};
}

/* Z_i = X W_i^T for heads 0..n_h-1 over the M rows of x: up to
 * IX_KERNELS_MATMUL_MAX heads per pool run (one meeting of the threads). */
static ix_status residual_matmuls(medusa *m, int32_t n_h, int32_t M) {
    size_t zs = (size_t)m->cap * (size_t)m->n;
    for (int32_t i0 = 0; i0 < n_h; i0 += IX_KERNELS_MATMUL_MAX) {
        ix_matmul mms[IX_KERNELS_MATMUL_MAX];
        int32_t cnt = n_h - i0 < IX_KERNELS_MATMUL_MAX ? n_h - i0 : IX_KERNELS_MATMUL_MAX;
        for (int32_t j = 0; j < cnt; j++) {
            const float *w, *b, *u;
            ix_medusa_head(m->heads, i0 + j, &w, &b, &u);
            mms[j] = f32_matmul(m, w, m->x, (size_t)M, (size_t)m->n, m->z + (size_t)(i0 + j) * zs);
        }
        ix_status s = ix_kernels_matmul_n(mms, (size_t)cnt, m->pool);
        if (s != IX_OK) return s;
    }
    return IX_OK;
}

/* Head i over the rows of x whose query wants more than i guesses (kq):
 * A = X + SiLU(Z_i + b_i) packed, its logits, and each row's top-1 token
 * into its query's out[i]. */
static ix_status run_head(medusa *m, int32_t i, ix_spec_seq *seqs, const int32_t *kq, int32_t M) {
    const float *w, *b, *u;
    ix_medusa_head(m->heads, i, &w, &b, &u);
    size_t n = (size_t)m->n;
    const float *z = m->z + (size_t)i * (size_t)m->cap * n;
    int32_t Ma = 0;
    for (int32_t r = 0; r < M; r++) {
        if (kq[m->q[r]] <= i) continue;
        const float *xr = m->x + (size_t)r * n, *zr = z + (size_t)r * n;
        float *ar = m->a + (size_t)Ma * n;
        for (size_t c = 0; c < n; c++) {
            float zc = zr[c] + b[c];
            ar[c] = xr[c] + zc / (1.0f + expf(-zc));
        }
        m->qa[Ma++] = m->q[r];
    }
    if (Ma == 0) return IX_OK;
    ix_status s;
    if (m->shared) {
        s = ix_model_output_head(m->target, m->pool, m->a, (size_t)Ma, m->logits, NULL);
    } else {
        ix_matmul mm = f32_matmul(m, u, m->a, (size_t)Ma, (size_t)m->V, m->logits);
        if (m->u16[i]) mm.w_type = IX_DTYPE_F16, mm.w = m->u16[i], mm.w_packed = true;
        s = ix_kernels_matmul(&mm, m->pool);
    }
    if (s != IX_OK) return s;
    for (int32_t r = 0; r < Ma; r++) {
        const float *row = m->logits + (size_t)r * (size_t)m->V;
        int32_t best = 0;
        for (int32_t v = 1; v < m->V; v++)
            if (row[v] > row[best]) best = v;
        ix_spec_seq *x = &seqs[m->qa[r]];
        x->out[i] = best;
        x->n_out = i + 1;
    }
    m->st.n_tokens += (uint64_t)Ma;
    return IX_OK;
}

static ix_status medusa_propose(void *self, ix_spec_seq *seqs, int32_t n) {
    medusa *m = self;
    uint64_t t0 = ix_time_ns();
    if (!reserve_rows(m, n)) return IX_ERR_NOMEM;
    /* the rows: every query with a hidden state, in order; kq: its guesses */
    int32_t k_most = 0, M = 0, kq_local[64];
    int32_t *kq = n <= 64 ? kq_local : ix_malloc((size_t)n * sizeof *kq);
    if (!kq) return IX_ERR_NOMEM;
    for (int32_t q = 0; q < n; q++) {
        const ix_spec_seq *x = &seqs[q];
        kq[q] = x->hidden ? (x->k < m->n_heads ? x->k : m->n_heads) : 0;
        if (kq[q] <= 0) continue;
        if (kq[q] > k_most) k_most = kq[q];
        memcpy(m->x + (size_t)M * (size_t)m->n, x->hidden, (size_t)m->n * sizeof *m->x);
        m->q[M++] = q;
    }
    ix_status s = M > 0 ? residual_matmuls(m, k_most, M) : IX_OK;
    for (int32_t i = 0; i < k_most && s == IX_OK; i++) s = run_head(m, i, seqs, kq, M);
    if (kq != kq_local) ix_free(kq);
    if (s != IX_OK)
        for (int32_t q = 0; q < n; q++) seqs[q].n_out = 0;
    if (M > 0) {
        m->st.n_forward++;
        m->st.forward_ns += ix_time_ns() - t0;
    }
    return s;
}

static void medusa_get_stats(const void *self, ix_spec_stats *out) { *out = ((const medusa *)self)->st; }

const ix_proposer_ops ix__proposer_medusa = {
    .name = "medusa",
    .kind = IX_SPEC_MEDUSA,
    .wants_hidden = true,
    .create = medusa_create,
    .destroy = medusa_destroy,
    .propose = medusa_propose,
    .release = NULL,
    .get_stats = medusa_get_stats,
    .max_k = medusa_max_k,
};
