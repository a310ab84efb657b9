// memory.h — device memory of one GPU along the iteration's schedule: weights, gradients and
// optimizer state of its stage, plus the activations each forward saves and its backward frees,
// walked in the pipeline schedule's order (the order the stage's compute stream runs them).
// Requires: the plan's layout and micro-batches, the preset's memory overheads. Per-layer saved
// bytes come from the model's architecture (formulas.h saved_activation_bytes_per_layer: KV heads,
// gated MLP, dropout, flash or unfused attention, SP, CP). The peak is the worst stage and DP×CP
// rank; interleaving's extra in-flight chunks (Megatron: 1 + (p−1)/(p·v)) follow from the order.
// Note: the estimate is what the GPU must have: allocated bytes plus what the process reserves
// beside them (context, communicator buffers) and what the caching allocator loses to
// fragmentation in the activation pool.
#pragma once

#include <limits>
#include <vector>

#include "core/hardware/hardware.h"
#include "core/model/formulas.h"
#include "core/model/model.h"
#include "core/plan/plan.h"
#include "core/sim/pipeline_schedule.h"

namespace cpbench {

struct MemoryEstimate {
  double weights_optimizer_bytes = 0;
  double activation_bytes = 0;     // saved activations in flight at the peak
  double workspace_bytes = 0;      // the transient working set of the layer being (re)computed
  double fragmentation_bytes = 0;  // activation pool lost to the allocator's fragmentation
  // A replayed allocator (MemoryOverheads::allocator) failed a request with what the device leaves
  // for activations, after freeing its cache: out of memory whatever total() says.
  bool allocator_out_of_memory = false;
  double reserved_bytes = 0;       // context, communicator buffers, library workspaces
  int stage = 0;                   // the pipeline stage where the peak is
  double allocated() const { return weights_optimizer_bytes + activation_bytes + workspace_bytes; }
  double total() const { return allocated() + fragmentation_bytes + reserved_bytes; }
};

// Parameters held by one GPU of pipeline stage `stage` (its layers, /tp; embedding on the
// first stage, output layer on the last).
double params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage);
// The same for one virtual chunk of the stage (chunk_layers of its layers; the embedding and
// positions in stage 0's first chunk, the final norm and output layer in the last stage's last):
// what Megatron's DDP keeps in that chunk's gradient buffer. The chunks of a stage sum to it.
double chunk_params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage,
                            int64_t chunk);
// Of those, the parameters outside the chunk's layers (embedding and positions, final norm and
// output layer): under FSDP the root unit's share of the chunk.
double chunk_outside_params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length,
                                    int64_t stage, int64_t chunk);
// The same summed over the stage's chunks.
double stage_outside_params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length,
                                    int64_t stage);

// The plan's longest sequence: what a learned position table must hold (param_count's seq_length).
int64_t longest_sequence(const Plan& plan);

// Weights, gradients and optimizer state of one GPU of stage `stage` of `plan` (the distributed
// optimizer shards the optimizer state over the DP×CP ranks, ZeRO-3 everything, plus its gathered
// working set of two layers' parameters and one layer's gradients; learned positions sized by the
// plan's longest sequence).
double stage_weight_bytes(const ModelShape& model, const Plan& plan, int64_t stage);

// One layer's activation tensors for `mb` on one of its CP ranks (layer_activation_tensors summed
// over its sequences, each 1/cp of its tokens), saved or not under the layout's recompute mode.
std::vector<LayerTensor> micro_batch_layer_tensors(const ModelShape& model, const ParallelConfig& layout,
                                                   const PlanMicroBatch& mb);

// The loss of `mb` on one of its CP ranks, on the stage that runs it (holds_loss), as the
// layout's `loss` allocates it. With E = T·V/t logits (T the rank's tokens, which SP gathers
// before the output layer; V/t its vocabulary shard):
//   - held: kept from the loss's forward to its backward;
//   - forward: beside `held` at the forward's peak;
//   - backward: beside `held` at the backward's peak, before `held` is freed.
// "vocab_parallel" (NVIDIA/Megatron-LM megatron/core/tensor_parallel/cross_entropy.py, core_r0.8
// to main: calculate_logits_max copies the logits to fp32, the exponentials and the softmax are
// computed in place in that copy, which forward saves; the backward computes the gradient in place
// in it): held, the fp32 copy (4E); forward, the 16-bit logits beside it (2E); backward, the
// logits' 16-bit gradient cast from it (2E).
// "torch" (cross_entropy(logits.float(), labels): log_softmax, then nll_loss; the autograd
// formulas of pytorch tools/autograd/derivatives.yaml): held, log_softmax's fp32 output, which its
// backward and nll_loss's read (4E); forward, the 16-bit logits and their fp32 copy, alive while
// log_softmax writes its output (6E; the copy is saved by nothing and freed after it); backward,
// nll_loss's fp32 input gradient (zeros with the targets scattered in) and log_softmax's fp32
// input gradient, both beside the output (8E); then the output and the first freed, the cast's
// 16-bit gradient beside the fp32 one (6E).
struct LossTensors {
  double entries = 0;  // E, the logits of the rank
  double held = 0, forward = 0, backward = 0;
};
LossTensors micro_batch_loss_tensors(const ModelShape& model, const ParallelConfig& layout, const PlanMicroBatch& mb);
// Whether chunk `chunk` of stage `stage` ends with the loss: the last stage's last chunk.
bool holds_loss(const ParallelConfig& layout, int64_t stage, int64_t chunk);
// The embedding's dense weight gradient, made at the end of the first chunk's backward on the
// first stage: ATen's embedding backward zero-fills a [V/t, h] gradient in the weights' 16-bit
// dtype and scatter-adds the token rows into it (aten/src/ATen/native/cuda/Embedding.cu,
// embedding_dense_backward_cuda; EmbeddingBackwardKernel.cu for more than 3,072 tokens); Megatron's
// DDP hook then adds it into main_grad and drops it (megatron/core/distributed/
// distributed_data_parallel.py, the parameters' backward hook: main_grad.add_(grad), grad = None):
// 2·V/t·h bytes for the moment it lives, every micro-batch. (Its sort buffers are the tokens'.)
double embedding_gradient_bytes(const ModelShape& model, const ParallelConfig& layout);
bool holds_embedding(int64_t stage, int64_t chunk);

