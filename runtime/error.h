// Errors: one exception type for every user-facing failure, raised by CHECK with a formatted
// message. `main` catches it once and prints its message as a single line; bugs use assert.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace trainer {

// A failure the user can act on (bad input, I/O, a peer that died). what() is one line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error the user caused by how they called the program (exit code 2 rather than 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void throw_error(std::string message);
}  // namespace detail

}  // namespace trainer

// CHECK(cond, "format {}", args...): throws trainer::Error with the formatted message.
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) [[unlikely]]                                     \
      ::trainer::detail::throw_error(::fmt::format(__VA_ARGS__)); \
  } while (0)

// THROW_ERROR("format {}", args...): unconditionally throws trainer::Error.
#define THROW_ERROR(...) ::trainer::detail::throw_error(::fmt::format(__VA_ARGS__))
