#!/usr/bin/env bash
# DDP scaling on CPU, in one run: 1 rank x 1 thread against 2 ranks x 1 thread training the
# default GPT (L=6, C=384, H=6, V=8192, B=8 per rank, T=256) on synthetic tokens, printing the
# throughput ratio (target >= 1.8x) and the fraction of all-reduce time hidden behind backward
# (target >= 80%, with 4+ buckets). Figures are per-step means after warm-up.
#   DDP_BENCH=build/app/trainer_ddp_bench scripts/bench/ddp.sh [bench options...]
# Options go to both runs, e.g. --steps 6 --bucket-mb 10 --layers 2; DDP_BIND=core pins ranks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="${DDP_BENCH:-$ROOT/build/app/trainer_ddp_bench}"
[[ -x "$BENCH" ]] || { echo "bench/ddp: no trainer_ddp_bench at $BENCH (set \$DDP_BENCH)" >&2; exit 1; }
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS=1)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
ARGS=(--layers 6 --embd 384 --heads 6 --vocab 8192 --batch 8 --seq 256 --steps 4 --warmup 1
      --bucket-mb 10 "$@")
export OMP_NUM_THREADS=1
one=$("$BENCH" "${ARGS[@]}" | grep '^ranks=')
two=$("${MPIRUN[@]}" -np 2 --bind-to "${DDP_BIND:-none}" "$BENCH" "${ARGS[@]}" | grep '^ranks=')
echo "1 rank : $one"
echo "2 ranks: $two"
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
awk -v a="$(field tokens_per_s "$one")" -v b="$(field tokens_per_s "$two")" \
    -v h="$(field hidden "$two")" -v mb="$(field bucket_mb "$two")" 'BEGIN {
  printf "scaling 2 ranks / 1 rank: %.2fx (target >= 1.8x)\n", b / a
  printf "all-reduce hidden behind backward: %.0f%% with %s MiB buckets (target >= 80%%)\n", 100 * h, mb
}'
