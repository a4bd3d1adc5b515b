// CUDA attention: cuDNN's fused engines first (attention_cudnn.cpp, which this file also serves
// with the ragged path's small kernels), else the simple kernel of our own: a warp per query
// computes its scores key by key with an online softmax, so no (T, T) matrix is
// held. Backward is two kernels without atomics: a warp per query for dq, a warp per key (and
// key/value head, over the query heads it serves) for dk and dv; both recompute the
// probabilities from the saved log-sum-exp. Masks as Note [Attention masks]; head size <= 256.
// Dropout on the probabilities (AttentionDropout) runs here, never in cuDNN.
#include "nn/ops/cuda/attention_cudnn.h"
#include "nn/ops/cuda/common.cuh"
#include "nn/ops/dropout.h"
#include "nn/ops/kernels.h"

namespace trainer::nn::cuda {

namespace {

constexpr int kPerLane = 8;  // head size / 32, at most
constexpr int kWarps = 4;    // warps per block

struct Dims {
  int64_t B, Tq, Tk, H, Hkv, hs;
  int64_t ldq, ldk, ldv;  // row strides of q, k, v (and of dq, dk, dv: see the callers)
  int q_pos;
  float scale;
  AttentionDropout drop;  // on the probabilities (AttentionMask::dropout)
  uint32_t drop_threshold;
  float drop_scale;
};

// Query head h's dropout key (AttentionDropout).
__device__ uint64_t drop_key(const Dims& d, int64_t h) {
  return d.drop.on() ? attention_dropout_key(d.drop.key, d.drop.first_head + h) : 0;
}

// The dropout factor of the probability of query i and key j in row b under a head's key: 0
// where dropped, 1 / (1 - p) where kept, 1 without dropout (the CPU's mask: AttentionDropout).
__device__ float drop_factor(const Dims& d, uint64_t key, int64_t b, int64_t i, int64_t j) {
  if (!d.drop.on()) return 1.0f;
  const uint64_t e = uint64_t((b * d.Tq + i) * d.Tk + j);
  return dropout_bits(key, e) >= d.drop_threshold ? d.drop_scale : 0.0f;
}

template <typename T>
__device__ void load_row(float (&r)[kPerLane], const T* p, int64_t hs) {
  for (int s = 0; s < kPerLane; ++s) {
    const int64_t d = threadIdx.x + 32 * s;
    r[s] = d < hs ? ld(p[d]) : 0.0f;
  }
}

template <typename T>
__device__ float dot_row(const float (&r)[kPerLane], const T* p, int64_t hs) {
  float acc = 0;
  for (int s = 0; s < kPerLane; ++s) {
    const int64_t d = threadIdx.x + 32 * s;
    if (d < hs) acc += r[s] * ld(p[d]);
  }
  return warp_sum(acc);
}

template <typename T>
__device__ void store_row(T* p, const float (&r)[kPerLane], int64_t hs, float mul) {
  for (int s = 0; s < kPerLane; ++s) {
    const int64_t d = threadIdx.x + 32 * s;
    if (d < hs) st(p[d], r[s] * mul);
  }
}

// Whether key j is visible to query i of row b (q_pos = 0 when segments are given).
__device__ bool visible(const int32_t* seg, int64_t b, int64_t T, int64_t i, int64_t j) {
  return !seg || seg[b * T + j] == seg[b * T + i];
}

__device__ int64_t length_of(const int32_t* len, int64_t b, int64_t T) {
  if (!len) return T;
  const int64_t l = len[b];
  return l < 0 ? 0 : (l > T ? T : l);
}

template <typename T>
__global__ void forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                               const int32_t* seg, const int32_t* len, Dims d) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.y;
  if (w >= d.B * d.H * d.Tq) return;
  const int64_t i = w % d.Tq, h = (w / d.Tq) % d.H, b = w / (d.Tq * d.H);
  const int64_t g = h / (d.H / d.Hkv), C = d.H * d.hs;
  T* o = out + (b * d.Tq + i) * C + h * d.hs;
  float* l = lse + (b * d.H + h) * d.Tq + i;
  float acc[kPerLane] = {};
  if (i >= length_of(len, b, d.Tq)) {  // a padding query: zeros
    store_row(o, acc, d.hs, 0.0f);
    if (threadIdx.x == 0) *l = 0.0f;
    return;
  }
  float qr[kPerLane];
  load_row(qr, q + (b * d.Tq + i) * d.ldq + h * d.hs, d.hs);
  float m = -INFINITY, sum = 0;
  const uint64_t key = drop_key(d, h);
  const int64_t kend = min(d.Tk, int64_t(d.q_pos) + i + 1);
  for (int64_t j = 0; j < kend; ++j) {
    if (!visible(seg, b, d.Tq, i, j)) continue;
    const float s = d.scale * dot_row(qr, k + (b * d.Tk + j) * d.ldk + g * d.hs, d.hs);
    const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    sum = sum * corr + p;
    const float pv = p * drop_factor(d, key, b, i, j);  // the output reads the dropped weights
    const T* vj = v + (b * d.Tk + j) * d.ldv + g * d.hs;
    for (int r = 0; r < kPerLane; ++r) {
      const int64_t dd = threadIdx.x + 32 * r;
      acc[r] = acc[r] * corr + (dd < d.hs ? pv * ld(vj[dd]) : 0.0f);
    }
    m = m_new;
  }
  store_row(o, acc, d.hs, 1.0f / sum);
  if (threadIdx.x == 0) *l = m + logf(sum);
}

