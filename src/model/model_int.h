/* Model internals shared by load.c (hyperparameters, tensor binding) and
 * forward.c (the ragged-batch forward pass). */
#ifndef IX_MODEL_INT_H
#define IX_MODEL_INT_H

#include "inferx/model.h"

/* A bound weight: data in the mapping, type and shape checked at load. */
typedef struct ix__weight {
    const void *data;
    ix_dtype type;
    int64_t ne0, ne1; /* (ne1 rows of ne0 elements) */
    uint64_t n_bytes;
    bool packed; /* data is in ix_kernels_pack's layout, in ix_model.packed */
} ix__weight;

typedef struct ix__layer {
    const float *attn_norm; /* (n_embd) */
    ix__weight wq, wk, wv;  /* (n_head*hd | n_kv*hd rows, n_embd) */
    const float *bq, *bk, *bv; /* qwen2 biases, else NULL */
    ix__weight wo;          /* (n_embd rows, n_head*hd) */
    const float *ffn_norm;  /* (n_embd) */
    ix__weight w_gate, w_up; /* (n_ff rows, n_embd) */
    ix__weight w_down;      /* (n_embd rows, n_ff) */
} ix__layer;

struct ix_model {
    ix_gguf *gguf;
    ix_tokenizer *tok;
    ix_model_hparams hp;
    ix__weight tok_embd;     /* (n_vocab rows, n_embd) */
    const float *out_norm;   /* (n_embd) */
    ix__weight output;       /* (n_vocab rows, n_embd); = tok_embd when tied */
    ix__layer *layers;       /* (n_layer) */
    float *rope_factors;     /* (n_rot/2) Llama-3 frequency divisors, or NULL */
    uint64_t decode_bytes, n_params;
    void *packed;            /* the packed copies of the matmul weights (mmap'd) */
    uint64_t packed_bytes;   /* bytes mapped there */
};

#endif
