// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", 2011): four
// 32-bit outputs as a pure function of a 128-bit counter and a 64-bit key, compiled for both
// backends so that the CPU and CUDA draw the same numbers (runtime/rng.h builds on it).
#pragma once

#include <cstdint>

#include "runtime/host_device.h"

namespace trainer {

struct Philox4 {
  uint32_t v[4];
};

TRAINER_HOST_DEVICE inline Philox4 philox(Philox4 c, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kM0) * c.v[0];
    const uint64_t p1 = uint64_t(kM1) * c.v[2];
    c = {{uint32_t(p1 >> 32) ^ c.v[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.v[3] ^ k1,
          uint32_t(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// A key derived from `key` and four words: distinct words give unrelated keys.
TRAINER_HOST_DEVICE inline uint64_t philox_subkey(uint64_t key, uint32_t a, uint32_t b, uint32_t c,
                                                  uint32_t d) {
  const Philox4 r = philox({{a, b, c, d}}, key);
  return uint64_t(r.v[0]) | uint64_t(r.v[1]) << 32;
}

}  // namespace trainer
