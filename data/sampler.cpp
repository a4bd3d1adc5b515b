// Feistel permutation over an index domain.
#include "data/sampler.h"

#include <bit>

#include "runtime/rng.h"

namespace trainer::data {

namespace {
uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
constexpr int kRounds = 6;
}  // namespace

uint64_t epoch_key(uint64_t seed, int64_t epoch, uint64_t stream) {
  return mix64(mix64(seed ^ 0x5eedull) ^ mix64(uint64_t(epoch) * 0x100000001b3ull + stream));
}

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n), key_(key) {
  // Note [Cycle walking]: the network permutes [0, 4^half_bits), the smallest even power of two
  // >= n; values >= n are mapped again until they land inside, which is still a bijection on
  // [0, n) and takes fewer than 4 steps on average.
  int bits = n <= 1 ? 2 : std::bit_width(n - 1);
  half_bits_ = (bits + 1) / 2;
  if (half_bits_ < 1) half_bits_ = 1;
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
}

uint64_t Permutation::round(uint64_t half, int r) const {
  auto out = philox4x32({uint32_t(half), uint32_t(half >> 32), uint32_t(r), 0x9e37u}, key_);
  return ((uint64_t(out[1]) << 32) | out[0]) & half_mask_;
}

uint64_t Permutation::operator()(uint64_t i) const {
  if (n_ <= 1) return i;
  uint64_t x = i;
  do {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (int r = 0; r < kRounds; ++r) {
      uint64_t next = left ^ round(right, r);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return x;
}

}  // namespace trainer::data
