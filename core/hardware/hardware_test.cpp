// hardware_test.cpp — every hardware preset loads with datasheet figures (references/hardware.md)
// and its default software stack merged; hardware holds machine facts only; a stack carries its
// era's efficiencies and fit records; a constant without a source, an unknown key, a wrong type
// or a missing stack is an error naming file and pointer.
#include "core/hardware/hardware.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>

#include "core/cost/efficiency.h"

namespace cpbench {
namespace {

const std::filesystem::path kHardware =
    std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/hardware";
const std::filesystem::path kStacks = std::filesystem::path(CPBENCH_SOURCE_DIR) / "experiments/stacks";

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
    // The machine file names its stack, which is merged: every cost-model constant of the table.
    EXPECT_FALSE(c->default_stack.empty());
    EXPECT_EQ(c->stack, c->default_stack);
    EXPECT_EQ(std::filesystem::path(c->stack_file).filename(), c->stack + ".json");
    // A reconfiguration-only stack (Tenplex's state store) has no iteration constants but its two
    // reconfiguration ones.
    const bool reconfiguration_only = c->efficiency->empty() && c->reconfiguration.present;
    EXPECT_EQ(c->efficiency->size(), reconfiguration_only ? 0u : efficiency_param_table().size()) << entry.path();
    auto raw = load_json_file(entry.path());
    ASSERT_TRUE(raw.ok());
    EXPECT_FALSE(raw->contains("efficiency")) << entry.path();
    EXPECT_FALSE(raw->contains("memory")) << entry.path();
    // 6 GPU constants, 3 cluster constants, 2 memory overheads, and the derived per-GPU network
    // bandwidth.
    EXPECT_EQ(c->sources.size(), c->reconfiguration.present ? 14u : 12u) << entry.path();
    EXPECT_GE(c->memory.allocator_fragmentation, 0);
    EXPECT_LT(c->memory.allocator_fragmentation, 1);
    for (const auto& [field, source] : c->sources) {
      EXPECT_FALSE(source.text.empty()) << field;
      EXPECT_FALSE(source.kind.empty()) << entry.path() << " " << field << ": every shipped constant states its kind";
    }
    found.insert(c->name);
  }
  for (const char* name : {"a100_80gb_dgx", "a100_40gb_p4d", "h800_kwai", "h100_dgx", "h200_sxm"})
    EXPECT_TRUE(found.count(name)) << name;
}

// Every stack loads on its own, is named after its file, says which era it is, and cites a
// findable source for each constant: nothing "from memory".
TEST(Stack, EveryStackLoadsAndCitesItsSources) {
  size_t stacks = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kStacks)) {
    if (entry.path().extension() != ".json") continue;
    ++stacks;
    auto s = load_stack(entry.path());
    ASSERT_TRUE(s.ok()) << s.error_str();
    EXPECT_EQ(s->name, entry.path().stem().string());
    EXPECT_GT(s->description.size(), 40u) << s->name;
    // The memory overheads, and a reconfiguration object's two constants.
    EXPECT_EQ(s->sources.size(), s->reconfiguration.present ? 4u : 2u) << s->name;
    for (const auto& [key, constant] : s->efficiency->items()) {
      const std::string source = constant.at("source");
      EXPECT_EQ(source.find("from memory"), std::string::npos) << s->name << " " << key << ": " << source;
      EXPECT_TRUE(constant.contains("kind")) << s->name << " " << key << ": every shipped constant states its kind";
      // A source that calls itself an assumption is of that kind.
      if (source.rfind("ASSUMPTION", 0) == 0) EXPECT_EQ(constant.value("kind", ""), "assumption") << s->name << " " << key;
    }
    for (const auto& [field, source] : s->sources) {
      EXPECT_EQ(source.text.find("from memory"), std::string::npos) << s->name << " " << field;
      EXPECT_FALSE(source.kind.empty()) << s->name << " " << field;
    }
  }
  EXPECT_EQ(stacks, 9u);
}

