// A trained model opened for eval, sample and export: its source (app/model_source.h) and its
// weights in a forward-only model on the host, with the tokenizer it was trained with.
#pragma once

#include <memory>
#include <optional>

#include "app/model_source.h"
#include "data/tokenizer.h"
#include "nn/transformer.h"

namespace trainer::app {

// The source, and its weights in a forward-only model on the host.
struct SavedModel : ModelSource {
  std::unique_ptr<nn::Transformer> model;
};

// Opens `dir` (a step directory, a run directory whose `latest` is used, or a Hugging Face
// folder: app/model_source.h) with activations for batches of up to rows x seq_len (0 = the
// config's data.batch_size / data.seq_len), in the run's precision.
SavedModel open_saved_model(const std::filesystem::path& dir, int rows = 0, int seq_len = 0);

// The tokenizer `saved` was trained with: `requested` when given (refused unless it is the
// one the checkpoint or folder holds), else the one it holds (for checkpoints written before
// they held one, the run's data.tokenizer, checked the same way). Refused when its vocabulary
// is larger than the model's.
TokenizerBytes tokenizer_of(const SavedModel& saved, const std::string& requested = "");

// The token a new document follows for `saved`: the end-of-document token `trainer prepare`
// ends documents with, or, for a published folder (one without the trainer's config), its
// beginning-of-sequence token where it has one; -1 when the tokenizer has neither.
int32_t document_start(const SavedModel& saved, const data::Tokenizer& tok);

}  // namespace trainer::app
