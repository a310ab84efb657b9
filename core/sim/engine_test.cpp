// engine_test.cpp — the start rule (stream order, deps, collectives, links) on hand-timed
// graphs, the per-device metrics against their header definitions, and deadlock reports.
// Durations are dyadic (0.25, 0.5, 1, 2...) so every expected time is exact in binary.
#include "core/sim/engine.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace cpbench {
namespace {

TaskSpec task(int device, int stream, double duration_s, std::vector<int> deps = {}, char kind = 'c',
              std::string name = "") {
  TaskSpec t;
  t.device = device;
  t.stream = stream;
  t.duration_s = duration_s;
  t.deps = std::move(deps);
  t.kind = kind;
  t.name = std::move(name);
  return t;
}

TEST(Engine, StreamRunsTasksInAddOrderEvenWhenALaterOneIsReadyFirst) {
  TaskGraph g;
  const int slow = g.add(task(1, 0, 4));          // device 1: 0..4
  const int a = g.add(task(0, 0, 1, {slow}));     // device 0: waits for device 1 -> 4..5
  const int b = g.add(task(0, 0, 1));             // ready at 0, but queued behind a -> 5..6
  const int c = g.add(task(0, 1, 1));             // another stream of device 0: 0..1
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[a], 4.0);
  EXPECT_EQ(r.start_s[b], 5.0);
  EXPECT_EQ(r.end_s[b], 6.0);
  EXPECT_EQ(r.start_s[c], 0.0);
  EXPECT_EQ(r.makespan_s, 6.0);
  EXPECT_EQ(g.device_count(), 2);
  EXPECT_EQ(g.stream_count(), 2);
}

TEST(Engine, DepsMayPointToTasksAddedLater) {
  TaskGraph g;
  const int late_consumer = g.add(task(0, 0, 1, {1}));
  g.add(task(1, 0, 2));
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[late_consumer], 2.0);
}

TEST(Engine, CollectiveMembersStartTogetherWhenTheLastIsReady) {
  TaskGraph g;
  const int c0 = g.add(task(0, 0, 1));
  const int c1 = g.add(task(1, 0, 3));
  const int c2 = g.add(task(2, 0, 2));
  std::vector<int> members;
  for (int d = 0; d < 3; ++d) {
    TaskSpec t = task(d, 1, 0.5, {d == 0 ? c0 : d == 1 ? c1 : c2}, 'm');
    t.collective = 42;
    members.push_back(g.add(t));
  }
  const SimResult r = simulate(g);
  for (int m : members) {
    EXPECT_EQ(r.start_s[m], 3.0) << m;  // device 1 is ready last, at 3
    EXPECT_EQ(r.end_s[m], 3.5) << m;
  }
  EXPECT_EQ(r.comm_busy_s, (std::vector<double>{0.5, 0.5, 0.5}));
}

TEST(Engine, LinkSerializesTasksFirstComeFirstServed) {
  // Three transfers from three devices share one NIC (link 7); ready at 0, 0.25 and 0.5.
  TaskGraph g;
  const int p0 = g.add(task(0, 0, 0.0));
  const int p1 = g.add(task(1, 0, 0.25));
  const int p2 = g.add(task(2, 0, 0.5));
  std::vector<int> sends;
  for (int d : {2, 1, 0}) {  // added in the reverse of their ready order: add order must not matter
    TaskSpec t = task(d, 1, 1, {d == 0 ? p0 : d == 1 ? p1 : p2}, 'm');
    t.link = 7;
    sends.push_back(g.add(t));
  }
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[sends[2]], 0.0);  // device 0, ready first
  EXPECT_EQ(r.start_s[sends[1]], 1.0);  // device 1, ready at 0.25, waits for the link
  EXPECT_EQ(r.start_s[sends[0]], 2.0);  // device 2
  EXPECT_EQ(r.makespan_s, 3.0);
}

TEST(Engine, WaitingTaskKeepsItsTurnOverOneReadyAtTheReleaseInstant) {
  // A holds the link 0..1; B waits from 0.5; C becomes ready at exactly 1: B goes first.
  TaskGraph g;
  TaskSpec a = task(0, 1, 1, {}, 'm');
  a.link = 0;
  const int ia = g.add(a);
  const int gate_b = g.add(task(1, 0, 0.5));
  const int gate_c = g.add(task(2, 0, 1));
  TaskSpec c = task(2, 1, 1, {gate_c}, 'm');
  c.link = 0;
  const int ic = g.add(c);
  TaskSpec b = task(1, 1, 1, {gate_b}, 'm');
  b.link = 0;
  const int ib = g.add(b);
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[ia], 0.0);
  EXPECT_EQ(r.start_s[ib], 1.0);
  EXPECT_EQ(r.start_s[ic], 2.0);
}

