// The sum of a step's micro-batch gradients in a fixed binary tree (dist.deterministic).
//
// Note [World-size-invariant sums]
// Step k's global batch is G micro-batches, global batch i going to rank i mod W as its
// micro-batch i / W (Note [Global order] in data/plan.cpp). Under dist.deterministic each
// micro-batch is reduced over the ranks at once, with the fixed tree of ReduceOrder::fixed_tree
// (pairing ranks r and r ^ 1 first): the tree over global batches jW .. jW + W-1. TreeSum then
// adds the micro-batch sums in the tree a binary counter builds: item m is paired with item
// m - 1 when m is odd, pairs with pairs, and so on; what is left at the end is added from the
// smallest subtree up. For W = 2^w both trees are pieces of one tree over the G global
// batches (the counter's subtree over leaves [jW, (j+1)W) is the ranks' tree), so the step's
// gradient is the same bits at every power-of-two world size that divides G: 4 ranks, 2 ranks
// with 2 micro-batches each, or 1 with 4 (tests/app/elastic_resume.sh). Given the same bits
// per micro-batch: the same threads per rank, since the CPU kernels' partial sums follow the
// thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::dist {

class TreeSum {
 public:
  // Sums of fp32 vectors of `elems` elements on ctx's device. Holds ceil(log2(n)) such vectors
  // for n items, allocated as the first step needs them.
  TreeSum(const Context& ctx, int64_t elems);

  // Item m (counting from 0) of a sequence that goes on, elements [offset, offset + size) of
  // it: kept (added into the partial sums). Items of one offset come in order; `item` is
  // only read.
  void add(int64_t m, const ConstTensor& item, int64_t offset);
  // The last item m of the sequence at `offset`: out = the tree sum of items 0..m there (out
  // may be `item` itself).
  void finish(int64_t m, const ConstTensor& item, const Tensor& out, int64_t offset);

  int64_t bytes() const;

 private:
  Tensor level(int k, int64_t offset, int64_t size);

  const Context& ctx_;
  int64_t elems_;
  std::vector<Buffer> levels_;  // level k: a sum of 2^k consecutive items
};

}  // namespace trainer::dist
