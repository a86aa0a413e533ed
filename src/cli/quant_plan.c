/*
 * inferx quantize: the per-tensor type plan (see quant_plan.h). The rules are
 * the facts of llama.cpp's llama_tensor_get_type for the mixes whose types the
 * kernels read; the IQ1/IQ2/IQ3 and TQ mixes are not offered, so their
 * branches are absent. Tensor-name tests are substring tests, as there.
 */
#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/quant_plan.h"
#include "inferx/kernels.h"

/* llama.cpp's LLAMA_FTYPE_MOSTLY_* numbers of the mixes below. */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_Q2_K_S = 21, FT_IQ4_NL = 25, FT_IQ4_XS = 30,
    FT_BF16 = 32,
};

static const qmix k_mixes[] = {
    {"F32", IX_DTYPE_F32, FT_F32, NULL},
    {"F16", IX_DTYPE_F16, FT_F16, NULL},
    {"BF16", IX_DTYPE_BF16, FT_BF16, NULL},
    {"Q8_0", IX_DTYPE_Q8_0, FT_Q8_0, NULL},
    {"Q6_K", IX_DTYPE_Q6_K, FT_Q6_K, NULL},
    {"Q5_K_M", IX_DTYPE_Q5_K, FT_Q5_K_M, NULL},
    {"Q5_K_S", IX_DTYPE_Q5_K, FT_Q5_K_S, NULL},
    {"Q5_K", IX_DTYPE_Q5_K, FT_Q5_K_M, "Q5_K_M"},
    {"Q5_1", IX_DTYPE_Q5_1, FT_Q5_1, NULL},
    {"Q5_0", IX_DTYPE_Q5_0, FT_Q5_0, NULL},
    {"Q4_K_M", IX_DTYPE_Q4_K, FT_Q4_K_M, NULL},
    {"Q4_K_S", IX_DTYPE_Q4_K, FT_Q4_K_S, NULL},
    {"Q4_K", IX_DTYPE_Q4_K, FT_Q4_K_M, "Q4_K_M"},
    {"Q4_1", IX_DTYPE_Q4_1, FT_Q4_1, NULL},
    {"Q4_0", IX_DTYPE_Q4_0, FT_Q4_0, NULL},
    {"IQ4_NL", IX_DTYPE_IQ4_NL, FT_IQ4_NL, NULL},
    {"IQ4_XS", IX_DTYPE_IQ4_XS, FT_IQ4_XS, NULL},
    {"Q3_K_L", IX_DTYPE_Q3_K, FT_Q3_K_L, NULL},
    {"Q3_K_M", IX_DTYPE_Q3_K, FT_Q3_K_M, NULL},
    {"Q3_K_S", IX_DTYPE_Q3_K, FT_Q3_K_S, NULL},
    {"Q3_K", IX_DTYPE_Q3_K, FT_Q3_K_M, "Q3_K_M"},
    {"Q2_K", IX_DTYPE_Q2_K, FT_Q2_K, NULL},
    {"Q2_K_S", IX_DTYPE_Q2_K, FT_Q2_K_S, NULL},
};

const qmix *ix_cli_qmixes(size_t *n) {
    *n = IX_ARRAY_LEN(k_mixes);
    return k_mixes;
}

const qmix *ix_cli_qmix_find(const char *name) {
    for (size_t i = 0; i < IX_ARRAY_LEN(k_mixes); i++)
        if (!strcasecmp(name, k_mixes[i].name)) return &k_mixes[i];
    return NULL;
}

bool ix_cli_qtype_parse(const char *name, ix_dtype *out) {
    ix_dtype types[64];
    size_t n = ix_kernels_types(types, IX_ARRAY_LEN(types));
    for (size_t i = 0; i < n && i < IX_ARRAY_LEN(types); i++)
        if (!strcasecmp(name, ix_dtype_name(types[i]))) {
            *out = types[i];
            return true;
        }
    return false;
}

/* ---- overrides ----------------------------------------------------------------------- */
struct qoverride {
    char *spec;    /* as given */
    char *pattern; /* the part before the last '=' (after "re:" for a regex) */
    bool is_regex;
    regex_t re;
    ix_dtype type;
};

