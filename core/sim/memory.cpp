#include "core/sim/memory.h"

#include <algorithm>
#include <map>

#include "core/model/formulas.h"
#include "core/model/model_flops.h"
#include "core/sim/allocator_replay.h"
#include "core/sim/deepspeed_zero3.h"
#include "core/sim/layer_cost.h"

namespace cpbench {

double params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage) {
  ParamCount pc = param_count(model, seq_length);
  double layers = static_cast<double>(stage_layers(layout, model.layers, stage));
  double p = pc.per_layer * layers;
  if (stage == 0) p += pc.embedding + pc.position;
  if (stage == layout.pp - 1) p += pc.final_norm + (pc.output_layer > 0 ? pc.output_layer : (layout.pp > 1 ? pc.embedding : 0));
  return p / layout.tp;
}

double chunk_params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage,
                            int64_t chunk) {
  const ParamCount pc = param_count(model, seq_length);
  const double layers = pc.per_layer * static_cast<double>(chunk_layers(layout, model.layers, stage, chunk));
  return layers / layout.tp + chunk_outside_params_per_gpu(model, layout, seq_length, stage, chunk);
}

double chunk_outside_params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length,
                                    int64_t stage, int64_t chunk) {
  const ParamCount pc = param_count(model, seq_length);
  double p = 0;
  if (stage == 0 && chunk == 0) p += pc.embedding + pc.position;
  if (stage == layout.pp - 1 && chunk == layout.vp - 1)
    p += pc.final_norm + (pc.output_layer > 0 ? pc.output_layer : (layout.pp > 1 ? pc.embedding : 0));
  return p / layout.tp;
}

double stage_outside_params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length,
                                    int64_t stage) {
  double p = 0;
  for (int64_t c = 0; c < layout.vp; ++c) p += chunk_outside_params_per_gpu(model, layout, seq_length, stage, c);
  return p;
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
    // FSDP2 (per_parameter) holds one layer more while a layer's parameters are copied out of
    // their all-gather's output (both alive), and the layer's 16-bit gradients beside their
    // copy in the reduce-scatter's input.
    // DeepSpeed (deepspeed_zero3.h) instead holds what its coordinator has gathered at its peak
    // (the last layers kept across the turn included) beside its persistent small tensors, and
    // its gradients in the contiguous reduce bucket (reduce_bucket_size elements, allocated at
    // start-up in the 16-bit dtype: stage3.py _setup_for_real_optimizer) beside the tensor whose
    // gradient autograd has just made, before it is copied into the bucket. DeepSpeed of 2021
    // double-buffers the bucket (stage3.py of v0.5.0, ipg_buffer with overlap_comm).
    const double shards = static_cast<double>(L.dp() * L.cp);
    const double sharded = (2 + L.grad_bytes() + 12) * params / shards;
    if (deepspeed_stage3(L)) {
      const DeepSpeedGathered ds = deepspeed_gathered(model, L, longest);
      const double buckets = L.zero3_sharding == "deepspeed_2021" ? 2 : 1;
      return sharded + 2 * (ds.peak + ds.persistent) + 2 * (buckets * deepspeed::kReduceBucket + ds.largest);
    }
    // FSDP's root unit (the parameters outside the layers: embedding, final norm, output layer)
    // is not resharded after the forward (FSDP1 _post_forward_reshard: not for the root; FSDP2's
    // lazy init: the root's post_forward_mesh_info None): gathered from the forward's start to
    // the backward's end, beside its unsharded gradients from the output layer's backward on —
    // FSDP1's flat parameter's whole, FSDP2's less the embedding's own tables, whose gradients
    // arrive last (a tied embedding's is the output layer's).
    const ParamCount pc = param_count(model, longest);
    const double layer = pc.per_layer / static_cast<double>(L.tp);
    const bool per_parameter = L.zero3_sharding == "per_parameter";
    const double root = stage_outside_params_per_gpu(model, L, longest, stage);
    double root_grads = root;
    if (per_parameter && stage == 0)
      root_grads -= (pc.position + (pc.output_layer > 0 || L.pp > 1 ? pc.embedding : 0)) / static_cast<double>(L.tp);
    const double gathered = (L.zero3_reshard_after_forward ? 2 * 2 * layer + 2 * root : 2 * params) + (per_parameter ? 2 * layer : 0);
    const double gradients = (L.grad_bytes() + (per_parameter ? 2 : 0)) * layer + L.grad_bytes() * root_grads;
    return sharded + gathered + gradients;
  }
  // Sharded over the data-parallel group with CP (dp·cp ranks) by the distributed optimizer.
  return weight_and_optimizer_bytes(params, static_cast<int>(L.dp() * L.cp), L.distributed_optimizer, L.grad_bytes());
}

