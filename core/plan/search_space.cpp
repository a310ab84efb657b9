#include "core/plan/search_space.h"

#include <algorithm>
#include <utility>

namespace cpbench {
namespace {

// An optional axis: a non-empty array of integers in [lo, hi]; the fallback when absent.
std::vector<int64_t> integer_axis(JsonObject& o, const std::string& key, std::vector<int64_t> fallback, int64_t lo,
                                  int64_t hi) {
  const json* a = o.raw(key);
  if (!a) return fallback;
  std::vector<int64_t> out;
  if (a->is_array() && !a->empty())
    for (const json& v : *a) {
      if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
        o.error(key, "expected integers in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
        return fallback;
      }
      out.push_back(v.get<int64_t>());
    }
  else
    o.error(key, "expected a non-empty array, got " + json_type_name(*a));
  return out.empty() ? fallback : out;
}

}  // namespace

SearchSpace parse_search_space(JsonObject& o) {
  SearchSpace s;
  s.tp = integer_axis(o, "tp", s.tp, 1, 1024);
  s.cp = integer_axis(o, "cp", s.cp, 1, 4096);
  s.pp = integer_axis(o, "pp", s.pp, 1, 4096);
  s.layers_per_virtual_stage = integer_axis(o, "layers_per_virtual_stage", s.layers_per_virtual_stage, 0, 1 << 20);
  s.micro_batch_size = integer_axis(o, "micro_batch_size", s.micro_batch_size, 1, 1 << 20);
  if (const json* r = o.raw("recompute")) {
    const std::vector<std::string> modes = {"none", "selective", "full", "balanced"};
    std::vector<std::string> out;
    bool good = r->is_array() && !r->empty();
    for (size_t i = 0; good && i < r->size(); ++i) {
      good = (*r)[i].is_string() && std::find(modes.begin(), modes.end(), (*r)[i].get<std::string>()) != modes.end();
      if (good) out.push_back((*r)[i].get<std::string>());
    }
    if (good)
      s.recompute = out;
    else
      o.error("recompute", "expected a non-empty array of \"none\", \"selective\", \"full\", \"balanced\"");
  }
  if (const json* a = o.raw("offload_ratio")) {
    std::vector<double> out;
    bool good = a->is_array() && !a->empty();
    for (size_t i = 0; good && i < a->size(); ++i) {
      good = (*a)[i].is_number() && (*a)[i].get<double>() >= 0 && (*a)[i].get<double>() <= 1;
      if (good) out.push_back((*a)[i].get<double>());
    }
    if (good)
      s.offload_ratio = out;
    else
      o.error("offload_ratio", "expected a non-empty array of numbers in [0, 1]");
  }
  for (auto [key, axis] : {std::pair{"tp_comm_overlap", &s.tp_comm_overlap}, std::pair{"overlap_param_gather", &s.overlap_param_gather}}) {
    const json* a = o.raw(key);
    if (!a) continue;
    bool good = a->is_array() && !a->empty();
    for (size_t i = 0; good && i < a->size(); ++i) {
      good = (*a)[i].is_boolean();
      if (good) axis->push_back((*a)[i].get<bool>());
    }
    if (!good) o.error(key, "expected a non-empty array of true/false");
  }
  s.rank = o.integer_or("rank", 1, 1, 1000);
  o.finish();
  return s;
}

}  // namespace cpbench
