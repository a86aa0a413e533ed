/*
 * The matcher: a pushdown recognizer over bytes, run as a lazily built
 * automaton, and the token masks it computes (docs/grammar.md, "Matcher").
 *
 * Parse stacks are hash-consed nodes (top position, parent node): a stack is
 * one node id, stacks share their tails, and pushing is one table lookup.
 * Node 0 is the empty stack (the grammar is complete). A grammar state is the
 * sorted set of stacks the parse can be in after the bytes so far, every
 * stack's top a byte set (references are expanded eagerly), interned too:
 * equal states have equal ids. Transitions state x byte class -> state are
 * computed on first use and kept, so after warm-up one byte costs one array
 * load whatever the grammar.
 *
 * The mask of a state is a walk of the vocabulary's trie in preorder with one
 * state per depth: a node whose byte is refused skips its whole subtree. Masks
 * are cached per state (LRU over a fixed number of slots), so a state that
 * comes back (the inside of a string, the same place in the next document)
 * costs a copy.
 *
 * Everything here belongs to one cache shared by a matcher and its clones
 * (one thread at a time). Past state_cache_bytes the cache is emptied at the
 * start of the next call and the live matchers' states are rebuilt from their
 * stacks' positions (ids change; positions do not).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define ST_DEAD (-1)    /* no stack survives */
#define ST_UNKNOWN (-2) /* transition not computed yet */
#define ST_ERROR (-3)   /* computing it failed (message in the cache) */

/* Bounds against grammars ambiguous enough to keep thousands of parses
 * alive at once: parses per state, and parse-stack expansions per public
 * call (generating a JSON-schema document from a cold cache needs ~2e4 in
 * all; this budget is a few tens of milliseconds). */
#define GRAM_MAX_STACKS 2048
#define GRAM_MAX_CALL_WORK (1 << 20)

typedef struct gstate {
    uint32_t off, n;   /* stacks: pool[off .. off + n), sorted node ids */
    int32_t mask_slot; /* -1: no cached mask */
    uint8_t accepting; /* holds the empty stack */
} gstate;

typedef struct gcache {
    const ix_grammar *g;
    const ix_grammar_vocab *v;
    ix_grammar_matcher_params p;
    int32_t refs;
    ix_grammar_matcher *live; /* every matcher of the family, for flushes */
    ix_errbuf err;
    int32_t nc;               /* byte classes */
    uint8_t *node_class;      /* (v->n_nodes) class of each trie node's byte */
    int32_t start;            /* start state */

    /* stack nodes; node 0 = empty stack */
    int32_t *npos, *nparent, *ndepth; /* (cap_nodes) */
    uint32_t *stamp;                  /* (cap_nodes) closure visit marks */
    int32_t n_nodes, cap_nodes;
    int32_t *nht; /* (nht_cap) node id + 1 */
    uint32_t nht_cap, cur_stamp;

    /* states */
    gstate *st;     /* (cap_st) */
    int32_t *trans; /* (cap_st, nc) next state per class, ST_* when none */
    int32_t n_st, cap_st;
    int32_t *pool; /* stacks of all states */
    size_t n_pool, cap_pool;
    int32_t *sht; /* (sht_cap) state id + 1 */
    uint32_t sht_cap;

    /* closure scratch */
    int32_t *work, *emit;
    size_t n_work, cap_work, n_emit, cap_emit;

    /* masks */
    uint32_t *masks;      /* (cap_slots, v->n_words), grown up to n_slots */
    int32_t *slot_state;  /* (cap_slots) */
    uint64_t *slot_tick;  /* (cap_slots) last use */
    int32_t n_slots, n_slots_used, cap_slots;
    uint64_t tick;
    int32_t *walk;        /* (v->max_depth + 1) state per trie depth */

    int64_t mask_hits, mask_misses, trie_nodes, flushes, expansions;
    int64_t budget; /* expansions left to the current public call */
    bool broken; /* a flush ran out of memory: the matchers' states are lost */
} gcache;

struct ix_grammar_matcher {
    gcache *c;
    int32_t state;
    bool finished; /* end-of-generation accepted */
    ix_grammar_matcher *prev, *next;
};

static ix_status cache_nomem(gcache *c) { return ix_errf(&c->err, IX_ERR_NOMEM, "out of memory"); }

/* The status of a failed transition (its message is in c->err). */
static ix_status error_status(const gcache *c) {
    return strncmp(c->err.msg, "out of memory", 13) == 0 ? IX_ERR_NOMEM : IX_ERR_UNSUPPORTED;
}

