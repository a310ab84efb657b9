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

namespace cpbench {

struct DcpGroup {
  int64_t first_rank = 0;
  int64_t size = 1;               // CP size of every sequence in the group
  std::vector<int64_t> seq_ids;   // indices into the caller's lengths, in order of placement
  double work = 0;                // per-rank relative work Σ L² / size (Megatron: no linear term)
};

// One micro-batch round over all dp·cp ranks; a barrier over DP×CP follows it. Groups do not
// overlap; ranks outside every group are idle in this round.
struct DcpRound {
  std::vector<DcpGroup> groups;
};

struct DcpSchedule {
  std::vector<DcpRound> rounds;
};

// cp_min(L) = max(1, 2^ceil(log2(L / max_seqlen_per_dp_cp_rank))), in exact integer arithmetic.
int64_t dcp_min_cp_size(int64_t length, int64_t max_seqlen_per_dp_cp_rank);

// cp_min of every sequence and the largest power of two ≤ ranks, after checking the inputs: an
// Error for ranks or max_seqlen_per_dp_cp_rank < 1, a length < 1, or a sequence whose cp_min
// exceeds the largest power-of-two group (naming the sequence, its length and both sizes).
struct DcpMinSizes {
  std::vector<int64_t> cp_min;
  int64_t largest_pow2 = 1;
};
Expected<DcpMinSizes> dcp_min_cp_sizes(const std::vector<int64_t>& lengths, int64_t ranks,
                                       int64_t max_seqlen_per_dp_cp_rank);

// Gives a round's groups their ranks: sizes descending (ties keep the given order), laid out
// contiguously from rank 0. With power-of-two sizes every offset is a sum of sizes ≥ the current
// one, so each group is an aligned slice (first_rank % size == 0); Σ size must be ≤ the ranks.
void lay_out_aligned(std::vector<DcpGroup> groups, DcpRound* round);

// The scheduler. Choices where context_parallel.md is ambiguous are documented in dynamic_cp.cpp.
Expected<DcpSchedule> schedule_dynamic_cp_main(const std::vector<int64_t>& lengths, int64_t ranks,
                                               int64_t max_seqlen_per_dp_cp_rank);

}  // namespace cpbench
