#!/usr/bin/env bash
# Data mixtures through the binary (data.sources, data.sources_schedule; Note [Mixtures] in
# data/mixture.cpp):
#   - three corpora at weights 0.5/0.3/0.2, switched to 0.2/0.2/0.6 for the last phase: each
#     step's tokens per source are exactly what the rule gives (an independent Python
#     rendering of it), and within one batch of each source's due share at every step;
#   - stopped at step 10 on 2 ranks and resumed on 4 (train.global_batch kept, under
#     dist.deterministic; the switch comes after the resume), the run is bit for bit the
#     uninterrupted one on 2 ranks;
#   - a bounded source leaves the mixture after its epochs, and a mixture of bounded sources
#     ends the data;
#   - each source is validated under its name; a source of another tokenizer and malformed
#     entries are refused by name.
#   mixtures.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
source "$HERE/expect_exit.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_mixtures.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
new_corpus "$TRAINER"
for i in $(seq 1 30); do
  echo "green apples number $((i % 11)) fall from the tall tree into the basket."
  echo
done >third.txt
"$TRAINER" prepare --tokenizer tok.model --input third.txt --out third --val-fraction 0.2 >/dev/null
common=(--set data.tokenizer=tok.model --set run.dir=runs --set model.vocab_size=320
        --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32 --set model.max_seq_len=32
        --set data.seq_len=32 --set data.batch_size=2 --set train.global_batch=4
        --set train.steps=20 --set train.val_every=20 --set train.val_batches=2 --set log.every=1
        --set log.progress=off --set log.peak_gflops=100 --set checkpoint.every=10
        --set dist.deterministic=true
        --set "data.sources=[corpus:0.5, new:0.3, third:0.2]"
        --set "data.sources_schedule=[\"14:0.2,0.2,0.6\"]")
source "$HERE/train_and_export.sh"
train_run 2 whole
train_run 2 resumed --set train.steps=10
train_run 4 resumed
grep -q "resumed from .*step-10 at step 10" resumed.log || { echo "FAIL: not resumed"; exit 1; }
"$TRAINER" export runs/whole --out whole_export >/dev/null
"$TRAINER" export runs/resumed --out resumed_export >/dev/null
cmp -s whole_export/model.safetensors resumed_export/model.safetensors ||
  { echo "FAIL: stopped on 2 ranks and resumed on 4 differs from the uninterrupted run"; exit 1; }
python3 - <<'PY'
import json, sys
rows = {}
for run in ("whole", "resumed"):
    rows[run] = {r["step"]: r for r in map(json.loads, open(f"runs/{run}/metrics.jsonl")) if "loss" in r}
names, tokens_per_batch, per_step = ["corpus", "new", "third"], 2 * 32, 4
# The rule of Note [Mixtures], written out again: batch n from the source furthest behind its
# due share after it, the first on a tie; the weights of the step the batch belongs to.
due, count, bad = [0.0] * 3, [0] * 3, []
for n in range(20 * per_step):
    w = [0.5, 0.3, 0.2] if n // per_step < 14 else [0.2, 0.2, 0.6]
    total = 0.0
    for x in w:
        total += x
    w = [x / total for x in w]
    nxt = [d + x for d, x in zip(due, w)]
    s = max(range(3), key=lambda i: (nxt[i] - count[i], -i))
    due, count[s] = nxt, count[s] + 1
    if (n + 1) % per_step == 0:
        step = (n + 1) // per_step
        for run in ("whole", "resumed"):
            got = [rows[run][step][f"tokens_from_{k}"] // tokens_per_batch for k in names]
            if got != count:
                bad.append(f"{run} step {step}: batches per source {got}, the rule gives {count}")
        if any(abs(c - d) >= 1 for c, d in zip(count, due)):
            bad.append(f"step {step}: {count} is not within one batch of {due}")
        if rows["whole"][step]["loss"] != rows["resumed"][step]["loss"]:
            bad.append(f"step {step}: loss {rows['resumed'][step]['loss']} after the resume, "
                       f"{rows['whole'][step]['loss']} uninterrupted")
# Due: 56 batches at 0.5/0.3/0.2 (28, 16.8, 11.2), then 24 at 0.2/0.2/0.6 (4.8, 4.8, 14.4).
if count != [33, 21, 26]:
    bad.append(f"final counts {count}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad[:4]))
PY
for name in corpus new third; do
  grep -q "step 20: val loss $name " whole.log || { echo "FAIL: no val loss for $name"; exit 1; }
done

# Bounded: third gives its one epoch (27 documents of 16 tokens: 13 windows of 33, 6 batches
# of 2 with drop_last), then corpus and new share the rest; bounding both ends the data.
train_run 1 bounded --set "data.sources=[corpus:1, third:1:1]" --set data.sources_schedule=[] \
  --set train.steps=20 --set train.global_batch=1
python3 - <<'PY'
import json, sys
r = [json.loads(l) for l in open("runs/bounded/metrics.jsonl") if '"loss"' in l][-1]
third = r["tokens_from_third"] // 64
if not (0 < third < 20 and r["tokens_from_corpus"] // 64 == 20 - third):
    sys.exit(f"FAIL: bounded: {r['tokens_from_corpus'] // 64} and {third} batches")
PY
rc=0
OMP_NUM_THREADS=1 "$TRAINER" train "${common[@]}" --set run.name=ends --set train.global_batch=1 \
  --set "data.sources=[new:1:1, third:1:1]" --set data.sources_schedule=[] \
  --set train.steps=100000 >ends.log 2>&1 || rc=$?
[[ $rc -eq 0 ]] && grep -q "every source of data.sources has given its epochs" ends.log ||
  { echo "FAIL: bounded sources did not end the data (exit $rc)"; tail -3 ends.log; exit 1; }

"$TRAINER" tokenizer train --input new.txt --vocab-size 300 --out other.model >/dev/null
"$TRAINER" prepare --tokenizer other.model --input new.txt --out foreign --val-fraction 0.2 >/dev/null
base=(train "${common[@]}" --set run.name=bad)
set +e
expect 2 "is not the tokenizer .*foreign was prepared with" \
  "${base[@]}" --set "data.sources=[corpus:1, foreign:1]" --set data.sources_schedule=[]
expect 2 "data.sources: '[^']*corpus' is not \[NAME=\]DIR:WEIGHT\[:EPOCHS\]" \
  "${base[@]}" --set "data.sources=[corpus, new:1]"
expect 2 "data.sources_schedule: '14:0.2,0.8' gives 2 weights for 3 sources" \
  "${base[@]}" --set "data.sources_schedule=[\"14:0.2,0.8\"]"
expect 2 "data.sources names one corpus" "${base[@]}" --set "data.sources=[corpus:1]" \
  --set data.sources_schedule=[]
expect 2 "data.epochs with data.sources" "${base[@]}" --set data.epochs=1
expect 2 "data.sources_schedule: '1e3:0.2,0.2,0.6' is not STEP:W1,W2" \
  "${base[@]}" --set "data.sources_schedule=[\"1e3:0.2,0.2,0.6\"]"
# The weighted source spent while an unbounded one weighs 0: an error, not the end of the data.
expect 2 "data.sources: at global batch [0-9]+ every source with weight in this phase has given" \
  "${base[@]}" --set "data.sources=[third:1:1, new:0]" --set data.sources_schedule=[] \
  --set train.global_batch=1 --set train.steps=1000
[[ $failures -eq 0 ]] || exit 1
echo "mixtures: OK"
