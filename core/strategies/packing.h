// packing.h — THD sequence packers (planning only): Megatron's dp_balanced next-fit, first-fit
// decreasing by tokens, and a FLOPs-balanced longest-processing-time packer.
// Requires: sequence lengths ≥ 1 token, capacity_tokens ≥ 1 (Megatron: max_seqlen_per_dp_cp_rank·cp),
// dp ≥ 1. Every packer returns a multiple of dp packs (trailing empty packs allowed), every pack
// holding ≤ capacity_tokens. Note: a sequence longer than the capacity is an Error naming it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/plan.h"
#include "core/strategies/strategy.h"

namespace cpbench {

struct Pack {
  std::vector<int64_t> seq_ids;  // indices into the caller's lengths
  int64_t tokens = 0;            // Σ L: what linear layers and memory see
  double sum_sq = 0;             // Σ L²: what attention FLOPs see (context_parallel.md, THD packing)
};

// Megatron dp_balanced (context_parallel.md): next-fit in the original order (no sorting) until
// adding the next sequence would exceed capacity_tokens; the pack count is rounded up to a
// multiple of dp with empty packs, so every DP replica gets the same number of micro-batches.
// Balances tokens, not FLOPs. Packs are returned in order.
Expected<std::vector<Pack>> pack_dp_balanced(const std::vector<int64_t>& lengths, int64_t capacity_tokens,
                                             int64_t dp);

// First-fit decreasing by tokens (ties by sequence id): each sequence goes into the first pack it
// fits in, a new pack otherwise; packs in order of opening; count rounded up to a multiple of dp.
Expected<std::vector<Pack>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                      int64_t capacity_tokens, int64_t dp);

// FLOPs-balanced: cost(L) = linear_cost·L + quadratic_cost·L². Greedy longest-processing-time
// (sequences by cost descending, ties by id, each into the pack of least cost that still has room)
// into n_packs packs, n_packs starting at the token lower bound ⌈Σ L / capacity⌉ rounded up to a
// multiple of dp and raised by dp until every sequence fits — the fewest packs this greedy can use.
Expected<std::vector<Pack>> pack_flops_balanced(const std::vector<int64_t>& lengths, int64_t capacity_tokens,
                                                int64_t dp, double linear_cost, double quadratic_cost);

// cost(L) summed over a pack, the quantity pack_flops_balanced balances.
double pack_cost(const Pack& pack, double linear_cost, double quadratic_cost);

// ---- the packing strategies ---------------------------------------------------------------------
// Packs the batch with `packer` ("dp_balanced" | "first_fit_decreasing" | "flops_balanced") into
// packs of ≤ max_seqlen_per_dp_cp_rank · cp tokens and deals them round-robin to the DP replicas
// (round k holds packs k·dp … k·dp + dp − 1, as Megatron's DpBalancedScheduler groups them); every
// CP rank of a replica holds its pack. Sequences are padded to the layout's rule (2·cp for the
// p2p / all_gather chunks, cp for a2a; ×tp with sequence parallelism). "" or why not.
std::string plan_static_cp(const StrategyInput& in, const std::string& packer, Plan* plan);

PlanOutcome plan_packing(const StrategyInput& in);        // Megatron dp_balanced
PlanOutcome plan_packing_ffd(const StrategyInput& in);    // first-fit decreasing
PlanOutcome plan_packing_flops(const StrategyInput& in);  // FLOPs-balanced (Σ L, Σ L² costs)

}  // namespace cpbench
