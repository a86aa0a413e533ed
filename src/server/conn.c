/* inferx server: connection defences, beside libmicrohttpd's own options.
 *
 * libmicrohttpd 0.9.75 gives a connection limit, a per-IP limit and an idle
 * timeout, but the timeout restarts on every byte (a header line every few
 * seconds keeps a socket forever), and at its limit new connections --
 * health probes included -- wait in the kernel's backlog (the accept thread,
 * listen.c, stops accepting there as MHD's own accept did). So:
 *   - every connection gets a socket context (MHD_OPTION_NOTIFY_CONNECTION)
 *     holding its phase and a deadline that bytes do not move: the headers
 *     must be complete within header_timeout_s of the accept (or of the
 *     request line, on a kept-alive connection), the body within
 *     body_timeout_s of the headers, and an idle kept-alive connection
 *     must start its next request line within conn_timeout_s. The watcher
 *     thread sweeps the list every round and closes what is past its
 *     deadline (a 408 first when it was mid-request and not TLS), and
 *     what was left incomplete by a client that shut its side (a 400: no
 *     more bytes can come, so waiting for the deadline only holds a slot);
 *   - MHD's own connection limit is set well above max_connections, and a
 *     connection opened over max_connections is marked `excess`: its
 *     request is answered at once with 503 and the connection closed
 *     (server.c), except /health and /ready, so probes still see a full
 *     server as alive. Only past MHD's limit do connections queue.
 *
 * Closing from the watcher is shutdown(2), under socks_mu: MHD reports a
 * connection closed (NOTIFY_CLOSED, which takes the mutex) before it closes
 * the descriptor, so the sweeper never touches a descriptor that has been
 * reused. MHD then sees the end of the stream and closes the connection on
 * its own thread. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "server/server_int.h"

/* Connections MHD accepts past max_connections (each is answered 503). */
#define IXS_EXCESS_MIN 64
/* Seconds a connection answered before its body ended keeps reading (and
 * discarding) so that closing it does not reset the answer away. */
#define IXS_LINGER_S 2
/* How long a client's end of stream must stand, mid-request and with no
 * progress, before the request is refused as incomplete: MHD may have read
 * the last bytes and not yet handed them on. */
#define IXS_EOF_GRACE_NS 300000000ull
/* libmicrohttpd's memory per connection (request line, headers, buffers). */
#define IXS_CONN_POOL_BYTES (128 * 1024)
/* The longest request target served (nginx's default header buffer), and
 * the most query parameters: both fit the pool above with room to spare. */
#define IXS_MAX_URI_BYTES 8192
#define IXS_MAX_QUERY_PARAMS 1000
#define IXS_STR_(x) #x
#define IXS_STR(x) IXS_STR_(x)

ixs_sock *ix__conn_sock(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void ix__conn_phase(ix_server *s, ixs_sock *k, ixs_sock_phase ph) {
    if (!k) return;
    int32_t secs = ph == IXS_SOCK_HEADERS ? s->p.header_timeout_s
                   : ph == IXS_SOCK_BODY  ? s->p.body_timeout_s
                   : ph == IXS_SOCK_IDLE  ? s->p.conn_timeout_s
                   : ph == IXS_SOCK_LINGER ? IXS_LINGER_S
                                          : 0;
    atomic_store(&k->phase, (int)ph);
    atomic_fetch_add(&k->gen, 1);
    atomic_store(&k->deadline_ns, secs > 0 ? ix_time_ns() + (uint64_t)secs * 1000000000ull : 0);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    ix_server *s = cls;
    ixs_sock *k = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        if (!(k = ix_calloc(1, sizeof *k))) return; /* no deadline then; MHD's idle timeout still holds */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : MHD_INVALID_SOCKET;
        atomic_init(&k->phase, IXS_SOCK_HEADERS);
        atomic_init(&k->deadline_ns, 0);
        atomic_init(&k->gen, 0);
        ix__conn_phase(s, k, IXS_SOCK_HEADERS);
        k->excess = atomic_fetch_add(&s->n_socks, 1) >= s->p.max_connections;
        pthread_mutex_lock(&s->socks_mu);
        k->next = s->socks;
        if (s->socks) s->socks->prev = k;
        s->socks = k;
        pthread_mutex_unlock(&s->socks_mu);
        *socket_context = k;
        return;
    }
    if (!k) return;
    pthread_mutex_lock(&s->socks_mu);
    if (k->prev) k->prev->next = k->next;
    else s->socks = k->next;
    if (k->next) k->next->prev = k->prev;
    pthread_mutex_unlock(&s->socks_mu);
    atomic_fetch_sub(&s->n_socks, 1);
    ix_free(k);
    *socket_context = NULL;
}

/* Whether a request target is past what is served: longer than
 * IXS_MAX_URI_BYTES, or more query parameters than IXS_MAX_QUERY_PARAMS
 * (libmicrohttpd 0.9.75 stores each in the connection's pool, and one that
 * does not fit leaves the request hanging or the connection closed without
 * an answer, depending on how the bytes arrived). */
static bool uri_too_long(const char *uri) {
    size_t n = 0, params = 1;
    for (const char *p = uri; *p; p++, n++) {
        if (n >= IXS_MAX_URI_BYTES) return true;
        params += *p == '&';
    }
    return params > IXS_MAX_QUERY_PARAMS;
}

/* A request line has arrived (libmicrohttpd calls this before it parses the
 * query): a target past the limits is answered 414 here, on the
 * connection's own thread before anything else writes, and the socket shut
 * so that MHD drops the request; a kept-alive connection starts its
 * headers' clock (a fresh connection's started at the accept). */
