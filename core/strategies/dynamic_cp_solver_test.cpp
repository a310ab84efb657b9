// dynamic_cp_solver_test.cpp — the Dynamic-CP blog's solver: the per-sequence FLOPs formula on hand-computed
// Llama-13B numbers, errors naming the sequence, small exact cases, and on the blog's batch shape
// (2048 dynamic_cp_github sequences, 64 ranks, 65536 tokens per rank, PP 8): every sequence once,
// aligned non-overlapping power-of-two groups, per-rank tokens bound, m ∈ 8·{1..6} with m rounds,
// work = Σ cost / size, the predicted step, balance across ranks, determinism and planning time.
#include "core/strategies/dynamic_cp_solver.h"

#include <gtest/gtest.h>

#include "core/strategies/dynamic_cp_test_util.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/workload/length_profile.h"
#include "core/workload/sampling.h"

namespace cpbench {
namespace {

// The blog's benchmark shape (references/context_parallel.md): h 5120, ffn 13824, 40 heads (MHA).
ModelShape llama13b() {
  ModelShape m;
  m.name = "llama_13b_dynamic_cp";
  m.layers = 40;
  m.hidden = 5120;
  m.heads = 40;
  m.kv_heads = 40;
  m.ffn_hidden = 13824;
  m.gated_mlp = true;
  m.vocab = 32000;
  return m;
}

using testing_util::github_batch;

DynamicCpSolverOptions blog_options() {
  DynamicCpSolverOptions o;
  o.ranks = 64;
  o.max_seqlen_per_dp_cp_rank = 65536;
  o.pp = 8;
  o.full_recompute = true;
  return o;
}

// Checks the schedule's contract and returns each rank's Σ per-rank cost over all rounds.
std::vector<double> expect_valid(const DynamicCpSolverResult& r, const std::vector<int64_t>& lengths, const ModelShape& model,
                                 const DynamicCpSolverOptions& opt) {
  std::vector<double> rank_cost(static_cast<size_t>(opt.ranks), 0.0);
  EXPECT_EQ(static_cast<int64_t>(r.schedule.rounds.size()), r.micro_batches);
  testing_util::expect_valid_schedule(r.schedule, lengths, opt.ranks, opt.max_seqlen_per_dp_cp_rank, false, true,
                                      [&](size_t, const DynamicCpGroup& g) {
                                        double cost = 0;
                                        for (int64_t id : g.seq_ids)
                                          cost += dynamic_cp_sequence_flops(lengths[static_cast<size_t>(id)], model,
                                                                     opt.full_recompute).total();
                                        EXPECT_NEAR(g.work, cost / static_cast<double>(g.size), 1e-9 * g.work);
                                        for (int64_t k = g.first_rank; k < g.first_rank + g.size; ++k)
                                          rank_cost[k] += g.work;
                                      });
  return rank_cost;
}

TEST(DynamicCpSolver, SequenceFlopsMatchTheBlogFormulaForLlama13B) {
  // s = 4096, h = 5120, ffn = 13824, MHA (groups 1), gated MLP, computed by hand:
  // gemm = 2·4096·5120² = 214,748,364,800; attention = 2·2·4096²·5120·0.5 = 171,798,691,840;
  // QKV = 3·gemm = 644,245,094,400; out = gemm; MLP = 2·s·h·2·ffn + 2·s·ffn·h = 6·s·h·ffn =
  // 1,739,461,754,880; linear = 2,598,455,214,080; forward = 2,770,253,905,920;
  // backward = 2.77·attention + 2.7·linear = 475,882,376,396.8 + 7,015,829,078,016.
  const DynamicCpSequenceFlops f = dynamic_cp_sequence_flops(4096, llama13b(), false);
  EXPECT_DOUBLE_EQ(f.attention_forward, 171798691840.0);
  EXPECT_DOUBLE_EQ(f.linear_forward, 2598455214080.0);
  EXPECT_DOUBLE_EQ(f.forward, 2770253905920.0);
  EXPECT_DOUBLE_EQ(f.backward, 7491711454412.8);
  EXPECT_DOUBLE_EQ(f.recompute, 0.0);
  EXPECT_DOUBLE_EQ(f.total(), 10261965360332.8);
  const DynamicCpSequenceFlops r = dynamic_cp_sequence_flops(4096, llama13b(), true);
  EXPECT_DOUBLE_EQ(r.recompute, 2770253905920.0);  // full recompute adds one forward
  EXPECT_DOUBLE_EQ(r.total(), 13032219266252.8);
}

TEST(DynamicCpSolver, GqaScalesOnlyTheKvProjectionsAndAnUngatedMlpHasTwoMatrices) {
  ModelShape m = llama13b();
  m.kv_heads = 8;        // groups = 5: QKV = gemm·(1 + 2/5) = 300,647,710,720
  m.gated_mlp = false;   // MLP = 4·s·h·ffn = 1,159,641,169,920
  const DynamicCpSequenceFlops f = dynamic_cp_sequence_flops(4096, m, false);
  EXPECT_DOUBLE_EQ(f.linear_forward, 300647710720.0 + 214748364800.0 + 1159641169920.0);
  EXPECT_DOUBLE_EQ(f.attention_forward, 171798691840.0);  // the s² term does not depend on groups
  // Attention grows as s², the rest as s: doubling s multiplies them by 4 and 2.
  const DynamicCpSequenceFlops d = dynamic_cp_sequence_flops(8192, m, false);
  EXPECT_DOUBLE_EQ(d.attention_forward, 4 * f.attention_forward);
  EXPECT_DOUBLE_EQ(d.linear_forward, 2 * f.linear_forward);
}

TEST(DynamicCpSolver, InvalidInputIsAnErrorNamingTheProblem) {
  DynamicCpSolverOptions o;
  o.ranks = 4;
  o.max_seqlen_per_dp_cp_rank = 65536;
  auto too_long = solve_dynamic_cp({1000, 300000}, llama13b(), o);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.error_str().find("sequence 1 has 300000 tokens and needs CP size 8"), std::string::npos)
      << too_long.error_str();
  auto zero = solve_dynamic_cp({100, 0}, llama13b(), o);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error_str().find("sequence 1 has 0 tokens"), std::string::npos) << zero.error_str();
  EXPECT_FALSE(solve_dynamic_cp({}, llama13b(), o).ok());
  ModelShape bad = llama13b();
  bad.kv_heads = 7;
  auto gqa = solve_dynamic_cp({100}, bad, o);
  ASSERT_FALSE(gqa.ok());
  EXPECT_NE(gqa.error_str().find("heads (40) must be a multiple of kv_heads (7)"), std::string::npos);
  o.ranks = 0;
  EXPECT_NE(solve_dynamic_cp({100}, llama13b(), o).error_str().find("ranks (dp·cp) must be ≥ 1, got 0"),
            std::string::npos);
}

