#!/usr/bin/env bash
# checkpoint.async through the binary (Note [Asynchronous checkpoints]):
#   1. at every layout (1 process, DDP 2, ZeRO-3 on 2, TP 2, PP 2) the checkpoints written in
#      the background hold the same bytes as a synchronous run's (tensors and trainer state),
#      step for step, and retention keeps the same ones;
#   2. rank 0 killed (SIGKILL) while its write runs behind the training (made 20 s slow): the
#      steps went on meanwhile, a live reader got the checkpoint before, whole, `latest` still
#      names it after the kill, and the relaunch resumes from it and ends with the
#      uninterrupted run's bits;
#   3. a stop signal while a write is in flight (made 2 s slow): at the stop's step the write is
#      committed, then the stop's own save, and the run exits 75;
#   4. the memory report's checkpoint row: the host copy, as planned;
#   5. a step that ends the run (a spike past train.max_consecutive_skips) while a write is in
#      flight: the write is committed first, so `latest` is the save just before it.
#   async_checkpoints.sh <trainer> <mpiexec>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
source "$(dirname "${BASH_SOURCE[0]}")/ranks.sh"
TRAINER=$(realpath "$1")
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_async_ckpt.XXXXXX)
trap 'pkill -9 -f "$DIR" 2>/dev/null || true; rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path="$DIR/corpus" --set data.tokenizer="$DIR/tok.model" --set run.dir="$DIR/runs"
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=64
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4
        --set train.val_every=0 --set log.every=1 --set log.progress=off
        --set log.peak_gflops=100)
run() {  # run <ranks> <name> [--set ...]
  local np=$1 name=$2
  shift 2
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" "$TRAINER" train \
    "${common[@]}" --set run.name="$name" "$@" >"$name.log" 2>&1 ||
    { echo "FAIL: run $name exited non-zero:"; tail -3 "$name.log"; exit 1; }
}
fail() {
  echo "FAIL: $*"
  exit 1
}
# same_checkpoints <a> <b>: the same checkpoint steps, each with the same tensor files and state.
same_checkpoints() {
  local a=runs/$1/checkpoints b=runs/$2/checkpoints d f n=0
  [[ "$(ls "$a")" == "$(ls "$b")" ]] || fail "$2 kept $(ls "$b" | xargs), $1 $(ls "$a" | xargs)"
  for d in "$a"/step-*; do
    for f in "$d"/*.safetensors "$d"/trainer_state.json; do
      cmp -s "$f" "$b/${d##*/}/${f##*/}" || fail "$2's ${d##*/}/${f##*/} differs from $1's"
      n=$((n + 1))
    done
  done
  ((n > 0)) || fail "$1 has no checkpoints"
}

# 1. Every layout: async equals sync. 9 steps, a save every 2, the last 3 kept.
layouts=("1 single" "2 ddp" "2 zero3 --set dist.sharding=full" "2 tp --set dist.tensor_parallel=2"
         "2 pp --set dist.pipeline_parallel=2")
for layout in "${layouts[@]}"; do
  read -r np name extra <<<"$layout"
  for mode in sync async; do
    # shellcheck disable=SC2086
    run "$np" "${name}_$mode" --set train.steps=9 --set checkpoint.every=2 \
      --set checkpoint.keep_last=3 --set checkpoint.async=$([[ $mode == async ]] && echo true || echo false) \
      $extra
  done
  grep -q "writing step-2 in the background" "${name}_async.log" ||
    fail "$name: the async run did not write in the background"
  grep -q "background" "${name}_sync.log" && fail "$name: the sync run wrote in the background"
  same_checkpoints "${name}_sync" "${name}_async"
  echo "$name: async checkpoints $(ls runs/${name}_async/checkpoints | grep step | xargs) equal sync's"
done

# 2. SIGKILL to rank 0 while its write of step 20 runs behind the training.
kill_common=(--set train.steps=60 --set checkpoint.every=10 --set checkpoint.keep_last=20)
run 2 straight "${kill_common[@]}"
# 20 s: far longer than the polling, the reader and the kill need, even on a loaded machine;
# the kill ends the job long before it.
TRAINER_TEST_SAVE_DELAY_S=20 OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
  "$TRAINER" train "${common[@]}" --set run.name=killed "${kill_common[@]}" \
  --set checkpoint.async=true >killed.log 2>&1 &
job=$!
for _ in $(seq 1 600); do  # the steps go on behind the write: step 22 is logged
  grep -q '"step":22,' runs/killed/metrics.jsonl 2>/dev/null && break
  sleep 0.1
done
grep -q '"step":22,' runs/killed/metrics.jsonl || fail "no step 22 while step 20 was written"
[[ -d runs/killed/checkpoints/step-20.tmp ]] || fail "step-20 is not being written"
# A live reader meanwhile gets the last committed checkpoint, whole.
read_back=$("$TRAINER" inspect runs/killed 2>&1) || fail "a reader during the write failed: $read_back"
[[ ${read_back%%$'\n'*} =~ checkpoints/step-10\ \(all\ [0-9]+\ files\ verified\) ]] ||
  fail "a reader during the write did not get step-10: ${read_back%%$'\n'*}"
