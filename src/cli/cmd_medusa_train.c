/*
 * inferx medusa-train: Medusa heads for a target model, by self-distillation.
 *
 * The text is tokenized as `inferx perplexity` tokenizes it and cut into
 * prompts of --prompt tokens; the target continues each greedily for --gen
 * tokens. One pass over prompt + continuation gives the final-norm hidden
 * state of every position (ix_model_forward_hidden), and the next token is
 * the argmax of the target's output head applied to it (the same argmax as
 * the logits: a final soft-cap or scale keeps the order). The labels are the
 * target's own continuation: head i at position t learns token t+2+i, for
 * every t from the prompt's last token on. The last --eval prompts (10% by
 * default) are held out: each head's top-1 accuracy and the chain
 * acceptance (expected guesses accepted per step, top-1 chain verification)
 * are printed before training and after every epoch.
 *
 * Heads are trained with Adam (ix_medusa_train_step) in shuffled batches
 * of --batch positions. A vocabulary x n_embd above 16M floats shares the
 * target's output head (only the residual blocks are trained and stored).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/gguf.h"
#include "inferx/kernels.h"
#include "inferx/kv.h"
#include "inferx/medusa.h"
#include "inferx/model.h"

typedef struct mt_opts {
    const char *model, *text, *out;
    uint64_t heads, prompt, gen, epochs, batch, threads, max_prompts, eval_every;
    double lr, eval_frac;
    const char *share;
} mt_opts;

static int parse_args(int argc, char **argv, mt_opts *o) {
    *o = (mt_opts){.out = "medusa.gguf", .heads = 3, .prompt = 32, .gen = 48, .epochs = 3, .batch = 32, .lr = 1e-3,
                   .eval_frac = 0.1, .share = "auto"};
    const ix_cli_opt opts[] = {
        {"--model", "-m", "FILE", "the target GGUF model (default: the bundled model)", IX_CLI_OPT_STR, &o->model, 0, 0,
         false, NULL},
        {"--file", "-f", "FILE", "UTF-8 training text (required)", IX_CLI_OPT_STR, &o->text, 0, 0, false, NULL},
        {"--output", "-o", "FILE", "the heads file to write", IX_CLI_OPT_STR, &o->out, 0, 0, true, NULL},
        {"--heads", NULL, "N", "heads: guesses per step", IX_CLI_OPT_U64, &o->heads, 1, IX_MEDUSA_MAX_HEADS, true,
         NULL},
        {"--prompt", NULL, "N", "tokens of text per prompt", IX_CLI_OPT_U64, &o->prompt, 1, 4096, true, NULL},
        {"--gen", NULL, "N", "greedy tokens the target adds to each prompt", IX_CLI_OPT_U64, &o->gen, 2, 4096, true,
         NULL},
        {"--prompts", NULL, "N", "use at most N prompts (default: all the text holds)", IX_CLI_OPT_U64,
         &o->max_prompts, 2, 1u << 24, false, NULL},
        {"--epochs", NULL, "N", "passes over the training positions", IX_CLI_OPT_U64, &o->epochs, 1, 1000, true, NULL},
        {"--batch", NULL, "N", "positions per Adam step", IX_CLI_OPT_U64, &o->batch, 1, 65536, true, NULL},
        {"--lr", NULL, "X", "Adam learning rate", IX_CLI_OPT_F64, &o->lr, 1e-7, 1, true, NULL},
        {"--eval", NULL, "F", "fraction of the prompts held out for evaluation", IX_CLI_OPT_F64, &o->eval_frac, 0.01,
         0.9, true, NULL},
        {"--share-output", NULL, "auto|yes|no",
         "use the target's output head in every head instead of a copy\n"
         "each (auto: when n_vocab x n_embd is over 16M)",
         IX_CLI_OPT_STR, &o->share, 0, 0, true, NULL},
        {"--threads", "-t", "N", "threads of the target's forward passes (default or 0: all cores)", IX_CLI_OPT_U64,
         &o->threads, 0, 1024, false, NULL},
    };
    int prc = ix_cli_parse_opts("medusa-train", opts, IX_ARRAY_LEN(opts), argc, argv);
    if (prc == IX_CLI_HELP) {
        fprintf(stdout, "usage: inferx medusa-train [-m MODEL.gguf] -f TEXT [-o HEADS.gguf] [options]\n"
                        "Trains Medusa heads on the target's own greedy continuations of TEXT\n"
                        "(docs/speculative.md).\n\n");
        ix_cli_print_opts(stdout, opts, IX_ARRAY_LEN(opts));
        return -1;
    }
    if (prc != IX_CLI_OK) return 2;
    if (!o->text) {
        fprintf(stderr, "inferx medusa-train: -f TEXT is required\n");
        return 2;
    }
    if (strcmp(o->share, "auto") && strcmp(o->share, "yes") && strcmp(o->share, "no")) {
        fprintf(stderr, "inferx medusa-train: --share-output expects auto, yes or no, got '%s'\n", o->share);
        return 2;
    }
    if (!o->model) o->model = ix_cli_default_model();
    return 0;
}

/* The target's output head as F32 rows (n_vocab x n_embd): output.weight,
 * or the token embeddings when they are tied. NULL after printing why. */
