/*
 * Sessions: conversations whose cached blocks are pinned above anonymous
 * prefixes, with an expiry, and an index that survives restarts.
 *
 * A session record lists its blocks in prefix order, each as (pool block,
 * cid, chained key). The pool block and cid say where it is in RAM: the
 * entry is live only while that block still carries that cid (an eviction
 * or a reset changes the cid, so a stale entry is recognised without any
 * back pointer from blocks to sessions). The key is what the disk tier
 * stores it under, so a session whose blocks left RAM (or a session loaded
 * after a restart) still knows them. A block's `pin` counts the live
 * entries naming it; pinned, unreferenced blocks sit on the pinned LRU
 * list, which the pool takes from only when the anonymous list is empty.
 *
 * The index file (one per model fingerprint, written through the store's
 * atomic named files):
 *   "IXSESS01" u64 model_fp u32 n_sessions u32 0
 *   per session: u64 id, tenant, ns; i64 expires_ms; i32 n_blocks, 0; u64 key[n_blocks]
 *   u64 XXH3-64 of everything before it
 */
#include "kv_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "inferx/kvstore.h"

#define SESS_MAGIC "IXSESS01"

typedef struct kv_session {
    uint64_t id, tenant, ns;
    int64_t expires_ms;
    int32_t n_blocks;
    int32_t *block; /* (n_blocks) pool block or KV_NIL; one allocation with cid and key */
    uint64_t *cid;  /* (n_blocks) the block's cid when pinned */
    uint64_t *key;  /* (n_blocks) chained prefix hash */
} kv_session;

static bool entry_live(const ix_kv *kv, const kv_session *ss, int32_t i) {
    int32_t b = ss->block[i];
    return b != KV_NIL && ss->cid[i] != 0 && kv->blocks[b].cid == ss->cid[i];
}

static void unpin_all(ix_kv *kv, kv_session *ss) {
    for (int32_t i = 0; i < ss->n_blocks; i++) {
        if (entry_live(kv, ss, i)) ix__kv_block_unpin(kv, ss->block[i]);
        ss->block[i] = KV_NIL;
        ss->cid[i] = 0;
    }
}

/* A live session's blocks on disk are pinned there too: the store's size
 * bound evicts anonymous blocks first and never these (pin: true), until
 * the session expires or is dropped (false). A pin that cannot be recorded
 * only leaves that block an ordinary LRU victim. */
static void disk_pin(ix_kv *kv, const kv_session *ss, bool pin) {
    if (!kv->disk) return;
    for (int32_t i = 0; i < ss->n_blocks; i++) {
        ix_kvstore_key k = {kv->disk_fp, ss->ns, ss->key[i]};
        ix_kvstore_pin(kv->disk, &k, pin);
    }
}

static ix_status entries_alloc(kv_session *ss, int32_t n) {
    size_t each = sizeof(int32_t) + 2 * sizeof(uint64_t);
    unsigned char *mem = ix_malloc((size_t)(n ? n : 1) * each);
    if (!mem) return IX_ERR_NOMEM;
    ix_free(ss->key); /* the allocation starts with the keys */
    ss->key = (uint64_t *)(void *)mem;
    ss->cid = ss->key + n;
    ss->block = (int32_t *)(void *)(ss->cid + n);
    ss->n_blocks = n;
    return IX_OK;
}

static kv_session *find(const ix_kv *kv, uint64_t id, uint64_t tenant) {
    for (int32_t i = 0; i < kv->n_sessions; i++)
        if (kv->sessions[i].id == id && kv->sessions[i].tenant == tenant) return &kv->sessions[i];
    return NULL;
}

static kv_session *add(ix_kv *kv, uint64_t id, uint64_t tenant) {
    if (kv->n_sessions >= IX_KV_MAX_SESSIONS) return NULL;
    if (kv->n_sessions == kv->cap_sessions) {
        int32_t cap = kv->cap_sessions ? kv->cap_sessions * 2 : 16;
        kv_session *g = ix_realloc(kv->sessions, (size_t)cap * sizeof *g);
        if (!g) return NULL;
        kv->sessions = g;
        kv->cap_sessions = cap;
    }
    kv_session *ss = &kv->sessions[kv->n_sessions];
    memset(ss, 0, sizeof *ss);
    if (entries_alloc(ss, 0) != IX_OK) return NULL;
    ss->id = id;
    ss->tenant = tenant;
    kv->n_sessions++;
    return ss;
}

