/* The double-precision reference of the model tests (model_ref.h): random
 * models made from the architecture table, the reference forward pass, and
 * the comparison with inferx.
 *
 * A model here is what the loader expects because the table says it:
 * ix_model_arch_init gives the recipe, ix_model_arch_tensors every tensor
 * (name, shape, required or not) and ix_model_arch_write_hparams the
 * metadata; which tensor plays which role is looked up in the same table
 * (model_int.h). What the tensors mean is not taken from it: k_recipes states
 * each architecture's semantics on its own (from llama.cpp's graphs), the
 * model made from the table must have the tensors its recipe implies, and the
 * forward pass below is written from the math, so a wrong row of the table
 * fails.
 *
 * The reference reads the weights as inferx does (dequantized with
 * ix_kernels_dequant_row), so for quantized weights the only differences left
 * are inferx's 8-bit quantization of matmul inputs (and f16 K/V where used).
 * Every sequence is two prefill chunks and then decode steps, and the logits
 * of all 40 positions are compared by normalized error, on every ISA path
 * this CPU runs. */
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

#include "model_ref.h"

#define N_TOK 40
#define MAX_BATCH 16
#define NORM_EPS 1e-5f
static const int k_chunks[] = {13, 12}; /* prefill chunks, then single decode steps */

/* ---- ablations: see model_ref.h ---------------------------------------------------
 * Each case lists the features it checks can fail: with f32 weights, the
 * reference without one of them must be far (10x the tolerance) from inferx.
 * (The looser tolerances of the other weight types would only measure how
 * subtle a feature is, GELU for SiLU moving gpt2's logits by 0.07; the
 * forward pass they run is the same.) */
static const char *const k_ablation_what[AB_COUNT] = {
#define X(name, what) what,
    REF_ABLATIONS(X)
#undef X
};

/* ---- the semantics of each architecture ----------------------------------------
 * Stated here independently of arch.c (from llama.cpp's graphs); a model made
 * from the table must have the tensors its recipe implies (check_structure).
 * Optional biases are added when the file has them, the output head is tied
 * to the embedding when absent, and a block without ffn_norm is parallel
 * (StableLM). */
typedef struct ref_recipe {
    const char *arch;
    bool layernorm;     /* LayerNorm (x - mean) / std * w + b, else RMSNorm x / rms * w */
    bool rope, neox;    /* rotary; pairs (i, i + n_rot/2) rather than (2i, 2i+1) */
    bool learned_pos;   /* a position_embd row added to the token's */
    bool embd_scale;    /* embeddings x sqrt(n_embd) */
    bool fused_qkv;     /* one attn_qkv: Q rows, then K, then V (and its bias likewise) */
    bool qkv_bias;      /* Q/K/V biases always */
    bool qk_norm;       /* per-head RMSNorm of q and of k before RoPE */
    bool gated, gelu;   /* down(act(gate) * up) or down(act(up + b) + b); act GELU (tanh) or SiLU */
    bool fused_gate_up; /* one ffn_up of 2 n_ff rows: gate rows, then up rows */
    bool parallel;      /* x + attn(ln(x)) + mlp(ln(x)), one norm */
    bool post_norms;    /* sub-layer outputs normed before the residual add */
    bool swa_alternate; /* the window applies to even layers only */
} ref_recipe;

/* clang-format off */
static const ref_recipe k_recipes[] = {
    {.arch = "llama", .rope = true, .gated = true},
    {.arch = "mistral", .rope = true, .gated = true},
    {.arch = "qwen2", .rope = true, .neox = true, .qkv_bias = true, .gated = true},
    {.arch = "qwen3", .rope = true, .neox = true, .qk_norm = true, .gated = true},
    {.arch = "phi3", .rope = true, .neox = true, .fused_qkv = true, .gated = true, .fused_gate_up = true},
    {.arch = "gemma", .rope = true, .neox = true, .embd_scale = true, .gated = true, .gelu = true},
    {.arch = "gemma2", .rope = true, .neox = true, .embd_scale = true, .gated = true, .gelu = true,
     .post_norms = true, .swa_alternate = true},
    {.arch = "gpt2", .layernorm = true, .learned_pos = true, .fused_qkv = true, .qkv_bias = true, .gelu = true},
    {.arch = "starcoder2", .layernorm = true, .rope = true, .neox = true, .gelu = true},
    {.arch = "stablelm", .layernorm = true, .rope = true, .neox = true, .gated = true},
    {.arch = "falcon", .layernorm = true, .rope = true, .neox = true, .fused_qkv = true, .gelu = true,
     .parallel = true},
};
/* clang-format on */

/* ---- weight types ------------------------------------------------------------------
 * Each case runs with those of its `types` mask, with f16 K/V except for f32
 * weights.
 *
 * Normalized errors measured on the generic, AVX2 and AVX-512 paths: at most
 * 2e-6 with f32 weights and KV, 8e-4 with f16 KV (f16 and bf16 weights are
 * widened exactly, so they add nothing), 1.2-3.7e-2 with Q8_0 / Q4_0 weights,
 * where every matmul input is rounded to 8 bits per block of 32 (growing with
 * depth: 3 layers of gemma2 reach 3.7e-2, 4 would reach 7e-2). (A reference
 * that rounds its matmul inputs the same way gets no closer: one rounding that
 * falls the other way changes the next layer's inputs by a quantization step,
 * and the two roundings soon diverge.) The tolerances leave a margin of 2x to
 * 10x; results are deterministic on a given ISA path. A bug of the forward
 * pass (position, window, layout, bias, scaling, wiring) gives errors near 1. */
