/*
 * The quantized matmul tiles of neon.c (Q8_0 / Q4_0 rows and packed; Q5_0,
 * Q4_K, Q5_K and Q6_K rows through neon.c's block decoders), written once over the
 * int8 dot and included twice by it: with NQ_SDOT 0 for every ARMv8.0 core
 * (smull / smlal / sadalp) and with NQ_SDOT 1 inside a dotprod target region
 * (sdot), each time with NQ(name) giving the names their own suffix. Two
 * copies because GCC inlines an intrinsic only into a function compiled for
 * its extension, so the sdot tiles cannot share a body with the plain ones.
 *
 * Both give the canonical dot (kernels_int.h): the integer dot of a block is
 * exact whatever order its products are added in, and the float steps are
 * the same convert, multiply and fused multiply-add per output lane, so every
 * tile matches generic.c bit for bit.
 *
 * The includer defines NQ_SDOT, NQ(name) and NQ_PATH (the suffix of the
 * traits' entries this copy defines: neon or neondot).
 */
#if !defined(NQ_SDOT) || !defined(NQ) || !defined(NQ_PATH)
#error "neon_q.h is included by neon.c with NQ_SDOT, NQ and NQ_PATH defined"
#endif

/* ---- row layout: NQ_RX X rows by NQ_RW W rows -------------------------------
 * A block of each of the 4 W rows is two int8x16 (elements 0-15 and 16-31;
 * Q4_0 codes stay unsigned 0..15 and the q8a block's -8 s removes the offset).
 * Per X row, each W row's 32 products land in the lanes of one int32x4, and
 * two pairwise adds leave row j's exact dot in lane j, so the 4 outputs of a
 * row are one convert and one FMA. */
#define NQ_RX 4
#define NQ_RW 4

/* acc + the 16 products w[i] * x[i], spread over the 4 lanes */
static inline __attribute__((always_inline)) int32x4_t NQ(dot16)(int32x4_t acc, int8x16_t w,
                                                                int8x16_t x) {
#if NQ_SDOT
    return vdotq_s32(acc, w, x);
#else
    /* |w| <= 128 and |x| <= 127 (q8a), so two products fit an int16 */
    int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(x));
    p = vmlal_high_s8(p, w, x);
    return vpadalq_s16(acc, p);
#endif
}

static inline __attribute__((always_inline)) void NQ(qtile_run)(const ix__tile *a, bool q8, int rx) {
    const size_t bs = q8 ? IX__Q8_0_BYTES : IX__Q4_0_BYTES, nb = a->k / IX__QK;
    const uint8x16_t nib = vdupq_n_u8(0x0f);
    float32x4_t acc[NQ_RX];
    for (int i = 0; i < rx; i++) acc[i] = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        int8x16_t w0[NQ_RW], w1[NQ_RW];
        uint16_t h[NQ_RW];
        for (int j = 0; j < NQ_RW; j++) {
            const uint8_t *p = a->w + (size_t)j * a->ws + b * bs;
            uint8x16_t v = vld1q_u8(p + 2);
            h[j] = ix__load_u16(p);
            if (q8) {
                w0[j] = vreinterpretq_s8_u8(v);
                w1[j] = vreinterpretq_s8_u8(vld1q_u8(p + 18));
            } else {
                w0[j] = vreinterpretq_s8_u8(vandq_u8(v, nib));
                w1[j] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
            }
        }
        const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
        for (int i = 0; i < rx; i++) {
            const uint8_t *xr = a->x + (size_t)i * a->xs;
            const int8_t *xq = (const int8_t *)xr + b * IX__QK;
            const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
            int32x4_t d[NQ_RW];
            for (int j = 0; j < NQ_RW; j++)
                d[j] = NQ(dot16)(NQ(dot16)(vdupq_n_s32(0), w0[j], x0), w1[j], x1);
            int32x4_t s = vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3]));
            if (!q8) s = vaddq_s32(s, vdupq_n_s32(xb->neg8s));
            acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(s), vmulq_n_f32(dw, xb->d));
        }
    }
    for (int i = 0; i < rx; i++) { /* ncols: NQ_RW, or 1 in the walker's narrow path */
        float *y = a->y + (size_t)i * a->ldy;
        if (a->ncols == NQ_RW) vst1q_f32(y, acc[i]);
        else vst1q_lane_f32(y, acc[i], 0);
    }
}

