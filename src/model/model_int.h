/* Model internals shared by arch.c (the architecture table), load.c
 * (hyperparameters, tensor binding) and forward.c (the ragged-batch forward
 * pass).
 *
 * An architecture is one row of k_archs (arch.c): its recipe (norm, position
 * encoding, FFN, wiring, scales) and which tensor roles it has, required or
 * optional. A tensor role (ix__role) is one row of k_roles: its GGUF name,
 * its shape in symbolic dimensions and where the loader binds it. Fused
 * tensors (attn_qkv, Phi-3's gate+up) are bound and then split into row
 * views, so the forward pass sees separate Q/K/V and gate/up weights whatever
 * the file stores. */
#ifndef IX_MODEL_INT_H
#define IX_MODEL_INT_H

#include <stddef.h>

#include "inferx/model.h"

/* A bound weight: data in the mapping, type and shape checked at load. */
typedef struct ix__weight {
    const void *data;
    ix_dtype type;
    int64_t ne0, ne1; /* (ne1 rows of ne0 elements) */
    uint64_t n_bytes;
    bool packed; /* data is in ix_kernels_pack's layout, in ix_model.packed */
    ix_str name; /* the GGUF tensor's (in the file's mapping), for matmul observers */
} ix__weight;

/* One layer. Absent optional tensors are NULL / data NULL; the forward pass
 * skips what is absent (a missing bias adds nothing, a missing gate means a
 * plain MLP). */
typedef struct ix__layer {
    const float *attn_norm, *attn_norm_b; /* (n_embd) */
    ix__weight wq, wk, wv;                /* (n_head*hd | n_kv*hd rows, n_embd) */
    const float *bq, *bk, *bv;            /* (n_head*hd | n_kv*hd) */
    const float *q_norm, *k_norm;         /* (head_dim) per-head RMS norms (qwen3) */
    ix__weight wo;                        /* (n_embd rows, n_head*hd) */
    const float *bo;                      /* (n_embd) */
    const float *post_attn_norm;          /* (n_embd) gemma2 */
    const float *ffn_norm, *ffn_norm_b;   /* (n_embd); NULL: parallel block */
    ix__weight w_gate, w_up;              /* (n_ff rows, n_embd); gate absent: plain MLP */
    const float *b_up;                    /* (n_ff) */
    ix__weight w_down;                    /* (n_embd rows, n_ff) */
    const float *b_down;                  /* (n_embd) */
    const float *post_ffn_norm;           /* (n_embd) gemma2 */
    /* fused tensors as stored; split into the views above at load */
    ix__weight wqkv, w_gate_up;
    const float *bqkv;
} ix__layer;

/* Tensor roles (rows of k_roles in arch.c). Global roles first. */
typedef enum ix__role {
    IX__R_TOK_EMBD, IX__R_POS_EMBD, IX__R_OUT_NORM, IX__R_OUT_NORM_B, IX__R_OUTPUT, IX__R_OUTPUT_B,
    IX__R_ROPE_FREQS, IX__R_ROPE_LONG, IX__R_ROPE_SHORT,
    IX__R_ATTN_NORM, IX__R_ATTN_NORM_B, IX__R_ATTN_Q, IX__R_ATTN_K, IX__R_ATTN_V, IX__R_ATTN_QKV,
    IX__R_ATTN_Q_B, IX__R_ATTN_K_B, IX__R_ATTN_V_B, IX__R_ATTN_QKV_B, IX__R_ATTN_Q_NORM,
    IX__R_ATTN_K_NORM, IX__R_ATTN_OUT, IX__R_ATTN_OUT_B, IX__R_POST_ATTN_NORM, IX__R_FFN_NORM,
    IX__R_FFN_NORM_B, IX__R_FFN_GATE, IX__R_FFN_UP, IX__R_FFN_GATE_UP, IX__R_FFN_UP_B, IX__R_FFN_DOWN,
    IX__R_FFN_DOWN_B, IX__R_POST_FFN_NORM,
    IX__R_COUNT
} ix__role;
#define IX__R_FIRST_LAYER IX__R_ATTN_NORM

/* Symbolic dimensions of a role's shape. */
typedef enum ix__dim {
    IX__D_1, IX__D_EMBD, IX__D_Q, IX__D_KV, IX__D_QKV, IX__D_FF, IX__D_FF2, IX__D_HEAD, IX__D_VOCAB,
    IX__D_CTX, IX__D_ROT_HALF
} ix__dim;

typedef struct ix__role_row {
    const char *name;    /* GGUF name; per-layer roles are "blk.%d." + name */
    ix_tensor_group group;
    ix__dim ne0, ne1;
    size_t offset;       /* of the ix__weight / const float * in ix_model or ix__layer */
} ix__role_row;

#define IX__ROLE(r) ((uint64_t)1 << (r))

