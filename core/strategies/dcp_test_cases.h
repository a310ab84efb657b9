// dcp_test_cases.h — the DCP planning cases the tests of DCP share: every mask over five unequal
// sequences (causal_blockwise over three), 8 query heads, 4 K/V heads, d = 24, 32-token blocks, a
// cost model with ideal efficiencies. For tests only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/plan/attention_plan_json.h"
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

// The DCP plans the executed-plan tests run on `ranks` ranks, two simulated nodes: every case, 1 and
// 4 divisions (with 4, partial outputs and gradients go home inside the stages), head blocks of all
// heads (1), two K/V groups (2) and one K/V group (0, DCP's default); the exchange as all-to-alls
// except with two head blocks (point-to-point sends). f(request, label).
template <class F>
void for_each_executed_dcp_request(int32_t ranks, F f) {
  for (const DcpCase& c : dcp_cases())
    for (int divisions : {1, 4})
      for (int head_blocks : {1, 2, 0}) {
        DcpRequest r = dcp_request(c, ranks, ranks / 2, divisions);
        r.head_blocks = head_blocks;
        r.early_outputs = divisions == 4;
        r.all_to_all = head_blocks != 2;
        f(r, std::string(c.name) + " on " + std::to_string(ranks) + " ranks, divisions " + std::to_string(divisions) +
                 ", head blocks " + std::to_string(head_blocks));
      }
}

// Every plan for_each_executed_dcp_request names on 2, 4 and 8 ranks, planned with ideal_cost(),
// labelled: what dcp_test_plans_main writes for the GPU test, which cannot plan DCP itself (Zoltan
// needs MPI). A planning error is returned.
inline Expected<std::vector<LabelledPlan>> executed_dcp_plans() {
  const CostModel cost = ideal_cost();
  std::vector<LabelledPlan> out;
  Errors errors;
  for (int32_t ranks : {2, 4, 8})
    for_each_executed_dcp_request(ranks, [&](const DcpRequest& r, const std::string& label) {
      auto d = plan_dcp(r, cost);
      if (d.ok()) out.push_back({"DCP " + label, d->plan});
      else errors.list.insert(errors.list.end(), d.errors().list.begin(), d.errors().list.end());
    });
  if (!errors.list.empty()) return errors;
  return out;
}

}  // namespace cpbench
