#include "core/plan/parallel_config.h"

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
  p.sequence_parallel = o.boolean_or("sequence_parallel", false);
  p.recompute = o.choice_or("recompute", "none", {"none", "selective", "full"});
  p.scatter_gather = o.boolean_or("scatter_gather", true);
  p.overlap_grad_reduce = o.boolean_or("overlap_grad_reduce", true);
  p.distributed_optimizer = o.boolean_or("distributed_optimizer", false);
  p.cp_comm_type = o.choice_or("cp_comm_type", "p2p", {"p2p", "all_gather", "a2a", "a2a+p2p"});
  p.max_seqlen_per_dp_cp_rank = o.integer_or("max_seqlen_per_dp_cp_rank", 0, 0, int64_t{1} << 40);
  p.dtype = o.choice_or("dtype", "bf16", {"bf16", "fp16"});
  p.attention_kernel = o.choice_or("attention_kernel", "flash", {"flash", "unfused"});
  p.elementwise_fusion = o.boolean_or("elementwise_fusion", true);
  p.overlap_p2p = o.boolean_or("overlap_p2p", false);
  p.gradient_accumulation_fusion = o.boolean_or("gradient_accumulation_fusion", true);
  p.grad_reduce_in_fp32 = o.boolean_or("grad_reduce_in_fp32", p.dtype == "bf16");
  o.finish();
  return p;
}

std::string check_parallel_config(const ParallelConfig& p) {
  int64_t mp = p.model_parallel_size();
  if (p.num_gpus % mp != 0)
    return "num_gpus " + std::to_string(p.num_gpus) + " is not a multiple of tp·pp·cp = " +
           std::to_string(mp);
  if (p.vp > 1 && p.pp == 1) return "vp = " + std::to_string(p.vp) + " needs pp > 1";
  if (p.sequence_parallel && p.tp == 1) return "sequence_parallel needs tp > 1";
  return "";
}

}  // namespace cpbench
