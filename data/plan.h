// Batch planning: which tokens go where in every batch, decided from document lengths alone.
// An epoch is a sequence of global batches that does not depend on the world size; a step
// deals the world size's number of consecutive global batches to the ranks. See Note [Global order]
// in plan.cpp and docs/data.md.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/sampler.h"
#include "runtime/enum_names.h"

namespace trainer::data {

enum class Mode { stream, pack, bucket };

inline constexpr EnumNames<Mode, 3> kModeNames{
    "data.mode", {{{Mode::stream, "stream"}, {Mode::pack, "pack"}, {Mode::bucket, "bucket"}}}};

struct PlanConfig {
  Mode mode = Mode::stream;
  int batch_size = 8;      // rows per batch (stream, pack)
  int seq_len = 1024;      // row length T (stream, pack); longest row (bucket)
  int64_t max_tokens = 0;  // bucket: padded tokens per batch (rows * T <= max_tokens)
  uint64_t seed = 0;
  bool drop_last = true;  // stream: drop a last batch of fewer than B windows, else wrap it
};

// Tokens [begin, begin+count) of document `doc`; `continues` when the document goes on after
// them (so the last token's target is the document's next token).
struct Piece {
  uint64_t doc = 0;
  uint64_t begin = 0;
  uint32_t count = 0;
  bool continues = false;
};

// One batch's layout.
struct BatchPlan {
  int rows = 0, T = 0;
  std::vector<uint64_t> windows;           // stream: stream offset of each row's T+1 tokens
  std::vector<std::vector<Piece>> pieces;  // pack: pieces per row; bucket: one per row
  int64_t real_tokens = 0;                 // positions that are not padding
  int64_t loss_tokens = 0;                 // targets != -1, before a loss mask (data/batch.h)
};

// The global batches of one epoch, in order. The loader takes them W at a time (one a rank) and
// goes on into the next epoch where one ends inside a step (Note [Global order] in plan.cpp).
class EpochPlanner {
 public:
  // Checks the config against the corpus (trainer::UsageError / trainer::Error) and starts
  // epoch 0.
  EpochPlanner(const PlanConfig& c, const DocIndex& docs);
  // Positions before the first batch of `epoch`.
  void start(int64_t epoch);
  // The next global batch, or nullopt when the epoch is over.
  std::optional<BatchPlan> next();
  // The next `count` global batches; fewer (or none) at the epoch's end.
  std::vector<BatchPlan> take(int count);
  // Skips n batches (O(1) in stream mode); returns how many existed.
  int64_t skip(int64_t n);
  int64_t epoch() const { return epoch_; }
  // The epoch's batches taken or skipped so far: the loader's cursor.
  int64_t drawn() const { return batch_; }

 private:
  std::optional<Piece> next_piece();
  std::optional<BatchPlan> next_stream();
  std::optional<BatchPlan> next_pack();
  std::optional<BatchPlan> next_bucket();
  void fill_bucket_window();

  PlanConfig c_;
  const DocIndex& docs_;
  int64_t epoch_ = 0;
  int64_t batch_ = 0;  // batches taken or skipped this epoch
  // stream
  uint64_t num_windows_ = 0;
  // pack / bucket: documents in permuted order, cut into pieces of at most seq_len
  Permutation perm_{0, 0};
  uint64_t doc_cursor_ = 0, piece_offset_ = 0;
  std::vector<Piece> pending_;   // pack: pieces that did not fit yet
  std::deque<BatchPlan> ready_;  // bucket: the current window's batches
  int64_t window_ = 0;
};

}  // namespace trainer::data
