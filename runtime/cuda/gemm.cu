// cuBLASLt products. cuBLASLt is column-major: a row-major (M,N) C = op(A) op(B) is the
// column-major (N,M) C^T = op(B)^T op(A)^T, so B and A swap places and keep their own
// transposes and leading dimensions. fp32 or bf16 operands, fp32 accumulation (no TF32: fp32
// products match the CPU's), and an epilogue: the bias, or GELU keeping its input (the
// pre-activation) for backward; in backward the bias gradient (BGRADA) or GELU's derivative at
// the kept input (DGELU). The heuristic's algorithms are chosen once per shape, epilogue and
// operand alignment and cached; an epilogue cuBLASLt cannot run is a counted fallback
// (runtime/fallback.h) to the plain product and our own kernel. Handles and descriptors are RAII.
#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/alignment.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/fallback.h"
#include "runtime/gemm_backend.h"
#include "runtime/workspace.h"

namespace trainer {

namespace {

// The cuBLASLt workspace every product may use (taken from ctx.workspace).
constexpr size_t kCublasLtWorkspace = size_t(32) << 20;

#define CUBLAS_CHECK(call)                                                 \
  do {                                                                     \
    cublasStatus_t st_ = (call);                                           \
    CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt error in {}: {}", #call, \
          cuda::cublaslt().GetStatusString(st_));                          \
  } while (0)

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { CUBLAS_CHECK(cuda::cublaslt().Create(&h)); }
  ~LtHandle() { cuda::cublaslt().Destroy(h); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
};

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc() {
    CUBLAS_CHECK(cuda::cublaslt().MatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  }
  ~MatmulDesc() { cuda::cublaslt().MatmulDescDestroy(d); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    CUBLAS_CHECK(cuda::cublaslt().MatmulDescSetAttribute(d, a, &v, sizeof v));
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    CUBLAS_CHECK(cuda::cublaslt().MatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld));
  }
  ~Layout() { cuda::cublaslt().MatrixLayoutDestroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// The heuristic's constraints: the workspace it may use and how aligned the operands really are
// (cuBLASLt assumes 256 bytes unless told; a view into a row, a weight at a 64-byte offset or a
// bias is often less), so that it offers only algorithms these pointers can run.
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  // `alignment`: cuBLASLt's A, B, C and D first (Alignments below).
  Preference(size_t workspace, const std::array<uint32_t, 6>& alignment) {
    CUBLAS_CHECK(cuda::cublaslt().MatmulPreferenceCreate(&p));
    set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment[0]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment[1]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment[2]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment[3]);
  }
  ~Preference() { cuda::cublaslt().MatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t a, const V& v) {
    CUBLAS_CHECK(cuda::cublaslt().MatmulPreferenceSetAttribute(p, a, &v, sizeof v));
  }
};

cudaDataType_t cuda_type(DType t) {
  TRAINER_ASSERT(t == DType::f32 || t == DType::bf16, "cuBLASLt operand of {}", dtype_name(t));
  return t == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
}

// One handle per device (cuBLASLt handles are tied to the device current at creation).
cublasLtHandle_t handle(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<LtHandle>> handles;
  std::lock_guard lock(mu);
  auto& h = handles[device];
  if (!h) h = std::make_unique<LtHandle>();
  return h->h;
}

// The alignments cuBLASLt chooses algorithms by: its A, B, C and D (our B, A, C and C), told
// as preferences, and the epilogue's bias (or bias gradient) and aux pointers, which it reads
// off the descriptor.
using Alignments = std::array<uint32_t, 6>;

// A product's algorithms depend on its shape, operands, epilogue and the pointers' alignment.
using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, DType,
                       DType, int, bool, int, Alignments>;

// The algorithms the heuristic offers for a key (best first, each one it said it can run), and
// the one that ran last; empty with the reason when it offers none.
struct Algos {
  std::vector<cublasLtMatmulAlgo_t> list;
  size_t chosen = 0;
  std::string why;
};
constexpr int kAlgoCandidates = 8;

Algos heuristic(cublasLtHandle_t lt, const MatmulDesc& desc, const Layout& la, const Layout& lb,
                const Layout& lc, const Preference& pref) {
  cublasLtMatmulHeuristicResult_t results[kAlgoCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cuda::cublaslt().MatmulAlgoGetHeuristic(
      lt, desc.d, la.l, lb.l, lc.l, lc.l, pref.p, kAlgoCandidates, results, &found);
  Algos a;
  if (st != CUBLAS_STATUS_SUCCESS) {  // NOT_SUPPORTED, or INVALID_VALUE for this epilogue
    a.why = fmt::format("the heuristic refuses it: {}", cuda::cublaslt().GetStatusString(st));
    return a;
  }
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) a.list.push_back(results[i].algo);
  if (a.list.empty())
    a.why = fmt::format("the heuristic offers no usable algorithm ({} found)", found);
  return a;
}

// What a product does on the way out besides C = alpha op(A) op(B) + beta C.
struct Epilogue {
  const ConstTensor* bias = nullptr;       // + bias(N) on every row
  const Tensor* gelu_pre = nullptr;        // GELU: C = gelu(x), x written here (C's shape)
  const ConstTensor* dgelu_pre = nullptr;  // DGELU: C = gelu'(pre) * x, pre read (C's shape)
  const Tensor* bias_grad = nullptr;       // bias_grad(N) = the column sums of B (B not transposed)
};

// A product's description for messages: M x N x K, operand type and epilogue.
std::string describe(const Tensor& C, const ConstTensor& A, bool ta, const char* epilogue) {
  return fmt::format("{} x {} x {} {} product{}", C.rows(), C.cols(), ta ? A.rows() : A.cols(),
                     dtype_name(A.dtype), epilogue);
}

// The product with its epilogue; the reason when cuBLASLt could not run it (nothing ran then).
// The heuristic's algorithms are tried in order, and the first that runs is remembered per
// key; one that cuBLASLt refuses at the call (a status, not a fault) is dropped from the list.
std::string run_matmul(const Context& ctx, const Tensor& C, const ConstTensor& A, bool ta,
                       const ConstTensor& B, bool tb, float alpha, float beta, const Epilogue& e) {
  const int64_t M = C.rows(), N = C.cols(), K = ta ? A.rows() : A.cols();
  TRAINER_ASSERT((ta ? A.cols() : A.rows()) == M && (tb ? B.cols() : B.rows()) == K &&
                     (tb ? B.rows() : B.cols()) == N && A.dtype == B.dtype,
                 "cuda matmul shapes");
  if (M == 0 || N == 0) return {};
  const int device = ctx.device_index;
  cublasLtHandle_t lt = handle(device);
  // Column-major view: (N, M) = op(B)^T (N, K) x op(A)^T (K, M).
  MatmulDesc desc;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_b);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_a);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // The pre-activation, which cuBLASLt writes (GELU) or reads (DGELU) through one pointer.
  const bool dgelu = e.dgelu_pre != nullptr;
  const ConstTensor aux = dgelu        ? *e.dgelu_pre
                          : e.gelu_pre ? ConstTensor(*e.gelu_pre)
                                       : ConstTensor{};
  if (e.bias) {
    TRAINER_ASSERT(beta == 0.0f && e.bias->numel() == N, "cuda matmul bias");
    epilogue = CUBLASLT_EPILOGUE_BIAS;
    const void* bias_ptr = e.bias->data;
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_ptr);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(e.bias->dtype));
  }
  if (e.bias_grad) {
    // Column-major, B is the first operand: BGRADA sums its rows over the inner dimension.
    TRAINER_ASSERT(
        !tb && !e.bias && aux.empty() && e.bias_grad->numel() == N && e.bias_grad->dtype == C.dtype,
        "cuda matmul bias gradient");
    epilogue = CUBLASLT_EPILOGUE_BGRADA;
    const void* grad_ptr = e.bias_grad->data;
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, grad_ptr);
  }
  if (!aux.empty()) {
    TRAINER_ASSERT(beta == 0.0f && aux.rows() == M && aux.cols() == N && (!dgelu || !e.bias),
                   "cuda matmul aux");
    // The auxiliary tensor's type is left unset: outside FP8 cuBLASLt takes the output's, and
    // its documentation leaves it unset there. Its leading dimension must be a multiple of 8.
    if (aux.dtype != C.dtype) return "the pre-activation is not in the output's dtype";
    if (aux.ld() % 8 != 0) return "the pre-activation's row stride is not a multiple of 8";
    epilogue = dgelu    ? CUBLASLT_EPILOGUE_DGELU
               : e.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                        : CUBLASLT_EPILOGUE_GELU_AUX;
    const void* aux_ptr = aux.data;
    const int64_t aux_ld = aux.ld();
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_ptr);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
  }
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  const cudaDataType_t ab = cuda_type(A.dtype), ct = cuda_type(C.dtype);
  // Stored (row-major) shapes, seen column-major: B is (B.cols, B.rows) with ld B.ld.
  Layout lb(ab, B.cols(), B.rows(), B.ld()), la(ab, A.cols(), A.rows(), A.ld()),
      lc(ct, N, M, C.ld());
  Workspace::Scope scratch(ctx.workspace);
  void* workspace = scratch.take<char>(int64_t(kCublasLtWorkspace));
  TRAINER_ASSERT(pointer_alignment(workspace) == kDeviceAlignment,
                 "cuBLASLt workspace at {} is not 256-byte aligned", workspace);
  const void* vector = e.bias ? e.bias->data : e.bias_grad ? e.bias_grad->data : nullptr;
  const Alignments alignment = {
      uint32_t(pointer_alignment(B.data)), uint32_t(pointer_alignment(A.data)),
      uint32_t(pointer_alignment(C.data)), uint32_t(pointer_alignment(C.data)),
      uint32_t(pointer_alignment(vector)), uint32_t(pointer_alignment(aux.data))};

  static std::mutex mu;
  static std::map<Key, Algos> algos;
  const Key key{device,
                M,
                N,
                K,
                ta,
                tb,
                A.ld(),
                B.ld(),
                C.ld(),
                A.dtype,
                C.dtype,
                e.bias ? int(e.bias->dtype) : -1,
                beta != 0.0f,
                int(epilogue),
                alignment};
  std::lock_guard lock(mu);
  auto it = algos.find(key);
  if (it == algos.end())
    it = algos
             .emplace(key,
                      heuristic(lt, desc, lb, la, lc, Preference(kCublasLtWorkspace, alignment)))
             .first;
  Algos& a = it->second;
  while (a.chosen < a.list.size()) {
    const cublasStatus_t st = cuda::cublaslt().Matmul(
        lt, desc.d, &alpha, B.data, lb.l, A.data, la.l, &beta, C.data, lc.l, C.data, lc.l,
        &a.list[a.chosen], workspace, kCublasLtWorkspace, static_cast<cudaStream_t>(ctx.stream));
    if (st == CUBLAS_STATUS_SUCCESS) return {};
    // Refused before anything ran: the next algorithm. Anything else is a failure.
    CHECK(st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE,
          "cuBLASLt error in cublasLtMatmul ({}): {}", describe(C, A, ta, ""),
          cuda::cublaslt().GetStatusString(st));
    a.why = fmt::format("cublasLtMatmul refused the heuristic's algorithm {} of {}: {}",
                        a.chosen + 1, a.list.size(), cuda::cublaslt().GetStatusString(st));
    ++a.chosen;
  }
  return a.why.empty() ? std::string("no algorithm") : a.why;
}

