#!/usr/bin/env bash
# Data-layer measurements on the default corpus (scripts/prepare_data.sh): packing efficiency,
# bucket padding against naive padding to the global maximum, per-step rank imbalance at world
# sizes 2 and 4, and loader throughput (loss tokens/s) per mode.
#   DATA_STATS=build/data/data_stats scripts/bench/data.sh [data_stats options...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DATA_STATS="${DATA_STATS:-$ROOT/build/data/data_stats}"
DATA="${DATA:-$ROOT/corpora/brown}"
[[ -x "$DATA_STATS" ]] || { echo "bench/data: no data_stats at $DATA_STATS (set \$DATA_STATS)" >&2; exit 1; }
[[ -f "$DATA/manifest.json" ]] || { echo "bench/data: no corpus in $DATA (run scripts/prepare_data.sh)" >&2; exit 1; }
exec "$DATA_STATS" --data "$DATA" --batch-size 8 --seq-len 1024 --max-tokens 8192 "$@"