typedef struct wtype {
    ix_dtype type;
    const char *name;
    ix_kv_dtype kv;
    double tol; /* max normalized error of a logit row */
} wtype;

static const wtype k_types[REF_N_TYPES] = {
    [REF_F32] = {IX_DTYPE_F32, "f32", IX_KV_F32, 1e-5},
    [REF_F16] = {IX_DTYPE_F16, "f16", IX_KV_F16, 3e-3},
    [REF_BF16] = {IX_DTYPE_BF16, "bf16", IX_KV_F16, 3e-3},
    [REF_Q8_0] = {IX_DTYPE_Q8_0, "q8_0", IX_KV_F16, 0.08},
    [REF_Q4_0] = {IX_DTYPE_Q4_0, "q4_0", IX_KV_F16, 0.08},
};
#define KV16_TOL 3e-3 /* f32 weights with f16 K/V */

ref_case ref_case_fill(const ref_case *in) {
    ref_case c = *in;
    if (!c.E) c.E = 64;
    if (!c.H) c.H = 4;
    if (!c.Hkv) c.Hkv = 2;
    if (!c.hd) c.hd = c.E / c.H;
    if (!c.F) c.F = 96;
    if (!c.L) c.L = 2;
    if (!c.n_rot) c.n_rot = c.hd;
    if (!c.ctx) c.ctx = 256;
    if (!c.freq_base) c.freq_base = 10000;
    if (!c.factor) c.factor = 1;
    if (!c.attn_factor) c.attn_factor = 1;
    if (!c.block_size) c.block_size = 16;
    if (!c.types) c.types = TY(REF_N_TYPES) - 1;
    return c;
}

static const ref_recipe *recipe_of(const char *arch) {
    for (size_t i = 0; i < IX_ARRAY_LEN(k_recipes); i++)
        if (!strcmp(k_recipes[i].arch, arch)) return &k_recipes[i];
    fail_msg("no recipe for %s", arch);
    return NULL;
}

/* ---- random models -------------------------------------------------------------- */

static ix_gguf *g_tok_src; /* the bundled model: its tokenizer is copied */

static int vocab_size(void) {
    ix_gguf_arr toks_arr;
    assert_int_equal(
        ix_gguf_get_arr(g_tok_src, "tokenizer.ggml.tokens", IX_GGUF_STRING, &toks_arr, NULL),
        IX_OK);
    return (int)toks_arr.n;
}

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

/* The tensor of role r (of layer il, or global when il < 0), or NULL. */
static const ref_tensor *tn(const ref_model *m, int il, ix__role r) {
    const ref_tensor *t = &m->t[il + 1][r];
    return t->data ? t : NULL;
}

static const float *vec(const ref_model *m, int il, ix__role r) {
    const ref_tensor *t = tn(m, il, r);
    return t ? t->f : NULL;
}

/* The role and layer of a tensor name, by the table's names. */
static void role_of(const ref_model *m, const char *name, int *il, int *role) {
    const ix__arch_row *a = ix__arch_row_of(m->hp.arch);
    const char *suffix = name;
    *il = -1;
    *role = 0;
    if (!strncmp(name, "blk.", 4)) {
        *il = (int)strtol(name + 4, NULL, 10);
        suffix = strchr(name + 4, '.') + 1;
    }
    for (int r = *il < 0 ? 0 : IX__R_FIRST_LAYER; r < (*il < 0 ? IX__R_FIRST_LAYER : IX__R_COUNT);
         r++)
        if (((a->req | a->opt) & IX__ROLE(r)) && !strcmp(ix__roles[r].name, suffix)) {
            *role = r;
            return;
        }
    fail_msg("%s: no role of %s is named %s", m->c->name, m->hp.arch_name, name);
}

/* Standard deviation of a tensor's random values around its mean. Q and K
 * are scaled up so that attention is peaked (scores of a few units): a
 * near-uniform softmax would hide errors of position and window. */
static void value_law(const ref_model *m, int role, const ix_model_tensor_spec *s, double *mean,
                      double *stdev) {
    *mean = 0;
    *stdev = 0;
    switch (s->group) {
    case IX_TENSOR_MATRIX:
    case IX_TENSOR_OUTPUT:
        /* embedding rows of unit size once scaled (Gemma: x sqrt(n_embd)),
         * so that the layers' contributions are not drowned */
        if (role == IX__R_TOK_EMBD || role == IX__R_POS_EMBD)
            *stdev = m->rc->embd_scale ? 1.0 / sqrt((double)s->ne0) : 1.0;
        else if (role == IX__R_ATTN_Q || role == IX__R_ATTN_K || role == IX__R_ATTN_QKV)
            *stdev = 1.5 / sqrt((double)s->ne0);
        else
            *stdev = 1.0 / sqrt((double)s->ne0);
        break;
    case IX_TENSOR_NORM: *mean = 1.0, *stdev = 0.2; break;
    case IX_TENSOR_BIAS: *stdev = 0.5; break;
    case IX_TENSOR_ROPE: break; /* rope_divisor */
    }
}

