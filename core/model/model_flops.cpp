#include "core/model/model_flops.h"

namespace cpbench {

Recompute parse_recompute(const std::string& mode) {
  if (mode == "full") return Recompute::full;
  if (mode == "selective") return Recompute::selective;
  if (mode == "balanced") return Recompute::balanced;
  return Recompute::none;
}

double model_flops_per_iteration(const ModelShape& model, const GlobalBatch& batch, Recompute recompute,
                                 const std::string& definition) {
  if (definition == "megatron")
    return flops_varlen(model, static_cast<double>(batch.total_tokens()), batch.sum_sq(), Recompute::none, true);
  double total = 0;
  for (int64_t L : batch.lengths) {
    if (definition == "sc21") total += flops_per_iteration_sc21(model, 1, L, recompute == Recompute::full);
    else total += static_cast<double>(L) * flops_per_token_kwai(model, L);
  }
  return total;
}

}  // namespace cpbench
