/* inferx run: one prompt, one streamed completion, timings on stderr.
 *
 * A single sequence driven directly over model + KV cache + sampler: the
 * prompt is prefilled in chunks of the context's batch size, then one token
 * per step, streamed through the incremental detokenizer and the stop-string
 * filter, until EOS, -n tokens, a stop string or the context is full. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/model.h"
#include "inferx/sample.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: inferx run [-m MODEL.gguf] -p PROMPT [options]\n"
            "\n"
            "Generates a completion of PROMPT and streams it to stdout (only the completion);\n"
            "prompt and generation speed and time to first token go to stderr.\n"
            "\n"
            "  -m, --model FILE     GGUF model (default: the bundled model, %s)\n"
            "  -p, --prompt TEXT    the prompt (required; '-' reads it from stdin)\n"
            "  -n, --n-predict N    tokens to generate at most (default 128)\n"
            "  --temp T             temperature, 0 = greedy (default 0.8)\n"
            "  --top-k K            keep the K most likely tokens, 0 = off (default 40)\n"
            "  --top-p P            nucleus sampling, 1 = off (default 0.95)\n"
            "  --min-p P            drop tokens below P x the best probability, 0 = off (default 0.05)\n"
            "  --repeat-penalty R   repetition penalty over prompt and output, 1 = off (default 1)\n"
            "  --seed S             RNG seed (default 42): same seed and prompt, same output\n"
            "  --stop TEXT          stop before this text (may be repeated, up to 8)\n"
            "  --ignore-eos         keep generating past end-of-sequence tokens\n"
            "  -c, --ctx N          context length (default: the model's)\n"
            "  -t, --threads N      worker threads (default: all cores)\n"
            "  --kv-f32             keep the KV cache in f32 (default f16)\n"
            "  -h, --help           show this help\n",
            ix_cli_default_model());
}

static bool parse_float(const char *opt, const char *s, float *out) {
    char *end;
    if (!s) goto bad;
    *out = strtof(s, &end);
    if (end != s && *end == '\0') return true;
bad:
    fprintf(stderr, "inferx run: %s expects a number, got '%s'\n", opt, s ? s : "");
    return false;
}

static char *read_stdin(void) {
    ix_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (ix_buf_append(&b, chunk, n) != IX_OK) break;
    if (!b.data) ix_buf_append(&b, "", 0);
    return b.data;
}

int ix_cli_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL;
    const char *stops[8];
    size_t n_stops = 0;
    uint64_t n_predict = 128, seed = 42, n_ctx = 0, threads = 0;
    bool ignore_eos = false, kv_f32 = false;
    ix_sample_params sp = ix_sample_default_params();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
            continue;
        } else if (!strcmp(a, "--kv-f32")) {
            kv_f32 = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "inferx run: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            ok = ix_cli_parse_u64(a, v, &n_predict);
        } else if (!strcmp(a, "--temp")) {
            ok = parse_float(a, v, &sp.temperature);
        } else if (!strcmp(a, "--top-k")) {
            ok = ix_cli_parse_u64(a, v, &u) && u <= INT32_MAX;
            sp.top_k = (int32_t)u;
        } else if (!strcmp(a, "--top-p")) {
            ok = parse_float(a, v, &sp.top_p);
        } else if (!strcmp(a, "--min-p")) {
            ok = parse_float(a, v, &sp.min_p);
        } else if (!strcmp(a, "--repeat-penalty")) {
            ok = parse_float(a, v, &sp.repetition_penalty);
        } else if (!strcmp(a, "--seed")) {
            ok = ix_cli_parse_u64(a, v, &seed);
        } else if (!strcmp(a, "--stop")) {
            if (n_stops == IX_ARRAY_LEN(stops)) {
                fprintf(stderr, "inferx run: at most %zu --stop strings\n", IX_ARRAY_LEN(stops));
                return 2;
            }
            stops[n_stops++] = v;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            ok = ix_cli_parse_u64(a, v, &n_ctx);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            ok = ix_cli_parse_u64(a, v, &threads) && threads <= 1024;
        } else {
            fprintf(stderr, "inferx run: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!ok) return 2;
    }
    if (!prompt) {
        fprintf(stderr, "inferx run: -p PROMPT is required (see --help)\n");
        return 2;
    }
    if (!model) model = ix_cli_default_model();
    sp.seed = seed;

    int rc = 1;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    ix_kv *kv = NULL;
    ix_model_ctx *ctx = NULL;
    ix_sampler *smp = NULL;
    ix_detok *dt = NULL;
    ix_stopper *stopper = NULL;
    ix_token_vec ids = {0};
    ix_buf piece = {0}, text = {0};
    float *logits = NULL;
    char *stdin_prompt = NULL;
    if (!strcmp(prompt, "-")) prompt = stdin_prompt = read_stdin();

    if (ix_model_load(&m, model, &err) != IX_OK) {
        fprintf(stderr, "inferx run: %s: %s\n", model, err.msg);
        goto done;
    }
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    const ix_tokenizer *tok = ix_model_tokenizer(m);
    if (n_ctx == 0 || n_ctx > (uint64_t)hp->n_ctx_train) {
        if (n_ctx > (uint64_t)hp->n_ctx_train)
            fprintf(stderr, "inferx run: --ctx %llu exceeds the model's context %d; using %d\n",
                    (unsigned long long)n_ctx, hp->n_ctx_train, hp->n_ctx_train);
        n_ctx = (uint64_t)hp->n_ctx_train;
    }
    if (ix_tokenizer_encode(tok, prompt, strlen(prompt), IX_TOK_ADD_SPECIAL, &ids, &err) != IX_OK) {
        fprintf(stderr, "inferx run: prompt: %s\n", err.msg);
        goto done;
    }
    if (ids.n == 0 || ids.n >= n_ctx) {
        fprintf(stderr, "inferx run: the prompt is %zu tokens; the context holds %llu (prompt + at least "
                        "one generated token)\n",
                ids.n, (unsigned long long)n_ctx);
        goto done;
    }

    ix_kv_params kp = ix_kv_default_params();
    ix_model_kv_params(m, &kp);
    kp.dtype = kv_f32 ? IX_KV_F32 : IX_KV_F16;
    kp.max_seq_len = (int32_t)n_ctx;
    kp.n_blocks = (int64_t)((n_ctx + (uint64_t)kp.block_size - 1) / (uint64_t)kp.block_size);
    kp.enable_prefix_cache = false;
    if (ix_kv_create(&kp, &kv, &err) != IX_OK) {
        fprintf(stderr, "inferx run: KV cache: %s\n", err.msg);
        goto done;
    }
    ix_model_ctx_params cp = ix_model_ctx_default_params();
    cp.n_threads = (int32_t)threads;
    if (ix_model_ctx_create(&ctx, m, kv, &cp, &err) != IX_OK ||
        ix_sampler_create(&smp, &sp, hp->n_vocab, &err) != IX_OK) {
        fprintf(stderr, "inferx run: %s\n", err.msg);
        goto done;
    }
    /* The completion continues the prompt, so its leading space is kept. */
    if (ix_detok_create(&dt, tok, IX_DETOK_KEEP_LEADING_SPACE) != IX_OK || ix_stopper_create(&stopper, stops, n_stops) != IX_OK ||
        !(logits = malloc((size_t)hp->n_vocab * sizeof(float)))) {
        fprintf(stderr, "inferx run: out of memory\n");
        goto done;
    }
    ix_sampler_add_prompt(smp, ids.ids, ids.n);

    int32_t seq;
    ix_kv_seq_create(kv, 0, &seq);
    int32_t pos[512], sq[512];
    uint8_t out[512];
    for (int i = 0; i < 512; i++) sq[i] = seq;

    uint64_t t0 = ix_time_ns(), t_first = 0;
    size_t done_prompt = 0, n_gen = 0;
    ix_token next = IX_TOKEN_NONE;
    bool stopped = false;
    while (!stopped && n_gen < n_predict) {
        const ix_token *src;
        int32_t k;
        if (done_prompt < ids.n) {
            k = (int32_t)(ids.n - done_prompt < 512 ? ids.n - done_prompt : 512);
            src = ids.ids + done_prompt;
        } else {
            if ((uint64_t)ix_kv_seq_n_tokens(kv, seq) >= n_ctx) break; /* context full */
            k = 1;
            src = &next;
        }
        int32_t p0 = ix_kv_seq_n_tokens(kv, seq);
        if (ix_kv_seq_append(kv, seq, k, src) != IX_OK) {
            fprintf(stderr, "\ninferx run: KV cache: %s\n", ix_kv_errmsg(kv));
            goto done;
        }
        for (int32_t j = 0; j < k; j++) {
            pos[j] = p0 + j;
            out[j] = 0;
        }
        if (done_prompt < ids.n) done_prompt += (size_t)k;
        bool want = done_prompt >= ids.n;
        out[k - 1] = want;
        ix_batch b = {k, src, pos, sq, out};
        if (ix_model_forward(ctx, &b, logits) != IX_OK) {
            fprintf(stderr, "\ninferx run: %s\n", ix_model_ctx_errmsg(ctx));
            goto done;
        }
        ix_kv_seq_commit(kv, seq, p0 + k);
        if (!want) continue;
        ix_sample_result r;
        ix_sampler_sample(smp, logits, &r);
        ix_sampler_accept(smp, r.id);
        if (n_gen++ == 0) t_first = ix_time_ns();
        next = r.id;
        if (!ignore_eos && ix_tokenizer_is_eog(tok, r.id)) break;
        ix_buf_clear(&piece);
        ix_buf_clear(&text);
        ix_detok_push(dt, r.id, &piece);
        ix_stopper_feed(stopper, piece.data ? piece.data : "", piece.len, &text, &stopped);
        fwrite(text.data ? text.data : "", 1, text.len, stdout);
        fflush(stdout);
    }
    if (!stopped) {
        ix_buf_clear(&piece);
        ix_buf_clear(&text);
        ix_detok_flush(dt, &piece);
        ix_stopper_feed(stopper, piece.data ? piece.data : "", piece.len, &text, &stopped);
        if (!stopped) ix_stopper_flush(stopper, &text);
        fwrite(text.data ? text.data : "", 1, text.len, stdout);
    }
    printf("\n");
    uint64_t t_end = ix_time_ns();
    double prefill_s = (double)(t_first - t0) / 1e9, gen_s = (double)(t_end - t_first) / 1e9;
    fprintf(stderr,
            "\ninferx run: prompt %zu tokens in %.3f s (%.1f tokens/s), time to first token %.1f ms; "
            "generated %zu tokens, %.1f tokens/s (%s, %d threads, kernels %s)\n",
            ids.n, prefill_s, (double)ids.n / prefill_s, prefill_s * 1e3, n_gen,
            n_gen > 1 ? (double)(n_gen - 1) / gen_s : 0.0, hp->arch_name,
            ix_pool_n_threads(ix_model_ctx_pool(ctx)), ix_kernels()->name);
    rc = 0;
done:
    free(logits);
    ix_free(stdin_prompt);
    ix_buf_free(&piece);
    ix_buf_free(&text);
    ix_token_vec_free(&ids);
    ix_stopper_destroy(stopper);
    ix_detok_destroy(dt);
    ix_sampler_destroy(smp);
    ix_model_ctx_destroy(ctx);
    ix_kv_destroy(kv);
    ix_model_destroy(m);
    return rc;
}
