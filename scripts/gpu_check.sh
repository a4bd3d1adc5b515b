#!/usr/bin/env bash
# The GPU check: everything CUDA, on a machine with a GPU, in one call.
#
#   scripts/gpu_check.sh pack      here (Debian, no GPU): builds the CUDA backend (sm_90, sm_80)
#                                  with its tests and packs the binaries and the libraries they
#                                  need into gpu-check.tar.xz (git-ignored, under 64 MiB)
#   scripts/gpu_check.sh run       on the GPU machine (the device tool, carrying gpu-check.tar.xz):
#                                  unpacks it and runs the main checks below (about 5 minutes
#                                  expected on one H200, never more than 8: see the limits)
#   scripts/gpu_check.sh sanitize  likewise, for GPU time left after `run` (a call of its own):
#                                  the CUDA parity cases under compute-sanitizer (under 5 minutes)
#   scripts/gpu_check.sh all       run, then sanitize, in one call of at most 600 s (their budgets
#                                  cut to 340 s and 220 s): the one call a lent GPU needs
#   scripts/gpu_check.sh selftest  here, no GPU and no build: rehearses the machinery with stand-in
#                                  binaries and injected failures (CTest: app_gpu_check_selftest)
#   scripts/gpu_check.sh rehearse TRAINER   here: the main check through a CPU build, every CUDA
#                                  request run small on the CPU (CTest: app_gpu_check_rehearsal)
#   (`checks` and `sanitize-checks` are the two inside the bundle, with the binaries on PATH.)
#
# The main checks, in order (each makes one row of the table):
#   1. the GPU and driver (nvidia-smi);
#   2. CUDA memory round trips (runtime_cuda_test), and every NCCL collective the trainer issues
#      on device buffers, over one rank and a group split from it (dist_nccl_test);
#   3. every op on CUDA against the CPU fp32 reference, fp32 and bf16, fresh random inputs and
#      poisoned outputs, and one whole training step, and CUDA graphs' replay of eager steps
#      (nn_backend_parity_test's CUDA cases: every case whose name has cuda, Cuda or CUDA);
#   4. step time, tokens/s, MFU against 989 TFLOP/s, device memory and each kernel family's
#      share of the step (CUDA events) on the GPU: GPT-2 124M and 350M shapes, bf16, T=1024,
#      eager with the profile, eager without it, and replayed as CUDA graphs; Llama (grouped-
#      query) and GPT-NeoX at the 124M shape, each with its fallbacks; 124M with the attention
#      backward that accumulates dQ (right after parity: the rows that matter most go before
#      the steps that could spend the budget); the versions of the CUDA runtime, driver,
#      cuBLASLt, cuDNN and NCCL the bench loaded;
#   5. a small corpus (tokenizer and shards, on the CPU); 20 training steps of a small GPT-2 and
#      a small Llama on the GPU and on the CPU from the same initialisation and data: the loss
#      curves must agree (fp32: 1e-3 relative);
#   6. DDP through a 1-rank NCCL communicator (dist.backend: nccl) gives the same losses; so do
#      CUDA graphs (train.cuda_graphs), bf16, in stream and bucket batches and under 1-rank NCCL
#      DDP, bit for bit; how much of that all-reduce hides behind backward at the 124M shape; a
#      checkpoint written on the GPU resumes on the CPU.
# A last row gives each step's seconds against its limit, which checks the limits' estimates.
# Every loss compared must be there (one per step) and finite: a run that logs NaN ("loss":null)
# or nothing fails its row, however well it matches another.
# sanitize: compute-sanitizer's memcheck on every CUDA parity case (two rows), and racecheck on
# the cases whose kernels use shared memory (__shared__: column_sums.cuh behind the layernorm,
# rmsnorm and linear bias gradients, cross_entropy, sum_squares). compute-sanitizer is looked
# for as $COMPUTE_SANITIZER (alone, when set), on PATH, under /usr/local/cuda*, /opt/nvidia and
# the Python NVIDIA wheels; without it the rows say SKIP. It needs a Firecracker machine
# (docs of the device tool: gVisor refuses it).
#
# Each step runs under `timeout` with its own limit in seconds (below; GPU_CHECK_LIMIT=N caps them
# all), its output in <step>.log. A step that fails, hangs past its limit or leaves no usable output
# makes a FAIL row naming its log and why (the exit code, or "timed out after N s"), and the
# check goes on; rows that need an earlier step that failed say "SKIP (needs <step>)". Expected
# on one H200 when all passes (never yet measured): parity 40 s, the 10 small runs 5-10 s each,
# the two 124M-block runs and the 9 benches 10-20 s each, about 5 minutes in all. The limits add
# up to more, so the whole check also has a budget (GPU_CHECK_BUDGET: 480 s for run, 300 s for
# sanitize): each step's limit is cut to what is left, and steps past it say "SKIP (out of time)".
# So `run` ends within 8 minutes even when steps hang; give the device call timeout_s 600.
#
# Under $OUT (default /tmp/gpu-check-out): table.txt, each row appended as it is made (a run cut
# off still returns what it measured), and logs.txt, every step's log appended as the step ends
# ("==== <step>.log: exit N after S s"); sanitize writes sanitize-table.txt and sanitize-logs.txt.
# The table is printed last, its final row counting the FAIL and SKIP rows; the exit status is 1
# when a row failed.
#
# GPU_CHECK_INJECT (the selftest's): a comma-separated list of fail:<step> (the step exits 3),
# hang:<step> (it sleeps until its limit), nan:<run> and empty:<run> (a training run's
# metrics.jsonl gets "loss":null, or nothing), fallback:bench (the stand-in bench of the fast
# attention backward reports a fallback).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARBALL="$ROOT/gpu-check.tar.xz"

# Limits in seconds, each step's (expected when passing in brackets, never yet measured).
T_SMI=30        # nvidia-smi (1 s)
T_TEST=60       # runtime_cuda_test (3 s)
T_PARITY=180    # the CUDA parity cases, 179 (40 s), and ~26 cuDNN plan builds (0.5-2 s each)
T_LIST=30       # a gtest binary's --gtest_list_tests (1 s)
T_CORPUS=60     # the tokenizer, and the shards (5 s each, CPU)
T_TRAIN=60      # each 20-step run of the small model, 10 of them, and the resume (5-10 s)
T_CHECK=30      # each comparison of metrics (python, 1 s)
T_BIG=90        # each 30-step run of 124M blocks, 2 of them (15 s)
T_BENCH=90      # each bench at T=1024, 9 of them (15 s)
T_MEMCHECK=100  # each of the 2 memcheck runs, 87 and 92 cases
T_RACECHECK=60  # racecheck, 18 cases

