// The fixed-tree reduction's plan run in one process, W ranks exchanging in memory: every
// rank's segment is the balanced tree ((x0 + x1) + (x2 + x3)) + ... of the ranks' values, bit
// for bit, for all-reduce and reduce-scatter layouts, fp32 and bf16, and buffers that W does
// not divide (Note [Fixed-tree reductions]). The MPI communicator moves the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dist/fixed_tree.h"
#include "runtime/rng.h"

namespace trainer::dist {
namespace {

// Each rank's buffer, `elements` values of `type`, different on every rank.
std::vector<std::vector<char>> rank_buffers(int world, int64_t elements, DType type) {
  std::vector<std::vector<char>> bufs;
  for (int r = 0; r < world; ++r) {
    std::vector<float> v(static_cast<size_t>(elements));
    fill_normal(v.data(), elements, uint64_t(100 + r), 0.0f, 1.0f);
    std::vector<char> b(static_cast<size_t>(elements) * dtype_size(type));
    for (int64_t i = 0; i < elements; ++i) {
      if (type == DType::f32)
        std::memcpy(b.data() + i * 4, &v[size_t(i)], 4);
      else
        reinterpret_cast<bf16*>(b.data())[i] = to_bf16(v[size_t(i)]);
    }
    bufs.push_back(std::move(b));
  }
  return bufs;
}

// The balanced tree over ranks of element i: pairs (0,1), (2,3), ..., then pairs of pairs.
std::vector<char> tree_sum(std::vector<std::vector<char>> level, int64_t elements, DType type) {
  while (level.size() > 1) {
    std::vector<std::vector<char>> next;
    for (size_t j = 0; j < level.size(); j += 2) {
      add_into(type, level[j].data(), level[j + 1].data(), elements);
      next.push_back(std::move(level[j]));
    }
    level = std::move(next);
  }
  return level[0];
}

void check(int world, int64_t elements, DType type, bool scatter) {
  std::vector<std::vector<char>> bufs = rank_buffers(world, elements, type);
  const std::vector<char> want = tree_sum(bufs, elements, type);
  std::vector<FixedTree> trees;
  for (int r = 0; r < world; ++r) trees.emplace_back(world, r, elements, type, scatter);
  for (int round = 0; (1 << round) < world; ++round) {
    std::vector<std::vector<char>> sent(static_cast<size_t>(world));
    std::vector<size_t> expect(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r)  // every rank packs before any adds: one exchange
      expect[size_t(r)] = trees[size_t(r)].pack(round, bufs[size_t(r)].data(), sent[size_t(r)]);
    for (int r = 0; r < world; ++r) {
      const int partner = trees[size_t(r)].partners()[size_t(round)];
      ASSERT_EQ(sent[size_t(partner)].size(), expect[size_t(r)]) << "round " << round;
      trees[size_t(r)].add_received(round, bufs[size_t(r)].data(), sent[size_t(partner)].data());
    }
  }
  const size_t es = dtype_size(type);
  int64_t covered = 0;
  for (int r = 0; r < world; ++r) {
    const FixedTree& t = trees[size_t(r)];
    covered += t.end() - t.begin();
    EXPECT_EQ(std::memcmp(bufs[size_t(r)].data() + t.begin() * es, want.data() + t.begin() * es,
                          size_t(t.end() - t.begin()) * es),
              0)
        << "rank " << r << " of " << world << (scatter ? " scatter " : " all-reduce ")
        << dtype_name(type);
  }
  EXPECT_EQ(covered, scatter ? elements / world * world : elements);
}

TEST(FixedTree, EveryRankHoldsTheBalancedTreeSumOfItsSegment) {
  for (int world : {1, 2, 4, 8})
    for (DType type : {DType::f32, DType::bf16}) {
      check(world, 37, type, false);        // segments of 4 and 5 elements (W = 8)
      check(world, 5 * world, type, true);  // a reduce-scatter's blocks of 5
      check(world, 3, type, false);         // fewer elements than ranks: empty segments
    }
}

// The partners are r ^ 1, r ^ 2, r ^ 4: each pair exchanges in both directions in one round.
TEST(FixedTree, PartnersPairUpInEveryRound) {
  const int W = 8;
  for (int r = 0; r < W; ++r) {
    const std::vector<int> p = FixedTree(W, r, 16, DType::f32, false).partners();
    ASSERT_EQ(p.size(), 3u);
    for (size_t k = 0; k < p.size(); ++k) {
      EXPECT_EQ(p[k], r ^ (1 << k));
      EXPECT_EQ(FixedTree(W, p[k], 16, DType::f32, false).partners()[k], r);
    }
  }
}

}  // namespace
}  // namespace trainer::dist
