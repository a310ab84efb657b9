// framework_args_test.cpp — every layout cpbench emits for Megatron-LM and torchtitan reads back
// as the same layout (the fields each framework expresses), what a framework lacks is a note
// rather than an argument, and malformed arguments are named.
#include "core/experiment/framework_args.h"

#include <sstream>

#include <gtest/gtest.h>

namespace cpbench {
namespace {

namespace fs = std::filesystem;

ModelShape llama() {
  auto m = load_model(fs::path(CPBENCH_SOURCE_DIR) / "experiments/models/llama3_8b.json");
  EXPECT_TRUE(m.ok()) << m.error_str();
  return *m;
}

PointConfig point(const std::string& strategy, ParallelConfig l) {
  PointConfig p;
  p.strategy = strategy;
  p.model = llama();
  p.parallel = std::move(l);
  p.parallel.num_gpus = 64;
  p.workload.max_length = 8192;
  p.workload.global_batch_sequences = 512;
  return p;
}

// The layout fields Megatron's arguments carry, printed for a readable comparison.
std::string megatron_view(const ParallelConfig& l, bool varlen) {
  std::ostringstream s;
  s << "t" << l.tp << " p" << l.pp << " vp" << l.vp << " first" << l.first_stage_layers << " last" << l.last_stage_layers
    << " split+emb" << l.account_for_embedding_in_pipeline_split << " split+loss" << l.account_for_loss_in_pipeline_split
    << " c" << l.cp << " " << (l.cp > 1 ? l.cp_comm_type : "-") << " sp" << l.sequence_parallel << " rc " << l.recompute
    << " dopt" << l.distributed_optimizer << " zero3 " << l.zero3 << " ogr" << l.overlap_grad_reduce << " opg"
    << l.overlap_param_gather << " tpo" << l.tp_comm_overlap << " " << l.dtype << " fp32grad" << l.grad_reduce_in_fp32
    << " nan" << l.check_for_nan_in_loss_and_grad << " b" << l.micro_batch_size << " bucket" << l.grad_reduce_bucket_params << " cap"
    << (varlen ? l.max_seqlen_per_dp_cp_rank : 0);
  return s.str();
}

std::string titan_view(const ParallelConfig& l) {
  std::ostringstream s;
  s << "t" << l.tp << " p" << l.pp << " vp" << l.vp << " c" << l.cp << " " << (l.cp > 1 ? l.cp_comm_type : "-") << " sp"
    << l.sequence_parallel << " rc " << l.recompute << " dopt" << l.distributed_optimizer << " zero3 " << l.zero3
    << " tpo" << l.tp_comm_overlap << " b" << (l.pp > 1 ? l.micro_batch_size : 1);
  return s.str();
}

std::vector<PointConfig> layouts() {
  std::vector<PointConfig> out;
  ParallelConfig a;  // Megatron Core on H100: TP 8 with SP and its overlap, interleaved PP, full recompute
  a.tp = 8, a.pp = 4, a.vp = 2, a.sequence_parallel = true, a.tp_comm_overlap = true, a.recompute = "full";
  a.distributed_optimizer = true, a.overlap_param_gather = true, a.grad_reduce_bucket_params = 40000000;
  out.push_back(point("ptdp", a));
  ParallelConfig b;  // CP of every comm type, uneven stages, selective recompute, bf16 gradients
  b.tp = 2, b.pp = 2, b.cp = 4, b.cp_comm_type = "a2a+p2p", b.sequence_parallel = true, b.recompute = "selective";
  b.first_stage_layers = 15, b.last_stage_layers = 17, b.grad_reduce_in_fp32 = false, b.micro_batch_size = 2;
  b.check_for_nan_in_loss_and_grad = true;  // Megatron-LM's default: no flag
  out.push_back(point("ptdp", b));
  for (const char* t : {"p2p", "all_gather", "a2a"}) {
    ParallelConfig c = b;
    c.cp_comm_type = t, c.first_stage_layers = c.last_stage_layers = 0;
    out.push_back(point("ptdp", c));
  }
  ParallelConfig z;  // FSDP
  z.zero3 = true;
  out.push_back(point("zero3", z));
  ParallelConfig v;  // variable-length strategies
  v.pp = 8, v.cp = 2, v.max_seqlen_per_dp_cp_rank = 65536, v.distributed_optimizer = true, v.recompute = "full";
  for (const char* s : {"packing", "dynamic_cp", "dynamic_cp_dev"}) out.push_back(point(s, v));
  ParallelConfig meta = a;  // Llama 3 405B's split: the embedding and the loss each counted as a layer
  meta.pp = 16, meta.vp = 8, meta.account_for_embedding_in_pipeline_split = meta.account_for_loss_in_pipeline_split = true;
  out.push_back(point("ptdp", meta));
  return out;
}

TEST(MegatronArguments, EveryLayoutReadsBackAsItself) {
  for (const auto& p : layouts()) {
    const FrameworkArgs args = megatron_arguments(p);
    std::vector<std::string> tokens;  // as a shell splits the lines
    for (const auto& line : args.lines) {
      std::istringstream words(line);
      for (std::string w; words >> w;) tokens.push_back(w);
    }
    auto back = parse_megatron_arguments(tokens, 64);
    ASSERT_TRUE(back.ok()) << back.error_str();
    const bool varlen = p.strategy != "ptdp" && p.strategy != "zero3";
    EXPECT_EQ(megatron_view(back->parallel, varlen), megatron_view(p.parallel, varlen)) << p.strategy;
    EXPECT_EQ(back->strategy, p.strategy);
  }
}

TEST(MegatronArguments, SpellingAsMegatronReadsIt) {
  const auto all = layouts();
  const FrameworkArgs a = megatron_arguments(all[0]);
  for (const char* want : {"--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4",
                           "--num-virtual-stages-per-pipeline-rank 2", "--sequence-parallel", "--tp-comm-overlap",
                           "--recompute-granularity full", "--recompute-method uniform", "--use-distributed-optimizer",
                           "--overlap-param-gather", "--ddp-bucket-size 40000000", "--global-batch-size 512",
                           "--no-check-for-nan-in-loss-and-grad"})
    EXPECT_NE(std::find(a.lines.begin(), a.lines.end(), want), a.lines.end()) << want;
  const FrameworkArgs usp = megatron_arguments(all[1]);
  // a2a+p2p: 4 CP ranks, heads 32/2 and KV heads 8/2 per TP rank: all-to-all over 4, one ring step.
  EXPECT_NE(std::find(usp.lines.begin(), usp.lines.end(), "--hierarchical-context-parallel-sizes 4 1"), usp.lines.end());
  const FrameworkArgs gather = megatron_arguments(all[3]);
  EXPECT_NE(std::find(gather.lines.begin(), gather.lines.end(), "--cp-comm-type allgather"), gather.lines.end());
  // "--flag=value" reads as "--flag value"; other arguments are not the layout's.
  auto eq = parse_megatron_arguments({"--tensor-model-parallel-size=4", "--lr", "3e-4", "--cp-comm-type=allgather",
                                      "--context-parallel-size", "2"}, 16);
  ASSERT_TRUE(eq.ok()) << eq.error_str();
  EXPECT_EQ(eq->parallel.tp, 4);
  EXPECT_EQ(eq->parallel.cp_comm_type, "all_gather");
  EXPECT_TRUE(eq->parallel.check_for_nan_in_loss_and_grad);  // Megatron-LM's default
}

TEST(MegatronArguments, WhatMegatronLacksIsANoteNotAFlag) {
  ParallelConfig k;
  k.pp = 4, k.recompute = "balanced", k.activation_offload_ratio = 0.5;
  const FrameworkArgs a = megatron_arguments(point("packing_ffd", k));
  for (const auto& line : a.lines) EXPECT_EQ(line.find("recompute"), std::string::npos) << line;
  std::string notes;
  for (const auto& n : a.notes) notes += n + "\n";
  EXPECT_NE(notes.find("Kwai's GEMM-last"), std::string::npos) << notes;
  EXPECT_NE(notes.find("pipeline-aware offloading"), std::string::npos) << notes;
  EXPECT_NE(notes.find("first-fit-decreasing packer is not a Megatron scheduler"), std::string::npos) << notes;
  const FrameworkArgs main = megatron_arguments(point("dynamic_cp", k));
  EXPECT_NE(main.notes.front().find("main refuses --hybrid-context-parallel with pipeline parallelism"), std::string::npos);

  auto bad = parse_megatron_arguments({"--tensor-model-parallel-size", "eight", "--cp-comm-type", "ring",
                                       "--recompute-granularity", "most"}, 8);
  ASSERT_FALSE(bad.ok());
  const std::string e = bad.error_str();
  EXPECT_NE(e.find("--tensor-model-parallel-size: expected a non-negative integer, got \"eight\""), std::string::npos) << e;
  EXPECT_NE(e.find("--cp-comm-type: expected p2p, allgather, a2a or a2a+p2p, got \"ring\""), std::string::npos) << e;
  EXPECT_NE(e.find("--recompute-granularity: expected full or selective"), std::string::npos) << e;
}

TEST(TorchtitanConfig, ExpressibleLayoutsReadBackAsThemselves) {
  int checked = 0;
  for (const auto& p : layouts()) {
    const ParallelConfig& l = p.parallel;
    if (l.cp_comm_type == "a2a" || l.cp_comm_type == "a2a+p2p" || (p.strategy != "ptdp" && p.strategy != "zero3") ||
        l.account_for_embedding_in_pipeline_split) {
      if (l.account_for_embedding_in_pipeline_split)
        EXPECT_NE(torchtitan_config(p).notes.back().find("set torchtitan's pipeline stage split by hand"), std::string::npos);
      continue;  // not torchtitan's (a note says so)
    }
    const FrameworkArgs cfg = torchtitan_config(p);
    std::string toml;
    for (const auto& line : cfg.lines) toml += line + "\n";
    auto back = parse_torchtitan_config(toml, 64, p.model);
    ASSERT_TRUE(back.ok()) << back.error_str();
    EXPECT_EQ(titan_view(back->parallel), titan_view(l)) << toml;
    EXPECT_EQ(back->strategy, p.strategy);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
  const auto all = layouts();
  const FrameworkArgs usp = torchtitan_config(all[1]);
  EXPECT_NE(usp.notes.front().find("no head-parallel (Ulysses) a2a+p2p"), std::string::npos);
  const FrameworkArgs a = torchtitan_config(all[0]);
  for (const char* want : {"[parallelism]", "tensor_parallel_degree = 8", "pipeline_parallel_schedule = \"Interleaved1F1B\"",
                           "pipeline_parallel_layers_per_stage = 4", "data_parallel_shard_degree = 2",
                           "fsdp_reshard_after_forward = \"never\"", "[activation_checkpoint]", "mode = \"full\""})
    EXPECT_NE(std::find(a.lines.begin(), a.lines.end(), want), a.lines.end()) << want;
  auto bad = parse_torchtitan_config("[parallelism]\ntensor_parallel_degree = many\nno equals\n", 8, llama());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error_str().find("parallelism.tensor_parallel_degree: expected an integer, got \"many\""), std::string::npos)
      << bad.error_str();
  EXPECT_NE(bad.error_str().find("line 3: expected key = value"), std::string::npos) << bad.error_str();
}

}  // namespace
}  // namespace cpbench
