/* inferx template: the parser. Tokens -> AST, following jinja2's parser
 * (jinja2/parser.py) rule for rule, so precedence and the odd corners (a
 * test's bare argument, `x if c` without else, filters binding tighter than
 * arithmetic) come out the same:
 *
 *   expression := or ("if" or ("else" expression)?)*
 *   or := and ("or" and)*          and := not ("and" not)*
 *   not := "not" not | compare     compare := math1 (cmp-op math1)*
 *   math1 := concat (("+"|"-") concat)*     concat := math2 ("~" math2)*
 *   math2 := pow (("*"|"/"|"//"|"%") pow)*  pow := unary ("**" unary)*
 *   unary := ("-"|"+") unary | primary postfix* ; then filters, tests, calls
 *
 * Filters and tests are looked up here: an unknown one fails the template at
 * create time (IX_ERR_UNSUPPORTED), as Jinja fails at compile time. Every
 * node's depth is bounded by max_depth, so evaluating the tree cannot exhaust
 * the stack. */
#include <stdio.h>
#include <string.h>

#include "template/template_int.h"

typedef struct parser {
    ix_template *t;
    const ttok *tk;
    size_t n, i;
    uint32_t depth, loops; /* recursion; enclosing for loops (for break/continue) */
    ix_errbuf *err;
    ix_status st;
} parser;

__attribute__((format(printf, 4, 5))) static void *fail(parser *P, size_t pos, ix_status st, const char *fmt, ...) {
    if (P->st != IX_OK) return NULL;
    P->st = st;
    va_list ap;
    va_start(ap, fmt);
    ix__tpl_verr(P->err, P->t->src, P->t->len, pos, fmt, ap);
    va_end(ap);
    return NULL;
}

