#include "core/sim/deepspeed_zero3.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <utility>
#include <vector>

#include "core/sim/allocator_replay.h"
#include "core/sim/layer_cost.h"

namespace cpbench {

bool deepspeed_stage3(const ParallelConfig& L) {
  return L.zero3 && (L.zero3_sharding == "deepspeed" || L.zero3_sharding == "deepspeed_2021") &&
         L.zero3_reshard_after_forward && L.dp() * L.cp > 1;
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
  std::vector<int64_t> layer_of;     // each module's layer, -1 outside the layers
  std::vector<LayerModule> kind_of;  // and which of the layer's (none: a container, or outside)
  std::vector<OutsideModule> outside_of;  // or which outside them
  int64_t layer = -1;
  int built = 0;  // the tensors taken so far
  auto module = [&](int tensors, LayerModule kind = LayerModule::none, OutsideModule outside = OutsideModule::none) {
    std::vector<int> params;
    for (int k = 0; k < tensors; ++k) params.push_back(built++);
    modules.push_back(std::move(params));
    layer_of.push_back(layer);
    kind_of.push_back(kind);
    outside_of.push_back(outside);
  };
  const int norm = m.norm == "layernorm" ? 2 : 1, linear = m.bias ? 2 : 1;
  module(0);  // the embedding module; the word (and position) tables its submodules
  module(1, LayerModule::none, OutsideModule::word_embedding);
  if (m.position_embedding == "learned") module(1, LayerModule::none, OutsideModule::position_embedding);
  for (layer = 0; layer < m.layers; ++layer) {
    module(0);  // the layer
    module(norm, LayerModule::norm1);
    module(0);  // self-attention
    module(linear, LayerModule::qkv);
    module(0, LayerModule::core_attention);
    module(linear, LayerModule::proj);
    module(norm, LayerModule::norm2);
    module(0);  // MLP
    module(linear, LayerModule::fc1);
    module(linear, LayerModule::fc2);
  }
  layer = -1;
  module(norm, LayerModule::none, OutsideModule::final_norm);
  if (m.tied_embeddings) {
    modules.push_back({0});  // the output layer is the word embedding (tensor 0)
    layer_of.push_back(-1);
    kind_of.push_back(LayerModule::none);
    outside_of.push_back(OutsideModule::output_layer);
  } else {
    module(1, LayerModule::none, OutsideModule::output_layer);
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
      for (int p : modules[i]) {
        if (!persistent[p]) out.layer_partitioned += size[p];
        if (deepspeed::copied_into_bucket(size[p], false)) out.layer_bucket_copied += size[p];
      }
  // The micro-batch's trace: the forward's modules, then the backward's in reverse. Under full
  // recomputation each layer's forward runs again right before its backward, and its modules'
  // forward hooks fetch as the first forward's did (the recomputed modules are in DeepSpeed's
  // recorded trace: partitioned_param_coordinator.py record_module). Each step's partitioned
  // parameters are entries of the prefetch queue, [first[i], first[i + 1]).
  const bool recompute = L.recompute == "full";
  std::vector<int> trace;
  std::vector<char> phase;  // each step's: 'f' forward, 'r' recomputed forward, 'b' backward
  for (int i = 0; i < static_cast<int>(modules.size()); ++i) {
    trace.push_back(i);
    phase.push_back('f');
  }
  const size_t forward_steps = trace.size();
  for (int i = static_cast<int>(modules.size()) - 1; i >= 0; --i) {
    const int64_t l = layer_of[static_cast<size_t>(i)];
    if (recompute && l >= 0 && (i + 1 == static_cast<int>(modules.size()) || layer_of[static_cast<size_t>(i) + 1] != l)) {
      int begin = i;  // the layer's first module
      while (begin > 0 && layer_of[static_cast<size_t>(begin) - 1] == l) --begin;
      for (int r = begin; r <= i; ++r) {
        trace.push_back(r);
        phase.push_back('r');
      }
    }
    trace.push_back(i);
    phase.push_back('b');
  }
  out.steps.resize(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    out.steps[i].layer = layer_of[static_cast<size_t>(trace[i])];
    out.steps[i].module = kind_of[static_cast<size_t>(trace[i])];
    out.steps[i].outside = outside_of[static_cast<size_t>(trace[i])];
    out.steps[i].phase = phase[i];
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
  // recomputation) is counted to that layer, one for a module outside the layers to its part.
  auto gather = [&](size_t e, std::vector<double>& into) {
    const int p = queue[e];
    if (gathered[p]) return 0.0;
    gathered[p] = true;
    live += size[p];
    into.push_back(size[p]);
    const size_t use = static_cast<size_t>(trace[step_of[e]]);
    const bool backward = step_of[e] >= forward_steps;
    if (layer_of[use] >= 0) {
      if (backward) out.backward_gathered[static_cast<size_t>(layer_of[use])] += size[p];
    } else if (outside_of[use] == OutsideModule::word_embedding || outside_of[use] == OutsideModule::position_embedding) {
      (backward ? out.embedding_backward : out.embedding_forward) += size[p];
    } else {
      (backward ? out.output_backward : out.output_forward) += size[p];
    }
    return size[p];
  };
  // DeepSpeed of 2021 (deepspeed_2021): a module whose tensors are not gathered or still in flight
  // synchronizes the host with the device (stage3.py fetch_sub_module, _synchronize_communication),
  // which completes every gather in flight; the prefetch runs only with nothing in flight and
  // fewer than stage3_max_live_parameters gathered, and takes tensors until the bucket is full
  // (prefetch_next_sub_modules, PrefetchCoordinator.get_params_to_prefetch).
  const bool synchronous = L.zero3_sharding == "deepspeed_2021";
  std::vector<bool> in_flight(size.size());
  std::vector<int> in_flight_list;  // the tensors marked in in_flight
  for (size_t i = 0; i < trace.size(); ++i) {
    for (size_t e = first[i]; e < first[i + 1]; ++e)
      if (!gathered[queue[e]] || in_flight[queue[e]]) out.steps[i].synchronized = true;
    if (out.steps[i].synchronized) {
      for (int p : in_flight_list) in_flight[p] = false;
      in_flight_list.clear();
    }
    for (size_t e = first[i]; e < first[i + 1]; ++e) gather(e, out.steps[i].fetched);
    popped = std::max(popped, first[i + 1]);
    if (synchronous) {
      if (in_flight_list.empty() && live < deepspeed::kMaxLiveParameters)
        for (double prefetching = 0; popped < queue.size() && prefetching < deepspeed::kPrefetchBucket; ++popped)
          if (const double g = gather(popped, out.steps[i].prefetched); g > 0) {
            prefetching += g;
            in_flight[queue[popped]] = true;
            in_flight_list.push_back(queue[popped]);
          }
    } else {
      const double budget = std::min(deepspeed::kMaxLiveParameters - live, deepspeed::kPrefetchBucket);
      for (double prefetching = 0; popped < queue.size() && prefetching < budget;)
        prefetching += gather(popped++, out.steps[i].prefetched);
    }
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
  // what each micro-batch's epilogue waits for.
  std::vector<size_t> last_use(size.size(), 0);
  size_t last_layer_step = 0;
  for (size_t i = forward_steps; i < trace.size(); ++i) {
    for (int p : modules[static_cast<size_t>(trace[i])]) last_use[p] = i;
    if (layer_of[static_cast<size_t>(trace[i])] >= 0) last_layer_step = i;
  }
  std::vector<std::pair<size_t, int>> ready;  // (step, parameter)
  for (size_t p = 0; p < size.size(); ++p) ready.emplace_back(last_use[p], static_cast<int>(p));
  std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<double> bucket;  // its gradients
  double in_bucket = 0;
  for (const auto& [step, p] : ready) {
    out.steps[step].gradients.push_back(size[p]);
    if (step > last_layer_step && deepspeed::copied_into_bucket(size[p], false)) out.copied_at_end += size[p];
    if (in_bucket > 0 && in_bucket + size[p] > deepspeed::kReduceBucket) {
      if (step > last_layer_step) out.reduced_at_end += in_bucket;
      out.steps[step].flushed.push_back(std::move(bucket));
      bucket.clear();
      in_bucket = 0;
    }
    bucket.push_back(size[p]);
    in_bucket += size[p];
  }
  out.reduced_at_end += in_bucket;
  out.last_bucket = in_bucket;
  if (!bucket.empty()) out.steps.back().flushed.push_back(std::move(bucket));  // the epilogue's
  return out;
}

std::vector<std::pair<double, int64_t>> deepspeed_backward_groups(const DeepSpeedGathered& g) {
  std::map<double, int64_t> layers;
  for (double elements : g.backward_gathered) ++layers[elements];
  std::vector<std::pair<double, int64_t>> out(layers.begin(), layers.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

DeepSpeedSyncTimes deepspeed_synchronous_times(const DeepSpeedGathered& g, const DeepSpeedSyncCosts& c) {
  DeepSpeedSyncTimes out;
  double host = 0, device = 0, gathering = 0, reducing = 0;  // when each is next free
  double forward_end = -1;
  const double share = std::clamp(c.comm_sm_share, 0.0, 0.99);
  for (const DeepSpeedStep& step : g.steps) {
    const bool forward = step.phase == 'f';
    if (!forward && forward_end < 0) forward_end = std::max(host, device);
    LinkBytes& sent = forward ? out.forward_sent : out.backward_sent;
    auto count = [&](Collective kind, double elements) {
      if (c.sent_bytes) sent += c.sent_bytes(kind, elements);
    };
    // The fetch: a module with tensors to gather or in flight waits for the device and every
    // stream, then gathers its own; the prefetch's tensors each after a device synchronization.
    // A collective issued at `host`: the host is busy issuing it (its per-rank copies) for
    // issue_s, the device done with it after gather_s, whichever is later.
    auto gathered_by = [&](double t) {
      count(Collective::all_gather, t);
      const double start = host;
      host += c.issue_s;
      return std::max(host, start + c.gather_s(t));
    };
    if (step.synchronized) {
      host = std::max({host, device, gathering, reducing});
      for (double t : step.fetched) host = gathered_by(t);
    }
    if (!step.prefetched.empty()) {
      host = std::max({host, device, gathering, reducing});  // _allgather_param's torch.cuda.synchronize()
      for (size_t k = 0; k + 1 < step.prefetched.size(); ++k) host = gathered_by(step.prefetched[k]);
      gathering = gathered_by(step.prefetched.back());
    }
    // The module's kernels, issued after the wait, slowed by the collectives running beside them.
    const double compute = c.compute_s(step);
    double waited_host = 0, slowed = 0;
    if (compute > 0) {
      // The module's Python, then its first kernel's issue; the device waits for what of them
      // comes after it is free.
      const double python = c.module_call_s ? c.module_call_s(step) : 0.0;
      host += python;
      double start = device;
      if (host >= device) {
        start = host + c.host_s;
        waited_host = c.host_s + std::min(python, host - device);
      }
      const double beside = std::max(0.0, gathering - start) + std::max(0.0, reducing - start);
      slowed = share * std::min(beside, compute / (1 - share));
      device = start + compute + slowed;
    }
    // Its gradients, once its kernels are issued: each copied into the bucket on the compute
    // stream (one larger than the bucket is reduced where it lies), and a full bucket
    // reduce-scattered once the host has waited for the one before.
    for (double t : step.gradients)
      if (deepspeed::copied_into_bucket(t, true)) device += c.bucket_copy_s_per_element * t;
    for (const std::vector<double>& bucket : step.flushed) {
      host = std::max(host, reducing);  // reduction_stream.synchronize()
      reducing = host;
      if (c.bucket_all_reduce_s) {
        double elements = 0;
        for (double t : bucket) elements += t;
        count(Collective::all_reduce, elements);
        const double start = host;
        host += c.host_s * static_cast<double>(3 + bucket.size());
        reducing = std::max(host, start + c.bucket_all_reduce_s(elements));
        continue;
      }
      for (double t : bucket) {
        count(Collective::reduce_scatter, t);
        const double start = std::max(reducing, host);
        host += c.issue_s;
        reducing = std::max(host, start + c.reduce_scatter_s(t));
      }
    }
    (forward ? out.forward_compute_s : out.backward_compute_s) += compute;
    (forward ? out.forward_host_s : out.backward_host_s) += waited_host;
    (forward ? out.forward_contention_s : out.backward_contention_s) += slowed;
  }
  const double end = std::max({host, device, gathering, reducing});
  if (forward_end < 0) forward_end = end;
  out.forward_s = forward_end;
  out.backward_s = end - forward_end;
  return out;
}

}  // namespace cpbench
