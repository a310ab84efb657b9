// analytical.h — the "analytical" strategy: the closed-form model of a transformer under a
// layout, without a schedule: parameters, FLOPs and tokens of the iteration.
// Requires: core/model. Note: it reports no time; strategies with a schedule (ptdp, ...) report
// these metrics too, so specs can compare formula and simulation side by side.
#pragma once

#include "core/strategies/strategy.h"

namespace cpbench {

StrategyOutcome run_analytical(const StrategyInput& in);

}  // namespace cpbench