static void *on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    ix_server *s = cls;
    ixs_sock *k = ix__conn_sock(c);
    if (!k) return NULL;
    if (uri && uri_too_long(uri)) {
        pthread_mutex_lock(&s->socks_mu); /* the sweeper writes and shuts under it too */
        k->refused = true;
        atomic_store(&k->phase, (int)IXS_SOCK_BUSY);
        atomic_store(&k->deadline_ns, 0);
        if (!s->tls)
            ix__conn_send_raw(k->fd, 414, "URI Too Long", "uri_too_long",
                              "the request target is over " IXS_STR(IXS_MAX_URI_BYTES) " bytes or "
                              IXS_STR(IXS_MAX_QUERY_PARAMS) " query parameters");
        shutdown(k->fd, SHUT_RDWR);
        pthread_mutex_unlock(&s->socks_mu);
        return NULL;
    }
    if (atomic_load(&k->phase) == IXS_SOCK_IDLE) ix__conn_phase(s, k, IXS_SOCK_HEADERS);
    return NULL;
}

void ix__conn_options(ix_server *s, struct MHD_OptionItem *opts, size_t *n) {
    int32_t excess = s->p.max_connections > IXS_EXCESS_MIN ? s->p.max_connections : IXS_EXCESS_MIN;
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, s};
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_request_line, s};
    s->conn_limit = s->p.max_connections + excess;
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, s->conn_limit, NULL};
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, s->p.conn_timeout_s, NULL};
    /* MHD's default 32 KiB pool runs out storing a few hundred query
     * parameters (0.9.75): room for IXS_MAX_QUERY_PARAMS and the longest
     * target, past which on_request_line answers 414. */
    opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, IXS_CONN_POOL_BYTES, NULL};
    if (s->p.max_conns_per_ip > 0)
        opts[(*n)++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->p.max_conns_per_ip, NULL};
}

bool ix__conn_send_raw(MHD_socket fd, int status, const char *reason, const char *code, const char *msg) {
    char body[512], head[256];
    int nb = snprintf(body, sizeof body,
                      "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"%s\"}}",
                      msg, code);
    if (nb < 0 || (size_t)nb >= sizeof body) return false;
    int nh = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
                      status, reason, nb);
    struct iovec iov[2] = {{head, (size_t)nh}, {body, (size_t)nb}};
    struct msghdr mh = {0};
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == nh + nb;
}

/* Whether k's client shut its side before its request was complete (libmicrohttpd
 * 0.9.75 then waits for more bytes until the deadline): its end of stream,
 * seen on two sweeps at least IXS_EOF_GRACE_NS apart with no phase change
 * between. Unread bytes in the socket hide the end of stream until MHD has
 * read them, so what is seen is the end of everything the client sent. */
static bool ended_early(ixs_sock *k, int ph, uint64_t now) {
    if (ph != IXS_SOCK_HEADERS && ph != IXS_SOCK_BODY) return false;
    if (ix__srv_peer(k->fd) == IXS_PEER_OPEN) {
        k->eof_ns = 0;
        return false;
    }
    unsigned gen = atomic_load(&k->gen);
    if (!k->eof_ns || k->eof_gen != gen) {
        k->eof_ns = now;
        k->eof_gen = gen;
        return false;
    }
    return now - k->eof_ns >= IXS_EOF_GRACE_NS;
}

/* Before MHD_stop_daemon. libmicrohttpd 0.9.75 dereferences a NULL
 * response when a worker, still busy with a connection as the daemon's
 * shutdown flag goes up, answers an error of its own (a malformed or
 * oversized request): MHD_queue_response then returns MHD_YES without
 * queuing anything, and build_header_response reads the response that is
 * not there. So every connection that is not being answered is shut here
 * (mid-request ones get no answer: the server is going), and MHD closes
 * them, and any it was still parsing, on its own threads while the flag is
 * down. Connections still answering at end_ns are left to MHD_stop_daemon.
 * The connections still open then. */
int ix__conn_close_all(ix_server *s, uint64_t end_ns) {
    for (;;) {
        pthread_mutex_lock(&s->socks_mu);
        for (ixs_sock *k = s->socks; k; k = k->next) {
            int ph = atomic_load(&k->phase);
            if (k->fd != MHD_INVALID_SOCKET && (ph == IXS_SOCK_HEADERS || ph == IXS_SOCK_BODY || ph == IXS_SOCK_IDLE))
                shutdown(k->fd, SHUT_RDWR);
        }
        pthread_mutex_unlock(&s->socks_mu);
        int n = atomic_load(&s->n_socks);
        if (n <= 0 || ix_time_ns() >= end_ns) return n;
        struct timespec ts = {0, 2000000L};
        nanosleep(&ts, NULL);
    }
}

void ix__conn_sweep(ix_server *s) {
    uint64_t now = ix_time_ns();
    pthread_mutex_lock(&s->socks_mu);
    for (ixs_sock *k = s->socks; k; k = k->next) {
        uint64_t d = atomic_load(&k->deadline_ns);
        if (!d || k->fd == MHD_INVALID_SOCKET) continue;
        if (now < d) {
            if (!ended_early(k, atomic_load(&k->phase), now)) continue;
            atomic_store(&k->deadline_ns, 0);
            if (!s->tls)
                ix__conn_send_raw(k->fd, 400, "Bad Request", "incomplete_request",
                                  "the client ended its side of the connection before the request was complete");
            shutdown(k->fd, SHUT_RDWR);
            continue;
        }
        atomic_store(&k->deadline_ns, 0);
        int ph = atomic_load(&k->phase);
        /* Mid-request and in clear text, nothing else is writing: say why. */
        if (!s->tls && (ph == IXS_SOCK_HEADERS || ph == IXS_SOCK_BODY))
            ix__conn_send_raw(k->fd, 408, "Request Timeout", "timeout", "the request did not arrive in time");
        shutdown(k->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->socks_mu);
}
