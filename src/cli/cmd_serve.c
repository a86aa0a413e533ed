/* inferx serve: the OpenAI-compatible HTTP server (include/inferx/server.h)
 * over one engine. SIGINT / SIGTERM shut it down gracefully: stop listening
 * (new connections are refused), let requests in flight finish for
 * --shutdown-timeout seconds, cancel the rest, exit 0; a second SIGINT /
 * SIGTERM cancels them at once. SIGHUP reopens the access log file (log
 * rotation) and reads the --keys-file again. The signals are blocked in
 * every thread and taken with sigwait on the main thread, so no handler
 * runs in async-signal context.
 * API keys come from --api-key (repeatable), --api-key-file (one per line)
 * or $INFERX_API_KEY, and with their limits from --keys-file (the server
 * reads and checks it); the JSON access log goes to stderr, a file or
 * nowhere. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "inferx/engine.h"
#include "inferx/server.h"

static void usage(FILE *f, const ix_cli_opt *opts, size_t n_opts) {
    fprintf(f,
            "usage: inferx serve [-m MODEL.gguf] [options]\n"
            "\n"
            "Serves the model over an OpenAI-compatible HTTP API (docs/server.md):\n"
            "/v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize,\n"
            "/health, /ready, /metrics, /v1/responses, /v1/embeddings, Ollama's /api/...,\n"
            "and a chat page for browsers at /. The port opens at once: /ready answers 503\n"
            "with the load progress until the model is loaded.\n"
            "\n");
    ix_cli_print_opts(f, opts, n_opts);
    fprintf(f, "  -h, --help                   show this help\n");
}

typedef struct key_list {
    char **keys; /* (n) owned */
    size_t n, cap;
} key_list;

static bool key_add(key_list *l, const char *key, size_t len) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        char **k = ix_realloc(l->keys, cap * sizeof *k);
        if (!k) return false;
        l->keys = k;
        l->cap = cap;
    }
    if (!(l->keys[l->n] = ix_strndup(key, len))) return false;
    l->n++;
    return true;
}

static void key_list_free(key_list *l) {
    for (size_t i = 0; i < l->n; i++) ix_free(l->keys[i]);
    ix_free(l->keys);
}

/* A key travels in an HTTP header: printable ASCII without spaces. */
static bool key_ok(const char *k, size_t n) {
    if (!n) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] <= 0x20 || (unsigned char)k[i] >= 0x7f) return false;
    return true;
}

typedef struct key_opts {
    key_list list;
    bool given; /* --api-key or --api-key-file: $INFERX_API_KEY is not used */
    const char *file;
} key_opts;

static const char *set_api_key(void *dst, const char *v) {
    key_opts *k = dst;
    k->given = true;
    if (!key_ok(v, strlen(v))) return "expects printable ASCII without spaces";
    return key_add(&k->list, v, strlen(v)) ? NULL : "could not be stored (out of memory)";
}

static const char *set_api_key_file(void *dst, const char *v) {
    key_opts *k = dst;
    k->given = true;
    k->file = v;
    return NULL;
}

static const char *set_policy(void *dst, const char *v) {
    return ix_sched_policy_parse(v, dst) == IX_OK ? NULL : "expects fcfs, priority or deadline";
}

/* Keys from path, one per line; surrounding whitespace is trimmed, blank
 * lines and lines starting with '#' are skipped. Prints why on failure. */
