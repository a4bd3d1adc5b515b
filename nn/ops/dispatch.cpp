// The one dispatch point: every op's device switch, in one file. The CPU kernels live in
// <op>_cpu.cpp, the CUDA kernels in <op>_cuda.cu (a build without the CUDA backend reports
// that it has none). Shape checks that hold for every backend are made here, once, and every
// op is timed here under its name for the profile.
#include "nn/ops/adamw.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/rope.h"
#include "nn/ops/sum_squares.h"
#include "nn/ops/swiglu.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace trainer::nn {

// TRAINER_CUDA_KERNELS is defined where the CUDA backend is built (nn/CMakeLists.txt).
#ifdef TRAINER_CUDA_KERNELS
#define TRAINER_CUDA_CALL(op, args) return cuda::op args
#else
namespace {
[[noreturn]] void no_kernel(const char* op) {
  THROW_ERROR("{} has no CUDA kernel: this trainer was built without the CUDA backend", op);
}
}  // namespace
#define TRAINER_CUDA_CALL(op, args) no_kernel(#op)
#endif

// The op's kernel for ctx's device, given each backend's arguments.
#define TRAINER_DISPATCH_EACH(op, cpu_args, cuda_args) \
  switch (ctx.device) {                                \
    case Device::cpu:                                  \
      return cpu::op cpu_args;                         \
    case Device::cuda:                                 \
      TRAINER_CUDA_CALL(op, cuda_args);                \
  }                                                    \
  TRAINER_ASSERT(false, "device {}", int(ctx.device))

#define TRAINER_DISPATCH(op, ...) TRAINER_DISPATCH_EACH(op, (__VA_ARGS__), (__VA_ARGS__))

// An op: timed under its name and kernel family in the profile (runtime/profile.h), whatever
// the backend, then dispatched. The linear layer's bias gradient counts to the products (on
// CUDA it is mostly their epilogue); the gradient norm's sums of squares to the optimizer
// step they serve.
#define TRAINER_OP(op, family, ...) \
  PROFILE_SCOPE(#op, family);       \
  TRAINER_DISPATCH(op, __VA_ARGS__)

void embedding_forward(const Context& ctx, const Tensor& out, const Tensor& tokens,
                       const Tensor& positions, const Tensor& wte, const Tensor& wpe) {
  TRAINER_OP(embedding_forward, "embedding", ctx, out, tokens, positions, wte, wpe);
}

void embedding_backward(const Context& ctx, const Tensor& dwte, const Tensor& dwpe,
                        const Tensor& dout, const Tensor& tokens, const Tensor& positions) {
  TRAINER_OP(embedding_backward, "embedding", ctx, dwte, dwpe, dout, tokens, positions);
}

size_t embedding_backward_workspace(const Context& ctx, int64_t N, int64_t C) {
  TRAINER_DISPATCH(embedding_backward_workspace, N, C);
}

void layernorm_forward(const Context& ctx, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd, const Tensor& inp, const Tensor& w, const Tensor& b) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(inp.contiguous() && out.contiguous() && out.numel() == N * C &&
                     mean.numel() == N && rstd.numel() == N && w.numel() == C && b.numel() == C &&
                     w.dtype == out.dtype && b.dtype == out.dtype,
                 "layernorm_forward shapes");
  TRAINER_OP(layernorm_forward, "norms", ctx, out, mean, rstd, inp, w, b);
}

void layernorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                                const Tensor& mean, const Tensor& rstd, const Tensor& res_in,
                                const Tensor& branch, const Tensor& w, const Tensor& b) {
  const int64_t N = res_out.rows(), C = res_out.cols();  // checked once for both backends
  TRAINER_ASSERT(res_out.contiguous() && res_in.contiguous() && branch.contiguous() &&
                     out.contiguous() && res_out.dtype == DType::f32 &&
                     res_in.dtype == DType::f32 && res_in.numel() == N * C &&
                     branch.numel() == N * C && out.numel() == N * C && mean.numel() == N &&
                     rstd.numel() == N && w.numel() == C && b.numel() == C &&
                     w.dtype == out.dtype && b.dtype == out.dtype,
                 "layernorm_residual_forward shapes");
  TRAINER_OP(layernorm_residual_forward, "norms", ctx, res_out, out, mean, rstd, res_in, branch, w,
             b);
}

void layernorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& db,
                        const Tensor& dout, const Tensor& inp, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(dinp.numel() == N * C && dout.numel() == N * C && dw.numel() == C &&
                     db.numel() == C && dw.dtype == db.dtype && w.dtype == dout.dtype,
                 "layernorm_backward shapes");
  TRAINER_OP(layernorm_backward, "norms", ctx, dinp, dw, db, dout, inp, w, mean, rstd);
}

size_t layernorm_backward_workspace(const Context& ctx, int64_t C) {
  TRAINER_DISPATCH(layernorm_backward_workspace, C);
}

void rmsnorm_forward(const Context& ctx, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                     const Tensor& w) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(inp.contiguous() && out.contiguous() && out.numel() == N * C &&
                     inp.dtype == DType::f32 && rstd.numel() == N && w.numel() == C &&
                     w.dtype == out.dtype,
                 "rmsnorm_forward shapes");
  TRAINER_OP(rmsnorm_forward, "norms", ctx, out, rstd, inp, w);
}

void rmsnorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& dout,
                      const Tensor& inp, const Tensor& w, const Tensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(dinp.numel() == N * C && dout.numel() == N * C && dw.numel() == C &&
                     w.dtype == dout.dtype && dinp.dtype == DType::f32,
                 "rmsnorm_backward shapes");
  TRAINER_OP(rmsnorm_backward, "norms", ctx, dinp, dw, dout, inp, w, rstd);
}

void rmsnorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                              const Tensor& rstd, const Tensor& res_in, const Tensor& branch,
                              const Tensor& w) {
  const int64_t N = res_out.rows(), C = res_out.cols();  // checked once for both backends
  TRAINER_ASSERT(res_out.contiguous() && res_in.contiguous() && branch.contiguous() &&
                     out.contiguous() && res_out.dtype == DType::f32 &&
                     res_in.dtype == DType::f32 && res_in.numel() == N * C &&
                     branch.numel() == N * C && out.numel() == N * C && rstd.numel() == N &&
                     w.numel() == C && w.dtype == out.dtype,
                 "rmsnorm_residual_forward shapes");
  TRAINER_OP(rmsnorm_residual_forward, "norms", ctx, res_out, out, rstd, res_in, branch, w);
}

size_t rmsnorm_backward_workspace(const Context& ctx, int64_t C) {
  TRAINER_DISPATCH(rmsnorm_backward_workspace, C);
}

void rope_forward(const Context& ctx, const Tensor& x, const Tensor& positions, int head_size,
                  int rotary_dims, float theta) {
  TRAINER_OP(rope_forward, "rope", ctx, x, positions, head_size, rotary_dims, theta);
}

void rope_backward(const Context& ctx, const Tensor& dx, const Tensor& positions, int head_size,
                   int rotary_dims, float theta) {
  TRAINER_OP(rope_backward, "rope", ctx, dx, positions, head_size, rotary_dims, theta);
}

void swiglu_forward(const Context& ctx, const Tensor& out, const Tensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  TRAINER_ASSERT(out.contiguous() && gate_up.contiguous() && gate_up.cols() == 2 * F &&
                     out.numel() == N * F && out.dtype == gate_up.dtype,
                 "swiglu_forward shapes");
  TRAINER_OP(swiglu_forward, "activations", ctx, out, gate_up);
}

void swiglu_backward(const Context& ctx, const Tensor& dgate_up, const Tensor& dout,
                     const Tensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  TRAINER_ASSERT(dgate_up.contiguous() && dout.contiguous() && gate_up.contiguous() &&
                     dgate_up.numel() == N * 2 * F && dout.numel() == N * F &&
                     dgate_up.dtype == gate_up.dtype && dout.dtype == gate_up.dtype,
                 "swiglu_backward shapes");
  TRAINER_OP(swiglu_backward, "activations", ctx, dgate_up, dout, gate_up);
}

