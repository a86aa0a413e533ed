/*
 * Loading a Llama-family model: hyperparameters from `<arch>.*` metadata,
 * every tensor bound by name and checked for shape and type, RoPE frequency
 * factors (from a rope_freqs tensor or computed from Llama-3 rope.scaling
 * metadata), and the tokenizer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "model/model_int.h"

typedef struct loader {
    ix_model *m;
    const ix_gguf *g;
    ix_errbuf *err;
    char arch[32];
} loader;

static ix_status get_u32(loader *L, const char *suffix, bool required, uint32_t def, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    uint32_t v;
    ix_status s = ix_gguf_get_u32(L->g, key, &v, L->err);
    if (s == IX_ERR_NOT_FOUND && !required) {
        v = def;
    } else if (s == IX_ERR_NOT_FOUND) {
        return ix_errf(L->err, IX_ERR_FORMAT, "required key '%s' is missing", key);
    } else if (s != IX_OK) {
        return s;
    }
    if (v > INT32_MAX) return ix_errf(L->err, IX_ERR_RANGE, "%s = %u is out of range", key, v);
    *out = (int32_t)v;
    return IX_OK;
}

static ix_status get_f32(loader *L, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    ix_status s = ix_gguf_get_f32(L->g, key, out, L->err);
    if (s == IX_ERR_NOT_FOUND) {
        *out = def;
        return IX_OK;
    }
    if (s == IX_OK && !isfinite(*out))
        return ix_errf(L->err, IX_ERR_RANGE, "%s is not a finite number", key);
    return s;
}

static bool matmul_type_ok(ix_dtype t) {
    return t == IX_DTYPE_F32 || t == IX_DTYPE_F16 || t == IX_DTYPE_BF16 || t == IX_DTYPE_Q8_0 ||
           t == IX_DTYPE_Q4_0;
}

/* Binds a 2-D matmul weight (ne0 = in, ne1 = out). */
static ix_status bind_weight(loader *L, const char *name, int64_t ne0, int64_t ne1, bool required,
                             ix__weight *w) {
    const ix_gguf_tensor *t = ix_gguf_find_tensor(L->g, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return IX_OK;
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    if (t->n_dims > 2 || t->ne[0] != ne0 || t->ne[1] != ne1)
        return ix_errf(L->err, IX_ERR_FORMAT,
                       "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1);
    if (!matmul_type_ok(t->type)) {
        const char *tn = ix_dtype_name(t->type);
        return ix_errf(L->err, IX_ERR_UNSUPPORTED,
                       "tensor '%s' has type %s (%d); supported weight types are F32, F16, BF16, "
                       "Q8_0 and Q4_0",
                       name, tn ? tn : "unknown", (int)t->type);
    }
    *w = (ix__weight){t->data, t->type, ne0, ne1, t->n_bytes, false};
    return IX_OK;
}

/* Binds a 1-D F32 vector (norm weights, biases). */
static ix_status bind_vec(loader *L, const char *name, int64_t n, bool required, const float **out) {
    const ix_gguf_tensor *t = ix_gguf_find_tensor(L->g, name);
    *out = NULL;
    if (!t) {
        if (!required) return IX_OK;
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    if (t->n_dims != 1 || t->ne[0] != n)
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s' has %lld elements in %u dims, expected %lld",
                       name, (long long)t->n_elements, t->n_dims, (long long)n);
    if (t->type != IX_DTYPE_F32) {
        const char *tn = ix_dtype_name(t->type);
        return ix_errf(L->err, IX_ERR_UNSUPPORTED, "tensor '%s' has type %s, expected F32", name,
                       tn ? tn : "unknown");
    }
    *out = t->data;
    return IX_OK;
}

static ix_status read_hparams(loader *L) {
    ix_model_hparams *hp = &L->m->hp;
    ix_str arch;
    ix_status s = ix_gguf_get_str(L->g, "general.architecture", &arch, L->err);
    if (s == IX_ERR_NOT_FOUND) return ix_errf(L->err, IX_ERR_FORMAT, "general.architecture is missing");
    if (s != IX_OK) return s;
    snprintf(L->arch, sizeof L->arch, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    snprintf(hp->arch_name, sizeof hp->arch_name, "%s", L->arch);
    if (!strcmp(L->arch, "llama") || !strcmp(L->arch, "mistral")) {
        hp->arch = IX_ARCH_LLAMA;
        hp->rope_mode = IX_ROPE_NORM;
    } else if (!strcmp(L->arch, "qwen2")) {
        hp->arch = IX_ARCH_QWEN2;
        hp->rope_mode = IX_ROPE_NEOX;
    } else {
        return ix_errf(L->err, IX_ERR_UNSUPPORTED,
                       "architecture '%s' is not supported (supported: llama, mistral, qwen2)", L->arch);
    }
    if ((s = get_u32(L, "embedding_length", true, 0, &hp->n_embd)) != IX_OK) return s;
    if ((s = get_u32(L, "block_count", true, 0, &hp->n_layer)) != IX_OK) return s;
    if ((s = get_u32(L, "feed_forward_length", true, 0, &hp->n_ff)) != IX_OK) return s;
    if ((s = get_u32(L, "attention.head_count", true, 0, &hp->n_head)) != IX_OK) return s;
    if ((s = get_u32(L, "attention.head_count_kv", false, (uint32_t)hp->n_head, &hp->n_head_kv)) != IX_OK)
        return s;
    if ((s = get_u32(L, "context_length", false, 2048, &hp->n_ctx_train)) != IX_OK) return s;
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
        hp->n_ctx_train <= 0)
        return ix_errf(L->err, IX_ERR_FORMAT, "model dimensions must be positive");
    if (hp->n_head % hp->n_head_kv != 0)
        return ix_errf(L->err, IX_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d",
                       hp->n_head, hp->n_head_kv);
    int32_t def_hd = hp->n_embd / hp->n_head;
    if ((s = get_u32(L, "attention.key_length", false, (uint32_t)def_hd, &hp->head_dim)) != IX_OK) return s;
    int32_t vlen;
    if ((s = get_u32(L, "attention.value_length", false, (uint32_t)hp->head_dim, &vlen)) != IX_OK) return s;
    if (hp->head_dim <= 0 || hp->head_dim % 2 || vlen != hp->head_dim || hp->head_dim > 1024)
        return ix_errf(L->err, IX_ERR_UNSUPPORTED, "head dimension %d (value %d) is not supported",
                       hp->head_dim, vlen);
    if ((s = get_u32(L, "rope.dimension_count", false, (uint32_t)hp->head_dim, &hp->n_rot)) != IX_OK)
        return s;
    if (hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ix_errf(L->err, IX_ERR_FORMAT, "rope.dimension_count %d is invalid for head dim %d",
                       hp->n_rot, hp->head_dim);
    if ((s = get_f32(L, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->norm_eps)) != IX_OK) return s;
    if ((s = get_f32(L, "rope.freq_base", 10000.0f, &hp->rope_freq_base)) != IX_OK) return s;
    if (!(hp->norm_eps > 0) || !(hp->rope_freq_base > 0))
        return ix_errf(L->err, IX_ERR_RANGE, "norm epsilon and rope.freq_base must be positive");
    if ((s = get_u32(L, "attention.sliding_window", false, 0, &hp->sliding_window)) != IX_OK) return s;

    /* RoPE scaling: linear (positions divided by the factor) or llama3. */
    hp->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->arch);
    ix_str type = {"", 0};
    s = ix_gguf_get_str(L->g, key, &type, L->err);
    if (s != IX_OK && s != IX_ERR_NOT_FOUND) return s;
    if ((s = get_f32(L, "rope.scaling.factor", 1.0f, &hp->rope_factor)) != IX_OK) return s;
    if (!(hp->rope_factor > 0)) return ix_errf(L->err, IX_ERR_RANGE, "rope.scaling.factor must be > 0");
    if (ix_str_eq(type, "linear")) {
        hp->rope_freq_scale = 1.0f / hp->rope_factor;
    } else if (ix_str_eq(type, "llama3")) {
        hp->rope_llama3 = true;
        if ((s = get_f32(L, "rope.scaling.low_freq_factor", 1.0f, &hp->rope_low_freq_factor)) != IX_OK)
            return s;
        if ((s = get_f32(L, "rope.scaling.high_freq_factor", 4.0f, &hp->rope_high_freq_factor)) != IX_OK)
            return s;
        if ((s = get_u32(L, "rope.scaling.original_context_length", false, 8192, &hp->rope_orig_ctx)) != IX_OK)
            return s;
        if (!(hp->rope_high_freq_factor > hp->rope_low_freq_factor) || hp->rope_orig_ctx <= 0)
            return ix_errf(L->err, IX_ERR_RANGE, "llama3 rope scaling needs high_freq_factor > "
                                                 "low_freq_factor and an original context");
    } else if (type.len && !ix_str_eq(type, "none")) {
        return ix_errf(L->err, IX_ERR_UNSUPPORTED, "rope scaling type '%.*s' is not supported",
                       (int)type.len, type.ptr);
    }
    return IX_OK;
}

/* Llama-3 frequency factors: wavelengths longer than orig_ctx / low_freq_factor
 * are slowed by `factor`, shorter than orig_ctx / high_freq_factor are kept,
 * and the band between is interpolated. */
static ix_status llama3_factors(ix_model *m) {
    const ix_model_hparams *hp = &m->hp;
    int32_t n = hp->n_rot / 2;
    m->rope_factors = ix_malloc((size_t)n * sizeof(float));
    if (!m->rope_factors) return IX_ERR_NOMEM;
    double low_wavelen = hp->rope_orig_ctx / hp->rope_low_freq_factor;
    double high_wavelen = hp->rope_orig_ctx / hp->rope_high_freq_factor;
    for (int32_t i = 0; i < n; i++) {
        double freq = pow(hp->rope_freq_base, -2.0 * i / hp->n_rot);
        double wavelen = 2 * M_PI / freq;
        double new_freq;
        if (wavelen < high_wavelen) {
            new_freq = freq;
        } else if (wavelen > low_wavelen) {
            new_freq = freq / hp->rope_factor;
        } else {
            double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                            (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
            new_freq = (1 - smooth) * freq / hp->rope_factor + smooth * freq;
        }
        m->rope_factors[i] = (float)(freq / new_freq);
    }
    return IX_OK;
}

static ix_status bind_tensors(loader *L) {
    ix_model *m = L->m;
    ix_model_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
            KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff;
    const ix_gguf_tensor *emb = ix_gguf_find_tensor(L->g, "token_embd.weight");
    if (!emb) return ix_errf(L->err, IX_ERR_FORMAT, "tensor 'token_embd.weight' is missing");
    int32_t n_vocab = ix_tokenizer_n_vocab(m->tok);
    hp->n_vocab = n_vocab;
    ix_status s;
    if ((s = bind_weight(L, "token_embd.weight", E, n_vocab, true, &m->tok_embd)) != IX_OK) return s;
    if ((s = bind_vec(L, "output_norm.weight", E, true, &m->out_norm)) != IX_OK) return s;
    if ((s = bind_weight(L, "output.weight", E, n_vocab, false, &m->output)) != IX_OK) return s;
    if (!m->output.data) {
        m->output = m->tok_embd;
        hp->tied_embeddings = true;
    }
    m->layers = ix_calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    bool bias = hp->arch == IX_ARCH_QWEN2;
    hp->has_qkv_bias = bias;
    for (int32_t i = 0; i < hp->n_layer; i++) {
        ix__layer *l = &m->layers[i];
        char n[96];
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, (int)i), n)
        if ((s = bind_vec(L, NAME("attn_norm.weight"), E, true, &l->attn_norm)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("attn_q.weight"), E, Q, true, &l->wq)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("attn_k.weight"), E, KV, true, &l->wk)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("attn_v.weight"), E, KV, true, &l->wv)) != IX_OK) return s;
        if ((s = bind_vec(L, NAME("attn_q.bias"), Q, bias, &l->bq)) != IX_OK) return s;
        if ((s = bind_vec(L, NAME("attn_k.bias"), KV, bias, &l->bk)) != IX_OK) return s;
        if ((s = bind_vec(L, NAME("attn_v.bias"), KV, bias, &l->bv)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("attn_output.weight"), Q, E, true, &l->wo)) != IX_OK) return s;
        if ((s = bind_vec(L, NAME("ffn_norm.weight"), E, true, &l->ffn_norm)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("ffn_gate.weight"), E, F, true, &l->w_gate)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("ffn_up.weight"), E, F, true, &l->w_up)) != IX_OK) return s;
        if ((s = bind_weight(L, NAME("ffn_down.weight"), F, E, true, &l->w_down)) != IX_OK) return s;
