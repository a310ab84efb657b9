// sc21_memory_test.cpp — the memory model against what Narayanan et al. (SC'21) could and could not
// run on 80 GB A100s: every configuration of Table 1 and Figs 12–18 ran, except Fig 17's runs
// without recomputation at large batch ("activation recomputation is needed to support larger
// batch sizes"). With micro-batch size 1 and 1F1B the first stage holds min(B, p) micro-batches,
// so the no-recompute runs that cannot fit are those with B ≥ p = 16.
#include <gtest/gtest.h>

#include "core/experiment/registry.h"
#include "core/experiment/runner.h"
#include "core/experiment/spec.h"

namespace cpbench {
namespace {

const char* kSpecs[] = {"megatron_ptdp/table1",           "megatron_ptdp/fig12_interleaving",
                        "megatron_ptdp/fig13_pipeline_tensor", "megatron_ptdp/fig14_pipeline_scaling",
                        "megatron_ptdp/fig15_tensor_scaling",  "megatron_ptdp/fig16_microbatch",
                        "megatron_ptdp/fig17_recompute",       "megatron_ptdp/fig18_scatter_gather"};

TEST(Sc21Memory, WhatThePaperRanFitsAndWhatItCouldNotDoesNot) {
  const auto dir = default_experiments_dir();
  int ran = 0, refused = 0;
  for (const char* name : kSpecs) {
    auto ref = resolve_experiment(name, dir);
    ASSERT_TRUE(ref.ok()) << ref.error_str();
    auto spec = load_spec(ref->file, ref->name, SpecOptions{dir, {}});
    ASSERT_TRUE(spec.ok()) << spec.error_str();
    for (const auto& point : spec->points) {
      const bool cannot_fit = point.parallel.recompute == "none" && point.parallel.pp == 16 &&
                              point.workload.global_batch_sequences >= 16 && std::string(name).find("fig17") != std::string::npos;
      PointResult r = run_point(point, {});
      if (cannot_fit) {
        EXPECT_EQ(r.status, "infeasible") << point.id;
        EXPECT_NE(r.reason.find("out of memory"), std::string::npos) << point.id << ": " << r.reason;
        ++refused;
      } else {
        EXPECT_EQ(r.status, "ok") << name << " " << point.id << ": " << r.reason;
        EXPECT_LE(r.metrics["peak_memory_gib"], point.cluster.gpu.hbm_gib) << point.id;
        ++ran;
      }
    }
  }
  EXPECT_EQ(refused, 5);  // B = 16, 32, 64, 128, 256
  EXPECT_GT(ran, 80);
}

}  // namespace
}  // namespace cpbench