// Whether the epilogue ran; otherwise the fallback (and why) is counted under `path`, the
// product named as C = op(A) B with `epilogue`.
bool ran_or_fall_back(const std::string& why, const char* path, const Tensor& C,
                      const ConstTensor& A, bool ta, const char* epilogue) {
  if (why.empty()) return true;
  fallback::note(path,
                 fmt::format("cuBLASLt cannot run the {}: {}", describe(C, A, ta, epilogue), why));
  return false;
}

void cuda_matmul(const Context& ctx, const Tensor& C, const ConstTensor& A, bool ta,
                 const ConstTensor& B, bool tb, float alpha, float beta, const ConstTensor* bias) {
  const std::string why = run_matmul(ctx, C, A, ta, B, tb, alpha, beta, {.bias = bias});
  CHECK(why.empty(), "cuBLASLt cannot run the {}: {}",
        describe(C, A, ta, bias ? " with a bias" : ""), why);
}

bool cuda_matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre,
                      const ConstTensor& A, bool ta, const ConstTensor& B, bool tb,
                      const ConstTensor& bias) {
  return ran_or_fall_back(run_matmul(ctx, out, A, ta, B, tb, 1.0f, 0.0f,
                                     {.bias = bias.empty() ? nullptr : &bias, .gelu_pre = &pre}),
                          "cublaslt_gelu_epilogue", out, A, ta, " with GELU_AUX");
}

