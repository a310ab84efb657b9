// compare_test.cpp — the comparison's parts: the base layout rule holds its memory bound and takes
// the smallest size that does, the ranking orders by step time with the speedup over the fastest
// static-CP packing, and the spec tries packing at every CP size with a capacity that holds the
// longest sequence.
#include "core/experiment/compare.h"

#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/model/formulas.h"

namespace cpbench {
namespace {

namespace fs = std::filesystem;

const fs::path kExperiments = fs::path(CPBENCH_SOURCE_DIR) / "experiments";

TEST(CompareBaseLayout, SmallestModelParallelSizeWhoseStateFits) {
  auto cluster = load_hardware(kExperiments / "hardware/h100_dgx.json");
  ASSERT_TRUE(cluster.ok()) << cluster.error_str();
  const double limit = 0.4 * cluster->gpu.hbm_bytes();
  for (const char* name : {"llama3_8b", "llama2_13b", "llama2_70b", "gpt3_175b"}) {
    auto m = load_model(kExperiments / "models" / (std::string(name) + ".json"));
    ASSERT_TRUE(m.ok()) << m.error_str();
    const BaseLayout b = compare_base_layout(*m, *cluster, 256);
    const int64_t size = b.tp * b.pp;
    const double params = params_exact(*m, 4096);
    EXPECT_LE(weight_and_optimizer_bytes(params / size, static_cast<int>(256 / size), true, 4.0), limit) << name << ": " << b.why;
    if (size > 1)  // half the size would not fit
      EXPECT_GT(weight_and_optimizer_bytes(params / (size / 2), static_cast<int>(512 / size), true, 4.0), limit) << name;
    EXPECT_TRUE(b.tp == 8 || b.pp == 1) << name << ": TP fills a node before PP";
  }
  auto llama8 = load_model(kExperiments / "models/llama3_8b.json");
  const BaseLayout b = compare_base_layout(*llama8, *cluster, 64);
  EXPECT_EQ(b.tp, 2);  // 8B at TP 1 holds 46 GiB of state: 58 % of 80 GiB
  EXPECT_EQ(b.pp, 1);
}

TEST(CompareRanking, FastestFirstWithSpeedupOverTheBestPacking) {
  Spec spec;
  PointResults results;
  auto add = [&](const std::string& label, const std::string& strategy, const std::string& status, double step) {
    PointConfig p;
    p.label = label;
    p.strategy = strategy;
    spec.points.push_back(p);
    PointResult r;
    r.status = status;
    r.reason = status == "ok" ? "" : "out of memory";
    if (status == "ok") r.metrics["step_time_s"] = step;
    results.push_back(r);
  };
  add("packing cp2", "packing", "ok", 12);
  add("Dynamic-CP dev", "dynamic_cp_dev", "ok", 6);
  add("packing cp8", "packing", "ok", 8);
  add("FSDP cp1", "zero3", "infeasible", 0);
  add("DCP cp8", "dcp", "ok", 10);
  const CompareRanking r = rank_compare(spec, results);
  ASSERT_EQ(r.rows.size(), 5u);
  EXPECT_EQ(r.baseline, "packing cp8");
  EXPECT_EQ(r.rows[0].label, "Dynamic-CP dev");
  EXPECT_DOUBLE_EQ(r.rows[0].speedup, 8.0 / 6.0);
  EXPECT_EQ(r.rows[1].label, "packing cp8");
  EXPECT_DOUBLE_EQ(r.rows[1].speedup, 1.0);
  EXPECT_EQ(r.rows[3].label, "packing cp2");
  EXPECT_EQ(r.rows[4].label, "FSDP cp1");  // what could not run comes last, with its reason
  const std::string table = compare_table(r);
  EXPECT_NE(table.find("1 could not run:\n  FSDP cp1 (infeasible): out of memory"), std::string::npos) << table;
}

TEST(CompareSpec, PackingCapacityHoldsTheLongestSequenceAtEveryCpSize) {
  const fs::path dir = fs::temp_directory_path() / ("cpbench_compare_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "l.txt") << "100\n70000\n3000\n";
  CompareRequest r;
  r.lengths = dir / "l.txt";
  r.model = "llama3_8b";
  r.num_gpus = 64;
  r.global_batch_sequences = 64;
  auto cs = compare_spec(r, kExperiments);
  fs::remove_all(dir);
  ASSERT_TRUE(cs.ok()) << cs.error_str();
  EXPECT_EQ(cs->max_length, 70000);
  EXPECT_EQ(cs->cap, 8960);  // 70,000 / 8 rounded up to 256
  int packing = 0;
  std::set<std::string> families;
  for (const auto& s : cs->spec["strategies"]) {
    families.insert(s["name"].get<std::string>());
    if (s["name"] != "packing") continue;
    ++packing;
    const int64_t cp = s["set"]["parallel.cp"], cap = s["set"]["parallel.max_seqlen_per_dp_cp_rank"];
    EXPECT_GE(cap * cp, 70000) << s.dump();
  }
  EXPECT_EQ(packing, 2 * (1 + 3 * 4));  // cp 1, and cp 2/4/8 × four comm types, under two recompute modes
  EXPECT_EQ(families, (std::set<std::string>{"packing", "packing_ffd", "packing_flops", "dynamic_cp", "dynamic_cp_dev",
                                             "dynamic_cp_solver", "adaptive_oracle", "adaptive_rule", "dcp", "zero3",
                                             "ptdp_search"}));
  EXPECT_EQ(cs->spec["strategies"][0]["name"], "ptdp_search") << "the slowest point starts first";
}

}  // namespace
}  // namespace cpbench