TEST(Engine, MetricsFollowTheirDefinitions) {
  // Device 0: compute X (0..1), transfer S on stream 1 (1..3, inputs ready at 1), then compute
  // Y waiting for S: Y idles from 1 to 3, all of it waiting for the transfer -> exposed 2.
  // Then a blocking all-reduce Z on stream 0 (kind 'm', 3..3.5): exposed += 0.5.
  // Device 1: W waits for device 0's compute Y (bubble, not communication).
  TaskGraph g;
  const int x = g.add(task(0, 0, 1));
  const int s = g.add(task(0, 1, 2, {x}, 'm'));
  const int y = g.add(task(0, 0, 1, {s}));
  const int z = g.add(task(0, 0, 0.5, {}, 'm'));
  const int w = g.add(task(1, 0, 1, {y}));
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[y], 3.0);
  EXPECT_EQ(r.start_s[z], 4.0);
  EXPECT_EQ(r.start_s[w], 4.0);
  EXPECT_EQ(r.compute_busy_s, (std::vector<double>{2.0, 1.0}));
  EXPECT_EQ(r.comm_busy_s, (std::vector<double>{2.5, 0.0}));
  EXPECT_EQ(r.exposed_comm_s, (std::vector<double>{2.5, 0.0}));
}

TEST(Engine, ExposedCommCountsOnlyTheTransferNotTheProducersCompute) {
  // Device 1 computes 0..4, sends 4..4.25; device 0 is free from 0 and waits until 4.25:
  // of that, only the 0.25 the transfer was in flight is communication.
  TaskGraph g;
  const int prod = g.add(task(1, 0, 4));
  const int send = g.add(task(1, 2, 0.25, {prod}, 'm'));
  const int cons = g.add(task(0, 0, 1, {send}));
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[cons], 4.25);
  EXPECT_EQ(r.exposed_comm_s[0], 0.25);
  EXPECT_EQ(r.exposed_comm_s[1], 0.0);
}

TEST(Engine, EmptyGraph) {
  const SimResult r = simulate(TaskGraph{});
  EXPECT_EQ(r.makespan_s, 0.0);
  EXPECT_TRUE(r.start_s.empty());
}

TEST(Engine, CycleIsReportedWithTheWaitCycle) {
  TaskGraph g;
  g.add(task(0, 0, 1, {}, 'c', "free"));
  g.add(task(0, 0, 1, {2}, 'c', "F0.0"));  // waits for task 2 ...
  g.add(task(1, 0, 1, {1}, 'c', "F0.1"));  // ... which waits for task 1
  const auto r = simulate_checked(g);
  ASSERT_FALSE(r.ok());
  const std::string msg = r.error_str();
  EXPECT_NE(msg.find("deadlock: 2 of 3 tasks never ran"), std::string::npos) << msg;
  EXPECT_NE(msg.find("task 1 'F0.0' (device 0, stream 0) waits for (dependency) task 2 'F0.1' (device 1, stream 0)"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("task 2 'F0.1' (device 1, stream 0) waits for (dependency) task 1"), std::string::npos) << msg;
  EXPECT_THROW(simulate(g), std::logic_error);
}

TEST(Engine, CycleThroughStreamOrderIsReported) {
  // Task 0 depends on task 1, which is behind task 0 on the same stream.
  TaskGraph g;
  g.add(task(0, 0, 1, {1}, 'c', "a"));
  g.add(task(0, 0, 1, {}, 'c', "b"));
  const auto r = simulate_checked(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("task 1 'b' (device 0, stream 0) waits for (stream order) task 0 'a'"),
            std::string::npos) << r.error_str();
}

TEST(Engine, CollectiveThatCanNeverAssembleIsReported) {
  // Both members of collective 3 are on the same stream: the second can never become ready
  // while the first waits for it.
  TaskGraph g;
  for (const char* name : {"ar.0", "ar.1"}) {
    TaskSpec t = task(0, 1, 1, {}, 'm', name);
    t.collective = 3;
    g.add(t);
  }
  const auto r = simulate_checked(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("waits for (collective 3 partner) task 1 'ar.1'"), std::string::npos) << r.error_str();
  EXPECT_NE(r.error_str().find("waits for (stream order) task 0 'ar.0'"), std::string::npos) << r.error_str();
}

TEST(Engine, InvalidGraphsAreRejected) {
  {
    TaskGraph g;
    g.add(task(0, 0, 1, {5}, 'c', "x"));
    const auto r = simulate_checked(g);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error_str(), "simulate: task 0 'x' (device 0, stream 0): dependency 5 is not a task id (graph has 1 tasks)");
  }
  {
    TaskGraph g;
    g.add(task(0, 0, -1, {}, 'c', "neg"));
    EXPECT_FALSE(simulate_checked(g).ok());
  }
  {
    TaskGraph g;
    TaskSpec t = task(0, 1, 1, {}, 'm', "both");
    t.collective = 0;
    t.link = 0;
    g.add(t);
    const auto r = simulate_checked(g);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error_str().find("collective member cannot also hold link 0"), std::string::npos);
  }
}