/* One architecture: its recipe and its tensors. */
typedef struct ix__arch_row {
    const char *name; /* general.architecture */
    ix_norm_kind norm;
    ix_pos_kind pos;
    ix_rope_mode rope_mode;
    ix_ffn_kind ffn;
    bool parallel;   /* always parallel (falcon); stablelm is parallel when ffn_norm is absent */
    bool embd_scale; /* x sqrt(n_embd) */
    bool softcaps;   /* reads the softcap keys */
    bool post_norms;
    ix_swa_kind swa;
    uint64_t req, opt; /* IX__ROLE sets */
} ix__arch_row;

extern const ix__role_row ix__roles[IX__R_COUNT];
const ix__arch_row *ix__arch_row_of(ix_arch a);
/* Resolves a symbolic dimension for hp (n_vocab and n_ctx_train included). */
int64_t ix__dim_value(const ix_model_hparams *hp, ix__dim d);
/* Reads `<arch>.*` keys into hp (after ix_model_arch_init); checks ranges. */
ix_status ix__read_hparams(ix_model_hparams *hp, const ix_gguf *g, ix_errbuf *err);

/* The all-gathers of a tensor-parallel forward pass: attention outputs
 * (query heads x head dim), the embedding width (output projection, FFN
 * down), the FFN width, the vocabulary (output head, gathered to rank 0). */
typedef enum ix__cols { IX__COLS_Q, IX__COLS_EMBD, IX__COLS_FF, IX__COLS_VOCAB, IX__COLS_COUNT } ix__cols;

struct ix_model {
    ix_gguf *gguf;
    ix_tokenizer *tok;
    ix_model_hparams hp;
    ix__weight tok_embd;     /* (n_vocab rows, n_embd) */
    ix__weight pos_embd;     /* (n_ctx_train rows, n_embd) learned positions, or data NULL */
    const float *out_norm, *out_norm_b; /* (n_embd) */
    ix__weight output;       /* (n_vocab rows, n_embd); = tok_embd when tied */
    const float *output_b;   /* (n_vocab) */
    const float *rope_freqs, *rope_long, *rope_short; /* (n_rot/2) as in the file */
    ix__layer *layers;       /* (n_layer) */
    float *rope_factors;     /* (n_rot/2) frequency divisors in use, or NULL */
    uint64_t decode_bytes, n_params;
    uint64_t weight_bytes;   /* ix_model_weight_bytes */
    /* tensor parallelism (docs/distributed.md): this rank's share, the whole
     * model when comm is NULL; views above are cut to it at load */
    const ix_model_comm *comm;
    ix_model_shard_info shard;
    int32_t *cols[IX__COLS_COUNT]; /* (n_ranks) each rank's columns of the all-gathers; NULL alone */
    void *packed;            /* the packed copies of the matmul weights (mmap'd) */
    uint64_t packed_bytes;   /* bytes mapped there */
    bool packed_cached;      /* packed is a cache file's mapping (pack_cache.c) */
    struct ix__pack_cache *pack_writer; /* a new cache file being made durable, or NULL */
};

/* Pipeline stages (1: none) and this rank's stage. */
static inline int32_t ix__n_stages(const ix_model *m) {
    return m->comm && m->comm->n_stages > 1 ? m->comm->n_stages : 1;
}
static inline int32_t ix__stage(const ix_model *m) { return ix__n_stages(m) > 1 ? m->comm->stage : 0; }

/* ---- the packed-weight cache (pack_cache.c) ---- */
/* Where a cache file's packed weights start (the header is at 0). */
#define IX__PACK_CACHE_DATA_OFFSET ((size_t)2 << 20)
struct stat;
typedef struct ix__pack_cache ix__pack_cache;
/* The key of the packed form of weights ws (n) of the file at path; copy,
 * if one of them, is kept row for row (the embedding table). */
uint64_t ix__pack_cache_key(const char *path, const struct stat *st, ix__weight *const *ws, size_t n,
                            const ix__weight *copy);
/* A hit: the cache file of key in dir mapped read-only (a header, then at
 * IX__PACK_CACHE_DATA_OFFSET data_bytes of packed weights); *map_len its
 * length. NULL: a miss. */
uint8_t *ix__pack_cache_map(const char *dir, const char *gguf_path, uint64_t key, uint64_t data_bytes,
                            const struct stat *st, size_t *map_len);
/* A miss: a new cache file (temporary name, blocks reserved, the least
 * recently used files removed to stay under max_bytes, 0: no bound) mapped
 * writable for packing into (data at map + IX__PACK_CACHE_DATA_OFFSET). NULL
 * (logged): pack in memory instead. */
uint8_t *ix__pack_cache_create(const char *dir, const char *gguf_path, uint64_t key, uint64_t data_bytes,
                               uint64_t max_bytes, ix__pack_cache **out, size_t *map_len);
/* Packing done: writes the header, makes the mapping read-only and makes the
 * file durable and renames it into place on a thread of its own. */
void ix__pack_cache_commit(ix__pack_cache *c, uint8_t *map, uint64_t data_bytes, uint64_t key,
                           const struct stat *st);
/* Packing failed: the temporary file goes (the caller unmaps). */
void ix__pack_cache_abort(ix__pack_cache *c);
/* Waits for commit's thread and frees c (model destroy). */
void ix__pack_cache_finish(ix__pack_cache *c);

#endif
