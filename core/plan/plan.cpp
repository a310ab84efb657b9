#include "core/plan/plan.h"

#include "core/workload/batch.h"

namespace cpbench {

int64_t PlanMicroBatch::tokens() const { return sum_tokens(lengths); }

double PlanMicroBatch::sum_sq() const { return sum_squares(lengths); }

}  // namespace cpbench
