// varlen_test.cpp — packing and Dynamic-CP plans and their simulation: every sequence once, CP
// groups held by all their members, per-rank token caps, CP group members starting their shared
// micro-batch together, and equal results where packing and Dynamic-CP plan the same thing.
#include "core/strategies/dcp.h"
#include "core/strategies/dynamic_cp.h"
#include "core/strategies/dynamic_cp_dev.h"
#include "core/strategies/dynamic_cp_solver.h"
#include "core/strategies/packing.h"
#include "core/strategies/varlen.h"
#include "core/strategies/strategy_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/layouts/cp_layouts.h"
#include "core/strategies/attention_bench.h"
#include "core/experiment/registry.h"
#include "core/sim/cp_attention.h"
#include "core/sim/iteration.h"

namespace cpbench {
namespace {

class VarlenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = default_experiments_dir();
    cluster_ = *load_hardware(dir / "hardware" / "h100_dgx.json");
    model_ = *load_model(dir / "models" / "llama2_7b.json");
    layout_.num_gpus = 16;
    layout_.pp = 2;
    layout_.cp = 2;
    layout_.recompute = "full";
    layout_.attention_kernel = "flash";
    layout_.max_seqlen_per_dp_cp_rank = 8192;
    // Distinct lengths identify sequences; a long tail needs CP.
    for (int i = 0; i < 96; ++i) batch_.lengths.push_back(i % 8 == 0 ? 12000 + 7 * i : 300 + 41 * i);
  }
  StrategyInput input() const { return StrategyInput{cluster_, model_, layout_, batch_}; }
  Evaluation run(StrategyFn strategy) const { return plan_and_evaluate(strategy, input(), "megatron"); }

  // An empty plan over 2 DP×CP ranks, one pipeline stage, the fixture's other settings.
  Plan two_rank_plan() const {
    Plan plan;
    plan.layout = layout_;
    plan.layout.num_gpus = 2;
    plan.layout.pp = 1;
    plan.layout.cp = 1;
    return plan;
  }