#define NQ_QTILE(T, R)                                                                          \
    static void NQ(qtile_##T##_##R)(const ix__tile *a) {                                         \
        NQ(qtile_run)(a, IX_DTYPE_##T == IX_DTYPE_Q8_0, R);                                       \
    }
NQ_QTILE(Q8_0, 1) NQ_QTILE(Q8_0, 2) NQ_QTILE(Q8_0, 3) NQ_QTILE(Q8_0, 4)
NQ_QTILE(Q4_0, 1) NQ_QTILE(Q4_0, 2) NQ_QTILE(Q4_0, 3) NQ_QTILE(Q4_0, 4)
#undef NQ_QTILE
static const ix__tile_fn NQ(k_qtiles)[2][NQ_RX] = {
    {NQ(qtile_Q8_0_1), NQ(qtile_Q8_0_2), NQ(qtile_Q8_0_3), NQ(qtile_Q8_0_4)},
    {NQ(qtile_Q4_0_1), NQ(qtile_Q4_0_2), NQ(qtile_Q4_0_3), NQ(qtile_Q4_0_4)}};

/* ---- the other quantized types (kq): NQ_RX X rows by NQ_RW W rows -------------
 * qtile_run's layout with each W row's block decoded by neon.c's kq_decode
 * into signed codes, then the canonical dot's integer scale and min terms on
 * the 4 rows' exact dots (Q6_K: a scale per 16, so its halves are dotted
 * and reduced apart). */
static inline __attribute__((always_inline)) int32x4_t NQ(reduce4)(const int32x4_t d[NQ_RW]) {
    return vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3]));
}