qoverride *ix_cli_qoverride_parse(const char *spec, ix_errbuf *err) {
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        ix_errf(err, IX_ERR_INVALID, "--override '%s': expected PATTERN=TYPE", spec);
        return NULL;
    }
    ix_dtype t;
    if (!ix_cli_qtype_parse(eq + 1, &t)) {
        ix_errf(err, IX_ERR_INVALID, "--override '%s': unknown type '%s' (see --help for the types)", spec, eq + 1);
        return NULL;
    }
    qoverride *o = calloc(1, sizeof *o);
    if (!o || !(o->spec = strdup(spec))) {
        free(o);
        ix_errf(err, IX_ERR_NOMEM, "out of memory");
        return NULL;
    }
    o->type = t;
    o->is_regex = !strncmp(spec, "re:", 3);
    size_t off = o->is_regex ? 3 : 0, len = (size_t)(eq - spec) - off;
    o->pattern = strndup(spec + off, len);
    if (!o->pattern || len == 0) {
        ix_errf(err, IX_ERR_INVALID, "--override '%s': empty pattern", spec);
        free(o->pattern);
        free(o->spec);
        free(o);
        return NULL;
    }
    if (o->is_regex) {
        int rc = regcomp(&o->re, o->pattern, REG_EXTENDED | REG_NOSUB);
        if (rc) {
            char msg[128];
            regerror(rc, &o->re, msg, sizeof msg);
            ix_errf(err, IX_ERR_INVALID, "--override '%s': bad regular expression: %s", spec, msg);
            free(o->pattern);
            free(o->spec);
            free(o);
            return NULL;
        }
    }
    return o;
}

void ix_cli_qoverride_free(qoverride *o) {
    if (!o) return;
    if (o->is_regex) regfree(&o->re);
    free(o->pattern);
    free(o->spec);
    free(o);
}

bool ix_cli_qoverride_match(const qoverride *o, const char *name) {
    return o->is_regex ? regexec(&o->re, name, 0, NULL, 0) == 0 : fnmatch(o->pattern, name, 0) == 0;
}

ix_dtype ix_cli_qoverride_type(const qoverride *o) { return o->type; }
const char *ix_cli_qoverride_spec(const qoverride *o) { return o->spec; }

/* ---- the rules ----------------------------------------------------------------------- */
typedef struct plan_state {
    const qmix *mix;
    bool has_imatrix, has_output, falcon;
    int n_layer, n_gqa, n_expert;
    int n_attention_wv, i_attention_wv, i_ffn_down;
} plan_state;

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }

/* llama.cpp's layers with more bits: the first and last eighth, and every
 * third one between. */
