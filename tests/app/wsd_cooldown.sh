#!/usr/bin/env bash
# Warmup-stable-decay and cooldown branches through the binary (Note [WSD] in
# nn/lr_schedule.cpp):
#   - a constant-rate run, a WSD run (1-sqrt over its last 10 of 30 steps) and a cooldown
#     branched off the constant run's step-20 checkpoint into a run of its own: every step's
#     rate is its closed form;
#   - the branch is the WSD run bit for bit (losses and weights): it kept the optimizer state
#     and the data position;
#   - the branch also starts on 2 ranks from the 1-rank checkpoint, with train.global_batch
#     kept, at the same rates;
#   - decay_steps that cannot fit, or with nothing to decay, are refused by name.
#   wsd_cooldown.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
source "$HERE/expect_exit.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_wsd.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=4
        --set train.global_batch=2 --set train.val_every=0 --set checkpoint.every=10
        --set log.every=1 --set log.progress=off --set schedule.warmup_steps=4
        --set optimizer.lr=0.01 --set optimizer.min_lr=0.001 --set log.peak_gflops=100)
cooldown=(--set schedule.decay=1-sqrt --set schedule.decay_steps=10 --set train.steps=30)
source "$HERE/train_and_export.sh"
train_run 1 constant --set schedule.decay=constant --set train.steps=40
train_run 1 wsd "${cooldown[@]}"
train_run 1 branch "${cooldown[@]}" --set train.resume=runs/constant/checkpoints/step-20
train_run 2 branch2 "${cooldown[@]}" --set train.resume=runs/constant/checkpoints/step-20
grep -q "learning rate: warmup to 0.01 over steps 1-4, 0.01 over steps 5-20, 1-sqrt decay to 0.001 over steps 21-30" \
  wsd.log || { echo "FAIL: the WSD run's schedule line"; grep "learning rate" wsd.log; exit 1; }
python3 - <<'PY'
import json, math, struct, sys
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
hi, lo, warmup = f32(0.01), f32(0.001), 4
def rate(step, total, decay_steps):  # step is 1-based, as the metrics count it
    s = step - 1
    if s < warmup:
        return hi * (s + 1) / warmup
    start = total - decay_steps if decay_steps else total
    if s < start:
        return hi
    return lo + (hi - lo) * (1 - math.sqrt((s - start) / (total - start)))
def rates(run):
    out = {}
    for line in open(f"runs/{run}/metrics.jsonl"):
        j = json.loads(line)
        if "lr" in j:
            out[j["step"]] = j
    return out
bad = []
for run, total, decay, first in (("constant", 40, 0, 1), ("wsd", 30, 10, 1),
                                 ("branch", 30, 10, 21), ("branch2", 30, 10, 21)):
    got = rates(run)
    if sorted(got) != list(range(first, total + 1)):
        bad.append(f"{run} logged steps {sorted(got)[:3]}...")
    for step, j in got.items():
        want = f32(rate(step, total, decay))
        # 1e-6 relative: each side computes in double and rounds to float once (an ulp is
        # 6e-8 relative); the trainer's cosine and sqrt may differ from Python's in the last
        # bit of the double.
        if abs(j["lr"] - want) > 1e-6 * want:
            bad.append(f"{run} step {step}: lr {j['lr']} where the closed form gives {want}")
wsd, branch, branch2 = rates("wsd"), rates("branch"), rates("branch2")
for step in range(21, 31):
    if branch[step]["loss"] != wsd[step]["loss"]:
        bad.append(f"step {step}: the branch's loss {branch[step]['loss']} is not the WSD run's "
                   f"{wsd[step]['loss']}")
    if abs(branch2[step]["loss"] - wsd[step]["loss"]) > 1e-4:  # 2 ranks sum in another order
        bad.append(f"step {step}: the 2-rank branch's loss {branch2[step]['loss']}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad[:5]))
PY
"$TRAINER" export runs/wsd --out wsd_export >/dev/null
"$TRAINER" export runs/branch --out branch_export >/dev/null
cmp -s wsd_export/model.safetensors branch_export/model.safetensors ||
  { echo "FAIL: the cooldown branch's weights are not the WSD run's"; exit 1; }

base=(train "${common[@]}" --set run.name=bad)
set +e
expect 2 "schedule.warmup_steps = 4 and schedule.decay_steps = 40 do not fit in train.steps = 30" \
  "${base[@]}" "${cooldown[@]}" --set schedule.decay_steps=40
expect 2 "schedule.decay_steps = 10 with schedule.decay = constant" \
  "${base[@]}" "${cooldown[@]}" --set schedule.decay=constant
expect 2 "schedule.decay.*one of cosine, linear, 1-sqrt, constant" \
  "${base[@]}" --set schedule.decay=wsd
[[ $failures -eq 0 ]] || exit 1
echo "wsd and cooldown: OK"
