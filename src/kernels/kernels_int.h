/*
 * kernels private header: the per-ISA table constructors, the weight block
 * layouts, the q8a activation layout that every path shares, and the small
 * exact scalar helpers (fp16, block scales) that every path's tail loops use.
 * Included by generic.c, avx2.c, avx512.c, neon.c, dispatch.c and the tests.
 */
#ifndef INFERX_KERNELS_INT_H
#define INFERX_KERNELS_INT_H

#include "inferx/kernels.h"

#include <math.h>
#include <string.h>

/* ---- per-ISA tables ------------------------------------------------------
 * Each returns a pointer to a static const table. The AVX-512 file holds two:
 * vpdpbusd (VNNI) and a vpmaddubsw fallback for AVX-512BW-only CPUs; the NEON
 * file two as well: sdot (dotprod) and smull / sadalp for ARMv8.0 cores.
 * Tests ask for each directly. */
const ix_kernel_table *ix__kernels_generic(void);
#if defined(IX_KERNELS_HAVE_X86)
/* vnni: the AVX-VNNI build of avx2.c (avx2_vnni.c), same bits; the plain
 * table where the compiler could not build that one */
const ix_kernel_table *ix__kernels_avx2(bool vnni);
const ix_kernel_table *ix__kernels_avx2_vnni(void);
const ix_kernel_table *ix__kernels_avx512(bool vnni);
#endif
#if defined(IX_KERNELS_HAVE_NEON)
const ix_kernel_table *ix__kernels_neon(bool dotprod);
#endif

/* ix_kernels_matmul on a given table (tests and the benchmark reach the
 * AVX-512BW variant this way, which no INFERX_ISA value selects on a VNNI CPU). */
ix_status ix__kernels_matmul_with(const ix_kernel_table *kt, const ix_matmul *mm, ix_pool *pool);

/* Full unrolling of a loop with a constant trip count (GCC and clang). */
#define IX__UNROLL(n) _Pragma(IX__STR(GCC unroll n))
#define IX__STR(x) #x

/* PAUSE / YIELD for spin loops. */
static inline void ix__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- GGUF weight blocks (little-endian, byte-packed, no alignment) ------
 * Every layout is in docs/kernels.md and in its codec (quants.c); the two
 * the vector tiles read directly:
 * Q8_0: fp16 d, int8 qs[32];           value j = d * qs[j]            34 bytes
 * Q4_0: fp16 d, uint8 qs[16];          value j      = d * ((qs[j] & 15) - 8)
 *                                      value j + 16 = d * ((qs[j] >> 4) - 8)  18 bytes
 * Blocks are read through byte pointers and memcpy because a row of 34- or
 * 18-byte blocks leaves every scale unaligned. */
#define IX__QK 32
#define IX__Q8_0_BYTES 34
#define IX__Q4_0_BYTES 18

/* ---- q8a: quantized activations ------------------------------------------
 * One row of K floats (K % 32 == 0) becomes, at a 64-byte aligned row start:
 *     int8_t       qs[K]        q = round_even(x / d), |q| <= 127
 *     ix__q8a_blk  blk[K/32]    (64-byte aligned) per block:
 *         float    d            max|x| / 127 of the block (0 for a zero block)
 *         int16_t  s            sum of the block's q (|s| <= 32 * 127)
 *         int16_t  s0           ... of its first 16 (the types with a scale per 16)
 *         int32_t  neg8s        -8 * s
 *         int32_t  neg128s      -128 * s
 * Rows follow each other at ix__q8a_row_bytes(K), so a tile of X rows is one
 * pointer plus a stride. s lets a kernel that multiplies unsigned weight
 * codes (Q4_0's 0..15, or Q8_0 shifted by +128 for vpdpbusd) remove the
 * offset: sum (w - c) * q = sum w * q - c * s; the two products are stored so
 * that a dot can start from them with a broadcast load, which costs no ALU
 * work. s0 and s - s0 do the same per half for a scale per 16 (Q6_K). Every
 * path produces the same bits (same division, same round-to-even), so they
 * can mix. */
/* q8a blocks per K-quant super-block of 256 (ix_kernel_table.quantize_act_super) */
#define IX__SUPER_BLOCKS 8

/* A q8a block's scale and the sums the tiles take per X row and block,
 * computed once here rather than per W group, so that a tile broadcasts
 * them from memory and moves nothing from scalar registers into vectors
 * between its dots: fs = (float)s and sd = (float)s * d, the X side of the
 * canonical min terms below (converted and multiplied per row, Q4_K / Q5_K
 * prefill ran 1.05-1.14x slower), and h0, h1 the halves' sums as int32
 * (Q2_K's integer min sums: prefill 1.05-1.10x). 32 bytes. */
typedef struct ix__q8a_blk {
    float d;
    int16_t s, s0;
    int32_t neg8s, neg128s;
    float fs, sd;
    int32_t h0, h1;
} ix__q8a_blk;

/* The sums of a block's first and second 16 codes; b->d is already set. */
static inline void ix__q8a_set_sums(ix__q8a_blk *b, int32_t s0, int32_t s1) {
    b->s = (int16_t)(s0 + s1);
    b->s0 = (int16_t)s0;
    b->neg8s = -8 * (s0 + s1);
    b->neg128s = -128 * (s0 + s1);
    b->fs = (float)b->s;
    b->sd = b->fs * b->d;
    b->h0 = s0;
    b->h1 = s1;
}

static inline size_t ix__align64(size_t n) { return (n + 63) & ~(size_t)63; }

static inline size_t ix__q8a_row_bytes(size_t k) {
    return ix__align64(k) + ix__align64(k / IX__QK * sizeof(ix__q8a_blk));
}

