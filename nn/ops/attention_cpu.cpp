#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "nn/ops/attention.h"
#include "nn/ops/vec_math.h"
#include "runtime/gemm.h"
#include "runtime/profile.h"

namespace trainer::nn {

namespace {

constexpr int kTile = 64;  // queries per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows in [0, valid) are real tokens; the rest of the row is padding.
int valid_length(const AttentionMask& m, int b, int T) {
  return m.lengths ? std::clamp(m.lengths[b], 0, T) : T;
}

// Masks the scores s(nq, kend) of queries q0.. in row b in place (see Note [Attention masks]).
void apply_mask(float* s, int q0, int nq, int kend, int b, int T, const AttentionMask& m) {
  const int32_t* seg = m.segments ? m.segments + int64_t(b) * T : nullptr;
  for (int r = 0; r < nq; ++r) {
    int i = q0 + r;
    float* row = s + int64_t(r) * kend;
    for (int j = i + 1; j < kend; ++j) row[j] = kNegInf;
    if (seg)
      for (int j = 0; j <= i && j < kend; ++j)
        if (seg[j] != seg[i]) row[j] = kNegInf;
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const AttentionMask& mask,
                       const AttentionShape& s) {
  PROFILE_SCOPE("attention_forward");
  const int B = s.B, T = s.T, C = s.C, H = s.H, hs = C / H;
  const int64_t ld = 3 * int64_t(C);
  const float scale = 1.0f / std::sqrt(float(hs));
#pragma omp parallel
  {
    std::vector<float> scores(size_t(kTile) * T);
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const int len = valid_length(mask, b, T);
        const float* base = qkv + int64_t(b) * T * ld;
        const float* q = base + h * hs;
        const float* k = base + C + h * hs;
        const float* v = base + 2 * C + h * hs;
        float* o = out + int64_t(b) * T * C + h * hs;
        float* l = lse + (int64_t(b) * H + h) * T;
        for (int q0 = 0; q0 < T; q0 += kTile) {
          const int nq = std::min(kTile, len - q0);
          const int kend = q0 + std::max(nq, 0);
          if (nq <= 0) {  // padding queries: zero output
            for (int i = std::max(q0, len); i < std::min(q0 + kTile, T); ++i) {
              std::memset(o + int64_t(i) * C, 0, sizeof(float) * hs);
              l[i] = 0.0f;
            }
            continue;
          }
          float* sc = scores.data();
          gemm(false, true, nq, kend, hs, scale, q + q0 * ld, ld, k, ld, 0.0f, sc, kend);
          apply_mask(sc, q0, nq, kend, b, T, mask);
          for (int r = 0; r < nq; ++r) l[q0 + r] = softmax_row(sc + int64_t(r) * kend, kend);
          gemm(false, false, nq, hs, kend, 1.0f, sc, kend, v, ld, 0.0f, o + int64_t(q0) * C, C);
          for (int i = q0 + nq; i < std::min(q0 + kTile, T); ++i) {  // padding inside the tile
            std::memset(o + int64_t(i) * C, 0, sizeof(float) * hs);
            l[i] = 0.0f;
          }
        }
      }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse,
                        const float* qkv, const AttentionMask& mask, const AttentionShape& s) {
  PROFILE_SCOPE("attention_backward");
  const int B = s.B, T = s.T, C = s.C, H = s.H, hs = C / H;
  const int64_t ld = 3 * int64_t(C);
  const float scale = 1.0f / std::sqrt(float(hs));
  std::memset(dqkv, 0, sizeof(float) * size_t(B) * T * ld);
#pragma omp parallel
  {
    std::vector<float> probs(size_t(kTile) * T), dprobs(size_t(kTile) * T);
#pragma omp for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        const int len = valid_length(mask, b, T);
        const int64_t row0 = int64_t(b) * T;
        const float* q = qkv + row0 * ld + h * hs;
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* dq = dqkv + row0 * ld + h * hs;
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        const float* o = out + row0 * C + h * hs;
        const float* dout_h = dout + row0 * C + h * hs;
        const float* l = lse + (int64_t(b) * H + h) * T;
        for (int q0 = 0; q0 < len; q0 += kTile) {
          const int nq = std::min(kTile, len - q0);
          const int kend = q0 + nq;
          float* p = probs.data();
          float* dp = dprobs.data();
          // Recompute the probabilities from the saved log-sum-exp.
          gemm(false, true, nq, kend, hs, scale, q + q0 * ld, ld, k, ld, 0.0f, p, kend);
          apply_mask(p, q0, nq, kend, b, T, mask);
          for (int r = 0; r < nq; ++r) {
            float* row = p + int64_t(r) * kend;
            float lr = l[q0 + r];
#pragma omp simd
            for (int j = 0; j < kend; ++j) row[j] = vec_exp(row[j] - lr);
          }
          // dP = dO V^T; dS = P * (dP - rowsum(dO * O)).
          gemm(false, true, nq, kend, hs, 1.0f, dout_h + int64_t(q0) * C, C, v, ld, 0.0f, dp, kend);
          for (int r = 0; r < nq; ++r) {
            const float* dor = dout_h + int64_t(q0 + r) * C;
            const float* orow = o + int64_t(q0 + r) * C;
            float dsum = 0;
            for (int d = 0; d < hs; ++d) dsum += dor[d] * orow[d];
            float* dpr = dp + int64_t(r) * kend;
            const float* pr = p + int64_t(r) * kend;
#pragma omp simd
            for (int j = 0; j < kend; ++j) dpr[j] = pr[j] * (dpr[j] - dsum);
          }
          gemm(false, false, nq, hs, kend, scale, dp, kend, k, ld, 0.0f, dq + q0 * ld, ld);
          gemm(true, false, kend, hs, nq, scale, dp, kend, q + q0 * ld, ld, 1.0f, dk, ld);
          gemm(true, false, kend, hs, nq, 1.0f, p, kend, dout_h + int64_t(q0) * C, C, 1.0f, dv, ld);
        }
      }
  }
}

}  // namespace trainer::nn