/* Frequency divisors grow along the head (slower rotations): those of
 * rope_freqs and longrope's long factors by much, the short ones barely. */
static float rope_divisor(int role, int64_t i) {
    float slope = role == IX__R_ROPE_SHORT ? 0.1f : role == IX__R_ROPE_LONG ? 1.5f : 0.75f;
    return 1.0f + slope * (float)i;
}

typedef struct make_ctx {
    ref_model *m;
    ix_dtype weight_type;
    uint64_t written_opt;
} make_ctx;

static bool make_tensor(void *ctx, const ix_model_tensor_spec *s) {
    make_ctx *mc = ctx;
    ref_model *m = mc->m;
    int il = -1, r = 0;
    role_of(m, s->name, &il, &r);
    if (!s->required && !(m->c->opt & IX__ROLE(r))) return true;
    if (!s->required) mc->written_opt |= IX__ROLE(r);
    ref_tensor *t = &m->t[il + 1][r];
    bool matrix = s->group == IX_TENSOR_MATRIX || s->group == IX_TENSOR_OUTPUT;
    snprintf(t->name, sizeof t->name, "%s", s->name);
    t->type = matrix ? mc->weight_type : IX_DTYPE_F32;
    t->ne0 = s->ne0;
    t->ne1 = s->ne1;
    uint64_t row_bytes;
    assert_true(ix_dtype_row_bytes(t->type, (uint64_t)t->ne0, &row_bytes));
    t->data = malloc(row_bytes * (uint64_t)t->ne1);
    t->f = malloc((size_t)(t->ne0 * t->ne1) * sizeof(float));
    float *row = malloc((size_t)t->ne0 * sizeof(float));
    double mean, stdev;
    value_law(m, r, s, &mean, &stdev);
    for (int64_t j = 0; j < t->ne1; j++) {
        for (int64_t k = 0; k < t->ne0; k++)
            row[k] = s->group == IX_TENSOR_ROPE ? rope_divisor(r, k)
                                                : (float)(mean + stdev * rnd_normal());
        unsigned char *q = (unsigned char *)t->data + (uint64_t)j * row_bytes;
        assert_int_equal(ix_kernels_quantize_row(t->type, row, q, (size_t)t->ne0), IX_OK);
        assert_int_equal(ix_kernels_dequant_row(t->type, q, t->f + j * t->ne0, (size_t)t->ne0),
                         IX_OK);
    }
    free(row);
    return true;
}

/* The tensors the table gave the model are those its recipe implies. */
static void check_structure(const ref_model *m) {
    const ref_recipe *rc = m->rc;
    struct {
        bool want, have;
        const char *what;
    } checks[] = {
        {rc->layernorm, tn(m, 0, IX__R_ATTN_NORM_B) && tn(m, -1, IX__R_OUT_NORM_B), "norm biases"},
        {rc->learned_pos, tn(m, -1, IX__R_POS_EMBD), "learned positions"},
        {rc->fused_qkv, tn(m, 0, IX__R_ATTN_QKV) && !tn(m, 0, IX__R_ATTN_Q), "fused Q/K/V"},
        {rc->qk_norm, tn(m, 0, IX__R_ATTN_Q_NORM) && tn(m, 0, IX__R_ATTN_K_NORM), "q/k norms"},
        {rc->gated, tn(m, 0, IX__R_FFN_GATE) || tn(m, 0, IX__R_FFN_GATE_UP), "a gated FFN"},
        {rc->fused_gate_up, tn(m, 0, IX__R_FFN_GATE_UP) != NULL, "fused gate/up"},
        {rc->post_norms, tn(m, 0, IX__R_POST_ATTN_NORM) && tn(m, 0, IX__R_POST_FFN_NORM),
         "post-norms"},
    };
    for (size_t i = 0; i < IX_ARRAY_LEN(checks); i++)
        if (checks[i].want != checks[i].have)
            fail_msg("%s: the table gives %s%s", m->c->arch, checks[i].have ? "" : "no ",
                     checks[i].what);
    bool biased = tn(m, 0, rc->fused_qkv ? IX__R_ATTN_QKV_B : IX__R_ATTN_Q_B) != NULL;
    if (rc->qkv_bias && !biased) fail_msg("%s: the table gives no Q/K/V biases", m->c->arch);
}

void ref_model_make(ref_model *m, const ref_case *c, ix_dtype weight_type, uint64_t seed) {
    memset(m, 0, sizeof *m);
    assert_true(c->L <= REF_MAX_LAYER);
    g_rng = seed * 0x9e3779b97f4a7c15ull | 1;
    m->c = c;
    m->rc = recipe_of(c->arch);
    ix_model_hparams *hp = &m->hp;
    ix_errbuf err = {{0}};
    if (ix_model_arch_init(hp, c->arch, &err) != IX_OK) fail_msg("%s", err.msg);
    hp->n_vocab = vocab_size();
    hp->n_ctx_train = c->ctx;
    hp->n_embd = c->E;
    hp->n_layer = c->L;
    hp->n_head = c->H;
    hp->n_head_kv = c->Hkv;
    hp->head_dim = c->hd;
    hp->n_ff = c->F;
    hp->norm_eps = NORM_EPS;
    hp->n_rot = m->rc->rope ? c->n_rot : 0;
    hp->rope_freq_base = c->freq_base;
    hp->rope_scaling = c->scaling;
    hp->rope_factor = c->factor;
    hp->rope_low_freq_factor = c->low;
    hp->rope_high_freq_factor = c->high;
    hp->rope_attn_factor = c->attn_factor;
    hp->rope_orig_ctx = c->orig_ctx;
    hp->sliding_window = c->window;
    hp->attn_softcap = c->attn_softcap;
    hp->final_softcap = c->final_softcap;
    make_ctx mc = {m, weight_type, 0};
    assert_int_equal(ix_model_arch_tensors(hp, make_tensor, &mc), IX_OK);
    if (mc.written_opt != c->opt)
        fail_msg("%s: %s has no optional tensor of roles %#llx", c->name, c->arch,
                 (unsigned long long)(c->opt & ~mc.written_opt));
    check_structure(m);
}

