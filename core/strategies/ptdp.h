// ptdp.h — Megatron's PTD-P (Narayanan et al., SC'21): tensor, pipeline (1F1B or interleaved
// 1F1B) and data parallelism with recompute, scatter/gather and DP overlap switches.
// Requires: a global batch of whole sequences divisible into dp × m micro-batches of
// micro_batch_size sequences. Note: infeasible layouts (sizes that do not divide, too little
// memory) are results with the reason; the plan is simulated with the hardware preset's model.
#pragma once

#include "core/plan/plan.h"
#include "core/strategies/strategy.h"

namespace cpbench {

// Why the model cannot be split by the layout's TP and PP×VP ("" when it can): heads, KV heads and
// the FFN width over tp, layers over pp·vp.
std::string check_model_split(const ModelShape& model, const ParallelConfig& layout);

// The plan, or why the layout cannot run it ("" when it can).
std::string plan_ptdp(const StrategyInput& in, Plan* plan);

StrategyOutcome run_ptdp(const StrategyInput& in);

// Prices any strategy's plan: memory per GPU (infeasible with the reason when it does not fit,
// keeping a 2 GiB reserve), the simulated iteration, and the step metrics every strategy reports
// (step time, TFLOP/s per GPU by in.flops_definition, MFU, bubble, exposed communication,
// compute imbalance, memory).
StrategyOutcome evaluate_plan(const StrategyInput& in, const Plan& plan);

}  // namespace cpbench
