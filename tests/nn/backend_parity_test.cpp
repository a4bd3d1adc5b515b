// The backend parity harness: every op, in each dtype, on a few shapes (odd sizes, every mask
// kind), on every backend that was built, forward and backward, against the CPU fp32
// reference, by normalised error ||got - want|| / ||want|| with a tolerance per dtype; and one
// whole training step per backend. A backend whose device or instructions are absent is
// reported as skipped, never as passed.
//
// Outputs an op must write whole start as NaN (poisoned), so a missed element fails; inputs are
// random and fresh for every case. The reference runs on the same inputs as the case under test
// (rounded to bf16 first when the case is bf16), so the error measured is the op's own: its
// arithmetic and the rounding of its outputs. The CPU fp32 kernels themselves are checked against
// finite differences (ops_grad_test) and the whole model against PyTorch (torch_parity_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "grad_check.h"
#include "model_test_util.h"
#include "nn/ops/adamw.h"
#include "nn/ops/attention.h"
#include "nn/ops/attention_cudnn_workspace.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/dropout.h"
#include "nn/ops/embedding.h"
#include "nn/ops/gelu.h"
#include "nn/ops/layernorm.h"
#include "nn/ops/linear.h"
#include "nn/ops/residual.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/rope.h"
#include "nn/ops/sum_squares.h"
#include "nn/ops/swiglu.h"
#include "nn/transformer.h"
#include "runtime/buffer.h"
#include "runtime/cuda/stream.h"
#include "runtime/device.h"
#include "runtime/fallback.h"
#include "runtime/memory.h"
#include "runtime/workspace.h"

namespace trainer::nn {
namespace {

// ---- backends ---------------------------------------------------------------------------------

struct Backend {
  std::string name;
  Device device;
  CpuBf16Math math;
  bool cudnn_attention = true;  // CUDA: cuDNN's fused attention where it applies, else ours
};

const std::vector<Backend>& backends() {
  static const std::vector<Backend> all = {
      {"cpu_native", Device::cpu, CpuBf16Math::native},
      {"cpu_via_fp32", Device::cpu, CpuBf16Math::via_fp32},
      {"cuda", Device::cuda, CpuBf16Math::via_fp32},
      {"cuda_own_attention", Device::cuda, CpuBf16Math::via_fp32, false}};
  return all;
}

// Why `b` cannot run here, or "" when it can.
std::string unavailable(const Backend& b) {
  if (b.device == Device::cuda) {
    if (!cuda_built()) return "this build has no CUDA backend";
    if (cuda_device_count() == 0) return "no CUDA device";
    return "";
  }
  if (b.math == CpuBf16Math::native && !cpu_has_bf16_arithmetic())
    return "this CPU has no bf16 arithmetic (AVX-512 BF16 or AMX)";
  return "";
}

// ---- buffers on a backend ---------------------------------------------------------------------

// Tensors on one backend's device, made from host fp32 values: inputs are first rounded to
// `round_to` (so a reference sees exactly the values the case under test sees).
class Arena {
 public:
  Arena(const Backend& b, DType round_to) : device_(b.device), round_to_(round_to) {
    ctx.device = b.device;
    ctx.bf16_math = b.math;
    ctx.cudnn_attention = b.cudnn_attention;
    ctx.workspace = &workspace_;
    // The largest case is attention at T = 1024, 16 heads of 64: on CUDA cuDNN's deterministic
    // backward plans 48 MiB (32 MiB of dP tiles and the 16 MiB allowance: Note [cuDNN attention
    // workspace]), other products cuBLASLt's 32 MiB. The CPU reference takes 512 KiB a thread
    // there (two 64-query tiles of 1024 fp32 scores), past 64 MiB from ~128 threads: its own
    // bound counts where it is larger.
    const size_t attention = attention_workspace(ctx, 1, 16, 1024, 1024, 64, DType::f32, true);
    workspace_ = Workspace(std::max(size_t(64) << 20, attention), b.device);
  }
  Context ctx;

  Tensor input(std::vector<float> host, DType dt, std::initializer_list<int64_t> shape) {
    if (round_to_ == DType::bf16)
      for (float& x : host) x = to_float(to_bf16(x));
    Tensor t = alloc(dt, shape);
    if (dt == DType::f32) {
      copy(ctx, t, make_tensor(host.data(), DType::f32, {t.numel()}).reshape(shape));
    } else {
      std::vector<bf16> h;
      for (float x : host) h.push_back(to_bf16(x));
      copy(ctx, t, make_tensor(h.data(), DType::bf16, {t.numel()}).reshape(shape));
    }
    return t;
  }
  Tensor random(uint64_t seed, DType dt, std::initializer_list<int64_t> shape, float std = 1) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return input(trainer::testing::random_vector(size_t(n), seed, std), dt, shape);
  }
  Tensor ints(const std::vector<int32_t>& host, std::initializer_list<int64_t> shape) {
    Tensor t = alloc(DType::i32, shape);
    copy(ctx, t, make_tensor(host.data(), DType::i32, shape));
    return t;
  }
  Tensor zeros(DType dt, std::initializer_list<int64_t> shape) { return alloc(dt, shape); }
  // An output the op must write whole: NaN everywhere first, so an element it misses fails.
  Tensor poisoned(DType dt, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return input(std::vector<float>(size_t(n), std::numeric_limits<float>::quiet_NaN()), dt, shape);
  }
  std::vector<float> read(const Tensor& t) { return read_as_f32(ctx, t); }
  std::vector<float> read_f64(const Tensor& t) {
    std::vector<double> h(size_t(t.numel()));
    copy(ctx, make_tensor(h.data(), DType::f64, {t.numel()}), t);
    return std::vector<float>(h.begin(), h.end());
  }