// dq for one query: sum over visible keys of p (dp M - D) scale k, with D = dout . out and M
// the dropout factor.
template <typename T>
__global__ void dq_kernel(T* dq, const T* dout, const T* out, const float* lse, const T* q,
                          const T* k, const T* v, const int32_t* seg, const int32_t* len, Dims d) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.y;
  if (w >= d.B * d.H * d.Tq) return;
  const int64_t i = w % d.Tq, h = (w / d.Tq) % d.H, b = w / (d.Tq * d.H);
  const int64_t g = h / (d.H / d.Hkv), C = d.H * d.hs, T_ = d.Tq;
  float acc[kPerLane] = {};
  T* dqi = dq + (b * T_ + i) * d.ldq + h * d.hs;
  if (i >= length_of(len, b, T_)) {
    store_row(dqi, acc, d.hs, 0.0f);
    return;
  }
  float qr[kPerLane], dor[kPerLane];
  load_row(qr, q + (b * T_ + i) * d.ldq + h * d.hs, d.hs);
  load_row(dor, dout + (b * T_ + i) * C + h * d.hs, d.hs);
  const float D = dot_row(dor, out + (b * T_ + i) * C + h * d.hs, d.hs);
  const float li = lse[(b * d.H + h) * T_ + i];
  const uint64_t key = drop_key(d, h);
  for (int64_t j = 0; j <= i; ++j) {
    if (!visible(seg, b, T_, i, j)) continue;
    const T* kj = k + (b * T_ + j) * d.ldk + g * d.hs;
    const float p = expf(d.scale * dot_row(qr, kj, d.hs) - li);
    const float dp = dot_row(dor, v + (b * T_ + j) * d.ldv + g * d.hs, d.hs);
    const float ds = p * (dp * drop_factor(d, key, b, i, j) - D);
    for (int r = 0; r < kPerLane; ++r) {
      const int64_t dd = threadIdx.x + 32 * r;
      if (dd < d.hs) acc[r] += ds * ld(kj[dd]);
    }
  }
  store_row(dqi, acc, d.hs, d.scale);
}

// dk and dv for one key of one key/value head, over the query heads it serves and the
// queries that see it, in order.
template <typename T>
__global__ void dkdv_kernel(T* dk, T* dv, const T* dout, const T* out, const float* lse, const T* q,
                            const T* k, const T* v, const int32_t* seg, const int32_t* len, Dims d,
                            int64_t ldk_out, int64_t ldv_out) {
  const int64_t w = int64_t(blockIdx.x) * kWarps + threadIdx.y;
  if (w >= d.B * d.Hkv * d.Tq) return;
  const int64_t j = w % d.Tq, g = (w / d.Tq) % d.Hkv, b = w / (d.Tq * d.Hkv);
  const int64_t group = d.H / d.Hkv, C = d.H * d.hs, T_ = d.Tq, length = length_of(len, b, T_);
  float dkr[kPerLane] = {}, dvr[kPerLane] = {};
  if (j < length) {
    float kr[kPerLane], vr[kPerLane];
    load_row(kr, k + (b * T_ + j) * d.ldk + g * d.hs, d.hs);
    load_row(vr, v + (b * T_ + j) * d.ldv + g * d.hs, d.hs);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const uint64_t key = drop_key(d, h);
      for (int64_t i = j; i < length; ++i) {
        if (!visible(seg, b, T_, i, j)) continue;
        const T* qi = q + (b * T_ + i) * d.ldq + h * d.hs;
        const T* doi = dout + (b * T_ + i) * C + h * d.hs;
        const float p = expf(d.scale * dot_row(kr, qi, d.hs) - lse[(b * d.H + h) * T_ + i]);
        const float D = [&] {
          float dor[kPerLane];
          load_row(dor, doi, d.hs);
          return dot_row(dor, out + (b * T_ + i) * C + h * d.hs, d.hs);
        }();
        const float mf = drop_factor(d, key, b, i, j);
        const float ds = p * (dot_row(vr, doi, d.hs) * mf - D);
        for (int r = 0; r < kPerLane; ++r) {
          const int64_t dd = threadIdx.x + 32 * r;
          if (dd < d.hs) {
            dvr[r] += p * mf * ld(doi[dd]);
            dkr[r] += ds * ld(qi[dd]);
          }
        }
      }
    }
  }
  store_row(dk + (b * T_ + j) * ldk_out + g * d.hs, dkr, d.hs, d.scale);
  store_row(dv + (b * T_ + j) * ldv_out + g * d.hs, dvr, d.hs, 1.0f);
}