static bool read_key_file(const char *path, key_list *l) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "inferx serve: cannot open the API key file %s: %s\n", path, strerror(errno));
        return false;
    }
    char line[4096];
    size_t n0 = l->n;
    bool ok = true;
    for (int no = 1; ok && fgets(line, sizeof line, f); no++) {
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(f)) {
            fprintf(stderr, "inferx serve: %s:%d: line too long for an API key\n", path, no);
            ok = false;
            break;
        }
        const char *k = line;
        while (*k == ' ' || *k == '\t') k++;
        n = strlen(k);
        while (n && (k[n - 1] == '\n' || k[n - 1] == '\r' || k[n - 1] == ' ' || k[n - 1] == '\t')) n--;
        if (n == 0 || k[0] == '#') continue;
        if (!key_ok(k, n)) {
            fprintf(stderr, "inferx serve: %s:%d: an API key must be printable ASCII without spaces\n", path, no);
            ok = false;
        } else if (!key_add(l, k, n)) {
            fprintf(stderr, "inferx serve: out of memory\n");
            ok = false;
        }
    }
    if (ok && ferror(f)) {
        fprintf(stderr, "inferx serve: cannot read %s\n", path);
        ok = false;
    }
    fclose(f);
    if (ok && l->n == n0) {
        fprintf(stderr, "inferx serve: no API key in %s\n", path);
        ok = false;
    }
    return ok;
}

/* The access log's sink: one line per call, whole (stdio's lock). */
static void write_access_line(void *user, const char *line, size_t len) {
    FILE *f = user;
    flockfile(f);
    fwrite(line, 1, len, f);
    fflush(f);
    funlockfile(f);
}

static void on_load_progress(void *user, double fraction) { ix_server_set_load_progress(user, fraction); }

/* SIGHUP: the access log file opened again under its name (a rotated file
 * is let go), swapped under the stream's lock so no line is split. */
static void reopen_log(FILE *log, const char *path) {
    if (!log || log == stderr) {
        fprintf(stderr, "inferx serve: SIGHUP: no access log file to reopen\n");
        return;
    }
    FILE *nf = fopen(path, "a");
    if (!nf) {
        fprintf(stderr, "inferx serve: SIGHUP: cannot reopen %s: %s (still writing the old file)\n", path,
                strerror(errno));
        return;
    }
    flockfile(log);
    fflush(log);
    int ok = dup2(fileno(nf), fileno(log)) >= 0;
    funlockfile(log);
    fclose(nf);
    fprintf(stderr, ok ? "inferx serve: SIGHUP: reopened the access log %s\n"
                       : "inferx serve: SIGHUP: cannot reopen %s (still writing the old file)\n",
            path);
}

/* SIGHUP: the access log reopened, and the keys file read again (a bad
 * file keeps the keys as they were, and says why). */
static void on_sighup(FILE *log, const char *log_path, ix_server *srv, const char *keys_file) {
    reopen_log(log, log_path);
    if (!keys_file) return;
    ix_errbuf err = {{0}};
    if (ix_server_reload_keys(srv, &err) == IX_OK)
        fprintf(stderr, "inferx serve: SIGHUP: reloaded the keys file %s\n", keys_file);
    else
        fprintf(stderr, "inferx serve: SIGHUP: %s (the keys stay as they were)\n", err.msg);
}

typedef struct drain_job {
    ix_server *srv;
    int64_t drain_ms;
    atomic_int done;
} drain_job;

static void *drain_main(void *arg) {
    drain_job *j = arg;
    ix_server_shutdown(j->srv, j->drain_ms);
    atomic_store(&j->done, 1);
    return NULL;
}

/* The OTLP traces URL: the flag's (a base URL gets /v1/traces, as
 * OTEL_EXPORTER_OTLP_ENDPOINT does), else the environment's; "" when none.
 * NULL after printing why. */
static char *otlp_traces_url(const char *flag) {
    const char *full = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), *base = flag;
    if (!base && full && *full) return ix_strdup(full);
    if (!base) base = getenv("OTEL_EXPORTER_OTLP_ENDPOINT");
    if (!base || !*base) return ix_strdup("");
    size_t n = strlen(base);
    while (n && base[n - 1] == '/') n--;
    static const char tail[] = "/v1/traces";
    bool has = n >= sizeof tail - 1 && !memcmp(base + n - (sizeof tail - 1), tail, sizeof tail - 1);
    char *url = ix_malloc(n + sizeof tail);
    if (!url) {
        fprintf(stderr, "inferx serve: out of memory\n");
        return NULL;
    }
    memcpy(url, base, n);
    if (has) url[n] = '\0';
    else memcpy(url + n, tail, sizeof tail);
    return url;
}

