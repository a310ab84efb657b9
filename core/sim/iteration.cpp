#include "core/sim/iteration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "core/common/json_reader.h"
#include "core/model/formulas.h"
#include "core/sim/cp_attention.h"
#include "core/sim/deepspeed_zero3.h"
#include "core/sim/engine.h"
#include "core/sim/layer_cost.h"
#include "core/sim/memory.h"
#include "core/sim/pipeline_schedule.h"
#include "core/sim/streams.h"
#include "core/sim/trace.h"

namespace cpbench {
namespace {



// Per micro-batch and model chunk on one stage: its layers' ops priced (layer_cost.h), forward and
// backward, the embedding on the first chunk and the output layer on the last.
struct ChunkCost {
  PassCost fwd, bwd;
};

// One micro-batch's ops, priced once: a layer (any number of copies), the embedding, the output
// layer. Under DeepSpeed's ZeRO-3 a layer's backward gathers what the coordinator gathers again
// for it (deepspeed_zero3.h): one pricing per distinct amount, with the number of layers that
// gather it.
struct MicroBatchOps {
  RepeatedPass layer_fwd, layer_bwd;
  PassCost embedding_fwd, embedding_bwd, output_fwd, output_bwd;
  std::vector<std::pair<int64_t, RepeatedPass>> deepspeed_bwd;  // (layers, their backward)
  std::optional<ChunkCost> deepspeed_2021;  // the layers' passes walked module by module, with every ZeRO-3 wait of the micro-batch
  const DeepSpeedGathered* deepspeed = nullptr;  // DeepSpeed 0.6+: its coordinator's replay, for the pass edges
};

// ZeRO-3's collectives at a pass's edges, over the DP×CP group, in zero3_element_bytes: a gather
// of `e` elements (DeepSpeed's rebuilt by one copy, as a layer's: layer_cost.cpp
// prefetch_next_layer), a gradient reduce-scatter, and what a gather leaves exposed beside
// `beside` seconds of compute.
struct Zero3Edges {
  const CostModel& cost;
  const ParallelConfig& L;
  GroupPlacement group;
  bool rebuild = false;
  double bytes(Collective kind, double e) const { return zero3_element_bytes(kind, L) * e; }
  double gather_s(double e) const {
    const double b = bytes(Collective::all_gather, e);
    return e > 0 ? cost.collective_s(Collective::all_gather, b, group) + (rebuild ? cost.memory_bound_s(2 * b) : 0.0) : 0.0;
  }
  double reduce_s(double e) const {
    return e > 0 ? cost.collective_s(Collective::reduce_scatter, bytes(Collective::reduce_scatter, e), group) : 0.0;
  }
  double exposed_s(double e, double beside) const { return std::max(0.0, gather_s(e) - beside); }
  // A layer's gather moved from beside a layer's compute to beside `beside`: what that adds
  // (less than nothing beside longer compute; the pass's total is kept at zero or more).
  double moved_s(double e, double beside, double layer_compute) const {
    return exposed_s(e, beside) - exposed_s(e, layer_compute);
  }
  // What a collective of `e` elements sends from this GPU.
  LinkBytes sent_bytes(Collective kind, double e) const {
    return e > 0 ? collective_sent_bytes(kind, bytes(kind, e), group) : LinkBytes{};
  }
  LinkBytes gather_bytes(double e) const { return sent_bytes(Collective::all_gather, e); }
  LinkBytes reduce_bytes(double e) const { return sent_bytes(Collective::reduce_scatter, e); }
};

// DeepSpeed of 2021: a micro-batch walked module by module (deepspeed_synchronous_times) on the
// kernels of the layer lowered without ZeRO-3's collectives and of the embedding and output layer
// (`outside`, priced; `embedding` and `output`, lowered, for their module calls), and what the
// walk waits beyond them added as the layers' passes' ZeRO-3 wait; the bytes are every tensor's
// collective.
ChunkCost price_deepspeed_2021(const CostModel& cost, const ModelShape& model, const ParallelConfig& L,
                               const PlanMicroBatch& mb, const AttentionCost* attention, const DeepSpeedGathered& ds,
                               const MicroBatchOps& outside, const LayerOps& embedding, const LayerOps& output) {
  ParallelConfig plain = L;
  plain.zero3 = false;
  const LayerOps ops = lower_layer(cost, model, plain, mb, attention);
  std::map<std::pair<LayerModule, char>, double> module_s;  // (module, phase): its kernels
  std::map<std::pair<LayerModule, char>, int> module_calls;  // (module, phase): its forward calls
  for (const auto& [list, backward] : {std::pair{&ops.forward, false}, std::pair{&ops.backward, true}})
    for (const LayerOp& op : *list) {
      const char phase = !backward ? 'f' : op.recomputed ? 'r' : 'b';
      if (op.stream == OpStream::compute)  // TP collectives: the plain passes' own exposure, below
        module_s[{op.module, phase}] += op.duration_s;
      if (op.module_call) ++module_calls[{op.module, phase}];
    }
  const GroupPlacement group = placement(L.dp() * L.cp, L.tp, cost.cluster().gpus_per_node);
  DeepSpeedSyncCosts c;
  c.compute_s = [&](const DeepSpeedStep& step) {
    const bool forward = step.phase == 'f';
    if (step.outside == OutsideModule::word_embedding)  // the lookup, the position table's add with it
      return (forward ? outside.embedding_fwd : outside.embedding_bwd).compute_s;
    if (step.outside == OutsideModule::output_layer) return (forward ? outside.output_fwd : outside.output_bwd).compute_s;
    if (step.module == LayerModule::none) return 0.0;  // a container's hook: no kernels of its own
    const auto it = module_s.find({step.module, step.phase});
    return it == module_s.end() ? 0.0 : it->second;
  };
  // torch.distributed's list collectives (all DeepSpeed of 2021 calls): world_size copies of a
  // piece each between the pieces and a flat buffer, on the NCCL stream (one launch each, the whole
  // tensor read and written) and issued one by one by the host (one op each).
  const double ranks = static_cast<double>(group.size);
  const double launch_s = cost.params().kernel_overhead_us * 1e-6;
  const Zero3Edges edges{cost, L, group};
  auto list_collective_s = [&](Collective kind, double elements) {
    const double bytes = edges.bytes(kind, elements);
    return cost.collective_s(kind, bytes, group) + cost.memory_bound_s(2 * bytes) + (ranks - 1) * launch_s;
  };
  c.gather_s = [&](double elements) { return list_collective_s(Collective::all_gather, elements); };
  c.reduce_scatter_s = [&](double elements) { return list_collective_s(Collective::reduce_scatter, elements); };
  c.issue_s = ranks * cost.params().host_op_us * 1e-6;
  c.host_s = cost.params().host_op_us * 1e-6;
  // The module calls the lowering marks (LayerOp::module_call), the layer's and those outside it.
  auto calls_in = [](const OpList& ops) {
    return static_cast<double>(std::count_if(ops.begin(), ops.end(), [](const LayerOp& op) { return op.module_call; }));
  };
  const std::map<std::pair<OutsideModule, char>, double> outside_calls = {
      {{OutsideModule::word_embedding, 'f'}, calls_in(embedding.forward)},
      {{OutsideModule::word_embedding, 'b'}, calls_in(embedding.backward)},
      {{OutsideModule::output_layer, 'f'}, calls_in(output.forward)},
      {{OutsideModule::output_layer, 'b'}, calls_in(output.backward)}};
  c.module_call_s = [&](const DeepSpeedStep& step) {
    const double call = cost.params().host_module_us * 1e-6;
    if (step.outside != OutsideModule::none) {
      const auto it = outside_calls.find({step.outside, step.phase});
      return it == outside_calls.end() ? 0.0 : it->second * call;
    }
    const auto it = module_calls.find({step.module, step.phase});
    return it == module_calls.end() ? 0.0 : it->second * call;
  };
  // The 16-bit gradient read, written in the reduce dtype; its bytes, no launch of its own.
  c.bucket_copy_s_per_element = cost.memory_bound_s(2 + edges.bytes(Collective::reduce_scatter, 1)) - launch_s;
  if (!L.zero3_contiguous_gradients) {  // no bucket copy; each full bucket flattened, all-reduced, copied back
    c.bucket_copy_s_per_element = 0;
    c.bucket_all_reduce_s = [&](double elements) {
      const double bytes = edges.bytes(Collective::all_reduce, elements);
      return cost.collective_s(Collective::all_reduce, bytes, group) + 3 * cost.memory_bound_s(2 * bytes);
    };
  }
  c.comm_sm_share = cost.params().comm_sm_fraction;
  c.sent_bytes = [&](Collective kind, double elements) { return edges.sent_bytes(kind, elements); };
  const DeepSpeedSyncTimes t = deepspeed_synchronous_times(ds, c);
  const double layers = static_cast<double>(model.layers);
  ChunkCost out{price_ops(cost, ops.forward, layers), price_ops(cost, ops.backward, layers)};
  for (auto [pass, walked, compute, host, slowed] :
       {std::tuple{&out.fwd, t.forward_s, t.forward_compute_s, t.forward_host_s, t.forward_contention_s},
        std::tuple{&out.bwd, t.backward_s, t.backward_compute_s, t.backward_host_s, t.backward_contention_s}}) {
    pass->dp_comm_s = std::max(0.0, walked - compute - host - slowed);
    pass->host_s += host;
    pass->compute_s += slowed;
    pass->contention_s += slowed;
  }
  // The bytes: every collective walked (each micro-batch's backward reduces every gradient, the
  // epilogue's bucket included).
  out.fwd.dp_bytes += t.forward_sent;
  out.bwd.dp_bytes += t.backward_sent;
  return out;
}

// `ds` is DeepSpeed's coordinator replayed for the plan (deepspeed_gathered; empty unless
// deepspeed_stage3), which the ops returned point to: it must outlive them.
MicroBatchOps price_micro_batch(const CostModel& cost, const ModelShape& model, const ParallelConfig& L,
                                const PlanMicroBatch& mb, const AttentionCost* attention, const DeepSpeedGathered* ds) {
  if (mb.lengths.empty()) return {};  // an idle slot: nothing to compute
  const LayerOps embedding = lower_embedding(cost, model, L, mb);
  const LayerOps output = lower_output_layer(cost, model, L, mb);
  MicroBatchOps out;
  out.embedding_fwd = price_ops(cost, embedding.forward);
  out.embedding_bwd = price_ops(cost, embedding.backward);
  out.output_fwd = price_ops(cost, output.forward);
  out.output_bwd = price_ops(cost, output.backward);
  if (L.zero3_sharding == "deepspeed_2021" && deepspeed_stage3(L)) {
    out.deepspeed_2021 = price_deepspeed_2021(cost, model, L, mb, attention, *ds, out, embedding, output);
    return out;
  }
  const Zero3Gather gather = deepspeed_stage3(L) ? Zero3Gather{ds->layer_partitioned, -1, ds->layer_bucket_copied} : Zero3Gather{};
  const LayerOps layer = lower_layer(cost, model, L, mb, attention, gather);
  out.layer_fwd = price_repeated(cost, layer.forward);
  out.layer_bwd = price_repeated(cost, layer.backward);
  // (A copy's backward gathers for the layer after it in the backward's order; the layers' kernels
  // are the same, so which copy carries which amount does not matter.) The most common amount
  // first: its first copy carries the pass's start.
  for (const auto& [elements, layers] : deepspeed_backward_groups(*ds)) {
    const Zero3Gather g{ds->layer_partitioned, elements, ds->layer_bucket_copied};
    out.deepspeed_bwd.emplace_back(layers, price_repeated(cost, lower_layer(cost, model, L, mb, attention, g).backward));
  }
  if (deepspeed_stage3(L)) out.deepspeed = ds;
  return out;
}

// FSDP (zero3_sharding flat and per_parameter): what each pass waits for beyond its layers'
// chained gathers (a layer gathers the next one beside its compute, layer_cost.cpp). The root
// unit — the chunk's parameters outside its layers — is gathered at the pass's start with the
// unshard stream waiting for the compute stream (FSDP1 _root_pre_forward and
// _wait_for_computation_stream), and kept to the backward's end (not resharded after the
// forward: FSDP1 _post_forward_reshard, FSDP2's root post_forward_mesh_info None). The first
// layer's gather follows it, beside only the embedding's compute (the chain's last gather, for
// a layer that is not there, is taken back); in the backward, with resharding, beside only the
// output layer's. Each backward ends waiting for its reduce-scatters (the post-backward final
// callback waits for the post-backward stream): the first layer's, beside only the embedding's
// backward, and the root's. FSDP2 copies the root's gathered parameters out of the all-gather's
// output before the forward, and its gradients into the reduce-scatter's input before that
// reduce-scatter, on the compute stream as a layer's (foreach_all_gather_copy_out in
// wait_for_unshard, foreach_reduce_scatter_copy_in in foreach_reduce; layer_cost.cpp); the root
// is not resharded, so not copied out again for the backward.
void add_fsdp_pass_edges(const CostModel& cost, const ModelShape& model, const ParallelConfig& L,
                         const MicroBatchOps& ops, int stage, int chunk, int64_t longest, ChunkCost& c) {
  const Zero3Edges z{cost, L, placement(L.dp() * L.cp, L.tp, cost.cluster().gpus_per_node)};
  if (z.group.size <= 1) return;
  const double layer = param_count(model, longest).per_layer / static_cast<double>(L.tp);
  const double root = chunk_outside_params_per_gpu(model, L, longest, stage, chunk);
  const bool embedding = stage == 0 && chunk == 0, output = stage == L.pp - 1 && chunk == L.vp - 1;
  c.fwd.dp_comm_s += z.gather_s(root) + z.moved_s(layer, embedding ? ops.embedding_fwd.compute_s : 0, ops.layer_fwd.next.compute_s);
  if (L.zero3_reshard_after_forward)
    c.bwd.dp_comm_s += z.moved_s(layer, output ? ops.output_bwd.compute_s : 0, ops.layer_bwd.next.compute_s);
  c.bwd.dp_comm_s += std::max(0.0, z.reduce_s(layer) - (embedding ? ops.embedding_bwd.compute_s : 0)) + z.reduce_s(root);
  c.fwd.dp_comm_s = std::max(0.0, c.fwd.dp_comm_s);
  c.bwd.dp_comm_s = std::max(0.0, c.bwd.dp_comm_s);
  c.fwd.dp_bytes += z.gather_bytes(root);
  c.bwd.dp_bytes += z.reduce_bytes(root);
  if (L.zero3_sharding == "per_parameter" && root > 0) {
    c.fwd.compute_s += cost.memory_bound_s(2 * z.bytes(Collective::all_gather, root));  // read and write
    c.bwd.compute_s += cost.memory_bound_s(2 * root + z.bytes(Collective::reduce_scatter, root));  // 16-bit in
    c.fwd.kernels += 1;
    c.bwd.kernels += 1;
  }
}

// DeepSpeed (0.6 and later; pp and vp are 1): what each micro-batch's passes wait for beyond the
// layers' chained gathers, from its coordinator's trace (deepspeed_zero3.h). Forward: the
// embedding's tables gathered first, with nothing to run beside them; the first layer's beside
// only the embedding's compute; the output layer's (a tied one's word table again) beside the
// last layer's forward, in place of the chain's gather for a layer that is not there. Backward:
// the first layer's (none for a layer held across the turn) beside only the output layer's
// backward; the output layer's own, if released, beside its forward; the embedding's tables again
// beside the first layer's backward, in place of the chain's last. Every backward ends with the
// optimizer's epilogue (engine.py backward → allreduce_gradients →
// independent_gradient_partition_epilogue, each micro-batch), which reduce-scatters the buckets
// flushed after the last layer's backward, with their copies, and waits for them; the gradients
// outside the layers are those buckets' bytes.
void add_deepspeed_pass_edges(const CostModel& cost, const ModelShape& model, const ParallelConfig& L,
                              const MicroBatchOps& ops, int64_t longest, ChunkCost& c) {
  const Zero3Edges z{cost, L, placement(L.dp() * L.cp, L.tp, cost.cluster().gpus_per_node), true};
  if (z.group.size <= 1) return;
  const DeepSpeedGathered& ds = *ops.deepspeed;
  const double layer_fwd = ops.layer_fwd.next.compute_s, layer_bwd = ops.deepspeed_bwd.front().second.next.compute_s;
  const double first_backward = ds.backward_gathered.empty() ? 0 : ds.backward_gathered.back();
  // The epilogue's buckets copied as a layer's are (layer_cost.cpp reduce_scatter_gradients): the
  // gradients made after the last layer's backward into the bucket, every tensor re-interleaved.
  const double bucket_copies_s =
      cost.memory_bound_s(deepspeed_bucket_copy_bytes(ds.copied_at_end, ds.reduced_at_end, z.bytes(Collective::reduce_scatter, 1)));
  c.fwd.dp_comm_s += z.gather_s(ds.embedding_forward) + z.moved_s(ds.layer_partitioned, ops.embedding_fwd.compute_s, layer_fwd) +
                     z.exposed_s(ds.output_forward, layer_fwd);
  c.bwd.dp_comm_s += z.moved_s(first_backward, ops.output_bwd.compute_s, layer_bwd) +
                     z.exposed_s(ds.output_backward, ops.output_fwd.compute_s) + z.exposed_s(ds.embedding_backward, layer_bwd) +
                     z.reduce_s(ds.reduced_at_end) + bucket_copies_s;
  c.fwd.dp_comm_s = std::max(0.0, c.fwd.dp_comm_s);
  c.bwd.dp_comm_s = std::max(0.0, c.bwd.dp_comm_s);
  c.fwd.dp_bytes += z.gather_bytes(ds.embedding_forward);
  c.fwd.dp_bytes += z.gather_bytes(ds.output_forward);
  c.bwd.dp_bytes += z.gather_bytes(ds.output_backward);
  c.bwd.dp_bytes += z.gather_bytes(ds.embedding_backward);
  c.bwd.dp_bytes += z.reduce_bytes(stage_outside_params_per_gpu(model, L, longest, 0));
}

ChunkCost chunk_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& L,
                     const PlanMicroBatch& mb, const MicroBatchOps& ops, int stage, int chunk, int64_t longest) {
  if (mb.lengths.empty()) return {};
  const double layers = static_cast<double>(chunk_layers(L, model.layers, stage, chunk));
  ChunkCost c{ops.layer_fwd.times(layers), ops.layer_bwd.times(layers)};
  if (ops.deepspeed_2021) c = *ops.deepspeed_2021;  // pp and vp are 1: every layer
  if (!ops.deepspeed_bwd.empty()) {  // DeepSpeed: pp and vp are 1, the chunk is every layer
    c.bwd = ops.deepspeed_bwd.front().second.times(static_cast<double>(ops.deepspeed_bwd.front().first));
    for (size_t i = 1; i < ops.deepspeed_bwd.size(); ++i)
      c.bwd += ops.deepspeed_bwd[i].second.next * static_cast<double>(ops.deepspeed_bwd[i].first);
  }
  if (!L.zero3 && !L.gradient_accumulation_fusion) {
    // main_grad += grad: read the main gradient and the 16-bit new one, write the main one.
    // (ZeRO-3 has no main_grad: the 16-bit gradient is reduce-scattered from the backward.)
    c.bwd.compute_s += cost.memory_bound_s((2 * L.grad_bytes() + 2) * chunk_params_per_gpu(model, L, longest, stage, chunk));
    c.bwd.kernels += 1;
  }
  if (stage == 0 && chunk == 0) {
    c.fwd += ops.embedding_fwd;
    c.bwd += ops.embedding_bwd;
  }
  if (stage == L.pp - 1 && chunk == L.vp - 1) {
    c.fwd += ops.output_fwd;
    c.bwd += ops.output_bwd;
  }
  if (L.zero3 && !deepspeed_stage3(L)) add_fsdp_pass_edges(cost, model, L, ops, stage, chunk, longest, c);
  if (ops.deepspeed) add_deepspeed_pass_edges(cost, model, L, ops, longest, c);
  return c;
}

// Moving one micro-batch's activations (or their gradients) across a stage boundary: seconds,
// and the bytes the sending GPU puts on each link.
struct Boundary {
  double s = 0;
  LinkBytes bytes;
};
Boundary boundary(const CostModel& cost, const ModelShape& model, const ParallelConfig& L, const PlanMicroBatch& mb,
                  int from_stage, int to_stage) {
  const int64_t g = cost.cluster().gpus_per_node;
  const bool inter_node = global_rank(L, from_stage, 0, 0) / g != global_rank(L, to_stage, 0, 0) / g;
  const Link link = inter_node ? Link::network : Link::nvlink;
  if (mb.lengths.empty()) return {};
  const double bytes = 2.0 * static_cast<double>(mb.rank_tokens()) * model.hidden;
  auto on_link = [&](double b) { return inter_node ? LinkBytes{0, b} : LinkBytes{b, 0}; };
  if (L.sequence_parallel) return {cost.p2p_s(bytes / L.tp, link), on_link(bytes / L.tp)};  // sharded over TP
  if (L.scatter_gather && L.tp > 1 && inter_node) {
    // SC'21 §4.1: each TP rank sends 1/t over its own NIC; the receivers all-gather on NVLink.
    const GroupPlacement tp = placement(L.tp, 1, g);
    return {cost.p2p_s(bytes / L.tp, link) + cost.collective_s(Collective::all_gather, bytes, tp),
            on_link(bytes / L.tp) += collective_sent_bytes(Collective::all_gather, bytes, tp)};
  }
  return {cost.p2p_s(bytes, link), on_link(bytes)};
}

// The memory counter track of every simulated device: the stage's weights, gradients and
// optimizer state plus the activations its ops hold, changing when a forward starts (it saves
// its activations) and when a backward ends (it frees them) — the walk estimate_memory takes.
std::vector<CounterSample> memory_counters(const ModelShape& model, const Plan& plan,
                                           const std::vector<const std::vector<PlanMicroBatch>*>& replicas,
                                           const PipelineSchedule& schedule, const std::vector<PipelineTasks>& pipelines,
                                           const SimResult& sim) {
  const ParallelConfig& L = plan.layout;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::vector<CounterSample> out;
  for (size_t r = 0; r < replicas.size(); ++r)
    for (int s = 0; s < static_cast<int>(L.pp); ++s) {
      const int device = static_cast<int>(r * L.pp) + s;
      const double weights = stage_weight_bytes(model, plan, s);
      const StageMemory sm = stage_activation_memory(model, L, *replicas[r], schedule, s);
      out.push_back({device, 0.0, "memory GiB", weights / kGiB});
      for (size_t i = 0; i < schedule[s].size(); ++i) {
        const int task = schedule[s][i].forward ? pipelines[r].compute[s][i] : pipelines[r].done[s][i];
        const double t = schedule[s][i].forward ? sim.start_s[task] : sim.end_s[task];
        out.push_back({device, t, "memory GiB", (weights + sm.after_op[i]) / kGiB});
      }
    }
  return out;
}

// The DP×CP ranks grouped by identical micro-batch lists (symmetry: one simulated pipeline, a
// "replica", per distinct list), after checking that the lists fit the layout and every
// micro-batch's CP group contains its rank.
struct Replicas {
  std::vector<const std::vector<PlanMicroBatch>*> lists;
  std::vector<int> of_rank;    // [DP×CP rank] its replica
  std::vector<double> weight;  // [replica] the ranks it stands for
};

Expected<Replicas> group_replicas(const Plan& plan) {
  const ParallelConfig& L = plan.layout;
  const int64_t ranks = static_cast<int64_t>(plan.micro_batches.size());  // DP×CP ranks of a stage
  if (ranks == 0) return Error{"", "", "the plan has no micro-batches"};
  if (ranks != L.dp() * L.cp)
    return Error{"", "", "the plan has " + std::to_string(ranks) + " micro-batch lists, the layout " +
                             std::to_string(L.dp() * L.cp) + " DP×CP ranks"};
  Replicas out;
  out.of_rank.resize(ranks);
  for (int64_t r = 0; r < ranks; ++r) {
    const auto& list = plan.micro_batches[r];
    for (size_t k = 0; k < list.size(); ++k) {
      const PlanMicroBatch& mb = list[k];
      const bool own = mb.first_rank < 0 ? mb.cp == 1 : mb.first_rank <= r && r < mb.first_rank + mb.cp;
      if (!own)
        return Error{"", "", "DP×CP rank " + std::to_string(r) + ", micro-batch " + std::to_string(k) + ": its CP group [" +
                                 std::to_string(mb.first_rank) + ", " + std::to_string(mb.first_rank + mb.cp) +
                                 ") does not contain the rank"};
    }
    if (list.size() != plan.micro_batches[0].size())
      return Error{"", "", "DP×CP rank " + std::to_string(r) + " has " + std::to_string(list.size()) +
                               " micro-batches, rank 0 has " + std::to_string(plan.micro_batches[0].size())};
    auto it = std::find_if(out.lists.begin(), out.lists.end(), [&](auto* x) { return *x == list; });
    out.of_rank[r] = static_cast<int>(it - out.lists.begin());
    if (it == out.lists.end()) {
      out.lists.push_back(&list);
      out.weight.push_back(0);
    }
    out.weight[out.of_rank[r]] += 1;
  }
  return out;
}

// The task graph of one iteration, built step by step (simulate_iteration calls them in order).
class IterationGraph {
 public:
  IterationGraph(const Plan& plan, const ModelShape& model, const CostModel& cost, const Replicas& replicas,
                 const PipelineSchedule& schedule, AttentionCostMemo* memo)
      : plan_(plan), L_(plan.layout), model_(model), cost_(cost), replicas_(replicas), schedule_(schedule),
        p_(static_cast<int>(L_.pp)), v_(static_cast<int>(L_.vp)), m_(static_cast<int>(plan.micro_batches[0].size())),
        attention_(cost, L_, memo), grad_tasks_(p_), cp_wait_s_(replicas.lists.size(), 0),
        host_s_(replicas.lists.size() * p_, 0), layer_contention_s_(replicas.lists.size() * p_, 0),
        kernels_(replicas.lists.size() * p_, 0),
        sent_(replicas.lists.size() * p_), offload_bytes_(replicas.lists.size() * p_, 0),
        longest_(longest_sequence(plan)), deepspeed_(deepspeed_gathered(model, L_, longest_)) {}

