// cp_attention.h — the attention core of one packed micro-batch on its CP group, per layer and
// rank: the micro-batch's AttentionPlan (the plan the MPI and NCCL executors run) priced by the
// attention-plan simulation, transfers included.
// Requires: an AttentionPlanner from the strategy layer that expands a micro-batch into its plan
// (core/sim does not know the layouts: baselines/cp_layouts.h plan_micro_batch_attention does).
// Note: the group's link is NVLink when its cp·tp GPUs fit in one node, the network otherwise.
#pragma once

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include "core/plan/attention_plan.h"
#include "core/plan/plan.h"
#include "core/sim/layer_cost.h"

namespace cpbench {

// The AttentionPlan one layer's attention of a micro-batch runs on its CP group.
using AttentionPlanner = std::function<Expected<AttentionPlan>(const PlanMicroBatch&)>;

// One layer's attention of `plan` on its slowest rank: forward, and backward (with the transfers
// of dK/dV), each CP step's tiles priced as one varlen kernel (fuse_tiles).
Expected<AttentionCost> cp_attention_cost(const CostModel& cost, const AttentionPlan& plan, Link link);

// Memoizes the attention cost of micro-batches by (padded lengths, cp): a plan repeats them
// across ranks.
class CpAttentionCache {
 public:
  CpAttentionCache(const CostModel& cost, AttentionPlanner planner, int64_t tp)
      : cost_(cost), planner_(std::move(planner)), tp_(tp) {}
  Expected<AttentionCost> get(const PlanMicroBatch& mb);

 private:
  const CostModel& cost_;
  AttentionPlanner planner_;
  int64_t tp_;
  std::map<std::pair<std::vector<int64_t>, int64_t>, AttentionCost> memo_;
};

}  // namespace cpbench
