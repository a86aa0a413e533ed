/* inferx server: per-key policy -- the keys file, rate limits, concurrency,
 * per-request caps, budgets kept across restarts, per-key usage (/v1/usage,
 * /metrics) and request timeouts. policy.h has the contract; docs/server.md
 * ("Per-key policy", "Request timeouts") the user's view.
 *
 * Rate limits are token buckets on the policy's clock (injectable for
 * tests): a bucket of `limit` units refilled at limit/60 per second, so a
 * key may burst its whole minute and then runs at its rate. A request takes
 * one unit of the requests bucket and, of the tokens bucket, its prompt
 * tokens plus max_tokens for each choice (the context left when it set
 * none); what it did not use goes back when it ends, and what it used is
 * charged to the key's budget then. Everything the HTTP threads, the
 * engine thread (a job freed by its last callback) and the saver share is
 * under one mutex; nothing under it blocks. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server/server_int.h"

#define SAVE_PERIOD_S 2

/* ---- SHA-256 (FIPS 180-4) --------------------------------------------------- */

static const uint32_t k_sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha_block(uint32_t h[8], const uint8_t *p /* (64) */) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g)) + k_sha_k[i] + w[i];
        uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void ix__sha256(const void *data, size_t n, uint8_t out[32]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t *p = data;
    size_t i = 0;
    for (; n - i >= 64; i += 64) sha_block(h, p + i);
    uint8_t tail[128] = {0};
    size_t r = n - i;
    memcpy(tail, p + i, r);
    tail[r] = 0x80;
    size_t tl = r + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)n * 8;
    for (int b = 0; b < 8; b++) tail[tl - 1 - b] = (uint8_t)(bits >> (8 * b));
    sha_block(h, tail);
    if (tl == 128) sha_block(h, tail + 64);
    for (int k = 0; k < 8; k++)
        for (int b = 0; b < 4; b++) out[4 * k + b] = (uint8_t)(h[k] >> (24 - 8 * b));
}

/* ---- state ------------------------------------------------------------------ */

typedef enum reason {
    R_REQUESTS, R_TOKENS, R_CONCURRENCY, R_MAX_TOKENS, R_BUDGET, R_MODEL, R_TIMEOUT, R_N
} reason;
static const char *const k_reason_names[R_N] = {"requests_per_minute", "tokens_per_minute", "max_concurrent",
                                                "max_tokens",          "budget",            "model",
                                                "timeout"};

typedef struct bucket {
    double cap;    /* units; 0: no limit */
    double per_s;  /* refill rate */
    double level;  /* units available now (after refill at t_ns) */
    uint64_t t_ns; /* the clock at the last refill */
} bucket;

typedef struct pkey {
    char *name;
    uint8_t sha[32];
    int64_t rpm, tpm, max_concurrent, max_tokens, budget_tokens; /* 0: none */
    double budget_usd;                                           /* 0: none */
    char **models;                                               /* (n_models); NULL: any */
    size_t n_models;
    int32_t priority;
    bool has_priority, metrics;
    uint64_t ns;  /* the prefix-cache tenant: from the name, so that a new secret keeps it */
    bool revoked; /* gone from the keys file at a reload: refused, its numbers kept */
    /* Under the policy's mutex (the settings above too, which a reload changes). */
    bucket req, tok;
    int32_t active;
    int64_t spent_tokens; /* persistent (the usage state) */
    double spent_usd;     /* persistent */
    uint64_t n_requests, n_prompt, n_completion, rejected[R_N];
    double usd; /* this process's */
} pkey;

struct ixs_policy {
    pthread_mutex_t mu;
    /* (n) every key the keys file has had since the start, each allocated
     * once and kept until the policy goes (jobs hold their key's index),
     * in the file's order, then those a reload added. Under mu. */
    pkey **keys;
    size_t n, cap;
    size_t base;      /* the index of keys[0] in the server's numbering (n_api_keys) */
    char *keys_path;  /* NULL: no keys file (set once at creation) */
    double timeout_s; /* the server's default; <= 0: none */
    double cost_per_hour;
    int32_t n_ctx;
    char *state_path; /* NULL: no keys file, nothing saved */
    bool dirty;
    uint64_t (*now)(void *);
    void *now_user;
    pthread_t saver;
    pthread_cond_t cv;
    bool saver_on, stop;
};

static uint64_t real_now(void *user) {
    (void)user;
    return ix_time_ns();
}

static uint64_t now_ns(ixs_policy *p) { return p->now(p->now_user); }

void ix__policy_set_clock(ix_server *s, uint64_t (*fn)(void *user), void *user) {
    ixs_policy *p = s->policy;
    pthread_mutex_lock(&p->mu);
    p->now = fn ? fn : real_now;
    p->now_user = fn ? user : NULL;
    uint64_t t = p->now(p->now_user);
    for (size_t i = 0; i < p->n; i++) p->keys[i]->req.t_ns = p->keys[i]->tok.t_ns = t;
    pthread_mutex_unlock(&p->mu);
}

static void bucket_init(bucket *b, int64_t limit, uint64_t t) {
    b->cap = (double)limit;
    b->per_s = (double)limit / 60.0;
    b->level = b->cap;
    b->t_ns = t;
}

static void bucket_refill(bucket *b, uint64_t t) {
    if (b->cap <= 0) return;
    if (t > b->t_ns) b->level += (double)(t - b->t_ns) / 1e9 * b->per_s;
    if (b->level > b->cap) b->level = b->cap;
    b->t_ns = t > b->t_ns ? t : b->t_ns;
}

/* Seconds until the bucket holds `need` units. */
static double bucket_wait_s(const bucket *b, double need) {
    return b->level >= need ? 0 : (need - b->level) / b->per_s;
}

/* The keys file entry of a key index, or NULL (a plain key, none). Under
 * p->mu. */