Dims dims_of(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v, int n_head,
             int q_pos, const AttentionDropout& drop) {
  const int64_t hs = q.dim(2) / n_head;
  Dims d{q.dim(0),
         q.dim(1),
         k.dim(1),
         n_head,
         hs ? k.dim(2) / hs : 0,
         hs,
         q.ld(),
         k.ld(),
         v.ld(),
         q_pos,
         1.0f / std::sqrt(float(hs)),
         drop,
         dropout_threshold(drop.p),
         dropout_scale(drop.p)};
  // The shapes are the op's to check (dispatch.cpp); the head size is this kernel's limit.
  TRAINER_ASSERT(hs <= 32 * kPerLane, "attention head size {}: at most {} on CUDA", hs,
                 32 * kPerLane);
  return d;
}

// After cuDNN, which leaves the rows beyond each row's length alone: zero there (Note
// [Attention masks]: padding queries output zeros and a zero lse, padding keys get no
// gradient). x is a (B, T, cols) view with row stride ld; lse is (B, H, T).
template <typename T>
__global__ void zero_padding_kernel(T* x, const int32_t* len, int64_t B, int64_t Tn, int64_t cols,
                                    int64_t ld) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B * Tn * cols) return;
  const int64_t c = i % cols, t = (i / cols) % Tn, b = i / (cols * Tn);
  if (t >= length_of(len, b, Tn)) st(x[(b * Tn + t) * ld + c], 0.0f);
}

__global__ void zero_padding_lse_kernel(float* lse, const int32_t* len, int64_t B, int64_t H,
                                        int64_t Tn) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B * H * Tn) return;
  if (i % Tn >= length_of(len, i / (H * Tn), Tn)) lse[i] = 0.0f;
}

void zero_padding(const Context& ctx, const Tensor& x, const ConstTensor& len) {
  const int64_t B = x.dim(0), Tn = x.dim(1), cols = x.dim(2);
  with_float(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    zero_padding_kernel<<<blocks_for(B * Tn * cols), kThreads, 0, stream_of(ctx)>>>(
        ptr<T>(x), ptr<int32_t>(len), B, Tn, cols, x.ld());
  });
}

// Thread i <= bucket: run i's length and its offset in each tensor (ragged_layout).
// The offset arrays' pointers, passed to the kernel by value.
struct OffsetArrays {
  int64_t* p[kMaxRaggedTensors];
};

__global__ void ragged_layout_kernel(int32_t* lengths, OffsetArrays offsets, const int32_t* runs,
                                     int64_t R, int64_t bucket, RaggedStrides strides) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i > bucket) return;
  const int64_t first = runs[i < R ? i : R];
  if (i < bucket) lengths[i] = i < R ? runs[i + 1] - runs[i] : 0;
  for (int j = 0; j < strides.count; ++j) offsets.p[j][i] = first * strides.token[j];
}

// One thread per (b, h, t): lse (B, H, T) and token-major stats (B * T, H), either way.
__global__ void transpose_lse_kernel(float* lse, float* stats, int64_t B, int64_t H, int64_t T,
                                     bool to_token_major) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B * H * T) return;
  const int64_t t = i % T, h = (i / T) % H, b = i / (H * T);
  float& s = stats[(b * T + t) * H + h];
  if (to_token_major)
    s = lse[i];
  else
    lse[i] = s;
}

const int32_t* mask_ptr(const ConstTensor& t) {
  return t.empty() ? nullptr : static_cast<const int32_t*>(t.data);
}

}  // namespace

