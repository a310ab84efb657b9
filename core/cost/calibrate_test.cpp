// calibrate_test.cpp — calibration recovers a stack's known constants from measurements the model
// itself generated; the one-object form (machine + stack, as cpu_local is measured) fits the same;
// measurement files parse, and bad lines are errors naming the file and the line.
#include "core/cost/calibrate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/cost/cost_test_util.h"

namespace cpbench {
namespace {

const std::filesystem::path kPreset =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/hardware/a100_80gb_dgx.json";
const std::filesystem::path kStack =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/stacks/megatron_sc21_a100.json";

// Known constants, each well away from the shipped preset's value.
EfficiencyParams truth() {
  EfficiencyParams p;
  p.gemm_peak_fraction = 0.7;
  p.gemm_tile_overhead_k = 200;
  p.kernel_overhead_us = 5;
  p.hbm_efficiency = 0.8;
  p.attention_fwd_peak_fraction = 0.75;
  p.attention_bwd_peak_fraction = 0.55;
  p.sfu_exp_rate_Tps = 3.0;
  p.attention_row_overhead_keys = 100;
  p.attention_bwd_row_overhead_keys = 250;
  p.nvlink_busbw_efficiency = 0.7;
  p.nvlink_step_latency_us = 5;
  p.nvlink_ll_step_latency_us = 1;
  p.network_busbw_efficiency = 0.85;
  p.network_step_latency_us = 10;
  p.network_ll_step_latency_us = 4;
  // The preset's (megatron_sc21_a100, NCCL 2.7's tuning model): no op family fits them.
  p.network_post_overhead_us = 0;
  p.nccl_base_latency_us = 8.4;
  p.nccl_ll_base_latency_us = 3.6;
  p.network_p2p_efficiency = 0.5;
  p.pcie_efficiency = 0.7;
  p.pcie_latency_us = 12;
  return p;
}

std::vector<OpMeasurement> synthetic(const CostModel& model) {
  std::vector<OpMeasurement> out;
  auto add = [&](const std::string& op, std::map<std::string, double> shape) {
    OpMeasurement m{op, std::move(shape), 0};
    m.time_s = predict_time_s(model, m);
    out.push_back(m);
  };
  for (double s : {256, 512, 1024, 2048, 4096, 8192}) {
    add("gemm", {{"m", s}, {"n", s}, {"k", s}});
    add("gemm", {{"m", 4 * s}, {"n", 2048}, {"k", 256}});
    add("gemm", {{"m", 128}, {"n", 128}, {"k", 64}, {"batch", s}});
  }
  for (double bytes = 1e3; bytes < 1e10; bytes *= 10) add("memory_bound", {{"bytes", bytes}});
  for (double d : {64, 128, 256})
    for (double L : {256, 1024, 4096, 16384}) {
      const std::map<std::string, double> shape = {
          {"pairs", 65536 / L * L * (L + 1) / 2}, {"heads", 16}, {"head_dim", d}, {"mean_len", L}};
      add("flash_attention_fwd", shape);
      add("flash_attention_bwd", shape);
    }
  for (double bytes = 1e2; bytes < 1e10; bytes *= 4) {
    add("p2p_nvlink", {{"bytes", bytes}});
    add("p2p_network", {{"bytes", bytes}});
    add("p2p_pcie", {{"bytes", bytes}});
    add("all_reduce", {{"bytes", bytes}, {"size", 8}, {"ranks_per_node", 8}});
    add("all_gather", {{"bytes", bytes}, {"size", 4}, {"ranks_per_node", 8}});
    add("all_reduce", {{"bytes", bytes}, {"size", 32}, {"ranks_per_node", 8}});
    add("reduce_scatter", {{"bytes", bytes}, {"size", 16}, {"ranks_per_node", 2}});
  }
  return out;
}

TEST(Calibrate, TooFewMeasurementsOrAbsurdShapesAreErrors) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok()) << cluster.error_str();
  auto preset = load_json_file(kStack);
  ASSERT_TRUE(preset.ok());
  // One GEMM cannot pin three GEMM constants.
  const OpMeasurement one{"gemm", {{"m", 4096}, {"n", 4096}, {"k", 4096}}, 1e-3};
  auto fitted = calibrate_stack(*cluster, *preset, {one}, "one.csv");
  ASSERT_FALSE(fitted.ok());
  EXPECT_NE(fitted.error_str().find("the gemm family has 1 measurement for"), std::string::npos) << fitted.error_str();
  // A shape past 2^53 is no shape.
  const OpMeasurement huge{"gemm", {{"m", 4096}, {"n", 4096}, {"k", 1e20}}, 1e-3};
  EXPECT_NE(validate_measurement(huge).find("key \"k\" is 1e+20, over 2^53"), std::string::npos) << validate_measurement(huge);
}

