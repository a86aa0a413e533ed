/* inferx server: the request fields that constrain what the model writes --
 * `response_format` (text, json_object, json_schema) and the `grammar`
 * extension (GBNF text, docs/grammar.md) -- read into the engine's
 * ix_constraint, compiled through the engine at parse time so that a grammar
 * or schema the grammar module refuses is a 400 naming the field. Tool
 * calls forced by tool_choice build their grammar in tools.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_int.h"

/* Compiles c through the engine's cache; a refusal is a 400 naming param. */
int ix__srv_check_constraint(ix_server *s, const ix_constraint *c, const char *param, ixs_err *e) {
    ix_errbuf err = {{0}};
    ix_status st = ix_engine_check_constraint(s->engine, c, &err);
    if (st == IX_OK) return 0;
    if (st == IX_ERR_NOMEM || st == IX_ERR_INTERNAL)
        return ix__srv_errf(e, 500, "server_error", NULL, "%s: %s", param, err.msg);
    return IXS_BAD(e, param, "%s: %s", param, err.msg);
}

/* response_format.json_schema: {"name", "schema", "strict", "description"}. */
static int parse_json_schema(json_t *js, ixs_constraint_req *out, ixs_err *e) {
    const char *P = "response_format.json_schema";
    if (!json_is_object(js)) return IXS_BAD(e, P, "'%s' must be an object", P);
    const char *key;
    json_t *v;
    json_object_foreach(js, key, v) {
        if (!strcmp(key, "name")) {
            if (!json_is_string(v)) return IXS_BAD(e, "response_format.json_schema.name", "'%s.name' must be a string", P);
        } else if (!strcmp(key, "description")) {
            if (!json_is_string(v) && !json_is_null(v))
                return IXS_BAD(e, "response_format.json_schema.description", "'%s.description' must be a string", P);
        } else if (!strcmp(key, "strict")) {
            if (!json_is_boolean(v) && !json_is_null(v))
                return IXS_BAD(e, "response_format.json_schema.strict", "'%s.strict' must be a boolean", P);
            if (json_is_true(v)) out->c.flags |= IX_GRAMMAR_SCHEMA_STRICT;
        } else if (!strcmp(key, "schema")) {
            if (!json_is_object(v) && !json_is_boolean(v))
                return IXS_BAD(e, "response_format.json_schema.schema", "'%s.schema' must be a JSON Schema object", P);
        } else {
            return IXS_BAD(e, P, "'%s.%.64s' is not a field of json_schema (name, description, schema, strict)", P, key);
        }
    }
    json_t *schema = json_object_get(js, "schema");
    if (!json_is_string(json_object_get(js, "name")))
        return IXS_BAD(e, "response_format.json_schema.name", "'%s.name' is required", P);
    /* OpenAI: an absent schema means any JSON value of the named shape; we
     * take it as any JSON object (the documented default of json_object). */
    if (!schema) {
        out->c.kind = IX_CONSTRAINT_JSON_OBJECT;
        return 0;
    }
    out->text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!out->text) return ix__srv_errf(e, 500, "server_error", NULL, "out of memory");
    out->c.kind = IX_CONSTRAINT_JSON_SCHEMA;
    out->c.text = out->text;
    out->c.len = strlen(out->text);
    snprintf(out->param, sizeof out->param, "response_format.json_schema.schema");
    return 0;
}

int ix__srv_parse_constraint(ix_server *s, json_t *req, ixs_constraint_req *out, ixs_err *e) {
    memset(out, 0, sizeof *out);
    json_t *rf = json_object_get(req, "response_format");
    json_t *gr = json_object_get(req, "grammar");
    if (rf && !json_is_null(rf)) {
        if (!json_is_object(rf)) return IXS_BAD(e, "response_format", "'response_format' must be an object");
        json_t *type = json_object_get(rf, "type");
        if (!json_is_string(type))
            return IXS_BAD(e, "response_format.type", "'response_format.type' must be a string");
        const char *t = json_string_value(type);
        const char *key;
        json_t *v;
        json_object_foreach(rf, key, v) {
            if (!strcmp(key, "type") || (!strcmp(t, "json_schema") && !strcmp(key, "json_schema"))) continue;
            return IXS_BAD(e, "response_format", "'response_format.%.64s' is not a field of a %.32s response_format",
                           key, t);
        }
        if (!strcmp(t, "text")) {
            /* free text: nothing to constrain */
        } else if (!strcmp(t, "json_object")) {
            out->c.kind = IX_CONSTRAINT_JSON_OBJECT;
            snprintf(out->param, sizeof out->param, "response_format");
        } else if (!strcmp(t, "json_schema")) {
            if (parse_json_schema(json_object_get(rf, "json_schema"), out, e)) return -1;
            if (!out->param[0]) snprintf(out->param, sizeof out->param, "response_format");
        } else {
            return IXS_BAD(e, "response_format.type",
                           "'response_format.type' is '%.64s'; it must be 'text', 'json_object' or 'json_schema'", t);
        }
    }
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) return IXS_BAD(e, "grammar", "'grammar' must be a string (GBNF, docs/grammar.md)");
        if (out->c.kind != IX_CONSTRAINT_NONE)
            return IXS_BAD(e, "grammar", "'grammar' and a JSON 'response_format' cannot be used together");
        out->c = (ix_constraint){IX_CONSTRAINT_GRAMMAR, json_string_value(gr), json_string_length(gr), 0};
        snprintf(out->param, sizeof out->param, "grammar");
    }
    if (out->c.kind == IX_CONSTRAINT_NONE) return 0;
    return ix__srv_check_constraint(s, &out->c, out->param, e);
}

void ix__srv_constraint_free(ixs_constraint_req *c) {
    free(c->text);
    c->text = NULL;
}
