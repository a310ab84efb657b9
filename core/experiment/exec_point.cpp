#include "core/experiment/exec_point.h"

#include <algorithm>

#include "core/experiment/registry.h"
#include "core/hardware/hardware.h"
#include "core/layouts/cp_layouts.h"
#include "core/workload/length_profile.h"
#include "core/workload/mask.h"

namespace cpbench {
namespace {

Error flag_error(const std::string& flag, const std::string& why) { return Error{"command line", flag, why}; }

}  // namespace

Expected<PointConfig> exec_point(const ExecArgs& a, int ranks, const std::filesystem::path& experiments_dir) {
  PointConfig p;
  p.id = "exec";
  auto cluster = load_hardware(hardware_preset_path("cpu_local", experiments_dir));
  if (!cluster) return cluster.errors();
  p.cluster = std::move(*cluster);
  // --gpus-per-node: the ranks a simulated node holds (0: every rank on one node).
  p.cluster.set_gpus_per_node(a.gpus_per_node > 0 ? std::min(a.gpus_per_node, ranks) : ranks);

  ModelShape& m = p.model;
  m.name = "exec";
  m.source = "cpbench exec's --heads, --kv-heads and --head-dim: only the attention shape is used";
  m.layers = 1;
  m.heads = a.heads;
  m.kv_heads = a.kv_heads;
  m.hidden = int64_t{a.heads} * a.head_dim;
  m.ffn_hidden = 4 * m.hidden;
  m.vocab = 1;
  m.norm = "rmsnorm";
  m.position_embedding = "rope";
  m.dropout = false;
  if (a.heads % a.kv_heads != 0)
    return flag_error("--kv-heads", "expected a divisor of --heads " + std::to_string(a.heads) + ", got " +
                                        std::to_string(a.kv_heads));

  ParallelConfig& L = p.parallel;
  L.num_gpus = ranks;
  L.tp = L.pp = 1;
  L.cp = a.dynamic_cp ? 1 : ranks;
  L.attention_value_bytes = a.dtype == "bf16" ? 2 : 4;
  L.attention_per_tile = a.per_tile;
  L.attention_layout = a.layout;
  L.attention_a2a_size = a.a2a_size;
  L.attention_ring_window = a.window;
  if (a.layout == "double_ring" && a.window < 1)
    return flag_error("--window", "double_ring needs the all-to-all groups per inner ring, a divisor of the ring's "
                                  "cp / --a2a-size groups (1 or the whole ring is a2a+p2p's single ring)");
  L.dcp_block_tokens = a.block_tokens;
  L.max_seqlen_per_dp_cp_rank = a.max_seqlen_per_rank;
  if (a.dynamic_cp) {
    const CpLayout* row = find_cp_layout(a.layout);
    L.cp_comm_type = row ? row->te_comm_type : "";
    if (L.cp_comm_type.empty())
      return flag_error("--layout", "--dynamic-cp runs its groups as TransformerEngine does: zigzag (cp_comm_type "
                                    "p2p), all_gather, a2a or a2a+p2p; got " + a.layout);
    if (a.max_seqlen_per_rank < 1)
      return flag_error("--max-seqlen-per-rank", "--dynamic-cp needs the tokens one rank may hold (N ≥ 1)");
    p.strategy = "dynamic_cp";
  } else {
    p.strategy = a.layout == "dcp" ? "dcp_attention" : "cp_attention";
  }
  p.label = p.strategy;
  p.workload.dataset_name = a.dataset.empty() ? "inline" : a.dataset;
  p.workload.seed = a.seed;
  auto mask = mask_from_name(a.mask);
  if (!mask) return flag_error("--mask", mask.error_str());
  p.workload.mask = *mask;
  return p;
}

Expected<GlobalBatch> exec_batch(const ExecArgs& a, const std::filesystem::path& experiments_dir) {
  auto mask = mask_from_name(a.mask);
  if (!mask) return flag_error("--mask", mask.error_str());
  if (!a.lengths.empty()) return GlobalBatch{a.lengths, *mask};
  auto profile = load_length_profile(experiments_dir / "datasets" / (a.dataset + ".json"));
  if (!profile) return profile.errors();
  WorkloadConfig w;
  w.dataset_name = a.dataset;
  w.dataset = *profile;
  w.global_batch_tokens = a.tokens;
  w.min_length = profile->min_length;
  w.max_length = std::min(profile->max_length, a.tokens);
  w.seed = a.seed;
  w.mask = *mask;
  return w.batch();
}

}  // namespace cpbench
