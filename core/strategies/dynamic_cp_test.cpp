// dynamic_cp_test.cpp — Megatron-main Dynamic-CP scheduler: cp_min, errors, small exact cases,
// and the properties of issue 5 on seeded dynamic_cp_github batches (each sequence once, aligned
// power-of-two groups that do not overlap, per-rank tokens ≤ max_seqlen_per_dp_cp_rank,
// work = Σ L² / size, determinism).
#include "core/strategies/dynamic_cp.h"

#include <gtest/gtest.h>

#include "core/strategies/dynamic_cp_test_util.h"

namespace cpbench {
namespace {

using testing_util::github_batch;
using testing_util::is_pow2;

void expect_valid(const DynamicCpSchedule& s, const std::vector<int64_t>& lengths, int64_t ranks, int64_t max_seqlen) {
  auto used = testing_util::expect_valid_schedule(s, lengths, ranks, max_seqlen, false, false, [&](size_t, const DynamicCpGroup& g) {
    const double work = testing_util::sum_sq_per_rank(g, lengths);
    EXPECT_NEAR(g.work, work, 1e-9 * work);
  });
  for (size_t r = 0; r < used.size(); ++r)
    if (is_pow2(ranks)) EXPECT_EQ(used[r], ranks) << "idle ranks in round " << r;
}

TEST(DynamicCp, MinimumCpSizeIsTheNextPowerOfTwoOfTheRankCount) {
  EXPECT_EQ(dynamic_cp_min_cp_size(1, 65536), 1);
  EXPECT_EQ(dynamic_cp_min_cp_size(65536, 65536), 1);
  EXPECT_EQ(dynamic_cp_min_cp_size(65537, 65536), 2);
  EXPECT_EQ(dynamic_cp_min_cp_size(131072, 65536), 2);
  EXPECT_EQ(dynamic_cp_min_cp_size(131073, 65536), 4);
  EXPECT_EQ(dynamic_cp_min_cp_size(3 * 65536, 65536), 4);  // 2^ceil(log2 3) = 4
  EXPECT_EQ(dynamic_cp_min_cp_size(5 * 65536, 65536), 8);
}

TEST(DynamicCp, SequenceNeedingMoreRanksThanTheLargestGroupIsAnErrorNamingIt) {
  auto s = schedule_dynamic_cp_main({1000, 300000}, 4, 65536);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error_str().find("sequence 1 has 300000 tokens and needs CP size 8"), std::string::npos) << s.error_str();
  // 6 ranks: the largest power-of-two group has 4 ranks.
  EXPECT_FALSE(schedule_dynamic_cp_main({5 * 65536}, 6, 65536).ok());
  EXPECT_TRUE(schedule_dynamic_cp_main({4 * 65536}, 6, 65536).ok());
  EXPECT_FALSE(schedule_dynamic_cp_main({100}, 0, 65536).ok());
  EXPECT_FALSE(schedule_dynamic_cp_main({0}, 4, 65536).ok());
}

TEST(DynamicCp, EqualShortSequencesGetOneRankEach) {
  auto s = schedule_dynamic_cp_main({100, 100, 100, 100}, 4, 65536);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->rounds.size(), 1u);
  ASSERT_EQ(s->rounds[0].groups.size(), 4u);
  for (int64_t g = 0; g < 4; ++g) {
    EXPECT_EQ(s->rounds[0].groups[g].first_rank, g);
    EXPECT_EQ(s->rounds[0].groups[g].size, 1);
    EXPECT_EQ(s->rounds[0].groups[g].seq_ids, (std::vector<int64_t>{g}));
    EXPECT_DOUBLE_EQ(s->rounds[0].groups[g].work, 10000.0);
  }
}

