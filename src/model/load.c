/*
 * Loading a model: the architecture's row of the table (arch.c) says which
 * `<arch>.*` keys and tensors it has; every tensor is bound by name and
 * checked for shape and type, fused ones are split into row views, RoPE
 * frequency factors are chosen (rope_freqs, computed Llama-3 factors or Phi-3
 * longrope's long/short tensors), and the matmul weights are repacked.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model_int.h"

typedef struct loader {
    ix_model *m;
    const ix_gguf *g;
    ix_errbuf *err;
    ix_load_progress_fn progress; /* NULL: none */
    void *progress_user;
    const char *path;
    const ix_model_load_params *p;
} loader;

static void report(const loader *L, double fraction) {
    if (L->progress) L->progress(L->progress_user, fraction);
}

/* "F32, F16, ...": the weight types the kernels read (a type with kernels
 * loads in any role, any mix of them in one file). */
static void weight_types_list(char *buf, size_t len) {
    ix_dtype ts[64];
    size_t n = ix_kernels_types(ts, IX_ARRAY_LEN(ts)), at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && i < IX_ARRAY_LEN(ts) && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", ix_dtype_name(ts[i]));
}

/* Binds a 2-D weight (ne0 = in, ne1 = out); whole quantized blocks per row. */
static ix_status bind_weight(loader *L, const char *name, int64_t ne0, int64_t ne1, bool required,
                             ix__weight *w) {
    const ix_gguf_tensor *t = ix_gguf_find_tensor(L->g, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return IX_OK;
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    if (t->n_dims > 2 || t->ne[0] != ne0 || t->ne[1] != ne1)
        return ix_errf(L->err, IX_ERR_FORMAT,
                       "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)ne1);
    if (!ix_kernels_has_type(t->type)) {
        const char *tn = ix_dtype_name(t->type);
        char types[256];
        weight_types_list(types, sizeof types);
        return ix_errf(L->err, IX_ERR_UNSUPPORTED, "tensor '%s' has type %s (%d), which inferx cannot compute with; "
                       "supported weight types are %s", name, tn ? tn : "unknown", (int)t->type, types);
    }
    uint64_t rb;
    if (!ix_dtype_row_bytes(t->type, (uint64_t)ne0, &rb))
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s': rows of %lld elements do not fit %s blocks", name,
                       (long long)ne0, ix_dtype_name(t->type));
    *w = (ix__weight){t->data, t->type, ne0, ne1, t->n_bytes, false, t->name};
    return IX_OK;
}

/* Binds a 1-D F32 vector (norm weights, biases, rope factors). */
static ix_status bind_vec(loader *L, const char *name, int64_t n, bool required, const float **out) {
    const ix_gguf_tensor *t = ix_gguf_find_tensor(L->g, name);
    *out = NULL;
    if (!t) {
        if (!required) return IX_OK;
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s' is missing", name);
    }
    if (t->n_dims != 1 || t->ne[0] != n)
        return ix_errf(L->err, IX_ERR_FORMAT, "tensor '%s' has %lld elements in %u dims, expected %lld",
                       name, (long long)t->n_elements, t->n_dims, (long long)n);
    if (t->type != IX_DTYPE_F32) {
        const char *tn = ix_dtype_name(t->type);
        return ix_errf(L->err, IX_ERR_UNSUPPORTED, "tensor '%s' has type %s, expected F32", name,
                       tn ? tn : "unknown");
    }
    *out = t->data;
    return IX_OK;
}

static ix_status read_hparams(loader *L) {
    ix_model_hparams *hp = &L->m->hp;
    ix_str arch;
    ix_status s = ix_gguf_get_str(L->g, "general.architecture", &arch, L->err);
    if (s == IX_ERR_NOT_FOUND) return ix_errf(L->err, IX_ERR_FORMAT, "general.architecture is missing");
    if (s != IX_OK) return s;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(arch.len < 31 ? arch.len : 31), arch.ptr);
    if ((s = ix_model_arch_init(hp, name, L->err)) != IX_OK) return s;
    return ix__read_hparams(hp, L->g, L->err);
}

/* Llama-3 frequency factors: wavelengths longer than orig_ctx / low_freq_factor
 * are slowed by `factor`, shorter than orig_ctx / high_freq_factor are kept,
 * and the band between is interpolated. */
