// executed_plans_test.cpp — every family of attention plan cpbench builds, executed forward and
// backward on 2, 4 and 8 thread ranks of one process (ThreadCommunicator; no mpirun): each static
// layout under every mask in both run styles, sparse masks on causal tiles, DCP under every mask
// (divisions, head blocks, all-to-all and point-to-point exchanges), and every round of a
// Dynamic-CP schedule under every mask. Every rank's O, LSE, dQ, dK and dV match the single-device
// reference and every rank moves exactly the bytes plan_bytes predicts. The *_mpi_test files run
// the same plans on MPI ranks.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "baselines/cp_layouts_test_util.h"
#include "core/runtime/dynamic_cp_exec.h"
#include "core/runtime/executor_test_util.h"
#include "core/strategies/dcp.h"
#include "core/strategies/dcp_test_cases.h"
#include "core/strategies/dynamic_cp.h"

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

INSTANTIATE_TEST_SUITE_P(All, Layouts, ::testing::ValuesIn(cp_layout_names()), [](const auto& info) {
  std::string n = info.param;
  for (auto& c : n)
    if (c == '+') c = '_';
  return n;
});

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

// Megatron's Dynamic-CP schedule of a long-tailed batch on 4 and 8 ranks (groups of several sizes
// per round), every round under every mask: each group's plan runs on its ranks of the round.
TEST(ExecutedPlans, DynamicCpRoundsUnderEveryMask) {
  const std::vector<int64_t> lengths{300, 37, 64, 129, 1000, 17, 250, 90};
  for (int ranks : {4, 8}) {
    auto schedule = schedule_dynamic_cp_main(lengths, ranks, 256);
    ASSERT_TRUE(schedule.ok()) << schedule.error_str();
    std::set<int64_t> sizes;
    for (const DynCpRound& round : schedule->rounds)
      for (const auto& g : round.groups) sizes.insert(g.size);
    EXPECT_GE(sizes.size(), 2u) << "the schedule on " << ranks << " ranks has one group size only";
    for (const std::string& mask : {"full", "causal", "lambda", "shared_question", "causal_blockwise"})
      for (size_t ri = 0; ri < schedule->rounds.size(); ++ri) {
        const DynCpRound& round = schedule->rounds[ri];
        auto plans = plan_dyncp_round(round, lengths, ranks, "zigzag", mask, 4, 2, 16, dyncp_pad_multiple(ranks, 1));
        ASSERT_TRUE(plans.ok()) << plans.error_str();
        std::vector<DynCpRoundReport> reports(static_cast<size_t>(ranks));
        auto st = run_thread_ranks(
            ranks,
            [&](Communicator& world) -> Status {
              auto rep = execute_dyncp_round(world, round, *plans, true, 7);
              if (!rep) return rep.errors();
              reports[static_cast<size_t>(world.rank())] = *rep;
              return ok_status();
            },
            std::chrono::seconds(60));
        for (int r = 0; r < ranks; ++r) {
          const std::string where = mask + " on " + std::to_string(ranks) + " ranks, round " + std::to_string(ri) +
                                    ", rank " + std::to_string(r);
          ASSERT_TRUE(st[static_cast<size_t>(r)]) << where << ": " << st[static_cast<size_t>(r)].error_str();
          const DynCpRoundReport& rep = reports[static_cast<size_t>(r)];
          if (rep.idle()) continue;
          EXPECT_TRUE(rep.results_match()) << where << ": " << rep.check.where << " off by " << rep.check.max_abs_error;
          EXPECT_TRUE(rep.bytes_match()) << where << ": sent " << rep.bytes_sent << " of " << rep.plan_bytes_sent;
        }
      }
  }
}

}  // namespace
}  // namespace cpbench
