/*
 * inferx core: status codes, error buffers, counted allocation, logging and the
 * CPU feature probe. Every other module depends on this header and on nothing
 * else of inferx; it depends on nothing at all.
 *
 * Thread safety: everything here may be called from any thread. The logger hook
 * and the fault-injection counter are process-wide (the only globals besides the
 * CPU feature table).
 */
#ifndef INFERX_CORE_H
#define INFERX_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes -------------------------------------------------------
 * 0 is success, negative values are errors, positive values are soft outcomes
 * that a caller is expected to handle (e.g. "KV cache full, try later").
 * One table generates the enum, the names and the messages. */
#define IX_STATUS_TABLE(X)                                                     \
    X(IX_OK, 0, "ok")                                                          \
    X(IX_ERR_NOMEM, -1, "out of memory")                                       \
    X(IX_ERR_INVALID, -2, "invalid argument")                                  \
    X(IX_ERR_IO, -3, "input/output error")                                     \
    X(IX_ERR_FORMAT, -4, "malformed data")                                     \
    X(IX_ERR_UNSUPPORTED, -5, "unsupported")                                   \
    X(IX_ERR_NOT_FOUND, -6, "not found")                                       \
    X(IX_ERR_TYPE, -7, "type mismatch")                                        \
    X(IX_ERR_RANGE, -8, "value out of range")                                  \
    X(IX_ERR_UTF8, -9, "invalid UTF-8")                                        \
    X(IX_ERR_TOO_LONG, -10, "input too long")                                  \
    X(IX_ERR_INTERNAL, -11, "internal error")                                  \
    X(IX_ERR_STATE, -12, "invalid state")                                      \
    X(IX_FULL, 1, "capacity exhausted")                                        \
    X(IX_AGAIN, 2, "not ready yet")

typedef enum ix_status {
#define IX__STATUS_ENUM(name, code, msg) name = code,
    IX_STATUS_TABLE(IX__STATUS_ENUM)
#undef IX__STATUS_ENUM
} ix_status;

/* Symbolic name ("IX_ERR_FORMAT") and message ("malformed data") of a status.
 * Unknown codes return "IX_UNKNOWN" / "unknown status". Never NULL. */
const char *ix_status_name(ix_status s);
const char *ix_status_str(ix_status s);

/* ---- error buffers ------------------------------------------------------
 * Constructors that fail before a handle exists write their detail here; a
 * handle that exists keeps its own last message (see ix_<thing>_errmsg()). */
#define IX_ERRMSG_MAX 512
typedef struct ix_errbuf {
    char msg[IX_ERRMSG_MAX];
} ix_errbuf;

/* Formats into err (if err is not NULL) and returns s, so that error paths
 * read `return ix_errf(err, IX_ERR_FORMAT, "tensor '%s': ...", name);`. */