static void llama3_factors(ix_model *m) {
    const ix_model_hparams *hp = &m->hp;
    int32_t n = hp->n_rot / 2;
    double low_wavelen = hp->rope_orig_ctx / hp->rope_low_freq_factor;
    double high_wavelen = hp->rope_orig_ctx / hp->rope_high_freq_factor;
    for (int32_t i = 0; i < n; i++) {
        double freq = pow(hp->rope_freq_base, -2.0 * i / hp->n_rot);
        double wavelen = 2 * M_PI / freq;
        double new_freq;
        if (wavelen < high_wavelen) {
            new_freq = freq;
        } else if (wavelen > low_wavelen) {
            new_freq = freq / hp->rope_factor;
        } else {
            double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                            (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
            new_freq = (1 - smooth) * freq / hp->rope_factor + smooth * freq;
        }
        m->rope_factors[i] = (float)(freq / new_freq);
    }
}

/* A row range of a bound weight as a weight of its own (fused tensors). */
static ix__weight row_view(const ix__weight *w, int64_t row0, int64_t n_rows) {
    uint64_t rb = 0;
    ix_dtype_row_bytes(w->type, (uint64_t)w->ne0, &rb);
    return (ix__weight){(const unsigned char *)w->data + (uint64_t)row0 * rb, w->type, w->ne0, n_rows,
                        (uint64_t)n_rows * rb, false, w->name};
}

/* Binds one role (global when il < 0) where the table says it lives. */
static ix_status bind_role(loader *L, int r, int32_t il, bool required) {
    const ix__role_row *row = &ix__roles[r];
    char name[96];
    void *base = il < 0 ? (void *)L->m : (void *)&L->m->layers[il];
    if (il < 0) snprintf(name, sizeof name, "%s", row->name);
    else snprintf(name, sizeof name, "blk.%d.%s", (int)il, row->name);
    int64_t ne0 = ix__dim_value(&L->m->hp, row->ne0), ne1 = ix__dim_value(&L->m->hp, row->ne1);
    if (row->group == IX_TENSOR_MATRIX || row->group == IX_TENSOR_OUTPUT) return bind_weight(L, name, ne0, ne1, required, (ix__weight *)((char *)base + row->offset));
    return bind_vec(L, name, ne0, required, (const float **)((char *)base + row->offset));
}

/* Fused tensors into the separate views the forward pass reads. */
static void split_fused(ix_model *m, ix__layer *l) {
    const ix_model_hparams *hp = &m->hp;
    int64_t Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    if (l->wqkv.data) {
        l->wq = row_view(&l->wqkv, 0, Q);
        l->wk = row_view(&l->wqkv, Q, KV);
        l->wv = row_view(&l->wqkv, Q + KV, KV);
    }
    if (l->bqkv) {
        l->bq = l->bqkv;
        l->bk = l->bqkv + Q;
        l->bv = l->bqkv + Q + KV;
    }
    if (l->w_gate_up.data) {
        l->w_gate = row_view(&l->w_gate_up, 0, hp->n_ff);
        l->w_up = row_view(&l->w_gate_up, hp->n_ff, hp->n_ff);
    }
}

/* The frequency divisors RoPE uses: rope_freqs (Llama 3.1 converters) over
 * computed llama3 factors; Phi-3 longrope's long factors when the model is
 * served past its original context, else the short ones. */
static ix_status rope_factors(loader *L) {
    ix_model *m = L->m;
    const ix_model_hparams *hp = &m->hp;
    size_t n = (size_t)(hp->n_rot / 2);
    const float *src = m->rope_freqs;
    if (hp->rope_scaling == IX_ROPE_SCALING_LONGROPE)
        src = hp->n_ctx_train > hp->rope_orig_ctx ? m->rope_long : m->rope_short;
    if (!src && hp->rope_scaling != IX_ROPE_SCALING_LLAMA3) return IX_OK;
    m->rope_factors = ix_malloc(n * sizeof(float));
    if (!m->rope_factors) return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    if (src) memcpy(m->rope_factors, src, n * sizeof(float));
    else llama3_factors(m);
    for (size_t i = 0; i < n; i++)
        if (!(m->rope_factors[i] > 0) || !isfinite(m->rope_factors[i]))
            return ix_errf(L->err, IX_ERR_RANGE, "rope frequency factor %zu is not a positive number", i);
    return IX_OK;
}

static ix_status bind_tensors(loader *L) {
    ix_model *m = L->m;
    ix_model_hparams *hp = &m->hp;
    const ix__arch_row *a = ix__arch_row_of(hp->arch);
    hp->n_vocab = ix_tokenizer_n_vocab(m->tok);
    m->layers = ix_calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    ix_status s;
    for (int32_t il = -1; il < hp->n_layer; il++)
        for (int r = il < 0 ? 0 : IX__R_FIRST_LAYER; r < (il < 0 ? IX__R_FIRST_LAYER : IX__R_COUNT); r++) {
            uint64_t bit = IX__ROLE(r);
            if (((a->req | a->opt) & bit) && (s = bind_role(L, r, il, (a->req & bit) != 0)) != IX_OK) return s;
        }
    if (!m->output.data) {
        m->output = m->tok_embd;
        hp->tied_embeddings = true;
    }
    if (hp->rope_scaling == IX_ROPE_SCALING_LONGROPE && (!m->rope_long || !m->rope_short))
        return ix_errf(L->err, IX_ERR_FORMAT, "longrope scaling needs rope_factors_long and rope_factors_short");
    /* one wiring per model: a block without ffn_norm is parallel (stablelm) */
    if (!hp->parallel_blocks && !m->layers[0].ffn_norm) hp->parallel_blocks = true;
    for (int32_t il = 0; il < hp->n_layer; il++) {
        ix__layer *l = &m->layers[il];
        split_fused(m, l);
        if (hp->parallel_blocks != !l->ffn_norm && !a->parallel)
            return ix_errf(L->err, IX_ERR_FORMAT, "layer %d: ffn_norm is %s, unlike layer 0", (int)il,
                           l->ffn_norm ? "present" : "missing");
        hp->has_qkv_bias |= l->bq != NULL;
        const ix__weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < IX_ARRAY_LEN(ws); k++) m->decode_bytes += ws[k]->n_bytes;
    }
    m->decode_bytes += m->output.n_bytes;
    hp->weight_type = m->layers[0].wq.type;
    if (hp->pos == IX_POS_ROPE && (s = rope_factors(L)) != IX_OK) return s;
    for (uint64_t i = 0; i < ix_gguf_n_tensors(L->g); i++) {
        m->n_params += ix_gguf_tensor_at(L->g, i)->n_elements;
        m->weight_bytes += ix_gguf_tensor_at(L->g, i)->n_bytes;
    }
    return IX_OK;
}

