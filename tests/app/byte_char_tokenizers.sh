#!/usr/bin/env bash
# Byte and character tokenizers through the binary (trainer tokenizer train --model-type byte
# | char):
#   - byte: 256 byte tokens (id = the byte) and <|endoftext|>; every byte value and random
#     bytes round-trip exactly, as does UTF-8 text;
#   - char: SentencePiece's character model; UTF-8 text with runs of spaces, tabs, newlines,
#     carriage returns, case and characters beyond its pieces round-trips exactly;
#   - each prepares a corpus, trains a small model whose loss falls, samples, exports a folder
#     that carries the tokenizer and evaluates as the run does;
#   - what byte cannot take is refused by name.
#   byte_char_tokenizers.sh <trainer>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
source "$HERE/expect_exit.sh"
TRAINER=$1
DIR=$(mktemp -d /tmp/trainer_bytechar.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
"$TRAINER" tokenizer train --model-type byte --out byte.json >/dev/null
"$TRAINER" tokenizer train --model-type char --input text.txt --out char.model >/dev/null
"$TRAINER" tokenizer info --tokenizer byte.json | grep -q "^vocab_size 257$" ||
  { echo "FAIL: the byte tokenizer's vocabulary"; exit 1; }

roundtrip() {  # roundtrip <tokenizer> <file>
  "$TRAINER" tokenizer encode --tokenizer "$1" --input "$2" >ids.txt
  "$TRAINER" tokenizer decode --tokenizer "$1" --input ids.txt >back.bin
  cmp -s "$2" back.bin || { echo "FAIL: $2 does not round-trip through $1"; exit 1; }
}
python3 - <<'PY'
import random
random.seed(7)
open("every_byte.bin", "wb").write(bytes(range(256)) + bytes(random.randrange(256) for _ in range(4000)))
text = ("  Two  leading spaces,\ttabs\t\tand\r\nCRLF, CASE and case, Ünïcödé, 中文, emoji 😀🚀, "
        "a trailing space \n\n\nthree newlines ")
rare = "".join(chr(random.randrange(0x100, 0x2000)) for _ in range(200)).replace("\u2581", "")
open("utf8.txt", "w", encoding="utf-8").write(text + rare + "\n")
PY
roundtrip byte.json every_byte.bin
[[ $(head -c 3 ids.txt) == "0 1" ]] || { echo "FAIL: byte 0 is not token 0"; exit 1; }
roundtrip byte.json utf8.txt
roundtrip char.model utf8.txt
roundtrip char.model text.txt

common=(--set data.tokenizer=tok --set run.dir=runs --set model.n_layer=2 --set model.n_head=2
        --set model.n_embd=32 --set model.max_seq_len=64 --set data.seq_len=64
        --set data.batch_size=8 --set train.steps=200 --set train.val_every=200
        --set train.val_batches=2 --set log.every=1 --set log.progress=off
        --set schedule.warmup_steps=5 --set optimizer.lr=1e-2 --set log.peak_gflops=100)
for kind in byte char; do
  tok=$([[ $kind == byte ]] && echo byte.json || echo char.model)
  vocab=$("$TRAINER" tokenizer info --tokenizer "$tok" | sed -n 's/^vocab_size //p')
  "$TRAINER" prepare --tokenizer "$tok" --input text.txt --format text --out "corpus_$kind" \
    --val-fraction 0.1 >/dev/null
  "$TRAINER" train "${common[@]}" --set data.tokenizer="$tok" --set data.path="corpus_$kind" \
    --set model.vocab_size="$vocab" --set run.name="$kind" >"$kind.log" 2>&1 ||
    { echo "FAIL: training on $kind tokens"; tail -5 "$kind.log"; exit 1; }
  python3 - "$kind" <<'PY'
import json, sys
kind = sys.argv[1]
rows = [json.loads(l) for l in open(f"runs/{kind}/metrics.jsonl")]
loss = [r["loss"] for r in rows if "loss" in r]
val = [r["val_loss"] for r in rows if "val_loss" in r]
# The loss starts near ln(vocab) (5.5 for bytes). Half of that is below the 2.9 nats of
# English characters' frequencies alone, so it takes contexts learnt; the two repeated
# sentences have far less entropy than that, and 200 steps measured 0.2x the start for bytes.
if not (loss[-1] < 0.5 * loss[0] and val and val[-1] < 0.5 * loss[0]):
    sys.exit(f"FAIL: {kind}: loss {loss[0]:.3f} -> {loss[-1]:.3f}, val {val}")
PY
  out=$("$TRAINER" sample "runs/$kind" --prompt "the quick brown" --max-new-tokens 40 --seed 1)
  [[ $out == "the quick brown"* && ${#out} -gt 20 ]] ||
    { echo "FAIL: $kind: sample gave '$out'"; exit 1; }
  "$TRAINER" export "runs/$kind" --out "export_$kind" >/dev/null
  ls "export_$kind" | grep -Eq "^tokenizer\.(json|model)$" ||
    { echo "FAIL: $kind: the export has no tokenizer"; exit 1; }
  from_run=$("$TRAINER" eval "runs/$kind" | grep -o "loss [0-9.]*")
  from_export=$("$TRAINER" eval "export_$kind" --data "corpus_$kind" | grep -o "loss [0-9.]*")
  [[ -n $from_run && $from_run == "$from_export" ]] ||
    { echo "FAIL: $kind: eval of the run ($from_run) and of its export ($from_export)"; exit 1; }
done

set +e
expect 2 "--model-type byte takes no --input" tokenizer train --model-type byte --input text.txt \
  --out x.json
expect 2 "--vocab-size 300 with --model-type byte: its vocabulary is the 256 byte values" \
  tokenizer train --model-type byte --vocab-size 300 --out x.json
expect 2 "model type must be bpe, unigram, char or byte, got 'bytes'" \
  tokenizer train --model-type bytes --input text.txt --out x.model
expect 2 "needs text to learn from \(--input\)" tokenizer train --model-type char --out x.model
[[ $failures -eq 0 ]] || exit 1
echo "byte and char tokenizers: OK"
