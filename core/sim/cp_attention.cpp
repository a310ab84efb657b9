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
  out.bytes = both->link_bytes;
  return out;
}

uint64_t AttentionCostMemo::digest(const AttentionPlan& plan, const std::vector<int>& node_of) {
  // FNV-1a over what tells plans apart cheaply (a bucket key: equality is checked in full).
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (char c : plan.layout) mix(static_cast<unsigned char>(c));
  mix(static_cast<uint64_t>(plan.ranks));
  for (int64_t L : plan.seq_lengths) mix(static_cast<uint64_t>(L));
  mix(static_cast<uint64_t>(plan.mask.kind));
  mix(static_cast<uint64_t>(plan.heads_q) << 32 | static_cast<uint32_t>(plan.heads_kv));
  mix(static_cast<uint64_t>(plan.head_dim));
  mix(plan.stages.size());
  for (int n : node_of) mix(static_cast<uint64_t>(n));
  return h;
}

std::optional<AttentionCost> AttentionCostMemo::find(const AttentionPlan& plan, const std::vector<int>& node_of) const {
  const uint64_t h = digest(plan, node_of);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto [it, end] = entries_.equal_range(h); it != end; ++it)
    if (it->second.node_of == node_of && (it->second.plan.get() == &plan || *it->second.plan == plan)) return it->second.cost;
  return std::nullopt;
}

void AttentionCostMemo::insert(const std::shared_ptr<const AttentionPlan>& plan, const std::vector<int>& node_of,
                               const AttentionCost& cost) {
  const uint64_t h = digest(*plan, node_of);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto [it, end] = entries_.equal_range(h); it != end; ++it)
    if (it->second.node_of == node_of && (it->second.plan == plan || *it->second.plan == *plan)) return;  // another thread was first
  entries_.emplace(h, Entry{plan, node_of, cost});
}

size_t AttentionCostMemo::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

Expected<AttentionCost> CpAttentionCache::get(const PlanMicroBatch& mb) {
  if (mb.lengths.empty()) return AttentionCost{};
  if (!mb.attention)
    return Error{"", "", "a micro-batch with cp = " + std::to_string(mb.cp) + " carries no attention plan"};
  auto key = std::make_pair(mb.attention.get(), cp_group_nodes(mb, layout_, cost_.cluster().gpus_per_node));
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  std::optional<AttentionCost> known = shared_ ? shared_->find(*mb.attention, key.second) : std::nullopt;
  if (!known) {
    auto c = cp_attention_cost(cost_, *mb.attention, key.second);
    if (!c) return c.errors();
    known = *c;
    if (shared_) shared_->insert(mb.attention, key.second, *known);
  }
  memo_.emplace(std::move(key), *known);
  return *known;
}

}  // namespace cpbench
