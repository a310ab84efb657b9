// results_test.cpp — the results contract: schema, comparisons (in-sample ones marked as
// calibration, and shown apart), atomic writes, resume.
#include "core/experiment/results.h"

#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/experiment/show.h"

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
    auto s = load_spec(dir_ / "spec.json", "t/spec", SpecOptions{default_experiments_dir(), {}, {}});
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

// A comparison is in-sample exactly when a fit record of the stack its point(s) ran on covers the
// experiment, the metric and (when the fit held some values out) the label.
TEST_F(ResultsTest, FittedValuesAreMarkedAsCalibrationAndShownApart) {
  auto hardware = load_json_file(default_experiments_dir() / "hardware" / "a100_80gb_dgx.json");
  auto stack = load_json_file(default_experiments_dir() / "stacks" / "megatron_sc21_a100.json");
  ASSERT_TRUE(hardware.ok() && stack.ok());
  json fitted = *stack;
  fitted["name"] = "fitted_here";
  fitted["fits"] = {{{"experiment", "t/cal"}, {"metric", "params_b"}, {"constants", {"hbm_efficiency"}}},
                    {{"experiment", "t/cal"}, {"metric", "flops_per_iteration"}, {"constants", {"hbm_efficiency"}},
                     {"train", {"b/a flops"}}},
                    {{"experiment", "t/other"}, {"metric", "tflops_per_gpu"}, {"constants", {"hbm_efficiency"}}}};
  json inline_hardware = *hardware;
  inline_hardware["default_stack"] = fitted;  // a stack written inline, fit records included
  json j = {
      {"description", "calibration test"},
      {"hardware", inline_hardware},
      {"model", "gpt_1.7b"},
      {"workload", {{"dataset", "fixed_2048"}, {"global_batch_sequences", 8}}},
      {"parallel", {{"num_gpus", 8}}},
      {"flops_definition", "sc21"},
      {"strategies", {"ptdp"}},
      // Case b runs on the shipped A100 stack, whose only fit is on megatron_ptdp/table1.
      {"cases", {{{"name", "a"}, {"published", {{"params_b", 1.7}}}},
                 {{"name", "b"}, {"stack", "megatron_sc21_a100"}, {"workload", {{"global_batch_sequences", 16}}},
                  {"published", {{"params_b", 1.7}}}}}},
      {"metrics", {"params_b"}},
      {"published",
       {{"ratios",
         {{{"label", "b/a flops"}, {"metric", "flops_per_iteration"}, {"value", 2.0},
           {"numerator", {{"case", "b"}}}, {"denominator", {{"case", "a"}}}},
          {{"label", "a/b flops"}, {"metric", "flops_per_iteration"}, {"value", 0.5},
           {"numerator", {{"case", "a"}}}, {"denominator", {{"case", "b"}}}}}}}},
  };
  std::ofstream(dir_ / "cal.json") << j.dump(2);
  auto spec = load_spec(dir_ / "cal.json", "t/cal", SpecOptions{default_experiments_dir(), {}, {}});
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  ASSERT_EQ(spec->points.size(), 2u);
  EXPECT_EQ(spec->points[0].cluster.stack, "fitted_here");
  EXPECT_EQ(spec->points[1].cluster.stack, "megatron_sc21_a100");
  PointResults r;
  for (const auto& p : spec->points) r.push_back(run_point(p, {}));
  auto comps = compute_comparisons(*spec, r);
  ASSERT_EQ(comps.size(), 4u);
  std::map<std::string, bool> calibration;
  for (const auto& c : comps) calibration[c.label] = c.calibration;
  EXPECT_TRUE(calibration.at("a params_b"));    // a's stack was fitted on this experiment's params_b
  EXPECT_FALSE(calibration.at("b params_b"));   // b's stack was not
  EXPECT_TRUE(calibration.at("b/a flops"));     // a trained label; a's stack is the denominator's
  EXPECT_FALSE(calibration.at("a/b flops"));    // held out of that fit
  // The same spec under another name is out of sample everywhere.
  Spec renamed = *spec;
  renamed.name = "t/renamed";
  for (const auto& c : compute_comparisons(renamed, r)) EXPECT_FALSE(c.calibration) << c.label;

  json results = results_to_json(*spec, current_provenance(1), r);
  for (const auto& c : results["comparisons"]) ASSERT_TRUE(c["calibration"].is_boolean()) << c.dump();
  EXPECT_EQ(results["comparisons"][0]["calibration"], true);
  EXPECT_EQ(results["spec"]["presets"]["stacks"].count("megatron_sc21_a100"), 1u);
  auto text = format_results(results, "results.json");
  ASSERT_TRUE(text.ok()) << text.error_str();
  const size_t in_sample = text->find("in sample (calibration"), out_of_sample = text->find("out of sample");
  ASSERT_NE(in_sample, std::string::npos) << *text;
  ASSERT_NE(out_of_sample, std::string::npos) << *text;
  EXPECT_LT(in_sample, out_of_sample);
  // Each part has its own mean error: a params_b in sample, b params_b out of sample.
  EXPECT_NE(text->find("in-sample mean |rel.err| of params_b"), std::string::npos) << *text;
  EXPECT_NE(text->find("out-of-sample mean |rel.err| of params_b"), std::string::npos) << *text;
  EXPECT_LT(text->find("a params_b", in_sample), out_of_sample);
  EXPECT_GT(text->find("b params_b", in_sample), out_of_sample);
  // A results file written before the field existed shows every comparison out of sample.
  for (auto& c : results["comparisons"]) c.erase("calibration");
  auto old = format_results(results, "old.json");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->find("in sample"), std::string::npos) << *old;
  EXPECT_NE(old->find("out of sample"), std::string::npos) << *old;
}

