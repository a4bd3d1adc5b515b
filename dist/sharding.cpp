// The sharded stages (Note [Sharding stages], Note [Shard geometry] in sharding.h): a
// DataParallel that owns the model's weights and gradients and serves them to it unit by
// unit as its UnitStore.
#include "dist/sharding.h"

#include <algorithm>
#include <array>

#include "dist/data_parallel.h"
#include "dist/tree_sum.h"
#include "nn/ops/cast.h"
#include "nn/ops/residual.h"
#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/trace.h"

namespace trainer::dist {

namespace {

class Sharded final : public DataParallel, public nn::UnitStore {
 public:
  Sharded(Communicator& comm, nn::Model& model, const ParallelConfig& config);
  ~Sharded() override;

  // DataParallel.
  ShardingStage sharding() const override { return config_.sharding; }
  const std::vector<nn::FlatSlice>& slices() const override { return opt_.slices(); }
  Tensor masters() override { return masters_.view(DType::f32, geo_.local_size()); }
  nn::AdamW& optimizer() override { return opt_; }
  void masters_changed() override;
  void begin_step(int64_t backward_passes) override;
  void begin_micro_batch() override;
  bool collective_forward() const override { return stage_.weights_by_unit; }
  bool collective_backward() const override { return stage_.grads_by_unit || tree_ != nullptr; }
  void finish() override;
  Tensor grads() override { return grad_shard_.view(DType::f32, geo_.local_size()); }
  bool grads_sharded() const override { return true; }
  void step(float lr, float grad_scale) override;
  StateBytes state_bytes() const override;
  double last_wait_seconds() const override { return last_wait_s_; }
  double last_comm_seconds() const override { return last_comm_s_; }

  // UnitStore.
  Tensor weights(int unit, nn::ParamUse use) override;
  Tensor grads(int unit) override;
  void grads_ready(int unit) override;

 private:
  static constexpr int kSlots = ShardBuffers::kSlots;
  // A padded buffer for one unit's weights or gradient: its slot, whose unit it holds, and the
  // collective in flight on it.
  struct Slot {
    Tensor all;       // padded unit (compute or gradient dtype)
    Tensor received;  // gradient slots: this rank's slice of the sum
    int unit = -1;
    bool open = false;  // gradient slots: backward is still adding to it
    Work work;
  };
  struct Reduction {
    Work work;
    int unit;          // -1 once complete
    int64_t micro;     // the pass whose gradient it sums
    const void* send;  // the padded gradient it reads
    Tensor received;   // where its result lands
  };
  const ShardGeometry::UnitShard& unit(int u) const { return geo_.units()[size_t(u)]; }
  int final_unit() const { return int(geo_.units().size()) - 1; }
  int64_t padded(int u) const { return unit(u).shard * comm_.size(); }
  Work gather(int u, const Tensor& dst);
  void forget_weights();
  Slot& weight_slot(int u);
  int predict_next(int u, nn::ParamUse use, int previous) const;
  const std::vector<int>& schedule(nn::ParamUse use) const {
    return use == nn::ParamUse::forward ? forward_units_ : backward_units_;
  }
  Slot* open_grad_slot(int u);
  void reduce(int u, const Tensor& padded_grads, const Tensor& received);
  void complete(Reduction& r);
  void complete_reductions();
  void wait(Work& w);