// The era is the stack's, the machine the hardware's: the A100 stack is the SC'21 one, fitted on
// SC'21 Table 1, the H100 one runs FlashAttention-3-class attention, the H200 one FlashAttention-2.
TEST(Stack, PresetsNameTheirEra) {
  const ClusterSpec dgx = preset("a100_80gb_dgx");
  EXPECT_EQ(dgx.stack, "megatron_sc21_a100");
  EXPECT_DOUBLE_EQ((*dgx.efficiency)["hbm_efficiency"]["value"].get<double>(), 0.597);
  ASSERT_EQ(dgx.fits.size(), 1u);
  EXPECT_EQ(dgx.fits[0].experiment, "megatron_ptdp/table1");
  EXPECT_EQ(dgx.fits[0].metric, "tflops_per_gpu");
  EXPECT_EQ(dgx.fits[0].constants, std::vector<std::string>{"hbm_efficiency"});
  EXPECT_TRUE(dgx.fits[0].covers("megatron_ptdp/table1", "tflops_per_gpu", "any row"));
  EXPECT_FALSE(dgx.fits[0].covers("megatron_ptdp/fig13", "tflops_per_gpu", "any row"));
  // MFU and aggregate PFLOP/s are the fitted step time in other units: in sample too; params not.
  EXPECT_TRUE(dgx.fits[0].covers("megatron_ptdp/table1", "mfu", "1T mfu"));
  EXPECT_TRUE(dgx.fits[0].covers("megatron_ptdp/table1", "aggregate_pflops", "1T aggregate_pflops"));
  EXPECT_FALSE(dgx.fits[0].covers("megatron_ptdp/table1", "params_b", "1T params_b"));
  // With a train list (a hold-out fit), a case's MFU follows its TFLOP/s label.
  FitRecord held{"t/x", "tflops_per_gpu", {"hbm_efficiency"}, {"a tflops_per_gpu"}};
  EXPECT_TRUE(held.covers("t/x", "mfu", "a mfu"));
  EXPECT_FALSE(held.covers("t/x", "mfu", "b mfu"));
  EXPECT_EQ((*preset("h100_dgx").efficiency)["attention_exp_overlap"]["value"], 1);
  EXPECT_EQ((*preset("h200_sxm").efficiency)["attention_exp_overlap"]["value"], 0);
  for (const char* name : {"h100_dgx", "h200_sxm", "cpu_local"})
    EXPECT_TRUE(preset(name).fits.empty()) << name;
  // EFA's one-flow rate was fitted on DCP's artifact ring and zigzag bars only (issue 31): those
  // are in sample, forward and backward; TE's, LoongTrain's and DCP's bars stay out.
  const ClusterSpec p4de = preset("a100_80gb_p4de");
  ASSERT_EQ(p4de.fits.size(), 2u);
  for (const FitRecord& f : p4de.fits) {
    EXPECT_EQ(f.experiment, "dcp/micro_causal");
    EXPECT_EQ(f.constants, std::vector<std::string>{"network_p2p_efficiency"});
    EXPECT_EQ(f.train.size(), 12u);
  }
  EXPECT_TRUE(p4de.fits[0].covers("dcp/micro_causal", "attention_fwd_s",
                                  "Long-Data-Collections ×0.5 FW: Ring (artifact reference figure, ms → s)"));
  EXPECT_TRUE(p4de.fits[1].covers("dcp/micro_causal", "attention_bwd_s",
                                  "LongAlign ×4 BW: ZigZag (artifact reference figure, ms → s)"));
  EXPECT_FALSE(p4de.fits[0].covers("dcp/micro_causal", "attention_fwd_s",
                                   "Long-Data-Collections ×0.5 FW: TE (artifact reference figure, ms → s)"));
  EXPECT_FALSE(p4de.fits[0].covers("dcp/micro_masks", "attention_fwd_s",
                                   "Long-Data-Collections ×0.5 FW: Ring (artifact reference figure, ms → s)"));
  // Kwai's stacks record the published runs that informed their allocator fragmentation (a memory
  // overhead, not an efficiency): those comparisons are in sample, the others of the table not.
  for (const char* name : {"h800_kwai", "a800_kwai"}) {
    const ClusterSpec kwai = preset(name);
    ASSERT_EQ(kwai.fits.size(), std::string(name) == "h800_kwai" ? 4u : 2u) << name;
    EXPECT_EQ(kwai.fits[0].constants, std::vector<std::string>{"memory/allocator_fragmentation"});
    EXPECT_TRUE(kwai.fits[0].covers("kwai/memory_vs_alpha", "peak_allocated_bytes", "no checkpointing, α = 0.3"));
    EXPECT_FALSE(kwai.fits[0].covers("kwai/memory_vs_alpha", "peak_allocated_bytes", "no checkpointing, α = 0.5"));
  }
  // The H800 stack's GEMM fraction is fitted to two Table 8 rows: their MFU and tokens/s (one
  // measurement) are in sample; Table 8's original-Megatron row and Figure 9 are held out.
  const ClusterSpec h800 = preset("h800_kwai");
  const FitRecord& gemm = h800.fits.at(2);
  EXPECT_EQ(gemm.constants, std::vector<std::string>{"gemm_peak_fraction"});
  EXPECT_TRUE(gemm.covers("kwai/gpt175b_8k", "mfu", "Kwai t4 c1 p8 l2 balanced α = 0.63 MFU"));
  EXPECT_TRUE(gemm.covers("kwai/gpt175b_8k", "tokens_per_s_per_gpu", "Kwai t4 c1 p8 l2 balanced α = 0.63 tokens/s/GPU"));
  EXPECT_FALSE(gemm.covers("kwai/gpt175b_8k", "mfu", "original Megatron t2 c2 p16 full recompute MFU"));
  EXPECT_FALSE(gemm.covers("kwai/fig9", "tokens_per_s", "175B s4K n256 t2c2p16 l1 none a0.522 tokens_per_s"));
  // The search's 8K comparison is against the same Table 8 value: in sample too.
  EXPECT_TRUE(h800.fits.at(3).covers("kwai/search_175b", "mfu", "8K: a top-5 layout near Kwai's best (43.2%)"));
  EXPECT_FALSE(h800.fits.at(3).covers("kwai/search_175b", "mfu", "32K: a top-5 layout near Kwai's best (42.7%)"));
}

