// File I/O with the guarantees checkpoints and shards need: atomic replacement (write to a
// temporary, fsync, rename, fsync the directory), read-only memory maps, and CRC-32 checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

namespace trainer {

// CRC-32 (zlib polynomial) of a byte range, continuing from `crc` (0 to start).
uint32_t crc32(const void* data, size_t bytes, uint32_t crc = 0);

// Reads a whole (small) file; throws naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Writes `contents` to `path` atomically: readers see the old file or the new one, never a
// partial one, and the new one is on disk when this returns.
void write_file_atomic(const std::filesystem::path& path, std::string_view contents);

// Flushes a file or directory's metadata to disk (after a rename into it).
void fsync_path(const std::filesystem::path& path);

// Files or directories being built (temporaries of a command's output): removed, with
// everything under them, when the guard goes away without keep() (the command failed).
class RemoveUnlessKept {
 public:
  RemoveUnlessKept() = default;
  explicit RemoveUnlessKept(std::filesystem::path path) { add(std::move(path)); }
  ~RemoveUnlessKept();
  RemoveUnlessKept(const RemoveUnlessKept&) = delete;
  RemoveUnlessKept& operator=(const RemoveUnlessKept&) = delete;
  void add(std::filesystem::path path) { paths_.push_back(std::move(path)); }
  void keep() { kept_ = true; }

 private:
  std::vector<std::filesystem::path> paths_;
  bool kept_ = false;
};

// An exclusive lock (flock) on `path`, created if absent, held for the object's lifetime and
// released by the kernel when the process dies (a killed holder leaves nothing stale). The
// file records its holder as "pid <n> on <host>".
class ExclusiveLock {
 public:
  // Another process holds the lock; holder() is what it recorded ("pid 12 on node3").
  class Busy : public Error {
   public:
    Busy(const std::string& message, std::string holder)
        : Error(message), holder_(std::move(holder)) {}
    const std::string& holder() const { return holder_; }

   private:
    std::string holder_;
  };
  // Takes the lock; throws Busy when another process has it, trainer::Error when the lock
  // cannot be taken at all.
  explicit ExclusiveLock(const std::filesystem::path& path);
  ~ExclusiveLock();
  ExclusiveLock(const ExclusiveLock&) = delete;
  ExclusiveLock& operator=(const ExclusiveLock&) = delete;

 private:
  int fd_ = -1;
};

// An output file written sequentially, fsynced on commit(); removed if never committed.
class OutputFile {
 public:
  explicit OutputFile(const std::filesystem::path& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void write(const void* data, size_t bytes);
  // Flushes and fsyncs; the file stays.
  void commit();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// A read-only memory map of a whole file. Pages load on demand, so resident memory follows
// what is touched, not the file size.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept { swap(o); }
  MappedFile& operator=(MappedFile&& o) noexcept {
    MappedFile tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Tells the kernel the pages in [offset, offset+bytes) are no longer needed.
  void release(size_t offset, size_t bytes) const;

 private:
  void swap(MappedFile& o) noexcept;
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace trainer
