// Every op's entry: its shape checks that hold on every backend (made here, once), its timing
// under its name for the profile, and its kernel from the table of ctx's backend
// (nn/ops/kernels.h).
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "nn/ops/kernels.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace trainer::nn {

// The op's kernel on ctx's backend.
#define TRAINER_DISPATCH(op, ...) return kernels(ctx).op(__VA_ARGS__)

namespace {

// An op's memory traffic (Note [Profile work]): each tensor it reads once, each writable one
// (an output, or one updated in place) twice, a read tensor that is also written (in place:
// the same memory) not again, other arguments nothing.
class Traffic {
 public:
  void operator()(const ConstTensor& t) { add(t, false); }
  void operator()(const Tensor& t) { add(t, true); }
  template <typename T>
  void operator()(const T&) {}
  double bytes() const {
    double b = 0;
    for (const auto& [data, bytes, written] : tensors_) {
      const bool also_written = std::any_of(tensors_.begin(), tensors_.end(), [&](const auto& o) {
        return std::get<2>(o) && std::get<0>(o) == data;
      });
      b += written ? 2 * bytes : also_written ? 0 : bytes;
    }
    return b;
  }

 private:
  void add(const ConstTensor& t, bool written) {
    if (!t.empty()) tensors_.emplace_back(t.data, double(t.numel()) * dtype_size(t.dtype), written);
  }
  std::vector<std::tuple<const void*, double, bool>> tensors_;
};

template <typename... Args>
void add_traffic(const Args&... args) {
  if (!profile::g_enabled) return;
  Traffic t;
  (t(args), ...);
  profile::add_bytes(t.bytes());
}

// The traffic of gathering or scattering N rows of C elements of a table of `table` dtype: the
// rows read (and written, a gradient's), the N x C fp32 side read or written, and the N indices.
double row_traffic(int64_t N, int64_t C, DType table, bool table_written, bool side_written) {
  const double rows = double(N * C) * dtype_size(table), side = double(N * C) * 4;
  return (table_written ? 2 : 1) * rows + (side_written ? 2 : 1) * side + 8.0 * double(N);
}

}  // namespace