pack() {
  set -e
  local build="$ROOT/build-gpu"
  cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON \
    -DTRAINER_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES="90;80" >/dev/null
  ninja -C "$build" trainer runtime_cuda_test nn_backend_parity_test dist_nccl_test
  bash "$ROOT/scripts/gpu/bundle.sh" pack "$TARBALL" "$build/trainer" \
    "$build/tests/runtime/runtime_cuda_test" "$build/tests/nn/nn_backend_parity_test" \
    "$build/tests/dist/dist_nccl_test"
}

# ---- the machinery: rows, steps and their limits ----------------------------------------------

# begin PREFIX BUDGET: starts a check: $OUT/PREFIXtable.txt and $OUT/PREFIXlogs.txt emptied, a work
# folder, and BUDGET seconds for all its steps (GPU_CHECK_BUDGET when set).
begin() {
  OUTDIR=${OUT:-/tmp/gpu-check-out}
  mkdir -p "$OUTDIR"
  TABLE="$OUTDIR/${1}table.txt"
  LOGFILE="$OUTDIR/${1}logs.txt"
  : >"$TABLE"
  : >"$LOGFILE"
  BUDGET=${GPU_CHECK_BUDGET:-$2}
  T0=$SECONDS
  WORK=$(mktemp -d /tmp/gpu-check.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
  LOGS="$WORK/logs"
  mkdir -p "$LOGS" "$WORK/runs"
  INJECT=",${GPU_CHECK_INJECT:-},"
  FAILS=0 SKIPS=0 ROWS=0 TIMES=()
  declare -gA passed=()
}

# row LABEL TEXT: one row of the table, appended to $TABLE at once.
row() {
  local line
  line=$(printf '%-44s %s' "$1" "$2")
  printf '%s\n' "$line" >>"$TABLE"
  echo "== $1: $2"
  ROWS=$((ROWS + 1))
  case $2 in
    FAIL*) FAILS=$((FAILS + 1)) ;;
    SKIP*) SKIPS=$((SKIPS + 1)) ;;
  esac
}

# end: each step's time against its limit (the limits' estimates are checked by it), the count
# row, the table printed last; false when a row failed.
end() {
  row "(step s / limit s)" "${TIMES[*]:-none}"
  row "(done)" "$ROWS rows, $FAILS FAIL, $SKIPS SKIP, in $((SECONDS - T0)) s; logs in $LOGFILE"
  printf '\n'
  cat "$TABLE"
  ((FAILS == 0))
}

# step NAME LIMIT CMD...: runs CMD, its output in $LOGS/NAME.log (then appended to $LOGFILE),
# stopped after LIMIT seconds (TERM, then KILL 10 s later). True when it exits 0; otherwise $why
# is the text of the row: "FAIL: exit N (NAME.log: its last line)", "FAIL: timed out after N s
# (NAME.log)", or "SKIP (out of time ...)" when the check's budget is spent before it starts.
step() {
  local name=$1 limit=$2 rc start left last log="$LOGS/$1.log"
  shift 2
  left=$((BUDGET - (SECONDS - T0)))
  if ((left < 5)); then
    why="SKIP (out of time: the check's ${BUDGET} s budget is spent)"
    return 1
  fi
  local cut=""
  ((limit > left)) && { limit=$left; cut=", the end of the check's budget"; }
  [[ -n ${GPU_CHECK_LIMIT:-} ]] && ((limit > GPU_CHECK_LIMIT)) && limit=$GPU_CHECK_LIMIT
  case $INJECT in
    *",fail:$name,"*) set -- bash -c 'echo "injected failure"; exit 3' ;;
    *",hang:$name,"*) set -- sleep 100000 ;;
  esac
  start=$SECONDS
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null
  rc=$?
  keep_log "$name" "exit $rc after $((SECONDS - start)) s, limit $limit s"
  TIMES+=("$name $((SECONDS - start))/$limit")
  if ((rc == 0)); then
    passed[$name]=1
    why="exit 0 ($name.log)"
    return 0
  fi
  last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c 1-120)
  if ((rc == 124 || (rc == 137 && SECONDS - start >= limit))); then
    why="FAIL: timed out after $limit s$cut ($name.log${last:+: $last})"
  else
    why="FAIL: exit $rc ($name.log${last:+: $last})"
  fi
  return 1
}

# keep_log NAME STATUS: NAME.log appended to $LOGFILE under a header (its first 256 KiB and last
# 768 KiB when longer than 1 MiB).
keep_log() {
  local log="$LOGS/$1.log"
  {
    printf '==== %s.log: %s\n' "$1" "$2"
    if (($(stat -c %s "$log") > 1048576)); then
      head -c 262144 "$log"
      printf '\n[... cut ...]\n'
      tail -c 786432 "$log"
    else
      cat "$log"
    fi
    printf '\n'
  } >>"$LOGFILE"
}

# needs LABEL STEP...: true when every STEP passed; otherwise a "SKIP (needs STEP)" row for LABEL.
needs() {
  local label=$1 s
  shift
  for s; do
    if [[ -z ${passed[$s]:-} ]]; then
      row "$label" "SKIP (needs $s)"
      return 1
    fi
  done
}

# tail_row LABEL NAME: a row from a passed step's last line of output, or FAIL when it has none.
tail_row() {
  local text
  text=$(grep -v '^[[:space:]]*$' "$LOGS/$2.log" | tail -n 1)
  if [[ -n $text ]]; then row "$1" "$text"; else row "$1" "FAIL: no output ($2.log)"; fi
}

