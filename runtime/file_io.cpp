#include "runtime/file_io.h"

#include <fcntl.h>
#include <sys/file.h>
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

namespace fs = std::filesystem;

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

RemoveUnlessKept::~RemoveUnlessKept() {
  if (kept_) return;
  std::error_code ec;
  for (const fs::path& p : paths_) fs::remove_all(p, ec);
}

ExclusiveLock::ExclusiveLock(const fs::path& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  CHECK(fd_ >= 0, "cannot create {}: {}", path.string(), std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[256];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n > 0) holder.assign(buf, size_t(n));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (holder.empty()) holder = "holder unknown";
    if (err == EWOULDBLOCK)
      throw Busy(fmt::format("{} is held by another process ({})", path.string(), holder), holder);
    THROW_ERROR("cannot lock {}: {}", path.string(), std::strerror(err));
  }
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::string me = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    // The lock holds regardless; only the holder's description is missing.
  }
}

ExclusiveLock::~ExclusiveLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
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
  const int fd = fd_;
  fd_ = -1;  // closed below whatever close() says: never twice
  CHECK(::close(fd) == 0, "close of {} failed: {}", path_.string(), std::strerror(errno));
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
