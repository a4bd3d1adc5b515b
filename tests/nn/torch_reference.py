#!/usr/bin/env python3
"""Independent PyTorch reference for the trainer's models, GPT-2, Llama and GPT-NeoX
(tests/nn/torch_parity_test.cpp), each computed as Hugging Face's model of that name does from
weights in Hugging Face's layout.

Reads weights.safetensors, batch.safetensors and trainer.safetensors from the directory given,
recomputes logits, loss, parameter gradients and ten AdamW steps in float64 with autograd and
torch.optim.AdamW, and exits non-zero when any differs from the trainer's by more than 1e-4
relative (logits, loss, gradients) or the step losses by more than 1e-4 relative.
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "I32": np.int32}


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=DTYPES[info["dtype"]])
        tensors[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return tensors, meta


class Weights(torch.nn.Module):
    """The checkpoint's tensors as float64 parameters, read by their names."""

    def __init__(self, weights):
        super().__init__()
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(v.double()) for k, v in weights.items()})

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def has(self, name):
        return name.replace(".", "__") in self.p


class Gpt(Weights):
    """GPT-2: learned positions, pre-LN blocks, tanh GELU, tied head. Weights in HF Conv1D
    orientation (in, out)."""

    def __init__(self, weights, n_layer, n_head):
        super().__init__(weights)
        self.n_layer, self.n_head = n_layer, n_head

    def forward(self, tokens, segments, lengths):
        B, T = tokens.shape
        C = self.w("wte.weight").shape[1]
        H, hs = self.n_head, C // self.n_head
        pos = positions_of(tokens, segments)  # positions restart where the segment changes
        x = self.w("wte.weight")[tokens] + self.w("wpe.weight")[pos]
        allowed = allowed_of(B, T, segments, lengths)
        for l in range(self.n_layer):
            h = f"h.{l}."
            a = F.layer_norm(x, (C,), self.w(h + "ln_1.weight"), self.w(h + "ln_1.bias"), 1e-5)
            qkv = a @ self.w(h + "attn.c_attn.weight") + self.w(h + "attn.c_attn.bias")
            q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
            y = attend(q, k, v, allowed)
            x = x + y @ self.w(h + "attn.c_proj.weight") + self.w(h + "attn.c_proj.bias")
            m = F.layer_norm(x, (C,), self.w(h + "ln_2.weight"), self.w(h + "ln_2.bias"), 1e-5)
            m = F.gelu(m @ self.w(h + "mlp.c_fc.weight") + self.w(h + "mlp.c_fc.bias"),
                       approximate="tanh")
            x = x + m @ self.w(h + "mlp.c_proj.weight") + self.w(h + "mlp.c_proj.bias")
        x = F.layer_norm(x, (C,), self.w("ln_f.weight"), self.w("ln_f.bias"), 1e-5)
        return x @ self.w("wte.weight").T


def positions_of(tokens, segments):
    """Each token's position within its document (restarting where the segment id changes)."""
    B, T = tokens.shape
    pos = torch.zeros_like(tokens)
    for t in range(1, T):
        if segments is None:
            pos[:, t] = pos[:, t - 1] + 1
        else:
            pos[:, t] = torch.where(segments[:, t] != segments[:, t - 1], 0, pos[:, t - 1] + 1)
    return pos