/* The weights a matmul reads, into ws (7 per layer + 1); returns how many.
 * The tied output stays in rows: the embedding lookup reads it row by row. */
static size_t matmul_weights(ix_model *m, ix__weight **ws) {
    size_t n = 0;
    for (int32_t i = 0; i < m->hp.n_layer; i++) {
        ix__layer *l = &m->layers[i];
        ix__weight *lw[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < IX_ARRAY_LEN(lw); k++)
            if (lw[k]->data) ws[n++] = lw[k];
    }
    if (!m->hp.tied_embeddings && m->output.data) ws[n++] = &m->output;
    return n;
}

/* The packed weights' buffer: anonymous memory on 2 MiB boundaries with
 * transparent huge pages requested, so streaming ~1 GB of weights per decode
 * step walks a few hundred pages instead of a quarter million (and an
 * idle-page scanner clearing 4 KiB accessed bits cannot slow the next pass). */
#define PACK_ALIGN ((size_t)2 << 20)

static void *pack_alloc(size_t n, size_t *mapped) {
    size_t len = (n + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN + PACK_ALIGN;
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    /* trim to an aligned start and a whole number of huge pages */
    size_t head = (PACK_ALIGN - (uintptr_t)p % PACK_ALIGN) % PACK_ALIGN, body = len - PACK_ALIGN;
    if (head) munmap(p, head);
    if (len - head - body) munmap(p + head + body, len - head - body);
#ifdef MADV_HUGEPAGE
    madvise(p + head, body, MADV_HUGEPAGE);
#endif
    *mapped = body;
    return p + head;
}

/* The file's copy of a packed weight is never read again: its pages leave
 * this process's resident set (they stay in the page cache, reclaimable), so
 * the model is in memory once. Only whole pages inside the tensor go; a page
 * shared with a neighbouring tensor stays. */
static void drop_pages(const void *data, uint64_t n_bytes) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)data, hi = lo + (uintptr_t)n_bytes;
    lo = (lo + page - 1) / page * page;
    hi = hi / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Parallel packing: work items are grains of PACK_GRAIN_ROWS rows of one
 * weight (first[i] .. first[i+1] are weight i's), claimed from a counter. */
#define PACK_GRAIN_ROWS 256
#define PACK_PARALLEL_MIN_BYTES ((uint64_t)64 << 20)

typedef struct pack_job {
    ix__weight **ws;
    uint8_t **dst;  /* (n) packed destination, NULL: weight not packable */
    const ix__weight *copy; /* the weight among ws copied row for row, not packed (or NULL) */
    size_t *first;  /* (n + 1) first grain of each weight */
    size_t n;
    uint64_t total_bytes, t0_ns;
    _Atomic size_t next;
    _Atomic uint64_t done_bytes;
    _Atomic int failed;
    const loader *L; /* its progress callback (thread 0 calls it) */
} pack_job;

/* The share of the load the repacking takes: reading the file's header,
 * hyperparameters, vocabulary and tensor table is the first tenth. */
#define LOAD_PACK_FROM 0.1

static void pack_worker(void *ctx, int ith, int nth) {
    (void)nth;
    pack_job *j = ctx;
    size_t n_items = j->first[j->n], w = 0;
    uint64_t next_report = j->t0_ns + 1000000000ull;
    for (;;) {
        size_t it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= n_items) return;
        while (j->first[w + 1] <= it) w++; /* items are claimed in increasing order */
        const ix__weight *wt = j->ws[w];
        size_t N = (size_t)wt->ne1, K = (size_t)wt->ne0;
        size_t r0 = (it - j->first[w]) * PACK_GRAIN_ROWS, r1 = r0 + PACK_GRAIN_ROWS < N ? r0 + PACK_GRAIN_ROWS : N;
        uint64_t row_bytes = 0;
        ix_dtype_row_bytes(wt->type, (uint64_t)K, &row_bytes);
        if (wt == j->copy)
            memcpy(j->dst[w] + r0 * row_bytes, (const uint8_t *)wt->data + r0 * row_bytes, (r1 - r0) * row_bytes);
        else if (ix_kernels_pack(wt->type, wt->data, 0, N, K, r0, r1, j->dst[w]) != IX_OK)
            atomic_store(&j->failed, 1);
        /* The grain's source rows are never read again: dropping them now
         * keeps the load's peak near the packed size instead of twice the
         * model (the pages it shares with the next grain go at the end). */
        drop_pages((const uint8_t *)wt->data + r0 * row_bytes, (r1 - r0) * row_bytes);
        uint64_t done = atomic_fetch_add_explicit(&j->done_bytes, row_bytes * (r1 - r0), memory_order_relaxed);
        if (ith == 0) report(j->L, LOAD_PACK_FROM + (1.0 - LOAD_PACK_FROM) * (double)done / (double)j->total_bytes);
        /* a progress line a second for large models (thread 0 only) */
        if (ith == 0 && ix_time_ns() > next_report) {
            next_report += 1000000000ull;
            IX_LOGI("model: packing weights, %.0f%% of %.1f MB", 100.0 * (double)done / (double)j->total_bytes,
                    (double)j->total_bytes / 1e6);
        }
    }
}

