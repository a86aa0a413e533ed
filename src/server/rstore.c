/* inferx server: stored responses (/v1/responses with store: true).
 *
 * Each stored response keeps the Response object as answered and the
 * conversation it ends: the input items it was given (its previous
 * response's conversation first, when it named one) followed by its output
 * items. A request naming it in previous_response_id starts from that
 * conversation. Entries belong to the tenant (the API key's namespace) that
 * made them: another tenant's id is answered 404 like an unknown one.
 *
 * Bounds: max_stored_responses entries and max_stored_bytes of JSON (the
 * least recently used go first), each kept stored_response_ttl_s.
 * With a state_dir the store is DIR/responses.json, rewritten atomically by
 * the watcher thread a few seconds after a change, and at destroy; read at
 * create. One mutex guards everything; JSON trees are copied in and out,
 * so no caller holds a tree the store may free. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_int.h"

#define RSTORE_SAVE_EVERY_NS (2ull * 1000000000ull)

typedef struct rs_entry {
    char id[64];
    uint64_t tenant;
    int64_t expires_s;
    uint64_t used;  /* recency: larger is newer */
    size_t bytes;   /* JSON text of both trees */
    json_t *response;
    json_t *conversation;
} rs_entry;

struct ixs_rstore {
    pthread_mutex_t mu;
    rs_entry *e; /* (n) unordered */
    size_t n, cap, bytes;
    uint64_t clock;
    size_t max_n, max_bytes;
    double ttl_s;
    char *path; /* NULL: memory only */
    bool dirty;
    uint64_t saved_ns;
    uint64_t n_evicted, n_expired;
};

static size_t tree_bytes(const json_t *t) {
    char *txt = json_dumps(t, JSON_COMPACT);
    size_t n = txt ? strlen(txt) : 0;
    free(txt);
    return n;
}

static void entry_free(rs_entry *x) {
    json_decref(x->response);
    json_decref(x->conversation);
}

static void remove_at(ixs_rstore *r, size_t i) {
    r->bytes -= r->e[i].bytes;
    entry_free(&r->e[i]);
    r->e[i] = r->e[--r->n];
    r->dirty = true;
}

static void expire_locked(ixs_rstore *r, int64_t now_s) {
    for (size_t i = 0; i < r->n;)
        if (r->e[i].expires_s <= now_s) {
            remove_at(r, i);
            r->n_expired++;
        } else {
            i++;
        }
}

static rs_entry *find_locked(ixs_rstore *r, const char *id, uint64_t tenant) {
    expire_locked(r, (int64_t)time(NULL));
    for (size_t i = 0; i < r->n; i++)
        if (r->e[i].tenant == tenant && !strcmp(r->e[i].id, id)) return &r->e[i];
    return NULL;
}

/* Makes room for one more entry of `bytes`: the least recently used go. */
static void evict_locked(ixs_rstore *r, size_t bytes) {
    while (r->n && (r->n + 1 > r->max_n || r->bytes + bytes > r->max_bytes)) {
        size_t old = 0;
        for (size_t i = 1; i < r->n; i++)
            if (r->e[i].used < r->e[old].used) old = i;
        remove_at(r, old);
        r->n_evicted++;
    }
}

static ix_status put_locked(ixs_rstore *r, const char *id, uint64_t tenant, int64_t expires_s, json_t *response,
                            json_t *conversation /* both stolen */) {
    size_t bytes = tree_bytes(response) + tree_bytes(conversation);
    ix_status st = IX_OK;
    if (bytes > r->max_bytes || strlen(id) >= sizeof r->e[0].id) {
        st = IX_ERR_TOO_LONG;
    } else {
        evict_locked(r, bytes);
        if (r->n == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 16;
            rs_entry *g = ix_realloc(r->e, cap * sizeof *g);
            if (!g) st = IX_ERR_NOMEM;
            else r->e = g, r->cap = cap;
        }
    }
    if (st != IX_OK) {
        json_decref(response);
        json_decref(conversation);
        return st;
    }
    rs_entry *x = &r->e[r->n++];
    memset(x, 0, sizeof *x);
    snprintf(x->id, sizeof x->id, "%s", id);
    x->tenant = tenant;
    x->expires_s = expires_s;
    x->used = ++r->clock;
    x->bytes = bytes;
    x->response = response;
    x->conversation = conversation;
    r->bytes += bytes;
    r->dirty = true;
    return IX_OK;
}

