// executed_plans_test.cpp — every family of attention plan cpbench builds, executed forward and
// backward on 2, 4 and 8 thread ranks of one process (ThreadCommunicator; no mpirun): each static
// layout under every mask in both run styles, sparse masks on causal tiles, DCP under every mask
// (divisions, head blocks, all-to-all and point-to-point exchanges), and every round of a
// Dynamic-CP schedule under every mask, and a static packing plan's rounds, through the plan walker
// (core/runtime/plan_exec.h). Every rank's O, LSE, dQ, dK and dV match the single-device
// reference and every rank moves exactly the bytes plan_bytes predicts. The *_mpi_test files run
// the same plans on MPI ranks.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/layouts/cp_layouts_test_util.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/plan_exec.h"
#include "core/runtime/thread_communicator.h"
#include "core/runtime/executor_test_util.h"
#include "core/strategies/dcp.h"
#include "core/strategies/dcp_test_cases.h"
#include "core/strategies/dynamic_cp.h"
#include "core/strategies/packing.h"

namespace cpbench {
namespace {

class Layouts : public ::testing::TestWithParam<std::string> {};

TEST_P(Layouts, MatchReferenceAndPlannedBytesOnThreadRanks) {
  const std::string layout = GetParam();
  int ran = 0;
  for (const MaskCase& m : every_mask(16, 16))
    for (int cp : {1, 2, 4, 8}) {
      if ((layout == "single") != (cp == 1)) continue;
      for (bool experiment : {false, true}) {
        const std::string what = layout + " " + m.name + " cp=" + std::to_string(cp) + " " + RunStyle{experiment}.name();
        // Odd, unequal lengths, one shorter than 2·cp.
        auto plan = test_layout_plan(layout, m.mask, cp, {37, 100, 5, 64}, RunStyle{experiment});
        if (layout == "a2a" && 4 % cp != 0) {  // Ulysses cannot split 4 K/V heads over 8 ranks
          EXPECT_NE(plan.error_str().find("heads"), std::string::npos) << what << ": " << plan.error_str();
          continue;
        }
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.error_str();
        ASSERT_EQ(check_attention_plan(*plan), "") << what;
        expect_runs_on_thread_ranks(*plan, 42, what);
        ++ran;
      }
    }
  EXPECT_GE(ran, 10) << layout;
}

INSTANTIATE_TEST_SUITE_P(All, Layouts, ::testing::ValuesIn(cp_layout_names()), LayoutTestName());

// A static layout runs a sparse mask on the causal layout's tiles (causal_envelope_work, as
// TransformerEngine does): the result is still the sparse mask's, the bytes the plan's.
TEST(ExecutedPlans, SparseMasksOnCausalTiles) {
  for (const MaskCase& m : every_mask(16, 16)) {
    if (m.mask.kind == MaskKind::causal || m.mask.kind == MaskKind::full) continue;
    for (const char* layout : {"ring", "zigzag", "a2a+p2p"}) {
      auto plan = test_layout_plan(layout, MaskSpec{MaskKind::causal}, 4, {37, 100, 5, 64}, RunStyle{true});
      ASSERT_TRUE(plan.ok()) << plan.error_str();
      plan->mask = m.mask;
      plan->causal_envelope_work = true;
      ASSERT_EQ(check_attention_plan(*plan), "") << layout << " " << m.name;
      expect_runs_on_thread_ranks(*plan, 42, std::string(layout) + " " + m.name + " on causal tiles");
    }
  }
}

// DCP on 2, 4 and 8 ranks, two simulated nodes each: every mask, 1 and 4 divisions (partial outputs
// sent home inside the stages with 4), head blocks of all heads, two K/V groups and one K/V group;
// the exchange as all-to-alls (with relays inside a node) or, with two head blocks, point-to-point.
TEST(ExecutedPlans, DcpUnderEveryMask) {
  const CostModel cost = ideal_cost();
  int64_t collective = 0, point_to_point = 0, relays = 0;
  for (int32_t ranks : {2, 4, 8})
    for_each_executed_dcp_request(ranks, [&](const DcpRequest& r, const std::string& label) {
      auto d = plan_dcp(r, cost);
      ASSERT_TRUE(d.ok()) << d.error_str();
      (d->plan.collective_exchange ? collective : point_to_point) += 1;
      for (const AttnStage& st : d->plan.stages)
        for (const AttnTransfer& t : st.transfers) relays += t.relay;
      expect_runs_on_thread_ranks(d->plan, 7, "DCP " + label);
    });
  EXPECT_GT(collective, 0);
  EXPECT_GT(point_to_point, 0);
  EXPECT_GT(relays, 0) << "no DCP plan relayed an input inside a node";
}

// The Plan of a Dynamic-CP schedule over `ranks` ranks as the dynamic_cp strategies make it
// (plan_from_dynamic_cp_schedule, then every group's attention attached as for training), under `mask`.
Plan dynamic_cp_plan(const DynamicCpSchedule& schedule, const std::vector<int64_t>& lengths, int ranks, const MaskSpec& mask) {
  ParallelConfig layout;
  layout.num_gpus = ranks;
  layout.max_seqlen_per_dp_cp_rank = 256;
  auto plan = plan_from_dynamic_cp_schedule(schedule, lengths, layout, DynamicCpExecutor::per_sequence);
  EXPECT_TRUE(plan.ok()) << plan.error_str();
  plan->mask = mask;
  ModelShape model;
  model.heads = 4;
  model.kv_heads = 2;
  model.hidden = 64;
  auto problem = attach_attention_plans(&*plan, model);
  EXPECT_FALSE(problem) << problem->why;
  return *plan;
}

// Runs every round of `plan` on `ranks` thread ranks through the plan walker; every member's
// results match the reference and its bytes the plan's. Returns the groups that ran.
int expect_plan_rounds_run(const Plan& plan, int ranks, const std::string& what) {
  int groups = 0;
  for (size_t k = 0; k < plan_rounds(plan); ++k) {
    std::vector<RoundRun> runs(static_cast<size_t>(ranks));
    CpuAttentionKernels kernels;
    auto st = run_thread_ranks(
        ranks,
        [&](Communicator& world) -> Status {
          auto run = execute_plan_round(plan, k, world, kernels, 7, GroupRunOptions{true, true});
          if (!run) return run.errors();
          runs[static_cast<size_t>(world.rank())] = *run;
          return ok_status();
        },
        std::chrono::seconds(60));
    for (int r = 0; r < ranks; ++r) {
      const std::string where = what + ", round " + std::to_string(k) + ", rank " + std::to_string(r);
      EXPECT_TRUE(st[static_cast<size_t>(r)]) << where << ": " << st[static_cast<size_t>(r)].error_str();
      const RoundRun& run = runs[static_cast<size_t>(r)];
      if (run.idle()) continue;
      if (run.group_rank == 0) ++groups;
      EXPECT_EQ(run.group_rank, r - run.where.first_rank) << where;
      EXPECT_TRUE(run.run.results_match()) << where << ": " << run.run.check.where << " off by " << run.run.check.worst;
      EXPECT_EQ(run.run.check.wrong, 0) << where;
      EXPECT_GT(run.run.check.checked, 0) << where;
      EXPECT_TRUE(run.run.bytes_match()) << where << ": sent " << run.run.bytes_sent << " of " << run.run.plan_bytes_sent;
    }
  }
  return groups;
}

// Megatron's Dynamic-CP schedule of a long-tailed batch on 4 and 8 ranks (groups of several sizes
// per round, idle ranks), every round under every mask, through the plan walker.
TEST(ExecutedPlans, DynamicCpRoundsUnderEveryMask) {
  const std::vector<int64_t> lengths{300, 37, 64, 129, 1000, 17, 250, 90};
  for (int ranks : {4, 8}) {
    auto schedule = schedule_dynamic_cp_main(lengths, ranks, 256);
    ASSERT_TRUE(schedule.ok()) << schedule.error_str();
    std::set<int64_t> sizes;
    for (const DynamicCpRound& round : schedule->rounds)
      for (const auto& g : round.groups) sizes.insert(g.size);
    EXPECT_GE(sizes.size(), 2u) << "the schedule on " << ranks << " ranks has one group size only";
    for (const MaskCase& m : every_mask(16, 16)) {
      const Plan plan = dynamic_cp_plan(*schedule, lengths, ranks, m.mask);
      const int groups = expect_plan_rounds_run(plan, ranks, std::string("Dynamic-CP ") + m.name + " on " + std::to_string(ranks));
      size_t planned = 0;
      for (const DynamicCpRound& round : schedule->rounds)
        for (const auto& g : round.groups) planned += g.size > 1 ? 1 : 0;
      EXPECT_EQ(static_cast<size_t>(groups), planned) << m.name << " on " << ranks << " ranks";
    }
  }
}

// Megatron main's Dynamic-CP runs a round's sequences one micro-batch each on the round's groups:
// validate holds every micro-batch's seat at once, and those split alike share one group
// communicator (RoundSplits) instead of splitting the world again. Two rounds, each a CP-2 group
// of two sequences beside a CP-2 group of one: four micro-batches, two ways of splitting the
// ranks, two splits; every seat runs and checks.
TEST(ExecutedPlans, MicroBatchesSplitAlikeShareTheirGroupCommunicator) {
  const std::vector<int64_t> lengths{300, 200, 400, 260, 120, 330};
  DynamicCpSchedule schedule;
  schedule.rounds.resize(2);
  schedule.rounds[0].groups = {{0, 2, {0, 1}, 0}, {2, 2, {2}, 0}};
  schedule.rounds[1].groups = {{0, 2, {3, 4}, 0}, {2, 2, {5}, 0}};
  const Plan plan = dynamic_cp_plan(schedule, lengths, 4, MaskSpec{});
  ASSERT_EQ(plan_rounds(plan), 4u);
  std::vector<std::vector<const Communicator*>> used(4);
  std::vector<int> checked(4, 0);
  auto st = run_thread_ranks(
      4,
      [&](Communicator& world) -> Status {
        RoundSplits splits;
        std::vector<RoundSeat> seats;
        for (size_t k = 0; k < plan_rounds(plan); ++k) {
          auto seat = take_round_seat(plan, k, world, 7, &splits);
          if (!seat) return seat.errors();
          seats.push_back(std::move(*seat));
        }
        CpuAttentionKernels kernels;
        for (const RoundSeat& seat : seats) {
          used[static_cast<size_t>(world.rank())].push_back(seat.group.get());
          auto run = run_round_seat(seat, kernels, GroupRunOptions{true, true});
          if (!run) return run.errors();
          if (!run->idle() && run->run.results_match() && run->run.bytes_match()) ++checked[static_cast<size_t>(world.rank())];
        }
        if (splits.by_groups.size() != 2) return Error{"", "", "splits " + std::to_string(splits.by_groups.size())};
        return ok_status();
      },
      std::chrono::seconds(60));
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(st[static_cast<size_t>(r)]) << "rank " << r << ": " << st[static_cast<size_t>(r)].error_str();
    ASSERT_EQ(used[static_cast<size_t>(r)].size(), 4u);
    EXPECT_EQ(used[static_cast<size_t>(r)][0], used[static_cast<size_t>(r)][2]) << "rank " << r;  // both rounds' first
    EXPECT_EQ(used[static_cast<size_t>(r)][1], used[static_cast<size_t>(r)][3]) << "rank " << r;  // and second
  }
  // Ranks 0 and 1 run all four micro-batches; ranks 2 and 3 the first of each round and are idle
  // in the second. The split is the world's (every rank takes part), so it is keyed by the whole
  // round's groups: ranks 0 and 1 get a communicator per way of splitting, not one per group.
  EXPECT_EQ(checked, (std::vector<int>{4, 4, 2, 2}));
  EXPECT_EQ(used[2][1], nullptr);
  EXPECT_NE(used[0][0], used[0][1]);
}

// A static packing plan: two DP replicas of a CP group of 2, several rounds (micro-batches).
TEST(ExecutedPlans, StaticPackingRoundsRunSideBySide) {
  const std::vector<int64_t> lengths{300, 37, 64, 129, 250, 17, 90, 200};
  ClusterSpec cluster;
  ModelShape model;
  model.layers = 2;
  model.heads = 4;
  model.kv_heads = 2;
  model.hidden = 64;
  ParallelConfig layout;
  layout.num_gpus = 4;
  layout.cp = 2;
  layout.max_seqlen_per_dp_cp_rank = 160;
  GlobalBatch batch{lengths, MaskSpec{MaskKind::causal}};
  Plan plan;
  ASSERT_EQ(plan_static_cp(StrategyInput{cluster, model, layout, batch}, "dp_balanced", &plan), "");
  plan.mask = batch.mask;
  ASSERT_FALSE(attach_attention_plans(&plan, model));
  ASSERT_GE(plan_rounds(plan), 2u);
  EXPECT_EQ(expect_plan_rounds_run(plan, 4, "packing"), static_cast<int>(2 * plan_rounds(plan)));
}

// A malformed round is refused by every rank before any communication, naming the round; a plan
// wider than the job likewise.
TEST(ExecutedPlans, MalformedRoundsAreRefusedOnEveryRank) {
  const std::vector<int64_t> lengths{300, 37, 64, 129};
  DynamicCpSchedule schedule;
  schedule.rounds.resize(1);
  schedule.rounds[0].groups = {{0, 2, {0, 1}, 0}, {2, 2, {2, 3}, 0}};
  Plan good = dynamic_cp_plan(schedule, lengths, 4, MaskSpec{MaskKind::causal});
  Plan split = good;  // rank 1 holds the other group's micro-batch
  split.micro_batches[1][0] = split.micro_batches[2][0];
  Plan other = good;  // rank 1 runs another plan object than rank 0
  other.micro_batches[1][0].attention = std::make_shared<const AttentionPlan>(*good.micro_batches[0][0].attention);
  const std::vector<std::pair<const Plan*, std::string>> cases = {
      {&split, "plan round 0: DP×CP rank 1 holds a micro-batch of the group on ranks [2, 4)"},
      {&other, "plan round 0: the members of round 0's group on ranks [0, 2) hold different plans"},
  };
  for (const auto& [plan, message] : cases) {
    CpuAttentionKernels kernels;
    auto st = run_thread_ranks(
        4,
        [&](Communicator& world) -> Status {
          auto r = execute_plan_round(*plan, 0, world, kernels, 1, {});
          return r ? ok_status() : Status(r.errors());
        },
        std::chrono::seconds(20));
    for (const Status& s : st) {
      ASSERT_FALSE(s.ok()) << message;
      EXPECT_NE(s.error_str().find(message), std::string::npos) << s.error_str();
    }
  }
  CpuAttentionKernels kernels;
  auto st = run_thread_ranks(
      2,
      [&](Communicator& world) -> Status {
        auto r = execute_plan_round(good, 0, world, kernels, 1, {});
        return r ? ok_status() : Status(r.errors());
      },
      std::chrono::seconds(20));
  for (const Status& s : st) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error_str().find("the plan has 4 DP×CP ranks; the job has 2"), std::string::npos) << s.error_str();
  }
}

}  // namespace
}  // namespace cpbench