// Bytes one layer saves for the backward of `mb` on one of its CP ranks (each holds 1/cp of every
// sequence), under the layout's TP, SP, recompute mode and attention kernel.
double micro_batch_layer_bytes(const ModelShape& model, const ParallelConfig& layout, const PlanMicroBatch& mb,
                               bool recompute_none = false);

// Kwai's activation offloading on one stage's schedule, as Megatron-Kwai's schedules run it
// (atc24ae-1.0.0, megatron/core/pipeline_parallel/offload.py and schedules.py):
// - which forwards offload α of their saved bytes: interleaved, all but the last stage's last
//   chunk; otherwise every forward of a stage whose warm-up holds two or more forwards (stages up to
//   p − 3 in 1F1B), none elsewhere;
// - the copy of forward i leaves after op i; its device bytes are released at the next offload call,
//   the end of the next forward op (in warm-up the next op, in 1F1B's steady state two ops later;
//   after the last forward, the end of the op after it), and the op after that point waits for the
//   copy (the compute stream waits on the offload stream);
// - the copy back of a backward is issued when the stage's previous backward starts (its first
//   backward: when the op before it starts, after the warm-up) into one of two persistent device
//   buffers (ping and pong, each grown to the largest chunk copied back into it and never freed),
//   and the backward waits for it.
struct OffloadSchedule {
  std::vector<bool> offloaded;          // [op] a forward whose α share goes to the host
  std::vector<int64_t> released_after;  // [offloaded forward] the op after whose end its α share leaves the device
  std::vector<int64_t> reload_at;       // [backward of an offloaded forward] the op at whose start its copy back is issued
  std::vector<int64_t> forward_of;      // [backward] its forward op (same micro-batch and chunk), else −1; all −1 without offloading
};
OffloadSchedule offload_schedule(const ParallelConfig& layout, const std::vector<PipeOp>& ops, int stage);

// Activation bytes held by one stage after each op of its schedule (forward: + the chunk's saved
// bytes; backward: − them), for one DP×CP rank's micro-batch list, in the order the stage's
// compute stream runs them. With offloading (offload_schedule), α of a forward's bytes leave when
// it says and come back into the two persistent copy-back buffers, which count from their first
// use. The chunk that holds the loss also holds its fp32 softmax from its forward to its backward
// (never offloaded: offload_schedule offloads no forward of the last stage's last chunk). peak:
// the largest value during an op, with its transient working set (a backward: what the recompute
// mode dropped, for one layer, or the logits' gradient beside the softmax; the loss's forward: its
// 16-bit logits).
struct StageMemory {
  std::vector<double> after_op;
  double peak = 0, peak_workspace = 0;  // activations and the workspace at the peak
};
StageMemory stage_activation_memory(const ModelShape& model, const ParallelConfig& layout,
                                    const std::vector<PlanMicroBatch>& micro_batches, const PipelineSchedule& schedule,
                                    int stage);

// The worst stage and DP×CP rank. Fragmentation: overheads.allocator_fragmentation of the pool, or
// the replayed allocator's reserved bytes beyond its tensors' peak, with device_bytes less the
// weights, optimizer state and reserved overheads as the capacity it runs under (allocator_replay.h).
// replay_allocator false: a replayed allocator's fragmentation is left at zero, a lower bound on
// the estimate (what the walk alone needs) at a walk's cost, for a search's bound.
MemoryEstimate estimate_memory(const ModelShape& model, const Plan& plan, const MemoryOverheads& overheads,
                               double device_bytes = std::numeric_limits<double>::infinity(),
                               bool replay_allocator = true);

}  // namespace cpbench
