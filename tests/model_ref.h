/* The double-precision reference of the model tests (test_model_ref.c:
 * loader and forward-pass features; test_arch_ref.c: every architecture of
 * the table): tiny random models made from the architecture table, a naive
 * forward pass written straight from the math (double precision, dense K/V,
 * no paging, no batching), and the comparison of inferx's logits with it on
 * every ISA path this CPU runs (model_ref.c). Include after cmocka.h.
 *
 * A case (ref_case) is one model: an architecture, its dimensions, the
 * features it turns on (RoPE scaling, window, soft-caps, optional tensors),
 * the weight types it runs with and the features whose absence it checks
 * inferx can see (ablations). */
#ifndef IX_TEST_MODEL_REF_H
#define IX_TEST_MODEL_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferx/model.h"
#include "model/model_int.h" /* the role of each tensor name */

#define REF_MAX_LAYER 4

/* What the reference can leave out, each checked to make inferx's logits far
 * from it: the test can fail. */
/* clang-format off */
#define REF_ABLATIONS(X)                                             \
    X(WINDOW, "no window")                                           \
    X(WINDOW_ALL, "window on every layer")                           \
    X(FACTORS, "no frequency factors")                               \
    X(SCALE, "no position scaling")                                  \
    X(YARN_RAMP, "no yarn extrapolation blend")                      \
    X(MSCALE, "no rope magnitude factor")                            \
    X(LONGROPE_SET, "the other longrope factors")                    \
    X(ROPE_MODE, "the other pair layout")                            \
    X(N_ROT, "the whole head rotated")                               \
    X(BIAS, "no attention biases")                                   \
    X(QK_NORM, "no q/k norms")                                       \
    X(QSCALE, "scores scaled by 1/sqrt(n_embd/n_head)")              \
    X(ATTN_SOFTCAP, "no score cap")                                  \
    X(FINAL_SOFTCAP, "no logit cap")                                 \
    X(POST_NORMS, "no post-norms")                                   \
    X(PARALLEL, "the other block wiring")                            \
    X(ACT, "SiLU for GELU and GELU for SiLU")                        \
    X(FUSED_ORDER, "fused rows swapped (K with V, gate with up)")    \
    X(EMBD_SCALE, "no embedding scale")                              \
    X(POS_EMBD, "no learned positions")

typedef enum ref_ablate {
#define X(name, what) AB_##name,
    REF_ABLATIONS(X)
#undef X
    AB_COUNT,
    AB_NONE = -1
} ref_ablate;
/* clang-format on */

#define AB(name) (1u << AB_##name)
/* Optional tensors by role (model_int.h). */
#define R(role) IX__ROLE(IX__R_##role)
#define ATTN_BIASES (R(ATTN_Q_B) | R(ATTN_K_B) | R(ATTN_V_B))

/* Weight types, with f16 K/V except for f32 weights; see model_ref.c for
 * their tolerances. */
typedef enum ref_type { REF_F32, REF_F16, REF_BF16, REF_Q8_0, REF_Q4_0, REF_N_TYPES } ref_type;
#define TY(t) (1u << (t))
#define T_F32 TY(REF_F32)
#define T_Q8 TY(REF_Q8_0)
#define T_Q4 TY(REF_Q4_0)

typedef struct ref_case {
    const char *name;
    const char *arch;
    int E, H, Hkv, hd, F, L;
    int n_rot; /* 0: head_dim */
    int ctx;   /* context_length */
    float freq_base;
    ix_rope_scaling scaling;
    float factor, low, high, attn_factor; /* factor, attn_factor 0: 1 */
    int orig_ctx;
    float attn_softcap, final_softcap;
    int window;
    uint64_t opt;   /* optional tensors written (R() bits) */
    unsigned types; /* weight types run (TY() bits; f32 always); 0: all */
    bool kv16;      /* f16 K/V also with f32 weights (tolerance 3e-3) */
    int block_size;
    unsigned ab; /* ablations checked with f32 weights (AB() bits) */
} ref_case;

/* Unset fields take the defaults: E 64, 4 heads, 2 KV heads, head_dim E/H,
 * FFN 96, 2 layers, full rotary, context 256, base 10000, no scaling, blocks
 * of 16, every weight type. */
ref_case ref_case_fill(const ref_case *in);

/* Runs each case with each of its weight types as a cmocka test named
 * <case>_<type>, then the extra tests; cmocka's result. The bundled model's
 * tokenizer is open meanwhile (every model here uses it). */
int ref_run(const char *group, const ref_case *cases, size_t n_cases,
            const struct CMUnitTest *extra, size_t n_extra);

/* ---- models, for tests of their own ---------------------------------------------- */

/* One tensor: data as the file holds it, f its values as inferx reads them
 * (dequantized), (ne1 rows, ne0). */
typedef struct ref_tensor {
    char name[64];
    ix_dtype type;
    int64_t ne0, ne1;
    void *data; /* NULL: not in the file */
    float *f;
} ref_tensor;

typedef struct ref_model {
    const ref_case *c; /* filled */
    const struct ref_recipe *rc;
    ix_model_hparams hp;                          /* as written */
    ref_tensor t[REF_MAX_LAYER + 1][IX__R_COUNT]; /* [0]: global roles; [il + 1]: layer il's */
} ref_model;

/* A random model of case c (filled; borrowed) with matmul weights of type t. */
void ref_model_make(ref_model *m, const ref_case *c, ix_dtype t, uint64_t seed);
void ref_model_free(ref_model *m);

/* How a malformed file differs from the good one: tensor `role` of layer il
 * (global when il < 0) dropped, grown by 32 in its last dimension or retyped. */
typedef enum ref_mut_kind { MUT_DROP, MUT_SHAPE, MUT_TYPE_IQ2_XXS, MUT_TYPE_F16 } ref_mut_kind;
typedef struct ref_mutation {
    ref_mut_kind kind;
    int il;
    ix__role role;
} ref_mutation;

/* Writes m as a GGUF file (mut NULL: as it is). */
void ref_model_write(const ref_model *m, const ref_mutation *mut, const char *path);
/* A file name of this process in the build directory. */
void ref_model_path(char *buf, size_t n, const char *name);

#endif
