#!/usr/bin/env python3
"""The largest Llama-style model that trains on H200s, planned by `trainer plan`: for each
precision (fp32, bf16 with fp32 gradients), activation checkpointing (none, full) and sharding
stage, on one GPU and per GPU of an 8-GPU node, the biggest of a ladder of shapes whose
planned memory per rank fits in 93% of 141 GB (the rest for the CUDA context, cuBLASLt and
cuDNN workspaces and fragmentation). Micro-batch 1 x 4096 tokens.

usage: /usr/bin/python3 scripts/perf/largest_model.py [trainer] [--markdown]
Planned, not measured: no GPU was lent when this was written; scripts/gpu_check.sh measures
peak device memory where one is.
"""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 0.93 * 141e9 / 2**20
# (name, layers, channels, heads, key/value heads), Llama-family proportions.
LADDER = [("1B", 16, 2048, 16, 4), ("3B", 28, 3072, 24, 8), ("7B", 32, 4096, 32, 8),
          ("13B", 40, 5120, 40, 8), ("20B", 44, 6144, 48, 8), ("34B", 48, 8192, 64, 8),
          ("50B", 64, 8192, 64, 8), ("70B", 80, 8192, 64, 8), ("140B", 96, 12288, 96, 8)]
ROW = re.compile(r"^\s+(none|optimizer|gradients|full)\s+(fp32|bf16/g32)\s+.*?"
                 r"([0-9.]+) /\s*([0-9.]+)\s*$")


def plan(trainer, shape, world):
    """{(stage, precision, checkpointing): MiB per rank} for one shape."""
    _, L, C, H, kv = shape
    cmd = [trainer, "plan", "--config", str(ROOT / "configs/llama-1b.yaml"), "--world-size",
           str(world)]
    for k, v in {"model.n_layer": L, "model.n_embd": C, "model.n_head": H, "model.n_kv_head": kv,
                 "model.ffn_hidden": 0, "model.max_seq_len": 4096, "data.seq_len": 4096,
                 "data.batch_size": 1}.items():
        cmd += ["--set", f"{k}={v}"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    totals = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            stage, precision, none, full = m.groups()
            totals[(stage, precision, "none")] = float(none)
            totals[(stage, precision, "full")] = float(full)
    if not totals:
        sys.exit(f"largest_model: no plan table in the output of {' '.join(cmd)}")
    return totals


def main():
    args = [a for a in sys.argv[1:] if a != "--markdown"]
    markdown = "--markdown" in sys.argv[1:]
    trainer = args[0] if args else str(ROOT / "build/trainer")
    rows = []
    for world in (1, 8):
        plans = [(shape, plan(trainer, shape, world)) for shape in LADDER]
        stages = ["none"] if world == 1 else ["none", "optimizer", "gradients", "full"]
        for stage in stages:
            for precision in ("fp32", "bf16/g32"):
                for ckpt in ("none", "full"):
                    fits = [(s[0], p[(stage, precision, ckpt)]) for s, p in plans
                            if p[(stage, precision, ckpt)] <= LIMIT_MIB]
                    best = fits[-1] if fits else ("none fits", 0.0)
                    rows.append((f"{world} GPU{'s' if world > 1 else ''}", stage, precision, ckpt,
                                 best[0], f"{best[1] / 1024:.1f} GiB"))
    head = ("GPUs", "sharding", "precision", "checkpointing", "largest", "planned per GPU")
    if markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        for r in [head, *rows]:
            print("  ".join(x.ljust(w) for x, w in zip(r, widths)))


if __name__ == "__main__":
    main()
