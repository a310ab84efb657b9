// layer_cost.h — one transformer layer (and the embedding and output layers) of one micro-batch
// on one tensor-parallel rank, lowered to its ops and priced: GEMMs, the attention core,
// element-wise kernels, TP collectives and the wait on CP transfers, each an op on a named stream
// (compute, tp, cp) with the ops it reads, the GPU kernels the host launches for it and the bytes
// it sends. Overlap is the ops' dependency structure: Megatron's blocking TP collectives are inputs
// of the next GEMM; with async_tensor_model_parallel_allreduce the backward's input re-gather and
// gradient reduction run beside the dgrad / wgrad GEMMs, slowed by contention (engine.h).
// Requires: the model shape, the layout (tp, sequence parallelism, recompute, attention kernel,
// fusion) and the micro-batch's sequence lengths; for cp > 1 the attention core's cost from its
// AttentionPlan (cp_attention.h).
// Note: GEMM shapes are Megatron's column/row-parallel splits; element-wise traffic is counted in
// bytes of 16-bit activations (fp32 where the kernel keeps fp32, e.g. softmax statistics).
// Pricing runs the ops through the discrete-event engine with a host stream that issues every
// kernel (EfficiencyParams::host_op_us) and runs each module call's Python (host_module_us), so
// short kernels become host-bound: price_ops.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/cost/cost_model.h"
#include "core/model/model.h"
#include "core/plan/plan.h"
#include "core/sim/engine.h"
#include "core/sim/streams.h"

