// cp_attention.h — the attention core of one packed micro-batch on its CP group, per layer and
// rank: the micro-batch's AttentionPlan (carried by the Plan, chosen by the strategy; the plan
// the MPI and NCCL executors run) priced by the attention-plan simulation, transfers included.
// Note: topology from the layout's rank order (parallel_config.h global_rank): a transfer between
// two members on one node is NVLink, across nodes the network.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include "core/plan/attention_plan.h"
#include "core/plan/plan.h"
#include "core/sim/layer_cost.h"

namespace cpbench {

// One layer's attention of `plan` on its slowest rank: forward, and backward (with the transfers
// of dK/dV), run as the plan says (fused_stages, pipelined_backward); node_of[i] = group member
// i's node.
Expected<AttentionCost> cp_attention_cost(const CostModel& cost, const AttentionPlan& plan,
                                          const std::vector<int>& node_of);

// Memoizes the attention cost of micro-batches by their AttentionPlan object (equal micro-batches
// of a Plan share one). A micro-batch with cp > 1 and no plan is an Error.
class CpAttentionCache {
 public:
  CpAttentionCache(const CostModel& cost, const ParallelConfig& layout) : cost_(cost), layout_(layout) {}
  Expected<AttentionCost> get(const PlanMicroBatch& mb);

 private:
  const CostModel& cost_;
  ParallelConfig layout_;
  std::map<std::pair<const AttentionPlan*, std::vector<int>>, AttentionCost> memo_;
};

}  // namespace cpbench