static inline __attribute__((always_inline)) void NQ(kq_run)(const ix__tile *a, kq_type t, int rx) {
    const size_t nb = a->k / IX__QK;
    const bool blk32 = t == KQ_Q5_0 || t == KQ_Q4_1 || t == KQ_Q5_1 || t == KQ_IQ4_NL; /* 32-element blocks */
    const size_t per = blk32 ? 1 : 8;
    const size_t bytes = t == KQ_Q5_0 ? 22 : t == KQ_Q4_K ? 144 : t == KQ_Q5_K ? 176 : t == KQ_Q6_K ? 210
                         : t == KQ_Q4_1 ? 20 : t == KQ_Q5_1 ? 24 : t == KQ_IQ4_NL ? 18 : t == KQ_IQ4_XS ? 136
                         : t == KQ_Q2_K ? 84 : 110;
    const bool k4 = t == KQ_Q4_K || t == KQ_Q5_K; /* 6-bit scales and mins per 32 */
    const bool m1 = t == KQ_Q4_1 || t == KQ_Q5_1; /* min term m * s */
    const bool tabled = t == KQ_IQ4_XS || t == KQ_Q2_K || t == KQ_Q3_K; /* ix__sub_scales */
    const bool halves = kq_halves(t);
    const ix_dtype dt = t == KQ_IQ4_XS ? IX_DTYPE_IQ4_XS : t == KQ_Q2_K ? IX_DTYPE_Q2_K : IX_DTYPE_Q3_K;
    float32x4_t acc[NQ_RX];
    int32x4_t isum[NQ_RX], imsum[NQ_RX]; /* Q2_K, Q3_K: the super-block's integer sums */
    for (int i = 0; i < rx; i++) {
        acc[i] = vdupq_n_f32(0.0f);
        isum[i] = imsum[i] = vdupq_n_s32(0);
    }
    uint8_t scm[NQ_RW][16]; /* Q4_K: per row, the super-block's scales and mins */
    float32x4_t dw = vdupq_n_f32(0.0f), dm = dw;
    for (size_t b = 0; b < nb; b++) {
        const size_t j = b % per;
        const uint8_t *p[NQ_RW]; /* the rows' (super-)blocks */
        for (int r = 0; r < NQ_RW; r++) p[r] = a->w + (size_t)r * a->ws + b / per * bytes;
        if (blk32) dw = rows4_h(p, 0);
        if (m1) dm = rows4_h(p, 2);
        if (j == 0 && !blk32) {
            if (k4)
                for (int r = 0; r < NQ_RW; r++) ix__k4_scales(p[r] + 4, scm[r]);
            dw = rows4_h(p, t == KQ_Q6_K ? 208 : t == KQ_Q2_K ? 80 : t == KQ_Q3_K ? 108 : 0);
            if (k4 || t == KQ_Q2_K) dm = vnegq_f32(rows4_h(p, k4 ? 2 : 82)); /* -dmin, exactly */
        }
        int8x16_t lo[NQ_RW], hi[NQ_RW];
        int32_t sc0[NQ_RW] = {0}, sc1[NQ_RW] = {0}, mn[NQ_RW] = {0}, mn1[NQ_RW] = {0};
        for (int r = 0; r < NQ_RW; r++) {
            kq_decode(t, p[r], j, &lo[r], &hi[r]);
            if (k4) sc0[r] = scm[r][j], mn[r] = scm[r][8 + j];
            if (t == KQ_Q6_K) sc0[r] = (int8_t)p[r][192 + 2 * j], sc1[r] = (int8_t)p[r][193 + 2 * j];
            if (tabled) {
                int32_t sc[2], m[2];
                ix__sub_scales(dt, p[r], j, sc, m);
                sc0[r] = sc[0], sc1[r] = sc[1], mn[r] = m[0], mn1[r] = m[1];
            }
        }
        const int32x4_t vsc0 = vld1q_s32(sc0), vsc1 = vld1q_s32(sc1), vmn = vld1q_s32(mn), vmn1 = vld1q_s32(mn1);
        /* Q4_K / Q5_K: the unpack's float scales d sc and -dmin mn (exact) */
        const float32x4_t bw = k4 ? vmulq_f32(dw, vcvtq_f32_s32(vsc0)) : dw;
        const float32x4_t bm = k4 ? vmulq_f32(dm, vcvtq_f32_s32(vmn)) : dm;
        for (int i = 0; i < rx; i++) {
            const uint8_t *xr = a->x + (size_t)i * a->xs;
            const int8_t *xq = (const int8_t *)xr + b * IX__QK;
            const ix__q8a_blk *xb = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
            int32x4_t idot;
            if (halves) {
                int32x4_t dl[NQ_RW], dh[NQ_RW];
                for (int r = 0; r < NQ_RW; r++) {
                    dl[r] = NQ(dot16)(vdupq_n_s32(0), lo[r], x0);
                    dh[r] = NQ(dot16)(vdupq_n_s32(0), hi[r], x1);
                }
                idot = vmlaq_s32(vmulq_s32(vsc0, NQ(reduce4)(dl)), vsc1, NQ(reduce4)(dh));
            } else {
                int32x4_t d[NQ_RW];
                for (int r = 0; r < NQ_RW; r++) d[r] = NQ(dot16)(NQ(dot16)(vdupq_n_s32(0), lo[r], x0), hi[r], x1);
                idot = NQ(reduce4)(d);
                if (t == KQ_IQ4_XS) idot = vmulq_s32(vsc0, idot);
            }
            if (kq_x_super(t)) { /* the integer sums per super-block */
                const int32_t s0 = xb->s0, s1 = xb->s - xb->s0;
                isum[i] = vaddq_s32(isum[i], idot);
                if (t == KQ_Q2_K) /* a min per 16: the halves' X sums */
                    imsum[i] = vaddq_s32(imsum[i], vmlaq_n_s32(vmulq_n_s32(vmn, s0), vmn1, s1));
                if (j == 7) {
                    acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(isum[i]), vmulq_n_f32(bw, xb->d));
                    if (t == KQ_Q2_K) acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(imsum[i]), vmulq_n_f32(dm, xb->d));
                    isum[i] = imsum[i] = vdupq_n_s32(0);
                }
                continue;
            }
            acc[i] = vfmaq_f32(acc[i], vcvtq_f32_s32(idot), vmulq_n_f32(bw, xb->d));
            if (k4) { /* the min_sx form */
                acc[i] = vfmaq_f32(acc[i], bm, vdupq_n_f32(xb->sd));
            } else if (m1) {
                acc[i] = vfmaq_f32(acc[i], vdupq_n_f32(xb->fs), vmulq_n_f32(dm, xb->d));
            }
        }
    }
    for (int i = 0; i < rx; i++) { /* ncols: NQ_RW, or 1 in the walker's narrow path */
        float *y = a->y + (size_t)i * a->ldy;
        if (a->ncols == NQ_RW) vst1q_f32(y, acc[i]);
        else vst1q_lane_f32(y, acc[i], 0);
    }
}

