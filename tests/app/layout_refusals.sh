#!/usr/bin/env bash
# Bad parallel layouts through the binary under mpirun: each is refused at start-up, non-zero,
# naming the constraint, before anything is written to the run's directory. Tensor
# parallelism (degrees that divide neither the ranks, the heads, the key/value heads, the
# vocabulary nor a SwiGLU width; sequence parallelism without tensor parallelism, with padded
# batches, or with rows that do not cut) and pipeline parallelism (more stages than layers,
# listed stages that miss layers or hold none, virtual stages that do not divide the layers or
# are missing or asked of a one-chunk schedule, a grid the world does not fill,
# dist.deterministic, an interleaved schedule or listed stages without pipeline parallelism),
# and task evaluation while training under either
# (no rank holds the whole model's logits). Whether a layout is accepted
# does not depend on the CPU's kernels: this runs once (Note [Test labels]).
#   layout_refusals.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
TRAINER=$(realpath "$1")
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_layout_refusals.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=8 --set model.n_head=4 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=2
        --set data.mode=pack --set train.global_batch=8 --set train.steps=2
        --set log.progress=off --set log.peak_gflops=100)
llama=(--set model.arch=llama --set model.n_kv_head=2 --set model.ffn_multiple_of=16
       --set model.tie_embeddings=false)
sp=(--set dist.tensor_parallel=2 --set dist.sequence_parallel=true)
refused() {  # refused <ranks> <expected text> [--set ...]
  local np=$1 want=$2 out rc=0
  shift 2
  out=$(OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" \
    "$TRAINER" train "${common[@]}" --set run.name=bad "$@" 2>&1) || rc=$?
  [[ $rc -ne 0 ]] || { echo "FAIL: accepted $*"; exit 1; }
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: '$want' not in: $out"; exit 1; }
  [[ ! -e runs/bad ]] || { echo "FAIL: $* wrote runs/bad"; exit 1; }
}

# Tensor parallelism.
refused 3 "does not divide the 3 ranks" --set dist.tensor_parallel=2
refused 3 "does not divide model.n_head = 4" --set dist.tensor_parallel=3
refused 2 "neither divides model.n_kv_head = 3" "${llama[@]}" --set model.n_head=6 \
  --set model.n_embd=48 --set model.n_kv_head=3 --set dist.tensor_parallel=2
refused 2 "does not divide model.vocab_size = 321" --set model.vocab_size=321 \
  --set dist.tensor_parallel=2
refused 2 "needs dist.tensor_parallel > 1" --set dist.sequence_parallel=true
refused 2 "data.mode = bucket" "${sp[@]}" --set data.mode=bucket
refused 4 "does not cut into dist.tensor_parallel = 4" --set dist.tensor_parallel=4 \
  --set dist.sequence_parallel=true --set data.batch_size=1 --set data.seq_len=30
refused 4 "mlp.gate_proj.weight" "${llama[@]}" --set model.ffn_hidden=42 \
  --set model.ffn_multiple_of=2 --set dist.tensor_parallel=4 --set model.n_kv_head=4

# Pipeline parallelism.
refused 1 "makes 16 stages of a model of 8 layers" --set dist.pipeline_parallel=16
refused 1 "dist.pipeline_layers lists 2 stage(s) of 7 layers in all, but the model has 8" \
  --set dist.pipeline_parallel=2 --set dist.pipeline_layers=[3,4]
refused 1 "list one positive count per stage" --set dist.pipeline_parallel=2 \
  --set dist.pipeline_layers=[0,8]
refused 1 "which do not divide the 8 layers" --set dist.pipeline_parallel=2 \
  --set dist.pipeline_schedule=interleaved --set dist.pipeline_virtual_stages=3
refused 1 "the interleaved schedule runs 2 or more virtual stages" --set dist.pipeline_parallel=2 \
  --set dist.pipeline_schedule=interleaved
refused 2 "does not divide the 2 ranks" --set dist.pipeline_parallel=2 --set dist.tensor_parallel=2
refused 1 "dist.deterministic is not implemented with dist.pipeline_parallel > 1" \
  --set dist.pipeline_parallel=2 --set dist.deterministic=true
refused 1 "dist.pipeline_schedule = interleaved needs dist.pipeline_parallel > 1" \
  --set dist.pipeline_schedule=interleaved --set dist.pipeline_virtual_stages=2
refused 1 "dist.pipeline_layers needs dist.pipeline_parallel > 1" --set dist.pipeline_layers=[4,4]
refused 1 "dist.pipeline_virtual_stages = 2 with dist.pipeline_schedule = 1f1b" \
  --set dist.pipeline_parallel=2 --set dist.pipeline_virtual_stages=2

# Features that ask for the whole model's logits, which no stage or tensor rank holds alone.
printf '{"context": "the quick", "continuation": " brown"}\n' >task.jsonl
refused 2 "train.eval_tasks runs with dist.pipeline_parallel = 1 only" \
  --set dist.pipeline_parallel=2 --set 'train.eval_tasks=[task.jsonl]'
refused 2 "train.eval_tasks runs with dist.tensor_parallel = 1 only" \
  --set dist.tensor_parallel=2 --set 'train.eval_tasks=[task.jsonl]'
echo "layout refusals: 20 bad layouts refused, each naming its constraint, nothing written"
