// Where a fast path declined and a slower one ran instead (cuDNN attention, a cuBLASLt epilogue
// or algorithm), counted per path for the metrics and the bench, each new reason logged once.
// A run that silently measures a fallback would report the wrong kernel's speed.
#pragma once

#include <string>
#include <vector>

namespace trainer::fallback {

// Counts one call of `path` (a stable name, e.g. "cudnn_attention_backward") that ran the slower
// kernel because of `why`; the first time a path gives a reason, it is logged as a warning.
void note(const std::string& path, const std::string& why);

struct Count {
  std::string path;
  long calls = 0;
  std::string why;  // the most recent reason
};
// Every path's calls since the process started (or reset()), by path name. Passes replayed as
// CUDA graphs are counted when captured, not at each replay.
std::vector<Count> counts();
void reset();

}  // namespace trainer::fallback
