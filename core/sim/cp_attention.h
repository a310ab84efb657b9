// cp_attention.h — the attention core of one packed micro-batch on its CP group, per layer and
// rank: the micro-batch's AttentionPlan (carried by the Plan, chosen by the strategy; the plan
// the MPI and NCCL executors run) priced by the attention-plan simulation, transfers included.
// Note: topology from the layout's rank order (parallel_config.h global_rank): a transfer between
// two members on one node is NVLink, across nodes the network.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
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

// The attention costs of plans already simulated on one cost model, by content: many evaluations
// share it (a search's candidates repack the same batch into the same micro-batches under
// different pipeline depths, virtual stages, checkpointing and offloading, and price the same
// attention plans again). Exact: a hit is a plan equal to the one simulated (operator==) on the
// same nodes. Thread-safe; it keeps one copy of each plan it holds.
class AttentionCostMemo {
 public:
  std::optional<AttentionCost> find(const AttentionPlan& plan, const std::vector<int>& node_of) const;
  void insert(const std::shared_ptr<const AttentionPlan>& plan, const std::vector<int>& node_of, const AttentionCost& cost);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const AttentionPlan> plan;
    std::vector<int> node_of;
    AttentionCost cost;
  };
  static uint64_t digest(const AttentionPlan& plan, const std::vector<int>& node_of);
  mutable std::mutex mu_;
  std::unordered_multimap<uint64_t, Entry> entries_;
};

// Memoizes the attention cost of micro-batches by their AttentionPlan object (equal micro-batches
// of a Plan share one), and by content in `shared` when given (which must belong to `cost`'s
// cluster). A micro-batch with cp > 1 and no plan is an Error.
class CpAttentionCache {
 public:
  CpAttentionCache(const CostModel& cost, const ParallelConfig& layout, AttentionCostMemo* shared = nullptr)
      : cost_(cost), layout_(layout), shared_(shared) {}
  Expected<AttentionCost> get(const PlanMicroBatch& mb);

 private:
  const CostModel& cost_;
  ParallelConfig layout_;
  AttentionCostMemo* shared_;
  std::map<std::pair<const AttentionPlan*, std::vector<int>>, AttentionCost> memo_;
};

}  // namespace cpbench
