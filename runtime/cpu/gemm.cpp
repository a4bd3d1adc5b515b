// CPU matrix products through oneDNN: dnnl_sgemm for fp32, the matmul primitive for bf16 on
// CPUs with bf16 arithmetic, and bf16 converted to fp32 in strips elsewhere.
//
// Note [CPU bf16 matmul]
// native: oneDNN's matmul primitive (AMX or AVX-512 BF16 kernels, fp32 accumulation), one
// primitive per shape created on first use and cached, its memory objects re-pointed per call.
// via_fp32: the smaller operand is converted to fp32 once, the larger one a strip at a time
// (strips sized so that strip and result tile fit a fixed budget), each strip multiplied by
// sgemm into an fp32 tile that is then scaled, biased and rounded into C. Every bf16 element
// is converted exactly once, so the conversions cost memory traffic, not arithmetic.
#include <dnnl.h>

#include <algorithm>
#include <cmath>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"
#include "runtime/gemm.h"
#include "runtime/gemm_backend.h"
#include "runtime/memory.h"
#include "runtime/workspace.h"

namespace trainer {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                ldb, beta, C, ldc);
  CHECK(st == dnnl_success, "oneDNN sgemm failed (status {}) for M={} N={} K={}", int(st), M, N, K);
}

namespace {

struct Shape {
  int64_t M, N, K;
};

// ---- fp32 -----------------------------------------------------------------------------------

void fill_rows_with_bias(const Tensor& C, const ConstTensor& bias) {
  float* c = C.as<float>();
  const int64_t N = C.cols(), ld = C.ld();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < C.rows(); ++i) {
    float* row = c + i * ld;
    if (bias.dtype == DType::f32) {
      const float* b = bias.as<float>();
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) row[j] = b[j];
    } else {
      const bf16* b = bias.as<bf16>();
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) row[j] = to_float(b[j]);
    }
  }
}

void matmul_f32(const Shape& s, const Tensor& C, const ConstTensor& A, bool ta,
                const ConstTensor& B, bool tb, float alpha, float beta, const ConstTensor* bias) {
  if (bias) {
    fill_rows_with_bias(C, *bias);
    beta = 1.0f;
  }
  sgemm(ta, tb, s.M, s.N, s.K, alpha, A.as<float>(), A.ld(), B.as<float>(), B.ld(), beta,
        C.as<float>(), C.ld());
}

// ---- bf16 through oneDNN's matmul primitive ---------------------------------------------------

using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, DType, int,
                       float, float>;

struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory a, b, c, bias;
  std::unordered_map<int, dnnl::memory> args;  // the memories above, re-pointed per call
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::memory::data_type dnnl_type(DType t) {
  return t == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// A (rows, cols) matrix with leading dimension ld, seen transposed when `trans`.
dnnl::memory::desc matrix_desc(int64_t rows, int64_t cols, int64_t ld, bool trans, DType t) {
  using dims = dnnl::memory::dims;
  return trans ? dnnl::memory::desc(dims{cols, rows}, dnnl_type(t), dims{1, ld})
               : dnnl::memory::desc(dims{rows, cols}, dnnl_type(t), dims{ld, 1});
}

Primitive make_primitive(const Shape& s, const Tensor& C, const ConstTensor& A, bool ta,
                         const ConstTensor& B, bool tb, float alpha, float beta,
                         const ConstTensor* bias) {
  const auto a_md = matrix_desc(A.rows(), A.cols(), A.ld(), ta, A.dtype);
  const auto b_md = matrix_desc(B.rows(), B.cols(), B.ld(), tb, B.dtype);
  const auto c_md = matrix_desc(s.M, s.N, C.ld(), false, C.dtype);
  dnnl::memory::desc bias_md;
  if (bias) bias_md = dnnl::memory::desc({1, s.N}, dnnl_type(bias->dtype), {s.N, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc =
      bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md);
  dnnl::matmul::primitive_desc pd(desc, attr, engine());
  Primitive p{dnnl::matmul(pd),
              dnnl::memory(a_md, engine(), nullptr),
              dnnl::memory(b_md, engine(), nullptr),
              dnnl::memory(c_md, engine(), nullptr),
              {},
              {}};
  p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  if (bias) {
    p.bias = dnnl::memory(bias_md, engine(), nullptr);
    p.args.insert({DNNL_ARG_BIAS, p.bias});
  }
  return p;
}

void matmul_onednn(const Shape& s, const Tensor& C, const ConstTensor& A, bool ta,
                   const ConstTensor& B, bool tb, float alpha, float beta,
                   const ConstTensor* bias) {
  static std::mutex mu;
  static std::map<Key, Primitive> cache;
  static dnnl::stream stream(engine());
  std::lock_guard lock(mu);
  const Key key{s.M,    s.N,    s.K,    ta,      tb,
                A.ld(), B.ld(), C.ld(), C.dtype, bias ? int(bias->dtype) : -1,
                alpha,  beta};
  auto it = cache.find(key);
  if (it == cache.end()) {
    try {
      it = cache.emplace(key, make_primitive(s, C, A, ta, B, tb, alpha, beta, bias)).first;
    } catch (const dnnl::error& e) {
      THROW_ERROR(
          "oneDNN has no bf16 matmul for M={} N={} K={} on this CPU ({}); set "
          "TRAINER_CPU_BF16=fp32",
          s.M, s.N, s.K, e.what());
    }
  }
  Primitive& p = it->second;
  // oneDNN's handles are void* for the operands it reads too.
  p.a.set_data_handle(const_cast<void*>(A.data));
  p.b.set_data_handle(const_cast<void*>(B.data));
  p.c.set_data_handle(C.data);
  if (bias) p.bias.set_data_handle(const_cast<void*>(bias->data));
  p.matmul.execute(stream, p.args);
  stream.wait();
}

// ---- bf16 converted to fp32 (Note [CPU bf16 matmul]) -----------------------------------------

constexpr int64_t kStripBudget = int64_t(4) << 20;  // floats in one strip plus its result tile

struct StripPlan {
  bool stream_b;     // B is converted a strip of columns at a time (else A, a strip of rows)
  int64_t width;     // columns (or rows) per strip
  int64_t resident;  // floats of the operand converted whole
  int64_t strip;     // floats of one converted strip
  int64_t tile;      // floats of one fp32 result tile
};

StripPlan plan_strips(int64_t M, int64_t N, int64_t K) {
  StripPlan p;
  p.stream_b = M * K <= K * N;
  const int64_t other = p.stream_b ? M : N, along = p.stream_b ? N : M;
  p.width = std::clamp<int64_t>(kStripBudget / std::max<int64_t>(1, K + other), 16, 1 << 20);
  p.width = std::min(p.width, std::max<int64_t>(1, along));
  p.resident = K * other;
  p.strip = K * p.width;
  p.tile = other * p.width;
  return p;
}

// dst(rows, cols) contiguous fp32 = src(rows, cols) bf16 with leading dimension ld.
void to_fp32(float* dst, const bf16* src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    const bf16* s = src + i * ld;
    float* d = dst + i * cols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) d[j] = to_float(s[j]);
  }
}

// C[r0 + i, c0 + j] = tile(i, j) + beta * C[...] + bias[c0 + j], rounded to C's dtype.
template <typename TC>
void store_tile(const Tensor& C, int64_t r0, int64_t c0, const float* tile, int64_t rows,
                int64_t cols, float beta, const ConstTensor* bias) {
  TC* c = static_cast<TC*>(C.data);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    TC* out = c + (r0 + i) * C.ld() + c0;
    const float* t = tile + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      float v = t[j];
      if (beta != 0.0f) v += beta * load(out[j]);
      if (bias)
        v += bias->dtype == DType::f32 ? bias->as<float>()[c0 + j]
                                       : to_float(bias->as<bf16>()[c0 + j]);
      store(out[j], v);
    }
  }
}

