// What the trainer refuses to combine, and why: one table of the combinations of resolved
// options that do not compose (yet, or ever), checked once per run (Note [Refusals]).
#pragma once

#include <string>
#include <vector>

#include "app/run_setup.h"

namespace trainer::app {

// Throws a UsageError with the message of the first row of the table that refuses `r`.
void check_combinations(const RunConfig& r);
// Every row's message as written, with its {placeholders}, in the table's order (a test checks
// that docs/errors.md explains each).
std::vector<std::string> refusal_messages();

}  // namespace trainer::app
