/* The table harness of the template tests: a case is a template, a context
 * (the JSON object a render sees: messages, tools, add_generation_prompt,
 * bos_token, eos_token, now_unix_s, and any other variables) and the
 * expected rendering or error. tpl_check renders one and compares; with
 * IX_TEMPLATE_DUMP=DIR set, tpl_dump writes the table to DIR/NAME.json for
 * `tests/template_ref.py --check`, which renders it with jinja2 (the
 * expectations were checked that way; `differs` says where inferx departs
 * from jinja2 on purpose). Include after cmocka.h. */
#ifndef INFERX_TEMPLATE_TEST_UTIL_H
#define INFERX_TEMPLATE_TEST_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/template.h"

typedef struct tpl_case {
    const char *name;       /* NULL: the template says what it tests */
    const char *tmpl;
    const char *context;    /* JSON object; NULL: the table's default */
    const char *want;       /* the rendering, or NULL when the render fails */
    ix_status want_status;  /* IX_OK, or the failure */
    const char *want_msg;   /* a piece of the error message */
    const char *differs;    /* why jinja2 renders something else (NULL: it agrees) */
} tpl_case;

/* s with C escapes, for messages (static buffer, truncated). */
static const char *tpl_show(const char *s, size_t n) {
    static char buf[4][4096];
    static int which;
    char *o = buf[which++ & 3];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 8 < sizeof buf[0]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n') k += (size_t)sprintf(o + k, "\\n");
        else if (ch == '\t') k += (size_t)sprintf(o + k, "\\t");
        else if (ch == '"' || ch == '\\') k += (size_t)sprintf(o + k, "\\%c", ch);
        else if (ch < 0x20) k += (size_t)sprintf(o + k, "\\x%02x", ch);
        else o[k++] = (char)ch;
    }
    o[k] = 0;
    return o;
}

/* The render's variables from a context object; returns the extra object
 * (the caller decrefs it). */
static json_t *tpl_vars(json_t *ctx, ix_template_vars *v) {
    static const char *const k_named[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
                                          "now_unix_s"};
    json_t *extra = json_deep_copy(ctx);
    for (size_t k = 0; k < sizeof k_named / sizeof k_named[0]; k++) json_object_del(extra, k_named[k]);
    memset(v, 0, sizeof *v);
    v->messages = json_object_get(ctx, "messages");
    v->tools = json_object_get(ctx, "tools");
    v->add_generation_prompt = json_is_true(json_object_get(ctx, "add_generation_prompt"));
    v->bos_token = json_string_value(json_object_get(ctx, "bos_token"));
    v->eos_token = json_string_value(json_object_get(ctx, "eos_token"));
    v->extra = extra;
    v->now_unix_s = (int64_t)json_integer_value(json_object_get(ctx, "now_unix_s"));
    return extra;
}

/* The data ranges are ascending, disjoint, not adjacent, non-empty and inside the text. */
static void tpl_check_spans(const ix_template_result *r) {
    size_t end = 0;
    for (size_t k = 0; k < r->n_data; k++) {
        const ix_template_span *s = &r->data[k];
        assert_true(s->len > 0);
        assert_true(k == 0 || s->off > end);
        assert_true(s->off + s->len <= r->len);
        end = s->off + s->len;
    }
    assert_non_null(r->text);
    assert_int_equal(r->text[r->len], '\0');
}

static void tpl_check(const tpl_case *c, const char *default_ctx) {
    size_t live = ix_mem_live_count();
    const char *ctx_text = c->context ? c->context : default_ctx;
    json_error_t je;
    json_t *ctx = json_loads(ctx_text, 0, &je);
    if (!ctx) fail_msg("%s: bad context JSON: %s", c->name ? c->name : c->tmpl, je.text);
    ix_template_vars v;
    json_t *extra = tpl_vars(ctx, &v);
    ix_template_result r;
    ix_errbuf err = {{0}};
    ix_status st = ix_template_apply(c->tmpl, strlen(c->tmpl), &v, NULL, &r, &err);
    const char *what = c->name ? c->name : tpl_show(c->tmpl, strlen(c->tmpl));
    if (st != c->want_status)
        fail_msg("%s: status %s (%s), want %s", what, ix_status_name(st), err.msg, ix_status_name(c->want_status));
    if (st == IX_OK) {
        tpl_check_spans(&r);
        if (r.len != strlen(c->want) || memcmp(r.text, c->want, r.len))
            fail_msg("%s:\n  rendered \"%s\"\n  want     \"%s\"", what, tpl_show(r.text, r.len),
                     tpl_show(c->want, strlen(c->want)));
    } else {
        assert_null(r.text);
        if (c->want_msg && !strstr(err.msg, c->want_msg))
            fail_msg("%s: message \"%s\" lacks \"%s\"", what, err.msg, c->want_msg);
    }
    ix_template_result_free(&r);
    json_decref(extra);
    json_decref(ctx);
    assert_int_equal(ix_mem_live_count(), live);
}

/* With IX_TEMPLATE_DUMP=DIR: writes the table to DIR/name.json and returns true. */
static bool tpl_dump(const char *name, const tpl_case *cases, size_t n, const char *default_ctx) {
    const char *dir = getenv("IX_TEMPLATE_DUMP");
    if (!dir || !*dir) return false;
    json_t *all = json_array();
    for (size_t k = 0; k < n; k++) {
        const tpl_case *c = &cases[k];
        json_t *ctx = json_loads(c->context ? c->context : default_ctx, 0, NULL);
        json_array_append_new(all, json_pack("{s:s, s:s, s:o, s:o, s:o}", "name", c->name ? c->name : c->tmpl,
                                             "template", c->tmpl, "context", ctx ? ctx : json_null(), "want",
                                             c->want ? json_string(c->want) : json_null(), "differs",
                                             c->differs ? json_string(c->differs) : json_null()));
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    int rc = json_dump_file(all, path, JSON_INDENT(1));
    json_decref(all);
    if (rc) fail_msg("cannot write %s", path);
    printf("%s: %zu cases written to %s\n", name, n, path);
    return true;
}

#endif /* INFERX_TEMPLATE_TEST_UTIL_H */
