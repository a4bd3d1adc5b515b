#!/usr/bin/env bash
# Installs what the tests need and runs every test. Where nvcc exists, it first builds the CUDA
# backend, so CUDA code must compile here (its tests skip without a GPU; scripts/gpu_check.sh
# runs them on one). Then it builds the CPU backend and runs the suite (unit, PyTorch parity,
# multi-rank under mpirun), and again as an AVX2-only machine would (Note [CPU matrix]). The
# suites that run on this machine come last, so the output ends with their results.
#
# Note [CPU matrix]
# The machines that build and test this project differ: some have AVX-512 with BF16 and AMX,
# some only AVX2. The code is compiled with -march=native and oneDNN picks its kernels (and so
# its summation order, and whether bf16 products are native or via fp32) at run time, so a
# suite green on one is not proof for the other. On a machine with AVX-512 the suite runs a
# second time as an AVX2-only machine runs it: compiled as -march=native compiles on an AMD EPYC
# with AVX2 only (znver3: AVX2 and FMA, and that CPU's tuning, which decides how GCC vectorises
# the `omp simd` reductions, so their bits) and with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA),
# which also takes bf16 products through fp32. This reproduces, to the last digit, the failure
# such a machine reported of a bound set from another machine's output (Join at 1.01463e-05
# against 1e-05). TRAINER_TEST_AVX2=off skips that run, =on forces it (on an AVX2-only machine
# the first run already is one, and auto skips it); TRAINER_AVX2_MARCH picks another AVX2 CPU
# (haswell, skylake, znver2, ...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install_deps.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "test: building the CUDA backend (build-cuda/)"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON >/dev/null
  ninja -C build-cuda -j "$(nproc)" trainer runtime_cuda_test nn_backend_parity_test
  # Without a GPU the CUDA cases report skipped; scripts/gpu_check.sh runs them on one.
  (cd build-cuda && ctest --output-on-failure -R "Cuda|_cuda_")
fi

bash scripts/build.sh build -DTRAINER_CUDA=OFF -DTRAINER_TESTS=ON
(cd build && ctest --output-on-failure --timeout 600 -j 1)

avx2="${TRAINER_TEST_AVX2:-auto}"
if [ "$avx2" = auto ]; then
  if grep -qw avx512f /proc/cpuinfo; then avx2=on; else avx2=off; fi
fi
if [ "$avx2" = on ]; then
  echo "test: the suite as an AVX2-only machine runs it (build-avx2/, ONEDNN_MAX_CPU_ISA=AVX2)"
  bash scripts/build.sh build-avx2 -DTRAINER_CUDA=OFF -DTRAINER_TESTS=ON \
    -DTRAINER_MARCH="${TRAINER_AVX2_MARCH:-znver3}"
  (cd build-avx2 && ONEDNN_MAX_CPU_ISA=AVX2 ctest --output-on-failure --timeout 600 -j 1)
fi
echo "test: every suite passed"
