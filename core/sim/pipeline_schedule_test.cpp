// pipeline_schedule_test.cpp — the schedules' op orders against Megatron-LM's formulas (orders
// written out by hand), their invariants (each op once, 1F1B's in-flight bound), the analytic
// bubbles of SC'21 §2.2 reproduced exactly by the simulator, and a golden 1F1B timeline.
#include "core/sim/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include "core/common/json_reader.h"

namespace cpbench {
namespace {

PipelineSchedule make(const std::string& kind, int p, int m, int v) {
  auto s = pipeline_schedule(kind, p, m, v);
  EXPECT_TRUE(s.ok()) << s.error_str();
  return s.ok() ? *s : PipelineSchedule{};
}

// "F0.0 F1.0 B0.0": readable expected orders.
std::string str(const std::vector<PipeOp>& ops) {
  std::string out;
  for (const PipeOp& op : ops) {
    if (!out.empty()) out += ' ';
    out += (op.forward ? "F" : "B") + std::to_string(op.micro_batch) + "." + std::to_string(op.chunk);
  }
  return out;
}

TEST(PipelineSchedule, OneFOneBOrderIsWarmupSteadyCooldown) {
  // p = 4, m = 6: stage s warms up with p − s − 1 forwards (Megatron
  // forward_backward_pipelining_without_interleaving).
  const PipelineSchedule s = make("1f1b", 4, 6, 1);
  EXPECT_EQ(str(s[0]), "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 B3.0 B4.0 B5.0");
  EXPECT_EQ(str(s[2]), "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 F4.0 B3.0 F5.0 B4.0 B5.0");
  EXPECT_EQ(str(s[3]), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0");
  // Fewer micro-batches than stages: warm-up is capped at m.
  EXPECT_EQ(str(make("1f1b", 4, 2, 1)[0]), "F0.0 F1.0 B0.0 B1.0");
}

TEST(PipelineSchedule, InterleavedOrderMatchesMegatron) {
  // p = 2, m = 4, v = 2, worked by hand from Megatron's get_model_chunk_id: forward k runs
  // chunk (k mod 4) / 2 on micro-batch (k / 4)·2 + k mod 2; backward k the mirrored chunk.
  // Warm-up: stage 0 (2−0−1)·2 + (2−1)·2 = 4, stage 1 (2−1−1)·2 + 2 = 2.
  const PipelineSchedule s = make("interleaved", 2, 4, 2);
  EXPECT_EQ(str(s[0]), "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(str(s[1]), "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m == p: Megatron runs all forwards, then all backwards.
  EXPECT_EQ(str(make("interleaved", 2, 2, 2)[1]), "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

TEST(PipelineSchedule, GPipeIsAllForwardsThenAllBackwards) {
  EXPECT_EQ(str(make("gpipe", 3, 3, 1)[1]), "F0.0 F1.0 F2.0 B0.0 B1.0 B2.0");
}

TEST(PipelineSchedule, EveryOpAppearsExactlyOncePerChunkPerStage) {
  for (const auto& [kind, p, m, v] : std::vector<std::tuple<std::string, int, int, int>>{
           {"gpipe", 4, 7, 1}, {"1f1b", 1, 5, 1}, {"1f1b", 8, 3, 1}, {"1f1b", 8, 33, 1},
           {"interleaved", 4, 4, 2}, {"interleaved", 4, 12, 3}, {"interleaved", 8, 16, 4}}) {
    const PipelineSchedule s = make(kind, p, m, v);
    ASSERT_EQ(static_cast<int>(s.size()), p);
    for (int stage = 0; stage < p; ++stage) {
      std::set<std::tuple<bool, int, int>> seen;
      for (const PipeOp& op : s[stage]) {
        EXPECT_TRUE(op.micro_batch >= 0 && op.micro_batch < m && op.chunk >= 0 && op.chunk < v);
        EXPECT_TRUE(seen.insert({op.forward, op.micro_batch, op.chunk}).second)
            << kind << " stage " << stage << " repeats " << str({op});
      }
      EXPECT_EQ(static_cast<int>(s[stage].size()), 2 * m * v) << kind << " stage " << stage;
    }
  }
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostPMinusStageMicroBatchesInFlight) {
  // PipeDream-Flush's memory bound (SC'21 §2.2.1): stage s holds the activations of at most
  // p − s micro-batches; GPipe holds all m.
  for (const auto& [p, m] : std::vector<std::pair<int, int>>{{4, 8}, {8, 3}, {8, 64}, {64, 512}}) {
    const PipelineSchedule s = make("1f1b", p, m, 1);
    for (int stage = 0; stage < p; ++stage) {
      int in_flight = 0, peak = 0;
      for (const PipeOp& op : s[stage]) {
        in_flight += op.forward ? 1 : -1;
        peak = std::max(peak, in_flight);
      }
      EXPECT_EQ(peak, std::min(p - stage, m)) << "p " << p << " m " << m << " stage " << stage;
    }
  }
}

// Makespan with no communication; compute times 1 (forward) and 2 (backward) per op.
double makespan(const std::string& kind, int p, int m, int v, const SimResult** keep = nullptr) {
  static SimResult r;
  r = simulate(build_pipeline_graph(make(kind, p, m, v), 1.0, 2.0, 0.0));
  if (keep) *keep = &r;
  return r.makespan_s;
}

TEST(PipelineSchedule, OneFOneBAndGPipeBubbleIsExactlyPMinus1OverM) {
  // t_f + t_b = 3: makespan (m + p − 1)·3, i.e. bubble (p − 1)/m of the ideal m·3 (SC'21 §2.2).
  for (const std::string kind : {"1f1b", "gpipe"})
    for (const auto& [p, m] : std::vector<std::pair<int, int>>{{1, 1}, {2, 3}, {4, 4}, {4, 8}, {8, 3}, {8, 32}, {16, 5}}) {
      const SimResult* r = nullptr;
      EXPECT_EQ(makespan(kind, p, m, 1, &r), (m + p - 1) * 3.0) << kind << " p " << p << " m " << m;
      for (int stage = 0; stage < p; ++stage) {
        EXPECT_EQ(r->compute_busy_s[stage], m * 3.0);
        // Each stage idles (p − 1)·(t_f + t_b): the bubble, none of it communication.
        EXPECT_EQ(r->makespan_s - r->compute_busy_s[stage], (p - 1) * 3.0);
        EXPECT_EQ(r->exposed_comm_s[stage], 0.0);
      }
    }
}

TEST(PipelineSchedule, InterleavedBubbleIsExactlyPMinus1OverMV) {
  // Chunk times 1 and 2, so a micro-batch costs t_f = v, t_b = 2v per stage: ideal m·3v,
  // bubble (p − 1)·3 = (p − 1)/(m·v) of it (SC'21 §2.2.2).
  for (const auto& [p, m, v] : std::vector<std::tuple<int, int, int>>{
           {2, 4, 2}, {2, 2, 2}, {4, 4, 2}, {4, 8, 2}, {4, 12, 3}, {8, 16, 4}, {8, 64, 2}}) {
    const double ideal = m * 3.0 * v;
    const double t = makespan("interleaved", p, m, v);
    EXPECT_EQ(t, ideal + (p - 1) * 3.0) << "p " << p << " m " << m << " v " << v;
    EXPECT_DOUBLE_EQ((t - ideal) / ideal, (p - 1.0) / (m * v));
  }
}

TEST(PipelineSchedule, StagesRunTheirOpsInScheduleOrder) {
  const PipelineSchedule s = make("interleaved", 4, 8, 2);
  TaskGraph g;
  const PipelineTasks ids = append_pipeline_tasks(
      g, s, [](int stage, const PipeOp& op) { return op.forward ? 1.0 + stage : 2.0; },
      [](int, const PipeOp&) { return 0.5; });
  const SimResult r = simulate(g);
  for (int stage = 0; stage < 4; ++stage)
    for (size_t k = 1; k < s[stage].size(); ++k)
      EXPECT_GE(r.start_s[ids.compute[stage][k]], r.end_s[ids.compute[stage][k - 1]]);
  // A consumer starts after its producer's transfer: the forward of micro-batch 0 through
  // chunk 1 on stage 0 follows chunk 0 on stage 3 and its wrap-around send.
  const auto at = [&](int stage, PipeOp op) {
    for (size_t k = 0; k < s[stage].size(); ++k)
      if (s[stage][k] == op) return k;
    return s[stage].size();
  };
  const size_t last = at(3, {true, 0, 0}), first = at(0, {true, 0, 1});
  const int send = ids.send[3][last];
  ASSERT_GE(send, 0);
  EXPECT_EQ(g.task(send).name, "send F0.0");
  EXPECT_EQ(g.task(send).device, 3);
  EXPECT_EQ(g.task(send).stream, 1);
  EXPECT_EQ(r.start_s[send], r.end_s[ids.compute[3][last]]);
  EXPECT_GE(r.start_s[ids.compute[0][first]], r.end_s[send]);
  // Communication lengthens the iteration but never deadlocks the FIFO send streams.
  EXPECT_GT(r.makespan_s, 0.0);
}

TEST(PipelineSchedule, TransfersOnlyLengthenTheIterationAndNeverDeadlock) {
  // Sends leave each stage's FIFO streams in compute order, so no shape can block them.
  for (const auto& [kind, p, m, v] : std::vector<std::tuple<std::string, int, int, int>>{
           {"gpipe", 4, 7, 1}, {"1f1b", 8, 3, 1}, {"1f1b", 8, 33, 1}, {"interleaved", 4, 4, 2},
           {"interleaved", 4, 12, 3}, {"interleaved", 8, 16, 4}}) {
    const PipelineSchedule s = make(kind, p, m, v);
    const auto with = simulate_checked(build_pipeline_graph(s, 1.0, 2.0, 0.25));
    ASSERT_TRUE(with.ok()) << with.error_str();
    EXPECT_GT(with->makespan_s, makespan(kind, p, m, v)) << kind;
  }
}

TEST(PipelineSchedule, OpEndsWithoutAGraphAreTheSimulatedOnes) {
  // Every schedule kind with uneven durations (variable-length micro-batches: each op its own
  // compute and blocking tail): pipeline_op_ends gives, op by op, what simulating
  // append_pipeline_tasks' graph gives with no sends.
  for (const auto& [kind, p, m, v] : std::vector<std::tuple<std::string, int, int, int>>{
           {"gpipe", 3, 5, 1}, {"1f1b", 4, 7, 1}, {"1f1b", 1, 3, 1}, {"interleaved", 2, 4, 3}, {"interleaved", 4, 8, 2}}) {
    const PipelineSchedule schedule = make(kind, p, m, v);
    auto compute = [](int s, const PipeOp& op) { return 1.0 + ((op.micro_batch * 7 + s * 3 + op.chunk) % 5) * (op.forward ? 1 : 2); };
    auto blocking = [](int s, const PipeOp& op) { return ((op.micro_batch + s) % 3) * 0.25; };
    TaskGraph g;
    const PipelineTasks ids = append_pipeline_tasks(
        g, schedule, compute, [](int, const PipeOp&) { return 0.0; }, 0, [&](int s, const PipeOp& op) {
          return std::vector<OpSegment>{{1, blocking(s, op), 'm', "tail", false}};
        });
    auto sim = simulate_checked(g);
    ASSERT_TRUE(sim.ok()) << sim.error_str();
    auto ends = pipeline_op_ends(schedule, compute, blocking);
    ASSERT_TRUE(ends.ok()) << ends.error_str();
    ASSERT_EQ(ends->size(), static_cast<size_t>(p));
    for (int s = 0; s < p; ++s) {
      ASSERT_EQ((*ends)[s].size(), schedule[s].size());
      for (size_t k = 0; k < schedule[s].size(); ++k)
        EXPECT_DOUBLE_EQ((*ends)[s][k], sim->end_s[ids.done[s][k]]) << kind << " stage " << s << " op " << k;
    }
  }
  // A schedule whose first stage waits for an op that never runs is an error, not a hang.
  const PipelineSchedule stuck = {{{false, 0, 0}}, {}};
  EXPECT_FALSE(pipeline_op_ends(stuck, [](int, const PipeOp&) { return 1.0; }, [](int, const PipeOp&) { return 0.0; }).ok());
}

TEST(PipelineSchedule, BadArgumentsAreErrors) {
  const auto bad = [](const std::string& kind, int p, int m, int v) {
    auto s = pipeline_schedule(kind, p, m, v);
    return s.ok() ? std::string() : s.error_str();
  };
  EXPECT_EQ(bad("interleaved", 4, 6, 2),
            "pipeline schedule 'interleaved' (p = 4, m = 6, v = 2): the interleaved schedule needs m to be a "
            "multiple of p");
  EXPECT_NE(bad("zb", 4, 8, 1).find("unknown kind"), std::string::npos);
  EXPECT_NE(bad("1f1b", 4, 8, 2).find("must be 1"), std::string::npos);
  EXPECT_NE(bad("interleaved", 4, 8, 1).find("v >= 2"), std::string::npos);
  EXPECT_NE(bad("gpipe", 0, 8, 1).find(">= 1"), std::string::npos);
}

// Golden timeline: 1F1B, p = 2, m = 3, forward 1, backward 2, P2P 0.25. The file was derived
// by hand, then compared with the simulator (which agreed on every task). What was checked:
//  - stage 0 runs F0 F1 B0 F2 B1 B2 (one warm-up forward), stage 1 F0 B0 F1 B1 F2 B2;
//  - each forward on stage 1 starts 0.25 after its send from stage 0 ends (F0: 1 -> 1.25), and
//    stage 0's backward B0 starts at 4.5 = stage 1's B0 end 4.25 + 0.25 transfer;
//  - stage 1's F1 waits for its own B0 (stream order, 4.25), not for the send (2.25);
//  - the last backward, B2 on stage 0, ends at 13 = 12 (the (m + p − 1)·3 of the
//    communication-free schedule) + 4 × 0.25: the critical path F0(s0) sendF0 F0(s1) B0(s1)
//    sendB0 B0(s0) F2(s0) sendF2 F2(s1) B2(s1) sendB2 B2(s0) crosses four transfers;
//  - exposed communication is 0.25 per transfer the compute stream actually waited on: stage 0
//    waits for sends of B0 and B2, stage 1 for sends of F0 and F2 (0.5 each); the sends of F1
//    and B1 overlap with compute.
TEST(PipelineSchedule, Golden1F1B) {
  const auto golden = load_json_file(std::filesystem::path(CPBENCH_SOURCE_DIR) / "core/sim/testdata/golden_1f1b.json");
  ASSERT_TRUE(golden.ok()) << golden.error_str();
  const json& j = *golden;
  const TaskGraph g = build_pipeline_graph(make(j["schedule"], j["p"], j["m"], j["v"]), j["fwd_s"], j["bwd_s"], j["p2p_s"]);
  const SimResult r = simulate(g);
  ASSERT_EQ(g.size(), j["tasks"].size());
  for (const json& t : j["tasks"]) {
    const int id = t["id"];
    EXPECT_EQ(g.task(id).name, t["name"]) << id;
    EXPECT_EQ(g.task(id).device, t["device"]) << id;
    EXPECT_EQ(g.task(id).stream, t["stream"]) << id;
    EXPECT_EQ(r.start_s[id], t["start_s"].get<double>()) << id << " " << g.task(id).name;
    EXPECT_EQ(r.end_s[id], t["end_s"].get<double>()) << id << " " << g.task(id).name;
  }
  EXPECT_EQ(r.makespan_s, j["makespan_s"].get<double>());
  EXPECT_EQ(r.compute_busy_s, j["compute_busy_s"].get<std::vector<double>>());
  EXPECT_EQ(r.exposed_comm_s, j["exposed_comm_s"].get<std::vector<double>>());
  EXPECT_EQ(r.comm_busy_s, j["comm_busy_s"].get<std::vector<double>>());
}

}  // namespace
}  // namespace cpbench
