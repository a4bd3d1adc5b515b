#!/usr/bin/env bash
# Several nodes for real: three network namespaces on a bridge (scripts/cluster/nodes.sh), a
# Slurm cluster over them (scripts/cluster/slurm.sh nodes), tiny models over real sockets:
#   1. sbatch -N 2 --ntasks-per-node=2 scripts/launch/train.sbatch under DDP and under full
#      sharding, and as 2 tensor x 2 pipeline stages (the tensor group inside each node, a stage
#      per node): the same losses, bit for bit, as 4 ranks on one node;
#   2. scripts/launch/mpirun.sh from node1 with a hostfile (Open MPI's launch agent enters the
#      other node the way ssh would): the same losses again; the rank-to-host map in the start-up
#      log, in the checkpoint's trainer_state.json and in `trainer inspect`;
#   3. wrong interfaces (one that reaches no other node, loopback, one that does not exist): a
#      one-line error naming the interface, in seconds; a run directory each node sees
#      differently: refused, naming the node;
#   4. a slow node (every rank of node2 under a CPU limit): reported as node2, not as ranks;
#   5. node loss mid-step (node2 off the network and every process of it killed at once, as in
#      a power loss): the job ends within
#      dist.timeout_s naming node2's ranks and node2; relaunched at the same world size on
#      node1 and node3 it resumes from the last complete checkpoint and ends with the bits of an
#      uninterrupted run (dist.deterministic);
#   6. node loss during a checkpoint write: `latest` stays the previous checkpoint, the partial
#      one is never loaded, and the relaunch on one node (2 ranks, train.global_batch) ends with
#      the same bits again.
# The nodes, the daemons and every process in them are stopped by PID afterwards. Skipped (77)
# where namespaces or Slurm cannot be made here (not root, no packages).
#   multi_node.sh <trainer> <source dir>
set -uo pipefail
TRAINER=$(realpath "$1")
ROOT=$(realpath "$2")
NODES="$ROOT/scripts/cluster/nodes.sh"
SLURM="$ROOT/scripts/cluster/slurm.sh"
[[ $(id -u) -eq 0 ]] || { echo "multi_node: not root: skipped"; exit 77; }
bash "$SLURM" install || { echo "multi_node: slurm-wlm and munge cannot be installed: skipped"; exit 77; }
export SLURM_TEST_DIR NODES_DIR
SLURM_TEST_DIR=$(mktemp -d /tmp/trainer_mn_slurm.XXXXXX)
NODES_DIR=$(mktemp -d /tmp/trainer_mn_nodes.XXXXXX)
DIR=$(mktemp -d /tmp/trainer_mn_runs.XXXXXX)
# A CPU limit for section 4: cgroup v1's cpu controller, or v2's.
if [[ -d /sys/fs/cgroup/cpu ]]; then
  CG=/sys/fs/cgroup/cpu/trainer_mn_$$
  limit_cpu() { echo 100000 >"$CG/cpu.cfs_period_us" && echo "$1" >"$CG/cpu.cfs_quota_us"; }
else
  CG=/sys/fs/cgroup/trainer_mn_$$
  limit_cpu() {
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    echo "$1 100000" >"$CG/cpu.max"
  }
fi
cleanup() {
  bash "$SLURM" stop || true
  bash "$NODES" stop || true
  if [[ -d $CG ]]; then
    xargs -r kill -KILL <"$CG/cgroup.procs" 2>/dev/null || true
    for _ in $(seq 1 50); do rmdir "$CG" 2>/dev/null && break; sleep 0.1; done
  fi
  [[ -n ${KEEP_MULTI_NODE_TEST:-} ]] || rm -rf "$DIR" "$SLURM_TEST_DIR" "$NODES_DIR"
}
trap cleanup EXIT
# Whether this machine lets us make network namespaces at all; past this, a cluster that does
# not start is a failure, not a skip.
ip netns add trainer-mn-probe 2>/dev/null && ip netns del trainer-mn-probe ||
  { echo "multi_node: network namespaces cannot be made here: skipped"; exit 77; }
