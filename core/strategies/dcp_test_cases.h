// dcp_test_cases.h — the DCP planning cases the tests of DCP share: every mask over five unequal
// sequences (causal_blockwise over three), 8 query heads, 4 K/V heads, d = 24, 32-token blocks, a
// cost model with ideal efficiencies. For tests only.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/runtime/executor_test_util.h"
#include "core/strategies/dcp.h"

namespace cpbench {

inline CostModel ideal_cost() {
  ClusterSpec c;
  c.gpu.peak_dense_tflops = 312;
  c.gpu.hbm_bandwidth_GBps = 1555;
  c.gpu.sm_count = 108;
  return CostModel(c, EfficiencyParams::ideal());
}

struct DcpCase {
  const char* name;
  MaskSpec mask;
  std::vector<int64_t> lengths;
};

inline std::vector<DcpCase> dcp_cases() {
  const std::vector<int64_t> lengths{300, 37, 129, 64, 90};
  std::vector<DcpCase> out;
  for (const MaskCase& m : every_mask(40, 32))
    out.push_back({m.name, m.mask, m.mask.kind == MaskKind::causal_blockwise ? std::vector<int64_t>{256, 100, 40} : lengths});
  return out;
}

inline DcpRequest dcp_request(const DcpCase& c, int32_t ranks, int32_t gpus_per_node, int32_t divisions) {
  DcpRequest r;
  r.seq_lengths = c.lengths;
  r.mask = c.mask;
  r.heads_q = 8;
  r.heads_kv = 4;
  r.head_dim = 24;
  r.value_bytes = 2;
  r.ranks = ranks;
  r.gpus_per_node = gpus_per_node;
  r.block_tokens = 32;
  r.divisions = divisions;
  return r;
}

}  // namespace cpbench
