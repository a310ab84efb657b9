// strategy_registry.h — the table of registered strategies (core/strategies and the search's
// ptdp_search), in a fixed order: what specs may name and `cpbench list --strategies` prints.
// Requires: core/strategies/strategy.h for the function type; the table sits above the strategies
// and the search, which are its entries.
#pragma once

#include <string>
#include <vector>

#include "core/strategies/strategy.h"

namespace cpbench {

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for `cpbench list --strategies` and docs
  StrategyFn plan;
  // Plans with a library that needs MPI (DCP's Zoltan): the runner opens an MPI session on the
  // main thread before any worker thread plans (core/strategies/hypergraph.h init_partitioner).
  bool needs_mpi = false;
};

// Every registered strategy, in a fixed order.
const std::vector<StrategyInfo>& strategies();
const StrategyInfo* find_strategy(const std::string& name);

}  // namespace cpbench
