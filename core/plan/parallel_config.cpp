#include "core/plan/parallel_config.h"

#include <algorithm>
#include <limits>

namespace cpbench {

ParallelConfig parse_parallel_config(JsonObject& o) {
  constexpr int64_t kMaxRanks = 1 << 20;
  ParallelConfig p;
  p.num_gpus = o.integer("num_gpus", 1, kMaxRanks);
  p.tp = o.integer_or("tp", 1, 1, 1024);
  p.pp = o.integer_or("pp", 1, 1, 4096);
  p.cp = o.integer_or("cp", 1, 1, 4096);
  p.vp = o.integer_or("vp", 1, 1, 1024);
  p.micro_batch_size = o.integer_or("micro_batch_size", 1, 1, 1 << 20);
  p.first_stage_layers = o.integer_or("first_stage_layers", 0, 0, 1 << 20);
  p.last_stage_layers = o.integer_or("last_stage_layers", 0, 0, 1 << 20);
  p.account_for_embedding_in_pipeline_split = o.boolean_or("account_for_embedding_in_pipeline_split", false);
  p.account_for_loss_in_pipeline_split = o.boolean_or("account_for_loss_in_pipeline_split", false);
  p.sequence_parallel = o.boolean_or("sequence_parallel", false);
  p.recompute = o.choice_or("recompute", "none", {"none", "selective", "full", "balanced"});
  p.activation_offload_ratio = o.number_or("activation_offload_ratio", 0, 0, 1);
  p.scatter_gather = o.boolean_or("scatter_gather", true);
  p.overlap_grad_reduce = o.boolean_or("overlap_grad_reduce", true);
  p.grad_reduce_bucket_params = o.integer_or("grad_reduce_bucket_params", 0, 0, int64_t{1} << 40);
  p.distributed_optimizer = o.boolean_or("distributed_optimizer", false);
  p.overlap_param_gather = o.boolean_or("overlap_param_gather", false);
  p.zero3 = o.boolean_or("zero3", false);
  p.zero3_reshard_after_forward = o.boolean_or("zero3_reshard_after_forward", true);
  p.zero3_sharding = o.choice_or("zero3_sharding", "flat", {"flat", "per_parameter", "deepspeed", "deepspeed_2021"});
  p.zero3_contiguous_gradients = o.boolean_or("zero3_contiguous_gradients", true);
  p.cp_comm_type = o.choice_or("cp_comm_type", "p2p", {"p2p", "all_gather", "a2a", "a2a+p2p"});
  p.cp_comm_overlap = o.boolean_or("cp_comm_overlap", false);
  p.attention_layout =
      o.choice_or("attention_layout", "zigzag", {"single", "ring", "zigzag", "all_gather", "a2a", "a2a+p2p", "double_ring"});
  p.attention_a2a_size = o.integer_or("attention_a2a_size", 0, 0, 1024);
  p.attention_ring_window = o.integer_or("attention_ring_window", 0, 0, 1 << 20);
  p.attention_pad_to_longest = o.boolean_or("attention_pad_to_longest", false);
  p.attention_sparse_kernel = o.boolean_or("attention_sparse_kernel", false);
  p.te_a2a_sequence_loop = o.boolean_or("te_a2a_sequence_loop", false);
  p.attention_grad_bytes = o.integer_or("attention_grad_bytes", 0, 0, 4);
  if (p.attention_grad_bytes == 1 || p.attention_grad_bytes == 3)
    o.error("attention_grad_bytes", "expected 0 (the dtype's), 2 or 4, got " + std::to_string(p.attention_grad_bytes));
  p.attention_value_bytes = o.integer_or("attention_value_bytes", 0, 0, 4);
  if (p.attention_value_bytes == 1 || p.attention_value_bytes == 3)
    o.error("attention_value_bytes", "expected 0 (the dtype's), 2 or 4, got " + std::to_string(p.attention_value_bytes));
  p.attention_per_tile = o.boolean_or("attention_per_tile", false);
  p.dcp_block_tokens = o.integer_or("dcp_block_tokens", 0, 0, int64_t{1} << 24);
  p.dcp_divisions = o.integer_or("dcp_divisions", 4, 1, 64);
  p.dcp_head_blocks = o.integer_or("dcp_head_blocks", 0, 0, 1024);
  p.dcp_eps_mem = o.number_or("dcp_eps_mem", 0.2, 0, 10);
  p.dcp_eps_comp = o.number_or("dcp_eps_comp", 0.1, 0, 10);
  p.dcp_early_outputs = o.boolean_or("dcp_early_outputs", false);
  p.dcp_all_to_all = o.boolean_or("dcp_all_to_all", true);
  p.max_seqlen_per_dp_cp_rank = o.integer_or("max_seqlen_per_dp_cp_rank", 0, 0, int64_t{1} << 40);
  p.dtype = o.choice_or("dtype", "bf16", {"bf16", "fp16"});
  p.attention_kernel = o.choice_or("attention_kernel", "flash", {"flash", "unfused"});
  p.loss = o.choice_or("loss", "vocab_parallel", {"vocab_parallel", "torch"});
  p.elementwise_fusion = o.boolean_or("elementwise_fusion", true);
  p.overlap_p2p = o.boolean_or("overlap_p2p", false);
  p.async_tensor_model_parallel_allreduce = o.boolean_or("async_tensor_model_parallel_allreduce", false);
  p.tp_comm_overlap = o.boolean_or("tp_comm_overlap", false);
  p.gradient_accumulation_fusion = o.boolean_or("gradient_accumulation_fusion", true);
  p.grad_reduce_in_fp32 = o.boolean_or("grad_reduce_in_fp32", p.dtype == "bf16");
  p.check_for_nan_in_loss_and_grad = o.boolean_or("check_for_nan_in_loss_and_grad", false);
  o.finish();
  return p;
}

int64_t global_rank(const ParallelConfig& p, int64_t stage, int64_t dpcp, int64_t tp_rank) {
  return (stage * p.dp() * p.cp + dpcp) * p.tp + tp_rank;
}

namespace {
// The account_for_* split: units = layers + the embedding + the loss, each virtual stage an even
// share of them.
bool split_counts_extras(const ParallelConfig& p) {
  return p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
}
int64_t split_units(const ParallelConfig& p, int64_t layers) {
  return layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) + (p.account_for_loss_in_pipeline_split ? 1 : 0);
}
}  // namespace

