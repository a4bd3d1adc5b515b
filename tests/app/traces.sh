#!/usr/bin/env bash
# log.trace_steps through the binary (Note [Traces]): a DDP run (with a checkpoint written in
# the background inside the traced steps), a ZeRO-3 run and a PP=2 run each write one trace
# per rank; scripts/merge_traces.py makes one file of them, tests/app/check_trace.py checks it
# (schema, step times against metrics.jsonl, the ranks' clocks), and scripts/trace_summary.py
# reads it. Malformed or out-of-range trace_steps are refused by name.
#   traces.sh <trainer> <mpiexec>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
TRAINER=$(realpath "$1")
MPIEXEC=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPTS=$(cd "$HERE/../../scripts" && pwd)
DIR=$(mktemp -d /tmp/trainer_traces.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
# Steps of tens of milliseconds (check_trace.py's coverage bound assumes them).
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=128
        --set model.max_seq_len=64 --set data.seq_len=64 --set data.batch_size=8
        --set train.val_every=0 --set log.every=1 --set log.progress=off --set log.peak_gflops=100
        --set train.steps=6 --set log.trace_steps=3-5)
traced() {  # traced <name> <span names every rank must have> -- <trainer args>
  local name=$1 required=()
  shift
  while [[ $1 != -- ]]; do required+=("$1"); shift; done
  shift
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 "$TRAINER" train \
    "${common[@]}" --set run.name="$name" "$@" >"$name.log" 2>&1 ||
    { echo "FAIL: $name exited non-zero:"; tail -3 "$name.log"; exit 1; }
  python3 "$SCRIPTS/merge_traces.py" "runs/$name" >/dev/null
  python3 "$HERE/check_trace.py" "runs/$name/traces/trace.json" "runs/$name/metrics.jsonl" 2 3 5 \
    "${required[@]}"
  python3 "$SCRIPTS/trace_summary.py" "runs/$name" >"$name.summary"
  [[ $(grep -cE '^ +[01] +[345] ' "$name.summary") -eq 6 ]] ||
    { echo "FAIL: $name's summary has not 2 ranks x 3 steps:"; cat "$name.summary"; exit 1; }
}
traced ddp "wait for gradient sums" all_reduce forward backward update "make batch" -- \
  --set checkpoint.every=4 --set checkpoint.async=true
grep -q '"name":"checkpoint write"' runs/ddp/traces/rank-0.json ||
  { echo "FAIL: the background write of step 4 is not in rank 0's trace"; exit 1; }
grep -q '"name":"checkpoint writer"' runs/ddp/traces/rank-0.json ||
  { echo "FAIL: no checkpoint writer thread in rank 0's trace"; exit 1; }
traced zero3 "wait for collective" all_gather reduce_scatter forward backward -- \
  --set dist.sharding=full
traced pp "wait for transfer" passes agree -- --set dist.pipeline_parallel=2 --set train.grad_accum=4
grep -q '"ph":"b","name":"send","cat":"transfer"' runs/pp/traces/rank-0.json ||
  { echo "FAIL: no transfer spans in stage 0's trace"; exit 1; }
cat pp.summary

for bad in 0 abc 5-3 4-9; do
  rc=0
  "$TRAINER" train "${common[@]}" --set run.name=bad --set log.trace_steps="$bad" >bad.log 2>&1 || rc=$?
  [[ $rc -eq 2 ]] && grep -q "log.trace_steps" bad.log ||
    { echo "FAIL: log.trace_steps=$bad: exit $rc, $(tail -1 bad.log)"; exit 1; }
done
echo "traces: DDP, ZeRO-3 and PP=2 traces pass the schema; 4 bad trace_steps refused"
