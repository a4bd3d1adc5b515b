# Sourced by the bench scripts that run an older binary beside this one. `trainer bench` takes
# the model and its options as the run's keys (--set model.n_layer=12 ...) since issue 37;
# binaries from before read its own flags (-L 12 ...). bench_run BIN ARGS... runs BIN's bench
# with ARGS written in keys, translated for a binary that predates them.
bench_run() {
  local bin=$1 help
  shift
  help=$("$bin" bench --help 2>&1 || true)
  if [[ $help == *--set* ]]; then
    "$bin" bench "$@"
    return
  fi
  local args=() a key value
  while (($#)); do
    a=$1
    shift
    if [[ $a != --set ]]; then
      args+=("$a")
      continue
    fi
    key=${1%%=*} value=${1#*=}
    shift
    case $key in
      model.n_layer) args+=(-L "$value") ;;
      model.n_embd) args+=(-C "$value") ;;
      model.n_head) args+=(-H "$value") ;;
      model.vocab_size) args+=(-V "$value") ;;
      model.arch) args+=(--arch "$value") ;;
      model.n_kv_head) args+=(--kv-heads "$value") ;;
      model.ffn_hidden) args+=(--ffn "$value") ;;
      model.ffn_multiple_of) ;;  # those binaries rounded to 64 always
      model.rotary_pct) args+=(--rotary-pct "$value") ;;
      model.precision) args+=(--precision "$value") ;;
      model.activation_checkpointing) args+=(--checkpointing "$value") ;;
      *) echo "bench_run: $bin predates --set and has no flag for $key" >&2; return 2 ;;
    esac
  done
  "$bin" bench "${args[@]}"
}
