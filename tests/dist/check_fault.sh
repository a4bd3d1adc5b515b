#!/usr/bin/env bash
# Runs dist_fault_driver under mpirun and checks that the job fails (non-zero), in time, with
# the expected message. Usage: check_fault.sh kill|stall|mismatch DRIVER [MPIEXEC]
set -u
mode=$1 driver=$2 mpiexec=${3:-mpirun} extra=""
# The driver's timeout is 3 s (kTimeoutS); start-up, the survivors' MPI_Abort and mpirun's
# teardown add about a second each: 20 s leaves 3x for a loaded machine.
limit_s=20
case $mode in
  # mpirun would kill the job itself when rank 1 dies; turn that off so the survivors' own
  # timeout is what ends it (as under launchers that do not watch their children).
  kill) np=3 extra="--mca orte_abort_on_non_zero_status 0"
        want='timed out after 3.0 s on rank [02]: rank 1 on [^ ]+ does not answer' ;;
  stall) np=3 want='timed out after 3.0 s on rank [02]: rank 1 on [^ ]+ does not answer' ;;
  mismatch) np=2 want="the resolved config differs between ranks: rank\\(s\\) 1 do not match rank 0, first at 'optimizer.lr': rank 0 has 'lr: 0.1', rank 1 has 'lr: 0.2'" ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
log=$(mktemp)
start=$(date +%s.%N)
# A hang guard at twice the limit, so that a hang is reported here within the test's 60 s.
OMP_NUM_THREADS=1 timeout $((2 * limit_s)) "$mpiexec" --allow-run-as-root --oversubscribe $extra \
  -np $np -x OMP_NUM_THREADS=1 "$driver" "$mode" >"$log" 2>&1
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$log"
echo "check_fault: mode=$mode rc=$rc elapsed=${elapsed}s"
fail=0
if [ $rc -eq 0 ]; then echo "check_fault: FAIL: the job exited 0"; fail=1; fi
if [ $rc -eq 124 ]; then echo "check_fault: FAIL: the job hung"; fail=1; fi
if ! grep -Eq "$want" "$log"; then echo "check_fault: FAIL: no line matches /$want/"; fail=1; fi
if (( $(echo "$elapsed > $limit_s" | bc) )); then
  echo "check_fault: FAIL: took ${elapsed}s > ${limit_s}s"; fail=1
fi
rm -f "$log"
exit $fail