// A compute-bound op: timed under its name and kernel family in the profile
// (runtime/profile.h), whatever the backend, then dispatched.
#define TRAINER_COMPUTE_OP(op, family, ...) \
  PROFILE_SCOPE(#op, family);               \
  TRAINER_DISPATCH(op, __VA_ARGS__)
// A memory-bound op of irregular access (gathers), its traffic as the caller counts it.
#define TRAINER_OP_BYTES(op, family, bytes, ...)             \
  PROFILE_SCOPE(#op, family);                                \
  if (profile::g_enabled) profile::add_bytes(double(bytes)); \
  TRAINER_DISPATCH(op, __VA_ARGS__)
// A memory-bound op: the same, its tensors' traffic reported to the profile. The linear layer's
// bias gradient counts to the products (on CUDA it is mostly their epilogue); the gradient
// norm's sums of squares to the optimizer step they serve.
#define TRAINER_OP(op, family, ...) \
  PROFILE_SCOPE(#op, family);       \
  add_traffic(__VA_ARGS__);         \
  TRAINER_DISPATCH(op, __VA_ARGS__)

void embedding_forward(const Context& ctx, const Tensor& out, const ConstTensor& tokens,
                       const ConstTensor& positions, const ConstTensor& wte, const ConstTensor& wpe,
                       int64_t vocab_begin) {
  const int64_t N = tokens.numel(), C = out.cols();
  TRAINER_ASSERT(out.contiguous() && out.numel() == N * C && out.dtype == DType::f32 &&
                     positions.numel() == N && tokens.dtype == DType::i32 &&
                     positions.dtype == DType::i32 && wte.cols() == C && vocab_begin >= 0 &&
                     (wpe.empty() || (wpe.cols() == C && wpe.dtype == wte.dtype)),
                 "embedding_forward shapes");
  TRAINER_OP_BYTES(embedding_forward, "embedding",
                   row_traffic(N, C, wte.dtype, false, true) +
                       (wpe.empty() ? 0 : row_traffic(N, C, wpe.dtype, false, false)),
                   ctx, out, tokens, positions, wte, wpe, vocab_begin);
}

void embedding_backward(const Context& ctx, const Tensor& dwte, const Tensor& dwpe,
                        const ConstTensor& dout, const ConstTensor& tokens,
                        const ConstTensor& positions, int64_t vocab_begin) {
  const int64_t N = tokens.numel(), C = dout.cols();
  TRAINER_ASSERT(dout.contiguous() && dout.numel() == N * C && dout.dtype == DType::f32 &&
                     positions.numel() == N && dwte.cols() == C && vocab_begin >= 0 &&
                     (dwpe.empty() || (dwpe.cols() == C && dwpe.dtype == dwte.dtype)),
                 "embedding_backward shapes");
  TRAINER_OP_BYTES(embedding_backward, "embedding",
                   row_traffic(N, C, dwte.dtype, true, false) +
                       (dwpe.empty() ? 0 : row_traffic(N, C, dwpe.dtype, true, false)),
                   ctx, dwte, dwpe, dout, tokens, positions, vocab_begin);
}

size_t embedding_backward_workspace(const Context& ctx, int64_t N, int64_t C) {
  TRAINER_DISPATCH(embedding_backward_workspace, ctx, N, C);
}

void layernorm_forward(const Context& ctx, const Tensor& out, const Tensor& mean,
                       const Tensor& rstd, const ConstTensor& inp, const ConstTensor& w,
                       const ConstTensor& b, float eps) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(inp.contiguous() && out.contiguous() && out.numel() == N * C &&
                     mean.numel() == N && rstd.numel() == N && w.numel() == C && b.numel() == C &&
                     w.dtype == out.dtype && b.dtype == out.dtype && eps > 0,
                 "layernorm_forward shapes");
  TRAINER_OP(layernorm_forward, "norms", ctx, out, mean, rstd, inp, w, b, eps);
}

void layernorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                                const Tensor& mean, const Tensor& rstd, const ConstTensor& res_in,
                                const ConstTensor& branch, const ConstTensor& w,
                                const ConstTensor& b, float eps) {
  const int64_t N = res_out.rows(), C = res_out.cols();  // checked once for both backends
  TRAINER_ASSERT(res_out.contiguous() && res_in.contiguous() && branch.contiguous() &&
                     out.contiguous() && res_out.dtype == DType::f32 &&
                     res_in.dtype == DType::f32 && res_in.numel() == N * C &&
                     branch.numel() == N * C && out.numel() == N * C && mean.numel() == N &&
                     rstd.numel() == N && w.numel() == C && b.numel() == C &&
                     w.dtype == out.dtype && b.dtype == out.dtype && eps > 0,
                 "layernorm_residual_forward shapes");
  TRAINER_OP(layernorm_residual_forward, "norms", ctx, res_out, out, mean, rstd, res_in, branch, w,
             b, eps);
}

void layernorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw, const Tensor& db,
                        const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                        const ConstTensor& mean, const ConstTensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(dinp.numel() == N * C && dout.numel() == N * C && dw.numel() == C &&
                     db.numel() == C && dw.dtype == db.dtype && w.dtype == dout.dtype,
                 "layernorm_backward shapes");
  TRAINER_OP(layernorm_backward, "norms", ctx, dinp, dw, db, dout, inp, w, mean, rstd);
}

size_t layernorm_backward_workspace(const Context& ctx, int64_t C) {
  TRAINER_DISPATCH(layernorm_backward_workspace, ctx, C);
}

void rmsnorm_forward(const Context& ctx, const Tensor& out, const Tensor& rstd,
                     const ConstTensor& inp, const ConstTensor& w, float eps) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(inp.contiguous() && out.contiguous() && out.numel() == N * C &&
                     inp.dtype == DType::f32 && rstd.numel() == N && w.numel() == C &&
                     w.dtype == out.dtype && eps > 0,
                 "rmsnorm_forward shapes");
  TRAINER_OP(rmsnorm_forward, "norms", ctx, out, rstd, inp, w, eps);
}

void rmsnorm_backward(const Context& ctx, const Tensor& dinp, const Tensor& dw,
                      const ConstTensor& dout, const ConstTensor& inp, const ConstTensor& w,
                      const ConstTensor& rstd) {
  const int64_t N = inp.rows(), C = inp.cols();
  TRAINER_ASSERT(dinp.numel() == N * C && dout.numel() == N * C && dw.numel() == C &&
                     w.dtype == dout.dtype && dinp.dtype == DType::f32,
                 "rmsnorm_backward shapes");
  TRAINER_OP(rmsnorm_backward, "norms", ctx, dinp, dw, dout, inp, w, rstd);
}

