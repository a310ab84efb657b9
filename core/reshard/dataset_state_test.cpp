// dataset_state_test.cpp — the dataset state across a change of data parallelism: every sample of
// the epoch is read exactly once over the steps before and after, in the epoch's order, with the
// same global batch per step; a global batch that does not split is an error.
#include "core/reshard/dataset_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace cpbench {
namespace {

TEST(DatasetState, ResumesMidEpochWithoutRepeatingOrSkipping) {
  const DatasetState start{1000, 7, 48, 0, 4};
  for (int64_t new_dp : {1, 2, 3, 6, 8, 12}) {
    std::vector<int64_t> read;
    // 9 steps on 4 ranks, then the change, then the rest of the epoch on new_dp ranks.
    for (int64_t d = 0; d < 4; ++d) {
      const auto s = rank_samples(start, d, 9);
      EXPECT_EQ(s.size(), 9u * 12);
      read.insert(read.end(), s.begin(), s.end());
    }
    auto after = repartition(advance(start, 9), new_dp);
    ASSERT_TRUE(after.ok()) << after.error_str();
    EXPECT_EQ(after->consumed, 9 * 48);
    EXPECT_EQ(after->global_batch, 48);
    const int64_t steps = (1000 - after->consumed + 47) / 48;
    for (int64_t d = 0; d < new_dp; ++d) {
      const auto s = rank_samples(*after, d, steps);
      read.insert(read.end(), s.begin(), s.end());
    }
    std::vector<int64_t> sorted = read;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(sorted.size(), 1000u) << "dp 4 → " << new_dp;
    for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[i], i);
    // Each step after the change reads the next 48 samples of the epoch's order, as before it.
    const auto order = epoch_order(1000, 7);
    std::set<int64_t> step10, want;
    for (int64_t d = 0; d < new_dp; ++d)
      for (int64_t x : rank_samples(*after, d, 1)) step10.insert(x);
    for (int64_t i = 9 * 48; i < 10 * 48; ++i) want.insert(order[i]);
    EXPECT_EQ(step10, want);
  }
  EXPECT_FALSE(repartition(start, 5).ok());
  EXPECT_NE(epoch_order(100, 1), epoch_order(100, 2));
  EXPECT_EQ(epoch_order(100, 1), epoch_order(100, 1));
}

}  // namespace
}  // namespace cpbench