bool cuda_matmul_bias_grad(const Context& ctx, const Tensor& C, const ConstTensor& A, bool ta,
                           const ConstTensor& B, float alpha, float beta, const Tensor& bias_grad) {
  return ran_or_fall_back(
      run_matmul(ctx, C, A, ta, B, false, alpha, beta, {.bias_grad = &bias_grad}),
      "cublaslt_bias_grad_epilogue", C, A, ta, " with BGRADA");
}

bool cuda_matmul_dgelu(const Context& ctx, const Tensor& dpre, const ConstTensor& A, bool ta,
                       const ConstTensor& B, bool tb, const ConstTensor& pre) {
  return ran_or_fall_back(run_matmul(ctx, dpre, A, ta, B, tb, 1.0f, 0.0f, {.dgelu_pre = &pre}),
                          "cublaslt_dgelu_epilogue", dpre, A, ta, " with DGELU");
}

size_t cuda_workspace_bytes(const Context&, int64_t, int64_t, int64_t, DType) {
  return kCublasLtWorkspace;
}

const GemmKernels kCudaTable = {cuda_matmul, cuda_matmul_gelu, cuda_matmul_bias_grad,
                                cuda_matmul_dgelu, cuda_workspace_bytes};

}  // namespace

extern const GemmKernels* const kCudaGemm = &kCudaTable;

}  // namespace trainer