void rmsnorm_residual_forward(const Context& ctx, const Tensor& res_out, const Tensor& out,
                              const Tensor& rstd, const ConstTensor& res_in,
                              const ConstTensor& branch, const ConstTensor& w, float eps) {
  const int64_t N = res_out.rows(), C = res_out.cols();  // checked once for both backends
  TRAINER_ASSERT(res_out.contiguous() && res_in.contiguous() && branch.contiguous() &&
                     out.contiguous() && res_out.dtype == DType::f32 &&
                     res_in.dtype == DType::f32 && res_in.numel() == N * C &&
                     branch.numel() == N * C && out.numel() == N * C && rstd.numel() == N &&
                     w.numel() == C && w.dtype == out.dtype && eps > 0,
                 "rmsnorm_residual_forward shapes");
  TRAINER_OP(rmsnorm_residual_forward, "norms", ctx, res_out, out, rstd, res_in, branch, w, eps);
}

size_t rmsnorm_backward_workspace(const Context& ctx, int64_t C) {
  TRAINER_DISPATCH(rmsnorm_backward_workspace, ctx, C);
}

namespace {
void check_rope(const ConstTensor& x, const ConstTensor& positions, int head_size, int rotary_dims,
                const Rope& rope) {
  TRAINER_ASSERT(rotary_dims > 0 && rotary_dims % 2 == 0 && rotary_dims <= 1024 &&
                     rotary_dims <= head_size && x.cols() % head_size == 0 &&
                     positions.numel() == x.rows() && positions.dtype == DType::i32,
                 "rope shapes");
  TRAINER_ASSERT(rope.theta > 1 && rope.factor > 0 && rope.original_context > 0 &&
                     rope.high_freq_factor > rope.low_freq_factor && rope.low_freq_factor > 0 &&
                     rope.ramp_span != 0 && std::isfinite(rope.ramp_span) &&
                     rope.attention_factor > 0 && std::isfinite(rope.attention_factor),
                 "rope parameters");
}
}  // namespace

void rope_forward(const Context& ctx, const Tensor& x, const ConstTensor& positions, int head_size,
                  int rotary_dims, const Rope& rope) {
  check_rope(x, positions, head_size, rotary_dims, rope);
  TRAINER_OP(rope_forward, "rope", ctx, x, positions, head_size, rotary_dims, rope);
}

void rope_backward(const Context& ctx, const Tensor& dx, const ConstTensor& positions,
                   int head_size, int rotary_dims, const Rope& rope) {
  check_rope(dx, positions, head_size, rotary_dims, rope);
  TRAINER_OP(rope_backward, "rope", ctx, dx, positions, head_size, rotary_dims, rope);
}

void swiglu_forward(const Context& ctx, const Tensor& out, const ConstTensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  TRAINER_ASSERT(out.contiguous() && gate_up.contiguous() && gate_up.cols() == 2 * F &&
                     out.numel() == N * F && out.dtype == gate_up.dtype,
                 "swiglu_forward shapes");
  TRAINER_OP(swiglu_forward, "activations", ctx, out, gate_up);
}

void swiglu_backward(const Context& ctx, const Tensor& dgate_up, const ConstTensor& dout,
                     const ConstTensor& gate_up) {
  const int64_t N = gate_up.rows(), F = gate_up.cols() / 2;
  TRAINER_ASSERT(dgate_up.contiguous() && dout.contiguous() && gate_up.contiguous() &&
                     dgate_up.numel() == N * 2 * F && dout.numel() == N * F &&
                     dgate_up.dtype == gate_up.dtype && dout.dtype == gate_up.dtype,
                 "swiglu_backward shapes");
  TRAINER_OP(swiglu_backward, "activations", ctx, dgate_up, dout, gate_up);
}

void linear_bias_grad(const Context& ctx, const Tensor& dbias, const ConstTensor& dout) {
  TRAINER_ASSERT(dout.contiguous() && dbias.numel() == dout.cols(), "linear_backward bias");
  TRAINER_OP(linear_bias_grad, "gemm", ctx, dbias, dout);
}

size_t linear_bias_grad_workspace(const Context& ctx, int64_t O) {
  TRAINER_DISPATCH(linear_bias_grad_workspace, ctx, O);
}

