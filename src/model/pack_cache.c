/*
 * The packed-weight cache: the repacked matmul weights of a model kept in a
 * file, so that a later load maps them instead of packing again.
 *
 * Packing a 2 GB model means 2 GB of fresh anonymous memory, and on a virtual
 * machine the first touch of such memory is the host's page faults: the load
 * then costs seconds, most of them in the kernel zeroing pages (perf:
 * clear_page). A file of the packed layout maps in a few milliseconds, and
 * its pages are the page cache's: shared, clean, resident once however many
 * servers map it. The first load packs straight into the new file (a shared
 * writable mapping of a file whose blocks are reserved first, so a full disk
 * is an error at creation, never a SIGBUS while packing); a thread then makes
 * it durable and renames it into place, so a crash leaves only a temporary
 * file, removed by the next load.
 *
 * A cache file is named after the model and a 64-bit key over everything the
 * packed bytes depend on: the source file's identity (device, inode, size,
 * modification time, path), the pack layout's version and row group, and
 * every packed weight's type and shape (and the embedding table's, copied
 * row for row after them). Its header (the weights start 2 MiB
 * in) repeats the key and the sizes under a checksum; a file whose header
 * does not match is packed again. The directory is bounded: before a file is created, the least
 * recently used cache files go until the new one fits under the cap.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "model/model_int.h"

#define PC_MAGIC "IXPACK\0\1"
/* Bump when ix_kernels_pack's layout changes (dispatch.c says so too). */
#define PC_VERSION 4u
/* The packed weights start 2 MiB into the file and the file is mapped on a
 * 2 MiB boundary, so the page cache's 2 MiB folios can be mapped whole
 * (one TLB entry each) as the anonymous copy's huge pages are. */
#define PC_HEADER_BYTES IX__PACK_CACHE_DATA_OFFSET
#define PC_SUFFIX ".ixpack"
/* Space a new cache file leaves free on its file system. */
#define PC_MIN_FREE_BYTES ((uint64_t)1 << 30)

typedef struct pc_header {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t key, data_bytes;
    uint64_t src_size, src_mtime_ns, src_ino, src_dev;
    uint64_t check; /* FNV-1a of everything above */
} pc_header;

