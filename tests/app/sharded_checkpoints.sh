#!/usr/bin/env bash
# Sharded checkpoints end to end through the binary (Note [Sharded checkpoints]):
#   - 4 ranks under dist.sharding=full write one shard per rank whose ranges tile the model;
#   - that checkpoint resumes on 2 ranks under `optimizer` with the same losses, step for step,
#     as on 2 ranks without sharding (DDP) from the same checkpoint, and on 1 rank; the data
#     order continues where it stopped;
#   - eval and export read a sharded checkpoint directly, and the export holds exactly the
#     masters the shards hold;
#   - each shard says what it is in its header (Note [Self-describing files]): two shard names
#     swapped in the manifest, or a shard copied from another step, are refused by name;
#   - a save slower than dist.timeout_s completes (ranks wait under checkpoint.timeout_s), and
#     a save slower than checkpoint.timeout_s fails naming the late rank.
#   sharded_checkpoints.sh <trainer> <mpiexec>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_sharded_ckpt.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=3 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=2
        --set train.steps=6 --set train.val_every=0 --set checkpoint.every=3 --set log.every=1
        --set log.progress=off --set schedule.warmup_steps=2 --set optimizer.lr=1e-3
        --set log.peak_gflops=100)
run() {
  local np=$1
  shift
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" \
    "$TRAINER" train "${common[@]}" "$@"
}
run 4 --set run.name=a --set dist.sharding=full >/dev/null
run 2 --set run.name=b_optimizer --set dist.sharding=optimizer \
  --set train.resume=runs/a/checkpoints/step-3 >/dev/null
run 2 --set run.name=b_ddp --set train.resume=runs/a/checkpoints/step-3 >/dev/null
run 1 --set run.name=c --set dist.sharding=gradients \
  --set train.resume=runs/a/checkpoints/step-3 >/dev/null
"$TRAINER" eval runs/a --max-batches 2 > eval.txt
"$TRAINER" export runs/a --out exported >/dev/null
"$TRAINER" inspect runs/a > inspect.txt

/usr/bin/python3 - <<'PY'
import json, struct, sys
from array import array

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = array("f", body[b:e])
    return out

errors = []
ckpt = "runs/a/checkpoints/step-6"
manifest = json.load(open(f"{ckpt}/manifest.json"))
shards = manifest.get("shards", [])
if len(shards) != 4:
    errors.append(f"expected 4 shards, manifest has {len(shards)}")
ranges = sorted((r[0], r[1]) for s in shards for r in s["ranges"])
flat = {}
for s in shards:
    t = tensors(f"{ckpt}/{s['file']}")
    for b, e, at in s["ranges"]:
        for k in range(b, e):
            flat[k] = t["params"][at + k - b]
total = ranges[-1][1] if ranges else 0
if [r for i, r in enumerate(ranges) if r[0] != (ranges[i - 1][1] if i else 0)]:
    errors.append(f"shard ranges do not tile the model: {ranges}")
# The export holds exactly the masters the shards hold, each tensor at its flat offset (as
# `trainer inspect` lists them).
exported = tensors("exported/model.safetensors")
offsets = {}
for line in open("inspect.txt"):
    parts = line.split()
    if len(parts) >= 4 and parts[1] == "F32" and parts[-2] == "at":
        offsets[parts[0]] = int(parts[-1])
if set(offsets) != set(exported):
    errors.append(f"inspect lists {sorted(offsets)}, the export holds {sorted(exported)}")
for name, values in exported.items():
    at = offsets.get(name, 0)
    if any(values[i] != flat.get(at + i) for i in range(len(values))):
        errors.append(f"exported {name} differs from the shards' masters")
state = {n: json.load(open(f"runs/{n}/checkpoints/step-6/trainer_state.json"))
         for n in ["a", "b_optimizer", "b_ddp", "c"]}
state3 = json.load(open("runs/a/checkpoints/step-3/trainer_state.json"))
for name, ranks in [("b_optimizer", 2), ("b_ddp", 2), ("c", 1)]:
    want = state3["loader"]["cursor"] + 3 * ranks
    if state[name]["loader"]["cursor"] != want:
        errors.append(f"{name}: cursor {state[name]['loader']['cursor']}, expected {want}")
def losses(name):
    return {l["step"]: l["loss"] for l in map(json.loads, open(f"runs/{name}/metrics.jsonl"))
            if "loss" in l}
