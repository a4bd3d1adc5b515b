#!/usr/bin/env bash
# A full disk in the middle of a run (a small tmpfs as the run directory): the run must stop
# with an error naming the file it could not write, `latest` must still name the previous
# complete checkpoint (and load), and no partial checkpoint may be left behind. Twice: with
# synchronous saves, and under checkpoint.async, where the write fails on its thread and the
# run ends at the next step boundary. Needs root to mount the tmpfs; exits 77 (reported as
# skipped) where mounting is not allowed.
#   disk_full.sh <trainer>
set -uo pipefail
TRAINER=$(realpath "$1")
DIR=$(mktemp -d /tmp/trainer_diskfull.XXXXXX)
cleanup() { umount "$DIR/runs" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
cd "$DIR"
mkdir runs
if ! mount -t tmpfs -o size=600k tmpfs runs 2>/dev/null; then
  echo "disk_full: cannot mount a tmpfs here (not root?): skipped"
  exit 77
fi
for i in $(seq 1 300); do
  echo "the quick brown fox number $((i % 17)) jumps over the lazy dog near the river bank."
  echo
done > text.txt
"$TRAINER" tokenizer train --input text.txt --vocab-size 320 --out tok.model >/dev/null
"$TRAINER" prepare --tokenizer tok.model --input text.txt --out corpus --val-fraction 0.1 >/dev/null
# 36,736 parameters: a checkpoint is 147 KB of weights, 294 KB of moments and a few small
# files, ~460 KB in tmpfs's 4 KiB pages. In 600 KiB the first fits with ~130 KiB left for the
# run's logs, and the second (at step 4; keep_last = 100 removes none) cannot: the fixed file
# layout decides, not the machine. 1000 steps only make sure the run never ends first.
full_disk_run() {  # full_disk_run <checkpoint.async>
  rm -rf runs/gpt
  "$TRAINER" train --set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs \
    --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 \
    --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4 \
    --set train.steps=1000 --set train.val_every=0 --set checkpoint.every=2 \
    --set checkpoint.keep_last=100 --set checkpoint.async="$1" --set log.progress=off \
    --set log.peak_gflops=100 >out.log 2>err.log
  local rc=$? errors=() latest
  [[ $rc -eq 1 ]] || errors+=("exit $rc, want 1")
  grep -Eq "error: .*(runs/gpt/checkpoints/step-[0-9]+\.tmp/[a-z_.]+|runs/gpt/[a-z_.]+).*No space left on device" err.log ||
    errors+=("no error line naming the file and the full disk: $(tail -1 err.log)")
  latest=$(readlink runs/gpt/checkpoints/latest)
  [[ -n "$latest" && "$latest" != *.tmp ]] || errors+=("latest is '$latest'")
  "$TRAINER" inspect runs/gpt >/dev/null 2>&1 || errors+=("latest ($latest) does not load")
  grep -q '\.tmp$' <<<"$(ls runs/gpt/checkpoints)" && errors+=("a partial checkpoint was left: $(ls runs/gpt/checkpoints)")
  if [[ $1 == true ]]; then  # the write that failed was a background one
    grep -q "writing step-4 in the background" out.log err.log ||
      errors+=("step 4 was not written in the background")
    grep -Eq "error: .*step-4\.tmp/[a-z_]+\.safetensors.*No space left on device" err.log ||
      errors+=("the error does not name step 4's tensor file: $(tail -1 err.log)")
  fi
  if ((${#errors[@]})); then
    printf 'disk_full (checkpoint.async=%s): FAIL: %s\n' "$1" "${errors[@]}"
    tail -3 err.log
    exit 1
  fi
  echo "disk_full (checkpoint.async=$1): stopped with '$(grep error: err.log | tail -1 | cut -c1-120)'; latest = $latest loads"
}
full_disk_run false
full_disk_run true
