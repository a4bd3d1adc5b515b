# Sourced by the end-to-end scripts that signal one rank of a job they started. Processes are
# found among the descendants of the job's own launcher, never by name across the machine, so
# a test sees only its own processes whatever else runs beside it.
#   descendants <pid>: the pids of every process below <pid>, breadth first.
#   rank_pid <job pid> <rank>: the pid of the descendant of <job pid> whose environment says
#     OMPI_COMM_WORLD_RANK=<rank>, or nothing.
descendants() {
  local level=$1 next pid
  while [[ -n $level ]]; do
    next=""
    for pid in $level; do next+=" $(pgrep -P "$pid" | tr '\n' ' ')"; done
    level=$(echo $next)
    [[ -z $level ]] || echo "$level" | tr ' ' '\n'
  done
}
rank_pid() {
  local pid
  for pid in $(descendants "$1"); do
    if grep -qzx "OMPI_COMM_WORLD_RANK=$2" "/proc/$pid/environ" 2>/dev/null; then
      echo "$pid"
      return
    fi
  done
}