TEST(Calibrate, RecoversKnownConstantsFromSyntheticMeasurements) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok()) << cluster.error_str();
  const auto measurements = synthetic(CostModel(*cluster, truth()));
  auto preset = load_json_file(kStack);
  ASSERT_TRUE(preset.ok());
  auto fitted = calibrate_stack(*cluster, *preset, measurements, "synthetic.csv");
  ASSERT_TRUE(fitted.ok()) << fitted.error_str();

  ClusterSpec fitted_cluster = *cluster;
  fitted_cluster.efficiency = shared_json((*fitted)["efficiency"]);
  auto recovered = CostModel::create(fitted_cluster, "fitted");
  ASSERT_TRUE(recovered.ok()) << recovered.error_str();
  const EfficiencyParams want = truth();
  for (const auto& info : efficiency_param_table()) {
    const std::string key = info.key;
    // No op measurement constrains them: host time (per kernel and per module call), contention, what a NIC carries over several
    // flows (a p2p_network row is one flow), and NCCL's network post overhead and base latencies
    // (its tuning model's constants, not separable from the step latencies).
    if (key == "host_op_us" || key == "host_module_us" || key == "comm_sm_fraction" || key == "network_nic_efficiency" ||
        key == "network_post_overhead_us" || key == "nccl_base_latency_us" || key == "nccl_ll_base_latency_us") {
      EXPECT_EQ(recovered->params().*info.member, (*preset)["efficiency"][key]["value"].get<double>()) << key;
      EXPECT_EQ(recovered->params().sources.at(key).text.rfind("fitted", 0), std::string::npos);
      continue;
    }
    const double got = recovered->params().*info.member, expected = want.*info.member;
    EXPECT_NEAR(got, expected, 0.02 * expected) << info.key;
    if (key == "attention_exp_overlap") {  // a fact of the kernel design, never fitted
      EXPECT_EQ(recovered->params().sources.at(info.key).text.rfind("fitted", 0), std::string::npos);
      continue;
    }
    EXPECT_EQ(recovered->params().sources.at(info.key).text.rfind(
                  "fitted by cpbench calibrate from synthetic.csv (", 0),
              0u)
        << info.key << ": " << recovered->params().sources.at(info.key).text;
    EXPECT_EQ(recovered->params().sources.at(info.key).kind, "device_measurement") << info.key;
    // The source gives the fit's error and, larger, the stack's own before it (the synthetic
    // truth differs from the preset; the fit recovers it almost exactly).
    const std::string& src = recovered->params().sources.at(info.key).text;
    const auto after = src.find("rms log error "), before = src.find(" with the stack's values before the fit");
    ASSERT_NE(after, std::string::npos) << src;
    ASSERT_NE(before, std::string::npos) << src;
    const double fit_rms = std::stod(src.substr(after + 14));
    const double start_rms = std::stod(src.substr(src.rfind("; ", before) + 2));
    EXPECT_LT(fit_rms, start_rms) << src;
  }
  // The rest of the stack (name, memory, fit records) is untouched.
  json rest = *fitted, original = *preset;
  rest.erase("efficiency");
  original.erase("efficiency");
  EXPECT_EQ(rest, original);
}

