#!/usr/bin/env bash
# The CPU step time of one trainer binary against another's (a change against its base), for
# every architecture, in one run: `trainer bench` of each, interleaved round by round so that a
# busy machine slows both alike; prints each median and their ratio (new / base).
#   scripts/bench/step_ratio.sh BASE_TRAINER [NEW_TRAINER] [rounds]
# NEW_TRAINER defaults to build/trainer; a base binary comes from building the base commit
# (git worktree add /tmp/base <commit> && scripts/build.sh /tmp/base/build).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BASE="$1"
NEW="${2:-$ROOT/build/trainer}"
ROUNDS="${3:-5}"
source "$ROOT/scripts/bench/bench_args.sh"
archs=$("$NEW" config --schema | sed -n 's/^| `model.arch` | one of \([a-z0-9, ]*\) |.*/\1/p' | tr -d ,)
for arch in $archs; do
  # A binary that predates an architecture cannot run it: compare what both have.
  bench_run "$BASE" --set model.arch="$arch" --steps 1 --peak-gflops 1 >/dev/null 2>&1 || continue
  for ((r = 0; r < ROUNDS; ++r)); do
    for who in base new; do
      bin=$BASE
      [ "$who" = new ] && bin=$NEW
      ms=$(bench_run "$bin" --set model.arch="$arch" --steps 10 --peak-gflops 100 | sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p')
      echo "$arch $who $ms"
    done
  done
done | python3 -c '
import collections, statistics, sys
d = collections.defaultdict(list)
for line in sys.stdin:
    arch, who, ms = line.split()
    d[arch, who].append(float(ms))
for arch in dict.fromkeys(a for a, _ in d):
    b, n, k = statistics.median(d[arch, "base"]), statistics.median(d[arch, "new"]), len(d[arch, "new"])
    print(f"{arch}: base {b:.1f} ms/step, new {n:.1f} ms/step (medians of {k}), new / base = {n / b:.3f}")
'
