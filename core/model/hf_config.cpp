#include "core/model/hf_config.h"

#include <algorithm>

#include "core/common/json_reader.h"

namespace cpbench {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

// Keys transformers' configs use for a mixture of experts' expert count.
const std::vector<std::string> kExpertKeys = {"num_local_experts", "num_experts", "n_routed_experts",
                                              "moe_num_experts"};

void read_llama_family(JsonObject& o, const std::string& type, ModelShape& m) {
  m.hidden = o.integer("hidden_size", 1, kMaxDim);
  m.heads = o.integer("num_attention_heads", 1, 4096);
  m.kv_heads = o.integer_or("num_key_value_heads", m.heads, 1, 4096);  // absent: multi-head, as transformers reads it
  m.ffn_hidden = o.integer("intermediate_size", 1, kMaxDim);
  m.layers = o.integer("num_hidden_layers", 1, 100000);
  m.vocab = o.integer("vocab_size", 1, int64_t{1} << 31);
  // LlamaConfig, MistralConfig and Qwen2Config all default tie_word_embeddings to false.
  m.tied_embeddings = o.boolean_or("tie_word_embeddings", false);
  m.gated_mlp = true;  // gate_proj, up_proj and down_proj in every member of the family
  m.norm = "rmsnorm";
  m.position_embedding = "rope";
  // Qwen2 puts biases on q, k and v without a key saying so; the others only with attention_bias.
  m.bias = o.boolean_or("attention_bias", type == "qwen2") || o.boolean_or("mlp_bias", false);
  m.dropout = o.number_or("attention_dropout", 0, 0, 1) > 0;
  if (o.has("head_dim") && m.heads > 0 && m.hidden % m.heads == 0) {
    const int64_t head_dim = o.integer("head_dim", 1, 4096);
    if (head_dim != m.hidden / m.heads)
      o.error("head_dim", "cpbench models a head size of hidden_size / num_attention_heads = " +
                              std::to_string(m.hidden / m.heads) + "; this config's is " + std::to_string(head_dim));
  }
}

void read_gpt2(JsonObject& o, ModelShape& m) {
  m.hidden = o.integer("n_embd", 1, kMaxDim);
  m.heads = o.integer("n_head", 1, 4096);
  m.kv_heads = m.heads;
  m.layers = o.integer("n_layer", 1, 100000);
  m.vocab = o.integer("vocab_size", 1, int64_t{1} << 31);
  const json* inner = o.raw("n_inner");  // null: 4 × n_embd (GPT2Config's default)
  m.ffn_hidden = inner && !inner->is_null() ? o.integer("n_inner", 1, kMaxDim) : 4 * m.hidden;
  m.tied_embeddings = o.boolean_or("tie_word_embeddings", true);
  m.gated_mlp = false;
  m.norm = "layernorm";
  m.position_embedding = "learned";
  m.bias = true;
  m.dropout = o.number_or("resid_pdrop", 0.1, 0, 1) > 0 || o.number_or("attn_pdrop", 0.1, 0, 1) > 0;
}

}  // namespace

const std::vector<std::string>& hf_llama_family() {
  static const std::vector<std::string> types = {"llama", "mistral", "qwen2", "qwen3", "olmo", "olmo2",
                                                 "granite", "internlm2", "yi"};
  return types;
}

bool is_hf_config_path(const fs::path& path) {
  std::error_code ec;
  return path.filename() == "config.json" || (fs::is_directory(path, ec) && fs::exists(path / "config.json", ec));
}

Expected<ModelShape> load_hf_config(const fs::path& given) {
  std::error_code ec;
  const fs::path file = fs::is_directory(given, ec) ? given / "config.json" : given;
  auto j = load_json_file(file);
  if (!j) return j.errors();
  Diagnostics diag(file.string());
  JsonObject o(*j, "", diag);
  ModelShape m;
  const std::string type = o.string("model_type");
  for (const auto& key : kExpertKeys)
    if (o.has(key) && (*j)[key].is_number() && (*j)[key].get<double>() > 1)
      o.error(key, "a mixture of experts (" + (*j)[key].dump() + " experts): cpbench models dense decoder layers only");
  const auto& family = hf_llama_family();
  if (std::find(family.begin(), family.end(), type) != family.end()) {
    read_llama_family(o, type, m);
  } else if (type == "gpt2") {
    read_gpt2(o, m);
  } else if (o.has("model_type")) {
    std::string known;
    for (const auto& t : family) known += t + ", ";
    o.error("model_type", "\"" + type + "\" is not a decoder cpbench reads (known: " + known + "gpt2)");
  }
  if (diag.ok() && m.hidden % m.heads != 0)
    o.error(type == "gpt2" ? "n_head" : "num_attention_heads",
            "expected a divisor of the hidden size " + std::to_string(m.hidden) + ", got " + std::to_string(m.heads));
  if (diag.ok() && m.heads % m.kv_heads != 0)
    o.error("num_key_value_heads",
            "expected a divisor of num_attention_heads " + std::to_string(m.heads) + ", got " + std::to_string(m.kv_heads));
  if (!diag.ok()) return diag.errors();
  std::string name = o.string_or("_name_or_path", "");
  if (name.empty()) name = fs::absolute(file).parent_path().filename().string();
  std::replace(name.begin(), name.end(), '/', '_');
  m.name = name.empty() ? "config" : name;
  m.source = "Hugging Face config.json " + file.string() + " (model_type " + type + ")";
  return m;
}

}  // namespace cpbench
