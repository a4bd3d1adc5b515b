#!/usr/bin/env bash
# Fuzzes the readers of untrusted input with libFuzzer (ASan and UBSan on): the shard reader,
# the safetensors reader, the checkpoint reader (manifest, trainer state, weights), the config
# parser, and a Hugging Face config.json with a task file's lines, each for the given time, one
# after another. Builds with clang in its own
# build directory (build-fuzz/); corpora are kept in build-fuzz/corpus/<target>/ between runs,
# and inputs that crash in build-fuzz/artifacts/.
#   scripts/fuzz.sh [seconds per target = 60] [targets... = all]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_LIMIT="${1:-60}"
shift || true
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=(shard_fuzz safetensors_fuzz checkpoint_fuzz config_fuzz hf_task_fuzz)
BUILD="$ROOT/build-fuzz"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DTRAINER_CUDA=OFF -DTRAINER_FUZZ=ON -DTRAINER_TESTS=OFF \
  -DTRAINER_MARCH= -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang >/dev/null
nice -n 10 ninja -C "$BUILD" "${TARGETS[@]}" >/dev/null
binary() { find "$BUILD" -name "$1" -type f -perm -u+x | head -1; }
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  mkdir -p "$corpus"
  # Seeds: real inputs of each kind, where there are some.
  case $t in
    shard_fuzz) find "$ROOT/corpora/brown" -name 'val-*.bin' -size -200k -exec cp {} "$corpus/" \; 2>/dev/null || true ;;
    config_fuzz) cp "$ROOT"/configs/*.yaml "$corpus/" ;;
    hf_task_fuzz) /usr/bin/python3 - "$corpus" <<'PY' ;;
import json, sys
# A published GPT-2's, Llama's and Pythia's config.json, each with a task file's lines.
configs = [
    {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 300,
     "n_positions": 64, "n_embd": 8, "n_layer": 1, "n_head": 2, "attn_pdrop": 0.1,
     "embd_pdrop": 0.1, "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-5},
    {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 300,
     "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
     "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
     "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
    {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 300,
     "hidden_size": 16, "intermediate_size": 64, "num_hidden_layers": 1,
     "num_attention_heads": 2, "max_position_embeddings": 64, "rotary_pct": 0.25,
     "hidden_act": "gelu", "use_parallel_residual": True, "attention_dropout": 0.0}]
tasks = ['{"ctx": "the cat sat on the", "endings": ["mat", "moon"], "label": 0}\n'
         '{"ctx": "a dog", "endings": ["barks", "flies", "reads"], "label": 2}\n',
         '{"text": "the quick brown fox jumps over the lazy dog"}\n{"text": "hello world"}\n']
for i, c in enumerate(configs):
    with open(f"{sys.argv[1]}/seed{i}", "wb") as f:
        f.write(json.dumps(c).encode() + b"\0" + tasks[i % 2].encode())
PY
    safetensors_fuzz | checkpoint_fuzz) /usr/bin/python3 - "$t" "$corpus/seed" <<'PY' ;;
import json, struct, sys
# Weights of the checkpoint target's small model (V=5, P=4, L=1, C=2) as safetensors.
C, V, P = 2, 5, 4
shapes = {"wte.weight": [V, C], "wpe.weight": [P, C]}
for n, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
             ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]),
             ("attn.c_proj.bias", [C]), ("ln_2.weight", [C]), ("ln_2.bias", [C]),
             ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
             ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
    shapes["h.0." + n] = s
shapes.update({"ln_f.weight": [C], "ln_f.bias": [C]})
header, blob = {}, b""
for name, shape in shapes.items():
    n = 1
    for d in shape: n *= d
    data = struct.pack(f"<{n}f", *([0.5] * n))
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
weights = struct.pack("<Q", len(h)) + h + blob
files = {f: {"bytes": 1, "crc32": 2} for f in
         ["model.safetensors", "optimizer.safetensors", "trainer_state.json", "config.yaml"]}
manifest = json.dumps({"format": "trainer-checkpoint", "version": 2, "step": 3, "files": files,
                       "retention": {"keep_last": 3, "keep_every": 0}})
state = json.dumps({"step": 3, "tokens_seen": 99, "world_size": 1,
                    "tokenizer_hash": "00000000000000ab",
                    "loader": {"seed": 1, "epoch": 0, "cursor": 3}})
with open(sys.argv[2], "wb") as f:
    f.write(weights if sys.argv[1] == "safetensors_fuzz"
            else manifest.encode() + b"\0" + state.encode() + b"\0" + weights)
PY
  esac
  echo "== $t for ${SECONDS_LIMIT}s"
  mkdir -p "$BUILD/artifacts"
  "$(binary "$t")" -max_total_time="$SECONDS_LIMIT" -max_len=65536 -rss_limit_mb=2048 \
    -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 "$corpus" 2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss|#[0-9]+ +DONE|==[0-9]+==ERROR|SUMMARY)" || true
done
