#!/usr/bin/env bash
# Bad command lines and config files through the binary: each must fail with exit 2 and a
# one-line error naming what is wrong (never run with silent defaults); configs given
# positionally must be used.
#   cli_errors.sh <trainer>
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TRAINER=$(realpath "$1")
DIR=$(mktemp -d /tmp/trainer_cli.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
printf 'model:\n  n_layer: 2\n' > two.yaml
: > empty.yaml
printf '# nothing but a comment\n' > comment.yaml
printf 'modle:\n  n_layer: 2\n' > typo.yaml
printf -- '- a\n- b\n' > list.yaml
mkdir confdir
source "$HERE/expect_exit.sh"
expect 2 "unexpected argument" train two.yaml extra
expect 2 "unexpected argument" eval runs/x extra
expect 2 "unexpected argument" prepare stray --tokenizer t --input x --out o
expect 2 "unexpected argument" tokenizer info stray --tokenizer m
expect 2 "unexpected argument" bench two.yaml extra
expect 2 "cannot read missing.yaml" bench missing.yaml
# A model source that is none of a checkpoint, a run directory or a folder: one line, exit 2,
# whichever command reads it.
for cmd in eval sample export inspect; do
  extra=()
  [[ $cmd == export ]] && extra=(--out never)
  expect 2 "nowhere is neither a checkpoint, a run directory with checkpoints nor a Hugging Face" \
    $cmd nowhere "${extra[@]}"
done
expect 2 "is a directory" config confdir
expect 2 "is a directory" train --config confdir
expect 2 "the config is empty" config empty.yaml
expect 2 "the config is empty" plan comment.yaml
expect 2 "unknown section 'modle' \(did you mean 'model.n_layer'\?\)" config typo.yaml
expect 2 "must be a mapping" train list.yaml
printf 'model:\n  n_layer: 2\n  n_layer: 3\n' > twice.yaml
expect 2 "twice.yaml:3: 'model.n_layer' is given twice in one mapping" config twice.yaml
printf 'model:\n  n_layer: 2\ntrain:\n  steps: 3\nmodel:\n  n_head: 4\n' > sections.yaml
expect 2 "sections.yaml:5: 'model' is given twice in one mapping" config sections.yaml
printf 'model: 5\n' > scalar.yaml
expect 2 "scalar.yaml:1: 'model' is a section, a mapping of keys \(model\.arch, .*\), not a value" config scalar.yaml
expect 2 "--set: 'model' is a section; set one of its keys" config --set model=5
expect 2 "data.tokenizer = .*confdir is a directory holding no tokenizer" \
  train --set run.dir=runs-tok --set data.tokenizer=confdir
expect 2 "trainer train my.yaml" my.yaml
expect 2 "min_lr = 1 exceeds optimizer.lr = 0.1" plan --set optimizer.min_lr=1 --set optimizer.lr=0.1
expect 2 "--threads must be in \[0, 1024\], got 40000" prepare --tokenizer t --input x --out o --threads 40000
expect 2 "--max-new-tokens must be in" sample runs/x --max-new-tokens -1
expect 2 "--top-p must be in" sample runs/x --top-p 0
expect 2 "--max-batches must be in" eval runs/x --max-batches -1
expect 2 "--batch must be in" bench -B 0
expect 2 "--seq must be in" bench -T 100000000
expect 2 "--vocab-size must be in" tokenizer train --input x --out y --vocab-size 5
expect 2 "--world-size must be in" plan --world-size 0
expect 2 "--dtype must be fp32, bf16 or fp16" export runs/x --out y --dtype fp8
expect 2 "model.checkpoint_layers names block 7" plan two.yaml --set model.checkpoint_layers='["7"]'
expect 2 "dist.grad_dtype = bf16 needs model.precision = bf16" plan --set dist.grad_dtype=bf16
expect 2 "model.rope_scaling_factor = 8 needs model.rope_scaling = linear, llama3 or yarn" \
  plan --set model.arch=llama --set model.rope_scaling_factor=8
expect 2 "model.head_dim = 32 needs model.arch = llama, qwen2 or qwen3" plan --set model.head_dim=32
expect 2 "model.norm_eps = 0 is out of range" plan --set model.norm_eps=0
expect 2 "model.n_kv_head .3. must divide model.n_head .4." plan --set model.arch=llama --set model.n_head=4 --set model.n_embd=64 --set model.n_kv_head=3
expect 2 "model.n_embd .40. must be a multiple of 16 for llama" plan --set model.arch=llama --set model.n_head=4 --set model.n_embd=40
expect 2 "model.tie_embeddings = false needs model.arch = llama" plan --set model.tie_embeddings=false
expect 2 "model.n_kv_head = 2 needs model.arch = llama" plan --set model.n_kv_head=2
expect 2 "'ful' is not one of none, optimizer, gradients, full" plan --set dist.sharding=ful
expect 2 "'llma' is not one of gpt2, llama" plan --set model.arch=llma
# Each range is the formula's domain: open where the formula divides by the bound.
expect 2 "optimizer.beta1 = 1 is out of range \[0, 1\)" plan --set optimizer.beta1=1
expect 2 "optimizer.beta2 = 1 is out of range \[0, 1\)" plan --set optimizer.beta2=1
expect 2 "optimizer.eps = 0 is out of range \(0, 1\]" plan --set optimizer.eps=0
expect 2 "model.rope_theta = 1 is out of range \(1, 1000000000000\]" plan --set model.rope_theta=1
expect 2 "optimizer.lr x optimizer.weight_decay = 1 must stay below 1" \
  plan --set optimizer.lr=1 --set optimizer.weight_decay=1
expect 2 "train.steps = 0 is out of range \[1, inf\)" plan --set train.steps=0
# A run's name is its own folder under run.dir: nothing else is accepted, and nothing is written.
long=$(printf 'n%.0s' $(seq 300))  # over the 255 bytes of a path component (check_run_name)
for name in . .. /tmp/elsewhere a/b "$long"; do
  expect 2 "run.name '.*' (is not a folder name|holds a path separator|is 300 bytes long)" \
    train --set run.dir=runs --set run.name="$name"
done
printf 'run:\n  dir: runs\n  name: ""\n' > unnamed.yaml
expect 2 "run.name '' is not a folder name" train unnamed.yaml
[[ ! -e runs && ! -e /tmp/elsewhere/metrics.jsonl ]] ||
  { echo "FAIL: a refused run.name left files"; failures=$((failures + 1)); }
expect 2 "dist.interface 10.0.0.0/33: not a CIDR range" plan --set dist.interface=10.0.0.0/33
# A run.dir that cannot be made is named, not a raw filesystem error.
: > afile
expect 2 "run.dir = afile/sub: cannot create the run's folder afile/sub/r: Not a directory" \
  train --set run.dir=afile/sub --set run.name=r
# An unfinished save's folder is no resume source, with or without a trailing separator.
expect 2 "train.resume = runs/r/checkpoints/step-3.tmp is a checkpoint whose save did not finish" \
  train --set train.resume=runs/r/checkpoints/step-3.tmp
expect 2 "is a checkpoint whose save did not finish" train --set train.resume=x/step-3.tmp/
# Output that cannot be written is a failure, not a silent success.
out=$("$TRAINER" config two.yaml 2>&1 >/dev/full)
rc=$?
if [[ $rc -ne 1 ]] || ! grep -q "cannot write the output" <<<"$out"; then
  echo "FAIL: trainer config > /dev/full -> exit $rc: $out"
  failures=$((failures + 1))
fi
# A positional config is used, not ignored.
expect 0 "n_layer: 2" config two.yaml
expect 0 "2 layers" plan two.yaml
if [[ $failures -gt 0 ]]; then echo "cli_errors: $failures failure(s)"; exit 1; fi
echo "cli_errors: every case gives its exit code and the expected message"
