#!/usr/bin/env python3
"""Independent PyTorch reference for the trainer's models, GPT-2, Llama and GPT-NeoX
(tests/nn/torch_parity_test.cpp), each computed as Hugging Face's model of that name does from
weights in Hugging Face's layout.

Reads config.json (the model, as Hugging Face writes it), weights.safetensors,
batch.safetensors and trainer.safetensors from the directory given (or the folder hf/ there
for the first two), recomputes logits, loss, parameter gradients and ten AdamW steps in
float64 with autograd and
torch.optim.AdamW, and exits non-zero when the logits differ from the trainer's by more than
1e-5 relative, or the loss, gradients or step losses by more than 1e-4.

`make-hf DIR ARCH DTYPE SHARDS TIED` writes instead a Hugging Face model folder DIR/hf with
random weights (config.json; model.safetensors, or SHARDS files and an index; F32, BF16 or F16;
GPT-2's names under "transformer." with its causal-mask buffers, as GPT2LMHeadModel saves
them); a directory holding hf/ is then checked against that folder's weights, which the
trainer read by itself.
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "I32": np.int32, "F16": np.float16, "BF16": np.uint16}


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        arr = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=DTYPES[info["dtype"]])
        if info["dtype"] == "BF16":  # the top half of an fp32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = torch.from_numpy(arr.astype(arr.dtype).reshape(info["shape"]).copy())
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

    def __init__(self, weights, n_layer, n_head, gelu, eps):
        super().__init__(weights)
        self.n_layer, self.n_head, self.gelu = n_layer, n_head, "none" if gelu == "erf" else "tanh"
        self.eps = eps

    def forward(self, tokens, segments, lengths):
        B, T = tokens.shape
        C = self.w("wte.weight").shape[1]
        H, hs = self.n_head, C // self.n_head
        pos = positions_of(tokens, segments)  # positions restart where the segment changes
        x = self.w("wte.weight")[tokens] + self.w("wpe.weight")[pos]
        allowed = allowed_of(B, T, segments, lengths)
        for l in range(self.n_layer):
            h = f"h.{l}."
            a = F.layer_norm(x, (C,), self.w(h + "ln_1.weight"), self.w(h + "ln_1.bias"), self.eps)
            qkv = a @ self.w(h + "attn.c_attn.weight") + self.w(h + "attn.c_attn.bias")
            q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
            y = attend(q, k, v, allowed)
            x = x + y @ self.w(h + "attn.c_proj.weight") + self.w(h + "attn.c_proj.bias")
            m = F.layer_norm(x, (C,), self.w(h + "ln_2.weight"), self.w(h + "ln_2.bias"), self.eps)
            m = F.gelu(m @ self.w(h + "mlp.c_fc.weight") + self.w(h + "mlp.c_fc.bias"),
                       approximate=self.gelu)
            x = x + m @ self.w(h + "mlp.c_proj.weight") + self.w(h + "mlp.c_proj.bias")
        x = F.layer_norm(x, (C,), self.w("ln_f.weight"), self.w("ln_f.bias"), self.eps)
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
    """Llama as Hugging Face's LlamaForCausalLM computes it (and Qwen2ForCausalLM, whose q, k
    and v projections have biases, and Qwen3ForCausalLM, which RMS-norms each query and key
    head before the rotary embeddings): RMSNorm, heads of head_dim channels, rotary embeddings
    with rotate_half pairing (the inverse frequencies given, scaled as rope_scaling says),
    grouped-query attention (each key/value head serves n_head / n_kv_head consecutive query
    heads), SwiGLU, no other biases; torch.nn.Linear weights (out, in); the head is
    lm_head.weight or, tied, the token embedding."""

    def __init__(self, weights, n_layer, n_head, n_kv_head, head_dim, inv_freq, eps):
        super().__init__(weights)
        self.n_layer, self.n_head, self.n_kv_head = n_layer, n_head, n_kv_head
        self.hs, self.inv_freq, self.eps = head_dim, inv_freq, eps

    def rms_norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):
        return rope(x, pos, self.inv_freq)

    def proj(self, x, name):  # with its bias where it has one (Qwen2's q, k and v)
        y = x @ self.w(name + ".weight").T
        return y + self.w(name + ".bias") if self.has(name + ".bias") else y

    def heads(self, x, name, n):  # (B, n, T, hs), each head RMS-normed where it has a norm
        B, T, _ = x.shape
        x = x.view(B, T, n, self.hs)
        if self.has(name + ".weight"):  # Qwen3's q_norm, k_norm
            x = self.rms_norm(x, self.w(name + ".weight"))
        return x.transpose(1, 2)

    def forward(self, tokens, segments, lengths):
        B, T = tokens.shape
        C = self.w("model.embed_tokens.weight").shape[1]
        H, Hkv = self.n_head, self.n_kv_head
        hs = self.hs
        pos = positions_of(tokens, segments)
        allowed = allowed_of(B, T, segments, lengths)
        x = self.w("model.embed_tokens.weight")[tokens]
        for l in range(self.n_layer):
            h = f"model.layers.{l}."
            a = self.rms_norm(x, self.w(h + "input_layernorm.weight"))
            q = self.heads(self.proj(a, h + "self_attn.q_proj"), h + "self_attn.q_norm", H)
            k = self.heads(self.proj(a, h + "self_attn.k_proj"), h + "self_attn.k_norm", Hkv)
            v = self.proj(a, h + "self_attn.v_proj").view(B, T, Hkv, hs).transpose(1, 2)
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


def inv_freq_of(config, theta, d):
    """The fp32 inverse frequencies of d rotary channels as Hugging Face's rope initialisation
    functions compute them, and the factor its cos and sin are multiplied by: default, or
    scaled as config's rope_scaling says (linear, llama3, yarn)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "yarn":
        return yarn_of(config, scaling, theta, d)
    return rope_frequencies_of(kind, scaling, inv_freq), 1.0


