#include "core/sim/layer_cost.h"

#include <algorithm>
#include <map>

namespace cpbench {
namespace {

constexpr double kAct = 2;  // bytes per 16-bit activation element

// Forward and backward of one GEMM Y[m,n] = X[m,k]·W[k,n]: backward is the input gradient
// dX[m,k] = dY·Wᵀ and the weight gradient dW[k,n] = Xᵀ·dY.
struct Gemm {
  int64_t m, n, k;
};
double fwd(const CostModel& c, const Gemm& g) { return c.gemm_s(g.m, g.n, g.k); }
double bwd(const CostModel& c, const Gemm& g) { return c.gemm_s(g.m, g.k, g.n) + c.gemm_s(g.k, g.n, g.m); }

// Tokens one rank of the micro-batch's CP group holds.
int64_t rank_tokens(const PlanMicroBatch& mb) { return mb.padded_tokens() / std::max<int64_t>(1, mb.cp); }

GroupPlacement tp_group(const CostModel& cost, const ParallelConfig& layout) {
  return placement(layout.tp, 1, cost.cluster().gpus_per_node);
}

// The attention core (scores, softmax, weighted sum) of a micro-batch on one TP rank.
PassCost attention_core(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                        const PlanMicroBatch& mb, bool backward) {
  PassCost p;
  const int64_t heads = m.heads / layout.tp;
  const int64_t d = m.head_dim();
  if (layout.attention_kernel == "flash") {
    // One varlen kernel over the packed sequences; mean_len = 2·pairs / query rows makes the
    // cost model's per-row overhead exact for the pack (attention_sim.h uses the same rule).
    double pairs = 0, rows = 0;
    for (int64_t L : mb.padded_lengths()) {
      pairs += 0.5 * static_cast<double>(L) * static_cast<double>(L + 1);  // causal
      rows += static_cast<double>(L);
    }
    const double mean_len = rows > 0 ? 2 * pairs / rows : 0;
    p.compute_s = backward ? cost.flash_attention_bwd_s(pairs, heads, d, mean_len)
                           : cost.flash_attention_fwd_s(pairs, heads, d, mean_len);
    return p;
  }
  // Unfused (Megatron 2021): per sequence length, batched GEMMs over (sequences × heads); the
  // scores S and probabilities P (s×s per head) go through HBM for the fused scale-mask-softmax
  // and for dropout (a 1-byte mask). Forward: S=QKᵀ, P=softmax(S), P'=dropout(P), O=P'V.
  std::map<int64_t, int64_t> count;
  for (int64_t L : mb.padded_lengths()) ++count[L];
  for (const auto& [s, n] : count) {
    const int64_t batch = n * heads;
    const double scores_bytes = kAct * static_cast<double>(batch) * s * s;
    if (!backward) {
      p.compute_s += cost.gemm_s(s, s, d, batch) + cost.gemm_s(s, d, s, batch);
      if (layout.elementwise_fusion) {
        p.compute_s += cost.memory_bound_s(2 * scores_bytes);  // fused scale-mask-softmax: read S, write P
      } else {
        // masked_fill_ then softmax, each reading and writing the scores. Megatron's SC'21 runs
        // leave --apply-query-key-layer-scaling off (examples/sc21/CONFIG.sh), so there is no
        // extra scale kernel (1/√d is baddbmm's alpha) and the softmax stays in fp16.
        for (int k = 0; k < 2; ++k) p.compute_s += cost.memory_bound_s(2 * scores_bytes);
      }
      p.compute_s += cost.memory_bound_s(2 * scores_bytes + scores_bytes / 2);  // dropout: read P, write P', mask
    } else {
      // dP' = dO·Vᵀ, dV = P'ᵀ·dO, dS = softmax'(dropout'(dP')), dQ = dS·K, dK = dSᵀ·Q.
      p.compute_s += cost.gemm_s(s, s, d, batch) + 3 * cost.gemm_s(s, d, s, batch);
      p.compute_s += cost.memory_bound_s(2 * scores_bytes + scores_bytes / 2);  // dropout bwd
      p.compute_s += cost.memory_bound_s(3 * scores_bytes);  // softmax bwd: P, dP in; dS out
      if (!layout.elementwise_fusion)  // masked_fill_ backward reads and writes dS
        p.compute_s += cost.memory_bound_s(2 * scores_bytes);
    }
  }
  return p;
}

}  // namespace

GroupPlacement placement(int64_t size, int64_t stride, int64_t gpus_per_node) {
  if (size <= 1) return {1, 1};
  int64_t per_node = stride >= gpus_per_node ? 1 : std::min(size, gpus_per_node / stride);
  return {size, std::max<int64_t>(1, per_node)};
}

LayerCost layer_cost(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                     const PlanMicroBatch& mb, const AttentionCost* attention) {
  LayerCost c;
  if (mb.lengths.empty()) return c;  // an idle slot
  const int64_t t = layout.tp;
  const int64_t T = rank_tokens(mb);
  const int64_t h = m.hidden;
  const int64_t qkv_n = (h + 2 * m.kv_dim()) / t;
  const int64_t ffn_n = (m.gated_mlp ? 2 : 1) * m.ffn_hidden / t;
  const Gemm qkv{T, qkv_n, h}, proj{T, h, h / t}, fc1{T, ffn_n, h}, fc2{T, h, m.ffn_hidden / t};

  // Element-wise traffic per layer (bytes): two norms (read x, write y), the MLP activation
  // (bias + GeLU reads and writes ffn/t per token; SwiGLU reads two halves), two fused
  // bias-dropout-residual adds (read x and residual, write, 1-byte mask). With sequence
  // parallelism the norms and residual adds see T/t tokens.
  // Without Megatron's fusions (elementwise_fusion false) the bias add, the activation and the
  // bias, dropout and residual adds are separate kernels: the MLP activation reads and writes its
  // tensor twice (bias add, GeLU; bias-free SwiGLU: activation 2 passes + product 3, against 3
  // fused), each bias-dropout-add becomes add (2 passes) + dropout (2.5) + add (3) = 7.5, and 5
  // more kernels launch per pass.
  const bool fused = layout.elementwise_fusion;
  const double norm_tokens = layout.sequence_parallel ? static_cast<double>(T) / t : T;
  const double act_passes = m.gated_mlp ? (fused ? 3 : 5) : (fused ? 2 : 4);
  const double residual_passes = fused ? 3.5 : 7.5;
  const double ew_fwd = kAct * (2 * 2 * norm_tokens * h + act_passes * static_cast<double>(T) * m.ffn_hidden / t +
                                2 * residual_passes * norm_tokens * h);
  const double extra_launches_s = fused ? 0 : 5 * cost.params().kernel_overhead_us * 1e-6;
  // Backward reads the saved input and the incoming gradient and writes the input gradient.
  const double ew_bwd = 1.5 * ew_fwd;

  // TP collectives of activations [T, h] (16-bit): all-reduce ×2 per pass without SP;
  // all-gather + reduce-scatter ×2 with SP (same bus traffic, no redundant norm work).
  const double act_bytes = kAct * static_cast<double>(T) * h;
  const GroupPlacement tp = tp_group(cost, layout);
  const double tp_pass = layout.sequence_parallel
                             ? 2 * (cost.collective_s(Collective::all_gather, act_bytes, tp) +
                                    cost.collective_s(Collective::reduce_scatter, act_bytes, tp))
                             : 2 * cost.collective_s(Collective::all_reduce, act_bytes, tp);
  const LinkBytes tp_pass_bytes =
      layout.sequence_parallel
          ? (collective_sent_bytes(Collective::all_gather, act_bytes, tp) +=
             collective_sent_bytes(Collective::reduce_scatter, act_bytes, tp)) * 2
          : collective_sent_bytes(Collective::all_reduce, act_bytes, tp) * 2;

  PassCost attn_f, attn_b;
  if (attention) {
    attn_f.compute_s = attention->fwd_s - attention->fwd_wait_s;
    attn_f.cp_wait_s = attention->fwd_wait_s;
    attn_b.compute_s = attention->bwd_s - attention->bwd_wait_s;
    attn_b.cp_wait_s = attention->bwd_wait_s;
  } else {
    attn_f = attention_core(cost, m, layout, mb, false);
    attn_b = attention_core(cost, m, layout, mb, true);
  }
  c.forward.compute_s = fwd(cost, qkv) + fwd(cost, proj) + fwd(cost, fc1) + fwd(cost, fc2) + attn_f.compute_s +
                        cost.memory_bound_s(ew_fwd) + extra_launches_s;
  c.forward.tp_comm_s = tp_pass;
  c.forward.tp_bytes = tp_pass_bytes;
  c.forward.cp_wait_s = attn_f.cp_wait_s;
  c.backward.cp_wait_s = attn_b.cp_wait_s;
  c.backward.compute_s = bwd(cost, qkv) + bwd(cost, proj) + bwd(cost, fc1) + bwd(cost, fc2) + attn_b.compute_s +
                         cost.memory_bound_s(ew_bwd) + extra_launches_s;
  c.backward.tp_comm_s = tp_pass;
  c.backward.tp_bytes = tp_pass_bytes;
  if (layout.recompute == "full") {
    // The whole layer's forward runs again, TP collectives included, before its backward.
    c.backward.compute_s += c.forward.compute_s;
    c.backward.tp_comm_s += c.forward.tp_comm_s;
    c.backward.tp_bytes += c.forward.tp_bytes;
    c.backward.cp_wait_s += c.forward.cp_wait_s;
  } else if (layout.recompute == "selective") {
    c.backward.compute_s += attn_f.compute_s;  // Korthikanti et al.: only the attention core
    c.backward.cp_wait_s += attn_f.cp_wait_s;
  }
  return c;
}

LayerCost embedding_cost(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                         const PlanMicroBatch& mb) {
  // Gather rows of the (vocabulary-parallel) table, add positions, all-reduce over TP.
  const double bytes = kAct * static_cast<double>(rank_tokens(mb)) * m.hidden;
  LayerCost c;
  if (bytes <= 0) return c;
  c.forward.compute_s = cost.memory_bound_s(3 * bytes);
  c.forward.tp_comm_s = cost.collective_s(Collective::all_reduce, bytes, tp_group(cost, layout));
  c.forward.tp_bytes = collective_sent_bytes(Collective::all_reduce, bytes, tp_group(cost, layout));
  c.backward.compute_s = cost.memory_bound_s(3 * bytes);  // scatter-add of the gradient rows
  return c;
}

LayerCost output_layer_cost(const CostModel& cost, const ModelShape& m, const ParallelConfig& layout,
                            const PlanMicroBatch& mb) {
  const int64_t T = rank_tokens(mb);
  if (T == 0) return {};
  const Gemm logits{T, m.vocab / layout.tp, m.hidden};
  // Vocabulary-parallel cross-entropy in fp32: max, sum-exp and gradient passes over the logits,
  // plus three small all-reduces of [T] fp32 statistics.
  const double logit_bytes = 4.0 * static_cast<double>(T) * m.vocab / layout.tp;
  const GroupPlacement tp = tp_group(cost, layout);
  LayerCost c;
  c.forward.compute_s = fwd(cost, logits) + cost.memory_bound_s(3 * logit_bytes);
  c.forward.tp_comm_s = 3 * cost.collective_s(Collective::all_reduce, 4.0 * T, tp);
  c.forward.tp_bytes = collective_sent_bytes(Collective::all_reduce, 4.0 * T, tp) * 3;
  c.backward.compute_s = bwd(cost, logits) + cost.memory_bound_s(2 * logit_bytes);
  c.backward.tp_comm_s = cost.collective_s(Collective::all_reduce, kAct * static_cast<double>(T) * m.hidden, tp);
  c.backward.tp_bytes = collective_sent_bytes(Collective::all_reduce, kAct * static_cast<double>(T) * m.hidden, tp);
  return c;
}

}  // namespace cpbench
