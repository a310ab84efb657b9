#include "core/sim/iteration.h"

#include <algorithm>

#include "core/sim/engine.h"
#include "core/sim/layer_cost.h"
#include "core/sim/memory.h"
#include "core/sim/pipeline_schedule.h"
#include "core/sim/trace.h"

namespace cpbench {
namespace {

constexpr int kComputeStream = 0;
constexpr int kGradStream = 3;  // DP gradient reduction (streams 1 and 2 carry pipeline sends)

// Per micro-batch and model chunk: forward and backward seconds of one stage, and the TP share.
struct ChunkCost {
  double fwd_s = 0, bwd_s = 0, tp_s = 0;
};

ChunkCost chunk_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& L,
                     const PlanMicroBatch& mb, int stage, int chunk) {
  const double layers = static_cast<double>(model.layers) / (L.pp * L.vp);
  LayerCost layer = layer_cost(cost, model, L, mb);
  ChunkCost c{layers * layer.forward.total(), layers * layer.backward.total(),
              layers * (layer.forward.tp_comm_s + layer.backward.tp_comm_s)};
  if (!L.gradient_accumulation_fusion)
    // main_grad += grad: read the main gradient and the 16-bit new one, write the main one.
    c.bwd_s += cost.memory_bound_s((2 * L.grad_bytes() + 2) * params_per_gpu(model, L, 0, stage) / L.vp);
  auto add = [&c](const LayerCost& extra) {
    c.fwd_s += extra.forward.total();
    c.bwd_s += extra.backward.total();
    c.tp_s += extra.forward.tp_comm_s + extra.backward.tp_comm_s;
  };
  if (stage == 0 && chunk == 0) add(embedding_cost(cost, model, L, mb));
  if (stage == L.pp - 1 && chunk == L.vp - 1) add(output_layer_cost(cost, model, L, mb));
  return c;
}

// Seconds to move one micro-batch's activations (or their gradients) across a stage boundary.
double boundary_s(const CostModel& cost, const ModelShape& model, const ParallelConfig& L, const PlanMicroBatch& mb,
                  int from_stage, int to_stage) {
  const int64_t g = cost.cluster().gpus_per_node;
  const int64_t stride = L.tp * L.cp * L.dp();  // ranks between consecutive stages (Megatron order)
  const bool inter_node = (from_stage * stride) / g != (to_stage * stride) / g;
  const Link link = inter_node ? Link::network : Link::nvlink;
  const double bytes = 2.0 * static_cast<double>(mb.tokens()) * model.hidden / L.cp;
  if (L.sequence_parallel) return cost.p2p_s(bytes / L.tp, link);  // already sharded over TP
  if (L.scatter_gather && L.tp > 1 && inter_node) {
    // SC'21 §4.1: each TP rank sends 1/t over its own NIC; the receivers all-gather on NVLink.
    return cost.p2p_s(bytes / L.tp, link) +
           cost.collective_s(Collective::all_gather, bytes, placement(L.tp, 1, g));
  }
  return cost.p2p_s(bytes, link);
}

}  // namespace

