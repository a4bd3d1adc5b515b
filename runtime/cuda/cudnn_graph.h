// A small RAII layer over cuDNN's backend graph API (cudnnBackend* descriptors): 4-D tensors
// named by unique ids, pointwise, matmul, reduction and reshape operations, an operation graph,
// and the execution plan of the first engine configuration cuDNN's heuristics offer that it can
// build. Built only with the CUDA backend; included from host code of that build only.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace trainer::cudnn {

// The cuDNN handle for CUDA device `device` (one per device, made on first use).
cudnnHandle_t handle(int device);

// Owns one backend descriptor.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  ~Descriptor();
  Descriptor(Descriptor&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;

  // Sets `count` values of attribute `name` (of backend type `type`).
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                  const void* values, int64_t count = 1);
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& d);
  // Finalizes it; false (with cuDNN's reason in *why) when cuDNN refuses.
  bool finalize(std::string* why);
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

// The tensors and operations of one graph, in order.
class Graph {
 public:
  // A tensor with the next unique id (from 1): device memory unless virtual (an intermediate
  // cuDNN keeps to itself) or by_value (a host scalar read at execution). `ragged` (an id, 0:
  // none) names an int64 [B+1,1,1,1] tensor of element offsets where each batch entry starts
  // (variable-length sequences); the strides then apply from there. Returns its id.
  int64_t tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides,
                 bool is_virtual = false, bool by_value = false, int64_t ragged = 0);
  // y = mode(x[, b[, t]]) elementwise with broadcasting; gen_index (axis >= 0) writes indices.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = 0, int64_t t = 0,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // c = a b over the last two dimensions, batched over the first two (fp32 accumulation).
  // m, n, k (ids of int32 [B,1,1,1] tensors, 0: none) cut each batch's product to its own
  // rows, columns and inner length (padded sequences); `padding`, where given, is the value
  // the product's entries beyond them take.
  void matmul(int64_t a, int64_t b, int64_t c, int64_t m = 0, int64_t n = 0, int64_t k = 0,
              std::optional<double> padding = std::nullopt);
  // y = op(x) over the dimensions where y has extent 1.
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y = x seen with y's dimensions and strides (a transpose is a change of strides).
  void reshape(int64_t x, int64_t y);

  // The plan for this graph on `device`: the first engine configuration that builds and needs
  // at most `max_workspace` bytes, of heuristics mode A's list and then of the fallback list;
  // or nullopt with the reason in *why (the heuristics' refusal, the last configuration's, and
  // how many needed more workspace, and in *least_need, when given, the least workspace one of
  // those needed: 0 when none was refused for its workspace). Whether it is deterministic is
  // the graph's shape (as in cuDNN's frontend), not a filter here. The graph must outlive the
  // plan (its descriptors are the plan's).
  struct Plan;
  std::optional<Plan> build(int device, int64_t max_workspace, std::string* why,
                            int64_t* least_need = nullptr);

 private:
  bool failed(bool ok, const std::string& what, std::string* why);

  std::map<int64_t, Descriptor> tensors_;
  std::deque<Descriptor> helpers_;  // pointwise, matmul and reduction descriptors
  std::vector<Descriptor> ops_;
  int64_t next_uid_ = 1;
};

struct Graph::Plan {
  std::shared_ptr<Descriptor> graph;  // the operation graph and the engine configurations
  std::vector<std::shared_ptr<Descriptor>> configs;  // the plan was made from, kept with it
  std::unique_ptr<Descriptor> plan;
  int64_t workspace = 0;  // bytes the execution needs
  int device = 0;
  int64_t engine = -1;  // cuDNN's global index of the engine it runs (for the log)
  // Runs it on `stream` with the non-virtual tensors' data: device pointers, host pointers for
  // by-value scalars. Throws trainer::Error on failure.
  void execute(void* stream, const std::vector<int64_t>& uids, const std::vector<void*>& data,
               void* workspace_ptr) const;
};

}  // namespace trainer::cudnn
