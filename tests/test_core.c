/* core: status table, error buffers, counted allocation with fault injection,
 * resident bytes of a range,
 * ix_buf, logging hook and the ISA choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "inferx/core.h"

static void test_status_table(void **state) {
    (void)state;
    assert_string_equal(ix_status_name(IX_OK), "IX_OK");
    assert_string_equal(ix_status_name(IX_ERR_FORMAT), "IX_ERR_FORMAT");
    assert_string_equal(ix_status_str(IX_ERR_NOMEM), "out of memory");
    assert_string_equal(ix_status_name((ix_status)-999), "IX_UNKNOWN");
    assert_true(IX_FULL > 0);
    ix_errbuf e;
    assert_int_equal(ix_errf(&e, IX_ERR_RANGE, "key '%s' at %d", "k", 7), IX_ERR_RANGE);
    assert_string_equal(e.msg, "key 'k' at 7");
    assert_int_equal(ix_errf(NULL, IX_ERR_IO, "x"), IX_ERR_IO);
}

static void test_alloc_counts(void **state) {
    (void)state;
    size_t live0 = ix_mem_live_bytes(), cnt0 = ix_mem_live_count();
    char *a = ix_malloc(100);
    assert_non_null(a);
    assert_int_equal(ix_mem_live_bytes(), live0 + 100);
    a = ix_realloc(a, 1000);
    assert_non_null(a);
    assert_int_equal(ix_mem_live_bytes(), live0 + 1000);
    void *b = ix_aligned_alloc(64, 333);
    assert_non_null(b);
    assert_int_equal((uintptr_t)b % 64, 0);
    memset(b, 1, 333);
    assert_int_equal(ix_mem_live_bytes(), live0 + 1333);
    assert_true(ix_mem_peak_bytes() >= live0 + 1333);
    ix_free(a);
    ix_aligned_free(b);
    ix_free(NULL);
    ix_aligned_free(NULL);
    assert_int_equal(ix_mem_live_bytes(), live0);
    assert_int_equal(ix_mem_live_count(), cnt0);
    assert_null(ix_calloc(SIZE_MAX / 2, 4));
    assert_null(ix_malloc(SIZE_MAX - 4));
    assert_null(ix_aligned_alloc(3, 10));
}

/* Zeroed blocks from 2 MiB up have a mapping of their own on a 2 MiB
 * boundary (huge pages): zero, writable end to end, counted, freed by
 * munmap; a plain aligned block of the same size still goes back to free,
 * and fault injection fails both. */
static void test_alloc_huge(void **state) {
    (void)state;
    const size_t mib = (size_t)1 << 20;
    size_t live0 = ix_mem_live_bytes(), cnt0 = ix_mem_live_count();
    size_t sizes[] = {2 * mib, 3 * mib + 17, 9 * mib};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char *p = ix_aligned_calloc(64, n), *q = ix_aligned_alloc(64, n);
        assert_non_null(p);
        assert_non_null(q);
        assert_int_equal((uintptr_t)p % (2 * mib), 0);
        assert_int_equal((uintptr_t)q % 64, 0);
        for (size_t i = 0; i < n; i += 4093) assert_int_equal(p[i], 0);
        assert_int_equal(p[n - 1], 0);
        memset(p, 0x5a, n);
        memset(q, 0xa5, n);
        assert_int_equal(p[n - 1], 0x5a);
        assert_int_equal(ix_mem_live_bytes(), live0 + 2 * n);
        ix_aligned_free(p);
        ix_aligned_free(q);
        assert_int_equal(ix_mem_live_bytes(), live0);
    }
    assert_int_equal(ix_mem_live_count(), cnt0);
    assert_null(ix_aligned_calloc(3, 4 * mib));
    assert_null(ix_aligned_calloc(64, SIZE_MAX - mib));
    ix_mem_fail_after(0);
    assert_null(ix_aligned_calloc(64, 4 * mib));
    ix_mem_fail_reset();
    assert_int_equal(ix_mem_live_bytes(), live0);
}

static void test_alloc_fault_injection(void **state) {
    (void)state;
    ix_mem_fail_after(2);
    void *a = ix_malloc(8), *b = ix_malloc(8), *c = ix_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_int_equal(ix_mem_failed_count(), 1);
    ix_mem_fail_reset();
    c = ix_malloc(8);
    assert_non_null(c);
    ix_free(a);
    ix_free(b);
    ix_free(c);
}

