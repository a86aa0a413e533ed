/* model reference: inferx's logits against a naive forward pass written here
 * straight from the math (double precision, dense K/V, no paging, no
 * batching), for tiny random models that exercise one feature each: llama,
 * qwen2 (Q/K/V biases, NeoX RoPE), a sliding window smaller than the sequence
 * (blocks of 4, and the cache must really release them), linear and llama3
 * RoPE scaling, a rope_freqs tensor, partial rotary, tied embeddings, full
 * multi-head attention, and F16 / Q8_0 / Q4_0 weights. Every sequence is two
 * prefill chunks and then decode steps, and the logits of all 40 positions
 * are compared by normalized error, on every ISA path this CPU runs.
 *
 * The reference reads the weights as inferx does (dequantized with
 * ix_kernels_dequant_row), so for quantized weights the only differences left
 * are inferx's 8-bit quantization of matmul inputs (and f16 K/V where used). Each variant also checks that
 * it can fail: the reference without the variant's feature (no window, no
 * frequency factors, the other RoPE layout, ...) must be far from inferx.
 *
 * Malformed models (a missing tensor, a wrong shape, an unsupported type) must
 * fail to load with a message naming the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inferx/model.h"

#define N_TOK 40
#define MAX_LAYER 4
#define MAX_BATCH 16
static const int k_chunks[] = {13, 12}; /* prefill chunks, then single decode steps */

/* What the reference leaves out for the "can this variant fail" check. */
typedef enum ablate {
    AB_NONE,
    AB_WINDOW,    /* full attention instead of the window */
    AB_FACTORS,   /* no per-dimension frequency factors */
    AB_SCALE,     /* no linear position scaling */
    AB_ROPE_MODE, /* the other pair layout */
    AB_N_ROT,     /* rotate the whole head */
    AB_BIAS,      /* no Q/K/V biases */
} ablate;

typedef struct cfg {
    const char *name;
    const char *arch; /* "llama" or "qwen2" (biases, NeoX) */
    int E, H, Hkv, F, L;
    int n_rot; /* 0: head_dim */
    float freq_base;
    const char *scaling; /* NULL, "linear" or "llama3" */
    float factor, low, high;
    int orig_ctx;
    bool freqs_tensor; /* write rope_freqs.weight */
    int window;
    bool tied;
    ix_dtype wtype;
    ix_kv_dtype kv;
    int block_size;
    double tol; /* max normalized error of a logit row */
    ablate ab;
} cfg;

/* Unset fields take the defaults of cfg_fill: llama, E 64, 4 heads, 2 KV
 * heads, FFN 96, 2 layers, full rotary, base 10000, f32 weights and KV,
 * blocks of 16, tolerance 1e-5.
 *
 * Normalized errors measured on the generic, AVX2 and AVX-512 paths: at most
 * 1.3e-6 with f32 weights and KV, 6e-4 with f16 KV (f16 weights are widened
 * exactly, so they add nothing), 2-3e-2 with Q8_0 / Q4_0 weights, where every
 * matmul input is rounded to 8 bits per block of 32. (A reference that rounds
 * its matmul inputs the same way gets no closer, 1.8e-2: one rounding that
 * falls the other way changes the next layer's inputs by a quantization step,
 * and the two roundings soon diverge.) The tolerances leave a margin of 3x to
 * 10x; results are deterministic on a given ISA path. A bug of the forward
 * pass (position, window, layout, bias, scaling) gives errors near 1. */
