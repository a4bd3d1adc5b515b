// The protocol-buffer wire format, as much as the trainer reads by hand (a SentencePiece model's
// identity, a TensorBoard event's step): varints and fields, without a schema.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainer {

// The varint at `at` of `b`, advancing `at`; false at a malformed or truncated one.
bool read_varint(std::string_view b, size_t& at, uint64_t& v);

// One field of a message: its number, its wire type, the range [begin, end) of its whole
// encoding (key included), its payload's start when length-delimited, and its value when a
// varint.
struct WireField {
  uint64_t number = 0;
  int wire_type = 0;
  size_t begin = 0, end = 0, payload = 0;
  uint64_t varint = 0;
  bool delimited() const { return wire_type == 2; }
};

// The next field of message `b` from `at`, advancing `at` past it; false at a malformed or
// truncated one, or a group (wire types 3, 4).
bool next_field(std::string_view b, size_t& at, WireField& f);

}  // namespace trainer
