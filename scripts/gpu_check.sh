#!/usr/bin/env bash
# The GPU check: everything CUDA, on a machine with a GPU, in one call.
#
#   scripts/gpu_check.sh pack     here (Debian, no GPU): builds the CUDA backend (sm_90, sm_80)
#                                 with its tests and packs the binaries and the libraries they
#                                 need into gpu-check.tar.xz (git-ignored, under 64 MiB)
#   scripts/gpu_check.sh run      on the GPU machine (the device tool, carrying gpu-check.tar.xz):
#                                 unpacks it and runs the checks below, logs under $OUT
#
# The checks, in order (each prints one line of its result; the table is last):
#   1. the GPU and driver (nvidia-smi);
#   2. CUDA memory round trips (runtime_cuda_test);
#   3. every op on CUDA against the CPU fp32 reference, fp32 and bf16, fresh random inputs and
#      poisoned outputs, and one whole training step (nn_backend_parity_test's CUDA cases);
#   4. 20 training steps of a small GPT-2 and a small Llama on the GPU and on the CPU from the
#      same initialisation and data: the loss curves must agree (fp32: 1e-3 relative);
#   5. DDP through a 1-rank NCCL communicator (dist.backend: nccl) gives the same losses; so do
#      CUDA graphs (train.cuda_graphs), bf16, in stream and bucket batches and under 1-rank NCCL
#      DDP, bit for bit; how
#      much of that all-reduce hides behind backward at the 124M shape; a checkpoint written on
#      the GPU resumes on the CPU;
#   6. step time, tokens/s, MFU against 989 TFLOP/s, device memory and each kernel family's
#      share of the step (CUDA events) on the GPU: GPT-2 124M and 350M shapes, bf16, T=1024,
#      eager with the profile, then replayed as CUDA graphs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARBALL="$ROOT/gpu-check.tar.xz"

pack() {
  local build="$ROOT/build-gpu"
  cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINER_CUDA=ON \
    -DTRAINER_TESTS=ON -DCMAKE_CUDA_ARCHITECTURES="90;80" >/dev/null
  ninja -C "$build" trainer runtime_cuda_test nn_backend_parity_test
  bash "$ROOT/scripts/gpu/bundle.sh" pack "$TARBALL" "$build/trainer" \
    "$build/tests/runtime/runtime_cuda_test" "$build/tests/nn/nn_backend_parity_test"
}