TEST(DynamicCpSolver, NoFeasibleMicroBatchCountIsAnErrorNamingTheSequence) {
  // One rank of 100 tokens, three sequences of 60: m_lo = ⌈180 / 100⌉ = 2, only m = 2 is tried,
  // and the third sequence fits in neither bucket.
  DynamicCpSolverOptions o;
  o.ranks = 1;
  o.max_seqlen_per_dp_cp_rank = 100;
  o.max_microbatch_factor = 1;
  auto r = solve_dynamic_cp({60, 60, 60}, llama13b(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error_str().find("no micro-batch count in {2}"), std::string::npos) << r.error_str();
  EXPECT_NE(r.error_str().find("sequence 2 (60 tokens) fits in no rank slot of the 2 micro-batches"),
            std::string::npos)
      << r.error_str();
  o.max_microbatch_factor = 2;  // m = 3 holds one sequence per round
  auto ok = solve_dynamic_cp({60, 60, 60}, llama13b(), o);
  ASSERT_TRUE(ok.ok()) << ok.error_str();
  EXPECT_EQ(ok->micro_batches, 3);
}

TEST(DynamicCpSolver, EqualShortSequencesGetOneRankEachInOneRound) {
  DynamicCpSolverOptions o;
  o.ranks = 4;
  o.max_seqlen_per_dp_cp_rank = 65536;
  const std::vector<int64_t> lengths{100, 100, 100, 100};
  auto r = solve_dynamic_cp(lengths, llama13b(), o);
  ASSERT_TRUE(r.ok()) << r.error_str();
  // pp = 1: no bubble, every m ∈ {1..6} predicts the same step; ties go to the smaller m.
  EXPECT_EQ(r->micro_batches, 1);
  ASSERT_EQ(r->schedule.rounds.size(), 1u);
  ASSERT_EQ(r->schedule.rounds[0].groups.size(), 4u);
  for (int64_t g = 0; g < 4; ++g) {
    EXPECT_EQ(r->schedule.rounds[0].groups[g].first_rank, g);
    EXPECT_EQ(r->schedule.rounds[0].groups[g].size, 1);
    EXPECT_EQ(r->schedule.rounds[0].groups[g].seq_ids, std::vector<int64_t>{g});
  }
  EXPECT_DOUBLE_EQ(r->predicted_time_units, dynamic_cp_sequence_flops(100, llama13b(), false).total());
  expect_valid(*r, lengths, llama13b(), o);
}

TEST(DynamicCpSolver, LongSampleGetsContextParallelismEvenWhenItFitsOneRank) {
  // 8 ranks; one 60K-token sequence among 63 of 1K. It fits one rank's memory (cp_min = 1), but
  // its forward FLOPs are far above 1.3 × the mean bucket target, so it gets a power-of-two CP
  // size that brings its per-rank forward under 1.3 × target (or the cap of 8 ranks).
  DynamicCpSolverOptions o;
  o.ranks = 8;
  o.max_seqlen_per_dp_cp_rank = 65536;
  std::vector<int64_t> lengths(64, 1000);
  lengths[0] = 60000;
  ASSERT_EQ(dynamic_cp_min_cp_size(60000, 65536), 1);
  auto r = solve_dynamic_cp(lengths, llama13b(), o);
  ASSERT_TRUE(r.ok()) << r.error_str();
  expect_valid(*r, lengths, llama13b(), o);
  int64_t cp = 0;
  for (const DynamicCpRound& round : r->schedule.rounds) {
    for (const DynamicCpGroup& g : round.groups) {
      if (std::find(g.seq_ids.begin(), g.seq_ids.end(), 0) != g.seq_ids.end()) cp = g.size;
    }
  }
  EXPECT_GT(cp, 1);
  // A sequence above the memory bound needs CP whatever its FLOPs: 100K tokens at 65536 → ≥ 2.
  lengths[0] = 100000;
  auto forced = solve_dynamic_cp(lengths, llama13b(), o);
  ASSERT_TRUE(forced.ok()) << forced.error_str();
  expect_valid(*forced, lengths, llama13b(), o);
}

TEST(DynamicCpSolver, ShortSequenceWithNoRoomOnAnyRankJoinsACpGroupWithRoom) {
  // 2 ranks of 100 tokens, m = 2 (m_lo = ⌈370 / 200⌉ = 2, one candidate): sequence 0 (150 tokens)
  // needs CP 2 and takes round 0; the two 90s fill round 1; the 40 fits no size-1 slot (90 + 40 >
  // 100) but fits the CP group (150 + 40 ≤ 2 · 100), so it runs there at CP 2.
  DynamicCpSolverOptions o;
  o.ranks = 2;
  o.max_seqlen_per_dp_cp_rank = 100;
  o.max_microbatch_factor = 1;
  const std::vector<int64_t> lengths{150, 90, 90, 40};
  auto r = solve_dynamic_cp(lengths, llama13b(), o);
  ASSERT_TRUE(r.ok()) << r.error_str();
  ASSERT_EQ(r->micro_batches, 2);
  expect_valid(*r, lengths, llama13b(), o);
  ASSERT_EQ(r->schedule.rounds[0].groups.size(), 1u);
  EXPECT_EQ(r->schedule.rounds[0].groups[0].size, 2);
  EXPECT_EQ(r->schedule.rounds[0].groups[0].seq_ids, (std::vector<int64_t>{0, 3}));
  ASSERT_EQ(r->schedule.rounds[1].groups.size(), 2u);
  EXPECT_EQ(r->schedule.rounds[1].groups[0].seq_ids, std::vector<int64_t>{1});
  EXPECT_EQ(r->schedule.rounds[1].groups[1].seq_ids, std::vector<int64_t>{2});
}

// Each rank's per-round cost, [rank][round] (0 where the rank idles in that round).
std::vector<std::vector<double>> round_costs(const DynamicCpSolverResult& r, int64_t ranks) {
  std::vector<std::vector<double>> cost(static_cast<size_t>(ranks), std::vector<double>(r.schedule.rounds.size(), 0.0));
  for (size_t i = 0; i < r.schedule.rounds.size(); ++i) {
    for (const DynamicCpGroup& g : r.schedule.rounds[i].groups) {
      for (int64_t k = g.first_rank; k < g.first_rank + g.size; ++k) cost[static_cast<size_t>(k)][i] = g.work;
    }
  }
  return cost;
}

TEST(DynamicCpSolver, PredictedStepIsTheBusiestRanksRoundsPlusTheFillPacedByItsHeaviestRound) {
  // PP 4 with 2 virtual chunks: predicted = max over ranks of Σ its rounds + 3/2 · its heaviest
  // round; m ∈ 4·{1..6}.
  const std::vector<int64_t> lengths = github_batch(7, 256);
  DynamicCpSolverOptions o;
  o.ranks = 16;
  o.max_seqlen_per_dp_cp_rank = 65536;
  o.pp = 4;
  o.vp = 2;
  auto r = solve_dynamic_cp(lengths, llama13b(), o);
  ASSERT_TRUE(r.ok()) << r.error_str();
  const std::vector<double> rank_cost = expect_valid(*r, lengths, llama13b(), o);
  EXPECT_EQ(r->micro_batches % 4, 0);
  EXPECT_LE(r->micro_batches, 24);
  double predicted = 0;
  const auto cost = round_costs(*r, o.ranks);
  for (size_t k = 0; k < cost.size(); ++k) {
    const double heaviest = *std::max_element(cost[k].begin(), cost[k].end());
    predicted = std::max(predicted, rank_cost[k] + 1.5 * heaviest);
  }
  EXPECT_NEAR(r->predicted_time_units, predicted, 1e-9 * predicted);
}

TEST(DynamicCpSolver, EachRanksMicroBatchesComeOutEvenSoNoneStallsThePipeline) {
  // 1F1B's fill and drain are paced by a rank's heaviest micro-batch, so the solver packs each
  // rank's buckets evenly by FLOPs. A sample is at most 1.3 × the bucket target (else it is long
  // and gets CP), which bounds the heaviest round near 1.3 × the mean: measured 1.25–1.30 on
  // seeds 1–5 of both blog datasets. The round-raise-first rule this replaced ratcheted a few
  // rounds up to the token cap: 3.7–11.5 × the mean, with up to 37 of 48 rounds left empty.
  for (const auto& [dataset, ranks] : {std::pair<const char*, int64_t>{"dynamic_cp_commoncrawl", 8},
                                       {"dynamic_cp_github", 64}}) {
    auto profile = load_length_profile(std::string(CPBENCH_SOURCE_DIR "/experiments/datasets/") + dataset + ".json");
    ASSERT_TRUE(profile.ok()) << profile.error_str();
    const std::vector<int64_t> lengths = sample_lengths(*profile, 1, 2048, 256, 131072);
    DynamicCpSolverOptions o = blog_options();
    o.ranks = ranks;
    auto r = solve_dynamic_cp(lengths, llama13b(), o);
    ASSERT_TRUE(r.ok()) << r.error_str();
    expect_valid(*r, lengths, llama13b(), o);
    SCOPED_TRACE(dataset);
    for (const DynamicCpRound& round : r->schedule.rounds) EXPECT_FALSE(round.groups.empty());
    for (const std::vector<double>& rounds : round_costs(*r, ranks)) {
      const double mean = std::accumulate(rounds.begin(), rounds.end(), 0.0) / static_cast<double>(rounds.size());
      EXPECT_LE(*std::max_element(rounds.begin(), rounds.end()), 1.35 * mean);
    }
  }
}

TEST(DynamicCpSolver, BlogBatchIsAValidBalancedScheduleOfPpTimesKRounds) {
  const std::vector<int64_t> lengths = github_batch(1, 2048);
  const ModelShape model = llama13b();
  const DynamicCpSolverOptions o = blog_options();
  const auto start = std::chrono::steady_clock::now();
  auto r = solve_dynamic_cp(lengths, model, o);
  const double plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.error_str();
  const std::vector<double> rank_cost = expect_valid(*r, lengths, model, o);

  // m ∈ PP × {1..6} (the blog's search; k0 = 1 since 2048 sequences fit 8 rounds of 64 × 65536).
  EXPECT_EQ(r->micro_batches % o.pp, 0);
  EXPECT_GE(r->micro_batches, o.pp);
  EXPECT_LE(r->micro_batches, 6 * o.pp);

  const double busiest = *std::max_element(rank_cost.begin(), rank_cost.end());
  const double mean = std::accumulate(rank_cost.begin(), rank_cost.end(), 0.0) / static_cast<double>(o.ranks);
  const double m = static_cast<double>(r->micro_batches);
  EXPECT_GE(r->predicted_time_units, busiest * (m + 7) / m * (1 - 1e-9));  // equal rounds at best

  int64_t cp_groups = 0;
  for (const DynamicCpRound& round : r->schedule.rounds) {
    for (const DynamicCpGroup& g : round.groups) cp_groups += g.size > 1 ? 1 : 0;
  }
  EXPECT_GT(cp_groups, 0);  // 2.4% of the draws are 131072 tokens and need CP ≥ 2

  // Per-round view: Σ over rounds of the busiest rank, over the mean rank's total — the step if
  // every round ended in a barrier (Megatron main) instead of flowing through the pipeline.
  double barrier_sum = 0;
  for (const DynamicCpRound& round : r->schedule.rounds) {
    double busiest_in_round = 0;
    for (const DynamicCpGroup& g : round.groups) busiest_in_round = std::max(busiest_in_round, g.work);
    barrier_sum += busiest_in_round;
  }
  const double imbalance = busiest / mean;
  RecordProperty("micro_batches", std::to_string(r->micro_batches));
  RecordProperty("rank_imbalance", std::to_string(imbalance));
  RecordProperty("round_barrier_imbalance", std::to_string(barrier_sum / mean));
  RecordProperty("plan_ms", std::to_string(plan_ms));
  std::printf("m = %lld, CP groups %lld, max/mean rank cost %.4f, Σ round max / mean %.4f, plan %.1f ms\n",
              static_cast<long long>(r->micro_batches), static_cast<long long>(cp_groups), imbalance,
              barrier_sum / mean, plan_ms);
  // Short sequences are placed by LPT over ranks, so (Graham) the busiest rank exceeds the mean by
  // at most its last sequence, whose forward is ≤ 1.3 × the bucket target = 1.3 · mean / m. The
  // last sequences placed are the shortest (256 tokens), so in practice the excess is far smaller:
  // measured 1.0001 on seeds 1–5 (and ≤ 1.007 on the CommonCrawl, Wikipedia and lognormal presets).
  EXPECT_LE(imbalance, 1.0 + 1.3 / m);
  EXPECT_LE(imbalance, 1.005);
  // The per-round view is not what the solver optimises; measured 1.076 (m = 48). Bound: 1.15.
  EXPECT_LE(barrier_sum / mean, 1.15);
  EXPECT_LT(plan_ms, 1000.0);  // target ≲ 50 ms in Release; loose here for shared, debug machines

  auto again = solve_dynamic_cp(lengths, model, o);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->schedule.rounds.size(), r->schedule.rounds.size());
  for (size_t i = 0; i < r->schedule.rounds.size(); ++i) {
    const auto& a = r->schedule.rounds[i].groups;
    const auto& b = again->schedule.rounds[i].groups;
    ASSERT_EQ(a.size(), b.size());
    for (size_t g = 0; g < a.size(); ++g) {
      EXPECT_EQ(a[g].first_rank, b[g].first_rank);
      EXPECT_EQ(a[g].seq_ids, b[g].seq_ids);
    }
  }
}

}  // namespace
}  // namespace cpbench
