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

}  // namespace

void matmul(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
            const ConstTensor& B, bool trans_b, float alpha, float beta, const ConstTensor* bias) {
  check_shapes(C, A, trans_a, B, trans_b);
  TRAINER_ASSERT(!bias || (beta == 0.0f && bias->numel() == C.cols()), "matmul bias of {} for N={}",
                 bias ? bias->numel() : 0, C.cols());
  gemm_kernels(ctx).product(ctx, C, A, trans_a, B, trans_b, alpha, beta, bias);
}

bool matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre, const ConstTensor& A,
                 bool trans_a, const ConstTensor& B, bool trans_b, const ConstTensor& bias) {
  check_shapes(out, A, trans_a, B, trans_b);
  const GemmKernels& k = gemm_kernels(ctx);
  return k.gelu && k.gelu(ctx, out, pre, A, trans_a, B, trans_b, bias);
}

bool matmul_bias_grad(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
                      const ConstTensor& B, float alpha, float beta, const Tensor& bias_grad) {
  check_shapes(C, A, trans_a, B, false);
  const GemmKernels& k = gemm_kernels(ctx);
  return k.bias_grad && k.bias_grad(ctx, C, A, trans_a, B, alpha, beta, bias_grad);
}

bool matmul_dgelu(const Context& ctx, const Tensor& dpre, const ConstTensor& A, bool trans_a,
                  const ConstTensor& B, bool trans_b, const ConstTensor& pre) {
  check_shapes(dpre, A, trans_a, B, trans_b);
  const GemmKernels& k = gemm_kernels(ctx);
  return k.dgelu && k.dgelu(ctx, dpre, A, trans_a, B, trans_b, pre);
}

size_t matmul_workspace_bytes(const Context& ctx, int64_t M, int64_t N, int64_t K, DType ab) {
  return gemm_kernels(ctx).workspace_bytes(ctx, M, N, K, ab);
}

double measure_gemm_gflops(const Context& ctx, DType dtype, int64_t n, double min_seconds) {
  // The best of several short trials: a peak, robust to a noisy neighbour in some of them. On
  // random operands: zeros run faster than real data on some hardware.
  const size_t bytes = size_t(n * n) * dtype_size(dtype);
  const Device dev = ctx.device;
  Buffer a(bytes, dev), b(bytes, dev), c(size_t(n * n) * sizeof(float), dev);
  {
    std::vector<float> values(size_t(n * n));
    fill_normal(values.data(), n * n, 17, 0.0f, 1.0f);
    std::vector<bf16> rounded;
    const void* src = values.data();
    if (dtype == DType::bf16) {
      for (float v : values) rounded.push_back(to_bf16(v));
      src = rounded.data();
    }
    for (Buffer* x : {&a, &b}) copy(ctx, x->view(dtype, n * n), make_tensor(src, dtype, {n * n}));
  }
  Workspace ws(matmul_workspace_bytes(ctx, n, n, n, dtype), dev);
  Context local = ctx;
  local.workspace = &ws;
  const Tensor A = a.view(dtype, n * n).reshape({n, n}), B = b.view(dtype, n * n).reshape({n, n});
  const Tensor C = c.view(DType::f32, n * n).reshape({n, n});
  matmul(local, C, A, false, B, false);  // warm-up (and primitive or algorithm choice)
  synchronize(local);
  const double flops = 2.0 * double(n) * double(n) * double(n);
  double best = 0;
  Timer total;
  do {
    Timer t;
    matmul(local, C, A, false, B, false);
    synchronize(local);
    best = std::max(best, flops / t.seconds() / 1e9);
  } while (total.seconds() < min_seconds);
  return best;
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
