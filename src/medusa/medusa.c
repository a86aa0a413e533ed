/* inferx medusa: heads, their Adam training step and their GGUF file (see
 * include/inferx/medusa.h). Plain C over F32: a head is one n x n matrix,
 * a bias and (unless shared) one n_vocab x n matrix; the loops are dot
 * products and axpys over contiguous rows, which the compiler vectorises. */
#include "inferx/medusa.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "inferx/gguf.h"

typedef struct adam {
    float *m, *v;
} adam;

typedef struct head {
    float *w; /* (n, n) */
    float *b; /* (n) */
    float *u; /* (V, n); NULL when shared */
    adam aw, ab, au;
} head;

struct ix_medusa {
    int32_t n_heads, n, V;
    bool shared;
    const float *shared_u;
    head h[IX_MEDUSA_MAX_HEADS];
    int64_t t; /* Adam steps taken */
    /* training scratch */
    float *gw, *gb, *gu, *z, *a, *p, *da;
};

static float dot(const float *x, const float *y, int32_t n) {
    float s[8] = {0};
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += x[i + k] * y[i + k];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) r += x[i] * y[i];
    return r;
}

static void axpy(float *y, float a, const float *x, int32_t n) {
    for (int32_t i = 0; i < n; i++) y[i] += a * x[i];
}

static const float *head_u(const ix_medusa *m, int32_t i) { return m->shared ? m->shared_u : m->h[i].u; }

static void free_heads(ix_medusa *m) {
    for (int i = 0; i < m->n_heads; i++) {
        head *h = &m->h[i];
        ix_free(h->w);
        ix_free(h->b);
        ix_free(h->u);
        ix_free(h->aw.m);
        ix_free(h->aw.v);
        ix_free(h->ab.m);
        ix_free(h->ab.v);
        ix_free(h->au.m);
        ix_free(h->au.v);
    }
}

void ix_medusa_destroy(ix_medusa *m) {
    if (!m) return;
    free_heads(m);
    ix_free(m->gw);
    ix_free(m->gb);
    ix_free(m->gu);
    ix_free(m->z);
    ix_free(m->a);
    ix_free(m->p);
    ix_free(m->da);
    ix_free(m);
}

static ix_status alloc_heads(ix_medusa **out, int32_t n_heads, int32_t n, int32_t V, bool shared, ix_errbuf *err) {
    *out = NULL;
    if (n_heads < 1 || n_heads > IX_MEDUSA_MAX_HEADS)
        return ix_errf(err, IX_ERR_INVALID, "Medusa heads: %d heads (1..%d)", n_heads, IX_MEDUSA_MAX_HEADS);
    if (n < 1 || n > 65536 || V < 2 || V > (1 << 22))
        return ix_errf(err, IX_ERR_INVALID, "Medusa heads: n_embd %d / n_vocab %d out of range", n, V);
    ix_medusa *m = ix_calloc(1, sizeof *m);
    if (!m) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    m->n_heads = n_heads;
    m->n = n;
    m->V = V;
    m->shared = shared;
    for (int i = 0; i < n_heads; i++) {
        head *h = &m->h[i];
        h->w = ix_calloc((size_t)n * (size_t)n, sizeof *h->w);
        h->b = ix_calloc((size_t)n, sizeof *h->b);
        if (!shared) h->u = ix_malloc((size_t)V * (size_t)n * sizeof *h->u);
        if (!h->w || !h->b || (!shared && !h->u)) {
            ix_medusa_destroy(m);
            return ix_errf(err, IX_ERR_NOMEM, "out of memory for %d Medusa heads", n_heads);
        }
    }
    *out = m;
    return IX_OK;
}

ix_status ix_medusa_create(ix_medusa **out, int32_t n_heads, int32_t n_embd, int32_t n_vocab, const float *out_head,
                           bool shared_output, ix_errbuf *err) {
    if (!out_head) return ix_errf(err, IX_ERR_INVALID, "Medusa heads: the target's output head is needed");
    ix_status s = alloc_heads(out, n_heads, n_embd, n_vocab, shared_output, err);
    if (s != IX_OK) return s;
    ix_medusa *m = *out;
    if (shared_output)
        m->shared_u = out_head;
    else
        for (int i = 0; i < n_heads; i++) memcpy(m->h[i].u, out_head, (size_t)n_vocab * (size_t)n_embd * sizeof(float));
    return IX_OK;
}

