// ptdp.h — Megatron's PTD-P (Narayanan et al., SC'21): tensor, pipeline (1F1B or interleaved
// 1F1B) and data parallelism with recompute, scatter/gather and DP overlap switches, and static
// context parallelism (every cp_comm_type) on the fixed-length micro-batches.
// Requires: a global batch of whole sequences divisible into dp × m micro-batches of
// micro_batch_size sequences. Note: infeasible layouts (sizes that do not divide, too little
// memory) are results with the reason; the plan is simulated with the hardware preset's model.
#pragma once

#include "core/plan/plan.h"
#include "core/strategies/strategy.h"

namespace cpbench {

// Why the model cannot be split by the layout's TP and PP×VP ("" when it can): heads, KV heads and
// the FFN width over tp, layers over the stages (even, or with first/last stage counts) and vp.
std::string check_model_split(const ModelShape& model, const ParallelConfig& layout);

// The plan of the layout: each DP rank takes consecutive micro_batch_size-sequence slices of the
// global batch (Megatron's sampler), 1F1B or interleaved by vp; with cp > 1 each replica's CP
// group holds every micro-batch, its attention the layout of cp_comm_type.
PlanOutcome plan_ptdp(const StrategyInput& in);

// ZeRO-3 / FSDP (Rajbhandari et al. SC'20; PyTorch FSDP): the PTD-P plan with parameters,
// gradients and optimizer state sharded over the DP×CP ranks (layout.zero3): each layer gathered
// before its forward and (zero3_reshard_after_forward) its backward, its gradients reduce-scattered
// after it, no end-of-step gradient reduction. Composes with TP and PP as FSDP2 does (torchtitan);
// DeepSpeed's ZeRO-3 runs without PP (pp = 1).
PlanOutcome plan_zero3(const StrategyInput& in);

}  // namespace cpbench