static void remove_at(ix_kv *kv, kv_session *ss) {
    unpin_all(kv, ss);
    disk_pin(kv, ss, false);
    ix_free(ss->key);
    *ss = kv->sessions[--kv->n_sessions];
}

void ix__kv_sessions_free(ix_kv *kv) {
    for (int32_t i = 0; i < kv->n_sessions; i++) ix_free(kv->sessions[i].key);
    ix_free(kv->sessions);
    kv->sessions = NULL;
    kv->n_sessions = kv->cap_sessions = 0;
}

ix_status ix_kv_session_pin(ix_kv *kv, uint64_t id, uint64_t tenant, int32_t seq, int64_t expires_ms) {
    if (!kv) return IX_ERR_INVALID;
    kv_seq *s = ix__kv_seq_get(kv, seq);
    if (!s) return ix_errf(&kv->err, IX_ERR_INVALID, "session_pin: no sequence %d", (int)seq);
    kv_session *ss = find(kv, id, tenant);
    bool fresh = !ss;
    if (fresh && !(ss = add(kv, id, tenant)))
        return kv->n_sessions >= IX_KV_MAX_SESSIONS
                   ? ix_errf(&kv->err, IX_FULL, "session_pin: %d sessions live", (int)IX_KV_MAX_SESSIONS)
                   : ix_errf(&kv->err, IX_ERR_NOMEM, "session_pin: out of memory");
    /* The new set first, then the old one let go: blocks in both never
     * leave the pinned list in between. */
    kv_session old = *ss;
    ss->key = NULL;
    int32_t n = s->state == KV_SEQ_ACTIVE && s->hashable ? s->n_hashed : 0;
    if (entries_alloc(ss, n) != IX_OK) {
        ss->key = old.key;
        if (fresh) remove_at(kv, ss);
        return ix_errf(&kv->err, IX_ERR_NOMEM, "session_pin: out of memory");
    }
    for (int32_t i = 0; i < n; i++) {
        ss->key[i] = s->chain[i].key;
        ss->block[i] = KV_NIL;
        ss->cid[i] = 0;
        int32_t b = i >= s->n_released ? s->table[i] : KV_NIL;
        if (b == KV_NIL || s->chain[i].cid == 0) continue;
        if (kv->blocks[b].cid != s->chain[i].cid) /* a duplicate: the cached twin holds the same K/V */
            b = ix__kv_cache_find(kv, s->chain[i].key, s->ns, i ? s->chain[i - 1].cid : 0, kv__block_tokens(kv, b));
        if (b == KV_NIL || kv->blocks[b].cid != s->chain[i].cid) continue;
        ss->block[i] = b;
        ss->cid[i] = kv->blocks[b].cid;
        ix__kv_block_pin(kv, b);
    }
    ss->ns = s->ns;
    ss->expires_ms = expires_ms;
    disk_pin(kv, ss, true); /* the new set first: shared blocks stay pinned throughout */
    unpin_all(kv, &old);
    disk_pin(kv, &old, false);
    ix_free(old.key);
    return IX_OK;
}

static bool on_disk(ix_kv *kv, const kv_session *ss, int32_t i) {
    if (!kv->disk) return false;
    ix_kvstore_key k = {kv->disk_fp, ss->ns, ss->key[i]};
    return ix_kvstore_contains(kv->disk, &k);
}

ix_status ix_kv_session_get(ix_kv *kv, uint64_t id, uint64_t tenant, ix_kv_session_info *out) {
    memset(out, 0, sizeof *out);
    kv_session *ss = kv ? find(kv, id, tenant) : NULL;
    if (!ss) return IX_ERR_NOT_FOUND;
    out->n_blocks = ss->n_blocks;
    out->n_tokens = ss->n_blocks * kv->p.block_size;
    out->expires_ms = ss->expires_ms;
    for (int32_t i = 0; i < ss->n_blocks; i++) {
        out->n_blocks_ram += entry_live(kv, ss, i);
        out->n_blocks_disk += on_disk(kv, ss, i);
    }
    return IX_OK;
}

