// hardware_test.cpp — every preset loads with datasheet figures (references/hardware.md), and a
// constant without a source, an unknown key or a wrong type is an error naming file and pointer.
#include "core/hardware/hardware.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>

namespace cpbench {
namespace {

const std::filesystem::path kHardware =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/hardware";

ClusterSpec preset(const std::string& name) {
  auto c = load_hardware(kHardware / (name + ".json"));
  EXPECT_TRUE(c.ok()) << c.error_str();
  return c.ok() ? *c : ClusterSpec{};
}

TEST(Hardware, EveryPresetLoadsWithASourceForEveryConstant) {
  std::set<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(kHardware)) {
    if (entry.path().extension() != ".json") continue;
    auto c = load_hardware(entry.path());
    ASSERT_TRUE(c.ok()) << c.error_str();
    EXPECT_EQ(c->name, entry.path().stem().string());
    EXPECT_TRUE(c->efficiency.is_object());
    // 6 GPU constants, 3 cluster constants, 2 memory overheads, and the derived per-GPU network
    // bandwidth.
    EXPECT_EQ(c->sources.size(), 12u) << entry.path();
    EXPECT_GE(c->memory.allocator_fragmentation, 0);
    EXPECT_LT(c->memory.allocator_fragmentation, 1);
    for (const auto& [field, source] : c->sources) EXPECT_FALSE(source.empty()) << field;
    found.insert(c->name);
  }
  for (const char* name : {"a100_80gb_dgx", "a100_40gb_p4d", "h800_kwai", "h100_dgx", "h200_sxm"})
    EXPECT_TRUE(found.count(name)) << name;
}

// references/hardware.md: NVLink figures are both directions; the presets hold one direction.
TEST(Hardware, PresetsHoldDatasheetFigures) {
  const ClusterSpec dgx = preset("a100_80gb_dgx");
  EXPECT_EQ(dgx.gpu.peak_dense_tflops, 312);
  EXPECT_EQ(dgx.gpu.hbm_bandwidth_GBps, 2039);
  EXPECT_EQ(dgx.gpu.sm_count, 108);
  EXPECT_EQ(dgx.nvlink_bandwidth_GBps(), 300);  // 600 GB/s both directions
  EXPECT_EQ(dgx.nic_bandwidth_Gbps_per_gpu, 200);
  EXPECT_EQ(dgx.network_bandwidth_GBps_per_gpu(), 25);
  EXPECT_EQ(dgx.gpu.hbm_bytes(), 80.0 * (1 << 30));
  EXPECT_EQ(dgx.gpu.peak_flops(), 312e12);

  const ClusterSpec p4d = preset("a100_40gb_p4d");
  EXPECT_EQ(p4d.gpu.hbm_gib, 40);
  EXPECT_EQ(p4d.gpu.hbm_bandwidth_GBps, 1555);
  EXPECT_EQ(p4d.nic_bandwidth_Gbps_per_gpu, 50);  // 4 × 100 Gb/s over 8 GPUs
  EXPECT_EQ(p4d.network_bandwidth_GBps_per_node(), 50);

  const ClusterSpec kwai = preset("h800_kwai");
  EXPECT_EQ(kwai.gpu.peak_dense_tflops, 989);
  EXPECT_EQ(kwai.nvlink_bandwidth_GBps(), 200);  // 400 GB/s both directions
  EXPECT_EQ(kwai.nic_bandwidth_Gbps_per_gpu, 100);
  EXPECT_EQ(kwai.pcie_bandwidth_GBps(), 64);

  const ClusterSpec h100 = preset("h100_dgx");
  EXPECT_EQ(h100.nvlink_bandwidth_GBps(), 450);
  EXPECT_EQ(h100.gpu.sm_count, 132);
  EXPECT_EQ(h100.nic_bandwidth_Gbps_per_gpu, 400);
  EXPECT_EQ(h100.nodes_for(1024), 128);
  EXPECT_EQ(h100.nodes_for(12), 2);

  const ClusterSpec h200 = preset("h200_sxm");
  EXPECT_EQ(h200.gpu.hbm_gib, 141);
  EXPECT_EQ(h200.gpu.hbm_bandwidth_GBps, 4800);
  // The network is an assumption, and the preset says so.
  EXPECT_NE(h200.sources.at("nic_bandwidth_Gbps").find("ASSUMPTION"), std::string::npos);
}

class BadHardwareFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cpbench_hardware_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The DGX A100 preset with `edit` applied, written to a file; returns its load result.
  Expected<ClusterSpec> load_edited(const std::function<void(json&)>& edit) {
    auto good = load_json_file(kHardware / "a100_80gb_dgx.json");
    EXPECT_TRUE(good.ok());
    json j = *good;
    edit(j);
    path_ = dir_ / "cluster.json";
    std::ofstream(path_) << j.dump(2);
    return load_hardware(path_);
  }

