// A trained model opened from a checkpoint directory for eval, sample and export: its config
// (from the checkpoint itself) and weights, verified by the checkpoint's manifest, in a
// forward-only model.
#pragma once

#include <memory>

#include "app/checkpoint.h"
#include "app/config.h"
#include "nn/transformer.h"

namespace trainer::app {

struct SavedModel {
  Checkpoint checkpoint;
  Config config;
  std::unique_ptr<nn::Transformer> model;
};

// Opens `dir` (a step directory, or a run directory whose `latest` is used) with activations
// for batches of up to rows x seq_len (0 = the config's data.batch_size / data.seq_len), in
// the run's precision.
SavedModel open_saved_model(const std::filesystem::path& dir, int rows = 0, int seq_len = 0);

// A tokenizer's .model bytes and the file they were read from.
struct TokenizerBytes {
  std::filesystem::path from;
  std::string bytes;
};

// The tokenizer `saved` was trained with: `requested` when given (refused unless it is the
// checkpoint's), else the copy inside the checkpoint (or, for checkpoints written before
// they held one, the run's data.tokenizer, checked the same way).
TokenizerBytes tokenizer_of(const SavedModel& saved, const std::string& requested = "");

}  // namespace trainer::app
