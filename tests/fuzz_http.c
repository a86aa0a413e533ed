/* libFuzzer targets for the HTTP front and the request parsers: one
 * in-process server (the bundled model, a 128-token context) on 127.0.0.1,
 * each input sent over a new TCP connection.
 *
 *   fuzz_http (IX_FUZZ_RAW): the input is the bytes a client sends, any
 *     bytes; the write side is then shut (HTTP allows a client to), and the
 *     answer read to the end.
 *   fuzz_request: the first byte picks an endpoint (the OpenAI routes,
 *     Ollama's, tokenize), the rest is the JSON body of a well-formed POST.
 *
 * Promises checked: every connection is answered or closed within
 * IX_FUZZ_DEADLINE_S (a hang aborts); what comes back starts with an HTTP
 * status line; a request-mode answer is never a 5xx other than 503; an
 * error answer carries an "error". The server, engine and model are
 * destroyed at exit, so the corpus replay's LeakSanitizer run sees any leak.
 * Linked into test_http_corpus / test_request_corpus (tests/corpus/http,
 * tests/corpus/request). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "inferx/core.h"
#include "inferx/engine.h"
#include "inferx/model.h"
#include "inferx/server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define IX_FUZZ_DEADLINE_S 120

static ix_model *g_model;
static ix_engine *g_engine;
static ix_server *g_server;
static uint16_t g_port;

static void stop_server(void) {
    ix_server_destroy(g_server);
    ix_engine_destroy(g_engine);
    ix_model_destroy(g_model);
}

static void start_server(void) {
    ix_errbuf err = {{0}};
    signal(SIGPIPE, SIG_IGN);
    ix_log_set_level(IX_LOG_ERROR);
    if (ix_model_load(&g_model, IX_SOURCE_DIR "/models/target-f16.gguf", &err) != IX_OK) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        abort();
    }
    ix_engine_params ep = ix_engine_default_params();
    ep.n_ctx = 128; /* bounds what one input may generate (no max_tokens: to the context) */
    ep.n_threads = 1;
    ep.kv_mem_bytes = 16u << 20;
    if (ix_engine_create(&g_engine, g_model, &ep, &err) != IX_OK) {
        fprintf(stderr, "fuzz_http: engine: %s\n", err.msg);
        abort();
    }
    ix_server_params sp = ix_server_default_params();
    sp.port = 0;
    sp.n_http_threads = 2;
    sp.conn_timeout_s = 10;
    sp.max_body_bytes = 1u << 20;
    sp.model_name = "fuzz";
    if (ix_server_create(&g_server, g_engine, &sp, &err) != IX_OK) {
        fprintf(stderr, "fuzz_http: server: %s\n", err.msg);
        abort();
    }
    g_port = ix_server_port(g_server);
    atexit(stop_server);
}

static double now_s(void) { return (double)ix_time_ns() / 1e9; }

static bool header_has(const char *h, size_t n, const char *name, const char *value) {
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl < n; i++) {
        if ((i == 0 || h[i - 1] == '\n') && !strncasecmp(h + i, name, nl) && h[i + nl] == ':') {
            size_t e = i + nl + 1;
            while (e < n && h[e] != '\r') e++;
            for (size_t k = i + nl + 1; value && k + strlen(value) <= e; k++)
                if (!strncasecmp(h + k, value, strlen(value))) return true;
            return !value;
        }
    }
    return false;
}

/* Where the response starting at buf[pos] ends, if it is complete; 0 if not
 * (yet). *close: it ends the connection (Connection: close, or no framing:
 * read to the end). */
static size_t response_end(const char *buf, size_t len, size_t pos, bool *close) {
    const char *h = buf + pos, *e = memmem(h, len - pos, "\r\n\r\n", 4);
    if (!e) return 0;
    size_t hn = (size_t)(e - h), body = pos + hn + 4;
    int st = len - pos >= 12 ? atoi(h + 9) : 0;
    *close = header_has(h, hn, "Connection", "close") || !memcmp(h, "HTTP/1.0", 8);
    if (st / 100 == 1 || st == 204 || st == 304) return body;
    if (header_has(h, hn, "Transfer-Encoding", "chunked")) {
        size_t at = body;
        for (;;) { /* size line, data, CRLF; "0" CRLF CRLF ends it (no trailers here) */
            const char *nl = memmem(buf + at, len - at, "\r\n", 2);
            if (!nl) return 0;
            size_t sz = strtoul(buf + at, NULL, 16);
            at = (size_t)(nl - buf) + 2;
            if (sz == 0) return len - at >= 2 ? at + 2 : 0;
            if (len - at < sz + 2) return 0;
            at += sz + 2;
        }
    }
    const char *cl = NULL;
    for (size_t i = 0; i + 15 < hn; i++)
        if ((i == 0 || h[i - 1] == '\n') && !strncasecmp(h + i, "Content-Length:", 15)) cl = h + i + 15;
    if (!cl) {
        *close = true; /* no framing: the body runs to the end */
        return 0;
    }
    size_t n = strtoul(cl, NULL, 10);
    return len - body >= n ? body + n : 0;
}

