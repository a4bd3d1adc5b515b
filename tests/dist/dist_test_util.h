// Small models and synthetic batches for the dist tests (no data layer): a row's tokens depend
// only on (seed, global row index), so any rank can rebuild any other rank's rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "nn/transformer.h"
#include "runtime/memory.h"

namespace trainer::dist {
class Communicator;
}

namespace trainer::dist::testing {

// The communicator of the multi-rank test binary (Note [Multi-rank tests]).
Communicator& world();

inline nn::ModelConfig small_config() {
  nn::ModelConfig c;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

// Sizes a model for up to rows x T tokens.
inline nn::ExecConfig exec_for(int rows, int T, nn::Recompute recompute = nn::Recompute::none,
                               DType compute = DType::f32, DType grad = DType::f32) {
  nn::ExecConfig e;
  e.max_rows = rows;
  e.max_seq_len = T;
  e.recompute = recompute;
  e.compute = compute;
  e.grad = grad;
  return e;
}

inline std::vector<float> host_params(nn::Model& m) {
  return read_as_f32(m.context(), m.params());
}
inline std::vector<float> host_grads(nn::Model& m) {
  return read_as_f32(m.context(), m.grads());
}

struct Rows {
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;  // (B, T)
  nn::BatchView view() const { return {B, T, tokens.data(), targets.data(), nullptr, nullptr}; }
  int64_t loss_tokens() const {
    int64_t n = 0;
    for (int32_t t : targets) n += t >= 0;
    return n;
  }
};

// Rows [first, first + count) of the synthetic corpus for `seed`; some targets are -1 so
// ranks hold different token counts.
inline Rows make_rows(uint64_t seed, int first, int count, int T, int V = 64) {
  Rows r;
  r.B = count;
  r.T = T;
  for (int b = first; b < first + count; ++b) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + uint64_t(b) * 0xbf58476d1ce4e5b9ull + 1;
    const int masked_tail = int((x >> 7) % 5);  // 0..4 positions at the end not counted
    for (int t = 0; t < T; ++t) {
      x ^= x >> 31;
      x *= 0x94d049bb133111ebull;
      x ^= x >> 29;
      r.tokens.push_back(int32_t(x % uint64_t(V)));
      r.targets.push_back(t >= T - masked_tail ? -1 : int32_t((x >> 17) % uint64_t(V)));
    }
  }
  return r;
}

inline Rows concat(const std::vector<Rows>& parts) {
  Rows all;
  for (const Rows& p : parts) {
    all.B += p.B;
    all.T = p.T;
    all.tokens.insert(all.tokens.end(), p.tokens.begin(), p.tokens.end());
    all.targets.insert(all.targets.end(), p.targets.begin(), p.targets.end());
  }
  return all;
}

// max |a - b| / max |b| over n elements.
inline double max_relative_diff(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// ||a - b||_2 / ||b||_2 over n elements.
inline double norm_relative_diff(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace trainer::dist::testing
