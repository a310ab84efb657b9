#include "core/plan/plan.h"

namespace cpbench {

int64_t PlanMicroBatch::tokens() const {
  int64_t t = 0;
  for (int64_t L : lengths) t += L;
  return t;
}

double PlanMicroBatch::sum_sq() const {
  double s = 0;
  for (int64_t L : lengths) s += static_cast<double>(L) * static_cast<double>(L);
  return s;
}

}  // namespace cpbench
