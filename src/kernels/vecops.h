/*
 * Row ops written once over an abstract f32 vector, included by avx2.c and
 * avx512.c after they define the vector vocabulary below (ggml's
 * GGML_F32_VEC idea). Only the ops whose code is identical across widths live
 * here (RMSNorm, softmax, SiLU*up, add, NEOX RoPE, the attention accumulator);
 * matmul tiles, conversions and the adjacent-pair RoPE shuffle are per ISA.
 *
 * The includer defines:
 *   VF, VW                       vector type, lanes
 *   vf_zero() vf_set1(f)         constants
 *   vf_load(p) vf_store(p, v)    unaligned f32
 *   vf_load_n(p, n)              first n < VW lanes, the rest 0 (never reads past n)
 *   vf_store_n(p, v, n)          first n lanes only
 *   vf_load_h(p) vf_load_h_n(p, n)   fp16 -> f32, same rules
 *   vf_add vf_sub vf_mul vf_div vf_max   lane-wise
 *   vf_fma(a, b, c)              a * b + c, fused
 *   vf_hsum(v) vf_hmax(v)        horizontal, fixed order
 *   vf_exp(v)                    e^x, ~2 ulp; 0 for -inf and x < -87; clamps x > 88.7
 */
#ifndef VW
#error "include vecops.h from an ISA file that defines the vector vocabulary"
#endif

static void v_rmsnorm(float *y, const float *x, const float *w, size_t n, float eps) {
    VF acc0 = vf_zero(), acc1 = vf_zero();
    size_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        VF a = vf_load(x + i), b = vf_load(x + i + VW);
        acc0 = vf_fma(a, a, acc0);
        acc1 = vf_fma(b, b, acc1);
    }
    for (; i < n; i += VW) {
        VF a = n - i >= VW ? vf_load(x + i) : vf_load_n(x + i, n - i);
        acc0 = vf_fma(a, a, acc0);
    }
    float r = 1.0f / sqrtf(vf_hsum(vf_add(acc0, acc1)) / (float)n + eps);
    VF vr = vf_set1(r);
    for (i = 0; i + VW <= n; i += VW) {
        VF v = vf_mul(vf_load(x + i), vr);
        vf_store(y + i, w ? vf_mul(v, vf_load(w + i)) : v);
    }
    if (i < n) {
        VF v = vf_mul(vf_load_n(x + i, n - i), vr);
        vf_store_n(y + i, w ? vf_mul(v, vf_load_n(w + i, n - i)) : v, n - i);
    }
}

static void v_softmax(float *x, size_t n) {
    size_t i = 0;
    float max = -INFINITY;
    if (n >= VW) {
        VF m = vf_load(x);
        for (i = VW; i + VW <= n; i += VW) m = vf_max(m, vf_load(x + i));
        max = vf_hmax(m);
    }
    for (; i < n; i++) max = fmaxf(max, x[i]);
    if (!(max > -INFINITY)) {
        memset(x, 0, n * sizeof *x);
        return;
    }
    VF vmax = vf_set1(max), sum = vf_zero();
    for (i = 0; i + VW <= n; i += VW) {
        VF e = vf_exp(vf_sub(vf_load(x + i), vmax));
        vf_store(x + i, e);
        sum = vf_add(sum, e);
    }
    if (i < n) {
        /* store only the real lanes, then read them back zero-padded */
        vf_store_n(x + i, vf_exp(vf_sub(vf_load_n(x + i, n - i), vmax)), n - i);
        sum = vf_add(sum, vf_load_n(x + i, n - i));
    }
    VF inv = vf_set1(1.0f / vf_hsum(sum));
    for (i = 0; i + VW <= n; i += VW) vf_store(x + i, vf_mul(vf_load(x + i), inv));
    if (i < n) vf_store_n(x + i, vf_mul(vf_load_n(x + i, n - i), inv), n - i);
}

static inline VF v_silu(VF g) {
    /* g / (1 + e^-g); for g << 0 the clamped exp keeps the quotient finite */
    VF one = vf_set1(1.0f);
    return vf_div(g, vf_add(one, vf_exp(vf_sub(vf_zero(), g))));
}

static void v_silu_mul(float *y, const float *gate, const float *up, size_t n) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) vf_store(y + i, vf_mul(v_silu(vf_load(gate + i)), vf_load(up + i)));
    if (i < n)
        vf_store_n(y + i, vf_mul(v_silu(vf_load_n(gate + i, n - i)), vf_load_n(up + i, n - i)), n - i);
}

