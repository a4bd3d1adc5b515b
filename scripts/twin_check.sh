#!/usr/bin/env bash
# Checks the claim the test build's twins rest on (Note [CPU matrix] in scripts/test.sh): that a
# program linked with the CPU kernels compiled for another CPU (build/trainer_twin) computes the
# very bits of a whole build for that CPU. Builds the whole trainer for TRAINER_AVX2_MARCH
# (znver3) in build-twin-check/, then trains the same runs through both with oneDNN held to
# AVX2 (the default job in fp32 and bf16, llama-small in bf16, neox-small, 30 steps each; the
# default job at 2 tensor-parallel ranks, 10 steps) and compares every tensor file of their
# final checkpoints byte for byte. Then the native trainer (its kernels compiled for this CPU)
# against the same build: where this CPU has AVX-512 its bits differ, which shows that the
# twin is needed and that the comparison can fail. About 10 minutes on 2 cores.
#   scripts/twin_check.sh    (after scripts/test.sh has built build/ with its twins)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ -x build/trainer_twin ]] ||
  { echo "twin_check: no build/trainer_twin (scripts/test.sh builds it on an AVX-512 machine)"; exit 1; }
bash scripts/build.sh build-twin-check -DTRAINER_CUDA=OFF -DTRAINER_TESTS=OFF \
  -DTRAINER_MARCH="${TRAINER_AVX2_MARCH:-znver3}" -DTRAINER_TWIN_MARCH=
[[ -f corpora/brown/manifest.json ]] || TRAINER=build/trainer bash scripts/prepare_data.sh
export ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=2
DIR=$(mktemp -d /tmp/trainer_twin_check.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

runs() {  # BINARY TAG: the runs, under $DIR/TAG
  local bin=$1 tag=$2 name config
  local common=(--set train.val_every=0 --set log.progress=off --set log.peak_gflops=100
                --set run.dir="$DIR/$tag")
  for spec in fp32:gpt:fp32 bf16:gpt:bf16 llama:llama-small:bf16 neox:neox-small:fp32; do
    IFS=: read -r name config precision <<<"$spec"
    "$bin" train "configs/$config.yaml" "${common[@]}" --set train.steps=30 \
      --set checkpoint.every=30 --set run.name="$name" --set model.precision="$precision" \
      >/dev/null 2>&1 || { echo "twin_check: $tag $name failed"; exit 1; }
  done
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" train configs/gpt.yaml \
    "${common[@]}" --set train.steps=10 --set checkpoint.every=10 --set run.name=tp2 \
    --set dist.tensor_parallel=2 >/dev/null 2>&1 || { echo "twin_check: $tag tp2 failed"; exit 1; }
}
compare() {  # TAG TAG: how many of the tensor files differ
  local f differ=0
  for f in $(cd "$DIR/$1" && find . -name '*.safetensors' | sort); do
    cmp -s "$DIR/$1/$f" "$DIR/$2/$f" || differ=$((differ + 1))
  done
  echo "$differ"
}

runs build-twin-check/trainer whole
runs build/trainer_twin twin
runs build/trainer native
files=$(cd "$DIR/whole" && find . -name '*.safetensors' | wc -l)
twin=$(compare whole twin)
native=$(compare whole native)
echo "twin_check: of $files tensor files, the twin's differ from the whole build's in $twin," \
  "the native kernels' in $native"
[[ $files -eq 10 && $twin -eq 0 ]] || { echo "twin_check: FAILED"; exit 1; }
echo "twin_check: the twin computes the whole build's bits"