static ix_status grow(void **p, size_t elem, size_t need, size_t *cap) {
    if (need <= *cap) return IX_OK;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = ix_realloc(*p, n * elem);
    if (!q) return IX_ERR_NOMEM;
    *p = q;
    *cap = n;
    return IX_OK;
}

static uint32_t mix2(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32) ^ (uint32_t)h;
}

/* ---- tables ------------------------------------------------------------------- */

static void tables_free(gcache *c) {
    ix_free(c->npos);
    ix_free(c->nparent);
    ix_free(c->ndepth);
    ix_free(c->stamp);
    ix_free(c->nht);
    ix_free(c->st);
    ix_free(c->trans);
    ix_free(c->pool);
    ix_free(c->sht);
    c->npos = c->nparent = c->ndepth = c->nht = c->trans = c->pool = c->sht = NULL;
    c->stamp = NULL;
    c->st = NULL;
    c->n_nodes = c->cap_nodes = c->n_st = c->cap_st = 0;
    c->n_pool = c->cap_pool = 0;
    c->nht_cap = c->sht_cap = 0;
}

static ix_status tables_init(gcache *c) {
    c->cap_nodes = 1024;
    c->nht_cap = 2048;
    c->cap_st = 256;
    c->sht_cap = 512;
    c->cap_pool = 4096;
    size_t cn = (size_t)c->cap_nodes;
    c->npos = ix_malloc(cn * sizeof *c->npos);
    c->nparent = ix_malloc(cn * sizeof *c->nparent);
    c->ndepth = ix_malloc(cn * sizeof *c->ndepth);
    c->stamp = ix_calloc(cn, sizeof *c->stamp);
    c->nht = ix_calloc(c->nht_cap, sizeof *c->nht);
    c->st = ix_malloc((size_t)c->cap_st * sizeof *c->st);
    c->trans = ix_malloc((size_t)c->cap_st * (size_t)c->nc * sizeof *c->trans);
    c->pool = ix_malloc(c->cap_pool * sizeof *c->pool);
    c->sht = ix_calloc(c->sht_cap, sizeof *c->sht);
    if (!c->npos || !c->nparent || !c->ndepth || !c->stamp || !c->nht || !c->st || !c->trans ||
        !c->pool || !c->sht)
        return cache_nomem(c);
    c->npos[0] = -1;
    c->nparent[0] = -1;
    c->ndepth[0] = 0;
    c->n_nodes = 1;
    c->cur_stamp = 0;
    return IX_OK;
}

static size_t tables_bytes(const gcache *c) {
    return (size_t)c->cap_nodes * 16 + (size_t)c->nht_cap * 4 +
           (size_t)c->cap_st * (sizeof(gstate) + (size_t)c->nc * 4) + c->cap_pool * 4 +
           (size_t)c->sht_cap * 4 + (c->cap_work + c->cap_emit) * 4;
}

static ix_status nht_grow(gcache *c) {
    uint32_t cap = c->nht_cap * 2;
    int32_t *ht = ix_calloc(cap, sizeof *ht);
    if (!ht) return cache_nomem(c);
    for (int32_t id = 1; id < c->n_nodes; id++) {
        uint32_t h = mix2((uint32_t)c->npos[id], (uint32_t)c->nparent[id]) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = id + 1;
    }
    ix_free(c->nht);
    c->nht = ht;
    c->nht_cap = cap;
    return IX_OK;
}

/* The stack `pos` on top of `parent`: its node id, or -1 out of memory. */
static int32_t node_get(gcache *c, int32_t pos, int32_t parent) {
    uint32_t h = mix2((uint32_t)pos, (uint32_t)parent) & (c->nht_cap - 1);
    for (;;) {
        int32_t v = c->nht[h];
        if (!v) break;
        if (c->npos[v - 1] == pos && c->nparent[v - 1] == parent) return v - 1;
        h = (h + 1) & (c->nht_cap - 1);
    }
    if (c->n_nodes == c->cap_nodes) {
        size_t cap = (size_t)c->cap_nodes * 2;
        int32_t *a = ix_realloc(c->npos, cap * sizeof *a);
        if (a) c->npos = a;
        int32_t *b = a ? ix_realloc(c->nparent, cap * sizeof *b) : NULL;
        if (b) c->nparent = b;
        int32_t *d = b ? ix_realloc(c->ndepth, cap * sizeof *d) : NULL;
        if (d) c->ndepth = d;
        uint32_t *s = d ? ix_realloc(c->stamp, cap * sizeof *s) : NULL;
        if (!s) return -1;
        c->stamp = s;
        memset(s + c->cap_nodes, 0, (cap - (size_t)c->cap_nodes) * sizeof *s);
        c->cap_nodes = (int32_t)cap;
    }
    int32_t id = c->n_nodes++;
    c->npos[id] = pos;
    c->nparent[id] = parent;
    c->ndepth[id] = c->ndepth[parent] + 1;
    c->nht[h] = id + 1;
    if ((uint32_t)c->n_nodes * 2 >= c->nht_cap && nht_grow(c) != IX_OK) return -1;
    return id;
}