static const cfg k_cfgs[] = {
    {.name = "llama_f32", .ab = AB_ROPE_MODE},
    {.name = "qwen2_f32_bias", .arch = "qwen2", .freq_base = 1e6f, .ab = AB_BIAS},
    {.name = "qwen2_neox", .arch = "qwen2", .freq_base = 1e6f, .ab = AB_ROPE_MODE},
    {.name = "llama_sliding_window", .window = 7, .block_size = 4, .ab = AB_WINDOW},
    {.name = "llama_sliding_window_f16kv", .window = 5, .block_size = 4, .kv = IX_KV_F16, .tol = 3e-3,
     .ab = AB_WINDOW},
    {.name = "llama3_rope_scaling", .freq_base = 500000, .scaling = "llama3", .factor = 8, .low = 1, .high = 4,
     .orig_ctx = 64, .ab = AB_FACTORS},
    {.name = "llama_linear_rope", .scaling = "linear", .factor = 4, .ab = AB_SCALE},
    {.name = "llama_rope_freqs_tensor", .freqs_tensor = true, .ab = AB_FACTORS},
    {.name = "llama_partial_rotary", .n_rot = 8, .ab = AB_N_ROT},
    {.name = "qwen2_partial_rotary", .arch = "qwen2", .n_rot = 8, .ab = AB_N_ROT},
    {.name = "llama_tied_mha", .Hkv = 4, .tied = true, .ab = AB_ROPE_MODE},
    {.name = "llama_f16", .wtype = IX_DTYPE_F16, .kv = IX_KV_F16, .tol = 3e-3, .ab = AB_ROPE_MODE},
    {.name = "llama_q8_0", .wtype = IX_DTYPE_Q8_0, .kv = IX_KV_F16, .tol = 0.08, .ab = AB_ROPE_MODE},
    {.name = "llama_q4_0", .wtype = IX_DTYPE_Q4_0, .kv = IX_KV_F16, .tol = 0.08, .ab = AB_ROPE_MODE},
    {.name = "qwen2_q8_0_window", .arch = "qwen2", .freq_base = 1e6f, .window = 9, .block_size = 4,
     .wtype = IX_DTYPE_Q8_0, .kv = IX_KV_F16, .tol = 0.08, .ab = AB_WINDOW},
};

static cfg cfg_fill(const cfg *in) {
    cfg c = *in;
    if (!c.arch) c.arch = "llama";
    if (!c.E) c.E = 64;
    if (!c.H) c.H = 4;
    if (!c.Hkv) c.Hkv = 2;
    if (!c.F) c.F = 96;
    if (!c.L) c.L = 2;
    if (!c.freq_base) c.freq_base = 10000;
    if (!c.block_size) c.block_size = 16;
    if (!c.tol) c.tol = 1e-5;
    return c;
}

/* ---- random weights ---------------------------------------------------------- */

static uint64_t g_rng;

static double rnd_normal(void) {
    /* Box-Muller from two uniforms in (0, 1] */
    double u[2];
    for (int i = 0; i < 2; i++) {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        u[i] = ((double)(g_rng >> 11) + 1.0) * 0x1p-53;
    }
    return sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]);
}

/* A matmul weight: ne1 rows of ne0. q is what the file holds, f its values as
 * inferx reads them (dequantized). */
typedef struct wmat {
    ix_dtype type;
    int64_t ne0, ne1;
    void *q;
    float *f;
} wmat;

static void wmat_make(wmat *w, ix_dtype type, int64_t ne0, int64_t ne1, double stdev) {
    uint64_t row_bytes;
    assert_true(ix_dtype_row_bytes(type, (uint64_t)ne0, &row_bytes));
    *w = (wmat){type, ne0, ne1, malloc(row_bytes * (uint64_t)ne1), malloc((size_t)(ne0 * ne1) * sizeof(float))};
    float *row = malloc((size_t)ne0 * sizeof(float));
    for (int64_t r = 0; r < ne1; r++) {
        for (int64_t k = 0; k < ne0; k++) row[k] = (float)(stdev * rnd_normal());
        unsigned char *q = (unsigned char *)w->q + (uint64_t)r * row_bytes;
        assert_int_equal(ix_kernels_quantize_row(type, row, q, (size_t)ne0), IX_OK);
        assert_int_equal(ix_kernels_dequant_row(type, q, w->f + r * ne0, (size_t)ne0), IX_OK);
    }
    free(row);
}

static float *vec_make(int64_t n, double mean, double stdev) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = (float)(mean + stdev * rnd_normal());
    return v;
}

typedef struct rlayer {
    float *attn_norm, *ffn_norm; /* (E) */
    float *bq, *bk, *bv;         /* (Q), (KV), (KV); NULL without biases */
    wmat wq, wk, wv, wo, wg, wu, wd;
} rlayer;

typedef struct rmodel {
    const cfg *c;
    int hd, n_rot, V;
    wmat tok, out; /* out unused when tied */
    float *out_norm;
    float *freqs; /* (n_rot/2) rope_freqs.weight, or NULL */
    rlayer l[MAX_LAYER];
} rmodel;