lo, ld = losses("b_optimizer"), losses("b_ddp")
# The same GEMMs; at 2 ranks the reduce-scatter and the all-reduce add the same two terms, so
# the losses are equal or ~1e-8 apart. A lost or repeated micro-batch is >= 1e-3.
for step in [4, 5, 6]:
    if abs(lo[step] - ld[step]) > 1e-5 * abs(ld[step]):
        errors.append(f"step {step}: loss {lo[step]} under optimizer, {ld[step]} under DDP")
if "loss" not in open("eval.txt").read():
    errors.append("eval of the sharded checkpoint printed no loss")
print("sharded checkpoints:", "; ".join(errors) or
      f"ok (4 shards tile {total} elements, the export equals them; losses at 2 ranks, "
      f"optimizer vs DDP: {lo[6]:.6f} vs {ld[6]:.6f}; cursors continue)")
sys.exit(1 if errors else 0)
PY

# Swapped shard names and a shard from another step: their sizes and CRCs in the manifest
# match the files, so only the shards' own headers can tell.
tamper() {  # <copy> <python statements over m (the manifest) and ckpt (the copy's path)>
  rm -rf "$1"
  cp -r runs/a/checkpoints/step-3 "$1"
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, os, shutil, sys, zlib
ckpt, code = sys.argv[1], sys.argv[2]
m = json.load(open(f"{ckpt}/manifest.json"))
exec(code)
for name in m["files"]:
    data = open(f"{ckpt}/{name}", "rb").read()
    m["files"][name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
json.dump(m, open(f"{ckpt}/manifest.json", "w"), indent=2)
PY
}
expect_refused() {  # <checkpoint> <message>
  if "$TRAINER" eval "$1" --max-batches 1 > tampered.txt 2>&1; then
    echo "tampered checkpoint $1 loaded"; exit 1
  fi
  grep -qF "$2" tampered.txt || { echo "tampered $1: unexpected error:"; cat tampered.txt; exit 1; }
}
tamper swapped 's = m["shards"]; s[0]["file"], s[1]["file"] = s[1]["file"], s[0]["file"]'
expect_refused swapped "its header says rank 1 but the checkpoint expects 0"
tamper copied 'shutil.copy("runs/a/checkpoints/step-6/" + m["shards"][2]["file"], ckpt)'
expect_refused copied "its header says step 6 but the checkpoint expects 3"
echo "self-describing shards: ok (swapped names and a shard of another step are refused)"

# A save slower than dist.timeout_s completes; one slower than checkpoint.timeout_s fails on
# every rank with the late rank named. The delay is rank 0's, just after the save's first
# barrier, so rank 1 waits for it at the next: 3 s is 3x dist.timeout_s (1 s; the run's other
# waits, its start and each step's collectives, take milliseconds, and it runs alone) and far
# inside checkpoint.timeout_s (1800 s by default); 4 s is 4x checkpoint.timeout_s (1 s), so
# rank 1 times out even if it is itself up to 3 s late on a loaded machine, and sleeping rank 0
# answers its ping, sent 0.25 s before that deadline, within its engine's 10 ms idle period.
TRAINER_TEST_SAVE_DELAY_S=3 run 2 --set run.name=slow --set dist.sharding=full \
  --set dist.timeout_s=1 --set train.steps=4 --set checkpoint.every=2 >/dev/null
test -d runs/slow/checkpoints/step-4 || { echo "slow save: no step-4 checkpoint"; exit 1; }
if TRAINER_TEST_SAVE_DELAY_S=4 run 2 --set run.name=late --set checkpoint.timeout_s=1 \
    --set train.steps=2 > late.txt 2>&1; then
  echo "a save slower than checkpoint.timeout_s did not fail"; exit 1
fi
grep -q "checkpoint save: barrier #[0-9]* timed out after 1.0 s on rank 1: rank 0 on [^ ]* answers but did not arrive" late.txt || {
  echo "late save: unexpected error:"; cat late.txt; exit 1; }
test ! -e runs/late/checkpoints/step-2 || { echo "late save left a checkpoint"; exit 1; }
echo "slow saves: ok (3 s save under dist.timeout_s = 1 s completes; 4 s under checkpoint.timeout_s = 1 s names rank 0)"
