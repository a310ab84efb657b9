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
#include "core/plan/dyncp_schedule.h"

namespace cpbench {

// cp_min(L) = max(1, 2^ceil(log2(L / max_seqlen_per_dp_cp_rank))), in exact integer arithmetic.
int64_t dyncp_min_cp_size(int64_t length, int64_t max_seqlen_per_dp_cp_rank);

// cp_min of every sequence and the largest power of two ≤ ranks, after checking the inputs: an
// Error for ranks or max_seqlen_per_dp_cp_rank < 1, a length < 1, or a sequence whose cp_min
// exceeds the largest power-of-two group (naming the sequence, its length and both sizes).
struct DynCpMinSizes {
  std::vector<int64_t> cp_min;
  int64_t largest_pow2 = 1;
};
Expected<DynCpMinSizes> dyncp_min_cp_sizes(const std::vector<int64_t>& lengths, int64_t ranks,
                                       int64_t max_seqlen_per_dp_cp_rank);

// Gives a round's groups their ranks: sizes descending (ties keep the given order), laid out
// contiguously from rank 0. With power-of-two sizes every offset is a sum of sizes ≥ the current
// one, so each group is an aligned slice (first_rank % size == 0); Σ size must be ≤ the ranks.
void lay_out_aligned(std::vector<DynCpGroup> groups, DynCpRound* round);

// A group while Megatron's schedulers (main and dev) fill a round: its CP size, its sequences,
// Σ L over them, and its per-rank work Σ L² / size.
struct DynCpOpenGroup {
  int64_t size = 1;
  std::vector<int64_t> seq_ids;
  int64_t tokens = 0;
  double work = 0;
};

// The round's groups laid out with lay_out_aligned.
void lay_out_open_groups(const std::vector<DynCpOpenGroup>& open, DynCpRound* round);

// Rounds until every sequence is placed: builder.build(pending, &round) fills one round and
// returns the sequences left for later ones (main and dev share this loop).
template <class RoundBuilder>
DynCpSchedule build_rounds(RoundBuilder& builder, std::vector<int64_t> pending) {
  DynCpSchedule schedule;
  while (!pending.empty()) {
    DynCpRound round;
    pending = builder.build(pending, &round);
    schedule.rounds.push_back(std::move(round));
  }
  return schedule;
}

inline double squared_length(int64_t length) { return static_cast<double>(length) * static_cast<double>(length); }

// The scheduler. Choices where context_parallel.md is ambiguous are documented in dynamic_cp.cpp.
Expected<DynCpSchedule> schedule_dynamic_cp_main(const std::vector<int64_t>& lengths, int64_t ranks,
                                               int64_t max_seqlen_per_dp_cp_rank);

}  // namespace cpbench
