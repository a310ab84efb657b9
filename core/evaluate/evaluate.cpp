#include "core/evaluate/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <tuple>

#include "core/cost/cost_model.h"
#include "core/model/model_flops.h"
#include "core/runtime/cpu_attention_kernels.h"
#include "core/runtime/device_runtime.h"
#include "core/runtime/plan_exec.h"
#include "core/runtime/self_communicator.h"
#include "core/runtime/thread_communicator.h"
#include "core/sim/attention_sim.h"
#include "core/sim/cp_attention.h"
#include "core/sim/iteration.h"
#include "core/sim/memory.h"

namespace cpbench {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Kernel tokens over real tokens, minus one, counting each CP group once.
double padding_fraction(const Plan& plan) {
  double real = 0, padded = 0;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      const double share = 1.0 / static_cast<double>(std::max<int64_t>(1, mb.cp));
      real += share * static_cast<double>(mb.tokens());
      padded += share * static_cast<double>(mb.padded_tokens());
    }
  return real > 0 ? padded / real - 1 : 0;
}

// What the workload and the plan are, whatever runs them: parameters, model FLOPs, tokens, tail
// share, padding.
void workload_metrics(const EvalInput& in, const Plan& plan, std::map<std::string, double>& mt) {
  // Learned position tables are sized by the longest sequence the model is trained on.
  mt["params_b"] = params_exact(in.model, in.batch.max_length()) / 1e9;
  mt["flops_per_iteration"] =
      model_flops_per_iteration(in.model, in.batch, parse_recompute(plan.layout.recompute), in.flops_definition);
  const double total = static_cast<double>(in.batch.total_tokens());
  mt["tokens_per_iteration"] = total;
  // How long-tailed the batch is: the share of tokens in sequences above 32K (the Dynamic-CP
  // sensitivity axis; 32K is where a sequence no longer fits a 16K–32K per-rank budget).
  double long_tokens = 0;
  for (int64_t L : in.batch.lengths)
    if (L > 32768) long_tokens += static_cast<double>(L);
  mt["long_token_share"] = total > 0 ? long_tokens / total : 0;
  mt["padding_fraction"] = padding_fraction(plan);
}

// CP attention bytes one layer's forward and backward move per TP rank, summed over the plan's
// micro-batches and ranks, each transfer classified by its endpoints' nodes (the layout's rank
// order): NVLink inside a node, the network across. `group(mb)` gives the bytes of a micro-batch's
// whole group: the pricing's (AttentionCost::bytes, the transfers it simulated), or derived.
template <class GroupBytes>
Expected<LinkBytes> cp_bytes_per_layer(const Plan& plan, GroupBytes group) {
  LinkBytes b;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      if (!mb.attention) continue;
      Expected<LinkBytes> g = group(mb);
      if (!g) return g.errors();
      // Every member holds the micro-batch: count the group's transfers once, 1/cp at each member.
      b += *g * (1.0 / static_cast<double>(mb.cp));
    }
  return b;
}

// The same from the attention costs `cache` priced (or prices): the simulated transfers.
Expected<LinkBytes> cp_bytes_per_layer(const Plan& plan, CpAttentionCache& cache) {
  return cp_bytes_per_layer(plan, [&](const PlanMicroBatch& mb) -> Expected<LinkBytes> {
    auto c = cache.get(mb);
    if (!c) return c.errors();
    return c->bytes;
  });
}

// The distinct AttentionPlans of a plan's CP micro-batches, in plan order (every rank of a job
// derives the same list from the same plan).
std::vector<const AttentionPlan*> distinct_attention_plans(const Plan& plan) {
  std::vector<const AttentionPlan*> out;
  std::set<const AttentionPlan*> seen;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      if (mb.attention && seen.insert(mb.attention.get()).second) out.push_back(mb.attention.get());
  return out;
}

// check_attention_plan on every distinct AttentionPlan a backend receives. It costs more than the
// simulation (dynamic_cp/github: 13.7 s for its 495 plans against 4.7 s for the whole run;
// dynamic_cp/static_side_by_side: 490 s for 5144 plans), so the sim backend checks in debug
// builds and tests only; the cpu backend checks what it executes, always.
std::string check_attention_plans(const std::vector<const AttentionPlan*>& plans) {
  for (size_t i = 0; i < plans.size(); ++i)
    if (auto why = check_attention_plan(*plans[i]); !why.empty())
      return "attention plan " + std::to_string(i) + " (" + plans[i]->layout + ") is malformed: " + why;
  return "";
}

