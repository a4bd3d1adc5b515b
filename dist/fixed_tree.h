// The arithmetic of a fixed-tree reduction (ReduceOrder::fixed_tree, Note [Fixed-tree
// reductions]) apart from how its messages travel: which segments of the buffer a rank sends
// and which it adds into in each round. The MPI communicator moves the bytes; the same plan run
// in one process (tests/dist/fixed_tree_test.cpp) must give the same bits.
//
// Note [Fixed-tree reductions]
// With ReduceOrder::fixed_tree a sum is recursive halving over point-to-point messages. The
// buffer is cut into W segments. In round k (k = 0, 1, ...) rank r exchanges with r ^ 2^k:
// of the segments it still holds, it keeps those whose index agrees with r in bit k, sends
// the others, and adds the partner's copies of those it keeps. After round k each kept
// element is the sum over a group of 2^(k+1) ranks, made of the two groups' sums of round
// k-1, so every element's sum is the balanced tree ((x0 + x1) + (x2 + x3)) + ...: the same bits
// on every rank (IEEE addition is commutative: a + b and b + a are equal) and the same bits as
// one process adding those values in that tree. After log2(W) rounds rank r holds the sum of
// segment r, which is a reduce-scatter; an all-reduce then all-gathers the segments (copies,
// exact in any order). Each phase sends (W-1)/W of the buffer, as a ring does, in log2(W)
// messages instead of W-1.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"

namespace trainer::dist {

// dst[0, n) += src[0, n) in `type` (bf16 pairs added in fp32 and rounded once, as NCCL's and
// the MPI communicator's bf16 sums do).
void add_into(DType type, void* dst, const void* src, int64_t n);

class FixedTree {
 public:
  // Rank `rank` of `world` (a power of two) reducing a buffer of `elements`: an all-reduce's
  // whole buffer (segments as even as W parts of it can be), or a reduce-scatter's W blocks of
  // elements / W each (scatter).
  FixedTree(int world, int rank, int64_t elements, DType type, bool scatter);

  // Partners in round order: rank ^ 1, rank ^ 2, rank ^ 4, ...
  std::vector<int> partners() const;
  // Round `round`'s message to its partner: the segments of `buf` this rank holds but gives
  // up, in order, into `send`; returns the bytes the partner sends back.
  size_t pack(int round, const char* buf, std::vector<char>& send) const;
  // Adds the partner's message `received` into the segments of `buf` this rank keeps.
  void add_received(int round, char* buf, const char* received) const;
  // The segment this rank holds the sum of after the last round: [begin, end) in elements.
  int64_t begin() const { return bounds_[size_t(rank_)]; }
  int64_t end() const { return bounds_[size_t(rank_) + 1]; }
  // Every segment's bounds, for the all-gather that completes an all-reduce.
  const std::vector<int64_t>& bounds() const { return bounds_; }

 private:
  bool held(int bit, int k) const { return (k & (bit - 1)) == (rank_ & (bit - 1)); }
  bool kept(int bit, int k) const { return held(bit, k) && (k & bit) == (rank_ & bit); }

  int world_, rank_;
  DType type_;
  size_t element_bytes_;
  std::vector<int64_t> bounds_;  // segment k: [bounds_[k], bounds_[k+1]) in elements
};

}  // namespace trainer::dist
