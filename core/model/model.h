// model.h — the shape of a decoder-only transformer (GPT or Llama family) and its loading from
// experiments/models/*.json.
// Requires: core/common/json_reader.h. Shapes only: FLOPs, parameters, memory are in formulas.h.
// Note: every key is required except "kv_heads" (defaults to "heads": multi-head attention) and
// "dropout" (defaults to true).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/common/expected.h"
#include "core/common/json_reader.h"

namespace cpbench {

// Letters used across core/model: l = layers, h = hidden, a = heads, g = kv_heads,
// H = ffn_hidden, V = vocab, s = sequence length, b = micro-batch, B = global batch.
struct ModelShape {
  std::string name;
  int64_t layers = 0;       // l
  int64_t hidden = 0;       // h
  int64_t heads = 0;        // a: query heads
  int64_t kv_heads = 0;     // g: key/value heads (g < a is GQA, g == a is MHA)
  int64_t ffn_hidden = 0;   // H: inner size of the MLP (4h for GPT)
  bool gated_mlp = false;   // SwiGLU-style MLP: gate, up and down matrices instead of two
  int64_t vocab = 0;        // V, as trained (padded vocabularies are written padded)
  std::string norm;                // "layernorm" (weight and bias) | "rmsnorm" (weight only)
  std::string position_embedding;  // "learned" (an s×h table, GPT) | "rope" (no parameters)
  bool bias = false;               // biases in the linear layers (GPT yes, Llama no)
  // The output layer reuses the input embedding (SC'21 GPT, as Megatron's default) or has its
  // own V×h matrix (Llama, untie_embeddings_and_output_weights).
  bool tied_embeddings = false;
  // Dropout after attention and MLP and on the attention scores, as GPT and Megatron's defaults
  // train (hidden and attention dropout 0.1); Llama recipes train without (dropout 0): its masks
  // are then not saved for the backward pass.
  bool dropout = true;
  std::string source;  // where the shape comes from (paper, table, model card)

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }  // width of the K (or V) projection
  bool operator==(const ModelShape&) const = default;
};

// Reads a model object and calls o.finish(). Checks hidden % heads == 0 (error at /heads) and
// heads % kv_heads == 0 (error at /kv_heads); problems go to o.diag().
ModelShape parse_model(JsonObject& o);

// Loads experiments/models/NAME.json (or any file of that form).
Expected<ModelShape> load_model(const std::filesystem::path& file);

}  // namespace cpbench