Expected<IterationResult> simulate_iteration(const Plan& plan, const ModelShape& model, const CostModel& cost,
                                             const std::filesystem::path& trace_path) {
  const ParallelConfig& L = plan.layout;
  const int p = static_cast<int>(L.pp), v = static_cast<int>(L.vp);
  // Symmetry: identical replicas are simulated once.
  std::vector<const std::vector<PlanMicroBatch>*> replicas;
  for (const auto& r : plan.micro_batches)
    if (std::none_of(replicas.begin(), replicas.end(), [&](auto* x) { return *x == r; })) replicas.push_back(&r);
  if (replicas.empty()) return Error{"", "", "the plan has no micro-batches"};

  TaskGraph g;
  std::vector<std::vector<int>> grad_tasks(p);  // per stage: the DP reduction tasks of every replica
  std::vector<std::string> names;
  int collective_id = 0;
  double tp_s_first_replica = 0;  // blocking TP collectives summed over its stages
  for (size_t r = 0; r < replicas.size(); ++r) {
    const auto& mbs = *replicas[r];
    const int m = static_cast<int>(mbs.size());
    auto schedule = pipeline_schedule(plan.pipeline_schedule, p, m, v);
    if (!schedule) return schedule.errors();
    // Cost of each (micro-batch, chunk) on each stage, computed once (micro-batches repeat).
    std::vector<std::vector<ChunkCost>> costs(p, std::vector<ChunkCost>(static_cast<size_t>(m) * v));
    for (int s = 0; s < p; ++s)
      for (int k = 0; k < m; ++k)
        for (int c = 0; c < v; ++c)
          costs[s][k * v + c] = (k > 0 && mbs[k] == mbs[k - 1]) ? costs[s][(k - 1) * v + c]
                                                                : chunk_cost(cost, model, L, mbs[k], s, c);
    if (r == 0)
      for (const auto& stage_costs : costs)
        for (const auto& c : stage_costs) tp_s_first_replica += c.tp_s;
    const int first_device = static_cast<int>(r) * p;
    // The transfer after an op, when there is a next virtual stage to send to.
    auto send_s = [&](int s, const PipeOp& op) {
      const int j = op.chunk * p + s;  // virtual stage
      if (p == 1 || (op.forward && j == p * v - 1) || (!op.forward && j == 0)) return 0.0;
      const int to = op.forward ? (s + 1) % p : (s + p - 1) % p;
      return boundary_s(cost, model, L, mbs[op.micro_batch], s, to);
    };
    auto tasks = append_pipeline_tasks(
        g, *schedule,
        [&](int s, const PipeOp& op) {
          const ChunkCost& c = costs[s][op.micro_batch * v + op.chunk];
          // A blocking send keeps the sender's compute stream until the transfer is done.
          return (op.forward ? c.fwd_s : c.bwd_s) + (L.overlap_p2p ? 0 : send_s(s, op));
        },
        [&](int s, const PipeOp& op) { return L.overlap_p2p ? send_s(s, op) : 0.0; },
        first_device);
    for (int s = 0; s < p; ++s) {
      names.push_back("replica " + std::to_string(r) + " stage " + std::to_string(s));
      // Gradient reduction of each chunk once its last backward has run. With overlap the
      // buckets of all but the chunk's last layer go out while that backward runs (Megatron's
      // bucketed overlap); the last bucket after it.
      const double grad_bytes = L.grad_bytes() * params_per_gpu(model, L, 0, s) / v;
      const GroupPlacement dp = placement(L.dp(), L.tp * L.cp, cost.cluster().gpus_per_node);
      const Collective kind = L.distributed_optimizer ? Collective::reduce_scatter : Collective::all_reduce;
      const double total_s = cost.collective_s(kind, grad_bytes, dp);
      const double layers_per_chunk = std::max(1.0, static_cast<double>(model.layers) / (p * v));
      for (int c = 0; c < v; ++c) {
        int last = -1;
        for (int i = 0; i < static_cast<int>((*schedule)[s].size()); ++i)
          if (!(*schedule)[s][i].forward && (*schedule)[s][i].chunk == c) last = i;
        const int last_task = tasks.compute[s][last];
        const double early = L.overlap_grad_reduce ? total_s * (1 - 1 / layers_per_chunk) : 0;
        std::vector<int> early_deps = {last > 0 ? tasks.compute[s][last - 1] : last_task};
        for (auto [dur, deps] : {std::pair{early, early_deps}, std::pair{total_s - early, std::vector<int>{last_task}}}) {
          if (dur <= 0) continue;
          TaskSpec t{first_device + s, kGradStream, dur, deps, -1, -1, "dp grad chunk " + std::to_string(c), 'm'};
          grad_tasks[s].push_back(g.add(t));
        }
      }
    }
  }
  // Replicas that differ reduce gradients together: the last DP task of each stage is a
  // collective across the simulated replicas.
  if (replicas.size() > 1) {
    for (int s = 0; s < p; ++s) {
      ++collective_id;
      for (size_t r = 0; r < replicas.size(); ++r) {
        TaskSpec t{static_cast<int>(r) * p + s, kGradStream, 0, {}, collective_id, -1, "dp barrier", 'm'};
        for (int id : grad_tasks[s]) if (g.task(id).device == t.device) t.deps.push_back(id);
        grad_tasks[s].push_back(g.add(t));
      }
    }
  }
  // Optimizer step after every gradient of the stage is reduced, as Megatron's mixed-precision
  // optimizer does it, in bytes per parameter: gradients to fp32 (read g, write 4), unscale and
  // inf check (read 4, write 4), the clipping norm (read 4), fused Adam (read gradient, master
  // weight, momentum, variance; write the last three: 28), master weights back to the 16-bit
  // model (read 4, write 2).
  for (size_t r = 0; r < replicas.size(); ++r) {
    for (int s = 0; s < p; ++s) {
      const int device = static_cast<int>(r) * p + s;
      double params = params_per_gpu(model, L, 0, s) / (L.distributed_optimizer ? L.dp() : 1);
      TaskSpec t{device, kComputeStream, cost.memory_bound_s((L.grad_bytes() + 4 + 8 + 4 + 28 + 6) * params), {}, -1, -1, "optimizer", 'o'};
      for (int id : grad_tasks[s]) if (g.task(id).device == device) t.deps.push_back(id);
      int opt = g.add(t);
      if (L.distributed_optimizer && L.dp() > 1) {
        TaskSpec ag{device, kGradStream, cost.collective_s(Collective::all_gather, 2.0 * params_per_gpu(model, L, 0, s),
                                                            placement(L.dp(), L.tp * L.cp, cost.cluster().gpus_per_node)),
                    {opt}, -1, -1, "dp param all-gather", 'm'};
        g.add(ag);
      }
    }
  }

  auto sim = simulate_checked(g);
  if (!sim) return sim.errors();
  IterationResult out;
  out.step_time_s = sim->makespan_s;
  out.tasks = g.size();
  // TP collectives sit inside the compute tasks (blocking); count them as exposed communication.
  const double tp_per_device = tp_s_first_replica / p;
  const size_t devices = sim->compute_busy_s.size();
  double busy_sum = 0, busy_max = 0, idle = 0, exposed = 0;
  for (size_t d = 0; d < devices; ++d) {
    busy_sum += sim->compute_busy_s[d];
    busy_max = std::max(busy_max, sim->compute_busy_s[d]);
    exposed += sim->exposed_comm_s[d];
    idle += std::max(0.0, sim->makespan_s - sim->compute_busy_s[d] - sim->exposed_comm_s[d]);
  }
  out.exposed_comm_s = exposed / devices + tp_per_device;
  out.bubble_fraction = sim->makespan_s > 0 ? idle / devices / sim->makespan_s : 0;
  out.compute_imbalance = busy_sum > 0 ? busy_max / (busy_sum / devices) : 1;
  if (!trace_path.empty()) {
    if (auto st = write_chrome_trace(g, *sim, names, trace_path); !st) return st.errors();
  }
  return out;
}

}  // namespace cpbench
