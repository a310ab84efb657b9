#include "core/sim/deepspeed_zero3.h"

#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

#include "core/sim/allocator_replay.h"

namespace cpbench {

bool deepspeed_stage3(const ParallelConfig& L) {
  return L.zero3 && L.zero3_sharding == "deepspeed" && L.zero3_reshard_after_forward && L.dp() * L.cp > 1;
}

DeepSpeedGathered deepspeed_gathered(const ModelShape& m, const ParallelConfig& L, int64_t seq_length) {
  DeepSpeedGathered out;
  if (!deepspeed_stage3(L)) return out;
  // The parameters (this TP rank's share, in Megatron's build order: chunk_parameter_tensors; pp
  // is 1) and the modules that use them, in the forward's order.
  std::vector<double> size;
  for (int c = 0; c < L.vp; ++c) {
    const std::vector<double> chunk = chunk_parameter_tensors(m, L, 0, c, seq_length);
    size.insert(size.end(), chunk.begin(), chunk.end());
  }
  std::vector<std::vector<int>> modules;
  std::vector<int64_t> layer_of;  // each module's layer, -1 outside the layers
  int64_t layer = -1;
  int built = 0;  // the tensors taken so far
  auto module = [&](int tensors) {
    std::vector<int> params;
    for (int k = 0; k < tensors; ++k) params.push_back(built++);
    modules.push_back(std::move(params));
    layer_of.push_back(layer);
  };
  const int norm = m.norm == "layernorm" ? 2 : 1, linear = m.bias ? 2 : 1;
  module(0);  // the embedding module; the word (and position) tables its submodules
  module(1);
  if (m.position_embedding == "learned") module(1);
  for (layer = 0; layer < m.layers; ++layer) {
    module(0);  // the layer
    module(norm);
    module(0);  // self-attention
    module(linear);  // QKV
    module(0);  // core attention
    module(linear);  // projection
    module(norm);
    module(0);  // MLP
    module(linear);  // FC1
    module(linear);  // FC2
  }
  layer = -1;
  module(norm);
  if (m.tied_embeddings) {
    modules.push_back({0});  // the output layer is the word embedding (tensor 0)
    layer_of.push_back(-1);
  } else {
    module(1);
  }
  assert(built == static_cast<int>(size.size()));  // every tensor in one module

  std::vector<bool> persistent(size.size());
  for (size_t p = 0; p < size.size(); ++p) {
    persistent[p] = size[p] <= deepspeed::kPersistenceThreshold;  // parameter_offload.py mark_persistent_parameters
    if (persistent[p]) out.persistent += size[p];
    else out.largest = std::max(out.largest, size[p]);
  }
  out.layer_partitioned = 0;
  for (size_t i = 0; i < modules.size(); ++i)
    if (layer_of[i] == 0)
      for (int p : modules[i])
        if (!persistent[p]) out.layer_partitioned += size[p];
  // The step's trace: the forward's modules, then the backward's in reverse. Under full
  // recomputation each layer's forward runs again right before its backward, and its modules'
  // forward hooks fetch as the first forward's did (the recomputed modules are in DeepSpeed's
  // recorded trace: partitioned_param_coordinator.py record_module). Each step's partitioned
  // parameters are entries of the prefetch queue, [first[i], first[i + 1]).
  const bool recompute = L.recompute == "full";
  std::vector<int> trace;
  for (int i = 0; i < static_cast<int>(modules.size()); ++i) trace.push_back(i);
  const size_t forward_steps = trace.size();
  for (int i = static_cast<int>(modules.size()) - 1; i >= 0; --i) {
    const int64_t l = layer_of[static_cast<size_t>(i)];
    if (recompute && l >= 0 && (i + 1 == static_cast<int>(modules.size()) || layer_of[static_cast<size_t>(i) + 1] != l)) {
      int begin = i;  // the layer's first module
      while (begin > 0 && layer_of[static_cast<size_t>(begin) - 1] == l) --begin;
      for (int r = begin; r <= i; ++r) trace.push_back(r);
    }
    trace.push_back(i);
  }
  std::vector<int> queue;
  std::vector<size_t> first;
  std::vector<double> traversed = {0};  // all parameters of the steps before step i, persistent included
  for (int module_index : trace) {
    first.push_back(queue.size());
    double numel = 0;
    for (int p : modules[module_index]) {
      if (!persistent[p]) queue.push_back(p);
      numel += size[p];
    }
    traversed.push_back(traversed.back() + numel);
  }
  first.push_back(queue.size());
  // Each entry's step, and the parameter's next entry (or none).
  std::vector<size_t> step_of(queue.size());
  for (size_t i = 0; i < trace.size(); ++i)
    for (size_t e = first[i]; e < first[i + 1]; ++e) step_of[e] = i;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> next_entry(queue.size(), kNone);
  {
    std::vector<size_t> later(size.size(), kNone);
    for (size_t e = queue.size(); e-- > 0;) {
      next_entry[e] = later[queue[e]];
      later[queue[e]] = e;
    }
  }
  std::vector<bool> gathered(size.size());
  out.backward_gathered.assign(static_cast<size_t>(m.layers), 0.0);
  double live = 0;
  size_t popped = 0;  // the queue's front
  // Gathers entry e's parameter unless it is gathered; a gather for a layer's backward (or its
  // recomputation) is counted to that layer.
  auto gather = [&](size_t e) {
    const int p = queue[e];
    if (gathered[p]) return 0.0;
    gathered[p] = true;
    live += size[p];
    const int64_t l = layer_of[static_cast<size_t>(trace[step_of[e]])];
    if (step_of[e] >= forward_steps && l >= 0) out.backward_gathered[static_cast<size_t>(l)] += size[p];
    return size[p];
  };
  for (size_t i = 0; i < trace.size(); ++i) {
    for (size_t e = first[i]; e < first[i + 1]; ++e) gather(e);
    popped = std::max(popped, first[i + 1]);
    const double budget = std::min(deepspeed::kMaxLiveParameters - live, deepspeed::kPrefetchBucket);
    for (double prefetching = 0; popped < queue.size() && prefetching < budget;) prefetching += gather(popped++);
    out.peak = std::max(out.peak, live);
    // Released after the module, unless its next use is already in flight (prefetched) or comes
    // within stage3_max_reuse_distance elements of the modules that run next.
    for (size_t e = first[i]; e < first[i + 1]; ++e) {
      const size_t next = next_entry[e];
      const bool reused = next != kNone && (next < popped || traversed[step_of[next]] - traversed[i + 1] < deepspeed::kMaxReuseDistance);
      if (!reused && gathered[queue[e]]) {
        gathered[queue[e]] = false;
        live -= size[queue[e]];
      }
    }
  }
  out.layers_kept = std::count(out.backward_gathered.begin(), out.backward_gathered.end(), 0.0);

  // The gradients, each once its parameter's last backward use has run (DeepSpeed's hook sits on
  // the parameter's gradient accumulator, so a tied embedding's fires after the embedding's
  // backward: stage3.py create_reduce_and_remove_grad_hooks), persistent ones included, into the
  // reduce bucket: a bucket that the next gradient would overflow is reduce-scattered first
  // (reduce_independent_p_g_buckets_and_remove_grads), the last one at the backward's end
  // (independent_gradient_partition_epilogue). What is flushed after the last layer's backward is
  // the step's tail.
  std::vector<size_t> last_use(size.size(), 0);
  size_t last_layer_step = 0;
  for (size_t i = forward_steps; i < trace.size(); ++i) {
    for (int p : modules[static_cast<size_t>(trace[i])]) last_use[p] = i;
    if (layer_of[static_cast<size_t>(trace[i])] >= 0) last_layer_step = i;
  }
  std::vector<std::pair<size_t, int>> ready;  // (step, parameter)
  for (size_t p = 0; p < size.size(); ++p) ready.emplace_back(last_use[p], static_cast<int>(p));
  std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double bucket = 0;
  for (const auto& [step, p] : ready) {
    if (bucket > 0 && bucket + size[p] > deepspeed::kReduceBucket) {
      if (step > last_layer_step) out.reduced_at_end += bucket;
      bucket = 0;
    }
    bucket += size[p];
  }
  out.reduced_at_end += bucket;
  return out;
}

}  // namespace cpbench