namespace {
// What every backend's attention takes (attention.h): q (B,Tq,C) in H heads, k and v
// (B,Tk,Ckv) in key/value heads dividing H, out (B,Tq,C) and lse (B,H,Tq), one dtype; the mask's
// segments (B,T) and lengths (B) int32 when given.
void check_attention(const ConstTensor& out, const ConstTensor& lse, const ConstTensor& q,
                     const ConstTensor& k, const ConstTensor& v, const AttentionMask& mask,
                     int n_head) {
  const int64_t B = q.dim(0), Tq = q.dim(1), C = q.dim(2), hs = n_head > 0 ? C / n_head : 0,
                Hkv = hs > 0 ? k.dim(2) / hs : 0;
  TRAINER_ASSERT(q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && hs > 0 && hs * n_head == C &&
                     k.dim(0) == B && Hkv > 0 && Hkv * hs == k.dim(2) && n_head % Hkv == 0 &&
                     v.dim(2) == k.dim(2) && v.dim(1) == k.dim(1) && k.dtype == q.dtype &&
                     v.dtype == q.dtype && out.dtype == q.dtype && out.contiguous() &&
                     out.numel() == B * Tq * C && lse.numel() == B * n_head * Tq &&
                     lse.dtype == DType::f32,
                 "attention shapes");
  TRAINER_ASSERT((mask.segments.empty() ||
                  (mask.segments.dtype == DType::i32 && mask.segments.numel() == B * Tq)) &&
                     (mask.lengths.empty() ||
                      (mask.lengths.dtype == DType::i32 && mask.lengths.numel() == B)) &&
                     mask.dropout.p >= 0 && mask.dropout.p < 1 && mask.dropout.first_head >= 0,
                 "attention mask shapes and dtypes, dropout rate");
}
}  // namespace

void attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse,
                       const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                       const AttentionMask& mask, int n_head, int q_pos) {
  check_attention(out, lse, q, k, v, mask, n_head);
  TRAINER_ASSERT(
      q_pos == 0 || (mask.segments.empty() && mask.lengths.empty() && !mask.dropout.on()),
      "a decoding attention (q_pos {}) with a mask", q_pos);
  TRAINER_COMPUTE_OP(attention_forward, "attention", ctx, out, lse, q, k, v, mask, n_head, q_pos);
}

void attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const ConstTensor& dout, const ConstTensor& out, const ConstTensor& lse,
                        const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                        const AttentionMask& mask, int n_head) {
  check_attention(out, lse, q, k, v, mask, n_head);
  TRAINER_ASSERT(k.dim(1) == q.dim(1) && dout.contiguous() && dout.numel() == out.numel() &&
                     dout.dtype == q.dtype && dq.dtype == q.dtype && dk.dtype == q.dtype &&
                     dv.dtype == q.dtype,
                 "attention_backward shapes and dtypes");
  TRAINER_COMPUTE_OP(attention_backward, "attention", ctx, dq, dk, dv, dout, out, lse, q, k, v,
                     mask, n_head);
}

size_t attention_workspace(const Context& ctx, int64_t rows, int n_head, int64_t Tq, int64_t Tk,
                           int64_t head_size, DType act, bool backward) {
  TRAINER_DISPATCH(attention_workspace, ctx, rows, n_head, Tq, Tk, head_size, act, backward);
}

void gelu_forward(const Context& ctx, const Tensor& out, const ConstTensor& inp, GeluForm form) {
  TRAINER_ASSERT(
      out.contiguous() && inp.contiguous() && out.numel() == inp.numel() && out.dtype == inp.dtype,
      "gelu_forward shapes");
  TRAINER_OP(gelu_forward, "activations", ctx, out, inp, form);
}

void gelu_backward(const Context& ctx, const Tensor& dinp, const ConstTensor& dout,
                   const ConstTensor& inp, GeluForm form) {
  TRAINER_ASSERT(dinp.numel() == inp.numel() && dout.numel() == inp.numel() &&
                     dinp.dtype == inp.dtype && dout.dtype == inp.dtype,
                 "gelu_backward shapes");
  TRAINER_OP(gelu_backward, "activations", ctx, dinp, dout, inp, form);
}

void residual_forward(const Context& ctx, const Tensor& out, const ConstTensor& a,
                      const ConstTensor& b) {
  TRAINER_ASSERT(out.contiguous() && a.contiguous() && b.contiguous() && out.numel() == a.numel() &&
                     b.numel() == a.numel() && out.dtype == DType::f32 && a.dtype == DType::f32,
                 "residual_forward shapes");
  TRAINER_OP(residual_forward, "residual", ctx, out, a, b);
}

void dropout(const Context& ctx, const Tensor& out, const ConstTensor& inp, const DropoutMask& mask,
             bool accumulate) {
  TRAINER_ASSERT(out.contiguous() && inp.contiguous() && out.numel() == inp.numel() &&
                     (out.data != inp.data || (out.dtype == inp.dtype && !accumulate)) &&
                     mask.p >= 0 && mask.p < 1 && mask.first >= 0 && mask.row_stride >= 0,
                 "dropout shapes");
  TRAINER_ASSERT(
      mask.row_stride == 0 || (out.cols() == inp.cols() && inp.cols() <= mask.row_stride),
      "dropout of a column slice: rows of one width, at most row_stride");
  TRAINER_OP(dropout, "activations", ctx, out, inp, mask, accumulate);
}

