// dcp.h — DCP (Jiang et al., SOSP'25; references/dcp.md): blockwise placement of attention data
// and computation by hypergraph partitioning, as an AttentionPlan the executors run and the
// simulator prices.
// Requires: core/cost (block weights from the target preset's cost model), core/plan
// (AttentionPlan), hypergraph.h (Zoltan; MPI initialised).
// Note: the algorithm, as built here:
//   1. Blocks: every sequence in token blocks of `block_tokens` (the last one shorter), each cut
//      into `head_blocks` head blocks (K/V groups and their query heads; DCP's default: one K/V
//      group each); a computation block for every (Q block, KV block) pair of a sequence and head
//      block whose mask tile holds an allowed pair. Q, KV, O and LSE of a data block stay
//      together (its home, a slice with its head range).
//   2. Hypergraph: a vertex per token block (memory: its Q, K, V, O bytes and fp32 LSE) and per
//      computation block (compute: its forward + backward seconds on the preset); per token block
//      a net over it and the blocks reading its Q (and writing its O) and one over it and the
//      blocks reading its KV, weighted by the bytes one remote reader costs forward and backward.
//      km1 of a placement is then the bytes it moves.
//   3. Placement in two levels: nodes (compute tolerance ×4, as DCP loosens it; memory such that
//      each node's GPUs can meet the GPU cap), then the GPUs of each node: memory within
//      (1 + eps_mem) of the global mean, compute within (1 + eps_comp) of the node's — so up to
//      (1 + 4·eps_comp)(1 + eps_comp) of the global mean (DcpResult reports both).
//   4. Stages, as DCP's pipeline generator builds them: stage 0 holds every block whose inputs are
//      home; the other blocks fill the `divisions` stages after it (DCP_N_STAGES). In each stage
//      the rank with the least work selected in the stage takes its largest block whose fetches
//      fit — an input comes from a GPU of the rank's node that held it before the stage, else from
//      one on another node, the least loaded; only a sender's inter-node bytes are budgeted, at
//      1.2 × the inter-node volume / ranks / divisions — and the stage ends when that rank can
//      take none; then each rank fetches what fits of its remaining blocks' inputs (prefetch,
//      NVLink copies unbudgeted). The last stage takes the rest. A stage's transfers are posted
//      before the previous stage's compute. Partial outputs of blocks
//      computed away from their Q's home go home after the last stage and merge there (LSE rule),
//      as DCP's executor sends them; with early_outputs as soon as they are final — with stage
//      k + 2's transfers when the rank's last tile on them ran in stage k.
//   5. Two-phase communication: an input that GPUs of one node fetch from one sender in a stage
//      crosses the network once — to the one of them receiving least across nodes in the stage,
//      which relays it to the others once it arrives (AttnTransfer::relay); later stages copy it
//      from a GPU of the node over NVLink. The budgets count each fetch (DCP merges them after).
//   6. Backward (AttentionPlan::backward): the forward's placement, its divisions scheduled again
//      by step 4 with the backward's inputs (a Q block brings its dO and final O and LSE: three
//      times Q's bytes, so budgets and choices differ from the forward's), as DCP's compiler runs
//      its scheduler again on the backward workload. Each rank sums its dQ and dK/dV partials of
//      blocks away from home over its stages and sends them straight home after the last stage,
//      as DCP's executor does (not overlapped with the kernels); with early_outputs in the phase
//      after its last tile on the block.
// Not yet: padding sequences to the block size (DCP pads each to a multiple of B).
#pragma once

#include <cstdint>
#include <vector>

#include "core/common/expected.h"
#include "core/cost/cost_model.h"
#include <string>

#include "core/model/model.h"
#include "core/plan/attention_plan.h"
#include "core/plan/parallel_config.h"
#include "core/strategies/hypergraph.h"
#include "core/strategies/strategy.h"
#include "core/workload/mask.h"

namespace cpbench {

// The shape (seq_lengths, mask, heads_q, heads_kv, head_dim; head_dim 128 unless set), and how to
// place it.
struct DcpRequest : AttentionShape {
  DcpRequest() { head_dim = 128; }
  int32_t value_bytes = 2;  // 16-bit values on the wire (LSE fp32)
  int32_t ranks = 1;
  int32_t gpus_per_node = 1;  // ranks fill nodes in order
  int64_t block_tokens = 1024;
  // Head blocks per token block: each holds heads_kv / head_blocks K/V groups and their query
  // heads; 0 = one per K/V group (DCP's default head block size of 1); 1 = all heads together.
  int32_t head_blocks = 0;
  int32_t divisions = 4;  // stages with communication after the local stage 0 (DCP_N_STAGES)
  double eps_mem = 0.2, eps_comp = 0.1;
  bool early_outputs = false;  // outputs and gradients leave inside the divisions (not DCP's executor)
  // Each stage's exchange as DCP's executor runs it: all-to-alls over all ranks
  // (AttentionPlan::collective_exchange); false: point-to-point sends.
  bool all_to_all = true;
  bool fused_stages = true;  // one blockwise kernel call per stage and device; false: one per tile
};

struct DcpResult {
  AttentionPlan plan;
  double km1_bytes = 0;  // the placement's communication volume (forward + backward), as partitioned
  // The fullest GPU's memory and compute over the mean: within 1 + eps_mem and, across nodes,
  // (1 + 4·eps_comp)(1 + eps_comp) by design (DCP loosens compute between nodes); more when blocks
  // are too coarse to balance (the partitioner then keeps the least-imbalanced seed).
  double memory_over_mean = 0, compute_over_mean = 0;
  int64_t data_blocks = 0, compute_blocks = 0;
};

// DCP's block-size heuristic: start at the power of two ≥ the longest sequence and halve while a
// longest-processing-time packing of the token blocks over `ranks` leaves the fullest rank more
// than (1 + eps_mem) × the mean, not below 256.
int64_t dcp_block_size(const std::vector<int64_t>& seq_lengths, int32_t ranks, double eps_mem);

// Steps 1-2 alone: the hypergraph plan_dcp partitions (token blocks first, then computation
// blocks), for comparing partitioners on it (bench/dcp_bench.cpp).
Expected<Hypergraph> dcp_hypergraph(const DcpRequest& request, const CostModel& cost);

// Errors: sizes that cannot plan (no ranks, block size < 1), a partitioner failure.
Expected<DcpResult> plan_dcp(const DcpRequest& request, const CostModel& cost);

// The request for `lengths` on a CP group of `ranks`, `ranks_per_node` of them per node, with one
// TP rank's heads of `model` under `layout` (its dcp_* settings; block size 0: dcp_block_size's
// heuristic; 16-bit values for bf16/fp16).
DcpRequest dcp_request(const std::vector<int64_t>& lengths, const MaskSpec& mask, const ModelShape& model,
                       const ParallelConfig& layout, int32_t ranks, int32_t ranks_per_node);

// One line for a result's note: blocks, km1, stages, the fullest GPU against the mean.
std::string dcp_note(const DcpRequest& request, const DcpResult& result);

// ---- the strategy --------------------------------------------------------------------------------
// DCP end to end (SOSP'25 §7.2): the packing of plan_packing, each CP group's attention placed by
// DCP's blockwise planner (parallel.dcp_*) instead of a static layout, no sequence padded; every
// other op runs as Megatron's on the tokens each rank holds (the fullest rank's count:
// PlanMicroBatch::rank_tokens, from the plan's homes). Needs MPI initialised (Zoltan).
PlanOutcome plan_dcp_training(const StrategyInput& in);

}  // namespace cpbench
