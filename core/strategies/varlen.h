// varlen.h — variable-length strategies: THD packing under one static CP size ("packing",
// "packing_ffd", "packing_flops") and Dynamic-CP ("dynamic_cp"), each planning the global batch
// into per-rank micro-batches with their CP groups and each group's AttentionPlan (plan.h).
// Requires: parallel.max_seqlen_per_dp_cp_rank > 0 (the per-rank token cap both Megatron paths
// take); packing: cp_comm_type's layout rules; Dynamic-CP: the DP×CP pool = num_gpus / (tp·pp).
// Note: infeasible inputs (a sequence no group can hold, heads a2a cannot split) are infeasible
// plans with the reason.
#pragma once

#include <string>

#include "core/plan/plan.h"
#include "core/strategies/dynamic_cp.h"
#include "core/strategies/strategy.h"

namespace cpbench {

// Packs the batch with `packer` ("dp_balanced" | "first_fit_decreasing" | "flops_balanced") into
// packs of ≤ max_seqlen_per_dp_cp_rank · cp tokens and deals them round-robin to the DP replicas
// (round k holds packs k·dp … k·dp + dp − 1, as Megatron's DpBalancedScheduler groups them); every
// CP rank of a replica holds its pack. Sequences are padded to the layout's rule (2·cp for the
// p2p / all_gather chunks, cp for a2a; ×tp with sequence parallelism). "" or why not.
std::string plan_static_cp(const StrategyInput& in, const std::string& packer, Plan* plan);

// The plan of a Dynamic-CP schedule over the pool of DP×CP ranks: round k is micro-batch k of every
// rank; a group's members hold its sequences with cp = the group's size; idle ranks hold an empty
// micro-batch. Sequences are padded to dyncp_pad_multiple(pool, SP size) — 2·pool for a power-of-two
// pool, 2·(largest power of two ≤ pool) otherwise: any sample may land on any group (references/context_parallel.md, THD packing). All-idle
// rounds are dropped. layout.cp is set to 1. A round check_dyncp_round refuses (a scheduler's bug)
// is an Error naming the round.
Expected<Plan> plan_from_dyncp_schedule(const DynCpSchedule& schedule, const std::vector<int64_t>& lengths,
                            const ParallelConfig& layout, bool round_barrier);

PlanOutcome plan_packing(const StrategyInput& in);        // Megatron dp_balanced
// DCP end to end (SOSP'25 §7.2): the packing of plan_packing, each CP group's attention placed by
// DCP's blockwise planner (dcp.h, parallel.dcp_*) instead of a static layout, no sequence padded;
// every other op runs as Megatron's on the tokens each rank holds (the fullest rank's count:
// PlanMicroBatch::rank_tokens, from the plan's homes). Needs MPI initialised (Zoltan).
PlanOutcome plan_dcp_training(const StrategyInput& in);
PlanOutcome plan_packing_ffd(const StrategyInput& in);    // first-fit decreasing
PlanOutcome plan_packing_flops(const StrategyInput& in);  // FLOPs-balanced (Σ L, Σ L² costs)
PlanOutcome plan_dynamic_cp(const StrategyInput& in);     // Megatron main's scheduler, round barriers
PlanOutcome plan_dynamic_cp_dev(const StrategyInput& in); // Megatron dev's packing-aware scheduler
PlanOutcome plan_dynamic_cp_solver(const StrategyInput& in);  // the blog's pipeline-aware solver

}  // namespace cpbench
