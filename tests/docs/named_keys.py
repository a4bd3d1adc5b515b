#!/usr/bin/env python3
"""Every config key that the docs or the trainer's messages name exists.

usage: named_keys.py <trainer> <source dir>

A word such as `optimizer.grad_clip` in README.md, docs/*.md or a string literal of the
trainer's sources (advice in an error message, a help text) must be a key of
`trainer config --schema`, or a group of keys (`train.lora`), or be one of the names below that
only look like keys. A key renamed, or advice naming a key that never existed, fails here.
"""
import re
import subprocess
import sys
from pathlib import Path

TRAINER, SRC = sys.argv[1], Path(sys.argv[2])
SECTIONS = "run|model|data|optimizer|schedule|train|checkpoint|log|dist"
WORD = re.compile(rf"(?<![\w./-])((?:{SECTIONS})\.[a-z_][a-z_0-9]*(?:\.[a-z_][a-z_0-9]*)*)(\()?")
# Names that are not keys: files (a doc, a run's or an export's), a launch script, tokenizer.json's
# fields (model.vocab ...), Hugging Face tensor names (model.layers.N...).
NOT_KEYS = re.compile(
    r"^(.*\.(md|json|safetensors)|train\.log|train\.sbatch"
    r"|model\.(type|vocab|merges|dropout|unk_token|byte_fallback|ignore_merges)"
    r"|model\.(layers|norm|embed_tokens)(\..*)?)$")
STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def main():
    schema = subprocess.run([TRAINER, "config", "--schema"], stdout=subprocess.PIPE, text=True,
                            check=True).stdout
    keys = set(re.findall(r"^\| `([a-z_.0-9]+)` \|", schema, re.M))
    groups = {k.rsplit(".", i)[0] for k in keys for i in range(1, k.count(".") + 1)}
    texts = [(p, p.read_text()) for p in [SRC / "README.md", *sorted((SRC / "docs").glob("*.md"))]]
    for folder in ("app", "data", "dist", "nn", "runtime"):
        for p in sorted((SRC / folder).rglob("*")):
            if p.suffix in (".cpp", ".h", ".cu", ".cuh"):
                texts.append((p, "\n".join(STRING.findall(p.read_text()))))
    bad = []
    for path, text in texts:
        for m in WORD.finditer(text):
            word, call = m.group(1), m.group(2)
            if word in keys or word in groups or call or NOT_KEYS.match(word):
                continue
            bad.append(f"{path.relative_to(SRC)}: {word}")
    print(f"named keys: {len(texts)} files, {len(keys)} keys; {len(bad)} unknown")
    for b in sorted(set(bad)):
        print("  not a key:", b)
    return 1 if bad else 0


sys.exit(main())
