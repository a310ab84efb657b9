#include "core/plan/attention_plan_json.h"

#include <cstdint>
#include <limits>

namespace cpbench {

namespace {

constexpr const char* kFormat = "cpbench attention plans";
constexpr int64_t kVersion = 1;
constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxTokens = int64_t{1} << 40;
constexpr AttnTensor kTensors[] = {AttnTensor::q,   AttnTensor::kv, AttnTensor::out,
                                   AttnTensor::dout, AttnTensor::dq, AttnTensor::dkv};

json slice_json(const AttnSlice& s) { return json::array({s.seq, s.tok_begin, s.tok_end, s.head_begin, s.head_end}); }

json transfer_json(const AttnTransfer& t) {
  return json::array({t.src, t.dst, attn_tensor_name(t.tensor), slice_json(t.slice), t.relay});
}

json transfers_json(const std::vector<AttnTransfer>& ts) {
  json a = json::array();
  for (const AttnTransfer& t : ts) a.push_back(transfer_json(t));
  return a;
}

json tiles_json(const std::vector<std::vector<AttnTile>>& tiles) {
  json a = json::array();
  for (const auto& rank : tiles) {
    json r = json::array();
    for (const AttnTile& t : rank) r.push_back(json::array({slice_json(t.q), slice_json(t.kv)}));
    a.push_back(std::move(r));
  }
  return a;
}

// Forward stages and backward phases alike: {"transfers", "tiles"} each.
template <class Phase>
json phases_json(const std::vector<Phase>& phases) {
  json a = json::array();
  for (const Phase& ph : phases) a.push_back({{"transfers", transfers_json(ph.transfers)}, {"tiles", tiles_json(ph.tiles)}});
  return a;
}

// The array at `pointer` with `n` elements (any length when n < 0); null after an error.
const json* array_at(const json& j, const std::string& pointer, int n, Diagnostics& diag) {
  if (!j.is_array()) {
    diag.error(pointer, "expected an array, got " + json_type_name(j));
    return nullptr;
  }
  if (n >= 0 && j.size() != static_cast<size_t>(n)) {
    diag.error(pointer, "expected an array of " + std::to_string(n) + " elements, got " + std::to_string(j.size()));
    return nullptr;
  }
  return &j;
}

int64_t integer_at(const json& j, const std::string& pointer, int64_t lo, int64_t hi, Diagnostics& diag) {
  if (!j.is_number_integer()) {
    diag.error(pointer, "expected an integer, got " + json_type_name(j));
    return lo;
  }
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) {
    diag.error(pointer, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                            std::to_string(v));
    return lo;
  }
  return v;
}

AttnSlice parse_slice(const json& j, const std::string& pointer, Diagnostics& diag) {
  AttnSlice s;
  if (!array_at(j, pointer + " (a slice [seq, tok_begin, tok_end, head_begin, head_end])", 5, diag)) return s;
  auto at = [&](size_t i, int64_t hi) { return integer_at(j[i], json_pointer_append(pointer, i), 0, hi, diag); };
  s.seq = static_cast<int32_t>(at(0, kMaxIndex));
  s.tok_begin = at(1, kMaxTokens);
  s.tok_end = at(2, kMaxTokens);
  s.head_begin = static_cast<int32_t>(at(3, kMaxIndex));
  s.head_end = static_cast<int32_t>(at(4, kMaxIndex));
  if (s.tok_end < s.tok_begin || s.head_end < s.head_begin)
    diag.error(pointer, "a slice's ends must not precede its beginnings");
  return s;
}

AttnTransfer parse_transfer(const json& j, const std::string& pointer, Diagnostics& diag) {
  AttnTransfer t;
  if (!array_at(j, pointer + " (a transfer [src, dst, tensor, slice, relay])", 5, diag)) return t;
  t.src = static_cast<int32_t>(integer_at(j[0], json_pointer_append(pointer, 0), 0, kMaxIndex, diag));
  t.dst = static_cast<int32_t>(integer_at(j[1], json_pointer_append(pointer, 1), 0, kMaxIndex, diag));
  bool known = false;
  if (j[2].is_string())
    for (AttnTensor tensor : kTensors)
      if (j[2].get<std::string>() == attn_tensor_name(tensor)) {
        t.tensor = tensor;
        known = true;
      }
  if (!known)
    diag.error(json_pointer_append(pointer, 2), "expected a tensor name (q, kv, out, dout, dq or dkv), got " + j[2].dump());
  t.slice = parse_slice(j[3], json_pointer_append(pointer, 3), diag);
  if (!j[4].is_boolean())
    diag.error(json_pointer_append(pointer, 4), "expected true or false (relay), got " + json_type_name(j[4]));
  else
    t.relay = j[4].get<bool>();
  return t;
}

std::vector<AttnTransfer> parse_transfers(const json& j, const std::string& pointer, Diagnostics& diag) {
  std::vector<AttnTransfer> out;
  if (!array_at(j, pointer, -1, diag)) return out;
  for (size_t i = 0; i < j.size(); ++i) out.push_back(parse_transfer(j[i], json_pointer_append(pointer, i), diag));
  return out;
}

std::vector<std::vector<AttnTile>> parse_tiles(const json& j, const std::string& pointer, Diagnostics& diag) {
  std::vector<std::vector<AttnTile>> out;
  if (!array_at(j, pointer + " (one array of tiles per rank)", -1, diag)) return out;
  for (size_t r = 0; r < j.size(); ++r) {
    const std::string rp = json_pointer_append(pointer, r);
    auto& rank = out.emplace_back();
    if (!array_at(j[r], rp, -1, diag)) continue;
    for (size_t i = 0; i < j[r].size(); ++i) {
      const std::string tp = json_pointer_append(rp, i);
      if (!array_at(j[r][i], tp + " (a tile [q slice, kv slice])", 2, diag)) continue;
      rank.push_back({parse_slice(j[r][i][0], json_pointer_append(tp, 0), diag),
                      parse_slice(j[r][i][1], json_pointer_append(tp, 1), diag)});
    }
  }
  return out;
}

}  // namespace

