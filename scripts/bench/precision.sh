#!/usr/bin/env bash
# Precision and activation checkpointing at the GPT-2 124M shape (L=12, C=768, H=12, V=50304,
# B=4, T=64), side by side from one run: ms per step and activation memory for fp32 and bf16
# under each checkpointing mode, with the ratios the targets are stated in (full: at most +40%
# step time and at least 60% less activation memory; selective: at most +15%), and this
# commit's fp32 step time against a base commit's, built beside it and run alternately.
#   scripts/bench/precision.sh [base-ref] [steps]     (TRAINER=build/trainer by default)
# base-ref defaults to 8c5a5e2, the last commit before ops took a context and dtypes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRAINER="${TRAINER:-$ROOT/build/trainer}"
BASE_REF="${1:-8c5a5e2}"
STEPS="${2:-4}"
SHAPE=(--set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12
       --set model.vocab_size=50304 -B 4 -T 64 --steps "$STEPS")
source "$ROOT/scripts/bench/bench_args.sh"
[[ -x "$TRAINER" ]] || { echo "bench/precision: no trainer at $TRAINER (set \$TRAINER)" >&2; exit 1; }

# The base commit, built once into its own worktree (kept for reruns).
BASE_DIR="${BASE_DIR:-/tmp/trainer-bench-base-$(git -C "$ROOT" rev-parse --short "$BASE_REF")}"
if [[ ! -x "$BASE_DIR/build/trainer" ]]; then
  echo "== building base $BASE_REF in $BASE_DIR"
  rm -rf "$BASE_DIR"
  git -C "$ROOT" worktree add --detach --force "$BASE_DIR" "$BASE_REF" >/dev/null
  cmake -S "$BASE_DIR" -B "$BASE_DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=OFF \
    -DTRAINER_TESTS=OFF >/dev/null
  ninja -C "$BASE_DIR/build" trainer >/dev/null
fi

ms() { sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p' <<<"$1"; }
mib() { sed -n 's/.*activations \([0-9.]*\) MiB.*/\1/p' <<<"$1"; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; }

echo "== fp32 against the base commit (alternating, best of 2 each)"
base_ms=1e9 ours_ms=1e9
for round in 1 2; do
  b=$(bench_run "$BASE_DIR/build/trainer" "${SHAPE[@]}")
  o=$(bench_run "$TRAINER" "${SHAPE[@]}")
  base_ms=$(min "$base_ms" "$(ms "$b")")
  ours_ms=$(min "$ours_ms" "$(ms "$o")")
done
awk -v b="$base_ms" -v o="$ours_ms" 'BEGIN {
  printf "   base %.1f ms/step | this commit %.1f ms/step | ratio %.3f (target <= 1.05)\n", b, o, o / b }'

echo "== precision x activation checkpointing"
declare -A T M
for p in fp32 bf16; do
  for c in none selective full; do
    out=$("$TRAINER" bench "${SHAPE[@]}" --set model.precision="$p" \
      --set model.activation_checkpointing="$c")
    T[$p.$c]=$(ms "$out")
    M[$p.$c]=$(mib "$out")
    printf "   %-4s %-9s %8.1f ms/step %8.1f MiB activations\n" "$p" "$c" "${T[$p.$c]}" "${M[$p.$c]}"
  done
done
for p in fp32 bf16; do
  for c in selective full; do
    awk -v t="${T[$p.$c]}" -v t0="${T[$p.none]}" -v m="${M[$p.$c]}" -v m0="${M[$p.none]}" \
        -v p="$p" -v c="$c" 'BEGIN {
      target = c == "full" ? "<= +40%, >= 60% saved" : "<= +15%"
      printf "   %s %-9s step time %+.1f%%, activation memory -%.1f%% (target %s)\n",
             p, c, 100 * (t / t0 - 1), 100 * (1 - m / m0), target }'
  done
done
awk -v t="${T[bf16.none]}" -v t0="${T[fp32.none]}" -v m="${M[bf16.none]}" -v m0="${M[fp32.none]}" 'BEGIN {
  printf "   bf16 against fp32: step time x%.2f, activation memory x%.2f\n", t / t0, m / m0 }'
