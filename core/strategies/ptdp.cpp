#include "core/strategies/ptdp.h"

#include <cstdio>

#include "baselines/cp_layouts.h"
#include "core/cost/cost_model.h"
#include "core/sim/iteration.h"
#include "core/sim/memory.h"
#include "core/strategies/analytical.h"
#include "core/strategies/model_flops.h"

namespace cpbench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string divides(const char* what, int64_t a, const char* by, int64_t b) {
  if (b > 0 && a % b == 0) return "";
  return std::string(what) + " " + std::to_string(a) + " is not a multiple of " + by + " " + std::to_string(b);
}

}  // namespace

std::string check_model_split(const ModelShape& m, const ParallelConfig& L) {
  for (const std::string& why : {divides("heads", m.heads, "tp", L.tp), divides("kv_heads", m.kv_heads, "tp", L.tp),
                                 divides("ffn_hidden", m.ffn_hidden, "tp", L.tp),
                                 divides("layers", m.layers, "pp·vp", L.pp * L.vp)})
    if (!why.empty()) return why;
  return "";
}

std::string plan_ptdp(const StrategyInput& in, Plan* plan) {
  const ParallelConfig& L = in.parallel;
  const ModelShape& m = in.model;
  if (L.cp > 1) return "ptdp has no context parallelism (cp = " + std::to_string(L.cp) + "); use a CP strategy";
  if (auto why = check_model_split(m, L); !why.empty()) return why;
  const int64_t sequences = static_cast<int64_t>(in.batch.lengths.size());
  const int64_t per_replica = L.dp() * L.micro_batch_size;
  if (auto why = divides("global batch (sequences)", sequences, "dp·micro_batch_size", per_replica); !why.empty())
    return why;
  const int64_t micro_batches = sequences / per_replica;
  plan->layout = L;
  plan->pipeline_schedule = L.vp > 1 ? "interleaved" : "1f1b";
  if (L.vp > 1 && micro_batches % L.pp != 0)
    return "interleaved 1F1B needs the micro-batch count " + std::to_string(micro_batches) +
           " to be a multiple of pp " + std::to_string(L.pp);
  // Megatron's sampler hands each DP rank consecutive slices of the global batch.
  plan->micro_batches.assign(L.dp(), {});
  size_t next = 0;
  for (int64_t r = 0; r < L.dp(); ++r)
    for (int64_t k = 0; k < micro_batches; ++k) {
      PlanMicroBatch mb;
      for (int64_t i = 0; i < L.micro_batch_size; ++i) mb.lengths.push_back(in.batch.lengths[next++]);
      plan->micro_batches[r].push_back(std::move(mb));
    }
  return "";
}

StrategyOutcome run_ptdp(const StrategyInput& in) {
  Plan plan;
  if (auto why = plan_ptdp(in, &plan); !why.empty()) return StrategyOutcome::infeasible(why);
  return evaluate_plan(in, plan);
}

StrategyOutcome evaluate_plan(const StrategyInput& in, const Plan& plan) {
  StrategyOutcome out = run_analytical(in);
  MemoryEstimate mem = estimate_memory(in.model, plan, in.cluster.memory);
  if (mem.total() / kGiB > in.cluster.gpu.hbm_gib) {
    char why[240];
    std::snprintf(why, sizeof why,
                  "out of memory: %.1f GiB per GPU needed (weights+optimizer %.1f, activations %.1f, allocator "
                  "fragmentation %.1f, reserved %.1f), %.0f GiB on the GPU",
                  mem.total() / kGiB, mem.weights_optimizer_bytes / kGiB, (mem.activation_bytes + mem.workspace_bytes) / kGiB,
                  mem.fragmentation_bytes / kGiB, mem.reserved_bytes / kGiB, in.cluster.gpu.hbm_gib);
    return StrategyOutcome::infeasible(why);
  }
  auto cost = CostModel::create(in.cluster);
  if (!cost) return {"error", cost.error_str(), {}};
  const AttentionPlanner attention = [&](const PlanMicroBatch& mb) {
    return plan_micro_batch_attention(mb, in.model, plan.layout);
  };
  auto sim = simulate_iteration(plan, in.model, *cost, in.trace_path, attention);
  if (!sim) return {"error", sim.error_str(), {}};

  const double flops = out.metrics["flops_per_iteration"];
  const double gpus = static_cast<double>(in.parallel.num_gpus);
  const double step = sim->step_time_s;
  auto& mt = out.metrics;
  mt["step_time_s"] = step;
  mt["tflops_per_gpu"] = flops / step / gpus / 1e12;
  mt["aggregate_pflops"] = flops / step / 1e15;
  mt["mfu"] = mt["tflops_per_gpu"] / in.cluster.gpu.peak_dense_tflops;
  mt["tokens_per_s_per_gpu"] = mt["tokens_per_iteration"] / step / gpus;
  mt["bubble_fraction"] = sim->bubble_fraction;
  mt["exposed_comm_s"] = sim->exposed_comm_s;
  mt["exposed_cp_comm_s"] = sim->exposed_cp_comm_s;
  mt["compute_imbalance"] = sim->compute_imbalance;
  mt["micro_batches"] = static_cast<double>(plan.micro_batches.front().size());
  mt["peak_memory_gib"] = mem.total() / kGiB;
  mt["weights_optimizer_gib"] = mem.weights_optimizer_bytes / kGiB;
  mt["activation_memory_gib"] = (mem.activation_bytes + mem.workspace_bytes) / kGiB;
  mt["fragmentation_memory_gib"] = mem.fragmentation_bytes / kGiB;
  return out;
}

}  // namespace cpbench
