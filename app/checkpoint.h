// Checkpoints: a directory per step, written as step-N.tmp/, fsynced, then renamed to step-N/;
// `latest` is a symlink replaced atomically. A checkpoint holds the model (safetensors, Hugging
// Face GPT-2 names), the AdamW moments as global flat ranges, the trainer state (JSON), the
// resolved config and a manifest of sizes and CRC-32s that loading verifies first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/adamw.h"
#include "nn/model.h"

namespace trainer::app {

namespace fs = std::filesystem;

// Everything besides tensors that a resumed run needs to continue bit for bit.
struct TrainerState {
  int64_t step = 0;         // optimizer steps completed
  int64_t tokens_seen = 0;  // loss tokens over all ranks
  int world_size = 1;
  uint64_t tokenizer_hash = 0;
  uint64_t data_hash = 0;  // of the corpus's manifest.json (0: not recorded)
  nlohmann::json loader;   // data::LoaderState
};

struct CheckpointPolicy {
  int64_t keep_last = 3;
  int64_t keep_every = 0;
};

// Writes step-<state.step>/ under `run_dir`/checkpoints (the tokenizer's bytes too, so the
// checkpoint is self-contained), repoints `latest`, prunes old ones. Returns the checkpoint
// directory. On failure (a full disk) throws naming the file; `latest` still names the
// previous checkpoint and the partial one is removed.
fs::path save_checkpoint(const fs::path& run_dir, nn::Model& model, const nn::AdamW& opt,
                         const TrainerState& state, const std::string& config_yaml,
                         std::string_view tokenizer, const CheckpointPolicy& policy);

// A verified checkpoint directory: the manifest was read, every file's size and CRC-32
// checked, and the trainer state and tokenizer cross-checked against it. Throws naming the
// file on any mismatch.
struct Checkpoint {
  fs::path dir;
  fs::path tokenizer;  // dir/tokenizer.model (checked against state.tokenizer_hash), or empty
  TrainerState state;
  std::string config_yaml;
  nlohmann::json manifest;
};
Checkpoint open_checkpoint(const fs::path& dir);

// The parts of open_checkpoint that read no file (also the fuzz targets' entry points): a
// manifest's text, checked for form, version, plain file names and the required files; and a
// trainer state's text, checked for every field. Each throws a one-line trainer::Error
// naming `where`.
nlohmann::json parse_checkpoint_manifest(const std::string& text, const std::string& where);
TrainerState parse_trainer_state(const std::string& text, const std::string& where);

// Loads the weights into `model` (throws naming the tensor on a shape mismatch), refreshes its
// working copy and, when `opt` is given, loads the moments of its range.
void load_checkpoint(const Checkpoint& ckpt, nn::Model& model, nn::AdamW* opt);

// The checkpoint `latest` points at under run_dir, or an empty path (repairing a link that a
// save killed at its last moment left naming the temporary).
fs::path latest_checkpoint(const fs::path& run_dir);

// Points run_dir's `latest` at `checkpoint` (a step-N directory of that run), atomically.
void repoint_latest(const fs::path& run_dir, const fs::path& checkpoint);

// The complete checkpoints (step-N directories) under run_dir, by step.
std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir);

// `dir` itself when it is a checkpoint, else the checkpoint `latest` names in the run directory
// `dir`; throws when it is neither.
fs::path checkpoint_dir_of(const fs::path& dir);

}  // namespace trainer::app