/* Sends req, shuts the write side when asked, reads the answers: until the
 * server closes, or until complete responses were followed by 200 ms of
 * silence on a connection kept alive; aborts past the deadline. Returns the
 * bytes read (malloc). */
static char *exchange(const uint8_t *req, size_t n, bool shut_write, size_t *got) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) abort();
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    if (rc != 0 && errno == EINTR) { /* a signal (libFuzzer's watchdog): the connect goes on; wait for it */
        struct pollfd pw = {fd, POLLOUT, 0};
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        while ((rc = poll(&pw, 1, 10000)) < 0 && errno == EINTR) {
        }
        rc = rc == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) && soerr == 0 ? 0 : -1;
        if (soerr) errno = soerr;
    }
    if (rc != 0) {
        fprintf(stderr, "fuzz_http: connect: %s\n", strerror(errno));
        abort();
    }
    double deadline = now_s() + IX_FUZZ_DEADLINE_S;
    size_t off = 0;
    while (off < n) { /* the server may answer (413, 400) and close before all is sent */
        ssize_t w = send(fd, req + off, n - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    if (shut_write) shutdown(fd, SHUT_WR);
    size_t cap = 4096, len = 0, pos = 0;
    int answered = 0;
    bool closing = false;
    char *buf = malloc(cap + 1);
    if (!buf) abort();
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) {
            fprintf(stderr, "fuzz_http: no end of the answer within %d s (%zu bytes so far)\n", IX_FUZZ_DEADLINE_S, len);
            abort();
        }
        bool idle_ok = answered > 0 && pos == len && !closing;
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, idle_ok ? 200 : (int)(left * 1000) + 1);
        if (pr == 0 && idle_ok) break; /* every answer complete; the connection idles */
        if (pr <= 0) continue;
        if (len == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) abort();
            buf = nb;
        }
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r <= 0) break; /* closed (or reset after an early answer) */
        len += (size_t)r;
        size_t end;
        bool close = false;
        while (!closing && pos < len && (end = response_end(buf, len, pos, &close)) > 0) {
            pos = end;
            answered++;
            closing = close;
        }
        if (close) closing = true;
    }
    close(fd);
    buf[len] = '\0';
    *got = len;
    return buf;
}

static int status_of(const char *ans, size_t len) {
    if (len < 12 || memcmp(ans, "HTTP/1.", 7) != 0 || ans[8] != ' ') return -1;
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (ans[i] < '0' || ans[i] > '9') return -1;
        st = st * 10 + (ans[i] - '0');
    }
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_server) start_server();
    if (size > (2u << 20)) return 0;
    size_t len = 0;
#ifdef IX_FUZZ_RAW
    char *ans = exchange(data, size, true, &len);
    if (len && status_of(ans, len) < 0) {
        fprintf(stderr, "fuzz_http: an answer without a status line: %.80s\n", ans);
        abort();
    }
#else
    static const char *const routes[] = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings",
                                         "/api/chat", "/api/generate", "/tokenize", "/detokenize"};
    if (size < 1) return 0;
    const char *path = routes[data[0] % (sizeof routes / sizeof *routes)];
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      path, size - 1);
    uint8_t *req = malloc((size_t)hn + size);
    if (!req) abort();
    memcpy(req, head, (size_t)hn);
    memcpy(req + hn, data + 1, size - 1);
    char *ans = exchange(req, (size_t)hn + size - 1, false, &len);
    free(req);
    int st = status_of(ans, len);
    if (st < 0) {
        fprintf(stderr, "fuzz_request: %s: no well-formed answer (%zu bytes): %.80s\n", path, len, ans);
        abort();
    }
    if (st >= 500 && st != 503) {
        fprintf(stderr, "fuzz_request: %s: status %d: %.300s\n", path, st, ans);
        abort();
    }
    if (st >= 400 && !strstr(ans, "\"error\"")) {
        fprintf(stderr, "fuzz_request: %s: status %d without an error body: %.300s\n", path, st, ans);
        abort();
    }
#endif
    free(ans);
    return 0;
}