#undef NAME
        const ix__weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < IX_ARRAY_LEN(ws); k++) {
            /* Quantized rows must be whole blocks. */
            uint64_t rb;
            if (!ix_dtype_row_bytes(ws[k]->type, (uint64_t)ws[k]->ne0, &rb))
                return ix_errf(L->err, IX_ERR_FORMAT, "layer %d: rows of %lld elements do not fit %s blocks",
                               (int)i, (long long)ws[k]->ne0, ix_dtype_name(ws[k]->type));
            m->decode_bytes += ws[k]->n_bytes;
        }
    }
    m->decode_bytes += m->output.n_bytes;
    hp->weight_type = m->layers[0].wq.type;

    /* rope_freqs.weight (written by converters for Llama 3.1) wins over metadata. */
    const float *ff;
    if ((s = bind_vec(L, "rope_freqs.weight", hp->n_rot / 2, false, &ff)) != IX_OK) return s;
    if (ff) {
        m->rope_factors = ix_malloc((size_t)(hp->n_rot / 2) * sizeof(float));
        if (!m->rope_factors) return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
        memcpy(m->rope_factors, ff, (size_t)(hp->n_rot / 2) * sizeof(float));
    } else if (hp->rope_llama3 && llama3_factors(m) != IX_OK) {
        return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < ix_gguf_n_tensors(L->g); i++)
        m->n_params += ix_gguf_tensor_at(L->g, i)->n_elements;
    return IX_OK;
}

