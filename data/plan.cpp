// Planning of global batches for the stream, pack and bucket modes.
#include "data/plan.h"

#include <algorithm>
#include <numeric>

#include "runtime/error.h"

namespace trainer::data {

// Note [Global order]
// Every rank runs the same planner over the same document lengths, so all agree on one
// sequence of global batches per epoch, a pure function of (seed, epoch). The unit shuffled
// is a window of T+1 tokens (stream) or a document (pack, bucket), through a keyed Feistel
// permutation: nothing per token or per document is stored. The epochs' batches follow each
// other in one sequence, and lockstep round k gives its (k*W + r)-th batch to rank r: a round
// that the epoch cannot fill takes the next epoch's first batches, so no batch is dropped or
// repeated at an epoch's end, and the sequence, and so each optimizer step's global batch,
// is the same at every world size and every accumulation (a rule by W would drop or pad
// W-dependent tails: a run on 1 rank and one on 4 with the same global batch parted at the
// first epoch's end). Only when the last epoch (data.epochs) ends does a round go short: the
// ranks past its batches get none. Within an epoch, a stream batch with fewer than B windows
// is dropped (drop_last) or filled with the epoch's first windows. The loader's cursor counts
// the epoch's global batches handed out, so a restart at any world size continues the same
// sequence. Pack and bucket planning carry state across batches (pieces that did not fit, the
// sorted window); seeking replays the epoch from its start, which touches document lengths
// only (about 10 ns per document).

namespace {
constexpr uint64_t kStreamKey = 1, kDocKey = 2, kDealKey = 3;
constexpr int64_t kBucketWindowBatches = 64;  // sort this many batches' worth of documents
constexpr size_t kDealGroup = 8;              // bucket batches of similar size stay together

int64_t round_up8(int64_t n) {
  return (n + 7) / 8 * 8;
}

// Checks a config against a corpus; throws trainer::UsageError / trainer::Error.
void validate_plan_config(const PlanConfig& c, const DocIndex& docs) {
  if (c.seq_len < 1) throw UsageError(fmt::format("seq_len must be >= 1, got {}", c.seq_len));
  if (c.mode != Mode::bucket && c.batch_size < 1)
    throw UsageError(fmt::format("batch_size must be >= 1, got {}", c.batch_size));
  if (c.mode == Mode::bucket && c.max_tokens < c.seq_len)
    throw UsageError(
        fmt::format("bucket mode needs max_tokens >= seq_len ({} < {})", c.max_tokens, c.seq_len));
  if (c.mode == Mode::stream) {
    CHECK(docs.num_tokens() > uint64_t(c.seq_len),
          "corpus has {} tokens, too few for one window of seq_len + 1 = {}", docs.num_tokens(),
          c.seq_len + 1);
  } else {
    CHECK(docs.num_docs() > 0, "corpus has no documents");
  }
}
}  // namespace

EpochPlanner::EpochPlanner(const PlanConfig& c, const DocIndex& docs) : c_(c), docs_(docs) {
  validate_plan_config(c, docs);
  if (c_.mode == Mode::stream) num_windows_ = (docs_.num_tokens() - 1) / uint64_t(c_.seq_len);
  start(0);
}

void EpochPlanner::start(int64_t epoch) {
  epoch_ = epoch;
  batch_ = 0;
  window_ = 0;
  doc_cursor_ = piece_offset_ = 0;
  pending_.clear();
  ready_.clear();
  if (c_.mode == Mode::stream)
    perm_ = Permutation(num_windows_, epoch_key(c_.seed, epoch, kStreamKey));
  else
    perm_ = Permutation(docs_.num_docs(), epoch_key(c_.seed, epoch, kDocKey));
}

std::optional<BatchPlan> EpochPlanner::next() {
  switch (c_.mode) {
    case Mode::stream:
      return next_stream();
    case Mode::pack:
      return next_pack();
    case Mode::bucket:
      return next_bucket();
  }
  return std::nullopt;
}

int64_t EpochPlanner::skip(int64_t n) {
  if (c_.mode == Mode::stream) {
    uint64_t B = uint64_t(c_.batch_size);
    int64_t total = int64_t(c_.drop_last ? num_windows_ / B : (num_windows_ + B - 1) / B);
    int64_t k = std::clamp<int64_t>(total - batch_, 0, n);
    batch_ += k;
    return k;
  }
  int64_t k = 0;
  while (k < n && next()) ++k;
  return k;
}

std::optional<BatchPlan> EpochPlanner::next_stream() {
  uint64_t B = uint64_t(c_.batch_size), T = uint64_t(c_.seq_len);
  uint64_t first = uint64_t(batch_) * B;
  if (first >= num_windows_) return std::nullopt;
  if (first + B > num_windows_ && c_.drop_last) return std::nullopt;
  BatchPlan p;
  p.rows = int(B);
  p.T = int(T);
  for (uint64_t i = 0; i < B; ++i) p.windows.push_back(perm_((first + i) % num_windows_) * T);
  p.real_tokens = p.loss_tokens = int64_t(B * T);
  ++batch_;
  return p;
}

std::optional<Piece> EpochPlanner::next_piece() {
  while (doc_cursor_ < docs_.num_docs()) {
    uint64_t d = perm_(doc_cursor_);
    uint64_t len = docs_.length(d);
    if (piece_offset_ >= len) {  // (empty documents contribute nothing)
      ++doc_cursor_;
      piece_offset_ = 0;
      continue;
    }
    Piece p;
    p.doc = d;
    p.begin = piece_offset_;
    p.count = uint32_t(std::min<uint64_t>(len - piece_offset_, uint64_t(c_.seq_len)));
    p.continues = piece_offset_ + p.count < len;
    piece_offset_ += p.count;
    if (!p.continues) {
      ++doc_cursor_;
      piece_offset_ = 0;
    }
    return p;
  }
  return std::nullopt;
}

std::optional<BatchPlan> EpochPlanner::next_pack() {
  // First fit over the batch's B rows: carried-over pieces first, then new ones in order,
  // until B pieces are waiting or every row is full. Pieces never split further here.
  const int B = c_.batch_size, T = c_.seq_len;
  BatchPlan p;
  p.rows = B;
  p.T = T;
  p.pieces.resize(size_t(B));
  std::vector<int> fill(size_t(B), 0);
  std::vector<Piece> waiting;
  int full = 0;
  auto place = [&](const Piece& piece) {
    for (int r = 0; r < B; ++r) {
      if (fill[size_t(r)] + int(piece.count) <= T) {
        p.pieces[size_t(r)].push_back(piece);
        fill[size_t(r)] += int(piece.count);
        if (fill[size_t(r)] == T) ++full;
        p.real_tokens += piece.count;
        p.loss_tokens += piece.count - (piece.continues ? 0 : 1);
        return true;
      }
    }
    return false;
  };
  for (const Piece& piece : pending_)
    if (!place(piece)) waiting.push_back(piece);
  while (int(waiting.size()) < B && full < B) {
    std::optional<Piece> piece = next_piece();
    if (!piece) break;
    if (!place(*piece)) waiting.push_back(*piece);
  }
  pending_ = std::move(waiting);
  if (p.real_tokens == 0) return std::nullopt;
  ++batch_;
  return p;
}

void EpochPlanner::fill_bucket_window() {
  // Note [Bucketing]: take the next kBucketWindowBatches * max_tokens tokens of pieces in
  // order, sort them by length, cut batches greedily (rows padded to the first, longest piece
  // rounded up to 8), order the batches by real tokens so neighbours (one step's ranks) carry
  // similar counts, then shuffle groups of kDealGroup batches so lengths do not come in a
  // monotone sweep.
  std::vector<Piece> window;
  int64_t tokens = 0;
  while (tokens < kBucketWindowBatches * c_.max_tokens) {
    std::optional<Piece> piece = next_piece();
    if (!piece) break;
    tokens += piece->count;
    window.push_back(*piece);
  }
  if (window.empty()) return;
  std::stable_sort(window.begin(), window.end(),
                   [](const Piece& a, const Piece& b) { return a.count > b.count; });
  std::vector<BatchPlan> batches;
  for (size_t i = 0; i < window.size();) {
    BatchPlan p;
    p.T = int(std::min<int64_t>(round_up8(window[i].count), c_.seq_len));
    int64_t max_rows = std::max<int64_t>(1, c_.max_tokens / p.T);
    for (; i < window.size() && p.rows < max_rows; ++i, ++p.rows) {
      p.pieces.push_back({window[i]});
      p.real_tokens += window[i].count;
      p.loss_tokens += window[i].count - (window[i].continues ? 0 : 1);
    }
    batches.push_back(std::move(p));
  }
  std::stable_sort(batches.begin(), batches.end(), [](const BatchPlan& a, const BatchPlan& b) {
    return a.real_tokens > b.real_tokens;
  });
  size_t groups = (batches.size() + kDealGroup - 1) / kDealGroup;
  Permutation order(groups, epoch_key(c_.seed ^ uint64_t(window_), epoch_, kDealKey));
  for (size_t g = 0; g < groups; ++g) {
    size_t src = order(g);
    for (size_t i = src * kDealGroup; i < std::min(batches.size(), (src + 1) * kDealGroup); ++i)
      ready_.push_back(std::move(batches[i]));
  }
  ++window_;
}

std::optional<BatchPlan> EpochPlanner::next_bucket() {
  if (ready_.empty()) fill_bucket_window();
  if (ready_.empty()) return std::nullopt;
  BatchPlan p = std::move(ready_.front());
  ready_.pop_front();
  ++batch_;
  return p;
}

std::vector<BatchPlan> EpochPlanner::take(int count) {
  std::vector<BatchPlan> plans;
  while (int(plans.size()) < count) {
    std::optional<BatchPlan> p = next();
    if (!p) break;
    plans.push_back(std::move(*p));
  }
  return plans;
}

}  // namespace trainer::data