  // Every sequence exactly once: each group counted at its first rank.
  void expect_every_sequence_once(const Plan& plan) {
    std::vector<int64_t> seen;
    for (size_t r = 0; r < plan.micro_batches.size(); ++r)
      for (const auto& mb : plan.micro_batches[r])
        if (mb.first_rank == static_cast<int64_t>(r) || (mb.first_rank < 0 && !mb.lengths.empty()))
          seen.insert(seen.end(), mb.lengths.begin(), mb.lengths.end());
    std::vector<int64_t> want = batch_.lengths;
    std::sort(seen.begin(), seen.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(seen, want);
  }

  // Members of a group hold its micro-batch at the same index; per-rank tokens within the cap.
  void expect_groups_held(const Plan& plan, int64_t cap) {
    const size_t m = plan.micro_batches.front().size();
    for (size_t r = 0; r < plan.micro_batches.size(); ++r) {
      ASSERT_EQ(plan.micro_batches[r].size(), m);
      for (size_t k = 0; k < m; ++k) {
        const PlanMicroBatch& mb = plan.micro_batches[r][k];
        if (mb.lengths.empty()) continue;
        EXPECT_LE(mb.tokens(), cap * mb.cp) << "rank " << r << " micro-batch " << k;
        ASSERT_GE(mb.first_rank, 0);
        EXPECT_EQ(mb.first_rank % mb.cp, 0);
        EXPECT_LE(mb.first_rank, static_cast<int64_t>(r));
        EXPECT_LT(static_cast<int64_t>(r), mb.first_rank + mb.cp);
        for (int64_t q = mb.first_rank; q < mb.first_rank + mb.cp; ++q) EXPECT_EQ(plan.micro_batches[q][k], mb);
      }
    }
  }

  ClusterSpec cluster_;
  ModelShape model_;
  ParallelConfig layout_;
  GlobalBatch batch_;
};

TEST_F(VarlenTest, StaticCpPlansHoldEverySequenceOnceOnWholeReplicas) {
  for (const std::string packer : {"dp_balanced", "first_fit_decreasing", "flops_balanced"}) {
    Plan plan;
    ASSERT_EQ(plan_static_cp(input(), packer, &plan), "") << packer;
    EXPECT_EQ(plan.micro_batches.size(), 8u);  // dp·cp = 16 / 2
    expect_every_sequence_once(plan);
    expect_groups_held(plan, layout_.max_seqlen_per_dp_cp_rank);
    for (const auto& rank : plan.micro_batches)
      for (const auto& mb : rank) {
        EXPECT_EQ(mb.cp, 2);
        EXPECT_EQ(mb.pad_to, 4);  // zigzag: 2·cp chunks per sequence
      }
  }
}

TEST_F(VarlenTest, DynamicCpPlanFollowsTheScheduleGroups) {
  auto schedule = schedule_dynamic_cp_main(batch_.lengths, 8, layout_.max_seqlen_per_dp_cp_rank);
  ASSERT_TRUE(schedule.ok()) << schedule.error_str();
  auto made = plan_from_dynamic_cp_schedule(*schedule, batch_.lengths, layout_, DynamicCpExecutor::per_sequence);
  ASSERT_TRUE(made.ok()) << made.error_str();
  const Plan& plan = *made;
  EXPECT_EQ(plan.layout.cp, 1);
  EXPECT_EQ(plan.micro_batches.size(), 8u);
  // Megatron main's executor runs a round's sequences one by one: as many micro-batches as the
  // round's largest group has sequences, one sequence each, a barrier before each round's first.
  size_t slots = 0;
  for (const DynamicCpRound& r : schedule->rounds) {
    size_t most = 0;
    for (const DynamicCpGroup& g : r.groups) most = std::max(most, g.seq_ids.size());
    slots += most;
  }
  EXPECT_GT(slots, schedule->rounds.size());
  EXPECT_EQ(plan.micro_batches.front().size(), slots);
  ASSERT_EQ(plan.round_start.size(), slots);
  EXPECT_EQ(static_cast<size_t>(std::count(plan.round_start.begin(), plan.round_start.end(), true)), schedule->rounds.size());
  EXPECT_TRUE(plan.round_start.front());
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) EXPECT_LE(mb.lengths.size(), 1u);
  expect_every_sequence_once(plan);
  expect_groups_held(plan, layout_.max_seqlen_per_dp_cp_rank);
  bool long_group = false;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      if (!mb.lengths.empty()) EXPECT_EQ(mb.pad_to, 16);  // 2 · the pool of 8
      long_group |= mb.cp >= 2;                            // 12000+ tokens at 8192 per rank
    }
  EXPECT_TRUE(long_group);
  // Without the barrier (dev, the solver) round k is micro-batch k, a group's sequences packed.
  auto packed = plan_from_dynamic_cp_schedule(*schedule, batch_.lengths, layout_, DynamicCpExecutor::packed);
  ASSERT_TRUE(packed.ok()) << packed.error_str();
  EXPECT_EQ(packed->micro_batches.front().size(), schedule->rounds.size());
  EXPECT_TRUE(packed->round_start.empty());
  expect_every_sequence_once(*packed);
}

// Megatron main's executor carries its host work outside the model (dynamic_cp.cpp, counted in
// Megatron-LM): per sequence 44 ops and 4 synchronizations; per step the data wrapper's rerouting,
// whose membership tests (3 ops and a sync each, twice per sub-sample of the rank's DP peers) grow
// with the sequences the busiest CP index holds. Dev's and the solver's executors carry none.
TEST_F(VarlenTest, DynamicCpMainPaysItsDataWrappersHostWork) {
  DynamicCpSchedule schedule;  // a pool of 8 (dp 4, cp 2)
  schedule.rounds.resize(2);
  schedule.rounds[0].groups = {{0, 2, {0}, 0}, {2, 1, {1, 2, 3}, 0}, {3, 1, {4}, 0}, {4, 4, {5}, 0}};
  schedule.rounds[1].groups = {{0, 8, {6}, 0}};
  auto plan = plan_from_dynamic_cp_schedule(schedule, batch_.lengths, layout_, DynamicCpExecutor::per_sequence);
  ASSERT_TRUE(plan.ok()) << plan.error_str();
  EXPECT_EQ(plan->host_per_micro_batch, (FrameworkHostWork{44, 4}));
  // Sub-samples held: ranks 0, 1, 3-7 two each, rank 2 four; CP index 0 (ranks 0, 2, 4, 6) holds
  // 10, so 20 tests; the 10 spread over 4 DP ranks, 3 sent by the busiest, 4 keys each.
  const double tests = 20;
  EXPECT_EQ(plan->host_per_step, (FrameworkHostWork{3 + (2 * 4 + 9) + 3 * tests + 4 * (3 + 3) + 6, 1 + 3 + tests + 3}));
  // Twice the sequences on rank 2: more tests, more host time in the step.
  schedule.rounds[0].groups[1].seq_ids = {1, 2, 3, 7, 8, 9};
  auto more = plan_from_dynamic_cp_schedule(schedule, batch_.lengths, layout_, DynamicCpExecutor::per_sequence);
  ASSERT_TRUE(more.ok()) << more.error_str();
  EXPECT_EQ(more->host_per_step.syncs, plan->host_per_step.syncs + 6);
  // Simulated (the strategy's plan, its attention plans attached): the step pays it as host time.
  const PlanOutcome main = plan_dynamic_cp(input());
  ASSERT_EQ(main.status, "ok") << main.reason;
  EXPECT_GT(main.plan.host_per_step.syncs, 0);
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok());
  auto with = simulate_iteration(main.plan, model_, *cost);
  Plan without_host = main.plan;
  without_host.host_per_step = without_host.host_per_micro_batch = {};
  auto without = simulate_iteration(without_host, model_, *cost);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(with->exposed_host_s, without->exposed_host_s);
  EXPECT_GT(with->step_time_s, without->step_time_s);
  auto packed = plan_from_dynamic_cp_schedule(schedule, batch_.lengths, layout_, DynamicCpExecutor::packed);
  ASSERT_TRUE(packed.ok()) << packed.error_str();
  EXPECT_EQ(packed->host_per_step, FrameworkHostWork{});
  EXPECT_EQ(packed->host_per_micro_batch, FrameworkHostWork{});
}