// The bytes one GPU sends per iteration, by link: the simulation's count (TP, PP, DP) plus the
// plan's CP attention transfers (per layer and TP rank, times the layers a GPU holds).
Status comm_metrics(const EvalInput& in, const Plan& plan, const LinkBytes& counted, CpAttentionCache& attention,
                    std::map<std::string, double>& mt) {
  const Expected<LinkBytes> priced = cp_bytes_per_layer(plan, attention);
  if (!priced) return priced.errors();
  const LinkBytes& cp = *priced;
  const double layers_per_gpu = static_cast<double>(in.model.layers) / plan.layout.pp;
  const double ranks = static_cast<double>(plan.micro_batches.size());
  mt["cp_comm_bytes_nvlink"] = cp.nvlink * layers_per_gpu / ranks;
  mt["cp_comm_bytes_network"] = cp.network * layers_per_gpu / ranks;
  mt["comm_bytes_nvlink"] = counted.nvlink + mt["cp_comm_bytes_nvlink"];
  mt["comm_bytes_network"] = counted.network + mt["cp_comm_bytes_network"];
  mt["comm_bytes_per_gpu"] = mt["comm_bytes_nvlink"] + mt["comm_bytes_network"];
  return ok_status();
}

// The plan's memory: the one its caller estimated already (EvalInput::memory), else estimated here
// (replay_allocator: as estimate_memory's).
MemoryEstimate plan_memory(const EvalInput& in, const Plan& plan, bool replay_allocator = true) {
  return in.memory ? *in.memory
                   : estimate_memory(in.model, plan, in.cluster.memory, in.cluster.gpu.hbm_bytes(), replay_allocator);
}

// The memory estimate, and why the plan does not fit (empty when it does).
std::string out_of_memory(const EvalInput& in, const MemoryEstimate& mem) {
  if (mem.allocator_out_of_memory) {
    // The replayed allocator failed a request even after freeing its cache: either the tensors
    // alone do not fit what the GPU leaves them, or the cache cannot place them among live blocks.
    const double left = in.cluster.gpu.hbm_gib - (mem.weights_optimizer_bytes + mem.reserved_bytes) / kGiB;
    const double activations = (mem.activation_bytes + mem.workspace_bytes) / kGiB;
    char why[360];
    if (activations > left)
      std::snprintf(why, sizeof why,
                    "out of memory: %.1f GiB per GPU needed (weights+optimizer %.1f, activations %.1f, reserved %.1f; "
                    "stage %d), %.0f GiB on the GPU",
                    mem.allocated() / kGiB + mem.reserved_bytes / kGiB, mem.weights_optimizer_bytes / kGiB, activations,
                    mem.reserved_bytes / kGiB, mem.stage, in.cluster.gpu.hbm_gib);
    else
      std::snprintf(why, sizeof why,
                    "out of memory in the caching allocator: stage %d's activations peak at %.1f GiB of the %.1f GiB "
                    "left for them, and a request finds no place among the live blocks even after the cache is freed "
                    "(%.1f GiB held beyond its tensors then; weights+optimizer %.1f, reserved %.1f, %.0f GiB on the GPU)",
                    mem.stage, activations, left, mem.fragmentation_bytes / kGiB, mem.weights_optimizer_bytes / kGiB,
                    mem.reserved_bytes / kGiB, in.cluster.gpu.hbm_gib);
    return why;
  }
  if (mem.total() / kGiB <= in.cluster.gpu.hbm_gib) return {};
  char why[240];
  std::snprintf(why, sizeof why,
                "out of memory: %.1f GiB per GPU needed (weights+optimizer %.1f, activations %.1f, allocator "
                "fragmentation %.1f, reserved %.1f), %.0f GiB on the GPU",
                mem.total() / kGiB, mem.weights_optimizer_bytes / kGiB, (mem.activation_bytes + mem.workspace_bytes) / kGiB,
                mem.fragmentation_bytes / kGiB, mem.reserved_bytes / kGiB, in.cluster.gpu.hbm_gib);
  return why;
}

