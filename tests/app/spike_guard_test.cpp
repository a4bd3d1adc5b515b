// The spike guard's statistics (Note [Spike guard]); through the binary: spike_guard.sh.
#include "app/spike_guard.h"

#include <gtest/gtest.h>

namespace trainer::app {
namespace {

SpikeGuard filled(SpikeGuard::Policy p, std::initializer_list<double> losses, double norm = 1) {
  SpikeGuard g(p);
  for (double l : losses) g.accept(l, norm);
  return g;
}

TEST(SpikeGuard, JudgesNothingUntilItsWindowIsFull) {
  const SpikeGuard::Policy p{.action = SpikeAction::skip, .window = 4, .threshold = 3};
  EXPECT_EQ(filled(p, {1, 1.1, 0.9}).spike(100, 1), "");
  // Mean 1, population deviation sqrt(0.005) = 0.0707: 3 deviations reach 1.212.
  const SpikeGuard g = filled(p, {1, 1.1, 0.9, 1});
  EXPECT_EQ(g.spike(1.2, 1), "");
  EXPECT_EQ(g.spike(1.22, 1),
            "the loss 1.22 is 3.1 standard deviations above the mean 1 of the last 4 steps");
  EXPECT_EQ(filled({.action = SpikeAction::off, .window = 4}, {1, 1, 1, 1}).spike(9, 9), "");
}

TEST(SpikeGuard, WatchesTheChosenMetricOverTheLastWindowOfSteps) {
  SpikeGuard::Policy p{.action = SpikeAction::stop, .metric = SpikeMetric::grad_norm, .window = 2};
  SpikeGuard g = filled(p, {5, 1, 1}, 2);  // the 5 has left the window
  EXPECT_EQ(g.spike(9, 2), "");            // the loss is not watched
  EXPECT_EQ(g.spike(1, 2.5),
            "the gradient norm 2.5 is infinitely many standard deviations above the mean 2 of "
            "the last 2 steps");
  p.metric = SpikeMetric::both;
  SpikeGuard both = filled(p, {1, 1}, 2);
  EXPECT_EQ(both.spike(1.5, 2).substr(0, 13), "the loss 1.5 ");
}

TEST(SpikeGuard, ItsWindowsRoundTripBitForBit) {
  const SpikeGuard::Policy p{.action = SpikeAction::skip, .window = 3};
  const SpikeGuard g = filled(p, {0.1, 1.0 / 3, 2.0 / 7, 1e-300}, 0.7);
  SpikeGuard back(p);
  back.restore(nlohmann::json::parse(g.state().dump()));
  EXPECT_EQ(back.state(), g.state());
  EXPECT_EQ(back.state()["losses"].size(), 3u);
  SpikeGuard smaller({.action = SpikeAction::skip, .window = 2});  // a resume with a smaller one
  smaller.restore(g.state());
  EXPECT_EQ(smaller.state()["losses"], nlohmann::json({2.0 / 7, 1e-300}));
  smaller.restore(nullptr);  // a checkpoint saved without the guard
  EXPECT_TRUE(smaller.state()["losses"].empty());
}

}  // namespace
}  // namespace trainer::app
