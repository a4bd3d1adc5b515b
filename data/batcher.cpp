// Materialising planned batches: windows for stream, packed rows with segment ids, padded rows.
#include "data/batcher.h"

#include "runtime/error.h"

namespace trainer::data {

namespace {

// Writes one piece at row position `at`: tokens, targets (the document's next token while it
// continues, -1 after its last token) and, if given, the segment id.
void put_piece(const Piece& piece, const Corpus& corpus, int32_t* tokens, int32_t* targets,
               int32_t* segments, int32_t segment, std::vector<int32_t>& scratch) {
  uint64_t n = piece.count + (piece.continues ? 1 : 0);
  scratch.resize(n);
  corpus.read(corpus.docs().starts[piece.doc] + piece.begin, n, scratch.data());
  for (uint32_t i = 0; i < piece.count; ++i) {
    tokens[i] = scratch[i];
    targets[i] = i + 1 < n ? scratch[i + 1] : -1;
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
  std::vector<int32_t> scratch;
  switch (mode) {
    case Mode::stream: {
      scratch.resize(size_t(b.T) + 1);
      for (int r = 0; r < b.B; ++r) {
        corpus.read(plan.windows[size_t(r)], scratch.size(), scratch.data());
        int32_t* tok = b.tokens.data() + size_t(r) * b.T;
        int32_t* tgt = b.targets.data() + size_t(r) * b.T;
        for (int t = 0; t < b.T; ++t) tok[t] = scratch[size_t(t)], tgt[t] = scratch[size_t(t) + 1];
      }
      break;
    }
    case Mode::pack: {
      b.segments.assign(BT, -1);
      for (int r = 0; r < b.B; ++r) {
        size_t at = size_t(r) * b.T;
        int32_t seg = 0;
        for (const Piece& piece : plan.pieces[size_t(r)]) {
          put_piece(piece, corpus, &b.tokens[at], &b.targets[at], &b.segments[at], seg++, scratch);
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
        put_piece(piece, corpus, &b.tokens[at], &b.targets[at], nullptr, 0, scratch);
        b.lengths[size_t(r)] = int32_t(piece.count);
      }
      break;
    }
  }
  for (int32_t t : b.targets) b.loss_tokens += t != -1;
  return b;
}

}  // namespace trainer::data
