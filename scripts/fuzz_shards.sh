#!/usr/bin/env bash
# Fuzzes the shard reader (header parsing and payload verification) with libFuzzer for a
# bounded time. Builds with clang in its own build directory (build-fuzz/).
#   scripts/fuzz_shards.sh [seconds=60]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_LIMIT="${1:-60}"
BUILD="$ROOT/build-fuzz"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DTRAINER_CUDA=OFF -DTRAINER_FUZZ=ON -DTRAINER_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang >/dev/null
nice -n 10 ninja -C "$BUILD" -j1 shard_fuzz
CORPUS="$BUILD/shard_fuzz_corpus"
mkdir -p "$CORPUS"
# Seed with real shards when a prepared corpus exists (small ones only).
find "$ROOT/corpora/brown" -name 'val-*.bin' -size -200k -exec cp {} "$CORPUS/" \; 2>/dev/null || true
"$BUILD/data/shard_fuzz" -max_total_time="$SECONDS_LIMIT" -max_len=65536 -rss_limit_mb=2048 "$CORPUS"
