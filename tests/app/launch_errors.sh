#!/usr/bin/env bash
# Launch errors through the binary, each a clear line and a non-zero exit within seconds:
#   1. ranks started from different binaries (mpirun MPMD): "the trainer binary differs";
#   2. ranks started with different configs: the first key that differs, with both values;
#   3. a rank that never starts the trainer (another program in its place): MPI_Init's wait
#      ends at dist.timeout_s instead of hanging;
#   4. run.device = cuda on a machine without a GPU (or a build without CUDA): exit 2;
#   5. a command that writes one output (export, prepare, tokenizer) under mpirun -np 2:
#      refused on every rank (exit 2), nothing written, where the ranks used to race; inside a
#      Slurm batch script (no job step) it runs;
#   6. train.init_from of a folder with an infinity in the part of the weights that rank 1 of a
#      ZeRO-3 pair reads: every rank refuses it alike (exit 2) and no run directory is left.
#   launch_errors.sh <trainer> <mpiexec>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
TRAINER=$(realpath "$1")
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_launch_errors.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
# dist.timeout_s = 3: ranks launched together meet in MPI_Init well within a second, even on a
# loaded machine (this test runs alone), so only a rank that never starts reaches it.
common=(train --set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=32
        --set model.max_seq_len=32 --set data.seq_len=32 --set data.batch_size=2
        --set train.steps=4 --set train.val_every=0 --set log.progress=off
        --set log.peak_gflops=100 --set dist.timeout_s=3)
MPI=("$MPIEXEC" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1)
expect() {  # what, expected exit ("nonzero" or a number), log, message
  local what=$1 want=$2 log=$3 message=$4 status=$5 elapsed=$6
  if [[ $want == nonzero && $status -eq 0 ]] || [[ $want != nonzero && $status -ne $want ]]; then
    echo "FAIL: $what: exit $status"; tail -3 "$log"; exit 1
  fi
  grep -qF "$message" "$log" || { echo "FAIL: $what: no '$message' in:"; head -5 "$log"; exit 1; }
  # The slowest case waits dist.timeout_s (3 s) in MPI_Init, then mpirun starts and tears down
  # the job in about a second each way: 20 s leaves 4x that on a loaded machine, and is well
  # under the 30 s that the `sleep 30` rank below would last were the job not torn down.
  [[ $elapsed -le 20 ]] || { echo "FAIL: $what took $elapsed s"; exit 1; }
  echo "$what: exit $status in $elapsed s: $(grep -F "$message" "$log" | head -1 | cut -c1-150)"
}
run() {  # log, then the command; sets status and elapsed
  local log=$1 start
  shift
  start=$(date +%s)
  status=0
  # A hang guard, 3x the 20 s bound: a hung case fails as too slow within the test's 120 s.
  timeout 60 "$@" >"$log" 2>&1 || status=$?
  elapsed=$(($(date +%s) - start))
}

cp "$TRAINER" other_trainer
printf '\0' >>other_trainer  # the same program, another build as far as the bytes go
run binary.log "${MPI[@]}" -np 1 "$TRAINER" "${common[@]}" --set run.name=b : \
  -np 1 ./other_trainer "${common[@]}" --set run.name=b
expect "different binaries" nonzero binary.log "the trainer binary differs between ranks" \
  "$status" "$elapsed"

run config.log "${MPI[@]}" -np 1 "$TRAINER" "${common[@]}" --set run.name=c : \
  -np 1 "$TRAINER" "${common[@]}" --set run.name=c --set optimizer.lr=0.002
expect "different configs" nonzero config.log \
  "at 'optimizer.lr': rank 0 has 'lr: 0.001', rank 1 has 'lr: 0.002'" "$status" "$elapsed"

run never.log "${MPI[@]}" -np 1 "$TRAINER" "${common[@]}" --set run.name=n : -np 1 sleep 30
expect "a rank that never starts" nonzero never.log \
  "MPI_Init has waited 3.0 s (dist.timeout_s) for the other 1 rank(s)" "$status" "$elapsed"

run cuda.log "$TRAINER" "${common[@]}" --set run.name=g --set run.device=cuda
if grep -q "built without the CUDA backend" cuda.log; then
  expect "run.device cuda" 2 cuda.log "run.device = cuda but this trainer was built without" \
    "$status" "$elapsed"
else
  expect "run.device cuda" 2 cuda.log "run.device = cuda but rank 0 sees no CUDA GPU" \
    "$status" "$elapsed"
fi

"$TRAINER" "${common[@]}" --set run.name=e >/dev/null
for cmd in "export runs/e --out exported" \
           "prepare --tokenizer tok.model --input text.txt --out prepared" \
           "tokenizer train --input text.txt --vocab-size 320 --out tok2.model"; do
  name=${cmd%% *}
  run "$name.log" "${MPI[@]}" -np 2 "$TRAINER" $cmd
  expect "$name under mpirun" 2 "$name.log" \
    "trainer $name writes its output from one process, but this is rank 1 of 2 (mpirun)" \
    "$status" "$elapsed"
done
[[ ! -e exported && ! -e prepared && ! -e tok2.model ]] ||
  { echo "FAIL: a refused command wrote its output"; exit 1; }
# A Slurm batch script's own environment (no job step) is one process, not rank 0 of the job.
SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=2 "$TRAINER" export runs/e --out batch_export \
  >/dev/null 2>&1 || { echo "FAIL: export inside a batch script was refused"; exit 1; }

# An exported folder whose ln_f.weight ends with an infinity.
"$TRAINER" export runs/e --out inf_folder >/dev/null
rm -f inf_folder/trainer_config.yaml
python3 - inf_folder/model.safetensors <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
at = 8 + n + json.loads(raw[8:8 + n])["ln_f.weight"]["data_offsets"][1] - 4  # its last element
raw[at:at + 4] = struct.pack("<f", float("inf"))
open(sys.argv[1], "wb").write(raw)
PY
run inf.log "${MPI[@]}" -np 2 "$TRAINER" "${common[@]}" --set run.name=inf --set dist.sharding=full \
  --set train.init_from=inf_folder
expect "broken weights on rank 1's part" 2 inf.log \
  "[rank 0] error: $PWD/inf_folder: tensor 'ln_f.weight' holds an infinity (element 31)" \
  "$status" "$elapsed"
[[ ! -e runs/inf ]] || { echo "FAIL: a refused fine-tuning left runs/inf"; exit 1; }

