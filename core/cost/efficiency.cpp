#include "core/cost/efficiency.h"

#include "core/hardware/hardware.h"

namespace cpbench {

const std::vector<EfficiencyParamInfo>& efficiency_param_table() {
  using E = EfficiencyParams;
  // Bounds are sanity limits; fractions cannot exceed 1 (a rate above the datasheet is a typo).
  static const std::vector<EfficiencyParamInfo> table = {
      {"gemm_peak_fraction", &E::gemm_peak_fraction, 0.01, 1, "large-tile GEMM rate / peak"},
      {"gemm_tile_overhead_k", &E::gemm_tile_overhead_k, 0, 1e5, "per-tile fixed cost, in k"},
      {"kernel_overhead_us", &E::kernel_overhead_us, 0, 1e4, "fixed cost per kernel, µs"},
      {"hbm_efficiency", &E::hbm_efficiency, 0.01, 1, "achievable / nominal HBM bandwidth"},
      {"attention_fwd_peak_fraction", &E::attention_fwd_peak_fraction, 0.01, 1,
       "flash-attention fwd matmul rate / peak"},
      {"attention_bwd_peak_fraction", &E::attention_bwd_peak_fraction, 0.01, 1,
       "flash-attention bwd matmul rate / peak"},
      {"sfu_exp_rate_Tps", &E::sfu_exp_rate_Tps, 1e-3, 1e6, "exponentials per s, 10^12"},
      {"attention_row_overhead_keys", &E::attention_row_overhead_keys, 0, 1e5,
       "forward: per-query-row fixed cost, in keys"},
      {"attention_bwd_row_overhead_keys", &E::attention_bwd_row_overhead_keys, 0, 1e5,
       "backward: per-row fixed cost, in keys"},
      {"attention_exp_overlap", &E::attention_exp_overlap, 0, 1,
       "share of the exponentials hidden under the attention matmuls"},
      {"nvlink_busbw_efficiency", &E::nvlink_busbw_efficiency, 0.01, 1,
       "NCCL Simple busbw / NVLink rate"},
      {"nvlink_step_latency_us", &E::nvlink_step_latency_us, 0, 1e4, "Simple, per step, µs"},
      {"nvlink_ll_step_latency_us", &E::nvlink_ll_step_latency_us, 0, 1e4, "LL, per step, µs"},
      {"network_busbw_efficiency", &E::network_busbw_efficiency, 0.01, 1,
       "NCCL Simple busbw / NIC rate"},
      {"network_step_latency_us", &E::network_step_latency_us, 0, 1e4, "Simple, per step, µs"},
      {"network_ll_step_latency_us", &E::network_ll_step_latency_us, 0, 1e4, "LL, per step, µs"},
      {"network_post_overhead_us", &E::network_post_overhead_us, 0, 1e4,
       "NCCL's network post overhead, the least an intra-node step of a multi-node ring waits (×3 under Simple), µs"},
      {"nccl_base_latency_us", &E::nccl_base_latency_us, 0, 1e4, "NCCL's base latency of a ring or tree collective, Simple, µs"},
      {"nccl_ll_base_latency_us", &E::nccl_ll_base_latency_us, 0, 1e4, "the same, LL, µs"},
      {"network_p2p_efficiency", &E::network_p2p_efficiency, 0.01, 1,
       "inter-node send/recv bandwidth of one GPU pair / NIC rate"},
      {"network_nic_efficiency", &E::network_nic_efficiency, 0.01, 1,
       "inter-node send/recv bandwidth one NIC carries over several flows / NIC rate"},
      {"pcie_efficiency", &E::pcie_efficiency, 0.01, 1, "copy bandwidth / PCIe rate"},
      {"pcie_latency_us", &E::pcie_latency_us, 0, 1e4, "per copy, µs"},
      {"host_op_us", &E::host_op_us, 0, 1e4, "host time to issue one GPU kernel, µs"},
      {"host_module_us", &E::host_module_us, 0, 1e4,
       "host time of one framework module's forward call beyond its kernels' launches, µs"},
      {"comm_sm_fraction", &E::comm_sm_fraction, 0, 0.9, "share of the SMs a running communication kernel holds"},
  };
  return table;
}

EfficiencyParams parse_efficiency(JsonObject& o) {
  EfficiencyParams p;
  for (const auto& info : efficiency_param_table()) {
    const json* v = o.raw(info.key);
    if (!v) {
      o.error(info.key, std::string("missing required key \"") + info.key + "\" (" +
                            info.meaning + "): every cost-model constant lives in the preset");
      continue;
    }
    p.*info.member = sourced_number(o, info.key, info.key, info.lo, info.hi, p.sources);
  }
  o.finish();
  return p;
}

json efficiency_to_json(const EfficiencyParams& p) {
  json out = json::object();
  for (const auto& info : efficiency_param_table()) {
    auto it = p.sources.find(info.key);
    const Citation c = it == p.sources.end() ? Citation{} : it->second;
    out[info.key] = {{"value", p.*info.member}, {"source", c.text}};
    if (!c.kind.empty()) out[info.key]["kind"] = c.kind;
  }
  return out;
}

}  // namespace cpbench
