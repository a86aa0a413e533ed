/*
 * inferx bench --serve URL: the serving benchmark, modelled on `vllm bench
 * serve`. N streaming clients against a running OpenAI-compatible server
 * (inferx serve or any other), for each of several concurrency levels C: the
 * level's requests go out with at most C in flight, each a streaming POST
 * /v1/completions of a seeded random English-ish prompt with ignore_eos, so
 * every request generates exactly --max-tokens tokens.
 *
 * One thread drives every connection through a curl multi handle: the bench
 * spends its time waiting on sockets, so on a small machine it does not take
 * the cores the server needs, and no lock guards the per-request state.
 *
 * Per request: TTFT (send to the first SSE chunk with non-empty text), the
 * gaps between successive text chunks, end-to-end latency, and the output
 * tokens of the final usage chunk (stream_options.include_usage). A chunk may
 * carry more than one token (a detokenizer holding back half a UTF-8
 * character, speculative decoding); a request's gaps are then divided by the
 * tokens per gap it averaged, (tokens - 1) / (chunks - 1), so that ITL stays a
 * per-token figure. Failed requests (connection errors, HTTP errors, a stream
 * that is malformed or ends without [DONE]) are counted, the first few
 * reported, and left out of the latency figures.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#define MAX_LEVELS 32
#define MAX_CONCURRENCY 4096
#define MAX_LINE_BYTES ((size_t)16 << 20) /* one SSE line; more is a broken server */
#define MAX_ERRBODY_BYTES 4096            /* kept of an error reply, for its message */
#define MAX_REPORTED_FAILURES 3           /* per level, on stderr */

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: inferx bench --serve URL [--concurrency 1,8,32,64] [--num-prompts N]\n"
        "                    [--prompt-words W] [--max-tokens M] [--model NAME] [--api-key KEY]\n"
        "                    [--seed S] [--timeout S] [--json]\n"
        "\n"
        "Serving benchmark of a running OpenAI-compatible server (like `vllm bench serve`):\n"
        "for each concurrency level C, N streaming POST /v1/completions requests with at most\n"
        "C in flight, each a distinct random W-word prompt generating exactly M tokens\n"
        "(ignore_eos, temperature 0). Reports request and output-token throughput, time to\n"
        "first token, inter-token latency and end-to-end latency, and each level's output\n"
        "tokens/s against the C=1 level of the same run.\n"
        "\n"
        "  --serve URL          the server's base URL, e.g. http://127.0.0.1:8000\n"
        "  --concurrency LIST   comma-separated levels (default 1,8,32,64)\n"
        "  --num-prompts N      requests per level (default: 2 C, at least 4)\n"
        "  --prompt-words W     words per prompt (default 64)\n"
        "  --max-tokens M       tokens generated per request (default 64)\n"
        "  --model NAME         the \"model\" field (default: the first of GET /v1/models)\n"
        "  --api-key KEY        sent as 'Authorization: Bearer KEY' (also $INFERX_API_KEY)\n"
        "  --seed S             prompt RNG seed (default 1)\n"
        "  --timeout S          seconds one request may take, 0 = no limit (default 600)\n"
        "  --json               print one JSON object instead of the table\n"
        "  -h, --help           show this help\n");
}

/* ---- options ----------------------------------------------------------------- */

typedef struct serve_opts {
    const char *url, *model, *api_key;
    uint64_t levels[MAX_LEVELS];
    int n_levels;
    uint64_t num_prompts; /* 0: per level max(4, 2 C) */
    uint64_t prompt_words, max_tokens, seed, timeout_s;
    bool json;
} serve_opts;