void ragged_layout(const Context& ctx, int32_t* lengths, int64_t* const* offsets,
                   const ConstTensor& runs, int64_t bucket, const RaggedStrides& strides) {
  const int64_t R = runs.numel() - 1;
  TRAINER_ASSERT(R >= 1 && R <= bucket && strides.count <= kMaxRaggedTensors,
                 "ragged_layout of {} runs", R);
  OffsetArrays arrays{};
  for (int j = 0; j < strides.count; ++j) arrays.p[j] = offsets[j];
  ragged_layout_kernel<<<blocks_for(bucket + 1), kThreads, 0, stream_of(ctx)>>>(
      lengths, arrays, ptr<int32_t>(runs), R, bucket, strides);
  check_launch("ragged_layout");
}

void transpose_lse(const Context& ctx, float* lse, float* stats, int64_t B, int64_t H, int64_t T,
                   bool to_token_major) {
  transpose_lse_kernel<<<blocks_for(B * H * T), kThreads, 0, stream_of(ctx)>>>(lse, stats, B, H, T,
                                                                               to_token_major);
  check_launch("transpose_lse");
}

void attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse,
                       const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                       const AttentionMask& mask, int n_head, int q_pos) {
  // cuDNN's engines draw their own dropout masks: with dropout, the kernel here draws the CPU's.
  if (!mask.dropout.on() && cudnn_attention_forward(ctx, out, lse, q, k, v, mask, n_head, q_pos)) {
    if (!mask.lengths.empty()) {
      zero_padding(ctx, out, mask.lengths);
      const int64_t B = q.dim(0), Tn = q.dim(1);
      zero_padding_lse_kernel<<<blocks_for(B * n_head * Tn), kThreads, 0, stream_of(ctx)>>>(
          ptr<float>(lse), ptr<int32_t>(mask.lengths), B, n_head, Tn);
    }
    check_launch("attention_forward (cuDNN)");
    return;
  }
  const Dims d = dims_of(q, k, v, n_head, q_pos, mask.dropout);
  const dim3 block(32, kWarps);
  with_float(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<blocks_for(d.B * d.H * d.Tq, kWarps), block, 0, stream_of(ctx)>>>(
        ptr<T>(out), ptr<float>(lse), ptr<T>(q), ptr<T>(k), ptr<T>(v), mask_ptr(mask.segments),
        mask_ptr(mask.lengths), d);
  });
  check_launch("attention_forward");
}

void attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const ConstTensor& dout, const ConstTensor& out, const ConstTensor& lse,
                        const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                        const AttentionMask& mask, int n_head) {
  if (!mask.dropout.on() &&
      cudnn_attention_backward(ctx, dq, dk, dv, dout, out, lse, q, k, v, mask, n_head)) {
    if (!mask.lengths.empty())
      for (const Tensor* g : {&dq, &dk, &dv}) zero_padding(ctx, *g, mask.lengths);
    check_launch("attention_backward (cuDNN)");
    return;
  }
  const Dims d = dims_of(q, k, v, n_head, 0, mask.dropout);
  TRAINER_ASSERT(dq.ld() == q.ld(), "attention_backward on CUDA: dq's row stride {} is not q's {}",
                 dq.ld(), q.ld());
  const dim3 block(32, kWarps);
  with_float(q.dtype, [&](auto tag) {
    using T = decltype(tag);
    dq_kernel<<<blocks_for(d.B * d.H * d.Tq, kWarps), block, 0, stream_of(ctx)>>>(
        ptr<T>(dq), ptr<T>(dout), ptr<T>(out), ptr<float>(lse), ptr<T>(q), ptr<T>(k), ptr<T>(v),
        mask_ptr(mask.segments), mask_ptr(mask.lengths), d);
    dkdv_kernel<<<blocks_for(d.B * d.Hkv * d.Tq, kWarps), block, 0, stream_of(ctx)>>>(
        ptr<T>(dk), ptr<T>(dv), ptr<T>(dout), ptr<T>(out), ptr<float>(lse), ptr<T>(q), ptr<T>(k),
        ptr<T>(v), mask_ptr(mask.segments), mask_ptr(mask.lengths), d, dk.ld(), dv.ld());
  });
  check_launch("attention_backward");
}

size_t attention_workspace(const Context& ctx, int64_t rows, int n_head, int64_t Tq, int64_t,
                           int64_t head_size, DType act, bool backward) {
  return cudnn_attention_workspace(rows, n_head, Tq, head_size, act, backward, ctx.deterministic);
}

}  // namespace trainer::nn::cuda
