// Logging through fmt: one line per call, prefixed with the rank when more than one process
// runs. Only rank 0 prints `info` by default; warnings and errors print on every rank.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace trainer::log {

enum class Level { debug, info, warn, error };

// Sets the rank and world size shown in the prefix and the minimum level that prints.
void configure(int rank, int world_size, Level min_level = Level::info);
// Also appends every printed line to this file (the run's log); empty closes it. Throws
// trainer::Error when the file cannot be opened.
void set_file(const std::string& path);
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
  write(Level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  write(Level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace trainer::log
