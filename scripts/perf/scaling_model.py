#!/usr/bin/env python3
"""Multi-GPU scaling on paper: predicted step time and scaling efficiency (a single GPU's step
time, with the same tokens per GPU, over this one's) of data-parallel
training (DDP and each sharding stage) for four model shapes, on one node of 8 H200 over
NVLink and on 2-16 such nodes over 400 Gb/s InfiniBand; then the 3D layouts of a 70B Llama on
256 GPUs (tensor parallel inside a node, pipeline across nodes, data parallel over the rest).

usage: /usr/bin/python3 scripts/perf/scaling_model.py [--mfu 0.45] [--markdown]

The model, per step of one GPU (docs/performance.md, "Scaling model"):
  compute   = 6 N' tokens / (peak x mfu), N' the matmul parameters plus attention's 2 L C T
              per token; backward is 2/3 of it, spread evenly over the L blocks.
  a collective of B bytes over n ranks at bus bandwidth W and per-hop latency a:
              all-reduce 2 (n-1)/n B / W + 2 (n-1) a; reduce-scatter and all-gather half that
              (nccl-tests' bus-bandwidth convention: W is what each rank's link carries).
  DDP       = all-reduce of the gradients (4 bytes each, fp32) in buckets started during
              backward: hidden behind all of backward but the first block's, never less than
              the last bucket exposed.
  optimizer = reduce-scatter of the gradients (hidden as DDP's) + all-gather of the bf16
              weights after the step (hidden behind the next forward but its first block).
  gradients = the same communication as optimizer; it saves memory, not bytes.
  full      = all-gather of each block's bf16 weights before its forward and again before its
              backward, reduce-scatter of its gradient after: each prefetched one block ahead,
              so exposed only where a block's communication outlasts its compute.
  Across nodes the collectives are hierarchical: NVLink inside the node, then each GPU's own
  400 Gb/s NIC (8 per node) carries 1/8 of the inter-node traffic.
  Hidden communication is not free: NCCL's kernels take SMs while they run, so the compute they
  overlap slows by --contention (assumed 10%) of the communication's time.
  optimizer step = AdamW over this GPU's parameters (all of them under DDP, 1/n sharded),
              memory-bound: 30 bytes per parameter at 80% of 4.8 TB/s.
The 3D layouts (layout_step; docs/performance.md, "The 70B layout"), per GPU and step of a
global batch of G tokens, T-way tensor, P-way pipeline and D-way data parallel:
  compute   = 6 N' (G / D) / (T P) / (peak x mfu): the tensor group splits every product and
              attention by heads, the pipeline splits the layers.
  tensor    = per micro-batch of b tokens and per layer of the stage, forward and backward,
              four all-reduces (or, with sequence parallelism, four reduce-scatter and
              all-gather pairs: the same bytes) of b x C bf16 values inside the node; on the
              critical path (not overlapped: Megatron-LM's default).
  pipeline  = the bubble, (P - 1) / (V m) of the compute and tensor time for m micro-batches
              per data replica (1F1B: V = 1; interleaved 1F1B with V virtual stages per GPU:
              docs/dist.md "Pipeline parallelism"); the residual stream sent between stages
              (b x C fp32 per micro-batch and chunk boundary, forward and backward, as this
              trainer sends it; 1/T of it each with sequence parallelism) over InfiniBand,
              overlapped with the next chunk's work, exposed only where a transfer outlasts it.
  data      = each GPU's 1/(T P) of the gradients and weights over D ranks, one per node, so
              every byte crosses InfiniBand: `optimizer` (ZeRO-1) a reduce-scatter of fp32
              gradients and an all-gather of bf16 weights per step, overlapped with the last
              micro-batch's backward and the first's forward; `full` (ZeRO-3) gathers the weights
              twice and reduce-scatters the gradients at every micro-batch, as dist.sharding=full
              does today, overlapped with that micro-batch's compute.
Bandwidths are public figures, not measured here (no GPU was lent): nccl-tests all-reduce bus
bandwidth on 8 H100/H200 SXM with NVSwitch is commonly reported at 450-480 GB/s (450 used);
NDR InfiniBand is 400 Gb/s = 50 GB/s per NIC (45 GB/s used: 90% efficiency). H100 and H200
SXM share the 989 TFLOP/s and NVLink; they differ in HBM (3.35 against 4.8 TB/s: AdamW's step)
and its size (80 against 141 GB: `trainer plan` and largest_model.py). The compute side
is an assumed MFU (--mfu) against 989 TFLOP/s dense bf16, to be replaced by scripts/gpu_check.sh's
measurement.
"""
import argparse
import sys
from dataclasses import dataclass