  // The single error of a load, checked to name the file.
  Error only_error(const Expected<ClusterSpec>& c) {
    EXPECT_FALSE(c.ok());
    if (c.ok()) return {};
    EXPECT_EQ(c.errors().list.size(), 1u) << c.error_str();
    EXPECT_EQ(c.errors().list[0].file, path_.string());
    return c.errors().list[0];
  }

  std::filesystem::path dir_, path_;
};

TEST_F(BadHardwareFile, MissingSourceIsAnError) {
  Error e =
      only_error(load_edited([](json& j) { j["gpu"]["hbm_bandwidth_GBps"].erase("source"); }));
  EXPECT_EQ(e.pointer, "/gpu/hbm_bandwidth_GBps/source");
  EXPECT_NE(e.message.find("every hardware constant cites"), std::string::npos) << e.message;
}

TEST_F(BadHardwareFile, EmptySourceIsAnError) {
  Error e = only_error(load_edited([](json& j) { j["nic_bandwidth_Gbps"]["source"] = ""; }));
  EXPECT_EQ(e.pointer, "/nic_bandwidth_Gbps/source");
  EXPECT_NE(e.message.find("non-empty"), std::string::npos) << e.message;
}

TEST_F(BadHardwareFile, MemoryOverheadsAreRequiredAndBounded) {
  Error e = only_error(load_edited([](json& j) { j.erase("memory"); }));
  EXPECT_EQ(e.pointer, "/memory");
  e = only_error(load_edited([](json& j) { j["memory"]["allocator_fragmentation"]["value"] = 1.0; }));
  EXPECT_EQ(e.pointer, "/memory/allocator_fragmentation/value");
}

TEST_F(BadHardwareFile, BareNumberIsAnUnsourcedConstant) {
  Error e = only_error(load_edited([](json& j) { j["gpu"]["peak_dense_tflops"] = 312; }));
  EXPECT_EQ(e.pointer, "/gpu/peak_dense_tflops");
  EXPECT_EQ(e.message,
            "expected {\"value\": <number>, \"source\": \"<citation>\"}, got an integer: "
            "every hardware constant cites its source");
}

TEST_F(BadHardwareFile, UnknownKeyIsNamed) {
  Error e = only_error(load_edited([](json& j) { j["gpu"]["nvlink_GBps"] = 1; }));
  EXPECT_EQ(e.pointer, "/gpu/nvlink_GBps");
  EXPECT_EQ(e.message.rfind("unknown key \"nvlink_GBps\"", 0), 0u) << e.message;
}

TEST_F(BadHardwareFile, UnknownKeyInsideAConstantIsNamed) {
  Error e = only_error(load_edited([](json& j) { j["gpus_per_node"]["unit"] = "GPUs"; }));
  EXPECT_EQ(e.pointer, "/gpus_per_node/unit");
}

TEST_F(BadHardwareFile, WrongTypeIsNamed) {
  Error e = only_error(load_edited([](json& j) { j["gpu"]["sm_count"]["value"] = "108"; }));
  EXPECT_EQ(e.pointer, "/gpu/sm_count/value");
  EXPECT_EQ(e.message.rfind("expected a number", 0), 0u) << e.message;
}

TEST_F(BadHardwareFile, FractionalCountIsNamed) {
  Error e = only_error(load_edited([](json& j) { j["nics_per_node"]["value"] = 2.5; }));
  EXPECT_EQ(e.pointer, "/nics_per_node/value");
  EXPECT_EQ(e.message.rfind("expected an integer", 0), 0u) << e.message;
}

TEST_F(BadHardwareFile, EfficiencyMustBeAnObject) {
  Error e = only_error(load_edited([](json& j) { j["efficiency"] = json::array(); }));
  EXPECT_EQ(e.pointer, "/efficiency");
}

TEST_F(BadHardwareFile, InvalidJsonNamesTheLine) {
  path_ = dir_ / "broken.json";
  std::ofstream(path_) << "{\n  \"name\": \"x\",\n  oops\n}\n";
  Error e = only_error(load_hardware(path_));
  EXPECT_NE(e.message.find("line 3"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace cpbench