#define NQ_KQ(T, R) static void NQ(kq_##T##_##R)(const ix__tile *a) { NQ(kq_run)(a, KQ_##T, R); }
NQ_KQ(Q5_0, 1) NQ_KQ(Q5_0, 2) NQ_KQ(Q5_0, 3) NQ_KQ(Q5_0, 4)
NQ_KQ(Q4_K, 1) NQ_KQ(Q4_K, 2) NQ_KQ(Q4_K, 3) NQ_KQ(Q4_K, 4)
NQ_KQ(Q5_K, 1) NQ_KQ(Q5_K, 2) NQ_KQ(Q5_K, 3) NQ_KQ(Q5_K, 4)
NQ_KQ(Q6_K, 1) NQ_KQ(Q6_K, 2) NQ_KQ(Q6_K, 3) NQ_KQ(Q6_K, 4)
NQ_KQ(Q4_1, 1) NQ_KQ(Q4_1, 2) NQ_KQ(Q4_1, 3) NQ_KQ(Q4_1, 4)
NQ_KQ(Q5_1, 1) NQ_KQ(Q5_1, 2) NQ_KQ(Q5_1, 3) NQ_KQ(Q5_1, 4)
NQ_KQ(IQ4_NL, 1) NQ_KQ(IQ4_NL, 2) NQ_KQ(IQ4_NL, 3) NQ_KQ(IQ4_NL, 4)
NQ_KQ(IQ4_XS, 1) NQ_KQ(IQ4_XS, 2) NQ_KQ(IQ4_XS, 3) NQ_KQ(IQ4_XS, 4)
NQ_KQ(Q2_K, 1) NQ_KQ(Q2_K, 2) NQ_KQ(Q2_K, 3) NQ_KQ(Q2_K, 4)
NQ_KQ(Q3_K, 1) NQ_KQ(Q3_K, 2) NQ_KQ(Q3_K, 3) NQ_KQ(Q3_K, 4)
#undef NQ_KQ
#define NQ_KQ_ROW(T) {NQ(kq_##T##_1), NQ(kq_##T##_2), NQ(kq_##T##_3), NQ(kq_##T##_4)}
static const ix__tile_fn NQ(k_kqtiles)[KQ_N][NQ_RX] = {
    NQ_KQ_ROW(Q5_0), NQ_KQ_ROW(Q4_K), NQ_KQ_ROW(Q5_K), NQ_KQ_ROW(Q6_K), NQ_KQ_ROW(Q4_1),
    NQ_KQ_ROW(Q5_1), NQ_KQ_ROW(IQ4_NL), NQ_KQ_ROW(IQ4_XS), NQ_KQ_ROW(Q2_K), NQ_KQ_ROW(Q3_K)};
