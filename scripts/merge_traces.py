#!/usr/bin/env python3
"""Merges the ranks' traces of a run (log.trace_steps) into one Chrome trace file.

usage: merge_traces.py <run dir or its traces/ dir> [out.json]   (default: <traces>/trace.json)

Each rank's file (traces/rank-R.json) is process R of the timeline, its times already on rank
0's clock (Note [Trace clocks]), so merging is concatenation. The merged file's otherData lists
each rank's clock offset and its error bound. Open it in ui.perfetto.dev or chrome://tracing.
"""
import json
import re
import sys
from pathlib import Path


def rank_files(where):
    where = Path(where)
    traces = where / "traces" if (where / "traces").is_dir() else where
    files = sorted(traces.glob("rank-*.json"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))
    if not files:
        sys.exit(f"merge_traces: no rank-*.json in {traces}")
    return traces, files


def merge(files):
    events, ranks = [], []
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            sys.exit(f"merge_traces: {f} is not a trace: {e}")
        events += doc["traceEvents"]
        ranks.append(doc.get("otherData", {}))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"ranks": ranks}}


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    traces, files = rank_files(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else traces / "trace.json"
    merged = merge(files)
    out.write_text(json.dumps(merged))
    worst = max(r.get("clock_error_us", 0) for r in merged["otherData"]["ranks"])
    print(f"{out}: {len(files)} rank(s), {len(merged['traceEvents'])} events, "
          f"clocks within {worst:.1f} us of rank 0's")


if __name__ == "__main__":
    main()
