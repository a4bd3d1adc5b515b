#!/usr/bin/env python3
"""PyTorch baseline for scripts/bench/cpu_step.sh: the same GPT-2 model and training step
(forward, backward, AdamW) on the CPU, timed the same way as `trainer bench`: in fp32, or
with bf16 autocast (fp32 weights and optimizer, bf16 products: the trainer's model.precision
bf16).

usage: torch_step.py L C H V B T [steps [fp32|bf16]]   -> prints "torch <ms/step> <tok/s>"
"""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.c_attn, self.c_proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.c_fc, self.mlp_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.H)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, L, C, H, V, T):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.blocks = torch.nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        for b in self.blocks:
            x = b(x, mask)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    L, C, H, V, B, T = map(int, sys.argv[1:7])
    steps = int(sys.argv[7]) if len(sys.argv) > 7 else 5
    precision = sys.argv[8] if len(sys.argv) > 8 else "fp32"
    if precision not in ("fp32", "bf16"):
        sys.exit(f"torch_step.py: precision {precision!r} is not fp32 or bf16")
    bf16 = precision == "bf16"
    # The trainer's threads: OpenMP's, every CPU unless OMP_NUM_THREADS says otherwise (this
    # build of PyTorch would take one thread on a 2-core machine).
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count()))
    torch.manual_seed(0)
    model = Gpt(L, C, H, V, T)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()

    step()
    step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    s = (time.perf_counter() - t) / steps
    print(f"torch {s * 1e3:.1f} {B * T / s:.1f} threads={torch.get_num_threads()}")


if __name__ == "__main__":
    main()
