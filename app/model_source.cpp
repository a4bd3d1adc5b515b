// See model_source.h.
#include "app/model_source.h"

#include <nlohmann/json.hpp>

#include "app/hf_folder.h"
#include "app/run_checkpoints.h"
#include "app/run_setup.h"
#include "nn/hf_weights.h"
#include "nn/lora.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/strict_json.h"

namespace trainer::app {

namespace fs = std::filesystem;

SourceKind source_kind(const fs::path& path) {
  std::error_code ec;
  if (nn::is_peft_adapter(path)) return SourceKind::peft_adapter;
  if (nn::is_hf_folder(path)) return SourceKind::hf_folder;
  if (!fs::is_directory(path, ec)) return SourceKind::none;
  if (fs::exists(path / kCheckpointManifest, ec)) return SourceKind::checkpoint;
  return latest_checkpoint(path).empty() ? SourceKind::none : SourceKind::run_dir;
}

namespace {

// Why `path` is no model source: what it lacks of the nearest kind, by name.
std::string why_no_source(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "no such file or folder";
  if (!fs::is_directory(path, ec)) return "a file, not a folder";
  bool weights = false;
  for (const auto& e : fs::directory_iterator(path, ec))
    weights |= e.path().extension() == ".safetensors";
  const bool config = fs::exists(path / "config.json", ec);
  if (weights && !config) return "it holds safetensors weights but no config.json";
  if (config && !weights)
    return "it holds a config.json but no safetensors weights (model.safetensors, or shards "
           "with model.safetensors.index.json)";
  return fmt::format("it holds none of {}, checkpoints/ or config.json", kCheckpointManifest);
}

}  // namespace

fs::path source_dir(const fs::path& path) {
  return source_kind(path) == SourceKind::run_dir ? latest_checkpoint(path) : path;
}

std::optional<TokenizerBytes> ModelSource::own_tokenizer() const {
  if (checkpoint) {
    if (checkpoint->tokenizer.empty()) return std::nullopt;  // saved before checkpoints held one
    // From the mapping, which a live run's pruning cannot take away.
    const std::string name = checkpoint->tokenizer.filename().string();
    return TokenizerBytes{checkpoint->tokenizer, std::string(checkpoint->bytes(name))};
  }
  const std::unique_ptr<data::Tokenizer> own = hf_folder_tokenizer(dir);
  if (!own) return std::nullopt;
  return TokenizerBytes{own->path(), own->bytes()};
}

PeftAdapterConfig read_peft_adapter(const fs::path& adapter) {
  PeftAdapterConfig a{adapter / "adapter_config.json", {}, {}};
  a.config = parse_strict_json(read_file(a.file), a.file.string());
  const auto base = a.config.find("base_model_name_or_path");
  USAGE_CHECK(base != a.config.end() && base->is_string() && !base->get<std::string>().empty(),
              "{}: base_model_name_or_path names no base model", a.file.string());
  a.base = base->get<std::string>();
  USAGE_CHECK(
      source_kind(a.base) != SourceKind::none && source_kind(a.base) != SourceKind::peft_adapter,
      "{}: the base model {} is not a model folder, checkpoint or run directory here (a "
      "Hub name: download the model and write its path there)",
      a.file.string(), a.base.string());
  return a;
}

namespace {

// A PEFT adapter folder: the base its adapter_config.json names, opened, with train.lora.* set
// to the adapter's.
ModelSource open_peft_adapter(const fs::path& path, const std::string& what) {
  const PeftAdapterConfig a = read_peft_adapter(path);
  ModelSource s = open_model_source(a.base, fmt::format("{}'s base model", what));
  USAGE_CHECK(!stated_model(s.config).lora.on(),
              "{}: the base model {} has LoRA adapters of its own: name its merged export "
              "(trainer export)",
              a.file.string(), a.base.string());
  set_lora_keys(s.config, nn::lora_from_peft(a.config, stated_model(s.config), a.file.string()));
  s.config.set("train.lora.dropout",
               nn::as_decimal(nn::lora_dropout_from_peft(a.config, a.file.string())));
  s.adapter = path;
  return s;
}

}  // namespace

ModelSource open_model_source(const fs::path& path, const std::string& what) {
  ModelSource s;
  switch (source_kind(path)) {
    case SourceKind::none:
      throw UsageError(fmt::format(
          "{} is neither a checkpoint, a run directory with checkpoints nor a Hugging Face model "
          "folder (config.json and safetensors weights): {}",
          what, why_no_source(path)));
    case SourceKind::hf_folder: {
      s.dir = path;
      s.config = hf_folder_config(path);
      if (fs::is_regular_file(path / "trainer_config.yaml"))
        s.config_yaml = read_file(path / "trainer_config.yaml");
      const nlohmann::json hf =
          parse_strict_json(read_file(path / "config.json"), (path / "config.json").string());
      if (hf.contains("trainer_step") && hf["trainer_step"].is_number_integer())
        s.step = hf["trainer_step"].get<int64_t>();
      return s;
    }
    case SourceKind::peft_adapter:
      return open_peft_adapter(path, what);
    case SourceKind::checkpoint:
    case SourceKind::run_dir:
      s.checkpoint = open_checkpoint_of(path);  // a live run's latest, read safely
      s.dir = s.checkpoint->dir;
      s.step = s.checkpoint->state.step;
      s.config_yaml = s.checkpoint->config_yaml;
      s.config.merge_yaml(s.config_yaml, (s.dir / "config.yaml").string());
      return s;
  }
  return s;
}

}  // namespace trainer::app
