/*
 * inferx medusa: Medusa heads -- extra next-next-token predictors on a
 * target model's last hidden state (Cai et al., 2024), their training and
 * their file.
 *
 * Head i (0-based) reads the final-norm hidden state h of position t, whose
 * own output head predicts token t+1, and predicts token t+2+i:
 *     a = h + SiLU(W_i h + b_i)        (a residual block, n_embd x n_embd)
 *     logits_i = U_i a                 (n_vocab x n_embd)
 * U_i is the head's own copy of the target's output head, or, with a shared
 * output (large vocabularies), the target's output head itself, which the
 * caller passes in (F32 rows) and only W_i, b_i are trained. W starts at
 * zero, so a new head predicts what the output head does.
 *
 * File (GGUF, F32 tensors; docs/speculative.md):
 *   general.architecture = "medusa"
 *   medusa.n_heads, medusa.n_embd, medusa.n_vocab (u32)
 *   medusa.shared_output (bool)
 *   medusa.target (string: the target's general.name, informational)
 *   medusa.{i}.res.weight  [n_embd, n_embd]   W_i, row-major: row r = output r
 *   medusa.{i}.res.bias    [n_embd]
 *   medusa.{i}.out.weight  [n_embd, n_vocab]  U_i (absent with a shared output)
 */
#ifndef INFERX_MEDUSA_H
#define INFERX_MEDUSA_H

#include "inferx/core.h"
#include "inferx/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IX_MEDUSA_MAX_HEADS 8

typedef struct ix_medusa ix_medusa;

/* New heads: W = 0, b = 0; U_i = a copy of out (n_vocab x n_embd floats)
 * unless shared, in which case out is borrowed (it must outlive the heads).
 * IX_ERR_INVALID for sizes out of range. */
ix_status ix_medusa_create(ix_medusa **out, int32_t n_heads, int32_t n_embd, int32_t n_vocab, const float *out_head,
                           bool shared_output, ix_errbuf *err);
/* Reads a heads file. A shared-output file needs ix_medusa_set_shared_output
 * before use. IX_ERR_FORMAT (with the key or tensor at fault) for a file
 * that is not a Medusa heads file or whose shapes disagree. */
ix_status ix_medusa_load(ix_medusa **out, const char *path, ix_errbuf *err);
ix_status ix_medusa_save(const ix_medusa *m, const char *path, const char *target_name, ix_errbuf *err);
void ix_medusa_destroy(ix_medusa *m); /* NULL is a no-op */

int32_t ix_medusa_n_heads(const ix_medusa *m);
int32_t ix_medusa_n_embd(const ix_medusa *m);
int32_t ix_medusa_n_vocab(const ix_medusa *m);
bool ix_medusa_shared_output(const ix_medusa *m);
/* The target's output head (n_vocab x n_embd F32 rows, borrowed) for a
 * shared-output file. */
void ix_medusa_set_shared_output(ix_medusa *m, const float *out_head);

/* Head i's tensors, borrowed (for callers that run the heads as batched
 * matmuls, the speculative proposer): w (n_embd rows of n_embd), b
 * (n_embd), u (n_vocab rows of n_embd; the shared output head, or NULL when
 * shared and none was set). */
void ix_medusa_head(const ix_medusa *m, int32_t i, const float **w, const float **b, const float **u);

/* Head i's logits for one hidden state (n_embd): logits has room for
 * n_vocab + n_embd floats (the tail is scratch). */
void ix_medusa_logits(const ix_medusa *m, int32_t head, const float *hidden, float *logits);
/* The top-1 token of heads 0..k-1 (k <= n_heads) for one hidden state:
 * guesses for positions t+2 .. t+1+k. scratch: n_vocab + n_embd floats. */
void ix_medusa_propose(const ix_medusa *m, const float *hidden, int32_t k, ix_token *out, float *scratch);

/* One optimisation step (Adam) over a batch: hidden (B x n_embd), labels
 * (B x n_heads; < 0: no label for that head there). loss_out (n_heads, may
 * be NULL): each head's mean cross-entropy over its labelled rows, before
 * the step. Single-threaded; allocates its optimiser state on first use. */
ix_status ix_medusa_train_step(ix_medusa *m, const float *hidden, const ix_token *labels, int32_t B, float lr,
                               float *loss_out);

#ifdef __cplusplus
}
#endif
#endif /* INFERX_MEDUSA_H */
