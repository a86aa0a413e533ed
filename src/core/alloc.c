/* Counted allocation with fault injection.
 *
 * Each block carries a 16-byte header holding its size, so ix_free knows how
 * many bytes to subtract; the header keeps the 16-byte alignment malloc gives.
 * Aligned blocks store the size and the offset back to the raw pointer just
 * below the aligned address. Counters are relaxed atomics: they are statistics,
 * not synchronisation. */
#include "inferx/core.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HDR 16

static _Atomic size_t g_live_bytes;
static _Atomic size_t g_peak_bytes;
static _Atomic size_t g_live_count;
static _Atomic long g_fail_after = -1; /* <0: never fail */
static _Atomic long g_failed;

static bool should_fail(void) {
    long n = atomic_load_explicit(&g_fail_after, memory_order_relaxed);
    if (n < 0) return false;
    if (n == 0) {
        atomic_fetch_add_explicit(&g_failed, 1, memory_order_relaxed);
        return true;
    }
    /* Several threads may race here; an off-by-one under contention is fine
     * for a test-only facility, but the counter never goes below zero. */
    atomic_compare_exchange_strong(&g_fail_after, &n, n - 1);
    return false;
}

static void account_add(size_t n) {
    size_t live = atomic_fetch_add_explicit(&g_live_bytes, n, memory_order_relaxed) + n;
    atomic_fetch_add_explicit(&g_live_count, 1, memory_order_relaxed);
    size_t peak = atomic_load_explicit(&g_peak_bytes, memory_order_relaxed);
    while (live > peak &&
           !atomic_compare_exchange_weak_explicit(&g_peak_bytes, &peak, live, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

static void account_sub(size_t n) {
    atomic_fetch_sub_explicit(&g_live_bytes, n, memory_order_relaxed);
    atomic_fetch_sub_explicit(&g_live_count, 1, memory_order_relaxed);
}

void *ix_malloc(size_t n) {
    if (n > SIZE_MAX - HDR || should_fail()) return NULL;
    unsigned char *raw = malloc(n + HDR);
    if (!raw) return NULL;
    memcpy(raw, &n, sizeof n);
    account_add(n);
    return raw + HDR;
}

void *ix_calloc(size_t count, size_t size) {
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) return NULL;
    void *p = ix_malloc(n);
    if (p) memset(p, 0, n);
    return p;
}

void *ix_realloc(void *p, size_t n) {
    if (!p) return ix_malloc(n);
    if (n > SIZE_MAX - HDR || should_fail()) return NULL;
    unsigned char *raw = (unsigned char *)p - HDR;
    size_t old;
    memcpy(&old, raw, sizeof old);
    unsigned char *nraw = realloc(raw, n + HDR);
    if (!nraw) return NULL;
    memcpy(nraw, &n, sizeof n);
    account_sub(old);
    account_add(n);
    return nraw + HDR;
}

void ix_free(void *p) {
    if (!p) return;
    unsigned char *raw = (unsigned char *)p - HDR;
    size_t n;
    memcpy(&n, raw, sizeof n);
    account_sub(n);
    free(raw);
}

/* Layout: [raw ... pad][size_t size][size_t offset][aligned data] */
/* Both aligned allocators: raw comes from malloc or calloc(n + alignment +
 * HDR); the size and the offset back to raw sit just below the result. */
static bool alignment_ok(size_t a) { return a != 0 && (a & (a - 1)) == 0 && a <= 4096; }

/* The size and the offset back to the raw pointer, just below the block. */
static void put_header(uintptr_t aligned, size_t n, size_t off) {
    memcpy((unsigned char *)aligned - 2 * sizeof(size_t), &n, sizeof n);
    memcpy((unsigned char *)aligned - sizeof(size_t), &off, sizeof off);
}

static void *aligned_alloc_with(size_t alignment, size_t n, bool zero) {
    if (!alignment_ok(alignment)) return NULL;
    if (alignment < HDR) alignment = HDR;
    if (n > SIZE_MAX - alignment - HDR || should_fail()) return NULL;
    /* calloc, not malloc + memset: a large block comes straight from mmap,
     * already zero, and its pages are touched (made resident) only when used */
    unsigned char *raw = zero ? calloc(1, n + alignment + HDR) : malloc(n + alignment + HDR);
    if (!raw) return NULL;
    uintptr_t base = (uintptr_t)raw + HDR;
    uintptr_t aligned = (base + alignment - 1) & ~(uintptr_t)(alignment - 1);
    put_header(aligned, n, (size_t)(aligned - (uintptr_t)raw));
    account_add(n);
    return (void *)aligned;
}

/* Zeroed blocks of HUGE_MIN bytes or more (the KV cache's pool) come from
 * their own anonymous mapping, starting on a 2 MiB boundary with transparent
 * huge pages requested: still resident only as written, but a first write
 * makes 2 MiB resident in one fault instead of 4 KiB. On a virtual machine
 * that shadows page tables a decode step's K/V store paid 63-103 us every
 * few tokens as its rows reached new 4 KiB pages (docs/kv-cache.md).
 * The offset stored below the block carries HUGE_TAG for these. */
#define HUGE_ALIGN ((size_t)2 << 20)
#define HUGE_MIN HUGE_ALIGN
#define HUGE_TAG ((size_t)1 << (sizeof(size_t) * 8 - 1))

static void *huge_calloc(size_t n) {
    if (n > SIZE_MAX - HUGE_ALIGN || should_fail()) return NULL;
    size_t len = n + HUGE_ALIGN;
    unsigned char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    /* the first 2 MiB boundary past the header: raw is page-aligned, so
     * at most HUGE_ALIGN further, and the block ends inside the mapping */
    uintptr_t aligned = ((uintptr_t)raw + HDR + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1);
#ifdef MADV_HUGEPAGE
    madvise((void *)aligned, n, MADV_HUGEPAGE); /* advice: without THP the block works as 4 KiB pages */
#endif
    put_header(aligned, n, (size_t)(aligned - (uintptr_t)raw) | HUGE_TAG);
    account_add(n);
    return (void *)aligned;
}

void *ix_aligned_alloc(size_t alignment, size_t n) { return aligned_alloc_with(alignment, n, false); }

void *ix_aligned_calloc(size_t alignment, size_t n) {
    if (!alignment_ok(alignment)) return NULL;
    return n >= HUGE_MIN ? huge_calloc(n) : aligned_alloc_with(alignment, n, true);
}

void ix_aligned_free(void *p) {
    if (!p) return;
    size_t n, off;
    memcpy(&n, (unsigned char *)p - 2 * sizeof(size_t), sizeof n);
    memcpy(&off, (unsigned char *)p - sizeof(size_t), sizeof off);
    account_sub(n);
    if (off & HUGE_TAG) {
        munmap((unsigned char *)p - (off & ~HUGE_TAG), n + HUGE_ALIGN);
        return;
    }
    free((unsigned char *)p - off);
}

char *ix_strndup(const char *s, size_t n) {
    char *d = ix_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *ix_strdup(const char *s) { return ix_strndup(s, strlen(s)); }

size_t ix_mem_live_bytes(void) { return atomic_load(&g_live_bytes); }
size_t ix_mem_peak_bytes(void) { return atomic_load(&g_peak_bytes); }
size_t ix_mem_live_count(void) { return atomic_load(&g_live_count); }

void ix_mem_fail_after(long n) {
    atomic_store(&g_failed, 0);
    atomic_store(&g_fail_after, n);
}
void ix_mem_fail_reset(void) { atomic_store(&g_fail_after, -1); }
long ix_mem_failed_count(void) { return atomic_load(&g_failed); }

uint64_t ix_process_resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}

/* /proc/self/pagemap holds one 64-bit entry per virtual page; bit 63 says the
 * page is present in this process's page tables, which is what the resident
 * set counts (a file page dropped with MADV_DONTNEED is absent here even
 * while the page cache still holds it; mincore would say resident). */
uint64_t ix_resident_bytes(const void *addr, size_t n_bytes) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !addr || !n_bytes) return 0;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    uint64_t first = (uint64_t)(uintptr_t)addr / (uint64_t)page;
    uint64_t end = ((uint64_t)(uintptr_t)addr + n_bytes + (uint64_t)page - 1) / (uint64_t)page;
    uint64_t entries[1024], n_present = 0;
    for (uint64_t at = first; at < end;) {
        uint64_t want = end - at < 1024 ? end - at : 1024;
        ssize_t got = pread(fd, entries, (size_t)want * sizeof entries[0], (off_t)(at * sizeof entries[0]));
        if (got <= 0) break;
        size_t n = (size_t)got / sizeof entries[0];
        if (!n) break;
        for (size_t i = 0; i < n; i++) n_present += entries[i] >> 63;
        at += n;
    }
    close(fd);
    return n_present * (uint64_t)page;
}