/* "1,8,32" into o->levels; false after a usage message. */
static bool parse_levels(const char *s, serve_opts *o) {
    o->n_levels = 0;
    for (const char *p = s;;) {
        size_t n = strcspn(p, ",");
        char item[32];
        if (n == 0 || n >= sizeof item) {
            fprintf(stderr, "inferx bench: bad --concurrency list '%s'\n", s);
            return false;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        uint64_t c;
        if (!ix_cli_parse_u64("--concurrency", item, &c)) return false;
        if (c < 1 || c > MAX_CONCURRENCY) {
            fprintf(stderr, "inferx bench: each --concurrency level must be in [1, %d]\n",
                    MAX_CONCURRENCY);
            return false;
        }
        if (o->n_levels == MAX_LEVELS) {
            fprintf(stderr, "inferx bench: at most %d --concurrency levels\n", MAX_LEVELS);
            return false;
        }
        o->levels[o->n_levels++] = c;
        if (!p[n]) return true;
        p += n + 1;
    }
}

/* Returns 0 on success, -1 after --help, else the exit status. */
static int parse_args(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.prompt_words = 64,
                      .max_tokens = 64,
                      .seed = 1,
                      .timeout_s = 600,
                      .levels = {1, 8, 32, 64},
                      .n_levels = 4,
                      .api_key = getenv("INFERX_API_KEY")};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return -1;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "inferx bench: %s needs a value (see --serve --help)\n", a);
            return 2;
        }
        i++;
        bool ok = true;
        if (!strcmp(a, "--serve")) {
            o->url = v;
        } else if (!strcmp(a, "--concurrency")) {
            ok = parse_levels(v, o);
        } else if (!strcmp(a, "--num-prompts")) {
            ok = ix_cli_parse_u64(a, v, &o->num_prompts);
        } else if (!strcmp(a, "--prompt-words")) {
            ok = ix_cli_parse_u64(a, v, &o->prompt_words);
        } else if (!strcmp(a, "--max-tokens")) {
            ok = ix_cli_parse_u64(a, v, &o->max_tokens);
        } else if (!strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--api-key")) {
            o->api_key = v;
        } else if (!strcmp(a, "--seed")) {
            ok = ix_cli_parse_u64(a, v, &o->seed);
        } else if (!strcmp(a, "--timeout")) {
            ok = ix_cli_parse_u64(a, v, &o->timeout_s);
        } else {
            fprintf(stderr, "inferx bench: unknown option '%s' for --serve (see --serve --help)\n",
                    a);
            return 2;
        }
        if (!ok) return 2;
    }
    const char *bad = NULL;
    if (!o->url || !*o->url)
        bad = "--serve needs the server's URL, e.g. http://127.0.0.1:8000";
    else if (o->num_prompts > 1000000)
        bad = "--num-prompts must be at most 1000000";
    else if (o->prompt_words < 1 || o->prompt_words > 100000)
        bad = "--prompt-words must be in [1, 100000]";
    else if (o->max_tokens < 1 || o->max_tokens > INT32_MAX)
        bad = "--max-tokens must be in [1, 2147483647]";
    else if (o->timeout_s > 86400 * 7)
        bad = "--timeout must be at most 604800 seconds";
    else if (o->model && !*o->model)
        bad = "--model is empty";
    if (bad) {
        fprintf(stderr, "inferx bench: %s\n", bad);
        return 2;
    }
    if (o->api_key && !*o->api_key) o->api_key = NULL;
    return 0;
}

/* The base URL without trailing slashes or "/v1" (either form is accepted),
 * checked by curl's URL parser: http or https, a host, no query or fragment.
 * NULL after a message. The caller frees the result. */
static char *base_url(const char *url) {
    size_t n = strlen(url);
    while (n > 0 && url[n - 1] == '/')
        n--;
    if (n >= 3 && !strncmp(url + n - 3, "/v1", 3)) n -= 3;
    while (n > 0 && url[n - 1] == '/')
        n--;
    char *base = malloc(n + 1);
    if (!base) {
        fprintf(stderr, "inferx bench: out of memory\n");
        return NULL;
    }
    memcpy(base, url, n);
    base[n] = '\0';
    const char *why = NULL;
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *query = NULL, *frag = NULL;
    CURLUcode uc = u ? curl_url_set(u, CURLUPART_URL, base, 0) : CURLUE_OUT_OF_MEMORY;
    if (!strstr(base, "://"))
        why = "it needs the scheme, http:// or https://";
    else if (uc)
        why = curl_url_strerror(uc);
    else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
             (strcmp(scheme, "http") && strcmp(scheme, "https")))
        why = "the scheme must be http:// or https://";
    else if (curl_url_get(u, CURLUPART_HOST, &host, 0) || !*host)
        why = "no host";
    else if (!curl_url_get(u, CURLUPART_QUERY, &query, 0) ||
             !curl_url_get(u, CURLUPART_FRAGMENT, &frag, 0))
        why = "give the base URL, without a query or fragment";
    curl_free(scheme);
    curl_free(host);
    curl_free(query);
    curl_free(frag);
    curl_url_cleanup(u);
    if (why) {
        fprintf(stderr, "inferx bench: bad URL '%s': %s (e.g. http://127.0.0.1:8000)\n", url, why);
        free(base);
        return NULL;
    }
    return base;
}

/* ---- prompts --------------------------------------------------------------- */

/* Common English words: prompts of them tokenize like text (close to one
 * token a word on a Llama vocabulary), unlike random token ids. */
