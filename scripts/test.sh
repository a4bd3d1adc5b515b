#!/usr/bin/env bash
# Installs what the tests need, builds, and runs every test:
#   bash scripts/test.sh            the whole suite (CI runs exactly this: .ci/run)
#   bash scripts/test.sh --quick    build, the unit tests and one multi-rank test (iteration)
# One build, build/: the CPU backend, and the CUDA backend where nvcc exists, compiled for one
# architecture (sm_90), which proves that the CUDA code compiles and links (its tests skip
# without a GPU; scripts/gpu_check.sh runs them on one, and its `pack` builds sm_90 and sm_80).
# CTest then runs the suite two tests at a time (Note [Test scheduling] in tests/CMakeLists.txt):
# natively, and the kernel-dependent tests again as an AVX2-only machine would (Note [CPU
# matrix]). It ends with a summary: each phase's wall time and the ten slowest tests.
#
# Note [CPU matrix]
# The machines that build and test this project differ: some have AVX-512 with BF16 and AMX,
# some only AVX2. The code is compiled with -march=native and oneDNN picks its kernels (and so
# its summation order, and whether bf16 products are native or via fp32) at run time, so a
# suite green on one is not proof for the other. Two things decide a result's bits: oneDNN's
# run-time ISA, and how GCC vectorises the CPU kernels' `omp simd` reductions, which only
# nn/ops/cpu/ has (the rest of the code permits no reassociation, so its results do not depend
# on -march). On a machine with AVX-512 the build therefore also compiles those kernels as
# -march=native compiles them on an AMD EPYC with AVX2 only (znver3: AVX2 and FMA, and that
# CPU's tuning, which decides how the reductions vectorise) into twins of the programs the
# `kernels` tests run (TRAINER_TWIN_MARCH), and runs those tests a second time through the twins
# with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA), which also takes bf16 products through fp32.
# This reproduces, to the last digit, the failure such a machine reported of a bound set from
# another machine's output (Join at 1.01463e-05 against 1e-05), and a twin gives the very bits
# of a whole build for znver3 (scripts/twin_check.sh compares them).
#   TRAINER_TEST_AVX2=off skips the second run, =on forces it (auto: where the CPU has AVX-512;
#     on an AVX2-only machine the first run already is one);
#   TRAINER_AVX2_MARCH picks another AVX2 CPU for the twins (haswell, skylake, znver2, ...);
#   TRAINER_MARCH builds everything for another CPU: TRAINER_MARCH=znver3
#     ONEDNN_MAX_CPU_ISA=AVX2 TRAINER_TEST_AVX2=off runs the suite as an AVX2-only machine does.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
quick=0
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

phases=()
phase_start=$SECONDS
phase() {  # NAME: the wall time since the previous phase ended, for the summary
  phases+=("$(printf '%-44s %4d s' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}

bash scripts/install_deps.sh
phase "install dependencies"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
# Two tests share the 2 cores: threads that wait at a barrier sleep instead of spinning, which
# would take the cores from the other test (Note [Test scheduling] in tests/CMakeLists.txt).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

avx2="${TRAINER_TEST_AVX2:-auto}"
if [ "$avx2" = auto ]; then
  if grep -qw avx512f /proc/cpuinfo; then avx2=on; else avx2=off; fi
fi
# A unity build: a third less compile time (Note [Build options] in CMakeLists.txt).
options=(-DTRAINER_TESTS=ON -DTRAINER_CUDA=AUTO -DCMAKE_CUDA_ARCHITECTURES=90
         -DTRAINER_MARCH="${TRAINER_MARCH:-native}" -DCMAKE_UNITY_BUILD=ON)
if [ "$avx2" = on ] && [ "$quick" = 0 ]; then
  options+=(-DTRAINER_TWIN_MARCH="${TRAINER_AVX2_MARCH:-znver3}")
else
  options+=(-DTRAINER_TWIN_MARCH=)
fi
bash scripts/build.sh build "${options[@]}"
phase "build (build/)"

# Quick: the unit tests and the one multi-rank test marked QUICK (Note [Test labels]).
select=()
what="tests, native"
[ "$avx2" = on ] && what="tests, native and as an AVX2-only machine"
if [ "$quick" = 1 ]; then
  select=(-LE 'full|avx2')
  what="tests (quick)"
fi
mkdir -p build/Testing
log=build/Testing/test_sh.log
status=0
(cd build && ctest --output-on-failure --timeout 600 -j 2 "${select[@]}") 2>&1 | tee "$log" ||
  status=$?
phase "$what"

echo
echo "test: summary"
printf '  %s\n' "${phases[@]}"
echo "  the ten slowest tests:"
# awk reads to the end: `head` would quit early, and under pipefail the SIGPIPE sort then gets
# would end this script with 141 instead of the tests' own status.
sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.+ *([^0-9]*[A-Za-z]+) +([0-9.]+) sec$/\3 \1 (\2)/p' "$log" |
  sort -rn | awk 'NR <= 10 { printf "    %7.1f s  %s %s\n", $1, $2, $3 }'
if [ "$status" != 0 ]; then
  # Last, where a CI page that shows only the tail of the output still has it: each failed
  # test's last lines, from CTest's record of every test's output.
  echo "  the failed tests' last lines:"
  awk '/^[0-9]+\/[0-9]+ Test: / { name = $3 }
       /^Output:$/ { n = 0; getline; out = 1; next }
       /^<end of output>$/ { out = 0; next }
       out { line[n++] = $0; next }
       /^Test / && !/^Test (time|Passed|Pass Reason|Skipped)/ {
         print "    " name ":"
         for (i = (n > 6 ? n - 6 : 0); i < n; ++i) print "      " substr(line[i], 1, 200)
       }' build/Testing/Temporary/LastTest.log
  echo "test: FAILED (CTest's log: $log)"
  exit "$status"
fi
echo "test: every test passed"
