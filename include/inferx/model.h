/*
 * inferx model: decoder-only transformers of the architectures in the
 * architecture table (llama, mistral, qwen2, qwen3, phi3, gemma, gemma2,
 * gpt2, starcoder2, stablelm, falcon) loaded from GGUF, run as one forward pass over a ragged batch whose
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

/* Architectures: one row each of the architecture table (src/model/arch.c). */
typedef enum ix_arch {
    IX_ARCH_LLAMA = 0, /* llama: Llama 2/3/3.1/3.2, TinyLlama, SmolLM, Mistral-style window */
    IX_ARCH_MISTRAL,   /* the same graph under its own name */
    IX_ARCH_QWEN2,     /* Q/K/V biases, NeoX RoPE */
    IX_ARCH_QWEN3,     /* per-head RMS norms of Q and K */
    IX_ARCH_PHI3,      /* fused QKV and gate/up, longrope */
    IX_ARCH_GEMMA,     /* embeddings x sqrt(dim), GeGLU, tied head */
    IX_ARCH_GEMMA2,    /* + post-norms, softcaps, sliding window on alternate layers */
    IX_ARCH_GPT2,      /* LayerNorm, learned positions, biases, GELU MLP */
    IX_ARCH_STARCODER2,/* LayerNorm, biases, GELU MLP, GQA */
    IX_ARCH_STABLELM,  /* LayerNorm, partial rotary */
    IX_ARCH_FALCON,    /* parallel attention + MLP, fused QKV, MQA */
    IX_ARCH_COUNT
} ix_arch;

typedef enum ix_norm_kind {
    IX_NORM_RMS = 0,  /* x / rms(x) * w */
    IX_NORM_LAYER = 1 /* (x - mean) / std * w + b */
} ix_norm_kind;

typedef enum ix_pos_kind {
    IX_POS_ROPE = 0,   /* rotary (rope_mode, n_rot, scaling) */
    IX_POS_LEARNED = 1 /* an added position_embd row (GPT-2) */
} ix_pos_kind;

typedef enum ix_ffn_kind {
    IX_FFN_SWIGLU = 0, /* down(silu(gate x) * up x) */
    IX_FFN_GEGLU = 1,  /* down(gelu(gate x) * up x) */
    IX_FFN_GELU = 2    /* down(gelu(up x + b)) + b */
} ix_ffn_kind;

typedef enum ix_rope_scaling {
    IX_ROPE_SCALING_NONE = 0,
    IX_ROPE_SCALING_LINEAR,   /* positions / factor */
    IX_ROPE_SCALING_YARN,     /* NTK-by-parts blend + attention factor */
    IX_ROPE_SCALING_LLAMA3,   /* per-frequency divisors (rope_freqs or computed) */
    IX_ROPE_SCALING_LONGROPE  /* Phi-3: long/short factor tensors + attention factor */
} ix_rope_scaling;

typedef enum ix_swa_kind {
    IX_SWA_ALL = 0,      /* every layer slides (when sliding_window > 0) */
    IX_SWA_ALTERNATE = 1 /* even layers slide, odd layers see everything (Gemma 2) */
} ix_swa_kind;

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
    /* recipe (from the architecture's row; see docs/model.md) */
    ix_norm_kind norm;
    ix_pos_kind pos;
    ix_ffn_kind ffn;
    bool parallel_blocks; /* attention and FFN both read the attention norm's output */
    bool post_norms;      /* sub-layer outputs are normed before the residual add */
    float embd_scale;     /* token embeddings are multiplied by this (1 or sqrt(n_embd)) */
    float attn_scale;     /* multiplies q.k (1/sqrt(head_dim) unless the architecture says) */
    float attn_softcap;   /* > 0: scores capped at +-attn_softcap by tanh */
    float final_softcap;  /* > 0: logits capped likewise */
    /* RoPE */
    ix_rope_mode rope_mode;
    int32_t n_rot;
    float rope_freq_base;
    float rope_freq_scale; /* linear / yarn: 1 / factor */
    ix_rope_scaling rope_scaling;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    float rope_attn_factor; /* yarn / longrope magnitude (1: none) */
    int32_t rope_orig_ctx;
    int32_t sliding_window; /* 0: full attention */
    ix_swa_kind swa;        /* which layers the window applies to */
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
/* The same, reporting progress (0..1, non-decreasing, 1 last) to fn while it
 * loads, from the calling thread or the repacking's first worker (never two
 * at once): a server shows it on /ready (ix_server_set_load_progress). */
typedef void (*ix_load_progress_fn)(void *user, double fraction);
ix_status ix_model_load_progress(ix_model **out, const char *path, ix_load_progress_fn fn, void *user,
                                 ix_errbuf *err);