pid=$(rank_pid "$job" 0)
[[ -n $pid ]] || fail "no rank 0 process found"
kill -9 "$pid"
status=0
wait "$job" || status=$?
[[ $status -ne 0 ]] || fail "the job exited 0 after rank 0 died in a background write"
[[ ! -d runs/killed/checkpoints/step-20 ]] || fail "step-20 was committed"
[[ "$(readlink runs/killed/checkpoints/latest)" == step-10 ]] ||
  fail "latest is $(readlink runs/killed/checkpoints/latest), want step-10"
run 2 killed "${kill_common[@]}" --set checkpoint.async=true
grep -q "resumed from .*step-10 " killed.log || fail "the relaunch did not resume from step-10"
for f in runs/straight/checkpoints/step-60/*.safetensors; do
  cmp -s "$f" "runs/killed/checkpoints/step-60/${f##*/}" ||
    fail "the relaunched run's final ${f##*/} differs from the uninterrupted run's"
done
echo "rank 0 killed at step 22 while writing step-20: exit $status, latest step-10; the relaunch ends identical"

# 3. SIGUSR1 while step 10's write is in flight (steps take milliseconds here, so the stop may
#    land during a later save's write instead, which is the same case).
TRAINER_TEST_SAVE_DELAY_S=2 OMP_NUM_THREADS=1 "$TRAINER" train "${common[@]}" --set run.name=stop \
  --set train.steps=100000 --set checkpoint.every=10 --set checkpoint.async=true >stop.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [[ -d runs/stop/checkpoints/step-10.tmp ]] && break
  sleep 0.1
done
[[ -d runs/stop/checkpoints/step-10.tmp || -d runs/stop/checkpoints/step-10 ]] ||
  fail "step 10's save never began: $(tail -2 stop.log)"
kill -USR1 "$pid"
status=0
wait "$pid" || status=$?
[[ $status -eq 75 ]] || fail "exit $status after a stop signal, want 75"
[[ -f runs/stop/checkpoints/step-10/manifest.json ]] || fail "step-10 was not committed"
latest=$(readlink runs/stop/checkpoints/latest)
[[ $latest =~ ^step-[0-9]+$ && ${latest#step-} -gt 10 ]] || fail "latest is $latest after the stop"
grep -Eq "written in the background in [0-9.]+ s; committed at step ${latest#step-}\)" stop.log ||
  fail "the stop at $latest did not commit the write in flight first"
"$TRAINER" inspect runs/stop/checkpoints/step-10 >/dev/null || fail "step-10 does not load"
"$TRAINER" inspect runs/stop >/dev/null || fail "$latest does not load"
echo "stop signal during a background write: exit 75, the write committed at the stop, then $latest"

# 4. The copy is planned and measured as such (2 ranks, ZeRO-3: rank 0's own shard), and a
#    synchronous run has none. (That it is 3 x the fp32 masters: hardening_test's
#    TheMemoryReportMatchesThePlanByCategory, at a size where the printed MiB tell.)
grep -Eq "memory \(MiB, plan/peak\): .*checkpoint ([0-9.]+)/\1," zero3_async.log ||
  fail "the checkpoint row is not its plan: $(grep -o 'checkpoint [0-9./-]*' zero3_async.log)"
grep -Eq "memory \(MiB, plan/peak\): .*checkpoint 0\.0/" zero3_async.log &&
  fail "no host copy under checkpoint.async"
grep -Eq "memory \(MiB, plan/peak\): .*checkpoint 0\.0/0\.0," zero3_sync.log ||
  fail "a synchronous run holds a host copy: $(grep -o 'checkpoint [0-9./-]*' zero3_sync.log)"
echo "memory: report $(grep -o 'checkpoint [0-9./]*' zero3_async.log) MiB (plan/peak); none without async"

# 5. spike_guard.sh's poisoned step 30 (a spike tens of standard deviations out) ends a run
#    limited to one skip, while step 29's write (made 2 s slow) is in flight.
rc=0
TRAINER_TEST_POISON=30 TRAINER_TEST_SAVE_DELAY_S=2 OMP_NUM_THREADS=1 "$TRAINER" train \
  --set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs --set run.name=spike \
  --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 \
  --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4 \
  --set train.grad_accum=2 --set train.steps=40 --set train.val_every=0 --set log.progress=off \
  --set schedule.warmup_steps=2 --set optimizer.lr=0.01 --set log.peak_gflops=100 \
  --set train.spike_guard.window=10 --set train.spike_guard.metric=loss \
  --set train.spike_guard.action=skip --set train.max_consecutive_skips=1 \
  --set checkpoint.every=29 --set checkpoint.async=true >spike.log 2>&1 || rc=$?
[[ $rc -eq 1 ]] && grep -q "step 30: 1 steps skipped in a row" spike.log ||
  fail "the spike did not end the run (exit $rc): $(tail -1 spike.log)"
[[ "$(readlink runs/spike/checkpoints/latest)" == step-29 ]] ||
  fail "latest is $(readlink runs/spike/checkpoints/latest), want step-29 (the write in flight)"
"$TRAINER" inspect runs/spike >/dev/null || fail "step-29 does not load"
echo "a spike ending the run during step 29's write: exit 1, step-29 committed first"
