/* inferx server: the listening socket and the accept thread.
 *
 * The server owns its listening socket; libmicrohttpd owns the connections.
 * The daemon runs with MHD_USE_NO_LISTEN_SOCKET, and one thread of ours
 * accepts and hands each new socket to MHD_add_connection, which applies
 * MHD's connection and per-address limits, runs the notify-connection
 * callback (conn.c) and wakes a worker through its inter-thread channel.
 *
 * Why: stopping to listen at drain was MHD_quiesce_daemon, which in 0.9.75's
 * epoll mode removes the listening socket from each worker's epoll set while
 * a busy worker may be removing it too; the loser gets ENOENT and MHD
 * panics (abort) in the middle of a graceful shutdown. Here the drain stops
 * the accept thread and closes the socket: a new connection is refused at
 * once (ECONNREFUSED) and MHD is never asked to let go of a socket.
 *
 * At MHD's own connection limit (max_connections + the excess margin,
 * conn.c) the thread stops accepting until a connection closes, so new
 * connections wait in the kernel's backlog as they did when MHD accepted. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/server_int.h"

/* How long the thread waits before trying again when it must not accept
 * (limit reached) or cannot (out of descriptors or memory). */
#define IXS_ACCEPT_BACKOFF_MS 20

ix_status ix__listen_open(ix_server *s, const struct sockaddr_storage *ss, const char *host, ix_errbuf *err) {
    socklen_t len = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ix_errf(err, IX_ERR_IO, "cannot open a socket for %s: %s", host, strerror(errno));
    int one = 1;
    /* A restart binds at once, with the last run's connections in TIME_WAIT;
     * an IPv6 address means IPv6 only, as libmicrohttpd did. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss->ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    uint16_t port = ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                                    : ((const struct sockaddr_in *)ss)->sin_port);
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return ix_errf(err, IX_ERR_IO, "cannot listen on %s:%u: %s", host, (unsigned)port, strerror(e));
    }
    struct sockaddr_storage got;
    socklen_t glen = sizeof got;
    if (getsockname(fd, (struct sockaddr *)&got, &glen) == 0)
        port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                               : ((struct sockaddr_in *)&got)->sin_port);
    if (pipe2(s->accept_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        s->accept_wake[0] = s->accept_wake[1] = -1;
        return ix_errf(err, IX_ERR_IO, "cannot create the accept thread's pipe: %s", strerror(e));
    }
    s->listen_fd = fd;
    s->port = port;
    return IX_OK;
}

static void *accept_main(void *arg) {
    ix_server *s = arg;
    struct pollfd pf[2] = {{s->listen_fd, POLLIN, 0}, {s->accept_wake[0], POLLIN, 0}};
    for (;;) {
        /* At MHD's limit the socket is not watched: connections queue. */
        bool full = atomic_load(&s->n_socks) >= s->conn_limit;
        int rc = poll(full ? pf + 1 : pf, full ? 1 : 2, full ? IXS_ACCEPT_BACKOFF_MS : -1);
        if (rc < 0 && errno != EINTR) break;
        if (rc <= 0) continue;
        if (pf[1].revents) break; /* the drain: stop */
        if (full || !(pf[0].revents & POLLIN)) continue;
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        int c = accept4(s->listen_fd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                IX_LOGW("server: cannot accept a connection: %s", strerror(errno));
                poll(pf + 1, 1, IXS_ACCEPT_BACKOFF_MS);
                if (pf[1].revents) break;
            }
            continue; /* EAGAIN, ECONNABORTED, EINTR, a peer gone: next */
        }
        /* MHD closes the socket itself when it refuses it (its limits,
         * memory): nothing more to do here either way. */
        MHD_add_connection(s->daemon, c, (const struct sockaddr *)&peer, plen);
    }
    return NULL;
}

ix_status ix__listen_start(ix_server *s, ix_errbuf *err) {
    if (pthread_create(&s->acceptor, NULL, accept_main, s))
        return ix_errf(err, IX_ERR_NOMEM, "cannot start the accept thread");
    s->acceptor_started = true;
    return IX_OK;
}

void ix__listen_close(ix_server *s) {
    if (s->acceptor_started) {
        char b = 1;
        while (write(s->accept_wake[1], &b, 1) < 0 && errno == EINTR) {}
        pthread_join(s->acceptor, NULL);
        s->acceptor_started = false;
    }
    if (s->listen_fd >= 0) close(s->listen_fd);
    s->listen_fd = -1;
    for (int i = 0; i < 2; i++)
        if (s->accept_wake[i] >= 0) close(s->accept_wake[i]);
    s->accept_wake[0] = s->accept_wake[1] = -1;
}
