#!/usr/bin/env bash
# Launch with Open MPI's mpirun on one node or several (HOSTFILE: one line "host slots=N" each):
#   scripts/launch/mpirun.sh RANKS CONFIG [--set key=value ...]
# Ranks are spread by slot, each with its share of the node's cores as OpenMP threads, bound.
# Between nodes the ranks' TCP interface is dist.interface's choice (docs/launching.md); BTL_IF
# names it for Open MPI instead (btl_tcp_if_include), and for mpirun's own daemons too
# (oob_tcp_if_include), e.g. eth0 or 10.0.0.0/8. mpirun starts its daemon on the other hosts
# through ssh, or the agent OMPI_MCA_plm_rsh_agent names. For GPUs set run.device=cuda and the
# NCCL variables (see srun.sh).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: mpirun.sh RANKS CONFIG [--set k=v ...]" >&2; exit 2; }
ranks=$1
shift
per_node=${RANKS_PER_NODE:-$ranks}
threads=$(( $(nproc) / per_node > 0 ? $(nproc) / per_node : 1 ))
args=(-np "$ranks" --map-by "ppr:${per_node}:node:pe=${threads}" --bind-to core
      -x OMP_NUM_THREADS="$threads" -x OMP_PROC_BIND=close -x OMP_PLACES=cores)
[[ -n ${HOSTFILE:-} ]] && args+=(--hostfile "$HOSTFILE")
[[ -n ${BTL_IF:-} ]] && args+=(--mca btl_tcp_if_include "$BTL_IF" --mca oob_tcp_if_include "$BTL_IF")
for v in NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_DISABLE NCCL_DEBUG; do
  [[ -n ${!v:-} ]] && args+=(-x "$v")
done
[[ $(id -u) -eq 0 ]] && args+=(--allow-run-as-root)
# Note [Stop marker]: mpirun that got the SIGINT itself (Ctrl-C) exits 1 although the ranks
# saved and exited 75; the run directory's 'stopped' says so.
run_dir=$("${TRAINER:-trainer}" config "$@" --run-dir) || exit $?  # the config's error, exit 2
stopped=$run_dir/stopped
rm -f "$stopped"
rc=0
mpirun "${args[@]}" "${TRAINER:-trainer}" train "$@" || rc=$?
[[ $rc -ne 0 && -f $stopped ]] && rc=75
exit "$rc"
