// evaluate.h — the one way a Plan is priced: evaluate(input, plan, backend). Strategies decide
// (core/strategies/strategy.h), backends evaluate; a solver or search compares candidate plans
// only through this interface.
// Requires: a Plan from a strategy (check_parallel_config passed), the cluster, model and batch
// it was made for. Backends are rows of one table (backends(), below):
//   "sim": the memory model and the discrete-event simulation of the iteration on the cluster
//          model (core/sim);
//   "cpu": executes the plan's context-parallel attention on the job's ranks (EvalInput::world:
//          the MPI ranks of the job, or this process alone; core/runtime's executor with CPU
//          kernels; every rank calls evaluate together), one layer forward and backward per
//          distinct AttentionPlan, checks every rank's results against the single-device
//          reference and its bytes against the plan's, and reports the measured time beside the
//          same plans simulated on this machine's preset (cpu_preset). A plan that computes a
//          wrong value is an error naming the plan, the rank and the tensor. Plans it cannot run
//          here (more ranks than the job has, or predicted with their check slower than
//          cpu_budget_s) are counted and named, not run; a plan with no CP attention has
//          nothing for it to execute (infeasible, says so).
//   "cuda": the same on one GPU (EvalInput::device, the runtime a CUDA build passes): each
//          AttentionPlan on plan.ranks thread ranks of this process sharing the device, our CUDA
//          kernels on a stream per rank, transfers as device copies; checked against the
//          reference (on the host, so the same cpu_budget_s on its predicted time skips plans),
//          measured beside the plan simulated on the point's own cluster, all ranks' kernels
//          one after the other (what one GPU running every rank does). Without a device, or in a
//          build without CUDA, every point is an error that says so (the CLI refuses first).
// Note: every backend reports the workload's own metrics (parameters, model FLOPs by the spec's
// definition, tokens, long-token share) and the plan's padding beside its measured ones.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/hardware/hardware.h"
#include "core/model/model.h"
#include "core/plan/plan.h"
#include "core/reshard/reconfigure.h"
#include "core/workload/batch.h"

namespace cpbench {

class AttentionCostMemo;  // core/sim/cp_attention.h
class AttentionKernels;   // core/runtime/attention_kernels.h
class Communicator;       // core/runtime/communicator.h
struct DeviceRuntime;     // core/runtime/device_runtime.h
struct MemoryEstimate;    // core/sim/memory.h

// How a point counts model FLOPs; papers differ, and a reproduction must use the paper's own
// (core/model/model_flops.h): "sc21", "megatron" or "kwai".
struct EvalInput {
  const ClusterSpec& cluster;
  const ModelShape& model;
  const GlobalBatch& batch;
  std::string flops_definition;
  std::filesystem::path trace_path;  // where the sim backend writes a timeline; empty = none
  // The cpu backend: the hardware preset of this machine (its default stack) that predicts the
  // CPU execution, and the predicted seconds above which a plan is not executed.
  std::filesystem::path cpu_preset;
  double cpu_budget_s = 60;
  // The sim backend: attention costs already simulated on this cluster, shared by the evaluations
  // of one caller that prices many plans of one batch (a search); null: each evaluation simulates
  // its own. The results are the same either way.
  AttentionCostMemo* attention_memo = nullptr;
  // The sim backend: this plan's memory, already estimated on this cluster (evaluate_bound's, for a
  // search that simulates what it bounded); null: estimated here. The results are the same.
  const MemoryEstimate* memory = nullptr;
  // Executing backends: the job's ranks, every one of which calls evaluate with the point (null:
  // this process alone), and the kernels a rank runs (null: the backend's own).
  Communicator* world = nullptr;
  AttentionKernels* kernels = nullptr;
  // The cuda backend: the GPU runtime this binary was built with (null: none, a CPU-only build).
  const DeviceRuntime* device = nullptr;
};

struct Evaluation {
  std::string status = "ok";  // "ok" | "infeasible" (out of memory) | "error" (a backend failure)
  std::string reason;         // why not ok; for ok, a note (what a backend could not do)
  std::map<std::string, double> metrics;
  std::map<std::string, double> timings;  // wall-clock measurements (never compared)
};

// One row per backend: evaluate() dispatches through it, the CLI lists and checks it, the runner
// reads how a backend's points are spread, docs/backends.md describes it. A new backend is one
// evaluate function and one row.
struct Backend {
  const char* name;
  const char* help;          // one line: what it does
  bool every_rank_together;  // all the job's ranks evaluate each point together (its plans run across
                             // them, on the main thread); otherwise points are spread over ranks and threads
  bool executes;             // runs the plan and measures it, beside the model's prediction
  bool needs_devices;        // needs GPUs
  Evaluation (*evaluate)(const EvalInput&, const Plan&);
  // Prices (or runs) a change of a running job's layout; null when the backend cannot inside a run.
  Evaluation (*reconfigure)(const ClusterSpec&, const ModelShape&, const ReconfigurationPlan&) = nullptr;
};
const std::vector<Backend>& backends();
const Backend* find_backend(const std::string& name);  // null when unknown
// The backends' names, in the table's order.
const std::vector<std::string>& backend_names();

Evaluation evaluate(const EvalInput& in, const Plan& plan, const std::string& backend = "sim");

// What the sim backend can say without simulating: "infeasible" when the plan does not fit in
// memory (the same check and reason as evaluate's), else metrics "step_time_lower_bound_s" (a
// step time its simulation cannot beat: iteration_bound, core/sim/iteration.h) and, exactly as
// evaluate reports them, "peak_memory_gib" and the comm_bytes_* metrics. A search prunes by them
// and simulates only what could still rank. `memory`, when given, receives the plan's memory
// estimate where one was made, for EvalInput::memory of the plan's simulation. replay_allocator
// false: the memory is the walk's alone, without a replayed allocator's fragmentation (a lower
// bound on evaluate's: "infeasible" only when even that does not fit; a search that simulates
// before it ranks learns the rest there).
Evaluation evaluate_bound(const EvalInput& in, const Plan& plan, std::optional<MemoryEstimate>* memory = nullptr,
                          bool replay_allocator = true);

// A change of a running job's layout (core/reshard/reconfigure.h), priced by the sim backend with
// the cluster's node size and its stack's ReconfigurationCosts: metrics reconfigure_time_s (and
// its parts) and the plan's bytes. A plan that leaves target state without a source is
// "infeasible" (it needs a checkpoint); a stack without reconfiguration constants is an "error".
// Dispatched through the backend's row (Backend::reconfigure); a backend without one — the cpu
// backend does not execute re-shards inside a run (`mpirun … cpbench reshard` does, with real
// tensors) — gives "infeasible", saying so; an unknown backend is an "error".
Evaluation evaluate_reconfiguration(const ClusterSpec& cluster, const ModelShape& model, const ReconfigurationPlan& plan,
                                    const std::string& backend = "sim");

// A few lines describing a plan for `cpbench run --dry-run`: layout, schedule, micro-batches per
// rank, CP group sizes, and the attention bytes per layer by link class.
std::string plan_summary(const Plan& plan, const ClusterSpec& cluster);

}  // namespace cpbench
