#!/usr/bin/env bash
# LoRA against full fine-tuning, side by side from one run: a Llama (L=4, C=512, 8 heads with 4
# key/value heads, V=8192, 4 rows of 128 tokens, fp32, 2 threads) trained 60 steps and exported
# as a Hugging Face folder, then fine-tuned 30 steps on new sentences, in full (lr 1e-3) and
# with rank-16 adapters on every product (lr 1e-2): each one's validation loss on the new data,
# median step time, memory plan (optimizer state, gradients, total) and peak resident memory,
# and the ratios. The adapters' optimizer state is their own; the base's fp32 masters and
# gradient buffer are still held (docs/interop.md, "LoRA").
#   scripts/bench/lora.sh [build/trainer]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TRAINER=$(realpath "${1:-$ROOT/build/trainer}")
DIR=$(mktemp -d /tmp/trainer_lora_bench.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
source "$ROOT/tests/app/small_corpus.sh"
small_corpus "$TRAINER"
new_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.arch=llama --set model.vocab_size=8192 --set model.n_layer=4
        --set model.n_head=8 --set model.n_kv_head=4 --set model.n_embd=512
        --set model.max_seq_len=128 --set data.seq_len=128 --set data.batch_size=4
        --set train.val_every=0 --set log.every=1 --set log.progress=off
        --set log.peak_gflops=100)
export OMP_NUM_THREADS=2
"$TRAINER" train "${common[@]}" --set run.name=base --set train.steps=60 \
  --set checkpoint.every=60 >base.log 2>&1
"$TRAINER" export runs/base --out base >/dev/null
for name in full lora; do
  extra=(--set optimizer.lr=1e-3)
  [[ $name == lora ]] && extra=(--set train.lora.rank=16 --set train.lora.alpha=32
                                --set optimizer.lr=1e-2)
  "$TRAINER" train "${common[@]}" --set run.name="$name" --set train.init_from=base \
    --set data.path=new --set train.steps=30 --set checkpoint.every=30 "${extra[@]}" \
    >"$name.log" 2>&1
done
for name in base full lora; do
  src=runs/$name
  [[ $name == base ]] && src=base
  "$TRAINER" eval "$src" --data new --max-batches 8 | tail -1 >"eval_$name.json"
done

/usr/bin/python3 - <<'PY'
import json, re, statistics

def run(name):
    rows = [r for r in map(json.loads, open(f"runs/{name}/metrics.jsonl")) if "loss" in r]
    log = open(f"{name}.log").read()
    plan = re.search(r"memory plan per rank: ([0-9.]+) MiB \(sharding none: fp32 masters "
                     r"([0-9.]+), working weights [0-9.]+, gradients ([0-9.]+), optimizer "
                     r"([0-9.]+)", log)
    peak = float(re.search(r"peak resident memory ([0-9.]+) MiB", log).group(1))
    total, masters, grads, opt = map(float, plan.groups())
    return {"val loss": json.load(open(f"eval_{name}.json"))["loss"],
            "step ms": statistics.median(r["step_ms"] for r in rows if r["step"] > 5),
            "optimizer MiB": opt, "gradients MiB": grads, "plan MiB": total,
            "peak RSS MiB": peak}

full, lora = run("full"), run("lora")
base = json.load(open("eval_base.json"))["loss"]
print(f"validation loss on the new data before fine-tuning: {base:.4f}")
print(f"{'':16}{'full':>10}{'LoRA r=16':>12}{'LoRA / full':>14}")
for key in full:
    digits = 4 if key == "val loss" else 1
    print(f"{key:16}{full[key]:10.{digits}f}{lora[key]:12.{digits}f}"
          f"{lora[key] / max(full[key], 1e-9):14.2f}")
PY