static void rmodel_make(rmodel *m, const cfg *c, int V, uint64_t seed) {
    memset(m, 0, sizeof *m);
    assert_true(c->L <= MAX_LAYER);
    g_rng = seed * 0x9e3779b97f4a7c15ull | 1;
    m->c = c;
    m->hd = c->E / c->H;
    m->n_rot = c->n_rot ? c->n_rot : m->hd;
    m->V = V;
    int E = c->E, Q = c->H * m->hd, KV = c->Hkv * m->hd, F = c->F;
    /* q and k scaled up so that attention is peaked (scores of a few units):
     * a near-uniform softmax would hide errors of position and window. */
    wmat_make(&m->tok, c->wtype, E, V, 1.0);
    m->out_norm = vec_make(E, 1.0, 0.2);
    if (!c->tied) wmat_make(&m->out, c->wtype, E, V, 1.0 / sqrt(E));
    for (int i = 0; i < c->L; i++) {
        rlayer *l = &m->l[i];
        l->attn_norm = vec_make(E, 1.0, 0.2);
        wmat_make(&l->wq, c->wtype, E, Q, 1.5 / sqrt(E));
        wmat_make(&l->wk, c->wtype, E, KV, 1.5 / sqrt(E));
        wmat_make(&l->wv, c->wtype, E, KV, 1.0 / sqrt(E));
        if (!strcmp(c->arch, "qwen2")) {
            l->bq = vec_make(Q, 0.0, 0.5);
            l->bk = vec_make(KV, 0.0, 0.5);
            l->bv = vec_make(KV, 0.0, 0.5);
        }
        wmat_make(&l->wo, c->wtype, Q, E, 1.0 / sqrt(Q));
        l->ffn_norm = vec_make(E, 1.0, 0.2);
        wmat_make(&l->wg, c->wtype, E, F, 1.0 / sqrt(E));
        wmat_make(&l->wu, c->wtype, E, F, 1.0 / sqrt(E));
        wmat_make(&l->wd, c->wtype, F, E, 1.0 / sqrt(F));
    }
    if (c->freqs_tensor) {
        m->freqs = malloc((size_t)(m->n_rot / 2) * sizeof(float));
        for (int i = 0; i < m->n_rot / 2; i++) m->freqs[i] = 1.0f + 0.75f * (float)i;
    }
}

static void wmat_free(wmat *w) {
    free(w->q);
    free(w->f);
}

static void rmodel_free(rmodel *m) {
    wmat_free(&m->tok);
    wmat_free(&m->out);
    free(m->out_norm);
    free(m->freqs);
    for (int i = 0; i < m->c->L; i++) {
        rlayer *l = &m->l[i];
        free(l->attn_norm);
        free(l->ffn_norm);
        free(l->bq);
        free(l->bk);
        free(l->bv);
        wmat *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->wg, &l->wu, &l->wd};
        for (size_t k = 0; k < IX_ARRAY_LEN(ws); k++) wmat_free(ws[k]);
    }
}

/* ---- writing the model file --------------------------------------------------- */

static ix_gguf *g_tok_src; /* the bundled model: its tokenizer is copied */

/* How a malformed file differs from the good one. */
typedef enum mut_kind { MUT_NONE, MUT_DROP, MUT_SHAPE, MUT_TYPE_IQ2_XXS, MUT_TYPE_F16 } mut_kind;
typedef struct mutation {
    mut_kind kind;
    const char *tensor;
} mutation;

static void add_tensor(ix_gguf_writer *w, const mutation *mut, void **junk, const char *name, ix_dtype type,
                       uint32_t n_dims, int64_t ne0, int64_t ne1, const void *data) {
    int64_t ne[2] = {ne0, ne1};
    if (mut->kind != MUT_NONE && !strcmp(name, mut->tensor)) {
        if (mut->kind == MUT_DROP) return;
        if (mut->kind == MUT_SHAPE) ne[n_dims - 1] += 32;
        if (mut->kind == MUT_TYPE_IQ2_XXS) type = IX_DTYPE_IQ2_XXS;
        if (mut->kind == MUT_TYPE_F16) type = IX_DTYPE_F16;
        uint64_t rb;
        assert_true(ix_dtype_row_bytes(type, (uint64_t)ne[0], &rb));
        data = *junk = calloc(1, rb * (uint64_t)(n_dims > 1 ? ne[1] : 1));
    }
    if (ix_gguf_writer_add_tensor(w, name, type, n_dims, ne, data) != IX_OK)
        fail_msg("add %s: %s", name, ix_gguf_writer_errmsg(w));
}

