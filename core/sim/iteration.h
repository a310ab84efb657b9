// iteration.h — lowers a Plan to the task graph of one training iteration and simulates it:
// per pipeline stage the forward/backward of every micro-batch (TP collectives inside, blocking),
// pipeline sends, data-parallel gradient reduction (overlapped or not), the optimizer step.
// Requires: a Plan whose layout passed check_parallel_config and whose micro-batch counts suit
// the schedule. Symmetry: TP ranks of a stage and identical DP replicas are one simulated
// device; replicas with different micro-batches are simulated each, joined by the DP collective.
// Note: returns an Error (not a crash) when the schedule cannot take the plan (m % p for interleaving).
#pragma once

#include <filesystem>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include "core/model/model.h"
#include "core/plan/plan.h"

namespace cpbench {

struct IterationResult {
  double step_time_s = 0;
  double bubble_fraction = 0;  // mean over simulated devices of idle (not compute, not exposed comm) / step
  double exposed_comm_s = 0;   // mean over devices: blocking TP collectives + waits on transfers
  double compute_imbalance = 1;  // max / mean compute time over simulated devices
  size_t tasks = 0;
};

Expected<IterationResult> simulate_iteration(const Plan& plan, const ModelShape& model, const CostModel& cost,
                                             const std::filesystem::path& trace_path = {});

}  // namespace cpbench
