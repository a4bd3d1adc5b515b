// The communication engine (Note [Communication engine]) without a network: jobs whose `run`
// records what happened, to check the order, the numbering, the statistics, and what a
// failure does to the operations after it.
#include "dist/comm_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"

namespace trainer::dist {
namespace {

struct Log {
  std::mutex mu;
  std::vector<std::string> ran;  // "<name>@<seq>" in the order the engine ran them
  std::vector<std::thread::id> threads;
};

CommJob recording(Log& log, const char* kind, double bytes, bool fail = false) {
  CommJob job;
  job.kind = kind;
  job.bytes = bytes;
  job.detail = " (test)";
  job.run = [&log, fail](const std::string& name, int64_t seq) -> double {
    {
      std::lock_guard lock(log.mu);
      log.ran.push_back(name + "@" + std::to_string(seq));
      log.threads.push_back(std::this_thread::get_id());
    }
    if (fail) throw CommFailure{name + " failed on purpose"};
    return 0.5;
  };
  return job;
}

TEST(CommEngine, RunsOperationsInIssueOrderOnOneThreadAndCountsThem) {
  Log log;
  std::vector<Work> works;
  {
    CommEngine engine(4);
    for (int i = 0; i < 50; ++i)
      works.push_back(engine.submit(recording(log, i % 2 ? "all_gather" : "all_reduce", 100)));
    for (Work& w : works) w.wait();
    const CommStats s = engine.stats();
    EXPECT_DOUBLE_EQ(s.busy_s, 50 * 0.5);
    EXPECT_DOUBLE_EQ(s.bytes, 50 * 100.0);
    EXPECT_FALSE(engine.broken());
  }
  ASSERT_EQ(log.ran.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    const std::string kind = i % 2 ? "all_gather" : "all_reduce";
    EXPECT_EQ(log.ran[size_t(i)], kind + " #" + std::to_string(i) + " (test)@" + std::to_string(i));
    EXPECT_EQ(log.threads[size_t(i)], log.threads[0]);
  }
  EXPECT_NE(log.threads[0], std::this_thread::get_id());
  EXPECT_DOUBLE_EQ(works[7].busy_seconds(), 0.5);
}

TEST(CommEngine, AFailureFailsItsWaitersAndEveryLaterOperationWithoutRunningIt) {
  Log log;
  CommEngine engine(2);
  std::atomic<int> issued{0};
  Work ok = engine.submit(recording(log, "all_reduce", 8));
  Work bad = engine.submit(recording(log, "barrier", 0, /*fail=*/true));
  ok.wait();
  EXPECT_THROW(bad.wait(), Error);
  EXPECT_TRUE(engine.broken());
  CommJob later = recording(log, "broadcast", 8);
  later.issue = [&] { ++issued; };  // never queued on a device after a failure
  Work after = engine.submit(std::move(later));
  try {
    after.wait();
    ADD_FAILURE() << "an operation after a failure completed";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("broadcast #2 (test) not run: the communicator failed earlier: "
                        "barrier #1 (test) failed on purpose"),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(issued.load(), 0);
  std::lock_guard lock(log.mu);
  EXPECT_EQ(log.ran, (std::vector<std::string>{"all_reduce #0 (test)@0", "barrier #1 (test)@1"}));
}

// Work::order_stream_after: an operation queued on a device stream is ordered there and the
// caller goes on, learning of its failure at wait(); one that is not (MPI), or that failed
// before it was issued, is waited for there.
TEST(CommEngine, OrderingOnTheStreamWaitsOnlyForWhatIsNotOnAStream) {
  std::atomic<bool> release{false};
  std::atomic<int> ordered{0};
  auto on_stream = [&] {
    CommJob job;
    job.kind = "all_reduce";
    job.issue = [] {};
    job.order_stream = [&] { ++ordered; };
    job.run = [&](const std::string& name, int64_t) -> double {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw CommFailure{name + " timed out"};
    };
    return job;
  };
  CommEngine engine(2);
  Work w = engine.submit(on_stream());
  w.order_stream_after();  // returns with the operation still in flight
  EXPECT_EQ(ordered.load(), 1);
  EXPECT_FALSE(w.done());
  release = true;
  EXPECT_THROW(w.wait(), CommError);
  Work after = engine.submit(on_stream());  // never issued: the engine has failed
  EXPECT_THROW(after.order_stream_after(), CommError);
  EXPECT_EQ(ordered.load(), 1);

  CommEngine host(2);
  Log log;
  CommJob job = recording(log, "all_gather", 8);
  job.run = [](const std::string&, int64_t) -> double {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0;
  };
  Work h = host.submit(std::move(job));
  h.order_stream_after();
  EXPECT_TRUE(h.done());
}

// A failing operation tears down what issuing uses (NCCL's abort) through fail(): no caller
// issues while the teardown runs, nor after it.
TEST(CommEngine, AFailuresTeardownNeverOverlapsAnIssueAndNothingIssuesAfter) {
  std::atomic<bool> tearing{false}, torn{false};
  std::atomic<int> overlapped{0}, after{0}, issued{0};
  CommEngine engine(2);
  CommJob failing;
  failing.kind = "all_reduce";
  failing.run = [&](const std::string& name, int64_t) -> double {
    // Fails once callers are issuing (bounded, on a slow machine).
    for (int i = 0; i < 10000 && issued.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const std::string message = name + " timed out";
    engine.fail(message, [&] {
      tearing = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      torn = true;
      tearing = false;
    });
    throw CommFailure{message};
  };
  Work bad = engine.submit(std::move(failing));
  std::vector<Work> works;
  // Issue until the teardown is over (bounded).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!torn && std::chrono::steady_clock::now() < until) {
    CommJob job;
    job.kind = "broadcast";
    job.run = [](const std::string&, int64_t) { return 0.0; };
    job.issue = [&] {
      ++issued;
      if (tearing) ++overlapped;
      if (torn) ++after;
    };
    works.push_back(engine.submit(std::move(job)));
  }
  EXPECT_THROW(bad.wait(), Error);
  for (Work& w : works) EXPECT_THROW(w.wait(), Error);  // queued behind the failure, or refused
  EXPECT_GT(issued.load(), 0);  // callers did issue while the failing operation ran
  EXPECT_EQ(overlapped.load(), 0);
  EXPECT_EQ(after.load(), 0);
  EXPECT_TRUE(torn.load());
}

// An issue stuck behind the failure (NCCL's enqueue behind a hung collective) holds the lock
// the teardown would wait for: past kIssueGraceMs the teardown runs beside it and unblocks it.
TEST(CommEngine, AnIssueStuckBehindAFailureIsUnblockedByTheTeardown) {
  std::atomic<bool> running{false}, issuing{false}, aborted{false};
  CommEngine engine(2);
  CommJob failing;
  failing.kind = "all_reduce";
  failing.run = [&](const std::string& name, int64_t) -> double {  // the hung collective's wait
    running = true;
    for (int i = 0; i < 10000 && !issuing; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    engine.fail(name + " timed out", [&] { aborted = true; });
    throw CommFailure{name + " timed out"};
  };
  const auto start = std::chrono::steady_clock::now();
  Work bad = engine.submit(std::move(failing));
  for (int i = 0; i < 10000 && !running; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CommJob stuck;
  stuck.kind = "broadcast";
  stuck.run = [](const std::string&, int64_t) { return 0.0; };
  stuck.issue = [&] {  // unblocked only by the teardown (bounded at 20 s)
    issuing = true;
    for (int i = 0; i < 20000 && !aborted; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  Work w = engine.submit(std::move(stuck));
  EXPECT_THROW(bad.wait(), Error);
  EXPECT_THROW(w.wait(), Error);
  EXPECT_TRUE(aborted.load());
  // The teardown comes after the 1 s grace; a wait for the lock would take the stuck issue's
  // whole 20 s bound. 10 s leaves a loaded machine room either way.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(CommEngine, StopRunsWhatIsQueuedAndIssueRunsOnTheCallersThreadInOrder) {
  Log log;
  std::vector<int> issue_order;
  std::vector<std::thread::id> issue_threads;
  std::vector<Work> works;
  {
    CommEngine engine(2);
    for (int i = 0; i < 10; ++i) {
      CommJob job = recording(log, "reduce_scatter", 4);
      job.issue = [&, i] {
        issue_order.push_back(i);
        issue_threads.push_back(std::this_thread::get_id());
      };
      works.push_back(engine.submit(std::move(job)));
    }
    engine.stop();
    EXPECT_EQ(log.ran.size(), 10u);
  }
  for (Work& w : works) EXPECT_NO_THROW(w.wait());
  EXPECT_EQ(issue_order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  for (const std::thread::id& t : issue_threads) EXPECT_EQ(t, std::this_thread::get_id());
}

}  // namespace
}  // namespace trainer::dist
