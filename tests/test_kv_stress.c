/* kv: randomized stress test. Several seeded runs (over 200,000 operations in
 * all) of appends, commits, forks, frees, truncations, prefix lookups and
 * adoptions, swaps, cache resets and evictions under a small pool, checking
 * after every step, from the public API alone, that
 *   - every block's reference count equals the number of block-table entries
 *     naming it, no referenced block is free or evictable, and every block is in
 *     exactly one state (blocks are conserved);
 *   - every cached block still holds the bytes and token ids it had when it was
 *     entered into the cache;
 *   - ix_kv_check finds nothing;
 * and that each prefix hit and each sequence (one at random per step, all of
 * them periodically) reads back exactly the K/V its own tokens produced.
 *
 * The simulated model: K/V of position p is a function of a fingerprint of the
 * namespace and tokens 0..p, as a real model's K/V depends on the whole prefix,
 * so a block served to the wrong prefix or tenant shows up as wrong bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "inferx/kv.h"

#define MAX_SEQS 48
#define MAX_LEN 160
#define N_FAMILIES 6
#define FAMILY_LEN 96
#define VOCAB 12 /* small, so that equal blocks arise by chance too */

typedef struct {
    const char *name;
    uint64_t seed;
    long n_ops;
    int32_t n_blocks, block_size, window, n_swap;
    ix_kv_dtype dtype;
    bool constant_hash, prefix_cache;
} stress_cfg;

typedef struct {
    bool live, swapped;
    uint64_t ns;
    int32_t n;
    int32_t tok[MAX_LEN];
    uint64_t fp[MAX_LEN]; /* fingerprint of (ns, tok[0..i]) */
} model_seq;

typedef struct {
    const stress_cfg *cfg;
    ix_kv *kv;
    ix_kv_layout lay;
    uint64_t rng;
    model_seq seq[MAX_SEQS];
    int32_t families[N_FAMILIES][FAMILY_LEN];
    /* Per block: cache id at the last check (0: not cached), bytes and tokens then. */
    uint64_t *was_cid;
    unsigned char *reg_bytes; /* (n_blocks, block_stride_bytes) */
    int32_t *reg_tokens;      /* (n_blocks, block_size) */
    int32_t *refcount;        /* (n_blocks) scratch */
    long n_hits, n_full, n_cow_seen;
} stress;

static uint64_t rnd(stress *t) { /* splitmix64 */
    uint64_t z = (t->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int32_t rnd_below(stress *t, int32_t n) {
    return n > 0 ? (int32_t)(rnd(t) % (uint64_t)n) : 0;
}
static bool chance(stress *t, int percent) {
    return rnd_below(t, 100) < percent;
}

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 29)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 32);
}

/* The bytes of one (layer, head, K|V) vector of a position with fingerprint fp. */
static void gen_vec(const stress *t, uint64_t fp, int32_t tok, int32_t l, int32_t h, int kv_sel,
                    unsigned char *out) {
    uint32_t w[4] = {(uint32_t)fp ^ (uint32_t)(l * 0x9E37 + h * 0x85EB + kv_sel * 0xC2B2),
                     (uint32_t)(fp >> 32), (uint32_t)tok,
                     (uint32_t)((l << 16) | (h << 8) | kv_sel)};
    for (size_t i = 0; i < t->lay.token_stride_bytes; i += sizeof w) {
        size_t n =
            t->lay.token_stride_bytes - i < sizeof w ? t->lay.token_stride_bytes - i : sizeof w;
        memcpy(out + i, w, n);
    }
}

static unsigned char *vec_ptr(stress *t, int32_t block, int32_t slot, int32_t l, int32_t h,
                              int kv_sel) {
    unsigned char *base = kv_sel ? ix_kv_block_v(t->kv, l, block) : ix_kv_block_k(t->kv, l, block);
    return base + (size_t)h * t->lay.head_stride_bytes + (size_t)slot * t->lay.token_stride_bytes;
}

static void fail_step(stress *t, long step, const char *what) {
    fail_msg("[%s] step %ld: %s (kv: %s)", t->cfg->name, step, what, ix_kv_errmsg(t->kv));
}