void ref_model_free(ref_model *m) {
    for (int i = 0; i <= REF_MAX_LAYER; i++)
        for (int r = 0; r < IX__R_COUNT; r++) {
            free(m->t[i][r].data);
            free(m->t[i][r].f);
        }
}

/* ---- writing the model file --------------------------------------------------- */

void ref_model_write(const ref_model *m, const ref_mutation *mut, const char *path) {
    ix_gguf_writer *w = ix_gguf_writer_create();
    assert_non_null(w);
    if (ix_model_arch_write_hparams(w, &m->hp) != IX_OK ||
        ix_gguf_writer_set_str(w, "general.name", m->c->name))
        fail_msg("metadata: %s", ix_gguf_writer_errmsg(w));
    for (uint64_t i = 0; i < ix_gguf_n_kv(g_tok_src); i++) {
        ix_str k = ix_gguf_kv_key(g_tok_src, i);
        if (k.len > 10 && !memcmp(k.ptr, "tokenizer.", 10))
            assert_int_equal(ix_gguf_writer_copy_kv(w, g_tok_src, i), IX_OK);
    }
    void *junk = NULL; /* data of the mutated tensor */
    for (int i = 0; i <= m->c->L; i++)
        for (int r = 0; r < IX__R_COUNT; r++) {
            const ref_tensor *t = &m->t[i][r];
            if (!t->data) continue;
            uint32_t n_dims = t->ne1 > 1 ? 2 : 1;
            int64_t ne[2] = {t->ne0, t->ne1};
            ix_dtype type = t->type;
            const void *data = t->data;
            if (mut && mut->il == i - 1 && (int)mut->role == r) {
                if (mut->kind == MUT_DROP) continue;
                if (mut->kind == MUT_SHAPE) ne[n_dims - 1] += 32;
                if (mut->kind == MUT_TYPE_IQ2_XXS) type = IX_DTYPE_IQ2_XXS;
                if (mut->kind == MUT_TYPE_F16) type = IX_DTYPE_F16;
                uint64_t rb;
                assert_true(ix_dtype_row_bytes(type, (uint64_t)ne[0], &rb));
                data = junk = calloc(1, rb * (uint64_t)(n_dims > 1 ? ne[1] : 1));
            }
            if (ix_gguf_writer_add_tensor(w, t->name, type, n_dims, ne, data) != IX_OK)
                fail_msg("add %s: %s", t->name, ix_gguf_writer_errmsg(w));
        }
    if (ix_gguf_writer_write(w, path) != IX_OK)
        fail_msg("write %s: %s", path, ix_gguf_writer_errmsg(w));
    free(junk);
    ix_gguf_writer_destroy(w);
}

/* ---- the reference ---------------------------------------------------------------- */

/* y (n_rows) = rows row0.. of W (ne1, ne0) . x (ne0) (+ b (n_rows)) */
static void ref_matvec(double *y, const ref_tensor *w, int64_t row0, int64_t n_rows,
                       const double *x, const float *b) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *row = w->f + (row0 + r) * w->ne0;
        double s = b ? b[r] : 0.0;
        for (int64_t k = 0; k < w->ne0; k++)
            s += (double)row[k] * x[k];
        y[r] = s;
    }
}

/* RMSNorm x / sqrt(mean(x^2) + eps) * w, or LayerNorm (x - mean) /
 * sqrt(var + eps) * w + b. */
static void ref_norm(bool layernorm, double *y, const double *x, const float *w, const float *b,
                     int n) {
    double mean = 0, ss = 0;
    if (layernorm) {
        for (int i = 0; i < n; i++)
            mean += x[i];
        mean /= n;
    }
    for (int i = 0; i < n; i++)
        ss += (x[i] - mean) * (x[i] - mean);
    double r = 1.0 / sqrt(ss / n + NORM_EPS);
    for (int i = 0; i < n; i++)
        y[i] = (x[i] - mean) * r * w[i] + (b ? b[i] : 0.0);
}

static double gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double silu(double x) {
    return x / (1.0 + exp(-x));
}
static double softcap(double x, double cap) {
    return cap * tanh(x / cap);
}

/* Llama 3.1's divisor of frequency freq: long wavelengths slowed by factor,
 * short ones kept, a linear blend between orig_ctx/high and orig_ctx/low. */
