#!/usr/bin/env bash
# The GEMM choice, measured: oneDNN (what the trainer uses) against OpenBLAS (through Debian's
# numpy) on square fp32 products, OpenBLAS both as this environment configures it and with
# OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset (its own kernel choice). One run, side by side.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRAINER="${TRAINER:-$ROOT/build/trainer}"
echo "== oneDNN (trainer)"
"$TRAINER" bench --gemm
blas() {
  /usr/bin/python3 - <<'PY'
import os, time
import numpy as np
for n in (256, 512, 1024, 2048):
    a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
    a @ b
    best, t0 = 0.0, time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        t = time.perf_counter(); a @ b; best = max(best, 2 * n**3 / (time.perf_counter() - t) / 1e9)
    print(f"OpenBLAS sgemm {n:4d}^3: {best:.1f} GFLOP/s")
PY
}
echo "== OpenBLAS (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
blas
echo "== OpenBLAS (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset)"
(unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; blas)
