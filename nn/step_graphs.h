// CUDA graphs of a model's training passes (train.cuda_graphs): the forward after the batch's
// upload and the backward, each replayed with one launch where its shape repeats.
//
// Note [CUDA graphs]
// A pass is keyed by everything the host decides it by: forward or backward, the batch's rows
// and length, whether it has targets and row lengths (backward's loss scale is a device scalar
// uploaded before the launch, as the batch is, so it varies freely). The first run
// of a key is eager (it builds cuDNN plans and picks cuBLASLt algorithms, which capture
// forbids); the second is captured and launched; later ones are launched. Everything a pass
// reads or writes has a fixed address (planned memory, the workspace's stack order), and the
// batch arrives by copies queued before the launch, so a replay is the same kernels on the
// same memory: the same bits as the eager pass. The model's hooks (Model::on_grads_ready,
// on_params_needed) fire while a pass is captured and are replayed in order after each later
// launch; so graphs serve models whose hooks queue no device work of their own (one process,
// no NCCL, no sharding: run setup refuses the rest). Packed batches run eagerly (their runs
// change the attention's arguments from batch to batch), and so does a profiled run (its
// timing events are host work).
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "runtime/cuda_stream.h"

namespace trainer::nn {

class StepGraphs {
 public:
  struct Key {
    bool backward = false;
    int rows = 0, seq_len = 0;
    bool targets = false, lengths = false;
    auto operator<=>(const Key&) const = default;
  };

  // Runs fn's work on `stream` as Note [CUDA graphs] says.
  void run(const Key& key, void* stream, const std::function<void()>& fn);
  // Records a hook call made during fn, to be made again after each later launch of its graph
  // (nothing when no capture is under way).
  void record(std::function<void()> call);

 private:
  static constexpr size_t kMaxKeys = 8;  // the least recently used goes beyond
  struct Entry {
    int runs = 0;
    uint64_t last_use = 0;
    std::unique_ptr<CudaGraph> graph;
    std::vector<std::function<void()>> hooks;
  };
  std::map<Key, Entry> entries_;
  Entry* capturing_ = nullptr;
  uint64_t clock_ = 0;
};

}  // namespace trainer::nn
