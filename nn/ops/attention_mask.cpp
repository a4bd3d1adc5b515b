// The runs of a packed batch's segment ids (attention.h, Note [Attention masks]).
#include <unordered_set>

#include "nn/ops/attention.h"

namespace trainer::nn {

std::vector<int32_t> segment_runs(const int32_t* segments, int B, int T) {
  std::vector<int32_t> runs;
  std::unordered_set<int32_t> seen;  // the ids of this row's runs so far
  for (int b = 0; b < B; ++b) {
    seen.clear();
    for (int t = 0; t < T; ++t) {
      const int64_t i = int64_t(b) * T + t;
      if (t > 0 && segments[i] == segments[i - 1]) continue;
      if (!seen.insert(segments[i]).second) return {};
      runs.push_back(int32_t(i));
    }
  }
  runs.push_back(int32_t(int64_t(B) * T));
  return runs;
}

}  // namespace trainer::nn
