// The order-independent sum of squares; see Note [Exact sum of squares] in exact_norm.h.
#include "dist/exact_norm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace trainer::dist {

namespace {

using u128 = unsigned __int128;
constexpr int kFractionBits = 90;             // the fixed point of the scaled squares
constexpr int64_t kChunk = int64_t(1) << 16;  // elements summed in 64-bit halves at a time

float element(const ConstTensor& t, int64_t i) {
  return t.dtype == DType::f32 ? static_cast<const float*>(t.data)[i]
                               : to_float(static_cast<const bf16*>(t.data)[i]);
}

// max |x| over the elements, or NaN/inf when some element is not finite.
double local_max(const ConstTensor& t) {
  const int64_t n = t.numel();
  double m = 0;
  bool finite = true;
#pragma omp parallel for reduction(max : m) reduction(&& : finite) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = element(t, i);
    finite = finite && std::isfinite(x);
    m = std::max(m, double(std::fabs(x)));
  }
  return finite ? m : std::numeric_limits<double>::infinity();
}

// The sum of floor((x / 2^e)^2 * 2^90) over the elements, exactly.
u128 local_fixed_sum(const ConstTensor& t, int e) {
  const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<u128> partial(size_t(chunks), 0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    // Each square is hi * 2^45 + lo with hi, lo < 2^45: 2^16 of them fit 64-bit sums.
    uint64_t hi = 0, lo = 0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      const double s = std::ldexp(double(element(t, i)), -e);
      const double top = s * s * 0x1p45;  // exact: a power-of-two scale
      const double h = std::floor(top);
      hi += uint64_t(h);
      lo += uint64_t((top - h) * 0x1p45);  // the fraction of an fp64 is exact
    }
    partial[size_t(c)] = (u128(hi) << 45) + u128(lo);
  }
  u128 sum = 0;
  for (u128 p : partial) sum += p;
  return sum;
}

}  // namespace

double exact_sum_squares(Communicator& comm, const ConstTensor& grads, bool sharded) {
  TRAINER_ASSERT(grads.device == Device::cpu,
                 "the exact gradient norm runs on host memory (dist.deterministic is CPU-only)");
  TRAINER_ASSERT(grads.dtype == DType::f32 || grads.dtype == DType::bf16, "exact norm of dtype {}",
                 dtype_name(grads.dtype));
  const bool across = sharded && comm.size() > 1;
  double max = local_max(grads);
  if (across) {
    std::vector<double> all(size_t(comm.size()));
    comm.all_gather_async(&max, all.data(), 1, DType::f64).wait();
    for (double m : all) max = std::isfinite(m) ? std::max(max, m) : m;
  }
  if (!std::isfinite(max)) return max;
  if (max == 0) return 0;
  int e = 0;
  std::frexp(max, &e);  // max < 2^e
  u128 sum = local_fixed_sum(grads, e);
  if (across) {
    const uint64_t mine[2] = {uint64_t(sum >> 64), uint64_t(sum)};
    std::vector<uint64_t> all(size_t(2 * comm.size()));
    comm.all_gather_async(mine, all.data(), 2, DType::i64).wait();
    sum = 0;
    for (size_t r = 0; r < all.size(); r += 2) sum += (u128(all[r]) << 64) | all[r + 1];
  }
  return std::ldexp(double(sum), 2 * e - kFractionBits);
}

}  // namespace trainer::dist
