#!/usr/bin/env bash
# What dist.deterministic costs, from one run at 2 ranks x 1 thread: step time with the
# default reductions and with the deterministic ones (a fixed-tree reduction every
# micro-batch, the tree sum over micro-batches, the exact norm), for stages none and full, with
# 1 and 4 micro-batches per step. The default shape: L=8, C=256, V=4096, B=4, T=128.
#   DET_BENCH=build/app/trainer_ddp_bench scripts/bench/deterministic.sh [bench options...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ddp_bench_common.sh" deterministic "${DET_BENCH:-}" "$@"
printf "%-8s %6s %14s %18s %8s\n" stage accum default_ms deterministic_ms ratio
for stage in none full; do
  for accum in 1 4; do
    declare -A ms=()
    for det in 0 1; do
      line=$("${MPIRUN[@]}" "$BENCH" "${ARGS[@]}" --sharding "$stage" --accum "$accum" \
        --deterministic "$det" | grep '^ranks=')
      ms[$det]=$(field step_s "$line")
    done
    awk -v s="$stage" -v a="$accum" -v t0="${ms[0]}" -v t1="${ms[1]}" \
      'BEGIN { printf "%-8s %6d %14.1f %18.1f %8.2f\n", s, a, 1000 * t0, 1000 * t1, t1 / t0 }'
  done
done