def attend(q, k, v, allowed):
    """Softmax attention of q over k and v (B, h, T, hs) where `allowed` (B, T, T) says, as
    (B, T, h * hs); a fully masked (padding) row gives zeros."""
    B, H, T, hs = q.shape
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
    s = s.masked_fill(~allowed[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ v).transpose(1, 2).reshape(B, T, H * hs)


def allowed_of(B, T, segments, lengths):
    idx = torch.arange(T)
    allowed = (idx[None, :] <= idx[:, None])[None].expand(B, T, T)
    if segments is not None:
        allowed = allowed & (segments[:, :, None] == segments[:, None, :])
    if lengths is not None:
        valid = idx[None, :] < lengths[:, None]
        allowed = allowed & valid[:, None, :] & valid[:, :, None]
    return allowed


class Llama(Weights):
    """Llama as Hugging Face's LlamaForCausalLM computes it: RMSNorm (eps 1e-5), rotary
    embeddings with rotate_half pairing, grouped-query attention (each key/value head serves
    n_head / n_kv_head consecutive query heads), SwiGLU, no biases; torch.nn.Linear weights
    (out, in); the head is lm_head.weight or, tied, the token embedding."""

    def __init__(self, weights, n_layer, n_head, n_kv_head, theta):
        super().__init__(weights)
        self.n_layer, self.n_head, self.n_kv_head, self.theta = n_layer, n_head, n_kv_head, theta

    @staticmethod
    def rms_norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x, pos):
        return rope(x, pos, self.theta)

    def forward(self, tokens, segments, lengths):
        B, T = tokens.shape
        C = self.w("model.embed_tokens.weight").shape[1]
        H, Hkv = self.n_head, self.n_kv_head
        hs = C // H
        pos = positions_of(tokens, segments)
        allowed = allowed_of(B, T, segments, lengths)
        x = self.w("model.embed_tokens.weight")[tokens]
        for l in range(self.n_layer):
            h = f"model.layers.{l}."
            a = self.rms_norm(x, self.w(h + "input_layernorm.weight"))
            q = (a @ self.w(h + "self_attn.q_proj.weight").T).view(B, T, H, hs).transpose(1, 2)
            k = (a @ self.w(h + "self_attn.k_proj.weight").T).view(B, T, Hkv, hs).transpose(1, 2)
            v = (a @ self.w(h + "self_attn.v_proj.weight").T).view(B, T, Hkv, hs).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
            y = attend(q, k, v, allowed)
            x = x + y @ self.w(h + "self_attn.o_proj.weight").T
            m = self.rms_norm(x, self.w(h + "post_attention_layernorm.weight"))
            g = F.silu(m @ self.w(h + "mlp.gate_proj.weight").T)
            u = m @ self.w(h + "mlp.up_proj.weight").T
            x = x + (g * u) @ self.w(h + "mlp.down_proj.weight").T
        x = self.rms_norm(x, self.w("model.norm.weight"))
        head = "lm_head.weight" if self.has("lm_head.weight") else "model.embed_tokens.weight"
        return x @ self.w(head).T


