#!/usr/bin/env python3
"""Draws a run's loss and throughput curves (and its task accuracies, when train.eval_tasks
scored any) from its metrics.jsonl to a PNG.

usage: /usr/bin/python3 scripts/plot_metrics.py runs/gpt [out.png]   (Debian's python3-matplotlib)
"""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    run = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else run / "metrics.png"
    train, val, tasks = [], [], []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "val_loss" in rec:
            val.append(rec)
        elif any(k.startswith("task_") for k in rec):
            tasks.append(rec)
        elif "loss" in rec:
            train.append(rec)
    if not train:
        sys.exit(f"plot_metrics: {run}/metrics.jsonl has no training records")
    fig, axes = plt.subplots(1, 3 if tasks else 2, figsize=(18 if tasks else 12, 4.5))
    ax_loss, ax_speed = axes[0], axes[1]
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if val:
        ax_loss.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="val")
    ax_loss.set_xlabel("step")
    ax_loss.set_ylabel("loss (nats/token)")
    ax_loss.set_title(f"{run.name}: loss")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_speed.plot([r["step"] for r in train], [r["tokens_per_s"] for r in train], color="tab:green")
    ax_speed.set_xlabel("step")
    ax_speed.set_ylabel("tokens/s", color="tab:green")
    ax_mfu = ax_speed.twinx()
    ax_mfu.plot([r["step"] for r in train], [100 * r["mfu"] for r in train], color="tab:red",
                alpha=0.6)
    ax_mfu.set_ylabel("MFU (%)", color="tab:red")
    ax_speed.set_title(f"{run.name}: throughput")
    ax_speed.grid(alpha=0.3)
    if tasks:
        ax_task = axes[2]
        for key in sorted({k for r in tasks for k in r if k.startswith("task_")}):
            points = [(r["step"], r[key]) for r in tasks if key in r]
            ax_task.plot([p[0] for p in points], [p[1] for p in points], "o-",
                         label=key.removeprefix("task_").replace("_norm", " (normalised)"))
        ax_task.set_xlabel("step")
        ax_task.set_ylabel("accuracy")
        ax_task.set_title(f"{run.name}: tasks")
        ax_task.grid(alpha=0.3)
        ax_task.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_metrics: wrote {out}")


if __name__ == "__main__":
    main()