int32_t ix_medusa_n_heads(const ix_medusa *m) { return m->n_heads; }
int32_t ix_medusa_n_embd(const ix_medusa *m) { return m->n; }
int32_t ix_medusa_n_vocab(const ix_medusa *m) { return m->V; }
bool ix_medusa_shared_output(const ix_medusa *m) { return m->shared; }
void ix_medusa_set_shared_output(ix_medusa *m, const float *out_head) { m->shared_u = out_head; }

void ix_medusa_head(const ix_medusa *m, int32_t i, const float **w, const float **b, const float **u) {
    *w = m->h[i].w;
    *b = m->h[i].b;
    *u = m->shared ? m->shared_u : m->h[i].u;
}

static float silu_sig(float z, float *sig) {
    float s = 1.0f / (1.0f + expf(-z));
    *sig = s;
    return z * s;
}

/* a = h + SiLU(W h + b); z kept for the backward pass when wanted. */
static void residual(const ix_medusa *m, const head *hd, const float *h, float *a, float *z) {
    for (int32_t r = 0; r < m->n; r++) {
        float zr = dot(hd->w + (size_t)r * (size_t)m->n, h, m->n) + hd->b[r], sig;
        if (z) z[r] = zr;
        a[r] = h[r] + silu_sig(zr, &sig);
    }
}

void ix_medusa_logits(const ix_medusa *m, int32_t i, const float *hidden, float *logits) {
    float *act = logits + m->V; /* the caller's n_embd floats past the logits */
    residual(m, &m->h[i], hidden, act, NULL);
    const float *u = head_u(m, i);
    for (int32_t v = 0; v < m->V; v++) logits[v] = dot(u + (size_t)v * (size_t)m->n, act, m->n);
}

void ix_medusa_propose(const ix_medusa *m, const float *hidden, int32_t k, ix_token *out, float *scratch) {
    if (k > m->n_heads) k = m->n_heads;
    for (int32_t i = 0; i < k; i++) {
        ix_medusa_logits(m, i, hidden, scratch);
        int32_t best = 0;
        for (int32_t v = 1; v < m->V; v++)
            if (scratch[v] > scratch[best]) best = v;
        out[i] = best;
    }
}

/* ---- training ---------------------------------------------------------------- */

static ix_status adam_init(adam *a, size_t n) {
    if (a->m) return IX_OK;
    a->m = ix_calloc(n, sizeof *a->m);
    a->v = ix_calloc(n, sizeof *a->v);
    return a->m && a->v ? IX_OK : IX_ERR_NOMEM;
}

static void adam_step(adam *a, float *w, const float *g, size_t n, float lr, int64_t t) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        a->m[i] = b1 * a->m[i] + (1 - b1) * g[i];
        a->v[i] = b2 * a->v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= lr * (a->m[i] / c1) / (sqrtf(a->v[i] / c2) + eps);
    }
}