int64_t chunk_layers(const ParallelConfig& p, int64_t layers, int64_t stage, int64_t chunk) {
  if (!split_counts_extras(p)) return stage_layers(p, layers, stage) / p.vp;
  int64_t k = split_units(p, layers) / (p.pp * p.vp);
  if (stage == 0 && chunk == 0 && p.account_for_embedding_in_pipeline_split) --k;
  if (stage == p.pp - 1 && chunk == p.vp - 1 && p.account_for_loss_in_pipeline_split) --k;
  return k;
}

double grad_bucket_params(const ParallelConfig& p, int64_t chunk) {
  if (!p.overlap_grad_reduce || chunk > 0) return std::numeric_limits<double>::infinity();
  if (p.grad_reduce_bucket_params > 0) return static_cast<double>(p.grad_reduce_bucket_params);
  return std::max(40e6, 1e6 * static_cast<double>(p.dp() * p.cp));
}

int64_t stage_layers(const ParallelConfig& p, int64_t layers, int64_t stage) {
  if (split_counts_extras(p)) {
    int64_t k = 0;
    for (int64_t c = 0; c < p.vp; ++c) k += chunk_layers(p, layers, stage, c);
    return k;
  }
  if (p.pp == 1) return layers;
  const bool first_set = p.first_stage_layers > 0, last_set = p.last_stage_layers > 0;
  if (!first_set && !last_set) return layers / p.pp;
  if (stage == 0 && first_set) return p.first_stage_layers;
  if (stage == p.pp - 1 && last_set) return p.last_stage_layers;
  const int64_t fixed = (first_set ? p.first_stage_layers : 0) + (last_set ? p.last_stage_layers : 0);
  const int64_t even_stages = p.pp - (first_set ? 1 : 0) - (last_set ? 1 : 0);
  return even_stages > 0 ? (layers - fixed) / even_stages : 0;
}

