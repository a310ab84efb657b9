// iteration_test.cpp — the per-step framework work of an iteration: zeroing the gradient buffer
// and the optimizer step, memory-bound passes over the state a GPU holds (their bytes per
// parameter in iteration.cpp), so they grow with the parameters and not with the tokens, and the
// distributed optimizer shards the optimizer's part but not the gradient buffer.
// Also the framework's host work outside the model, which the device waits for, and Megatron's
// step-end collectives (tied embedding, sequence-parallel norms, gradient norm) and Megatron-LM's
// NaN checks.
#include "core/sim/iteration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/common/json_reader.h"
#include "core/cost/cost_test_util.h"
#include "core/model/formulas.h"
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
  // 4 + 4 + 4 bytes per parameter before the gradient norm's all-reduce and 8 + 28 + 6 after.
  EXPECT_NEAR(framework_s(plan, llama, cost),
              cost.memory_bound_s(4 * P) + cost.memory_bound_s(12 * P) + cost.memory_bound_s(42 * P), 1e-12);
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
              cost.memory_bound_s(4 * P) + cost.memory_bound_s(12 * P / 8) + cost.memory_bound_s(42 * P / 8), 1e-12);
  // And the step pays it: a step is longer than its framework work plus the pass the bound counts.
  auto r = simulate_iteration(plan, llama, cost);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->step_time_s, r->step_framework_s);
}

// The framework's host work outside the model (Plan::host_per_step, host_per_micro_batch: Megatron
// main's hybrid CP) is time the device waits: ops at the stack's host_op_us and synchronizations at
// a device-to-host round trip (pcie_latency_us). Once per step, and before every micro-batch's
// forward; reported as host time, and the lower bound keeps it.
TEST(Iteration, FrameworkHostWorkIsTimeTheDeviceWaits) {
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape llama = preset("llama3_8b");
  const double op = cost.params().host_op_us * 1e-6, sync = cost.params().pcie_latency_us * 1e-6;
  ASSERT_GT(op, 0);
  ASSERT_GT(sync, 0);
  const Plan plain = plan_of(1, 3, 4096, false);
  auto base = simulate_iteration(plain, llama, cost);
  ASSERT_TRUE(base.ok()) << base.error_str();
  Plan per_step = plain;
  per_step.host_per_step = {100, 10};
  auto a = simulate_iteration(per_step, llama, cost);
  ASSERT_TRUE(a.ok()) << a.error_str();
  const double step_work = 100 * op + 10 * sync;
  EXPECT_NEAR(a->step_time_s - base->step_time_s, step_work, 1e-9);
  EXPECT_NEAR(a->exposed_host_s - base->exposed_host_s, step_work, 1e-9);
  // Host time, not compute: the idle time and the compute balance stay.
  EXPECT_NEAR(a->bubble_fraction * a->step_time_s, base->bubble_fraction * base->step_time_s, 1e-9);
  EXPECT_DOUBLE_EQ(a->compute_imbalance, base->compute_imbalance);
  // Before each of the 3 forwards, one pipeline stage: each delays the rest of the step.
  Plan per_mb = plain;
  per_mb.host_per_micro_batch = {40, 4};
  auto b = simulate_iteration(per_mb, llama, cost);
  ASSERT_TRUE(b.ok()) << b.error_str();
  const double mb_work = 40 * op + 4 * sync;
  EXPECT_NEAR(b->step_time_s - base->step_time_s, 3 * mb_work, 1e-9);
  EXPECT_NEAR(b->exposed_host_s - base->exposed_host_s, 3 * mb_work, 1e-9);
  // No simulation beats the bound, which counts both.
  per_mb.host_per_step = per_step.host_per_step;
  auto both = simulate_iteration(per_mb, llama, cost);
  auto bound = iteration_bound(per_mb, llama, cost);
  auto base_bound = iteration_bound(plain, llama, cost);
  ASSERT_TRUE(both.ok() && bound.ok() && base_bound.ok());
  EXPECT_LE(bound->step_time_s, both->step_time_s + 1e-12);
  EXPECT_NEAR(bound->step_time_s - base_bound->step_time_s, step_work + 3 * mb_work, 1e-9);

  // Two stages: the first stage fetches each micro-batch before its forward, so the second stage
  // waits for it too. With one micro-batch nothing hides it: the step grows by exactly its time.
  Plan two = plan_of(1, 1, 4096, false);
  two.layout.num_gpus = 2;
  two.layout.pp = 2;
  two.micro_batches.assign(1, std::vector<PlanMicroBatch>(1, PlanMicroBatch{{4096}, 1, -1, 1}));
  auto two_base = simulate_iteration(two, llama, cost);
  two.host_per_micro_batch = {400, 40};
  auto two_host = simulate_iteration(two, llama, cost);
  auto two_bound = iteration_bound(two, llama, cost);
  ASSERT_TRUE(two_base.ok() && two_host.ok() && two_bound.ok()) << two_host.error_str();
  const double fetch = 400 * op + 40 * sync;
  EXPECT_NEAR(two_host->step_time_s - two_base->step_time_s, fetch, 1e-9);
  EXPECT_NEAR(two_host->exposed_host_s - two_base->exposed_host_s, fetch / 2, 1e-9);  // mean over the 2 stages
  EXPECT_LE(two_bound->step_time_s, two_host->step_time_s + 1e-12);
}