int ix_cli_serve(int argc, char **argv) {
    const char *model = ix_cli_default_model(), *name = NULL, *access_log = "-", *chat_template = NULL;
    const char *otlp = NULL;
    char *otlp_url = NULL;
    key_opts keys = {{0}, false, NULL};
    ix_server_params sp = ix_server_default_params();
    ix_engine_params ep = ix_engine_default_params();
    uint64_t shutdown_s = 30;
    ix_cli_dist_opts dopts = {1, 1, 0};
    size_t kv_disk_max = 0, pack_cache_max = IX_CLI_PACK_CACHE_MAX_DEFAULT;
    const char *pack_cache = NULL;
    const ix_cli_opt opts[] = {
        {"--model", "-m", "FILE", "GGUF model", IX_CLI_OPT_STR, &model, 0, 0, true, NULL},
        {"--host", NULL, "ADDR", "address or host name to bind", IX_CLI_OPT_STR, &sp.host, 0, 0, true, NULL},
        {"--port", NULL, "N", "TCP port (0 = any free port)", IX_CLI_OPT_U16, &sp.port, 0, 65535, true, NULL},
        {"--api-key", NULL, "KEY",
         "require 'Authorization: Bearer KEY'; repeat it for more keys,\n"
         "each its own tenant of the prefix cache (default: $INFERX_API_KEY)",
         IX_CLI_OPT_FN, &keys, 0, 0, false, set_api_key},
        {"--api-key-file", NULL, "FILE",
         "read keys from FILE, one per line ('#' comments and blank\n"
         "lines skipped); adds to --api-key",
         IX_CLI_OPT_FN, &keys, 0, 0, false, set_api_key_file},
        {"--keys-file", NULL, "FILE",
         "per-key policy: a JSON file of named keys with their limits\n"
         "(requests/tokens per minute, concurrency, max tokens, budgets,\n"
         "models, priority, /metrics access; docs/server.md); adds to\n"
         "--api-key, whose keys stay unlimited",
         IX_CLI_OPT_STR, &sp.keys_file, 0, 0, false, NULL},
        {"--usage-state", NULL, "FILE",
         "where the keys' spent budgets persist across restarts\n"
         "(default: the keys file's name + .usage.json)",
         IX_CLI_OPT_STR, &sp.usage_state, 0, 0, false, NULL},
        {"--request-timeout", NULL, "S",
         "cancel a request running longer than S seconds (answered 408;\n"
         "a request's 'timeout' may shorten it; 0 = none)",
         IX_CLI_OPT_F64, &sp.request_timeout_s, 0, 86400, true, NULL},
        {"--served-model-name", NULL, "NAME", "the model's name in the API (default: file name without .gguf)",
         IX_CLI_OPT_STR, &name, 0, 0, false, NULL},
        {"--chat-template", NULL, "NAME|FILE",
         "the chat template: a built-in (chatml, llama3, llama2, phi3,\n"
         "zephyr, mistral-v1, mistral-v3 = mistral, gemma, plain) or a\n"
         "Jinja file (default: the GGUF's tokenizer.chat_template)",
         IX_CLI_OPT_STR, &chat_template, 0, 0, false, NULL},
        {"--max-num-seqs", NULL, "N", "sequences per engine step", IX_CLI_OPT_I32, &ep.sched.max_num_seqs, 1, 4096,
         true, NULL},
        {"--max-num-batched-tokens", NULL, "N",
         "tokens per engine step, a hard cap (prefill is chunked to fit\n"
         "beside the decodes)",
         IX_CLI_OPT_I32, &ep.sched.max_num_batched_tokens, 1, 65536, true, NULL},
        {"--target-step-ms", NULL, "MS",
         "while streams decode, cut each step's prefill so that the step\n"
         "takes about MS ms, from the measured cost of steps: the\n"
         "inter-token latency a prefill may cause (0 = off: the cap alone)",
         IX_CLI_OPT_F64, &ep.sched.target_step_ms, 0, 3600e3, true, NULL},
        {"--kv-cache-mem", NULL, "BYTES", "KV cache pool size, suffix K/M/G allowed", IX_CLI_OPT_SIZE, &ep.kv_mem_bytes,
         1, 1e18, true, NULL},
        {"--kv-disk-dir", NULL, "DIR",
         "keep KV blocks the cache evicts in DIR and read them back for\n"
         "prompts that share their prefix; at exit the cached blocks are\n"
         "written there too, so a restart serves them (default: none)",
         IX_CLI_OPT_STR, &ep.kv_disk_dir, 0, 0, false, NULL},
        {"--kv-disk-max", NULL, "BYTES", "the disk tier's size: LRU past it, suffix K/M/G (0 = unbounded)",
         IX_CLI_OPT_SIZE, &kv_disk_max, 0, 1e18, false, NULL},
        {"--session-ttl", NULL, "SECONDS",
         "how long a request's session_id keeps its KV pinned above\n"
         "anonymous prefixes (a request's session_ttl may say otherwise;\n"
         "default 3600); with --kv-disk-dir sessions survive a restart",
         IX_CLI_OPT_F64, &sp.session_ttl_s, 1, 366 * 86400.0, true, NULL},
        {"--responses-max", NULL, "N",
         "stored responses (/v1/responses store: true) kept, least\n"
         "recently used dropped past it (default 1000); with\n"
         "--kv-disk-dir kept across restarts in DIR/responses.json",
         IX_CLI_OPT_I32, &sp.max_stored_responses, 1, 10000000, true, NULL},
        {"--responses-max-bytes", NULL, "BYTES", "the stored responses' JSON bytes bound (default 64M)",
         IX_CLI_OPT_SIZE, &sp.max_stored_bytes, 1024, 1e12, true, NULL},
        {"--responses-ttl", NULL, "SECONDS", "how long a stored response is kept (default 30 days)", IX_CLI_OPT_F64,
         &sp.stored_response_ttl_s, 1, 3650 * 86400.0, true, NULL},
        {"--kv-cache-dtype", NULL, "TYPE", IX_CLI_KV_DTYPE_HELP, IX_CLI_OPT_FN, &ep.kv_dtype, 0, 0, false,
         ix_cli_set_kv_dtype},
        {"--pack-cache", NULL, "DIR|off", IX_CLI_PACK_CACHE_HELP, IX_CLI_OPT_STR, &pack_cache, 0, 0, false, NULL},
        {"--pack-cache-max", NULL, "BYTES", IX_CLI_PACK_CACHE_MAX_HELP, IX_CLI_OPT_SIZE, &pack_cache_max, 0, 1e18,
         false, NULL},
        {"--policy", NULL, "fcfs|priority|deadline", "scheduling policy (default fcfs)", IX_CLI_OPT_FN,
         &ep.sched.policy, 0, 0, false, set_policy},
        {"--cost-per-hour", NULL, "USD", "price of this machine: report usage.cost_usd per request", IX_CLI_OPT_F64,
         &sp.cost_per_hour_usd, 0, 1e9, false, NULL},
        {"--max-waiting", NULL, "N",
         "sequences that may wait for the engine (each prompt times n);\n"
         "more get 503 with a Retry-After from the drain rate (0 = off)",
         IX_CLI_OPT_I32, &sp.max_waiting, 0, INT32_MAX, true, NULL},
        {"--max-body-bytes", NULL, "N", "larger request bodies get 413", IX_CLI_OPT_SIZE, &sp.max_body_bytes, 1,
         1e18, true, NULL},
        {"--max-connections", NULL, "N",
         "concurrent HTTP connections; more are answered 503 and\n"
         "closed (/health and /ready still answered)",
         IX_CLI_OPT_I32, &sp.max_connections, 1, 65536, true, NULL},
        {"--max-connections-per-ip", NULL, "N", "connections from one address; more are closed at once (0 = off)",
         IX_CLI_OPT_I32, &sp.max_conns_per_ip, 0, 65536, true, NULL},
        {"--header-timeout", NULL, "S", "seconds a request may take to send its headers (then 408)", IX_CLI_OPT_I32,
         &sp.header_timeout_s, 1, 86400, true, NULL},
        {"--body-timeout", NULL, "S", "seconds a request may take to send its body after them", IX_CLI_OPT_I32,
         &sp.body_timeout_s, 1, 86400, true, NULL},
        {"--idle-timeout", NULL, "S", "seconds a kept-alive connection may stay idle", IX_CLI_OPT_I32,
         &sp.conn_timeout_s, 1, 86400, true, NULL},
        {"--tls-cert", NULL, "FILE", "serve HTTPS with this PEM certificate (chain); needs --tls-key", IX_CLI_OPT_STR,
         &sp.tls_cert_file, 0, 0, false, NULL},
        {"--tls-key", NULL, "FILE", "the PEM private key of --tls-cert", IX_CLI_OPT_STR, &sp.tls_key_file, 0, 0, false,
         NULL},
        {"--http-threads", NULL, "N", "HTTP worker threads, a fixed epoll pool", IX_CLI_OPT_I32, &sp.n_http_threads, 1,
         1024, true, NULL},
        {"--shutdown-timeout", NULL, "S", "seconds to let requests finish at SIGINT/SIGTERM", IX_CLI_OPT_U64,
         &shutdown_s, 0, 86400, true, NULL},
        {"--access-log", NULL, "FILE|-|off",
         "one JSON line per request: to FILE (appended), - for stderr\n"
         "(the default), or off",
         IX_CLI_OPT_STR, &access_log, 0, 0, false, NULL},
        {"--cors-allow-origin", NULL, "ORIGINS",
         "let browser pages on other origins call the API: * or a\n"
         "comma-separated list of origins (default: none)",
         IX_CLI_OPT_STR, &sp.cors_allow_origin, 0, 0, false, NULL},
        {"--otlp-endpoint", NULL, "URL",
         "send OpenTelemetry spans of every generation request over\n"
         "OTLP/HTTP to URL (/v1/traces appended unless given; default:\n"
         "$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else\n"
         "$OTEL_EXPORTER_OTLP_ENDPOINT; $OTEL_SERVICE_NAME names it)",
         IX_CLI_OPT_STR, &otlp, 0, 0, false, NULL},
        {"--trace-sample-ratio", NULL, "R",
         "fraction of new traces recorded, 0..1 (a request's traceparent\n"
         "decides for its own trace)",
         IX_CLI_OPT_F64, &sp.trace_sample_ratio, 0, 1, true, NULL},
        {"--ctx", "-c", "N", "context length (default: the model's)", IX_CLI_OPT_I32, &ep.n_ctx, 0, INT32_MAX, false,
         NULL},
        {"--threads", "-t", "N", "kernel threads (default: all cores)", IX_CLI_OPT_I32, &ep.n_threads, 0, 1024, false,
         NULL},
        {"--tp", NULL, "N",
         "tensor parallelism over N processes, started as\n"
         "mpirun -np N inferx serve --tp N ...: rank 0 serves HTTP and runs\n"
         "the engine, every rank holds 1/N of the weights and KV heads\n"
         "(docs/distributed.md); not with --kv-disk-dir or swap preemption",
         IX_CLI_OPT_I32, &dopts.tp, 1, 1024, true, NULL},
        {"--pp", NULL, "N",
         "pipeline parallelism over N stages of contiguous layers, each\n"
         "holding its layers' weights and KV; with --tp, mpirun -np TP*PP\n"
         "... --tp TP --pp PP (rank r: stage r / TP, tensor rank r % TP);\n"
         "not with --kv-disk-dir or swap preemption",
         IX_CLI_OPT_I32, &dopts.pp, 1, 1024, true, NULL},
        {"--micro-batches", NULL, "N", "a pipeline's split of each step (default: one per stage)", IX_CLI_OPT_I32,
         &dopts.micro_batches, 1, 65536, false, NULL},
        IX_CLI_SPEC_OPTS(&ep.spec),
    };
    int prc = ix_cli_parse_opts("serve", opts, IX_ARRAY_LEN(opts), argc, argv);
    if (prc != IX_CLI_OK) {
        if (prc == IX_CLI_HELP) usage(stdout, opts, IX_ARRAY_LEN(opts));
        key_list_free(&keys.list);
        return prc == IX_CLI_HELP ? 0 : 2;
    }
    if (sp.usage_state && !sp.keys_file) {
        fprintf(stderr, "inferx serve: --usage-state keeps the budgets of --keys-file's keys: give --keys-file too\n");
        key_list_free(&keys.list);
        return 2;
    }
    ix_cli_spec_resolve(&ep.spec);

    /* Block the shutdown signals before any thread exists, so that every
     * thread inherits the mask and only sigwait below takes them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if ((dopts.tp > 1 || dopts.pp > 1) &&
        ((ep.kv_disk_dir && *ep.kv_disk_dir) || ep.sched.preempt == IX_PREEMPT_SWAP)) {
        /* both move K/V data inside rank 0's pool only */
        fprintf(stderr, "inferx serve: --tp and --pp do not work with --kv-disk-dir or swap preemption yet "
                        "(recompute preemption, the default, does)\n");
        key_list_free(&keys.list);
        return 2;
    }
    ix_cli_tp tps;
    int rc = ix_cli_tp_join("serve", &dopts, model, ep.n_threads, &tps);
    if (rc >= 0) { /* a usage error, or a rank other than 0 that has served */
        key_list_free(&keys.list);
        return rc;
    }
    rc = 1;
    char *default_name = NULL;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    ix_engine *e = NULL;
    ix_server *srv = NULL;
    FILE *log = NULL;
    if (keys.file && !read_key_file(keys.file, &keys.list)) goto done;
    const char *env_key = getenv("INFERX_API_KEY");
    if (!keys.given && env_key && *env_key) {
        if (!key_ok(env_key, strlen(env_key))) {
            fprintf(stderr, "inferx serve: $INFERX_API_KEY must be printable ASCII without spaces\n");
            goto done;
        }
        if (!key_add(&keys.list, env_key, strlen(env_key))) goto done;
    }
    if (!strcmp(access_log, "-")) {
        log = stderr;
    } else if (strcmp(access_log, "off")) {
        if (!(log = fopen(access_log, "a"))) {
            fprintf(stderr, "inferx serve: cannot open the access log %s: %s\n", access_log, strerror(errno));
            goto done;
        }
    }
    if (!name) {
        const char *base = strrchr(model, '/');
        base = base ? base + 1 : model;
        size_t n = strlen(base);
        if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
        name = default_name = ix_strndup(base, n);
    }
    char *tmpl = NULL;
    if (chat_template && !(tmpl = ix_cli_chat_template("serve", chat_template))) {
        rc = 2;
        goto done;
    }
    sp.api_keys = (const char *const *)keys.list.keys;
    sp.n_api_keys = keys.list.n;
    sp.access_log = log ? write_access_line : NULL;
    sp.access_log_user = log;
    sp.model_name = name;
    sp.n_ctx = ep.n_ctx;
    sp.chat_template = tmpl;
    if (!(otlp_url = otlp_traces_url(otlp))) goto done;
    sp.otlp_traces_url = otlp_url;
    sp.otlp_service_name = getenv("OTEL_SERVICE_NAME");
    /* The port opens first: while the model loads, /health answers and
     * /ready says 503 with the progress (an orchestrator sees a live
     * process, not a refused connection). */
    sp.state_dir = ep.kv_disk_dir; /* stored responses beside the KV blocks */
    ix_status st = ix_server_create(&srv, NULL, &sp, &err);
    ix_free(tmpl);
    if (st != IX_OK) {
        fprintf(stderr, "inferx serve: %s\n", err.msg);
        goto done;
    }
    fprintf(stderr, "inferx serve: loading %s; listening at %s:%u (/ready answers 503 until loaded)\n", model,
            sp.host, (unsigned)ix_server_port(srv));
    uint64_t t_load = ix_time_ns();
    char cache_buf[4096];
    ix_model_load_params lp;
    ix_cli_load_params(&lp, pack_cache, pack_cache_max, cache_buf, sizeof cache_buf);
    lp.progress = on_load_progress;
    lp.progress_user = srv;
    if (ix_cli_tp_load(&tps, model, &lp, &m, &err) != IX_OK) {
        fprintf(stderr, "inferx serve: %s: %s\n", model, err.msg);
        goto done;
    }
    ep.kv_disk_max_bytes = kv_disk_max;
    if (ix_engine_create(&e, m, &ep, &err) != IX_OK) {
        fprintf(stderr, "inferx serve: engine: %s\n", err.msg);
        goto done;
    }
    if (ix_server_attach(srv, e, &err) != IX_OK) {
        fprintf(stderr, "inferx serve: %s\n", err.msg);
        goto done;
    }
    char loaded[64];
    snprintf(loaded, sizeof loaded, "inferx serve: loaded in %.2f s: ", (double)(ix_time_ns() - t_load) / 1e9);
    ix_cli_print_memory(stderr, loaded, e);
    if (keys.list.n)
        fprintf(stderr, "inferx serve: model '%s' (%s) on http://%s:%u (%zu API key%s)\n", name, model, sp.host,
                (unsigned)ix_server_port(srv), keys.list.n, keys.list.n == 1 ? "" : "s");
    else
        fprintf(stderr, "inferx serve: model '%s' (%s) on http://%s:%u\n", name, model, sp.host,
                (unsigned)ix_server_port(srv));
    int sig = 0;
    while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP) on_sighup(log, access_log, srv, sp.keys_file);
    fprintf(stderr, "inferx serve: %s: shutting down (up to %llu s for requests in flight; %s again cancels them)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)shutdown_s, sig == SIGINT ? "SIGINT" : "SIGTERM");
    /* The drain runs on a thread of its own, so that this one still takes
     * signals: a second SIGINT / SIGTERM hurries it, SIGHUP still reopens. */
    drain_job dj = {srv, (int64_t)shutdown_s * 1000, 0};
    pthread_t drainer;
    if (pthread_create(&drainer, NULL, drain_main, &dj) != 0) {
        ix_server_shutdown(srv, (int64_t)shutdown_s * 1000);
    } else {
        bool hurried = false;
        while (!atomic_load(&dj.done)) {
            struct timespec ts = {0, 100 * 1000 * 1000};
            int s2 = sigtimedwait(&sigs, NULL, &ts);
            if (s2 == SIGHUP) {
                on_sighup(log, access_log, srv, sp.keys_file);
            } else if ((s2 == SIGINT || s2 == SIGTERM) && !hurried) {
                fprintf(stderr, "inferx serve: %s again: cancelling the requests in flight now\n",
                        s2 == SIGINT ? "SIGINT" : "SIGTERM");
                ix_server_hurry(srv);
                hurried = true;
            }
        }
        pthread_join(drainer, NULL);
    }
    ix_cli_tp_report(stderr, "serve", &tps);
    fprintf(stderr, "inferx serve: stopped\n");
    rc = 0;
done:
    ix_server_destroy(srv);
    ix_engine_destroy(e);
    ix_cli_tp_end(&tps);
    ix_model_destroy(m);
    if (log && log != stderr) fclose(log);
    key_list_free(&keys.list);
    ix_free(default_name);
    ix_free(otlp_url);
    return rc;
}
