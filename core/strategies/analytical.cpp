#include "core/strategies/analytical.h"

#include "core/strategies/model_flops.h"

namespace cpbench {

StrategyOutcome run_analytical(const StrategyInput& in) {
  StrategyOutcome out;
  // Learned position tables are sized by the longest sequence the model is trained on.
  out.metrics["params_b"] = params_exact(in.model, in.batch.max_length()) / 1e9;
  out.metrics["flops_per_iteration"] = model_flops_per_iteration(
      in.model, in.batch, parse_recompute(in.parallel.recompute), in.flops_definition);
  out.metrics["tokens_per_iteration"] = static_cast<double>(in.batch.total_tokens());
  return out;
}

}  // namespace cpbench
