// frontier_test.cpp — frontier tracking is exact: on random candidates (bounds at or below the
// values an evaluation returns) the tracked frontier equals the Pareto set of evaluating every
// candidate, prunes only dominated candidates, and gives the same result at any thread count.
#include "core/search/frontier.h"

#include <gtest/gtest.h>

#include <random>

namespace cpbench {
namespace {

struct Case {
  std::vector<std::optional<Objectives>> bounds;
  std::vector<Objectives> truth;
};

// n candidates over `k` objectives: the first a time with a bound 0–30% under it, the others
// known exactly before evaluation (memory, bytes, GPUs: small integers, so ties happen).
Case random_case(size_t n, size_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> time(1, 10), slack(0.7, 1.0);
  std::uniform_int_distribution<int> level(1, 6);
  Case c;
  for (size_t i = 0; i < n; ++i) {
    Objectives v(k);
    v[0] = time(rng);
    for (size_t j = 1; j < k; ++j) v[j] = level(rng);
    Objectives b = v;
    b[0] *= slack(rng);
    c.truth.push_back(v);
    c.bounds.push_back(i % 17 == 5 ? std::nullopt : std::optional<Objectives>(b));  // some cannot run
  }
  return c;
}

TEST(Frontier, DominanceIsStrictInOneObjective) {
  EXPECT_TRUE(dominates({1, 2}, {1, 3}));
  EXPECT_FALSE(dominates({1, 2}, {1, 2}));
  EXPECT_FALSE(dominates({1, 4}, {2, 3}));
}

TEST(Frontier, EqualsTheExhaustiveParetoSetAndPrunesOnlyDominatedCandidates) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const Case c = random_case(300, seed % 2 ? 3 : 4, seed);
    size_t calls = 0;
    const FrontierResult r = track_frontier(c.bounds, [&](size_t i) {
      ++calls;
      return i % 23 == 7 ? std::nullopt : std::optional<Objectives>(c.truth[i]);  // some evaluations fail
    });
    // Exhaustive: every candidate that can run and whose evaluation succeeds, dominated by none.
    for (size_t i = 0; i < c.truth.size(); ++i) {
      const bool ran = c.bounds[i] && i % 23 != 7;
      bool pareto = ran;
      for (size_t j = 0; pareto && j < c.truth.size(); ++j)
        if (c.bounds[j] && j % 23 != 7 && dominates(c.truth[j], c.truth[i])) pareto = false;
      EXPECT_EQ(r.on_frontier[i], pareto) << "seed " << seed << " candidate " << i;
      if (r.state[i] == FrontierResult::State::pruned) {
        ASSERT_TRUE(r.dominated_by[i].has_value());
        EXPECT_TRUE(dominates(c.truth[*r.dominated_by[i]], c.truth[i]));
      }
    }
    EXPECT_EQ(calls, r.evaluated + r.failed);
    EXPECT_GT(r.pruned, 0u) << "seed " << seed;
    EXPECT_LT(calls, c.truth.size());
    // The same on four threads, counts included.
    const FrontierResult four = track_frontier(c.bounds, [&](size_t i) {
      return i % 23 == 7 ? std::nullopt : std::optional<Objectives>(c.truth[i]);
    }, 4);
    EXPECT_EQ(four.on_frontier, r.on_frontier);
    EXPECT_EQ(four.evaluated, r.evaluated);
    EXPECT_EQ(four.pruned, r.pruned);
  }
}

}  // namespace
}  // namespace cpbench