namespace cpbench {

// ZeRO-3's dtype rule (FSDP and DeepSpeed alike): parameters are all-gathered in 16 bits,
// gradients reduce-scattered in the gradient dtype (ParallelConfig::grad_bytes). Bytes per element
// of a ZeRO-3 collective of `kind`; every ZeRO-3 collective, copy and byte count reads it.
inline double zero3_element_bytes(Collective kind, const ParallelConfig& L) {
  return kind == Collective::all_gather ? 2.0 : L.grad_bytes();
}

// The modules of a transformer layer whose hooks a framework runs (Megatron's GPT layer, as
// Megatron-DeepSpeed builds it), in forward order; an op belongs to the one it runs in, an
// element-wise op between two linears to the module whose hook fired last before it.
enum class LayerModule : int8_t { none = -1, norm1, qkv, core_attention, proj, norm2, fc1, fc2 };

struct LayerOp {
  std::string name;  // "qkv", "attention", "norm1", "tp all-gather", ...
  OpStream stream = OpStream::compute;
  double duration_s = 0;
  int kernels = 1;        // GPU kernels the host issues for it
  bool sm_bound = true;   // compute: bound by the SMs (GEMM, attention) or by HBM (element-wise)
  std::vector<int> deps;  // earlier ops of the same list whose results it needs
  LinkBytes bytes;        // communication: what this GPU sends
  // The op as one kernel of a family `cpbench calibrate` measures (core/cost/calibrate.h: "gemm"
  // m, n, k; "memory_bound" bytes; "flash_attention_fwd"/"_bwd" pairs, heads, head_dim,
  // mean_len), so that a device can run it and compare (layer_ops_csv); empty when it is not one
  // (communication, waits, TransformerEngine's chunked GEMMs, an unfused or CP attention core).
  std::string kernel;
  std::map<std::string, double> shape;
  double hbm_bytes = 0;  // a copy off the compute stream: what it reads and writes in HBM
  LayerModule module = LayerModule::none;
  bool recomputed = false;  // part of the forward run again inside the backward (full recompute)
  // The first op that issues a kernel in a framework module's forward call (a layer's linears
  // and attention core, the embedding): the host runs the module's Python
  // (EfficiencyParams::host_module_us) before issuing it.
  bool module_call = false;
};
using OpList = std::vector<LayerOp>;

struct LayerOps {
  OpList forward;
  OpList backward;  // including the recomputation the layout asks for
};

// What a pass costs one rank, from price_ops.
struct PassCost {
  double compute_s = 0;  // GEMMs, attention, element-wise kernels (stretched by contention)
  double tp_comm_s = 0;  // exposed TP collectives: the compute stream waiting for them
  double cp_wait_s = 0;  // attention waiting on CP transfers it could not hide
  double dp_comm_s = 0;  // ZeRO-3: the next layer waiting for its parameters' all-gather
  double host_s = 0;     // the compute stream waiting for the host to issue kernels
  double sm_bound_s = 0;     // of compute_s: GEMMs and attention (the rest is HBM-bound)
  double contention_s = 0;   // of compute_s: slowdown from communication kernels beside it
  int kernels = 0;           // GPU kernels issued
  LinkBytes tp_bytes;        // what the TP collectives send from this GPU
  LinkBytes dp_bytes;        // ZeRO-3: what its parameter all-gathers and gradient reduce-scatters send
  double total() const { return compute_s + tp_comm_s + cp_wait_s + dp_comm_s + host_s; }
  PassCost& operator+=(const PassCost& o);
  PassCost operator*(double k) const;
};

// One layer's attention core on one rank of a CP group, as the attention-plan simulation prices
// it (core/sim/attention_sim.h): the makespan of the pass and the part spent waiting on transfers.
struct AttentionCost {
  double fwd_s = 0, fwd_wait_s = 0;
  double bwd_s = 0, bwd_wait_s = 0;
  // The part of bwd_wait_s after the last backward kernel: gradient partials (dK/dV, dQ) still on
  // their way home — what Kwai's CP overlaps with the Q half of the QKV backward (cp_comm_overlap).
  double bwd_tail_s = 0;
  // What the group's ranks send, forward and backward, all of them together, by link.
  LinkBytes bytes;
};

// One transformer layer on one rank of the micro-batch's CP group: linear layers and element-wise
// kernels see padded_tokens / cp tokens. The attention core is `attention` when given (required
// for cp > 1), else one flash (or unfused) call over the micro-batch's sequences.
// Under ZeRO-3 each copy all-gathers the next layer's parameters ahead of its forward and, when
// parameters are resharded after the forward, ahead of its backward; `gather` sets how many
// elements (this TP rank's share) instead, where DeepSpeed's coordinator decides
// (deepspeed_zero3.h); negative: the whole layer. `bucket_copied`: of the layer's gradients, the
// elements DeepSpeed (0.6+) copies into its reduce bucket (negative: all).
struct Zero3Gather {
  double forward = -1, backward = -1, bucket_copied = -1;
};
// DeepSpeed (0.6+): the HBM bytes of a reduce bucket's copies, `copied` of its gradient elements
// copied into the contiguous bucket (read 16-bit, written in the gradient dtype) and all
// `reduced` re-interleaved by rank for the reduce-scatter (read and written).
inline double deepspeed_bucket_copy_bytes(double copied, double reduced, double grad_bytes) {
  return (2 + grad_bytes) * copied + 2 * grad_bytes * reduced;
}
LayerOps lower_layer(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                     const PlanMicroBatch& mb, const AttentionCost* attention = nullptr, Zero3Gather gather = {});

// Word (and position) embedding lookup on the first stage.
LayerOps lower_embedding(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                         const PlanMicroBatch& mb);
// Vocabulary-parallel logits GEMM and the loss (layout.loss) on the last stage.
LayerOps lower_output_layer(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                            const PlanMicroBatch& mb);

// `repeats` copies of `ops` run back to back on one rank, each copy's first ops reading the
// previous copy's last op off the dp stream (a chunk of identical layers), with the host issuing every kernel in
// order. Communication ops hold cost.params().comm_sm_fraction of the SMs and an HBM share from
// their bytes while they run. Simulated for one and two copies; further copies repeat the second
// (the graph is periodic: copy k + 1 starts where copy k ends, the host no further ahead).
PassCost price_ops(const CostModel& cost, const OpList& ops, double repeats = 1);

// price_ops for any number of copies: the first copy and each further one (two engine runs).
struct RepeatedPass {
  PassCost first, next;
  PassCost times(double repeats) const;  // first + (repeats − 1)·next; 0 copies cost nothing
};
RepeatedPass price_repeated(const CostModel& cost, const OpList& ops);

// The task graph price_ops simulates: `copies` copies of `ops` on `device` (streams: compute 0,
// tp 1, cp 2, dp 3, host 4), the host tasks of kind 'o'.
void append_ops(TaskGraph& graph, const CostModel& cost, const OpList& ops, int copies, int device = 0);

// One layer's forward and backward ops that are single kernels of a measured family, as the CSV
// `cpbench calibrate` reads (`op,key=value;…,time_s`), each with the model's time for it and a
// comment line before it naming the op ("# forward qkv"): what scripts/measure_gpu_ops.py
// --replay runs on a device, in stream order, and `cpbench calibrate --check` compares.
std::string layer_ops_csv(const CostModel& cost, const LayerOps& ops);

// The zero-length op a ZeRO-3 layer ends with: it waits for the next layer's parameters, so its
// wait is the exposed all-gather (PassCost::dp_comm_s).
inline constexpr const char* kZero3WaitOp = "wait for next layer's parameters";
// FSDP2 (zero3_sharding per_parameter): the gathered parameters copied out of the all-gather's
// output before the layer runs.
inline constexpr const char* kZero3CopyOutOp = "dp param copy-out";

// The shares of the GPU a communication kernel holds while it runs (TaskSpec::sm_share,
// hbm_share): the stack's comm_sm_fraction of the SMs, and of HBM what it reads and writes —
// twice what it sends (its send buffer read, the equal volume it receives written) over its
// duration, against the achievable HBM bandwidth. None when comm_sm_fraction is 0 (communication
// off the compute device, as the CPU executor's).
void set_contention(const CostModel& cost, TaskSpec& task, const LinkBytes& sent);

// Both passes priced once (tests and tools).
struct LayerCost {
  PassCost forward, backward;
};
LayerCost layer_cost(const CostModel& cost, const ModelShape& model, const ParallelConfig& layout,
                     const PlanMicroBatch& mb, const AttentionCost* attention = nullptr);

// Where a group of `size` ranks lands, when consecutive members are `stride` ranks apart in
// Megatron's rank order (tp fastest, then cp, dp, pp).
GroupPlacement placement(int64_t size, int64_t stride, int64_t gpus_per_node);

}  // namespace cpbench
