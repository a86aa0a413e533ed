/* inferx template, internal: the types the interpreter's files share.
 *
 * File map (the public contract is include/inferx/template.h):
 *   lex.c       template text -> tokens: tags, whitespace control (trim_blocks,
 *               lstrip_blocks, "-" and "+" markers), comments, raw blocks,
 *               string escapes, numbers, operators
 *   parse.c     tokens -> AST (tnode), the symbol table of variable names;
 *               filter and test names are resolved here, so an unknown one is
 *               an error at create time, as in Jinja
 *   value.c     the render's arena and memory budget, values, strings with
 *               their data ranges (tspans), the string builder (tbuf), str(),
 *               repr(), tojson, equality and ordering, UTF-8 helpers
 *   eval.c      statements and expressions: scopes, loops, macros, calls,
 *               attribute and item access, operators, limits
 *   builtins.c  the filters, tests, methods and global functions, one table each
 *   template.c  the public API: create, render, apply, results
 *
 * Invariants:
 *   - every string value is valid UTF-8 (template text is checked at create,
 *     JSON strings when a render converts them, and every operation keeps it);
 *   - a render allocates only from its arena (tarena), which charges every
 *     byte against max_memory_bytes and frees everything at the end, so a
 *     value never needs freeing and may share memory with any other value;
 *   - values are immutable once made, except namespaces and loop state;
 *   - the AST's depth is at most max_depth, and every recursion of a render
 *     (evaluation, macro calls, walks over nested values) counts against
 *     max_depth, so the C stack stays bounded. */
#ifndef INFERX_TEMPLATE_INT_H
#define INFERX_TEMPLATE_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferx/core.h"
#include "inferx/template.h"

typedef struct tnode tnode;
typedef struct rctx rctx;

/* ---- arena ------------------------------------------------------------------
 * Bump allocation from chunks, big blocks on their own, heap blocks adopted
 * from string builders; all freed at once. Each byte is charged against
 * limit_bytes; the first failure sticks in `fail` (IX_ERR_NOMEM or
 * IX_ERR_RANGE for the limit). */
typedef struct tarena {
    struct tchunk *chunks; /* newest first */
    struct tbig *big;      /* large and adopted blocks */
    size_t used_bytes, limit_bytes;
    ix_status fail;
} tarena;

void *ix__arena_alloc(tarena *a, size_t n_bytes); /* 16-byte aligned, zeroed; NULL on failure */
bool ix__arena_charge(tarena *a, size_t n_bytes);
void ix__arena_uncharge(tarena *a, size_t n_bytes);
bool ix__arena_adopt(tarena *a, void *heap_block); /* its bytes already charged */
void ix__arena_free(tarena *a);

/* ---- values ----------------------------------------------------------------- */
typedef enum tkind {
    TV_UNDEF = 0, /* Jinja's Undefined: falsy, prints as "", chainable */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* also tuples (flag TL_TUPLE) */
    TV_DICT,
    TV_NS,   /* namespace(): a dict whose attributes may be assigned */
    TV_FUNC, /* builtin, bound method, macro */
    TV_LOOP, /* the `loop` variable */
    TV_MISSING /* an argument not given (never visible to templates) */
} tkind;

/* Strings: where their bytes came from. */
enum { TS_CLEAN = 0, TS_DATA = 1, TS_MIXED = 2 };
/* Lists. */
enum { TL_TUPLE = 1 };

typedef struct tspans { /* the data ranges of a TS_MIXED string */
    size_t n;
    ix_template_span s[];
} tspans;

typedef struct tv {
    uint8_t kind; /* tkind */
    uint8_t flag; /* strings: TS_*; lists: TL_TUPLE */
    size_t n;     /* strings: bytes; lists: items */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;           /* strings (not NUL-terminated) */
        const struct tv *items;  /* lists */
        struct tdict *d;         /* dicts, namespaces */
        const struct tfunc *fn;  /* functions */
        struct tloop *loop;      /* loop */
        const tnode *origin;     /* undefined: the expression that made it (NULL: none) */
    } u;
    const tspans *sp; /* TS_MIXED strings */
} tv;

typedef struct tpair {
    tv k, v;
} tpair;

typedef struct tdict { /* insertion-ordered; small, so lookups are linear */
    size_t n, cap;
    tpair *e;
} tdict;

