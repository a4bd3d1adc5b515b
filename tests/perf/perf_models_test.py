#!/usr/bin/env python3
"""Checks the two paper models of docs/performance.md against properties they must have.

usage: perf_models_test.py <source dir> <trainer>
  scaling_model.py: no step shorter than its compute and its optimizer update; DDP never gains
  from more nodes; at one GPU every stage is DDP; the model reacts to its assumptions (slower
  links or more contention never make a step shorter). Its 3D layouts: one GPU is a plain
  step; the tensor group's time grows with its degree; the 70B layout's step is its compute
  split over 256 GPUs plus what is exposed, the bubble shrinking with more micro-batches.
  largest_model.py: more sharding or checkpointing never fits a smaller model.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

SRC, TRAINER = Path(sys.argv[1]), sys.argv[2]
spec = importlib.util.spec_from_file_location("scaling", SRC / "scripts/perf/scaling_model.py")
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
errors = []
for shape in m.SHAPES:
    compute = shape.flops_per_token() * shape.tokens() / (m.PEAK * 0.45)
    prev = 0.0
    for ranks in (1, 8, 16, 32, 64, 128):
        for stage in ("none", "optimizer", "gradients", "full"):
            t, c, e = m.step(shape, stage, ranks, 0.45, 0.1)
            # The same double expression (exactly equal today); 1e-12 s absorbs a reordering of
            # it (1e-16 of compute times below 1 s).
            if t < compute or abs(c - compute) > 1e-12 or e < 0:
                errors.append(f"{shape.name} {stage} x{ranks}: step {t} below compute {compute}")
            if ranks == 1 and abs(t - m.step(shape, "none", 1, 0.45, 0.1)[0]) > 1e-12:
                errors.append(f"{shape.name} {stage}: one GPU differs from DDP")
            if m.step(shape, stage, ranks, 0.45, 0.3)[0] < t:
                errors.append(f"{shape.name} {stage} x{ranks}: more contention, shorter step")
        ddp = m.step(shape, "none", ranks, 0.45, 0.1)[0]
        if ddp < prev:
            errors.append(f"{shape.name}: DDP faster on {ranks} GPUs than on fewer")
        prev = ddp
# The 3D layouts.
one = m.Layout(1, 1, 1, "optimizer", 4096, 4096)
t, eff, parts = m.layout_step(m.LLAMA_70B, one, 0.45, 0.1)
# eff is compute / t, so eff * t is compute within two roundings (1e-15 s of a step of seconds):
# 1e-9 s absorbs any reordering.
if parts["tensor"] or parts["bubble"] or parts["data exposed"] or abs(eff * t - parts["compute"]) > 1e-9:
    errors.append(f"one GPU in the 3D model is not a plain step: {parts}")
prev = 0.0
for tensor in (1, 2, 4, 8):
    lay = m.Layout(tensor, 4, 8, "optimizer", 4096, 4 * 2**20)
    t, eff, parts = m.layout_step(m.LLAMA_70B, lay, 0.45, 0.1)
    if parts["tensor"] < prev or t < parts["compute"] + parts["tensor"]:
        errors.append(f"TP={tensor}: tensor time {parts['tensor']} (fewer ranks: {prev}), step {t}")
    prev = parts["tensor"]
base = m.Layout(8, 4, 8, "optimizer", 4096, 4 * 2**20)
more = m.Layout(8, 4, 8, "optimizer", 4096, 8 * 2**20)
b1, b2 = (m.layout_step(m.LLAMA_70B, x, 0.45, 0.1)[2] for x in (base, more))
if not b2["bubble"] / b2["compute"] < b1["bubble"] / b1["compute"]:
    errors.append("twice the micro-batches does not shrink the pipeline bubble's share")
# 6N + 12 L C T FLOPs per token (N = 70.6B, T = 4096), 4M tokens, over 256 GPUs.
expected = (6 * m.LLAMA_70B.params() + 12 * 80 * 8192 * 4096) * 2**22 / 256 / (m.PEAK * 0.45)
# Its matrices, and the 2 L + 1 norm vectors of C, are the published count (exact integers).
# The compute is the same product in another order, a few roundings (1e-16 each) apart: 1e-9.
if m.LLAMA_70B.params() + (2 * 80 + 1) * 8192 != 70553706496 or abs(b1["compute"] - expected) > 1e-9 * expected:
    errors.append(f"70B layout compute {b1['compute']} s, 6N tokens / GPUs gives {expected} s")
m.IB_BUSBW /= 4
if m.step(m.SHAPES[-1], "full", 128, 0.45, 0.1)[0] <= m.step(m.SHAPES[-1], "full", 8, 0.45, 0.1)[0]:
    errors.append("a 4x slower InfiniBand does not slow 16 nodes under full sharding")

out = subprocess.run([sys.executable, str(SRC / "scripts/perf/largest_model.py"), TRAINER],
                     check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()[1:]
order = ["1B", "3B", "7B", "13B", "20B", "34B", "50B", "70B", "140B", "none fits"]
size = {}
for line in out:
    f = line.split()
    gpus, stage, precision, ckpt, largest = f[0] + f[1], f[2], f[3], f[4], f[5]
    size[(gpus, stage, precision, ckpt)] = order.index(largest) if largest in order else -1
for (gpus, stage, precision, ckpt), s in size.items():
    if gpus.startswith("8") and stage != "none":
        less = {"optimizer": "none", "gradients": "optimizer", "full": "gradients"}[stage]
        if s < size[(gpus, less, precision, ckpt)]:
            errors.append(f"{stage} fits less than {less} ({precision}, checkpointing {ckpt})")
    if ckpt == "full" and s < size[(gpus, stage, precision, "none")]:
        errors.append(f"{gpus} {stage} {precision}: checkpointing fits a smaller model")
for e in errors[:10]:
    print("FAIL:", e)
print(f"perf models: {len(errors)} failure(s)")
sys.exit(1 if errors else 0)
