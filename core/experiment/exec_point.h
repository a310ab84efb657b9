// exec_point.h — `cpbench exec` and `cpbench validate` as one-point runs: their flags are mapped
// onto the point a spec would name, and plan_point (runner.h) plans it as `cpbench run` plans
// every point, so exec, validate and `run --backend cpu` execute the same AttentionPlans
// (exec_point_test checks it against a spec). The job's ranks are the point's GPUs, of this
// machine's hardware preset (cpu_local): a static layout is strategy cp_attention (the batch's
// attention on one CP group of every rank), --layout dcp is dcp_attention, --dynamic-cp is
// dynamic_cp (Megatron main's scheduler over the ranks as the DP×CP pool; its groups run
// TransformerEngine's layout of --layout).
// Requires: the experiments folder (presets). Note: a flag that the point cannot hold is an Error
// naming the flag (exit 2 in the CLI).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/common/expected.h"
#include "core/experiment/spec.h"
#include "core/workload/batch.h"

namespace cpbench {

struct ExecArgs {
  std::string layout = "zigzag";
  std::string mask = "causal";
  std::vector<int64_t> lengths;     // explicit sequence lengths, or …
  std::string dataset;              // … a dataset preset sampled up to `tokens`
  int64_t tokens = 16384;
  uint64_t seed = 1;
  int heads = 8, kv_heads = 8, head_dim = 128, a2a_size = 0, window = 0;
  // --layout dcp: ranks per simulated node (0: all on one) and DCP's token block (0: its heuristic).
  int gpus_per_node = 0;
  int64_t block_tokens = 0;
  bool pad = false, backward = false;
  // How the plans run (parallel.attention_value_bytes, parallel.attention_per_tile): values on the
  // wire in `dtype` (bf16: 2 bytes, fp32: 4), and TransformerEngine's style (fused stages,
  // pipelined backward) unless per_tile. Static layouts, DCP and every Dynamic-CP group alike.
  std::string dtype = "fp32";
  bool per_tile = false;
  double timeout_s = 120;
  // The work refused before it starts: the plan's runs (and exec's reference check) simulated
  // with the machine's preset must be predicted to end within this many seconds.
  double time_limit_s = 600;
  // --dynamic-cp: strategy dynamic_cp over the job's ranks (max_seqlen_per_dp_cp_rank =
  // max_seqlen_per_rank); every round's groups run on their ranks, as the layout table's
  // TransformerEngine cp_comm_type of `layout` (CpLayout::te_comm_type: zigzag is p2p's).
  bool dynamic_cp = false;
  int64_t max_seqlen_per_rank = 0;
  // Where the ranks run: "cpu" (the MPI ranks of the job, CPU kernels) or "cuda" (`ranks` threads
  // of this process on its GPU, CUDA kernels, messages as device copies; under mpirun one GPU per
  // rank over NCCL).
  std::string backend = "cpu";
  int ranks = 0;  // cuda: thread ranks (0: refused, say how many)
  // cuda: "exact" (our SIMT kernels in fp32) or "fast" (bf16 arithmetic: cuDNN's fused attention
  // for tiles of its modes, our tensor-core forward for the others; needs dtype bf16).
  std::string kernels = "exact";
};

// The point of `args` on `ranks` ranks (GPUs of the cpu_local preset, --gpus-per-node to a node).
Expected<PointConfig> exec_point(const ExecArgs& args, int ranks, const std::filesystem::path& experiments_dir);

// The batch of `args`: --lengths as given, or the --dataset preset sampled as a spec's workload
// samples it (global_batch_tokens = --tokens, lengths clamped to [the dataset's minimum,
// min(its maximum, --tokens)], --seed), under --mask.
Expected<GlobalBatch> exec_batch(const ExecArgs& args, const std::filesystem::path& experiments_dir);

}  // namespace cpbench
