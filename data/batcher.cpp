// Materialising planned batches: windows for stream, packed rows with segment ids, padded rows;
// a loss mask's uncounted tokens are never targets.
#include "data/batcher.h"

#include "runtime/error.h"

namespace trainer::data {

namespace {

// Tokens [pos, pos+n) of the corpus, and whether each counts as a target (all do without a loss
// mask: instruction data marks its prompts' tokens as not counted).
struct Span {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> counted;

  void read(const Corpus& corpus, uint64_t pos, uint64_t n) {
    tokens.resize(n);
    counted.resize(n);
    corpus.read(pos, n, tokens.data());
    corpus.read_counted(pos, n, counted.data());
  }
  // The target after position i: the next token, or -1 at the end or where it does not count.
  int32_t target(size_t i) const {
    return i + 1 < tokens.size() && counted[i + 1] ? tokens[i + 1] : -1;
  }
};

// Writes one piece at row position `at`: tokens, targets (the document's next token while it
// continues and counts, else -1) and, if given, the segment id.
void put_piece(const Piece& piece, const Corpus& corpus, int32_t* tokens, int32_t* targets,
               int32_t* segments, int32_t segment, Span& span) {
  span.read(corpus, corpus.docs().starts[piece.doc] + piece.begin,
            piece.count + (piece.continues ? 1 : 0));
  for (uint32_t i = 0; i < piece.count; ++i) {
    tokens[i] = span.tokens[i];
    targets[i] = span.target(i);
    if (segments) segments[i] = segment;
  }
}

}  // namespace

Batch make_batch(const BatchPlan& plan, Mode mode, const Corpus& corpus) {
  Batch b;
  b.B = plan.rows;
  b.T = plan.T;
  size_t BT = size_t(b.B) * size_t(b.T);
  b.tokens.assign(BT, 0);
  b.targets.assign(BT, -1);
  Span span;
  switch (mode) {
    case Mode::stream: {
      for (int r = 0; r < b.B; ++r) {
        span.read(corpus, plan.windows[size_t(r)], size_t(b.T) + 1);
        int32_t* tok = b.tokens.data() + size_t(r) * b.T;
        int32_t* tgt = b.targets.data() + size_t(r) * b.T;
        for (int t = 0; t < b.T; ++t) tok[t] = span.tokens[size_t(t)], tgt[t] = span.target(t);
      }
      break;
    }
    case Mode::pack: {
      b.segments.assign(BT, -1);
      for (int r = 0; r < b.B; ++r) {
        size_t at = size_t(r) * b.T;
        int32_t seg = 0;
        for (const Piece& piece : plan.pieces[size_t(r)]) {
          put_piece(piece, corpus, &b.tokens[at], &b.targets[at], &b.segments[at], seg++, span);
          at += piece.count;
        }
      }
      break;
    }
    case Mode::bucket: {
      b.lengths.assign(size_t(b.B), 0);
      for (int r = 0; r < b.B; ++r) {
        const Piece& piece = plan.pieces[size_t(r)].front();
        size_t at = size_t(r) * b.T;
        put_piece(piece, corpus, &b.tokens[at], &b.targets[at], nullptr, 0, span);
        b.lengths[size_t(r)] = int32_t(piece.count);
      }
      break;
    }
  }
  for (int32_t t : b.targets) b.loss_tokens += t != -1;
  return b;
}

}  // namespace trainer::data
