// dynamic_cp_dev_test.cpp — Megatron-dev packing-aware Dynamic-CP scheduler: errors, hand-derived
// rounds (cap, smallest projected max, a short sample on a larger CP group, deferral, doubling and
// the full-group fallback), the properties on seeded dynamic_cp_github batches (each sequence once,
// aligned power-of-two groups that do not overlap, no idle rank, per-rank tokens ≤ max, work ≤ the
// round's cap), determinism, and the per-round balance against Megatron main's scheduler.
#include "core/strategies/dynamic_cp_dev.h"

#include <gtest/gtest.h>

#include "core/strategies/dynamic_cp_test_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>


namespace cpbench {
namespace {

using testing_util::github_batch;
using testing_util::is_pow2;

void expect_valid(const DynamicCpSchedule& s, const std::vector<int64_t>& lengths, int64_t ranks, int64_t max_seqlen) {
  std::vector<int64_t> tallest(s.rounds.size(), 0);
  std::vector<double> max_work(s.rounds.size(), 0);
  auto used = testing_util::expect_valid_schedule(s, lengths, ranks, max_seqlen, true, true, [&](size_t r, const DynamicCpGroup& g) {
    const double work = testing_util::sum_sq_per_rank(g, lengths);
    EXPECT_NEAR(g.work, work, 1e-9 * work);
    for (int64_t id : g.seq_ids) tallest[r] = std::max(tallest[r], lengths[static_cast<size_t>(id)]);
    max_work[r] = std::max(max_work[r], g.work);
  });
  for (size_t r = 0; r < used.size(); ++r) {
    EXPECT_EQ(used[r], ranks) << "idle ranks in round " << r;  // doubling or the full group fills all
    // [D1]: within the token budget no rank exceeds L_tall · max, the cap without its 5%.
    EXPECT_LE(max_work[r], static_cast<double>(tallest[r]) * static_cast<double>(max_seqlen) * (1 + 1e-12));
  }
}

// (max − min) / max over ranks of Σ L² / size in each round; idle ranks count as 0.
std::vector<double> round_imbalance(const DynamicCpSchedule& s, int64_t ranks) {
  std::vector<double> out;
  for (const DynamicCpRound& round : s.rounds) {
    std::vector<double> load(static_cast<size_t>(ranks), 0.0);
    for (const DynamicCpGroup& g : round.groups) {
      for (int64_t k = g.first_rank; k < g.first_rank + g.size; ++k) load[k] = g.work;
    }
    auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    out.push_back((*hi - *lo) / *hi);
  }
  return out;
}

TEST(DynamicCpDev, CapIsTallestTimesTheTokenBudgetPlusFivePercent) {
  EXPECT_DOUBLE_EQ(dynamic_cp_dev_round_cap(101, 100), 10605.0);
  // 131072 tokens at CP 2 fill their ranks: the cap is 1.05 × that sample's own load L² / 2.
  EXPECT_DOUBLE_EQ(dynamic_cp_dev_round_cap(131072, 65536), 1.05 * 131072.0 * 131072.0 / 2);
}

TEST(DynamicCpDev, BadInputIsAnErrorNamingTheSequence) {
  auto s = schedule_dynamic_cp_dev({1000, 300000}, 4, 65536);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error_str().find("sequence 1 has 300000 tokens and needs CP size 8"), std::string::npos) << s.error_str();
  // 6 ranks: the largest power-of-two group has 4 ranks.
  auto t = schedule_dynamic_cp_dev({5 * 65536}, 6, 65536);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error_str().find("sequence 0 has 327680 tokens"), std::string::npos) << t.error_str();
  EXPECT_TRUE(schedule_dynamic_cp_dev({4 * 65536}, 6, 65536).ok());
  auto u = schedule_dynamic_cp_dev({100, 0}, 4, 65536);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.error_str().find("sequence 1 has 0 tokens"), std::string::npos) << u.error_str();
  EXPECT_FALSE(schedule_dynamic_cp_dev({100}, 0, 65536).ok());
  EXPECT_FALSE(schedule_dynamic_cp_dev({100}, 4, 0).ok());
}