// The task events of one simulated iteration's Chrome trace: (name, device) → [(start, duration)] in µs.
using TraceEvents = std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>>;
TraceEvents traced(const Plan& plan, const ModelShape& model, const CostModel& cost, const std::string& tag) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("cpbench_iteration_test_" + tag + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".json");
  auto r = simulate_iteration(plan, model, cost, path);
  EXPECT_TRUE(r.ok()) << r.error_str();
  TraceEvents out;
  auto t = load_json_file(path);
  EXPECT_TRUE(t.ok()) << t.error_str();
  if (!t.ok()) return out;
  for (const json& e : (*t)["traceEvents"])
    if (e["ph"] == "X") out[{e["name"].get<std::string>(), e["pid"].get<int>()}].emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
  std::filesystem::remove(path);
  return out;
}

// Megatron's step end (finalize_model_grads, then the optimizer). With tied embeddings and pp > 1
// the first and the last stage sum the word embedding's gradient in one all-reduce they start
// together, on the network when the stages sit on different nodes; the gradient norm's all-reduce
// then joins the stages between the optimizer's two passes, so the last stage, whose backward ends
// first, updates only once the first stage's gradients are final. Untied, no embedding
// all-reduce. With sequence parallelism the norms' and row-parallel biases' gradients, which every
// TP rank holds whole, are summed over TP.
TEST(Iteration, StepEndCollectivesJoinTheStages) {
  ClusterSpec cluster = test_cluster();
  cluster.gpus_per_node = 1;  // each stage its own node: 25 GB/s per GPU
  cluster.nics_per_node = 1;
  const CostModel cost(cluster, EfficiencyParams::ideal());
  const ModelShape gpt = preset("gpt3_1.3b");
  ASSERT_TRUE(gpt.tied_embeddings);
  Plan two = plan_of(1, 4, 2048, false);
  two.layout.num_gpus = 2;
  two.layout.pp = 2;
  const TraceEvents ev = traced(two, gpt, cost, "tied");
  const double bytes = 4.0 * param_count(gpt, 2048).embedding;  // fp32 main gradients, tp 1
  const double expected_us = 1e6 * cost.collective_s(Collective::all_reduce, bytes, GroupPlacement{2, 1});
  ASSERT_GT(expected_us, 1e4);  // 0.4 GB at 25 GB/s: more than 10 ms
  const auto& e0 = ev.at({"embedding grad all-reduce", 0});
  const auto& e1 = ev.at({"embedding grad all-reduce", 1});
  ASSERT_EQ(e0.size(), 1u);
  ASSERT_EQ(e1.size(), 1u);
  EXPECT_NEAR(e0[0].first, e1[0].first, 1e-6);  // started together
  EXPECT_NEAR(e0[0].second, expected_us, 2e-3);  // the trace keeps ns
  // The last stage's gradients are final first: its all-reduce waited for the first stage's.
  const auto& last_backward = ev.at({"B3.0", 1});
  EXPECT_GT(e1[0].first, last_backward[0].first + last_backward[0].second + 1);
  // The norm joins both stages after both optimizers' first passes; each stage's update follows it.
  const auto& n0 = ev.at({"grad norm all-reduce", 0});
  const auto& n1 = ev.at({"grad norm all-reduce", 1});
  EXPECT_NEAR(n0[0].first, n1[0].first, 1e-6);
  for (int d : {0, 1}) {
    const auto& pre = ev.at({"optimizer: grads, norm", d})[0];
    EXPECT_GE(n0[0].first, pre.first + pre.second - 1e-6);
    EXPECT_GE(ev.at({"optimizer", d})[0].first, n0[0].first + n0[0].second - 1e-6);
  }
  // The bound counts the embedding all-reduce on the first stage; no simulation beats it.
  auto sim = simulate_iteration(two, gpt, cost);
  auto bound = iteration_bound(two, gpt, cost);
  ASSERT_TRUE(sim.ok() && bound.ok());
  EXPECT_LE(bound->step_time_s, sim->step_time_s + 1e-12);
  EXPECT_GT(bound->step_time_s, expected_us * 1e-6);
  // Untied: the output layer has its own matrix, nothing to sum.
  ModelShape untied = gpt;
  untied.tied_embeddings = false;
  const TraceEvents ev_untied = traced(two, untied, cost, "untied");
  EXPECT_EQ(ev_untied.count({"embedding grad all-reduce", 0}) + ev_untied.count({"embedding grad all-reduce", 1}), 0u);
  EXPECT_EQ(ev_untied.count({"grad norm all-reduce", 1}), 1u);

  // TP 2 with sequence parallelism, one stage: per layer two LayerNorms (weight and bias, 2h
  // each) and two row-parallel biases (h each), plus the final LayerNorm, in fp32, summed over TP.
  Plan sp = plan_of(1, 1, 2048, false);
  sp.layout.num_gpus = 2;
  sp.layout.tp = 2;
  sp.layout.sequence_parallel = true;
  const TraceEvents ev_sp = traced(sp, gpt, cost, "sp");
  const double h = static_cast<double>(gpt.hidden);
  const double sp_bytes = 4.0 * (static_cast<double>(gpt.layers) * (2 * 2 * h + 2 * h) + 2 * h);
  const double sp_us = 1e6 * cost.collective_s(Collective::all_reduce, sp_bytes, GroupPlacement{2, 1});
  EXPECT_NEAR(ev_sp.at({"tp norm-grad all-reduce", 0})[0].second, sp_us, 2e-3);  // the trace keeps ns
  sp.layout.sequence_parallel = false;
  EXPECT_EQ(traced(sp, gpt, cost, "nosp").count({"tp norm-grad all-reduce", 0}), 0u);
}

