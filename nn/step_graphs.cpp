// CUDA graphs of a model's passes: Note [CUDA graphs] in step_graphs.h.
#include "nn/step_graphs.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/log.h"

namespace trainer::nn {

void StepGraphs::run(const Key& key, void* stream, const std::function<void()>& fn) {
  if (!entries_.contains(key) && entries_.size() >= max_keys_) {
    if (!warned_)
      log::warn(
          "CUDA graphs: more batch shapes than the {} segments' graphs kept; the least "
          "recently used are captured again when their shape returns",
          max_keys_);
    warned_ = true;
    entries_.erase(std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
      return a.second.last_use < b.second.last_use;
    }));
  }
  Entry& e = entries_[key];
  e.last_use = ++clock_;
  if (!e.graph && ++e.runs < 2) return fn();
  if (!e.graph) {
    try {
      e.graph = std::make_unique<CudaGraph>(stream, fn);
    } catch (const Error& err) {
      THROW_ERROR(
          "capturing unit {}'s {} as a CUDA graph failed ({}); train.cuda_graphs: false runs it "
          "without",
          key.unit, key.backward ? "backward" : "forward", err.what());
    }
  }
  e.graph->launch(stream);
}

}  // namespace trainer::nn
