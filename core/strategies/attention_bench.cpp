#include "core/strategies/attention_bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "core/layouts/cp_layouts.h"
#include "core/cost/cost_model.h"
#include "core/strategies/dcp.h"

namespace cpbench {
namespace {

// Why the layout cannot hold an attention micro-benchmark ("" when it can).
std::string check_bench_layout(const ParallelConfig& p) {
  if (p.tp != 1 || p.pp != 1 || p.cp != p.num_gpus)
    return "an attention micro-benchmark runs on one CP group of every GPU: needs tp = pp = 1 and cp = num_gpus (got tp " +
           std::to_string(p.tp) + ", pp " + std::to_string(p.pp) + ", cp " + std::to_string(p.cp) + ", " +
           std::to_string(p.num_gpus) + " GPUs)";
  return "";
}

// One micro-batch holding the batch, on the group of all ranks, running `attention`; every
// sequence padded to a multiple of `pad_to` as the layout pads it (padding_fraction).
Plan bench_plan(const StrategyInput& in, std::shared_ptr<const AttentionPlan> attention, int64_t pad_to = 1) {
  Plan plan;
  plan.layout = in.parallel;
  plan.attention_only = true;
  PlanMicroBatch mb;
  mb.lengths = in.batch.lengths;
  mb.cp = in.parallel.cp;
  mb.pad_to = pad_to;
  mb.first_rank = 0;
  mb.attention = std::move(attention);
  plan.micro_batches.assign(static_cast<size_t>(in.parallel.cp), {mb});
  return plan;
}


}  // namespace

PlanOutcome plan_cp_attention(const StrategyInput& in) {
  if (auto why = check_bench_layout(in.parallel); !why.empty()) return PlanOutcome::infeasible(why);
  CpLayoutRequest r;
  r.layout = in.parallel.attention_layout;
  r.cp = static_cast<int32_t>(in.parallel.cp);
  r.a2a_size = static_cast<int32_t>(in.parallel.attention_a2a_size);
  r.window = static_cast<int32_t>(in.parallel.attention_ring_window);
  // A static layout's tiles are the causal mask's. As shipped it cannot skip a sparse mask's work:
  // each tile is computed whole with the mask applied inside (the causal envelope). With
  // attention_sparse_kernel its kernels skip the mask's empty key blocks (DCP §7's TransformerEngine
  // on DCP's masked kernels); the transfers stay the layout's. (tp is 1: check_bench_layout.)
  const bool sparse = in.batch.mask.kind != MaskKind::causal && in.batch.mask.kind != MaskKind::full;
  static_cast<AttentionShape&>(r) =
      tp_rank_attention(in.batch.lengths, sparse ? MaskSpec{MaskKind::causal} : in.batch.mask, in.model, in.parallel);
  r.pad = true;
  // The layouts that split every sequence pad each (2·cp chunks, or cp for the ring); Ulysses pads
  // only the batch's last sequence to a multiple of cp (under cp tokens: left out of pad_to); a
  // single rank pads nothing.
  const CpLayout* row = find_cp_layout(r.layout);
  if (!row) return PlanOutcome::infeasible("unknown CP layout " + r.layout);
  int64_t pad_to = cp_layout_sequence_multiple(*row, in.parallel.cp);
  if (in.parallel.attention_pad_to_longest && !r.seq_lengths.empty()) {
    // Every sequence becomes the longest, rounded up to the layout's multiple: a multiple that
    // every length rounds up to exactly.
    const int64_t longest = *std::max_element(r.seq_lengths.begin(), r.seq_lengths.end());
    const int64_t m = std::max<int64_t>(pad_to, 1);
    pad_to = (longest + m - 1) / m * m;
    r.seq_lengths.assign(r.seq_lengths.size(), pad_to);
  }
  auto a = plan_cp_layout(r);
  if (!a) return PlanOutcome::infeasible(r.layout + ": " + a.error_str());
  a->mask = in.batch.mask;
  a->causal_envelope_work = sparse && !in.parallel.attention_sparse_kernel;
  a->value_bytes = in.parallel.attention_values();
  a->grad_bytes = static_cast<int32_t>(in.parallel.attention_grad_bytes);
  a->fused_stages = !in.parallel.attention_per_tile;
  a->pipelined_backward = !in.parallel.attention_per_tile;
  apply_te_a2a_sequence_loop(*a, in.parallel);
  return PlanOutcome::ok(bench_plan(in, std::make_shared<const AttentionPlan>(std::move(*a)), pad_to));
}

PlanOutcome plan_dcp_attention(const StrategyInput& in) {
  if (auto why = check_bench_layout(in.parallel); !why.empty()) return PlanOutcome::infeasible(why);
  auto cost = CostModel::create(in.cluster);
  if (!cost) return PlanOutcome::error(cost.error_str());
  const DcpRequest r = dcp_request(in.batch.lengths, in.batch.mask, in.model, in.parallel,
                                   static_cast<int32_t>(in.parallel.cp), in.cluster.gpus_per_node);
  auto d = plan_dcp(r, *cost);
  if (!d) return PlanOutcome::error("dcp: " + d.error_str());
  const std::string note = dcp_note(r, *d);
  PlanOutcome out = PlanOutcome::ok(bench_plan(in, std::make_shared<const AttentionPlan>(std::move(d->plan))));
  out.reason = note;
  return out;
}

}  // namespace cpbench
