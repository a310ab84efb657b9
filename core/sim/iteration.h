// iteration.h — lowers a Plan to the task graph of one training iteration and simulates it:
// per pipeline stage the forward/backward of every micro-batch (TP collectives inside, blocking),
// pipeline sends, data-parallel gradient reduction (overlapped or not), the optimizer step.
// Micro-batches with cp > 1 price their attention core through the AttentionPlan of their group
// (cp_attention.h), CP transfers and their exposed part included.
// Requires: a Plan whose layout passed check_parallel_config, one micro-batch list per DP×CP rank,
// all of one length that suits the schedule. Symmetry: TP ranks of a stage and DP×CP ranks with
// identical lists are one simulated pipeline; distinct ones are simulated each; the members of a
// CP group simulated apart start each op of their shared micro-batch together (a collective), as
// do all ranks' forwards of a round's first micro-batch where plan.round_start marks one;
// all join the DP gradient reduction.
// Note: returns an Error (not a crash) when the schedule cannot take the plan (m % p for interleaving).
#pragma once

#include <filesystem>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include "core/model/model.h"
#include "core/plan/plan.h"
#include "core/sim/cp_attention.h"

namespace cpbench {

struct IterationResult {
  double step_time_s = 0;
  double bubble_fraction = 0;  // idle (not compute, exposed comm or host) / step, mean over DP×CP ranks and stages
  double exposed_comm_s = 0;   // mean over devices: blocking TP collectives + waits on transfers
  double exposed_cp_comm_s = 0;  // of which: attention waiting on CP transfers (mean over ranks)
  double exposed_host_s = 0;   // mean over devices: the compute stream waiting for the host to issue kernels
  double step_framework_s = 0;  // mean over devices: zeroing the gradient buffer and the optimizer step
  double contention_s = 0;     // mean over devices: compute slowed by communication kernels beside it
  double kernels = 0;          // mean over devices: GPU kernels issued per iteration (excluding optimizer)
  double compute_imbalance = 1;  // max / mean compute time over the DP×CP ranks and stages
  // Bytes one GPU sends per iteration in TP collectives, pipeline sends and the DP gradient
  // reduction (and parameter all-gather), Megatron's step-end all-reduces (tied embedding,
  // sequence-parallel norms, gradient norm), by link, mean over GPUs (collective_sent_bytes: ring
  // volumes). CP attention transfers are not included (the evaluation adds them from the plan).
  LinkBytes comm_bytes;
  // Activation bytes one GPU copies to the host and back per iteration (offloading), mean over GPUs.
  double offload_bytes = 0;
  size_t tasks = 0;
  size_t simulated_pipelines = 0;  // distinct DP×CP rank lists simulated (symmetry)
};

// Micro-batches with cp > 1 are priced through the AttentionPlan they carry; one without is an
// Error (a strategy bug). `memo`, when given, holds attention costs already simulated on `cost`
// and takes the new ones (cp_attention.h).
Expected<IterationResult> simulate_iteration(const Plan& plan, const ModelShape& model, const CostModel& cost,
                                             const std::filesystem::path& trace_path = {},
                                             AttentionCostMemo* memo = nullptr);

// What the simulation of `plan` would give, known without simulating it (a search prunes by
// it): a step time it cannot beat — on every stage its ops' compute and blocking communication
// back to back, after the forwards that feed its first op and before the backwards its last op
// feeds, plus the first stage's last gradient bucket, step-end all-reduces, optimizer (with the
// gradient norm's all-reduce) and parameter all-gather (sends,
// contention and offload copies only add to it) — and exactly the bytes it counts (comm_bytes).
// Errors as simulate_iteration.
struct IterationBound {
  double step_time_s = 0;
  LinkBytes comm_bytes;  // as IterationResult::comm_bytes
};
Expected<IterationBound> iteration_bound(const Plan& plan, const ModelShape& model, const CostModel& cost,
                                         AttentionCostMemo* memo = nullptr);

}  // namespace cpbench