# gtest_row LABEL NAME LIMIT FILTER BINARY [LAUNCHER...]: the gtest cases FILTER selects, run
# (under LAUNCHER: compute-sanitizer and its options) as step NAME. The row passes when every case
# listed ran and passed, none skipped (no GPU skips them), and a sanitizer's summary counts none.
gtest_row() {
  local label=$1 name=$2 limit=$3 filter=$4 binary=$5 listed=0 ok failed skipped summary='' text
  shift 5
  if step "$name-list" "$T_LIST" "$binary" --gtest_list_tests --gtest_filter="$filter"; then
    listed=$(grep -c '^  ' "$LOGS/$name-list.log")
  fi
  step "$name" "$limit" "$@" "$binary" --gtest_filter="$filter"
  local rc=$? log="$LOGS/$name.log"
  [[ $why == SKIP* ]] && { row "$label" "$why"; return; }
  ok=$(grep -c '^\[       OK \]' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log")
  (($# > 0)) && summary=$(grep -oE '(ERROR|RACECHECK) SUMMARY: .*' "$log" | tail -n 1)
  text="$ok of $listed cases"
  if ((rc == 0 && ok == listed && ok > 0 && failed == 0 && skipped == 0)) &&
      { (($# == 0)) || [[ $summary =~ SUMMARY:\ 0\ (error|hazard) ]]; }; then
    row "$label" "pass: ${summary:+$summary; }$text"
  else
    (($# > 0)) && summary=${summary:-no sanitizer summary}
    row "$label" "FAIL: $text, $failed failed, $skipped skipped${summary:+, $summary}; ${why#FAIL: }"
  fi
}

# ---- the main checks --------------------------------------------------------------------------

# A small model trained 20 steps: train_small [-t LIMIT] DEVICE ARCH [NAME [OPTION...]] (NAME
# defaults to ARCH-DEVICE; OPTIONs are more --set pairs), as step NAME, into $WORK/runs/NAME.
train_small() {
  local limit=$T_TRAIN
  [[ $1 == -t ]] && { limit=$2; shift 2; }
  local device=$1 arch=$2 name=${3:-$2-$1}
  shift 2
  [[ $# -gt 0 ]] && shift
  step "$name" "$limit" trainer train --set data.path="$WORK/corpus" \
    --set data.tokenizer="$WORK/tok.model" \
    --set run.dir="$WORK/runs" --set run.name="$name" --set run.device="$device" \
    --set model.arch="$arch" --set model.vocab_size=512 --set model.n_layer=2 \
    --set model.n_head=4 --set model.n_embd=128 --set model.max_seq_len=64 \
    --set data.seq_len=64 --set data.batch_size=8 --set train.steps=20 --set train.val_every=0 \
    --set checkpoint.every=10 --set log.every=1 --set log.progress=off \
    --set optimizer.lr=3e-3 --set log.peak_gflops=1000 "$@" || return 1
  local metrics="$WORK/runs/$name/metrics.jsonl"
  case $INJECT in
    *",nan:$name,"*) sed -i 's/"loss":[^,}]*/"loss":null/' "$metrics" ;;
    *",empty:$name,"*) : >"$metrics" ;;
  esac
  return 0
}

# compare LABEL VERDICT STEPS RUN...: a row from check.py's VERDICT on the runs' metrics.jsonl
# (each must hold STEPS finite losses), its one line, pass or FAIL.
compare() {
  local label=$1 verdict=$2 steps=$3 name last
  shift 3
  name="check-$verdict-${*: -1}"
  if step "$name" "$T_CHECK" python3 "$WORK/check.py" "$verdict" "$steps" "${@/#/$WORK/runs/}"; then
    tail_row "$label" "$name"
  else
    last=$(tail -n 1 "$LOGS/$name.log" 2>/dev/null)
    if [[ $last == FAIL:* ]]; then row "$label" "$last ($name.log)"; else row "$label" "$why"; fi
  fi
}

# The verdicts on training runs (their folders, each with its metrics.jsonl): one line, pass or
# FAIL (exit 1). Every loss must be there, one per step, and finite (NaN is logged as null).
write_checker() {
  cat >"$WORK/check.py" <<'PY'
import json, math, statistics, sys

def fail(why):
    print(f"FAIL: {why}")
    sys.exit(1)

def records(run):
    name = run.rstrip("/").rsplit("/", 1)[-1]
    try:
        with open(f"{run}/metrics.jsonl") as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        fail(f"{name}/metrics.jsonl: {e.strerror}")
    except ValueError as e:
        fail(f"{name}/metrics.jsonl is not JSON lines: {e}")

def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

def losses(run, steps):
    name = run.rstrip("/").rsplit("/", 1)[-1]
    rows = [r for r in records(run) if "loss" in r]
    if len(rows) != steps:
        fail(f"{name} logged {len(rows)} losses, not {steps}")
    bad = [r.get("step") for r in rows if not finite(r["loss"])]
    if bad:
        fail(f"{name}'s loss is not finite at step {bad[0]} ({len(bad)} of {steps} steps)")
    return [float(r["loss"]) for r in rows]

def median(run, key):
    vals = [r.get(key) for r in records(run) if "step_ms" in r and r.get("step", 0) > 10]
    vals = [v for v in vals if finite(v)]
    if not vals:
        fail(f"{run.rsplit('/', 1)[-1]} logged no {key} after step 10")
    return statistics.median(vals)

verdict, steps, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
names = [r.rstrip("/").rsplit("/", 1)[-1] for r in runs]
if steps < 1:
    fail("no steps to compare")
if verdict == "close":  # a reference run, another: within 1e-3 relative at every step
    c, g = losses(runs[0], steps), losses(runs[1], steps)
    err = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(g, c)]
    k = max(range(steps), key=err.__getitem__)
    text = (f"loss {c[0]:.4f} -> {c[-1]:.4f} ({names[0]}), {g[-1]:.4f} ({names[1]}), "
            f"worst step {err[k]:.1e}")
    if not err[k] < 1e-3:
        fail(f"{text} (step {k + 1}), over 1e-3")
    print(f"pass: {text}")
elif verdict == "same":  # bit for bit
    a, b = losses(runs[0], steps), losses(runs[1], steps)
    diff = [i for i in range(steps) if a[i] != b[i]]
    if diff:
        i = diff[0]
        fail(f"losses differ from {names[0]}'s at {len(diff)} of {steps} steps, first step "
             f"{i + 1}: {b[i]!r} vs {a[i]!r}")
    print(f"pass: the same losses as {names[0]}")
elif verdict == "finite":
    a = losses(runs[0], steps)
    print(f"pass: {steps} finite losses, {a[0]:.4f} -> {a[-1]:.4f}")
elif verdict == "overlap":  # without NCCL, with: the all-reduce time not hidden behind backward
    losses(runs[0], steps), losses(runs[1], steps)
    plain, nccl = median(runs[0], "step_ms"), median(runs[1], "step_ms")
    busy = median(runs[1], "comm_busy_ms")
    hidden = (f"{100 * (1 - max(0.0, nccl - plain) / busy):.0f}% hidden" if busy > 0
              else "nothing to hide")
    print(f"step {nccl:.1f} ms with NCCL, {plain:.1f} ms without; all-reduce busy {busy:.2f} ms, "
          f"{hidden}")
else:
    fail(f"unknown verdict {verdict}")
PY
}

# fallback_row LABEL LOG: passes when the bench ran every planned kernel (its result line says
# "fallbacks: none"); otherwise FAIL with each path that fell back, so that a step time measured
# on a fallback (cuDNN attention refused, a cuBLASLt epilogue declined) is never taken for ours.
fallback_row() {
  local result paths
  result=$(grep '^bench ' "$2" | tail -n 1)
  if [[ $result == *"| fallbacks: none"* ]]; then
    row "$1" "pass: none"
  elif [[ $result == *"| fallbacks: "* ]]; then
    paths=$(sed -n 's/^  fallback: //p' "$2" | paste -sd';' | cut -c1-300)
    row "$1" "FAIL: ${paths:-see $(basename "$2")}"
  else
    row "$1" "FAIL: no fallbacks in the result line ($(basename "$2"))"
  fi
}

# speed NAME: "ms/step, tok/s, MFU" of bench-NAME's result line, or nothing.
speed() {
  grep '^bench ' "$LOGS/bench-$1.log" | tail -n 1 |
    sed -n 's/.*: \([0-9.]* ms\/step\) | \([0-9]* tok\/s\).*MFU \([0-9.]*%\).*/\1, \2, MFU \3/p'
}

# bench_rows NAME ARGS...: the bench of one shape, eager with the profile, eager without it,
# then as CUDA graphs.
bench_rows() {
  local name=$1 line
  shift
  if step "bench-$name" "$T_BENCH" trainer bench --set run.device=cuda --set model.precision=bf16 "$@" \
      --set model.vocab_size=50304 -B 8 -T 1024 --steps 10 --peak-gflops 989000 --profile; then
    line=$(grep '^bench ' "$LOGS/bench-$name.log" | tail -n 1 | sed -n 's/.*: \([0-9.]* ms\/step\) | \([0-9]* tok\/s\).*MFU \([0-9.]*%\).*device buffers \([0-9.]* MiB\).*/\1, \2, MFU \3 (of 989 TFLOP\/s), \4 device memory/p')
    row "bench GPT-2 $name bf16 T=1024" "${line:-FAIL: no result line (bench-$name.log)}"
    if [[ $name == 124M ]]; then  # the libraries the process loaded, once
      line=$(sed -n 's/^versions: //p' "$LOGS/bench-$name.log")
      row "  versions" "${line:-FAIL: no versions line (bench-$name.log)}"
    fi
    line=$(sed -n 's/^  families: //p' "$LOGS/bench-$name.log")
    row "  kernel families, GPT-2 $name" "${line:-FAIL: no families line (bench-$name.log)}"
    fallback_row "  fallbacks, GPT-2 $name" "$LOGS/bench-$name.log"
  else
    row "bench GPT-2 $name bf16 T=1024" "$why"
    row "  kernel families, GPT-2 $name" "SKIP (needs bench-$name)"
    row "  fallbacks, GPT-2 $name" "SKIP (needs bench-$name)"
  fi
  # Eager without the profile's events: what a run's step costs.
  if step "bench-$name-eager" "$T_BENCH" trainer bench --set run.device=cuda \
      --set model.precision=bf16 "$@" --set model.vocab_size=50304 -B 8 -T 1024 --steps 10 \
      --peak-gflops 989000; then
    line=$(speed "$name-eager")
    row "  eager, no profile" "${line:-FAIL: no result line (bench-$name-eager.log)}"
  else
    row "  eager, no profile" "$why"
  fi
  if step "bench-$name-graphs" "$T_BENCH" trainer bench --set run.device=cuda --set model.precision=bf16 "$@" \
      --set model.vocab_size=50304 -B 8 -T 1024 --steps 10 --peak-gflops 989000 \
      --set train.cuda_graphs=true; then
    line=$(speed "$name-graphs")
    row "  with CUDA graphs" "${line:-FAIL: no result line (bench-$name-graphs.log)}"
  else
    row "  with CUDA graphs" "$why"
  fi
}

# arch_bench LABEL NAME ARGS...: another architecture at the 124M shape, bf16, T=1024, eager:
# its speed, and whether any of its kernels fell back (grouped-query attention, NeoX's fused
# products and partial rotary in cuDNN's and cuBLASLt's hands).
arch_bench() {
  local label=$1 name=$2 line
  shift 2
  if step "bench-$name" "$T_BENCH" trainer bench --set run.device=cuda --set model.precision=bf16 \
      --set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12 \
      --set model.vocab_size=50304 "$@" -B 8 -T 1024 --steps 10 --peak-gflops 989000; then
    line=$(speed "$name")
    row "bench $label bf16 T=1024" "${line:-FAIL: no result line (bench-$name.log)}"
    fallback_row "  fallbacks, $label" "$LOGS/bench-$name.log"
  else
    row "bench $label bf16 T=1024" "$why"
    row "  fallbacks, $label" "SKIP (needs bench-$name)"
  fi
}

checks() {
  begin "" 480
  write_checker
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}  # NCCL's own account of what failed, in the NCCL rows' logs

  if step nvidia-smi "$T_SMI" bash -c \
      'nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader'
  then tail_row "GPU" nvidia-smi; else row "GPU" "$why"; fi

  gtest_row "memory round trips" runtime_cuda_test "$T_TEST" '*' runtime_cuda_test
  gtest_row "NCCL collectives, 1 rank" nccl "$T_TEST" '*' dist_nccl_test
  gtest_row "op parity (CUDA vs CPU fp32)" parity "$T_PARITY" '*cuda*:*Cuda*:*CUDA*' \
    nn_backend_parity_test

  # MFU against 989 TFLOP/s, the H100/H200 datasheet's dense bf16 rate; the profile's kernel
  # families are timed by CUDA events on the model's stream. Right after parity: the rows that
  # matter most, before the training steps whose limits add up to more than the budget.
  bench_rows 124M --set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12
  bench_rows 350M --set model.n_layer=24 --set model.n_embd=1024 --set model.n_head=16
  arch_bench "Llama 124M shape, GQA" llama --set model.arch=llama --set model.n_kv_head=4
  arch_bench "NeoX 124M shape" neox --set model.arch=neox --set model.rotary_pct=0.25
  # The attention backward that accumulates dQ (train.attention_backward: fast), 124M.
  if step "bench-124M-fast" "$T_BENCH" trainer bench --set run.device=cuda --set model.precision=bf16 \
      --set model.n_layer=12 --set model.n_embd=768 --set model.n_head=12 --set model.vocab_size=50304 \
      -B 8 -T 1024 --steps 10 --peak-gflops 989000 --set train.attention_backward=fast; then
    line=$(speed 124M-fast)
    row "  attention backward fast, 124M" "${line:-FAIL: no result line (bench-124M-fast.log)}"
    fallback_row "  fallbacks, GPT-2 124M-fast" "$LOGS/bench-124M-fast.log"
  else
    row "  attention backward fast, 124M" "$why"
  fi

  # A small corpus from a generated text, tokenizer and shards made by the bundled trainer. The
  # text has about 440 pieces to learn: a vocabulary of 500 is refused (found in rehearsal).
  local i arch mode
  for i in $(seq 1 3000); do
    echo "the quick brown fox number $((i % 97)) jumps over the lazy dog near river $((i % 13))."
    echo "a lazy dog sleeps while the fox runs $((i % 7)) times around the old red barn."
    echo
  done >"$WORK/text.txt"
  if step tokenizer "$T_CORPUS" trainer tokenizer train --input "$WORK/text.txt" \
        --vocab-size 384 --out "$WORK/tok.model" &&
      step prepare "$T_CORPUS" trainer prepare --tokenizer "$WORK/tok.model" \
        --input "$WORK/text.txt" --out "$WORK/corpus" --val-fraction 0.05; then
    passed[corpus]=1
    row "corpus (tokenizer and shards, CPU)" "pass"
  else
    row "corpus (tokenizer and shards, CPU)" "$why"
  fi

  for arch in gpt2 llama; do
    local label="20 steps $arch, GPU vs CPU"
    needs "$label" corpus || continue
    if train_small cpu "$arch" && train_small cuda "$arch"; then
      compare "$label" close 20 "$arch-cpu" "$arch-cuda"
    else
      row "$label" "$why"
    fi
  done
  # LoRA: the adapters' products add into strided columns of the q/k/v and gate/up outputs
  # (cuBLASLt with beta = 1), and the frozen products skip their weight gradients.
  label="20 steps llama LoRA, GPU vs CPU"
  if needs "$label" corpus; then
    if train_small cpu llama llama-lora-cpu --set train.lora.rank=8 &&
        train_small cuda llama llama-lora-cuda --set train.lora.rank=8; then
      compare "$label" close 20 llama-lora-cpu llama-lora-cuda
    else
      row "$label" "$why"
    fi
  fi
  # DDP through a 1-rank NCCL communicator: its all-reduces run, and change nothing.
  label="1-rank NCCL DDP, 20 steps"
  if needs "$label" corpus gpt2-cuda; then
    if train_small cuda gpt2 gpt2-nccl1 --set dist.backend=nccl; then
      compare "$label" same 20 gpt2-cuda gpt2-nccl1
    else
      row "$label" "$why"
    fi
  fi
  # ZeRO-3 through a 1-rank NCCL communicator: its gathers and reduce-scatters run (the first
  # time ZeRO over NCCL runs at all), and give the eager run's losses.
  label="1-rank NCCL ZeRO-3, 20 steps"
  if needs "$label" corpus gpt2-cuda; then
    if train_small cuda gpt2 gpt2-nccl1-full --set dist.backend=nccl --set dist.sharding=full; then
      compare "$label" close 20 gpt2-cuda gpt2-nccl1-full
    else
      row "$label" "$why"
    fi
  fi
  # CUDA graphs replay the eager passes: the same losses, bit for bit (bf16; stream batches, and
  # bucket batches whose padded shapes repeat; with DDP's hooks over NCCL between the units).
  for mode in stream bucket; do
    label="CUDA graphs, 20 steps ($mode)"
    needs "$label" corpus || continue
    if train_small cuda gpt2 "eager-$mode" --set model.precision=bf16 --set data.mode="$mode" &&
        train_small cuda gpt2 "graphs-$mode" --set model.precision=bf16 \
          --set data.mode="$mode" --set train.cuda_graphs=true; then
      compare "$label" same 20 "eager-$mode" "graphs-$mode"
    else
      row "$label" "$why"
    fi
  done
  label="CUDA graphs, 1-rank NCCL DDP, 20 steps"
  if needs "$label" corpus eager-stream; then
    if train_small cuda gpt2 graphs-nccl1 --set model.precision=bf16 \
        --set train.cuda_graphs=true --set dist.backend=nccl; then
      compare "$label" same 20 eager-stream graphs-nccl1
    else
      row "$label" "$why"
    fi
  fi
  # DDP's bucketed all-reduce against backward on the GPU, through a 1-rank NCCL communicator
  # (GPT-2 124M blocks, bf16, T=1024, 25 MiB buckets): the step with NCCL less the step without
  # is the part of the collectives' busy time (CUDA events on NCCL's stream) not hidden.
  local big=(--set model.precision=bf16 --set model.n_layer=12 --set model.n_head=12
    --set model.n_embd=768 --set model.max_seq_len=1024 --set data.seq_len=1024
    --set train.steps=30 --set checkpoint.every=0 --set dist.bucket_mb=25)
  label="DDP overlap, 1-rank NCCL, 124M blocks"
  if needs "$label" corpus; then
    if train_small -t "$T_BIG" cuda gpt2 overlap-auto "${big[@]}" &&
        train_small -t "$T_BIG" cuda gpt2 overlap-nccl "${big[@]}" --set dist.backend=nccl; then
      compare "$label" overlap 30 overlap-auto overlap-nccl
    else
      row "$label" "$why"
    fi
  fi
  # The GPU's step-10 checkpoint continued on the CPU: steps 11 and 12, finite.
  label="GPU checkpoint resumed on the CPU"
  if needs "$label" corpus gpt2-cuda; then
    if step gpt2-cuda-on-cpu "$T_TRAIN" trainer train --set data.path="$WORK/corpus" \
        --set data.tokenizer="$WORK/tok.model" --set run.dir="$WORK/runs" \
        --set run.name=gpt2-cuda-on-cpu --set model.vocab_size=512 \
        --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=128 \
        --set model.max_seq_len=64 --set data.seq_len=64 --set data.batch_size=8 \
        --set train.steps=12 --set train.val_every=0 --set log.every=1 --set log.progress=off \
        --set log.peak_gflops=1000 --set optimizer.lr=3e-3 \
        --set train.resume="$WORK/runs/gpt2-cuda/checkpoints/step-10"; then
      compare "$label" finite 2 gpt2-cuda-on-cpu
    else
      row "$label" "$why"
    fi
  fi

  end
}

# ---- sanitize: the CUDA parity cases under compute-sanitizer ----------------------------------

find_sanitizer() {
  if [[ -n ${COMPUTE_SANITIZER+x} ]]; then
    [[ -x $COMPUTE_SANITIZER ]] && echo "$COMPUTE_SANITIZER"
    return
  fi
  local site f
  command -v compute-sanitizer && return
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
  for f in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
      /usr/local/cuda-*/bin/compute-sanitizer /usr/local/cuda-*/compute-sanitizer/compute-sanitizer \
      /opt/nvidia/*/compute-sanitizer /opt/nvidia/*/*/compute-sanitizer \
      $(find ${site:+"$site/nvidia"} /usr/local/lib/python3*/dist-packages/nvidia -maxdepth 4 \
        -name compute-sanitizer -type f 2>/dev/null); do
    [[ -f $f && -x $f ]] && { echo "$f"; return; }
  done
}

sanitize_checks() {
  begin sanitize- 300
  local san all='*cuda*:*Cuda*:*CUDA*' ops='EveryOp/*_cuda_fp32_*:EveryOp/*_cuda_bf16_*'
  # The ops whose CUDA kernels use shared memory, on the cuda backend (own_attention repeats them).
  local shared='*/layernorm_cuda_*:*/rmsnorm_cuda_*:*/linear_bias_cuda_*:*/gelu_linear_cuda_*'
  shared+=':*/cross_entropy_cuda_*:*/sum_squares_cuda_*-*own_attention*'
  local -a labels=("memcheck: every op on CUDA (cuDNN attention)"
    "memcheck: own attention, steps, graphs" "racecheck: ops with shared-memory kernels")
  san=$(find_sanitizer)
  if [[ -z $san ]]; then
    local l
    for l in "${labels[@]}"; do row "$l" "SKIP: compute-sanitizer not found"; done
    end
    return
  fi
  if step sanitizer-version "$T_LIST" "$san" --version; then
    row "compute-sanitizer" "$san, $(grep -m1 -i 'version' "$LOGS/sanitizer-version.log")"
  else
    row "compute-sanitizer" "$why"
  fi
  local -a opts=(--error-exitcode 99 --print-limit 50)
  gtest_row "${labels[0]}" memcheck-ops "$T_MEMCHECK" "$ops" nn_backend_parity_test \
    "$san" --tool memcheck "${opts[@]}"
  gtest_row "${labels[1]}" memcheck-rest "$T_MEMCHECK" "$all-$ops" nn_backend_parity_test \
    "$san" --tool memcheck "${opts[@]}"
  gtest_row "${labels[2]}" racecheck "$T_RACECHECK" "$shared" nn_backend_parity_test \
    "$san" --tool racecheck "${opts[@]}"
  end
}

# ---- bundle: run MODE inside the unpacked bundle ----------------------------------------------

bundled() {
  local mode=$1 table=${OUT:-/tmp/gpu-check-out}/$2 rc
  mkdir -p "$(dirname "$table")"
  rm -f "$table"
  if [[ -f $TARBALL ]]; then
    bash "$ROOT/scripts/gpu/bundle.sh" run "$TARBALL" bash "$ROOT/scripts/gpu_check.sh" "$mode"
    rc=$?
  else
    echo "gpu_check: $TARBALL is missing (scripts/gpu_check.sh pack, then carry it)" >&2
    rc=1
  fi
  if [[ ! -s $table ]]; then  # the checks never started: say so in the table
    printf '%-44s %s\n' "bundle" "FAIL: exit $rc before any check (the output above says why)" |
      tee "$table"
  fi
  return "$rc"
}

# all: run, then sanitize, in one device call of at most 600 s: each with a budget of its own
# (GPU_CHECK_RUN_BUDGET, 340 s; GPU_CHECK_SANITIZE_BUDGET, 220 s: memcheck's two steps and
# racecheck need up to 260 s, so racecheck may say SKIP), which leaves the two unpackings and
# a step's 10 s kill grace their margin. Exit 1 when either failed.
all() {
  local rc=0
  export GPU_CHECK_BUDGET=${GPU_CHECK_RUN_BUDGET:-340}
  bundled checks table.txt || rc=1
  export GPU_CHECK_BUDGET=${GPU_CHECK_SANITIZE_BUDGET:-220}
  bundled sanitize-checks sanitize-table.txt || rc=1
  return "$rc"
}

# ---- selftest: the machinery rehearsed without a GPU ------------------------------------------

# Stand-ins for the bundle's binaries, nvidia-smi and compute-sanitizer, by the name called.
write_fakes() {
  mkdir -p "$1"
  cat >"$1/fake" <<'SH'
#!/usr/bin/env bash
# gpu_check's selftest: a stand-in, acting by the name it is called by.
case $(basename "$0") in
  nvidia-smi) echo "NVIDIA Fake, 580.00, 143771 MiB" ;;
  runtime_cuda_test | nn_backend_parity_test | dist_nccl_test)
    if [[ $* == *--gtest_list_tests* ]]; then
      printf 'Cuda.\n  FreeMemoryShrinksByAnAllocation\n  BufferRoundTrip\nCudaGraphs.\n  ReplayTheEagerStepsBitForBit\n'
    else
      for t in Cuda.FreeMemoryShrinksByAnAllocation Cuda.BufferRoundTrip CudaGraphs.ReplayTheEagerStepsBitForBit; do
        printf '[ RUN      ] %s\n[       OK ] %s (1 ms)\n' "$t" "$t"
      done
    fi ;;
  compute-sanitizer)
    [[ $1 == --version ]] && { echo "Compute Sanitizer version fake"; exit 0; }
    tool=memcheck
    while [[ $1 == --* ]]; do [[ $1 == --tool ]] && tool=$2; shift 2; done
    "$@"; rc=$?
    if [[ $tool == racecheck ]]; then
      echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    else
      echo "========= ERROR SUMMARY: 0 errors"
    fi
    exit $rc ;;
  trainer)
    cmd=$1; shift
    case $cmd in
      tokenizer | prepare)
        while (($#)); do [[ $1 == --out ]] && { mkdir -p "$(dirname "$2")"; echo fake >"$2"; }; shift; done ;;
      train)
        dir= name= steps= first=1
        while (($#)); do
          case $2 in
            run.dir=*) dir=${2#*=} ;; run.name=*) name=${2#*=} ;; train.steps=*) steps=${2#*=} ;;
            train.resume=*) [[ -d ${2#*=} ]] || { echo "error: no checkpoint ${2#*=}"; exit 1; }; first=11 ;;
          esac
          shift 2
        done
        mkdir -p "$dir/$name/checkpoints/step-10"
        for ((s = first; s <= steps; s++)); do
          printf '{"step":%d,"loss":6.%04d,"step_ms":%d.5,"comm_busy_ms":1.25}\n' $s $((9000 - 100 * s)) $((40 + s % 3))
        done >"$dir/$name/metrics.jsonl" ;;
      bench)
        echo "versions: CUDA runtime 13.0, driver 13.0, cuBLASLt 13.0.0, cuDNN 9.14.0, NCCL 2.28.9"
        [[ $* == *--profile* ]] && echo "  families: gemm 61.0% attention 20.0% (between ops) 19.0%"
        fallbacks=none
        if [[ $* == *"train.attention_backward=fast"* && ${GPU_CHECK_INJECT:-} == *fallback:bench* ]]; then
          echo "  fallback: cudnn_attention_backward, 120 calls (injected)"
          fallbacks="1 path(s), see above"
        fi
        echo "bench gpt2 L=12 C=768 H=12 V=50304 B=8 T=1024 bf16 none: 100.0 ms/step | 81920 tok/s | 1.0 GFLOP/s | stated peak 989000.0 GFLOP/s | MFU 40.0% | activations 1.0 MiB | device buffers 2048.0 MiB | fallbacks: $fallbacks" ;;
    esac ;;
esac
SH
  chmod +x "$1/fake"
  local n
  for n in nvidia-smi runtime_cuda_test nn_backend_parity_test dist_nccl_test compute-sanitizer \
    trainer; do
    ln -s fake "$1/$n"
  done
}

selftest() {
  local dir bad=0 n=0 rc
  dir=$(mktemp -d /tmp/gpu-check-selftest.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$dir'" EXIT
  write_fakes "$dir/bin"
  export PATH="$dir/bin:$PATH" GPU_CHECK_LIMIT=3
  # expect TABLE LABEL PATTERN: the row LABEL of TABLE (the file) matches the regex PATTERN.
  expect() {
    local text
    n=$((n + 1))
    text=$(grep -F -- "$(printf '%-44s ' "$2")" "$1" | head -n 1 | cut -c 46-)
    if ! [[ $text =~ $3 ]]; then
      echo "selftest FAIL: $(basename "$1") row '$2' is '${text:-missing}', not /$3/"
      bad=$((bad + 1))
    fi
  }
  # ran OUT RC TABLE: the checks run with $OUT=OUT ended with status RC, not 0, and their TABLE
  # is in OUT and was printed last (their output is OUT.txt).
  ran() {
    local table=$1/$3 rows
    n=$((n + 1))
    if [[ ! -s $table ]] || (($2 == 0)); then
      echo "selftest FAIL: $3 missing or the status $2 is 0"
      bad=$((bad + 1))
      return
    fi
    rows=$(wc -l <"$table")
    if ! diff <(tail -n "$rows" "$1.txt") "$table" >/dev/null; then
      echo "selftest FAIL: the table is not the last thing printed ($1.txt)"
      bad=$((bad + 1))
    fi
  }

  # 1. A failing first step, a hanging run (killed at its 3 s limit), runs logging NaN (one of
  # them compared with a clean run, a pair of them with each other), a run logging nothing, a
  # bench that fell back to a slower kernel.
  OUT=$dir/main GPU_CHECK_INJECT=fail:nvidia-smi,hang:graphs-stream,nan:gpt2-cuda,nan:eager-bucket,nan:graphs-bucket,empty:overlap-nccl,fallback:bench \
    bash "$ROOT/scripts/gpu_check.sh" checks >"$dir/main.txt" 2>&1
  rc=$?
  local t=$dir/main/table.txt
  ran "$dir/main" $rc table.txt
  expect "$t" "GPU" '^FAIL: exit 3 \(nvidia-smi\.log: injected failure\)$'
  expect "$t" "memory round trips" '^pass: 3 of 3 cases$'
  expect "$t" "NCCL collectives, 1 rank" '^pass: 3 of 3 cases$'
  expect "$t" "  versions" '^CUDA runtime 13\.0, driver 13\.0, cuBLASLt .*, NCCL 2\.28\.9$'
  expect "$t" "(step s / limit s)" '^nvidia-smi [0-9]+/[0-9]+ .*parity [0-9]+/[0-9]+ '
  expect "$t" "op parity (CUDA vs CPU fp32)" '^pass: 3 of 3 cases$'
  expect "$t" "corpus (tokenizer and shards, CPU)" '^pass$'
  expect "$t" "20 steps gpt2, GPU vs CPU" "^FAIL: gpt2-cuda's loss is not finite at step 1 \(20 of 20 steps\) \(check-close-gpt2-cuda\.log\)$"
  expect "$t" "20 steps llama, GPU vs CPU" '^pass: loss 6\.8900 -> 6\.7000 \(llama-cpu\), 6\.7000 \(llama-cuda\), worst step 0\.0e\+00$'
  expect "$t" "1-rank NCCL DDP, 20 steps" "^FAIL: gpt2-cuda's loss is not finite"
  expect "$t" "CUDA graphs, 20 steps (stream)" '^FAIL: timed out after 3 s \(graphs-stream\.log\)$'
  expect "$t" "CUDA graphs, 20 steps (bucket)" "^FAIL: eager-bucket's loss is not finite"
  expect "$t" "CUDA graphs, 1-rank NCCL DDP, 20 steps" '^pass: the same losses as eager-stream$'
  expect "$t" "DDP overlap, 1-rank NCCL, 124M blocks" '^FAIL: overlap-nccl logged 0 losses, not 30'
  expect "$t" "GPU checkpoint resumed on the CPU" '^pass: 2 finite losses'
  expect "$t" "bench GPT-2 350M bf16 T=1024" '^100\.0 ms/step, 81920 tok/s, MFU 40\.0% \(of 989 TFLOP/s\), 2048\.0 MiB device memory$'
  expect "$t" "  kernel families, GPT-2 350M" '^gemm 61\.0%'
  expect "$t" "  fallbacks, GPT-2 350M" '^pass: none$'
  expect "$t" "  fallbacks, GPT-2 124M-fast" '^FAIL: cudnn_attention_backward, 120 calls \(injected\)$'
  expect "$t" "20 steps llama LoRA, GPU vs CPU" '^pass: loss 6\.8900 -> 6\.7000 \(llama-lora-cpu\), 6\.7000 \(llama-lora-cuda\), worst step 0\.0e\+00$'
  expect "$t" "(done)" '^33 rows, 8 FAIL, 0 SKIP'
  n=$((n + 1))
  if ! grep -q '^==== graphs-stream.log: exit 124' "$dir/main/logs.txt"; then
    echo "selftest FAIL: logs.txt has no graphs-stream.log"
    bad=$((bad + 1))
  fi

  # 2. No corpus: the training rows say what they need, the benches still run.
  OUT=$dir/nocorpus GPU_CHECK_INJECT=fail:prepare \
    bash "$ROOT/scripts/gpu_check.sh" checks >"$dir/nocorpus.txt" 2>&1
  rc=$?
  t=$dir/nocorpus/table.txt
  ran "$dir/nocorpus" $rc table.txt
  expect "$t" "corpus (tokenizer and shards, CPU)" '^FAIL: exit 3 \(prepare\.log: injected failure\)$'
  expect "$t" "20 steps llama, GPU vs CPU" '^SKIP \(needs corpus\)$'
  expect "$t" "GPU checkpoint resumed on the CPU" '^SKIP \(needs corpus\)$'
  expect "$t" "  with CUDA graphs" '^100\.0 ms/step, 81920 tok/s, MFU 40\.0%$'

  # 3. sanitize without compute-sanitizer, then with one whose racecheck hangs.
  OUT=$dir/nosan COMPUTE_SANITIZER=$dir/none \
    bash "$ROOT/scripts/gpu_check.sh" sanitize-checks >"$dir/nosan.txt" 2>&1
  expect "$dir/nosan/sanitize-table.txt" "memcheck: every op on CUDA (cuDNN attention)" \
    '^SKIP: compute-sanitizer not found$'
  OUT=$dir/san COMPUTE_SANITIZER=$dir/bin/compute-sanitizer GPU_CHECK_INJECT=hang:racecheck \
    bash "$ROOT/scripts/gpu_check.sh" sanitize-checks >"$dir/san.txt" 2>&1
  rc=$?
  t=$dir/san/sanitize-table.txt
  ran "$dir/san" $rc sanitize-table.txt
  expect "$t" "memcheck: own attention, steps, graphs" '^pass: ERROR SUMMARY: 0 errors; 3 of 3 cases$'
  expect "$t" "racecheck: ops with shared-memory kernels" '^FAIL: 0 of 3 cases, 0 failed, 0 skipped, no sanitizer summary; timed out after 3 s \(racecheck\.log\)$'

  cat "$dir/main/table.txt"
  echo "selftest: $n checks, $bad failed"
  ((bad == 0))
}

# ---- rehearse: the whole main check on the CPU, through a real trainer ---------------------------

# rehearse TRAINER: runs the main check with TRAINER (a CPU build) behind a shim that runs every
# CUDA request on the CPU at a small size (GPT-2 blocks 12 -> 2 of width 768 -> 128 with heads
# 12 -> 2, T 1024 -> 64, V 50304 -> 4096; NCCL as the default backend; graphs off), so that
# every row fed by a training run or a bench is made from real output. The rows that need a
# GPU fail as they must; every other row must pass (a generated corpus the tokenizer refuses,
# a row reading a metric the run does not log, a checker that misreads real metrics all fail
# here).
rehearse() {
  local real=${1:?usage: scripts/gpu_check.sh rehearse TRAINER} dir rc bad=0 label text
  real=$(cd "$(dirname "$real")" && pwd)/$(basename "$real")
  dir=$(mktemp -d /tmp/gpu-check-rehearse.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$dir'" EXIT
  mkdir -p "$dir/bin"
  cat >"$dir/bin/trainer" <<SH
#!/usr/bin/env bash
args=()
for a in "\$@"; do
  case \$a in
    run.device=cuda) a=run.device=cpu ;; dist.backend=nccl) a=dist.backend=auto ;;
    train.cuda_graphs=true) a=train.cuda_graphs=false ;;
    cuda) a=cpu ;; model.n_layer=12 | model.n_layer=24) a=model.n_layer=2 ;;
    model.n_embd=768 | model.n_embd=1024) a=model.n_embd=128 ;;
    model.n_head=12 | model.n_head=16) a=model.n_head=2 ;; model.vocab_size=50304) a=model.vocab_size=4096 ;;
    model.n_kv_head=4) a=model.n_kv_head=1 ;;
    model.max_seq_len=1024) a=model.max_seq_len=128 ;; data.seq_len=1024) a=data.seq_len=128 ;;
    1024) a=64 ;; 12 | 24) a=2 ;; 768) a=128 ;; 50304) a=4096 ;;
  esac
  args+=("\$a")
