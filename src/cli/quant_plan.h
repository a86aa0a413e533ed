/* inferx quantize (internal): which type each tensor of a model gets.
 *
 * A mix ("Q4_K_M") names a base type and llama.cpp's file type number; the
 * per-tensor choices follow llama.cpp's quantizer (src/llama-quant.cpp): the
 * output head gets Q6_K (Q8_0 when its rows do not fit the base type's
 * blocks), attn_v and ffn_down get more bits on some layers in the _M / _L
 * mixes, and a tensor whose row length is not a whole number of the chosen
 * type's blocks falls back to a type with 32-element blocks of at least as
 * many bits. Overrides by name pattern come last and win. */
#ifndef IX_CLI_QUANT_PLAN_H
#define IX_CLI_QUANT_PLAN_H

#include "inferx/gguf.h"

typedef struct qmix {
    const char *name;   /* "Q4_K_M" */
    ix_dtype base;      /* the type of the body */
    uint32_t file_type; /* general.file_type: llama.cpp's LLAMA_FTYPE_* */
    const char *alias_of; /* non-NULL: a short name of another mix ("Q4_K" -> "Q4_K_M") */
} qmix;

/* The mixes, in --help order; *n gets their count. */
const qmix *ix_cli_qmixes(size_t *n);
/* The mix called name (case-insensitive; an alias resolves), or NULL. */
const qmix *ix_cli_qmix_find(const char *name);
/* A weight type the kernels read, by name (case-insensitive); false if none. */
bool ix_cli_qtype_parse(const char *name, ix_dtype *out);

/* One --override: a glob (fnmatch, the whole name) or, prefixed "re:", a POSIX
 * extended regular expression that may match anywhere in the name. */
typedef struct qoverride qoverride;
/* Parses "PATTERN=TYPE" (the last '=' splits); on error returns NULL and
 * writes why to err. */
qoverride *ix_cli_qoverride_parse(const char *spec, ix_errbuf *err);
void ix_cli_qoverride_free(qoverride *o);
bool ix_cli_qoverride_match(const qoverride *o, const char *name);
ix_dtype ix_cli_qoverride_type(const qoverride *o);
const char *ix_cli_qoverride_spec(const qoverride *o);

/* What the plan decided for one tensor. */
typedef struct qchoice {
    bool quantize;      /* false: copied as it is */
    ix_dtype type;      /* the output type */
    ix_dtype fell_from; /* == type unless the row length forced a fallback */
    int override;       /* index of the override that chose the type, or -1 */
} qchoice;

/* The plan of a whole model: choice[i] for tensor i of g (file order). The
 * rules' layer counters run in llama.cpp's tensor order (by layer, then by
 * name). pure: every quantized tensor gets the base type (fallbacks still
 * apply: a row that does not fit cannot be written). has_imatrix changes a
 * few choices as in llama.cpp. Returns false with err set on bad input (a
 * metadata value out of range). */
bool ix_cli_qplan(const ix_gguf *g, const qmix *mix, bool pure, bool has_imatrix, qoverride *const *ovr,
                  size_t n_ovr, qchoice *choice, ix_errbuf *err);

#endif
