// The CPU's bf16 capability, as oneDNN sees it (it picks the kernels), and the ops' threads.
#include <dnnl.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "runtime/context.h"
#include "runtime/error.h"

namespace trainer {

namespace {
bool has_isa(unsigned isa, dnnl_cpu_isa_t wanted) {
  return (isa & unsigned(wanted)) == unsigned(wanted);
}
}  // namespace

int op_threads(const Context& ctx) {
  return ctx.threads > 0 ? ctx.threads : omp_get_max_threads();
}

bool cpu_has_bf16_arithmetic() {
  return has_isa(unsigned(dnnl_get_effective_cpu_isa()), dnnl_cpu_isa_avx512_core_bf16);
}

CpuBf16Math detect_cpu_bf16_math(std::string* why) {
  std::string reason;
  CpuBf16Math math = CpuBf16Math::via_fp32;
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  if (const char* forced = std::getenv("TRAINER_CPU_BF16")) {
    const std::string v = forced;
    if (v != "native" && v != "fp32")
      throw UsageError("TRAINER_CPU_BF16 must be native or fp32, got '" + v + "'");
    math = v == "native" ? CpuBf16Math::native : CpuBf16Math::via_fp32;
    reason = "forced by TRAINER_CPU_BF16=" + v;
  } else if (has_isa(isa, dnnl_cpu_isa_avx512_core_amx)) {
    math = CpuBf16Math::native;
    reason = "AMX";
  } else if (has_isa(isa, dnnl_cpu_isa_avx512_core_bf16)) {
    math = CpuBf16Math::native;
    reason = "AVX-512 BF16";
  } else {
    reason = "this CPU has neither AVX-512 BF16 nor AMX";
  }
  if (why)
    *why = (math == CpuBf16Math::native ? "oneDNN bf16 matmul (" : "bf16 stored, fp32 matmul (") +
           reason + ")";
  return math;
}

}  // namespace trainer
