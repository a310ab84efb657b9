// search.h — configuration search (Kwai ATC'24's cost-model search, issue 11): given the model,
// the cluster, the global batch and a base layout (the switches that are not searched), every
// combination of TP t, CP c, PP p, layers per virtual stage l, checkpointing mode, offload ratio α
// and micro-batch size that can run, ranked by simulated step time.
// Requires: the PTD-P strategy (core/strategies/ptdp.h) to plan each candidate and the `sim`
// backend to price it (core/evaluate/evaluate.h): the search prices candidates only through the
// evaluation interface. Note: a candidate whose memory does not fit is discarded by the memory
// estimate before any simulation (evaluate_sim checks memory first); layouts that do not divide
// are discarded before planning.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/hardware/hardware.h"
#include "core/model/model.h"
#include "core/plan/parallel_config.h"
#include "core/plan/search_space.h"
#include "core/strategies/strategy.h"
#include "core/workload/batch.h"

namespace cpbench {

struct SearchCandidate {
  ParallelConfig layout;
  std::map<std::string, double> metrics;  // the sim backend's metrics
  std::string label() const;              // "t4 c1 p8 vp6 balanced α=0.5 b1 tp-overlap"
};

struct SearchResult {
  std::vector<SearchCandidate> top;  // the fastest `top_k` that run, fastest first
  size_t enumerated = 0;             // combinations of the axes
  size_t invalid = 0;                // sizes that do not divide (GPUs, heads, layers, batch)
  size_t out_of_memory = 0;          // discarded by the memory estimate (evaluate_sim's first check), not simulated
  size_t infeasible = 0;             // other reasons the plan or its evaluation gave
  size_t simulated = 0;              // priced by the discrete-event simulation
  size_t pruned = 0;                 // fit, but their step's lower bound exceeds the k-th best simulated step
};

// Where a running search is: in phase "bounding" (every layout whose sizes divide: its plan, memory check and
// the lower bound on its step) or "simulating" (in the order of that bound, until the rest is
// pruned), `done` of `total` in that phase (the last call: done = total, `pruned` of them not
// simulated); the fastest layout simulated so far (best_step_s 0: none yet).
struct SearchProgress {
  const char* phase = "bounding";
  size_t done = 0, total = 0, pruned = 0;
  double best_step_s = 0;
  std::string best;  // its SearchCandidate::label()
};

// Searches `space` around `base` (num_gpus and every switch not searched are base's; sequence
// parallelism is on whenever t > 1), evaluating the plannable layouts on `jobs` threads;
// progress is called (serialised) after each layout bounded or simulated, and once with done =
// total when the rest is pruned. The result, counts included, does not depend on `jobs`.
SearchResult search_configurations(const ClusterSpec& cluster, const ModelShape& model, const GlobalBatch& batch,
                                   const ParallelConfig& base, const std::string& flops_definition,
                                   const SearchSpace& space, size_t top_k,
                                   const std::function<void(const SearchProgress&)>& progress = {}, int jobs = 1);

// Strategy "ptdp_search": searches in.search (the default space when null) around in.parallel and
// plans the layout ranked in.search->rank, its label in the plan's note; infeasible when fewer
// layouts run. Pure: the search's result does not depend on threads.
PlanOutcome plan_ptdp_search(const StrategyInput& in);

}  // namespace cpbench
