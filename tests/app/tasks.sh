#!/usr/bin/env bash
# Downstream tasks through the binary (app/task_eval.h), on task files whose answers are
# knowable: contexts from the training corpus, whose true continuation is one ending and the
# same words shuffled the others (multiple choice, 4 endings), and the corpus's sentences for
# the last word (LAMBADA's shape).
#   - a trained model beats chance by a wide margin where an untrained one does not;
#   - the scores equal an independent float64 computation of the same log-likelihoods
#     (task_reference.py, on the exported weights);
#   - 2 ranks under mpirun report exactly what 1 rank does;
#   - train.eval_tasks scores them while training (2 ranks, ZeRO-3), into the metrics;
#   - bad task files are refused naming the file and line.
#   tasks.sh <trainer> <mpiexec>
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/small_corpus.sh"
TRAINER=$1
MPIEXEC=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=$(mktemp -d /tmp/trainer_tasks.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
small_corpus "$TRAINER"
fail() { echo "FAIL: $*"; exit 1; }
python3 - <<'PY'
import json, random
rng = random.Random(1)
lines = [l.strip() for l in open("text.txt") if l.strip()][:161]  # odd: 2 ranks differ
with open("choice.jsonl", "w") as mc, open("lastword.jsonl", "w") as lw:
    for line in lines:
        words = line.split()
        k = rng.randint(3, 6)
        rest = words[k:]
        endings = [" ".join(rest)]
        while len(endings) < 4:
            shuffled = rest[:]
            rng.shuffle(shuffled)
            if " ".join(shuffled) not in endings:
                endings.append(" ".join(shuffled))
        label = rng.randrange(4)
        endings[0], endings[label] = endings[label], endings[0]
        mc.write(json.dumps({"ctx": " ".join(words[:k]), "endings": endings, "label": label}) + "\n")
        lw.write(json.dumps({"text": line}) + "\n")
PY
common=(--set data.path=corpus --set data.tokenizer=tok.model --set run.dir=runs
        --set model.vocab_size=320 --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=64
        --set model.max_seq_len=64 --set data.seq_len=64 --set data.batch_size=8
        --set train.val_every=0 --set log.progress=off --set log.peak_gflops=100
        --set schedule.warmup_steps=10)
"$TRAINER" train "${common[@]}" --set run.name=trained --set train.steps=300 \
  --set optimizer.lr=3e-3 >/dev/null
"$TRAINER" train "${common[@]}" --set run.name=untrained --set train.steps=1 \
  --set optimizer.lr=1e-12 --set optimizer.min_lr=0 >/dev/null
accuracy() { python3 -c "import json,sys; j=json.loads(sys.stdin.read().splitlines()[-1]); print(j['tasks'][int(sys.argv[1])][sys.argv[2]])" "$@"; }
"$TRAINER" eval runs/trained --task choice.jsonl lastword.jsonl --scores scores.jsonl > trained.txt
"$TRAINER" eval runs/untrained --task choice.jsonl lastword.jsonl > untrained.txt
cat trained.txt untrained.txt | grep "^task "
t_mc=$(accuracy 0 accuracy <trained.txt) u_mc=$(accuracy 0 accuracy <untrained.txt)
t_lw=$(accuracy 1 accuracy <trained.txt) u_lw=$(accuracy 1 accuracy <untrained.txt)
# Chance is 0.25 with 4 endings (a standard deviation of 0.034 over 161 examples) and 0 for
# the last word (1/320 per token); the trained model, which saw these sentences, scores 1.0
# on both. The untrained one (its weights as initialised, the same on every machine) scores
# 0.325 and 0: a tied head at initialisation favours repeating the current token, not chance
# exactly, hence a bound of 0.4. Each bound is 8 to 32 examples of 161 away from the scores,
# where another CPU's rounding moves only near-ties.
python3 -c "import sys; t_mc, u_mc, t_lw, u_lw = map(float, sys.argv[1:])
assert t_mc >= 0.8, f'trained multiple choice {t_mc} < 0.8'
assert u_mc <= 0.4, f'untrained multiple choice {u_mc} > 0.4 (chance 0.25)'
assert t_lw >= 0.8, f'trained last word {t_lw} < 0.8'
assert u_lw <= 0.05, f'untrained last word {u_lw} > 0.05'" "$t_mc" "$u_mc" "$t_lw" "$u_lw" ||
  fail "accuracies: trained $t_mc / $t_lw, untrained $u_mc / $u_lw"

# The same log-likelihoods, computed independently from the exported weights.
"$TRAINER" export runs/trained --out trained-export >/dev/null
/usr/bin/python3 "$HERE/task_reference.py" trained-export scores.jsonl

# 2 ranks: each takes half the examples; the counts are summed exactly.
OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
  "$TRAINER" eval runs/trained --task choice.jsonl lastword.jsonl > two.txt
[[ "$(tail -1 two.txt)" == "$(tail -1 trained.txt)" ]] ||
  fail "2 ranks: $(tail -1 two.txt) against 1 rank: $(tail -1 trained.txt)"

# While training, on 2 ranks with sharded weights (161 examples: the rank with fewer joins the
# other's last gathers by an empty pass), every 5 steps and at the end.
OMP_NUM_THREADS=1 "$MPIEXEC" --allow-run-as-root --oversubscribe -np 2 \
  "$TRAINER" train "${common[@]}" --set run.name=scored --set train.steps=12 \
  --set dist.sharding=full --set 'train.eval_tasks=[choice.jsonl, lastword.jsonl]' \
  --set train.eval_tasks_every=5 >/dev/null
python3 -c "import json
recs = [json.loads(l) for l in open('runs/scored/metrics.jsonl') if 'task_choice' in l]
steps = [r['step'] for r in recs]
assert steps == [5, 10, 12], steps
assert all(0 <= r['task_choice'] <= 1 and 'task_choice_norm' in r and 'task_lastword' in r for r in recs), recs" ||
  fail "train.eval_tasks: $(grep task_ runs/scored/metrics.jsonl)"

# Bad files: refused with exit 2, naming the file and line.
bad() {
  printf '%s\n' "$2" > bad.jsonl
  local out rc=0
  out=$("$TRAINER" eval runs/trained --task bad.jsonl 2>&1) || rc=$?
  [[ $rc -eq 2 ]] && grep -Eq -- "$1" <<<"$out" || fail "task file '$2': exit $rc: $out"
}
bad "bad.jsonl:2: malformed JSON" '{"text": "a b c"}
{"text": '
bad "bad.jsonl:1: \"label\" 4 names no ending \(there are 2\)" '{"ctx": "a", "endings": ["b", "c"], "label": 4}'
bad "bad.jsonl:2: a multiple-choice example in a file of last-word ones" '{"text": "a b"}
{"ctx": "a", "endings": ["b", "c"], "label": 0}'
bad "bad.jsonl:1: neither a multiple-choice example" '{"context": "a"}'
bad "bad.jsonl:1: \"label\" = \"x\" is not an ending's index" '{"ctx": "a", "endings": ["b", "c"], "label": "x"}'
bad "bad.jsonl:1: \"label\" 4294967296 names no ending" '{"ctx": "a", "endings": ["b", "c"], "label": 4294967296}'
bad "bad.jsonl:1: \"ctx\" = 5 is not a string" '{"ctx": 5, "endings": ["b", "c"], "label": 0}'
bad "bad.jsonl:1: both a multiple-choice example's fields .* and a last-word one's" \
  '{"ctx": "a", "endings": ["b", "c"], "label": 0, "text": "a b"}'
bad "bad.jsonl:1: an ending is empty" '{"ctx": "a", "endings": ["b", ""], "label": 0}'
bad "bad.jsonl:1: \"label\" is given twice in one object" \
  '{"ctx": "a", "endings": ["b", "c"], "label": 0, "label": 1}'
long=$(python3 -c "print(' '.join(['fox'] * 80))")  # 80 words, a token or more each: over 64
bad "bad.jsonl:1: an ending of [0-9]+ tokens does not fit sequences of 64 tokens" \
  "{\"ctx\": \"a\", \"endings\": [\"b\", \"$long\"], \"label\": 0}"
mkdir -p other && cp choice.jsonl other/
out=$("$TRAINER" eval runs/trained --task choice.jsonl other/choice.jsonl 2>&1) && fail "two tasks of one name passed"
grep -q "task files choice.jsonl and other/choice.jsonl share the name 'choice'" <<<"$out" || fail "names: $out"
out=$("$TRAINER" eval runs/trained --task missing.jsonl 2>&1) && fail "a missing task file passed"
grep -q "task file missing.jsonl: cannot be read" <<<"$out" || fail "missing file: $out"
echo "tasks: trained $t_mc / $t_lw, untrained $u_mc / $u_lw (multiple choice / last word); 2 ranks equal 1"
