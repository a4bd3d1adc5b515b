#include "runtime/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/error.h"

namespace trainer {

uint32_t crc32(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes 32-bit lengths
    uInt chunk = uInt(std::min<size_t>(bytes, 1u << 30));
    crc = uint32_t(::crc32(crc, p, chunk));
    p += chunk;
    bytes -= chunk;
  }
  return crc;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in, "cannot read {}: {}", path.string(), std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  CHECK(fd >= 0, "cannot open {} to sync: {}", path.string(), std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  CHECK(rc == 0, "fsync of {} failed: {}", path.string(), std::strerror(errno));
}

void write_file_atomic(const fs::path& path, std::string_view contents) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    OutputFile out(tmp);
    out.write(contents.data(), contents.size());
    out.commit();
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  CHECK(!ec, "cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path());
}

OutputFile::OutputFile(const fs::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd_ >= 0, "cannot create {}: {}", path.string(), std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ec;
  fs::remove(path_, ec);  // never committed: leave nothing half-written behind
}

void OutputFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n > 0, "write to {} failed: {}", path_.string(), std::strerror(errno));
    p += n;
    bytes -= size_t(n);
  }
}

void OutputFile::commit() {
  CHECK(::fsync(fd_) == 0, "fsync of {} failed: {}", path_.string(), std::strerror(errno));
  CHECK(::close(fd_) == 0, "close of {} failed: {}", path_.string(), std::strerror(errno));
  fd_ = -1;
}

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0, "cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    THROW_ERROR("cannot stat {}: {}", path.string(), std::strerror(errno));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    CHECK(p != MAP_FAILED, "cannot map {}: {}", path.string(), std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(size_t offset, size_t bytes) const {
  if (!data_ || bytes == 0) return;
  size_t page = size_t(::sysconf(_SC_PAGESIZE));
  size_t begin = (offset + page - 1) / page * page;  // only whole pages inside the range
  size_t end = std::min(size_, offset + bytes) / page * page;
  if (end > begin) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

void MappedFile::swap(MappedFile& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
}

}  // namespace trainer
