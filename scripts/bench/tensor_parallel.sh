#!/usr/bin/env bash
# Tensor parallelism side by side, from one run: the same GPT-2 (L=4, C=256, 8 heads, V=4096,
# 4 rows of 128 tokens per micro-batch, fp32) trained 30 steps as 1 rank x 2 threads (TP=1),
# 2 ranks x 1 thread with DDP, and 2 ranks x 1 thread with dist.tensor_parallel=2, without and
# with dist.sequence_parallel: each one's median step time, planned memory per rank and peak
# resident memory, and the bytes the tensor group carried per step against the closed form of
# docs/dist.md ("Communication per step").
#   scripts/bench/tensor_parallel.sh [build/trainer]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAINER=$(realpath "${1:-$ROOT/build/trainer}")
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
DIR=$(mktemp -d /tmp/trainer_tp_bench.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
source "$ROOT/tests/app/small_corpus.sh"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=4096 --set model.n_layer=4 --set model.n_head=8 --set model.n_embd=256
        --set model.max_seq_len=128 --set data.seq_len=128 --set data.batch_size=4
        --set train.global_batch=2 --set train.steps=30 --set train.val_every=0
        --set checkpoint.every=0 --set log.every=1 --set log.progress=off --set log.peak_gflops=100)
OMP_NUM_THREADS=2 "$TRAINER" train "${common[@]}" --set run.name=tp1 >tp1.log 2>&1
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$TRAINER" train "${common[@]}" --set run.name=ddp \
  >ddp.log 2>&1
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$TRAINER" train "${common[@]}" --set run.name=tp2 \
  --set dist.tensor_parallel=2 >tp2.log 2>&1
OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$TRAINER" train "${common[@]}" --set run.name=sp2 \
  --set dist.tensor_parallel=2 --set dist.sequence_parallel=true >sp2.log 2>&1

/usr/bin/python3 - <<'PY'
import json, re, statistics

def run(name):
    rows = [r for r in map(json.loads, open(f"runs/{name}/metrics.jsonl")) if "loss" in r]
    log = open(f"{name}.log").read()
    plan = float(re.search(r"memory plan per rank: ([0-9.]+) MiB", log).group(1))
    peak = float(re.search(r"peak resident memory ([0-9.]+) MiB", log).group(1))
    steps = [r["step_ms"] for r in rows if r["step"] > 5]
    return statistics.median(steps), plan, peak, rows

N, C, L, T = 4 * 128, 256, 4, 2
micro = 2  # train.global_batch over one data rank
f = (T - 1) / T
closed = micro * (2 * f * (4 * N * C + (4 * L + 1) * N * C * 4) + 8 * N * (T - 1))
closed_sp = micro * (f * 4 * N * C + L * 4 * f * N * C * 4 + f * N * C * 4 + 8 * N * (T - 1)
                     + 2 * f * N * C * 4 + 2 * 2 * f * C * 4 + L * (6 * f * N * C * 4 + 4 * 2 * f * C * 4)
                     + f * 4 * N * C)
base = run("tp1")
print(f"{'layout':28} {'step ms':>9} {'ratio':>6} {'plan MiB/rank':>14} {'peak RSS MiB':>13}")
for name, what in [("tp1", "TP=1: 1 rank x 2 threads"), ("ddp", "DDP: 2 ranks x 1 thread"),
                   ("tp2", "TP=2: 2 ranks x 1 thread"), ("sp2", "TP=2 + sequence parallel")]:
    ms, plan, peak, rows = run(name)
    print(f"{what:28} {ms:9.1f} {ms / base[0]:6.2f} {plan:14.1f} {peak:13.1f}")
print()
for name, want in [("tp2", closed), ("sp2", closed_sp)]:
    rows = run(name)[3]
    carried = statistics.median(r["tensor_bus_bytes"] for r in rows if r["step"] > 1)
    print(f"{name}: tensor group bytes per step and rank {carried:.0f} measured, {want:.0f} "
          f"closed form (ratio {carried / want:.4f})")
PY
