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
#include "app/source_weights.h"
#include "dist/data_parallel.h"
#include "nn/hf_weights.h"
#include "nn/model.h"

namespace trainer::app {

struct InitSource {
  ModelSource source;
  std::shared_ptr<const SourceWeights> weights;  // checked against the model
};

// Opens `from` and checks it against the run that `run_config` describes (its parameters laid
// out by `layout`): every key that defines the model must match, a folder's tensors must be
// the model's, adapters it holds must be the run's (app/source_weights.h), and its tokenizer
// must hash to `tokenizer_hash`; throws a UsageError naming the first difference. Reads no
// weights; adapters the source lacks will start from `seed`.
InitSource open_init_source(const std::filesystem::path& from, const Config& run_config,
                            const nn::ParamLayout& layout, uint64_t tokenizer_hash, uint64_t seed);

// Loads the source's weights into this rank's slices of `dp` (fp32, bf16 or fp16 folders
// alike), a range at a time, and makes the model's weights agree. A collective over `comm`:
// values that are not finite, in any rank's slice, are refused on every rank alike (a
// UsageError naming the tensor).
void load_init_weights(const InitSource& source, const nn::Model& model, dist::DataParallel& dp,
                       dist::Communicator& comm);

}  // namespace trainer::app
