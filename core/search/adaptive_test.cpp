// adaptive_test.cpp — the per-batch strategies: on two shipped profiles (a long-tailed corpus and
// fixed lengths) the oracle is never slower than the best single candidate over the same batches,
// on each batch it takes the fastest candidate's plan, and the rule decides from the features it
// names.
#include "core/search/adaptive.h"

#include <map>

#include <gtest/gtest.h>

#include "core/evaluate/evaluate.h"
#include "core/experiment/runner.h"
#include "core/experiment/spec.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

const fs::path kExperiments = fs::path(CPBENCH_SOURCE_DIR) / "experiments";

// experiments/adaptive/profiles at a smaller budget (2M tokens, 2 batches): the same layout.
Spec small_spec() {
  SpecOptions options{kExperiments, {{"workload.global_batch_tokens", "2097152"}, {"workload.batches", "2"}}, {}};
  auto spec = load_spec(kExperiments / "adaptive/profiles.json", "adaptive/profiles", options);
  EXPECT_TRUE(spec.ok()) << spec.error_str();
  return *spec;
}

TEST(Adaptive, OracleIsNeverSlowerThanTheBestSingleStrategyOnTwoProfiles) {
  const Spec spec = small_spec();
  for (const char* profile : {"dynamic_cp_github", "fixed_4096"}) {
    SCOPED_TRACE(profile);
    std::map<std::string, double> step;  // strategy name -> mean step
    for (const auto& p : spec.points) {
      if (p.case_name != profile) continue;
      const PointResult r = run_point(p, {});
      ASSERT_EQ(r.status, "ok") << p.id << ": " << r.reason;
      step[p.strategy] = r.metrics.at("step_time_s");
    }
    ASSERT_EQ(step.size(), 6u);
    double best_single = 1e300;
    for (const auto& c : adaptive_candidates()) best_single = std::min(best_single, step.at(c.name));
    EXPECT_LE(step.at("adaptive_oracle"), best_single * (1 + 1e-12));
    EXPECT_GE(step.at("adaptive_rule"), step.at("adaptive_oracle") * (1 - 1e-12)) << "no rule beats the oracle";
  }
}

TEST(Adaptive, OnEachBatchTheOracleTakesTheFastestCandidatesPlan) {
  const Spec spec = small_spec();
  const PointConfig* point = nullptr;
  for (const auto& p : spec.points)
    if (p.case_name == "dynamic_cp_github" && p.strategy == "adaptive_oracle") point = &p;
  ASSERT_NE(point, nullptr);
  const GlobalBatch batch = point->workload.batch();
  StrategyInput in{point->cluster, point->model, point->parallel, batch, nullptr};
  EvalInput eval{point->cluster, point->model, batch, "megatron", {}, {}, 0};
  double fastest = 1e300;
  for (const auto& c : adaptive_candidates()) {
    PlanOutcome o = c.plan(in);
    if (o.status != "ok") continue;
    const Evaluation e = evaluate(eval, o.plan);
    if (e.status == "ok") fastest = std::min(fastest, e.metrics.at("step_time_s"));
  }
  const PlanOutcome chosen = plan_adaptive_oracle(in);
  ASSERT_EQ(chosen.status, "ok") << chosen.reason;
  EXPECT_EQ(evaluate(eval, chosen.plan).metrics.at("step_time_s"), fastest);
  EXPECT_NE(chosen.reason.find("oracle chose "), std::string::npos) << chosen.reason;
}

TEST(Adaptive, RuleReadsTheLongestSequenceAndTheLongTokenShare) {
  ParallelConfig layout;
  layout.max_seqlen_per_dp_cp_rank = 1000;
  GlobalBatch fits{{900, 100, 500}, {}};
  BatchFeatures f = batch_features(fits, layout);
  EXPECT_EQ(f.longest, 900);
  EXPECT_EQ(f.long_token_share, 0);
  EXPECT_EQ(adaptive_rule_choice(f), "packing");
  GlobalBatch some_long{{3000, 500, 500, 500, 500, 500, 500, 500}, {}};  // 3000 of 6500 tokens need CP
  f = batch_features(some_long, layout);
  EXPECT_NEAR(f.long_token_share, 3000.0 / 6500.0, 1e-12);
  EXPECT_EQ(adaptive_rule_choice(f), "dynamic_cp_dev");
  GlobalBatch mostly_long{{3000, 2000, 500}, {}};
  EXPECT_EQ(adaptive_rule_choice(batch_features(mostly_long, layout)), "dynamic_cp_solver");
}

}  // namespace
}  // namespace cpbench