def yarn_of(config, scaling, theta, d):
    """YaRN's inverse frequencies and attention factor as transformers (its current release)
    computes them: a stated factor wins over max_position_embeddings / the original context."""
    context = config["max_position_embeddings"]
    original = scaling.get("original_max_position_embeddings") or context
    factor = scaling.get("factor") or context / original
    attention = scaling.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    def pair_at(turns):  # the pair index of a frequency turning `turns` times over `original`
        return d * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = pair_at(beta_fast), pair_at(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    period = theta ** (torch.arange(0, d, 2).float() / d)
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    kept = 1 - ramp
    return (1.0 / (factor * period)) * (1 - kept) + (1.0 / period) * kept, attention


def rope_frequencies_of(kind, scaling, inv_freq):
    """inv_freq scaled by a rope_scaling of type `kind` (default, linear, llama3)."""
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_context = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_context / low, old_context / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    assert kind == "default", f"rope_scaling type {kind}"
    return inv_freq


def rope(x, pos, freqs):
    """Rotate-half rotary embeddings over all of x's last dimension (B, h, T, d) by freqs, the
    fp32 inverse frequencies (d/2) and the factor cos and sin are multiplied by (inv_freq_of),
    the angles, cos and sin in fp32 as Hugging Face computes them."""
    inv_freq, scale = freqs
    d = x.shape[-1]
    angle = pos[:, None, :, None].float() * inv_freq  # (B, 1, T, d/2) in fp32
    cos, sin = angle.cos() * scale, angle.sin() * scale
    cos = torch.cat([cos, cos], -1).double()
    sin = torch.cat([sin, sin], -1).double()
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Neox(Weights):
    """GPT-NeoX as Hugging Face's GPTNeoXForCausalLM computes it with use_parallel_residual:
    x + attn(ln1(x)) + mlp(ln2(x)); the fused query_key_value rows grouped by head
    ([q_h, k_h, v_h] for each head h); rotary embeddings on the first rotary_dims channels of
    each head; LayerNorm and biases; a GELU MLP, exact ("gelu", Pythia's) or the
    tanh form ("gelu_new"); the head is embed_out.weight or, tied, the token embedding."""

    def __init__(self, weights, n_layer, n_head, inv_freq, rotary_dims, gelu, eps):
        super().__init__(weights)
        self.n_layer, self.n_head, self.inv_freq, self.rd = n_layer, n_head, inv_freq, rotary_dims
        self.gelu, self.eps = "none" if gelu == "erf" else "tanh", eps

    def ln(self, x, name):
        return F.layer_norm(x, (x.shape[-1],), self.w(name + ".weight"), self.w(name + ".bias"),
                            self.eps)

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
            q = torch.cat([rope(q[..., :rd], pos, self.inv_freq), q[..., rd:]], -1)
            k = torch.cat([rope(k[..., :rd], pos, self.inv_freq), k[..., rd:]], -1)
            y = attend(q, k, v, allowed)
            attn = self.linear(y, h + "attention.dense")
            m = self.ln(x, h + "post_attention_layernorm")
            m = F.gelu(self.linear(m, h + "mlp.dense_h_to_4h"), approximate=self.gelu)
            x = x + attn + self.linear(m, h + "mlp.dense_4h_to_h")
        x = self.ln(x, "gpt_neox.final_layer_norm")
        head = "embed_out.weight" if self.has("embed_out.weight") else "gpt_neox.embed_in.weight"
        return x @ self.w(head).T


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=-1, reduction="mean")


