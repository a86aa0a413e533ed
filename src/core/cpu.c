/* CPU feature probe and the choice of kernel ISA path.
 *
 * The feature table is computed once (pthread_once) and is one of the two
 * globals STYLE.md allows. AVX and AVX-512 count only when the OS saves their
 * register state (XCR0), otherwise the instructions would fault. */
#include "inferx/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static ix_cpu_features g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic int g_forced = -1; /* ix_cpu_force_isa(); -1: none */
static _Atomic int g_chosen = -1; /* cached result of the env/auto choice */

#if defined(__x86_64__) || defined(__i386__)
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void probe(void) {
    ix_cpu_features *f = &g_features;
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    unsigned family = (a >> 8) & 0xf;
    if (amd) f->amd_family = (int)(family == 0xf ? family + ((a >> 20) & 0xff) : family);
    bool osxsave = (c >> 27) & 1;
    f->sse42 = (c >> 20) & 1;
    bool avx_hw = (c >> 28) & 1;
    bool fma_hw = (c >> 12) & 1;
    bool f16c_hw = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;        /* XMM + YMM state */
    bool os_avx512 = (xcr0 & 0xe6) == 0xe6;   /* + opmask, ZMM_Hi256, Hi16_ZMM */
    f->avx = avx_hw && os_avx;
    f->fma = fma_hw && os_avx;
    f->f16c = f16c_hw && os_avx;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f->avx2 = os_avx && ((b >> 5) & 1);
        f->avx512f = os_avx512 && ((b >> 16) & 1);
        f->avx512bw = os_avx512 && ((b >> 30) & 1);
        f->avx512vl = os_avx512 && ((b >> 31) & 1);
        f->avx512vnni = os_avx512 && ((c >> 11) & 1);
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512bf16 = os_avx512 && ((a >> 5) & 1);
        f->avx_vnni = os_avx && ((a >> 4) & 1);
    }
}
#elif defined(__aarch64__)
static void probe(void) {
    g_features.neon = true; /* mandatory in AArch64 */
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
    g_features.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
}
#else
static void probe(void) {}
#endif

const ix_cpu_features *ix_cpu_features_get(void) {
    pthread_once(&g_once, probe);
    return &g_features;
}

bool ix_cpu_supports(ix_isa isa) {
    const ix_cpu_features *f = ix_cpu_features_get();
    switch (isa) {
    case IX_ISA_GENERIC: return true;
    case IX_ISA_AVX2: return f->avx2 && f->fma && f->f16c;
    case IX_ISA_AVX512: return f->avx512f && f->avx512bw && f->avx512vl && f->fma && f->f16c;
    case IX_ISA_NEON: return f->neon;
    case IX_ISA_COUNT: break;
    }
    return false;
}

static ix_isa best_isa(void) {
    for (int i = IX_ISA_COUNT - 1; i > IX_ISA_GENERIC; i--)
        if (ix_cpu_supports((ix_isa)i)) return (ix_isa)i;
    return IX_ISA_GENERIC;
}

const char *ix_isa_name(ix_isa isa) {
    static const char *const names[] = {"generic", "avx2", "avx512", "neon"};
    return (unsigned)isa < IX_ISA_COUNT ? names[isa] : "?";
}

ix_status ix_isa_parse(const char *name, ix_isa *out) {
    for (int i = 0; i < IX_ISA_COUNT; i++) {
        if (strcmp(name, ix_isa_name((ix_isa)i)) == 0) {
            *out = (ix_isa)i;
            return IX_OK;
        }
    }
    return IX_ERR_INVALID;
}

ix_isa ix_cpu_isa(void) {
    int forced = atomic_load(&g_forced);
    if (forced >= 0) return (ix_isa)forced;
    int chosen = atomic_load(&g_chosen);
    if (chosen >= 0) return (ix_isa)chosen;
    ix_isa isa = best_isa();
    const char *env = getenv("INFERX_ISA");
    if (env && *env) {
        ix_isa want;
        if (ix_isa_parse(env, &want) != IX_OK)
            IX_LOGW("INFERX_ISA=%s is not one of generic|avx2|avx512|neon; using %s", env,
                    ix_isa_name(isa));
        else if (!ix_cpu_supports(want))
            IX_LOGW("INFERX_ISA=%s is not supported by this CPU; using %s", env, ix_isa_name(isa));
        else
            isa = want;
    }
    atomic_store(&g_chosen, (int)isa);
    return isa;
}

ix_status ix_cpu_force_isa(ix_isa isa) {
    if ((unsigned)isa >= IX_ISA_COUNT) return IX_ERR_INVALID;
    if (!ix_cpu_supports(isa)) return IX_ERR_UNSUPPORTED;
    atomic_store(&g_forced, (int)isa);
    return IX_OK;
}

const char *ix_cpu_features_str(char *buf, size_t size) {
    const ix_cpu_features *f = ix_cpu_features_get();
    struct {
        bool on;
        const char *name;
    } t[] = {
        {f->sse42, "sse4.2"},     {f->avx, "avx"},         {f->avx2, "avx2"},
        {f->fma, "fma"},          {f->f16c, "f16c"},       {f->avx512f, "avx512f"},
        {f->avx512bw, "avx512bw"}, {f->avx512vl, "avx512vl"}, {f->avx512vnni, "avx512vnni"},
        {f->avx512bf16, "avx512bf16"}, {f->avx_vnni, "avxvnni"}, {f->neon, "neon"},
        {f->dotprod, "dotprod"},
    };
    size_t used = 0;
    if (size) buf[0] = '\0';
    for (size_t i = 0; i < IX_ARRAY_LEN(t); i++) {
        if (!t[i].on) continue;
        int n = snprintf(buf + used, size - used, "%s%s", used ? " " : "", t[i].name);
        if (n < 0 || (size_t)n >= size - used) break;
        used += (size_t)n;
    }
    return buf;
}
