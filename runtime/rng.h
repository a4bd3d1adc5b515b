// Counter-based random numbers (Philox-4x32-10). A value is a pure function of
// (key, counter), so any parameter's initial values follow from (seed, name) alone, whatever
// the layout, world size or order of initialisation, and a generator's state is two integers.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace trainer {

// Philox-4x32-10: four 32-bit outputs for a 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, uint64_t key);

// 64-bit FNV-1a hash of a string (stable across runs and machines).
uint64_t hash64(std::string_view s);

// Fills out[0..n) with N(mean, std^2) values; element i depends only on (key, i).
void fill_normal(float* out, int64_t n, uint64_t key, float mean, float std);
// Elements [begin, end) of the same values into out[0..end-begin), for filling a piece at a time.
void fill_normal(float* out, int64_t begin, int64_t end, uint64_t key, float mean, float std);

// Elements [begin, end) of values uniform in [lo, hi) into out[0..end-begin); element i
// depends only on (key, i).
void fill_uniform(float* out, int64_t begin, int64_t end, uint64_t key, float lo, float hi);

// A stream of uniform numbers whose whole state is (key, offset): saved in checkpoints.
class Rng {
 public:
  explicit Rng(uint64_t key = 0, uint64_t offset = 0) : key_(key), offset_(offset) {}
  // Uniform in [0, 1) with 24 bits of resolution.
  float uniform();
  // Uniform 64-bit integer.
  uint64_t next_u64();
  uint64_t key() const { return key_; }
  uint64_t offset() const { return offset_; }

 private:
  uint64_t key_;
  uint64_t offset_;
};

}  // namespace trainer
