// plan.h — the Plan: what a strategy decides for one iteration, and nothing else. The simulator
// prices it; the runtime executes it; neither re-decides anything (DESIGN.md, "The Plan").
// Requires: parallel_config.h. This version carries the step-level layout and the micro-batches
// of every data-parallel replica; per-rank attention steps (CP layouts) join it with the runtime.
// Note: replicas with identical micro-batches are simulated once (symmetry); distinct ones each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/parallel_config.h"

namespace cpbench {

// Sequences packed into one micro-batch (each attends only to itself), in tokens.
struct PlanMicroBatch {
  std::vector<int64_t> lengths;

  int64_t tokens() const;
  double sum_sq() const;  // Σ L²
  bool operator==(const PlanMicroBatch&) const = default;
};

struct Plan {
  ParallelConfig layout;
  std::string pipeline_schedule = "1f1b";  // "1f1b" | "interleaved" | "gpipe"
  // [data-parallel replica][k]: the micro-batches each pipeline runs, in order.
  std::vector<std::vector<PlanMicroBatch>> micro_batches;
};

}  // namespace cpbench
