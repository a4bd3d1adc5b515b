#include "runtime/rng.h"

#include <cmath>
#include <numbers>

#include "runtime/philox.h"

namespace trainer {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  const Philox4 r = philox({{c[0], c[1], c[2], c[3]}}, key);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

uint64_t hash64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {
// (0, 1]: never zero, so log() below is finite.
inline float unit_open(uint32_t x) {
  return (float(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
}
}  // namespace

void fill_normal(float* out, int64_t n, uint64_t key, float mean, float std) {
  fill_normal(out, 0, n, key, mean, std);
}

void fill_normal(float* out, int64_t begin, int64_t end, uint64_t key, float mean, float std) {
#pragma omp parallel for schedule(static)
  for (int64_t block = begin / 4; block < (end + 3) / 4; ++block) {
    uint64_t c = uint64_t(block);
    auto r = philox4x32({uint32_t(c), uint32_t(c >> 32), 0, 0}, key);
    float z[4];
    for (int pair = 0; pair < 2; ++pair) {  // Box-Muller: two normals from two uniforms
      float radius = std::sqrt(-2.0f * std::log(unit_open(r[2 * pair])));
      float angle = 2.0f * std::numbers::pi_v<float> * unit_open(r[2 * pair + 1]);
      z[2 * pair] = radius * std::cos(angle);
      z[2 * pair + 1] = radius * std::sin(angle);
    }
    for (int j = 0; j < 4; ++j)
      if (const int64_t i = block * 4 + j; begin <= i && i < end)
        out[i - begin] = mean + std * z[j];
  }
}

void fill_uniform(float* out, int64_t begin, int64_t end, uint64_t key, float lo, float hi) {
#pragma omp parallel for schedule(static)
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t c = uint64_t(i);
    const auto r = philox4x32({uint32_t(c), uint32_t(c >> 32), 2, 0}, key);
    out[i - begin] = lo + (hi - lo) * (float(r[0] >> 8) * (1.0f / 16777216.0f));
  }
}

uint64_t Rng::next_u64() {
  auto r = philox4x32({uint32_t(offset_), uint32_t(offset_ >> 32), 1, 0}, key_);
  ++offset_;
  return (uint64_t(r[0]) << 32) | r[1];
}

float Rng::uniform() {
  return float(next_u64() >> 40) * (1.0f / 16777216.0f);
}

}  // namespace trainer