void matmul_via_fp32(const Context& ctx, const Shape& s, const Tensor& C, const ConstTensor& A,
                     bool ta, const ConstTensor& B, bool tb, float alpha, float beta,
                     const ConstTensor* bias) {
  const StripPlan p = plan_strips(s.M, s.N, s.K);
  Workspace::Scope scratch(ctx.workspace);
  float* resident = scratch.take<float>(p.resident);
  float* strip = scratch.take<float>(p.strip);
  float* tile = scratch.take<float>(p.tile);
  auto store = [&](int64_t r0, int64_t c0, int64_t rows, int64_t cols) {
    if (C.dtype == DType::f32)
      store_tile<float>(C, r0, c0, tile, rows, cols, beta, bias);
    else
      store_tile<bf16>(C, r0, c0, tile, rows, cols, beta, bias);
  };
  const bf16* a = A.as<bf16>();
  const bf16* b = B.as<bf16>();
  if (p.stream_b) {
    to_fp32(resident, a, A.rows(), A.cols(), A.ld());  // op(A) in A's own orientation
    const int64_t lda = A.cols();
    for (int64_t n0 = 0; n0 < s.N; n0 += p.width) {
      const int64_t nb = std::min(p.width, s.N - n0);
      if (tb)  // B is (N, K): rows n0.. are op(B)'s columns n0..
        to_fp32(strip, b + n0 * B.ld(), nb, s.K, B.ld());
      else  // B is (K, N): columns n0.. of every row
        to_fp32(strip, b + n0, s.K, nb, B.ld());
      sgemm(ta, tb, s.M, nb, s.K, alpha, resident, lda, strip, tb ? s.K : nb, 0.0f, tile, nb);
      store(0, n0, s.M, nb);
    }
  } else {
    to_fp32(resident, b, B.rows(), B.cols(), B.ld());
    const int64_t ldb = B.cols();
    for (int64_t m0 = 0; m0 < s.M; m0 += p.width) {
      const int64_t mb = std::min(p.width, s.M - m0);
      if (ta)  // A is (K, M): columns m0.. of every row
        to_fp32(strip, a + m0, s.K, mb, A.ld());
      else  // A is (M, K): rows m0..
        to_fp32(strip, a + m0 * A.ld(), mb, s.K, A.ld());
      sgemm(ta, tb, mb, s.N, s.K, alpha, strip, ta ? mb : s.K, resident, ldb, 0.0f, tile, s.N);
      store(m0, 0, mb, s.N);
    }
  }
}

void cpu_matmul(const Context& ctx, const Tensor& C, const ConstTensor& A, bool trans_a,
                const ConstTensor& B, bool trans_b, float alpha, float beta,
                const ConstTensor* bias) {
  const Shape s{C.rows(), C.cols(), trans_a ? A.rows() : A.cols()};
  TRAINER_ASSERT(A.device == Device::cpu, "matmul of {} operands on the CPU",
                 device_name(A.device));
  if (s.M == 0 || s.N == 0) return;
  if (A.dtype == DType::f32)
    matmul_f32(s, C, A, trans_a, B, trans_b, alpha, beta, bias);
  else if (ctx.bf16_math == CpuBf16Math::native)
    matmul_onednn(s, C, A, trans_a, B, trans_b, alpha, beta, bias);
  else
    matmul_via_fp32(ctx, s, C, A, trans_a, B, trans_b, alpha, beta, bias);
}

size_t cpu_workspace_bytes(const Context& ctx, int64_t M, int64_t N, int64_t K, DType ab) {
  if (ab != DType::bf16 || ctx.bf16_math == CpuBf16Math::native) return 0;
  // A bound that only grows with M, N and K (the strips' own size does not: their width is
  // rounded down), so a model sized for its largest batch holds any smaller one.
  const StripPlan p = plan_strips(M, N, K);
  const int64_t other = p.stream_b ? M : N;
  const int64_t strips = std::max<int64_t>(kStripBudget, 16 * (K + other));
  return Workspace::bytes_for<float>(p.resident) + Workspace::bytes_for<float>(strips) +
         2 * Workspace::kAlignment;
}

}  // namespace

// The CPU runs the products' epilogues apart (no fused GELU, bias gradient or its derivative).
extern const GemmKernels kCpuGemm = {cpu_matmul, nullptr, nullptr, nullptr, cpu_workspace_bytes};

}  // namespace trainer
