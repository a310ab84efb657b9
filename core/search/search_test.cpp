// search_test.cpp — the configuration search: every combination accounted for once, the ranking
// by simulated step time, no better layout missed among those it could plan, pruning by a lower
// bound that gives the exhaustive search's top, and a result that does not depend on the number of
// threads.
#include "core/search/search.h"

#include <gtest/gtest.h>

#include "core/evaluate/evaluate.h"
#include "core/experiment/registry.h"
#include "core/sim/cp_attention.h"
#include "core/sim/memory.h"
#include "core/strategies/ptdp.h"

namespace cpbench {
namespace {

class SearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto dir = default_experiments_dir();
    cluster_ = *load_hardware(dir / "hardware" / "h800_kwai.json");
    model_ = *load_model(dir / "models" / "llama_7b_kwai.json");
    base_.num_gpus = 16;
    base_.distributed_optimizer = true;
    batch_.lengths.assign(64, 4096);
    space_.tp = {1, 2, 4};
    space_.cp = {1, 2};
    space_.pp = {1, 2, 4};
    space_.layers_per_virtual_stage = {0, 2};
    space_.recompute = {"none", "balanced", "full"};
    space_.offload_ratio = {0, 0.5};
  }
  ClusterSpec cluster_;
  ModelShape model_;
  ParallelConfig base_;
  GlobalBatch batch_;
  SearchSpace space_;
};

TEST_F(SearchTest, EveryCombinationIsCountedOnceAndTheTopIsTheFastestAtAnyThreadCount) {
  const SearchResult one = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 1000, {}, 1);
  EXPECT_EQ(one.enumerated, 3u * 2 * 3 * 2 * 3 * 2);
  EXPECT_EQ(one.enumerated, one.invalid + one.out_of_memory + one.infeasible + one.simulated);
  EXPECT_EQ(one.pruned, 0u);  // top_k above the count: nothing can be pruned
  ASSERT_EQ(one.top.size(), one.simulated);  // top_k above the count keeps every layout that ran
  // The lower bound the search prunes by never exceeds the simulated step, and is not vacuous.
  for (const SearchCandidate& c : one.top) {
    EXPECT_LE(c.metrics.at("step_time_lower_bound_s"), c.metrics.at("step_time_s")) << c.label();
    EXPECT_GT(c.metrics.at("step_time_lower_bound_s"), 0.5 * c.metrics.at("step_time_s")) << c.label();
  }
  ASSERT_GT(one.simulated, 5u);
  for (size_t i = 1; i < one.top.size(); ++i)
    EXPECT_LE(one.top[i - 1].metrics.at("step_time_s"), one.top[i].metrics.at("step_time_s"));
  // A layout priced directly is never faster than the search's best.
  ParallelConfig direct = base_;
  direct.tp = 2;
  direct.sequence_parallel = true;
  direct.pp = 2;
  direct.recompute = "full";
  const PlanOutcome planned = plan_ptdp(StrategyInput{cluster_, model_, direct, batch_});
  ASSERT_EQ(planned.status, "ok") << planned.reason;
  const Evaluation e = evaluate(EvalInput{cluster_, model_, batch_, "kwai", {}, {}, 0}, planned.plan);
  ASSERT_EQ(e.status, "ok") << e.reason;
  EXPECT_LE(one.top.front().metrics.at("step_time_s"), e.metrics.at("step_time_s"));
  // Top 3 on two threads: the exhaustive search's first three, in order, with the same metrics,
  // though most layouts were pruned by their bound rather than simulated; the same counts on one
  // thread.
  const SearchResult two = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 3, {}, 2);
  ASSERT_EQ(two.top.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(two.top[i].label(), one.top[i].label());
    EXPECT_EQ(two.top[i].metrics, one.top[i].metrics);
  }
  EXPECT_GT(two.pruned, two.simulated);
  EXPECT_EQ(two.simulated + two.pruned, one.simulated);
  EXPECT_EQ(two.enumerated, two.invalid + two.out_of_memory + two.infeasible + two.simulated + two.pruned);
  const SearchResult serial = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 3, {}, 1);
  EXPECT_EQ(serial.simulated, two.simulated);
  EXPECT_EQ(serial.pruned, two.pruned);
}

TEST_F(SearchTest, AVariableLengthBatchPrunesToTheExhaustiveTop) {
  // Sequences of 256 to 16K tokens packed into uneven micro-batches: pipelines stall on the long
  // ones, which a bound summing each stage's work alone misses. The bound the search prunes by
  // still never exceeds a simulated step, and the pruned search ranks as the exhaustive one does:
  // with the stack's flat fragmentation, and with the caching allocator replayed (which the bound
  // leaves out, and the simulations price).
  batch_.lengths.clear();
  for (int i = 0; i < 64; ++i) batch_.lengths.push_back(int64_t{256} << ((i * 5) % 7));
  space_.layers_per_virtual_stage = {0, 4};
  space_.offload_ratio = {0};
  for (AllocatorModel allocator : {AllocatorModel::flat_share, AllocatorModel::pytorch_caching}) {
    cluster_.memory.allocator = allocator;
    const SearchResult all = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 1000, {}, 2);
    ASSERT_GT(all.simulated, 10u);
    size_t piped = 0;
    for (const SearchCandidate& c : all.top) {
      EXPECT_LE(c.metrics.at("step_time_lower_bound_s"), c.metrics.at("step_time_s")) << c.label();
      if (c.layout.pp > 1) {
        ++piped;
        EXPECT_GT(c.metrics.at("step_time_lower_bound_s"), 0.8 * c.metrics.at("step_time_s")) << c.label();
      }
    }
    EXPECT_GT(piped, 5u);
    const SearchResult top = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 3, {}, 2);
    ASSERT_EQ(top.top.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(top.top[i].label(), all.top[i].label());
      EXPECT_EQ(top.top[i].metrics, all.top[i].metrics);
    }
    EXPECT_GT(top.pruned, 2 * top.simulated);
  }
}

