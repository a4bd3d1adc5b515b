#!/usr/bin/env python3
"""An independent computation of `trainer eval --task` scores (tests/app/tasks.sh).

usage: task_reference.py FOLDER SCORES
FOLDER is the model as `trainer export` wrote it (any architecture, fp32), SCORES the JSON
lines that `trainer eval --task ... --scores` wrote: every example's token sequences, where
each ending starts, and the trainer's summed log-likelihoods. Recomputes each log-likelihood
in float64 with the PyTorch reference model (tests/nn/torch_reference.py) and the accuracy
from them; exits non-zero when a log-likelihood differs by more than 1e-4 (relative, or
absolute below 1) or an example's answer differs where the two best choices are more than
1e-3 apart.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nn"))
from torch_reference import model_of, read_hf  # noqa: E402


def main(folder, scores):
    folder = Path(folder)
    model = model_of(json.loads((folder / "config.json").read_text()), read_hf(folder))
    worst, examples, correct, failures = 0.0, 0, 0, []
    with torch.no_grad():
        for line in Path(scores).read_text().splitlines():
            ex = json.loads(line)
            ours = []
            for tokens, start in zip(ex["tokens"], ex["scored_from"]):
                t = torch.tensor([tokens])
                logp = torch.log_softmax(model(t, None, None)[0], dim=-1)
                ours.append(float(sum(logp[i - 1, tokens[i]] for i in range(start, len(tokens)))))
            for a, b in zip(ex["log_likelihoods"], ours):
                err = abs(a - b) / max(1.0, abs(b))
                worst = max(worst, err)
                if err > 1e-4:
                    failures.append(f"example {ex['example']}: {a} against {b}")
            best = max(range(len(ours)), key=lambda i: (ours[i], -i))
            theirs = max(range(len(ours)), key=lambda i: (ex["log_likelihoods"][i], -i))
            top = sorted(ours, reverse=True)
            if best != theirs and top[0] - top[1] > 1e-3:
                failures.append(f"example {ex['example']}: answer {theirs}, the reference's {best}")
            examples += 1
            correct += best == ex["label"]
    print(f"task reference: {examples} examples, accuracy {correct / examples:.4f}, "
          f"log-likelihoods within {worst:.1e}")
    for f in failures[:10]:
        print("MISMATCH " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
