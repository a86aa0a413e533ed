/*
 * The architecture table: every architecture inferx runs is one row of
 * k_archs (its recipe and its tensor roles), every tensor name exists once in
 * ix__roles, and every `<arch>.*` metadata key once in k_keys. The loader
 * (load.c), the forward pass (forward.c), `inferx mkmodel --arch` and the
 * tests all read these tables; docs/model.md walks through adding a row.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_int.h"

#define L_OFF(f) offsetof(ix__layer, f)
#define M_OFF(f) offsetof(struct ix_model, f)

#define G_MAT IX_TENSOR_MATRIX
#define G_OUT IX_TENSOR_OUTPUT
#define G_NORM IX_TENSOR_NORM
#define G_BIAS IX_TENSOR_BIAS
#define G_ROPE IX_TENSOR_ROPE
/* Name, group, shape (ne0, ne1), bound field. */
const ix__role_row ix__roles[IX__R_COUNT] = {
    [IX__R_TOK_EMBD] = {"token_embd.weight", G_MAT, IX__D_EMBD, IX__D_VOCAB, M_OFF(tok_embd)},
    [IX__R_POS_EMBD] = {"position_embd.weight", G_MAT, IX__D_EMBD, IX__D_CTX, M_OFF(pos_embd)},
    [IX__R_OUT_NORM] = {"output_norm.weight", G_NORM, IX__D_EMBD, IX__D_1, M_OFF(out_norm)},
    [IX__R_OUT_NORM_B] = {"output_norm.bias", G_BIAS, IX__D_EMBD, IX__D_1, M_OFF(out_norm_b)},
    [IX__R_OUTPUT] = {"output.weight", G_OUT, IX__D_EMBD, IX__D_VOCAB, M_OFF(output)},
    [IX__R_OUTPUT_B] = {"output.bias", G_BIAS, IX__D_VOCAB, IX__D_1, M_OFF(output_b)},
    [IX__R_ROPE_FREQS] = {"rope_freqs.weight", G_ROPE, IX__D_ROT_HALF, IX__D_1, M_OFF(rope_freqs)},
    [IX__R_ROPE_LONG] = {"rope_factors_long.weight", G_ROPE, IX__D_ROT_HALF, IX__D_1, M_OFF(rope_long)},
    [IX__R_ROPE_SHORT] = {"rope_factors_short.weight", G_ROPE, IX__D_ROT_HALF, IX__D_1, M_OFF(rope_short)},
    [IX__R_ATTN_NORM] = {"attn_norm.weight", G_NORM, IX__D_EMBD, IX__D_1, L_OFF(attn_norm)},
    [IX__R_ATTN_NORM_B] = {"attn_norm.bias", G_BIAS, IX__D_EMBD, IX__D_1, L_OFF(attn_norm_b)},
    [IX__R_ATTN_Q] = {"attn_q.weight", G_MAT, IX__D_EMBD, IX__D_Q, L_OFF(wq)},
    [IX__R_ATTN_K] = {"attn_k.weight", G_MAT, IX__D_EMBD, IX__D_KV, L_OFF(wk)},
    [IX__R_ATTN_V] = {"attn_v.weight", G_MAT, IX__D_EMBD, IX__D_KV, L_OFF(wv)},
    [IX__R_ATTN_QKV] = {"attn_qkv.weight", G_MAT, IX__D_EMBD, IX__D_QKV, L_OFF(wqkv)},
    [IX__R_ATTN_Q_B] = {"attn_q.bias", G_BIAS, IX__D_Q, IX__D_1, L_OFF(bq)},
    [IX__R_ATTN_K_B] = {"attn_k.bias", G_BIAS, IX__D_KV, IX__D_1, L_OFF(bk)},
    [IX__R_ATTN_V_B] = {"attn_v.bias", G_BIAS, IX__D_KV, IX__D_1, L_OFF(bv)},
    [IX__R_ATTN_QKV_B] = {"attn_qkv.bias", G_BIAS, IX__D_QKV, IX__D_1, L_OFF(bqkv)},
    [IX__R_ATTN_Q_NORM] = {"attn_q_norm.weight", G_NORM, IX__D_HEAD, IX__D_1, L_OFF(q_norm)},
    [IX__R_ATTN_K_NORM] = {"attn_k_norm.weight", G_NORM, IX__D_HEAD, IX__D_1, L_OFF(k_norm)},
    [IX__R_ATTN_OUT] = {"attn_output.weight", G_MAT, IX__D_Q, IX__D_EMBD, L_OFF(wo)},
    [IX__R_ATTN_OUT_B] = {"attn_output.bias", G_BIAS, IX__D_EMBD, IX__D_1, L_OFF(bo)},
    [IX__R_POST_ATTN_NORM] = {"post_attention_norm.weight", G_NORM, IX__D_EMBD, IX__D_1, L_OFF(post_attn_norm)},
    [IX__R_FFN_NORM] = {"ffn_norm.weight", G_NORM, IX__D_EMBD, IX__D_1, L_OFF(ffn_norm)},
    [IX__R_FFN_NORM_B] = {"ffn_norm.bias", G_BIAS, IX__D_EMBD, IX__D_1, L_OFF(ffn_norm_b)},
    [IX__R_FFN_GATE] = {"ffn_gate.weight", G_MAT, IX__D_EMBD, IX__D_FF, L_OFF(w_gate)},
    [IX__R_FFN_UP] = {"ffn_up.weight", G_MAT, IX__D_EMBD, IX__D_FF, L_OFF(w_up)},
    /* Phi-3 stores gate and up as one ffn_up of twice the rows, gate first */
    [IX__R_FFN_GATE_UP] = {"ffn_up.weight", G_MAT, IX__D_EMBD, IX__D_FF2, L_OFF(w_gate_up)},
    [IX__R_FFN_UP_B] = {"ffn_up.bias", G_BIAS, IX__D_FF, IX__D_1, L_OFF(b_up)},
    [IX__R_FFN_DOWN] = {"ffn_down.weight", G_MAT, IX__D_FF, IX__D_EMBD, L_OFF(w_down)},
    [IX__R_FFN_DOWN_B] = {"ffn_down.bias", G_BIAS, IX__D_EMBD, IX__D_1, L_OFF(b_down)},
    [IX__R_POST_FFN_NORM] = {"post_ffw_norm.weight", G_NORM, IX__D_EMBD, IX__D_1, L_OFF(post_ffn_norm)},
};