bash "$NODES" start 3 || { echo "FAIL: scripts/cluster/nodes.sh start 3"; exit 1; }
bash "$SLURM" start nodes || { echo "FAIL: scripts/cluster/slurm.sh start nodes"; exit 1; }
eval "$(bash "$SLURM" env)"
set -e
source "$ROOT/tests/app/small_corpus.sh"
source "$ROOT/tests/app/ranks.sh"
cd "$DIR"
small_corpus "$TRAINER"
cat >c.yaml <<YAML
run: {dir: $DIR/runs}
data: {path: $DIR/corpus, tokenizer: $DIR/tok.model, seq_len: 32, batch_size: 2}
model: {vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 64, max_seq_len: 32}
train: {steps: 16, val_every: 0, global_batch: 4}
checkpoint: {every: 4, keep_last: 10}
log: {progress: "off", peak_gflops: 100, every: 1}
dist: {timeout_s: 3}
YAML
export OMP_NUM_THREADS=1 TRAINER
fail() { echo "FAIL: $*"; exit 1; }
SECONDS=0
mark() { echo "  (${SECONDS} s so far)"; }
losses() { sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p' "runs/$1/metrics.jsonl" | tr '\n' ' '; }
same_losses() { [[ -n $(losses "$1") && $(losses "$1") == "$(losses "$2")" ]] || fail "$1's losses ($(losses "$1")) differ from $2's ($(losses "$2"))"; }
same_state() {  # runs $1 and $2 end at step 80 with the same bits
  local f
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "runs/$1/checkpoints/step-80/$f" "runs/$2/checkpoints/step-80/$f" ||
      fail "$2's final $f differs from the uninterrupted run's"
  done
}
now_ms() { date +%s%3N; }
seconds_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_job() {  # JOB: until it is no longer pending or running (60 s)
  for _ in $(seq 1 600); do [[ $(job_state "$1") =~ ^(PENDING|RUNNING|CONFIGURING)$ ]] || return 0; sleep 0.1; done
  fail "job $1 still $(job_state "$1") after 60 s"
}
batch() {  # sbatch options..., --, trainer options...: the job id, once it ended
  local opts=() job
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  job=$(sbatch --parsable --export=ALL "${opts[@]}" "$ROOT/scripts/launch/train.sbatch" c.yaml "$@")
  wait_job "$job"
  echo "$job"
}
wait_for() { for _ in $(seq 1 600); do [[ -e $1 ]] && return 0; sleep 0.05; done; fail "$1 never appeared"; }

# 1. sbatch on two nodes, against four ranks on one.
for sharding in none full; do
  srun -N 1 -n 4 -w node1 "$TRAINER" train c.yaml --set run.name="one_$sharding" \
    --set dist.sharding=$sharding >"one_$sharding.log" 2>&1 || { tail -3 "one_$sharding.log"; fail "4 ranks on node1"; }
  job=$(batch -N 2 --ntasks-per-node=2 -w node1,node2 -- --set run.name="two_$sharding" --set dist.sharding=$sharding)
  [[ $(job_state "$job") == COMPLETED ]] || { tail -3 "trainer-$job.out"; fail "sbatch -N 2 ($sharding) ended $(job_state "$job")"; }
  same_losses "two_$sharding" "one_$sharding"
done
grep -q "4 ranks on 2 nodes (node1: ranks 0-1; node2: ranks 2-3), between them over eth0 (10.77.0.11, the address node1 resolves to)" runs/two_none/train.log ||
  fail "no rank-to-host map in the start-up log: $(grep 'ranks on' runs/two_none/train.log)"
threed=(--set dist.tensor_parallel=2 --set dist.pipeline_parallel=2)
srun -N 1 -n 4 -w node1 "$TRAINER" train c.yaml --set run.name=one_3d "${threed[@]}" >one_3d.log 2>&1 ||
  { tail -3 one_3d.log; fail "2 tensor x 2 pipeline on node1"; }
job=$(batch -N 2 --ntasks-per-node=2 -w node1,node2 -- --set run.name=two_3d "${threed[@]}")
[[ $(job_state "$job") == COMPLETED ]] || { tail -3 "trainer-$job.out"; fail "sbatch -N 2 (2 tensor x 2 pipeline) ended $(job_state "$job")"; }
same_losses two_3d one_3d
grep -q "2 tensor x 2 pipeline x 1 data" runs/two_3d/train.log || fail "the 3D layout is not logged"
echo "sbatch -N 2 --ntasks-per-node=2: 4 ranks on node1 and node2, DDP, full sharding, and a pipeline stage per node, the losses of 4 ranks on one node"

mark
# 2. scripts/launch/mpirun.sh with a hostfile, from node1: Open MPI starts its daemon on node2
#    through its launch agent (plm_rsh_agent: ssh on a real cluster, nodes.sh rsh here), and its
#    own connections use eth0 (oob_tcp_if_include); the map in the checkpoint and in inspect.
printf 'node1 slots=2\nnode2 slots=2\n' >hosts
HOSTFILE=hosts RANKS_PER_NODE=2 OMPI_MCA_plm_rsh_agent="$NODES rsh" OMPI_MCA_oob_tcp_if_include=eth0 \
  bash "$NODES" exec node1 bash "$ROOT/scripts/launch/mpirun.sh" 4 c.yaml --set run.name=mpirun \
  >mpirun.log 2>&1 || { tail -3 mpirun.log; fail "mpirun.sh with a hostfile"; }
same_losses mpirun one_none
grep -q '"hosts":\["node1","node1","node2","node2"\]' \
  <<<"$(tr -d ' \n' <runs/mpirun/checkpoints/step-16/trainer_state.json)" ||
  fail "trainer_state.json has no rank-to-host map"
grep -q "saved by 4 rank(s): node1: ranks 0-1; node2: ranks 2-3" <<<"$("$TRAINER" inspect runs/mpirun)" ||
  fail "inspect shows no rank-to-host map"
echo "mpirun.sh with a hostfile across node1 and node2: the same losses; the map in the log, trainer_state.json and inspect"

mark
# 3. Wrong interfaces, and a run directory that is not shared.
refused() {  # NAME EXPECTED [trainer options]: srun over two nodes fails fast with EXPECTED
  local name=$1 expected=$2 start status=0
  shift 2
  start=$(now_ms)
  srun -N 2 --ntasks-per-node=2 -w node1,node2 --kill-on-bad-exit=1 "$TRAINER" train c.yaml \
    --set run.name="$name" "$@" \
    >"$name.log" 2>&1 || status=$?
  [[ $status -ne 0 ]] || fail "$name: the job exited 0"
  grep -qF "$expected" "$name.log" || { grep error "$name.log" | head -2; fail "$name: no '$expected'"; }
  printf '%s: exit %d in %s s: %s\n' "$name" "$status" "$(seconds_since "$start")" \
    "$(grep -m1 -F "$expected" "$name.log" | cut -c1-220)"
}
refused mgmt0 "node1 (rank 0, mgmt0 10.78.1.1) cannot reach node2 (rank 2) at 10.78.2.1:" --set dist.interface=mgmt0
refused lo "dist.interface lo: lo is this host's loopback interface, but the job's 4 ranks span 2 nodes" --set dist.interface=lo
# Each of node2's ranks finds eth9 missing: whichever says so first names itself.
refused eth9 "has no such interface (it has lo 127.0.0.1/8, eth0 10.77.0.12/24, mgmt0 10.78.2.1/24)" --set dist.interface=eth9
grep -qE "dist.interface eth9: node2 \(rank [23]\) has no such interface" eth9.log ||
  fail "eth9: the error does not name node2 and its rank: $(grep -m1 error eth9.log)"
refused local "is not shared between the nodes: ranks 2-3 on node2 (all of its 2) do not see the file rank 0 wrote there" \
  --set run.dir=/tmp/trainer-node-local/runs

mark
# 4. A slow node: node2's ranks under a CPU limit of 10% of a core (a model large enough that
#    its steps, not the polling of collectives, take what the limit allows). A slow node is not
#    a lost one: dist.timeout_s 60 keeps a limited step on a loaded machine (under a second
#    here) far from a timeout.
mkdir "$CG"
limit_cpu 10000
(HOSTFILE=hosts RANKS_PER_NODE=2 OMPI_MCA_plm_rsh_agent="$NODES rsh" OMPI_MCA_oob_tcp_if_include=eth0 \
  bash "$NODES" exec node1 bash "$ROOT/scripts/launch/mpirun.sh" 4 c.yaml \
  --set run.name=slow --set train.steps=400 --set checkpoint.every=0 --set dist.timeout_s=60 \
  --set model.n_embd=128 --set data.seq_len=64 --set model.max_seq_len=64 --set data.batch_size=8 \
  >slow.log 2>&1) 2>/dev/null &
launcher=$!
ranks() {  # the job's ranks: its launcher's descendants named trainer, those on node $1 if given
  local mine
  mine=$(comm -12 <(descendants "$launcher" | sort) <(pgrep -x trainer | sort))
  if [[ -z ${1:-} ]]; then echo "$mine"; else comm -12 <(echo "$mine") <(bash "$NODES" pids "$1" | sort); fi
}
for _ in $(seq 1 1200); do  # 60 s: a loaded machine starts a job across nodes slowly
  pids=$(ranks node2)
  [[ $(wc -w <<<"$pids") -ge 2 ]] && break
  sleep 0.05
done
[[ $(wc -w <<<"$pids") -ge 2 ]] || fail "node2's 2 ranks of the slow job never started: $(tail -3 slow.log)"
for pid in $pids; do echo "$pid" >"$CG/cgroup.procs"; done
for _ in $(seq 1 600); do grep -q "slow node" slow.log && break; sleep 0.1; done
ranks | xargs -r kill -KILL 2>/dev/null || true  # the ranks: mpirun then ends
wait "$launcher" 2>/dev/null || true
grep -q "slow node: ranks 2-3 on node2 (all of its 2) has been behind for 5 steps in a row" slow.log ||
  fail "node2 under a CPU limit was not reported as a slow node: $(grep -m2 -E 'straggler|slow' slow.log); its log ends: $(grep -v '^\[rank 0\] step' slow.log | tail -3)"
grep -m1 -o 'slow node: .*' slow.log

mark
# 5. Node loss mid-step, relaunched at the same world size on node1 and node3. These runs are
#    80 steps long, and the lost one's saves (every 8 steps) take 0.25 s more each, so that the
#    loss, issued once step 8 is saved, lands before the end: without the delay the 72 steps
#    after it (under 2 s) once all ran before it landed.
det=(--set dist.deterministic=true --set train.steps=80 --set checkpoint.every=8)
"$TRAINER" train c.yaml --set run.name=straight "${det[@]}" >straight.log 2>&1 || fail "the uninterrupted run"
job=$(TRAINER_TEST_SAVE_DELAY_S=0.25 sbatch --parsable --export=ALL -N 2 --ntasks-per-node=2 -w node1,node2 "$ROOT/scripts/launch/train.sbatch" \
  c.yaml --set run.name=lost "${det[@]}" --set checkpoint.timeout_s=3)  # the loss may hit a save
wait_for runs/lost/checkpoints/step-8
bash "$NODES" lose node2
start=$(now_ms)
out=trainer-$job.out
for _ in $(seq 1 600); do grep -q "error:" "$out" 2>/dev/null && break; sleep 0.05; done
detected=$(seconds_since "$start")
wait_job "$job"
seconds=$(seconds_since "$start")
# What a cluster's health check does with a node that stopped answering; Slurm then ends the job
# and frees node1 at once (otherwise after SlurmdTimeout).
scontrol update NodeName=node2 State=DOWN Reason="lost in a test"
grep -q "ranks 2-3 on node2 (all of its 2) do not answer: node2 is lost or cut off from the others" "$out" ||
  { tail -5 "$out"; fail "the survivors did not name node2's ranks and node2"; }
[[ ${detected%.*} -lt 6 ]] || fail "the survivors took $detected s to fail after node2 was lost (dist.timeout_s 3)"
[[ ${seconds%.*} -lt 15 ]] || fail "the job took $seconds s to end after node2 was lost (dist.timeout_s 3, KillWait 2)"
latest=$(readlink runs/lost/checkpoints/latest)
printf 'node2 lost mid-step: the survivors failed in %s s, the job ended %s in %s s: %s\n' "$detected" \
  "$(job_state "$job")" "$seconds" \
  "$(grep -m1 -o "error: .*cut off from the others" "$out")"
job=$(batch -N 2 --ntasks-per-node=2 -w node1,node3 -- --set run.name=lost "${det[@]}")
[[ $(job_state "$job") == COMPLETED ]] || { tail -3 "trainer-$job.out"; fail "the relaunch on node1 and node3 ended $(job_state "$job")"; }
grep -q "resumed from .*/$latest at step" "trainer-$job.out" || fail "the relaunch did not resume from $latest"
same_state straight lost
echo "relaunched on node1 and node3 (4 ranks): resumed from $latest, final state equal to the uninterrupted run's"

mark
# 6. Node loss during a checkpoint write (each of rank 0's writes made 2 s slow): node3 is lost
#    while step 16 is written; relaunched on node1 alone.
job=$(TRAINER_TEST_SAVE_DELAY_S=2 sbatch --parsable --export=ALL -N 2 --ntasks-per-node=2 -w node1,node3 \
  "$ROOT/scripts/launch/train.sbatch" c.yaml --set run.name=midsave "${det[@]}" --set checkpoint.timeout_s=4)
wait_for runs/midsave/checkpoints/step-16.tmp
bash "$NODES" lose node3
wait_job "$job"
scontrol update NodeName=node3 State=DOWN Reason="lost in a test"
[[ $(readlink runs/midsave/checkpoints/latest) == step-8 ]] ||
  fail "latest is $(readlink runs/midsave/checkpoints/latest) after a node was lost writing step 16"
[[ ! -d runs/midsave/checkpoints/step-16 ]] || fail "step-16 was committed without node3's shards"
echo "node3 lost while step 16 was written: the job ended $(job_state "$job"); latest stayed step-8: $(grep -m1 -o 'error: .*' "trainer-$job.out" | cut -c1-200)"
job=$(batch -N 1 --ntasks-per-node=2 -w node1 -- --set run.name=midsave "${det[@]}")
[[ $(job_state "$job") == COMPLETED ]] || { tail -3 "trainer-$job.out"; fail "the relaunch on node1 ended $(job_state "$job")"; }
grep -q "resumed from .*/step-8 at step 8" "trainer-$job.out" || fail "the relaunch did not resume from step-8"
same_state straight midsave
echo "relaunched on node1 alone (2 ranks): resumed from step-8, final state equal to the uninterrupted run's"
mark
