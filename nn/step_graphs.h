// CUDA graphs of a model's training passes (train.cuda_graphs): each unit's share of the forward
// and of the backward, replayed with one launch where its shape repeats.
//
// Note [CUDA graphs]
// A pass is cut at the model's hooks (the params-needed hook before a unit's weights are read,
// the grads-ready hook after its gradients are complete): the work between two hooks, one unit's,
// is a segment, and the hooks themselves run on the host between segments as they do without
// graphs, so DDP still starts each bucket's all-reduce from backward, over NCCL too. A segment
// is keyed by everything the host decides it by: forward or backward, the unit, the batch's
// rows and length, and whether it has targets and row lengths (backward's loss scale is a
// device scalar uploaded before the pass, as the batch is). The first run of a key is eager (it
// builds cuDNN plans and picks cuBLASLt algorithms, which capture forbids); the second is
// captured and launched; later ones are launched. Everything a segment reads or writes has a
// fixed address (planned memory, the workspace's stack order), so a replay is the same kernels
// on the same memory: the same bits as the eager pass. Not graphed: sharded models (a unit's
// gathered weights change buffers from step to step), packed batches (their runs change the
// attention's arguments), profiled runs (their timing events are host work), decoding.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "runtime/cuda/stream.h"

namespace trainer::nn {

class StepGraphs {
 public:
  struct Key {
    bool backward = false;
    int unit = 0;
    int rows = 0, seq_len = 0;
    bool targets = false, lengths = false;
    auto operator<=>(const Key&) const = default;
  };

  // Keeps the graphs of up to `max_keys` keys, the least recently used going beyond (keys come
  // round in the same order every step: fewer than a step's keys would keep none).
  explicit StepGraphs(size_t max_keys) : max_keys_(max_keys) {}

  // Runs the work fn queues on `stream` as Note [CUDA graphs] says.
  void run(const Key& key, void* stream, const std::function<void()>& fn);

 private:
  struct Entry {
    int runs = 0;
    uint64_t last_use = 0;
    std::unique_ptr<CudaGraph> graph;
  };
  size_t max_keys_;
  std::map<Key, Entry> entries_;
  uint64_t clock_ = 0;
  bool warned_ = false;
};

}  // namespace trainer::nn