static const char *const k_words[] = {
    "the",     "of",        "and",     "to",        "in",       "is",        "was",
    "that",    "for",       "on",      "with",      "as",       "by",        "at",
    "from",    "his",       "her",     "they",      "we",       "you",       "it",
    "this",    "which",     "or",      "an",        "be",       "are",       "have",
    "had",     "not",       "but",     "what",      "all",      "were",      "when",
    "there",   "can",       "more",    "if",        "no",       "out",       "so",
    "said",    "would",     "about",   "many",      "then",     "them",      "these",
    "some",    "time",      "could",   "people",    "other",    "than",      "first",
    "water",   "been",      "call",    "who",       "now",      "find",      "long",
    "down",    "day",       "did",     "get",       "come",     "made",      "may",
    "part",    "over",      "new",     "sound",     "take",     "only",      "little",
    "work",    "know",      "place",   "year",      "live",     "back",      "give",
    "most",    "very",      "after",   "thing",     "our",      "just",      "name",
    "good",    "sentence",  "man",     "think",     "say",      "great",     "where",
    "help",    "through",   "much",    "before",    "line",     "right",     "too",
    "mean",    "old",       "any",     "same",      "tell",     "boy",       "follow",
    "came",    "want",      "show",    "also",      "around",   "form",      "three",
    "small",   "set",       "put",     "end",       "does",     "another",   "well",
    "large",   "must",      "big",     "even",      "such",     "because",   "turn",
    "here",    "why",       "ask",     "went",      "men",      "read",      "need",
    "land",    "different", "home",    "us",        "move",     "try",       "kind",
    "hand",    "picture",   "again",   "change",    "off",      "play",      "spell",
    "air",     "away",      "animal",  "house",     "point",    "page",      "letter",
    "mother",  "answer",    "found",   "study",     "still",    "learn",     "should",
    "world",   "high",      "every",   "near",      "add",      "food",      "between",
    "own",     "below",     "country", "plant",     "last",     "school",    "father",
    "keep",    "tree",      "never",   "start",     "city",     "earth",     "eye",
    "light",   "thought",   "head",    "under",     "story",    "saw",       "left",
    "few",     "while",     "along",   "might",     "close",    "something", "seem",
    "next",    "hard",      "open",    "example",   "begin",    "life",      "always",
    "those",   "both",      "paper",   "together",  "got",      "group",     "often",
    "run",     "important", "until",   "children",  "side",     "feet",      "car",
    "mile",    "night",     "walk",    "white",     "sea",      "began",     "grow",
    "took",    "river",     "four",    "carry",     "state",    "once",      "book",
    "hear",    "stop",      "without", "second",    "later",    "miss",      "idea",
    "enough",  "eat",       "face",    "watch",     "far",      "really",    "almost",
    "let",     "above",     "girl",    "sometimes", "mountain", "cut",       "young",
    "talk",    "soon",      "list",    "song",      "being",    "leave",     "family",
    "morning",
};

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Prompt number `index` of the run: its words depend on (seed, index) only,
 * and every request of the run has its own index, so no two share a prefix
 * long enough for a prefix cache to skip their prefill. */
static bool make_prompt(ix_buf *out, uint64_t seed, uint64_t index, uint64_t n_words) {
    uint64_t s = seed * 0xd1342543de82ef95ull ^ (index + 1) * 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < n_words; i++) {
        const char *w = k_words[splitmix64(&s) % IX_ARRAY_LEN(k_words)];
        if ((i && ix_buf_append(out, " ", 1) != IX_OK) || ix_buf_append(out, w, strlen(w)) != IX_OK)
            return false;
    }
    return true;
}

/* ---- one streaming request ---------------------------------------------------- */

typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static bool dvec_push(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        double *v = realloc(d->v, cap * sizeof *v);
        if (!v) return false;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = x;
    return true;
}

typedef struct sreq {
    CURL *h;
    char *body; /* the JSON request (jansson's allocation) */
    uint64_t t_send_ns, t_prev_ns, t_end_ns;
    double ttft_ms;                           /* < 0 until the first text chunk */
    dvec gaps_ms;                             /* (n_chunks - 1) gaps between text chunks */
    int64_t n_chunks;                         /* chunks with non-empty text */
    int64_t completion_tokens, prompt_tokens; /* from the usage chunk; -1 if none came */
    long http_status;
    bool got_done, failed;
    ix_buf line, event, errbody;
    char err[320];
    char curl_err[CURL_ERROR_SIZE];
} sreq;

