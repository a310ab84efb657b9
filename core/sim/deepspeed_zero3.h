// deepspeed_zero3.h — DeepSpeed's ZeRO stage 3 (zero3_sharding "deepspeed", and its 2021
// releases, "deepspeed_2021") as its parameter
// coordinator and gradient buckets run a micro-batch: what each layer's backward gathers again
// (none for the layers held across the turn), how many parameters are gathered at once, what
// stays resident, what the modules outside the layers gather, what the last reduce buckets hold
// for each backward's epilogue.
// Requires: core/model/model.h, core/plan/parallel_config.h, core/sim/layer_cost.h (LayerModule).
// Its limits are DeepSpeed's defaults (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig; the
// same in 2021's constants.py), in elements; cpbench does not expose them as settings.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/model/model.h"
#include "core/plan/parallel_config.h"
#include "core/sim/layer_cost.h"

namespace cpbench {

namespace deepspeed {
constexpr double kMaxLiveParameters = 1e9;      // stage3_max_live_parameters
constexpr double kMaxReuseDistance = 1e9;       // stage3_max_reuse_distance
constexpr double kPrefetchBucket = 5e7;         // stage3_prefetch_bucket_size
constexpr double kPersistenceThreshold = 1e5;   // stage3_param_persistence_threshold
constexpr double kReduceBucket = 5e8;           // reduce_bucket_size (contiguous_gradients on)
// Whether a gradient of `elements` is copied into the contiguous reduce bucket: a tensor that fits
// in it (0.6+: stage3.py __add_grad_to_ipg_bucket copies when elements + numel <
// reduce_bucket_size, the bucket flushed first; 2021: a tensor of more than reduce_bucket_size is
// reduced where it lies, reduce_independent_p_g_buckets_and_remove_grads). Larger ones are not.
inline bool copied_into_bucket(double elements, bool v2021) {
  return v2021 ? elements <= kReduceBucket : elements < kReduceBucket;
}
}  // namespace deepspeed

// Whether the layout is DeepSpeed's stage 3 as deepspeed_gathered replays it: zero3_sharding
// "deepspeed" or "deepspeed_2021" over dp·cp > 1 ranks (with reshard_after_forward, which
// plan_zero3 requires of both).
bool deepspeed_stage3(const ParallelConfig& layout);

// The modules outside the layers whose hooks DeepSpeed runs (Megatron-DeepSpeed's GPT): before
// them the embedding's word table and its position table, after them the final norm and the
// output layer (a tied one is the word table's module again).
enum class OutsideModule : int8_t { none = -1, word_embedding, position_embedding, final_norm, output_layer };

// One step of the module trace: a module's hook, what it gathered and what its gradients flushed.
struct DeepSpeedStep {
  int64_t layer = -1;                         // -1 outside the layers
  LayerModule module = LayerModule::none;     // none: a container, or a module outside the layers
  OutsideModule outside = OutsideModule::none;  // which module outside the layers (none: in them)
  char phase = 'f';                           // 'f' forward, 'r' its recomputation, 'b' backward
  bool synchronized = false;                  // it had a tensor to gather or in flight: a wait
  std::vector<double> fetched;                // tensors gathered for the module itself, not prefetched
  std::vector<double> prefetched;             // tensors the prefetch after its fetch gathered
  std::vector<double> gradients;              // tensors whose gradients it made (their last use)
  // Reduce buckets it flushed (their tensors): those its gradients overflowed, and at the
  // backward's last step the bucket the epilogue flushes (independent_gradient_partition_epilogue).
  std::vector<std::vector<double>> flushed;
};

// The gathered parameters of one rank over a micro-batch, in elements of this TP rank's share.
struct DeepSpeedGathered {
  double peak = 0;        // the most gathered at once, beside the persistent ones
  double persistent = 0;  // parameters under stage3_param_persistence_threshold: never partitioned
  double largest = 0;     // the largest partitioned tensor (its 16-bit gradient exists whole)
  double layer_partitioned = 0;  // a layer's partitioned parameters: what its forward gathers
  // Per layer, what is gathered again for its backward, its recomputed forward included: 0 for a
  // layer held across the turn from its forward, the whole layer where it was released, more
  // under full recomputation where the modules it runs between a tensor's two uses pass the
  // reuse distance.
  std::vector<double> backward_gathered;
  int64_t layers_kept = 0;  // layers with nothing gathered again for their backward
  // What the modules outside the layers gather for their own use in a micro-batch, wherever the
  // gather was issued: the embedding's tables for its forward (the pass's first gathers) and
  // its backward, the output layer's (a tied one's word table gathered again, released over
  // the layers past the reuse distance) for its forward and its backward (kept from its forward,
  // which it follows).
  double embedding_forward = 0, embedding_backward = 0, output_forward = 0, output_backward = 0;
  // Gradient elements reduce-scattered after the last layer's backward, in every micro-batch (the
  // engine's backward ends with the epilogue, which waits for the reduction stream): the reduce
  // buckets the gradients outside the layers flush (a tied embedding's arrives last) and the
  // bucket the epilogue flushes.
  double reduced_at_end = 0;
  double last_bucket = 0;            // of which the bucket the epilogue flushes
  // Gradient elements copied into the contiguous reduce bucket (0.6+: stage3.py
  // __add_grad_to_ipg_bucket copies a tensor smaller than reduce_bucket_size, and leaves a larger
  // one where it lies): a layer's, and those made after the last layer's backward.
  double layer_bucket_copied = 0, copied_at_end = 0;
  std::vector<DeepSpeedStep> steps;  // the trace, step by step
};

// DeepSpeed's coordinator replayed over a micro-batch's module trace (the engine runs each
// micro-batch's forward and backward, and the coordinator's step is reset for each: after the
// backward in v0.6 and later, stage3.py backward; at the forward's start in 2021,
// _pre_forward_hook): the forward's modules in order,
// then the backward's in reverse, each layer's forward run again before its backward under full
// recomputation (its forward hooks fire again). Megatron-DeepSpeed's GPT: per layer the layer,
// its input norm, self-attention, QKV, core attention, projection, post-attention norm, MLP, FC1
// and FC2 modules, so 10 hooks; before them the embedding, after them the final norm and the
// output layer. (DeepSpeed fires a container's pre-backward hook before its children's, which
// moves only the modules without parameters.)
// At each module (partitioned_param_coordinator.py fetch_sub_module): its parameters are
// gathered if they are not, then the next ones in the trace are prefetched while fewer than
// min(stage3_max_live_parameters − those gathered, stage3_prefetch_bucket_size) elements have
// been in this round (so at least one tensor, even one larger than the bucket; a tensor already
// gathered is popped at no cost, so the queue's front can run past the turn into the backward);
// after it runs, its parameters are released unless their next use was popped already or comes
// before stage3_max_reuse_distance elements of the modules that run next have passed
// (__params_to_release). Tensors of at most stage3_param_persistence_threshold elements (norms,
// biases) are resident instead. The gradients fill reduce buckets in the order their hooks fire
// (stage3.py reduce_independent_p_g_buckets_and_remove_grads). Under "deepspeed_2021" the
// prefetch runs only with nothing in flight and fewer than stage3_max_live_parameters gathered,
// and takes tensors until the bucket is full; a module whose tensors are not gathered or still in
// flight is marked synchronized (it waits for every gather in flight). Zero unless
// deepspeed_stage3.
DeepSpeedGathered deepspeed_gathered(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length);

// The distinct amounts the layers' backwards gather (backward_gathered), each with how many layers
// gather it, the most common first.
std::vector<std::pair<double, int64_t>> deepspeed_backward_groups(const DeepSpeedGathered& gathered);

// DeepSpeed of 2021 (zero3_sharding "deepspeed_2021": v0.3.12 to v0.5.x, before the coordinator
// of v0.6.0) runs a micro-batch module by module with the host in step with the device; what
// one micro-batch takes, walked over the trace deepspeed_gathered recorded. The costs:
struct DeepSpeedSyncCosts {
  std::function<double(const DeepSpeedStep&)> compute_s;  // the module's kernels in that step
  std::function<double(double)> gather_s;                 // one tensor's all-gather, by its elements
  std::function<double(double)> reduce_scatter_s;         // one tensor's gradient reduce-scatter
  double issue_s = 0;  // the host issuing one of those collectives (torch's per-rank copies)
  double host_s = 0;                // the host issuing a module's first kernel after a wait
  // The host running the module's forward call (its Python, host_module_us) before its first
  // kernel, in that step; unset: nothing.
  std::function<double(const DeepSpeedStep&)> module_call_s;
  double bucket_copy_s_per_element = 0;  // a gradient copied into the reduce bucket (compute stream)
  // contiguous_gradients false (v0.3.12 to v0.4.2's default): a full bucket flattened into one
  // tensor, divided, all-reduced and copied back tensor by tensor on the reduction stream
  // (buffered_reduce_fallback → allreduce_and_copy), by its elements; the host issues the three
  // ops and a copy per tensor (host_s each). Unset: the bucket reduce-scattered tensor by tensor.
  std::function<double(double)> bucket_all_reduce_s;
  double comm_sm_share = 0;  // of the SMs a collective holds beside the kernels (comm_sm_fraction)
  // What a rank sends in one of those collectives (an all-gather of a tensor, a gradient's
  // reduce-scatter, a bucket's all-reduce), by its elements; unset: nothing counted.
  std::function<LinkBytes(Collective, double)> sent_bytes;
};
struct DeepSpeedSyncTimes {
  double forward_s = 0, backward_s = 0;                  // the passes, waits included
  double forward_compute_s = 0, backward_compute_s = 0;  // of which the modules' kernels
  double forward_host_s = 0, backward_host_s = 0;        // and the host's issue after each wait
  double forward_contention_s = 0, backward_contention_s = 0;  // kernels slowed beside collectives
  LinkBytes forward_sent, backward_sent;  // the bytes of every collective the walk issued (sent_bytes)
};
// The walk (stage3.py and partition_parameters.py of v0.3.16 and v0.5.0): at a module that
// synchronizes, the host waits for the device — its kernels, every gather and the reduction
// stream (_synchronize_communication: comm_stream.synchronize(); torch.cuda.synchronize()) —
// then gathers the module's own tensors one collective each; each prefetched tensor's
// collective is issued after another torch.cuda.synchronize() (_allgather_param), so all but the
// last prefetched tensor complete before the module's kernels are issued, and the last runs
// beside them, slowing them by the SMs it holds (a kernel beside a collective for x runs at
// 1 − share of its speed meanwhile: c + share · min(x, c / (1 − share))). Each collective is
// torch.distributed's list form, which copies its world_size pieces one by one out of (or into)
// a flat buffer on the NCCL stream (ProcessGroupNCCL allgather and reduce_scatter, torch
// 1.7–1.10): the host busy issuing them (issue_s), the device with the collective and the copies
// (gather_s, reduce_scatter_s). A bucket of gradients is reduce-scattered tensor by tensor on the
// reduction stream once the host has waited for the bucket before (reduce_ipg_grads:
// reduction_stream.synchronize()), without waiting for the compute stream (no wait_stream in
// stage3.py of 2021); each gradient is first copied into the bucket on the compute stream
// (contiguous_gradients, v0.5.0's default; not one larger than the bucket). Every step is walked,
// the modules outside the layers too (compute_s gives the embedding's and the output layer's
// kernels); the backward ends with the epilogue's bucket reduced and waited for (the last step's
// flush; independent_gradient_partition_epilogue, reduction_stream.synchronize()).
DeepSpeedSyncTimes deepspeed_synchronous_times(const DeepSpeedGathered& gathered, const DeepSpeedSyncCosts& costs);

}  // namespace cpbench
