// A model source's weights as a run's model lays them out: the base's from its checkpoint or
// Hugging Face folder, and LoRA adapters (Note [LoRA] in nn/lora.h) from the same checkpoint,
// from a PEFT adapter's file, or by their initialisation rules where the source has none.
// train.init_from and the saved models of eval, sample and export read through here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "app/checkpoint.h"
#include "app/model_source.h"
#include "nn/hf_weights.h"
#include "nn/model.h"
#include "nn/param_layout.h"

namespace trainer::app {

class SourceWeights {
 public:
  // Checks `source` against `layout` (a run's model, or any tensor slice or pipeline stage of
  // it) before any value is read: the base's tensors, and the adapters where the source holds
  // some (then the same train.lora as the layout's: UsageError naming the source otherwise).
  // Adapters the source lacks start from `seed`, as a new run's would.
  SourceWeights(const ModelSource& source, const nn::ParamLayout& layout, uint64_t seed);
  ~SourceWeights();

  // Elements [begin, end) of parameter `p` of the layout, as fp32. Throws a UsageError naming
  // the source and the tensor where one is NaN or infinite: a broken source is refused where
  // it is read, not trained, evaluated or exported.
  void read(const nn::ParamInfo& p, int64_t begin, int64_t end, float* out) const;
  // Every parameter into `model` (laid out as the layout, owning its weights: eval, sample,
  // export), a piece at a time, and its working copy refreshed.
  void load(nn::Model& model) const;
  // How many of p's values are NaN or infinite (inspect's report; read() refuses them).
  int64_t count_nonfinite(const nn::ParamInfo& p) const;

 private:
  void read_values(const nn::ParamInfo& p, int64_t begin, int64_t end, float* out) const;

  std::string name_;      // the source, for messages
  nn::ParamLayout base_;  // the layout without adapters: what a folder or base holds
  bool whole_ = false;    // a checkpoint holding every parameter of the layout
  std::optional<CheckpointTensors> checkpoint_;
  std::unique_ptr<nn::HfWeights> folder_, adapter_;
  uint64_t seed_;
};

}  // namespace trainer::app