static void test_buf(void **state) {
    (void)state;
    ix_buf b = {0};
    for (int i = 0; i < 1000; i++) assert_int_equal(ix_buf_append(&b, "ab", 2), IX_OK);
    assert_int_equal(b.len, 2000);
    assert_int_equal(b.data[2000], '\0');
    ix_buf_clear(&b);
    assert_int_equal(ix_buf_printf(&b, "%d-%s", 42, "x"), IX_OK);
    assert_string_equal(b.data, "42-x");
    static char big[8192];
    ix_mem_fail_after(0);
    assert_int_equal(ix_buf_append(&b, big, sizeof big), IX_ERR_NOMEM);
    ix_mem_fail_reset();
    assert_string_equal(b.data, "42-x");
    ix_buf_free(&b);
    assert_null(b.data);
}

static int g_log_calls;
static char g_log_last[256];
static void log_sink(ix_log_level level, const char *msg, void *user) {
    (void)level;
    g_log_calls += *(int *)user;
    strncpy(g_log_last, msg, sizeof g_log_last - 1);
}

static void test_log_hook(void **state) {
    (void)state;
    int one = 1;
    ix_log_set_handler(log_sink, &one);
    ix_log_set_level(IX_LOG_WARN);
    IX_LOGI("dropped %d", 1);
    assert_int_equal(g_log_calls, 0);
    IX_LOGE("kept %d", 2);
    assert_int_equal(g_log_calls, 1);
    assert_string_equal(g_log_last, "kept 2");
    ix_log_set_handler(NULL, NULL);
    ix_log_set_level(IX_LOG_INFO);
}

static void test_cpu(void **state) {
    (void)state;
    char buf[256];
    ix_cpu_features_str(buf, sizeof buf);
    assert_true(ix_cpu_supports(IX_ISA_GENERIC));
    ix_isa isa = ix_cpu_isa();
    assert_true(ix_cpu_supports(isa));
    ix_isa parsed;
    assert_int_equal(ix_isa_parse("avx512", &parsed), IX_OK);
    assert_int_equal(parsed, IX_ISA_AVX512);
    assert_int_equal(ix_isa_parse("sse9", &parsed), IX_ERR_INVALID);
    assert_int_equal(ix_cpu_force_isa(IX_ISA_GENERIC), IX_OK);
    assert_int_equal(ix_cpu_isa(), IX_ISA_GENERIC);
#if defined(__x86_64__)
    assert_int_equal(ix_cpu_force_isa(IX_ISA_NEON), IX_ERR_UNSUPPORTED);
    assert_true(ix_cpu_features_get()->sse42);
#endif
}

/* ix_resident_bytes counts the pages of a range this process holds: none of
 * a fresh anonymous mapping, those written, not those dropped. */
static void test_resident_bytes(void **state) {
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 16 * page;
    unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
#ifdef MADV_NOHUGEPAGE
    madvise(p, n, MADV_NOHUGEPAGE); /* one written byte must not fault in a huge page */
#endif
    assert_int_equal(ix_resident_bytes(p, n), 0);
    p[0] = 1;
    p[5 * page + 7] = 1;
    p[15 * page] = 1;
    assert_int_equal(ix_resident_bytes(p, n), 3 * page);
    assert_int_equal(ix_resident_bytes(p + 1, 1), page); /* whole pages, partly covered */
    assert_int_equal(ix_resident_bytes(p + page, 4 * page), 0);
    madvise(p + 5 * page, page, MADV_DONTNEED);
    assert_int_equal(ix_resident_bytes(p, n), 2 * page);
    assert_int_equal(ix_resident_bytes(NULL, n), 0);
    assert_int_equal(ix_resident_bytes(p, 0), 0);
    munmap(p, n);
    assert_true(ix_process_resident_bytes() > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table), cmocka_unit_test(test_alloc_counts),
        cmocka_unit_test(test_alloc_huge),
        cmocka_unit_test(test_alloc_fault_injection), cmocka_unit_test(test_buf),
        cmocka_unit_test(test_log_hook), cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_resident_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