// The timeline of the first micro-batch's forward and backward (an attention micro-benchmark runs
// one plan on every rank), per rank: tiles, transfers and wait points. Nothing without a path.
Status trace_attention_only(const EvalInput& in, const Plan& plan, const CostModel& cost) {
  if (in.trace_path.empty()) return ok_status();
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank)
      if (mb.attention) {
        auto traced = simulate_attention_plan(*mb.attention, cost, true,
                                              cp_group_nodes(mb, plan.layout, in.cluster.gpus_per_node), in.trace_path);
        if (!traced) return traced.errors();
        return ok_status();
      }
  return ok_status();
}

// An attention micro-benchmark (Plan::attention_only): each rank runs its micro-batches' attention
// one after the other; the time is the slowest rank's, forward plus backward, each micro-batch's
// plan priced on its group's nodes. Bytes per GPU of that one layer.
Evaluation evaluate_attention_only(const EvalInput& in, const Plan& plan) {
  Evaluation out;
  workload_metrics(in, plan, out.metrics);
  // The whole model's parameters and FLOPs say nothing about one layer's attention.
  out.metrics.erase("params_b");
  out.metrics.erase("flops_per_iteration");
  auto cost = CostModel::create(in.cluster);
  if (!cost) return {"error", cost.error_str(), {}, {}};
  CpAttentionCache cache(*cost, plan.layout, in.attention_memo);
  double worst = 0, worst_fwd = 0, worst_bwd = 0;
  for (const auto& rank : plan.micro_batches) {
    double fwd = 0, bwd = 0;
    for (const auto& mb : rank) {
      if (!mb.attention) continue;
      auto c = cache.get(mb);
      if (!c) return {"error", c.error_str(), {}, {}};
      fwd += c->fwd_s;
      bwd += c->bwd_s;
    }
    if (fwd + bwd > worst) std::tie(worst, worst_fwd, worst_bwd) = std::make_tuple(fwd + bwd, fwd, bwd);
  }
  if (auto s = trace_attention_only(in, plan, *cost); !s) return {"error", s.error_str(), {}, {}};
  auto& mt = out.metrics;
  mt["attention_time_s"] = worst;
  mt["attention_fwd_s"] = worst_fwd;
  mt["attention_bwd_s"] = worst_bwd;
  // FlashAttention's count: 4·d per allowed pair and head forward, 2.5× that backward — the useful
  // work, the same for every strategy (a layout computing a sparse mask's causal envelope does more).
  double pairs = 0;
  for (int64_t L : in.batch.lengths) pairs += static_cast<double>(mask_pairs(in.batch.mask, L));
  const double flops = pairs * static_cast<double>(in.model.heads) * 4.0 * static_cast<double>(in.model.hidden / in.model.heads) *
                       (1 + kAttentionBwdFlopsPerFwd);
  mt["attention_tflops_per_gpu"] = worst > 0 ? flops / worst / static_cast<double>(plan.layout.num_gpus) / 1e12 : 0;
  const Expected<LinkBytes> cp = cp_bytes_per_layer(plan, cache);
  if (!cp) return {"error", cp.error_str(), {}, {}};
  const double ranks = static_cast<double>(plan.micro_batches.size());
  mt["cp_comm_bytes_nvlink"] = cp->nvlink / ranks;
  mt["cp_comm_bytes_network"] = cp->network / ranks;
  return out;
}

