#include "core/sim/cp_attention.h"

#include <algorithm>

#include "core/sim/attention_sim.h"

namespace cpbench {

Expected<AttentionCost> cp_attention_cost(const CostModel& cost, const AttentionPlan& plan,
                                          const std::vector<int>& node_of) {
  AttentionCost out;
  auto fwd = simulate_attention_plan(plan, cost, false, node_of);
  if (!fwd) return fwd.errors();
  auto both = simulate_attention_plan(plan, cost, true, node_of);
  if (!both) return both.errors();
  auto max_of = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  const double fwd_compute = max_of(fwd->compute_s);
  const double bwd_compute = std::max(0.0, max_of(both->compute_s) - fwd_compute);
  out.fwd_s = fwd->step_time_s;
  out.fwd_wait_s = std::max(0.0, out.fwd_s - fwd_compute);
  out.bwd_s = std::max(0.0, both->step_time_s - fwd->step_time_s);
  out.bwd_wait_s = std::max(0.0, out.bwd_s - bwd_compute);
  out.bwd_tail_s = std::clamp(both->step_time_s - both->last_kernel_end_s, 0.0, out.bwd_wait_s);
  return out;
}

Expected<AttentionCost> CpAttentionCache::get(const PlanMicroBatch& mb) {
  if (mb.lengths.empty()) return AttentionCost{};
  if (!mb.attention)
    return Error{"", "", "a micro-batch with cp = " + std::to_string(mb.cp) + " carries no attention plan"};
  auto key = std::make_pair(mb.attention.get(), cp_group_nodes(mb, layout_, cost_.cluster().gpus_per_node));
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  auto c = cp_attention_cost(cost_, *mb.attention, key.second);
  if (!c) return c.errors();
  memo_.emplace(std::move(key), *c);
  return *c;
}

}  // namespace cpbench
