// RMSNorm over the last dimension (Llama). Letters: N rows, C channels. The statistic is fp32;
// the input is the fp32 residual stream; the output, weight and gradients may be bf16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/context.h"
#include "runtime/tensor.h"

namespace trainer::nn {

// out(N,C) = inp * rstd * w with rstd = 1 / sqrt(mean(inp^2) + eps) (the model's norm
// epsilon); saves rstd(N) (fp32). inp fp32; out and w(C) fp32 or bf16.
void rmsnorm_forward(const Context& ctx, const Tensor& out, const Tensor& rstd,
                     const ConstTensor& inp, const ConstTensor& w, float eps);

// res_out(N,C) = res_in + branch (the residual add: res_in and res_out fp32, branch fp32 or
// bf16), then out = rmsnorm(res_out) as above: the two ops in one pass over the rows, with the
// bits of residual_forward followed by rmsnorm_forward.
void rmsnorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                              const Tensor& rstd, const ConstTensor& res_in,
                              const ConstTensor& branch, const ConstTensor& w, float eps);

// dinp(N,C) fp32 += ...; dw(C) (gradient dtype) += ...; dout(N,C) in out's dtype.
// Deterministic: per-thread partial sums added in thread order.
void rmsnorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw,
                      const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                      const ConstTensor& rstd);

// Scratch rmsnorm_backward takes for C channels.
size_t rmsnorm_backward_workspace(const Context& ctx, int64_t C);

}  // namespace trainer::nn
