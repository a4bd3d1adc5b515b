// Fine-tuning from saved weights; see init_from.h.
#include "app/init_from.h"

#include <algorithm>
#include <vector>

#include "data/tokenizer.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/memory.h"
#include "runtime/safetensors.h"

namespace trainer::app {

namespace fs = std::filesystem;

const std::initializer_list<const char*>& model_keys() {
  static const std::initializer_list<const char*> keys = {
      "model.arch",       "model.vocab_size", "model.max_seq_len",
      "model.n_layer",    "model.n_head",     "model.n_embd",
      "model.n_kv_head",  "model.ffn_hidden", "model.ffn_multiple_of",
      "model.rope_theta", "model.rotary_pct", "model.tie_embeddings"};
  return keys;
}

InitSource open_init_source(const fs::path& from, const Config& run_config,
                            uint64_t tokenizer_hash) {
  InitSource s;
  std::string config_yaml, tokenizer;  // the source's tokenizer .model, if it has one
  const bool exported = fs::is_regular_file(from / "model.safetensors") &&
                        fs::is_regular_file(from / "trainer_config.yaml");
  if (exported) {
    s.dir = from;
    config_yaml = read_file(from / "trainer_config.yaml");
    if (fs::is_regular_file(from / "tokenizer.model"))
      tokenizer = read_file(from / "tokenizer.model");
  } else {
    if (!fs::is_directory(from))
      throw UsageError(fmt::format(
          "train.init_from = {} is neither a checkpoint, a run directory nor an exported model",
          from.string()));
    s.checkpoint = open_checkpoint_of(from);
    s.dir = s.checkpoint->dir;
    config_yaml = s.checkpoint->config_yaml;
    if (!s.checkpoint->tokenizer.empty())  // from the mapping: a live run may prune the file
      tokenizer = s.checkpoint->bytes(s.checkpoint->tokenizer.filename().string());
  }
  Config then;
  then.merge_yaml(config_yaml, s.dir.string());
  for (const char* key : model_keys())
    if (then.to_yaml_value(key) != run_config.to_yaml_value(key))
      throw UsageError(fmt::format(
          "train.init_from = {}: {} is {} there but {} here (another model: fine-tuning needs "
          "the same one)",
          from.string(), key, then.to_yaml_value(key), run_config.to_yaml_value(key)));
  if (tokenizer.empty())
    throw UsageError(fmt::format(
        "train.init_from = {} holds no tokenizer to check against data.tokenizer", from.string()));
  const uint64_t hash = data::tokenizer_hash(tokenizer);
  if (hash != tokenizer_hash)
    throw UsageError(fmt::format(
        "train.init_from = {} was trained with another tokenizer ({:016x}; data.tokenizer is "
        "{:016x}): its token ids would mean other pieces",
        from.string(), hash, tokenizer_hash));
  return s;
}

namespace {

// Elements [begin, end) of one tensor of an export as fp32 values in out, checked against the
// layout's shape.
void exported_tensor(const SafetensorsFile& file, const nn::ParamInfo& p, int64_t begin,
                     int64_t end, float* out) {
  CHECK(file.contains(p.name), "{}: no tensor '{}' (an export of another model?)",
        file.path().string(), p.name);
  const TensorEntry& t = file.get(p.name);
  CHECK(t.shape == p.shape && (t.dtype == DType::f32 || t.dtype == DType::bf16),
        "{}: tensor '{}' is not {} values of the model's shape", file.path().string(), p.name,
        "fp32 or bf16");
  if (t.dtype == DType::f32) {
    std::copy(static_cast<const float*>(t.data) + begin, static_cast<const float*>(t.data) + end,
              out);
  } else {
    const bf16* b = static_cast<const bf16*>(t.data);
    for (int64_t i = begin; i < end; ++i) out[i - begin] = to_float(b[i]);
  }
}

}  // namespace

void load_init_weights(const InitSource& source, const nn::Model& model, dist::DataParallel& dp) {
  if (source.checkpoint) {
    const CheckpointTensors saved(*source.checkpoint, model.layout());
    dist::set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t b, int64_t e, float* out) {
      saved.read_params(p.offset + b, p.offset + e, out);
    });
    return;
  }
  const SafetensorsFile exported(source.dir / "model.safetensors");
  dist::set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t b, int64_t e, float* out) {
    exported_tensor(exported, p, b, e, out);
  });
}

}  // namespace trainer::app