typedef enum tfn_kind { TF_GLOBAL, TF_METHOD, TF_MACRO, TF_CYCLE } tfn_kind;

typedef struct tframe tframe;

typedef struct tfunc {
    uint8_t kind; /* tfn_kind */
    int id;       /* TF_GLOBAL / TF_METHOD: index into builtins.c's table */
    tv self;      /* TF_METHOD, TF_CYCLE: the receiver */
    const tnode *macro;
    tframe *closure; /* TF_MACRO: the scope it was defined in */
} tfunc;

typedef struct tloop {
    const tv *items; /* (n) what is iterated, after the loop's filter */
    size_t n, i;
} tloop;

static inline tv ix__tv_undef(const tnode *origin) {
    tv v = {.kind = TV_UNDEF};
    v.u.origin = origin;
    return v;
}
static inline tv ix__tv_none(void) { return (tv){.kind = TV_NONE}; }
static inline tv ix__tv_bool(bool b) {
    tv v = {.kind = TV_BOOL};
    v.u.b = b;
    return v;
}
static inline tv ix__tv_int(int64_t i) {
    tv v = {.kind = TV_INT};
    v.u.i = i;
    return v;
}
static inline tv ix__tv_float(double f) {
    tv v = {.kind = TV_FLOAT};
    v.u.f = f;
    return v;
}
static inline tv ix__tv_str(const char *s, size_t n, uint8_t flag) {
    tv v = {.kind = TV_STR, .flag = n ? flag : TS_CLEAN, .n = n};
    v.u.s = n ? s : "";
    return v;
}
static inline tv ix__tv_list(const tv *items, size_t n, uint8_t flag) {
    tv v = {.kind = TV_LIST, .flag = flag, .n = n};
    v.u.items = items;
    return v;
}
static inline tv ix__tv_dict(tdict *d) {
    tv v = {.kind = TV_DICT};
    v.u.d = d;
    return v;
}
static inline tv ix__tv_missing(void) { return (tv){.kind = TV_MISSING}; }

/* Numbers as Python sees them: bool is an int. */
static inline bool ix__tv_is_num(const tv *v) { return v->kind == TV_INT || v->kind == TV_FLOAT || v->kind == TV_BOOL; }
static inline bool ix__tv_is_int(const tv *v) { return v->kind == TV_INT || v->kind == TV_BOOL; }
static inline int64_t ix__tv_int_of(const tv *v) {
    return v->kind == TV_INT ? v->u.i : v->kind == TV_BOOL ? (int64_t)v->u.b : 0;
}
static inline double ix__tv_float_of(const tv *v) {
    return v->kind == TV_FLOAT ? v->u.f : (double)ix__tv_int_of(v);
}

/* ---- the string builder -------------------------------------------------------
 * Bytes plus the data ranges among them. Its heap block is charged to the
 * arena as it grows (charge NULL: the final output, bounded by `limit`). */
typedef struct tbuf {
    char *p;
    size_t len, cap;
    ix_template_span *sp;
    size_t nsp, capsp;
    size_t limit;   /* most bytes (SIZE_MAX: none) */
    tarena *charge; /* memory accounting, or NULL */
    ix_status fail; /* the first failure: NOMEM, RANGE (memory) or TOO_LONG (limit) */
} tbuf;

void ix__buf_init(tbuf *b, tarena *charge, size_t limit);
bool ix__buf_put(tbuf *b, const char *p, size_t n, bool data);
bool ix__buf_putc(tbuf *b, char ch);
bool ix__buf_put_str(tbuf *b, const tv *s); /* with the string's data ranges */
/* The built string as a value owned by the arena; the builder is reset. */
bool ix__buf_take(rctx *c, tbuf *b, tv *out);
void ix__buf_free(tbuf *b);

