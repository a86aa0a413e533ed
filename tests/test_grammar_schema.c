/* grammar, JSON Schema: each supported keyword (documents it must accept and
 * refuse), each refusal (status and message), strict mode, whitespace; then
 * over the real vocabularies of ../shared/vocab (skipped without them):
 * masks against a brute-force check, tokenized documents accepted token by
 * token, and random walks over the allowed tokens whose documents must parse
 * with jansson and validate against the schema (a small validator of the
 * supported subset below). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar_test_util.h"
#include "inferx/grammar.h"
#include "inferx/tokenizer.h"

/* ---- a validator of the supported subset ------------------------------------------- */

static json_t *resolve(json_t *root, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *cur = root;
    for (const char *p = ref + 1; *p && cur;) {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~') c = *++p == '0' ? '~' : '/';
            tok[n++] = c;
        }
        tok[n] = '\0';
        cur = json_is_array(cur) ? json_array_get(cur, strtoul(tok, NULL, 10)) : json_object_get(cur, tok);
    }
    return cur;
}

/* POSIX ERE has no \d: the test patterns use it outside classes only. */
static bool regex_ok(const char *re, const char *s) {
    char ere[512];
    size_t n = 0;
    for (const char *p = re; *p && n + 6 < sizeof ere; p++) {
        if (p[0] == '\\' && p[1] == 'd') {
            memcpy(ere + n, "[0-9]", 5);
            n += 5;
            p++;
        } else {
            ere[n++] = *p;
        }
    }
    ere[n] = '\0';
    regex_t r;
    if (regcomp(&r, ere, REG_EXTENDED | REG_NOSUB)) fail_msg("bad test regex %s", re);
    bool ok = regexec(&r, s, 0, NULL, 0) == 0;
    regfree(&r);
    return ok;
}

#define RE_DATE "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
#define RE_TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define RE_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"

static bool format_ok(const char *f, const char *s) {
    if (!strcmp(f, "date")) return regex_ok("^" RE_DATE "$", s);
    if (!strcmp(f, "time")) return regex_ok("^" RE_TIME "$", s);
    if (!strcmp(f, "date-time")) return regex_ok("^" RE_DATE "T" RE_TIME "$", s);
    if (!strcmp(f, "uuid"))
        return regex_ok("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", s);
    if (!strcmp(f, "email")) return regex_ok("^[^@ ]+@([a-zA-Z0-9-]+\\.)+[a-zA-Z]{2,}$", s);
    if (!strcmp(f, "ipv4")) return regex_ok("^(" RE_OCTET "\\.){3}" RE_OCTET "$", s);
    fail_msg("format %s", f);
    return false;
}

static bool has_type(json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer")) return json_is_integer(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    return json_is_null(v);
}

