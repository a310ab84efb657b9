// dynamic_cp_schedule_test.cpp — check_dynamic_cp_round names what is wrong with a Dynamic-CP round.
#include "core/plan/dynamic_cp_schedule.h"

#include <gtest/gtest.h>

namespace cpbench {
namespace {

TEST(DynamicCpSchedule, CheckNamesGroupProblems) {
  DynamicCpRound ok;
  ok.groups = {{0, 2, {0, 2}, 0}, {2, 1, {1}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(ok, 4, 3), "");
  DynamicCpRound overlap;
  overlap.groups = {{0, 2, {0}, 0}, {1, 2, {1}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(overlap, 4, 8), "group 1 (ranks [1, 3)) overlaps group 0 (ranks [0, 2)) at rank 1");
  DynamicCpRound beyond;
  beyond.groups = {{0, 2, {0}, 0}, {2, 4, {1}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(beyond, 4, 8), "group 1 (ranks [2, 6)) exceeds the world of 4 ranks");
  DynamicCpRound zero;
  zero.groups = {{0, 0, {1}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(zero, 4, 8), "group 0 (ranks [0, 0)) has size 0; a group needs ≥ 1 rank");
}

TEST(DynamicCpSchedule, CheckNamesSequenceProblems) {
  DynamicCpRound dup;
  dup.groups = {{0, 1, {3}, 0}, {1, 1, {3}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(dup, 4, 8), "sequence 3 is in group 0 (ranks [0, 1)) and group 1 (ranks [1, 2))");
  DynamicCpRound range;
  range.groups = {{0, 2, {8}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(range, 4, 8), "group 0 (ranks [0, 2)) names sequence 8 of a batch of 8");
  DynamicCpRound empty;
  empty.groups = {{0, 2, {}, 0}};
  EXPECT_EQ(check_dynamic_cp_round(empty, 4, 8), "group 0 (ranks [0, 2)) has no sequences");
}

}  // namespace
}  // namespace cpbench