static void v_add(float *y, const float *a, const float *b, size_t n) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) vf_store(y + i, vf_add(vf_load(a + i), vf_load(b + i)));
    if (i < n) vf_store_n(y + i, vf_add(vf_load_n(a + i, n - i), vf_load_n(b + i, n - i)), n - i);
}

/* NEOX RoPE: pairs (i, i + half) are whole vectors. */
static void v_rope_neox(float *x, const float *cs, size_t n_rot) {
    size_t half = n_rot / 2, i = 0;
    for (; i + VW <= half; i += VW) {
        VF a = vf_load(x + i), b = vf_load(x + half + i);
        VF c = vf_load(cs + i), s = vf_load(cs + half + i);
        vf_store(x + i, vf_sub(vf_mul(a, c), vf_mul(b, s)));
        vf_store(x + half + i, vf_add(vf_mul(a, s), vf_mul(b, c)));
    }
    for (; i < half; i++) {
        float c = cs[i], s = cs[half + i], a = x[i], b = x[half + i];
        x[i] = a * c - b * s;
        x[half + i] = a * s + b * c;
    }
}

/* ---- attention ------------------------------------------------------------ */
static inline VF v_kv_load(const void *row, ix_dtype t, size_t i) {
    if (t == IX_DTYPE_F16) return vf_load_h((const uint16_t *)row + i);
    return vf_load((const float *)row + i);
}

static inline VF v_kv_load_n(const void *row, ix_dtype t, size_t i, size_t n) {
    if (t == IX_DTYPE_F16) return vf_load_h_n((const uint16_t *)row + i, n);
    return vf_load_n((const float *)row + i, n);
}

static inline const void *v_kv_row(const void *base, ix_dtype t, size_t stride, size_t row) {
    size_t esz = t == IX_DTYPE_F16 ? 2 : 4;
    return (const uint8_t *)base + row * stride * esz;
}

static void v_attn_add(ix_attn_acc *acc, const float *q, const void *k, size_t k_stride,
                       const void *v, size_t v_stride, size_t n_tokens, ix_dtype t) {
    size_t hd = acc->head_dim, full = hd / VW * VW, rem = hd - full;
    float s[IX__ATTN_CHUNK], p[IX__ATTN_CHUNK];
    for (size_t t0 = 0; t0 < n_tokens; t0 += IX__ATTN_CHUNK) {
        size_t cnt = n_tokens - t0 < IX__ATTN_CHUNK ? n_tokens - t0 : IX__ATTN_CHUNK;
        float cmax = -INFINITY;
        for (size_t j = 0; j < cnt; j++) {
            const void *kr = v_kv_row(k, t, k_stride, t0 + j);
            VF d = vf_zero();
            for (size_t i = 0; i < full; i += VW) d = vf_fma(vf_load(q + i), v_kv_load(kr, t, i), d);
            if (rem) d = vf_fma(vf_load_n(q + full, rem), v_kv_load_n(kr, t, full, rem), d);
            s[j] = vf_hsum(d) * acc->scale;
            cmax = fmaxf(cmax, s[j]);
        }
        bool skip;
        float alpha = ix__attn_rebase(acc, cmax, &skip);
        if (skip) continue;
        /* p = exp(s - max), summed in vector lanes */
        VF vmax = vf_set1(acc->max), psum = vf_zero();
        size_t j = 0;
        for (; j + VW <= cnt; j += VW) {
            VF e = vf_exp(vf_sub(vf_load(s + j), vmax));
            vf_store(p + j, e);
            psum = vf_add(psum, e);
        }
        if (j < cnt) {
            vf_store_n(p + j, vf_exp(vf_sub(vf_load_n(s + j, cnt - j), vmax)), cnt - j);
            psum = vf_add(psum, vf_load_n(p + j, cnt - j));
        }
        acc->sum += vf_hsum(psum);
        /* o = o * alpha + sum_j p_j v_j, one slice of o at a time so it stays
         * in a register across the chunk's tokens */
        VF va = vf_set1(alpha);
        for (size_t i = 0; i < hd; i += VW) {
            size_t w = hd - i < VW ? hd - i : VW;
            VF o = w == VW ? vf_load(acc->o + i) : vf_load_n(acc->o + i, w);
            o = vf_mul(o, va);
            for (size_t jj = 0; jj < cnt; jj++) {
                const void *vr = v_kv_row(v, t, v_stride, t0 + jj);
                VF vv = w == VW ? v_kv_load(vr, t, i) : v_kv_load_n(vr, t, i, w);
                o = vf_fma(vf_set1(p[jj]), vv, o);
            }
            if (w == VW) vf_store(acc->o + i, o);
            else vf_store_n(acc->o + i, o, w);
        }
    }
}