static uint64_t stage_decode_bytes(const ix_model *m);

/* The token embedding table when this rank reads it: the lookup on a
 * pipeline's first stage (or the only one), the tied output head on its last.
 * NULL: a middle stage, which reads neither. */
static ix__weight *embed_to_copy(ix_model *m) {
    int32_t st = ix__stage(m);
    bool lookup = st == 0, head = m->hp.tied_embeddings && m->output.data && st == ix__n_stages(m) - 1;
    return m->tok_embd.data && (lookup || head) ? &m->tok_embd : NULL;
}

/* Bytes of w in the packed buffer: its packed form, or (copy) its rows. */
static uint64_t buffer_bytes(const ix__weight *w, bool copy) {
    return copy ? (w->n_bytes + 63) / 64 * 64 : ix_kernels_packed_bytes(w->type, (size_t)w->ne1, (size_t)w->ne0);
}

/* Repacks every packable matmul weight (Q8_0 / Q4_0 / F16 / BF16, the other quantized types on AVX-512:
 * ix_kernels_pack) into one buffer, so the kernels read 16 rows per vector
 * load with no run-time transposes. Quantized results are the same bits,
 * float ones agree to rounding; INFERX_REPACK=0 keeps the mapped GGUF rows
 * (to measure the difference). */
static ix_status repack_weights(loader *L) {
    ix_model *m = L->m;
    const char *env = getenv("INFERX_REPACK");
    if (env && strcmp(env, "0") == 0) return IX_OK;
    ix__weight **ws = ix_malloc(((size_t)m->hp.n_layer * 7 + 2) * sizeof *ws);
    if (!ws) return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    size_t n = 0, n_all = matmul_weights(m, ws);
    for (size_t i = 0; i < n_all; i++) /* what the active kernels read packed with tiles of their own */
        if (ix_kernels_pack_pays(ws[i]->type)) ws[n++] = ws[i];
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += ix_kernels_packed_bytes(ws[i]->type, (size_t)ws[i]->ne1, (size_t)ws[i]->ne0);
    if (total == 0) {
        ix_free(ws);
        return IX_OK;
    }
    /* The embedding rows go into the same buffer, unchanged: read through
     * the file's mapping, each token's first lookup of a 4 KiB page is a
     * page fault (10-100 us on a virtual machine that shadows page tables,
     * docs/model.md), and a tied output head would stream 4 KiB pages;
     * here they share the packed weights' huge pages. */
    ix__weight *emb = embed_to_copy(m);
    if (emb) {
        ws[n++] = emb;
        total += buffer_bytes(emb, true);
    }
    /* the cache: a hit maps the packed weights, a miss packs into a new file */
    struct stat st;
    bool use_cache = L->p->pack_cache_dir && total >= L->p->pack_cache_min_bytes && !stat(L->path, &st);
    uint64_t key = use_cache ? ix__pack_cache_key(L->path, &st, ws, n, emb) : 0;
    size_t mapped = 0;
    uint64_t t0 = ix_time_ns();
    uint8_t *map = use_cache ? ix__pack_cache_map(L->p->pack_cache_dir, L->path, key, total, &st, &mapped) : NULL;
    bool hit = map != NULL;
    ix__pack_cache *writer = NULL;
    if (use_cache && !map)
        map = ix__pack_cache_create(L->p->pack_cache_dir, L->path, key, total, L->p->pack_cache_max_bytes,
                                    &writer, &mapped);
    uint8_t *buf = map ? map + IX__PACK_CACHE_DATA_OFFSET : pack_alloc(total, &mapped);
    if (!buf) { /* not fatal: the mapped rows work, only slower */
        IX_LOGW("model: no memory for %llu bytes of packed weights; using the file's rows",
                (unsigned long long)total);
        ix_free(ws);
        return IX_OK;
    }
    /* destinations first, then the rows of every weight in grains spread
     * over all cores: packing is a memory copy, and one core cannot stream
     * what the machine can */
    pack_job j = {.ws = ws, .copy = emb, .n = n, .total_bytes = total, .L = L};
    j.dst = ix_calloc(n, sizeof *j.dst);
    j.first = ix_calloc(n + 1, sizeof *j.first);
    if (!j.dst || !j.first) {
        ix_free(j.dst);
        ix_free(j.first);
        ix_free(ws);
        ix__pack_cache_abort(writer);
        munmap(map ? map : buf, mapped);
        return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    }
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t pb = buffer_bytes(ws[i], ws[i] == emb);
        size_t grains = pb ? ((size_t)ws[i]->ne1 + PACK_GRAIN_ROWS - 1) / PACK_GRAIN_ROWS : 0;
        j.dst[i] = pb ? buf + at : NULL;
        j.first[i + 1] = j.first[i] + grains;
        at += pb;
    }
    j.t0_ns = ix_time_ns();
    atomic_init(&j.next, 0);
    atomic_init(&j.done_bytes, 0);
    atomic_init(&j.failed, 0);
    ix_pool *pool = NULL;
    if (hit) {
        /* packed already: the file's rows were never touched */
    } else if (total >= PACK_PARALLEL_MIN_BYTES && ix_pool_create(&pool, 0) == IX_OK) {
        ix_pool_run(pool, pack_worker, &j);
        ix_pool_destroy(pool);
    } else {
        pack_worker(&j, 0, 1);
    }
    for (size_t i = 0; i < n; i++) {
        if (!j.dst[i]) continue;
        if (ws[i] == emb) { /* rows as they were; a tied (or sharded) head views them */
            uintptr_t old = (uintptr_t)emb->data, out = (uintptr_t)m->output.data;
            if (out >= old && out - old < emb->n_bytes) m->output.data = j.dst[i] + (out - old);
            drop_pages(emb->data, emb->n_bytes);
            emb->data = j.dst[i];
            continue;
        }
        m->weight_bytes -= ws[i]->n_bytes; /* the file's copy, replaced by the packed one */
        m->weight_bytes += ix_kernels_packed_bytes(ws[i]->type, (size_t)ws[i]->ne1, (size_t)ws[i]->ne0);
        drop_pages(ws[i]->data, ws[i]->n_bytes); /* what the grains left: pages two of them shared */
        ws[i]->data = j.dst[i];
        ws[i]->packed = true;
    }
    ix_free(j.dst);
    ix_free(j.first);
    ix_free(ws);
    m->decode_bytes = stage_decode_bytes(m); /* the packed forms' bytes (up to 3.6% more) */
    if (atomic_load(&j.failed)) { /* a packable shape into an aligned buffer always packs */
        ix__pack_cache_abort(writer);
        munmap(map ? map : buf, mapped);
        return ix_errf(L->err, IX_ERR_INTERNAL, "packing the weights failed");
    }
    if (writer) ix__pack_cache_commit(writer, map, total, key, &st);
    if (hit)
        IX_LOGI("model: mapped %.1f MB of packed weights from the cache in %.3f s", (double)total / 1e6,
                (double)(ix_time_ns() - t0) / 1e9);
    else if (total >= PACK_PARALLEL_MIN_BYTES)
        IX_LOGI("model: packed %.1f MB of weights in %.2f s%s", (double)total / 1e6,
                (double)(ix_time_ns() - j.t0_ns) / 1e9, writer ? " (into the cache)" : "");
    m->packed = map ? map : buf;
    m->packed_bytes = mapped;
    m->packed_cached = map != NULL;
    m->pack_writer = writer;
    return IX_OK;
}

