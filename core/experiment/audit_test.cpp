// audit_test.cpp — the constants an audit finds, their kinds, and the assumptions `show` names.
#include "core/experiment/audit.h"

#include <gtest/gtest.h>

#include "core/experiment/registry.h"

namespace cpbench {
namespace {

TEST(Audit, FindsEveryNestedConstantWithItsPathAndKind) {
  const json preset = json::parse(R"({
    "name": "x", "description": "not a constant",
    "gpu": {"name": "G", "hbm_gib": {"value": 80, "source": "datasheet D", "kind": "datasheet"}},
    "gpus_per_node": {"value": 8, "source": "S"},
    "efficiency": {"gemm_peak_fraction": {"value": 0.75, "source": "ASSUMPTION: none found", "kind": "assumption"}}})");
  const auto c = sourced_constants("x", preset);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].field, "efficiency/gemm_peak_fraction");  // nlohmann orders keys
  EXPECT_EQ(c[0].kind, "assumption");
  EXPECT_EQ(c[1].field, "gpu/hbm_gib");
  EXPECT_EQ(c[1].value, 80);
  EXPECT_EQ(c[2].field, "gpus_per_node");
  EXPECT_EQ(c[2].kind, "");

  // show's note: the assumption and the constant without a kind, nothing else.
  const json spec = {{"presets", {{"hardware", {{"x", preset}}}}}};
  const std::string note = assumptions_note(spec);
  EXPECT_NE(note.find("x efficiency/gemm_peak_fraction = 0.75"), std::string::npos) << note;
  EXPECT_NE(note.find("x gpus_per_node = 8 (kind not stated)"), std::string::npos) << note;
  EXPECT_EQ(note.find("hbm_gib"), std::string::npos) << note;
  EXPECT_EQ(assumptions_note(json{{"presets", json::object()}}), "");
}

TEST(Audit, EveryShippedConstantStatesItsKind) {
  const auto dir = default_experiments_dir();
  auto summary = audit_presets(dir, {}, false);
  ASSERT_TRUE(summary.ok()) << summary.error_str();
  EXPECT_EQ(summary->find("not stated"), std::string::npos) << *summary;
  EXPECT_NE(summary->find("hardware/h100_dgx"), std::string::npos);
  EXPECT_NE(summary->find("stacks/mcore_te_fa3_h100"), std::string::npos);

  auto rows = audit_presets(dir, {"megatron_sc21_a100"}, true, 0);
  ASSERT_TRUE(rows.ok()) << rows.error_str();
  // The SC'21 stack's HBM efficiency was fitted on Table 1: a calibration fit, and the audit says so.
  const auto line_start = rows->find("megatron_sc21_a100  efficiency/hbm_efficiency");
  ASSERT_NE(line_start, std::string::npos) << *rows;
  const std::string line = rows->substr(line_start, rows->find('\n', line_start) - line_start);
  EXPECT_NE(line.find("calibration_fit"), std::string::npos) << line;

  // A name both a hardware and a stack preset carry lists both.
  auto both = audit_presets(dir, {"cpu_local"}, false);
  ASSERT_TRUE(both.ok()) << both.error_str();
  EXPECT_NE(both->find("hardware/cpu_local"), std::string::npos) << *both;
  EXPECT_NE(both->find("stacks/cpu_local"), std::string::npos) << *both;

  // A sourced choice of mechanism is listed with its name as the value.
  auto modern = audit_presets(dir, {"mcore_te_fa3_h100"}, true, 0);
  ASSERT_TRUE(modern.ok()) << modern.error_str();
  const auto allocator = modern->find("mcore_te_fa3_h100  memory/allocator ");
  ASSERT_NE(allocator, std::string::npos) << *modern;
  const std::string row = modern->substr(allocator, modern->find('\n', allocator) - allocator);
  EXPECT_NE(row.find("pytorch_expandable_segments"), std::string::npos) << row;
  EXPECT_NE(row.find("vendor_model"), std::string::npos) << row;

  // A shared constant names the stack it is written in; the stack's own do not.
  auto fsdp = audit_presets(dir, {"fsdp_fa2_h100"}, true, 0);
  ASSERT_TRUE(fsdp.ok()) << fsdp.error_str();
  auto row_of = [&](const std::string& field) {
    const auto at = fsdp->find("fsdp_fa2_h100  " + field + " ");
    EXPECT_NE(at, std::string::npos) << field << "\n" << *fsdp;
    return at == std::string::npos ? std::string() : fsdp->substr(at, fsdp->find('\n', at) - at);
  };
  const std::string host = row_of("efficiency/host_op_us");
  EXPECT_NE(host.find("device_measurement"), std::string::npos) << host;
  EXPECT_NE(host.find("  [from fa2_h200] cpbench's own measurement"), std::string::npos) << host;
  EXPECT_NE(row_of("efficiency/nvlink_busbw_efficiency").find("[from mcore_te_fa3_h100] "), std::string::npos);
  EXPECT_NE(row_of("memory/reserved_gib").find("[from mcore_te_fa3_h100] "), std::string::npos);
  EXPECT_EQ(row_of("memory/allocator").find("[from "), std::string::npos);

  auto unknown = audit_presets(dir, {"no_such_preset"}, true);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error_str().find("no preset named \"no_such_preset\""), std::string::npos);
}

}  // namespace
}  // namespace cpbench
