#include "core/sim/memory.h"

#include <algorithm>
#include <map>

#include "core/model/formulas.h"
#include "core/model/model_flops.h"

namespace cpbench {

double params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage) {
  ParamCount pc = param_count(model, seq_length);
  double layers = static_cast<double>(stage_layers(layout, model.layers, stage));
  double p = pc.per_layer * layers;
  if (stage == 0) p += pc.embedding + pc.position;
  if (stage == layout.pp - 1) p += pc.final_norm + (pc.output_layer > 0 ? pc.output_layer : (layout.pp > 1 ? pc.embedding : 0));
  return p / layout.tp;
}

int64_t longest_sequence(const Plan& plan) {
  int64_t longest = 0;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      for (int64_t len : mb.lengths) longest = std::max(longest, len);
  return longest;
}

double stage_weight_bytes(const ModelShape& model, const Plan& plan, int64_t stage) {
  const ParallelConfig& L = plan.layout;
  const int64_t longest = longest_sequence(plan);
  const double params = params_per_gpu(model, L, longest, stage);
  if (L.zero3) {
    // ZeRO-3: 16-bit parameters, gradients and the fp32 master weights and Adam moments all
    // sharded over dp·cp; beside them the working set of gathered layers — the one running and
    // the one prefetched (16-bit) — and one layer's full gradients before their reduce-scatter.
    // Without reshard_after_forward every layer stays gathered from its forward to its backward:
    // the whole stage's 16-bit parameters.
    const double shards = static_cast<double>(L.dp() * L.cp);
    const double layer = param_count(model, longest).per_layer / static_cast<double>(L.tp);
    const double gathered = L.zero3_reshard_after_forward ? 2 * 2 * layer : 2 * params;
    return (2 + L.grad_bytes() + 12) * params / shards + gathered + L.grad_bytes() * layer;
  }
  // Sharded over the data-parallel group with CP (dp·cp ranks) by the distributed optimizer.
  return weight_and_optimizer_bytes(params, static_cast<int>(L.dp() * L.cp), L.distributed_optimizer);
}

double micro_batch_layer_bytes(const ModelShape& model, const ParallelConfig& L, const PlanMicroBatch& mb,
                               bool recompute_none) {
  // Per-layer bytes are linear in the tokens of a sequence except the unfused s² scores, so a
  // packed micro-batch costs the sum over its sequences (each attends only to itself). A CP group
  // splits every sequence's tokens evenly: each rank keeps 1/cp of them.
  LayerActivationOptions o;
  o.tp = static_cast<int>(L.tp);
  o.sequence_parallel = L.sequence_parallel;
  o.recompute = recompute_none ? Recompute::none : parse_recompute(L.recompute);
  o.flash = L.attention_kernel == "flash";
  o.dropout = model.dropout;
  o.elementwise_fusion = L.elementwise_fusion;
  const int64_t cp = std::max<int64_t>(1, mb.cp);
  double bytes = 0;
  for (int64_t len : mb.padded_lengths()) {
    o.seq_length = (len + cp - 1) / cp;
    bytes += saved_activation_bytes_per_layer(model, o);
  }
  return bytes;
}

namespace {

// [op] the index of the forward of a backward op (of the same micro-batch and chunk), else −1.
std::vector<int64_t> forward_index(const std::vector<PipeOp>& ops) {
  std::map<std::pair<int, int>, int64_t> forwards;
  std::vector<int64_t> out(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto key = std::make_pair(ops[i].micro_batch, ops[i].chunk);
    if (ops[i].forward) forwards[key] = static_cast<int64_t>(i);
    else if (auto it = forwards.find(key); it != forwards.end()) out[i] = it->second;
  }
  return out;
}

}  // namespace

std::vector<bool> offloaded_ops(const ParallelConfig& L, const std::vector<PipeOp>& ops) {
  std::vector<bool> out(ops.size(), false);
  if (L.activation_offload_ratio <= 0) return out;
  const std::vector<int64_t> fwd = forward_index(ops);
  for (size_t j = 0; j < ops.size(); ++j)
    if (fwd[j] >= 0 && static_cast<int64_t>(j) >= fwd[j] + 4) out[fwd[j]] = true;
  return out;
}

