#!/usr/bin/env bash
# LoRA through the binary (Note [LoRA] in nn/lora.h): a Llama trained in full and exported as
# a Hugging Face folder, then adapters on every product trained on it on new data
# (train.init_from, train.lora.rank), and full fine-tuning beside them.
#   - the base stays bit for bit what it was, and only the adapters have optimizer moments;
#   - the adapters lower the validation loss of the new data;
#   - TP=2, TP=4 (key/value heads held whole), TP=2 with sequence parallelism, DDP, ZeRO-1
#     under TP=2, ZeRO-2, ZeRO-3, 2 pipeline stages and bf16 at TP=2 train as one process
#     does (the losses and the merged and adapter tensors within rounding); full activation
#     checkpointing and a resume from step 10 are bit for bit the same run, and so are 2 ranks
#     and 1 under dist.deterministic; the TP=2 checkpoint resumes in one process;
#   - export writes the merged model, exactly base + (alpha/r) B A, and the adapters in
#     PEFT's layout; the merged folder fine-tunes again with new adapters;
#   - the PEFT adapter folder evaluates, samples and exports as the adapted checkpoint does,
#     bit for bit, and trains further at TP=2 x PP=2;
#   - with train.lora.dropout, TP=2 (with and without sequence parallelism), DDP, ZeRO-3 and 2
#     pipeline stages train as one process does, full checkpointing and a resume are bit for
#     bit the same run, and the PEFT adapter carries the rate on;
#   - what LoRA cannot do is refused by name.
#   lora.sh <trainer> <mpiexec>
set -euo pipefail
HERE=$(realpath "$(dirname "${BASH_SOURCE[0]}")")
source "$HERE/small_corpus.sh"
source "$HERE/expect_exit.sh"
TRAINER=$1
MPIEXEC=$2
DIR=$(mktemp -d /tmp/trainer_lora.XXXXXX)
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
new_corpus "$TRAINER"  # the data to fine-tune on
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.arch=llama --set model.n_kv_head=2 --set model.ffn_multiple_of=16
        --set model.tie_embeddings=false --set model.vocab_size=320 --set model.n_layer=2
        --set model.n_head=4 --set model.n_embd=32 --set model.max_seq_len=32
        --set data.seq_len=32 --set data.batch_size=2 --set data.mode=pack
        --set train.global_batch=4 --set train.steps=20 --set train.val_every=20
        --set train.val_batches=4 --set checkpoint.every=10 --set log.every=1
        --set log.progress=off --set schedule.warmup_steps=2 --set log.peak_gflops=100)
# Fine-tuning: from the base's exported folder, on the new data.
tune=(--set train.init_from=exports/base --set data.path=new)
lora=("${tune[@]}" --set train.lora.rank=4 --set train.lora.alpha=8 --set optimizer.lr=1e-2)
source "$HERE/train_and_export.sh"

run 1 base --set optimizer.lr=1e-3
run 1 full "${tune[@]}" --set optimizer.lr=1e-3
run 1 lora "${lora[@]}"
run 1 lora_recompute "${lora[@]}" --set model.activation_checkpointing=full
run 1 lora_resume "${lora[@]}" --set train.resume=runs/lora/checkpoints/step-10
run 2 lora_tp2 "${lora[@]}" --set dist.tensor_parallel=2
run 4 lora_tp4 "${lora[@]}" --set dist.tensor_parallel=4
run 2 lora_tp2_sp "${lora[@]}" --set dist.tensor_parallel=2 --set dist.sequence_parallel=true
run 2 lora_dp2 "${lora[@]}"
run 4 lora_tp2_dp2_optimizer "${lora[@]}" --set dist.tensor_parallel=2 --set dist.sharding=optimizer
run 2 lora_dp2_gradients "${lora[@]}" --set dist.sharding=gradients
run 2 lora_dp2_full "${lora[@]}" --set dist.sharding=full
run 2 lora_pp2 "${lora[@]}" --set dist.pipeline_parallel=2
run 1 lora_det1 "${lora[@]}" --set dist.deterministic=true
run 2 lora_det2 "${lora[@]}" --set dist.deterministic=true
run 1 lora_from_tp2 "${lora[@]}" --set train.resume=runs/lora_tp2/checkpoints/step-10
run 1 lora_bf16 "${lora[@]}" --set model.precision=bf16
run 2 lora_bf16_tp2 "${lora[@]}" --set model.precision=bf16 --set dist.tensor_parallel=2
# Dropout on the adapters' input: every layout draws one process's masks.
drop=("${lora[@]}" --set train.lora.dropout=0.1)
run 1 drop "${drop[@]}"
run 1 drop_recompute "${drop[@]}" --set model.activation_checkpointing=full
run 1 drop_resume "${drop[@]}" --set train.resume=runs/drop/checkpoints/step-10
run 2 drop_tp2 "${drop[@]}" --set dist.tensor_parallel=2
run 2 drop_tp2_sp "${drop[@]}" --set dist.tensor_parallel=2 --set dist.sequence_parallel=true
run 2 drop_dp2 "${drop[@]}"
run 2 drop_dp2_full "${drop[@]}" --set dist.sharding=full
run 2 drop_pp2 "${drop[@]}" --set dist.pipeline_parallel=2
grep -q "LoRA adapters' input 0.1" drop.log ||
  { echo "FAIL: drop.log does not state the adapters' dropout"; exit 1; }
