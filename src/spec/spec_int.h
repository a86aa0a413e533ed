/* spec internals: the proposer table (one row per proposer file). */
#ifndef INFERX_SPEC_INT_H
#define INFERX_SPEC_INT_H

#include "inferx/spec.h"

extern const ix_proposer_ops ix__proposer_ngram;
extern const ix_proposer_ops ix__proposer_draft;
extern const ix_proposer_ops ix__proposer_medusa;

#endif