std::vector<LayerTensor> micro_batch_layer_tensors(const ModelShape& model, const ParallelConfig& L,
                                                   const PlanMicroBatch& mb) {
  // Per-layer tensors are linear in the tokens of a sequence except the unfused s² scores, so a
  // packed micro-batch's tensor is the sum over its sequences (each attends only to itself). A CP
  // group splits every sequence's tokens evenly: each rank keeps 1/cp of them.
  LayerActivationOptions o;
  o.tp = static_cast<int>(L.tp);
  o.sequence_parallel = L.sequence_parallel;
  o.recompute = parse_recompute(L.recompute);
  o.flash = L.attention_kernel == "flash";
  o.dropout = model.dropout;
  o.elementwise_fusion = L.elementwise_fusion;
  const int64_t cp = std::max<int64_t>(1, mb.cp);
  std::vector<LayerTensor> sum;
  for (int64_t len : mb.padded_lengths()) {
    o.seq_length = (len + cp - 1) / cp;
    std::vector<LayerTensor> one = layer_activation_tensors(model, o);
    if (sum.empty()) {
      sum = std::move(one);
    } else {
      for (size_t i = 0; i < sum.size(); ++i) sum[i].bytes += one[i].bytes;
    }
  }
  return sum;
}

LossTensors micro_batch_loss_tensors(const ModelShape& model, const ParallelConfig& L, const PlanMicroBatch& mb) {
  const int64_t cp = std::max<int64_t>(1, mb.cp);
  double tokens = 0;  // this CP rank's share of every sequence, as micro_batch_layer_tensors counts it
  for (int64_t len : mb.padded_lengths()) tokens += static_cast<double>((len + cp - 1) / cp);
  const double entries = tokens * static_cast<double>(model.vocab) / static_cast<double>(L.tp);
  if (L.loss == "torch") return {entries, 4 * entries, 6 * entries, 8 * entries};
  return {entries, 4 * entries, 2 * entries, 2 * entries};
}

bool holds_loss(const ParallelConfig& L, int64_t stage, int64_t chunk) { return stage == L.pp - 1 && chunk == L.vp - 1; }

double embedding_gradient_bytes(const ModelShape& model, const ParallelConfig& L) {
  return 2.0 * static_cast<double>(model.vocab) / static_cast<double>(L.tp) * static_cast<double>(model.hidden);
}

bool holds_embedding(int64_t stage, int64_t chunk) { return stage == 0 && chunk == 0; }

double micro_batch_layer_bytes(const ModelShape& model, const ParallelConfig& L, const PlanMicroBatch& mb,
                               bool recompute_none) {
  double bytes = 0;
  for (const LayerTensor& t : micro_batch_layer_tensors(model, L, mb)) bytes += t.saved || recompute_none ? t.bytes : 0;
  return bytes;
}