static pkey *key_of(const ix_server *s, int key) {
    const ixs_policy *p = s->policy;
    if (!p || key < 0 || (size_t)key < p->base || (size_t)key - p->base >= p->n) return NULL;
    return p->keys[(size_t)key - p->base];
}

bool ix__policy_has_keys(const ix_server *s) { return s->n_api_keys > 0 || (s->policy && s->policy->keys_path); }

/* Under p->mu. */
static bool model_ok(const ix_server *s, const pkey *k) {
    if (!k || !k->models) return true;
    for (size_t m = 0; m < k->n_models; m++)
        if (!strcmp(k->models[m], s->model_name)) return true;
    return false;
}

bool ix__policy_model_allowed(const ix_server *s, int key) {
    if (!s->policy) return true;
    pthread_mutex_lock(&s->policy->mu);
    bool ok = model_ok(s, key_of(s, key));
    pthread_mutex_unlock(&s->policy->mu);
    return ok;
}

const char *ix__policy_key_name(const ix_server *s, int key) {
    if (!s->policy) return NULL;
    pthread_mutex_lock(&s->policy->mu);
    const pkey *k = key_of(s, key);
    pthread_mutex_unlock(&s->policy->mu);
    return k ? k->name : NULL; /* names never change, keys are never freed */
}

uint64_t ix__policy_key_ns(const ix_server *s, int key) {
    if (key < 0) return 0;
    if ((size_t)key < s->n_api_keys) return s->key_ns[key];
    pthread_mutex_lock(&s->policy->mu);
    const pkey *k = key_of(s, key);
    pthread_mutex_unlock(&s->policy->mu);
    return k ? k->ns : 0;
}

/* ---- the keys file ---------------------------------------------------------- */

static const char *const k_key_fields[] = {"name",         "key",        "key_sha256", "requests_per_minute",
                                           "tokens_per_minute", "max_concurrent", "max_tokens", "budget_tokens",
                                           "budget_usd",   "models",     "priority",   "metrics"};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A positive integer field (absent or null: 0). */
static ix_status get_limit(json_t *o, const char *field, const char *path, size_t i, int64_t *out, ix_errbuf *err) {
    json_t *v = json_object_get(o, field);
    *out = 0;
    if (!v || json_is_null(v)) return IX_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return ix_errf(err, IX_ERR_INVALID, "keys file %s: keys[%zu].%s: must be a positive integer (leave it out "
                       "for no limit)", path, i, field);
    *out = json_integer_value(v);
    return IX_OK;
}

static bool name_ok(const char *n) {
    size_t len = strlen(n);
    if (len == 0 || len > 64) return false;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

static bool secret_ok(const char *k) {
    size_t n = strlen(k);
    if (n == 0 || n > 4096) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)k[i] <= 0x20 || (unsigned char)k[i] >= 0x7f) return false;
    return true;
}

/* One entry of "keys" into k (its strings owned by k). */
static ix_status parse_key(json_t *o, const char *path, size_t i, double cost_per_hour, pkey *k, ix_errbuf *err) {
#define BAD(...) ix_errf(err, IX_ERR_INVALID, __VA_ARGS__)
    if (!json_is_object(o)) return BAD("keys file %s: keys[%zu]: must be an object", path, i);
    const char *f;
    json_t *v;
    json_object_foreach(o, f, v) {
        bool known = false;
        for (size_t x = 0; x < IX_ARRAY_LEN(k_key_fields); x++) known |= !strcmp(f, k_key_fields[x]);
        if (!known)
            return BAD("keys file %s: keys[%zu].%.64s: unknown field (known: name, key, key_sha256, "
                       "requests_per_minute, tokens_per_minute, max_concurrent, max_tokens, budget_tokens, "
                       "budget_usd, models, priority, metrics)", path, i, f);
    }
    v = json_object_get(o, "name");
    if (!json_is_string(v) || !name_ok(json_string_value(v)))
        return BAD("keys file %s: keys[%zu].name: required, 1-64 characters of A-Z a-z 0-9 _ - .", path, i);
    if (!(k->name = ix_strdup(json_string_value(v)))) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    json_t *plain = json_object_get(o, "key"), *hash = json_object_get(o, "key_sha256");
    if (!!plain == !!hash)
        return BAD("keys file %s: keys[%zu] (%s): give exactly one of key and key_sha256", path, i, k->name);
    if (plain) {
        if (!json_is_string(plain) || !secret_ok(json_string_value(plain)))
            return BAD("keys file %s: keys[%zu].key: must be printable ASCII without spaces", path, i);
        ix__sha256(json_string_value(plain), json_string_length(plain), k->sha);
    } else {
        const char *h = json_is_string(hash) ? json_string_value(hash) : "";
        bool ok = strlen(h) == 64;
        for (int b = 0; ok && b < 32; b++) {
            int hi = hexval(h[2 * b]), lo = hexval(h[2 * b + 1]);
            ok = hi >= 0 && lo >= 0;
            k->sha[b] = (uint8_t)(hi << 4 | lo);
        }
        if (!ok) return BAD("keys file %s: keys[%zu].key_sha256: must be 64 hex digits", path, i);
    }
    ix_status st;
    if ((st = get_limit(o, "requests_per_minute", path, i, &k->rpm, err)) != IX_OK ||
        (st = get_limit(o, "tokens_per_minute", path, i, &k->tpm, err)) != IX_OK ||
        (st = get_limit(o, "max_concurrent", path, i, &k->max_concurrent, err)) != IX_OK ||
        (st = get_limit(o, "max_tokens", path, i, &k->max_tokens, err)) != IX_OK ||
        (st = get_limit(o, "budget_tokens", path, i, &k->budget_tokens, err)) != IX_OK)
        return st;
    if (k->max_tokens > INT32_MAX) return BAD("keys file %s: keys[%zu].max_tokens: at most %d", path, i, INT32_MAX);
    v = json_object_get(o, "budget_usd");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) || !isfinite(json_number_value(v)))
            return BAD("keys file %s: keys[%zu].budget_usd: must be a number > 0", path, i);
        if (!(cost_per_hour > 0))
            return BAD("keys file %s: keys[%zu].budget_usd: needs --cost-per-hour (the price USD are counted in)",
                       path, i);
        k->budget_usd = json_number_value(v);
    }
    v = json_object_get(o, "models");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return BAD("keys file %s: keys[%zu].models: must be a non-empty array of model ids", path, i);
        if (!(k->models = ix_calloc(json_array_size(v), sizeof *k->models)))
            return ix_errf(err, IX_ERR_NOMEM, "out of memory");
        size_t m;
        json_t *x;
        json_array_foreach(v, m, x) {
            if (!json_is_string(x) || !json_string_length(x))
                return BAD("keys file %s: keys[%zu].models[%zu]: must be a non-empty string", path, i, m);
            if (!(k->models[m] = ix_strdup(json_string_value(x)))) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
            k->n_models = m + 1;
        }
    }
    v = json_object_get(o, "priority");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX)
            return BAD("keys file %s: keys[%zu].priority: must be a 32-bit integer", path, i);
        k->priority = (int32_t)json_integer_value(v);
        k->has_priority = true;
    }
    v = json_object_get(o, "metrics");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) return BAD("keys file %s: keys[%zu].metrics: must be true or false", path, i);
        k->metrics = json_is_true(v);
    }
    return IX_OK;
