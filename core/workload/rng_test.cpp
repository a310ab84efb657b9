// rng_test.cpp — SplitMix64 against its published reference outputs, and the moments of our own
// uniform, integer and normal draws; the normal CDF/quantile pair against tabulated values.
#include "core/workload/rng.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/workload/length_stats.h"

namespace cpbench {
namespace {

TEST(SplitMix64, MatchesReferenceOutputsForSeedZero) {
  // First outputs of Vigna's splitmix64.c with x = 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next_u64(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.next_u64(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.next_u64(), 0x06C45D188009454FULL);
}

TEST(SplitMix64, UniformIsInRangeWithMeanOneHalf) {
  SplitMix64 rng(7);
  const int n = 1000000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    double u = rng.uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    double v = rng.uniform_open01();
    ASSERT_GT(v, 0.0);
    ASSERT_LE(v, 1.0);
    sum += u;
  }
  // Standard error of the mean of U(0,1): sqrt(1/12)/sqrt(n); allow 5 of them.
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12) / std::sqrt(double(n)));
}

TEST(SplitMix64, UniformBelowHitsEveryValueEvenly) {
  SplitMix64 rng(11);
  const int n = 700000, k = 7;
  std::vector<int> hits(k, 0);
  for (int i = 0; i < n; ++i) {
    uint64_t v = rng.uniform_below(k);
    ASSERT_LT(v, uint64_t(k));
    ++hits[v];
  }
  double p = 1.0 / k, se = std::sqrt(n * p * (1 - p));
  for (int h : hits) EXPECT_NEAR(h, n * p, 5 * se);
}

TEST(SplitMix64, NormalHasUnitMomentsAndTheRightCdf) {
  SplitMix64 rng(3);
  const int n = 1000000;
  double sum = 0, sum_sq = 0;
  int below_one = 0;
  for (int i = 0; i < n; ++i) {
    double z = rng.normal();
    sum += z;
    sum_sq += z * z;
    below_one += z <= 1.0;
  }
  double se = 1 / std::sqrt(double(n));
  EXPECT_NEAR(sum / n, 0.0, 5 * se);
  EXPECT_NEAR(sum_sq / n, 1.0, 5 * std::sqrt(2.0) * se);  // Var(Z²) = 2
  double p = 0.8413447460685429;                           // Φ(1)
  EXPECT_NEAR(below_one / double(n), p, 5 * std::sqrt(p * (1 - p) / n));
}

TEST(SplitMix64, SameSeedSameStreamDifferentSeedDifferentStream) {
  SplitMix64 a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
  }
}

TEST(NormalQuantile, MatchesTabulatedValuesAndInvertsTheCdf) {
  EXPECT_NEAR(normal_cdf(0), 0.5, 1e-15);
  EXPECT_NEAR(normal_cdf(1.959963984540054), 0.975, 1e-14);
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-15);
  EXPECT_NEAR(normal_quantile(0.001), -3.090232306167813, 1e-11);
  // Up to z = 5 only: above that, Φ(z) rounds to within 1e-16 of 1 and the inverse loses digits.
  for (double z = -6; z <= 5; z += 0.25) EXPECT_NEAR(normal_quantile(normal_cdf(z)), z, 1e-9 * std::max(1.0, std::abs(z))) << z;
  EXPECT_TRUE(std::isinf(normal_quantile(0.0)));
  EXPECT_TRUE(std::isinf(normal_quantile(1.0)));
}

}  // namespace
}  // namespace cpbench
