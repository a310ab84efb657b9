// memory.h — peak memory of one GPU under a PTD-P layout, from the model's formulas: weights,
// gradients and optimizer state of the GPU's layers, plus the activations the pipeline schedule
// keeps in flight (Korthikanti et al., references/ptdp.md).
// Requires: the plan's layout and micro-batches, and the preset's memory overheads. Note: the first
// pipeline stage is the worst under 1F1B (it holds p micro-batches in flight); that is the stage
// reported. The estimate is what the GPU must have: allocated bytes plus what the process reserves
// beside them (context, communicator buffers) and what the caching allocator loses to
// fragmentation in the activation pool.
#pragma once

#include "core/hardware/hardware.h"
#include "core/model/model.h"
#include "core/plan/plan.h"

namespace cpbench {

struct MemoryEstimate {
  double weights_optimizer_bytes = 0;
  double activation_bytes = 0;
  double workspace_bytes = 0;  // the transient working set of the layer being computed
  double fragmentation_bytes = 0;  // activation pool lost to the allocator's fragmentation
  double reserved_bytes = 0;       // context, communicator buffers, library workspaces
  double allocated() const { return weights_optimizer_bytes + activation_bytes + workspace_bytes; }
  double total() const { return allocated() + fragmentation_bytes + reserved_bytes; }
};

// Parameters held by one GPU of pipeline stage `stage` (its layers, /tp; embedding on the
// first stage, output layer on the last).
double params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage);

MemoryEstimate estimate_memory(const ModelShape& model, const Plan& plan, const MemoryOverheads& overheads);

}  // namespace cpbench