Evaluation evaluate_sim(const EvalInput& in, const Plan& plan) {
#ifndef NDEBUG
  if (auto why = check_attention_plans(distinct_attention_plans(plan)); !why.empty()) return {"error", why, {}, {}};
#endif
  if (plan.attention_only) return evaluate_attention_only(in, plan);
  Evaluation out;
  workload_metrics(in, plan, out.metrics);
  const MemoryEstimate mem = plan_memory(in, plan);
  if (auto why = out_of_memory(in, mem); !why.empty()) return {"infeasible", why, {}, {}};
  auto cost = CostModel::create(in.cluster);
  if (!cost) return {"error", cost.error_str(), {}, {}};
  // The simulation's attention costs, kept for the CP bytes (a run without a shared memo keeps
  // its own: each attention plan is simulated once).
  AttentionCostMemo local;
  AttentionCostMemo* memo = in.attention_memo ? in.attention_memo : &local;
  auto sim = simulate_iteration(plan, in.model, *cost, in.trace_path, memo);
  if (!sim) return {"error", sim.error_str(), {}, {}};

  auto& mt = out.metrics;
  const double flops = mt["flops_per_iteration"];
  const double gpus = static_cast<double>(plan.layout.num_gpus);
  const double step = sim->step_time_s;
  mt["step_time_s"] = step;
  mt["tflops_per_gpu"] = flops / step / gpus / 1e12;
  mt["aggregate_pflops"] = flops / step / 1e15;
  mt["mfu"] = mt["tflops_per_gpu"] / in.cluster.gpu.peak_dense_tflops;
  mt["tokens_per_s_per_gpu"] = mt["tokens_per_iteration"] / step / gpus;
  mt["tokens_per_s"] = mt["tokens_per_iteration"] / step;
  mt["bubble_fraction"] = sim->bubble_fraction;
  mt["exposed_comm_s"] = sim->exposed_comm_s;
  mt["exposed_cp_comm_s"] = sim->exposed_cp_comm_s;
  mt["exposed_host_s"] = sim->exposed_host_s;
  mt["step_framework_s"] = sim->step_framework_s;
  mt["contention_s"] = sim->contention_s;
  mt["kernels_per_iteration"] = sim->kernels;
  mt["compute_imbalance"] = sim->compute_imbalance;
  mt["micro_batches"] = static_cast<double>(plan.micro_batches.front().size());
  mt["peak_memory_gib"] = mem.total() / kGiB;
  mt["peak_allocated_bytes"] = mem.allocated();
  mt["offload_bytes_pcie"] = sim->offload_bytes;
  mt["weights_optimizer_gib"] = mem.weights_optimizer_bytes / kGiB;
  mt["activation_memory_gib"] = (mem.activation_bytes + mem.workspace_bytes) / kGiB;
  mt["fragmentation_memory_gib"] = mem.fragmentation_bytes / kGiB;
  CpAttentionCache attention(*cost, plan.layout, memo);
  if (auto s = comm_metrics(in, plan, sim->comm_bytes, attention, mt); !s) return {"error", s.error_str(), {}, {}};
  return out;
}

// One rank's verdict on an executed plan, as the job's ranks exchange it: the worst value against
// its tolerance (≤ 1 passes) and where it is.
struct RankVerdict {
  double worst = 0;
  char where[184] = {};
};

// The worst of a check, as a line: "world rank 2's dK token 37 of sequence 1 is off by 3.1 times
// its tolerance".
std::string culprit_line(int rank, const CheckResult& c) {
  char line[320];
  std::snprintf(line, sizeof line, "world rank %d's %s is off by %.3g times its tolerance", rank, c.where.c_str(), c.worst);
  return line;
}

// After every member checked its results: the world rank and place of the worst value of all.
Expected<std::string> worst_place(Communicator& comm, const CheckResult& mine) {
  RankVerdict v;
  v.worst = mine.worst;
  std::snprintf(v.where, sizeof v.where, "%s", mine.where.c_str());
  std::vector<RankVerdict> all(static_cast<size_t>(comm.size()));
  auto bytes = [](auto* p, size_t n) { return std::span(reinterpret_cast<std::byte*>(p), n * sizeof(RankVerdict)); };
  if (auto s = comm.all_gather(std::span<const std::byte>(bytes(&v, 1)), bytes(all.data(), all.size())); !s)
    return s.errors();
  size_t worst = 0;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r].worst > all[worst].worst) worst = r;
  CheckResult c;
  c.worst = all[worst].worst;
  c.where = all[worst].where;
  return culprit_line(static_cast<int>(worst), c);
}

// One AttentionPlan executed by an executing backend, over its ranks.
struct PlanExecution {
  double seconds = 0;        // the slowest member, barrier to end
  bool bytes_match = true;   // every member moved plan_bytes
  double worst = 0;          // the worst value's error over its tolerance (≤ 1 passes)
  double wrong = 0;          // values out of tolerance, summed over the members
  std::string culprit;       // where the worst value is, named for the error (when worst > 1)
};

// What an executing backend does with each distinct AttentionPlan of a point.
struct PlanExecutor {
  const char* name;  // the backend: metric prefix and error prefix
  int ranks;         // the most ranks a plan may need
  // The plan's predicted seconds where it runs (`first`) and, with its reference check on this
  // host, the seconds the budget is measured against (`second`).
  std::function<Expected<std::pair<double, double>>(const AttentionPlan&)> price;
  std::function<Expected<PlanExecution>(const AttentionPlan&, const std::string& which)> run;
};

