// strategy_registry.cpp — the table of strategies, in a fixed order. Adding a strategy is one line here
// (docs/strategies.md); no static-registration macros, so the list is readable in one place.
#include "core/experiment/strategy_registry.h"

#include "core/search/adaptive.h"
#include "core/search/search.h"
#include "core/strategies/attention_bench.h"
#include "core/strategies/ptdp.h"
#include "core/strategies/dcp.h"
#include "core/strategies/dynamic_cp.h"
#include "core/strategies/dynamic_cp_dev.h"
#include "core/strategies/dynamic_cp_solver.h"
#include "core/strategies/packing.h"

namespace cpbench {

const std::vector<StrategyInfo>& strategies() {
  static const std::vector<StrategyInfo> table = {
      {"ptdp", "Megatron PTD-P: TP × PP (1F1B / interleaved) × DP on fixed-length micro-batches", plan_ptdp},
      {"zero3", "ZeRO-3 / FSDP: PTD-P with parameters, gradients and optimizer state sharded over DP×CP, per-layer gathers and gradient reduce-scatters", plan_zero3},
      {"ptdp_search", "PTD-P at the layout the configuration search ranks search.rank (t, c, p, l, checkpointing, α, micro-batch; Kwai ATC'24's search)", plan_ptdp_search},
      {"packing", "THD packing (Megatron dp_balanced) under one static CP size and cp_comm_type", plan_packing},
      {"packing_ffd", "THD packing, first-fit decreasing by tokens, under one static CP size", plan_packing_ffd},
      {"packing_flops", "THD packing balanced by the model's FLOPs (Σ L, Σ L²), under one static CP size", plan_packing_flops},
      {"dynamic_cp", "Dynamic-CP, Megatron main's scheduler: CP size per sequence, balanced rounds, barrier per round", plan_dynamic_cp},
      {"dynamic_cp_dev", "Dynamic-CP, Megatron dev's packing-aware scheduler: rounds under a 1.05 cap, deferral, PP-friendly", plan_dynamic_cp_dev},
      {"cp_attention", "attention micro-benchmark: the batch's attention (one layer, fwd + bwd) under a static CP layout (parallel.attention_layout) over all GPUs", plan_cp_attention},
      {"dcp", "DCP end to end: plan_packing's micro-batches with each CP group's attention placed by DCP's blockwise planner (SOSP'25 §7.2), nothing padded", plan_dcp_training, true},
      {"dcp_attention", "attention micro-benchmark: DCP's blockwise placement by hypergraph partitioning (SOSP'25) over all GPUs", plan_dcp_attention, true},
      {"dynamic_cp_solver", "Dynamic-CP, the blog's solver: FLOPs cost model, pipeline-aware buckets, micro-batch count searched", plan_dynamic_cp_solver},
      {"adaptive_oracle", "per batch, the fastest of packing and the three Dynamic-CP schedulers as the simulator prices each batch's plans", plan_adaptive_oracle},
      {"adaptive_rule", "per batch, packing or a Dynamic-CP scheduler picked from the batch's features (longest sequence, long-token share) without simulating", plan_adaptive_rule},
  };
  return table;
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const auto& s : strategies())
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace cpbench
