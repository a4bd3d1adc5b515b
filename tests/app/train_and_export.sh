# Sourced by the end-to-end scripts that train on several layouts:
#   train_run <ranks> <name> [--set ...]
# trains "$TRAINER" on <ranks> ranks under "$MPIEXEC" (one thread each) with the script's
# `common` options and run.name=<name>, its output appended to <name>.log (a failure prints
# the log's end and exits 1);
#   run <ranks> <name> [--set ...]
# does the same, then exports the result to exports/<name>.
train_run() {
  local np=$1 name=$2
  shift 2
  OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np "$np" \
    "$TRAINER" train "${common[@]}" --set run.name="$name" "$@" >>"$name.log" 2>&1 ||
    { echo "FAIL: run $name"; tail -5 "$name.log"; exit 1; }
}
run() {
  train_run "$@"
  "$TRAINER" export "runs/$2" --out "exports/$2" >/dev/null
}