PEAK = 989e12            # H100/H200 SXM dense bf16 FLOP/s (datasheet)
NVLINK_BUSBW = 450e9     # bytes/s, nccl-tests all-reduce bus bandwidth, 8 GPUs, NVSwitch
NVLINK_LAT = 5e-6        # s per ring hop
IB_BUSBW = 45e9          # bytes/s per GPU: one 400 Gb/s NIC per GPU at 90%
IB_LAT = 10e-6           # s per ring hop
GPUS_PER_NODE = 8
BUCKET_BYTES = 25 * 2**20  # dist.bucket_mb
HBM = 0.8 * 4.8e12        # bytes/s: H200 HBM3e at 80%
HBM_BY_GPU = {"H100": 0.8 * 3.35e12, "H200": HBM}  # bytes/s at 80%: HBM3, HBM3e
MEMORY_BY_GPU = {"H100": 80e9, "H200": 141e9}      # bytes of HBM
ADAMW_BYTES = 30          # per parameter: read master, m, v, gradient; write master, m, v, bf16


@dataclass
class Shape:
    name: str
    layers: int
    channels: int
    vocab: int
    ffn: int            # MLP hidden size
    gated: bool         # SwiGLU (three MLP matrices) instead of GELU (two)
    seq: int
    rows: int           # rows per GPU per step
    kv: int = 0         # key/value channels (grouped-query attention; 0: as many as C)
    untied: bool = False  # a head of its own besides the token embedding

    def block_params(self):
        C = self.channels
        kv = self.kv or C
        return 2 * C * C + 2 * C * kv + (3 if self.gated else 2) * C * self.ffn

    def params(self):
        heads = 2 if self.untied else 1
        return self.layers * self.block_params() + heads * self.vocab * self.channels

    def flops_per_token(self):
        return 6 * self.params() + 12 * self.layers * self.channels * self.seq

    def tokens(self):
        return self.rows * self.seq


SHAPES = [
    Shape("GPT-2 124M", 12, 768, 50304, 3072, False, 1024, 16),
    Shape("GPT-2 350M", 24, 1024, 50304, 4096, False, 1024, 8),
    Shape("GPT-3 1.3B", 24, 2048, 50304, 8192, False, 2048, 4),
    Shape("Llama 7B", 32, 4096, 32000, 11008, True, 4096, 1),
]


def collective(kind, nbytes, ranks):
    """Seconds for one collective of `nbytes` over `ranks` GPUs (hierarchical across nodes)."""
    if ranks <= 1:
        return 0.0
    factor = 2.0 if kind == "all_reduce" else 1.0
    local = min(ranks, GPUS_PER_NODE)
    nodes = ranks // local
    t = factor * (local - 1) / local * nbytes / NVLINK_BUSBW + factor * (local - 1) * NVLINK_LAT
    if nodes > 1:  # each GPU's NIC carries its 1/local share across the nodes
        share = nbytes / local
        t += factor * (nodes - 1) / nodes * share / IB_BUSBW + factor * (nodes - 1) * IB_LAT
    return t


def step(shape, stage, ranks, mfu, contention):
    """(step seconds, compute seconds, exposed communication seconds) of one GPU."""
    compute = shape.flops_per_token() * shape.tokens() / (PEAK * mfu)
    forward, backward = compute / 3, 2 * compute / 3
    block_fwd, block_bwd = forward / shape.layers, backward / shape.layers
    grads = 4.0 * shape.params()  # fp32 gradients
    weights = 2.0 * shape.params()  # bf16 weights
    held = shape.params() if stage == "none" else shape.params() / ranks
    optimizer = ADAMW_BYTES * held / HBM
    if ranks == 1:
        comm = exposed = 0.0
    elif stage == "none":
        comm = collective("all_reduce", grads, ranks)
        last = collective("all_reduce", min(BUCKET_BYTES, grads), ranks)
        exposed = max(comm - (backward - block_bwd), last)
    elif stage in ("optimizer", "gradients"):
        rs = collective("reduce_scatter", grads, ranks)
        ag = collective("all_gather", weights, ranks)
        last = collective("reduce_scatter", min(BUCKET_BYTES, grads), ranks)
        comm = rs + ag
        exposed = max(rs - (backward - block_bwd), last) + max(ag - (forward - block_fwd), 0.0)
    else:  # full: per block, prefetched one block ahead
        unit_w = 2.0 * shape.block_params()
        unit_g = 4.0 * shape.block_params()
        gather = collective("all_gather", unit_w, ranks)
        scatter = collective("reduce_scatter", unit_g, ranks)
        per_block_fwd = max(gather - block_fwd, 0.0)
        per_block_bwd = max(gather + scatter - block_bwd, 0.0)
        embedding = collective("all_gather", 2.0 * shape.vocab * shape.channels, ranks)
        embedding_rs = collective("reduce_scatter", 4.0 * shape.vocab * shape.channels, ranks)
        comm = 2 * embedding + embedding_rs + shape.layers * (2 * gather + scatter)
        exposed = (gather + embedding + shape.layers * (per_block_fwd + per_block_bwd)
                   + embedding_rs)
    hidden = comm - min(exposed, comm)
    total = compute + optimizer + exposed + contention * hidden
    return total, compute, exposed