TEST(DynamicCp, IdleRanksAreFilledByDoublingTheSmallestGroup) {
  // One sequence on 4 ranks: its group doubles 1 → 2 → 4, so its work is L² / 4.
  auto s = schedule_dynamic_cp_main({100}, 4, 65536);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->rounds.size(), 1u);
  ASSERT_EQ(s->rounds[0].groups.size(), 1u);
  EXPECT_EQ(s->rounds[0].groups[0].size, 4);
  EXPECT_DOUBLE_EQ(s->rounds[0].groups[0].work, 2500.0);
  // A CP-2 sequence and a short one on 4 ranks: the short one's group doubles to 2 ranks and is
  // laid out after the CP-2 group.
  auto t = schedule_dynamic_cp_main({1000, 100000}, 4, 65536);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->rounds.size(), 1u);
  ASSERT_EQ(t->rounds[0].groups.size(), 2u);
  EXPECT_EQ(t->rounds[0].groups[0].seq_ids, (std::vector<int64_t>{1}));
  EXPECT_EQ(t->rounds[0].groups[0].first_rank, 0);
  EXPECT_EQ(t->rounds[0].groups[1].seq_ids, (std::vector<int64_t>{0}));
  EXPECT_EQ(t->rounds[0].groups[1].first_rank, 2);
  EXPECT_EQ(t->rounds[0].groups[1].size, 2);
}

// No cap on a round's tokens per rank: as Megatron main's BalancedCPScheduler, which runs a
// group's sequences one by one, a rank may hold several sequences of the cap in a round. Each
// case is what Megatron's own scheduler forms on these lengths (megatron-core 0.16.1, run with
// scripts/time_megatron_scheduler.py's stubs): per round, each rank's sequences.
TEST(DynamicCp, RoundsAreMegatronMainsWithoutATokenCap) {
  auto per_rank = [](const DynamicCpSchedule& s, int64_t ranks) {
    std::vector<std::vector<std::vector<int64_t>>> out;
    for (const DynamicCpRound& r : s.rounds) {
      std::vector<std::vector<int64_t>> ids(static_cast<size_t>(ranks));
      for (const DynamicCpGroup& g : r.groups)
        for (int64_t q = g.first_rank; q < g.first_rank + g.size; ++q) ids[static_cast<size_t>(q)] = g.seq_ids;
      out.push_back(ids);
    }
    return out;
  };
  using Rounds = std::vector<std::vector<std::vector<int64_t>>>;
  const std::vector<int64_t> two(2, 65536), three(3, 65536), five(5, 65536), mixed = {65536, 65536, 65536, 1000, 1000};
  auto a = schedule_dynamic_cp_main(two, 2, 65536);
  auto b = schedule_dynamic_cp_main(three, 2, 65536);
  auto c = schedule_dynamic_cp_main(five, 2, 65536);
  auto d = schedule_dynamic_cp_main(mixed, 4, 65536);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  expect_valid(*c, five, 2, 65536);
  EXPECT_EQ(per_rank(*a, 2), (Rounds{{{0}, {1}}}));
  EXPECT_EQ(per_rank(*b, 2), (Rounds{{{0}, {1}}, {{2}, {2}}}));  // the last doubled onto both ranks
  EXPECT_EQ(per_rank(*c, 2), (Rounds{{{0, 2}, {1, 3}}, {{4}, {4}}}));
  EXPECT_EQ(per_rank(*d, 4), (Rounds{{{0}, {1}, {2}, {3, 4}}}));
}

TEST(DynamicCp, SampledBatchesSatisfyEveryProperty) {
  testing_util::for_each_sampled_setting([](const std::vector<int64_t>& lengths, int64_t ranks, int64_t max_seqlen) {
    auto s = schedule_dynamic_cp_main(lengths, ranks, max_seqlen);
    ASSERT_TRUE(s.ok()) << s.error_str();
    expect_valid(*s, lengths, ranks, max_seqlen);
  });
}

TEST(DynamicCp, SameInputSamePlan) {
  const std::vector<int64_t> lengths = github_batch(11, 1024);
  auto x = schedule_dynamic_cp_main(lengths, 64, 65536);
  auto y = schedule_dynamic_cp_main(lengths, 64, 65536);
  ASSERT_TRUE(x.ok() && y.ok());
  testing_util::expect_same_schedule(*x, *y);
}

}  // namespace
}  // namespace cpbench
