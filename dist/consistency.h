// Start-up agreement between ranks: every rank must run the same resolved config, the same
// parameter layout and the same data, and start from rank 0's parameters. A mismatch stops
// every rank with an error naming the item and the ranks, before any step runs.
#pragma once

#include <cstdint>
#include <string_view>

#include "dist/communicator.h"
#include "runtime/tensor.h"

namespace trainer::dist {

// Compares hash64(config_text), layout_digest and data_manifest_hash across ranks; throws
// trainer::Error on every rank naming the first differing item and the ranks that differ from
// rank 0. A collective: every rank must call it.
void check_consistency(Communicator& comm, std::string_view config_text, uint64_t layout_digest,
                       uint64_t data_manifest_hash);

// params = rank 0's values on every rank (a contiguous tensor in host memory).
void broadcast_parameters(Communicator& comm, const Tensor& params);

}  // namespace trainer::dist