@dataclass
class Layout:
    tensor: int
    pipe: int
    data: int
    stage: str          # "optimizer" or "full" over the data group
    micro_tokens: int   # tokens per micro-batch (b)
    global_tokens: int  # tokens per step (G)
    virtual: int = 1    # chunks per pipeline stage (interleaved 1F1B; 1: plain 1F1B)
    sequence: bool = True  # sequence parallelism: each tensor rank sends 1/T of the stream

    def gpus(self):
        return self.tensor * self.pipe * self.data


LLAMA_70B = Shape("Llama 70B", 80, 8192, 128256, 28672, True, 4096, 1, kv=1024, untied=True)
LAYOUTS_70B = [Layout(8, 4, 8, "optimizer", 4096, 4 * 2**20),
               Layout(8, 4, 8, "full", 4096, 4 * 2**20),
               Layout(8, 4, 8, "optimizer", 4096, 4 * 2**20, virtual=5),
               Layout(8, 1, 32, "optimizer", 4096, 4 * 2**20),
               Layout(4, 8, 8, "optimizer", 4096, 4 * 2**20)]


def layout_step(shape, lay, mfu, contention, hbm=HBM):
    """(step seconds, efficiency against compute alone, parts) of one GPU in a 3D layout."""
    replica_tokens = lay.global_tokens / lay.data
    micro = replica_tokens / lay.micro_tokens  # micro-batches per data replica
    compute = shape.flops_per_token() * replica_tokens / (lay.tensor * lay.pipe) / (PEAK * mfu)
    layers = shape.layers / lay.pipe
    act = 2.0 * lay.micro_tokens * shape.channels  # bytes of one bf16 activation
    tensor = micro * layers * 4 * collective("all_reduce", act, lay.tensor)
    bubble = (lay.pipe - 1) / (lay.virtual * micro) * (compute + tensor)
    # The stream at each chunk boundary, forward and backward, over this GPU's NIC.
    sent = 4.0 * lay.micro_tokens * shape.channels / (lay.tensor if lay.sequence else 1)
    transfers = 0 if lay.pipe == 1 else micro * 2 * lay.virtual
    one = sent / IB_BUSBW + IB_LAT
    per_chunk = (compute + tensor) / (micro * lay.virtual * 3)  # a chunk's forward
    pipeline = transfers * max(one - per_chunk, 0.0)
    held = shape.params() / (lay.tensor * lay.pipe)  # this GPU's slice, before data sharding

    def across_nodes(kind, nbytes):  # one GPU per node in the data group: all of it on IB
        n = lay.data
        factor = 2.0 if kind == "all_reduce" else 1.0
        return 0.0 if n == 1 else factor * ((n - 1) / n * nbytes / IB_BUSBW + (n - 1) * IB_LAT)

    if lay.stage == "optimizer":
        rs, ag = across_nodes("reduce_scatter", 4.0 * held), across_nodes("all_gather", 2.0 * held)
        per_micro = compute / micro
        data = rs + ag
        exposed = max(rs - 2 / 3 * per_micro, 0.0) + max(ag - 1 / 3 * per_micro, 0.0)
    else:  # full: two gathers and a reduce-scatter of the slice at every micro-batch
        per = 2 * across_nodes("all_gather", 2.0 * held) + across_nodes("reduce_scatter", 4.0 * held)
        data = micro * per
        exposed = micro * max(per - compute / micro, 0.0)
    optimizer = ADAMW_BYTES * held / lay.data / hbm
    hidden = data - min(exposed, data) + transfers * one - pipeline
    total = compute + tensor + bubble + pipeline + exposed + optimizer + contention * hidden
    return total, compute / total, {"compute": compute, "tensor": tensor, "bubble": bubble,
                                    "pipeline exposed": pipeline, "data exposed": exposed,
                                    "optimizer": optimizer}


