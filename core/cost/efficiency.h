// efficiency.h — the calibrated constants of the cost model (what a GPU cluster really achieves
// below its datasheet rates), read from a hardware preset's "efficiency" object.
// Requires: core/common/json_reader.h. Every constant is {"value": x, "source": "..."}; all are
// required (DESIGN.md contract 1: no hidden defaults in code, no per-experiment knobs).
// Note: kEfficiencyParams is the one table of keys, bounds and meanings; the parser, the
// calibrator and the docs all walk it, so a new constant is added in one place.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/common/citation.h"
#include "core/common/json_reader.h"

namespace cpbench {

struct EfficiencyParams {
  // GEMM (cuBLAS/CUTLASS, 16-bit inputs, fp32 accumulation).
  double gemm_peak_fraction = 1;    // mainloop rate of the largest tile / tensor-core peak
  double gemm_tile_overhead_k = 0;  // per-tile prologue + epilogue, in equivalent k elements
  double kernel_overhead_us = 0;    // fixed cost of one kernel (launch + ramp + tail)
  // Memory-bound kernels.
  double hbm_efficiency = 1;  // achievable / nominal HBM bandwidth (STREAM-like)
  // Flash attention (FlashAttention-2 or -3 style kernel).
  double attention_fwd_peak_fraction = 1;  // tensor-core fraction of the fwd matmuls
  double attention_bwd_peak_fraction = 1;  // same for the bwd matmuls
  double sfu_exp_rate_Tps = std::numeric_limits<double>::infinity();  // SFU exp/s, 10¹²
  double attention_row_overhead_keys = 0;  // fwd, per query row: masked tile waste + Q/O traffic
  // bwd, per row: the same, plus its own passes (dO·O per row, dQ's fp32 accumulator zeroed and
  // converted) and each key tile's K/V load and dK/dV write; FA2 on an H200 measures about 2.5×
  // the forward's (fa2_h200.csv).
  double attention_bwd_row_overhead_keys = 0;
  // Share of the exponentials' time hidden under the matmuls: 0 for FlashAttention-2 (softmax and
  // matmuls in turn), 1 for FlashAttention-3 / cuDNN on Hopper (ping-pong warpgroups).
  double attention_exp_overlap = 0;
  // Links: bus-bandwidth efficiency of the Simple protocol, per-step latency of Simple and LL.
  double nvlink_busbw_efficiency = 1;
  double nvlink_step_latency_us = 0;
  double nvlink_ll_step_latency_us = 0;
  double network_busbw_efficiency = 1;
  double network_step_latency_us = 0;
  double network_ll_step_latency_us = 0;
  // NCCL's network post overhead (getNetOverhead: by the host CPU's vendor): a ring that crosses
  // nodes waits at least this per intra-node step (three times it under Simple: send, receive,
  // acknowledge), however fast NVLink is.
  double network_post_overhead_us = 0;
  // NCCL's base latency of a collective (its tuning model's baseLatencies: kernel launch and
  // setup), Simple and LL, added once per ring or tree collective.
  double nccl_base_latency_us = 0;
  double nccl_ll_base_latency_us = 0;
  // NCCL send/recv between one GPU pair on different nodes / the GPU's NIC rate. Not the
  // collectives' figure: send/recv drives a pair over a few channels (NCCL_NCHANNELS_PER_NET_PEER),
  // and NCCL of 2020-21 reached about half the NIC rate that way.
  double network_p2p_efficiency = 1;
  // What one NIC carries in sum when several send/recv flows share it (an all-to-all's, two GPUs'
  // rings on one NIC) / the NIC rate. A flow alone runs at network_p2p_efficiency; where one
  // flow cannot fill the NIC (EFA: one endpoint reaches about half of 100 Gb/s, two the line rate)
  // this is the larger. Equal to network_p2p_efficiency where no separate figure is measured.
  double network_nic_efficiency = 1;
  double pcie_efficiency = 1;
  double pcie_latency_us = 0;
  // Host: CPU time the framework spends to issue one GPU kernel (Python, autograd, dispatcher,
  // cudaLaunchKernel). The host runs ahead of the GPU; a GPU kernel cannot start before it is
  // issued, so passes of short kernels become host-bound.
  double host_op_us = 0;
  // Host: CPU time a framework module's forward call spends beyond its kernels' launches (the
  // module's Python: argument and feature checks, parameter and process-group lookups), once per
  // call of a transformer layer's linears and attention core and of the embedding
  // (LayerOp::module_call). Large for TransformerEngine's modules, about zero for torch.nn's,
  // whose cost is the one eager op.
  double host_module_us = 0;
  // Contention: the share of the GPU's SMs a running communication kernel (NCCL: one CTA per
  // channel) holds; compute running beside it loses that share (core/sim/engine.h).
  double comm_sm_fraction = 0;

  // key -> citation, for every constant read from a preset (empty for ideal()).
  Sources sources;

  // Unit efficiency, zero latency and overhead, unbounded exp rate: the textbook formulas.
  static EfficiencyParams ideal() { return EfficiencyParams{}; }
};

struct EfficiencyParamInfo {
  const char* key;
  double EfficiencyParams::*member;
  double lo, hi;  // inclusive sanity bounds
  const char* meaning;
};

// Every constant, in the order of the struct.
const std::vector<EfficiencyParamInfo>& efficiency_param_table();

// Reads the "efficiency" object (every key of the table, each sourced) and calls o.finish().
EfficiencyParams parse_efficiency(JsonObject& o);

// The object parse_efficiency reads, with each value and its source.
json efficiency_to_json(const EfficiencyParams& p);

}  // namespace cpbench