/* ---- tensor-parallel shards ------------------------------------------------ */

/* Rank r's first row of N rows split over R ranks: on 16-row boundaries when
 * N is a multiple of 16, so that weights the single process packs are packed
 * here too (packed and row-major float weights round differently). */
static int64_t split_at(int64_t N, int32_t r, int32_t R) {
    int64_t unit = N % 16 == 0 ? 16 : 1;
    return N / unit * r / R * unit;
}

/* Rank r's query heads [q0, q1) and the KV heads they read [k0, k1). */
static void head_split(const ix_model_hparams *hp, int32_t r, int32_t R, int32_t *q0, int32_t *q1, int32_t *k0,
                       int32_t *k1) {
    int32_t group = hp->n_head / hp->n_head_kv;
    *q0 = (int32_t)((int64_t)hp->n_head * r / R);
    *q1 = (int32_t)((int64_t)hp->n_head * (r + 1) / R);
    *k0 = *q0 / group;
    *k1 = (*q1 - 1) / group + 1;
}

/* Cuts w to rows [row0, row0 + n); absent weights stay absent. */
static ix_status shard_view(loader *L, ix__weight *w, int64_t row0, int64_t n) {
    if (!w->data) return IX_OK;
    const char *env = getenv("INFERX_REPACK");
    bool repack = !env || strcmp(env, "0") != 0;
    if (repack && ix_kernels_pack_pays(w->type) && ix_kernels_packable(w->type, (size_t)w->ne1, (size_t)w->ne0) &&
        (row0 % 16 || n % 16))
        return ix_errf(L->err, IX_ERR_UNSUPPORTED,
                       "%.*s: a tensor-parallel shard of rows %lld..%lld is not on 16-row boundaries, which its "
                       "packed layout needs (try another number of ranks)",
                       (int)w->name.len, w->name.ptr, (long long)row0, (long long)(row0 + n));
    *w = row_view(w, row0, n);
    return IX_OK;
}