#undef NQ_KQ_ROW

/* ---- packed layout (ix_kernels_pack) -----------------------------------------
 * A 16-byte quarter of a 64-byte plane is 4 W rows ("a quad"), 4 code bytes
 * each, so its products with the X row's matching 4 bytes, summed per 32-bit
 * lane, are 4 rows' partial dots with no reduction across lanes.
 *   sdot: one sdot by element per quad and plane, the X bytes taken from a
 *         register by lane index; 2 quads (8 rows) per pass, 4 X rows.
 *   plain: the X dword broadcast by a load (ld1r rather than a dup: smull,
 *         smlal and sadalp already take the vector ALU), then smull / smlal
 *         over two planes in int16 (two products: no overflow) and sadalp
 *         into two int32x4 whose pairwise sum is the quad's dots; 1 quad per
 *         pass, since each X row needs twice the accumulators.
 * Passes over the group's rows re-read X from L1; W is read once. Register
 * counts chose these shapes (no spills in the disassembly); they have not
 * been timed on an ARM core. */
#define NQ_PK_RX 4
#define NQ_PK_MCHUNK 128
#if NQ_SDOT
#define NQ_PK_QUADS 2
#else
#define NQ_PK_QUADS 1
#endif

#if NQ_SDOT
/* sdot by element; the lane is an immediate, so a switch (folded away once
 * the plane loop is unrolled) keeps -O0 builds compiling */
static inline __attribute__((always_inline)) int32x4_t NQ(sdot_lane)(int32x4_t acc, int8x16_t w,
                                                                    int8x16_t x, int lane) {
    switch (lane) {
    case 0: return vdotq_laneq_s32(acc, w, x, 0);
    case 1: return vdotq_laneq_s32(acc, w, x, 1);
    case 2: return vdotq_laneq_s32(acc, w, x, 2);
    default: return vdotq_laneq_s32(acc, w, x, 3);
    }
}
#else
/* lo / hi (rows 0-1 / 2-3 of a quad, two lanes each) += va * xa + vb * xb */
static inline __attribute__((always_inline)) void NQ(pair)(int32x4_t *lo, int32x4_t *hi, int8x16_t va,
                                                          int8x16_t xa, int8x16_t vb, int8x16_t xb) {
    int16x8_t pl = vmlal_s8(vmull_s8(vget_low_s8(va), vget_low_s8(xa)), vget_low_s8(vb), vget_low_s8(xb));
    int16x8_t ph = vmlal_high_s8(vmull_high_s8(va, xa), vb, xb);
    *lo = vpadalq_s16(*lo, pl);
    *hi = vpadalq_s16(*hi, ph);
}

static inline __attribute__((always_inline)) int8x16_t NQ(bcast4)(const int8_t *p) {
    return vreinterpretq_s8_s32(vld1q_dup_s32((const int32_t *)(const void *)p));
}
#endif

