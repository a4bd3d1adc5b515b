// The cuDNN attention graphs (Note [cuDNN attention graphs]): a call's shape key, its cached
// graph and plan, and how the forward and backward graphs are built; cuda/attention_cudnn.cpp
// caches and runs them. Built with the CUDA backend only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "nn/ops/cuda/attention_cudnn.h"
#include "runtime/buffer.h"
#include "runtime/cuda/cudnn_graph.h"

namespace trainer::nn::cuda {

// A call's shape: the key plans are cached by.
struct Shape {
  int device;
  int64_t B, H, Hk, T, D, ldq, ldk, ldv, ld_dq = 0, ld_dk = 0, ld_dv = 0;
  bool backward = false;
  bool padded = false;        // rows have lengths (Note [Attention masks])
  bool ragged = false;        // runs as sequences, B the bucket (Note [cuDNN ragged batches])
  bool deterministic = true;  // backward: dQ from its product, else accumulated
  int64_t engine_budget = 0;  // the plan's workspace limit (Note [cuDNN attention workspace])
  auto key() const {
    return std::tuple{device,       B,     H,     Hk,    T,        D,      ldq,    ldk,
                      ldv,          ld_dq, ld_dk, ld_dv, backward, padded, ragged, deterministic,
                      engine_budget};
  }
  bool operator<(const Shape& o) const { return key() < o.key(); }
};

// Tensors with ragged offsets: forward's first five, backward's all eight (the fp32 dQ
// accumulator, where there is one, shares dQ's).
enum Ragged { kQ, kK, kV, kO, kStats, kDq, kDk, kDv, kRaggedTensors };
static_assert(kRaggedTensors == kMaxRaggedTensors);

// One shape's graph and plan (or the reason cuDNN cannot run it), the ids of its non-virtual
// tensors in variant-pack order and its by-value scalars.
struct Entry {
  cudnn::Graph graph;
  std::optional<cudnn::Graph::Plan> plan;
  // A plan made again from the workspace its refusal stated (cudnn_replan_workspace) runs in
  // a workspace of its own, allocated once (a process runs its model on one stream, so one
  // call at a time uses it); else the model's workspace serves it.
  Buffer workspace;
  std::string why;  // why there is no plan
  std::vector<int64_t> uids;
  float scale = 0, one = 1, masked = 0;
};

// The score mask value: -inf where cuDNN takes it (9.10 on), else the lowest float.
float masked_value();

// Builds e.graph and sets e.uids for shape s (its plan is built by the caller); throws a
// trainer::Error where cuDNN's graph API refuses a step.
void build_forward(Entry& e, const Shape& s);
void build_backward(Entry& e, const Shape& s);

}  // namespace trainer::nn::cuda
