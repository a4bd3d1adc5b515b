// Fine-tuning from saved weights; see init_from.h.
#include "app/init_from.h"

#include <algorithm>
#include <vector>

#include "app/hf_folder.h"
#include "app/run_setup.h"
#include "data/tokenizer.h"
#include "nn/hf_weights.h"
#include "runtime/error.h"
#include "runtime/file_io.h"

namespace trainer::app {

namespace fs = std::filesystem;

namespace {

// The tokenizer a Hugging Face folder holds must be data.tokenizer (the ids would mean other
// pieces otherwise).
void check_folder_tokenizer(const fs::path& from, uint64_t tokenizer_hash) {
  const std::unique_ptr<data::Tokenizer> own = hf_folder_tokenizer(from);
  if (!own)
    throw UsageError(fmt::format(
        "train.init_from = {} holds no tokenizer to check against data.tokenizer (copy the "
        "model's tokenizer.json or tokenizer.model into it)",
        from.string()));
  if (own->hash() != tokenizer_hash)
    throw UsageError(
        fmt::format("train.init_from = {} comes with another tokenizer ({:016x}; data.tokenizer is "
                    "{:016x}): its token ids would mean other pieces",
                    from.string(), own->hash(), tokenizer_hash));
}

}  // namespace

InitSource open_init_source(const fs::path& from, const Config& run_config,
                            const nn::ParamLayout& layout, uint64_t tokenizer_hash) {
  InitSource s{from, std::nullopt, nullptr};
  if (nn::is_hf_folder(from)) {
    // Its model keys are the run's already (run_training applied them: with_hf_model).
    s.folder = std::make_shared<const nn::HfWeights>(from, layout);
    check_folder_tokenizer(from, tokenizer_hash);
    return s;
  }
  if (!fs::is_directory(from))
    throw UsageError(fmt::format(
        "train.init_from = {} is neither a checkpoint, a run directory nor a Hugging Face model "
        "folder (config.json and safetensors weights)",
        from.string()));
  s.checkpoint = open_checkpoint_of(from);
  s.dir = s.checkpoint->dir;
  Config then;
  then.merge_yaml(s.checkpoint->config_yaml, s.dir.string());
  for (const char* key : model_keys())
    if (then.to_yaml_value(key) != run_config.to_yaml_value(key))
      throw UsageError(fmt::format(
          "train.init_from = {}: {} is {} there but {} here (another model: fine-tuning needs "
          "the same one)",
          from.string(), key, then.to_yaml_value(key), run_config.to_yaml_value(key)));
  // From the mapping: a live run may prune the file.
  const std::string tokenizer =
      s.checkpoint->tokenizer.empty()
          ? std::string()
          : std::string(s.checkpoint->bytes(s.checkpoint->tokenizer.filename().string()));
  if (tokenizer.empty())
    throw UsageError(fmt::format(
        "train.init_from = {} holds no tokenizer to check against data.tokenizer", from.string()));
  if (!data::tokenizer_is(tokenizer, tokenizer_hash))
    throw UsageError(fmt::format(
        "train.init_from = {} was trained with another tokenizer ({:016x}; data.tokenizer is "
        "{:016x}): its token ids would mean other pieces",
        from.string(), data::tokenizer_hash(tokenizer), tokenizer_hash));
  return s;
}

void load_init_weights(const InitSource& source, const nn::Model& model, dist::DataParallel& dp) {
  if (source.checkpoint) {
    const CheckpointTensors saved(*source.checkpoint, model.layout());
    dist::set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t b, int64_t e, float* out) {
      saved.read_params(p.offset + b, p.offset + e, out);
    });
    return;
  }
  dist::set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t b, int64_t e, float* out) {
    source.folder->read(p, b, e, out);
  });
}

}  // namespace trainer::app
