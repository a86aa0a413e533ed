/* Status names and messages (generated from IX_STATUS_TABLE), error buffers,
 * and the few tiny helpers every module shares. */
#include "inferx/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *ix_status_name(ix_status s) {
    switch (s) {
#define IX__CASE(name, code, msg)                                              \
    case name:                                                                 \
        return #name;
        IX_STATUS_TABLE(IX__CASE)
#undef IX__CASE
    }
    return "IX_UNKNOWN";
}

const char *ix_status_str(ix_status s) {
    switch (s) {
#define IX__CASE(name, code, msg)                                              \
    case name:                                                                 \
        return msg;
        IX_STATUS_TABLE(IX__CASE)
#undef IX__CASE
    }
    return "unknown status";
}

ix_status ix_verrf(ix_errbuf *err, ix_status s, const char *fmt, va_list ap) {
    if (err) vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return s;
}

ix_status ix_errf(ix_errbuf *err, ix_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ix_verrf(err, s, fmt, ap);
    va_end(ap);
    return s;
}

bool ix_str_eq(ix_str a, const char *cstr) {
    size_t n = strlen(cstr);
    return a.len == n && (n == 0 || memcmp(a.ptr, cstr, n) == 0);
}

uint64_t ix_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ix__assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "inferx: internal invariant broken: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}
