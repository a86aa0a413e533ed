/* An OpenAI-compatible HTTP server embedded in your own program: load a
 * model, start an engine and a server on 127.0.0.1 (an ephemeral port), then
 * -- standing in for any HTTP client -- post one completion request to it
 * over a plain socket and print the answer; shut down cleanly.
 *   ./server MODEL.gguf */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <inferx/server.h>

static int post(uint16_t port, const char *path, const char *json, char *reply, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    char req[1024];
    int n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     path, strlen(json), json);
    if (write(fd, req, (size_t)n) != n) return close(fd), -1;
    size_t len = 0;
    ssize_t got;
    while (len + 1 < cap && (got = read(fd, reply + len, cap - 1 - len)) > 0) len += (size_t)got;
    reply[len] = '\0';
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]), 2;
    ix_errbuf err = {0};
    ix_model *model = NULL;
    ix_engine *engine = NULL;
    ix_server *server = NULL;
    int rc = 1;
    ix_engine_params ep = ix_engine_default_params();
    ep.kv_mem_bytes = 64u << 20;
    ix_server_params sp = ix_server_default_params(); /* 127.0.0.1 */
    sp.port = 0;
    sp.model_name = "example";
    if (ix_model_load(&model, argv[1], &err) != IX_OK || ix_engine_create(&engine, model, &ep, &err) != IX_OK ||
        ix_server_create(&server, engine, &sp, &err) != IX_OK)
        goto out;
    printf("serving on http://127.0.0.1:%u\n", (unsigned)ix_server_port(server));
    static char reply[16384];
    if (post(ix_server_port(server), "/v1/completions",
             "{\"model\":\"example\",\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"temperature\":0}", reply,
             sizeof reply) != 0) {
        snprintf(err.msg, sizeof err.msg, "request failed");
        goto out;
    }
    const char *body = strstr(reply, "\r\n\r\n");
    printf("%.*s\n%s\n", (int)strcspn(reply, "\r"), reply, body ? body + 4 : "");
    rc = strncmp(reply, "HTTP/1.1 200", 12) != 0 || !body || !strstr(body, "\"text_completion\"");
    if (rc) snprintf(err.msg, sizeof err.msg, "unexpected answer");
out:
    if (rc) fprintf(stderr, "server: %s\n", err.msg);
    if (server) ix_server_shutdown(server, 1000);
    ix_server_destroy(server);
    ix_engine_destroy(engine);
    ix_model_destroy(model);
    return rc;
}
