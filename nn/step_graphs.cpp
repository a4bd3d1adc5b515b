// CUDA graphs of a model's passes: Note [CUDA graphs] in step_graphs.h.
#include "nn/step_graphs.h"

#include <algorithm>

#include "runtime/error.h"

namespace trainer::nn {

void StepGraphs::run(const Key& key, void* stream, const std::function<void()>& fn) {
  if (!entries_.contains(key) && entries_.size() >= kMaxKeys)
    entries_.erase(std::min_element(entries_.begin(), entries_.end(), [](auto& a, auto& b) {
      return a.second.last_use < b.second.last_use;
    }));
  Entry& e = entries_[key];
  e.last_use = ++clock_;
  if (e.graph) {
    e.graph->launch(stream);
    for (const auto& hook : e.hooks) hook();
    return;
  }
  if (++e.runs < 2) return fn();
  TRAINER_ASSERT(!capturing_, "nested CUDA graph capture");
  capturing_ = &e;
  e.hooks.clear();
  try {
    e.graph = std::make_unique<CudaGraph>(stream, fn);
  } catch (const Error& err) {
    capturing_ = nullptr;
    THROW_ERROR(
        "capturing the {} pass as a CUDA graph failed ({}); train.cuda_graphs: false runs "
        "it without",
        key.backward ? "backward" : "forward", err.what());
  } catch (...) {
    capturing_ = nullptr;
    throw;
  }
  capturing_ = nullptr;
  e.graph->launch(stream);  // the hooks fired during the capture
}

void StepGraphs::record(std::function<void()> call) {
  if (capturing_) capturing_->hooks.push_back(std::move(call));
}

}  // namespace trainer::nn
