// registry.cpp — the table of strategies, in a fixed order. Adding a strategy is one line here
// (docs/strategies.md); no static-registration macros, so the list is readable in one place.
#include "core/strategies/analytical.h"
#include "core/strategies/ptdp.h"
#include "core/strategies/strategy.h"

namespace cpbench {

const std::vector<StrategyInfo>& strategies() {
  static const std::vector<StrategyInfo> table = {
      {"analytical", "closed-form model only: parameters, FLOPs and tokens of the iteration", run_analytical},
      {"ptdp", "Megatron PTD-P: TP × PP (1F1B / interleaved) × DP, simulated on the hardware preset", run_ptdp},
  };
  return table;
}

const StrategyInfo* find_strategy(const std::string& name) {
  for (const auto& s : strategies())
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace cpbench