static uint32_t state_hash(const int32_t *ids, size_t n) {
    uint32_t h = (uint32_t)n * 0x9e3779b1u;
    for (size_t i = 0; i < n; i++) h = mix2(h, (uint32_t)ids[i]);
    return h;
}

static ix_status sht_grow(gcache *c) {
    uint32_t cap = c->sht_cap * 2;
    int32_t *ht = ix_calloc(cap, sizeof *ht);
    if (!ht) return cache_nomem(c);
    for (int32_t id = 0; id < c->n_st; id++) {
        uint32_t h = state_hash(c->pool + c->st[id].off, c->st[id].n) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = id + 1;
    }
    ix_free(c->sht);
    c->sht = ht;
    c->sht_cap = cap;
    return IX_OK;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The state made of the stacks in c->emit (any order, distinct). */
static int32_t state_intern(gcache *c) {
    if (c->n_emit == 0) return ST_DEAD;
    qsort(c->emit, c->n_emit, sizeof *c->emit, cmp_i32);
    const int32_t *ids = c->emit;
    size_t n = c->n_emit;
    uint32_t h = state_hash(ids, n) & (c->sht_cap - 1);
    for (;;) {
        int32_t v = c->sht[h];
        if (!v) break;
        const gstate *s = &c->st[v - 1];
        if (s->n == n && memcmp(c->pool + s->off, ids, n * sizeof *ids) == 0) return v - 1;
        h = (h + 1) & (c->sht_cap - 1);
    }
    if (c->n_st == c->cap_st) {
        size_t cap = (size_t)c->cap_st * 2;
        gstate *st = ix_realloc(c->st, cap * sizeof *st);
        if (!st) return (cache_nomem(c), ST_ERROR);
        c->st = st;
        int32_t *tr = ix_realloc(c->trans, cap * (size_t)c->nc * sizeof *tr);
        if (!tr) return (cache_nomem(c), ST_ERROR);
        c->trans = tr;
        c->cap_st = (int32_t)cap;
    }
    if (grow((void **)&c->pool, sizeof *c->pool, c->n_pool + n, &c->cap_pool) != IX_OK)
        return (cache_nomem(c), ST_ERROR);
    int32_t id = c->n_st++;
    gstate *s = &c->st[id];
    s->off = (uint32_t)c->n_pool;
    s->n = (uint32_t)n;
    s->mask_slot = -1;
    s->accepting = ids[0] == 0;
    memcpy(c->pool + c->n_pool, ids, n * sizeof *ids);
    c->n_pool += n;
    for (int32_t k = 0; k < c->nc; k++) c->trans[(size_t)id * (size_t)c->nc + (size_t)k] = ST_UNKNOWN;
    c->sht[h] = id + 1;
    if ((uint32_t)c->n_st * 2 >= c->sht_cap && sht_grow(c) != IX_OK) return ST_ERROR;
    return id;
}

/* ---- closure ------------------------------------------------------------------- */

static ix_status push_work(gcache *c, int32_t node) {
    if (node < 0) return cache_nomem(c);
    if (grow((void **)&c->work, sizeof *c->work, c->n_work + 1, &c->cap_work) != IX_OK)
        return cache_nomem(c);
    c->work[c->n_work++] = node;
    return IX_OK;
}

static void closure_begin(gcache *c) {
    c->n_work = c->n_emit = 0;
    if (++c->cur_stamp == 0) { /* wrapped: old marks could collide */
        memset(c->stamp, 0, (size_t)c->cap_nodes * sizeof *c->stamp);
        c->cur_stamp = 1;
    }
}

/* Expands every stack on the work list until its top is a byte set (or it is
 * empty), collecting the results in c->emit. Stacks deeper than the limit
 * are dropped: that parse cannot continue. */
static ix_status closure_run(gcache *c) {
    const ix_grammar *g = c->g;
    while (c->n_work) {
        int32_t n = c->work[--c->n_work];
        if (c->stamp[n] == c->cur_stamp) continue;
        c->stamp[n] = c->cur_stamp;
        c->expansions++;
        if (--c->budget < 0)
            return ix_errf(&c->err, IX_ERR_UNSUPPORTED,
                           "grammar too ambiguous: one step needs more than %d parse expansions",
                           GRAM_MAX_CALL_WORK);
        int32_t pos = n ? c->npos[n] : -1;
        if (n == 0 || g->elems[pos].type == GRAM_SET) {
            if (c->n_emit >= GRAM_MAX_STACKS)
                return ix_errf(&c->err, IX_ERR_UNSUPPORTED,
                               "grammar too ambiguous: more than %d parses alive at once",
                               GRAM_MAX_STACKS);
            if (grow((void **)&c->emit, sizeof *c->emit, c->n_emit + 1, &c->cap_emit) != IX_OK)
                return cache_nomem(c);
            c->emit[c->n_emit++] = n;
            continue;
        }
        /* A reference: continue after it (a tail reference continues with
         * the parent itself, so right recursion does not deepen the stack),
         * entering each alternative of the rule. */
        int32_t rule = g->elems[pos].arg, rest = c->nparent[n];
        int32_t cont = g->elems[pos + 1].type == GRAM_END ? rest : node_get(c, pos + 1, rest);
        if (cont < 0) return cache_nomem(c);
        bool deep = c->ndepth[cont] + 1 > c->p.max_stack_depth;
        for (int32_t a = g->rule_alt[rule]; a < g->rule_alt[rule + 1]; a++) {
            int32_t first = g->alt_start[a];
            ix_status s;
            if (g->elems[first].type == GRAM_END)
                s = push_work(c, cont);
            else if (deep)
                continue;
            else
                s = push_work(c, node_get(c, first, cont));
            if (s != IX_OK) return s;
        }
    }
    return IX_OK;
}

/* Moves the stack `n` (top a set that accepted a byte) past its top. */
static ix_status advance(gcache *c, int32_t n) {
    int32_t next = c->npos[n] + 1, parent = c->nparent[n];
    if (c->g->elems[next].type == GRAM_END) return push_work(c, parent);
    return push_work(c, node_get(c, next, parent));
}

static int32_t delta_slow(gcache *c, int32_t s, int32_t cls) {
    const ix_grammar *g = c->g;
    unsigned rep = g->class_rep[cls];
    closure_begin(c);
    const gstate *st = &c->st[s];
    for (uint32_t k = 0; k < st->n; k++) {
        int32_t n = c->pool[st->off + k];
        if (n == 0) continue;
        const gram_elem *e = &g->elems[c->npos[n]];
        if (gram_set_has(&g->sets[e->arg], rep) && advance(c, n) != IX_OK) return ST_ERROR;
    }
    if (closure_run(c) != IX_OK) return ST_ERROR;
    int32_t t = state_intern(c);
    if (t != ST_ERROR) c->trans[(size_t)s * (size_t)c->nc + (size_t)cls] = t;
    return t;
}

static inline int32_t delta(gcache *c, int32_t s, int32_t cls) {
    int32_t t = c->trans[(size_t)s * (size_t)c->nc + (size_t)cls];
    return t != ST_UNKNOWN ? t : delta_slow(c, s, cls);
}

static int32_t start_state(gcache *c) {
    const ix_grammar *g = c->g;
    closure_begin(c);
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        int32_t first = g->alt_start[a];
        if (push_work(c, g->elems[first].type == GRAM_END ? 0 : node_get(c, first, 0)) != IX_OK)
            return ST_ERROR;
    }
    if (closure_run(c) != IX_OK) return ST_ERROR;
    return state_intern(c);
}

