#include "core/sim/memory.h"

#include <algorithm>

#include "core/model/formulas.h"

namespace cpbench {
namespace {

Recompute recompute_of(const ParallelConfig& p) {
  return p.recompute == "full" ? Recompute::full : p.recompute == "selective" ? Recompute::selective : Recompute::none;
}

}  // namespace

double params_per_gpu(const ModelShape& model, const ParallelConfig& layout, int64_t seq_length, int64_t stage) {
  ParamCount pc = param_count(model, seq_length);
  double layers = static_cast<double>(model.layers) / layout.pp;
  double p = pc.per_layer * layers;
  if (stage == 0) p += pc.embedding + pc.position;
  if (stage == layout.pp - 1) p += pc.final_norm + (pc.output_layer > 0 ? pc.output_layer : (layout.pp > 1 ? pc.embedding : 0));
  return p / layout.tp;
}

MemoryEstimate estimate_memory(const ModelShape& model, const Plan& plan, const MemoryOverheads& overheads) {
  const ParallelConfig& L = plan.layout;
  MemoryEstimate e;
  e.reserved_bytes = overheads.reserved_gib * 1024.0 * 1024.0 * 1024.0;
  int64_t longest = 0, micro_batches = 0;
  const PlanMicroBatch* largest = nullptr;  // the micro-batch with the most tokens
  for (const auto& replica : plan.micro_batches) {
    micro_batches = std::max<int64_t>(micro_batches, replica.size());
    for (const auto& mb : replica) {
      if (!largest || mb.padded_tokens() / mb.cp > largest->padded_tokens() / largest->cp) largest = &mb;
      for (int64_t len : mb.lengths) longest = std::max(longest, len);
    }
  }
  if (!largest) return e;
  e.weights_optimizer_bytes =
      weight_and_optimizer_bytes(params_per_gpu(model, L, longest, 0), static_cast<int>(L.dp() * L.cp),
                                 L.distributed_optimizer);  // sharded over DP with CP

  // Korthikanti's per-layer bytes are linear in the micro-batch size b, so a packed micro-batch
  // costs the sum over its sequences (each attends only to itself). Flash attention keeps no
  // s×s scores: it stores what selective recompute stores, plus an fp32 LSE per row and head.
  // A CP group splits every sequence's tokens evenly: each rank keeps 1/cp of them.
  const Recompute rc = recompute_of(L);
  const bool flash = L.attention_kernel == "flash";
  auto layer_bytes = [&](Recompute mode) {
    double bytes = 0;
    for (int64_t len : largest->padded_lengths()) {
      bool no_scores = flash && mode == Recompute::none;
      bytes += activation_bytes_per_layer(model, 1, len, static_cast<int>(L.tp), L.sequence_parallel,
                                          no_scores ? Recompute::selective : mode);
      if (no_scores) bytes += 4.0 * len * model.heads / L.tp;
    }
    return bytes / static_cast<double>(std::max<int64_t>(1, largest->cp));
  };
  const double per_layer = layer_bytes(rc);
  // 1F1B: the first stage keeps p micro-batches in flight (fewer when m < p); interleaving
  // multiplies by (1 + (p−1)/(p·m)) (Korthikanti et al.).
  const double layers_per_stage = static_cast<double>(model.layers) / L.pp;
  const double in_flight = static_cast<double>(std::min<int64_t>(L.pp, micro_batches));
  double interleave = L.vp > 1 ? 1 + static_cast<double>(L.pp - 1) / (L.pp * micro_batches) : 1;
  e.activation_bytes = per_layer * layers_per_stage * in_flight * interleave;
  // Recomputing (or computing) one layer needs its full activations at once.
  if (rc != Recompute::none)
    e.workspace_bytes = layer_bytes(Recompute::none);
  // The activation pool is allocated and freed every micro-batch, interleaving long-lived saved
  // tensors with short-lived ones: a share f of the memory it reserves is unusable (ZeRO §3.2).
  const double f = overheads.allocator_fragmentation;
  e.fragmentation_bytes = (e.activation_bytes + e.workspace_bytes) * f / (1 - f);
  return e;
}

}  // namespace cpbench
