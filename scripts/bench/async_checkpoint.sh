#!/usr/bin/env bash
# Synchronous against asynchronous checkpoints, side by side from one run, at the GPT-2 124M
# shape (L=12, C=768, 12 heads, V=50257; 4 rows of 64 tokens, fp32, 2 threads): 9 steps with a
# save every 3 (steps 3 and 6 periodic; the save at the end waits in both modes), each mode
# once. Prints, per mode, the step's stall at each periodic save (sync: the whole save; async:
# the copy into host memory), the background write's time, the mean time of steps 4-8 (which
# the writes run beside under async), the run's wall time for its 9 steps and saves, and the
# peak resident memory against the plan; then the ratios (the stall's goal: at most 10% of a
# synchronous save).
#   scripts/bench/async_checkpoint.sh [build/trainer]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAINER=$(realpath "${1:-$ROOT/build/trainer}")
DIR=$(mktemp -d "${TMPDIR:-/tmp}/trainer_async_bench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
source "$ROOT/tests/app/small_corpus.sh"
small_corpus "$TRAINER"
export OMP_NUM_THREADS=2
for mode in sync async; do
  "$TRAINER" train --set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs \
    --set run.name="$mode" --set model.vocab_size=50257 --set model.n_layer=12 \
    --set model.n_head=12 --set model.n_embd=768 --set model.max_seq_len=64 \
    --set data.seq_len=64 --set data.batch_size=4 --set train.steps=9 \
    --set train.val_every=0 --set checkpoint.every=3 --set checkpoint.keep_last=1 \
    --set checkpoint.async=$([[ $mode == async ]] && echo true || echo false) \
    --set log.progress=off --set log.every=1 --set log.peak_gflops=100 >"$mode.log" 2>&1 ||
    { echo "the $mode run failed:"; tail -3 "$mode.log"; exit 1; }
done
python3 - <<'EOF'
import json
import re

def figures(mode):
    log = open(f"{mode}.log").read()
    if mode == "sync":
        stalls = [float(s) for step, s in re.findall(r"saved \S+/step-(\d+) in ([0-9.]+) s", log)
                  if step != "9"]
        writes = stalls
    else:
        stalls = [float(s) for s in re.findall(r"copied the state in ([0-9.]+) s", log)]
        writes = [float(s) for s in re.findall(r"written in the background in ([0-9.]+) s", log)]
    wall = float(re.search(r"this launch trained \d+ steps, \d+ tokens, in ([0-9.]+) s", log)[1])
    rss = float(re.search(r"resident peak ([0-9.]+) MiB", log)[1])
    plan = float(re.search(r"memory plan per rank: ([0-9.]+) MiB", log)[1])
    copy = re.search(r"checkpoint ([0-9.]+)/([0-9.]+)", log)
    steps = [json.loads(l) for l in open(f"runs/{mode}/metrics.jsonl")]
    # Steps 4-8: under async, the writes of steps 3 and 6 run beside them.
    behind = [r["step_ms"] for r in steps if "step_ms" in r and 4 <= r["step"] <= 8]
    return stalls, writes, wall, rss, plan, copy.group(0) if copy else "-", sum(behind) / len(behind)

rows = {m: figures(m) for m in ("sync", "async")}
print(f"{'mode':6} {'stall per save (s)':>19} {'write (s)':>10} {'steps 4-8 (ms)':>15} "
      f"{'9 steps + saves (s)':>20} {'RSS peak (MiB)':>15} {'plan (MiB)':>11}  "
      "checkpoint plan/peak (MiB)")
for m, (st, wr, wall, rss, plan, copy, behind) in rows.items():
    print(f"{m:6} {' '.join(f'{s:.3f}' for s in st):>19} {' '.join(f'{s:.2f}' for s in wr):>10} "
          f"{behind:15.0f} {wall:20.1f} {rss:15.0f} {plan:11.0f}  {copy}")
sync_stall = sum(rows["sync"][0]) / len(rows["sync"][0])
async_stall = sum(rows["async"][0]) / len(rows["async"][0])
print(f"async stall / sync save: {async_stall / sync_stall:.3f} (goal <= 0.10); "
      f"steps 4-8 async / sync: {rows['async'][6] / rows['sync'][6]:.2f}; "
      f"run time async / sync: {rows['async'][2] / rows['sync'][2]:.3f}")
EOF
