// Byte alignment of device memory: what every allocation and scratch block guarantees, and what
// a pointer actually has (libraries such as cuBLASLt choose kernels by it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainer {

// Every Buffer and every Workspace block starts at a multiple of this: cuBLASLt's workspace
// and its fastest kernels' operands want 256 bytes (cudaMalloc's own alignment).
constexpr size_t kDeviceAlignment = 256;

// The largest power of two dividing `p`'s address, at most `cap` (a null pointer: `cap`).
inline size_t pointer_alignment(const void* p, size_t cap = kDeviceAlignment) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return cap;
  const size_t low = size_t(a & (~a + 1));
  return low < cap ? low : cap;
}

}  // namespace trainer