TEST(Stack, AnotherStackReplacesTheDefault) {
  auto c = load_hardware(kHardware / "h200_sxm.json", "mcore_te_fa3_h100");
  ASSERT_TRUE(c.ok()) << c.error_str();
  EXPECT_EQ(c->stack, "mcore_te_fa3_h100");
  EXPECT_EQ(c->gpu.hbm_gib, 141);  // still the H200 machine
  EXPECT_EQ((*c->efficiency)["attention_exp_overlap"]["value"], 1);
  auto missing = load_hardware(kHardware / "h200_sxm.json", "no_such_stack");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error_str().find("no stack preset \"no_such_stack\""), std::string::npos) << missing.error_str();
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
  EXPECT_NE(h200.sources.at("nic_bandwidth_Gbps").text.find("ASSUMPTION"), std::string::npos);
  EXPECT_EQ(h200.sources.at("nic_bandwidth_Gbps").kind, "assumption");
}

// A stack that runs another's library or machine names the stack a constant comes from rather than
// copy it: the loaded constant is that stack's own (value, kind, source, with the note after it).
TEST(Stack, SharedConstantsAreTheNamedStacksOwn) {
  auto raw = load_json_file(kStacks / "fsdp_fa2_h100.json");
  ASSERT_TRUE(raw.ok());
  auto s = load_stack(kStacks / "fsdp_fa2_h100.json");
  ASSERT_TRUE(s.ok()) << s.error_str();
  std::set<std::string> named;
  for (const auto& [key, entry] : (*raw)["efficiency"].items()) {
    if (!entry.contains("from")) continue;
    const std::string from = entry["from"];
    named.insert(from);
    auto other = load_stack(kStacks / (from + ".json"));
    ASSERT_TRUE(other.ok()) << other.error_str();
    const json& theirs = other->efficiency->at(key);
    const json& mine = s->efficiency->at(key);
    EXPECT_EQ(mine.at("value"), theirs.at("value")) << key;
    EXPECT_EQ(mine.at("kind"), theirs.at("kind")) << key;
    const std::string source = mine.at("source");
    EXPECT_EQ(source.rfind(theirs.at("source").get<std::string>(), 0), 0u) << key;
    if (entry.contains("note"))
      EXPECT_NE(source.find("(carried from stack " + from + ": " + entry["note"].get<std::string>() + ")"),
                std::string::npos)
          << key;
    else
      EXPECT_EQ(source, theirs.at("source")) << key;
  }
  // Its kernels and host are the H200 stack's measurements, its HBM and links DGX H100's.
  EXPECT_EQ(named, (std::set<std::string>{"fa2_h200", "mcore_te_fa3_h100"}));
  EXPECT_EQ((*raw)["memory"]["reserved_gib"]["from"], "mcore_te_fa3_h100");
  EXPECT_EQ(s->sources.at("memory/reserved_gib").kind, "estimate");
}

class SharedStackConstants : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cpbench_shared_stack_test_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
    auto good = load_json_file(kStacks / "megatron_sc21_a100.json");
    ASSERT_TRUE(good.ok());
    base_ = *good;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path write(const std::string& name, const json& j) {
    const auto file = dir_ / (name + ".json");
    std::ofstream(file) << j.dump(2);
    return file;
  }

  std::filesystem::path dir_;
  json base_;
};

