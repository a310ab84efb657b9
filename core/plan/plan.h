// plan.h — the Plan: what a strategy decides for one iteration, and nothing else. The simulator
// prices it; the runtime executes it; neither re-decides anything (DESIGN.md, "The Plan").
// Requires: parallel_config.h. Carries the step-level layout and, per DP×CP rank, its micro-batches:
// each names the CP group that runs it (an aligned power-of-two slice of the DP×CP ranks), so a
// static CP layout, Dynamic-CP's per-micro-batch groups and plain PTD-P (cp = 1) share one form.
// A micro-batch with cp > 1 carries the AttentionPlan its group runs, chosen by the strategy: the
// simulator prices exactly it and the runtime executes exactly it.
// Note: ranks with identical micro-batch lists are simulated once (symmetry); distinct ones each.
// Equal micro-batches share one AttentionPlan object (micro-batches compare it by identity).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/plan/attention_plan.h"
#include "core/plan/parallel_config.h"

namespace cpbench {

// Sequences packed into one micro-batch (THD: each attends only to itself), in tokens, and the CP
// group that runs it: DP×CP ranks [first_rank, first_rank + cp), each holding 1/cp of every
// sequence. An empty micro-batch is an idle slot (Dynamic-CP rounds leave ranks idle).
struct PlanMicroBatch {
  std::vector<int64_t> lengths;  // real tokens per sequence (what FLOPs and loss count)
  int64_t cp = 1;                // CP group size (a power of two for Dynamic-CP)
  int64_t first_rank = -1;       // the group's first DP×CP rank; -1 = the rank that holds it (cp = 1)
  int64_t pad_to = 1;            // every sequence is padded to a multiple of this for the kernels
  // cp > 1: one layer's attention on the group, per TP rank (its heads); null when cp = 1.
  std::shared_ptr<const AttentionPlan> attention;

  int64_t tokens() const;
  double sum_sq() const;              // Σ L²
  int64_t padded_length(size_t i) const;  // lengths[i] rounded up to a multiple of pad_to
  std::vector<int64_t> padded_lengths() const;
  int64_t padded_tokens() const;      // what the kernels and the CP slicing see
  // The fullest group member's tokens, its linear layers' rows: from the attention plan's homes
  // when there is one (fullest_home_tokens: DCP places tokens unevenly), else padded_tokens() / cp.
  int64_t rank_tokens() const;
  bool operator==(const PlanMicroBatch&) const = default;
};

// The nodes of the CP group of `mb` (members first_rank …, TP rank 0 of the first stage) under
// `layout`, numbered from 0 in the group's order.
std::vector<int> cp_group_nodes(const PlanMicroBatch& mb, const ParallelConfig& layout, int gpus_per_node);

// Host work of the framework outside the model that the compute stream waits for, the host having
// just synchronized with the device: eager ops issued (each the stack's host_op_us) and host
// synchronizations (each a device-to-host copy's round trip, pcie_latency_us).
struct FrameworkHostWork {
  double ops = 0;
  double syncs = 0;
  bool operator==(const FrameworkHostWork&) const = default;
};

struct Plan {
  ParallelConfig layout;
  std::string pipeline_schedule = "1f1b";  // "1f1b" | "interleaved" | "gpipe"
  // [DP×CP rank][k]: the micro-batches each pipeline runs, in order; layout.dp()·layout.cp lists
  // (Dynamic-CP plans set layout.cp = 1: the CP size is per micro-batch). Every rank has the same
  // count; the members of a micro-batch's CP group hold the same micro-batch at the same k.
  std::vector<std::vector<PlanMicroBatch>> micro_batches;
  // Megatron main's Dynamic-CP: a barrier over the DP×CP ranks after every round, so a round's
  // first micro-batch starts on a stage only when every DP×CP rank of that stage is ready for it.
  // round_start[k]: micro-batch k opens a round; empty: no barrier (every other executor).
  std::vector<bool> round_start;
  // Megatron main's hybrid CP (strategies/dynamic_cp.cpp), zero for every other executor: its data
  // wrapper's rerouting once per step, after the gradient buffer is zeroed, on every rank (its
  // all-to-alls join the ranks: the most any rank does), and each sequence's fetch, broadcasts and
  // loss bookkeeping before its forward, on the first stage.
  FrameworkHostWork host_per_step, host_per_micro_batch;
  // Every sequence's attention mask (the workload's). The iteration strategies run decoder
  // attention: causal, or a sparser mask computed over the causal envelope (TransformerEngine
  // cannot skip its masked work), so every mask here is priced as causal and executed as itself.
  MaskSpec mask;
  // An attention micro-benchmark (DCP, SOSP'25 §6.2): the plan is one layer's attention core of
  // each micro-batch on its CP group, forward and backward, and nothing else — no linear layers,
  // pipeline, gradient reduction or optimizer. Backends price or run exactly that.
  bool attention_only = false;
};

}  // namespace cpbench