// A schedule with an invalid round (a scheduler's bug) is an error naming the round, not a plan.
TEST_F(VarlenTest, DynamicCpPlanRefusesAnInvalidRound) {
  DynamicCpSchedule schedule;
  schedule.rounds.resize(2);
  schedule.rounds[0].groups = {{0, 2, {0}, 0}};
  schedule.rounds[1].groups = {{0, 2, {1}, 0}, {1, 2, {2}, 0}};
  auto plan = plan_from_dynamic_cp_schedule(schedule, batch_.lengths, layout_, DynamicCpExecutor::per_sequence);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error_str().find("round 1: group 1 (ranks [1, 3)) overlaps group 0 (ranks [0, 2)) at rank 1"),
            std::string::npos)
      << plan.error_str();
}

TEST_F(VarlenTest, SplittingASequenceOverCpRanksSplitsItsAttention) {
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok());
  CpAttentionCache cache(*cost, layout_);
  // The strategy attaches each CP micro-batch's AttentionPlan; the simulator prices that one.
  auto with_attention = [&](PlanMicroBatch mb) {
    auto a = plan_micro_batch_attention(mb, model_, layout_);
    EXPECT_TRUE(a.ok()) << a.error_str();
    if (a) mb.attention = std::make_shared<const AttentionPlan>(std::move(*a));
    return mb;
  };
  PlanMicroBatch one = with_attention({{32768}, 1, 0, 1}), two = with_attention({{32768}, 2, 0, 4}),
                 four = with_attention({{32768}, 4, 0, 8});
  auto a1 = cache.get(one);
  auto a2 = cache.get(two);
  auto a4 = cache.get(four);
  ASSERT_TRUE(a1.ok() && a2.ok() && a4.ok());
  // Zigzag balances causal work: each of c ranks does 1/c of it, plus what transfers expose.
  EXPECT_GT(a2->fwd_s, a1->fwd_s / 2);
  EXPECT_LT(a2->fwd_s, 0.6 * a1->fwd_s);
  EXPECT_GT(a4->fwd_s, a1->fwd_s / 4);
  EXPECT_LT(a4->fwd_s, 0.35 * a1->fwd_s);
  EXPECT_EQ(a1->fwd_wait_s, 0);  // one rank sends nothing
  EXPECT_GT(a2->bwd_s, a2->fwd_s);
  // Short sequences cannot hide a ring step's KV transfer behind their tiny attention.
  PlanMicroBatch short_two = with_attention({{512, 512, 512, 512}, 2, 0, 4});
  auto s2 = cache.get(short_two);
  ASSERT_TRUE(s2.ok());
  EXPECT_GT(s2->fwd_wait_s, 0);
  // The ring's backward ends with the running dK/dV's last hop to its owner, after the last
  // kernel: a tail of the backward's wait that follows the kernels (what Kwai's CP overlaps).
  EXPECT_GT(s2->bwd_tail_s, 0);
  EXPECT_LE(s2->bwd_tail_s, s2->bwd_wait_s);
  EXPECT_EQ(a1->bwd_tail_s, 0);
}

