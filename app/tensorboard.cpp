// See tensorboard.h.
//
// Note [Event files]
// TensorBoard reads `events.out.tfevents.<unix time>.<host>` files of TFRecords, each
//   uint64 length, uint32 masked CRC-32C of those 8 bytes, the payload, uint32 masked CRC-32C
//   of the payload
// (little-endian; masked: rotate right by 15 bits, add 0xa282ead8), whose payloads are
// tensorflow.Event protocol buffers. This writer encodes the few fields it needs by hand, in
// the protobuf wire format: Event { double wall_time = 1; int64 step = 2; string file_version
// = 3; Summary summary = 5 }, Summary { repeated Value value = 1 }, Value { string tag = 1;
// float simple_value = 2 }. The first event carries file_version "brain.Event:2"; each
// metrics record then becomes one event whose summary holds a scalar per number in it,
// tagged with its key (TensorBoard's scalars dashboard reads simple_value). A run has one
// file: a resumed run rewrites it without the events after its checkpoint's step, as
// metrics.jsonl is rewritten, and appends, so no step is repeated.
#include "app/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/protobuf_wire.h"

namespace trainer::app {

namespace fs = std::filesystem;

uint32_t crc32c(std::string_view bytes) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {

constexpr const char* kPrefix = "events.out.tfevents.";

// Protocol-buffer wire format, as much as an Event needs.
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += char(uint8_t(v) | 0x80);
  out += char(uint8_t(v));
}
void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}
template <typename T>
void put_fixed(std::string& out, int field, T value) {  // double (wire type 1), float (5)
  put_key(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event(int64_t step, const std::string& summary, std::string_view file_version = "") {
  const double wall =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  put_fixed(e, 1, wall);
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
  if (!file_version.empty()) put_bytes(e, 3, file_version);
  if (!summary.empty()) put_bytes(e, 5, summary);
  return e;
}

// The TFRecord framing of one payload.
std::string record(std::string_view payload) {
  std::string out(8, '\0');
  const uint64_t n = payload.size();
  std::memcpy(out.data(), &n, 8);
  const uint32_t length_crc = masked_crc32c(out), data_crc = masked_crc32c(payload);
  out.append(reinterpret_cast<const char*>(&length_crc), 4);
  out += payload;
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

// The step of an Event payload (0 where it has none), or -1 when it is not one this file
// could hold.
int64_t event_step(std::string_view e) {
  int64_t step = 0;
  WireField f;
  for (size_t at = 0; at < e.size();) {
    if (!next_field(e, at, f)) return -1;
    if (f.number == 2 && f.wire_type == 0) step = int64_t(f.varint);
  }
  return step;
}

// The records of an event file whose step is at most keep_through, up to the first torn or
// damaged one (a crash mid-write).
std::string kept_records(std::string_view file, int64_t keep_through) {
  std::string kept;
  for (size_t at = 0; file.size() - at >= 16;) {
    uint64_t n = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&n, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    if (length_crc != masked_crc32c(file.substr(at, 8)) || n > file.size() - at - 16) break;
    const std::string_view payload = file.substr(at + 12, n);
    std::memcpy(&data_crc, file.data() + at + 12 + n, 4);
    if (data_crc != masked_crc32c(payload)) break;
    const int64_t step = event_step(payload);
    if (step < 0) break;
    if (step <= keep_through) kept += file.substr(at, 16 + n);
    at += 16 + n;
  }
  return kept;
}

std::string hostname() {
  char name[256] = {};
  return ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "localhost";
}

}  // namespace

EventWriter::EventWriter(const fs::path& dir, int64_t keep_through) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  CHECK(!ec, "cannot create {} (log.tensorboard): {}", dir.string(), ec.message());
  if (keep_through >= 0)  // the run's file: the newest, should a copy have left others
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().starts_with(kPrefix) && (path_.empty() || path_ < e.path()))
        path_ = e.path();
  CHECK(!ec, "cannot read {} (log.tensorboard): {}", dir.string(), ec.message());
  std::string start;
  if (!path_.empty()) {
    write_file_atomic(path_, kept_records(read_file(path_), keep_through));
  } else {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    path_ = dir / fmt::format("{}{}.{}", kPrefix,
                              std::chrono::duration_cast<std::chrono::seconds>(now).count(),
                              hostname());
    start = record(event(0, "", "brain.Event:2"));
  }
  file_ = std::fopen(path_.c_str(), "ab");
  CHECK(file_ && std::fwrite(start.data(), 1, start.size(), file_) == start.size() &&
            std::fflush(file_) == 0,
        "cannot write {} (log.tensorboard): {}", path_.string(), std::strerror(errno));
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

bool EventWriter::write(int64_t step, const nlohmann::json& r) {
  std::string summary;
  for (const auto& [key, value] : r.items()) {
    if (key == "step" || !value.is_number()) continue;
    std::string v;
    put_bytes(v, 1, key);
    put_fixed(v, 2, value.get<float>());
    put_bytes(summary, 1, v);
  }
  if (summary.empty()) return true;
  const std::string bytes = record(event(step, summary));
  errno = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() ||
      std::fflush(file_) != 0) {
    std::clearerr(file_);
    return false;
  }
  return true;
}

}  // namespace trainer::app
