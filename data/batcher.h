// Turns a batch plan into a Batch by reading the planned tokens from the corpus.
#pragma once

#include "data/batch.h"
#include "data/corpus.h"
#include "data/plan.h"

namespace trainer::data {

// Materialises `plan` (made for `mode`) from `corpus` (opened with index_docs unless stream).
Batch make_batch(const BatchPlan& plan, Mode mode, const Corpus& corpus);

}  // namespace trainer::data
