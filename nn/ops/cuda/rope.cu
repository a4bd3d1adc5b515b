// CUDA rotary embeddings, in place on strided rows.
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

// One thread per (token, head, pair): channels i and i + rd/2 of the head rotate by
// pos * rope_inv_freq(i) (sign -1: the inverse rotation, for backward) and are multiplied by
// rope.attention_factor, in fp32 as PyTorch's Llama and GPT-NeoX do.
template <typename T>
__global__ void rope_kernel(T* x, int64_t ldx, const int32_t* pos, int64_t N, int64_t H, int64_t hs,
                            int64_t rd, Rope rope, float sign) {
  const int64_t half = rd / 2, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * H * half) return;
  const int64_t n = i / (H * half), h = (i / half) % H, k = i % half;
  const float inv_freq = rope_inv_freq(rope, k, rd);
  float s, c;
  sincosf(float(pos[n]) * inv_freq, &s, &c);
  c *= rope.attention_factor;
  s = sign * (s * rope.attention_factor);
  T* a = x + n * ldx + h * hs + k;
  T* b = a + half;
  const float x0 = ld(*a), x1 = ld(*b);
  st(*a, x0 * c - x1 * s);
  st(*b, x1 * c + x0 * s);
}

}  // namespace

static void rotate(const Context& ctx, const Tensor& x, const ConstTensor& positions, int head_size,
                   int rotary_dims, const Rope& rope, float sign) {
  const int64_t N = x.rows(), width = x.cols();
  const int64_t H = width / head_size, pairs = N * H * (rotary_dims / 2);
  with_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<<<blocks_for(pairs), kThreads, 0, stream_of(ctx)>>>(
        ptr<T>(x), x.ld(), ptr<int32_t>(positions), N, H, head_size, rotary_dims, rope, sign);
  });
  check_launch("rope");
}

void rope_forward(const Context& ctx, const Tensor& x, const ConstTensor& positions, int head_size,
                  int rotary_dims, const Rope& rope) {
  rotate(ctx, x, positions, head_size, rotary_dims, rope, 1.0f);
}

void rope_backward(const Context& ctx, const Tensor& dx, const ConstTensor& positions,
                   int head_size, int rotary_dims, const Rope& rope) {
  rotate(ctx, dx, positions, head_size, rotary_dims, rope, -1.0f);
}

}  // namespace trainer::nn::cuda
