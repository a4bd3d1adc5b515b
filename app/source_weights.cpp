// See source_weights.h.
#include "app/source_weights.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "app/run_setup.h"
#include "nn/lora.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::app {

namespace {

// The same adapters: rank, alpha and targets (in any order).
bool same_adapters(nn::LoraConfig a, nn::LoraConfig b) {
  std::sort(a.targets.begin(), a.targets.end());
  std::sort(b.targets.begin(), b.targets.end());
  return a.rank == b.rank && a.alpha == b.alpha && a.targets == b.targets;
}

}  // namespace

SourceWeights::SourceWeights(const ModelSource& source, const nn::ParamLayout& layout,
                             uint64_t seed)
    : name_(source.name()), base_(layout.config().base()), seed_(seed) {
  const nn::LoraConfig& want = layout.config().lora;
  const nn::LoraConfig held = stated_model(source.config).lora;
  const std::string what = source.name();
  USAGE_CHECK(!held.on() || same_adapters(held, want),
              "{} holds LoRA adapters (train.lora.rank {}, alpha {}, targets {}): continue "
              "them with the same train.lora keys, or start from its merged export (trainer "
              "export)",
              what, held.rank, held.alpha, fmt::join(held.targets, ", "));
  whole_ = source.checkpoint && source.adapter.empty() && held.on();
  if (source.checkpoint)
    checkpoint_.emplace(*source.checkpoint, whole_ ? layout : base_);
  else
    folder_ = std::make_unique<nn::HfWeights>(source.dir, base_);
  if (!source.adapter.empty())
    adapter_ = std::make_unique<nn::HfWeights>(source.adapter, layout, nn::HfTensors::peft_adapter);
}

SourceWeights::~SourceWeights() = default;

void SourceWeights::load(nn::Model& model) const {
  const Tensor params = model.params();
  std::vector<float> piece;
  for (const nn::ParamInfo& p : model.layout().params())
    for_each_piece(p.numel, [&](int64_t b, int64_t e) {
      piece.resize(size_t(e - b));
      read(p, b, e, piece.data());
      copy(model.context(), params.flat(p.offset + b, e - b),
           make_tensor(piece.data(), DType::f32, {e - b}));
    });
  model.sync_working_params();
}

void SourceWeights::read(const nn::ParamInfo& p, int64_t begin, int64_t end, float* out) const {
  read_values(p, begin, end, out);
  for (int64_t i = 0; i < end - begin; ++i)
    USAGE_CHECK(std::isfinite(out[i]),
                "{}: tensor '{}' holds {} (element {}): the weights are broken, so nothing is "
                "trained, evaluated or exported from them",
                name_, p.name, std::isnan(out[i]) ? "NaN" : "an infinity", begin + i);
}

int64_t SourceWeights::count_nonfinite(const nn::ParamInfo& p) const {
  int64_t n = 0;
  std::vector<float> piece;
  for_each_piece(p.numel, [&](int64_t b, int64_t e) {
    piece.resize(size_t(e - b));
    read_values(p, b, e, piece.data());
    for (float x : piece) n += !std::isfinite(x);
  });
  return n;
}

void SourceWeights::read_values(const nn::ParamInfo& p, int64_t begin, int64_t end,
                                float* out) const {
  if (whole_) return checkpoint_->read_params(p.offset + begin, p.offset + end, out);
  if (nn::is_adapter(p.role))
    return adapter_ ? adapter_->read(p, begin, end, out)
                    : nn::init_param(p, seed_, begin, end, out);
  const nn::ParamInfo* q = base_.find(p.name);
  TRAINER_ASSERT(q, "{} is not a parameter of the base's layout", p.name);
  if (checkpoint_) return checkpoint_->read_params(q->offset + begin, q->offset + end, out);
  folder_->read(*q, begin, end, out);
}

}  // namespace trainer::app
