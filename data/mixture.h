// Training data drawn from several prepared corpora by weight, with weights that may change by
// step (data.sources, data.sources_schedule): which source gives each global batch
// (Note [Mixtures] in mixture.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/corpus.h"
#include "data/plan.h"

namespace trainer::data {

struct MixtureSource {
  std::filesystem::path data_dir;  // a prepared corpus; its "train" split is read
  double weight = 1;               // relative; the active sources' weights are normalised
  int64_t max_epochs = 0;          // its epochs at most, then it leaves the mixture (0: repeats)
};

// Each source's weight from `step` on (in the sources' order).
struct WeightPhase {
  int64_t step = 0;
  std::vector<double> weights;
};

struct MixtureConfig {
  std::vector<MixtureSource> sources;  // two or more
  std::vector<WeightPhase> phases;     // by increasing step, each after step 0
  // How global batches map to steps: the loader starts at step first_step, and each step takes
  // batches_per_step global batches (all ranks' micro-batches together).
  int64_t first_step = 0;
  int64_t batches_per_step = 1;
};

// Where a mixture stands: global batches drawn, and per source its planner's place, the
// batches it gave, its share of them due so far (the sum of its normalised weight over those
// batches) and the real tokens it gave.
struct MixtureState {
  int64_t batches = 0;
  std::vector<int64_t> epoch, cursor, count;
  std::vector<double> due;
  std::vector<int64_t> tokens;
  bool operator==(const MixtureState&) const = default;
};
void to_json(nlohmann::json& j, const MixtureState& s);
void from_json(const nlohmann::json& j, MixtureState& s);

// The source that gives the next batch (Note [Mixtures]): the active one furthest behind its
// due share after this batch, due_next[s] - count[s], the first on a tie; -1 when none is active.
int pick_source(const std::vector<double>& due_next, const std::vector<int64_t>& count,
                const std::vector<bool>& active);

class Mixture {
 public:
  // Plans over each source's corpus (the caller keeps them alive) with `plan`'s shape, each
  // source shuffled under a seed of its own; from `resume` (planned at config.first_step) or
  // the start. Throws UsageError when a resumed state does not fit the sources.
  Mixture(const MixtureConfig& config, const PlanConfig& plan,
          const std::vector<const Corpus*>& corpora, std::optional<MixtureState> resume);
  // The next global batch and the source it is from; nullopt once every source is bounded and
  // spent.
  std::optional<std::pair<int, BatchPlan>> next();
  const MixtureState& state() const { return state_; }

 private:
  std::vector<double> weights_at(int64_t batch) const;

  MixtureConfig config_;
  std::vector<std::unique_ptr<EpochPlanner>> planners_;
  int64_t first_batch_ = 0;  // the global batch at config_.first_step
  MixtureState state_;
};

}  // namespace trainer::data
