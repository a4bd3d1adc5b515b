#!/usr/bin/env python3
"""Runs every command the docs show: each line of a ```sh block in README.md and docs/*.md.

usage: doc_commands.py <trainer> <source dir> <mpiexec>

Each document's commands run in order in a scratch directory of their own (so one block can use
what an earlier one wrote), two documents at a time, with `trainer` on PATH, configs/ and
scripts/ linked from the source, the prepared Brown corpus at corpora/brown (its texts at
corpora/cache/brown/text), a small text corpus at corpus/*.txt, and runs/gpt already trained
two steps (its step-2 is one to rewind to).
Commands that train get a short run appended (train.steps=1, no validation, a stated MFU peak,
and their own run.name unless they set one); a bench runs one step, without warm-up, against a
stated peak; an evaluation of the validation split reads two batches; mpirun gets
--oversubscribe (and --allow-run-as-root as root). Commands that need a Slurm cluster or
install and build the whole project are not run here: each names the test that runs it, and
this script checks that the test still holds the command. A command that fails fails the test,
and so does a docs/config.md that is not what `trainer config --schema` prints.
"""
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAINER, SRC, MPIEXEC = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), sys.argv[3]
SHORT = ["--set", "train.steps=1", "--set", "train.val_every=0", "--set", "log.peak_gflops=100",
         "--set", "log.progress=off", "--set", "checkpoint.every=0"]

# Commands run elsewhere: (regex on the command, test file, text that file must contain).
ELSEWHERE = [
    (r"^bash scripts/test\.sh", ".ci/run", "scripts/test.sh"),
    (r"^bash scripts/install_deps\.sh", "scripts/test.sh", "scripts/install_deps.sh"),
    (r"^bash scripts/build\.sh build", "scripts/test.sh", "scripts/build.sh build"),
    # Its steps: install_deps.sh and build.sh (above), prepare_data.sh (the test fixture brown),
    # then train, eval and sample of configs/gpt.yaml, which the quick start's blocks run here.
    (r"^bash scripts/run_default\.sh", "tests/CMakeLists.txt", "scripts/prepare_data.sh"),
    (r"^srun -n \d+ --mpi=pmix trainer", "tests/app/slurm.sh", "srun -n 2 --mpi=pmix"),
    (r"^scripts/launch/srun\.sh ", "tests/app/slurm.sh", "scripts/launch/srun.sh"),
    (r"^sbatch scripts/launch/train\.sbatch", "tests/app/slurm.sh", "scripts/launch/train.sbatch"),
    (r"^sbatch --nodes=\d+ --ntasks-per-node=\d+ scripts/launch/train\.sbatch",
     "tests/app/multi_node.sh", "-N 2 --ntasks-per-node=2"),
    (r"^salloc -n \d+ mpirun -np \d+ trainer", "tests/app/slurm.sh", "salloc -n 2 mpirun"),
    # A trace names steps beyond the one a doc command trains; the scripts read its files.
    (r"log\.trace_steps=", "tests/app/traces.sh", "log.trace_steps=3-5"),
    (r"^python3 scripts/merge_traces\.py ", "tests/app/traces.sh", "merge_traces.py"),
    (r"^python3 scripts/trace_summary\.py ", "tests/app/traces.sh", "trace_summary.py"),
    # A cooldown branch sets its own train.steps, beyond the one step a doc command trains.
    (r"train\.resume=runs/gpt-constant/checkpoints/step-\d+ .*schedule\.decay_steps=",
     "tests/app/wsd_cooldown.sh", "--set train.resume=runs/constant/checkpoints/step-20"),
]


def commands(doc):
    """The command lines of doc's ```sh blocks."""
    out, inside = [], False
    for line in doc.read_text().splitlines():
        if line.strip().startswith("```"):
            inside = line.strip() == "```sh" if not inside else False
            continue
        if inside and line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return out


def trains(argv):
    """Whether the command runs `trainer train` (directly, under mpirun or a launch script)."""
    if argv[0].endswith("scripts/launch/mpirun.sh"):
        return True
    if "trainer" not in argv:
        return False
    rest = argv[argv.index("trainer") + 1:]
    return bool(rest) and (rest[0] in ("train", "--config") or rest[0].endswith(".yaml"))


def prepare(argv, env, cwd):
    """The command as this test runs it."""
    if trains(argv):
        argv = argv + SHORT
        if not any(a.startswith("run.name=") for a in argv):
            argv += ["--set", f"run.name=doc{prepare.count}"]
            prepare.count += 1
    if argv[0] == "mpirun":
        argv = [MPIEXEC, "--oversubscribe", "-x", "OMP_NUM_THREADS=1"] + \
            (["--allow-run-as-root"] if os.geteuid() == 0 else []) + argv[1:]
    if argv[0] == "trainer" and argv[1:2] == ["eval"] and "--task" not in argv:
        argv += ["--max-batches", "2"]
    if argv[0] == "trainer" and argv[1:2] == ["bench"]:
        for flag, value in (("--steps", "1"), ("--warmup", "0"), ("--peak-gflops", "100")):
            if flag not in argv:
                argv += [flag, value]
    if argv[0].endswith("scripts/launch/mpirun.sh"):
        # This machine stands in for the hosts file's nodes: as many ranks as it has cores.
        if "HOSTFILE" in env:
            argv[1] = str(min(int(argv[1]), os.cpu_count() or 1))
            (cwd / env["HOSTFILE"]).write_text(f"localhost slots={argv[1]}\n")
            env["RANKS_PER_NODE"] = argv[1]
            env["BTL_IF"] = "lo"
    return argv