OffloadSchedule offload_schedule(const ParallelConfig& L, const std::vector<PipeOp>& ops, int stage) {
  const int64_t n = static_cast<int64_t>(ops.size());
  OffloadSchedule out{std::vector<bool>(n, false), std::vector<int64_t>(n, -1), std::vector<int64_t>(n, -1),
                      std::vector<int64_t>(n, -1)};
  if (L.activation_offload_ratio <= 0) return out;  // the memory walk's common case: nothing to pair
  std::map<std::pair<int, int>, int64_t> forwards;  // (micro-batch, chunk) -> its forward op
  int64_t first_backward = n;
  for (int64_t i = 0; i < n; ++i) {
    const auto key = std::make_pair(ops[i].micro_batch, ops[i].chunk);
    if (ops[i].forward) {
      forwards[key] = i;
    } else {
      first_backward = std::min(first_backward, i);
      if (auto it = forwards.find(key); it != forwards.end()) out.forward_of[i] = it->second;
    }
  }
  // The warm-up: the forwards before the steady state's first forward, the one right before the
  // first backward.
  const int64_t warmup = std::max<int64_t>(0, first_backward - 1);
  const bool last_stage = stage == static_cast<int>(L.pp) - 1;
  for (int64_t i = 0; i < n; ++i) {
    if (!ops[i].forward) continue;
    out.offloaded[i] = L.vp > 1 ? !(last_stage && ops[i].chunk == L.vp - 1) : warmup >= 2;
    if (!out.offloaded[i]) continue;
    int64_t next = i + 1;
    while (next < n && !ops[next].forward) ++next;
    out.released_after[i] = next < n ? next : std::min(i + 1, n - 1);
  }
  int64_t previous_backward = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (ops[i].forward) continue;
    const int64_t f = out.forward_of[i];
    if (f >= 0 && out.offloaded[f]) out.reload_at[i] = std::max(f + 1, previous_backward >= 0 ? previous_backward : i - 1);
    previous_backward = i;
  }
  return out;
}

StageMemory stage_activation_memory(const ModelShape& model, const ParallelConfig& L,
                                    const std::vector<PlanMicroBatch>& micro_batches, const PipelineSchedule& schedule,
                                    int stage) {
  StageMemory out;
  const std::vector<PipeOp>& ops = schedule[stage];
  const double alpha = L.activation_offload_ratio;
  const OffloadSchedule off = offload_schedule(L, ops, stage);
  // Per micro-batch, once (each sums over its sequences): one layer's saved bytes, and what the
  // recompute mode dropped from them.
  std::vector<double> layer_bytes(micro_batches.size()), dropped(micro_batches.size());
  std::vector<LossTensors> loss(micro_batches.size());
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    layer_bytes[k] = micro_batch_layer_bytes(model, L, micro_batches[k]);
    dropped[k] = micro_batch_layer_bytes(model, L, micro_batches[k], true) - layer_bytes[k];
    loss[k] = micro_batch_loss_tensors(model, L, micro_batches[k]);
  }
  const double embedding_gradient = embedding_gradient_bytes(model, L);
  // The loss's tensors of op i: none unless its chunk holds the loss.
  auto loss_of = [&](size_t i) { return holds_loss(L, stage, ops[i].chunk) ? loss[ops[i].micro_batch] : LossTensors{}; };
  auto saved = [&](size_t i) {
    return static_cast<double>(chunk_layers(L, model.layers, stage, ops[i].chunk)) * layer_bytes[ops[i].micro_batch];
  };
  // The two copy-back buffers: each its size and the backward using it (−1: free).
  struct Buffer {
    double bytes = 0;
    int64_t user = -1;
  };
  Buffer buffers[2];
  std::vector<std::vector<int64_t>> reloads_at(ops.size()), released_at(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (off.reload_at[i] >= 0) reloads_at[off.reload_at[i]].push_back(static_cast<int64_t>(i));
    if (off.released_after[i] >= 0) released_at[off.released_after[i]].push_back(static_cast<int64_t>(i));
  }
  double held = 0;  // saved bytes on the device when op i starts, outside the copy-back buffers
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int64_t b : reloads_at[i]) {  // copies back issued as op i starts, each into a free buffer
      Buffer& into = buffers[0].user < 0 ? buffers[0] : buffers[1];
      into.bytes = std::max(into.bytes, alpha * saved(off.forward_of[b]));
      into.user = b;
    }
    double during = held + buffers[0].bytes + buffers[1].bytes, workspace = 0;
    const LossTensors l = loss_of(i);
    // What a backward frees from `held` as it ends: the share of its forward's saved bytes left on
    // the device (the copied-back share sits in a buffer) and the loss's kept tensor.
    const int64_t f = ops[i].forward ? -1 : off.forward_of[i];
    const double freed = ops[i].forward ? 0 : (f >= 0 && off.offloaded[f] ? (1 - alpha) * saved(f) : saved(i)) + l.held;
    if (ops[i].forward) {
      // All of the forward's saved bytes exist at its end, the loss's held tensor beside its
      // forward's transients.
      during += saved(i) + l.held;
      workspace = l.forward;
    } else {
      // Backward of one layer at a time: what the mode dropped for that layer comes back while it
      // runs (full: the whole layer; selective: the scores; balanced: the norm and MLP activation
      // outputs), after the loss's backward (its gradients beside its held tensor, which is then
      // freed).
      workspace = std::max(l.backward, dropped[ops[i].micro_batch] - l.held);  // dropped, without a loss
      // The embedding's gradient comes last, once what the backward frees is freed.
      if (holds_embedding(stage, ops[i].chunk)) workspace = std::max(workspace, embedding_gradient - freed);
    }
    if (during + workspace > out.peak + out.peak_workspace) out.peak = during, out.peak_workspace = workspace;
    // After op i: a forward's bytes are held; a backward frees what stayed on the device (its
    // copied-back share sits in a buffer, which it releases); offloaded shares released here leave.
    if (ops[i].forward) {
      held += saved(i) + l.held;
    } else {
      held -= freed;
      for (Buffer& b : buffers)
        if (b.user == static_cast<int64_t>(i)) b.user = -1;
    }
    for (int64_t f : released_at[i]) held -= alpha * saved(f);
    out.after_op.push_back(held + buffers[0].bytes + buffers[1].bytes);
  }
  return out;
}

