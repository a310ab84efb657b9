// packing.cpp — the three packers of packing.h.
#include "core/strategies/packing.h"

#include "core/layouts/cp_layouts.h"
#include "core/model/formulas.h"
#include "core/strategies/varlen.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace cpbench {
namespace {

Status check_inputs(const std::vector<int64_t>& lengths, int64_t capacity_tokens, int64_t dp) {
  if (capacity_tokens < 1) {
    return Error{"", "", "capacity_tokens must be ≥ 1, got " + std::to_string(capacity_tokens)};
  }
  if (dp < 1) return Error{"", "", "dp must be ≥ 1, got " + std::to_string(dp)};
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) {
      return Error{"", "", "sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                               " tokens; lengths must be ≥ 1"};
    }
    if (lengths[i] > capacity_tokens) {
      return Error{"", "", "sequence " + std::to_string(i) + " has " + std::to_string(lengths[i]) +
                               " tokens, more than the pack capacity of " + std::to_string(capacity_tokens) +
                               " tokens (max_seqlen_per_dp_cp_rank · cp)"};
    }
  }
  return ok_status();
}

void add(Pack& pack, int64_t id, int64_t length) {
  pack.seq_ids.push_back(id);
  pack.tokens += length;
  pack.sum_sq += static_cast<double>(length) * static_cast<double>(length);
}

// Empty packs up to the next multiple of dp: every DP replica runs the same micro-batch count.
void round_to_dp(std::vector<Pack>& packs, int64_t dp) {
  const size_t n = static_cast<size_t>((static_cast<int64_t>(packs.size()) + dp - 1) / dp * dp);
  packs.resize(n);
}

// Sequence ids ordered by key descending, ties by id (a stable order: same input, same plan).
template <class Key>
std::vector<int64_t> order_descending(size_t n, Key key) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return key(a) > key(b); });
  return ids;
}

}  // namespace

double pack_cost(const Pack& pack, double linear_cost, double quadratic_cost) {
  return linear_cost * static_cast<double>(pack.tokens) + quadratic_cost * pack.sum_sq;
}

Expected<std::vector<Pack>> pack_dp_balanced(const std::vector<int64_t>& lengths, int64_t capacity_tokens,
                                             int64_t dp) {
  if (Status s = check_inputs(lengths, capacity_tokens, dp); !s) return s.errors();
  std::vector<Pack> packs;
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (packs.empty() || packs.back().tokens + lengths[i] > capacity_tokens) packs.emplace_back();
    add(packs.back(), static_cast<int64_t>(i), lengths[i]);
  }
  round_to_dp(packs, dp);
  return packs;
}

Expected<std::vector<Pack>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                      int64_t capacity_tokens, int64_t dp) {
  if (Status s = check_inputs(lengths, capacity_tokens, dp); !s) return s.errors();
  std::vector<Pack> packs;
  for (int64_t id : order_descending(lengths.size(), [&](int64_t i) { return lengths[i]; })) {
    auto it = std::find_if(packs.begin(), packs.end(),
                           [&](const Pack& p) { return p.tokens + lengths[id] <= capacity_tokens; });
    if (it == packs.end()) it = packs.insert(packs.end(), Pack{});
    add(*it, id, lengths[id]);
  }
  round_to_dp(packs, dp);
  return packs;
}