std::string check_stage_layers(const ParallelConfig& p, int64_t layers) {
  const bool first_set = p.first_stage_layers > 0, last_set = p.last_stage_layers > 0;
  auto n = [](int64_t x) { return std::to_string(x); };
  if (split_counts_extras(p)) {
    if (first_set || last_set)
      return "account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split exclude first_stage_layers "
             "and last_stage_layers (Megatron takes one way of splitting)";
    const int64_t units = split_units(p, layers);
    if (units % (p.pp * p.vp) != 0)
      return "layers " + n(layers) + " plus the embedding and loss counted as layers (" + n(units) +
             ") is not a multiple of pp·vp " + n(p.pp * p.vp);
    if (units / (p.pp * p.vp) < (p.pp * p.vp == 1 ? units - layers + 1 : 1))
      return "layers " + n(layers) + " over pp·vp " + n(p.pp * p.vp) + " with the embedding and loss counted: a virtual "
             "stage would hold fewer than no layer";
    return "";
  }
  if (!first_set && !last_set) {
    if (layers % (p.pp * p.vp) != 0) return "layers " + n(layers) + " is not a multiple of pp·vp " + n(p.pp * p.vp);
    return "";
  }
  if (p.pp == 1) return "first_stage_layers / last_stage_layers need pp > 1";
  const int64_t fixed = (first_set ? p.first_stage_layers : 0) + (last_set ? p.last_stage_layers : 0);
  const int64_t even_stages = p.pp - (first_set ? 1 : 0) - (last_set ? 1 : 0);
  const std::string what = "layers " + n(layers) + " with first_stage_layers " + n(p.first_stage_layers) +
                           " and last_stage_layers " + n(p.last_stage_layers) + " over pp " + n(p.pp);
  if (fixed > layers || (even_stages == 0 && fixed != layers)) return what + ": the stage counts do not add up";
  if (even_stages > 0 && (layers - fixed) % even_stages != 0)
    return what + ": the other " + n(layers - fixed) + " layers do not split evenly over " + n(even_stages) + " stages";
  for (int64_t s = 0; s < p.pp; ++s) {
    const int64_t k = stage_layers(p, layers, s);
    if (k < 1) return what + ": stage " + n(s) + " holds no layer";
    if (k % p.vp != 0) return what + ": stage " + n(s) + "'s " + n(k) + " layers do not split into vp " + n(p.vp) + " chunks";
  }
  return "";
}

std::string check_parallel_config(const ParallelConfig& p) {
  int64_t mp = p.model_parallel_size();
  if (p.num_gpus % mp != 0)
    return "num_gpus " + std::to_string(p.num_gpus) + " is not a multiple of tp·pp·cp = " +
           std::to_string(mp);
  if (p.vp > 1 && p.pp == 1) return "vp = " + std::to_string(p.vp) + " needs pp > 1";
  if (p.sequence_parallel && p.tp == 1) return "sequence_parallel needs tp > 1";
  if (!p.zero3_contiguous_gradients && p.zero3_sharding != "deepspeed_2021")
    return "zero3_contiguous_gradients false (DeepSpeed's bucket all-reduce of v0.3.12 to v0.4.2) is modelled for "
           "zero3_sharding deepspeed_2021 only, not " + p.zero3_sharding;
  if (p.overlap_param_gather && !p.distributed_optimizer) return "overlap_param_gather needs distributed_optimizer (the parameters it gathers are the optimizer's shards)";
  if (p.cp_comm_overlap && p.cp_comm_type != "all_gather")
    return "cp_comm_overlap needs cp_comm_type all_gather (Kwai's CP overlaps the K/V all-gather with the Q GEMM)";
  if (p.tp_comm_overlap && !p.sequence_parallel) return "tp_comm_overlap needs sequence_parallel (TransformerEngine's userbuffers overlap the SP collectives)";
  if (p.loss == "torch" && p.tp > 1)
    return "loss torch needs tp = 1 (under TP the vocabulary is sharded: torchtitan's loss_parallel, Megatron's vocab_parallel)";
  return "";
}

}  // namespace cpbench
