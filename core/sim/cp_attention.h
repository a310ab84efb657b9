// cp_attention.h — the attention core of one packed micro-batch on its CP group, per layer and
// rank: the micro-batch becomes the AttentionPlan of the layout's cp_comm_type (the plan the MPI
// and NCCL executors run), and the attention-plan simulation prices it, transfers included.
// Requires: a micro-batch with cp ≥ 1 whose padded lengths suit the layout (plan_cp_layout pads
// what does not); heads and KV heads per TP rank divisible as the layout needs (a2a: by cp).
// Note: the group's link is NVLink when its cp·tp GPUs fit in one node, the network otherwise.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include "core/model/model.h"
#include "core/plan/plan.h"
#include "core/sim/layer_cost.h"

namespace cpbench {

// One layer's attention for `mb` on the slowest rank of its group: forward, and backward (with
// the transfers of dK/dV) priced as one varlen kernel per CP step (fuse_tiles).
Expected<AttentionCost> cp_attention_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                                          const PlanMicroBatch& mb);

// Memoizes cp_attention_cost by (padded lengths, cp): a plan repeats micro-batches across ranks.
class CpAttentionCache {
 public:
  CpAttentionCache(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout)
      : cost_(cost), model_(model), layout_(layout) {}
  Expected<AttentionCost> get(const PlanMicroBatch& mb);

 private:
  const CostModel& cost_;
  const ModelShape& model_;
  const ParallelConfig& layout_;
  std::map<std::pair<std::vector<int64_t>, int64_t>, AttentionCost> memo_;
};

}  // namespace cpbench
