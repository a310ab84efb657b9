// exec_point_test.cpp — `cpbench exec` and `cpbench validate` run the point their flags name, planned
// as `cpbench run` plans a spec's point: for a static layout, DCP and Dynamic-CP, the flags'
// point and the same point written as a spec give the same batch and byte-identical AttentionPlans
// in every round and group (the plans the cpu backend, exec and validate execute).
#include "core/experiment/exec_point.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/runtime/plan_exec.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Case {
  std::string name;
  ExecArgs args;
  json set;  // the spec strategy entry's "set" that names the same point
  std::string strategy;
};

// Every round's groups, with their plans, as the walker runs them.
std::vector<std::vector<PlanGroup>> rounds_of(const Plan& plan) {
  std::vector<std::vector<PlanGroup>> out;
  for (size_t k = 0; k < plan_rounds(plan); ++k) {
    auto g = plan_round_groups(plan, k);
    EXPECT_TRUE(g.ok()) << g.error_str();
    out.push_back(g ? *g : std::vector<PlanGroup>{});
  }
  return out;
}

TEST(ExecPoint, FlagsAndSpecPlanByteIdenticalAttention) {
  ExecArgs base;
  base.dataset = "long_data_collections";
  base.tokens = 4096;
  base.seed = 3;
  base.mask = "lambda";
  base.heads = 4;
  base.kv_heads = 2;
  base.head_dim = 16;
  base.dtype = "bf16";
  base.gpus_per_node = 2;  // the cpu_local preset's
  std::vector<Case> cases;
  Case a2a{"a2a+p2p", base, {{"parallel.attention_layout", "a2a+p2p"}, {"parallel.attention_a2a_size", 2}}, "cp_attention"};
  a2a.args.layout = "a2a+p2p";
  a2a.args.a2a_size = 2;
  cases.push_back(a2a);
  Case zigzag{"zigzag fp32 per tile", base,
              {{"parallel.attention_layout", "zigzag"}, {"parallel.attention_value_bytes", 4}, {"parallel.attention_per_tile", true}},
              "cp_attention"};
  zigzag.args.layout = "zigzag";
  zigzag.args.dtype = "fp32";
  zigzag.args.per_tile = true;
  cases.push_back(zigzag);
  Case dcp{"dcp", base, {{"parallel.dcp_block_tokens", 512}}, "dcp_attention"};
  dcp.args.layout = "dcp";
  dcp.args.block_tokens = 512;
  cases.push_back(dcp);
  Case dyn{"dynamic-cp", base,
           {{"parallel.cp", 1}, {"parallel.cp_comm_type", "p2p"}, {"parallel.max_seqlen_per_dp_cp_rank", 256}},
           "dynamic_cp"};
  dyn.args.dynamic_cp = true;
  dyn.args.max_seqlen_per_rank = 256;
  cases.push_back(dyn);

  const fs::path dir = fs::path(::testing::TempDir()) / "exec_point_test";
  fs::create_directories(dir);
  const fs::path experiments = default_experiments_dir();
  int multi_group_rounds = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    json spec = {
        {"description", "the point of cpbench exec's flags, as a spec"},
        {"hardware", "cpu_local"},
        {"model",
         {{"name", "exec"}, {"layers", 1}, {"hidden", 64}, {"heads", 4}, {"kv_heads", 2}, {"ffn_hidden", 256}, {"vocab", 1},
          {"norm", "rmsnorm"}, {"position_embedding", "rope"}, {"bias", false}, {"dropout", false},
          {"tied_embeddings", false}, {"gated_mlp", false}, {"source", "exec_point_test"}}},
        {"workload",
         {{"dataset", "long_data_collections"}, {"global_batch_tokens", 4096}, {"max_length", 4096}, {"seed", 3},
          {"mask", "lambda"}}},
        {"parallel", {{"num_gpus", 4}, {"cp", 4}, {"dtype", "bf16"}}},
        {"strategies", json::array({{{"name", c.strategy}, {"set", c.set}}})},
        {"metrics", json::array({"attention_time_s"})}};
    const fs::path file = dir / "point.json";
    std::ofstream(file) << spec.dump(2);
    auto loaded = load_spec(file, "point", SpecOptions{experiments, {}, {}});
    ASSERT_TRUE(loaded.ok()) << loaded.error_str();
    ASSERT_EQ(loaded->points.size(), 1u);
    const PlannedPoint from_spec = plan_point(loaded->points.front());
    ASSERT_EQ(from_spec.status, "ok") << from_spec.reason;

    auto point = exec_point(c.args, 4, experiments);
    ASSERT_TRUE(point.ok()) << point.error_str();
    auto batch = exec_batch(c.args, experiments);
    ASSERT_TRUE(batch.ok()) << batch.error_str();
    EXPECT_EQ(point->strategy, c.strategy);
    const PlannedPoint from_flags = plan_point(*point, *batch);
    ASSERT_EQ(from_flags.status, "ok") << from_flags.reason;

    EXPECT_EQ(from_flags.batch, from_spec.batch);
    EXPECT_GT(from_spec.batch.lengths.size(), 1u);
    const auto flags_rounds = rounds_of(from_flags.plan), spec_rounds = rounds_of(from_spec.plan);
    ASSERT_EQ(flags_rounds.size(), spec_rounds.size());
    for (size_t k = 0; k < spec_rounds.size(); ++k) {
      ASSERT_EQ(flags_rounds[k].size(), spec_rounds[k].size()) << "round " << k;
      if (spec_rounds[k].size() > 1) ++multi_group_rounds;
      for (size_t i = 0; i < spec_rounds[k].size(); ++i) {
        const PlanGroup &f = flags_rounds[k][i], &s = spec_rounds[k][i];
        EXPECT_EQ(f.first_rank, s.first_rank);
        EXPECT_EQ(f.cp, s.cp);
        EXPECT_TRUE(*f.attention == *s.attention) << "round " << k << " group " << i << ": the plans differ";
      }
    }
    ASSERT_FALSE(spec_rounds.empty());
    const AttentionPlan& first = *spec_rounds.front().front().attention;
    EXPECT_EQ(first.value_bytes, c.args.dtype == "bf16" ? 2 : 4);
    EXPECT_EQ(first.fused_stages, !c.args.per_tile);
    EXPECT_EQ(first.mask.kind, MaskKind::lambda);
  }
  EXPECT_GT(multi_group_rounds, 0) << "no Dynamic-CP round had groups side by side";
}

TEST(ExecPoint, FlagsThePointCannotHoldAreNamed) {
  ExecArgs a;
  a.lengths = {64};
  a.dynamic_cp = true;
  a.layout = "ring";
  a.max_seqlen_per_rank = 64;
  auto p = exec_point(a, 2, default_experiments_dir());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error_str().find("--layout"), std::string::npos) << p.error_str();
  a.layout = "zigzag";
  a.max_seqlen_per_rank = 0;
  p = exec_point(a, 2, default_experiments_dir());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error_str().find("--max-seqlen-per-rank"), std::string::npos) << p.error_str();
  a.dynamic_cp = false;
  // LoongTrain's double ring has no default window: the flag is named, the window given runs.
  a.layout = "double_ring";
  p = exec_point(a, 4, default_experiments_dir());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error_str().find("--window"), std::string::npos) << p.error_str();
  a.a2a_size = 2, a.window = 1;
  EXPECT_TRUE(exec_point(a, 4, default_experiments_dir()).ok());
  a.layout = "zigzag", a.a2a_size = 0, a.window = 0;
  a.mask = "diagonal";
  EXPECT_NE(exec_batch(a, default_experiments_dir()).error_str().find("--mask"), std::string::npos);
}

}  // namespace
}  // namespace cpbench