#define R(x) IX__ROLE(IX__R_##x)
/* Roles every architecture has. */
#define BASE (R(TOK_EMBD) | R(OUT_NORM) | R(ATTN_NORM) | R(ATTN_OUT) | R(FFN_DOWN))
#define QKV3 (R(ATTN_Q) | R(ATTN_K) | R(ATTN_V))
#define QKV3_B (R(ATTN_Q_B) | R(ATTN_K_B) | R(ATTN_V_B))
#define GATED (R(FFN_NORM) | R(FFN_GATE) | R(FFN_UP))
#define LN_B (R(ATTN_NORM_B) | R(OUT_NORM_B))

static const ix__arch_row k_archs[IX_ARCH_COUNT] = {
    [IX_ARCH_LLAMA] = {"llama", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NORM, IX_FFN_SWIGLU, false, false, false,
                       false, IX_SWA_ALL, BASE | QKV3 | GATED,
                       R(OUTPUT) | R(ROPE_FREQS) | QKV3_B | R(ATTN_OUT_B)},
    [IX_ARCH_MISTRAL] = {"mistral", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NORM, IX_FFN_SWIGLU, false, false, false,
                         false, IX_SWA_ALL, BASE | QKV3 | GATED, R(OUTPUT) | R(ROPE_FREQS)},
    [IX_ARCH_QWEN2] = {"qwen2", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_SWIGLU, false, false, false,
                       false, IX_SWA_ALL, BASE | QKV3 | QKV3_B | GATED, R(OUTPUT)},
    [IX_ARCH_QWEN3] = {"qwen3", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_SWIGLU, false, false, false,
                       false, IX_SWA_ALL, BASE | QKV3 | R(ATTN_Q_NORM) | R(ATTN_K_NORM) | GATED, R(OUTPUT)},
    [IX_ARCH_PHI3] = {"phi3", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_SWIGLU, false, false, false,
                      false, IX_SWA_ALL, BASE | R(ATTN_QKV) | R(FFN_NORM) | R(FFN_GATE_UP) | R(OUTPUT),
                      R(OUTPUT_B) | R(ROPE_LONG) | R(ROPE_SHORT)},
    [IX_ARCH_GEMMA] = {"gemma", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_GEGLU, false, true, false,
                       false, IX_SWA_ALL, BASE | QKV3 | GATED, 0},
    [IX_ARCH_GEMMA2] = {"gemma2", IX_NORM_RMS, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_GEGLU, false, true, true,
                        true, IX_SWA_ALTERNATE,
                        BASE | QKV3 | GATED | R(POST_ATTN_NORM) | R(POST_FFN_NORM), 0},
    [IX_ARCH_GPT2] = {"gpt2", IX_NORM_LAYER, IX_POS_LEARNED, IX_ROPE_NORM, IX_FFN_GELU, false, false, false,
                      false, IX_SWA_ALL,
                      BASE | LN_B | R(POS_EMBD) | R(ATTN_QKV) | R(ATTN_QKV_B) | R(ATTN_OUT_B) | R(FFN_NORM) |
                          R(FFN_NORM_B) | R(FFN_UP) | R(FFN_UP_B) | R(FFN_DOWN_B),
                      R(OUTPUT)},
    [IX_ARCH_STARCODER2] = {"starcoder2", IX_NORM_LAYER, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_GELU, false, false,
                            false, false, IX_SWA_ALL,
                            BASE | LN_B | QKV3 | R(FFN_NORM) | R(FFN_NORM_B) | R(FFN_UP),
                            R(OUTPUT) | QKV3_B | R(ATTN_OUT_B) | R(FFN_UP_B) | R(FFN_DOWN_B)},
    [IX_ARCH_STABLELM] = {"stablelm", IX_NORM_LAYER, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_SWIGLU, false, false,
                          false, false, IX_SWA_ALL,
                          BASE | LN_B | QKV3 | R(FFN_GATE) | R(FFN_UP) | R(OUTPUT),
                          QKV3_B | R(FFN_NORM) | R(FFN_NORM_B)},
    [IX_ARCH_FALCON] = {"falcon", IX_NORM_LAYER, IX_POS_ROPE, IX_ROPE_NEOX, IX_FFN_GELU, true, false, false,
                        false, IX_SWA_ALL, BASE | LN_B | R(ATTN_QKV) | R(FFN_UP), R(OUTPUT)},
};
#undef R