# The merged export is a plain model: it fine-tunes again, with fresh adapters on it.
run 1 again --set train.init_from=exports/lora --set train.lora.rank=2 --set train.steps=2 \
  --set train.lora.targets='[q, v]'
# The start-up log counts what trains: per layer, rank 4 times (in + out) of each product, q and
# o 32 + 32, k and v 32 + 16, gate and up 32 + 96, down 96 + 32: 2432, over 2 layers.
grep -q "trained: 4864 of the 50080 parameters (9.71%), LoRA adapters of rank 4 on q, k, v" \
  lora.log || { echo "FAIL: lora.log does not count the trained parameters"; exit 1; }
for name in base full lora; do
  "$TRAINER" eval "exports/$name" --data new --max-batches 4 | tail -1 > "eval_new_$name.txt"
done
"$TRAINER" eval runs/lora --max-batches 4 > eval_lora.txt
"$TRAINER" eval exports/lora --max-batches 4 > eval_merged.txt
"$TRAINER" sample runs/lora --prompt "the quick" --max-new-tokens 8 --seed 1 > sample_lora.txt
"$TRAINER" sample exports/lora --prompt "the quick" --max-new-tokens 8 --seed 1 > sample_merged.txt
# The PEFT adapter folder reads as its base with the adapters on it. Its factors are in fp32
# and its base is the adapted run's frozen one, so eval, sample and a merged export are the
# adapted checkpoint's bit for bit; it trains further at TP=2 x PP=2, where at lr 0 every
# slice of every factor is read back unchanged.
"$TRAINER" eval exports/lora/adapter --data new --max-batches 4 > eval_adapter.txt
"$TRAINER" sample exports/lora/adapter --prompt "the quick" --max-new-tokens 8 --seed 1 \
  > sample_adapter.txt
"$TRAINER" export exports/lora/adapter --out exports/from_adapter >/dev/null
run 4 adapter_tp2_pp2 --set train.init_from=exports/lora/adapter --set optimizer.lr=0 \
  --set optimizer.min_lr=0 --set train.steps=2 --set dist.tensor_parallel=2 \
  --set dist.pipeline_parallel=2
# An adapter trained with dropout says so, and training it further keeps its rate.
run 1 drop_adapter --set train.init_from=exports/drop/adapter --set train.steps=2
grep -q "LoRA adapters' input 0.1" drop_adapter.log ||
  { echo "FAIL: training the adapter on lost its dropout"; exit 1; }
for f in adapter_tp2_pp2/adapter/adapter_model.safetensors from_adapter/model.safetensors; do
  cmp -s "exports/$f" "exports/lora/${f#*/}" || { echo "FAIL: exports/$f differs"; exit 1; }
done
cmp -s sample_adapter.txt sample_lora.txt || { echo "FAIL: the adapter samples otherwise"; exit 1; }
"$TRAINER" inspect exports/lora/adapter | grep -q "^lora: rank 4, alpha 8, targets q, k, v, o, gate, up, down" ||
  { echo "FAIL: inspect of the adapter"; exit 1; }

PYTHONPATH="$HERE" /usr/bin/python3 - <<'PY'
import json, sys
import compare_runs
from compare_runs import losses, tensors

errors = []
STEPS, LR, C = 20, 1e-2, 32
worst = {}

