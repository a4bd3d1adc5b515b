#!/usr/bin/env bash
# log.tensorboard through the binary: a 2-rank DDP run, rewound to its step-5 checkpoint and
# resumed to step 10 (--force), then resumed again after its event file lost a torn last
# record; an independent reader (read_tfevents.py) checks every record's CRC and that the
# scalars are exactly metrics.jsonl's numbers, each step once.
#   tensorboard.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_tensorboard.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set run.name=tb --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2
        --set model.n_embd=32 --set model.max_seq_len=32 --set data.seq_len=32
        --set data.batch_size=4 --set train.val_every=4 --set train.val_batches=2
        --set checkpoint.every=5 --set log.every=1 --set log.progress=off
        --set log.peak_gflops=100 --set log.tensorboard=true)
train() {
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
    "$TRAINER" train "${common[@]}" "$@" >>train.log 2>&1 ||
    { echo "FAIL: train $*"; tail -5 train.log; exit 1; }
}
events() { ls runs/tb/tensorboard/events.out.tfevents.*; }
train --set train.steps=8
[[ $(events | wc -l) -eq 1 ]] || { echo "FAIL: $(events)"; exit 1; }
python3 "$HERE/read_tfevents.py" "$(events)" runs/tb/metrics.jsonl >/dev/null
# Rewound: steps 6-8 are trained again, and must not be in the file twice.
train --set train.steps=10 --set train.resume=runs/tb/checkpoints/step-5 --force
python3 "$HERE/read_tfevents.py" "$(events)" runs/tb/metrics.jsonl
# The final line counts this launch's steps, not the run's (issue 42: what is recorded is true).
grep -q "done: step 10; this launch trained 5 steps, " train.log ||
  { echo "FAIL: $(grep 'done:' train.log | tail -1)"; exit 1; }
# A crash mid-write leaves a torn record: the next resume drops it.
printf '\x20\x00\x00\x00\x00\x00\x00\x00torn' >>"$(events)"
train --set train.steps=12
[[ $(events | wc -l) -eq 1 ]] || { echo "FAIL: $(events)"; exit 1; }
python3 "$HERE/read_tfevents.py" "$(events)" runs/tb/metrics.jsonl
echo "tensorboard: OK"