json attention_plan_json(const AttentionPlan& plan) {
  json j;
  j["seq_lengths"] = plan.seq_lengths;
  j["mask"] = mask_json(plan.mask);
  j["heads_q"] = plan.heads_q;
  j["heads_kv"] = plan.heads_kv;
  j["head_dim"] = plan.head_dim;
  j["layout"] = plan.layout;
  j["ranks"] = plan.ranks;
  j["value_bytes"] = plan.value_bytes;
  j["grad_bytes"] = plan.grad_bytes;
  j["fused_stages"] = plan.fused_stages;
  j["pipelined_backward"] = plan.pipelined_backward;
  j["causal_envelope_work"] = plan.causal_envelope_work;
  j["host_ops_per_sequence_fwd"] = plan.host_ops_per_sequence_fwd;
  j["host_ops_per_sequence_bwd"] = plan.host_ops_per_sequence_bwd;
  j["collective_exchange"] = plan.collective_exchange;
  json home = json::array();
  for (const auto& rank : plan.home) {
    json r = json::array();
    for (const AttnSlice& s : rank) r.push_back(slice_json(s));
    home.push_back(std::move(r));
  }
  j["home"] = std::move(home);
  j["stages"] = phases_json(plan.stages);
  j["gather_out"] = transfers_json(plan.gather_out);
  j["backward"] = phases_json(plan.backward);
  return j;
}

