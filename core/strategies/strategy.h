// strategy.h — what every strategy is given for one experiment point, what it returns, and the
// table of registered strategies.
// Requires: the hardware, model, workload and plan modules. A strategy is a pure function of its
// input (thread-safe, deterministic); it may price candidate plans with the simulator but never
// executes anything. Configurations that cannot run return status "infeasible" with a reason.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/hardware/hardware.h"
#include "core/model/model.h"
#include "core/plan/parallel_config.h"
#include "core/workload/batch.h"

namespace cpbench {

// How a point counts model FLOPs; papers differ, and a reproduction must use the paper's own.
//   "sc21":     96·B·s·l·h²(1 + s/(6h) + V/(16lh)) with full recompute, 72·… without (SC'21 §5.1)
//   "megatron": Megatron's variable-length count (Σ L for linear layers, Σ L² for attention)
//   "kwai":     Kwai's MFU definition (ATC'24; recompute not counted)
struct StrategyInput {
  const ClusterSpec& cluster;
  const ModelShape& model;
  const ParallelConfig& parallel;
  const GlobalBatch& batch;       // the iteration's sequences, sampled by seed
  std::string flops_definition;   // "sc21" | "megatron" | "kwai"
  std::filesystem::path trace_path;  // where to write a timeline; empty = no trace
};

struct StrategyOutcome {
  std::string status = "ok";  // "ok" | "infeasible" | "error"
  std::string reason;         // why, when not ok
  std::map<std::string, double> metrics;

  static StrategyOutcome infeasible(std::string why) { return {"infeasible", std::move(why), {}}; }
};

using StrategyFn = StrategyOutcome (*)(const StrategyInput&);

struct StrategyInfo {
  std::string name;
  std::string summary;  // one line for `cpbench list --strategies` and docs
  StrategyFn run;
};

// Every registered strategy, in a fixed order.
const std::vector<StrategyInfo>& strategies();
const StrategyInfo* find_strategy(const std::string& name);

}  // namespace cpbench
