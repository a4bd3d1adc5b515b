#!/usr/bin/env bash
# The end of the data on 2 ranks with gradient accumulation: with data.epochs = 1, a run
# accumulating 3 micro-batches per step must train on exactly the tokens a run taking one per
# step does (the last step takes the micro-batches that are left; none is dropped). The same
# under dist.sharding gradients and full, where a rank with fewer micro-batches at the end runs
# empty passes (Join): same tokens, and the same losses as DDP at every step.
#   end_of_data_mpi.sh <trainer> <mpiexec>
set -euo pipefail
TRAINER=$(realpath "$1")
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_end_of_data.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
for i in $(seq 1 157); do
  echo "the quick brown fox number $((i % 17)) jumps over the lazy dog near the river bank."
  [[ $((i % 3)) -eq 0 ]] && echo "and then it rests for $((i % 7)) minutes in the shade."
  echo
done > text.txt
"$TRAINER" tokenizer train --input text.txt --vocab-size 320 --out tok.model >/dev/null
"$TRAINER" prepare --tokenizer tok.model --input text.txt --out corpus --val-fraction 0.1 >/dev/null
# train.steps = 100000 is never reached: the 14 KB text is under 15k tokens (one byte or more
# each, with the documents' ends), at most ~230 micro-batches of 2 x 32, so data.epochs = 1
# ends every run first.
for run in 1:none 3:none 3:gradients 3:full; do
  accum=${run%:*} sharding=${run#*:}
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$TRAINER" train \
    --set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs \
    --set run.name=accum$accum$sharding --set dist.sharding=$sharding \
    --set model.vocab_size=320 --set model.n_layer=1 \
    --set model.n_head=2 --set model.n_embd=16 --set model.max_seq_len=32 --set data.mode=pack \
    --set data.seq_len=32 --set data.batch_size=2 --set data.epochs=1 --set train.steps=100000 \
    --set train.grad_accum=$accum --set train.val_every=0 --set log.progress=off \
    --set log.peak_gflops=100 >/dev/null
done
/usr/bin/python3 - <<'PY'
import json, sys
runs = ["1none", "3none", "3gradients", "3full"]
tokens = {r: json.load(open(f"runs/accum{r}/checkpoints/latest/trainer_state.json"))["tokens_seen"]
          for r in runs}
def losses(r):
    return [l["loss"] for l in map(json.loads, open(f"runs/accum{r}/metrics.jsonl")) if "loss" in l]
ddp = losses("3none")
# The same GEMMs as DDP; only the ranks' and micro-batches' gradients are added in another
# order (~2^-24 of them): losses ~1e-8 apart (Note [Sharded against DDP] in sharding_test.cpp).
# A lost or repeated micro-batch moves them by >= 1e-3.
worst = max(abs(a - b) / abs(b) for r in ["3gradients", "3full"] for a, b in zip(losses(r), ddp))
same_steps = all(len(losses(r)) == len(ddp) for r in ["3gradients", "3full"])
print(f"end of data, 2 ranks: tokens {tokens}; sharded losses within {worst:.1e} of DDP's")
sys.exit(0 if len(set(tokens.values())) == 1 and tokens["1none"] > 0 and same_steps
         and worst < 1e-5 else 1)
PY
