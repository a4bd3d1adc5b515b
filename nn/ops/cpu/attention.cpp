// CPU attention: one (row, head) per task in forward, one (row, key/value head) in backward
// (the query heads sharing it add to its gradient in order), queries in tiles of kTile with (kTile,
// Tk) fp32 scores, fp32 tile products through sgemm. bf16 heads are converted to fp32 in per-thread
// scratch first (and their results converted back), so both dtypes share one fp32 core.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "nn/ops/cpu/dropout_span.h"
#include "nn/ops/cpu/dtype.h"
#include "nn/ops/cpu/vec_math.h"
#include "nn/ops/kernels.h"
#include "runtime/gemm.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

constexpr int64_t kTile = 64;  // queries per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A (rows, hs) fp32 matrix with leading dimension ld.
template <typename F>  // float (written) or const float (read)
struct MatOf {
  F* p;
  int64_t ld;
  F* row(int64_t i) const { return p + i * ld; }
};
using Mat = MatOf<float>;
using ConstMat = MatOf<const float>;

void zero_rows(Mat m, int64_t first, int64_t last, int64_t hs) {
  for (int64_t i = first; i < last; ++i) std::memset(m.row(i), 0, sizeof(float) * size_t(hs));
}

// Masks the scores s(nq, kend) of queries q0.. (at positions q_pos + q0 + r) in place; see
// Note [Attention masks]. seg is this row's segment ids, or null.
void apply_mask(float* s, int64_t q0, int64_t nq, int64_t kend, int64_t q_pos, const int32_t* seg) {
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t i = q0 + r, pos = q_pos + i;
    float* row = s + r * kend;
    for (int64_t j = pos + 1; j < kend; ++j) row[j] = kNegInf;
    if (seg)
      for (int64_t j = 0; j <= pos && j < kend; ++j)
        if (seg[j] != seg[i]) row[j] = kNegInf;
  }
}

struct Head {
  int64_t Tq, Tk, hs, len, q_pos;  // len: queries before the padding
  float scale;
  const int32_t* seg;
  // Dropout on the probabilities (AttentionDropout): this head's mask, and the counter of its
  // row's first query (b Tq; query i's row of probabilities starts at (row + i) Tk).
  DropoutMask drop{};
  int64_t row = 0;
};

// Applies the head's dropout to probabilities (or their gradients) p(nq, kend) of queries
// q0.. in place.
void drop_probs(const Head& h, float* p, int64_t q0, int64_t nq, int64_t kend) {
  if (!h.drop.on()) return;
  for (int64_t r = 0; r < nq; ++r)
    dropout_span(p + r * kend, p + r * kend, kend, h.drop, (h.row + q0 + r) * h.Tk);
}

void head_forward(const Head& h, Mat o, float* lse, ConstMat q, ConstMat k, ConstMat v,
                  float* scores) {
  for (int64_t q0 = 0; q0 < h.Tq; q0 += kTile) {
    const int64_t tile_end = std::min(q0 + kTile, h.Tq);
    const int64_t nq = std::min(kTile, h.len - q0);
    if (nq > 0) {
      const int64_t kend = std::min(h.Tk, h.q_pos + q0 + nq);
      sgemm(false, true, nq, kend, h.hs, h.scale, q.row(q0), q.ld, k.p, k.ld, 0.0f, scores, kend);
      apply_mask(scores, q0, nq, kend, h.q_pos, h.seg);
      for (int64_t r = 0; r < nq; ++r) lse[q0 + r] = softmax_row(scores + r * kend, kend);
      drop_probs(h, scores, q0, nq, kend);
      sgemm(false, false, nq, h.hs, kend, 1.0f, scores, kend, v.p, v.ld, 0.0f, o.row(q0), o.ld);
    }
    const int64_t pad = std::max(q0, std::min(h.len, tile_end));  // padding queries: zeros
    zero_rows(o, pad, tile_end, h.hs);
    for (int64_t i = pad; i < tile_end; ++i) lse[i] = 0.0f;
  }
}