Expected<std::vector<Pack>> pack_flops_balanced(const std::vector<int64_t>& lengths, int64_t capacity_tokens,
                                                int64_t dp, double linear_cost, double quadratic_cost) {
  if (Status s = check_inputs(lengths, capacity_tokens, dp); !s) return s.errors();
  if (!(linear_cost >= 0) || !(quadratic_cost >= 0)) {
    return Error{"", "", "linear_cost and quadratic_cost must be ≥ 0"};
  }
  auto cost = [&](int64_t id) {
    const double L = static_cast<double>(lengths[id]);
    return linear_cost * L + quadratic_cost * L * L;
  };
  const std::vector<int64_t> order = order_descending(lengths.size(), cost);
  const int64_t total_tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  // Token lower bound, rounded to dp; at least dp packs even for an empty batch.
  int64_t n_packs = std::max<int64_t>(1, (total_tokens + capacity_tokens - 1) / capacity_tokens);
  n_packs = (n_packs + dp - 1) / dp * dp;
  // Each sequence fits in an empty pack, so n_packs = number of sequences (rounded) always succeeds.
  for (;; n_packs += dp) {
    std::vector<Pack> packs(static_cast<size_t>(n_packs));
    std::vector<double> pack_costs(packs.size(), 0.0);
    bool fits = true;
    for (int64_t id : order) {
      size_t best = packs.size();
      for (size_t p = 0; p < packs.size(); ++p) {
        if (packs[p].tokens + lengths[id] > capacity_tokens) continue;
        if (best == packs.size() || pack_costs[p] < pack_costs[best]) best = p;
      }
      if (best == packs.size()) {
        fits = false;
        break;
      }
      add(packs[best], id, lengths[id]);
      pack_costs[best] += cost(id);
    }
    if (fits) return packs;
  }
}

namespace {

PlanOutcome plan_static(const StrategyInput& in, const std::string& packer) {
  Plan plan;
  if (auto why = plan_static_cp(in, packer, &plan); !why.empty()) return PlanOutcome::infeasible(why);
  return finish_varlen_plan(in, std::move(plan));
}

}  // namespace

std::string plan_static_cp(const StrategyInput& in, const std::string& packer, Plan* plan) {
  const ParallelConfig& L = in.parallel;
  if (auto why = check_varlen_layout(in.model, L); !why.empty()) return why;
  const int64_t dp = L.dp(), cp = L.cp;
  const int64_t capacity = L.max_seqlen_per_dp_cp_rank * cp;
  Expected<std::vector<Pack>> packs = Error{"", "", "unknown packer '" + packer + "'"};
  if (packer == "dp_balanced") packs = pack_dp_balanced(in.batch.lengths, capacity, dp);
  if (packer == "first_fit_decreasing") packs = pack_first_fit_decreasing(in.batch.lengths, capacity, dp);
  if (packer == "flops_balanced") {
    // The model's own cost of a sequence: linear FLOPs per token and attention FLOPs per L².
    const double linear = flops_varlen(in.model, 1, 0, Recompute::none, true);
    const double quadratic = flops_varlen(in.model, 0, 1, Recompute::none, true);
    packs = pack_flops_balanced(in.batch.lengths, capacity, dp, linear, quadratic);
  }
  if (!packs) return packs.error_str();
  const int64_t pad_to = static_cp_pad_multiple(L);
  int64_t m = static_cast<int64_t>(packs->size()) / dp;
  plan->layout = L;
  plan->pipeline_schedule = varlen_pipeline_schedule(L, &m);
  plan->micro_batches.assign(dp * cp, std::vector<PlanMicroBatch>(m));
  for (size_t i = 0; i < packs->size(); ++i) {
    const int64_t replica = static_cast<int64_t>(i) % dp, k = static_cast<int64_t>(i) / dp;
    PlanMicroBatch mb;
    for (int64_t id : (*packs)[i].seq_ids) mb.lengths.push_back(in.batch.lengths[id]);
    mb.cp = cp;
    mb.first_rank = replica * cp;
    mb.pad_to = pad_to;
    for (int64_t c = 0; c < cp; ++c) plan->micro_batches[replica * cp + c][k] = mb;
  }
  return "";
}

PlanOutcome plan_packing(const StrategyInput& in) { return plan_static(in, "dp_balanced"); }
PlanOutcome plan_packing_ffd(const StrategyInput& in) { return plan_static(in, "first_fit_decreasing"); }
PlanOutcome plan_packing_flops(const StrategyInput& in) { return plan_static(in, "flops_balanced"); }

}  // namespace cpbench
