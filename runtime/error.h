// Errors: one exception type for every user-facing failure, raised by CHECK with a formatted
// message (USAGE_CHECK for what the config or command line caused: exit 2), and an always-on
// internal assertion for bugs. The type is chosen where the error is thrown, never relabelled
// by a catch; a bug is not an Error, so no `catch (const Error&)` takes it for the user's
// doing. `main` catches once and prints the message as a single line.
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

// A broken invariant: a bug in the trainer, not something the user did. Names file and line.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
[[noreturn]] void throw_error(std::string message);
[[noreturn]] void throw_usage_error(std::string message);
[[noreturn]] void throw_internal(const char* file, int line, const char* condition,
                                 std::string message);
}  // namespace detail

}  // namespace trainer

// CHECK(cond, "format {}", args...): throws trainer::Error with the formatted message. For what
// a user can cause (input, files, peers); bugs use TRAINER_ASSERT.
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) [[unlikely]]                                     \
      ::trainer::detail::throw_error(::fmt::format(__VA_ARGS__)); \
  } while (0)

// USAGE_CHECK(cond, "format {}", args...): throws trainer::UsageError, for a config value or
// command-line argument that cannot work.
#define USAGE_CHECK(cond, ...)                                          \
  do {                                                                  \
    if (!(cond)) [[unlikely]]                                           \
      ::trainer::detail::throw_usage_error(::fmt::format(__VA_ARGS__)); \
  } while (0)

// THROW_ERROR("format {}", args...): unconditionally throws trainer::Error.
#define THROW_ERROR(...) ::trainer::detail::throw_error(::fmt::format(__VA_ARGS__))

// TRAINER_ASSERT(cond, "format {}", args...): an invariant, checked in every build; throws
// trainer::InternalError naming the source file, line and condition.
#define TRAINER_ASSERT(cond, ...)                                                               \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      ::trainer::detail::throw_internal(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)