typedef struct ix__q8a_row {
    const int8_t *qs;       /* (K) */
    const ix__q8a_blk *blk; /* (K/32) */
} ix__q8a_row;

static inline ix__q8a_row ix__q8a_at(const void *scratch, size_t k, size_t m) {
    const uint8_t *base = (const uint8_t *)scratch + m * ix__q8a_row_bytes(k);
    ix__q8a_row r;
    r.qs = (const int8_t *)base;
    r.blk = (const ix__q8a_blk *)(const void *)(base + ix__align64(k));
    return r;
}

/* Writable view of the same row, for the quantizers. */
static inline void ix__q8a_out(void *dst, size_t k, int8_t **qs, ix__q8a_blk **blk) {
    uint8_t *base = (uint8_t *)dst;
    *qs = (int8_t *)base;
    *blk = (ix__q8a_blk *)(void *)(base + ix__align64(k));
}

/* The canonical quantized dot. A quantized weight row is read 32 elements
 * (one q8a block) at a time, each decoded (ix__q32 below) as
 *     w_i = d * sc[i / 16] * q[i] + dm * mn[i / 16]      (q, sc, mn integers)
 * and every path computes Y[m][n] as
 *     acc = 0; for each 32-element block b of the row, in order:
 *         idot = sc[0] * sum_{i<16} q_i x_i + sc[1] * sum_{i>=16} q_i x_i
 *         acc = fma((float)idot, d * d_x[b], acc)
 *         if the type has mins (ix__wtype.has_min):
 *             imin = mn[0] * sum_{i<16} x_i + mn[1] * sum_{i>=16} x_i
 *             acc = fma((float)imin, dm * d_x[b], acc)
 *         or, where ix__wtype.min_sx (mn = 1: the q8a block sum s = imin),
 *             acc = fma(dm, (float)s * d_x[b], acc)
 * where x_i are the q8a codes, idot and imin are exact int32 sums (any order)
 * and each product of scales is one f32 multiply. So every path, every tile
 * shape and every thread split gives the same bits for a quantized matmul,
 * and a token's output does not depend on the batch it is in. For Q8_0 and
 * Q4_0 (sc = 1, no mins) this is acc = fma(dot_b, d_w * d_x, acc). Q4_K and
 * Q5_K fold their sub-block scale and min into d and dm (d_super * sc and
 * -dmin * mn, exact), with sc = mn = 1, and take the min_sx form: per block
 * one float scale product, one FMA with the X-side s d_x, no integer
 * multiply.
 *
 * Super-block sums (ix__wtype.x_super: Q2_K, Q3_K). X is quantized with one scale
 * per 256 (ix_kernel_table.quantize_act_super: the 8 q8a blocks of a
 * super-block share d_x, the largest |x| of all 256 over 127), and the
 * integer sums run over the whole super-block S (blocks 8s .. 8s + 7, whose
 * w's share d and dm):
 *     idot = sum over S's blocks of the per-block idot above
 *     imin = sum over S's blocks of the per-block imin above
 *     acc = fma((float)idot, d * d_x[S], acc)
 *     acc = fma((float)imin, dm * d_x[S], acc)     (has_min: Q2_K)
 * once per super-block, in order: a two- or three-bit type's dot is mostly
 * scale and min work, and this takes its float steps and half its integer
 * adds out of the per-block loop (the form llama.cpp's Q8_K activations
 * give). idot and imin stay exact in int32, and below 2^24, so a path may
 * sum them in f32 (|idot| <= 256 * 15 * 3 * 127 for Q2_K, 256 * 32 * 4 *
 * 127 for Q3_K); a half's dot fits int16 (Q2_K 16 * 3 * 127, Q3_K 16 * 4 *
 * 127), so VNNI's vpdpwssd may form the products. */

/* The block scale of a q8a block, shared so that every path divides the same
 * way: returns d and sets *inv to the multiplier used before rounding. */
static inline float ix__q8a_scale(float amax, float *inv) {
    float d = amax / 127.0f;
    *inv = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

/* ---- exact scalar helpers -------------------------------------------------
 * Software fp16 <-> fp32 that matches F16C bit for bit (tested over all 65536
 * halves and random floats), so tails and the generic path agree with the
 * vector paths. */
static inline uint32_t ix__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ix__bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float ix__fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / NaN; F16C sets the quiet bit of a NaN */
        return ix__bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp != 0) return ix__bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24 is exact in f32 */
    float f = (float)man * 0x1p-24f;
    return sign ? -f : f;
}

