#!/usr/bin/env bash
# Launch under Slurm from a login shell or inside an allocation:
#   scripts/launch/srun.sh NODES RANKS_PER_NODE CONFIG [--set key=value ...]
# Each rank gets the node's cores divided among its ranks as OpenMP threads, bound to them.
# Environment passed through: TRAINER (default: trainer on PATH), and for GPUs GPUS_PER_NODE
# (one rank per GPU: RANKS_PER_NODE must not exceed it) with the NCCL variables that matter
# (NCCL_SOCKET_IFNAME, NCCL_IB_HCA or NCCL_IB_DISABLE=1 without InfiniBand, NCCL_DEBUG=INFO to
# see what NCCL chose).
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: srun.sh NODES RANKS_PER_NODE CONFIG [--set k=v ...]" >&2; exit 2; }
nodes=$1 per_node=$2
shift 2
cores=${SLURM_CPUS_ON_NODE:-$(nproc)}
threads=$(( cores / per_node > 0 ? cores / per_node : 1 ))
srun_gpus=() trainer_gpus=()
if [[ -n ${GPUS_PER_NODE:-} ]]; then
  (( per_node <= GPUS_PER_NODE )) ||
    { echo "srun.sh: $per_node ranks per node but $GPUS_PER_NODE GPUs" >&2; exit 2; }
  srun_gpus=(--gpus-per-node="$GPUS_PER_NODE")
  trainer_gpus=(--set run.device=cuda)
fi
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=close OMP_PLACES=cores
# Note [Stop marker]: the job's exit code may not be the ranks' 75 (srun interrupted itself);
# the run directory's 'stopped' says the run saved and stopped on a signal.
run_dir=$("${TRAINER:-trainer}" config "$@" --run-dir) || exit $?  # the config's error, exit 2
stopped=$run_dir/stopped
rm -f "$stopped"
rc=0
srun --mpi=pmix --nodes="$nodes" --ntasks-per-node="$per_node" --cpus-per-task="$threads" \
  --cpu-bind=cores --kill-on-bad-exit=1 "${srun_gpus[@]}" "${TRAINER:-trainer}" train "$@" \
  "${trainer_gpus[@]}" || rc=$?
[[ $rc -ne 0 && -f $stopped ]] && rc=75
exit "$rc"
