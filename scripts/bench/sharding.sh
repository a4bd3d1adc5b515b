#!/usr/bin/env bash
# Sharding stages side by side at 2 ranks x 1 thread, from one run: each stage's step time and
# per-rank model state (what its DataParallel holds) and all buffers (measured as allocated,
# activations included) against DDP (stage none), training a GPT on synthetic tokens. The
# default shape has blocks that outweigh the embedding (L=8, C=256, V=4096), as real models do.
#   SHARD_BENCH=build/app/trainer_ddp_bench scripts/bench/sharding.sh [bench options...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/ddp_bench_common.sh" sharding "${SHARD_BENCH:-}" "$@"
declare -A STEP STATE LIVE
for stage in none optimizer gradients full; do
  line=$("${MPIRUN[@]}" "$BENCH" "${ARGS[@]}" --sharding "$stage" | grep '^ranks=')
  STEP[$stage]=$(field step_s "$line")
  STATE[$stage]=$(field state_mib "$line")
  LIVE[$stage]=$(field live_mib "$line")
  echo "$line"
done
printf "\n%-10s %10s %8s %14s %8s %14s %8s\n" stage step_ms ratio state_MiB ratio all_MiB ratio
for stage in none optimizer gradients full; do
  awk -v s="$stage" -v t="${STEP[$stage]}" -v t0="${STEP[none]}" -v m="${STATE[$stage]}" \
      -v m0="${STATE[none]}" -v l="${LIVE[$stage]}" -v l0="${LIVE[none]}" 'BEGIN {
    printf "%-10s %10.1f %8.2f %14.1f %8.2f %14.1f %8.2f\n", s, 1000 * t, t / t0, m, m / m0, l, l / l0 }'
done