# The base is frozen: the adapted run's checkpoint holds the base's tensors bit for bit, and
# moments for the adapters alone (a frozen parameter's read as zero).
base = tensors("exports/base/model.safetensors")
mine = tensors("runs/lora/checkpoints/step-20/model.safetensors")
moments = tensors("runs/lora/checkpoints/step-20/optimizer.safetensors")
adapters = sorted(n for n in mine if ".lora_" in n)
if len(adapters) != 2 * 7 * 2 or sorted(set(mine) - set(adapters)) != sorted(base):
    errors.append(f"adapted checkpoint's tensors: {sorted(mine)}")
errors += [f"{n} moved" for n in base if mine.get(n) != base[n]]
# The moments are one flat tensor each, laid out as the parameters: the nonzero ones are at
# most the adapters' elements (and most of them: only an element whose every gradient was
# exactly zero keeps a zero v).
held = sum(len(mine[n]) for n in adapters)
nonzero = sum(x != 0 for x in moments["adamw.v"])
if not 0.9 * held <= nonzero <= held:
    errors.append(f"{nonzero} nonzero second moments, the adapters have {held} elements")

# The adapters learn the new data: its validation loss falls below the base's, which has not
# seen its sentences (full fine-tuning's, at the same steps, printed beside it). Measured: by
# 0.17 nats, of which rounding could move at most about 1e-5 (the layouts' bound below); 0.05
# leaves 3x to a slower optimisation elsewhere.
val = {n: json.load(open(f"eval_new_{n}.txt"))["loss"] for n in ("base", "full", "lora")}
print("validation loss on the new data after 20 steps: base {base:.4f}, full fine-tuning "
      "{full:.4f}, LoRA r=4 {lora:.4f}".format(**val))
if not val["lora"] < val["base"] - 0.05:
    errors.append(f"validation loss on the new data {val['lora']} adapted, {val['base']} base")

# The merged export is base + (alpha/r) B A exactly: each element's sum over the rank in
# double, in order (each product of two floats is exact there), rounded to fp32 once
# (nn/lora.h). A contracted multiply-add could round the double once less: that changes the
# fp32 result only where the double lands within 1e-16 of an fp32 rounding boundary, odds of
# about 1e-9 per element.
import torch
A = tensors("exports/lora/adapter/adapter_model.safetensors")
merged = tensors("exports/lora/model.safetensors")
s = torch.tensor(8, dtype=torch.float32) / torch.tensor(4, dtype=torch.float32)
for name, w in base.items():
    stem = name[:-len(".weight")]
    a, b = (A.get(f"base_model.model.{stem}.lora_{x}.weight") for x in "AB")
    want = torch.tensor(w, dtype=torch.float64)
    if a is not None:
        a = torch.tensor(a, dtype=torch.float64).view(4, -1)
        b = torch.tensor(b, dtype=torch.float64).view(-1, 4)
        acc = torch.zeros(b.shape[0], a.shape[1], dtype=torch.float64)
        for k in range(4):
            acc += b[:, k:k + 1] * a[k:k + 1, :]
        want = want + s.double() * acc.flatten()
    if not torch.equal(want.float(), torch.tensor(merged[name], dtype=torch.float32)):
        errors.append(f"merged {name} is not base + (alpha/r) B A")

# Every layout against one process, as tensor_parallel.sh argues the bounds (fp32: the
# group's partial sums reassociate, ~1e-7 of each gradient; AdamW normalises the rest), on
# the merged model and on the adapters themselves. The adapters' B start at zero, so their
# early steps are AdamW's sign-like ones on every element: 1e-5 of a tensor's norm still
# leaves 10x over the measured worst.
def compare(name, loss_rel, norm_rel, ref="lora"):
    compare_runs.compare(name, ref, loss_rel, norm_rel, STEPS, LR, C, errors, worst)
    a = tensors(f"exports/{name}/adapter/adapter_model.safetensors")
    b = tensors(f"exports/{ref}/adapter/adapter_model.safetensors")
    for t in b:
        diff = sum((x - y) ** 2 for x, y in zip(a[t], b[t])) ** 0.5
        rel = diff / sum(y * y for y in b[t]) ** 0.5
        worst[name] = max(worst.get(name, 0.0), rel)
        if rel > norm_rel:
            errors.append(f"{name}: adapter {t} differs by {rel:.3g} of its norm")

