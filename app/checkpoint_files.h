// The names and format version of a checkpoint's files, shared by its writer
// (checkpoint_save.cpp) and its readers (checkpoint.cpp, checkpoint_tensors.cpp). Internal to
// app/.
#pragma once

#include "app/run_checkpoints.h"

namespace trainer::app {

// Version 2 adds each tensor file's own header (step, and a shard's rank, world, stage and
// ranges; Note [Self-describing files]) and the retention policy the checkpoint was written
// under; version 1 checkpoints still load, without those cross-checks.
inline constexpr int kFormatVersion = 2;
inline constexpr int kOldestReadable = 1;

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "trainer_state.json";
inline constexpr const char* kConfigFile = "config.yaml";
inline constexpr const char* kManifestFile = kCheckpointManifest;
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.model", "tokenizer.json"};

}  // namespace trainer::app
