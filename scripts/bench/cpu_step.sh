#!/usr/bin/env bash
# CPU training-step benchmark: the trainer against PyTorch (Debian's python3-torch, fp32) on
# the same model and step, in one run, for a GPT-2 124M shape and a small model. Prints ms per
# step, tokens/s, GFLOP/s, MFU against the GEMM peak measured in the same run, the speed-up
# over PyTorch, and the trainer's per-op profile. Then a Llama-shaped model of the small
# model's size (grouped-query attention, SwiGLU) against that GPT-2, by MFU.
#   scripts/bench/cpu_step.sh [steps]        (TRAINER=build/trainer by default)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRAINER="${TRAINER:-$ROOT/build/trainer}"
STEPS="${1:-5}"
PY=/usr/bin/python3
shapes=("gpt2-124m 12 768 12 50304 4 64" "small 6 384 6 8192 8 256")
for shape in "${shapes[@]}"; do
  read -r name L C H V B T <<<"$shape"
  echo "== $name: L=$L C=$C H=$H V=$V B=$B T=$T"
  ours=$("$TRAINER" bench --set model.n_layer="$L" --set model.n_embd="$C" --set model.n_head="$H" \
    --set model.vocab_size="$V" -B "$B" -T "$T" --steps "$STEPS" --profile)
  echo "$ours"
  theirs=$("$PY" "$ROOT/scripts/bench/torch_step.py" "$L" "$C" "$H" "$V" "$B" "$T" "$STEPS")
  ours_ms=$(echo "$ours" | sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p')
  torch_ms=$(echo "$theirs" | awk '{print $2}')
  peak=$(echo "$ours" | sed -n 's/.*GEMM peak \([0-9.]*\) GFLOP.*/\1/p')
  gflops=$(echo "$ours" | sed -n 's/.*tok\/s | \([0-9.]*\) GFLOP\/s.*/\1/p')
  awk -v o="$ours_ms" -v t="$torch_ms" -v p="$peak" -v g="$gflops" 'BEGIN {
    tg = g * o / t
    printf "   trainer %.1f ms/step (MFU %.1f%%) | PyTorch %.1f ms/step (MFU %.1f%%) | speed-up %.2fx\n",
           o, 100 * g / p, t, 100 * tg / p, t / o }'
done

echo "== llama vs gpt2 at one size: L=6 C=384 H=6 (llama: 2 key/value heads, SwiGLU 1152) V=8192 B=8 T=256"
small=(--set model.n_layer=6 --set model.n_embd=384 --set model.n_head=6 --set model.vocab_size=8192
       -B 8 -T 256 --steps "$STEPS")
gpt=$("$TRAINER" bench "${small[@]}")
llama=$("$TRAINER" bench "${small[@]}" --set model.arch=llama --set model.n_kv_head=2 \
  --set model.ffn_hidden=1152 --set model.ffn_multiple_of=64 --profile)
echo "$gpt"
echo "$llama"
mfu() { sed -n 's/.*MFU \([0-9.]*\)%.*/\1/p' <<<"$1"; }
awk -v g="$(mfu "$gpt")" -v l="$(mfu "$llama")" 'BEGIN {
  printf "   MFU llama %.1f%% | gpt2 %.1f%% | ratio %.2f (target >= 0.9: its ops as fast as GPT-2'"'"'s)\n", l, g, l / g }'
