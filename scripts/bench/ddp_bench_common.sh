# What the benches over trainer_ddp_bench share, sourced as
#   source ddp_bench_common.sh NAME BENCH_PATH [bench options...]
# BENCH (BENCH_PATH, or build/app/trainer_ddp_bench), MPIRUN (2 ranks x 1 thread), ARGS (the
# default shape, L=8, C=256, V=4096, B=4, T=128, then the options) and field KEY LINE.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="${2:-$ROOT/build/app/trainer_ddp_bench}"
[[ -x "$BENCH" ]] || { echo "bench/$1: no trainer_ddp_bench at $BENCH" >&2; exit 1; }
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
ARGS=(--layers 8 --embd 256 --heads 4 --vocab 4096 --batch 4 --seq 128 --steps 4 --warmup 1
      "${@:3}")
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
