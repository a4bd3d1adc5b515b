#!/usr/bin/env bash
# Pipeline parallelism side by side, from one run: the same GPT-2 (L=8, C=128, 4 heads, V=2048,
# 4 rows of 128 tokens per micro-batch, fp32) trained 20 steps on 2 stages (2 ranks x 1 thread)
# under each schedule (GPipe, 1F1B, interleaved with 2 virtual stages) with M = P, 2P and 4P
# micro-batches per step, and on 1 rank x 1 thread for reference: each one's median step time,
# the measured bubble (the stages' idle share of their step: waiting for the other stage's
# transfers) against the theory of docs/dist.md ((P - 1) / (V M + P - 1)), the micro-batches
# each stage holds, and each stage's peak resident memory.
#   scripts/bench/pipeline.sh [build/trainer]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAINER=$(realpath "${1:-$ROOT/build/trainer}")
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
DIR=$(mktemp -d /tmp/trainer_pp_bench.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
source "$ROOT/tests/app/small_corpus.sh"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=2048 --set model.n_layer=8 --set model.n_head=4 --set model.n_embd=128
        --set model.max_seq_len=128 --set data.seq_len=128 --set data.batch_size=4
        --set train.steps=20 --set train.val_every=0 --set checkpoint.every=0 --set log.every=1
        --set log.progress=off --set log.peak_gflops=100 --set log.all_ranks=true)
for m in 2 4 8; do
  OMP_NUM_THREADS=1 "$TRAINER" train "${common[@]}" --set run.name="one_m$m" \
    --set train.grad_accum="$m" >"one_m$m.log" 2>&1
  for s in gpipe 1f1b interleaved; do
    extra=()
    [[ $s == interleaved ]] && extra=(--set dist.pipeline_virtual_stages=2)
    OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$TRAINER" train "${common[@]}" \
      --set run.name="${s}_m$m" --set train.grad_accum="$m" --set dist.pipeline_parallel=2 \
      --set dist.pipeline_schedule="$s" "${extra[@]}" >"${s}_m$m.log" 2>&1
  done
done

/usr/bin/python3 - <<'PY'
import json, re, statistics

P = 2
def run(name):
    rows = [r for r in map(json.loads, open(f"runs/{name}/metrics.jsonl")) if "loss" in r]
    rows = [r for r in rows if r["step"] > 5]
    peaks = []  # rank 0's log is train.log, the others' logs/rank-R.log
    for rank in range(1 if name.startswith("one") else P):
        path = f"runs/{name}/train.log" if rank == 0 else f"runs/{name}/logs/rank-{rank}.log"
        log = open(path).read()
        peaks.append(float(re.search(r"peak resident memory ([0-9.]+) MiB", log).group(1)))
    held = re.findall(r"holds (\d+) micro-batch", open(f"{name}.log").read())
    return (statistics.median(r["step_ms"] for r in rows),
            statistics.median(r.get("bubble", 0) for r in rows), peaks, held)

print(f"{'schedule':12} {'M':>3} {'step ms':>8} {'vs 1 rank':>9} {'bubble':>7} {'theory':>7} "
      f"{'held (stage 0)':>14} {'peak RSS MiB per stage':>24}")
for m in (2, 4, 8):
    one = run(f"one_m{m}")
    print(f"{'1 rank':12} {m:3d} {one[0]:8.1f} {1.0:9.2f} {'':>7} {'':>7} {'':>14} "
          f"{one[2][0]:24.1f}")
    for s, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        ms, bubble, peaks, held = run(f"{s}_m{m}")
        theory = (P - 1) / (v * m + P - 1)
        print(f"{s:12} {m:3d} {ms:8.1f} {ms / one[0]:9.2f} {bubble:7.3f} {theory:7.3f} "
              f"{','.join(held):>14} {' / '.join(f'{p:.1f}' for p in peaks):>24}")
PY
