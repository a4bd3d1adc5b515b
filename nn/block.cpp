// What every architecture's block functions share: the bf16 copy of the residual gradient the
// branches read.
#include "nn/block.h"

#include "nn/ops/cast.h"

namespace trainer::nn {

const Tensor& block_access::branch_grad(const Context& ctx, const BlockTensors& t) {
  if (t.d_branch.empty()) return t.d_res;
  cast(ctx, t.d_branch, t.d_res);
  return t.d_branch;
}

}  // namespace trainer::nn