// Megatron-LM's NaN checks (check_for_nan_in_loss_and_grad): on the last stage each micro-batch's
// loss is tested for NaN and Inf after its forward (2 ops, 2 host synchronizations the device
// waits for, before the backward); on every stage each gradient bucket's L2 norm is read on the
// device and tested the same way after the chunk's last backward (3 ops, 2 synchronizations per
// bucket of at most 40M parameters), ahead of the last bucket's reduction. Off, none of it.
TEST(Iteration, MegatronNanChecksAreHostSynchronizationsPerLossAndBucket) {
  const CostModel cost = preset_model("h100_dgx");
  const ModelShape llama = preset("llama3_8b");
  const double op = cost.params().host_op_us * 1e-6, sync = cost.params().pcie_latency_us * 1e-6;
  Plan two = plan_of(1, 4, 4096, false);
  two.layout.num_gpus = 2;
  two.layout.pp = 2;
  auto off = simulate_iteration(two, llama, cost);
  two.layout.check_for_nan_in_loss_and_grad = true;
  auto on = simulate_iteration(two, llama, cost);
  auto bound = iteration_bound(two, llama, cost);
  ASSERT_TRUE(off.ok() && on.ok() && bound.ok()) << on.error_str();
  const TraceEvents ev = traced(two, llama, cost, "nan");
  const double loss_us = 1e6 * (2 * op + 2 * sync);
  for (int k = 0; k < 4; ++k) {
    const std::string f = "F" + std::to_string(k) + ".0 framework host";
    ASSERT_EQ(ev.count({f, 1}), 1u) << f;
    EXPECT_NEAR(ev.at({f, 1})[0].second, loss_us, 2e-3);
    EXPECT_EQ(ev.count({f, 0}), 0u);  // the loss is the last stage's
  }
  double host_s = 4 * (2 * op + 2 * sync);
  for (int s : {0, 1}) {
    const double params = params_per_gpu(llama, two.layout, 4096, s);
    const double buckets = std::ceil(params / 40e6);
    ASSERT_GT(buckets, 50);
    const double norm_us = 1e6 * buckets * cost.memory_bound_s(4 * params / buckets);
    const double tests_us = 1e6 * buckets * (3 * op + 2 * sync);
    EXPECT_NEAR(ev.at({"B3.0 grad nan check", s})[0].second, norm_us, 2e-3);
    EXPECT_NEAR(ev.at({"B3.0 framework host", s})[0].second, tests_us, 2e-3);
    host_s += tests_us * 1e-6;
    // After the last backward's compute, before the chunk's last bucket is reduced.
    const auto& b = ev.at({"B3.0", s})[0];
    EXPECT_GE(ev.at({"B3.0 framework host", s})[0].first, b.first + b.second - 1e-3);
  }
  EXPECT_NEAR(on->exposed_host_s - off->exposed_host_s, host_s / 2, 1e-9);  // mean over the 2 stages
  EXPECT_GT(on->step_time_s, off->step_time_s);
  EXPECT_LE(bound->step_time_s, on->step_time_s + 1e-12);
  // Without overlap_grad_reduce Megatron's DDP has one unbounded bucket: one norm, one test pair.
  two.layout.overlap_grad_reduce = false;
  const TraceEvents one = traced(two, llama, cost, "nan1");
  EXPECT_NEAR(one.at({"B3.0 framework host", 0})[0].second, 1e6 * (3 * op + 2 * sync), 2e-3);
}

}  // namespace
}  // namespace cpbench