static void write_model(const rmodel *m, const mutation *mut, const char *path) {
    const cfg *c = m->c;
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_non_null(w);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", c->arch, suffix), key)
    assert_int_equal(ix_gguf_writer_set_str(w, "general.architecture", c->arch), IX_OK);
    assert_int_equal(ix_gguf_writer_set_str(w, "general.name", c->name), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("context_length"), 256), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->E), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)c->L), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->F), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->H), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->Hkv), IX_OK);
    assert_int_equal(ix_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)m->n_rot), IX_OK);
    assert_int_equal(ix_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f), IX_OK);
    assert_int_equal(ix_gguf_writer_set_f32(w, KEY("rope.freq_base"), c->freq_base), IX_OK);
    if (c->window) assert_int_equal(ix_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)c->window), IX_OK);
    if (c->scaling) {
        assert_int_equal(ix_gguf_writer_set_str(w, KEY("rope.scaling.type"), c->scaling), IX_OK);
        assert_int_equal(ix_gguf_writer_set_f32(w, KEY("rope.scaling.factor"), c->factor), IX_OK);
    }
    if (c->scaling && !strcmp(c->scaling, "llama3")) {
        assert_int_equal(ix_gguf_writer_set_f32(w, KEY("rope.scaling.low_freq_factor"), c->low), IX_OK);
        assert_int_equal(ix_gguf_writer_set_f32(w, KEY("rope.scaling.high_freq_factor"), c->high), IX_OK);
        assert_int_equal(ix_gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->orig_ctx),
                         IX_OK);
    }
#undef KEY
    for (uint64_t i = 0; i < ix_gguf_n_kv(g_tok_src); i++) {
        ix_str k = ix_gguf_kv_key(g_tok_src, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10))
            assert_int_equal(ix_gguf_writer_copy_kv(w, g_tok_src, i), IX_OK);
    }

    void *junk = NULL; /* data of the mutated tensor */
    int E = c->E, Q = c->H * m->hd, KV = c->Hkv * m->hd;
#define MAT(name, wm) add_tensor(w, mut, &junk, name, (wm).type, 2, (wm).ne0, (wm).ne1, (wm).q)
#define VEC(name, v, n) add_tensor(w, mut, &junk, name, IX_DTYPE_F32, 1, n, 1, v)
    MAT("token_embd.weight", m->tok);
    VEC("output_norm.weight", m->out_norm, E);
    if (!c->tied) MAT("output.weight", m->out);
    if (m->freqs) VEC("rope_freqs.weight", m->freqs, m->n_rot / 2);
    for (int i = 0; i < c->L; i++) {
        const rlayer *l = &m->l[i];
        char n[64];
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d.%s", i, suffix), n)
        VEC(NAME("attn_norm.weight"), l->attn_norm, E);
        MAT(NAME("attn_q.weight"), l->wq);
        MAT(NAME("attn_k.weight"), l->wk);
        MAT(NAME("attn_v.weight"), l->wv);
        if (l->bq) {
            VEC(NAME("attn_q.bias"), l->bq, Q);
            VEC(NAME("attn_k.bias"), l->bk, KV);
            VEC(NAME("attn_v.bias"), l->bv, KV);
        }
        MAT(NAME("attn_output.weight"), l->wo);
        VEC(NAME("ffn_norm.weight"), l->ffn_norm, E);
        MAT(NAME("ffn_gate.weight"), l->wg);
        MAT(NAME("ffn_up.weight"), l->wu);
        MAT(NAME("ffn_down.weight"), l->wd);
#undef NAME
    }
#undef MAT
#undef VEC
    if (ix_gguf_writer_write(w, path) != IX_OK) fail_msg("write %s: %s", path, ix_gguf_writer_errmsg(w));
    free(junk);
    ix_gguf_writer_destroy(w);
}

/* ---- the reference ---------------------------------------------------------------- */

/* y (ne1) = W (ne1, ne0) . x (ne0) (+ b) */
static void ref_matvec(double *y, const wmat *w, const double *x, const float *b) {
    for (int64_t r = 0; r < w->ne1; r++) {
        const float *row = w->f + r * w->ne0;
        double s = b ? b[r] : 0.0;
        for (int64_t k = 0; k < w->ne0; k++) s += (double)row[k] * x[k];
        y[r] = s;
    }
}