// The executing backends' loop: every distinct AttentionPlan run unless it needs more ranks than
// the backend has or is predicted above the budget (then counted and named); a wrong value is an
// error naming the plan and where; metrics NAME_attention_plans_executed, _skipped,
// NAME_attention_predicted_s, NAME_bytes_match_plan, NAME_max_error_fraction, NAME_wrong_values and
// the timing NAME_attention_measured_s.
Evaluation execute_attention_plans(const EvalInput& in, const Plan& plan, const PlanExecutor& ex) {
  const std::string prefix = std::string(ex.name) + " backend: ";
  Evaluation out;
  workload_metrics(in, plan, out.metrics);
  const std::vector<const AttentionPlan*> plans = distinct_attention_plans(plan);
  if (plans.empty())
    return {"infeasible",
            "the " + std::string(ex.name) +
                " backend executes a plan's context-parallel attention, and this plan has none (cp = 1 everywhere)",
            {}, {}};
  if (auto why = check_attention_plans(plans); !why.empty()) return {"error", prefix + why, {}, {}};
  double executed = 0, skipped = 0, predicted_s = 0, measured_s = 0, bytes_match = 1, worst_error = 0, wrong = 0;
  std::string note;
  auto fail = [&](const std::string& why) { return Evaluation{"error", prefix + why, {}, {}}; };
  for (size_t i = 0; i < plans.size(); ++i) {
    const AttentionPlan& a = *plans[i];
    const std::string which = "attention plan " + std::to_string(i) + " (" + a.layout + ", " +
                              std::to_string(a.ranks) + " ranks)";
    if (a.ranks > ex.ranks) {
      skipped += 1;
      note += which + ": needs " + std::to_string(a.ranks) + " ranks, the job has " + std::to_string(ex.ranks) + "; ";
      continue;
    }
    auto price = ex.price(a);
    if (!price) return fail(which + ": " + price.error_str());
    if (price->second > in.cpu_budget_s) {
      skipped += 1;
      char why[200];
      std::snprintf(why, sizeof why, ": predicted %.3g s here with its check, above the %.3g s budget; ", price->second,
                    in.cpu_budget_s);
      note += which + why;
      continue;
    }
    auto run = ex.run(a, which);
    if (!run) return fail(run.error_str());
    executed += 1;
    predicted_s += price->first;
    measured_s += run->seconds;
    if (!run->bytes_match) bytes_match = 0;
    worst_error = std::max(worst_error, run->worst);
    wrong += run->wrong;
    if (run->worst > 1) {
      char count[120];
      std::snprintf(count, sizeof count, "; %.0f value%s wrong", run->wrong, run->wrong == 1 ? "" : "s");
      return fail(which + " computed wrong values: " + run->culprit + count);
    }
  }
  const std::string m = ex.name;
  out.metrics[m + "_attention_plans_executed"] = executed;
  out.metrics[m + "_attention_plans_skipped"] = skipped;
  out.metrics[m + "_attention_predicted_s"] = predicted_s;
  out.metrics[m + "_bytes_match_plan"] = bytes_match;
  out.metrics[m + "_max_error_fraction"] = worst_error;
  out.metrics[m + "_wrong_values"] = wrong;
  out.timings[m + "_attention_measured_s"] = measured_s;
  if (executed == 0) return {"infeasible", prefix + "nothing this job can execute: " + note, {}, {}};
  if (!note.empty()) out.reason = "not executed: " + note.substr(0, note.size() - 2);
  return out;
}

