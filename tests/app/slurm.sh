#!/usr/bin/env bash
# A real one-node Slurm cluster (scripts/cluster/slurm.sh), end to end:
#   1. srun -n 2 --mpi=pmix trainer train: a 2-rank run;
#   2. srun without PMIx, and a torchrun-style RANK/WORLD_SIZE: a one-line error with the fix;
#   3. sbatch scripts/launch/train.sbatch, pre-empted (SIGUSR1 to its ranks, as --signal sends
#      before a time limit): the ranks save and exit 75, the job requeues itself and resumes from
#      that checkpoint to the end;
#   4. salloc -n 2 mpirun -np 2 trainer train;
#   5. scripts/launch/srun.sh and scripts/launch/mpirun.sh.
# The cluster is stopped by PID afterwards. Skipped (77) where Slurm cannot be installed or
# started here (not root, no packages).
#   slurm.sh <trainer> <source dir>
set -uo pipefail
TRAINER=$(realpath "$1")
ROOT=$(realpath "$2")
CLUSTER="$ROOT/scripts/cluster/slurm.sh"
[[ $(id -u) -eq 0 ]] || { echo "slurm: not root: skipped"; exit 77; }
bash "$CLUSTER" install || { echo "slurm: slurm-wlm and munge cannot be installed: skipped"; exit 77; }
export SLURM_TEST_DIR
SLURM_TEST_DIR=$(mktemp -d /tmp/trainer_slurm.XXXXXX)
DIR=$(mktemp -d /tmp/trainer_slurm_runs.XXXXXX)
trap 'bash "$CLUSTER" stop; [[ -n ${KEEP_SLURM_TEST:-} ]] || rm -rf "$DIR" "$SLURM_TEST_DIR"' EXIT
bash "$CLUSTER" start || { echo "slurm: the cluster did not start: skipped"; exit 77; }
eval "$(bash "$CLUSTER" env)"
set -e
source "$ROOT/tests/app/small_corpus.sh"
cd "$DIR"
small_corpus "$TRAINER"
# 300 steps of ~450k parameters on 2 x 8 x 64 tokens (1.4 GFLOP a rank, 10 ms or more on one
# core of any CPU here): the ~280 steps after step 20 take seconds, far longer than the poll
# below and scancel need to stop the job before its end. checkpoint.every = 10 keeps step-20
# (keep_last 3) until step 50, 30 steps (0.3 s or more) for a 0.1 s poll to see it.
cat >c.yaml <<YAML
run: {dir: $DIR/runs}
data: {path: $DIR/corpus, tokenizer: $DIR/tok.model, seq_len: 64, batch_size: 8}
model: {vocab_size: 320, n_layer: 2, n_head: 4, n_embd: 128, max_seq_len: 64}
train: {steps: 300, val_every: 0}
checkpoint: {every: 10}
log: {progress: "off", peak_gflops: 100}
YAML
fail() { echo "FAIL: $*"; exit 1; }
world_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['world_size'])" "$1"; }

# 1. srun.
OMP_NUM_THREADS=1 srun -n 2 --mpi=pmix "$TRAINER" train c.yaml --set run.name=srun \
  --set train.steps=6 >srun.log 2>&1 || { tail -5 srun.log; fail "srun -n 2 --mpi=pmix"; }
[[ $(world_of runs/srun/checkpoints/step-6/trainer_state.json) == 2 ]] || fail "srun: not 2 ranks"
echo "srun -n 2 --mpi=pmix: 2 ranks, 6 steps"

# 2. Launch errors.
out=$(srun -n 2 --mpi=none "$TRAINER" train c.yaml --set run.name=nopmi 2>&1 || true)
grep -q "launch with srun --mpi=pmix" <<<"$out" || fail "srun without PMIx: $out"
out=$(RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 "$TRAINER" train c.yaml --set run.name=env 2>&1 || true)
grep -q "launch with mpirun -np 2 or srun --mpi=pmix -n 2" <<<"$out" || fail "RANK/WORLD_SIZE: $out"
echo "launch errors: srun without PMIx and RANK/WORLD_SIZE name their fix"

# 3. sbatch, pre-empted, requeued, resumed.
job=$(TRAINER="$TRAINER" sbatch --parsable --export=ALL "$ROOT/scripts/launch/train.sbatch" c.yaml \
  --set run.name=batch)