const ix__arch_row *ix__arch_row_of(ix_arch a) { return (unsigned)a < IX_ARCH_COUNT ? &k_archs[a] : NULL; }

const char *ix_model_arch_name(ix_arch a) {
    return (unsigned)a < IX_ARCH_COUNT ? k_archs[a].name : NULL;
}

ix_status ix_model_arch_init(ix_model_hparams *hp, const char *name, ix_errbuf *err) {
    for (int a = 0; a < IX_ARCH_COUNT; a++) {
        const ix__arch_row *r = &k_archs[a];
        if (strcmp(r->name, name) != 0) continue;
        hp->arch = (ix_arch)a;
        snprintf(hp->arch_name, sizeof hp->arch_name, "%s", r->name);
        hp->norm = r->norm;
        hp->pos = r->pos;
        hp->rope_mode = r->rope_mode;
        hp->ffn = r->ffn;
        hp->parallel_blocks = r->parallel;
        hp->post_norms = r->post_norms;
        hp->swa = r->swa;
        hp->embd_scale = 1.0f; /* sqrt(n_embd) once the dimensions are known */
        hp->rope_freq_scale = 1.0f;
        hp->rope_attn_factor = 1.0f;
        return IX_OK;
    }
    char list[256] = "";
    size_t at = 0;
    for (int a = 0; a < IX_ARCH_COUNT && at < sizeof list; a++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", a ? ", " : "", k_archs[a].name);
    return ix_errf(err, IX_ERR_UNSUPPORTED, "architecture '%s' is not supported (supported: %s)", name, list);
}

int64_t ix__dim_value(const ix_model_hparams *hp, ix__dim d) {
    int64_t q = (int64_t)hp->n_head * hp->head_dim, kv = (int64_t)hp->n_head_kv * hp->head_dim;
    switch (d) {
    case IX__D_1: return 1;
    case IX__D_EMBD: return hp->n_embd;
    case IX__D_Q: return q;
    case IX__D_KV: return kv;
    case IX__D_QKV: return q + 2 * kv;
    case IX__D_FF: return hp->n_ff;
    case IX__D_FF2: return 2 * (int64_t)hp->n_ff;
    case IX__D_HEAD: return hp->head_dim;
    case IX__D_VOCAB: return hp->n_vocab;
    case IX__D_CTX: return hp->n_ctx_train;
    case IX__D_ROT_HALF: return hp->n_rot / 2;
    }
    return 0;
}

bool ix_model_layer_slides(const ix_model_hparams *hp, int32_t il) {
    if (hp->sliding_window <= 0) return false;
    return hp->swa == IX_SWA_ALL || il % 2 == 0;
}

ix_status ix_model_arch_tensors(const ix_model_hparams *hp,
                                bool (*fn)(void *ctx, const ix_model_tensor_spec *t), void *ctx) {
    const ix__arch_row *a = ix__arch_row_of(hp->arch);
    if (!a) return IX_ERR_INVALID;
    for (int32_t il = -1; il < hp->n_layer; il++) {
        for (int r = il < 0 ? 0 : IX__R_FIRST_LAYER; r < (il < 0 ? IX__R_FIRST_LAYER : IX__R_COUNT); r++) {
            uint64_t bit = IX__ROLE(r);
            if (!((a->req | a->opt) & bit)) continue;
            const ix__role_row *row = &ix__roles[r];
            ix_model_tensor_spec t = {.group = row->group, .required = (a->req & bit) != 0,
                                      .ne0 = ix__dim_value(hp, row->ne0),
                                      .ne1 = ix__dim_value(hp, row->ne1)};
            if (il < 0) snprintf(t.name, sizeof t.name, "%s", row->name);
            else snprintf(t.name, sizeof t.name, "blk.%d.%s", (int)il, row->name);
            if (!fn(ctx, &t)) return IX_ERR_INVALID;
        }
    }
    return IX_OK;
}

/* ---- metadata keys --------------------------------------------------------
 * One row per `<arch>.<suffix>` key: type, field and when it applies. Keys
 * that are absent keep the defaults ix__read_hparams sets first. */
typedef enum key_when {
    K_ALWAYS, /* every architecture */
    K_ROPE,   /* rotary position encodings */
    K_RMS,    /* RMSNorm models */
    K_LN,     /* LayerNorm models */
    K_SOFTCAP /* architectures with soft-capping */
} key_when;

typedef struct key_row {
    const char *suffix;
    bool f32, required;
    key_when when;
    size_t offset; /* int32_t or float in ix_model_hparams */
} key_row;

#define H_OFF(f) offsetof(ix_model_hparams, f)
static const key_row k_keys[] = {
    {"context_length", false, false, K_ALWAYS, H_OFF(n_ctx_train)},
    {"embedding_length", false, true, K_ALWAYS, H_OFF(n_embd)},
    {"block_count", false, true, K_ALWAYS, H_OFF(n_layer)},
    {"feed_forward_length", false, true, K_ALWAYS, H_OFF(n_ff)},
    {"attention.head_count", false, true, K_ALWAYS, H_OFF(n_head)},
    {"attention.head_count_kv", false, false, K_ALWAYS, H_OFF(n_head_kv)},
    {"attention.key_length", false, false, K_ALWAYS, H_OFF(head_dim)},
    {"attention.layer_norm_rms_epsilon", true, false, K_RMS, H_OFF(norm_eps)},
    {"attention.layer_norm_epsilon", true, false, K_LN, H_OFF(norm_eps)},
    {"attention.sliding_window", false, false, K_ALWAYS, H_OFF(sliding_window)},
    {"rope.dimension_count", false, false, K_ROPE, H_OFF(n_rot)},
    {"rope.freq_base", true, false, K_ROPE, H_OFF(rope_freq_base)},
    {"rope.scaling.factor", true, false, K_ROPE, H_OFF(rope_factor)},
    {"rope.scaling.low_freq_factor", true, false, K_ROPE, H_OFF(rope_low_freq_factor)},
    {"rope.scaling.high_freq_factor", true, false, K_ROPE, H_OFF(rope_high_freq_factor)},
    {"rope.scaling.original_context_length", false, false, K_ROPE, H_OFF(rope_orig_ctx)},
    {"rope.scaling.attn_factor", true, false, K_ROPE, H_OFF(rope_attn_factor)},
    {"attn_logit_softcapping", true, false, K_SOFTCAP, H_OFF(attn_softcap)},
    {"final_logit_softcapping", true, false, K_SOFTCAP, H_OFF(final_softcap)},
};
#define K_VALUE_LEN "attention.value_length"
#define K_SCALING_TYPE "rope.scaling.type"

static const char *const k_scaling_names[] = {
    [IX_ROPE_SCALING_NONE] = "none", [IX_ROPE_SCALING_LINEAR] = "linear",
    [IX_ROPE_SCALING_YARN] = "yarn", [IX_ROPE_SCALING_LLAMA3] = "llama3",
    [IX_ROPE_SCALING_LONGROPE] = "longrope",
};

static bool key_applies(const ix_model_hparams *hp, key_when w) {
    const ix__arch_row *a = ix__arch_row_of(hp->arch);
    switch (w) {
    case K_ALWAYS: return true;
    case K_ROPE: return hp->pos == IX_POS_ROPE;
    case K_RMS: return hp->norm == IX_NORM_RMS;
    case K_LN: return hp->norm == IX_NORM_LAYER;
    case K_SOFTCAP: return a && a->softcaps;
    }
    return false;
}

static ix_status read_key(ix_model_hparams *hp, const ix_gguf *g, const key_row *k, ix_errbuf *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, k->suffix);
    void *field = (char *)hp + k->offset;
    ix_status s;
    if (k->f32) {
        float v;
        s = ix_gguf_get_f32(g, key, &v, err);
        if (s == IX_OK && !isfinite(v)) return ix_errf(err, IX_ERR_RANGE, "%s is not a finite number", key);
        if (s == IX_OK) *(float *)field = v;
    } else {
        uint32_t v;
        s = ix_gguf_get_u32(g, key, &v, err);
        if (s == IX_OK && v > INT32_MAX) return ix_errf(err, IX_ERR_RANGE, "%s = %u is out of range", key, v);
        if (s == IX_OK) *(int32_t *)field = (int32_t)v;
    }
    if (s == IX_ERR_NOT_FOUND && k->required) return ix_errf(err, IX_ERR_FORMAT, "required key '%s' is missing", key);
    return s == IX_ERR_NOT_FOUND ? IX_OK : s;
}

