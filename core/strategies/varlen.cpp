#include "core/strategies/varlen.h"

#include "core/layouts/cp_layouts.h"
#include "core/strategies/ptdp.h"

namespace cpbench {
namespace {

// Ulysses (a2a) splits heads over the CP group: every group size the plan uses must divide the
// query and KV heads of a TP rank (TransformerEngine's rule); otherwise the point cannot run.
std::string check_cp_heads(const StrategyInput& in, const Plan& plan) {
  if (in.parallel.cp_comm_type != "a2a") return "";
  const int64_t heads = in.model.heads / in.parallel.tp, kv = in.model.kv_heads / in.parallel.tp;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      if (mb.cp > 1 && (heads % mb.cp != 0 || kv % mb.cp != 0))
        return "cp_comm_type a2a needs the " + std::to_string(heads) + " query and " + std::to_string(kv) +
               " KV heads per TP rank to divide by the CP group size " + std::to_string(mb.cp);
  return "";
}

}  // namespace

std::string check_varlen_layout(const ModelShape& model, const ParallelConfig& layout) {
  if (layout.max_seqlen_per_dp_cp_rank <= 0)
    return "parallel.max_seqlen_per_dp_cp_rank is not set: packing and Dynamic-CP need the per-rank token cap";
  return check_model_split(model, layout);
}

std::string varlen_pipeline_schedule(const ParallelConfig& L, int64_t* micro_batches) {
  if (L.vp > 1 && *micro_batches % L.pp != 0) *micro_batches += L.pp - *micro_batches % L.pp;
  return L.vp > 1 ? "interleaved" : "1f1b";
}

PlanOutcome finish_varlen_plan(const StrategyInput& in, Plan plan) {
  if (auto why = check_cp_heads(in, plan); !why.empty()) return PlanOutcome::infeasible(why);
  if (auto why = check_decoder_mask(in.batch.mask); !why.empty()) return PlanOutcome::error(why);
  plan.mask = in.batch.mask;
  if (auto problem = attach_attention_plans(&plan, in.model))
    return problem->beyond_cpbench ? PlanOutcome::error(problem->why) : PlanOutcome::infeasible(problem->why);
  return PlanOutcome::ok(std::move(plan));
}

}  // namespace cpbench
