/* bench_json_check FILE [KEY=INTEGER ...]: checks that FILE holds one JSON
 * object from `inferx bench --json`: the model and every figure present,
 * throughputs and bandwidth positive, and each KEY equal to INTEGER. Exit 0
 * when it does; otherwise says why on stderr and exits 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_positive[] = {
    "prefill_tokens_per_s", "decode_tokens_per_s", "mem_bandwidth_gbs",
    "decode_bound_tokens_per_s", "decode_fraction_of_bound",
};
static const char *const k_integers[] = {"threads", "n_prompt", "n_gen", "reps", "decode_bytes",
                                         "size_bytes", "n_params"};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_json_check FILE [KEY=INTEGER ...]\n");
        return 2;
    }
    json_error_t jerr;
    json_t *root = json_load_file(argv[1], 0, &jerr);
    if (!root) {
        fprintf(stderr, "%s: not JSON: line %d column %d: %s\n", argv[1], jerr.line, jerr.column, jerr.text);
        return 1;
    }
    int bad = 0;
    if (!json_is_object(root)) {
        fprintf(stderr, "%s: not a JSON object\n", argv[1]);
        bad = 1;
    } else {
        if (!json_is_string(json_object_get(root, "model"))) {
            fprintf(stderr, "\"model\" is not a string\n");
            bad = 1;
        }
        for (size_t i = 0; i < sizeof k_positive / sizeof *k_positive; i++) {
            json_t *v = json_object_get(root, k_positive[i]);
            if (!json_is_number(v) || !(json_number_value(v) > 0)) {
                fprintf(stderr, "\"%s\" is not a positive number\n", k_positive[i]);
                bad = 1;
            }
        }
        for (size_t i = 0; i < sizeof k_integers / sizeof *k_integers; i++) {
            json_t *v = json_object_get(root, k_integers[i]);
            if (!json_is_integer(v) || json_integer_value(v) <= 0) {
                fprintf(stderr, "\"%s\" is not a positive integer\n", k_integers[i]);
                bad = 1;
            }
        }
        for (int a = 2; a < argc; a++) {
            const char *eq = strchr(argv[a], '=');
            if (!eq) {
                fprintf(stderr, "bad expectation '%s' (want KEY=INTEGER)\n", argv[a]);
                bad = 1;
                continue;
            }
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(eq - argv[a]), argv[a]);
            json_t *v = json_object_get(root, key);
            long long want = strtoll(eq + 1, NULL, 10);
            if (!json_is_integer(v) || json_integer_value(v) != want) {
                fprintf(stderr, "\"%s\" is not %lld\n", key, want);
                bad = 1;
            }
        }
    }
    json_decref(root);
    if (!bad) printf("ok: %s\n", argv[1]);
    return bad;
}
