/* inferx kvstore: KV blocks on disk (see include/inferx/kvstore.h).
 *
 * File: a 64-byte header, the block's token ids, the K/V bytes.
 *   0  "IXKVBLK1"          8  version (u32)      12 header bytes (u32: 64 + 4 n_tokens)
 *   16 model fingerprint   24 tenant             32 prefix hash      (u64 each)
 *   40 n_tokens (u32)      44 0 (u32)            48 payload bytes (u64)
 *   56 XXH3-64 of bytes 0..55, the tokens and the payload
 * Little-endian hosts (as the GGUF reader): the fields are written as the
 * host holds them.
 *
 * The index (key -> size, LRU links) lives in a chained hash table under
 * one mutex; file I/O runs outside it. One process per directory: a lock
 * file (flock) says so. */
#include "inferx/kvstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#define KVB_MAGIC "IXKVBLK1"
#define KVB_VERSION 1u
#define KVB_HEADER 64u
#define KVB_MAX_TOKENS (1 << 16)

typedef struct entry {
    ix_kvstore_key k;
    uint64_t bytes;
    struct entry *hnext;       /* hash chain */
    struct entry *prev, *next; /* LRU: head = most recent */
} entry;

typedef struct job {
    ix_kvstore_key k;
    int32_t n_tokens;
    size_t n_bytes;
    struct job *next;
    /* tokens then data follow */
} job;

struct ix_kvstore {
    char *dir;
    uint64_t max_bytes;
    size_t max_queue;
    int lock_fd;
    pthread_mutex_t mu;
    pthread_cond_t cv, idle_cv;
    entry **buckets;
    size_t n_buckets, n_entries;
    entry *lru_head, *lru_tail;
    struct pin **pins; /* pinned keys (ix_kvstore_pin), n_pin_buckets lists */
    size_t n_pin_buckets, n_pins;
    bool indexed, stop;
    uint64_t tmp_seq;
    ix_kvstore_stats st;
    job *q_head, *q_tail;
    job *current; /* the job the writer is writing (under mu: still readable) */
    bool writing;
    pthread_t indexer, writer;
    bool indexer_started, writer_started;
};

ix_kvstore_params ix_kvstore_default_params(void) {
    ix_kvstore_params p = {NULL, 0, 0};
    return p;
}

/* ---- paths ---------------------------------------------------------------------- */

static void block_path(const ix_kvstore *s, const ix_kvstore_key *k, char *buf, size_t n) {
    snprintf(buf, n, "%s/%016" PRIx64 "/%016" PRIx64 "/%02x/%016" PRIx64 ".kvb", s->dir, k->model_fp, k->tenant,
             (unsigned)(k->prefix_hash >> 56), k->prefix_hash);
}

static int mkdir_p(const char *path) { /* every level of a directory path */
    char tmp[4096];
    size_t n = strlen(path);
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++)
        if (tmp[i] == '/' || tmp[i] == '\0') {
            char c = tmp[i];
            tmp[i] = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
            tmp[i] = c;
        }
    return 0;
}