static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* Why v fails s, or NULL. Minimum / maximum: only the sign (docs/grammar.md). */
static const char *invalid(json_t *root, json_t *s, json_t *v) {
    if (json_is_true(s)) return NULL;
    if (!json_is_object(s)) return "schema";
    json_t *k;
    if ((k = json_object_get(s, "$ref"))) return invalid(root, resolve(root, json_string_value(k)), v);
    if ((k = json_object_get(s, "anyOf")) || (k = json_object_get(s, "oneOf"))) {
        size_t n_ok = 0;
        for (size_t i = 0; i < json_array_size(k); i++) n_ok += !invalid(root, json_array_get(k, i), v);
        if (!n_ok || (json_object_get(s, "oneOf") && n_ok != 1)) return "anyOf/oneOf";
        return NULL;
    }
    if ((k = json_object_get(s, "allOf")))
        for (size_t i = 0; i < json_array_size(k); i++) {
            const char *why = invalid(root, json_array_get(k, i), v);
            if (why) return why;
        }
    if ((k = json_object_get(s, "const")) && !json_equal(k, v)) return "const";
    if ((k = json_object_get(s, "enum"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(k); i++) any = any || json_equal(json_array_get(k, i), v);
        if (!any) return "enum";
    }
    if ((k = json_object_get(s, "type"))) {
        bool any = false;
        if (json_is_string(k)) any = has_type(v, json_string_value(k));
        for (size_t i = 0; i < json_array_size(k); i++) any = any || has_type(v, json_string_value(json_array_get(k, i)));
        if (!any) return "type";
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        json_t *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return "required";
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val) {
            json_t *ps = props ? json_object_get(props, key) : NULL;
            const char *why = ps ? invalid(root, ps, val) : json_is_false(addl) ? "additionalProperties"
                              : json_is_object(addl)        ? invalid(root, addl, val)
                                                            : NULL;
            if (why) return why;
        }
    }
    if (json_is_array(v)) {
        json_t *items = json_object_get(s, "items");
        for (size_t i = 0; items && i < json_array_size(v); i++) {
            const char *why = invalid(root, items, json_array_get(v, i));
            if (why) return why;
        }
        if ((k = json_object_get(s, "minItems")) && json_array_size(v) < (size_t)json_integer_value(k)) return "minItems";
        if ((k = json_object_get(s, "maxItems")) && json_array_size(v) > (size_t)json_integer_value(k)) return "maxItems";
    }
    if (json_is_string(v)) {
        size_t n = utf8_chars(json_string_value(v), json_string_length(v));
        if ((k = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(k)) return "minLength";
        if ((k = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(k)) return "maxLength";
        if ((k = json_object_get(s, "pattern")) && !regex_ok(json_string_value(k), json_string_value(v))) return "pattern";
        if ((k = json_object_get(s, "format")) && !format_ok(json_string_value(k), json_string_value(v))) return "format";
    }
    /* bounds: exact for integers; for other numbers only the sign (docs/grammar.md) */
    json_t *type = json_object_get(s, "type");
    bool integer = json_is_string(type) && !strcmp(json_string_value(type), "integer");
    if (json_is_number(v)) {
        double x = json_number_value(v);
        if ((k = json_object_get(s, "minimum")) && (integer ? x < json_number_value(k) : json_number_value(k) >= 0 && x < 0))
            return "minimum";
        if ((k = json_object_get(s, "exclusiveMinimum")) && (integer ? x <= json_number_value(k) : json_number_value(k) >= 0 && x < 0))
            return "exclusiveMinimum";
        if (integer && (k = json_object_get(s, "maximum")) && x > json_number_value(k)) return "maximum";
        if (integer && (k = json_object_get(s, "exclusiveMaximum")) && x >= json_number_value(k)) return "exclusiveMaximum";
    }
    return NULL;
}

/* ---- keyword tests on a byte vocabulary ------------------------------------------------ */

static ix_grammar *from_schema(const char *schema, unsigned flags) {
    ix_grammar *g;
    ix_errbuf err = {{0}};
    if (ix_grammar_from_json_schema(&g, schema, strlen(schema), flags, &err) != IX_OK)
        fail_msg("schema %s: %s", schema, err.msg);
    return g;
}

static bool doc_matches(const ix_grammar *g, const ix_grammar_vocab *v, const char *doc) {
    ix_grammar_matcher *m;
    if (ix_grammar_matcher_create(&m, g, v, NULL, NULL) != IX_OK) fail_msg("matcher");
    bool ok = ix_grammar_matcher_accept_bytes(m, doc, strlen(doc)) == IX_OK && ix_grammar_matcher_can_end(m);
    ix_grammar_matcher_destroy(m);
    return ok;
}

typedef struct scase {
    const char *schema;
    unsigned flags;
    const char *ok[8];
    const char *bad[8];
} scase;

static const scase k_schemas[] = {
    {"{\"type\":\"string\"}", 0, {"\"\"", "\"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\"", "\"\xC3\xA9\xF0\x9F\x98\x80\"", " \"x\""},
     {"\"\\x\"", "\"a", "\"\x01\"", "\"\\ud83d\"", "\"\\ude00\"", "'a'", "\"\\u12\""}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", 0, {"\"ab\"", "\"abc\"", "\"\\n\xC3\xA9\""},
     {"\"a\"", "\"abcd\"", "\"\""}},
    {"{\"type\":\"string\",\"format\":\"date\"}", 0, {"\"2024-02-29\""}, {"\"2024-13-01\"", "\"24-01-01\"", "\"2024-1-01\""}},
    {"{\"type\":\"string\",\"format\":\"time\"}", 0, {"\"23:59:59Z\"", "\"00:00:00.123+05:30\""}, {"\"24:00:00Z\"", "\"12:00:00\"", "\"12:60:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}", 0, {"\"2024-01-31T12:30:00Z\""}, {"\"2024-01-31 12:30:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", 0, {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567e89b12d3a456426614174000\""}},
    {"{\"type\":\"string\",\"format\":\"email\"}", 0, {"\"a.b+c@example.co.uk\""}, {"\"a@b\"", "\"@b.com\"", "\"a b@c.com\""}},
    {"{\"type\":\"string\",\"format\":\"ipv4\"}", 0, {"\"192.168.0.255\"", "\"0.0.0.0\""}, {"\"256.1.1.1\"", "\"1.2.3\"", "\"01.2.3.4\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}", 0, {"\"AB-123\""}, {"\"AB-\"", "\"ab-1\"", "\"ABC-1\""}},
    {"{\"type\":\"string\",\"pattern\":\"a\\\"b|c\\\\\\\\d|(x|y)?z*\"}", 0, {"\"a\\\"b\"", "\"c\\\\d\"", "\"xzz\"", "\"\""},
     {"\"a\"b\"", "\"c\\d\""}},
    {"{\"type\":\"string\",\"pattern\":\"^[^a-z\\\\s]\\\\w.$\"}", 0, {"\"A_\xC3\xA9\"", "\"\\\"9\\\\\""}, {"\"a_x\"", "\" _x\"", "\"A_\\n\""}},
    {"{\"enum\":[\"a\",1,2.5,true,null,{\"k\":[1]},[1,\"x\"],0.1]}", 0,
     {"\"a\"", "1", "2.5", "true", "null", "{\"k\":[1]}", "[1,\"x\"]", "0.1"}, {"\"b\"", "2", "{\"k\": [1]}", "false"}},
    {"{\"const\":\"x\\\"y\"}", 0, {"\"x\\\"y\""}, {"\"x\"", "\"x\\\"y\\\"\""}},
    {"{\"type\":\"string\",\"enum\":[\"a\",1,\"b\"]}", 0, {"\"a\"", "\"b\""}, {"1"}},
    {"{\"type\":\"integer\"}", 0, {"0", "-3", "1234567890123456"}, {"1.5", "01", "-", "+1", "12345678901234567", "1e3"}},
    {"{\"type\":\"integer\",\"minimum\":0}", 0, {"0", "7"}, {"-3"}},
    {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":120}", 0, {"3", "45", "99", "100", "120"},
     {"2", "121", "-5", "0", "1000", "03"}},
    {"{\"type\":\"integer\",\"minimum\":-15,\"exclusiveMaximum\":7}", 0, {"-15", "-1", "0", "6", "-9"},
     {"-16", "7", "-0", "-20", "10"}},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0.5,\"maximum\":1e300}", 0, {"1", "9999999999999999"}, {"0", "-1"}},
    {"{\"type\":\"integer\",\"maximum\":-1}", 0, {"-1", "-9999"}, {"0", "1"}},
    {"{\"type\":\"integer\",\"minimum\":1234,\"maximum\":56789}", 0, {"1234", "1299", "9999", "10000", "56789", "56700"},
     {"1233", "56790", "999", "57000", "100000"}},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", 0, {"0.5", "0", "1e-3"}, {"-0.5"}},
    {"{\"type\":\"number\"}", 0, {"1.5e10", "-0.0", "3", "2E-07"}, {".5", "1.", "+1", "1e", "0x1", "1e123"}},
    {"{\"type\":\"boolean\"}", 0, {"true", "false"}, {"True", "1"}},
    {"{\"type\":\"null\"}", 0, {"null"}, {"nul", "None"}},
    {"{\"type\":[\"string\",\"null\"],\"maxLength\":1}", 0, {"\"a\"", "null"}, {"\"ab\"", "1"}},
    {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}},"
     "\"required\":[\"b\"]}",
     0, {"{\"b\":1}", "{\"a\":1,\"b\":2}", "{\"a\":1,\"b\":2,\"c\":3}", "{\"b\":2,\"c\":3}"},
     {"{}", "{\"a\":1}", "{\"c\":3,\"b\":2}", "{\"b\":1,}", "{\"b\":1,\"x\":2}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", 0, {"{}", "{\"a\":1}"}, {"{\"b\":1}"}},
    {"{\"type\":\"object\",\"additionalProperties\":true}", 0, {"{}", "{\"x\": [1, {}], \"y\": null}"}, {"[]", "{\"x\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
     "\"additionalProperties\":{\"type\":\"string\"}}",
     0, {"{\"a\":1}", "{\"a\":1,\"zz\":\"s\",\"y\":\"t\"}"}, {"{\"a\":1,\"zz\":2}", "{\"zz\":\"s\"}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", 0, {"{}", "{\"a\":1,\"b\":2}"}, {"{\"a\":\"x\"}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", 0, {"[1]", "[1, 2]"},
     {"[]", "[1,2,3]", "[\"a\"]"}},
    {"{\"type\":\"array\",\"maxItems\":0}", 0, {"[]"}, {"[1]"}},
    {"{\"type\":\"array\",\"minItems\":2}", 0, {"[1,\"a\"]", "[{},[],null]"}, {"[1]"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", 0,
     {"{\n  \"a\": 1\n}", "{ \"a\" : 1 }", "{\"a\":1}\n", "\n{\"a\":\n\t\t1}"}, {"{   \"a\": 1}", "{\"a\":1}\n\n", "{\n\n\"a\":1}"}},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", IX_GRAMMAR_SCHEMA_COMPACT,
     {"{\"a\":1}"}, {"{ \"a\":1}", "{\"a\":1} ", " {\"a\":1}"}},
    {"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
     "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\",\"kids\"],\"additionalProperties\":false}},"
     "\"$ref\":\"#/$defs/node\"}",
     0, {"{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[]}]}]}"},
     {"{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2}]}"}},
    {"{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},"
     "\"required\":[\"next\"],\"additionalProperties\":false}",
     0, {"{\"next\":null}", "{\"next\":{\"next\":null}}"}, {"{\"next\":{}}"}},
    {"{\"definitions\":{\"a/b\":{\"type\":\"integer\"},\"c~d\":{\"type\":\"boolean\"}},\"type\":\"array\","
     "\"items\":{\"anyOf\":[{\"$ref\":\"#/definitions/a~1b\"},{\"$ref\":\"#/definitions/c~0d\"}]}}",
     0, {"[1,true,2]"}, {"[\"x\"]"}},
    {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"title\":\"t\",\"description\":\"d\"}", 0, {"1", "\"s\""}, {"null"}},
    {"{\"allOf\":[{\"type\":\"boolean\"}]}", 0, {"true"}, {"1"}},
    {"true", 0, {"1", "{\"a\":[null]}", "\"x\""}, {"{a}"}},
    {"{}", 0, {"[]", "-1.5"}, {"nope"}},
};

static void test_keywords(void **state) {
    (void)state;
    ix_grammar_vocab *v = gtest_byte_vocab();
    for (size_t i = 0; i < IX_ARRAY_LEN(k_schemas); i++) {
        const scase *c = &k_schemas[i];
        ix_grammar *g = from_schema(c->schema, c->flags);
        json_t *root = json_loads(c->schema, JSON_DECODE_ANY, NULL);
        assert_non_null(root);
        for (size_t k = 0; k < 8 && c->ok[k]; k++) {
            if (!doc_matches(g, v, c->ok[k])) fail_msg("schema %zu: should accept %s\n%s", i, c->ok[k], c->schema);
            /* and what it accepts is valid: the validator agrees */
            json_t *doc = json_loads(c->ok[k], JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            assert_non_null(doc);
            const char *why = invalid(root, root, doc);
            if (why) fail_msg("schema %zu: %s accepted but invalid (%s)", i, c->ok[k], why);
            json_decref(doc);
        }
        for (size_t k = 0; k < 8 && c->bad[k]; k++)
            if (doc_matches(g, v, c->bad[k])) fail_msg("schema %zu: should refuse %s\n%s", i, c->bad[k], c->schema);
        json_decref(root);
        ix_grammar_destroy(g);
    }
    ix_grammar_vocab_destroy(v);
}

typedef struct rcase {
    const char *schema;
    unsigned flags;
    ix_status status;
    const char *msg;
} rcase;

static const rcase k_refusals[] = {
    {"{\"type\":\"number\",\"multipleOf\":2}", 0, IX_ERR_UNSUPPORTED, "schema (root): keyword 'multipleOf' is not supported"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"patternProperties\":{}}}}", 0, IX_ERR_UNSUPPORTED,
     "schema /properties/a: keyword 'patternProperties' is not supported"},
    {"{\"type\":\"array\",\"prefixItems\":[]}", 0, IX_ERR_UNSUPPORTED, "'prefixItems'"},
    {"{\"type\":\"array\",\"uniqueItems\":true}", 0, IX_ERR_UNSUPPORTED, "'uniqueItems'"},
    {"{\"type\":\"string\",\"nullable\":true}", 0, IX_ERR_UNSUPPORTED, "'nullable'"},
    {"{\"type\":\"string\",\"properties\":{}}", 0, IX_ERR_UNSUPPORTED, "'properties' does not apply"},
    {"{\"type\":\"foo\"}", 0, IX_ERR_UNSUPPORTED, "unknown type 'foo'"},
    {"{\"type\":[]}", 0, IX_ERR_FORMAT, "'type' must be"},
    {"{\"$ref\":\"http://example.com/s.json\"}", 0, IX_ERR_UNSUPPORTED, "does not resolve"},
    {"{\"$ref\":\"#/$defs/missing\"}", 0, IX_ERR_UNSUPPORTED, "'#/$defs/missing' does not resolve"},
    {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\"}", 0, IX_ERR_UNSUPPORTED, "together with"},
    {"{\"anyOf\":[{\"type\":\"string\"}],\"properties\":{}}", 0, IX_ERR_UNSUPPORTED, "together with other keywords"},
    {"{\"allOf\":[{},{}]}", 0, IX_ERR_UNSUPPORTED, "'allOf' with more than one"},
    {"{\"anyOf\":[]}", 0, IX_ERR_FORMAT, "non-empty array"},
    {"{\"type\":\"string\",\"format\":\"hostname\"}", 0, IX_ERR_UNSUPPORTED, "format 'hostname' is not supported"},
    {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", 0, IX_ERR_UNSUPPORTED, "lookarounds"},
    {"{\"type\":\"string\",\"pattern\":\"(a\\\\1)\"}", 0, IX_ERR_UNSUPPORTED, "back-references"},
    {"{\"type\":\"string\",\"pattern\":\"a^b\"}", 0, IX_ERR_UNSUPPORTED, "anchors"},
    {"{\"type\":\"string\",\"pattern\":\"[z-a]\"}", 0, IX_ERR_UNSUPPORTED, "bad class range"},
    {"{\"type\":\"string\",\"pattern\":\"x**\"}", 0, IX_ERR_UNSUPPORTED, "nested quantifier"},
    {"{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", 0, IX_ERR_UNSUPPORTED, "together with 'pattern'"},
    {"{\"type\":\"array\",\"minItems\":20000}", 0, IX_ERR_TOO_LONG, "above the limit"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}", 0, IX_ERR_UNSUPPORTED, "no integer lies between"},
    {"{\"type\":\"integer\",\"minimum\":1e17}", 0, IX_ERR_UNSUPPORTED, "'minimum' leaves no integer of at most 16"},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":true}", 0, IX_ERR_FORMAT, "'exclusiveMinimum' must be a number"},
    {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", 0, IX_ERR_FORMAT, "maxItems is below minItems"},
    {"{\"type\":\"array\",\"minItems\":-1}", 0, IX_ERR_FORMAT, "non-negative integer"},
    {"{\"enum\":[1,2],\"type\":\"string\"}", 0, IX_ERR_UNSUPPORTED, "no value of 'enum'"},
    {"{\"enum\":[]}", 0, IX_ERR_FORMAT, "non-empty array"},
    {"false", 0, IX_ERR_UNSUPPORTED, "matches nothing"},
    {"[1, 2", 0, IX_ERR_FORMAT, "not valid JSON: line 1"},
    {"{\"a\":1,\"a\":2}", 0, IX_ERR_FORMAT, "duplicate"},
    {"{\"type\":\"object\",\"required\":[\"x\"]}", 0, IX_ERR_UNSUPPORTED, "required property 'x' is not in 'properties'"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}", IX_GRAMMAR_SCHEMA_STRICT,
     IX_ERR_UNSUPPORTED, "\"additionalProperties\": false"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":false}",
     IX_GRAMMAR_SCHEMA_STRICT, IX_ERR_UNSUPPORTED, "every property in 'required' ('a' is not)"},
    {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", 0, IX_ERR_FORMAT,
     "can never complete"},
    {"{\"$ref\":\"#\"}", 0, IX_ERR_FORMAT, "rules 'root', 'json' can never complete"},
};

static void test_refusals(void **state) {
    (void)state;
    for (size_t i = 0; i < IX_ARRAY_LEN(k_refusals); i++) {
        const rcase *c = &k_refusals[i];
        ix_grammar *g = (ix_grammar *)1;
        ix_errbuf err = {{0}};
        ix_status s = ix_grammar_from_json_schema(&g, c->schema, strlen(c->schema), c->flags, &err);
        if (s != c->status || !strstr(err.msg, c->msg))
            fail_msg("refusal %zu (%s): got %s '%s', want %s '%s'", i, c->schema, ix_status_name(s), err.msg,
                     ix_status_name(c->status), c->msg);
        assert_null(g);
    }
    /* nesting and size limits */
    ix_buf b = {0};
    for (int i = 0; i < 100; i++) ix_buf_printf(&b, "{\"type\":\"array\",\"items\":");
    ix_buf_printf(&b, "{}");
    for (int i = 0; i < 100; i++) ix_buf_printf(&b, "}");
    ix_grammar *g;
    ix_errbuf err = {{0}};
    assert_int_equal(ix_grammar_from_json_schema(&g, b.data, b.len, 0, &err), IX_ERR_TOO_LONG);
    assert_non_null(strstr(err.msg, "nested deeper than 64"));
    ix_buf_clear(&b);
    ix_buf_printf(&b, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 5000; i++) ix_buf_printf(&b, "%s\"p%d\":{\"type\":\"array\",\"maxItems\":10000}", i ? "," : "", i);
    ix_buf_printf(&b, "}}");
    assert_int_equal(ix_grammar_from_json_schema(&g, b.data, b.len, 0, &err), IX_ERR_TOO_LONG);
    ix_buf_free(&b);
    /* the converter's text: what ix_json_schema_to_gbnf gives parses on its own */
    ix_buf text = {0};
    const char *s = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}},\"required\":[\"x\"]}";
    assert_int_equal(ix_json_schema_to_gbnf(s, strlen(s), 0, &text, &err), IX_OK);
    assert_int_equal(strncmp(text.data, "root ::= ws json\n", 17), 0);
    assert_int_equal(ix_grammar_parse(&g, text.data, text.len, &err), IX_OK);
    ix_grammar_destroy(g);
    ix_buf_free(&text);
}

/* ---- real vocabularies ------------------------------------------------------------------ */

typedef struct rvocab {
    ix_tokenizer *tok;
    ix_grammar_vocab *v;
} rvocab;

/* false (and a message) when the file is not there. */
static bool load_rvocab(const char *name, rvocab *r) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/%s", IX_SHARED_DIR, name);
    if (access(path, R_OK) != 0) {
        printf("test_grammar_schema: %s absent, skipping its checks\n", path);
        return false;
    }
    ix_errbuf err = {{0}};
    if (ix_tokenizer_load(&r->tok, path, &err) != IX_OK) fail_msg("%s: %s", path, err.msg);
    if (ix_grammar_vocab_create(&r->v, r->tok, &err) != IX_OK) fail_msg("%s: %s", path, err.msg);
    return true;
}

static void free_rvocab(rvocab *r) {
    ix_grammar_vocab_destroy(r->v);
    ix_tokenizer_destroy(r->tok);
}

static const char *const k_vocabs[] = {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"};

static const char k_person[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":40},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0},"
    "\"rating\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":5},"
    "\"delta\":{\"type\":\"integer\",\"minimum\":-250,\"maximum\":1300},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"born\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"seen\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
    "\"role\":{\"enum\":[\"admin\",\"user\",null,3]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1},\"minItems\":1,\"maxItems\":4},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"},"
    "\"score\":{\"type\":[\"number\",\"null\"]},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"note\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":3}]}},"
    "\"required\":[\"name\",\"age\",\"role\",\"tags\",\"ok\"],\"additionalProperties\":false}";

static const char *const k_walk_schemas[] = {
    k_person,
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":3}},\"required\":[\"v\",\"kids\"],\"additionalProperties\":false}},"
    "\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
    "{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y\",{\"z\":1}]},\"minItems\":2,\"maxItems\":4}",
    "{\"oneOf\":[{\"type\":\"string\",\"pattern\":\"^\\\\w+@\\\\w+$\"},{\"type\":\"boolean\"},{\"const\":[1,2]}]}",
    "{}",
};

static void test_schema_out_of_memory(void **state) {
    (void)state;
    const char *s = k_walk_schemas[1]; /* recursive $defs */
    int ok_at = -1;
    for (long n = 0; n < 100000 && ok_at < 0; n++) {
        size_t live = ix_mem_live_count();
        ix_mem_fail_after(n);
        ix_grammar *g = NULL;
        ix_errbuf err = {{0}};
        ix_status st = ix_grammar_from_json_schema(&g, s, strlen(s), 0, &err);
        bool failed = ix_mem_failed_count() > 0;
        ix_mem_fail_reset();
        if (st == IX_OK && !failed) ok_at = (int)n;
        else if (st != IX_OK && st != IX_ERR_NOMEM) fail_msg("allocation %ld: %s %s", n, ix_status_name(st), err.msg);
        ix_grammar_destroy(g);
        assert_int_equal(ix_mem_live_count(), live);
    }
    assert_true(ok_at > 10);
}

static void walk_and_validate(rvocab *r, const ix_grammar *g, json_t *schema, int n_docs, uint64_t seed,
                              bool want_object) {
    ix_grammar_matcher *m;
    ix_errbuf err = {{0}};
    if (ix_grammar_matcher_create(&m, g, r->v, NULL, &err) != IX_OK) fail_msg("%s", err.msg);
    size_t nw = ix_grammar_vocab_mask_words(r->v);
    uint32_t *mask = calloc(nw, sizeof *mask);
    uint64_t rng = seed;
    for (int d = 0; d < n_docs; d++) {
        ix_grammar_matcher_reset(m);
        ix_buf text = {0};
        int64_t free_steps = (int64_t)(gwalk_rand(&rng) % 60);
        int64_t n = gwalk_run(m, r->v, mask, free_steps, 20000, &rng, &text);
        if (n < 0) fail_msg("walk failed after: %s (%s)", text.data ? text.data : "", ix_grammar_matcher_errmsg(m));
        if (!ix_grammar_matcher_is_finished(m) && !ix_grammar_matcher_can_end(m))
            fail_msg("walk ended incomplete: %s", text.data);
        json_error_t jerr;
        json_t *doc = json_loadb(text.data ? text.data : "", text.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!doc) fail_msg("not JSON (%s): %s", jerr.text, text.data);
        if (want_object && !json_is_object(doc)) fail_msg("not an object: %s", text.data);
        const char *why = schema ? invalid(schema, schema, doc) : NULL;
        if (why) fail_msg("invalid (%s): %s", why, text.data);
        json_decref(doc);
        ix_buf_free(&text);
    }
    free(mask);
    ix_grammar_matcher_destroy(m);
}

static void test_random_walks(void **state) {
    (void)state;
    for (size_t vi = 0; vi < IX_ARRAY_LEN(k_vocabs); vi++) {
        rvocab rv, *r = &rv;
        if (!load_rvocab(k_vocabs[vi], r)) continue;
        for (size_t si = 0; si < IX_ARRAY_LEN(k_walk_schemas); si++) {
            const char *s = k_walk_schemas[si];
            for (unsigned flags = 0; flags <= IX_GRAMMAR_SCHEMA_COMPACT; flags += IX_GRAMMAR_SCHEMA_COMPACT) {
                ix_grammar *g = from_schema(s, flags);
                json_t *schema = json_loads(s, 0, NULL);
                assert_non_null(schema);
                walk_and_validate(r, g, schema, 12, 1000 * vi + 10 * si + flags, false);
                json_decref(schema);
                ix_grammar_destroy(g);
            }
        }
        ix_grammar *g;
        ix_errbuf err = {{0}};
        assert_int_equal(ix_grammar_json_object(&g, 0, &err), IX_OK);
        walk_and_validate(r, g, NULL, 12, 77 + vi, true);
        ix_grammar_destroy(g);
        free_rvocab(r);
    }
}

/* k_person over one real vocabulary: a matcher and a mask buffer. */
typedef struct person {
    rvocab r;
    ix_grammar *g;
    ix_grammar_matcher *m;
    uint32_t *mask;
    size_t nw;
} person;

static bool person_open(const char *vocab, person *p) {
    if (!load_rvocab(vocab, &p->r)) return false;
    p->g = from_schema(k_person, 0);
    assert_int_equal(ix_grammar_matcher_create(&p->m, p->g, p->r.v, NULL, NULL), IX_OK);
    p->nw = ix_grammar_vocab_mask_words(p->r.v);
    p->mask = calloc(p->nw, sizeof *p->mask);
    return true;
}

static void person_close(person *p) {
    free(p->mask);
    ix_grammar_matcher_destroy(p->m);
    ix_grammar_destroy(p->g);
    free_rvocab(&p->r);
}

/* Masks over a whole real vocabulary against accepting each token in turn. */
static void test_real_masks(void **state) {
    (void)state;
    const char *prefixes[] = {"", " {\"name\": \"Al", "{\"name\":\"x\",\"age\":1", "{\"name\":\"x\",\"age\":12,\"role\":",
                              "{\"name\":\"\xC3", "{\"name\":\"x\",\"age\":1,\"role\":3,\"tags\":[\"a\"],\"ok\":true}"};
    for (size_t vi = 0; vi < IX_ARRAY_LEN(k_vocabs); vi++) {
        person p;
        if (!person_open(k_vocabs[vi], &p)) continue;
        for (size_t k = 0; k < IX_ARRAY_LEN(prefixes); k++) {
            ix_grammar_matcher_reset(p.m);
            assert_int_equal(ix_grammar_matcher_accept_bytes(p.m, prefixes[k], strlen(prefixes[k])), IX_OK);
            assert_int_equal(ix_grammar_matcher_fill_mask(p.m, p.mask, p.nw), IX_OK);
            int32_t allowed = 0;
            for (int32_t id = 0; id < ix_grammar_vocab_n_vocab(p.r.v); id++) {
                ix_grammar_matcher *c;
                assert_int_equal(ix_grammar_matcher_clone(&c, p.m), IX_OK);
                bool ok = ix_grammar_matcher_accept(c, id) == IX_OK;
                ix_grammar_matcher_destroy(c);
                bool bit = gwalk_allowed(p.mask, id);
                if (ok != bit) fail_msg("%s, prefix %zu, token %d: mask %d accept %d", k_vocabs[vi], k, id, bit, ok);
                allowed += bit;
            }
            assert_true(allowed > 0);
        }
        person_close(&p);
    }
}

/* Documents written by people, tokenized as a model would emit them: every
 * token allowed in turn, complete at the end. */
static void test_tokenized_documents(void **state) {
    (void)state;
    const char *docs[] = {
        "{\"name\": \"Ada\", \"age\": 36, \"role\": \"admin\", \"tags\": [\"math\"], \"ok\": true}",
        "{\n  \"name\": \"Grace Hopper\",\n  \"age\": 85,\n  \"email\": \"grace@navy.mil\",\n  \"born\": \"1906-12-09\",\n"
        "  \"role\": null,\n  \"tags\": [\"cobol\", \"compilers\"],\n  \"zip\": \"22201-1234\",\n  \"score\": 9.75,\n"
        "  \"ok\": false,\n  \"note\": [1, 2]\n}",
        ("{\"name\":\"\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80\",\"age\":0,\"role\":3,\"tags\":[\"\\\"q\\\"\"],\"ok\":true,"
         "\"note\":\"multi\\nline\"}"),
    };
    for (size_t vi = 0; vi < IX_ARRAY_LEN(k_vocabs); vi++) {
        person p;
        if (!person_open(k_vocabs[vi], &p)) continue;
        for (size_t d = 0; d < IX_ARRAY_LEN(docs); d++) {
            ix_token_vec ids = {0};
            assert_int_equal(ix_tokenizer_encode(p.r.tok, docs[d], strlen(docs[d]), 0, &ids, NULL), IX_OK);
            ix_grammar_matcher_reset(p.m);
            for (size_t i = 0; i < ids.n; i++) {
                assert_int_equal(ix_grammar_matcher_fill_mask(p.m, p.mask, p.nw), IX_OK);
                if (!gwalk_allowed(p.mask, ids.ids[i])) fail_msg("%s doc %zu token %zu not allowed", k_vocabs[vi], d, i);
                assert_int_equal(ix_grammar_matcher_accept(p.m, ids.ids[i]), IX_OK);
            }
            assert_true(ix_grammar_matcher_can_end(p.m));
            ix_token_vec_free(&ids);
        }
        person_close(&p);
    }
}

int main(void) {
    setlocale(LC_ALL, "C.UTF-8"); /* the validator's regexes read UTF-8 */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keywords),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_schema_out_of_memory),
        cmocka_unit_test(test_real_masks),
        cmocka_unit_test(test_tokenized_documents),
        cmocka_unit_test(test_random_walks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
