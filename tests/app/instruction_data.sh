#!/usr/bin/env bash
# Instruction data through the binary (docs/data.md, "Instruction data"): conversations whose
# questions are random and whose answers follow from them.
#   - prepare renders chat lines (ChatML) and prompt/completion lines, and records the mask;
#   - training lowers the response-only loss that eval reports, and sample answers in the
#     template, stopping at its end of turn (which this SentencePiece tokenizer spells in pieces);
#   - 2 ranks (dist.deterministic) train exactly as 1 does on the masked batches, and 2
#     pipeline stages or 2 tensor ranks within rounding;
#   - bad conversations, templates and options are refused naming what is wrong.
#   instruction_data.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_instruct.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
fail() { echo "FAIL: $*"; exit 1; }
python3 - <<'PY'
import json, random
rng = random.Random(3)
with open("chat.jsonl", "w") as chat, open("pairs.jsonl", "w") as pairs, open("text.txt", "w") as text:
    for i in range(600):
        a, b = rng.randrange(10), rng.randrange(10)
        q, ans = f"what is {a} plus {b}?", f"{a} plus {b} is {a + b}."
        chat.write(json.dumps({"messages": [{"role": "system", "content": "add the numbers."},
                                            {"role": "user", "content": q},
                                            {"role": "assistant", "content": ans}]}) + "\n")
        pairs.write(json.dumps({"prompt": q + " ", "completion": ans}) + "\n")
        text.write(f"<|im_start|>system\nadd the numbers.<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n"
                   f"<|im_start|>assistant\n{ans}<|im_end|>\n")
PY
"$TRAINER" tokenizer train --input text.txt --vocab-size 300 --model-type bpe --out tok.model \
  >/dev/null
"$TRAINER" prepare --tokenizer tok.model --input chat.jsonl --format chat --template chatml \
  --out chat --val-fraction 0.1 >/dev/null
"$TRAINER" prepare --tokenizer tok.model --input pairs.jsonl --format prompt --out pairs >/dev/null
python3 - <<'PY' || fail "manifests"
import json
chat, pairs = (json.load(open(f"{d}/manifest.json")) for d in ("chat", "pairs"))
assert chat["loss_mask"] and chat["chat_template"] == "chatml", chat
assert pairs["loss_mask"] and pairs["chat_template"] == "plain", pairs
assert chat["splits"]["val"]["documents"] > 30, chat["splits"]["val"]
PY

common=(--set data.path=chat --set data.tokenizer=tok.model --set run.dir=runs
        --set data.mode=pack --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=4
        --set model.n_embd=64 --set model.max_seq_len=128 --set data.seq_len=128
        --set data.batch_size=8 --set train.val_every=0 --set log.progress=off
        --set log.peak_gflops=100 --set schedule.warmup_steps=10 --set optimizer.lr=3e-3)
"$TRAINER" train "${common[@]}" --set run.name=trained --set train.steps=600 >/dev/null
"$TRAINER" train "${common[@]}" --set run.name=untrained --set train.steps=1 \
  --set optimizer.lr=1e-12 --set optimizer.min_lr=0 >/dev/null
response_loss() {
  local out
  out=$("$TRAINER" eval "$1" --split val)
  grep -q "^eval val: response-only loss" <<<"$out" || fail "eval of $1 does not say response-only: $out"
  python3 -c "import json,sys; j=json.loads(sys.argv[1].splitlines()[-1]); assert j['loss_counts'] == 'responses'; print(j['loss'])" "$out"
  # Bits per byte over the responses' bytes: a piece of this 300-piece tokenizer spans at
  # least 1 byte and, on these short words and digits, fewer than 8, so bits/byte lies between
  # loss / ln 2 / 8 and loss / ln 2 (0 bytes, or the whole corpus's, would fall outside).
  python3 -c "import json,sys,math; j=json.loads(sys.argv[1].splitlines()[-1]); b=j['loss']/math.log(2); assert b/8 < j['bits_per_byte'] < b, j" "$out" >&2 ||
    fail "bits per byte of $1's responses"
}
trained=$(response_loss runs/trained)
untrained=$(response_loss runs/untrained)
echo "response-only loss: trained $trained, untrained $untrained"
# Every answer token follows from its question ("what is 3 plus 4?" -> "3 plus 4 is 7."), so a
# model that learnt the task approaches 0, while the untrained one is near ln(320) = 5.77. The
# trained one reaches 0.017 here: 0.3 is a learning threshold with 17x room for another CPU's
# rounding, which no model that did not learn the answers meets.
python3 -c "import sys; t, u = map(float, sys.argv[1:]); assert t < 0.3 and u > 4.5, (t, u)" \
  "$trained" "$untrained" || fail "response-only loss trained $trained, untrained $untrained"