/* A pipeline stage: the matmul weights of layers outside [l0, l1), and the
 * output head unless last, are dropped before anything reads or packs them
 * (their pages of the mapping are never touched). Norms stay: a stage's last
 * layer norms the next layer's input as one process does. */
static void drop_other_stages(ix_model *m, int32_t l0, int32_t l1, bool last) {
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        if (il >= l0 && il < l1) continue;
        ix__layer *l = &m->layers[il];
        ix__weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < IX_ARRAY_LEN(ws); k++) {
            ws[k]->data = NULL;
            ws[k]->n_bytes = 0;
        }
    }
    if (!last) {
        m->output.data = NULL;
        m->output.n_bytes = 0;
    }
}

/* The bytes a decode step reads of w: its packed form's once packed. */
static uint64_t read_bytes(const ix__weight *w) {
    return w->packed ? ix_kernels_packed_bytes(w->type, (size_t)w->ne1, (size_t)w->ne0) : w->n_bytes;
}

/* The matmul bytes one decode step of this shard reads. */
static uint64_t stage_decode_bytes(const ix_model *m) {
    uint64_t n = read_bytes(&m->output);
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        const ix__layer *l = &m->layers[il];
        const ix__weight *ws[] = {&l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down};
        for (size_t k = 0; k < IX_ARRAY_LEN(ws); k++) n += read_bytes(ws[k]);
    }
    return n;
}

/* This rank's share of every matmul weight and bias, and every rank's
 * columns of the all-gathers. */
