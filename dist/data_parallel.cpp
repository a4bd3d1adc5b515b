// Stage none (DDP over the model's own buffers) and the choice between it and the sharded
// stages; see data_parallel.h.
#include "dist/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dist/consistency.h"
#include "dist/exact_norm.h"
#include "dist/sharding.h"
#include "dist/tree_sum.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::dist {

// sharding.cpp: the sharded stages.
std::unique_ptr<DataParallel> make_sharded(Communicator& comm, nn::Model& model,
                                           const ParallelConfig& config);

namespace {

// Every rank holds everything (stage none).
StateBytes replicated_bytes(int64_t params, DType compute, DType grad) {
  StateBytes s;
  s.masters = params * 4;
  s.working = compute == DType::f32 ? 0 : params * int64_t(dtype_size(compute));
  s.grads = params * int64_t(dtype_size(grad));
  s.optimizer = params * 2 * 4;
  return s;
}

// Every rank holds the whole model state; DDP sums the gradients.
class Replicated final : public DataParallel {
 public:
  Replicated(Communicator& comm, nn::Model& model, const ParallelConfig& config)
      : comm_(comm),
        model_(model),
        frozen_(config.frozen),
        reduce_in_finish_(config.reduce_in_finish),
        slices_{{0, model.layout().total(), 0}},
        opt_(model.layout(), config.adamw, slices_, config.is_frozen, model.context().device),
        ddp_(comm, model,
             {.bucket_mb = config.bucket_mb,
              .frozen = config.frozen,
              .order = config.deterministic ? ReduceOrder::fixed_tree : ReduceOrder::any}) {
    TRAINER_ASSERT(!model.params().empty(), "stage none needs a model that owns its parameters");
    if (config.deterministic)
      tree_ = std::make_unique<TreeSum>(model.context(), model.layout().total());
  }

  ShardingStage sharding() const override { return ShardingStage::none; }
  const std::vector<nn::FlatSlice>& slices() const override { return slices_; }
  Tensor masters() override { return model_.params(); }
  nn::AdamW& optimizer() override { return opt_; }
  void masters_changed() override {
    if (comm_.size() > 1) broadcast_parameters(comm_, model_.params());
    model_.sync_working_params();
  }
  void begin_step(int64_t backward_passes) override {
    passes_ = backward_passes;
    micro_ = -1;
    wait_s_ = comm_s_ = 0;
    model_.zero_grads();
  }
  void begin_micro_batch() override {
    ++micro_;
    if (tree_ && micro_ > 0) {  // the previous pass's sum over ranks joins the tree
      reduce();
      tree_->add(micro_ - 1, model_.grads(), 0);
      model_.zero_grads();
    }
    ddp_.set_sync(tree_ || (micro_ + 1 == passes_ && !reduce_in_finish_));
  }
  bool collective_forward() const override { return false; }
  bool collective_backward() const override { return tree_ != nullptr; }
  void finish() override {
    reduce();
    if (tree_ && micro_ > 0) tree_->finish(micro_, model_.grads(), model_.grads(), 0);
    for (const Range& r : frozen_)  // never communicated: keep them out of the norm
      fill_zero(model_.context(), model_.grads().flat(r.begin, r.size()));
  }
  Tensor grads() override { return model_.grads(); }
  bool grads_sharded() const override { return false; }
  void step(float lr, float grad_scale) override {
    opt_.step(model_.context(), model_.params(), model_.grads(), model_.working_copy(), lr,
              grad_scale);
  }
  StateBytes state_bytes() const override {
    StateBytes s =
        replicated_bytes(model_.layout().total(), model_.compute_dtype(), model_.grad_dtype());
    s.optimizer = opt_.state_size() * 2 * 4;  // frozen parameters have none
    if (tree_) s.buffers = tree_->bytes();
    return s;
  }
  double last_wait_seconds() const override { return wait_s_; }
  double last_comm_seconds() const override { return comm_s_; }

