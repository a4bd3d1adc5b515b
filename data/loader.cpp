// Loader: prefetch thread, lockstep step planning and state (de)serialisation.
#include "data/loader.h"

#include <pthread.h>

#include <csignal>

#include <nlohmann/json.hpp>

#include "data/batcher.h"
#include "runtime/error.h"
#include "runtime/json_number.h"
#include "runtime/log.h"

namespace trainer::data {

void to_json(nlohmann::json& j, const LoaderState& s) {
  j = nlohmann::json{{"seed", s.seed}, {"epoch", s.epoch}, {"cursor", s.cursor}};
}

void from_json(const nlohmann::json& j, LoaderState& s) {
  try {
    s.seed = json_integer_at<uint64_t>(j, "seed");
    s.epoch = json_integer_at<int64_t>(j, "epoch");
    s.cursor = json_integer_at<int64_t>(j, "cursor");
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
  corpus_ = std::make_unique<Corpus>(config_.data_dir, config_.split,
                                     ShardExpect{config_.vocab_size, config_.tokenizer_hash},
                                     config_.verify, config_.mode != Mode::stream);
  if (corpus_->has_loss_mask() && config_.mode == Mode::stream && rank == 0)
    log::warn(
        "{}: instruction data in data.mode = stream: windows cross conversations, which then "
        "attend to each other; data.mode = pack or bucket keeps each conversation apart",
        config_.data_dir.string());
  state_ = resume ? *resume : LoaderState{config_.seed, 0, 0};
  seed_ = state_.seed;
  if (resume && resume->seed != config_.seed)
    log::warn("loader: resuming with the checkpoint's seed {} (config says {})", resume->seed,
              config_.seed);
  PlanConfig pc{config_.mode,       config_.batch_size, config_.seq_len,
                config_.max_tokens, state_.seed,        config_.drop_last};
  planner_ = std::make_unique<EpochPlanner>(pc, corpus_->docs());
  planner_->start(state_.epoch);
  // A cursor past the epoch's end (a checkpoint whose last step was padded by wrapping around,
  // as trainers before Note [Global order]'s rule did) leaves it at the end.
  planner_->skip(state_.cursor);
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

void Loader::run() {
  // Signals are for the thread that trains (a stop request), never for this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  try {
    while (true) {
      Item item;
      std::vector<BatchPlan> plans = next_round();
      if (int(plans.size()) > rank_) {
        item.batch = make_batch(plans[size_t(rank_)], config_.mode, *corpus_);
        item.after = {seed_, planner_->epoch(), planner_->drawn()};
      }
      bool last = !item.batch;
      std::unique_lock<std::mutex> lock(mu_);
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

std::vector<BatchPlan> Loader::next_round() {
  std::vector<BatchPlan> plans;
  auto within_epochs = [&] {
    return config_.max_epochs == 0 || planner_->epoch() < config_.max_epochs;
  };
  if (!within_epochs()) return plans;
  plans = planner_->take(world_size_);
  // The round goes on into the next epoch (Note [Global order]), unless that is past the last.
  while (int(plans.size()) < world_size_) {
    CHECK(planner_->drawn() > 0,
          "{}: split '{}' yields no batch per epoch (too small for this batch size with "
          "data.drop_last)",
          config_.data_dir.string(), config_.split);
    planner_->start(planner_->epoch() + 1);
    if (!within_epochs()) break;
    for (BatchPlan& p : planner_->take(world_size_ - int(plans.size())))
      plans.push_back(std::move(p));
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
  cv_.notify_all();
  if (!item.batch) {
    finished_ = true;
    return std::nullopt;
  }
  state_ = item.after;
  return std::move(item.batch);
}

}  // namespace trainer::data
