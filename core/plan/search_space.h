// search_space.h — what a configuration search varies (the spec's "search" object, strategy
// "ptdp_search"; core/search/search.h runs it): the values of TP t, CP c, PP p, layers per virtual
// stage l, checkpointing mode, offload ratio α and micro-batch size, every value of each axis
// combined with every value of the others, and which of the ranked layouts a point takes.
// Requires: core/common/json_reader.h. Every switch not listed here is the point's "parallel".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/json_reader.h"

namespace cpbench {

struct SearchSpace {
  std::vector<int64_t> tp = {1, 2, 4, 8};
  std::vector<int64_t> cp = {1, 2, 4, 8};
  std::vector<int64_t> pp = {1, 2, 4, 8, 16, 32};
  // Kwai's l: layers per virtual stage; 0 = no interleaving (vp 1), else vp = layers / (pp·l).
  std::vector<int64_t> layers_per_virtual_stage = {0, 1, 2, 4};
  std::vector<std::string> recompute = {"none", "balanced", "full"};
  // Offload ratios tried with recompute none or balanced and pp ≥ 3 (Kwai's offloading needs
  // later pipeline stages to hide behind); 0 is always tried.
  std::vector<double> offload_ratio = {0, 0.25, 0.5, 0.75, 1};
  std::vector<int64_t> micro_batch_size = {1};
  // Overlap switches tried (ParallelConfig's); empty = the point's own value. tp_comm_overlap is
  // only tried with t > 1, overlap_param_gather only with the distributed optimizer.
  std::vector<bool> tp_comm_overlap;
  std::vector<bool> overlap_param_gather;
  // The point takes the rank-th fastest layout (1 = the fastest); a rank past the layouts that
  // run makes the point infeasible.
  int64_t rank = 1;
  bool operator==(const SearchSpace&) const = default;
};

// Reads a spec's "search" object: every key optional (the defaults above), each axis a non-empty
// array of allowed values.
SearchSpace parse_search_space(JsonObject& o);

}  // namespace cpbench