Evaluation evaluate_cpu(const EvalInput& in, const Plan& plan) {
  auto cost = load_cost_model(in.cpu_preset);
  if (!cost) return {"error", "cpu backend: " + cost.error_str(), {}, {}};
  SelfCommunicator alone;
  Communicator& comm = in.world ? *in.world : alone;
  CpuAttentionKernels cpu;
  AttentionKernels& kernels = in.kernels ? *in.kernels : cpu;
  PlanExecutor ex{"cpu", comm.size(), nullptr, nullptr};
  // Run and check on this machine's ranks: every rank's kernels, then the reference, on one rank.
  ex.price = [&](const AttentionPlan& a) -> Expected<std::pair<double, double>> {
    auto sim = simulate_attention_plan(a, *cost, true, Link::nvlink);
    if (!sim) return sim.errors();
    return std::pair{sim->step_time_s, sim->step_time_s + sim->serial_kernel_s()};
  };
  ex.run = [&](const AttentionPlan& a, const std::string& which) -> Expected<PlanExecution> {
    // The first a.ranks ranks of the job run it; the others wait at the world's reductions.
    const bool member = comm.rank() < a.ranks;
    auto sub = comm.split(member ? 0 : 1, comm.rank());
    if (!sub) return sub.errors();
    std::vector<double> result{0, 0, 0};  // seconds (max over members), bytes mismatches, worst error
    std::vector<double> wrong_here{0};
    CheckResult mine;
    if (member) {
      const OwnedInputs inputs = make_attention_inputs(a, 1);
      auto run = run_attention_group(a, **sub, kernels, inputs, GroupRunOptions{true, true});
      if (!run) return runtime_error("world rank " + std::to_string(comm.rank()) + ", " + which + ": " + run.error_str());
      result[0] = run->seconds;
      result[1] = run->bytes_match() ? 0 : 1;
      // Correctness beside time: this rank's home results against the single-device reference.
      mine = run->check;
      wrong_here[0] = static_cast<double>(run->check.wrong);
      result[2] = mine.worst;
    }
    std::vector<double> worst = result;
    if (auto s = comm.all_reduce(std::span<double>(worst), ReduceOp::kMax); !s) return s.errors();
    if (auto s = comm.all_reduce(std::span<double>(wrong_here), ReduceOp::kSum); !s) return s.errors();
    PlanExecution pe{worst[0], worst[1] == 0, worst[2], wrong_here[0], ""};
    if (worst[2] > 1) {  // every rank knows; every rank names the same culprit
      auto place = worst_place(comm, mine);
      if (!place) return place.errors();
      pe.culprit = *place;
    }
    return pe;
  };
  return execute_attention_plans(in, plan, ex);
}

Evaluation evaluate_cuda(const EvalInput& in, const Plan& plan) {
  if (!in.device)
    return {"error", "cuda backend: this cpbench was built without CUDA (nvcc was not found when it was built)", {}, {}};
  if (const std::string why = in.device->unavailable(); !why.empty()) return {"error", "cuda backend: " + why, {}, {}};
  auto host = load_cost_model(in.cpu_preset);
  if (!host) return {"error", "cuda backend: " + host.error_str(), {}, {}};
  auto gpu = CostModel::create(in.cluster);
  if (!gpu) return {"error", "cuda backend: " + gpu.error_str(), {}, {}};
  const DeviceRuntime& device = *in.device;
  // Every rank of a plan is a thread of this process on the one GPU.
  PlanExecutor ex{"cuda", std::numeric_limits<int>::max(), nullptr, nullptr};
  // Predicted: the plan's kernels on the point's own GPU, one rank after the other (one device runs
  // them all). Budget: the reference check, on this host's cores.
  ex.price = [&](const AttentionPlan& a) -> Expected<std::pair<double, double>> {
    auto on_gpu = simulate_attention_plan(a, *gpu, true, Link::nvlink);
    if (!on_gpu) return on_gpu.errors();
    auto check = simulate_attention_plan(a, *host, true, Link::nvlink);
    if (!check) return check.errors();
    return std::pair{on_gpu->serial_kernel_s(), check->serial_kernel_s()};
  };
  ex.run = [&](const AttentionPlan& a, const std::string& which) -> Expected<PlanExecution> {
    const OwnedInputs inputs = make_attention_inputs(a, 1);
    std::vector<GroupRun> runs(static_cast<size_t>(a.ranks));
    const std::vector<Status> st = run_thread_ranks(
        static_cast<int>(a.ranks),
        [&](Communicator& c) -> Status {
          std::unique_ptr<AttentionKernels> kernels = device.make_kernels();
          auto run = run_attention_group(a, c, *kernels, inputs, GroupRunOptions{true, true});
          if (!run) return run.errors();
          runs[static_cast<size_t>(c.rank())] = std::move(*run);
          return ok_status();
        },
        Communicator::kDefaultTimeout, device.copy);
    for (size_t r = 0; r < st.size(); ++r)
      if (!st[r]) return runtime_error("rank " + std::to_string(r) + ", " + which + ": " + st[r].error_str());
    PlanExecution pe;
    int worst_rank = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      pe.seconds = std::max(pe.seconds, runs[r].seconds);
      pe.bytes_match = pe.bytes_match && runs[r].bytes_match();
      pe.wrong += static_cast<double>(runs[r].check.wrong);
      if (runs[r].check.worst > pe.worst) {
        pe.worst = runs[r].check.worst;
        worst_rank = static_cast<int>(r);
      }
    }
    if (pe.worst > 1) pe.culprit = culprit_line(worst_rank, runs[static_cast<size_t>(worst_rank)].check);
    return pe;
  };
  return execute_attention_plans(in, plan, ex);
}