static bool parse_hex64(const char *s, size_t len, uint64_t *out) {
    if (len != 16) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* ---- the index (under mu) ---------------------------------------------------------- */

static size_t bucket_in(size_t n_buckets, const ix_kvstore_key *k) {
    uint64_t h = k->prefix_hash ^ (k->tenant * 0x9E3779B97F4A7C15ull) ^ (k->model_fp * 0xC2B2AE3D27D4EB4Full);
    return (size_t)(h ^ (h >> 29)) & (n_buckets - 1);
}

static size_t bucket_of(const ix_kvstore *s, const ix_kvstore_key *k) { return bucket_in(s->n_buckets, k); }

static bool key_eq(const ix_kvstore_key *a, const ix_kvstore_key *b) {
    return a->prefix_hash == b->prefix_hash && a->tenant == b->tenant && a->model_fp == b->model_fp;
}

static entry *find(ix_kvstore *s, const ix_kvstore_key *k) {
    for (entry *e = s->buckets[bucket_of(s, k)]; e; e = e->hnext)
        if (key_eq(&e->k, k)) return e;
    return NULL;
}

static void lru_unlink(ix_kvstore *s, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else s->lru_head = e->next;
    if (e->next) e->next->prev = e->prev;
    else s->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_head(ix_kvstore *s, entry *e) {
    e->next = s->lru_head;
    e->prev = NULL;
    if (s->lru_head) s->lru_head->prev = e;
    s->lru_head = e;
    if (!s->lru_tail) s->lru_tail = e;
}

static void grow(ix_kvstore *s) {
    size_t nb = s->n_buckets * 2;
    entry **b = ix_calloc(nb, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    for (size_t i = 0; i < s->n_buckets; i++)
        for (entry *e = s->buckets[i], *nx; e; e = nx) {
            nx = e->hnext;
            size_t j = bucket_in(nb, &e->k);
            e->hnext = b[j];
            b[j] = e;
        }
    ix_free(s->buckets);
    s->buckets = b;
    s->n_buckets = nb;
}

/* Records a block as most recent (new, or its size updated); at_tail: as
 * the least recent (the index scan's oldest-first insertions go there). */
static void index_touch(ix_kvstore *s, const ix_kvstore_key *k, uint64_t bytes, bool at_tail) {
    entry *e = find(s, k);
    if (e) {
        s->st.bytes -= e->bytes;
        e->bytes = bytes;
        s->st.bytes += bytes;
        if (!at_tail) {
            lru_unlink(s, e);
            lru_push_head(s, e);
        }
        return;
    }
    if (!(e = ix_calloc(1, sizeof *e))) return; /* unindexed: never evicted, still correct */
    e->k = *k;
    e->bytes = bytes;
    size_t b = bucket_of(s, k);
    e->hnext = s->buckets[b];
    s->buckets[b] = e;
    if (at_tail) {
        e->prev = s->lru_tail;
        if (s->lru_tail) s->lru_tail->next = e;
        s->lru_tail = e;
        if (!s->lru_head) s->lru_head = e;
    } else {
        lru_push_head(s, e);
    }
    s->n_entries++;
    s->st.n_blocks++;
    s->st.bytes += bytes;
    if (s->n_entries > s->n_buckets * 2) grow(s);
}

static void index_remove(ix_kvstore *s, const ix_kvstore_key *k) {
    size_t b = bucket_of(s, k);
    for (entry **pp = &s->buckets[b]; *pp; pp = &(*pp)->hnext)
        if (key_eq(&(*pp)->k, k)) {
            entry *e = *pp;
            *pp = e->hnext;
            lru_unlink(s, e);
            s->st.n_blocks--;
            s->st.bytes -= e->bytes;
            s->n_entries--;
            ix_free(e);
            return;
        }
}

/* ---- pins: blocks the size bound keeps (a live session's) ---- */

typedef struct pin {
    ix_kvstore_key k;
    uint32_t count;
    struct pin *next;
} pin;

static pin **pin_slot(const ix_kvstore *s, const ix_kvstore_key *k) {
    pin **pp = &s->pins[bucket_in(s->n_pin_buckets, k)];
    while (*pp && !key_eq(&(*pp)->k, k)) pp = &(*pp)->next;
    return pp;
}

static bool pinned(const ix_kvstore *s, const ix_kvstore_key *k) { return s->n_pins && *pin_slot(s, k); }

ix_status ix_kvstore_pin(ix_kvstore *s, const ix_kvstore_key *k, bool on) {
    if (!s || !k) return IX_ERR_INVALID;
    ix_status st = IX_OK;
    pthread_mutex_lock(&s->mu);
    if (!s->pins && on) {
        if ((s->pins = ix_calloc(1024, sizeof *s->pins))) s->n_pin_buckets = 1024;
    }
    pin **pp = s->pins ? pin_slot(s, k) : NULL;
    if (!pp) {
        st = on ? IX_ERR_NOMEM : IX_OK;
    } else if (*pp) {
        if (on) {
            (*pp)->count++;
        } else if (--(*pp)->count == 0) {
            pin *p = *pp;
            *pp = p->next;
            ix_free(p);
            s->n_pins--;
        }
    } else if (on) {
        pin *p = ix_malloc(sizeof *p);
        if (p) {
            *p = (pin){*k, 1, NULL};
            *pp = p;
            s->n_pins++;
        } else {
            st = IX_ERR_NOMEM;
        }
        if (p && s->n_pins > 2 * s->n_pin_buckets) { /* grow: the lists stay short */
            size_t nb = s->n_pin_buckets * 2;
            pin **b = ix_calloc(nb, sizeof *b);
            for (size_t i = 0; b && i < s->n_pin_buckets; i++)
                for (pin *q = s->pins[i], *nx; q; q = nx) {
                    nx = q->next;
                    size_t j = bucket_in(nb, &q->k);
                    q->next = b[j];
                    b[j] = q;
                }
            if (b) {
                ix_free(s->pins);
                s->pins = b;
                s->n_pin_buckets = nb;
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void pins_free(ix_kvstore *s) {
    for (size_t i = 0; i < s->n_pin_buckets; i++)
        for (pin *q = s->pins[i], *nx; q; q = nx) {
            nx = q->next;
            ix_free(q);
        }
    ix_free(s->pins);
}

/* Deletes least recent unpinned blocks while over budget (only once
 * indexed: before that the total is not known). Unlinks under mu: one
 * syscall each. */
static void evict_locked(ix_kvstore *s) {
    if (!s->max_bytes || !s->indexed) return;
    for (entry *e = s->lru_tail, *prev; e && s->st.bytes > s->max_bytes; e = prev) {
        prev = e->prev;
        if (pinned(s, &e->k)) continue;
        char path[4096];
        block_path(s, &e->k, path, sizeof path);
        unlink(path);
        s->st.evicted++;
        ix_kvstore_key k = e->k;
        index_remove(s, &k);
    }
}

/* ---- writing ------------------------------------------------------------------------- */

static void put_header(uint8_t *h, const ix_kvstore_key *k, int32_t n_tokens, size_t n_bytes) {
    uint32_t ver = KVB_VERSION, hb = KVB_HEADER + 4u * (uint32_t)n_tokens, nt = (uint32_t)n_tokens, zero = 0;
    uint64_t pb = n_bytes;
    memcpy(h, KVB_MAGIC, 8);
    memcpy(h + 8, &ver, 4);
    memcpy(h + 12, &hb, 4);
    memcpy(h + 16, &k->model_fp, 8);
    memcpy(h + 24, &k->tenant, 8);
    memcpy(h + 32, &k->prefix_hash, 8);
    memcpy(h + 40, &nt, 4);
    memcpy(h + 44, &zero, 4);
    memcpy(h + 48, &pb, 8);
}

static uint64_t checksum(const uint8_t *h56, const int32_t *tokens, int32_t n_tokens, const void *data, size_t n) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, h56, 56);
    XXH3_64bits_update(&st, tokens, (size_t)n_tokens * sizeof *tokens);
    XXH3_64bits_update(&st, data, n);
    return XXH3_64bits_digest(&st);
}

static bool write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

/* Writes the n pieces to path atomically: a temporary in DIR/tmp, fsync
 * when asked, rename over path. false (nothing under path changed) on any
 * error. A block is written without the fsync: after a crash of the machine
 * its file may be empty or torn, and then its size or checksum refuses it
 * (counted, recomputed) -- the cache loses the block, never correctness --
 * while an fsync per block held the writer to one device flush per 37 KB
 * (23 MB/s). The named files (the session index) keep theirs. */
static bool write_atomic(ix_kvstore *s, const char *path, const void *const *parts, const size_t *sizes, int n,
                         bool sync) {
    char tmp[4096];
    pthread_mutex_lock(&s->mu);
    uint64_t seq = ++s->tmp_seq;
    pthread_mutex_unlock(&s->mu);
    snprintf(tmp, sizeof tmp, "%s/tmp/%ld-%" PRIu64 ".tmp", s->dir, (long)getpid(), seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    for (int i = 0; ok && i < n; i++) ok = write_all(fd, parts[i], sizes[i]);
    if (ok && sync && fsync(fd) != 0) ok = false;
    if (fd >= 0 && close(fd) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) unlink(tmp);
    return ok;
}

static ix_status write_block(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens,
                             const void *data, size_t n_bytes) {
    if (n_tokens < 0 || n_tokens > KVB_MAX_TOKENS || (n_tokens && !tokens) || (n_bytes && !data)) return IX_ERR_INVALID;
    char path[4096];
    block_path(s, k, path, sizeof path);
    uint8_t h[KVB_HEADER];
    put_header(h, k, n_tokens, n_bytes);
    uint64_t sum = checksum(h, tokens, n_tokens, data, n_bytes);
    memcpy(h + 56, &sum, 8);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    int rc = mkdir_p(path);
    *slash = '/';
    const void *parts[3] = {h, tokens, data};
    size_t sizes[3] = {sizeof h, (size_t)n_tokens * sizeof *tokens, n_bytes};
    bool ok = rc == 0 && write_atomic(s, path, parts, sizes, 3, false);
    uint64_t total = sizes[0] + sizes[1] + sizes[2];
    pthread_mutex_lock(&s->mu);
    if (ok) {
        s->st.bytes_written += total;
        index_touch(s, k, total, false);
        evict_locked(s);
    } else {
        s->st.write_errors++;
    }
    pthread_mutex_unlock(&s->mu);
    return ok ? IX_OK : IX_ERR_IO;
}

ix_status ix_kvstore_put(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens,
                         const void *data, size_t n_bytes) {
    return write_block(s, k, tokens, n_tokens, data, n_bytes);
}

ix_status ix_kvstore_put_async(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens,
                               const void *data, size_t n_bytes) {
    if (n_tokens < 0 || n_tokens > KVB_MAX_TOKENS) return IX_ERR_INVALID;
    size_t tb = (size_t)n_tokens * sizeof *tokens, need = sizeof(job) + tb + n_bytes;
    pthread_mutex_lock(&s->mu);
    bool full = s->st.queued_bytes + need > s->max_queue;
    if (full) s->st.dropped++;
    pthread_mutex_unlock(&s->mu);
    if (full) return IX_FULL;
    job *j = ix_malloc(need);
    if (!j) return IX_ERR_NOMEM;
    j->k = *k;
    j->n_tokens = n_tokens;
    j->n_bytes = n_bytes;
    j->next = NULL;
    if (tb) memcpy(j + 1, tokens, tb);
    if (n_bytes) memcpy((char *)(j + 1) + tb, data, n_bytes);
    pthread_mutex_lock(&s->mu);
    if (s->q_tail) s->q_tail->next = j;
    else s->q_head = j;
    s->q_tail = j;
    s->st.queued_bytes += need;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return IX_OK;
}

static void *writer_main(void *arg) {
    ix_kvstore *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->q_head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        job *j = s->q_head;
        if (!j) break; /* stop, and nothing left */
        s->q_head = j->next;
        if (!s->q_head) s->q_tail = NULL;
        s->writing = true;
        s->current = j; /* readers still find it until it is on disk */
        pthread_mutex_unlock(&s->mu);
        const int32_t *toks = (const int32_t *)(j + 1);
        write_block(s, &j->k, toks, j->n_tokens, (const char *)(j + 1) + (size_t)j->n_tokens * sizeof *toks,
                    j->n_bytes);
        size_t need = sizeof(job) + (size_t)j->n_tokens * sizeof *toks + j->n_bytes;
        pthread_mutex_lock(&s->mu);
        s->current = NULL;
        ix_free(j);
        s->st.queued_bytes -= need;
        s->writing = false;
        if (!s->q_head) pthread_cond_broadcast(&s->idle_cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void ix_kvstore_flush(ix_kvstore *s) {
    pthread_mutex_lock(&s->mu);
    while (s->q_head || s->writing) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* ---- reading ---------------------------------------------------------------------------- */

static bool read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

/* Checks an open block file against what is expected (expect_tokens may be
 * NULL: any; data may be NULL: read into scratch). Returns NULL when it
 * checks out, else which check failed. */
static const char *check_file(int fd, const ix_kvstore_key *k, const int32_t *expect_tokens, int32_t n_tokens,
                              void *data, size_t n_bytes, uint64_t *total) {
    uint8_t h[KVB_HEADER];
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !read_all(fd, h, sizeof h)) return "truncated header";
    uint32_t ver, hb, nt;
    uint64_t fp, tenant, ph, pb, sum;
    memcpy(&ver, h + 8, 4);
    memcpy(&hb, h + 12, 4);
    memcpy(&fp, h + 16, 8);
    memcpy(&tenant, h + 24, 8);
    memcpy(&ph, h + 32, 8);
    memcpy(&nt, h + 40, 4);
    memcpy(&pb, h + 48, 8);
    memcpy(&sum, h + 56, 8);
    if (memcmp(h, KVB_MAGIC, 8) != 0 || ver != KVB_VERSION) return "not a block file of this version";
    if (fp != k->model_fp) return "another model's block (fingerprint)";
    if (tenant != k->tenant) return "another tenant's block";
    if (ph != k->prefix_hash) return "another prefix's block";
    if (nt > KVB_MAX_TOKENS || hb != KVB_HEADER + 4u * nt) return "bad header size";
    if (expect_tokens && (int32_t)nt != n_tokens) return "another number of tokens";
    if (data && pb != n_bytes) return "another block size";
    if ((uint64_t)sb.st_size != (uint64_t)hb + pb) return "truncated or padded";
    int32_t *toks = ix_malloc((size_t)nt * sizeof *toks + 1);
    void *buf = data ? data : ix_malloc(pb ? (size_t)pb : 1);
    const char *why = NULL;
    if (!toks || !buf) why = "out of memory";
    else if (!read_all(fd, toks, (size_t)nt * sizeof *toks) || !read_all(fd, buf, (size_t)pb)) why = "short read";
    else if (expect_tokens && memcmp(toks, expect_tokens, (size_t)nt * sizeof *toks) != 0) why = "other tokens (a hash collision)";
    else if (checksum(h, toks, (int32_t)nt, buf, (size_t)pb) != sum) why = "checksum mismatch";
    ix_free(toks);
    if (!data) ix_free(buf);
    *total = (uint64_t)sb.st_size;
    return why;
}

/* Under mu: the newest queued (or in-flight) write of key k, or NULL. */
static const job *pending(const ix_kvstore *s, const ix_kvstore_key *k) {
    const job *found = s->current && key_eq(&s->current->k, k) ? s->current : NULL;
    for (const job *j = s->q_head; j; j = j->next)
        if (key_eq(&j->k, k)) found = j;
    return found;
}

ix_status ix_kvstore_get(ix_kvstore *s, const ix_kvstore_key *k, const int32_t *tokens, int32_t n_tokens, void *data,
                         size_t n_bytes, ix_errbuf *err) {
    /* A block on its way to disk is served from memory: what was just
     * evicted is the likeliest to be asked for again. */
    pthread_mutex_lock(&s->mu);
    const job *j = pending(s, k);
    if (j) {
        const int32_t *jt = (const int32_t *)(j + 1);
        bool same = j->n_tokens == n_tokens && j->n_bytes == n_bytes &&
                    (!n_tokens || memcmp(jt, tokens, (size_t)n_tokens * sizeof *jt) == 0);
        if (same) {
            memcpy(data, (const char *)(j + 1) + (size_t)n_tokens * sizeof *jt, n_bytes);
            s->st.hits++;
        } else {
            s->st.rejected++;
        }
        pthread_mutex_unlock(&s->mu);
        return same ? IX_OK
                    : ix_errf(err, IX_ERR_FORMAT, "block %016" PRIx64 " rejected: other tokens or size (queued)",
                              k->prefix_hash);
    }
    pthread_mutex_unlock(&s->mu);
    char path[4096];
    block_path(s, k, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        pthread_mutex_lock(&s->mu);
        s->st.misses++;
        if (find(s, k)) index_remove(s, k); /* deleted behind our back */
        pthread_mutex_unlock(&s->mu);
        return ix_errf(err, IX_ERR_NOT_FOUND, "no block %016" PRIx64, k->prefix_hash);
    }
    uint64_t total = 0;
    const char *why = check_file(fd, k, tokens, n_tokens, data, n_bytes, &total);
    close(fd);
    pthread_mutex_lock(&s->mu);
    if (why) {
        unlink(path);
        s->st.rejected++;
        index_remove(s, k);
    } else {
        s->st.hits++;
        s->st.bytes_read += total;
        index_touch(s, k, total, false);
    }
    pthread_mutex_unlock(&s->mu);
    if (why) return ix_errf(err, IX_ERR_FORMAT, "block %016" PRIx64 " rejected: %s", k->prefix_hash, why);
    return IX_OK;
}

bool ix_kvstore_contains(ix_kvstore *s, const ix_kvstore_key *k) {
    pthread_mutex_lock(&s->mu);
    bool queued = pending(s, k) != NULL;
    pthread_mutex_unlock(&s->mu);
    if (queued) return true;
    char path[4096];
    block_path(s, k, path, sizeof path);
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Deletes one block (queued writes of it land first, then go). */
ix_status ix_kvstore_remove(ix_kvstore *s, const ix_kvstore_key *k) {
    pthread_mutex_lock(&s->mu);
    bool queued = pending(s, k) != NULL;
    pthread_mutex_unlock(&s->mu);
    if (queued) ix_kvstore_flush(s);
    char path[4096];
    block_path(s, k, path, sizeof path);
    bool gone = unlink(path) == 0;
    pthread_mutex_lock(&s->mu);
    index_remove(s, k);
    pthread_mutex_unlock(&s->mu);
    return gone ? IX_OK : IX_ERR_NOT_FOUND;
}

int32_t ix_kvstore_prefetch(ix_kvstore *s, const ix_kvstore_key *keys, int32_t n) {
    int32_t asked = 0;
    for (int32_t i = 0; i < n; i++) {
        char path[4096];
        block_path(s, &keys[i], path, sizeof path);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) break; /* the chain ends here: nothing after it can be adopted */
        /* The kernel starts reading now and returns at once; the get that
         * follows finds the pages in memory. */
        if (posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED) == 0) asked++;
        close(fd);
    }
    pthread_mutex_lock(&s->mu);
    s->st.prefetched += (uint64_t)asked;
    pthread_mutex_unlock(&s->mu);
    return asked;
}

/* ---- named files beside the blocks (session index, stored responses) ---------------- */

#define META_MAX_BYTES (256u << 20)

static bool meta_path(const ix_kvstore *s, const char *name, char *buf, size_t n) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > 64 || name[0] == '.') return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.';
        if (!ok) return false;
    }
    int r = snprintf(buf, n, "%s/meta/%s", s->dir, name);
    return r > 0 && (size_t)r < n;
}

ix_status ix_kvstore_put_file(ix_kvstore *s, const char *name, const void *data, size_t n) {
    char path[4096], dir[4096];
    if (!meta_path(s, name, path, sizeof path) || (n && !data) || n > META_MAX_BYTES) return IX_ERR_INVALID;
    snprintf(dir, sizeof dir, "%s/meta", s->dir);
    const void *parts[1] = {data};
    size_t sizes[1] = {n};
    if (mkdir_p(dir) != 0 || !write_atomic(s, path, parts, sizes, 1, true)) {
        pthread_mutex_lock(&s->mu);
        s->st.write_errors++;
        pthread_mutex_unlock(&s->mu);
        return IX_ERR_IO;
    }
    return IX_OK;
}

ix_status ix_kvstore_get_file(ix_kvstore *s, const char *name, void **data, size_t *n) {
    *data = NULL;
    *n = 0;
    char path[4096];
    if (!meta_path(s, name, path, sizeof path)) return IX_ERR_INVALID;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? IX_ERR_NOT_FOUND : IX_ERR_IO;
    struct stat sb;
    ix_status st = IX_OK;
    if (fstat(fd, &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size > META_MAX_BYTES) {
        st = IX_ERR_FORMAT;
    } else {
        size_t len = (size_t)sb.st_size;
        unsigned char *buf = ix_malloc(len + 1);
        if (!buf)
            st = IX_ERR_NOMEM;
        else if (!read_all(fd, buf, len))
            st = IX_ERR_IO, ix_free(buf);
        else
            buf[len] = 0, *data = buf, *n = len;
    }
    close(fd);
    return st;
}

/* ---- walking the tree ---------------------------------------------------------------- */

/* out = a/b; false when it does not fit (the entry is skipped). */
static bool join(char *out, size_t n, const char *a, const char *b) {
    int r = snprintf(out, n, "%s/%s", a, b);
    return r > 0 && (size_t)r < n;
}

typedef void (*visit_fn)(void *user, const char *path, const ix_kvstore_key *k, const struct stat *sb);

/* Calls fn for every DIR/<fp>/<tenant>/<xx>/<hash>.kvb whose names parse;
 * n_models / n_tenants count the directories seen. */
static void walk(const char *dir, visit_fn fn, void *user, uint64_t *n_models, uint64_t *n_tenants) {
    DIR *d0 = opendir(dir);
    if (!d0) return;
    struct dirent *e0, *e1, *e2, *e3;
    char p1[4096], p2[4096], p3[4096], p4[4096];
    while ((e0 = readdir(d0))) {
        ix_kvstore_key k;
        if (!parse_hex64(e0->d_name, strlen(e0->d_name), &k.model_fp)) continue;
        DIR *d1 = join(p1, sizeof p1, dir, e0->d_name) ? opendir(p1) : NULL;
        if (!d1) continue;
        if (n_models) ++*n_models;
        while ((e1 = readdir(d1))) {
            if (!parse_hex64(e1->d_name, strlen(e1->d_name), &k.tenant)) continue;
            DIR *d2 = join(p2, sizeof p2, p1, e1->d_name) ? opendir(p2) : NULL;
            if (!d2) continue;
            if (n_tenants) ++*n_tenants;
            while ((e2 = readdir(d2))) {
                if (strlen(e2->d_name) != 2 || e2->d_name[0] == '.') continue;
                DIR *d3 = join(p3, sizeof p3, p2, e2->d_name) ? opendir(p3) : NULL;
                if (!d3) continue;
                while ((e3 = readdir(d3))) {
                    size_t n = strlen(e3->d_name);
                    if (n != 20 || strcmp(e3->d_name + 16, ".kvb") != 0 ||
                        !parse_hex64(e3->d_name, 16, &k.prefix_hash))
                        continue;
                    struct stat sb;
                    if (join(p4, sizeof p4, p3, e3->d_name) && stat(p4, &sb) == 0) fn(user, p4, &k, &sb);
                }
                closedir(d3);
            }
            closedir(d2);
        }
        closedir(d1);
    }
    closedir(d0);
}

typedef struct found {
    ix_kvstore_key k;
    uint64_t bytes;
    int64_t mtime_ns;
} found;

typedef struct found_vec {
    found *v;
    size_t n, cap;
} found_vec;

static void collect(void *user, const char *path, const ix_kvstore_key *k, const struct stat *sb) {
    (void)path;
    found_vec *fv = user;
    if (fv->n == fv->cap) {
        size_t nc = fv->cap ? fv->cap * 2 : 256;
        found *p = ix_realloc(fv->v, nc * sizeof *p);
        if (!p) return;
        fv->v = p;
        fv->cap = nc;
    }
    fv->v[fv->n++] = (found){*k, (uint64_t)sb->st_size, (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec};
}

static int by_mtime_desc(const void *a, const void *b) {
    const found *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? 1 : x->mtime_ns > y->mtime_ns ? -1 : 0;
}

static void *indexer_main(void *arg) {
    ix_kvstore *s = arg;
    found_vec fv = {0};
    walk(s->dir, collect, &fv, NULL, NULL);
    if (fv.n) qsort(fv.v, fv.n, sizeof *fv.v, by_mtime_desc); /* newest first: each goes behind those before */
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < fv.n; i++)
        if (!find(s, &fv.v[i].k)) index_touch(s, &fv.v[i].k, fv.v[i].bytes, true);
    s->indexed = true;
    s->st.indexed = true;
    evict_locked(s);
    pthread_mutex_unlock(&s->mu);
    ix_free(fv.v);
    return NULL;
}

/* ---- open / close ------------------------------------------------------------------------ */

static void clean_tmp(const char *dir, uint64_t *n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/tmp", dir);
    DIR *d = opendir(p);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char f[4096];
        if (join(f, sizeof f, p, e->d_name) && unlink(f) == 0 && n) ++*n;
    }
    closedir(d);
}

ix_status ix_kvstore_open(ix_kvstore **out, const ix_kvstore_params *p, ix_errbuf *err) {
    *out = NULL;
    if (!p || !p->dir || !*p->dir) return ix_errf(err, IX_ERR_INVALID, "the KV store needs a directory");
    if (strlen(p->dir) > 3000) return ix_errf(err, IX_ERR_INVALID, "the KV store's directory path is too long");
    char tmpdir[4096];
    snprintf(tmpdir, sizeof tmpdir, "%s/tmp", p->dir);
    if (mkdir_p(tmpdir) != 0)
        return ix_errf(err, IX_ERR_IO, "cannot create the KV store directory %s: %s", p->dir, strerror(errno));
    char lock[4096];
    snprintf(lock, sizeof lock, "%s/lock", p->dir);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0) return ix_errf(err, IX_ERR_IO, "cannot write in the KV store directory %s: %s", p->dir, strerror(errno));
    if (flock(lfd, LOCK_EX | LOCK_NB) != 0) {
        close(lfd);
        return ix_errf(err, IX_ERR_STATE, "the KV store %s is in use by another process", p->dir);
    }
    clean_tmp(p->dir, NULL); /* writes a crash left unfinished */
    ix_kvstore *s = ix_calloc(1, sizeof *s);
    if (s) s->dir = ix_strdup(p->dir);
    if (s) s->buckets = ix_calloc(s->n_buckets = 1024, sizeof *s->buckets);
    if (!s || !s->dir || !s->buckets) {
        if (s) ix_free(s->dir), ix_free(s->buckets);
        ix_free(s);
        close(lfd);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    s->lock_fd = lfd;
    s->max_bytes = p->max_bytes;
    s->max_queue = p->max_queue_bytes ? p->max_queue_bytes : (64u << 20);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->indexer_started = pthread_create(&s->indexer, NULL, indexer_main, s) == 0;
    s->writer_started = pthread_create(&s->writer, NULL, writer_main, s) == 0;
    if (!s->indexer_started || !s->writer_started) {
        ix_kvstore_close(s);
        return ix_errf(err, IX_ERR_NOMEM, "cannot start the KV store's threads");
    }
    *out = s;
    return IX_OK;
}

void ix_kvstore_close(ix_kvstore *s) {
    if (!s) return;
    if (s->indexer_started) pthread_join(s->indexer, NULL);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->writer_started) pthread_join(s->writer, NULL); /* it drains the queue first */
    for (job *j = s->q_head, *n; j; j = n) {
        n = j->next;
        ix_free(j);
    }
    for (size_t i = 0; i < s->n_buckets; i++)
        for (entry *e = s->buckets[i], *n; e; e = n) {
            n = e->hnext;
            ix_free(e);
        }
    ix_free(s->buckets);
    pins_free(s);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_mutex_destroy(&s->mu);
    if (s->lock_fd >= 0) close(s->lock_fd); /* releases the flock */
    ix_free(s->dir);
    ix_free(s);
}

void ix_kvstore_get_stats(ix_kvstore *s, ix_kvstore_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    pthread_mutex_unlock(&s->mu);
}

/* ---- tenants, verify, clear ------------------------------------------------------------------ */

typedef struct drop_ctx {
    ix_kvstore *s;
    uint64_t tenant, n;
} drop_ctx;

static void drop_one(void *user, const char *path, const ix_kvstore_key *k, const struct stat *sb) {
    (void)sb;
    drop_ctx *c = user;
    if (k->tenant != c->tenant) return;
    if (unlink(path) == 0) c->n++;
    pthread_mutex_lock(&c->s->mu);
    index_remove(c->s, k);
    pthread_mutex_unlock(&c->s->mu);
}

ix_status ix_kvstore_drop_tenant(ix_kvstore *s, uint64_t tenant) {
    ix_kvstore_flush(s);
    drop_ctx c = {s, tenant, 0};
    walk(s->dir, drop_one, &c, NULL, NULL);
    return IX_OK;
}

typedef struct verify_ctx {
    ix_kvstore_verify_report *r;
    ix_kvstore_check mode;
} verify_ctx;

static void verify_one(void *user, const char *path, const ix_kvstore_key *k, const struct stat *sb) {
    verify_ctx *c = user;
    c->r->n_files++;
    if (c->mode == IX_KVSTORE_COUNT) {
        c->r->n_ok++;
        c->r->bytes += (uint64_t)sb->st_size;
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint64_t total = 0;
    const char *why = fd < 0 ? "cannot open" : check_file(fd, k, NULL, 0, NULL, 0, &total);
    if (fd >= 0) close(fd);
    if (why) {
        c->r->n_bad++;
        if (c->mode == IX_KVSTORE_REPAIR) unlink(path);
    } else {
        c->r->n_ok++;
        c->r->bytes += total;
    }
}

static ix_status lock_offline(const char *dir, int *fd, ix_errbuf *err) {
    char lock[4096];
    snprintf(lock, sizeof lock, "%s/lock", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ix_errf(err, IX_ERR_IO, "%s is not a KV store directory", dir);
    *fd = open(lock, O_RDWR | O_CLOEXEC); /* every store has one: never made here */
    if (*fd < 0) return ix_errf(err, IX_ERR_IO, "%s is not a KV store directory (no lock file)", dir);
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        close(*fd);
        return ix_errf(err, IX_ERR_STATE, "the KV store %s is in use by another process", dir);
    }
    return IX_OK;
}

ix_status ix_kvstore_verify(const char *dir, ix_kvstore_check mode, ix_kvstore_verify_report *r, ix_errbuf *err) {
    memset(r, 0, sizeof *r);
    int fd;
    ix_status s = lock_offline(dir, &fd, err);
    if (s != IX_OK) return s;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/tmp", dir);
    DIR *d = opendir(tmp);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') r->n_tmp++;
        closedir(d);
    }
    verify_ctx c = {r, mode};
    walk(dir, verify_one, &c, &r->n_models, &r->n_tenants);
    close(fd);
    return IX_OK;
}

static void delete_one(void *user, const char *path, const ix_kvstore_key *k, const struct stat *sb) {
    (void)k;
    (void)sb;
    if (unlink(path) == 0) ++*(uint64_t *)user;
}

ix_status ix_kvstore_clear(const char *dir, uint64_t *n_deleted, ix_errbuf *err) {
    *n_deleted = 0;
    int fd;
    ix_status s = lock_offline(dir, &fd, err);
    if (s != IX_OK) return s;
    walk(dir, delete_one, n_deleted, NULL, NULL);
    clean_tmp(dir, NULL);
    close(fd);
    return IX_OK;
}