def rel_err(a, b):
    return float((a.double() - b.double()).abs().max() / (b.double().abs().max() + 1e-30))


def write_safetensors(path, tensors):
    header, blobs, at = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def as_dtype(x, dtype):
    """float32 array x stored as dtype ("F32", "F16", "BF16": rounded to nearest even)."""
    if dtype == "F16":
        return x.astype(np.float16)
    if dtype == "BF16":
        u = x.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(np.float32)


def make_hf(d, arch, dtype, shards, tied):
    """A Hugging Face folder with random weights of the parity test's shape (arch: gpt2, llama,
    llama3 (a Llama with Llama 3.1's rope_scaling and a large rms_norm_eps), yarn (a Llama with
    YaRN's), qwen2, qwen3,
    mistral or neox)."""
    V, P, L, H, C = 67, 24, 2, 4, 32
    rng = np.random.default_rng(7)
    w = {}

    def rand(name, *shape, scale=0.15, offset=0.0):
        w[name] = (offset + scale * rng.standard_normal(shape)).astype(np.float32)

    if arch == "gpt2":
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
                  "n_positions": P, "n_ctx": P, "n_embd": C, "n_layer": L, "n_head": H,
                  "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1,
                  "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5,
                  "initializer_range": 0.02, "summary_type": "cls_index",
                  "summary_use_proj": True, "summary_activation": None,
                  "summary_proj_to_labels": True, "summary_first_dropout": 0.1,
                  "scale_attn_weights": True, "use_cache": True, "bos_token_id": 50256,
                  "eos_token_id": 50256, "scale_attn_by_inverse_layer_idx": False,
                  "reorder_and_upcast_attn": False, "torch_dtype": "float32",
                  "transformers_version": "4.44.0"}
        rand("transformer.wte.weight", V, C)
        rand("transformer.wpe.weight", P, C)
        for i in range(L):
            p = f"transformer.h.{i}."
            for ln in ("ln_1", "ln_2"):
                rand(p + ln + ".weight", C, scale=0.2, offset=1.0)
                rand(p + ln + ".bias", C, scale=0.1)
            rand(p + "attn.c_attn.weight", C, 3 * C)
            rand(p + "attn.c_attn.bias", 3 * C, scale=0.1)
            rand(p + "attn.c_proj.weight", C, C)
            rand(p + "attn.c_proj.bias", C, scale=0.1)
            rand(p + "mlp.c_fc.weight", C, 4 * C)
            rand(p + "mlp.c_fc.bias", 4 * C, scale=0.1)
            rand(p + "mlp.c_proj.weight", 4 * C, C)
            rand(p + "mlp.c_proj.bias", C, scale=0.1)
            w[p + "attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]  # a buffer
        rand("transformer.ln_f.weight", C, scale=0.2, offset=1.0)
        rand("transformer.ln_f.bias", C, scale=0.1)
    elif arch == "neox":  # as Pythia's config.json has it (its default, exact GELU)
        config = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
                  "vocab_size": V, "max_position_embeddings": P, "hidden_size": C,
                  "intermediate_size": 4 * C, "num_hidden_layers": L, "num_attention_heads": H,
                  "hidden_act": "gelu", "rotary_pct": 0.5, "rotary_emb_base": 500,
                  "layer_norm_eps": 1e-5, "use_parallel_residual": True,
                  "tie_word_embeddings": tied, "classifier_dropout": 0.1, "hidden_dropout": 0.0,
                  "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True,
                  "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float16",
                  "transformers_version": "4.24.0"}
        rand("gpt_neox.embed_in.weight", V, C)
        for i in range(L):
            p = f"gpt_neox.layers.{i}."
            for ln in ("input_layernorm", "post_attention_layernorm"):
                rand(p + ln + ".weight", C, scale=0.2, offset=1.0)
                rand(p + ln + ".bias", C, scale=0.1)
            rand(p + "attention.query_key_value.weight", 3 * C, C)
            rand(p + "attention.query_key_value.bias", 3 * C, scale=0.1)
            rand(p + "attention.dense.weight", C, C)
            rand(p + "attention.dense.bias", C, scale=0.1)
            rand(p + "mlp.dense_h_to_4h.weight", 4 * C, C)
            rand(p + "mlp.dense_h_to_4h.bias", 4 * C, scale=0.1)
            rand(p + "mlp.dense_4h_to_h.weight", C, 4 * C)
            rand(p + "mlp.dense_4h_to_h.bias", C, scale=0.1)
            w[p + "attention.rotary_emb.inv_freq"] = np.ones(2, np.float32)  # a buffer
        rand("gpt_neox.final_layer_norm.weight", C, scale=0.2, offset=1.0)
        rand("gpt_neox.final_layer_norm.bias", C, scale=0.1)
        if not tied:
            rand("embed_out.weight", V, C)
    else:
        Hkv, F = 2, 48
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "vocab_size": V, "max_position_embeddings": P, "hidden_size": C,
                  "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
                  "num_key_value_heads": Hkv, "hidden_act": "silu", "rms_norm_eps": 1e-5,
                  "rope_theta": 500.0, "rope_scaling": None, "attention_bias": False,
                  "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
                  "tie_word_embeddings": tied, "initializer_range": 0.02, "use_cache": True,
                  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
                  "transformers_version": "4.44.0"}
        if arch == "llama3":  # Llama 3.1's fields: scaled rotary (every band in use), eps
            config.update({"rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "rope_type": "llama3",
                                            "original_max_position_embeddings": 64},
                           "rms_norm_eps": 0.05, "transformers_version": "4.46.0"})
        if arch == "yarn":  # YaRN as a long-context Qwen config states it, positions beyond
            # its original context, turns chosen so that one pair is kept, one ramped (by 0.669:
            # no truncation) and two scaled by the factor
            config.update({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 16,
                                            "beta_fast": 4.0, "beta_slow": 0.25,
                                            "truncate": False},
                           "transformers_version": "4.57.0"})
        if arch == "qwen2":  # as Qwen2.5's config.json has it (no bias switches, a window off)
            for f in ("attention_bias", "mlp_bias", "pretraining_tp", "rope_scaling"):
                del config[f]
            config.update({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                           "use_sliding_window": False, "sliding_window": 32768,
                           "max_window_layers": 21, "transformers_version": "4.43.1"})
        hd = C // H
        if arch == "qwen3":  # as Qwen3's config.json has it: head_dim apart from hidden_size
            hd = 2 * C // H
            for f in ("mlp_bias", "pretraining_tp", "rope_scaling"):
                del config[f]
            config.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                           "head_dim": hd, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                           "use_sliding_window": False, "sliding_window": None,
                           "max_window_layers": 28, "transformers_version": "4.51.0"})
        if arch == "mistral":  # as Mistral 7B v0.3's config.json has it: no sliding window
            for f in ("attention_bias", "mlp_bias", "pretraining_tp", "rope_scaling"):
                del config[f]
            config.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                           "sliding_window": None, "head_dim": C // H,
                           "rope_theta": 1000000.0})
        kv = Hkv * hd
        rand("model.embed_tokens.weight", V, C)
        for i in range(L):
            p = f"model.layers.{i}."
            rand(p + "input_layernorm.weight", C, scale=0.2, offset=1.0)
            rand(p + "post_attention_layernorm.weight", C, scale=0.2, offset=1.0)
            rand(p + "self_attn.q_proj.weight", H * hd, C)
            rand(p + "self_attn.k_proj.weight", kv, C)
            rand(p + "self_attn.v_proj.weight", kv, C)
            if arch == "qwen2":
                rand(p + "self_attn.q_proj.bias", C, scale=0.3)
                rand(p + "self_attn.k_proj.bias", kv, scale=0.3)
                rand(p + "self_attn.v_proj.bias", kv, scale=0.3)
            if arch == "qwen3":
                rand(p + "self_attn.q_norm.weight", hd, scale=0.2, offset=1.0)
                rand(p + "self_attn.k_norm.weight", hd, scale=0.2, offset=1.0)
            rand(p + "self_attn.o_proj.weight", C, H * hd)
            rand(p + "mlp.gate_proj.weight", F, C)
            rand(p + "mlp.up_proj.weight", F, C)
            rand(p + "mlp.down_proj.weight", C, F)
        rand("model.norm.weight", C, scale=0.2, offset=1.0)
        if not tied:
            rand("lm_head.weight", V, C)
    out = Path(d) / "hf"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    names = list(w)
    buffer = [n for n in names if n.endswith((".attn.bias", ".inv_freq"))]
    stored = {n: ("F32", w[n]) if n in buffer else (dtype, as_dtype(w[n], dtype)) for n in names}
    if shards == 1:
        write_safetensors(out / "model.safetensors", stored)
        return 0
    weight_map = {}
    for s in range(shards):
        part = names[s::shards]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(out / file, {n: stored[n] for n in part})
        weight_map.update({n: file for n in part})
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2))
    return 0