/* Rope scaling type and its parameters. */
static ix_status read_rope_scaling(ix_model_hparams *hp, const ix_gguf *g, ix_errbuf *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, K_SCALING_TYPE);
    ix_str type = {"", 0};
    ix_status s = ix_gguf_get_str(g, key, &type, err);
    if (s != IX_OK && s != IX_ERR_NOT_FOUND) return s;
    hp->rope_scaling = IX_ROPE_SCALING_NONE;
    if (type.len) {
        size_t i = 0;
        while (i < IX_ARRAY_LEN(k_scaling_names) && !ix_str_eq(type, k_scaling_names[i])) i++;
        if (i == IX_ARRAY_LEN(k_scaling_names))
            return ix_errf(err, IX_ERR_UNSUPPORTED, "rope scaling type '%.*s' is not supported", (int)type.len,
                           type.ptr);
        hp->rope_scaling = (ix_rope_scaling)i;
    }
    if (!(hp->rope_factor > 0)) return ix_errf(err, IX_ERR_RANGE, "rope.scaling.factor must be > 0");
    if (!(hp->rope_attn_factor > 0)) return ix_errf(err, IX_ERR_RANGE, "rope.scaling.attn_factor must be > 0");
    switch (hp->rope_scaling) {
    case IX_ROPE_SCALING_NONE:
    case IX_ROPE_SCALING_LONGROPE: break;
    case IX_ROPE_SCALING_LINEAR:
    case IX_ROPE_SCALING_YARN: hp->rope_freq_scale = 1.0f / hp->rope_factor; break;
    case IX_ROPE_SCALING_LLAMA3:
        if (!(hp->rope_high_freq_factor > hp->rope_low_freq_factor))
            return ix_errf(err, IX_ERR_RANGE, "llama3 rope scaling needs high_freq_factor > low_freq_factor");
        break;
    }
    /* Llama 3.1's files name it; older llama3 writers relied on 8192 */
    if (hp->rope_scaling == IX_ROPE_SCALING_LLAMA3 && hp->rope_orig_ctx <= 0) hp->rope_orig_ctx = 8192;
    if (hp->rope_scaling != IX_ROPE_SCALING_NONE && hp->rope_scaling != IX_ROPE_SCALING_LINEAR &&
        hp->rope_orig_ctx <= 0)
        return ix_errf(err, IX_ERR_RANGE, "%s rope scaling needs rope.scaling.original_context_length",
                       k_scaling_names[hp->rope_scaling]);
    return IX_OK;
}

