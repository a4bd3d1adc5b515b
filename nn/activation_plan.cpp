#include "nn/activation_plan.h"

#include <algorithm>

#include "runtime/alignment.h"
#include "runtime/error.h"

namespace trainer::nn {

namespace {

bool keeps(Recompute policy, ActKind kind) {
  switch (policy) {
    case Recompute::none:
      return kind != ActKind::scratch && kind != ActKind::work;
    case Recompute::selective:
      return kind == ActKind::stat || kind == ActKind::expensive;
    case Recompute::full:
      return false;
  }
  return false;
}

// Each activation starts where device libraries want their operands (runtime/alignment.h).
int64_t aligned(int64_t bytes) {
  constexpr int64_t a = int64_t(kDeviceAlignment);
  return (bytes + a - 1) / a * a;
}

}  // namespace

ActivationPlan::ActivationPlan(const ModelConfig& m, const ExecConfig& e) {
  const ArchSpec spec = arch_spec(m);
  const int64_t N = int64_t(e.max_rows) * e.max_seq_len, C = m.n_embd, V = m.local_vocab();
  const int64_t D = m.sequence_slices(), Ns = (N + D - 1) / D;
  capacity_ = N;
  int64_t next = 0;
  // A slot of every token, or (sliced) of 1/D of them: under sequence parallelism everything
  // but the per-head and per-hidden-unit activations and the loss's (Note [Sequence
  // parallelism]).
  auto take = [&](int64_t& cursor, int64_t per_token, DType t, bool sliced = true) {
    sliced = sliced && D > 1;
    ActSlot s{cursor, t, per_token, sliced};
    cursor += aligned((sliced ? Ns : N) * per_token * int64_t(dtype_size(t)));
    return s;
  };
  auto type = [&](bool fp32) { return fp32 ? DType::f32 : e.compute; };

  residual_at_.assign(size_t(m.n_layer), -1);
  local_.assign(size_t(m.n_layer), -1);
  kept_bytes_.assign(size_t(m.n_layer), 0);
  for (const auto& [b, end] : m.held_chunks()) {  // a chunk's inputs and its output
    for (int l = b; l < end; ++l) residual_at_[size_t(l)] = int(residual_.size()) + (l - b);
    for (int l = b; l <= end; ++l) residual_.push_back(take(next, C, DType::f32));
  }
  kind_.assign(size_t(Act::kCount), ActKind::scratch);
  for (const ActSpec& a : spec.block_acts) kind_[size_t(a.act)] = a.kind;
  for (int l : m.held_layers()) {
    local_[size_t(l)] = int(blocks_.size());
    policy_.push_back(e.policy(l));
    BlockSlots slots;
    const int64_t start = next;
    for (const ActSpec& a : spec.block_acts)
      if (keeps(policy_.back(), a.kind))
        slots[size_t(a.act)] = take(next, a.per_token, type(a.fp32), !a.split);
    blocks_.push_back(slots);
    kept_bytes_[size_t(l)] = next - start;
  }
  if (m.holds_head()) {
    lnf = take(next, C, e.compute);
    lnf_mean = take(next, 1, DType::f32);
    lnf_rstd = take(next, 1, DType::f32);
    ce_stats = take(next, 2, DType::f32, false);
    if (m.tensor.degree > 1) ce_parts = take(next, 2 * m.tensor.degree, DType::f32, false);
    // Held with its micro-batch where several are in flight (a pipeline stage's slots).
    if (e.activation_slots > 1) logits = take(next, V, e.compute, false);
  }
  slot_bytes_ = next;  // what each micro-batch keeps; the rest is scratch of one pass
  if (D > 1) {
    gathered = take(next, C, e.compute, false);
    partial = take(next, C, DType::f32, false);
  }
  if (e.training) {
    d_res = take(next, C, DType::f32);
    d_ln = take(next, C, e.compute);
  }

  // The time-shared region (Note [Activation memory]).
  const int64_t region = next;
  int64_t cursor = region;
  for (const ActSpec& a : spec.block_acts) {
    if (a.kind == ActKind::scratch && !e.training) continue;
    bool dropped = false;
    for (Recompute p : policy_) dropped |= !keeps(p, a.kind);
    if (dropped) shared_[size_t(a.act)] = take(cursor, a.per_token, type(a.fp32), !a.split);
  }
  tmp = take(cursor, C, e.compute);
  // The branches' gradient in bf16, or through their dropout (block_access::branch_grad).
  if ((e.compute != DType::f32 || m.dropout.residual > 0) && e.training)
    d_branch = take(cursor, C, e.compute);
  shared_bytes_ = cursor - region;
  if (m.holds_head() && e.activation_slots == 1) {
    logits = ActSlot{region, e.compute, V, false};
    shared_bytes_ = std::max(shared_bytes_, aligned(N * V * int64_t(dtype_size(e.compute))));
  }
  bytes_ = region + shared_bytes_;
}

bool ActivationPlan::kept(int layer, Act a) const {
  TRAINER_ASSERT(local_[size_t(layer)] >= 0, "block {} is not held here", layer);
  return keeps(policy_[size_t(local_[size_t(layer)])], kind_[size_t(a)]);
}

const ActSlot& ActivationPlan::block(int layer, Act a) const {
  const ActSlot& s =
      kept(layer, a) ? blocks_[size_t(local_[size_t(layer)])][size_t(a)] : shared_[size_t(a)];
  TRAINER_ASSERT(s.offset >= 0, "activation {} of block {} has no slot", int(a), layer);
  return s;
}

}  // namespace trainer::nn