void linear_bias_grad(const Context& ctx, const Tensor& dbias, const Tensor& dout) {
  TRAINER_ASSERT(dout.contiguous() && dbias.numel() == dout.cols(), "linear_backward bias");
  TRAINER_OP(linear_bias_grad, "gemm", ctx, dbias, dout);
}

size_t linear_bias_grad_workspace(const Context& ctx, int64_t O) {
  TRAINER_DISPATCH_EACH(linear_bias_grad_workspace, (O), (O));
}

void attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& q,
                       const Tensor& k, const Tensor& v, const AttentionMask& mask, int n_head,
                       int q_pos) {
  TRAINER_OP(attention_forward, "attention", ctx, out, lse, q, k, v, mask, n_head, q_pos);
}

void attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& q,
                        const Tensor& k, const Tensor& v, const AttentionMask& mask, int n_head) {
  TRAINER_OP(attention_backward, "attention", ctx, dq, dk, dv, dout, out, lse, q, k, v, mask,
             n_head);
}

size_t attention_workspace(const Context& ctx, int64_t rows, int n_head, int64_t Tq, int64_t Tk,
                           int64_t head_size, DType act, bool backward) {
  TRAINER_DISPATCH_EACH(attention_workspace, (op_threads(ctx), Tq, Tk, head_size, act, backward),
                        (rows, n_head, Tq, head_size, act, backward, ctx.deterministic));
}

void gelu_forward(const Context& ctx, const Tensor& out, const Tensor& inp) {
  TRAINER_ASSERT(
      out.contiguous() && inp.contiguous() && out.numel() == inp.numel() && out.dtype == inp.dtype,
      "gelu_forward shapes");
  TRAINER_OP(gelu_forward, "activations", ctx, out, inp);
}

void gelu_backward(const Context& ctx, const Tensor& dinp, const Tensor& dout, const Tensor& inp) {
  TRAINER_ASSERT(dinp.numel() == inp.numel() && dout.numel() == inp.numel() &&
                     dinp.dtype == inp.dtype && dout.dtype == inp.dtype,
                 "gelu_backward shapes");
  TRAINER_OP(gelu_backward, "activations", ctx, dinp, dout, inp);
}

void residual_forward(const Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b) {
  TRAINER_OP(residual_forward, "residual", ctx, out, a, b);
}

void cross_entropy_forward(const Context& ctx, const Tensor& loss_sum, const Tensor& stats,
                           const Tensor& logits, const Tensor& targets) {
  TRAINER_OP(cross_entropy_forward, "loss", ctx, loss_sum, stats, logits, targets);
}

void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const Tensor& logits,
                            const Tensor& stats, const Tensor& targets, const Tensor& scale) {
  TRAINER_ASSERT(scale.numel() == 1 && scale.dtype == DType::f32 && scale.device == ctx.device,
                 "cross_entropy_backward scale");
  TRAINER_OP(cross_entropy_backward, "loss", ctx, dlogits, logits, stats, targets, scale);
}

size_t cross_entropy_workspace(const Context& ctx, int64_t N) {
  TRAINER_DISPATCH(cross_entropy_workspace, N);
}

void cast(const Context& ctx, const Tensor& dst, const Tensor& src) {
  TRAINER_OP(cast, "cast", ctx, dst, src);
}

void adamw_update(const Context& ctx, const Tensor& params, const Tensor& grads, const Tensor& m,
                  const Tensor& v, const Tensor& working, const AdamWHyper& h) {
  const int64_t n = params.numel();
  TRAINER_ASSERT(grads.numel() == n && m.numel() == n && v.numel() == n &&
                     (working.empty() || working.numel() == n),
                 "adamw_update shapes");
  TRAINER_OP(adamw_update, "optimizer", ctx, params, grads, m, v, working, h);
}

void sum_squares(const Context& ctx, const Tensor& out, const Tensor& x) {
  TRAINER_OP(sum_squares, "optimizer", ctx, out, x);
}

size_t sum_squares_workspace(const Context& ctx) {
  switch (ctx.device) {
    case Device::cpu:
      return 0;
    case Device::cuda:
      TRAINER_CUDA_CALL(sum_squares_workspace, ());
  }
  TRAINER_ASSERT(false, "device {}", int(ctx.device));
}

}  // namespace trainer::nn
