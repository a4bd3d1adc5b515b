// Where saved weights come from, classified in one place: a Hugging Face model folder
// (config.json and safetensors weights, such as `trainer export` writes), a checkpoint (a step
// directory), a run directory, which stands for the checkpoint its `latest` names, or a PEFT
// LoRA adapter folder, which stands for the base model its adapter_config.json names (a path
// here) with the adapters on it.
// train.init_from, eval, sample, export and inspect open their model through here, and its
// tokenizer is found here.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "app/checkpoint.h"
#include "app/config.h"

namespace trainer::app {

// What a path names: a Hugging Face folder, a checkpoint's step directory, a run directory
// with checkpoints, or none of them.
enum class SourceKind : uint8_t { hf_folder, checkpoint, run_dir, peft_adapter, none };

// What `path` is (a run directory only while it has a checkpoint).
SourceKind source_kind(const std::filesystem::path& path);
// The directory `path` stands for: the checkpoint a run directory's `latest` names now, else
// `path` itself.
std::filesystem::path source_dir(const std::filesystem::path& path);

// A tokenizer's one-file bytes (data::Tokenizer::bytes) and where they were read.
struct TokenizerBytes {
  std::filesystem::path from;
  std::string bytes;
};

// A model source opened: where its files are, its run's config (or a folder's model keys), and
// for a checkpoint its verified files.
struct ModelSource {
  std::filesystem::path dir;             // the checkpoint's step directory, or the folder
  std::optional<Checkpoint> checkpoint;  // opened and verified; none for a folder
  int64_t step = 0;                      // the training step of its weights (0: unknown)
  std::string config_yaml;               // the training run's config ("": a published folder)
  Config config;                         // every key: the run's, or the folder's model keys
  // A PEFT adapter's folder, whose LoRA factors go on the model above (its base; train.lora.*
  // in `config` say which); empty for the other kinds.
  std::filesystem::path adapter;
  // What reports call it: the adapter's folder, or `dir`.
  std::string name() const { return (adapter.empty() ? dir : adapter).string(); }
  // The tokenizer it holds (a checkpoint's copy, verified with it; a folder's files), or none.
  std::optional<TokenizerBytes> own_tokenizer() const;
};

// A PEFT adapter folder's adapter_config.json (`file`, parsed) and the base model it names,
// a model source here that is not itself an adapter (a UsageError naming the file otherwise).
struct PeftAdapterConfig {
  std::filesystem::path file, base;
  nlohmann::json config;
};
PeftAdapterConfig read_peft_adapter(const std::filesystem::path& adapter);

// Opens `path` (a checkpoint's files verified against its manifest; no weights read). A path
// that is none of the four is a UsageError naming `what` ("train.init_from = <path>", or the
// path itself).
ModelSource open_model_source(const std::filesystem::path& path, const std::string& what);

}  // namespace trainer::app