static void req_fail(sreq *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void req_fail(sreq *r, const char *fmt, ...) {
    if (r->failed) return; /* the first cause is the one worth reporting */
    r->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

/* One SSE event's data: a completion chunk, the usage chunk or [DONE]. */
static void on_event(sreq *r, const char *data, size_t len, uint64_t now_ns) {
    if (r->got_done) return;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        r->got_done = true;
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(data, len, 0, &jerr);
    if (!json_is_object(root)) {
        req_fail(r, "malformed stream chunk: %s", root ? "not a JSON object" : jerr.text);
        json_decref(root);
        return;
    }
    json_t *error = json_object_get(root, "error");
    if (error) {
        const char *msg = json_string_value(json_object_get(error, "message"));
        req_fail(r, "error in the stream: %.200s", msg ? msg : "(no message)");
    }
    json_t *u = json_object_get(root, "usage");
    if (json_is_object(u)) {
        json_t *ct = json_object_get(u, "completion_tokens"),
               *pt = json_object_get(u, "prompt_tokens");
        if (json_is_integer(ct) && json_integer_value(ct) >= 0)
            r->completion_tokens = json_integer_value(ct);
        if (json_is_integer(pt) && json_integer_value(pt) >= 0)
            r->prompt_tokens = json_integer_value(pt);
    }
    json_t *choices = json_object_get(root, "choices");
    json_t *text = json_object_get(json_array_get(choices, 0), "text");
    if (json_is_string(text) && json_string_length(text) > 0) {
        double since_ms = (double)(now_ns - (r->n_chunks ? r->t_prev_ns : r->t_send_ns)) * 1e-6;
        if (r->n_chunks == 0)
            r->ttft_ms = since_ms;
        else if (!dvec_push(&r->gaps_ms, since_ms))
            req_fail(r, "out of memory");
        r->t_prev_ns = now_ns;
        r->n_chunks++;
    }
    json_decref(root);
}

/* One line of the event stream (without its newline): data lines build the
 * event, a blank line dispatches it; comments and other fields are skipped. */
static void on_line(sreq *r, const char *line, size_t len, uint64_t now_ns) {
    if (len && line[len - 1] == '\r') len--;
    if (len == 0) {
        if (r->event.len) on_event(r, r->event.data, r->event.len, now_ns);
        ix_buf_clear(&r->event);
        return;
    }
    if (len < 5 || memcmp(line, "data:", 5)) return;
    line += 5;
    len -= 5;
    if (len && *line == ' ') line++, len--;
    if ((r->event.len && ix_buf_append(&r->event, "\n", 1) != IX_OK) ||
        ix_buf_append(&r->event, line, len) != IX_OK)
        req_fail(r, "out of memory");
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *user) {
    sreq *r = user;
    size_t n = size * nmemb;
    uint64_t now = ix_time_ns();
    if (!r->http_status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (r->http_status != 200) { /* an error reply: keep its start for the message */
        size_t room = MAX_ERRBODY_BYTES - r->errbody.len;
        if (ix_buf_append(&r->errbody, p, n < room ? n : room) != IX_OK) return 0;
        return n;
    }
    for (size_t off = 0; off < n && !r->failed;) {
        const char *nl = memchr(p + off, '\n', n - off);
        size_t take = nl ? (size_t)(nl - (p + off)) : n - off;
        if (r->line.len + take > MAX_LINE_BYTES) {
            req_fail(r, "malformed stream: a line longer than %zu bytes", MAX_LINE_BYTES);
            break;
        }
        if (ix_buf_append(&r->line, p + off, take) != IX_OK) {
            req_fail(r, "out of memory");
            break;
        }
        off += take;
        if (!nl) break;
        off++;
        on_line(r, r->line.data ? r->line.data : "", r->line.len, now);
        ix_buf_clear(&r->line);
    }
    return r->failed ? 0 : n; /* 0 ends the transfer */
}

/* "MESSAGE (HINT)" of an error reply: the message of an OpenAI-shaped
 * error, else the reply's start; a hint where the fix is likely one flag. */
static void error_message(long status, const ix_buf *body, char *out, size_t cap) {
    json_t *root = body->len ? json_loadb(body->data, body->len, 0, NULL) : NULL;
    json_t *error = json_object_get(root, "error");
    const char *msg = json_string_value(json_object_get(error, "message"));
    const char *param = json_string_value(json_object_get(error, "param"));
    const char *hint = "";
    if (status == 401 || status == 403)
        hint = " (pass the server's key with --api-key KEY)";
    else if (status == 404 && param && !strcmp(param, "model"))
        hint = " (name a served model with --model NAME)";
    else if (status == 404)
        hint = " (give the server's base URL, e.g. http://127.0.0.1:8000)";
    if (msg)
        snprintf(out, cap, "%.200s%s", msg, hint);
    else if (body->len)
        snprintf(out, cap, "%.*s%s", (int)(body->len < 200 ? body->len : 200), body->data, hint);
    else
        snprintf(out, cap, "(empty reply)%s", hint);
    json_decref(root);
}

/* After the transfer: settles whether the request succeeded. */
static void req_finish(sreq *r, CURLcode rc) {
    r->t_end_ns = ix_time_ns();
    if (!r->http_status) curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (r->failed) return;
    if (rc != CURLE_OK) {
        req_fail(r, "%s", r->curl_err[0] ? r->curl_err : curl_easy_strerror(rc));
        return;
    }
    if (r->http_status != 200) {
        char msg[280];
        error_message(r->http_status, &r->errbody, msg, sizeof msg);
        req_fail(r, "HTTP %ld: %s", r->http_status, msg);
        return;
    }
    if (r->line.len) on_line(r, r->line.data, r->line.len, r->t_end_ns); /* no final newline */
    on_line(r, "", 0, r->t_end_ns);                                      /* nor blank line */
    if (!r->failed && !r->got_done) req_fail(r, "the stream ended without 'data: [DONE]'");
}

/* Output tokens of a finished request: the usage chunk's count, else (a
 * server without include_usage) one per text chunk. */
static int64_t req_tokens(const sreq *r) {
    return r->completion_tokens >= 0 ? r->completion_tokens : r->n_chunks;
}

static void req_free(sreq *r) {
    free(r->body);
    free(r->gaps_ms.v);
    ix_buf_free(&r->line);
    ix_buf_free(&r->event);
    ix_buf_free(&r->errbody);
}

/* ---- the driver ------------------------------------------------------------- */

typedef struct bench_ctx {
    const serve_opts *o;
    CURLM *multi;
    struct curl_slist *headers;
    char *models_url, *completions_url;
    char *model; /* the "model" field, or NULL to leave it out */
} bench_ctx;

/* Settings shared by every request: no proxy (a proxy would be measured
 * too), HTTP/1.1, Nagle off, the --timeout. */
static void common_opts(const bench_ctx *bc, CURL *h, char *errbuf) {
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)bc->o->timeout_s * 1000L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, bc->headers);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
}

static char *make_body(const bench_ctx *bc, uint64_t index) {
    ix_buf prompt = {0};
    char *s = NULL;
    if (make_prompt(&prompt, bc->o->seed, index, bc->o->prompt_words)) {
        json_t *o =
            json_pack("{s:s, s:I, s:b, s:{s:b}, s:b, s:f}", "prompt", prompt.data, "max_tokens",
                      (json_int_t)bc->o->max_tokens, "stream", 1, "stream_options", "include_usage",
                      1, "ignore_eos", 1, "temperature", 0.0);
        if (o && bc->model && json_object_set_new(o, "model", json_string(bc->model))) {
            json_decref(o);
            o = NULL;
        }
        s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
    }
    ix_buf_free(&prompt);
    return s;
}

static bool req_start(bench_ctx *bc, sreq *r) {
    r->h = curl_easy_init();
    if (!r->h) return false;
    r->ttft_ms = -1;
    r->completion_tokens = r->prompt_tokens = -1;
    common_opts(bc, r->h, r->curl_err);
    curl_easy_setopt(r->h, CURLOPT_URL, bc->completions_url);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(r->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(r->body));
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    r->t_send_ns = ix_time_ns();
    if (curl_multi_add_handle(bc->multi, r->h) != CURLM_OK) {
        curl_easy_cleanup(r->h);
        r->h = NULL;
        return false;
    }
    return true;
}

/* Runs reqs[0, n) with at most conc in flight; every request ends finished
 * (failed or not). Returns the wall time in seconds. */
static double run_requests(bench_ctx *bc, sreq *reqs, int n, int conc) {
    int next = 0, in_flight = 0;
    uint64_t t0 = ix_time_ns();
    while (next < n || in_flight > 0) {
        while (in_flight < conc && next < n) {
            sreq *r = &reqs[next++];
            if (req_start(bc, r)) {
                in_flight++;
            } else {
                r->t_send_ns = r->t_end_ns = ix_time_ns();
                req_fail(r, "cannot start a transfer (out of memory)");
            }
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(bc->multi, &running);
        bool finished = false;
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(bc->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL *h = m->easy_handle;
            CURLcode rc = m->data.result; /* m is invalid after the handle is removed */
            char *priv = NULL;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv);
            sreq *r = (sreq *)(void *)priv;
            req_finish(r, rc);
            curl_multi_remove_handle(bc->multi, h);
            curl_easy_cleanup(h);
            r->h = NULL;
            in_flight--;
            finished = true;
        }
        if (mc != CURLM_OK) {
            /* Not expected from a working libcurl; end what is in flight as
             * failed rather than spin. */
            for (int i = 0; i < next; i++) {
                if (!reqs[i].h) continue;
                req_fail(&reqs[i], "curl: %s", curl_multi_strerror(mc));
                reqs[i].t_end_ns = ix_time_ns();
                curl_multi_remove_handle(bc->multi, reqs[i].h);
                curl_easy_cleanup(reqs[i].h);
                reqs[i].h = NULL;
                in_flight--;
            }
            continue;
        }
        if (in_flight > 0 && !(finished && next < n))
            curl_multi_poll(bc->multi, NULL, 0, 100, NULL);
    }
    return (double)(ix_time_ns() - t0) * 1e-9;
}

/* A whole small reply (up to 1 MiB; a longer one fails the transfer). */
static size_t on_reply(char *p, size_t size, size_t nmemb, void *user) {
    ix_buf *b = user;
    size_t n = size * nmemb;
    return b->len + n <= ((size_t)1 << 20) && ix_buf_append(b, p, n) == IX_OK ? n : 0;
}

/* GET /v1/models: checks the server answers (and takes the key), and names
 * the model when --model did not. Returns false after a message. */
static bool preflight(bench_ctx *bc) {
    CURL *h = curl_easy_init();
    ix_buf body = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    if (!h) {
        fprintf(stderr, "inferx bench: out of memory\n");
        return false;
    }
    common_opts(bc, h, errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(h, CURLOPT_URL, bc->models_url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_reply);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    bool ok = false;
    if (rc != CURLE_OK) {
        fprintf(stderr, "inferx bench: cannot reach %s: %s%s\n", bc->models_url,
                errbuf[0] ? errbuf : curl_easy_strerror(rc),
                rc == CURLE_COULDNT_CONNECT ? " (is the server running there?)" : "");
    } else if (status == 200) {
        json_t *root = body.len ? json_loadb(body.data, body.len, 0, NULL) : NULL;
        const char *id = json_string_value(
            json_object_get(json_array_get(json_object_get(root, "data"), 0), "id"));
        if (!bc->model && id) bc->model = strdup(id);
        json_decref(root);
        ok = !id || bc->model;
        if (!ok) fprintf(stderr, "inferx bench: out of memory\n");
    } else if (status == 404) {
        ok = true; /* a server without the route: send no "model" unless told */
    } else {
        char msg[280];
        error_message(status, &body, msg, sizeof msg);
        fprintf(stderr, "inferx bench: GET %s: HTTP %ld: %s\n", bc->models_url, status, msg);
    }
    ix_buf_free(&body);
    return ok;
}

/* ---- figures --------------------------------------------------------------- */

typedef struct stat3 {
    bool have;
    double mean, p50, p99;
} stat3;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between the closest ranks, as numpy.percentile (and
 * so vllm) does. Sorts v. */
static stat3 summarize(double *v, size_t n) {
    stat3 s = {0};
    if (n == 0) return s;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    s.have = true;
    s.mean = sum / (double)n;
    double q[2] = {0.50, 0.99}, *out[2] = {&s.p50, &s.p99};
    for (int k = 0; k < 2; k++) {
        double pos = q[k] * (double)(n - 1);
        size_t lo = (size_t)pos, hi = lo + 1 < n ? lo + 1 : lo;
        *out[k] = v[lo] + (pos - (double)lo) * (v[hi] - v[lo]);
    }
    return s;
}

typedef struct level_result {
    int concurrency, n_requests, completed, failed;
    double duration_s;
    uint64_t out_tokens, in_tokens;
    int n_in_tokens; /* requests that reported prompt_tokens */
    bool usage_missing;
    stat3 ttft, itl, e2e, tpot;
} level_result;

/* The level's figures from its finished requests; false if out of memory. */
static bool collect(sreq *reqs, int n, level_result *lr) {
    size_t n_gaps = 0;
    for (int i = 0; i < n; i++)
        n_gaps += reqs[i].failed ? 0 : reqs[i].gaps_ms.n;
    double *ttft = malloc((size_t)n * sizeof *ttft), *e2e = malloc((size_t)n * sizeof *e2e);
    double *tpot = malloc((size_t)n * sizeof *tpot),
           *itl = malloc((n_gaps ? n_gaps : 1) * sizeof *itl);
    bool ok = ttft && e2e && tpot && itl;
    size_t n_ttft = 0, n_e2e = 0, n_tpot = 0, n_itl = 0;
    for (int i = 0; ok && i < n; i++) {
        const sreq *r = &reqs[i];
        if (r->failed) {
            lr->failed++;
            continue;
        }
        lr->completed++;
        int64_t tokens = req_tokens(r);
        lr->out_tokens += (uint64_t)tokens;
        if (r->completion_tokens < 0) lr->usage_missing = true;
        if (r->prompt_tokens >= 0) lr->in_tokens += (uint64_t)r->prompt_tokens, lr->n_in_tokens++;
        double e2e_ms = (double)(r->t_end_ns - r->t_send_ns) * 1e-6;
        e2e[n_e2e++] = e2e_ms;
        if (r->ttft_ms >= 0) ttft[n_ttft++] = r->ttft_ms;
        if (r->ttft_ms >= 0 && tokens > 1)
            tpot[n_tpot++] = (e2e_ms - r->ttft_ms) / (double)(tokens - 1);
        /* Chunks that carried several tokens: gaps per token (file comment). */
        double per = 1;
        if (r->n_chunks > 1 && tokens > r->n_chunks)
            per = (double)(tokens - 1) / (double)(r->n_chunks - 1);
        for (size_t g = 0; g < r->gaps_ms.n; g++)
            itl[n_itl++] = r->gaps_ms.v[g] / per;
    }
    if (ok) {
        lr->ttft = summarize(ttft, n_ttft);
        lr->e2e = summarize(e2e, n_e2e);
        lr->tpot = summarize(tpot, n_tpot);
        lr->itl = summarize(itl, n_itl);
    }
    free(ttft);
    free(e2e);
    free(tpot);
    free(itl);
    return ok;
}

static double per_s(double x, double s) {
    return s > 0 ? x / s : 0;
}

/* Runs one level: n requests, at most conc in flight, prompts numbered from
 * first_index. Returns false on an error that ends the benchmark. */
static bool run_level(bench_ctx *bc, int conc, int n, uint64_t first_index, level_result *lr) {
    *lr = (level_result){.concurrency = conc, .n_requests = n};
    sreq *reqs = calloc((size_t)n, sizeof *reqs);
    bool ok = reqs != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = (reqs[i].body = make_body(bc, first_index + (uint64_t)i)) != NULL;
    if (!ok) {
        fprintf(stderr, "inferx bench: out of memory\n");
    } else {
        if (!bc->o->json)
            fprintf(stderr, "inferx bench: concurrency %d: %d requests...\n", conc, n);
        lr->duration_s = run_requests(bc, reqs, n, conc);
        if (!(ok = collect(reqs, n, lr))) fprintf(stderr, "inferx bench: out of memory\n");
        int shown = 0;
        for (int i = 0; i < n; i++) {
            if (!reqs[i].failed) continue;
            if (shown++ < MAX_REPORTED_FAILURES)
                fprintf(stderr, "inferx bench: concurrency %d: request %d failed: %s\n", conc, i,
                        reqs[i].err);
        }
        if (shown > MAX_REPORTED_FAILURES)
            fprintf(stderr, "inferx bench: concurrency %d: %d more failed\n", conc,
                    shown - MAX_REPORTED_FAILURES);
    }
    for (int i = 0; reqs && i < n; i++)
        req_free(&reqs[i]);
    free(reqs);
    return ok;
}

/* One request before the levels: faults the server's weights in, and turns
 * a server that cannot serve the benchmark's request into one clear error
 * rather than a table of failures. */
static bool warm_up(bench_ctx *bc) {
    sreq r = {0};
    if (!(r.body = make_body(bc, 0))) {
        fprintf(stderr, "inferx bench: out of memory\n");
        return false;
    }
    run_requests(bc, &r, 1, 1);
    if (r.failed)
        fprintf(stderr, "inferx bench: the warm-up request to %s failed: %s\n", bc->completions_url,
                r.err);
    bool ok = !r.failed;
    req_free(&r);
    return ok;
}

/* ---- output ------------------------------------------------------------------ */

static void fmt_ms(char *buf, size_t n, const stat3 *s, double v) {
    if (s->have)
        snprintf(buf, n, "%.1f", v);
    else
        snprintf(buf, n, "-");
}

static void print_table(const bench_ctx *bc, const level_result *lr, int n_levels,
                        const level_result *base) {
    const serve_opts *o = bc->o;
    printf("server %s, model %s, %llu-word prompts, %llu output tokens each (ignore_eos, "
           "temperature 0)\n\n",
           bc->completions_url, bc->model ? bc->model : "(not named)",
           (unsigned long long)o->prompt_words, (unsigned long long)o->max_tokens);
    printf("| concurrency | ok | failed | duration s | req/s | out tok/s | TTFT mean ms | TTFT p50 "
           "| TTFT p99 "
           "| ITL mean ms | ITL p50 | ITL p99 | e2e p50 ms |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_levels; i++) {
        const level_result *l = &lr[i];
        char c[9][32];
        fmt_ms(c[0], sizeof c[0], &l->ttft, l->ttft.mean);
        fmt_ms(c[1], sizeof c[1], &l->ttft, l->ttft.p50);
        fmt_ms(c[2], sizeof c[2], &l->ttft, l->ttft.p99);
        fmt_ms(c[3], sizeof c[3], &l->itl, l->itl.mean);
        fmt_ms(c[4], sizeof c[4], &l->itl, l->itl.p50);
        fmt_ms(c[5], sizeof c[5], &l->itl, l->itl.p99);
        fmt_ms(c[6], sizeof c[6], &l->e2e, l->e2e.p50);
        printf("| %d | %d | %d | %.2f | %.3f | %.1f | %s | %s | %s | %s | %s | %s | %s |\n",
               l->concurrency, l->completed, l->failed, l->duration_s,
               per_s(l->completed, l->duration_s), per_s((double)l->out_tokens, l->duration_s),
               c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
    }
    uint64_t in = 0;
    int n_in = 0;
    for (int i = 0; i < n_levels; i++)
        in += lr[i].in_tokens, n_in += lr[i].n_in_tokens;
    if (n_in)
        printf("\nprompts: %.1f tokens on average (usage.prompt_tokens)\n", (double)in / n_in);
    for (int i = 0; i < n_levels; i++)
        if (lr[i].usage_missing)
            printf("concurrency %d: the server sent no usage chunk; output tokens counted as text "
                   "chunks\n",
                   lr[i].concurrency);
    double base_tps = base ? per_s((double)base->out_tokens, base->duration_s) : 0;
    if (base_tps > 0) {
        printf("output tok/s against concurrency 1 in this run:");
        for (int i = 0; i < n_levels; i++)
            printf("%s C=%d %.2fx", i ? "," : "", lr[i].concurrency,
                   per_s((double)lr[i].out_tokens, lr[i].duration_s) / base_tps);
        printf("\n");
    }
}

static json_t *num_or_null(bool have, double v) {
    return have && isfinite(v) ? json_real(v) : json_null();
}

static void set_stat(json_t *o, const char *prefix, const stat3 *s) {
    char key[64];
    const char *suffix[3] = {"mean", "p50", "p99"};
    double v[3] = {s->mean, s->p50, s->p99};
    for (int k = 0; k < 3; k++) {
        snprintf(key, sizeof key, "%s_%s", prefix, suffix[k]);
        json_object_set_new(o, key, num_or_null(s->have, v[k]));
    }
}

static bool print_json(const bench_ctx *bc, const level_result *lr, int n_levels,
                       const level_result *base) {
    const serve_opts *o = bc->o;
    double base_tps = base ? per_s((double)base->out_tokens, base->duration_s) : 0;
    json_t *levels = json_array();
    json_t *root = json_pack("{s:s, s:o, s:I, s:I, s:I, s:o}", "url", bc->completions_url, "model",
                             bc->model ? json_string(bc->model) : json_null(), "prompt_words",
                             (json_int_t)o->prompt_words, "max_tokens", (json_int_t)o->max_tokens,
                             "seed", (json_int_t)o->seed, "levels", levels);
    for (int i = 0; root && i < n_levels; i++) {
        const level_result *l = &lr[i];
        double tps = per_s((double)l->out_tokens, l->duration_s);
        json_t *j = json_pack(
            "{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:I, s:o, s:b}", "concurrency",
            l->concurrency, "num_prompts", l->n_requests, "completed", l->completed, "failed",
            l->failed, "duration_s", l->duration_s, "request_throughput",
            per_s(l->completed, l->duration_s), "output_tokens_per_s", tps, "total_tokens_per_s",
            per_s((double)(l->out_tokens + l->in_tokens), l->duration_s), "output_tokens",
            (json_int_t)l->out_tokens, "mean_prompt_tokens",
            num_or_null(l->n_in_tokens > 0,
                        (double)l->in_tokens / (l->n_in_tokens ? l->n_in_tokens : 1)),
            "usage_reported", !l->usage_missing);
        if (!j) break;
        set_stat(j, "ttft_ms", &l->ttft);
        set_stat(j, "itl_ms", &l->itl);
        set_stat(j, "tpot_ms", &l->tpot);
        set_stat(j, "e2e_ms", &l->e2e);
        json_object_set_new(j, "output_tokens_per_s_vs_c1",
                            num_or_null(base_tps > 0, tps / base_tps));
        json_array_append_new(levels, j);
    }
    char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(root);
    if (!s) {
        fprintf(stderr, "inferx bench: out of memory\n");
        return false;
    }
    printf("%s\n", s);
    free(s);
    return true;
}

/* ---- entry ---------------------------------------------------------------------- */

static char *concat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (s) {
        memcpy(s, a, na);
        memcpy(s + na, b, nb + 1);
    }
    return s;
}

int ix_cli_bench_serve(int argc, char **argv) {
    serve_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    if (o.model) {
        json_t *t = json_string(o.model);
        json_decref(t);
        if (!t) {
            fprintf(stderr, "inferx bench: --model is not valid UTF-8\n");
            return 2;
        }
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "inferx bench: cannot initialise libcurl\n");
        return 1;
    }
    int rc = 1;
    bench_ctx bc = {.o = &o};
    level_result lr[MAX_LEVELS];
    char *base = base_url(o.url), *auth = NULL;
    if (!base) {
        rc = 2;
        goto done;
    }
    if (o.api_key) auth = concat("Authorization: Bearer ", o.api_key);
    bc.models_url = concat(base, "/v1/models");
    bc.completions_url = concat(base, "/v1/completions");
    bc.model = o.model ? strdup(o.model) : NULL;
    bc.multi = curl_multi_init();
    struct curl_slist *h = NULL;
    const char *hdr[] = {"Content-Type: application/json", "Accept: text/event-stream",
                         "Expect:", auth};
    bool ok = bc.models_url && bc.completions_url && bc.multi && (!o.model || bc.model) &&
              (!o.api_key || auth);
    for (size_t i = 0; ok && i < IX_ARRAY_LEN(hdr) && hdr[i]; i++) {
        ok = (h = curl_slist_append(bc.headers, hdr[i])) != NULL;
        if (ok) bc.headers = h;
    }
    if (!ok) {
        fprintf(stderr, "inferx bench: out of memory\n");
        goto done;
    }
    uint64_t max_conc = 1;
    for (int i = 0; i < o.n_levels; i++)
        max_conc = o.levels[i] > max_conc ? o.levels[i] : max_conc;
    /* Keep every connection of the busiest level alive for the next. */
    curl_multi_setopt(bc.multi, CURLMOPT_MAXCONNECTS, (long)max_conc + 4);

    if (!preflight(&bc) || !warm_up(&bc)) goto done;
    uint64_t next_index = 1; /* 0 was the warm-up's prompt */
    const level_result *c1 = NULL;
    bool all_measured = true;
    for (int i = 0; i < o.n_levels; i++) {
        int conc = (int)o.levels[i];
        int n = o.num_prompts ? (int)o.num_prompts : conc * 2 > 4 ? conc * 2 : 4;
        if (!run_level(&bc, conc, n, next_index, &lr[i])) goto done;
        next_index += (uint64_t)n;
        if (conc == 1 && !c1 && lr[i].completed > 0) c1 = &lr[i];
        if (lr[i].completed == 0) all_measured = false;
    }
    if (o.json) {
        if (!print_json(&bc, lr, o.n_levels, c1)) goto done;
    } else {
        print_table(&bc, lr, o.n_levels, c1);
    }
    if (!all_measured) fprintf(stderr, "inferx bench: every request of some level failed\n");
    rc = all_measured ? 0 : 1;
done:
    curl_multi_cleanup(bc.multi);
    curl_slist_free_all(bc.headers);
    free(bc.models_url);
    free(bc.completions_url);
    free(bc.model);
    free(auth);
    free(base);
    curl_global_cleanup();
    return rc;
}