for name in ["lora_tp2", "lora_tp4", "lora_tp2_sp", "lora_dp2", "lora_tp2_dp2_optimizer",
             "lora_dp2_gradients", "lora_dp2_full", "lora_pp2"]:
    compare(name, 1e-5, 1e-5)
# With the adapters' dropout, against one process with it: each layout draws its masks (a
# row-parallel product's columns of the whole input's), so the losses agree as closely
# (measured 4e-8 at worst). Other masks move every step's loss by more than 1e-5 (1.8e-5 to
# 2.8e-3 under another run.seed). The tensors differ more than without dropout (5.2e-6 of a
# norm, a layer-0 A under DDP): dropout leaves some A elements with gradients near zero, whose
# AdamW steps are sign-like, so a rounding difference there moves by lr; 5e-5 is 10x that.
for name in ["drop_tp2", "drop_tp2_sp", "drop_dp2", "drop_dp2_full", "drop_pp2"]:
    compare(name, 1e-5, 5e-5, "drop")
if losses("drop") == losses("lora"):
    errors.append("train.lora.dropout changed nothing")
if losses("drop_recompute") != losses("drop"):
    errors.append("with the adapters' dropout, full activation checkpointing changed the losses")
resumed = losses("drop_resume")
if sorted(resumed) != list(range(11, 21)) or any(resumed[s] != losses("drop")[s] for s in resumed):
    errors.append(f"with the adapters' dropout, resumed at step 10: {resumed}")
if json.load(open("exports/drop/adapter/adapter_config.json")).get("lora_dropout") != 0.1:
    errors.append("the adapter's config does not hold its lora_dropout")
# bf16 at TP=2 against bf16 alone: the partial sums rounded to bf16 (tensor_parallel.sh's
# argument and bounds).
compare_runs.compare("lora_bf16_tp2", "lora_bf16", 1e-2, 1e-1, STEPS, LR, C, errors, worst)
print("largest per-tensor relative difference:",
      ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items(), key=lambda kv: -kv[1])[:4]))

# Recomputing every block, and resuming at step 10, are the same run bit for bit.
ref = losses("lora")
if losses("lora_recompute") != ref:
    errors.append("full activation checkpointing changed the losses")
resumed = losses("lora_resume")
if sorted(resumed) != list(range(11, 21)) or any(resumed[s] != ref[s] for s in resumed):
    errors.append(f"resumed at step 10: {resumed}")
if tensors("runs/lora_resume/checkpoints/step-20/model.safetensors") != mine:
    errors.append("the resumed run's final weights differ")
# dist.deterministic: 2 ranks are 1, bit for bit (docs/dist.md).
if losses("lora_det2") != losses("lora_det1") or \
        tensors("runs/lora_det2/checkpoints/step-20/model.safetensors") != \
        tensors("runs/lora_det1/checkpoints/step-20/model.safetensors"):
    errors.append("dist.deterministic: 2 ranks differ from 1")
# The TP=2 run's step-10 checkpoint, resumed by one process, continues the curve (fp32
# reassociation, as above).
for step, l in losses("lora_from_tp2").items():
    if abs(l - ref[step]) > 1e-5 * ref[step]:
        errors.append(f"lora_from_tp2: step {step} loss {l!r}, one process {ref[step]!r}")

# The merged export computes the adapted model (fp32 products in two orders: 1e-5).
got, want = (json.loads(open(f).read().splitlines()[-1])["loss"]
             for f in ("eval_merged.txt", "eval_lora.txt"))
if abs(got - want) > 1e-5 * want:
    errors.append(f"merged export's eval loss {got}, the adapted checkpoint's {want}")
got = json.loads(open("eval_adapter.txt").read().splitlines()[-1])["loss"]
if got != want:
    errors.append(f"the PEFT adapter's eval loss {got}, the adapted checkpoint's {want}")

# PEFT's layout: its config and names, A (r, in) and B (out, r).
cfg = json.load(open("exports/lora/adapter/adapter_config.json"))
want_cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
            "bias": "none", "fan_in_fan_out": False,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                               "down_proj"]}
if not cfg.get("base_model_name_or_path", "").endswith("exports/base"):
    errors.append(f"adapter_config.json names the base {cfg.get('base_model_name_or_path')!r}")
for k, v in want_cfg.items():
    if cfg.get(k) != v:
        errors.append(f"adapter_config.json {k}: {cfg.get(k)!r}, want {v!r}")
