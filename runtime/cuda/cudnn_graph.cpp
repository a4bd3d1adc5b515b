// cuDNN backend descriptors, graphs and plans; see cuda/cudnn_graph.h.
#include "runtime/cuda/cudnn_graph.h"

#include <algorithm>
#include <mutex>

#include "runtime/error.h"

namespace trainer::cudnn {

namespace {

std::string last_error(cudnnStatus_t st) {
  char text[512] = {0};
  cudnnGetLastErrorString(text, sizeof text);
  return fmt::format("{}{}{}", cudnnGetErrorString(st), text[0] ? ": " : "", text);
}

void check(cudnnStatus_t st, const char* what) {
  CHECK(st == CUDNN_STATUS_SUCCESS, "cuDNN {} failed: {}", what, last_error(st));
}

struct Handle {
  cudnnHandle_t h = nullptr;
  explicit Handle(int device) {
    (void)device;  // the current device, which the caller has set
    check(cudnnCreate(&h), "cudnnCreate");
  }
  ~Handle() { cudnnDestroy(h); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

}  // namespace

cudnnHandle_t handle(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Handle>> handles;
  std::lock_guard lock(mu);
  auto& h = handles[device];
  if (!h) h = std::make_unique<Handle>(device);
  return h->h;
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            const void* values, int64_t count) {
  const cudnnStatus_t st = cudnnBackendSetAttribute(d_, name, type, count, values);
  CHECK(st == CUDNN_STATUS_SUCCESS, "cuDNN cudnnBackendSetAttribute({}) failed: {}", int(name),
        last_error(st));
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& d) {
  cudnnBackendDescriptor_t raw = d.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw);
}

bool Descriptor::finalize(std::string* why) {
  const cudnnStatus_t st = cudnnBackendFinalize(d_);
  if (st == CUDNN_STATUS_SUCCESS) return true;
  if (why) *why = last_error(st);
  return false;
}

bool Graph::failed(bool ok, const std::string& what, std::string* why) {
  if (!ok && why) *why = what + ": " + *why;
  return !ok;
}

int64_t Graph::tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
                      bool by_value, int64_t ragged) {
  const int64_t uid = next_uid_++;
  Descriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
  const bool yes = true;
  if (is_virtual) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes);
  if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &yes);
  if (ragged) t.set(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, tensors_.at(ragged));
  std::string why;
  CHECK(t.finalize(&why), "cuDNN tensor {} (type {}) refused: {}", uid, int(type), why);
  tensors_.emplace(uid, std::move(t));
  return uid;
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t t,
                      cudnnDataType_t precision, int64_t axis) {
  Descriptor& pw = helpers_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
  if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis);
  std::string why;
  CHECK(pw.finalize(&why), "cuDNN pointwise mode {} refused: {}", int(mode), why);
  Descriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_.at(x))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_.at(y))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, &one)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, &one);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensors_.at(b));
  if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensors_.at(t));
  CHECK(op.finalize(&why), "cuDNN pointwise operation (mode {}) refused: {}", int(mode), why);
  ops_.push_back(std::move(op));
}

void Graph::matmul(int64_t a, int64_t b, int64_t c, int64_t m, int64_t n, int64_t k,
                   std::optional<double> padding) {
  Descriptor& mm = helpers_.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
  if (padding) mm.set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, &*padding);
  std::string why;
  CHECK(mm.finalize(&why), "cuDNN matmul descriptor refused: {}", why);
  Descriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensors_.at(a))
      .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensors_.at(b))
      .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensors_.at(c))
      .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  if (m) op.set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, tensors_.at(m));
  if (n) op.set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, tensors_.at(n));
  if (k) op.set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, tensors_.at(k));
  CHECK(op.finalize(&why), "cuDNN matmul operation refused: {}", why);
  ops_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, int64_t x, int64_t y) {
  Descriptor& r = helpers_.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &reduce)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute);
  std::string why;
  CHECK(r.finalize(&why), "cuDNN reduction descriptor refused: {}", why);
  Descriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensors_.at(x))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensors_.at(y))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
  CHECK(op.finalize(&why), "cuDNN reduction operation refused: {}", why);
  ops_.push_back(std::move(op));
}

void Graph::reshape(int64_t x, int64_t y) {
  Descriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensors_.at(x))
      .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensors_.at(y));
  std::string why;
  CHECK(op.finalize(&why), "cuDNN reshape operation refused: {}", why);
  ops_.push_back(std::move(op));
}