ix_status ix__read_hparams(ix_model_hparams *hp, const ix_gguf *g, ix_errbuf *err) {
    /* defaults; -1: derived from other keys below */
    hp->n_ctx_train = 2048;
    hp->n_head_kv = -1;
    hp->head_dim = -1;
    hp->n_rot = -1;
    hp->norm_eps = 1e-5f;
    hp->rope_freq_base = 10000.0f;
    hp->rope_factor = 1.0f;
    hp->rope_low_freq_factor = 1.0f;
    hp->rope_high_freq_factor = 4.0f;
    hp->rope_orig_ctx = 0;
    ix_status s;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_keys); i++)
        if (key_applies(hp, k_keys[i].when) && (s = read_key(hp, g, &k_keys[i], err)) != IX_OK) return s;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 || hp->n_ctx_train <= 0)
        return ix_errf(err, IX_ERR_FORMAT, "model dimensions must be positive");
    if (hp->n_head_kv < 0) hp->n_head_kv = hp->n_head;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return ix_errf(err, IX_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                       hp->n_head_kv);
    if (hp->head_dim < 0) hp->head_dim = hp->n_embd / hp->n_head;
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, K_VALUE_LEN);
    uint32_t vlen = (uint32_t)hp->head_dim;
    s = ix_gguf_get_u32(g, key, &vlen, err);
    if (s != IX_OK && s != IX_ERR_NOT_FOUND) return s;
    if (hp->head_dim <= 0 || hp->head_dim % 2 || vlen != (uint32_t)hp->head_dim || hp->head_dim > 1024)
        return ix_errf(err, IX_ERR_UNSUPPORTED, "head dimension %d (value %u) is not supported", hp->head_dim,
                       vlen);
    if (hp->n_rot < 0) hp->n_rot = hp->pos == IX_POS_ROPE ? hp->head_dim : 0;
    if (hp->pos == IX_POS_ROPE && (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2))
        return ix_errf(err, IX_ERR_FORMAT, "rope.dimension_count %d is invalid for head dim %d", hp->n_rot,
                       hp->head_dim);
    if (!(hp->norm_eps > 0) || !(hp->rope_freq_base > 0))
        return ix_errf(err, IX_ERR_RANGE, "norm epsilon and rope.freq_base must be positive");
    if (hp->sliding_window < 0) return ix_errf(err, IX_ERR_RANGE, "attention.sliding_window is negative");
    if (hp->attn_softcap < 0 || hp->final_softcap < 0)
        return ix_errf(err, IX_ERR_RANGE, "softcapping values must be >= 0");
    if (hp->pos == IX_POS_ROPE && (s = read_rope_scaling(hp, g, err)) != IX_OK) return s;

    const ix__arch_row *a = ix__arch_row_of(hp->arch);
    if (a->embd_scale) hp->embd_scale = sqrtf((float)hp->n_embd);
    /* Gemma 2's query_pre_attn_scalar is head_dim except in the 27B model
     * (46 layers), where it is n_embd / n_head; the reference decides the
     * same way, as GGUF files carry no key for it. */
    float qpas = (float)hp->head_dim;
    if (hp->arch == IX_ARCH_GEMMA2 && hp->n_layer == 46) qpas = (float)(hp->n_embd / hp->n_head);
    hp->attn_scale = 1.0f / sqrtf(qpas);
    return IX_OK;
}