ix_status ix__rstore_put(ix_server *s, const char *id, uint64_t tenant, const json_t *response,
                         const json_t *conversation) {
    ixs_rstore *r = s->rstore;
    json_t *a = json_deep_copy(response), *b = json_deep_copy(conversation);
    if (!a || !b) {
        json_decref(a);
        json_decref(b);
        return IX_ERR_NOMEM;
    }
    pthread_mutex_lock(&r->mu);
    expire_locked(r, (int64_t)time(NULL));
    ix_status st = put_locked(r, id, tenant, (int64_t)time(NULL) + (int64_t)r->ttl_s, a, b);
    pthread_mutex_unlock(&r->mu);
    return st;
}

ix_status ix__rstore_get(ix_server *s, const char *id, uint64_t tenant, json_t **response, json_t **conversation) {
    ixs_rstore *r = s->rstore;
    if (response) *response = NULL;
    if (conversation) *conversation = NULL;
    pthread_mutex_lock(&r->mu);
    rs_entry *x = find_locked(r, id, tenant);
    ix_status st = x ? IX_OK : IX_ERR_NOT_FOUND;
    if (x) {
        x->used = ++r->clock;
        if (response && !(*response = json_deep_copy(x->response))) st = IX_ERR_NOMEM;
        if (conversation && !(*conversation = json_deep_copy(x->conversation))) st = IX_ERR_NOMEM;
    }
    pthread_mutex_unlock(&r->mu);
    if (st != IX_OK && response) json_decref(*response), *response = NULL;
    if (st != IX_OK && conversation) json_decref(*conversation), *conversation = NULL;
    return st;
}

ix_status ix__rstore_delete(ix_server *s, const char *id, uint64_t tenant) {
    ixs_rstore *r = s->rstore;
    pthread_mutex_lock(&r->mu);
    rs_entry *x = find_locked(r, id, tenant);
    if (x) remove_at(r, (size_t)(x - r->e));
    pthread_mutex_unlock(&r->mu);
    return x ? IX_OK : IX_ERR_NOT_FOUND;
}

void ix__rstore_stats(ix_server *s, ixs_rstore_stats *out) {
    ixs_rstore *r = s->rstore;
    memset(out, 0, sizeof *out);
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    out->n = r->n;
    out->bytes = r->bytes;
    out->n_evicted = r->n_evicted;
    out->n_expired = r->n_expired;
    pthread_mutex_unlock(&r->mu);
}

/* ---- persistence ------------------------------------------------------------------- */

/* {"version": 1, "responses": [{"id", "tenant" (hex), "expires_at", "response", "conversation"}]} */
static char *state_text_locked(ixs_rstore *r) {
    json_t *arr = json_array(), *root = json_pack("{s:i, s:o}", "version", 1, "responses", arr);
    for (size_t i = 0; root && i < r->n; i++) {
        char tenant[20];
        snprintf(tenant, sizeof tenant, "%016" PRIx64, r->e[i].tenant);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:I, s:I, s:O, s:O}", "id", r->e[i].id, "tenant", tenant,
                                             "expires_at", (json_int_t)r->e[i].expires_s, "used",
                                             (json_int_t)r->e[i].used, "response", r->e[i].response,
                                             "conversation", r->e[i].conversation));
    }
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return text;
}

void ix__rstore_save(ix_server *s, bool always) {
    ixs_rstore *r = s->rstore;
    if (!r || !r->path) return;
    pthread_mutex_lock(&r->mu);
    uint64_t now = ix_time_ns();
    bool due = r->dirty && (always || now - r->saved_ns >= RSTORE_SAVE_EVERY_NS);
    char *text = due ? state_text_locked(r) : NULL;
    if (text) r->dirty = false, r->saved_ns = now;
    pthread_mutex_unlock(&r->mu);
    if (!text) return;
    if (!ix__srv_write_atomically(r->path, text)) {
        pthread_mutex_lock(&r->mu);
        r->dirty = true; /* try again next round */
        pthread_mutex_unlock(&r->mu);
    }
    free(text);
}