/* The weights a matmul reads, into ws (7 per layer + 1); returns how many.
 * The tied output stays in rows: the embedding lookup reads it row by row. */
static size_t matmul_weights(ix_model *m, ix__weight **ws) {
    size_t n = 0;
    for (int32_t i = 0; i < m->hp.n_layer; i++) {
        ix__layer *l = &m->layers[i];
        ix__weight *lw[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < IX_ARRAY_LEN(lw); k++) ws[n++] = lw[k];
    }
    if (!m->hp.tied_embeddings) ws[n++] = &m->output;
    return n;
}

/* The packed weights' buffer: anonymous memory on 2 MiB boundaries with
 * transparent huge pages requested, so streaming ~1 GB of weights per decode
 * step walks a few hundred pages instead of a quarter million (and an
 * idle-page scanner clearing 4 KiB accessed bits cannot slow the next pass). */
#define PACK_ALIGN ((size_t)2 << 20)

static void *pack_alloc(size_t n, size_t *mapped) {
    size_t len = (n + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN + PACK_ALIGN;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    /* trim to an aligned start and a whole number of huge pages */
    size_t head = (PACK_ALIGN - (uintptr_t)p % PACK_ALIGN) % PACK_ALIGN, body = len - PACK_ALIGN;
    if (head) munmap(p, head);
    if (len - head - body) munmap(p + head + body, len - head - body);
#ifdef MADV_HUGEPAGE
    madvise(p + head, body, MADV_HUGEPAGE);
#endif
    *mapped = body;
    return p + head;
}

/* Repacks every packable matmul weight (Q8_0 / Q4_0 / F16 / BF16:
 * ix_kernels_pack) into one buffer, so the kernels read 16 rows per vector
 * load with no run-time transposes. Quantized results are the same bits,
 * float ones agree to rounding; INFERX_REPACK=0 keeps the mapped GGUF rows
 * (to measure the difference). */
static ix_status repack_weights(loader *L) {
    ix_model *m = L->m;
    const char *env = getenv("INFERX_REPACK");
    if (env && strcmp(env, "0") == 0) return IX_OK;
    ix__weight **ws = ix_malloc(((size_t)m->hp.n_layer * 7 + 1) * sizeof *ws);
    if (!ws) return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    size_t n = matmul_weights(m, ws);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ix_kernels_packed_bytes(ws[i]->type, (size_t)ws[i]->ne1, (size_t)ws[i]->ne0);
    if (total == 0) {
        ix_free(ws);
        return IX_OK;
    }
    size_t mapped = 0;
    uint8_t *buf = pack_alloc(total, &mapped);
    if (!buf) { /* not fatal: the mapped rows work, only slower */
        IX_LOGW("model: no memory for %llu bytes of packed weights; using the file's rows",
                (unsigned long long)total);
        ix_free(ws);
        return IX_OK;
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        ix__weight *w = ws[i];
        size_t N = (size_t)w->ne1, K = (size_t)w->ne0, pb = ix_kernels_packed_bytes(w->type, N, K);
        /* a packable shape into an aligned buffer always packs */
        if (!pb || ix_kernels_pack(w->type, w->data, 0, N, K, 0, N, buf + at) != IX_OK) continue;
        w->data = buf + at;
        w->packed = true;
        at += pb;
    }
    ix_free(ws);
    m->packed = buf;
    m->packed_bytes = mapped;
    return IX_OK;
}

ix_status ix_model_load(ix_model **out, const char *path, ix_errbuf *err) {
    *out = NULL;
    ix_model *m = ix_calloc(1, sizeof *m);
    if (!m) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    loader L = {m, NULL, err, ""};
    ix_status s = ix_gguf_open(&m->gguf, path, err);
    if (s != IX_OK) goto fail;
    L.g = m->gguf;
    if ((s = read_hparams(&L)) != IX_OK) goto fail;
    if ((s = ix_tokenizer_create(&m->tok, m->gguf, err)) != IX_OK) goto fail;
    if ((s = bind_tensors(&L)) != IX_OK) goto fail;
    if ((s = repack_weights(&L)) != IX_OK) goto fail;
    *out = m;
    return IX_OK;
fail:
    ix_model_destroy(m);
    return s;
}

void ix_model_destroy(ix_model *m) {
    if (!m) return;
    ix_tokenizer_destroy(m->tok);
    ix_gguf_close(m->gguf);
    ix_free(m->layers);
    ix_free(m->rope_factors);
    if (m->packed) munmap(m->packed, (size_t)m->packed_bytes);
    ix_free(m);
}

const ix_model_hparams *ix_model_get_hparams(const ix_model *m) { return &m->hp; }
const ix_tokenizer *ix_model_tokenizer(const ix_model *m) { return m->tok; }
const ix_gguf *ix_model_gguf(const ix_model *m) { return m->gguf; }
uint64_t ix_model_decode_bytes(const ix_model *m) { return m->decode_bytes; }
uint64_t ix_model_n_params(const ix_model *m) { return m->n_params; }

void ix_model_kv_params(const ix_model *m, ix_kv_params *p) {
    p->n_layer = m->hp.n_layer;
    p->n_kv_head = m->hp.n_head_kv;
    p->head_dim = m->hp.head_dim;
    p->sliding_window = m->hp.sliding_window;
    p->max_seq_len = m->hp.n_ctx_train;
}