Evaluation reconfigure_sim(const ClusterSpec& cluster, const ModelShape& model, const ReconfigurationPlan& plan);

}  // namespace

const std::vector<Backend>& backends() {
  static const std::vector<Backend> table = {
      {"sim", "the cluster model: memory, then the iteration's discrete-event simulation", false, false, false,
       evaluate_sim, reconfigure_sim},
      {"cpu",
       "the plans' CP attention executed on this job's ranks (MPI processes) with CPU kernels, checked against the "
       "reference, measured beside predicted",
       true, true, false, evaluate_cpu},
      {"cuda",
       "the plans' CP attention executed on this machine's GPU (every rank a thread with its own stream) with CUDA "
       "kernels, checked against the reference, measured beside predicted; under mpirun the points are spread over "
       "the ranks, each on its own GPU",
       false, true, true, evaluate_cuda},
  };
  return table;
}

const Backend* find_backend(const std::string& name) {
  for (const Backend& b : backends())
    if (name == b.name) return &b;
  return nullptr;
}

const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const Backend& b : backends()) n.push_back(b.name);
    return n;
  }();
  return names;
}

namespace {

Evaluation unknown_backend(const std::string& backend) {
  std::string known;
  for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  return {"error", "unknown backend '" + backend + "' (known: " + known + ")", {}, {}};
}

}  // namespace

Evaluation evaluate(const EvalInput& in, const Plan& plan, const std::string& backend) {
  if (const Backend* b = find_backend(backend)) return b->evaluate(in, plan);
  return unknown_backend(backend);
}

Evaluation evaluate_bound(const EvalInput& in, const Plan& plan, std::optional<MemoryEstimate>* memory,
                          bool replay_allocator) {
  if (plan.attention_only) return evaluate_attention_only(in, plan);  // exact, and cheap
  const MemoryEstimate mem = plan_memory(in, plan, replay_allocator);
  if (memory) *memory = mem;
  if (auto why = out_of_memory(in, mem); !why.empty()) return {"infeasible", why, {}, {}};
  auto cost = CostModel::create(in.cluster);
  if (!cost) return {"error", cost.error_str(), {}, {}};
  AttentionCostMemo local;  // as evaluate_sim
  AttentionCostMemo* memo = in.attention_memo ? in.attention_memo : &local;
  auto bound = iteration_bound(plan, in.model, *cost, memo);
  if (!bound) return {"error", bound.error_str(), {}, {}};
  Evaluation out{"ok", "", {{"step_time_lower_bound_s", bound->step_time_s}, {"peak_memory_gib", mem.total() / kGiB}}, {}};
  CpAttentionCache attention(*cost, plan.layout, memo);
  if (auto s = comm_metrics(in, plan, bound->comm_bytes, attention, out.metrics); !s) return {"error", s.error_str(), {}, {}};
  return out;
}

Evaluation evaluate_reconfiguration(const ClusterSpec& cluster, const ModelShape& model, const ReconfigurationPlan& plan,
                                    const std::string& backend) {
  const Backend* b = find_backend(backend);
  if (!b) return unknown_backend(backend);
  if (b->reconfigure) return b->reconfigure(cluster, model, plan);
  return {"infeasible",
          "the " + backend + " backend does not execute re-shards inside a run; `mpirun -np N cpbench reshard --from t,p,d --to t,p,d --model " +
              model.name + "` executes this change with real tensors",
          {},
          {}};
}

