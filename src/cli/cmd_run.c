/* inferx run: one prompt, one streamed completion, timings on stderr.
 *
 * One request on a thread-less engine that this thread steps (engine.h's
 * ix_engine_run_until): the engine's generation loop and text stream, the
 * same the server uses. The prompt is prefilled in chunks of up to 512 tokens,
 * then one token per step is sampled and its text -- which never splits a
 * UTF-8 character nor shows a stop string -- goes to stdout as it comes,
 * until EOS, -n tokens, a stop string or the context is full. The timings
 * are the engine's own (ix_finish_info). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include <jansson.h>

#include "inferx/engine.h"
#include "inferx/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: inferx run [-m MODEL.gguf] -p PROMPT [options]\n"
            "\n"
            "Generates a completion of PROMPT and streams it to stdout (only the completion);\n"
            "prompt and generation speed and time to first token go to stderr.\n"
            "\n"
            "  -m, --model FILE     GGUF model (default: the bundled model, %s)\n"
            "  -p, --prompt TEXT    the prompt (required; '-' reads it from stdin)\n"
            "  --chat               PROMPT is a user message: render it with the model's chat template\n"
            "                       (the server's; the template used goes to stderr)\n"
            "  --chat-template NAME|FILE  --chat with this template: a built-in (chatml, llama3, llama2,\n"
            "                       phi3, zephyr, mistral-v1, mistral-v3 = mistral, gemma, plain) or a\n"
            "                       Jinja file\n"
            "  --system TEXT        with --chat: a system message before PROMPT\n"
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
            "  --kv-cache-dtype TYPE  KV cache element type: f16 (default), bf16, q8_0, fp8_e4m3,\n"
            "                       q4_0 (32-value blocks + an f16 scale) or f32\n"
            "  --kv-f32             the same as --kv-cache-dtype f32\n"
            "  --pack-cache DIR|off the packed-weight cache (as inferx serve's; default\n"
            "                       $INFERX_PACK_CACHE, else $XDG_CACHE_HOME/inferx, else ~/.cache/inferx)\n"
            "  --tp N               tensor parallelism over N processes: start it as\n"
            "                       mpirun -np N inferx run --tp N ... (docs/distributed.md); greedy\n"
            "                       output is the same as one process's (default 1)\n"
            "  --pp N               pipeline parallelism over N stages of contiguous layers;\n"
            "                       with --tp: mpirun -np TP*PP inferx run --tp TP --pp PP ...\n"
            "                       (rank r: stage r / TP, tensor rank r %% TP; default 1)\n"
            "  --micro-batches N    a pipeline's split of each step (default: one per stage)\n",
            ix_cli_default_model());
    ix_spec_params spec = ix_spec_default_params();
    const ix_cli_opt spec_opts[] = {IX_CLI_SPEC_OPTS(&spec)};
    ix_cli_print_opts(f, spec_opts, IX_ARRAY_LEN(spec_opts));
    fprintf(f, "  -h, --help           show this help\n");
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

typedef struct run_state {
    bool finished;
    ix_finish_info info;
} run_state;

static void run_on_token(void *user, const ix_token_event *ev) {
    IX_UNUSED(user);
    if (!ev->text_len) return;
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
}

static void run_on_finish(void *user, const ix_finish_info *info) {
    run_state *st = user;
    st->info = *info;
    st->finished = true;
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

/* --chat: [system,] user as the server renders a chat request; which
 * template did it goes to stderr. */
static ix_status chat_tokens(const ix_model *m, const char *tmpl, const char *system, const char *prompt,
                             ix_token_vec *ids, ix_errbuf *err) {
    const ix_gguf *g = ix_model_gguf(m);
    const ix_tokenizer *t = ix_model_tokenizer(m);
    json_t *msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", prompt));
    char *text = json_dumps(msgs, JSON_COMPACT);
    json_decref(msgs);
    if (!text) return ix_errf(err, IX_ERR_INVALID, "the prompt is not valid UTF-8 (or out of memory)");
    ix_buf desc = {0};
    ix_status st = ix_server_chat_describe(g, t, tmpl, &desc, err);
    if (st == IX_OK) fprintf(stderr, "inferx run: chat template: %s\n", desc.data);
    if (st == IX_OK) st = ix_server_chat_tokens(g, t, tmpl, text, ids, err);
    ix_buf_free(&desc);
    free(text);
    return st;
}