def rope(x, pos, theta):
    """Rotate-half rotary embeddings over all of x's last dimension (B, h, T, d), the angles in
    fp32 as Hugging Face computes them."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    angle = pos[:, None, :, None].float() * inv_freq  # (B, 1, T, d/2) in fp32
    cos = torch.cat([angle.cos(), angle.cos()], -1).double()
    sin = torch.cat([angle.sin(), angle.sin()], -1).double()
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Neox(Weights):
    """GPT-NeoX as Hugging Face's GPTNeoXForCausalLM computes it with use_parallel_residual:
    x + attn(ln1(x)) + mlp(ln2(x)); the fused query_key_value rows grouped by head
    ([q_h, k_h, v_h] for each head h); rotary embeddings on the first rotary_dims channels of
    each head; LayerNorm (eps 1e-5) and biases; a tanh-GELU MLP ("gelu_new"); the head is
    embed_out.weight or, tied, the token embedding."""

    def __init__(self, weights, n_layer, n_head, theta, rotary_dims):
        super().__init__(weights)
        self.n_layer, self.n_head, self.theta, self.rd = n_layer, n_head, theta, rotary_dims

    def ln(self, x, name):
        return F.layer_norm(x, (x.shape[-1],), self.w(name + ".weight"), self.w(name + ".bias"),
                            1e-5)

    def linear(self, x, name):
        return x @ self.w(name + ".weight").T + self.w(name + ".bias")

    def forward(self, tokens, segments, lengths):
        B, T = tokens.shape
        C = self.w("gpt_neox.embed_in.weight").shape[1]
        H = self.n_head
        hs = C // H
        pos = positions_of(tokens, segments)
        allowed = allowed_of(B, T, segments, lengths)
        x = self.w("gpt_neox.embed_in.weight")[tokens]
        for l in range(self.n_layer):
            h = f"gpt_neox.layers.{l}."
            a = self.ln(x, h + "input_layernorm")
            qkv = self.linear(a, h + "attention.query_key_value").view(B, T, H, 3 * hs)
            q, k, v = (t.transpose(1, 2) for t in qkv.split(hs, dim=-1))
            rd = self.rd
            q = torch.cat([rope(q[..., :rd], pos, self.theta), q[..., rd:]], -1)
            k = torch.cat([rope(k[..., :rd], pos, self.theta), k[..., rd:]], -1)
            y = attend(q, k, v, allowed)
            attn = self.linear(y, h + "attention.dense")
            m = self.ln(x, h + "post_attention_layernorm")
            m = F.gelu(self.linear(m, h + "mlp.dense_h_to_4h"), approximate="tanh")
            x = x + attn + self.linear(m, h + "mlp.dense_4h_to_h")
        x = self.ln(x, "gpt_neox.final_layer_norm")
        head = "embed_out.weight" if self.has("embed_out.weight") else "gpt_neox.embed_in.weight"
        return x @ self.w(head).T


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=-1, reduction="mean")


def rel_err(a, b):
    return float((a.double() - b.double()).abs().max() / (b.double().abs().max() + 1e-30))


def main(d):
    d = Path(d)
    weights, meta = read_safetensors(d / "weights.safetensors")
    batch, _ = read_safetensors(d / "batch.safetensors")
    ours, _ = read_safetensors(d / "trainer.safetensors")
    arch, V, P, L, H, C, Hkv, theta, rd = meta["config"].split()
    L, H, Hkv, theta, rd = int(L), int(H), int(Hkv), float(theta), int(rd)
    if arch == "gpt2":
        model = Gpt(weights, L, H)
    elif arch == "llama":
        model = Llama(weights, L, H, Hkv, theta)
    else:
        model = Neox(weights, L, H, theta, rd)
    tokens, targets = batch["tokens"].long(), batch["targets"]
    segments, lengths = batch.get("segments"), batch.get("lengths")

    logits = model(tokens, segments, lengths)
    loss = loss_of(logits, targets)
    loss.backward()
    failures = []

    # fp32 against float64, relative to each tensor's largest element: this model run in torch
    # fp32 (sums of depth <= 4C over B T = 60 tokens, in yet another order) is 4e-7 off on the
    # logits, 8e-7 on the gradients and 5e-8 on the ten step losses; any CPU's summation order
    # is as far. A wrong term, mask or sign is >= 1e-2.
    def check(what, got, want, tol=1e-4):
        err = rel_err(got, want)
        if not err <= tol:
            failures.append(f"{what}: relative error {err:.3e} > {tol:g}")
        return err

    worst = {"logits": check("logits", ours["logits"], logits.detach()),
             "loss": check("loss", ours["loss"], loss.detach().reshape(1))}
    grad_worst = 0.0
    for name in weights:
        grad_worst = max(grad_worst, check("grad " + name, ours["grad." + name],
                                           model.w(name).grad))
    worst["grads"] = grad_worst

    if arch == "gpt2":
        decay = [model.w(n) for n in weights if n.endswith(".weight") and n.count(".") >= 3
                 and ("attn" in n or "mlp" in n)]
    elif arch == "llama":  # every projection and an untied head
        decay = [model.w(n) for n in weights if n.endswith("_proj.weight") or n == "lm_head.weight"]
    else:  # every matrix of a block and an untied head
        decay = [model.w(n) for n in weights if n.endswith(".weight") and
                 (".attention." in n or ".mlp." in n or n == "embed_out.weight")]
    no_decay = [model.w(n) for n in weights if all(model.w(n) is not q for q in decay)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        step_loss = loss_of(model(tokens, segments, lengths), targets)
        losses.append(float(step_loss))
        step_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    worst["step_losses"] = check("step losses", ours["step_losses"], torch.tensor(losses))
    print(f"torch parity ({arch}): " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()) +
          f" (loss {losses[0]:.4f} -> {losses[-1]:.4f})")
    for f in failures:
        print("MISMATCH " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