// Re-measured in the stack it comes from, a shared constant is re-measured in every stack naming it.
TEST_F(SharedStackConstants, AConstantChangedAtItsHomeChangesWhereItIsShared) {
  json home = base_;
  home["efficiency"]["host_op_us"]["value"] = 9.5;
  write("home", home);
  json user = base_;
  user["efficiency"]["host_op_us"] = {{"from", "home"}};
  user["memory"]["reserved_gib"] = {{"from", "home"}, {"note", "the same CUDA and NCCL"}};
  auto s = load_stack(write("user", user));
  ASSERT_TRUE(s.ok()) << s.error_str();
  EXPECT_EQ(s->efficiency->at("host_op_us").at("value"), 9.5);
  EXPECT_EQ(s->memory.reserved_gib, base_["memory"]["reserved_gib"]["value"].get<double>());
  EXPECT_EQ(s->sources.at("memory/reserved_gib").text,
            base_["memory"]["reserved_gib"]["source"].get<std::string>() + " (carried from stack home: the same CUDA and NCCL)");
  // Chains are followed.
  json chained = base_;
  chained["efficiency"]["host_op_us"] = {{"from", "user"}};
  auto c = load_stack(write("chained", chained));
  ASSERT_TRUE(c.ok()) << c.error_str();
  EXPECT_EQ(c->efficiency->at("host_op_us").at("value"), 9.5);
}

// A cycle, an unknown stack, a key the other stack lacks, a stray key and an inline stack naming
// another's constant are errors naming the file and the entry.
TEST_F(SharedStackConstants, BadReferencesNameTheFileAndTheEntry) {
  auto only_error = [](const Expected<StackSpec>& s) {
    EXPECT_FALSE(s.ok());
    if (s.ok()) return Error{};
    EXPECT_EQ(s.errors().list.size(), 1u) << s.error_str();
    return s.errors().list[0];
  };
  json a = base_, b = base_;
  a["efficiency"]["pcie_latency_us"] = {{"from", "b"}};
  b["efficiency"]["pcie_latency_us"] = {{"from", "a"}};
  const auto fa = write("a", a);
  const auto fb = write("b", b);
  Error e = only_error(load_stack(fa));
  EXPECT_EQ(e.file, fb.string());  // where the cycle closes
  EXPECT_EQ(e.pointer, "/efficiency/pcie_latency_us/from");
  EXPECT_NE(e.message.find("cycle: a → b → a"), std::string::npos) << e.message;

  // Sharing is per key: a takes one constant from b, b another from a.
  b["efficiency"]["pcie_latency_us"] = base_["efficiency"]["pcie_latency_us"];
  b["efficiency"]["host_op_us"] = {{"from", "a"}};
  write("b", b);
  auto mutual = load_stack(fa);
  ASSERT_TRUE(mutual.ok()) << mutual.error_str();
  auto mutual_b = load_stack(fb);
  ASSERT_TRUE(mutual_b.ok()) << mutual_b.error_str();
  EXPECT_EQ(mutual_b->efficiency->at("host_op_us"), base_["efficiency"]["host_op_us"]);

  // A constant shared from a broken entry is an error where the entry is, not where it is taken.
  b["efficiency"]["pcie_latency_us"] = 8;  // a bare number
  write("b", b);
  e = only_error(load_stack(fa));
  EXPECT_EQ(e.file, fb.string());
  EXPECT_EQ(e.pointer, "/efficiency/pcie_latency_us");
  EXPECT_NE(e.message.find("a constant another stack shares must be"), std::string::npos) << e.message;
  // An unreadable stack is reported once, however many entries name it.
  std::ofstream(fb) << "{ not json";
  a["efficiency"]["host_op_us"] = {{"from", "b"}};
  write("a", a);
  auto twice = load_stack(fa);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.errors().list.size(), 1u) << twice.error_str();
  EXPECT_EQ(twice.errors().list[0].file, fb.string());
  a["efficiency"]["host_op_us"] = base_["efficiency"]["host_op_us"];
  b = base_;
  write("b", b);
  a["efficiency"]["pcie_latency_us"] = {{"from", "b"}, {"note", 3}};
  e = only_error(load_stack(write("a", a)));
  EXPECT_EQ(e.pointer, "/efficiency/pcie_latency_us/note");

  a["efficiency"]["pcie_latency_us"] = {{"from", "nowhere"}};
  e = only_error(load_stack(write("a", a)));
  EXPECT_EQ(e.file, fa.string());
  EXPECT_NE(e.message.find("no stack preset \"nowhere\""), std::string::npos) << e.message;

  b["efficiency"]["pcie_latency_us"] = base_["efficiency"]["pcie_latency_us"];
  b["efficiency"].erase("host_op_us");
  write("b", b);
  a["efficiency"]["pcie_latency_us"] = {{"from", "b"}};
  a["efficiency"]["host_op_us"] = {{"from", "b"}};
  e = only_error(load_stack(write("a", a)));
  EXPECT_EQ(e.pointer, "/efficiency/host_op_us/from");
  EXPECT_NE(e.message.find("the stack \"b\" has no /efficiency/host_op_us"), std::string::npos) << e.message;

  a["efficiency"]["host_op_us"] = base_["efficiency"]["host_op_us"];
  a["efficiency"]["pcie_latency_us"] = {{"from", "b"}, {"value", 3}};
  e = only_error(load_stack(write("a", a)));
  EXPECT_EQ(e.pointer, "/efficiency/pcie_latency_us/value");

  a["efficiency"]["pcie_latency_us"] = {{"from", "b"}};
  a["efficiency"]["host_op_us"] = {{"from", "../stacks/b"}};
  e = only_error(load_stack(write("a", a)));
  EXPECT_EQ(e.pointer, "/efficiency/host_op_us/from");
  EXPECT_NE(e.message.find("expected the name of a stack preset"), std::string::npos) << e.message;

  // Inline (here: a hardware file's default stack) there is no folder of stacks to look in.
  auto hw = load_json_file(kHardware / "a100_80gb_dgx.json");
  ASSERT_TRUE(hw.ok());
  json h = *hw;
  h["default_stack"] = base_;
  h["default_stack"]["efficiency"]["host_op_us"] = {{"from", "megatron_sc21_a100"}};
  const auto hw_file = write("inline_hw", h);
  auto c = load_hardware(hw_file);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.errors().list[0].file, hw_file.string());
  EXPECT_EQ(c.errors().list[0].pointer, "/default_stack/efficiency/host_op_us");
  EXPECT_NE(c.errors().list[0].message.find("only in a stack preset file"), std::string::npos) << c.error_str();
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
    // Outside experiments/: the stack by its absolute path.
    j["default_stack"] = (kStacks / "megatron_sc21_a100.json").string();
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
  EXPECT_NE(e.message.find("every preset constant cites"), std::string::npos) << e.message;
}