def layout_memory(shape, lay):
    """Bytes per GPU, roughly, on the first stage (which holds the most under 1F1B): the model
    state of its slice (bf16 weights and fp32 gradients whole plus 16/D under `optimizer`, 16/D
    under `full`), and with full activation checkpointing each held micro-batch's residual
    stream at every layer of the stage (fp32, 1/T of it with sequence parallelism), P of them
    under 1F1B; docs/dist.md "Memory" gives the exact plan (`trainer plan`)."""
    held = shape.params() / (lay.tensor * lay.pipe)
    state = held * (16.0 / lay.data + (6.0 if lay.stage == "optimizer" else 0.0))
    layers = shape.layers / lay.pipe
    stream = 4.0 * lay.micro_tokens * shape.channels / (lay.tensor if lay.sequence else 1)
    return state + lay.pipe * (layers + 1) * stream


def layout_table(mfu, contention):
    out = [f"{LLAMA_70B.name} ({LLAMA_70B.params() / 1e9:.1f}B), global batch "
           f"{LAYOUTS_70B[0].global_tokens / 2**20:.0f}M tokens of {LLAMA_70B.seq}, micro-batches "
           f"of {LAYOUTS_70B[0].micro_tokens} tokens, on 32 nodes of 8 GPUs:"]
    for gpu, hbm in HBM_BY_GPU.items():
        for lay in LAYOUTS_70B:
            t, eff, parts = layout_step(LLAMA_70B, lay, mfu, contention, hbm)
            detail = ", ".join(f"{k} {v:.2f} s" for k, v in parts.items())
            v = f" V={lay.virtual}" if lay.virtual > 1 else ""
            mem = layout_memory(LLAMA_70B, lay)
            out.append(f"  {gpu} TP={lay.tensor} PP={lay.pipe}{v} DP={lay.data} ({lay.gpus()} "
                       f"GPUs, data-parallel {lay.stage}): step {t:.2f} s, {100 * eff:.0f}% of it "
                       f"compute (MFU {100 * mfu * eff:.0f}%), about {mem / 1e9:.0f} of "
                       f"{MEMORY_BY_GPU[gpu] / 1e9:.0f} GB; {detail}")
    return "\n".join(out)


def table(mfu, contention, markdown):
    topologies = [(8, "1 node, NVLink")] + [(8 * n, f"{n} nodes, IB") for n in (2, 4, 8, 16)]
    stages = ["none", "optimizer", "gradients", "full"]
    rows = []
    for shape in SHAPES:
        for ranks, where in topologies:
            cells = []
            one, _, _ = step(shape, "none", 1, mfu, contention)
            for stage in stages:
                t, _, _ = step(shape, stage, ranks, mfu, contention)
                cells.append(f"{t * 1e3:.1f} ms ({100 * one / t:.0f}%)")
            rows.append((shape.name, f"{shape.params() / 1e9:.2f}B", f"{shape.tokens()}",
                         f"{ranks} ({where})", *cells))
    head = ("model", "params", "tokens/GPU", "GPUs", *[f"{s}: step (efficiency)" for s in stages])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
        out = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [head, *rows]]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mfu", type=float, default=0.45,
                    help="compute efficiency assumed for the step's FLOPs (default 0.45)")
    ap.add_argument("--contention", type=float, default=0.1,
                    help="slowdown of compute while communication overlaps it (default 0.1)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    a = ap.parse_args()
    if not 0 < a.mfu <= 1 or not 0 <= a.contention <= 1:
        sys.exit("scaling_model: --mfu must be in (0, 1] and --contention in [0, 1]")
    print(f"predicted step time per GPU and scaling efficiency (one GPU's step / this step), "
          f"MFU {a.mfu:.2f} of {PEAK / 1e12:.0f} TFLOP/s, fp32 gradients, bf16 weights, "
          f"contention {a.contention:.2f}")
    print(table(a.mfu, a.contention, a.markdown))
    print()
    print(layout_table(a.mfu, a.contention))


if __name__ == "__main__":
    main()
