#include <omp.h>

#include "nn/ops/embedding.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace trainer::nn {

void embedding_forward(float* out, const int32_t* tokens, const int32_t* positions,
                       const float* wte, const float* wpe, int64_t N, int C, int V, int P) {
  PROFILE_SCOPE("embedding_forward");
  for (int64_t n = 0; n < N; ++n) {
    CHECK(tokens[n] >= 0 && tokens[n] < V,
          "token id {} at position {} is outside the vocab [0, {})", tokens[n], n, V);
    CHECK(positions[n] >= 0 && positions[n] < P, "position {} exceeds the model's max_seq_len {}",
          positions[n], P);
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* e = wte + int64_t(tokens[n]) * C;
    const float* p = wpe + int64_t(positions[n]) * C;
    float* o = out + n * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        const int32_t* positions, int64_t N, int C) {
  PROFILE_SCOPE("embedding_backward");
  // Rows may repeat, so threads split the channels, not the rows: each thread owns a channel
  // slice of every embedding row and sums in row order (deterministic).
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int c0 = int(int64_t(C) * t / nt), c1 = int(int64_t(C) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * C;
      float* e = dwte + int64_t(tokens[n]) * C;
      float* p = dwpe + int64_t(positions[n]) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

}  // namespace trainer::nn