namespace {

// The sim backend's price of a layout change: the cluster's node size and its stack's
// ReconfigurationCosts.
Evaluation reconfigure_sim(const ClusterSpec& cluster, const ModelShape& model, const ReconfigurationPlan& plan) {
  Evaluation e;
  if (!cluster.reconfiguration.present) {
    e.status = "error";
    e.reason = "stack " + cluster.stack + " has no \"reconfiguration\" constants (state_store_GBps, restart_s)";
    return e;
  }
  const ReconfigurationCost c = price_reconfiguration(model, plan, cluster.reconfiguration);
  if (c.unrecoverable_bytes > 0) {
    char why[200];
    std::snprintf(why, sizeof why, "needs a checkpoint: %.3g GB of the target state have no surviving source (the lost ranks had no replica)",
                  c.unrecoverable_bytes / 1e9);
    e.status = "infeasible";
    e.reason = why;
    return e;
  }
  e.metrics = {{"params_b", params_exact(model, plan.request.max_seq) / 1e9},
               {"reconfigure_time_s", c.seconds},
               {"reconfigure_transfer_s", c.transfer_s},
               {"reconfigure_restart_s", c.restart_s},
               {"reshard_network_bytes", c.network_bytes},
               {"reshard_local_bytes", c.local_bytes},
               {"reshard_critical_bytes", c.critical_bytes}};
  return e;
}

}  // namespace

std::string plan_summary(const Plan& plan, const ClusterSpec& cluster) {
  const ParallelConfig& L = plan.layout;
  std::string s;
  char line[320];
  const size_t ranks = plan.micro_batches.size();
  const size_t m = ranks ? plan.micro_batches.front().size() : 0;
  std::string barrier;
  if (!plan.round_start.empty())
    barrier = ", one sequence per micro-batch, a barrier over the DP×CP ranks before each of " +
              std::to_string(std::count(plan.round_start.begin(), plan.round_start.end(), true)) + " rounds";
  std::snprintf(line, sizeof line, "    layout tp %lld pp %lld vp %lld cp %lld dp %lld, %s schedule, %zu micro-batches on each of %zu DP×CP ranks%s\n",
                static_cast<long long>(L.tp), static_cast<long long>(L.pp), static_cast<long long>(L.vp),
                static_cast<long long>(L.cp), static_cast<long long>(L.dp()), plan.pipeline_schedule.c_str(), m, ranks,
                barrier.c_str());
  s += line;
  std::set<int64_t> sizes;
  int64_t tokens_max = 0, tokens_min = -1;
  for (const auto& rank : plan.micro_batches)
    for (const auto& mb : rank) {
      if (mb.lengths.empty()) continue;
      sizes.insert(mb.cp);
      const int64_t t = mb.padded_tokens() / std::max<int64_t>(1, mb.cp);
      tokens_max = std::max(tokens_max, t);
      tokens_min = tokens_min < 0 ? t : std::min(tokens_min, t);
    }
  std::string groups;
  for (int64_t c : sizes) groups += (groups.empty() ? "" : ", ") + std::to_string(c);
  std::snprintf(line, sizeof line, "    CP group sizes {%s}; tokens per rank and micro-batch %lld..%lld\n", groups.c_str(),
                static_cast<long long>(std::max<int64_t>(0, tokens_min)), static_cast<long long>(tokens_max));
  s += line;
  if (plan.host_per_step != FrameworkHostWork{} || plan.host_per_micro_batch != FrameworkHostWork{}) {
    std::snprintf(line, sizeof line,
                  "    framework host work the device waits for: %.0f ops and %.0f syncs per step, %.0f ops and %.0f syncs "
                  "before each micro-batch's forward\n",
                  plan.host_per_step.ops, plan.host_per_step.syncs, plan.host_per_micro_batch.ops,
                  plan.host_per_micro_batch.syncs);
    s += line;
  }
  // The transfers derived from the plans (a dry run prices only its first batch's plan).
  const LinkBytes cp = *cp_bytes_per_layer(plan, [&](const PlanMicroBatch& mb) -> Expected<LinkBytes> {
    return attention_link_bytes(*mb.attention, backward_phases(*mb.attention),
                                cp_group_nodes(mb, plan.layout, cluster.gpus_per_node));
  });
  if (cp.nvlink + cp.network > 0) {
    std::snprintf(line, sizeof line, "    CP attention bytes of one layer (fwd+bwd, all micro-batches and DP×CP ranks of a stage): NVLink %.3g, network %.3g\n",
                  cp.nvlink, cp.network);
    s += line;
  }
  return s;
}

}  // namespace cpbench
