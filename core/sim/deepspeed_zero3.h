// deepspeed_zero3.h — DeepSpeed's ZeRO stage 3 (zero3_sharding "deepspeed") as its parameter
// coordinator and gradient buckets run a step: what each layer's backward gathers again (none
// for the layers held across the turn), how many parameters are gathered at once, what stays
// resident, what the last reduce buckets hold for the step's tail.
// Requires: core/model/model.h, core/plan/parallel_config.h. Its limits are DeepSpeed's defaults
// (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig), in elements; cpbench does not expose
// them as settings.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/model.h"
#include "core/plan/parallel_config.h"

namespace cpbench {

namespace deepspeed {
constexpr double kMaxLiveParameters = 1e9;      // stage3_max_live_parameters
constexpr double kMaxReuseDistance = 1e9;       // stage3_max_reuse_distance
constexpr double kPrefetchBucket = 5e7;         // stage3_prefetch_bucket_size
constexpr double kPersistenceThreshold = 1e5;   // stage3_param_persistence_threshold
constexpr double kReduceBucket = 5e8;           // reduce_bucket_size (contiguous_gradients on)
}  // namespace deepspeed

// Whether the layout is DeepSpeed's stage 3 as deepspeed_gathered replays it: zero3_sharding
// "deepspeed" with reshard_after_forward over dp·cp > 1 ranks.
bool deepspeed_stage3(const ParallelConfig& layout);

// The gathered parameters of one rank over a step, in elements of this TP rank's share.
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
  // Gradient elements reduce-scattered after the last layer's backward: the reduce buckets the
  // gradients outside the layers flush (a tied embedding's arrives last) and the last bucket.
  double reduced_at_end = 0;
};

// DeepSpeed's coordinator replayed over the step's module trace: the forward's modules in order,
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
// (stage3.py reduce_independent_p_g_buckets_and_remove_grads). Zero unless zero3_sharding
// "deepspeed" shards over dp·cp > 1 with reshard_after_forward (without it every layer stays
// gathered, as for FSDP).
DeepSpeedGathered deepspeed_gathered(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length);

}  // namespace cpbench
