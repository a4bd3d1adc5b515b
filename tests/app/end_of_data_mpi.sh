#!/usr/bin/env bash
# The end of the data on 2 ranks with gradient accumulation: with data.epochs = 1, a run
# accumulating 3 micro-batches per step must train on exactly the tokens a run taking one per
# step does (the last step takes the micro-batches that are left; none is dropped).
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
for accum in 1 3; do
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$TRAINER" train \
    --set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs \
    --set run.name=accum$accum --set model.vocab_size=320 --set model.n_layer=1 \
    --set model.n_head=2 --set model.n_embd=16 --set model.max_seq_len=32 --set data.mode=pack \
    --set data.seq_len=32 --set data.batch_size=2 --set data.epochs=1 --set train.steps=100000 \
    --set train.grad_accum=$accum --set train.val_every=0 --set log.progress=off \
    --set log.peak_gflops=100 >/dev/null
done
/usr/bin/python3 - <<'PY'
import json, sys
tokens = {a: json.load(open(f"runs/accum{a}/checkpoints/latest/trainer_state.json"))["tokens_seen"]
          for a in (1, 3)}
print(f"end of data, 2 ranks: {tokens[1]} tokens with 1 micro-batch per step, {tokens[3]} with 3")
sys.exit(0 if tokens[1] == tokens[3] and tokens[1] > 0 else 1)
PY
