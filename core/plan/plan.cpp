#include "core/plan/plan.h"

#include <algorithm>

#include "core/workload/batch.h"

namespace cpbench {

int64_t PlanMicroBatch::tokens() const { return sum_tokens(lengths); }

double PlanMicroBatch::sum_sq() const { return sum_squares(lengths); }

int64_t PlanMicroBatch::padded_length(size_t i) const {
  const int64_t m = pad_to > 1 ? pad_to : 1;
  return (lengths[i] + m - 1) / m * m;
}

std::vector<int64_t> PlanMicroBatch::padded_lengths() const {
  std::vector<int64_t> out(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) out[i] = padded_length(i);
  return out;
}

int64_t PlanMicroBatch::padded_tokens() const {
  int64_t t = 0;
  for (size_t i = 0; i < lengths.size(); ++i) t += padded_length(i);
  return t;
}

int64_t PlanMicroBatch::rank_tokens() const {
  return attention ? fullest_home_tokens(*attention) : padded_tokens() / std::max<int64_t>(1, cp);
}

std::vector<int> cp_group_nodes(const PlanMicroBatch& mb, const ParallelConfig& layout, int gpus_per_node) {
  std::vector<int> nodes;
  const int64_t first = std::max<int64_t>(0, mb.first_rank);
  const int64_t g = std::max(1, gpus_per_node);
  const int64_t base = global_rank(layout, 0, first, 0) / g;
  for (int64_t i = 0; i < mb.cp; ++i) nodes.push_back(static_cast<int>(global_rank(layout, 0, first + i, 0) / g - base));
  return nodes;
}

}  // namespace cpbench
