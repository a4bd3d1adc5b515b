// Writing a checkpoint (what one holds, and reading it: app/checkpoint.h) in three phases:
// begin, a collective (the temporary directory, this rank's part); this rank's write; and
// commit, a collective (the manifest, the rename, `latest`, retention). A synchronous save runs
// them back to back from the live state; an asynchronous one writes a snapshot on a thread of
// its own while training goes on (Note [Asynchronous checkpoints]).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/checkpoint.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "dist/grid_shape.h"
#include "nn/model.h"
#include "runtime/buffer.h"
#include "runtime/file_io.h"
#include "runtime/safetensors.h"
#include "runtime/timer.h"

namespace trainer::app {

struct SaveOptions {
  CheckpointPolicy policy;
  bool prune_all = false;   // apply the policy to checkpoints written under another (--force)
  double timeout_s = 1800;  // how long ranks wait for each other's writes (checkpoint.timeout_s)
};

// Note [Asynchronous checkpoints]
// Under checkpoint.async the step waits only for a copy of what this rank writes (its fp32
// masters and both AdamW moments, as its flat buffer holds them) into a SaveSnapshot, host
// memory allocated (and its pages touched) once at start-up and counted in the plan as
// `checkpoint`; a thread then writes the files from the copy while training goes on, at idle
// priority (SCHED_IDLE): on cores the training keeps busy the steps keep their speed and the
// write takes longer. The ranks learn that every write has
// ended from the step's agreement (StepFlags::save_writing), so all of them commit at the same
// step boundary: the manifest, the rename and `latest`, exactly as a synchronous save, and
// `latest` never names a checkpoint before every file of it is written and fsynced. A write
// that failed is reported at that boundary and ends the run, the previous checkpoint intact
// (the temporary is removed). The next save, a stop signal, a spike, a step that is not
// finite, a Join failure and the run's end wait for the write in flight and commit it first
// (each is decided alike on every rank); the writer leaves SCHED_IDLE while it is waited for.
// A rank killed or failing alone meanwhile leaves only a step-N.tmp without a manifest, which
// is never read, and `latest` at the save before. Only periodic saves (checkpoint.every) run
// in the background, so only then is the copy kept. The written bytes equal a synchronous
// save's. A launcher that binds a rank to one core (mpirun --bind-to core) binds its writer
// too, which then runs only when that core idles.

// This rank's flat state as a save writes it: `elements` fp32 values each of the masters and
// the two moments, each in host memory or produced a piece at a time as the file is written.
struct LocalState {
  struct Flat {
    const float* host = nullptr;   // the values, or
    SafetensorsWriter::Fill fill;  // elements [begin, end) of them into `out`
    // Adds `shape` elements from `offset` on to `w`, named `name`.
    void add(SafetensorsWriter& w, std::string name, std::vector<int64_t> shape,
             int64_t offset) const;
  };
  int64_t elements = 0;
  Flat masters, m, v;
  int64_t optimizer_steps = 0;
};

// Host memory for a copy of this rank's LocalState (three times the masters' bytes), counted
// as MemoryUse::checkpoint and reused by every save of the run.
class SaveSnapshot {
 public:
  explicit SaveSnapshot(int64_t elements);
  static int64_t bytes_for(int64_t elements) { return 3 * elements * int64_t(sizeof(float)); }
  int64_t bytes() const { return int64_t(buffer_.bytes()); }
  // Copies `dp`'s state in (the step's stall under checkpoint.async).
  LocalState take(dist::DataParallel& dp, const nn::Model& model);

 private:
  int64_t elements_;
  Buffer buffer_;  // masters, then m, then v
};

// Whether this rank writes tensor files in a save of this run (Note [Sharded checkpoints]):
// only those need a SaveSnapshot.
bool writes_checkpoint_tensors(int rank, const dist::GridShape& grid, dist::ShardingStage sharding);

// One save of step-<state.step> under `run_dir`/checkpoints, from begin to commit.
class CheckpointSave {
 public:
  // A collective, every rank: creates step-N.tmp and agrees on it. With `snapshot` (needed on
  // a rank that writes tensors) this rank's state is copied there and written on a thread
  // while the caller goes on; without, it is written before this returns. The model must
  // outlive the save.
  CheckpointSave(dist::Communicator& comm, const std::filesystem::path& run_dir,
                 const nn::Model& model, dist::DataParallel& dp, const TrainerState& state,
                 std::string config_yaml, std::string_view tokenizer, const SaveOptions& options,
                 SaveSnapshot* snapshot, bool in_background);
  // Waits for this rank's write; rank 0 removes the temporary of a save it did not commit.
  ~CheckpointSave();
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;

  // Whether this rank's write is still running.
  bool writing() const { return writing_.load(std::memory_order_acquire); }
  // A collective: waits for this rank's write, then rank 0 writes the state, config, tokenizer
  // and manifest, renames the temporary, repoints `latest` and prunes old checkpoints written
  // under the same policy (Note [Retention]). Ranks wait for each other under
  // options.timeout_s, not the collective timeout, and an error names a rank that was late. On
  // a failed write (a full disk) throws on every rank naming the file; `latest` still names
  // the previous checkpoint and the partial one is removed. Returns the checkpoint directory.
  std::filesystem::path commit();

  double begin_s() const { return begin_s_; }  // the constructor's time: the caller's stall
  double write_s() const { return write_s_; }  // this rank's write, after the begin

 private:
  void write();
  void write_whole(nlohmann::json& files);

  dist::Communicator& comm_;
  std::filesystem::path tmp_, final_dir_;
  const nn::ParamLayout& layout_;
  TrainerState state_;
  std::string config_yaml_, tokenizer_;
  SaveOptions options_;
  dist::GridShape grid_;
  std::string stage_;      // the sharding stage's name
  bool sharded_ = false;   // a sharding stage over the data group
  bool writes_ = false;    // this rank writes tensor files
  nlohmann::json ranges_;  // this rank's shard ranges
  LocalState local_;
  // Set by write(), read after it ended.
  nlohmann::json files_ = nlohmann::json::object();  // a whole save's tensor files
  std::vector<int64_t> shard_info_ = {0, 0};         // crc, bytes
  std::string error_;
  double begin_s_ = 0, write_s_ = 0;
  std::optional<RemoveUnlessKept> litter_;  // rank 0: the temporary, unless committed
  std::atomic<bool> writing_{false};
  std::thread thread_;
};

// A synchronous save (begin, write and commit as CheckpointSave describes); every rank calls
// it. Returns the checkpoint directory on every rank.
std::filesystem::path save_checkpoint(dist::Communicator& comm,
                                      const std::filesystem::path& run_dir, nn::Model& model,
                                      dist::DataParallel& dp, const TrainerState& state,
                                      const std::string& config_yaml, std::string_view tokenizer,
                                      const SaveOptions& options);

}  // namespace trainer::app
