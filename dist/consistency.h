// Start-up agreement between ranks: every rank must run the same resolved config, the same
// parameter layout, the same data and tokenizer, and start from rank 0's parameters. A
// mismatch stops every rank with an error naming the item, the ranks and the first difference,
// before any step runs.
#pragma once

#include <string>
#include <vector>

#include "dist/communicator.h"
#include "runtime/tensor.h"

namespace trainer::dist {

// Something every rank must hold identically, compared by content.
struct ConsistencyItem {
  std::string name;     // "the resolved config"
  std::string content;  // its text (or bytes)
};

// Compares every item across ranks (hashes first; where they differ, rank 0's content against
// the first differing rank's); throws trainer::Error on every rank naming the first item that
// differs, the ranks that differ from rank 0 and the first differing line (for YAML, its key)
// or byte. A collective: every rank must call it with the same items in the same order.
void check_consistency(Communicator& comm, const std::vector<ConsistencyItem>& items);

// The first difference between two texts, for messages: "at 'model.n_layer': rank 0 has
// 'n_layer: 2', rank 1 has 'n_layer: 3'" (the dotted key of an indented YAML line), "at line
// 7: ...", or "at byte 1234" for binary content.
std::string first_difference(const std::string& a, const std::string& b, int rank_b);

// This process's executable, for the consistency check: "<bytes> bytes, hash <hex>" (not its
// path: nodes may hold the same build in different places), or why it could not be read.
std::string binary_identity();

// params = rank 0's values on every rank (a contiguous tensor in host memory).
void broadcast_parameters(Communicator& comm, const Tensor& params);

}  // namespace trainer::dist