static float *output_head(const ix_model *m, int32_t V, int32_t n) {
    const ix_gguf *g = ix_model_gguf(m);
    const ix_gguf_tensor *t = ix_gguf_find_tensor(g, "output.weight");
    if (!t) t = ix_gguf_find_tensor(g, "token_embd.weight");
    if (!t || t->ne[0] != n || t->ne[1] < V) {
        fprintf(stderr, "inferx medusa-train: the model has no output head of [%d, %d]\n", n, V);
        return NULL;
    }
    float *u = ix_malloc((size_t)V * (size_t)n * sizeof *u);
    if (!u) {
        fprintf(stderr, "inferx medusa-train: out of memory for the output head\n");
        return NULL;
    }
    size_t row_bytes = (size_t)t->n_bytes / (size_t)t->ne[1];
    for (int32_t v = 0; v < V; v++)
        if (ix_kernels_dequant_row(t->type, (const char *)t->data + (size_t)v * row_bytes, u + (size_t)v * (size_t)n,
                                   (size_t)n) != IX_OK) {
            fprintf(stderr, "inferx medusa-train: cannot read the output head's type\n");
            ix_free(u);
            return NULL;
        }
    return u;
}

static int32_t argmax_row(const float *u, const float *h, int32_t V, int32_t n) {
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t v = 0; v < V; v++) {
        const float *r = u + (size_t)v * (size_t)n;
        float s = 0;
        for (int32_t k = 0; k < n; k++) s += r[k] * h[k];
        if (s > bv) bv = s, best = v;
    }
    return best;
}

/* Held-out evaluation: per head top-1 accuracy, and the chain acceptance:
 * the mean over positions of how many leading heads were all right. */
static void evaluate(const ix_medusa *md, const float *hid, const ix_token *lab, size_t n_pos, int32_t H, float *scratch,
                     double *acc, double *chain) {
    size_t ok[IX_MEDUSA_MAX_HEADS] = {0}, cnt[IX_MEDUSA_MAX_HEADS] = {0};
    double ch = 0;
    size_t n_full = 0;
    for (size_t p = 0; p < n_pos; p++) {
        ix_token guess[IX_MEDUSA_MAX_HEADS];
        ix_medusa_propose(md, hid + p * (size_t)ix_medusa_n_embd(md), H, guess, scratch);
        bool all = true, full = true;
        int32_t run = 0;
        for (int32_t i = 0; i < H; i++) {
            ix_token y = lab[p * (size_t)H + (size_t)i];
            if (y < 0) {
                full = false;
                continue;
            }
            cnt[i]++;
            ok[i] += guess[i] == y;
            if (all && guess[i] == y) run++;
            else all = false;
        }
        if (full) ch += run, n_full++;
    }
    for (int32_t i = 0; i < H; i++) acc[i] = cnt[i] ? (double)ok[i] / (double)cnt[i] : 0;
    *chain = n_full ? ch / (double)n_full : 0;
}

static void report(const char *when, const double *acc, double chain, int32_t H) {
    fprintf(stderr, "inferx medusa-train: %s: top-1 per head", when);
    for (int32_t i = 0; i < H; i++) fprintf(stderr, " %.3f", acc[i]);
    fprintf(stderr, "; chain acceptance %.3f tokens/step\n", chain);
}

