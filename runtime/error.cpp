#include "runtime/error.h"

namespace trainer::detail {

void throw_error(std::string message) {
  throw Error(std::move(message));
}

}  // namespace trainer::detail
