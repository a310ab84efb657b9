#include "core/strategies/varlen.h"

#include "core/layouts/cp_layouts.h"
#include "core/model/formulas.h"
#include "core/strategies/dcp.h"
#include "core/strategies/dyncp_solver.h"
#include "core/strategies/dynamic_cp_dev.h"
#include "core/strategies/packing.h"
#include "core/strategies/ptdp.h"

namespace cpbench {
namespace {

std::string needs_max_seqlen(const ParallelConfig& L) {
  if (L.max_seqlen_per_dp_cp_rank > 0) return "";
  return "parallel.max_seqlen_per_dp_cp_rank is not set: packing and Dynamic-CP need the per-rank token cap";
}

std::string schedule_kind(const ParallelConfig& L, int64_t* micro_batches) {
  if (L.vp > 1 && *micro_batches % L.pp != 0) *micro_batches += L.pp - *micro_batches % L.pp;
  return L.vp > 1 ? "interleaved" : "1f1b";
}

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

// The plan's attention for every CP group (the layout of cp_comm_type), after the heads check.
PlanOutcome finish(const StrategyInput& in, Plan plan) {
  if (auto why = check_cp_heads(in, plan); !why.empty()) return PlanOutcome::infeasible(why);
  if (auto why = check_decoder_mask(in.batch.mask); !why.empty()) return PlanOutcome::error(why);
  plan.mask = in.batch.mask;
  if (auto problem = attach_attention_plans(&plan, in.model))
    return problem->beyond_cpbench ? PlanOutcome::error(problem->why) : PlanOutcome::infeasible(problem->why);
  return PlanOutcome::ok(std::move(plan));
}

PlanOutcome plan_static(const StrategyInput& in, const std::string& packer) {
  Plan plan;
  if (auto why = plan_static_cp(in, packer, &plan); !why.empty()) return PlanOutcome::infeasible(why);
  return finish(in, std::move(plan));
}

}  // namespace

std::string plan_static_cp(const StrategyInput& in, const std::string& packer, Plan* plan) {
  const ParallelConfig& L = in.parallel;
  if (auto why = needs_max_seqlen(L); !why.empty()) return why;
  if (auto why = check_model_split(in.model, L); !why.empty()) return why;
  const int64_t dp = L.dp(), cp = L.cp;
  const int64_t capacity = L.max_seqlen_per_dp_cp_rank * cp;
  Expected<std::vector<Pack>> packs = Error{"", "", "unknown packer '" + packer + "'"};
  if (packer == "dp_balanced") packs = pack_dp_balanced(in.batch.lengths, capacity, dp);
  if (packer == "first_fit_decreasing") packs = pack_first_fit_decreasing(in.batch.lengths, capacity, dp);
  if (packer == "flops_balanced") {
    // The model's own cost of a sequence: linear FLOPs per token and attention FLOPs per L².
    const double linear = flops_varlen(in.model, 1, 0, Recompute::none, true);
    const double quadratic = flops_varlen(in.model, 0, 1, Recompute::none, true);
    packs = pack_flops_balanced(in.batch.lengths, capacity, dp, linear, quadratic);
  }
  if (!packs) return packs.error_str();
  const int64_t pad_to = static_cp_pad_multiple(L);
  int64_t m = static_cast<int64_t>(packs->size()) / dp;
  plan->layout = L;
  plan->pipeline_schedule = schedule_kind(L, &m);
  plan->micro_batches.assign(dp * cp, std::vector<PlanMicroBatch>(m));
  for (size_t i = 0; i < packs->size(); ++i) {
    const int64_t replica = static_cast<int64_t>(i) % dp, k = static_cast<int64_t>(i) / dp;
    PlanMicroBatch mb;
    for (int64_t id : (*packs)[i].seq_ids) mb.lengths.push_back(in.batch.lengths[id]);
    mb.cp = cp;
    mb.first_rank = replica * cp;
    mb.pad_to = pad_to;
    for (int64_t c = 0; c < cp; ++c) plan->micro_batches[replica * cp + c][k] = mb;
  }
  return "";
}

Expected<Plan> plan_from_dyncp_schedule(const DynCpSchedule& schedule, const std::vector<int64_t>& lengths,
                                        const ParallelConfig& layout, bool round_barrier) {
  Plan plan;
  plan.layout = layout;
  const int64_t pool = layout.dp() * layout.cp;
  for (size_t k = 0; k < schedule.rounds.size(); ++k)
    if (auto why = check_dyncp_round(schedule.rounds[k], pool, static_cast<int64_t>(lengths.size())); !why.empty())
      return Error{"", "", "Dynamic-CP schedule, round " + std::to_string(k) + ": " + why};
  // A round where every rank is idle is no micro-batch at all (a solver may leave trailing
  // slots empty); it is dropped rather than run as an empty pipeline pass.
  DynCpSchedule kept;
  for (const DynCpRound& r : schedule.rounds)
    if (!r.groups.empty()) kept.rounds.push_back(r);
  const DynCpSchedule& schedule_used = kept;
  plan.layout.cp = 1;  // the CP size is chosen per micro-batch
  const int64_t sp = layout.sequence_parallel ? layout.tp : 1;
  const int64_t pad_to = dyncp_pad_multiple(pool, sp);
  int64_t m = static_cast<int64_t>(schedule_used.rounds.size());
  plan.pipeline_schedule = schedule_kind(plan.layout, &m);
  plan.round_barrier = round_barrier;
  plan.micro_batches.assign(pool, std::vector<PlanMicroBatch>(m));
  for (size_t k = 0; k < schedule_used.rounds.size(); ++k)
    for (const DynCpGroup& g : schedule_used.rounds[k].groups) {
      PlanMicroBatch mb;
      for (int64_t id : g.seq_ids) mb.lengths.push_back(lengths[id]);
      mb.cp = g.size;
      mb.first_rank = g.first_rank;
      // A group of the whole pool when the pool is no power of two (Megatron dev's fallback) splits
      // its sequences into 2·size chunks: its micro-batch is padded to that multiple instead (a
      // multiple of both, lcm, was 65,280 tokens per sequence on 255 ranks).
      mb.pad_to = pad_to % (2 * g.size) == 0 ? pad_to : 2 * g.size * sp;
      for (int64_t r = g.first_rank; r < g.first_rank + g.size; ++r) plan.micro_batches[r][k] = mb;
    }
  return plan;
}

PlanOutcome plan_packing(const StrategyInput& in) { return plan_static(in, "dp_balanced"); }

PlanOutcome plan_dcp_training(const StrategyInput& in) {
  Plan plan;
  if (auto why = plan_static_cp(in, "dp_balanced", &plan); !why.empty()) return PlanOutcome::infeasible(why);
  if (auto why = check_decoder_mask(in.batch.mask); !why.empty()) return PlanOutcome::error(why);
  plan.mask = in.batch.mask;
  auto cost = CostModel::create(in.cluster);
  if (!cost) return PlanOutcome::error(cost.error_str());
  const ParallelConfig& L = plan.layout;
  std::string note;
  // One DCP plan per CP group's micro-batch (its copies on the group's ranks share it).
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const AttentionPlan>> made;
  for (auto& rank : plan.micro_batches)
    for (size_t k = 0; k < rank.size(); ++k) {
      PlanMicroBatch& mb = rank[k];
      if (mb.cp <= 1 || mb.lengths.empty()) continue;
      mb.pad_to = 1;  // DCP cuts sequences into blocks; nothing is padded
      auto key = std::make_pair(static_cast<int64_t>(k), mb.first_rank);
      auto it = made.find(key);
      if (it == made.end()) {
        // The planner takes ranks filling nodes in order: the group's members must sit on their
        // nodes in equal consecutive runs (TP inside a node, CP across, as Megatron orders ranks).
        const std::vector<int> node = cp_group_nodes(mb, L, in.cluster.gpus_per_node);
        int64_t per_node = 1;
        while (per_node < mb.cp && node[per_node] == node[0]) ++per_node;
        for (int64_t i = 0; i < mb.cp; ++i)
          if (mb.cp % per_node != 0 || node[i] != i / per_node)
            return PlanOutcome::infeasible("dcp: the CP group's ranks do not fill nodes in equal consecutive runs");
        const DcpRequest r = dcp_request(mb.lengths, in.batch.mask, in.model, L, static_cast<int32_t>(mb.cp),
                                         static_cast<int32_t>(per_node));
        auto d = plan_dcp(r, *cost);
        if (!d) return PlanOutcome::error("dcp: " + d.error_str());
        if (note.empty()) note = dcp_note(r, *d);
        it = made.emplace(key, std::make_shared<const AttentionPlan>(std::move(d->plan))).first;
      }
      mb.attention = it->second;
    }
  PlanOutcome out = PlanOutcome::ok(std::move(plan));
  out.reason = note;
  return out;
}
PlanOutcome plan_packing_ffd(const StrategyInput& in) { return plan_static(in, "first_fit_decreasing"); }
PlanOutcome plan_packing_flops(const StrategyInput& in) { return plan_static(in, "flops_balanced"); }

namespace {

using Scheduler = Expected<DynCpSchedule> (*)(const std::vector<int64_t>&, int64_t, int64_t);

// The lengths a Dynamic-CP scheduler places: each padded to dyncp_pad_multiple, as the data loader
// pads a sample before any scheduler sees it (it may land on any group). Placing the unpadded
// lengths let padding break the per-rank token cap: on a 256-rank pool a one-rank group of 64
// sequences of 256 tokens held 64·512 padded tokens, and activations per GPU grew with the pool.
std::vector<int64_t> dyncp_scheduled_lengths(const std::vector<int64_t>& lengths, const ParallelConfig& L) {
  const int64_t pad_to = dyncp_pad_multiple(L.dp() * L.cp, L.sequence_parallel ? L.tp : 1);
  std::vector<int64_t> out(lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) out[i] = (lengths[i] + pad_to - 1) / pad_to * pad_to;
  return out;
}

PlanOutcome plan_scheduler(const StrategyInput& in, Scheduler scheduler, bool round_barrier) {
  const ParallelConfig& L = in.parallel;
  if (auto why = needs_max_seqlen(L); !why.empty()) return PlanOutcome::infeasible(why);
  if (auto why = check_model_split(in.model, L); !why.empty()) return PlanOutcome::infeasible(why);
  auto schedule = scheduler(dyncp_scheduled_lengths(in.batch.lengths, L), L.dp() * L.cp, L.max_seqlen_per_dp_cp_rank);
  if (!schedule) return PlanOutcome::infeasible(schedule.error_str());
  auto plan = plan_from_dyncp_schedule(*schedule, in.batch.lengths, L, round_barrier);
  if (!plan) return PlanOutcome::error(plan.error_str());
  return finish(in, std::move(*plan));
}

}  // namespace

// Megatron main synchronizes DP×CP after every round (references/context_parallel.md).
PlanOutcome plan_dynamic_cp(const StrategyInput& in) { return plan_scheduler(in, schedule_dynamic_cp_main, true); }

// Megatron dev runs its rounds as the micro-batches of the PP schedule, no extra barrier.
PlanOutcome plan_dynamic_cp_dev(const StrategyInput& in) { return plan_scheduler(in, schedule_dynamic_cp_dev, false); }

// The solver searches its own micro-batch count (PP × {1..6}) with its FLOPs model and bubble term.
PlanOutcome plan_dynamic_cp_solver(const StrategyInput& in) {
  const ParallelConfig& L = in.parallel;
  if (auto why = needs_max_seqlen(L); !why.empty()) return PlanOutcome::infeasible(why);
  if (auto why = check_model_split(in.model, L); !why.empty()) return PlanOutcome::infeasible(why);
  DynCpSolverOptions opt;
  opt.ranks = L.dp() * L.cp;
  opt.max_seqlen_per_dp_cp_rank = L.max_seqlen_per_dp_cp_rank;
  opt.pp = L.pp;
  opt.vp = L.vp;
  opt.full_recompute = L.recompute == "full";
  auto solved = solve_dynamic_cp(dyncp_scheduled_lengths(in.batch.lengths, L), in.model, opt);
  if (!solved) return PlanOutcome::infeasible(solved.error_str());
  auto plan = plan_from_dyncp_schedule(solved->schedule, in.batch.lengths, L, false);
  if (!plan) return PlanOutcome::error(plan.error_str());
  return finish(in, std::move(*plan));
}

}  // namespace cpbench
