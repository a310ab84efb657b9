// strategy.h — what every strategy is given for one experiment point and what it returns (a Plan,
// or why the configuration cannot run). The table of registered strategies is
// core/experiment/strategy_registry.h.
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
#include "core/plan/search_space.h"
#include "core/workload/batch.h"

namespace cpbench {

struct StrategyInput {
  const ClusterSpec& cluster;
  const ModelShape& model;
  const ParallelConfig& parallel;
  const GlobalBatch& batch;  // the iteration's sequences, sampled by seed
  const SearchSpace* search = nullptr;  // the point's "search" (strategy ptdp_search); null = defaults
};

// The plan of one iteration (reason: a note for results, or empty), or status "infeasible" with the reason (sizes that do not divide, a
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

// "" when an iteration strategy can price `mask`: causal, or sparser (priced over the causal
// envelope, as TransformerEngine runs it); a full (bidirectional) mask is a limit of cpbench's
// decoder layers (the attention micro-benchmarks take it).
inline std::string check_decoder_mask(const MaskSpec& mask) {
  if (mask.kind != MaskKind::full) return "";
  return "cpbench limit: the iteration strategies price decoder attention (causal, or a sparser mask over the causal "
         "envelope); a full (bidirectional) mask is priced only by the attention micro-benchmarks (cp_attention, "
         "dcp_attention)";
}

}  // namespace cpbench
