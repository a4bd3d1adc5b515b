#include <omp.h>

#include <algorithm>

#include "nn/ops/cpu/dtype.h"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cpu {

namespace {

template <typename T>
void forward_rows(float* out, const int32_t* tokens, const int32_t* positions, const T* wte,
                  const T* wpe, int64_t N, int64_t C, int64_t begin, int64_t rows) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = tokens[n] - begin;
    const T* e = wte + id * C;
    float* o = out + n * C;
    if (id < 0 || id >= rows) {  // another rank's slice of the vocabulary
      const T* p = wpe ? wpe + int64_t(positions[n]) * C : nullptr;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = p ? load(p[c]) : 0.0f;
    } else if (wpe) {
      const T* p = wpe + int64_t(positions[n]) * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = load(e[c]) + load(p[c]);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) o[c] = load(e[c]);
    }
  }
}

// table[ids[n] - begin] += dout[n] for every n whose id is one of the table's `rows`. Rows
// sharing an id are summed in fp32 in row order and added to the table once (one rounding for a
// bf16 table): the rows are first ordered by (id, n) in `order`. Threads own channel slices, so
// no two write the same element.
template <typename G>
void accumulate_rows(G* table, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                     int64_t begin, int64_t rows, int64_t* order, float* acc) {
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n)
    if (ids[n] - begin >= 0 && ids[n] - begin < rows)
      order[count++] = (int64_t(ids[n] - begin) << 32) | n;
  N = count;
  std::sort(order, order + N);
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c0 = C * t / nt, c1 = C * (t + 1) / nt;
    for (int64_t i = 0; i < N;) {
      const int64_t id = order[i] >> 32;
      for (int64_t c = c0; c < c1; ++c) acc[c] = 0.0f;
      for (; i < N && (order[i] >> 32) == id; ++i) {
        const float* d = dout + (order[i] & 0xffffffff) * C;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) acc[c] += d[c];
      }
      G* row = table + id * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) store(row[c], load(row[c]) + acc[c]);
    }
  }
}

}  // namespace

void embedding_forward(const Context& ctx, const Tensor& out, const ConstTensor& tokens,
                       const ConstTensor& positions, const ConstTensor& wte, const ConstTensor& wpe,
                       int64_t vocab_begin) {
  const int64_t N = out.rows(), C = out.cols();
  with_float(wte.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_rows(out.as<float>(), tokens.as<int32_t>(), positions.as<int32_t>(), wte.as<T>(),
                 wpe.empty() ? nullptr : wpe.as<T>(), N, C, vocab_begin, wte.rows());
  });
}

void embedding_backward(const Context& ctx, const Tensor& dwte, const Tensor& dwpe,
                        const ConstTensor& dout, const ConstTensor& tokens,
                        const ConstTensor& positions, int64_t vocab_begin) {
  const int64_t N = dout.rows(), C = dout.cols();
  Workspace::Scope scratch(ctx.workspace);
  int64_t* order = scratch.take<int64_t>(N);
  float* acc = scratch.take<float>(C);
  with_float(dwte.dtype, [&](auto tag) {
    using G = decltype(tag);
    accumulate_rows(dwte.as<G>(), dout.as<float>(), tokens.as<int32_t>(), N, C, vocab_begin,
                    dwte.rows(), order, acc);
    if (!dwpe.empty())
      accumulate_rows(dwpe.as<G>(), dout.as<float>(), positions.as<int32_t>(), N, C, 0, dwpe.rows(),
                      order, acc);
  });
}

size_t embedding_backward_workspace(const Context&, int64_t N, int64_t C) {
  return Workspace::bytes_for<int64_t>(N) + Workspace::bytes_for<float>(C);
}

}  // namespace trainer::nn::cpu