static inline uint16_t ix__fp32_to_fp16(float f) {
    uint32_t x = ix__f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: quieted, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
    if (x >= 0x38800000u) {                                   /* normal half */
        uint32_t h = ((x >> 23) - 112) << 10 | ((x >> 13) & 0x3ffu);
        uint32_t rem = x & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* carry may bump the exponent */
        return (uint16_t)(sign | h);
    }
    if (x < 0x33000000u) return sign; /* below 2^-25 (ties to the even 0) */
    /* half subnormal: units of 2^-24 */
    uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float ix__bf16_to_fp32(uint16_t h) { return ix__bits_f32((uint32_t)h << 16); }

static inline uint16_t ix__fp32_to_bf16(float f) {
    uint32_t x = ix__f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static inline uint16_t ix__load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t ix__load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Scale of the Q8_0 / Q4_0 block at p. */
static inline float ix__block_d(const void *p) { return ix__fp16_to_fp32(ix__load_u16(p)); }

/* ---- weight types: the traits table (quants.c) ---------------------------
 * One row per weight type the kernels read: its block, its codec and its
 * matmul entry per path. A type lands with a generic entry only and gains
 * vector paths one at a time: a NULL entry means "use this type's generic
 * kernel", never another type's. A type without a row has no kernels, and
 * every public entry point refuses it (IX_ERR_UNSUPPORTED). */

/* The kernel tables, each one column of the traits (ix_kernel_table.path). */
typedef enum ix__path {
    IX__PATH_GENERIC,
    IX__PATH_AVX2,
    IX__PATH_AVX2_VNNI,
    IX__PATH_AVX512_BW,
    IX__PATH_AVX512_VNNI,
    IX__PATH_NEON,
    IX__PATH_NEON_DOT,
    IX__PATH_COUNT
} ix__path;

/* Y[:, n0:n1) of a checked matmul; quantized types read X from the q8a
 * scratch (already filled), float types from mm->x. */
typedef void (*ix__mm_fn)(const ix_matmul *mm, size_t n0, size_t n1);

/* 32 consecutive elements of a quantized block, decoded (the canonical
 * dot's form, above): w_i = d * sc[i / 16] * q[i] + dm * mn[i / 16]. Types
 * without mins leave mn and dm zero. */
typedef struct ix__q32 {
    int8_t q[32];
    int32_t sc[2], mn[2];
    float d, dm;
} ix__q32;

typedef enum ix__pack {
    IX__PACK_NONE,   /* rows only */
    IX__PACK_HALVES, /* F16 / BF16: element k of 16 rows side by side */
    IX__PACK_PLANES, /* Q8_0 / Q4_0: code dwords of 16 rows interleaved, scales apart */
    IX__PACK_K4,     /* Q4_K / Q5_K: Q4_0's code planes per 32 (+ Q5_K's fifth bits), the
                      * super-blocks' scales and mins unpacked apart */
    IX__PACK_K6,     /* Q6_K: Q4_0's planes of the low 4 bits, two planes of the high 2, the
                      * super-blocks' scales apart */
    IX__PACK_K2,     /* Q2_K / Q3_K: two planes of the low 2 bits (+ Q3_K's third bits),
                      * the super-blocks' scales apart */
    IX__PACK_Q32,    /* Q4_1 / Q5_0 / Q5_1: Q4_0's planes (+ a fifth-bit plane), per block
                      * the fp16 d (and m) of the 16 rows */
    IX__PACK_XS      /* IQ4_XS: Q4_0's planes of grid indices, the super-blocks' scales apart */
} ix__pack;

typedef struct ix__wtype ix__wtype;
struct ix__wtype {
    ix_dtype type;
    uint16_t blck;  /* elements per block (1 for float types) */
    uint16_t bytes; /* bytes per block */
    bool q8a;       /* its matmul reads q8a activations (else f32 X) */
    bool has_min;   /* the canonical dot adds the min term */
    bool min_sx;    /* ... as fma(dm, (float)s * d_x, acc) (Q4_K, Q5_K: mins folded into dm) */
    bool x_super;   /* X with one scale per 256 and the sums per super-block (Q2_K, Q3_K; above) */
    ix__pack pack;
    uint16_t pk_code_bytes;  /* IX__PACK_PLANES / _K4 / _K6: code bytes of 16 rows' 32 elements */
    uint16_t pk_scale_bytes; /* ... and scale bytes of 16 rows' block (blck elements) */
    /* n elements (whole blocks) of a row to f32 */
    void (*dequant)(const ix__wtype *wt, const uint8_t *src, float *dst, size_t n);
    /* quantized types: 32-element part j (< blck / 32) of the block at blk */
    void (*unpack)(const uint8_t *blk, size_t j, ix__q32 *out);
    /* n floats (whole blocks) to a row: reference quality, round to nearest.
     * qw: NULL, or n importance weights (one per column, >= 0) that weigh
     * the squared rounding error in the type's scale searches. */
    void (*quantize)(const float *src, uint8_t *dst, size_t n, const float *qw);
    /* matmul per path; [IX__PATH_GENERIC] is always set */
    ix__mm_fn mm[IX__PATH_COUNT];
};

/* Q4_K / Q5_K: the 8 sub-blocks' 6-bit scales (out[0..8)) and mins
 * (out[8..16)) from the 12 scale bytes at sc (block bytes 4..15). Scale j <
 * 4 is sc[j] & 63 and min j sc[j + 4] & 63; for j >= 4 the low 4 bits are
 * the nibbles of sc[j + 4] and the high 2 the top bits of sc[j - 4] (scale)
 * and sc[j] (min): three words at once. */
static inline void ix__k4_scales(const uint8_t *sc, uint8_t out[16]) {
    uint32_t a[3], v[4];
    memcpy(a, sc, 12);
    v[0] = a[0] & 0x3f3f3f3fu;
    v[1] = (a[2] & 0x0f0f0f0fu) | ((a[0] >> 2) & 0x30303030u);
    v[2] = a[1] & 0x3f3f3f3fu;
    v[3] = ((a[2] >> 4) & 0x0f0f0f0fu) | ((a[1] >> 2) & 0x30303030u);
    memcpy(out, v, 16);
}

/* IQ4_NL / IQ4_XS: the value of each 4-bit code (the formats' table; quants.c) */
extern const int8_t ix__iq4_grid[16];

/* IQ4_XS, Q2_K, Q3_K: block j's (elements 32 j .. 32 j + 31) integer scales
 * sc[0], sc[1] (one per 16) and mins mn[0], mn[1] (Q2_K; else 0) from the
 * super-block at b (layouts in docs/kernels.md). The unpacks and the vector
 * tiles, which decode the codes apart, share it. */
static inline void ix__sub_scales(ix_dtype t, const uint8_t *b, size_t j, int32_t sc[2], int32_t mn[2]) {
    for (size_t k = 0; k < 2; k++) {
        const size_t s = 2 * j + k; /* sub-block of 16 */
        mn[k] = 0;
        if (t == IX_DTYPE_IQ4_XS) /* low 4 bits: nibble j % 2 of scales_l[j / 2]; high 2: scales_h bits 2j */
            sc[k] = (int32_t)(((b[4 + j / 2] >> (4 * (j % 2))) & 15) | ((ix__load_u16(b + 2) >> (2 * j)) & 3) << 4) - 32;
        else if (t == IX_DTYPE_Q2_K) /* scales[s]: scale | min << 4 */
            sc[k] = b[s] & 15, mn[k] = b[s] >> 4;
        else /* Q3_K: low 4 bits in scales[s % 8] (high nibble for s >= 8), high 2 at bit 2 (s / 4) of scales[8 + s % 4] */
            sc[k] = (int32_t)((((s < 8 ? b[96 + s] : b[88 + s] >> 4) & 15) | ((b[104 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
    }
}

/* The row of type t, or NULL when the kernels do not read t. */
const ix__wtype *ix__wtype_of(ix_dtype t);

/* The activation quantizer of kt for weight type t (x_super: one scale per 256) */
typedef void (*ix__quantize_act_fn)(const float *x, void *dst, size_t k);
static inline ix__quantize_act_fn ix__act_quantizer(const ix_kernel_table *kt, ix_dtype t) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt && wt->x_super ? kt->quantize_act_super : kt->quantize_act;
}

/* The entry of table kt for wt: its own, or wt's generic kernel. */
static inline ix__mm_fn ix__mm_entry(const ix_kernel_table *kt, const ix__wtype *wt) {
    ix__mm_fn f = wt->mm[kt->path];
    return f ? f : wt->mm[IX__PATH_GENERIC];
}

/* Y[:, n0:n1) of a checked matmul (scratch quantized) on table kt. */
void ix__matmul_rows(const ix_kernel_table *kt, const ix_matmul *mm, size_t n0, size_t n1);

/* For bench/grab_bench only: true plans the threads' runs of a few X rows as
 * guided grabs without stealing (dispatch.c, mm_plan), the plan it is
 * compared with; false (the default) restores the plan in use. */
void ix__kernels_matmul_guided(bool on);

/* The matmul entries each file provides (the traits' columns). */
#define IX__MM_DECL(name) void name(const ix_matmul *mm, size_t n0, size_t n1);
IX__MM_DECL(ix__mm_float_generic) /* F32 / F16 / BF16, rows and packed halves */
IX__MM_DECL(ix__mm_q_generic)     /* every quantized type, through its unpack */
#if defined(IX_KERNELS_HAVE_X86)
#define IX__MM_DECL_AVX2(t) IX__MM_DECL(ix__mm_##t##_avx2) IX__MM_DECL(ix__mm_##t##_avx2vnni)
#define IX__MM_DECL_AVX512(t) IX__MM_DECL(ix__mm_##t##_avx512bw) IX__MM_DECL(ix__mm_##t##_avx512vnni)
IX__MM_DECL_AVX2(f32) IX__MM_DECL_AVX2(f16) IX__MM_DECL_AVX2(bf16) IX__MM_DECL_AVX2(q8_0) IX__MM_DECL_AVX2(q4_0)
IX__MM_DECL_AVX2(q5_0) IX__MM_DECL_AVX2(q4_k) IX__MM_DECL_AVX2(q5_k) IX__MM_DECL_AVX2(q6_k)
IX__MM_DECL_AVX2(q4_1) IX__MM_DECL_AVX2(q5_1) IX__MM_DECL_AVX2(iq4_nl) IX__MM_DECL_AVX2(iq4_xs) IX__MM_DECL_AVX2(q2_k)
IX__MM_DECL_AVX2(q3_k)
IX__MM_DECL_AVX512(q8_0) IX__MM_DECL_AVX512(q4_0) IX__MM_DECL_AVX512(q5_0) IX__MM_DECL_AVX512(q4_k)
IX__MM_DECL_AVX512(q5_k) IX__MM_DECL_AVX512(q6_k) IX__MM_DECL_AVX512(q4_1) IX__MM_DECL_AVX512(q5_1)
IX__MM_DECL_AVX512(iq4_nl) IX__MM_DECL_AVX512(iq4_xs) IX__MM_DECL_AVX512(q2_k) IX__MM_DECL_AVX512(q3_k)
IX__MM_DECL(ix__mm_f32_avx512) IX__MM_DECL(ix__mm_f16_avx512) IX__MM_DECL(ix__mm_bf16_avx512)
#endif
#if defined(IX_KERNELS_HAVE_NEON)
IX__MM_DECL(ix__mm_float_neon) /* F32 / F16 / BF16, both NEON tables */
#define IX__MM_DECL_NEON(t) IX__MM_DECL(ix__mm_##t##_neon) IX__MM_DECL(ix__mm_##t##_neondot)
IX__MM_DECL_NEON(q8_0) IX__MM_DECL_NEON(q4_0) IX__MM_DECL_NEON(q5_0) IX__MM_DECL_NEON(q4_k) IX__MM_DECL_NEON(q5_k)
IX__MM_DECL_NEON(q6_k) IX__MM_DECL_NEON(q4_1) IX__MM_DECL_NEON(q5_1) IX__MM_DECL_NEON(iq4_nl) IX__MM_DECL_NEON(iq4_xs)
IX__MM_DECL_NEON(q2_k) IX__MM_DECL_NEON(q3_k)
#endif

/* ---- packed weights (ix_kernels_pack) ---------------------------------------
 * Group g (W rows 16g..16g+15) occupies ix__pk_group_bytes(t, K) bytes at
 * w + g * that, 64-byte aligned. F16 / BF16: element k of the 16 rows side
 * by side, halves[K][16]. The quantized types:
 *     A group is one forward stream of units, each unit the codes of its
 *     blocks of 32 followed by their scales: the per-block kinds (Q8_0,
 *     Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) one block a unit, the K-quants and
 *     IQ4_XS the eight blocks of a super-block of 256
 *     (ix__pk_unit_blocks, ix__pk_unit_bytes, ix__pk_block_at). A core that
 *     streams one group while it computes then follows one stream, not two
 *     (codes and, far behind them, scales), which the hardware prefetcher
 *     keeps ahead of it (docs/kernels.md, "Scales inside the stream").
 *     codes[CB]           CB = 256 (Q4_0, Q4_K), 320 (Q5_K), 384 (Q6_K) or 512
 *                         (Q8_0) bytes per 32 elements: plane j (64 bytes at
 *                         j * 64) holds, in 32-bit lane r, bytes 4j..4j+3 of
 *                         row r's codes: 4-bit planes 0..3 (low nibble =
 *                         element 4j+i, high = 16+4j+i; the K-quants' codes
 *                         re-paired so), Q8_0 planes 0..7 (int8 element
 *                         4j+i). Then the high bits, in lane r, byte i:
 *                         Q5_K plane 4, bit j = fifth bit of element 4j+i,
 *                         bit 4+j of element 16+4j+i; Q6_K planes 4 and 5,
 *                         bits 2j..2j+1 = the high 2 bits of element 4j+i
 *                         (plane 4) or 16+4j+i (plane 5). K-quant codes are
 *                         unsigned (Q6_K: q + 32). Q2_K / Q3_K: planes 0
 *                         and 1, bits 2j..2j+1 of byte i = the low 2 bits
 *                         of element 4j+i (plane 0) or 16+4j+i (plane 1);
 *                         Q3_K's plane 2 holds bit 2 as Q5_K's plane 4
 *                         holds bit 4 (codes q + 4). Q4_1 / Q5_1: unsigned
 *                         codes, Q5_0: q + 16, their fifth bits as Q5_K's;
 *                         IQ4_NL / IQ4_XS: the 4-bit grid indices.
 *     scales              Q8_0 / Q4_0 / IQ4_NL / Q5_0: [16] the rows' fp16
 *                         block scales, row order; Q4_1 / Q5_1 [2][16]:
 *                         d, then m; per super-block of 256: Q4_K / Q5_K, 320
 *                         bytes: d[16], dmin[16] (fp16, row order), then the
 *                         6-bit scales and mins unpacked to bytes, sc[8][16]
 *                         and mn[8][16] (sub-block, row); Q6_K, 288 bytes:
 *                         d[16] (fp16), then the int8 scales sc[16][16]
 *                         (sub-block of 16, row); Q3_K the same, its 6-bit
 *                         scales (q - 32) as int8; Q2_K, 320 bytes: d[16],
 *                         dmin[16], then its scale | min << 4 bytes [16][16];
 *                         IQ4_XS, 160 bytes: d[16], then the signed 6-bit
 *                         scales as int8 sc[8][16] (block of 32, row)
 *     Units are not 64-byte aligned (Q4_0's 288 bytes), so the tiles load
 *     codes unaligned.
 *     padding to 64 bytes */
#define IX__PK IX_KERNELS_PACK_ROWS
/* Q4_K / Q5_K's packed scales, per super-block of a group (offsets in its bytes) */
#define IX__PK4_D 0          /* fp16 d[16] */
#define IX__PK4_DMIN 32      /* fp16 dmin[16] */
#define IX__PK4_SC 64        /* u8 sc[8][16] */
#define IX__PK4_MN 192       /* u8 mn[8][16] */
#define IX__PK4_SUPER 320    /* bytes */
/* Q6_K's and Q3_K's */
#define IX__PK6_D 0          /* fp16 d[16] */
#define IX__PK6_SC 32        /* int8 sc[16][16]: sub-block, row (Q3_K: [8][16][2], block, row, half) */
#define IX__PK6_SUPER 288    /* bytes */
/* Q2_K's */
#define IX__PK2_D 0          /* fp16 d[16] */
#define IX__PK2_DMIN 32      /* fp16 dmin[16] */
#define IX__PK2_SM 64        /* u8 scale | min << 4 [8][16][2]: block, row, half */
#define IX__PK2_SUPER 320    /* bytes */
/* Where Q2_K's and Q3_K's scale byte of half k (0, 1) of block j (0..7 in
 * its super-block) and row r sits, from the scales' start (IX__PK2_SM,
 * IX__PK6_SC): a row's two halves side by side, so one 32-byte load gives
 * every row's pair. */
static inline size_t ix__pk_pair_at(size_t j, size_t r, size_t k) { return j * 2 * IX__PK + 2 * r + k; }
/* IQ4_XS's */
#define IX__PKX_D 0          /* fp16 d[16] */
#define IX__PKX_SC 32        /* int8 sc[8][16] */
#define IX__PKX_SUPER 160    /* bytes */
/* the high-bit planes' offset in a K-quant's 32-element code bytes */
#define IX__PK_HI 256

static inline size_t ix__pk_code_bytes(ix_dtype t) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt ? wt->pk_code_bytes : 0;
}

/* The float types that pack an element at a time (halves[K][16]). */
static inline bool ix__pk_halves(ix_dtype t) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt && wt->pack == IX__PACK_HALVES;
}

/* Blocks of 32 in a unit of a group's stream (1, or 8: a super-block), the
 * unit's bytes (its codes, then its scales), and where block b's codes start
 * in the group (cb = ix__pk_code_bytes). */
static inline size_t ix__pk_unit_blocks(ix_dtype t) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt ? wt->blck / IX__QK : 1;
}
static inline size_t ix__pk_unit_bytes(ix_dtype t) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt ? wt->blck / IX__QK * wt->pk_code_bytes + wt->pk_scale_bytes : 0;
}
static inline size_t ix__pk_block_at(size_t b, size_t per, size_t cb, size_t ub) { return b / per * ub + b % per * cb; }

static inline size_t ix__pk_group_bytes(ix_dtype t, size_t k) {
    if (ix__pk_halves(t)) return ix__align64(k * 2 * IX__PK);
    const ix__wtype *wt = ix__wtype_of(t);
    return ix__align64(k / IX__QK * wt->pk_code_bytes + k / wt->blck * wt->pk_scale_bytes);
}

/* Group g's start (its first unit's codes), and its first unit's scales
 * (unit u's are u * ix__pk_unit_bytes further). */
static inline const uint8_t *ix__pk_codes(ix_dtype t, const void *w, size_t k, size_t g) {
    return (const uint8_t *)w + g * ix__pk_group_bytes(t, k);
}
static inline const uint8_t *ix__pk_scales(ix_dtype t, const void *w, size_t k, size_t g) {
    return ix__pk_codes(t, w, k, g) + ix__pk_unit_blocks(t) * ix__pk_code_bytes(t);
}

/* One tile of a packed matmul: rx X rows (the function's own constant)
 * against the 16 W rows of one group. */
typedef struct ix__pk_tile {
    const uint8_t *w;      /* the group's codes (F16: halves) */
    const uint8_t *scales; /* Q8_0 / Q4_0: the group's scales */
    const uint8_t *x;      /* X row 0: a q8a row (quantized) or f32 */
    size_t xs;             /* bytes between X rows */
    size_t blk_off;        /* q8a: offset of blk[] in a row */
    size_t k;              /* K */
    float *y;              /* Y[row 0][first column of the group] */
    size_t ldy;            /* floats between Y rows */
    size_t gstride;        /* lockstep tiles: bytes from one group to the next */
    size_t ygs;            /* lockstep tiles: Y columns from one group to the next */
    /* prefill (ix__pk_walk_dec): the group's codes as the tile decodes them,
     * IX__PK_DEC_BLOCK bytes per block, 64-byte aligned; NULL: none */
    uint8_t *dec;
    bool dec_fill; /* true: decode W and keep it in dec; false: read dec */
} ix__pk_tile;
#define IX__PK_DEC_BLOCK 512 /* eight 64-byte code vectors */
typedef void (*ix__pk_fn)(const ix__pk_tile *t);

/* Groups a lockstep tile takes at once (one X row: decode), one from each
 * of the walker's IX__PK_LOCK runs of adjacent groups (gstride apart). A
 * core that follows one forward stream at a time while it computes keeps
 * too few cache lines in flight to reach the memory bandwidth a plain read
 * gets (Zen 5, Q4_0: 0.65-0.7 of it); IX__PK_LOCK streams side by side
 * reach 0.8-1.0. The tile's arithmetic per group is that of the one-group
 * tile, so the bits are the same. */
#define IX__PK_LOCK 4

/* The locality hint of every software prefetch of streamed weights: 2, i.e.
 * prefetcht1, into L2 but not L1. A prefetch into L1 (prefetcht0) holds one
 * of the core's few L1 miss buffers for the whole DRAM latency, so it caps
 * the lines in flight below what the L2's own miss queue allows; the tile's
 * loads then find the lines in L2. Measured on Zen 4 at decode (kernels_bench
 * -l packed -m decode, the lockstep tiles, medians of 6-8 alternated runs,
 * 2026-12-03): 90-100% of a plain read of the same bytes into L2 against
 * 66-92% into L1, every type; prefetchnta no better than L1, prefetcht2 as
 * t1; 1, 2 or 4 KiB ahead per stream alike. On Zen 5 (CPU family 26) the
 * AVX-512 decode tiles prefetch into L1 instead, measured faster there
 * (avx512.c, INFERX_PREFETCH). */
#define IX__PF_LOC 2

/* How far ahead of its reads each stream of a lockstep tile prefetches: 2
 * KiB (the four streams together 8 KiB; 1 and 4 KiB measured no better),
 * half as far again on AVX-512 for the kinds whose stream unit is 2 KiB or
 * more (avx512.c, pk_lock_pf). The walker hands each stream a run of adjacent groups, so past the end
 * of one group a stream's prefetch simply runs on into the next one it
 * reads; a prefetch never faults, so one past the matrix is harmless. */
#define IX__PK_LOCK_PF 2048

/* Prefetch the line at p into L1 (t0) if l1, else IX__PF_LOC. */
static inline __attribute__((always_inline)) void ix__pk_pf(const uint8_t *p, bool l1) {
    if (l1) __builtin_prefetch(p, 0, 3);
    else __builtin_prefetch(p, 0, IX__PF_LOC);
}

/* Prefetch each 64-byte line that starts in bytes [from, to) of G streams,
 * gs bytes apart from p (a tile's groups), the streams side by side;
 * l1: into L1 (t0), else IX__PF_LOC. A tile that calls this once per
 * block with [block start + ahead, next block start + ahead) touches each
 * line of its stream once, codes and scales alike. */
static inline __attribute__((always_inline)) void ix__pk_pf_lines(const uint8_t *p, size_t gs, int G, size_t from,
                                                                   size_t to, bool l1) {
    for (size_t l = (from + 63) & ~(size_t)63; l < to; l += 64)
        IX__UNROLL(4)
        for (int g = 0; g < G; g++) ix__pk_pf(p + (size_t)g * gs + l, l1);
}

/* A few X rows (speculative verification's k + 1) run in lockstep too where
 * a path has tiles for them: up to IX__PK_LOCK_RX rows, over
 * ix__pk_lock_groups(rx) groups at a time (fewer groups as the rows grow,
 * so that two accumulators per row and group stay in registers). Each row's
 * arithmetic is again that of the one-group tile. */
#define IX__PK_LOCK_RX 6
static inline size_t ix__pk_lock_groups(size_t rx) { return rx <= 3 ? IX__PK_LOCK : IX__PK_LOCK / 2; }

/* A packed walk's X chunk: at most this many bytes of X rows (fewer rows
 * than mchunk where K is long), so that the chunk, read again for every
 * group, stays in L2. At K = 5632 (ffn_down) 128 q8a rows are 1.4 MiB;
 * bounded to 512 KiB (40 rows) the prefill tiles ran ffn_down 1.05-1.15x
 * faster (Zen 5, 1 MiB L2, kernels_bench -t 1 -m prefill, best of 5
 * alternations: Q4_0 1.15x, Q4_K 1.10x, F16 1.08x, Q6_K 1.05x); the K =
 * 2048 shapes keep their 128 rows. 384 KiB cost those 1-4%. */
#define IX__PK_XCHUNK_BYTES (512 << 10)

/* Columns [n0, n1) (whole groups) of a packed matmul: X in chunks of mchunk
 * rows (at most IX__PK_XCHUNK_BYTES), and per chunk each group against the chunk's rows, fns[rx - 1]
 * doing rx (1..rx_max) of them at a time. lock (NULL: none) holds
 * IX__PK_LOCK_RX lockstep tiles, lock[M - 1] for M rows (NULL where the path
 * has none): with one, runs of ix__pk_lock_groups(M) groups go to it and
 * the last few groups to fns. */
void ix__pk_walk(const ix_matmul *mm, size_t n0, size_t n1, const ix__pk_fn *fns, int rx_max, size_t mchunk,
                 const ix__pk_fn *lock);
/* The same for tiles that take a decode buffer (ix__pk_tile.dec): where a
 * chunk has more than rx_max rows, each group's first tile of the chunk
 * decodes W into it and the chunk's other tiles read it back, so W is
 * decoded once per chunk, not once per rx_max rows. The tiles' bits do not
 * change; without the memory for it the walk runs as ix__pk_walk. */
void ix__pk_walk_dec(const ix_matmul *mm, size_t n0, size_t n1, const ix__pk_fn *fns, int rx_max, size_t mchunk,
                     const ix__pk_fn *lock);

/* ---- matmul helpers -------------------------------------------------------- */
/* Bytes of a row of k elements (whole blocks) of t; 0 without kernels. */
static inline size_t ix__w_row_bytes(ix_dtype t, size_t k) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt ? k / wt->blck * wt->bytes : 0;
}

/* Whether t's matmul reads q8a activations. */
static inline bool ix__w_quantized(ix_dtype t) {
    const ix__wtype *wt = ix__wtype_of(t);
    return wt && wt->q8a;
}

static inline size_t ix__mm_wstride(const ix_matmul *mm) {
    return mm->w_stride_bytes ? mm->w_stride_bytes : ix__w_row_bytes(mm->w_type, mm->K);
}
static inline size_t ix__mm_ldx(const ix_matmul *mm) { return mm->ldx ? mm->ldx : mm->K; }
static inline size_t ix__mm_ldy(const ix_matmul *mm) { return mm->ldy ? mm->ldy : mm->N; }

static inline const uint8_t *ix__mm_wrow(const ix_matmul *mm, size_t n) {
    return (const uint8_t *)mm->w + n * ix__mm_wstride(mm);
}

/* ---- matmul tiles ------------------------------------------------------------
 * The vector paths compute Y in tiles of up to rx_max rows of X by rw rows of
 * W (rw output columns); ix__matmul_tiles (dispatch.c) walks the tiles and
 * each ISA supplies one function per X-row count. Rows are reached as
 * base + i * stride, not through pointer arrays, so a tile loop keeps every
 * address in a few registers.
 *
 * Every output element is computed by the same instructions in the same
 * order wherever it falls in a tile, so the walker may move a short last tile
 * back to end at the range end, recomputing (bit for bit) a few outputs the
 * previous tile already wrote: nearly every call is a full tile. */
typedef struct ix__tile {
    const uint8_t *w; /* W row 0 of the tile */
    size_t ws;        /* bytes between W rows; 0 in the narrow path (all rows are row 0) */
    const uint8_t *x; /* X row 0: f32 row, or q8a row for quantized weights */
    size_t xs;        /* bytes between X rows */
    float *y;         /* Y[row 0][column of W row 0] */
    size_t ldy;       /* floats between Y rows */
    size_t k;         /* K */
    size_t blk_off;   /* q8a: offset of blk[] in a row */
    int ncols;        /* rw, or 1 in the narrow path */
    size_t rows;      /* band mode: X rows to do (the whole X chunk) */
    /* First X tile over these W rows: it streams them in and prefetches the
     * next ones. Later tiles find the rows in cache; prefetching there too
     * measured ~30% slower prefill, so tiles compile both loop versions. */
    bool prefetch;
} ix__tile;

typedef void (*ix__tile_fn)(const ix__tile *t);

/* Decode streams W from DRAM as rw interleaved rows, each advancing a few
 * bytes per step, which the hardware prefetchers follow poorly. So while a
 * tile runs over K it prefetches, into L2, the rows of the tile
 * IX__PF_TILES ahead (rw * ws bytes, one contiguous region when rows are
 * packed): step i of n touches its share. Measured on Zen 5 at decode: 1
 * tile ahead into L1 reached ~65% of a plain sequential read, 4 tiles into L2
 * ~70-80%, farther no better. Prefetches never fault, so running past the end
 * of W is harmless. */
#define IX__PF_TILES 4

static inline void ix__prefetch_ahead(const ix__tile *t, int rw, size_t i, size_t n) {
    size_t span = (size_t)rw * t->ws, per = (span + n - 1) / n;
    const char *p = (const char *)t->w + IX__PF_TILES * span + i * per;
    for (size_t o = 0; o < per; o += 64) __builtin_prefetch(p + o, 0, IX__PF_LOC);
}

/* Y[:, n0:n1) with fns[rx - 1] computing rx (1..rx_max) X rows by rw W rows.
 * X rows go in chunks (about IX__MM_XCHUNK_BYTES, at most IX__MM_MCHUNK rows)
 * so a chunk's X stays in L2 while the W rows of a tile stay in L1. rx_max == 0 is band mode: fns[0] gets a whole
 * chunk (t->rows X rows) for its rw W rows and tiles it itself. */
void ix__matmul_tiles(const ix_matmul *mm, size_t n0, size_t n1, const ix__tile_fn *fns,
                      int rx_max, int rw);
#define IX__MM_MCHUNK 128             /* at most; and the band tile's buffer rows */
#define IX__MM_XCHUNK_BYTES (256 << 10) /* X per chunk for the other tiles */

/* Attention: scores are scored in chunks of this many tokens (a stack array). */
#define IX__ATTN_CHUNK 64

/* Moves the accumulator's running max to cover a chunk whose largest score
 * is chunk_max and rescales sum. Returns the factor that o must be
 * multiplied by (1 when the max did not move). *skip: the chunk adds nothing
 * (all scores -inf or NaN) and the caller drops it. */
static inline float ix__attn_rebase(ix_attn_acc *acc, float chunk_max, bool *skip) {
    *skip = !(chunk_max > -INFINITY);
    if (*skip || chunk_max <= acc->max) return 1.0f;
    float alpha = expf(acc->max - chunk_max); /* 0 when max was -inf */
    acc->max = chunk_max;
    acc->sum *= alpha;
    return alpha;
}

/* Soft-capping of a scaled attention score (monotonic: the cap of a chunk's
 * max is the max of the capped scores, on every path). */
static inline float ix__softcap(float s, float cap) { return cap * tanhf(s / cap); }

/* ---- quantized K/V rows (core.h's block types) --------------------------------
 * A row of head_dim values is head_dim / 32 blocks of L = 32 values, then
 * one of L = 16 when head_dim % 32 == 16, each ix__kv_block_bytes(t, L): an
 * f16 scale d, then the codes (Q8_0: L int8; Q4_0: L / 2 bytes, element i
 * in the low nibble of byte i and element L / 2 + i in the high one, minus
 * 8; FP8_E4M3: L E4M3 bytes). Every code decodes to an exact integer c with
 * value = ix__kv_block_scale(block) * c: int8, nibble - 8, and for E4M3 the
 * value times 512 (every E4M3 number is a multiple of 2^-9, |c| <= 229376),
 * the 2^-9 folded into the scale. So q . k of a block is an exact int32 dot
 * with an int8 query, whatever the order of its sums. */
#define IX__KV_QK 32
/* Largest head_dim the quantized attention kernels take (their q8a query
 * buffer lives on the stack). */
#define IX__ATTN_Q_MAX_HD 1024

static inline bool ix__kv_is_block(ix_kv_dtype t) {
    return t == IX_KV_Q8_0 || t == IX_KV_Q4_0 || t == IX_KV_FP8_E4M3;
}

static inline size_t ix__kv_block_bytes(ix_kv_dtype t, size_t L) {
    return 2 + (t == IX_KV_Q4_0 ? L / 2 : L);
}

static inline float ix__kv_block_scale(const uint8_t *blk, ix_kv_dtype t) {
    float d = ix__block_d(blk);
    return t == IX_KV_FP8_E4M3 ? d * 0x1p-9f : d;
}

/* E4M3 (bias 7, no infinities; 0x7f / 0xff are NaN and never written) to
 * its value times 512: (8 + m) << (e - 1) for e > 0, m for subnormals. */
static inline int32_t ix__e4m3_int(uint8_t b) {
    int32_t e = (b >> 3) & 15, m = b & 7;
    int32_t mag = e ? (8 | m) << (e - 1) : m;
    return b & 0x80 ? -mag : mag;
}

/* The L codes of one block (at its code bytes) as integers. */
static inline void ix__kv_codes(const uint8_t *codes, ix_kv_dtype t, size_t L, int32_t *c) {
    for (size_t i = 0; i < L; i++) {
        if (t == IX_KV_Q8_0) c[i] = (int8_t)codes[i];
        else if (t == IX_KV_Q4_0) c[i] = (i < L / 2 ? codes[i] & 15 : codes[i - L / 2] >> 4) - 8;
        else c[i] = ix__e4m3_int(codes[i]);
    }
}

/* The shared cos/sin table of RoPE (dispatch.c), identical for every path. */
void ix__rope_angles(const ix_rope_params *p, int32_t pos, float *cs);

#endif /* INFERX_KERNELS_INT_H */