TEST_F(SearchTest, SharedAttentionCostsAndAHandedMemoryEstimateChangeNoResult) {
  // Two layouts that pack the batch alike (CP 2, pipeline depth 1 and 2): with a shared memo the
  // second evaluation simulates no attention plan of its own, and both report exactly what they
  // report alone; so does a simulation given its bound's memory estimate (the caching allocator
  // replayed, the costly part of it).
  cluster_.memory.allocator = AllocatorModel::pytorch_caching;
  batch_.lengths.clear();
  for (int i = 0; i < 32; ++i) batch_.lengths.push_back(int64_t{512} << (i % 5));
  AttentionCostMemo memo;
  EvalInput shared{cluster_, model_, batch_, "kwai", {}, {}, 0};
  shared.attention_memo = &memo;
  const EvalInput alone{cluster_, model_, batch_, "kwai", {}, {}, 0};
  size_t after_first = 0;
  for (int64_t pp : {1, 2}) {
    ParallelConfig L = base_;
    L.cp = 2;
    L.pp = pp;
    L.recompute = "full";
    const PlanOutcome planned = plan_ptdp(StrategyInput{cluster_, model_, L, batch_});
    ASSERT_EQ(planned.status, "ok") << planned.reason;
    const Evaluation with = evaluate(shared, planned.plan), without = evaluate(alone, planned.plan);
    ASSERT_EQ(with.status, "ok") << with.reason;
    EXPECT_EQ(with.metrics, without.metrics) << "pp " << pp;
    std::optional<MemoryEstimate> memory;
    const Evaluation bound_with = evaluate_bound(shared, planned.plan, &memory), bound_without = evaluate_bound(alone, planned.plan);
    EXPECT_EQ(bound_with.metrics, bound_without.metrics) << "pp " << pp;
    // The bound's memory estimate, handed to the simulation (as the search does), changes nothing.
    ASSERT_TRUE(memory.has_value());
    EvalInput handed = alone;
    handed.memory = &*memory;
    EXPECT_EQ(evaluate(handed, planned.plan).metrics, without.metrics) << "pp " << pp;
    if (pp == 1) after_first = memo.size();
  }
  EXPECT_GT(after_first, 0u);
  // pp 2 halves DP: its micro-batches repack the batch and the memo learns only those that differ.
  EXPECT_LE(memo.size(), 2 * after_first);
}

TEST_F(SearchTest, TheBoundKnowsTheBytesAndMemoryTheSimulationReports) {
  // Layouts that exercise every byte count: TP, PP sends, CP, DP all-reduce and reduce-scatter,
  // the parameter gather at the end or overlapped, ZeRO-3's per-layer collectives and its tail.
  struct Case {
    int64_t t, c, p, vp;
    bool dist_opt, param_overlap, zero3;
    PlanOutcome (*plan)(const StrategyInput&);
  };
  const std::vector<Case> cases = {{2, 1, 2, 1, false, false, false, plan_ptdp}, {2, 2, 2, 4, true, false, false, plan_ptdp},
                                   {1, 1, 4, 2, true, true, false, plan_ptdp},  {2, 1, 1, 1, false, false, true, plan_zero3},
                                   {1, 2, 2, 1, false, false, true, plan_zero3},
                                   // DP×CP = 1: no gradient reduction, the optimizer after the last op's tail
                                   {16, 1, 1, 1, false, false, false, plan_ptdp},  {8, 1, 2, 1, true, false, false, plan_ptdp}};
  for (const Case& k : cases) {
    ParallelConfig L = base_;
    L.tp = k.t;
    L.cp = k.c;
    L.pp = k.p;
    L.vp = k.vp;
    L.sequence_parallel = k.t > 1;
    L.distributed_optimizer = k.dist_opt;
    L.overlap_param_gather = k.param_overlap;
    L.recompute = "full";
    const PlanOutcome planned = k.plan(StrategyInput{cluster_, model_, L, batch_});
    ASSERT_EQ(planned.status, "ok") << planned.reason;
    const EvalInput in{cluster_, model_, batch_, "kwai", {}, {}, 0};
    const Evaluation bound = evaluate_bound(in, planned.plan), sim = evaluate(in, planned.plan);
    ASSERT_EQ(bound.status, "ok") << bound.reason;
    ASSERT_EQ(sim.status, "ok") << sim.reason;
    for (const char* m : {"comm_bytes_nvlink", "comm_bytes_network", "comm_bytes_per_gpu", "peak_memory_gib"})
      EXPECT_DOUBLE_EQ(bound.metrics.at(m), sim.metrics.at(m)) << m << " t" << k.t << " c" << k.c << " p" << k.p;
    EXPECT_GT(bound.metrics.at("comm_bytes_per_gpu"), 0);
    // A layout with nothing to overlap (DP x CP = 1, pp 1) sums the same terms in another order:
    // equal up to rounding.
    EXPECT_LE(bound.metrics.at("step_time_lower_bound_s"), sim.metrics.at("step_time_s") * (1 + 1e-12));
  }
}

