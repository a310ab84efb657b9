// formulas.h — parameter counts, training FLOPs, activation memory and weight/optimizer memory
// of a transformer, each in the form its paper publishes plus an exact count from the shapes.
// Requires: model.h. All results are doubles (FLOPs of a 1T model overflow nothing, but sums of
// squared lengths over a batch exceed int64 for long contexts).
// Note: letters as in model.h. Activation memory assumes 16-bit activations (bytes, not elements).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/model.h"

namespace cpbench {

// What is recomputed in the backward pass. selective = Korthikanti et al.'s selective
// recomputation: the attention core (QKᵀ, softmax, dropout, ·V) is recomputed, GEMM outputs kept.
// balanced = Kwai's (ATC'24) compute-memory balanced checkpointing, "GEMM-last": the element-wise
// outputs between GEMMs (the two norm outputs, the MLP activation's output) are recomputed right
// before the backward that needs them; no GEMM or attention is recomputed.
enum class Recompute { none, selective, full, balanced };

// ---- Parameters -------------------------------------------------------------------------

// Exact parameter count by part, for placing the embedding and output layer on pipeline stages.
struct ParamCount {
  double per_layer = 0;     // one transformer layer: attention, MLP, biases, its two norms
  double embedding = 0;     // V·h word embedding
  double position = 0;      // s·h learned position table (0 with RoPE)
  double output_layer = 0;  // V·h when untied, 0 when tied to the embedding
  double final_norm = 0;    // the norm after the last layer
  double layers_total = 0;  // l · per_layer
  double total() const { return layers_total + embedding + position + output_layer + final_norm; }
};

// Counted from the shapes: Q and output projections h·h each, K and V h·(g·h/a) each (GQA),
// MLP 2·h·H or 3·h·H when gated, biases if `bias` (Q/K/V, out, MLP), LayerNorm 2h (weight and
// bias) or RMSNorm h per norm, two norms per layer plus a final one.
ParamCount param_count(const ModelShape& m, int64_t seq_length);
double params_exact(const ModelShape& m, int64_t seq_length);

// SC'21 closed form (Narayanan et al., SC'21, §5.1): P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)).
// It assumes a GPT layer (MHA, H = 4h, biases, LayerNorm) and tied embeddings, and leaves out
// the final LayerNorm: params_exact = params_sc21 + 2h for such shapes.
double params_sc21(const ModelShape& m, int64_t seq_length);

// ---- FLOPs ------------------------------------------------------------------------------
// A multiply-add is 2 FLOPs. Backward costs twice the forward (gradients of inputs and weights).

// Forward FLOPs of one layer's linear layers for one token: 2·(2h² + 2h·g·h/a + (2|3)·h·H).
double linear_flops_per_token_per_layer(const ModelShape& m);
// Forward FLOPs of one layer's attention core (QKᵀ and attention·V) for sequences with
// Σ L² = sum_sq_tokens: 4·h·ΣL², halved when causal (L²/2 pairs, the convention of Kwai's MFU
// and Megatron's causal FLOPs; the diagonal's L/2 is dropped).
double attention_flops_per_layer(const ModelShape& m, double sum_sq_tokens, bool causal);
// Forward FLOPs of the output layer (logits) for one token: 2·h·V.
double logits_flops_per_token(const ModelShape& m);

// SC'21 FLOPs per iteration (Narayanan et al., SC'21, §5.1), attention counted full (not
// halved for the causal mask), biases/norms/softmax ignored:
//   full_recompute: 96·B·s·l·h²·(1 + s/(6h) + V/(16lh))   (what Table 1's TFLOP/s uses)
//   otherwise:      72·B·s·l·h²·(1 + s/(6h) + V/(12lh))   (Korthikanti et al.'s model FLOPs)
double flops_per_iteration_sc21(const ModelShape& m, int64_t batch, int64_t seq_length,
                                bool full_recompute);

// FLOPs of one training iteration over a packed batch of variable-length sequences, Megatron's
// accounting generalised to GQA and gated MLPs: linear layers and logits scale with
// Σ L = sum_tokens, attention with Σ L² = sum_sq_tokens (each sequence attends only to itself).
// Forward + backward = 3× forward; full recompute adds one forward of every layer (not of the
// logits); selective adds one forward of the attention core only. causal = false counts full
// attention, which is the SC'21 convention: with every L = s and B sequences,
// flops_varlen(m, B·s, B·s², full, false) == flops_per_iteration_sc21(m, B, s, true) on GPTs.
// Note: Korthikanti et al. publish hardware FLOPs with selective recompute as
// 72BLsh²(1 + s/(3h) + V/(12hL)), which charges the attention core twice more (+2.7% on GPT-3);
// here the recompute costs exactly one extra forward of QKᵀ and attention·V (+0.9% on GPT-3).
double flops_varlen(const ModelShape& m, double sum_tokens, double sum_sq_tokens,
                    Recompute recompute, bool causal);

// Kwai's MFU FLOPs per token (Yuan et al., ATC'24; references/kwai.md), as published:
//   6·l·(2h² + 2h²·g/a + 3·h·H) + 6·h·V + 6·l·s·h
// (linear ×6 for forward + backward, causal attention as half of 12·l·s·h, recompute not
// counted). The 3·h·H term assumes a gated MLP, as all of Kwai's models have.
double flops_per_token_kwai(const ModelShape& m, int64_t seq_length);

// ---- Memory -----------------------------------------------------------------------------

// Activation bytes one layer keeps for the backward pass, Korthikanti et al. (arXiv 2205.05198)
// Table 2, 16-bit activations, with dropout, for a GPT layer (MHA, H = 4h, LayerNorm):
//   tp = 1, none:               s·b·h·(34 + 5as/h)
//   TP, none:                   s·b·h·(10 + 24/t + 5as/(h·t))
//   TP + SP, none:              (s·b·h/t)·(34 + 5as/h)
//   TP, selective:              s·b·h·(10 + 24/t)
//   TP + SP, selective:         34·s·b·h/t
//   full:                       2·s·b·h (layer input only), 2·s·b·h/t with SP (the input lives
//                               in the sequence-parallel region, sharded over t)
// Breakdown: attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh. Requires tp >= 1.
double activation_bytes_per_layer(const ModelShape& m, int64_t micro_batch, int64_t seq_length,
                                  int tp, bool sequence_parallel, Recompute recompute);

// What a layer's saved activations depend on beyond the model's shape.
struct LayerActivationOptions {
  int64_t micro_batch = 1;  // b sequences of seq_length tokens each
  int64_t seq_length = 0;
  int tp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  bool flash = true;             // fused attention keeps no s×s scores, only an fp32 LSE per row
  bool dropout = true;           // dropout after attention and MLP (and on the scores, unfused)
  bool elementwise_fusion = true;  // gated MLP: the fused SwiGLU saves its input, not gate/up/act
};

// One activation tensor of a layer's forward, in the order the forward produces it.
struct LayerTensor {
  const char* name = "";
  double bytes = 0;
  bool gradient = false;  // its backward materializes a gradient of the same bytes (not masks, LSE)
  bool saved = false;     // kept for the backward under the recompute mode; else freed once used
};
// Every activation tensor of one layer's forward (what recompute none keeps), each marked saved
// or not under o.recompute; the saved ones are what saved_activation_bytes_per_layer sums, the
// others what the backward recomputes.
std::vector<LayerTensor> layer_activation_tensors(const ModelShape& m, const LayerActivationOptions& o);

// Activation bytes one layer keeps for the backward pass, from the tensors each op saves (16-bit
// values, 1-byte dropout masks), for any decoder layer the ModelShape describes (MHA or GQA, GeLU
// or gated MLP). It reduces to Korthikanti et al.'s Table 2 on a GPT layer (unfused attention,
// dropout) and to Kwai's per-layer formula on a Llama layer (flash, no dropout, unfused SwiGLU)
// plus the LSE. Saved, per layer (÷t inside the TP regions; the rest ÷t only with SP):
//   outside TP: two norm inputs 4sbh, QKV and MLP inputs (norm outputs) 4sbh, dropout masks 2sbh
//   attention:  Q 2sb·a·d, K and V 2sb·g·d each, output O (projection input) 2sb·a·d; unfused
//               adds the softmax output 2as²b (+ its dropout mask as²b and output 2as²b), flash
//               adds the LSE 4sb·a; selective recompute drops the s² terms
//   MLP:        GeLU input and output 2·2sbH; gated 3·2sbH fused (FC1 out 2H, act out H) or
//               4·2sbH unfused (gate, up, act(gate), product)
//   full recompute: the layer input 2sbh only (÷t with SP).
//   balanced: without the two norm outputs (4sbh) and the MLP activation's outputs (fused
//               SwiGLU: act H; unfused: act(gate) and product 2H; GeLU: its output H): the MLP
//               keeps its FC1 output only (2sbH·2 gated, 2sbH not gated)
double saved_activation_bytes_per_layer(const ModelShape& m, const LayerActivationOptions& o);

// Kwai's per-layer activation bytes (Yuan et al., ATC'24; references/kwai.md): bf16,
// FlashAttention, no dropout, SP over t and CP over c:
//   none:     (12 + 4g/a + 8H/h)·s·b·h/(t·c)
//   balanced: (8 + 4g/a + 4H/h)·s·b·h/(t·c)
//   full:     2·s·b·h/(t·c) (the layer input only)
// (recompute none, balanced or full; selective is not one of Kwai's modes and reads as none).
double activation_bytes_per_layer_kwai(const ModelShape& m, int64_t micro_batch,
                                       int64_t seq_length, int tp, int cp,
                                       Recompute checkpointing);

// Weights, gradients and Adam state with mixed precision, per parameter (Megatron-LM README,
// "Distributed Optimizer", its table of theoretical bytes per parameter): the 16-bit weight (2),
// the main gradient (grad_bytes: 4 in fp32, 2 in the 16-bit dtype), and the optimizer's fp32 master
// weight, momentum and variance (12) — plus an fp32 copy of the gradient for the master weight
// when the main gradient is 16-bit (4). The distributed optimizer shards the optimizer's part over
// d data-parallel ranks: 18 or 6 + 12/d with fp32 gradients, 20 or 4 + 16/d with 16-bit ones.
double weight_and_optimizer_bytes(double params_per_gpu, int dp, bool distributed_optimizer, double grad_bytes);

}  // namespace cpbench