static ix_status shard_weights(loader *L, const ix_model_comm *comm) {
    ix_model *m = L->m;
    const ix_model_hparams *hp = &m->hp;
    int32_t R = comm ? comm->n_ranks : 1, rank = comm ? comm->rank : 0;
    int32_t S = comm && comm->n_stages > 1 ? comm->n_stages : 1, st = S > 1 ? comm->stage : 0;
    if (R < 1 || rank < 0 || rank >= R)
        return ix_errf(L->err, IX_ERR_INVALID, "rank %d of %d ranks", rank, R);
    if (st < 0 || st >= S) return ix_errf(L->err, IX_ERR_INVALID, "pipeline stage %d of %d stages", st, S);
    if (S > hp->n_layer)
        return ix_errf(L->err, IX_ERR_INVALID, "%d pipeline stages: the model has %d layers, at most one stage per "
                       "layer", S, hp->n_layer);
    if (R > hp->n_head)
        return ix_errf(L->err, IX_ERR_INVALID, "%d tensor-parallel ranks: the model has %d attention heads, at most "
                       "one rank per head", R, hp->n_head);
    int64_t hd = hp->head_dim, E = hp->n_embd, F = hp->n_ff, V = hp->n_vocab;
    int32_t q0, q1, k0, k1;
    head_split(hp, rank, R, &q0, &q1, &k0, &k1);
    ix_model_shard_info *sh = &m->shard;
    *sh = (ix_model_shard_info){
        .rank = rank, .n_ranks = R, .q0 = q0, .n_q = q1 - q0, .kv0 = k0, .n_kv = k1 - k0,
        .ff0 = split_at(F, rank, R), .embd0 = split_at(E, rank, R), .vocab0 = split_at(V, rank, R),
    };
    sh->n_ff = split_at(F, rank + 1, R) - sh->ff0;
    sh->n_embd = split_at(E, rank + 1, R) - sh->embd0;
    sh->n_vocab = split_at(V, rank + 1, R) - sh->vocab0;
    /* a stage's layers: a balanced contiguous range (the embeddings are read
     * in place on stage 0 only, the output head is the last stage's) */
    sh->layer0 = (int32_t)((int64_t)hp->n_layer * st / S);
    sh->n_layer = (int32_t)((int64_t)hp->n_layer * (st + 1) / S) - sh->layer0;
    if (!comm || (R == 1 && S == 1)) return IX_OK; /* one rank: the whole model, no exchanges */
    m->comm = comm;
    if (S > 1) drop_other_stages(m, sh->layer0, sh->layer0 + sh->n_layer, st == S - 1);
    if (R == 1) {
        m->decode_bytes = stage_decode_bytes(m);
        return IX_OK;
    }
    for (int i = 0; i < IX__COLS_COUNT; i++)
        if (!(m->cols[i] = ix_calloc((size_t)R, sizeof(int32_t))))
            return ix_errf(L->err, IX_ERR_NOMEM, "out of memory");
    for (int32_t r = 0; r < R; r++) {
        int32_t a, b, c, d;
        head_split(hp, r, R, &a, &b, &c, &d);
        m->cols[IX__COLS_Q][r] = (int32_t)((b - a) * hd);
        m->cols[IX__COLS_EMBD][r] = (int32_t)(split_at(E, r + 1, R) - split_at(E, r, R));
        m->cols[IX__COLS_FF][r] = (int32_t)(split_at(F, r + 1, R) - split_at(F, r, R));
        m->cols[IX__COLS_VOCAB][r] = (int32_t)(split_at(V, r + 1, R) - split_at(V, r, R));
    }
    ix_status s;
    for (int32_t il = sh->layer0; il < sh->layer0 + sh->n_layer; il++) {
        ix__layer *l = &m->layers[il];
        if ((s = shard_view(L, &l->wq, q0 * hd, (q1 - q0) * hd)) != IX_OK ||
            (s = shard_view(L, &l->wk, k0 * hd, (k1 - k0) * hd)) != IX_OK ||
            (s = shard_view(L, &l->wv, k0 * hd, (k1 - k0) * hd)) != IX_OK ||
            (s = shard_view(L, &l->wo, sh->embd0, sh->n_embd)) != IX_OK ||
            (s = shard_view(L, &l->w_gate, sh->ff0, sh->n_ff)) != IX_OK ||
            (s = shard_view(L, &l->w_up, sh->ff0, sh->n_ff)) != IX_OK ||
            (s = shard_view(L, &l->w_down, sh->embd0, sh->n_embd)) != IX_OK)
            return s;
        if (l->bq) l->bq += q0 * hd;
        if (l->bk) l->bk += k0 * hd;
        if (l->bv) l->bv += k0 * hd;
        if (l->b_up) l->b_up += sh->ff0;
    }
    if ((s = shard_view(L, &m->output, sh->vocab0, sh->n_vocab)) != IX_OK) return s;
    m->decode_bytes = stage_decode_bytes(m);
    return IX_OK;
}

void ix_model_get_shard(const ix_model *m, ix_model_shard_info *out) { *out = m->shard; }

bool ix_model_is_sharded(const ix_model *m) {
    return m->shard.n_ranks > 1 || m->shard.n_layer < ix_model_get_hparams(m)->n_layer;
}

