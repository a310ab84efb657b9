// allocator_replay.h — one stage's activations allocated and freed tensor by tensor, in the order
// its schedule runs them, through PyTorch's caching allocator (caching_allocator.h): how much the
// allocator reserves beyond what the tensors need, and whether it runs out under the capacity.
// Requires: one DP×CP rank's micro-batches and the stage's schedule (as stage_activation_memory).
// Note: the trace, per layer, from layer_activation_tensors (formulas.h) in the forward's order:
//   - forward: every tensor is allocated in turn; a saved one stays until the layer's backward,
//     one the recompute mode does not save is freed once the next exists (its consumer ran);
//   - backward: the incoming gradient (the layer input's bytes) arrives; per layer from the last,
//     the tensors the mode did not save are recomputed (all held, as the recomputed forward saves
//     them), then from the last tensor back each with a gradient gets it allocated (the previous
//     gradient freed: it has been consumed) and the tensor is freed;
//   - an offloaded forward (Kwai's α) keeps (1 − α) of each saved tensor on the device; when its
//     share leaves and the two copy-back buffers are the memory walk's (memory.h), not replayed;
//   - one step, from an empty cache: when this was built (session 29) a second step on the
//     first's cache reserved nothing more on allocator_replay_test's uniform and variable cases,
//     at twice the cost.
// Variable-length micro-batches fragment the default allocator (different sizes cannot reuse each
// other's blocks exactly); expandable segments grow in place instead (allocator_replay_test).
//   - the chunk that holds the loss (memory.h holds_loss, LossTensors): after its layers the
//     16-bit logits, then their fp32 copy, kept as the softmax (vocab_parallel) or freed once
//     log_softmax's kept output exists (torch), the logits freed; its backward makes the loss's
//     gradients (vocab_parallel: the logits' 16-bit one; torch: nll_loss's and log_softmax's in
//     fp32, then the cast's), frees the kept tensor, makes the output layer's input gradient and
//     frees the rest;
//   - with Megatron's distributed optimizer (not ZeRO-3), the start-up first: the stage's
//     parameters as the model builds them (chunk_parameter_tensors), then per chunk its DDP's
//     16-bit parameter buffer and gradient buffer, the originals copied in and freed — their
//     blocks stay cached, where the step's tensors may or may not fit — then the optimizer's fp32
//     master shards (each made through a 16-bit clone) and Adam moments of the rank's pieces (the
//     first DP×CP shard of each bucket). What the start-up leaves allocated is not reported: the
//     peaks are the pool's, as without it. Without the distributed optimizer nothing is freed at
//     start-up: the parameters and buffers sit in segments of their own, beside the pool.
//   - the first stage's first chunk ends its backward with the embedding's dense gradient
//     (memory.h embedding_gradient_bytes), made beside the embedding output's gradient, which is
//     then freed, and dropped once added into main_grad;
// Left out: parameters, gradients and optimizer state without the distributed optimizer
// (allocated once, beside this pool: the capacity excludes them), the output layer's weight
// gradient and its saved input, ZeRO-3's gathered layers, communication buffers, allocations on
// other streams.
#pragma once

#include <vector>

#include "core/model/model.h"
#include "core/plan/plan.h"
#include "core/sim/pipeline_schedule.h"

namespace cpbench {

struct AllocatorReplay {
  double peak_reserved = 0;   // what the allocator held from the driver at its peak
  double peak_requested = 0;  // what the trace's live tensors needed at their peak
  bool out_of_memory = false;  // a request failed under the capacity after the cache was freed
  double start_up_bytes = 0;   // what the start-up left allocated (buffers, optimizer state), outside the peaks
  double overhead() const { return peak_reserved - peak_requested; }
};

// One TP rank's parameter tensors of a stage's chunk, in elements, in the order Megatron's GPT
// model builds them: the embeddings (first chunk of the first stage), then per layer its norm,
// QKV and projection (and biases), norm, FC1 and FC2 (and biases), then the final norm and the
// output layer (last chunk of the last stage; a copy of the embedding there when tied and pp > 1).
// Column- and row-parallel weights are split over the TP ranks, norms and row-parallel biases are
// not (megatron/core/tensor_parallel/layers.py). seq_length sizes a learned position table.
std::vector<double> chunk_parameter_tensors(const ModelShape& model, const ParallelConfig& layout, int stage, int chunk,
                                            int64_t seq_length);

// expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. capacity_bytes: what the device
// leaves for activations (its memory less weights, optimizer state and the reserved overheads).
// A settled steady state is not replayed to its end: once the schedule repeats with micro-batches
// of one kind and the cache has reserved nothing new for two rotations of the tensors in flight,
// the remaining repeats are skipped. Exact for the tensors' peak; the cache's peak can miss a slow
// creep of new segments over hundreds of micro-batches (within 1 % where allocator_replay_test
// compares it with skip_repeats = false, which replays every op).
AllocatorReplay replay_stage_allocations(const ModelShape& model, const ParallelConfig& layout,
                                         const std::vector<PlanMicroBatch>& micro_batches,
                                         const PipelineSchedule& schedule, int stage, bool expandable,
                                         double capacity_bytes, bool skip_repeats = true);

}  // namespace cpbench
