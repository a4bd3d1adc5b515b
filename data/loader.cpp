// Loader: prefetch thread, lockstep step planning and state (de)serialisation.
#include "data/loader.h"

#include <pthread.h>

#include <algorithm>
#include <csignal>

#include <nlohmann/json.hpp>

#include "data/batcher.h"
#include "runtime/error.h"
#include "runtime/json_number.h"
#include "runtime/log.h"
#include "runtime/trace.h"

namespace trainer::data {

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"cursor", s.cursor}};
  if (s.mixture) j["mixture"] = *s.mixture;
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  try {
    s.seed = json_integer_at<uint64_t>(j, "seed");
    s.epoch = json_integer_at<int64_t>(j, "epoch");
    s.cursor = json_integer_at<int64_t>(j, "cursor");
    s.mixture.reset();
    if (j.contains("mixture")) s.mixture = j.at("mixture").get<MixtureState>();
  } catch (const std::exception& e) {
    THROW_ERROR("malformed loader state: {}", e.what());
  }
  CHECK(s.epoch >= 0 && s.cursor >= 0, "malformed loader state: epoch {} cursor {}", s.epoch,
        s.cursor);
}

Loader::Loader(const LoaderConfig& config, int rank, int world_size,
               std::optional<LoaderState> resume)
    : config_(config), rank_(rank), world_size_(world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw UsageError(fmt::format("bad rank {} for world size {}", rank, world_size));
  if (config_.prefetch < 1) throw UsageError("loader prefetch depth must be >= 1");
  const bool mixed = !config_.mixture.sources.empty();
  TRAINER_ASSERT(!mixed || config_.max_epochs == 0, "a mixture with max_epochs");
  std::vector<std::filesystem::path> dirs = {config_.data_dir};
  if (mixed) {
    dirs.clear();
    for (const MixtureSource& s : config_.mixture.sources) dirs.push_back(s.data_dir);
  }
  for (const std::filesystem::path& dir : dirs) {
    corpora_.push_back(std::make_unique<Corpus>(
        dir, config_.split, ShardExpect{config_.vocab_size, config_.tokenizer_hash}, config_.verify,
        config_.mode != Mode::stream));
    if (corpora_.back()->has_loss_mask() && config_.mode == Mode::stream && rank == 0)
      log::warn(
          "{}: instruction data in data.mode = stream: windows cross conversations, which then "
          "attend to each other; data.mode = pack or bucket keeps each conversation apart",
          dir.string());
  }
  state_ = resume ? *resume : LoaderState{config_.seed, 0, 0, std::nullopt};
  USAGE_CHECK(!resume || resume->mixture.has_value() == mixed,
              "the checkpoint's data position is {}, but the run reads {}: its data order "
              "cannot continue",
              resume && resume->mixture ? "in a mixture of sources" : "in one corpus",
              mixed ? "a mixture (data.sources)" : "one corpus (data.path)");
  seed_ = state_.seed;
  if (resume && resume->seed != config_.seed)
    log::warn("loader: resuming with the checkpoint's seed {} (config says {})", resume->seed,
              config_.seed);
  PlanConfig pc{config_.mode,       config_.batch_size, config_.seq_len,
                config_.max_tokens, state_.seed,        config_.drop_last};
  if (mixed) {
    std::vector<const Corpus*> corpora;
    for (const auto& c : corpora_) corpora.push_back(c.get());
    mixture_ = std::make_unique<Mixture>(config_.mixture, pc, corpora, state_.mixture);
    state_.mixture = mixture_->state();
  } else {
    planner_ = std::make_unique<EpochPlanner>(pc, corpora_.front()->docs());
    planner_->start(state_.epoch);
    // A cursor past the epoch's end (a checkpoint whose last step was padded by wrapping
    // around, as trainers before Note [Global order]'s rule did) leaves it at the end.
    planner_->skip(state_.cursor);
  }
  thread_ = std::thread([this] { run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {

// What a batch's arrays hold.
int64_t bytes_of(const std::optional<Batch>& b) {
  if (!b) return 0;
  const size_t n = b->tokens.size() + b->targets.size() + b->segments.size() + b->lengths.size();
  return int64_t(n * sizeof(int32_t));
}

}  // namespace

int64_t Loader::planned_bytes(const LoaderConfig& c) {
  // Tokens and targets always; segments (pack) or lengths (bucket, at most a row per token).
  const bool bucket = c.mode == Mode::bucket;
  const int64_t tokens =
      bucket && c.max_tokens > 0 ? c.max_tokens : int64_t(c.batch_size) * c.seq_len;
  const int64_t values = 2 * tokens + (bucket ? tokens : c.mode == Mode::pack ? tokens : 0);
  // The queue's `prefetch` and the one being made while it is full.
  return int64_t(c.prefetch + 1) * values * int64_t(sizeof(int32_t));
}

void Loader::run() {
  // Signals are for the thread that trains (a stop request), never for this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  trace::name_thread("loader");
  try {
    while (true) {
      Item item;
      std::vector<std::pair<int, BatchPlan>> plans = next_round();
      if (int(plans.size()) > rank_) {
        const trace::Span span("make batch", "loader");
        const auto& [source, plan] = plans[size_t(rank_)];
        item.batch = make_batch(plan, config_.mode, *corpora_[size_t(source)]);
        if (mixture_)
          item.after = {seed_, 0, 0, mixture_->state()};
        else
          item.after = {seed_, planner_->epoch(), planner_->drawn(), std::nullopt};
      }
      bool last = !item.batch;
      std::unique_lock<std::mutex> lock(mu_);
      // Counted from now (made, waiting for room) until next() hands it out.
      queued_bytes_ += bytes_of(item.batch);
      peak_queued_ = std::max(peak_queued_.load(), queued_bytes_);
      cv_.wait(lock, [&] { return stop_ || int(queue_.size()) < config_.prefetch; });
      if (stop_) return;
      queue_.push_back(std::move(item));
      cv_.notify_all();
      if (last) return;
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

// The round's global batches, one a rank, each with the source it is from (0 for one corpus).
std::vector<std::pair<int, BatchPlan>> Loader::next_round() {
  std::vector<std::pair<int, BatchPlan>> plans;
  if (mixture_) {
    while (int(plans.size()) < world_size_)
      if (auto p = mixture_->next())
        plans.push_back(std::move(*p));
      else
        break;
    return plans;
  }
  auto within_epochs = [&] {
    return config_.max_epochs == 0 || planner_->epoch() < config_.max_epochs;
  };
  if (!within_epochs()) return plans;
  for (BatchPlan& p : planner_->take(world_size_)) plans.emplace_back(0, std::move(p));
  // The round goes on into the next epoch (Note [Global order]), unless that is past the last.
  while (int(plans.size()) < world_size_) {
    CHECK(planner_->drawn() > 0,
          "{}: split '{}' yields no batch per epoch (too small for this batch size with "
          "data.drop_last)",
          config_.data_dir.string(), config_.split);
    planner_->start(planner_->epoch() + 1);
    if (!within_epochs()) break;
    for (BatchPlan& p : planner_->take(world_size_ - int(plans.size())))
      plans.emplace_back(0, std::move(p));
  }
  return plans;
}

std::optional<Batch> Loader::next() {
  if (finished_) return std::nullopt;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_; });
  if (queue_.empty()) std::rethrow_exception(error_);
  Item item = std::move(queue_.front());
  queue_.pop_front();
  queued_bytes_ -= bytes_of(item.batch);
  cv_.notify_all();
  if (!item.batch) {
    finished_ = true;
    return std::nullopt;
  }
  state_ = item.after;
  return std::move(item.batch);
}

}  // namespace trainer::data
