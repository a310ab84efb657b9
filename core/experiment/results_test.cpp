// results_test.cpp — the results contract: schema, comparisons, atomic writes, resume.
#include "core/experiment/results.h"

#include <fstream>

#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

class ResultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_results_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    json j = {
        {"description", "results test"},
        {"hardware", "a100_80gb_dgx"},
        {"model", "gpt_1.7b"},
        {"workload", {{"dataset", "fixed_2048"}, {"global_batch_sequences", 8}}},
        {"parallel", {{"num_gpus", 8}}},
        {"flops_definition", "sc21"},
        {"strategies", {"ptdp"}},
        {"cases", {{{"name", "a"}, {"published", {{"params_b", 1.7}}}},
                   {{"name", "b"}, {"workload", {{"global_batch_sequences", 16}}}},
                   {{"name", "odd"}, {"parallel", {{"num_gpus", 7}, {"tp", 2}}}}}},
        {"metrics", {"params_b", "flops_per_iteration"}},
        {"published",
         {{"tolerance", {{"params_b", {{"abs", 0.1}}}}},
          {"ratios",
           {{{"label", "b/a flops"}, {"metric", "flops_per_iteration"}, {"value", 2.0},
             {"numerator", {{"case", "b"}}}, {"denominator", {{"case", "a"}}}, {"tolerance", {{"rel", 0.001}}}}}}}},
    };
    std::ofstream(dir_ / "spec.json") << j.dump(2);
    auto s = load_spec(dir_ / "spec.json", "t/spec", SpecOptions{default_experiments_dir(), {}});
    ASSERT_TRUE(s.ok()) << s.error_str();
    spec_ = *s;
  }
  void TearDown() override { fs::remove_all(dir_); }

  PointResults run_all() {
    PointResults r;
    for (const auto& p : spec_.points) r.push_back(run_point(p, {}));
    return r;
  }

  fs::path dir_;
  Spec spec_;
};

TEST_F(ResultsTest, JsonFollowsSchemaVersion1) {
  auto r = run_all();
  json j = results_to_json(spec_, current_provenance(1), r);
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["experiment"], "t/spec");
  EXPECT_EQ(j["spec"], spec_.resolved);
  for (const char* k : {"git_commit", "dirty", "build_type", "host", "started_utc", "seed"})
    EXPECT_TRUE(j["provenance"].contains(k)) << k;
  ASSERT_EQ(j["points"].size(), 3u);
  const json& p = j["points"][0];
  EXPECT_EQ(p["id"], "case=a/strategy=ptdp");
  EXPECT_EQ(p["status"], "ok");
  EXPECT_NEAR(p["metrics"]["params_b"].get<double>(), 1.7, 0.05);
  // A layout that does not divide is a result with a reason, not an error.
  EXPECT_EQ(j["points"][2]["status"], "infeasible");
  EXPECT_NE(j["points"][2]["reason"].get<std::string>().find("not a multiple of tp·pp·cp = 2"), std::string::npos);
}

TEST_F(ResultsTest, ComparisonsJudgeValuesAndRatios) {
  auto comps = compute_comparisons(spec_, run_all());
  ASSERT_EQ(comps.size(), 2u);
  EXPECT_EQ(comps[0].label, "a params_b");
  ASSERT_TRUE(comps[0].pass.has_value());
  EXPECT_TRUE(*comps[0].pass);
  EXPECT_NEAR(*comps[0].rel_error, (*comps[0].reproduced - 1.7) / 1.7, 1e-12);
  // Twice the sequences of the same length: exactly twice the FLOPs.
  EXPECT_EQ(comps[1].kind, "ratio");
  EXPECT_NEAR(*comps[1].reproduced, 2.0, 1e-12);
  EXPECT_TRUE(*comps[1].pass);
}

