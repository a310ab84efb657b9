// fit_test.cpp — calibrating a stack preset against an experiment's published values: only the
// chosen constants move, the fit lowers the error it minimizes, held-out values are reported apart,
// the stack records which values fitted which constants, and bad requests are errors.
#include "core/experiment/fit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/experiment/registry.h"
#include "core/experiment/results.h"
#include "core/experiment/runner.h"

namespace cpbench {
namespace {

class FitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ref = resolve_experiment("megatron_ptdp/table1", default_experiments_dir());
    ASSERT_TRUE(ref.ok());
    auto spec = load_spec(ref->file, ref->name, SpecOptions{default_experiments_dir(), {}, {}});
    ASSERT_TRUE(spec.ok()) << spec.error_str();
    spec_ = *spec;
    auto preset = load_json_file(default_experiments_dir() / "stacks" / "megatron_sc21_a100.json");
    ASSERT_TRUE(preset.ok());
    preset_ = *preset;
    // Start away from the shipped value, so the fit has somewhere to go.
    preset_["efficiency"]["hbm_efficiency"]["value"] = 0.95;
  }

  // rms of log(reproduced / published) of the spec's TFLOP/s values under `preset`.
  double rms_under(const json& preset) {
    PointResults results(spec_.points.size());
    for (size_t i = 0; i < spec_.points.size(); ++i) {
      PointConfig p = spec_.points[i];
      p.cluster.efficiency = shared_json(preset["efficiency"]);
      results[i] = run_point(p, {});
    }
    double sum = 0;
    int n = 0;
    for (const Comparison& c : compute_comparisons(spec_, results))
      if (c.kind == "value" && c.metric == "tflops_per_gpu") {
        const double d = std::log(*c.reproduced / c.published);
        sum += d * d;
        ++n;
      }
    return std::sqrt(sum / n);
  }

  Spec spec_;
  json preset_;
};

TEST_F(FitTest, MovesOnlyTheChosenConstantAndLowersTheError) {
  const std::set<std::string> train = {"1.7B tflops_per_gpu", "39.1B tflops_per_gpu", "1T tflops_per_gpu"};
  auto fit = fit_stack_to_experiment(spec_, preset_, {"hbm_efficiency"}, std::vector<std::string>{"tflops_per_gpu"}, train);
  ASSERT_TRUE(fit.ok()) << fit.error_str();
  EXPECT_LT(rms_under(fit->stack), rms_under(preset_));
  for (const auto& [key, value] : preset_["efficiency"].items()) {
    if (key == "hbm_efficiency") continue;
    EXPECT_EQ(fit->stack["efficiency"][key], value) << key;
  }
  const json& fitted = fit->stack["efficiency"]["hbm_efficiency"];
  EXPECT_NE(fitted["value"].get<double>(), 0.95);
  EXPECT_EQ(fitted["source"].get<std::string>().rfind("fitted by cpbench calibrate --experiment megatron_ptdp/table1", 0), 0u);
  size_t held_out = 0;
  for (const FitRow& r : fit->rows) {
    EXPECT_EQ(r.trained, train.count(r.label) > 0) << r.label;
    held_out += !r.trained;
  }
  EXPECT_EQ(held_out, 7u);
  EXPECT_GT(fit->holdout_rms_log, 0);
  EXPECT_EQ(fit->stack["memory"], preset_["memory"]);  // the rest of the stack is untouched
  // The fit record replaces the shipped one of the same (experiment, metric) and names the
  // trained labels, so only those comparisons count as in-sample.
  ASSERT_EQ(fit->stack["fits"].size(), 1u) << fit->stack["fits"].dump();
  const json& record = fit->stack["fits"][0];
  EXPECT_EQ(record["experiment"], "megatron_ptdp/table1");
  EXPECT_EQ(record["metric"], "tflops_per_gpu");
  EXPECT_EQ(record["constants"], json::array({"hbm_efficiency"}));
  EXPECT_EQ(record["values"], 3);
  std::set<std::string> recorded(record["train"].begin(), record["train"].end());
  EXPECT_EQ(recorded, train);
  // It parses back as a stack, and the record covers exactly the trained labels.
  Diagnostics diag("fitted");
  JsonObject o(fit->stack, "", diag);
  const StackSpec parsed = parse_stack(o);
  ASSERT_TRUE(diag.ok()) << diag.errors().str();
  ASSERT_EQ(parsed.fits.size(), 1u);
  EXPECT_TRUE(parsed.fits[0].covers("megatron_ptdp/table1", "tflops_per_gpu", "1T tflops_per_gpu"));
  EXPECT_FALSE(parsed.fits[0].covers("megatron_ptdp/table1", "tflops_per_gpu", "18.4B tflops_per_gpu"));
  EXPECT_FALSE(parsed.fits[0].covers("megatron_ptdp/table1", "params_b", "1T params_b"));
}

