#include "runtime/log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "runtime/error.h"

namespace trainer::log {
namespace {

struct State {
  int rank = 0;
  int world_size = 1;
  Level min_level = Level::info;
  std::FILE* file = nullptr;
  std::string file_error;
  std::mutex mutex;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void configure(int rank, int world_size, Level min_level) {
  State& s = state();
  s.rank = rank;
  s.world_size = world_size;
  s.min_level = min_level;
}

void set_file(const std::string& path) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.file) std::fclose(s.file);
  s.file = nullptr;
  s.file_error.clear();
  if (path.empty()) return;
  s.file = std::fopen(path.c_str(), "a");
  CHECK(s.file, "cannot write {}: {}", path, std::strerror(errno));
}

std::string file_error() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.file_error;
}

bool enabled(Level level) {
  const State& s = state();
  if (level >= Level::warn) return true;
  return level >= s.min_level && (s.rank == 0 || s.min_level == Level::debug);
}

void write(Level level, const std::string& message) {
  State& s = state();
  const char* tag = level == Level::warn ? "warning: " : level == Level::error ? "error: " : "";
  std::string line = s.world_size > 1 ? fmt::format("[rank {}] {}{}\n", s.rank, tag, message)
                                      : fmt::format("{}{}\n", tag, message);
  std::lock_guard lock(s.mutex);
  std::FILE* out = level >= Level::warn ? stderr : stdout;
  std::fputs(line.c_str(), out);
  std::fflush(out);
  if (s.file) {
    errno = 0;
    if (std::fputs(line.c_str(), s.file) < 0 || std::fflush(s.file) != 0) {
      s.file_error = std::strerror(errno ? errno : EIO);
      std::clearerr(s.file);
    }
  }
}

}  // namespace trainer::log
