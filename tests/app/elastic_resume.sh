#!/usr/bin/env bash
# Elastic resume through the binary: one run continued on 4, then 2, then 1, then 4 ranks
# (under full, optimizer, none, none sharding) with train.global_batch = 4, so each step has
# the same 4 micro-batches whatever the world size (the accumulation adapts: 1, 2, 4, 1).
#   1. dist.deterministic: the final parameters and optimizer state equal a 1-rank run's bit
#      for bit, and so does every logged loss and gradient norm;
#   2. the default reductions: every loss within 1e-5 relative of the 1-rank run's (summation
#      order differs, nothing else);
#   2b. the same across the first epoch's end, where a step takes batches of two epochs;
#   3. without train.global_batch a resume at another world size warns that the batch changes;
#      a global batch that does not share out over the ranks is refused, and so is
#      dist.deterministic on a world that is not a power of two.
# The legs end at different train.steps, so the learning rate is constant after warmup.
#   elastic_resume.sh <trainer> <mpiexec>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_elastic.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
export OMP_NUM_THREADS=1  # the same threads per rank: the GEMMs split their sums by threads
# checkpoint.keep_last = 10, over the 4 saves a run makes (each leg's end: checkpoint.every's
# 200 is never reached), keeps them all; step-12's is read below.
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=64
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=2
        --set train.global_batch=4 --set train.val_every=0 --set checkpoint.keep_last=10
        --set log.every=1 --set log.progress=off --set log.peak_gflops=100
        --set schedule.warmup_steps=2 --set schedule.decay=constant --set optimizer.lr=0.003)
run() {  # ranks, then options
  local np=$1
  shift
  if [[ $np -eq 1 ]]; then
    "$TRAINER" train "${common[@]}" "$@"
  else
    "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" "$TRAINER" train "${common[@]}" "$@"
  fi >>"$DIR/log" 2>&1 || { echo "FAIL: a run on $np rank(s) failed:"; tail -5 "$DIR/log"; exit 1; }
}
legs() {  # name, then options for every leg
  local name=$1
  shift
  run 4 --set run.name="$name" --set train.steps=4 --set dist.sharding=full "$@"
  run 2 --set run.name="$name" --set train.steps=8 --set dist.sharding=optimizer "$@"
  run 1 --set run.name="$name" --set train.steps=12 "$@"
  run 4 --set run.name="$name" --set train.steps=16 "$@"
}

run 1 --set run.name=one_det --set train.steps=16 --set dist.deterministic=true
legs elastic_det --set dist.deterministic=true
run 1 --set run.name=one --set train.steps=16
legs elastic

for f in model optimizer; do
  cmp -s runs/one_det/checkpoints/step-16/$f.safetensors runs/elastic_det/checkpoints/step-16/$f.safetensors ||
    { echo "FAIL: deterministic 4-2-1-4 ranks: the final $f differs from the 1-rank run's"; exit 1; }
done

/usr/bin/python3 - <<'PY'
import json, sys
def steps(run):
    out = {}
    for line in open(f"runs/{run}/metrics.jsonl"):
        j = json.loads(line)
        if "loss" in j: out[j["step"]] = j
    return out
errors = []
one_det, det, one, free = (steps(r) for r in ("one_det", "elastic_det", "one", "elastic"))
if sorted(det) != list(range(1, 17)) or sorted(free) != list(range(1, 17)):
    errors.append(f"logged steps {sorted(det)} / {sorted(free)}")
for s in one_det:
    for key in ("loss", "grad_norm"):
        if det[s][key] != one_det[s][key]:
            errors.append(f"deterministic step {s}: {key} {det[s][key]!r} != {one_det[s][key]!r}")
# The same GEMMs per micro-batch at every world size; only the 4 micro-batches' gradients are
# added in another order (~2^-24 of them), which AdamW (lr 3e-3) carries into the losses at
# ~1e-8 (seen 1.3e-8). A dropped micro-batch moves them by >= 1e-3.
worst = max(abs(free[s]["loss"] - one[s]["loss"]) / one[s]["loss"] for s in one)
if worst > 1e-5:
    errors.append(f"default reductions: a loss differs by {worst:.2e} relative")
identical = sum(free[s]["loss"] == one[s]["loss"] for s in one)
state = json.load(open("runs/elastic_det/checkpoints/step-12/trainer_state.json"))
if state["world_size"] != 1 or state["loader"]["cursor"] != 12 * 4:
    errors.append(f"step-12 state {state} (expected 1 rank, cursor 48)")
if errors:
    print("elastic resume: FAIL:", "; ".join(errors[:5]))
    sys.exit(1)
print(f"elastic resume 4-2-1-4 ranks: deterministic bit-identical to 1 rank (16 steps, final "
      f"loss {det[16]['loss']:.6f}); default reductions within {worst:.1e} relative "
      f"({identical}/16 losses identical)")
PY

# Across an epoch's end: the corpus's 708 windows of 32 make 354 global batches of 2 rows, so
# step 89 takes the first epoch's last 2 and the second's first 2 (Note [Global order] in
# data/plan.cpp). 4 ranks throughout, and 2 ranks resumed at step 88 on 4, must agree with 1
# rank bit for bit at step 92 (a loader that dropped the 2 on 4 ranks parted from 1 rank's
# there).
far=(--set dist.deterministic=true --set checkpoint.every=88)
run 1 --set run.name=far_one --set train.steps=92 "${far[@]}"
run 4 --set run.name=far_four --set train.steps=92 "${far[@]}"
run 2 --set run.name=far_two --set train.steps=88 "${far[@]}"
run 4 --set run.name=far_two --set train.steps=92 "${far[@]}"
for name in far_four far_two; do
  cmp -s runs/far_one/checkpoints/step-92/model.safetensors runs/$name/checkpoints/step-92/model.safetensors ||
    { echo "FAIL: across the first epoch's end, $name's model differs from the 1-rank run's"; exit 1; }
done
echo "across an epoch's end: 4 ranks, and 2 ranks resumed on 4, bit-identical to 1 rank"

# 3. A 2-rank run (2 micro-batches each) resumed on 4 ranks without train.global_batch.
run 2 --set run.name=warned --set train.steps=2 --set train.global_batch=0 --set train.grad_accum=2
run 4 --set run.name=warned --set train.steps=3 --set train.global_batch=0 --set train.grad_accum=2
grep -q "the global batch changes from 4 to 8 micro-batches" log ||
  { echo "FAIL: no warning that the global batch changes"; exit 1; }
status=0
"$MPIEXEC" --allow-run-as-root --oversubscribe -np 4 "$TRAINER" train "${common[@]}" \
  --set run.name=uneven --set train.global_batch=6 >uneven.log 2>&1 || status=$?
[[ $status -eq 2 ]] && grep -q "6 micro-batches do not share out over 4 ranks" uneven.log ||
  { echo "FAIL: global_batch 6 on 4 ranks gave exit $status:"; tail -2 uneven.log; exit 1; }
status=0
"$MPIEXEC" --allow-run-as-root --oversubscribe -np 3 "$TRAINER" train "${common[@]}" \
  --set run.name=three --set train.global_batch=3 --set dist.deterministic=true >three.log 2>&1 ||
  status=$?
[[ $status -eq 2 ]] && grep -q "dist.deterministic needs a power-of-two number of ranks" three.log ||
  { echo "FAIL: dist.deterministic on 3 ranks gave exit $status:"; tail -2 three.log; exit 1; }
echo "a resume at another world size without global_batch warns; 6 over 4 ranks and"\
  "dist.deterministic on 3 ranks are refused"
