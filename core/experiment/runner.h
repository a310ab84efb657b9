// runner.h — runs the points of a spec: threads within a process (--jobs), points spread over MPI
// ranks when launched under mpirun; rank 0 appends each finished point to the journal and writes
// results.json at the start and the end (journal.h), so writing costs O(points) over a sweep.
// Requires: the caller's world Communicator when running on several ranks (apps/ makes it).
// Note: a strategy or backend that throws turns its point into status "error"; the sweep goes on.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "core/experiment/results.h"
#include "core/experiment/spec.h"
#include "core/plan/plan.h"
#include "core/reshard/reconfigure.h"
#include "core/workload/batch.h"
#include "core/runtime/attention_kernels.h"
#include "core/runtime/communicator.h"
#include "core/runtime/device_runtime.h"
#include "core/sim/memory.h"

namespace cpbench {

struct RunOptions {
  std::filesystem::path out_dir;  // results go to out_dir/<spec name>/
  int jobs = 1;                   // worker threads per process
  // --resume: the points an earlier run of the same spec finished (load_finished_points, read by
  // the caller so that an unusable file is bad input), kept and not run again; empty = none.
  PointResults finished;
  bool trace = false;             // write a timeline per point under out_dir/<name>/traces/
  std::string backend = "sim";    // where plans are evaluated (core/evaluate/evaluate.h)
  std::filesystem::path experiments_dir;  // presets (the cpu backend's hardware/cpu_local.json)
  double cpu_budget_s = 60;       // cpu backend: plans predicted slower than this are not run
  // Set (to a signal number) by the caller's SIGINT/SIGTERM handler: no new point is started, the
  // points in progress finish, and results.json is written with every finished point.
  const std::atomic<int>* stop = nullptr;
  // A point still running after this many seconds with nothing printed is named on stderr with
  // its elapsed time, and again every as many seconds (rank 0's points); 0 = never.
  double progress_every_s = 10;
  // The job's ranks (the MPI world, made by the caller); null: this process alone. Points are
  // spread over them (the cpu backend runs each on all of them) and rank 0 writes the results.
  Communicator* world = nullptr;
  // The kernels an executing backend runs on this rank; null: the backend's own (tests plant
  // faulty ones here).
  AttentionKernels* kernels = nullptr;
  // The GPU runtime of a backend that needs devices (cuda): null when this binary has none.
  const DeviceRuntime* device = nullptr;
};

// Where a point's plan is evaluated (a row of core/evaluate/evaluate.h's backend table) and what
// an executing backend needs.
struct PointBackend {
  std::string name = "sim";
  std::filesystem::path experiments_dir;  // presets (the cpu backend's hardware/cpu_local.json)
  double cpu_budget_s = 60;               // cpu backend: plans predicted slower than this are not run
  Communicator* world = nullptr;          // the job's ranks, each evaluating the point; null: this process
  AttentionKernels* kernels = nullptr;    // an executing backend's kernels; null: its own
  const DeviceRuntime* device = nullptr;  // the cuda backend's runtime; null: none built in
};

// A point up to its plan: its batch and the strategy's outcome, or why it got no further (a
// layout that cannot run is infeasible, an unknown strategy an error). The planner is timed: its
// latency is a wall-clock timing, not a metric. May throw (the caller decides what that means).
struct PlannedPoint {
  std::string status = "ok", reason;
  GlobalBatch batch;
  Plan plan;
  std::optional<double> plan_ms;              // set when the strategy ran
  std::optional<ReconfigurationPlan> change;  // a reconfiguration point's plan (then `plan` is empty)
  // The plan's memory on the point's cluster, once estimated (a frontier's bound): the sim
  // backend prices the plan with it rather than again.
  std::optional<MemoryEstimate> memory;
};

// The point planned for `batch` (by default the workload's first batch), as run_point plans it:
// the one way a point becomes a Plan, for `run` and for the commands that execute one point
// (`cpbench exec`, `cpbench validate`).
PlannedPoint plan_point(const PointConfig& point, std::optional<GlobalBatch> batch = std::nullopt);

// Evaluates one point: checks the layout, samples the batch, asks the strategy for its Plan
// (timing the planner into the result's timings) and evaluates the plan on `backend`.
PointResult run_point(const PointConfig& point, const std::filesystem::path& trace_path,
                      const PointBackend& backend = {});

// `cpbench run --dry-run`: the point's plan summary and the sim backend's predicted step time, or
// why it cannot run; nothing is executed or written.
std::string describe_point(const PointConfig& point);

// Runs every unfinished point. A spec with "frontier" runs as a frontier search instead (rank 0,
// threads; points its frontier dominates get status "pruned"; not resumable). On rank 0 returns all results (also written to disk); other MPI
// ranks return their own share. Errors are I/O failures, never a failing point. After a stop,
// the points not run are empty slots (rank 0 has written the others).
Expected<PointResults> run_experiment(const Spec& spec, const RunOptions& options);

}  // namespace cpbench