// dq, dk, dv must be zero on entry.
void head_backward(const Head& h, Mat dq, Mat dk, Mat dv, ConstMat dout, ConstMat o,
                   const float* lse, ConstMat q, ConstMat k, ConstMat v, float* probs,
                   float* dprobs) {
  for (int64_t q0 = 0; q0 < h.len; q0 += kTile) {
    const int64_t nq = std::min(kTile, h.len - q0), kend = q0 + nq;
    // Recompute the probabilities from the saved log-sum-exp.
    sgemm(false, true, nq, kend, h.hs, h.scale, q.row(q0), q.ld, k.p, k.ld, 0.0f, probs, kend);
    apply_mask(probs, q0, nq, kend, 0, h.seg);
    for (int64_t r = 0; r < nq; ++r) {
      float* row = probs + r * kend;
      const float l = lse[q0 + r];
#pragma omp simd
      for (int64_t j = 0; j < kend; ++j) row[j] = vec_exp(row[j] - l);
    }
    // dP = (dO V^T) o M; dS = P * (dP - rowsum(dO * O)), O being the output with dropout.
    sgemm(false, true, nq, kend, h.hs, 1.0f, dout.row(q0), dout.ld, v.p, v.ld, 0.0f, dprobs, kend);
    drop_probs(h, dprobs, q0, nq, kend);
    for (int64_t r = 0; r < nq; ++r) {
      const float* dor = dout.row(q0 + r);
      const float* orow = o.row(q0 + r);
      float dsum = 0;
      for (int64_t d = 0; d < h.hs; ++d) dsum += dor[d] * orow[d];
      float* dpr = dprobs + r * kend;
      const float* pr = probs + r * kend;
#pragma omp simd
      for (int64_t j = 0; j < kend; ++j) dpr[j] = pr[j] * (dpr[j] - dsum);
    }
    sgemm(false, false, nq, h.hs, kend, h.scale, dprobs, kend, k.p, k.ld, 0.0f, dq.row(q0), dq.ld);
    sgemm(true, false, kend, h.hs, nq, h.scale, dprobs, kend, q.row(q0), q.ld, 1.0f, dk.p, dk.ld);
    drop_probs(h, probs, q0, nq, kend);  // dV = (P o M)^T dO
    sgemm(true, false, kend, h.hs, nq, 1.0f, probs, kend, dout.row(q0), dout.ld, 1.0f, dv.p, dv.ld);
  }
}

// One head's (rows, hs) slice of an activation: used in place when fp32, else converted into
// `scratch` (which advances).
template <typename T>
ConstMat head_in(const T* p, int64_t ld, int64_t rows, int64_t hs, float*& scratch) {
  if constexpr (std::is_same_v<T, float>) {
    return {p, ld};
  } else {
    float* m = scratch;
    scratch += rows * hs;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < hs; ++d) m[i * hs + d] = load(p[i * ld + d]);
    return {m, hs};
  }
}

// Where a head's results go: in place when fp32 (zeroed if asked), else fp32 scratch (zeroed)
// that head_out stores afterwards.
template <typename T>
Mat head_result(T* p, int64_t ld, int64_t rows, int64_t hs, float*& scratch, bool zero) {
  Mat m;
  if constexpr (std::is_same_v<T, float>) {
    m = {p, ld};
  } else {
    m = {scratch, hs};
    scratch += rows * hs;
    zero = true;
  }
  if (zero) zero_rows(m, 0, rows, hs);
  return m;
}

template <typename T>
void head_out(T* p, int64_t ld, Mat m, int64_t rows, int64_t hs) {
  if constexpr (!std::is_same_v<T, float>)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < hs; ++d) store(p[i * ld + d], m.row(i)[d]);
}

int64_t per_thread_floats(int64_t Tq, int64_t Tk, int64_t hs, DType act, bool backward) {
  const bool convert = act != DType::f32;
  if (!backward) return kTile * Tk + (convert ? 2 * (Tq + Tk) * hs : 0);
  return 2 * kTile * Tk + (convert ? 8 * Tk * hs : 0);
}

// Grouped-query attention: H query heads share Hkv key/value heads (H / Hkv queries each;
// Hkv = H is multi-head, Hkv = 1 multi-query), told by k's width Hkv * hs.
struct Dims {
  int64_t B, Tq, Tk, C, H, hs, Hkv;
  int64_t group() const { return H / Hkv; }
};

// The shapes, checked by the op (dispatch.cpp) before any backend runs.
Dims dims_of(const ConstTensor& q, const ConstTensor& k, int n_head) {
  const int64_t hs = q.dim(2) / n_head;
  return {q.dim(0), q.dim(1), k.dim(1), q.dim(2), n_head, hs, k.dim(2) / hs};
}

int64_t valid_length(const AttentionMask& m, int64_t b, int64_t T) {
  return m.lengths.empty() ? T : std::clamp<int64_t>(m.lengths.as<int32_t>()[b], 0, T);
}

const int32_t* segments_of(const AttentionMask& m, int64_t b, int64_t T) {
  return m.segments.empty() ? nullptr : m.segments.as<int32_t>() + b * T;
}

// Query head h's dropout mask (none without dropout).
DropoutMask head_dropout(const AttentionMask& m, int64_t h) {
  if (!m.dropout.on()) return {};
  return {m.dropout.p, attention_dropout_key(m.dropout.key, m.dropout.first_head + h), 0};
}

}  // namespace