/* The forward pass: writes K/V of positions [from, to) of seq s. */
static void write_range(stress *t, int32_t s, int32_t from, int32_t to, long step) {
    int32_t nb;
    const int32_t *tab = ix_kv_seq_block_table(t->kv, s, &nb);
    unsigned char vec[64];
    for (int32_t p = from; p < to; p++) {
        int32_t b = tab[p / t->lay.block_size], slot = p % t->lay.block_size;
        ix_kv_block_info bi;
        assert_int_equal(ix_kv_get_block_info(t->kv, b, &bi), IX_OK);
        if (bi.ref != 1 || bi.cached)
            fail_step(t, step, "asked to write into a shared or cached block");
        for (int32_t l = 0; l < t->lay.n_layer; l++)
            for (int32_t h = 0; h < t->lay.n_kv_head; h++)
                for (int k = 0; k < 2; k++) {
                    gen_vec(t, t->seq[s].fp[p], t->seq[s].tok[p], l, h, k, vec);
                    memcpy(vec_ptr(t, b, slot, l, h, k), vec, t->lay.token_stride_bytes);
                }
    }
}

static int32_t released_blocks(stress *t, int32_t s) {
    ix_kv_seq_info info;
    assert_int_equal(ix_kv_seq_get_info(t->kv, s, &info), IX_OK);
    return info.n_blocks - info.n_blocks_held;
}

/* Sequence s reads back exactly what its own tokens produced in [from, to). */
static void verify_seq(stress *t, int32_t s, int32_t from, int32_t to, long step) {
    int32_t nb;
    const int32_t *tab = ix_kv_seq_block_table(t->kv, s, &nb);
    int32_t lo = released_blocks(t, s) * t->lay.block_size;
    unsigned char vec[64];
    if (from < lo) from = lo;
    for (int32_t p = from; p < to; p++) {
        int32_t b = tab[p / t->lay.block_size], slot = p % t->lay.block_size;
        ix_kv_block_info bi;
        assert_int_equal(ix_kv_get_block_info(t->kv, b, &bi), IX_OK);
        if (bi.tokens[slot] != t->seq[s].tok[p]) fail_step(t, step, "wrong token id in a block");
        for (int32_t l = 0; l < t->lay.n_layer; l++)
            for (int32_t h = 0; h < t->lay.n_kv_head; h++)
                for (int k = 0; k < 2; k++) {
                    gen_vec(t, t->seq[s].fp[p], t->seq[s].tok[p], l, h, k, vec);
                    if (memcmp(vec_ptr(t, b, slot, l, h, k), vec, t->lay.token_stride_bytes) != 0)
                        fail_step(t, step, "a sequence reads K/V it did not produce");
                }
    }
}

/* Appends tokens to the model and the cache; on success writes their K/V. */
static ix_status do_append(stress *t, int32_t s, const int32_t *tok, int32_t n, long step) {
    model_seq *m = &t->seq[s];
    if (m->n + n > MAX_LEN) n = MAX_LEN - m->n;
    if (n <= 0) return IX_OK;
    int64_t need = ix_kv_seq_blocks_needed(t->kv, s, n), avail = ix_kv_n_available(t->kv);
    int32_t nb0;
    const int32_t *tab0 = ix_kv_seq_block_table(t->kv, s, &nb0);
    int32_t last_before = (m->n % t->lay.block_size) ? tab0[m->n / t->lay.block_size] : -1;
    ix_status st = ix_kv_seq_append(t->kv, s, n, tok);
    if (st == IX_FULL) {
        if (need <= avail) fail_step(t, step, "IX_FULL although enough blocks were available");
        if (ix_kv_seq_n_tokens(t->kv, s) != m->n)
            fail_step(t, step, "a failed append changed the length");
        t->n_full++;
        return st;
    }
    assert_int_equal(st, IX_OK);
    if (need > avail) fail_step(t, step, "append succeeded beyond the available blocks");
    for (int32_t i = 0; i < n; i++) {
        int32_t p = m->n + i;
        m->tok[p] = tok[i];
        m->fp[p] = mix(p ? m->fp[p - 1] : m->ns, (uint64_t)tok[i]);
    }
    int32_t nb;
    const int32_t *tab = ix_kv_seq_block_table(t->kv, s, &nb);
    if (last_before >= 0 && tab[m->n / t->lay.block_size] != last_before) {
        t->n_cow_seen++; /* copied: the copy must hold the earlier tokens */
        verify_seq(t, s, m->n / t->lay.block_size * t->lay.block_size, m->n, step);
    }
    write_range(t, s, m->n, m->n + n, step);
    m->n += n;
    return IX_OK;
}

