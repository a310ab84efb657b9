// layer_cost_test.cpp — what switching off Megatron's element-wise fusions costs a layer: exactly
// the extra HBM passes and kernel launches layer_cost.cpp documents, no FLOPs.
#include "core/sim/layer_cost.h"

#include <gtest/gtest.h>

#include "core/cost/cost_test_util.h"
#include "core/experiment/registry.h"

namespace cpbench {
namespace {

TEST(LayerCost, UnfusedElementwiseAddsItsPassesAndLaunches) {
  const CostModel cost = preset_model("a100_80gb_dgx");
  const ModelShape m = *load_model(default_experiments_dir() / "models" / "gpt3_175b.json");
  ParallelConfig layout;
  layout.num_gpus = 8;
  layout.tp = 8;
  layout.attention_kernel = "unfused";
  PlanMicroBatch mb;
  mb.lengths = {2048};
  const LayerCost fused = layer_cost(cost, m, layout, mb);
  layout.elementwise_fusion = false;
  const LayerCost unfused = layer_cost(cost, m, layout, mb);

  const double T = 2048, h = m.hidden, t = 8;
  const double bw = cost.cluster().gpu.hbm_bandwidth_GBps * 1e9 * cost.params().hbm_efficiency;
  const double launch = cost.params().kernel_overhead_us * 1e-6;
  // Bias + GeLU: 2 more passes over [T, ffn/t]; each bias-dropout-add: 4 more over [T, h]; 16-bit.
  const double ew_extra = 2.0 * (2 * T * m.ffn_hidden / t + 2 * 4 * T * h);
  // The scores [heads/t, s, s], 16-bit: masked_fill_ as its own kernel, read and write.
  const double scores = 2.0 * (m.heads / t) * T * T;
  const double want_fwd = ew_extra / bw + 5 * launch + (launch + 2 * scores / bw);
  const double want_bwd = 1.5 * ew_extra / bw + 5 * launch + (launch + 2 * scores / bw);
  EXPECT_NEAR(unfused.forward.compute_s - fused.forward.compute_s, want_fwd, 1e-9);
  EXPECT_NEAR(unfused.backward.compute_s - fused.backward.compute_s, want_bwd, 1e-9);
  EXPECT_EQ(unfused.forward.tp_comm_s, fused.forward.tp_comm_s);  // communication is untouched
  // With flash attention the softmax is inside the kernel: only the element-wise passes change.
  layout.attention_kernel = "flash";
  const double flash_unfused = layer_cost(cost, m, layout, mb).forward.compute_s;
  layout.elementwise_fusion = true;
  EXPECT_NEAR(flash_unfused - layer_cost(cost, m, layout, mb).forward.compute_s, ew_extra / bw + 5 * launch, 1e-9);
}

}  // namespace
}  // namespace cpbench
