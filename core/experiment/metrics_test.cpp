// metrics_test.cpp — the metric vocabulary, and a point's metrics combined over several batches.
#include "core/experiment/metrics.h"

#include <gtest/gtest.h>

namespace cpbench {
namespace {

TEST(CombineBatches, TimesAreMeansMemoryIsTheLargestFlagsMustAllHoldRatesAreWorkOverTime) {
  // Two attention batches: 10 ms at 30 TFLOP/s and 30 ms at 10 TFLOP/s (the same work, 0.3 ·
  // GPU-seconds of TFLOP each): together 0.6 over 40 ms = 15 TFLOP/s, not the mean 20.
  std::map<std::string, double> a{{"attention_time_s", 0.010}, {"attention_tflops_per_gpu", 30},
                                  {"cp_comm_bytes_network", 100}, {"peak_memory_gib", 20},
                                  {"cpu_bytes_match_plan", 1}, {"long_token_share", 0.2}};
  std::map<std::string, double> b{{"attention_time_s", 0.030}, {"attention_tflops_per_gpu", 10},
                                  {"cp_comm_bytes_network", 300}, {"peak_memory_gib", 30},
                                  {"cpu_bytes_match_plan", 0}, {"long_token_share", 0.6}};
  const auto c = combine_batches({a, b});
  EXPECT_DOUBLE_EQ(c.at("attention_time_s"), 0.020);
  EXPECT_DOUBLE_EQ(c.at("attention_tflops_per_gpu"), 15);
  EXPECT_DOUBLE_EQ(c.at("cp_comm_bytes_network"), 200);
  EXPECT_DOUBLE_EQ(c.at("peak_memory_gib"), 30);
  EXPECT_DOUBLE_EQ(c.at("cpu_bytes_match_plan"), 0);
  EXPECT_DOUBLE_EQ(c.at("long_token_share"), 0.4);
  // One batch: unchanged.
  EXPECT_EQ(combine_batches({a}), a);
}

TEST(CombineBatches, RatesOfTrainingStepsAreWeightedByStepTimeAndMissingMetricsAreLeftOut) {
  std::map<std::string, double> a{{"step_time_s", 1}, {"mfu", 0.5}, {"tokens_per_s_per_gpu", 100}, {"micro_batches", 4}};
  std::map<std::string, double> b{{"step_time_s", 3}, {"mfu", 0.3}, {"tokens_per_s_per_gpu", 200}};
  const auto c = combine_batches({a, b});
  EXPECT_DOUBLE_EQ(c.at("step_time_s"), 2);
  EXPECT_DOUBLE_EQ(c.at("mfu"), (0.5 * 1 + 0.3 * 3) / 4);
  EXPECT_DOUBLE_EQ(c.at("tokens_per_s_per_gpu"), (100.0 * 1 + 200.0 * 3) / 4);
  EXPECT_EQ(c.count("micro_batches"), 0u);  // one batch lacks it
}

TEST(MetricDirection, LessIsBetterForTimesMemoryBytesWasteAndImbalanceNotForRates) {
  for (const char* m : {"step_time_s", "attention_fwd_s", "peak_memory_gib", "comm_bytes_network", "bubble_fraction",
                        "padding_fraction", "compute_imbalance", "plan_time_ms"})
    EXPECT_TRUE(lower_is_better(*find_metric(m))) << m;
  for (const char* m : {"tflops_per_gpu", "attention_tflops_per_gpu", "tokens_per_s_per_gpu", "mfu", "long_token_share"})
    EXPECT_FALSE(lower_is_better(*find_metric(m))) << m;
  for (const char* m : {"tflops_per_gpu", "aggregate_pflops", "tokens_per_s_per_gpu", "tokens_per_s", "mfu"}) EXPECT_TRUE(is_rate(*find_metric(m))) << m;
  for (const char* m : {"step_time_s", "padding_fraction", "micro_batches"}) EXPECT_FALSE(is_rate(*find_metric(m))) << m;
}

}  // namespace
}  // namespace cpbench
