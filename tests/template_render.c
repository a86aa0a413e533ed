/* Renders a template with a JSON context, for comparing inferx with
 * jinja2 (tests/template_ref.py does that):
 *   template_render TEMPLATE_FILE CONTEXT_JSON_FILE [--spans]
 * The context holds messages, tools, add_generation_prompt, bos_token,
 * eos_token and any further variables. Prints the output (exit 0) or
 * "error: STATUS: message" (exit 1). --spans prints the data ranges after
 * the text, one "off len" per line after a line "--spans--". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inferx/template.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *p = malloc(cap);
    size_t k;
    while (p && (k = fread(p + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) p = realloc(p, cap *= 2);
    }
    fclose(f);
    *n = len;
    return p;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TEMPLATE CONTEXT.json [--spans]\n", argv[0]);
        return 2;
    }
    size_t n;
    char *src = slurp(argv[1], &n);
    json_error_t je;
    json_t *ctx = json_load_file(argv[2], 0, &je);
    if (!src || !ctx) {
        fprintf(stderr, "cannot read input: %s\n", src ? je.text : argv[1]);
        return 2;
    }
    json_t *extra = json_deep_copy(ctx);
    const char *named[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "now_unix_s"};
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) json_object_del(extra, named[k]);
    ix_template_vars v = {
        .messages = json_object_get(ctx, "messages"),
        .tools = json_object_get(ctx, "tools"),
        .add_generation_prompt = json_is_true(json_object_get(ctx, "add_generation_prompt")),
        .bos_token = json_string_value(json_object_get(ctx, "bos_token")),
        .eos_token = json_string_value(json_object_get(ctx, "eos_token")),
        .extra = extra,
        .now_unix_s = json_integer_value(json_object_get(ctx, "now_unix_s")),
    };
    ix_template_result r;
    ix_errbuf err = {{0}};
    ix_status st = ix_template_apply(src, n, &v, NULL, &r, &err);
    int rc = 0;
    if (st == IX_OK) {
        fwrite(r.text, 1, r.len, stdout);
        if (argc > 3 && !strcmp(argv[3], "--spans")) {
            printf("\n--spans--\n");
            for (size_t k = 0; k < r.n_data; k++) printf("%zu %zu\n", r.data[k].off, r.data[k].len);
        }
    } else {
        printf("error: %s: %s", ix_status_name(st), err.msg);
        rc = 1;
    }
    ix_template_result_free(&r);
    json_decref(extra);
    json_decref(ctx);
    free(src);
    return rc;
}