static void ref_rmsnorm(double *y, const double *x, const float *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* Rotation angle of pair i at position pos. */
static void ref_angles(const rmodel *m, ablate ab, int pos, double *theta) {
    const cfg *c = m->c;
    int n_rot = ab == AB_N_ROT ? m->hd : m->n_rot;
    double scale = c->scaling && !strcmp(c->scaling, "linear") && ab != AB_SCALE ? 1.0 / c->factor : 1.0;
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = pow(c->freq_base, -2.0 * i / n_rot), div = 1.0;
        if (ab != AB_FACTORS && m->freqs) div = m->freqs[i];
        if (ab != AB_FACTORS && c->scaling && !strcmp(c->scaling, "llama3")) {
            /* Llama 3.1: long wavelengths slowed by factor, short ones kept,
             * linear blend between orig_ctx/high and orig_ctx/low. */
            double wavelen = 2 * M_PI / freq, scaled;
            if (wavelen < c->orig_ctx / c->high) scaled = freq;
            else if (wavelen > c->orig_ctx / c->low) scaled = freq / c->factor;
            else {
                double smooth = (c->orig_ctx / wavelen - c->low) / (c->high - c->low);
                scaled = (1 - smooth) * freq / c->factor + smooth * freq;
            }
            div = freq / scaled;
        }
        theta[i] = pos * scale * freq / div;
    }
}

static void ref_rope(const rmodel *m, ablate ab, double *x, int n_heads, const double *theta) {
    int n_rot = ab == AB_N_ROT ? m->hd : m->n_rot;
    bool neox = !strcmp(m->c->arch, "qwen2") != (ab == AB_ROPE_MODE);
    for (int h = 0; h < n_heads; h++) {
        double *xh = x + h * m->hd;
        for (int i = 0; i < n_rot / 2; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
            double x0 = xh[a], x1 = xh[b], cs = cos(theta[i]), sn = sin(theta[i]);
            xh[a] = x0 * cs - x1 * sn;
            xh[b] = x0 * sn + x1 * cs;
        }
    }
}

/* logits (n, V) of every position of toks, one token at a time. */
static void ref_forward(const rmodel *m, ablate ab, const ix_token *toks, int n, double *logits) {
    const cfg *c = m->c;
    int E = c->E, hd = m->hd, Q = c->H * hd, KV = c->Hkv * hd, F = c->F, group = c->H / c->Hkv;
    int window = ab == AB_WINDOW ? 0 : c->window;
    double *kc = calloc((size_t)c->L * (size_t)n * (size_t)KV, sizeof(double)); /* (L, n, KV) */
    double *vc = calloc((size_t)c->L * (size_t)n * (size_t)KV, sizeof(double)); /* (L, n, KV) */
    double *x = malloc((size_t)E * sizeof(double)), *xn = malloc((size_t)E * sizeof(double));
    double *q = malloc((size_t)Q * sizeof(double)), *att = malloc((size_t)Q * sizeof(double));
    double *o = malloc((size_t)E * sizeof(double)), *g = malloc((size_t)F * sizeof(double));
    double *u = malloc((size_t)F * sizeof(double)), *score = malloc((size_t)n * sizeof(double));
    double theta[512];
    for (int p = 0; p < n; p++) {
        const float *emb = m->tok.f + (int64_t)toks[p] * E;
        for (int i = 0; i < E; i++) x[i] = emb[i];
        ref_angles(m, ab, p, theta);
        for (int il = 0; il < c->L; il++) {
            const rlayer *l = &m->l[il];
            double *k = kc + ((size_t)il * (size_t)n + (size_t)p) * (size_t)KV;
            double *v = vc + ((size_t)il * (size_t)n + (size_t)p) * (size_t)KV;
            bool bias = ab != AB_BIAS;
            ref_rmsnorm(xn, x, l->attn_norm, E);
            ref_matvec(q, &l->wq, xn, bias ? l->bq : NULL);
            ref_matvec(k, &l->wk, xn, bias ? l->bk : NULL);
            ref_matvec(v, &l->wv, xn, bias ? l->bv : NULL);
            ref_rope(m, ab, q, c->H, theta);
            ref_rope(m, ab, k, c->Hkv, theta);
            int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            for (int h = 0; h < c->H; h++) {
                const double *qh = q + h * hd;
                int kvh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int t = lo; t <= p; t++) {
                    const double *kt = kc + ((size_t)il * (size_t)n + (size_t)t) * (size_t)KV + kvh * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += qh[d] * kt[d];
                    score[t] = s / sqrt((double)hd);
                    mx = fmax(mx, score[t]);
                }
                for (int t = lo; t <= p; t++) sum += score[t] = exp(score[t] - mx);
                for (int d = 0; d < hd; d++) att[h * hd + d] = 0;
                for (int t = lo; t <= p; t++) {
                    const double *vt = vc + ((size_t)il * (size_t)n + (size_t)t) * (size_t)KV + kvh * hd;
                    for (int d = 0; d < hd; d++) att[h * hd + d] += score[t] / sum * vt[d];
                }
            }
            ref_matvec(o, &l->wo, att, NULL);
            for (int i = 0; i < E; i++) x[i] += o[i];
            ref_rmsnorm(xn, x, l->ffn_norm, E);
            ref_matvec(g, &l->wg, xn, NULL);
            ref_matvec(u, &l->wu, xn, NULL);
            for (int i = 0; i < F; i++) g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_matvec(o, &l->wd, g, NULL);
            for (int i = 0; i < E; i++) x[i] += o[i];
        }
        ref_rmsnorm(xn, x, m->out_norm, E);
        ref_matvec(logits + (size_t)p * (size_t)m->V, c->tied ? &m->tok : &m->out, xn, NULL);
    }
    free(kc);
    free(vc);
    free(x);
    free(xn);
    free(q);
    free(att);
    free(o);
    free(g);
    free(u);
    free(score);
}

