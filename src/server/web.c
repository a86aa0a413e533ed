/* The browser side of the server: the chat page at / (web/chat.html, made
 * into a byte array at build time by cmake/embed.cmake: no files at run time,
 * no CDN) and CORS (--cors-allow-origin). */
#include <string.h>
#include <strings.h>

#include "server/server_int.h"

extern const unsigned char ix__web_chat_html[];
extern const size_t ix__web_chat_html_len;

/* Whether origin (from the request) is one of the allowed: "*" or an exact
 * member of the comma-separated list (spaces around members ignored). */
static bool origin_allowed(const char *list, const char *origin, size_t olen) {
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *end = p;
        while (*end && *end != ',') end++;
        const char *last = end;
        while (last > p && last[-1] == ' ') last--;
        if ((size_t)(last - p) == olen && !memcmp(p, origin, olen)) return true;
        p = end;
    }
    return false;
}

void ix__srv_cors_headers(ixs_conn *cc, struct MHD_Response *r) {
    const char *allow = cc->s->cors;
    if (!allow) return;
    if (!strcmp(allow, "*")) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        return;
    }
    const char *origin = MHD_lookup_connection_value(cc->c, MHD_HEADER_KIND, "Origin");
    MHD_add_response_header(r, "Vary", "Origin");
    if (origin && origin_allowed(allow, origin, strlen(origin)))
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
}

/* A header list a preflight asks to send, if it is a plain token list (it is
 * echoed back, so nothing else passes). */
static bool token_list(const char *s) {
    if (!s || strlen(s) > 512) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
              *s == '_' || *s == ',' || *s == ' '))
            return false;
    return true;
}

enum MHD_Result ix__srv_preflight(ixs_conn *cc, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    char methods[96];
    snprintf(methods, sizeof methods, "%s%s, OPTIONS", allow, strstr(allow, "GET") ? ", HEAD" : "");
    MHD_add_response_header(r, "Allow", methods);
    ix__srv_cors_headers(cc, r);
    if (cc->s->cors) {
        const char *hdrs = MHD_lookup_connection_value(cc->c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                token_list(hdrs) ? hdrs : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result ret = MHD_queue_response(cc->c, 204, r);
    MHD_destroy_response(r);
    ix__metrics_http(&cc->s->metrics, cc->ep, 204);
    ix__srv_log_write(cc->s, ix__srv_log_line(cc->s, cc->method, cc->url, 204, cc->t0_ns, cc->remote, cc->key));
    return ret;
}

enum MHD_Result ix__srv_web_page(ixs_conn *cc) {
    return ix__srv_reply_raw(cc, 200, "text/html; charset=utf-8", (const char *)ix__web_chat_html,
                             ix__web_chat_html_len, NULL);
}
