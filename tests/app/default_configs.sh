#!/usr/bin/env bash
# The shipped configs at their own shapes, in seconds (the whole default job, 600 steps and
# about 10 minutes, is scripts/run_default.sh's):
#   - every file in configs/ resolves and plans (`trainer plan`: the model, the data keys, the
#     memory per rank), those whose corpus is not here (gpt2-124m, llama-1b) included;
#   - llama-small and neox-small train 20 steps on the Brown corpus (the test fixture `brown`,
#     scripts/prepare_data.sh) and learn: their validation loss falls from the uniform guess's
#     ln(8192) = 9.01 nats most of the way to the corpus's unigram entropy (about 7), below
#     7.5, where a model that does not learn (no updates, wrong gradients) stays near 9.
# The default job itself (configs/gpt.yaml) is default_job_bf16.sh's, in fp32 and bf16. Whether
# a config plans does not depend on the kernels, and whether these learn is the kernels'
# correctness, which the parity tests check on every CPU: this runs once (Note [Test labels]).
#   default_configs.sh <trainer> <source dir>
set -euo pipefail
TRAINER=$(realpath "$1")
ROOT=$(realpath "$2")
DIR=$(mktemp -d /tmp/trainer_default_configs.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$ROOT"
[[ -f corpora/brown/manifest.json ]] || { echo "FAIL: no corpora/brown (the fixture brown)"; exit 1; }
for config in configs/*.yaml; do
  "$TRAINER" plan --config "$config" >"$DIR/plan.txt" 2>&1 ||
    { echo "FAIL: trainer plan --config $config"; tail -3 "$DIR/plan.txt"; exit 1; }
done
echo "trainer plan: $(ls configs/*.yaml | wc -l) configs resolve and plan"
# A GPU layout with every parallel dimension plans, and the plan says what has not run.
"$TRAINER" plan --config configs/llama-1b.yaml --set run.device=cuda --set model.precision=bf16 \
  --world-size 8 --tensor-parallel 2 --pipeline-parallel 2 >"$DIR/plan.txt" 2>&1 ||
  { echo "FAIL: a CUDA layout of PP=2 x TP=2 x DP=2 does not plan"; tail -3 "$DIR/plan.txt"; exit 1; }
grep -q "NCCL (collectives, pipeline transfers) compile and link but have not run" "$DIR/plan.txt" ||
  { echo "FAIL: the GPU plan does not say what has not run"; head -5 "$DIR/plan.txt"; exit 1; }
source "$ROOT/tests/app/first_steps.sh"
first_steps llama llama-small
first_steps neox neox-small
validation_losses llama neox
