/* Logger: one process-wide sink and threshold (the logger hook is one of the
 * two globals STYLE.md allows). Messages are formatted into a stack buffer so
 * logging never allocates. */
#include "inferx/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static ix_log_fn g_log_fn;
static void *g_log_user;
static _Atomic int g_log_level = -1; /* -1: not yet read from INFERX_LOG */

const char *ix_log_level_name(ix_log_level level) {
    static const char *const names[] = {"debug", "info", "warn", "error", "none"};
    return (unsigned)level < IX_ARRAY_LEN(names) ? names[level] : "?";
}

static int level_from_env(void) {
    const char *e = getenv("INFERX_LOG");
    if (e) {
        for (int l = IX_LOG_DEBUG; l <= IX_LOG_NONE; l++)
            if (strcmp(e, ix_log_level_name((ix_log_level)l)) == 0) return l;
    }
    return IX_LOG_INFO;
}

ix_log_level ix_log_get_level(void) {
    int l = atomic_load_explicit(&g_log_level, memory_order_relaxed);
    if (l < 0) {
        l = level_from_env();
        atomic_store(&g_log_level, l);
    }
    return (ix_log_level)l;
}

void ix_log_set_level(ix_log_level level) { atomic_store(&g_log_level, (int)level); }

void ix_log_set_handler(ix_log_fn fn, void *user) {
    pthread_mutex_lock(&g_log_mu);
    g_log_fn = fn;
    g_log_user = user;
    pthread_mutex_unlock(&g_log_mu);
}

void ix_log(ix_log_level level, const char *fmt, ...) {
    if (level < ix_log_get_level() || level >= IX_LOG_NONE) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_log_mu);
    if (g_log_fn)
        g_log_fn(level, buf, g_log_user);
    else
        fprintf(stderr, "inferx: %s: %s\n", ix_log_level_name(level), buf);
    pthread_mutex_unlock(&g_log_mu);
}