def read_hf(folder):
    """The folder's parameters by the trainer's names (buffers and GPT-2's prefix dropped)."""
    weights = {}
    for f in sorted(folder.glob("*.safetensors")):
        weights.update(read_safetensors(f)[0])
    return {k.removeprefix("transformer."): v.float() for k, v in weights.items()
            if not k.endswith((".attn.bias", ".inv_freq"))}


def model_of(c, weights):
    """The model a Hugging Face config.json describes, with Hugging Face's defaults."""
    if c["model_type"] == "gpt2":
        gelu = "erf" if c.get("activation_function") == "gelu" else "tanh"
        return Gpt(weights, c["n_layer"], c["n_head"], gelu, c.get("layer_norm_epsilon", 1e-5))
    if c["model_type"] in ("llama", "qwen2", "qwen3", "mistral"):
        H = c["num_attention_heads"]
        fallback = 128 if c["model_type"] == "qwen3" else c["hidden_size"] // H
        hs = c.get("head_dim") or fallback
        inv_freq = inv_freq_of(c, c.get("rope_theta", 10000.0), hs)
        return Llama(weights, c["num_hidden_layers"], H, c["num_key_value_heads"], hs, inv_freq,
                     c.get("rms_norm_eps", 1e-6))
    C, H = c["hidden_size"], c["num_attention_heads"]
    rd = int(C // H * c.get("partial_rotary_factor", c.get("rotary_pct", 0.25)))
    inv_freq = inv_freq_of(c, c.get("rope_theta", c.get("rotary_emb_base", 10000.0)), rd)
    gelu = "erf" if c.get("hidden_act", "gelu") == "gelu" else "tanh"
    return Neox(weights, c["num_hidden_layers"], H, inv_freq, rd, gelu,
                c.get("layer_norm_eps", 1e-5))


def main(d):
    d = Path(d)
    model_dir = d / "hf" if (d / "hf").is_dir() else d
    if model_dir != d:
        weights = read_hf(model_dir)
    else:
        weights, _ = read_safetensors(d / "weights.safetensors")
    config = json.loads((model_dir / "config.json").read_text())
    arch = {"gpt2": "gpt2", "llama": "llama", "mistral": "llama", "qwen2": "qwen2",
            "qwen3": "qwen3", "gpt_neox": "neox"}[config["model_type"]]
    model = model_of(config, weights)
    batch, _ = read_safetensors(d / "batch.safetensors")
    ours, _ = read_safetensors(d / "trainer.safetensors")
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

    # The logits' bound is tighter: at most 8e-7 measured (the folders too), a 12-fold margin.
    worst = {"logits": check("logits", ours["logits"], logits.detach(), tol=1e-5),
             "loss": check("loss", ours["loss"], loss.detach().reshape(1))}
    grad_worst = 0.0
    for name in weights:
        grad_worst = max(grad_worst, check("grad " + name, ours["grad." + name],
                                           model.w(name).grad))
    worst["grads"] = grad_worst

    if arch == "gpt2":
        decay = [model.w(n) for n in weights if n.endswith(".weight") and n.count(".") >= 3
                 and ("attn" in n or "mlp" in n)]
    elif arch in ("llama", "qwen2", "qwen3"):  # every projection and an untied head
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
    if sys.argv[1] == "make-hf":
        sys.exit(make_hf(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]),
                         sys.argv[6] == "1"))
    sys.exit(main(sys.argv[1]))
