#include "dist/fixed_tree.h"

#include <algorithm>

#include "runtime/error.h"

namespace trainer::dist {

void add_into(DType type, void* dst, const void* src, int64_t n) {
  auto add = [&](auto* d, const auto* s) {
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  };
  switch (type) {
    case DType::f32:
      return add(static_cast<float*>(dst), static_cast<const float*>(src));
    case DType::f64:
      return add(static_cast<double*>(dst), static_cast<const double*>(src));
    case DType::i32:
      return add(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src));
    case DType::i64:
      return add(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src));
    case DType::bf16: {
      bf16* d = static_cast<bf16*>(dst);
      const bf16* s = static_cast<const bf16*>(src);
      for (int64_t i = 0; i < n; ++i) d[i] = to_bf16(to_float(d[i]) + to_float(s[i]));
      return;
    }
    default:
      TRAINER_ASSERT(false, "no sum for dtype {}", dtype_name(type));
  }
}

FixedTree::FixedTree(int world, int rank, int64_t elements, DType type, bool scatter)
    : world_(world),
      rank_(rank),
      type_(type),
      element_bytes_(dtype_size(type)),
      bounds_(size_t(world) + 1) {
  TRAINER_ASSERT(world > 0 && (world & (world - 1)) == 0 && rank >= 0 && rank < world,
                 "a fixed tree of rank {} in {} ranks", rank, world);
  for (int k = 0; k <= world; ++k)
    bounds_[size_t(k)] = scatter ? k * (elements / world) : k * elements / world;
}

std::vector<int> FixedTree::partners() const {
  std::vector<int> out;
  for (int bit = 1; bit < world_; bit <<= 1) out.push_back(rank_ ^ bit);
  return out;
}

size_t FixedTree::pack(int round, const char* buf, std::vector<char>& send) const {
  const int bit = 1 << round;
  send.clear();
  size_t receive = 0;
  for (int k = 0; k < world_; ++k) {
    const size_t b = size_t(bounds_[size_t(k)]) * element_bytes_,
                 e = size_t(bounds_[size_t(k) + 1]) * element_bytes_;
    if (kept(bit, k))
      receive += e - b;
    else if (held(bit, k))
      send.insert(send.end(), buf + b, buf + e);
  }
  return receive;
}

void FixedTree::add_received(int round, char* buf, const char* received) const {
  const int bit = 1 << round;
  for (int k = 0; k < world_; ++k) {
    if (!kept(bit, k)) continue;
    const int64_t n = bounds_[size_t(k) + 1] - bounds_[size_t(k)];
    add_into(type_, buf + size_t(bounds_[size_t(k)]) * element_bytes_, received, n);
    received += size_t(n) * element_bytes_;
  }
}

}  // namespace trainer::dist
