// layer_cost.h — seconds one tensor-parallel rank spends on one transformer layer (and on the
// embedding and output layers) for one micro-batch, forward and backward, priced by the cost model.
// Requires: the model shape, the layout (tp, sequence parallelism, recompute, attention kernel)
// and the micro-batch's sequence lengths. TP collectives are blocking in Megatron's PTD-P (no TP
// overlap), so they are returned apart from compute but run on the compute stream's critical path.
// Note: GEMM shapes are Megatron's column/row-parallel splits; element-wise traffic is counted in
// bytes of 16-bit activations (fp32 where the kernel keeps fp32, e.g. softmax statistics).
#pragma once

#include "core/cost/cost_model.h"
#include "core/model/model.h"
#include "core/plan/plan.h"

namespace cpbench {

struct PassCost {
  double compute_s = 0;  // GEMMs, attention, element-wise kernels
  double tp_comm_s = 0;  // blocking TP collectives
  double cp_wait_s = 0;  // attention waiting on CP transfers it could not hide
  LinkBytes tp_bytes;    // what the TP collectives send from this GPU
  double total() const { return compute_s + tp_comm_s + cp_wait_s; }
};

// One layer's attention core on one rank of a CP group, as the attention-plan simulation prices
// it (core/sim/attention_sim.h): the makespan of the pass and the part spent waiting on transfers.
struct AttentionCost {
  double fwd_s = 0, fwd_wait_s = 0;
  double bwd_s = 0, bwd_wait_s = 0;
};

struct LayerCost {
  PassCost forward;
  PassCost backward;  // including the recomputation the layout asks for
};

// One transformer layer on one rank of the micro-batch's CP group: linear layers and element-wise
// kernels see padded_tokens / cp tokens. The attention core is `attention` when given (required
// for cp > 1), else one flash (or unfused) call over the micro-batch's sequences.
LayerCost layer_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                     const PlanMicroBatch& mb, const AttentionCost* attention = nullptr);
// Word (and position) embedding lookup on the first stage.
LayerCost embedding_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                         const PlanMicroBatch& mb);
// Final norm, vocabulary-parallel logits GEMM and cross-entropy on the last stage.
LayerCost output_layer_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                            const PlanMicroBatch& mb);

// Where a group of `size` ranks lands, when consecutive members are `stride` ranks apart in
// Megatron's rank order (tp fastest, then cp, dp, pp).
GroupPlacement placement(int64_t size, int64_t stride, int64_t gpus_per_node);

}  // namespace cpbench