AttentionPlan parse_attention_plan(const json& j, const std::string& pointer, Diagnostics& diag) {
  AttentionPlan p;
  JsonObject o(j, pointer, diag);
  const json& lengths = o.array("seq_lengths");
  for (size_t i = 0; i < lengths.size(); ++i)
    p.seq_lengths.push_back(integer_at(lengths[i], json_pointer_append(o.pointer_of("seq_lengths"), i), 0, kMaxTokens, diag));
  JsonObject mask = o.object("mask");
  p.mask = parse_mask(mask);
  p.heads_q = static_cast<int32_t>(o.integer("heads_q", 1, 1 << 20));
  p.heads_kv = static_cast<int32_t>(o.integer("heads_kv", 1, 1 << 20));
  p.head_dim = static_cast<int32_t>(o.integer("head_dim", 1, 1 << 20));
  p.layout = o.string("layout");
  p.ranks = static_cast<int32_t>(o.integer("ranks", 1, kMaxIndex));
  p.value_bytes = static_cast<int32_t>(o.integer("value_bytes", 1, 8));
  p.grad_bytes = static_cast<int32_t>(o.integer("grad_bytes", 0, 8));
  p.fused_stages = o.boolean("fused_stages");
  p.pipelined_backward = o.boolean("pipelined_backward");
  p.causal_envelope_work = o.boolean("causal_envelope_work");
  p.host_ops_per_sequence_fwd = static_cast<int32_t>(o.integer("host_ops_per_sequence_fwd", 0, kMaxIndex));
  p.host_ops_per_sequence_bwd = static_cast<int32_t>(o.integer("host_ops_per_sequence_bwd", 0, kMaxIndex));
  p.collective_exchange = o.boolean("collective_exchange");
  const json& home = o.array("home");
  for (size_t r = 0; r < home.size(); ++r) {
    const std::string rp = json_pointer_append(o.pointer_of("home"), r);
    auto& rank = p.home.emplace_back();
    if (!array_at(home[r], rp + " (a rank's home slices)", -1, diag)) continue;
    for (size_t i = 0; i < home[r].size(); ++i) rank.push_back(parse_slice(home[r][i], json_pointer_append(rp, i), diag));
  }
  // A stage and a backward phase are both {"transfers", "tiles"}.
  auto phases = [&](const std::string& key, auto& into) {
    const json& a = o.array(key);
    for (size_t i = 0; i < a.size(); ++i) {
      JsonObject ph(a[i], json_pointer_append(o.pointer_of(key), i), diag);
      auto& out = into.emplace_back();
      out.transfers = parse_transfers(ph.array("transfers"), ph.pointer_of("transfers"), diag);
      out.tiles = parse_tiles(ph.array("tiles"), ph.pointer_of("tiles"), diag);
      ph.finish();
    }
  };
  phases("stages", p.stages);
  p.gather_out = parse_transfers(o.array("gather_out"), o.pointer_of("gather_out"), diag);
  phases("backward", p.backward);
  o.finish();
  return p;
}

Status write_attention_plans(const std::filesystem::path& path, const std::vector<LabelledPlan>& plans) {
  json list = json::array();
  for (const LabelledPlan& lp : plans) list.push_back({{"label", lp.label}, {"plan", attention_plan_json(lp.plan)}});
  const json doc = {{"format", kFormat}, {"version", kVersion}, {"plans", std::move(list)}};
  return write_file_atomic(path, doc.dump() + "\n");
}

Expected<std::vector<LabelledPlan>> read_attention_plans(const std::filesystem::path& path) {
  auto doc = load_json_file(path);
  if (!doc) return doc.errors();
  Diagnostics diag(path.string());
  JsonObject o(*doc, "", diag);
  const std::string format = o.string("format");
  if (diag.ok() && format != kFormat) o.error("format", "expected \"" + std::string(kFormat) + "\", got \"" + format + "\"");
  o.integer("version", kVersion, kVersion);
  std::vector<LabelledPlan> out;
  const json& plans = o.array("plans");
  for (size_t i = 0; i < plans.size(); ++i) {
    JsonObject entry(plans[i], json_pointer_append("/plans", i), diag);
    LabelledPlan lp;
    lp.label = entry.string("label");
    if (const json* p = entry.raw("plan")) lp.plan = parse_attention_plan(*p, entry.pointer_of("plan"), diag);
    else entry.error("plan", "missing");
    entry.finish();
    out.push_back(std::move(lp));
  }
  o.finish();
  if (!diag.ok()) return diag.errors();
  return out;
}

}  // namespace cpbench