TEST_F(SearchTest, SearchStrategyPlansTheRankedLayoutAndSaysWhichItIs) {
  const SearchResult all = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 1000, {}, 2);
  ASSERT_GE(all.top.size(), 2u);
  SearchSpace second = space_;
  second.rank = 2;
  const PlanOutcome planned = plan_ptdp_search(StrategyInput{cluster_, model_, base_, batch_, &second});
  ASSERT_EQ(planned.status, "ok") << planned.reason;
  EXPECT_EQ(planned.plan.layout.tp, all.top[1].layout.tp);
  EXPECT_EQ(planned.plan.layout.pp, all.top[1].layout.pp);
  EXPECT_EQ(planned.plan.layout.recompute, all.top[1].layout.recompute);
  EXPECT_EQ(planned.reason.rfind("searched rank 2: " + all.top[1].label() + " (", 0), 0u) << planned.reason;
  // A rank past the layouts that run is infeasible, with the count.
  second.rank = static_cast<int64_t>(all.top.size()) + 1;
  const PlanOutcome past = plan_ptdp_search(StrategyInput{cluster_, model_, base_, batch_, &second});
  EXPECT_EQ(past.status, "infeasible");
  EXPECT_NE(past.reason.find("found " + std::to_string(all.top.size()) + " layouts that run"), std::string::npos) << past.reason;
  // The ranks of one search share it (the same counts: the deepest search kept, here the one that
  // ran every layout), and a different batch is searched anew: its rank 1 is its own search's
  // fastest.
  second.rank = 1;
  const PlanOutcome first = plan_ptdp_search(StrategyInput{cluster_, model_, base_, batch_, &second});
  ASSERT_EQ(first.status, "ok") << first.reason;
  auto counts = [](const std::string& reason) { return reason.substr(reason.rfind(" (")); };
  EXPECT_EQ(counts(first.reason), counts(past.reason));
  GlobalBatch other = batch_;
  other.lengths.assign(16, 16384);
  const PlanOutcome fresh = plan_ptdp_search(StrategyInput{cluster_, model_, base_, other, &second});
  const SearchResult direct = search_configurations(cluster_, model_, other, base_, "kwai", space_, 1, {}, 2);
  ASSERT_EQ(fresh.status, "ok") << fresh.reason;
  ASSERT_FALSE(direct.top.empty());
  EXPECT_EQ(fresh.reason.rfind("searched rank 1: " + direct.top[0].label() + " (", 0), 0u) << fresh.reason;
  EXPECT_NE(counts(fresh.reason), counts(first.reason));
}

TEST_F(SearchTest, OverlapAxesAreSearchedWhereTheyApply) {
  space_.tp_comm_overlap = {false, true};
  const SearchResult with = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 1000, {}, 2);
  space_.tp_comm_overlap = {};
  const SearchResult without = search_configurations(cluster_, model_, batch_, base_, "kwai", space_, 1000, {}, 2);
  // t = 1 layouts are tried once (the overlap needs TP); every t > 1 layout twice.
  size_t tp1 = 0;
  for (const auto& c : without.top) tp1 += c.layout.tp == 1;
  EXPECT_EQ(with.simulated, 2 * without.simulated - tp1);
  size_t overlapped = 0;
  for (const auto& c : with.top) {
    overlapped += c.layout.tp_comm_overlap;
    EXPECT_TRUE(!c.layout.tp_comm_overlap || c.layout.tp > 1) << c.label();
    // The label names every overlap the layout runs.
    EXPECT_EQ(c.label().find(" tp-overlap") != std::string::npos, c.layout.tp_comm_overlap) << c.label();
    EXPECT_EQ(c.label().find(" cp-overlap") != std::string::npos, c.layout.cp_comm_overlap && c.layout.cp > 1)
        << c.label();
  }
  EXPECT_EQ(overlapped, without.simulated - tp1);
  SearchCandidate kwai_cp;
  kwai_cp.layout = base_;
  kwai_cp.layout.cp = 2;
  kwai_cp.layout.cp_comm_overlap = true;
  EXPECT_NE(kwai_cp.label().find(" cp-overlap"), std::string::npos) << kwai_cp.label();
  kwai_cp.layout.cp = 1;  // nothing to overlap
  EXPECT_EQ(kwai_cp.label().find(" cp-overlap"), std::string::npos) << kwai_cp.label();
}

}  // namespace
}  // namespace cpbench
