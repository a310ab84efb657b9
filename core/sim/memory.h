// memory.h — peak memory of one GPU under a PTD-P layout, from the model's formulas: weights,
// gradients and optimizer state of the GPU's layers, plus the activations the pipeline schedule
// keeps in flight (Korthikanti et al., references/ptdp.md).
// Requires: the plan's layout and micro-batches. Note: the first pipeline stage is the worst
// under 1F1B (it holds p micro-batches in flight); that is the stage reported.
#pragma once

#include "core/model/model.h"
#include "core/plan/plan.h"

namespace cpbench {

struct MemoryEstimate {
  double weights_optimizer_bytes = 0;
  double activation_bytes = 0;
  double workspace_bytes = 0;  // the transient working set of the layer being computed
  double total() const { return weights_optimizer_bytes + activation_bytes + workspace_bytes; }
};

// Parameters held by one GPU of pipeline stage `stage` (its layers, /tp; embedding on the
// first stage, output layer on the last).
double params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage);

MemoryEstimate estimate_memory(const ModelShape& model, const Plan& plan);

}  // namespace cpbench