struct ix__pack_cache {
    int fd;
    char *tmp, *final;
    pthread_t writer;
    bool writer_started;
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t header_check(const pc_header *h) { return fnv(0xcbf29ce484222325ull, h, offsetof(pc_header, check)); }

uint64_t ix__pack_cache_key(const char *path, const struct stat *st, ix__weight *const *ws, size_t n,
                            const ix__weight *copy) {
    uint64_t h = fnv(0xcbf29ce484222325ull, "inferx-pack", 11);
    uint32_t v[2] = {PC_VERSION, IX_KERNELS_PACK_ROWS};
    h = fnv(h, v, sizeof v);
    char real[PATH_MAX];
    const char *p = realpath(path, real) ? real : path;
    h = fnv(h, p, strlen(p));
    uint64_t id[5] = {(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
                      (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec};
    h = fnv(h, id, sizeof id);
    for (size_t i = 0; i < n; i++) {
        bool rows = ws[i] == copy; /* copied row for row: tagged -1 */
        int64_t w[4] = {(int64_t)ws[i]->type, ws[i]->ne0, ws[i]->ne1,
                        rows ? -1 : (int64_t)ix_kernels_packed_bytes(ws[i]->type, (size_t)ws[i]->ne1, (size_t)ws[i]->ne0)};
        h = fnv(h, w, sizeof w);
    }
    return h;
}

static void fill_header(pc_header *h, uint64_t key, uint64_t data_bytes, const struct stat *st) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, PC_MAGIC, 8);
    h->version = PC_VERSION;
    h->header_bytes = PC_HEADER_BYTES;
    h->key = key;
    h->data_bytes = data_bytes;
    h->src_size = (uint64_t)st->st_size;
    h->src_mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
    h->src_ino = (uint64_t)st->st_ino;
    h->src_dev = (uint64_t)st->st_dev;
    h->check = header_check(h);
}

/* dir/<model name>-<key>.ixpack (malloc'd). */
static char *cache_path(const char *dir, const char *gguf_path, uint64_t key) {
    const char *base = strrchr(gguf_path, '/');
    base = base ? base + 1 : gguf_path;
    size_t bl = strlen(base);
    if (bl > 5 && !strcmp(base + bl - 5, ".gguf")) bl -= 5;
    if (bl > 96) bl = 96;
    size_t n = strlen(dir) + bl + 40;
    char *p = ix_malloc(n);
    if (p) snprintf(p, n, "%s/%.*s-%016llx%s", dir, (int)bl, base, (unsigned long long)key, PC_SUFFIX);
    return p;
}

/* fd's first len bytes mapped shared at a 2 MiB boundary (NULL on failure),
 * huge pages asked for. */
static void *map_aligned(int fd, size_t len, int prot) {
    const size_t align = (size_t)2 << 20;
    uint8_t *r = mmap(NULL, len + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return NULL;
    uint8_t *a = r + (align - (uintptr_t)r % align) % align;
    void *p = mmap(a, len, prot, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) {
        munmap(r, len + align);
        return NULL;
    }
    if (a > r) munmap(r, (size_t)(a - r));
    if (r + len + align > a + len) munmap(a + len, (size_t)(r + len + align - (a + len)));
#ifdef MADV_HUGEPAGE
    madvise(a, len, MADV_HUGEPAGE);
#endif
    return a;
}

uint8_t *ix__pack_cache_map(const char *dir, const char *gguf_path, uint64_t key, uint64_t data_bytes,
                            const struct stat *st, size_t *map_len) {
    char *path = cache_path(dir, gguf_path, key);
    if (!path) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t *map = NULL;
    struct stat cst;
    pc_header h, want;
    fill_header(&want, key, data_bytes, st);
    if (fd < 0) goto out;
    if (fstat(fd, &cst) || (uint64_t)cst.st_size != PC_HEADER_BYTES + data_bytes ||
        pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(&h, &want, sizeof h)) {
        IX_LOGW("model: packed-weight cache %s does not match this model; packing again", path);
        goto out;
    }
    void *p = map_aligned(fd, (size_t)cst.st_size, PROT_READ);
    if (!p) goto out;
    /* read-ahead of what the page cache lacks, without waiting for it */
    madvise(p, (size_t)cst.st_size, MADV_WILLNEED);
    futimens(fd, NULL); /* most recently used: the last to be evicted */
    map = p;
    *map_len = (size_t)cst.st_size;
out:
    if (fd >= 0) close(fd);
    ix_free(path);
    return map;
}

/* Removes temporary files of loads that died (their pid is gone) and then
 * the least recently used cache files until `need` more bytes fit under max. */
static void make_room(const char *dir, uint64_t need, uint64_t max) {
    DIR *d = opendir(dir);
    if (!d) return;
    typedef struct { char name[256]; uint64_t bytes; int64_t mtime; } ent;
    ent *es = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    char p[PATH_MAX];
    for (struct dirent *de; (de = readdir(d));) {
        const char *nm = de->d_name, *tmp = strstr(nm, PC_SUFFIX ".tmp.");
        size_t nl = strlen(nm), sl = strlen(PC_SUFFIX);
        if (snprintf(p, sizeof p, "%s/%s", dir, nm) >= (int)sizeof p) continue;
        if (tmp) {
            long pid = strtol(tmp + sl + 5, NULL, 10);
            if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlink(p);
            continue;
        }
        struct stat st;
        if (nl <= sl || strcmp(nm + nl - sl, PC_SUFFIX) || nl >= sizeof es->name || stat(p, &st)) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            ent *ne = ix_realloc(es, nc * sizeof *ne);
            if (!ne) break;
            es = ne;
            cap = nc;
        }
        memcpy(es[n].name, nm, nl + 1);
        es[n].bytes = (uint64_t)st.st_size;
        es[n].mtime = (int64_t)st.st_mtim.tv_sec;
        total += es[n].bytes;
        n++;
    }
    closedir(d);
    while (n && total + need > max) {
        size_t old = 0;
        for (size_t i = 1; i < n; i++)
            if (es[i].mtime < es[old].mtime) old = i;
        if (snprintf(p, sizeof p, "%s/%s", dir, es[old].name) < (int)sizeof p && unlink(p) == 0)
            IX_LOGI("model: packed-weight cache: removed %s (least recently used, %.1f MB)", es[old].name,
                    (double)es[old].bytes / 1e6);
        total -= es[old].bytes;
        es[old] = es[--n];
    }
    ix_free(es);
}

/* mkdir -p for the cache directory (0700: it holds copies of the weights). */
static bool make_dir(const char *dir) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return false;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0700) && errno != EEXIST) return false;
        *s = '/';
    }
    return !mkdir(p, 0700) || errno == EEXIST;
}

