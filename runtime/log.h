// Logging through fmt: one line per call, prefixed with the rank when more than one process
// runs. Lines below the minimum level are dropped. On the console rank 0 prints every level,
// the other ranks warnings and errors only (every level at `debug`); a rank's log file, when
// set, receives all it prints and, with `all_ranks`, its info lines too.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "runtime/enum_names.h"

namespace trainer::log {

enum class Level { debug, info, warn, error };
inline constexpr EnumNames<Level, 4> kLevelNames{"log.level",
                                                 {{{Level::debug, "debug"},
                                                   {Level::info, "info"},
                                                   {Level::warn, "warn"},
                                                   {Level::error, "error"}}}};

// Sets the rank and world size shown in the prefix, the minimum level that prints, and whether
// every rank (not only rank 0) writes its info lines to its log file.
void configure(int rank, int world_size, Level min_level = Level::info, bool all_ranks = false);
// Also appends every printed line to this file (the run's log); empty closes it. Throws
// trainer::Error when the file cannot be opened.
void set_file(const std::string& path);
// Also appends this rank's errors to `path`, the run's log that rank 0 writes (set on the
// other ranks), so that it ends with the cause of a failure whichever rank saw it. Best
// effort: the error is on this rank's console and in its own log file in any case.
void set_run_log(const std::string& path);
// Why the last write to that file failed (a full disk), or "" while every write succeeded.
std::string file_error();
void write(Level level, const std::string& message);
bool enabled(Level level);

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(Level::warn)) write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace trainer::log