/* ---- flush -------------------------------------------------------------------- */

/* Empties every table and rebuilds the live matchers' states from the
 * positions of their stacks. */
static ix_status flush(gcache *c) {
    ix_buf exp = {0}; /* per live matcher: n stacks, then per stack: depth, positions top first */
    ix_status s = IX_OK;
    for (ix_grammar_matcher *m = c->live; m && s == IX_OK; m = m->next) {
        const gstate *st = &c->st[m->state];
        int32_t hdr = (int32_t)st->n;
        s = ix_buf_append(&exp, &hdr, sizeof hdr);
        for (uint32_t k = 0; k < st->n && s == IX_OK; k++) {
            int32_t n = c->pool[st->off + k];
            int32_t d = c->ndepth[n];
            s = ix_buf_append(&exp, &d, sizeof d);
            for (; n && s == IX_OK; n = c->nparent[n]) s = ix_buf_append(&exp, &c->npos[n], sizeof(int32_t));
        }
    }
    if (s != IX_OK) {
        ix_buf_free(&exp);
        return cache_nomem(c);
    }
    for (int32_t i = 0; i < c->n_slots_used; i++) c->slot_state[i] = -1;
    c->n_slots_used = 0;
    tables_free(c);
    if ((s = tables_init(c)) != IX_OK) goto out;
    if ((c->start = start_state(c)) < 0) {
        s = IX_ERR_NOMEM;
        goto out;
    }
    const int32_t *p = (const int32_t *)exp.data;
    for (ix_grammar_matcher *m = c->live; m; m = m->next) {
        int32_t n_stacks = *p++;
        c->n_emit = 0;
        for (int32_t k = 0; k < n_stacks; k++) {
            int32_t d = *p++, node = 0;
            for (int32_t j = d - 1; j >= 0 && node >= 0; j--) node = node_get(c, p[j], node);
            p += d;
            if (node < 0 ||
                grow((void **)&c->emit, sizeof *c->emit, c->n_emit + 1, &c->cap_emit) != IX_OK) {
                s = cache_nomem(c);
                goto out;
            }
            c->emit[c->n_emit++] = node;
        }
        if ((m->state = state_intern(c)) < 0) {
            s = IX_ERR_NOMEM;
            goto out;
        }
    }
    c->flushes++;
out:
    ix_buf_free(&exp);
    return s;
}

