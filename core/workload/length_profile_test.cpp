// length_profile_test.cpp — parsing of every profile kind, errors that name file and JSON pointer,
// and every shipped preset in experiments/datasets/ loading with provenance and assumptions.
#include "core/workload/length_profile.h"

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/workload/length_stats.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

class LengthProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpbench_length_profile_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  // A preset file around `body` (the kind and its keys).
  fs::path preset(const std::string& name, const std::string& body) {
    return write(name + ".json", R"({"name": ")" + name + R"(", "provenance": "test", "assumptions": ["none"],
      "min_length_tokens": 1, "max_length_tokens": 131072, )" + body + "}");
  }

  // Expects loading to fail with an error at `pointer` of `file` whose message contains `text`.
  static void expect_error(const fs::path& file, const std::string& pointer, const std::string& text,
                           const fs::path& error_file = {}) {
    auto p = load_length_profile(file);
    ASSERT_FALSE(p.ok()) << "expected an error at " << pointer;
    std::string want_file = (error_file.empty() ? file : error_file).string();
    for (const auto& e : p.errors().list)
      if (e.file == want_file && e.pointer == pointer && e.message.find(text) != std::string::npos) return;
    ADD_FAILURE() << "no error at " << want_file << ": " << pointer << " containing \"" << text << "\"; got:\n"
                  << p.error_str();
  }

  fs::path dir_;
};

TEST_F(LengthProfileTest, ParsesFixed) {
  auto p = load_length_profile(preset("f", R"("kind": "fixed", "length_tokens": 2048)"));
  ASSERT_TRUE(p.ok()) << p.error_str();
  EXPECT_EQ(p->name, "f");
  EXPECT_EQ(p->distribution.kind, LengthKind::fixed);
  EXPECT_EQ(p->distribution.length_tokens, 2048);
  EXPECT_EQ(p->min_length, 1);
  EXPECT_EQ(p->max_length, 131072);
  EXPECT_EQ(p->assumptions, std::vector<std::string>{"none"});
}

TEST_F(LengthProfileTest, LognormalMedianAndMeanParametrisationsAgree) {
  auto by_median = load_length_profile(preset("m", R"("kind": "lognormal", "median_tokens": 1000, "sigma": 0.8)"));
  ASSERT_TRUE(by_median.ok()) << by_median.error_str();
  EXPECT_NEAR(by_median->distribution.log_median, std::log(1000.0), 1e-12);
  EXPECT_DOUBLE_EQ(by_median->distribution.sigma, 0.8);
  // mean = median · e^(sigma²/2).
  double mean = 1000 * std::exp(0.5 * 0.8 * 0.8);
  auto by_mean = load_length_profile(
      preset("n", R"("kind": "lognormal", "mean_tokens": )" + std::to_string(mean) + R"(, "sigma": 0.8)"));
  ASSERT_TRUE(by_mean.ok()) << by_mean.error_str();
  EXPECT_NEAR(by_mean->distribution.log_median, std::log(1000.0), 1e-9);
  EXPECT_NEAR(profile_mean_tokens(*by_mean), mean, 1e-6 * mean);
}

TEST_F(LengthProfileTest, ParsesParetoAndMixture) {
  auto p = load_length_profile(preset("x", R"("kind": "mixture", "components": [
      {"weight": 3, "label": "short", "kind": "lognormal", "median_tokens": 500, "sigma": 1},
      {"weight": 1, "kind": "pareto", "scale_tokens": 8192, "alpha": 1.5}])"));
  ASSERT_TRUE(p.ok()) << p.error_str();
  const auto& d = p->distribution;
  ASSERT_EQ(d.kind, LengthKind::mixture);
  ASSERT_EQ(d.components.size(), 2u);
  EXPECT_DOUBLE_EQ(d.weights[0], 0.75);  // weights are normalised
  EXPECT_DOUBLE_EQ(d.weights[1], 0.25);
  EXPECT_EQ(d.labels[0], "short");
  EXPECT_EQ(d.components[1].kind, LengthKind::pareto);
  EXPECT_DOUBLE_EQ(d.components[1].scale_tokens, 8192);
  EXPECT_DOUBLE_EQ(d.components[1].alpha, 1.5);
  // Mixture mean = Σ w·mean: 0.75·500·e^0.5 + 0.25·1.5·8192/0.5.
  EXPECT_NEAR(profile_mean_tokens(*p), 0.75 * 500 * std::exp(0.5) + 0.25 * 24576, 1e-6);
}

TEST_F(LengthProfileTest, ParsesEmpiricalBinsAndLengthsFile) {
  auto bins = load_length_profile(preset("b", R"("kind": "empirical", "bins": [[1, 10, 5], [11, 100, 2.5]])"));
  ASSERT_TRUE(bins.ok()) << bins.error_str();
  ASSERT_EQ(bins->distribution.bins.size(), 2u);
  EXPECT_EQ(bins->distribution.bins[1].lo_tokens, 11);
  EXPECT_EQ(bins->distribution.bins[1].hi_tokens, 100);
  EXPECT_DOUBLE_EQ(bins->distribution.bins[1].count, 2.5);

  fs::create_directories(dir_ / "sub");
  write("sub/lengths.txt", "# lengths of a toy corpus\n300\n\n100\n300\n  200 \n");
  auto file = load_length_profile(preset("sub/l", R"("kind": "empirical", "lengths_file": "lengths.txt")"));
  ASSERT_TRUE(file.ok()) << file.error_str();
  const auto& b = file->distribution.bins;  // one bin per distinct value, ascending
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].lo_tokens, 100);
  EXPECT_EQ(b[2].hi_tokens, 300);
  EXPECT_DOUBLE_EQ(b[2].count, 2);
  EXPECT_NEAR(profile_mean_tokens(*file), 225.0, 1e-12);
}