#undef BAD
}

static void key_free(pkey *k) {
    ix_free(k->name);
    for (size_t m = 0; m < k->n_models; m++) ix_free(k->models[m]);
    ix_free(k->models);
}

static void keys_free(pkey *arr, size_t n) {
    for (size_t i = 0; i < n; i++) key_free(&arr[i]);
    ix_free(arr);
}

/* Reads and checks the keys file into a new array of settings (*out, *n_out);
 * names and secrets must be unique, and unlike every plain key of s. */
static ix_status read_keys(ix_server *s, const char *path, pkey **out, size_t *n_out, ix_errbuf *err) {
    *out = NULL;
    *n_out = 0;
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (je.line < 0 || json_error_code(&je) == json_error_cannot_open_file)
            return ix_errf(err, IX_ERR_IO, "keys file %s: %s", path, je.text);
        return ix_errf(err, IX_ERR_INVALID, "keys file %s: line %d, column %d: %s", path, je.line, je.column, je.text);
    }
    ix_status st = IX_OK;
    pkey *arr = NULL;
    size_t n = 0;
    json_t *list = json_object_get(root, "keys");
    if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(list) || !json_array_size(list)) {
        st = ix_errf(err, IX_ERR_INVALID, "keys file %s: must be an object {\"keys\": [...]} with at least one key "
                     "and no other member", path);
        goto out;
    }
    if (!(arr = ix_calloc(json_array_size(list), sizeof *arr))) {
        st = ix_errf(err, IX_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(list); i++) {
        n = i + 1;
        if ((st = parse_key(json_array_get(list, i), path, i, s->p.cost_per_hour_usd, &arr[i], err)) != IX_OK)
            goto out;
        for (size_t j = 0; j < i; j++) {
            if (!strcmp(arr[j].name, arr[i].name)) {
                st = ix_errf(err, IX_ERR_INVALID, "keys file %s: keys[%zu].name: '%s' is also keys[%zu]'s", path, i,
                             arr[i].name, j);
                goto out;
            }
            if (!memcmp(arr[j].sha, arr[i].sha, 32)) {
                st = ix_errf(err, IX_ERR_INVALID, "keys file %s: keys[%zu] (%s): the same secret as keys[%zu] (%s)",
                             path, i, arr[i].name, j, arr[j].name);
                goto out;
            }
        }
        for (size_t j = 0; j < s->n_api_keys; j++) {
            uint8_t h[32];
            ix__sha256(s->api_keys[j], strlen(s->api_keys[j]), h);
            if (!memcmp(h, arr[i].sha, 32)) {
                st = ix_errf(err, IX_ERR_INVALID, "keys file %s: keys[%zu] (%s): the same secret as an --api-key key",
                             path, i, arr[i].name);
                goto out;
            }
        }
    }
out:
    json_decref(root);
    if (st != IX_OK) {
        keys_free(arr, n);
        return st;
    }
    *out = arr;
    *n_out = n;
    return IX_OK;
}

/* A bucket for a new limit: an unchanged one keeps its level. */
static void bucket_set(bucket *b, int64_t limit, uint64_t t) {
    if (b->cap == (double)limit) return;
    bucket_init(b, limit, t);
}

/* Takes the settings of fresh (n) into p under p->mu: a key whose name is
 * known gets the new settings (its usage, budget spent and in-flight count
 * stay), a new name is added, a name no longer there is revoked. The
 * settings' strings move out of fresh; the caller frees what is left. */
