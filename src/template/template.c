/* inferx template: the public API. Create checks and normalizes the text
 * (UTF-8, newlines, Jinja's dropped trailing newline), lexes and parses it
 * once; render runs it (eval.c) with the caller's variables; apply does both
 * for a template used once. */
#include <jansson.h>
#include <string.h>

#include "template/template_int.h"

ix_template_params ix_template_default_params(void) {
    ix_template_params p;
    p.max_source_bytes = (size_t)1 << 20;
    p.max_output_bytes = (size_t)16 << 20;
    p.max_memory_bytes = (size_t)256 << 20;
    p.max_loop_iterations = 1000000;
    p.max_steps = 20000000;
    p.max_depth = 200;
    return p;
}

static ix_template_params fill_params(const ix_template_params *in) {
    ix_template_params d = ix_template_default_params(), p = in ? *in : d;
    if (!p.max_source_bytes) p.max_source_bytes = d.max_source_bytes;
    if (!p.max_output_bytes) p.max_output_bytes = d.max_output_bytes;
    if (!p.max_memory_bytes) p.max_memory_bytes = d.max_memory_bytes;
    if (!p.max_loop_iterations) p.max_loop_iterations = d.max_loop_iterations;
    if (!p.max_steps) p.max_steps = d.max_steps;
    if (!p.max_depth) p.max_depth = d.max_depth;
    if (p.max_depth > 10000) p.max_depth = 10000; /* node depths are 16-bit; deeper would only exhaust the stack */
    return p;
}

/* ---- symbols: names interned once, looked up by hash ---------------------------- */

static uint32_t name_hash(const char *p, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

uint32_t ix__tpl_sym_find(const ix_template *t, const char *name, size_t len) {
    if (!t->hash_cap) return UINT32_MAX;
    for (uint32_t i = name_hash(name, len) & (t->hash_cap - 1);; i = (i + 1) & (t->hash_cap - 1)) {
        uint32_t id = t->hash[i];
        if (!id) return UINT32_MAX;
        const tsym *s = &t->syms[id - 1];
        if (s->n == len && memcmp(s->p, name, len) == 0) return id - 1;
    }
}

uint32_t ix__tpl_sym_add(ix_template *t, const char *name, size_t len) {
    uint32_t id = ix__tpl_sym_find(t, name, len);
    if (id != UINT32_MAX) return id;
    if ((t->nsyms & (t->nsyms - 1)) == 0) { /* grow at powers of two */
        tsym *s = ix_realloc(t->syms, (t->nsyms ? (size_t)t->nsyms * 2 : 16) * sizeof *s);
        if (!s) return UINT32_MAX;
        t->syms = s;
    }
    if ((uint64_t)(t->nsyms + 1) * 2 > t->hash_cap) { /* load at most 1/2: rehash into twice the slots */
        uint32_t cap = t->hash_cap ? t->hash_cap * 2 : 64;
        uint32_t *h = ix_calloc(cap, sizeof *h);
        if (!h) return UINT32_MAX;
        for (uint32_t k = 0; k < t->nsyms; k++) {
            uint32_t i = name_hash(t->syms[k].p, t->syms[k].n) & (cap - 1);
            while (h[i]) i = (i + 1) & (cap - 1);
            h[i] = k + 1;
        }
        ix_free(t->hash);
        t->hash = h;
        t->hash_cap = cap;
    }
    id = t->nsyms++;
    t->syms[id] = (tsym){name, len};
    uint32_t i = name_hash(name, len) & (t->hash_cap - 1);
    while (t->hash[i]) i = (i + 1) & (t->hash_cap - 1);
    t->hash[i] = id + 1;
    return id;
}

void ix_template_destroy(ix_template *t) {
    if (!t) return;
    ix__arena_free(&t->ast);
    ix_free(t->hash);
    ix_free(t->syms);
    ix_free(t->src);
    ix_free(t);
}

ix_status ix_template_create(ix_template **out, const char *src, size_t len, const ix_template_params *params,
                             ix_errbuf *err) {
    if (!out || (!src && len)) return ix_errf(err, IX_ERR_INVALID, "ix_template_create: NULL argument");
    *out = NULL;
    ix_template_params p = fill_params(params);
    if (len > p.max_source_bytes)
        return ix_errf(err, IX_ERR_TOO_LONG, "template of %zu bytes is longer than max_source_bytes (%zu)", len,
                       p.max_source_bytes);
    if (len > UINT32_MAX) return ix_errf(err, IX_ERR_TOO_LONG, "template too long");
    if (!ix__utf8_valid(src ? src : "", len)) return ix_errf(err, IX_ERR_UTF8, "template is not valid UTF-8");
    ix_template *t = ix_calloc(1, sizeof *t);
    if (!t) return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    t->params = p;
    t->ast.limit_bytes = SIZE_MAX;
    t->src = ix_malloc(len + 1);
    if (!t->src) {
        ix_template_destroy(t);
        return ix_errf(err, IX_ERR_NOMEM, "out of memory");
    }
    /* "\r\n" and "\r" read as "\n"; one trailing newline goes (jinja2's keep_trailing_newline=False) */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            t->src[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            t->src[n++] = src[i];
        }
    }
    if (n && t->src[n - 1] == '\n') n--;
    t->src[n] = '\0';
    t->len = n;
    ttok *toks = NULL;
    size_t n_toks = 0;
    ix_status st = ix__tpl_lex(t->src, t->len, &t->ast, &toks, &n_toks, err);
    if (st == IX_OK) st = ix__tpl_parse(t, toks, n_toks, err);
    ix_free(toks);
    if (st == IX_OK && t->ast.fail != IX_OK) st = ix_errf(err, IX_ERR_NOMEM, "out of memory");
    t->sym_loop = ix__tpl_sym_find(t, "loop", 4);
    if (st != IX_OK) {
        ix_template_destroy(t);
        return st;
    }
    *out = t;
    return IX_OK;
}