int ix_cli_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *chat_template = NULL, *system = NULL, *pack_cache = NULL;
    bool chat = false;
    const char *stops[8];
    size_t n_stops = 0;
    uint64_t n_predict = 128, seed = 42, n_ctx = 0, threads = 0, tp = 1, pp = 1, micro = 0;
    bool ignore_eos = false;
    ix_kv_dtype kv_dtype = IX_KV_F16;
    ix_spec_params spec = ix_spec_default_params();
    const ix_cli_opt spec_opts[] = {IX_CLI_SPEC_OPTS(&spec)};
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
            kv_dtype = IX_KV_F32;
            continue;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
            continue;
        }
        bool used = false;
        int src = ix_cli_parse_one("run", spec_opts, IX_ARRAY_LEN(spec_opts), a, v, &used);
        if (src != 1) {
            if (src != IX_CLI_OK) return 2;
            i += used;
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
        } else if (!strcmp(a, "--chat-template")) {
            chat_template = v;
            chat = true;
        } else if (!strcmp(a, "--system")) {
            system = v;
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
        } else if (!strcmp(a, "--tp")) {
            ok = ix_cli_parse_u64(a, v, &tp) && tp >= 1 && tp <= 1024;
            if (!ok) fprintf(stderr, "inferx run: --tp takes 1..1024 ranks\n");
        } else if (!strcmp(a, "--pp")) {
            ok = ix_cli_parse_u64(a, v, &pp) && pp >= 1 && pp <= 1024;
            if (!ok) fprintf(stderr, "inferx run: --pp takes 1..1024 stages\n");
        } else if (!strcmp(a, "--micro-batches")) {
            ok = ix_cli_parse_u64(a, v, &micro) && micro >= 1 && micro <= 65536;
            if (!ok) fprintf(stderr, "inferx run: --micro-batches takes 1..65536\n");
        } else if (!strcmp(a, "--kv-cache-dtype")) {
            const char *why = ix_cli_set_kv_dtype(&kv_dtype, v);
            if (why) fprintf(stderr, "inferx run: %s %s, got '%s'\n", a, why, v);
            ok = !why;
        } else if (!strcmp(a, "--pack-cache")) {
            pack_cache = v;
            ok = v != NULL;
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
    if (system && !chat) {
        fprintf(stderr, "inferx run: --system needs --chat or --chat-template\n");
        return 2;
    }
    if (n_predict == 0) {
        fprintf(stderr, "inferx run: -n must be at least 1\n");
        return 2;
    }
    if (!model) model = ix_cli_default_model();
    sp.seed = seed;

    ix_cli_tp tps;
    ix_cli_dist_opts dopts = {(int32_t)tp, (int32_t)pp, (int32_t)micro};
    int rc = ix_cli_tp_join("run", &dopts, model, (int32_t)threads, &tps);
    if (rc >= 0) return rc; /* a usage error, or a rank other than 0 that has served */
    rc = 1;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    ix_engine *e = NULL;
    ix_token_vec ids = {0};
    char *stdin_prompt = NULL, *tmpl = NULL;
    if (!strcmp(prompt, "-")) prompt = stdin_prompt = read_stdin();
    if (chat_template && !(tmpl = ix_cli_chat_template("run", chat_template))) {
        rc = 2;
        goto done;
    }

    char cache_buf[4096];
    ix_model_load_params lp;
    ix_cli_load_params(&lp, pack_cache, IX_CLI_PACK_CACHE_MAX_DEFAULT, cache_buf, sizeof cache_buf);
    if (ix_cli_tp_load(&tps, model, &lp, &m, &err) != IX_OK) {
        fprintf(stderr, "inferx run: %s: %s\n", model, err.msg);
        goto done;
    }
    const ix_model_hparams *hp = ix_model_get_hparams(m);
    if (n_ctx == 0 || n_ctx > (uint64_t)hp->n_ctx_train) {
        if (n_ctx > (uint64_t)hp->n_ctx_train)
            fprintf(stderr, "inferx run: --ctx %llu exceeds the model's context %d; using %d\n",
                    (unsigned long long)n_ctx, hp->n_ctx_train, hp->n_ctx_train);
        n_ctx = (uint64_t)hp->n_ctx_train;
    }
    if (chat ? chat_tokens(m, tmpl, system, prompt, &ids, &err) != IX_OK
             : ix_tokenizer_encode(ix_model_tokenizer(m), prompt, strlen(prompt), IX_TOK_ADD_SPECIAL, &ids, &err) !=
                   IX_OK) {
        fprintf(stderr, "inferx run: prompt: %s\n", err.msg);
        goto done;
    }

    /* One request on a thread-less engine that this thread steps: a KV pool
     * of one context and the block beyond the prompt that admission asks
     * for, no prefix cache (nothing to share), prefill in chunks of up to 512
     * tokens. */
    ix_engine_params ep = ix_engine_default_params();
    ep.start_thread = false;
    ep.n_threads = (int32_t)threads;
    ep.n_ctx = (int32_t)n_ctx;
    ep.kv_dtype = kv_dtype;
    ep.kv_blocks = (int64_t)((n_ctx + (uint64_t)ep.kv_block_size - 1) / (uint64_t)ep.kv_block_size) + 1;
    ep.enable_prefix_cache = false;
    ep.sched.max_num_seqs = 1;
    ep.sched.max_num_batched_tokens = 512;
    ix_cli_spec_resolve(&spec);
    ep.spec = spec;
    if (ix_engine_create(&e, m, &ep, &err) != IX_OK) {
        fprintf(stderr, "inferx run: %s\n", err.msg);
        goto done;
    }
    run_state st = {0};
    ix_request_params rq = ix_request_default_params();
    rq.prompt = ids.ids;
    rq.n_prompt = ids.n;
    rq.sample = sp;
    rq.max_tokens = n_predict < INT32_MAX ? (int32_t)n_predict : INT32_MAX;
    rq.stop = stops;
    rq.n_stop = n_stops;
    rq.ignore_eos = ignore_eos;
    rq.cb = (ix_request_callbacks){run_on_token, run_on_finish, &st, NULL};
    ix_status s = ix_engine_submit(e, &rq, NULL, &err);
    if (s != IX_OK) {
        fprintf(stderr, "inferx run: %s\n", err.msg);
        rc = s == IX_ERR_INVALID ? 2 : 1;
        goto done;
    }
    if ((s = ix_engine_run_until(e, &st.finished, 0)) != IX_OK) {
        fprintf(stderr, "\ninferx run: the engine stopped: %s\n", ix_status_str(s));
        goto done;
    }
    printf("\n");
    const ix_finish_info *fi = &st.info;
    if (fi->reason == IX_FINISH_ERROR) {
        fprintf(stderr, "inferx run: %s\n", fi->message);
        goto done;
    }
    int32_t n_gen = fi->usage.completion_tokens;
    double prefill_s = fi->timings.first_token_ms / 1e3;
    double gen_s = (fi->timings.total_ms - fi->timings.first_token_ms) / 1e3;
    fprintf(stderr,
            "\ninferx run: prompt %d tokens in %.3f s (%.1f tokens/s), time to first token %.1f ms; "
            "generated %d tokens, %.1f tokens/s (%s, %d threads, kernels %s)\n",
            fi->usage.prompt_tokens, prefill_s, (double)fi->usage.prompt_tokens / prefill_s,
            prefill_s * 1e3, n_gen, n_gen > 1 && gen_s > 0 ? (double)(n_gen - 1) / gen_s : 0.0, hp->arch_name,
            ix_pool_n_threads(ix_engine_pool(e)), ix_kernels()->name);
    if (spec.kind != IX_SPEC_NONE) {
        ix_engine_stats es;
        ix_engine_get_stats(e, &es);
        fprintf(stderr, "inferx run: speculation (%s): %llu of %llu guessed tokens accepted in %llu decodes\n",
                ix_spec_kind_name(spec.kind), (unsigned long long)es.spec_n_accepted_tokens,
                (unsigned long long)es.spec_n_draft_tokens, (unsigned long long)es.spec_n_drafts);
    }
    ix_cli_tp_report(stderr, "run", &tps);
    rc = 0;
done:
    ix_engine_destroy(e);
    ix_cli_tp_end(&tps);
    ix_free(stdin_prompt);
    ix_free(tmpl);
    ix_token_vec_free(&ids);
    ix_model_destroy(m);
    return rc;
}