state() { scontrol show job "$job" 2>/dev/null | sed -n "s/.*$1=\([A-Za-z0-9_:]*\).*/\1/p"; }
# 60 s: the job's start, srun's PMIx start-up, 20 steps and two saves take a few seconds.
for _ in $(seq 1 600); do [[ -e runs/batch/checkpoints/step-20 ]] && break; sleep 0.1; done
[[ -e runs/batch/checkpoints/step-20 ]] || fail "the batch job never reached step 20"
scancel --signal=USR1 "$job"
# 60 s or more (each poll also runs scontrol): a step, a save, exit 75 and `scontrol requeue`
# take about a second.
for _ in $(seq 1 600); do
  [[ $(state Restarts) -ge 1 && $(state JobState) == PENDING ]] && break
  sleep 0.1
done
[[ $(state Restarts) -ge 1 ]] || fail "the job did not requeue itself (state $(state JobState))"
# Slurm holds a requeued job a while; here it starts as soon as the node has torn down the
# job's last run (no live slurmstepd): seconds after the batch script's exit (KillWait 2 s,
# scripts/cluster/slurm.sh, where a task must be killed); 60 s.
for _ in $(seq 1 600); do
  [[ -z $(ps -C slurmstepd -o stat= | grep -v Z) ]] && break
  sleep 0.1
done
# slurmd revoked the job's credential when the requeue killed it, and refuses any credential
# of that job made in the same second or before (a time in whole seconds), failing the job
# ("Job credential revoked"): its new start must come in a later second than the requeue seen
# above, which 1 s guarantees.
sleep 1
scontrol update JobId="$job" StartTime=now
# 180 s or more: the start, then at most 280 steps and 28 saves, ~20 s at 20 GFLOP/s a core
# (a slow AVX2 machine's): 9x.
for _ in $(seq 1 900); do [[ $(state JobState) =~ ^(COMPLETED|FAILED|CANCELLED)$ ]] && break; sleep 0.2; done
[[ $(state JobState) == COMPLETED ]] ||
  { tail -15 "trainer-$job.out"; fail "the requeued job ended $(state JobState)"; }
stopped=$(sed -n 's/.*saving a checkpoint at step \([0-9]*\) and stopping.*/\1/p' "trainer-$job.out")
grep -q "resumed from .*step-$stopped at step $stopped" "trainer-$job.out" ||
  fail "the requeued job did not resume from step $stopped: $(grep -E 'resumed|restart|stopping' "trainer-$job.out")"
[[ -d runs/batch/checkpoints/step-300 ]] || fail "the requeued job did not finish"
echo "sbatch: pre-empted at step $stopped, exited 75, requeued, resumed there, finished 300 steps"

# 4. salloc + mpirun.
OMP_NUM_THREADS=1 salloc -n 2 mpirun --allow-run-as-root -np 2 "$TRAINER" train c.yaml \
  --set run.name=salloc --set train.steps=5 >salloc.log 2>&1 || { tail -5 salloc.log; fail "salloc mpirun"; }
[[ $(world_of runs/salloc/checkpoints/step-5/trainer_state.json) == 2 ]] || fail "salloc: not 2 ranks"
echo "salloc -n 2 mpirun -np 2: 2 ranks"

# 5. The launch scripts the docs show.
TRAINER="$TRAINER" bash "$ROOT/scripts/launch/srun.sh" 1 2 c.yaml --set run.name=srun_sh \
  --set train.steps=3 >srun_sh.log 2>&1 || { tail -5 srun_sh.log; fail "scripts/launch/srun.sh"; }
[[ $(world_of runs/srun_sh/checkpoints/step-3/trainer_state.json) == 2 ]] || fail "srun.sh: not 2 ranks"
TRAINER="$TRAINER" bash "$ROOT/scripts/launch/mpirun.sh" 2 c.yaml --set run.name=mpirun_sh \
  --set train.steps=3 >mpirun_sh.log 2>&1 || { tail -5 mpirun_sh.log; fail "scripts/launch/mpirun.sh"; }
[[ $(world_of runs/mpirun_sh/checkpoints/step-3/trainer_state.json) == 2 ]] || fail "mpirun.sh: not 2 ranks"
echo "scripts/launch/srun.sh 1 2 and mpirun.sh 2: 2 ranks each"
