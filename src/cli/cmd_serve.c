/* inferx serve: the OpenAI-compatible HTTP server (include/inferx/server.h)
 * over one engine. SIGINT / SIGTERM shut it down gracefully: stop accepting,
 * let requests in flight finish for --shutdown-timeout seconds, cancel the
 * rest, exit 0. The signals are blocked in every thread and taken with
 * sigwait on the main thread, so no handler runs in async-signal context.
 * API keys come from --api-key (repeatable), --api-key-file (one per line)
 * or $INFERX_API_KEY; the JSON access log goes to stderr, a file or nowhere. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/engine.h"
#include "inferx/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: inferx serve [-m MODEL.gguf] [options]\n"
            "\n"
            "Serves the model over an OpenAI-compatible HTTP API (docs/server.md):\n"
            "/v1/chat/completions, /v1/completions, /v1/models, /tokenize, /detokenize,\n"
            "/health, /ready, /metrics, and a chat page for browsers at /.\n"
            "\n"
            "  -m, --model FILE             GGUF model (default: the bundled model, %s)\n"
            "  --host ADDR                  numeric address to bind (default 127.0.0.1)\n"
            "  --port N                     TCP port (default 8000; 0 = any free port)\n"
            "  --api-key KEY                require 'Authorization: Bearer KEY'; repeat it for more keys,\n"
            "                               each its own tenant of the prefix cache (default: $INFERX_API_KEY)\n"
            "  --api-key-file FILE          read keys from FILE, one per line ('#' comments and blank\n"
            "                               lines skipped); adds to --api-key\n"
            "  --served-model-name NAME     the model's name in the API (default: file name without .gguf)\n"
            "  --chat-template NAME|FILE    the chat template: a built-in (chatml, llama3, llama2, phi3,\n"
            "                               zephyr, mistral-v1, mistral-v3 = mistral, gemma, plain) or a\n"
            "                               Jinja file (default: the GGUF's tokenizer.chat_template)\n"
            "  --max-num-seqs N             sequences per engine step (default 64)\n"
            "  --max-num-batched-tokens N   tokens per engine step (default 512)\n"
            "  --kv-cache-mem BYTES         KV cache pool size, suffix K/M/G allowed (default 256M)\n"
            "  --policy fcfs|priority|deadline  scheduling policy (default fcfs)\n"
            "  --cost-per-hour USD          price of this machine: report usage.cost_usd per request\n"
            "  --max-waiting N              answer 503 when N requests wait already (default 256, 0 = off)\n"
            "  --max-body-bytes N           larger request bodies get 413 (default 8388608)\n"
            "  --max-connections N          concurrent HTTP connections (default 256; split\n"
            "                               evenly over the HTTP threads)\n"
            "  --http-threads N             HTTP worker threads, a fixed epoll pool (default 4)\n"
            "  --shutdown-timeout S         seconds to let requests finish at SIGINT/SIGTERM (default 30)\n"
            "  --access-log FILE|-|off      one JSON line per request: to FILE (appended), - for stderr\n"
            "                               (the default), or off\n"
            "  --cors-allow-origin ORIGINS  let browser pages on other origins call the API: * or a\n"
            "                               comma-separated list of origins (default: none)\n"
            "  -c, --ctx N                  context length (default: the model's)\n"
            "  -t, --threads N              kernel threads (default: all cores)\n"
            "  -h, --help                   show this help\n",
            ix_cli_default_model());
}

static bool parse_bytes(const char *opt, const char *s, uint64_t *out) {
    char num[32];
    size_t n = s ? strlen(s) : 0;
    uint64_t mul = 1;
    if (n > 0 && n < sizeof num) {
        char last = s[n - 1];
        if (last == 'K' || last == 'k') mul = 1ull << 10;
        if (last == 'M' || last == 'm') mul = 1ull << 20;
        if (last == 'G' || last == 'g') mul = 1ull << 30;
    }
    if (n == 0 || n >= sizeof num) return ix_cli_parse_u64(opt, s, out);
    memcpy(num, s, n + 1);
    if (mul > 1) num[n - 1] = '\0';
    uint64_t v;
    if (!ix_cli_parse_u64(opt, num, &v)) return false;
    if (ix_mul_overflow_u64(v, mul, out)) {
        fprintf(stderr, "inferx serve: %s value too large\n", opt);
        return false;
    }
    return true;
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

int ix_cli_serve(int argc, char **argv) {
    const char *model = NULL, *key_file = NULL, *name = NULL, *access_log = "-", *chat_template = NULL;
    key_list keys = {0};
    bool keys_given = false;
    ix_server_params sp = ix_server_default_params();
    ix_engine_params ep = ix_engine_default_params();
    uint64_t shutdown_s = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "inferx serve: %s needs a value (see --help)\n", a);
            key_list_free(&keys);
            return 2;
        }
        i++;
        bool ok = true;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "--host")) {
            sp.host = v;
        } else if (!strcmp(a, "--port")) {
            ok = ix_cli_parse_u64(a, v, &u) && u <= 65535;
            sp.port = (uint16_t)u;
        } else if (!strcmp(a, "--api-key")) {
            keys_given = true;
            ok = key_ok(v, strlen(v));
            if (ok && !key_add(&keys, v, strlen(v))) {
                fprintf(stderr, "inferx serve: out of memory\n");
                key_list_free(&keys);
                return 1;
            }
        } else if (!strcmp(a, "--api-key-file")) {
            key_file = v;
            keys_given = true;
        } else if (!strcmp(a, "--access-log")) {
            access_log = v;
        } else if (!strcmp(a, "--cors-allow-origin")) {
            sp.cors_allow_origin = v;
        } else if (!strcmp(a, "--served-model-name")) {
            name = v;
        } else if (!strcmp(a, "--chat-template")) {
            chat_template = v;
        } else if (!strcmp(a, "--max-num-seqs")) {
            ok = ix_cli_parse_u64(a, v, &u) && u >= 1 && u <= 4096;
            ep.sched.max_num_seqs = (int32_t)u;
        } else if (!strcmp(a, "--max-num-batched-tokens")) {
            ok = ix_cli_parse_u64(a, v, &u) && u >= 1 && u <= 1 << 20;
            ep.sched.max_num_batched_tokens = (int32_t)u;
        } else if (!strcmp(a, "--kv-cache-mem")) {
            ok = parse_bytes(a, v, &u) && u > 0;
            ep.kv_mem_bytes = (size_t)u;
        } else if (!strcmp(a, "--policy")) {
            if (!strcmp(v, "fcfs"))
                ep.sched.policy = IX_SCHED_FCFS;
            else if (!strcmp(v, "priority"))
                ep.sched.policy = IX_SCHED_PRIORITY;
            else if (!strcmp(v, "deadline"))
                ep.sched.policy = IX_SCHED_DEADLINE;
            else
                ok = false;
        } else if (!strcmp(a, "--cost-per-hour")) {
            char *end;
            sp.cost_per_hour_usd = strtod(v, &end);
            ok = end != v && !*end && sp.cost_per_hour_usd >= 0;
        } else if (!strcmp(a, "--max-waiting")) {
            ok = ix_cli_parse_u64(a, v, &u) && u <= INT32_MAX;
            sp.max_waiting = (int32_t)u;
        } else if (!strcmp(a, "--max-body-bytes")) {
            ok = parse_bytes(a, v, &u) && u > 0;
            sp.max_body_bytes = (size_t)u;
        } else if (!strcmp(a, "--max-connections")) {
            ok = ix_cli_parse_u64(a, v, &u) && u >= 1 && u <= 65536;
            sp.max_connections = (int32_t)u;
        } else if (!strcmp(a, "--http-threads")) {
            ok = ix_cli_parse_u64(a, v, &u) && u >= 1 && u <= 1024;
            sp.n_http_threads = (int32_t)u;
        } else if (!strcmp(a, "--shutdown-timeout")) {
            ok = ix_cli_parse_u64(a, v, &shutdown_s) && shutdown_s <= 86400;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            ok = ix_cli_parse_u64(a, v, &u) && u <= INT32_MAX;
            ep.n_ctx = (int32_t)u;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            ok = ix_cli_parse_u64(a, v, &u) && u <= 1024;
            ep.n_threads = (int32_t)u;
        } else {
            fprintf(stderr, "inferx serve: unknown option '%s' (see --help)\n", a);
            key_list_free(&keys);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "inferx serve: bad value '%s' for %s (see --help)\n", v, a);
            key_list_free(&keys);
            return 2;
        }
    }
    if (!model) model = ix_cli_default_model();

    /* Block the shutdown signals before any thread exists, so that every
     * thread inherits the mask and only sigwait below takes them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    char *default_name = NULL;
    ix_errbuf err = {{0}};
    ix_model *m = NULL;
    ix_engine *e = NULL;
    ix_server *srv = NULL;
    FILE *log = NULL;
    char *tmpl = NULL;
    if (key_file && !read_key_file(key_file, &keys)) goto done;
    if (chat_template && !(tmpl = ix_cli_chat_template("serve", chat_template))) {
        rc = 2;
        goto done;
    }
    const char *env_key = getenv("INFERX_API_KEY");
    if (!keys_given && env_key && *env_key) {
        if (!key_ok(env_key, strlen(env_key))) {
            fprintf(stderr, "inferx serve: $INFERX_API_KEY must be printable ASCII without spaces\n");
            goto done;
        }
        if (!key_add(&keys, env_key, strlen(env_key))) goto done;
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
    if (ix_model_load(&m, model, &err) != IX_OK) {
        fprintf(stderr, "inferx serve: %s: %s\n", model, err.msg);
        goto done;
    }
    if (ix_engine_create(&e, m, &ep, &err) != IX_OK) {
        fprintf(stderr, "inferx serve: engine: %s\n", err.msg);
        goto done;
    }
    sp.api_keys = (const char *const *)keys.keys;
    sp.n_api_keys = keys.n;
    sp.access_log = log ? write_access_line : NULL;
    sp.access_log_user = log;
    sp.model_name = name;
    sp.n_ctx = ep.n_ctx;
    sp.chat_template = tmpl;
    if (ix_server_create(&srv, e, &sp, &err) != IX_OK) {
        fprintf(stderr, "inferx serve: %s\n", err.msg);
        goto done;
    }
    if (keys.n)
        fprintf(stderr, "inferx serve: model '%s' (%s) on http://%s:%u (%zu API key%s)\n", name, model, sp.host,
                (unsigned)ix_server_port(srv), keys.n, keys.n == 1 ? "" : "s");
    else
        fprintf(stderr, "inferx serve: model '%s' (%s) on http://%s:%u\n", name, model, sp.host,
                (unsigned)ix_server_port(srv));
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "inferx serve: %s: shutting down (up to %llu s for requests in flight)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", (unsigned long long)shutdown_s);
    ix_server_shutdown(srv, (int64_t)shutdown_s * 1000);
    rc = 0;
done:
    ix_server_destroy(srv);
    ix_engine_destroy(e);
    ix_model_destroy(m);
    if (log && log != stderr) fclose(log);
    key_list_free(&keys);
    ix_free(default_name);
    ix_free(tmpl);
    return rc;
}