static ix_status merge_keys(ixs_policy *p, pkey *fresh, size_t n, uint64_t t) {
    size_t add = 0;
    for (size_t i = 0; i < n; i++) {
        bool known = false;
        for (size_t j = 0; j < p->n && !known; j++) known = !strcmp(p->keys[j]->name, fresh[i].name);
        add += !known;
    }
    if (p->n + add > p->cap) { /* grown first, so that nothing changes unless all of it can */
        size_t cap = p->n + add + 8;
        pkey **k = ix_realloc(p->keys, cap * sizeof *k);
        if (!k) return IX_ERR_NOMEM;
        p->keys = k;
        p->cap = cap;
    }
    for (size_t j = 0; j < p->n; j++) p->keys[j]->revoked = true;
    for (size_t i = 0; i < n; i++) {
        pkey *f = &fresh[i], *k = NULL;
        for (size_t j = 0; j < p->n && !k; j++)
            if (!strcmp(p->keys[j]->name, f->name)) k = p->keys[j];
        if (!k) {
            if (!(k = ix_calloc(1, sizeof *k))) return IX_ERR_NOMEM; /* the rest stay revoked until the next reload */
            k->name = f->name;
            f->name = NULL;
            uint64_t h = ix__srv_fnv1a(ix__srv_fnv1a(IXS_FNV_BASIS, "keys-file:", 10), k->name, strlen(k->name) + 1);
            k->ns = h ? h : 1;
            p->keys[p->n++] = k;
        }
        for (size_t m = 0; m < k->n_models; m++) ix_free(k->models[m]);
        ix_free(k->models);
        memcpy(k->sha, f->sha, sizeof k->sha);
        k->rpm = f->rpm, k->tpm = f->tpm, k->max_concurrent = f->max_concurrent, k->max_tokens = f->max_tokens;
        k->budget_tokens = f->budget_tokens, k->budget_usd = f->budget_usd;
        k->models = f->models, k->n_models = f->n_models;
        f->models = NULL, f->n_models = 0;
        k->priority = f->priority, k->has_priority = f->has_priority, k->metrics = f->metrics;
        k->revoked = false;
        bucket_set(&k->req, k->rpm, t);
        bucket_set(&k->tok, k->tpm, t);
    }
    return IX_OK;
}

/* ---- the usage state file --------------------------------------------------- */

/* Loads the spent tokens / USD of each key; a missing file is a first
 * start. A file that does not parse is an error: budgets must not reset
 * silently. */
static ix_status load_state(ixs_policy *p, ix_errbuf *err) {
    if (access(p->state_path, F_OK) != 0 && errno == ENOENT) {
        IX_LOGI("server: usage state %s does not exist yet: budgets start from zero", p->state_path);
        return IX_OK;
    }
    json_error_t je;
    json_t *root = json_load_file(p->state_path, JSON_REJECT_DUPLICATES, &je);
    const char *why = NULL;
    char detail[200] = "";
    json_t *keys = json_object_get(root, "keys");
    if (!root) {
        snprintf(detail, sizeof detail, "line %d: %s", je.line, je.text);
        why = detail;
    } else if (!json_is_object(root) || json_integer_value(json_object_get(root, "version")) != 1 ||
               !json_is_object(keys)) {
        why = "not an inferx usage state (version 1 with a keys object)";
    }
    const char *name;
    json_t *v;
    if (!why) json_object_foreach(keys, name, v) {
        json_t *t = json_object_get(v, "spent_tokens"), *u = json_object_get(v, "spent_usd");
        if (!json_is_object(v) || !json_is_integer(t) || json_integer_value(t) < 0 || !json_is_number(u) ||
            !(json_number_value(u) >= 0)) {
            snprintf(detail, sizeof detail, "keys.%.64s: needs spent_tokens (integer >= 0) and spent_usd (number >= 0)",
                     name);
            why = detail;
            break;
        }
        bool found = false;
        for (size_t i = 0; i < p->n; i++)
            if (!strcmp(p->keys[i]->name, name)) {
                p->keys[i]->spent_tokens = json_integer_value(t);
                p->keys[i]->spent_usd = json_number_value(u);
                found = true;
            }
        if (!found) IX_LOGW("server: usage state %s: key '%.64s' is not in the keys file; dropped", p->state_path, name);
    }
    json_decref(root);
    if (why)
        return ix_errf(err, IX_ERR_FORMAT, "usage state %s: %s (fix it, or delete it to start every budget from zero)",
                       p->state_path, why);
    return IX_OK;
}

/* The state as text (under p->mu). NULL when out of memory. */
static char *state_text(ixs_policy *p) {
    json_t *keys = json_object();
    json_t *root = json_pack("{s:i, s:o}", "version", 1, "keys", keys);
    if (!root) return NULL;
    for (size_t i = 0; i < p->n; i++)
        json_object_set_new(keys, p->keys[i]->name, json_pack("{s:I, s:f}", "spent_tokens",
                                                              (json_int_t)p->keys[i]->spent_tokens, "spent_usd",
                                                              p->keys[i]->spent_usd));
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(root);
    return text;
}

/* Temp file beside it, fsync, rename over it, fsync the folder: a crash
 * leaves the old state or the new one, never a torn file. */