with open("exports/lora/adapter/adapter_model.safetensors", "rb") as f:
    header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
shapes = {n: t["shape"] for n, t in header.items() if n != "__metadata__"}
F = 96  # 8C/3 rounded up to 16
dims = {"q_proj": (32, 32), "k_proj": (16, 32), "v_proj": (16, 32), "o_proj": (32, 32),
        "gate_proj": (F, 32), "up_proj": (F, 32), "down_proj": (32, F)}
want_shapes = {}
for l in range(2):
    for m, (o, i) in dims.items():
        part = "self_attn" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
        stem = f"base_model.model.model.layers.{l}.{part}.{m}"
        want_shapes[f"{stem}.lora_A.weight"] = [4, i]
        want_shapes[f"{stem}.lora_B.weight"] = [o, 4]
if shapes != want_shapes:
    errors.append(f"adapter tensors {sorted(set(shapes) ^ set(want_shapes))} or shapes differ")
if json.load(open("exports/lora/config.json")).get("model_type") != "llama":
    errors.append("the merged export is not a llama folder")
for e in errors[:20]:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
PY
# Weights that agree to 1e-5 sample the same text with one seed (tensor_parallel.sh's reason).
cmp -s sample_lora.txt sample_merged.txt ||
  { echo "FAIL: samples differ"; diff sample_lora.txt sample_merged.txt; exit 1; }

set +e
expect 2 "train.lora: model.arch = gpt2 has no LoRA targets" train "${common[@]}" \
  --set model.arch=gpt2 --set model.n_kv_head=0 --set model.tie_embeddings=true \
  --set train.lora.rank=4 --set run.name=x
expect 2 "train.lora.targets: 'qkv' is not one of llama's products" train "${common[@]}" \
  --set train.lora.rank=4 --set train.lora.targets='[q, qkv]' --set run.name=x
expect 2 "train.lora.dropout = 0.05 without adapters: set train.lora.rank" train "${common[@]}" \
  --set train.lora.dropout=0.05 --set run.name=x
expect 2 "holds LoRA adapters \(train.lora.rank 4.*same train.lora keys" train "${common[@]}" \
  --set train.init_from=runs/lora --set train.lora.rank=2 --set run.name=x
expect 2 "holds LoRA adapters" train "${common[@]}" --set train.init_from=runs/lora \
  --set run.name=x
# A source trained with the adapters' dropout: still the adapters' refusal, not the rate's.
expect 2 "holds LoRA adapters" train "${common[@]}" --set train.init_from=runs/drop \
  --set run.name=x
expect 2 "cannot resume from .*step-20: train.lora.rank was 4 there but is 8 now" train \
  "${common[@]}" "${lora[@]}" --set train.lora.rank=8 --set run.name=lora --set train.steps=30
# PEFT adapters the trainer does not compute, or whose base is not here.
peft() {  # peft <name> <python assignment to c>: a copy of the exported adapter, changed
  cp -r exports/lora/adapter "$1"
  python3 -c "import json; f='$1/adapter_config.json'; c=json.load(open(f)); $2; json.dump(c, open(f, 'w'))"
}
peft dora 'c["use_dora"] = True'
peft hub 'c["base_model_name_or_path"] = "meta-llama/Llama-3.2-1B"'
peft gpt2 'c["target_modules"] = ["q_proj", "c_attn"]'
peft rank 'c["r"] = 8'
peft bad_dropout 'c["lora_dropout"] = 1.5'
expect 2 "use_dora = true is not supported: the trainer's adapters are plain LoRA" eval dora
expect 2 "the base model meta-llama/Llama-3.2-1B is not a model folder, checkpoint or run" \
  sample hub --prompt x
expect 2 'target_modules names "c_attn", not one of llama' export gpt2 --out x
expect 2 "adapter_model.safetensors: tensor '.*lora_A.weight' has shape \[4, 32\] but the model's is \[8, 32\]" \
  eval rank
expect 2 "exports/lora/adapter holds LoRA adapters \(train.lora.rank 4" train "${common[@]}" \
  --set train.init_from=exports/lora/adapter --set train.lora.rank=2 --set run.name=x
expect 2 "lora_dropout = 1.5 is not a dropout probability" train "${common[@]}" \
  --set train.init_from=bad_dropout --set run.name=x
[[ $failures -eq 0 ]] || exit 1
echo "lora: adapters train on a frozen base at every layout, export merged and as PEFT's"
