/* json_get FILE STEP...: prints one value of the JSON document in FILE, for
 * shell tests. Each STEP goes one level down: an object member by name, an
 * array element by index (digits), or the first array element that is an
 * object whose member KEY is the string VALUE (a step written KEY=VALUE).
 * Numbers print with 17 significant digits, strings raw, true/false/null as
 * such. Exit 0 when the value exists; otherwise says why on stderr and exits 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *step(json_t *v, const char *s) {
    if (json_is_object(v)) return json_object_get(v, s);
    if (!json_is_array(v)) return NULL;
    const char *eq = strchr(s, '=');
    if (!eq) {
        char *end;
        unsigned long i = strtoul(s, &end, 10);
        return *s && !*end ? json_array_get(v, i) : NULL;
    }
    size_t klen = (size_t)(eq - s), i;
    json_t *e;
    json_array_foreach(v, i, e) {
        const char *key;
        json_t *m;
        json_object_foreach(e, key, m) {
            if (strlen(key) == klen && !memcmp(key, s, klen) && json_is_string(m) &&
                !strcmp(json_string_value(m), eq + 1))
                return e;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: json_get FILE [STEP...]\n");
        return 2;
    }
    json_error_t jerr;
    json_t *root = json_load_file(argv[1], 0, &jerr);
    if (!root) {
        fprintf(stderr, "%s: not JSON: line %d column %d: %s\n", argv[1], jerr.line, jerr.column, jerr.text);
        return 1;
    }
    json_t *v = root;
    for (int a = 2; a < argc && v; a++)
        if (!(v = step(v, argv[a]))) fprintf(stderr, "%s: no '%s' at step %d\n", argv[1], argv[a], a - 1);
    int rc = 0;
    if (!v) rc = 1;
    else if (json_is_integer(v)) printf("%lld\n", (long long)json_integer_value(v));
    else if (json_is_real(v)) printf("%.17g\n", json_real_value(v));
    else if (json_is_string(v)) printf("%s\n", json_string_value(v));
    else if (json_is_true(v) || json_is_false(v)) printf("%s\n", json_is_true(v) ? "true" : "false");
    else if (json_is_null(v)) printf("null\n");
    else {
        json_dumpf(v, stdout, JSON_COMPACT);
        printf("\n");
    }
    json_decref(root);
    return rc;
}
