#include "core/reshard/dataset_state.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/workload/rng.h"

namespace cpbench {

std::vector<int64_t> epoch_order(int64_t samples, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(0, samples)));
  std::iota(order.begin(), order.end(), 0);
  SplitMix64 rng(seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.uniform_below(i)]);
  return order;
}

std::vector<int64_t> rank_samples(const DatasetState& s, int64_t d, int64_t steps) {
  const std::vector<int64_t> order = epoch_order(s.samples, s.seed);
  const int64_t share = s.global_batch / s.dp;
  std::vector<int64_t> out;
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t first = s.consumed + k * s.global_batch + d * share;
    for (int64_t i = first; i < first + share && i < s.samples; ++i) out.push_back(order[static_cast<size_t>(i)]);
  }
  return out;
}

DatasetState advance(DatasetState s, int64_t steps) {
  s.consumed = std::min(s.samples, s.consumed + steps * s.global_batch);
  return s;
}

Expected<DatasetState> repartition(const DatasetState& s, int64_t dp) {
  if (dp < 1 || s.global_batch % dp != 0)
    return Error{"", "", "the global batch " + std::to_string(s.global_batch) + " does not split over " + std::to_string(dp) +
                             " data-parallel ranks"};
  DatasetState out = s;
  out.dp = dp;
  return out;
}

}  // namespace cpbench