// The rank order is Megatron's (tp fastest, then cp, then dp, then pp): a group's members' nodes
// follow from its first rank, its size and tp.
// What a strategy hands a backend is well formed: every CP micro-batch carries an AttentionPlan
// that passes check_attention_plan, covers the micro-batch's padded sequences on its group, and
// moves 16-bit values (the layout is bf16). Release builds skip this check in the simulator (it
// costs more than the simulation), so the strategies are held to it here.
TEST_F(VarlenTest, EveryAttachedAttentionPlanIsWellFormed) {
  for (StrategyFn strategy : {plan_packing, plan_packing_ffd, plan_packing_flops, plan_dynamic_cp, plan_dynamic_cp_dev,
                              plan_dynamic_cp_solver}) {
    PlanOutcome planned = strategy(input());
    ASSERT_EQ(planned.status, "ok") << planned.reason;
    size_t checked = 0;
    for (const auto& rank : planned.plan.micro_batches)
      for (const auto& mb : rank) {
        if (mb.cp <= 1 || mb.lengths.empty()) {  // local attention, or an idle slot
          EXPECT_FALSE(mb.attention);
          continue;
        }
        ASSERT_TRUE(mb.attention);
        EXPECT_EQ(check_attention_plan(*mb.attention), "");
        EXPECT_EQ(mb.attention->ranks, mb.cp);
        EXPECT_EQ(mb.attention->value_bytes, 2);
        int64_t tokens = 0;
        for (int64_t len : mb.attention->seq_lengths) tokens += len;
        EXPECT_GE(tokens, mb.padded_tokens());
        ++checked;
      }
    EXPECT_GT(checked, 0u);
  }
}

// The workload's mask reaches every CP group's plan: a sparse mask is executed as itself on the
// causal tiles and priced over the causal envelope (static CP cannot skip it), so the step is the
// causal run's; a full mask is a limit of cpbench's decoder layers, said so.
TEST_F(VarlenTest, TheWorkloadsMaskReachesEveryAttentionPlan) {
  const Evaluation causal = run(plan_packing);
  ASSERT_EQ(causal.status, "ok") << causal.reason;
  batch_.mask = MaskSpec{MaskKind::lambda};
  for (StrategyFn strategy : {plan_packing, plan_dynamic_cp_dev}) {
    PlanOutcome planned = strategy(input());
    ASSERT_EQ(planned.status, "ok") << planned.reason;
    EXPECT_EQ(planned.plan.mask.kind, MaskKind::lambda);
    size_t checked = 0;
    for (const auto& rank : planned.plan.micro_batches)
      for (const auto& mb : rank)
        if (mb.attention) {
          EXPECT_EQ(mb.attention->mask.kind, MaskKind::lambda);
          EXPECT_TRUE(mb.attention->causal_envelope_work);
          EXPECT_EQ(check_attention_plan(*mb.attention), "");
          ++checked;
        }
    EXPECT_GT(checked, 0u);
  }
  const Evaluation lambda = run(plan_packing);
  ASSERT_EQ(lambda.status, "ok") << lambda.reason;
  EXPECT_DOUBLE_EQ(lambda.metrics.at("step_time_s"), causal.metrics.at("step_time_s"));
  batch_.mask = MaskSpec{MaskKind::full};
  const PlanOutcome full = plan_packing(input());
  EXPECT_EQ(full.status, "error");
  EXPECT_NE(full.reason.find("full (bidirectional) mask"), std::string::npos) << full.reason;
}