StageMemory stage_activation_memory(const ModelShape& model, const ParallelConfig& L,
                                    const std::vector<PlanMicroBatch>& micro_batches, const PipelineSchedule& schedule,
                                    int stage) {
  StageMemory out;
  const std::vector<PipeOp>& ops = schedule[stage];
  const double layers_per_chunk = static_cast<double>(stage_layers(L, model.layers, stage)) / L.vp;
  const double alpha = L.activation_offload_ratio;
  const std::vector<bool> offloaded = offloaded_ops(L, ops);
  const std::vector<int64_t> fwd = alpha > 0 ? forward_index(ops) : std::vector<int64_t>(ops.size(), -1);
  // Per micro-batch, once (each sums over its sequences): one layer's saved bytes, and what the
  // recompute mode dropped from them.
  std::vector<double> layer_bytes(micro_batches.size()), dropped(micro_batches.size());
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    layer_bytes[k] = micro_batch_layer_bytes(model, L, micro_batches[k]);
    dropped[k] = micro_batch_layer_bytes(model, L, micro_batches[k], true) - layer_bytes[k];
  }
  auto saved = [&](size_t i) { return layers_per_chunk * layer_bytes[ops[i].micro_batch]; };
  double held = 0;  // saved bytes on the device when op i starts
  for (size_t i = 0; i < ops.size(); ++i) {
    // A reload for the next op, if it is the backward of offloaded activations, arrives during this one.
    double arriving = 0;
    if (i + 1 < ops.size() && fwd[i + 1] >= 0 && offloaded[fwd[i + 1]]) arriving = alpha * saved(fwd[i + 1]);
    double during = held + arriving, workspace = 0;
    if (ops[i].forward) {
      during += saved(i);  // all of the forward's saved bytes exist at its end
    } else {
      // Backward of one layer at a time: what the mode dropped for that layer comes back while it
      // runs (full: the whole layer; selective: the scores; balanced: the norm and MLP activation
      // outputs).
      workspace = dropped[ops[i].micro_batch];
    }
    if (during + workspace > out.peak + out.peak_workspace) out.peak = during, out.peak_workspace = workspace;
    // After op i: its own bytes; the offload copied during op i (of forward i − 1) has left; the
    // reload for op i + 1 is in.
    held += ops[i].forward ? saved(i) : -saved(i);
    if (i > 0 && ops[i - 1].forward && offloaded[i - 1]) held -= alpha * saved(i - 1);
    held += arriving;
    out.after_op.push_back(held);
  }
  return out;
}

MemoryEstimate estimate_memory(const ModelShape& model, const Plan& plan, const MemoryOverheads& overheads) {
  const ParallelConfig& L = plan.layout;
  MemoryEstimate best;
  if (plan.micro_batches.empty() || plan.micro_batches.front().empty()) return best;
  const int p = static_cast<int>(L.pp), v = static_cast<int>(L.vp);
  const int m = static_cast<int>(plan.micro_batches.front().size());
  auto schedule = pipeline_schedule(plan.pipeline_schedule, p, m, v);
  if (!schedule) return best;  // the simulation reports why the schedule cannot take the plan
  const double f = overheads.allocator_fragmentation;
  std::vector<const std::vector<PlanMicroBatch>*> seen;  // ranks with identical lists once
  for (const auto& list : plan.micro_batches) {
    if (std::any_of(seen.begin(), seen.end(), [&](auto* x) { return *x == list; })) continue;
    seen.push_back(&list);
    for (int s = 0; s < p; ++s) {
      const StageMemory sm = stage_activation_memory(model, L, list, *schedule, s);
      MemoryEstimate e;
      e.stage = s;
      e.reserved_bytes = overheads.reserved_gib * 1024.0 * 1024.0 * 1024.0;
      e.weights_optimizer_bytes = stage_weight_bytes(model, plan, s);
      e.activation_bytes = sm.peak;
      e.workspace_bytes = sm.peak_workspace;
      // The activation pool is allocated and freed every micro-batch, interleaving long-lived
      // saved tensors with short-lived ones: a share f of what it reserves is unusable (ZeRO §3.2).
      e.fragmentation_bytes = (e.activation_bytes + e.workspace_bytes) * f / (1 - f);
      if (e.total() > best.total()) best = e;
    }
  }
  return best;
}

}  // namespace cpbench
