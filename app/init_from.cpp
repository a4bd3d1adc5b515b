// Fine-tuning from saved weights; see init_from.h.
#include "app/init_from.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "app/run_setup.h"
#include "data/tokenizer.h"
#include "nn/hf_weights.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

InitSource open_init_source(const fs::path& from, const Config& run_config,
                            const nn::ParamLayout& layout, uint64_t tokenizer_hash) {
  const std::string what = fmt::format("train.init_from = {}", from.string());
  InitSource s{open_model_source(from, what), nullptr, nullptr};
  const nn::LoraConfig& lora = layout.config().lora;
  const nn::LoraConfig held =
      s.source.checkpoint ? stated_model(s.source.config).lora : nn::LoraConfig{};
  if (held.on()) {
    USAGE_CHECK(held.rank == lora.rank && held.alpha == lora.alpha && held.targets == lora.targets,
                "{} holds LoRA adapters (train.lora.rank {}, alpha {}, targets {}): continue "
                "them with the same train.lora keys, or start from its merged export "
                "(trainer export)",
                what, held.rank, held.alpha, fmt::join(held.targets, ", "));
  } else if (lora.on()) {
    s.base = std::make_shared<const nn::ParamLayout>(layout.config().base());
  }
  const nn::ParamLayout& read_by = s.base ? *s.base : layout;
  if (!s.source.checkpoint) {
    // Its model keys are the run's already (run_training applied them: with_hf_model).
    s.folder = std::make_shared<const nn::HfWeights>(s.source.dir, read_by);
  } else {
    for (const char* key : model_keys())
      if (s.source.config.to_yaml_value(key) != run_config.to_yaml_value(key))
        throw UsageError(fmt::format(
            "{}: {} is {} there but {} here (another model: fine-tuning needs the same one)", what,
            key, s.source.config.to_yaml_value(key), run_config.to_yaml_value(key)));
  }
  // The ids of the data must mean the pieces the weights learnt.
  const std::optional<TokenizerBytes> own = s.source.own_tokenizer();
  USAGE_CHECK(own,
              "{} holds no tokenizer to check against data.tokenizer (a folder: copy the model's "
              "tokenizer.json or tokenizer.model into it)",
              what);
  USAGE_CHECK(data::tokenizer_is(own->bytes, tokenizer_hash),
              "{} comes with another tokenizer ({:016x}; data.tokenizer is {:016x}): its token ids "
              "would mean other pieces",
              what, data::tokenizer_hash(own->bytes), tokenizer_hash);
  return s;
}

void load_init_weights(const InitSource& source, const nn::Model& model, dist::DataParallel& dp,
                       uint64_t seed) {
  const nn::ParamLayout& read_by = source.base ? *source.base : model.layout();
  std::optional<CheckpointTensors> saved;
  if (source.source.checkpoint) saved.emplace(*source.source.checkpoint, read_by);
  dist::set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t b, int64_t e, float* out) {
    if (source.base && nn::is_adapter(p.role)) return nn::init_param(p, seed, b, e, out);
    const nn::ParamInfo* q = read_by.find(p.name);
    TRAINER_ASSERT(q, "{} is not a parameter of the source's layout", p.name);
    if (saved) return saved->read_params(q->offset + b, q->offset + e, out);
    source.folder->read(*q, b, e, out);
  });
}

}  // namespace trainer::app
