// sampling_test.cpp — determinism, clipping, and sample statistics against the analytic
// definitions of length_stats.h. Tolerances are stated per test: quantiles within 3% at n = 200k,
// means and frequencies within 5 standard errors (estimated from the same sample).
#include "core/workload/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "core/workload/length_stats.h"

namespace cpbench {
namespace {

constexpr size_t kN = 200000;

LengthProfile make(LengthDistribution d, int64_t min_length = 1, int64_t max_length = int64_t{1} << 30) {
  LengthProfile p;
  p.min_length = min_length;
  p.max_length = max_length;
  p.distribution = std::move(d);
  return p;
}

LengthDistribution lognormal(double median, double sigma) {
  LengthDistribution d;
  d.kind = LengthKind::lognormal;
  d.log_median = std::log(median);
  d.sigma = sigma;
  return d;
}

LengthDistribution pareto(double scale, double alpha) {
  LengthDistribution d;
  d.kind = LengthKind::pareto;
  d.scale_tokens = scale;
  d.alpha = alpha;
  return d;
}

std::vector<int64_t> draw(const LengthProfile& p, uint64_t seed = 1, size_t n = kN) {
  return sample_lengths(p, seed, n, p.min_length, p.max_length);
}

double quantile_of(std::vector<int64_t> v, double p) {
  size_t k = static_cast<size_t>(p * double(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(k), v.end());
  return double(v[k]);
}

// |sample mean − expected| within 5 standard errors of the sample.
void expect_mean_near(const std::vector<int64_t>& v, double expected) {
  double n = double(v.size()), sum = 0, sum_sq = 0;
  for (int64_t x : v) {
    sum += double(x);
    sum_sq += double(x) * double(x);
  }
  double mean = sum / n, sd = std::sqrt(std::max(0.0, sum_sq / n - mean * mean));
  EXPECT_NEAR(mean, expected, 5 * sd / std::sqrt(n) + 0.5) << "sample sd " << sd;  // +0.5: rounding to tokens
}

TEST(Sampling, SameSeedSameLengthsDifferentSeedDifferentLengths) {
  auto p = make(lognormal(4096, 1.0));
  auto a = draw(p, 5, 1000), b = draw(p, 5, 1000), c = draw(p, 6, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The stream is sequential: a shorter draw is a prefix of a longer one.
  auto prefix = draw(p, 5, 10);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
}

TEST(Sampling, ClipsToTheCallersBoundsWithTheRightMassAtEachBound) {
  auto p = make(lognormal(4096, 1.5));
  auto v = sample_lengths(p, 2, kN, 1024, 16384);
  int64_t at_lo = 0, at_hi = 0;
  for (int64_t x : v) {
    ASSERT_GE(x, 1024);
    ASSERT_LE(x, 16384);
    at_lo += x == 1024;
    at_hi += x == 16384;
  }
  // Clipping (not resampling): P(L ≤ 1024) of the draws land on 1024, P(L ≥ 16384) on 16384.
  double p_lo = profile_cdf(p.distribution, 1024), p_hi = 1 - profile_cdf(p.distribution, 16384);
  EXPECT_NEAR(at_lo / double(kN), p_lo, 5 * std::sqrt(p_lo * (1 - p_lo) / kN) + 1e-4);
  EXPECT_NEAR(at_hi / double(kN), p_hi, 5 * std::sqrt(p_hi * (1 - p_hi) / kN) + 1e-4);
  expect_mean_near(v, clipped_mean_tokens(p.distribution, 1024, 16384));
}

TEST(Sampling, FixedIsConstantAndScaled) {
  LengthDistribution d;
  d.kind = LengthKind::fixed;
  d.length_tokens = 2048;
  auto p = make(d, 2048, 2048);
  for (int64_t x : draw(p, 1, 100)) EXPECT_EQ(x, 2048);
  for (int64_t x : sample_lengths(p, 1, 100, 1, 1000)) EXPECT_EQ(x, 1000);  // a tighter clamp wins
  LengthSampler doubled(p, 1, 1, 1 << 20, 2.0);
  EXPECT_EQ(doubled.next(), 4096);
  LengthSampler capped(p, 1, 1, 3000, 2.0);  // scaled, then clipped: 3000, not 2 · min(2048, 3000)
  EXPECT_EQ(capped.next(), 3000);
}

TEST(Sampling, LognormalMedianQuantilesAndMeanMatchTheDefinition) {
  auto p = make(lognormal(8000, 1.1));
  auto v = draw(p);
  // Median e^mu within 3%; the 10% and 90% points e^(mu ± 1.2816·sigma) within 3%.
  EXPECT_NEAR(quantile_of(v, 0.5), 8000, 0.03 * 8000);
  EXPECT_NEAR(quantile_of(v, 0.9), profile_quantile_tokens(p, 0.9), 0.03 * profile_quantile_tokens(p, 0.9));
  EXPECT_NEAR(quantile_of(v, 0.1), profile_quantile_tokens(p, 0.1), 0.03 * profile_quantile_tokens(p, 0.1));
  EXPECT_NEAR(profile_quantile_tokens(p, 0.9), 8000 * std::exp(1.1 * 1.2815515655446004), 1e-6);
  expect_mean_near(v, profile_mean_tokens(p));  // e^(mu + sigma²/2); the clamp is out of reach
}

TEST(Sampling, ParetoQuantilesAndClippedMeanOfAnInfiniteMeanTail) {
  // alpha = 0.9: the unclamped mean is infinite, the clipped one is finite.
  auto p = make(pareto(1000, 0.9), 1, 131072);
  EXPECT_TRUE(std::isinf(profile_mean_tokens(p)));
  auto v = draw(p, 3);
  for (double q : {0.5, 0.8}) {
    double expected = 1000 * std::pow(1 - q, -1 / 0.9);  // x_m (1 − p)^(−1/alpha)
    EXPECT_NEAR(profile_quantile_tokens(p, q), expected, 1e-9 * expected);
    EXPECT_NEAR(quantile_of(v, q), expected, 0.03 * expected);
  }
  expect_mean_near(v, clipped_mean_tokens(p));
}

TEST(Sampling, MixtureMeanAndMedian) {
  LengthDistribution d;
  d.kind = LengthKind::mixture;
  d.weights = {0.7, 0.3};
  d.labels = {"", ""};
  d.components = {lognormal(1000, 0.8), pareto(20000, 2.5)};
  auto p = make(d, 1, 1 << 20);
  double median = profile_quantile_tokens(p, 0.5);
  EXPECT_NEAR(profile_cdf(d, median), 0.5, 1e-9);
  auto v = draw(p, 4);
  EXPECT_NEAR(quantile_of(v, 0.5), median, 0.03 * median);
  EXPECT_NEAR(profile_mean_tokens(p), 0.7 * 1000 * std::exp(0.32) + 0.3 * 2.5 * 20000 / 1.5, 1e-6);
  expect_mean_near(v, clipped_mean_tokens(p));
}

TEST(Sampling, EmpiricalHistogramReproducesBinFrequencies) {
  LengthDistribution d;
  d.kind = LengthKind::empirical;
  d.bins = {{100, 199, 10}, {200, 200, 0}, {256, 511, 30}, {512, 4095, 50}, {65536, 65536, 10}};
  auto p = make(d, 1, 131072);
  auto v = draw(p, 9);
  double total = 100;
  for (const auto& b : d.bins) {
    int64_t hits = 0;
    double sum = 0;
    for (int64_t x : v)
      if (x >= b.lo_tokens && x <= b.hi_tokens) {
        ++hits;
        sum += double(x);
      }
    double f = b.count / total;
    EXPECT_NEAR(hits / double(kN), f, 5 * std::sqrt(f * (1 - f) / kN)) << "bin " << b.lo_tokens;
    // Uniform inside the bin: mean (lo + hi)/2, sd of a discrete uniform (width² − 1)/12.
    if (hits > 0) {
      double width = double(b.hi_tokens - b.lo_tokens + 1);
      double se = std::sqrt((width * width - 1) / 12 / double(hits));
      EXPECT_NEAR(sum / double(hits), 0.5 * double(b.lo_tokens + b.hi_tokens), 5 * se + 1e-9);
    }
  }
  int64_t outside = std::count_if(v.begin(), v.end(), [](int64_t x) { return (x > 199 && x < 256) || (x > 4095 && x < 65536); });
  EXPECT_EQ(outside, 0);
  EXPECT_NEAR(profile_quantile_tokens(p, 0.05), 149, 1e-9);  // halfway through the first bin's 10%
  EXPECT_NEAR(profile_quantile_tokens(p, 0.95), 65536, 1e-9);
  expect_mean_near(v, profile_mean_tokens(p));
}

TEST(Sampling, ClippedMeanOfEmpiricalCountsEachIntegerOnce) {
  LengthDistribution d;
  d.kind = LengthKind::empirical;
  d.bins = {{1, 4, 4}};  // 1, 2, 3, 4 equally likely
  EXPECT_DOUBLE_EQ(clipped_mean_tokens(d, 2, 3), (2 + 2 + 3 + 3) / 4.0);
  EXPECT_DOUBLE_EQ(profile_cdf(d, 2.5), 0.5);
}

}  // namespace
}  // namespace cpbench
