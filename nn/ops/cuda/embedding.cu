// CUDA embedding: a thread per output element forward. Backward sorts the rows by table row
// (cub's stable radix sort) and gives each run of equal rows one block that adds them in row
// order: every table row has one writer (deterministic, no atomics), and the work is spread
// over the distinct ids rather than over the C channels alone.
#include <cub/device/device_radix_sort.cuh>

#include "nn/ops/cuda/common.cuh"
#include "nn/ops/kernels.h"
#include "runtime/workspace.h"

namespace trainer::nn::cuda {

namespace {

template <typename T>
__global__ void forward_kernel(float* out, const int32_t* tok, const int32_t* pos, const T* wte,
                               const T* wpe, int64_t N, int64_t C, int64_t begin, int64_t rows) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C, id = int64_t(tok[n]) - begin;
  float v = id >= 0 && id < rows ? ld(wte[id * C + c]) : 0.0f;  // else another rank's slice
  if (wpe) v += ld(wpe[int64_t(pos[n]) * C + c]);
  out[i] = v;
}

__global__ void iota_kernel(int32_t* x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = int32_t(i);
}

// Block i looks at position i of the rows sorted by index; the first position of each run of
// equal indices adds the run's rows, in row order, into table row index - begin (when the
// table, a slice of `rows` rows, holds it).
template <typename G>
__global__ void run_sums_kernel(G* table, const uint32_t* sorted_index, const int32_t* sorted_row,
                                const float* dout, int64_t N, int64_t C, int64_t begin,
                                int64_t rows) {
  const int64_t i = blockIdx.x;
  const uint32_t id = sorted_index[i];
  if (i > 0 && sorted_index[i - 1] == id) return;
  if (int64_t(id) < begin || int64_t(id) >= begin + rows) return;
  int64_t end = i + 1;
  while (end < N && sorted_index[end] == id) ++end;
  G* dst = table + (int64_t(id) - begin) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = ld(dst[c]);
    for (int64_t j = i; j < end; ++j) acc += dout[int64_t(sorted_row[j]) * C + c];
    st(dst[c], acc);
  }
}

// Token ids: any non-negative int32 (the op does not know the vocabulary; a slice's table does
// not bound them).
constexpr int kTokenBits = 31;

// Bits that hold every index below `rows` (positions, which the table holds all of).
int bits_below(int64_t rows) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) < rows) ++bits;
  return bits;
}

// An upper bound on the scratch cub's radix sort of N pairs takes beyond its input and output:
// its alternate key and value buffers (8N bytes) and its histograms and look-back tiles (a few
// words per 256 items): planned without a device, checked against cub's own figure per call.
size_t cub_sort_bound(int64_t N) {
  return size_t(16 * N) + (size_t(1) << 20);
}

// table[index[n] - begin] += dout[n] for every n whose index the table's `rows` rows hold, each
// table row's rows in row order. Every index is below 2^index_bits: the sort must order all of
// them, those of other slices too, or an id above the slice would land amid an id of the
// slice that shares its low bits, splitting its run between blocks that write one row.
template <typename G>
void add_rows(const Context& ctx, G* table, int64_t begin, int64_t rows, const int32_t* index,
              const float* dout, int64_t N, int64_t C, int index_bits) {
  Workspace::Scope scratch(ctx.workspace);
  uint32_t* sorted_index = scratch.take<uint32_t>(N);
  int32_t* row = scratch.take<int32_t>(N);
  int32_t* sorted_row = scratch.take<int32_t>(N);
  const size_t bound = cub_sort_bound(N);
  void* temp = scratch.take<char>(int64_t(bound));
  const cudaStream_t stream = stream_of(ctx);
  iota_kernel<<<blocks_for(N), kThreads, 0, stream>>>(row, N);
  // Ids were validated non-negative: sorted as unsigned, on the bits they need. cub's radix sort
  // is stable, so equal ids keep their rows in order.
  const auto* keys = reinterpret_cast<const uint32_t*>(index);
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, sorted_index, row, sorted_row, N,
                                             0, index_bits, stream));
  TRAINER_ASSERT(bytes <= bound, "cub's radix sort of {} pairs wants {} bytes, {} planned", N,
                 bytes, bound);
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, keys, sorted_index, row, sorted_row, N, 0,
                                             index_bits, stream));
  run_sums_kernel<<<unsigned(N), 256, 0, stream>>>(table, sorted_index, sorted_row, dout, N, C,
                                                   begin, rows);
}

}  // namespace

void embedding_forward(const Context& ctx, const Tensor& out, const ConstTensor& tokens,
                       const ConstTensor& positions, const ConstTensor& wte, const ConstTensor& wpe,
                       int64_t vocab_begin) {
  const int64_t N = tokens.numel(), C = out.cols();
  with_float(wte.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<<<blocks_for(N * C), kThreads, 0, stream_of(ctx)>>>(
        ptr<float>(out), ptr<int32_t>(tokens), ptr<int32_t>(positions), ptr<T>(wte),
        wpe.empty() ? nullptr : ptr<T>(wpe), N, C, vocab_begin, wte.rows());
  });
  check_launch("embedding_forward");
}

void embedding_backward(const Context& ctx, const Tensor& dwte, const Tensor& dwpe,
                        const ConstTensor& dout, const ConstTensor& tokens,
                        const ConstTensor& positions, int64_t vocab_begin) {
  const int64_t N = tokens.numel(), C = dout.cols();
  with_float(dwte.dtype, [&](auto tag) {
    using G = decltype(tag);
    add_rows(ctx, ptr<G>(dwte), vocab_begin, dwte.rows(), ptr<int32_t>(tokens), ptr<float>(dout), N,
             C, kTokenBits);
    if (!dwpe.empty())
      add_rows(ctx, ptr<G>(dwpe), 0, dwpe.rows(), ptr<int32_t>(positions), ptr<float>(dout), N, C,
               bits_below(dwpe.rows()));
  });
  check_launch("embedding_backward");
}

size_t embedding_backward_workspace(const Context&, int64_t N, int64_t) {
  return 3 * Workspace::bytes_for<int32_t>(N) +
         Workspace::bytes_for<char>(int64_t(cub_sort_bound(N)));
}

}  // namespace trainer::nn::cuda
