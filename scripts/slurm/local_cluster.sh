#!/usr/bin/env bash
# A one-node Slurm cluster for tests, run as root from a scratch directory (nothing under /etc):
# munged, slurmctld and slurmd started here and stopped by their PIDs.
#   local_cluster.sh start    configure, start the daemons, wait until the node is idle
#   local_cluster.sh stop     cancel every job, stop the daemons (TERM, then KILL)
#   local_cluster.sh env      the exports client commands need (eval "$(local_cluster.sh env)")
# Debian 12's packages: slurm-wlm (Slurm 22.05) and munge. Its Open MPI (4.1) starts under srun
# through PMIx only, so the cluster's default MPI plugin is pmix.
set -euo pipefail
DIR=${SLURM_TEST_DIR:-/tmp/trainer-slurm}
CPUS=${SLURM_TEST_CPUS:-8}  # advertised; above nproc is fine (oversubscription for tests)
PORT=${SLURM_TEST_PORT:-6917}
NODE=$(hostname -s)
export SLURM_CONF=$DIR/slurm.conf

say() { echo "local_cluster: $*" >&2; }

running() {  # NAME PIDFILE: the pid file names a live process called NAME
  local pid
  [[ -r $2 ]] && pid=$(cat "$2" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] &&
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] &&
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

stop_one() {  # NAME PIDFILE
  running "$1" "$2" || { rm -f "$2"; return 0; }
  local pid
  pid=$(cat "$2" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do running "$1" "$2" || break; sleep 0.1; done
  if running "$1" "$2"; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$2"
}

configure() {
  local memory
  memory=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  mkdir -p "$DIR/state/ctld" "$DIR/state/d" "$DIR/log" "$DIR/munge"
  cat >"$SLURM_CONF" <<CONF
ClusterName=trainer-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/socket
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$(( ${memory:-2048} * 9 / 10 )) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  [[ -s $DIR/munge/key ]] || { head -c 1024 /dev/urandom >"$DIR/munge/key"; chmod 400 "$DIR/munge/key"; }
}

start() {
  [[ $(id -u) -eq 0 ]] || { say "needs root"; exit 1; }
  for b in munged slurmctld slurmd srun sbatch sinfo; do
    command -v "$b" >/dev/null || { say "$b not found (apt-get install slurm-wlm munge)"; exit 1; }
  done
  stop
  rm -rf "$DIR/state" "$DIR/log"
  configure
  munged --socket="$DIR/munge/socket" --key-file="$DIR/munge/key" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed" --force
  slurmctld -c -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 1 300); do
    [[ $(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -1) =~ ^(idle|mixed|allocated) ]] && return 0
    sleep 0.1
  done
  say "the node never came up; logs in $DIR/log"
  exit 1
}

stop() {
  if running slurmctld "$DIR/slurmctld.pid"; then
    scancel --partition=test 2>/dev/null || true
    for _ in $(seq 1 50); do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 0.2; done
  fi
  stop_one slurmd "$DIR/slurmd.pid"
  stop_one slurmctld "$DIR/slurmctld.pid"
  stop_one munged "$DIR/munged.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  *) echo "usage: local_cluster.sh start | stop | env" >&2; exit 2 ;;
esac
