// dynamic_cp_dev.h — Megatron dev's packing-aware Dynamic-CP scheduler (next_hdp_group_packing_aware),
// planning only: splits a global batch into rounds (micro-batches over all DP×CP ranks), each a set
// of CP groups that pack several sequences; short sequences may take a CP size above their minimum.
// Requires: lengths ≥ 1 token, ranks = dp·cp ≥ 1, max_seqlen_per_dp_cp_rank ≥ 1, and every
// cp_min(L) ≤ the largest power of two ≤ ranks (otherwise an Error naming the sequence).
// Note: reuses dynamic_cp.h's output types. Groups are aligned power-of-two slices, except the
// reference's fallback group of all `ranks` ranks when doubling cannot fill a non-power-of-two rank
// count; choices the reference leaves open are the [Dn] notes in dynamic_cp_dev.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"
#include "core/strategies/dynamic_cp.h"

namespace cpbench {

// The per-rank work bound of a round whose longest sequence has `tallest_length` tokens:
// 1.05 · tallest_length · max_seqlen_per_dp_cp_rank, in the work unit Σ L² / size (see [D1]).
double dynamic_cp_dev_round_cap(int64_t tallest_length, int64_t max_seqlen_per_dp_cp_rank);

// The scheduler. Every sequence lands in exactly one group of one round; a group's per-rank tokens
// Σ L / size never exceed max_seqlen_per_dp_cp_rank; DynamicCpGroup::work is Σ L² / size. Deterministic:
// sequences of equal length are taken in index order.
Expected<DynamicCpSchedule> schedule_dynamic_cp_dev(const std::vector<int64_t>& lengths, int64_t ranks,
                                              int64_t max_seqlen_per_dp_cp_rank);

// The strategy: Megatron dev runs its rounds as the micro-batches of the PP schedule, no extra barrier.
PlanOutcome plan_dynamic_cp_dev(const StrategyInput& in);

}  // namespace cpbench
