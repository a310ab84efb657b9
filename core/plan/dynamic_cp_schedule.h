// dynamic_cp_schedule.h — a Dynamic-CP schedule: rounds over the DP×CP ranks, each a set
// of CP groups on aligned slices of the ranks holding some of the batch's sequences. Planners
// (core/strategies) produce it; the simulator's plan and the runtime's executor consume it.
// Requires: nothing beyond the standard library. Note: check_dynamic_cp_round is the one validity check
// every consumer runs before acting on a round.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cpbench {

struct DynamicCpGroup {
  int64_t first_rank = 0;
  int64_t size = 1;               // CP size of every sequence in the group
  std::vector<int64_t> seq_ids;   // indices into the caller's lengths, in order of placement
  double work = 0;                // per-rank work by the planner's own measure, / size (main, dev: Σ L²; solver: FLOPs)
};

// One round over all dp·cp ranks (a packed micro-batch per group under dev and the solver; under
// Megatron main one micro-batch per sequence of the group, then a barrier over DP×CP). Groups do
// not overlap; ranks outside every group are idle in this round.
struct DynamicCpRound {
  std::vector<DynamicCpGroup> groups;
};

struct DynamicCpSchedule {
  std::vector<DynamicCpRound> rounds;
};

// "" when `round` can run on `world_ranks` ranks over `sequences` sequences: every group has
// size ≥ 1 and lies inside [0, world_ranks), no rank is in two groups, every group has at least
// one sequence, every sequence id is in range and in at most one group. Otherwise what is wrong,
// naming the group(s), their ranks and the sequence.
std::string check_dynamic_cp_round(const DynamicCpRound& round, int64_t world_ranks, int64_t sequences);

// What every sequence of a Dynamic-CP batch is padded to a multiple of: any sample may land on any
// group of the pool, and groups are power-of-two slices, so 2·(the largest power of two ≤ pool) —
// 2·pool for a power-of-two pool (references/context_parallel.md: 2·dp·cp) — times the
// sequence-parallel size (tp with SP, else 1). Not the pool itself when it is no power of two: no
// group has that size, and 2·lcm(pool, 2^k) padded every sequence to 32,000 tokens at 250 ranks.
int64_t dynamic_cp_pad_multiple(int64_t pool, int64_t sequence_parallel_size);

// "group i (ranks [a, b))", as every message about a round names a group.
std::string dynamic_cp_group_name(size_t index, const DynamicCpGroup& group);

}  // namespace cpbench