# A small model trained 20 steps on `device` (run name $4, default arch-device; more --set
# options after it).
train_small() {
  local device=$1 arch=$2 dir=$3 name=${4:-$2-$1}
  shift 3
  [[ $# -gt 0 ]] && shift
  trainer train --set data.path="$dir/corpus" --set data.tokenizer="$dir/tok.model" \
    --set run.dir="$dir/runs" --set run.name="$name" --set run.device="$device" \
    --set model.arch="$arch" --set model.vocab_size=512 --set model.n_layer=2 \
    --set model.n_head=4 --set model.n_embd=128 --set model.max_seq_len=64 \
    --set data.seq_len=64 --set data.batch_size=8 --set train.steps=20 --set train.val_every=0 \
    --set checkpoint.every=10 --set log.every=1 --set log.progress=off \
    --set optimizer.lr=3e-3 --set log.peak_gflops=1000 "$@" >"$dir/$name.log" 2>&1
}

checks() {
  local out="${OUT:-/tmp/gpu-check-out}" work
  mkdir -p "$out"
  work=$(mktemp -d)
  local -a table
  row() { table+=("$(printf '%-44s %s' "$1" "$2")"); echo "== $1: $2"; }

  nvidia-smi -L | tee "$out/nvidia-smi.txt"
  row "GPU" "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

  if runtime_cuda_test >"$out/runtime_cuda_test.txt" 2>&1; then row "memory round trips" "pass"
  else row "memory round trips" "FAIL (runtime_cuda_test.txt)"; fi

  if nn_backend_parity_test --gtest_filter='*cuda*' >"$out/parity.txt" 2>&1; then
    row "op parity (CUDA vs CPU fp32)" "pass: $(grep -c '\[       OK \]' "$out/parity.txt") cases"
  else
    row "op parity (CUDA vs CPU fp32)" "FAIL: $(grep -c '\[  FAILED  \]' "$out/parity.txt") lines (parity.txt)"
  fi

  # A small corpus from a generated text, tokenizer and shards made by the bundled trainer.
  for i in $(seq 1 3000); do
    echo "the quick brown fox number $((i % 97)) jumps over the lazy dog near river $((i % 13))."
    echo "a lazy dog sleeps while the fox runs $((i % 7)) times around the old red barn."
    echo
  done >"$work/text.txt"
  trainer tokenizer train --input "$work/text.txt" --vocab-size 500 --out "$work/tok.model" >/dev/null
  trainer prepare --tokenizer "$work/tok.model" --input "$work/text.txt" --out "$work/corpus" \
    --val-fraction 0.05 >/dev/null
  for arch in gpt2 llama; do
    if train_small cpu "$arch" "$work" && train_small cuda "$arch" "$work"; then
      row "20 steps $arch, GPU vs CPU" "$(python3 - "$work/runs" "$arch" <<'PY'
import json, sys
def losses(d):
    return [j["loss"] for j in map(json.loads, open(f"{sys.argv[1]}/{d}/metrics.jsonl")) if "loss" in j]
c, g = losses(f"{sys.argv[2]}-cpu"), losses(f"{sys.argv[2]}-cuda")
worst = max(abs(a - b) / abs(b) for a, b in zip(g, c))
print(f"{'pass' if len(c) == len(g) == 20 and worst < 1e-3 else 'FAIL'}: loss {c[0]:.4f} -> "
      f"{c[-1]:.4f} (CPU), {g[-1]:.4f} (GPU), worst step {worst:.1e}")
PY
)"
    else
      row "20 steps $arch, GPU vs CPU" "FAIL (see $arch-*.log)"
    fi
    cp "$work"/*.log "$out/" 2>/dev/null || true
  done
  # One row: `label` passes when runs $2 and $3 logged the same losses, bit for bit.
  same_losses() {
    if cmp -s <(grep -o '"loss":[0-9.e+-]*' "$work/runs/$2/metrics.jsonl") \
        <(grep -o '"loss":[0-9.e+-]*' "$work/runs/$3/metrics.jsonl"); then
      row "$1" "pass: the same losses as $2"
    else
      row "$1" "FAIL: losses differ from $2's ($3.log)"
    fi
  }
  # DDP through a 1-rank NCCL communicator: its all-reduces run, and change nothing.
  if train_small cuda gpt2 "$work" gpt2-nccl1 --set dist.backend=nccl; then
    same_losses "1-rank NCCL DDP, 20 steps" gpt2-cuda gpt2-nccl1
  else
    row "1-rank NCCL DDP, 20 steps" "FAIL (gpt2-nccl1.log)"
  fi
  cp "$work"/gpt2-nccl1.log "$out/" 2>/dev/null || true
  # CUDA graphs replay the eager passes: the same losses, bit for bit (bf16; stream batches, and
  # bucket batches whose padded shapes repeat; with DDP's hooks over NCCL between the units).
  for mode in stream bucket; do
    if train_small cuda gpt2 "$work" "eager-$mode" --set model.precision=bf16 \
          --set data.mode="$mode" &&
        train_small cuda gpt2 "$work" "graphs-$mode" --set model.precision=bf16 \
          --set data.mode="$mode" --set train.cuda_graphs=true; then
      same_losses "CUDA graphs, 20 steps ($mode)" "eager-$mode" "graphs-$mode"
    else
      row "CUDA graphs, 20 steps ($mode)" "FAIL (eager-$mode.log, graphs-$mode.log)"
    fi
    cp "$work"/eager-"$mode".log "$work"/graphs-"$mode".log "$out/" 2>/dev/null || true
  done
  if train_small cuda gpt2 "$work" graphs-nccl1 --set model.precision=bf16 \
      --set train.cuda_graphs=true --set dist.backend=nccl; then
    same_losses "CUDA graphs, 1-rank NCCL DDP, 20 steps" eager-stream graphs-nccl1
  else
    row "CUDA graphs, 1-rank NCCL DDP, 20 steps" "FAIL (graphs-nccl1.log)"
  fi
  cp "$work"/graphs-nccl1.log "$out/" 2>/dev/null || true
  # DDP's bucketed all-reduce against backward on the GPU, through a 1-rank NCCL communicator
  # (GPT-2 124M blocks, bf16, T=1024, 25 MiB buckets): the step with NCCL less the step without
  # is the part of the collectives' busy time (CUDA events on NCCL's stream) not hidden.
  local big=(--set model.precision=bf16 --set model.n_layer=12 --set model.n_head=12
    --set model.n_embd=768 --set model.max_seq_len=1024 --set data.seq_len=1024
    --set train.steps=30 --set checkpoint.every=0 --set dist.bucket_mb=25)
  if train_small cuda gpt2 "$work" overlap-auto "${big[@]}" &&
      train_small cuda gpt2 "$work" overlap-nccl "${big[@]}" --set dist.backend=nccl; then
    row "DDP overlap, 1-rank NCCL, 124M blocks" "$(python3 - "$work/runs" <<'PY'
import json, statistics, sys
def median(run, key):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl")]
    return statistics.median(r[key] for r in rows if "step_ms" in r and r["step"] > 10)
plain, nccl = median("overlap-auto", "step_ms"), median("overlap-nccl", "step_ms")
busy = median("overlap-nccl", "comm_busy_ms")
hidden = 1 - max(0.0, nccl - plain) / busy if busy > 0 else float("nan")
print(f"step {nccl:.1f} ms with NCCL, {plain:.1f} ms without; all-reduce busy {busy:.2f} ms, "
      f"{100 * hidden:.0f}% hidden")
PY
)"
  else
    row "DDP overlap, 1-rank NCCL, 124M blocks" "FAIL (overlap-*.log)"
  fi
  cp "$work"/overlap-*.log "$out/" 2>/dev/null || true
  # The GPU's step-10 checkpoint continued on the CPU.
  if trainer train --set data.path="$work/corpus" --set data.tokenizer="$work/tok.model" \
      --set run.dir="$work/runs" --set run.name=gpt2-cuda-on-cpu --set model.vocab_size=512 \
      --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=128 \
      --set model.max_seq_len=64 --set data.seq_len=64 --set data.batch_size=8 \
      --set train.steps=12 --set train.val_every=0 --set log.progress=off \
      --set log.peak_gflops=1000 --set optimizer.lr=3e-3 \
      --set train.resume="$work/runs/gpt2-cuda/checkpoints/step-10" >"$out/resume.log" 2>&1; then
    row "GPU checkpoint resumed on the CPU" "pass"
  else
    row "GPU checkpoint resumed on the CPU" "FAIL (resume.log)"
  fi

  # MFU against 989 TFLOP/s, the H100/H200 datasheet's dense bf16 rate; the profile's kernel
  # families are timed by CUDA events on the model's stream.
  for shape in "124M -L 12 -C 768 -H 12" "350M -L 24 -C 1024 -H 16"; do
    read -r name args <<<"$shape"
    # shellcheck disable=SC2086
    trainer bench --device cuda --precision bf16 $args -V 50304 -B 8 -T 1024 --steps 10 \
      --peak-gflops 989000 --profile >"$out/bench-$name.txt" 2>&1 || true
    line=$(tail -1 "$out/bench-$name.txt")
    row "bench GPT-2 $name bf16 T=1024" \
      "$(sed -n 's/.*: \([0-9.]* ms\/step\) | \([0-9]* tok\/s\).*MFU \([0-9.]*%\).*device buffers \([0-9.]* MiB\).*/\1, \2, MFU \3 (of 989 TFLOP\/s), \4 device memory/p' <<<"$line")"
    row "  kernel families, GPT-2 $name" "$(sed -n 's/^  families: //p' "$out/bench-$name.txt")"
    # shellcheck disable=SC2086
    trainer bench --device cuda --precision bf16 $args -V 50304 -B 8 -T 1024 --steps 10 \
      --peak-gflops 989000 --cuda-graphs >"$out/bench-$name-graphs.txt" 2>&1 || true
    line=$(tail -1 "$out/bench-$name-graphs.txt")
    row "  with CUDA graphs" \
      "$(sed -n 's/.*: \([0-9.]* ms\/step\) | \([0-9]* tok\/s\).*MFU \([0-9.]*%\).*/\1, \2, MFU \3/p' <<<"$line")"
  done
  rm -rf "$work"
  printf '\n%s\n' "${table[@]}"
}

case "${1:-}" in
  pack) pack ;;
  run) bash "$ROOT/scripts/gpu/bundle.sh" run "$TARBALL" bash "$ROOT/scripts/gpu_check.sh" checks ;;
  checks) checks ;;
  *) echo "usage: scripts/gpu_check.sh pack | run" >&2; exit 2 ;;
esac