/* ---- AST --------------------------------------------------------------------- */
typedef enum tnode_kind {
    /* statements */
    N_BODY,     /* kids: statements */
    N_DATA,     /* s, slen: template text */
    N_OUTPUT,   /* {{ a }} */
    N_IF,       /* if a: b else c (c: N_BODY, N_IF for elif, or NULL) */
    N_FOR,      /* for a (N_NAME / N_TUPLE) in b [if e]: c else d */
    N_SET,      /* set a (N_NAME / N_TUPLE / N_ATTR of a namespace) = b */
    N_SET_BLOCK, /* set a: the text of body b, through filters kids (N_FILTER with a == NULL) */
    N_MACRO,    /* macro sym(kids: N_PARAM with default a): body b */
    N_FILTER_BLOCK, /* filter kids: body b */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_CONST,    /* val */
    N_NAME,     /* sym (s, slen: the name) */
    N_ATTR,     /* a.s */
    N_ITEM,     /* a[b] */
    N_SLICE,    /* a[b:c:d] (each may be NULL) */
    N_CALL,     /* a(kids), keywords as N_KWARG */
    N_KWARG,    /* s=a */
    N_FILTER,   /* a | filter fn(kids) */
    N_TEST,     /* a is [not] test fn(kids); op: negated */
    N_BIN,      /* a op b */
    N_NEG,
    N_POS,
    N_NOT,
    N_AND,
    N_OR,
    N_CMP,      /* a then kids: N_OPERAND (op, a) */
    N_OPERAND,
    N_CONCAT,   /* kids joined with ~ */
    N_COND,     /* b if a else c (c may be NULL) */
    N_LIST,     /* kids */
    N_TUPLE,    /* kids */
    N_DICT,     /* kids: N_PAIR (a: b) */
    N_PAIR,
    N_PARAM     /* macro parameter sym, default a */
} tnode_kind;

typedef enum top {
    OP_NONE = 0,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
    OP_LPAREN, OP_RPAREN, OP_LBRACKET, OP_RBRACKET, OP_LBRACE, OP_RBRACE,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE,
    OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
    OP_IN, OP_NOTIN /* comparisons only */
} top;

struct tnode {
    uint8_t kind, op;
    uint16_t depth;
    uint32_t pos; /* byte offset in the (normalized) source, for messages */
    tnode *a, *b, *c, *d, *e;
    tnode **kids;
    uint32_t nkids;
    uint32_t sym;
    int fn; /* N_FILTER / N_TEST: index into builtins.c's table */
    const char *s;
    size_t slen;
    tv val;
};

typedef struct tsym {
    const char *p;
    size_t n;
} tsym;

struct ix_template {
    char *src; /* normalized text */
    size_t len;
    tarena ast; /* nodes, decoded literals */
    tnode *root;
    tsym *syms;       /* (nsyms) the variable names, by symbol id */
    uint32_t nsyms;
    uint32_t *hash;   /* (hash_cap) open addressing over syms: id + 1, 0 empty */
    uint32_t hash_cap;
    uint32_t sym_loop; /* the id of "loop", or UINT32_MAX */
    ix_template_params params;
};

/* The symbol id of a name (UINT32_MAX: the template never names it). */
uint32_t ix__tpl_sym_find(const ix_template *t, const char *name, size_t len);
/* Interns a name; UINT32_MAX when out of memory. */
uint32_t ix__tpl_sym_add(ix_template *t, const char *name, size_t len);

/* ---- lexer ------------------------------------------------------------------ */
typedef enum ttok_kind {
    TK_EOF,
    TK_DATA, /* p, n: text (after whitespace control) */
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING, /* p, n: decoded */
    TK_INT,
    TK_FLOAT,
    TK_OP /* op */
} ttok_kind;

typedef struct ttok {
    uint8_t kind, op;
    uint32_t pos;
    const char *p;
    size_t n;
    int64_t i;
    double f;
} ttok;

/* Tokens of src (decoded strings live in `a`); *toks is an ix_malloc'd
 * array the caller frees, ending with TK_EOF. */
