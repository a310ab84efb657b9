#include "core/experiment/framework_args.h"

#include <map>
#include <sstream>

#include "core/layouts/cp_layouts.h"

namespace cpbench {

namespace {

bool is_varlen(const std::string& s) {
  return s == "packing" || s == "packing_ffd" || s == "packing_flops" || s == "dynamic_cp" || s == "dynamic_cp_dev" ||
         s == "dynamic_cp_solver" || s == "dcp" || s == "adaptive_oracle" || s == "adaptive_rule";
}

// Megatron's spelling of TransformerEngine's comm types: all_gather is "allgather" (--cp-comm-type).
std::string megatron_comm_type(const std::string& t) { return t == "all_gather" ? "allgather" : t; }

// Kwai's techniques and CP overlap are Megatron-Kwai's, not upstream Megatron's.
void kwai_notes(const ParallelConfig& l, std::vector<std::string>& notes) {
  if (l.recompute == "balanced")
    notes.push_back("recompute \"balanced\" is Kwai's GEMM-last checkpointing (Megatron-Kwai), not an upstream "
                    "Megatron option: no recompute flag is given; the closest upstream choice is "
                    "--recompute-granularity selective");
  if (l.activation_offload_ratio > 0)
    notes.push_back("activation offloading at α = " + std::to_string(l.activation_offload_ratio) +
                    " is Kwai's pipeline-aware offloading (Megatron-Kwai); upstream Megatron offloads whole layers "
                    "(--cpu-offloading-num-layers) or modules (--fine-grained-activation-offloading), priced "
                    "differently");
  if (l.cp_comm_overlap) notes.push_back("cp_comm_overlap is Kwai's QKV-split overlap (Megatron-Kwai), not an upstream flag");
}

}  // namespace

FrameworkArgs megatron_arguments(const PointConfig& point) {
  FrameworkArgs out;
  const ParallelConfig& l = point.parallel;
  const std::string& s = point.strategy;
  auto add = [&](const std::string& flag, const std::string& value = "") {
    out.lines.push_back(value.empty() ? flag : flag + " " + value);
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  add("--tensor-model-parallel-size", num(l.tp));
  add("--pipeline-model-parallel-size", num(l.pp));
  if (l.vp > 1) add("--num-virtual-stages-per-pipeline-rank", num(l.vp));
  if (l.first_stage_layers > 0) add("--decoder-first-pipeline-num-layers", num(l.first_stage_layers));
  if (l.last_stage_layers > 0) add("--decoder-last-pipeline-num-layers", num(l.last_stage_layers));
  if (l.account_for_embedding_in_pipeline_split) add("--account-for-embedding-in-pipeline-split");
  if (l.account_for_loss_in_pipeline_split) add("--account-for-loss-in-pipeline-split");
  if (l.cp > 1) {
    add("--context-parallel-size", num(l.cp));
    add("--cp-comm-type", megatron_comm_type(l.cp_comm_type));
    if (l.cp_comm_type == "a2a+p2p") {
      const int64_t a = auto_a2a_size(static_cast<int32_t>(l.cp), static_cast<int32_t>(point.model.heads / l.tp),
                                      static_cast<int32_t>(point.model.kv_heads / l.tp));
      add("--hierarchical-context-parallel-sizes", num(a) + " " + num(l.cp / a));
    }
  }
  if (l.sequence_parallel) add("--sequence-parallel");
  if (l.recompute == "selective") add("--recompute-granularity", "selective");
  if (l.recompute == "full") {
    add("--recompute-granularity", "full");
    add("--recompute-method", "uniform");
    add("--recompute-num-layers", "1");
  }
  if (l.zero3) {
    add("--use-megatron-fsdp");
    add("--data-parallel-sharding-strategy", "optim_grads_params");
    if (!l.zero3_reshard_after_forward)
      out.notes.push_back("parameters kept gathered from the forward to the backward (zero3_reshard_after_forward "
                          "false) has no Megatron-FSDP flag here; torchtitan's fsdp_reshard_after_forward = \"never\"");
  } else if (l.distributed_optimizer) {
    add("--use-distributed-optimizer");
  }
  if (l.overlap_grad_reduce) add("--overlap-grad-reduce");
  if (l.overlap_param_gather) add("--overlap-param-gather");
  if (l.tp_comm_overlap) add("--tp-comm-overlap");
  if (l.grad_reduce_bucket_params > 0) add("--ddp-bucket-size", num(l.grad_reduce_bucket_params));
  add(l.dtype == "fp16" ? "--fp16" : "--bf16");
  if (!l.grad_reduce_in_fp32) add("--grad-reduce-in-bf16");
  if (!l.check_for_nan_in_loss_and_grad) add("--no-check-for-nan-in-loss-and-grad");
  add("--micro-batch-size", num(l.micro_batch_size));
  if (point.workload.global_batch_sequences > 0) add("--global-batch-size", num(point.workload.global_batch_sequences));
  add("--seq-length", num(point.workload.max_length));
  const bool dev_dynamic = s == "dynamic_cp_dev" || s == "dynamic_cp_solver" || s == "adaptive_oracle" || s == "adaptive_rule";
  if (s == "packing" || s == "packing_ffd" || s == "packing_flops" || dev_dynamic) {
    add("--sequence-packing-scheduler", dev_dynamic ? "default_dynamic_cp" : "dp_balanced");
    if (dev_dynamic) add("--dynamic-context-parallel");
    out.notes.push_back("--sequence-packing-scheduler" + std::string(dev_dynamic ? " and --dynamic-context-parallel are" : " is") +
                        " on Megatron-LM's dev branch (d48bd6be), not yet on main");
  }
  if (s == "dynamic_cp") {
    add("--hybrid-context-parallel");
    if (l.pp > 1)
      out.notes.push_back("Megatron main refuses --hybrid-context-parallel with pipeline parallelism (arguments.py); "
                          "dev's --dynamic-context-parallel allows it");
  }
  if (is_varlen(s) && s != "dcp") {
    if (l.max_seqlen_per_dp_cp_rank > 0) add("--max-seqlen-per-dp-cp-rank", num(l.max_seqlen_per_dp_cp_rank));
    add("--calculate-per-token-loss");
  }
  if (s == "packing_ffd" || s == "packing_flops")
    out.notes.push_back(std::string("cpbench's ") + (s == "packing_ffd" ? "first-fit-decreasing" : "FLOPs-balanced") +
                        " packer is not a Megatron scheduler: the arguments select dp_balanced, the nearest");
  if (s == "dynamic_cp_solver")
    out.notes.push_back("the Dynamic-CP blog's solver is not in Megatron-LM: the arguments run dev's default_dynamic_cp "
                        "scheduler (cpbench's dynamic_cp_dev)");
  if (s == "adaptive_oracle" || s == "adaptive_rule")
    out.notes.push_back("cpbench's per-batch choice between packing and the Dynamic-CP schedulers is implemented by no "
                        "framework: the arguments run Megatron dev's Dynamic-CP, the candidate closest to it");
  if (s == "dcp")
    out.notes.push_back("DCP's blockwise attention runs in DCP's own runtime (SOSP'25 artifact), not in Megatron-LM: "
                        "these are the layout's arguments around it");
  kwai_notes(l, out.notes);
  return out;
}

Expected<FrameworkLayout> parse_megatron_arguments(const std::vector<std::string>& args, int64_t num_gpus) {
  FrameworkLayout out;
  ParallelConfig& l = out.parallel;
  l.num_gpus = num_gpus;
  l.overlap_grad_reduce = false;  // Megatron's defaults
  l.check_for_nan_in_loss_and_grad = true;
  l.scatter_gather = true;
  std::string granularity, packing_scheduler;
  bool hybrid = false, dynamic = false, fsdp = false;
  Errors errors;
  // "--flag value" and "--flag=value" alike.
  std::vector<std::string> tokens;
  for (const auto& a : args) {
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      tokens.push_back(a.substr(0, eq));
      tokens.push_back(a.substr(eq + 1));
    } else {
      tokens.push_back(a);
    }
  }
  auto value = [&](size_t& i) -> std::string {
    if (i + 1 >= tokens.size() || tokens[i + 1].rfind("--", 0) == 0) {
      errors.list.push_back({"megatron arguments", tokens[i], "expected a value after " + tokens[i]});
      return "";
    }
    return tokens[++i];
  };
  auto integer = [&](size_t& i) -> int64_t {
    const std::string flag = tokens[i], v = value(i);
    try {
      size_t used = 0;
      const int64_t x = std::stoll(v, &used);
      if (used == v.size() && x >= 0) return x;
    } catch (...) {
    }
    if (!v.empty()) errors.list.push_back({"megatron arguments", flag, "expected a non-negative integer, got \"" + v + "\""});
    return 0;
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& f = tokens[i];
    if (f == "--tensor-model-parallel-size") l.tp = integer(i);
    else if (f == "--pipeline-model-parallel-size") l.pp = integer(i);
    else if (f == "--num-virtual-stages-per-pipeline-rank") l.vp = integer(i);
    else if (f == "--decoder-first-pipeline-num-layers") l.first_stage_layers = integer(i);
    else if (f == "--decoder-last-pipeline-num-layers") l.last_stage_layers = integer(i);
    else if (f == "--account-for-embedding-in-pipeline-split") l.account_for_embedding_in_pipeline_split = true;
    else if (f == "--account-for-loss-in-pipeline-split") l.account_for_loss_in_pipeline_split = true;
    else if (f == "--context-parallel-size") l.cp = integer(i);
    else if (f == "--cp-comm-type") {
      const std::string t = value(i);
      l.cp_comm_type = t == "allgather" ? "all_gather" : t;
      if (t != "p2p" && t != "allgather" && t != "a2a" && t != "a2a+p2p")
        errors.list.push_back({"megatron arguments", f, "expected p2p, allgather, a2a or a2a+p2p, got \"" + t + "\""});
    } else if (f == "--hierarchical-context-parallel-sizes") {
      integer(i);
      integer(i);
    } else if (f == "--sequence-parallel") l.sequence_parallel = true;
    else if (f == "--recompute-granularity") granularity = value(i);
    else if (f == "--recompute-method") value(i);
    else if (f == "--recompute-num-layers") integer(i);
    else if (f == "--recompute-activations") granularity = "selective";
    else if (f == "--use-megatron-fsdp" || f == "--use-torch-fsdp2") fsdp = true;
    else if (f == "--data-parallel-sharding-strategy") fsdp = fsdp && value(i) == "optim_grads_params";
    else if (f == "--use-distributed-optimizer") l.distributed_optimizer = true;
    else if (f == "--overlap-grad-reduce") l.overlap_grad_reduce = true;
    else if (f == "--overlap-param-gather") l.overlap_param_gather = true;
    else if (f == "--tp-comm-overlap") l.tp_comm_overlap = true;
    else if (f == "--ddp-bucket-size") l.grad_reduce_bucket_params = integer(i);
    else if (f == "--bf16") l.dtype = "bf16";
    else if (f == "--fp16") l.dtype = "fp16";
    else if (f == "--grad-reduce-in-bf16") l.grad_reduce_in_fp32 = false;
    else if (f == "--no-check-for-nan-in-loss-and-grad") l.check_for_nan_in_loss_and_grad = false;
    else if (f == "--micro-batch-size") l.micro_batch_size = integer(i);
    else if (f == "--global-batch-size" || f == "--seq-length") integer(i);
    else if (f == "--sequence-packing-scheduler") packing_scheduler = value(i);
    else if (f == "--hybrid-context-parallel") hybrid = true;
    else if (f == "--dynamic-context-parallel") dynamic = true;
    else if (f == "--max-seqlen-per-dp-cp-rank") l.max_seqlen_per_dp_cp_rank = integer(i);
    // Every other argument (learning rate, data paths, …) does not change the layout.
  }
  if (granularity == "full" || granularity == "selective") l.recompute = granularity;
  else if (!granularity.empty())
    errors.list.push_back({"megatron arguments", "--recompute-granularity", "expected full or selective, got \"" + granularity + "\""});
  if (fsdp) {
    l.zero3 = true;
    l.distributed_optimizer = false;
  }
  if (l.vp < 1) l.vp = 1;
  out.strategy = fsdp ? "zero3" : dynamic ? "dynamic_cp_dev" : hybrid ? "dynamic_cp" : !packing_scheduler.empty() ? "packing" : "ptdp";
  if (!errors.list.empty()) return errors;
  return out;
}

FrameworkArgs torchtitan_config(const PointConfig& point) {
  FrameworkArgs out;
  const ParallelConfig& l = point.parallel;
  const int64_t dp = l.dp();
  const bool shard = l.zero3 || l.distributed_optimizer;
  auto q = [](const std::string& v) { return "\"" + v + "\""; };
  auto kv = [&](const std::string& k, const std::string& v) { out.lines.push_back(k + " = " + v); };
  out.lines.push_back("[parallelism]");
  kv("data_parallel_replicate_degree", std::to_string(shard ? 1 : dp));
  kv("data_parallel_shard_degree", std::to_string(shard ? dp : 1));
  kv("tensor_parallel_degree", std::to_string(l.tp));
  kv("pipeline_parallel_degree", std::to_string(l.pp));
  kv("context_parallel_degree", std::to_string(l.cp));
  if (l.pp > 1) {
    kv("pipeline_parallel_schedule", q(l.vp > 1 ? "Interleaved1F1B" : "1F1B"));
    if (l.vp > 1) kv("pipeline_parallel_layers_per_stage", std::to_string(point.model.layers / (l.pp * l.vp)));
    kv("pipeline_parallel_microbatch_size", std::to_string(l.micro_batch_size));
  }
  if (l.cp > 1) kv("context_parallel_rotate_method", q(l.cp_comm_type == "all_gather" ? "allgather" : "alltoall"));
  if (shard) kv("fsdp_reshard_after_forward", q(l.zero3 && l.zero3_reshard_after_forward ? "always" : "never"));
  if (l.zero3 && l.zero3_sharding == "flat")
    out.notes.push_back("torchtitan shards with FSDP2 (zero3_sharding per_parameter: its parameters are copied out of "
                        "each all-gather and its gradients into each reduce-scatter); this point models FSDP1's flat "
                        "parameters");
  kv("enable_async_tensor_parallel", l.tp_comm_overlap ? "true" : "false");
  out.lines.push_back("");
  out.lines.push_back("[activation_checkpoint]");
  kv("mode", q(l.recompute == "full" || l.recompute == "selective" ? l.recompute : "none"));
  out.lines.push_back("");
  out.lines.push_back("[training]");
  kv("seq_len", std::to_string(point.workload.max_length));
  if (point.workload.global_batch_sequences > 0 && dp > 0) {
    kv("global_batch_size", std::to_string(point.workload.global_batch_sequences));
    kv("local_batch_size", std::to_string(l.micro_batch_size));
  }
  if (l.tp_comm_overlap) out.notes.push_back("torchtitan's async TP needs torch.compile: [compile] enable = true");
  if (l.tp > 1 && !l.sequence_parallel)
    out.notes.push_back("torchtitan's TP always splits the norms over the sequence (Megatron's --sequence-parallel)");
  if (l.cp > 1 && (l.cp_comm_type == "a2a" || l.cp_comm_type == "a2a+p2p"))
    out.notes.push_back("torchtitan's CP is ring attention (KV rotated by all-to-all or all-gathered): it has no "
                        "head-parallel (Ulysses) " + l.cp_comm_type + "; the config uses the ring");
  if (l.tp == 1 && l.loss != "torch")
    out.notes.push_back("torchtitan's loss at tp 1 is torch's cross_entropy on fp32 logits (loss torch); this point "
                        "prices Megatron's vocabulary-parallel loss");
  if (l.distributed_optimizer && !l.zero3)
    out.notes.push_back("torchtitan has no ZeRO-1 optimizer: FSDP without resharding after the forward "
                        "(data_parallel_shard_degree, \"never\") also shards gradients and parameters between steps");
  if (l.account_for_embedding_in_pipeline_split || l.account_for_loss_in_pipeline_split)
    out.notes.push_back("the embedding / loss counted as a layer of the pipeline split (Megatron's "
                        "--account-for-*-in-pipeline-split): set torchtitan's pipeline stage split by hand");
  else if (l.vp > 1 && (l.first_stage_layers > 0 || l.last_stage_layers > 0))
    out.notes.push_back("uneven first/last stages: set pipeline_parallel_first_stage_less_layers / "
                        "_last_stage_less_layers by hand");
  if (is_varlen(point.strategy))
    out.notes.push_back("torchtitan has no variable-length packing or Dynamic-CP scheduler: this is the layout only, "
                        "its batches of seq_len tokens with document masking");
  kwai_notes(l, out.notes);
  return out;
}

Expected<FrameworkLayout> parse_torchtitan_config(const std::string& toml, int64_t num_gpus, const ModelShape& model) {
  FrameworkLayout out;
  ParallelConfig& l = out.parallel;
  l.num_gpus = num_gpus;
  l.overlap_grad_reduce = true;  // FSDP and DDP overlap the gradient reduction with the backward
  std::map<std::string, std::string> v;  // "section.key" -> value without quotes
  std::istringstream in(toml);
  std::string line, section;
  Errors errors;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
    if (line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      errors.list.push_back({"torchtitan config", "line " + std::to_string(n), "expected key = value, got \"" + line + "\""});
      continue;
    }
    auto strip = [](std::string t) {
      const size_t x = t.find_first_not_of(" \t"), y = t.find_last_not_of(" \t");
      t = x == std::string::npos ? "" : t.substr(x, y - x + 1);
      if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
      return t;
    };
    v[section + "." + strip(line.substr(0, eq))] = strip(line.substr(eq + 1));
  }
  auto integer = [&](const std::string& key, int64_t fallback) -> int64_t {
    auto it = v.find(key);
    if (it == v.end()) return fallback;
    try {
      size_t used = 0;
      const int64_t x = std::stoll(it->second, &used);
      if (used == it->second.size()) return x;
    } catch (...) {
    }
    errors.list.push_back({"torchtitan config", key, "expected an integer, got \"" + it->second + "\""});
    return fallback;
  };
  auto text = [&](const std::string& key, const std::string& fallback) {
    auto it = v.find(key);
    return it == v.end() ? fallback : it->second;
  };
  l.tp = integer("parallelism.tensor_parallel_degree", 1);
  l.pp = integer("parallelism.pipeline_parallel_degree", 1);
  l.cp = integer("parallelism.context_parallel_degree", 1);
  l.sequence_parallel = l.tp > 1;
  l.micro_batch_size = integer("parallelism.pipeline_parallel_microbatch_size", 1);
  const int64_t per_stage = integer("parallelism.pipeline_parallel_layers_per_stage", 0);
  l.vp = per_stage > 0 && l.pp > 0 ? std::max<int64_t>(1, model.layers / (l.pp * per_stage)) : 1;
  if (l.cp > 1) l.cp_comm_type = text("parallelism.context_parallel_rotate_method", "allgather") == "allgather" ? "all_gather" : "p2p";
  const int64_t shard = integer("parallelism.data_parallel_shard_degree", -1);
  const std::string reshard = text("parallelism.fsdp_reshard_after_forward", "default");
  if (shard != 1) {  // -1 (the rest of the ranks) or a degree: FSDP
    l.zero3 = reshard != "never";
    l.distributed_optimizer = reshard == "never";
  }
  l.tp_comm_overlap = text("parallelism.enable_async_tensor_parallel", "false") == "true";
  const std::string mode = text("activation_checkpoint.mode", "selective");
  l.recompute = mode == "full" || mode == "selective" ? mode : "none";
  // torchtitan's loss: cross_entropy on the logits upcast to fp32, vocabulary-parallel under TP
  // (loss_parallel).
  l.loss = l.tp == 1 ? "torch" : "vocab_parallel";
  out.strategy = l.zero3 ? "zero3" : "ptdp";
  if (!errors.list.empty()) return errors;
  return out;
}

}  // namespace cpbench