/* ---- inferx ------------------------------------------------------------------------ */

/* Logits (n, V) of every position: k_chunks as prefill chunks, then one
 * token per step. *held = blocks the sequence still holds at the end,
 * *n_blocks = its block table length. */
static void run_inferx(const char *path, const cfg *c, const ix_token *toks, int n, float *logits,
                       int32_t *held, int32_t *n_blocks) {
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    if (ix_model_load(&m, path, &err) != IX_OK) fail_msg("%s: %s", c->name, err.msg);
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    assert_int_equal(kp.sliding_window, c->window);
    kp.dtype = c->kv;
    kp.block_size = c->block_size;
    kp.n_blocks = n / c->block_size + 4;
    ix_kv *kv = NULL;
    if (ix_kv_create(&kp, &kv, &err) != IX_OK) fail_msg("kv: %s", err.msg);
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = MAX_BATCH;
    cp.n_threads = 2;
    ix_model_ctx *ctx = NULL;
    if (ix_model_ctx_create(&ctx, m, kv, &cp, &err) != IX_OK) fail_msg("ctx: %s", err.msg);
    int32_t V = ix_model_get_hparams(m)->n_vocab, seq;
    assert_int_equal(ix_kv_seq_create(kv, 0, &seq), IX_OK);
    int32_t pos[MAX_BATCH], sq[MAX_BATCH];
    uint8_t out[MAX_BATCH];
    for (int done = 0, step = 0; done < n; step++) {
        int k = step < (int)IX_ARRAY_LEN(k_chunks) ? k_chunks[step] : 1;
        if (k > n - done) k = n - done;
        assert_int_equal(ix_kv_seq_append(kv, seq, k, toks + done), IX_OK);
        for (int j = 0; j < k; j++) {
            pos[j] = done + j;
            sq[j] = seq;
            out[j] = 1;
        }
        ix_batch b = {k, toks + done, pos, sq, out};
        if (ix_model_forward(ctx, &b, logits + (size_t)done * (size_t)V) != IX_OK)
            fail_msg("%s: forward: %s", c->name, ix_model_ctx_errmsg(ctx));
        assert_int_equal(ix_kv_seq_commit(kv, seq, done + k), IX_OK);
        done += k;
    }
    ix_kv_seq_info info;
    assert_int_equal(ix_kv_seq_get_info(kv, seq, &info), IX_OK);
    *held = info.n_blocks_held;
    *n_blocks = info.n_blocks;
    assert_int_equal(ix_kv_check(kv), IX_OK);
    assert_int_equal(ix_kv_seq_free(kv, seq), IX_OK);
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    ix_model_destroy(m);
}

