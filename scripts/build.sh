#!/usr/bin/env bash
# Configures and builds the trainer: scripts/build.sh [build-dir] [extra cmake args...]
# Default: build/ (CPU backend; CUDA too when nvcc is found, TRAINER_CUDA=AUTO).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
shift || true
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$BUILD" -j "$(nproc)"
