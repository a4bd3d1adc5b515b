#!/usr/bin/env bash
# CPU training-step benchmark: the trainer against PyTorch (Debian's python3-torch) on the same
# model and step, in one run, for a GPT-2 124M shape and a small model, in fp32 and bf16 (the
# trainer's model.precision=bf16 against PyTorch's bf16 autocast). Prints ms per step, MFU
# against the GEMM peak of the precision measured in the same run, the speed-up over PyTorch,
# the trainer's bf16 step against its fp32 one, and the trainer's per-op profile with each op's
# and family's rate against its limit (the GEMM rate at its products' shapes, the memory
# bandwidth: Note [Profile work] in runtime/profile.h). Then a Llama-shaped model of the small
# model's size (grouped-query attention, SwiGLU) against that GPT-2, by MFU. PyTorch runs as
# written by default, eagerly: attention materialised (no scaled_dot_product_attention), its
# for-loop AdamW, autocast's casts; its thread count is printed beside it.
#   scripts/bench/cpu_step.sh [steps]        (TRAINER=build/trainer by default)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TRAINER="${TRAINER:-$ROOT/build/trainer}"
STEPS="${1:-5}"
PY=/usr/bin/python3
field() { sed -n "s/$1/\1/p" <<<"$2"; }
shapes=("gpt2-124m 12 768 12 50304 4 64" "small 6 384 6 8192 8 256")
for shape in "${shapes[@]}"; do
  read -r name L C H V B T <<<"$shape"
  echo "== $name: L=$L C=$C H=$H V=$V B=$B T=$T"
  declare -A ms=()
  for precision in fp32 bf16; do
    ours=$("$TRAINER" bench --set model.n_layer="$L" --set model.n_embd="$C" --set model.n_head="$H" \
      --set model.vocab_size="$V" --set model.precision="$precision" -B "$B" -T "$T" \
      --steps "$STEPS" --profile)
    echo "$ours"
    theirs=$("$PY" "$ROOT/scripts/bench/torch_step.py" "$L" "$C" "$H" "$V" "$B" "$T" "$STEPS" \
      "$precision")
    ours_ms=$(field '.*: \([0-9.]*\) ms\/step.*' "$ours")
    torch_ms=$(awk '{print $2}' <<<"$theirs")
    echo "   PyTorch: $theirs"
    ms[$precision]=$ours_ms
    awk -v p="$precision" -v o="$ours_ms" -v t="$torch_ms" \
      -v peak="$(field '.*GEMM peak \([0-9.]*\) GFLOP.*' "$ours")" \
      -v g="$(field '.*tok\/s | \([0-9.]*\) GFLOP\/s.*' "$ours")" 'BEGIN {
      printf "   %s: trainer %.1f ms/step (MFU %.1f%%) | PyTorch %.1f ms/step (MFU %.1f%%) | speed-up %.2fx\n",
             p, o, 100 * g / peak, t, 100 * g * o / t / peak, t / o }'
  done
  awk -v f="${ms[fp32]}" -v b="${ms[bf16]}" 'BEGIN {
    printf "   trainer bf16 step: %.2fx its fp32 step (target >= 1.6 where the CPU has native BF16)\n", f / b }'
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
