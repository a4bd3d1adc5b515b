#!/usr/bin/env bash
# Named validation sets through the binary (train.val_sets, prepare --val-input):
#   - prepare --val-input holds its documents out whole as the split heldout, beside the
#     hashed val split;
#   - three sets (the corpus's val, its heldout, another corpus) are each evaluated over the
#     whole split and logged under their names; trainer eval of each split gives the run's
#     final figure bit for bit;
#   - 2 ranks under ZeRO-3 (15 heldout batches: one rank has a batch fewer and idles through
#     the other's last one) give one process's figures under dist.deterministic (1e-12: the
#     same batches' losses, summed over ranks in another order), and 2 pipeline stages within
#     1e-6 (their weights after 10 steps differ from one process's by rounding: 5e-10 measured);
#   - a set prepared with another tokenizer, a malformed entry and a name given twice are
#     refused by name.
#   val_sets.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
source "$HERE/expect_exit.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_valsets.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
new_corpus "$TRAINER"
for i in $(seq 1 40); do
  echo "held out sentence number $i about a purple cow on the moon."
  echo
done >heldout.txt
"$TRAINER" prepare --tokenizer tok.model --input text.txt --val-input heldout.txt --out held \
  --val-fraction 0.1 >prepare.log
grep -q "heldout (--val-input) 40 docs" prepare.log || { echo "FAIL: $(cat prepare.log)"; exit 1; }
common=(--set data.path=held --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4
        --set train.global_batch=2 --set train.steps=10 --set train.val_every=5
        --set train.val_batches=0 --set log.progress=off --set log.peak_gflops=100
        --set dist.deterministic=true --set "train.val_sets=[held, held:heldout, other=new]")
source "$HERE/train_and_export.sh"
train_run 1 one
train_run 2 zero3 --set dist.sharding=full
train_run 2 pp2 --set dist.pipeline_parallel=2 --set dist.deterministic=false
for split in val heldout; do
  "$TRAINER" eval runs/one --split $split >"eval_$split.txt"
done
"$TRAINER" eval runs/one --data new >eval_other.txt
python3 - <<'PY'
import json, sys
def vals(run):
    return [json.loads(l) for l in open(f"runs/{run}/metrics.jsonl") if "val_loss" in l]
bad = []
one = vals("one")
keys = ["val_loss_held", "val_loss_held_heldout", "val_loss_other"]
if [r["step"] for r in one] != [5, 10] or any(k not in r for r in one for k in keys):
    bad.append(f"records {one}")
for r in one:
    if r["val_loss"] != r["val_loss_held"]:
        bad.append("val_loss is not the first set's")
final = one[-1]
for split, key in (("val", "val_loss_held"), ("heldout", "val_loss_held_heldout"),
                   ("other", "val_loss_other")):
    e = json.loads(open(f"eval_{split}.txt").read().splitlines()[-1])
    if e["loss"] != final[key]:
        bad.append(f"eval of {split}: {e['loss']}, the run's {key}: {final[key]}")
for run, tolerance in (("zero3", 1e-12), ("pp2", 1e-6)):
    for a, b in zip(one, vals(run)):
        for k in keys:
            if abs(a[k] - b[k]) > tolerance * a[k]:
                bad.append(f"{run} step {a['step']}: {k} {b[k]}, one process {a[k]}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad[:4]))
PY
for name in "held " "held_heldout" "other"; do
  grep -q "step 10: val loss $name" one.log || { echo "FAIL: no log line for $name"; exit 1; }
done

# Refusals: a set of another tokenizer, a malformed entry, a name twice.
"$TRAINER" tokenizer train --input new.txt --vocab-size 300 --out other.model >/dev/null
"$TRAINER" prepare --tokenizer other.model --input new.txt --out foreign --val-fraction 0.2 >/dev/null
base=(train "${common[@]}" --set run.name=bad)
set +e
expect 2 "train.val_sets' foreign .* was prepared with another tokenizer" \
  "${base[@]}" --set "train.val_sets=[foreign]"
expect 2 "train.val_sets: 'x=' is not \[NAME=\]DIR\[:SPLIT\]" "${base[@]}" --set "train.val_sets=[x=]"
expect 2 "corpus vocab size 320 exceeds the model's 100 \(model.vocab_size\)" \
  "${base[@]}" --set model.vocab_size=100
expect 2 "train.val_sets: '=new' has '=' but no NAME before it" "${base[@]}" --set "train.val_sets=[=new]"
expect 2 "train.val_sets names 'new' twice" "${base[@]}" --set "train.val_sets=[new, new]"
expect 2 "train.val_sets' held_nosuch cannot be read" "${base[@]}" --set "train.val_sets=[held:nosuch]"
[[ $failures -eq 0 ]] || exit 1
echo "validation sets: OK"