static bool use_more_bits(int i_layer, int n_layer) {
    return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

/* The layer of an ffn_down: its position among them, or with experts the
 * number in its name (they are not consecutive there). */
static int ffn_layer(const plan_state *s, const char *name) {
    int l = s->i_ffn_down;
    if (s->n_expert > 1 && sscanf(name, "blk.%d.", &l) != 1) l = s->i_ffn_down;
    return l;
}

static ix_dtype rule_type(plan_state *s, const char *name, int64_t nx) {
    const uint32_t ft = s->mix->file_type;
    ix_dtype t = s->mix->base;
    if (!strcmp(name, "output.weight") || (!s->has_output && !strcmp(name, "token_embd.weight"))) {
        if (s->falcon || nx % ix_dtype_block_size(t) != 0) t = IX_DTYPE_Q8_0;
        else if (t != IX_DTYPE_Q8_0) t = IX_DTYPE_Q6_K;
    } else if (!strcmp(name, "token_embd.weight")) {
        /* the body's type (the mixes that change it are not offered) */
    } else if (has(name, "attn_v.weight")) {
        int i = s->i_attention_wv, n = s->n_attention_wv;
        if (ft == FT_Q2_K) t = s->n_gqa >= 4 ? IX_DTYPE_Q4_K : IX_DTYPE_Q3_K;
        else if (ft == FT_Q2_K_S && s->n_gqa >= 4) t = IX_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_M) t = i < 2 ? IX_DTYPE_Q5_K : IX_DTYPE_Q4_K;
        else if (ft == FT_Q3_K_L) t = IX_DTYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && s->n_gqa >= 4) t = IX_DTYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(i, n)) t = IX_DTYPE_Q6_K;
        else if (ft == FT_Q4_K_S && i < 4) t = IX_DTYPE_Q5_K;
        if (s->n_expert == 8) t = IX_DTYPE_Q8_0;
        s->i_attention_wv++;
    } else if (has(name, "attn_k.weight")) {
        if (s->n_expert == 8) t = IX_DTYPE_Q8_0;
    } else if (has(name, "ffn_down")) {
        int i = ffn_layer(s, name), n = s->n_layer;
        if (ft == FT_Q2_K) t = IX_DTYPE_Q3_K;
        else if (ft == FT_Q2_K_S) {
            if (i < n / 8) t = IX_DTYPE_Q4_K;
        } else if (ft == FT_Q3_K_M) {
            t = i < n / 16 ? IX_DTYPE_Q5_K : !s->falcon || use_more_bits(i, n) ? IX_DTYPE_Q4_K : IX_DTYPE_Q3_K;
        } else if (ft == FT_Q3_K_L) {
            t = s->falcon ? IX_DTYPE_Q4_K : IX_DTYPE_Q5_K;
        } else if (ft == FT_Q4_K_M) {
            if (s->falcon)
                t = i < n / 16 ? IX_DTYPE_Q6_K : use_more_bits(i, n) ? IX_DTYPE_Q5_K : IX_DTYPE_Q4_K;
            else if (use_more_bits(i, n))
                t = IX_DTYPE_Q6_K;
        } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !s->has_imatrix) {
            t = IX_DTYPE_Q5_K;
        } else if (ft == FT_Q5_K_M && use_more_bits(i, n)) {
            t = IX_DTYPE_Q6_K;
        } else if (ft == FT_Q4_K_S && !s->falcon && i < n / 8) {
            t = IX_DTYPE_Q5_K;
        } else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && s->has_imatrix && i < n / 8) {
            t = ft == FT_Q4_0 ? IX_DTYPE_Q4_1 : IX_DTYPE_Q5_1;
        }
        s->i_ffn_down++;
    } else if (has(name, "attn_output.weight")) {
        if (!s->falcon) {
            if (s->n_expert == 8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL || ft == FT_Q4_K_S ||
                    ft == FT_Q4_K_M || ft == FT_IQ4_XS)
                    t = IX_DTYPE_Q5_K;
            } else if (ft == FT_Q2_K) t = IX_DTYPE_Q3_K;
            else if (ft == FT_Q3_K_M) t = IX_DTYPE_Q4_K;
            else if (ft == FT_Q3_K_L) t = IX_DTYPE_Q5_K;
        } else if (ft == FT_Q3_K_L) {
            t = IX_DTYPE_Q4_K;
        }
    } else if (has(name, "attn_qkv.weight")) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L) t = IX_DTYPE_Q4_K;
        else if (ft == FT_Q4_K_M) t = IX_DTYPE_Q5_K;
        else if (ft == FT_Q5_K_M) t = IX_DTYPE_Q6_K;
    }
    return t;
}

/* A type whose blocks fit rows of nx elements: t itself, or llama.cpp's
 * fallback (the 256-element types to a 32-element type of at least as many
 * bits), or F16 when no quantized type fits. */
static ix_dtype fit_row(ix_dtype t, int64_t nx) {
    if (nx % ix_dtype_block_size(t) == 0) return t;
    ix_dtype f = IX_DTYPE_F16;
    if (t == IX_DTYPE_Q2_K || t == IX_DTYPE_Q3_K || t == IX_DTYPE_IQ4_XS) f = IX_DTYPE_IQ4_NL;
    else if (t == IX_DTYPE_Q4_K) f = IX_DTYPE_Q5_0;
    else if (t == IX_DTYPE_Q5_K) f = IX_DTYPE_Q5_1;
    else if (t == IX_DTYPE_Q6_K) f = IX_DTYPE_Q8_0;
    return nx % ix_dtype_block_size(f) == 0 ? f : IX_DTYPE_F16;
}

