// Half-precision conversion through the compiler's _Float16 (IEEE binary16, correctly rounded).
#include "runtime/dtype.h"

namespace trainer {

f16 to_f16(float f) {
  return f16{bits_as<uint16_t>(static_cast<_Float16>(f))};
}

float to_float(f16 h) {
  return static_cast<float>(bits_as<_Float16>(h.bits));
}

}  // namespace trainer