namespace {

// The engine configurations heuristics `mode` offers for a finalized operation graph, best first;
// none, with the reason in *why, where that mode has nothing for it.
std::vector<std::shared_ptr<Descriptor>> heuristic_configs(const Descriptor& graph,
                                                           cudnnBackendHeurMode_t mode,
                                                           std::string* why) {
  Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (!heuristics.finalize(why)) return {};
  int64_t count = 0;
  cudnnStatus_t st = cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (st != CUDNN_STATUS_SUCCESS) {
    *why = "reading the heuristics' result count: " + last_error(st);
    return {};
  }
  std::vector<std::shared_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i)
    raw.push_back(
        configs.emplace_back(std::make_shared<Descriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
            ->get());
  if (count > 0) {
    st = cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data());
    if (st != CUDNN_STATUS_SUCCESS) {
      *why = "reading the heuristics' results: " + last_error(st);
      return {};
    }
  }
  configs.resize(size_t(count));
  return configs;
}

// A configuration's engine's global index (for the log), or -1.
int64_t engine_index(const Descriptor& config) {
  Descriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw) == CUDNN_STATUS_SUCCESS)
    cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                             &index);
  return index;
}

// The workspace a configuration says it needs before a plan is made (cuDNN 9.2 on), or -1.
int64_t config_workspace(const Descriptor& config) {
#if CUDNN_VERSION >= 90200
  if (cudnnGetVersion() < 90200) return -1;
  int64_t bytes = -1, n = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                               1, &n, &bytes) != CUDNN_STATUS_SUCCESS)
    return -1;
  return bytes;
#else
  (void)config;
  return -1;
#endif
}

}  // namespace

std::optional<Graph::Plan> Graph::build(int device, int64_t max_workspace, std::string* why,
                                        int64_t* least_need) {
  if (least_need) *least_need = 0;
  cudnnHandle_t h = handle(device);
  auto graph_ptr = std::make_shared<Descriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  Descriptor& graph = *graph_ptr;
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Descriptor& op : ops_) ops.push_back(op.get());
  graph
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(),
           int64_t(ops.size()))
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  if (failed(graph.finalize(why), "operation graph", why)) return std::nullopt;
  std::string refused_a, refused_fallback;
  std::vector<std::shared_ptr<Descriptor>> configs =
      heuristic_configs(graph, CUDNN_HEUR_MODE_A, &refused_a);
  for (auto& c : heuristic_configs(graph, CUDNN_HEUR_MODE_FALLBACK, &refused_fallback))
    configs.push_back(c);
  std::string last = "none was offered";
  int over = 0;
  int64_t least_over = -1;
  auto too_big = [&](int64_t bytes) {
    if (bytes <= max_workspace) return false;
    ++over;
    least_over = least_over < 0 ? bytes : std::min(least_over, bytes);
    return true;
  };
  for (const std::shared_ptr<Descriptor>& config : configs) {
    int64_t bytes = config_workspace(*config);
    if (bytes >= 0 && too_big(bytes)) continue;
    auto plan = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *config);
    if (!plan->finalize(&last)) continue;
    int64_t n = 0;
    check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                   CUDNN_TYPE_INT64, 1, &n, &bytes),
          "reading a plan's workspace size");
    if (too_big(bytes)) continue;
    Plan p;
    p.workspace = bytes;
    p.graph = graph_ptr;
    p.configs = configs;
    p.plan = std::move(plan);
    p.device = device;
    p.engine = engine_index(*config);
    return p;
  }
  if (least_need && over) *least_need = least_over;
  if (why) {
    *why = fmt::format("no engine configuration of {} builds within {} MiB of workspace",
                       configs.size(), max_workspace >> 20);
    if (over)
      *why += fmt::format(" ({} need more, the least {} MiB)", over,
                          (least_over + (1 << 20) - 1) >> 20);
    if (!refused_a.empty()) *why += "; heuristics A: " + refused_a;
    if (!refused_fallback.empty()) *why += "; fallback heuristics: " + refused_fallback;
    *why += "; the last plan refused: " + last;
  }
  return std::nullopt;
}

void Graph::Plan::execute(void* stream, const std::vector<int64_t>& uids,
                          const std::vector<void*>& data, void* workspace_ptr) const {
  TRAINER_ASSERT(uids.size() == data.size(), "cuDNN variant pack of {} ids and {} pointers",
                 uids.size(), data.size());
  cudnnHandle_t h = handle(device);
  check(cudnnSetStream(h, static_cast<cudaStream_t>(stream)), "cudnnSetStream");
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), int64_t(uids.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, data.data(),
           int64_t(data.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace_ptr);
  std::string why;
  CHECK(pack.finalize(&why), "cuDNN variant pack refused: {}", why);
  check(cudnnBackendExecute(h, plan->get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace trainer::cudnn
