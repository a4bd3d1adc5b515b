#!/usr/bin/env bash
# A Slurm cluster for tests, run as root from a scratch directory (nothing under /etc): munged
# and slurmctld on this machine, and slurmd either here (one node, this machine's hostname) or
# in each node of scripts/cluster/nodes.sh (one slurmd per node, NodeAddr its eth0 address,
# slurmctld reached at the bridge's address). Every daemon is stopped by its PID.
#   slurm.sh install        install Debian's slurm-wlm and munge where they are missing
#   slurm.sh start [nodes]  configure, start the daemons, wait until every node is idle
#   slurm.sh stop           cancel every job, stop the daemons (TERM, then KILL)
#   slurm.sh env            the exports client commands need (eval "$(slurm.sh env)")
# Debian 12's packages: slurm-wlm (Slurm 22.05) and munge. Its Open MPI (4.1) starts under srun
# through PMIx only, so the cluster's default MPI plugin is pmix.
set -euo pipefail
DIR=${SLURM_TEST_DIR:-/tmp/trainer-slurm}
CPUS=${SLURM_TEST_CPUS:-8}  # advertised; above nproc is fine (oversubscription for tests)
PORT=${SLURM_TEST_PORT:-6917}
# How long srun waits for a step's tasks after the first ended badly (Slurm's default is 30 s):
# a lost node's never end, and the tests lose nodes on purpose.
KILL_WAIT=${SLURM_TEST_KILL_WAIT:-2}
HOST=$(hostname -s)
NODES_SH="$(dirname "$(realpath "${BASH_SOURCE[0]}")")/nodes.sh"
NODE_LOCAL=${NODE_LOCAL:-/tmp/trainer-node-local}  # nodes.sh's node-local directory
export SLURM_CONF=$DIR/slurm.conf

say() { echo "slurm.sh: $*" >&2; }

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
  # 5 s for a daemon to save its state and exit on SIGTERM (a second or less), then SIGKILL.
  for _ in $(seq 1 50); do running "$1" "$2" || break; sleep 0.1; done
  if running "$1" "$2"; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$2"
}

node_lines() {  # LAYOUT MEMORY_MB: the NodeName lines (the nodes share this machine's memory)
  local node nodes
  if [[ $1 == host ]]; then
    echo "NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$2 State=UNKNOWN"
    return
  fi
  nodes=$(bash "$NODES_SH" names)
  for node in $nodes; do
    echo "NodeName=$node NodeAddr=$(bash "$NODES_SH" addr "$node") CPUs=$CPUS" \
      "RealMemory=$(($2 / $(wc -w <<<"$nodes"))) State=UNKNOWN"
  done
}

configure() {  # LAYOUT: host (one slurmd here) or nodes
  local memory controller=127.0.0.1 slurmd_files=$DIR/state tmp=/tmp
  memory=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p') || true
  # Advertised under what slurmd -C measures (2048 MB where it prints none): a node claiming
  # more memory than slurmd finds at registration is drained ("Low RealMemory"), so 10% under.
  memory=$(( ${memory:-2048} * 9 / 10 ))
  # In nodes, each slurmd keeps its pid and spool files in its node-local directory, and jobs'
  # temporary files (PMIx's among them) go there too: the nodes share this machine's /tmp.
  if [[ $1 == nodes ]]; then
    controller=$(bash "$NODES_SH" addr host)
    slurmd_files=$NODE_LOCAL
    tmp=$NODE_LOCAL
  fi
  mkdir -p "$DIR/state/ctld" "$DIR/state/d" "$DIR/log" "$DIR/munge"
  cat >"$SLURM_CONF" <<CONF
ClusterName=trainer-test
SlurmctldHost=$HOST($controller)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/socket
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$slurmd_files/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$slurmd_files/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
TmpFS=$tmp
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
KillWait=$KILL_WAIT
$(node_lines "$1" "$memory")
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  [[ -s $DIR/munge/key ]] || { head -c 1024 /dev/urandom >"$DIR/munge/key"; chmod 400 "$DIR/munge/key"; }
}

slurmd_pid_files() {  # where each slurmd's pid file is, as this machine sees it
  if [[ -r $DIR/layout && $(cat "$DIR/layout") == nodes ]]; then
    local node
    for node in $(bash "$NODES_SH" names); do echo "$(bash "$NODES_SH" local "$node")/slurmd.pid"; done
  else
    echo "$DIR/state/slurmd.pid"
  fi
}

start() {  # LAYOUT
  local layout=$1 node nodes
  [[ $(id -u) -eq 0 ]] || { say "needs root"; exit 1; }
  for b in munged slurmctld slurmd srun sbatch sinfo; do
    command -v "$b" >/dev/null || { say "$b not found (apt-get install slurm-wlm munge)"; exit 1; }
  done
  if [[ $layout == nodes ]]; then
    nodes=$(bash "$NODES_SH" names || true)
    [[ -n $nodes ]] || { say "no nodes: start them with scripts/cluster/nodes.sh start N"; exit 1; }
  fi
  stop
  rm -rf "$DIR/state" "$DIR/log"
  configure "$layout"
  echo "$layout" >"$DIR/layout"
  munged --socket="$DIR/munge/socket" --key-file="$DIR/munge/key" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed" --force
  slurmctld -c -f "$SLURM_CONF"
  if [[ $layout == host ]]; then
    nodes=$HOST
    slurmd -f "$SLURM_CONF"
  else
    for node in $nodes; do bash "$NODES_SH" exec "$node" slurmd -f "$SLURM_CONF"; done
  fi
  # 30 s or more (each poll runs sinfo twice) for slurmd to register with slurmctld, a second
  # or two after both start.
  for _ in $(seq 1 300); do
    [[ $(sinfo -h -o %T 2>/dev/null | grep -cvE '^(idle|mixed|allocated)') == 0 &&
       $(sinfo -h -N -o %N 2>/dev/null | sort -u | wc -l) == $(wc -w <<<"$nodes") ]] && return 0
    sleep 0.1
  done
  say "the nodes never came up ($(sinfo -h -N -o '%N %T' | tr '\n' ' ')); logs in $DIR/log"
  exit 1
}

stop() {
  if running slurmctld "$DIR/slurmctld.pid"; then
    scancel --partition=test 2>/dev/null || true
    # 10 s, 5x the default KillWait (2 s from TERM to KILL); past it the daemons stop regardless.
    for _ in $(seq 1 50); do [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break; sleep 0.2; done
  fi
  local pid_file
  for pid_file in $(slurmd_pid_files); do stop_one slurmd "$pid_file"; done
  stop_one slurmctld "$DIR/slurmctld.pid"
  stop_one munged "$DIR/munged.pid"
}

install_packages() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
  { apt-get install -y --no-install-recommends slurm-wlm munge ||
    { apt-get update && apt-get install -y --no-install-recommends slurm-wlm munge; }; } >/dev/null 2>&1
}

case "${1:-}" in
  install) install_packages ;;
  start) start "${2:-host}" ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  *) echo "usage: slurm.sh install | start [nodes] | stop | env" >&2; exit 2 ;;
esac