ix_status ix_medusa_train_step(ix_medusa *m, const float *hidden, const ix_token *labels, int32_t B, float lr,
                               float *loss_out) {
    const int32_t n = m->n, V = m->V;
    const size_t nn = (size_t)n * (size_t)n, vn = (size_t)V * (size_t)n;
    if (!m->gw) {
        m->gw = ix_malloc(nn * sizeof *m->gw);
        m->gb = ix_malloc((size_t)n * sizeof *m->gb);
        m->gu = m->shared ? NULL : ix_malloc(vn * sizeof *m->gu);
        m->z = ix_malloc((size_t)n * sizeof *m->z);
        m->a = ix_malloc((size_t)n * sizeof *m->a);
        m->da = ix_malloc((size_t)n * sizeof *m->da);
        m->p = ix_malloc((size_t)V * sizeof *m->p);
        if (!m->gw || !m->gb || (!m->shared && !m->gu) || !m->z || !m->a || !m->da || !m->p) return IX_ERR_NOMEM;
    }
    if (m->shared && !m->shared_u) return IX_ERR_STATE;
    m->t++;
    for (int32_t i = 0; i < m->n_heads; i++) {
        head *hd = &m->h[i];
        const float *u = head_u(m, i);
        if (adam_init(&hd->aw, nn) || adam_init(&hd->ab, (size_t)n) || (!m->shared && adam_init(&hd->au, vn)))
            return IX_ERR_NOMEM;
        int32_t nl = 0;
        for (int32_t r = 0; r < B; r++) nl += labels[(size_t)r * (size_t)m->n_heads + (size_t)i] >= 0;
        if (loss_out) loss_out[i] = 0;
        if (!nl) continue;
        memset(m->gw, 0, nn * sizeof *m->gw);
        memset(m->gb, 0, (size_t)n * sizeof *m->gb);
        if (m->gu) memset(m->gu, 0, vn * sizeof *m->gu);
        double loss = 0;
        for (int32_t r = 0; r < B; r++) {
            ix_token y = labels[(size_t)r * (size_t)m->n_heads + (size_t)i];
            if (y < 0 || y >= V) continue;
            const float *h = hidden + (size_t)r * (size_t)n;
            residual(m, hd, h, m->a, m->z);
            float mx = -INFINITY;
            for (int32_t v = 0; v < V; v++) {
                m->p[v] = dot(u + (size_t)v * (size_t)n, m->a, n);
                if (m->p[v] > mx) mx = m->p[v];
            }
            double sum = 0;
            for (int32_t v = 0; v < V; v++) sum += (m->p[v] = expf(m->p[v] - mx));
            loss += -log((double)m->p[y] / sum);
            float inv = (float)(1.0 / sum), scale = 1.0f / (float)nl;
            memset(m->da, 0, (size_t)n * sizeof *m->da);
            for (int32_t v = 0; v < V; v++) {
                float g = (m->p[v] * inv - (v == y ? 1.0f : 0.0f)) * scale; /* dLoss / dlogit */
                if (g == 0.0f) continue;
                axpy(m->da, g, u + (size_t)v * (size_t)n, n);
                if (m->gu) axpy(m->gu + (size_t)v * (size_t)n, g, m->a, n);
            }
            for (int32_t k = 0; k < n; k++) { /* through a = h + SiLU(z) */
                float sig, zk = m->z[k];
                silu_sig(zk, &sig);
                float dz = m->da[k] * sig * (1.0f + zk * (1.0f - sig));
                m->gb[k] += dz;
                if (dz != 0.0f) axpy(m->gw + (size_t)k * (size_t)n, dz, h, n);
            }
        }
        if (loss_out) loss_out[i] = (float)(loss / nl);
        adam_step(&hd->aw, hd->w, m->gw, nn, lr, m->t);
        adam_step(&hd->ab, hd->b, m->gb, (size_t)n, lr, m->t);
        if (m->gu) adam_step(&hd->au, hd->u, m->gu, vn, lr, m->t);
    }
    return IX_OK;
}

/* ---- the file -------------------------------------------------------------------- */

ix_status ix_medusa_save(const ix_medusa *m, const char *path, const char *target_name, ix_errbuf *err) {
    ix_gguf_writer *w = ix_gguf_writer_create();
    if (!w) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    ix_status s = ix_gguf_writer_set_str(w, "general.architecture", "medusa");
    if (!s) s = ix_gguf_writer_set_u32(w, "medusa.n_heads", (uint32_t)m->n_heads);
    if (!s) s = ix_gguf_writer_set_u32(w, "medusa.n_embd", (uint32_t)m->n);
    if (!s) s = ix_gguf_writer_set_u32(w, "medusa.n_vocab", (uint32_t)m->V);
    if (!s) s = ix_gguf_writer_set_bool(w, "medusa.shared_output", m->shared);
    if (!s) s = ix_gguf_writer_set_str(w, "medusa.target", target_name ? target_name : "");
    for (int i = 0; i < m->n_heads && !s; i++) {
        char name[64];
        int64_t ne_w[2] = {m->n, m->n}, ne_b[1] = {m->n}, ne_u[2] = {m->n, m->V};
        snprintf(name, sizeof name, "medusa.%d.res.weight", i);
        s = ix_gguf_writer_add_tensor(w, name, IX_DTYPE_F32, 2, ne_w, m->h[i].w);
        snprintf(name, sizeof name, "medusa.%d.res.bias", i);
        if (!s) s = ix_gguf_writer_add_tensor(w, name, IX_DTYPE_F32, 1, ne_b, m->h[i].b);
        snprintf(name, sizeof name, "medusa.%d.out.weight", i);
        if (!s && !m->shared) s = ix_gguf_writer_add_tensor(w, name, IX_DTYPE_F32, 2, ne_u, m->h[i].u);
    }
    if (!s) s = ix_gguf_writer_write(w, path);
    if (s) ix_errf(err, s, "%s: %s", path, ix_gguf_writer_errmsg(w)[0] ? ix_gguf_writer_errmsg(w) : ix_status_str(s));
    ix_gguf_writer_destroy(w);
    return s;
}

