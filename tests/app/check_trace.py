#!/usr/bin/env python3
"""Checks a merged trace of a run (scripts/merge_traces.py) against the trace schema and the
run's metrics (Note [Traces]).

usage: check_trace.py <trace.json> <metrics.jsonl> <ranks> <first step> <last step> <names...>

<names...>: span names that must appear on every rank (e.g. "wait for transfer"). Checks:
one process per rank, named, and every thread that recorded named; "compute" and "loader" on
every rank, and "communication" with more than one; B/E events nested and matched per thread
in time order, async b/e matched per id; one "step" span per traced step on every rank, rank
0's equal to metrics.jsonl's step_ms; each step covered by its phases; each rank's clock
offset within its bound of 0 (the ranks share a machine); and the ranks' spans of a step
overlapping once the clocks are aligned.
"""
import json
import re
import sys
from collections import defaultdict


def fail(message):
    sys.exit(f"check_trace: FAIL: {message}")


def main():
    path, metrics_path, ranks, first, last = sys.argv[1:6]
    required = sys.argv[6:]
    ranks, first, last = int(ranks), int(first), int(last)
    doc = json.load(open(path))
    events = doc["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    timed = [e for e in events if e["ph"] != "M"]
    processes = defaultdict(list)
    for e in meta:
        if e["name"] == "process_name":
            processes[e["pid"]].append(e["args"]["name"])
    if sorted(processes) != list(range(ranks)) or any(len(v) != 1 for v in processes.values()):
        fail(f"process names {dict(processes)}, want one for each of ranks 0-{ranks - 1}")
    if sorted({e["pid"] for e in timed}) != list(range(ranks)):
        fail(f"events of processes {sorted({e['pid'] for e in timed})}")
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    for key in {(e["pid"], e["tid"]) for e in timed}:
        # The recorder calls a thread that never named itself "thread N".
        if re.fullmatch(r"thread \d+", threads.get(key, "thread 0")):
            fail(f"thread {key} recorded events but never named itself")
    want = {"compute", "loader"} | ({"communication"} if ranks > 1 else set())
    for pid in range(ranks):
        have = {n for (p, _), n in threads.items() if p == pid}
        if not want <= have:
            fail(f"rank {pid} names threads {sorted(have)}, want {sorted(want)} among them")

    # Nesting: per thread in file order, times never go back, every E closes the last B.
    spans, stacks, last_ts, asyncs = defaultdict(list), defaultdict(list), {}, {}
    for e in timed:
        key = (e["pid"], e["tid"])
        if e["ts"] < last_ts.get(key, float("-inf")):
            fail(f"thread {key}: time goes back at {e}")
        last_ts[key] = e["ts"]
        if e["ph"] == "B":
            stacks[key].append(e)
        elif e["ph"] == "E":
            if not stacks[key] or stacks[key][-1]["name"] != e["name"]:
                fail(f"thread {key}: {e} closes nothing open")
            b = stacks[key].pop()
            spans[key].append((b["name"], b["cat"], b["ts"], e["ts"], b.get("args", {}),
                               len(stacks[key])))
        elif e["ph"] in "be":
            akey = (e["pid"], e["id2"]["local"], e["name"])
            if e["ph"] == "b":
                asyncs[akey] = e
            elif asyncs.pop(akey, None) is None:
                fail(f"async end {e} without its begin")
        else:
            fail(f"unexpected phase {e['ph']}")
    if any(stacks.values()) or asyncs:
        fail(f"spans left open: {[s for s in stacks.values() if s]} {list(asyncs)}")

    names = defaultdict(set)
    for (pid, _), ss in spans.items():
        for s in ss:
            names[pid].add(s[0])
    for pid in range(ranks):
        missing = [n for n in required if n not in names[pid]]
        if missing:
            fail(f"rank {pid} has no {missing} span")

    metrics = {r["step"]: r for r in map(json.loads, open(metrics_path)) if "step_ms" in r}
    steps = {}  # (pid, step): (begin, end)
    for pid in range(ranks):
        compute = next(ss for (p, t), ss in spans.items() if p == pid and threads[(p, t)] == "compute")
        mine = [s for s in compute if s[0] == "step"]
        if sorted(s[4]["step"] for s in mine) != list(range(first, last + 1)):
            fail(f"rank {pid} traced steps {[s[4]['step'] for s in mine]}, want {first}-{last}")
        for name, _, b, e, args, depth in mine:
            step = args["step"]
            steps[(pid, step)] = (b, e)
            # The step's phases are its direct children; only a few lines of bookkeeping lie
            # between them, microseconds against steps of tens of milliseconds here: 80%
            # leaves room for a preemption of a few milliseconds in a gap on a loaded machine.
            phases = sum(s[3] - s[2] for s in compute if s[5] == depth + 1 and b <= s[2] and s[3] <= e)
            if phases < 0.8 * (e - b):
                fail(f"rank {pid} step {step}: phases cover {phases / (e - b):.1%} of it")
            # Rank 0's span is the interval its metrics' step_ms measures (the same two clock
            # reads); the trace prints each end to 1 ns.
            if pid == 0 and abs((e - b) / 1e3 - metrics[step]["step_ms"]) > 1e-4:
                fail(f"step {step}: the trace's {(e - b) / 1e3} ms against step_ms "
                     f"{metrics[step]['step_ms']}")
    error = max(r.get("clock_error_us", 0) for r in doc["otherData"]["ranks"])
    # The test's ranks share one machine's steady clock: their true offset is 0, which the
    # proven interval must hold (to the file's rounding of 1 ns).
    for r in doc["otherData"]["ranks"]:
        for key in ("clock_offset_us", "clock_offset_end_us"):
            if abs(r[key]) > r["clock_error_us"] + 1e-3:
                fail(f"rank {r['rank']}'s {key} {r[key]} us is outside its bound "
                     f"{r['clock_error_us']} us, on one machine")
    # Every step ends in the world's agreement (its "agree" span holds the world's all-reduce),
    # which no rank leaves before all have entered: each rank's agree span of a step overlaps
    # rank 0's, once the clocks agree within their bound. The spans are a fraction of a
    # millisecond, so misplaced clocks show.
    agrees = {}
    for pid in range(ranks):
        compute = next(ss for (p, t), ss in spans.items() if p == pid and threads[(p, t)] == "compute")
        for step in range(first, last + 1):
            b, e = steps[(pid, step)]
            agrees[(pid, step)] = next((s[2], s[3]) for s in compute
                                       if s[0] == "agree" and b <= s[2] and s[3] <= e)
    for (pid, step), (b, e) in agrees.items():
        b0, e0 = agrees[(0, step)]
        if b > e0 + error or e < b0 - error:
            fail(f"rank {pid}'s agreement of step {step} [{b}, {e}] misses rank 0's [{b0}, {e0}] "
                 f"(clocks within {error} us)")
    print(f"check_trace: {ranks} rank(s), steps {first}-{last}, {len(timed)} events: schema, "
          f"step_ms and alignment (within {error:.1f} us) hold")


if __name__ == "__main__":
    main()