answer=$("$TRAINER" sample runs/trained --template chatml --system "add the numbers." \
  --prompt "what is 3 plus 4?" --temperature 0 --max-new-tokens 40)
echo "sample: $answer"
[[ "$answer" == "3 plus 4 is 7." ]] || fail "sample answered '$answer'"

# 2 ranks with dist.deterministic: the same masked batches, the same sums, the same losses. One
# thread per rank in both (the GEMMs split their sums by threads: elastic_resume.sh).
det=(--set train.steps=6 --set dist.deterministic=true --set train.global_batch=2 --set log.every=1)
OMP_NUM_THREADS=1 "$TRAINER" train "${common[@]}" "${det[@]}" --set run.name=one >/dev/null
OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
  "$TRAINER" train "${common[@]}" "${det[@]}" --set run.name=two >/dev/null
losses() { python3 -c "import json,sys; print([r['loss'] for r in map(json.loads, open(sys.argv[1])) if 'loss' in r])" "$1"; }
[[ "$(losses runs/one/metrics.jsonl)" == "$(losses runs/two/metrics.jsonl)" ]] ||
  fail "2 ranks $(losses runs/two/metrics.jsonl) against 1 rank $(losses runs/one/metrics.jsonl)"

# Pipeline and tensor parallelism read the same masked batches: each step's loss equals one
# process's within 1e-5 relative (the sums run in another order, about 1e-7 here, as argued in
# pipeline_parallel.sh and tensor_parallel.sh).
par=(--set train.steps=6 --set train.global_batch=2 --set log.every=1)
"$TRAINER" train "${common[@]}" "${par[@]}" --set run.name=ref >/dev/null
for layout in dist.pipeline_parallel dist.tensor_parallel; do
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
    "$TRAINER" train "${common[@]}" "${par[@]}" --set run.name="$layout" --set "$layout=2" \
    >/dev/null
  python3 - "$layout" <<'PY' || fail "$layout=2 against one process"
import json, sys
def losses(name):
    return [r["loss"] for r in map(json.loads, open(f"runs/{name}/metrics.jsonl")) if "loss" in r]
ref, got = losses("ref"), losses(sys.argv[1])
assert len(ref) == 6 and len(got) == 6, (ref, got)
for a, b in zip(ref, got):
    assert abs(a - b) <= 1e-5 * a, (sys.argv[1], ref, got)
PY
done

# Refusals: exit 2 for the command line, 1 for the data, each naming what is wrong.
source "$HERE/expect_exit.sh"
set +e
prep=(prepare --tokenizer tok.model --out bad)
printf '%s\n' '{"messages": [{"role": "user", "content": "hi"}]}' \
  '{"messages": [{"role": "robot", "content": "hi"}]}' > role.jsonl
printf '%s\n' '{"messages": [{"role": "user", "content": 5}]}' > content.jsonl
printf '%s\n' '{"messages": "hi"}' > notarray.jsonl
printf '%s\n' '{"prompt": "hi"}' > nocompletion.jsonl
printf '{"roles": {"user": {}, "assistant": {"footer": 3}}}' > bad_template.json
expect 2 "the chat format needs --template" "${prep[@]}" --input chat.jsonl --format chat
expect 2 "--template applies to the chat and prompt formats" "${prep[@]}" --input text.txt \
  --template chatml
expect 2 "unknown chat template 'chatlm'" "${prep[@]}" --input chat.jsonl --format chat \
  --template chatlm
expect 2 "Jinja chat templates are not read" "${prep[@]}" --input chat.jsonl --format chat \
  --template chat_template.jinja
expect 1 "bad_template.json: roles.assistant.footer is not a string" "${prep[@]}" \
  --input chat.jsonl --format chat --template bad_template.json
expect 1 "role.jsonl:2: messages\[0\].role 'robot' is not in chat template chatml" "${prep[@]}" \
  --input role.jsonl --format chat --template chatml
expect 1 "content.jsonl:1: field 'messages\[0\].content' is not a string" "${prep[@]}" \
  --input content.jsonl --format chat --template chatml
expect 1 "notarray.jsonl:1: field 'messages' is not an array of messages" "${prep[@]}" \
  --input notarray.jsonl --format chat --template chatml
expect 1 "nocompletion.jsonl:1: no field 'completion'" "${prep[@]}" --input nocompletion.jsonl \
  --format prompt
expect 2 "unknown input format 'chats'" "${prep[@]}" --input chat.jsonl --format chats
expect 2 "sample --system needs --template" sample runs/trained --system "be brief"
if [[ -d bad && -n "$(ls -A bad)" ]]; then
  echo "FAIL: a refused prepare left files in bad/: $(ls bad)"
  failures=$((failures + 1))
fi
[[ $failures -eq 0 ]] || fail "$failures refusal(s) not as expected"
echo "instruction_data: all checks passed"
