// adaptive.h — a strategy per batch: the batches of a long-tailed corpus differ more than the
// strategies do, so each batch gets the variable-length strategy that suits it. Two pickers:
//   adaptive_oracle: plans the batch with every candidate and takes the plan the sim backend
//                    prices fastest (through evaluate(), as a search does);
//   adaptive_rule:   picks from the batch's features alone, without planning or simulating the
//                    others (a rule a data loader could apply).
// Requires: the candidates' strategies (packing, Dynamic-CP's three schedulers) and the sim
// backend (core/evaluate). Each candidate runs at the point's layout (its static CP for packing,
// its max_seqlen_per_dp_cp_rank for all).
// Note: the oracle chooses by simulated step time alone. Planning time is a wall-clock timing
// (results stay deterministic without it), and a scheduler runs in the data loader ahead of the
// step; the point's plan_time_ms adds up every candidate's planning. Per batch the oracle's step is
// the least of the candidates', so over any batches its mean is at most the best single
// candidate's.
#pragma once

#include <string>
#include <vector>

#include "core/strategies/strategy.h"

namespace cpbench {

struct AdaptiveCandidate {
  const char* name;  // the registered strategy's name
  StrategyFn plan;
};
// packing (dp_balanced, static CP), dynamic_cp, dynamic_cp_dev, dynamic_cp_solver.
const std::vector<AdaptiveCandidate>& adaptive_candidates();

// What the rule reads of a batch.
struct BatchFeatures {
  int64_t longest = 0;           // tokens of the longest sequence
  int64_t rank_capacity = 0;     // max_seqlen_per_dp_cp_rank (the longest on one rank without CP)
  double long_token_share = 0;   // share of the tokens in sequences longer than rank_capacity
  double length_cv = 0;          // standard deviation / mean of the lengths
};
BatchFeatures batch_features(const GlobalBatch& batch, const ParallelConfig& layout);

// The rule, fixed before any comparison (not fitted): no sequence needs CP → packing (static CP
// pays nothing Dynamic-CP would save); sequences that need CP hold most of the tokens (share ≥
// 0.5) → the blog's solver (its FLOPs-balanced buckets spread the long work); else Megatron dev's
// scheduler (CP only where a sequence needs it, pipeline-friendly rounds).
std::string adaptive_rule_choice(const BatchFeatures& f);

PlanOutcome plan_adaptive_oracle(const StrategyInput& in);
PlanOutcome plan_adaptive_rule(const StrategyInput& in);

}  // namespace cpbench
