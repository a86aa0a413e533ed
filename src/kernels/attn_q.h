/*
 * Attention over quantized K/V rows (q8_0, q4_0, fp8_e4m3), written once and
 * included by generic.c and every ISA file after it defines three primitives:
 *   vq_quantize(x, dst, k)         the path's quantize_act (q8a row of the query)
 *   vq_dot(q, codes, t, L) -> int32  exact dot of L (32 or 16, a constant after
 *                                  inlining) int8 query codes with the integer
 *                                  codes of one block (kernels_int.h)
 *   vq_axpy(o, w, codes, t, L)     o[i] = fmaf(w, (float)c_i, o[i]), i < L
 *   vq_half(h) -> float            an f16 scale widened (F16C / NEON; the software
 *                                  conversion gives the same bits)
 * The canonical arithmetic, which every path follows operation for operation
 * (so all paths give the same bits, and a query the same bits alone or in a
 * group):
 *   the query is quantized to q8a blocks (scale dq_b, codes q) once per call
 *   (zero-padded to whole 32-blocks when the row closes with a 16-block, so
 *   that block's scale is that of its 16 values);
 *   score_t = 0; for each block b: score_t = fmaf((float)dot_b, dk_b * dq_b, score_t)
 *   s_t = score_t * scale (then the softcap); in chunks of IX__ATTN_CHUNK tokens
 *   the online rebase of ix__attn_rebase (o *= alpha when the max moves);
 *   p_t = expf(s_t - max); sum += p_t; for each block b: o_b += (p_t * dv_b) * c
 * with dk_b, dv_b = ix__kv_block_scale. Integer sums are exact in any order and
 * the float steps are single scalar operations or lane-wise FMAs; nothing is
 * written as a * b + c, which a compiler could fuse on one path only. The
 * quantized query costs some precision (as llama.cpp's CPU path does for a
 * quantized cache): docs/quantization.md has the measured effect.
 */
#ifndef INFERX_KERNELS_ATTN_Q_H
#define INFERX_KERNELS_ATTN_Q_H

/* A block's scale (ix__kv_block_scale through the path's f16 conversion). */
static inline __attribute__((always_inline)) float vq_scale(const uint8_t *blk, ix_kv_dtype t) {
    float d = vq_half(ix__load_u16(blk));
    return t == IX_KV_FP8_E4M3 ? d * 0x1p-9f : d;
}

/* The score of one key row against the quantized query r (nb full blocks,
 * then a 16-block when tail). */
static inline __attribute__((always_inline)) float
vq_score(ix__q8a_row r, const uint8_t *kr, size_t nb, bool tail, ix_kv_dtype t) {
    const size_t bb = ix__kv_block_bytes(t, IX__KV_QK);
    float dot = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = kr + b * bb;
        float m = vq_scale(blk, t) * r.blk[b].d;
        dot = fmaf((float)vq_dot(r.qs + b * IX__KV_QK, blk + 2, t, IX__KV_QK), m, dot);
    }
    if (tail) {
        const uint8_t *blk = kr + nb * bb;
        float m = vq_scale(blk, t) * r.blk[nb].d;
        dot = fmaf((float)vq_dot(r.qs + nb * IX__KV_QK, blk + 2, t, IX__KV_QK / 2), m, dot);
    }
    return dot;
}

/* o += p v for one value row. */
static inline __attribute__((always_inline)) void
vq_add_row(float *o, float p, const uint8_t *vr, size_t nb, bool tail, ix_kv_dtype t) {
    const size_t bb = ix__kv_block_bytes(t, IX__KV_QK);
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = vr + b * bb;
        vq_axpy(o + b * IX__KV_QK, p * vq_scale(blk, t), blk + 2, t, IX__KV_QK);
    }
    if (tail) {
        const uint8_t *blk = vr + nb * bb;
        vq_axpy(o + nb * IX__KV_QK, p * vq_scale(blk, t), blk + 2, t, IX__KV_QK / 2);
    }
}

static inline __attribute__((always_inline)) void
vq_attn_add(ix_attn_acc *accs, const float *q, size_t nq, const void *k, size_t k_stride,
            const void *v, size_t v_stride, size_t n_tokens, ix_kv_dtype t) {
    const size_t hd = accs[0].head_dim, nb = hd / IX__KV_QK;
    const bool tail = hd % IX__KV_QK != 0;
    const size_t hdp = (nb + tail) * IX__KV_QK; /* the query's padded length */
    const size_t krb = ix_kv_dtype_row_bytes(t, k_stride), vrb = ix_kv_dtype_row_bytes(t, v_stride);
    _Alignas(64) uint8_t qa[IX__ATTN_Q_MAX_HD + IX__ATTN_Q_MAX_HD / IX__QK * sizeof(ix__q8a_blk) + 64]; /* one q8a row */
    float qpad[IX__ATTN_Q_MAX_HD];
    float s[IX__ATTN_CHUNK];
    for (size_t qi = 0; qi < nq; qi++) {
        ix_attn_acc *acc = accs + qi;
        const float *qrow = q + qi * hd;
        if (tail) {
            memcpy(qpad, qrow, hd * sizeof *qpad);
            memset(qpad + hd, 0, (hdp - hd) * sizeof *qpad);
            qrow = qpad;
        }
        vq_quantize(qrow, qa, hdp);
        ix__q8a_row r = ix__q8a_at(qa, hdp, 0);
        for (size_t t0 = 0; t0 < n_tokens; t0 += IX__ATTN_CHUNK) {
            size_t cnt = n_tokens - t0 < IX__ATTN_CHUNK ? n_tokens - t0 : IX__ATTN_CHUNK;
            float cmax = -INFINITY;
            for (size_t j = 0; j < cnt; j++) {
                s[j] = vq_score(r, (const uint8_t *)k + (t0 + j) * krb, nb, tail, t) * acc->scale;
                if (acc->softcap > 0.0f) s[j] = ix__softcap(s[j], acc->softcap);
                cmax = fmaxf(cmax, s[j]);
            }
            bool skip;
            float alpha = ix__attn_rebase(acc, cmax, &skip);
            if (skip) continue;
            if (alpha != 1.0f)
                for (size_t i = 0; i < hd; i++) acc->o[i] *= alpha;
            for (size_t j = 0; j < cnt; j++) {
                float p = expf(s[j] - acc->max);
                acc->sum += p;
                vq_add_row(acc->o, p, (const uint8_t *)v + (t0 + j) * vrb, nb, tail, t);
            }
        }
    }
}

#endif /* INFERX_KERNELS_ATTN_Q_H */