TEST_F(BadHardwareFile, EmptySourceIsAnError) {
  Error e = only_error(load_edited([](json& j) { j["nic_bandwidth_Gbps"]["source"] = ""; }));
  EXPECT_EQ(e.pointer, "/nic_bandwidth_Gbps/source");
  EXPECT_NE(e.message.find("non-empty"), std::string::npos) << e.message;
}

TEST_F(BadHardwareFile, EfficienciesBelongToTheStack) {
  Error e = only_error(load_edited([](json& j) { j["efficiency"] = json::object(); }));
  EXPECT_EQ(e.pointer, "/efficiency");
  EXPECT_NE(e.message.find("belongs to a software-stack preset"), std::string::npos) << e.message;
  e = only_error(load_edited([](json& j) { j.erase("default_stack"); }));
  EXPECT_EQ(e.pointer, "/default_stack");
  EXPECT_NE(e.message.find("missing required key"), std::string::npos) << e.message;
}

TEST_F(BadHardwareFile, UnknownDefaultStackNamesTheHardwareFile) {
  // Written outside experiments/, a stack name resolves to ../stacks/ beside the file: absent.
  Error e = only_error(load_edited([](json& j) { j["default_stack"] = "megatron_sc21_a100"; }));
  EXPECT_EQ(e.pointer, "/default_stack");
  EXPECT_NE(e.message.find("no stack preset \"megatron_sc21_a100\""), std::string::npos) << e.message;
  // A .json path relative to the hardware file's folder finds it.
  const std::string relative =
      std::filesystem::relative(kStacks / "megatron_sc21_a100.json", dir_).generic_string();
  auto ok = load_edited([&](json& j) { j["default_stack"] = relative; });
  ASSERT_TRUE(ok.ok()) << ok.error_str();
  EXPECT_EQ(ok->stack, "megatron_sc21_a100");
  // So does one written inline.
  auto stack = load_json_file(kStacks / "megatron_sc21_a100.json");
  auto inline_stack = load_edited([&](json& j) { j["default_stack"] = *stack; });
  ASSERT_TRUE(inline_stack.ok()) << inline_stack.error_str();
  EXPECT_EQ(inline_stack->stack_file, "");
  EXPECT_EQ(*inline_stack->efficiency, *ok->efficiency);
}

