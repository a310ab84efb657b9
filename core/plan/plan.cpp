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

}  // namespace cpbench