TEST_F(VarlenTest, CpGroupNodesFollowTheRankOrder) {
  ParallelConfig L;
  L.num_gpus = 64;
  L.tp = 1;
  L.cp = 16;  // dp 4
  EXPECT_EQ(cp_group_nodes(PlanMicroBatch{{4096}, 16, 0, 32}, L, 8),
            (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(cp_group_nodes(PlanMicroBatch{{4096}, 8, 8, 16}, L, 8), std::vector<int>(8, 0));  // one node
  L.tp = 4;
  L.cp = 4;  // dp 4: a CP rank every 4 GPUs, two per node
  EXPECT_EQ(cp_group_nodes(PlanMicroBatch{{4096}, 4, 4, 8}, L, 8), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(global_rank(L, 1, 0, 0), 64);  // stage 1 starts after dp·cp·tp = 64 ranks
}

TEST_F(VarlenTest, CpGroupMembersStartTheirSharedMicroBatchTogether) {
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok());
  Plan plan = two_rank_plan();
  const PlanMicroBatch heavy{{8192}, 1, 0, 1}, light{{512}, 1, 1, 1}, shared{{16384}, 2, 0, 4};
  plan.micro_batches = {{heavy, shared}, {light, shared}};
  // CP micro-batches carry the attention plan the strategy chose; the simulator does not know the
  // layouts and rejects one that has none.
  auto unplanned = simulate_iteration(plan, model_, *cost);
  ASSERT_FALSE(unplanned.ok());
  EXPECT_NE(unplanned.error_str().find("carries no attention plan"), std::string::npos) << unplanned.error_str();
  ASSERT_FALSE(attach_attention_plans(&plan, model_).has_value());
  EXPECT_EQ(plan.micro_batches[0][1].attention, plan.micro_batches[1][1].attention);  // one object, shared
  auto joined = simulate_iteration(plan, model_, *cost);
  ASSERT_TRUE(joined.ok()) << joined.error_str();
  EXPECT_EQ(joined->simulated_pipelines, 2u);
  // Both ranks heavy first: identical lists, one pipeline, nobody waits. The joined plan ends at
  // the same time (rank 0's path is the same) but its light rank idles until its partner is ready.
  Plan same = plan;
  same.micro_batches[1][0] = PlanMicroBatch{{8192}, 1, 1, 1};
  auto symmetric = simulate_iteration(same, model_, *cost);
  ASSERT_TRUE(symmetric.ok()) << symmetric.error_str();
  EXPECT_EQ(symmetric->simulated_pipelines, 2u);  // first_rank differs: still two pipelines
  EXPECT_NEAR(joined->step_time_s, symmetric->step_time_s, 1e-9 * symmetric->step_time_s);
  EXPECT_GT(joined->bubble_fraction, symmetric->bubble_fraction + 0.01);
  // A group whose members hold different micro-batches is an error, not a silent plan.
  Plan broken = plan;
  broken.micro_batches[1][1].lengths = {16000};
  auto bad = simulate_iteration(broken, model_, *cost);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_str().find("does not hold the micro-batch of its CP group"), std::string::npos) << bad.error_str();
  // A micro-batch whose group does not contain its rank, or a CP micro-batch with no group.
  Plan outside = plan;
  outside.micro_batches[1][0].first_rank = 0;
  auto bad_group = simulate_iteration(outside, model_, *cost);
  ASSERT_FALSE(bad_group.ok());
  EXPECT_NE(bad_group.error_str().find("DP×CP rank 1, micro-batch 0: its CP group [0, 1) does not contain the rank"),
            std::string::npos) << bad_group.error_str();
  Plan groupless = plan;
  groupless.micro_batches[0][1].first_rank = groupless.micro_batches[1][1].first_rank = -1;
  EXPECT_FALSE(simulate_iteration(groupless, model_, *cost).ok());
}

TEST_F(VarlenTest, RoundBarrierStartsEveryRanksMicroBatchTogether) {
  // Round 0: rank 0 heavy, rank 1 light; round 1: both light. Without a barrier rank 1 starts its
  // round-1 micro-batch as soon as its own round 0 ends; with Megatron main's barrier it waits for
  // rank 0. One stage, so the wait shows as rank 1's idle time, and the step is the same.
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok());
  Plan plan = two_rank_plan();
  plan.micro_batches = {{{{16384}, 1, 0, 1}, {{2048}, 1, 0, 1}}, {{{512}, 1, 1, 1}, {{2048}, 1, 1, 1}}};
  auto free_run = simulate_iteration(plan, model_, *cost);
  plan.round_start = {true, true};
  auto barrier = simulate_iteration(plan, model_, *cost);
  ASSERT_TRUE(free_run.ok() && barrier.ok());
  EXPECT_NEAR(barrier->step_time_s, free_run->step_time_s, 1e-9 * free_run->step_time_s);
  EXPECT_GT(barrier->bubble_fraction, free_run->bubble_fraction + 0.01);
  // With two stages the barrier also holds back rank 1's forwards on the second stage: the step
  // cannot be shorter than without it.
  plan.layout.num_gpus = 4;
  plan.layout.pp = 2;
  auto two_stages = simulate_iteration(plan, model_, *cost);
  plan.round_start.clear();
  auto two_free = simulate_iteration(plan, model_, *cost);
  ASSERT_TRUE(two_stages.ok() && two_free.ok());
  EXPECT_GE(two_stages->step_time_s, two_free->step_time_s - 1e-12);
}