/* Every public call that may compute transitions starts here. */
static ix_status maybe_flush(gcache *c) {
    c->budget = GRAM_MAX_CALL_WORK;
    if (c->broken)
        return ix_errf(&c->err, IX_ERR_NOMEM, "out of memory while the cache was rebuilt");
    if (tables_bytes(c) <= c->p.state_cache_bytes) return IX_OK;
    ix_status s = flush(c);
    c->broken = s != IX_OK;
    return s;
}

/* ---- lifecycle ------------------------------------------------------------------- */

ix_grammar_matcher_params ix_grammar_matcher_default_params(void) {
    ix_grammar_matcher_params p;
    memset(&p, 0, sizeof p);
    p.state_cache_bytes = (size_t)64 << 20;
    p.mask_cache_bytes = (size_t)16 << 20;
    p.max_stack_depth = 1024;
    return p;
}

static void cache_free(gcache *c) {
    if (!c) return;
    tables_free(c);
    ix_free(c->node_class);
    ix_free(c->work);
    ix_free(c->emit);
    ix_free(c->masks);
    ix_free(c->slot_state);
    ix_free(c->slot_tick);
    ix_free(c->walk);
    ix_free(c);
}

static void link_live(gcache *c, ix_grammar_matcher *m) {
    m->prev = NULL;
    m->next = c->live;
    if (c->live) c->live->prev = m;
    c->live = m;
    c->refs++;
}