// The per-family report calibrate prints: the fitted stack predicts the synthetic measurements of
// every family almost exactly, the shipped stack does not; a measurement doubled is the worst of
// its family, named with its shape, at predicted / measured = 0.5.
TEST(Calibrate, OpFamilyErrorsNameEachFamilysWorstMeasurement) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok()) << cluster.error_str();
  auto measurements = synthetic(CostModel(*cluster, truth()));
  auto preset = load_json_file(kStack);
  ASSERT_TRUE(preset.ok());
  auto fitted = calibrate_stack(*cluster, *preset, measurements, "synthetic.csv");
  ASSERT_TRUE(fitted.ok()) << fitted.error_str();
  auto before = op_family_errors(*cluster, *preset, measurements);
  auto after = op_family_errors(*cluster, *fitted, measurements);
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_EQ(before->size(), after->size());
  std::set<std::string> families;
  for (size_t i = 0; i < after->size(); ++i) {
    families.insert((*after)[i].family);
    EXPECT_GT((*after)[i].n, 0u);
    EXPECT_LT((*after)[i].rms_log, 0.01) << (*after)[i].family;
    EXPECT_GT((*before)[i].rms_log, (*after)[i].rms_log) << (*before)[i].family;
  }
  EXPECT_TRUE(families.count("gemm") && families.count("attention_bwd") && families.count("network"));
  for (auto& m : measurements)
    if (m.op == "gemm" && m.shape.at("m") == 1024 && m.shape.at("n") == 1024) m.time_s *= 2;
  auto doubled = op_family_errors(*cluster, *fitted, measurements);
  ASSERT_TRUE(doubled.ok());
  EXPECT_EQ(doubled->front().family, "gemm");
  EXPECT_NEAR(doubled->front().worst_ratio, 0.5, 0.01);
  EXPECT_EQ(doubled->front().worst, "gemm k=1.02e+03;m=1.02e+03;n=1.02e+03");
  const std::string table = format_family_errors(*before, *doubled);
  EXPECT_NE(table.find("gemm"), std::string::npos);
  EXPECT_NE(table.find("0.50 (gemm k=1.02e+03;m=1.02e+03;n=1.02e+03)"), std::string::npos) << table;
}

TEST(Calibrate, ConstantsWithoutMeasurementsKeepValueAndSource) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok());
  // Only large PCIe copies: the efficiency is determined, the latency barely and nothing else.
  std::vector<OpMeasurement> measurements;
  for (double bytes : {1e8, 1e9, 1e10})
    measurements.push_back({"p2p_pcie", {{"bytes", bytes}}, bytes / (32e9 * 0.6)});
  auto preset = load_json_file(kStack);
  auto fitted = calibrate_stack(*cluster, *preset, measurements, "pcie.csv");
  ASSERT_TRUE(fitted.ok()) << fitted.error_str();
  const json& e = (*fitted)["efficiency"];
  EXPECT_NEAR(e["pcie_efficiency"]["value"].get<double>(), 0.6, 0.01);
  EXPECT_EQ(e["gemm_peak_fraction"], (*preset)["efficiency"]["gemm_peak_fraction"]);
  EXPECT_EQ(e["nvlink_step_latency_us"], (*preset)["efficiency"]["nvlink_step_latency_us"]);
}

// A constant whose starting value sits on its bound (a fraction of 1.0, as cpu_local's backward
// peak fraction once was) is still fitted: the search steps into the allowed range instead of
// stopping on a flat first step.
TEST(Calibrate, AConstantStartingAtItsBoundIsFitted) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok());
  auto preset = load_json_file(kStack);
  ASSERT_TRUE(preset.ok());
  (*preset)["efficiency"]["pcie_efficiency"]["value"] = 1.0;  // the upper bound
  std::vector<OpMeasurement> measurements;
  for (double bytes : {1e8, 1e9, 1e10})
    measurements.push_back({"p2p_pcie", {{"bytes", bytes}}, bytes / (32e9 * 0.6)});
  auto fitted = calibrate_stack(*cluster, *preset, measurements, "pcie.csv");
  ASSERT_TRUE(fitted.ok()) << fitted.error_str();
  EXPECT_NEAR((*fitted)["efficiency"]["pcie_efficiency"]["value"].get<double>(), 0.6, 0.01);
}

