// Matrix products on any device: the shapes checked once, then ctx's backend's table
// (gemm_backend.h); and the GEMM rate measurements MFU is reported against.
#include "runtime/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/gemm_backend.h"
#include "runtime/memory.h"
#include "runtime/rng.h"
#include "runtime/timer.h"
#include "runtime/workspace.h"

namespace trainer {

namespace {

const GemmKernels& gemm_kernels(const Context& ctx) {
  const GemmKernels* k = ctx.device == Device::cpu ? &kCpuGemm : kCudaGemm;
  if (!k)
    THROW_ERROR("this trainer was built without the {} backend (it has no matrix products)",
                device_name(ctx.device));
  return *k;
}

// C(M,N) = op(A)(M,K) op(B)(K,N): the shapes and dtypes every backend takes (gemm.h).
void check_shapes(const ConstTensor& C, const ConstTensor& A, bool ta, const ConstTensor& B,
                  bool tb) {
  const int64_t M = C.rows(), N = C.cols(), K = ta ? A.rows() : A.cols();
  TRAINER_ASSERT((ta ? A.cols() : A.rows()) == M, "matmul: op(A) has {} rows, C has {}",
                 ta ? A.cols() : A.rows(), M);
  TRAINER_ASSERT((tb ? B.cols() : B.rows()) == K && (tb ? B.rows() : B.cols()) == N,
                 "matmul: op(B) is ({}, {}), expected ({}, {})", tb ? B.cols() : B.rows(),
                 tb ? B.rows() : B.cols(), K, N);
  TRAINER_ASSERT(A.dtype == B.dtype && (A.dtype == DType::f32 || A.dtype == DType::bf16),
                 "matmul of {} by {}", dtype_name(A.dtype), dtype_name(B.dtype));
  TRAINER_ASSERT(C.dtype == DType::f32 || (C.dtype == DType::bf16 && A.dtype == DType::bf16),
                 "matmul of {} operands into {}", dtype_name(A.dtype), dtype_name(C.dtype));
}

// Reports the product to the profile (Note [Profile work]).
void profile_product(const ConstTensor& C, const ConstTensor& A, bool ta, bool tb) {
  if (profile::g_enabled)
    profile::add_product({C.rows(), C.cols(), ta ? A.rows() : A.cols(), ta, tb, A.dtype, C.dtype});
}

}  // namespace

void matmul(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
            const ConstTensor& B, bool trans_b, float alpha, float beta, const ConstTensor* bias) {
  check_shapes(C, A, trans_a, B, trans_b);
  TRAINER_ASSERT(!bias || (beta == 0.0f && bias->numel() == C.cols()), "matmul bias of {} for N={}",
                 bias ? bias->numel() : 0, C.cols());
  gemm_kernels(ctx).product(ctx, C, A, trans_a, B, trans_b, alpha, beta, bias);
  profile_product(C, A, trans_a, trans_b);
}

bool matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre, const ConstTensor& A,
                 bool trans_a, const ConstTensor& B, bool trans_b, const ConstTensor& bias) {
  check_shapes(out, A, trans_a, B, trans_b);
  const GemmKernels& k = gemm_kernels(ctx);
  const bool done = k.gelu && k.gelu(ctx, out, pre, A, trans_a, B, trans_b, bias);
  if (done) profile_product(out, A, trans_a, trans_b);
  return done;
}

bool matmul_bias_grad(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
                      const ConstTensor& B, float alpha, float beta, const Tensor& bias_grad) {
  check_shapes(C, A, trans_a, B, false);
  const GemmKernels& k = gemm_kernels(ctx);
  const bool done = k.bias_grad && k.bias_grad(ctx, C, A, trans_a, B, alpha, beta, bias_grad);
  if (done) profile_product(C, A, trans_a, false);
  return done;
}