// Megatron main's executor runs each sequence of a round as its own forward and backward
// (hybrid_cp_schedule.py), where dev and the solver pack a rank's sequences of the round into one
// micro-batch: on short sequences the same schedule issues a micro-batch's kernels once per
// sequence, the step waits for the host to issue them, and it is longer than the packed one.
TEST_F(VarlenTest, DynamicCpMainRunsEachSequenceAsAMicroBatchOfItsOwn) {
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok());
  layout_.pp = 1;
  layout_.num_gpus = 8;
  batch_.lengths.assign(64, 256);
  auto schedule = schedule_dynamic_cp_main(dynamic_cp_scheduled_lengths(batch_.lengths, layout_), 8,
                                           layout_.max_seqlen_per_dp_cp_rank);
  ASSERT_TRUE(schedule.ok()) << schedule.error_str();
  auto each = plan_from_dynamic_cp_schedule(*schedule, batch_.lengths, layout_, DynamicCpExecutor::per_sequence);
  auto packed = plan_from_dynamic_cp_schedule(*schedule, batch_.lengths, layout_, DynamicCpExecutor::packed);
  ASSERT_TRUE(each.ok() && packed.ok());
  EXPECT_EQ(each->micro_batches.front().size(), 8u);  // 64 sequences of 256 on 8 ranks: 8 each
  auto a = simulate_iteration(*each, model_, *cost);
  auto b = simulate_iteration(*packed, model_, *cost);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error_str() << b.error_str();
  EXPECT_GT(a->kernels, 4 * b->kernels);
  EXPECT_GT(a->exposed_host_s, b->exposed_host_s);
  EXPECT_GT(a->step_time_s, b->step_time_s);
}

// Megatron main's round barrier joins all ranks' forwards at a round's first micro-batch; a CP
// group's later micro-batches of the round still start each op together on its members. Two
// ranks, two stages: round 1 gives rank 0 a long sequence and rank 1 a short one; round 2 runs
// two sequences on a CP-2 group of both. 1F1B puts round 1's backward before the second
// sequence's forward, so rank 1 reaches it first: the group's forward join holds it until rank 0
// is ready, and with both ranks in the group a barrier there is the same join.
TEST_F(VarlenTest, DynamicCpMainJoinsAGroupsForwardsInsideARound) {
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok());
  Plan plan = two_rank_plan();
  plan.layout.num_gpus = 4;
  plan.layout.pp = 2;
  const PlanMicroBatch a{{2048}, 2, 0, 4}, b{{4096}, 2, 0, 4};
  plan.micro_batches = {{{{16384}, 1, 0, 1}, a, b}, {{{512}, 1, 1, 1}, a, b}};
  ASSERT_FALSE(attach_attention_plans(&plan, model_));
  plan.round_start = {true, true, false};
  const std::filesystem::path dir = ::testing::TempDir();
  auto inside = simulate_iteration(plan, model_, *cost, dir / "inside.json");
  plan.round_start = {true, true, true};
  auto barrier = simulate_iteration(plan, model_, *cost);
  ASSERT_TRUE(inside.ok() && barrier.ok()) << inside.error_str() << barrier.error_str();
  EXPECT_NEAR(inside->step_time_s, barrier->step_time_s, 1e-12 * barrier->step_time_s);
  EXPECT_NEAR(inside->bubble_fraction, barrier->bubble_fraction, 1e-12);
  plan.round_start = {true, false, false};  // a marking of the wrong length is refused
  plan.round_start.pop_back();
  EXPECT_FALSE(simulate_iteration(plan, model_, *cost).ok());
}

TEST_F(VarlenTest, PackingAndDynamicCpAgreeWhenTheyPlanTheSameThing) {
  // Every sequence fills one rank: dp_balanced at cp = 1 puts one per pack, round-robin over the
  // 8 replicas; Dynamic-CP puts one per rank per round. Same micro-batches, same step (Dynamic-CP's
  // round barrier costs nothing when every rank's micro-batch is the same) but for Megatron main's
  // host work outside the model: all of the step's, and at most all of the 8 micro-batches' (the
  // first stage's forwards wait for it; the last stage sets the pace here).
  batch_.lengths.assign(64, 8192);
  layout_.cp = 1;
  auto packing = run(plan_packing);
  layout_.cp = 2;  // Dynamic-CP uses the DP×CP pool whatever the static split
  auto dynamic = run(plan_dynamic_cp);
  ASSERT_EQ(packing.status, "ok") << packing.reason;
  ASSERT_EQ(dynamic.status, "ok") << dynamic.reason;
  const PlanOutcome main = plan_dynamic_cp(input());
  ASSERT_EQ(main.status, "ok") << main.reason;
  auto cost = CostModel::create(cluster_);
  ASSERT_TRUE(cost.ok()) << cost.error_str();
  const EfficiencyParams& e = cost->params();
  auto host_s = [&](const FrameworkHostWork& w) { return (w.ops * e.host_op_us + w.syncs * e.pcie_latency_us) * 1e-6; };
  const double extra = dynamic.metrics.at("step_time_s") - packing.metrics.at("step_time_s");
  EXPECT_GE(extra, host_s(main.plan.host_per_step) - 1e-9);
  EXPECT_LE(extra, host_s(main.plan.host_per_step) + 8 * host_s(main.plan.host_per_micro_batch) + 1e-9);
  EXPECT_EQ(packing.metrics.at("micro_batches"), 8);
  EXPECT_EQ(dynamic.metrics.at("padding_fraction"), 0);
}

