// The training loop's handling of NaN and infinity; see nonfinite.h.
//
// Note [Non-finite values]
// A step whose loss or gradient norm is not finite never updates the weights. Under
// train.on_nonfinite=stop the run ends there, saving nothing; under skip it goes on, but only
// for train.max_consecutive_skips steps in a row and train.max_skips in all, then ends the
// same way, and it saves no periodic checkpoint during a streak: a run whose weights have
// diverged must not keep saving checkpoints that rotate the last good one out. And no
// checkpoint is ever written with non-finite weights: a save checks them first, on every rank,
// and refuses (`latest` keeps naming the last good one). The messages name what is not finite:
// the weights (which parameter), else the loss, else the gradient of which parameter.
#include "app/nonfinite.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/adamw.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"

namespace trainer::app {

namespace {
constexpr const char* kDivergenceAdvice =
    "the training diverged. Resume from the last checkpoint with a lower optimizer.lr, a longer "
    "schedule.warmup_steps or a lower optimizer.grad_clip (train.on_nonfinite=skip only rides "
    "out a rare bad batch)";
}  // namespace

NonFiniteGuard::NonFiniteGuard(dist::Communicator& comm, nn::Model& model, dist::DataParallel& dp,
                               const Policy& policy)
    : comm_(comm), model_(model), dp_(dp), policy_(policy) {}

// The first parameter, in layout order, whose values in `flat` (this rank's slices of the
// masters or the gradients) are not all finite, agreed over the ranks (a collective); -1 if none.
int64_t NonFiniteGuard::first_nonfinite(const ConstTensor& flat) {
  int64_t mine = -1;
  const std::vector<nn::ParamInfo>& params = model_.layout().params();
  for (size_t i = 0; i < params.size() && mine < 0; ++i) {
    bool bad = false;
    nn::for_each_held(
        dp_.slices(), params[i].offset, params[i].offset + params[i].numel,
        [&](int64_t local, int64_t b, int64_t e) {
          for_each_piece(e - b, [&](int64_t pb, int64_t pe) {
            for (float x : read_as_f32(model_.context(), flat.flat(local + pb, pe - pb)))
              bad |= !std::isfinite(x);
          });
        });
    if (bad) mine = int64_t(i);
  }
  std::vector<int64_t> all(size_t(comm_.size()), 0);  // rank r's index + 1, 0 for none
  all[size_t(comm_.rank())] = mine + 1;
  if (comm_.size() > 1) comm_.all_reduce(all);
  int64_t first = -1;
  for (int64_t a : all)
    if (a > 0 && (first < 0 || a - 1 < first)) first = a - 1;
  return first;
}

// What is not finite at a step whose loss or gradient norm is not.
std::string NonFiniteGuard::culprit(double loss) {
  const std::vector<nn::ParamInfo>& params = model_.layout().params();
  if (const int64_t w = first_nonfinite(dp_.masters()); w >= 0)
    return fmt::format("the weights are not finite (the first: {})", params[size_t(w)].name);
  if (!std::isfinite(loss) || loss < 0) return "the loss is not finite";
  const int64_t g = first_nonfinite(dp_.grads());
  return g >= 0 ? fmt::format("the gradient of {} is not finite", params[size_t(g)].name)
                : std::string("the gradient norm is not finite");
}

void NonFiniteGuard::bad_step(int64_t step, double loss, double grad_norm) {
  const std::string what = culprit(loss);
  if (policy_.on_nonfinite == NonFinite::stop)
    THROW_ERROR(
        "step {}: {} (loss {}, grad norm {}); nothing was saved, so the last checkpoint is the "
        "last good state: {}",
        step, what, loss, grad_norm, kDivergenceAdvice);
  skipped(step, what);
}

void NonFiniteGuard::skipped(int64_t step, const std::string& what) {
  ++consecutive_;
  ++total_;
  log::warn("step {}: {}; step skipped ({} in a row, {} in all)", step, what, consecutive_, total_);
  if (consecutive_ >= policy_.max_consecutive_skips || total_ >= policy_.max_skips)
    THROW_ERROR(
        "step {}: {} steps skipped in a row and {} in all (the last: {}; "
        "train.max_consecutive_skips = {}, train.max_skips = {}); nothing was saved: {}",
        step, consecutive_, total_, what, policy_.max_consecutive_skips, policy_.max_skips,
        kDivergenceAdvice);
}

void NonFiniteGuard::check_before_save(int64_t step, int64_t last_saved) {
  const int64_t w = first_nonfinite(dp_.masters());
  if (w < 0) return;
  THROW_ERROR(
      "step {}: not saving a checkpoint: the weights are not finite (the first: {}); {}; {}", step,
      model_.layout().params()[size_t(w)].name,
      last_saved >= 0 ? fmt::format("the last checkpoint, step {}, is kept as latest", last_saved)
                      : std::string("no checkpoint was written before"),
      kDivergenceAdvice);
}

}  // namespace trainer::app
