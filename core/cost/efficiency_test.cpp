// efficiency_test.cpp — every shipped preset has a complete, sourced "efficiency" object, and a
// bad one (bare number, missing source, unknown key, out of range, missing key) is an error
// naming the file and the JSON pointer.
#include "core/cost/efficiency.h"

#include <gtest/gtest.h>

#include "core/cost/cost_model.h"

namespace cpbench {
namespace {

const std::filesystem::path kHardware =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/hardware";

TEST(Efficiency, EveryShippedPresetParsesWithASourceForEveryConstant) {
  int presets = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kHardware)) {
    if (entry.path().extension() != ".json") continue;
    auto model = load_cost_model(entry.path());
    if (auto c = load_hardware(entry.path()); c && c->efficiency->empty() && c->reconfiguration.present) {
      // A reconfiguration-only stack: no iteration model, refused naming a missing constant.
      ASSERT_FALSE(model.ok()) << entry.path();
      EXPECT_NE(model.error_str().find("/efficiency/gemm_peak_fraction: missing required key"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(model.ok()) << model.error_str();
    const EfficiencyParams& p = model->params();
    EXPECT_EQ(p.sources.size(), efficiency_param_table().size()) << entry.path();
    for (const auto& [key, source] : p.sources) EXPECT_FALSE(source.text.empty()) << key;
    // Achievable rates are below the datasheet's. A preset measured by `calibrate --local` takes
    // its peak and bandwidth from the best measurement itself, so its fractions may reach 1.
    const bool measured_peak = model->cluster().sources.at("gpu/peak_dense_tflops").text.find("calibrate --local") != std::string::npos;
    EXPECT_LE(p.gemm_peak_fraction, 1);
    EXPECT_LE(p.hbm_efficiency, 1);
    if (!measured_peak) {
      EXPECT_LT(p.gemm_peak_fraction, 1) << entry.path();
      EXPECT_LT(p.hbm_efficiency, 1) << entry.path();
    }
    EXPECT_LT(p.nvlink_busbw_efficiency, 1);
    EXPECT_LT(p.network_busbw_efficiency, 1);
    // A pair's send/recv cannot beat what the collectives draw from the same NIC.
    EXPECT_LE(p.network_p2p_efficiency, p.network_busbw_efficiency);
    // NCCL's LL protocol trades bandwidth for latency: its step latency is the lower one.
    EXPECT_LT(p.nvlink_ll_step_latency_us, p.nvlink_step_latency_us);
    EXPECT_LT(p.network_ll_step_latency_us, p.network_step_latency_us);
    ++presets;
  }
  EXPECT_GE(presets, 6);  // five datasheet presets and the measured cpu_local
}

// The shipped A100 values, checked against the published figures they cite.
TEST(Efficiency, A100PresetMatchesItsSources) {
  auto model = load_cost_model(kHardware / "a100_80gb_dgx.json");
  ASSERT_TRUE(model.ok()) << model.error_str();
  const EfficiencyParams& p = model->params();
  // nccl-tests ≈ 230 GB/s all-reduce busbw of 300 GB/s NVLink per direction.
  EXPECT_NEAR(p.nvlink_busbw_efficiency * 300, 230, 5);
  // NCCL tuning.cc hwLat[NVLINK][Ring]: LL 0.47 µs, Simple 3.4 µs.
  EXPECT_EQ(p.nvlink_ll_step_latency_us, 0.47);
  EXPECT_EQ(p.nvlink_step_latency_us, 3.4);
  // 16 exp2/clk/SM × 108 SMs × 1.41 GHz.
  EXPECT_NEAR(p.sfu_exp_rate_Tps, 16 * 108 * 1.41e9 / 1e12, 0.01);
}

class BadEfficiency : public ::testing::Test {
 protected:
  Errors parse(const json& efficiency) {
    json full = json::object();
    for (const auto& info : efficiency_param_table())
      full[info.key] = {{"value", info.lo}, {"source", "test"}};
    for (const auto& [key, value] : efficiency.items()) {
      if (value.is_null())
        full.erase(key);
      else
        full[key] = value;
    }
    ClusterSpec cluster;
    cluster.name = "test_cluster";
    cluster.efficiency = shared_json(full);
    CostModel model(cluster, "experiments/hardware/test_cluster.json");
    return model.status().ok() ? Errors{} : model.status().errors();
  }
  void expect_error(const json& efficiency, const std::string& pointer, const std::string& text) {
    const Errors errors = parse(efficiency);
    ASSERT_EQ(errors.list.size(), 1u) << errors.str();
    EXPECT_EQ(errors.list[0].file, "experiments/hardware/test_cluster.json");
    EXPECT_EQ(errors.list[0].pointer, pointer);
    EXPECT_NE(errors.list[0].message.find(text), std::string::npos) << errors.list[0].message;
  }
};

TEST_F(BadEfficiency, CompleteObjectIsAccepted) { EXPECT_TRUE(parse(json::object()).list.empty()); }

TEST_F(BadEfficiency, BareNumberNeedsASource) {
  expect_error({{"hbm_efficiency", 0.9}}, "/efficiency/hbm_efficiency", "cites its source");
}

TEST_F(BadEfficiency, MissingSource) {
  expect_error({{"hbm_efficiency", {{"value", 0.9}}}}, "/efficiency/hbm_efficiency/source",
               "missing \"source\"");
}

TEST_F(BadEfficiency, EmptySource) {
  expect_error({{"hbm_efficiency", {{"value", 0.9}, {"source", ""}}}},
               "/efficiency/hbm_efficiency/source", "non-empty string");
}

TEST_F(BadEfficiency, UnknownKey) {
  expect_error({{"gemm_fudge", {{"value", 1}, {"source", "x"}}}}, "/efficiency/gemm_fudge",
               "unknown key \"gemm_fudge\"");
}

TEST_F(BadEfficiency, FractionAboveOne) {
  const Errors errors = parse({{"gemm_peak_fraction", {{"value", 1.2}, {"source", "x"}}}});
  ASSERT_EQ(errors.list.size(), 1u) << errors.str();
  EXPECT_EQ(errors.list[0].pointer, "/efficiency/gemm_peak_fraction/value");
}

TEST_F(BadEfficiency, WrongType) {
  const Errors errors = parse({{"pcie_latency_us", {{"value", "8"}, {"source", "x"}}}});
  ASSERT_EQ(errors.list.size(), 1u) << errors.str();
  EXPECT_EQ(errors.list[0].pointer, "/efficiency/pcie_latency_us/value");
}

TEST_F(BadEfficiency, MissingConstantIsNotDefaulted) {
  expect_error({{"network_step_latency_us", nullptr}}, "/efficiency/network_step_latency_us",
               "missing required key");
}

TEST_F(BadEfficiency, CreateReturnsTheErrorsAndLoadNamesThePresetFile) {
  ClusterSpec cluster;
  cluster.name = "empty";
  auto model = CostModel::create(cluster);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.errors().list.size(), efficiency_param_table().size());
  EXPECT_EQ(model.errors().list[0].file, "hardware preset \"empty\"");
}

TEST(Efficiency, RoundTripsThroughJson) {
  auto model = load_cost_model(kHardware / "h100_dgx.json");
  ASSERT_TRUE(model.ok()) << model.error_str();
  Diagnostics diag("round trip");
  const json j = efficiency_to_json(model->params());
  JsonObject o(j, "/efficiency", diag);
  const EfficiencyParams back = parse_efficiency(o);
  ASSERT_TRUE(diag.ok()) << diag.errors().str();
  for (const auto& info : efficiency_param_table())
    EXPECT_EQ(back.*info.member, model->params().*info.member) << info.key;
  EXPECT_EQ(back.sources, model->params().sources);
}

}  // namespace
}  // namespace cpbench
