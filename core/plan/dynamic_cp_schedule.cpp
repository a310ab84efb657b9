#include "core/plan/dynamic_cp_schedule.h"

#include <algorithm>

namespace cpbench {

int64_t dynamic_cp_pad_multiple(int64_t pool, int64_t sequence_parallel_size) {
  int64_t largest_pow2 = 1;
  while (2 * largest_pow2 <= pool) largest_pow2 *= 2;
  return 2 * largest_pow2 * std::max<int64_t>(1, sequence_parallel_size);
}

std::string dynamic_cp_group_name(size_t index, const DynamicCpGroup& g) {
  return "group " + std::to_string(index) + " (ranks [" + std::to_string(g.first_rank) + ", " +
         std::to_string(g.first_rank + g.size) + "))";
}

std::string check_dynamic_cp_round(const DynamicCpRound& round, int64_t world_ranks, int64_t sequences) {
  if (round.groups.empty()) return "the round has no groups";
  std::vector<int64_t> owner(static_cast<size_t>(std::max<int64_t>(world_ranks, 0)), -1);
  std::vector<int64_t> seq_group(static_cast<size_t>(std::max<int64_t>(sequences, 0)), -1);
  for (size_t i = 0; i < round.groups.size(); ++i) {
    const DynamicCpGroup& g = round.groups[i];
    if (g.size < 1) return dynamic_cp_group_name(i, g) + " has size " + std::to_string(g.size) + "; a group needs ≥ 1 rank";
    if (g.first_rank < 0 || g.first_rank + g.size > world_ranks)
      return dynamic_cp_group_name(i, g) + " exceeds the world of " + std::to_string(world_ranks) + " ranks";
    for (int64_t r = g.first_rank; r < g.first_rank + g.size; ++r) {
      int64_t& o = owner[static_cast<size_t>(r)];
      if (o >= 0)
        return dynamic_cp_group_name(i, g) + " overlaps " + dynamic_cp_group_name(static_cast<size_t>(o), round.groups[o]) + " at rank " +
               std::to_string(r);
      o = static_cast<int64_t>(i);
    }
    if (g.seq_ids.empty()) return dynamic_cp_group_name(i, g) + " has no sequences";
    for (int64_t s : g.seq_ids) {
      if (s < 0 || s >= sequences)
        return dynamic_cp_group_name(i, g) + " names sequence " + std::to_string(s) + " of a batch of " +
               std::to_string(sequences);
      int64_t& sg = seq_group[static_cast<size_t>(s)];
      if (sg >= 0)
        return "sequence " + std::to_string(s) + " is in " + dynamic_cp_group_name(static_cast<size_t>(sg), round.groups[sg]) +
               " and " + dynamic_cp_group_name(i, g);
      sg = static_cast<int64_t>(i);
    }
  }
  return "";
}

}  // namespace cpbench