void attention_forward(const Context& ctx, const Tensor& out, const Tensor& lse,
                       const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                       const AttentionMask& mask, int n_head, int q_pos) {
  const Dims d = dims_of(q, k, n_head);
  const int threads = op_threads(ctx);
  const int64_t per_thread = per_thread_floats(d.Tq, d.Tk, d.hs, q.dtype, false);
  Workspace::Scope scope(ctx.workspace);
  float* scratch = scope.take<float>(threads * per_thread);
  const float scale = 1.0f / std::sqrt(float(d.hs));
  with_float(q.dtype, [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel num_threads(threads)
    {
      float* mine = scratch + omp_get_thread_num() * per_thread;
#pragma omp for collapse(2) schedule(dynamic)
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t h = 0; h < d.H; ++h) {
          float* next = mine + kTile * d.Tk;
          const Head head{d.Tq,
                          d.Tk,
                          d.hs,
                          valid_length(mask, b, d.Tq),
                          q_pos,
                          scale,
                          segments_of(mask, b, d.Tq),
                          head_dropout(mask, h),
                          b * d.Tq};
          const ConstMat qh =
              head_in(q.as<T>() + b * d.Tq * q.ld() + h * d.hs, q.ld(), d.Tq, d.hs, next);
          const int64_t kv_at = h / d.group() * d.hs;
          const ConstMat kh =
              head_in(k.as<T>() + b * d.Tk * k.ld() + kv_at, k.ld(), d.Tk, d.hs, next);
          const ConstMat vh =
              head_in(v.as<T>() + b * d.Tk * v.ld() + kv_at, v.ld(), d.Tk, d.hs, next);
          T* o = out.as<T>() + b * d.Tq * d.C + h * d.hs;
          const Mat oh = head_result(o, d.C, d.Tq, d.hs, next, false);
          head_forward(head, oh, lse.as<float>() + (b * d.H + h) * d.Tq, qh, kh, vh, mine);
          head_out(o, d.C, oh, d.Tq, d.hs);
        }
    }
  });
}

void attention_backward(const Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const ConstTensor& dout, const ConstTensor& out, const ConstTensor& lse,
                        const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                        const AttentionMask& mask, int n_head) {
  const Dims d = dims_of(q, k, n_head);
  const int threads = op_threads(ctx);
  const int64_t T = d.Tq, per_thread = per_thread_floats(T, T, d.hs, q.dtype, true);
  Workspace::Scope scope(ctx.workspace);
  float* scratch = scope.take<float>(threads * per_thread);
  const float scale = 1.0f / std::sqrt(float(d.hs));
  with_float(q.dtype, [&](auto tag) {
    using T_ = decltype(tag);
#pragma omp parallel num_threads(threads)
    {
      float* mine = scratch + omp_get_thread_num() * per_thread;
#pragma omp for collapse(2) schedule(dynamic)
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t g = 0; g < d.Hkv; ++g) {  // a key/value head and the query heads it serves
          float* probs = mine;
          float* dprobs = probs + kTile * T;
          float* next = dprobs + kTile * T;
          // Its query heads' dropout differs: each sets head.drop below.
          Head head{T,  T,    d.hs, valid_length(mask, b, T), 0, scale, segments_of(mask, b, T),
                    {}, b * T};
          auto in = [&](const ConstTensor& x, int64_t at) {
            return head_in(x.as<T_>() + b * T * x.ld() + at, x.ld(), T, d.hs, next);
          };
          const int64_t kv_at = g * d.hs;
          const ConstMat kh = in(k, kv_at), vh = in(v, kv_at);
          T_* dkp = dk.as<T_>() + b * T * dk.ld() + kv_at;
          T_* dvp = dv.as<T_>() + b * T * dv.ld() + kv_at;
          const Mat dkh = head_result(dkp, dk.ld(), T, d.hs, next, true);
          const Mat dvh = head_result(dvp, dv.ld(), T, d.hs, next, true);
          float* per_head = next;  // the query head's slices, reused for each one in turn
          for (int64_t h = g * d.group(); h < (g + 1) * d.group(); ++h) {
            next = per_head;
            const int64_t at = h * d.hs;
            const ConstMat qh = in(q, at), oh = in(out, at), douth = in(dout, at);
            T_* dqp = dq.as<T_>() + b * T * dq.ld() + at;
            const Mat dqh = head_result(dqp, dq.ld(), T, d.hs, next, true);
            head.drop = head_dropout(mask, h);
            head_backward(head, dqh, dkh, dvh, douth, oh, lse.as<float>() + (b * d.H + h) * T, qh,
                          kh, vh, probs, dprobs);
            head_out(dqp, dq.ld(), dqh, T, d.hs);
          }
          head_out(dkp, dk.ld(), dkh, T, d.hs);
          head_out(dvp, dv.ld(), dvh, T, d.hs);
        }
    }
  });
}

size_t attention_workspace(const Context& ctx, int64_t, int, int64_t Tq, int64_t Tk,
                           int64_t head_size, DType act, bool backward) {
  return Workspace::bytes_for<float>(int64_t(op_threads(ctx)) *
                                     per_thread_floats(Tq, Tk, head_size, act, backward));
}

}  // namespace trainer::nn::cpu