TEST(Calibrate, SendRecvAloneFitsItsBandwidthAndTheLatency) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok());
  // Inter-node send/recv only, 30 µs + bytes at 0.4 of the 25 GB/s NIC: no collective fixes
  // the network latency first, so the send/recv family fits it too.
  std::vector<OpMeasurement> measurements;
  for (double bytes = 1e6; bytes < 1e10; bytes *= 4)
    measurements.push_back({"p2p_network", {{"bytes", bytes}}, 30e-6 + bytes / (25e9 * 0.4)});
  auto preset = load_json_file(kStack);
  auto fitted = calibrate_stack(*cluster, *preset, measurements, "sendrecv.csv");
  ASSERT_TRUE(fitted.ok()) << fitted.error_str();
  const json& e = (*fitted)["efficiency"];
  EXPECT_NEAR(e["network_p2p_efficiency"]["value"].get<double>(), 0.4, 0.01);
  EXPECT_NEAR(e["network_step_latency_us"]["value"].get<double>(), 30, 3);
  EXPECT_EQ(e["network_busbw_efficiency"], (*preset)["efficiency"]["network_busbw_efficiency"]);
}

// A machine and its stack in one object (what core/runtime/local_measure writes for cpu_local)
// fit exactly as the two presets do, and every machine fact is kept.
TEST(Calibrate, OneObjectFormFitsLikeTheStack) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok()) << cluster.error_str();
  auto machine = load_json_file(kPreset);
  auto stack = load_json_file(kStack);
  ASSERT_TRUE(machine.ok() && stack.ok());
  std::vector<OpMeasurement> measurements;
  for (double bytes : {1e8, 1e9, 1e10})
    measurements.push_back({"memory_bound", {{"bytes", bytes}}, 5e-6 + bytes / (2039e9 * 0.7)});
  json one = *machine;
  one.erase("default_stack");
  one["memory"] = (*stack)["memory"];
  one["efficiency"] = (*stack)["efficiency"];
  auto from_one = calibrate_preset(one, measurements, "m.csv");
  auto from_stack = calibrate_stack(*cluster, *stack, measurements, "m.csv");
  ASSERT_TRUE(from_one.ok()) << from_one.error_str();
  ASSERT_TRUE(from_stack.ok()) << from_stack.error_str();
  EXPECT_EQ((*from_one)["efficiency"], (*from_stack)["efficiency"]);
  EXPECT_NEAR((*from_one)["efficiency"]["hbm_efficiency"]["value"].get<double>(), 0.7, 0.01);
  EXPECT_EQ((*from_one)["gpu"], (*machine)["gpu"]);
  EXPECT_EQ((*from_stack)["fits"], (*stack)["fits"]);
}

