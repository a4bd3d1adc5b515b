# Sourced by the end-to-end scripts that signal one rank of an mpirun job:
# `rank_pid <run name> <rank>` prints that rank's pid (the process whose command line names the
# run and whose environment says OMPI_COMM_WORLD_RANK=<rank>), or nothing.
rank_pid() {
  local pid
  for pid in $(pgrep -f "run.name=$1" || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$pid"
      return
    fi
  done
}
