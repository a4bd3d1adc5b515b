"""Comparing two training runs of the end-to-end scripts (tensor_parallel.sh,
pipeline_parallel.sh), in their scratch directory: metrics and losses by step, and each exported
tensor against a reference run's, as the scripts argue their bounds."""
import json
import struct
from array import array


def tensors(path):
    """The fp32 tensors of a safetensors file, by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    return {name: array("f", body[t["data_offsets"][0]:t["data_offsets"][1]])
            for name, t in header.items() if name != "__metadata__"}


def metrics(name):
    """runs/<name>/metrics.jsonl's step lines, by step."""
    return {r["step"]: r for r in map(json.loads, open(f"runs/{name}/metrics.jsonl"))
            if "loss" in r}


def losses(name):
    return {step: r["loss"] for step, r in metrics(name).items()}


def compare(name, ref, loss_rel, norm_rel, steps, lr, channels, errors, worst):
    """Run `name` against `ref`: each step's loss within loss_rel; each exported tensor (exports/
    <name>/model.safetensors) within norm_rel of its norm, and every element within
    2 x steps x lr (an AdamW update is at most about lr). GPT-2's key bias [C, 2C) of
    c_attn.bias adds q.b_k to every score of a query, which the softmax ignores: its exact
    gradient is zero, both runs move it by rounding noise alone, which AdamW normalises into
    steps of up to lr, so it is left out of the norms. Appends failures to `errors` and each
    run's largest relative difference to `worst`."""
    got, want = losses(name), losses(ref)
    if sorted(got) != sorted(want):
        errors.append(f"{name}: steps {sorted(got)}, {ref} has {sorted(want)}")
    for step, loss in got.items():
        if abs(loss - want.get(step, float("inf"))) > loss_rel * abs(want.get(step, 1.0)):
            errors.append(f"{name}: step {step} loss {loss!r}, {ref} {want.get(step)!r}")
    a = tensors(f"exports/{name}/model.safetensors")
    b = tensors(f"exports/{ref}/model.safetensors")
    if sorted(a) != sorted(b):
        errors.append(f"{name}: exported tensors {sorted(set(a) ^ set(b))} differ from {ref}'s")
        return
    for t in b:
        noise = range(channels, 2 * channels) if t.endswith("attn.c_attn.bias") else range(0)
        kept = [(x, y) for i, (x, y) in enumerate(zip(a[t], b[t])) if i not in noise]
        diff = sum((x - y) ** 2 for x, y in kept) ** 0.5
        size = sum(y * y for _, y in kept) ** 0.5
        rel = diff / size if size else diff
        worst[name] = max(worst.get(name, 0.0), rel)
        far = max(abs(x - y) for x, y in zip(a[t], b[t]))
        if rel > norm_rel or far > 2 * steps * lr:
            errors.append(f"{name}: {t} differs by {rel:.3g} of its norm, {far:.3g} at most "
                          f"(bounds {norm_rel:g}, {2 * steps * lr:g})")