ix_status ix_kv_session_save(ix_kv *kv, uint64_t id, uint64_t tenant, int32_t *n_written) {
    if (n_written) *n_written = 0;
    kv_session *ss = kv ? find(kv, id, tenant) : NULL;
    if (!ss) return IX_ERR_NOT_FOUND;
    if (!kv->disk) return ix_errf(&kv->err, IX_ERR_STATE, "session_save: no disk tier");
    int32_t n = 0;
    ix_status st = IX_OK;
    for (int32_t i = 0; i < ss->n_blocks && st == IX_OK; i++) {
        if (!entry_live(kv, ss, i) || on_disk(kv, ss, i)) continue;
        int32_t b = ss->block[i];
        ix_kvstore_key k = {kv->disk_fp, ss->ns, ss->key[i]};
        st = ix_kvstore_put(kv->disk, &k, kv__block_tokens(kv, b), kv->p.block_size, kv__block_data(kv, b),
                            kv->lay.block_stride_bytes);
        if (st == IX_OK) n++, kv->dstats.blocks_out++;
    }
    ix_kvstore_flush(kv->disk); /* blocks queued earlier are on disk too */
    if (n_written) *n_written = n;
    return st == IX_OK ? IX_OK : ix_errf(&kv->err, st, "session_save: writing a block failed");
}

/* Whether a live session other than ss lists key k of namespace ns. */
static bool key_shared(const ix_kv *kv, const kv_session *ss, uint64_t ns, uint64_t k) {
    for (int32_t j = 0; j < kv->n_sessions; j++) {
        const kv_session *o = &kv->sessions[j];
        if (o == ss || o->ns != ns) continue;
        for (int32_t i = 0; i < o->n_blocks; i++)
            if (o->key[i] == k) return true;
    }
    return false;
}

ix_status ix_kv_session_drop(ix_kv *kv, uint64_t id, uint64_t tenant) {
    kv_session *ss = kv ? find(kv, id, tenant) : NULL;
    if (!ss) return IX_ERR_NOT_FOUND;
    for (int32_t i = 0; i < ss->n_blocks; i++) {
        if (entry_live(kv, ss, i)) {
            int32_t b = ss->block[i];
            ix__kv_block_unpin(kv, b);
            if (kv->blocks[b].pin == 0 && kv->blocks[b].ref == 0) ix__kv_block_forget(kv, b);
        }
        ss->block[i] = KV_NIL;
        ss->cid[i] = 0;
        if (kv->disk && !key_shared(kv, ss, ss->ns, ss->key[i])) {
            ix_kvstore_key k = {kv->disk_fp, ss->ns, ss->key[i]};
            ix_kvstore_remove(kv->disk, &k);
        }
    }
    remove_at(kv, ss);
    kv->n_session_dropped++;
    return IX_OK;
}

int32_t ix_kv_session_expire(ix_kv *kv, int64_t now_ms) {
    if (!kv) return 0;
    int32_t n = 0;
    for (int32_t i = 0; i < kv->n_sessions;) {
        kv_session *ss = &kv->sessions[i];
        if (ss->expires_ms > 0 && ss->expires_ms <= now_ms) {
            remove_at(kv, ss); /* the last record moves into i */
            n++;
        } else {
            i++;
        }
    }
    kv->n_session_expired += n;
    return n;
}

void ix_kv_get_session_stats(const ix_kv *kv, ix_kv_session_stats *out) {
    out->n_sessions = kv->n_sessions;
    out->n_pinned_blocks = kv->n_pinned;
    out->n_expired = kv->n_session_expired;
    out->n_dropped = kv->n_session_dropped;
}

/* ---- the index file ------------------------------------------------------------ */

static void index_name(const ix_kv *kv, char *buf, size_t n) {
    snprintf(buf, n, "sessions-%016" PRIx64, kv->disk_fp);
}

