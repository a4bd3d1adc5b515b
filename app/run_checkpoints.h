// The checkpoints of a run directory (Note [Live readers], Note [Retention]): which one is
// current (the `latest` link), the list of complete ones, putting a finished save into place,
// pruning, and finishing a save that was killed. What a checkpoint holds and how it is read
// and written is app/checkpoint.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainer::app {

// The file that makes a directory a checkpoint (written last, listing all the others).
inline constexpr const char* kCheckpointManifest = "manifest.json";

struct CheckpointPolicy {
  int64_t keep_last = 3;
  int64_t keep_every = 0;
};

// The policy as a checkpoint's manifest records it ("retention").
nlohmann::json retention_json(const CheckpointPolicy& policy);

// Renames the complete temporary `tmp` (run_dir/checkpoints/step-N.tmp) to step-N, then points
// `latest` at it and prunes the older checkpoints saved under `policy` (all of them with
// `prune_all`). Rank 0 of a save, after everything in `tmp` is written and fsynced.
void commit_checkpoint(const std::filesystem::path& tmp, const CheckpointPolicy& policy,
                       bool prune_all);

// The checkpoint `latest` points at under run_dir, or the newer complete one that a save
// killed before repointing the link left; an empty path when the run has none. Writes nothing.
std::filesystem::path latest_checkpoint(const std::filesystem::path& run_dir);

// For the trainer that holds the run's lock, at start-up: a save killed after its temporary
// was complete (its manifest written) but before it was renamed left a whole checkpoint under
// step-N.tmp; it is renamed to step-N (removed if step-N exists), and `latest` follows it.
void finish_interrupted_saves(const std::filesystem::path& run_dir);

// Points run_dir's `latest` at `checkpoint` (a step-N directory of that run), atomically.
void repoint_latest(const std::filesystem::path& run_dir, const std::filesystem::path& checkpoint);

// The complete checkpoints (step-N directories) under run_dir, by step.
std::vector<std::pair<int64_t, std::filesystem::path>> list_checkpoints(
    const std::filesystem::path& run_dir);

// `dir` itself when it is a checkpoint, else the checkpoint `latest` names in the run directory
// `dir`; throws when it is neither.
std::filesystem::path checkpoint_dir_of(const std::filesystem::path& dir);

}  // namespace trainer::app
