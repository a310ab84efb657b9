// dynamic_cp.h — Megatron main's Dynamic-CP scheduler (BalancedCPScheduler), planning only: splits a
// global batch into rounds; in each round every DP×CP rank belongs to at most one CP group.
// Requires: lengths ≥ 1 token, ranks = dp·cp ≥ 1, max_seqlen_per_dp_cp_rank ≥ 1, and every
// cp_min(L) ≤ the largest power of two ≤ ranks (otherwise an Error naming the sequence).
// Note: groups are aligned power-of-two slices [first_rank, first_rank + size), first_rank % size
// == 0 — the process groups Megatron creates at start-up (references/context_parallel.md).
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"
#include "core/plan/dynamic_cp_schedule.h"
#include "core/plan/plan.h"
#include "core/strategies/strategy.h"

namespace cpbench {

// cp_min(L) = max(1, 2^ceil(log2(L / max_seqlen_per_dp_cp_rank))), in exact integer arithmetic.
int64_t dynamic_cp_min_cp_size(int64_t length, int64_t max_seqlen_per_dp_cp_rank);

// cp_min of every sequence and the largest power of two ≤ ranks, after checking the inputs: an
// Error for ranks or max_seqlen_per_dp_cp_rank < 1, a length < 1, or a sequence whose cp_min
// exceeds the largest power-of-two group (naming the sequence, its length and both sizes).
struct DynamicCpMinSizes {
  std::vector<int64_t> cp_min;
  int64_t largest_pow2 = 1;
};
Expected<DynamicCpMinSizes> dynamic_cp_min_cp_sizes(const std::vector<int64_t>& lengths, int64_t ranks,
                                       int64_t max_seqlen_per_dp_cp_rank);

// Gives a round's groups their ranks: sizes descending (ties keep the given order), laid out
// contiguously from rank 0. With power-of-two sizes every offset is a sum of sizes ≥ the current
// one, so each group is an aligned slice (first_rank % size == 0); Σ size must be ≤ the ranks.
void lay_out_aligned(std::vector<DynamicCpGroup> groups, DynamicCpRound* round);

// A group while Megatron's schedulers (main and dev) fill a round: its CP size, its sequences,
// Σ L over them, and its per-rank work Σ L² / size.
struct DynamicCpOpenGroup {
  int64_t size = 1;
  std::vector<int64_t> seq_ids;
  int64_t tokens = 0;
  double work = 0;
};

// The round's groups laid out with lay_out_aligned.
void lay_out_open_groups(const std::vector<DynamicCpOpenGroup>& open, DynamicCpRound* round);

// Rounds until every sequence is placed: builder.build(pending, &round) fills one round and
// returns the sequences left for later ones (main and dev share this loop).
template <class RoundBuilder>
DynamicCpSchedule build_rounds(RoundBuilder& builder, std::vector<int64_t> pending) {
  DynamicCpSchedule schedule;
  while (!pending.empty()) {
    DynamicCpRound round;
    pending = builder.build(pending, &round);
    schedule.rounds.push_back(std::move(round));
  }
  return schedule;
}

inline double squared_length(int64_t length) { return static_cast<double>(length) * static_cast<double>(length); }

// The scheduler. Choices where context_parallel.md is ambiguous are documented in dynamic_cp.cpp.
Expected<DynamicCpSchedule> schedule_dynamic_cp_main(const std::vector<int64_t>& lengths, int64_t ranks,
                                               int64_t max_seqlen_per_dp_cp_rank);

// ---- the Dynamic-CP strategies (this scheduler's; dynamic_cp_dev.h and dynamic_cp_solver.h hold
// the others) -----------------------------------------------------------------------------------
// How a Dynamic-CP executor runs a round. packed (Megatron dev's and the solver's): round k is
// micro-batch k of every rank, a rank's sequences of the round packed into it. per_sequence
// (Megatron main's, hybrid_cp_schedule.py): every sequence is a forward and backward step of its
// own, the host waiting for the device around each, and a barrier over DP×CP follows each round.
enum class DynamicCpExecutor { packed, per_sequence };

// The plan of a Dynamic-CP schedule over the pool of DP×CP ranks: a group's members hold its
// sequences with cp = the group's size; idle ranks hold an empty micro-batch. packed: round k is
// micro-batch k of every rank. per_sequence: a round is as many micro-batches as its largest group
// has sequences, one sequence each, in the group's order (a group with fewer idle for the rest),
// and plan.round_start marks each round's first, where the barrier over DP×CP is. Sequences are
// padded to dynamic_cp_pad_multiple(pool, SP size) — 2·pool for a power-of-two pool, 2·(largest
// power of two ≤ pool) otherwise: any sample may land on any group (references/context_parallel.md,
// THD packing). All-idle rounds are dropped. layout.cp is set to
// 1. A round check_dynamic_cp_round refuses (a scheduler's bug) is an Error naming the round.
Expected<Plan> plan_from_dynamic_cp_schedule(const DynamicCpSchedule& schedule, const std::vector<int64_t>& lengths,
                                             const ParallelConfig& layout, DynamicCpExecutor executor);

// The lengths a Dynamic-CP scheduler places: each padded to dynamic_cp_pad_multiple, as the data
// loader pads a sample before any scheduler sees it.
std::vector<int64_t> dynamic_cp_scheduled_lengths(const std::vector<int64_t>& lengths, const ParallelConfig& layout);

// A strategy from a scheduler of the (lengths, ranks, max_seqlen_per_dp_cp_rank) signature.
using DynamicCpScheduler = Expected<DynamicCpSchedule> (*)(const std::vector<int64_t>&, int64_t, int64_t);
PlanOutcome plan_with_dynamic_cp_scheduler(const StrategyInput& in, DynamicCpScheduler scheduler, DynamicCpExecutor executor);

PlanOutcome plan_dynamic_cp(const StrategyInput& in);  // Megatron main's scheduler and executor

}  // namespace cpbench