/* How a model loads (ix_model_load_ex). */
typedef struct ix_model_load_params {
    ix_load_progress_fn progress; /* NULL: none; see ix_model_load_progress */
    void *progress_user;
    /* The packed-weight cache: a directory where the repacked matmul weights
     * of a model are kept in a file, so that the next load of the same file
     * maps them (milliseconds, the page cache's pages: resident once however
     * many processes map them) instead of packing them into fresh memory
     * (seconds for a multi-GB model). The first load packs straight into a
     * new cache file, made durable and renamed into place off the calling
     * thread. NULL: no cache (the default). */
    const char *pack_cache_dir;
    /* Bound on the directory's cache files: the least recently used go
     * before a new one is written (0: no bound). */
    uint64_t pack_cache_max_bytes;
    /* Models whose packed weights are smaller pack in memory (default 64
     * MiB: packing them takes a few tens of milliseconds). */
    uint64_t pack_cache_min_bytes;
} ix_model_load_params;

ix_model_load_params ix_model_load_default_params(void);
ix_status ix_model_load_ex(ix_model **out, const char *path, const ix_model_load_params *p, ix_errbuf *err);
/* Whether m's packed weights came from (or were written to) the cache. */
bool ix_model_pack_cached(const ix_model *m);

const ix_model_hparams *ix_model_get_hparams(const ix_model *m);
const ix_tokenizer *ix_model_tokenizer(const ix_model *m);
const ix_gguf *ix_model_gguf(const ix_model *m);
/* Weight bytes a decode step reads (every matmul weight once, in the packed
 * form where it was packed, the embedding row excluded): what memory
 * bandwidth divides into the decode bound. */
uint64_t ix_model_decode_bytes(const ix_model *m);
uint64_t ix_model_n_params(const ix_model *m);
/* Bytes of weights the model keeps in memory while serving: the packed
 * copies (the embedding rows copied beside them) plus the tensors read in
 * place from the file's mapping (norms, weights that were not packed). */
uint64_t ix_model_weight_bytes(const ix_model *m);
/* Of those, the bytes resident in this process now: the packed copies'
 * pages plus the file mapping's (tensors read in place, and the metadata).
 * Reads /proc/self/pagemap (8 bytes per page): for a metrics scrape or a
 * report, not a hot loop. Any thread. */
uint64_t ix_model_weight_resident_bytes(const ix_model *m);

/* KV cache parameters matching the model's shape (layers, KV heads, head
 * dim, sliding window, context); the caller sets the pool size and dtype. */
void ix_model_kv_params(const ix_model *m, ix_kv_params *p);

/* True when layer il attends through the sliding window. */
bool ix_model_layer_slides(const ix_model_hparams *hp, int32_t il);

/* ---- the architecture table ---------------------------------------------
 * The same rows drive the loader, the forward pass, `inferx mkmodel --arch`
 * and the tests. Thread-safe (constant data). */
typedef enum ix_tensor_group {
    IX_TENSOR_MATRIX = 0, /* matmul weights and embeddings (any weight type) */
    IX_TENSOR_OUTPUT,     /* the output head (absent: tied to the token embedding) */
    IX_TENSOR_NORM,       /* F32 norm weights (near one) */
    IX_TENSOR_BIAS,       /* F32 biases */
    IX_TENSOR_ROPE        /* F32 RoPE frequency divisors (rope_freqs, longrope factors) */
} ix_tensor_group;

typedef struct ix_model_tensor_spec {
    char name[64];  /* GGUF name, e.g. "blk.3.attn_q.weight" */
    ix_tensor_group group;
    bool required;  /* false: the architecture works without it */
    int64_t ne0, ne1; /* GGUF order: ne0 elements per row, ne1 rows (1 for vectors) */
} ix_model_tensor_spec;

/* Architecture names in table order (IX_ARCH_COUNT of them). */
const char *ix_model_arch_name(ix_arch a);
/* Sets hp->arch, arch_name and the recipe fields of the architecture named
 * `name` (dimensions untouched). IX_ERR_UNSUPPORTED naming the supported
 * ones when unknown. */
ix_status ix_model_arch_init(ix_model_hparams *hp, const char *name, ix_errbuf *err);
/* Calls fn for every tensor of hp's architecture at hp's dimensions (hp as
 * filled by ix_model_arch_init plus the dimensions); stops early when fn
 * returns false (then returns IX_ERR_INVALID). */
ix_status ix_model_arch_tensors(const ix_model_hparams *hp,
                                bool (*fn)(void *ctx, const ix_model_tensor_spec *t), void *ctx);