 private:
  // Completes the reduction of the pass(es) since the last one.
  void reduce() {
    ddp_.finish();
    wait_s_ += ddp_.last_wait_seconds();
    comm_s_ += ddp_.last_comm_seconds();
  }

  Communicator& comm_;
  nn::Model& model_;
  std::vector<Range> frozen_;
  bool reduce_in_finish_;
  std::vector<nn::FlatSlice> slices_;
  nn::AdamW opt_;
  DDP ddp_;
  std::unique_ptr<TreeSum> tree_;  // deterministic: the passes' sums
  int64_t passes_ = 0, micro_ = -1;
  double wait_s_ = 0, comm_s_ = 0;
};

}  // namespace

std::unique_ptr<DataParallel> make_data_parallel(Communicator& comm, nn::Model& model,
                                                 const ParallelConfig& config) {
  if (!stage_record(config.sharding).sharded)
    return std::make_unique<Replicated>(comm, model, config);
  return make_sharded(comm, model, config);
}

void set_masters(DataParallel& dp, const nn::Model& model,
                 const std::function<void(const nn::ParamInfo& p, int64_t begin, int64_t end,
                                          float* out)>& values) {
  const Tensor masters = dp.masters();
  std::vector<float> host;
  for (const nn::ParamInfo& p : model.layout().params())
    nn::for_each_held(dp.slices(), p.offset, p.offset + p.numel,
                      [&](int64_t local, int64_t b, int64_t e) {
                        for_each_piece(e - b, [&](int64_t pb, int64_t pe) {
                          host.resize(size_t(pe - pb));
                          values(p, b + pb - p.offset, b + pe - p.offset, host.data());
                          copy(model.context(), masters.flat(local + pb, pe - pb),
                               make_tensor(host.data(), DType::f32, {pe - pb}));
                        });
                      });
  dp.masters_changed();
}

void init_masters(DataParallel& dp, const nn::Model& model, uint64_t seed) {
  set_masters(dp, model, [&](const nn::ParamInfo& p, int64_t begin, int64_t end, float* out) {
    nn::init_param(p, seed, begin, end, out);
  });
}

double grad_norm(Communicator& comm, DataParallel& dp, nn::Model& model, bool deterministic) {
  if (deterministic) return std::sqrt(exact_sum_squares(comm, dp.grads(), dp.grads_sharded()));
  std::vector<double> sq = {model.read_step_scalars(dp.grads()).grad_norm_sq};
  if (dp.grads_sharded() && comm.size() > 1) comm.all_reduce(sq);
  return std::sqrt(sq[0]);
}

EmptyRow::EmptyRow(const nn::Model& model)
    : tokens(size_t(model.tokens_multiple()), 0), targets(tokens.size(), -1) {}

nn::BatchView EmptyRow::view(bool with_targets) const {
  const int32_t* counted = with_targets ? targets.data() : nullptr;
  return {1, int(tokens.size()), tokens.data(), counted, nullptr, nullptr};
}

void empty_pass(nn::Model& model, DataParallel& dp, bool backward) {
  const EmptyRow row(model);
  if (backward) dp.begin_micro_batch();
  model.forward(row.view(backward));
  if (backward) model.backward(1.0f);
}

StateBytes planned_state_bytes(const nn::ParamLayout& layout, const ParallelConfig& config,
                               int world, DType compute, DType grad) {
  if (stage_record(config.sharding).sharded)
    return planned_sharded_bytes(layout, config, world, compute, grad);
  StateBytes s = replicated_bytes(layout.total(), compute, grad);
  s.optimizer =
      nn::AdamW::state_size_of(layout, {{0, layout.total(), 0}}, config.is_frozen) * 2 * 4;
  return s;
}

StateBytes state_bytes_for(int64_t params, const ParallelConfig& config, int world, DType compute,
                           DType grad) {
  if (stage_record(config.sharding).sharded)
    return sharded_bytes_for(params, config, world, compute, grad);
  return replicated_bytes(params, compute, grad);
}

}  // namespace trainer::dist