TEST_F(ResultsTest, ComparisonWithoutItsPointSaysWhy) {
  auto r = run_all();
  r[1].reset();
  auto comps = compute_comparisons(spec_, r);
  EXPECT_FALSE(comps[1].reproduced.has_value());
  EXPECT_NE(comps[1].note.find("has not run"), std::string::npos);
}

TEST_F(ResultsTest, BestSidePicksTheHighestOfThePointsThatRan) {
  // a over the best of all three cases: "odd" is infeasible and skipped, b has twice a's FLOPs.
  PublishedValue pv;
  pv.label = "a / best";
  pv.metric = "flops_per_iteration";
  pv.kind = "ratio";
  pv.select.case_name = "a";
  pv.denominator.best = true;
  spec_.published = {pv};
  auto comps = compute_comparisons(spec_, run_all());
  ASSERT_EQ(comps.size(), 1u);
  ASSERT_TRUE(comps[0].reproduced.has_value()) << comps[0].note;
  EXPECT_NEAR(*comps[0].reproduced, 0.5, 1e-12);
  EXPECT_NE(comps[0].note.find("best: case=b/"), std::string::npos) << comps[0].note;
  EXPECT_EQ(comps[0].select["denominator"]["best"], true);
  // A best side none of whose points ran: no value, and the note says so.
  spec_.published[0].denominator.case_name = "odd";  // infeasible
  comps = compute_comparisons(spec_, run_all());
  EXPECT_FALSE(comps[0].reproduced.has_value());
  EXPECT_NE(comps[0].note.find("no selected point ran"), std::string::npos) << comps[0].note;
}

TEST_F(ResultsTest, WriteIsAtomicAndLeavesNoTemporaryFiles) {
  auto r = run_all();
  ASSERT_TRUE(write_results(dir_ / "out", spec_, current_provenance(1), r).ok());
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    ++files;
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 2u);
  auto j = load_json_file(dir_ / "out" / "results.json");
  ASSERT_TRUE(j.ok());
  std::ifstream csv(dir_ / "out" / "results.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("id,case,strategy,status,reason,params_b,flops_per_iteration", 0), 0u) << header;
}

TEST_F(ResultsTest, ResumeKeepsFinishedPointsAndRejectsAnotherSpec) {
  auto full = run_all();
  PointResults partial = full;
  partial[1].reset();  // as if the run was killed before point 1 finished
  ASSERT_TRUE(write_results(dir_ / "out", spec_, current_provenance(1), partial).ok());
  auto loaded = load_finished_points(dir_ / "out" / "results.json", spec_);
  ASSERT_TRUE(loaded.ok()) << loaded.error_str();
  EXPECT_TRUE((*loaded)[0].has_value());
  EXPECT_FALSE((*loaded)[1].has_value());
  EXPECT_EQ((*loaded)[0]->metrics, full[0]->metrics);
  EXPECT_EQ((*loaded)[2]->status, "infeasible");

  Spec other = spec_;
  other.resolved["description"] = "changed";
  auto rejected = load_finished_points(dir_ / "out" / "results.json", other);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.error_str().find("different spec"), std::string::npos);
}

TEST_F(ResultsTest, SameSpecAndSeedGiveIdenticalPoints) {
  json a = results_to_json(spec_, current_provenance(1), run_all());
  json b = results_to_json(spec_, current_provenance(1), run_all());
  // Wall-clock timings are kept apart from the metrics; everything else is the same.
  ASSERT_TRUE(a["points"][0].contains("timings"));
  EXPECT_TRUE(a["points"][0]["timings"].contains("plan_time_ms"));
  EXPECT_FALSE(a["points"][0]["metrics"].contains("plan_time_ms"));
  for (json* j : {&a, &b})
    for (json& p : (*j)["points"]) p.erase("timings");
  EXPECT_EQ(a["points"], b["points"]);
  EXPECT_EQ(a["comparisons"], b["comparisons"]);
}

}  // namespace
}  // namespace cpbench