/* llama.cpp quantizes 2-D and larger tensors named *weight, except norms and
 * a few small or position tensors. */
static bool quantizable(const ix_gguf_tensor *t, const char *name) {
    static const char *const keep[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight", "time_mix_first.weight",
        "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    };
    size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight") || t->n_dims < 2) return false;
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight")) return false;
    for (size_t i = 0; i < IX_ARRAY_LEN(keep); i++)
        if (has(name, keep[i])) return false;
    return true;
}

static bool is_float_type(ix_dtype t) { return t == IX_DTYPE_F32 || t == IX_DTYPE_F16 || t == IX_DTYPE_BF16; }

/* llama.cpp's tensor order: by layer number (none: -1, first), then by name. */
typedef struct named {
    char *name;
    int layer;
    size_t index;
} named;

static int cmp_named(const void *pa, const void *pb) {
    const named *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int meta_int(const ix_gguf *g, const char *arch, const char *suffix, int dflt) {
    char key[256];
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return ix_gguf_get_u32(g, key, &v, NULL) == IX_OK && v <= 1u << 20 ? (int)v : dflt;
}

bool ix_cli_qplan(const ix_gguf *g, const qmix *mix, bool pure, bool has_imatrix, qoverride *const *ovr,
                  size_t n_ovr, qchoice *choice, ix_errbuf *err) {
    const size_t n = (size_t)ix_gguf_n_tensors(g);
    named *order = calloc(n ? n : 1, sizeof *order);
    if (!order) return ix_errf(err, IX_ERR_NOMEM, "out of memory"), false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ix_str s = ix_gguf_tensor_at(g, i)->name;
        order[i] = (named){strndup(s.ptr, s.len), -1, i};
        if (!order[i].name) ok = !ix_errf(err, IX_ERR_NOMEM, "out of memory");
        else sscanf(order[i].name, "blk.%d.", &order[i].layer);
    }
    if (!ok) goto done;
    qsort(order, n, sizeof *order, cmp_named);

    char arch[128] = "";
    ix_str a;
    if (ix_gguf_get_str(g, "general.architecture", &a, NULL) == IX_OK && a.len < sizeof arch)
        memcpy(arch, a.ptr, a.len), arch[a.len] = 0;
    plan_state s = {.mix = mix, .has_imatrix = has_imatrix, .falcon = !strcmp(arch, "falcon")};
    s.n_layer = meta_int(g, arch, "block_count", 0);
    int n_head = meta_int(g, arch, "attention.head_count", 1);
    int n_head_kv = meta_int(g, arch, "attention.head_count_kv", n_head);
    s.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 1;
    s.n_expert = meta_int(g, arch, "expert_count", 1);
    for (size_t i = 0; i < n; i++) {
        const char *nm = order[i].name;
        if (has(nm, "attn_v.weight") || has(nm, "attn_qkv.weight") || has(nm, "attn_kv_b.weight")) s.n_attention_wv++;
        else if (!strcmp(nm, "output.weight")) s.has_output = true;
    }

    const bool mixed = !pure && !is_float_type(mix->base);
    for (size_t k = 0; k < n; k++) {
        const ix_gguf_tensor *t = ix_gguf_tensor_at(g, order[k].index);
        const char *nm = order[k].name;
        qchoice *c = &choice[order[k].index];
        *c = (qchoice){false, t->type, t->type, -1};
        if (!quantizable(t, nm)) continue;
        ix_dtype want = mixed ? rule_type(&s, nm, t->ne[0]) : mix->base;
        for (size_t j = 0; j < n_ovr; j++)
            if (ix_cli_qoverride_match(ovr[j], nm)) {
                want = ix_cli_qoverride_type(ovr[j]);
                c->override = (int)j;
                break;
            }
        c->fell_from = want;
        c->type = fit_row(want, t->ne[0]);
        c->quantize = c->type != t->type;
    }
done:
    for (size_t i = 0; i < n; i++) free(order[i].name);
    free(order);
    return ok;
}
