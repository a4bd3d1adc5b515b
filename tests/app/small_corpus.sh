# Sourced by the end-to-end scripts: `small_corpus <trainer>` writes, in the current
# directory, text.txt (600 short sentences), a 320-piece BPE tokenizer tok.model and the
# prepared corpus/ (10% validation); `new_corpus <trainer>` then writes new.txt, 600 other
# sentences, prepared with the same tokenizer as new/ (data to fine-tune on).
small_corpus() {
  local trainer=$1 i
  for i in $(seq 1 300); do
    echo "the quick brown fox number $((i % 17)) jumps over the lazy dog near the river bank."
    echo "a lazy dog sleeps while the fox runs $((i % 5)) times around the old red barn."
    echo
  done > text.txt
  "$trainer" tokenizer train --input text.txt --vocab-size 320 --model-type bpe --out tok.model \
    >/dev/null
  "$trainer" prepare --tokenizer tok.model --input text.txt --format text --out corpus \
    --val-fraction 0.1 >/dev/null
}

new_corpus() {
  local trainer=$1 i
  for i in $(seq 1 300); do
    echo "a small cat number $((i % 7)) sits on the warm mat by the kitchen door all day."
    echo "the old man reads $((i % 3)) books in the quiet house while the rain falls."
    echo
  done > new.txt
  "$trainer" prepare --tokenizer tok.model --input new.txt --format text --out new \
    --val-fraction 0.1 >/dev/null
}
