// The binary-counter sum of micro-batch gradients; see tree_sum.h.
#include "dist/tree_sum.h"

#include "nn/ops/residual.h"
#include "runtime/error.h"
#include "runtime/memory.h"

namespace trainer::dist {

TreeSum::TreeSum(const Context& ctx, int64_t elems) : ctx_(ctx), elems_(elems) {}

Tensor TreeSum::level(int k, int64_t offset, int64_t size) {
  while (int(levels_.size()) <= k)
    levels_.emplace_back(size_t(elems_) * sizeof(float), ctx_.device, MemoryUse::communication);
  return levels_[size_t(k)].view(DType::f32, elems_).flat(offset, size);
}

// Levels 0..t-1 hold sums of the previous 1, 2, 4, ... items when m ends in t one bits; they
// and the item make a sum of 2^t items, which goes to level t.
void TreeSum::add(int64_t m, const ConstTensor& item, int64_t offset) {
  TRAINER_ASSERT(m >= 0 && item.dtype == DType::f32, "tree sum item {} of dtype {}", m,
                 dtype_name(item.dtype));
  const int64_t n = item.numel();
  int t = 0;
  while ((m >> t) & 1) ++t;
  if (t == 0) {
    copy(ctx_, level(0, offset, n), item);
    return;
  }
  ConstTensor acc = item;
  for (int k = 0; k < t; ++k) {
    const Tensor out = level(k + 1 == t ? t : k, offset, n);
    nn::residual_forward(ctx_, out, level(k, offset, n), acc);
    acc = out;
  }
}

// The levels named by m's one bits hold the earlier items' subtrees, smallest first.
void TreeSum::finish(int64_t m, const ConstTensor& item, const Tensor& out, int64_t offset) {
  TRAINER_ASSERT(m >= 0 && item.numel() == out.numel(), "tree sum finish {}", m);
  const int64_t n = item.numel();
  ConstTensor acc = item;
  for (int k = 0; (m >> k) != 0; ++k) {
    if (!((m >> k) & 1)) continue;
    nn::residual_forward(ctx_, out, level(k, offset, n), acc);
    acc = out;
  }
  if (acc.data != out.data) copy(ctx_, out, acc);
}

int64_t TreeSum::bytes() const {
  return int64_t(levels_.size()) * elems_ * int64_t(sizeof(float));
}

}  // namespace trainer::dist