bool ix__srv_write_atomically(const char *path, const char *text) {
    size_t n = strlen(path);
    char *tmp = ix_malloc(n + 16);
    if (!tmp) return false;
    snprintf(tmp, n + 16, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0;
    size_t len = strlen(text), off = 0;
    while (ok && off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        ok = w > 0;
        off += ok ? (size_t)w : 0;
    }
    if (fd >= 0) {
        ok = ok && fsync(fd) == 0;
        ok = close(fd) == 0 && ok;
    }
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        IX_LOGW("server: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    } else {
        const char *slash = strrchr(path, '/');
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    ix_free(tmp);
    return ok;
}

/* Writes the state when it changed (any thread but under no lock). */
static void save_if_dirty(ixs_policy *p, bool always) {
    pthread_mutex_lock(&p->mu);
    char *text = (p->dirty || always) ? state_text(p) : NULL;
    if (text) p->dirty = false;
    pthread_mutex_unlock(&p->mu);
    if (!text) return;
    if (!ix__srv_write_atomically(p->state_path, text)) {
        pthread_mutex_lock(&p->mu);
        p->dirty = true; /* the next round tries again */
        pthread_mutex_unlock(&p->mu);
    }
    free(text);
}

static void *saver_main(void *arg) {
    ixs_policy *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += SAVE_PERIOD_S;
        pthread_cond_timedwait(&p->cv, &p->mu, &until);
        if (p->stop || !p->dirty) continue;
        pthread_mutex_unlock(&p->mu);
        save_if_dirty(p, false);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- life cycle --------------------------------------------------------------- */

ix_status ix__policy_create(ix_server *s, const ix_server_params *sp, ix_errbuf *err) {
    ixs_policy *p = ix_calloc(1, sizeof *p);
    if (!p) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->now = real_now;
    p->base = s->n_api_keys;
    p->timeout_s = sp->request_timeout_s;
    p->cost_per_hour = sp->cost_per_hour_usd;
    s->policy = p;
    if (!sp->keys_file || !*sp->keys_file) return IX_OK;
    if (!(p->keys_path = ix_strdup(sp->keys_file))) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    pkey *fresh;
    size_t n;
    ix_status st = read_keys(s, sp->keys_file, &fresh, &n, err);
    if (st != IX_OK) return st;
    st = merge_keys(p, fresh, n, now_ns(p));
    keys_free(fresh, n);
    if (st != IX_OK) return ix_errf(err, st, "out of memory");
    /* The usage state: given, or beside the keys file. */
    if (sp->usage_state && *sp->usage_state) {
        p->state_path = ix_strdup(sp->usage_state);
    } else if ((p->state_path = ix_malloc(strlen(sp->keys_file) + 16))) {
        sprintf(p->state_path, "%s.usage.json", sp->keys_file);
    }
    if (!p->state_path) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    if ((st = load_state(p, err)) != IX_OK) return st;
    if (pthread_create(&p->saver, NULL, saver_main, p) != 0)
        return ix_errf(err, IX_ERR_NOMEM, "cannot start the usage state saver thread");
    p->saver_on = true;
    IX_LOGI("server: %zu key(s) from %s; usage state %s", p->n, sp->keys_file, p->state_path);
    return IX_OK;
}

void ix__policy_destroy(ix_server *s) {
    ixs_policy *p = s->policy;
    if (!p) return;
    if (p->saver_on) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->saver, NULL);
        save_if_dirty(p, true);
    }
    for (size_t i = 0; i < p->n; i++) {
        key_free(p->keys[i]);
        ix_free(p->keys[i]);
    }
    ix_free(p->keys);
    ix_free(p->keys_path);
    ix_free(p->state_path);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    ix_free(p);
    s->policy = NULL;
}

int ix__policy_auth(ix_server *s, const char *token) {
    ixs_policy *p = s->policy;
    if (!p || !p->keys_path) return -1;
    uint8_t h[32];
    ix__sha256(token, strlen(token), h);
    int found = -1;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n; i++) {
        unsigned diff = 0;
        for (int b = 0; b < 32; b++) diff |= h[b] ^ p->keys[i]->sha[b];
        if (diff == 0 && found < 0 && !p->keys[i]->revoked) found = (int)(p->base + i);
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

ix_status ix_server_reload_keys(ix_server *s, ix_errbuf *err) {
    ixs_policy *p = s->policy;
    if (!p || !p->keys_path) return ix_errf(err, IX_ERR_STATE, "the server has no keys file");
    pkey *fresh;
    size_t n;
    ix_status st = read_keys(s, p->keys_path, &fresh, &n, err);
    if (st != IX_OK) return st;
    pthread_mutex_lock(&p->mu);
    st = merge_keys(p, fresh, n, now_ns(p));
    size_t live = 0;
    for (size_t i = 0; i < p->n; i++) live += !p->keys[i]->revoked;
    p->dirty = true; /* new keys enter the state */
    pthread_mutex_unlock(&p->mu);
    keys_free(fresh, n);
    if (st != IX_OK) return ix_errf(err, st, "out of memory");
    IX_LOGI("server: reloaded %s: %zu key(s)", p->keys_path, live);
    return IX_OK;
}

/* ---- admission ------------------------------------------------------------------ */

static int reject(ixs_conn *cc, pkey *k, reason why, double retry_s) {
    k->rejected[why]++;
    cc->policy_retry_s = retry_s;
    return -1;
}

/* The request's timeout: its `timeout` (seconds), at most the server's. */
static int parse_timeout(ixs_policy *p, json_t *req, ixs_job_pol *jp, ixs_err *e) {
    json_t *v = json_object_get(req, "timeout");
    double t = p->timeout_s > 0 ? p->timeout_s : 0;
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 86400)
            return IXS_BAD(e, "timeout", "'timeout' must be a number of seconds in (0, 86400]");
        if (t <= 0 || json_number_value(v) < t) t = json_number_value(v);
    }
    jp->timeout_s = t;
    jp->deadline_ns = t > 0 ? now_ns(p) + (uint64_t)(t * 1e9) : 0;
    if (jp->deadline_ns == 0 && t > 0) jp->deadline_ns = 1;
    return 0;
}

