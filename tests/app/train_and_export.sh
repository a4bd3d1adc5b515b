# Sourced by the end-to-end scripts that compare layouts: `run <ranks> <name> [--set ...]`
# trains "$TRAINER" on <ranks> ranks under "$MPIEXEC" (one thread each) with the script's
# `common` options and run.name=<name>, its output in <name>.log (a failure prints the log's
# end and exits 1), then exports the result to exports/<name>.
run() {
  local np=$1 name=$2
  shift 2
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" \
    "$TRAINER" train "${common[@]}" --set run.name="$name" "$@" >"$name.log" 2>&1 ||
    { echo "FAIL: run $name"; tail -5 "$name.log"; exit 1; }
  "$TRAINER" export "runs/$name" --out "exports/$name" >/dev/null
}