static ix_status load_tensor(const ix_gguf *g, const char *name, int64_t ne0, int64_t ne1, float *dst,
                             ix_errbuf *err) {
    const ix_gguf_tensor *t = ix_gguf_find_tensor(g, name);
    if (!t) return ix_errf(err, IX_ERR_FORMAT, "Medusa heads: tensor '%s' is missing", name);
    if (t->type != IX_DTYPE_F32 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->n_dims > 2)
        return ix_errf(err, IX_ERR_FORMAT, "Medusa heads: tensor '%s' must be F32 [%lld, %lld]", name, (long long)ne0,
                       (long long)ne1);
    memcpy(dst, t->data, (size_t)ne0 * (size_t)ne1 * sizeof(float));
    return IX_OK;
}

ix_status ix_medusa_load(ix_medusa **out, const char *path, ix_errbuf *err) {
    *out = NULL;
    ix_gguf *g = NULL;
    ix_status s = ix_gguf_open(&g, path, err);
    if (s != IX_OK) return s;
    ix_str arch = {0};
    uint32_t nh = 0, n = 0, V = 0;
    bool shared = false;
    if (ix_gguf_get_str(g, "general.architecture", &arch, NULL) != IX_OK || arch.len != 6 ||
        memcmp(arch.ptr, "medusa", 6) != 0) {
        s = ix_errf(err, IX_ERR_FORMAT, "%s is not a Medusa heads file (general.architecture is not 'medusa')", path);
        goto done;
    }
    if ((s = ix_gguf_get_u32(g, "medusa.n_heads", &nh, err)) || (s = ix_gguf_get_u32(g, "medusa.n_embd", &n, err)) ||
        (s = ix_gguf_get_u32(g, "medusa.n_vocab", &V, err)) ||
        (s = ix_gguf_get_bool(g, "medusa.shared_output", &shared, err))) {
        s = IX_ERR_FORMAT;
        goto done;
    }
    if (n > 65536 || V > (1u << 22) || nh > IX_MEDUSA_MAX_HEADS) {
        s = ix_errf(err, IX_ERR_FORMAT, "Medusa heads: %u heads of n_embd %u, n_vocab %u: out of range", nh, n, V);
        goto done;
    }
    if ((s = alloc_heads(out, (int32_t)nh, (int32_t)n, (int32_t)V, shared, err)) != IX_OK) {
        if (s == IX_ERR_INVALID) s = IX_ERR_FORMAT;
        goto done;
    }
    for (uint32_t i = 0; i < nh && !s; i++) {
        char name[64];
        snprintf(name, sizeof name, "medusa.%u.res.weight", i);
        s = load_tensor(g, name, n, n, (*out)->h[i].w, err);
        snprintf(name, sizeof name, "medusa.%u.res.bias", i);
        if (!s) s = load_tensor(g, name, n, 1, (*out)->h[i].b, err);
        snprintf(name, sizeof name, "medusa.%u.out.weight", i);
        if (!s && !shared) s = load_tensor(g, name, n, V, (*out)->h[i].u, err);
    }
    if (s) {
        ix_medusa_destroy(*out);
        *out = NULL;
    }
done:
    ix_gguf_close(g);
    return s;
}