static double llama3_div(const ref_case *c, double freq) {
    double wavelen = 2 * M_PI / freq, scaled;
    if (wavelen < c->orig_ctx / c->high)
        scaled = freq;
    else if (wavelen > c->orig_ctx / c->low)
        scaled = freq / c->factor;
    else {
        double smooth = (c->orig_ctx / wavelen - c->low) / (c->high - c->low);
        scaled = (1 - smooth) * freq / c->factor + smooth * freq;
    }
    return freq / scaled;
}

/* YaRN: the pair index at which a frequency turns `beta` times over the
 * original context. */
static double yarn_corr_dim(const ref_case *c, int n_rot, double beta) {
    return n_rot * log(c->orig_ctx / (beta * 2 * M_PI)) / (2 * log(c->freq_base));
}

/* cos and sin (n_rot/2 each), times the magnitude factor, of each rotated
 * pair at position pos. */
static void ref_rope_cs(const ref_model *m, ref_ablate ab, int n_rot, int pos, double *cs,
                        double *sn) {
    const ref_case *c = m->c;
    const float *div_t = vec(m, -1, IX__R_ROPE_FREQS);
    if (c->scaling == IX_ROPE_SCALING_LONGROPE) {
        bool use_long = (c->ctx > c->orig_ctx) != (ab == AB_LONGROPE_SET);
        div_t = vec(m, -1, use_long ? IX__R_ROPE_LONG : IX__R_ROPE_SHORT);
    }
    if (ab == AB_FACTORS) div_t = NULL;
    bool llama3 = c->scaling == IX_ROPE_SCALING_LLAMA3 && ab != AB_FACTORS;
    bool yarn = c->scaling == IX_ROPE_SCALING_YARN;
    bool interp = (c->scaling == IX_ROPE_SCALING_LINEAR || yarn) && ab != AB_SCALE;
    double mscale = c->attn_factor * (yarn ? 1.0 + 0.1 * log(c->factor) : 1.0);
    if (ab == AB_MSCALE) mscale = 1;
    double lo = 0, hi = 0; /* yarn's ramp, in pairs */
    if (yarn) {
        lo = fmax(0, floor(yarn_corr_dim(c, n_rot, 32)));
        hi = fmin(n_rot - 1, ceil(yarn_corr_dim(c, n_rot, 1)));
    }
    assert_true(!div_t || n_rot == c->n_rot);
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = pow(c->freq_base, -2.0 * i / n_rot);
        double div = div_t ? div_t[i] : llama3 ? llama3_div(c, freq) : 1.0;
        double extrap = pos * freq / div, theta = interp ? extrap / c->factor : extrap;
        if (yarn && ab != AB_YARN_RAMP) {
            /* extrapolated below pair lo, interpolated above hi, a ramp between */
            double y = (i - lo) / fmax(0.001, hi - lo), ramp = 1 - fmin(1, fmax(0, y));
            theta = theta * (1 - ramp) + extrap * ramp;
        }
        cs[i] = cos(theta) * mscale;
        sn[i] = sin(theta) * mscale;
    }
}