done
exec "$real" "\${args[@]}"
SH
  chmod +x "$dir/bin/trainer"
  PATH="$dir/bin:$PATH" OUT=$dir/out bash "$ROOT/scripts/gpu_check.sh" checks >"$dir/out.txt" 2>&1
  rc=$?
  cat "$dir/out/table.txt"
  while IFS= read -r line; do
    label=$(cut -c1-44 <<<"$line" | sed 's/ *$//')
    text=$(cut -c46- <<<"$line")
    case $label in
      GPU | "memory round trips" | "NCCL collectives, 1 rank" | "op parity (CUDA vs CPU fp32)" | \
        "bench GPT-2 "* | "  versions" | "(done)") ;;
      *)
        if [[ $text == FAIL* || $text == SKIP* ]]; then
          echo "rehearse FAIL: row '$label' is '$text' on the CPU"
          bad=$((bad + 1))
        fi ;;
    esac
  done <"$dir/out/table.txt"
  ((rc != 0)) || { echo "rehearse FAIL: the check passed without a GPU"; bad=$((bad + 1)); }
  echo "rehearse: $bad row(s) wrong"
  ((bad == 0))
}

case "${1:-}" in
  pack) pack ;;
  run) bundled checks table.txt ;;
  sanitize) bundled sanitize-checks sanitize-table.txt ;;
  all) all ;;
  checks) checks ;;
  sanitize-checks) sanitize_checks ;;
  selftest) selftest ;;
  rehearse) shift; rehearse "$@" ;;
  *) echo "usage: scripts/gpu_check.sh pack | run | sanitize | all | selftest | rehearse TRAINER" >&2
    exit 2 ;;
esac
