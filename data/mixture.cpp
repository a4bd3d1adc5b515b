// See mixture.h.
//
// Note [Mixtures]
// A mixture is a sequence of global batches, each planned whole from one source by that
// source's own EpochPlanner (its documents shuffled under a seed of its own, its epochs
// following each other). The sequence does not depend on the world size, as a single corpus's
// does (Note [Global order] in plan.cpp): the loader deals it to the ranks round by round, so
// a step's global batch, and a resume at another world size that keeps the global batch, are
// the same.
//
// The rule. Let w_s(n) be source s's weight at global batch n (the phase of the step batch n
// belongs to), normalised over the sources still active, and due_s(n) = w_s(0) + ... +
// w_s(n-1) its share of the first n batches. Batch n comes from the active source with the
// largest due_s(n+1) - count_s(n), count_s(n) being the batches it gave so far; the first such
// source on a tie. So at every n each source has given its share within one batch:
// |count_s(n) - due_s(n)| < 1 (tests/data/mixture_test.cpp checks it over random weights and
// phase changes), and, every batch of a stream or pack run holding B x T tokens, its tokens
// are its share of the tokens within one batch's worth. A bounded source leaves the mixture
// after its epochs; the others' weights are renormalised from there on. When every source is
// bounded and spent, the data ends (as data.epochs ends a single corpus); a phase whose
// weighted sources are all spent while others are not is refused by name. The state (each
// source's epoch and cursor, counts, dues, tokens and the batches drawn) is a few numbers per
// source, saved in checkpoints; the dues are summed in one order everywhere, so a resumed run
// draws the same batches.
#include "data/mixture.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::data {

void to_json(nlohmann::json& j, const MixtureState& s) {
  j = nlohmann::json{{"batches", s.batches}, {"epoch", s.epoch}, {"cursor", s.cursor},
                     {"count", s.count},     {"due", s.due},     {"tokens", s.tokens}};
}

void from_json(const nlohmann::json& j, MixtureState& s) {
  try {
    j.at("batches").get_to(s.batches);
    j.at("epoch").get_to(s.epoch);
    j.at("cursor").get_to(s.cursor);
    j.at("count").get_to(s.count);
    j.at("due").get_to(s.due);
    j.at("tokens").get_to(s.tokens);
  } catch (const std::exception& e) {
    THROW_ERROR("malformed mixture state: {}", e.what());
  }
  const size_t n = s.epoch.size();
  CHECK(s.batches >= 0 && n > 0 && s.cursor.size() == n && s.count.size() == n &&
            s.due.size() == n && s.tokens.size() == n,
        "malformed mixture state: {} sources' epochs but {} cursors, {} counts, {} dues", n,
        s.cursor.size(), s.count.size(), s.due.size());
}

int pick_source(const std::vector<double>& due_next, const std::vector<int64_t>& count,
                const std::vector<bool>& active) {
  int best = -1;
  for (size_t s = 0; s < count.size(); ++s)
    if (active[s] && (best < 0 || due_next[s] - double(count[s]) >
                                      due_next[size_t(best)] - double(count[size_t(best)])))
      best = int(s);
  return best;
}

Mixture::Mixture(const MixtureConfig& config, const PlanConfig& plan,
                 const std::vector<const Corpus*>& corpora, std::optional<MixtureState> resume)
    : config_(config) {
  const size_t n = config.sources.size();
  TRAINER_ASSERT(n >= 1 && corpora.size() == n, "a mixture of {} sources over {} corpora", n,
                 corpora.size());
  TRAINER_ASSERT(config.batches_per_step >= 1, "{} batches per step", config.batches_per_step);
  if (resume) {
    USAGE_CHECK(resume->epoch.size() == n,
                "the checkpoint's data position is a mixture of {} sources, but data.sources "
                "names {}",
                resume->epoch.size(), n);
    state_ = *resume;
  } else {
    state_.epoch.assign(n, 0);
    state_.cursor.assign(n, 0);
    state_.count.assign(n, 0);
    state_.due.assign(n, 0.0);
    state_.tokens.assign(n, 0);
  }
  first_batch_ = state_.batches;
  for (size_t s = 0; s < n; ++s) {
    PlanConfig pc = plan;
    pc.seed = plan.seed ^ hash64(fmt::format("data.sources[{}]", s));
    planners_.push_back(std::make_unique<EpochPlanner>(pc, corpora[s]->docs()));
    planners_.back()->start(state_.epoch[s]);
    planners_.back()->skip(state_.cursor[s]);
  }
}

// The normalised weights at global batch `batch`, the spent sources' 0.
std::vector<double> Mixture::weights_at(int64_t batch) const {
  const int64_t step = config_.first_step + (batch - first_batch_) / config_.batches_per_step;
  std::vector<double> w;
  for (const MixtureSource& s : config_.sources) w.push_back(s.weight);
  for (const WeightPhase& p : config_.phases)
    if (p.step <= step) w = p.weights;
  double sum = 0;
  for (size_t s = 0; s < w.size(); ++s) {
    const int64_t bound = config_.sources[s].max_epochs;
    if (bound > 0 && state_.epoch[s] >= bound) w[s] = 0;
    sum += w[s];
  }
  for (double& x : w) x = sum > 0 ? x / sum : 0;
  return w;
}

std::optional<std::pair<int, BatchPlan>> Mixture::next() {
  for (;;) {
    const std::vector<double> w = weights_at(state_.batches);
    std::vector<double> due_next = state_.due;
    std::vector<bool> active(w.size());
    for (size_t s = 0; s < w.size(); ++s) {
      due_next[s] += w[s];
      active[s] = w[s] > 0;
    }
    const int s = pick_source(due_next, state_.count, active);
    if (s < 0) {  // the data ends when every source is spent, not when a phase weighs none
      bool spent = true;
      for (size_t i = 0; i < w.size(); ++i)
        spent &=
            config_.sources[i].max_epochs > 0 && state_.epoch[i] >= config_.sources[i].max_epochs;
      USAGE_CHECK(spent,
                  "data.sources: at global batch {} every source with weight in this phase has "
                  "given its epochs, and the others weigh 0 here: give them weight in "
                  "data.sources_schedule, or raise the spent sources' EPOCHS",
                  state_.batches);
      return std::nullopt;
    }
    EpochPlanner& p = *planners_[size_t(s)];
    std::optional<BatchPlan> plan = p.next();
    if (!plan) {  // its epoch ended: the next one, unless that is past its bound
      CHECK(p.drawn() > 0,
            "{}: the train split yields no batch per epoch (too small for this batch size with "
            "data.drop_last)",
            config_.sources[size_t(s)].data_dir.string());
      p.start(p.epoch() + 1);
      state_.epoch[size_t(s)] = p.epoch();
      state_.cursor[size_t(s)] = 0;
      continue;  // the weights change when it was its last epoch
    }
    state_.due = due_next;
    state_.count[size_t(s)] += 1;
    state_.cursor[size_t(s)] = p.drawn();
    state_.tokens[size_t(s)] += plan->real_tokens;
    state_.batches += 1;
    return std::make_pair(s, std::move(*plan));
  }
}

}  // namespace trainer::data
