#include "core/strategies/ptdp.h"

#include "core/layouts/cp_layouts.h"


namespace cpbench {
namespace {

std::string divides(const char* what, int64_t a, const char* by, int64_t b) {
  if (b > 0 && a % b == 0) return "";
  return std::string(what) + " " + std::to_string(a) + " is not a multiple of " + by + " " + std::to_string(b);
}

}  // namespace

std::string check_model_split(const ModelShape& m, const ParallelConfig& L) {
  for (const std::string& why : {divides("heads", m.heads, "tp", L.tp), divides("kv_heads", m.kv_heads, "tp", L.tp),
                                 divides("ffn_hidden", m.ffn_hidden, "tp", L.tp), check_stage_layers(L, m.layers)})
    if (!why.empty()) return why;
  return "";
}

PlanOutcome plan_zero3(const StrategyInput& in) {
  ParallelConfig sharded = in.parallel;
  sharded.zero3 = true;
  return plan_ptdp(StrategyInput{in.cluster, in.model, sharded, in.batch});
}

PlanOutcome plan_ptdp(const StrategyInput& in) {
  const ParallelConfig& L = in.parallel;
  auto no = [](std::string why) { return PlanOutcome::infeasible(std::move(why)); };
  const ModelShape& m = in.model;
  if (auto why = check_model_split(m, L); !why.empty()) return no(why);
  // deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism".
  if (L.zero3 && L.zero3_sharding.starts_with("deepspeed") && L.pp > 1)
    return no("zero3_sharding deepspeed needs pp = 1 (DeepSpeed's pipeline engine refuses ZeRO stage 3)");
  // Its coordinator decides what stays gathered from forward to backward (deepspeed_zero3.h):
  // it has no switch to keep every layer, as FSDP's reshard_after_forward = false does.
  if (L.zero3 && L.zero3_sharding.starts_with("deepspeed") && !L.zero3_reshard_after_forward)
    return no("zero3_sharding " + L.zero3_sharding + " releases parameters after the forward as its coordinator decides: "
              "zero3_reshard_after_forward false is FSDP's");
  const int64_t sequences = static_cast<int64_t>(in.batch.lengths.size());
  const int64_t per_replica = L.dp() * L.micro_batch_size;
  if (auto why = divides("global batch (sequences)", sequences, "dp·micro_batch_size", per_replica); !why.empty())
    return no(why);
  const int64_t micro_batches = sequences / per_replica;
  Plan plan;
  plan.layout = L;
  plan.pipeline_schedule = L.vp > 1 ? "interleaved" : "1f1b";
  if (L.vp > 1 && micro_batches % L.pp != 0)
    return no("interleaved 1F1B needs the micro-batch count " + std::to_string(micro_batches) +
              " to be a multiple of pp " + std::to_string(L.pp));
  // Megatron's sampler hands each DP rank consecutive slices of the global batch; with CP every
  // rank of the replica's CP group holds 1/cp of each sequence (the cp_comm_type's layout, padded
  // to its chunk rule, static_cp_pad_multiple).
  const int64_t cp = L.cp;
  const int64_t pad_to = static_cp_pad_multiple(L);
  plan.micro_batches.assign(L.dp() * cp, {});
  size_t next = 0;
  for (int64_t r = 0; r < L.dp(); ++r)
    for (int64_t k = 0; k < micro_batches; ++k) {
      PlanMicroBatch mb;
      for (int64_t i = 0; i < L.micro_batch_size; ++i) mb.lengths.push_back(in.batch.lengths[next++]);
      mb.cp = cp;
      mb.first_rank = cp > 1 ? r * cp : -1;
      mb.pad_to = pad_to;
      for (int64_t c = 0; c < cp; ++c) plan.micro_batches[r * cp + c].push_back(mb);
    }
  if (auto why = check_decoder_mask(in.batch.mask); !why.empty()) return PlanOutcome::error(why);
  plan.mask = in.batch.mask;
  if (auto problem = attach_attention_plans(&plan, m))
    return problem->beyond_cpbench ? PlanOutcome::error(problem->why) : no(problem->why);
  return PlanOutcome::ok(std::move(plan));
}

}  // namespace cpbench
