/* inferx command line: option tables (cli.h). One row per option drives the
 * parser, the validation of its value (type and range, with a message that
 * says what was expected) and its lines in --help, so that the three cannot
 * drift apart. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

#define HELP_COLUMN 31 /* where the help text starts */

/* A decimal integer, optionally with a K/M/G suffix (binary multiples);
 * false if it is not one or does not fit 64 bits. */
static bool parse_count(const char *s, bool suffix, uint64_t *out) {
    if (!s || *s < '0' || *s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    unsigned shift = 0;
    if (suffix && *end && !end[1]) {
        switch (*end) {
        case 'K': case 'k': shift = 10; end++; break;
        case 'M': case 'm': shift = 20; end++; break;
        case 'G': case 'g': shift = 30; end++; break;
        default: break;
        }
    }
    if (*end || v > (UINT64_MAX >> shift)) return false;
    *out = (uint64_t)v << shift;
    return true;
}

static bool parse_number(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

const char *ix_cli_set_kv_dtype(void *dst, const char *value) {
    return ix_kv_dtype_parse(value, dst) ? NULL : "expects f16, bf16, q8_0, fp8_e4m3, q4_0 or f32";
}

static const char *expected(ix_cli_opt_type t) {
    switch (t) {
    case IX_CLI_OPT_I32:
    case IX_CLI_OPT_U16:
    case IX_CLI_OPT_U64: return "an integer";
    case IX_CLI_OPT_SIZE: return "a byte count (K, M or G suffix allowed)";
    case IX_CLI_OPT_F64: return "a number";
    case IX_CLI_OPT_FLAG:
    case IX_CLI_OPT_STR:
    case IX_CLI_OPT_FN: break;
    }
    return "a value";
}

/* Sets o from value; prints what is wrong and returns false if it is bad. */
static bool set_value(const char *cmd, const ix_cli_opt *o, const char *value) {
    if (o->type == IX_CLI_OPT_STR) {
        *(const char **)o->dst = value;
        return true;
    }
    if (o->type == IX_CLI_OPT_FN) {
        const char *why = o->fn(o->dst, value);
        if (why) fprintf(stderr, "inferx %s: %s %s\n", cmd, o->name, why); /* no echo: it may be a secret */
        return !why;
    }
    double v = 0;
    uint64_t u = 0; /* integers keep all their bits here; v is for the range check */
    bool ok;
    if (o->type == IX_CLI_OPT_F64) {
        ok = parse_number(value, &v);
    } else {
        ok = parse_count(value, o->type == IX_CLI_OPT_SIZE, &u);
        v = (double)u;
    }
    if (!ok || v < o->min || v > o->max) {
        fprintf(stderr, "inferx %s: %s expects %s in [%.15g, %.15g], got '%s'\n", cmd, o->name, expected(o->type),
                o->min, o->max, value);
        return false;
    }
    switch (o->type) {
    case IX_CLI_OPT_I32: *(int32_t *)o->dst = (int32_t)u; break;
    case IX_CLI_OPT_U16: *(uint16_t *)o->dst = (uint16_t)u; break;
    case IX_CLI_OPT_U64: *(uint64_t *)o->dst = u; break;
    case IX_CLI_OPT_SIZE: *(size_t *)o->dst = (size_t)u; break;
    case IX_CLI_OPT_F64: *(double *)o->dst = v; break;
    case IX_CLI_OPT_FLAG:
    case IX_CLI_OPT_STR:
    case IX_CLI_OPT_FN: break;
    }
    return true;
}

int ix_cli_parse_one(const char *cmd, const ix_cli_opt *opts, size_t n_opts, const char *a, const char *v,
                     bool *used_value) {
    *used_value = false;
    const ix_cli_opt *o = NULL;
    for (size_t k = 0; k < n_opts && !o; k++)
        if (!strcmp(a, opts[k].name) || (opts[k].alias && !strcmp(a, opts[k].alias))) o = &opts[k];
    if (!o) return 1;
    if (o->type == IX_CLI_OPT_FLAG) {
        *(bool *)o->dst = true;
        return IX_CLI_OK;
    }
    if (!v) {
        fprintf(stderr, "inferx %s: %s needs a value (see --help)\n", cmd, a);
        return IX_CLI_USAGE;
    }
    *used_value = true;
    return set_value(cmd, o, v) ? IX_CLI_OK : IX_CLI_USAGE;
}

const char *ix_cli_set_spec_kind(void *dst, const char *value) {
    return ix_spec_kind_parse(value, dst) == IX_OK ? NULL : "expects none, ngram, draft or medusa";
}

const char *ix_cli_set_on_off(void *dst, const char *value) {
    bool on = !strcmp(value, "on");
    if (!on && strcmp(value, "off")) return "expects on or off";
    *(bool *)dst = on;
    return NULL;
}

void ix_cli_spec_resolve(ix_spec_params *sp) {
    if (sp->draft_model && sp->kind == IX_SPEC_NONE) sp->kind = IX_SPEC_DRAFT;
    if (sp->medusa_heads && sp->kind == IX_SPEC_NONE) sp->kind = IX_SPEC_MEDUSA;
}

int ix_cli_parse_opts(const char *cmd, const ix_cli_opt *opts, size_t n_opts, int argc, char **argv) {
    return ix_cli_parse_opts_pos(cmd, opts, n_opts, argc, argv, NULL, 0, NULL);
}

int ix_cli_parse_opts_pos(const char *cmd, const ix_cli_opt *opts, size_t n_opts, int argc, char **argv,
                          const char **pos, int max_pos, int *n_pos) {
    if (n_pos) *n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return IX_CLI_HELP;
        if (max_pos > 0 && (a[0] != '-' || !a[1])) { /* an operand ("-" alone is one too) */
            if (*n_pos == max_pos) {
                fprintf(stderr, "inferx %s: unexpected argument '%s' (see --help)\n", cmd, a);
                return IX_CLI_USAGE;
            }
            pos[(*n_pos)++] = a;
            continue;
        }
        bool used = false;
        int rc = ix_cli_parse_one(cmd, opts, n_opts, a, i + 1 < argc ? argv[i + 1] : NULL, &used);
        if (rc == 1) {
            fprintf(stderr, "inferx %s: unknown option '%s' (see --help)\n", cmd, a);
            return IX_CLI_USAGE;
        }
        if (rc != IX_CLI_OK) return IX_CLI_USAGE;
        i += used;
    }
    return IX_CLI_OK;
}

/* The current value of a numeric option, as --help shows its default. */
static void format_default(const ix_cli_opt *o, char *buf, size_t size) {
    switch (o->type) {
    case IX_CLI_OPT_I32: snprintf(buf, size, "%d", *(const int32_t *)o->dst); break;
    case IX_CLI_OPT_U16: snprintf(buf, size, "%u", (unsigned)*(const uint16_t *)o->dst); break;
    case IX_CLI_OPT_U64: snprintf(buf, size, "%llu", (unsigned long long)*(const uint64_t *)o->dst); break;
    case IX_CLI_OPT_SIZE: snprintf(buf, size, "%zu", *(const size_t *)o->dst); break;
    case IX_CLI_OPT_F64: snprintf(buf, size, "%g", *(const double *)o->dst); break;
    case IX_CLI_OPT_STR: snprintf(buf, size, "%s", *(const char *const *)o->dst ? *(const char *const *)o->dst : ""); break;
    case IX_CLI_OPT_FLAG: snprintf(buf, size, "%s", *(const bool *)o->dst ? "on" : "off"); break;
    case IX_CLI_OPT_FN: buf[0] = '\0'; break;
    }
}

void ix_cli_print_opts(FILE *f, const ix_cli_opt *opts, size_t n_opts) {
    for (size_t k = 0; k < n_opts; k++) {
        const ix_cli_opt *o = &opts[k];
        int col = fprintf(f, "  %s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "", o->name,
                          *o->metavar ? " " : "", o->metavar);
        if (col >= HELP_COLUMN - 1) {
            fputc('\n', f);
            col = 0;
        }
        fprintf(f, "%*s", HELP_COLUMN - col, "");
        /* the help, its continuation lines indented to the column */
        for (const char *h = o->help; *h;) {
            const char *nl = strchr(h, '\n');
            size_t len = nl ? (size_t)(nl - h) : strlen(h);
            fwrite(h, 1, len, f);
            if (!nl) break;
            fprintf(f, "\n%*s", HELP_COLUMN, "");
            h = nl + 1;
        }
        if (o->show_default) {
            char d[64];
            format_default(o, d, sizeof d);
            fprintf(f, " (default %s)", d);
        }
        fputc('\n', f);
    }
}
