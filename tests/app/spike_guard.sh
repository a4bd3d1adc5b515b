#!/usr/bin/env bash
# The loss-spike guard through the binary (Note [Spike guard] in app/spike_guard.cpp), on 2
# ranks under ZeRO-1, with a poisoned batch at step 30 on the first rank only
# (TRAINER_TEST_POISON: its tokens drawn uniformly from the vocabulary):
#   - skip: step 30 is skipped on both ranks (each rank's log says so), logged in the metrics
#     with what spiked and counted; no other step is skipped;
#   - stop: the run ends with exit 1 and a checkpoint of step 29, the state before the spike;
#     resumed with skip, it replays the batch, skips it, and ends bit for bit as the skip run;
#   - the skips share train.max_consecutive_skips with non-finite steps.
# Margins: the poisoned batch's loss is that of uniform tokens, about ln(320) = 5.8 or more,
# where the model's loss is near 3.2 and falls by at most a few hundredths a step (its window
# of 10 spans well under 0.5), tens of standard deviations; the clean steps' losses lie below
# their window's mean (the loss falls), far from the 6 standard deviations that make a spike.
#   spike_guard.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_spike.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4
        --set train.global_batch=2 --set train.steps=40 --set train.val_every=0
        --set checkpoint.every=10 --set log.every=5 --set log.progress=off
        --set schedule.warmup_steps=2 --set optimizer.lr=0.01 --set log.peak_gflops=100
        --set dist.sharding=optimizer --set train.spike_guard.window=10
        --set train.spike_guard.metric=loss --set log.all_ranks=true)
export TRAINER_TEST_POISON=30
train() {
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
    "$TRAINER" train "${common[@]}" "$@"
}
train --set run.name=skip --set train.spike_guard.action=skip >skip.log 2>&1 ||
  { echo "FAIL: the skip run"; tail -5 skip.log; exit 1; }
python3 - <<'PY'
import json, sys
steps = {}
for line in open("runs/skip/metrics.jsonl"):
    j = json.loads(line)
    if "loss" in j:
        steps[j["step"]] = j
bad = []
skipped = [s for s, j in steps.items() if j["skipped"]]
if skipped != [30]:
    bad.append(f"skipped steps {skipped}, not [30]")
spike = steps.get(30, {}).get("spike", "")
if not spike.startswith("the loss ") or "standard deviations above the mean" not in spike:
    bad.append(f"step 30's spike: {spike!r}")
for s, j in steps.items():  # logged every 5 steps, and at every skipped one
    if j["skips"] != (1 if s >= 30 else 0):
        bad.append(f"step {s} counts {j['skips']} skips")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
PY
for log in runs/skip/train.log runs/skip/logs/rank-1.log; do
  grep -q "step 30: the loss .* step skipped (1 in a row, 1 in all)" "$log" ||
    { echo "FAIL: $log does not say that step 30 was skipped"; exit 1; }
done

# stop: the state before the spike is saved, and the run ends with exit 1.
rc=0
train --set run.name=stop --set train.spike_guard.action=stop >stop.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { echo "FAIL: the stop run exited $rc, not 1"; tail -5 stop.log; exit 1; }
grep -q "step 30: the loss .*train.spike_guard.action = stop: the run ends with checkpoint step-29" \
  stop.log || { echo "FAIL: the stop run's message"; tail -5 stop.log; exit 1; }
[[ $(readlink runs/stop/checkpoints/latest) == step-29 ]] ||
  { echo "FAIL: latest is $(readlink runs/stop/checkpoints/latest), not step-29"; exit 1; }
grep -q '"stopped":true' runs/stop/metrics.jsonl || { echo "FAIL: no stop record"; exit 1; }
train --set run.name=stop --set train.spike_guard.action=skip >resume.log 2>&1 ||
  { echo "FAIL: the resumed run"; tail -5 resume.log; exit 1; }
grep -q "resumed from .*step-29 at step 29" resume.log || { echo "FAIL: not resumed"; exit 1; }
"$TRAINER" export runs/skip --out skip_export >/dev/null
"$TRAINER" export runs/stop --out stop_export >/dev/null
cmp -s skip_export/model.safetensors stop_export/model.safetensors ||
  { echo "FAIL: stopped and resumed with skip differs from the skip run"; exit 1; }
for run in skip stop; do
  grep '"step":40,' "runs/$run/metrics.jsonl" | grep -o '"loss":[^,]*' >"$run.final"
done
cmp -s skip.final stop.final || { echo "FAIL: final losses differ"; exit 1; }

# The skip limits count spikes too: one spike at a limit of one ends the run.
rc=0
"$TRAINER" train "${common[@]}" --set run.name=limit --set train.spike_guard.action=skip \
  --set train.max_consecutive_skips=1 >limit.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] && grep -q "step 30: 1 steps skipped in a row and 1 in all (the last: the loss" \
  limit.log || { echo "FAIL: the skip limit (exit $rc)"; tail -3 limit.log; exit 1; }
echo "spike guard: OK"