static int32_t random_live(stress *t, bool want_swapped) {
    int32_t start = rnd_below(t, MAX_SEQS);
    for (int32_t i = 0; i < MAX_SEQS; i++) {
        int32_t s = (start + i) % MAX_SEQS;
        if (t->seq[s].live && t->seq[s].swapped == want_swapped) return s;
    }
    return -1;
}

static void model_free(stress *t, int32_t s, long step) {
    if (ix_kv_seq_free(t->kv, s) != IX_OK) fail_step(t, step, "free failed");
    memset(&t->seq[s], 0, sizeof t->seq[s]);
}

/* A prompt: a prefix of one family plus a random tail. */
static int32_t make_prompt(stress *t, int32_t *out) {
    const int32_t *fam = t->families[rnd_below(t, N_FAMILIES)];
    int32_t keep = rnd_below(t, FAMILY_LEN + 1), tail = rnd_below(t, 12), n = 0;
    for (; n < keep; n++)
        out[n] = fam[n];
    for (int32_t i = 0; i < tail; i++)
        out[n++] = rnd_below(t, VOCAB);
    return n;
}

static void op_new_request(stress *t, long step) {
    int32_t prompt[MAX_LEN], n = make_prompt(t, prompt), s;
    uint64_t ns = (uint64_t)rnd_below(t, 3);
    int32_t match_cached = -1;
    int64_t match_need = -1;
    assert_int_equal(ix_kv_prefix_match(t->kv, ns, prompt, n, &match_cached, &match_need), IX_OK);
    if (match_cached < 0 || match_cached % t->lay.block_size != 0 || (n > 0 && match_cached >= n))
        fail_step(t, step, "prefix_match returned an impossible count");
    if (ix_kv_seq_create(t->kv, ns, &s) != IX_OK) fail_step(t, step, "seq_create failed");
    if (s >= MAX_SEQS) fail_step(t, step, "sequence ids are not reused");
    model_seq *m = &t->seq[s];
    memset(m, 0, sizeof *m);
    m->live = true;
    m->ns = ns;
    int32_t cached = 0;
    if (chance(t, 85)) {
        int64_t avail0 = ix_kv_n_available(t->kv);
        assert_int_equal(ix_kv_seq_adopt_prefix(t->kv, s, prompt, n, &cached), IX_OK);
        if (cached != match_cached) fail_step(t, step, "adopt and match disagree");
        int64_t need_after = ix_kv_seq_blocks_needed(t->kv, s, n - cached);
        if (avail0 - ix_kv_n_available(t->kv) + need_after != match_need && t->cfg->window == 0)
            fail_step(t, step, "prefix_match mispredicted the blocks admission takes");
        for (int32_t i = 0; i < cached; i++) {
            m->tok[i] = prompt[i];
            m->fp[i] = mix(i ? m->fp[i - 1] : ns, (uint64_t)prompt[i]);
        }
        m->n = cached;
        if (cached > 0) t->n_hits++;
        verify_seq(t, s, 0, cached, step); /* a hit serves exactly this prefix */
    }
    if (do_append(t, s, prompt + cached, n - cached, step) == IX_FULL) {
        model_free(t, s, step); /* not admitted */
        return;
    }
    if (chance(t, 80)) assert_int_equal(ix_kv_seq_commit(t->kv, s, m->n), IX_OK);
}

static void op_decode(stress *t, long step) {
    int32_t s = random_live(t, false);
    if (s < 0) return;
    int32_t tok[24], n = chance(t, 80) ? 1 + rnd_below(t, 3) : 1 + rnd_below(t, 24);
    for (int32_t i = 0; i < n; i++)
        tok[i] = rnd_below(t, VOCAB);
    if (do_append(t, s, tok, n, step) == IX_FULL) {
        /* Preempt someone (recompute): the cache must then have room again. */
        int32_t victim = random_live(t, false);
        model_free(t, victim, step);
        return;
    }
    if (chance(t, 75)) assert_int_equal(ix_kv_seq_commit(t->kv, s, t->seq[s].n), IX_OK);
}

