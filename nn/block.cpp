// What every architecture's block functions share: the specification switch and the bf16
// copy of the residual gradient the branches read.
#include "nn/block.h"

#include "nn/ops/cast.h"
#include "runtime/error.h"

namespace trainer::nn {

ArchSpec arch_spec(const ModelConfig& model) {
  switch (model.arch) {
    case Arch::gpt2:
      return gpt2_spec(model);
    case Arch::llama:
      return llama_spec(model);
  }
  TRAINER_ASSERT(false, "architecture {}", int(model.arch));
}

const Tensor& block_access::branch_grad(const Context& ctx, const BlockTensors& t) {
  if (t.d_branch.empty()) return t.d_res;
  cast(ctx, t.d_branch, t.d_res);
  return t.d_branch;
}

}  // namespace trainer::nn
