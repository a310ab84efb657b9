// iteration_test.cpp — the per-step framework work of an iteration: zeroing the gradient buffer
// and the optimizer step, memory-bound passes over the state a GPU holds (their bytes per
// parameter in iteration.cpp), so they grow with the parameters and not with the tokens, and the
// distributed optimizer shards the optimizer's part but not the gradient buffer.
#include "core/sim/iteration.h"

#include <gtest/gtest.h>

#include "core/cost/cost_test_util.h"
#include "core/experiment/registry.h"
#include "core/sim/memory.h"

namespace cpbench {
namespace {

ModelShape preset(const std::string& name) { return *load_model(default_experiments_dir() / "models" / (name + ".json")); }

// dp data-parallel ranks of one pipeline stage, each with m micro-batches of one sequence.
Plan plan_of(int64_t dp, int64_t m, int64_t length, bool distributed_optimizer) {
  Plan plan;
  plan.layout.num_gpus = dp;
  plan.layout.distributed_optimizer = distributed_optimizer;
  plan.layout.recompute = "selective";
  plan.pipeline_schedule = "1f1b";
  plan.micro_batches.assign(dp, std::vector<PlanMicroBatch>(m, PlanMicroBatch{{length}, 1, -1, 1}));
  return plan;
}

double framework_s(const Plan& plan, const ModelShape& model, const CostModel& cost) {
  auto r = simulate_iteration(plan, model, cost);
  EXPECT_TRUE(r.ok()) << r.error_str();
  return r.ok() ? r->step_framework_s : -1;
}

TEST(Iteration, FrameworkWorkScalesWithTheStateNotTheTokens) {
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape llama = preset("llama3_8b");  // rotary positions: no table that grows with length
  const Plan plan = plan_of(1, 1, 4096, false);
  const double P = params_per_gpu(llama, plan.layout, 4096, 0);
  // fp32 main gradients (bf16): the buffer zeroed (4 bytes per parameter), then the optimizer's
  // 4 + 4 + 8 + 4 + 28 + 6 bytes per parameter.
  EXPECT_NEAR(framework_s(plan, llama, cost), cost.memory_bound_s(4 * P) + cost.memory_bound_s(54 * P), 1e-12);
  // Four times the tokens (and micro-batches): the same work.
  EXPECT_DOUBLE_EQ(framework_s(plan_of(1, 4, 16384, false), llama, cost), framework_s(plan, llama, cost));
  // Twice the layers: about twice (the embedding and output layer stay).
  ModelShape deeper = llama;
  deeper.layers *= 2;
  const double ratio = framework_s(plan, deeper, cost) / framework_s(plan, llama, cost);
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.0);
  // The distributed optimizer over 8 ranks shards the optimizer's passes, not the gradient buffer.
  EXPECT_NEAR(framework_s(plan_of(8, 1, 4096, true), llama, cost),
              cost.memory_bound_s(4 * P) + cost.memory_bound_s(54 * P / 8), 1e-12);
  // And the step pays it: a step is longer than its framework work plus the pass the bound counts.
  auto r = simulate_iteration(plan, llama, cost);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->step_time_s, r->step_framework_s);
}

}  // namespace
}  // namespace cpbench
