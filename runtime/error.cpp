#include "runtime/error.h"

#include <cstring>

namespace trainer::detail {

namespace {
// __FILE__ is an absolute path; messages name files from the source root ("nn/model.cpp").
const char* source_relative(const char* file) {
  static const size_t prefix = std::strlen(__FILE__) - std::strlen("runtime/error.cpp");
  return std::strncmp(file, __FILE__, prefix) == 0 ? file + prefix : file;
}
}  // namespace

void throw_error(std::string message) {
  throw Error(std::move(message));
}

void throw_usage_error(std::string message) {
  throw UsageError(std::move(message));
}

void throw_internal(const char* file, int line, const char* condition, std::string message) {
  throw InternalError(fmt::format("internal error at {}:{}: {} ({}); please report this bug",
                                  source_relative(file), line, message, condition));
}

}  // namespace trainer::detail