TEST(DynamicCpDev, HandDerivedRoundFollowsTheSmallestProjectedMax) {
  // 4 ranks, max 100 tokens per rank; cap = 1.05 · 101 · 100 = 10605.
  // s0 (101, cp_min 2) opens A = CP 2: load 101²/2 = 5100.5; max 5100.5.
  // s1 (100, cp_min 1): new CP-1 group → max(5100.5, 10000) = 10000; join A: 201 > 200 tokens;
  //   new CP-2 group → max(5100.5, 5000) = 5100.5, smaller: B = CP 2, load 5000. No rank is free.
  // s2 (60): join A → 5100.5 + 1800 = 6900.5; join B → 5000 + 1800 = 6800, smaller: B (160 tokens).
  // s3 (50): join A → max(6800, 5100.5 + 1250) = 6800; B would hold 210 > 200 tokens: A (151).
  // s4 (40): join A → 6350.5 + 800 = 7150.5; join B → 6800 + 800 = 7600: A (191 tokens).
  // One round, A laid out first (equal sizes keep opening order); every load ≤ the cap.
  const std::vector<int64_t> lengths = {101, 100, 60, 50, 40};
  auto s = schedule_dynamic_cp_dev(lengths, 4, 100);
  ASSERT_TRUE(s.ok()) << s.error_str();
  expect_valid(*s, lengths, 4, 100);
  ASSERT_EQ(s->rounds.size(), 1u);
  ASSERT_EQ(s->rounds[0].groups.size(), 2u);
  const DynamicCpGroup& a = s->rounds[0].groups[0];
  const DynamicCpGroup& b = s->rounds[0].groups[1];
  EXPECT_EQ(a.first_rank, 0);
  EXPECT_EQ(a.size, 2);
  EXPECT_EQ(a.seq_ids, (std::vector<int64_t>{0, 3, 4}));
  EXPECT_DOUBLE_EQ(a.work, 7150.5);
  EXPECT_EQ(b.first_rank, 2);
  EXPECT_EQ(b.size, 2);
  EXPECT_EQ(b.seq_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(b.work, 6800.0);
}

TEST(DynamicCpDev, ShortSampleJoinsTheLongGroupWhenNoRankIsFree) {
  // Megatron dev's own example: 6144 tokens need CP 2 on 2 ranks (max 4096); 2048 (cp_min 1)
  // finds no free rank and joins at CP 2: 3072 + 1024 = 4096 tokens per rank.
  auto s = schedule_dynamic_cp_dev({6144, 2048}, 2, 4096);
  ASSERT_TRUE(s.ok()) << s.error_str();
  ASSERT_EQ(s->rounds.size(), 1u);
  ASSERT_EQ(s->rounds[0].groups.size(), 1u);
  EXPECT_EQ(s->rounds[0].groups[0].size, 2);
  EXPECT_EQ(s->rounds[0].groups[0].seq_ids, (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ(s->rounds[0].groups[0].work, (6144.0 * 6144 + 2048.0 * 2048) / 2);
}

TEST(DynamicCpDev, SampleWithNoRoomIsDeferredAndShorterOnesStillJoin) {
  // 2 ranks, max 100. s0 (90) opens A on one rank (load 8100); s1 (90) cannot join A (180 > 100
  // tokens) and opens B on the last free rank. s2 (80) fits neither group and no rank is free:
  // deferred. s3 (10) joins A (100 tokens, max(8100, 8200) = 8200; B ties and comes later).
  // Round 2 holds s2 alone: its group doubles to both ranks, work 80² / 2 = 3200.
  const std::vector<int64_t> lengths = {90, 90, 80, 10};
  auto s = schedule_dynamic_cp_dev(lengths, 2, 100);
  ASSERT_TRUE(s.ok()) << s.error_str();
  expect_valid(*s, lengths, 2, 100);
  ASSERT_EQ(s->rounds.size(), 2u);
  ASSERT_EQ(s->rounds[0].groups.size(), 2u);
  EXPECT_EQ(s->rounds[0].groups[0].seq_ids, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(s->rounds[0].groups[0].first_rank, 0);
  EXPECT_DOUBLE_EQ(s->rounds[0].groups[0].work, 8200.0);
  EXPECT_EQ(s->rounds[0].groups[1].seq_ids, (std::vector<int64_t>{1}));
  ASSERT_EQ(s->rounds[1].groups.size(), 1u);
  EXPECT_EQ(s->rounds[1].groups[0].seq_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(s->rounds[1].groups[0].size, 2);
  EXPECT_DOUBLE_EQ(s->rounds[1].groups[0].work, 3200.0);
}

TEST(DynamicCpDev, IdleRanksDoubleTheSmallestGroupElseTakeTheFullGroup) {
  // One sequence on 4 ranks: 1 → 2 → 4 ranks, work L² / 4.
  auto s = schedule_dynamic_cp_dev({100}, 4, 65536);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->rounds[0].groups.size(), 1u);
  EXPECT_EQ(s->rounds[0].groups[0].size, 4);
  EXPECT_DOUBLE_EQ(s->rounds[0].groups[0].work, 2500.0);
  // 6 ranks, max 100: 300 tokens open a CP-4 group; 250 (cp_min 4) has no room and 2 free ranks
  // are too few: deferred. 2 ranks stay idle and CP 4 cannot double (8 > 4), so the round becomes
  // the full 6-rank group, first fit: 300 + 250 ≤ 600 tokens, both in one round.
  auto t = schedule_dynamic_cp_dev({300, 250}, 6, 100);
  ASSERT_TRUE(t.ok()) << t.error_str();
  expect_valid(*t, {300, 250}, 6, 100);
  ASSERT_EQ(t->rounds.size(), 1u);
  ASSERT_EQ(t->rounds[0].groups.size(), 1u);
  EXPECT_EQ(t->rounds[0].groups[0].size, 6);
  EXPECT_EQ(t->rounds[0].groups[0].seq_ids, (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ(t->rounds[0].groups[0].work, (90000.0 + 62500.0) / 6);
  // Megatron dev's own case: two 50-token samples on 14 ranks end on the full 14-rank group.
  auto u = schedule_dynamic_cp_dev({50, 50}, 14, 100);
  ASSERT_TRUE(u.ok());
  ASSERT_EQ(u->rounds.size(), 1u);
  ASSERT_EQ(u->rounds[0].groups.size(), 1u);
  EXPECT_EQ(u->rounds[0].groups[0].size, 14);
  EXPECT_EQ(u->rounds[0].groups[0].seq_ids, (std::vector<int64_t>{0, 1}));
}

TEST(DynamicCpDev, SampledBatchesSatisfyEveryProperty) {
  testing_util::for_each_sampled_setting([](const std::vector<int64_t>& lengths, int64_t ranks, int64_t max_seqlen) {
    auto s = schedule_dynamic_cp_dev(lengths, ranks, max_seqlen);
    ASSERT_TRUE(s.ok()) << s.error_str();
    expect_valid(*s, lengths, ranks, max_seqlen);
  });
}

TEST(DynamicCpDev, SameInputSamePlan) {
  const std::vector<int64_t> lengths = github_batch(11, 1024);
  auto x = schedule_dynamic_cp_dev(lengths, 64, 65536);
  auto y = schedule_dynamic_cp_dev(lengths, 64, 65536);
  ASSERT_TRUE(x.ok() && y.ok());
  testing_util::expect_same_schedule(*x, *y);
}

// Σ over rounds of the most-loaded rank's work: a barrier over DP×CP follows each round, so this
// is the attention critical path of the whole batch (ideal: Σ L² / ranks, no idle rank anywhere).
double critical_path_work(const DynamicCpSchedule& s) {
  double sum = 0;
  for (const DynamicCpRound& round : s.rounds) {
    double hi = 0;
    for (const DynamicCpGroup& g : round.groups) hi = std::max(hi, g.work);
    sum += hi;
  }
  return sum;
}

// The blog's batch shape (2048 sequences, max 65536 per rank) on 64 ranks, as planner_bench.cpp.
// Dev packs a round's sequences on a rank into one micro-batch, so a round holds at most the
// token budget per rank: 7–8 rounds, critical path 1.07–1.14 × ideal over seeds 1–10. Main runs
// them one by one and caps no round's tokens (as Megatron main's BalancedCPScheduler, which also
// forms 2 rounds on seed 1's batch, run with scripts/time_megatron_scheduler.py's stubs), so it
// forms 2–3 rounds and its critical path
// is 1.02–1.07 × ideal, below dev's on every seed. (Until session 36 main carried dev's per-round
// token cap: 9 rounds, 1.16 ×, above dev's.)
TEST(DynamicCpDev, BlogBatchRoundsFollowEachSchedulersTokenRule) {
  constexpr int64_t kRanks = 64, kMaxSeqlen = 65536;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<int64_t> lengths = github_batch(seed, 2048);
    const auto start = std::chrono::steady_clock::now();
    auto dev = schedule_dynamic_cp_dev(lengths, kRanks, kMaxSeqlen);
    const double dev_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    auto main = schedule_dynamic_cp_main(lengths, kRanks, kMaxSeqlen);
    ASSERT_TRUE(dev.ok() && main.ok());
    double ideal = 0;
    for (int64_t L : lengths) ideal += static_cast<double>(L) * static_cast<double>(L) / kRanks;
    const std::vector<double> dev_imbalance = round_imbalance(*dev, kRanks);
    const std::vector<double> main_imbalance = round_imbalance(*main, kRanks);
    const double dev_worst = *std::max_element(dev_imbalance.begin(), dev_imbalance.end());
    const double main_worst = *std::max_element(main_imbalance.begin(), main_imbalance.end());
    const double dev_path = critical_path_work(*dev) / ideal;
    const double main_path = critical_path_work(*main) / ideal;
    std::printf("seed %2llu  dev: %zu rounds, worst imbalance %.3f, critical path %.3f x ideal, %.2f ms  |  "
                "main: %zu rounds, worst imbalance %.3f, critical path %.3f x ideal\n",
                static_cast<unsigned long long>(seed), dev_imbalance.size(), dev_worst, dev_path, dev_ms,
                main_imbalance.size(), main_worst, main_path);
    // Dev's rounds hold at most the token budget per rank: the batch's tokens need at least
    // Σ L / (ranks · budget) of them; main's are not bounded so.
    double tokens = 0;
    for (int64_t L : lengths) tokens += static_cast<double>(L);
    EXPECT_GE(static_cast<double>(dev->rounds.size()), tokens / (kRanks * kMaxSeqlen));
    EXPECT_LT(main->rounds.size(), dev->rounds.size());
    EXPECT_LT(main_path, dev_path);
    EXPECT_LE(dev_path, 1.15);
    if (seed == 1) {
      RecordProperty("dev_worst_round_imbalance", std::to_string(dev_worst));
      RecordProperty("main_worst_round_imbalance", std::to_string(main_worst));
      RecordProperty("dev_plan_ms", std::to_string(dev_ms));
      EXPECT_LE(dev_worst, 0.35);
    }
  }
}

}  // namespace
}  // namespace cpbench
