#include "core/sim/cp_attention.h"

#include <algorithm>

#include "baselines/cp_layouts.h"
#include "core/sim/attention_sim.h"

namespace cpbench {

Expected<AttentionCost> cp_attention_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                                          const PlanMicroBatch& mb) {
  AttentionCost out;
  if (mb.lengths.empty()) return out;
  CpLayoutRequest req;
  req.layout = mb.cp > 1 ? cp_layout_for_comm_type(layout.cp_comm_type) : "single";
  if (req.layout.empty()) return Error{"", "/parallel/cp_comm_type", "unknown cp_comm_type '" + layout.cp_comm_type + "'"};
  req.cp = static_cast<int32_t>(mb.cp);
  req.seq_lengths = mb.padded_lengths();
  req.mask = *mask_from_name("causal");  // decoder LMs; a known name
  req.heads_q = static_cast<int32_t>(model.heads / layout.tp);
  req.heads_kv = static_cast<int32_t>(model.kv_heads / layout.tp);
  req.head_dim = static_cast<int32_t>(model.head_dim());
  req.pad = true;
  auto plan = plan_cp_layout(req);
  if (!plan) return plan.errors();
  const int64_t g = cost.cluster().gpus_per_node;
  const Link link = mb.cp * layout.tp <= g ? Link::nvlink : Link::network;
  auto fwd = simulate_attention_plan(*plan, cost, false, link, {}, true);
  if (!fwd) return fwd.errors();
  auto both = simulate_attention_plan(*plan, cost, true, link, {}, true);
  if (!both) return both.errors();
  auto max_of = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  const double fwd_compute = max_of(fwd->compute_s);
  const double bwd_compute = std::max(0.0, max_of(both->compute_s) - fwd_compute);
  out.fwd_s = fwd->step_time_s;
  out.fwd_wait_s = std::max(0.0, out.fwd_s - fwd_compute);
  out.bwd_s = std::max(0.0, both->step_time_s - fwd->step_time_s);
  out.bwd_wait_s = std::max(0.0, out.bwd_s - bwd_compute);
  return out;
}

Expected<AttentionCost> CpAttentionCache::get(const PlanMicroBatch& mb) {
  auto key = std::make_pair(mb.padded_lengths(), mb.cp);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  auto c = cp_attention_cost(cost_, model_, layout_, mb);
  if (!c) return c.errors();
  memo_.emplace(std::move(key), *c);
  return *c;
}

}  // namespace cpbench
