// The trace recorder (Note [Trace events]): spans from several threads, the profile's scopes as
// spans, and a file that is balanced whatever was open when recording started or stopped.
#include "runtime/trace.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "runtime/file_io.h"
#include "runtime/profile.h"

namespace trainer::trace {
namespace {

using nlohmann::json;

json written(const std::string& tag, int64_t offset_ns = 0) {
  testing::TempDir dir(tag);
  write(dir.path / "t.json", 3, "rank 3", {0, offset_ns, 0, offset_ns}, 0, R"({"rank":3})");
  return json::parse(read_file(dir.path / "t.json"));
}

// The file's timed events, with each thread's B/E checked to nest in time order.
std::vector<json> checked_events(const json& doc) {
  std::map<int, std::vector<std::string>> open;
  std::map<int, double> last;
  std::vector<json> out;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    EXPECT_EQ(e["pid"], 3);
    const int tid = e["tid"];
    EXPECT_GE(e["ts"].get<double>(), last[tid]) << e;
    last[tid] = e["ts"];
    if (e["ph"] == "B") open[tid].push_back(e["name"]);
    if (e["ph"] == "E") {
      EXPECT_FALSE(open[tid].empty()) << e;
      if (open[tid].empty()) continue;
      EXPECT_EQ(open[tid].back(), e["name"]);
      open[tid].pop_back();
    }
    out.push_back(e);
  }
  for (const auto& [tid, names] : open) EXPECT_TRUE(names.empty()) << tid;
  return out;
}

TEST(Trace, SpansOfThreadsNestAndAreNamed) {
  name_thread("main");
  start();
  {
    const Span outer("outer", "phase", "step", 7);
    const Span inner("inner", "gemm");
    std::thread worker([] {
      name_thread("worker");
      const Span w("work", "loader");
    });
    worker.join();
  }
  stop();
  const json doc = written("trace_nest");
  const std::vector<json> events = checked_events(doc);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0]["name"], "outer");
  EXPECT_EQ(events[0]["args"]["step"], 7);
  std::map<std::string, int> threads;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["args"]["name"]] = e["tid"];
  ASSERT_TRUE(threads.contains("main") && threads.contains("worker"));
  for (const json& e : events)
    EXPECT_EQ(e["tid"], e["name"] == "work" ? threads["worker"] : threads["main"]) << e;
  EXPECT_EQ(doc["otherData"]["rank"], 3);
}

TEST(Trace, WhatStraddlesTheWindowIsBalanced) {
  begin("before", "phase");  // not recorded: recording is off
  start();
  end();  // closes a span begun before start(): dropped
  begin("open at stop", "phase");
  begin_async("send", "transfer", 1);  // never ended: ends at stop()
  end_async("recv", "transfer", 2);    // begun before start(): dropped
  stop();
  end();  // after stop(): not recorded
  const std::vector<json> events = checked_events(written("trace_window"));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["name"], "open at stop");
  EXPECT_EQ(events[1]["ph"], "b");
  EXPECT_EQ(events[1]["id2"]["local"], 1);  // the process's own id
  std::map<std::string, int> phases;
  for (const json& e : events) ++phases[e["ph"].get<std::string>()];
  EXPECT_EQ(phases, (std::map<std::string, int>{{"B", 1}, {"E", 1}, {"b", 1}, {"e", 1}}));
}

TEST(Trace, ProfileScopesAreSpansAndTheOffsetMovesEveryEvent) {
  start();
  const int64_t before = now_ns();
  { PROFILE_SCOPE("matmul", "gemm"); }
  stop();
  const std::vector<json> plain = checked_events(written("trace_scope"));
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0]["name"], "matmul");
  EXPECT_EQ(plain[0]["cat"], "gemm");
  EXPECT_GE(plain[0]["ts"].get<double>(), double(before) / 1e3 - 1e-3);
  const std::vector<json> shifted = checked_events(written("trace_offset", 5000));
  for (size_t i = 0; i < plain.size(); ++i)  // 5000 ns later, as printed to 1 ns
    EXPECT_NEAR(shifted[i]["ts"].get<double>() - plain[i]["ts"].get<double>(), 5.0, 2e-3);
  EXPECT_FALSE(on());
}

TEST(Trace, TheOffsetIsInterpolatedBetweenTwoAlignments) {
  const Alignment a{1000, -50, 3000, 150};  // the clocks drift 0.1 ns per ns
  EXPECT_EQ(a.offset_at(1000), -50);
  EXPECT_EQ(a.offset_at(2000), 50);
  EXPECT_EQ(a.offset_at(3000), 150);
  EXPECT_EQ(a.offset_at(4000), 250);  // after the second: the same line
  EXPECT_EQ((Alignment{1000, 7, 1000, 7}).offset_at(99999), 7);
}

}  // namespace
}  // namespace trainer::trace
