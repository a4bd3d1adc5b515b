#!/usr/bin/env bash
# Installs what the tests need, builds the CPU backend and runs every test (unit, PyTorch
# parity, multi-rank under mpirun). Where nvcc exists, also builds the CUDA backend, so CUDA
# code must compile here; its tests skip without a GPU.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install_deps.sh
bash scripts/build.sh build -DTRAINER_CUDA=OFF -DTRAINER_TESTS=ON
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
(cd build && ctest --output-on-failure --timeout 600 -j 1)
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "test: building the CUDA backend (build-cuda/)"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON >/dev/null
  ninja -C build-cuda -j "$(nproc)" trainer runtime_cuda_test nn_backend_parity_test
  # Without a GPU the CUDA cases report skipped; scripts/gpu_check.sh runs them on one.
  (cd build-cuda && ctest --output-on-failure -R "Cuda|_cuda_")
fi
