/* Test helper shared by the server tests: a tiny HTTP/1.1 client
 * (Connection: close, de-chunked bodies) for servers on 127.0.0.1, and an
 * SSE splitter. Static functions: include it in one test file each. */
#ifndef IX_TEST_HTTP_CLIENT_H
#define IX_TEST_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct resp {
    int status;
    char *head; /* status line + headers */
    char *body; /* de-chunked, NUL-terminated */
    size_t body_len;
} resp;

static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int dial(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_request(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                        size_t body_len) {
    int fd = dial(port);
    if (fd < 0) return -1;
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
                     method, path, body ? body_len : 0, headers ? headers : "");
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n) goto bad;
    size_t off = 0;
    while (body && off < body_len) {
        ssize_t w = send(fd, body + off, body_len - off, MSG_NOSIGNAL);
        if (w <= 0) goto bad;
        off += (size_t)w;
    }
    return fd;
bad:
    close(fd);
    return -1;
}

static void dechunk(resp *r, char *raw, size_t len) {
    char *out = malloc(len + 1);
    size_t o = 0, i = 0;
    while (i < len) {
        size_t sz = strtoul(raw + i, NULL, 16);
        char *eol = strstr(raw + i, "\r\n");
        if (!eol) break;
        i = (size_t)(eol - raw) + 2;
        if (sz == 0 || i + sz > len) break;
        memcpy(out + o, raw + i, sz);
        o += sz;
        i += sz + 2;
    }
    out[o] = '\0';
    r->body = out;
    r->body_len = o;
}

static int read_response(int fd, resp *r) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
        if (k <= 0) break;
        len += (size_t)k;
    }
    close(fd);
    buf[len] = '\0';
    memset(r, 0, sizeof *r);
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    r->head = strndup(buf, (size_t)(sep - buf));
    char *body = sep + 4;
    size_t blen = len - (size_t)(body - buf);
    if (strcasestr(r->head, "transfer-encoding: chunked")) {
        dechunk(r, body, blen);
    } else {
        r->body = strndup(body, blen);
        r->body_len = blen;
    }
    free(buf);
    return 0;
}

static int http(uint16_t port, const char *method, const char *path, const char *headers, const char *body,
                resp *r) {
    int fd = send_request(port, method, path, headers, body, body ? strlen(body) : 0);
    if (fd < 0) return -1;
    return read_response(fd, r);
}

/* A POST on a thread of its own (pthread_create with client_thread): the
 * answer in r, http's result in rc. */
typedef struct client_job {
    uint16_t port;
    const char *path; /* NULL: /v1/completions */
    const char *body;
    resp r;
    int rc;
} client_job;

static __attribute__((unused)) void *client_thread(void *arg) {
    client_job *c = arg;
    c->rc = http(c->port, "POST", c->path ? c->path : "/v1/completions", NULL, c->body, &c->r);
    return NULL;
}

/* Sends body (NULL: none) with headers (NULL: none); fails the test unless
 * the status is want_status and the answer JSON; returns it (caller decrefs). */
static __attribute__((unused)) json_t *http_json(uint16_t port, const char *headers, const char *method,
                                                 const char *path, const char *body, int want_status) {
    resp r;
    assert_int_equal(http(port, method, path, headers, body, &r), 0);
    if (r.status != want_status)
        fail_msg("%s %s %s: status %d, want %d: %s", method, path, body ? body : "", r.status, want_status, r.body);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    if (!j) fail_msg("%s: not JSON (%s): %s", path, je.text, r.body);
    resp_free(&r);
    return j;
}

/* SSE: the JSON of every "data:" event, and whether [DONE] came last. */
static json_t *parse_sse(const char *body, bool *done_last) {
    json_t *arr = json_array();
    *done_last = false;
    const char *p = body;
    while ((p = strstr(p, "data: "))) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        assert_non_null(end);
        *done_last = !strncmp(p, "[DONE]", 6);
        if (!*done_last) {
            json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
            if (!j) fail_msg("bad SSE chunk: %.*s", (int)(end - p), p);
            json_array_append_new(arr, j);
        }
        p = end + 2;
    }
    return arr;
}

#endif