ix_status ix_errf(ix_errbuf *err, ix_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
ix_status ix_verrf(ix_errbuf *err, ix_status s, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* ---- counted allocation ------------------------------------------------
 * Every heap allocation of the library goes through these, so that live and
 * peak bytes are known (and shown in /metrics later) and so that tests can
 * fail the Nth allocation to drive out-of-memory paths (SQLite / curl style).
 * ix_free(NULL) is a no-op. Alignment of ix_malloc is 16 bytes;
 * ix_aligned_alloc and ix_aligned_calloc take a power-of-two alignment up to
 * 4096. */
void *ix_malloc(size_t n_bytes);
void *ix_calloc(size_t count, size_t size);
void *ix_realloc(void *p, size_t n_bytes);
void *ix_aligned_alloc(size_t alignment, size_t n_bytes);
/* Zeroed, like calloc: a large block's pages stay untouched (not resident)
 * until written; from 2 MiB up the block starts on a 2 MiB boundary of a
 * mapping of its own with transparent huge pages requested, so it becomes
 * resident 2 MiB per fault where the kernel gives huge pages. Freed with
 * ix_aligned_free. */
void *ix_aligned_calloc(size_t alignment, size_t n_bytes);
void ix_free(void *p);
void ix_aligned_free(void *p);
char *ix_strdup(const char *s);
char *ix_strndup(const char *s, size_t n);

size_t ix_mem_live_bytes(void);
/* Resident set size of this process in bytes (Linux /proc/self/statm; 0
 * where it cannot be read). Any thread. */
uint64_t ix_process_resident_bytes(void);
/* Bytes of [addr, addr + n_bytes) (whole pages) present in this process's
 * resident set (Linux /proc/self/pagemap; 0 where it cannot be read). Reads
 * 8 bytes per page: meant for a metrics scrape, not a hot loop. Any thread,
 * while the range stays mapped. */
uint64_t ix_resident_bytes(const void *addr, size_t n_bytes);
size_t ix_mem_peak_bytes(void);
/* Live allocation count; a test that creates and destroys a handle checks it
 * returns to where it started. */
size_t ix_mem_live_count(void);

/* Fault injection: after `n` more successful allocations every allocation
 * fails until ix_mem_fail_reset(). n < 0 disables. For tests only. */
void ix_mem_fail_after(long n);
void ix_mem_fail_reset(void);
/* How many allocations failed on purpose since the last reset. */
long ix_mem_failed_count(void);

/* ---- logging ------------------------------------------------------------ */
typedef enum ix_log_level {
    IX_LOG_DEBUG = 0,
    IX_LOG_INFO = 1,
    IX_LOG_WARN = 2,
    IX_LOG_ERROR = 3,
    IX_LOG_NONE = 4
} ix_log_level;

typedef void (*ix_log_fn)(ix_log_level level, const char *msg, void *user);

/* Replace the sink (default: stderr, "inferx: level: msg"). fn NULL restores
 * the default. Messages below the threshold (default INFO, or INFERX_LOG=debug|
 * info|warn|error|none from the environment) are dropped before formatting. */
void ix_log_set_handler(ix_log_fn fn, void *user);
void ix_log_set_level(ix_log_level level);
ix_log_level ix_log_get_level(void);
void ix_log(ix_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *ix_log_level_name(ix_log_level level);

#define IX_LOGD(...) ix_log(IX_LOG_DEBUG, __VA_ARGS__)
#define IX_LOGI(...) ix_log(IX_LOG_INFO, __VA_ARGS__)
#define IX_LOGW(...) ix_log(IX_LOG_WARN, __VA_ARGS__)
#define IX_LOGE(...) ix_log(IX_LOG_ERROR, __VA_ARGS__)

/* ---- CPU features ----------------------------------------------------- */
typedef struct ix_cpu_features {
    bool sse42, avx, avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    bool avx_vnni;
    bool neon, dotprod;
    int amd_family; /* x86: an AMD CPU's family (25 Zen 3/4, 26 Zen 5), else 0 */
} ix_cpu_features;

/* Instruction-set paths that kernels are built for, in increasing order. */
typedef enum ix_isa {
    IX_ISA_GENERIC = 0,
    IX_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    IX_ISA_AVX512 = 2, /* AVX-512 F + BW + VL (VNNI / BF16 used when present) */
    IX_ISA_NEON = 3,   /* aarch64 NEON (dotprod used when present) */
    IX_ISA_COUNT
} ix_isa;

/* What the CPU and OS support (XSAVE state enabled for AVX / AVX-512). */
const ix_cpu_features *ix_cpu_features_get(void);
/* Whether the machine can run `isa`. */
bool ix_cpu_supports(ix_isa isa);
/* The path kernels use: the best supported one, or INFERX_ISA=generic|avx2|
 * avx512|neon from the environment when set. A forced path the CPU lacks
 * falls back to the best supported one with a warning. */
ix_isa ix_cpu_isa(void);
/* Override for tests and tools (takes precedence over INFERX_ISA); returns
 * IX_ERR_UNSUPPORTED if the CPU cannot run it. */
ix_status ix_cpu_force_isa(ix_isa isa);
const char *ix_isa_name(ix_isa isa);
/* Parses "generic", "avx2", ...; returns IX_ERR_INVALID for anything else. */
ix_status ix_isa_parse(const char *name, ix_isa *out);
/* "sse4.2 avx2 fma f16c avx512f ..." into buf; returns buf. */
const char *ix_cpu_features_str(char *buf, size_t size);

/* ---- small shared helpers ---------------------------------------------- */
/* A vocabulary id (tokenizer, sampler, model and engine all speak it). */
typedef int32_t ix_token;
#define IX_TOKEN_NONE (-1)

/* A length-delimited byte string (not NUL-terminated), e.g. pointing into a
 * mapped file. */
typedef struct ix_str {
    const char *ptr;
    size_t len;
} ix_str;

bool ix_str_eq(ix_str a, const char *cstr);

/* A growable byte buffer, NUL-terminated whenever data is not NULL; zero-
 * initialise, then ix_buf_free. On IX_ERR_NOMEM the buffer is unchanged. */
typedef struct ix_buf {
    char *data;
    size_t len, cap;
} ix_buf;
ix_status ix_buf_append(ix_buf *b, const void *data, size_t n);
ix_status ix_buf_printf(ix_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes room for n more bytes without changing len. */
ix_status ix_buf_reserve(ix_buf *b, size_t n);
void ix_buf_clear(ix_buf *b); /* len = 0, keeps the memory */
void ix_buf_free(ix_buf *b);

/* Overflow-checked arithmetic: return true when the result overflowed. */
static inline bool ix_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool ix_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}

/* ---- KV cache element types ------------------------------------------------
 * What a KV cache stores per K or V row of head_dim values. Shared by the KV
 * manager (block sizes, kv.h) and the attention kernels that read the rows
 * (kernels.h), so it lives here. Block types store each run of 32 values as
 * one block: an f16 scale d then the codes (GGUF's Q8_0 / Q4_0 layouts; FP8:
 * d then 32 E4M3 bytes, value = d * e4m3). A row of head_dim values is
 * head_dim / 32 such blocks, then, when head_dim % 32 == 16 (head dims 48,
 * 80, 112), one closing block of 16 values in the same form (Q4_0: element i
 * in the low nibble of byte i, element 8 + i in the high one); other head
 * dims are refused.
 * docs/kv-cache.md and docs/quantization.md give sizes and quality. */
typedef enum ix_kv_dtype {
    IX_KV_F32 = 0,
    IX_KV_F16 = 1,      /* IEEE binary16 */
    IX_KV_BF16 = 2,     /* bfloat16 (rounded to nearest even) */
    IX_KV_Q8_0 = 3,     /* 32 int8 + f16 scale: 34 bytes per 32 values */
    IX_KV_FP8_E4M3 = 4, /* 32 E4M3 + f16 scale: 34 bytes per 32 values */
    IX_KV_Q4_0 = 5,     /* 32 4-bit + f16 scale: 18 bytes per 32 values */
    IX_KV_DTYPE_COUNT
} ix_kv_dtype;

/* The name ("q8_0"), or "?" for an unknown value. */
const char *ix_kv_dtype_name(ix_kv_dtype dtype);
/* The dtype named s ("f16", "bf16", "q8_0", "fp8_e4m3", "q4_0", "f32"); false if
 * s names none. */
bool ix_kv_dtype_parse(const char *s, ix_kv_dtype *out);
/* The names of all dtypes, "f32|f16|..." (static storage), for messages. */
const char *ix_kv_dtype_names(void);
/* Values per block: 1 for float types, 32 for block types; 0 if unknown. */
uint32_t ix_kv_dtype_block(ix_kv_dtype dtype);
/* Bytes of one row of n values; 0 for an unknown dtype, for a block type
 * when n is not a multiple of 16 (above), or on overflow. */
size_t ix_kv_dtype_row_bytes(ix_kv_dtype dtype, size_t n);

/* Monotonic clock in nanoseconds. */
uint64_t ix_time_ns(void);

#define IX_UNUSED(x) ((void)(x))
#define IX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Broken invariants only (never bad input): prints and aborts. */
#define IX_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) ix__assert_fail(#cond, __FILE__, __LINE__);               \
    } while (0)
void ix__assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
#endif /* INFERX_CORE_H */