TEST_F(VarlenTest, DynamicCpBeatsStaticCpOnALongTail) {
  auto packing = run(plan_packing);
  auto dynamic = run(plan_dynamic_cp);
  ASSERT_EQ(packing.status, "ok") << packing.reason;
  ASSERT_EQ(dynamic.status, "ok") << dynamic.reason;
  // Same FLOPs counted (Megatron's definition is the batch's, not the plan's).
  EXPECT_EQ(packing.metrics.at("flops_per_iteration"), dynamic.metrics.at("flops_per_iteration"));
  EXPECT_GT(packing.metrics.at("exposed_cp_comm_s"), dynamic.metrics.at("exposed_cp_comm_s"));
  EXPECT_LT(dynamic.metrics.at("step_time_s"), packing.metrics.at("step_time_s"));
}

TEST_F(VarlenTest, InputsThatCannotBePlannedAreInfeasibleWithAReason) {
  layout_.max_seqlen_per_dp_cp_rank = 0;
  auto out = run(plan_packing);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("max_seqlen_per_dp_cp_rank is not set"), std::string::npos) << out.reason;
  layout_.max_seqlen_per_dp_cp_rank = 4096;  // 12000 tokens need 3 ranks' worth: cp 2 holds 8192
  out = run(plan_packing);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("12000"), std::string::npos) << out.reason;
  layout_.max_seqlen_per_dp_cp_rank = 8192;
  layout_.cp_comm_type = "a2a";  // Llama-2-7B's 32 heads do not split over a CP group of 64
  layout_.num_gpus = 128;
  layout_.cp = 64;
  out = run(plan_packing);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("cp_comm_type a2a needs the 32 query and 32 KV heads per TP rank to divide by the CP group size 64"),
            std::string::npos) << out.reason;
  layout_ = ParallelConfig{};
  layout_.num_gpus = 16;
  layout_.pp = 3;  // 32 layers do not split over 3 stages
  layout_.max_seqlen_per_dp_cp_rank = 8192;
  out = run(plan_dynamic_cp);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("layers 32 is not a multiple of pp·vp 3"), std::string::npos) << out.reason;
  layout_.pp = 2;
  layout_.max_seqlen_per_dp_cp_rank = 1024;  // 12000 tokens need cp 16 > the pool of 8
  out = run(plan_dynamic_cp);
  EXPECT_EQ(out.status, "infeasible");
  EXPECT_NE(out.reason.find("12000 tokens and needs CP size 16"), std::string::npos) << out.reason;
  EXPECT_NE(out.reason.find("group of 8 ranks"), std::string::npos) << out.reason;
}


// An attention micro-benchmark's static layout under a sparse mask: as shipped it prices the
// causal envelope; with attention_sparse_kernel only the mask's pairs, the same transfers.
TEST_F(VarlenTest, StaticLayoutsSkipMaskedWorkOnlyWithTheSparseKernel) {
  ParallelConfig p;
  p.num_gpus = p.cp = 4;
  p.attention_layout = "a2a+p2p";
  GlobalBatch b;
  b.lengths = {32768, 16384};  // far longer than lambda's 4096-token window
  b.mask = *mask_from_name("lambda");
  auto plan_with = [&](bool sparse_kernel) {
    p.attention_sparse_kernel = sparse_kernel;
    PlanOutcome o = plan_cp_attention(StrategyInput{cluster_, model_, p, b});
    EXPECT_EQ(o.status, "ok") << o.reason;
    return o.plan;
  };
  const Plan shipped = plan_with(false), sparse = plan_with(true);
  // a2a+p2p pads every sequence to a multiple of 2·cp: the micro-batch says so (padding_fraction).
  EXPECT_EQ(shipped.micro_batches[0][0].pad_to, 8);
  EXPECT_EQ(shipped.micro_batches[0][0].padded_tokens(), 32768 + 16384);
  const AttentionPlan &a = *shipped.micro_batches[0][0].attention, &s = *sparse.micro_batches[0][0].attention;
  EXPECT_TRUE(a.causal_envelope_work);
  EXPECT_FALSE(s.causal_envelope_work);
  EXPECT_EQ(forward_transfers(a), forward_transfers(s));
  int64_t envelope = 0, masked = 0;
  for (const AttnStage& st : a.stages)
    for (const auto& tiles : st.tiles)
      for (const AttnTile& t : tiles) {
        envelope += tile_work_pairs(a, t) * t.q.heads();  // the layout splits heads over ranks
        masked += tile_work_pairs(s, t) * t.q.heads();
      }
  int64_t allowed = 0;
  for (int64_t L : a.seq_lengths) allowed += mask_pairs(b.mask, L) * a.heads_q;
  EXPECT_EQ(masked, allowed);
  EXPECT_GT(envelope, 2 * masked);
}

