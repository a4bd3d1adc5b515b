// Fine-tuning (train.init_from): a new run starts from the weights of a saved model (a
// checkpoint, a run directory's latest checkpoint, or a Hugging Face model folder, such as one
// `trainer export` wrote), with a fresh optimizer at step 0, on any data. The source must be
// the same model and tokenizer (a folder's model keys are the run's: app/hf_folder.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "app/config.h"
#include "app/model_source.h"
#include "dist/data_parallel.h"
#include "nn/hf_weights.h"
#include "nn/model.h"

namespace trainer::app {

struct InitSource {
  ModelSource source;
  std::shared_ptr<const nn::HfWeights> folder;  // a folder's weights, checked against the model
  // Where the run adds LoRA adapters to a source without them: the run's base layout, which
  // the source is read by, the adapters starting by their initialisation rules. Null when the
  // source holds every parameter of the run.
  std::shared_ptr<const nn::ParamLayout> base;
};

// Opens `from` and checks it against the run that `run_config` describes (its parameters laid
// out by `layout`): every key that defines the model must match, a folder's tensors must be
// the model's, and its tokenizer must hash to `tokenizer_hash`; throws a UsageError naming the
// first difference. Reads no weights.
InitSource open_init_source(const std::filesystem::path& from, const Config& run_config,
                            const nn::ParamLayout& layout, uint64_t tokenizer_hash);

// Loads the source's weights into this rank's slices of `dp` (fp32, bf16 or fp16 folders
// alike), a range at a time, and makes the model's weights agree; adapters the source lacks
// start from `seed` as a new run's would.
void load_init_weights(const InitSource& source, const nn::Model& model, dist::DataParallel& dp,
                       uint64_t seed);

}  // namespace trainer::app