TEST_F(FitTest, AnotherMetricKeepsTheEarlierRecord) {
  // A fit to another published metric adds its own record beside the shipped TFLOP/s one.
  auto fit = fit_stack_to_experiment(spec_, preset_, {"hbm_efficiency"}, std::vector<std::string>{"params_b"}, {});
  ASSERT_TRUE(fit.ok()) << fit.error_str();
  ASSERT_EQ(fit->stack["fits"].size(), 2u) << fit->stack["fits"].dump();
  EXPECT_EQ(fit->stack["fits"][0]["metric"], "tflops_per_gpu");
  EXPECT_EQ(fit->stack["fits"][1]["metric"], "params_b");
  EXPECT_FALSE(fit->stack["fits"][1].contains("train"));  // every published value was fitted
}

TEST_F(FitTest, SeveralMetricsShareOneLossAndKeepARecordEach) {
  // A forward and a backward time fit together: one loss over the trained rows of both metrics,
  // one record per metric naming its own labels, every row reported before and after the fit.
  const std::set<std::string> train = {"1.7B tflops_per_gpu", "1T tflops_per_gpu", "1T params_b"};
  auto fit = fit_stack_to_experiment(spec_, preset_, {"hbm_efficiency"},
                                     std::vector<std::string>{"tflops_per_gpu", "params_b"}, train);
  ASSERT_TRUE(fit.ok()) << fit.error_str();
  ASSERT_EQ(fit->stack["fits"].size(), 2u) << fit->stack["fits"].dump();
  EXPECT_EQ(fit->stack["fits"][0]["metric"], "tflops_per_gpu");
  EXPECT_EQ(fit->stack["fits"][0]["train"], json::array({"1.7B tflops_per_gpu", "1T tflops_per_gpu"}));
  EXPECT_EQ(fit->stack["fits"][1]["metric"], "params_b");
  EXPECT_EQ(fit->stack["fits"][1]["train"], json::array({"1T params_b"}));
  size_t tflops_rows = 0, params_rows = 0, moved = 0;
  for (const FitRow& r : fit->rows) {
    (r.metric == "params_b" ? params_rows : tflops_rows) += 1;
    EXPECT_GT(r.before, 0) << r.label;
    if (r.metric == "params_b") EXPECT_DOUBLE_EQ(r.before, r.reproduced) << r.label;  // no efficiency in it
    moved += r.metric == "tflops_per_gpu" && r.before != r.reproduced;
  }
  EXPECT_EQ(tflops_rows, 10u);
  EXPECT_EQ(params_rows, 10u);
  EXPECT_GT(moved, 0u);  // held-out rows are re-run with the fitted constant too
}

TEST_F(FitTest, BadRequestsAreErrors) {
  auto unknown = fit_stack_to_experiment(spec_, preset_, {"hbm_speed"}, std::vector<std::string>{"tflops_per_gpu"}, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error_str().find("unknown efficiency constant 'hbm_speed'"), std::string::npos);
  auto none = fit_stack_to_experiment(spec_, preset_, {"hbm_efficiency"}, std::vector<std::string>{"tflops_per_gpu"}, {"no such row"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error_str().find("no published value of the fitted metrics is labelled 'no such row'"), std::string::npos)
      << none.error_str();
  auto nothing = fit_stack_to_experiment(spec_, preset_, {"hbm_efficiency"}, std::vector<std::string>{"no_such_metric"}, {});
  ASSERT_FALSE(nothing.ok());
  EXPECT_NE(nothing.error_str().find("no published no_such_metric value to fit"), std::string::npos) << nothing.error_str();
  json other = preset_;
  other["name"] = "mcore_te_fa3_h100";
  auto wrong = fit_stack_to_experiment(spec_, other, {"hbm_efficiency"}, std::vector<std::string>{"tflops_per_gpu"}, {});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error_str().find("not the fitted 'mcore_te_fa3_h100'"), std::string::npos) << wrong.error_str();
}

}  // namespace
}  // namespace cpbench