/* Largest normalized error ||a - r|| / ||r|| over the n rows; *row_out is its row. */
static double max_rel_err(const float *a, const double *r, int n, int V, int *row_out) {
    double worst = 0;
    *row_out = 0;
    for (int p = 0; p < n; p++) {
        double num = 0, den = 0;
        for (int i = 0; i < V; i++) {
            double d = a[(size_t)p * (size_t)V + (size_t)i] - r[(size_t)p * (size_t)V + (size_t)i];
            num += d * d;
            den += r[(size_t)p * (size_t)V + (size_t)i] * r[(size_t)p * (size_t)V + (size_t)i];
        }
        double e = sqrt(num / (den > 0 ? den : 1e-300));
        if (!(e <= worst)) { /* NaN sticks */
            worst = e;
            *row_out = p;
        }
    }
    return worst;
}

static void model_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/test_model_ref_%s_%ld.gguf", IX_BINARY_DIR, name, (long)getpid());
}

static void test_variant(void **state) {
    const cfg filled = cfg_fill(*state), *c = &filled;
    int V = 0;
    ix_gguf_arr toks_arr;
    assert_int_equal(ix_gguf_get_arr(g_tok_src, "tokenizer.ggml.tokens", IX_GGUF_STRING, &toks_arr, NULL), IX_OK);
    V = (int)toks_arr.n;
    rmodel m;
    rmodel_make(&m, c, V, 1234);
    char path[512];
    model_path(path, sizeof path, c->name);
    static const mutation none = {MUT_NONE, NULL};
    write_model(&m, &none, path);

    ix_token toks[N_TOK];
    for (int i = 0; i < N_TOK; i++) toks[i] = (ix_token)(((uint64_t)i * 2654435761u + 17) % (uint64_t)V);
    double *ref = malloc((size_t)N_TOK * (size_t)V * sizeof(double));
    double *abl = malloc((size_t)N_TOK * (size_t)V * sizeof(double));
    float *got = malloc((size_t)N_TOK * (size_t)V * sizeof(float));
    ref_forward(&m, AB_NONE, toks, N_TOK, ref);
    ref_forward(&m, c->ab, toks, N_TOK, abl);

    bool quant = c->wtype == IX_DTYPE_Q8_0 || c->wtype == IX_DTYPE_Q4_0;
    float *first = quant ? malloc((size_t)N_TOK * (size_t)V * sizeof(float)) : NULL;
    for (int isa = IX_ISA_GENERIC; isa < IX_ISA_COUNT; isa++) {
        if (!ix_cpu_supports((ix_isa)isa)) continue;
        assert_int_equal(ix_cpu_force_isa((ix_isa)isa), IX_OK);
        assert_int_equal(ix_kernels_init(), IX_OK);
        int32_t held, n_blocks;
        if (quant) {
            /* the GGUF rows (INFERX_REPACK=0) and the packed weights the
             * loader makes by default give the same bits (the float ops
             * around the matmuls differ across paths, so within a path) */
            setenv("INFERX_REPACK", "0", 1);
            run_inferx(path, c, toks, N_TOK, first, &held, &n_blocks);
            unsetenv("INFERX_REPACK");
        }
        run_inferx(path, c, toks, N_TOK, got, &held, &n_blocks);
        if (quant && memcmp(first, got, (size_t)N_TOK * (size_t)V * sizeof(float)) != 0)
            fail_msg("%s on %s: packed-weight logits differ from the row layout's", c->name, ix_kernels()->name);
        int row, arow;
        double err = max_rel_err(got, ref, N_TOK, V, &row);
        double aerr = max_rel_err(got, abl, N_TOK, V, &arow);
        fprintf(stderr, "  %-28s %-12s max normalized error %.3g (position %d; tolerance %.0e); "
                        "without the feature %.3g; blocks held %d of %d\n",
                c->name, ix_kernels()->name, err, row, c->tol, aerr, held, n_blocks);
        if (!(err <= c->tol))
            fail_msg("%s on %s: logits at position %d differ from the reference by %.3g (tolerance %.0e)",
                     c->name, ix_kernels()->name, row, err, c->tol);
        /* The variant must matter: inferx is far from the reference without it. */
        if (!(aerr > 10 * c->tol))
            fail_msg("%s: the reference without the feature is as close (%.3g): the test is blind", c->name,
                     aerr);
        if (c->window) {
            int32_t most = (c->window + c->block_size - 1) / c->block_size + 1;
            if (held > most || held >= n_blocks)
                fail_msg("%s: the sequence holds %d of %d blocks; a window of %d needs at most %d", c->name,
                         held, n_blocks, c->window, most);
        } else {
            assert_int_equal(held, n_blocks);
        }
    }
    unlink(path);
    free(first);
    free(ref);
    free(abl);
    free(got);
    rmodel_free(&m);
}