ix_status ix_model_arch_write_hparams(ix_gguf_writer *w, const ix_model_hparams *hp) {
    char key[128];
    ix_status s = ix_gguf_writer_set_str(w, "general.architecture", hp->arch_name);
    for (size_t i = 0; s == IX_OK && i < IX_ARRAY_LEN(k_keys); i++) {
        const key_row *k = &k_keys[i];
        if (!key_applies(hp, k->when)) continue;
        const void *field = (const char *)hp + k->offset;
        snprintf(key, sizeof key, "%s.%s", hp->arch_name, k->suffix);
        if (k->f32) {
            float v = *(const float *)field;
            /* factors that are 1 or caps that are 0 say nothing */
            if (k->offset == H_OFF(rope_factor) || k->offset == H_OFF(rope_low_freq_factor) ||
                k->offset == H_OFF(rope_high_freq_factor) || k->offset == H_OFF(rope_attn_factor))
                if (hp->rope_scaling == IX_ROPE_SCALING_NONE) continue;
            if (k->when == K_SOFTCAP && v == 0) continue;
            s = ix_gguf_writer_set_f32(w, key, v);
        } else {
            int32_t v = *(const int32_t *)field;
            if (v <= 0) continue;
            if (k->offset == H_OFF(rope_orig_ctx) && hp->rope_scaling == IX_ROPE_SCALING_NONE) continue;
            s = ix_gguf_writer_set_u32(w, key, (uint32_t)v);
        }
    }
    if (s == IX_OK) {
        snprintf(key, sizeof key, "%s.%s", hp->arch_name, K_VALUE_LEN);
        s = ix_gguf_writer_set_u32(w, key, (uint32_t)hp->head_dim);
    }
    if (s == IX_OK && hp->pos == IX_POS_ROPE && hp->rope_scaling != IX_ROPE_SCALING_NONE) {
        snprintf(key, sizeof key, "%s.%s", hp->arch_name, K_SCALING_TYPE);
        s = ix_gguf_writer_set_str(w, key, k_scaling_names[hp->rope_scaling]);
    }
    return s;
}