ix_status ix_grammar_matcher_create(ix_grammar_matcher **out, const ix_grammar *g,
                                    const ix_grammar_vocab *v,
                                    const ix_grammar_matcher_params *params, ix_errbuf *err) {
    *out = NULL;
    ix_grammar_matcher_params p = params ? *params : ix_grammar_matcher_default_params();
    if (!g || !v) return ix_errf(err, IX_ERR_INVALID, "grammar or vocabulary is NULL");
    if (p.max_stack_depth < 1 || p.max_stack_depth > (1 << 20))
        return ix_errf(err, IX_ERR_INVALID, "max_stack_depth must be in [1, 1048576], got %d",
                       p.max_stack_depth);
    gcache *c = ix_calloc(1, sizeof *c);
    ix_grammar_matcher *m = ix_calloc(1, sizeof *m);
    if (!c || !m) {
        ix_free(c);
        ix_free(m);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    c->g = g;
    c->v = v;
    c->p = p;
    c->nc = g->n_classes;
    size_t mask_bytes = v->n_words * sizeof(uint32_t);
    size_t slots = p.mask_cache_bytes / mask_bytes;
    c->n_slots = slots > (1u << 20) ? 1 << 20 : (int32_t)slots;
    c->node_class = ix_malloc((size_t)v->n_nodes + 1);
    c->walk = ix_malloc(((size_t)v->max_depth + 1) * sizeof *c->walk);
    ix_status s = IX_OK;
    if (!c->node_class || !c->walk) s = cache_nomem(c);
    if (s == IX_OK) s = tables_init(c);
    if (s == IX_OK) {
        for (int32_t i = 0; i < v->n_nodes; i++) c->node_class[i] = g->byte_class[v->node_byte[i]];
        c->budget = GRAM_MAX_CALL_WORK;
        c->start = start_state(c);
        if (c->start == ST_DEAD)
            s = ix_errf(&c->err, IX_ERR_INVALID, "the grammar cannot start within max_stack_depth %d",
                        p.max_stack_depth);
        else if (c->start == ST_ERROR)
            s = error_status(c);
    }
    if (s != IX_OK) {
        ix_errf(err, s, "%s", c->err.msg[0] ? c->err.msg : "cannot start the grammar");
        cache_free(c);
        ix_free(m);
        return s;
    }
    m->c = c;
    m->state = c->start;
    link_live(c, m);
    *out = m;
    return IX_OK;
}

ix_status ix_grammar_matcher_clone(ix_grammar_matcher **out, ix_grammar_matcher *src) {
    *out = NULL;
    ix_grammar_matcher *m = ix_calloc(1, sizeof *m);
    if (!m) return cache_nomem(src->c);
    m->c = src->c;
    m->state = src->state;
    m->finished = src->finished;
    link_live(src->c, m);
    *out = m;
    return IX_OK;
}

ix_status ix_grammar_matcher_copy_state(ix_grammar_matcher *dst, const ix_grammar_matcher *src) {
    if (dst->c != src->c)
        return ix_errf(&dst->c->err, IX_ERR_INVALID, "copy_state between matchers of two families");
    dst->state = src->state;
    dst->finished = src->finished;
    return IX_OK;
}

void ix_grammar_matcher_destroy(ix_grammar_matcher *m) {
    if (!m) return;
    gcache *c = m->c;
    if (m->prev) m->prev->next = m->next;
    else c->live = m->next;
    if (m->next) m->next->prev = m->prev;
    ix_free(m);
    if (--c->refs == 0) cache_free(c);
}

void ix_grammar_matcher_reset(ix_grammar_matcher *m) {
    m->state = m->c->start;
    m->finished = false;
}

/* ---- masks ----------------------------------------------------------------------- */

static inline void set_bit(uint32_t *mask, ix_token id) { mask[id >> 5] |= 1u << (id & 31); }

/* The walk: one state per trie depth; a refused byte skips its subtree. */
static ix_status walk_trie(gcache *c, int32_t s, uint32_t *mask) {
    const ix_grammar_vocab *v = c->v;
    memset(mask, 0, v->n_words * sizeof *mask);
    if (c->st[s].accepting)
        for (int32_t k = 0; k < v->n_eog; k++) set_bit(mask, v->eog[k]);
    int32_t *walk = c->walk;
    const int32_t *trans = c->trans;
    const uint16_t *depth = v->node_depth;
    const int32_t *end = v->node_end, *tb = v->tok_begin;
    const uint8_t *ncls = c->node_class;
    const int32_t nc = c->nc, n = v->n_nodes;
    int64_t visited = 0;
    walk[0] = s;
    for (int32_t i = 0; i < n;) {
        int32_t d = depth[i];
        int32_t t = trans[(size_t)walk[d - 1] * (size_t)nc + ncls[i]];
        visited++;
        if (t < 0) { /* one branch for the common case */
            if (t == ST_UNKNOWN) {
                t = delta_slow(c, walk[d - 1], ncls[i]);
                trans = c->trans; /* may have moved */
            }
            if (t == ST_DEAD) {
                i = end[i];
                continue;
            }
            if (t == ST_ERROR) return IX_ERR_UNSUPPORTED;
        }
        walk[d] = t;
        for (int32_t k = tb[i]; k < tb[i + 1]; k++) set_bit(mask, v->toks[k]);
        i++;
    }
    c->trie_nodes += visited;
    return IX_OK;
}

/* Mask slots are allocated as they fill, doubling up to n_slots. */
static ix_status grow_slots(gcache *c) {
    size_t cap = c->cap_slots ? (size_t)c->cap_slots * 2 : 16;
    if (cap > (size_t)c->n_slots) cap = (size_t)c->n_slots;
    uint32_t *m = ix_realloc(c->masks, cap * c->v->n_words * sizeof *m);
    if (!m) return IX_ERR_NOMEM;
    c->masks = m;
    int32_t *st = ix_realloc(c->slot_state, cap * sizeof *st);
    if (!st) return IX_ERR_NOMEM;
    c->slot_state = st;
    uint64_t *tk = ix_realloc(c->slot_tick, cap * sizeof *tk);
    if (!tk) return IX_ERR_NOMEM;
    c->slot_tick = tk;
    c->cap_slots = (int32_t)cap;
    return IX_OK;
}

ix_status ix_grammar_matcher_fill_mask(ix_grammar_matcher *m, uint32_t *mask, size_t n_words) {
    gcache *c = m->c;
    const size_t nw = c->v->n_words;
    if (n_words < nw)
        return ix_errf(&c->err, IX_ERR_INVALID, "mask of %zu words, the vocabulary needs %zu",
                       n_words, nw);
    memset(mask + nw, 0, (n_words - nw) * sizeof *mask);
    if (m->finished) {
        memset(mask, 0, nw * sizeof *mask);
        return IX_OK;
    }
    ix_status s = maybe_flush(c);
    if (s != IX_OK) return s;
    gstate *st = &c->st[m->state];
    if (st->mask_slot >= 0) {
        c->mask_hits++;
        c->slot_tick[st->mask_slot] = ++c->tick;
        memcpy(mask, c->masks + (size_t)st->mask_slot * nw, nw * sizeof *mask);
        return IX_OK;
    }
    c->mask_misses++;
    if (c->n_slots == 0) {
        if (walk_trie(c, m->state, mask) != IX_OK) return error_status(c);
        return IX_OK;
    }
    int32_t slot;
    if (c->n_slots_used < c->n_slots) {
        if (c->n_slots_used == c->cap_slots && grow_slots(c) != IX_OK) return cache_nomem(c);
        slot = c->n_slots_used++;
    } else { /* least recently used */
        slot = 0;
        for (int32_t i = 1; i < c->n_slots; i++)
            if (c->slot_tick[i] < c->slot_tick[slot]) slot = i;
        if (c->slot_state[slot] >= 0) c->st[c->slot_state[slot]].mask_slot = -1;
    }
    c->slot_state[slot] = -1;
    c->slot_tick[slot] = 0;
    uint32_t *cached = c->masks + (size_t)slot * nw;
    if (walk_trie(c, m->state, cached) != IX_OK) return error_status(c);
    c->slot_state[slot] = m->state;
    c->slot_tick[slot] = ++c->tick;
    c->st[m->state].mask_slot = slot; /* st may have moved during the walk */
    memcpy(mask, cached, nw * sizeof *mask);
    return IX_OK;
}

/* ---- advancing -------------------------------------------------------------------- */

static ix_status run_bytes(ix_grammar_matcher *m, const uint8_t *b, size_t n, int32_t *out) {
    gcache *c = m->c;
    int32_t s = m->state;
    for (size_t i = 0; i < n; i++) {
        s = delta(c, s, c->g->byte_class[b[i]]);
        if (s == ST_ERROR) return error_status(c);
        if (s == ST_DEAD)
            return ix_errf(&c->err, IX_ERR_INVALID, "byte %zu (0x%02X) is not allowed here", i, b[i]);
    }
    *out = s;
    return IX_OK;
}

ix_status ix_grammar_matcher_accept_bytes(ix_grammar_matcher *m, const char *bytes, size_t len) {
    gcache *c = m->c;
    if (m->finished) return ix_errf(&c->err, IX_ERR_INVALID, "the grammar has already ended");
    ix_status s = maybe_flush(c);
    int32_t t;
    if (s == IX_OK) s = run_bytes(m, (const uint8_t *)bytes, len, &t);
    if (s == IX_OK) m->state = t;
    return s;
}

ix_status ix_grammar_matcher_accept(ix_grammar_matcher *m, ix_token id) {
    gcache *c = m->c;
    const ix_grammar_vocab *v = c->v;
    if (id < 0 || id >= v->n_vocab)
        return ix_errf(&c->err, IX_ERR_RANGE, "token %d outside the vocabulary of %d", id, v->n_vocab);
    if (m->finished) return ix_errf(&c->err, IX_ERR_INVALID, "the grammar has already ended");
    if (v->is_eog[id]) {
        if (!c->st[m->state].accepting)
            return ix_errf(&c->err, IX_ERR_INVALID,
                           "end-of-generation token %d before the grammar is complete", id);
        m->finished = true;
        return IX_OK;
    }
    uint32_t len = v->bytes_off[id + 1] - v->bytes_off[id];
    if (len == 0 || len > GRAM_MAX_TOKEN_BYTES)
        return ix_errf(&c->err, IX_ERR_INVALID, "token %d has no text the grammar can match", id);
    ix_status s = maybe_flush(c);
    int32_t t;
    if (s == IX_OK) s = run_bytes(m, (const uint8_t *)v->blob + v->bytes_off[id], len, &t);
    if (s == IX_ERR_INVALID) ix_errf(&c->err, s, "token %d is not allowed here", id);
    if (s == IX_OK) m->state = t;
    return s;
}

bool ix_grammar_matcher_can_end(const ix_grammar_matcher *m) {
    return !m->finished && !m->c->broken && m->c->st[m->state].accepting;
}

bool ix_grammar_matcher_must_end(const ix_grammar_matcher *m) {
    if (m->finished || m->c->broken) return true;
    const gstate *st = &m->c->st[m->state];
    return st->accepting && st->n == 1;
}

bool ix_grammar_matcher_is_finished(const ix_grammar_matcher *m) { return m->finished; }

const char *ix_grammar_matcher_errmsg(const ix_grammar_matcher *m) { return m->c->err.msg; }

/* Breadth-first over byte classes: the first complete state found is at the
 * fewest bytes. States are ids, so visited marks are an array. */
typedef struct bfs_item {
    int32_t state, from, cls, dist;
} bfs_item;

static ix_status mark_room(int32_t **seen, size_t *cap, size_t n) {
    size_t old = *cap;
    if (grow((void **)seen, sizeof **seen, n, cap) != IX_OK) return IX_ERR_NOMEM;
    if (*cap > old) memset(*seen + old, 0, (*cap - old) * sizeof **seen);
    return IX_OK;
}

ix_status ix_grammar_matcher_complete_bytes(ix_grammar_matcher *m, size_t max_len, ix_buf *out) {
    gcache *c = m->c;
    if (m->finished) return IX_OK;
    ix_status s = maybe_flush(c);
    if (s != IX_OK) return s;
    enum { MAX_VISIT = 1 << 16 };
    bfs_item *q = NULL;
    int32_t *seen = NULL; /* (state id) 1 once queued */
    size_t cap_q = 0, cap_seen = 0, head = 0, tail = 0;
    int32_t found = -1;
    if (grow((void **)&q, sizeof *q, 1, &cap_q) != IX_OK ||
        mark_room(&seen, &cap_seen, (size_t)c->n_st) != IX_OK) {
        s = cache_nomem(c);
        goto out;
    }
    q[tail++] = (bfs_item){m->state, -1, -1, 0};
    seen[m->state] = 1;
    while (head < tail) {
        bfs_item it = q[head++];
        if (c->st[it.state].accepting) {
            found = (int32_t)head - 1;
            break;
        }
        if ((size_t)it.dist >= max_len || tail >= MAX_VISIT) continue;
        for (int32_t k = 0; k < c->nc; k++) {
            int32_t t = delta(c, it.state, k);
            if (t == ST_ERROR) {
                s = error_status(c);
                goto out;
            }
            if (t == ST_DEAD) continue;
            if (mark_room(&seen, &cap_seen, (size_t)c->n_st) != IX_OK ||
                grow((void **)&q, sizeof *q, tail + 1, &cap_q) != IX_OK) {
                s = cache_nomem(c);
                goto out;
            }
            if (seen[t]) continue;
            seen[t] = 1;
            q[tail++] = (bfs_item){t, (int32_t)head - 1, k, it.dist + 1};
        }
    }
    if (found < 0) {
        s = ix_errf(&c->err, IX_ERR_NOT_FOUND, "no completion within %zu bytes", max_len);
        goto out;
    }
    size_t n = (size_t)q[found].dist, base = out->len;
    if ((s = ix_buf_reserve(out, n)) != IX_OK) goto out;
    for (int32_t at = found; q[at].from >= 0; at = q[at].from)
        out->data[base + (size_t)q[at].dist - 1] = (char)c->g->class_rep[q[at].cls];
    out->len = base + n;
    out->data[out->len] = '\0';
out:
    ix_free(q);
    ix_free(seen);
    return s;
}

void ix_grammar_matcher_get_stats(const ix_grammar_matcher *m, ix_grammar_matcher_stats *out) {
    const gcache *c = m->c;
    memset(out, 0, sizeof *out);
    out->n_states = c->n_st;
    out->n_stacks = c->n_nodes;
    out->cache_bytes = tables_bytes(c) + (size_t)c->cap_slots * (c->v->n_words * 4 + 12);
    out->mask_hits = c->mask_hits;
    out->mask_misses = c->mask_misses;
    out->trie_nodes = c->trie_nodes;
    out->flushes = c->flushes;
    out->expansions = c->expansions;
}