// A layout without variable-length input (DCP §7's LoongTrain) pads every sequence to the batch's
// longest and computes the padding: the plan holds n sequences of the longest length rounded up to
// the layout's multiple, the micro-batch reports it as padding, and the causal work is n · M(M+1)/2.
TEST_F(VarlenTest, PaddingToTheLongestComputesThePadding) {
  ParallelConfig p;
  p.num_gpus = p.cp = 4;
  p.attention_layout = "double_ring";
  p.attention_a2a_size = 1;
  p.attention_ring_window = 2;
  GlobalBatch b;
  b.lengths = {1000, 37, 300};
  b.mask = MaskSpec{MaskKind::causal};
  p.attention_pad_to_longest = true;
  PlanOutcome padded = plan_cp_attention(StrategyInput{cluster_, model_, p, b});
  ASSERT_EQ(padded.status, "ok") << padded.reason;
  const PlanMicroBatch& mb = padded.plan.micro_batches[0][0];
  EXPECT_EQ(mb.pad_to, 1000);  // 1000 is already a multiple of 2·cp = 8
  EXPECT_EQ(mb.padded_tokens(), 3000);
  EXPECT_EQ(mb.attention->seq_lengths, (std::vector<int64_t>{1000, 1000, 1000}));
  int64_t pairs = 0;
  for (const AttnStage& st : mb.attention->stages)
    for (const auto& tiles : st.tiles)
      for (const AttnTile& t : tiles) pairs += tile_work_pairs(*mb.attention, t) * t.q.heads();
  EXPECT_EQ(pairs, 3 * mask_pairs(b.mask, 1000) * mb.attention->heads_q);
  p.attention_pad_to_longest = false;
  PlanOutcome varlen = plan_cp_attention(StrategyInput{cluster_, model_, p, b});
  ASSERT_EQ(varlen.status, "ok") << varlen.reason;
  EXPECT_EQ(varlen.plan.micro_batches[0][0].attention->seq_lengths, (std::vector<int64_t>{1000, 40, 304}));
}

// LoongTrain's reason for the double ring: across two 8-GPU nodes, with the inner ring on a node
// (window 4 of 2-rank head groups), every GPU of a node sends a piece of the outer step's K/V
// across at once, where the single ring sends a whole step's K/V from one GPU per node boundary.
// On a network-bound batch (many short sequences) the double ring is faster, moving the same bytes.
TEST_F(VarlenTest, DoubleRingUsesEveryNicOfANode) {
  ParallelConfig p;
  p.num_gpus = p.cp = 16;
  p.attention_layout = "a2a+p2p";
  p.attention_a2a_size = 2;
  GlobalBatch b;
  b.lengths.assign(64, 1024);
  b.mask = MaskSpec{MaskKind::causal};
  ModelShape m = model_;
  m.heads = 8;
  m.kv_heads = 2;
  m.hidden = 8 * 128;
  auto eval = [&] { return plan_and_evaluate(plan_cp_attention, StrategyInput{cluster_, m, p, b}, "megatron"); };
  const Evaluation single = eval();
  p.attention_layout = "double_ring";
  p.attention_ring_window = 4;
  const Evaluation dr = eval();
  ASSERT_EQ(single.status, "ok") << single.reason;
  ASSERT_EQ(dr.status, "ok") << dr.reason;
  EXPECT_DOUBLE_EQ(dr.metrics.at("cp_comm_bytes_network") + dr.metrics.at("cp_comm_bytes_nvlink"),
                   single.metrics.at("cp_comm_bytes_network") + single.metrics.at("cp_comm_bytes_nvlink"));
  EXPECT_LT(dr.metrics.at("attention_time_s"), 0.8 * single.metrics.at("attention_time_s"));
}

}  // namespace
}  // namespace cpbench
