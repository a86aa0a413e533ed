/* inferx server: sessions -- a conversation's KV pinned in the engine's
 * prefix cache under a client-chosen id, with an expiry.
 *
 *   request fields   "session_id": "<id>", "session_ttl": seconds
 *                    (chat and text completions, /v1/responses, Ollama's
 *                    /api/chat and /api/generate)
 *   GET    /v1/sessions/{id}        what it holds: tokens, blocks per tier, expiry
 *   POST   /v1/sessions/{id}/save   its blocks written to the disk tier now
 *   DELETE /v1/sessions/{id}        unpinned, its blocks out of RAM and off disk
 *
 * A session id is scoped by the tenant (the API key's namespace): the
 * engine names a session by (hash of tenant and id, tenant), so another
 * key's requests and calls never reach it -- they get 404 as for an id
 * that does not exist. */
#include <string.h>
#include <time.h>

#include "server/server_int.h"

#define SESSION_ID_MAX 128
#define SESSION_TTL_MAX_S (366.0 * 86400.0)

/* An id is 1..128 of [A-Za-z0-9._:-]: safe in a URL path and a log line. */
static bool id_ok(const char *id, size_t n) {
    if (n == 0 || n > SESSION_ID_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == ':' || c == '-'))
            return false;
    }
    return true;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t ix__srv_session_key(uint64_t tenant, const char *id, size_t n) {
    uint64_t h = ix__srv_fnv1a(IXS_FNV_BASIS, &tenant, sizeof tenant);
    h = ix__srv_fnv1a(h, "session:", 8);
    h = ix__srv_fnv1a(h, id, n);
    return h ? h : 1;
}

int ix__srv_session_fields(ix_server *s, int key, json_t *req, ix_request_params *r, ixs_err *e) {
    json_t *id = json_object_get(req, "session_id"), *ttl = json_object_get(req, "session_ttl");
    bool has_id = id && !json_is_null(id);
    if (ttl && !json_is_null(ttl)) {
        if (!has_id) return IXS_BAD(e, "session_ttl", "'session_ttl' needs a 'session_id'");
        if (!json_is_number(ttl) || json_number_value(ttl) <= 0 || json_number_value(ttl) > SESSION_TTL_MAX_S)
            return IXS_BAD(e, "session_ttl", "'session_ttl' must be a number of seconds in (0, %.0f]",
                           SESSION_TTL_MAX_S);
    }
    if (!has_id) return 0;
    if (!json_is_string(id) || !id_ok(json_string_value(id), json_string_length(id)))
        return IXS_BAD(e, "session_id", "'session_id' must be 1 to %d characters of A-Z a-z 0-9 . _ : -",
                       SESSION_ID_MAX);
    double ttl_s = ttl && !json_is_null(ttl) ? json_number_value(ttl) : s->p.session_ttl_s;
    uint64_t tenant = ix__policy_key_ns(s, key);
    r->session_id = ix__srv_session_key(tenant, json_string_value(id), json_string_length(id));
    r->session_tenant = tenant;
    r->session_expires_ms = ttl_s > 0 ? wall_ms() + (int64_t)(ttl_s * 1000.0) : 0;
    return 0;
}

static json_t *session_json(const char *id, const ix_kv_session_info *si) {
    json_t *tiers = json_array();
    if (si->n_blocks_ram) json_array_append_new(tiers, json_string("ram"));
    if (si->n_blocks_disk) json_array_append_new(tiers, json_string("disk"));
    return json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:o, s:o}", "id", id, "object", "session", "tokens",
                     (json_int_t)si->n_tokens, "blocks", (json_int_t)si->n_blocks, "blocks_ram",
                     (json_int_t)si->n_blocks_ram, "blocks_disk", (json_int_t)si->n_blocks_disk, "tiers", tiers,
                     "expires_at", si->expires_ms ? json_integer(si->expires_ms / 1000) : json_null());
}

ix_status ix__srv_session_drop(ix_server *s, int key, const char *id) {
    uint64_t tenant = ix__policy_key_ns(s, key);
    return ix_engine_session(s->engine, IX_SESSION_DELETE, ix__srv_session_key(tenant, id, strlen(id)), tenant, NULL);
}

enum MHD_Result ix__srv_sessions(ixs_conn *cc, const char *rest) {
    ix_server *s = cc->s;
    ixs_err e;
    char id[SESSION_ID_MAX + 1];
    bool post = !strcmp(cc->method, "POST");
    size_t n = strlen(rest);
    if (post) { /* {id}/save */
        if (n < 6 || strcmp(rest + n - 5, "/save"))
            return ix__srv_reply_err(cc, (ix__srv_errf(&e, 404, "invalid_request_error", NULL,
                                                       "POST /v1/sessions/{id}/save is the only POST here"),
                                          &e));
        n -= 5;
    }
    if (!id_ok(rest, n)) {
        ix__srv_errf(&e, 400, "invalid_request_error", "session_id",
                     "a session id is 1 to %d characters of A-Z a-z 0-9 . _ : -", SESSION_ID_MAX);
        return ix__srv_reply_err(cc, &e);
    }
    memcpy(id, rest, n);
    id[n] = '\0';
    uint64_t tenant = ix__policy_key_ns(s, cc->key);
    ix_session_op op = post ? IX_SESSION_SAVE : !strcmp(cc->method, "DELETE") ? IX_SESSION_DELETE : IX_SESSION_GET;
    ix_kv_session_info si;
    ix_status st = ix_engine_session(s->engine, op, ix__srv_session_key(tenant, id, n), tenant, &si);
    if (st == IX_ERR_NOT_FOUND) {
        ix__srv_errf(&e, 404, "invalid_request_error", "session_id", "no session '%s'", id);
        e.code = "session_not_found";
        return ix__srv_reply_err(cc, &e);
    }
    if (st == IX_ERR_STATE && op == IX_SESSION_SAVE) {
        ix__srv_errf(&e, 409, "invalid_request_error", NULL,
                     "this server has no disk tier to save sessions to (start it with --kv-disk-dir)");
        return ix__srv_reply_err(cc, &e);
    }
    if (st != IX_OK) {
        ix__srv_errf(&e, 500, "server_error", NULL, "session %s failed: %s", id, ix_status_str(st));
        return ix__srv_reply_err(cc, &e);
    }
    if (op == IX_SESSION_DELETE)
        return ix__srv_reply_json(cc, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "session", "deleted", 1));
    json_t *o = session_json(id, &si);
    if (o && op == IX_SESSION_SAVE) json_object_set_new(o, "saved", json_true());
    return ix__srv_reply_json(cc, 200, o);
}
