// strategy.h — what every strategy is given for one experiment point, what it returns (a Plan, or
// why the configuration cannot run), and the table of registered strategies.
// Requires: the hardware, model, workload and plan modules. A strategy is a pure function of its
// input (thread-safe, deterministic): it decides and never prices itself. Backends price or run
// the Plan (core/evaluate/evaluate.h); a solver or search that compares candidates does it only
// through that interface.
#pragma once

#include <string>
#include <vector>

#include "core/hardware/hardware.h"
#include "core/model/model.h"
#include "core/plan/parallel_config.h"
#include "core/plan/plan.h"
#include "core/workload/batch.h"

namespace cpbench {

struct StrategyInput {
  const ClusterSpec& cluster;
  const ModelShape& model;
  const ParallelConfig& parallel;
  const GlobalBatch& batch;  // the iteration's sequences, sampled by seed
};

// The plan of one iteration, or status "infeasible" with the reason (sizes that do not divide, a
// sequence no group can hold, heads a layout cannot split).
struct PlanOutcome {
  std::string status = "ok";  // "ok" | "infeasible" | "error" (cpbench cannot plan it: a limit of cpbench)
  std::string reason;
  Plan plan;

  static PlanOutcome infeasible(std::string why) { return {"infeasible", std::move(why), {}}; }
  static PlanOutcome error(std::string why) { return {"error", std::move(why), {}}; }
  static PlanOutcome ok(Plan p) { return {"ok", "", std::move(p)}; }
};

using StrategyFn = PlanOutcome (*)(const StrategyInput&);

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for `cpbench list --strategies` and docs
  StrategyFn plan;
};

// Every registered strategy, in a fixed order.
const std::vector<StrategyInfo>& strategies();
const StrategyInfo* find_strategy(const std::string& name);

}  // namespace cpbench