bool matmul_dgelu(const Context& ctx, const Tensor& dpre, const ConstTensor& A, bool trans_a,
                  const ConstTensor& B, bool trans_b, const ConstTensor& pre) {
  check_shapes(dpre, A, trans_a, B, trans_b);
  const GemmKernels& k = gemm_kernels(ctx);
  const bool done = k.dgelu && k.dgelu(ctx, dpre, A, trans_a, B, trans_b, pre);
  if (done) profile_product(dpre, A, trans_a, trans_b);
  return done;
}

size_t matmul_workspace_bytes(const Context& ctx, int64_t M, int64_t N, int64_t K, DType ab) {
  return gemm_kernels(ctx).workspace_bytes(ctx, M, N, K, ab);
}

namespace {

// A buffer of `rows` x `cols` random values of `dtype` on ctx's device, seen as that matrix.
Tensor random_matrix(const Context& ctx, Buffer& buffer, DType dtype, int64_t rows, int64_t cols,
                     uint64_t seed) {
  const int64_t n = rows * cols;
  buffer = Buffer(size_t(n) * dtype_size(dtype), ctx.device);
  std::vector<float> values(static_cast<size_t>(n));
  fill_normal(values.data(), n, seed, 0.0f, 1.0f);
  std::vector<bf16> rounded;
  const void* src = values.data();
  if (dtype == DType::bf16) {
    for (float v : values) rounded.push_back(to_bf16(v));
    src = rounded.data();
  }
  const Tensor t = buffer.view(dtype, n);
  copy(ctx, t, make_tensor(src, dtype, {n}));
  return t.reshape({rows, cols});
}

}  // namespace

double measure_gemm_gflops(const Context& ctx, const profile::GemmShape& s, double min_seconds) {
  // The best of several short trials: a peak, robust to a noisy neighbour in some of them. On
  // random operands: zeros run faster than real data on some hardware.
  Buffer a, b, c;
  const Tensor A = random_matrix(ctx, a, s.ab, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, 17);
  const Tensor B = random_matrix(ctx, b, s.ab, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, 18);
  const Tensor C = random_matrix(ctx, c, s.c, s.m, s.n, 19);
  Workspace ws(matmul_workspace_bytes(ctx, s.m, s.n, s.k, s.ab), ctx.device);
  Context local = ctx;
  local.workspace = &ws;
  const bool profiled = profile::g_enabled;  // the trials are not the profile's work
  profile::set_enabled(false);
  matmul(local, C, A, s.trans_a, B, s.trans_b);  // warm-up (and primitive or algorithm choice)
  synchronize(local);
  double best = 0;
  Timer total;
  for (int trial = 0; trial < 3 || total.seconds() < min_seconds; ++trial) {
    Timer t;
    matmul(local, C, A, s.trans_a, B, s.trans_b);
    synchronize(local);
    best = std::max(best, s.flops() / t.seconds() / 1e9);
  }
  profile::set_enabled(profiled);
  return best;
}

double measure_gemm_gflops(const Context& ctx, DType dtype, int64_t n, double min_seconds) {
  return measure_gemm_gflops(ctx, {n, n, n, false, false, dtype, DType::f32}, min_seconds);
}

double measure_gemm_peak(const Context& ctx, DType dtype, double seconds) {
  double best = 0;
  // A GPU needs larger products to fill it.
  const std::vector<int64_t> sizes = ctx.device == Device::cuda
                                         ? std::vector<int64_t>{2048, 4096, 8192}
                                         : std::vector<int64_t>{256, 512, 1024, 2048};
  for (int64_t n : sizes)
    best = std::max(best, measure_gemm_gflops(ctx, dtype, n, seconds / double(sizes.size())));
  return best;
}

GemmPeak measure_gemm_peak_stable(const Context& ctx, DType dtype, double round_seconds,
                                  int max_rounds, double tolerance) {
  GemmPeak p;
  double last = 0;
  while (p.rounds < max_rounds && !p.stable) {
    const double now = measure_gemm_peak(ctx, dtype, round_seconds);
    p.stable = p.rounds > 0 && std::abs(now - last) <= tolerance * std::max(now, last);
    p.gflops = std::max(p.gflops, now);
    last = now;
    ++p.rounds;
  }
  return p;
}

}  // namespace trainer
