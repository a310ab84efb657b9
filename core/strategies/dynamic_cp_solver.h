// dynamic_cp_solver.h — the Dynamic-CP blog's solver (NVIDIA draft PR, not merged) as a planner: a FLOPs
// cost model per sequence, a search over the micro-batch count m, and a FLOPs-balanced packing of
// the global batch into m rounds of aligned power-of-two CP groups over one stage's DP×CP ranks.
// Requires: lengths ≥ 1 token; every cp_min(L) ≤ the largest power of two ≤ ranks; a model with
// hidden, ffn_hidden, heads, kv_heads ≥ 1 and heads % kv_heads == 0 (else an Error naming why).
// Note: costs are FLOPs of one transformer layer (no hardware rates, no CP communication term — the
// reference has none); the output reuses dynamic_cp.h's DynamicCpSchedule. Choices are in the .cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"
#include "core/model/model.h"
#include "core/strategies/dynamic_cp.h"

namespace cpbench {

// The blog's per-layer FLOPs of one sequence of s tokens (references/context_parallel.md):
// gemm = 2·s·h²; attention forward 2·2·s²·h·0.5 (causal); QKV gemm·(1 + 2/groups), groups =
// heads / kv_heads; out-projection gemm; MLP 2·s·h·(2·ffn if gated else ffn) + 2·s·ffn·h;
// backward = 2.77 × attention + 2.7 × the rest; full recompute adds one forward.
struct DynamicCpSequenceFlops {
  double attention_forward = 0;  // the s² term
  double linear_forward = 0;     // QKV + out-projection + MLP
  double forward = 0;            // attention_forward + linear_forward
  double backward = 0;
  double recompute = 0;          // forward when full_recompute, else 0
  double total() const { return forward + backward + recompute; }
};

// REQUIRES: length ≥ 1 and a model that solve_dynamic_cp accepts (kv_heads ≥ 1).
DynamicCpSequenceFlops dynamic_cp_sequence_flops(int64_t length, const ModelShape& model, bool full_recompute);

struct DynamicCpSolverOptions {
  int64_t ranks = 1;                      // DP×CP ranks of one pipeline stage (the pool)
  int64_t max_seqlen_per_dp_cp_rank = 1;  // memory bound per rank (tokens): the memory check
  int64_t pp = 1, vp = 1;                 // pipeline stages and virtual chunks, for the bubble term
  bool full_recompute = false;            // adds one forward to every sequence's cost
  int max_microbatch_factor = 6;          // m searched over pp × {k0 … k0 + this − 1} (see .cpp [S1])
};

struct DynamicCpSolverResult {
  DynamicCpSchedule schedule;     // exactly micro_batches rounds; DynamicCpGroup.work = Σ cost / size (FLOPs/layer)
  int64_t micro_batches = 0;
  // max over ranks of Σ its per-round cost + (pp − 1) / vp × its heaviest round: one stage's
  // step in per-layer FLOPs, fill and drain included. Divide by a rank's achieved FLOP/s for
  // seconds per layer. Equal rounds give Σ × (m·vp + pp − 1) / (m·vp).
  double predicted_time_units = 0;
};

Expected<DynamicCpSolverResult> solve_dynamic_cp(const std::vector<int64_t>& lengths, const ModelShape& model,
                                           const DynamicCpSolverOptions& opt);

// The strategy: the solver searches its own micro-batch count (PP × {1..6}) with its FLOPs model and
// bubble term.
PlanOutcome plan_dynamic_cp_solver(const StrategyInput& in);

}  // namespace cpbench
