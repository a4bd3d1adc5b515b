// libFuzzer target for the shard reader: any byte string must either parse and verify or be
// rejected with trainer::Error, never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "data/shard.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainer::data;
  try {
    ShardHeader h = parse_shard_header(data, size, "fuzz");
    verify_shard_payload(data, size, h, "fuzz");
  } catch (const trainer::Error&) {
  }
  return 0;
}