// The stack's own errors name the stack file and the pointer inside it.
TEST_F(BadHardwareFile, BadStackNamesTheStackFile) {
  auto good = load_json_file(kStacks / "megatron_sc21_a100.json");
  ASSERT_TRUE(good.ok());
  const auto stack_file = dir_ / "stacks" / "broken.json";
  std::filesystem::create_directories(stack_file.parent_path());
  auto load_with = [&](const std::function<void(json&)>& edit) {
    json s = *good;
    edit(s);
    std::ofstream(stack_file) << s.dump(2);
    auto hw = load_json_file(kHardware / "a100_80gb_dgx.json");
    json h = *hw;
    h["default_stack"] = "broken";
    std::filesystem::create_directories(dir_ / "hardware");
    path_ = dir_ / "hardware" / "a100.json";
    std::ofstream(path_) << h.dump(2);
    return load_hardware(path_);
  };
  auto r = load_with([](json& s) { s["memory"]["allocator_fragmentation"]["value"] = 1.0; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].file, stack_file.string());
  EXPECT_EQ(r.errors().list[0].pointer, "/memory/allocator_fragmentation/value");
  r = load_with([](json& s) { s.erase("memory"); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/memory");
  // The allocator: a replayed one or a flat share, exactly one, a known name, cited.
  r = load_with([](json& s) {
    s["memory"]["allocator"] = {{"value", "pytorch_expandable_segments"}, {"source", "NeMo"}, {"kind", "vendor_model"}};
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/memory/allocator_fragmentation");
  EXPECT_NE(r.errors().list[0].message.find("exactly one of"), std::string::npos);
  r = load_with([](json& s) {
    s["memory"].erase("allocator_fragmentation");
    s["memory"]["allocator"] = {{"value", "jemalloc"}, {"source", "x"}};
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/memory/allocator/value");
  r = load_with([](json& s) {
    s["memory"].erase("allocator_fragmentation");
    s["memory"]["allocator"] = {{"value", "pytorch_caching"}};
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/memory/allocator/source");
  r = load_with([](json& s) {
    s["memory"].erase("allocator_fragmentation");
    s["memory"]["allocator"] = {{"value", "pytorch_expandable_segments"}, {"source", "NeMo"}, {"kind", "vendor_model"}};
  });
  ASSERT_TRUE(r.ok()) << r.error_str();
  EXPECT_EQ(r->memory.allocator, AllocatorModel::pytorch_expandable_segments);
  EXPECT_EQ(r->sources.at("memory/allocator").text, "NeMo");
  r = load_with([](json& s) { s["fits"][0]["constants"] = {"hbm_speed"}; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].file, stack_file.string());
  EXPECT_EQ(r.errors().list[0].pointer, "/fits/0/constants/0");
  EXPECT_NE(r.errors().list[0].message.find("not a constant of this stack"), std::string::npos);
  r = load_with([](json& s) { s["fits"][0].erase("metric"); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/fits/0/metric");
  r = load_with([](json& s) { s["efficiency"] = json::array(); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors().list[0].pointer, "/efficiency");
  r = load_with([](json&) {});
  ASSERT_TRUE(r.ok()) << r.error_str();
  EXPECT_EQ(r->stack, "megatron_sc21_a100");  // the name inside the file
  EXPECT_EQ(std::filesystem::path(r->stack_file), stack_file.lexically_normal());
}

TEST_F(BadHardwareFile, BareNumberIsAnUnsourcedConstant) {
  Error e = only_error(load_edited([](json& j) { j["gpu"]["peak_dense_tflops"] = 312; }));
  EXPECT_EQ(e.pointer, "/gpu/peak_dense_tflops");
  EXPECT_EQ(e.message,
            "expected {\"value\": <number>, \"source\": \"<citation>\"}, got an integer: "
            "every preset constant cites its source");
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

TEST_F(BadHardwareFile, InvalidJsonNamesTheLine) {
  path_ = dir_ / "broken.json";
  std::ofstream(path_) << "{\n  \"name\": \"x\",\n  oops\n}\n";
  Error e = only_error(load_hardware(path_));
  EXPECT_NE(e.message.find("line 3"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace cpbench
