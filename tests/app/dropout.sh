#!/usr/bin/env bash
# Dropout through the binary (Note [Dropout] in nn/dropout.h):
#   - model.dropout changes every step's loss, and its masks are drawn again exactly: under
#     full activation checkpointing and across a resume the run is the uninterrupted one bit for
#     bit (losses and exported weights);
#   - every layout draws one process's masks: 2 data-parallel ranks (each micro-batch keyed by
#     its place in the global batch), ZeRO-3, tensor and sequence parallelism, 2 pipeline
#     stages, within the rounding of their sums;
#   - validation runs without dropout: the run's val loss is trainer eval's of its checkpoint
#     and of its export, exactly;
#   - export writes the rates into config.json, and fine-tuning from that folder or the run
#     trains with them, site by site, unless the config states its own;
#   - resuming at other rates is said; rates out of range are refused by name.
#   dropout.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
source "$HERE/expect_exit.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_dropout.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4
        --set train.global_batch=2 --set train.steps=12 --set train.val_every=12
        --set train.val_batches=0 --set checkpoint.every=6 --set log.every=1
        --set log.progress=off --set log.peak_gflops=100 --set optimizer.lr=0.003)
drop=(--set model.dropout=0.1)
source "$HERE/train_and_export.sh"
train_run 1 plain
run 1 drop "${drop[@]}"
run 1 full "${drop[@]}" --set model.activation_checkpointing=full
train_run 1 resumed "${drop[@]}" --set train.steps=6
run 1 resumed "${drop[@]}" --set train.resume=auto
train_run 2 ddp "${drop[@]}"
train_run 2 zero3 "${drop[@]}" --set dist.sharding=full
train_run 2 tp "${drop[@]}" --set dist.tensor_parallel=2 --set dist.sequence_parallel=true
train_run 2 pp "${drop[@]}" --set dist.pipeline_parallel=2
grep -q "dropout in training: embeddings 0.1, attention probabilities 0.1, residual branches 0.1" \
  drop.log || { echo "FAIL: the dropout line of the run's log"; exit 1; }
for f in full resumed; do
  cmp -s exports/drop/model.safetensors "exports/$f/model.safetensors" ||
    { echo "FAIL: the $f run's weights are not the plain dropout run's"; exit 1; }
done
"$TRAINER" eval runs/drop >eval_run.txt
"$TRAINER" eval exports/drop --data corpus >eval_export.txt
python3 - <<'PY'
import json, sys
def records(run):
    return [json.loads(l) for l in open(f"runs/{run}/metrics.jsonl")]
def losses(run):
    return {r["step"]: r["loss"] for r in records(run) if "loss" in r and "lr" in r}
bad = []
plain, drop = losses("plain"), losses("drop")
if sorted(drop) != list(range(1, 13)):
    bad.append(f"the dropout run logged steps {sorted(drop)}")
# Step 1 starts from the same weights: only the masks tell the losses apart.
if any(plain[s] == drop[s] for s in drop):
    bad.append("a step's loss is the same with and without dropout")
for run in ("full", "resumed"):
    got = losses(run)
    for s in (range(1, 13) if run == "full" else range(7, 13)):
        if got[s] != drop[s]:
            bad.append(f"{run} step {s}: loss {got[s]}, the uninterrupted run's {drop[s]}")
# Other layouts sum the same terms in another order: fp32 rounding, ~1e-7 of a ~5-nat loss
# per step, compounded over 12 Adam steps; 1e-4 leaves margin, while other masks move a step's
# loss by 1e-3 or more (the plain and dropout runs differ by 2e-3 to 1e-2 at every step).
for run in ("ddp", "zero3", "tp", "pp"):
    got = losses(run)
    for s in drop:
        if abs(got[s] - drop[s]) > 1e-4:
            bad.append(f"{run} step {s}: loss {got[s]}, one process {drop[s]}")
val = [r["val_loss"] for r in records("drop") if "val_loss" in r]
for name in ("run", "export"):
    e = json.loads(open(f"eval_{name}.txt").read().splitlines()[-1])
    if not val or e["loss"] != val[-1]:
        bad.append(f"trainer eval of the {name}: {e['loss']}, the run's val loss {val}")
hf = json.load(open("exports/drop/config.json"))
if [hf.get(k) for k in ("embd_pdrop", "attn_pdrop", "resid_pdrop")] != [0.1, 0.1, 0.1]:
    bad.append(f"config.json's rates: {hf}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad[:6]))
PY
# A source's rates apply site by site unless the config states the site's key or model.dropout:
# an exported folder's (config.json) and a run's checkpoint's alike.
ft=(--set train.steps=2 --set checkpoint.every=0)
train_run 1 ft "${ft[@]}" --set train.init_from=exports/drop
train_run 1 ft_run "${ft[@]}" --set train.init_from=runs/drop
train_run 1 ft_own "${ft[@]}" --set train.init_from=exports/drop --set model.attention_dropout=0.2
train_run 1 ft_none "${ft[@]}" --set train.init_from=exports/drop --set model.dropout=0
for f in ft ft_run; do
  grep -q "dropout in training: embeddings 0.1, attention probabilities 0.1, residual branches 0.1" \
    $f.log || { echo "FAIL: $f did not take its source's rates"; exit 1; }
done
grep -q "dropout in training: embeddings 0.1, attention probabilities 0.2, residual branches 0.1" \
  ft_own.log || { echo "FAIL: a stated site's rate did not replace the folder's alone"; exit 1; }
! grep -q "dropout in training" ft_none.log ||
  { echo "FAIL: model.dropout=0 still dropped"; exit 1; }

# Resuming at other rates is allowed, and said.
train_run 1 resumed --set model.dropout=0.2 --set train.steps=14
grep -q "resuming with dropout rates (embeddings, attention, residual, LoRA adapters) 0.2, 0.2, 0.2, 0 where the checkpoint.s run had 0.1, 0.1, 0.1, 0:" \
  resumed.log || { echo "FAIL: a resume at other rates was not said"; exit 1; }

base=(train "${common[@]}" --set run.name=bad)
set +e
expect 2 "model.attention_dropout = -0.5: a probability in \[0, 1\), or -1" \
  "${base[@]}" --set model.attention_dropout=-0.5
expect 2 "model.dropout" "${base[@]}" --set model.dropout=1
expect 2 "model.residual_dropout" "${base[@]}" --set model.residual_dropout=1.5
sed 's/"attn_pdrop": 0.1/"attn_pdrop": 1.5/' exports/drop/config.json >bad_config.json
mkdir -p bad_folder && cp exports/drop/* bad_folder/ && mv bad_config.json bad_folder/config.json
expect 2 "config.json: field \"attn_pdrop\" = 1.5 is not a probability in \[0, 1\)" \
  eval bad_folder --data corpus
[[ $failures -eq 0 ]] || exit 1
echo "dropout: OK"