  // Per replica: each (micro-batch, chunk) op of every stage with its blocking tail (TP
  // collectives, CP waits, blocking sends) on their streams, then the DP gradient reduction.
  Status add_pipelines() {
    for (size_t r = 0; r < replicas_.lists.size(); ++r) {
      auto costs = chunk_costs(*replicas_.lists[r]);
      if (!costs) return costs.errors();
      const int first_device = static_cast<int>(r) * p_;
      for (int s = 0; s < p_; ++s)
        for (const auto& c : (*costs)[s]) {
          cp_wait_s_[r] += c.fwd.cp_wait_s + c.bwd.cp_wait_s;
          host_s_[first_device + s] += c.fwd.host_s + c.bwd.host_s;
          layer_contention_s_[first_device + s] += c.fwd.contention_s + c.bwd.contention_s;
          kernels_[first_device + s] += c.fwd.kernels + c.bwd.kernels;
        }
      for (int s = 0; s < p_; ++s) sent_[first_device + s] = sent_bytes(*replicas_.lists[r], *costs, s);
      const FrameworkGaps before = framework_gaps(*replicas_.lists[r]);
      for (int s = 0; s < p_; ++s) host_s_[first_device + s] += framework_host_s(plan_.host_per_step);
      host_s_[first_device] += before.first_s;
      for (int s = 0; s < p_; ++s)
        for (const auto& [op, gap] : before.after[s]) host_s_[first_device + s] += gap.host_s;
      const std::vector<int> zero_grad = add_zero_grad(first_device, before);  // ahead of the passes on each compute stream
      pipelines_.push_back(add_pipeline(*replicas_.lists[r], *costs, first_device, before));
      for (int s = 0; s < p_; ++s)
        if (!pipelines_.back().compute[s].empty()) graph_.add_dep(pipelines_.back().compute[s][0], zero_grad[s]);
      add_offload_copies(*replicas_.lists[r], first_device, pipelines_.back());
      for (int s = 0; s < p_; ++s) {
        names_.push_back("replica " + std::to_string(r) + " stage " + std::to_string(s));
        add_gradient_reduction(pipelines_.back(), first_device, s);
      }
    }
    return ok_status();
  }

