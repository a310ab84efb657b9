#include "core/model/model.h"

namespace cpbench {

namespace {
// Far above any published model (the largest SC'21 row has h = 25,600, V = 51,200; Llama-3
// has V = 128,256) yet small enough that products of two shapes stay exact in int64.
constexpr int64_t kMaxDim = int64_t{1} << 24;
}  // namespace

ModelShape parse_model(JsonObject& o) {
  ModelShape m;
  m.name = o.string("name");
  m.layers = o.integer("layers", 1, kMaxDim);
  m.hidden = o.integer("hidden", 1, kMaxDim);
  m.heads = o.integer("heads", 1, kMaxDim);
  m.kv_heads = o.integer_or("kv_heads", m.heads, 1, kMaxDim);
  m.ffn_hidden = o.integer("ffn_hidden", 1, kMaxDim);
  m.gated_mlp = o.boolean("gated_mlp");
  m.vocab = o.integer("vocab", 1, kMaxDim);
  m.norm = o.choice("norm", {"layernorm", "rmsnorm"});
  m.position_embedding = o.choice("position_embedding", {"learned", "rope"});
  m.bias = o.boolean("bias");
  m.tied_embeddings = o.boolean("tied_embeddings");
  m.dropout = o.boolean_or("dropout", true);
  m.source = o.string("source");
  if (o.has("source") && m.source.empty()) o.error("source", "expected a non-empty citation");
  o.finish();

  if (m.heads > 0 && m.hidden % m.heads != 0)
    o.error("heads", "hidden (" + std::to_string(m.hidden) + ") must be a multiple of heads (" +
                         std::to_string(m.heads) + ")");
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
    o.error("kv_heads", "heads (" + std::to_string(m.heads) + ") must be a multiple of kv_heads (" +
                            std::to_string(m.kv_heads) + ")");
  if (m.kv_heads > m.heads) m.kv_heads = m.heads;  // keep the best-effort value usable
  return m;
}

Expected<ModelShape> load_model(const std::filesystem::path& file) {
  auto j = load_json_file(file);
  if (!j) return j.errors();
  Diagnostics diag(file.string());
  JsonObject o(*j, "", diag);
  ModelShape m = parse_model(o);
  if (!diag.ok()) return diag.errors();
  return m;
}

}  // namespace cpbench