static const ttok *cur(const parser *P) { return &P->tk[P->i]; }
static const ttok *peek(const parser *P, size_t k) { return &P->tk[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void next(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}

static bool tok_name(const ttok *t, const char *name) {
    return t->kind == TK_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}
static bool tok_op(const ttok *t, top op) { return t->kind == TK_OP && t->op == op; }

/* What a token looks like, for messages. */
static const char *describe(const ttok *t, char *buf, size_t size) {
    static const char *const k_ops[] = {
        [OP_ADD] = "+",      [OP_SUB] = "-",      [OP_MUL] = "*",      [OP_DIV] = "/",        [OP_FLOORDIV] = "//",
        [OP_MOD] = "%",      [OP_POW] = "**",     [OP_TILDE] = "~",    [OP_LPAREN] = "(",     [OP_RPAREN] = ")",
        [OP_LBRACKET] = "[", [OP_RBRACKET] = "]", [OP_LBRACE] = "{",   [OP_RBRACE] = "}",     [OP_EQ] = "==",
        [OP_NE] = "!=",      [OP_LT] = "<",       [OP_LE] = "<=",      [OP_GT] = ">",         [OP_GE] = ">=",
        [OP_ASSIGN] = "=",   [OP_DOT] = ".",      [OP_COLON] = ":",    [OP_PIPE] = "|",       [OP_COMMA] = ",",
        [OP_SEMICOLON] = ";",
    };
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    case TK_NAME: snprintf(buf, size, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    default: snprintf(buf, size, "'%s'", t->op < IX_ARRAY_LEN(k_ops) && k_ops[t->op] ? k_ops[t->op] : "?"); return buf;
    }
}

static void *unexpected(parser *P, const char *wanted) {
    char buf[64];
    const ttok *t = cur(P);
    if (wanted) return fail(P, t->pos, IX_ERR_FORMAT, "expected %s, got %s", wanted, describe(t, buf, sizeof buf));
    return fail(P, t->pos, IX_ERR_FORMAT, "unexpected %s", describe(t, buf, sizeof buf));
}

static bool expect_op(parser *P, top op, const char *what) {
    if (!tok_op(cur(P), op)) return unexpected(P, what) != NULL;
    next(P);
    return true;
}
static bool expect_kind(parser *P, ttok_kind kind, const char *what) {
    if (cur(P)->kind != kind) return unexpected(P, what) != NULL;
    next(P);
    return true;
}

static tnode *mk(parser *P, tnode_kind kind, size_t pos) {
    tnode *n = ix__arena_alloc(&P->t->ast, sizeof *n);
    if (!n) return fail(P, pos, IX_ERR_NOMEM, "out of memory");
    n->kind = (uint8_t)kind;
    n->pos = (uint32_t)pos;
    n->fn = -1;
    return n;
}

/* Sets n's depth from its children; fails when past max_depth. */
static tnode *fin(parser *P, tnode *n) {
    if (!n) return NULL;
    unsigned d = 0;
    tnode *ch[5] = {n->a, n->b, n->c, n->d, n->e};
    for (int k = 0; k < 5; k++)
        if (ch[k] && ch[k]->depth > d) d = ch[k]->depth;
    for (uint32_t k = 0; k < n->nkids; k++)
        if (n->kids[k]->depth > d) d = n->kids[k]->depth;
    if (d + 1 > P->t->params.max_depth)
        return fail(P, n->pos, IX_ERR_FORMAT, "nested too deeply (max_depth %u)", (unsigned)P->t->params.max_depth);
    n->depth = (uint16_t)(d + 1);
    return n;
}

/* A growable list of nodes, copied into the arena when done. */
typedef struct nlist {
    tnode **v;
    size_t n, cap;
} nlist;

static bool nl_push(parser *P, nlist *l, tnode *x) {
    if (!x) return false;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        tnode **v = ix_realloc(l->v, cap * sizeof *v);
        if (!v) return fail(P, x->pos, IX_ERR_NOMEM, "out of memory") != NULL;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}

/* Moves the list into n->kids and frees it; n NULL: just frees. */
static tnode *nl_into(parser *P, nlist *l, tnode *n) {
    if (n && l->n) {
        if (l->n > UINT32_MAX) {
            ix_free(l->v);
            return fail(P, n->pos, IX_ERR_TOO_LONG, "too many items");
        }
        n->kids = ix__arena_alloc(&P->t->ast, l->n * sizeof *n->kids);
        if (!n->kids) {
            ix_free(l->v);
            return fail(P, n->pos, IX_ERR_NOMEM, "out of memory");
        }
        memcpy(n->kids, l->v, l->n * sizeof *n->kids);
        n->nkids = (uint32_t)l->n;
    }
    ix_free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
    return n ? fin(P, n) : NULL;
}

static uint32_t intern(parser *P, const char *p, size_t n) {
    uint32_t id = ix__tpl_sym_add(P->t, p, n);
    if (id == UINT32_MAX) {
        fail(P, cur(P)->pos, IX_ERR_NOMEM, "out of memory");
        return 0;
    }
    return id;
}

static tnode *mk_name(parser *P, const ttok *tok) {
    tnode *n = mk(P, N_NAME, tok->pos);
    if (!n) return NULL;
    n->s = tok->p;
    n->slen = tok->n;
    n->sym = intern(P, tok->p, tok->n);
    return fin(P, n);
}

static tnode *mk2(parser *P, tnode_kind kind, uint8_t op, size_t pos, tnode *a, tnode *b) {
    if (!a || (!b && kind != N_NEG && kind != N_POS && kind != N_NOT)) return NULL;
    tnode *n = mk(P, kind, pos);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return fin(P, n);
}

static tnode *parse_expression(parser *P, bool with_condexpr);
static tnode *parse_unary(parser *P, bool with_filter);
static tnode *parse_primary(parser *P);
static tnode *parse_postfix(parser *P, tnode *n);
static tnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens);

/* ---- expressions --------------------------------------------------------------- */

static tnode *parse_condexpr(parser *P) {
    tnode *e1 = parse_expression(P, false);
    while (e1 && tok_name(cur(P), "if")) {
        size_t pos = cur(P)->pos;
        next(P);
        tnode *test = parse_expression(P, false), *e3 = NULL;
        if (!test) return NULL;
        if (tok_name(cur(P), "else")) {
            next(P);
            if (!(e3 = parse_condexpr(P))) return NULL;
        }
        tnode *n = mk(P, N_COND, pos);
        if (!n) return NULL;
        n->a = test;
        n->b = e1;
        n->c = e3;
        e1 = fin(P, n);
    }
    return e1;
}

static tnode *parse_not(parser *P);

static tnode *parse_and(parser *P) {
    tnode *l = parse_not(P);
    while (l && tok_name(cur(P), "and")) {
        size_t pos = cur(P)->pos;
        next(P);
        l = mk2(P, N_AND, 0, pos, l, parse_not(P));
    }
    return l;
}

static tnode *parse_or(parser *P) {
    tnode *l = parse_and(P);
    while (l && tok_name(cur(P), "or")) {
        size_t pos = cur(P)->pos;
        next(P);
        l = mk2(P, N_OR, 0, pos, l, parse_and(P));
    }
    return l;
}

static tnode *parse_expression(parser *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static tnode *parse_math1(parser *P);

static tnode *parse_compare(parser *P) {
    size_t pos = cur(P)->pos;
    tnode *first = parse_math1(P);
    if (!first) return NULL;
    nlist ops = {0};
    for (;;) {
        const ttok *t = cur(P);
        top op = OP_NONE;
        if (t->kind == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
                                 t->op == OP_GT || t->op == OP_GE)) {
            op = (top)t->op;
            next(P);
        } else if (tok_name(t, "in")) {
            op = OP_IN;
            next(P);
        } else if (tok_name(t, "not") && tok_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        } else {
            break;
        }
        tnode *operand = mk(P, N_OPERAND, t->pos);
        if (!operand || !(operand->a = parse_math1(P)) || !nl_push(P, &ops, fin(P, operand))) {
            nl_into(P, &ops, NULL);
            return NULL;
        }
        operand->op = (uint8_t)op;
    }
    if (!ops.n) return first;
    tnode *n = mk(P, N_CMP, pos);
    if (n) n->a = first;
    return nl_into(P, &ops, n);
}

static tnode *parse_not(parser *P) {
    if (tok_name(cur(P), "not")) {
        size_t pos = cur(P)->pos;
        next(P);
        return mk2(P, N_NOT, 0, pos, parse_not(P), NULL);
    }
    return parse_compare(P);
}

static tnode *parse_pow(parser *P) {
    tnode *l = parse_unary(P, true);
    while (l && tok_op(cur(P), OP_POW)) {
        size_t pos = cur(P)->pos;
        next(P);
        l = mk2(P, N_BIN, OP_POW, pos, l, parse_unary(P, true));
    }
    return l;
}

static tnode *parse_math2(parser *P) {
    tnode *l = parse_pow(P);
    while (l && cur(P)->kind == TK_OP &&
           (cur(P)->op == OP_MUL || cur(P)->op == OP_DIV || cur(P)->op == OP_FLOORDIV || cur(P)->op == OP_MOD)) {
        uint8_t op = cur(P)->op;
        size_t pos = cur(P)->pos;
        next(P);
        l = mk2(P, N_BIN, op, pos, l, parse_pow(P));
    }
    return l;
}

static tnode *parse_concat(parser *P) {
    size_t pos = cur(P)->pos;
    tnode *first = parse_math2(P);
    if (!first || !tok_op(cur(P), OP_TILDE)) return first;
    nlist args = {0};
    nl_push(P, &args, first);
    while (tok_op(cur(P), OP_TILDE)) {
        next(P);
        if (!nl_push(P, &args, parse_math2(P))) return nl_into(P, &args, NULL);
    }
    return nl_into(P, &args, mk(P, N_CONCAT, pos));
}

static tnode *parse_math1(parser *P) {
    tnode *l = parse_concat(P);
    while (l && cur(P)->kind == TK_OP && (cur(P)->op == OP_ADD || cur(P)->op == OP_SUB)) {
        uint8_t op = cur(P)->op;
        size_t pos = cur(P)->pos;
        next(P);
        l = mk2(P, N_BIN, op, pos, l, parse_concat(P));
    }
    return l;
}

/* Call arguments after '(' up to and including ')', into n->kids. */
static tnode *parse_args(parser *P, tnode *n) {
    nlist args = {0};
    bool kw_seen = false;
    while (!tok_op(cur(P), OP_RPAREN)) {
        if (args.n) {
            if (!expect_op(P, OP_COMMA, "',' or ')'")) return nl_into(P, &args, NULL);
            if (tok_op(cur(P), OP_RPAREN)) break;
        }
        const ttok *t = cur(P);
        if (tok_op(t, OP_MUL) || tok_op(t, OP_POW)) {
            nl_into(P, &args, NULL);
            return fail(P, t->pos, IX_ERR_UNSUPPORTED, "*args and **kwargs in calls are not supported");
        }
        tnode *arg;
        if (t->kind == TK_NAME && tok_op(peek(P, 1), OP_ASSIGN)) {
            next(P);
            next(P);
            arg = mk(P, N_KWARG, t->pos);
            if (arg) {
                arg->s = t->p;
                arg->slen = t->n;
                arg->a = parse_expression(P, true);
                arg = arg->a ? fin(P, arg) : NULL;
            }
            kw_seen = true;
        } else {
            if (kw_seen) {
                nl_into(P, &args, NULL);
                return fail(P, t->pos, IX_ERR_FORMAT, "positional argument after a keyword argument");
            }
            arg = parse_expression(P, true);
        }
        if (!nl_push(P, &args, arg)) return nl_into(P, &args, NULL);
    }
    next(P); /* ')' */
    return nl_into(P, &args, n);
}

/* callee(...), at '(' (positioned at the callee, where messages point). */
static tnode *parse_call(parser *P, tnode *callee) {
    tnode *call = mk(P, N_CALL, callee->pos);
    next(P);
    if (!call) return NULL;
    call->a = callee;
    return parse_args(P, call);
}

/* A (possibly dotted) filter or test name. */
static bool dotted_name(parser *P, char *buf, size_t size, size_t *len) {
    size_t k = 0;
    for (;;) {
        const ttok *t = cur(P);
        if (t->kind != TK_NAME) return unexpected(P, "a name") != NULL;
        if (k + t->n + 1 >= size) return fail(P, t->pos, IX_ERR_FORMAT, "name too long") != NULL;
        memcpy(buf + k, t->p, t->n);
        k += t->n;
        next(P);
        if (!tok_op(cur(P), OP_DOT) || peek(P, 1)->kind != TK_NAME) break;
        buf[k++] = '.';
        next(P);
    }
    buf[k] = 0;
    *len = k;
    return true;
}

/* A filter (N_FILTER) or test (N_TEST) by name, applied to operand: known
 * ones only, as jinja2 checks when it compiles. */
static tnode *named(parser *P, tnode_kind kind, tnode *operand) {
    size_t pos = cur(P)->pos;
    char name[128];
    size_t len = 0;
    if (!dotted_name(P, name, sizeof name, &len)) return NULL;
    int id = kind == N_FILTER ? ix__tpl_filter_find(name, len) : ix__tpl_test_find(name, len);
    if (id < 0) return fail(P, pos, IX_ERR_UNSUPPORTED, "unknown %s '%s'", kind == N_FILTER ? "filter" : "test", name);
    tnode *n = mk(P, kind, pos);
    if (!n) return NULL;
    n->a = operand;
    n->fn = id;
    return n;
}

/* After '|': one filter applied to operand (NULL in filter blocks). */
static tnode *parse_filter(parser *P, tnode *operand) {
    tnode *n = named(P, N_FILTER, operand);
    if (n && tok_op(cur(P), OP_LPAREN)) {
        next(P);
        return parse_args(P, n);
    }
    return fin(P, n);
}

static tnode *parse_test(parser *P, tnode *operand) {
    bool negated = tok_name(cur(P), "not");
    if (negated) next(P);
    tnode *n = named(P, N_TEST, operand);
    if (!n) return NULL;
    n->op = negated;
    const ttok *t = cur(P);
    if (tok_op(t, OP_LPAREN)) {
        next(P);
        return parse_args(P, n);
    }
    /* jinja2: a single bare argument, as in `x is divisibleby 3` */
    bool starts_arg = t->kind == TK_NAME || t->kind == TK_STRING || t->kind == TK_INT || t->kind == TK_FLOAT ||
                      tok_op(t, OP_LBRACKET) || tok_op(t, OP_LBRACE);
    if (starts_arg && !tok_name(t, "else") && !tok_name(t, "or") && !tok_name(t, "and")) {
        if (tok_name(t, "is")) return fail(P, t->pos, IX_ERR_FORMAT, "tests cannot be chained with 'is'");
        tnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        n->kids = ix__arena_alloc(&P->t->ast, sizeof *n->kids);
        if (!n->kids) return fail(P, n->pos, IX_ERR_NOMEM, "out of memory");
        n->kids[0] = arg;
        n->nkids = 1;
    }
    return fin(P, n);
}

static tnode *parse_filter_expr(parser *P, tnode *n) {
    while (n) {
        if (tok_op(cur(P), OP_PIPE)) {
            next(P);
            n = parse_filter(P, n);
        } else if (tok_name(cur(P), "is")) {
            next(P);
            n = parse_test(P, n);
        } else if (tok_op(cur(P), OP_LPAREN)) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

/* One subscript inside [...]: an expression or a slice. */
static tnode *parse_subscribed(parser *P, tnode *obj, size_t pos) {
    tnode *args[3] = {NULL, NULL, NULL};
    if (tok_op(cur(P), OP_COLON)) {
        next(P);
    } else {
        tnode *e = parse_expression(P, true);
        if (!e) return NULL;
        if (!tok_op(cur(P), OP_COLON)) return mk2(P, N_ITEM, 0, pos, obj, e);
        next(P);
        args[0] = e;
    }
    const ttok *t = cur(P);
    if (!tok_op(t, OP_COLON) && !tok_op(t, OP_RBRACKET) && !tok_op(t, OP_COMMA) && !(args[1] = parse_expression(P, true)))
        return NULL;
    if (tok_op(cur(P), OP_COLON)) {
        next(P);
        t = cur(P);
        if (!tok_op(t, OP_RBRACKET) && !tok_op(t, OP_COMMA) && !(args[2] = parse_expression(P, true))) return NULL;
    }
    tnode *n = mk(P, N_SLICE, pos);
    if (!n) return NULL;
    n->a = obj;
    n->b = args[0];
    n->c = args[1];
    n->d = args[2];
    return fin(P, n);
}

static tnode *parse_postfix(parser *P, tnode *n) {
    while (n) {
        const ttok *t = cur(P);
        if (tok_op(t, OP_DOT)) {
            next(P);
            const ttok *a = cur(P);
            if (a->kind == TK_NAME) {
                tnode *x = mk(P, N_ATTR, a->pos);
                if (!x) return NULL;
                x->a = n;
                x->s = a->p;
                x->slen = a->n;
                next(P);
                n = fin(P, x);
            } else if (a->kind == TK_INT) {
                tnode *k = mk(P, N_CONST, a->pos);
                if (!k) return NULL;
                k->val = ix__tv_int(a->i);
                next(P);
                n = mk2(P, N_ITEM, 0, a->pos, n, fin(P, k));
            } else {
                return unexpected(P, "an attribute name");
            }
        } else if (tok_op(t, OP_LBRACKET)) {
            next(P);
            n = parse_subscribed(P, n, t->pos);
            if (n && tok_op(cur(P), OP_COMMA))
                return fail(P, cur(P)->pos, IX_ERR_UNSUPPORTED, "tuple subscripts are not supported");
            if (n && !expect_op(P, OP_RBRACKET, "']'")) return NULL;
        } else if (tok_op(t, OP_LPAREN)) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

static tnode *parse_unary(parser *P, bool with_filter) {
    const ttok *t = cur(P);
    if (++P->depth > P->t->params.max_depth) {
        P->depth--;
        return fail(P, t->pos, IX_ERR_FORMAT, "nested too deeply (max_depth %u)", (unsigned)P->t->params.max_depth);
    }
    tnode *n;
    if (tok_op(t, OP_SUB) || tok_op(t, OP_ADD)) {
        next(P);
        n = mk2(P, tok_op(t, OP_SUB) ? N_NEG : N_POS, 0, t->pos, parse_unary(P, false), NULL);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static tnode *mk_const(parser *P, size_t pos, tv v) {
    tnode *n = mk(P, N_CONST, pos);
    if (!n) return NULL;
    n->val = v;
    return fin(P, n);
}

static tnode *parse_list(parser *P, size_t pos, bool dict) {
    nlist items = {0};
    top close = dict ? OP_RBRACE : OP_RBRACKET;
    while (!tok_op(cur(P), close)) {
        if (items.n) {
            if (!expect_op(P, OP_COMMA, dict ? "',' or '}'" : "',' or ']'")) return nl_into(P, &items, NULL);
            if (tok_op(cur(P), close)) break;
        }
        tnode *item = parse_expression(P, true);
        if (item && dict) {
            size_t ppos = item->pos;
            if (!expect_op(P, OP_COLON, "':'")) return nl_into(P, &items, NULL);
            item = mk2(P, N_PAIR, 0, ppos, item, parse_expression(P, true));
        }
        if (!nl_push(P, &items, item)) return nl_into(P, &items, NULL);
    }
    next(P);
    return nl_into(P, &items, mk(P, dict ? N_DICT : N_LIST, pos));
}

static tnode *parse_primary(parser *P) {
    const ttok *t = cur(P);
    switch (t->kind) {
    case TK_NAME:
        next(P);
        if (tok_name(t, "true") || tok_name(t, "True")) return mk_const(P, t->pos, ix__tv_bool(true));
        if (tok_name(t, "false") || tok_name(t, "False")) return mk_const(P, t->pos, ix__tv_bool(false));
        if (tok_name(t, "none") || tok_name(t, "None")) return mk_const(P, t->pos, ix__tv_none());
        return mk_name(P, t);
    case TK_STRING: {
        next(P);
        if (cur(P)->kind != TK_STRING) return mk_const(P, t->pos, ix__tv_str(t->p, t->n, TS_CLEAN));
        size_t total = t->n; /* adjacent literals are one string */
        for (size_t k = P->i; P->tk[k].kind == TK_STRING; k++) total += P->tk[k].n;
        char *s = ix__arena_alloc(&P->t->ast, total + 1);
        if (!s) return fail(P, t->pos, IX_ERR_NOMEM, "out of memory");
        memcpy(s, t->p, t->n);
        size_t o = t->n;
        while (cur(P)->kind == TK_STRING) {
            memcpy(s + o, cur(P)->p, cur(P)->n);
            o += cur(P)->n;
            next(P);
        }
        return mk_const(P, t->pos, ix__tv_str(s, total, TS_CLEAN));
    }
    case TK_INT: next(P); return mk_const(P, t->pos, ix__tv_int(t->i));
    case TK_FLOAT: next(P); return mk_const(P, t->pos, ix__tv_float(t->f));
    case TK_OP:
        if (t->op == OP_LPAREN) {
            next(P);
            tnode *n = parse_tuple(P, false, true, NULL, true);
            if (n && !expect_op(P, OP_RPAREN, "')'")) return NULL;
            return n;
        }
        if (t->op == OP_LBRACKET || t->op == OP_LBRACE) {
            next(P);
            return parse_list(P, t->pos, t->op == OP_LBRACE);
        }
        break;
    default: break;
    }
    return unexpected(P, NULL);
}

static bool tuple_end(const parser *P, const char *extra_end) {
    const ttok *t = cur(P);
    return t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || t->kind == TK_EOF || tok_op(t, OP_RPAREN) ||
           (extra_end && tok_name(t, extra_end));
}

static tnode *parse_tuple(parser *P, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    size_t pos = cur(P)->pos;
    nlist items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !expect_op(P, OP_COMMA, "','")) return nl_into(P, &items, NULL);
        if (tuple_end(P, extra_end)) break;
        tnode *item = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
        if (!nl_push(P, &items, item)) return nl_into(P, &items, NULL);
        if (tok_op(cur(P), OP_COMMA))
            is_tuple = true;
        else
            break;
    }
    if (!is_tuple) {
        tnode *one = items.n ? items.v[0] : NULL;
        nl_into(P, &items, NULL);
        if (one) return one;
        if (!explicit_parens) return unexpected(P, "an expression");
    }
    return nl_into(P, &items, mk(P, N_TUPLE, pos));
}

/* ---- statements ------------------------------------------------------------------ */

static tnode *parse_body(parser *P, const char *const *ends, size_t n_ends, size_t *which, size_t open_pos,
                         const char *open_name);

static bool end_tag(parser *P) { return expect_kind(P, TK_BLOCK_END, "'%}'"); }

/* A `for` or `set` target: a name, a tuple of names, or (set) ns.attr. */
static tnode *parse_target(parser *P, bool with_namespace, const char *extra_end) {
    const ttok *t = cur(P);
    if (with_namespace && t->kind == TK_NAME && tok_op(peek(P, 1), OP_DOT) && peek(P, 2)->kind == TK_NAME) {
        tnode *ns = mk_name(P, t);
        next(P);
        next(P);
        const ttok *a = cur(P);
        next(P);
        tnode *n = mk(P, N_ATTR, a->pos);
        if (!n || !ns) return NULL;
        n->a = ns;
        n->s = a->p;
        n->slen = a->n;
        return fin(P, n);
    }
    tnode *target = parse_tuple(P, true, true, extra_end, false);
    if (!target) return NULL;
    if (target->kind == N_NAME) return target;
    if (target->kind == N_TUPLE && target->nkids) {
        for (uint32_t k = 0; k < target->nkids; k++)
            if (target->kids[k]->kind != N_NAME)
                return fail(P, target->kids[k]->pos, IX_ERR_FORMAT, "can only assign to names");
        return target;
    }
    return fail(P, target->pos, IX_ERR_FORMAT, "can only assign to names");
}

static tnode *parse_if(parser *P, size_t pos) {
    static const char *const k_ends[] = {"elif", "else", "endif"};
    tnode *n = mk(P, N_IF, pos);
    nlist arms = {0};
    if (!n) return NULL;
    for (;;) {
        tnode *arm = mk(P, N_PAIR, cur(P)->pos);
        if (!arm || !(arm->a = parse_tuple(P, false, false, NULL, false)) || !end_tag(P)) return nl_into(P, &arms, NULL);
        size_t which;
        arm->b = parse_body(P, k_ends, 3, &which, pos, "if");
        if (!nl_push(P, &arms, fin(P, arm))) return nl_into(P, &arms, NULL);
        if (which == 0) continue; /* elif */
        if (which == 1) {
            if (!end_tag(P) || !(n->c = parse_body(P, k_ends + 2, 1, &which, pos, "if"))) return nl_into(P, &arms, NULL);
        }
        break;
    }
    if (!end_tag(P)) return nl_into(P, &arms, NULL);
    return nl_into(P, &arms, n);
}

static tnode *parse_for(parser *P, size_t pos) {
    static const char *const k_ends[] = {"endfor", "else"};
    tnode *n = mk(P, N_FOR, pos);
    if (!n || !(n->a = parse_target(P, false, "in"))) return NULL;
    if (!tok_name(cur(P), "in")) return unexpected(P, "'in'");
    next(P);
    if (!(n->b = parse_tuple(P, false, false, "recursive", false))) return NULL;
    if (tok_name(cur(P), "if")) {
        next(P);
        if (!(n->e = parse_expression(P, true))) return NULL;
    }
    if (tok_name(cur(P), "recursive")) return fail(P, cur(P)->pos, IX_ERR_UNSUPPORTED, "recursive loops are not supported");
    if (!end_tag(P)) return NULL;
    size_t which;
    P->loops++;
    n->c = parse_body(P, k_ends, 2, &which, pos, "for");
    P->loops--;
    if (!n->c) return NULL;
    if (which == 1 && (!end_tag(P) || !(n->d = parse_body(P, k_ends, 1, &which, pos, "for")))) return NULL;
    if (!end_tag(P)) return NULL;
    return fin(P, n);
}

/* Filters of a filter block or block set (no operand), up to '%}'. */
static bool parse_filter_chain(parser *P, nlist *chain, bool first_needs_pipe) {
    bool first = true;
    while (cur(P)->kind != TK_BLOCK_END) {
        if (!first || first_needs_pipe)
            if (!expect_op(P, OP_PIPE, "'|' or '%}'")) return false;
        first = false;
        if (!nl_push(P, chain, parse_filter(P, NULL))) return false;
    }
    return true;
}

static tnode *parse_set(parser *P, size_t pos) {
    tnode *target = parse_target(P, true, NULL);
    if (!target) return NULL;
    if (tok_op(cur(P), OP_ASSIGN)) {
        next(P);
        tnode *n = mk(P, N_SET, pos);
        if (!n) return NULL;
        n->a = target;
        if (!(n->b = parse_tuple(P, false, true, NULL, false)) || !end_tag(P)) return NULL;
        return fin(P, n);
    }
    static const char *const k_ends[] = {"endset"};
    nlist chain = {0};
    tnode *n = mk(P, N_SET_BLOCK, pos);
    if (!n || !parse_filter_chain(P, &chain, true) || !end_tag(P)) return nl_into(P, &chain, NULL);
    n->a = target;
    size_t which;
    if (!(n->b = parse_body(P, k_ends, 1, &which, pos, "set")) || !end_tag(P)) return nl_into(P, &chain, NULL);
    return nl_into(P, &chain, n);
}

static tnode *parse_macro(parser *P, size_t pos) {
    static const char *const k_ends[] = {"endmacro"};
    const ttok *name = cur(P);
    if (name->kind != TK_NAME) return unexpected(P, "a macro name");
    next(P);
    tnode *n = mk(P, N_MACRO, pos);
    if (!n || !expect_op(P, OP_LPAREN, "'('")) return NULL;
    n->s = name->p;
    n->slen = name->n;
    n->sym = intern(P, name->p, name->n);
    nlist params = {0};
    bool defaults = false;
    while (!tok_op(cur(P), OP_RPAREN)) {
        if (params.n && !expect_op(P, OP_COMMA, "',' or ')'")) return nl_into(P, &params, NULL);
        const ttok *t = cur(P);
        if (t->kind != TK_NAME) {
            unexpected(P, "a parameter name");
            return nl_into(P, &params, NULL);
        }
        next(P);
        tnode *param = mk(P, N_PARAM, t->pos);
        if (!param) return nl_into(P, &params, NULL);
        param->s = t->p;
        param->slen = t->n;
        param->sym = intern(P, t->p, t->n);
        if (tok_op(cur(P), OP_ASSIGN)) {
            next(P);
            if (!(param->a = parse_expression(P, true))) return nl_into(P, &params, NULL);
            defaults = true;
        } else if (defaults) {
            fail(P, t->pos, IX_ERR_FORMAT, "parameter without a default after one with a default");
            return nl_into(P, &params, NULL);
        }
        if (!nl_push(P, &params, fin(P, param))) return nl_into(P, &params, NULL);
    }
    next(P);
    if (!end_tag(P)) return nl_into(P, &params, NULL);
    uint32_t loops = P->loops;
    P->loops = 0;
    size_t which;
    n->b = parse_body(P, k_ends, 1, &which, pos, "macro");
    P->loops = loops;
    if (!n->b || !end_tag(P)) return nl_into(P, &params, NULL);
    return nl_into(P, &params, n);
}

static tnode *parse_filter_block(parser *P, size_t pos) {
    static const char *const k_ends[] = {"endfilter"};
    nlist chain = {0};
    tnode *n = mk(P, N_FILTER_BLOCK, pos);
    if (!n || !parse_filter_chain(P, &chain, false) || !end_tag(P)) return nl_into(P, &chain, NULL);
    if (!chain.n) {
        unexpected(P, "a filter name");
        return nl_into(P, &chain, NULL);
    }
    size_t which;
    if (!(n->b = parse_body(P, k_ends, 1, &which, pos, "filter")) || !end_tag(P)) return nl_into(P, &chain, NULL);
    return nl_into(P, &chain, n);
}

/* After "{%": one statement, through its closing tag. */
static tnode *parse_statement(parser *P, size_t pos) {
    static const char *const k_unsupported[] = {"include", "import", "from", "extends", "block", "call", "with",
                                                "autoescape", "do", "trans", "pluralize"};
    const ttok *t = cur(P);
    if (t->kind != TK_NAME) return unexpected(P, "a statement name");
    next(P);
    if (tok_name(t, "if")) return parse_if(P, pos);
    if (tok_name(t, "for")) return parse_for(P, pos);
    if (tok_name(t, "set")) return parse_set(P, pos);
    if (tok_name(t, "macro")) return parse_macro(P, pos);
    if (tok_name(t, "filter")) return parse_filter_block(P, pos);
    if (tok_name(t, "break") || tok_name(t, "continue")) {
        if (!P->loops) return fail(P, t->pos, IX_ERR_FORMAT, "'%.*s' outside a loop", (int)t->n, t->p);
        tnode *n = mk(P, tok_name(t, "break") ? N_BREAK : N_CONTINUE, pos);
        return n && end_tag(P) ? fin(P, n) : NULL;
    }
    if (tok_name(t, "generation")) { /* Hugging Face's assistant-mask marker: just its body */
        static const char *const k_ends[] = {"endgeneration"};
        size_t which;
        if (!end_tag(P)) return NULL;
        tnode *b = parse_body(P, k_ends, 1, &which, pos, "generation");
        return b && end_tag(P) ? b : NULL;
    }
    static const char *const k_closers[] = {"elif", "else", "endif", "endfor", "endset", "endmacro", "endfilter",
                                            "endgeneration", "endraw"};
    for (size_t k = 0; k < IX_ARRAY_LEN(k_closers); k++)
        if (tok_name(t, k_closers[k])) return fail(P, t->pos, IX_ERR_FORMAT, "unexpected '%s'", k_closers[k]);
    for (size_t k = 0; k < IX_ARRAY_LEN(k_unsupported); k++)
        if (tok_name(t, k_unsupported[k]))
            return fail(P, t->pos, IX_ERR_UNSUPPORTED, "'%s' is not supported (chat templates are sandboxed)",
                        k_unsupported[k]);
    return fail(P, t->pos, IX_ERR_FORMAT, "unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
}

/* Statements up to a "{% name" with name in ends (consumed, the rest of that
 * tag is left; *which says which) or, with no ends, the end of the template. */
static tnode *parse_body(parser *P, const char *const *ends, size_t n_ends, size_t *which, size_t open_pos,
                         const char *open_name) {
    tnode *body = mk(P, N_BODY, cur(P)->pos);
    if (!body) return NULL;
    if (++P->depth > P->t->params.max_depth) {
        P->depth--;
        return fail(P, open_pos, IX_ERR_FORMAT, "nested too deeply (max_depth %u)", (unsigned)P->t->params.max_depth);
    }
    nlist stmts = {0};
    for (;;) {
        const ttok *t = cur(P);
        tnode *s = NULL;
        if (t->kind == TK_EOF) {
            if (n_ends) {
                fail(P, open_pos, IX_ERR_FORMAT, "this '%s' has no '{%% end%s %%}'", open_name, open_name);
                break;
            }
            P->depth--;
            return nl_into(P, &stmts, body);
        }
        if (t->kind == TK_DATA) {
            next(P);
            if ((s = mk(P, N_DATA, t->pos))) {
                s->s = t->p;
                s->slen = t->n;
                s = fin(P, s);
            }
        } else if (t->kind == TK_VAR_BEGIN) {
            next(P);
            tnode *e = parse_tuple(P, false, true, NULL, false);
            if (e && expect_kind(P, TK_VAR_END, "'}}'") && (s = mk(P, N_OUTPUT, t->pos))) {
                s->a = e;
                s = fin(P, s);
            }
        } else if (t->kind == TK_BLOCK_BEGIN) {
            next(P);
            const ttok *name = cur(P);
            for (size_t k = 0; k < n_ends; k++)
                if (tok_name(name, ends[k])) {
                    next(P);
                    *which = k;
                    P->depth--;
                    return nl_into(P, &stmts, body);
                }
            s = parse_statement(P, t->pos);
        } else {
            unexpected(P, NULL);
        }
        if (!nl_push(P, &stmts, s)) break;
    }
    P->depth--;
    return nl_into(P, &stmts, NULL);
}

ix_status ix__tpl_parse(ix_template *t, const ttok *toks, size_t n_toks, ix_errbuf *err) {
    parser P = {.t = t, .tk = toks, .n = n_toks, .err = err, .st = IX_OK};
    size_t which;
    t->root = parse_body(&P, NULL, 0, &which, 0, NULL);
    if (P.st == IX_OK && !t->root) P.st = IX_ERR_INTERNAL;
    return P.st;
}