ix_model_load_params ix_model_load_default_params(void) {
    ix_model_load_params p = {0};
    p.pack_cache_min_bytes = (uint64_t)64 << 20;
    return p;
}

ix_status ix_model_load(ix_model **out, const char *path, ix_errbuf *err) {
    ix_model_load_params p = ix_model_load_default_params();
    return ix_model_load_ex(out, path, &p, err);
}

ix_status ix_model_load_progress(ix_model **out, const char *path, ix_load_progress_fn progress, void *user,
                                 ix_errbuf *err) {
    ix_model_load_params p = ix_model_load_default_params();
    p.progress = progress;
    p.progress_user = user;
    return ix_model_load_ex(out, path, &p, err);
}

bool ix_model_pack_cached(const ix_model *m) { return m->packed_cached; }

static ix_status load_model(ix_model **out, const char *path, const ix_model_load_params *p,
                            const ix_model_comm *comm, ix_errbuf *err);

ix_status ix_model_load_ex(ix_model **out, const char *path, const ix_model_load_params *p, ix_errbuf *err) {
    return load_model(out, path, p, NULL, err);
}

ix_status ix_model_load_shard(ix_model **out, const char *path, const ix_model_comm *comm,
                              ix_load_progress_fn progress, void *user, ix_errbuf *err) {
    ix_model_load_params p = ix_model_load_default_params();
    p.progress = progress;
    p.progress_user = user;
    /* no packed-weight cache: its key names the file and the weights'
     * shapes, not which rows of them a shard holds */
    return load_model(out, path, &p, comm, err);
}

static ix_status load_model(ix_model **out, const char *path, const ix_model_load_params *p,
                            const ix_model_comm *comm, ix_errbuf *err) {
    *out = NULL;
    if (!p || !path) return ix_errf(err, IX_ERR_INVALID, "ix_model_load_ex: NULL path or params");
    ix_model *m = ix_calloc(1, sizeof *m);
    if (!m) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    loader L = {m, NULL, err, p->progress, p->progress_user, path, p};
    report(&L, 0.0);
    ix_status s = ix_gguf_open(&m->gguf, path, err);
    if (s != IX_OK) goto fail;
    L.g = m->gguf;
    if ((s = read_hparams(&L)) != IX_OK) goto fail;
    if ((s = ix_tokenizer_create(&m->tok, m->gguf, err)) != IX_OK) goto fail;
    if ((s = bind_tensors(&L)) != IX_OK) goto fail;
    if ((s = shard_weights(&L, comm)) != IX_OK) goto fail;
    report(&L, LOAD_PACK_FROM);
    if ((s = repack_weights(&L)) != IX_OK) goto fail;
    report(&L, 1.0);
    *out = m;
    return IX_OK;
fail:
    ix_model_destroy(m);
    return s;
}

void ix_model_destroy(ix_model *m) {
    if (!m) return;
    ix_tokenizer_destroy(m->tok);
    ix_gguf_close(m->gguf);
    ix_free(m->layers);
    ix_free(m->rope_factors);
    for (int i = 0; i < IX__COLS_COUNT; i++) ix_free(m->cols[i]);
    if (m->packed) munmap(m->packed, (size_t)m->packed_bytes);
    ix__pack_cache_finish(m->pack_writer); /* the new cache file durable and in place */
    ix_free(m);
}

const ix_model_hparams *ix_model_get_hparams(const ix_model *m) { return &m->hp; }
const ix_tokenizer *ix_model_tokenizer(const ix_model *m) { return m->tok; }
const ix_gguf *ix_model_gguf(const ix_model *m) { return m->gguf; }
uint64_t ix_model_decode_bytes(const ix_model *m) { return m->decode_bytes; }
uint64_t ix_model_n_params(const ix_model *m) { return m->n_params; }
uint64_t ix_model_weight_bytes(const ix_model *m) { return m->weight_bytes; }
uint64_t ix_model_weight_resident_bytes(const ix_model *m) {
    return ix_resident_bytes(m->packed, m->packed_bytes) + ix_gguf_resident_bytes(m->gguf);
}

void ix_model_kv_params(const ix_model *m, ix_kv_params *p) {
    p->n_layer = m->shard.n_layer; /* a pipeline stage holds only its layers' K/V */
    p->n_kv_head = m->shard.n_kv; /* a shard holds only its KV heads */
    p->head_dim = m->hp.head_dim;
    /* the cache may drop blocks behind the window only when no layer reads them */
    p->sliding_window = m->hp.swa == IX_SWA_ALL ? m->hp.sliding_window : 0;
    p->max_seq_len = m->hp.n_ctx_train;
}
