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
  // How long-tailed the batch is: the share of tokens in sequences above 32K (the Dynamic-CP
  // sensitivity axis; 32K is where a sequence no longer fits a 16K–32K per-rank budget).
  double long_tokens = 0;
  for (int64_t L : in.batch.lengths)
    if (L > 32768) long_tokens += static_cast<double>(L);
  const double total = static_cast<double>(in.batch.total_tokens());
  out.metrics["long_token_share"] = total > 0 ? long_tokens / total : 0;
  return out;
}

}  // namespace cpbench