uint8_t *ix__pack_cache_create(const char *dir, const char *gguf_path, uint64_t key, uint64_t data_bytes,
                               uint64_t max_bytes, ix__pack_cache **out, size_t *map_len) {
    *out = NULL;
    uint64_t size = PC_HEADER_BYTES + data_bytes;
    struct statvfs vfs;
    if (max_bytes && size > max_bytes) {
        IX_LOGI("model: packed-weight cache: %.1f MB is over its bound; packing in memory", (double)size / 1e6);
        return NULL;
    }
    if (!make_dir(dir)) {
        IX_LOGW("model: packed-weight cache: cannot create %s: %s", dir, strerror(errno));
        return NULL;
    }
    if (max_bytes) make_room(dir, size, max_bytes);
    if (!statvfs(dir, &vfs) && (uint64_t)vfs.f_bavail * vfs.f_frsize < size + PC_MIN_FREE_BYTES) {
        IX_LOGW("model: packed-weight cache: %s has too little free space for %.1f MB", dir, (double)size / 1e6);
        return NULL;
    }
    ix__pack_cache *c = ix_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = -1;
    c->final = cache_path(dir, gguf_path, key);
    size_t tl = c->final ? strlen(c->final) + 32 : 0;
    if (c->final && (c->tmp = ix_malloc(tl))) snprintf(c->tmp, tl, "%s.tmp.%ld", c->final, (long)getpid());
    uint8_t *map = NULL;
    if (!c->tmp) goto fail;
    c->fd = open(c->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (c->fd < 0) goto fail;
    /* Blocks reserved now: a full disk is this error, not a SIGBUS when a
     * page of the mapping is first written. */
    if (fallocate(c->fd, 0, 0, (off_t)size)) goto fail;
    void *p = map_aligned(c->fd, (size_t)size, PROT_READ | PROT_WRITE);
    if (!p) goto fail;
    map = p;
    *map_len = (size_t)size;
    *out = c;
    return map;
fail:
    IX_LOGW("model: packed-weight cache: cannot create %s: %s; packing in memory", c->tmp ? c->tmp : dir,
            strerror(errno));
    ix__pack_cache_abort(c);
    return NULL;
}

static void *writer_main(void *arg) {
    ix__pack_cache *c = arg;
    if (fdatasync(c->fd) || rename(c->tmp, c->final)) {
        IX_LOGW("model: packed-weight cache: cannot complete %s: %s", c->final, strerror(errno));
        unlink(c->tmp);
        return NULL;
    }
    char *slash = strrchr(c->final, '/');
    if (slash) { /* the rename itself, durable */
        *slash = 0;
        int dfd = open(c->final, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        *slash = '/';
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    IX_LOGI("model: packed weights cached in %s", c->final);
    return NULL;
}

void ix__pack_cache_commit(ix__pack_cache *c, uint8_t *map, uint64_t data_bytes, uint64_t key,
                           const struct stat *st) {
    pc_header h;
    fill_header(&h, key, data_bytes, st);
    memcpy(map, &h, sizeof h);
    mprotect(map, PC_HEADER_BYTES + data_bytes, PROT_READ); /* the weights are read-only from here */
    if (pthread_create(&c->writer, NULL, writer_main, c) == 0) {
        c->writer_started = true;
        return;
    }
    writer_main(c); /* no thread: durable before the load returns */
}

void ix__pack_cache_abort(ix__pack_cache *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    if (c->tmp) unlink(c->tmp);
    ix_free(c->tmp);
    ix_free(c->final);
    ix_free(c);
}

void ix__pack_cache_finish(ix__pack_cache *c) {
    if (!c) return;
    if (c->writer_started) pthread_join(c->writer, NULL);
    if (c->fd >= 0) close(c->fd);
    ix_free(c->tmp);
    ix_free(c->final);
    ix_free(c);
}