prepare.count = 0


def split_env(argv):
    env = dict(os.environ)
    while argv and re.match(r"^[A-Z_]+=", argv[0]):
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    return argv, env


def fixture(root):
    """What every document's scratch directory starts from."""
    base = root / "fixture"
    (base / "bin").mkdir(parents=True)
    (base / "bin" / "trainer").symlink_to(TRAINER)
    brown, cache = SRC / "corpora" / "brown", SRC / "corpora" / "cache" / "brown" / "text"
    if not (brown / "manifest.json").exists() or not (cache / ".done").exists():
        subprocess.run(["bash", str(SRC / "scripts" / "prepare_data.sh")], check=True,
                       env={**os.environ, "TRAINER": str(TRAINER)}, stdout=subprocess.DEVNULL)
    # 100 of the 500 texts (ca01.txt, which interop.md reads, first): 1.2 MB, 207k words, ample
    # for the docs' 8000-piece tokenizer and a 2% validation split, in a fifth of the time.
    texts = sorted(cache.glob("*.txt"))[:100]
    (base / "corpus").mkdir()
    for t in texts:
        shutil.copy(t, base / "corpus" / t.name)
    subprocess.run([str(TRAINER), "train", str(SRC / "configs" / "gpt.yaml"), "--set",
                    f"run.dir={base / 'runs'}", "--set",
                    f"data.path={brown}", "--set", f"data.tokenizer={brown / 'tok.model'}"] + SHORT
                   + ["--set", "train.steps=2"],
                   check=True, stdout=subprocess.DEVNULL)
    return base


def scratch(base, root, name):
    d = root / name
    d.mkdir()
    for link in ("configs", "scripts"):
        (d / link).symlink_to(SRC / link)
    (d / "corpora").mkdir()
    (d / "corpora" / "brown").symlink_to(SRC / "corpora" / "brown")
    (d / "corpora" / "cache").symlink_to(SRC / "corpora" / "cache")  # the texts, read only
    shutil.copytree(base / "corpus", d / "corpus")
    shutil.copytree(base / "runs", d / "runs", symlinks=True)
    return d


def run_doc(doc, base, root):
    """Runs doc's commands in order in a scratch directory of its own: (the lines to print, the
    failures, commands run here, commands run by other tests)."""
    out, failures, ran, elsewhere = [], [], 0, 0
    lines = commands(doc)
    if not lines:
        return out, failures, ran, elsewhere
    cwd = scratch(base, root, doc.stem)
    for line in lines:
        where = next(((f, text) for pat, f, text in ELSEWHERE if re.search(pat, line)), None)
        if where:
            if where[1] not in (SRC / where[0]).read_text():
                failures.append(f"{doc.name}: `{line}`: {where[0]} no longer runs it")
            out.append(f"{doc.name}: run by {where[0]}: {line}")
            elsewhere += 1
            continue
        argv, env = split_env(shlex.split(line, comments=True))
        env["PATH"] = f"{base / 'bin'}:{env['PATH']}"
        argv = prepare(argv, env, cwd)
        start = time.time()
        # A hang guard: the heaviest command (bench: 124M parameters set up, then a step on
        # 4 x 64 tokens, ~0.2 TFLOP) took 13 s here beside another document's and 21 s beside
        # another test as well: 300 s is over 10x that, and a hang still fails with its command
        # named within the test's 900 s.
        p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        ran += 1
        status = "ok" if p.returncode == 0 else f"FAILED (exit {p.returncode})"
        out.append(f"{doc.name}: {status} in {time.time() - start:.1f} s: {line}")
        if p.returncode != 0:
            failures.append(f"{doc.name}: `{line}` exited {p.returncode}:\n"
                            + "\n".join(p.stdout.splitlines()[-5:]))
    return out, failures, ran, elsewhere


def main():
    docs = [SRC / "README.md"] + sorted((SRC / "docs").glob("*.md"))
    root = Path(tempfile.mkdtemp(prefix="trainer_doc_commands."))
    failures, ran, elsewhere = [], 0, 0
    try:
        base = fixture(root)
        # Two documents at a time, each in its own directory: a command waits on files, fsync
        # and process start-up as much as on the cores, which the other document's use meanwhile.
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for out, f, r, e in pool.map(lambda doc: run_doc(doc, base, root), docs):
                print("\n".join(out))
                failures += f
                ran += r
                elsewhere += e
    finally:
        shutil.rmtree(root, ignore_errors=True)
    schema = subprocess.run([str(TRAINER), "config", "--schema"], stdout=subprocess.PIPE,
                            text=True, check=True).stdout
    if schema != (SRC / "docs" / "config.md").read_text():
        failures.append("docs/config.md is not what `trainer config --schema` prints: regenerate it")
    print(f"doc commands: {ran} run here, {elsewhere} run by other tests, {len(failures)} failed")
    for f in failures:
        print("FAIL:", f)
    # The docs hold over 50 commands run here (README.md 20 of them): a parser that loses a
    # kind of block finds far fewer, and 30 leaves room for the docs to change.
    if ran < 30:
        print(f"FAIL: only {ran} commands found: is the ```sh parsing broken?")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