TEST(Engine, ContentionStretchesComputeWhileCommunicationRuns) {
  // Compute of 2 s at rate 1; a communication kernel holding half the SMs runs from 1 to 2:
  // by 1 the compute did 1 s of work, from 1 to 2 it does 0.5, the last 0.5 s runs at full rate
  // from 2 to 2.5. Its successor starts at 2.5; the device's contention is 0.5 s.
  TaskGraph g;
  const int gate = g.add(task(0, 2, 1));
  TaskSpec comm = task(0, 1, 1, {gate}, 'm');
  comm.sm_share = 0.5;
  const int c = g.add(comm);
  const int work = g.add(task(0, 0, 2));
  const int next = g.add(task(0, 0, 0.25));
  const SimResult r = simulate(g);
  EXPECT_EQ(r.start_s[c], 1.0);
  EXPECT_EQ(r.end_s[work], 2.5);
  EXPECT_EQ(r.start_s[next], 2.5);
  EXPECT_EQ(r.compute_busy_s[0], 2.75);
  EXPECT_EQ(r.contention_s[0], 0.5);
}

TEST(Engine, ContentionWeighsSmAndHbmSharesByWhatBindsTheCompute) {
  // An HBM-bound task (sm_bound 0) feels only hbm_share; an SM-bound one only sm_share; two
  // communication tasks at once add their shares. Nothing on another device is slowed.
  auto run = [](double sm_bound) {
    TaskGraph g;
    TaskSpec a = task(0, 1, 4, {}, 'm');
    a.sm_share = 0.25;
    a.hbm_share = 0.5;
    g.add(a);
    TaskSpec b = task(0, 2, 4, {}, 'm');
    b.sm_share = 0.25;
    b.hbm_share = 0.25;
    g.add(b);
    TaskSpec w = task(0, 0, 1);
    w.sm_bound = sm_bound;
    const int work = g.add(w);
    const int other = g.add(task(1, 0, 1));
    const SimResult r = simulate(g);
    EXPECT_EQ(r.end_s[other], 1.0);
    return r.end_s[work];
  };
  // SM shares sum to 0.5 and HBM shares to 0.75, so each weighting gives its own rate.
  EXPECT_DOUBLE_EQ(run(1), 2.0);      // rate 1 − (0.25 + 0.25)
  EXPECT_DOUBLE_EQ(run(0), 4.0);      // rate 1 − (0.5 + 0.25)
  EXPECT_DOUBLE_EQ(run(0.5), 1 / 0.375);  // rate 1 − (0.5·0.5 + 0.5·0.75)
  TaskGraph g;
  TaskSpec hog = task(0, 1, 20, {}, 'm');
  hog.sm_share = 1;
  g.add(hog);
  const int work = g.add(task(0, 0, 1));
  EXPECT_DOUBLE_EQ(simulate(g).end_s[work], 1 / kMinComputeRate);  // the floor
}

TEST(Engine, WithoutSharesNothingIsStretched) {
  TaskGraph g;
  g.add(task(0, 1, 4, {}, 'm'));
  const int work = g.add(task(0, 0, 1));
  const SimResult r = simulate(g);
  EXPECT_EQ(r.end_s[work], 1.0);
  EXPECT_EQ(r.contention_s[0], 0.0);
}

TEST(Engine, LongChainIsExactAndDeterministic) {
  // 200k tasks over 4 devices in a dependency chain with dyadic durations.
  TaskGraph g;
  const int n = 200000;
  for (int i = 0; i < n; ++i) g.add(task(i % 4, 0, 0.125, i > 0 ? std::vector<int>{i - 1} : std::vector<int>{}));
  const SimResult r = simulate(g);
  EXPECT_EQ(r.makespan_s, n * 0.125);
  EXPECT_EQ(r.compute_busy_s[0], n / 4 * 0.125);
  const SimResult again = simulate(g);
  EXPECT_EQ(r.start_s, again.start_s);
}

}  // namespace
}  // namespace cpbench
