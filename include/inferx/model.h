/*
 * inferx model: Llama-family transformers (llama, mistral-style sliding window,
 * qwen2) loaded from GGUF, run as one forward pass over a ragged batch whose
 * attention reads and writes K/V through the paged KV cache's block tables.
 *
 * A model (weights, hyperparameters, tokenizer) is immutable after loading and
 * may be shared by several contexts. A context owns the activation buffers
 * (sized once for the largest batch), a worker pool and a KV cache; it is used
 * by one thread at a time (the engine thread).
 */
#ifndef INFERX_MODEL_H
#define INFERX_MODEL_H

#include "inferx/core.h"
#include "inferx/gguf.h"
#include "inferx/kernels.h"
#include "inferx/kv.h"
#include "inferx/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ix_arch {
    IX_ARCH_LLAMA = 0, /* llama, Llama 2/3, TinyLlama, SmolLM, Mistral */
    IX_ARCH_QWEN2 = 1, /* Q/K/V biases, NeoX RoPE */
} ix_arch;

typedef struct ix_model_hparams {
    ix_arch arch;
    char arch_name[32];
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;
    float norm_eps;
    /* RoPE */
    ix_rope_mode rope_mode;
    int32_t n_rot;
    float rope_freq_base;
    float rope_freq_scale; /* linear scaling: 1 / factor */
    bool rope_llama3;      /* Llama-3 frequency factors in use */
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int32_t rope_orig_ctx;
    int32_t sliding_window; /* 0: full attention */
    bool tied_embeddings;   /* output projection = token embedding */
    bool has_qkv_bias;
    ix_dtype weight_type;   /* type of most matmul weights (for display) */
} ix_model_hparams;

typedef struct ix_model ix_model;

/* Maps path, reads the hyperparameters, binds and checks every tensor (name,
 * shape, type), builds the tokenizer. A missing tensor, a wrong shape or an
 * unsupported type is IX_ERR_FORMAT / IX_ERR_UNSUPPORTED naming the tensor. */
ix_status ix_model_load(ix_model **out, const char *path, ix_errbuf *err);
void ix_model_destroy(ix_model *m); /* NULL is a no-op */

const ix_model_hparams *ix_model_get_hparams(const ix_model *m);
const ix_tokenizer *ix_model_tokenizer(const ix_model *m);
const ix_gguf *ix_model_gguf(const ix_model *m);
/* Weight bytes a decode step reads (every matmul weight once, the embedding
 * row excluded): what memory bandwidth divides into the decode bound. */
uint64_t ix_model_decode_bytes(const ix_model *m);
uint64_t ix_model_n_params(const ix_model *m);

/* KV cache parameters matching the model's shape (layers, KV heads, head
 * dim, sliding window, context); the caller sets the pool size and dtype. */
void ix_model_kv_params(const ix_model *m, ix_kv_params *p);

/* ---- execution --------------------------------------------------------- */
typedef struct ix_model_ctx ix_model_ctx;

typedef struct ix_model_ctx_params {
    int32_t max_batch_tokens; /* largest batch a forward pass accepts; default 512 */
    int32_t n_threads;        /* <= 0: all cores */
} ix_model_ctx_params;

ix_model_ctx_params ix_model_ctx_default_params(void);

/* The context uses kv (borrowed: it must outlive the context and have the
 * model's shape). */
ix_status ix_model_ctx_create(ix_model_ctx **out, const ix_model *m, ix_kv *kv,
                              const ix_model_ctx_params *p, ix_errbuf *err);
void ix_model_ctx_destroy(ix_model_ctx *c);
const char *ix_model_ctx_errmsg(const ix_model_ctx *c);
ix_pool *ix_model_ctx_pool(ix_model_ctx *c);

/* A ragged batch: new tokens of any number of sequences, each with its
 * position, in any order; prefill chunks and decode tokens mixed. Slots for
 * every (seq, pos) must have been appended to the KV cache (ix_kv_seq_append)
 * and positions below pos of the same sequence must be written already or be
 * in this batch. The forward pass writes K/V of every batch token; the caller
 * then commits (ix_kv_seq_commit). */
typedef struct ix_batch {
    int32_t n_tokens;
    const ix_token *tokens; /* (n_tokens) */
    const int32_t *pos;     /* (n_tokens) position within its sequence */
    const int32_t *seq;     /* (n_tokens) KV sequence id */
    const uint8_t *output;  /* (n_tokens) 1: return logits for this token */
} ix_batch;

/* Runs the batch. logits: (number of output tokens, n_vocab) floats, rows in
 * batch order of the tokens whose output flag is set. */
ix_status ix_model_forward(ix_model_ctx *c, const ix_batch *b, float *logits);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_MODEL_H */