 private:
  Tensor alloc(DType dt, std::initializer_list<int64_t> shape) {
    Tensor t = make_tensor(static_cast<void*>(nullptr), dt, shape, device_);
    buffers_.emplace_back(size_t(t.numel()) * dtype_size(dt), device_);
    t.data = buffers_.back().data();
    return t;
  }
  Device device_;
  DType round_to_;
  Workspace workspace_;
  std::vector<Buffer> buffers_;
};

// ---- the op cases -----------------------------------------------------------------------------

using Outputs = std::map<std::string, std::vector<float>>;
// Runs one op (forward and backward) with activations of dtype `act` and gradients of `grad`.
using CaseFn = std::function<Outputs(Arena&, DType act, DType grad)>;

struct Case {
  std::string name;
  CaseFn run;
  bool gpu_only = false;  // a shape only a GPU path needs (the CPU runs it as smaller ones)
  // An attention case's shape: on CUDA in bf16 with cuDNN on, a cuDNN fallback fails it unless
  // the loaded version does not serve the shape by design (cudnn_attention_ineligible).
  struct Attention {
    int T, head_size, n_head;
    bool segments, lengths;
  };
  std::optional<Attention> attention{};
};

Outputs embedding_case(Arena& a, DType act, DType grad) {
  const int N = 37, C = 24, V = 29, P = 16;
  std::vector<int32_t> tok, pos;
  for (int n = 0; n < N; ++n) {
    tok.push_back((n * 7 + 3) % V);
    pos.push_back(n % P);
  }
  const Tensor t = a.ints(tok, {N}), p = a.ints(pos, {N});
  const Tensor wte = a.random(1, act, {V, C}), wpe = a.random(2, act, {P, C});
  const Tensor out = a.poisoned(DType::f32, {N, C});
  embedding_forward(a.ctx, out, t, p, wte, wpe, 0);
  const Tensor dout = a.random(3, DType::f32, {N, C});
  const Tensor dwte = a.random(4, grad, {V, C}), dwpe = a.random(5, grad, {P, C});
  embedding_backward(a.ctx, dwte, dwpe, dout, t, p, 0);
  // A vocabulary slice (tensor parallelism): rows [11, 11 + 9) of the vocabulary.
  const Tensor slice_out = a.poisoned(DType::f32, {N, C}), dslice = a.random(6, grad, {9, C});
  embedding_forward(a.ctx, slice_out, t, p, wte.row_range(0, 9), {}, 11);
  embedding_backward(a.ctx, dslice, {}, dout, t, p, 11);
  // The first slice, rows [0, 9): ids above it (up to 28) share low bits with its own, which a
  // sort on the slice's bits alone would interleave (a row's run split between writers).
  const Tensor first_out = a.poisoned(DType::f32, {N, C}), dfirst = a.random(7, grad, {9, C});
  embedding_forward(a.ctx, first_out, t, p, wte.row_range(0, 9), {}, 0);
  embedding_backward(a.ctx, dfirst, {}, dout, t, p, 0);
  return {{"out", a.read(out)},       {"dwte", a.read(dwte)},
          {"dwpe", a.read(dwpe)},     {"slice out", a.read(slice_out)},
          {"dslice", a.read(dslice)}, {"first slice out", a.read(first_out)},
          {"dfirst", a.read(dfirst)}};
}

Outputs layernorm_case(Arena& a, DType act, DType grad) {
  const int N = 13, C = 40;
  const Tensor x = a.random(1, DType::f32, {N, C}, 2.0f), w = a.random(2, act, {C});
  const Tensor b = a.random(3, act, {C});
  const Tensor out = a.poisoned(act, {N, C}), mean = a.poisoned(DType::f32, {N}),
               rstd = a.poisoned(DType::f32, {N});
  layernorm_forward(a.ctx, out, mean, rstd, x, w, b, 1e-5f);
  const Tensor dout = a.random(4, act, {N, C}), dx = a.random(5, DType::f32, {N, C});
  const Tensor dw = a.random(6, grad, {C}), db = a.random(7, grad, {C});
  layernorm_backward(a.ctx, dx, dw, db, dout, x, w, mean, rstd);
  return {{"out", a.read(out)}, {"mean", a.read(mean)}, {"rstd", a.read(rstd)},
          {"dx", a.read(dx)},   {"dw", a.read(dw)},     {"db", a.read(db)}};
}

// The residual add fused with the LayerNorm that follows it: the sum and the normalised rows.
Outputs layernorm_residual_case(Arena& a, DType act, DType) {
  const int N = 13, C = 40;
  const Tensor x = a.random(1, DType::f32, {N, C}), branch = a.random(2, act, {N, C}, 2.0f);
  const Tensor w = a.random(3, act, {C}), b = a.random(4, act, {C});
  const Tensor sum = a.poisoned(DType::f32, {N, C}), out = a.poisoned(act, {N, C}),
               mean = a.poisoned(DType::f32, {N}), rstd = a.poisoned(DType::f32, {N});
  layernorm_residual_forward(a.ctx, sum, out, mean, rstd, x, branch, w, b, 1e-2f);
  return {
      {"sum", a.read(sum)}, {"out", a.read(out)}, {"mean", a.read(mean)}, {"rstd", a.read(rstd)}};
}

Outputs rmsnorm_residual_case(Arena& a, DType act, DType) {
  const int N = 13, C = 40;
  const Tensor x = a.random(1, DType::f32, {N, C}), branch = a.random(2, act, {N, C}, 2.0f);
  const Tensor w = a.random(3, act, {C});
  const Tensor sum = a.poisoned(DType::f32, {N, C}), out = a.poisoned(act, {N, C}),
               rstd = a.poisoned(DType::f32, {N});
  rmsnorm_residual_forward(a.ctx, sum, out, rstd, x, branch, w, 1e-2f);
  return {{"sum", a.read(sum)}, {"out", a.read(out)}, {"rstd", a.read(rstd)}};
}

Outputs rmsnorm_case(Arena& a, DType act, DType grad) {
  const int N = 13, C = 40;
  const Tensor x = a.random(1, DType::f32, {N, C}, 2.0f), w = a.random(2, act, {C});
  const Tensor out = a.poisoned(act, {N, C}), rstd = a.poisoned(DType::f32, {N});
  rmsnorm_forward(a.ctx, out, rstd, x, w, 1e-6f);
  const Tensor dout = a.random(4, act, {N, C}), dx = a.random(5, DType::f32, {N, C});
  const Tensor dw = a.random(6, grad, {C});
  rmsnorm_backward(a.ctx, dx, dw, dout, x, w, rstd);
  return {{"out", a.read(out)}, {"rstd", a.read(rstd)}, {"dx", a.read(dx)}, {"dw", a.read(dw)}};
}

// Rotary embeddings on the query and key columns of a packed (N, 3C) qkv-like tensor, over
// the first `rotary_dims` channels of each head of 16.
Outputs rope_of(Arena& a, DType act, int rotary_dims, const Rope& rope = {500.0f}) {
  const int N = 23, C = 48, hs = 16;
  std::vector<int32_t> pos;
  for (int n = 0; n < N; ++n) pos.push_back(n < 9 ? n : n - 9);  // a second document
  const Tensor p = a.ints(pos, {N});
  const Tensor x = a.random(1, act, {N, 3 * C}), dx = a.random(2, act, {N, 3 * C});
  rope_forward(a.ctx, x.col_range(0, 2 * C), p, hs, rotary_dims, rope);
  rope_backward(a.ctx, dx.col_range(C, 2 * C), p, hs, rotary_dims, rope);
  return {{"x", a.read(x)}, {"dx", a.read(dx)}};
}

Outputs rope_case(Arena& a, DType act, DType) {
  return rope_of(a, act, 16);
}

Outputs rope_partial_case(Arena& a, DType act, DType) {  // GPT-NeoX's partial rotary
  return rope_of(a, act, 6);
}

Outputs swiglu_case(Arena& a, DType act, DType) {
  const int N = 11, F = 37;
  const Tensor gu = a.random(1, act, {N, 2 * F}, 3.0f), out = a.poisoned(act, {N, F});
  swiglu_forward(a.ctx, out, gu);
  const Tensor dout = a.random(2, act, {N, F}), dgu = a.poisoned(act, {N, 2 * F});
  swiglu_backward(a.ctx, dgu, dout, gu);
  return {{"out", a.read(out)}, {"dgate_up", a.read(dgu)}};
}

Outputs linear_case(Arena& a, DType act, DType grad, int N, int I, int O, bool bias,
                    WeightLayout layout = WeightLayout::in_out) {
  const bool in_out = layout == WeightLayout::in_out;
  const Tensor x = a.random(1, act, {N, I}), w = a.random(2, act, {in_out ? I : O, in_out ? O : I});
  const Tensor b = bias ? a.random(3, act, {O}) : Tensor{};
  const Tensor out = a.poisoned(act, {N, O});
  linear_forward(a.ctx, out, x, w, b, layout);
  const Tensor dout = a.random(4, act, {N, O}), dx = a.poisoned(act, {N, I});
  const Tensor dw = a.random(5, grad, {w.dim(0), w.dim(1)});
  const Tensor db = bias ? a.random(6, grad, {O}) : Tensor{};
  linear_backward(a.ctx, dx, dw, db, dout, x, w, layout);
  Outputs o = {{"out", a.read(out)}, {"dx", a.read(dx)}, {"dw", a.read(dw)}};
  if (bias) o["db"] = a.read(db);
  return o;
}

// The MLP's first layer with its GELU: on CUDA one cuBLASLt product with the GELU_AUX_BIAS
// epilogue (O a multiple of 8, as the epilogue's auxiliary output needs), whose GELU must be
// the CPU's tanh approximation.
// The exact form (Pythia's) runs the product, then the GELU kernel.
template <GeluForm form>
Outputs linear_gelu_case(Arena& a, DType act, DType) {
  const int N = 19, I = 24, O = 48;
  const Tensor x = a.random(1, act, {N, I}), w = a.random(2, act, {I, O}),
               b = a.random(3, act, {O});
  const Tensor out = a.poisoned(act, {N, O}), pre = a.poisoned(act, {N, O});
  linear_gelu_forward(a.ctx, out, pre, x, w, b, form);
  return {{"out", a.read(out)}, {"pre", a.read(pre)}};
}

// The MLP's second layer's backward with GELU's: on CUDA the input gradient is one cuBLASLt
// product with the DGELU epilogue (I a multiple of 8, as its auxiliary input needs), and the
// weight gradient's product carries the bias gradient (BGRADA).
template <GeluForm form>
Outputs gelu_linear_case(Arena& a, DType act, DType grad) {
  const int N = 19, I = 48, O = 24;
  const Tensor pre = a.random(1, act, {N, I}, 2.0f), x = a.poisoned(act, {N, I});
  gelu_forward(a.ctx, x, pre, form);
  const Tensor w = a.random(2, act, {I, O}), dout = a.random(3, act, {N, O});
  const Tensor dpre = a.poisoned(act, {N, I});
  const Tensor dw = a.random(4, grad, {I, O}), db = a.random(5, grad, {O});
  gelu_linear_backward(a.ctx, dpre, dw, db, dout, x, w, pre, form);
  return {{"dpre", a.read(dpre)}, {"dw", a.read(dw)}, {"db", a.read(db)}};
}

template <GeluForm form>
Outputs gelu_case(Arena& a, DType act, DType) {
  const int n = 301;
  const Tensor x = a.random(1, act, {n}, 2.0f), out = a.poisoned(act, {n});
  gelu_forward(a.ctx, out, x, form);
  const Tensor dout = a.random(2, act, {n}), dx = a.poisoned(act, {n});
  gelu_backward(a.ctx, dx, dout, x, form);
  return {{"out", a.read(out)}, {"dx", a.read(dx)}};
}

Outputs residual_case(Arena& a, DType act, DType) {
  const int n = 257;
  const Tensor x = a.random(1, DType::f32, {n}), y = a.random(2, act, {n});
  const Tensor out = a.poisoned(DType::f32, {n});
  residual_forward(a.ctx, out, x, y);
  return {{"out", a.read(out)}};
}

// Dropout (Note [Dropout masks]): every backend draws the CPU's masks. The kept pattern is an
// output of its own, so that one element dropped on one backend and kept on another fails by
// more than the tolerance (its normalised error is at least 1 / sqrt(kept) >= 0.04 here). In
// place and out of place, fp32 into bf16, a slice starting at counter 1000 of its key, and a
// column slice (rows 13 counters apart) added into an output (a LoRA input's gradient).
Outputs dropout_case(Arena& a, DType act, DType) {
  const int n = 1027;
  const Tensor x = a.random(1, act, {n}), out = a.poisoned(act, {n});
  dropout(a.ctx, out, x, {0.3f, 99, 1000});
  const Tensor y = a.random(2, act, {n});
  dropout(a.ctx, y, y, {0.5f, 7, 0});
  const Tensor f = a.random(3, DType::f32, {n}), g = a.poisoned(act, {n});
  dropout(a.ctx, g, f, {0.1f, 8, 3});
  const Tensor c = a.random(4, DType::f32, {37, 11}), sum = a.random(5, act, {37, 11});
  dropout(a.ctx, sum, c, {0.3f, 9, 2, 13}, /*accumulate=*/true);
  Outputs o = {{"out", a.read(out)},
               {"in_place", a.read(y)},
               {"converted", a.read(g)},
               {"column slice added", a.read(sum)}};
  for (const char* k : {"out", "in_place", "converted"}) {
    std::vector<float> kept;
    for (float v : o[k]) kept.push_back(v != 0);
    o[std::string(k) + " kept"] = kept;
  }
  return o;
}

// mask: 0 causal only, 1 packed segments (with their runs: Note [Attention masks]), 2 padded
// lengths. Hkv key/value heads (0 = H). Packed rows differ: row 0 holds three documents, the
// others two and a padding tail (segment -1), as the loader packs them.
Outputs attention_case(Arena& a, DType act, DType, int B, int T, int C, int H, int mask_kind,
                       int Hkv = 0, float drop = 0) {
  std::vector<int32_t> seg, len;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      seg.push_back(b == 0 ? (t < T / 3   ? 0
                              : t < T / 2 ? 1
                                          : 2)
                           : (t < T / 4   ? 0
                              : t < T - 3 ? 1
                                          : -1));
  for (int b = 0; b < B; ++b) len.push_back(b == 0 ? T : T / 2 + 1);
  AttentionMask mask;
  if (mask_kind == 1) {
    mask.segments = a.ints(seg, {B, T});
    const std::vector<int32_t> runs = segment_runs(seg.data(), B, T);
    EXPECT_EQ(runs.size(), size_t(3 * B + 1));  // 3 runs a row (a padding tail is one), the end
    mask.runs = a.ints(runs, {int64_t(runs.size())});
  }
  if (mask_kind == 2) mask.lengths = a.ints(len, {B});
  mask.dropout = {drop, 31337, 1};
  const int Ckv = (Hkv ? Hkv : H) * (C / H), width = C + 2 * Ckv;
  const Tensor qkv = a.random(1, act, {B, T, width});
  auto part = [&](const Tensor& t, int i) {
    return i == 0 ? t.col_range(0, C) : t.col_range(C + (i - 1) * Ckv, Ckv);
  };
  const Tensor out = a.poisoned(act, {B, T, C}), lse = a.poisoned(DType::f32, {B * H * T});
  attention_forward(a.ctx, out, lse, part(qkv, 0), part(qkv, 1), part(qkv, 2), mask, H);
  const Tensor dout = a.random(2, act, {B, T, C}), dqkv = a.poisoned(act, {B, T, width});
  attention_backward(a.ctx, part(dqkv, 0), part(dqkv, 1), part(dqkv, 2), dout, out, lse,
                     part(qkv, 0), part(qkv, 1), part(qkv, 2), mask, H);
  return {{"out", a.read(out)}, {"lse", a.read(lse)}, {"dqkv", a.read(dqkv)}};
}

Outputs cross_entropy_case(Arena& a, DType act, DType) {
  const int N = 11, V = 53;
  std::vector<int32_t> tgt;
  for (int n = 0; n < N; ++n) tgt.push_back(n % 4 == 1 ? -1 : (n * 13 + 2) % V);
  const Tensor logits = a.random(1, act, {N, V}, 3.0f), t = a.ints(tgt, {N});
  const Tensor sum = a.zeros(DType::f64, {1}), stats = a.poisoned(DType::f32, {N, 2});
  cross_entropy_stats(a.ctx, stats, logits, t);
  cross_entropy_loss(a.ctx, sum, logits, stats, t, 0);
  const Tensor dlogits = a.poisoned(act, {N, V});
  cross_entropy_backward(a.ctx, dlogits, logits, stats, t, a.input({0.25f}, DType::f32, {1}), 0);
  // Note [Vocabulary-parallel loss]: two slices' statistics merged, and the second slice's
  // loss and gradient (its targets are those in [30, 53)).
  const Tensor parts = a.poisoned(DType::f32, {2, N, 2}), merged = a.poisoned(DType::f32, {N, 2});
  const Tensor lo = a.random(1, act, {N, 30}, 3.0f), hi = a.random(2, act, {N, V - 30}, 3.0f);
  cross_entropy_stats(a.ctx, parts.flat(0, 2 * N).reshape({N, 2}), lo, t);
  cross_entropy_stats(a.ctx, parts.flat(2 * N, 2 * N).reshape({N, 2}), hi, t);
  cross_entropy_merge_stats(a.ctx, merged, parts, t);
  const Tensor slice_sum = a.zeros(DType::f64, {1}), dhi = a.poisoned(act, {N, V - 30});
  cross_entropy_loss(a.ctx, slice_sum, hi, merged, t, 30);
  cross_entropy_backward(a.ctx, dhi, hi, merged, t, a.input({0.25f}, DType::f32, {1}), 30);
  return {{"loss", a.read_f64(sum)},
          {"dlogits", a.read(dlogits)},
          {"slice loss", a.read_f64(slice_sum)},
          {"dslice", a.read(dhi)}};
}

Outputs cast_case(Arena& a, DType act, DType) {
  const int R = 9, Cn = 30;
  const Tensor src = a.random(1, DType::f32, {R, Cn});
  const Tensor mid = a.zeros(act, {R, 2 * Cn}), out = a.poisoned(DType::f32, {R, Cn});
  cast(a.ctx, mid.col_range(Cn / 2, Cn), src);  // into a strided view
  cast(a.ctx, out, mid.col_range(Cn / 2, Cn));
  return {{"out", a.read(out)}};
}

Outputs adamw_case(Arena& a, DType act, DType grad) {
  const int n = 1000;
  const Tensor p = a.random(1, DType::f32, {n}), g = a.random(2, grad, {n});
  const Tensor m = a.random(3, DType::f32, {n}, 0.1f), v = a.random(4, DType::f32, {n}, 0.1f);
  // Second moments must be non-negative.
  std::vector<float> vh = a.read(v);
  for (float& x : vh) x = x * x;
  const Tensor v2 = a.input(vh, DType::f32, {n});
  const Tensor working = act == DType::bf16 ? a.poisoned(DType::bf16, {n}) : Tensor{};
  adamw_update(a.ctx, p, g, m, v2, working,
               {.lr = 1e-2f, .weight_decay = 0.1f, .grad_scale = 0.5f, .step = 3});
  // The working copy is the updated params rounded: the reference's are its fp32 params.
  return {{"p", a.read(p)},
          {"m", a.read(m)},
          {"v", a.read(v2)},
          {"working", a.read(working.empty() ? p : working)}};
}

Outputs sum_squares_case(Arena& a, DType, DType grad) {
  const Tensor x = a.random(1, grad, {4099}), out = a.zeros(DType::f64, {1});
  sum_squares(a.ctx, out, x);
  return {{"sum", a.read_f64(out)}};
}

std::vector<Case> make_cases() {
  std::vector<Case> c = {
      {"embedding", embedding_case},
      {"layernorm", layernorm_case},
      {"linear_bias",
       [](Arena& a, DType t, DType g) { return linear_case(a, t, g, 19, 24, 40, true); }},
      {"linear_odd",
       [](Arena& a, DType t, DType g) { return linear_case(a, t, g, 5, 7, 3, false); }},
      {"linear_out_in",
       [](Arena& a, DType t, DType g) {
         return linear_case(a, t, g, 19, 24, 40, false, WeightLayout::out_in);
       }},
      {"layernorm_residual", layernorm_residual_case},
      {"rmsnorm", rmsnorm_case},
      {"rmsnorm_residual", rmsnorm_residual_case},
      {"rope", rope_case},
      {"rope_partial", rope_partial_case},
      // Llama 3.1's scaling with every band in use: wavelengths 6.3 to 1460 against 256 / 4
      // and 256.
      {"rope_llama3",
       [](Arena& a, DType t, DType) {
         return rope_of(a, t, 16, {500.0f, RopeScaling::llama3, 8.0f, 1.0f, 4.0f, 256.0f});
       }},
      // YaRN as Qwen states it (factor 4, the default turns): at theta 500, 16 channels and an
      // original context of 256 the ramp runs over pairs 0 to 5, so pairs are kept, ramped and
      // scaled; and its attention factor, 0.1 ln 4 + 1.
      {"rope_yarn",
       [](Arena& a, DType t, DType) {
         Rope yarn{500.0f, RopeScaling::yarn, 4.0f};
         std::tie(yarn.ramp_low, yarn.ramp_span) = yarn_ramp(500, 256, 16, 32, 1, true);
         yarn.attention_factor = 1.1386294f;
         return rope_of(a, t, 16, yarn);
       }},
      {"swiglu", swiglu_case},
      {"gelu", gelu_case<GeluForm::tanh>},
      {"gelu_erf", gelu_case<GeluForm::erf>},
      {"linear_gelu", linear_gelu_case<GeluForm::tanh>},
      {"linear_gelu_erf", linear_gelu_case<GeluForm::erf>},
      {"gelu_linear", gelu_linear_case<GeluForm::tanh>},
      {"gelu_linear_erf", gelu_linear_case<GeluForm::erf>},
      {"residual", residual_case},
      {"dropout", dropout_case},
      {"cross_entropy", cross_entropy_case},
      {"cast", cast_case},
      {"adamw", adamw_case},
      {"sum_squares", sum_squares_case},
  };
  // attention(name, B, T, C, H, mask, Hkv): mask 0 causal, 1 packed segments, 2 lengths.
  auto attention = [&c](std::string name, int B, int T, int C, int H, int mask, int Hkv = 0,
                        bool gpu_only = false) {
    c.push_back(
        {std::move(name),
         [=](Arena& a, DType t, DType g) { return attention_case(a, t, g, B, T, C, H, mask, Hkv); },
         gpu_only, Case::Attention{T, C / H, H, mask == 1, mask == 2}});
  };
  attention("attention_causal", 2, 13, 16, 2, 0);
  attention("attention_segments", 2, 13, 16, 2, 1);
  attention("attention_lengths", 2, 13, 16, 2, 2);
  attention("attention_tiles", 1, 70, 8, 1, 1);
  attention("attention_grouped", 2, 13, 32, 4, 1, 2);
  attention("attention_multi_query", 2, 13, 16, 2, 2, 1);
  // Dropout on the probabilities, with packed documents and grouped heads: CUDA runs its own
  // kernel then (cuDNN draws other masks), whose masks must be the CPU's.
  c.push_back({"attention_dropout", [](Arena& a, DType t, DType g) {
                 return attention_case(a, t, g, 2, 13, 32, 4, 1, 2, 0.25f);
               }});
  // The head sizes of GPT-2 (64) and of larger models (128), causal: cuDNN's fused attention
  // in bf16 on CUDA; also with grouped key/value heads.
  attention("attention_head64", 2, 40, 128, 2, 0);
  attention("attention_head128", 1, 33, 256, 2, 0);
  attention("attention_grouped_head64", 2, 24, 256, 4, 0, 2);
  // Packed documents as ragged sequences (cuDNN's variable-length attention in bf16).
  attention("attention_packed_head64", 3, 40, 256, 4, 1);
  attention("attention_packed_grouped_head128", 2, 36, 512, 4, 1, 2);
  // A training shape (one row of GPT-2 350M's heads at T = 1024): the deterministic backward's
  // dP tiles (16 x 1024^2 x 2 bytes = 32 MiB) exceed the 16 MiB once planned, and cuDNN must
  // now run it; so must the backward that accumulates dQ (train.attention_backward: fast).
  for (bool deterministic : {true, false})
    c.push_back({deterministic ? "attention_t1024_deterministic" : "attention_t1024_fast",
                 [deterministic](Arena& a, DType t, DType g) {
                   a.ctx.deterministic = deterministic;
                   return attention_case(a, t, g, 1, 1024, 1024, 16, 0);
                 },
                 true, Case::Attention{1024, 64, 16, false, false}});
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = make_cases();
  return all;
}

// Stated tolerances of normalised error: fp32 differs from the reference only in summation
// order (~sqrt(K) 2^-24 <= 2e-6 at depths K <= 1024); bf16 rounds each output once (2^-9
// relative, rms 1.1e-3) and some intermediates: a few roundings, ~3e-3.
double tolerance(DType act) {
  return act == DType::bf16 ? 1e-2 : 1e-5;
}

double normalised_error(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

// ---- the op harness ---------------------------------------------------------------------------

struct Param {
  size_t backend;
  DType act, grad;
  size_t op;
};

// How CTest lists a case ("linear_bias cpu_native bf16 grad bf16"), rather than its bytes.
void PrintTo(const Param& p, std::ostream* os);

class OpParity : public ::testing::TestWithParam<Param> {};

TEST_P(OpParity, MatchesTheCpuFp32Reference) {
  const Param& p = GetParam();
  const Backend& b = backends()[p.backend];
  if (const std::string why = unavailable(b); !why.empty()) GTEST_SKIP() << why;
  const Case& c = cases()[p.op];
  Arena ref(Backend{"cpu", Device::cpu, CpuBf16Math::via_fp32}, p.act);
  Arena under_test(b, p.act);
  const Outputs want = c.run(ref, DType::f32, DType::f32);
  fallback::reset();
  const Outputs got = c.run(under_test, p.act, p.grad);
  // Every case the loaded cuDNN serves must run through it: a fallback is a failure.
  if (c.attention && b.cudnn_attention && b.device == Device::cuda && p.act == DType::bf16) {
    const Case::Attention& s = *c.attention;
    const std::string by_design = cudnn_attention_ineligible(cudnn_version(), s.T, s.head_size,
                                                             s.n_head, s.segments, s.lengths);
    if (by_design.empty())
      for (const fallback::Count& f : fallback::counts())
        ADD_FAILURE() << c.name << ": " << f.path << " fell back " << f.calls
                      << " time(s) at cuDNN " << cudnn_version() << ": " << f.why;
    RecordProperty("cudnn", by_design.empty() ? "serves" : "not by design: " + by_design);
  }
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_EQ(got.at(name).size(), w.size()) << name;
    const double err = normalised_error(got.at(name), w);
    EXPECT_LT(err, tolerance(p.act)) << c.name << " " << name;
    RecordProperty(name, std::to_string(err));
  }
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (size_t b = 0; b < backends().size(); ++b)
    for (DType act : {DType::f32, DType::bf16})
      for (DType grad : {DType::f32, DType::bf16}) {
        if (grad == DType::bf16 && act != DType::bf16) continue;  // not a mode the model has
        if (backends()[b].device == Device::cpu && act == DType::f32)
          continue;  // CPU fp32 is the reference itself
        for (size_t op = 0; op < cases().size(); ++op)
          if (!cases()[op].gpu_only || backends()[b].device != Device::cpu)
            out.push_back({b, act, grad, op});
      }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  return cases()[p.op].name + "_" + backends()[p.backend].name + "_" +
         std::string(float_dtype_name(p.act)) + "_grad_" + std::string(float_dtype_name(p.grad));
}

void PrintTo(const Param& p, std::ostream* os) {
  *os << cases()[p.op].name << " " << backends()[p.backend].name << " " << float_dtype_name(p.act)
      << " grad " << float_dtype_name(p.grad);
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpParity, ::testing::ValuesIn(all_params()), param_name);

// ---- one whole training step per backend ------------------------------------------------------

struct StepParam {
  size_t backend;
  DType act;
};

void PrintTo(const StepParam& p, std::ostream* os) {
  *os << backends()[p.backend].name << " " << float_dtype_name(p.act);
}

class StepParity : public ::testing::TestWithParam<StepParam> {};

TEST_P(StepParity, OneTrainingStepMatchesCpuFp32) {
  const auto [bi, act] = GetParam();
  const Backend& b = backends()[bi];
  if (const std::string why = unavailable(b); !why.empty()) GTEST_SKIP() << why;
  const ModelConfig cfg{
      .vocab_size = 67, .max_seq_len = 24, .n_layer = 2, .n_head = 4, .n_embd = 32};
  const int B = 3, T = 20;
  std::vector<int32_t> tokens, targets, segments;
  for (int i = 0; i < B * T; ++i) {
    tokens.push_back((i * 13 + 5) % cfg.vocab_size);
    targets.push_back(i % T == 6 ? -1 : (i * 29 + 3) % cfg.vocab_size);
    segments.push_back((i % T) < 7 ? 0 : 1);
  }
  const BatchView batch{B, T, tokens.data(), targets.data(), segments.data(), nullptr};
  // On a GPU the model runs on a stream of its own, as in training, and the step allocates no
  // device memory (everything was planned at construction).
  auto run = [&](ExecConfig e) {
    std::unique_ptr<CudaStream> stream;
    if (e.device == Device::cuda) {
      stream = std::make_unique<CudaStream>();
      e.stream = stream->get();
    }
    Transformer m(cfg, e);
    m.init_weights(21);
    AdamW opt(m.layout(), {}, {{0, m.layout().total(), 0}}, nullptr, e.device);
    const size_t planned = Buffer::live_bytes(e.device);
    const testing::LossSum ls = testing::forward_backward(m, batch);
    std::vector<float> grads = testing::host_grads(m);
    testing::optimizer_step(m, opt, 1e-3f, 1.0f);
    EXPECT_EQ(Buffer::live_bytes(e.device), planned) << "memory allocated inside the step";
    return std::tuple{ls.sum / double(ls.count), grads, testing::host_params(m)};
  };
  const auto [want_loss, want_grads, want_params] = run(testing::exec_for(B, T));
  ExecConfig e = testing::exec_for(B, T, act);
  e.device = b.device;
  e.cpu_bf16 = b.math;
  e.cudnn_attention = b.cudnn_attention;
  const auto [loss, grads, params] = run(e);
  EXPECT_NEAR(loss, want_loss, tolerance(act) * want_loss);  // bf16: ~1e-4 (logits of ~0.1)
  // bf16 activations perturb every gradient a little; AdamW moves each parameter by about lr
  // (1e-3, against weights of about 0.02) in the direction of its gradient's sign, which
  // flips for the smallest gradients: each flip is 2 lr / ||params|| (~13) = 1.5e-4, so 5e-3
  // allows ~1000 (3% of the elements). fp32 (a GPU against the CPU): gradients ~1e-6 apart, and
  // 1e-6 on the parameters allows no flip at all.
  EXPECT_LT(normalised_error(grads, want_grads), act == DType::bf16 ? 5e-2 : 1e-5);
  EXPECT_LT(normalised_error(params, want_params), act == DType::bf16 ? 5e-3 : 1e-6);
}

std::vector<StepParam> step_params() {
  std::vector<StepParam> out;
  for (size_t b = 0; b < backends().size(); ++b)
    for (DType act : {DType::f32, DType::bf16})
      if (act == DType::bf16 || backends()[b].device != Device::cpu)  // CPU fp32: the reference
        out.push_back({b, act});
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, StepParity, ::testing::ValuesIn(step_params()),
                         [](const auto& info) {
                           return backends()[info.param.backend].name + "_" +
                                  std::string(float_dtype_name(info.param.act));
                         });

// ---- CUDA graphs ------------------------------------------------------------------------------

// train.cuda_graphs: steps whose passes run eagerly, then are captured, then replayed (Note [CUDA
// graphs]) give the bits of eager steps, for batches without and with row lengths (and so with
// different loss scales), alternating; the model's hooks still fire between the units, the same
// ranges in the same order.
TEST(CudaGraphs, ReplayTheEagerStepsBitForBit) {
  if (!cuda_built()) GTEST_SKIP() << "this build has no CUDA backend";
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelConfig cfg{
      .vocab_size = 67, .max_seq_len = 32, .n_layer = 2, .n_head = 2, .n_embd = 128};
  const int B = 2, T = 32;
  std::vector<int32_t> tokens, targets, padded_targets, lengths = {T, 20};
  for (int i = 0; i < B * T; ++i) {
    tokens.push_back((i * 13 + 5) % cfg.vocab_size);
    targets.push_back((i * 29 + 3) % cfg.vocab_size);
    // Padding is not counted: the padded batch's loss scale differs from the plain one's.
    padded_targets.push_back(i % T < lengths[size_t(i / T)] ? targets.back() : -1);
  }
  const BatchView plain{B, T, tokens.data(), targets.data(), nullptr, nullptr};
  const BatchView padded{B, T, tokens.data(), padded_targets.data(), nullptr, lengths.data()};
  auto run = [&](bool graphs) {
    CudaStream stream;
    ExecConfig e = testing::exec_for(B, T, DType::bf16);
    e.device = Device::cuda;
    e.stream = stream.get();
    e.cuda_graphs = graphs;
    Transformer m(cfg, e);
    m.init_weights(21);
    std::vector<int64_t> ready;  // the ranges the grads-ready hook reported, in order
    m.attach_grads_ready([&](int64_t begin, int64_t end) {
      ready.push_back(begin);
      ready.push_back(end);
    });
    AdamW opt(m.layout(), {}, {{0, m.layout().total(), 0}}, nullptr, e.device);
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      losses.push_back(testing::forward_backward(m, step % 2 ? padded : plain).sum);
      testing::optimizer_step(m, opt, 1e-3f, 1.0f);
    }
    return std::tuple{losses, testing::host_params(m), ready};
  };
  const auto [eager_losses, eager_params, eager_ready] = run(false);
  const auto [losses, params, ready] = run(true);
  EXPECT_EQ(losses, eager_losses);
  EXPECT_TRUE(params == eager_params) << "parameters differ after the replayed steps";
  EXPECT_EQ(ready, eager_ready);
}

}  // namespace
}  // namespace trainer::nn