void cross_entropy_stats(const Context& ctx, const Tensor& stats, const ConstTensor& logits,
                         const ConstTensor& targets) {
  const int64_t N = logits.rows();
  TRAINER_ASSERT(logits.contiguous() && targets.numel() == N && targets.dtype == DType::i32 &&
                     stats.numel() >= 2 * N && stats.dtype == DType::f32,
                 "cross_entropy_stats shapes");
  TRAINER_OP(cross_entropy_stats, "loss", ctx, stats, logits, targets);
}

void cross_entropy_merge_stats(const Context& ctx, const Tensor& stats, const ConstTensor& parts,
                               const ConstTensor& targets) {
  const int64_t N = targets.numel();
  TRAINER_ASSERT(targets.dtype == DType::i32 && stats.numel() >= 2 * N &&
                     stats.dtype == DType::f32 && parts.dtype == DType::f32 && parts.contiguous() &&
                     N > 0 && parts.numel() % (2 * N) == 0,
                 "cross_entropy_merge_stats shapes");
  TRAINER_OP(cross_entropy_merge_stats, "loss", ctx, stats, parts, targets);
}

void cross_entropy_loss(const Context& ctx, const Tensor& loss_sum, const ConstTensor& logits,
                        const ConstTensor& stats, const ConstTensor& targets, int64_t vocab_begin) {
  const int64_t N = logits.rows();
  TRAINER_ASSERT(logits.contiguous() && targets.numel() == N && targets.dtype == DType::i32 &&
                     stats.numel() >= 2 * N && stats.dtype == DType::f32 && loss_sum.numel() == 1 &&
                     loss_sum.dtype == DType::f64 && vocab_begin >= 0,
                 "cross_entropy_loss shapes");
  // It reads one logit of each row (a cache line of it), the row's statistics and target.
  TRAINER_OP_BYTES(cross_entropy_loss, "loss", double(N) * (64 + 8 + 4), ctx, loss_sum, logits,
                   stats, targets, vocab_begin);
}

void cross_entropy_backward(const Context& ctx, const Tensor& dlogits, const ConstTensor& logits,
                            const ConstTensor& stats, const ConstTensor& targets,
                            const ConstTensor& scale, int64_t vocab_begin) {
  const int64_t N = logits.rows(), V = logits.cols();
  TRAINER_ASSERT(dlogits.contiguous() && dlogits.numel() == N * V &&
                     dlogits.dtype == logits.dtype && targets.numel() == N &&
                     stats.numel() >= 2 * N && vocab_begin >= 0,
                 "cross_entropy_backward shapes");
  TRAINER_ASSERT(scale.numel() == 1 && scale.dtype == DType::f32 && scale.device == ctx.device,
                 "cross_entropy_backward scale");
  TRAINER_OP(cross_entropy_backward, "loss", ctx, dlogits, logits, stats, targets, scale,
             vocab_begin);
}

size_t cross_entropy_workspace(const Context& ctx, int64_t N) {
  TRAINER_DISPATCH(cross_entropy_workspace, ctx, N);
}

void cast(const Context& ctx, const Tensor& dst, const ConstTensor& src) {
  TRAINER_ASSERT(dst.rows() == src.rows() && dst.cols() == src.cols(),
                 "cast of ({}, {}) to ({}, {})", src.rows(), src.cols(), dst.rows(), dst.cols());
  TRAINER_OP(cast, "cast", ctx, dst, src);
}

void adamw_update(const Context& ctx, const Tensor& params, const ConstTensor& grads,
                  const Tensor& m, const Tensor& v, const Tensor& working, const AdamWHyper& h) {
  const int64_t n = params.numel();
  TRAINER_ASSERT(grads.numel() == n && m.numel() == n && v.numel() == n &&
                     (working.empty() || working.numel() == n),
                 "adamw_update shapes");
  TRAINER_OP(adamw_update, "optimizer", ctx, params, grads, m, v, working, h);
}

void sum_squares(const Context& ctx, const Tensor& out, const ConstTensor& x) {
  TRAINER_ASSERT(out.numel() == 1 && out.dtype == DType::f64 && x.contiguous(),
                 "sum_squares shapes");
  TRAINER_OP(sum_squares, "optimizer", ctx, out, x);
}

size_t sum_squares_workspace(const Context& ctx) {
  TRAINER_DISPATCH(sum_squares_workspace, ctx);
}

}  // namespace trainer::nn