TEST(Calibrate, RejectsABadPresetOrMeasurement) {
  auto cluster = load_hardware(kPreset);
  ASSERT_TRUE(cluster.ok());
  auto preset = load_json_file(kStack);
  json bad = *preset;
  bad["efficiency"].erase("hbm_efficiency");
  bad.erase("fits");  // which names hbm_efficiency too
  auto r = calibrate_stack(*cluster, bad, {{"memory_bound", {{"bytes", 1e9}}, 1e-3}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/efficiency/hbm_efficiency");
  auto m = calibrate_stack(*cluster, *preset, {{"gemm", {{"m", 8}}, 1e-3}}, "x.csv");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error_str().find("needs key \"n\""), std::string::npos) << m.error_str();
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

TEST(Calibrate, ConstantsThisFitPinnedAtABoundAreNamed) {
  const std::string mine = fitted_source_prefix("m.csv");
  const json efficiency = {
      {"gemm_peak_fraction", {{"value", 1.0}, {"source", mine + "3 measurements)"}}},          // upper bound
      {"kernel_overhead_us", {{"value", 8.6e-14}, {"source", mine + "3 measurements)"}}},      // towards 0
      {"hbm_efficiency", {{"value", 0.01}, {"source", mine + "3 measurements)"}}},             // lower bound
      {"sfu_exp_rate_Tps", {{"value", 0.24}, {"source", mine + "3 measurements)"}}},           // inside
      {"pcie_efficiency", {{"value", 1.0}, {"source", "datasheet"}}},                           // not fitted
      {"nvlink_busbw_efficiency", {{"value", 1.0}, {"source", fitted_source_prefix("old.csv")}}}};  // earlier fit
  const auto why = fitted_constants_at_bounds(efficiency, mine);
  ASSERT_EQ(why.size(), 3u);
  EXPECT_EQ(why[0].rfind("gemm_peak_fraction = 1 is at the upper bound of its range [0.01, 1]", 0), 0u) << why[0];
  EXPECT_EQ(why[1].rfind("kernel_overhead_us = 8.6e-14 is at the lower bound", 0), 0u) << why[1];
  EXPECT_EQ(why[2].rfind("hbm_efficiency = 0.01 is at the lower bound", 0), 0u) << why[2];
}

TEST(Measurements, CsvParses) {
  const auto path = write_temp("cpbench_measurements_ok.csv",
                               "op,shape,time_s\n"
                               "# a comment\n"
                               "gemm,m=8192;n=8192;k=8192,0.00441\n"
                               "\n"
                               "all_reduce, bytes=268435456; size=8; ranks_per_node=8 ,2.05e-3\n");
  auto m = load_measurements(path);
  ASSERT_TRUE(m.ok()) << m.error_str();
  ASSERT_EQ(m->size(), 2u);
  EXPECT_EQ((*m)[0].op, "gemm");
  EXPECT_EQ((*m)[0].shape.at("k"), 8192);
  EXPECT_EQ((*m)[0].time_s, 0.00441);
  EXPECT_EQ((*m)[1].shape.at("ranks_per_node"), 8);
  EXPECT_EQ((*m)[1].time_s, 2.05e-3);
}

TEST(Measurements, BadLinesNameFileAndLine) {
  const auto path = write_temp("cpbench_measurements_bad.csv",
                               "gemm,m=1;n=2;k=3,1e-3\n"
                               "gemmm,m=1;n=2;k=3,1e-3\n"
                               "gemm,m=1;n=2,1e-3\n"
                               "memory_bound,bytes=10;color=3,1e-3\n"
                               "memory_bound,bytes=ten,1e-3\n"
                               "memory_bound,bytes=10,-1\n"
                               "just one field\n");
  auto m = load_measurements(path);
  ASSERT_FALSE(m.ok());
  const auto& list = m.errors().list;
  ASSERT_EQ(list.size(), 6u) << m.error_str();
  EXPECT_EQ(list[0].file, path.string());
  EXPECT_NE(list[0].message.find("line 2: unknown op \"gemmm\""), std::string::npos);
  EXPECT_NE(list[1].message.find("line 3: op \"gemm\" needs key \"k\""), std::string::npos);
  EXPECT_NE(list[2].message.find("line 4: unknown key \"color\""), std::string::npos);
  EXPECT_NE(list[3].message.find("line 5: expected key=value"), std::string::npos);
  EXPECT_NE(list[4].message.find("line 6: time_s must be positive"), std::string::npos);
  EXPECT_NE(list[5].message.find("line 7: expected op,"), std::string::npos);
  EXPECT_FALSE(load_measurements(path.string() + ".missing").ok());
}

}  // namespace
}  // namespace cpbench