static void op_commit(stress *t, long step) {
    int32_t s = random_live(t, false);
    if (s < 0) return;
    int32_t to = rnd_below(t, t->seq[s].n + 1);
    if (ix_kv_seq_commit(t->kv, s, to) != IX_OK) fail_step(t, step, "commit failed");
}

static void op_fork(stress *t, long step) {
    int32_t s = random_live(t, false), c;
    if (s < 0) return;
    if (ix_kv_seq_fork(t->kv, s, &c) != IX_OK) fail_step(t, step, "fork failed");
    if (c >= MAX_SEQS) fail_step(t, step, "sequence ids are not reused");
    t->seq[c] = t->seq[s];
}

static void op_truncate(stress *t, long step) {
    int32_t s = random_live(t, false);
    if (s < 0) return;
    model_seq *m = &t->seq[s];
    int32_t to = m->n - rnd_below(t, 9);
    if (chance(t, 5)) to = rnd_below(t, m->n + 1);
    if (to < 0) to = 0;
    ix_kv_seq_info info;
    assert_int_equal(ix_kv_seq_get_info(t->kv, s, &info), IX_OK);
    int32_t r = info.n_blocks - info.n_blocks_held,
            written = to < info.n_written ? to : info.n_written;
    bool allowed =
        r == 0 || (int64_t)r * t->lay.block_size <= (int64_t)written - t->cfg->window + 1;
    ix_status st = ix_kv_seq_truncate(t->kv, s, to);
    if (st != (allowed ? IX_OK : IX_ERR_RANGE)) fail_step(t, step, "truncate: unexpected status");
    if (st == IX_OK) m->n = to;
}

static void op_swap(stress *t, long step) {
    int32_t s = random_live(t, chance(t, 50));
    if (s < 0) return;
    model_seq *m = &t->seq[s];
    if (!m->swapped) {
        ix_status st = ix_kv_seq_swap_out(t->kv, s);
        if (st == IX_OK)
            m->swapped = true;
        else if (st != IX_FULL)
            fail_step(t, step, "swap_out failed");
        int32_t tok = 1;
        if (m->swapped && ix_kv_seq_append(t->kv, s, 1, &tok) != IX_ERR_STATE)
            fail_step(t, step, "append to a swapped sequence");
    } else {
        ix_status st = ix_kv_seq_swap_in(t->kv, s);
        if (st == IX_OK) {
            m->swapped = false;
            verify_seq(t, s, 0, m->n, step);
        } else if (st != IX_FULL) {
            fail_step(t, step, "swap_in failed");
        }
    }
}

