// libFuzzer target for the safetensors reader: any byte string must either parse (every
// tensor's bytes inside the input) or be rejected with trainer::Error, never crash, hang or
// read out of bounds.
#include <cstddef>
#include <cstdint>

#include "runtime/error.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const trainer::SafetensorsFile file(data, size, "fuzz");
    for (const trainer::TensorEntry& t : file.tensors()) {
      // Touch the first and last byte of every tensor: out of bounds would be reported.
      const size_t bytes = size_t(t.numel()) * trainer::dtype_size(t.dtype);
      if (bytes == 0) continue;
      const auto* p = static_cast<const volatile uint8_t*>(t.data);
      (void)p[0];
      (void)p[bytes - 1];
    }
  } catch (const trainer::Error&) {
  }
  return 0;
}