  // Ranks of one CP group run its micro-batch together: when they are simulated apart (their
  // other micro-batches differ), each op of that micro-batch starts at once on all of them.
  // Megatron main's round barrier makes every forward of a round's first micro-batch a start over
  // all ranks.
  Status join_groups() {
    const int64_t ranks = static_cast<int64_t>(plan_.micro_batches.size());
    if (!plan_.round_start.empty() && plan_.round_start.size() != static_cast<size_t>(m_))
      return Error{"", "", "plan: round_start marks " + std::to_string(plan_.round_start.size()) + " micro-batches, the plan has " +
                               std::to_string(m_)};
    for (int k = 0; k < m_; ++k) {
      const bool barrier = !plan_.round_start.empty() && plan_.round_start[static_cast<size_t>(k)] && replicas_.lists.size() > 1;
      if (barrier) {
        std::vector<int> all(replicas_.lists.size());
        for (size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
        join(all, k, 'f');
      }
      std::vector<int64_t> seen;  // first ranks of the groups already joined
      for (int64_t r = 0; r < ranks; ++r) {
        const PlanMicroBatch& mb = plan_.micro_batches[r][k];
        if (mb.cp <= 1 || mb.first_rank < 0 || std::find(seen.begin(), seen.end(), mb.first_rank) != seen.end()) continue;
        seen.push_back(mb.first_rank);
        if (mb.first_rank + mb.cp > ranks)
          return Error{"", "", "micro-batch " + std::to_string(k) + ": CP group [" + std::to_string(mb.first_rank) + ", " +
                                   std::to_string(mb.first_rank + mb.cp) + ") exceeds the " + std::to_string(ranks) +
                                   " DP×CP ranks"};
        std::vector<int> members;
        for (int64_t q = mb.first_rank; q < mb.first_rank + mb.cp; ++q) {
          if (!(plan_.micro_batches[q][k] == mb))
            return Error{"", "", "micro-batch " + std::to_string(k) + ": rank " + std::to_string(q) +
                                     " does not hold the micro-batch of its CP group at rank " +
                                     std::to_string(mb.first_rank)};
          const int replica = replicas_.of_rank[q];
          if (std::find(members.begin(), members.end(), replica) == members.end()) members.push_back(replica);
        }
        // At a round's barrier the forwards are already joined over all ranks (a task belongs to
        // one collective; the barrier's contains the group's); a round's later micro-batches join
        // the group's forwards and backwards.
        if (members.size() > 1) join(members, k, barrier ? 'b' : 'a');
      }
    }
    return ok_status();
  }

  // Replicas that differ reduce gradients together: the last DP task of each stage is a
  // collective across the simulated replicas.
  void join_gradient_reductions() {
    if (replicas_.lists.size() <= 1) return;
    for (int s = 0; s < p_; ++s) {
      ++collective_id_;
      for (size_t r = 0; r < replicas_.lists.size(); ++r) {
        TaskSpec t{static_cast<int>(r) * p_ + s, step_stream::dp, 0, {}, collective_id_, -1, "dp barrier", 'm'};
        for (int id : grad_tasks_[s])
          if (graph_.task(id).device == t.device) t.deps.push_back(id);
        grad_tasks_[s].push_back(graph_.add(t));
      }
    }
  }

  // Optimizer step after every gradient of the stage is reduced (stage_optimizer_s), preceded by
  // Megatron's step-end collectives (step_end_collectives) and split by the gradient norm's
  // all-reduce (norm_all_reduce_s), which joins the model-parallel group's stages (with the
  // distributed optimizer every simulated device). The distributed optimizer then all-gathers the
  // updated parameters.
  void add_optimizer() {
    const int64_t shards = L_.dp() * L_.cp;
    const int world_norm = norm_joins_world() ? ++collective_id_ : -1;
    for (size_t r = 0; r < replicas_.lists.size(); ++r) {
      const int pair = ++collective_id_;
      const int norm = norm_joins_world() ? world_norm : ++collective_id_;
      for (int s = 0; s < p_; ++s) {
        const int device = static_cast<int>(r) * p_ + s;
        // After the stage's last op with its blocking tail (its gradients are complete then, even
        // without a DP reduction to wait for) and the stage's gradient reductions.
        std::vector<int> deps{pipelines_[r].done[s].back()};
        for (int id : grad_tasks_[s])
          if (graph_.task(id).device == device) deps.push_back(id);
        const OptimizerPasses passes = stage_optimizer_s(s);
        if (!L_.zero3) {
          for (const StepEndCollective& c : step_end_collectives(s)) {
            TaskSpec t{device, step_stream::dp, c.seconds, deps, c.pairs ? pair : -1, -1, c.name, 'm'};
            set_contention(cost_, t, collective_sent_bytes(Collective::all_reduce, c.bytes, c.group));
            deps = {graph_.add(t)};
          }
          deps = {graph_.add(TaskSpec{device, step_stream::compute, passes.before_norm_s, deps, -1, -1, "optimizer: grads, norm", 'o'})};
          deps = {graph_.add(TaskSpec{device, step_stream::dp, norm_all_reduce_s(), deps, norm, -1, "grad norm all-reduce", 'm'})};
        }
        const int opt = graph_.add(TaskSpec{device, step_stream::compute, passes.after_norm_s, deps, -1, -1, "optimizer", 'o'});
        if (L_.distributed_optimizer && !L_.zero3 && shards > 1 && L_.overlap_param_gather) {
          add_param_gather_prologue(static_cast<int>(r), s);
        } else if (gathers_params_at_end()) {
          const double bytes = param_gather_bytes(s);
          const GroupPlacement group = placement(shards, L_.tp, cost_.cluster().gpus_per_node);
          TaskSpec ag{device, step_stream::dp, cost_.collective_s(Collective::all_gather, bytes, group), {opt}, -1, -1,
                      "dp param all-gather", 'm'};
          set_contention(cost_, ag, collective_sent_bytes(Collective::all_gather, bytes, group));
          graph_.add(ag);
        }
      }
    }
  }

  // Step time and the per-device breakdown: means over the DP×CP ranks of a stage (a replica
  // counts once per rank it stands for) and over stages. TP collectives, CP waits and blocking
  // sends are tasks of their own streams that hold the compute stream: the engine counts them as
  // exposed communication, not compute.
  IterationResult result(const SimResult& sim) const {
    IterationResult out;
    out.step_time_s = sim.makespan_s;
    out.tasks = graph_.size();
    out.simulated_pipelines = replicas_.lists.size();
    const double ranks = static_cast<double>(plan_.micro_batches.size());
    double busy_sum = 0, busy_max = 0, idle = 0, exposed = 0, devices = 0;
    for (size_t r = 0; r < replicas_.lists.size(); ++r) {
      const double w = replicas_.weight[r];
      out.exposed_cp_comm_s += w * cp_wait_s_[r] / p_ / ranks;
      for (int s = 0; s < p_; ++s) {
        const size_t d = r * p_ + s;
        const double compute = sim.compute_busy_s[d];
        busy_sum += w * compute;
        busy_max = std::max(busy_max, compute);
        exposed += w * sim.exposed_comm_s[d];
        out.exposed_host_s += w * host_s_[d];
        out.step_framework_s += w * (zero_grad_s(s) + stage_optimizer_s(s).total());
        // Inside the layers (TP collectives and ZeRO-3 gathers beside GEMMs, CP sends beside the
        // attention tiles) and between them (pipeline sends, DP reductions, parameter gathers).
        out.contention_s += w * (layer_contention_s_[d] + sim.contention_s[d]);
        out.kernels += w * kernels_[d];
        idle += w * std::max(0.0, sim.makespan_s - sim.compute_busy_s[d] - sim.exposed_comm_s[d] - host_s_[d]);
        out.comm_bytes += sent_[d] * w;
        out.offload_bytes += w * offload_bytes_[d];
        devices += w;
      }
    }
    out.comm_bytes = out.comm_bytes * (1 / devices);
    out.offload_bytes /= devices;
    out.exposed_comm_s = exposed / devices;
    out.exposed_host_s /= devices;
    out.step_framework_s /= devices;
    out.contention_s /= devices;
    out.kernels /= devices;
    out.bubble_fraction = sim.makespan_s > 0 ? idle / devices / sim.makespan_s : 0;
    out.compute_imbalance = busy_sum > 0 ? busy_max / (busy_sum / devices) : 1;
    return out;
  }

  Status write_trace(const SimResult& sim, const std::filesystem::path& path) const {
    const auto counters = memory_counters(model_, plan_, replicas_.lists, schedule_, pipelines_, sim);
    return write_chrome_trace(graph_, sim, names_, path, kStepStreamNames, counters);
  }

  // The op timeline of two layers of the first non-empty micro-batch, forward then backward (one
  // device each), as price_ops simulates them: what each chunk task of the iteration trace is made
  // of. Written beside the iteration's trace as NAME.layer.json, and one layer's single kernels as
  // NAME.layer_ops.csv (layer_ops_csv).
  Status write_layer_trace(const std::filesystem::path& path) {
    for (const PlanMicroBatch& mb : *replicas_.lists[0]) {
      if (mb.lengths.empty()) continue;
      AttentionCost attn;
      if (mb.cp > 1) {
        auto a = attention_.get(mb);
        if (!a) return a.errors();
        attn = *a;
      }
      // DeepSpeed's layer as most of its layers gather (deepspeed_2021's passes are walked module
      // by module instead: the trace shows its layer as flat ZeRO-3 lowers it).
      Zero3Gather gather;
      if (L_.zero3_sharding == "deepspeed" && deepspeed_stage3(L_))
        gather = {deepspeed_.layer_partitioned, deepspeed_backward_groups(deepspeed_).front().first,
                  deepspeed_.layer_bucket_copied};
      const LayerOps ops = lower_layer(cost_, model_, L_, mb, mb.cp > 1 ? &attn : nullptr, gather);
      TaskGraph g;
      append_ops(g, cost_, ops.forward, 2, 0);
      append_ops(g, cost_, ops.backward, 2, 1);
      auto sim = simulate_checked(g);
      if (!sim) return sim.errors();
      std::filesystem::path layer_path = path, ops_path = path;
      layer_path.replace_extension(".layer.json");
      // The same layer's single kernels with their predicted times, for a device to replay
      // (scripts/measure_gpu_ops.py --replay) and `cpbench calibrate --check` to compare.
      ops_path.replace_extension(".layer_ops.csv");
      if (auto st = write_file_atomic(ops_path, layer_ops_csv(cost_, ops)); !st) return st;
      return write_chrome_trace(g, *sim, {"2 layers forward", "2 layers backward"}, layer_path, kLayerStreamNames);
    }
    return ok_status();
  }

  const TaskGraph& graph() const { return graph_; }

  // A step time no simulation of this plan can beat (step_time_lower_bound): per replica, its
  // pipeline with every op's compute and then its blocking tails (TP collectives, CP waits, host)
  // and nothing else — no sends, no contention, no offload copies, no joins with other replicas
  // (pipeline_op_ends: add_pipeline's schedule and dependencies, every duration no longer than
  // there, no edge the full graph lacks); then the first stage's end of step after its last op.
  Expected<IterationBound> lower_bound() {
    double bound = 0, devices = 0, last_op_end = 0;
    double first_forward_s = std::numeric_limits<double>::infinity();  // the least prologue of a replica's first stage
    LinkBytes sent;
    for (size_t r = 0; r < replicas_.lists.size(); ++r) {
      auto costs = chunk_costs(*replicas_.lists[r]);
      if (!costs) return costs.errors();
      const FrameworkGaps before = framework_gaps(*replicas_.lists[r]);
      first_forward_s = std::min(first_forward_s, before.first_s);
      for (int s = 0; s < p_; ++s) {
        sent += sent_bytes(*replicas_.lists[r], *costs, s) * replicas_.weight[r];
        devices += replicas_.weight[r];
      }
      auto pass = [&](int s, const PipeOp& op) -> const PassCost& {
        const ChunkCost& c = (*costs)[s][op.micro_batch * v_ + op.chunk];
        return op.forward ? c.fwd : c.bwd;
      };
      auto ends = pipeline_op_ends(
          schedule_, [&](int s, const PipeOp& op) { return pass(s, op).compute_s; },
          [&](int s, const PipeOp& op) {
            const Gap gap = gap_after(before, s, op);
            return pass(s, op).total() - pass(s, op).compute_s + gap.host_s + gap.device_s;
          });
      if (!ends) return ends.errors();
      for (const auto& stage : *ends)
        if (!stage.empty()) bound = std::max(bound, stage.back());
      if (!ends->front().empty()) last_op_end = std::max(last_op_end, ends->front().back());
    }
    // After stage 0's last op: its last gradient reduction, the step-end collectives, the optimizer
    // with the gradient norm's all-reduce, the parameter all-gather.
    const int64_t shards = L_.dp() * L_.cp;
    const GroupPlacement group = placement(shards, L_.tp, cost_.cluster().gpus_per_node);
    double end_of_step = stage_optimizer_s(0).total() + norm_all_reduce_s();
    for (const StepEndCollective& c : step_end_collectives(0)) end_of_step += c.seconds;
    // Stage 0's last backward is its first chunk's (interleaving runs the chunks' last backwards
    // from the last chunk down): that chunk's last bucket follows it.
    if (!L_.zero3 && shards > 1) end_of_step += late_grad_reduction_s(0, 0);
    if (gathers_params_at_end()) end_of_step += cost_.collective_s(Collective::all_gather, param_gather_bytes(0), group);
    // Every op waits, through stage 0's first, for stage 0's zeroed gradient buffer and the
    // framework's host work of the step and of its first forward (the least over the replicas).
    const double start = zero_grad_s(0) + framework_host_s(plan_.host_per_step) +
                         (std::isfinite(first_forward_s) ? first_forward_s : 0.0);
    return IterationBound{std::max(start + bound, start + last_op_end + end_of_step), sent * (1 / devices)};
  }

 private:
  // The step starts by zeroing the gradients the backward will accumulate into, one memory-bound
  // write over the stage's gradient buffer (Megatron's zero_grad_buffer: the whole buffer on every
  // data-parallel rank, the distributed optimizer's included; ZeRO-3 keeps only its shard).
  double zero_grad_s(int s) const {
    const double params = params_per_gpu(model_, L_, longest_, s) / (L_.zero3 ? static_cast<double>(L_.dp() * L_.cp) : 1.0);
    return cost_.memory_bound_s(L_.grad_bytes() * params);
  }

  // Framework work between a stage's ops that the device waits for: the host has just
  // synchronized, so the device idles while the host works (host_s) and runs the kernels it
  // issues (device_s). It runs once the stage's previous op is done, so it is that op's last tail
  // segments (its output leaves before them: after[stage][op], keyed by (forward, micro-batch,
  // chunk)), or, before stage 0's first op, part of the step's prologue (first_s, host only):
  //  - Plan::host_per_micro_batch before each forward of a micro-batch's first chunk that holds a
  //    sequence, on the first stage, which fetches it;
  //  - with check_for_nan_in_loss_and_grad (Megatron-LM), after each forward of a micro-batch's
  //    last chunk that holds a sequence, on the last stage: the loss tested for NaN and for Inf
  //    (pretrain_gpt.py loss_func → rerun_state_machine.validate_result: torch.isnan, torch.isinf,
  //    each result read by the host: 2 ops, 2 synchronizations), before its backward;
  //  - and after each chunk's last backward (without overlap_grad_reduce after the stage's last
  //    op, where its reduction starts): every gradient bucket's L2 norm (a memory-bound read of the
  //    bucket on the device) tested the same way (param_and_grad_buffer.py check_grads: 3 ops, 2
  //    synchronizations per bucket). Megatron checks a bucket as the backward completes it; here
  //    the chunk's checks follow its last backward, ahead of its last bucket's reduction.
  struct Gap {
    double host_s = 0, device_s = 0;
  };
  struct FrameworkGaps {
    std::vector<std::map<std::tuple<bool, int, int>, Gap>> after;  // [stage]
    double first_s = 0;
  };
  static constexpr FrameworkHostWork kLossNanCheck{2, 2};
  static constexpr FrameworkHostWork kBucketNanCheck{3, 2};
  FrameworkGaps framework_gaps(const std::vector<PlanMicroBatch>& mbs) const {
    FrameworkGaps out;
    out.after.resize(p_);
    if (schedule_.empty()) return out;
    auto key = [](const PipeOp& op) { return std::tuple<bool, int, int>{op.forward, op.micro_batch, op.chunk}; };
    const double fetch = framework_host_s(plan_.host_per_micro_batch);
    const std::vector<PipeOp>& first = schedule_.front();
    for (size_t i = 0; fetch > 0 && i < first.size(); ++i) {
      if (!first[i].forward || first[i].chunk != 0 || mbs[first[i].micro_batch].lengths.empty()) continue;
      if (i == 0) out.first_s += fetch;
      else out.after[0][key(first[i - 1])].host_s += fetch;
    }
    if (!L_.check_for_nan_in_loss_and_grad || L_.zero3) return out;
    for (const PipeOp& op : schedule_.back())
      if (op.forward && op.chunk == v_ - 1 && !mbs[op.micro_batch].lengths.empty())
        out.after[p_ - 1][key(op)].host_s += framework_host_s(kLossNanCheck);
    for (int s = 0; s < p_; ++s) {
      const std::vector<PipeOp>& ops = schedule_[s];
      for (int c = 0; c < v_; ++c) {
        int last = -1;
        for (int i = 0; i < static_cast<int>(ops.size()); ++i)
          if (!ops[i].forward && ops[i].chunk == c) last = i;
        if (last < 0) continue;
        const PipeOp& at = L_.overlap_grad_reduce ? ops[last] : ops.back();
        const double buckets = grad_buckets(s, c);
        Gap& g = out.after[s][key(at)];
        g.host_s += buckets * framework_host_s(kBucketNanCheck);
        g.device_s += buckets * cost_.memory_bound_s(chunk_grad_bytes(s, c) / buckets);
      }
    }
    return out;
  }
  static Gap gap_after(const FrameworkGaps& gaps, int s, const PipeOp& op) {
    if (gaps.after.empty() || gaps.after[s].empty()) return {};
    const auto it = gaps.after[s].find({op.forward, op.micro_batch, op.chunk});
    return it == gaps.after[s].end() ? Gap{} : it->second;
  }

  // zero_grad_s as a task on each stage's compute stream, added before the stage's ops (the stream
  // runs its tasks in the order they were added): per stage, its task.
  // Then, where the plan has some, the framework's host work before the stage's first op, on the
  // host stream after the zeroing (its synchronizations wait for it): the step's
  // (Plan::host_per_step) and, on the first stage, the first forward's (framework_gaps).
  // Per stage, the last of its tasks, which its first op waits for.
  std::vector<int> add_zero_grad(int first_device, const FrameworkGaps& before) {
    std::vector<int> out;
    for (int s = 0; s < p_; ++s) {
      out.push_back(graph_.add(TaskSpec{first_device + s, step_stream::compute, zero_grad_s(s), {}, -1, -1,
                                        "zero grad buffer", 'o'}));
      if (const double host = framework_host_s(plan_.host_per_step) + (s == 0 ? before.first_s : 0.0); host > 0) {
        out.back() = graph_.add(TaskSpec{first_device + s, step_stream::host, host, {out.back()}, -1, -1,
                                         "framework host", 'o'});
      }
    }
    return out;
  }

  // The time of framework host work (FrameworkHostWork): its ops issued and its synchronizations'
  // round trips, the device idle meanwhile.
  double framework_host_s(const FrameworkHostWork& w) const {
    return (w.ops * cost_.params().host_op_us + w.syncs * cost_.params().pcie_latency_us) * 1e-6;
  }

  // Stage s's optimizer step, memory-bound passes over its parameters, or its shard of them when
  // the distributed optimizer or ZeRO-3 shards the state over the data-parallel group with CP
  // (dp·cp ranks, the group the gradients are reduce-scattered over). In bytes per parameter, as
  // Megatron's mixed-precision optimizer runs it (megatron/core/optimizer/optimizer.py step):
  // before the gradient norm's all-reduce the gradients to fp32 (read g, write 4) and their norm
  // (read 4); after it the clipping's scaling (read 4, write 4), fused Adam (read gradient, master
  // weight, momentum, variance; write the last three: 28) and the master weights back to the
  // 16-bit model (read 4, write 2). fp16's loss-scale unscaling (8 more, before the norm) is not
  // counted. ZeRO-3 (FSDP, DeepSpeed) runs the same bytes as one pass, no norm between.
  struct OptimizerPasses {
    double before_norm_s = 0, after_norm_s = 0;
    double total() const { return before_norm_s + after_norm_s; }
  };
  OptimizerPasses stage_optimizer_s(int s) const {
    const bool sharded = L_.distributed_optimizer || L_.zero3;
    const double params = params_per_gpu(model_, L_, longest_, s) / (sharded ? static_cast<double>(L_.dp() * L_.cp) : 1.0);
    const double before = L_.grad_bytes() + 4 + 4, after = 8 + 28 + 6;
    if (L_.zero3) return {0, cost_.memory_bound_s((before + after) * params)};
    return {cost_.memory_bound_s(before * params), cost_.memory_bound_s(after * params)};
  }

  // Megatron's end of a step after the stage's gradients are reduced over DP×CP
  // (megatron/core/distributed/finalize_model_grads.py, finalize_model_grads), collectives the
  // optimizer waits for, in this order:
  //  - with sequence parallelism, the gradients of the parameters every TP rank holds whole (the
  //    norms; the row-parallel linears' biases) summed over TP in one coalesced all-reduce
  //    (_allreduce_non_tensor_model_parallel_grads; fused_layer_norm.py and TERowParallelLinear
  //    mark them sequence_parallel);
  //  - with tied embeddings and pp > 1, the word embedding's gradient, which the first and the
  //    last stage both hold, summed between them (_allreduce_word_embedding_grads; `pairs`: the
  //    two stages join).
  // Then, between the optimizer's two passes, the gradient norm for clipping (norm_all_reduce).
  // ZeRO-3 (FSDP, DeepSpeed) ends its step its own way: none of these.
  struct StepEndCollective {
    std::string name;
    double bytes = 0;
    GroupPlacement group;
    bool pairs = false;
    double seconds = 0;
  };
  std::vector<StepEndCollective> step_end_collectives(int s) const {
    std::vector<StepEndCollective> out;
    if (L_.zero3) return out;
    const int64_t gpn = cost_.cluster().gpus_per_node;
    const ParamCount pc = param_count(model_, longest_);
    if (L_.sequence_parallel && L_.tp > 1) {
      const double row_biases = model_.bias ? 2.0 * static_cast<double>(model_.hidden) : 0.0;
      double params = static_cast<double>(stage_layers(L_, model_.layers, s)) * (2 * pc.final_norm + row_biases);
      if (s == p_ - 1) params += pc.final_norm;
      out.push_back({"tp norm-grad all-reduce", L_.grad_bytes() * params, placement(L_.tp, 1, gpn)});
    }
    if (model_.tied_embeddings && p_ > 1 && (s == 0 || s == p_ - 1))
      out.push_back({"embedding grad all-reduce", L_.grad_bytes() * pc.embedding / static_cast<double>(L_.tp),
                     placement(2, (L_.pp - 1) * L_.tp * L_.cp * L_.dp(), gpn), true});
    for (StepEndCollective& c : out) c.seconds = cost_.collective_s(Collective::all_reduce, c.bytes, c.group);
    return out;
  }
  // The gradient norm: one fp32 value summed over the optimizer's grad-stats group — the
  // model-parallel group (TP×PP), or with the distributed optimizer every rank
  // (megatron/core/optimizer/clip_grads.py, get_grad_norm_fp32; Megatron clips by default,
  // clip_grad 1.0). It joins the stages: none updates its parameters before every stage's
  // gradients are final.
  bool norm_joins_world() const { return L_.distributed_optimizer; }
  GroupPlacement norm_group() const {
    const int64_t gpn = cost_.cluster().gpus_per_node;
    if (norm_joins_world()) return placement(L_.num_gpus, 1, gpn);
    const int64_t stages_per_node = placement(L_.pp, L_.tp * L_.cp * L_.dp(), gpn).ranks_per_node;
    return {L_.tp * L_.pp, std::min(gpn, L_.tp * stages_per_node)};
  }
  double norm_all_reduce_s() const {
    return L_.zero3 ? 0.0 : cost_.collective_s(Collective::all_reduce, 4, norm_group());
  }

  // DP gradient reduction (not ZeRO-3) of one chunk of stage s: its bytes, the collective, and
  // its time — in total, and the part after the chunk's last backward. Without
  // overlap_grad_reduce one collective after that backward. With it, Megatron's buckets: the
  // chunk's gradients in ceil(P / B) equal buckets of at most B parameters (B =
  // grad_bucket_params: one bucket for every chunk after the first), each one collective issued
  // as the backward completes it, all but the last during the chunk's last backward; each pays
  // the collective's latency, the last is exposed after it. (Megatron closes a bucket at a tensor
  // boundary once it holds B; the exact remainder is not modelled.)
  // Each chunk's own gradients: its layers, and the embedding or output layer where they live.
  double chunk_grad_bytes(int s, int c) const {
    return L_.grad_bytes() * chunk_params_per_gpu(model_, L_, longest_, s, c);
  }
  Collective grad_reduction_kind() const {
    return L_.distributed_optimizer ? Collective::reduce_scatter : Collective::all_reduce;
  }
  struct GradReduction {
    double total_s = 0, late_s = 0;
  };
  // Gradient buckets of chunk s, c: ceil(P / B) with overlap_grad_reduce, one without (Megatron's
  // DDP makes the bucket unbounded then).
  double grad_buckets(int s, int c) const {
    if (!L_.overlap_grad_reduce) return 1;
    return std::max(1.0, std::ceil(chunk_grad_bytes(s, c) / L_.grad_bytes() / grad_bucket_params(L_, c)));
  }
  GradReduction grad_reduction(int s, int c) const {
    const GroupPlacement dp = placement(L_.dp() * L_.cp, L_.tp, cost_.cluster().gpus_per_node);
    const double bytes = chunk_grad_bytes(s, c);
    if (!L_.overlap_grad_reduce) {
      const double t = cost_.collective_s(grad_reduction_kind(), bytes, dp);
      return {t, t};
    }
    const double buckets = grad_buckets(s, c);
    const double one = cost_.collective_s(grad_reduction_kind(), bytes / buckets, dp);
    return {buckets * one, one};
  }
  double late_grad_reduction_s(int s, int c) const { return grad_reduction(s, c).late_s; }
  // The distributed optimizer's all-gather of stage s's updated parameters at the step's end
  // (without overlap_param_gather; ZeRO-3 gathers on demand instead): bytes, and whether it runs.
  double param_gather_bytes(int s) const { return 2.0 * params_per_gpu(model_, L_, longest_, s); }
  bool gathers_params_at_end() const {
    return L_.distributed_optimizer && !L_.zero3 && L_.dp() * L_.cp > 1 && !L_.overlap_param_gather;
  }

  // Cost of each (micro-batch, chunk) on each stage, [stage][micro-batch · v + chunk], computed
  // once per distinct micro-batch (they repeat).
  Expected<std::vector<std::vector<ChunkCost>>> chunk_costs(const std::vector<PlanMicroBatch>& mbs) {
    std::vector<std::vector<ChunkCost>> costs(p_, std::vector<ChunkCost>(static_cast<size_t>(m_) * v_));
    for (int k = 0; k < m_; ++k) {
      const bool repeat = k > 0 && mbs[k] == mbs[k - 1];
      AttentionCost attn;
      const bool priced = !repeat && mbs[k].cp > 1;
      if (priced) {
        auto a = attention_.get(mbs[k]);
        if (!a) return a.errors();
        attn = *a;
      }
      MicroBatchOps ops;
      if (!repeat) ops = price_micro_batch(cost_, model_, L_, mbs[k], priced ? &attn : nullptr, &deepspeed_);
      for (int s = 0; s < p_; ++s)
        for (int c = 0; c < v_; ++c)
          costs[s][k * v_ + c] = repeat ? costs[s][(k - 1) * v_ + c] : chunk_cost(cost_, model_, L_, mbs[k], ops, s, c, longest_);
    }
    return costs;
  }

  PipelineTasks add_pipeline(const std::vector<PlanMicroBatch>& mbs, const std::vector<std::vector<ChunkCost>>& costs,
                             int first_device, const FrameworkGaps& before) {
    // The transfer after an op, when there is a next virtual stage to send to.
    auto send_s = [&](int s, const PipeOp& op) {
      const int to = send_target(s, op);
      return to < 0 ? 0.0 : boundary(cost_, model_, L_, mbs[op.micro_batch], s, to).s;
    };
    // An op's blocking communication after its compute: the TP collectives, the attention's wait
    // on CP transfers, and (without overlap_p2p) the send that keeps the compute stream waiting;
    // then the time its kernels waited for the host to issue them.
    auto pass = [&](int s, const PipeOp& op) -> const PassCost& {
      const ChunkCost& c = costs[s][op.micro_batch * v_ + op.chunk];
      return op.forward ? c.fwd : c.bwd;
    };
    auto tail = [&](int s, const PipeOp& op) {
      const PassCost& c = pass(s, op);
      std::vector<OpSegment> segs = {{step_stream::tp, c.tp_comm_s, 'm', "tp", false},
                                     {step_stream::cp, c.cp_wait_s, 'm', "cp wait", false},
                                     {step_stream::dp, c.dp_comm_s, 'm', "zero3 wait", false},
                                     {step_stream::host, c.host_s, 'o', "host", false}};
      if (!L_.overlap_p2p) segs.push_back({op.forward ? step_stream::pp_send_fwd : step_stream::pp_send_bwd, send_s(s, op), 'm', "send", true});
      const Gap gap = gap_after(before, s, op);  // framework work before the stage's next op
      segs.push_back({step_stream::compute, gap.device_s, 'o', "grad nan check", false});
      segs.push_back({step_stream::host, gap.host_s, 'o', "framework host", false});
      return segs;
    };
    PipelineTasks tasks = append_pipeline_tasks(
        graph_, schedule_, [&](int s, const PipeOp& op) { return pass(s, op).compute_s; },
        [&](int s, const PipeOp& op) { return L_.overlap_p2p ? send_s(s, op) : 0.0; }, first_device, tail);
    // What contention needs: how SM-bound each op's compute is, and the overlapped sends' shares.
    for (int s = 0; s < p_; ++s)
      for (size_t i = 0; i < schedule_[s].size(); ++i) {
        const PassCost& c = pass(s, schedule_[s][i]);
        graph_.at(tasks.compute[s][i]).sm_bound = c.compute_s > 0 ? std::clamp(c.sm_bound_s / c.compute_s, 0.0, 1.0) : 1;
        if (const int send = tasks.send[s][i]; send >= 0) {
          const int to = send_target(s, schedule_[s][i]);
          set_contention(cost_, graph_.at(send), boundary(cost_, model_, L_, mbs[schedule_[s][i].micro_batch], s, to).bytes);
        }
      }
    return tasks;
  }

  // The stage an op sends its output to, or −1 when it sends nothing (consumer_stage on this
  // stage itself, or none).
  int send_target(int s, const PipeOp& op) const {
    const int to = consumer_stage(p_, v_, s, op);
    return to == s ? -1 : to;
  }

  // The bytes each stage's pipeline sends put on their links, over the schedule.
  // Activation offloading (layout.activation_offload_ratio α, offload_schedule): the copy of α of a
  // forward's saved bytes to the host after its compute, on the copy-out stream; the op after its
  // release point waits for it (Megatron-Kwai's compute stream waits on the offload stream there).
  // The copy back, on the copy-in stream, starts when the stage's previous backward may start (the
  // onload stream first waits for the compute stream) and once the copy out is done; the backward
  // waits for it. Copy engines hold no SMs: no contention term.
  void add_offload_copies(const std::vector<PlanMicroBatch>& mbs, int first_device, const PipelineTasks& tasks) {
    const double alpha = L_.activation_offload_ratio;
    if (alpha <= 0) return;
    for (int s = 0; s < p_; ++s) {
      const std::vector<PipeOp>& ops = schedule_[s];
      const OffloadSchedule off = offload_schedule(L_, ops, s);
      const int device = first_device + s;
      std::vector<int> copied_out(ops.size(), -1);  // [forward op] its copy-out task
      for (size_t i = 0; i < ops.size(); ++i) {
        const std::string name = std::to_string(ops[i].micro_batch) + "." + std::to_string(ops[i].chunk);
        if (ops[i].forward && off.offloaded[i]) {
          const double layers = static_cast<double>(chunk_layers(L_, model_.layers, s, ops[i].chunk));
          const double bytes = alpha * layers * micro_batch_layer_bytes(model_, L_, mbs[ops[i].micro_batch]);
          copied_out[i] = graph_.add(TaskSpec{device, step_stream::copy_out, cost_.p2p_s(bytes, Link::pcie),
                                              {tasks.compute[s][i]}, -1, -1, "offload F" + name, 'm'});
          offload_bytes_[device] += 2 * bytes;
          const size_t waits = static_cast<size_t>(off.released_after[i]) + 1;
          if (waits < ops.size()) graph_.add_dep(tasks.compute[s][waits], copied_out[i]);
        } else if (off.reload_at[i] >= 0) {
          const int out = copied_out[off.forward_of[i]];
          std::vector<int> deps = {out};
          if (off.reload_at[i] >= 1) deps.push_back(tasks.done[s][off.reload_at[i] - 1]);
          const int in = graph_.add(TaskSpec{device, step_stream::copy_in, graph_.task(out).duration_s, deps, -1, -1,
                                             "reload B" + name, 'm'});
          graph_.add_dep(tasks.compute[s][i], in);
        }
      }
    }
  }

  // overlap_param_gather: the parameter all-gather the previous step's optimizer issued, as it runs
  // during this step's forward: one piece per layer of each chunk, in chunk order, from the start
  // on its own stream; the chunk's first forward waits for its first layer's piece and the stage's
  // next op for the chunk's last (the forward cannot run past parameters not yet gathered).
  void add_param_gather_prologue(int replica, int s) {
    const int device = replica * p_ + s;
    const std::vector<PipeOp>& ops = schedule_[s];
    const PipelineTasks& tasks = pipelines_[replica];
    const GroupPlacement group = placement(L_.dp() * L_.cp, L_.tp, cost_.cluster().gpus_per_node);
    for (int c = 0; c < v_; ++c) {
      const double chunk_bytes = 2.0 * chunk_params_per_gpu(model_, L_, longest_, s, c);
      size_t first = ops.size();
      for (size_t i = 0; i < ops.size() && first == ops.size(); ++i)
        if (ops[i].forward && ops[i].chunk == c) first = i;
      if (first == ops.size()) continue;
      // One piece per layer of the chunk (a chunk of the embedding or the loss alone: one piece).
      const int pieces = std::max<int>(1, static_cast<int>(chunk_layers(L_, model_.layers, s, c)));
      int piece = -1, first_piece = -1;
      for (int k = 0; k < pieces; ++k) {
        TaskSpec t{device, step_stream::param_gather, cost_.collective_s(Collective::all_gather, chunk_bytes / pieces, group), {},
                   -1, -1, "dp param all-gather chunk " + std::to_string(c), 'm'};
        set_contention(cost_, t, collective_sent_bytes(Collective::all_gather, chunk_bytes / pieces, group));
        piece = graph_.add(t);
        if (k == 0) first_piece = piece;
      }
      graph_.add_dep(tasks.compute[s][first], first_piece);
      if (first + 1 < ops.size()) graph_.add_dep(tasks.compute[s][first + 1], piece);
    }
  }

  // What one GPU of stage s sends per iteration (the replica's micro-batches `mbs`, their priced
  // chunks): its TP collectives and ZeRO-3 layer collectives, its pipeline sends, the DP gradient
  // reduction (ZeRO-3 reduces in every micro-batch's passes), the step-end collectives with the
  // gradient norm's and the distributed optimizer's parameter all-gather.
  // One count for the simulation's results and for the bound (a property of the plan, not of
  // the timing).
  LinkBytes sent_bytes(const std::vector<PlanMicroBatch>& mbs, const std::vector<std::vector<ChunkCost>>& costs,
                       int s) const {
    LinkBytes out;
    for (const auto& c : costs[s]) {
      out += c.fwd.tp_bytes;
      out += c.bwd.tp_bytes;
      out += c.fwd.dp_bytes;
      out += c.bwd.dp_bytes;
    }
    for (const PipeOp& op : schedule_[s])
      if (const int to = send_target(s, op); to >= 0) out += boundary(cost_, model_, L_, mbs[op.micro_batch], s, to).bytes;
    const GroupPlacement group = placement(L_.dp() * L_.cp, L_.tp, cost_.cluster().gpus_per_node);
    if (!L_.zero3)  // ZeRO-3 reduces in every micro-batch's backward: its passes' bytes
      for (int c = 0; c < v_; ++c) out += collective_sent_bytes(grad_reduction_kind(), chunk_grad_bytes(s, c), group);
    for (const StepEndCollective& c : step_end_collectives(s)) out += collective_sent_bytes(Collective::all_reduce, c.bytes, c.group);
    if (!L_.zero3) out += collective_sent_bytes(Collective::all_reduce, 4, norm_group());
    if (L_.distributed_optimizer && !L_.zero3 && group.size > 1) {
      if (L_.overlap_param_gather)  // layer by layer, chunk by chunk (add_param_gather_prologue)
        for (int c = 0; c < v_; ++c)
          out += collective_sent_bytes(Collective::all_gather, 2.0 * chunk_params_per_gpu(model_, L_, longest_, s, c), group);
      else
        out += collective_sent_bytes(Collective::all_gather, param_gather_bytes(s), group);
    }
    return out;
  }

  // Gradient reduction of each chunk over the DP×CP ranks (Megatron reduces over the
  // data-parallel group with CP): with overlap once its last backward has run — its buckets but
  // the last while that backward runs, the last after it (grad_reduction); without, after the
  // stage's last op.
  void add_gradient_reduction(const PipelineTasks& tasks, int first_device, int s) {
    if (L_.zero3) return;  // every micro-batch's backward waited for its reduce-scatters (chunk_cost)
    const GroupPlacement dp = placement(L_.dp() * L_.cp, L_.tp, cost_.cluster().gpus_per_node);
    const Collective kind = grad_reduction_kind();
    // Chunks in the order their last backward runs (interleaving finishes the last chunk first):
    // the dp stream is FIFO, so a chunk done early must not queue behind one done late.
    std::vector<std::pair<int, int>> last_of;  // (its last backward's index, chunk)
    for (int c = 0; c < v_; ++c) {
      int last = -1;
      for (int i = 0; i < static_cast<int>(schedule_[s].size()); ++i)
        if (!schedule_[s][i].forward && schedule_[s][i].chunk == c) last = i;
      last_of.emplace_back(last, c);
    }
    std::sort(last_of.begin(), last_of.end());
    for (const auto& [last, c] : last_of) {
      const double grad_bytes = chunk_grad_bytes(s, c);
      const GradReduction reduction = grad_reduction(s, c);
      const double total_s = reduction.total_s;
      // Without overlap the reduction runs after the stage's whole backward (Megatron's local DDP
      // reduces once the pipeline is flushed), every chunk's then; with it, each chunk's as soon
      // as its own last backward is done.
      const int last_task = L_.overlap_grad_reduce ? tasks.done[s][last] : tasks.done[s].back();
      const double early = total_s - reduction.late_s;
      std::vector<int> early_deps = {last > 0 ? tasks.done[s][last - 1] : last_task};
      for (auto [dur, deps] : {std::pair{early, early_deps}, std::pair{total_s - early, std::vector<int>{last_task}}}) {
        if (dur <= 0) continue;
        TaskSpec t{first_device + s, step_stream::dp, dur, deps, -1, -1, "dp grad chunk " + std::to_string(c), 'm'};
        set_contention(cost_, t, collective_sent_bytes(kind, grad_bytes * dur / total_s, dp));
        grad_tasks_[s].push_back(graph_.add(t));
      }
    }
  }

  // which: 'a' every op of micro-batch k, 'f' its forwards, 'b' its backwards.
  void join(const std::vector<int>& members, int k, char which) {
    for (int s = 0; s < p_; ++s)
      for (size_t i = 0; i < schedule_[s].size(); ++i) {
        const PipeOp& op = schedule_[s][i];
        if (op.micro_batch != k || (which == 'f' && !op.forward) || (which == 'b' && op.forward)) continue;
        ++collective_id_;
        for (int r : members) graph_.set_collective(pipelines_[r].compute[s][i], collective_id_);
      }
  }

  const Plan& plan_;
  const ParallelConfig& L_;
  const ModelShape& model_;
  const CostModel& cost_;
  const Replicas& replicas_;
  const PipelineSchedule& schedule_;
  const int p_, v_, m_;
  CpAttentionCache attention_;
  TaskGraph graph_;
  std::vector<PipelineTasks> pipelines_;
  std::vector<std::string> names_;
  std::vector<std::vector<int>> grad_tasks_;  // [stage] the DP reduction tasks of every replica
  std::vector<double> cp_wait_s_;             // [replica] CP waits summed over stages
  std::vector<double> host_s_;                // [device] compute stream waiting for the host
  std::vector<double> layer_contention_s_;    // [device] compute slowed inside its layers' passes
  std::vector<double> kernels_;               // [device] GPU kernels its ops issue
  std::vector<LinkBytes> sent_;               // [device] TP, PP and DP bytes it sends
  std::vector<double> offload_bytes_;         // [device] activation bytes copied out and back over PCIe
  int64_t longest_;                           // the plan's longest sequence (learned position table)
  DeepSpeedGathered deepspeed_;               // DeepSpeed's coordinator replayed (empty unless deepspeed_stage3)
  int collective_id_ = 0;
};

// Groups the plan's ranks, builds its pipeline schedule and hands the iteration's graph builder to
// `use`; the errors of a plan the schedule cannot take.
template <class Use>
auto with_iteration_graph(const Plan& plan, const ModelShape& model, const CostModel& cost, AttentionCostMemo* memo,
                          Use&& use)
    -> decltype(use(std::declval<IterationGraph&>())) {
  auto replicas = group_replicas(plan);
  if (!replicas) return replicas.errors();
  const ParallelConfig& L = plan.layout;
  auto schedule = pipeline_schedule(plan.pipeline_schedule, static_cast<int>(L.pp),
                                    static_cast<int>(plan.micro_batches[0].size()), static_cast<int>(L.vp));
  if (!schedule) return schedule.errors();
  IterationGraph g(plan, model, cost, *replicas, *schedule, memo);
  return use(g);
}

}  // namespace

Expected<IterationBound> iteration_bound(const Plan& plan, const ModelShape& model, const CostModel& cost,
                                         AttentionCostMemo* memo) {
  return with_iteration_graph(plan, model, cost, memo, [](IterationGraph& g) { return g.lower_bound(); });
}

Expected<IterationResult> simulate_iteration(const Plan& plan, const ModelShape& model, const CostModel& cost,
                                             const std::filesystem::path& trace_path, AttentionCostMemo* memo) {
  return with_iteration_graph(plan, model, cost, memo, [&](IterationGraph& g) -> Expected<IterationResult> {
    if (auto s = g.add_pipelines(); !s) return s.errors();
    if (auto s = g.join_groups(); !s) return s.errors();
    g.join_gradient_reductions();
    g.add_optimizer();
    auto sim = simulate_checked(g.graph());
    if (!sim) return sim.errors();
    if (!trace_path.empty()) {
      if (auto s = g.write_trace(*sim, trace_path); !s) return s.errors();
      if (auto s = g.write_layer_trace(trace_path); !s) return s.errors();
    }
    return g.result(*sim);
  });
}

}  // namespace cpbench