ix_status ix__tpl_lex(const char *src, size_t len, tarena *a, ttok **toks, size_t *n_toks, ix_errbuf *err);
/* 1-based line and column (in characters) of byte offset pos. */
void ix__tpl_linecol(const char *src, size_t len, size_t pos, unsigned *line, unsigned *col);
/* The message of every error: "line L, column C: " (pos SIZE_MAX: none) and fmt. */
void ix__tpl_verr(ix_errbuf *err, const char *src, size_t len, size_t pos, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

/* ---- parser ------------------------------------------------------------------- */
ix_status ix__tpl_parse(ix_template *t, const ttok *toks, size_t n_toks, ix_errbuf *err);

/* ---- render context ------------------------------------------------------------ */
struct rctx {
    const ix_template *t;
    const ix_template_params *p;
    tarena ar;
    tbuf *out; /* where output goes now (the result, or a capture) */
    uint64_t steps, iters;
    uint32_t depth;
    int64_t now_unix_s;
    ix_status st;
    ix_errbuf *err;
};

/* Records the first error (with the node's line and column) and returns false,
 * so that failing paths read `return ix__tpl_fail(c, at, IX_ERR_TYPE, ...)`. */
bool ix__tpl_fail(rctx *c, const tnode *at, ix_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The arena's or a builder's failure as an error. */
bool ix__tpl_fail_alloc(rctx *c, const tnode *at, ix_status why);
bool ix__tpl_enter(rctx *c, const tnode *at); /* depth + 1, checked */
/* Charges work beyond a step (units ~ one step: a scan of 256 bytes or 16
 * entries costs one), so that a scan-heavy template meets max_steps too. */
bool ix__tpl_cost(rctx *c, const tnode *at, uint64_t units);
static inline void ix__tpl_leave(rctx *c) { c->depth--; }
void *ix__tpl_alloc(rctx *c, const tnode *at, size_t n_bytes); /* arena; fails the render on NULL */
/* count items of `size` bytes, overflow-checked. */
void *ix__tpl_alloc_n(rctx *c, const tnode *at, size_t count, size_t size);
/* Room for one more item in an arena array of *n items: doubles *cap
 * (from `first`) into a new array when full, the old one left to the arena. */
bool ix__tpl_grow(rctx *c, const tnode *at, void **items, size_t n, size_t *cap, size_t first, size_t size);

/* Arguments of a call. */
typedef struct tkw {
    const char *name;
    size_t len;
    tv v;
} tkw;
typedef struct targs {
    const tv *pos;
    size_t npos;
    const tkw *kw;
    size_t nkw;
} targs;

/* Binds args to the parameters `names` (n of them) of `what`: out[i] is the
 * value or TV_MISSING. Fails on unknown keywords and surplus positionals. */
bool ix__tpl_bind(rctx *c, const tnode *at, const char *what, const targs *a, const char *const *names, size_t n,
                  tv *out);

/* eval.c, for the builtins. */
bool ix__tpl_getattr(rctx *c, const tnode *at, const tv *obj, const char *name, size_t len, tv *out);
bool ix__tpl_getitem(rctx *c, const tnode *at, const tv *obj, const tv *key, tv *out);
/* Follows a dotted path ("function.name") as Jinja's attribute filters do. */
bool ix__tpl_getpath(rctx *c, const tnode *at, const tv *obj, const tv *path, tv *out);
bool ix__tpl_call(rctx *c, const tnode *at, const tv *fn, const targs *a, tv *out);
/* The items a `for` loop over v visits (dict: keys, string: characters). */
bool ix__tpl_iterate(rctx *c, const tnode *at, const tv *v, const tv **items, size_t *n);
bool ix__tpl_add(rctx *c, const tnode *at, const tv *x, const tv *y, tv *out);
/* fmt % args, Python's printf-style formatting (s, r, d, i, %%). */
bool ix__tpl_percent(rctx *c, const tnode *at, const tv *fmt, const tv *args, tv *out);
/* A render: t with vars into out (see ix_template_render). */
ix_status ix__tpl_run(const ix_template *t, const ix_template_vars *vars, ix_template_result *out, ix_errbuf *err);

/* ---- values (value.c) ---------------------------------------------------------- */
bool ix__tv_truthy(const tv *v);
const char *ix__tv_type(const tv *v); /* Python's name: 'str', 'NoneType', ... */
/* Equality as Python's ==; -1 on error (nesting too deep). */
int ix__tv_eq(rctx *c, const tnode *at, const tv *a, const tv *b);
/* Ordering as Python's <, for sorting and comparisons: *res < 0, 0, > 0;
 * fails on types that do not order. fold: compare strings case-insensitively. */
bool ix__tv_cmp(rctx *c, const tnode *at, const tv *a, const tv *b, bool fold, int *res);
/* Python's str(v) as a value (strings as they are). */
bool ix__tv_to_str(rctx *c, const tnode *at, const tv *v, tv *out);
/* Appends str(v) / repr(v). */
bool ix__tv_put_str(rctx *c, const tnode *at, tbuf *b, const tv *v);
bool ix__tv_put_repr(rctx *c, const tnode *at, tbuf *b, const tv *v);

typedef struct tjson_opts {
    const char *indent; /* NULL: one line */
    size_t indent_len;
    const char *item_sep, *key_sep; /* NULL: Python's defaults */
    size_t item_sep_len, key_sep_len;
    bool ensure_ascii, sort_keys;
} tjson_opts;
bool ix__tv_put_json(rctx *c, const tnode *at, tbuf *b, const tv *v, const tjson_opts *o);
/* Converts JSON (strings borrowed from it, marked as data). */
bool ix__tv_from_json(rctx *c, const struct json_t *j, tv *out);
/* Python's repr of a float, into buf (at least 32 bytes); returns its length. */
size_t ix__fmt_float(double x, char *buf);

/* A substring of s: bytes [off, off + n), keeping its data ranges. */
bool ix__str_sub(rctx *c, const tnode *at, const tv *s, size_t off, size_t n, tv *out);
/* A new string made from s (e.g. upper-cased): data if any of s was. */
static inline uint8_t ix__str_derived(const tv *s) { return s->flag == TS_CLEAN ? TS_CLEAN : TS_DATA; }
/* Makes a string value of n bytes from p, copied into the arena. */
bool ix__str_copy(rctx *c, const tnode *at, const char *p, size_t n, uint8_t flag, tv *out);
static inline bool ix__str_is(const tv *v, const char *lit) {
    size_t n = 0;
    while (lit[n]) n++;
    if (v->kind != TV_STR || v->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (v->u.s[i] != lit[i]) return false;
    return true;
}
bool ix__dict_set(rctx *c, const tnode *at, tdict *d, const tv *k, const tv *v);
const tv *ix__dict_get(rctx *c, const tnode *at, const tdict *d, const tv *k);
const tv *ix__dict_get_str(const tdict *d, const char *name, size_t len);

/* ---- UTF-8 ------------------------------------------------------------------------ */
bool ix__utf8_valid(const char *s, size_t n);
/* Decodes the code point at s[*i] (valid UTF-8 assumed; a stray byte reads as
 * itself) and advances *i. */
uint32_t ix__utf8_next(const char *s, size_t n, size_t *i);
/* Decodes the code point that ends at s[*i] (exclusive) and moves *i back. */
uint32_t ix__utf8_prev(const char *s, size_t *i);
size_t ix__utf8_put(uint32_t cp, char *out); /* 1-4 bytes */
size_t ix__utf8_count(const char *s, size_t n);
bool ix__is_space(uint32_t cp); /* Python's str.isspace() */
/* Simple case mapping of Latin-1, Latin Extended-A, Greek, Cyrillic and
 * fullwidth Latin (Python maps all of Unicode, and ß to "SS"). */
uint32_t ix__cp_upper(uint32_t cp);
uint32_t ix__cp_lower(uint32_t cp);

/* ---- builtins (builtins.c) ---------------------------------------------------------- */
typedef bool (*tfilter_fn)(rctx *c, const tnode *at, const tv *x, const targs *a, tv *out);
typedef bool (*ttest_fn)(rctx *c, const tnode *at, const tv *x, const targs *a, bool *out);
typedef bool (*tmethod_fn)(rctx *c, const tnode *at, const tv *self, const targs *a, tv *out);

int ix__tpl_filter_find(const char *name, size_t len); /* -1: no such filter */
int ix__tpl_test_find(const char *name, size_t len);
bool ix__tpl_apply_filter(rctx *c, const tnode *at, int id, const tv *x, const targs *a, tv *out);
bool ix__tpl_apply_test(rctx *c, const tnode *at, int id, const tv *x, const targs *a, bool *out);
/* The method `name` of values of kind `kind` (-1: none). */
int ix__tpl_method_find(tkind kind, const char *name, size_t len);
bool ix__tpl_call_method(rctx *c, const tnode *at, int id, const tv *self, const targs *a, tv *out);
/* The global functions (range, namespace, dict, raise_exception, strftime_now). */
int ix__tpl_global_count(void);
const char *ix__tpl_global_name(int id);
bool ix__tpl_call_global(rctx *c, const tnode *at, int id, const targs *a, tv *out);
/* The loop variable's attributes. */
bool ix__tpl_loop_attr(rctx *c, const tnode *at, const tv *loop, const char *name, size_t len, tv *out);

#endif /* INFERX_TEMPLATE_INT_H */
