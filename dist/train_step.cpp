// One training step at any layout; see train_step.h.
#include "dist/train_step.h"

#include <algorithm>
#include <cmath>

#include "dist/exact_norm.h"
#include "runtime/trace.h"

namespace trainer::dist {

TrainStep::TrainStep(Grid& grid, nn::Model& model, DataParallel& dp, const TrainStepConfig& config)
    : grid_(grid), model_(model), dp_(dp), config_(config), empty_(model) {
  if (grid.tensor_size() > 1 || grid.pipeline_size() > 1)
    norm_share_ = std::make_unique<GradNormShare>(model, dp, grid.tensor_rank(),
                                                  model.layout().holds_tied_copy());
  if (grid.pipeline_size() > 1)
    pipeline_ = std::make_unique<Pipeline>(grid.pipeline(), model, config.schedule, config.chunks,
                                           config.activation_slots);
}

TrainStep::~TrainStep() = default;

StepResult TrainStep::run(const std::vector<nn::BatchView>& micro_batches, const StepCounts& counts,
                          const std::function<StepFlags()>& flags) {
  StepResult r;
  {
    const trace::Span span("passes", "phase");
    passes(micro_batches, counts, r);
  }
  {
    const trace::Span span("finish", "phase");
    if (nn::TensorGroup* g = model_.tensor_group()) g->wait();  // a failure, before any result
    dp_.finish();
    r.times.comm_wait_s = dp_.last_wait_seconds();
    r.times.comm_busy_s = dp_.last_comm_seconds();
    if (pipeline_) sum_tied_embedding(r.times);
  }
  const trace::Span span("agree", "phase");
  agree(r, flags());
  return r;
}

// The forward and backward passes of the step. Without pipelining: this rank's micro-batches,
// then, under sharding, empty passes up to the most any rank has (their gathers and
// reductions need this rank). With it: every replica runs the same number of micro-batches
// through its stages (interleaved rounded up to a multiple of the stages), the missing ones
// empty, so every data group's collectives match by construction.
void TrainStep::passes(const std::vector<nn::BatchView>& micro_batches, const StepCounts& counts,
                       StepResult& r) {
  const float loss_scale = 1.0f / float(counts.global_tokens);
  const int64_t mine = int64_t(micro_batches.size());
  if (pipeline_) {
    const int64_t M =
        pipeline_micro_batches(config_.schedule, grid_.pipeline_size(), counts.max_micro_batches);
    std::vector<nn::BatchView> views;
    for (int64_t m = 0; m < M; ++m)
      views.push_back(m < mine ? micro_batches[size_t(m)] : empty_.view());
    dp_.begin_step(M);
    model_.reset_loss();
    const Pipeline::Times t =
        pipeline_->train(views, loss_scale, [this] { dp_.begin_micro_batch(); });
    r.times.forward_s = t.compute_s;  // forward and backward passes interleave
    r.bubble = t.idle_s;              // pooled over the world in agree()
    return;
  }
  dp_.begin_step(dp_.collective_backward() ? counts.max_micro_batches : mine);
  model_.reset_loss();
  for (const nn::BatchView& batch : micro_batches) {
    dp_.begin_micro_batch();
    {
      const trace::TimedSpan span("forward", "phase", r.times.forward_s);
      model_.forward(batch);
    }
    const trace::TimedSpan span("backward", "phase", r.times.backward_s);
    model_.backward(loss_scale);
  }
  if (dp_.collective_backward())  // Join under sharding
    for (int64_t m = mine; m < counts.max_micro_batches; ++m) empty_pass(model_, dp_, true);
}

// The first and last stages' copies of a tied embedding get the sum of their gradients (the
// token embedding's and the head's), so both take the same update and stay equal. Its wait
// and its time in the network count to the step's communication `times`.
void TrainStep::sum_tied_embedding(StepTimes& times) {
  const nn::ParamLayout& layout = model_.layout();
  const int E = layout.embedding_unit();
  if (!layout.config().tie_embeddings || E < 0) return;
  const nn::Unit& u = layout.units()[size_t(E)];  // first, alike in both stages' layouts
  const Tensor grads = dp_.grads();
  for (const nn::FlatSlice& sl : dp_.slices()) {
    const int64_t b = std::max(sl.begin, u.begin), e = std::min(sl.end, u.end);
    if (b >= e) continue;
    const Tensor g = grads.flat(sl.local + (b - sl.begin), e - b);
    Work w = grid_.ends().all_reduce_async(g.data, g.numel(), g.dtype);
    {  // exposed: the step needs the sum now
      const trace::TimedSpan span("wait for tied embedding sum", "comm_wait", times.comm_wait_s);
      w.wait();
    }
    times.comm_busy_s += w.busy_seconds();
  }
}

// Every rank agrees on the loss, the norm (a sum of the ranks' shares when sharded, or under
// tensor or pipeline parallelism: GradNormShare), whether a signal asked to stop, whether
// some rank failed to write and whether a checkpoint write is still in flight, so that all
// take the same decisions: one small all-reduce, and
// the loss and the norm come back from the device here, once per step.
void TrainStep::agree(StepResult& r, StepFlags flags) {
  Communicator& world = grid_.world();
  // A tensor group's ranks each hold a share of the loss (its vocabulary slice's targets) and
  // of the norm (GradNormShare), which the world's sum adds up (once per data replica).
  nn::StepScalars local =
      model_.read_step_scalars(config_.exact_norm || norm_share_ ? Tensor{} : dp_.grads());
  if (norm_share_) local.grad_norm_sq = norm_share_->sum_squares(model_.context(), dp_.grads());
  const bool summed = dp_.grads_sharded() || norm_share_;
  const bool counted = dp_.grads_sharded() || grid_.data().rank() == 0;             // one replica's
  enum Summed { kLoss, kStop, kWriteFailed, kSaveWriting, kNormSq, kIdle, kBusy };  // in order
  std::vector<double> sums = {local.loss_sum, flags.stop_requested ? 1.0 : 0.0,
                              flags.write_failed ? 1.0 : 0.0, flags.save_writing ? 1.0 : 0.0,
                              summed && counted ? local.grad_norm_sq : 0.0};
  if (pipeline_) sums.insert(sums.end(), {r.bubble, r.bubble + r.times.forward_s});
  if (world.size() > 1) world.all_reduce(sums);
  r.loss_sum = sums[kLoss];
  r.stop_requested = sums[kStop] > 0;
  r.write_failed = sums[kWriteFailed] > 0;
  r.save_writing = sums[kSaveWriting] > 0;
  if (pipeline_)  // every stage's idle share of its step, pooled
    r.bubble = sums[kBusy] > 0 ? sums[kIdle] / sums[kBusy] : 0;
  r.grad_norm = std::sqrt(summed ? sums[kNormSq] : local.grad_norm_sq);
  if (config_.exact_norm)  // Note [Exact sum of squares]
    r.grad_norm = std::sqrt(exact_sum_squares(world, dp_.grads(), dp_.grads_sharded()));
}

int64_t TrainStep::forward(const nn::BatchView& batch) {
  const int64_t counted = pipeline_ ? pipeline_->forward(batch) : model_.forward(batch);
  if (nn::TensorGroup* g = model_.tensor_group()) g->wait();
  // Under pipelining the loss's stage counts.
  return !pipeline_ || model_.layout().config().pipeline.last ? counted : 0;
}

bool TrainStep::idle_forward() {
  if (pipeline_) {
    forward(empty_.view());  // the stages' passes
    return true;
  }
  if (!dp_.collective_forward()) return false;
  empty_pass(model_, dp_, false);  // the others' forwards gather the weights with this rank
  return true;
}

}  // namespace trainer::dist