/* The per-step invariants, from the public API. */
static void check_invariants(stress *t, long step) {
    ix_kv *kv = t->kv;
    int32_t nblk = t->lay.n_blocks, bs = t->lay.block_size;
    memset(t->refcount, 0, (size_t)nblk * sizeof(int32_t));
    for (int32_t s = 0; s < MAX_SEQS; s++) {
        model_seq *m = &t->seq[s];
        if (!m->live) {
            if (ix_kv_seq_n_tokens(kv, s) != -1) fail_step(t, step, "freed sequence still live");
            continue;
        }
        if (ix_kv_seq_n_tokens(kv, s) != m->n) fail_step(t, step, "length differs from the model");
        if (m->swapped) continue;
        int32_t nb;
        const int32_t *tab = ix_kv_seq_block_table(kv, s, &nb);
        if (nb != (m->n + bs - 1) / bs) fail_step(t, step, "table length");
        int32_t r = released_blocks(t, s);
        for (int32_t j = 0; j < nb; j++) {
            if (j < r) {
                if (tab[j] != IX_KV_NO_BLOCK) fail_step(t, step, "released entry holds a block");
                continue;
            }
            if (tab[j] < 0 || tab[j] >= nblk) fail_step(t, step, "table entry out of range");
            t->refcount[tab[j]]++;
        }
    }
    int64_t n_free = 0, n_evictable = 0, n_used = 0, n_cached = 0;
    size_t bb = t->lay.block_stride_bytes, tb = (size_t)bs * sizeof(int32_t);
    for (int32_t b = 0; b < nblk; b++) {
        ix_kv_block_info bi;
        assert_int_equal(ix_kv_get_block_info(kv, b, &bi), IX_OK);
        if (bi.ref != t->refcount[b]) fail_step(t, step, "reference count != table references");
        if ((bi.free || bi.evictable) && bi.ref != 0)
            fail_step(t, step, "block free and referenced");
        if ((int)bi.free + (int)bi.evictable + (int)(bi.ref > 0) != 1)
            fail_step(t, step, "block in no state or in two");
        if (bi.evictable != (bi.cached && bi.ref == 0)) fail_step(t, step, "evictable flag");
        n_free += bi.free;
        n_evictable += bi.evictable;
        n_used += bi.ref > 0;
        n_cached += bi.cached;
        unsigned char *data = (unsigned char *)ix_kv_block_k(kv, 0, b);
        if (bi.cached && t->was_cid[b] == bi.cache_id) {
            if (memcmp(data, t->reg_bytes + (size_t)b * bb, bb) != 0)
                fail_step(t, step, "a cached block's K/V changed");
            if (memcmp(bi.tokens, t->reg_tokens + (size_t)b * bs, tb) != 0)
                fail_step(t, step, "a cached block's token ids changed");
        } else if (bi.cached) {
            /* Newly entered: each slot must hold K/V of its own token id (full
             * contents are checked through the sequences); remember it all. */
            for (int32_t slot = 0; slot < bs; slot++) {
                uint32_t w[3];
                memcpy(w, vec_ptr(t, b, slot, 0, 0, 0), sizeof w);
                if ((int32_t)w[2] != bi.tokens[slot])
                    fail_step(t, step, "a block entered the cache before its K/V was written");
            }
            memcpy(t->reg_bytes + (size_t)b * bb, data, bb);
            memcpy(t->reg_tokens + (size_t)b * bs, bi.tokens, tb);
        }
        t->was_cid[b] = bi.cache_id;
    }
    ix_kv_stats st;
    ix_kv_get_stats(kv, &st);
    if (n_free + n_evictable + n_used != nblk || st.n_blocks_free != n_free ||
        st.n_blocks_evictable != n_evictable || st.n_blocks_used != n_used ||
        st.n_blocks_cached != n_cached || st.n_blocks_total != nblk)
        fail_step(t, step, "block accounting is not conserved");
    if (st.n_slots_used > st.n_slots_allocated || st.utilization > 1.0)
        fail_step(t, step, "slot accounting");
    if (ix_kv_check(kv) != IX_OK) fail_step(t, step, "ix_kv_check");
    /* Data: one sequence each step, all of them now and then. */
    if (step % 2000 == 0) {
        for (int32_t s = 0; s < MAX_SEQS; s++)
            if (t->seq[s].live && !t->seq[s].swapped) verify_seq(t, s, 0, t->seq[s].n, step);
    } else {
        int32_t s = random_live(t, false);
        if (s >= 0) verify_seq(t, s, 0, t->seq[s].n, step);
    }
}

static uint64_t constant_hash(uint64_t parent_key, uint64_t ns, const int32_t *tokens, int32_t n) {
    (void)parent_key;
    (void)ns;
    (void)tokens;
    (void)n;
    return 0x5eed;
}