/* ---- malformed models --------------------------------------------------------------- */

static void test_malformed(void **state) {
    (void)state;
    /* ffn 256 so that an IQ2_XXS ffn_down (blocks of 256, a type without kernels) is a well-formed file. */
    static const cfg in = {.name = "malformed", .arch = "qwen2", .F = 256};
    const cfg base = cfg_fill(&in);
    static const struct {
        mutation mut;
        ix_status want;
    } cases[] = {
        {{MUT_DROP, "blk.1.ffn_up.weight"}, IX_ERR_FORMAT},
        {{MUT_DROP, "output_norm.weight"}, IX_ERR_FORMAT},
        {{MUT_DROP, "blk.0.attn_k.bias"}, IX_ERR_FORMAT},
        {{MUT_DROP, "token_embd.weight"}, IX_ERR_FORMAT},
        {{MUT_SHAPE, "blk.0.attn_k.weight"}, IX_ERR_FORMAT},
        {{MUT_SHAPE, "blk.1.ffn_down.weight"}, IX_ERR_FORMAT},
        {{MUT_SHAPE, "output.weight"}, IX_ERR_FORMAT},
        {{MUT_SHAPE, "blk.1.attn_norm.weight"}, IX_ERR_FORMAT},
        {{MUT_TYPE_IQ2_XXS, "blk.0.ffn_down.weight"}, IX_ERR_UNSUPPORTED},
        {{MUT_TYPE_F16, "blk.1.ffn_norm.weight"}, IX_ERR_UNSUPPORTED},
    };
    ix_gguf_arr toks_arr;
    assert_int_equal(ix_gguf_get_arr(g_tok_src, "tokenizer.ggml.tokens", IX_GGUF_STRING, &toks_arr, NULL), IX_OK);
    rmodel m;
    rmodel_make(&m, &base, (int)toks_arr.n, 99);
    char path[512];
    model_path(path, sizeof path, base.name);
    /* The unmutated file loads: each failure below is the mutation's. */
    static const mutation none = {MUT_NONE, NULL};
    write_model(&m, &none, path);
    ix_model *model = NULL;
    ix_errbuf err = {{0}};
    if (ix_model_load(&model, path, &err) != IX_OK) fail_msg("the unmutated model: %s", err.msg);
    ix_model_destroy(model);
    for (size_t i = 0; i < IX_ARRAY_LEN(cases); i++) {
        write_model(&m, &cases[i].mut, path);
        model = NULL;
        memset(&err, 0, sizeof err);
        ix_status s = ix_model_load(&model, path, &err);
        fprintf(stderr, "  %s %s: %s: %s\n",
                cases[i].mut.kind == MUT_DROP    ? "drop"
                : cases[i].mut.kind == MUT_SHAPE ? "reshape"
                                                 : "retype",
                cases[i].mut.tensor, ix_status_name(s), err.msg);
        assert_null(model);
        if (s != cases[i].want)
            fail_msg("%s: status %s, want %s", cases[i].mut.tensor, ix_status_name(s), ix_status_name(cases[i].want));
        if (!strstr(err.msg, cases[i].mut.tensor))
            fail_msg("%s: the message '%s' does not name the tensor", cases[i].mut.tensor, err.msg);
    }
    unlink(path);
    rmodel_free(&m);
}

static int setup(void **state) {
    (void)state;
    ix_errbuf err = {{0}};
    if (ix_gguf_open(&g_tok_src, IX_SOURCE_DIR "/models/target-f16.gguf", &err) != IX_OK) {
        fprintf(stderr, "cannot open the bundled model: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ix_gguf_close(g_tok_src);
    return 0;
}

int main(void) {
    struct CMUnitTest tests[IX_ARRAY_LEN(k_cfgs) + 1];
    for (size_t i = 0; i < IX_ARRAY_LEN(k_cfgs); i++)
        tests[i] = (struct CMUnitTest){k_cfgs[i].name, test_variant, NULL, NULL, (void *)&k_cfgs[i]};
    tests[IX_ARRAY_LEN(k_cfgs)] = (struct CMUnitTest)cmocka_unit_test(test_malformed);
    return _cmocka_run_group_tests("model_ref", tests, IX_ARRAY_LEN(tests), setup, teardown);
}
