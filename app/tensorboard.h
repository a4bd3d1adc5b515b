// log.tensorboard: the run's metrics as a TensorBoard event file (Note [Event files] in
// tensorboard.cpp), written beside metrics.jsonl with the same values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainer::app {

// CRC-32C (Castagnoli) of a byte range, and TFRecord's masked form of it.
uint32_t crc32c(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

class EventWriter {
 public:
  // Opens the run's event file in `dir` (created if absent): a new one, or, with keep_through
  // >= 0 (a resumed run), the one there, first dropping its events of steps after keep_through
  // and any torn last record (the file is replaced atomically). Throws trainer::Error naming
  // the file when it cannot be read or written.
  EventWriter(const std::filesystem::path& dir, int64_t keep_through);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event at `step` whose summary holds each number of `record` (but "step") as a scalar
  // tagged with its key; written and flushed. False when the write failed (a full disk).
  bool write(int64_t step, const nlohmann::json& record);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace trainer::app
