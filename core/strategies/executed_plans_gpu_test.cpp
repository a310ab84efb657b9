// executed_plans_gpu_test.cpp (label gpu: run on a device by scripts/device_check.sh) — the plans
// executed_plans_test runs on CPU thread ranks, run on one GPU as `run --backend cuda` runs them:
// every static layout under every mask on 2, 4 and 8 thread ranks in both run styles, each rank
// with its own CudaAttentionKernels (its own stream) and every message a device copy
// (cuda_runtime()). Every rank's O, LSE, dQ, dK and dV match the single-device reference and every
// rank moves exactly the bytes plan_bytes predicts.
// DCP's plans (every mask, 1 and 4 divisions, three head-block choices, all-to-all and
// point-to-point exchanges, on 2, 4 and 8 ranks: for_each_executed_dcp_request) are read from the
// plans file the build wrote (build/dcp_test_plans.json; $CPBENCH_DCP_TEST_PLANS names another,
// as device_check.sh does): DCP's planner partitions with Zoltan, which needs MPI, and a device
// machine runs the carried binaries without it.
// The fast path (CudaAttentionKernels::Path::fast: cuDNN for tiles of its modes, our tensor-core
// forward and backward otherwise) runs every layout's bf16 plans (value_bytes 2, whose check allows bf16's
// error) at head dim 64 under every mask, and must have sent tiles to both.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/layouts/cp_layouts_test_util.h"
#include "core/plan/attention_plan_json.h"
#include "core/runtime/cuda/cuda_attention_kernels.h"
#include "core/runtime/cuda/cuda_runtime.h"
#include "core/runtime/executor_test_util.h"

namespace cpbench {
namespace {

void expect_runs_on_the_gpu(const AttentionPlan& plan, uint64_t seed, const std::string& what) {
  const DeviceRuntime& gpu = cuda_runtime();
  ASSERT_EQ(gpu.unavailable(), "") << what;
  expect_runs_on_thread_ranks(plan, seed, what, gpu.make_kernels, gpu.copy);
}

TEST(ExecutedPlansOnTheGpu, DeviceIsThere) {
  EXPECT_EQ(cuda_runtime().unavailable(), "");
  std::printf("%s\n", cuda_runtime().describe().c_str());
}

class LayoutsOnTheGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(LayoutsOnTheGpu, MatchReferenceAndPlannedBytes) {
  const std::string layout = GetParam();
  int ran = 0;
  for (const MaskCase& m : every_mask(16, 16))
    for (int cp : {2, 4, 8}) {
      if (layout == "single") continue;
      for (bool experiment : {false, true}) {
        const std::string what = layout + " " + m.name + " cp=" + std::to_string(cp) + " " + RunStyle{experiment}.name();
        auto plan = test_layout_plan(layout, m.mask, cp, {37, 100, 5, 64}, RunStyle{experiment});
        if (layout == "a2a" && 4 % cp != 0) continue;  // Ulysses cannot split 4 K/V heads over 8 ranks
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.error_str();
        expect_runs_on_the_gpu(*plan, 42, what);
        ++ran;
      }
    }
  if (layout != "single") EXPECT_GE(ran, 10) << layout;
}

INSTANTIATE_TEST_SUITE_P(All, LayoutsOnTheGpu, ::testing::ValuesIn(cp_layout_names()), LayoutTestName());

TEST(DcpOnTheGpu, EveryPlanOfTheFileMatchesReferenceAndPlannedBytes) {
  const char* env = std::getenv("CPBENCH_DCP_TEST_PLANS");
  const std::string path = env != nullptr && *env != '\0' ? env : CPBENCH_DCP_TEST_PLANS;
  auto plans = read_attention_plans(path);
  ASSERT_TRUE(plans.ok()) << plans.error_str();
  ASSERT_GE(plans->size(), 60u) << path;
  int relays = 0, collective = 0;
  for (const LabelledPlan& p : *plans) {
    ASSERT_EQ(check_attention_plan(p.plan), "") << p.label;
    for (const AttnStage& st : p.plan.stages)
      for (const AttnTransfer& t : st.transfers) relays += t.relay;
    collective += p.plan.collective_exchange;
    expect_runs_on_the_gpu(p.plan, 7, p.label);
  }
  EXPECT_GT(relays, 0);
  EXPECT_GT(collective, 0);
}

TEST(FastPathOnTheGpu, Bf16PlansOfEveryLayoutMatchTheReference) {
  const auto before = CudaAttentionKernels::tiles_run();
  const KernelsFactory fast = [] { return std::make_unique<CudaAttentionKernels>(CudaAttentionKernels::Path::fast); };
  int ran = 0;
  for (const std::string& layout : cp_layout_names()) {
    if (layout == "single") continue;
    for (const MaskCase& m : every_mask(16, 16))
      for (int cp : {2, 4}) {
        const std::string what = layout + " " + m.name + " cp=" + std::to_string(cp) + " fast path";
        CpLayoutRequest req;
        req.layout = layout;
        req.cp = cp;
        req.a2a_size = layout == "a2a+p2p" ? 2 : layout == "double_ring" ? 1 : 0;
        if (layout == "double_ring") req.window = cp >= 4 ? 2 : 1;
        req.seq_lengths = {37, 100, 5, 64};
        req.mask = m.mask;
        req.heads_q = 8;
        req.heads_kv = 4;
        req.head_dim = 64;
        req.pad = true;
        auto plan = plan_cp_layout(req);
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.error_str();
        plan->value_bytes = 2;
        expect_runs_on_thread_ranks(*plan, 7, what, fast, cuda_runtime().copy);
        ++ran;
      }
  }
  const auto after = CudaAttentionKernels::tiles_run();
  EXPECT_GE(ran, 20);
  EXPECT_GT(after.cudnn, before.cudnn) << "no tile reached cuDNN";
  EXPECT_GT(after.tensor_core, before.tensor_core) << "no tile reached the tensor-core forward";
  std::printf("fast path: %lld tiles on cuDNN, %lld on the tensor-core forward, %lld on SIMT\n",
              static_cast<long long>(after.cudnn - before.cudnn),
              static_cast<long long>(after.tensor_core - before.tensor_core),
              static_cast<long long>(after.simt - before.simt));
}

}  // namespace
}  // namespace cpbench