/* Writes hp as `<arch>.*` metadata keys (those the loader reads). */
ix_status ix_model_arch_write_hparams(ix_gguf_writer *w, const ix_model_hparams *hp);

/* ---- execution --------------------------------------------------------- */
typedef struct ix_model_ctx ix_model_ctx;

typedef struct ix_model_ctx_params {
    int32_t max_batch_tokens; /* largest batch a forward pass accepts; default 512 */
    int32_t n_threads;        /* <= 0: all cores */
    /* Kernel workers to run on, borrowed (it must outlive the context): two
     * contexts stepped by one thread (a target and its draft model) share
     * one pool instead of two pools' workers spinning against each other.
     * NULL (default): a pool of n_threads of its own. */
    ix_pool *pool;
} ix_model_ctx_params;

ix_model_ctx_params ix_model_ctx_default_params(void);

/* The context uses kv (borrowed: it must outlive the context and have the
 * model's shape). */
ix_status ix_model_ctx_create(ix_model_ctx **out, const ix_model *m, ix_kv *kv,
                              const ix_model_ctx_params *p, ix_errbuf *err);
void ix_model_ctx_destroy(ix_model_ctx *c);
const char *ix_model_ctx_errmsg(const ix_model_ctx *c);
ix_pool *ix_model_ctx_pool(ix_model_ctx *c);
/* Observes the input of every matmul with a weight of the file (e.g. for
 * `inferx imatrix`): fn(user, weight name, x, M, K) runs on the context's
 * thread before each matmul, x holding M rows of K floats (the rows that
 * produce logits only, for the output head). NULL fn removes it. The
 * forward pass tests one pointer per matmul when none is set. */
typedef void (*ix_model_mm_observer)(void *user, ix_str weight, const float *x, size_t M, size_t K);
void ix_model_ctx_set_observer(ix_model_ctx *c, ix_model_mm_observer fn, void *user);

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
/* The same pass without the output head: hidden: (number of output tokens,
 * n_embd) floats, the final norm's output for each token whose output flag
 * is set (what embeddings pool). K/V are written as by ix_model_forward. */
ix_status ix_model_forward_hidden(ix_model_ctx *c, const ix_batch *b, float *hidden);
/* Both from one pass: logits as ix_model_forward and, when hidden is not
 * NULL, the final norm's output of the same rows ((rows, n_embd) floats:
 * the state the output head turned into each logits row; what Medusa heads
 * read). hidden NULL is ix_model_forward, at its cost. On a tensor-parallel
 * rank 0 the hidden rows are whole (every rank holds the full residual). */
ix_status ix_model_forward_out(ix_model_ctx *c, const ix_batch *b, float *logits, float *hidden);
/* The output head alone: logits (M, n_vocab) = x (M, n_embd final-norm
 * hidden states) through the model's output weight in its own type (a
 * quantized head through the quantized matmul), its bias and final softcap,
 * on pool (NULL: the calling thread). The same bits as the logits of
 * ix_model_forward_out for its hidden rows. IX_ERR_UNSUPPORTED on a
 * tensor-parallel shard (it holds a slice of the vocabulary only). */
ix_status ix_model_output_head(const ix_model *m, ix_pool *pool, const float *x, size_t M, float *logits,
                               ix_errbuf *err);

/* ---- tensor and pipeline parallelism (docs/distributed.md) -------------------
 * A pipeline stage holds a contiguous range of layers (and their KV); within
 * a stage, the tensor-parallel split below applies. A step's batch flows
 * through the stages in micro-batches (ix_model_plan.n_micro): each stage
 * sends its residual rows to the next (send/recv), the last one the
 * outputs to the engine, so the logits are the same bits as one process's
 * for any split (every kernel is batch invariant).
 *
 * A model shard holds one rank's share of every layer: its query heads and
 * the KV heads they read (whole KV heads; a KV head shared by query heads of
 * two ranks is held by both), its rows of the output projection, of the FFN
 * and of the output head. Every output element is computed by exactly one
 * rank over the full reduction dimension with the same kernel, and the ranks
 * exchange the columns they computed (all-gathers), so logits are the same
 * bits as one process's. Rank 0 runs the engine; each of its forward passes
 * first ships the step's plan to the other ranks, which run
 * ix_model_forward_plan on it. The model module knows no transport: the
 * caller supplies these functions (src/dist/ implements them over MPI). */
