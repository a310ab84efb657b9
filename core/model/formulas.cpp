#include "core/model/formulas.h"

namespace cpbench {

// ---- Parameters -------------------------------------------------------------------------

ParamCount param_count(const ModelShape& m, int64_t seq_length) {
  const double h = static_cast<double>(m.hidden);
  const double kv = static_cast<double>(m.kv_dim());
  const double ffn = static_cast<double>(m.ffn_hidden);
  const double norm = m.norm == "layernorm" ? 2 * h : h;  // LayerNorm has a bias, RMSNorm not

  double attention = h * h + 2 * h * kv + h * h;  // Q, K, V (GQA narrows K and V), output
  double mlp = (m.gated_mlp ? 3 : 2) * h * ffn;   // gate + up + down, or fc1 + fc2
  if (m.bias) {
    attention += h + 2 * kv + h;
    mlp += (m.gated_mlp ? 2 * ffn : ffn) + h;
  }

  ParamCount p;
  p.per_layer = attention + mlp + 2 * norm;
  p.layers_total = static_cast<double>(m.layers) * p.per_layer;
  p.embedding = static_cast<double>(m.vocab) * h;
  p.position = m.position_embedding == "learned" ? static_cast<double>(seq_length) * h : 0;
  p.output_layer = m.tied_embeddings ? 0 : static_cast<double>(m.vocab) * h;
  p.final_norm = norm;
  return p;
}

double params_exact(const ModelShape& m, int64_t seq_length) {
  return param_count(m, seq_length).total();
}

double params_sc21(const ModelShape& m, int64_t seq_length) {
  const double l = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double V = static_cast<double>(m.vocab), s = static_cast<double>(seq_length);
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

// ---- FLOPs ------------------------------------------------------------------------------

double linear_flops_per_token_per_layer(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden);
  const double kv = static_cast<double>(m.kv_dim());
  const double ffn = static_cast<double>(m.ffn_hidden);
  const double weights = 2 * h * h + 2 * h * kv + (m.gated_mlp ? 3 : 2) * h * ffn;
  return 2 * weights;
}

double attention_flops_per_layer(const ModelShape& m, double sum_sq_tokens, bool causal) {
  // QKᵀ: 2·L·L·(a·d) and attention·V: 2·L·L·(a·d) with a·d = h; GQA shares K/V between query
  // heads but every query head still does its own products.
  const double full = 4 * static_cast<double>(m.hidden) * sum_sq_tokens;
  return causal ? full / 2 : full;
}

double logits_flops_per_token(const ModelShape& m) {
  return 2 * static_cast<double>(m.hidden) * static_cast<double>(m.vocab);
}

double flops_per_iteration_sc21(const ModelShape& m, int64_t batch, int64_t seq_length,
                                bool full_recompute) {
  const double B = static_cast<double>(batch), s = static_cast<double>(seq_length);
  const double l = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double V = static_cast<double>(m.vocab);
  if (full_recompute) return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

double flops_varlen(const ModelShape& m, double sum_tokens, double sum_sq_tokens,
                    Recompute recompute, bool causal) {
  // Forward passes charged per layer: 1 forward + 2 (backward) + 1 if recomputed (balanced
  // recomputes only element-wise ops: no FLOPs counted here).
  const double linear_passes = recompute == Recompute::full ? 4 : 3;
  const double attention_passes = recompute == Recompute::selective || recompute == Recompute::full ? 4 : 3;
  const double per_layer = linear_passes * linear_flops_per_token_per_layer(m) * sum_tokens +
                           attention_passes * attention_flops_per_layer(m, sum_sq_tokens, causal);
  // The output layer sits outside the checkpointed layers: never recomputed.
  const double logits = 3 * logits_flops_per_token(m) * sum_tokens;
  return static_cast<double>(m.layers) * per_layer + logits;
}

double flops_per_token_kwai(const ModelShape& m, int64_t seq_length) {
  const double l = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double g = static_cast<double>(m.kv_heads), a = static_cast<double>(m.heads);
  const double H = static_cast<double>(m.ffn_hidden), V = static_cast<double>(m.vocab);
  const double s = static_cast<double>(seq_length);
  return 6 * l * (2 * h * h + 2 * h * h * g / a + 3 * h * H) + 6 * h * V + 6 * l * s * h;
}

// ---- Memory -----------------------------------------------------------------------------

double activation_bytes_per_layer(const ModelShape& m, int64_t micro_batch, int64_t seq_length,
                                  int tp, bool sequence_parallel, Recompute recompute) {
  const double s = static_cast<double>(seq_length), b = static_cast<double>(micro_batch);
  const double h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads);
  const double t = static_cast<double>(tp);
  const double sbh = s * b * h;
  // 5as²b: softmax output (2as²b), its dropout mask (as²b) and dropout output (2as²b).
  const double scores = 5 * a * s / h;

  switch (recompute) {
    case Recompute::full:
      return sequence_parallel ? 2 * sbh / t : 2 * sbh;
    case Recompute::selective:
      // The attention scores are recomputed; what remains is 34sbh, of which 24sbh is inside
      // the TP regions and 10sbh (LayerNorms, dropouts, their inputs) is sharded only by SP.
      return sequence_parallel ? 34 * sbh / t : sbh * (10 + 24 / t);
    case Recompute::none:
    case Recompute::balanced:  // not one of the paper's modes: read as none
      return sequence_parallel ? (sbh / t) * (34 + scores) : sbh * (10 + 24 / t + scores / t);
  }
  return 0;
}

std::vector<LayerTensor> layer_activation_tensors(const ModelShape& m, const LayerActivationOptions& o) {
  const double s = static_cast<double>(o.seq_length), b = static_cast<double>(o.micro_batch);
  const double h = static_cast<double>(m.hidden), a = static_cast<double>(m.heads);
  const double d = static_cast<double>(m.head_dim()), g = static_cast<double>(m.kv_heads);
  const double H = static_cast<double>(m.ffn_hidden), t = static_cast<double>(o.tp);
  const double sb = s * b;
  const double outside = (o.sequence_parallel ? 1 / t : 1) * sb;  // SP shards the rest over t
  const double inside = sb / t;
  const bool full = o.recompute == Recompute::full, balanced = o.recompute == Recompute::balanced;
  const bool none = o.recompute == Recompute::none;
  // {name, bytes, has a 16-bit gradient, saved under the mode}; full recompute keeps only the
  // layer input (the attention norm's input).
  std::vector<LayerTensor> list;
  auto add = [&](const char* name, double bytes, bool gradient, bool saved) {
    list.push_back({name, bytes, gradient, saved && !full});
  };
  list.push_back({"layer input", 2 * outside * h, true, true});
  add("QKV input", 2 * outside * h, true, !balanced);  // the norm's output
  add("Q", 2 * inside * a * d, true, true);
  add("K", 2 * inside * g * d, true, true);
  add("V", 2 * inside * g * d, true, true);
  if (o.flash) {
    add("LSE", 4 * inside * a, false, true);  // fp32 log-sum-exp per row and head
  } else {
    add("softmax output", 2 * a * s * s * b / t, true, none);  // selective recomputes the s² terms
    if (o.dropout) {
      add("softmax dropout mask", a * s * s * b / t, false, none);
      add("softmax dropout output", 2 * a * s * s * b / t, true, none);
    }
  }
  add("attention output", 2 * inside * a * d, true, true);  // the projection's input
  if (o.dropout) add("attention dropout mask", outside * h, false, true);
  add("MLP norm input", 2 * outside * h, true, true);
  add("MLP input", 2 * outside * h, true, !balanced);  // the norm's output
  if (!m.gated_mlp) {
    add("FC1 output", 2 * inside * H, true, true);
    add("GeLU output", 2 * inside * H, true, !balanced);
  } else if (o.elementwise_fusion) {
    add("FC1 output", 4 * inside * H, true, true);  // gate and up, one tensor
    add("SwiGLU output", 2 * inside * H, true, !balanced);
  } else {
    add("gate", 2 * inside * H, true, true);
    add("up", 2 * inside * H, true, true);
    add("act(gate)", 2 * inside * H, true, !balanced);
    add("act(gate)·up", 2 * inside * H, true, !balanced);
  }
  if (o.dropout) add("MLP dropout mask", outside * h, false, true);
  return list;
}

double saved_activation_bytes_per_layer(const ModelShape& m, const LayerActivationOptions& o) {
  double bytes = 0;
  for (const LayerTensor& tensor : layer_activation_tensors(m, o)) bytes += tensor.saved ? tensor.bytes : 0;
  return bytes;
}

double activation_bytes_per_layer_kwai(const ModelShape& m, int64_t micro_batch, int64_t seq_length,
                                       int tp, int cp, Recompute checkpointing) {
  const double s = static_cast<double>(seq_length), b = static_cast<double>(micro_batch);
  const double h = static_cast<double>(m.hidden), H = static_cast<double>(m.ffn_hidden);
  const double gqa = static_cast<double>(m.kv_heads) / static_cast<double>(m.heads);
  const double shard = s * b * h / (static_cast<double>(tp) * static_cast<double>(cp));
  switch (checkpointing) {
    case Recompute::none:
    case Recompute::selective:  // flash attention keeps no scores: nothing for selective to drop
      return (12 + 4 * gqa + 8 * H / h) * shard;
    case Recompute::balanced:
      // The element-wise outputs between GEMMs are recomputed, not kept: the two RMSNorm
      // outputs (4sh) and the SwiGLU intermediates (4sH).
      return (8 + 4 * gqa + 4 * H / h) * shard;
    case Recompute::full:
      return 2 * shard;
  }
  return 0;
}

double weight_and_optimizer_bytes(double params_per_gpu, int dp, bool distributed_optimizer, double grad_bytes) {
  const double optimizer = 12 + (grad_bytes < 4 ? 4 : 0);
  const double shards = distributed_optimizer ? static_cast<double>(dp) : 1;
  return (2 + grad_bytes + optimizer / shards) * params_per_gpu;
}

}  // namespace cpbench
