// The fused AdamW update (decoupled weight decay, PyTorch's order) over one contiguous span of
// the flat buffers, refreshing the bf16 working copy of the updated weights in the same pass.
#pragma once

#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

struct AdamWHyper {
  float lr = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0;  // 0 for parameters that do not decay
  float grad_scale = 1;    // folds in gradient clipping
  int64_t step = 1;        // 1-based, for bias correction
};

// params(n) fp32, m(n) and v(n) fp32 moments updated in place from grads(n) (fp32 or bf16);
// working(n) (bf16, or empty) receives the updated params rounded.
void adamw_update(const Context& ctx, const Tensor& params, const ConstTensor& grads,
                  const Tensor& m, const Tensor& v, const Tensor& working, const AdamWHyper& h);

}  // namespace trainer::nn