static ix_status load(ixs_rstore *r, ix_errbuf *err) {
    json_error_t je;
    FILE *f = fopen(r->path, "rb");
    if (!f) return IX_OK; /* none yet */
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    json_t *arr = json_object_get(root, "responses");
    if (!root || !json_is_array(arr) || json_integer_value(json_object_get(root, "version")) != 1) {
        json_decref(root);
        return ix_errf(err, IX_ERR_FORMAT, "%s is not a stored-responses file (%s)", r->path,
                       root ? "no version 1 'responses'" : je.text);
    }
    int64_t now = (int64_t)time(NULL);
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        const char *id = json_string_value(json_object_get(x, "id"));
        const char *tenant = json_string_value(json_object_get(x, "tenant"));
        json_t *exp = json_object_get(x, "expires_at"), *resp = json_object_get(x, "response"),
               *conv = json_object_get(x, "conversation");
        char *end = NULL;
        uint64_t t = tenant ? strtoull(tenant, &end, 16) : 0;
        if (!id || !tenant || !end || *end || !json_is_integer(exp) || !json_is_object(resp) || !json_is_array(conv)) {
            json_decref(root);
            return ix_errf(err, IX_ERR_FORMAT, "%s: entry %zu is malformed", r->path, i);
        }
        if (json_integer_value(exp) <= now) continue;
        if (put_locked(r, id, t, json_integer_value(exp), json_incref(resp), json_incref(conv)) == IX_OK)
            r->e[r->n - 1].used = (uint64_t)json_integer_value(json_object_get(x, "used"));
    }
    for (size_t k = 0; k < r->n; k++)
        if (r->e[k].used > r->clock) r->clock = r->e[k].used;
    r->dirty = false;
    json_decref(root);
    return IX_OK;
}

ix_status ix__rstore_create(ix_server *s, const ix_server_params *p, ix_errbuf *err) {
    ixs_rstore *r = ix_calloc(1, sizeof *r);
    if (!r) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    ix_server_params d = ix_server_default_params(); /* zero or less: the default */
    r->max_n = (size_t)(p->max_stored_responses > 0 ? p->max_stored_responses : d.max_stored_responses);
    r->max_bytes = p->max_stored_bytes > 0 ? p->max_stored_bytes : d.max_stored_bytes;
    r->ttl_s = p->stored_response_ttl_s > 0 ? p->stored_response_ttl_s : d.stored_response_ttl_s;
    s->rstore = r;
    if (!p->state_dir || !*p->state_dir) return IX_OK;
    size_t n = strlen(p->state_dir) + 32;
    if (!(r->path = ix_malloc(n))) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    snprintf(r->path, n, "%s/responses.json", p->state_dir);
    ix_status st = load(r, err);
    if (st == IX_OK && r->n) IX_LOGI("server: %zu stored response(s) from %s", r->n, r->path);
    return st;
}

void ix__rstore_destroy(ix_server *s) {
    ixs_rstore *r = s->rstore;
    if (!r) return;
    ix__rstore_save(s, true);
    for (size_t i = 0; i < r->n; i++) entry_free(&r->e[i]);
    ix_free(r->e);
    ix_free(r->path);
    pthread_mutex_destroy(&r->mu);
    ix_free(r);
    s->rstore = NULL;
}

/* ---- GET / DELETE /v1/responses/{id} ------------------------------------------------- */

enum MHD_Result ix__srv_stored_response(ixs_conn *cc, const char *id) {
    ix_server *s = cc->s;
    ixs_err e;
    size_t n = strlen(id);
    bool ok = n > 0 && n < 64;
    for (size_t i = 0; ok && i < n; i++)
        ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= '0' && id[i] <= '9') ||
             id[i] == '_' || id[i] == '-';
    if (!ok) {
        ix__srv_errf(&e, 400, "invalid_request_error", "response_id",
                     "a response id is 1 to 63 characters of A-Z a-z 0-9 _ -");
        return ix__srv_reply_err(cc, &e);
    }
    uint64_t tenant = ix__policy_key_ns(s, cc->key);
    bool del = !strcmp(cc->method, "DELETE");
    json_t *resp = NULL;
    ix_status st = del ? ix__rstore_delete(s, id, tenant) : ix__rstore_get(s, id, tenant, &resp, NULL);
    if (st == IX_ERR_NOT_FOUND) {
        ix__srv_errf(&e, 404, "invalid_request_error", "response_id", "no stored response '%s'", id);
        e.code = "response_not_found";
        return ix__srv_reply_err(cc, &e);
    }
    if (st != IX_OK) return ix__srv_reply_json(cc, 500, NULL);
    if (!del) return ix__srv_reply_json(cc, 200, resp);
    ix__srv_session_drop(s, cc->key, id); /* its pinned KV goes too (none: nothing to do) */
    return ix__srv_reply_json(cc, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1));
}