static void run(const stress_cfg *cfg) {
    stress t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.rng = cfg->seed;
    ix_kv_params p = ix_kv_default_params();
    p.n_layer = 2;
    p.n_kv_head = 2;
    p.dtype = cfg->dtype;
    p.head_dim = cfg->dtype == IX_KV_F16 ? 8 : 4; /* 16-byte vectors either way */
    p.block_size = cfg->block_size;
    p.n_blocks = cfg->n_blocks;
    p.n_swap_blocks = cfg->n_swap;
    p.sliding_window = cfg->window;
    p.enable_prefix_cache = cfg->prefix_cache;
    if (cfg->constant_hash) p.hash_fn = constant_hash;
    ix_errbuf err;
    assert_int_equal(ix_kv_create(&p, &t.kv, &err), IX_OK);
    ix_kv_get_layout(t.kv, &t.lay);
    t.was_cid = test_calloc((size_t)cfg->n_blocks, sizeof(uint64_t));
    t.reg_bytes = test_malloc((size_t)cfg->n_blocks * t.lay.block_stride_bytes);
    t.reg_tokens = test_malloc((size_t)cfg->n_blocks * (size_t)cfg->block_size * sizeof(int32_t));
    t.refcount = test_malloc((size_t)cfg->n_blocks * sizeof(int32_t));
    /* Families are strings of a few 4-token phrases, so equal blocks often sit
     * under different parents (what chaining must keep apart) and families
     * share heads (what the cache should find). */
    int32_t phrases[3][4];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 4; i++)
            phrases[k][i] = rnd_below(&t, VOCAB);
    for (int f = 0; f < N_FAMILIES; f++)
        for (int i = 0; i < FAMILY_LEN; i += 4)
            memcpy(&t.families[f][i], phrases[rnd_below(&t, 3)], sizeof phrases[0]);

    for (long step = 1; step <= cfg->n_ops; step++) {
        int r = rnd_below(&t, 1000);
        if (r < 160)
            op_new_request(&t, step);
        else if (r < 560)
            op_decode(&t, step);
        else if (r < 640)
            op_commit(&t, step);
        else if (r < 700)
            op_fork(&t, step);
        else if (r < 800)
            op_truncate(&t, step);
        else if (r < 930) {
            int32_t s = random_live(&t, chance(&t, 10));
            if (s >= 0) model_free(&t, s, step);
        } else if (r < 970) {
            if (cfg->n_swap > 0) op_swap(&t, step);
        } else if (r < 999) {
            int32_t prompt[MAX_LEN], n = make_prompt(&t, prompt), c;
            assert_int_equal(ix_kv_prefix_match(t.kv, 1, prompt, n, &c, NULL), IX_OK);
        } else if (rnd_below(&t, 20) == 0) {
            ix_kv_prefix_reset(t.kv);
        }
        /* Keep the live set bounded so ids stay below MAX_SEQS. */
        int32_t live = 0;
        for (int32_t s = 0; s < MAX_SEQS; s++)
            live += t.seq[s].live;
        while (live > MAX_SEQS - 8) {
            model_free(&t,
                       random_live(&t, false) >= 0 ? random_live(&t, false) : random_live(&t, true),
                       step);
            live--;
        }
        check_invariants(&t, step);
    }
    ix_kv_stats st;
    ix_kv_get_stats(t.kv, &st);
    printf("[%s] %ld ops: %ld prefix hits (%lld of %lld tokens), %ld refused appends, "
           "%lld evictions, %lld copies on write, %lld forks, %lld blocks swapped out\n",
           cfg->name, cfg->n_ops, t.n_hits, (long long)st.prefix_hit_tokens,
           (long long)st.prefix_queried_tokens, t.n_full, (long long)st.n_evictions,
           (long long)st.n_cow_copies, (long long)st.n_forks, (long long)st.n_blocks_swapped_out);
    /* The run must have exercised what it claims to. */
    assert_true(st.n_forks > 100 && st.n_cow_copies > 10);
    assert_true(t.n_full > 10);
    if (cfg->prefix_cache) assert_true(t.n_hits > 100 && st.n_evictions > 100);
    if (cfg->n_swap > 0) assert_true(st.n_blocks_swapped_in > 10);
    for (int32_t s = 0; s < MAX_SEQS; s++)
        if (t.seq[s].live) model_free(&t, s, cfg->n_ops);
    ix_kv_get_stats(t.kv, &st);
    assert_int_equal(st.n_blocks_used, 0);
    assert_int_equal(st.n_blocks_free + st.n_blocks_evictable, cfg->n_blocks);
    ix_kv_destroy(t.kv);
    test_free(t.was_cid);
    test_free(t.reg_bytes);
    test_free(t.reg_tokens);
    test_free(t.refcount);
}

static void test_stress_main(void **state) {
    (void)state;
    stress_cfg c = {"main", 1, 120000, 96, 4, 0, 48, IX_KV_F32, false, true};
    run(&c);
}

static void test_stress_collisions(void **state) {
    (void)state;
    stress_cfg c = {"all-keys-collide", 2, 40000, 96, 4, 0, 0, IX_KV_F32, true, true};
    run(&c);
}

static void test_stress_window(void **state) {
    (void)state;
    stress_cfg c = {"window-f16", 3, 40000, 64, 4, 10, 16, IX_KV_F16, false, true};
    run(&c);
}

static void test_stress_big_blocks(void **state) {
    (void)state;
    stress_cfg c = {"block16", 4, 30000, 48, 16, 0, 0, IX_KV_F32, false, true};
    run(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_main),
        cmocka_unit_test(test_stress_collisions),
        cmocka_unit_test(test_stress_window),
        cmocka_unit_test(test_stress_big_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
