# Sourced by the end-to-end scripts that check refusals through the binary:
#   expect <exit code> <regex> <trainer arguments...>
# runs "$TRAINER" with the arguments and counts a failure in $failures (printing the output's
# first lines) unless it exits with that code and its output matches the regex.
failures=0
expect() {
  local want=$1 pattern=$2
  shift 2
  local out rc
  out=$("$TRAINER" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want ]] || ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL: trainer $* -> exit $rc (want $want), output:"
    echo "$out" | head -5
    failures=$((failures + 1))
  fi
}