  Communicator& comm_;
  nn::Model& model_;
  ParallelConfig config_;
  StageRecord stage_;
  ShardGeometry geo_;
  DType compute_, grad_;
  ShardBuffers plan_;
  Buffer masters_, full_weights_, full_grads_, received_, grad_shard_, slot_memory_;
  nn::AdamW opt_;
  // Weights: with a full buffer, each unit's gather of this step (if started); with slots,
  // the embedding's own and kSlots for the others, and the last non-embedding unit read.
  std::vector<Work> unit_gather_;
  std::vector<bool> gathered_;
  Slot embedding_weights_;
  std::array<Slot, kSlots> weight_slots_;
  int last_other_ = -1;
  int previous_ = -1;                                      // the unit read before the last one
  const std::vector<int> forward_units_, backward_units_;  // the model's weight schedule
  // Gradients (gradients, full): the embedding's scratch slot and kSlots taken in turn.
  Slot embedding_grad_;
  std::array<Slot, kSlots> grad_slots_;
  int next_grad_slot_ = 0;
  std::vector<Reduction> reductions_;
  int reduced_units_ = 0;          // optimizer: units whose reduce-scatter this step has started
  std::unique_ptr<TreeSum> tree_;  // deterministic: the passes' sums, per unit
  ReduceOrder order_;
  int64_t passes_ = 0, micro_ = -1;
  bool last_ = true;
  double comm_s_ = 0, last_wait_s_ = 0, last_comm_s_ = 0;
};

Buffer alloc(int64_t elems, DType t, Device d, MemoryUse use) {
  return Buffer(size_t(elems) * dtype_size(t), d, use);
}

Sharded::Sharded(Communicator& comm, nn::Model& model, const ParallelConfig& config)
    : comm_(comm),
      model_(model),
      config_(config),
      stage_(stage_record(config.sharding)),
      geo_(model.layout(), comm.size(), comm.rank()),
      compute_(model.compute_dtype()),
      grad_(model.grad_dtype()),
      plan_(plan_buffers(sizes_of(geo_), config, grad_)),
      opt_(model.layout(), config.adamw, geo_.slices(), config.is_frozen, model.context().device),
      forward_units_(model.weight_schedule(nn::ParamUse::forward)),
      backward_units_(model.weight_schedule(nn::ParamUse::backward)),
      order_(config.deterministic ? ReduceOrder::fixed_tree : ReduceOrder::any) {
  TRAINER_ASSERT(model.params().empty(), "a sharded model must not own its parameters");
  if (config.deterministic) tree_ = std::make_unique<TreeSum>(model.context(), geo_.local_size());
  const Device d = model.context().device;
  masters_ = alloc(plan_.masters, DType::f32, d, MemoryUse::weights);
  full_weights_ = alloc(plan_.full_weights, compute_, d, MemoryUse::weights);
  full_grads_ = alloc(plan_.full_grads, grad_, d, MemoryUse::gradients);
  received_ = alloc(plan_.received, grad_, d, MemoryUse::communication);
  grad_shard_ = alloc(plan_.grad_shard, DType::f32, d, MemoryUse::gradients);
  // The unit buffers in one allocation, carved in order.
  const int64_t cs = int64_t(dtype_size(compute_)), gs = int64_t(dtype_size(grad_));
  slot_memory_ =
      Buffer(size_t((plan_.embedding_weights + kSlots * plan_.weight_slot) * cs +
                    (plan_.embedding_grad + kSlots * plan_.grad_slot + plan_.slot_received()) * gs),
             d, MemoryUse::communication);
  char* at = static_cast<char*>(slot_memory_.data());
  auto carve = [&](int64_t elems, DType t) {
    const Tensor view = make_tensor(at, t, {elems}, d);
    at += elems * int64_t(dtype_size(t));
    return view;
  };
  embedding_weights_.all = carve(plan_.embedding_weights, compute_);
  for (Slot& s : weight_slots_) s.all = carve(plan_.weight_slot, compute_);
  embedding_grad_.all = carve(plan_.embedding_grad, grad_);
  embedding_grad_.received = carve(plan_.embedding_grad / comm.size(), grad_);
  for (Slot& s : grad_slots_) {
    s.all = carve(plan_.grad_slot, grad_);
    s.received = carve(plan_.grad_slot / comm.size(), grad_);
  }
  unit_gather_.resize(geo_.units().size());
  gathered_.assign(geo_.units().size(), false);
  model_.attach_store(this);
}

Sharded::~Sharded() {
  model_.attach_store(nullptr);
  // Never leave the communication thread touching buffers that are about to go away.
  auto quiet = [](Work& w) {
    try {
      if (w.valid()) w.wait();
    } catch (...) {
    }
  };
  for (Work& w : unit_gather_) quiet(w);
  quiet(embedding_weights_.work);
  for (Slot& s : weight_slots_) quiet(s.work);
  for (Reduction& r : reductions_) quiet(r.work);
}

StateBytes Sharded::state_bytes() const {
  StateBytes s = bytes_of(plan_, compute_, grad_, opt_.state_size());
  if (tree_) s.buffers += tree_->bytes();
  return s;
}

void Sharded::wait(Work& w) {
  if (!w.valid()) return;
  {
    const trace::TimedSpan span("wait for collective", "comm_wait", last_wait_s_);
    w.wait();
  }
  comm_s_ += w.busy_seconds();
  w = Work();
}

// Unit u's weights into `dst` (padded, compute dtype): this rank's masters, rounded to the
// compute dtype in place at its own slice, then an in-place all-gather.
Work Sharded::gather(int u, const Tensor& dst) {
  const auto& x = unit(u);
  const Tensor mine = dst.flat(comm_.rank() * x.shard, x.shard);
  nn::cast(model_.context(), mine, masters().flat(x.local, x.shard));
  return comm_.all_gather_async(mine.data, dst.data, x.shard, compute_);
}

// The weights changed: what was gathered is stale. Stages optimizer and gradients gather
// every unit at once (each waited for when first read, so the gathers overlap the next
// forward); full gathers each unit when it is read.
void Sharded::forget_weights() {
  gathered_.assign(gathered_.size(), false);
  embedding_weights_.unit = -1;
  for (Slot& s : weight_slots_) s.unit = -1;
  last_other_ = previous_ = -1;
  if (stage_.weights_by_unit) return;
  const Tensor full = full_weights_.view(compute_, plan_.full_weights);
  for (size_t u = 0; u < geo_.units().size(); ++u) {
    unit_gather_[u] = gather(int(u), full.flat(unit(int(u)).padded, padded(int(u))));
    gathered_[u] = true;
  }
}

void Sharded::masters_changed() {
  forget_weights();
}

void Sharded::begin_step(int64_t backward_passes) {
  last_wait_s_ = 0;
  comm_s_ = 0;
  reduced_units_ = 0;
  passes_ = backward_passes;
  micro_ = -1;
  if (!stage_.grads_by_unit) fill_zero(model_.context(), full_grads_.view(grad_, plan_.full_grads));
  fill_zero(model_.context(), grads());
}

void Sharded::begin_micro_batch() {
  ++micro_;
  last_ = micro_ + 1 == passes_ && !config_.reduce_in_finish;  // else finish() reduces
  // optimizer, deterministic: the last pass's reduce-scatters read the full gradient, which
  // this pass starts again from zero.
  if (tree_ && !stage_.grads_by_unit && micro_ > 0) {
    complete_reductions();
    fill_zero(model_.context(), full_grads_.view(grad_, plan_.full_grads));
  }
}

// The slot holding (or about to hold) unit u's gathered weights, its gather started: the
// embedding's own, else the slot not holding the last other unit read (which the model may
// still be reading).
Sharded::Slot& Sharded::weight_slot(int u) {
  if (u == 0) {
    if (embedding_weights_.unit != 0) {
      wait(embedding_weights_.work);
      embedding_weights_.unit = 0;
      embedding_weights_.work = gather(0, embedding_weights_.all);
    }
    return embedding_weights_;
  }
  for (Slot& s : weight_slots_)
    if (s.unit == u) return s;
  Slot& s = weight_slots_[0].unit == last_other_ && last_other_ >= 0 ? weight_slots_[1]
                                                                     : weight_slots_[0];
  wait(s.work);  // an unused prefetch may still be writing into it
  s.unit = u;
  s.work = gather(u, s.all.flat(0, padded(u)));
  return s;
}

// The unit the model reads after u in its weight schedule for `use` (Note [Unit storage]): u's
// place is where the unit before it is `previous` (a unit listed twice, as the embedding with
// a tied head, is told apart so), else u's first. -1 when nothing follows in the pass.
int Sharded::predict_next(int u, nn::ParamUse use, int previous) const {
  const std::vector<int>& units = schedule(use);
  size_t at = units.size();
  for (size_t i = 0; i < units.size(); ++i)
    if (units[i] == u) {
      if (at == units.size()) at = i;  // the first, unless a later one follows `previous`
      if (i > 0 && units[i - 1] == previous) {
        at = i;
        break;
      }
    }
  return at + 1 < units.size() ? units[at + 1] : -1;
}

Tensor Sharded::weights(int u, nn::ParamUse use) {
  const int64_t size = unit(u).size();
  if (plan_.full_weights) {  // every unit has its place in the full buffer
    const Tensor all =
        full_weights_.view(compute_, plan_.full_weights).flat(unit(u).padded, padded(u));
    if (!gathered_[size_t(u)]) {  // full with reshard_after_forward: false
      unit_gather_[size_t(u)] = gather(u, all);
      gathered_[size_t(u)] = true;
    }
    wait(unit_gather_[size_t(u)]);
    return all.flat(0, size);
  }
  Slot& s = weight_slot(u);
  wait(s.work);
  const int previous = previous_;
  previous_ = u;
  if (u != 0) last_other_ = u;
  if (const int next = predict_next(u, use, previous); next >= 0) weight_slot(next);  // prefetch
  return s.all.flat(0, size);
}

Tensor Sharded::grads(int u) {
  const int64_t size = unit(u).size();
  if (!stage_.grads_by_unit)
    return full_grads_.view(grad_, plan_.full_grads).flat(unit(u).padded, size);
  if (u == final_unit()) complete_reductions();                        // a backward starts
  if (Slot* open = open_grad_slot(u)) return open->all.flat(0, size);  // the embedding, again
  Slot* slot = &embedding_grad_;
  if (u != 0) {
    slot = &grad_slots_[size_t(next_grad_slot_)];
    next_grad_slot_ = (next_grad_slot_ + 1) % kSlots;
  }
  {  // taking it over: its last reduce-scatter must be done
    for (Reduction& r : reductions_)
      if (r.send == slot->all.data) complete(r);
    std::erase_if(reductions_, [](const Reduction& r) { return r.unit < 0; });
    fill_zero(model_.context(), slot->all);
    slot->unit = u;
    slot->open = true;
  }
  return slot->all.flat(0, size);
}

// The gradient slot backward is still adding unit u's gradient to, or null.
Sharded::Slot* Sharded::open_grad_slot(int u) {
  if (embedding_grad_.unit == u && embedding_grad_.open) return &embedding_grad_;
  for (Slot& s : grad_slots_)
    if (s.unit == u && s.open) return &s;
  return nullptr;
}

void Sharded::reduce(int u, const Tensor& padded_grads, const Tensor& received) {
  reductions_.push_back(
      {comm_.reduce_scatter_async(padded_grads.data, received.data, unit(u).shard, grad_, order_),
       u, micro_, padded_grads.data, received});
  ++reduced_units_;
}

void Sharded::grads_ready(int u) {
  const auto& x = unit(u);
  if (!stage_.grads_by_unit) {  // once per step (or per pass), into the shard or beside it
    if (!last_ && !tree_) return;
    const Tensor to = plan_.received ? received_.view(grad_, plan_.received).flat(x.local, x.shard)
                                     : grads().flat(x.local, x.shard);
    reduce(u, full_grads_.view(grad_, plan_.full_grads).flat(x.padded, padded(u)), to);
    return;
  }
  Slot* slot = open_grad_slot(u);
  TRAINER_ASSERT(slot, "gradient of unit {} ready but never handed out", u);
  slot->open = false;
  reduce(u, slot->all.flat(0, padded(u)), slot->received.flat(0, x.shard));
}

// Waits for one reduce-scatter and puts its result into the gradient shard: added in the tree
// (deterministic), added (gradients, full: one per micro-batch), converted (optimizer with
// bf16 gradients), or already there.
void Sharded::complete(Reduction& r) {
  wait(r.work);
  const Tensor mine = grads().flat(unit(r.unit).local, unit(r.unit).shard);
  if (tree_ && r.micro + 1 < passes_)
    tree_->add(r.micro, r.received, unit(r.unit).local);
  else if (tree_)
    tree_->finish(r.micro, r.received, mine, unit(r.unit).local);
  else if (stage_.grads_by_unit)
    nn::residual_forward(model_.context(), mine, mine, r.received);
  else if (plan_.received)
    nn::cast(model_.context(), mine, r.received);
  r.unit = -1;
}

void Sharded::complete_reductions() {
  for (Reduction& r : reductions_) complete(r);
  reductions_.clear();
}

void Sharded::finish() {
  if (!stage_.grads_by_unit && reduced_units_ == 0)  // no synchronised backward here (Join)
    for (int u = final_unit(); u >= 0; --u) {
      last_ = true;
      grads_ready(u);
    }
  complete_reductions();
  for (const Range& f : config_.frozen)  // never trained: keep them out of the norm
    nn::for_each_held(slices(), f.begin, f.end, [&](int64_t local, int64_t b, int64_t e) {
      fill_zero(model_.context(), grads().flat(local, e - b));
    });
  last_comm_s_ = comm_s_;
}

void Sharded::step(float lr, float grad_scale) {
  opt_.step(model_.context(), masters(), grads(), Tensor{}, lr, grad_scale);
  forget_weights();
}

}  // namespace

std::unique_ptr<DataParallel> make_sharded(Communicator& comm, nn::Model& model,
                                           const ParallelConfig& config) {
  return std::make_unique<Sharded>(comm, model, config);
}

}  // namespace trainer::dist
