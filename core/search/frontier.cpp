#include "core/search/frontier.h"

#include <algorithm>

#include "core/common/parallel_for.h"

namespace cpbench {

bool dominates(const Objectives& a, const Objectives& b) {
  bool strictly = false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] > b[k]) return false;
    strictly |= a[k] < b[k];
  }
  return strictly;
}

FrontierResult track_frontier(const std::vector<std::optional<Objectives>>& bounds,
                              const std::function<std::optional<Objectives>(size_t)>& evaluate, int jobs) {
  const size_t n = bounds.size();
  FrontierResult out;
  out.state.assign(n, FrontierResult::State::not_run);
  out.on_frontier.assign(n, false);
  out.values.assign(n, {});
  out.dominated_by.assign(n, std::nullopt);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (bounds[i] && !bounds[i]->empty()) order.push_back(i);
  // Ties keep the candidates' order: deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*bounds[a])[0] < (*bounds[b])[0]; });

  std::vector<size_t> frontier;  // candidates evaluated and not (yet) dominated
  constexpr size_t kRound = 8;
  std::vector<std::optional<Objectives>> got(n);
  for (size_t next = 0; next < order.size();) {
    // The round: the next kRound candidates whose bounds no frontier point dominates.
    std::vector<size_t> round;
    for (; next < order.size() && round.size() < kRound; ++next) {
      const size_t i = order[next];
      auto by = std::find_if(frontier.begin(), frontier.end(), [&](size_t f) { return dominates(out.values[f], *bounds[i]); });
      if (by != frontier.end()) {
        out.state[i] = FrontierResult::State::pruned;
        out.dominated_by[i] = *by;
        ++out.pruned;
        continue;
      }
      round.push_back(i);
    }
    parallel_for(round.size(), jobs, [&](size_t k) { got[round[k]] = evaluate(round[k]); });
    // Into the frontier, in candidate order: a point joins unless dominated, and evicts what it dominates.
    for (size_t i : round) {
      if (!got[i]) {
        out.state[i] = FrontierResult::State::failed;
        ++out.failed;
        continue;
      }
      out.state[i] = FrontierResult::State::evaluated;
      out.values[i] = *got[i];
      ++out.evaluated;
      if (std::any_of(frontier.begin(), frontier.end(), [&](size_t f) { return dominates(out.values[f], out.values[i]); }))
        continue;
      std::erase_if(frontier, [&](size_t f) { return dominates(out.values[i], out.values[f]); });
      frontier.push_back(i);
    }
  }
  for (size_t f : frontier) out.on_frontier[f] = true;
  return out;
}

}  // namespace cpbench