MemoryEstimate estimate_memory(const ModelShape& model, const Plan& plan, const MemoryOverheads& overheads,
                               double device_bytes, bool replay_allocator) {
  const ParallelConfig& L = plan.layout;
  MemoryEstimate best;
  if (plan.micro_batches.empty() || plan.micro_batches.front().empty()) return best;
  const int p = static_cast<int>(L.pp), v = static_cast<int>(L.vp);
  const int m = static_cast<int>(plan.micro_batches.front().size());
  auto schedule = pipeline_schedule(plan.pipeline_schedule, p, m, v);
  if (!schedule) return best;  // the simulation reports why the schedule cannot take the plan
  const double f = overheads.allocator_fragmentation;
  // Per distinct rank list and stage: the memory walk's estimate, and the list it came from.
  std::vector<std::pair<MemoryEstimate, const std::vector<PlanMicroBatch>*>> estimates;
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
      if (overheads.allocator == AllocatorModel::flat_share)
        e.fragmentation_bytes = (e.activation_bytes + e.workspace_bytes) * f / (1 - f);
      estimates.push_back({e, &list});
    }
  }
  if (replay_allocator && overheads.allocator != AllocatorModel::flat_share) {
    // The allocator replayed, per stage, on the rank whose tensors peak highest there (the others'
    // steps are priced by the walk alone: a replay costs milliseconds, a walk microseconds), under
    // what the device leaves for activations; when a request fails there, its overhead is what it
    // held beyond its tensors until then.
    const bool expandable = overheads.allocator == AllocatorModel::pytorch_expandable_segments;
    auto pool = [](const MemoryEstimate& e) { return e.activation_bytes + e.workspace_bytes; };
    for (int s = 0; s < p; ++s) {
      auto* worst = &estimates[s];  // estimates hold each list's p stages in order
      for (size_t k = static_cast<size_t>(s); k < estimates.size(); k += static_cast<size_t>(p))
        if (pool(estimates[k].first) > pool(worst->first)) worst = &estimates[k];
      MemoryEstimate& e = worst->first;
      const double capacity = device_bytes - e.weights_optimizer_bytes - e.reserved_bytes;
      if (pool(e) > capacity) {
        // The replay's tensors need at least what the walk counts: it would fail; no need to run it.
        e.allocator_out_of_memory = true;
        continue;
      }
      const AllocatorReplay replay = replay_stage_allocations(model, L, *worst->second, *schedule, s, expandable, capacity);
      e.allocator_out_of_memory = replay.out_of_memory;
      e.fragmentation_bytes = std::max(0.0, replay.overhead());
    }
  }
  for (const auto& [e, list] : estimates)
    if (e.allocator_out_of_memory > best.allocator_out_of_memory ||
        (e.allocator_out_of_memory == best.allocator_out_of_memory && e.total() > best.total()))
      best = e;
  return best;
}

}  // namespace cpbench
