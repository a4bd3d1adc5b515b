// Shuffling without a materialised permutation: a keyed bijection on [0, n) (a Feistel network
// with cycle walking), so the order over billions of samples is a pure function of
// (seed, epoch) and costs O(1) memory.
#pragma once

#include <cstdint>

namespace trainer::data {

// A pseudo-random permutation of [0, n) chosen by `key`.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  // The i-th element of the permuted order (i < n).
  uint64_t operator()(uint64_t i) const;
  uint64_t size() const { return n_; }

 private:
  uint64_t round(uint64_t half, int r) const;
  uint64_t n_;
  uint64_t key_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
};

// The shuffle key of one epoch for one purpose (`stream` separates independent shuffles).
uint64_t epoch_key(uint64_t seed, int64_t epoch, uint64_t stream);

}  // namespace trainer::data