typedef struct ix_model_plan {
    ix_batch batch;
    const int32_t *const *tables; /* (n_tokens) block table of each token's sequence */
    const int32_t *n_blocks;      /* (n_tokens) entries of tables[t] the token reads: pos / block_size + 1 */
    const int32_t *copies;        /* (n_copies, 2) (dst, src) block copies to make before the pass */
    int32_t n_copies;
    bool hidden;                  /* ix_model_forward_hidden: no output head */
    int32_t n_micro;              /* pipeline: micro-batches the step is split into (rank 0 picks; 1: none) */
} ix_model_plan;

typedef struct ix_model_comm {
    void *user;
    /* This rank's place in its stage's tensor-parallel group (allgather and
     * gather run within the group). */
    int32_t rank, n_ranks;
    /* Pipeline parallelism: this rank's stage of n_stages (0 and 0 or 1:
     * none); a stage holds a contiguous range of layers. The engine runs on
     * rank 0 of stage 0. micro_batches: rank 0's split of each step (0: one
     * per stage). */
    int32_t stage, n_stages, micro_batches;
    /* Every rank: out (rows, sum of cols) = the ranks' (rows, cols[r]) blocks
     * side by side in rank order, mine being this rank's. */
    ix_status (*allgather)(void *user, const float *mine, float *out, size_t rows, const int32_t *cols);
    /* The same into rank 0's out only (the others pass out NULL). */
    ix_status (*gather)(void *user, const float *mine, float *out, size_t rows, const int32_t *cols);
    /* Rank 0, once per context: the pool's shape, so that the other ranks
     * make a KV pool of the same blocks and a context for max_tokens; returns
     * an error naming the rank that could not. */
    ix_status (*start)(void *user, const ix_kv_params *kv, int32_t max_tokens, ix_errbuf *err);
    /* Rank 0, at the start of each forward pass, once the batch is checked. */
    ix_status (*step)(void *user, const ix_model_plan *plan);
    /* Pipeline only (n_stages > 1): n floats to the rank of the same group
     * rank in stage `stage`, without waiting (buf stays untouched until
     * flush); recv waits for n floats from that rank. Messages of one tag
     * between two ranks arrive in order. flush waits for every send. */
    ix_status (*send)(void *user, const float *buf, size_t n, int32_t stage, int32_t tag);
    ix_status (*recv)(void *user, float *buf, size_t n, int32_t stage, int32_t tag);
    ix_status (*flush)(void *user);
} ix_model_comm;

/* Loads rank comm->rank's shard of the file's model (ranks <= heads; the
 * splits of packed weights must fall on 16-row boundaries). comm is borrowed:
 * it must outlive the model. n_ranks 1 loads the whole model. */
ix_status ix_model_load_shard(ix_model **out, const char *path, const ix_model_comm *comm,
                              ix_load_progress_fn fn, void *user, ix_errbuf *err);
/* This shard's share: query heads [q0, q0 + n_q), KV heads [kv0, kv0 + n_kv),
 * rows of the FFN, of the embedding width and of the vocabulary; layers
 * [layer0, layer0 + n_layer) of its pipeline stage. */
typedef struct ix_model_shard_info {
    int32_t rank, n_ranks;
    int32_t layer0, n_layer; /* this stage's layers (all of them without a pipeline) */
    int32_t q0, n_q, kv0, n_kv;
    int64_t ff0, n_ff, embd0, n_embd, vocab0, n_vocab;
} ix_model_shard_info;
void ix_model_get_shard(const ix_model *m, ix_model_shard_info *out);
/* Whether this model is one part of a model spread over ranks: a tensor
 * shard (n_ranks > 1) or a pipeline stage holding fewer than all layers.
 * What works inside one process's KV pool only (swap, the disk tier, Medusa's
 * hidden rows) refuses such a model. */
bool ix_model_is_sharded(const ix_model *m);
/* A rank other than 0: runs rank 0's plan on this context (whose KV pool has
 * the shape start gave), after making the plan's block copies. Every table
 * entry and copy is checked against the pool. */
ix_status ix_model_forward_plan(ix_model_ctx *c, const ix_model_plan *plan);

/* Where the forward passes' wall time went, summed over the context's life:
 * the matmuls of the layers (Q/K/V, output projection, FFN), attention over
 * the KV cache, the per-token row ops between them (embedding, norms, RoPE
 * and the K/V store, activations, residuals), and the output head (final
 * norm and the vocabulary matmul). Read between forward calls by the thread
 * that makes them. */
typedef struct ix_model_profile {
    uint64_t n_forward, n_tokens, n_logits;
    uint64_t matmul_ns, attention_ns, rows_ns, output_ns;
} ix_model_profile;
void ix_model_ctx_get_profile(const ix_model_ctx *c, ix_model_profile *out);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_MODEL_H */