ix_status ix_kv_sessions_persist(ix_kv *kv) {
    if (!kv || !kv->disk) return IX_ERR_STATE;
    ix_buf b = {0};
    uint32_t count = (uint32_t)kv->n_sessions, zero = 0;
    bool ok = ix_buf_append(&b, SESS_MAGIC, 8) == IX_OK && ix_buf_append(&b, &kv->disk_fp, 8) == IX_OK &&
              ix_buf_append(&b, &count, 4) == IX_OK && ix_buf_append(&b, &zero, 4) == IX_OK;
    for (int32_t i = 0; ok && i < kv->n_sessions; i++) {
        const kv_session *ss = &kv->sessions[i];
        uint64_t head[4] = {ss->id, ss->tenant, ss->ns, (uint64_t)ss->expires_ms};
        int32_t nb[2] = {ss->n_blocks, 0};
        ok = ix_buf_append(&b, head, sizeof head) == IX_OK && ix_buf_append(&b, nb, sizeof nb) == IX_OK &&
             ix_buf_append(&b, ss->key, (size_t)ss->n_blocks * sizeof *ss->key) == IX_OK;
    }
    uint64_t sum = ok ? XXH3_64bits(b.data, b.len) : 0;
    ok = ok && ix_buf_append(&b, &sum, 8) == IX_OK;
    char name[64];
    index_name(kv, name, sizeof name);
    ix_status st = ok ? ix_kvstore_put_file(kv->disk, name, b.data, b.len) : IX_ERR_NOMEM;
    ix_buf_free(&b);
    return st;
}

/* A bounded reader over the index file's bytes. */
typedef struct rd {
    const unsigned char *p;
    size_t n, at;
} rd;

static bool take(rd *r, void *out, size_t n) {
    if (r->n - r->at < n) return false;
    memcpy(out, r->p + r->at, n);
    r->at += n;
    return true;
}

static ix_status load_from(ix_kv *kv, rd *r, int64_t now_ms) {
    char magic[8];
    uint64_t fp, sum;
    uint32_t count, zero;
    if (r->n < 32 || !take(r, magic, 8) || memcmp(magic, SESS_MAGIC, 8) || !take(r, &fp, 8) || fp != kv->disk_fp ||
        !take(r, &count, 4) || !take(r, &zero, 4))
        return IX_ERR_FORMAT;
    memcpy(&sum, r->p + r->n - 8, 8);
    if (sum != XXH3_64bits(r->p, r->n - 8)) return IX_ERR_FORMAT;
    r->n -= 8;
    if (count > IX_KV_MAX_SESSIONS) return IX_ERR_FORMAT;
    for (uint32_t c = 0; c < count; c++) {
        uint64_t head[4];
        int32_t nb[2];
        if (!take(r, head, sizeof head) || !take(r, nb, sizeof nb) || nb[0] < 0 ||
            (size_t)nb[0] > (r->n - r->at) / sizeof(uint64_t))
            return IX_ERR_FORMAT;
        int64_t expires = (int64_t)head[3];
        bool expired = expires > 0 && expires <= now_ms;
        kv_session *ss = expired || find(kv, head[0], head[1]) ? NULL : add(kv, head[0], head[1]);
        if (!ss) { /* expired (or a duplicate): skipped, its blocks ordinary victims */
            r->at += (size_t)nb[0] * sizeof(uint64_t);
            kv->n_session_expired += expired;
            continue;
        }
        if (entries_alloc(ss, nb[0]) != IX_OK) {
            remove_at(kv, ss);
            return IX_ERR_NOMEM;
        }
        take(r, ss->key, (size_t)nb[0] * sizeof(uint64_t));
        for (int32_t i = 0; i < nb[0]; i++) ss->block[i] = KV_NIL, ss->cid[i] = 0;
        ss->ns = head[2];
        ss->expires_ms = expires;
        disk_pin(kv, ss, true);
    }
    return r->at == r->n ? IX_OK : IX_ERR_FORMAT;
}

ix_status ix_kv_sessions_load(ix_kv *kv, int64_t now_ms) {
    if (!kv || !kv->disk) return IX_ERR_STATE;
    char name[64];
    index_name(kv, name, sizeof name);
    void *data;
    size_t n;
    ix_status st = ix_kvstore_get_file(kv->disk, name, &data, &n);
    if (st == IX_ERR_NOT_FOUND) return IX_OK; /* no sessions yet */
    if (st != IX_OK) return ix_errf(&kv->err, st, "sessions: cannot read the index %s", name);
    rd r = {data, n, 0};
    int32_t n0 = kv->n_sessions; /* those loaded are appended after these */
    st = load_from(kv, &r, now_ms);
    ix_free(data);
    if (st != IX_OK) {
        while (kv->n_sessions > n0) remove_at(kv, &kv->sessions[kv->n_sessions - 1]);
        return ix_errf(&kv->err, st, "sessions: the index %s does not check out; starting without sessions", name);
    }
    return IX_OK;
}
