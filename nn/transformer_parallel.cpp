// What a tensor-parallel slice adds to the Transformer (Note [Tensor-parallel splits] in
// nn/arch.h, Note [Sequence parallelism] in nn/block.h): its group, the gathers of sequence
// parallelism, the vocabulary-parallel loss, and the replicated parameters' gradients that are
// each rank's part, summed over the group.
#include "nn/ops/cross_entropy.h"
#include "nn/transformer.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::nn {

Tensor Transformer::all_tokens(const ActSlot& buffer, DType dtype) const {
  const Tensor t = act(buffer);
  return make_tensor(t.data, dtype, {int64_t(mb_.B) * mb_.T, config_.n_embd}, exec_.device);
}

Tensor Transformer::gathered(const ActSlot& slice) {
  const Tensor x = act(slice);
  if (config_.sequence_slices() == 1) return x;
  const Tensor all = all_tokens(plan_.gathered, x.dtype);
  group()->all_gather(all, x);
  return all;
}

TensorGroup* Transformer::group() const {
  if (config_.tensor.degree == 1) return nullptr;
  TRAINER_ASSERT(
      group_ && group_->size() == config_.tensor.degree && group_->rank() == config_.tensor.rank,
      "a model slice {} of {} without its tensor-parallel group", config_.tensor.rank,
      config_.tensor.degree);
  return group_;
}

// Note [Vocabulary-parallel loss] (nn/ops/cross_entropy.h): a rank's loss is that of the targets
// in its slice, so the group's losses add up to the batch's.
void Transformer::loss_forward() {
  const int64_t N = int64_t(mb_.B) * mb_.T;
  const Tensor targets = mb_.targets.view(DType::i32, N), stats = act(plan_.ce_stats);
  cross_entropy_stats(ctx_, stats, logits(), targets);
  if (TensorGroup* g = group()) {
    const Tensor parts = act(plan_.ce_parts);
    g->all_gather(parts, stats.reshape({2 * N}));
    cross_entropy_merge_stats(ctx_, stats, parts, targets);
  }
  cross_entropy_loss(ctx_, scalars_.view(DType::f64, 1), logits(), stats, targets,
                     config_.vocab_begin());
}

bool Transformer::partial_grad(int unit, Role role) const {
  return layout_.get(unit, role).split.partial_grad ||
         (is_norm(role) && config_.sequence_slices() > 1);
}

void Transformer::sum_partial_grads(const std::vector<Tensor>& grads,
                                    const std::function<void()>& backward) {
  TensorGroup* const g = grads.empty() ? nullptr : group();
  if (g && g->rank() != 0)
    for (const Tensor& x : grads) fill_zero(ctx_, x);
  backward();
  if (g)
    for (const Tensor& x : grads) g->all_reduce(x);
}

}  // namespace trainer::nn
