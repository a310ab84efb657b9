// frontier.h — TensorOpt's frontier tracking (Cai et al., TPDS'22; references/tenplex_tensoropt.md):
// the Pareto-optimal set of candidates over several objectives, all minimised (step time, peak
// memory per device, communication bytes, GPU count), found without evaluating every candidate:
// candidates are taken in the order of their first objective's lower bound, and one whose vector
// of lower bounds is already dominated by a tracked frontier point is pruned unevaluated.
// Requires: per candidate a lower bound on each objective (exact where the value is known before
// evaluation: memory, bytes, GPUs) that its evaluation never goes below.
// Note: exact — the frontier equals the Pareto set of evaluating every candidate (a pruned
// candidate is strictly dominated; dominance is transitive). Candidates are evaluated in rounds
// of a fixed size, so the result and the counts do not depend on the thread count.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

namespace cpbench {

using Objectives = std::vector<double>;  // one value per objective, each minimised

// a dominates b: a ≤ b in every objective and a < b in at least one.
bool dominates(const Objectives& a, const Objectives& b);

struct FrontierResult {
  enum class State { not_run, evaluated, failed, pruned };
  std::vector<State> state;               // per candidate
  std::vector<bool> on_frontier;          // per candidate: evaluated and dominated by none
  std::vector<Objectives> values;         // per evaluated candidate: its objectives
  std::vector<std::optional<size_t>> dominated_by;  // pruned: the frontier point that dominated its bounds
  size_t evaluated = 0, failed = 0, pruned = 0;
};

// bounds[i]: candidate i's lower bounds (nullopt: it cannot run; not evaluated). evaluate(i):
// its objectives, or nullopt when the evaluation failed; called from `jobs` threads at once.
FrontierResult track_frontier(const std::vector<std::optional<Objectives>>& bounds,
                              const std::function<std::optional<Objectives>(size_t)>& evaluate, int jobs = 1);

}  // namespace cpbench
