#!/usr/bin/env python3
"""What a run's trace says of each traced step, beside its metrics.jsonl (docs/tuning.md,
"Reading a trace").

usage: trace_summary.py <run dir>

Per rank and step: the step's time; the gradients' collectives (those of 4 KiB or more on the
communication thread: the step's own agreements are a few dozen bytes), the compute thread's
exposed waits for them, the share hidden as the metrics count it (1 - wait / busy), and the
share of their time the compute thread actually spent in ops ("beside ops": lower where the
communication thread takes the compute thread's core); and under pipelining the waits for
transfers as a share of the passes (the bubble). Then metrics.jsonl's figures (rank 0's step
time and its comm_wait_ms and comm_hidden; bubble, the stages' pooled idle share). The
collectives' spans are their time on the communication thread: on CPU (MPI) their time in
the network; under NCCL from their dequeueing to the device's completion, so the columns of
hidden time mean less there.
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from merge_traces import merge, rank_files  # noqa: E402

NOT_OPS = {"step", "phase", "comm_wait", "pipeline_wait", "checkpoint", "loader"}
GRADIENT_BYTES = 4096


def spans(events):
    """Complete spans per (pid, tid): (name, cat, begin, end, args), from balanced B/E."""
    out, stacks = defaultdict(list), defaultdict(list)
    for e in events:
        key = (e.get("pid"), e.get("tid"))
        if e["ph"] == "B":
            stacks[key].append(e)
        elif e["ph"] == "E":
            b = stacks[key].pop()
            out[key].append((b["name"], b["cat"], b["ts"], e["ts"], b.get("args", {})))
    return out


def union(intervals):
    merged = []
    for b, e in sorted(intervals):
        if merged and b <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([b, e])
    return merged


def overlap(b, e, merged):
    return sum(max(0.0, min(e, y) - max(b, x)) for x, y in merged)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = Path(sys.argv[1])
    if run.name == "traces":
        run = run.parent
    _, files = rank_files(run)
    doc = merge(files)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    by_thread = spans(doc["traceEvents"])
    metrics = {}
    lines = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:  # a line being written
            continue
        if "step_ms" in record:
            metrics[record["step"]] = record
    print(f"{'rank':>4} {'step':>5} {'step ms':>9} {'grad coll. ms':>13} {'exposed wait ms':>15} "
          f"{'hidden':>7} {'beside ops':>10} {'transfer wait ms':>16} {'bubble':>7}")
    pooled = defaultdict(lambda: [0.0, 0.0])  # step: [transfer waits, passes]
    for pid in sorted({p for p, _ in by_thread}):
        compute = next((s for (p, t), s in by_thread.items()
                        if p == pid and names.get((p, t)) == "compute"), [])
        # Every communication thread (a CUDA run has one per NCCL communicator).
        comm = [s for (p, t), ss in by_thread.items()
                if p == pid and names.get((p, t)) == "communication" for s in ss]
        active = union([(b, e) for n, c, b, e, _ in compute if c not in NOT_OPS])
        for name, _, b, e, args in compute:
            if name != "step":
                continue
            inside = lambda s: s[2] >= b and s[3] <= e  # noqa: E731
            grads = [s for s in comm if inside(s) and s[4].get("bytes", 0) >= GRADIENT_BYTES]
            busy = sum(s[3] - s[2] for s in grads)
            beside = sum(overlap(s[2], s[3], active) for s in grads)
            waits = sum(s[3] - s[2] for s in compute if inside(s) and s[1] == "comm_wait")
            transfer = sum(s[3] - s[2] for s in compute if inside(s) and s[1] == "pipeline_wait")
            passes = sum(s[3] - s[2] for s in compute if inside(s) and s[0] == "passes")
            step = args["step"]
            pooled[step][0] += transfer
            pooled[step][1] += passes
            print(f"{pid:4} {step:5} {(e - b) / 1e3:9.2f} {busy / 1e3:13.2f} {waits / 1e3:15.2f} "
                  f"{max(0.0, 1 - waits / busy) if busy else 1:7.1%} "
                  f"{beside / busy if busy else 1:10.1%} {transfer / 1e3:16.2f} "
                  f"{transfer / passes if passes else 0:7.1%}")
    print("metrics.jsonl (rank 0's step; the ranks' pooled figures):")
    for step, (transfer, passes) in sorted(pooled.items()):
        m = metrics.get(step, {})
        print(f"  step {step}: step_ms {m.get('step_ms', float('nan')):.2f}, "
              f"comm_wait_ms {m.get('comm_wait_ms', float('nan')):.2f}, "
              f"comm_hidden {m.get('comm_hidden', float('nan')):.1%}"
              + (f", bubble {m['bubble']:.1%} (trace: {transfer / passes:.1%} of the passes)"
                 if "bubble" in m else ""))


if __name__ == "__main__":
    main()