static void ref_rope(const ref_model *m, ref_ablate ab, int n_rot, double *x, int n_heads,
                     const double *cs, const double *sn) {
    bool neox = m->rc->neox != (ab == AB_ROPE_MODE);
    for (int h = 0; h < n_heads; h++) {
        double *xh = x + h * m->c->hd;
        for (int i = 0; i < n_rot / 2; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
            double x0 = xh[a], x1 = xh[b];
            xh[a] = x0 * cs[i] - x1 * sn[i];
            xh[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* q, k, v of layer il from the normed input xn: separate or fused (Q rows,
 * then K, then V) projections, biases, per-head RMS norms of q and k. */
static void ref_qkv(const ref_model *m, ref_ablate ab, int il, const double *xn, double *q,
                    double *k, double *v) {
    const ref_case *c = m->c;
    int Q = c->H * c->hd, KV = c->Hkv * c->hd;
    bool bias = ab != AB_BIAS;
    if (m->rc->fused_qkv) {
        const ref_tensor *qkv = tn(m, il, IX__R_ATTN_QKV);
        const float *b = bias ? vec(m, il, IX__R_ATTN_QKV_B) : NULL;
        int k0 = ab == AB_FUSED_ORDER ? Q + KV : Q, v0 = ab == AB_FUSED_ORDER ? Q : Q + KV;
        ref_matvec(q, qkv, 0, Q, xn, b);
        ref_matvec(k, qkv, k0, KV, xn, b ? b + k0 : NULL);
        ref_matvec(v, qkv, v0, KV, xn, b ? b + v0 : NULL);
    } else {
        ref_matvec(q, tn(m, il, IX__R_ATTN_Q), 0, Q, xn, bias ? vec(m, il, IX__R_ATTN_Q_B) : NULL);
        ref_matvec(k, tn(m, il, IX__R_ATTN_K), 0, KV, xn, bias ? vec(m, il, IX__R_ATTN_K_B) : NULL);
        ref_matvec(v, tn(m, il, IX__R_ATTN_V), 0, KV, xn, bias ? vec(m, il, IX__R_ATTN_V_B) : NULL);
    }
    const float *qn = vec(m, il, IX__R_ATTN_Q_NORM), *kn = vec(m, il, IX__R_ATTN_K_NORM);
    for (int h = 0; h < c->H && m->rc->qk_norm && ab != AB_QK_NORM; h++)
        ref_norm(false, q + h * c->hd, q + h * c->hd, qn, NULL, c->hd);
    for (int h = 0; h < c->Hkv && m->rc->qk_norm && ab != AB_QK_NORM; h++)
        ref_norm(false, k + h * c->hd, k + h * c->hd, kn, NULL, c->hd);
}

/* The FFN of layer il on xf into o (E): gated (fused gate/up: gate rows
 * first) or a plain MLP with biases, then the post-norm. g, u: (F) scratch. */
static void ref_ffn(const ref_model *m, ref_ablate ab, int il, const double *xf, double *o,
                    double *g, double *u) {
    const ref_case *c = m->c;
    int F = c->F;
    bool gelu_act = m->rc->gelu != (ab == AB_ACT);
    if (m->rc->fused_gate_up) {
        const ref_tensor *gate_up = tn(m, il, IX__R_FFN_GATE_UP);
        ref_matvec(g, gate_up, ab == AB_FUSED_ORDER ? F : 0, F, xf, NULL);
        ref_matvec(u, gate_up, ab == AB_FUSED_ORDER ? 0 : F, F, xf, NULL);
    } else {
        if (m->rc->gated) ref_matvec(g, tn(m, il, IX__R_FFN_GATE), 0, F, xf, NULL);
        ref_matvec(u, tn(m, il, IX__R_FFN_UP), 0, F, xf, vec(m, il, IX__R_FFN_UP_B));
    }
    for (int i = 0; i < F; i++) {
        if (m->rc->gated)
            g[i] = (gelu_act ? gelu(g[i]) : silu(g[i])) * u[i];
        else
            g[i] = gelu_act ? gelu(u[i]) : silu(u[i]);
    }
    ref_matvec(o, tn(m, il, IX__R_FFN_DOWN), 0, c->E, g, vec(m, il, IX__R_FFN_DOWN_B));
    if (m->rc->post_norms && ab != AB_POST_NORMS)
        ref_norm(m->rc->layernorm, o, o, vec(m, il, IX__R_POST_FFN_NORM), NULL, c->E);
}

/* The attention output att (n_head * hd) of layer il at position p for q
 * (n_head * hd), over the keys and values kc, vc (p + 1, n_head_kv * hd) of
 * the positions before. score: (p + 1) scratch. */
static void ref_attend(const ref_model *m, ref_ablate ab, int il, int p, const double *kc,
                       const double *vc, const double *q, double *att, double *score) {
    const ref_case *c = m->c;
    int hd = c->hd, KV = c->Hkv * hd, group = c->H / c->Hkv;
    double scale = 1.0 / sqrt(ab == AB_QSCALE ? (double)c->E / c->H : (double)hd);
    /* a key at t is visible from p iff p - t < window, on the layers that slide */
    bool slides = c->window > 0 && ab != AB_WINDOW &&
                  (!m->rc->swa_alternate || il % 2 == 0 || ab == AB_WINDOW_ALL);
    int lo = slides && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
    for (int h = 0; h < c->H; h++) {
        const double *qh = q + h * hd;
        int kvh = h / group;
        double mx = -INFINITY, sum = 0;
        for (int t = lo; t <= p; t++) {
            const double *kt = kc + (size_t)t * (size_t)KV + kvh * hd;
            double s = 0;
            for (int d = 0; d < hd; d++)
                s += qh[d] * kt[d];
            s *= scale;
            if (c->attn_softcap > 0 && ab != AB_ATTN_SOFTCAP) s = softcap(s, c->attn_softcap);
            score[t] = s;
            mx = fmax(mx, s);
        }
        for (int t = lo; t <= p; t++)
            sum += score[t] = exp(score[t] - mx);
        for (int d = 0; d < hd; d++)
            att[h * hd + d] = 0;
        for (int t = lo; t <= p; t++) {
            const double *vt = vc + (size_t)t * (size_t)KV + kvh * hd;
            for (int d = 0; d < hd; d++)
                att[h * hd + d] += score[t] / sum * vt[d];
        }
    }
}

/* logits (n, V) of every position of toks, one token at a time. */
static void ref_forward(const ref_model *m, ref_ablate ab, const ix_token *toks, int n,
                        double *logits) {
    const ref_case *c = m->c;
    const ref_recipe *rc = m->rc;
    int E = c->E, hd = c->hd, Q = c->H * hd, KV = c->Hkv * hd, V = m->hp.n_vocab;
    int n_rot = ab == AB_N_ROT ? hd : c->n_rot;
    double *kc = calloc((size_t)c->L * (size_t)n * (size_t)KV, sizeof(double)); /* (L, n, KV) */
    double *vc = calloc((size_t)c->L * (size_t)n * (size_t)KV, sizeof(double)); /* (L, n, KV) */
    double *x = malloc((size_t)E * sizeof(double)), *xn = malloc((size_t)E * sizeof(double));
    double *xf = malloc((size_t)E * sizeof(double)), *o = malloc((size_t)E * sizeof(double));
    double *q = malloc((size_t)Q * sizeof(double)), *att = malloc((size_t)Q * sizeof(double));
    double *g = malloc((size_t)c->F * sizeof(double)), *u = malloc((size_t)c->F * sizeof(double));
    double *score = malloc((size_t)n * sizeof(double));
    double cs[256], sn[256];
    const ref_tensor *tok = tn(m, -1, IX__R_TOK_EMBD), *pos = tn(m, -1, IX__R_POS_EMBD);
    for (int p = 0; p < n; p++) {
        double es = rc->embd_scale && ab != AB_EMBD_SCALE ? sqrt((double)E) : 1.0;
        for (int i = 0; i < E; i++) {
            x[i] = tok->f[(int64_t)toks[p] * E + i];
            if (rc->learned_pos && ab != AB_POS_EMBD) x[i] += pos->f[(int64_t)p * E + i];
            x[i] *= es;
        }
        if (rc->rope) ref_rope_cs(m, ab, n_rot, p, cs, sn);
        for (int il = 0; il < c->L; il++) {
            double *k = kc + ((size_t)il * (size_t)n + (size_t)p) * (size_t)KV;
            double *v = vc + ((size_t)il * (size_t)n + (size_t)p) * (size_t)KV;
            const float *an = vec(m, il, IX__R_ATTN_NORM), *an_b = vec(m, il, IX__R_ATTN_NORM_B);
            ref_norm(rc->layernorm, xn, x, an, an_b, E);
            ref_qkv(m, ab, il, xn, q, k, v);
            if (rc->rope) {
                ref_rope(m, ab, n_rot, q, c->H, cs, sn);
                ref_rope(m, ab, n_rot, k, c->Hkv, cs, sn);
            }
            ref_attend(m, ab, il, p, kc + (size_t)il * (size_t)n * (size_t)KV,
                       vc + (size_t)il * (size_t)n * (size_t)KV, q, att, score);
            ref_matvec(o, tn(m, il, IX__R_ATTN_OUT), 0, E, att,
                       ab != AB_BIAS ? vec(m, il, IX__R_ATTN_OUT_B) : NULL);
            if (rc->post_norms && ab != AB_POST_NORMS)
                ref_norm(rc->layernorm, o, o, vec(m, il, IX__R_POST_ATTN_NORM), NULL, E);
            /* parallel: the FFN reads the attention's normed input, and both
             * outputs join x; sequential: the FFN reads norm(x + attention) */
            const float *fn = vec(m, il, IX__R_FFN_NORM), *fn_b = vec(m, il, IX__R_FFN_NORM_B);
            bool parallel = (rc->parallel || !fn) != (ab == AB_PARALLEL);
            for (int i = 0; i < E; i++)
                x[i] += o[i];
            if (parallel)
                memcpy(xf, xn, (size_t)E * sizeof(double));
            else if (fn)
                ref_norm(rc->layernorm, xf, x, fn, fn_b, E);
            else
                ref_norm(rc->layernorm, xf, x, an, an_b, E); /* (ablation only) */
            ref_ffn(m, ab, il, xf, o, g, u);
            for (int i = 0; i < E; i++)
                x[i] += o[i];
        }
        ref_norm(rc->layernorm, xn, x, vec(m, -1, IX__R_OUT_NORM), vec(m, -1, IX__R_OUT_NORM_B), E);
        const ref_tensor *out = tn(m, -1, IX__R_OUTPUT);
        double *lp = logits + (size_t)p * (size_t)V;
        ref_matvec(lp, out ? out : tok, 0, V, xn, vec(m, -1, IX__R_OUTPUT_B));
        for (int i = 0; i < V && c->final_softcap > 0 && ab != AB_FINAL_SOFTCAP; i++)
            lp[i] = softcap(lp[i], c->final_softcap);
    }
    free(kc);
    free(vc);
    free(x);
    free(xn);
    free(xf);
    free(o);
    free(q);
    free(att);
    free(g);
    free(u);
    free(score);
}

/* ---- inferx ------------------------------------------------------------------------ */

/* Logits (n, V) of every position: k_chunks as prefill chunks, then one
 * token per step. *held = blocks the sequence still holds at the end,
 * *n_blocks = its block table length. */
static void run_inferx(const char *path, const ref_model *rm, ix_kv_dtype kv_type,
                       const ix_token *toks, int n, float *logits, int32_t *held,
                       int32_t *n_blocks) {
    const ref_case *c = rm->c;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    if (ix_model_load(&m, path, &err) != IX_OK) fail_msg("%s: %s", c->name, err.msg);
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    /* the cache drops blocks only when every layer slides */
    assert_int_equal(kp.sliding_window, rm->rc->swa_alternate ? 0 : c->window);
    kp.dtype = kv_type;
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

void ref_model_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/model_ref_%s_%ld.gguf", IX_BINARY_DIR, name, (long)getpid());
}

/* ---- one case with one weight type ------------------------------------------------ */

typedef struct instance {
    char name[64];
    ref_case c; /* filled */
    const wtype *t;
} instance;

/* The reference's logits (n, V), and without each ablation of the case
 * (with f32 weights) in abl[a]; free with refs_free. */
typedef struct refs {
    double *full;
    double *abl[AB_COUNT];
} refs;

static void refs_make(refs *r, const ref_model *m, bool ablations, const ix_token *toks, int n) {
    size_t n_logits = (size_t)n * (size_t)m->hp.n_vocab;
    memset(r, 0, sizeof *r);
    r->full = malloc(n_logits * sizeof(double));
    ref_forward(m, AB_NONE, toks, n, r->full);
    for (int a = 0; a < AB_COUNT && ablations; a++)
        if (m->c->ab & (1u << a)) {
            r->abl[a] = malloc(n_logits * sizeof(double));
            ref_forward(m, (ref_ablate)a, toks, n, r->abl[a]);
        }
}

static void refs_free(refs *r) {
    free(r->full);
    for (int a = 0; a < AB_COUNT; a++)
        free(r->abl[a]);
}

/* inferx's logits got (n, V) on the current ISA path against the reference;
 * held / n_blocks: the sequence's blocks at the end. */
static void check_logits(const instance *in, const ref_model *m, const refs *r, const float *got,
                         int n, double tol, int32_t held, int32_t n_blocks) {
    const ref_case *c = &in->c;
    int V = m->hp.n_vocab, row;
    double err = max_rel_err(got, r->full, n, V, &row);
    fprintf(stderr,
            "  %-30s %-12s max normalized error %.3g (position %d; tolerance %.0e); blocks held %d "
            "of %d\n",
            in->name, ix_kernels()->name, err, row, tol, held, n_blocks);
    if (!(err <= tol))
        fail_msg(
            "%s on %s: logits at position %d differ from the reference by %.3g (tolerance %.0e)",
            in->name, ix_kernels()->name, row, err, tol);
    /* Each feature must matter: inferx is far from the reference without it. */
    for (int a = 0; a < AB_COUNT; a++) {
        if (!r->abl[a]) continue;
        int arow;
        double aerr = max_rel_err(got, r->abl[a], n, V, &arow);
        fprintf(stderr, "  %-30s %-12s   without: %-44s %.3g\n", "", "", k_ablation_what[a], aerr);
        if (!(aerr > 10 * tol))
            fail_msg("%s: the reference with %s is as close (%.3g): the test is blind to it",
                     in->name, k_ablation_what[a], aerr);
    }
    /* the cache drops blocks behind the window only when every layer slides */
    if (c->window && !m->rc->swa_alternate) {
        int32_t most = (c->window + c->block_size - 1) / c->block_size + 1;
        if (held > most || held >= n_blocks)
            fail_msg("%s: the sequence holds %d of %d blocks; a window of %d needs at most %d",
                     in->name, held, n_blocks, c->window, most);
    } else {
        assert_int_equal(held, n_blocks);
    }
}

static void test_instance(void **state) {
    const instance *in = *state;
    const ref_case *c = &in->c;
    const wtype *wt = in->t;
    ref_model m;
    ref_model_make(&m, c, wt->type, 1234);
    int V = m.hp.n_vocab;
    char path[512];
    ref_model_path(path, sizeof path, in->name);
    ref_model_write(&m, NULL, path);
    double tol = c->kv16 ? KV16_TOL : wt->tol;
    ix_kv_dtype kv_type = c->kv16 ? IX_KV_F16 : wt->kv;

    ix_token toks[N_TOK];
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (ix_token)(((uint64_t)i * 2654435761u + 17) % (uint64_t)V);
    refs r;
    refs_make(&r, &m, wt->type == IX_DTYPE_F32, toks, N_TOK);
    size_t n_logits = (size_t)N_TOK * (size_t)V;
    float *got = malloc(n_logits * sizeof(float));
    bool quant = wt->type == IX_DTYPE_Q8_0 || wt->type == IX_DTYPE_Q4_0;
    float *rows = quant ? malloc(n_logits * sizeof(float)) : NULL;
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
            run_inferx(path, &m, kv_type, toks, N_TOK, rows, &held, &n_blocks);
            unsetenv("INFERX_REPACK");
        }
        run_inferx(path, &m, kv_type, toks, N_TOK, got, &held, &n_blocks);
        if (quant && memcmp(rows, got, n_logits * sizeof(float)) != 0)
            fail_msg("%s on %s: packed-weight logits differ from the row layout's", in->name,
                     ix_kernels()->name);
        check_logits(in, &m, &r, got, N_TOK, tol, held, n_blocks);
    }
    unlink(path);
    refs_free(&r);
    free(rows);
    free(got);
    ref_model_free(&m);
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

int ref_run(const char *group, const ref_case *cases, size_t n_cases,
            const struct CMUnitTest *extra, size_t n_extra) {
    size_t max = n_cases * REF_N_TYPES + n_extra, n = 0;
    instance *inst = calloc(max, sizeof *inst);
    struct CMUnitTest *tests = calloc(max, sizeof *tests);
    for (size_t i = 0; i < n_cases; i++) {
        ref_case c = ref_case_fill(&cases[i]);
        if (!(c.types & T_F32)) {
            fprintf(stderr, "%s: every case runs with f32 weights (its ablations do)\n", c.name);
            return 1;
        }
        for (int t = 0; t < REF_N_TYPES; t++) {
            if (!(c.types & TY(t))) continue;
            inst[n] = (instance){.c = c, .t = &k_types[t]};
            snprintf(inst[n].name, sizeof inst[n].name, "%s_%s", c.name, k_types[t].name);
            tests[n] = (struct CMUnitTest){inst[n].name, test_instance, NULL, NULL, &inst[n]};
            n++;
        }
    }
    for (size_t i = 0; i < n_extra; i++)
        tests[n++] = extra[i];
    int rc = _cmocka_run_group_tests(group, tests, n, setup, teardown);
    free(tests);
    free(inst);
    return rc;
}
