// The batch the data layer hands to the model: the one contract between data/ and nn/.
// Shapes: B rows of T positions, row-major. Which optional fields are set depends on the mode.
#pragma once

#include <cstdint>
#include <vector>

namespace trainer::data {

// One micro-batch. stream: segments and lengths empty. pack: segments set (-1 on padding),
// targets -1 at a document's last token unless the document continues in the next row.
// bucket: lengths set, targets -1 at and beyond each row's last real token.
struct Batch {
  int B = 0, T = 0;               // rows, row length (T may vary per batch in bucket mode)
  std::vector<int32_t> tokens;    // (B, T) input ids; padding positions hold 0
  std::vector<int32_t> targets;   // (B, T) next-token ids; -1 = not counted in the loss
  std::vector<int32_t> segments;  // (B, T) document index within the row (pack), else empty
  std::vector<int32_t> lengths;   // (B) real tokens per row (bucket), else empty
  int64_t loss_tokens = 0;        // number of targets != -1
};

}  // namespace trainer::data
