#include "core/evaluate/evaluate.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/cost/cost_model.h"
#include "core/model/model_flops.h"
#include "core/sim/iteration.h"
#include "core/sim/memory.h"

namespace cpbench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What the workload itself is, whatever runs it: parameters, model FLOPs, tokens, tail share.
void workload_metrics(const EvalInput& in, const Plan& plan, std::map<std::string, double>& mt) {
  // Learned position tables are sized by the longest sequence the model is trained on.
  mt["params_b"] = params_exact(in.model, in.batch.max_length()) / 1e9;
  mt["flops_per_iteration"] =
      model_flops_per_iteration(in.model, in.batch, parse_recompute(plan.layout.recompute), in.flops_definition);
  const double total = static_cast<double>(in.batch.total_tokens());
  mt["tokens_per_iteration"] = total;
  // How long-tailed the batch is: the share of tokens in sequences above 32K (the Dynamic-CP
  // sensitivity axis; 32K is where a sequence no longer fits a 16K–32K per-rank budget).
  double long_tokens = 0;
  for (int64_t L : in.batch.lengths)
    if (L > 32768) long_tokens += static_cast<double>(L);
  mt["long_token_share"] = total > 0 ? long_tokens / total : 0;
}

// Kernel tokens over real tokens, minus one, counting each CP group once.
double padding_fraction(const Plan& plan) {
  double real = 0, padded = 0;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      const double share = 1.0 / static_cast<double>(std::max<int64_t>(1, mb.cp));
      real += share * static_cast<double>(mb.tokens());
      padded += share * static_cast<double>(mb.padded_tokens());
    }
  return real > 0 ? padded / real - 1 : 0;
}

// CP attention bytes one layer's forward and backward move per TP rank, summed over the plan's
// micro-batches and ranks, split by whether the group's GPUs share a node.
struct CpBytes {
  double nvlink = 0, network = 0;
};
CpBytes cp_bytes_per_layer(const Plan& plan, const ClusterSpec& cluster) {
  CpBytes b;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      if (!mb.attention) continue;
      const RankBytes rb = plan_bytes(*mb.attention, true);
      // Every member holds the micro-batch; count the group once, at the rank's share.
      double sent = 0;
      for (double x : rb.sent) sent += x;
      sent /= static_cast<double>(mb.cp);
      (mb.cp * plan.layout.tp <= cluster.gpus_per_node ? b.nvlink : b.network) += sent;
    }
  return b;
}

Evaluation evaluate_sim(const EvalInput& in, const Plan& plan) {
  Evaluation out;
  workload_metrics(in, plan, out.metrics);
  MemoryEstimate mem = estimate_memory(in.model, plan, in.cluster.memory);
  if (mem.total() / kGiB > in.cluster.gpu.hbm_gib) {
    char why[240];
    std::snprintf(why, sizeof why,
                  "out of memory: %.1f GiB per GPU needed (weights+optimizer %.1f, activations %.1f, allocator "
                  "fragmentation %.1f, reserved %.1f), %.0f GiB on the GPU",
                  mem.total() / kGiB, mem.weights_optimizer_bytes / kGiB, (mem.activation_bytes + mem.workspace_bytes) / kGiB,
                  mem.fragmentation_bytes / kGiB, mem.reserved_bytes / kGiB, in.cluster.gpu.hbm_gib);
    return {"infeasible", why, {}};
  }
  auto cost = CostModel::create(in.cluster);
  if (!cost) return {"error", cost.error_str(), {}};
  auto sim = simulate_iteration(plan, in.model, *cost, in.trace_path);
  if (!sim) return {"error", sim.error_str(), {}};

  auto& mt = out.metrics;
  const double flops = mt["flops_per_iteration"];
  const double gpus = static_cast<double>(plan.layout.num_gpus);
  const double step = sim->step_time_s;
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
  mt["padding_fraction"] = padding_fraction(plan);
  // CP bytes per GPU over the iteration: per layer and TP rank, times the layers a GPU holds.
  const CpBytes cp = cp_bytes_per_layer(plan, in.cluster);
  const double layers_per_gpu = static_cast<double>(in.model.layers) / plan.layout.pp;
  const double ranks = static_cast<double>(plan.micro_batches.size());
  mt["cp_comm_bytes_nvlink"] = cp.nvlink * layers_per_gpu / ranks;
  mt["cp_comm_bytes_network"] = cp.network * layers_per_gpu / ranks;
  return out;
}

}  // namespace

const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names = {"sim"};
  return names;
}

Evaluation evaluate(const EvalInput& in, const Plan& plan, const std::string& backend) {
  if (backend == "sim") return evaluate_sim(in, plan);
  return {"error", "unknown backend '" + backend + "' (known: sim)", {}};
}

std::string plan_summary(const Plan& plan, const ClusterSpec& cluster) {
  const ParallelConfig& L = plan.layout;
  std::string s;
  char line[320];
  const size_t ranks = plan.micro_batches.size();
  const size_t m = ranks ? plan.micro_batches.front().size() : 0;
  std::snprintf(line, sizeof line, "    layout tp %lld pp %lld vp %lld cp %lld dp %lld, %s schedule, %zu micro-batches on each of %zu DP×CP ranks%s\n",
                static_cast<long long>(L.tp), static_cast<long long>(L.pp), static_cast<long long>(L.vp),
                static_cast<long long>(L.cp), static_cast<long long>(L.dp()), plan.pipeline_schedule.c_str(), m, ranks,
                plan.round_barrier ? ", a barrier per round" : "");
  s += line;
  std::set<int64_t> sizes;
  int64_t tokens_max = 0, tokens_min = -1;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      if (mb.lengths.empty()) continue;
      sizes.insert(mb.cp);
      const int64_t t = mb.padded_tokens() / std::max<int64_t>(1, mb.cp);
      tokens_max = std::max(tokens_max, t);
      tokens_min = tokens_min < 0 ? t : std::min(tokens_min, t);
    }
  std::string groups;
  for (int64_t c : sizes) groups += (groups.empty() ? "" : ", ") + std::to_string(c);
  std::snprintf(line, sizeof line, "    CP group sizes {%s}; tokens per rank and micro-batch %lld..%lld\n", groups.c_str(),
                static_cast<long long>(std::max<int64_t>(0, tokens_min)), static_cast<long long>(tokens_max));
  s += line;
  const CpBytes cp = cp_bytes_per_layer(plan, cluster);
  if (cp.nvlink + cp.network > 0) {
    std::snprintf(line, sizeof line, "    CP attention bytes per layer (fwd+bwd, all ranks): NVLink %.3g, network %.3g\n",
                  cp.nvlink, cp.network);
    s += line;
  }
  return s;
}

}  // namespace cpbench
