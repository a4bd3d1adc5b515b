// Start-up agreement checks; see consistency.h.
#include "dist/consistency.h"

#include <fmt/ranges.h>

#include <vector>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace trainer::dist {

void check_consistency(Communicator& comm, std::string_view config_text, uint64_t layout_digest,
                       uint64_t data_manifest_hash) {
  constexpr int kItems = 3;
  const char* names[kItems] = {"the resolved config", "the parameter layout", "the data manifest"};
  const std::vector<int64_t> mine = {int64_t(hash64(config_text)), int64_t(layout_digest),
                                     int64_t(data_manifest_hash)};
  const std::vector<int64_t> all = comm.all_gather(mine);
  for (int item = 0; item < kItems; ++item) {
    std::vector<int> differ;
    const int64_t ref = all[size_t(item)];
    for (int r = 1; r < comm.size(); ++r)
      if (all[size_t(r * kItems + item)] != ref) differ.push_back(r);
    if (differ.empty()) continue;
    THROW_ERROR(
        "start-up consistency check failed: {} differs between ranks: rank(s) {} do not match "
        "rank 0 (rank 0 hash {:016x}, rank {} hash {:016x}); every rank must be started with the "
        "same config, model and data",
        names[item], fmt::join(differ, ", "), uint64_t(ref), differ.front(),
        uint64_t(all[size_t(differ.front() * kItems + item)]));
  }
}

void broadcast_parameters(Communicator& comm, const Tensor& params) {
  comm.broadcast(params.data, params.bytes(), 0);
}

}  // namespace trainer::dist
