// strategy_test_util.h — tests' shorthand for what the runner does with a point: a strategy plans,
// the backend evaluates the plan (an infeasible plan is returned as such).
// Requires: core/evaluate. For tests and benchmarks only.
#pragma once

#include <filesystem>
#include <string>

#include "core/evaluate/evaluate.h"
#include "core/strategies/strategy.h"

namespace cpbench {

inline Evaluation plan_and_evaluate(StrategyFn strategy, const StrategyInput& in, const std::string& flops_definition,
                                    const std::filesystem::path& trace = {}, const std::string& backend = "sim") {
  PlanOutcome planned = strategy(in);
  if (planned.status != "ok") return {planned.status, planned.reason, {}};
  return evaluate(EvalInput{in.cluster, in.model, in.batch, flops_definition, trace}, planned.plan, backend);
}

}  // namespace cpbench