ix_status ix_template_render(const ix_template *t, const ix_template_vars *vars, ix_template_result *out,
                             ix_errbuf *err) {
    if (out) memset(out, 0, sizeof *out);
    if (!t || !vars || !out) return ix_errf(err, IX_ERR_INVALID, "ix_template_render: NULL argument");
    if (!json_is_array(vars->messages)) return ix_errf(err, IX_ERR_INVALID, "messages must be a JSON array");
    if (vars->tools && !json_is_array(vars->tools) && !json_is_null(vars->tools))
        return ix_errf(err, IX_ERR_INVALID, "tools must be a JSON array or null");
    return ix__tpl_run(t, vars, out, err);
}

ix_status ix_template_apply(const char *src, size_t len, const ix_template_vars *vars,
                            const ix_template_params *params, ix_template_result *out, ix_errbuf *err) {
    if (out) memset(out, 0, sizeof *out);
    ix_template *t = NULL;
    ix_status st = ix_template_create(&t, src, len, params, err);
    if (st == IX_OK) st = ix_template_render(t, vars, out, err);
    ix_template_destroy(t);
    return st;
}

void ix_template_result_free(ix_template_result *r) {
    if (!r) return;
    ix_free(r->text);
    ix_free(r->data);
    memset(r, 0, sizeof *r);
}

bool ix_template_is_data(const ix_template_result *r, size_t off, size_t len) {
    if (!r || !r->n_data) return false;
    size_t lo = 0, hi = r->n_data; /* the last range starting at or before off */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->data[mid].off <= off) lo = mid;
        else hi = mid;
    }
    const ix_template_span *s = &r->data[lo];
    return s->off <= off && off - s->off <= s->len && len <= s->len - (off - s->off);
}

bool ix_template_mentions(const ix_template *t, const char *name) {
    return t && name && ix__tpl_sym_find(t, name, strlen(name)) != UINT32_MAX;
}
