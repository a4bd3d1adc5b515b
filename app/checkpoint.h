// Checkpoints: a directory per step, written as step-N.tmp/, fsynced, then renamed to step-N/;
// `latest`, a symlink, is replaced atomically after that (Note [Live readers]). A checkpoint holds
// the model's fp32 masters and AdamW moments, the trainer state (JSON), the resolved config, the
// tokenizer and a manifest of sizes and CRC-32s that loading verifies first. The tensors are either
// whole (rank 0 of a replicated run writes model.safetensors with Hugging Face GPT-2 names and
// optimizer.safetensors) or sharded (each rank of a sharded run writes its own slices to
// shard-R-of-N.safetensors, in parallel); the manifest gives every file's global flat ranges,
// so either kind loads at any world size and sharding stage (Note [Sharded checkpoints]).
// Writing one is app/checkpoint_save.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/run_checkpoints.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "nn/model.h"
#include "runtime/file_io.h"

namespace trainer::app {

// Everything besides tensors that a resumed run needs to continue bit for bit.
struct TrainerState {
  int64_t step = 0;         // optimizer steps completed
  int64_t tokens_seen = 0;  // loss tokens over all ranks
  int world_size = 1;
  int tensor_parallel = 1;    // of world_size (Note [Parallel grid]); data-parallel: the quotient
  int pipeline_parallel = 1;  // likewise (the stages)
  uint64_t tokenizer_hash = 0;
  uint64_t data_hash = 0;  // of the corpus's manifest.json (0: not recorded)
  nlohmann::json loader;   // data::LoaderState
  int threads = 0;  // each rank's CPU threads (OpenMP's): oneDNN splits sums by them (0: unknown)
  std::vector<std::string> hosts;  // each rank's host, by rank (empty: not recorded)
  nlohmann::json spike_guard;      // SpikeGuard::state() (null: saved without the guard)
};

// A verified checkpoint directory: the manifest was read, every file it lists mapped and its
// size and CRC-32 checked, and the trainer state and tokenizer cross-checked against it.
// Everything is read from those mappings, so the checkpoint stays whole for its reader even
// if a live run deletes it meanwhile.
struct Checkpoint {
  std::filesystem::path dir;
  std::filesystem::path
      tokenizer;  // dir/tokenizer.model (checked against state.tokenizer_hash), or empty
  TrainerState state;
  std::string config_yaml;
  nlohmann::json manifest;
  std::map<std::string, std::shared_ptr<const MappedFile>> files;  // by name, as listed
  // The bytes of a listed file.
  std::string_view bytes(const std::string& file) const;
};
// Opens the checkpoint in `dir`; throws naming the file on any mismatch.
Checkpoint open_checkpoint(const std::filesystem::path& dir);
// Opens `dir` when it is a checkpoint, else the latest checkpoint of the run directory `dir`
// (a newer one if a live run prunes it while it is being opened); throws when it is neither.
Checkpoint open_checkpoint_of(const std::filesystem::path& dir);

// The parts of open_checkpoint that read no file (also the fuzz targets' entry points): a
// manifest's text, checked for form, version, plain file names and the required files; and a
// trainer state's text, checked for every field. Each throws a one-line trainer::Error
// naming `where`.
nlohmann::json parse_checkpoint_manifest(const std::string& text, const std::string& where);
TrainerState parse_trainer_state(const std::string& text, const std::string& where);

// The state a checkpoint holds, read by flat range of `layout` (the whole model, or a slice of
// it at any tensor-parallel degree) whichever way and at whichever degree it was written
// (checkpoint_tensors.cpp).
class CheckpointTensors {
 public:
  // Throws naming the file when a tensor is missing or does not fit `layout` (a checkpoint
  // of another model).
  CheckpointTensors(const Checkpoint& ckpt, const nn::ParamLayout& layout);
  ~CheckpointTensors();
  // fp32 masters of flat elements [begin, end) of `layout` into out (alignment gaps read as
  // zero).
  void read_params(int64_t begin, int64_t end, float* out) const;
  // AdamW moments of [begin, end).
  void read_moments(int64_t begin, int64_t end, float* m, float* v) const;
  int64_t optimizer_steps() const { return steps_; }

 private:
  struct Source;
  using Sources = std::vector<std::vector<Source>>;  // by the writer's tensor rank
  void map_layouts(const Checkpoint& ckpt);
  void add_whole_files(const Checkpoint& ckpt);
  void add_shards(const Checkpoint& ckpt);
  static int64_t copy_from(const std::vector<Source>& from, int64_t at, int64_t n, float* out);
  void read(const Sources& from, int64_t begin, int64_t end, float* out) const;
  std::map<std::string, std::shared_ptr<const MappedFile>> mapped_;  // what Sources point into
  nn::ParamLayout target_;                   // a copy: names, shapes and offsets
  int degree_ = 1;                           // the writers' tensor-parallel degree
  std::unique_ptr<nn::ParamLayout> source_;  // their slices' layout (the whole model at 1)
  std::vector<int> source_of_;               // target_'s parameter i is source_'s source_of_[i]
  Sources params_, m_, v_;
  int64_t steps_ = 0;
};

// Loads this rank's slices of masters and moments into `dp` (any world size and stage the
// checkpoint was written at), a piece at a time, and makes the model's weights agree.
void load_training_state(const Checkpoint& ckpt, nn::Model& model, dist::DataParallel& dp);

}  // namespace trainer::app