/* Checks of the request against the key's fixed rules (under p->mu). */
static int admit_rules(ixs_conn *cc, pkey *k, json_t *req, ix_request_params *r, size_t max_prompt,
                       bool max_given, ixs_err *e) {
    ix_server *s = cc->s;
    if (k->revoked) { /* a reload took it away since it authenticated */
        ix__srv_errf(e, 401, "invalid_request_error", NULL, "Incorrect API key provided: it was revoked.");
        e->code = "invalid_api_key";
        return -1;
    }
    if (k->models) {
        if (!model_ok(s, k)) {
            ix__srv_errf(e, 404, "invalid_request_error", "model",
                         "The model `%s` does not exist or you do not have access to it.", s->model_name);
            e->code = "model_not_found";
            return reject(cc, k, R_MODEL, 0);
        }
    }
    if (k->max_tokens) {
        if (max_given && r->max_tokens > k->max_tokens) {
            const char *param = json_object_get(req, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
            IXS_BAD(e, param, "'%s' is %d; this API key allows at most %lld tokens per completion", param,
                    (int)r->max_tokens, (long long)k->max_tokens);
            e->code = "max_tokens_exceeded";
            return reject(cc, k, R_MAX_TOKENS, 0);
        }
        if (r->max_tokens <= 0 || r->max_tokens > k->max_tokens) { /* none asked: the key's cap, within the context */
            int64_t room = (int64_t)s->n_ctx - (int64_t)max_prompt;
            r->max_tokens = (int32_t)(k->max_tokens < room ? k->max_tokens : room > 0 ? room : 1);
        }
    }
    if (k->has_priority) {
        /* a request may lower its priority, never raise it past its key's */
        bool asked = json_is_integer(json_object_get(req, "priority"));
        r->priority = asked && r->priority < k->priority ? r->priority : k->priority;
    }
    if (k->budget_tokens && k->spent_tokens >= k->budget_tokens) {
        ix__srv_errf(e, 429, "insufficient_quota", NULL,
                     "You exceeded the token budget of this API key (%lld of %lld tokens spent).",
                     (long long)k->spent_tokens, (long long)k->budget_tokens);
        e->code = "insufficient_quota";
        return reject(cc, k, R_BUDGET, -1);
    }
    if (k->budget_usd > 0 && k->spent_usd >= k->budget_usd) {
        ix__srv_errf(e, 429, "insufficient_quota", NULL,
                     "You exceeded the USD budget of this API key (%.6f of %.6f USD spent).", k->spent_usd,
                     k->budget_usd);
        e->code = "insufficient_quota";
        return reject(cc, k, R_BUDGET, -1);
    }
    return 0;
}

int ix__policy_admit(ixs_conn *cc, json_t *req, ix_request_params *r, const size_t *prompt_tokens, int n_prompts,
                     bool max_tokens_given, ixs_job_pol *jp, ixs_err *e) {
    ix_server *s = cc->s;
    ixs_policy *p = s->policy;
    jp->key = -1;
    atomic_init(&jp->timed_out, false);
    if (parse_timeout(p, req, jp, e)) return -1;
    size_t max_prompt = 0;
    for (int i = 0; i < n_prompts; i++) max_prompt = prompt_tokens[i] > max_prompt ? prompt_tokens[i] : max_prompt;
    pthread_mutex_lock(&p->mu);
    pkey *k = key_of(s, cc->key);
    if (!k) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    int rc = admit_rules(cc, k, req, r, max_prompt, max_tokens_given, e);
    if (rc) goto out;
    /* What it may use of the tokens bucket: prompts, and each choice's
     * completion (max_tokens, or the context left). */
    int64_t reserve = 0;
    for (int i = 0; i < n_prompts; i++) {
        int64_t room = (int64_t)s->n_ctx - (int64_t)prompt_tokens[i];
        int64_t each = r->max_tokens > 0 ? r->max_tokens : room > 0 ? room : 0;
        reserve += (int64_t)prompt_tokens[i] + each * (r->n > 0 ? r->n : 1);
    }
    if (k->max_concurrent && k->active >= k->max_concurrent) {
        ix__srv_errf(e, 429, "rate_limit_exceeded", NULL,
                     "Rate limit reached for this API key on concurrent requests: limit %lld, in flight %d. "
                     "Retry when one of them finishes.",
                     (long long)k->max_concurrent, (int)k->active);
        rc = reject(cc, k, R_CONCURRENCY, 1);
        goto out;
    }
    uint64_t t = now_ns(p);
    bucket_refill(&k->req, t);
    bucket_refill(&k->tok, t);
    if (k->rpm && k->req.level < 1) {
        double w = bucket_wait_s(&k->req, 1);
        ix__srv_errf(e, 429, "rate_limit_exceeded", NULL,
                     "Rate limit reached for this API key on requests per minute: limit %lld. Please try again "
                     "in %.3fs.", (long long)k->rpm, w);
        rc = reject(cc, k, R_REQUESTS, w);
        goto out;
    }
    if (k->tpm && reserve > k->tpm) {
        ix__srv_errf(e, 429, "rate_limit_exceeded", NULL,
                     "Request too large for this API key on tokens per minute: limit %lld, requested %lld (prompt "
                     "plus max_tokens for every choice). Lower max_tokens, n or the prompt.",
                     (long long)k->tpm, (long long)reserve);
        rc = reject(cc, k, R_TOKENS, -1);
        goto out;
    }
    if (k->tpm && k->tok.level < (double)reserve) {
        double w = bucket_wait_s(&k->tok, (double)reserve);
        ix__srv_errf(e, 429, "rate_limit_exceeded", NULL,
                     "Rate limit reached for this API key on tokens per minute: limit %lld, available %lld, "
                     "requested %lld. Please try again in %.3fs.",
                     (long long)k->tpm, (long long)floor(k->tok.level), (long long)reserve, w);
        rc = reject(cc, k, R_TOKENS, w);
        goto out;
    }
    if (k->rpm) k->req.level -= 1;
    if (k->tpm) k->tok.level -= (double)reserve;
    k->active++;
    k->n_requests++;
    jp->key = cc->key;
    jp->admitted = true;
    jp->reserved_tokens = k->tpm ? reserve : 0;
out:
    if (rc && e->http == 429 && strcmp(e->type, "insufficient_quota")) e->code = "rate_limit_exceeded";
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void ix__policy_job_end(ix_server *s, ixs_job_pol *jp, const ix_usage *u, double cost_usd) {
    ixs_policy *p = s->policy;
    if (!p || jp->settled) return;
    jp->settled = true;
    if (!jp->admitted) return;
    int64_t used = (int64_t)u->prompt_tokens + (int64_t)u->completion_tokens;
    pthread_mutex_lock(&p->mu);
    pkey *k = key_of(s, jp->key); /* admitted: a keys-file key, never freed */
    k->active--;
    if (k->tpm) {
        bucket_refill(&k->tok, now_ns(p));
        k->tok.level += (double)(jp->reserved_tokens - used);
        if (k->tok.level > k->tok.cap) k->tok.level = k->tok.cap;
    }
    k->n_prompt += (uint64_t)u->prompt_tokens;
    k->n_completion += (uint64_t)u->completion_tokens;
    k->spent_tokens += used;
    if (cost_usd > 0) {
        k->spent_usd += cost_usd;
        k->usd += cost_usd;
    }
    p->dirty = true;
    pthread_mutex_unlock(&p->mu);
}

/* ---- timeouts ------------------------------------------------------------------- */

bool ix__policy_expired(ix_server *s, ixs_job_pol *jp) {
    if (!jp->deadline_ns || atomic_load(&jp->timed_out)) return false;
    ixs_policy *p = s->policy;
    pthread_mutex_lock(&p->mu);
    bool late = now_ns(p) >= jp->deadline_ns && !atomic_exchange(&jp->timed_out, true);
    pkey *k = late && jp->admitted ? key_of(s, jp->key) : NULL;
    if (k) k->rejected[R_TIMEOUT]++;
    pthread_mutex_unlock(&p->mu);
    return late;
}

bool ix__policy_timeout_error(const ixs_job_pol *jp, ixs_err *e) {
    if (!atomic_load(&jp->timed_out)) return false;
    ix__srv_errf(e, 408, "timeout", "timeout",
                 "The request timed out after %g s and was cancelled (send a larger 'timeout', or fewer tokens).",
                 jp->timeout_s);
    e->code = "request_timeout";
    return true;
}

void ix__policy_stream_error(const ixs_job_pol *jp, json_t *chunk) {
    ixs_err e;
    if (!chunk || !ix__policy_timeout_error(jp, &e)) return;
    json_object_set_new(chunk, "error", json_pack("{s:s, s:s, s:s, s:s}", "message", e.msg, "type", e.type, "param",
                                                  e.param, "code", e.code));
}

/* ---- headers, /v1/usage, /metrics ---------------------------------------------- */

/* OpenAI's reset format: "1s", "6m0s", "250ms". */
static void duration(double s, char *buf, size_t size) {
    if (s < 1) {
        snprintf(buf, size, "%dms", (int)ceil(s * 1000));
    } else if (s < 60) {
        snprintf(buf, size, "%gs", ceil(s * 1000) / 1000);
    } else {
        long whole = (long)ceil(s);
        snprintf(buf, size, "%ldm%lds", whole / 60, whole % 60);
    }
}

static void limit_headers(struct MHD_Response *r, const char *what, const bucket *b) {
    char name[64], v[48];
    snprintf(name, sizeof name, "x-ratelimit-limit-%s", what);
    snprintf(v, sizeof v, "%.0f", b->cap);
    MHD_add_response_header(r, name, v);
    snprintf(name, sizeof name, "x-ratelimit-remaining-%s", what);
    snprintf(v, sizeof v, "%.0f", floor(b->level > 0 ? b->level : 0));
    MHD_add_response_header(r, name, v);
    snprintf(name, sizeof name, "x-ratelimit-reset-%s", what);
    duration(bucket_wait_s(b, b->cap), v, sizeof v);
    MHD_add_response_header(r, name, v);
}

bool ix__policy_headers(ixs_conn *cc, struct MHD_Response *r, int status) {
    ix_server *s = cc->s;
    ixs_policy *p = s->policy;
    bucket req = {0}, tok = {0};
    if (p && cc->key >= 0 && (size_t)cc->key >= s->n_api_keys) {
        pthread_mutex_lock(&p->mu);
        pkey *k = key_of(s, cc->key);
        if (k) {
            uint64_t t = now_ns(p);
            bucket_refill(&k->req, t);
            bucket_refill(&k->tok, t);
            req = k->req, tok = k->tok;
        }
        pthread_mutex_unlock(&p->mu);
    }
    if (req.cap > 0) limit_headers(r, "requests", &req);
    if (tok.cap > 0) limit_headers(r, "tokens", &tok);
    if (status != 429 || cc->policy_retry_s == 0) return false;
    if (cc->policy_retry_s > 0) {
        char v[32];
        snprintf(v, sizeof v, "%.0f", ceil(cc->policy_retry_s));
        MHD_add_response_header(r, "Retry-After", v);
    }
    return true;
}

int ix__policy_metrics_access(ixs_conn *cc, ixs_err *e) {
    ix_server *s = cc->s;
    ixs_policy *p = s->policy;
    if (!p || !p->keys_path) return 0; /* no keys file: open, as before */
    if (cc->key >= 0 && (size_t)cc->key < s->n_api_keys) return 0;
    pthread_mutex_lock(&p->mu);
    pkey *k = key_of(s, cc->key);
    bool allowed = k && k->metrics;
    pthread_mutex_unlock(&p->mu);
    if (allowed) return 0;
    if (!k) {
        ix__srv_errf(e, 401, "invalid_request_error", NULL,
                     "Incorrect or missing API key: /metrics needs 'Authorization: Bearer <key>' of a key with "
                     "\"metrics\": true.");
        e->code = "invalid_api_key";
    } else {
        ix__srv_errf(e, 403, "permission_error", NULL, "This API key may not read /metrics (its \"metrics\" is not "
                     "true in the keys file).");
        e->code = "permission_denied";
    }
    return -1;
}

static json_t *jlimit(int64_t v) { return v ? json_integer(v) : json_null(); }

static json_t *window_json(const bucket *b) {
    if (b->cap <= 0) return json_null();
    return json_pack("{s:I, s:I, s:f}", "limit", (json_int_t)b->cap, "remaining",
                     (json_int_t)floor(b->level > 0 ? b->level : 0), "reset_seconds",
                     round(bucket_wait_s(b, b->cap) * 1e3) / 1e3);
}

enum MHD_Result ix__policy_usage(ixs_conn *cc) {
    ix_server *s = cc->s;
    ixs_policy *p = s->policy;
    pthread_mutex_lock(&p->mu);
    pkey *k = key_of(s, cc->key);
    if (!k) { /* a plain key, or no keys at all */
        pthread_mutex_unlock(&p->mu);
        return ix__srv_reply_json(cc, 200, json_pack("{s:s, s:n, s:b}", "object", "usage", "key", "unlimited", 1));
    }
    uint64_t t = now_ns(p);
    bucket_refill(&k->req, t);
    bucket_refill(&k->tok, t);
    json_t *models = json_array();
    for (size_t m = 0; models && m < k->n_models; m++) json_array_append_new(models, json_string(k->models[m]));
    json_t *o = json_pack(
        "{s:s, s:s, s:b, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}, s:o, s:o, s:{s:o, s:i},"
        " s:{s:{s:o, s:I, s:o}, s:{s:o, s:f, s:o}}, s:{s:I, s:I, s:I, s:f}}",
        "object", "usage", "key", k->name, "unlimited", 0, "limits", "requests_per_minute", jlimit(k->rpm),
        "tokens_per_minute", jlimit(k->tpm), "max_concurrent", jlimit(k->max_concurrent), "max_tokens",
        jlimit(k->max_tokens), "budget_tokens", jlimit(k->budget_tokens), "budget_usd",
        k->budget_usd > 0 ? json_real(k->budget_usd) : json_null(), "models",
        k->models && models ? models : (json_decref(models), json_null()), "priority",
        k->has_priority ? json_integer(k->priority) : json_null(), "metrics", k->metrics, "requests",
        window_json(&k->req), "tokens", window_json(&k->tok), "concurrent", "limit", jlimit(k->max_concurrent),
        "active", (int)k->active, "budget", "tokens", "limit", jlimit(k->budget_tokens), "spent",
        (json_int_t)k->spent_tokens, "remaining",
        k->budget_tokens ? json_integer(k->budget_tokens > k->spent_tokens ? k->budget_tokens - k->spent_tokens : 0)
                         : json_null(),
        "usd", "limit", k->budget_usd > 0 ? json_real(k->budget_usd) : json_null(), "spent", k->spent_usd,
        "remaining", k->budget_usd > 0 ? json_real(k->budget_usd > k->spent_usd ? k->budget_usd - k->spent_usd : 0)
                                       : json_null(),
        "totals", "requests", (json_int_t)k->n_requests, "prompt_tokens", (json_int_t)k->n_prompt,
        "completion_tokens", (json_int_t)k->n_completion, "cost_usd", k->usd);
    json_t *rej = json_object();
    for (int r = 0; rej && r < R_N; r++) json_object_set_new(rej, k_reason_names[r], json_integer((json_int_t)k->rejected[r]));
    if (o && rej) json_object_set_new(o, "rejected", rej);
    else json_decref(rej);
    pthread_mutex_unlock(&p->mu);
    return ix__srv_reply_json(cc, o ? 200 : 500, o);
}

/* The per-key families of /metrics: one value of a key each (get), or, for
 * the last row (get NULL), one sample per refusal reason. */
static double m_requests(const pkey *k) { return (double)k->n_requests; }
static double m_prompt(const pkey *k) { return (double)k->n_prompt; }
static double m_completion(const pkey *k) { return (double)k->n_completion; }
static double m_usd(const pkey *k) { return k->usd; }
static double m_spent_tokens(const pkey *k) { return (double)k->spent_tokens; }
static double m_spent_usd(const pkey *k) { return k->spent_usd; }
static double m_active(const pkey *k) { return (double)k->active; }

static const struct key_family {
    const char *name, *type, *help;
    double (*get)(const pkey *k);
} k_key_families[] = {
    {"inferx:key_requests_total", "counter", "Requests admitted, by API key (its name in the keys file).", m_requests},
    {"inferx:key_prompt_tokens_total", "counter", "Prompt tokens of finished requests, by API key.", m_prompt},
    {"inferx:key_generation_tokens_total", "counter", "Generated tokens of finished requests, by API key.",
     m_completion},
    {"inferx:key_cost_usd_total", "counter", "Cost of finished requests (--cost-per-hour), by API key.", m_usd},
    {"inferx:key_budget_spent_tokens", "gauge", "Tokens charged to the key's budget (kept across restarts).",
     m_spent_tokens},
    {"inferx:key_budget_spent_usd", "gauge", "USD charged to the key's budget (kept across restarts).", m_spent_usd},
    {"inferx:key_requests_in_flight", "gauge", "Requests of the key admitted and not yet finished.", m_active},
    {"inferx:key_rejected_total", "counter", "Requests refused or cut by the key's policy, by reason.", NULL},
};

ix_status ix__policy_metrics_render(ix_server *s, ix_buf *b, const char *model_label, size_t model_label_len) {
    ixs_policy *p = s->policy;
    if (!p || !p->keys_path) return IX_OK;
    ix_status st = IX_OK;
    int ml = (int)model_label_len;
    pthread_mutex_lock(&p->mu);
    for (size_t f = 0; f < IX_ARRAY_LEN(k_key_families) && st == IX_OK; f++) {
        const struct key_family *kf = &k_key_families[f];
        st = ix_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", kf->name, kf->help, kf->name, kf->type);
        for (size_t i = 0; i < p->n && st == IX_OK; i++) {
            const pkey *k = p->keys[i];
            if (kf->get)
                st = ix_buf_printf(b, "%s{%.*s,key=\"%s\"} %.17g\n", kf->name, ml, model_label, k->name, kf->get(k));
            for (int r = 0; !kf->get && r < R_N && st == IX_OK; r++)
                st = ix_buf_printf(b, "%s{%.*s,key=\"%s\",reason=\"%s\"} %llu\n", kf->name, ml, model_label, k->name,
                                   k_reason_names[r], (unsigned long long)k->rejected[r]);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}
