#include "runtime/log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <unistd.h>

#include "runtime/error.h"

namespace trainer::log {
namespace {

struct State {
  int rank = 0;
  int world_size = 1;
  Level min_level = Level::info;
  bool all_ranks = false;
  std::FILE* file = nullptr;
  std::string file_error;
  std::string run_log;  // rank 0's file, for this rank's errors (another rank's only)
  std::mutex mutex;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void configure(int rank, int world_size, Level min_level, bool all_ranks) {
  State& s = state();
  s.rank = rank;
  s.world_size = world_size;
  s.min_level = min_level;
  s.all_ranks = all_ranks;
}

namespace {
// Whether `level` goes to the console (as opposed to the rank's log file only).
bool on_console(const State& s, Level level) {
  return level >= Level::warn || s.rank == 0 || s.min_level == Level::debug;
}
}  // namespace

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

void set_run_log(const std::string& path) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.run_log = path;
}

std::string file_error() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.file_error;
}

bool enabled(Level level) {
  const State& s = state();
  return level >= s.min_level && (on_console(s, level) || (s.all_ranks && s.file));
}

void write(Level level, const std::string& message) {
  State& s = state();
  const char* tag = level == Level::warn ? "warning: " : level == Level::error ? "error: " : "";
  std::string line = s.world_size > 1 ? fmt::format("[rank {}] {}{}\n", s.rank, tag, message)
                                      : fmt::format("{}{}\n", tag, message);
  std::lock_guard lock(s.mutex);
  if (on_console(s, level)) {
    std::FILE* out = level >= Level::warn ? stderr : stdout;
    std::fputs(line.c_str(), out);
    std::fflush(out);
  }
  // One write(2) in append mode: lines of several ranks never interleave within a line.
  if (level == Level::error && !s.run_log.empty()) {
    const int fd = ::open(s.run_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
      ::close(fd);
    }
  }
  if (s.file) {
    errno = 0;
    if (std::fputs(line.c_str(), s.file) < 0 || std::fflush(s.file) != 0) {
      s.file_error = std::strerror(errno ? errno : EIO);
      std::clearerr(s.file);
    }
  }
}

}  // namespace trainer::log
