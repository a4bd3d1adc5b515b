// CUDA embedding: a thread per output element forward; backward a thread per channel walking
// the rows in order (each thread owns its column of every table row: deterministic, no atomics).
#include "nn/ops/cuda_common.cuh"
#include "nn/ops/embedding.h"

namespace trainer::nn::cuda {

namespace {

template <typename T>
__global__ void forward_kernel(float* out, const int32_t* tok, const int32_t* pos, const T* wte,
                               const T* wpe, int64_t N, int64_t C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C;
  float v = ld(wte[int64_t(tok[n]) * C + c]);
  if (wpe) v += ld(wpe[int64_t(pos[n]) * C + c]);
  out[i] = v;
}

template <typename G>
__global__ void backward_kernel(G* table, const int32_t* index, const float* dout, int64_t N,
                                int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t n = 0; n < N; ++n) {
    G& dst = table[int64_t(index[n]) * C + c];
    st(dst, ld(dst) + dout[n * C + c]);
  }
}

}  // namespace

void embedding_forward(const Context& ctx, const Tensor& out, const Tensor& tokens,
                       const Tensor& positions, const Tensor& wte, const Tensor& wpe) {
  const int64_t N = tokens.numel(), C = out.cols();
  TRAINER_ASSERT(out.numel() == N * C && out.dtype == DType::f32 && wte.cols() == C &&
                     (wpe.empty() || (wpe.cols() == C && wpe.dtype == wte.dtype)),
                 "embedding_forward shapes");
  with_float(wte.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<blocks_for(N * C), kThreads, 0, stream_of(ctx)>>>(
        ptr<float>(out), ptr<int32_t>(tokens), ptr<int32_t>(positions), ptr<T>(wte),
        wpe.empty() ? nullptr : ptr<T>(wpe), N, C);
  });
  check_launch("embedding_forward");
}

void embedding_backward(const Context& ctx, const Tensor& dwte, const Tensor& dwpe,
                        const Tensor& dout, const Tensor& tokens, const Tensor& positions) {
  const int64_t N = tokens.numel(), C = dout.cols();
  TRAINER_ASSERT(dout.numel() == N * C && dout.dtype == DType::f32 && dwte.cols() == C &&
                     (dwpe.empty() || dwpe.cols() == C),
                 "embedding_backward shapes");
  with_float(dwte.dtype, [&](auto tag) {
    using G = decltype(tag);
    backward_kernel<<<blocks_for(C, 128), 128, 0, stream_of(ctx)>>>(
        ptr<G>(dwte), ptr<int32_t>(tokens), ptr<float>(dout), N, C);
    if (!dwpe.empty())
      backward_kernel<<<blocks_for(C, 128), 128, 0, stream_of(ctx)>>>(
          ptr<G>(dwpe), ptr<int32_t>(positions), ptr<float>(dout), N, C);
  });
  check_launch("embedding_backward");
}

size_t embedding_backward_workspace(int64_t, int64_t) {
  return 0;
}

}  // namespace trainer::nn::cuda
