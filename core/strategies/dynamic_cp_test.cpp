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

TEST(DynamicCp, GroupsStayWithinTheTokenBudgetSoLongSequencesNeedMoreRounds) {
  // Two 65536-token sequences cannot share one rank (2·65536 > 65536): two groups, one round.
  auto s = schedule_dynamic_cp_main({65536, 65536}, 2, 65536);
  ASSERT_TRUE(s.ok());
  expect_valid(*s, {65536, 65536}, 2, 65536);
  ASSERT_EQ(s->rounds.size(), 1u);
  EXPECT_EQ(s->rounds[0].groups.size(), 2u);
  // Three on 2 ranks: the third waits for a second round.
  auto t = schedule_dynamic_cp_main({65536, 65536, 65536}, 2, 65536);
  ASSERT_TRUE(t.ok());
  expect_valid(*t, {65536, 65536, 65536}, 2, 65536);
  EXPECT_EQ(t->rounds.size(), 2u);
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