static inline __attribute__((always_inline)) void NQ(pk_run)(const ix__pk_tile *a, bool q8, int rx) {
    const size_t ub = (q8 ? 512 : 256) + 2 * IX__PK, nb = a->k / IX__QK; /* a unit: the block's codes, its scales */
    const uint8x16_t nib = vdupq_n_u8(0x0f);
    for (int h = 0; h < IX__PK / (4 * NQ_PK_QUADS); h++) { /* W rows 4 NQ_PK_QUADS h, ... */
        float32x4_t acc[NQ_PK_RX][NQ_PK_QUADS];
        for (int i = 0; i < rx; i++)
            for (int q = 0; q < NQ_PK_QUADS; q++) acc[i][q] = vdupq_n_f32(0.0f);
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *c = a->w + b * ub + (size_t)(16 * NQ_PK_QUADS * h);
            const int8_t *xq[NQ_PK_RX];
            const ix__q8a_blk *xb[NQ_PK_RX];
            for (int i = 0; i < rx; i++) {
                const uint8_t *xr = a->x + (size_t)i * a->xs;
                xq[i] = (const int8_t *)xr + b * IX__QK;
                xb[i] = (const ix__q8a_blk *)(const void *)(xr + a->blk_off) + b;
            }
            int32x4_t dot[NQ_PK_RX][NQ_PK_QUADS]; /* lane r: row 4q + r's exact dot */
#if NQ_SDOT
            int8x16_t xl[NQ_PK_RX], xh[NQ_PK_RX]; /* elements 0-15, 16-31 */
            for (int i = 0; i < rx; i++) {
                xl[i] = vld1q_s8(xq[i]);
                xh[i] = vld1q_s8(xq[i] + 16);
                for (int q = 0; q < NQ_PK_QUADS; q++) dot[i][q] = vdupq_n_s32(q8 ? 0 : xb[i]->neg8s);
            }
            /* unrolled: sdot's lane is then a constant and the switch folds
             * (a plain bound: GCC drops the pragma on a ?: condition) */
            const int planes = q8 ? 8 : 4;
            IX__UNROLL(8)
            for (int j = 0; j < planes; j++) /* plane j: elements 4j.. (Q4_0: and 16 + 4j..) */
                for (int q = 0; q < NQ_PK_QUADS; q++) {
                    uint8x16_t v = vld1q_u8(c + 64 * j + 16 * q);
                    if (q8) {
                        for (int i = 0; i < rx; i++)
                            dot[i][q] = NQ(sdot_lane)(dot[i][q], vreinterpretq_s8_u8(v),
                                                      j < 4 ? xl[i] : xh[i], j & 3);
                    } else {
                        int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, nib));
                        int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
                        for (int i = 0; i < rx; i++) {
                            dot[i][q] = NQ(sdot_lane)(dot[i][q], lo, xl[i], j);
                            dot[i][q] = NQ(sdot_lane)(dot[i][q], hi, xh[i], j);
                        }
                    }
                }
#else
            int32x4_t dlo[NQ_PK_RX][NQ_PK_QUADS], dhi[NQ_PK_RX][NQ_PK_QUADS];
            for (int i = 0; i < rx; i++)
                for (int q = 0; q < NQ_PK_QUADS; q++) dlo[i][q] = dhi[i][q] = vdupq_n_s32(0);
            for (int j = 0; j < 4; j++) /* Q8_0: planes 2j and 2j + 1; Q4_0: plane j, both nibbles */
                for (int q = 0; q < NQ_PK_QUADS; q++) {
                    int8x16_t va, vb;
                    if (q8) {
                        va = vreinterpretq_s8_u8(vld1q_u8(c + 128 * j + 16 * q));
                        vb = vreinterpretq_s8_u8(vld1q_u8(c + 128 * j + 64 + 16 * q));
                    } else {
                        uint8x16_t v = vld1q_u8(c + 64 * j + 16 * q);
                        va = vreinterpretq_s8_u8(vandq_u8(v, nib));
                        vb = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
                    }
                    for (int i = 0; i < rx; i++) {
                        const int8_t *xa = xq[i] + (q8 ? 8 * j : 4 * j), *xc = q8 ? xa + 4 : xa + 16;
                        NQ(pair)(&dlo[i][q], &dhi[i][q], va, NQ(bcast4)(xa), vb, NQ(bcast4)(xc));
                    }
                }
            for (int i = 0; i < rx; i++)
                for (int q = 0; q < NQ_PK_QUADS; q++) {
                    dot[i][q] = vpaddq_s32(dlo[i][q], dhi[i][q]);
                    if (!q8) dot[i][q] = vaddq_s32(dot[i][q], vdupq_n_s32(xb[i]->neg8s));
                }
