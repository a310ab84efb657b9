// varlen.h — what the variable-length strategies share: the input checks, the pipeline schedule of
// their micro-batch count, and finishing a plan (the heads rule, the mask, every CP group's
// attention). The strategies live with their families: THD packing under one static CP size
// (packing.h: "packing", "packing_ffd", "packing_flops"), DCP end to end (dcp.h: "dcp") and
// Dynamic-CP (dynamic_cp.h, dynamic_cp_dev.h, dynamic_cp_solver.h: "dynamic_cp", "dynamic_cp_dev",
// "dynamic_cp_solver").
// Requires: parallel.max_seqlen_per_dp_cp_rank > 0 (the per-rank token cap both Megatron paths take).
// Note: infeasible inputs (a sequence no group can hold, heads a2a cannot split) are infeasible
// plans with the reason.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan/plan.h"
#include "core/strategies/strategy.h"

namespace cpbench {

// "" when a variable-length strategy can plan this layout: the per-rank token cap is set and the
// model splits over tp and pp (check_model_split); else why not.
std::string check_varlen_layout(const ModelShape& model, const ParallelConfig& layout);

// The pipeline schedule for `*micro_batches` micro-batches: "interleaved" with vp > 1 (the count
// rounded up to a multiple of pp, as Megatron requires), else "1f1b".
std::string varlen_pipeline_schedule(const ParallelConfig& layout, int64_t* micro_batches);

// The plan's attention for every CP group (the layout of cp_comm_type), after Ulysses' heads rule
// (every CP group size must divide the query and KV heads of a TP rank) and the mask check.
PlanOutcome finish_varlen_plan(const StrategyInput& in, Plan plan);

}  // namespace cpbench
