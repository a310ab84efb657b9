#include "core/experiment/metrics.h"

#include <algorithm>

namespace cpbench {

const std::vector<MetricInfo>& known_metrics() {
  static const std::vector<MetricInfo> m = {
      {"params_b", "B", "model parameters, billions"},
      {"flops_per_iteration", "FLOP", "model FLOPs of one iteration by the spec's flops_definition"},
      {"tokens_per_iteration", "tokens", "tokens in the global batch (unpadded)"},
      {"long_token_share", "fraction", "share of the batch's tokens in sequences longer than 32768"},
      {"step_time_s", "s", "time of one training iteration"},
      {"tflops_per_gpu", "TFLOP/s", "flops_per_iteration / step_time_s / num_gpus"},
      {"aggregate_pflops", "PFLOP/s", "flops_per_iteration / step_time_s over all GPUs"},
      {"mfu", "fraction", "tflops_per_gpu / peak dense 16-bit TFLOP/s"},
      {"tokens_per_s_per_gpu", "tokens/s", "tokens_per_iteration / step_time_s / num_gpus"},
      {"tokens_per_s", "tokens/s", "tokens_per_iteration / step_time_s: the whole job's throughput"},
      {"peak_memory_gib", "GiB", "device memory the worst GPU needs: allocated + fragmentation + reserved"},
      {"peak_allocated_bytes", "B", "bytes allocated at the peak on the worst GPU (PyTorch's max_memory_allocated): weights, gradients, optimizer state, activations, workspace"},
      {"weights_optimizer_gib", "GiB", "weights, gradients and optimizer state per GPU"},
      {"offload_bytes_pcie", "B", "activation bytes one GPU copies to the host and back per iteration (activation_offload_ratio), mean per GPU"},
      {"activation_memory_gib", "GiB", "activations held at the peak, per GPU"},
      {"fragmentation_memory_gib", "GiB", "activation pool lost to the caching allocator's fragmentation"},
      {"bubble_fraction", "fraction", "pipeline idle time / step time"},
      {"exposed_comm_s", "s", "communication time not hidden under compute"},
      {"exposed_cp_comm_s", "s", "of which: attention waiting on context-parallel transfers, mean per rank"},
      {"exposed_host_s", "s", "compute stream waiting for the host to issue kernels, mean per GPU"},
      {"step_framework_s", "s", "per-step framework work, mean per GPU: zeroing the gradient buffer and the optimizer step (memory-bound passes over the state)"},
      {"contention_s", "s", "compute slowed by communication kernels running beside it, mean per GPU"},
      {"kernels_per_iteration", "count", "GPU kernels the host issues per iteration, mean per GPU (optimizer excluded)"},
      {"micro_batches", "count", "micro-batches each pipeline runs per iteration (Dynamic-CP dev and solver: rounds; main: one per sequence of a rank's groups, idle slots included)"},
      {"comm_bytes_nvlink", "B", "bytes one GPU sends per iteration inside its node: TP, PP, DP and CP, ring volumes"},
      {"comm_bytes_network", "B", "bytes one GPU sends per iteration across nodes: TP, PP, DP and CP, ring volumes"},
      {"comm_bytes_per_gpu", "B", "bytes one GPU sends per iteration, inside its node and across nodes (comm_bytes_nvlink + comm_bytes_network)"},
      {"pareto_optimal", "bool", "frontier runs: 1 when no other point of the run is at least as good in every objective and better in one"},
      {"cp_comm_bytes_nvlink", "B", "context-parallel attention bytes one GPU sends per iteration inside a node"},
      {"cp_comm_bytes_network", "B", "context-parallel attention bytes one GPU sends per iteration across nodes"},
      {"compute_imbalance", "ratio", "max / mean compute time across ranks"},
      {"padding_fraction", "fraction", "padding tokens / real tokens"},
      {"cpu_attention_plans_executed", "count", "cpu backend: distinct CP attention plans executed on MPI ranks"},
      {"cpu_attention_plans_skipped", "count", "cpu backend: CP attention plans it could not run here (ranks, budget)"},
      {"cpu_attention_predicted_s", "s", "cpu backend: the executed plans simulated on this machine's preset (one layer, fwd+bwd)"},
      {"cpu_bytes_match_plan", "bool", "cpu backend: 1 when every rank moved exactly the bytes its plans say"},
      {"cpu_max_error_fraction", "ratio", "cpu backend: the worst executed value's error over its tolerance (≤ 1 passes)"},
      {"cpu_wrong_values", "count", "cpu backend: executed values beyond their tolerance (nccl-tests' #wrong)"},
      {"cuda_attention_plans_executed", "count", "cuda backend: distinct CP attention plans executed on this machine's GPU"},
      {"cuda_attention_plans_skipped", "count", "cuda backend: CP attention plans it did not run (their host check over the budget)"},
      {"cuda_attention_predicted_s", "s", "cuda backend: the executed plans' kernels, every rank's one after the other, simulated on the point's GPU (one layer, fwd+bwd)"},
      {"cuda_bytes_match_plan", "bool", "cuda backend: 1 when every rank moved exactly the bytes its plans say"},
      {"cuda_max_error_fraction", "ratio", "cuda backend: the worst executed value's error over its tolerance (≤ 1 passes)"},
      {"cuda_wrong_values", "count", "cuda backend: executed values beyond their tolerance (nccl-tests' #wrong)"},
      {"attention_time_s", "s", "attention micro-benchmark: one layer's attention forward + backward on its slowest rank, transfers included"},
      {"attention_fwd_s", "s", "attention micro-benchmark: of which the forward"},
      {"attention_bwd_s", "s", "attention micro-benchmark: of which the backward"},
      {"attention_tflops_per_gpu", "TFLOP/s", "attention micro-benchmark: the mask's allowed pairs × heads × 4·head_dim × 3.5 (forward + backward) / attention_time_s / GPUs"},
      {"reconfigure_time_s", "s", "reconfiguration: time to change the job's layout (restart + state transfer)"},
      {"reconfigure_transfer_s", "s", "reconfiguration: of which moving the state (the busiest node's network bytes / the store's rate)"},
      {"reconfigure_restart_s", "s", "reconfiguration: of which stopping and restarting the workers (the stack's restart_s)"},
      {"reshard_network_bytes", "B", "reconfiguration: state bytes that cross nodes, all nodes together"},
      {"reshard_local_bytes", "B", "reconfiguration: state bytes that stay on their node (same GPU or another GPU of it)"},
      {"reshard_critical_bytes", "B", "reconfiguration: bytes through the busiest node's network in its busier direction (central store: its upload plus download)"},
      // Wall-clock measurements: kept in a point's "timings", never in "metrics", and read by no
      // comparison, so results.json stays deterministic (DESIGN.md contract 4).
      {"plan_time_ms", "ms", "wall time of the planner for one iteration (timings)", true},
      {"point_time_ms", "ms", "wall time of the whole point: every batch planned and priced (timings)", true},
      {"cpu_attention_measured_s", "s", "cpu backend: the executed plans' wall time on MPI ranks (timings)", true},
      {"cuda_attention_measured_s", "s", "cuda backend: the executed plans' wall time on the GPU's thread ranks (timings)", true},
  };
  return m;
}

const MetricInfo* find_metric(const std::string& name) {
  for (const auto& m : known_metrics())
    if (m.name == name) return &m;
  return nullptr;
}

bool lower_is_better(const MetricInfo& m) {
  const bool waste = m.unit == "fraction" && m.name.size() > 9 && m.name.ends_with("_fraction");
  return m.unit == "s" || m.unit == "ms" || m.unit == "B" || m.unit == "GiB" || m.unit == "ratio" || waste;
}

bool is_rate(const MetricInfo& m) {
  return m.unit == "TFLOP/s" || m.unit == "PFLOP/s" || m.unit == "tokens/s" || m.name == "mfu";
}

std::map<std::string, double> combine_batches(const std::vector<std::map<std::string, double>>& batches) {
  std::map<std::string, double> out;
  const size_t n = batches.size();
  // Each batch's weight for a rate: the time it ran.
  std::vector<double> weight(n, 1.0);
  for (const char* time : {"attention_time_s", "step_time_s"}) {
    if (std::all_of(batches.begin(), batches.end(), [&](const auto& b) { return b.count(time) && b.at(time) > 0; })) {
      for (size_t i = 0; i < n; ++i) weight[i] = batches[i].at(time);
      break;
    }
  }
  for (const auto& [name, first] : batches.front()) {
    if (!std::all_of(batches.begin(), batches.end(), [&](const auto& b) { return b.count(name) > 0; })) continue;
    const MetricInfo* info = find_metric(name);
    const std::string unit = info ? info->unit : "";
    const bool rate = info && is_rate(*info);
    double v = 0;
    if (unit == "GiB") {
      v = first;
      for (const auto& b : batches) v = std::max(v, b.at(name));
    } else if (unit == "bool") {
      v = first;
      for (const auto& b : batches) v = std::min(v, b.at(name));
    } else if (rate) {
      double w = 0;
      for (size_t i = 0; i < n; ++i) {
        v += batches[i].at(name) * weight[i];
        w += weight[i];
      }
      v /= w;
    } else {
      for (const auto& b : batches) v += b.at(name);
      v /= static_cast<double>(n);
    }
    out[name] = v;
  }
  return out;
}

}  // namespace cpbench