#endif
            const uint8_t *sc = a->scales + b * ub + (size_t)(4 * NQ_PK_QUADS * h) * 2;
            for (int q = 0; q < NQ_PK_QUADS; q++) {
                const float32x4_t dw = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(sc + 8 * q)));
                for (int i = 0; i < rx; i++)
                    acc[i][q] = vfmaq_f32(acc[i][q], vcvtq_f32_s32(dot[i][q]), vmulq_n_f32(dw, xb[i]->d));
            }
        }
        for (int i = 0; i < rx; i++)
            for (int q = 0; q < NQ_PK_QUADS; q++)
                vst1q_f32(a->y + (size_t)i * a->ldy + 4 * (NQ_PK_QUADS * h + q), acc[i][q]);
    }
}

#define NQ_PK(T, R)                                                                             \
    static void NQ(pk_##T##_##R)(const ix__pk_tile *a) { NQ(pk_run)(a, IX_DTYPE_##T == IX_DTYPE_Q8_0, R); }
NQ_PK(Q8_0, 1) NQ_PK(Q8_0, 2) NQ_PK(Q8_0, 3) NQ_PK(Q8_0, 4)
NQ_PK(Q4_0, 1) NQ_PK(Q4_0, 2) NQ_PK(Q4_0, 3) NQ_PK(Q4_0, 4)
#undef NQ_PK
static const ix__pk_fn NQ(k_pk)[2][NQ_PK_RX] = {
    {NQ(pk_Q8_0_1), NQ(pk_Q8_0_2), NQ(pk_Q8_0_3), NQ(pk_Q8_0_4)},
    {NQ(pk_Q4_0_1), NQ(pk_Q4_0_2), NQ(pk_Q4_0_3), NQ(pk_Q4_0_4)}};

/* The traits' entries (quants.c) of this copy's table. */
#define NQ_MM2(t, path) ix__mm_##t##_##path
#define NQ_MM(t, path) NQ_MM2(t, path)
void NQ_MM(q8_0, NQ_PATH)(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, NQ(k_pk)[0], NQ_PK_RX, NQ_PK_MCHUNK, NULL);
    else ix__matmul_tiles(mm, n0, n1, NQ(k_qtiles)[0], NQ_RX, NQ_RW);
}

void NQ_MM(q4_0, NQ_PATH)(const ix_matmul *mm, size_t n0, size_t n1) {
    if (mm->w_packed) ix__pk_walk(mm, n0, n1, NQ(k_pk)[1], NQ_PK_RX, NQ_PK_MCHUNK, NULL);
    else ix__matmul_tiles(mm, n0, n1, NQ(k_qtiles)[1], NQ_RX, NQ_RW);
}
/* the packed forms beyond Q8_0 / Q4_0 have tiles on AVX-512 only
 * (ix_kernels_pack_pays): read here exactly, slowly */
#define NQ_MM_KQ(t, T)                                                                           \
    void NQ_MM(t, NQ_PATH)(const ix_matmul *mm, size_t n0, size_t n1) {                          \
        if (mm->w_packed) ix__mm_q_generic(mm, n0, n1);                                         \
        else ix__matmul_tiles(mm, n0, n1, NQ(k_kqtiles)[KQ_##T], NQ_RX, NQ_RW);                  \
    }
NQ_MM_KQ(q4_k, Q4_K) NQ_MM_KQ(q5_0, Q5_0) NQ_MM_KQ(q5_k, Q5_K) NQ_MM_KQ(q6_k, Q6_K) NQ_MM_KQ(q4_1, Q4_1)
NQ_MM_KQ(q5_1, Q5_1) NQ_MM_KQ(iq4_nl, IQ4_NL) NQ_MM_KQ(iq4_xs, IQ4_XS) NQ_MM_KQ(q2_k, Q2_K) NQ_MM_KQ(q3_k, Q3_K)
#undef NQ_MM_KQ
#undef NQ_MM
#undef NQ_MM2

#undef NQ_RX
#undef NQ_RW
#undef NQ_PK_RX
#undef NQ_PK_MCHUNK
#undef NQ_PK_QUADS