// `show` lists a wall-clock metric the spec names (the cpu backend's measured time) from the
// point's "timings", where the runner keeps it, and marks its column as wall-clock.
TEST_F(ResultsTest, ShowReadsAWallClockMetricFromTimings) {
  json results = results_to_json(spec_, current_provenance(1), run_all());
  results["spec"]["metrics"].push_back("cpu_attention_measured_s");
  results["points"][0]["timings"]["cpu_attention_measured_s"] = 0.1945;
  ASSERT_FALSE(results["points"][0]["metrics"].contains("cpu_attention_measured_s"));
  auto text = format_results(results, "results.json");
  ASSERT_TRUE(text.ok()) << text.error_str();
  EXPECT_NE(text->find("cpu_attention_measured_s (wall)"), std::string::npos) << *text;
  EXPECT_NE(text->find("0.1945"), std::string::npos) << *text;
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

// A value with "best": what run writes, show and --resume read back (dcp/micro_causal's values
// with "best" were unreadable by `cpbench show` until session 15).
TEST_F(ResultsTest, AResultsFileWithABestValueValidates) {
  PublishedValue pv;
  pv.label = "best flops";
  pv.metric = "flops_per_iteration";
  pv.kind = "value";
  pv.select.best = true;
  pv.published = 1;
  spec_.published = {pv};
  const json j = results_to_json(spec_, current_provenance(1), run_all());
  ASSERT_EQ(j["comparisons"].size(), 1u);
  EXPECT_EQ(j["comparisons"][0]["select"]["best"], true);
  EXPECT_FALSE(j["comparisons"][0].contains("best"));
  EXPECT_TRUE(validate_results_json(j, "results.json").ok()) << validate_results_json(j, "results.json").error_str();
}

TEST_F(ResultsTest, NearestValueComparesTheOnePointClosestToThePublishedValue) {
  // Cases a and b ran (b has twice a's FLOPs), odd is infeasible: a published value near b's picks b.
  const PointResults results = run_all();
  // A case's own "published" shorthand compares every point of the case, not the nearest.
  ASSERT_FALSE(spec_.published.empty());
  EXPECT_FALSE(spec_.published[0].nearest);
  EXPECT_EQ(compute_comparisons(spec_, results)[0].note, "");
  const double a = results[0]->metrics.at("flops_per_iteration"), b = results[1]->metrics.at("flops_per_iteration");
  PublishedValue pv;
  pv.label = "nearest";
  pv.metric = "flops_per_iteration";
  pv.kind = "value";
  pv.nearest = true;
  pv.published = 0.4 * a + 0.6 * b;
  pv.tolerance_rel = 0.5;
  spec_.published = {pv};
  auto comps = compute_comparisons(spec_, results);
  ASSERT_EQ(comps.size(), 1u);
  ASSERT_TRUE(comps[0].reproduced.has_value()) << comps[0].note;
  EXPECT_EQ(*comps[0].reproduced, b);
  EXPECT_NE(comps[0].note.find("nearest of the 3 selected points: case=b/"), std::string::npos) << comps[0].note;
  EXPECT_EQ(comps[0].select["case"], "b");
  // Only the infeasible case selected: one comparison, no value, the note says why.
  spec_.published[0].select.case_name = "odd";
  comps = compute_comparisons(spec_, results);
  ASSERT_EQ(comps.size(), 1u);
  EXPECT_FALSE(comps[0].reproduced.has_value());
  EXPECT_NE(comps[0].note.find("none of the 1 selected points ran"), std::string::npos) << comps[0].note;
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

TEST_F(ResultsTest, SeveralBatchesAreEachPlannedAndTheirMetricsCombined) {
  json j = {
      {"description", "batches test"},
      {"hardware", "a100_80gb_p4de"},
      {"model", "dcp_micro_attention"},
      {"workload", {{"dataset", "long_data_collections"}, {"global_batch_tokens", 16384}, {"max_length", 16384},
                    {"overlong", "drop"}, {"min_fill", 0.75}}},
      {"parallel", {{"num_gpus", 8}, {"cp", 8}, {"dtype", "bf16"}}},
      {"strategies", {{{"name", "cp_attention"}, {"set", {{"parallel.attention_layout", "zigzag"}}}}}},
      {"cases", {{{"name", "one"}}, {{"name", "four"}, {"workload", {{"batches", 4}}}}}},
      {"metrics", {"attention_time_s", "tokens_per_iteration"}},
  };
  std::ofstream(dir_ / "batches.json") << j.dump(2);
  auto spec = load_spec(dir_ / "batches.json", "t/batches", SpecOptions{default_experiments_dir(), {}, {}});
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  ASSERT_EQ(spec->points.size(), 2u);
  const PointResult one = run_point(spec->points[0], {}), four = run_point(spec->points[1], {});
  ASSERT_EQ(one.status, "ok") << one.reason;
  ASSERT_EQ(four.status, "ok") << four.reason;
  EXPECT_EQ(four.reason.rfind("mean of 4 batches", 0), 0u) << four.reason;
  // The tokens are the mean over the four batches the workload draws, the first of them one's.
  const auto batches = spec->points[1].workload.all_batches();
  ASSERT_EQ(batches.size(), 4u);
  double tokens = 0;
  for (const auto& b : batches) tokens += static_cast<double>(b.total_tokens());
  EXPECT_DOUBLE_EQ(four.metrics.at("tokens_per_iteration"), tokens / 4);
  EXPECT_DOUBLE_EQ(one.metrics.at("tokens_per_iteration"), static_cast<double>(batches[0].total_tokens()));
  EXPECT_NE(four.metrics.at("attention_time_s"), one.metrics.at("attention_time_s"));
}

TEST_F(ResultsTest, BestIsTheShortestTimeOrTheHighestRateAndAValueMayTakeIt) {
  json j = {
      {"description", "best test"},
      {"hardware", "a100_80gb_p4de"},
      {"model", "dcp_micro_attention"},
      {"workload", {{"dataset", "long_data_collections"}, {"global_batch_tokens", 16384}, {"max_length", 16384}}},
      {"parallel", {{"num_gpus", 8}, {"cp", 8}, {"dtype", "bf16"}}},
      {"strategies", {{{"name", "cp_attention"}, {"label", "ring"}, {"set", {{"parallel.attention_layout", "ring"}}}},
                      {{"name", "cp_attention"}, {"label", "zigzag"}, {"set", {{"parallel.attention_layout", "zigzag"}}}}}},
      {"metrics", {"attention_time_s", "attention_tflops_per_gpu"}},
      {"published",
       {{"values", {{{"label", "best time"}, {"metric", "attention_time_s"}, {"value", 0.001},
                     {"strategy", {"ring", "zigzag"}}, {"best", true}}}},
        {"ratios", {{{"label", "best rate / ring"}, {"metric", "attention_tflops_per_gpu"}, {"value", 1.0},
                     {"numerator", {{"strategy", {"ring", "zigzag"}}, {"best", true}}},
                     {"denominator", {{"strategy", "ring"}}}}}}}},
  };
  std::ofstream(dir_ / "best.json") << j.dump(2);
  auto spec = load_spec(dir_ / "best.json", "t/best", SpecOptions{default_experiments_dir(), {}, {}});
  ASSERT_TRUE(spec.ok()) << spec.error_str();
  PointResults r;
  for (const auto& p : spec->points) r.push_back(run_point(p, {}));
  const double ring = r[0]->metrics.at("attention_time_s"), zigzag = r[1]->metrics.at("attention_time_s");
  ASSERT_NE(ring, zigzag);
  const auto comps = compute_comparisons(*spec, r);
  ASSERT_EQ(comps.size(), 2u);  // the value is one comparison, not one per point
  EXPECT_DOUBLE_EQ(*comps[0].reproduced, std::min(ring, zigzag));
  const double best_rate = std::max(r[0]->metrics.at("attention_tflops_per_gpu"), r[1]->metrics.at("attention_tflops_per_gpu"));
  EXPECT_DOUBLE_EQ(*comps[1].reproduced, best_rate / r[0]->metrics.at("attention_tflops_per_gpu"));
}

}  // namespace
}  // namespace cpbench

namespace cpbench {
namespace {

// Every committed results file reads back as `cpbench show` and `--resume` read it (a results
// file only `run` can write and nothing can read is a defect this test catches).
TEST(CommittedResults, EveryResultsFileValidates) {
  const fs::path root = fs::path(CPBENCH_SOURCE_DIR) / "results";
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename() != "results.json") continue;
    ++files;
    auto j = load_json_file(e.path());
    ASSERT_TRUE(j.ok()) << j.error_str();
    auto v = validate_results_json(*j, e.path().string());
    EXPECT_TRUE(v.ok()) << v.error_str();
  }
  EXPECT_GT(files, 20u);
}

}  // namespace
}  // namespace cpbench
