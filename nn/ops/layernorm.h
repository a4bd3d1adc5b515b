// LayerNorm over the last dimension. Letters: N rows, C channels. Statistics are fp32; the
// input is the fp32 residual stream; the output, weights and gradients may be bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// out(N,C) = (inp - mean) * rstd * w + b with rstd = 1 / sqrt(var(inp) + eps) (the model's
// norm epsilon); saves mean(N) and rstd(N) (fp32) for backward. inp fp32; out, w(C), b(C)
// fp32 or bf16.
void layernorm_forward(const Context& ctx, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd, const ConstTensor& inp, const ConstTensor& w,
                       const ConstTensor& b, float eps);

// res_out(N,C) = res_in + branch (the residual add: res_in and res_out fp32, branch fp32 or
// bf16), then out = layernorm(res_out) as above: the two ops in one pass over the rows, with
// the bits of residual_forward followed by layernorm_forward.
void layernorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                                const Tensor& mean, const Tensor& rstd, const ConstTensor& res_in,
                                const ConstTensor& branch, const ConstTensor& w,
                                const ConstTensor& b, float eps);

// dinp(N,C) fp32 += ...; dw(C), db(C) (gradient dtype) += ...; dout(N,C) in out's dtype.
// Deterministic: per-thread partial sums added in thread order.
void layernorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& db,
                        const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                        const ConstTensor& mean, const ConstTensor& rstd);

// Scratch layernorm_backward takes for C channels.
size_t layernorm_backward_workspace(const Context& ctx, int64_t C);

}  // namespace trainer::nn
