// The training data loader: plans lockstep steps over a prepared split, materialises this
// rank's batches on a prefetch thread, and exposes a small resumable state for checkpoints.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <thread>

#include "data/batch.h"
#include "data/corpus.h"
#include "data/mixture.h"
#include "data/plan.h"

namespace trainer::data {

struct LoaderConfig {
  std::filesystem::path data_dir;  // a directory written by `trainer prepare`
  std::string split = "train";
  Mode mode = Mode::stream;
  int batch_size = 8;      // B (stream, pack)
  int seq_len = 1024;      // T (stream, pack); longest row (bucket)
  int64_t max_tokens = 0;  // bucket: padded tokens per batch
  uint64_t seed = 0;
  bool drop_last = true;        // stream: drop a last batch of fewer than B windows, else wrap
  int prefetch = 4;             // K batches kept ready
  int64_t max_epochs = 0;       // 0 = infinite
  uint32_t vocab_size = 0;      // checked against the shards when non-zero
  uint64_t tokenizer_hash = 0;  // checked against the shards when non-zero
  Verify verify = Verify::all;  // when each shard's payload is checked
  // Two or more sources: the split `split` of each, mixed by weight (data/mixture.h) instead of
  // data_dir's; max_epochs must then be 0 (each source has its own bound).
  MixtureConfig mixture;
};

// Where a loader stands: after `cursor` global batches (all ranks together) of `epoch`; for a
// mixture, where the mixture stands instead.
struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t cursor = 0;
  std::optional<MixtureState> mixture;
  bool operator==(const LoaderState&) const = default;
};

void to_json(nlohmann::json& j, const LoaderState& s);
void from_json(const nlohmann::json& j, LoaderState& s);

class Loader {
 public:
  // Opens the split (validating every shard) and starts prefetching from `resume` (or the
  // beginning with config.seed). Throws trainer::Error / UsageError.
  Loader(const LoaderConfig& config, int rank, int world_size,
         std::optional<LoaderState> resume = std::nullopt);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's next batch; nullopt once max_epochs epochs are done (or a mixture's sources).
  std::optional<Batch> next();
  // The position after the last batch next() returned (not the prefetcher's).
  LoaderState state() const { return state_; }
  // The split read (a mixture's first source's), and every source's.
  const Corpus& corpus() const { return *corpora_.front(); }
  const std::vector<std::unique_ptr<Corpus>>& corpora() const { return corpora_; }
  const LoaderConfig& config() const { return config_; }
  // The most bytes the batches made and not yet handed out (the queue's and the one being
  // made) have held at once, and the most they may hold (planned_bytes: `prefetch` + 1 of the
  // largest batch the config makes).
  int64_t peak_queued_bytes() const { return peak_queued_.load(); }
  static int64_t planned_bytes(const LoaderConfig& config);

 private:
  struct Item {
    std::optional<Batch> batch;
    LoaderState after;
  };
  void run();
  // The next lockstep round's global batches, one per rank: fewer (or none) only once the last
  // epoch (max_epochs) ends.
  std::vector<std::pair<int, BatchPlan>> next_round();

  LoaderConfig config_;
  int rank_, world_size_;
  std::vector<std::unique_ptr<Corpus>> corpora_;  // data_dir's, or each source's
  std::unique_ptr<EpochPlanner> planner_;         // one corpus
  std::unique_ptr<Mixture> mixture_;              // or several
  LoaderState state_;                             // owned by the caller's thread
  uint64_t seed_ = 0;
  bool finished_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  int64_t queued_bytes_ = 0;  // of the batches made and not yet handed out (under mu_)
  std::atomic<int64_t> peak_queued_{0};
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainer::data
