// cuBLASLt products. cuBLASLt is column-major: a row-major (M,N) C = op(A) op(B) is the
// column-major (N,M) C^T = op(B)^T op(A)^T, so B and A swap places and keep their own
// transposes and leading dimensions. fp32 or bf16 operands, fp32 accumulation (no TF32: fp32
// products match the CPU's), and an epilogue: the bias, or GELU keeping its input (the
// pre-activation) for backward; in backward the bias gradient (BGRADA) or GELU's derivative at
// the kept input (DGELU). The heuristic's algorithm is chosen once per shape and epilogue and
// cached. Handles and descriptors are RAII.
#include <cublasLt.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "runtime/cuda_check.h"
#include "runtime/gemm_cuda.h"
#include "runtime/workspace.h"

namespace trainer {

namespace {

#define CUBLAS_CHECK(call)                                                 \
  do {                                                                     \
    cublasStatus_t st_ = (call);                                           \
    CHECK(st_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt error in {}: {}", #call, \
          cublasGetStatusString(st_));                                     \
  } while (0)

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { CUBLAS_CHECK(cublasLtCreate(&h)); }
  ~LtHandle() { cublasLtDestroy(h); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
};

struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  MatmulDesc() { CUBLAS_CHECK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(d); }
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
  }
};

struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  Layout(cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, uint64_t(rows), uint64_t(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(l); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  explicit Preference(size_t workspace) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace, sizeof workspace));
  }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
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

using Key = std::tuple<int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, DType,
                       DType, int, bool, int>;

// What a product does on the way out besides C = alpha op(A) op(B) + beta C.
struct Epilogue {
  const Tensor* bias = nullptr;       // + bias(N) on every row
  const Tensor* aux = nullptr;        // GELU: C = gelu(x), aux = x (C's shape), x the result above
  bool dgelu = false;                 // with aux: C = gelu'(aux) * x instead (aux is read)
  const Tensor* bias_grad = nullptr;  // bias_grad(N) = the column sums of B (B not transposed)
};

// The product with its epilogue. Returns false, having run nothing, when cuBLASLt has no
// algorithm for it (remembered per shape, like the algorithm itself).
bool run_matmul(const Context& ctx, const Tensor& C, const Tensor& A, bool ta, const Tensor& B,
                bool tb, float alpha, float beta, const Epilogue& e) {
  const int64_t M = C.rows(), N = C.cols(), K = ta ? A.rows() : A.cols();
  TRAINER_ASSERT((ta ? A.cols() : A.rows()) == M && (tb ? B.cols() : B.rows()) == K &&
                     (tb ? B.rows() : B.cols()) == N && A.dtype == B.dtype,
                 "cuda matmul shapes");
  if (M == 0 || N == 0) return true;
  const int device = ctx.device_index;
  cublasLtHandle_t lt = handle(device);
  // Column-major view: (N, M) = op(B)^T (N, K) x op(A)^T (K, M).
  MatmulDesc desc;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, op_b);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, op_a);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
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
        !tb && !e.bias && !e.aux && e.bias_grad->numel() == N && e.bias_grad->dtype == C.dtype,
        "cuda matmul bias gradient");
    epilogue = CUBLASLT_EPILOGUE_BGRADA;
    const void* grad_ptr = e.bias_grad->data;
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, grad_ptr);
  }
  if (e.aux) {
    TRAINER_ASSERT(
        beta == 0.0f && e.aux->rows() == M && e.aux->cols() == N && (!e.dgelu || !e.bias),
        "cuda matmul aux");
    epilogue = e.dgelu  ? CUBLASLT_EPILOGUE_DGELU
               : e.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                        : CUBLASLT_EPILOGUE_GELU_AUX;
    const void* aux_ptr = e.aux->data;
    const int64_t aux_ld = e.aux->ld();
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_ptr);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, cuda_type(e.aux->dtype));
  }
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  const cudaDataType_t ab = cuda_type(A.dtype), ct = cuda_type(C.dtype);
  // Stored (row-major) shapes, seen column-major: B is (B.cols, B.rows) with ld B.ld.
  Layout lb(ab, B.cols(), B.rows(), B.ld()), la(ab, A.cols(), A.rows(), A.ld()),
      lc(ct, N, M, C.ld());
  Workspace::Scope scratch(ctx.workspace);
  void* workspace = scratch.take<char>(int64_t(kCublasLtWorkspace));

  static std::mutex mu;
  static std::map<Key, std::optional<cublasLtMatmulAlgo_t>> algos;
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
                int(epilogue)};
  std::optional<cublasLtMatmulAlgo_t> algo;
  {
    std::lock_guard lock(mu);
    auto it = algos.find(key);
    if (it == algos.end()) {
      Preference pref(kCublasLtWorkspace);
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc.d, lb.l, la.l, lc.l, lc.l,
                                                               pref.p, 1, &result, &found);
      CHECK(st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED,
            "cuBLASLt error in cublasLtMatmulAlgoGetHeuristic: {}", cublasGetStatusString(st));
      it = algos
               .emplace(key, st == CUBLAS_STATUS_SUCCESS && found > 0 ? std::optional(result.algo)
                                                                      : std::nullopt)
               .first;
    }
    algo = it->second;
  }
  if (!algo) return false;
  CUBLAS_CHECK(cublasLtMatmul(lt, desc.d, &alpha, B.data, lb.l, A.data, la.l, &beta, C.data, lc.l,
                              C.data, lc.l, &*algo, workspace, kCublasLtWorkspace,
                              static_cast<cudaStream_t>(ctx.stream)));
  return true;
}

}  // namespace

void cuda_matmul(const Context& ctx, const Tensor& C, const Tensor& A, bool ta, const Tensor& B,
                 bool tb, float alpha, float beta, const Tensor* bias) {
  const bool ran = run_matmul(ctx, C, A, ta, B, tb, alpha, beta, {.bias = bias});
  CHECK(ran, "cuBLASLt has no algorithm for a {} x {} x {} product of {}", C.rows(), C.cols(),
        ta ? A.rows() : A.cols(), dtype_name(A.dtype));
}

bool cuda_matmul_gelu(const Context& ctx, const Tensor& out, const Tensor& pre, const Tensor& A,
                      bool ta, const Tensor& B, bool tb, const Tensor& bias) {
  // The epilogue's auxiliary output needs a leading dimension that is a multiple of 8.
  if (pre.ld() % 8 != 0 || pre.dtype != out.dtype) return false;
  return run_matmul(ctx, out, A, ta, B, tb, 1.0f, 0.0f,
                    {.bias = bias.empty() ? nullptr : &bias, .aux = &pre});
}

bool cuda_matmul_bias_grad(const Context& ctx, const Tensor& C, const Tensor& A, bool ta,
                           const Tensor& B, float alpha, float beta, const Tensor& bias_grad) {
  return run_matmul(ctx, C, A, ta, B, false, alpha, beta, {.bias_grad = &bias_grad});
}

bool cuda_matmul_dgelu(const Context& ctx, const Tensor& dpre, const Tensor& A, bool ta,
                       const Tensor& B, bool tb, const Tensor& pre) {
  // As for GELU_AUX: the auxiliary input's leading dimension is a multiple of 8.
  if (pre.ld() % 8 != 0 || pre.dtype != dpre.dtype) return false;
  return run_matmul(ctx, dpre, A, ta, B, tb, 1.0f, 0.0f, {.aux = &pre, .dgelu = true});
}

}  // namespace trainer
