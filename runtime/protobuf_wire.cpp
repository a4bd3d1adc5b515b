// See protobuf_wire.h.
#include "runtime/protobuf_wire.h"

#include <algorithm>

namespace trainer {

bool read_varint(std::string_view b, size_t& at, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && at < b.size(); shift += 7) {
    const uint8_t byte = uint8_t(b[at++]);
    v |= uint64_t(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

bool next_field(std::string_view b, size_t& at, WireField& f) {
  f.begin = at;
  uint64_t key = 0, n = 0;
  if (!read_varint(b, at, key)) return false;
  f.number = key >> 3;
  f.wire_type = int(key & 7);
  switch (f.wire_type) {
    case 0:
      if (!read_varint(b, at, f.varint)) return false;
      break;
    case 1:
      at += 8;
      break;
    case 5:
      at += 4;
      break;
    case 2:
      if (!read_varint(b, at, n) || n > b.size() - std::min(at, b.size())) return false;
      f.payload = at;
      at += size_t(n);
      break;
    default:
      return false;
  }
  f.end = at;
  return at <= b.size();
}

}  // namespace trainer
