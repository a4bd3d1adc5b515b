#!/usr/bin/env bash
# The newcomer's first command: installs what the trainer needs, builds it, prepares the
# default corpus (Brown, 8k BPE) and trains configs/gpt.yaml, then evaluates and samples the
# result. Extra arguments go to `trainer train` (e.g. --set train.steps=100).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/install_deps.sh
bash scripts/build.sh build -DTRAINER_CUDA=OFF -DTRAINER_TESTS=OFF -DTRAINER_TWIN_MARCH=
TRAINER=build/trainer bash scripts/prepare_data.sh
build/trainer train --config configs/gpt.yaml "$@"
build/trainer eval --checkpoint runs/gpt
build/trainer sample --checkpoint runs/gpt --prompt "The jury said" --max-new-tokens 60
