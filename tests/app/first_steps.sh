# Sourced by default_configs.sh and default_job_bf16.sh, with TRAINER, DIR and the working
# directory (the source tree, whose corpora/brown the fixture `brown` prepared) set:
#   first_steps NAME CONFIG [--set ...]: trains configs/CONFIG.yaml 20 steps as run NAME under
#     $DIR, validating (4 batches) at step 20;
#   validation_losses NAME...: prints each run's validation loss at step 20 and fails unless
#     each is below 7.5 nats (the uniform guess is ln(8192) = 9.01, the corpus's unigram
#     entropy about 7: a model that learns passes 7.5 within 20 steps, measured at 7.1 to 7.2,
#     while one that does not learn stays near 9).
first_steps() {
  local name=$1 config=$2
  shift 2
  "$TRAINER" train "configs/$config.yaml" --set train.steps=20 --set train.val_every=20 \
    --set train.val_batches=4 --set run.dir="$DIR" --set log.progress=off \
    --set checkpoint.every=0 --set train.resume=none --set run.name="$name" "$@" \
    >"$DIR/$name.log" 2>&1 || { echo "FAIL: $name"; tail -3 "$DIR/$name.log"; exit 1; }
}
validation_losses() {
  /usr/bin/python3 - "$DIR" "$@" <<'PY'
import json, sys
losses = {}
for run in sys.argv[2:]:
    for line in open(f"{sys.argv[1]}/{run}/metrics.jsonl"):
        j = json.loads(line)
        if j.get("step") == 20 and "val_loss" in j:
            losses[run] = j["val_loss"]
    if run not in losses:
        sys.exit(f"FAIL: {run}: no validation at step 20")
print("validation loss at step 20: " + ", ".join(f"{k} {v:.4f}" for k, v in losses.items()))
bad = [k for k, v in losses.items() if not v < 7.5]
if bad:
    sys.exit(f"FAIL: {', '.join(bad)} did not learn (7.5 nats or more at step 20)")
PY
}