int ix_cli_medusa_train(int argc, char **argv) {
    mt_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    rc = 1;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    ix_kv *kv = NULL;
    ix_model_ctx *ctx = NULL;
    ix_medusa *md = NULL;
    ix_token_vec text = {0};
    float *u = NULL, *hid = NULL, *scratch = NULL;
    ix_token *lab = NULL;
    size_t *order = NULL;
    if (ix_model_load(&m, o.model, &err) != IX_OK) {
        fprintf(stderr, "inferx medusa-train: %s: %s\n", o.model, err.msg);
        goto done;
    }
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    const int32_t n = hp->n_embd, V = ix_tokenizer_n_vocab(ix_model_tokenizer(m)), H = (int32_t)o.heads;
    const int32_t L = (int32_t)(o.prompt + o.gen);
    if (!ix_cli_tokenize_file("medusa-train", o.text, ix_model_tokenizer(m), &text)) goto done;
    size_t n_prompts = text.n / o.prompt;
    if (o.max_prompts && n_prompts > o.max_prompts) n_prompts = o.max_prompts;
    if (n_prompts < 2) {
        fprintf(stderr, "inferx medusa-train: %s holds %zu tokens: fewer than two prompts of %llu\n", o.text, text.n,
                (unsigned long long)o.prompt);
        goto done;
    }
    if (!(u = output_head(m, V, n))) goto done;
    bool shared = !strcmp(o.share, "yes") || (!strcmp(o.share, "auto") && (double)V * n > 16e6);
    if (ix_medusa_create(&md, H, n, V, u, shared, &err) != IX_OK) {
        fprintf(stderr, "inferx medusa-train: %s\n", err.msg);
        goto done;
    }

    /* The target's continuations and hidden states. */
    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.n_blocks = (L + kp.block_size - 1) / kp.block_size + 1;
    kp.max_seq_len = L;
    kp.enable_prefix_cache = false;
    kp.n_swap_blocks = 0;
    if (ix_kv_create(&kp, &kv, &err) != IX_OK) {
        fprintf(stderr, "inferx medusa-train: KV cache: %s\n", err.msg);
        goto done;
    }
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.max_batch_tokens = L;
    cp.n_threads = (int32_t)o.threads;
    if (ix_model_ctx_create(&ctx, m, kv, &cp, &err) != IX_OK) {
        fprintf(stderr, "inferx medusa-train: %s\n", err.msg);
        goto done;
    }
    /* Per prompt, the positions from its last prompt token on: o.gen of them. */
    const size_t per = (size_t)o.gen, n_pos = n_prompts * per;
    hid = ix_malloc(n_pos * (size_t)n * sizeof *hid);
    lab = ix_malloc(n_pos * (size_t)H * sizeof *lab);
    scratch = ix_malloc(((size_t)L * (size_t)n + (size_t)V + (size_t)n) * sizeof *scratch);
    ix_token *seq = ix_malloc((size_t)L * sizeof *seq);
    int32_t *pos = ix_malloc((size_t)L * sizeof *pos), *sq = ix_malloc((size_t)L * sizeof *sq);
    uint8_t *want = ix_malloc((size_t)L);
    if (!hid || !lab || !scratch || !seq || !pos || !sq || !want) {
        fprintf(stderr, "inferx medusa-train: out of memory for %zu positions\n", n_pos);
        ix_free(seq), ix_free(pos), ix_free(sq), ix_free(want);
        goto done;
    }
    uint64_t t0 = ix_time_ns(), last = t0;
    bool failed = false;
    for (size_t pi = 0; pi < n_prompts && !failed; pi++) {
        int32_t P = (int32_t)o.prompt, s;
        memcpy(seq, text.ids + pi * o.prompt, (size_t)P * sizeof *seq);
        if (ix_kv_seq_create(kv, 0, &s) != IX_OK) failed = true;
        /* positions 0..P-1 at once, then one token at a time; hidden[j] of
         * position P-1+j is kept for j < gen */
        int32_t done_n = 0;
        for (int32_t j = 0; j < (int32_t)o.gen && !failed; j++) {
            int32_t from = done_n, cnt = j == 0 ? P : 1;
            for (int32_t k = 0; k < cnt; k++) pos[k] = from + k, sq[k] = s, want[k] = (k == cnt - 1);
            if (ix_kv_seq_append(kv, s, cnt, NULL) != IX_OK) {
                failed = true;
                break;
            }
            ix_batch b = {cnt, seq + from, pos, sq, want};
            float *h = hid + (pi * per + (size_t)j) * (size_t)n;
            if (ix_model_forward_hidden(ctx, &b, h) != IX_OK) {
                fprintf(stderr, "inferx medusa-train: forward pass: %s\n", ix_model_ctx_errmsg(ctx));
                failed = true;
                break;
            }
            ix_kv_seq_commit(kv, s, from + cnt);
            done_n = from + cnt;
            seq[done_n] = argmax_row(u, h, V, n); /* the target's greedy next token */
        }
        ix_kv_seq_free(kv, s);
        /* labels: head i at position P-1+j learns token P+1+j+i */
        for (size_t j = 0; j < per; j++)
            for (int32_t i = 0; i < H; i++) {
                size_t t = (size_t)o.prompt + j + 1 + (size_t)i;
                lab[(pi * per + j) * (size_t)H + (size_t)i] = t < (size_t)L ? seq[t] : -1;
            }
        uint64_t now = ix_time_ns();
        if (now - last > 1000000000ull || pi + 1 == n_prompts) {
            fprintf(stderr, "inferx medusa-train: target continuations %zu/%zu (%.1f s)\n", pi + 1, n_prompts,
                    (double)(now - t0) / 1e9);
            last = now;
        }
    }
    ix_free(seq), ix_free(pos), ix_free(sq), ix_free(want);
    if (failed) {
        fprintf(stderr, "inferx medusa-train: the target's pass failed\n");
        goto done;
    }

    size_t n_eval_prompts = (size_t)ceil((double)n_prompts * o.eval_frac);
    if (n_eval_prompts >= n_prompts) n_eval_prompts = n_prompts - 1;
    size_t n_train = (n_prompts - n_eval_prompts) * per, n_eval = n_eval_prompts * per;
    const float *ehid = hid + n_train * (size_t)n;
    const ix_token *elab = lab + n_train * (size_t)H;
    double acc[IX_MEDUSA_MAX_HEADS], chain;
    evaluate(md, ehid, elab, n_eval, H, scratch, acc, &chain);
    report("held out, before training", acc, chain, H);
    order = ix_malloc(n_train * sizeof *order);
    float *bh = ix_malloc((size_t)o.batch * (size_t)n * sizeof *bh);
    ix_token *bl = ix_malloc((size_t)o.batch * (size_t)H * sizeof *bl);
    if (!order || !bh || !bl) {
        fprintf(stderr, "inferx medusa-train: out of memory\n");
        ix_free(bh), ix_free(bl);
        goto done;
    }
    for (size_t i = 0; i < n_train; i++) order[i] = i;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (uint64_t ep = 0; ep < o.epochs; ep++) {
        for (size_t i = n_train; i > 1; i--) { /* Fisher-Yates with xorshift */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t j = (size_t)(rng % i), t = order[i - 1];
            order[i - 1] = order[j], order[j] = t;
        }
        double loss_sum[IX_MEDUSA_MAX_HEADS] = {0};
        size_t steps = 0;
        uint64_t te = ix_time_ns();
        for (size_t at = 0; at < n_train; at += o.batch) {
            int32_t B = (int32_t)(n_train - at < o.batch ? n_train - at : o.batch);
            for (int32_t r = 0; r < B; r++) {
                memcpy(bh + (size_t)r * (size_t)n, hid + order[at + (size_t)r] * (size_t)n, (size_t)n * sizeof *bh);
                memcpy(bl + (size_t)r * (size_t)H, lab + order[at + (size_t)r] * (size_t)H, (size_t)H * sizeof *bl);
            }
            float loss[IX_MEDUSA_MAX_HEADS];
            if (ix_medusa_train_step(md, bh, bl, B, (float)o.lr, loss) != IX_OK) {
                fprintf(stderr, "inferx medusa-train: out of memory for the optimiser\n");
                ix_free(bh), ix_free(bl);
                goto done;
            }
            for (int32_t i = 0; i < H; i++) loss_sum[i] += loss[i];
            steps++;
        }
        fprintf(stderr, "inferx medusa-train: epoch %llu/%llu (%.1f s): loss per head",
                (unsigned long long)(ep + 1), (unsigned long long)o.epochs, (double)(ix_time_ns() - te) / 1e9);
        for (int32_t i = 0; i < H; i++) fprintf(stderr, " %.3f", loss_sum[i] / (double)(steps ? steps : 1));
        fprintf(stderr, "\n");
        evaluate(md, ehid, elab, n_eval, H, scratch, acc, &chain);
        report("held out", acc, chain, H);
    }
    ix_free(bh), ix_free(bl);
    ix_str name = {0};
    ix_gguf_get_str(ix_model_gguf(m), "general.name", &name, NULL);
    char tname[256];
    snprintf(tname, sizeof tname, "%.*s", (int)name.len, name.ptr ? name.ptr : "");
    if (ix_medusa_save(md, o.out, tname, &err) != IX_OK) {
        fprintf(stderr, "inferx medusa-train: %s\n", err.msg);
        goto done;
    }
    printf("{\"heads\": %d, \"shared_output\": %s, \"train_positions\": %zu, \"eval_positions\": %zu, "
           "\"chain_acceptance\": %.4f, \"top1\": [",
           H, shared ? "true" : "false", n_train, n_eval, chain);
    for (int32_t i = 0; i < H; i++) printf("%s%.4f", i ? ", " : "", acc[i]);
    printf("], \"output\": \"%s\"}\n", o.out);
    rc = 0;
done:
    ix_free(order);
    ix_free(hid);
    ix_free(lab);
    ix_free(scratch);
    ix_free(u);
    ix_medusa_destroy(md);
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    ix_token_vec_free(&text);
    ix_model_destroy(m);
    return rc;
}