TEST_F(LengthProfileTest, UnknownKeyNamesFileAndPointer) {
  expect_error(preset("u", R"("kind": "lognormal", "median_tokens": 100, "sigma": 1, "alpha": 2)"), "/alpha",
               "unknown key \"alpha\"");
  expect_error(preset("u2", R"("kind": "mixture", "components": [{"weight": 1, "kind": "fixed",
               "length_tokens": 5, "lenght": 3}])"),
               "/components/0/lenght", "unknown key");
}

TEST_F(LengthProfileTest, WrongTypeNamesFileAndPointer) {
  expect_error(preset("t", R"("kind": "lognormal", "median_tokens": "100", "sigma": 1)"), "/median_tokens",
               "expected a number");
  expect_error(preset("t2", R"("kind": "empirical", "bins": [[1, 10, 5], [11, "x", 1]])"), "/bins/1/1",
               "expected an integer length");
  expect_error(write("t3.json", R"({"name": "t3", "provenance": "p", "assumptions": "one", "min_length_tokens": 1,
               "max_length_tokens": 9, "kind": "fixed", "length_tokens": 5})"),
               "/assumptions", "expected an array of strings");
}

TEST_F(LengthProfileTest, BadValueNamesFileAndPointer) {
  expect_error(preset("v", R"("kind": "pareto", "scale_tokens": 100, "alpha": -1)"), "/alpha",
               "expected a number in [0.05, 100]");
  expect_error(preset("v2", R"("kind": "mixture", "components": [{"weight": 1, "kind": "fixed", "length_tokens": 5},
               {"weight": 1, "kind": "lognormal", "median_tokens": 10, "sigma": 0}])"),
               "/components/1/sigma", "expected a number");
  expect_error(preset("v3", R"("kind": "empirical", "bins": [[1, 10, 5], [5, 20, 1]])"), "/bins/1",
               "ascending and disjoint");
  expect_error(preset("v4", R"("kind": "lognormal", "median_tokens": 10, "mean_tokens": 20, "sigma": 1)"),
               "/mean_tokens", "exactly one of");
  expect_error(preset("v5", R"("kind": "gamma")"), "/kind", "expected one of \"fixed\"");
  expect_error(preset("v6", R"("kind": "mixture", "components": [{"weight": 1, "kind": "mixture", "components": []}])"),
               "/components/0/kind", "cannot itself be a mixture");
  expect_error(write("v7.json", R"({"name": "v7", "provenance": "p", "assumptions": ["a"], "min_length_tokens": 10,
               "max_length_tokens": 5, "kind": "fixed", "length_tokens": 7})"),
               "/max_length_tokens", "≥ min_length_tokens");
}

TEST_F(LengthProfileTest, LengthsFileErrorsNameThatFileAndLine) {
  fs::path lengths = write("bad.txt", "100\n200\nabc\n");
  expect_error(preset("w", R"("kind": "empirical", "lengths_file": "bad.txt")"), "", "got \"abc\"",
               lengths.string() + ":3");
  expect_error(preset("w2", R"("kind": "empirical", "lengths_file": "missing.txt")"), "", "no such lengths file",
               dir_ / "missing.txt");
  expect_error(preset("w3", R"("kind": "empirical", "bins": [[1, 2, 1]], "order": "shuffle")"), "/order",
               "bins can only be resampled");
}

TEST_F(LengthProfileTest, PresetNeedsProvenanceAndAssumptions) {
  fs::path f = write("bare.json", R"({"name": "bare", "min_length_tokens": 1, "max_length_tokens": 2,
      "kind": "fixed", "length_tokens": 2})");
  expect_error(f, "/provenance", "needs a \"provenance\"");
  expect_error(f, "/assumptions", "non-empty \"assumptions\"");
  expect_error(write("syntax.json", "{\"name\": \n"), "", "invalid JSON at line");
}

TEST(ShippedDatasets, EveryPresetLoadsWithProvenanceAndAssumptions) {
  fs::path dir = fs::path(CPBENCH_SOURCE_DIR) / "experiments" / "datasets";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    auto p = load_length_profile(entry.path());
    ASSERT_TRUE(p.ok()) << p.error_str();
    EXPECT_EQ(p->name, entry.path().stem().string()) << "a preset's name is its file name";
    EXPECT_FALSE(p->description.empty()) << entry.path();
    EXPECT_LE(p->min_length, p->max_length);
    double mean = clipped_mean_tokens(*p);
    EXPECT_GE(mean, double(p->min_length)) << entry.path();
    EXPECT_LE(mean, double(p->max_length)) << entry.path();
    ++loaded;
  }
  // fixed_2048, four Dynamic-CP approximations, two DCP datasets, two measured profiles.
  EXPECT_GE(loaded, 9);
}

TEST(ShippedDatasets, DynamicCpLognormalIsTheBlogScriptsFallback) {
  auto p = load_length_profile(fs::path(CPBENCH_SOURCE_DIR) / "experiments/datasets/dynamic_cp_lognormal.json");
  ASSERT_TRUE(p.ok()) << p.error_str();
  EXPECT_EQ(p->min_length, 256);
  EXPECT_EQ(p->max_length, 131072);
  EXPECT_NEAR(profile_mean_tokens(*p), 16384, 1e-6);
  EXPECT_DOUBLE_EQ(p->distribution.sigma, 1.1);
}

}  // namespace
}  // namespace cpbench
